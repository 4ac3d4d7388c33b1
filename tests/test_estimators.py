"""TuckerDecomposer / CPDecomposer: scikit-learn compatibility, equivalence with the functions, pipelines."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
from _subspaces import subspace_sine
from conftest import traced_peak
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

import tuckerkit as tk
from tuckerkit import ConvergenceWarning, CPDecomposer, TuckerDecomposer

# checks that cannot apply to a tensor decomposition, each with the reason (none today: every check passes)
EXPECTED_FAILED: dict[str, str] = {}


@parametrize_with_checks(
    [TuckerDecomposer(ranks=2), CPDecomposer(rank=2, random_state=0, max_iter=50),
     CPDecomposer(rank=2, random_state=0, max_iter=50, nonnegative=True)],
    expected_failed_checks=lambda est: EXPECTED_FAILED,
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def _samples(rng, n=30, shape=(6, 7), rank=2, noise=0.01):
    A = rng.standard_normal((n, rank))
    Bs = [rng.standard_normal((d, rank)) for d in shape]
    X = np.asarray(tk.CPTensor(np.ones(rank), (A, *Bs)).to_dense())
    return X + noise * rng.standard_normal(X.shape)


def test_tucker_estimator_matches_function(rng):
    X = _samples(rng)
    est = TuckerDecomposer(ranks=(2, 3)).fit(X)
    T = tk.hooi(X, (6, 2, 3))  # sample rank = prod(feature ranks)
    for U, V in zip(est.factors_, T.factors[1:], strict=True):
        assert subspace_sine(U, V) <= 1e3 * np.finfo(np.float64).eps
    assert est.fit_ == pytest.approx(T.fit, abs=1e-12)
    Z = est.transform(X)
    assert Z.shape == (30, 6)
    back = est.inverse_transform(Z)
    assert back.shape == X.shape and back.flags.c_contiguous  # (C-ordered, as scikit-learn's arrays are)
    want = np.einsum("sab,ia,jb->sij", Z.reshape(30, 2, 3), *est.factors_)
    np.testing.assert_allclose(back, want, rtol=0, atol=1e-12 * np.abs(want).max())
    assert est.score(X) == pytest.approx(1 - np.linalg.norm(X - back) / np.linalg.norm(X))
    assert est.score(X) >= est.fit_ - 1e-10  # unconstrained sample mode projects at least as well


def test_cp_estimator_matches_function_and_recovers_coefficients(rng):
    X = _samples(rng, noise=0.0)
    est = CPDecomposer(rank=2, random_state=0, tol=1e-12, max_iter=500).fit(X)
    cp = tk.cp_als(X, 2, random_state=0, tol=1e-12, max_iter=500)
    assert est.fit_ == pytest.approx(cp.fit, abs=1e-12)
    C = est.transform(X)
    # least squares recovers the sample factor (noise-free data: to 1e-13 seen)
    np.testing.assert_allclose(C, cp.factors[0], atol=1e-10 * np.abs(cp.factors[0]).max())
    np.testing.assert_allclose(est.inverse_transform(C), X, atol=1e-10 * np.abs(X).max())
    assert est.score(X) > 1 - 1e-6


@pytest.mark.parametrize("cls", [TuckerDecomposer, CPDecomposer])
def test_every_init_parameter_reaches_the_function(cls, monkeypatch, rng):
    import tuckerkit.estimators._estimators as mod

    seen = {}
    target = "hooi" if cls is TuckerDecomposer else "cp_als"
    real = getattr(mod, target)

    def spy(X, r, **kwargs):
        seen.update(kwargs)
        seen["_rank_arg"] = r
        return real(X, r, **kwargs)

    monkeypatch.setattr(mod, target, spy)
    params = {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"}
    custom = {"tol": 1e-5, "max_iter": 7, "random_state": 3, "init": "random", "device": "cpu"}
    if cls is CPDecomposer:
        custom |= {"normalize": False}
        est = cls(rank=3, **custom)
    else:
        est = cls(ranks=(2, 3), sample_rank=4, **custom)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(rng.standard_normal((10, 4, 5)))
    for k, v in custom.items():
        assert seen[k] == v, k
    assert seen["_rank_arg"] == (3 if cls is CPDecomposer else (4, 2, 3))  # rank / sample_rank + ranks
    # max_error reaches st_hosvd (see test_tucker_estimator_max_error_chooses_ranks in test_user_side.py)
    assert set(params) == set(custom) | ({"rank"} if cls is CPDecomposer else {"ranks", "sample_rank", "max_error"}) | {
        "nonnegative"}  # chooses the function (test_nonneg.py::test_estimators_nonnegative)


@pytest.mark.parametrize("cls", [TuckerDecomposer, CPDecomposer])
def test_estimators_fit_on_the_gpu_path(cls, monkeypatch, rng):
    """device='cuda' (the cupy stand-in): the same model as on the CPU, host factors, transform unchanged."""
    import sys

    import _fakecupy

    cp, cpx = _fakecupy.make()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupyx", cpx)
    X = _samples(rng, noise=0.01)
    kw = {"rank": 2, "random_state": 0} if cls is CPDecomposer else {"ranks": (2, 2)}
    a = cls(**kw, tol=0, max_iter=5)
    b = cls(**kw, tol=0, max_iter=5, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        Za, Zb = a.fit_transform(X), b.fit_transform(X)
    assert all(type(U) is np.ndarray for U in b.factors_)
    assert b.fit_ == pytest.approx(a.fit_, abs=1e-10)
    np.testing.assert_allclose(np.abs(Zb), np.abs(Za), atol=1e-8 * np.abs(Za).max())


def test_pipeline_gridsearch_and_cross_val(rng):
    n = 60
    y = np.repeat([0, 1], n // 2)
    base = rng.standard_normal((6, 7))
    X = rng.standard_normal((n, 6, 7)) * 0.5
    X[y == 1] += base
    pipe = Pipeline([("tucker", TuckerDecomposer(ranks=(2, 2))), ("clf", LogisticRegression())])
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.mean() > 0.8
    gs = GridSearchCV(pipe, {"tucker__ranks": [(1, 1), (2, 2)]}, cv=3).fit(X, y)
    assert gs.best_params_["tucker__ranks"] in [(1, 1), (2, 2)]
    c = clone(TuckerDecomposer(ranks=(3, 2), max_iter=9))
    assert c.get_params()["ranks"] == (3, 2) and c.get_params()["max_iter"] == 9


def test_estimator_bad_input(rng):
    with pytest.raises(ValueError, match=r"ranks has 3 entries but the samples have 2 feature modes"):
        TuckerDecomposer(ranks=(2, 2, 2)).fit(rng.standard_normal((5, 4, 4)))
    fitted = TuckerDecomposer(ranks=2).fit(rng.standard_normal((5, 4, 4)))
    with pytest.raises(ValueError, match=r"X has samples of shape \(4, 5\), but TuckerDecomposer was fitted"):
        fitted.transform(rng.standard_normal((3, 4, 5)))
    X = rng.standard_normal((5, 4, 4))
    X[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"Input X contains NaN"):
        TuckerDecomposer().fit(X)
    with pytest.raises(ValueError, match=r"ranks=0 is not positive"):
        TuckerDecomposer(ranks=0).fit(rng.standard_normal((5, 4, 4)))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["tucker", "cp"])
def test_score_by_blocks_matches_the_whole_difference_in_little_memory(kind, dt, rng):
    """``score`` sums the difference block by block of the reconstruction (never the whole of it): the score of
    the whole difference taken in float64 to its rounding, an all-zero X scoring 1.0 as before, and the extra
    memory below half the samples' bytes (the transform's codes and projections included; the whole
    difference took 2.2x)."""
    import math

    from tuckerkit.estimators import _estimators

    X = rng.standard_normal((2000, 24, 20)).astype(dt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = (TuckerDecomposer(ranks=(4, 3)) if kind == "tucker" else CPDecomposer(rank=4, random_state=0)).fit(X)
    codes = est.transform(X)
    calls = []
    real = _estimators._blocked_score

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    _estimators._blocked_score = spy
    try:
        est.score(X)
    finally:
        _estimators._blocked_score = real
    assert calls and calls[0] is not None  # (the blocked route was taken)
    back = np.asarray(est.inverse_transform(codes), np.float64)
    d = (X.astype(np.float64) - back).ravel()
    x = X.astype(np.float64).ravel()
    want = 1 - math.sqrt(math.fsum((d * d).tolist())) / math.sqrt(math.fsum((x * x).tolist()))
    assert est.score(X) == pytest.approx(want, rel=0, abs=100 * float(np.finfo(dt).eps))
    assert est.score(np.zeros_like(X)) == 1.0
    assert traced_peak(lambda: est.score(X)) < X.nbytes // 2


@pytest.mark.parametrize("Est, kw", [(tk.TuckerDecomposer, {"ranks": (2, 2)}), (tk.CPDecomposer, {"rank": 2})])
def test_complex_and_one_dimensional_samples_are_refused_in_one_line(Est, kw):
    """scikit-learn's messages printed the whole array after 'Complex data not supported' (many lines)."""
    X = np.random.default_rng(0).random((5, 6, 7))
    with pytest.raises(ValueError, match=r"^Complex data not supported: X has dtype complex128; the estimators take "
                                         r"real samples") as info:
        Est(**kw).fit(X + 1j)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"^X must have shape \(n_samples, d_1, \.\.\.\); received an array of shape "
                                         r"\(5,\) \(Reshape your data: X\[None\] for one sample\)$"):
        Est(**kw).fit(np.ones(5))


def test_transform_uses_what_fit_learned_not_the_current_parameters(rng):
    """set_params without a refit changed transform's route (nonnegative) or broke it (rank): a negative
    coefficient from a non-negative model, a score of -2.39 for 0.485, a broadcasting error."""
    X = np.abs(rng.standard_normal((20, 6, 7)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = TuckerDecomposer(ranks=(2, 3), nonnegative=True).fit(X)
        cp = CPDecomposer(rank=3, random_state=0, nonnegative=True).fit(X)
    before = est.score(X), est.transform(X), cp.transform(X), cp.inverse_transform(cp.transform(X))
    est.set_params(nonnegative=False, ranks=(4, 4))
    cp.set_params(nonnegative=False, rank=4)
    after = est.score(X), est.transform(X), cp.transform(X), cp.inverse_transform(cp.transform(X))
    assert before[0] == after[0]
    for a, b in zip(before[1:], after[1:], strict=True):
        np.testing.assert_array_equal(a, b)
    assert after[2].min() >= 0 and after[2].shape == (20, 3)
    assert cp.get_feature_names_out().tolist() == ["cpdecomposer0", "cpdecomposer1", "cpdecomposer2"]


def test_nonnegative_cp_transform_is_each_samples_own(rng):
    """A sample's non-negative coefficients do not depend on the batch it comes in (the HALS sweeps stopped on
    the whole batch's move: 1.15e-06 apart); scikit-learn's check_methods_subset_invariance runs it too."""
    X = np.abs(rng.standard_normal((40, 6, 7)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = CPDecomposer(rank=5, nonnegative=True, random_state=0).fit(X)
    C = est.transform(X)
    one = np.vstack([est.transform(X[i:i + 1]) for i in range(len(X))])
    assert np.abs(C - one).max() <= 100 * np.finfo(np.float64).eps * max(np.abs(C).max(), 1)
    assert C.min() >= 0


@pytest.mark.parametrize("Est, kw", [(TuckerDecomposer, {"ranks": 2}), (CPDecomposer, {"rank": 2, "random_state": 0})])
def test_fitted_arrays_stay_read_only_after_pickle_and_copy(Est, kw, rng):
    import copy
    import pickle

    X = rng.standard_normal((20, 6, 7))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = Est(**kw).fit(X)
    for other in (pickle.loads(pickle.dumps(est)), copy.deepcopy(est)):
        arrays = [*other.factors_, other.sample_factor_, getattr(other, "core_", None),
                  getattr(other, "weights_", None)]
        for a in arrays:
            if a is not None:
                assert not a.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            other.factors_[0][0, 0] = 0.0
        np.testing.assert_array_equal(other.transform(X), est.transform(X))


def test_feature_names_and_set_output_in_a_pipeline(rng):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = rng.standard_normal((20, 6, 7))
    pipe = make_pipeline(TuckerDecomposer(ranks=(2, 3)), StandardScaler()).set_output(transform="default")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        Z = pipe.fit_transform(X)
    assert Z.shape == (20, 6)
    assert pipe.get_feature_names_out().tolist() == [f"tuckerdecomposer{i}" for i in range(6)]


def test_estimator_messages_and_tags(rng):
    from sklearn.exceptions import ConvergenceWarning as SkConvergenceWarning
    from sklearn.exceptions import NotFittedError

    X = rng.standard_normal((20, 6, 7))
    with pytest.raises(NotFittedError, match="This TuckerDecomposer instance is not fitted yet"):
        TuckerDecomposer().score(X)
    with pytest.raises(NotFittedError, match="This CPDecomposer instance is not fitted yet"):
        CPDecomposer().score(X)
    with pytest.raises(TypeError, match=r"^X is None; expected an array of samples of shape "
                                        r"\(n_samples, d_1, \.\.\.\)$"):
        TuckerDecomposer().fit(None)
    flat = TuckerDecomposer(ranks=2).fit(X.reshape(20, 42))
    with pytest.raises(ValueError, match=r"X has samples of shape \(6, 7\), but TuckerDecomposer was fitted on samples "
                                         r"of shape \(42,\)"):
        flat.transform(X)
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"^Input X contains NaN"):
        TuckerDecomposer(ranks=2).fit(X).transform(bad)
    with pytest.raises(ValueError, match=r"^init='svd' is not valid; expected one of 'st_hosvd', 'st_hosvd_sketch', "
                                         r"'hosvd', 'random'$"):
        TuckerDecomposer(ranks=2, init="svd").fit(X)
    for Est in (TuckerDecomposer, CPDecomposer):
        tags = Est().__sklearn_tags__()
        assert tags.input_tags.three_d_array
        assert tags.transformer_tags.preserves_dtype == ["float64", "float32"]
    with pytest.warns(SkConvergenceWarning, match="reached max_iter=2") as caught:
        CPDecomposer(rank=3, max_iter=2, random_state=0).fit(X)
    assert all(issubclass(w.category, ConvergenceWarning) for w in caught if "max_iter" in str(w.message))


@pytest.mark.parametrize("nonnegative", [False, True])
def test_float32_samples_on_a_float64_model_give_float64(nonnegative, rng):
    """A float64 model's transform of float32 samples computes in float64 on every route: at n = 1000 the Tucker
    projection handed the compiled kernels float32 samples with float64 factors (a numba TypingError)."""
    X = np.abs(rng.standard_normal((1000, 20, 24)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = TuckerDecomposer(ranks=(5, 6), nonnegative=nonnegative, max_iter=5).fit(X)
    got = est.transform(X.astype(np.float32))
    assert got.dtype == np.float64
    want = est.transform(X.astype(np.float32).astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e3 * np.finfo(np.float64).eps * np.abs(want).max())
