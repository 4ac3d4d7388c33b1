"""Edge inputs a TensorLy or Tensor Toolbox user may pass, found by a review that tried to break the decompositions:
each was a crash with an internal traceback, a silently wrong result, or a misleading flag."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.io import save_result

EPS64 = np.finfo(np.float64).eps


@pytest.fixture
def X():
    return np.random.default_rng(0).standard_normal((6, 7, 8))


def test_non_negative_tucker_on_zero_mean_data_starts_from_the_projections_magnitudes(X):
    """The start's core was the projection's non-negative part: all zero here, a fixed point of every update
    (fit 0.0 reported as converged); TensorLy's start takes the magnitudes and reaches 0.0292."""
    for method in ("hals", "mu"):
        T = tk.non_negative_tucker(X, 1, method=method)
        assert T.fit > 0.029 and T.converged
        assert np.all(T.core >= 0) and all(np.all(U >= 0) for U in T.factors)


def test_a_model_that_collapses_to_zero_is_not_reported_converged():
    X = np.random.default_rng(2).standard_normal((6, 7, 8))  # (no non-negative part at rank 1 from these starts)
    with pytest.warns(tk.ConvergenceWarning, match=r"non_negative_tucker\(hals\) ended at an all-zero model"):
        T = tk.non_negative_tucker(X, 1)
    assert T.fit == 0.0 and not T.converged
    with pytest.warns(tk.ConvergenceWarning, match=r"non_negative_cp\(hals\) ended at an all-zero model"):
        C = tk.non_negative_cp(X, 1, random_state=0)
    assert C.fit == 0.0 and not C.converged
    with warnings.catch_warnings():
        warnings.simplefilter("error", tk.ConvergenceWarning)
        assert tk.non_negative_tucker(np.zeros((3, 4, 5)), 1).converged  # (an all-zero X: the zero model is exact)


def test_masked_arrays_are_refused_with_masked_entries_and_read_as_data_without(X):
    with pytest.raises(ValueError, match=r"^X is a masked array with 53 masked entries; pass X\.data with "
                                         r"mask=~X\.mask \(True where observed; hooi and cp_als take it\), or fill "
                                         r"them first \(X\.filled\(value\)\)$"):
        tk.hooi(np.ma.masked_array(X, X > 1), 2)
    for f in (lambda A: tk.hooi(A, 2).core, lambda A: tk.cp_als(A, 2, random_state=0).weights,
              lambda A: tk.hosvd(A, 1).core):
        np.testing.assert_array_equal(f(np.ma.masked_array(X, mask=False)), f(X))
    # an exact model read its fit from the residual's compiled kernel, which refused the masked array type
    exact = np.einsum("i,j,k->ijk", *(np.arange(1.0, n + 1) for n in (6, 7, 8)))
    assert tk.hosvd(np.ma.masked_array(exact, mask=False), 1).fit == pytest.approx(1.0, abs=1e-12)


def test_matrix_subclass_and_byte_swapped_dtypes(X):
    A = X[:, :, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # (numpy's note on np.matrix itself)
        M = np.matrix(A)
    np.testing.assert_array_equal(tk.hooi(M, 2).core, tk.hooi(A, 2).core)
    T = tk.hooi(X.astype(">f4"), 2)
    assert T.core.dtype == np.float32
    np.testing.assert_array_equal(T.core, tk.hooi(X.astype(np.float32), 2).core)
    C = tk.cp_als((X + 1j * X).astype(">c8"), 2, random_state=0)
    assert C.factors[0].dtype == np.complex64 and C.factors[0].dtype.isnative
    assert tk.ttm(X.astype(">f8"), np.ones((2, 6)), 0).dtype.isnative


def test_ragged_lists_get_one_line_naming_x():
    for f in (lambda: tk.hooi([[1.0, 2.0], [3.0]], 1), lambda: tk.ttm([[1.0, 2.0], [3.0]], [[1.0]], 0)):
        with pytest.raises(TypeError, match=r"^X could not be converted to an array \(nested sequences of unequal "
                                            r"lengths, or entries that are not numbers\); received \[\[1\.0, 2\.0\], "
                                            r"\[3\.0\]\]$"):
            f()


@pytest.mark.parametrize("scale", [1e160, 1e-300])
def test_model_norms_do_not_overflow_or_underflow(X, scale):
    """TuckerTensor.norm and CPTensor.norm summed unscaled squares: inf at 1e160, 0.0 at 1e-300."""
    T = tk.hooi(X, 2)
    C = tk.cp_als(X, 2, random_state=0)
    for want in (T.norm(), C.norm()):
        assert np.isfinite(want) and want > 0
    big = tk.TuckerTensor(T.core * scale, T.factors)
    assert big.norm() / scale == pytest.approx(T.norm(), rel=10 * EPS64)
    bigc = tk.CPTensor(C.weights * scale, C.factors)
    assert bigc.norm() / scale == pytest.approx(C.norm(), rel=10 * EPS64)
    small32 = tk.TuckerTensor((T.core * 1e-30).astype(np.float32), tuple(U.astype(np.float32) for U in T.factors))
    want32 = np.linalg.norm(np.asarray(small32.to_dense(), dtype=np.float64) * 1e30)
    assert small32.norm() * 1e30 == pytest.approx(want32, rel=1e-5)


def test_non_negative_cp_with_every_mode_fixed_returns_the_start(X):
    A = np.abs(X)
    init = [np.ones((s, 2)) for s in A.shape]
    C = tk.non_negative_cp(A, 2, fixed_modes=[0, 1, 2], init=init)
    D = tk.cp_als(A, 2, fixed_modes=[0, 1, 2], init=init)
    assert C.fit == pytest.approx(D.fit, abs=1e-14)
    for U, V in zip(C.factors, init, strict=True):
        np.testing.assert_array_equal(U, V)


def test_non_negative_tucker_refuses_a_non_finite_start_core(X):
    fs = [np.abs(np.random.default_rng(1).standard_normal((s, 2))) for s in X.shape]
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match=r"^init's core contains NaN or infinite values; expected finite "
                                             r"numbers$"):
            tk.non_negative_tucker(np.abs(X), 2, init=(np.full((2, 2, 2), bad), fs))


@pytest.mark.parametrize("scale", [1e-300, 1e200])
def test_cp_apr_fit_at_extreme_magnitudes(scale):
    """The least-squares fit summed unscaled squares: 1.0 at 1e-300 (true 0.25), NaN at 1e200."""
    counts = np.random.default_rng(0).poisson(2.0, (5, 6, 7)).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        M = tk.cp_apr(counts * scale, 2, random_state=0)
    true = 1 - np.linalg.norm(counts - np.asarray(M.to_dense()) / scale) / np.linalg.norm(counts)
    assert M.fit == pytest.approx(true, abs=1e-9)


@pytest.mark.parametrize("scale", [1e100, 1e-100])
def test_starts_of_extreme_magnitude_give_the_run_of_the_unscaled_start(X, scale):
    """Overflowing Grams gave LAPACK errors (CP) and a core-dimension error (HOOI); underflowing ones a fit of
    0.0 reported as converged. A free factor's scale does not change the iterations, so it is taken off."""
    us = [np.linalg.qr(np.random.default_rng(1).standard_normal((s, 2)))[0] for s in X.shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        for run in (lambda init: tk.hooi(X, 2, init=init), lambda init: tk.cp_als(X, 2, init=init)):
            want, got = run(us), run([U * scale for U in us])
            assert got.fit == pytest.approx(want.fit, abs=10 * EPS64)
            assert got.n_iter == want.n_iter


def test_conversions_and_save_refuse_misplaced_arguments_in_one_line(X, tmp_path):
    with pytest.raises(TypeError, match=r"^obj must be a TensorLy TuckerTensor or a \(core, factors\) pair with at "
                                        r"least one factor matrix; received 5$"):
        tk.TuckerTensor.from_tensorly(5)
    with pytest.raises(TypeError, match=r"^obj must be a TensorLy TuckerTensor or a \(core, factors\) pair"):
        tk.TuckerTensor.from_tensorly((np.ones((2, 2)),))
    with pytest.raises(TypeError, match=r"^obj must be a TensorLy CPTensor or a \(weights, factors\) pair with at "
                                        r"least one factor matrix; received \(None, \[\]\)$"):
        tk.CPTensor.from_tensorly((None, []))
    T = tk.hosvd(X, 2)
    with pytest.raises(TypeError, match=r"^path must be a file name ending in \.npz; received a TuckerTensor; the "
                                        r"path comes first: save_result\(path, result\)$"):
        save_result(T, tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()
    with pytest.raises(ValueError, match=r"^threshold must be a finite number \(a CORCONDIA percentage such as 90\); "
                                         r"received nan$"):
        tk.rank_sweep(X, [1], threshold=float("nan"))


def test_subnormal_data_reports_its_fit_and_warns_of_a_subnormal_model():
    """Data of subnormal magnitude: the norm was taken before the power-of-two scaling, itself subnormal and
    rounded (a reported error of 1.2e-5 for an exact full-rank HOSVD); now the scaled tensor's own. A model
    whose largest core entry is subnormal in X's units warns (its digits are lost there); float32 at 1e-44
    returned such a core silently."""
    X = np.random.default_rng(0).standard_normal((6, 5, 4))
    with pytest.warns(RuntimeWarning, match=r"model's largest core or weight entry .* is subnormal in float64"):
        T = tk.hosvd(X * 1e-318, list(X.shape))
    assert abs(1 - T.fit) <= 1e-13
    T = tk.hosvd(X * 1e-315, list(X.shape))  # (a subnormal core that keeps over half its bits: no warning)
    assert abs(1 - T.fit) <= 1e-13
    with pytest.warns(RuntimeWarning, match=r"is subnormal in float32"):
        tk.hosvd((X * 1e-44).astype(np.float32), [3, 3, 3])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        tk.hosvd((X * 1e-30).astype(np.float32), [3, 3, 3])  # (small, not subnormal: no warning)
        tk.hosvd((X * 1e-41).astype(np.float32), [3, 3, 3])  # (subnormal, over half its bits kept)
        tk.hosvd(X * 1e-300, [3, 3, 3])
