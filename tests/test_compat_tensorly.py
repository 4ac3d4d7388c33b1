"""TensorLy's own decomposition tests, run against ``tuckerkit.compat.tensorly``.

The test modules that ship inside the installed tensorly wheel are imported (never copied), the names they
call are pointed at the compat layer, and pytest collects their test functions from here. Cases that cannot
pass are listed once, in ``KNOWN``, with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest

import tuckerkit.compat.tensorly as compat

# The cases that cannot pass, in one place: (test name, parameter that selects them, its value, reason, the
# exception they fail with). tests/conftest.py marks them xfail(strict=True, raises=...), so a case that starts
# passing, or fails another way, is noticed.
KNOWN = [
    ("test_non_negative_tucker_hals_active_set", None, None,
     "algorithm='active_set' (TensorLy's active-set core solver) is refused in one line: the core step is FISTA",
     NotImplementedError),
]


def test_the_active_set_core_solver_is_refused_in_one_line():
    X = np.random.default_rng(0).random((5, 6, 7))
    with pytest.raises(NotImplementedError, match=r"^non_negative_tucker_hals: algorithm='active_set' is not "
                                                  r"supported by tuckerkit; expected 'fista'$"):
        compat.non_negative_tucker_hals(X, 2, algorithm="active_set")



@pytest.fixture(autouse=True)
def _seeded_global_rng():
    """Some of TensorLy's cases draw from numpy's global RNG (``random_cp`` without a seed, ``init="random"``
    without ``random_state``): seeded, every run is the same run."""
    state = np.random.get_state()  # noqa: NPY002 (the legacy global RNG is what these tests use)
    np.random.seed(0)  # noqa: NPY002
    yield
    np.random.set_state(state)  # noqa: NPY002


tl_cp = pytest.importorskip("tensorly.decomposition.tests.test_cp")
tl_tucker = pytest.importorskip("tensorly.decomposition.tests.test_tucker")

for _module in (tl_cp, tl_tucker):
    for _name in compat.__all__:  # the functions and TensorLy's CP / Tucker classes
        if hasattr(_module, _name):
            setattr(_module, _name, getattr(compat, _name))

from tensorly.decomposition.tests.test_cp import test_masked_parafac, test_parafac, test_parafac_linesearch  # noqa: E402,F401,I001
from tensorly.decomposition.tests.test_cp import test_parafac_does_not_modify_init  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_partial_tucker, test_tucker  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_tucker_runs_with_factors_only_init  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_masked_tucker  # noqa: E402,F401
from tensorly.decomposition.tests.test_cp import test_non_negative_parafac  # noqa: E402,F401
from tensorly.decomposition.tests.test_cp import test_non_negative_parafac_hals_one_unconstrained  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_non_negative_tucker  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_non_negative_tucker_hals_active_set  # noqa: E402,F401


# ------------------------------------------------------------------------------------------------------------
# Defects a review found by calling the layer as TensorLy's users do (TensorLy itself is the oracle)
# ------------------------------------------------------------------------------------------------------------
def _review_tensor(nonneg=False):
    rng = np.random.default_rng(0)
    A = [rng.standard_normal((n, 3)) for n in (8, 9, 10)]
    A = [np.abs(U) for U in A] if nonneg else A
    noise = rng.standard_normal((8, 9, 10))
    return np.einsum("ir,jr,kr->ijk", *A) + 0.05 * (np.abs(noise) if nonneg else noise)


@pytest.mark.parametrize("kw", [{}, {"init": "random", "random_state": 0}, {"tol": None, "n_iter_max": 7},
                                {"tol": 0, "n_iter_max": 30}])
def test_tucker_stops_where_tensorly_stops(kw):
    """TensorLy checks its tolerance from the third iteration on; the layer stopped after the second (its own
    rule), so a default call ran one iteration fewer (8.4e-5 apart); tol=None was refused."""
    import tensorly as tl
    from tensorly.decomposition import partial_tucker, tucker

    X = _review_tensor()
    a, ea = tucker(X, [2, 3, 4], return_errors=True, **kw)
    b, eb = compat.tucker(X, [2, 3, 4], return_errors=True, **kw)
    assert len(eb) == len(ea)
    np.testing.assert_allclose(eb, ea, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tl.tucker_to_tensor(b), tl.tucker_to_tensor(a), rtol=0, atol=1e-11)
    (ca, _), ea = partial_tucker(X, [3, 4], modes=[1, 2], **kw)
    (cb, _), eb = compat.partial_tucker(X, [3, 4], modes=[1, 2], **kw)
    assert len(eb) == len(ea)
    np.testing.assert_allclose(cb, ca, rtol=0, atol=1e-11)


def test_tucker_with_no_iterations_and_with_fixed_factors_as_tensorly():
    import tensorly as tl
    from tensorly.decomposition import tucker

    X = _review_tensor()
    start = tucker(X, [2, 3, 4], n_iter_max=2)
    a, ea = tucker(X, [2, 3, 4], return_errors=True, n_iter_max=0, init=start)
    b, eb = compat.tucker(X, [2, 3, 4], return_errors=True, n_iter_max=0, init=start)
    assert ea == eb == []
    np.testing.assert_array_equal(tl.tucker_to_tensor(b), tl.tucker_to_tensor(a))
    # the fixed mode is not projected while the others update (TensorLy's partial_tucker), and the result comes
    # alone even with return_errors (as TensorLy's); fixed_factors=[2] keeps TensorLy's ranks aligned
    a = tucker(X, [2, 3, 4], fixed_factors=[2], init=start, n_iter_max=10, return_errors=True)
    b = compat.tucker(X, [2, 3, 4], fixed_factors=[2], init=start, n_iter_max=10, return_errors=True)
    assert type(b) is type(a)
    np.testing.assert_allclose(tl.tucker_to_tensor(b), tl.tucker_to_tensor(a), rtol=0, atol=1e-11)


@pytest.mark.parametrize("name", ["non_negative_parafac", "non_negative_parafac_hals"])
@pytest.mark.parametrize("it", [1, 100])
def test_non_negative_cp_default_start_is_tensorlys(name, it):
    """The default init="svd" is TensorLy's own (NNDSVDa): after one iteration the layer's run was 0.36 (MU) and
    0.19 (HALS) apart; a default call ended 0.15 apart."""
    import tensorly as tl
    from tensorly import decomposition as td

    X = _review_tensor(nonneg=True)
    a = getattr(td, name)(X, 3, n_iter_max=it)
    b = getattr(compat, name)(X, 3, n_iter_max=it)
    np.testing.assert_allclose(tl.cp_to_tensor(b), tl.cp_to_tensor(a), rtol=0, atol=1e-11)
    c = getattr(compat, name)(X.astype(np.float32), 3, n_iter_max=it)  # (float32 kept, weights included)
    assert c.weights.dtype == np.float32 and all(U.dtype == np.float32 for U in c.factors)


@pytest.mark.parametrize("it", [1, 10, 100])
def test_non_negative_tucker_default_start_is_tensorlys(it):
    import tensorly as tl
    from tensorly.decomposition import non_negative_tucker

    X = _review_tensor(nonneg=True)
    a = non_negative_tucker(X, [2, 3, 3], n_iter_max=it)
    b = compat.non_negative_tucker(X, [2, 3, 3], n_iter_max=it)
    np.testing.assert_allclose(tl.tucker_to_tensor(b), tl.tucker_to_tensor(a), rtol=0, atol=1e-11)


def test_fixing_the_last_mode_warns_and_updates_it_as_tensorly():
    """TensorLy warns and updates a fixed last mode; the layer kept it fixed, silently (0.597 for 0.098)."""
    import tensorly as tl
    from tensorly.decomposition import parafac

    X = _review_tensor()
    start = parafac(X, 3, n_iter_max=2)
    with pytest.warns(UserWarning, match=r"You asked for fixing the last mode, which is not supported"):
        a = parafac(X, 3, init=start, fixed_modes=[2])
    with pytest.warns(UserWarning, match=r"You asked for fixing the last mode, which is not supported") as caught:
        b = compat.parafac(X, 3, init=start, fixed_modes=[2])
    assert caught[0].filename == __file__
    np.testing.assert_allclose(tl.cp_to_tensor(b), tl.cp_to_tensor(a), rtol=0, atol=1e-11)


def test_estimator_classes_take_positional_options_and_refusals_are_one_line():
    assert compat.CP_NN(3, 50).n_iter_max == 50
    est = compat.CP_NN_HALS(3, 50, "random", "truncated_svd", 1e-7)
    assert (est.n_iter_max, est.init, est.tol) == (50, "random", 1e-7)
    with pytest.raises(TypeError, match=r"^CP_NN\(\) got multiple values for argument 'n_iter_max'$"):
        compat.CP_NN(3, 50, n_iter_max=3)
    X = np.random.default_rng(0).random((20, 20, 20))
    with pytest.raises(NotImplementedError, match=r"^non_negative_parafac: mask=an array of shape \(20, 20, 20\) and "
                                                  r"dtype bool is not supported by tuckerkit; expected None$"):
        compat.non_negative_parafac(X, 3, mask=X > 0.5)


@pytest.mark.parametrize("kw", [{"init": "random", "random_state": 0, "tol": 0, "n_iter_max": 1},
                                {"init": "random", "random_state": 0}, {}])
def test_masked_parafac_follows_tensorly_iteration_for_iteration(kw):
    """TensorLy's first sweep reads the missing entries as passed and its errors are the filled tensor's; the
    layer ran tuckerkit's EM-ALS (0.66 apart after one iteration, other error lists and stops)."""
    import tensorly as tl
    from tensorly.decomposition import parafac

    rng = np.random.default_rng(0)
    X = _review_tensor()
    M = rng.random(X.shape) > 0.3
    Xz = np.where(M, X, 0)
    a, ea = parafac(Xz, 3, mask=M, return_errors=True, **kw)
    b, eb = compat.parafac(Xz, 3, mask=M, return_errors=True, **kw)
    assert len(eb) == len(ea)
    np.testing.assert_allclose(eb, ea, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tl.cp_to_tensor(b), tl.cp_to_tensor(a), rtol=0, atol=1e-11)


@pytest.mark.parametrize("kw", [{"init": "random", "random_state": 0}, {}, {"tol": 0, "n_iter_max": 40}])
def test_linesearch_follows_tensorlys(kw):
    """tuckerkit's own line search took other steps: error lists of 30 against 47 entries, results 1.7e-4 apart."""
    import tensorly as tl
    from tensorly.decomposition import parafac

    X = _review_tensor()
    a, ea = parafac(X, 3, linesearch=True, return_errors=True, **kw)
    b, eb = compat.parafac(X, 3, linesearch=True, return_errors=True, **kw)
    assert len(eb) == len(ea)
    np.testing.assert_allclose(eb, ea, rtol=0, atol=1e-10)
    np.testing.assert_allclose(tl.cp_to_tensor(b), tl.cp_to_tensor(a), rtol=0, atol=1e-10)


def test_callback_is_called_with_the_start_first():
    from tensorly.decomposition import parafac

    X = _review_tensor()
    seen_a: list[float] = []
    seen_b: list[float] = []
    parafac(X, 3, init="random", random_state=0, n_iter_max=5, callback=lambda cp, e: seen_a.append(e))
    compat.parafac(X, 3, init="random", random_state=0, n_iter_max=5, callback=lambda cp, e: seen_b.append(e))
    assert len(seen_b) == len(seen_a) == 6
    np.testing.assert_allclose(seen_b, seen_a, rtol=0, atol=1e-12)


@pytest.mark.parametrize("sparsity", [0.1, 5])
def test_sparsity_errors_and_stop_are_tensorlys(sparsity):
    """TensorLy measures the errors without the residual's sparse part; the layer reported the plain error (0.075
    apart at sparsity=0.1; 82 against 100 iterations at 5)."""
    import tensorly as tl
    from tensorly.decomposition import parafac

    X = _review_tensor()
    (a, sa), ea = parafac(X, 3, sparsity=sparsity, return_errors=True, init="random", random_state=0)
    (b, sb), eb = compat.parafac(X, 3, sparsity=sparsity, return_errors=True, init="random", random_state=0)
    assert len(eb) == len(ea)
    np.testing.assert_allclose(eb, ea, rtol=0, atol=1e-10)
    np.testing.assert_allclose(tl.cp_to_tensor(b), tl.cp_to_tensor(a), rtol=0, atol=1e-10)
    np.testing.assert_allclose(sb, sa, rtol=0, atol=1e-10)


@pytest.mark.parametrize("it", [1, 10, 100])
def test_non_negative_tucker_hals_caps_its_core_steps_as_tensorly(it):
    """TensorLy runs at most n_iter_max FISTA steps in each core update: the layer ran 100 (0.088 apart after one
    iteration, 0.93 after ten)."""
    import tensorly as tl
    from tensorly.decomposition import non_negative_tucker_hals

    from tuckerkit.decomposition._nonneg import CORE_STEPS, CORE_STEPS_NOW

    X = _review_tensor(nonneg=True)
    a = non_negative_tucker_hals(X, [2, 3, 3], n_iter_max=it)
    b = compat.non_negative_tucker_hals(X, [2, 3, 3], n_iter_max=it)
    np.testing.assert_allclose(tl.tucker_to_tensor(b), tl.tucker_to_tensor(a), rtol=0, atol=1e-10)
    assert CORE_STEPS_NOW.get() == CORE_STEPS  # (the cap is the call's only)


def test_starts_are_tensorlys_where_the_start_itself_is_seen():
    """TensorLy's SVD start scales its first factor by the singular values: n_iter_max=0 and the callback's first
    call showed 0.92 error for 0.49; the masked Tucker start was tuckerkit's HOSVD of the filled tensor (0.21
    apart after five iterations)."""
    import tensorly as tl
    from tensorly import decomposition as td

    X = np.random.default_rng(0).random((6, 7, 8))
    np.testing.assert_allclose(tl.cp_to_tensor(compat.parafac(X, 2, n_iter_max=0)),
                               tl.cp_to_tensor(td.parafac(X, 2, n_iter_max=0)), rtol=0, atol=1e-12)
    assert compat.parafac(X, 2, n_iter_max=0, return_errors=True)[1] == []
    seen_a: list[float] = []
    seen_b: list[float] = []
    td.parafac(X, 2, n_iter_max=3, callback=lambda cp, e: seen_a.append(e))
    compat.parafac(X, 2, n_iter_max=3, callback=lambda cp, e: seen_b.append(e))
    np.testing.assert_allclose(seen_b, seen_a, rtol=0, atol=1e-12)
    rng = np.random.default_rng(0)
    Y = rng.random((10, 11, 12))
    M = rng.random(Y.shape) > 0.3
    for it in (0, 1, 5):
        a = td.tucker(Y * M, [2, 3, 4], mask=M, n_iter_max=it, tol=0)
        b = compat.tucker(Y * M, [2, 3, 4], mask=M, n_iter_max=it, tol=0)
        np.testing.assert_allclose(tl.tucker_to_tensor(b), tl.tucker_to_tensor(a), rtol=0, atol=1e-12)
        (ca, _), _ = td.partial_tucker(Y * M, [3, 4], modes=[1, 2], mask=M, n_iter_max=it, tol=0)
        (cb, _), _ = compat.partial_tucker(Y * M, [3, 4], modes=[1, 2], mask=M, n_iter_max=it, tol=0)
        np.testing.assert_allclose(cb, ca, rtol=0, atol=1e-12)
