"""Fits near 1 (an error below ``sqrt(200 eps)`` of the data's precision) are the residual's in double precision
(``Call.residual_fit``): HOSVD, ST-HOSVD, HOOI's last fit and CP-ALS's last fit, in single and double
precision, against ``numpy.einsum`` reconstructions in float64, on every layout (the compiled sum on C / F
order, NumPy's slab sums on strided views and complex data)."""

from __future__ import annotations

import string
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tuckerkit as tk
import tuckerkit.decomposition._entry as entry
from tuckerkit.decomposition._residual_kernels import residual_blocks

SHAPE = (13, 20, 7)
RANKS = (3, 4, 2)


def _wide(A):
    return np.asarray(A, dtype=np.complex128 if np.iscomplexobj(A) else np.float64)


def _model64(T) -> np.ndarray:
    """The model in double precision by ``numpy.einsum`` (the oracle: no engine product)."""
    N = len(T.factors)
    idx = string.ascii_lowercase[:N]
    if isinstance(T, tk.TuckerTensor):
        spec = idx.upper() + "," + ",".join(f"{i}{c}" for i, c in zip(idx, idx.upper(), strict=True)) + "->" + idx
        return np.einsum(spec, _wide(T.core), *[_wide(U) for U in T.factors])
    spec = "z," + ",".join(f"{i}z" for i in idx) + "->" + idx
    return np.einsum(spec, _wide(T.weights), *[_wide(F) for F in T.factors])


def _true_error(X, T) -> float:
    X64 = _wide(X)
    return float(np.linalg.norm(X64 - _model64(T)) / np.linalg.norm(X64))


def _tensor(noise, dtype, layout, seed=0, shape=SHAPE, cp=False):
    rng = np.random.default_rng(seed)
    cplx = np.dtype(dtype).kind == "c"

    def draw(*s):
        return rng.standard_normal(s) + (1j * rng.standard_normal(s) if cplx else 0)

    if cp:
        X = np.einsum("ir,jr,kr->ijk", *[draw(s, 3) for s in shape])
    else:
        X = tk.multi_ttm(draw(*RANKS), [draw(s, r) for s, r in zip(shape, RANKS, strict=True)])
    X = X + noise * np.linalg.norm(X) / np.sqrt(X.size) * draw(*shape)
    X = X.astype(dtype)
    if layout == "F":
        return np.asfortranarray(X)
    if layout == "step":  # every other slab of a larger array: no memory order makes it contiguous
        big = np.zeros((*shape[:-1], 2 * shape[-1]), dtype)
        big[..., ::2] = X
        return big[..., ::2]
    return X


METHODS = {
    "hosvd": lambda X: tk.hosvd(X, RANKS),
    "st_hosvd": lambda X: tk.st_hosvd(X, RANKS),
    "hooi": lambda X: tk.hooi(X, RANKS),
    # (float64: to an error below its bound, 2.1e-7, where the default tol stops near 1e-6)
    "cp_als": lambda X: tk.cp_als(X, 3, random_state=0, tol=1e-12 if X.dtype == np.float64 else 1e-5),
}


#: noise levels whose errors lie below the bound of each precision (float64's norms read an exact model's
#: 1.3e-15 as 3.2e-8 by ST-HOSVD)
NEAR = {np.float32: [1e-5, 0.0], np.float64: [1e-9, 0.0]}


@pytest.mark.parametrize("layout", ["C", "F", "step"])
@pytest.mark.parametrize("dtype, noise", [(d, n) for d, ns in NEAR.items() for n in ns])
@pytest.mark.parametrize("method", list(METHODS))
def test_a_fit_near_one_is_the_residuals(method, dtype, noise, layout):
    X = _tensor(noise, dtype, layout, cp=method == "cp_als")
    X0 = X.copy()
    T = METHODS[method](X)
    np.testing.assert_array_equal(X, X0)
    true = _true_error(X, T)
    assert true < entry.residual_fit_below(dtype)
    # the norms' fit was off by up to 1e-4 (float32) / 3e-8 (float64) here; the residual's carries only double
    # precision's rounding
    assert abs((1.0 - T.fit) - true) <= 1e-6 * true + 1e-13


@pytest.mark.parametrize("dtype, noise", [(np.complex64, 1e-5), (np.complex128, 1e-9), (np.complex128, 0.0)])
@pytest.mark.parametrize("method", ["hosvd", "st_hosvd", "hooi"])
def test_a_complex_fit_near_one_is_the_residuals(method, dtype, noise):
    X = _tensor(noise, dtype, "C")
    T = METHODS[method](X)
    true = _true_error(X, T)
    assert true < entry.residual_fit_below(dtype)
    assert abs((1.0 - T.fit) - true) <= 1e-6 * true + 1e-13


@pytest.mark.parametrize("dtype, noise", [(np.float32, 1e-5), (np.float64, 1e-9)])
@pytest.mark.parametrize("method", list(METHODS))
def test_the_refinement_changes_the_last_fit_only(method, dtype, noise, monkeypatch):
    """The same model bits and the same history before the last entry with the refinement switched off; CP-ALS's
    stop near 1 is steered by the residual's fit (stop 104), so there the refined run goes no shorter and ends
    at no higher error."""
    X = _tensor(noise, dtype, "C", cp=method == "cp_als")
    T = METHODS[method](X)
    monkeypatch.setattr(entry, "RESIDUAL_FIT_EPS", 0.0)
    S = METHODS[method](X)
    if method == "cp_als":
        assert T.n_iter >= S.n_iter
        assert _true_error(X, T) <= _true_error(X, S) * (1 + 1e-3)
        true = _true_error(X, T)
        assert abs((1.0 - T.fit) - true) <= 1e-6 * true + 1e-13
        return
    parts = ("core",) if isinstance(T, tk.TuckerTensor) else ("weights",)
    for name in parts:
        np.testing.assert_array_equal(getattr(T, name), getattr(S, name))
    for U, V in zip(T.factors, S.factors, strict=True):
        np.testing.assert_array_equal(U, V)
    assert T.fit_history[:-1] == S.fit_history[:-1]
    true = _true_error(X, T)
    assert abs((1.0 - T.fit) - true) < 0.01 * abs((1.0 - S.fit) - true)  # (the norms' was far off)


@pytest.mark.parametrize("dtype, noise", [(np.float64, 1e-5), (np.float64, 1e-3), (np.float32, 0.1)])
@pytest.mark.parametrize("method", list(METHODS))
def test_fits_below_the_bound_keep_the_norms(method, dtype, noise, monkeypatch):
    X = _tensor(noise, dtype, "C", cp=method == "cp_als")
    T = METHODS[method](X)
    assert 1.0 - T.fit > entry.residual_fit_below(dtype)
    monkeypatch.setattr(entry, "RESIDUAL_FIT_EPS", 0.0)
    assert T.fit_history == METHODS[method](X).fit_history


@pytest.mark.parametrize("dtype, noise", [(np.float32, 1e-4), (np.float64, 1e-9)])
@pytest.mark.parametrize("method", list(METHODS))
def test_the_residual_fit_repeats_its_bits_for_any_workers_and_pieces(method, dtype, noise, monkeypatch):
    shape = (9, 30, 400)  # (12000 columns: several blocks a piece, blocks spread over the workers)
    X = _tensor(noise, dtype, "C", seed=3, shape=shape, cp=method == "cp_als")
    monkeypatch.setattr(entry, "RESIDUAL_PARALLEL_FMAS", 0)  # (every piece's blocks over the workers)
    T = METHODS[method](X)
    assert METHODS[method](X).fit == T.fit
    with threadpool_limits(1, "blas"):
        assert METHODS[method](X).fit == T.fit
    monkeypatch.setattr(entry, "RESIDUAL_PARALLEL_FMAS", 1 << 60)  # (all on the calling thread)
    assert METHODS[method](X).fit == T.fit
    monkeypatch.setattr(entry, "RESIDUAL_REST_BYTES", 1 << 12)  # (pieces of a few rows of the second mode)
    pieced = METHODS[method](X).fit
    true = _true_error(X, T)
    assert abs((1.0 - pieced) - true) <= 1e-6 * true
    assert abs((1.0 - T.fit) - true) <= 1e-6 * true


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("I, C, r, width", [(1, 1, 1, 64), (7, 13, 3, 64), (7, 130, 4, 64), (5, 200, 5, 64),
                                            (3, 129, 9, 128), (2, 64, 8, 64)])
def test_residual_blocks_against_numpy(I, C, r, width, dtype):  # noqa: E741
    rng = np.random.default_rng(C + r)
    wide = rng.standard_normal((I, C + 3)).astype(dtype)
    X = wide[:, 2:2 + C]  # (rows apart by more than their length, unaligned)
    A = rng.standard_normal((I, r))
    Z = rng.standard_normal((r, C))
    nb = -(-C // width)
    out = np.full((nb, 2), np.nan)
    residual_blocks(X, A, Z, width, out, np.empty(width), 0, nb)
    X64 = X.astype(np.float64)
    D = X64 - A @ Z
    for b in range(nb):
        cols = slice(b * width, (b + 1) * width)
        for j, M in enumerate((D, X64)):
            want = float(np.sum(M[:, cols] ** 2))
            assert abs(out[b, j] - want) <= 64 * np.finfo(np.float64).eps * want
    part = np.full((nb, 2), -1.0)
    residual_blocks(X, A, Z, width, part, np.empty(width), nb - 1, nb)  # (one block: the others untouched)
    assert np.array_equal(part[nb - 1], out[nb - 1]) and np.all(part[:nb - 1] == -1.0)
    X[0, C // 2] = np.nan  # (a non-finite entry: its block's sums are not finite, no fast-math assumption)
    residual_blocks(X, A, Z, width, out, np.empty(width), 0, nb)
    assert not np.isfinite(out[(C // 2) // width]).any()


@pytest.mark.parametrize("method", ["hals", "mu"])
def test_non_negative_fits_near_one_are_the_residuals(method, monkeypatch):
    """Non-negative CP (HALS from its SVD start, to an error of ~5e-4) and Tucker (``method`` from the planted
    model): the fit the Grams gave was 5 % off for CP at noise 1e-5 (6.02e-4 for 5.70e-4); the reported fit is
    the residual's."""
    rng = np.random.default_rng(0)
    shape = (30, 40, 50)
    F = [rng.random((s, 3)) for s in shape]
    Y = (np.einsum("ir,jr,kr->ijk", *F) + 1e-5 * rng.random(shape)).astype(np.float32)
    C = tk.non_negative_cp(Y, 3, random_state=0, max_iter=300)
    G = rng.random((3, 3, 3))
    Us = [rng.random((s, 3)) for s in shape]
    X = tk.multi_ttm(G, Us).astype(np.float32)
    start = tk.TuckerTensor(G.astype(np.float32), tuple(U.astype(np.float32) for U in Us))
    T = tk.non_negative_tucker(X, (3, 3, 3), init=start, max_iter=5, method=method)
    for M, Z in ((C, Y), (T, X)):
        true = _true_error(Z, M)
        assert true < entry.residual_fit_below(np.float32)
        assert abs((1.0 - M.fit) - true) <= 1e-6 * true + 1e-13
    # the residual's fit also steers the stop near 1 (stop 104): without it (the Grams' fit throughout) the run
    # stops no later and at no lower error, its history's entries the Grams' until the last
    monkeypatch.setattr(entry, "RESIDUAL_FIT_EPS", 0.0)
    C0 = tk.non_negative_cp(Y, 3, random_state=0, max_iter=300)
    assert C.n_iter >= C0.n_iter
    assert _true_error(Y, C) <= _true_error(Y, C0) * (1 + 1e-3)


@pytest.mark.parametrize("layout", ["C", "F", "step"])
@pytest.mark.parametrize("method", list(METHODS))
def test_relative_error_of_a_float32_model_is_the_double_precision_residuals(method, layout):
    """``relative_error`` on float32 data: the residual and the norm in double precision (the blocked route
    reconstructed in float32, whose rounding read 1.56e-7 for an exact model's 1.26e-7); a strided view takes
    the blocked route, within float32's reconstruction rounding."""
    X = _tensor(0.0, np.float32, layout, cp=method == "cp_als")
    T = METHODS[method](X)
    true = _true_error(X, T)
    tol = 1e-9 * true if layout != "step" else 64 * float(np.finfo(np.float32).eps)
    assert abs(T.relative_error(X) - true) <= tol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_fits_near_one_come_from_the_residual(dtype):
    """A sparse tensor's fit near 1 from norms (||X||^2 - 2 <X, M> + ||M||^2 in the data's precision) read 1.0
    for a true 0.99993 (float32 CP) and 0.99974 for 0.999997 (HOOI); it is now the residual's in float64: over
    the nonzeros, plus the model's norm off them from the Grams. Every method's reported fit is the true one."""
    from tuckerkit.sparse import COOTensor

    rng = np.random.default_rng(0)
    shape = (40, 30, 20)
    Us = [rng.random((n, 3)) * (rng.random((n, 3)) < 0.5) for n in shape]  # (sparse factors: a sparse tensor)
    D = np.einsum("ir,jr,kr->ijk", *Us)
    D = (D + 1e-6 * rng.standard_normal(shape) * (D != 0)).astype(dtype)
    X = COOTensor.from_dense(D)
    D64 = D.astype(np.float64)
    for f in (lambda Z: tk.cp_als(Z, 3, random_state=0), lambda Z: tk.hooi(Z, [3, 3, 3]),
              lambda Z: tk.hosvd(Z, [3, 3, 3]), lambda Z: tk.non_negative_tucker(Z, [3, 3, 3], random_state=0),
              lambda Z: tk.non_negative_cp(Z, 3, random_state=0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tk.ConvergenceWarning)
            T = f(X)
        true = 1 - np.linalg.norm((D64 - _dense64(T)).ravel()) / np.linalg.norm(D64)
        assert 1 - true < 1e-3 and abs(T.fit - true) <= 1e-8, (T.fit, true)


def test_relative_error_against_a_sparse_tensor_from_the_residual():
    """``relative_error(X_sparse)`` of a near-exact float32 model read 0.0 for a true 5.4e-6 (the identity in
    float32 products); the float64 residual over the nonzeros now, for Tucker and CP results."""
    from tuckerkit.sparse import COOTensor

    rng = np.random.default_rng(0)
    shape = (40, 30, 20)
    Us = [rng.random((n, 3)) * (rng.random((n, 3)) < 0.5) for n in shape]
    D = np.einsum("ir,jr,kr->ijk", *Us)
    D = (D + 1e-6 * rng.standard_normal(shape) * (D != 0)).astype(np.float32)
    X = COOTensor.from_dense(D)
    D64 = D.astype(np.float64)
    for T in (tk.hooi(D, [3, 3, 3]), tk.cp_als(D, 3, random_state=0)):
        true = np.linalg.norm((D64 - _dense64(T)).ravel()) / np.linalg.norm(D64)
        assert true > 1e-7 and abs(T.relative_error(X) - true) <= 1e-9, (T.relative_error(X), true)


def _dense64(T):
    """A Tucker or CP model formed in float64 (a float32 model's own to_dense rounds every entry)."""
    F = [np.asarray(U, dtype=np.float64) for U in T.factors]
    if isinstance(T, tk.CPTensor):
        return np.einsum("r,ir,jr,kr->ijk", np.asarray(T.weights, dtype=np.float64), *F)
    return tk.multi_ttm(np.asarray(T.core, dtype=np.float64), F)
