"""Batch-parallel execution of strided-batched GEMMs on the CPU.

OpenBLAS parallelizes inside each GEMM; for the many small GEMMs of a strided batch that parallelism is
poor (a 16 x 200 x 200 GEMM is over before its threads have spun up). Splitting the *batch* across the
same number of threads, each running single-threaded GEMMs, measured 1.5-2x faster on 2 cores for
64^3..200^3 batches (see benchmarks/ttm.py). numpy's matmul releases the GIL around BLAS, so plain
Python threads suffice. The BLAS thread count is restored afterwards; a caller who limited BLAS to one
thread (threadpoolctl) gets a serial loop.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}

#: below this many flops a batched product runs serially (thread hand-off costs ~50 us)
MIN_PARALLEL_FLOPS = 8_000_000


def _blas():
    if "blas" not in _STATE:
        try:
            from threadpoolctl import ThreadpoolController

            libs = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
            _STATE["blas"] = libs[0] if libs else None
        except Exception:  # pragma: no cover - threadpoolctl missing or an unknown BLAS
            _STATE["blas"] = None
    return _STATE["blas"]


def _pool(workers: int) -> ThreadPoolExecutor:
    pool = _STATE.get("pool")
    if pool is None or _STATE.get("workers", 0) < workers:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tuckerkit-batch")
        _STATE["pool"], _STATE["workers"] = pool, workers
    return pool


def blas_threads() -> int:
    """Threads the BLAS library is currently set to use (1 when unknown)."""
    lib = _blas()
    return int(lib.num_threads) if lib is not None else 1


def batched_matmul(matmul, av, bv, cv) -> None:
    """``matmul(av, bv, out=cv)`` with the outermost splittable batch axis divided among BLAS's threads."""
    lib = _blas()
    orig = blas_threads()
    workers = orig
    axis = next((i for i, s in enumerate(cv.shape[:-2]) if s >= 2), None)
    if lib is None or workers < 2 or axis is None or not _LOCK.acquire(blocking=False):
        matmul(av, bv, out=cv)
        return
    try:
        size = cv.shape[axis]
        workers = min(workers, size)
        bounds = [size * w // workers for w in range(workers + 1)]

        def part(x, lo, hi):
            if x.shape[axis] == 1:
                return x
            idx = (slice(None),) * axis + (slice(lo, hi),)
            return x[idx]

        lib.set_num_threads(1)
        try:
            pool = _pool(workers - 1)
            futures = [
                pool.submit(matmul, part(av, lo, hi), part(bv, lo, hi), out=part(cv, lo, hi))
                for lo, hi in itertools.pairwise(bounds[1:])
            ]
            matmul(part(av, bounds[0], bounds[1]), part(bv, bounds[0], bounds[1]), out=part(cv, bounds[0], bounds[1]))
            for f in futures:
                f.result()
        finally:
            lib.set_num_threads(orig)
    finally:
        _LOCK.release()
