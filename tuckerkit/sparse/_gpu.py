"""Sparse tensors on a GPU: COO nonzeros in device memory and a bitwise-repeatable MTTKRP kernel.

The default kernel (``segmented``) reads the nonzeros in the output mode's order (a permutation made once
per mode on the device: the COO's own order for mode 0) in fixed chunks of ``SEG_CHUNK``: one CUDA thread
per (chunk, column) multiplies each value by the matching rows of the other factors and sums the products
of one output row in order; a row that lies inside its chunk is written by that thread, and a row that
spans chunks leaves one partial sum per chunk, which a second kernel adds in chunk order. Every output
element is therefore one fixed sequence of additions, whatever the GPU and its scheduling: the same call
gives the same bits (the chunk is a constant, never a function of the device, and the kernels are compiled
with ``--fmad=false``, so no compiler fuses a product into a sum). Threads of one chunk touch
consecutive columns, so factor reads are coalesced.

The former kernel (``atomic``, kept for comparison: ``GpuCOOTensor(..., kernel="atomic")``) runs one thread
per (nonzero, column) and ``atomicAdd`` s into the output rows in COO order. Measured on an H200 and an H100
(``benchmarks/gpu.py sparse``): on a short mode (8 rows, 4M nonzeros) every atomic of the launch contends
for a few addresses and the MTTKRP took 17.4-29.6x the time of a long mode; the atomics' order also varies
between runs, so its result was not bitwise repeatable (the dense paths are). The segmented kernel has not
yet run on a GPU: its CUDA C is compiled with g++ and checked on the CPU by the tests.

Without a ``RawKernel`` (a namespace that is not cupy proper) the same product runs as array operations
with ``cupyx.scatter_add`` in bounded chunks. Everything (allocations, the launch) runs under the tensor's
own GPU, whichever is current.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit.backend import Device
from tuckerkit.engine._operand import OperandBase
from tuckerkit.engine._policy import ExecutionPolicy
from tuckerkit.engine._sweeps import Sweep
from tuckerkit.sparse._dispatch import SparseShape, gpu_sparse_refusal

_KERNEL = r"""
extern "C" __global__ void coo_mttkrp(const long long nnz, const int N, const int R, const int mode,
                                      const ITYPE* __restrict__ coords, const DTYPE* __restrict__ vals,
                                      const DTYPE* __restrict__ F, const long long* __restrict__ offsets,
                                      DTYPE* __restrict__ out) {
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= nnz * R) return;
    long long e = tid / R;
    int r = (int)(tid - e * R);
    DTYPE v = vals[e];
    for (int m = 0; m < N; ++m) {
        if (m == mode) continue;
        v *= F[(offsets[m] + (long long)coords[(long long)m * nnz + e]) * R + r];
    }
    atomicAdd(&out[(long long)coords[(long long)mode * nnz + e] * R + r], v);
}
"""
_SEG_KERNELS = r"""
extern "C" __global__ void coo_mttkrp_seg(const long long nnz, const int N, const int R, const int mode,
                                          const int chunk, const ITYPE* __restrict__ coords,
                                          const DTYPE* __restrict__ vals, const DTYPE* __restrict__ F,
                                          const long long* __restrict__ offsets,
                                          const long long* __restrict__ order, DTYPE* __restrict__ out,
                                          DTYPE* __restrict__ partial) {
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long nchunks = (nnz + chunk - 1) / chunk;
    if (tid >= nchunks * R) return;
    long long c = tid / R;
    int r = (int)(tid - c * R);
    const ITYPE* rows = coords + (long long)mode * nnz;
    long long p0 = c * chunk;
    long long p1 = p0 + chunk < nnz ? p0 + chunk : nnz;
    long long row = rows[TK_POS(p0)];
    /* the chunk's first row began in an earlier chunk: its sum here is a partial (slot 0) */
    bool head = c > 0 && rows[TK_POS(p0 - 1)] == row;
    DTYPE acc = 0;
    for (long long p = p0; p < p1; ++p) {
        long long e = TK_POS(p);
        long long rw = rows[e];
        if (rw != row) {  /* the row ended inside this chunk */
            if (head) partial[(2 * c) * R + r] = acc; else out[row * R + r] = acc;
            head = false;
            row = rw;
            acc = 0;
        }
        DTYPE v = vals[e];
        for (int m = 0; m < N; ++m) {
            if (m == mode) continue;
            v *= F[(offsets[m] + (long long)coords[(long long)m * nnz + e]) * R + r];
        }
        acc += v;
    }
    if (head) partial[(2 * c) * R + r] = acc;  /* also a row that covers the whole chunk */
    else if (p1 < nnz && rows[TK_POS(p1)] == row) partial[(2 * c + 1) * R + r] = acc;  /* goes on */
    else out[row * R + r] = acc;
}

extern "C" __global__ void coo_mttkrp_join(const long long nrows, const int R, const long long* __restrict__ srow,
                                           const long long* __restrict__ sfirst,
                                           const long long* __restrict__ slast,
                                           const DTYPE* __restrict__ partial, DTYPE* __restrict__ out) {
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= nrows * R) return;
    long long j = tid / R;
    int r = (int)(tid - j * R);
    /* the row's first chunk left its tail (slot 1), each later chunk its head (slot 0): added in order */
    DTYPE acc = partial[(2 * sfirst[j] + 1) * R + r];
    for (long long c = sfirst[j] + 1; c <= slast[j]; ++c) acc += partial[(2 * c) * R + r];
    out[srow[j] * R + r] = acc;
}
"""
#: nonzeros per thread of the segmented kernel: a constant, so the order of every sum (and the bits) is the
#: same on any GPU
SEG_CHUNK = 128
#: the MTTKRP kernel of new GPU tensors: "segmented" (bitwise repeatable) or "atomic"
MTTKRP_KERNEL = "segmented"
_KERNELS: dict[tuple[str, ...], Any] = {}
_CHUNK = 1 << 22  # nonzero x rank products per chunk on the array-operation route


def kernel_source(dtype: Any, idx: Any) -> str:
    """The CUDA source of the MTTKRP kernel for a value dtype and an index dtype."""
    return _KERNEL.replace("ITYPE", "int" if np.dtype(idx) == np.int32 else "long long").replace(
        "DTYPE", "float" if np.dtype(dtype) == np.float32 else "double")


def segmented_source(dtype: Any, idx: Any, ordered: bool) -> str:
    """The CUDA source of the segmented MTTKRP kernels (``coo_mttkrp_seg``, ``coo_mttkrp_join``); ``ordered``:
    the nonzeros are read through the ``order`` permutation (else in COO order, ``order`` unused)."""
    pos = "#define TK_POS(p) (order[(p)])\n" if ordered else "#define TK_POS(p) (p)\n"
    return pos + _SEG_KERNELS.replace("ITYPE", "int" if np.dtype(idx) == np.int32 else "long long").replace(
        "DTYPE", "float" if np.dtype(dtype) == np.float32 else "double")


def _kernel(cupy: Any, dtype: np.dtype, idx: np.dtype, name: str = "coo_mttkrp", ordered: bool = False) -> Any:
    key = (str(dtype), str(idx), name, str(ordered))
    if key not in _KERNELS:
        if name == "coo_mttkrp":
            _KERNELS[key] = cupy.RawKernel(kernel_source(dtype, idx), name)
        else:  # no fused multiply-add contractions: the products and sums round as written, on any GPU
            _KERNELS[key] = cupy.RawKernel(segmented_source(dtype, idx, ordered), name, options=("--fmad=false",))
    return _KERNELS[key]


@dataclass(frozen=True)
class SegmentLayout:
    """One mode's order of the nonzeros for the segmented kernel and the rows that span chunks.

    ``order``: positions of the nonzeros sorted by the mode's index, ties in COO order (None: the COO order
    already is); ``srow``, ``sfirst``, ``slast``: each row whose nonzeros span more than one chunk of
    ``chunk``, with its first and last chunk (int64; the join kernel adds its partial sums)."""

    order: Any
    srow: Any
    sfirst: Any
    slast: Any
    chunk: int


def spanning_rows(rows_sorted: Any, chunk: int) -> tuple[Any, Any, Any]:
    """``(srow, sfirst, slast)``: the rows of a sorted row-index array whose runs cross a chunk boundary, with
    the first and last chunk of each run (int64, in the input's namespace: numpy, or cupy on the device).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.sparse._gpu import spanning_rows
    >>> [a.tolist() for a in spanning_rows(np.array([0, 0, 0, 2, 5, 5, 5, 5]), 3)]
    [[5], [1], [2]]
    """
    from tuckerkit.backend import array_namespace

    xp = array_namespace(rows_sorted)
    rows = rows_sorted.astype(xp.int64, copy=False)
    n = int(rows.size)
    if n == 0:
        empty = xp.zeros(0, dtype=xp.int64)
        return empty, empty, empty
    starts = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.flatnonzero(rows[1:] != rows[:-1]) + 1])
    ends = xp.concatenate([starts[1:], xp.full(1, n, dtype=xp.int64)])
    first, last = starts // chunk, (ends - 1) // chunk
    span = xp.flatnonzero(first != last)
    return rows[starts[span]], first[span], last[span]


@dataclass(frozen=True)
class GpuSparsePlan:
    """The GPU sparse kernel plan: COO nonzeros and the MTTKRP kernel (``coo_segmented`` or ``coo_atomic``)."""

    kind: str
    device: str
    nnz: int
    index_dtype: str
    bytes: int

    def explain(self) -> str:
        head = (f"GPU sparse MTTKRP on {self.device}: COO ({self.nnz} nonzeros, {self.index_dtype} indices, "
                f"{self.bytes / 1e6:.1f} MB), ")
        if self.kind == "coo_atomic":
            return head + "one thread per nonzero and column, atomicAdd into the output rows (not bitwise repeatable)"
        return head + (f"nonzeros in the output mode's order, one thread per chunk of {SEG_CHUNK} and column, each "
                       "row summed in a fixed order, rows spanning chunks joined by a second kernel (bitwise "
                       "repeatable)")


class GpuCOOTensor(SparseShape, OperandBase):
    """A :class:`~tuckerkit.sparse.COOTensor` in GPU memory (made by ``cp_als(X, ..., device="cuda")``).

    Attributes
    ----------
    shape, ndim, nnz, dtype
    coords : cupy array, shape (N, nnz)
        Mode-major coordinates (int32 when every mode fits).
    values : cupy array, shape (nnz,)
    host : COOTensor
        The host tensor it came from (used for the ARPACK initialization).
    """

    def __init__(self, coo: Any, device: Device, kernel: str | None = None):
        from tuckerkit.backend import get_cupy

        kernel = MTTKRP_KERNEL if kernel is None else kernel
        if kernel not in ("segmented", "atomic"):
            raise ValueError(f"kernel={kernel!r} is not a GPU sparse MTTKRP kernel; expected 'segmented' or 'atomic'")
        cupy = get_cupy(device)
        self._xp = cupy
        self.kernel = kernel
        self._layouts: dict[int, SegmentLayout] = {}
        self.host = coo
        self._device = device
        self.shape = tuple(coo.shape)
        idx = np.int32 if max(self.shape) < 2**31 else np.int64
        with cupy.cuda.Device(device.index):
            self.coords = cupy.asarray(np.ascontiguousarray(coo.coords.T, dtype=idx))
            self.values = cupy.asarray(coo.values)
            offs = np.concatenate([[0], np.cumsum(self.shape)[:-1]]).astype(np.int64)
            self._offsets = cupy.asarray(offs)

    @property
    def xp(self) -> Any:
        return self._xp

    @property
    def device(self) -> Device:
        return self._device

    @property
    def nbytes(self) -> int:
        """Device bytes held: the nonzeros and the segmented kernel's layouts made so far."""
        lays = sum(int(a.nbytes) for lay in self._layouts.values()
                   for a in (lay.order, lay.srow, lay.sfirst, lay.slast) if a is not None)
        return int(self.coords.nbytes + self.values.nbytes) + lays

    def __repr__(self) -> str:
        return f"GpuCOOTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype}, device={self.device})"

    def norm(self) -> float:
        from tuckerkit.sparse._dispatch import values_norm

        return values_norm(self.values)

    def plan(self) -> GpuSparsePlan:
        """What MTTKRP runs on this tensor (:class:`GpuSparsePlan`)."""
        return GpuSparsePlan("coo_" + self.kernel, str(self.device), self.nnz, str(self.coords.dtype),
                             self.nbytes)

    def layout(self, mode: int) -> SegmentLayout:
        """The segmented kernel's order of the nonzeros for ``mode`` (made once per tensor, on its GPU): a sort
        of the unique keys ``index * nnz + position`` (so any sort gives the one stable order), then the rows
        that span chunks (:func:`spanning_rows` on the device)."""
        lay = self._layouts.get(mode)
        if lay is not None:
            return lay
        xp, nnz = self.xp, self.nnz
        rows = self.coords[mode]
        order = None
        if nnz > 1 and not bool(xp.all(rows[1:] >= rows[:-1])):
            if int(self.shape[mode]) * nnz < 2**62:
                keys = rows.astype(xp.int64) * nnz + xp.arange(nnz, dtype=xp.int64)
                order = xp.argsort(keys)
            else:  # keys would overflow: the host's stable sort
                order = xp.asarray(np.argsort(np.asarray(self.host.coords[:, mode]), kind="stable"))
            order = order.astype(xp.int64, copy=False)
        srow, sfirst, slast = spanning_rows(rows if order is None else rows[order], SEG_CHUNK)
        lay = SegmentLayout(order, srow, sfirst, slast, SEG_CHUNK)
        self._layouts[mode] = lay
        return lay

    def scaled(self, factor: float) -> Any:
        import copy

        out = copy.copy(self)
        out.values = self.values * self.values.dtype.type(factor)
        out.host = self.host.scaled(factor)
        return out

    def to(self, device: Device) -> Any:
        if device == self.device:
            return self
        return self.host if not device.is_gpu else GpuCOOTensor(self.host, device, self.kernel)

    # -- the operand protocol: MTTKRPs on the device; the small dense problems of the others from the host
    def _on_device(self) -> Any:
        """This tensor's GPU made current (allocations and launches go there, not to the caller's GPU)."""
        return self.xp.cuda.Device(self.device.index)

    def gram(self, mode: int, *, plan: Any = None, policy: ExecutionPolicy | None = None) -> Any:
        self._dense_only("plan=", plan)
        G = self.host.gram(mode)
        with self._on_device():
            return self.xp.asarray(G)

    def leading_subspace(self, mode: int, rank: int, *, rng: np.random.Generator | None = None,
                         policy: ExecutionPolicy | None = None) -> tuple[Any, Any]:
        U, w = self.host.leading_subspace(mode, rank, rng=rng, policy=policy)
        with self._on_device():
            return self.xp.asarray(U), self.xp.asarray(w)

    def multi_ttm(self, mats: Any, *, transpose: bool = False, plan: Any = None,
                  policy: ExecutionPolicy | None = None) -> Any:
        raise gpu_sparse_refusal("TTM (and Tucker)")

    def ttmc_sweep(self, factors: list[Any], update: Any, *, policy: ExecutionPolicy | None = None,
                   partials: dict[frozenset[int], Any] | None = None) -> Sweep:
        raise gpu_sparse_refusal("HOOI")

    def mttkrp_sweep(self, factors: list[Any], update: Any, *, policy: ExecutionPolicy | None = None) -> Sweep:
        for n in range(self.ndim):
            update(n, self.mttkrp(factors, n))
        return Sweep((self.plan(),), self.ndim)

    def preferred_init(self, ranks: Any) -> str:
        return "hosvd"

    def mttkrp(self, factors: Any, mode: int, *, plan: Any = None, policy: ExecutionPolicy | None = None) -> Any:
        """The segmented kernel (one thread per chunk of nonzeros and column, sums in a fixed order) or the
        atomic one (a RawKernel each), or array operations with ``scatter_add`` where no RawKernel exists;
        on this tensor's GPU."""
        self._dense_only("plan=", plan)
        with self._on_device():
            return self._mttkrp(factors, mode)

    def _mttkrp(self, factors: Any, mode: int) -> Any:
        xp = self.xp
        R = next(int(U.shape[1]) for m, U in enumerate(factors) if m != mode and U is not None)
        factors = [xp.zeros((self.shape[m], R), dtype=self.dtype) if U is None else U for m, U in enumerate(factors)]
        dt = np.result_type(self.dtype, *(U.dtype for U in factors))
        out = xp.zeros((self.shape[mode], R), dtype=dt)
        if self.nnz == 0:
            return out
        F = xp.ascontiguousarray(xp.concatenate([xp.asarray(U, dtype=dt) for U in factors], axis=0))
        vals = self.values.astype(dt, copy=False)
        if hasattr(xp, "RawKernel") and self.kernel == "segmented":
            lay = self.layout(mode)
            threads = 256
            nchunks = (self.nnz + lay.chunk - 1) // lay.chunk
            ns = int(lay.srow.size)
            # (slots are written only for rows that span chunks: none, no buffer)
            partial = xp.empty((2 * nchunks if ns else 1, R), dtype=dt)
            ordered = lay.order is not None
            order = lay.order if ordered else self._offsets  # (unread without an order: any int64 array)
            k = _kernel(xp, np.dtype(dt), np.dtype(self.coords.dtype), "coo_mttkrp_seg", ordered)
            k(((nchunks * R + threads - 1) // threads,), (threads,),
              (np.int64(self.nnz), np.int32(self.ndim), np.int32(R), np.int32(mode), np.int32(lay.chunk),
               self.coords, vals, F, self._offsets, order, out, partial))
            if ns:
                j = _kernel(xp, np.dtype(dt), np.dtype(self.coords.dtype), "coo_mttkrp_join")
                j(((ns * R + threads - 1) // threads,), (threads,),
                  (np.int64(ns), np.int32(R), lay.srow, lay.sfirst, lay.slast, partial, out))
            return out
        if hasattr(xp, "RawKernel"):
            k = _kernel(xp, np.dtype(dt), np.dtype(self.coords.dtype))
            total = self.nnz * R
            threads = 256
            k(((total + threads - 1) // threads,), (threads,),
              (np.int64(self.nnz), np.int32(self.ndim), np.int32(R), np.int32(mode), self.coords, vals, F,
               self._offsets, out))
            return out
        import cupyx

        step = max(1, _CHUNK // R)
        for s in range(0, self.nnz, step):
            prod = xp.repeat(vals[s:s + step, None], R, axis=1)
            for m in range(self.ndim):
                if m != mode:
                    prod *= factors[m][self.coords[m, s:s + step]]
            cupyx.scatter_add(out, self.coords[mode, s:s + step], prod)
        return out
