"""Sparse tensors on a GPU: COO nonzeros in device memory and an MTTKRP kernel with atomics.

One CUDA thread per (nonzero, column) pair multiplies the value by the matching rows of the other factors
and adds the product into the output row with ``atomicAdd`` (threads of one nonzero touch consecutive
columns, so factor reads and atomics are coalesced); the nonzeros keep the COO order (sorted by mode 0).
Without a ``RawKernel`` (a namespace that is not cupy proper) the same product runs as array
operations with ``cupyx.scatter_add`` in bounded chunks. Everything (allocations, the launch) runs under the
tensor's own GPU, whichever is current.

Measured on an H200 (``benchmarks/gpu.py sparse``, the ``short_over_long`` column): on a short mode
(``I_n x R`` output addresses, here 8 x 16 and 8 x 64) every atomic of the launch contends for a few
addresses, and the MTTKRP takes 17.7-29.6x the time of a long mode with the same 4M nonzeros: a
row-segmented or privatized kernel is needed there. The atomics' order also varies between runs, so the
result is not bitwise repeatable (the dense paths are).
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
_KERNELS: dict[tuple[str, str], Any] = {}
_CHUNK = 1 << 22  # nonzero x rank products per chunk on the array-operation route


def kernel_source(dtype: Any, idx: Any) -> str:
    """The CUDA source of the MTTKRP kernel for a value dtype and an index dtype."""
    return _KERNEL.replace("ITYPE", "int" if np.dtype(idx) == np.int32 else "long long").replace(
        "DTYPE", "float" if np.dtype(dtype) == np.float32 else "double")


def _kernel(cupy: Any, dtype: np.dtype, idx: np.dtype) -> Any:
    key = (str(dtype), str(idx))
    if key not in _KERNELS:
        _KERNELS[key] = cupy.RawKernel(kernel_source(dtype, idx), "coo_mttkrp")
    return _KERNELS[key]


@dataclass(frozen=True)
class GpuSparsePlan:
    """The GPU sparse kernel plan: COO nonzeros, one thread per (nonzero, column), ``atomicAdd`` into rows."""

    kind: str
    device: str
    nnz: int
    index_dtype: str
    bytes: int

    def explain(self) -> str:
        return (f"GPU sparse MTTKRP on {self.device}: COO ({self.nnz} nonzeros, {self.index_dtype} indices, "
                f"{self.bytes / 1e6:.1f} MB), one thread per nonzero and column, atomicAdd into the output rows")


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

    def __init__(self, coo: Any, device: Device):
        from tuckerkit.backend import get_cupy

        cupy = get_cupy(device)
        self._xp = cupy
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
        return int(self.coords.nbytes + self.values.nbytes)

    def __repr__(self) -> str:
        return f"GpuCOOTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype}, device={self.device})"

    def norm(self) -> float:
        from tuckerkit.sparse._dispatch import values_norm

        return values_norm(self.values)

    def plan(self) -> GpuSparsePlan:
        """What MTTKRP runs on this tensor (:class:`GpuSparsePlan`)."""
        return GpuSparsePlan("coo_atomic", str(self.device), self.nnz, str(self.coords.dtype), self.nbytes)

    def scaled(self, factor: float) -> Any:
        import copy

        out = copy.copy(self)
        out.values = self.values * self.values.dtype.type(factor)
        out.host = self.host.scaled(factor)
        return out

    def to(self, device: Device) -> Any:
        if device == self.device:
            return self
        return self.host if not device.is_gpu else GpuCOOTensor(self.host, device)

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
        """One thread per (nonzero, column), ``atomicAdd`` into the output rows (a RawKernel), or array
        operations with ``scatter_add`` where no RawKernel exists; on this tensor's GPU."""
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
