"""The result classes on inputs at their edges: integer arrays, subnormal and extreme magnitudes, empty or
non-finite models, pickling (a review of stop 104: each test failed on the code before it)."""

from __future__ import annotations

import copy
import pickle
import re

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.sparse import COOTensor


def _planted_cp(rng):
    w = rng.standard_normal(2)
    F = [rng.standard_normal((s, 2)) for s in (5, 6, 7)]
    X = np.einsum("r,ir,jr,kr->ijk", w, *F) + 0.1 * rng.standard_normal((5, 6, 7))
    return w, F, X


def test_norm_and_reconstruction_of_integer_models_are_float64():
    """A model built from integer arrays: its norm is the reconstruction's (it read 0.0: a power-of-two scale in
    the integer dtype was 0), and a CP model's reconstruction is float64 as a Tucker model's is (int8 products
    wrapped around: 16 for 10000)."""
    U = np.arange(6).reshape(3, 2)
    T = tk.TuckerTensor(np.ones((2, 2)), [U, U])
    C = tk.CPTensor(np.ones(2), [U, U])
    for M in (T, C):
        dense = M.to_dense()
        assert dense.dtype == np.float64
        assert M.norm() == pytest.approx(np.linalg.norm(dense), rel=4 * np.finfo(np.float64).eps)
    A = np.full((2, 1), 100, np.int8)
    small = tk.CPTensor(np.ones(1, np.int8), [A, A])
    np.testing.assert_array_equal(small.to_dense(), np.full((2, 2), 10000.0))
    assert small.norm() == pytest.approx(20000.0)


@pytest.mark.parametrize(("dtype", "tiny"), [(np.float64, 1e-320), (np.float32, 1e-42)])
def test_norm_of_subnormal_models(dtype, tiny):
    """Subnormal weights or core: the norm to a few ulps of the float64 reconstruction's (float64 raised a raw
    OverflowError from the scale 2**1060, float32 gave inf)."""
    U = np.ones((3, 1), dtype)
    for M in (tk.CPTensor(np.array([tiny], dtype), (U, U)), tk.TuckerTensor(np.array([[tiny]], dtype), (U, U))):
        ref = 3.0 * float(np.array(tiny, dtype))
        assert M.norm() == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("scale", [1.0, 1e-300, 1e300])
def test_sparse_relative_error_at_extreme_magnitudes(scale, rng):
    """The sparse route's residual is taken in units of X's largest value: 1e300 and 1e-300 give the dense
    route's error (their squares had overflowed or underflowed to an error of 0.0)."""
    w, F, X = _planted_cp(rng)
    G = np.zeros((2, 2, 2))
    G[0, 0, 0], G[1, 1, 1] = w * scale
    C, T = tk.CPTensor(w * scale, F), tk.TuckerTensor(G, F)
    dense = C.relative_error(X * scale)
    assert dense == pytest.approx(tk.CPTensor(w, F).relative_error(X), rel=1e-12)
    S = COOTensor.from_dense(X * scale)
    for M in (C, T):
        assert M.relative_error(S) == pytest.approx(dense, rel=1e-12)


def test_sparse_relative_error_of_an_exact_model_has_no_sqrt_eps_floor(rng):
    """A model against its own reconstruction as a COO tensor (every entry a nonzero): an error of a few eps,
    as the dense route gives (the model's norm less its squares at the nonzeros had left 1-2e-8)."""
    T = tk.TuckerTensor(rng.standard_normal((2, 2, 2)), [rng.standard_normal((3, 2)) for _ in range(3)])
    C = tk.CPTensor(rng.standard_normal(2), [rng.standard_normal((s, 2)) for s in (4, 5)])
    for M in (T, C):
        assert M.relative_error(COOTensor.from_dense(M.to_dense())) < 64 * np.finfo(np.float64).eps


def test_empty_models():
    """A Tucker model with a core extent 0 is the zero model: relative error 1.0 (a raw reshape error before),
    as a CP model of rank 0; one with no factors (a scalar model) reconstructs to its core and has its norm (both
    had failed naming an ``X`` never passed)."""
    T = tk.TuckerTensor(np.zeros((0, 2, 2)), [np.zeros((4, 0)), np.ones((5, 2)), np.ones((6, 2))])
    assert T.relative_error(np.ones((4, 5, 6))) == 1.0
    assert T.relative_error(np.zeros((4, 5, 6))) == 0.0
    C = tk.CPTensor(np.zeros(0), [np.zeros((4, 0)), np.zeros((5, 0))])
    assert C.relative_error(np.ones((4, 5))) == 1.0
    S = tk.TuckerTensor(np.array(-2.0), [])
    assert S.shape == () and S.to_dense() == -2.0 and S.to_dense().shape == () and S.norm() == 2.0


def test_non_finite_models_read_nan_or_inf_on_every_route(rng):
    """A model holding a NaN: norm and relative error NaN, dense and sparse alike (the dense route read inf);
    holding an infinity: both inf (the Tucker norm read NaN). X's own checks still come first."""
    Us = [rng.standard_normal((n, 2)) for n in (3, 4, 5)]
    X = rng.standard_normal((3, 4, 5))
    for bad, want in ((np.nan, np.isnan), (np.inf, np.isposinf)):
        G = rng.standard_normal((2, 2, 2))
        G[0, 0, 0] = bad
        w = np.array([1.0, bad])
        for M in (tk.TuckerTensor(G, Us), tk.CPTensor(w, Us)):
            assert want(M.norm())
            assert want(M.relative_error(X))
            assert want(M.relative_error(COOTensor.from_dense(X)))
            Xn = X.copy()
            Xn[0, 0, 0] = np.nan
            with pytest.raises(ValueError, match="NaN"):
                M.relative_error(Xn)


def test_pickled_and_copied_models_stay_read_only(rng):
    """Unpickling and copy.deepcopy give a model whose arrays cannot be written, as the original's (they came
    back writable: __post_init__ does not run), with the same bits and, for cp_apr's model, its own fields."""
    X = rng.standard_normal((4, 5, 6))
    H = tk.hosvd(X, 2)
    C = tk.CPTensor(np.ones(2), [rng.standard_normal((n, 2)) for n in (4, 5, 6)])
    for M, first in ((H, "core"), (C, "weights")):
        for M2 in (pickle.loads(pickle.dumps(M)), copy.deepcopy(M)):
            assert type(M2) is type(M)
            assert not getattr(M2, first).flags.writeable
            assert not any(U.flags.writeable for U in M2.factors)
            assert np.array_equal(getattr(M2, first), getattr(M, first))
            with pytest.raises(ValueError, match="read-only"):
                getattr(M2, first)[0] = 1.0


def test_a_numpy_true_from_a_callback_stops(rng):
    """A callback answering numpy's True (any comparison of numpy numbers) stops HOOI, CP-ALS and the
    non-negative and Poisson solvers as True does (it was ignored: ``is True``); other answers (None, 1, the
    state) do not stop."""
    X = rng.standard_normal((9, 10, 11))
    stop = lambda s: np.bool_(s.iteration >= 2)  # noqa: E731
    assert tk.hooi(X, 3, callback=stop).n_iter == 2
    assert tk.cp_als(X, 3, callback=stop).n_iter == 2
    assert tk.non_negative_cp(np.abs(X), 3, callback=stop).n_iter == 2
    assert tk.hooi(X, 3, callback=lambda s: np.int64(s.iteration) >= 3).n_iter == 3
    import warnings

    for answer in (None, 1, "stop"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tk.ConvergenceWarning)
            assert tk.hooi(X, 3, tol=0, max_iter=4, callback=lambda s, a=answer: a).n_iter == 4


def test_tucker_options_at_their_edges(rng):
    """``st_hosvd(order=)`` takes a 1-D integer array (refused as "a sequence of matrices"); ``max_error`` and
    ``sketch`` refuse strings ("0.3" was parsed, "no" turned the sketch on); a ``max_error`` below what the
    dtype's rounding leaves warns with the error reached (it was silently missed 146-fold); a fixed factor
    without orthonormal columns is refused (fit -2.76, worse than the zero model, with no message)."""
    import warnings

    X = rng.standard_normal((7, 8, 9))
    a = tk.st_hosvd(X, [3, 4, 5], order=np.array([2, 0, 1]))
    b = tk.st_hosvd(X, [3, 4, 5], order=[2, 0, 1])
    assert np.array_equal(a.core, b.core)
    with pytest.raises(TypeError, match=r"^max_error must be a number in \(0, 1\); received '0.3'$"):
        tk.hosvd(X, max_error="0.3")
    with pytest.raises(TypeError, match=r"^sketch must be True or False; received 'no'$"):
        tk.st_hosvd(X, [2, 2, 2], sketch="no")
    X32 = X.astype(np.float32)
    for f in (tk.hosvd, tk.st_hosvd):
        with pytest.warns(RuntimeWarning, match=r"max_error=1e-09 was not met: the relative error at ranks "
                                                r"\(7, 8, 9\) is [0-9.e-]+, the rounding of float32"):
            T = f(X32, max_error=1e-9)
        assert T.ranks == (7, 8, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T = tk.hosvd(X, max_error=0.5)
    assert 1 - T.fit <= 0.5
    A = rng.standard_normal((7, 3))
    F = tk.hosvd(X, [3, 4, 5]).factors
    with pytest.raises(ValueError, match=r"^fixed_factors: init's factor 0 does not have orthonormal columns"):
        tk.hooi(X, [3, 4, 5], init=[A, F[1], F[2]], fixed_factors=[0])
    Q = np.linalg.qr(A)[0]
    T = tk.hooi(X, [3, 4, 5], init=[Q, F[1], F[2]], fixed_factors=[0])
    assert np.array_equal(T.factors[0], Q) and 0 < T.fit < 1


def test_cp_fixed_mode_from_the_svd_start_is_the_exact_singular_basis(rng):
    """A fixed mode's SVD start is its final factor: the float64 leading singular vectors to a few eps (from the
    float32-product Gram it was 1e-8 off, and differed from TensorLy's by as much)."""
    X = np.einsum("ir,jr,kr->ijk", *[rng.standard_normal((n, 3)) for n in (60, 70, 80)])
    X += 0.1 * rng.standard_normal((60, 70, 80))
    for m in range(3):
        cp = tk.cp_als(X, 3, fixed_modes=[m])
        U = np.linalg.svd(np.moveaxis(X, m, 0).reshape(X.shape[m], -1), full_matrices=False)[0][:, :3]
        assert np.max(np.abs(np.abs(cp.factors[m]) - np.abs(U))) < 1e3 * np.finfo(np.float64).eps


def test_float32_cp_fit_is_accurate_whatever_the_layout():
    """A float32 C-ordered (200, 150, 10) tensor: its sums of 30000 terms no longer go to the small sweep's
    float32 chains (``beyond_direct``), so the reported fit is the true one to float32 rounding on every
    iteration's stop (it was 6e-5 off: a fit drop of 9e-6 stopped it as converged at iteration 14 while the
    true fit rose), and C and F order reach the same fit."""
    from tuckerkit.decomposition._small_cp import beyond_direct

    rng = np.random.default_rng(1)
    A = [rng.standard_normal((n, 4)) for n in (200, 150, 10)]
    for U in A:
        U[:, 1] = U[:, 0] + 0.3 * U[:, 1]
    X = np.einsum("ir,jr,kr->ijk", *A)
    X = (X + 0.05 * X.std() * rng.standard_normal(X.shape)).astype(np.float32)
    assert not beyond_direct(X, 4)
    fits = []
    for Y in (X, np.asfortranarray(X)):
        cp = tk.cp_als(Y, 4, linesearch=False, max_iter=500)
        assert abs(cp.fit - (1 - cp.relative_error(Y))) < 3e-6
        fits.append(cp.fit)
    assert min(fits) > 0.9498  # (the early stop had left the C-ordered run at 0.94934, true 0.94941)


def test_non_negative_and_poisson_starts_and_callback_state(rng):
    """``cp_apr`` refuses all-zero start weights (it ran to a zero model reported converged with KKT 0.0 and
    log-likelihood -inf); ``non_negative_tucker`` refuses an all-zero start factor as ``non_negative_cp`` does
    (it ran and blamed the data); ``cp_apr``'s callback state carries the weights, so the model it describes
    is the algorithm's (the factors alone, columns summing to 1, gave a total of 2 for 1037)."""
    import warnings

    X = rng.poisson(2.0, (5, 6, 7)).astype(float)
    with pytest.raises(ValueError, match=r"^init's weights are all zero; expected a nonzero start"):
        tk.cp_apr(X, 2, init=(np.zeros(2), [rng.random((n, 2)) for n in X.shape]))
    with pytest.raises(ValueError, match=r"^init factor 0 is all zeros; expected a nonzero start"):
        tk.non_negative_tucker(rng.random((5, 6, 7)), (2, 2, 2), init=[np.zeros((n, 2)) for n in (5, 6, 7)])
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        tk.cp_apr(X, 2, random_state=0, max_iter=3, callback=seen.append)
    s = seen[-1]
    total = np.einsum("r,ir,jr,kr->ijk", s.weights, *s.factors).sum()
    assert total == pytest.approx(X.sum(), rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_non_negative_float32_runs_reach_the_float64_error(dtype):
    """Near an exact fit the Grams' fit is rounding (float32's 5e-5 off): its noise "decreased" and stopped
    ``non_negative_cp`` as converged at 9.05e-4 and ``non_negative_tucker`` at 6.35e-4 where 1.83e-4 / 1.85e-4 are
    reached; the residual's fit now steers the stop, so float32 reaches float64's error to a few percent, and the
    reported fit is the true one."""
    rng = np.random.default_rng(0)
    A, B, C = (rng.random((n, 3)) for n in (20, 21, 22))
    X = (np.einsum("ir,jr,kr->ijk", A, B, C) + 1e-4 * rng.standard_normal((20, 21, 22))).astype(dtype)
    M = tk.non_negative_cp(X, 3, random_state=0, tol=1e-8, max_iter=1000)
    T = tk.non_negative_tucker(X, (3, 3, 3), random_state=0, tol=1e-8, max_iter=1000)
    assert M.converged and T.converged
    assert 1 - M.fit < 1.9e-4 and 1 - T.fit < 1.9e-4
    for model in (M, T):
        assert abs((1 - model.fit) - model.relative_error(X)) < 1e-7 * model.relative_error(X)  # (2e-13 seen)


def test_float32_cp_als_near_an_exact_fit_reaches_float64s_error():
    """CP-ALS on planted float32 tensors (30 x 31 x 32, noise 1e-4): the stop near 1 is steered by the residual's
    fit, so float32 reaches float64's error (it stopped as converged at 8e-4 - 1.7e-3 on the Grams' rounding
    noise, where 1e-4 is reached), the reported fit the true one."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        A, B, C = (rng.standard_normal((n, 3)) for n in (30, 31, 32))
        A[:, 1] = A[:, 0] + 0.2 * A[:, 1]
        X = np.einsum("ir,jr,kr->ijk", A, B, C)
        X += 1e-4 * X.std() * rng.standard_normal(X.shape)
        errs = []
        for dt in (np.float64, np.float32):
            M = tk.cp_als(X.astype(dt), 3, random_state=0, tol=1e-8, max_iter=2000, linesearch=False)
            assert M.converged
            errs.append(M.relative_error(X.astype(dt)))
            assert abs((1 - M.fit) - errs[-1]) < 1e-7 * errs[-1]
        assert errs[1] < 1.05 * errs[0]


def test_float32_cp_als_line_search_judges_its_jumps_by_the_residual_near_an_exact_fit():
    """The line search's jumps were judged by two fits from the Grams, rounding noise in float32 near an exact
    fit: a jump that raised the error from 1.22e-4 to 1.79e-4 was kept and the run stopped there as converged.
    Now the residuals' fits judge a jump in that regime: the fit stays monotone (the documented promise) and
    float32 reaches float64's error."""
    rng = np.random.default_rng(0)
    X = np.einsum("ir,jr,kr->ijk", *(rng.standard_normal((n, 4)) for n in (30, 31, 32)))
    X += 1e-4 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(X.shape)
    X32 = X.astype(np.float32)
    seen = []
    a = tk.cp_als(X32, 4, init="random", random_state=0, callback=lambda s: seen.append(s.fit))
    ref = tk.cp_als(X, 4, init="random", random_state=0)
    assert a.converged and a.relative_error(X32) < 1.01 * ref.relative_error(X)
    assert np.all(np.diff(seen) >= 0), np.diff(seen).min()  # (the fits seen are the residual's: monotone)
    est = tk.CPDecomposer(rank=4, init="random", random_state=0).fit(X32)
    assert 1 - est.fit_ < 1.01 * ref.relative_error(X)


def test_float32_hooi_near_an_exact_fit_sees_the_residuals_fit():
    """HOOI's fit from the core's norm was 1.2e-4 off an error of 9.9e-6 in float32: the callback saw 0.99987809
    for a model whose fit is 0.99999015, and a 'decrease' of that noise stopped the run. Each iteration's fit near
    1 is now the residual's: the callback, the history and the result agree, and float32 reaches float64's
    error."""
    rng = np.random.default_rng(1)
    G = rng.standard_normal((3, 4, 5))
    Us = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip((30, 32, 34), (3, 4, 5), strict=True)]
    X = np.asarray(tk.multi_ttm(G, Us))
    X += 1e-5 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(X.shape)
    X32 = X.astype(np.float32)
    seen = []
    T = tk.hooi(X32, (3, 4, 5), callback=lambda s: seen.append(s.fit))
    assert seen == list(T.fit_history) and seen[-1] == T.fit
    assert abs((1 - T.fit) - T.relative_error(X32)) < 1e-7 * T.relative_error(X32)  # (5e-12 seen)
    assert T.relative_error(X) < 1.001 * tk.hooi(X, (3, 4, 5)).relative_error(X)


def test_verbose_closing_line_names_the_rule_that_fired_and_the_reported_fit(rng, capsys):
    """The closing line said "fit change below tol" whatever stopped the run (a fit decrease of 5.7e-5 at
    tol=1e-5, CP-APR's KKT rule as "tol=0", an all-zero non-negative model as "converged"), and printed the last
    iteration's fit, not the one the result reports."""
    X = rng.standard_normal((8, 9, 10))
    T = tk.hooi(X, (2, 3, 2), tol=1e-3, verbose=True)
    last = capsys.readouterr().err.splitlines()[-1]
    assert re.fullmatch(rf"hooi converged after {T.n_iter} iterations? \(fit change [0-9.e-]+ below tol=0\.001\), "
                        rf"fit {T.fit:.10f}", last), last
    Xp = np.random.default_rng(0).poisson(1.0, (10, 11, 12)).astype(float)
    M = tk.cp_apr(Xp, 2, random_state=0, verbose=True)
    last = capsys.readouterr().err.splitlines()[-1]
    assert M.converged and M.kkt_violation < 1e-4
    assert last == (f"cp_apr converged after {M.n_iter} iterations (KKT violation {M.kkt_violation:.3g} below "
                    f"tol=0.0001 in every subproblem), fit {M.fit:.10f}")
    with pytest.warns(tk.ConvergenceWarning, match="KKT tolerance tol=0.0001"):
        M = tk.cp_apr(Xp, 2, random_state=0, verbose=True, max_iter=3)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"cp_apr reached max_iter=3 without converging (KKT tolerance tol=0.0001), fit {M.fit:.10f}")
    with pytest.warns(tk.ConvergenceWarning, match="ended at an all-zero model"):
        N = tk.non_negative_cp(-np.abs(np.random.default_rng(0).standard_normal((10, 11, 12))), 2, verbose=True)
    assert not N.converged
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"non_negative_cp(hals) ended at an all-zero model after {N.n_iter} iterations, fit 0.0000000000")


def test_monitor_names_a_fit_decrease_as_its_reason(capsys):
    from tuckerkit.decomposition._monitor import Monitor

    mon = Monitor("m", 1e-5, 10, None, True)
    assert not mon.step(1, 0.5, []) and not mon.step(2, 0.6, [])
    assert mon.step(3, 0.59994, [])
    mon.finish()
    assert capsys.readouterr().err.splitlines()[-1] == (
        "m converged after 3 iterations (the fit decreased by 6e-05: no progress left at this precision; "
        "tol=1e-05), fit 0.5999400000")


def test_elapsed_counts_from_the_call_including_its_start():
    """``IterationState.elapsed`` ("seconds since the decomposition started") was counted from the loop, after
    the start (a sparse SVD start: 0.010 s reported of 0.131 s)."""
    import time

    from tuckerkit.decomposition import _tucker

    real = _tucker._st_hosvd

    def slow_start(*args, **kwargs):
        time.sleep(0.2)
        return real(*args, **kwargs)

    X = np.random.default_rng(0).standard_normal((6, 7, 8))
    seen = []
    _tucker._st_hosvd = slow_start
    try:
        tk.hooi(X, 2, max_iter=1, tol=0.5, callback=lambda s: seen.append(s.elapsed))
        with pytest.warns(tk.ConvergenceWarning, match="KKT tolerance"):
            M = tk.cp_apr(np.random.default_rng(0).poisson(1.0, (4, 5, 6)).astype(float), 2, max_iter=1,
                          callback=lambda s: seen.append(s.elapsed))
    finally:
        _tucker._st_hosvd = real
    assert seen[0] >= 0.2  # (the start's 0.2 s included)
    assert 0 < seen[1] < 0.2  # (cp_apr's own clock: not the earlier call's)
    # CP-APR reads every nonzero per mode to gather, once per inner step, and once for the fit: it reported 0
    assert M.passes_per_iteration >= 2 * 3 + 1


def test_float32_cp_als_does_not_stop_on_a_real_step_back():
    """Single precision's solve near an exact fit with collinear components steps back for real (0.99929 ->
    0.99830, then 0.99931 -> 0.99333): each decrease stopped the run as converged (errors 1.7e-3, then 6.7e-3,
    where it goes on below 3e-5). A decrease now stops single precision only within the fits' rounding."""
    rng = np.random.default_rng(0)

    def blocks():
        A = np.zeros((30, 2))
        A[:10, 0] = rng.random(10) + 0.5
        A[10:20, 1] = rng.random(10) + 0.5
        return A

    Us = [blocks() for _ in range(3)]
    G = rng.standard_normal((2, 2, 2)) + 3
    X = np.einsum("abc,ia,jb,kc->ijk", G, *Us)
    nz = X != 0
    X[nz] += 1e-5 * np.abs(X[nz]).mean() * rng.standard_normal(nz.sum())
    X32 = X.astype(np.float32)
    M = tk.cp_als(X32, 4, init="random", random_state=1)
    assert M.converged and M.relative_error(X32) < 5e-5, (M.n_iter, M.relative_error(X32))
    assert abs(M.fit_history[-1] - M.fit_history[-2]) < 1e-5  # (stopped by the change below tol)


def test_passes_per_iteration_count_the_line_searchs_and_the_residuals_reads():
    """A line-search jump reads X once more, and so does each residual fit near an exact fit: neither was counted
    (CP-ALS with jumps reported 1.15, below the tree's own 1.5; float32 near an exact fit 1.5)."""
    from tuckerkit.datasets import make_low_rank_cp, make_low_rank_tucker

    X = make_low_rank_tucker((60,) * 3, (5,) * 3, noise=0.01, random_state=0).data
    plain = tk.cp_als(X, 5, tol=0, max_iter=20, random_state=0, linesearch=False)
    jumps = tk.cp_als(X, 5, tol=0, max_iter=20, random_state=0, linesearch=True)
    assert jumps.passes_per_iteration > plain.passes_per_iteration >= 1.5
    X32 = make_low_rank_cp((60,) * 3, 3, noise=1e-5, random_state=0, dtype=np.float32).data
    near = tk.cp_als(X32, 3, tol=0, max_iter=10, random_state=0, linesearch=False)
    assert near.fit > 0.999 and near.passes_per_iteration >= plain.passes_per_iteration + 0.5
    T64 = tk.hooi(X, 5, tol=0, max_iter=10)
    T32 = tk.hooi(X32, 3, tol=0, max_iter=10)
    assert T32.fit > 0.999 and T32.passes_per_iteration >= T64.passes_per_iteration + 1


def test_cp_apr_at_extreme_magnitudes():
    """A subnormal tensor raised a raw OverflowError (math.ldexp of 2^1029); near the largest float64 the model
    came back all NaN with a RuntimeWarning only."""
    M = tk.cp_apr(np.full((2, 2), 1e-310), 1)
    assert np.isfinite(M.fit) and np.all(np.isfinite(M.weights))
    X = np.abs(np.random.default_rng(0).standard_normal((4, 5, 6)))
    with pytest.raises(ValueError, match=r"^X's entries sum beyond the largest float64, more than cp_apr's sums "
                                         r"hold in float64 \(about 1.07e\+301\); it models counts: scale the data "
                                         r"down$"):
        tk.cp_apr(X * 1e307, 2)


def test_single_precision_extremes_of_cp_apr_and_corcondia():
    """Float32 counts summing beyond float32's range came back as infinite weights; corcondia of a float32 tensor
    at 1e-40 gave NaN (a power of two beyond float32 in its rescale)."""
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"more than cp_apr's sums hold in float32"):
        tk.cp_apr((rng.poisson(5.0, (10, 11, 12)) * 1e36).astype(np.float32), 2, max_iter=5)
    X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 3)) for n in (10, 11, 12)))
    ref = tk.corcondia(X.astype(np.float32), tk.cp_als(X.astype(np.float32), 3))
    X32 = (X * 1e-40).astype(np.float32)
    got = tk.corcondia(X32, tk.cp_als(X32, 3))
    assert np.isfinite(got) and abs(got - ref) < 1e-2
