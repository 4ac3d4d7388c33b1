"""Tensor operations built on the contraction engine: ttm, multi_ttm, gram, mttkrp, khatri_rao.

None of them unfolds (copies) the tensor: each is one or two ``contract`` calls on views, or a loop of
GEMMs on views for the Gram matrix of a middle mode.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, result_dtype
from tuckerkit.backend._device import device_op
from tuckerkit.engine._contract import _alloc_out, _elem_strides, _view, contract, execute, plan_contraction
from tuckerkit.engine._gpu import gpu_matmul
from tuckerkit.engine._plan import ContractionPlan
from tuckerkit.engine._threads import dynamic_for, single_threaded_blas, threaded_blas, workers

_LETTERS = "abcdefghijklmnopqrstuvwxyABCDEFGHIJKLMNOPQRSTUVWXY"
#: a SYRK with at least this many multiply-adds gets BLAS's own threads (toggling them costs ~ms)
_BIG_SYRK = 200_000_000
_NEW = "z"
_RANK = "Z"


# ---------------------------------------------------------------------------------------------------
# validation helpers (shared by the ops; the decompositions validate at their own entry)
# ---------------------------------------------------------------------------------------------------
def _tensor(X: Any, name: str = "X", min_ndim: int = 1) -> Any:
    xp = array_namespace(X)
    if not hasattr(X, "dtype"):
        X = np.asarray(X)
    dtype = result_dtype((X.dtype, name))
    if X.dtype != dtype:
        X = X.astype(dtype)
    if X.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s); received a {X.ndim}-d array")
    if X.ndim > len(_LETTERS):
        raise ValueError(f"{name} has {X.ndim} dimensions; at most {len(_LETTERS)} are supported")
    return xp, X


def _mode(mode: Any, ndim: int, name: str = "mode") -> int:
    try:
        m = operator.index(mode)
    except TypeError:
        raise TypeError(f"{name} must be an integer; received {type(mode).__name__}") from None
    if not -ndim <= m < ndim:
        raise ValueError(f"{name}={m} is out of range for a tensor with {ndim} modes; expected 0 <= {name} < {ndim}")
    return m % ndim


def _matrix(U: Any, name: str, dtype) -> Any:
    if not hasattr(U, "dtype"):
        U = np.asarray(U)
    result_dtype((U.dtype, name))
    if U.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix; received an array of shape {tuple(U.shape)}")
    if U.dtype != dtype:
        U = U.astype(np.result_type(U.dtype, dtype))
    return U


# ---------------------------------------------------------------------------------------------------
@device_op
def ttm(
    X: Any, U: Any, mode: int, *, transpose: bool = False, out: Any = None, plan: ContractionPlan | None = None,
    device: Any = None,
) -> Any:
    """Tensor-times-matrix along one mode, ``Y = X x_mode U``, without unfolding.

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    U : array, shape (J, I_mode), or (I_mode, J) with ``transpose=True``
    mode : int
        The mode multiplied (negative values count from the end).
    transpose : bool, default False
        Multiply by ``U.T`` (the usual form with Tucker factors of shape (I_n, R_n)).
    out : array, optional
        Output array of shape (I_0, ..., J, ..., I_{N-1}).
    plan : ContractionPlan, optional
        Reuse a plan (see :func:`ttm_plan`).

    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array, shape (I_0, ..., J, ..., I_{N-1})

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import ttm
    >>> X, U = np.ones((3, 4, 5)), np.ones((2, 4))
    >>> ttm(X, U, 1).shape
    (3, 2, 5)
    """
    if hasattr(X, "_tk_ttm") and transpose and out is None and plan is None:  # streamed in slabs
        return X._tk_ttm(_matrix(U, "U", X.dtype), _mode(mode, X.ndim))
    _, X = _tensor(X)
    n = _mode(mode, X.ndim)
    U = _matrix(U, "U", X.dtype)
    in_dim = U.shape[0] if transpose else U.shape[1]
    if in_dim != X.shape[n]:
        side = "rows" if transpose else "columns"
        raise ValueError(
            f"U has {in_dim} {side} but mode {n} of X has size {X.shape[n]}; "
            f"expected U of shape {('(' + str(X.shape[n]) + ', J)') if transpose else ('(J, ' + str(X.shape[n]) + ')')}"
        )
    return contract(_ttm_spec(X.ndim, n, transpose), X, U, out=out, plan=plan)


def _ttm_spec(ndim: int, n: int, transpose: bool) -> str:
    x = _LETTERS[:ndim]
    u = (x[n] + _NEW) if transpose else (_NEW + x[n])
    return f"{x},{u}->{x[:n]}{_NEW}{x[n + 1:]}"


def ttm_plan(X: Any, U: Any, mode: int, *, transpose: bool = False) -> ContractionPlan:
    """The plan :func:`ttm` would run for these operands (reusable through ``plan=``).

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    U : array, shape (J, I_mode), or (I_mode, J) with ``transpose=True``
    mode : int
    transpose : bool, default False

    Returns
    -------
    ContractionPlan

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import ttm, ttm_plan
    >>> X, U = np.ones((4, 5, 6)), np.ones((3, 5))
    >>> plan = ttm_plan(X, U, 1)
    >>> plan.kind.value, ttm(X, U, 1, plan=plan).shape
    ('strided_batched_gemm', (4, 3, 6))
    """
    _, X = _tensor(X)
    n = _mode(mode, X.ndim)
    return plan_contraction(_ttm_spec(X.ndim, n, transpose), X, _matrix(U, "U", X.dtype))


@dataclass(frozen=True)
class MultiTTMPlan:
    """Order and plans of a chain of TTMs (largest reduction first).

    Attributes
    ----------
    order : tuple of int
        The modes in the order they are multiplied.
    plans : tuple of ContractionPlan
        One per step.
    transpose : bool
        Whether the matrices are applied transposed.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import multi_ttm_plan
    >>> X = np.ones((4, 5, 6))
    >>> mats = [np.ones((2, 4)), np.ones((2, 5)), np.ones((2, 6))]
    >>> multi_ttm_plan(X, mats).order
    (2, 1, 0)
    """

    order: tuple[int, ...]
    plans: tuple[ContractionPlan, ...]
    transpose: bool

    def explain(self) -> str:
        lines = [f"multi_ttm over modes {list(self.order)} (largest reduction first):"]
        for mode, p in zip(self.order, self.plans, strict=True):
            lines.append(f" mode {mode}: " + p.explain().replace("\n", "\n   "))
        return "\n".join(lines)


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
    X : array, shape (I_0, ..., I_{N-1})
    matrices : sequence of arrays
        One per entry of ``modes`` (or one per mode of ``X`` when ``modes`` is None); shape (J_n, I_n), or
        (I_n, J_n) with ``transpose=True``. The entry of a skipped mode may be None.
    modes : sequence of int, optional
        Modes to multiply; default all modes.
    skip : int, optional
        A mode left out (the usual HOOI/HOSVD "all but one").
    transpose : bool, default False
        Multiply by the transposes (Tucker factors of shape (I_n, R_n) give the core-like projection).
    plan : MultiTTMPlan, optional
        Reuse the order and plans of an earlier call on arrays of the same shapes and strides.

    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array
        ``X`` with each multiplied mode resized to ``J_n``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import multi_ttm
    >>> X = np.ones((4, 5, 6))
    >>> Us = [np.ones((4, 2)), np.ones((5, 3)), np.ones((6, 2))]
    >>> multi_ttm(X, Us, transpose=True, skip=1).shape
    (2, 5, 2)
    """
    if hasattr(X, "_tk_ttmc"):  # sparse: the compiled CSF kernel, which projects all modes but one
        return _sparse_multi_ttm(X, matrices, modes, skip, transpose)
    xp, X = _tensor(X)
    if modes is None:
        modes = list(range(X.ndim))
        if len(matrices) != X.ndim:
            raise ValueError(
                f"matrices has {len(matrices)} entries; expected one per mode of X ({X.ndim}) when modes is None"
            )
    else:
        modes = [_mode(m, X.ndim, "modes") for m in modes]
        if len(set(modes)) != len(modes):
            raise ValueError(f"modes {list(modes)} repeats a mode; each mode may appear once")
        if len(matrices) != len(modes):
            raise ValueError(f"matrices has {len(matrices)} entries but modes has {len(modes)}; expected equal")
    mats = dict(zip(modes, matrices, strict=True))
    if skip is not None:
        s = _mode(skip, X.ndim, "skip")
        mats.pop(s, None)
    for m, U in list(mats.items()):
        if U is None:
            raise ValueError(f"matrices[{m}] is None but mode {m} is not skipped")
        U = _matrix(U, f"matrices[{m}]", X.dtype)
        in_dim = U.shape[0] if transpose else U.shape[1]
        if in_dim != X.shape[m]:
            raise ValueError(
                f"matrices[{m}] has shape {tuple(U.shape)} but mode {m} of X has size {X.shape[m]}; "
                f"expected {'(I_n, J)' if transpose else '(J, I_n)'} with I_n = {X.shape[m]}"
            )
        mats[m] = U
    if plan is None:
        order: Sequence[int] = _ttm_order(X.shape, mats, transpose)
        plans: Sequence[ContractionPlan | None] = [None] * len(order)
    else:
        order, plans = plan.order, plan.plans
    Y = X
    for m, p in zip(order, plans, strict=True):
        if p is None:
            p = plan_contraction(_ttm_spec(Y.ndim, m, transpose), Y, mats[m])
        Y = execute(p, Y, mats[m], None, xp)
    return Y


def _sparse_multi_ttm(X: Any, matrices: Sequence[Any], modes: Sequence[int] | None, skip: int | None,
                      transpose: bool) -> Any:
    N = X.ndim
    modes_l = list(range(N)) if modes is None else [_mode(m, N, "modes") for m in modes]
    if len(matrices) != len(modes_l):
        raise ValueError(f"matrices has {len(matrices)} entries; expected one per entry of modes ({len(modes_l)})")
    mats = dict(zip(modes_l, matrices, strict=True))
    if skip is not None:
        mats.pop(_mode(skip, N, "skip"), None)
    mats = {m: U for m, U in mats.items() if U is not None}
    left = [m for m in range(N) if m not in mats]
    if not transpose or len(left) != 1:
        raise ValueError(
            "a sparse X supports multi_ttm over all modes but one with transpose=True (the ttmc kernel); "
            f"received {'transpose=False' if not transpose else f'{len(left)} modes left out'}"
        )
    factors: list[Any] = [None] * N
    for m, U in mats.items():
        U = _matrix(U, f"matrices[{m}]", X.dtype)
        if U.shape[0] != X.shape[m]:
            raise ValueError(f"matrices[{m}] has shape {tuple(U.shape)} but mode {m} of X has size {X.shape[m]}; "
                             f"expected (I_n, J) with I_n = {X.shape[m]}")
        factors[m] = U
    return X._tk_ttmc(factors, left[0])


def ttmc(X: Any, factors: Sequence[Any], skip: int) -> Any:
    """Tensor times all factor matrices but one, transposed: ``X x_m U_m^T`` for every ``m != skip``.

    The projection HOOI needs, for dense tensors (a chain of TTMs, largest reduction first) and sparse ones
    (one compiled CSF kernel that never forms an intermediate of the tensor's size).

    Parameters
    ----------
    X : array or sparse tensor, shape (I_0, ..., I_{N-1})
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
    return multi_ttm(X, list(factors), transpose=True, skip=skip)


def ttmc_sweep(X: Any, factors: list[Any], update) -> tuple[Any, ...]:
    """The N projections of one HOOI sweep, in mode order, each on the latest factors (Gauss-Seidel).

    ``update(n, Y_n)`` receives ``Y_n = X x_{m != n} U_m^T`` (mode ``n`` unprojected, in place) and may
    replace ``factors[n]`` before the next projection. Dense tensors share partial projections (a dimension
    tree): the modes are halved, ``X`` projected on the second half serves the first half and the
    projection on the updated first half serves the second, so the full tensor is read twice per sweep for
    any order. Sparse tensors run one compiled ``ttmc`` per mode (reading only the nonzeros).

    Parameters
    ----------
    X : array or sparse tensor, shape (I_0, ..., I_{N-1})
    factors : list of arrays, shape (I_n, R_n)
    update : callable ``update(n, Y_n)``

    Returns
    -------
    tuple
        The plans used (engine :class:`MultiTTMPlan` objects, or a sparse tensor's per-mode CSF plan).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import ttmc, ttmc_sweep
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((4, 5, 6, 7))
    >>> U = [np.linalg.qr(rng.random((n, 2)))[0] for n in X.shape]
    >>> seen = {}
    >>> _ = ttmc_sweep(X, U, lambda n, Y: seen.setdefault(n, Y))
    >>> all(np.allclose(seen[n], ttmc(X, U, n)) for n in range(4))
    True
    """
    if hasattr(X, "_tk_ttmc"):
        for n in range(X.ndim):
            update(n, X._tk_ttmc(factors, n))
        return (X.plan(),)
    if hasattr(X, "_tk_ttmc_sweep"):  # out-of-core: two streamed passes
        return X._tk_ttmc_sweep(factors, update)
    _, X = _tensor(X)
    plans: list[Any] = []
    _ttmc_tree(X, list(range(X.ndim)), factors, update, plans)
    return tuple(plans)


def _ttmc_tree(T: Any, active: list[int], factors: list[Any], update, plans: list) -> None:
    # a module-level recursion, not a closure: a self-referencing closure is a reference cycle that kept
    # each sweep's projections alive until the cyclic garbage collector ran (HOOI's peak memory grew with
    # the iteration count: 2.3x the input after 200 iterations on 50^3, against 0.34x)
    if len(active) == 1:
        update(active[0], T)
        return
    half = (len(active) + 1) // 2
    first, second = active[:half], active[half:]
    for part, rest in ((first, second), (second, first)):
        mats = [factors[m] for m in rest]
        p = multi_ttm_plan(T, mats, modes=rest, transpose=True)
        plans.append(p)
        _ttmc_tree(multi_ttm(T, mats, modes=rest, transpose=True, plan=p), part, factors, update, plans)


def _ttm_order(shape, mats, transpose: bool) -> list[int]:
    """Largest reduction first: ascending J_n / I_n."""
    return sorted(mats, key=lambda m: (mats[m].shape[1] if transpose else mats[m].shape[0]) / max(shape[m], 1))


def multi_ttm_plan(
    X: Any, matrices: Sequence[Any], *, modes: Sequence[int] | None = None, skip: int | None = None,
    transpose: bool = False,
) -> MultiTTMPlan:
    """The order and per-step plans that :func:`multi_ttm` uses (reusable through ``plan=``).

    Parameters
    ----------
    X, matrices, modes, skip, transpose : see :func:`multi_ttm`

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
    _, X = _tensor(X)
    modes_l = list(range(X.ndim)) if modes is None else [_mode(m, X.ndim, "modes") for m in modes]
    mats = {m: _matrix(U, f"matrices[{m}]", X.dtype) for m, U in zip(modes_l, matrices, strict=True)
            if skip is None or m != _mode(skip, X.ndim, "skip")}
    order = _ttm_order(X.shape, mats, transpose)
    plans = []
    Y = X
    xp = array_namespace(X)
    for m in order:
        p = plan_contraction(_ttm_spec(Y.ndim, m, transpose), Y, mats[m])
        plans.append(p)
        Y = _empty_like_plan(p, xp, X.dtype)  # carries the step's output layout to the next plan
    return MultiTTMPlan(tuple(order), tuple(plans), transpose)


def _empty_like_plan(p: ContractionPlan, xp, dtype):
    return _alloc_out(p, xp, dtype)


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GramPlan:
    """How :func:`gram` evaluates ``X_(n) X_(n)^T``.

    Attributes
    ----------
    mode : int
    outer : tuple of int
        Modes looped over (larger strides than ``mode``).
    inner : tuple of int
        Modes reduced by each SYRK/GEMM.
    route : {"syrk", "slabs", "contract"}
        ``"syrk"``: one call; ``"slabs"``: a sum over the outer index, split over the CPU threads;
        ``"contract"``: the modes cannot be flattened without a copy (the engine's remedy).
    shape, strides : tuple of int
        The tensor the plan was made for.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import gram_plan
    >>> gram_plan(np.ones((4, 5, 6)), 0).route, gram_plan(np.ones((4, 5, 6)), 1).route
    ('syrk', 'slabs')
    """

    mode: int
    outer: tuple[int, ...]
    inner: tuple[int, ...]
    route: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def explain(self) -> str:
        return (f"gram mode {self.mode}: {self.route}, loop over modes {list(self.outer)}, "
                f"reduce modes {list(self.inner)}")


def gram_plan(X: Any, mode: int) -> GramPlan:
    """The :class:`GramPlan` that :func:`gram` uses for this tensor and mode.

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    mode : int

    Returns
    -------
    GramPlan

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import gram, gram_plan
    >>> X = np.ones((4, 5, 6))
    >>> plan = gram_plan(X, 1)
    >>> plan.route, plan.outer, plan.inner, gram(X, 1, plan=plan).shape
    ('slabs', (0,), (2,), (5, 5))
    """
    _, X = _tensor(X)
    n = _mode(mode, X.ndim)
    st = _elem_strides(X)
    others = [m for m in range(X.ndim) if m != n and X.shape[m] != 1]
    outer = tuple(sorted((m for m in others if st[m] > st[n] or X.shape[n] == 1), key=lambda m: -st[m]))
    inner = tuple(sorted((m for m in others if m not in outer), key=lambda m: -st[m]))
    n_outer = math.prod(X.shape[m] for m in outer)
    R = math.prod(X.shape[m] for m in inner)
    try:
        _view(X.transpose([*outer, n, *inner, *(m for m in range(X.ndim) if m != n and X.shape[m] == 1)]),
              (n_outer, X.shape[n], R))
        route = "syrk" if (R == 1 or n_outer == 1) else "slabs"
    except (ValueError, TypeError, RuntimeError):
        route = "contract"
    return GramPlan(n, outer, inner, route, tuple(X.shape), st)


@device_op
def gram(X: Any, mode: int, *, plan: GramPlan | None = None, device: Any = None) -> Any:
    """The Gram matrix of the mode-``mode`` unfolding, ``X_(n) X_(n)^T``, without forming the unfolding.

    The modes stored outside ``mode`` (larger strides) are looped over; the modes inside it are the
    reduction of each GEMM (``X[o] @ X[o].T`` on views, which numpy runs as a symmetric rank-k update).

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    mode : int
    plan : GramPlan, optional
        From :func:`gram_plan` for a tensor of the same shape and strides.

    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array, shape (I_mode, I_mode)

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import gram
    >>> X = np.arange(24.0).reshape(2, 3, 4)
    >>> np.allclose(gram(X, 1), np.moveaxis(X, 1, 0).reshape(3, -1) @ np.moveaxis(X, 1, 0).reshape(3, -1).T)
    True
    """
    if hasattr(X, "_tk_gram") and plan is None:  # streamed in slabs
        return X._tk_gram(_mode(mode, X.ndim))
    xp, X = _tensor(X)
    n = _mode(mode, X.ndim)
    if plan is None:
        plan = gram_plan(X, n)
    elif (plan.mode, plan.shape, plan.strides) != (n, tuple(X.shape), _elem_strides(X)):
        raise ValueError(
            f"plan was made for mode {plan.mode}, shape {plan.shape}, strides {plan.strides}; received mode "
            f"{n}, shape {tuple(X.shape)}, strides {_elem_strides(X)}"
        )
    In = X.shape[n]
    outer, inner = list(plan.outer), list(plan.inner)
    n_outer = math.prod(X.shape[m] for m in outer)
    R = math.prod(X.shape[m] for m in inner)
    if plan.route == "contract":
        x = _LETTERS[: X.ndim]
        y = x[:n] + _NEW + x[n + 1:]
        return contract(f"{x},{y}->{x[n]}{_NEW}", X, X)
    Xv = X.transpose([*outer, n, *inner, *(m for m in range(X.ndim) if m != n and X.shape[m] == 1)])
    Xv = _view(Xv, (n_outer, In, R))
    G = xp.zeros((In, In), dtype=X.dtype)
    def mm(a, b, out):  # BLAS, or cuBLAS on the same views
        return np.matmul(a, b, out=out) if xp is np else gpu_matmul(xp, a, b, out)
    if X.size == 0:
        return G
    conj = (lambda v: v.conj()) if X.dtype.kind == "c" else (lambda v: v)
    with single_threaded_blas():
        if R == 1 or n_outer == 1:
            # one SYRK (numpy detects V @ V.T); large enough for BLAS's own threads to pay off
            V = Xv[:, :, 0].T if R == 1 else Xv[0]
            if xp is np and In * In * V.shape[1] >= _BIG_SYRK:
                with threaded_blas():
                    np.matmul(V, conj(V).T, out=G)
            elif xp is np:
                np.matmul(V, conj(V).T, out=G)
            else:
                gpu_matmul(xp, V, conj(V).T, G)
            return G
        # sum over the outer index: each worker accumulates its share, SYRK per slab or batched GEMMs per chunk
        chunk = 1 if R >= 64 else max(1, min(n_outer, (4 << 20) // max(In * In * X.itemsize, 1)))
        starts = list(range(0, n_outer, chunk))
        w = workers() if xp is np else 1

        def new_state():
            return xp.zeros((In, In), dtype=X.dtype), xp.empty((chunk, In, In), dtype=X.dtype)

        def accumulate(i: int, state) -> None:
            acc, tmp = state
            start = starts[i]
            blk = Xv[start:start + chunk]
            if blk.shape[0] == 1:
                mm(blk[0], conj(blk[0]).T, out=tmp[0])
                acc += tmp[0]
            else:
                t = tmp[: blk.shape[0]]
                mm(blk, xp.swapaxes(conj(blk), 1, 2), out=t)
                acc += t.sum(axis=0)

        # dynamically scheduled slabs, one accumulator per thread (see engine._threads.dynamic_for)
        for acc, _ in dynamic_for(accumulate, len(starts), new_state, workers_=w):
            G += acc
    return G


# ---------------------------------------------------------------------------------------------------
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
    if len(matrices) == 0:
        raise ValueError("matrices is empty; expected at least one matrix")
    mats = list(matrices)
    R = mats[0].shape[1]
    for i, U in enumerate(mats):
        if U.ndim != 2 or U.shape[1] != R:
            raise ValueError(
                f"matrices[{i}] has shape {tuple(U.shape)}; expected 2-D with {R} columns like matrices[0]"
            )
    out = mats[0]
    for U in mats[1:]:
        out = (out[:, None, :] * U[None, :, :]).reshape(-1, R)
    return out


@dataclass(frozen=True)
class MTTKRPPlan:
    """How :func:`mttkrp` evaluates one mode: one GEMM, or a GEMM then a batched GEMV.

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

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import mttkrp_plan
    >>> X, U = np.ones((4, 5, 6)), [np.ones((4, 2)), None, np.ones((6, 2))]
    >>> p = mttkrp_plan(X, U, 1)
    >>> p.first, p.second, [q.kind.value for q in p.plans]
    ((2,), (0,), ['gemm', 'batched_gemv'])
    """

    mode: int
    first: tuple[int, ...]
    second: tuple[int, ...]
    plans: tuple[ContractionPlan, ...] = field(default=())
    intermediate_elements: int = 0

    def explain(self) -> str:
        head = (
            f"mttkrp mode {self.mode}: contract modes {list(self.first)} by GEMM"
            + (f", then modes {list(self.second)} batched over the rank" if self.second else "")
            + f" (intermediate {self.intermediate_elements:,} elements)"
        )
        return "\n".join([head] + ["  " + p.explain().replace("\n", "\n  ") for p in self.plans])


def _mttkrp_split(shape, strides, n, R) -> tuple[tuple[int, ...], tuple[int, ...]]:
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
    if full * R <= max(size // 4, 1) or len(side) == 1:
        return tuple(side), ()
    # split the side into two chains: first the far end (away from mode n), balancing the temporaries
    best = None
    for j in range(1, len(side)):
        far, near = (side[j:], side[:j]) if side is inner else (side[:j], side[j:])
        pf = math.prod(shape[m] for m in far)
        mem = pf * R + size // pf * R + math.prod(shape[m] for m in near) * R
        if best is None or mem < best[0]:
            best = (mem, tuple(far), tuple(near))
    assert best is not None
    return best[1], best[2]


def _rank_outer(xp, X, rest, R, dtype):
    """An (I_rest..., R) buffer with the rank outermost and the rest in X's memory order."""
    st = _elem_strides(X)
    mem = sorted(range(len(rest)), key=lambda i: -st[rest[i]])
    buf = xp.empty((R, *(X.shape[rest[i]] for i in mem)), dtype=dtype)
    axes = [0] * (len(rest) + 1)
    for pos, i in enumerate(mem):
        axes[i] = pos + 1
    axes[-1] = 0
    return buf.transpose(axes)


def _check_factors(X: Any, factors: Sequence[Any], n: int) -> None:
    if len(factors) != X.ndim:
        raise ValueError(f"factors has {len(factors)} matrices; expected one per mode of X ({X.ndim})")
    ranks = set()
    for m, U in enumerate(factors):
        if m == n and U is None:
            continue
        if U.ndim != 2 or U.shape[0] != X.shape[m]:
            raise ValueError(
                f"factors[{m}] has shape {tuple(U.shape)} but mode {m} of X has size {X.shape[m]}; expected "
                f"({X.shape[m]}, R)"
            )
        ranks.add(U.shape[1])
    if len(ranks) > 1:
        raise ValueError(f"factors have different numbers of columns {sorted(ranks)}; expected one rank R")


@device_op
def mttkrp(
    X: Any, factors: Sequence[Any], mode: int, *, plan: MTTKRPPlan | None = None, device: Any = None
) -> Any:
    """Matricized tensor times Khatri-Rao product: ``X_(n)`` times the Khatri-Rao product of the factors but ``n``.

    Evaluated in at most two engine calls, never unfolding ``X`` and never forming a Khatri-Rao product
    with as many rows as ``X`` has columns in its unfolding when that would be large: the modes on one
    side of ``mode`` are contracted first by one GEMM with their (small) Khatri-Rao product, the others
    afterwards by a GEMV batched over the rank.

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    factors : sequence of N arrays, shape (I_k, R)
        ``factors[mode]`` is not used and may be None.
    mode : int
    plan : MTTKRPPlan, optional

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
    if hasattr(X, "_tk_mttkrp"):  # sparse tensors bring their compiled kernel: sparse is a kernel, not a branch
        n = _mode(mode, X.ndim)
        _check_factors(X, factors, n)
        return X._tk_mttkrp(factors, n)
    xp, X = _tensor(X)
    n = _mode(mode, X.ndim)
    if len(factors) != X.ndim:
        raise ValueError(f"factors has {len(factors)} matrices; expected one per mode of X ({X.ndim})")
    ranks = set()
    mats: dict[int, Any] = {}
    for m, U in enumerate(factors):
        if m == n and U is None:
            continue
        U = _matrix(U, f"factors[{m}]", X.dtype)
        if U.shape[0] != X.shape[m]:
            raise ValueError(
                f"factors[{m}] has {U.shape[0]} rows but mode {m} of X has size {X.shape[m]}; expected equal"
            )
        ranks.add(U.shape[1])
        mats[m] = U
    if len(ranks) > 1:
        raise ValueError(f"factors have different numbers of columns {sorted(ranks)}; expected one rank R")
    R = ranks.pop() if ranks else 0
    dtype = np.result_type(X.dtype, *(U.dtype for U in mats.values()))
    if X.dtype != dtype:
        X = X.astype(dtype)
    if plan is None:
        first, second = _mttkrp_split(X.shape, _elem_strides(X), n, R)
    else:
        first, second = plan.first, plan.second
    x = _LETTERS[: X.ndim]
    if not first:  # a 1-way tensor: the sum over nothing
        return xp.asarray(X)[:, None] * xp.ones((1, R), dtype=dtype)
    kr1 = khatri_rao([mats[m] for m in first]).reshape(*(X.shape[m] for m in first), R)
    rest = [m for m in range(X.ndim) if m not in first]
    p_sub = "".join(x[m] for m in rest) + _RANK
    spec1 = f"{x},{''.join(x[m] for m in first)}{_RANK}->{p_sub}"
    if not second:
        return contract(spec1, X, kr1, out=xp.empty((X.shape[n], R), dtype=dtype))
    # intermediate with the rank outermost, so that each rank's slice is a plain matrix for step 2
    P = _rank_outer(xp, X, rest, R, dtype)
    contract(spec1, X, kr1, out=P)
    kr2 = khatri_rao([mats[m] for m in second]).reshape(*(X.shape[m] for m in second), R)
    spec2 = f"{p_sub},{''.join(x[m] for m in second)}{_RANK}->{x[n]}{_RANK}"
    return contract(spec2, P, kr2, out=xp.empty((X.shape[n], R), dtype=dtype))


def mttkrp_plan(X: Any, factors: Sequence[Any], mode: int) -> MTTKRPPlan:
    """The split :func:`mttkrp` uses for this mode, with the engine plans of its steps.

    Parameters
    ----------
    X, factors, mode : see :func:`mttkrp`

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
    xp, X = _tensor(X)
    n = _mode(mode, X.ndim)
    R = next(U.shape[1] for m, U in enumerate(factors) if U is not None and m != n)
    first, second = _mttkrp_split(X.shape, _elem_strides(X), n, R)
    x = _LETTERS[: X.ndim]
    rest = [m for m in range(X.ndim) if m not in first]
    p_sub = "".join(x[m] for m in rest) + _RANK
    kr1 = xp.empty((*(X.shape[m] for m in first), R), dtype=X.dtype)
    plans = []
    inter = 0
    if second:
        P = _rank_outer(xp, X, rest, R, X.dtype)
        plans.append(plan_contraction(f"{x},{''.join(x[m] for m in first)}{_RANK}->{p_sub}", X, kr1, out=P))
        kr2 = xp.empty((*(X.shape[m] for m in second), R), dtype=X.dtype)
        plans.append(plan_contraction(f"{p_sub},{''.join(x[m] for m in second)}{_RANK}->{x[n]}{_RANK}", P, kr2,
                                      out=xp.empty((X.shape[n], R), dtype=X.dtype)))
        inter = P.size
    else:
        plans.append(plan_contraction(f"{x},{''.join(x[m] for m in first)}{_RANK}->{p_sub}", X, kr1,
                                      out=xp.empty((X.shape[n], R), dtype=X.dtype)))
    return MTTKRPPlan(n, first, second, tuple(plans), inter)


# ---------------------------------------------------------------------------------------------------
def mttkrp_sweep(X: Any, factors: list[Any], update) -> tuple[ContractionPlan, ...]:
    """The N MTTKRPs of one ALS sweep, in mode order, sharing partial contractions (a dimension tree).

    ``update(n, M_n)`` is called with each ``M_n`` (shape (I_n, R)) as soon as it is ready; it may replace
    ``factors[n]``, and later MTTKRPs of the sweep use the new factor (Gauss-Seidel order, as CP-ALS needs).
    The modes are split into an outer and an inner half: the inner half is contracted first by one GEMM
    with its Khatri-Rao product (old factors), the outer-half MTTKRPs are finished from that partial result
    by GEMVs batched over the rank, then the same from the other side with the updated outer factors. The
    full tensor is read twice per sweep whatever its order.

    Parameters
    ----------
    X : array or sparse tensor, shape (I_0, ..., I_{N-1})
    factors : list of arrays, shape (I_n, R)
        Read, and possibly replaced by ``update``, in place.
    update : callable ``update(n, M_n)``

    Returns
    -------
    tuple
        The engine plans used (for a sparse tensor, its per-mode CSF plan), for inspection.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import mttkrp, mttkrp_sweep
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((4, 5, 6))
    >>> U = [rng.random((n, 3)) for n in X.shape]
    >>> out = {}
    >>> _ = mttkrp_sweep(X, U, lambda n, M: out.setdefault(n, M))
    >>> all(np.allclose(out[n], mttkrp(X, U, n)) for n in range(3))
    True
    """
    if hasattr(X, "_tk_mttkrp"):  # sparse: one compiled CSF kernel per mode (each reads only the nonzeros)
        for n in range(X.ndim):
            update(n, X._tk_mttkrp(factors, n))
        return (X.plan(),)
    if hasattr(X, "_tk_mttkrp_sweep"):  # out of core: two streamed passes
        return X._tk_mttkrp_sweep(factors, update)
    xp, X = _tensor(X, min_ndim=2)
    plans: list[ContractionPlan] = []
    # mode order is the update order (0..N-1); for C or F layouts each half is a memory-adjacent chain
    all_modes = list(range(X.ndim))
    _MttkrpTree(xp, X.shape, factors, update, plans).rec(X, all_modes, False, all_modes)
    return tuple(plans)


class _MttkrpTree:
    """The dimension tree of one ALS sweep (see :func:`mttkrp_sweep`): ``contract_modes`` removes modes from a
    tensor (with the Khatri-Rao product of their factors when the rank index is not there yet, else one
    batched GEMV per mode), ``rec`` splits the active modes in halves and recurses."""

    def __init__(self, xp, shape, factors, update, plans):
        self.xp, self.shape, self.factors, self.update, self.plans = xp, tuple(shape), factors, update, plans
        self.R = factors[0].shape[1]

    def contract_modes(self, T, t_modes: list[int], gone: list[int], has_r: bool):
        xp, factors, R, shape, plans = self.xp, self.factors, self.R, self.shape, self.plans
        rest = [m for m in t_modes if m not in gone]
        x = "".join(_LETTERS[m] for m in t_modes) + (_RANK if has_r else "")
        out_sub = "".join(_LETTERS[m] for m in rest) + _RANK
        if not has_r:
            t_st = _elem_strides(T)
            order = sorted(gone, key=lambda m: -t_st[t_modes.index(m)])
            kr = khatri_rao([factors[m] for m in order]).reshape(*(shape[m] for m in order), R)
            spec = f"{x},{''.join(_LETTERS[m] for m in order)}{_RANK}->{out_sub}"
            out = _rank_outer(xp, T, [t_modes.index(m) for m in rest], R, T.dtype)
            p = plan_contraction(spec, T, kr, out=out)
            plans.append(p)
            return contract(spec, T, kr, out=out, plan=p), rest
        cur, cur_modes = T, list(t_modes)
        for m in gone:
            keep = [k for k in cur_modes if k != m]
            xs = "".join(_LETTERS[k] for k in cur_modes) + _RANK
            outs = "".join(_LETTERS[k] for k in keep) + _RANK
            spec = f"{xs},{_LETTERS[m]}{_RANK}->{outs}"
            c_st = _elem_strides(cur)
            mem = sorted(range(len(keep)), key=lambda i: -c_st[cur_modes.index(keep[i])])
            buf = xp.empty((R, *(cur.shape[cur_modes.index(keep[i])] for i in mem)), dtype=cur.dtype)
            axes = [0] * (len(keep) + 1)
            for pos, i in enumerate(mem):
                axes[i] = pos + 1
            out = buf.transpose(axes)
            p = plan_contraction(spec, cur, factors[m], out=out)
            plans.append(p)
            cur = contract(spec, cur, factors[m], out=out, plan=p)
            cur_modes = keep
        return cur, cur_modes

    def rec(self, T, t_modes: list[int], has_r: bool, active: list[int]) -> None:
        if len(active) == 1 and has_r:
            self.update(active[0], T)
            return
        half = (len(active) + 1) // 2
        first, second = active[:half], active[half:]
        T2, m2 = self.contract_modes(T, t_modes, second, has_r)
        self.rec(T2, m2, True, first)
        T1, m1 = self.contract_modes(T, t_modes, first, has_r)
        self.rec(T1, m1, True, second)
