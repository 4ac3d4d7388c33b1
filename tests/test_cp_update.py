"""CP-ALS's compiled factor update (Cholesky row solve and column norms, decomposition/_cp_kernels.py) against
scipy's cho_solve and numpy's norms; the same bits for 1 and 2 threads; a singular system goes to the
least-squares fallback."""

import numpy as np
import pytest
import scipy.linalg

import tuckerkit as tk


def _system(I, R, dtype, seed):  # noqa: E741
    """A well-conditioned SPD V (eigenvalues 1..4) and an M with odd strides (a strided view of a larger array)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((R, R)))
    V = ((Q * np.linspace(1.0, 4.0, R)) @ Q.T).astype(dtype)
    V = (V + V.T) / 2
    big = rng.standard_normal((2 * I + 1, 3 * R + 2)).astype(dtype)
    M = big[1::2, 2::3][:I, :R]
    assert M.shape == (I, R) and (M.size == 1 or not M.flags.c_contiguous)
    return V, M


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("R", [1, 2, 3, 7, 16, 17, 33])
@pytest.mark.parametrize("I", [1, 5, 1000])
def test_fused_update_matches_cho_solve_and_norms(I, R, dtype):  # noqa: E741
    from tuckerkit.decomposition._linalg import cp_factor_update

    V, M = _system(I, R, dtype, 10 * I + R)
    want = scipy.linalg.cho_solve(scipy.linalg.cho_factor(V.T), M.T).T
    eps = np.finfo(dtype).eps
    tol = 10 * R * eps * np.abs(want).max()
    out = np.empty((I, R), dtype)
    assert cp_factor_update(V, M, out, False) is None
    np.testing.assert_allclose(out, want, rtol=0, atol=tol)
    out2 = np.full((I, R), np.nan, dtype)
    norms = cp_factor_update(V, M, out2, True)
    want_norms = np.linalg.norm(want.astype(np.float64), axis=0)
    assert norms.dtype == np.float64 and out2.dtype == dtype
    np.testing.assert_allclose(norms, want_norms, rtol=10 * R * eps, atol=0)
    np.testing.assert_allclose(out2, want / want_norms, rtol=0, atol=10 * R * eps * np.abs(want / want_norms).max())
    np.testing.assert_allclose(out2 * norms.astype(dtype), out, rtol=0, atol=tol)


def test_fused_update_zero_column_keeps_norm_one():
    from tuckerkit.decomposition._linalg import cp_factor_update

    V, M = _system(40, 5, np.float64, 1)
    M = np.ascontiguousarray(M)
    M[:, 2] = 0
    V[2, :] = V[:, 2] = 0
    V[2, 2] = 1.0
    out = np.empty_like(M)
    norms = cp_factor_update(V, M, out, True)
    assert norms[2] == 1.0 and not out[:, 2].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_update_same_bits_for_any_threads(dtype):
    """Rows in fixed pieces, the pieces' sums of squares added in order: 1 and 2 threads, twice, same bits."""
    from tuckerkit.decomposition._linalg import cp_factor_update

    V, M = _system(5003, 16, dtype, 3)
    import numba

    outs = []
    before = numba.get_num_threads()
    try:
        for workers in (1, 2, 2, 1):
            numba.set_num_threads(min(workers, numba.config.NUMBA_NUM_THREADS))
            out = np.empty((5003, 16), dtype)
            norms = cp_factor_update(V, M, out, True)
            outs.append(out.tobytes() + norms.tobytes())
    finally:
        numba.set_num_threads(before)
    assert len(set(outs)) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_singular_system_goes_to_the_least_squares_fallback(dtype, monkeypatch):
    """A singular V (repeated factor columns): the fused update declines, writing nothing, and cp_als takes
    spd_solve's least squares."""
    import tuckerkit as tk
    from tuckerkit.decomposition import _cp
    from tuckerkit.decomposition._linalg import cp_factor_update

    V = np.ones((3, 3), dtype)
    V[2, 2] = 0.5  # indefinite
    out = np.full((4, 3), 7, dtype)
    assert cp_factor_update(V, np.ones((4, 3), dtype), out, True) is False
    assert (out == 7).all()

    rng = np.random.default_rng(0)
    A, B, C = (rng.standard_normal((n, 1)).astype(dtype) for n in (6, 7, 8))
    X = np.einsum("ir,jr,kr->ijk", A, B, C)
    calls = []
    real = _cp.spd_solve
    monkeypatch.setattr(_cp, "spd_solve", lambda V, M: calls.append(1) or real(V, M))
    init = [np.repeat(U, 2, axis=1) for U in (A, B, C)]  # two equal columns: every Hadamard of Grams singular
    res = tk.cp_als(X, 2, init=init, max_iter=3, tol=0, linesearch=False)
    assert calls and all(np.isfinite(U).all() for U in res.factors)


def test_cp_als_same_bits_for_any_threads_dense_and_sparse():
    import tuckerkit as tk
    from tuckerkit.sparse import COOTensor

    rng = np.random.default_rng(5)
    X = rng.standard_normal((30, 1100, 20))
    coords = np.stack([rng.integers(0, s, 4000) for s in (1500, 40, 30)], axis=1)
    S = COOTensor(coords, rng.standard_normal(4000), (1500, 40, 30))
    for T in (X, S):
        runs = set()
        for workers in (1, 2, 2):
            from threadpoolctl import threadpool_limits

            with threadpool_limits(workers):
                r = tk.cp_als(T, 7, max_iter=6, tol=0, random_state=0)
            runs.add(r.weights.tobytes() + b"".join(U.tobytes() for U in r.factors))
        assert len(runs) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("R", [3, 16, 64])
def test_stack_and_heap_row_solves_give_the_same_bits(R, dtype):
    """The row solve keeps its work arrays on the stack up to STACK_MAX_R (no numba runtime) and takes them
    from numba's allocator beyond: the two kernels run the same operations, so the same bits, and R one past
    the bound goes to the heap kernel with the answer of scipy's cho_solve."""
    from tuckerkit.decomposition._cp_kernels import (
        CHUNK,
        STACK_MAX_R,
        cholesky_solve_rows,
        cholesky_solve_rows_heap,
    )
    from tuckerkit.decomposition._linalg import cp_factor_update

    assert R <= STACK_MAX_R == 64
    V, M = _system(700, R, dtype, R)
    L = np.linalg.cholesky(V).astype(dtype)
    M = np.ascontiguousarray(M)
    outs = []
    for kernel in (cholesky_solve_rows, cholesky_solve_rows_heap):
        out, ss = np.full_like(M, np.nan), np.full((-(-700 // CHUNK), R), np.nan)
        kernel(M, L, out, ss)
        outs.append((out, ss))
    assert outs[0][0].tobytes() == outs[1][0].tobytes() and outs[0][1].tobytes() == outs[1][1].tobytes()
    np.testing.assert_allclose(outs[0][1].sum(axis=0), (outs[0][0].astype(np.float64) ** 2).sum(axis=0),
                               rtol=100 * np.finfo(dtype).eps)
    V, M = _system(300, STACK_MAX_R + 1, dtype, 5)
    want = scipy.linalg.cho_solve(scipy.linalg.cho_factor(V.T), M.T).T
    out = np.empty(M.shape, dtype)
    assert cp_factor_update(V, M, out, False) is None
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(out, want, rtol=0, atol=10 * M.shape[1] * eps * np.abs(want).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("R", [1, 4, 32])
def test_fused_update_declines_what_the_lapack_route_declines(R, dtype, monkeypatch):
    """Up to FUSED_MAX_R the Cholesky factor is the compiled kernel's: it accepts and declines exactly the
    matrices the LAPACK route does (a negative or NaN pivot, or a pivot of rounding size: singular in
    working precision), and where it declines it writes nothing."""
    from tuckerkit.decomposition import _linalg
    from tuckerkit.decomposition._cp_kernels import FUSED_MAX_R
    from tuckerkit.decomposition._linalg import cp_factor_update

    assert R <= FUSED_MAX_R == 32
    rng = np.random.default_rng(R)
    Q, _ = np.linalg.qr(rng.standard_normal((R, R)))
    eps = np.finfo(dtype).eps

    def spd(w):
        V = ((Q * w) @ Q.T).astype(dtype)
        return (V + V.T) / 2

    def tiny_last_pivot():
        # a definite block and a last pivot of 0.01 eps of the largest, exactly (no rounding in its Schur
        # complement): positive, so LAPACK factors it, and singular in working precision by the rule
        V = np.zeros((R, R), dtype)
        Q1, _ = np.linalg.qr(rng.standard_normal((R - 1, R - 1)))
        V[:-1, :-1] = (Q1 * np.linspace(1.0, 4.0, R - 1)) @ Q1.T
        V[:-1, :-1] = (V[:-1, :-1] + V[:-1, :-1].T) / 2
        V[-1, -1] = 0.01 * eps
        return V

    matrices = {
        "definite": spd(np.linspace(1.0, 4.0, R)),
        "rounding-size pivot": tiny_last_pivot() if R > 1 else None,
        "negative": spd(np.r_[np.linspace(1.0, 4.0, R - 1), -0.5]),
    }
    lapack = (*_linalg._row_solve()[:5], 0)  # the same update with numpy's Cholesky and _definite
    for name, V in matrices.items():
        if V is None:
            continue
        M = rng.standard_normal((50, R)).astype(dtype)
        got = []
        for route in (None, lapack):
            if route is not None:
                monkeypatch.setattr(_linalg, "_ROW_SOLVE", route)
            out = np.full((50, R), 7, dtype)
            got.append((cp_factor_update(V, M, out, True), out))
            monkeypatch.undo()
        (n_fused, out_fused), (n_lapack, out_lapack) = got
        assert (n_fused is False) == (n_lapack is False) == (name != "definite"), name
        if n_fused is False:
            assert (out_fused == 7).all()
        else:
            scale = np.abs(out_lapack).max()
            np.testing.assert_allclose(out_fused, out_lapack, rtol=0, atol=100 * R * eps * scale)
            np.testing.assert_allclose(n_fused, n_lapack, rtol=100 * R * eps)
    V = np.eye(R, dtype=dtype)
    V[R - 1, R - 1] = np.nan
    out = np.full((5, R), 7, dtype)
    assert cp_factor_update(V, np.ones((5, R), dtype), out, False) is False and (out == 7).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_and_lapack_routes_reach_the_same_fits(dtype, monkeypatch):
    """A whole CP-ALS run (R = 5) with the fused update against the same run with numpy's Cholesky: the fits
    of every iteration agree to the dtype's rounding, and each route repeats its own bits."""
    import tuckerkit as tk
    from tuckerkit.decomposition import _linalg

    rng = np.random.default_rng(2)
    A, B, C = (rng.standard_normal((n, 5)) for n in (12, 13, 14))
    X = (np.einsum("ir,jr,kr->ijk", A, B, C) + 0.01 * rng.standard_normal((12, 13, 14))).astype(dtype)
    runs = {}
    for route in ("fused", "lapack", "fused"):
        if route == "lapack":
            monkeypatch.setattr(_linalg, "_ROW_SOLVE", (*_linalg._row_solve()[:5], 0))
        res = tk.cp_als(X, 5, max_iter=15, tol=0, random_state=0)
        monkeypatch.undo()
        bits = b"".join(U.tobytes() for U in res.factors)
        assert runs.setdefault(route, (bits, res.fit_history))[0] == bits
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(runs["fused"][1], runs["lapack"][1], rtol=0, atol=1e3 * eps)


def _grams(N, I, R, dtype, seed):  # noqa: E741
    rng = np.random.default_rng(seed)
    return np.stack([(U.T @ U).astype(dtype) for U in (rng.standard_normal((I + m, R)) for m in range(N))])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("I", "R"), [(1, 1), (7, 3), (13, 10), (200, 10), (1000, 16), (40, 32)])
@pytest.mark.parametrize("n", [0, 2])
def test_sweep_update_is_the_factor_update_with_the_new_gram_and_inner_products(I, R, dtype, n):  # noqa: E741
    """One compiled step (decomposition/_cp_kernels.py: sweep_update): V from the other modes' Grams, the
    solve and the norms the same bits as cp_factor_update's with that V, the mode's Gram replaced by the new
    factor's (in the call up to SWEEP_GRAM_MAX multiply-adds, else BLAS), the other Grams untouched, and the
    fit's inner products <M[:, r], U[:, r]> in float64."""
    from tuckerkit.decomposition._cp import _inner_columns
    from tuckerkit.decomposition._cp_kernels import SWEEP_GRAM_MAX
    from tuckerkit.decomposition._linalg import cp_factor_update, cp_sweep_update

    grams = _grams(3, I, R, dtype, I + R + n)
    _, M = _system(I, R, dtype, 7 * I + R)
    V = np.ones((R, R), dtype)
    for m in (0, 1, 2):
        if m != n:
            V *= grams[m]
    for normalize in (True, False):
        want = np.empty((I, R), dtype)
        want_norms = cp_factor_update(V, M, want, normalize)
        G = grams.copy()
        out = np.full((I, R), np.nan, dtype)
        norms, inner = cp_sweep_update(G, n, M, out, normalize, want_inner=True)
        assert np.array_equal(out, want)
        assert (norms is None) if not normalize else np.array_equal(norms, want_norms)
        assert all(np.array_equal(G[m], grams[m]) for m in (0, 1, 2) if m != n)
        ref = out.T.astype(np.float64) @ out.astype(np.float64)
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(G[n], ref, rtol=0, atol=2 * I * eps * np.abs(ref).max())
        assert np.array_equal(G[n], G[n].T)
        if I * R * (R + 1) // 2 > SWEEP_GRAM_MAX:
            assert np.array_equal(G[n], out.T @ out)  # BLAS's Gram for a long factor
        inner_ref = _inner_columns(np, M, out)
        assert inner.dtype == np.float64
        np.testing.assert_allclose(inner, inner_ref, rtol=0, atol=2 * I * np.finfo(np.float64).eps
                                   * np.abs(M.astype(np.float64) * out).sum(axis=0).max())
        assert cp_sweep_update(G.copy(), n, M, out, normalize, want_inner=False)[1] is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sweep_update_writes_nothing_where_v_is_not_definite(dtype):
    from tuckerkit.decomposition._linalg import cp_sweep_update

    grams = _grams(3, 20, 4, dtype, 1)
    grams[1][3, :] = grams[1][:, 3] = 0  # V's last row and column zero: singular
    G = grams.copy()
    out = np.full((20, 4), 7, dtype)
    M = np.ones((20, 4), dtype)
    assert cp_sweep_update(G, 0, M, out, True, want_inner=True) == (False, None)
    assert (out == 7).all() and np.array_equal(G, grams)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("R", [2, 16, 32])
def test_a_long_factors_sweep_step_splits_its_rows_with_the_same_bits(R, dtype):
    """From SWEEP_PARALLEL_ROWS rows (and a Gram left to BLAS) the one-call step runs as V's factor, the row
    solve and the column scaling cut into whole CHUNK-row pieces for the workers, and the norms and inner
    products as before: the factor, norms, inner products and new Gram bit for bit the one call's, for 2 and 3
    workers; V not definite still writes nothing."""
    from tuckerkit.decomposition._linalg import SWEEP_PARALLEL_ROWS, cp_sweep_update
    from tuckerkit.engine import ExecutionPolicy

    I = SWEEP_PARALLEL_ROWS + 1000  # noqa: E741  (not a multiple of CHUNK)
    grams = _grams(3, I, R, dtype, 2)
    M = np.random.default_rng(3).standard_normal((I, R)).astype(dtype)
    outs = []
    for policy in (None, ExecutionPolicy(1), ExecutionPolicy(2), ExecutionPolicy(3)):
        G, out = grams.copy(), np.empty((I, R), dtype)
        norms, inner = cp_sweep_update(G, 0, M, out, True, want_inner=True, policy=policy)
        outs.append((out.tobytes(), norms.tobytes(), inner.tobytes(), G.tobytes()))
    assert outs[1:] == outs[:1] * 3
    G, out = grams.copy(), np.empty((I, R), dtype)
    assert cp_sweep_update(G, 0, M, out, False, want_inner=False, policy=ExecutionPolicy(2)) == (None, None)
    ref = np.empty((I, R), dtype)
    cp_sweep_update(grams.copy(), 0, M, ref, False, want_inner=False)
    assert np.array_equal(out, ref)
    V = grams[1] * grams[2]
    np.testing.assert_allclose(out, scipy.linalg.cho_solve(scipy.linalg.cho_factor(V.astype(np.float64)),
                                                           M.T.astype(np.float64)).T,
                               rtol=0, atol=1e3 * R * np.finfo(dtype).eps * np.abs(ref).max())
    bad = grams.copy()
    bad[1][R - 1, :] = bad[1][:, R - 1] = 0
    out = np.full((I, R), 7, dtype)
    assert cp_sweep_update(bad, 0, M, out, True, want_inner=True, policy=ExecutionPolicy(2)) == (False, None)
    assert (out == 7).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N", [2, 3, 5])
def test_compiled_fit_error_is_the_numpy_formula(N, dtype):
    from tuckerkit.decomposition._cp import _fit_from_inner, _fit_of_error
    from tuckerkit.decomposition._linalg import cp_fit_error

    rng = np.random.default_rng(N)
    grams = _grams(N, 9, 4, dtype, N)
    inner, weights, norm = rng.standard_normal(4), rng.random(4).astype(dtype) + 0.5, 3.7
    want = _fit_from_inner(np, norm, inner, weights, list(grams))
    got = _fit_of_error(norm, cp_fit_error(inner, weights, grams, norm))
    err2 = 1.0 - 2 * (inner * weights / norm).sum() / norm
    scale = 1.0 + abs(err2) + abs(want)
    assert abs(got - want) <= 1e2 * np.finfo(np.float64).eps * scale
    assert _fit_of_error(0.0, 0.3) == 1.0


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_call_steps_and_the_numpy_steps_reach_the_same_fits(dtype, monkeypatch):
    """A whole CP-ALS run (R = 5, the default line search) by one compiled call per step against the same run
    by the numpy calls around the fused update: the fits of every iteration agree to the dtype's rounding,
    and each route repeats its own bits."""
    import tuckerkit as tk
    import tuckerkit.decomposition._cp as cp_mod

    rng = np.random.default_rng(4)
    A, B, C = (rng.standard_normal((n, 5)) for n in (12, 13, 14))
    X = (np.einsum("ir,jr,kr->ijk", A, B, C) + 0.01 * rng.standard_normal((12, 13, 14))).astype(dtype)
    calls = []
    real_update, real_fits = cp_mod.cp_sweep_update, cp_mod.sweep_fits

    def counted(*args, **kwargs):
        calls.append(1)
        return real_update(*args, **kwargs)

    monkeypatch.setattr(cp_mod, "cp_sweep_update", counted)
    monkeypatch.setattr(cp_mod, "_SMALL_SWEEPS", False)  # (the direct route's steps: the compiled sweep has its own)
    runs = {}
    for route in ("one call", "numpy", "one call"):
        monkeypatch.setattr(cp_mod, "sweep_fits", real_fits if route == "one call" else lambda R, dtype: False)
        before = len(calls)
        res = tk.cp_als(X, 5, max_iter=12, tol=0, random_state=0)
        assert len(calls) - before == (36 if route == "one call" else 0)  # 12 sweeps of 3 steps
        bits = b"".join(U.tobytes() for U in res.factors)
        assert runs.setdefault(route, (bits, res.fit_history))[0] == bits
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(runs["one call"][1], runs["numpy"][1], rtol=0, atol=1e3 * eps)


def _model_fit(X64, weights, factors):
    """``1 - ||X - X_hat|| / ||X||`` of a CP model, in float64 from its (float32) parts."""
    import tuckerkit as tk

    Xh = tk.CPTensor(np.asarray(weights, np.float64), tuple(np.asarray(U, np.float64) for U in factors)).to_dense()
    return 1 - np.linalg.norm(X64 - Xh) / np.linalg.norm(X64)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("linesearch", [False, True])
@pytest.mark.parametrize(("shape", "order"), [((6, 7, 5, 8), "F"), ((6, 7, 5, 8), "C"), ((9, 8, 7), "C"),
                                              ((9, 8, 7), "F")])
def test_float32_fit_is_the_models_fit_where_components_cancel(shape, order, linesearch, compiled, monkeypatch):
    """Float32 CP-ALS runs from starts with two equal columns in every factor: in some, two components grow to
    weights of 10^2-10^4 ``||X||`` that cancel (a two-factor degeneracy; which seeds do depends on rounding, so
    the test takes every seed of 24 whose run gets there and needs at least one). The fit reported at each
    iteration is the fit of the model the callback sees, to ``eps (sum |w| / ||X||) / (1 - fit)`` (the formula's
    terms carry the float32 MTTKRP's rounding times the weights: measured <= 1.3 such units over 12 seeds, both
    routes). With float32 Grams in ``||X_hat||^2`` it was off by up to 0.43 (1.0 reported where the model's fit
    was 0.567)."""
    import warnings

    import tuckerkit as tk
    import tuckerkit.decomposition._cp as cp_mod

    monkeypatch.setattr(cp_mod, "_SMALL_SWEEPS", compiled)
    eps = np.finfo(np.float32).eps
    R, degenerate = 3, 0
    for seed in range(1000, 1024):
        rng = np.random.default_rng(seed)
        F = [rng.standard_normal((n, R)) for n in shape]
        X = tk.CPTensor(np.ones(R), tuple(F)).to_dense()
        E = rng.standard_normal(shape)
        X = np.asarray((X + 1e-2 * np.linalg.norm(X) / np.linalg.norm(E) * E).astype(np.float32), order=order)
        X64 = X.astype(np.float64)
        nx = np.linalg.norm(X64)
        start = []
        for n in shape:
            U = rng.standard_normal((n, R))
            U[:, 1] = U[:, 0]
            start.append(U)
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tk.ConvergenceWarning)
            res = tk.cp_als(X, R, init=start, max_iter=12, tol=0, linesearch=linesearch,
                            callback=lambda s, seen=seen: seen.append((s.fit, s.weights.copy(),
                                                                       [U.copy() for U in s.factors])))
        assert res.plans[0].kind == ("mttkrp_compiled" if compiled else "mttkrp")
        if max(np.abs(w).sum() for _, w, _ in seen) / nx < 100:
            continue
        degenerate += 1
        for fit, w, factors in seen:
            true = _model_fit(X64, w, factors)
            assert abs(fit - true) <= 10 * eps * np.abs(w).sum() / nx / (1 - true)
    assert degenerate  # (the case the test is about)


def test_fit_grams_widen_short_factors_always_and_long_ones_where_weights_are_large(rng):
    """``_fit_grams``: a float32 model's Grams for the fit in float64 (each entry the float64 sum of the widened
    products: to float64 rounding of the exact Gram), always for short factors and for long ones where the
    weights exceed ``4 sqrt(R) ||X||`` (a degeneracy); long factors with ordinary weights keep the float32
    Grams (as given, stacked); a float64 model's are returned as given."""
    from tuckerkit.decomposition._cp import _fit_grams

    R = 8
    short = [rng.standard_normal((n, R)).astype(np.float32) for n in (30, 40, 50)]
    long_ = [rng.standard_normal((n, R)).astype(np.float32) for n in (30, 40000, 50)]
    for F in (short, long_):
        exact = np.stack([U.astype(np.float64).T @ U.astype(np.float64) for U in F])
        given = [U.T @ U for U in F]
        big = _fit_grams(F, given, np.full(R, 100.0), 1.0)  # sum |w| = 800 > 4 sqrt(8): widened
        assert big.dtype == np.float64
        np.testing.assert_allclose(big, exact, rtol=0, atol=50 * np.finfo(np.float64).eps * np.abs(exact).max())
        got = _fit_grams(F, given, np.full(R, 0.1), 1.0)  # sum |w| = 0.8
        if F is short:
            np.testing.assert_array_equal(got, big)
        else:
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, np.stack(given))
    F64 = [U.astype(np.float64) for U in short]
    stack = np.stack([U.T @ U for U in F64])
    assert _fit_grams(F64, stack, np.full(R, 100.0), 1.0) is stack


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_3way_sweeps_one_mode_half_is_one_fused_pass(order, dtype, monkeypatch, planned_cp):
    """CP-ALS on a 3-way tensor past the small routes: the half of one mode (C order's first, F order's last)
    takes its MTTKRP in one pass (the compiled product with the middle factor summed against the unit-stride
    factor in cache) instead of the rank-outer partial and a batched matrix-vector product. Once a sweep;
    the fits of every iteration those of the two steps to rounding; the same bits on a repeat."""
    from tuckerkit.engine import _simd, _sweeps

    if not _simd.simd_supported():
        pytest.skip("the compiled kernels need AVX2 and FMA")
    rng = np.random.default_rng(5)
    shape = (90, 70, 80)
    X = np.asarray(tk.CPTensor(np.ones(4), tuple(rng.standard_normal((s, 4)) for s in shape)).to_dense()
                   + 0.1 * rng.standard_normal(shape), dtype=dtype, order=order)
    init = [rng.standard_normal((s, 6)).astype(dtype) for s in shape]
    calls = []
    real = _sweeps.MttkrpTree._fused

    def counted(self, *args):
        M = real(self, *args)
        calls.append(M is not None)
        return M

    def fits(fused: bool) -> tuple[list[float], bytes]:
        monkeypatch.setattr(_sweeps, "FUSE_LAST_GEMV", fused)
        seen: list[float] = []
        res = tk.cp_als(X, 6, init=init, max_iter=6, tol=0, linesearch=False,
                        callback=lambda st: seen.append(st.fit) and None)
        return seen, b"".join(np.ascontiguousarray(U).tobytes() for U in res.factors)

    monkeypatch.setattr(_sweeps.MttkrpTree, "_fused", counted)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP", False)  # (the two-pass tree; the multi-sweep one: below)
    with pytest.warns(tk.ConvergenceWarning):
        one, bits = fits(True)
    assert calls == [True] * 6
    with pytest.warns(tk.ConvergenceWarning):
        assert fits(True)[1] == bits
    calls.clear()
    with pytest.warns(tk.ConvergenceWarning):
        two, _ = fits(False)
    assert calls == [False] * 6  # (declined: the flag off)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(one, two, rtol=0, atol=200 * eps)


@pytest.mark.parametrize("order", ["C", "F"])
def test_line_search_fit_takes_the_fused_modes_mttkrp(order, monkeypatch, planned_cp):
    """A jump's fit needs <X, X_hat>, the same from any mode's MTTKRP: on a 3-way tensor whose sweeps take the
    two-pass tree it takes the mode whose MTTKRP is one fused pass (C order's first, F order's last), not always
    the last; the run's fits are those of the last mode's choice to rounding. Where the sweeps take the
    multi-sweep tree, the jump's MTTKRP is that tree's first pass, kept for the next sweep
    (engine._sweeps.kept_first_mttkrp): the same fits to rounding again."""
    from tuckerkit.decomposition import _cp
    from tuckerkit.engine import _simd, _sweeps

    if not _simd.simd_supported():
        pytest.skip("the compiled kernels need AVX2 and FMA")
    rng = np.random.default_rng(3)
    shape = (90, 70, 80)
    X = np.asarray(tk.CPTensor(np.ones(3), tuple(rng.standard_normal((s, 3)) for s in shape)).to_dense()
                   + 0.1 * rng.standard_normal(shape), order=order)
    init = [rng.standard_normal((s, 5)) for s in shape]
    modes = []
    real = _cp.operand_mttkrp
    monkeypatch.setattr(_cp, "operand_mttkrp", lambda op, F, n, pol: modes.append(n) or real(op, F, n, pol))
    with pytest.warns(tk.ConvergenceWarning):
        kept = tk.cp_als(X, 5, init=init, max_iter=12, tol=0)
    assert modes == []  # (the multi-sweep tree's pass, kept)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP", False)
    with pytest.warns(tk.ConvergenceWarning):
        new = tk.cp_als(X, 5, init=init, max_iter=12, tol=0)
    assert modes and set(modes) == {0 if order == "C" else 2}
    # (every read of X counted, the jumps' too: the kept pass saves a sweep's, the two-pass tree reads more)
    assert kept.passes_per_iteration < new.passes_per_iteration
    monkeypatch.setattr(_cp, "_jump_fit_mode", lambda X, N, r, p: N - 1)
    with pytest.warns(tk.ConvergenceWarning):
        old = tk.cp_als(X, 5, init=init, max_iter=12, tol=0)
    # (12 ALS steps from other but equal products: 104 eps apart seen on an Intel Xeon with OpenBLAS's Haswell
    # kernels, within 100 eps elsewhere)
    np.testing.assert_allclose(new.fit_history, old.fit_history, rtol=0, atol=1e3 * np.finfo(np.float64).eps)
    np.testing.assert_allclose(kept.fit_history, old.fit_history, rtol=0, atol=1e3 * np.finfo(np.float64).eps)
