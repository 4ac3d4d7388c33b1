"""Public contraction entry points: ``plan_contraction`` and ``contract``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, result_dtype
from tuckerkit.backend._device import device_op
from tuckerkit.engine import _workspace
from tuckerkit.engine._gpu import gpu_matmul, may_share_bounds
from tuckerkit.engine._plan import (
    SUMMED_PARTIAL_BYTES,
    SUMMED_TEMP_BYTES,
    CompiledKernel,
    ContractionPlan,
    KernelKind,
    build_plan,
)
from tuckerkit.engine._policy import (
    _PIN,
    BLAS_MAX_PIECES,
    CONTRACT_PARALLEL_FLOPS,
    CONTRACT_PIECE_SCALE,
    DOT_SERIAL_MAX,
    MIN_CHUNK_FLOPS,
    MIN_PARALLEL_FLOPS,
    PIN_FLOPS,
    QUIET_MIN_FLOPS,
    ExecutionPolicy,
    blas_pinned,
    parallel_for,
    quiet_blas_workers,
    resolve_policy,
    split_points,
    split_work,
)
from tuckerkit.engine._spec import parse_spec

_LAYOUTS = ("auto", "C", "F")
_COPIES = ("auto", "never")


def _check_copies(copies: Any) -> str:
    if not isinstance(copies, str) or copies not in _COPIES:
        raise ValueError(f"copies={copies!r} is not valid; expected one of {', '.join(map(repr, _COPIES))}")
    return copies


@functools.lru_cache(maxsize=1024)
def _cached_plan(spec, a_shape, a_strides, b_shape, b_strides, dtype, itemsize, out_strides, out_layout,
                 policy: ExecutionPolicy, copies: str = "auto"):
    parsed = parse_spec(spec, len(a_shape), len(b_shape))
    return build_plan(parsed, a_shape, a_strides, b_shape, b_strides, dtype, itemsize, out_strides, out_layout,
                      policy, copies)


def _as_operand(x: Any, name: str, xp, dtype) -> Any:
    if hasattr(x, "nnz") or getattr(x, "streamed", False) or hasattr(x, "slab_rows"):  # (raw AttributeError)
        raise TypeError(f"{name} is a {type(x).__name__}; contract takes dense arrays (numpy's, cupy's): for a sparse "
                        "or streamed tensor use tk.ttm, tk.multi_ttm or tk.mttkrp, which take any operand")
    if not hasattr(x, "dtype") or not hasattr(x, "shape") or not hasattr(x, "strides"):
        x = xp.asarray(np.asarray(x))  # (lists, and array-likes with __array__: a table, a Dask array)
    from tuckerkit._validation import plain_array

    x = plain_array(x, name)  # (a masked array's masked entries were read as data, as the other calls refuse)
    if x.dtype != dtype:
        x = x.astype(dtype)
    if any(s % x.itemsize for s in x.strides):  # misaligned views cannot go to BLAS
        x = xp.ascontiguousarray(x)
    return x


def _check_out(out: Any, write: bool = True) -> None:
    """``out=``: an array (numpy's or cupy's) the result may be written into (``write``: writeable; a plan
    only reads its strides); a one-line error otherwise."""
    if not hasattr(out, "dtype") or not hasattr(out, "shape") or not hasattr(out, "strides"):
        from tuckerkit._validation import describe

        raise TypeError(f"out must be a numpy array (a cupy array on the GPU) to write the result into; received "
                        f"{describe(out)} ({type(out).__name__})")
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(out, ma.MaskedArray):  # (numpy.ma's broadcasting error, not ours)
        raise TypeError("out is a masked array; expected a plain numpy array to write the result into")
    if write and not getattr(getattr(out, "flags", None), "writeable", True):
        raise ValueError(f"out is read-only (an array of shape {tuple(out.shape)} and dtype {out.dtype}); expected a "
                         "writeable array to write the result into")


def _prepare(spec, A, B, out, out_layout, write=True):
    if out_layout not in _LAYOUTS:
        raise ValueError(f"out_layout={out_layout!r} is not valid; expected one of {', '.join(map(repr, _LAYOUTS))}")
    if out is not None:
        _check_out(out, write)
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
        _check_out_shape(spec, A, B, out)  # (before planning: an out of another order failed in the planner's zip())
        if out.dtype != dtype:
            raise TypeError(f"out has dtype {out.dtype}; expected {dtype} (the result dtype of A and B)")
        if any(s % out.itemsize for s in out.strides):
            raise ValueError("out is not aligned to its itemsize; pass an aligned array")
        out_strides = tuple(s // out.itemsize for s in out.strides)
    return xp, dtype, A, B, out, out_strides


def _check_out_shape(spec: Any, A: Any, B: Any, out: Any) -> None:
    """``out``'s shape against the one ``spec`` gives ``A`` and ``B`` (a one-line ValueError; where the extents
    of one index disagree, the planner names them)."""
    sp = parse_spec(spec, A.ndim, B.ndim)
    sizes: dict[str, int] = {}
    for labels, shape in ((sp.a, A.shape), (sp.b, B.shape)):
        for x, n in zip(labels, shape, strict=True):
            if sizes.setdefault(x, int(n)) != int(n):
                return
    want = tuple(sizes[x] for x in sp.c)
    if tuple(out.shape) != want:
        raise ValueError(f"out has shape {tuple(out.shape)}; expected {want} for spec {spec!r}")


def _elem_strides(x) -> tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides)


def plan_contraction(
    spec: str, A: Any, B: Any, *, out: Any = None, out_layout: str = "auto", policy: ExecutionPolicy | None = None,
    copies: str = "auto",
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
    policy : ExecutionPolicy, optional
        The workers the plan runs on (default: :func:`default_policy`); the result does not depend on it.
    copies : {"auto", "never"}, default "auto"
        ``"auto"``: the cost model may copy an operand once when that is faster (an exceptional case's
        remedy, or the small matrix of a compiled kernel; ``plan.copies`` counts the elements). ``"never"``:
        only zero-copy evaluations (a batched GEMV or a summed batch for an exceptional case, BLAS instead of
        a kernel that needs the matrix re-laid out); a ``ValueError`` when none exists.

    Returns
    -------
    ContractionPlan
        Frozen and callable (``plan(A, B)``) on arrays of the same shapes, strides and dtype; ``contract``
        with ``plan=`` checks the spec too.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import plan_contraction
    >>> A, B = np.ones((4, 5)), np.ones((5, 6, 7))
    >>> plan_contraction("mk,knp->mnp", A, B).notation()
    'C_{m(np)} = A_{mk} B_{k(np)}'
    """
    copies = _check_copies(copies)
    xp, dtype, A, B, out, out_strides = _prepare(spec, A, B, out, out_layout, write=False)
    plan = _cached_plan(
        spec, tuple(A.shape), _elem_strides(A), tuple(B.shape), _elem_strides(B), str(dtype), dtype.itemsize,
        out_strides, out_layout, resolve_policy(policy), copies,
    )
    return plan if xp is np else _on_gpu(plan)


@functools.lru_cache(maxsize=1024)
def _on_gpu(plan: ContractionPlan) -> ContractionPlan:
    """The same plan for cupy operands: issued as cuBLAS strided-batched calls, no CPU thread split."""
    lay = plan._sr if plan._sr is not None else plan._bd
    if lay is not None:  # the compiled kernels are CPU only: cuBLAS on the BLAS plan's layout (and its copies)
        plan = dataclasses.replace(plan, compiled=CompiledKernel.NONE, _out_order=lay.blas_out_order)
        if plan._sr is not None:
            plan = dataclasses.replace(plan, copies=plan._sr.blas_copies, bytes_moved=plan._sr.blas_bytes)
    return dataclasses.replace(plan, device="cuda", parallel=False)


class _Bound:
    """What a planned call on numpy arrays needs, computed once per plan from its spec, shapes, strides and
    dtype (a call then only compares the operands with it and runs)."""

    __slots__ = ("a_shape", "a_strides", "alloc_perm", "alloc_shape", "b_shape", "b_strides", "direct", "dtype",
                 "launch", "small_rank", "specs", "views")

    def __init__(self, plan: ContractionPlan) -> None:
        self.dtype = np.dtype(plan.dtype)
        item = self.dtype.itemsize
        (self.a_shape, self.b_shape), (sa, sb) = plan.shapes[:2], plan.strides[:2]
        self.a_strides = tuple(x * item for x in sa)  # byte strides: equal ones are aligned ones
        self.b_strides = tuple(x * item for x in sb)
        self.specs: set[str] = set()  # spellings of the spec already checked against the plan's
        order = plan._out_order
        self.alloc_shape = tuple(plan.shapes[2][i] for i in order)
        self.alloc_perm = tuple(int(i) for i in np.argsort(order)) if order != tuple(range(len(order))) else None
        # the view steps of operand_views with its no-op reshapes and transposes left out (same arrays, so
        # the same BLAS calls and bits), for a plan that only views its operands; None otherwise
        la, lb, lc = plan._a, plan._b, plan._c
        self.small_rank = None  # a compiled kernel's runner (:func:`tuckerkit.engine._smallgemm.run_small_rank`)
        # its launches by the operands' and output's strides (:func:`tuckerkit.engine._smallgemm._launch`): a
        # cache, left out of copies and pickles (its rows hold addresses of this process's arrays)
        self.launch: dict[tuple, Any] = {}
        if plan.compiled != CompiledKernel.NONE and plan.kind != KernelKind.EMPTY:
            from tuckerkit.engine._smallgemm import run_small_rank

            self.small_rank = run_small_rank
        self.views = None
        if (plan.kind != KernelKind.EMPTY and plan.compiled == CompiledKernel.NONE and not plan._sum_a
                and not plan.summed_batch
                and not plan._sum_b and la is not None and lb is not None and lc is not None
                and la.copy_order is None and lb.copy_order is None and lc.copy_order is None):
            self.views = (_view_steps(la, plan.shapes[0]), _view_steps(lb, plan.shapes[1]),
                          _view_steps(lc, plan.shapes[2]))
        self.direct = self.views is not None and _one_pinned_call(
            _steps_shape(plan.shapes[0], self.views[0]), _steps_shape(plan.shapes[1], self.views[1]), plan.flops,
            self.dtype)

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if k != "launch"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
        self.launch = {}


def _view_steps(lay, shape: tuple[int, ...]):
    """``(keep_shape, perm, view_shape)`` of an operand layout, each None where it changes nothing."""
    keep = lay.keep_shape
    perm = lay.perm if lay.perm != tuple(range(len(lay.perm))) else None
    permuted = tuple(keep[i] for i in lay.perm)
    return (keep if keep != tuple(shape) else None, perm, lay.view_shape if lay.view_shape != permuted else None)


def _steps_shape(shape: tuple[int, ...], steps) -> tuple[int, ...]:
    """The shape of an operand of ``shape`` after :func:`_apply_steps` with ``steps``."""
    keep, perm, view = steps
    shape = tuple(shape) if keep is None else keep
    if perm is not None:
        shape = tuple(shape[i] for i in perm)
    return shape if view is None else tuple(view)


def _one_pinned_call(a_shape: tuple[int, ...], b_shape: tuple[int, ...], flops: int, dtype: Any) -> bool:
    """Whether :func:`cpu_matmul` runs views of these shapes (a planned contraction's: ``piece_scale`` of
    ``CONTRACT_PIECE_SCALE``) as one ``numpy.matmul`` with BLAS held to one thread, and nothing else: a GEMM of
    ``PIN_FLOPS`` or more below the cut into pieces, every extent at least 2 (no outer product, no level-1 or
    level-2 product cut by its bytes). :func:`_run_bound` then calls it without cpu_matmul's checks."""
    m, k = a_shape[-2:]
    n = b_shape[-1]
    if min(m, n, k) < 2 or (flops < PIN_FLOPS and k <= DOT_SERIAL_MAX):
        return False
    return flops < MIN_PARALLEL_FLOPS or (CONTRACT_PIECE_SCALE > 1
                                          and split_work(flops, dtype) < CONTRACT_PARALLEL_FLOPS)


def _apply_steps(x, steps):
    keep, perm, view = steps
    if keep is not None:
        x = x.reshape(keep)
    if perm is not None:
        x = x.transpose(perm)
    return x if view is None else x.reshape(view, copy=False)


def _prewake(plan: ContractionPlan) -> None:
    """For a host plan that runs in pieces: start waking the GEMM helpers that sleep now, so that their wake
    overlaps the call's own set-up (:func:`tuckerkit.engine._handoff.prewake`; once the helpers exist, their
    module is loaded)."""
    if plan.parallel:
        handoff = sys.modules.get("tuckerkit.engine._handoff")
        if handoff is not None:
            handoff.prewake()


def _run_bound(plan: ContractionPlan, bound: _Bound, A, B):
    """A planned call on numpy operands that passed :func:`_bound_call`: allocate, view, multiply (a compiled
    kernel's plan straight to its kernel: :func:`execute`'s other cases cannot arise for a fresh output)."""
    if bound.direct:  # one BLAS call on one thread (the route cpu_matmul would take, without its checks)
        out = _fresh_out(bound)
        va, vb, vc = bound.views  # type: ignore[misc]
        with _PIN:
            np.matmul(_apply_steps(A, va), _apply_steps(B, vb), out=_apply_steps(out, vc))
        return out
    _prewake(plan)
    out = _fresh_out(bound)
    if bound.small_rank is not None:
        return bound.small_rank(plan, A, B, out)
    views = bound.views
    if views is None:
        return execute(plan, A, B, out, np)
    cpu_matmul(_apply_steps(A, views[0]), _apply_steps(B, views[1]), _apply_steps(out, views[2]), plan.flops,
               plan.policy, CONTRACT_PIECE_SCALE)
    return out


def _bind(plan: ContractionPlan) -> _Bound:
    bound = plan._bound
    if bound is None:
        bound = _Bound(plan)
        object.__setattr__(plan, "_bound", bound)  # a cache: not part of the plan's value
    return bound


def _bound_call(plan: Any, A: Any, B: Any) -> _Bound | None:
    """The plan's bound data when ``A`` and ``B`` are numpy arrays of exactly the plan's shapes, byte strides
    and dtype (what every check of a planned call would accept), else None (the full checks then run)."""
    if type(A) is not np.ndarray or type(B) is not np.ndarray or type(plan) is not ContractionPlan:
        return None
    bound = _bind(plan)
    if (A.shape == bound.a_shape and B.shape == bound.b_shape and A.strides == bound.a_strides
            and B.strides == bound.b_strides and A.dtype == bound.dtype and B.dtype == bound.dtype
            and plan.device == "cpu"):
        return bound
    return None


def _fresh_out(bound: _Bound):
    buf = _workspace.empty(bound.alloc_shape, bound.dtype)  # (np.empty, unless a sweep's workspace is active)
    return buf if bound.alloc_perm is None else buf.transpose(bound.alloc_perm)


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only view (``a`` itself when it is read-only already; ``a``'s own flag unchanged).

    numba compiles, caches and loads one specialization per argument type, and a read-only array is another
    type than a writable one. The compiled kernels take their inputs through this, so that a tensor mapped
    from a file (read-only) and one in memory share one specialization: a fresh process's first HOOI on a
    memory-mapped 200^3 loaded ``_inner_kernel`` twice (60-70 ms, then 29-34 ms more for the second type), a
    fresh install compiled it twice."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def _check_spec(plan: ContractionPlan, spec: str, A, B) -> None:
    """A plan runs only the contraction it was made for (a plan of ``ik,kj->ij`` is not one of ``ki,kj->ij``,
    even on square operands)."""
    asked = str(parse_spec(spec, len(A.shape), len(B.shape)))
    if asked != plan.spec:
        raise ValueError(f"plan was made for spec {plan.spec!r}; received spec {asked!r} (make a plan for it)")


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
    if xp is np and np.dtype(dtype) == np.dtype(plan.dtype):
        return _fresh_out(_bind(plan))
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
    if la is None or lb is None or lc is None:  # pragma: no cover - only EMPTY plans lack layouts
        raise RuntimeError(f"internal error: plan {plan.spec!r} has no operand layouts")
    av = _operand_view(xp, A, la)
    bv = _operand_view(xp, B, lb)
    ck = out.reshape(lc.keep_shape) if tuple(out.shape) != lc.keep_shape else out
    if lc.copy_order is not None:
        tmp = xp.empty(tuple(lc.keep_shape[p] for p in lc.copy_order), dtype=out.dtype)
        return av, bv, tmp.reshape(lc.view_shape), ck.transpose(lc.copy_order)
    return av, bv, _view(ck.transpose(lc.perm), lc.view_shape), None


def cpu_matmul(av, bv, cv, flops: int, policy: ExecutionPolicy, piece_scale: int = 1) -> None:
    """``cv[...] = av @ bv`` on ``(*batch, m, k) @ (*batch, k, n)`` views, BLAS held to one thread.

    A product of at least MIN_PARALLEL_FLOPS is cut into pieces by the sizes alone (:func:`split_points`, at
    most ``BLAS_MAX_PIECES``: two per CPU of the machine): a batch over its largest mode; a single GEMM over
    whichever of its rows, columns or reduction moves the fewest extra bytes (rows re-read B per piece,
    columns re-read A, a cut reduction writes one partial product per piece, added afterwards in piece
    order). The cut never depends on the workers or the load, so neither do the bits. ``piece_scale``:
    pieces of at least that many times MIN_CHUNK_FLOPS.
    """
    if flops < PIN_FLOPS and av.shape[-1] <= DOT_SERIAL_MAX:  # OpenBLAS runs it on one thread in any setting
        # numpy reports the FPU's flags after the BLAS call: once in a full test run (float32 MTTKRP, finite
        # inputs, every output finite and right) a small SGEMM left FE_INVALID, from lanes it discards; the
        # inputs of a decomposition are checked for NaN and Inf on entry
        with np.errstate(invalid="ignore"):
            np.matmul(av, bv, out=cv)
        return
    if av.shape[-1] == 1 and OUTER_BY_UFUNC and cv.dtype.kind == "f":
        # an outer product (batched over shared modes: ``az,bz->abz``): each element one product, which numpy's
        # multiply writes in the output's memory order; matmul ran one GER per batch index over the whole output
        # (strided by the batch's extent where it is innermost). The same bits: one rounding per element
        np.multiply(av, bv, out=cv)
        return
    if _stream_split(av, bv, cv, policy):
        return
    with blas_pinned():
        if flops < MIN_PARALLEL_FLOPS or (piece_scale > 1 and split_work(flops, cv.dtype) < CONTRACT_PARALLEL_FLOPS):
            np.matmul(av, bv, out=cv)  # (a planned contraction below CONTRACT_PARALLEL_FLOPS: one call)
            return
        if piece_scale > 1:  # a planned contraction's pieces in float64 terms (float32 pieces twice the flops)
            flops = split_work(flops, cv.dtype)
        if flops >= QUIET_MIN_FLOPS and policy.workers > 1:  # its pieces need the cores OpenBLAS's workers spin on
            quiet_blas_workers()
        nd = cv.ndim
        batch_axes = [i for i in range(nd - 2) if cv.shape[i] >= 2]
        if batch_axes:
            _split_batch(av, bv, cv, flops, policy, max(batch_axes, key=lambda i: cv.shape[i]), piece_scale)
            return
        m, k = av.shape[-2:]
        n = bv.shape[-1]
        pieces = len(split_points(max(m, n, k), _piece_flops(flops, piece_scale), BLAS_MAX_PIECES)) - 1
        extra = {"rows": k * n, "cols": m * k, "reduction": 2 * m * n}  # bytes moved again per extra piece
        how = min(extra, key=lambda h: extra[h])
        if how == "reduction" and k >= 2 * pieces:
            _split_reduction(av, bv, cv, flops, policy, piece_scale)
        else:
            _split_batch(av, bv, cv, flops, policy, nd - 2 if n <= m else nd - 1, piece_scale)


#: a level-1 or level-2 product (an extent of 1: a matrix-vector or dot product) streams its operands at two flops
#: an element, so its flops alone would keep a 46 MB tensor-times-vector on one core (11.5 MFlop, below
#: CONTRACT_PARALLEL_FLOPS): it is cut by its bytes instead, into pieces of at least ``STREAM_PIECE_BYTES``, at
#: most one per CPU of the machine (``STREAM_MAX_PIECES``), over its batch, its rows or its columns where each
#: piece keeps long runs of memory (``STREAM_MIN_COLUMNS``), else over its reduction (a dot product, a transposed
#: matrix of short rows times a vector), the pieces' partial products added in piece order. The cut depends on the
#: sizes (and the machine's CPU count) only, as a BLAS product's does, so the bits do not depend on the workers;
#: they may differ from the uncut call's. Measured on the 2-core machine (two workers, medians of 15 interleaved,
#: float64), against one call: ``abc,c->ab`` / ``abc,a->bc`` / ``abc,bc->a`` / ``abc,ab->c`` / ``abc,b->ac`` /
#: ``abc,abc->`` on 200 x 180 x 160 0.68 / 0.65 / 0.65 / 0.65 / 0.66 / 0.63x the time, ``ab,b->a`` / ``ab,a->b`` on
#: 2000^2 0.79 / 0.80x; a 100^3 tensor-times-vector (8 MB) 1.0x, 60^3 (one piece) 1.0x
STREAM_PIECE_BYTES = 4 << 20
STREAM_MAX_PIECES = max(2, os.cpu_count() or 1)
#: ... over its rows or columns only where each piece takes at least this many consecutive elements of each line
#: of memory (160 in two pieces, ``abc,ab->c`` on 200 x 180 x 160 cut by rows: 1.40-1.44x one call's time; its
#: reduction instead 0.65x; 2000: 0.79x; 28800: 0.65x)
STREAM_MIN_COLUMNS = 512
#: whether :func:`cpu_matmul` writes an outer product (a reduction of extent 1) with numpy's multiply
OUTER_BY_UFUNC = True


def _stream_split(av, bv, cv, policy: ExecutionPolicy) -> bool:
    """A level-1 or level-2 product cut by its bytes (see ``STREAM_PIECE_BYTES``) and run on the policy's workers,
    BLAS held to one thread (a batch's pieces by numpy's matmul, a 2-D product's by :func:`_split_1d`); False,
    with nothing run, for any other product, or where it stays one piece (the caller then runs it)."""
    m, k = av.shape[-2:]
    n = bv.shape[-1]
    if min(m, n, k) > 1:
        return False
    nbytes = (av.size + bv.size + cv.size) * cv.itemsize
    pieces = min(STREAM_MAX_PIECES, nbytes // STREAM_PIECE_BYTES)
    if pieces < 2:
        return False
    nd = cv.ndim
    batch_axes = [i for i in range(nd - 2) if cv.shape[i] >= 2]
    if batch_axes:  # a batch of them: the batch, each piece numpy's matmul
        axis = max(batch_axes, key=lambda i: cv.shape[i])
        size = cv.shape[axis]
        pieces = min(pieces, size)
        with blas_pinned():
            _split_batch(av, bv, cv, 0, policy, axis, bounds=[size * i // pieces for i in range(pieces + 1)])
        return True
    if nd != 2:
        return False
    if n == 1 and m >= 2 * pieces and (abs(av.strides[-1]) <= abs(av.strides[-2])
                                       or m >= STREAM_MIN_COLUMNS * pieces):
        how, size = "rows", m  # a matrix times a vector: its rows (each a run of memory, or long runs of one)
    elif m == 1 and n >= STREAM_MIN_COLUMNS * pieces:
        how, size = "cols", n  # a vector times a matrix: its columns, in long runs
    elif k >= 2 * pieces:
        # a dot product, a vector times a narrow matrix, rows of a transposed matrix in short runs: the reduction,
        # each piece's partial product added in piece order
        how, size = "reduction", k
    else:
        return False
    bounds = [size * i // pieces for i in range(pieces + 1)]
    with blas_pinned():
        _split_1d(av, bv, cv, how, bounds, policy)
    return True


def _split_1d(av, bv, cv, how: str, bounds: list[int], policy: ExecutionPolicy) -> None:
    """``cv = av @ bv`` for a 2-D product with an extent of 1 (m or n), cut at ``bounds`` over its ``rows``, its
    ``cols`` or its ``reduction`` (then the pieces' partial products added in piece order): numpy's dot of each
    piece with the vector as a 1-D array where the piece is contiguous. numpy's matmul on such 2-D views held the
    interpreter's lock for some of them (200 x 28800 times a vector: two pieces 1.10x one call; by dot 0.57x); a
    strided piece (a row block of a transposed matrix, a column block) goes to matmul, which reads it in place
    where dot would copy it (4-6x the time)."""
    m, n = av.shape[0], bv.shape[1]
    a = av[0] if m == 1 else av  # (k,) or (m, k)
    b = bv[:, 0] if n == 1 else bv  # (k,) or (k, n)
    parts: list[Any] = [None] * (len(bounds) - 1)

    def work(i: int, _: Any) -> None:
        lo, hi = bounds[i], bounds[i + 1]
        if how in ("rows", "cols"):
            piece = a[lo:hi] if how == "rows" else b[:, lo:hi]
            if piece.flags.c_contiguous or piece.flags.f_contiguous:
                got = np.dot(piece, b) if how == "rows" else np.dot(a, piece)
                cv[(slice(lo, hi), 0) if how == "rows" else (0, slice(lo, hi))] = got
            elif how == "rows":  # (numpy's dot would copy a strided piece; matmul reads it in place)
                np.matmul(av[lo:hi], bv, out=cv[lo:hi])
            else:
                np.matmul(av, bv[:, lo:hi], out=cv[:, lo:hi])
        else:
            pa, pb = a[..., lo:hi], b[lo:hi]
            if all(x.ndim == 1 or x.flags.c_contiguous or x.flags.f_contiguous for x in (pa, pb)):
                parts[i] = np.reshape(np.dot(pa, pb), cv.shape)
            else:  # (a strided piece: matmul reads it in place, dot would copy it)
                parts[i] = np.matmul(av[:, lo:hi], bv[lo:hi])

    parallel_for(work, len(bounds) - 1, policy)
    if how == "reduction":
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        cv[...] = total


#: :func:`tuckerkit.engine._handoff.run_split`, bound at its first use (as ``_SMALL_RANK``)
_RUN_SPLIT: list[Any] = [None]


def run_split(av, bv, cv, axis: int, bounds: list[int], policy: ExecutionPolicy, partial=None) -> bool:
    """The pieces on the GIL-free helpers (:func:`tuckerkit.engine._handoff.run_split`, imported with numba
    on first use); False where they cannot take them, and for a level-1 or level-2 product (an extent of 1): the
    helpers call GEMM, which packs its operands even for one column (a 46 MB matrix-vector product in two pieces
    took 1.07-1.10x one call's time there), where numpy's matmul on the Python pool calls GEMV."""
    if min(av.shape[-2], av.shape[-1], bv.shape[-1]) == 1:
        return False
    run = _RUN_SPLIT[0]
    if run is None:
        from tuckerkit.engine._handoff import run_split as run

        _RUN_SPLIT[0] = run
    return run(av, bv, cv, axis, bounds, policy, partial)


def _piece_flops(flops: int, piece_scale: int) -> int:
    """The work :func:`split_points` cuts for pieces ``piece_scale`` times its smallest: a product that is
    cut at all gets at least two pieces (a function of the sizes only, like the cut itself)."""
    return max(flops // piece_scale, 2 * MIN_CHUNK_FLOPS) if piece_scale > 1 else flops


def _split_batch(av, bv, cv, flops: int, policy: ExecutionPolicy, axis: int, piece_scale: int = 1,
                 bounds: list[int] | None = None) -> None:
    """Pieces along one batch axis, or along the rows (``axis == nd - 2``) or columns (``nd - 1``): cut by the
    flops, or at ``bounds``."""
    nd = cv.ndim
    if bounds is None:
        bounds = split_points(cv.shape[axis], _piece_flops(flops, piece_scale), BLAS_MAX_PIECES)
    if len(bounds) <= 2:
        np.matmul(av, bv, out=cv)
        return

    def cut(x, lo: int, hi: int, ax: int):
        if x.shape[ax] == 1 and ax < nd - 2:  # a broadcast batch axis
            return x
        return x[(slice(None),) * ax + (slice(lo, hi),)]

    a_ax = axis if axis < nd - 2 else (nd - 2 if axis == nd - 2 else None)
    b_ax = axis if axis < nd - 2 else (nd - 1 if axis == nd - 1 else None)

    if run_split(av, bv, cv, axis, bounds, policy):  # the GIL-free helpers
        return

    def work(i: int, _: Any) -> None:
        lo, hi = bounds[i], bounds[i + 1]
        a = av if a_ax is None else cut(av, lo, hi, a_ax)
        b = bv if b_ax is None else cut(bv, lo, hi, b_ax)
        np.matmul(a, b, out=cut(cv, lo, hi, axis))

    parallel_for(work, len(bounds) - 1, policy)


def _split_reduction(av, bv, cv, flops: int, policy: ExecutionPolicy, piece_scale: int = 1) -> None:
    """Pieces along the reduction of one GEMM with a small output: a partial product per piece, added in
    piece order (so the bits do not depend on which worker ran which piece)."""
    k = av.shape[-1]
    bounds = split_points(k, _piece_flops(flops, piece_scale), BLAS_MAX_PIECES)
    partial = np.empty((len(bounds) - 1, *cv.shape), dtype=cv.dtype)
    if not run_split(av, bv, cv, -1, bounds, policy, partial):  # the GIL-free helpers, else the Python pool

        def work(i: int, _: Any) -> None:
            lo, hi = bounds[i], bounds[i + 1]
            np.matmul(av[..., lo:hi], bv[..., lo:hi, :], out=partial[i])

        parallel_for(work, len(bounds) - 1, policy)
    cv[...] = partial[0]
    for i in range(1, partial.shape[0]):
        cv += partial[i]


def summed_pieces(n_s: int, flops: int, c_bytes: int, dtype) -> list[int]:
    """Where :func:`summed_matmul` cuts its summed batch of ``n_s`` products: by the sizes alone (never the
    workers), at most as many pieces as ``SUMMED_PARTIAL_BYTES`` holds partial sums of ``c_bytes`` each.

    >>> summed_pieces(1000, 1_500_000_000, 120_000, "float64")[:3], summed_pieces(4, 10_000, 8, "float64")
    ([0, 62, 125], [0, 4])
    """
    bounds = split_points(n_s, split_work(flops, dtype) // CONTRACT_PIECE_SCALE)
    most = max(1, SUMMED_PARTIAL_BYTES // max(c_bytes, 1))
    if len(bounds) - 1 > most:
        bounds = [n_s * i // most for i in range(most + 1)]
    return bounds


def summed_matmul(av, bv, cv, flops: int, policy: ExecutionPolicy, xp=np) -> None:
    """``cv[...] = sum_s av[s] @ bv[s]`` (``Remedy.SUMMED_BATCH``): ``av`` ``(S, *batch, m, k)``, ``bv``
    ``(S, *batch, k, n)``, ``cv`` ``(*batch, m, n)``. The S products are cut into pieces by the sizes alone
    (:func:`summed_pieces`); a piece computes its products ``SUMMED_TEMP_BYTES`` at a time into a temporary
    and sums them into its partial; the partials are added in piece order. The same cuts and order whatever
    the workers, so the same bits; the pieces run on the policy's workers (BLAS held to one thread), on a
    GPU in one piece."""
    if xp is not np and (may_share_bounds(cv, av) or may_share_bounds(cv, bv)):
        # an out= over an input on the device: the sums land in it while the inputs are read (on the host,
        # :func:`execute` already gave such an out a fresh result)
        tmp_out = xp.empty(cv.shape, dtype=cv.dtype)
        summed_matmul(av, bv, tmp_out, flops, policy, xp)
        cv[...] = tmp_out
        return
    n_s = av.shape[0]
    c_bytes = cv.size * cv.itemsize
    bounds = summed_pieces(n_s, flops, c_bytes, cv.dtype) if xp is np else [0, n_s]
    if xp is np and len(bounds) == 2 and min(av.shape[-2], av.shape[-1], bv.shape[-1]) == 1:
        # matrix-vector products (``abc,ac->b``): cut by their bytes as :func:`_stream_split` cuts one (200 x 180
        # x 160 float64: 0.66-0.74x one piece's time)
        n = min(STREAM_MAX_PIECES, n_s, (av.size + bv.size) * av.itemsize // STREAM_PIECE_BYTES)
        if n >= 2:
            bounds = [n_s * i // n for i in range(n + 1)]
    pieces = len(bounds) - 1
    rows = max(1, SUMMED_TEMP_BYTES // max(c_bytes, 1))
    part = cv if pieces == 1 else xp.empty((pieces, *cv.shape), dtype=cv.dtype)

    def work(i: int, _: Any) -> None:
        lo, hi = bounds[i], bounds[i + 1]
        dst = part if pieces == 1 else part[i]
        tmp = xp.empty((min(rows, hi - lo), *cv.shape), dtype=cv.dtype)
        red = None
        for s0 in range(lo, hi, rows):
            s1 = min(hi, s0 + rows)
            t = tmp[:s1 - s0]
            if xp is np:
                np.matmul(av[s0:s1], bv[s0:s1], out=t)
            else:  # cuBLAS strided-batched calls on the views (cupy.matmul would copy them)
                gpu_matmul(xp, av[s0:s1], bv[s0:s1], t)
            if s0 == lo:
                xp.sum(t, axis=0, out=dst)
            else:
                if red is None:
                    red = xp.empty(cv.shape, dtype=cv.dtype)
                xp.sum(t, axis=0, out=red)
                dst += red

    if xp is not np:
        work(0, None)
        return
    with blas_pinned() if flops >= MIN_PARALLEL_FLOPS else contextlib.nullcontext():
        if pieces > 1 and policy.workers > 1:
            if flops >= QUIET_MIN_FLOPS:
                quiet_blas_workers()
            parallel_for(work, pieces, policy)
        else:
            for i in range(pieces):
                work(i, None)
    if pieces > 1:
        cv[...] = part[0]
        for i in range(1, pieces):
            cv += part[i]


#: Functions the hot paths call from modules they cannot import at load time (a cycle, or numba's modules, which
#: ``import tuckerkit`` does not load), bound at their first use. A function-level ``from ... import`` runs the
#: import machinery at every call: 30-45 us on a call that comes right after a 64 MB read has evicted the
#: interpreter's state from the caches (a TTM right after another one, a HOOI sweep's step after its pass over
#: X), against 1-2 us for a look-up here. ``_SMALL_RANK``: :func:`tuckerkit.engine._smallgemm.run_small_rank`
_SMALL_RANK: list[Any] = [None]
#: whether :func:`execute` binds a compiled kernel's host plan to its layout on its first run, so that the plan
#: keeps its launches (:class:`~tuckerkit.engine._smallgemm._Launch`: tiles, packing and helpers' rows worked out
#: once per operand strides) for every caller, with or without ``out=``. Before, only plans run through
#: :func:`contract`'s fast path or allocating their own output were bound; CP-ALS's dimension tree, which passes
#: its own buffers, redid that work at every pass. CP-ALS per iteration, kept launches against none (the Zen 5
#: machine, interleaved medians of 7-9 calls of 20 iterations in one process, the same bits): 200^3 at R = 10
#: float32 0.86-0.87x (three runs), float64 0.95x, R = 32 float32 0.93x, R = 50 1.01-1.02x (one run 1.09x);
#: 320x240x160 at R = 10 0.97x; 60^4 at R = 10 0.97-0.99x. Measured again once ``flat_span`` skipped numpy's
#: ``as_strided`` (engine/_smallgemm.py; part of what the unbound calls paid): 200^3 at R = 10 float32 0.93-0.99x
#: in four runs (one more 1.16x); the two changes together against neither float32 0.95-1.04x, float64 0.90-0.91x
KEEP_LAUNCHES = True


def execute(plan: ContractionPlan, A, B, out=None, xp=None):
    """Run ``plan`` on ``A`` and ``B`` (already validated), writing into ``out`` when given."""
    if xp is None:
        xp = array_namespace(A, B, out)
    if xp is np:
        _prewake(plan)
    if out is None:
        out = _alloc_out(plan, xp, A.dtype)
    elif xp is np and plan.kind != KernelKind.EMPTY and (np.may_share_memory(out, A) or np.may_share_memory(out, B)):
        # an out= over an input's memory: the kernels write it while they still read the input (numpy's own
        # matmul and einsum copy then, the compiled kernels and the summed batch would not), so the result
        # is made in a fresh array of the plan without out=, then copied in
        fresh = _cached_plan(plan.spec, plan.shapes[0], plan.strides[0], plan.shapes[1], plan.strides[1], plan.dtype,
                             np.dtype(plan.dtype).itemsize, None, "auto", plan.policy, "auto")
        out[...] = execute(fresh, A, B, None, xp)
        return out
    if plan.kind == KernelKind.EMPTY:
        out[...] = 0
        return out
    if plan.compiled != CompiledKernel.NONE and xp is np:
        if plan._bound is None and KEEP_LAUNCHES:
            _bind(plan)  # (its launches then kept: see KEEP_LAUNCHES)
        run = _SMALL_RANK[0]
        if run is None:  # (numba's module: not on import tuckerkit)
            from tuckerkit.engine._smallgemm import run_small_rank as run

            _SMALL_RANK[0] = run
        return run(plan, A, B, out)
    av, bv, cv, target = operand_views(plan, A, B, out, xp)
    if plan.summed_batch:
        summed_matmul(av, bv, cv, plan.flops, plan.policy, xp)
    elif xp is np:
        cpu_matmul(av, bv, cv, plan.flops, plan.policy, CONTRACT_PIECE_SCALE)
    else:  # cupy: cuBLAS strided-batched GEMM on the same views
        gpu_matmul(xp, av, bv, cv)
    if target is not None:
        target[...] = cv.reshape(target.shape)
    return out


def run_bound_plan(plan: ContractionPlan, A: Any, B: Any, out: Any = None) -> Any:
    """``plan(A, B, out)``: the operands must be arrays of exactly the shapes, strides and dtype of the plan."""
    if out is None:
        bound = _bound_call(plan, A, B)
        if bound is not None:
            return _run_bound(plan, bound, A, B)
    if out is not None:
        _check_out(out)
    xp = array_namespace(A, B, out)
    if plan.dtype == "float64" and any(getattr(getattr(x, "dtype", None), "kind", "") in "biu" and
                                       hasattr(x, "strides") for x in (A, B)):
        # (integer or bool operands, as the plan was made from them: promoted to float64 as contract promotes
        # them; a float32 operand to a float64 plan stays refused below, as any other dtype)
        A, B = (_as_operand(x, name, xp, np.dtype(np.float64)) if x.dtype.kind in "biu" else x
                for name, x in (("A", A), ("B", B)))
    for name, x in (("A", A), ("B", B)):
        if not hasattr(x, "dtype") or not hasattr(x, "strides"):
            raise TypeError(f"{name} must be a numpy or cupy array for a plan call; received {type(x).__name__}")
        if str(x.dtype) != plan.dtype:
            raise ValueError(f"plan was made for dtype {plan.dtype}; received {name} of dtype {x.dtype}")
    out_strides = None
    if out is not None:
        if str(out.dtype) != plan.dtype:
            raise ValueError(f"plan was made for dtype {plan.dtype}; received out of dtype {out.dtype}")
        out_strides = _elem_strides(out)
        if tuple(out.shape) != plan.shapes[2]:
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {plan.shapes[2]} for spec {plan.spec!r}")
    _check_reuse(plan, plan.spec, A, B, out, out_strides, np.dtype(plan.dtype))
    if (plan.device == "cuda") != (xp is not np):
        raise ValueError(f"plan was made for device {plan.device!r}; received arrays of the other kind")
    return execute(plan, A, B, out, xp)


#: the plans of :func:`contract` calls with every option at its default on numpy operands of one floating dtype,
#: by spec, the operands' shapes, byte strides and dtype and the default policy (at most ``_FAST_MAX``, then
#: started afresh): a repeated call skips the operands' checks and conversion and the planner's cache key and
#: runs on the plan's bound route, as a call of the plan itself does (the same plan, hence the same bits).
#: Measured (the 2-core Zen 4 machine): an 8 x 8 by 8 x 8 x 8 product 21.5 -> 10.1 us a call back to back
#: (einsum's: 13.6 us); Table II's float32 GEMMs at n = 64 (33.5 MFlop, every call cold, in-process A/B of 61
#: interleaved rounds, three runs) 0.75-0.84x einsum's speed -> 0.76-0.86x.
_FAST_PLANS: dict[tuple, ContractionPlan] = {}
_FAST_MAX = 256


@device_op
def contract(
    spec: str,
    A: Any,
    B: Any,
    *,
    out: Any = None,
    plan: ContractionPlan | None = None,
    out_layout: str = "auto",
    policy: ExecutionPolicy | None = None,
    copies: str = "auto",
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
        A plan from :func:`plan_contraction` for the same spec and arrays of the same shapes, strides and
        dtype (anything else raises a one-line ``ValueError``).
    out_layout : {"auto", "C", "F"}, default "auto"
        Layout of a freshly allocated output (see :func:`plan_contraction`).
    policy : ExecutionPolicy, optional
        The workers a new plan runs on (default: :func:`default_policy`); a given ``plan`` carries its own.
    copies : {"auto", "never"}, default "auto"
        Whether a new plan may copy an operand once when faster (see :func:`plan_contraction`).

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
    if isinstance(plan, ContractionPlan):  # (options that contradict the given plan: refused, not ignored)
        if type(copies) is str and copies == "never" and getattr(plan, "copies", 0) > 0:
            raise ValueError(f"copies='never', but plan copies {plan.copies} elements (it was made with copies="
                             "'auto'); make it with plan_contraction(..., copies='never') or leave copies out")
        made = getattr(plan, "out_layout", "auto")
        n_out = len(plan.shapes[2])
        want = tuple(range(n_out)) if out_layout == "C" else tuple(reversed(range(n_out)))
        if out is None and type(out_layout) is str and out_layout in ("C", "F") and made != out_layout and not (
                made == "auto" and (n_out < 2 or tuple(plan._out_order) == want)):  # (an auto plan that allocates so)
            raise ValueError(f"out_layout={out_layout!r}, but plan was made with out_layout={made!r}; make it with "
                             f"plan_contraction(..., out_layout={out_layout!r}) or leave out_layout out")
    if plan is not None and out is None:  # a planned call on the arrays the plan was made for: check, run
        bound = _bound_call(plan, A, B)
        if (bound is not None and type(spec) is str and spec in bound.specs and type(copies) is str
                and copies in _COPIES and type(out_layout) is str and out_layout in _LAYOUTS):
            return _run_bound(plan, bound, A, B)
    fast = None
    if (plan is None and out is None and policy is None and device is None and type(A) is np.ndarray
            and type(B) is np.ndarray and type(spec) is str and type(copies) is str and copies == "auto"
            and type(out_layout) is str and out_layout == "auto" and A.dtype == B.dtype and A.dtype.char in "fdFD"
            and A.dtype.isnative):
        # a call with every option at its default on numpy operands of one floating dtype: planned once for its
        # spec, shapes, strides and the default policy, then run on the plan's bound route
        fast = (spec, A.shape, A.strides, B.shape, B.strides, A.dtype, resolve_policy(None))
        hit = _FAST_PLANS.get(fast)
        if hit is not None:
            return _run_bound(hit, _bind(hit), A, B)
    copies = _check_copies(copies)
    a_in, b_in = A, B
    xp, dtype, A, B, out, out_strides = _prepare(spec, A, B, out, out_layout)
    if plan is None:
        plan = _cached_plan(
            spec, tuple(A.shape), _elem_strides(A), tuple(B.shape), _elem_strides(B), str(dtype),
            dtype.itemsize, out_strides, out_layout, resolve_policy(policy) if fast is None else fast[-1], copies,
        )
        if xp is not np:
            plan = _on_gpu(plan)
        elif fast is not None and A is a_in and B is b_in and plan.device == "cpu":  # (operands taken as given)
            if len(_FAST_PLANS) >= _FAST_MAX:
                _FAST_PLANS.clear()
            _FAST_PLANS[fast] = plan
    else:
        if not isinstance(plan, ContractionPlan):
            raise TypeError(f"plan must be a ContractionPlan from plan_contraction; received {type(plan).__name__}")
        _check_spec(plan, spec, A, B)
        _check_reuse(plan, spec, A, B, out, out_strides, dtype)
        if type(spec) is str and xp is np:
            _bind(plan).specs.add(spec)  # this spelling matches the plan: later calls skip parsing it
    if out is not None and tuple(out.shape) != plan.shapes[2]:
        raise ValueError(f"out has shape {tuple(out.shape)}; expected {plan.shapes[2]} for spec {spec!r}")
    return execute(plan, A, B, out, xp)
