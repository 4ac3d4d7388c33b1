"""Out-of-core tensors: a large array (a memory-mapped ``.npy``, an HDF5 or zarr dataset) read in slabs along
its first mode, with every pass's memory bounded by a ``memory_limit``.

A :class:`SlabTensor` is an :class:`~tuckerkit.engine.Operand`: its norm, Grams, projections, MTTKRPs and
HOOI / CP-ALS sweeps stream over the slabs and keep only small results in memory; everything after the first
projection runs in memory as usual. The next slab is read on a background thread while the current one is
processed.
"""

from __future__ import annotations

import math
import mmap
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tuckerkit.engine._gram import blocks_gram, dense_gram
from tuckerkit.engine._mttkrp import dense_mttkrp
from tuckerkit.engine._operand import OperandBase, combine_scaled, narrowed, sqnorm_scaled
from tuckerkit.engine._policy import ExecutionPolicy, resolve_policy
from tuckerkit.engine._subspace import eigh_desc, sign_fix
from tuckerkit.engine._sweeps import MttkrpTree, Sweep, take_partial, ttmc_tree
from tuckerkit.engine._ttm import dense_multi_ttm, dense_ttm

_UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "TIB": 2**40}


def parse_memory(value: Any, name: str = "memory_limit") -> int:
    """Bytes from an int or a string such as ``"4GB"``, ``"512 MiB"`` or ``"2e9"``.

    Parameters
    ----------
    value : int or str
    name : str, default "memory_limit"
        How error messages name the parameter.

    Returns
    -------
    int

    Examples
    --------
    >>> parse_memory("4GB"), parse_memory("512 MiB"), parse_memory(1000)
    (4000000000, 536870912, 1000)
    """
    size = 0.0
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        v = int(value)
    else:
        m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", str(value))
        unit = m.group(2).upper() if m else ""
        bad = f"{name}={value!r} is not a memory size; expected bytes or e.g. '4GB', '512MiB'"
        if not m or unit not in _UNITS:
            raise ValueError(bad)
        try:  # ('...', '1.2.3GB', 'e': not numbers; '1e999': not finite)
            size = float(m.group(1)) * _UNITS[unit]
        except ValueError:
            raise ValueError(bad) from None
        if not math.isfinite(size):
            raise ValueError(f"{name}={value!r} is not a finite memory size; expected e.g. '4GB', '512MiB'")
        v = int(size)
    if v <= 0:
        what = "is below one byte" if isinstance(value, str) and v == 0 and size > 0 else "is not positive"
        raise ValueError(f"{name}={value!r} {what}; expected a memory size such as '4GB'")
    return v


def streams(shape: Sequence[int], dtype: Any, memory_limit: int, source: Any = None) -> bool:
    """Whether a dense tensor of this shape, computed in ``dtype``, is read in slabs under ``memory_limit``
    bytes: when it is larger than the limit, counted at the larger of the dtype computed in (float64 for
    integers and booleans) and the ``source`` dtype it is read from (a float64 file computed in float32 is
    still copied whole from its 8 bytes an entry otherwise).

    Examples
    --------
    >>> from tuckerkit.engine._slabs import streams
    >>> streams((100, 100, 100), "float32", 10**6), streams((10, 10, 10), "float64", 10**6)
    (True, False)
    """
    compute = np.dtype(dtype)
    per = compute.itemsize if compute.kind in "fc" else 8
    if source is not None:
        per = max(per, np.dtype(source).itemsize)
    return math.prod(shape) * per > memory_limit


class MemoryLimitError(ValueError):
    """``memory_limit`` is too small for something the computation must hold (one line; ``reason`` lets the
    command line name its option, ``--memory-limit``, instead of the keyword)."""

    reason = "memory-limit"


def _maps_file(d: np.ndarray, path: str) -> bool:
    """Whether the file at ``path`` is still the one ``d`` maps (the inode of the mapping that holds its first
    byte, from ``/proc/self/maps``, against the path's): a file replaced after ``numpy.load(mmap_mode=...)``
    was read by path, so a streamed run decomposed the new file (fit 0.0025) where the caller's array held
    the old one (0.9900); a file removed since is read through the mapping too (a bare FileNotFoundError
    before). True where the mapping cannot be looked up (no ``/proc``): the plain file reads."""
    try:
        st = os.stat(path)
    except OSError:  # (removed since: the mapping still holds the caller's data, read through it)
        return False
    try:
        addr = int(d.ctypes.data)
        with open("/proc/self/maps") as maps:
            for line in maps:
                span, _, _, dev, inode = line.split(maxsplit=5)[:5]
                lo, hi = (int(x, 16) for x in span.split("-"))
                if lo <= addr < hi:
                    major, minor = (int(x, 16) for x in dev.split(":"))
                    return int(inode) == st.st_ino and os.makedev(major, minor) == st.st_dev
    except (OSError, ValueError):
        return True
    return True


class SlabTensor(OperandBase):
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
        if np.dtype(data.dtype).kind == "c":  # (the message named neither the limit nor what to do)
            raise TypeError(f"memory_limit= streams real tensors; X has dtype {data.dtype} (decompose a complex "
                            "tensor in memory, without memory_limit)")
        if np.dtype(data.dtype).kind not in "biuf":
            raise TypeError(f"data has dtype {data.dtype}; expected numbers (float, int or bool)")
        self.data = data
        self.closer: Callable[[], None] | None = None  # closes the file the data lives in, if ours
        self.closed = False  # (set by close(): reads then refused in one line)
        self.factor = 1.0  # slabs are multiplied by it as they are read (see :meth:`scaled`)
        self.shape = tuple(int(s) for s in data.shape)
        dt = np.dtype(data.dtype if dtype is None else dtype)
        if dtype is not None and dt not in (np.float32, np.float64):
            raise TypeError(f"dtype={dt} is not supported; expected float32 or float64")
        if dtype is None and not dt.isnative:  # ('>f4': float32 as in memory, not float64)
            dt = dt.newbyteorder("=")
        # (float16 computed in float32, as in memory; other kinds, ints and bools, in float64)
        self.dtype = (dt if dt in (np.float32, np.float64) else
                      np.dtype(np.float32) if dt == np.float16 else np.dtype(np.float64))
        self.memory_limit = parse_memory(memory_limit)
        self._stamp = _file_stamp(data)
        src = np.dtype(data.dtype)  # (a slab read in another dtype is held in both while it is converted)
        row = math.prod(self.shape[1:]) * (self.dtype.itemsize + (src.itemsize if src != self.dtype else 0))
        # the slab being processed, the one being read and the projection temporaries share the limit
        self.slab_rows = max(1, min(self.shape[0], int(self.memory_limit // (4 * max(row, 1)))))

    @property
    def streamed(self) -> bool:
        return True

    def scaled(self, factor: float) -> SlabTensor:
        """The same file read with every slab multiplied by ``factor``."""
        import copy

        out = copy.copy(self)
        out.factor = self.factor * factor
        out.closer = None  # the original keeps the file
        return out

    def close(self) -> None:
        """Close the file the slabs are read from when this tensor opened it (:func:`tuckerkit.io.open_tensor`)."""
        if self.closer is not None:
            self.closer()
            self.closer = None
            self.closed = True  # (its reads then failed in h5py's words: an invalid dataset identifier)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"SlabTensor(shape={self.shape}, dtype={self.dtype}, memory_limit={self.memory_limit:,}, "
                f"slab_rows={self.slab_rows})")

    # -- streaming -----------------------------------------------------------------------------------
    def slabs(self, rows: int | None = None, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, slab)`` along mode 0 from row ``start``, the next slab read on a background thread
        meanwhile."""
        if self.closed:
            raise ValueError("this tensor's file was closed (the with block of open_tensor ended, or close() was "
                             "called); open it again to read it")
        stamp = self._stamp
        if stamp is not None and _file_stamp(self.data) != stamp:  # (each pass reads the file again: a file
            # rewritten or truncated between passes gave a fit for another tensor, or zeros from h5py)
            raise ValueError(f"the file {stamp[0]!r} changed while it was decomposed (its size, time or identity); "
                             "a tensor read in slabs must stay as it is during the call")
        step = rows or self.slab_rows
        starts = list(range(start, self.shape[0], step))

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
                out = buf if src_dtype == self.dtype else _narrow_slab(buf, self.dtype)
            else:
                src = self.data[s:s + step]
                out = (np.ascontiguousarray(src) if np.dtype(src.dtype) == self.dtype
                       else _narrow_slab(np.asarray(src), self.dtype))
                if self.factor != 1.0 and (out is src or np.may_share_memory(out, src)):
                    # (a view of the caller's memory, from an ndarray or any array-like's slicing: never scaled in
                    # place; an array-like's view was, every pass: its data zeroed at 1e30, made infinite at 1e-30)
                    return out * self.dtype.type(self.factor)
            if self.factor != 1.0:
                out *= self.dtype.type(self.factor)
            return out

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tuckerkit-read") as pool:
            nxt = pool.submit(read, starts[0]) if starts else None
            for i, s in enumerate(starts):
                slab = nxt.result()  # type: ignore[union-attr]
                nxt = pool.submit(read, starts[i + 1]) if i + 1 < len(starts) else None
                yield s, slab
                del slab

    def _file_source(self) -> tuple[str, int, np.dtype] | None:
        """``(path, offset, dtype)`` of a C-ordered ``numpy.memmap``: read with plain file reads, so the
        process's resident memory holds only the slabs (a memory map keeps every page it touched resident,
        which made a 4 GB file read under a 1 GB limit peak at 5 GB RSS)."""
        d = self.data
        if (isinstance(d, np.memmap) and getattr(d, "filename", None) and d.flags.c_contiguous
                and isinstance(d.base, mmap.mmap) and _maps_file(d, str(d.filename))):  # the mapped array itself
            return str(d.filename), int(d.offset), np.dtype(d.dtype)
        return None

    def norm(self) -> float:
        """Frobenius norm in one pass (float64, scaled: no overflow); NaN or Inf anywhere gives a clear error. A
        finite tensor whose norm exceeds float64's largest value gives inf (the caller rescales it)."""
        acc = (1.0, 0.0)
        for _, slab in self.slabs():
            acc = combine_scaled(acc, sqnorm_scaled(slab, 1 << 20))
        if not (math.isfinite(acc[0]) and math.isfinite(acc[1])):  # (a piece's NaN or Inf: an infinite scale)
            raise ValueError("X contains NaN or infinite value(s); remove or impute them first")
        return acc[0] * math.sqrt(acc[1])

    def _check_fits(self, shape: Sequence[int], what: str) -> None:
        """Refuse an in-memory result that alone would exceed the memory limit."""
        need = math.prod(shape) * self.dtype.itemsize
        if need > self.memory_limit:
            # (a Gram's size does not depend on the ranks: "lower the ranks" was no remedy for it)
            remedy = ("raise memory_limit (a Gram's size does not depend on the ranks)" if "Gram" in what
                      else "raise memory_limit or lower the ranks")
            raise MemoryLimitError(
                f"memory_limit={self.memory_limit:,} bytes is too small: {what} has shape {tuple(shape)} "
                f"({need:,} bytes), more than the limit; {remedy}"
            )

    def _rows_beside(self, shape: Sequence[int], what: str) -> int:
        """The slab rows of a pass that holds an in-memory result of ``shape`` beside its slabs: what the result
        leaves of the limit, a quarter each to the slab, its prefetched successor and the products (as
        ``slab_rows`` takes of the whole limit), one row at least. A result that alone exceeds the limit is
        refused in one line (:meth:`_check_fits`). Before, the slabs took a quarter of the whole limit each
        beside the result: CP-ALS on a (200, 60, 50) memmap under 700 KB peaked at 1.06 MB traced (a (200, 60,
        4) partial of 384 KB and two slabs of 175 KB), now 0.77 MB; HOOI and ST-HOSVD with ranks 0.68 MB."""
        self._check_fits(shape, what)
        held = math.prod(shape) * self.dtype.itemsize
        row = max(math.prod(self.shape[1:]) * self.dtype.itemsize, 1)
        return max(1, min(int((self.memory_limit - held) // (4 * row)), self.slab_rows))

    # -- the operand protocol ------------------------------------------------------------------------
    def gram(self, mode: int, *, plan: Any = None, policy: ExecutionPolicy | None = None) -> np.ndarray:
        """``X_(n) X_(n)^T``: for ``mode >= 1`` the sum of the slabs' Grams (one pass, added in slab order);
        for mode 0 (the slab mode) the blocks of every pair of slabs, ``(s + 1) / 2`` passes for ``s`` slabs."""
        self._dense_only("plan=", plan)
        return self._gram(mode, resolve_policy(policy), wide=False)

    def wide_gram(self, mode: int, policy: ExecutionPolicy | None = None) -> np.ndarray:
        """:meth:`gram` accumulated in float64 (a single-precision rank choice's, as in memory: the float32 Gram's
        rounding chose ranks (4, 3, 7) and (65, 7, 6) for an exact (4, 3, 3) tensor streamed), each slab converted
        in pieces (mode >= 1) or, for mode 0, slab pairs of a quarter of the rows (two held in float64)."""
        return self._gram(mode, resolve_policy(policy), wide=True)

    def _gram(self, mode: int, pol: ExecutionPolicy, wide: bool) -> np.ndarray:
        rows = self._rows_beside([self.shape[mode]] * 2, f"the mode-{mode} Gram")
        G = np.zeros((self.shape[mode],) * 2, dtype=np.float64 if wide else self.dtype)
        if mode != 0:
            piece = max(1 << 16, rows * math.prod(self.shape[1:]) * self.dtype.itemsize // 2)
            for _, slab in self.slabs(rows):
                G += blocks_gram(slab, mode, pol, dtype=np.float64, limit=piece) if wide else \
                    dense_gram(slab, mode, None, pol)
            return G
        rows = max(1, rows // (4 if wide else 2))  # (two slabs held at once, each with its successor read ahead)
        dt = G.dtype
        for a, slab_a in self.slabs(rows):
            A = slab_a.reshape(slab_a.shape[0], -1).astype(dt, copy=False)
            ra = slice(a, a + A.shape[0])
            G[ra, ra] = A @ A.T
            for b, slab_b in self.slabs(rows, start=a + A.shape[0]):
                B = slab_b.reshape(slab_b.shape[0], -1).astype(dt, copy=False)
                blk = A @ B.T
                G[ra, b:b + B.shape[0]] = blk
                G[b:b + B.shape[0], ra] = blk.T
        return G

    def multi_ttm(self, mats: Mapping[int, Any], *, transpose: bool = False, plan: Any = None,
                  policy: ExecutionPolicy | None = None) -> np.ndarray:
        """``X x_m U_m`` (transposed) for every ``m`` in ``mats``, in one pass (mode 0, if in ``mats``,
        accumulated over the slabs; otherwise each slab's product is written in place)."""
        self._dense_only("plan=", plan)
        pol = resolve_policy(policy)
        mats_t = {m: np.ascontiguousarray(U if transpose else U.T) for m, U in mats.items()}  # (I_m, J_m)
        modes = sorted(mats_t)
        out_shape = [mats_t[m].shape[1] if m in mats_t else self.shape[m] for m in range(self.ndim)]
        what = f"the projection on modes {modes}" if len(modes) > 1 else f"the mode-{modes[0]} projection"
        step = self._rows_beside(out_shape, what)
        Y = np.zeros(out_shape, dtype=self.dtype) if 0 in mats_t else np.empty(out_shape, dtype=self.dtype)
        for s, slab in self.slabs(step):
            rows = slab.shape[0]
            local = {m: mats_t[m][s:s + rows] if m == 0 else mats_t[m] for m in modes}
            if 0 in mats_t:
                Y += dense_multi_ttm(slab, local, True, None, pol)
            elif len(modes) == 1:
                dense_ttm(slab, local[modes[0]], modes[0], True, Y[s:s + rows], None, pol)
            else:
                Y[s:s + rows] = dense_multi_ttm(slab, local, True, None, pol)
        return Y

    def mttkrp(self, factors: Sequence[Any], mode: int, *, plan: Any = None,
               policy: ExecutionPolicy | None = None) -> np.ndarray:
        """One mode's MTTKRP in one pass: mode 0's rows slab by slab, any other mode summed over the slabs."""
        self._dense_only("plan=", plan)
        pol = resolve_policy(policy)
        R = next(int(U.shape[1]) for m, U in enumerate(factors) if m != mode and U is not None)
        out = np.zeros((self.shape[mode], R), dtype=np.result_type(self.dtype, *(
            U.dtype for m, U in enumerate(factors) if m != mode)))
        for s, slab in self.slabs(self._rows_beside(out.shape, f"the mode-{mode} MTTKRP")):
            rows = slab.shape[0]
            local = [U[s:s + rows] if (m == 0 and U is not None) else U for m, U in enumerate(factors)]
            part = dense_mttkrp(slab, local, mode, R, None, pol)
            if mode == 0:
                out[s:s + rows] = part
            else:
                out += part
        return out

    def leading_subspace(self, mode: int, rank: int, *, rng: np.random.Generator | None = None,
                         policy: ExecutionPolicy | None = None) -> tuple[np.ndarray, np.ndarray]:
        """From the streamed Gram (see :meth:`gram`)."""
        mode = self._subspace_args(mode, rank)
        w, V = eigh_desc(self.gram(mode, policy=policy), rank)
        return sign_fix(np.ascontiguousarray(V)), w

    def preferred_init(self, ranks: Sequence[int]) -> str:
        """ST-HOSVD, its first (streamed) step by a sketch when the sketch's projection fits half the limit (the
        pass's slabs and the in-memory product that follows it hold about as much again: a projection of 36 MB
        under a 40 MB limit peaked at 65 MB)."""
        n = min(range(self.ndim - 1, 0, -1), key=lambda m: self.shape[m])
        need = self.size // self.shape[n] * min(self.shape[n], ranks[n] + 10) * self.dtype.itemsize
        return "st_hosvd_sketch" if 2 * need <= self.memory_limit else "st_hosvd"

    def ttmc_sweep(self, factors: list[Any], update: Callable[[int, Any], None], *,
                   policy: ExecutionPolicy | None = None, partials: dict[frozenset[int], Any] | None = None) -> Sweep:
        """HOOI's projections in two passes: the second half of the modes projected slab by slab (kept in
        memory; taken from ``partials`` instead when the start made it, one pass fewer), then the first half
        (mode 0 included) accumulated over the slabs with the updated factors."""
        pol = resolve_policy(policy)
        N = self.ndim
        half = (N + 1) // 2
        first, second = list(range(half)), list(range(half, N))
        plans: list[Any] = []
        shape1 = [self.shape[m] if m < half else factors[m].shape[1] for m in range(N)]
        Y1 = take_partial(partials, first)
        if Y1 is None:
            rows = self._rows_beside(shape1, "the projection on the last modes")
            Y1 = np.empty(shape1, dtype=self.dtype)
            mats = {m: factors[m] for m in second}
            for s, slab in self.slabs(rows):
                Y1[s:s + slab.shape[0]] = dense_multi_ttm(slab, mats, True, None, pol)
        ttmc_tree(Y1, first, factors, update, plans, pol, partials)
        del Y1
        shape2 = [factors[m].shape[1] if m < half else self.shape[m] for m in range(N)]
        rows = self._rows_beside(shape2, "the projection on the first modes")
        Y2 = np.zeros(shape2, dtype=self.dtype)
        for s, slab in self.slabs(rows):
            local = {0: factors[0][s:s + slab.shape[0]], **{m: factors[m] for m in first if m != 0}}
            Y2 += dense_multi_ttm(slab, local, True, None, pol)
        ttmc_tree(Y2, second, factors, update, plans, pol)
        return Sweep(tuple(plans), 2)

    def mttkrp_sweep(self, factors: list[Any], update: Callable[[int, Any], None], *,
                     policy: ExecutionPolicy | None = None) -> Sweep:
        """CP-ALS's N MTTKRPs in two passes, the dimension tree of :func:`~tuckerkit.engine.mttkrp_sweep`:
        the last modes are contracted slab by slab with their Khatri-Rao product into an in-memory partial
        ``(I_0, ..., R)`` that serves the first modes' MTTKRPs; then the first modes (mode 0 included, with
        the updated factors) are contracted and summed over the slabs for the last modes'."""
        pol = resolve_policy(policy)
        N = self.ndim
        half = (N + 1) // 2
        first, second = list(range(half)), list(range(half, N))
        R = int(factors[1].shape[1])
        plans: list[Any] = []
        shape1 = [*(self.shape[m] for m in first), R]
        rows = self._rows_beside(shape1, "the MTTKRP partial over the first modes")
        P1 = np.empty(shape1, dtype=self.dtype)
        for s, slab in self.slabs(rows):
            tree = MttkrpTree(np, slab.shape, factors, update, plans if s == 0 else [], pol)
            T, _ = tree.contract_modes(slab, list(range(N)), second, False)
            P1[s:s + slab.shape[0]] = T
        MttkrpTree(np, self.shape, factors, update, plans, pol).rec(P1, first, True, first)
        del P1
        P2 = None
        shape2 = [R, *(self.shape[m] for m in second)]  # (the partial over the last modes, summed over the slabs)
        for s, slab in self.slabs(self._rows_beside(shape2, "the MTTKRP partial over the last modes")):
            local = [factors[0][s:s + slab.shape[0]], *factors[1:]]
            tree = MttkrpTree(np, slab.shape, local, update, plans if s == 0 else [], pol)
            T, _ = tree.contract_modes(slab, list(range(N)), first, False)
            if P2 is None:
                P2 = np.array(T, dtype=self.dtype, order="C")
            else:
                P2 += T
        if P2 is None:  # pragma: no cover - a tensor has at least one slab
            raise RuntimeError("internal error: no slab was read")
        MttkrpTree(np, self.shape, factors, update, plans, pol).rec(P2, second, True, second)
        return Sweep(tuple(plans), 2)


def _narrow_slab(buf: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A slab in ``dtype``, C-ordered, through :func:`~tuckerkit.engine._operand.narrowed`'s checks (an overflow
    had been blamed on NaN or infinity in the file; a slab made all zero gave the whole tensor a fit of 1.0)."""
    return np.ascontiguousarray(narrowed(buf, dtype, "a slab of the tensor"))


def _file_stamp(data: Any) -> tuple | None:
    """``(path, size, modification time, inode)`` of the file a memory-mapped array or an HDF5 dataset lives in,
    or None for data in memory (or a file that cannot be looked at)."""
    path = getattr(data, "filename", None) if isinstance(data, np.memmap) else None
    if path is None:
        f = getattr(data, "file", None)
        path = getattr(f, "filename", None) if f is not None and hasattr(data, "id") else None
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
