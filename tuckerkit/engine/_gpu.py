"""The engine's GPU kernel: one cuBLAS ``gemmStridedBatched`` call on the plan's views, no copies.

cuBLAS is column-major. A 2-D strided matrix X (rows x cols, element strides ``(sr, sc)``) can be handed to
it as stored ("N": ``sr == 1``, leading dimension ``sc``) or as its transpose ("T": ``sc == 1``, leading
dimension ``sr``) -- the seed paper's rule that a GEMM operand needs one unit stride. C = A B is issued
as is when C can be read column-major, else as ``C^T = B^T A^T``. One batch mode with a constant stride
becomes the call's batch; further batch modes are looped over (nested batching), an operand that lacks a
batch mode (size 1 there) being broadcast: index 0 in the loop, batch stride 0 in the call. A view that no
call can read (no unit stride, a complex dtype) goes to ``cupy.matmul``, which copies (the tests count its
calls).

What cuBLAS does not guard, this module does: batch strides handed to it are never negative (cuBLAS
documents none: an axis whose strides are all negative is walked backwards, one of mixed signs is looped);
every call runs under the output's device (its handle, its stream), never merely the current one; and an
output whose memory bounds meet an input's is computed into a temporary first.
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

_INT32 = 2**31 - 1
# alpha = 1 and beta = 0 of every call, host scalars whose addresses cuBLAS reads (made once)
_SCALARS = {np.dtype(t): (np.ones((), t), np.zeros((), t)) for t in (np.float32, np.float64)}


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

    Shapes are ``([batch,] m, k)``, ``([batch,] k, n)``, ``([batch,] m, n)``; strides in elements. An operand
    of batch size 1 is broadcast (batch stride 0, which cuBLAS allows); a negative batch stride, which
    cuBLAS does not document, or a zero output batch stride gives None (the caller flips or loops the axis).

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
    if (batch > 1 and scs == 0) or min(sa, sb, scs) < 0:  # one matrix written twice; undocumented stride
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


def _device_id(x: Any) -> int:
    return int(getattr(getattr(x, "device", None), "id", 0) or 0)


def memory_bounds(x: Any) -> tuple[int, int]:
    """``[lo, hi)``: the byte addresses a strided cupy view can touch (CuPy's ``get_bound``).

    Examples
    --------
    >>> import types
    >>> from tuckerkit.engine._gpu import memory_bounds
    >>> x = types.SimpleNamespace(data=types.SimpleNamespace(ptr=1000), shape=(3, 4), strides=(-32, 8), itemsize=8)
    >>> memory_bounds(x)  # rows read backwards from the first element: 2 rows of 32 bytes before it
    (936, 1032)
    """
    lo = hi = int(x.data.ptr)
    for n, s in zip(x.shape, x.strides, strict=True):
        if n == 0:
            return lo, lo
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + x.itemsize


def may_share_bounds(a: Any, b: Any) -> bool:
    """True when the memory bounds of two views intersect (CuPy's ``may_share_bounds``; conservative: views
    that interleave without touching one element also count).

    Examples
    --------
    >>> import types
    >>> from tuckerkit.engine._gpu import may_share_bounds
    >>> def view(ptr, n):
    ...     return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr), shape=(n,), strides=(8,), itemsize=8)
    >>> may_share_bounds(view(0, 4), view(24, 4)), may_share_bounds(view(0, 4), view(32, 4))
    (True, False)
    """
    la, ha = memory_bounds(a)
    lb, hb = memory_bounds(b)
    return la < ha and lb < hb and la < hb and lb < ha


def _flip(x: Any, axis: int) -> Any:
    if x.shape[axis] <= 1:
        return x
    return x[(slice(None),) * axis + (slice(None, None, -1),)]


def _call_axis(av: Any, bv: Any, cv: Any) -> tuple[int | None, bool]:
    """The batch axis handed to cuBLAS as the call's batch, and whether to run it backwards.

    cuBLAS documents nothing for a negative ``strideA/B/C`` and a zero ``strideC`` overwrites one matrix, so
    an axis qualifies when C's stride is not 0 and the strides of the operands that vary along it (size > 1)
    share one sign; an all-negative axis is walked from its last element (all strides then positive, the
    same products). The largest qualifying axis is taken (fewest calls); None: every batch axis is looped.
    """
    best: tuple[int, int, bool] | None = None
    for ax in range(cv.ndim - 2):
        size = cv.shape[ax]
        if size <= 1 or cv.strides[ax] == 0:
            continue
        signs = {s > 0 for x in (av, bv, cv) if x.shape[ax] > 1 for s in (x.strides[ax],) if s != 0}
        if len(signs) != 1:
            continue
        if best is None or size > best[1]:
            best = (ax, size, signs == {False})
    return (None, False) if best is None else (best[0], best[2])


def gpu_matmul(cupy: Any, av: Any, bv: Any, cv: Any) -> None:
    """``cv[...] = av @ bv`` on cupy views by strided-batched cuBLAS calls, falling back to ``cupy.matmul``.

    ``av``, ``bv``, ``cv`` are ``(*batch, m, k)``, ``(*batch, k, n)``, ``(*batch, m, n)`` views; an operand
    lacking a batch mode has size 1 there (broadcast: index 0, batch stride 0). One batch axis becomes the
    call's batch (:func:`_call_axis`), the others are looped (nested batching). Every call runs on the
    output's device (its cuBLAS handle and stream), and an ``out`` whose memory bounds meet an operand's is
    computed into a temporary first (cuBLAS reads and writes without a guard).
    """
    dt = np.dtype(cv.dtype)
    if (dt not in (np.float32, np.float64) or av.dtype != dt or bv.dtype != dt
            or cv.size == 0 or av.size == 0 or bv.size == 0):
        cupy.matmul(av, bv, out=cv)
        return
    devices = {_device_id(x) for x in (av, bv, cv)}
    if len(devices) > 1:
        raise ValueError(f"the operands of one product live on GPUs {sorted(devices)}; move them to one device "
                         "(tuckerkit.backend.to_device) or pass device=")
    with cupy.cuda.Device(_device_id(cv)):
        if may_share_bounds(cv, av) or may_share_bounds(cv, bv):  # out= overlapping an input
            tmp = cupy.empty(cv.shape, dtype=dt)
            _issue(cupy, av, bv, tmp)
            cv[...] = tmp
        else:
            _issue(cupy, av, bv, cv)


def _issue(cupy: Any, av: Any, bv: Any, cv: Any) -> None:
    nd = cv.ndim
    if av.ndim < nd:
        av = av[(None,) * (nd - av.ndim)]
    if bv.ndim < nd:
        bv = bv[(None,) * (nd - bv.ndim)]
    axis, backwards = _call_axis(av, bv, cv)
    if backwards and axis is not None:
        av, bv, cv = _flip(av, axis), _flip(bv, axis), _flip(cv, axis)
    loop = [ax for ax in range(nd - 2) if ax != axis]

    def sub(x: Any, idx: tuple[int, ...]) -> Any:
        """The view the call reads for the looped index ``idx`` (index 0 on a broadcast axis), with the call's
        batch axis (or a size-1 one) in front."""
        key: list[Any] = [slice(None)] * nd
        for ax, i in zip(loop, idx, strict=True):
            key[ax] = i if x.shape[ax] > 1 else 0
        if axis is None:
            return x[tuple(key)][None]
        return x[tuple(key)]

    shapes = [(x.shape[axis] if axis is not None else 1, *x.shape[-2:]) for x in (av, bv, cv)]
    strides = [(_strides(x)[axis] if axis is not None else 0, *_strides(x)[-2:]) for x in (av, bv, cv)]
    call = gemm_call(shapes[0], strides[0], shapes[1], strides[1], shapes[2], strides[2])
    if call is None:
        cupy.matmul(av, bv, out=cv)
        return
    lib = _cublas(cupy)
    dt = np.dtype(cv.dtype)
    fn = lib.sgemmStridedBatched if dt == np.float32 else lib.dgemmStridedBatched
    one, zero = _SCALARS[dt]
    handle = cupy.cuda.device.get_cublas_handle()
    # no looped axis (the common case): the call reads each view from its first element, as sub() would give
    for idx in itertools.product(*(range(cv.shape[ax]) for ax in loop)):
        a, b, c = (sub(av, idx), sub(bv, idx), sub(cv, idx)) if loop else (av, bv, cv)
        first, second = (b, a) if call.swap else (a, b)
        fn(handle, call.transa, call.transb, call.m, call.n, call.k, one.ctypes.data, first.data.ptr, call.lda,
           call.stride_a, second.data.ptr, call.ldb, call.stride_b, zero.ctypes.data, c.data.ptr, call.ldc,
           call.stride_c, call.batch)
