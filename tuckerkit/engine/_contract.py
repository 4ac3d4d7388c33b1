"""Public contraction entry points: ``plan_contraction`` and ``contract``."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, result_dtype
from tuckerkit.backend._device import device_op
from tuckerkit.engine._gpu import gpu_matmul
from tuckerkit.engine._plan import ContractionPlan, KernelKind, build_plan
from tuckerkit.engine._spec import parse_spec
from tuckerkit.engine._threads import run_matmul

_LAYOUTS = ("auto", "C", "F")


@functools.lru_cache(maxsize=1024)
def _cached_plan(spec, a_shape, a_strides, b_shape, b_strides, dtype, itemsize, out_strides, out_layout):
    parsed = parse_spec(spec, len(a_shape), len(b_shape))
    return build_plan(parsed, a_shape, a_strides, b_shape, b_strides, dtype, itemsize, out_strides, out_layout)


def _as_operand(x: Any, name: str, xp, dtype) -> Any:
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        x = xp.asarray(np.asarray(x))
    if x.dtype != dtype:
        x = x.astype(dtype)
    if any(s % x.itemsize for s in x.strides):  # misaligned views cannot go to BLAS
        x = xp.ascontiguousarray(x)
    return x


def _prepare(spec, A, B, out, out_layout):
    if out_layout not in _LAYOUTS:
        raise ValueError(f"out_layout={out_layout!r} is not valid; expected one of {', '.join(map(repr, _LAYOUTS))}")
    xp = array_namespace(A, B, out)
    dtype_a = getattr(A, "dtype", None)
    dtype_b = getattr(B, "dtype", None)
    dtype = result_dtype(
        (dtype_a if dtype_a is not None else np.asarray(A).dtype, "A"),
        (dtype_b if dtype_b is not None else np.asarray(B).dtype, "B"),
    )
    A = _as_operand(A, "A", xp, dtype)
    B = _as_operand(B, "B", xp, dtype)
    out_strides = None
    if out is not None:
        if out.dtype != dtype:
            raise TypeError(f"out has dtype {out.dtype}; expected {dtype} (the result dtype of A and B)")
        if any(s % out.itemsize for s in out.strides):
            raise ValueError("out is not aligned to its itemsize; pass an aligned array")
        out_strides = tuple(s // out.itemsize for s in out.strides)
    return xp, dtype, A, B, out, out_strides


def _elem_strides(x) -> tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides)


def plan_contraction(
    spec: str, A: Any, B: Any, *, out: Any = None, out_layout: str = "auto"
) -> ContractionPlan:
    """Plan the pairwise contraction ``spec`` of ``A`` and ``B`` without running it.

    Parameters
    ----------
    spec : str
        Einsum-style subscripts for two operands, e.g. ``"mk,knp->mnp"`` (implicit output allowed).
    A, B : array_like
        Operands (numpy or cupy arrays, any strides).
    out : array, optional
        Output array the plan will write into; its strides are part of the plan.
    out_layout : {"auto", "C", "F"}, default "auto"
        Memory layout of a freshly allocated output: ``"C"`` or ``"F"`` order in the output subscripts,
        or ``"auto"``: C order unless another layout is more than 10 % faster (then the result is a
        permuted view, as ``numpy.einsum`` returns).

    Returns
    -------
    ContractionPlan
        Frozen and reusable on arrays of the same shapes, strides and dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import plan_contraction
    >>> A, B = np.ones((4, 5)), np.ones((5, 6, 7))
    >>> plan_contraction("mk,knp->mnp", A, B).notation()
    'C_{m(np)} = A_{mk} B_{k(np)}'
    """
    xp, dtype, A, B, out, out_strides = _prepare(spec, A, B, out, out_layout)
    plan = _cached_plan(
        spec, tuple(A.shape), _elem_strides(A), tuple(B.shape), _elem_strides(B), str(dtype), dtype.itemsize,
        out_strides, out_layout,
    )
    return plan if xp is np else _on_gpu(plan)


@functools.lru_cache(maxsize=1024)
def _on_gpu(plan: ContractionPlan) -> ContractionPlan:
    """The same plan for cupy operands: issued as cuBLAS strided-batched calls, no CPU thread split."""
    return dataclasses.replace(plan, device="cuda", parallel=False)


def _check_reuse(plan: ContractionPlan, spec: str, A, B, out, out_strides, dtype) -> None:
    got = (tuple(A.shape), tuple(B.shape))
    if got != plan.shapes[:2]:
        raise ValueError(f"plan was made for shapes {plan.shapes[:2]}; received A, B of shapes {got}")
    if (_elem_strides(A), _elem_strides(B)) != plan.strides[:2]:
        raise ValueError(
            f"plan was made for strides {plan.strides[:2]}; received {(_elem_strides(A), _elem_strides(B))} "
            "(re-plan for arrays of another layout)"
        )
    if str(dtype) != plan.dtype:
        raise ValueError(f"plan was made for dtype {plan.dtype}; received {dtype}")
    if out is not None and out_strides != plan.strides[2]:
        made_for = plan.strides[2] or "a fresh array"
        raise ValueError(f"plan was made for out strides {made_for}; received {out_strides}")


def _operand_view(xp, x, lay):
    x = x.reshape(lay.keep_shape)
    if lay.copy_order is not None:
        buf = xp.empty(tuple(lay.keep_shape[p] for p in lay.copy_order), dtype=x.dtype)
        buf[...] = x.transpose(lay.copy_order)
        return buf.reshape(lay.view_shape)
    return _view(x.transpose(lay.perm), lay.view_shape)


def _view(x, shape):
    try:
        return x.reshape(shape, copy=False)
    except TypeError:  # namespaces without the copy keyword (cupy)
        v = x.reshape(shape)
        if v.size > 1 and v.base is None and v is not x:  # a copy: writes into it would be lost
            raise RuntimeError(f"internal error: a view of shape {shape} needed a copy") from None
        return v


def _alloc_out(plan: ContractionPlan, xp, dtype):
    order = plan._out_order
    out_shape = plan.shapes[2]
    buf = xp.empty(tuple(out_shape[i] for i in order), dtype=dtype)
    return buf.transpose(tuple(np.argsort(order))) if order != tuple(range(len(order))) else buf


def operand_views(plan: ContractionPlan, A, B, out, xp=np):
    """The ``(*batch, rows, cols)`` views (or copies, for a remedy) that the kernel receives.

    Returns ``(a_view, b_view, c_view, c_target)``: ``c_target`` is the part of ``out`` the result must land
    in when the plan computes into a temporary (``Remedy.COPY_OUT``), else None.
    """
    if plan._sum_a:  # the planner laid the summed operand out in C order
        A = xp.ascontiguousarray(A.sum(axis=plan._sum_a))
    if plan._sum_b:
        B = xp.ascontiguousarray(B.sum(axis=plan._sum_b))
    la, lb, lc = plan._a, plan._b, plan._c
    assert la is not None and lb is not None and lc is not None
    av = _operand_view(xp, A, la)
    bv = _operand_view(xp, B, lb)
    ck = out.reshape(lc.keep_shape) if tuple(out.shape) != lc.keep_shape else out
    if lc.copy_order is not None:
        tmp = xp.empty(tuple(lc.keep_shape[p] for p in lc.copy_order), dtype=out.dtype)
        return av, bv, tmp.reshape(lc.view_shape), ck.transpose(lc.copy_order)
    return av, bv, _view(ck.transpose(lc.perm), lc.view_shape), None


def execute(plan: ContractionPlan, A, B, out=None, xp=None):
    """Run ``plan`` on ``A`` and ``B`` (already validated), writing into ``out`` when given."""
    if xp is None:
        xp = array_namespace(A, B, out)
    if out is None:
        out = _alloc_out(plan, xp, A.dtype)
    if plan.kind == KernelKind.EMPTY:
        out[...] = 0
        return out
    if xp is np:
        av, bv, cv, target = operand_views(plan, A, B, out, xp)
        run_matmul(np.matmul, av, bv, cv, plan.flops)
    else:  # cupy: cuBLAS strided-batched GEMM on the same views
        av, bv, cv, target = operand_views(plan, A, B, out, xp)
        gpu_matmul(xp, av, bv, cv)
    if target is not None:
        target[...] = cv.reshape(target.shape)
    return out


@device_op
def contract(
    spec: str,
    A: Any,
    B: Any,
    *,
    out: Any = None,
    plan: ContractionPlan | None = None,
    out_layout: str = "auto",
    device: Any = None,
) -> Any:
    """Contract two tensors without transposing them: ``C = einsum(spec, A, B)`` on GEMM views.

    Parameters
    ----------
    spec : str
        Einsum-style subscripts for two operands, e.g. ``"mk,pkn->mnp"``.
    A, B : array_like
        Operands. float32/float64/complex dtypes are kept; integer and bool are promoted to float64.
    out : array, optional
        Array to write the result into (same memory is returned).
    plan : ContractionPlan, optional
        A plan from :func:`plan_contraction` for arrays of the same shapes, strides and dtype.
    out_layout : {"auto", "C", "F"}, default "auto"
        Layout of a freshly allocated output (see :func:`plan_contraction`).

    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array
        The contraction, with axes in the order of the output subscripts.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import contract
    >>> A = np.arange(6.0).reshape(2, 3)
    >>> B = np.arange(24.0).reshape(4, 3, 2)
    >>> np.allclose(contract("mk,pkn->mnp", A, B), np.einsum("mk,pkn->mnp", A, B))
    True
    """
    xp, dtype, A, B, out, out_strides = _prepare(spec, A, B, out, out_layout)
    if plan is None:
        plan = _cached_plan(
            spec, tuple(A.shape), _elem_strides(A), tuple(B.shape), _elem_strides(B), str(dtype),
            dtype.itemsize, out_strides, out_layout,
        )
        if xp is not np:
            plan = _on_gpu(plan)
    else:
        _check_reuse(plan, spec, A, B, out, out_strides, dtype)
    if out is not None and tuple(out.shape) != plan.shapes[2]:
        raise ValueError(f"out has shape {tuple(out.shape)}; expected {plan.shapes[2]} for spec {spec!r}")
    return execute(plan, A, B, out, xp)
