"""Tucker decompositions: HOSVD, sequentially truncated HOSVD (ranks or error tolerance), and HOOI."""

from __future__ import annotations

import functools
import itertools
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tuckerkit._validation import (
    check_bool,
    check_callback,
    check_init,
    check_max_iter,
    check_nonneg,
    check_random_state,
    check_ranks,
    check_svd,
    check_unit_interval,
    describe,
)
from tuckerkit.backend import to_host
from tuckerkit.decomposition._entry import (
    Call,
    ResidualModel,
    caller_stacklevel,
    carries_partials,
    check_fixed_modes,
    decomposition_call,
    mean_passes,
    scaled_start,
)
from tuckerkit.decomposition._missing import TuckerModel
from tuckerkit.decomposition._monitor import IterationState, Monitor
from tuckerkit.decomposition._results import TuckerTensor
from tuckerkit.engine import DenseTensor, as_operand
from tuckerkit.engine._direct import operand_ttm
from tuckerkit.engine._operand import frobenius_norm
from tuckerkit.engine._subspace import (
    SubspaceBackoff,
    eigh_desc,
    gram_route,
    leading_left_singular,
    randomized_left_singular,
    sign_fix,
)
from tuckerkit.engine._sweeps import CarriedPartial, tree_spine

logger = logging.getLogger(__name__)


def _fit(normX: float, normG: float) -> float:
    """``1 - ||X - X_hat|| / ||X||`` for orthonormal factors, from the norms alone: ``||X - X_hat||^2 =
    ||X||^2 - ||G||^2``, in the ratio ``r = ||G|| / ||X||`` (no square of the data's scale is formed).

    The two norms are each rounded (a relative error of a few eps), so ``1 - r^2`` below ``_FIT_FLOOR`` is
    rounding, not error: the fit is 1.0 there, not a value that wanders by ~1e-8 between two equal models (an
    exact low-rank tensor then converges on its first iteration instead of chasing the noise past ``tol``)."""
    if normX <= 0:
        return 1.0
    r = normG / normX
    d = (1.0 - r) * (1.0 + r)
    return 1.0 if d <= _FIT_FLOOR else 1.0 - math.sqrt(d)


_FIT_FLOOR = 16 * float(np.finfo(np.float64).eps)  # (a relative error below ~6e-8 cannot be told from the norms)


def _subspace(call: Call, Y: Any, n: int, r: int, svd: str, rng: np.random.Generator,
              start: Any = None, backoff: Any = None, rough: bool = False) -> tuple[Any, Any]:
    """The factor step: the ``r`` leading left singular vectors of ``Y_(n)`` and the eigenvalues of its Gram.

    ``svd="exact"``: the operand's own route (a Gram's eigendecomposition without unfolding, the SVD of a small
    unfolding, ARPACK on a sparse unfolding, a streamed Gram). ``svd="randomized"``: on a dense array (every
    HOOI projection; a dense input's own steps) the randomized range finder of
    :func:`~tuckerkit.engine._subspace.randomized_left_singular`; other operand kinds keep their route.
    ``start``: the factor being replaced (HOOI), which warm-starts the exact route's eigensolver; ``backoff``:
    the mode's :class:`~tuckerkit.engine._subspace.SubspaceBackoff` over the call; ``rough``: a start's step that
    iterations refine, whose Gram may come from float32 products (:meth:`Call.leading_subspace`)."""
    from tuckerkit.engine import DenseTensor

    if svd == "randomized" and isinstance(Y, DenseTensor):
        return randomized_left_singular(Y.data, n, r, rng, call.policy)
    # (X's first from the Gram made on entry)
    return call.leading_subspace(Y, n, r, rng, start, rough=rough, backoff=backoff)


def _entry_gram(ranks: Any, order: Any = "auto", sketch: bool = False, svd: Any = "exact",
                max_error: Any = None) -> Callable[[Any], int | None]:
    """``decomposition_call``'s ``first_gram`` for ST-HOSVD (and HOOI's ST-HOSVD start; HOSVD: ``order=0``,
    its first mode): the mode of the first step when it takes that mode's Gram of the whole tensor (exact, not
    sketched, in memory), else None. Invalid arguments give None here: the body raises on them as always."""
    def mode(op: Any) -> int | None:
        if sketch or svd != "exact" or op.streamed:
            return None
        try:
            if isinstance(order, int):
                first = order
            elif not isinstance(order, str):
                first = _check_order(order, op.ndim)[0]
            elif max_error is not None:  # (the largest mode first; every eigenvalue of its Gram)
                first = max(range(op.ndim), key=lambda m: (op.shape[m], -m))
            if max_error is not None:  # (none where the choice takes its Grams in double precision, or its pairs
                # from the other side of a long mode: _choice_pairs)
                long = _long_mode(op.shape, first)
                return None if long or _double_gram(op, float(max_error) ** 2 / op.ndim) else first
            rk = check_ranks(ranks, op.shape)
            if isinstance(order, str):
                first = (_tree_order(op.shape, rk) or _cheapest_order(op.shape, rk))[0]
        except (TypeError, ValueError):
            return None
        return first if gram_route(op.shape, first, rk[first]) else None

    return mode


def _check_svd_for(svd: Any, max_error: Any, name: str) -> str:
    svd = check_svd(svd)
    if svd == "randomized" and max_error is not None:
        raise ValueError(f"svd='randomized' needs ranks; with {name} the rank choice needs every eigenvalue "
                         "(use svd='exact')")
    return svd


#: a rank choice on single-precision data takes its Grams accumulated in double precision where its error budget
#: per mode, ``max_error**2 / N`` (in units of ``||X||^2``), is below this: a Gram formed in float32 carries
#: rounding of about eps32 ``||X||^2`` in every eigenvalue, so its discarded tails cannot tell budgets near it
#: apart (measured on a 60 x 70 x 80 float32 tensor whose multilinear singular values decay over seven orders:
#: ``st_hosvd(max_error=1e-4)`` chose ranks (37, 39, 44) for an error of 1.35e-4 while reporting 8.6e-5, and
#: ``max_error=1e-3`` reported 9.7e-4 for 1.7e-4; in float64 products both keep the bound and report the error
#: to three digits). 1000 eps32 is max_error 0.019 for three modes: looser targets keep float32's Gram (their
#: tails are far above its rounding) and its speed
DOUBLE_GRAM_BUDGET = 1000 * float(np.finfo(np.float32).eps)
#: the float32 data converted per piece of such a Gram (a slab range of the outermost other mode): its only
#: extra memory besides the Gram
DOUBLE_GRAM_PIECE_BYTES = 16 << 20


def _double_gram(Y: Any, budget: float) -> bool:
    """Whether a rank choice with per-mode ``budget`` takes ``Y``'s Grams in double precision: a single-precision
    dense tensor in memory, sparse tensor on the host or tensor streamed in slabs (each has a ``wide_gram``; Dask
    and the GPU's sparse tensors form their own Grams) and a budget below :data:`DOUBLE_GRAM_BUDGET`."""
    single = np.dtype(Y.dtype) in (np.dtype(np.float32), np.dtype(np.complex64))
    return single and budget < DOUBLE_GRAM_BUDGET and (isinstance(Y, DenseTensor) or hasattr(Y, "wide_gram"))


#: a mode at least this long over a smaller rest (I_n > P) takes its rank choice's pairs from the P x P side
#: (:func:`_choice_pairs`)
LONG_CHOICE_MIN = 256


def _choice_pairs(call: Call, Y: Any, n: int, budget: float) -> tuple[Any, Any]:
    """``(w, V)``: mode ``n``'s Gram eigenpairs for a rank choice, decreasing. A long mode over a small rest
    (``I_n > P`` and ``I_n >= LONG_CHOICE_MIN``) of a float64 / complex128 array in memory takes the P pairs of
    the other side's P x P Gram (:func:`~tuckerkit.engine._subspace.leading_left_singular`: the others are 0):
    the I_n x I_n Gram cost O(I_n^3) (4.4 s for (3000, 3, 3)) and 74.5 GiB at I_n = 100000."""
    from tuckerkit.engine import DenseTensor

    if _long_mode(Y.shape, n) and isinstance(Y, DenseTensor) and Y.xp is np and np.dtype(Y.dtype).char in "dD":
        V, w = leading_left_singular(Y.data, n, Y.size // Y.shape[n], call.policy)
        return w, V
    return eigh_desc(_choice_gram(call, Y, n, budget))


def _long_mode(shape: Sequence[int], n: int) -> bool:
    """Mode ``n`` is at least :data:`LONG_CHOICE_MIN` long and longer than the product of the others."""
    I_n = shape[n]
    return I_n >= LONG_CHOICE_MIN and I_n > math.prod(shape) // max(I_n, 1)


def _choice_gram(call: Call, Y: Any, n: int, budget: float) -> Any:
    """Mode ``n``'s Gram for a rank choice with per-mode error ``budget``: the call's (its dtype's products) or,
    where :func:`_double_gram` says so, that of ``Y``'s data in float64 / complex128, accumulated over slab ranges
    of the outermost other mode converted one at a time (in order: the same bits for any workers)."""
    if not _double_gram(Y, budget):
        return call.gram(Y, n)
    if hasattr(Y, "wide_gram"):  # (a sparse tensor on the host: its unfolding's product in double precision)
        return Y.wide_gram(n)
    from tuckerkit.engine._gram import _hermitian, blocks_gram

    wide = np.complex128 if np.dtype(Y.dtype).kind == "c" else np.float64
    G = blocks_gram(Y.data, n, call.policy, dtype=wide, limit=DOUBLE_GRAM_PIECE_BYTES)
    return _hermitian(G) if G.dtype.kind == "c" else G


class TuckerResidual(ResidualModel):
    """``core x_n U_n`` as :meth:`Call.residual_fit` takes a model (:class:`ResidualModel`: ``lead`` is the
    core)."""

    def rest(self, m: int, order: Sequence[int], lo: int, hi: int) -> Any:
        """``core x_k U_k`` over every mode but ``m`` (``order[0]``'s factor: its rows ``lo:hi``), as ``r_m x C``
        with the other modes in ``order``: the core's axes put in that order (a copy of the core), then each
        factor applied from the innermost axis out as one GEMM (the last axis) or a batch of them, every result
        C-contiguous, so the last is the rest itself. (The engine's planned ``multi_ttm`` took 131 us for a
        10^3 tensor at rank 3, more than the rest of the sum; ``tensordot`` a mode at a time, which copies its
        operands' axes into place, 5.3 ms at 200^3 and rank 10, against about 1 ms here.)"""
        G, Us = self._of(np.dtype(np.float64))
        Y = np.ascontiguousarray(G.transpose([m, *order]))
        for p in range(len(order), 0, -1):
            k = order[p - 1]
            U = Us[k][lo:hi] if p == 1 else Us[k]
            shape = Y.shape
            if p == len(order):  # (the innermost axis: one GEMM)
                Y = (Y.reshape(-1, shape[p]) @ U.T).reshape(*shape[:p], U.shape[0])
            else:
                outer, inner = math.prod(shape[:p]), math.prod(shape[p + 1:])
                Y = np.matmul(U, Y.reshape(outer, shape[p], inner)).reshape(*shape[:p], U.shape[0], *shape[p + 1:])
        return Y.reshape(G.shape[m], -1)

    def values(self, idx: tuple[slice, ...], dtype: Any) -> Any:
        from tuckerkit.engine import multi_ttm

        G, Us = self._of(dtype)
        return multi_ttm(G, [U[idx[k]] for k, U in enumerate(Us)])  # (the cut mode's factor: its rows)

    def at(self, coords: np.ndarray) -> np.ndarray:
        G, Us = self._of(np.dtype(np.float64))
        k = coords.shape[0]
        T = Us[0][coords[:, 0]] @ G.reshape(G.shape[0], -1)  # (k, r_1 ... r_{N-1})
        for n in range(1, len(Us)):
            T = np.einsum("kjr,kj->kr", T.reshape(k, G.shape[n], -1), Us[n][coords[:, n]])
        return T.reshape(k)

    def point_width(self) -> int:
        return max(1, int(np.prod(np.shape(self.lead)[1:])))

    def norm_sq(self) -> float:
        G, Us = self._of(np.dtype(np.float64))
        T = G
        for n, U in enumerate(Us):  # <G, G x_n (U_n^T U_n)>: the factors need not be orthonormal
            T = np.moveaxis(np.tensordot(U.T @ U, T, axes=(1, n)), 0, n)
        return float(np.vdot(G, T))


def _reported_fit(call: Call, fit: float, core: Any, factors: Sequence[Any], residual: bool = False) -> float:
    """The fit a Tucker model of the call reports: ``fit`` (from norms), or the residual's in double precision
    where :meth:`Call.refines_fit` says so or ``residual`` (a single-precision rank choice, :func:`_double_gram`:
    there HOSVD reported errors of 1.7e-4 and 1.9e-4 for models within 8.5e-5 and 2.6e-7, a 40 x 45 x 50 tensor at
    max_error 1e-4 and 1e-5)."""
    if residual or call.refines_fit(fit):
        return call.residual_fit(TuckerResidual(call.X.xp, core, factors))
    return fit


def _project_all(call: Call, Y: Any, factors: list[Any]) -> Any:
    """The core ``Y x_n U_n^T`` over every mode."""
    return Y.multi_ttm(dict(enumerate(factors)), transpose=True, policy=call.policy)


def _tail_rule_factor(call: Call, X: Any, n: int, max_error: float, normX: float) -> Any:
    """Mode ``n``'s factor of the smallest rank whose discarded Gram eigenvalues fit the mode's share of the
    error budget, ``max_error**2 * ||X||**2 / N`` (HOSVD's rank choice; the eigenvalues are all needed)."""
    unit = normX * normX if normX > 0 else 1.0
    budget = max_error**2 / X.ndim
    w, V = _choice_pairs(call, X, n, budget)
    w = np.clip(np.asarray(to_host(w), dtype=np.float64), 0.0, None) / unit
    tail = np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]])  # tail[r] = sum of w[r:]
    r = max(int(np.argmax(tail <= budget)), 1)
    return sign_fix(X.xp.ascontiguousarray(V[:, :r])).astype(X.dtype, copy=False)


def _rank_target(max_error: Any, tol: Any, where: str) -> tuple[Any, str]:
    """``max_error``, or the deprecated ``tol`` (a FutureWarning pointing at the caller), and the name the
    user gave it (messages name the parameter the user passed)."""
    if tol is None:
        return max_error, "max_error"
    if max_error is not None:
        raise ValueError(f"pass max_error only; tol is its deprecated name (received both: tol={describe(tol)}, "
                         f"max_error={describe(max_error)})")
    warnings.warn(
        f"{where}(tol=...) is deprecated and will be removed in tuckerkit 0.3; use max_error={describe(tol)} "
        "(the error target of the rank choice). tol is the convergence tolerance of hooi and cp_als.",
        FutureWarning, stacklevel=caller_stacklevel())
    return tol, "tol"


def hosvd(X: Any, ranks: Sequence[int] | int | None = None, *, max_error: float | None = None,
          svd: str = "exact", random_state: Any = None, device: Any = None) -> TuckerTensor:
    """Truncated higher-order SVD: each factor from the full tensor, then the core.

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
        Dense tensor, any layout (C, F or a strided view); float32, float64, complex64 and complex128 kept
        (complex: the core is ``X x_n U_n^H``, the factors from the Hermitian Gram ``X_(n) X_(n)^H``).
    ranks : sequence of int, or int, optional
        Multilinear ranks, each in [1, I_n]. Exactly one of ``ranks`` and ``max_error`` is given.
    max_error : float in (0, 1), optional
        The rank-choice target: per mode the smallest rank whose discarded Gram eigenvalues sum to at most
        ``max_error**2 * ||X||**2 / N``, which guarantees ``||X - X_hat|| <= max_error * ||X||`` (as
        :func:`st_hosvd`; pyttb's ``hosvd(X, tol)``). The chosen ranks are ``result.ranks``. On float32 or
        complex64 data below max_error 0.019 (three modes; ``DOUBLE_GRAM_BUDGET``) the Grams of the choice are
        accumulated in double precision and the reported fit comes from the residual formed in double precision:
        a float32 Gram's rounding would otherwise decide the ranks and the fit.
    svd : {"exact", "randomized"}, default "exact"
        How each factor is computed from the full tensor; see :func:`hooi`. Needs ``ranks``.
    random_state : None, int or numpy Generator
        The seed of ``svd="randomized"`` (None: a fixed seed, so results repeat).
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where ``X`` lives (a cupy array stays on its GPU). A host input with
        ``device="cuda"`` is copied to the GPU once and the result comes back as numpy arrays
        (``result.to("cuda")`` keeps a copy on the GPU).

    Returns
    -------
    TuckerTensor

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> X = np.random.default_rng(0).standard_normal((6, 7, 8))
    >>> core, factors = tk.hosvd(X, [2, 3, 4])
    >>> core.shape, [U.shape for U in factors]
    ((2, 3, 4), [(6, 2), (7, 3), (8, 4)])
    >>> tk.hosvd(tk.multi_ttm(core, factors), max_error=1e-6).ranks  # the ranks of an exact Tucker tensor
    (2, 3, 4)
    """
    with decomposition_call(X, device=device, complex_ok=True,
                            first_gram=_entry_gram(ranks, 0, svd=svd, max_error=max_error)) as call:
        X = call.X
        if (ranks is None) == (max_error is None):
            raise ValueError("pass exactly one of ranks and max_error; received "
                             + ("both" if ranks is not None else "neither"))
        svd = _check_svd_for(svd, max_error, "max_error")
        rng = check_random_state(0 if random_state is None else random_state)
        if max_error is not None:
            target = check_unit_interval(max_error, "max_error")
            factors = [_tail_rule_factor(call, X, n, target, call.norm) for n in range(X.ndim)]
        else:
            ranks = check_ranks(ranks, X.shape)
            factors = [_subspace(call, X, n, ranks[n], svd, rng)[0].astype(X.dtype, copy=False)
                       for n in range(X.ndim)]
        core = _project_all(call, X, factors)
        fit = _reported_fit(call, _fit(call.norm, frobenius_norm(core)), core, factors,
                            max_error is not None and _double_gram(X, target**2 / X.ndim)
                            and isinstance(X, DenseTensor))
        return _met(call.result(TuckerTensor(call.unscale(core), tuple(factors), 0, True, (fit,),
                                             passes_per_iteration=X.ndim + 1)),
                    target if max_error is not None else None, "hosvd")


def st_hosvd(
    X: Any,
    ranks: Sequence[int] | int | None = None,
    *,
    max_error: float | None = None,
    order: str | Sequence[int] = "auto",
    memory_limit: Any = None,
    sketch: bool = False,
    svd: str = "exact",
    random_state: Any = None,
    device: Any = None,
    tol: float | None = None,
) -> TuckerTensor:
    """Sequentially truncated HOSVD, with given ranks or the smallest ranks meeting an error target.

    Each mode's factor comes from the Gram matrix of the tensor *already truncated* in the modes processed
    before it, so the work shrinks as it goes.

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    ranks : sequence of int, or int, optional
        Multilinear ranks. Exactly one of ``ranks`` and ``max_error`` is given.
    max_error : float in (0, 1), optional
        The rank-choice target, a relative error bound: per mode the smallest rank whose discarded
        eigenvalues sum to at most ``max_error**2 * ||X||**2 / N``, which guarantees
        ``||X - X_hat|| <= max_error * ||X||``. (pyttb calls it ``tol`` in ``hosvd``; here ``tol`` is only
        ever the convergence tolerance of the iterative methods, as in TensorLy and scikit-learn.) On float32 or
        complex64 data below max_error 0.019 (three modes) the choice's Grams are accumulated in double
        precision (as :func:`hosvd`), so the ranks are those of the same values in float64.
    order : "auto" or sequence of int
        Mode processing order. "auto": with ranks, the order with the fewest multiply-adds (each step's Gram
        of the smaller side of the unfolding and its projection, on the tensor the earlier steps left); the
        first step dominates, so the shortest mode tends to go first (ranks 10, against the largest reduction
        first: 2000x100x100 85 ms instead of 1157, 320x240x160 72 instead of 83). Among orders that cost the
        same or at most one projection of the tensor more, the one a HOOI sweep from its factors can continue
        (the second half of the modes first, ..., mode 0 last: a cube's 2, 1, 0): :func:`hooi` starts from
        this ST-HOSVD and its first sweep takes the projections this one made instead of reading ``X`` again.
        With ``max_error``, the largest mode first. Out of core, ``"auto"`` puts the shortest mode other than
        mode 0 first (it is the cheapest streamed Gram); an order given is kept (refused in one line where a
        projection it asks for exceeds ``memory_limit``).
    memory_limit : int or str, optional
        Bytes (or ``"4GB"``) the computation may hold. A tensor larger than that (typically a memory-mapped
        ``.npy``) is read in slabs along mode 0 (:class:`~tuckerkit.engine.SlabTensor`): the first mode's
        Gram and projection stream over the slabs, the rest runs on the projected tensor in memory.
    sketch : bool, default False
        Find the first mode's subspace with a randomized range finder instead of its Gram: one pass
        projecting the other modes on small Gaussian matrices (``R_n + 10`` columns in all), an orthonormal
        basis ``Q`` of that sketch, one pass projecting mode ``n`` on ``Q``, and the exact leading subspace
        of that small projection. Both passes cost a few TTMs, where the Gram pass costs ``I_n`` times the
        tensor's size in flops (out of core on a 31 GB file: 3.4x the time to read it, against 1.2x for a
        HOOI pass); the subspace is rougher when the tensor is noisy: at 1 % noise the error was 8-69 %
        above the exact ST-HOSVD's (40^4 at rank 5: 8 %; 60x70x80 at ranks (5, 6, 7): 17-30 %; 150x120x100
        and 100^3 at rank 10: 51 % and 69 %), so keep it as a start rather than a result. :func:`hooi` uses
        it for its initialization of a streamed tensor, where the iterations correct it (the same fit as from
        the exact start). Needs ``ranks``.
    svd : {"exact", "randomized"}, default "exact"
        How each mode's factor is computed from the partially truncated tensor; see :func:`hooi`. Needs
        ``ranks``.
    random_state : None, int or numpy Generator
        The Gaussian sketches' seed (None: a fixed seed, so results repeat).
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where ``X`` lives (a cupy array stays on its GPU). A host input with
        ``device="cuda"`` is copied to the GPU once and the result comes back as numpy arrays
        (``result.to("cuda")`` keeps a copy on the GPU).
    tol : float, optional
        Deprecated name of ``max_error`` (a ``FutureWarning``; removed in tuckerkit 0.3).

    Returns
    -------
    TuckerTensor
        ``ranks`` gives the chosen ranks; ``fit_history[0]`` the achieved fit.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> X = tk.multi_ttm(rng.standard_normal((2, 3, 2)), [rng.standard_normal((n, r)) for n, r in
    ...     [(10, 2), (12, 3), (14, 2)]])
    >>> tk.st_hosvd(X, max_error=1e-6).ranks
    (2, 3, 2)
    """
    max_error, name = _rank_target(max_error, tol, "st_hosvd")
    with decomposition_call(X, device=device, memory_limit=memory_limit, complex_ok=True,
                            first_gram=_entry_gram(ranks, order, sketch, svd, max_error)) as call:
        got = call.result(_st_hosvd(call, ranks, max_error, order, sketch, random_state, name, svd, refine=True))
    return _met(got, float(max_error) if max_error is not None else None, "st_hosvd")


def _st_hosvd(call: Call, ranks: Any, tol: Any, order: Any, sketch: bool, random_state: Any,
              name: str = "max_error", svd: Any = "exact",
              keep: dict[frozenset[int], Any] | None = None, rough: bool = False,
              refine: bool = False) -> TuckerTensor:
    """ST-HOSVD on the call's operand (``refine``: its fit as :func:`_reported_fit` says; HOOI's start keeps the
    one from the discarded eigenvalues); ``keep``: filled with the projections it makes that a HOOI sweep from
    its factors would make first (:func:`~tuckerkit.engine._sweeps.tree_spine`), keyed by the modes each
    leaves unprojected, for HOOI's first sweep to take instead of computing them again. ``rough``: a start
    that iterations refine (HOOI's): the Grams of the projections after the first step but the last one (whose
    factor HOOI's first sweep takes as its own first update) may come from float32 products, as the first
    step's made on entry does (:func:`~tuckerkit.engine._gram.start_gram`; the start's fit then does not come
    from its eigenvalues: HOOI takes it from the core). 200^3 at rank 10, the second step's (200, 200, 10)
    Gram timed alone: 3.6 -> 2.3 ms; 60^4's (60, 60, 60, 10): 10.2 -> 5.6 ms; 300^3's: 8.8 -> 5.4 ms. Whole
    default calls (interleaved, a 2-core AVX2 machine): 0.98-1.01x the time, the same iterations and fits."""
    X = call.X
    sketch = check_bool(sketch, "sketch")
    svd = _check_svd_for(svd, tol, name)
    if (ranks is None) == (tol is None):
        raise ValueError(
            f"pass exactly one of ranks and {name}; received "
            + ("both" if ranks is not None else "neither")
        )
    N = X.ndim
    rk = check_ranks(ranks, X.shape) if ranks is not None else None
    tol_v = check_unit_interval(tol, name) if tol is not None else None
    if isinstance(order, str):
        if order != "auto":
            raise ValueError(f"order={order!r} is not valid; expected 'auto' or a permutation of the modes")
        if rk is not None:
            seq = _tree_order(X.shape, rk, sketch) or _cheapest_order(X.shape, rk, sketch)
        else:
            seq = sorted(range(N), key=lambda n: -X.shape[n])
    else:
        seq = _check_order(order, N)
    if X.streamed and isinstance(order, str):  # (an explicit order is the caller's: it had been replaced silently)
        first = _streamed_first(X.shape)
        if rk is not None:  # the rest in the cheapest order after that one
            seq = _tree_order(X.shape, rk, sketch, first) or _cheapest_order(X.shape, rk, sketch, first)
        else:
            seq = [first, *(m for m in seq if m != first)]
    if sketch and rk is None:
        raise ValueError(f"sketch=True needs ranks; with {name} the rank choice needs every eigenvalue")
    rng = check_random_state(0 if random_state is None else random_state)
    normX = call.norm
    # squared norms in units of ||X||^2 (no square of the data's scale); the error of ST-HOSVD is exactly the
    # energy each step discards, so the fit comes from the discarded eigenvalues, not a difference of norms
    unit = normX * normX if normX > 0 else 1.0
    budget = (tol_v**2) / N if tol_v is not None else 0.0
    kept = 1.0 if normX > 0 else 0.0  # ||Y||^2 / ||X||^2 of the current (partially truncated) tensor
    discarded = 0.0
    factors: list[Any] = [None] * N
    chosen = [0] * N
    Y = X
    core: Any = None
    spine = set(X.sweep_spine()) if keep is not None else set()
    for i, n in enumerate(seq):
        if i > 0 and keep is not None and (left := frozenset(seq[i:])) in spine:
            keep[left] = core
        if i == 0 and sketch and rk is not None:
            U, Yn = _sketched_step(call, X, n, rk[n], rng)
            factors[n], chosen[n] = U, rk[n]
            Y = as_operand(Yn)  # (a sparse tensor's projection is sparse: its norm from its nonzeros)
            new_kept = (Y.norm() / normX) ** 2 if normX > 0 else 0.0
            discarded += max(kept - new_kept, 0.0)
            kept = new_kept
            core = Yn
            continue
        if rk is not None:
            r = rk[n]
            U, w = _subspace(call, Y, n, r, svd, rng, rough=rough and 0 < i < len(seq) - 1)
            w = np.asarray(to_host(w), dtype=np.float64) / unit
            new_kept = float(np.sum(np.clip(w, 0.0, None)))
            # a full rank discards nothing: no difference of nearly equal norms
            discarded += 0.0 if r >= Y.shape[n] else max(kept - new_kept, 0.0)
            kept = kept if r >= Y.shape[n] else new_kept
        else:
            w, V = _choice_pairs(call, Y, n, budget)
            w = np.clip(np.asarray(to_host(w), dtype=np.float64), 0.0, None) / unit  # the rank choice: on the host
            tail = np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]])  # tail[r] = sum of w[r:]
            r = max(int(np.argmax(tail <= budget)), 1)
            U = sign_fix(Y.xp.ascontiguousarray(V[:, :r]))
            discarded += float(tail[r])
            kept = float(np.sum(w[:r]))
        U = U.astype(X.dtype, copy=False)
        factors[n] = U
        chosen[n] = r
        core = operand_ttm(Y, U, n, call.policy)  # (a small tensor's: as the direct sweeps project)
        Y = as_operand(core)
    fit = 1.0 - math.sqrt(min(max(discarded, 0.0), 1.0)) if normX > 0 else 1.0
    if getattr(core, "nnz", None) is not None:  # (a sparse tensor's steps that kept a mode whole left a COOTensor
        core = core.to_dense()                   # core: unsaveable, no to_pyttb; its prod(ranks) entries, dense)
    if refine:
        fit = _reported_fit(call, fit, core, factors)
    logger.info("st_hosvd: ranks %s, fit %.6g", tuple(chosen), fit)
    return TuckerTensor(call.unscale(core), tuple(factors), 0, True, (fit,), passes_per_iteration=1)


def _streamed_first(shape: Sequence[int]) -> int:
    """The first ST-HOSVD mode of a streamed tensor: the first step streams over the tensor and its Gram costs
    I_n x size, so the shortest mode but 0 (the slab mode, whose Gram would need every pair of slabs); the
    last one among equals."""
    return min(range(len(shape) - 1, 0, -1), key=lambda m: shape[m])


def _tree_order(shape: Sequence[int], ranks: Sequence[int], sketch: bool = False,
                first: int | None = None) -> list[int] | None:
    """HOOI's ST-HOSVD start order: one whose intermediate projections are the partials a sweep makes before
    its first update (the second half of the modes projected first, then the second half of the first half,
    ..., mode 0 last; :func:`~tuckerkit.engine._sweeps.tree_spine`), so that the first sweep takes them
    instead of computing them (on a 3-way tensor one of its two reads of ``X``, and its first factor update,
    which is ST-HOSVD's last step). The cheapest such order by :func:`_cheapest_order`'s model, taken when it
    costs no more than :func:`_cheapest_order`'s plus the projection it saves; None otherwise (and when
    ``first``, a streamed tensor's first mode, is not in the second half). The order depends on the shape
    and ranks alone (a C- and an F-ordered tensor get the same start): an operand whose sweep takes fewer
    partials (:meth:`~tuckerkit.engine.Operand.sweep_spine`: a C-ordered 3-way tensor's, mode 0's alone)
    takes those it needs from the same steps."""
    N = len(shape)
    if N < 2 or N > 8:
        return None
    spine = [frozenset(range(N)), *tree_spine(N)]
    groups = [sorted(a - b) for a, b in itertools.pairwise(spine)] + [[0]]
    size = math.prod(shape)

    def cost(seq: Sequence[int]) -> int:
        sz, total = size, 0
        for i, n in enumerate(seq):
            total += _step_cost(sz, shape[n], ranks[n], sketch and i == 0)
            sz = sz // shape[n] * ranks[n]
        return total

    orders = [list(itertools.chain.from_iterable(p))
              for p in itertools.product(*(itertools.permutations(g) for g in groups))]
    orders = [o for o in orders if first is None or o[0] == first]
    if not orders:
        return None
    best = min(orders, key=cost)
    saved = size * min(ranks[m] for m in groups[0])
    return best if cost(best) <= cost(_cheapest_order(shape, ranks, sketch, first)) + saved else None


def _step_cost(size: int, I_n: int, r: int, first_sketched: bool) -> int:
    """Multiply-adds of one ST-HOSVD step on a tensor of ``size`` entries: the factor (the Gram of the smaller
    side of the unfolding, ``min(I_n, size / I_n) * size``; a sketched first step: its three passes of about
    ``r + 10`` columns instead) and the projection (``r * size``)."""
    factor = 2 * (r + 10) * size if first_sketched else min(I_n, size // max(I_n, 1)) * size
    return factor + r * size


def _cheapest_order(shape: Sequence[int], ranks: Sequence[int], sketch: bool = False,
                    first: int | None = None) -> list[int]:
    """The mode order of ST-HOSVD with the fewest modeled multiply-adds (:func:`_step_cost` summed over the
    steps, each on the tensor the earlier steps left); the first such order in lexicographic order, so equal
    modes keep their index order. Exact up to 8 modes; greedy (the cheapest next step) beyond.

    The first step works on the whole tensor and dominates: its Gram costs ``I_n |X|``, so the shortest mode
    tends to go first, not the one that shrinks the tensor most (320x240x160, ranks 10: 160 first is 1.8x
    fewer multiply-adds than 320 first, and measured 72 against 83 ms). ``first``: the mode that must go first
    (a streamed tensor's).

    The size a step works on depends on the set of modes done before it, not on their order, so the exact
    search runs over those sets (``2^N N`` step costs, cached per shape and ranks) instead of the ``N!``
    orders: on an 8-way tensor 0.37 s of every HOOI and ST-HOSVD call (the orders, twice or more a call) became
    about a millisecond, the same order."""
    return list(_cheapest_order_cached(tuple(int(s) for s in shape), tuple(int(r) for r in ranks), bool(sketch),
                                       None if first is None else int(first)))


@functools.lru_cache(maxsize=256)
def _cheapest_order_cached(shape: tuple[int, ...], ranks: tuple[int, ...], sketch: bool,
                           first: int | None) -> tuple[int, ...]:
    N = len(shape)
    full = math.prod(shape)

    def size_after(done: int) -> int:  # the tensor's size once the modes in the bit set ``done`` are projected
        size = full
        for m in range(N):
            if done >> m & 1:
                size = size // shape[m] * ranks[m]
        return size

    def step(done: int, n: int) -> int:
        return _step_cost(size_after(done), shape[n], ranks[n], sketch and done == 0)

    if N > 8:  # greedy: the cheapest next step
        seq: list[int] = [] if first is None else [first]
        done = sum(1 << m for m in seq)
        while len(seq) < N:
            n = min((m for m in range(N) if not done >> m & 1), key=lambda m: step(done, m))
            seq.append(n)
            done |= 1 << n
        return tuple(seq)
    # rest[S]: the least cost of the steps left once the modes in S are done (every mode a step of its own)
    every = (1 << N) - 1
    rest = [0] * (1 << N)
    for done in range(every - 1, -1, -1):
        rest[done] = min(step(done, n) + rest[done | 1 << n] for n in range(N) if not done >> n & 1)
    # the lexicographically first optimal order: at each step the lowest mode that keeps the least total
    seq = []
    done = 0
    while done != every:
        allowed = [first] if not seq and first is not None else [n for n in range(N) if not done >> n & 1]
        target = min(step(done, n) + rest[done | 1 << n] for n in allowed)
        n = next(n for n in allowed if step(done, n) + rest[done | 1 << n] == target)
        seq.append(n)
        done |= 1 << n
    return tuple(seq)


def _met(T: TuckerTensor, target: float | None, name: str) -> TuckerTensor:
    """``T``, with a ``RuntimeWarning`` where a ``max_error`` choice did not meet its target: at full ranks the
    error left is the dtype's rounding (float32 at max_error=1e-9 gave 1.5e-7 with no word)."""
    if target is not None and 1.0 - T.fit > 1.001 * target:  # (not on rounding at the target itself)
        import warnings

        warnings.warn(f"{name}: max_error={target:g} was not met: the relative error at ranks {T.ranks} is "
                      f"{1.0 - T.fit:.3g}, the rounding of {T.core.dtype} (ask for a larger max_error, or compute in "
                      "float64)", RuntimeWarning, stacklevel=3)
    return T


def _check_order(order: Any, N: int) -> list[int]:
    from tuckerkit._validation import check_mode, int_sequence

    seq = [check_mode(m, N, "order")
           for m in int_sequence(order, "order", "'auto' or a permutation of the modes (a sequence of ints)")]
    if sorted(seq) != list(range(N)):
        raise ValueError(f"order={seq} is not a permutation of the modes 0..{N - 1}")
    return seq


def _sketch_sizes(sizes: list[int], k: int) -> list[int]:
    """Columns of each mode's Gaussian test matrix: products at least ``k`` (as even as the sizes allow)."""
    ks = [1] * len(sizes)
    while math.prod(ks) < k and any(ks[i] < sizes[i] for i in range(len(sizes))):
        i = min((j for j in range(len(sizes)) if ks[j] < sizes[j]), key=lambda j: ks[j])
        ks[i] += 1
    return ks


def _sketched_step(call: Call, X: Any, n: int, r: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """The mode-``n`` factor by a randomized range finder, and ``X x_n U^T``: two passes over ``X``."""
    xp = X.xp
    others = [m for m in range(X.ndim) if m != n]
    k = min(X.shape[n], r + 10)
    ks = _sketch_sizes([X.shape[m] for m in others], k)
    omegas = {m: call.like(rng.standard_normal((X.shape[m], km))) for m, km in zip(others, ks, strict=True)}
    Z = X.multi_ttm(omegas, transpose=True, policy=call.policy)
    Zn = xp.moveaxis(Z, n, 0).reshape(X.shape[n], -1)
    Q, _ = xp.linalg.qr(Zn.astype(xp.complex128 if X.dtype.kind == "c" else xp.float64))
    Q = xp.ascontiguousarray(Q[:, :k].astype(X.dtype))
    B = as_operand(X.ttm(Q, n, transpose=True, policy=call.policy))
    V, _ = B.leading_subspace(n, r, policy=call.policy)  # the exact leading subspace of the (small) projection
    U = sign_fix(Q @ xp.ascontiguousarray(V)).astype(X.dtype, copy=False)
    return U, B.ttm(xp.ascontiguousarray(Q.conj().T @ U), n, transpose=True, policy=call.policy)  # X x_n U^H


def _random_orthonormal(rng: np.random.Generator, n: int, r: int, dtype) -> Any:
    Q, _ = np.linalg.qr(rng.standard_normal((n, r)))
    return Q.astype(dtype)


def hooi(
    X: Any,
    ranks: Sequence[int] | int,
    *,
    init: Any = "st_hosvd",
    tol: float = 1e-8,
    max_iter: int = 100,
    svd: str = "exact",
    random_state: Any = None,
    fixed_factors: Sequence[int] = (),
    callback: Callable[[IterationState], bool | None] | None = None,
    verbose: bool = False,
    memory_limit: Any = None,
    device: Any = None,
    mask: Any = None,
) -> TuckerTensor:
    """Tucker decomposition by higher-order orthogonal iteration (HOOI).

    Each factor is the leading left singular subspace of the tensor projected on all other factors
    (:func:`~tuckerkit.engine.ttmc_sweep`), from the I_n x I_n Gram (eigh) or the SVD of the small
    unfolding, whichever is cheaper. For a dense tensor partial projections are shared across modes (a
    dimension tree): two full passes over ``X`` per iteration for any order. A sparse tensor is projected
    by a compiled CSF kernel per mode (``ttmc``), never densified. The fit comes from the core,
    ``1 - sqrt(||X||^2 - ||G||^2) / ||X||``, never from a reconstruction.

    Parameters
    ----------
    X : array, COOTensor or CSFTensor, shape (I_0, ..., I_{N-1})
        float32 and float64; complex64 and complex128 for a dense array in memory (projections by the
        conjugate transposes ``U_n^H``, Hermitian Grams, ``|x|^2`` in the fit).
    ranks : sequence of int, or int
        A mode of full rank (``R_n = I_n``) is left out of the sweeps of a dense tensor in memory (its factor
        only rotates the other unfoldings, whose subspaces and the fit do not change) and gets its factor once
        at the end, from the core, as a sweep would (the same model: (100000, 10, 10) at rank 10 122 -> 81 ms an
        iteration); ``callback`` sees an identity factor for it meanwhile.
    init : {"st_hosvd", "st_hosvd_sketch", "hosvd", "random"}, a Tucker model or the factor matrices; default "st_hosvd"
        ``"st_hosvd"`` (and ``"st_hosvd_sketch"``) on a sparse tensor means a sketched HOSVD, as ST-HOSVD
        would densify the projected tensor: each factor from the leading left singular vectors of the sketch
        ``X_(n) (G kr ... kr G)``, one MTTKRP with Gaussian factors of ``R_n + 10`` columns (the randomized
        range finder with a Khatri-Rao test matrix; the draws from ``random_state``, None: a fixed seed);
        ``"hosvd"`` there is the exact start (ARPACK on the sparse unfolding). Measured (rank 8, whole
        default calls, 2-core AVX2): a planted sparse low-rank tensor of 2.7M nonzeros 0.17-0.19 s against
        1.5-1.7 s from ARPACK, the same iterations and fit; the unstructured skew3d / unif3d / skew4d at 10
        iterations 3.5-4.3 / 3.5-4.7 / 10.6-11.1 s against 9.0 / 16.4-18.2 / 13.5-14.0 s, fits 0.04 % below
        the ARPACK start's on skew3d and skew4d, above it on unif3d (``docs/guide/sparse.md``). On a streamed
        tensor (``memory_limit``, Dask) it is ST-HOSVD with ``sketch=True`` when the sketch's projection fits
        the limit (two cheap passes instead of a Gram pass; the iterations correct the approximation).
        ``"st_hosvd_sketch"``: ST-HOSVD with ``sketch=True`` on any dense tensor (a sparse one: the sketched
        HOSVD above; a streamed one whose sketch's projection does not fit: plain ST-HOSVD).
        A model: a :class:`TuckerTensor`, TensorLy's ``TuckerTensor`` or a pyttb ``ttensor`` with the
        tensor's shape and ``ranks``. Factors: a list or tuple of one ``(I_n, R_n)`` matrix per mode, or a
        ``(core, factors)`` pair (TensorLy's ``init=``); the core is not needed and not used (the first
        update reads only the factors of the other modes).
        The default, measured as the time of a whole call (``tk.hooi(X, r, init=name)``, tol 1e-8;
        ``benchmarks/tucker.py``; planted tensors 200^3, 320x240x160 and 60^4 at 1 % and 30 % noise,
        interleaved repeats, seven runs, 2026-11): every start ends at the same fit (8 digits); HOSVD takes
        1.6-3.3x as long as ST-HOSVD (a Gram of the full tensor per mode); ``"st_hosvd_sketch"`` takes
        0.56-1.49x as long as plain ST-HOSVD (two cheap passes instead of a Gram of the full tensor, but its
        start is never converged: at 1 % noise it needs two iterations where ST-HOSVD's start needs one, and
        on 60^4 it is the slower start). On tensors with no low-rank structure (Gaussian), where 100 iterations do not
        converge, plain ST-HOSVD ends with a fit up to 3 % higher. ``"st_hosvd"`` is therefore the
        safe default; streamed tensors, where a Gram pass is dearest, start from the sketch.
        On a float64 numpy array the start's first Gram (the one of the whole tensor, made on entry, which
        also gives ``||X||``) is formed from float32 products
        (:func:`~tuckerkit.engine._gram.start_gram`; ``||X||`` and every later step stay float64): the
        start's factors differ from :func:`st_hosvd`'s by about float32's rounding, which the iterations
        remove (the start's fit, against which the first iteration is compared, comes from its core, exactly).
        200^3 at 1 % noise: the Gram 23.9 -> 17.6 ms, the whole call 44.5 -> 39.5 ms, the same iterations
        and fit to every printed digit (planted 200^3 at 30 % noise and 320x240x160: the same iterations and
        fit to 10 digits; a Gaussian 100^3, 100 iterations without converging: the fits 1e-10 apart). A
        middle mode (the first step of a 4-way start) is summed over slabs packed in float32: 60^4 0.84x the
        time of the exact Gram's call, 30^5 0.65x, the same iterations and fits. A magnitude outside
        float32's range takes the exact Gram. On a CPU with AVX2 (256-bit vectors) a last mode's Gram (the
        first step of a C-ordered 3-way start) runs on a float32 tile kernel of our own instead of SSYRK
        (:func:`~tuckerkit.engine._gram._start_gram_tiles`): the whole call 0.82-0.88x the time on 200^3 and
        0.80-0.86x on 300^3 (interleaved), the same iterations and fits to 1e-14.
    tol : float, default 1e-8
        The convergence tolerance (TensorLy's and scikit-learn's ``tol``; pyttb's ``stoptol``): stop when
        the fit changes by less than ``tol`` between iterations, or (``tol > 0``) when it decreases, which in
        exact arithmetic it never does with exact factor steps: the change is then rounding noise (float32);
        with ``svd="randomized"`` a decrease is not a stop (randomized steps need not ascend). The ST-HOSVD start
        (``"st_hosvd"``, and its sketch on streamed tensors) has a fit of its own, from its core as each
        iteration's: the first iteration is compared with it, so a start that is already a fixed point costs
        one iteration instead of two (200^3, rank 10, 1 % noise: the whole default call 72 -> 54 ms). Other
        starts (``"hosvd"``, ``"random"``, given factors) have none: their first change is infinite.
        ``tol=0`` runs exactly ``max_iter`` iterations. (The error target that chooses ranks is ``max_error`` of
        :func:`st_hosvd` and :func:`hosvd`.)
    max_iter : int, default 100
    svd : {"exact", "randomized"}, default "exact"
        How each factor step finds the leading left singular subspace of the projected tensor ``Y_(n)``
        (TensorLy's ``svd="randomized_svd"`` maps to ``"randomized"``). ``"exact"``: the eigendecomposition of
        the I_n x I_n Gram (or of the P x P one of a small unfolding), LAPACK. ``"randomized"``: a randomized
        range finder (Halko, Martinsson and Tropp 2011): ``R_n + 10`` Gaussian test vectors (oversampling 10),
        two power iterations each re-orthonormalized by a thin QR, then the exact leading subspace of the
        small projection; four contractions of ``Y`` with ``R_n + 10`` columns instead of its Gram and an
        I_n x I_n eigendecomposition. Its subspace equals the exact one to rounding when ``Y_(n)`` has rank
        ``R_n`` (a planted model) and is close when the spectrum decays; on a noisy tensor the error after
        convergence is HOOI's own (the same fixed point; the tests hold it to 1e4 eps). The draws come from
        ``random_state`` (None: a fixed seed), so a call repeats its bits. Applies to every factor step on a
        dense array (a sparse or streamed input's initialization keeps its own route).
        When to choose it: its flops are ``12 (R_n + 10) / I_n`` of the Gram's, in six memory-bound passes
        where the Gram is one compute-bound SYRK, so it pays only on modes much longer than the rank.
        Measured (float64, rank 10, a shared 2-core machine, medians of interleaved repeats, exact vs
        randomized): on 200^3 a HOOI iteration 137 vs 131 ms (its factor steps work on the 200 x 100
        projections, 6.0 vs 6.3 ms each: a few % of the iteration either way) and HOSVD 1.01 vs 1.46 s; on
        300^3 an iteration 333 vs 321 ms and HOSVD 2.48 vs 3.68 s; on 2000 x 100 x 100 HOSVD 4.53 vs 3.17 s.
        Keep ``"exact"`` unless a mode is long (I_n well above ``12 (R_n + 10)``) and the Gram dominates.
    random_state : None, int or numpy Generator
        Used by ``init="random"`` and ``svd="randomized"`` (None: a random start from fresh entropy; the
        randomized SVD's draws from a fixed seed).
    fixed_factors : sequence of int, default ()
        Modes whose factor matrix stays as initialized (TensorLy's ``fixed_factors``): give them through
        ``init``; the core is the projection on every factor, fixed ones included.
    callback : callable, optional
        ``callback(state)`` after each iteration (:class:`IterationState`); returning True stops.
    verbose : bool, default False
        Print one line per iteration (fit, change, seconds) and a last line saying why it stopped on
        standard error, as scikit-learn's ``verbose`` does; never changes the computation. The same lines
        always go to the ``tuckerkit.decomposition`` logger at DEBUG level.
    memory_limit : int or str, optional
        Bytes (or ``"4GB"``) the computation may hold. A dense tensor larger than that (typically a
        memory-mapped ``.npy``) is read in slabs along mode 0: two streamed passes per iteration, with the
        next slab read while the current one is projected (:class:`~tuckerkit.engine.SlabTensor`).
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where ``X`` lives (a cupy array stays on its GPU). A host input with
        ``device="cuda"`` is copied to the GPU once and the result comes back as numpy arrays
        (``result.to("cuda")`` keeps a copy on the GPU).
        On a GPU every product, Gram and eigendecomposition stays on the device; the fit is the one value
        copied back per iteration.
    mask : boolean array of X's shape, optional
        Missing data: True where ``X`` is observed (other entries may hold anything, NaN included). Fitted by
        EM imputation (the missing entries take the model's values before each projection sweep); ``fit`` is
        then the fit on the observed entries. The default start is then the sketched ST-HOSVD of the filled
        tensor (as fast to the same fit, measured; see ``_missing.masked_hooi``). Needs a dense ``X``;
        combines with ``fixed_factors``.

    Returns
    -------
    TuckerTensor
        With ``n_iter``, ``converged``, ``fit_history`` and ``passes_per_iteration``.

    Warns
    -----
    ConvergenceWarning
        When ``max_iter`` is reached before the fit settles.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> X = tk.multi_ttm(rng.standard_normal((3, 3, 3)), [rng.standard_normal((20, 3)) for _ in range(3)])
    >>> T = tk.hooi(X, [3, 3, 3])
    >>> T.converged, round(T.fit, 6)
    (True, 1.0)
    """
    if mask is not None:  # missing data: the same iterations with an E step after each sweep (_missing.py)
        from tuckerkit.decomposition._missing import masked_hooi

        if svd != "exact":
            raise ValueError(f"mask= runs the exact factor step; received svd={describe(svd)} (expected 'exact')")
        return masked_hooi(X, ranks, mask, init=init, tol=tol, max_iter=max_iter, random_state=random_state,
                           callback=callback, verbose=verbose, memory_limit=memory_limit, device=device,
                           fixed_factors=fixed_factors)
    # the ST-HOSVD start's first Gram made on entry, in place of the norm's pass
    gram = _entry_gram(ranks, svd=svd) if isinstance(init, str) and init == "st_hosvd" else None
    with decomposition_call(X, device=device, memory_limit=memory_limit, complex_ok=True, first_gram=gram,
                            rough_first_gram=True) as call:
        return call.result(_hooi(call, ranks, init, tol, max_iter, random_state, callback, verbose, fixed_factors,
                                 svd))


def _check_fixed_orthonormal(U: Any, n: int) -> None:
    """A fixed factor must have orthonormal columns (to ``sqrt(eps)`` of its dtype): HOOI keeps it as given and
    projects the core on it, the best core only for orthonormal factors (a random 9 x 3 factor kept as given had
    returned fit -2.76, worse than the zero model, with no message)."""
    from tuckerkit.decomposition._results import _adjoint

    h = np.asarray(to_host(U))
    if h.shape[1] == 0:
        return
    err = float(np.max(np.abs(_adjoint(h) @ h - np.eye(h.shape[1]))))
    if not err <= math.sqrt(np.finfo(h.dtype).eps):
        raise ValueError(f"fixed_factors: init's factor {n} does not have orthonormal columns (max |U^H U - I| = "
                         f"{err:.3g}); HOOI keeps a fixed factor as given and projects the core on it, which is the "
                         f"best core only for orthonormal ones: pass numpy.linalg.qr(U)[0] (the same column space)")


def _orthonormal_columns(U: np.ndarray) -> bool:
    """Whether ``U``'s columns are orthonormal to a few hundred eps of its dtype."""
    G = U.conj().T @ U
    return bool(np.abs(G - np.eye(G.shape[0])).max() <= 256 * np.finfo(U.dtype).eps * max(1, U.shape[0]))


def _full_modes(X: Any, ranks: Sequence[int], fixed: Any, em: Any) -> set[int]:
    """The modes HOOI leaves out of its sweeps: those of full rank (``R_n = I_n``), not fixed, of a dense host
    tensor without missing data, where some other mode is not of full rank. Such a mode's factor is square and
    orthogonal, so projecting on it only rotates the other modes' unfoldings, whose leading subspaces (every
    other factor) and the fit do not change: the sweeps leave it unprojected and un-updated (an identity
    factor), and its factor is made once at the end, from the core, as a sweep would have made it (the core's
    leading left singular vectors, sign-fixed; the core rotated to match). A (100000, 10, 10) tensor at rank 10
    read X three times an iteration (two of them to project on 10 x 10 rotations; 122 ms per iteration)."""
    from tuckerkit.engine import DenseTensor

    if em is not None or not isinstance(X, DenseTensor) or type(X.data) is not np.ndarray:
        return set()
    full = {n for n, (r, size) in enumerate(zip(ranks, X.shape, strict=True)) if r == size and n not in fixed}
    return full if len(full) < X.ndim else set()


def _small_sweep(X: Any, ranks: Sequence[int], fixed: Any, em: Any, svd: str) -> Any:
    """The compiled sweep's set-up (:class:`~tuckerkit.engine._small_hooi.SmallSweep`) where HOOI's sweeps of ``X``
    take its compiled factor steps: a host float32 / float64 3- or 4-way tensor in C or F order within
    ``SMALL_SWEEP_MAX_ELEMS`` and ``SMALL_SWEEP_MAX_WORK`` (its size times the largest rank's fourth power), the
    exact SVD, and every mode's factor step on a compiled route
    (:func:`~tuckerkit.engine._small_hooi.small_sweep_routes`); fixed factors stay as given (their modes' steps
    skipped); missing data only in float64 (the E step refills the operand's array in place, which the sweep
    reads through its views; a float32 tensor's float64 copy would not see it); else None."""
    from tuckerkit.engine import DenseTensor

    if svd != "exact" or not isinstance(X, DenseTensor) or not _SMALL_SWEEPS:
        return None
    data = X.data
    if type(data) not in (np.ndarray, np.memmap) or data.dtype.char not in "fd" or not (
            data.flags.c_contiguous or data.flags.f_contiguous) or (em is not None and data.dtype != np.float64):
        return None
    from tuckerkit.engine._direct import direct_applies
    from tuckerkit.engine._small_hooi import SmallSweep, small_sweep_routes

    if not direct_applies(data, max(ranks), projections=True):  # (a variant of the direct route: within its bounds)
        return None
    rk = tuple(int(r) for r in ranks)
    routes = small_sweep_routes(data.shape, rk)
    return None if routes is None else SmallSweep(data, rk, routes)


#: whether HOOI takes the compiled sweep of small 3- and 4-way tensors where it applies (:func:`_small_sweep`; tests
#: turn it off to compare with the direct route)
_SMALL_SWEEPS = True


def _hooi(call: Call, ranks: Any, init: Any, tol: Any, max_iter: Any, random_state: Any, callback: Any,
          verbose: bool, fixed_factors: Any = (), svd: Any = "exact", em: Any = None) -> TuckerTensor:
    """HOOI on the call's operand; ``em``: missing data, the E step run after each sweep
    (:class:`~tuckerkit.decomposition._missing.EStep`, which refills the operand's missing entries)."""
    X, policy = call.X, call.policy
    svd = check_svd(svd)
    ranks = check_ranks(ranks, X.shape)
    fixed = check_fixed_modes(fixed_factors, X.ndim, "fixed_factors")
    tol = check_nonneg(tol, "tol")
    max_iter = check_max_iter(max_iter)
    # the randomized SVD's and the sketch's draws: seeded (None: 0); a random start's: from ``random_state``, or
    # (None) fresh entropy, its Generator made only for that start (50 us a call otherwise)
    srng = check_random_state(0 if random_state is None else random_state)
    check_callback(callback)
    N = X.ndim
    init = check_init(init, X.shape, ranks, kind="tucker",
                      methods=("st_hosvd", "st_hosvd_sketch", "hosvd", "random"), dtype=X.dtype)
    start_fit = None
    partials: dict[frozenset[int], Any] = {}  # the start's projections that the first sweep takes
    small = _small_sweep(X, ranks, fixed, em, svd)  # a small 3- or 4-way tensor: compiled factor steps
    if not isinstance(init, str):
        factors = [call.like(U).astype(X.dtype, copy=False) for U in init[1]]
        for n in sorted(fixed):
            _check_fixed_orthonormal(factors[n], n)
        if em is None and init[0] is None:  # (only the factors' subspaces count then)
            factors = scaled_start(factors, keep=fixed)
    else:
        how = init
        if init in ("st_hosvd", "st_hosvd_sketch"):
            pref = X.preferred_init(ranks)  # sparse: the Khatri-Rao sketch; streamed: the sketch when it fits
            how = (pref if init == "st_hosvd" or pref in ("hosvd", "kr_sketch") or (X.streamed and pref == "st_hosvd")
                   else init)
        if how == "kr_sketch":  # (a sparse tensor: each factor from a sketch of its unfolding, one MTTKRP each)
            factors = [call.like(X.sketched_subspace(n, ranks[n], srng, policy)) for n in range(N)]
            X.release_work_buffers()  # (the MTTKRPs' buffers: not kept on the tensor after the call)
        elif how == "hosvd":
            factors = [_subspace(call, X, n, ranks[n], svd, srng)[0].astype(X.dtype, copy=False)
                       for n in range(N)]
        elif how == "random":
            rng = srng if random_state is not None else check_random_state(None)
            factors = [call.like(_random_orthonormal(rng, X.shape[n], ranks[n], X.dtype)) for n in range(N)]
        else:
            sketch = how == "st_hosvd_sketch"
            # (in the order "auto" chooses: one whose projections the first sweep takes when the cost allows;
            # not with the E step, which changes X after the start)
            start = _st_hosvd(call, ranks, None, "auto", sketch, srng, svd=svd,
                              keep=partials if em is None and not fixed and small is None
                              and not _full_modes(X, ranks, fixed, em) else None, rough=em is None)
            factors = list(start.factors)
            if em is None:  # the start's fit from its core, as each iteration's below (scale: a power of two)
                start_fit = _fit(call.norm, frobenius_norm(start.core) * call.scale)
                if call.refines_fit(start_fit):  # (near 1: the residual's, as each iteration's below)
                    start_fit = call.residual_fit(TuckerResidual(call.X.xp, start.core * X.dtype.type(call.scale),
                                                                 start.factors))
    if em is not None and not isinstance(init, str) and init[0] is not None:  # the start's values where missing
        em.fill_start(TuckerModel(call.like(init[0]) * X.dtype.type(call.scale), factors))
    normX = call.norm
    mon = Monitor("hooi" if em is None else "hooi(mask)", tol, max_iter, callback, verbose, start_fit)
    core = None
    sweep = None
    it = 0
    # the projection ST-HOSVD's last step (mode 0) took its factor from: the first sweep's first update, which
    # would compute the same factor again from it
    done = partials.get(frozenset({0}))
    # (each mode's warm-started eigensolver skipped after refusals: a spectrum without a gap refuses every time)
    backoffs = [SubspaceBackoff() for _ in range(N)]
    # full-rank modes (R_n = I_n) sit out of the sweep (see _full_modes); their factors come from the core
    full = _full_modes(X, ranks, fixed, em)
    if full and not isinstance(init, str):  # (a given start's full-rank factor that is not orthogonal is no
        # rotation: the first sweep's projections on it shape the other factors, as pyttb's and TensorLy's do; a
        # random start at ranks [2, 3, 8] of 6 x 7 x 8 ended at another fit than theirs)
        full = {n for n in full if _orthonormal_columns(np.asarray(to_host(factors[n])))}
    swept = [None if n in full else U for n, U in enumerate(factors)] if full else factors
    eye = {n: np.eye(X.shape[n], dtype=X.dtype) for n in full}
    # a dense tensor's sweeps (3 to 8 modes) may leave projections for the next (the multi-sweep dimension tree:
    # engine/_sweeps.py, multi_sweep_applies); not with missing data, whose E step rewrites X between sweeps
    carry = {"carry": CarriedPartial()} if em is None and carries_partials(X) else {}
    passes = 0
    reads0 = call.residual_reads  # (the start's residual fit is not an iteration's)
    for it in range(1, max_iter + 1):
        if small is not None:
            factors[:], core, keep_on = small.sweep(factors, backoffs, policy, fixed)
            sweep = small.record
            passes += sweep.passes
            if not keep_on:  # (every certified step refused: the direct route from the next sweep on)
                small = None
            # (the E step: the fit on the observed entries, the missing ones refilled for the next sweep)
            fit = _fit(normX, frobenius_norm(core)) if em is None else em.step(TuckerModel(core, factors))
            if em is None and call.refines_fit(fit):  # (as below)
                fit = call.residual_fit(TuckerResidual(call.X.xp, core, factors))
            if mon.step(it, fit, factors, may_decrease=svd == "randomized"):
                break
            continue
        last: dict[str, Any] = {}

        def update(n: int, Y: Any, last=last, done=done) -> None:
            last["n"], last["Y"] = n, Y
            if n in fixed or Y is done:
                return
            if svd == "exact" and type(Y) is np.ndarray and Y.dtype.char in "fdFD":
                # (a host projection: the call that _subspace -> Call.leading_subspace makes for it, with the same
                # arguments, without wrapping it as an operand first: about 10 us a step on a small tensor)
                U, _ = leading_left_singular(Y, n, ranks[n], policy, start=factors[n], backoff=backoffs[n])
            else:
                U, _ = _subspace(call, as_operand(Y), n, ranks[n], svd, srng, start=factors[n],
                                 backoff=backoffs[n])
            factors[n] = swept[n] = U.astype(X.dtype, copy=False)

        sweep = X.ttmc_sweep(swept, update, policy=policy, **({"partials": partials} if partials else {}), **carry)
        passes += sweep.passes
        done = None
        partials.clear()
        core = operand_ttm(last["Y"], factors[last["n"]], last["n"], policy)
        # the E step (missing data): the fit on the observed entries, the missing ones refilled for the next sweep
        fit = _fit(normX, frobenius_norm(core)) if em is None else em.step(TuckerModel(core, factors))
        model_factors = [eye[n] if n in full else U for n, U in enumerate(factors)] if full else factors
        if em is None and call.refines_fit(fit):  # (near 1 the fit from the core's norm is rounding: float32's was
            # 1.2e-4 off an error of 9.9e-6, its noise "decreased" and stopped the run; the residual's, in float64,
            # one more read of X in that regime only, steers the stop, as in CP-ALS)
            fit = call.residual_fit(TuckerResidual(call.X.xp, core, model_factors))
        if mon.step(it, fit, model_factors,
                    may_decrease=svd == "randomized"):  # (randomized factor steps need not ascend: no stop there)
            break
    passes += call.residual_reads - reads0  # (the residual fits that steered the iterations: a read of X each)
    for n in sorted(full):  # each full-rank mode's factor: the core's leading left singular vectors, as a sweep
        factors[n], _ = leading_left_singular(to_host(core), n, X.shape[n], policy)  # would have made them
        factors[n] = call.like(factors[n]).astype(X.dtype, copy=False)
        core = operand_ttm(core, factors[n], n, policy)
    history = tuple(mon.history) if em is not None or core is None else \
        call.with_residual_fit(mon.history, lambda: TuckerResidual(call.X.xp, core, factors))
    mon.finish(history[-1] if history else None)  # (the closing line with the fit the result reports)
    return TuckerTensor(call.unscale(core), tuple(factors), it, mon.converged, history,
                        sweep.plans if sweep is not None else (), passes_per_iteration=mean_passes(passes, it))
