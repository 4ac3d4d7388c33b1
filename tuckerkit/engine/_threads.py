"""CPU threading policy: single-threaded BLAS calls, parallelized by splitting the work ourselves.

On this project's reference machine (2 cores, OpenBLAS) BLAS's own threads cost more than they give for
everything but large GEMMs: a 100 x 100 eigen-solve ran 4x slower right after a threaded GEMM, and a HOOI
iteration on a 100^3 tensor 3.5x slower with two BLAS threads than with one (benchmarks/tucker.py). The
engine therefore runs every BLAS call single-threaded and splits *large* products itself: over the
batch of a strided-batched GEMM (the many small GEMMs of a batch are where BLAS threading is worst), or
over the rows or columns of one large GEMM. numpy's matmul releases the GIL, so plain Python threads
suffice. The number of workers is the BLAS thread count found on entry, so ``threadpoolctl``'s
``threadpool_limits(1)`` still makes everything serial.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

_LOCK = threading.RLock()
_STATE: dict[str, Any] = {"depth": 0, "workers": 1}

#: below this many flops a product runs in the calling thread (a thread hand-off costs ~30-50 us)
MIN_PARALLEL_FLOPS = 4_000_000


def _blas():
    if "blas" not in _STATE:
        try:
            from threadpoolctl import ThreadpoolController

            libs = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
            _STATE["blas"] = libs[0] if libs else None
        except Exception:  # pragma: no cover - threadpoolctl missing or an unknown BLAS
            _STATE["blas"] = None
    return _STATE["blas"]


def blas_threads() -> int:
    """Threads the BLAS library is currently set to use (1 when unknown)."""
    lib = _blas()
    return int(lib.num_threads) if lib is not None else 1


def workers() -> int:
    """Threads tuckerkit splits large products over (the BLAS thread count on entry)."""
    return int(_STATE["workers"]) if _STATE["depth"] > 0 else blas_threads()


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run the enclosed BLAS/LAPACK calls single-threaded (re-entrant); restores the count on exit."""
    lib = _blas()
    if lib is None:
        yield
        return
    with _LOCK:
        if _STATE["depth"] == 0:
            _STATE["workers"] = max(1, int(lib.num_threads))
            if _STATE["workers"] > 1:
                lib.set_num_threads(1)
        _STATE["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _STATE["depth"] -= 1
            if _STATE["depth"] == 0 and _STATE["workers"] > 1:
                lib.set_num_threads(_STATE["workers"])


def _pool(n: int) -> ThreadPoolExecutor:
    pool = _STATE.get("pool")
    if pool is None or _STATE.get("pool_size", 0) < n:
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tuckerkit")
        _STATE["pool"], _STATE["pool_size"] = pool, n
    return pool


def parallel_matmul(matmul, av, bv, cv, flops: int) -> None:
    """``matmul(av, bv, out=cv)`` on ``(*batch, m, k) @ (*batch, k, n)`` views, split across workers.

    Splits the largest of the batch axes, ``m`` and ``n`` (never ``k``: that would need a reduction).
    Must be called inside :func:`single_threaded_blas`.
    """
    w = workers()
    if w < 2 or flops < MIN_PARALLEL_FLOPS or threading.current_thread().name.startswith("tuckerkit"):
        matmul(av, bv, out=cv)
        return
    nd = cv.ndim
    m, n, k = cv.shape[-2], cv.shape[-1], av.shape[-1]
    if cv.size == m * n and k >= 4 * max(m, n) and m * n <= (1 << 20):
        _split_reduction(matmul, av, bv, cv, w)
        return
    # candidate axes of the output: batch axes, then m (nd-2) and n (nd-1)
    axis = max(range(nd), key=lambda i: cv.shape[i])
    size = cv.shape[axis]
    if size < 2:
        matmul(av, bv, out=cv)
        return
    w = min(w, size)
    bounds = [size * i // w for i in range(w + 1)]

    def parts(lo: int, hi: int):
        def cut(x, ax):
            if ax is None or x.shape[ax] == 1:
                return x
            idx = (slice(None),) * ax + (slice(lo, hi),)
            return x[idx]

        if axis < nd - 2:  # a batch axis: operands have it at the same position (or size 1)
            return cut(av, axis), cut(bv, axis), cut(cv, axis)
        if axis == nd - 2:  # rows: A's rows and C's rows
            return cut(av, av.ndim - 2), bv, cut(cv, axis)
        return av, cut(bv, bv.ndim - 1), cut(cv, axis)

    pool = _pool(w - 1)
    futures = []
    for lo, hi in itertools.pairwise(bounds[1:]):
        a, b, c = parts(lo, hi)
        futures.append(pool.submit(matmul, a, b, out=c))
    a, b, c = parts(bounds[0], bounds[1])
    matmul(a, b, out=c)
    for f in futures:
        f.result()


@contextmanager
def threaded_blas() -> Iterator[None]:
    """Inside :func:`single_threaded_blas`, give one large BLAS call (a big SYRK) all the workers back."""
    lib = _blas()
    w = workers()
    if lib is None or w < 2 or _STATE["depth"] == 0:
        yield
        return
    lib.set_num_threads(w)
    try:
        yield
    finally:
        lib.set_num_threads(1)


def map_workers(fn, items: list) -> list:
    """``[fn(item) for item in items]`` spread over the workers (single-threaded BLAS inside each)."""
    w = min(workers(), len(items))
    if w < 2 or threading.current_thread().name.startswith("tuckerkit"):
        return [fn(it) for it in items]
    pool = _pool(w - 1)
    futures = [pool.submit(fn, it) for it in items[1:]]
    return [fn(items[0])] + [f.result() for f in futures]


def _split_reduction(matmul, av, bv, cv, w: int) -> None:
    """Small output, long reduction (e.g. an MTTKRP over the outer modes): split ``k``, then add the parts."""
    k = av.shape[-1]
    bounds = [k * i // w for i in range(w + 1)]
    pool = _pool(w - 1)
    futures = [
        pool.submit(matmul, av[..., lo:hi], bv[..., lo:hi, :]) for lo, hi in itertools.pairwise(bounds[1:])
    ]
    matmul(av[..., bounds[0]:bounds[1]], bv[..., bounds[0]:bounds[1], :], out=cv)
    for f in futures:
        cv += f.result()
