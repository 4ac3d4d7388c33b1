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
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

_LOCK = threading.RLock()
_STATE: dict[str, Any] = {"depth": 0, "workers": 1}

#: below this many flops a product runs in the calling thread (a thread hand-off costs ~30-50 us)
MIN_PARALLEL_FLOPS = 4_000_000
#: the smallest piece of a split product (about 0.1-0.2 ms of one core)
MIN_CHUNK_FLOPS = 1_000_000


class _AllBlas:
    """Every BLAS library loaded in the process, switched together.

    numpy and scipy wheels each bundle their own OpenBLAS: limiting only numpy's left scipy's LAPACK
    (``eigh``, ``svd``, Cholesky) on two threads whose busy-waiting helpers then competed with tuckerkit's
    own threads (a HOOI next to one busy process ran 1.7x slower than under ``threadpool_limits(1)``).
    """

    def __init__(self, libs: list) -> None:
        self.libs = libs

    @property
    def num_threads(self) -> int:
        return max(int(lib.num_threads) for lib in self.libs)

    def get(self) -> list[int]:
        return [int(lib.num_threads) for lib in self.libs]

    def set_num_threads(self, n: int | list[int]) -> None:
        for lib, k in zip(self.libs, n if isinstance(n, list) else [n] * len(self.libs), strict=True):
            if int(lib.num_threads) != k:
                lib.set_num_threads(k)


def _blas() -> _AllBlas | None:
    if "blas" not in _STATE:
        try:
            from threadpoolctl import ThreadpoolController

            libs = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
            _STATE["blas"] = _AllBlas(libs) if libs else None
        except Exception:  # pragma: no cover - threadpoolctl missing or an unknown BLAS
            _STATE["blas"] = None
    return _STATE["blas"]


def blas_threads() -> int:
    """Threads the BLAS library is currently set to use (1 when unknown)."""
    lib = _blas()
    return int(lib.num_threads) if lib is not None else 1


def _running_elsewhere() -> int | None:
    """Runnable threads of other processes right now (Linux: /proc/loadavg minus our own running threads)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        own = 0
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            own += stat[stat.rfind(")") + 2] == "R"
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - own)


def free_cpus() -> int:
    """CPUs not busy with other processes, sampled at most every 0.5 s (the CPU count where unknown).

    Splitting work over threads pays only when every thread gets a core: next to one busy process on a
    2-core machine, a HOOI iteration with two threads ran 1.5-2x slower than with one (each hand-off waits
    for a scheduler slice), so tuckerkit drops to one thread while the machine is loaded.
    """
    now = time.monotonic()
    cached = _STATE.get("free")
    if cached is not None and now - cached[0] < 0.5:
        return cached[1]
    try:
        ncpu = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        ncpu = os.cpu_count() or 1
    busy = _running_elsewhere()
    # /proc/loadavg counts the whole machine (the host's CPUs, in a container or under an affinity mask):
    # scale the busy count to the CPUs this process may use
    total = max(os.cpu_count() or ncpu, ncpu)
    free = ncpu if busy is None else max(1, ncpu - round(busy * ncpu / total))
    _STATE["free"] = (now, free)
    return free


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
            _STATE["saved_threads"] = lib.get()
            _STATE["blas_threads"] = max(1, lib.num_threads)
            _STATE["workers"] = min(_STATE["blas_threads"], free_cpus())
            if _STATE["blas_threads"] > 1:
                lib.set_num_threads(1)
        _STATE["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _STATE["depth"] -= 1
            if _STATE["depth"] == 0 and _STATE["blas_threads"] > 1:
                lib.set_num_threads(_STATE["saved_threads"])


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


def dynamic_for(work: Callable[[int, Any], None], n_items: int, make_state: Callable[[], Any] = lambda: None,
                workers_: int | None = None) -> list[Any]:
    """Run ``work(i, state)`` for ``i in range(n_items)`` on the calling thread and the pool's threads.

    Each thread takes the next unclaimed item when it is free (dynamic scheduling), with its own ``state``
    from ``make_state()``; the states of the threads that took part are returned. With a static split,
    one descheduled thread (another process on the machine, a hypervisor's steal) makes everyone wait for
    its whole share: a HOOI on 200 x 25 x 25 ran 17x slower next to one busy process. Here the caller
    waits for at most the item in flight, and pool threads that never started are cancelled.
    """
    w = min(workers() if workers_ is None else workers_, n_items)
    if w < 2 or threading.current_thread().name.startswith("tuckerkit"):
        st = make_state()
        for i in range(n_items):
            work(i, st)
        return [st]
    counter = itertools.count()
    lock = threading.Lock()
    failed = threading.Event()

    def drain() -> Any:
        st = None
        while not failed.is_set():
            with lock:
                i = next(counter)
            if i >= n_items:
                return st
            if st is None:
                st = make_state()
            try:
                work(i, st)
            except BaseException:
                failed.set()  # the other threads stop taking items
                raise
        return st

    pool = _pool(w - 1)
    t0, c0 = time.perf_counter(), time.process_time()
    futures = [pool.submit(drain) for _ in range(w - 1)]
    error: BaseException | None = None
    try:
        states = [drain()]
    except BaseException as exc:
        error, states = exc, []
    for f in futures:
        if f.cancel():  # never started
            continue
        try:  # already running: it holds at most one item; never leave it writing after we return
            states.append(f.result())
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
    _record(time.perf_counter() - t0, time.process_time() - c0)
    return [st for st in states if st is not None]


def _record(wall: float, cpu: float) -> None:
    """Track how much parallelism the split products actually got (CPU seconds per wall second)."""
    st = _STATE.setdefault("eff", [0.0, 0.0])
    st[0] += wall
    st[1] += cpu


def _chunks(size: int, flops: int, w: int) -> list[int]:
    """Cut points splitting ``size`` into up to ``4 w`` pieces of at least MIN_CHUNK_FLOPS each."""
    n = max(1, min(size, 4 * w, flops // MIN_CHUNK_FLOPS))
    return [size * i // n for i in range(n + 1)]


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
        # one large GEMM: BLAS's own threads split it best (CP-ALS on 200^3: 18-21 ms per iteration against
        # 36-38 ms with our row blocks, whose skinny GEMMs each re-read the shared operand)
        with threaded_blas():
            matmul(av, bv, out=cv)
        return
    # a strided batch: split the batch, single-threaded BLAS per GEMM (1.5-2x faster than BLAS threads)
    axis = max(batch_axes, key=lambda i: cv.shape[i])
    bounds = _chunks(cv.shape[axis], flops, w)
    if len(bounds) <= 2:
        matmul(av, bv, out=cv)
        return

    def cut(x, lo: int, hi: int):
        if x.shape[axis] == 1:  # operands hold the batch axis at the same position, or broadcast it
            return x
        return x[(slice(None),) * axis + (slice(lo, hi),)]

    def work(i: int, _: Any) -> None:
        lo, hi = bounds[i], bounds[i + 1]
        matmul(cut(av, lo, hi), cut(bv, lo, hi), out=cut(cv, lo, hi))

    dynamic_for(work, len(bounds) - 1, workers_=w)


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
    """``[fn(item) for item in items]`` spread over the workers (single-threaded BLAS inside each),
    dynamically scheduled (see :func:`dynamic_for`)."""
    out: list[Any] = [None] * len(items)

    def work(i: int, _: Any) -> None:
        out[i] = fn(items[i])

    dynamic_for(work, len(items))
    return out
