"""Out-of-core tensors: a large array (a memory-mapped ``.npy``, an HDF5 or zarr dataset) read in slabs along
its first mode, with every pass's memory bounded by a ``memory_limit``.

The engine dispatches to a :class:`SlabTensor` the way it dispatches to a sparse tensor: HOOI's projections
(``ttmc_sweep``), the Gram and TTM of ST-HOSVD's first step and the norm stream over the slabs and keep only
small results in memory; everything after the first projection runs in memory as usual. The next slab is
read on a background thread while the current one is processed.
"""

from __future__ import annotations

import math
import mmap
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

_UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "TIB": 2**40}


def parse_memory(value: Any, name: str = "memory_limit") -> int:
    """Bytes from an int or a string such as ``"4GB"``, ``"512 MiB"`` or ``"2e9"``.

    Examples
    --------
    >>> parse_memory("4GB"), parse_memory("512 MiB"), parse_memory(1000)
    (4000000000, 536870912, 1000)
    """
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        v = int(value)
    else:
        m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", str(value))
        unit = m.group(2).upper() if m else ""
        if not m or unit not in _UNITS:
            raise ValueError(f"{name}={value!r} is not a memory size; expected bytes or e.g. '4GB', '512MiB'")
        v = int(float(m.group(1)) * _UNITS[unit])
    if v <= 0:
        raise ValueError(f"{name}={value!r} is not positive; expected a memory size such as '4GB'")
    return v


class SlabTensor:
    """A tensor read in slabs along mode 0 so that no pass holds more than ``memory_limit`` bytes.

    Parameters
    ----------
    data : array-like with ``shape``, ``dtype`` and slicing along axis 0
        A ``numpy.memmap`` (e.g. ``numpy.load(path, mmap_mode="r")``), an ``h5py`` dataset, a zarr array.
    memory_limit : int or str
        Bytes (or ``"4GB"``) that slabs, their prefetched successor and the in-memory projections may use.
    dtype : {None, float32, float64}
        The dtype slabs are converted to as they are read; default the data's (float64 for integers).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import SlabTensor
    >>> X = SlabTensor(np.ones((100, 20, 30)), memory_limit="100KB")
    >>> X.slab_rows, round(X.norm() ** 2)
    (5, 60000)
    """

    def __init__(self, data: Any, memory_limit: Any, dtype: Any = None):
        if not all(hasattr(data, a) for a in ("shape", "dtype", "__getitem__")):
            raise TypeError(f"data must be an array-like with shape, dtype and slicing; received {type(data).__name__}")
        if len(data.shape) < 2:
            raise ValueError(f"data must have at least 2 dimensions; received shape {tuple(data.shape)}")
        self.data = data
        self.shape = tuple(int(s) for s in data.shape)
        dt = np.dtype(data.dtype if dtype is None else dtype)
        if dtype is not None and dt not in (np.float32, np.float64):
            raise TypeError(f"dtype={dt} is not supported; expected float32 or float64")
        self.dtype = dt if dt in (np.float32, np.float64) else np.dtype(np.float64)
        self.memory_limit = parse_memory(memory_limit)
        row = math.prod(self.shape[1:]) * self.dtype.itemsize
        # the slab being processed, the one being read and the projection temporaries share the limit
        self.slab_rows = max(1, min(self.shape[0], int(self.memory_limit // (4 * max(row, 1)))))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"SlabTensor(shape={self.shape}, dtype={self.dtype}, memory_limit={self.memory_limit:,}, "
                f"slab_rows={self.slab_rows})")

    # -- streaming -----------------------------------------------------------------------------------
    def slabs(self, rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, slab)`` along mode 0, the next slab read on a background thread meanwhile."""
        step = rows or self.slab_rows
        starts = list(range(0, self.shape[0], step))

        direct = self._file_source()

        def read(s: int) -> np.ndarray:
            if direct is not None:  # read the bytes into our own buffer: nothing of the file stays mapped
                path, offset, src_dtype = direct
                rows = min(step, self.shape[0] - s)
                row = math.prod(self.shape[1:])
                buf = np.empty((rows, *self.shape[1:]), dtype=src_dtype)
                with open(path, "rb") as f:
                    f.seek(offset + s * row * src_dtype.itemsize)
                    n = f.readinto(buf.reshape(-1).view(np.uint8).data)
                if n != buf.nbytes:
                    raise OSError(f"{path}: expected {buf.nbytes} bytes at row {s}, read {n} (truncated file?)")
                return buf if src_dtype == self.dtype else buf.astype(self.dtype)
            return np.ascontiguousarray(self.data[s:s + step], dtype=self.dtype)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tuckerkit-read") as pool:
            nxt = pool.submit(read, starts[0]) if starts else None
            for i, s in enumerate(starts):
                assert nxt is not None
                slab = nxt.result()
                nxt = pool.submit(read, starts[i + 1]) if i + 1 < len(starts) else None
                yield s, slab
                del slab

    def _file_source(self) -> tuple[str, int, np.dtype] | None:
        """``(path, offset, dtype)`` of a C-ordered ``numpy.memmap``: read with plain file reads, so the
        process's resident memory holds only the slabs (a memory map keeps every page it touched resident,
        which made a 4 GB file read under a 1 GB limit peak at 5 GB RSS)."""
        d = self.data
        if (isinstance(d, np.memmap) and getattr(d, "filename", None) and d.flags.c_contiguous
                and isinstance(d.base, mmap.mmap)):  # the mapped array itself, not a view of it
            return str(d.filename), int(d.offset), np.dtype(d.dtype)
        return None

    def norm(self) -> float:
        """Frobenius norm in one pass (float64 accumulation); NaN or Inf anywhere gives a clear error."""
        total = 0.0
        step = 1 << 20  # float64 accumulation piece by piece: a float64 copy of a whole slab is 2x its size
        for _, slab in self.slabs():
            v = slab.reshape(-1)
            for i in range(0, v.size, step):
                w = v[i:i + step].astype(np.float64, copy=False)
                total += float(np.dot(w, w))
        if not math.isfinite(total):
            raise ValueError("X contains NaN or infinite value(s); remove or impute them first")
        return math.sqrt(total)

    def _tk_gram(self, mode: int) -> np.ndarray:
        """``X_(n) X_(n)^T`` for ``mode >= 1``: the sum of the slabs' Grams (one pass)."""
        from tuckerkit.engine._ops import gram

        if mode == 0:
            raise ValueError("a SlabTensor streams along mode 0; its mode-0 Gram needs every pair of slabs")
        G = np.zeros((self.shape[mode],) * 2, dtype=self.dtype)
        for _, slab in self.slabs():
            G += gram(slab, mode)
        return G

    def _check_fits(self, shape: list[int], what: str) -> None:
        """Refuse an in-memory result that alone would exceed the memory limit."""
        need = math.prod(shape) * self.dtype.itemsize
        if need > self.memory_limit:
            raise ValueError(
                f"memory_limit={self.memory_limit:,} bytes is too small: {what} has shape {tuple(shape)} "
                f"({need:,} bytes), more than the limit; raise memory_limit or lower the ranks"
            )

    def _tk_ttm(self, U: Any, mode: int) -> np.ndarray:
        """``X x_mode U^T`` in memory (one pass; mode 0 is accumulated over the slabs)."""
        return self._tk_project({mode: U}, f"the mode-{mode} projection")

    def _tk_project(self, mats: dict[int, Any], what: str = "the projection") -> np.ndarray:
        """``X x_m U_m^T`` for every ``m`` in ``mats``, in one pass (mode 0, if in ``mats``, accumulated over
        the slabs; otherwise each slab's product is written in place)."""
        from tuckerkit.engine._ops import multi_ttm, ttm

        modes = sorted(mats)
        out_shape = [mats[m].shape[1] if m in mats else self.shape[m] for m in range(self.ndim)]
        self._check_fits(out_shape, what)
        Y = np.zeros(out_shape, dtype=self.dtype) if 0 in mats else np.empty(out_shape, dtype=self.dtype)
        for s, slab in self.slabs():
            rows = slab.shape[0]
            local = [mats[m][s:s + rows] if m == 0 else mats[m] for m in modes]
            if 0 in mats:
                Y += multi_ttm(slab, local, modes=modes, transpose=True)
            elif len(modes) == 1:
                ttm(slab, local[0], modes[0], transpose=True, out=Y[s:s + rows])
            else:
                Y[s:s + rows] = multi_ttm(slab, local, modes=modes, transpose=True)
        return Y

    def _tk_ttmc_sweep(self, factors: list[Any], update: Callable[[int, Any], None]) -> tuple[Any, ...]:
        """HOOI's projections in two passes: the second half of the modes projected slab by slab (kept in
        memory), then the first half (mode 0 included) accumulated over the slabs with the updated factors."""
        from tuckerkit.engine._ops import _ttmc_tree, multi_ttm

        N = self.ndim
        half = (N + 1) // 2
        first, second = list(range(half)), list(range(half, N))
        plans: list[Any] = []
        shape1 = [self.shape[m] if m < half else factors[m].shape[1] for m in range(N)]
        self._check_fits(shape1, "the projection on the last modes")
        Y1 = np.empty(shape1, dtype=self.dtype)
        mats = [factors[m] for m in second]
        for s, slab in self.slabs():
            Y1[s:s + slab.shape[0]] = multi_ttm(slab, mats, modes=second, transpose=True)
        _ttmc_tree(Y1, first, factors, update, plans)
        del Y1
        shape2 = [factors[m].shape[1] if m < half else self.shape[m] for m in range(N)]
        Y2 = np.zeros(shape2, dtype=self.dtype)
        rest = [m for m in first if m != 0]
        for s, slab in self.slabs():
            U0 = factors[0][s:s + slab.shape[0]]
            part = multi_ttm(slab, [U0, *(factors[m] for m in rest)], modes=[0, *rest], transpose=True)
            Y2 += part
        _ttmc_tree(Y2, second, factors, update, plans)
        return tuple(plans)

    def _tk_mttkrp_sweep(self, factors: list[Any], update: Callable[[int, Any], None]) -> tuple[Any, ...]:
        """CP-ALS's N MTTKRPs in two passes, the dimension tree of :func:`~tuckerkit.engine.mttkrp_sweep`:
        the last modes are contracted slab by slab with their Khatri-Rao product into an in-memory partial
        ``(I_0, ..., R)`` that serves the first modes' MTTKRPs; then the first modes (mode 0 included, with
        the updated factors) are contracted and summed over the slabs for the last modes'."""
        from tuckerkit.engine._ops import _MttkrpTree

        N = self.ndim
        half = (N + 1) // 2
        first, second = list(range(half)), list(range(half, N))
        R = int(factors[0].shape[1])
        plans: list[Any] = []
        shape1 = [*(self.shape[m] for m in first), R]
        self._check_fits(shape1, "the MTTKRP partial over the first modes")
        P1 = np.empty(shape1, dtype=self.dtype)
        for s, slab in self.slabs():
            tree = _MttkrpTree(np, slab.shape, factors, update, plans if s == 0 else [])
            T, _ = tree.contract_modes(slab, list(range(N)), second, False)
            P1[s:s + slab.shape[0]] = T
        _MttkrpTree(np, self.shape, factors, update, plans).rec(P1, first, True, first)
        del P1
        P2 = None
        for s, slab in self.slabs():
            local = [factors[0][s:s + slab.shape[0]], *factors[1:]]
            tree = _MttkrpTree(np, slab.shape, local, update, plans if s == 0 else [])
            T, _ = tree.contract_modes(slab, list(range(N)), first, False)
            if P2 is None:
                P2 = np.array(T, dtype=self.dtype, order="C")
            else:
                P2 += T
        assert P2 is not None
        _MttkrpTree(np, self.shape, factors, update, plans).rec(P2, second, True, second)
        return tuple(plans)
