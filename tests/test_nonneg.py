"""Non-negative CP and Tucker (HALS, MU): against TensorLy from the same start, invariants, sparse, devices."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import to_numpy

import tuckerkit as tk
from tuckerkit.sparse import COOTensor, CSFTensor

tl = pytest.importorskip("tensorly")
from tensorly.decomposition import (  # noqa: E402
    non_negative_parafac,
    non_negative_parafac_hals,
    non_negative_tucker_hals,
)


def _eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def _cp_data(rng, shape=(12, 13, 14), rank=3, noise=0.05, dtype=np.float64):
    A = [rng.random((n, rank)) for n in shape]
    X = np.einsum("ir,jr,kr->ijk", *A) + noise * rng.random(shape)
    return X.astype(dtype)


def _tucker_data(rng, shape=(12, 13, 14), ranks=(3, 4, 2), noise=0.05):
    G = rng.random(ranks)
    return tk.multi_ttm(G, [rng.random((n, r)) for n, r in zip(shape, ranks, strict=True)]) + noise * rng.random(shape)


def _rel_err(X, Xhat) -> float:
    return float(np.linalg.norm(X - Xhat) / np.linalg.norm(X))


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        return fn(*args, **kwargs)


@pytest.mark.parametrize("iters", [1, 7, 40])
@pytest.mark.parametrize("method", ["hals", "mu"])
def test_nn_cp_equal_or_better_than_tensorly_from_the_same_start(method, iters, rng):
    X = _cp_data(rng)
    init = [rng.random((n, 3)) for n in X.shape]
    cp = _quiet(tk.non_negative_cp, X, 3, method=method, init=init, tol=0, max_iter=iters)
    peer = non_negative_parafac_hals if method == "hals" else non_negative_parafac
    ref = peer(X, 3, init=tl.cp_tensor.CPTensor((np.ones(3), [U.copy() for U in init])), n_iter_max=iters, tol=0)
    ours, theirs = _rel_err(X, cp.to_dense()), _rel_err(X, tl.cp_to_tensor(ref))
    assert ours <= theirs + 100 * _eps(np.float64)
    assert abs((1 - cp.fit) - ours) <= 1e-6  # the fit from Grams + last MTTKRP is the true error
    assert all(bool((U >= 0).all()) for U in cp.factors) and bool((cp.weights >= 0).all())


def test_nn_cp_hals_objective_never_increases_and_reaches_exact_zeros(rng):
    shape, rank = (15, 16, 17), 3
    A = [rng.random((n, rank)) * (rng.random((n, rank)) < 0.6) for n in shape]  # planted exact zeros
    X = np.einsum("ir,jr,kr->ijk", *A)
    cp = _quiet(tk.non_negative_cp, X, rank, tol=0, max_iter=400, random_state=0)
    hist = np.array(cp.fit_history)
    assert np.all(np.diff(hist) >= -1e-7)  # HALS is monotone; the fit identity is accurate to ~sqrt(eps)
    assert cp.fit > 0.999
    assert any(bool((U == 0).any()) for U in cp.factors)  # HALS reaches exact zeros, MU would not


def test_nn_cp_sparse_equals_dense_and_zeros_allowed(rng):
    X = _cp_data(rng)
    X[X < 0.3] = 0.0
    init = [rng.random((n, 4)) for n in X.shape]
    dense = _quiet(tk.non_negative_cp, X, 4, init=init, tol=0, max_iter=6)
    for S in (COOTensor.from_dense(X), CSFTensor.from_coo(COOTensor.from_dense(X))):
        sp = _quiet(tk.non_negative_cp, S, 4, init=init, tol=0, max_iter=6)
        np.testing.assert_allclose(sp.fit_history, dense.fit_history, rtol=0, atol=1e3 * _eps(np.float64))
        np.testing.assert_allclose(sp.to_dense(), dense.to_dense(), rtol=0, atol=1e3 * _eps(np.float64) * X.max())


@pytest.mark.parametrize("fn,r", [(tk.non_negative_cp, 3), (tk.non_negative_tucker, (3, 3, 2))])
def test_dtype_kept_bitwise_repeatable_and_frozen(fn, r, dtype, rng):
    X = _cp_data(rng, dtype=dtype)
    a = _quiet(fn, X, r, random_state=1, max_iter=15)
    b = _quiet(fn, X, r, random_state=1, max_iter=15)
    assert all(U.dtype == dtype for U in a.factors)
    assert a.fit_history == b.fit_history
    assert all(np.array_equal(U, V) for U, V in zip(a.factors, b.factors, strict=True))
    with pytest.raises(ValueError, match="read-only"):
        a.factors[0][0, 0] = 1.0
    assert a.fit > 0.9


def test_convergence_warning_and_callback(rng):
    X = _cp_data(rng)
    with pytest.warns(tk.ConvergenceWarning, match=r"non_negative_cp\(hals\) reached max_iter=2"):
        tk.non_negative_cp(X, 3, tol=0, max_iter=2)
    seen = []
    cp = tk.non_negative_cp(X, 3, callback=lambda s: seen.append(s.iteration) or s.iteration == 3)
    assert seen == [1, 2, 3] and cp.n_iter == 3
    cp = tk.non_negative_cp(X, 3, random_state=0, max_iter=500)
    assert cp.converged


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"method": "als"}, ValueError, r"method='als' is not valid; expected one of 'hals', 'mu'"),
    ({"tol": -1}, ValueError, r"tol=-1 is invalid; expected a finite number >= 0"),
    ({"init": "nndsvd"}, ValueError, r"init='nndsvd' is not valid"),
    ({"max_iter": 0}, ValueError, r"max_iter=0 is invalid"),
])
def test_nn_cp_bad_arguments(kwargs, exc, match, rng):
    with pytest.raises(exc, match=match):
        tk.non_negative_cp(_cp_data(rng), 3, **kwargs)


def test_negative_start_refused(rng):
    X = _cp_data(rng)
    init = [rng.random((n, 3)) for n in X.shape]
    init[1][0, 0] = -1.0
    with pytest.raises(ValueError, match=r"^init factor 1 has negative entries; a non-negative decomposition"):
        tk.non_negative_cp(X, 3, init=init)
    with pytest.raises(ValueError, match=r"^init factor 1 has negative entries"):
        tk.non_negative_tucker(X, 3, init=[U[:, :3] for U in init])
    with pytest.raises(ValueError, match=r"rank=0 is not positive"):
        tk.non_negative_cp(X, 0)


def test_nn_tucker_equal_or_better_than_tensorly_hals_from_the_same_start(rng):
    X = _tucker_data(rng)
    ranks = (3, 4, 2)
    core = rng.random(ranks)
    factors = [rng.random((n, r)) for n, r in zip(X.shape, ranks, strict=True)]
    T = _quiet(tk.non_negative_tucker, X, ranks, init=(core.copy(), [U.copy() for U in factors]), tol=0,
               max_iter=100)
    ref = non_negative_tucker_hals(X, ranks, init=tl.tucker_tensor.TuckerTensor((core.copy(), [U.copy() for U in
                                                                                               factors])),
                                   n_iter_max=100, tol=0)
    ours, theirs = _rel_err(X, T.to_dense()), _rel_err(X, tl.tucker_to_tensor(ref))
    assert ours <= theirs + 1e-9
    assert abs((1 - T.fit) - ours) <= 1e-6
    assert bool((T.core >= 0).all()) and all(bool((U >= 0).all()) for U in T.factors)


@pytest.mark.parametrize("method", ["hals", "mu"])
def test_nn_tucker_improves_and_sparse_equals_dense(method, rng):
    X = _tucker_data(rng)
    X[X < np.quantile(X, 0.3)] = 0.0
    T = _quiet(tk.non_negative_tucker, X, (3, 4, 2), method=method, tol=0, max_iter=12, random_state=0)
    assert T.fit_history[-1] > T.fit_history[0]
    if method == "mu":  # multiplicative updates never increase the objective
        assert np.all(np.diff(T.fit_history) >= -1e-7)
    S = _quiet(tk.non_negative_tucker, COOTensor.from_dense(X), (3, 4, 2), method=method, tol=0, max_iter=12,
               random_state=0)
    np.testing.assert_allclose(S.fit_history, T.fit_history, rtol=0, atol=1e-9)


def test_on_device_equals_cpu(xp, dtype):
    rng = np.random.default_rng(0)
    X = _cp_data(rng, dtype=dtype)
    for fn, r in ((tk.non_negative_cp, 3), (tk.non_negative_tucker, (3, 3, 2))):
        ref = _quiet(fn, X, r, tol=0, max_iter=5, random_state=0)
        got = _quiet(fn, xp.asarray(X), r, tol=0, max_iter=5, random_state=0)
        assert type(got.factors[0]) is type(xp.asarray(X)) and got.factors[0].dtype == dtype
        tol = 1e3 * _eps(dtype)
        np.testing.assert_allclose(got.fit_history, ref.fit_history, rtol=0, atol=tol)
        np.testing.assert_allclose(to_numpy(got.to_dense()), ref.to_dense(), rtol=0, atol=tol * X.max())


def test_estimators_nonnegative(rng):
    from sklearn.base import clone

    X = _cp_data(rng, shape=(20, 8, 9))
    est = _quiet(tk.CPDecomposer(rank=3, nonnegative=True, random_state=0, max_iter=300).fit, X)
    C = est.transform(X)
    assert C.shape == (20, 3) and bool((C >= 0).all())
    assert all(bool((U >= 0).all()) for U in est.factors_)
    assert est.score(X) > 0.9 and clone(est).get_params()["nonnegative"] is True
    T = _quiet(tk.TuckerDecomposer(ranks=(3, 3), nonnegative=True, random_state=0, max_iter=50).fit, X)
    Z = T.transform(X)
    assert Z.shape == (20, 9) and bool((T.core_ >= 0).all()) and T.score(X) > 0.9
    with pytest.raises(TypeError, match=r"^nonnegative must be True or False; received 'yes'$"):
        tk.CPDecomposer(nonnegative="yes").fit(X)


def test_streamed_equals_in_memory_and_input_unmodified(rng):
    X = _cp_data(rng)
    keep = X.copy()
    init = [rng.random((n, 3)) for n in X.shape]
    a = _quiet(tk.non_negative_cp, X, 3, init=init, tol=0, max_iter=4)
    b = _quiet(tk.non_negative_cp, X, 3, init=init, tol=0, max_iter=4, memory_limit=4 * X.nbytes // X.shape[0])
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=1e3 * _eps(np.float64))
    c = _quiet(tk.non_negative_tucker, X, (3, 3, 2), tol=0, max_iter=4, random_state=0)
    d = _quiet(tk.non_negative_tucker, X, (3, 3, 2), tol=0, max_iter=4, random_state=0,
               memory_limit=4 * X.nbytes // X.shape[0])
    np.testing.assert_allclose(d.fit_history, c.fit_history, rtol=0, atol=1e3 * _eps(np.float64))
    assert np.array_equal(X, keep)


@pytest.mark.parametrize("dtype_", [np.float64, np.float32])
def test_compiled_hals_sweeps_equal_the_row_by_row_update(dtype_, rng):
    """The compiled inner sweeps against the plain row-by-row NumPy update they replace (same rule, same early
    stop): equal to rounding, exact zeros in the same places, a dead component (V[k, k] = 0) left as it is."""
    from tuckerkit.decomposition._nonneg import INNER_SWEEPS, SWEEP_STOP, hals_rows

    R, I = 6, 40  # noqa: E741
    B = rng.random((30, R))
    B[:, 4] = 0.0  # component 4 is dead: its row of V is zero
    V = (B.T @ B).astype(dtype_)
    UtM = (rng.random((R, I)) - 0.4).astype(dtype_)
    start = rng.random((R, I)).astype(dtype_)

    ref = start.copy()
    d = np.diagonal(V)
    inv = np.where(d > 0, 1 / np.where(d > 0, d, 1), 0).astype(dtype_)
    first = None
    for _ in range(INNER_SWEEPS):
        before = ref.copy()
        for k in range(R):
            ref[k] = np.maximum(ref[k] + (UtM[k] - V[k] @ ref) * inv[k], 0)
        moved = float(((ref - before).astype(np.float64) ** 2).sum())
        first = moved if first is None else first
        if moved <= SWEEP_STOP * first:
            break
    got = hals_rows(start.copy(), UtM, V)
    assert got.dtype == dtype_
    scale = float(np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=0, atol=100 * _eps(dtype_) * scale)
    assert np.array_equal(got == 0, ref == 0) and bool((got == 0).any())
    assert np.array_equal(got[4], start[4])
    again = hals_rows(start.copy(), UtM, V)
    assert np.array_equal(got, again)  # the same call, the same bits


@pytest.mark.parametrize("ranks", [(3, 4, 2), (1, 5, 7), (2, 3, 2, 3), (4, 1), (6, 6, 6)])
@pytest.mark.parametrize("dtype_", [np.float64, np.float32])
def test_compiled_core_step_equals_the_numpy_steps_and_meets_the_kkt_conditions(ranks, dtype_, rng, monkeypatch):
    """Non-negative Tucker's core step compiled (small cores) against the NumPy steps it replaces: equal to
    rounding after 12 steps; run to convergence, the projected gradient vanishes (KKT: zero gradient where the
    core is positive, non-negative where it is zero); the same call, the same bits."""
    from tuckerkit.decomposition import _hals_kernels, _nonneg

    calls = []
    compiled = _hals_kernels.core_fista
    monkeypatch.setattr(_hals_kernels, "core_fista", lambda *a: calls.append(1) or compiled(*a))
    N = len(ranks)
    Us = [rng.random((9 + n, r)) for n, r in enumerate(ranks)]
    grams = [(U.T @ U).astype(dtype_) for U in Us]
    X = rng.random(tuple(U.shape[0] for U in Us)) - 0.3
    P = tk.multi_ttm(X, Us, transpose=True).astype(dtype_)
    G = rng.random(ranks).astype(dtype_)
    got = _nonneg._core_fista(G, P, grams, steps=12)
    assert calls == [1]
    monkeypatch.setattr(_nonneg, "COMPILED_CORE_MAX", 0)
    ref = _nonneg._core_fista(G, P, grams, steps=12)
    assert calls == [1]
    monkeypatch.setattr(_nonneg, "COMPILED_CORE_MAX", 1 << 15)
    assert got.dtype == dtype_ and got.shape == ranks
    scale = float(np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e3 * _eps(dtype_) * scale)
    assert np.array_equal(_nonneg._core_fista(G, P, grams, steps=12), got)
    if dtype_ == np.float64:  # (without the early stop, which ends at a relative move, not at the optimum)
        monkeypatch.setattr(_nonneg, "CORE_STOP", 0.0)
        x = _nonneg._core_fista(G, P, grams, steps=20000)
        grad = _nonneg._ttm_all(x, grams) - P
        tol = 1e-6 * float(np.abs(P).max())
        assert (x >= 0).all() and bool((x == 0).any() or N == 2)
        assert np.abs(grad[x > 0]).max(initial=0) <= tol and grad[x == 0].min(initial=0) >= -tol


@pytest.mark.parametrize("method", ["mu", "hals"])
def test_a_collapse_is_reported_for_both_methods(method):
    """MU's multiplicative updates approach a zero model without reaching exact zeros (a model norm of 1e-17):
    it was reported converged with no warning, where HALS's exact zero was caught."""
    X = -np.abs(np.random.default_rng(0).random((6, 5, 4)))
    for f, r in ((tk.non_negative_tucker, [2, 2, 2]), (tk.non_negative_cp, 2)):
        with pytest.warns(tk.ConvergenceWarning, match=rf"{f.__name__}\({method}\) ended at an all-zero model"):
            T = f(X, r, method=method)
        assert T.fit == 0.0 and T.converged is False
