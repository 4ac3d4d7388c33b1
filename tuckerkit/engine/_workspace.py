"""Large temporaries kept across the sweeps of one decomposition call.

glibc maps every block of 32 MiB and more (its ceiling for the dynamic mmap threshold) anew on allocation and
unmaps it on free, so each such temporary is zeroed page by page by the kernel on first touch: 5 ms per 65 MB
on a quiet 2-core machine, and over 40 ms when the system must first compact memory for huge pages. HOOI's
projections of a large tensor at a low compression (30^5 at rank 10: 65 MB after the first mode of each half)
paid that in every sweep. A :class:`Workspace` keeps such blocks for the call: a request takes an idle block of
its size (up to twice its bytes) or maps a new one, and after each projection the workspace keeps at most one
idle block (the largest), so it holds at most one block beyond those in use.

A block is idle when nothing references it (or any view of it) but the workspace: its reference count says so
(compared with the count of a block nothing else holds, taken the same way, so the interpreter's own
accounting of the call cancels), so a partial that a caller keeps is never handed out again. Only the thread
that activated the workspace draws from it (:func:`using`); the kernels' helper threads allocate nothing. A
free-threaded Python (no GIL) gets no workspace: its reference counts are not exact while other threads run.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from tuckerkit.engine import _buffers

#: requests of at least this many bytes come from an active workspace (smaller ones from numpy, whose glibc
#: blocks below the mmap threshold are reused without new page faults)
MIN_BYTES = 32 << 20

_ACTIVE = threading.local()


def _count(blocks: list[np.ndarray], i: int) -> int:
    return sys.getrefcount(blocks[i])


#: the reference count :func:`_count` reports for a block that only its list holds (the list's reference and
#: whatever the call itself adds; every view of a block adds one more)
_IDLE_COUNT = _count([np.empty(1, np.uint8)], 0)


def supported() -> bool:
    """Whether reference counts tell idle blocks here: a Python with the GIL."""
    return getattr(sys, "_is_gil_enabled", lambda: True)()


class Workspace:
    """Blocks of at least :data:`MIN_BYTES` for the temporaries of one decomposition call (see the module)."""

    __slots__ = ("blocks", "lock")

    def __init__(self) -> None:
        self.blocks: list[np.ndarray] = []  # 1-D uint8 arrays owned here
        # (two threads sweeping one operand at once: a block's check and its view, which marks it in use, as one step)
        self.lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # (a copy or pickle starts empty: blocks are this process's memory)
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def _idle(self, i: int) -> bool:
        return _count(self.blocks, i) == _IDLE_COUNT

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialized C-ordered array: a view of an idle block of ``nbytes``-``2 nbytes`` bytes (the
        smallest), or of a new block of exactly its bytes."""
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        with self.lock:
            best = -1
            for i in range(len(self.blocks)):
                size = self.blocks[i].nbytes
                if nbytes <= size <= 2 * nbytes and self._idle(i) and (best < 0 or size < self.blocks[best].nbytes):
                    best = i
            if best < 0:
                self.blocks.append(np.empty(nbytes, np.uint8))
                best = len(self.blocks) - 1
            return self.blocks[best][:nbytes].view(dt).reshape(shape)

    def trim(self) -> None:
        """Keep at most one idle block (the largest); the others go back to the system."""
        with self.lock:
            idle = [i for i in range(len(self.blocks)) if self._idle(i)]
            if len(idle) > 1:
                keep = max(idle, key=lambda i: self.blocks[i].nbytes)
                drop = set(idle) - {keep}
                self.blocks = [b for i, b in enumerate(self.blocks) if i not in drop]

    def held_bytes(self) -> int:
        """Bytes of all blocks, in use or idle."""
        return sum(b.nbytes for b in self.blocks)


def active() -> Workspace | None:
    """The workspace this thread draws its large temporaries from, if any."""
    return getattr(_ACTIVE, "ws", None)


@contextlib.contextmanager
def using(ws: Workspace | None) -> Iterator[None]:
    """Draw this thread's large temporaries from ``ws`` (None: from numpy) within the block."""
    before = getattr(_ACTIVE, "ws", None)
    _ACTIVE.ws = ws
    try:
        yield
    finally:
        _ACTIVE.ws = before


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, from the active workspace where there is one and the array is large, else from
    the engine's block pool (:func:`tuckerkit.engine._buffers.empty`: numpy's for small arrays)."""
    ws = getattr(_ACTIVE, "ws", None)
    if ws is not None:
        dt = np.dtype(dtype)
        if math.prod(shape) * dt.itemsize >= MIN_BYTES:
            a = ws.empty(tuple(shape), dt)
            if a.flags.aligned:  # (malloc's 16 bytes hold every dtype here; numpy's own array otherwise)
                return a
    return _buffers.empty(shape, dtype)
