"""The engine's GPU kernel: one cuBLAS ``gemmStridedBatched`` call on the plan's views, no copies.

cuBLAS is column-major. A 2-D strided matrix X (rows x cols, element strides ``(sr, sc)``) can be handed to
it as stored ("N": ``sr == 1``, leading dimension ``sc``) or as its transpose ("T": ``sc == 1``, leading
dimension ``sr``) -- the seed paper's rule that a GEMM operand needs one unit stride. C = A B is issued
as is when C can be read column-major, else as ``C^T = B^T A^T``. One batch mode with a constant stride
becomes the call's batch; further batch modes are looped over (nested batching). A view that no call can
read (no unit stride, a complex dtype) goes to ``cupy.matmul``, which copies (the tests count its calls).
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

_INT32 = 2**31 - 1


@dataclass(frozen=True)
class GemmCall:
    """The arguments of one ``gemmStridedBatched`` call (pointers are element offsets from each view)."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int
    swap: bool  # True: the call's first operand is B (C^T = B^T A^T)


def _colmajor(shape: tuple[int, int], strides: tuple[int, int]) -> tuple[int, int] | None:
    """``(trans, ld)`` for reading a (rows, cols) strided matrix column-major; None when impossible.

    trans 0: storage holds X (element (i, j) at i + j*ld); trans 1: storage holds X^T (at j + i*ld).
    """
    r, c = shape
    sr, sc = strides
    if (r == 1 or sr == 1) and (c == 1 or sc >= max(1, r)):
        return 0, (sc if c > 1 else max(1, r))
    if (c == 1 or sc == 1) and (r == 1 or sr >= max(1, c)):
        return 1, (sr if r > 1 else max(1, c))
    return None


def gemm_call(a_shape, a_strides, b_shape, b_strides, c_shape, c_strides) -> GemmCall | None:
    """The call that computes ``C[b] = A[b] @ B[b]`` over one batch mode (or none), or None.

    Shapes are ``([batch,] m, k)``, ``([batch,] k, n)``, ``([batch,] m, n)``; strides in elements.

    Examples
    --------
    >>> from tuckerkit.engine._gpu import gemm_call
    >>> c = gemm_call((4, 3), (3, 1), (3, 5), (5, 1), (4, 5), (5, 1))  # all C order: C^T = B^T A^T
    >>> (c.swap, c.m, c.n, c.k, c.transa, c.transb, c.lda, c.ldb, c.ldc)
    (True, 5, 4, 3, 0, 0, 5, 3, 5)
    """
    nb = len(c_shape) - 2
    if nb > 1 or len(a_shape) != nb + 2 or len(b_shape) != nb + 2:
        return None
    batch = c_shape[0] if nb else 1
    sa = a_strides[0] if nb and a_shape[0] > 1 else 0
    sb = b_strides[0] if nb and b_shape[0] > 1 else 0
    scs = c_strides[0] if nb and batch > 1 else 0
    if batch > 1 and scs == 0:
        return None
    m, k = a_shape[-2:]
    n = c_shape[-1]
    A = _colmajor(tuple(a_shape[-2:]), tuple(a_strides[-2:]))
    B = _colmajor(tuple(b_shape[-2:]), tuple(b_strides[-2:]))
    C = _colmajor(tuple(c_shape[-2:]), tuple(c_strides[-2:]))
    if A is None or B is None or C is None:
        return None
    if C[0] == 0:  # C column-major: C = op(A) op(B)
        call = GemmCall(A[0], B[0], m, n, k, A[1], B[1], C[1], sa, sb, scs, batch, False)
    else:  # storage holds C^T: C^T = op(B^T) op(A^T); reading B's storage "as is" gives B^T when B[0] == 1
        call = GemmCall(1 - B[0], 1 - A[0], n, m, k, B[1], A[1], C[1], sb, sa, scs, batch, True)
    if max(call.m, call.n, call.k, call.lda, call.ldb, call.ldc, call.batch) > _INT32:
        return None
    return call


def _strides(x: Any) -> tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides)


def _cublas(cupy: Any) -> Any:
    lib = getattr(cupy.cuda, "cublas", None)
    return lib if lib is not None else importlib.import_module("cupy_backends.cuda.libs.cublas")


def gpu_matmul(cupy: Any, av: Any, bv: Any, cv: Any) -> None:
    """``cv[...] = av @ bv`` on cupy views by strided-batched cuBLAS calls, falling back to ``cupy.matmul``."""
    dt = np.dtype(cv.dtype)
    nb = cv.ndim - 2
    if dt not in (np.float32, np.float64) or av.dtype != dt or bv.dtype != dt or cv.size == 0:
        cupy.matmul(av, bv, out=cv)
        return
    outer = cv.shape[: max(nb - 1, 0)]
    inner = slice(max(nb - 1, 0), None)
    call = gemm_call(av.shape[inner], _strides(av)[inner], bv.shape[inner], _strides(bv)[inner],
                     cv.shape[inner], _strides(cv)[inner])
    if call is None:
        cupy.matmul(av, bv, out=cv)
        return
    lib = _cublas(cupy)
    fn = lib.sgemmStridedBatched if dt == np.float32 else lib.dgemmStridedBatched
    one, zero = np.ones((), dt), np.zeros((), dt)
    handle = cupy.cuda.device.get_cublas_handle()
    for idx in itertools.product(*(range(s) for s in outer)):
        a, b, c = (av[idx], bv[idx], cv[idx]) if idx else (av, bv, cv)
        first, second = (b, a) if call.swap else (a, b)
        fn(handle, call.transa, call.transb, call.m, call.n, call.k, one.ctypes.data, first.data.ptr, call.lda,
           call.stride_a, second.data.ptr, call.ldb, call.stride_b, zero.ctypes.data, c.data.ptr, call.ldc,
           call.stride_c, call.batch)
