"""CP-ALS ``fixed_modes`` / ``linesearch`` / ``orthogonalize`` and HOOI ``fixed_factors``: oracles and invariants."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tuckerkit as tk

EPS = np.finfo(np.float64).eps


def _planted(shape=(9, 10, 11), rank=3, seed=0, collinear=False, noise=1e-3):
    rng = np.random.default_rng(seed)
    F = [rng.standard_normal((n, rank)) for n in shape]
    if collinear:  # two nearly collinear components: the "swamp" where plain ALS crawls
        F[0][:, 1] = F[0][:, 0] + 0.1 * F[0][:, 1]
    X = np.einsum("ir,jr,kr->ijk", *F)
    return X + noise * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(shape)


def _als_sweep(X, factors, fixed):
    """One ALS sweep in plain numpy (unfold, Khatri-Rao, solve): the oracle."""
    F = [U.copy() for U in factors]
    for n in range(X.ndim):
        if n in fixed:
            continue
        others = [m for m in range(X.ndim) if m != n]
        kr = F[others[0]]
        for m in others[1:]:
            kr = np.einsum("ir,jr->ijr", kr, F[m]).reshape(-1, kr.shape[1])
        Xn = np.moveaxis(X, n, 0).reshape(X.shape[n], -1)
        V = np.ones((F[0].shape[1],) * 2)
        for m in others:
            V *= F[m].T @ F[m]
        F[n] = np.linalg.solve(V, (Xn @ kr).T).T
    return F


@pytest.mark.parametrize("fixed", [[0], [1], [2], [0, 2]])
def test_fixed_modes_one_sweep_matches_numpy_als_and_keeps_fixed_factors_bitwise(fixed):
    X = _planted()
    rng = np.random.default_rng(1)
    init = [rng.random((n, 3)) for n in X.shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        cp = tk.cp_als(X, 3, init=init, fixed_modes=fixed, max_iter=1, tol=0, normalize=False)
    for m in fixed:
        np.testing.assert_array_equal(cp.factors[m], init[m])
    want = np.einsum("ir,jr,kr->ijk", *_als_sweep(X, init, fixed))
    np.testing.assert_allclose(cp.full(), want, atol=1e4 * EPS * np.abs(want).max())


def test_fixed_modes_init_weights_go_to_a_free_mode_and_all_fixed_returns_the_start():
    X = _planted()
    rng = np.random.default_rng(2)
    init = [rng.random((n, 3)) for n in X.shape]
    w = np.array([2.0, 3.0, 5.0])
    before = [U.copy() for U in init]
    cp = tk.cp_als(X, 3, init=(w, init), fixed_modes=[0, 1], max_iter=3, tol=0)
    np.testing.assert_array_equal(cp.factors[0], before[0])
    np.testing.assert_array_equal(cp.factors[1], before[1])
    for U, U0 in zip(init, before, strict=True):  # the caller's start is not modified
        np.testing.assert_array_equal(U, U0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        same = tk.cp_als(X, 3, init=(w, init), fixed_modes=[0, 1, 2], max_iter=2, tol=0)
    np.testing.assert_array_equal(same.weights, w)
    for U, U0 in zip(same.factors, before, strict=True):
        np.testing.assert_array_equal(U, U0)


def test_linesearch_keeps_the_fit_monotone_and_needs_fewer_iterations_in_a_swamp():
    X = _planted(collinear=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        plain = tk.cp_als(X, 3, init="random", random_state=0, tol=1e-10, max_iter=2000, linesearch=False)
    fast = tk.cp_als(X, 3, init="random", random_state=0, tol=1e-10, max_iter=2000, linesearch=True)
    assert fast.converged
    assert np.all(np.diff(fast.fit_history) >= -100 * EPS)
    assert fast.n_iter < plain.n_iter / 2
    assert fast.fit >= plain.fit - 1e-6
    again = tk.cp_als(X, 3, init="random", random_state=0, tol=1e-10, max_iter=2000, linesearch=True)
    np.testing.assert_array_equal(again.factors[0], fast.factors[0])  # bitwise repeatable


def test_orthogonalize_does_not_stop_on_its_own_fit_drop_and_reaches_the_same_fit():
    X = _planted(noise=0.05)
    cp = tk.cp_als(X, 3, init="random", random_state=3, orthogonalize=2, tol=1e-9, max_iter=300)
    assert cp.n_iter > 2
    exact = tk.cp_als(X, 3, init="random", random_state=3, tol=1e-9, max_iter=300)
    assert abs(cp.fit - exact.fit) < 1e-4


@pytest.mark.parametrize(("kw", "match"), [
    ({"fixed_modes": [3]}, r"fixed_modes\[0\]=3 is out of range for a tensor with 3 modes"),
    ({"fixed_modes": [1, 1]}, r"fixed_modes=\[1, 1\] repeats a mode; expected distinct modes"),
    ({"fixed_modes": "0"}, r"fixed_modes must be a sequence of mode indices; received '0'"),
    ({"linesearch": "yes"}, r"^linesearch must be True or False; received 'yes'$"),
    ({"orthogonalize": -1}, r"orthogonalize=-1 is not valid; expected the number of iterations"),
    ({"orthogonalize": True}, r"orthogonalize=True is not valid"),
])
def test_cp_option_errors_are_one_line(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        tk.cp_als(_planted(), 2, **kw)


def test_hooi_fixed_factors_kept_and_core_is_the_projection():
    X = _planted(noise=0.1)
    rng = np.random.default_rng(4)
    init = [np.linalg.qr(rng.standard_normal((n, 2)))[0] for n in X.shape]
    T = tk.hooi(X, 2, init=init, fixed_factors=[1], max_iter=10, tol=0)
    np.testing.assert_array_equal(T.factors[1], init[1])
    for n in (0, 2):
        np.testing.assert_allclose(T.factors[n].T @ T.factors[n], np.eye(2), atol=100 * EPS)
    core = np.einsum("ijk,ia,jb,kc->abc", X, *T.factors)
    np.testing.assert_allclose(T.core, core, atol=1e3 * EPS * np.abs(core).max())
    free = tk.hooi(X, 2, init=init, max_iter=10, tol=0)
    assert T.fit <= free.fit + 1e-12
    with pytest.raises(ValueError, match=r"fixed_factors\[0\]=5 is out of range"):
        tk.hooi(X, 2, fixed_factors=[5])


def test_mask_runs_the_same_iterations_with_fixed_modes_and_orthogonalize():
    # the EM path is cp_als's / hooi's own iteration: with every entry observed the refill changes nothing,
    # so the factors are the unmasked run's bit for bit (fixed modes, orthogonalization and all)
    X = _planted()
    rng = np.random.default_rng(3)
    full = np.ones(X.shape, dtype=bool)
    init = [rng.standard_normal((n, 2)) for n in X.shape]
    kw = {"init": init, "tol": 0, "max_iter": 6, "fixed_modes": [1], "orthogonalize": 2, "linesearch": False}
    a, b = tk.cp_als(X, 2, **kw), tk.cp_als(X, 2, mask=full, **kw)
    assert all(np.array_equal(U, V) for U, V in zip(a.factors, b.factors, strict=True))
    assert np.array_equal(a.weights, b.weights) and np.array_equal(b.factors[1], init[1])
    Q = [np.linalg.qr(U)[0] for U in init]
    c = tk.hooi(X, 2, init=Q, tol=0, max_iter=4, fixed_factors=[0])
    d = tk.hooi(X, 2, init=Q, tol=0, max_iter=4, fixed_factors=[0], mask=full)
    assert all(np.array_equal(U, V) for U, V in zip(c.factors, d.factors, strict=True))
    assert np.array_equal(c.core, d.core) and np.array_equal(d.factors[0], Q[0])
    # with entries missing: the fixed factor comes back as given, the observed-entry error never increases
    mask = rng.random(X.shape) > 0.4
    e = tk.cp_als(np.where(mask, X, np.nan), 2, mask=mask, init=init, tol=0, max_iter=15, fixed_modes=[1])
    assert np.array_equal(e.factors[1], init[1])
    assert np.all(np.diff(e.fit_history) >= -1e3 * EPS)
    fit_obs = 1 - np.linalg.norm(mask * (X - e.to_dense())) / np.linalg.norm(mask * X)
    assert abs(e.fit - fit_obs) <= 1e3 * EPS
    f = tk.hooi(np.where(mask, X, np.nan), 2, mask=mask, init=Q, tol=0, max_iter=10, fixed_factors=[0])
    assert np.array_equal(f.factors[0], Q[0]) and np.all(np.diff(f.fit_history) >= -1e3 * EPS)


def test_non_negative_cp_fixed_and_unconstrained_modes():
    rng = np.random.default_rng(5)
    F = [rng.random((n, 3)) for n in (8, 9, 10)]
    F[2] = F[2] - 0.5  # mode 2 has negative entries in the truth
    X = np.einsum("ir,jr,kr->ijk", *F)
    cp = tk.non_negative_cp(X, 3, nonnegative_modes=[0, 1], tol=1e-10, max_iter=400, random_state=0)
    assert (cp.factors[0] >= 0).all() and (cp.factors[1] >= 0).all()
    assert (cp.factors[2] < 0).any()
    assert cp.fit > 0.99
    start = [np.abs(U) + 0.1 for U in F]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        kept = tk.non_negative_cp(np.abs(X), 3, init=(np.array([2.0, 3.0, 4.0]), start), fixed_modes=[1],
                                  max_iter=3, tol=0)
    np.testing.assert_array_equal(kept.factors[1], start[1])
    with pytest.raises(ValueError, match=r"^nonnegative_modes leaves modes unconstrained, which needs method='hals'"):
        tk.non_negative_cp(X, 2, method="mu", nonnegative_modes=[0])


def test_default_calls_repeat_their_bits_also_with_a_rank_beyond_a_mode():
    """``random_state=None`` seeds what a default call draws: the SVD starts of CP and of the non-negative
    methods pad a rank beyond a mode's size with random columns (once drawn from fresh entropy: two default
    calls differed), and cp_apr's default start is random: the same call gives the same bits. ``init="random"``
    asked for still starts from fresh entropy (CP, HOOI, the non-negative methods), and a seed repeats it. No
    Generator from OS entropy is made for a start that draws nothing."""
    import warnings

    import numpy as np

    import tuckerkit as tk
    from tuckerkit import _validation

    X = np.random.default_rng(0).standard_normal((4, 5, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rank in (3, 7):
            a, b = tk.cp_als(X, rank, max_iter=5), tk.cp_als(X, rank, max_iter=5)
            assert all(u.tobytes() == v.tobytes() for u, v in zip(a.factors, b.factors, strict=True))
            assert a.weights.tobytes() == b.weights.tobytes()
        c, d = tk.cp_als(X, 7, init="random", max_iter=5), tk.cp_als(X, 7, init="random", max_iter=5)
        assert any(u.tobytes() != v.tobytes() for u, v in zip(c.factors, d.factors, strict=True))
        e, f = (tk.cp_als(X, 7, init="random", random_state=3, max_iter=5) for _ in range(2))
        assert all(u.tobytes() == v.tobytes() for u, v in zip(e.factors, f.factors, strict=True))
        g, h = tk.hooi(X, 2, init="random", max_iter=3), tk.hooi(X, 2, init="random", max_iter=3)
        assert any(u.tobytes() != v.tobytes() for u, v in zip(g.factors, h.factors, strict=True))
        P = np.abs(X)  # the non-negative methods' SVD starts pad the same way; cp_apr's default start is random
        for call in (lambda **kw: tk.non_negative_cp(P, 7, max_iter=5, **kw),
                     lambda **kw: tk.non_negative_tucker(P, (2, 2, 2), max_iter=5, **kw)):
            a, b = call(), call()
            assert all(u.tobytes() == v.tobytes() for u, v in zip(a.factors, b.factors, strict=True))
            c, d = call(init="random"), call(init="random")
            assert any(u.tobytes() != v.tobytes() for u, v in zip(c.factors, d.factors, strict=True))
        a, b = (tk.cp_apr(3 * P, 3, max_iter=3) for _ in range(2))
        assert all(u.tobytes() == v.tobytes() for u, v in zip(a.factors, b.factors, strict=True))
        seeds = []
        real = _validation.check_random_state

        def spy(random_state):
            seeds.append(random_state)
            return real(random_state)

        import tuckerkit.decomposition._cp as cp_mod
        import tuckerkit.decomposition._tucker as tucker_mod

        for mod in (cp_mod, tucker_mod):
            mod.check_random_state, before = spy, mod.check_random_state
            try:
                (tk.cp_als if mod is cp_mod else tk.hooi)(X, 3, max_iter=3)
            finally:
                mod.check_random_state = before
        assert None not in seeds and seeds
