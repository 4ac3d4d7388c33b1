"""Random decompositions (hypothesis, derandomized: every run and CI try the same cases): HOOI, ST-HOSVD and CP-ALS on
orders 2-5, sizes 1-64, any ranks, C / F / strided / windowed layouts, float32 and float64. Each result keeps the
invariants a user relies on, whatever the case: orthonormal Tucker factors to 128 ulps, a reported fit
within the documented ``sqrt(eps)`` of the true one, the same bits on a repeat and with BLAS at one thread, the
input unmodified, a ``max_error`` choice within its bound, and a float32 fit near 1 equal to the double-precision
residual's. Stop 99's longer fuzzing of these found factors
1643-5787 ulps from orthonormal (MRRR on noise clusters), a float32 rank choice past its bound and a window's Gram
1000x less accurate than its copy's. On the code before those fixes the ST-HOSVD fuzz here fails (a float32 factor
1.8e-5 from orthonormal), and so does the pinned window case (fits 6e-5 and 2.9e-4 from the true ones)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

import tuckerkit as tk

FUZZ = settings(max_examples=80, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SIZES = [1, 2, 3, 5, 7, 13, 20, 31, 64, 100, 128]


@st.composite
def tensors(draw):
    """A low-rank tensor plus 10 % noise (fits between 0 and 1, most near 0.99) in a drawn layout and dtype."""
    ndim = draw(st.integers(2, 5))
    shape = tuple(draw(st.lists(st.sampled_from(SIZES), min_size=ndim, max_size=ndim)))
    while np.prod(shape) > 200_000:
        shape = tuple(max(1, s // 2) for s in shape)
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    layout = draw(st.sampled_from(["C", "F", "step", "window"]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    r = [min(s, 3) for s in shape]
    X = tk.multi_ttm(rng.standard_normal(r), [rng.standard_normal((s, k)) for s, k in zip(shape, r, strict=True)])
    X = X + 0.1 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(shape)
    if layout == "F":
        return np.asfortranarray(X.astype(dtype)), rng
    if layout == "step":  # every other slab of a larger array along the last mode
        big = np.zeros((*shape[:-1], 2 * shape[-1]), dtype)
        big[..., ::2] = X
        return big[..., ::2], rng
    if layout == "window":  # an interior block of a larger array (modes that cannot be flattened)
        big = np.zeros([s + 2 for s in shape], dtype)
        inner = tuple(slice(1, 1 + s) for s in shape)
        big[inner] = X
        return big[inner], rng
    return X.astype(dtype), rng


def _same(a, b) -> bool:
    if isinstance(a, tk.TuckerTensor):
        return np.array_equal(a.core, b.core) and all(np.array_equal(u, v) for u, v in zip(a.factors, b.factors,
                                                                                           strict=True))
    return np.array_equal(a.weights, b.weights) and all(np.array_equal(u, v) for u, v in zip(a.factors, b.factors,
                                                                                            strict=True))


def _check(X, X0, run) -> tk.TuckerTensor | tk.CPTensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        T = run()
        again = run()
        with threadpool_limits(1, "blas"):
            single = run()
    np.testing.assert_array_equal(X, X0)
    assert _same(T, again) and _same(T, single)
    eps = float(np.finfo(X.dtype).eps)
    assert abs((1 - T.fit) - T.relative_error(X)) <= 1e3 * eps  # (worst seen: 72 eps in float64, 46 in float32)
    if isinstance(T, tk.TuckerTensor):
        for U in T.factors:
            assert np.abs(U.T.astype(np.float64) @ U - np.eye(U.shape[1])).max() <= 128 * eps
    return T


@FUZZ
@given(case=tensors(), data=st.data())
def test_hooi_keeps_its_invariants(case, data):
    X, _ = case
    X0 = X.copy()
    ranks = [data.draw(st.integers(1, s)) for s in X.shape]
    iters = data.draw(st.integers(1, 6))
    _check(X, X0, lambda: tk.hooi(X, ranks, max_iter=iters, tol=0.0))


@FUZZ
@given(case=tensors(), data=st.data())
def test_st_hosvd_keeps_its_invariants(case, data):
    X, _ = case
    X0 = X.copy()
    if data.draw(st.booleans()):
        ranks = [data.draw(st.integers(1, s)) for s in X.shape]
        _check(X, X0, lambda: tk.st_hosvd(X, ranks))
    else:
        max_error = data.draw(st.sampled_from([0.3, 0.1, 0.02, 1e-3]))
        T = _check(X, X0, lambda: tk.st_hosvd(X, max_error=max_error))
        assert T.relative_error(X) <= max_error


@FUZZ
@given(case=tensors(), data=st.data())
def test_cp_als_keeps_its_invariants(case, data):
    X, _ = case
    X0 = X.copy()
    rank = data.draw(st.integers(1, 8))
    iters = data.draw(st.integers(1, 8))
    seed = data.draw(st.integers(0, 100))
    _check(X, X0, lambda: tk.cp_als(X, rank, max_iter=iters, random_state=seed))


@pytest.mark.parametrize("method", ["hosvd", "st_hosvd"])
def test_a_max_error_choice_on_a_window_keeps_its_bound_in_float32(method):
    """The fuzz's hardest combination pinned: a float32 window (blocks-route Grams) with a tight target."""
    rng = np.random.default_rng(7)
    shape = (3, 40, 20, 2, 24)
    r = (3, 3, 3, 2, 3)
    X = tk.multi_ttm(rng.standard_normal(r), [rng.standard_normal((s, k)) for s, k in zip(shape, r, strict=True)])
    X = X + 1e-3 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(shape)
    big = np.zeros([s + 2 for s in shape], np.float32)
    inner = tuple(slice(1, 1 + s) for s in shape)
    big[inner] = X
    W = big[inner]
    T = getattr(tk, method)(W, max_error=1e-2)
    ref = getattr(tk, method)(np.ascontiguousarray(W).astype(np.float64), max_error=1e-2)
    assert T.ranks == ref.ranks
    assert T.relative_error(W) <= 1e-2
    assert abs((1 - T.fit) - T.relative_error(W)) <= 1e-5


NEAR = settings(max_examples=40, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@NEAR
@given(data=st.data())
def test_a_fit_near_one_is_the_double_precision_residuals(data):
    """Near-exact float32 and float64 tensors (Tucker or CP structure at noise 0 to 1e-4, every layout, orders
    2-5): where the reported error is below ``residual_fit_below`` of the dtype it is the residual's, to double
    precision's rounding, against ``numpy.einsum``'s reconstruction in float64 (the norms' fits read up to 1e-4
    off there in float32, 3e-8 in float64)."""
    from tuckerkit.decomposition._entry import residual_fit_below

    ndim = data.draw(st.integers(2, 5))
    shape = tuple(data.draw(st.lists(st.sampled_from(SIZES[2:9]), min_size=ndim, max_size=ndim)))
    while np.prod(shape) > 100_000:
        shape = tuple(max(3, s // 2) for s in shape)
    method = data.draw(st.sampled_from(["hosvd", "st_hosvd", "hooi", "cp_als"]))
    layout = data.draw(st.sampled_from(["C", "F", "step", "reversed"]))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    noise = data.draw(st.sampled_from([0.0, 1e-6, 1e-4] if dtype == np.float32 else [0.0, 1e-10, 1e-8]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    r = [min(s, 3) for s in shape]
    letters = "abcde"[:ndim]
    if method == "cp_als":
        X = np.einsum(",".join(f"{c}z" for c in letters) + "->" + letters,
                      *[rng.standard_normal((s, 2)) for s in shape])
    else:
        X = tk.multi_ttm(rng.standard_normal(r), [rng.standard_normal((s, k)) for s, k in zip(shape, r, strict=True)])
    X = (X + noise * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(shape)).astype(dtype)
    if layout == "F":
        X = np.asfortranarray(X)
    elif layout == "step":
        big = np.zeros((*shape[:-1], 2 * shape[-1]), dtype)
        big[..., ::2] = X
        X = big[..., ::2]
    elif layout == "reversed":  # (negative strides: no memory order is C-contiguous)
        X = X[::-1].copy()[::-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        T = tk.cp_als(X, 2, random_state=0) if method == "cp_als" else getattr(tk, method)(X, r)
    if isinstance(T, tk.TuckerTensor):
        spec = letters.upper() + "," + ",".join(f"{c}{c.upper()}" for c in letters) + "->" + letters
        Xh = np.einsum(spec, T.core.astype(np.float64), *[U.astype(np.float64) for U in T.factors])
    else:
        spec = "z," + ",".join(f"{c}z" for c in letters) + "->" + letters
        Xh = np.einsum(spec, T.weights.astype(np.float64), *[F.astype(np.float64) for F in T.factors])
    X64 = X.astype(np.float64)
    true = float(np.linalg.norm(X64 - Xh) / np.linalg.norm(X64))
    if 1.0 - T.fit < residual_fit_below(dtype):
        assert abs((1.0 - T.fit) - true) <= 1e-6 * true + 1e-13
    else:  # (a CP start that has not found the model: the fit from the Grams, within its documented error)
        assert abs((1.0 - T.fit) - true) <= 10 * np.sqrt(np.finfo(dtype).eps)
