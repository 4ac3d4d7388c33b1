"""Work buffers reused across the iterations of a decomposition, handed out only while nobody holds them."""

from __future__ import annotations

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
