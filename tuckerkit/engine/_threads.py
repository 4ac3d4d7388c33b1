"""CPU threading policy: BLAS threads only where they pay, our own batch split elsewhere.

On this project's reference machine (2 cores, OpenBLAS) BLAS's own threads cost more than they give for
small calls: a HOOI iteration on a 100^3 tensor ran 3.5x slower with two BLAS threads than with one
(benchmarks/tucker.py), because every small GEMM, Gram and eigen-solve woke the second thread. So:

* everything runs with single-threaded BLAS (:func:`single_threaded_blas`),
* a large *single* GEMM (or SYRK) gets BLAS's threads back for that call (:func:`threaded_blas`): BLAS
  splits one big product better than we can,
* a large *strided batch* is split over the batch by us, each thread running single-threaded GEMMs: the
  many small GEMMs of a batch are where BLAS threading is worst (1.5-2x measured on 64^3..200^3 batches).

numpy's matmul releases the GIL, so plain Python threads suffice. The number of workers is the BLAS thread
count found on entry, so ``threadpoolctl``'s ``threadpool_limits(1)`` still makes everything serial.
"""

from __future__ import annotations

import functools
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


def with_single_threaded_blas(fn):
    """Decorator: run ``fn`` inside :func:`single_threaded_blas` (the decompositions' threading policy)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded_blas():
            return fn(*args, **kwargs)

    return wrapper


def _pool(n: int) -> ThreadPoolExecutor:
    pool = _STATE.get("pool")
    if pool is None or _STATE.get("pool_size", 0) < n:
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tuckerkit")
        _STATE["pool"], _STATE["pool_size"] = pool, n
    return pool


def run_matmul(matmul, av, bv, cv, flops: int) -> None:
    """The engine's entry: outside a decomposition, leave BLAS as the caller set it unless a large batch is
    to be split (toggling BLAS threads costs a thread wake-up on the next call, ~0.1 ms)."""
    batched = any(s >= 2 for s in cv.shape[:-2])
    if _STATE["depth"] == 0 and not (batched and flops >= MIN_PARALLEL_FLOPS and blas_threads() >= 2):
        matmul(av, bv, out=cv)
        return
    with single_threaded_blas():
        parallel_matmul(matmul, av, bv, cv, flops)


def parallel_matmul(matmul, av, bv, cv, flops: int) -> None:
    """``matmul(av, bv, out=cv)`` on ``(*batch, m, k) @ (*batch, k, n)`` views with the policy above.

    Must be called inside :func:`single_threaded_blas`.
    """
    w = workers()
    if w < 2 or flops < MIN_PARALLEL_FLOPS or threading.current_thread().name.startswith("tuckerkit"):
        matmul(av, bv, out=cv)
        return
    nd = cv.ndim
    batch_axes = [i for i in range(nd - 2) if cv.shape[i] >= 2]
    if not batch_axes:
        # one large GEMM: BLAS's own threads split it best (measured against our row/column/k splits)
        with threaded_blas():
            matmul(av, bv, out=cv)
        return
    # a strided batch: split the batch, single-threaded BLAS per GEMM (1.5-2x faster than BLAS threads)
    axis = max(batch_axes, key=lambda i: cv.shape[i])
    size = cv.shape[axis]
    w = min(w, size)
    bounds = [size * i // w for i in range(w + 1)]

    def parts(lo: int, hi: int):
        # operands hold the batch axis at the same position, or broadcast it with size 1
        def cut(x):
            return x if x.shape[axis] == 1 else x[(slice(None),) * axis + (slice(lo, hi),)]

        return cut(av), cut(bv), cut(cv)

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
    """Inside :func:`single_threaded_blas`, give one large BLAS call (a big GEMM or SYRK) the threads back."""
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
