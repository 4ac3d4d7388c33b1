"""The TTM family: ``ttm``, ``multi_ttm`` (largest reduction first) and ``ttmc`` (all modes but one).

Each public function validates its arguments once and hands them to the operand (:func:`as_operand`): a dense
array runs the kernels below (one ``contract`` per mode, on views, no unfolding), other tensor kinds bring
their own (the sparse ttmc kernel, slabs streamed from a file, a Dask graph).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit._validation import check_matrices, check_matrix, check_mode, int_sequence
from tuckerkit.backend import array_namespace
from tuckerkit.backend._device import device_op
from tuckerkit.engine._contract import (
    _alloc_out,
    _bind,
    _bound_call,
    _elem_strides,
    _run_bound,
    contract,
    execute,
    plan_contraction,
)
from tuckerkit.engine._plan import ContractionPlan
from tuckerkit.engine._policy import ExecutionPolicy, resolve_policy

_LETTERS = "abcdefghijklmnopqrstuvwxyABCDEFGHIJKLMNOPQRSTUVWXY"
_NEW = "z"


def ttm_spec(ndim: int, n: int, transpose: bool) -> str:
    """The contraction ``ttm`` runs: e.g. ``"abc,bz->azc"`` for mode 1 of a 3-way tensor, transposed."""
    x = _LETTERS[:ndim]
    u = (x[n] + _NEW) if transpose else (_NEW + x[n])
    return f"{x},{u}->{x[:n]}{_NEW}{x[n + 1:]}"


def _check_ttm_matrix(shape: Sequence[int], U: Any, n: int, transpose: bool, dtype: Any, name: str = "U") -> Any:
    U = check_matrix(U, name, dtype)
    in_dim = U.shape[0] if transpose else U.shape[1]
    if in_dim != shape[n]:
        side = "rows" if transpose else "columns"
        want = f"({shape[n]}, J)" if transpose else f"(J, {shape[n]})"
        raise ValueError(
            f"{name} has {in_dim} {side} but mode {n} of X has size {shape[n]}; expected {name} of shape {want}"
        )
    return U


# ---------------------------------------------------------------------------------------------------
# dense kernels (arguments already validated)
# ---------------------------------------------------------------------------------------------------
def adjoint_operand(U: Any, transpose: bool) -> Any:
    """The matrix a transposed TTM contracts with: ``U`` itself for real ``U``; for complex ``U`` its conjugate
    (one copy of the small matrix, same layout), so ``transpose=True`` applies ``U^H``, the projection on U's
    columns (TensorLy's ``multi_mode_dot(transpose=True)``, MATLAB's ``'`` in the Tensor Toolbox)."""
    if transpose and U.dtype.kind == "c":
        return U.conj()
    return U


def dense_ttm(X: Any, U: Any, n: int, transpose: bool, out: Any, plan: ContractionPlan | None,
              policy: ExecutionPolicy) -> Any:
    """``X x_n U`` (``U^T`` with ``transpose``) on a dense array: one contraction on views."""
    spec = ttm_spec(X.ndim, n, transpose)
    if plan is not None:
        if not isinstance(plan, ContractionPlan):
            raise TypeError(f"plan must be a ContractionPlan from ttm_plan; received {type(plan).__name__}")
        if plan.spec != spec:
            raise ValueError(
                f"plan was made for the contraction {plan.spec!r}; ttm(mode={n}, transpose={transpose}) runs "
                f"{spec!r} (make a plan with ttm_plan for this mode)"
            )
    return contract(spec, X, adjoint_operand(U, transpose), out=out, plan=plan, policy=policy)


@dataclass(frozen=True)
class MultiTTMPlan:
    """Order and plans of a chain of TTMs (largest reduction first), bound to what it was made for.

    Attributes
    ----------
    order : tuple of int
        The modes in the order they are multiplied.
    plans : tuple of ContractionPlan
        One per step.
    transpose : bool
        Whether the matrices are applied transposed.
    shape, strides : tuple of int
        The tensor the plan was made for (element strides).
    matrix_shapes : tuple of tuple of int
        The shape of each step's matrix, in ``order``.
    dtype : str

    A plan is callable: ``plan(X, matrices)`` with one matrix per mode of ``order`` (a dict, or a sequence
    with one entry per mode of ``X``); another tensor, matrix shape or set of modes raises a one-line
    ``ValueError``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import multi_ttm_plan
    >>> X = np.ones((4, 5, 6))
    >>> mats = [np.ones((2, 4)), np.ones((2, 5)), np.ones((2, 6))]
    >>> plan = multi_ttm_plan(X, mats)
    >>> plan.order, plan(X, mats).shape
    ((2, 1, 0), (2, 2, 2))
    """

    order: tuple[int, ...]
    plans: tuple[ContractionPlan, ...]
    transpose: bool
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    matrix_shapes: tuple[tuple[int, ...], ...] = ()
    dtype: str = ""

    def explain(self) -> str:
        lines = [f"multi_ttm over modes {list(self.order)} (largest reduction first):"]
        for mode, p in zip(self.order, self.plans, strict=True):
            lines.append(f" mode {mode}: " + p.explain().replace("\n", "\n   "))
        return "\n".join(lines)

    def __call__(self, X: Any, matrices: Mapping[int, Any] | Sequence[Any]) -> Any:
        """Run the chain on ``X`` (see the class docstring)."""
        if isinstance(matrices, Mapping):
            mats = dict(matrices)
        else:
            seq = check_matrices(matrices)
            mats = {m: U for m, U in enumerate(seq) if m in self.order}
        return dense_multi_ttm(X, mats, self.transpose, self, self.plans[0].policy if self.plans else
                               ExecutionPolicy())

    def check(self, X: Any, mats: Mapping[int, Any], transpose: bool) -> None:
        """A one-line ``ValueError`` unless this plan was made for ``X``, these modes and matrices."""
        modes = sorted(mats)
        if transpose != self.transpose or modes != sorted(self.order):
            raise ValueError(
                f"plan was made for modes {sorted(self.order)} with transpose={self.transpose}; received modes "
                f"{modes} with transpose={transpose} (make a plan with multi_ttm_plan for them)"
            )
        got = (tuple(X.shape), _elem_strides(X), str(X.dtype))
        if got != (self.shape, self.strides, self.dtype):
            raise ValueError(
                f"plan was made for X of shape {self.shape}, strides {self.strides}, dtype {self.dtype}; received "
                f"shape {got[0]}, strides {got[1]}, dtype {got[2]}"
            )
        shapes = tuple(tuple(mats[m].shape) for m in self.order)
        work = self.plans[0].dtype if self.plans else self.dtype  # (the matrices' dtype: promoted with X's)
        bad = [m for m in self.order if str(mats[m].dtype) != work]
        if bad:
            raise ValueError(f"plan was made for matrices of dtype {work}; received matrices[{bad[0]}] of dtype "
                             f"{mats[bad[0]].dtype}")
        if shapes != self.matrix_shapes:
            raise ValueError(f"plan was made for matrices of shapes {self.matrix_shapes} (in the order "
                             f"{list(self.order)}); received {shapes}")


def _ttm_order(shape, mats: Mapping[int, Any], transpose: bool) -> list[int]:
    """Largest reduction first: ascending J_n / I_n."""
    return sorted(mats, key=lambda m: (mats[m].shape[1] if transpose else mats[m].shape[0]) / max(shape[m], 1))


#: among the modes tied for the largest reduction, the chain starts with the one whose step the cost model
#: finds cheapest (the first step reads the whole tensor: e.g. the middle mode of a C-ordered cube, each
#: tile one run of memory, before the first, whose tiles gather rows at a stride; see :func:`_cheapest_first`),
#: when it is at most this fraction of the usual first step's estimate (also CP's dimension tree, _sweeps.py)
CHEAPER = 0.9


def _cheapest_first(X: Any, mats: Mapping[int, Any], transpose: bool, order: list[int],
                    policy: ExecutionPolicy) -> list[int]:
    """``order`` with its first mode replaced by the cheapest first step (the cost model's seconds) among the
    modes of the same reduction ratio ``J_n / I_n`` as the first, where it is at most ``CHEAPER`` of the
    first's estimate (the rest keep their order). Measured on the single TTMs of 200^3, R = 10 (interleaved
    medians on the shared 2-core machine): the middle mode 0.91x the first mode's time (float64 and float32
    alike); whole HOOI iterations 0.97-0.98x (200^3), 0.97x (300^3). On 60^4 float64 the model put the last
    mode's step 4 % under the third's, and starting there took 1.16x the iteration time: hence the margin."""
    def ratio(m: int) -> float:
        return (mats[m].shape[1] if transpose else mats[m].shape[0]) / max(X.shape[m], 1)

    tied = [m for m in order if ratio(m) == ratio(order[0])]
    if len(tied) < 2:
        return order
    cost = {m: plan_contraction(ttm_spec(X.ndim, m, transpose), X, mats[m], policy=policy).est_seconds
            for m in tied}
    first = min(tied, key=lambda m: (cost[m], tied.index(m)))
    if cost[first] >= CHEAPER * cost[order[0]]:  # within the model's error: the usual order
        return order
    return [first] + [m for m in order if m != first]


def build_multi_ttm_plan(X: Any, mats: Mapping[int, Any], transpose: bool, policy: ExecutionPolicy) -> MultiTTMPlan:
    """The order and per-step plans of a chain on a dense array (arguments already validated)."""
    order = _ttm_order(X.shape, mats, transpose)
    plans = []
    xp = array_namespace(X)
    work = _work_dtype(X, mats)
    Y = X if work == X.dtype else xp.empty_like(X, dtype=work)  # (planned for the promoted copy a run makes)
    X0, X = X, Y
    if len(order) > 1:
        order = _cheapest_first(X, mats, transpose, order, policy)
    for m in order:
        p = plan_contraction(ttm_spec(Y.ndim, m, transpose), Y, mats[m], policy=policy)
        plans.append(p)
        Y = _alloc_out(p, xp, X.dtype)  # carries the step's output layout to the next plan
    return MultiTTMPlan(tuple(order), tuple(plans), transpose, tuple(X0.shape), _elem_strides(X0),
                        tuple(tuple(mats[m].shape) for m in order), str(X0.dtype))


def _work_dtype(X: Any, mats: Mapping[int, Any]) -> Any:
    """The dtype a chain computes in: ``X``'s promoted with its matrices' (:func:`check_matrix` has already
    promoted each matrix to its result type with ``X``), as :func:`ttm` computes one step: a float32 tensor
    times float64 matrices gives a float64 result, whatever the route each step takes."""
    work = np.dtype(X.dtype)
    for U in mats.values():
        work = np.promote_types(work, U.dtype)
    return work


def dense_multi_ttm(X: Any, mats: Mapping[int, Any], transpose: bool, plan: MultiTTMPlan | None,
                    policy: ExecutionPolicy, checked: bool = False) -> Any:
    """``X`` times ``mats[m]`` (transposed) along every mode ``m`` in ``mats``, largest reduction first.
    ``checked``: ``plan`` is known to be made for exactly these arrays (a sweep's plan cache, keyed by their
    layouts), so its check is skipped (on HOOI's 200^3 iterations the check took 25-35 us a call, its code and
    data out of the caches after each streaming pass)."""
    if plan is None:
        order: Sequence[int] = _ttm_order(X.shape, mats, transpose)
        plans: Sequence[ContractionPlan | None] = [None] * len(order)
    else:
        if not isinstance(plan, MultiTTMPlan):
            raise TypeError(f"plan must be a MultiTTMPlan from multi_ttm_plan; received {type(plan).__name__}")
        if not checked:
            plan.check(X, mats, transpose)
        order, plans = plan.order, plan.plans
    xp = array_namespace(X)
    work = _work_dtype(X, mats)
    # (one copy of X in the promoted dtype, as ttm's contraction makes; the compiled kernels take one dtype)
    Y = X if work == X.dtype else X.astype(work)
    if plan is None and len(order) > 1:  # the order multi_ttm_plan takes: the same bits with or without a plan
        order = _cheapest_first(Y, mats, transpose, list(order), policy)
    for m, p in zip(order, plans, strict=True):
        U = adjoint_operand(mats[m], transpose)
        if p is None:
            p = plan_contraction(ttm_spec(Y.ndim, m, transpose), Y, U, policy=policy)
        Y = execute(p, Y, U, None, xp)
    return Y


# ---------------------------------------------------------------------------------------------------
# validation of the public calls
# ---------------------------------------------------------------------------------------------------
def multi_ttm_args(shape: Sequence[int], dtype: Any, matrices: Any, modes: Any, skip: Any,
                   transpose: bool) -> dict[int, Any]:
    """``{mode: matrix}`` for a multi_ttm call, validated (one-line errors naming the parameter)."""
    ndim = len(shape)
    mats_l = check_matrices(matrices)
    if modes is None:
        modes_l = list(range(ndim))
        if len(mats_l) != ndim:
            raise ValueError(
                f"matrices has {len(mats_l)} entries; expected one per mode of X ({ndim}) when modes is None"
            )
    else:
        modes_l = [check_mode(m, ndim, "modes")
                   for m in int_sequence(modes, "modes", "a sequence of ints (one mode per matrix)")]
        if len(set(modes_l)) != len(modes_l):
            raise ValueError(f"modes {modes_l} repeats a mode; each mode may appear once")
        if len(mats_l) != len(modes_l):
            raise ValueError(f"matrices has {len(mats_l)} entries but modes has {len(modes_l)}; expected equal")
    mats = dict(zip(modes_l, mats_l, strict=True))
    if skip is not None:
        mats.pop(check_mode(skip, ndim, "skip"), None)
    for m, U in list(mats.items()):
        if U is None:
            raise ValueError(f"matrices[{m}] is None but mode {m} is not skipped")
        U = check_matrix(U, f"matrices[{m}]", dtype)
        if (U.shape[0] if transpose else U.shape[1]) != shape[m]:
            raise ValueError(
                f"matrices[{m}] has shape {tuple(U.shape)} but mode {m} of X has size {shape[m]}; "
                f"expected {'(I_n, J)' if transpose else '(J, I_n)'} with I_n = {shape[m]}"
            )
        mats[m] = U
    return mats


# ---------------------------------------------------------------------------------------------------
# public operations
# ---------------------------------------------------------------------------------------------------
#: the plans of :func:`ttm` calls on numpy arrays of one real floating dtype with ``out``, ``plan`` and ``device``
#: left out, by the operands' shapes, byte strides and dtype, the mode, ``transpose`` and the default policy (at
#: most ``_FAST_TTM_MAX``, then started afresh): a repeated call skips the operand's resolution, the checks (they
#: passed for these very shapes and dtype) and the contraction's spec and plan look-ups, and runs the plan's
#: bound route, as ``ttm(..., plan=ttm_plan(...))`` does: the same plan, so the same bits. Every Python step of a
#: call that comes after a pass over a large tensor runs with the interpreter's state evicted from the caches:
#: measured on the 2-core Zen 4 machine (each call right after a 64 MB read, medians of 31), 100^3 at rank 10
#: 0.95 -> 0.75 ms (mode 0) and 0.74 -> 0.56 ms (mode 2), 50^3 0.36 -> 0.19 ms, 200^3 3.65 -> 3.53 ms
_FAST_TTM: dict[tuple, ContractionPlan] = {}
_FAST_TTM_MAX = 256


def ttm(
    X: Any, U: Any, mode: int, *, transpose: bool = False, out: Any = None, plan: ContractionPlan | None = None,
    device: Any = None,
) -> Any:
    """Tensor-times-matrix along one mode, ``Y = X x_mode U``, without unfolding.

    Parameters
    ----------
    X : array or tensor, shape (I_0, ..., I_{N-1})
        A numpy/cupy array, or any tensor :func:`as_operand` accepts (a sparse tensor gives a
        :class:`~tuckerkit.sparse.COOTensor`, an out-of-core or Dask tensor an in-memory array).
    U : array, shape (J, I_mode), or (I_mode, J) with ``transpose=True``
    mode : int
        The mode multiplied (negative values count from the end).
    transpose : bool, default False
        Multiply by ``U.T`` (the usual form with Tucker factors of shape (I_n, R_n)); for a complex ``U`` by
        the conjugate transpose ``U^H`` (the projection on U's columns, as TensorLy's ``mode_dot`` with
        ``transpose=True``).
    out : array, optional
        Output array of shape (I_0, ..., J, ..., I_{N-1}) (dense arrays only).
    plan : ContractionPlan, optional
        A plan from :func:`ttm_plan` for this mode, ``transpose`` and operands of the same shapes, strides
        and dtype (anything else raises a one-line ``ValueError``).
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array, shape (I_0, ..., J, ..., I_{N-1})
        Its axes lie in memory in the order the chosen kernel writes fastest, not always C's (the last mode's
        product of a C-ordered tensor puts the new axis outermost); ``out`` gives any other layout, and
        ``numpy.ascontiguousarray`` a C-ordered copy. The decompositions' results (``to_dense()``) are C-ordered.

    Notes
    -----
    On numpy arrays of one real dtype with ``out``, ``plan`` and ``device`` left out, the plan of the first call
    is kept (by shapes, strides, dtype, mode, ``transpose`` and the default policy) and a repeat runs it without
    the checks these shapes already passed: the same bits as ``ttm(..., plan=ttm_plan(...))``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import ttm
    >>> X, U = np.ones((3, 4, 5)), np.ones((2, 4))
    >>> ttm(X, U, 1).shape
    (3, 2, 5)
    """
    if (out is None and plan is None and device is None and type(X) is np.ndarray and type(U) is np.ndarray
            and type(mode) is int and type(transpose) is bool):
        key = (X.shape, X.strides, X.dtype, U.shape, U.strides, U.dtype, mode, transpose, resolve_policy(None))
        hit = _FAST_TTM.get(key)
        if hit is not None:
            return _run_bound(hit, _bind(hit), X, U)
        Y = _ttm(X, U, mode, transpose=transpose)  # (checks every argument; raises on bad ones)
        if X.dtype == U.dtype and X.dtype.char in "fd" and X.dtype.isnative and Y.dtype == X.dtype:
            made = ttm_plan(X, U, mode, transpose=transpose)  # (the plan the call ran: a cached look-up)
            if _bound_call(made, X, U) is not None:  # (made for these very strides: none copied or converted)
                if len(_FAST_TTM) >= _FAST_TTM_MAX:
                    _FAST_TTM.clear()
                _FAST_TTM[key] = made
        return Y
    return _ttm(X, U, mode, transpose=transpose, out=out, plan=plan, device=device)


@device_op
def _ttm(X: Any, U: Any, mode: int, *, transpose: bool = False, out: Any = None,
         plan: ContractionPlan | None = None, device: Any = None) -> Any:
    """:func:`ttm` through the operand (every check; ``device=`` taken by the decorator)."""
    from tuckerkit.engine._operand import public_operand

    op = public_operand(X)
    n = check_mode(mode, op.ndim)
    U = _check_ttm_matrix(op.shape, U, n, transpose, op.dtype)
    return op.ttm(U, n, transpose=bool(transpose), out=out, plan=plan)


def ttm_plan(X: Any, U: Any, mode: int, *, transpose: bool = False,
             policy: ExecutionPolicy | None = None) -> ContractionPlan:
    """The plan :func:`ttm` would run for these dense operands (reusable through ``plan=``, or callable).

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    U : array, shape (J, I_mode), or (I_mode, J) with ``transpose=True``
    mode : int
    transpose : bool, default False
    policy : ExecutionPolicy, optional
        The workers the plan runs on (default: :func:`default_policy`).

    Returns
    -------
    ContractionPlan

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import ttm, ttm_plan
    >>> X, U = np.ones((4, 5, 6)), np.ones((3, 5))
    >>> plan = ttm_plan(X, U, 1)
    >>> plan.kind.value, ttm(X, U, 1, plan=plan).shape, plan(X, U).shape
    ('strided_batched_gemm', (4, 3, 6), (4, 3, 6))
    """
    from tuckerkit.engine._operand import dense_array

    X = dense_array(X, "X")
    n = check_mode(mode, X.ndim)
    U = _check_ttm_matrix(X.shape, U, n, transpose, X.dtype)
    return plan_contraction(ttm_spec(X.ndim, n, transpose), X, U, policy=resolve_policy(policy))


@device_op
def multi_ttm(
    X: Any,
    matrices: Sequence[Any],
    *,
    modes: Sequence[int] | None = None,
    skip: int | None = None,
    transpose: bool = False,
    plan: MultiTTMPlan | None = None,
    device: Any = None,
) -> Any:
    """Multiply ``X`` by a matrix along several modes, largest reduction first.

    Parameters
    ----------
    X : array or tensor, shape (I_0, ..., I_{N-1})
        A numpy/cupy array, or any tensor :func:`as_operand` accepts.
    matrices : sequence of arrays
        One per entry of ``modes`` (or one per mode of ``X`` when ``modes`` is None); shape (J_n, I_n), or
        (I_n, J_n) with ``transpose=True``. The entry of a skipped mode may be None.
    modes : sequence of int, optional
        Modes to multiply; default all modes.
    skip : int, optional
        A mode left out (the usual HOOI/HOSVD "all but one").
    transpose : bool, default False
        Multiply by the transposes (Tucker factors of shape (I_n, R_n) give the core-like projection); the
        conjugate transposes for complex matrices.
    plan : MultiTTMPlan, optional
        From :func:`multi_ttm_plan` for the same modes, ``transpose``, matrix shapes and a tensor of the same
        shape, strides and dtype (dense arrays only).
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array
        ``X`` with each multiplied mode resized to ``J_n`` (a sparse ``X`` projected on all modes but at most
        one gives a dense array, on fewer modes a :class:`~tuckerkit.sparse.COOTensor`); its axes in memory in
        the order its last product wrote (see :func:`ttm`).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import multi_ttm
    >>> X = np.ones((4, 5, 6))
    >>> Us = [np.ones((4, 2)), np.ones((5, 3)), np.ones((6, 2))]
    >>> multi_ttm(X, Us, transpose=True, skip=1).shape
    (2, 5, 2)
    """
    from tuckerkit.engine._operand import public_operand

    op = public_operand(X)
    mats = multi_ttm_args(op.shape, op.dtype, matrices, modes, skip, bool(transpose))
    return op.multi_ttm(mats, transpose=bool(transpose), plan=plan)


def multi_ttm_plan(
    X: Any, matrices: Sequence[Any], *, modes: Sequence[int] | None = None, skip: int | None = None,
    transpose: bool = False, policy: ExecutionPolicy | None = None,
) -> MultiTTMPlan:
    """The order and per-step plans that :func:`multi_ttm` uses on a dense array (reusable through
    ``plan=``, or callable).

    Parameters
    ----------
    X, matrices, modes, skip, transpose : see :func:`multi_ttm`
    policy : ExecutionPolicy, optional
        The workers the plan runs on (default: :func:`default_policy`).

    Returns
    -------
    MultiTTMPlan

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import multi_ttm, multi_ttm_plan
    >>> X = np.ones((4, 5, 6))
    >>> mats = [np.ones((2, 4)), np.ones((2, 5)), np.ones((2, 6))]
    >>> plan = multi_ttm_plan(X, mats, skip=0)
    >>> plan.order, multi_ttm(X, mats, skip=0, plan=plan).shape
    ((2, 1), (4, 2, 2))
    """
    from tuckerkit.engine._operand import dense_array

    X = dense_array(X, "X")
    mats = multi_ttm_args(X.shape, X.dtype, matrices, modes, skip, bool(transpose))
    return build_multi_ttm_plan(X, mats, bool(transpose), resolve_policy(policy))


def ttmc(X: Any, factors: Sequence[Any], skip: int) -> Any:
    """Tensor times all factor matrices but one, transposed: ``X x_m U_m^T`` for every ``m != skip`` (``U_m^H``
    for complex factors).

    The projection HOOI needs, for dense tensors (a chain of TTMs, largest reduction first) and sparse ones
    (one compiled CSF kernel that never forms an intermediate of the tensor's size).

    Parameters
    ----------
    X : array or tensor, shape (I_0, ..., I_{N-1})
    factors : sequence of arrays, shape (I_m, R_m)
        One per mode; the entry of ``skip`` is ignored (may be None).
    skip : int
        The mode left unprojected.

    Returns
    -------
    array
        Shape ``(R_0, ..., I_skip, ..., R_{N-1})``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import ttmc
    >>> from tuckerkit.sparse import COOTensor
    >>> X = np.random.default_rng(0).random((4, 5, 6))
    >>> Us = [np.ones((4, 2)), np.ones((5, 3)), np.ones((6, 2))]
    >>> Y = ttmc(X, Us, skip=1)
    >>> Y.shape, bool(np.allclose(ttmc(COOTensor.from_dense(X), Us, skip=1), Y))
    ((2, 5, 2), True)
    """
    return multi_ttm(X, check_matrices(factors, "factors"), transpose=True, skip=skip)

