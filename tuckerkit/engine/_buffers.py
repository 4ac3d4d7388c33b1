"""Work buffers reused across the iterations of a decomposition, handed out only while nobody holds them."""

from __future__ import annotations

import ctypes
import math
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


#: the pool each leased block's address belongs to (a lease's finalizer hands the block back to it)
_OWNER: dict[int, BlockPool] = {}
#: the lease types by block size (a ctypes array of that many bytes whose finalizer hands its block back),
#: the most recently used last
_LEASE_TYPES: dict[int, Any] = {}
_LEASE_TYPES_KEPT = 256


def _lease_died(lease: Any) -> None:
    try:
        address = ctypes.addressof(lease)
        pool = _OWNER.pop(address, None)
        if pool is not None:
            pool._give_back(address)
    except Exception:  # pragma: no cover - (at interpreter exit this module's globals may be gone: nothing to do)
        pass


def _lease_type(nbytes: int) -> Any:
    """The ctypes type of an ``nbytes`` lease: an array of that many bytes at a block's address, whose
    instances hand the block back to its pool when they die. An array made on one (``numpy.ndarray(...,
    buffer=lease)``) holds it as its base, as does every view of that array, so it dies with the last of them."""
    t = _LEASE_TYPES.pop(nbytes, None)
    if t is None:
        t = type(f"_Lease{nbytes}", (ctypes.c_char * nbytes,), {"__slots__": (), "__del__": _lease_died})
        if len(_LEASE_TYPES) >= _LEASE_TYPES_KEPT:
            _LEASE_TYPES.pop(next(iter(_LEASE_TYPES)))
    _LEASE_TYPES[nbytes] = t
    return t


class BlockPool:
    """Blocks of memory that arrays made by the engine's calls lie in, kept after those arrays are dropped
    (up to :attr:`limit` idle bytes) and handed to the next request of about their size.

    Why: every fresh page of a new array costs a page fault on first touch, and on a virtual machine that is
    most of a TTM's time. Measured on the 2-core reference machine: 3.2 MB of fresh pages (a rank-10 TTM of
    200^3 float64) took 1.3-1.6 ms to fault in and fill against 0.19 ms for memory already mapped, 781 faults
    of about 1.7 us each; a 64 MB streaming read takes 2 ms. glibc keeps a freed block mapped only until
    another library's allocations make it trim its heap: ``ttm`` after a pyttb call faulted its whole 3.2 MB
    output every time (749 faults, 3.9-4.4 against 2.8-3.3 ms), ``numpy.einsum``'s and TensorLy's outputs alike.

    An array from the pool lies on a lease (a ctypes array at its block's address, its base); the block goes
    back to the pool when the lease dies with the last array or view on it (never while a caller holds a
    result or any view of one), so a loop that drops each result makes its next result in the same memory.
    Idle blocks beyond :attr:`limit` bytes or :data:`POOL_IDLE_BLOCKS` blocks are freed, the least recently
    idle first; :meth:`release` frees them all (``tuckerkit.engine.release_memory()``), and a limit of 0 turns
    the pool off. A request costs about 3 us more than ``numpy.empty``."""

    def __init__(self, limit: int = POOL_IDLE_BYTES) -> None:
        self.limit = int(limit)
        self._idle: list[tuple[int, np.ndarray]] = []  # (address, 1-D uint8 block), least recently idle first
        self._idle_total = 0
        self._leased: dict[int, np.ndarray] = {}  # address -> block, while arrays lie on it
        self._lock = threading.RLock()  # (a lease may die, and hand its block back, while this thread holds it)

    def _give_back(self, address: int) -> None:
        with self._lock:
            block = self._leased.pop(address, None)
            if block is None or block.nbytes > self.limit:
                return
            self._idle.append((address, block))
            self._idle_total += block.nbytes
            while self._idle_total > self.limit or len(self._idle) > POOL_IDLE_BLOCKS:
                self._idle_total -= self._idle.pop(0)[1].nbytes

    def take(self, nbytes: int, shape: tuple[int, ...] | None = None, dtype: Any = np.uint8) -> np.ndarray:
        """An uninitialized C-ordered array of ``shape`` (default ``(nbytes,)``) and ``dtype`` filling ``nbytes``
        bytes from a cache line on, whose memory goes back to the pool when it and every view of it are dropped:
        an idle block of ``nbytes`` to ``nbytes / POOL_FIT`` bytes (the smallest; of equal ones the most recently
        idle, whose lines the caches may still hold), else a new one."""
        block = None
        with self._lock:
            idle = self._idle
            best = -1
            for i in range(len(idle) - 1, -1, -1):
                size = idle[i][1].nbytes
                if nbytes <= size and nbytes >= POOL_FIT * size and (best < 0 or size < idle[best][1].nbytes):
                    best = i
                    if size == nbytes:
                        break
            if best >= 0:
                address, block = idle.pop(best)
                self._idle_total -= block.nbytes
        if block is None:
            raw = np.empty(nbytes + _ALIGN, np.uint8)
            start = (-raw.ctypes.data) % _ALIGN
            block = raw[start:start + nbytes]
            address = raw.ctypes.data + start
        lease = _lease_type(block.nbytes).from_address(address)
        with self._lock:
            self._leased[address] = block
            _OWNER[address] = self
        return np.ndarray((nbytes,) if shape is None else shape, dtype, lease)

    def set_limit(self, nbytes: int) -> int:
        """Keep at most ``nbytes`` idle bytes from now on, the least recently idle blocks beyond freed now; the
        limit before."""
        with self._lock:
            before, self.limit = self.limit, int(nbytes)
            while self._idle and self._idle_total > self.limit:
                self._idle_total -= self._idle.pop(0)[1].nbytes
        return before

    def idle_bytes(self) -> int:
        """Bytes of the idle blocks."""
        with self._lock:
            return self._idle_total

    def release(self) -> int:
        """Free every idle block; the bytes freed."""
        with self._lock:
            freed = self._idle_total
            self._idle.clear()
            self._idle_total = 0
        return freed


POOL = BlockPool()


def _after_fork_in_child() -> None:
    # a forked child starts with a fresh lock (another thread of the parent may have held this one at the fork)
    # and no idle blocks (copies of the parent's pages that it would otherwise keep); the blocks that its copies of
    # the parent's arrays lie on come back to it as those die
    POOL._lock = threading.RLock()
    POOL._idle = []
    POOL._idle_total = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def empty(shape: tuple[int, ...], dtype: Any, min_bytes: int = POOL_MIN_BYTES) -> np.ndarray:
    """An uninitialized C-ordered array of ``shape`` and ``dtype``: from :data:`POOL` when it has at least
    ``min_bytes`` and the pool is on, else ``numpy.empty``."""
    dt = np.dtype(dtype)
    nbytes = dt.itemsize * math.prod(shape)
    if nbytes < min_bytes or nbytes == 0 or POOL.limit <= 0 or dt.hasobject:
        return np.empty(shape, dtype=dt)
    return POOL.take(nbytes, tuple(shape), dt)


#: a call's own work buffers (the start Gram's packs and partials) come from the pool from this size: glibc maps
#: requests above its mmap threshold (128 KiB by default) anew on every call where that threshold is fixed, as
#: ``MALLOC_TRIM_THRESHOLD_`` in the environment makes it (Dask sets it for its workers): HOOI on 200^3 then faulted
#: in 1636 pages a call, its start Gram's buffers; from the pool, none
WORK_MIN_BYTES = 64 << 10


def work_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """:func:`empty` for a call's work buffer (from :data:`WORK_MIN_BYTES`)."""
    return empty(shape, dtype, WORK_MIN_BYTES)


def work_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """:func:`work_empty`, zeroed."""
    a = empty(shape, dtype, WORK_MIN_BYTES)
    a.fill(0)
    return a


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
    return POOL.set_limit(int(nbytes))
