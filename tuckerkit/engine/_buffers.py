"""Work buffers reused across the iterations of a decomposition, handed out only while nobody holds them."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

#: buffers kept per key: two cover a result the caller still holds (CP-ALS keeps the last MTTKRP for its fit,
#: the factor being replaced is read while its successor is written) while the next one of the key is made
POOL_SIZE = 2
_lock = threading.Lock()


def _new_entry(shape: tuple[int, ...], dtype: Any) -> list:
    from tuckerkit.sparse._mttkrp import aligned_zeros

    arr = aligned_zeros(shape, dtype)
    return [arr.base, arr]  # the owning bytes (every view's base collapses to them) and the array


def _refs(entry: list) -> tuple[int, int]:
    """References to an entry's bytes and to its array (a caller's view of the array holds the bytes)."""
    return sys.getrefcount(entry[0]), sys.getrefcount(entry[1])


def pooled(cache: dict, key: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A C-contiguous, cache-line aligned array of ``shape`` and ``dtype`` kept in ``cache`` under ``key``
    (with the shape and dtype) and handed out again by later calls: its contents are stale.

    An array goes out again only when nothing outside ``cache`` refers to it or to a view of it (a result the
    caller still holds, a call running in another thread); otherwise another one is made, of which at most
    :data:`POOL_SIZE` per key are kept. So a caller never sees an array it holds overwritten, and a loop
    that drops each result before the next call reuses the same memory (no fresh pages to fault in, no
    heap growth)."""
    dtype = np.dtype(dtype)
    full = (key, tuple(int(s) for s in shape), dtype.str)
    with _lock:
        entries = cache.setdefault(full, [])
        for entry in entries:
            if _refs(entry) == entry[2]:
                return entry[1]
        entry = _new_entry(shape, dtype)
        if len(entries) >= POOL_SIZE:
            return entry[1]
        entry.append(())
        entries.append(entry)
        entry[2] = _refs(entry)  # the counts of a free entry (the pool's own references only)
        return entry[1]


# ---------------------------------------------------------------------------------------------------------------
# The block pool: fresh arrays of the engine's calls on memory that a dropped result left behind
# ---------------------------------------------------------------------------------------------------------------

#: an array of at least this many bytes that a call makes without an active workspace (a result it returns, a
#: temporary) comes from the block pool (:func:`empty`); smaller ones from numpy
POOL_MIN_BYTES = 256 << 10
#: idle bytes the pool keeps by default (blocks no array refers to any more), and the most idle blocks
POOL_IDLE_BYTES = 128 << 20
POOL_IDLE_BLOCKS = 16
#: an idle block serves a request of at least this fraction of its bytes (the rest of it stays unused meanwhile)
POOL_FIT = 0.8
_ALIGN = 64


class _Lease:
    """The owner of one pooled block while arrays refer to it: the arrays of :func:`empty` are views of an array
    made from this object's ``__array_interface__``, so it lives exactly as long as any of them, and its
    finalizer hands the block back to the pool."""

    __slots__ = ("__array_interface__", "block", "pool")

    def __init__(self, pool: BlockPool, block: np.ndarray, nbytes: int) -> None:
        self.pool = pool
        self.block = block
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (block.ctypes.data, False),
                                    "version": 3}

    def __del__(self) -> None:
        try:
            self.pool._give_back(self.block)
        except Exception:  # pragma: no cover - (interpreter shutdown: the pool's module may be gone)
            pass


class BlockPool:
    """Blocks of memory that arrays made by the engine's calls are views of, kept after those arrays are dropped
    (up to :attr:`limit` idle bytes) and handed to the next request of about their size.

    Why: every fresh page of a new array costs a page fault on first touch, and on a virtual machine that is
    most of a TTM's time. Measured on the 2-core reference machine: 3.2 MB of fresh pages (a rank-10 TTM of
    200^3 float64) took 1.3-1.6 ms to fault in and fill against 0.19 ms for memory already mapped, 781 faults
    of about 1.7 us each; a 64 MB streaming read takes 2 ms. glibc keeps a freed block mapped only until
    another library's allocations make it trim its heap: ``ttm`` after a pyttb call faulted its whole 3.2 MB
    output every time (749 faults, 3.9-4.4 against 2.8-3.3 ms), ``numpy.einsum``'s and TensorLy's outputs alike.

    A block goes back to the pool when the last array referring to it is dropped (never while a caller holds a
    result or any view of one), so a loop that drops each result makes its next result in the same memory.
    Idle blocks beyond :attr:`limit` bytes or :data:`POOL_IDLE_BLOCKS` blocks are freed, the least recently
    idle first; :meth:`release` frees them all (``tuckerkit.engine.release_memory()``), and a limit of 0 turns
    the pool off."""

    def __init__(self, limit: int = POOL_IDLE_BYTES) -> None:
        self.limit = int(limit)
        self._idle: list[np.ndarray] = []  # least recently idle first
        self._lock = threading.RLock()  # (a lease may die, and hand its block back, while this thread holds it)

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            if block.nbytes > self.limit:
                return
            self._idle.append(block)
            total = sum(b.nbytes for b in self._idle)
            while total > self.limit or len(self._idle) > POOL_IDLE_BLOCKS:
                total -= self._idle.pop(0).nbytes

    def take(self, nbytes: int) -> np.ndarray:
        """A 1-D uint8 array of ``nbytes`` bytes starting on a cache line, whose memory goes back to the pool
        when it and every view of it are dropped: an idle block of ``nbytes`` to ``nbytes / POOL_FIT`` bytes (the
        smallest), else a new one."""
        block = None
        with self._lock:
            best = -1
            for i, b in enumerate(self._idle):
                fits = nbytes <= b.nbytes and nbytes >= POOL_FIT * b.nbytes
                if fits and (best < 0 or b.nbytes < self._idle[best].nbytes):
                    best = i
            if best >= 0:
                block = self._idle.pop(best)
        if block is None:
            raw = np.empty(nbytes + _ALIGN, np.uint8)
            start = (-raw.ctypes.data) % _ALIGN
            block = raw[start:start + nbytes]
        return np.asarray(_Lease(self, block, nbytes))

    def idle_bytes(self) -> int:
        """Bytes of the idle blocks."""
        with self._lock:
            return sum(b.nbytes for b in self._idle)

    def release(self) -> int:
        """Free every idle block; the bytes freed."""
        with self._lock:
            freed = sum(b.nbytes for b in self._idle)
            self._idle.clear()
        return freed


POOL = BlockPool()


def _after_fork_in_child() -> None:
    # a forked child starts with a fresh lock (another thread of the parent may have held this one at the fork)
    # and no idle blocks (copies of the parent's pages that it would otherwise keep)
    POOL._lock = threading.RLock()
    POOL._idle = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized C-ordered array of ``shape`` and ``dtype``: from :data:`POOL` when it has at least
    :data:`POOL_MIN_BYTES` and the pool is on, else ``numpy.empty``."""
    dt = np.dtype(dtype)
    nbytes = dt.itemsize
    for s in shape:
        nbytes *= int(s)
    if nbytes < POOL_MIN_BYTES or POOL.limit <= 0 or dt.hasobject:
        return np.empty(shape, dtype=dt)
    return POOL.take(nbytes).view(dt).reshape(shape)


def release_memory() -> int:
    """Free the memory the engine keeps for its next arrays (the block pool's idle blocks).

    The engine makes the arrays of its calls (results and temporaries of 256 KiB or more) in blocks that it
    keeps when they are dropped (at most 128 MiB of them by default, see :func:`set_pool_limit`) and reuses for
    the next call, so that repeated calls do not fault in fresh pages (1.3-1.6 ms for a 3.2 MB result on a
    virtual machine). Blocks that results still refer to are never freed nor reused.

    Returns
    -------
    int
        The bytes freed.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import release_memory, ttm
    >>> Y = ttm(np.ones((100, 100, 100)), np.ones((100, 8)), 0, transpose=True)
    >>> del Y
    >>> release_memory() >= 8 * 100 * 100 * 8
    True
    >>> release_memory()
    0
    """
    return POOL.release()


def set_pool_limit(nbytes: int) -> int:
    """Keep at most ``nbytes`` of idle blocks for the engine's next arrays; idle blocks beyond it are freed now.

    Parameters
    ----------
    nbytes : int
        The most bytes of idle blocks kept (0: none, every array of the engine's calls comes from numpy). The
        default is 128 MiB.

    Returns
    -------
    int
        The limit before.

    Examples
    --------
    >>> from tuckerkit.engine import set_pool_limit
    >>> before = set_pool_limit(0)
    >>> set_pool_limit(before)
    0
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise ValueError(f"nbytes={nbytes!r} is invalid; expected an integer >= 0")
    with POOL._lock:
        before, POOL.limit = POOL.limit, int(nbytes)
        total = sum(b.nbytes for b in POOL._idle)
        while POOL._idle and total > POOL.limit:
            total -= POOL._idle.pop(0).nbytes
    return before
