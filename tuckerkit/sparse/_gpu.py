"""Sparse tensors on a GPU: COO nonzeros in device memory and an MTTKRP kernel with atomics.

One CUDA thread per (nonzero, column) pair multiplies the value by the matching rows of the other factors
and adds the product into the output row with ``atomicAdd`` (threads of one nonzero touch consecutive
columns, so factor reads and atomics are coalesced); the nonzeros keep the COO order (sorted by mode 0).
Without a ``RawKernel`` (a namespace that is not cupy proper) the same product runs as array
operations with ``cupyx.scatter_add`` in bounded chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit.backend import Device
from tuckerkit.sparse._dispatch import SparseShape

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


class GpuCOOTensor(SparseShape):
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
        self.xp = cupy
        self.host = coo
        self.device = device
        self.shape = tuple(coo.shape)
        idx = np.int32 if max(self.shape) < 2**31 else np.int64
        with cupy.cuda.Device(device.index):
            self.coords = cupy.asarray(np.ascontiguousarray(coo.coords.T, dtype=idx))
            self.values = cupy.asarray(coo.values)
            offs = np.concatenate([[0], np.cumsum(self.shape)[:-1]]).astype(np.int64)
            self._offsets = cupy.asarray(offs)

    @property
    def nbytes(self) -> int:
        return int(self.coords.nbytes + self.values.nbytes)

    def __repr__(self) -> str:
        return f"GpuCOOTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype}, device={self.device})"

    def norm(self) -> float:
        v = self.values.astype(np.float64)
        return math.sqrt(float(v @ v))

    def plan(self) -> GpuSparsePlan:
        """What MTTKRP runs on this tensor (:class:`GpuSparsePlan`)."""
        return GpuSparsePlan("coo_atomic", str(self.device), self.nnz, str(self.coords.dtype), self.nbytes)

    def _tk_to_device(self, device: Device) -> Any:
        return self if device == self.device else (self.host if not device.is_gpu else GpuCOOTensor(
            self.host, device))

    def _tk_unfolding(self, mode: int) -> Any:
        return self.host._tk_unfolding(mode)

    def _tk_mttkrp(self, factors: list[Any], mode: int) -> Any:
        xp = self.xp
        R = int(factors[0].shape[1])
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
