"""Non-negative CP and Tucker: hierarchical ALS (HALS, the default) and multiplicative updates (MU).

Both run on the operand protocol unchanged: CP reads ``X`` only through its MTTKRP sweep (dense dimension
tree, sparse CSF kernels), Tucker through its projection (``ttmc``) sweep; every other product is on the
small factors, Grams and core. The fit comes from the Grams and the last MTTKRP / projection, never from a
reconstruction. HALS updates one factor column (one row of ``U^T``) at a time by its exact non-negative
minimizer with the others fixed, so the objective never increases and entries reach exact zeros; MU scales
each entry by a ratio of non-negative terms (Lee and Seung) and keeps strictly positive entries positive.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tuckerkit._validation import (
    check_callback,
    check_choice,
    check_cp_rank,
    check_init,
    check_max_iter,
    check_nonneg,
    check_random_state,
    check_ranks,
)
from tuckerkit.decomposition._entry import Call, check_fixed_modes, decomposition_call, scaled_start
from tuckerkit.decomposition._linalg import spd_solve
from tuckerkit.decomposition._monitor import IterationState, Monitor
from tuckerkit.decomposition._results import CPTensor, TuckerTensor

#: inner HALS sweeps over the columns per factor update (TensorLy's HALS runs the same number): the columns
#: interact through the R x R Gram, so a few sweeps get most of the subproblem's decrease for I_n R^2 flops
#: each, small next to the MTTKRP that set the subproblem up
INNER_SWEEPS = 5
#: ... stopping earlier once a sweep's squared move falls below this fraction of the first sweep's
SWEEP_STOP = 1e-8
#: projected-gradient (FISTA) steps of the non-negative Tucker core update, at most
CORE_STEPS = 100
#: ... and stops earlier once a step's squared change falls below this fraction of the first step's
CORE_STOP = 1e-8
#: the largest core (entries) whose steps run compiled on the host (:func:`_hals_kernels.core_fista`): each
#: NumPy step is N ``tensordot`` calls and a few elementwise ones, ~0.3 ms of call costs on a 5^3 core, so 100
#: steps took 80 % of an iteration on 40^3 (19 ms against TensorLy's 4.3); compiled, a step costs its
#: ``S * sum(R_n)`` multiply-adds. Beyond, the steps' GEMM-sized products go to NumPy's BLAS. Measured (whole
#: calls, separate processes, two rounds, the same fits to 8 digits): an iteration on 40^3 / 60^3 at rank 5
#: 16 / 11-18 ms -> 2.3 / 2.9 ms, on 100^3 / 200^3 at rank 10 15-18 / 34-35 ms -> 12 / 21-23 ms
COMPILED_CORE_MAX = 1 << 15
METHODS = ("hals", "mu")


def _check_nonneg_start(factors: Sequence[Any], what: str) -> None:
    for n, U in enumerate(factors):
        if U is not None and float(np.min(np.asarray(_host(U)))) < 0:
            raise ValueError(f"{what} {n} has negative entries; a non-negative decomposition needs init >= 0")


def _host(a: Any) -> Any:
    from tuckerkit.backend import to_host

    return to_host(a)


def hals_rows(Ut: Any, UtM: Any, V: Any, sweeps: int = INNER_SWEEPS, stop: float = SWEEP_STOP) -> Any:
    """Minimize ``||M - U V||``-type least squares over ``U >= 0`` by HALS on ``Ut = U^T`` (R x I, updated in
    place row by row): row ``k`` becomes ``max(0, Ut[k] + (UtM[k] - V[k] @ Ut) / V[k, k])``, its exact
    minimizer with the other rows fixed. A row whose ``V[k, k]`` is zero (a dead component) is left as it is.
    Stops after ``sweeps`` sweeps, or when a sweep moves ``Ut`` by at most ``stop`` (1e-8) times the first sweep's
    move (a negative ``stop``: only a sweep that moves nothing, so that each column's result is its own, whatever
    columns run beside it).

    On the host every sweep runs in one compiled call (:mod:`._hals_kernels`: R x I x R multiply-adds a sweep,
    where a loop of NumPy calls per row cost ~0.1 ms a sweep at R = 10); on a GPU the rows are array calls.
    """
    xp = _xp(Ut)
    d = xp.diagonal(V)
    inv = xp.where(d > 0, 1 / xp.where(d > 0, d, 1), 0).astype(Ut.dtype)  # a dead component stays put
    if xp is np:
        from tuckerkit.decomposition._hals_kernels import hals_sweeps

        dt = Ut.dtype
        hals_sweeps(Ut, np.ascontiguousarray(UtM, dtype=dt), np.ascontiguousarray(V, dtype=dt), inv, int(sweeps),
                    float(stop), dt.type(0))
        return Ut
    R = Ut.shape[0]
    for _ in range(sweeps):  # the early stop would read a value back: on a GPU every sweep runs
        for k in range(R):
            Ut[k] = xp.maximum(Ut[k] + (UtM[k] - V[k] @ Ut) * inv[k], 0)
    return Ut


def _xp(a: Any) -> Any:
    from tuckerkit.backend import array_namespace

    return array_namespace(a)


def _mu(U: Any, M: Any, V: Any) -> Any:
    """One multiplicative update ``U * max(M, eps) / max(U V, eps)`` (eps of the dtype: no division by zero)."""
    xp = _xp(U)
    eps = U.dtype.type(np.finfo(U.dtype).eps)
    return U * (xp.maximum(M, eps) / xp.maximum(U @ V, eps))


# ---------------------------------------------------------------------------------------------------
# non-negative CP
# ---------------------------------------------------------------------------------------------------
def non_negative_cp(
    X: Any,
    rank: int,
    *,
    method: str = "hals",
    init: Any = "svd",
    tol: float = 1e-6,
    max_iter: int = 200,
    random_state: Any = None,
    fixed_modes: Sequence[int] = (),
    nonnegative_modes: Sequence[int] | None = None,
    callback: Callable[[IterationState], bool | None] | None = None,
    verbose: bool = False,
    memory_limit: Any = None,
    device: Any = None,
) -> CPTensor:
    """Non-negative CP decomposition ``X ~ sum_r w_r a_r o b_r o c_r`` with every factor entry ``>= 0``.

    Each iteration computes the MTTKRP of every mode in turn (the same sweep as :func:`cp_als`: dense
    dimension tree, sparse CSF kernels, never a Khatri-Rao product as tall as the unfolding) and updates
    that factor from it and the Hadamard product of the other factors' Grams:

    - ``"hals"`` (hierarchical ALS, Cichocki and Phan; Gillis and Glineur's inner sweeps): each column is
      set to its exact non-negative least-squares minimizer with the others fixed, a few sweeps per mode.
      The objective never increases and entries reach exact zeros.
    - ``"mu"`` (multiplicative updates, Lee and Seung): ``U <- U * M / (U V)``; entries stay positive.

    The fit ``1 - ||X - X_hat|| / ||X||`` comes from the last MTTKRP and the Grams (no reconstruction).

    Parameters
    ----------
    X : array, COOTensor or CSFTensor, shape (I_0, ..., I_{N-1})
        Non-negative data is the usual case; negative entries are allowed (the model stays non-negative).
    rank : int
    method : {"hals", "mu"}, default "hals"
    init : {"svd", "random"}, a CP model, or the factor matrices; default "svd"
        ``"svd"``: absolute values of the leading left singular vectors of each unfolding; ``"random"``:
        uniform [0, 1) entries. Both are scaled so that ``||X_hat|| = ||X||``. A given start (as for
        :func:`cp_als`) must be non-negative and is used as it is.
    tol : float, default 1e-6
        Stop when the fit changes by less than ``tol`` (or decreases, rounding noise); ``tol=0`` runs
        ``max_iter`` iterations.
    max_iter : int, default 200
    random_state : None, int or numpy Generator
        The seed of a random start, and of the columns that pad the SVD start where a rank exceeds a mode's
        size. None: a fixed seed (0), so a default call repeats its bits, except with ``init="random"``
        asked for, which then starts from fresh entropy.
    fixed_modes : sequence of int, default ()
        Modes whose factor stays exactly as given in ``init`` (in ``X``'s dtype; weights given with ``init``
        scale the first free mode); the other factors are returned with unit-norm columns, the scale in ``weights``.
    nonnegative_modes : sequence of int, optional
        The constrained modes (default: all, TensorLy's ``nn_modes``); the others are updated by unconstrained
        least squares (``method="hals"`` only).
    callback : callable, optional
        ``callback(state)`` after each iteration; returning True stops.
    verbose : bool, default False
        One line per iteration on standard error (never changes the computation).
    memory_limit : int or str, optional
        Stream a larger dense tensor in slabs, as :func:`cp_als`.
    device : {None, "cpu", "cuda", "cuda:N"}, default None

    Returns
    -------
    CPTensor
        Unit-norm, non-negative factor columns, the scale in ``weights``.

    Warns
    -----
    ConvergenceWarning
        When ``max_iter`` is reached before the fit settles.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> A, B, C = (rng.random((n, 3)) for n in (10, 11, 12))
    >>> X = np.einsum("ir,jr,kr->ijk", A, B, C)
    >>> cp = tk.non_negative_cp(X, 3, random_state=0, tol=1e-10, max_iter=500)
    >>> round(cp.fit, 3), all(bool((U >= 0).all()) for U in cp.factors)
    (1.0, True)
    """
    with decomposition_call(X, device=device, memory_limit=memory_limit) as call:
        return call.result(_non_negative_cp(call, rank, method, init, tol, max_iter, random_state, callback,
                                            verbose, fixed_modes, nonnegative_modes))


def _start_rng(random_state: Any, init: Any) -> np.random.Generator:
    """The start's Generator: ``random_state``'s; for None a fixed seed (0), so that a default call repeats its
    bits (the SVD start pads a rank beyond a mode's size with random columns), except where ``init="random"``
    is asked for: fresh entropy, as for :func:`~tuckerkit.cp_als`."""
    if random_state is None and isinstance(init, str) and init == "random":
        return check_random_state(None)
    return check_random_state(0 if random_state is None else random_state)


def _nn_cp_start(call: Call, rank: int, init: Any, rng: np.random.Generator, fixed: frozenset[int] = frozenset(),
                 nn: frozenset[int] | None = None) -> tuple[list[Any], Any]:
    """The start's factors, and the weights that stay apart when every mode is fixed (else None)."""
    X = call.X
    xp = X.xp
    nn = frozenset(range(X.ndim)) if nn is None else nn
    init = check_init(init, X.shape, rank, kind="cp", methods=("svd", "random"), dtype=X.dtype, nonzero_from=0)
    if not isinstance(init, str):
        weights0, given = init
        _check_nonneg_start([U for n, U in enumerate(given) if n in nn], "init factor")
        if weights0 is not None and float(np.min(np.asarray(_host(weights0)))) < 0:
            raise ValueError("init's weights have negative entries; a non-negative decomposition needs init >= 0")
        factors = [call.like(U).astype(X.dtype).copy() for U in given]
        scale = call.like(weights0).astype(X.dtype) if weights0 is not None else None
        if call.scale != 1.0:
            scale = (scale if scale is not None else xp.ones(rank, dtype=X.dtype)) * X.dtype.type(call.scale)
        free = [n for n in range(X.ndim) if n not in fixed]
        if scale is not None and free:  # on the first free mode: a fixed factor stays exactly as given
            factors[free[0]] = factors[free[0]] * scale[None, :]
        # (float32 factors of 1e10: the Grams overflowed, a fit of NaN; only such: a rescaled start moves the
        # non-negative updates' rounding, so a start of x300 keeps its own)
        factors = scaled_start(factors, keep=fixed, single=2.0**32)
        return [xp.ascontiguousarray(U) for U in factors], (scale if not free else None)
    if init == "random":
        factors = [call.like(rng.random((X.shape[n], rank))) for n in range(X.ndim)]
    else:
        factors = []
        for n in range(X.ndim):
            k = min(rank, X.shape[n])
            U, _ = X.leading_subspace(n, k, rng=rng, policy=call.policy)
            U = U.astype(X.dtype, copy=False)
            U = xp.abs(U) if n in nn else U
            if rank > k:
                U = xp.concatenate([U, call.like(rng.random((X.shape[n], rank - k)), U.dtype)], axis=1)
            factors.append(xp.ascontiguousarray(U))
    # scale the start to the data: ||X_hat|| = ||X|| (one scalar, spread over the modes)
    V = xp.ones((rank, rank), dtype=xp.float64)
    for U in factors:
        V = V * (U.T @ U).astype(xp.float64)
    norm_hat = math.sqrt(max(float(xp.sum(V)), 0.0))
    if norm_hat > 0 and call.norm > 0:
        s = (call.norm / norm_hat) ** (1.0 / X.ndim)
        factors = [xp.ascontiguousarray(U * U.dtype.type(s)) for U in factors]
    return factors, None


def _non_negative_cp(call: Call, rank: Any, method: Any, init: Any, tol: Any, max_iter: Any, random_state: Any,
                     callback: Any, verbose: bool, fixed_modes: Any = (), nonnegative_modes: Any = None) -> CPTensor:
    X, policy = call.X, call.policy
    rank = check_cp_rank(rank)
    method = check_choice(method, "method", METHODS)
    fixed = check_fixed_modes(fixed_modes, X.ndim)
    nn = frozenset(range(X.ndim)) if nonnegative_modes is None else check_fixed_modes(
        nonnegative_modes, X.ndim, "nonnegative_modes")
    if method == "mu" and len(nn) < X.ndim:
        raise ValueError("nonnegative_modes leaves modes unconstrained, which needs method='hals'; "
                         "multiplicative updates keep every entry positive")
    tol = check_nonneg(tol, "tol")
    max_iter = check_max_iter(max_iter)
    rng = _start_rng(random_state, init)
    check_callback(callback)
    from tuckerkit.decomposition._cp import _check_rank_fits, _cp_fit, _fit_grams, _small_cp_sweep

    _check_rank_fits(X, rank)
    factors, apart = _nn_cp_start(call, rank, init, rng, fixed, nn)
    xp, N = X.xp, X.ndim
    grams = [U.T @ U for U in factors]
    ones = xp.ones(rank, dtype=X.dtype)
    mon = Monitor(f"non_negative_cp({method})", tol, max_iter, callback, verbose)
    last: dict[str, Any] = {}

    def update(n: int, M: Any) -> None:
        last["M"], last["n"] = M.astype(X.dtype, copy=False), n
        if n in fixed:
            return
        V = xp.ones((rank, rank), dtype=X.dtype)
        for m in range(N):
            if m != n:
                V *= grams[m]
        M = M.astype(X.dtype, copy=False)
        if n not in nn:  # an unconstrained mode: the plain least-squares update of cp_als
            U = spd_solve(V, M)
        elif method == "hals":
            U = hals_rows(factors[n].T.copy(), xp.ascontiguousarray(M.T), V).T
        else:
            U = _mu(factors[n], M, V)
        factors[n] = xp.ascontiguousarray(U)
        grams[n] = factors[n].T @ factors[n]

    # a small dense host tensor's MTTKRPs by the compiled sweep's tree (_small_cp.py: two BLAS products, each
    # MTTKRP of a two-mode half in one compiled call)
    small = _small_cp_sweep(X, rank) if xp is np and X.dtype.kind == "f" else None
    it, sweep = 0, None
    for it in range(1, max_iter + 1):
        sweep = small.mttkrp_sweep(factors, update) if small is not None else X.mttkrp_sweep(factors, update,
                                                                                            policy=policy)
        fit = _cp_fit(xp, call.norm, last["M"], factors[last["n"]], ones if apart is None else apart,
                      _fit_grams(factors, grams, ones if apart is None else apart, call.norm))
        if call.refines_fit(fit):  # (near 1 the fit from the Grams is rounding: float32's was 5e-5 off, and a
            # "decrease" of that noise stopped the run as converged at 9.05e-4 where 1.83e-4 is reached; the
            # residual's, in float64, one more read of X, steers the stop there)
            from tuckerkit.decomposition._cp import CPResidual

            fit = call.residual_fit(CPResidual(xp, ones if apart is None else apart, factors))
        if mon.step(it, fit, factors):
            break
    release = getattr(X, "release_work_buffers", None)
    if release is not None:  # a sparse tensor's MTTKRP buffers go with the call
        release()
    if apart is not None:  # every mode fixed: the start itself
        weights, unit = apart, factors
    elif len(fixed) == N:  # every mode fixed, the start given as factors alone: they come back as given
        weights, unit = xp.ones(rank, dtype=factors[0].dtype), list(factors)
    elif fixed:  # unit columns on the free modes only: a fixed factor comes back exactly as given
        free = [n for n in range(N) if n not in fixed]
        w_free, unit_free = normalize_columns([factors[n] for n in free])
        unit = list(factors)
        for n, U in zip(free, unit_free, strict=True):
            unit[n] = U
        weights = w_free
    else:
        weights, unit = normalize_columns(factors)
    from tuckerkit.decomposition._cp import CPResidual

    history = call.with_residual_fit(mon.history, lambda: CPResidual(xp, weights, unit))  # (float32 near 1)
    # (all zero, or below the data's rounding: MU's multiplicative updates approach zero without reaching it)
    tiny = float(np.finfo(weights.dtype).eps) * call.norm
    zero = float(xp.sum(xp.abs(weights))) <= tiny
    mon.finish(history[-1], collapsed=zero and call.norm > 0)  # (the closing line: the fit reported, the reason)
    converged = _not_collapsed(f"non_negative_cp({method})", zero, call.norm, mon.converged)
    return CPTensor(call.unscale(weights), tuple(unit), it, converged, history,
                    sweep.plans if sweep is not None else (), passes_per_iteration=sweep.passes if sweep else 0)


def _not_collapsed(name: str, zero: bool, norm: float, converged: bool) -> bool:
    """``converged``, unless the model of a non-zero tensor is all zero: every update from the start drove it
    there (zero-mean data at low ranks: no non-negative part to fit), a fixed point with fit 0.0 that the run had
    reported as converged. Then a :class:`ConvergenceWarning` says so, and False."""
    if not zero or norm == 0:
        return converged
    import warnings

    from tuckerkit.decomposition._entry import caller_stacklevel
    from tuckerkit.decomposition._results import ConvergenceWarning

    warnings.warn(f"{name} ended at an all-zero model (fit 0.0): the updates from this start drove a factor to "
                  "zero; the data may have no non-negative part at these ranks (try init='random' or other ranks)",
                  ConvergenceWarning, stacklevel=caller_stacklevel())
    return False


def normalize_columns(factors: Sequence[Any]) -> tuple[Any, list[Any]]:
    """Unit-norm columns and the product of the norms as weights (a zero column stays zero, weight 0)."""
    xp = _xp(factors[0])
    weights = xp.ones(factors[0].shape[1], dtype=factors[0].dtype)
    out = []
    for U in factors:
        norms = xp.linalg.norm(U, axis=0).astype(U.dtype)
        weights = weights * norms
        out.append(xp.ascontiguousarray(U / xp.where(norms == 0, 1, norms)[None, :]))
    return weights, out


# ---------------------------------------------------------------------------------------------------
# non-negative Tucker
# ---------------------------------------------------------------------------------------------------
def non_negative_tucker(
    X: Any,
    ranks: Sequence[int] | int,
    *,
    method: str = "hals",
    init: Any = "svd",
    tol: float = 1e-6,
    max_iter: int = 200,
    random_state: Any = None,
    callback: Callable[[IterationState], bool | None] | None = None,
    verbose: bool = False,
    memory_limit: Any = None,
    device: Any = None,
) -> TuckerTensor:
    """Non-negative Tucker decomposition ``X ~ G x_n U_n`` (every mode n) with ``G >= 0`` and ``U_n >= 0``.

    Each iteration runs the projection sweep of :func:`hooi` (``X`` times every factor but one, transposed:
    two passes over a dense tensor for any order, a CSF kernel per mode for a sparse one) and updates each
    factor from its projection and the core; then the core from the full projection ``X x_n U_n^T`` and
    the factor Grams:

    - ``"hals"``: each factor by HALS column sweeps (exact non-negative minimizers, exact zeros), the core
      by projected accelerated gradient (FISTA) steps; TensorLy's ``non_negative_tucker_hals`` scheme.
    - ``"mu"``: multiplicative updates of the factors and the core (Lee and Seung; Kim and Choi).

    The fit ``1 - ||X - X_hat|| / ||X||`` comes from ``||X||^2 - 2 <X x_n U_n^T, G> + <G, G x_n U_n^T U_n>``
    (no reconstruction). The factors are non-negative, not orthonormal.

    Parameters
    ----------
    X : array, COOTensor or CSFTensor, shape (I_0, ..., I_{N-1})
    ranks : sequence of int, or int
    method : {"hals", "mu"}, default "hals"
    init : {"svd", "random"}, a Tucker model, or the factor matrices; default "svd"
        ``"svd"``: absolute values of the leading singular vectors of each unfolding and of the projected
        core; ``"random"``: uniform [0, 1) entries, scaled to ``||X_hat|| = ||X||``. A given model must be
        non-negative; a given list of factors (no core) starts from the non-negative part of the projection.
    tol : float, default 1e-6
    max_iter : int, default 200
    random_state : None, int or numpy Generator
        The seed of a random start, and of the columns that pad the SVD start where a rank exceeds a mode's
        size. None: a fixed seed (0), so a default call repeats its bits, except with ``init="random"``
        asked for, which then starts from fresh entropy.
    callback : callable, optional
    verbose : bool, default False
    memory_limit : int or str, optional
    device : {None, "cpu", "cuda", "cuda:N"}, default None

    Returns
    -------
    TuckerTensor

    Warns
    -----
    ConvergenceWarning
        When ``max_iter`` is reached before the fit settles.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> X = tk.multi_ttm(rng.random((2, 3, 2)), [rng.random((n, r)) for n, r in ((8, 2), (9, 3), (10, 2))])
    >>> T = tk.non_negative_tucker(X, (2, 3, 2), random_state=0, tol=1e-12, max_iter=300)
    >>> round(T.fit, 2), bool((T.core >= 0).all())
    (1.0, True)
    """
    with decomposition_call(X, device=device, memory_limit=memory_limit) as call:
        return call.result(_non_negative_tucker(call, ranks, method, init, tol, max_iter, random_state, callback,
                                                verbose))


def _unfold(A: Any, n: int) -> Any:
    xp = _xp(A)
    return xp.moveaxis(A, n, 0).reshape(A.shape[n], -1)


def _ttm_all(G: Any, mats: Sequence[Any]) -> Any:
    """``G x_n mats[n]`` for every mode: core-sized products (a few R x R matrices), one ``tensordot`` per mode
    (the engine's planning would cost more than these products)."""
    xp = _xp(G)
    for n, A in enumerate(mats):
        G = xp.moveaxis(xp.tensordot(A, G, axes=(1, n)), 0, n)
    return G


#: the core step's most FISTA steps in this context (``CORE_STEPS``): TensorLy's ``non_negative_tucker_hals``
#: caps them at its ``n_iter_max``, which its compat layer sets here for the call
CORE_STEPS_NOW: contextvars.ContextVar[int] = contextvars.ContextVar("CORE_STEPS_NOW", default=CORE_STEPS)


def _core_fista(G: Any, P: Any, grams: Sequence[Any], steps: int = CORE_STEPS) -> Any:
    """Projected accelerated gradient on ``min_{G >= 0} ||X - G x U||^2`` written with ``P = X x_n U_n^T``
    and the Grams: gradient ``G x_n (U_n^T U_n) - P``, step ``1 / prod(largest eigenvalue of each Gram)``."""
    xp = _xp(G)
    lip = xp.ones((), dtype=xp.float64)
    for A in grams:
        lip = lip * xp.linalg.eigh(A.astype(xp.float64))[0][-1]
    lr = xp.where(lip > 0, 1 / xp.where(lip > 0, lip, 1), 0).astype(G.dtype)
    host = xp is np  # the early stop reads a value back: on a GPU every step runs, with no synchronization
    if host and G.dtype.char in "fd" and G.size <= COMPILED_CORE_MAX:
        from tuckerkit.decomposition._hals_kernels import core_fista

        coefs, t_old = [], 1.0
        for _ in range(steps):
            t = (1.0 + math.sqrt(1.0 + 4.0 * t_old * t_old)) / 2.0
            coefs.append((t_old - 1.0) / t)
            t_old = t
        rmax = max(int(A.shape[0]) for A in grams)
        stack = np.zeros((len(grams), rmax, rmax), dtype=G.dtype)
        for n, A in enumerate(grams):
            stack[n, :A.shape[0], :A.shape[0]] = A
        x = core_fista(np.ascontiguousarray(G).reshape(-1), np.ascontiguousarray(P, dtype=G.dtype).reshape(-1),
                       stack, np.array([A.shape[0] for A in grams], dtype=np.int64), lr.reshape(1),
                       np.array(coefs, dtype=G.dtype), CORE_STOP, G.dtype.type(0))
        return x.reshape(G.shape)
    x = G
    y = G
    t_old = 1.0
    first = None
    for _ in range(steps):
        x_new = xp.maximum(y - lr * (_ttm_all(y, grams) - P), 0)
        t = (1.0 + math.sqrt(1.0 + 4.0 * t_old * t_old)) / 2.0
        y = x_new + G.dtype.type((t_old - 1.0) / t) * (x_new - x)
        t_old = t
        if host:
            d = x_new - x
            moved = float(xp.sum(d * d))
            if first is None:
                first = moved
            if moved <= CORE_STOP * first:
                x = x_new
                break
        x = x_new
    return x


def _tucker_fit(normX: float, P: Any, G: Any, grams: Sequence[Any]) -> float:
    """``1 - ||X - X_hat|| / ||X||`` from the full projection ``P``, the core and the Grams (float64)."""
    xp = _xp(G)
    if normX <= 0:
        return 1.0
    G64 = G.astype(xp.float64) / normX
    inner = float(xp.sum(P.astype(xp.float64) / normX * G64))
    sq = float(xp.sum(G64 * _ttm_all(G64, [A.astype(xp.float64) for A in grams])))
    return 1.0 - math.sqrt(max(1.0 - 2.0 * inner + sq, 0.0))


def _non_negative_tucker(call: Call, ranks: Any, method: Any, init: Any, tol: Any, max_iter: Any,
                         random_state: Any, callback: Any, verbose: bool) -> TuckerTensor:
    X, policy = call.X, call.policy
    ranks = check_ranks(ranks, X.shape)
    method = check_choice(method, "method", METHODS)
    tol = check_nonneg(tol, "tol")
    max_iter = check_max_iter(max_iter)
    rng = _start_rng(random_state, init)
    check_callback(callback)
    init = check_init(init, X.shape, ranks, kind="tucker", methods=("svd", "random"), dtype=X.dtype)
    xp, N = X.xp, X.ndim
    core: Any = None
    if not isinstance(init, str):
        first, given = init
        _check_nonneg_start(given, "init factor")
        for n, U in enumerate(given):  # (as non_negative_cp refuses it: the run had blamed the data)
            if U.size and not np.any(np.asarray(_host(U))):
                raise ValueError(f"init factor {n} is all zeros; expected a nonzero start (the updates multiply by "
                                 "it before replacing it, so the model would stay zero)")
        factors = [xp.ascontiguousarray(call.like(U)) for U in given]
        if first is not None:
            core = call.like(first)
            if tuple(core.shape) != tuple(ranks):
                raise ValueError(f"init's core has shape {tuple(core.shape)}; expected {tuple(ranks)}")
            if not bool(xp.all(xp.isfinite(core))):
                raise ValueError("init's core has NaN or infinite entries; expected finite non-negative numbers")
            if float(xp.min(core)) < 0:
                raise ValueError("init's core has negative entries; a non-negative decomposition needs init >= 0")
            if call.scale != 1.0:
                core = core * core.dtype.type(call.scale)
    elif init == "random":
        factors = [call.like(rng.random((X.shape[n], ranks[n]))) for n in range(N)]
        core = call.like(rng.random(tuple(ranks)) + 0.01)
    else:
        factors = [xp.ascontiguousarray(xp.abs(X.leading_subspace(n, ranks[n], rng=rng, policy=policy)[0])
                                        .astype(X.dtype, copy=False)) for n in range(N)]
    if core is None:  # the non-negative part of the projection onto the starting factors
        proj = X.multi_ttm(dict(enumerate(factors)), transpose=True, policy=policy)
        core = xp.maximum(proj, 0)
        if not bool(xp.any(core > 0)):
            # (no positive entry, as on zero-mean data at low ranks: a zero core is a fixed point of every update,
            # and the run reported fit 0.0 as converged; its magnitudes then, as TensorLy's start takes)
            core = xp.abs(proj)
        core = core.astype(X.dtype, copy=False)
        del proj
    if isinstance(init, str):  # scale the start to the data: ||X_hat|| = ||X||
        grams0 = [U.T @ U for U in factors]
        c64 = core.astype(xp.float64)
        nh = math.sqrt(max(float(xp.sum(c64 * _ttm_all(c64, [A.astype(xp.float64) for A in grams0]))), 0.0))
        if nh > 0 and call.norm > 0:
            core = core * core.dtype.type(call.norm / nh)
    grams = [U.T @ U for U in factors]
    eps = X.dtype.type(np.finfo(X.dtype).eps)
    mon = Monitor(f"non_negative_tucker({method})", tol, max_iter, callback, verbose)
    it, sweep = 0, None
    P: Any = None
    for it in range(1, max_iter + 1):
        last: dict[str, Any] = {}

        def update(n: int, Y: Any, last=last, core=core) -> None:
            # UtU = G_(n) (kron of the other Grams) G_(n)^T ; MtU = Y_(n) G_(n)^T
            Gn = _unfold(core, n)
            others = [grams[m] if m != n else xp.eye(ranks[n], dtype=X.dtype) for m in range(N)]
            V = _unfold(_ttm_all(core, others), n) @ Gn.T
            M = (_unfold(Y, n).astype(X.dtype, copy=False) @ Gn.T)
            if method == "hals":
                U = hals_rows(factors[n].T.copy(), xp.ascontiguousarray(M.T), V).T
            else:
                U = _mu(factors[n], M, V)
            factors[n] = xp.ascontiguousarray(U)
            grams[n] = factors[n].T @ factors[n]
            last["n"], last["Y"] = n, Y

        sweep = X.ttmc_sweep(factors, update, policy=policy)
        n_last = last["n"]
        from tuckerkit.engine import as_operand

        P = as_operand(last["Y"]).ttm(factors[n_last], n_last, transpose=True, policy=policy).astype(X.dtype,
                                                                                                     copy=False)
        if method == "hals":
            core = _core_fista(core, P, grams, CORE_STEPS_NOW.get())
        else:
            core = core * (xp.maximum(P, eps) / xp.maximum(_ttm_all(core, grams), eps))
        fit = _tucker_fit(call.norm, P, core, grams)
        if call.refines_fit(fit):  # (near 1: the residual's fit steers the stop, as in non_negative_cp)
            from tuckerkit.decomposition._tucker import TuckerResidual

            fit = call.residual_fit(TuckerResidual(xp, core, factors))
        if mon.step(it, fit, factors):
            break
    from tuckerkit.decomposition._tucker import TuckerResidual

    history = call.with_residual_fit(mon.history, lambda: TuckerResidual(xp, core, factors))  # (float32 near 1)
    # (an upper bound of the model's norm below the data's rounding: MU approaches zero without reaching it)
    bound = float(xp.sqrt(xp.sum(core * core)))
    for U in factors:
        bound *= float(xp.sqrt(xp.sum(U * U)))
    zero = bound <= float(np.finfo(core.dtype).eps) * call.norm
    mon.finish(history[-1], collapsed=zero and call.norm > 0)  # (the closing line: the fit reported, the reason)
    converged = _not_collapsed(f"non_negative_tucker({method})", zero, call.norm, mon.converged)
    return TuckerTensor(call.unscale(core), tuple(factors), it, converged, history,
                        sweep.plans if sweep is not None else (), passes_per_iteration=sweep.passes if sweep else 0)
