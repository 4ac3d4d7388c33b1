"""Matricized tensor times Khatri-Rao product (MTTKRP) on dense arrays, and the Khatri-Rao product."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuckerkit._validation import check_factor_list, check_matrices, check_mode, describe
from tuckerkit.backend import array_namespace
from tuckerkit.backend._device import device_op
from tuckerkit.engine import _workspace
from tuckerkit.engine._contract import _elem_strides, contract, plan_contraction
from tuckerkit.engine._plan import ContractionPlan
from tuckerkit.engine._policy import ExecutionPolicy, resolve_policy

_LETTERS = "abcdefghijklmnopqrstuvwxyABCDEFGHIJKLMNOPQRSTUVWXY"
_RANK = "Z"


@device_op
def khatri_rao(matrices: Sequence[Any], *, device: Any = None) -> Any:
    """Column-wise Kronecker product; the first matrix varies slowest (row-major over the modes).

    Parameters
    ----------
    matrices : sequence of arrays, each of shape (I_k, R)
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array, shape (prod(I_k), R)

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import khatri_rao
    >>> khatri_rao([np.ones((2, 3)), np.ones((4, 3))]).shape
    (8, 3)
    """
    from tuckerkit._validation import plain_array

    mats = check_matrices(matrices)
    if len(mats) == 0:
        raise ValueError("matrices is empty; expected at least one matrix")
    # (numpy.matrix broadcast to 3-D failed in numpy's words; a masked array's masked entries read as data)
    mats = [plain_array(U, f"matrices[{i}]") for i, U in enumerate(mats)]
    for i, U in enumerate(mats):
        if not hasattr(U, "ndim") or not hasattr(U, "shape"):
            raise TypeError(f"matrices[{i}] is {describe(U)}; expected a 2-D array of shape (I_{i}, R)")
        if U.ndim != 2:
            raise ValueError(f"matrices[{i}] is {U.ndim}-D (shape {tuple(U.shape)}); expected a 2-D matrix of shape "
                             f"(I_{i}, R)")
    R = mats[0].shape[1]
    for i, U in enumerate(mats):
        if U.shape[1] != R:
            raise ValueError(
                f"matrices[{i}] has shape {tuple(U.shape)}; expected 2-D with {R} columns like matrices[0]"
            )
    return _khatri_rao(mats)


def _khatri_rao(mats: Sequence[Any]) -> Any:
    out = mats[0]
    R = out.shape[1]
    for U in mats[1:]:
        if type(out) is np.ndarray and type(U) is np.ndarray:  # (host: the product in a block of the pool)
            dt = np.result_type(out, U)
            nxt = _workspace.empty((out.shape[0], U.shape[0], R), dt)
            np.multiply(out[:, None, :], U[None, :, :], out=nxt)
            out = nxt.reshape(out.shape[0] * U.shape[0], R)  # (not -1: R = 0 leaves it undetermined)
        else:
            out = (out[:, None, :] * U[None, :, :]).reshape(out.shape[0] * U.shape[0], R)
    return out


@dataclass(frozen=True)
class MTTKRPPlan:
    """How :func:`mttkrp` evaluates one mode: one GEMM, or a GEMM then a batched GEMV; bound to the tensor,
    mode and rank it was made for.

    Attributes
    ----------
    mode : int
    first : tuple of int
        Modes contracted by the GEMM with their Khatri-Rao product (outer to inner in memory).
    second : tuple of int
        Modes contracted afterwards, batched over the rank.
    plans : tuple of ContractionPlan
        The engine plans of the steps.
    intermediate_elements : int
        Size of the partial result between the two steps.
    shape, strides : tuple of int
        The tensor the plan was made for.
    rank : int
    dtype : str
    fused : bool
        One pass (a 3-way tensor's mode other than the unit-stride one, where the planner gives the product with
        the third mode's factor to the compiled inner kernel): each tile of that product summed against the
        unit-stride mode's factor as it finishes (:func:`~tuckerkit.engine._smallgemm.ttm_inner_dot`), no
        intermediate; for the unit-stride mode, each tile times the outermost mode's factor added to its piece's
        sums (:func:`~tuckerkit.engine._smallgemm.ttm_inner_axpy`). 200^3, two workers, medians of 11: the
        outermost mode, float64 R = 10 / 32 / 50 0.67 / 0.69 / 0.63x the two steps' time, float32 0.40 / 0.53 /
        0.55x; the middle mode (C and F order, 100^3 to 320x240x160, R = 10-50), 0.68-1.02x in float64 and
        0.57-0.94x in float32; the unit-stride mode (100^3 to 320x240x160, R = 10-50) 0.58-0.77x in float64,
        0.64-0.86x in float32.

    A plan is callable: ``plan(X, factors)``; another mode, tensor or rank raises a one-line ``ValueError``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import mttkrp_plan
    >>> X, U = np.ones((4, 5, 6)), [np.ones((4, 2)), None, np.ones((6, 2))]
    >>> p = mttkrp_plan(X, U, 1)
    >>> p.first, p.second, [q.kind.value for q in p.plans], p(X, U).shape
    ((2,), (0,), ['gemm', 'batched_gemv'], (5, 2))
    """

    mode: int
    first: tuple[int, ...]
    second: tuple[int, ...]
    plans: tuple[ContractionPlan, ...] = field(default=())
    intermediate_elements: int = 0
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    rank: int = 0
    dtype: str = ""
    fused: bool = False

    def explain(self) -> str:
        if self.fused:
            head = (f"mttkrp mode {self.mode}: one pass, mode {self.first[0]} contracted by the compiled kernel, "
                    + (f"each tile times mode {self.second[0]}'s factor added up in cache (no intermediate)"
                       if self.strides[self.mode] == 1 else
                       f"each tile summed against mode {self.second[0]}'s factor in cache (no intermediate)"))
            return "\n".join([head] + ["  " + p.explain().replace("\n", "\n  ") for p in self.plans])
        merged = len(self.first) > 1 and self.plans and len(self.plans[0].shapes[1]) == 2
        head = (
            f"mttkrp mode {self.mode}: contract modes {list(self.first)}"
            + (f" (one axis of a view: mode {self.first[0]}'s letter below)" if merged else "")
            + (" with their Khatri-Rao product" if len(self.first) > 1 else " with its factor")
            + (f", then modes {list(self.second)} batched over the rank" if self.second else "")
            + f" (intermediate {self.intermediate_elements:,} elements)"
        )
        return "\n".join([head] + ["  " + p.explain().replace("\n", "\n  ") for p in self.plans])

    def __call__(self, X: Any, factors: Sequence[Any]) -> Any:
        """The MTTKRP of mode ``self.mode`` for a tensor of exactly the shape, strides and dtype of the plan."""
        facs, R = check_factor_list(factors, tuple(X.shape), self.mode, X.dtype)
        return dense_mttkrp(X, facs, self.mode, R, self, self.plans[0].policy if self.plans else ExecutionPolicy())

    def check(self, X: Any, mode: int, R: int) -> None:
        if mode != self.mode:
            raise ValueError(f"plan was made for mode {self.mode}; received mode {mode} (make a plan for it)")
        got = (tuple(X.shape), _elem_strides(X), R, str(X.dtype))
        if got != (self.shape, self.strides, self.rank, self.dtype):
            raise ValueError(
                f"plan was made for X of shape {self.shape}, strides {self.strides}, rank {self.rank}, dtype "
                f"{self.dtype}; received shape {got[0]}, strides {got[1]}, rank {got[2]}, dtype {got[3]}"
            )


#: the largest rank at which a float32 tensor's side inside the mode takes two chains (:func:`_mttkrp_split`)
F32_INNER_CHAINS_MAX_RANK = 32


def _simd() -> bool:
    """Whether the compiled kernels run here (imported when first asked: numba is not imported with tuckerkit)."""
    from tuckerkit.engine._simd import simd_supported

    return simd_supported()


#: the smallest tensor whose single-mode MTTKRP takes two chains at any rank (:func:`_mttkrp_split`; measured
#: from 8.6M elements; below about a million a second call costs more than the bytes it saves)
CHAINS_MIN_ELEMENTS = 1 << 20


def _mttkrp_split(shape, strides, n, R, dtype=np.float64, host: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The modes of the first (GEMM) and second (batched over the rank) steps of mode ``n``'s MTTKRP.

    Modes on both sides of ``n`` in memory: the larger side first. Modes on one side only: one step with the
    side's Khatri-Rao product when that is small (at most a quarter of ``X``'s elements), else the side cut in
    two chains, the far end first (a TTM-like contraction of ``X`` with a smaller Khatri-Rao product, then a
    batched GEMV over the rank). Two chains also, whatever the rank, for tensors of
    :data:`CHAINS_MIN_ELEMENTS` or more in float64, and in float32 where the side lies outside ``n`` (larger
    strides): the first step is then a TTM that the compiled small-rank kernels run (R <= 32) or a regular
    GEMM, not a skinny GEMM of the unfolding against the whole Khatri-Rao product. Measured (200^3 and
    320x240x160, 60^4; R = 10, 20, 32, 50, 64; interleaved medians of 7, one process, two chains over one
    step): float64 0.43-0.88x the time (0.97x at R = 64), float32 with the side outside 0.44-0.86x; float32
    with the side inside (mode 0 of a C-order tensor) 0.70-1.31x, so that case kept one step, until the first
    step of a side of adjacent modes ran as one merged axis (:func:`_first_operand`) and the compiled kernels
    could take it: then, up to ``F32_INNER_CHAINS_MAX_RANK`` where the kernels compile (:func:`_simd`), 0.34-0.41x
    on 60^4 (C and F), 30x40x50x60 and 20^5 at R = 5-10, 0.48-0.95x on 3-way tensors whose first mode is not
    one fused pass (R = 5-32; one case, (400, 100, 100) at R = 10, 1.28x), but 1.02-1.26x at R = 50, where the
    chain's first step is BLAS's. 200^3, R = 10,
    mode 2: 9.4 -> 3.6 ms (a streaming read of X: 4.3 ms on one thread), which CP-ALS's line search pays once
    per tried jump. ``host``: numpy arrays; a GPU's keep the former rule (not measured there)."""
    others = [m for m in range(len(shape)) if m != n]
    outer = sorted((m for m in others if strides[m] > strides[n]), key=lambda m: -strides[m])
    inner = sorted((m for m in others if strides[m] <= strides[n]), key=lambda m: -strides[m])
    size = math.prod(shape)
    if outer and inner:
        po, pi = math.prod(shape[m] for m in outer), math.prod(shape[m] for m in inner)
        return (tuple(inner), tuple(outer)) if pi >= po else (tuple(outer), tuple(inner))
    side = outer or inner
    if not side:
        return (), ()
    full = math.prod(shape[m] for m in side)
    dt = np.dtype(dtype)
    chains = host and size >= CHAINS_MIN_ELEMENTS and (
        dt == np.float64 or (dt == np.float32 and (side is outer or (R <= F32_INNER_CHAINS_MAX_RANK and _simd()))))
    if len(side) == 1 or (full * R <= max(size // 4, 1) and not chains):
        return tuple(side), ()
    # split the side into two chains: first the far end (away from mode n), balancing the temporaries
    best: tuple[int, tuple[int, ...], tuple[int, ...]] = (-1, (), ())
    for j in range(1, len(side)):
        far, near = (side[j:], side[:j]) if side is inner else (side[:j], side[j:])
        pf = math.prod(shape[m] for m in far)
        mem = pf * R + size // pf * R + math.prod(shape[m] for m in near) * R
        if best[0] < 0 or mem < best[0]:
            best = (mem, tuple(far), tuple(near))
    return best[1], best[2]


def rank_outer(xp, X, rest, R, dtype):
    """An (I_rest..., R) buffer with the rank outermost and the rest in X's memory order (a host one from the
    sweep's workspace or the engine's block pool: CP-ALS's partials, made every sweep)."""
    shape, axes = rank_outer_layout(X, rest, R)
    buf = _workspace.empty(shape, dtype) if xp is np else xp.empty(shape, dtype=dtype)
    return buf.transpose(axes)


def rank_outer_layout(X, rest, R) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """:func:`rank_outer`'s buffer shape (C order) and the axes its (I_rest..., R) view takes of it."""
    st = _elem_strides(X)
    mem = sorted(range(len(rest)), key=lambda i: -st[rest[i]])
    shape = (R, *(X.shape[rest[i]] for i in mem))
    axes = [0] * (len(rest) + 1)
    for pos, i in enumerate(mem):
        axes[i] = pos + 1
    axes[-1] = 0
    return shape, tuple(axes)


def _merged_view(T: Any, axes: list[int]) -> tuple[Any, list[int]] | None:
    """``T`` with ``axes`` merged into one last axis, as a view, and the order of its other axes; None unless
    each of ``axes`` lies exactly the next one's extent times its stride apart in memory (then a transpose and
    a reshape are views: a C- or an F-ordered tensor's halves)."""
    st = T.strides
    if len(axes) < 2 or any(st[a] != st[b] * T.shape[b] for a, b in itertools.pairwise(axes)):
        return None
    keep = [i for i in range(T.ndim) if i not in axes]
    merged = T.transpose(keep + axes).reshape((*(T.shape[i] for i in keep), math.prod(T.shape[a] for a in axes)))
    return merged, keep


def _specs(ndim: int, n: int, first, second) -> tuple[str, str, list[int]]:
    x = _LETTERS[:ndim]
    rest = [m for m in range(ndim) if m not in first]
    p_sub = "".join(x[m] for m in rest) + _RANK
    spec1 = f"{x},{''.join(x[m] for m in first)}{_RANK}->{p_sub if second else x[n] + _RANK}"
    spec2 = f"{p_sub},{''.join(x[m] for m in second)}{_RANK}->{x[n]}{_RANK}"
    return spec1, spec2, rest


def _first_operand(X: Any, first: tuple[int, ...], spec1: str) -> tuple[Any, str]:
    """The tensor and spec of the first step: where the ``first`` modes lie next to each other in memory in
    the Khatri-Rao product's row order (a C- or an F-ordered tensor's sides), ``X`` with them merged into one
    axis (a view) against the 2-D Khatri-Rao product, so that the planner can give the step to the compiled
    small-rank kernels as CP-ALS's tree does (a 3-D matrix operand leaves it to BLAS); else ``X`` and
    ``spec1`` as they are."""
    view = _merged_view(X, list(first)) if len(first) > 1 else None
    if view is None:
        return X, spec1
    Xm, keep = view
    ins, out = spec1.split("->")
    x = ins.split(",")[0]
    m = x[first[0]]
    return Xm, f"{''.join(x[k] for k in keep)}{m},{m}{_RANK}->{out}"


def build_mttkrp_plan(X: Any, n: int, R: int, policy: ExecutionPolicy) -> MTTKRPPlan:
    xp = array_namespace(X)
    fused = _fused_plan(X, n, R, policy) if xp is np else None
    if fused is not None:
        p, m, u = fused
        return MTTKRPPlan(n, (m,), (u,), (p,), 0, tuple(X.shape), _elem_strides(X), R, str(X.dtype), True)
    first, second = _mttkrp_split(X.shape, _elem_strides(X), n, R, X.dtype, xp is np)
    spec1, spec2, rest = _specs(X.ndim, n, first, second)
    out = xp.empty((X.shape[n], R), dtype=X.dtype)
    X1, spec1 = _first_operand(X, first, spec1) if xp is np else (X, spec1)  # (cuBLAS's: not measured)
    kr1 = xp.empty((*(X.shape[m] for m in first), R) if X1 is X else (math.prod(X.shape[m] for m in first), R),
                   dtype=X.dtype)
    plans = []
    inter = 0
    if not first:
        pass
    elif second:
        P = rank_outer(xp, X, rest, R, X.dtype)
        plans.append(plan_contraction(spec1, X1, kr1, out=P, policy=policy))
        kr2 = xp.empty((*(X.shape[m] for m in second), R), dtype=X.dtype)
        plans.append(plan_contraction(spec2, P, kr2, out=out, policy=policy))
        inter = math.prod(P.shape)
    else:
        plans.append(plan_contraction(spec1, X1, kr1, out=out, policy=policy))
    return MTTKRPPlan(n, first, second, tuple(plans), inter, tuple(X.shape), _elem_strides(X), R, str(X.dtype))


def _fused_plan(X: Any, n: int, R: int, policy: ExecutionPolicy) -> tuple[ContractionPlan, int, int] | None:
    """For a 3-way host array with a unit-stride mode: the plan of the product with the factor of the mode ``m``
    the compiled kernel contracts, ``m`` and the mode ``o`` whose factor then sums, where that plan runs the
    compiled inner kernel (then the MTTKRP is one pass, :class:`MTTKRPPlan`'s ``fused``); else None. For ``n``
    other than the unit-stride mode ``u``: the view ``(n, m, u)``, each tile summed against ``u``'s factor
    (:func:`~tuckerkit.engine._smallgemm.ttm_inner_dot`; the outermost mode reads rows of ``u`` back to back, the
    middle one walks ``m`` at its long stride, as the product of ``m`` alone does); for ``n = u``: ``m`` the
    middle mode, the view ``(o, m, u)``, each tile times the outermost mode's factor added up
    (:func:`~tuckerkit.engine._smallgemm.ttm_inner_axpy`)."""
    from tuckerkit.engine._plan import CompiledKernel

    if X.ndim != 3 or X.shape[n] < 2 or X.dtype not in (np.float32, np.float64) or not X.flags.aligned:
        return None
    st = _elem_strides(X)
    if any(s <= 0 for s in st):
        return None
    others = [k for k in range(3) if k != n]
    if st[n] == 1 and X.shape[n] > 1:  # the unit-stride mode itself: the middle mode's product, then the outer's
        m, o = sorted(others, key=lambda k: st[k])
        if X.shape[o] < 2:  # (one row of the view: the kernel would cut the sum over i instead, no pass to fuse)
            return None
        keep, u = o, n
    else:
        u_ = next((k for k in others if st[k] == 1 and X.shape[k] > 1), None)
        if u_ is None:
            return None
        u = u_
        m = next(k for k in others if k != u)
        keep, o = n, u
    x = _LETTERS[:3]
    out = rank_outer(np, X, [keep, u], R, X.dtype)
    p = plan_contraction(f"{x},{x[m]}{_RANK}->{x[keep]}{x[u]}{_RANK}", X,
                         np.empty((X.shape[m], R), X.dtype), out=out, policy=policy)
    return (p, m, o) if getattr(p, "compiled", None) == CompiledKernel.TTM_INNER else None


def dense_mttkrp(X: Any, factors: Sequence[Any], n: int, R: int, plan: MTTKRPPlan | None,
                 policy: ExecutionPolicy) -> Any:
    """Mode ``n``'s MTTKRP of a dense array in at most two contractions (arguments validated)."""
    xp = array_namespace(X)
    dtype = np.result_type(X.dtype, *(U.dtype for m, U in enumerate(factors) if m != n))
    if X.dtype != dtype:
        X = X.astype(dtype)
    if plan is None:
        plan = build_mttkrp_plan(X, n, R, policy)
    else:
        if not isinstance(plan, MTTKRPPlan):
            raise TypeError(f"plan must be an MTTKRPPlan from mttkrp_plan; received {type(plan).__name__}")
        plan.check(X, n, R)
    first, second = plan.first, plan.second
    if plan.fused:
        if xp is not np:
            raise ValueError("plan was made for device 'cpu'; received arrays of the other kind")
        from tuckerkit.engine._smallgemm import ttm_inner_axpy, ttm_inner_dot

        U, W = np.ascontiguousarray(factors[first[0]], dtype=dtype), factors[second[0]].astype(dtype, copy=False)
        if plan.strides[n] == 1:  # the unit-stride mode: each tile times the outer factor, added up
            return ttm_inner_axpy(X.transpose(second[0], first[0], n), U, W, policy)
        return ttm_inner_dot(X.transpose(n, first[0], second[0]), U, W, policy)
    if not first:  # a 1-way tensor: the sum over nothing
        return xp.asarray(X)[:, None] * xp.ones((1, R), dtype=dtype)
    spec1, spec2, rest = _specs(X.ndim, n, first, second)
    X1, spec1 = _first_operand(X, first, spec1) if xp is np else (X, spec1)  # (cuBLAS's: not measured)
    kr = _khatri_rao([factors[m] for m in first])
    kr1 = _as_planned(xp, kr.reshape(*(X.shape[m] for m in first), R) if X1 is X else kr, plan.plans[0])
    out = xp.empty((X.shape[n], R), dtype=dtype)
    if not second:
        return contract(spec1, X1, kr1, out=out, plan=plan.plans[0])
    # intermediate with the rank outermost, so that each rank's slice is a plain matrix for step 2
    P = rank_outer(xp, X, rest, R, dtype)
    contract(spec1, X1, kr1, out=P, plan=plan.plans[0])
    kr2 = _as_planned(xp, _khatri_rao([factors[m] for m in second]).reshape(*(X.shape[m] for m in second), R),
                      plan.plans[1])
    return contract(spec2, P, kr2, out=out, plan=plan.plans[1])


def _as_planned(xp, kr: Any, plan: Any) -> Any:
    """``kr`` with the strides its plan was made for (a fresh C-order array): the Khatri-Rao product of one
    factor is that factor itself, in whatever layout (F order, a view) the caller gave."""
    if kr.dtype == np.dtype(plan.dtype) and _elem_strides(kr) == plan.strides[1]:
        return kr
    buf = xp.empty(kr.shape, dtype=plan.dtype)
    buf[...] = kr
    return buf


@device_op
def mttkrp(
    X: Any, factors: Sequence[Any], mode: int, *, plan: MTTKRPPlan | None = None, device: Any = None
) -> Any:
    """Matricized tensor times Khatri-Rao product: ``X_(n)`` times the Khatri-Rao product of the factors but ``n``.

    On a dense array it runs in at most two engine calls, never unfolding ``X`` and never forming a
    Khatri-Rao product with as many rows as ``X`` has columns in its unfolding when that would be large: the
    modes on one side of ``mode`` are contracted first by one GEMM with their (small) Khatri-Rao product, the
    others afterwards by a GEMV batched over the rank. A sparse tensor runs its compiled CSF kernel, an
    out-of-core one streams its slabs, a Dask one runs a graph.

    Parameters
    ----------
    X : array or tensor, shape (I_0, ..., I_{N-1})
        A numpy/cupy array, or any tensor :func:`as_operand` accepts.
    factors : sequence of N arrays, shape (I_k, R)
        ``factors[mode]`` is not used and may be None.
    mode : int
    plan : MTTKRPPlan, optional
        From :func:`mttkrp_plan` for this mode, rank and a dense tensor of the same shape, strides and dtype.
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array, shape (I_mode, R)

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import mttkrp
    >>> X = np.ones((3, 4, 5))
    >>> U = [np.ones((3, 2)), np.ones((4, 2)), np.ones((5, 2))]
    >>> mttkrp(X, U, 1)
    array([[15., 15.],
           [15., 15.],
           [15., 15.],
           [15., 15.]])
    """
    from tuckerkit.engine._operand import public_operand

    op = public_operand(X)
    n = check_mode(mode, op.ndim)
    facs, _R = check_factor_list(factors, op.shape, n, op.dtype)
    checked = getattr(op, "checked_mttkrp", None)  # (a sparse tensor's method would check and stamp again)
    if checked is not None and plan is None:
        return checked(facs, n)
    return op.mttkrp(facs, n, plan=plan)


def mttkrp_plan(X: Any, factors: Sequence[Any], mode: int, *, policy: ExecutionPolicy | None = None) -> MTTKRPPlan:
    """The split :func:`mttkrp` uses for this dense tensor and mode, with the engine plans of its steps.

    Parameters
    ----------
    X, factors, mode : see :func:`mttkrp`
    policy : ExecutionPolicy, optional
        The workers the plan runs on (default: :func:`default_policy`).

    Returns
    -------
    MTTKRPPlan

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import mttkrp, mttkrp_plan
    >>> X, U = np.ones((4, 5, 6)), [np.ones((4, 2)), np.ones((5, 2)), np.ones((6, 2))]
    >>> plan = mttkrp_plan(X, U, 0)
    >>> mttkrp(X, U, 0, plan=plan).shape
    (4, 2)
    """
    from tuckerkit.engine._operand import dense_array

    X = dense_array(X, "X")
    n = check_mode(mode, X.ndim)
    facs, R = check_factor_list(factors, X.shape, n, X.dtype)
    dtype = np.result_type(X.dtype, *(U.dtype for m, U in enumerate(facs) if m != n))
    return build_mttkrp_plan(X.astype(dtype, copy=False), n, R, resolve_policy(policy))
