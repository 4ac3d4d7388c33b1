"""Missing data for CP-ALS and HOOI (``mask=``, True = observed) by EM imputation.

Each iteration fills the missing entries with the current model's values and runs one ordinary iteration of
the algorithm on the completed tensor: the engine (dimension-tree MTTKRP sweep, projection sweep, plans,
devices) runs unchanged on a dense array. Why EM rather than weighted (CP-WOPT-style) updates: a weighted
least-squares factor update couples every row through its own mask pattern (one R x R system per row, or a
gradient method with a step size), which the engine's MTTKRP cannot express; EM keeps each update the exact
ALS / HOOI step of the completed tensor, and the observed-entry error never increases from one iteration to
the next (each step minimizes a majorizer of it that touches it at the current model). The price is one
reconstruction per iteration, as large as the tensor, so ``mask=`` needs a dense, in-memory ``X``. The first
fill is the mean of the observed entries (or the given start's values); HOOI's ``"st_hosvd"`` start is then
the HOSVD of the filled tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuckerkit._validation import (
    check_bool,
    check_callback,
    check_cp_rank,
    check_init,
    check_max_iter,
    check_nonneg,
    check_random_state,
    check_ranks,
    count_nonfinite,
    describe,
)
from tuckerkit.backend import array_namespace
from tuckerkit.decomposition._entry import decomposition_call
from tuckerkit.decomposition._monitor import Monitor
from tuckerkit.decomposition._results import CPTensor, TuckerTensor


def prepare_masked(X: Any, mask: Any) -> tuple[Any, Any, float]:
    """Validate ``X`` (dense, any values at the missing entries, NaN included) and ``mask`` (a boolean array
    of X's shape, True = observed, at least one True); returns ``X`` with its missing entries set to the mean
    of the observed ones (the first imputation), the mask as a bool array and that mean."""
    from tuckerkit.engine import DenseTensor
    from tuckerkit.engine._operand import dense_array

    if isinstance(X, DenseTensor):
        X = X.data
    if getattr(X, "nnz", None) is not None or type(X).__name__ in ("COOTensor", "CSFTensor", "SlabTensor",
                                                                   "DaskTensor"):
        raise TypeError(f"mask= needs a dense in-memory X (EM imputation fills it in); received a {type(X).__name__}")
    X = dense_array(X, "X", min_ndim=2)
    if X.dtype.kind == "c":
        raise TypeError(f"mask= needs a real X (float32 or float64); received X of complex dtype {X.dtype}")
    xp = array_namespace(X)
    if not hasattr(mask, "shape") or not hasattr(mask, "dtype"):
        raise TypeError(f"mask is {describe(mask)}; expected a boolean array of X's shape (True = observed)")
    if tuple(mask.shape) != tuple(X.shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}; expected X's shape {tuple(X.shape)}")
    if np.dtype(mask.dtype) != np.bool_:
        raise TypeError(f"mask has dtype {mask.dtype}; expected a boolean array (True = observed)")
    mask = xp.asarray(mask)
    n_obs = int(mask.sum())
    if n_obs == 0:
        raise ValueError("mask has no True entry; at least one entry of X must be observed")
    observed = X[mask]
    if count_nonfinite(observed):
        raise ValueError("X has NaN or infinite values at observed entries (mask True); only missing entries "
                         "may hold them")
    mean = float(observed.astype(np.float64).mean())
    filled = xp.where(mask, X, X.dtype.type(mean)).astype(X.dtype, copy=False)
    return filled, mask, mean


def _observed_fit(Xf: Any, Xhat: Any, mask: Any, norm_obs: float) -> float:
    from tuckerkit.engine._operand import frobenius_norm

    if norm_obs <= 0:
        return 1.0
    xp = array_namespace(Xf)
    return 1.0 - frobenius_norm(xp.where(mask, Xf - Xhat, 0)) / norm_obs


def masked_cp_als(X: Any, rank: Any, mask: Any, *, init: Any, tol: Any, max_iter: Any, random_state: Any,
                  normalize: Any, callback: Any, verbose: bool, memory_limit: Any, device: Any) -> CPTensor:
    """:func:`cp_als` with ``mask=``: EM imputation around the ALS sweep (see the module). ``fit_history`` holds
    the fit on the observed entries, ``1 - ||P(X - X_hat)|| / ||P(X)||``."""
    from tuckerkit.decomposition._cp import _check_rank_fits, _svd_init
    from tuckerkit.decomposition._linalg import spd_solve
    from tuckerkit.engine import DenseTensor
    from tuckerkit.engine._operand import frobenius_norm

    if memory_limit is not None:
        raise ValueError("mask= cannot be combined with memory_limit=; EM imputation holds X in memory")
    filled, mask, _ = prepare_masked(X, mask)
    with decomposition_call(filled, device=device) as call:
        Xf, policy = call.X.data, call.policy
        xp = call.X.xp
        m = call.like(mask, bool)
        rank = check_cp_rank(rank)
        normalize = check_bool(normalize, "normalize")
        _check_rank_fits(call.X, rank)
        tol = check_nonneg(tol, "tol")
        max_iter = check_max_iter(max_iter)
        rng = check_random_state(random_state)
        check_callback(callback)
        N, dt = Xf.ndim, Xf.dtype
        init = check_init(init, Xf.shape, rank, kind="cp", methods=("auto", "svd", "random"))
        init = "svd" if init == "auto" else init  # dense: cp_als's automatic start
        if not isinstance(init, str):
            weights0, given = init
            factors = [call.like(U).copy() for U in given]
            if weights0 is not None:
                factors[0] = factors[0] * call.like(weights0)[None, :]
            if call.scale != 1.0:
                factors[0] = factors[0] * dt.type(call.scale)
            Xhat = _cp_full(xp.ones(rank, dtype=dt), factors)
            Xf = xp.where(m, Xf, Xhat)  # the start's values at the missing entries
        else:
            factors = _svd_init(call, rank, rng) if init == "svd" else [
                call.like(rng.random((Xf.shape[n], rank))) for n in range(N)]
        norm_obs = frobenius_norm(xp.where(m, Xf, 0))
        weights = xp.ones(rank, dtype=dt)
        grams = [U.T @ U for U in factors]
        mon = Monitor("cp_als(mask)", tol, max_iter, callback, verbose)

        def update(n: int, M: Any) -> None:
            nonlocal weights
            V = xp.ones((rank, rank), dtype=dt)
            for k in range(N):
                if k != n:
                    V *= grams[k]
            U = spd_solve(V, M.astype(dt, copy=False))
            if normalize:
                norms = xp.linalg.norm(U, axis=0)
                norms = xp.where(norms == 0, 1, norms).astype(dt)
                U = U / norms[None, :]
                weights = norms
            factors[n] = xp.ascontiguousarray(U.astype(dt, copy=False))
            grams[n] = factors[n].T @ factors[n]

        it, sweep = 0, None
        for it in range(1, max_iter + 1):
            if not normalize:
                weights = xp.ones(rank, dtype=dt)
            sweep = DenseTensor(Xf).mttkrp_sweep(factors, update, policy=policy)
            Xhat = _cp_full(weights, factors)
            fit = _observed_fit(Xf, Xhat, m, norm_obs)
            Xf = xp.where(m, Xf, Xhat)
            if mon.step(it, fit, factors):
                break
        mon.finish()
        if normalize:
            weights = call.unscale(weights)
        else:
            weights = xp.ones(rank, dtype=dt)
            factors[0] = call.unscale(factors[0])
        model = CPTensor(weights, tuple(factors), it, mon.converged, tuple(mon.history),
                         sweep.plans if sweep is not None else (), passes_per_iteration=sweep.passes if sweep else 0)
        return call.result(model)


def _cp_full(weights: Any, factors: list[Any]) -> Any:
    from tuckerkit.engine import khatri_rao

    first = factors[0] * weights[None, :]
    rest = khatri_rao(list(factors[1:]))
    shape = tuple(int(U.shape[0]) for U in factors)
    return (first @ rest.T).reshape(shape)


def masked_hooi(X: Any, ranks: Any, mask: Any, *, init: Any, tol: Any, max_iter: Any, random_state: Any,
                callback: Any, verbose: bool, memory_limit: Any, device: Any) -> TuckerTensor:
    """:func:`hooi` with ``mask=``: EM imputation around the HOOI projection sweep (see the module);
    ``fit_history`` holds the fit on the observed entries."""
    from tuckerkit.decomposition._tucker import _random_orthonormal
    from tuckerkit.engine import DenseTensor, as_operand, multi_ttm
    from tuckerkit.engine._operand import frobenius_norm

    if memory_limit is not None:
        raise ValueError("mask= cannot be combined with memory_limit=; EM imputation holds X in memory")
    filled, mask, _ = prepare_masked(X, mask)
    with decomposition_call(filled, device=device) as call:
        Xf, policy = call.X.data, call.policy
        xp = call.X.xp
        m = call.like(mask, bool)
        ranks = check_ranks(ranks, Xf.shape)
        tol = check_nonneg(tol, "tol")
        max_iter = check_max_iter(max_iter)
        rng = check_random_state(random_state)
        check_callback(callback)
        N = Xf.ndim
        init = check_init(init, Xf.shape, ranks, kind="tucker", methods=("st_hosvd", "hosvd", "random"))
        if not isinstance(init, str):
            first, given = init
            factors = [call.like(U) for U in given]
            if first is not None:  # the start's values at the missing entries
                core0 = call.like(first) * Xf.dtype.type(call.scale)
                Xf = xp.where(m, Xf, multi_ttm(core0, factors))
        elif init == "random":
            factors = [call.like(_random_orthonormal(rng, Xf.shape[n], ranks[n], Xf.dtype)) for n in range(N)]
        else:
            factors = [call.X.leading_subspace(n, ranks[n], rng=rng, policy=policy)[0].astype(Xf.dtype, copy=False)
                       for n in range(N)]
        norm_obs = frobenius_norm(xp.where(m, Xf, 0))
        mon = Monitor("hooi(mask)", tol, max_iter, callback, verbose)
        it, sweep, core = 0, None, None
        for it in range(1, max_iter + 1):
            last: dict[str, Any] = {}

            def update(n: int, Y: Any, last=last) -> None:
                U, _ = as_operand(Y).leading_subspace(n, ranks[n], policy=policy)
                factors[n] = U.astype(call.X.dtype, copy=False)
                last["n"], last["Y"] = n, Y

            sweep = DenseTensor(Xf).ttmc_sweep(factors, update, policy=policy)
            core = as_operand(last["Y"]).ttm(factors[last["n"]], last["n"], transpose=True, policy=policy)
            Xhat = multi_ttm(core, factors)
            fit = _observed_fit(Xf, Xhat, m, norm_obs)
            Xf = xp.where(m, Xf, Xhat)
            if mon.step(it, fit, factors):
                break
        mon.finish()
        model = TuckerTensor(call.unscale(core), tuple(factors), it, mon.converged, tuple(mon.history),
                             sweep.plans if sweep is not None else (),
                             passes_per_iteration=sweep.passes if sweep else 0)
        return call.result(model)

