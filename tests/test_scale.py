"""Decompositions are scale-equivariant: fits and automatic ranks do not change when X is multiplied by any
factor its dtype can hold, and cores / weights scale with it (no square of the data's scale overflows or
underflows: extreme inputs are rescaled by a power of two internally)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tuckerkit as tk
from tuckerkit.sparse import COOTensor

X0 = np.random.default_rng(7).standard_normal((6, 7, 8))


def _fits(Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        return (tk.hosvd(Y, 2).fit, tk.hooi(Y, 2).fit, tk.st_hosvd(Y, max_error=0.5).ranks,
                tk.cp_als(Y, 2, random_state=0, max_iter=30).fit)


REF = {np.float64: _fits(X0), np.float32: _fits(X0.astype(np.float32))}


def _check(dtype, exponent):
    Y = (X0 * 10.0**exponent).astype(dtype)
    assert np.all(np.isfinite(Y))
    got, ref = _fits(Y), REF[dtype]
    tol = 1e3 * np.finfo(dtype).eps  # (worst seen over the exponents: 1 eps in float64, 0.1 eps in float32)
    assert got[2] == ref[2]  # the automatic ranks
    for g, r in zip(got[:2] + got[3:], ref[:2] + ref[3:], strict=True):
        assert abs(g - r) <= tol, (exponent, got, ref)


@settings(max_examples=12, deadline=None)
@given(st.integers(min_value=-300, max_value=300))
def test_float64_fits_and_ranks_do_not_depend_on_the_scale(exponent):
    _check(np.float64, exponent)


@settings(max_examples=12, deadline=None)
@given(st.integers(min_value=-30, max_value=30))
def test_float32_fits_and_ranks_do_not_depend_on_the_scale(exponent):
    _check(np.float32, exponent)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
@pytest.mark.parametrize(("dtype", "scale"), [(np.float32, 1e19), (np.float32, 1e-25), (np.float64, 1e160),
                                              (np.float64, 1e-160)])
def test_the_issue_cases_and_models_scale_back(dtype, scale):
    """The reported cases: float32 x1e19 / x1e-25 gave fits 0.0 / 0.019 and ranks (1, 1, 1); float64 x1e160
    gave NaN and a broadcast error in cp_als."""
    Y = (X0 * scale).astype(dtype)
    _check(dtype, round(float(np.log10(scale))))
    T, C = tk.hosvd(Y, 2), tk.cp_als(Y, 2, random_state=0, max_iter=5, tol=0)
    rel = 1e-5 if dtype == np.float32 else 1e-12
    assert T.relative_error(Y) == pytest.approx(1 - T.fit, rel=rel, abs=rel)
    assert np.isfinite(T.core).all() and np.isfinite(C.weights).all()
    norm = tk.engine.as_operand(T.core).norm()  # scaled: np.linalg.norm would overflow at 1e160
    assert norm == pytest.approx(tk.engine.as_operand(tk.hosvd(X0.astype(dtype), 2).core).norm() * scale, rel=1e-4)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_sparse_and_out_of_core_inputs_scale_too():
    D = X0 * 1e200
    S = COOTensor.from_dense(D)
    ref = tk.hosvd(X0, 2).fit
    assert tk.hosvd(S, 2).fit == pytest.approx(ref, abs=1e-10)
    D0 = D.copy()
    Slab = tk.engine.SlabTensor(D, memory_limit=4 * D[0].nbytes * 2)
    assert tk.hooi(Slab, 2, init="hosvd", max_iter=3, tol=0).fit == pytest.approx(
        tk.hooi(X0, 2, init="hosvd", max_iter=3, tol=0).fit, abs=1e-10)
    np.testing.assert_array_equal(D, D0)  # slabs are scaled as they are read, never in the caller's array
