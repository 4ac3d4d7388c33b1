"""The exact factor step's LAPACK calls (``eigh_desc``'s ``?syevr`` / ``?heevr`` for leading pairs, ``?syevd`` /
``?heevd`` for every pair, ``_thin_q``'s ``?geqrf`` +
``?orgqr``) made directly with cached workspaces: the same bits as :func:`scipy.linalg.eigh` /
:func:`scipy.linalg.qr` (which query the workspace on every call); the factor step of HOOI's projections
(``P < I_n``) gives the SVD's subspace, orthonormal, repeatable; real and complex, single and double.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from _subspaces import subspace_sine
from conftest import draw

import tuckerkit as tk
from tuckerkit.engine import default_policy
from tuckerkit.engine._subspace import _thin_q, _top_eigh_mrrr, eigh_desc, leading_left_singular

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "r"), [(100, 10), (200, 10), (7, 7), (50, None), (30, 1), (1, 1), (12, 40)])
def test_eigh_desc_bits_equal_scipy(dtype, n, r):
    rng = np.random.default_rng(n)
    A = draw(rng, (2 * n, n), dtype)
    G = A.conj().T @ A
    w, V = eigh_desc(G.copy(), r)
    if r is None or r >= n:
        w0, V0 = scipy.linalg.eigh(G.copy(), overwrite_a=True, check_finite=False, driver="evd")
    else:
        w0, V0 = scipy.linalg.eigh(G.copy(), subset_by_index=[n - r, n - 1], overwrite_a=True, check_finite=False)
    assert w.dtype == w0.dtype and V.dtype == V0.dtype
    np.testing.assert_array_equal(w, w0[::-1])
    np.testing.assert_array_equal(V, V0[:, ::-1])
    assert np.all(np.diff(w) <= 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [13, 31, 64, 128])
def test_every_pair_is_orthonormal_to_a_few_ulps_where_the_spectrum_clusters(dtype, n):
    """All pairs of a Gram whose small eigenvalues cluster (a low-rank signal plus noise, as a mode of full
    rank sees): divide and conquer keeps the vectors orthonormal to a few ulps times the order's square root
    (MRRR on the whole spectrum, the former route, left 80-2700 ulps on these), and they diagonalize G."""
    rng = np.random.default_rng(n)
    A = draw(rng, (n, 3), dtype) @ draw(rng, (3, 4 * n), dtype) + 0.01 * draw(rng, (n, 4 * n), dtype)
    G = A @ A.conj().T
    w, V = eigh_desc(G.copy())
    eps = np.finfo(dtype).eps
    c = V.astype(np.complex128 if V.dtype.kind == "c" else np.float64)
    assert np.abs(c.conj().T @ c - np.eye(n)).max() <= 4 * np.sqrt(n) * eps
    scale = np.abs(w).max()
    assert np.abs(c.conj().T @ G.astype(c.dtype) @ c - np.diag(w)).max() <= 8 * n * eps * scale
    assert np.all(np.diff(w) <= 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "k"), [(200, 10), (300, 10), (10, 10), (57, 3), (1000, 40), (5, 1)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_thin_q_bits_equal_scipy_and_orthonormal(dtype, m, k, order):
    rng = np.random.default_rng(m + k)
    A = np.asarray(draw(rng, (m, k), dtype), order=order)
    Q = _thin_q(A.copy(order="K"))
    Q0 = scipy.linalg.qr(A.copy(order="K"), mode="economic", overwrite_a=True, check_finite=False)[0]
    assert Q.dtype == Q0.dtype and Q.shape == (m, k)
    np.testing.assert_array_equal(Q, Q0)
    assert Q.flags.f_contiguous == Q0.flags.f_contiguous  # Fortran order either way: later products alike
    eps = np.finfo(dtype).eps
    assert np.abs(Q.conj().T @ Q - np.eye(k)).max() <= 10 * eps * m


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_thin_q_of_double_precision_needs_no_scipy(monkeypatch, dtype):
    """float64 and complex128 run numpy's own LAPACK gufuncs (no ``import scipy.linalg`` in a HOOI call)."""
    from tuckerkit.engine import _subspace

    assert _subspace._NP_QR is not None

    def refuse():
        raise AssertionError("scipy.linalg was asked for")

    monkeypatch.setattr(_subspace, "scipy_linalg", refuse)
    rng = np.random.default_rng(4)
    A = draw(rng, (150, 12), dtype)
    A0 = A.copy()
    Q = _thin_q(A)  # (A may be overwritten, as with scipy's LAPACK)
    assert Q.flags.f_contiguous and np.abs(Q.conj().T @ Q - np.eye(12)).max() <= 10 * np.finfo(dtype).eps * 150
    np.testing.assert_allclose(Q @ (Q.conj().T @ A0), A0, rtol=0, atol=100 * np.finfo(dtype).eps * np.abs(A0).max())
    A0.flags.writeable = False  # a read-only operand is factored in a copy, with the same bits
    np.testing.assert_array_equal(_thin_q(A0), Q)


def test_thin_q_falls_back_for_wide_and_empty():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 5))
    np.testing.assert_array_equal(_thin_q(A.copy()), scipy.linalg.qr(A, mode="economic")[0])
    assert _thin_q(np.zeros((4, 0))).shape == (4, 0)


def projection(Y, n, dtype):
    """A HOOI-like projection: I_n = 200 along mode ``n``, 10 x 10 elsewhere (the P < I_n route), with well
    separated leading singular values."""
    rng = np.random.default_rng(n)
    shape = [10, 10, 10]
    shape[n] = 200
    Y = draw(rng, shape, dtype)
    M = np.moveaxis(Y, n, 0).reshape(200, 100)
    U, s, Vh = np.linalg.svd(M.astype(np.complex128 if Y.dtype.kind == "c" else np.float64), full_matrices=False)
    s = np.geomspace(100.0, 1.0, s.size)
    M = (U * s) @ Vh
    rest = [d for i, d in enumerate(shape) if i != n]
    return np.moveaxis(M.reshape(200, *rest), 0, n).astype(dtype), U


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 2])
def test_factor_step_subspace_orthonormal_repeatable(dtype, n):
    Y, U_ref = projection(None, n, dtype)
    r = 10
    U, w = leading_left_singular(Y, n, r, default_policy())
    U2, w2 = leading_left_singular(Y.copy(), n, r, default_policy())
    np.testing.assert_array_equal(U, U2)
    np.testing.assert_array_equal(w, w2)
    eps = np.finfo(dtype).eps
    assert U.shape == (200, r) and U.dtype == dtype
    assert np.abs(U.conj().T @ U - np.eye(r)).max() <= 10 * eps * 200
    # the SVD's subspace: sin of the largest principal angle to rounding over the gap s_10 / s_11 ~ 1.05
    Ur = U_ref[:, :r]
    resid = U.astype(Ur.dtype) - Ur @ (Ur.conj().T @ U.astype(Ur.dtype))
    assert np.linalg.norm(resid, 2) <= 1e4 * eps
    np.testing.assert_allclose(w, np.geomspace(100.0, 1.0, 100)[:r] ** 2, rtol=1e3 * eps)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_factor_step_rank_deficient_stays_orthonormal(dtype):
    rng = np.random.default_rng(5)
    M = draw(rng, (200, 4), dtype) @ draw(rng, (4, 100), dtype)  # rank 4 < r = 10
    Y = M.reshape(200, 10, 10)
    U, w = leading_left_singular(Y, 0, 10, default_policy())
    eps = np.finfo(dtype).eps
    assert np.abs(U.conj().T @ U - np.eye(10)).max() <= 10 * eps * 200
    assert np.all(w >= 0) and np.all(w[4:] <= 1e3 * eps * w[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "r"), [(100, 10), (2, 1), (9, 8), (64, 3), (300, 10)])
def test_top_eigh_mrrr_matches_syevr(dtype, n, r):
    """The MRRR route of HOOI's Gram (sytrd + stemr + ormqr on the wanted vectors only): the eigenvalues and
    the leading subspace of ?syevr to rounding, orthonormal vectors, the same bits on every call."""
    rng = np.random.default_rng(n + r)
    M = rng.standard_normal((2 * n, n)).astype(dtype)
    G = M.T @ M
    w, V = _top_eigh_mrrr(G.copy(), r)
    w2, V2 = _top_eigh_mrrr(G.copy(), r)
    np.testing.assert_array_equal(w, w2)
    np.testing.assert_array_equal(V, V2)
    w0, V0 = eigh_desc(G.copy(), r)
    eps = np.finfo(dtype).eps
    assert w.dtype == w0.dtype and V.dtype == V0.dtype and V.shape == (n, r)
    assert np.abs(w - w0).max() <= 10 * n * eps * w0[0]
    assert np.abs(V.T @ V - np.eye(r)).max() <= 10 * eps * n
    gap = (w0[r - 1] - np.linalg.eigvalsh(G.astype(np.float64))[::-1][r]) / w0[0] if r < n else 1.0
    assert np.linalg.norm(V @ V.T - V0 @ V0.T, 2) <= 100 * n * eps / gap


def _planted(rng, shape, n, dtype, s):
    """A tensor whose mode-``n`` unfolding has singular values ``s`` (the rest of its rank zero) and known left
    singular vectors."""
    I_n = shape[n]
    rest = [d for i, d in enumerate(shape) if i != n]
    P = int(np.prod(rest))
    k = len(s)
    U = np.linalg.qr(rng.standard_normal((I_n, k)))[0]
    Vt = np.linalg.qr(rng.standard_normal((P, k)))[0].T
    M = (U * np.asarray(s, dtype=np.float64)) @ Vt
    return np.moveaxis(M.reshape(I_n, *rest), 0, n).astype(dtype), U


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "n", "r"), [
    ((10, 3, 3), 0, 3),  # HOOI's projection on 10^3 at rank 3: the Gram of the other side (9 x 9)
    ((3, 10, 3), 1, 2),
    ((7, 2, 2), 0, 3),  # P = 4 < I_n = 7
    ((12, 20), 0, 5),  # the mode's own Gram, order 12 (the largest tiny one)
    ((12, 4, 13), 0, 4),
    ((4, 4, 4, 4), 3, 3),
])
def test_tiny_route_gives_the_svds_subspace(dtype, shape, n, r):
    """The compiled tiny route (a Gram of order <= TINY_ORDER: Jacobi rotations, Householder QR, the sign fix):
    the SVD's leading subspace to rounding over the gap, orthonormal, the squared singular values, signs fixed
    as sign_fix does, and the same answer as the LAPACK route to a few eps."""
    from tuckerkit.engine import _subspace
    from tuckerkit.engine._subspace import TINY_ORDER, sign_fix

    rng = np.random.default_rng(sum(shape) + n)
    I_n = shape[n]
    P = int(np.prod(shape)) // I_n
    k = min(I_n, P)
    s = np.geomspace(10.0, 1.0, k)  # gaps of at least 10^(1/(k-1)) - 1: 0.23 at k = 12
    Y, U_ref = _planted(rng, shape, n, dtype, s)
    assert _subspace._tiny(Y, I_n, P, r) and k <= TINY_ORDER
    U, w = leading_left_singular(Y, n, r, default_policy())
    from tuckerkit.engine._tiny_kernels import tiny_left_singular

    Uk, wk = np.empty((I_n, r), dtype), np.empty(r)  # the kernel itself took it (it did not decline)
    assert tiny_left_singular(np.ascontiguousarray(np.moveaxis(Y, n, 0).reshape(I_n, P)), r, Uk, wk)
    assert Uk.tobytes() == U.tobytes()
    eps = np.finfo(dtype).eps
    gap = s[r - 1] ** 2 - s[r] ** 2
    assert U.shape == (I_n, r) and U.dtype == dtype and U.flags.c_contiguous and w.dtype == dtype
    assert np.abs(U.T.astype(np.float64) @ U - np.eye(r)).max() <= 10 * k * eps
    Ur = U_ref[:, :r]
    resid = U.astype(np.float64) - Ur @ (Ur.T @ U.astype(np.float64))
    assert np.linalg.norm(resid, 2) <= 100 * k * eps * s[0] ** 2 / gap
    np.testing.assert_allclose(w, s[:r] ** 2, rtol=100 * k * eps)
    np.testing.assert_array_equal(U, sign_fix(U))  # each column's largest entry positive already
    # the LAPACK route on the same input
    real = _subspace._tiny
    try:
        _subspace._tiny = lambda *a: False
        U2, w2 = leading_left_singular(Y, n, r, default_policy())
    finally:
        _subspace._tiny = real
    np.testing.assert_allclose(U, U2, rtol=0, atol=100 * k * eps * s[0] ** 2 / gap)
    np.testing.assert_allclose(w, w2, rtol=100 * k * eps)
    U3, w3 = leading_left_singular(Y.copy(), n, r, default_policy())
    assert U3.tobytes() == U.tobytes() and w3.tobytes() == w.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiny_route_rank_deficient_and_zero(dtype):
    """Fewer nonzero singular values than r: the basis stays orthonormal (the Householder QR completes it) and
    the missing eigenvalues are zero; an all-zero unfolding gives an orthonormal basis and zeros."""
    from tuckerkit.engine import _subspace

    rng = np.random.default_rng(3)
    eps = np.finfo(dtype).eps
    Y, U_ref = _planted(rng, (11, 3, 3), 0, dtype, [5.0, 2.0])  # rank 2, r = 4 from the 9 x 9 Gram
    assert _subspace._tiny(Y, 11, 9, 4)
    U, w = leading_left_singular(Y, 0, 4, default_policy())
    assert np.abs(U.T.astype(np.float64) @ U - np.eye(4)).max() <= 100 * eps
    np.testing.assert_allclose(w[:2], [25.0, 4.0], rtol=100 * eps)
    assert np.all(w[2:] >= 0) and np.all(w[2:] <= 100 * eps * 25.0)
    resid = U[:, :2].astype(np.float64) - U_ref @ (U_ref.T @ U[:, :2].astype(np.float64))
    assert np.abs(resid).max() <= 1e3 * eps
    for shape in ((11, 3, 3), (6, 4, 4)):
        Z = np.zeros(shape, dtype)
        U, w = leading_left_singular(Z, 0, 3, default_policy())
        assert np.abs(U.T.astype(np.float64) @ U - np.eye(3)).max() <= 10 * eps and not w.any()


def test_tiny_route_declines_non_finite_and_is_taken_only_where_small():
    """The kernel declines a NaN or Inf (the caller's LAPACK route then decides); the route is taken for real
    host arrays with a Gram of order <= TINY_ORDER and at most _TINY_GRAM_MADDS, r below that order, and an
    I_n x r factor of at most _TINY_FACTOR_ELEMS on the other side."""
    from tuckerkit.engine import _subspace
    from tuckerkit.engine._tiny_kernels import tiny_left_singular

    for bad in (np.nan, np.inf):
        M = np.ones((10, 9))
        M[3, 4] = bad
        U, w = np.full((10, 3), 7.0), np.full(3, 7.0)
        assert tiny_left_singular(M, 3, U, w) is False
    T = _subspace._tiny
    assert T(np.ones((12, 13)), 12, 13, 5) and not T(np.ones((13, 13)), 13, 13, 5)  # order 12
    assert not T(np.ones((10, 9)), 10, 9, 9) and not T(np.ones((10, 9)), 10, 9, 0)  # r below the order
    assert T(np.ones((128, 4)), 128, 4, 3) and not T(np.ones((172, 4)), 172, 4, 3)  # 512 factor elements
    assert T(np.ones((4, 1638)), 4, 1638, 2) and not T(np.ones((4, 1639)), 4, 1639, 2)  # 16384 Gram madds
    assert not T(np.ones((10, 9), np.complex128), 10, 9, 3) and not T(np.ones((10, 9), np.int64), 10, 9, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_sign_fix_of_a_thin_q_in_any_layout_is_sign_fix_of_its_c_copy(dtype, layout):
    """The factor step's sign fix of the thin QR's (Fortran-ordered) Q reads it where it lies and writes the
    C-contiguous result in one pass: bit for bit sign_fix of Q's C-contiguous copy, also with a zero column,
    a column whose largest magnitudes tie with opposite signs (the first one decides), and Q left unmodified."""
    from tuckerkit.engine._subspace import _sign_fix_c, sign_fix

    rng = np.random.default_rng(3)
    Q = rng.standard_normal((301, 6))
    if np.dtype(dtype).kind == "c":
        Q = Q + 1j * rng.standard_normal((301, 6))
    Q = Q.astype(dtype)
    Q[:, 2] = 0
    Q[:, 3] = 0.5
    Q[7, 3], Q[40, 3] = -2.0, 2.0  # (the first of the tied magnitudes is negative: the column flips)
    Q = {"C": np.ascontiguousarray(Q), "F": np.asfortranarray(Q), "strided": np.asfortranarray(
        np.repeat(Q, 2, axis=0))[::2]}[layout]
    before = Q.copy()
    got = _sign_fix_c(Q)
    want = sign_fix(np.ascontiguousarray(Q))
    assert got.flags.c_contiguous and got.dtype == Q.dtype
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got.real), np.signbit(want.real))  # (the signs of zeros too)
    np.testing.assert_array_equal(Q, before)
    if np.dtype(dtype).kind != "c":
        assert got[7, 3] == 2.0 and got[40, 3] == -2.0 and np.all(got[:, 2] == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "permuted"])
def test_a_long_modes_factor_step_cuts_its_products_for_the_workers(dtype, layout, monkeypatch):
    """The second route (P < I_n) on an unfolding of TALL_ELEMS elements or more (a long mode) cuts M^T M,
    the warm start's M^T start and M V into pieces by the sizes: the same bits for 1, 2 and 3 workers, an
    orthonormal basis, the same subspace and eigenvalues as the single-call route to rounding, from a C-ordered
    projection or one whose long mode is not outermost (the unfolding copied first, as before)."""
    from tuckerkit.engine import ExecutionPolicy, _subspace

    rng = np.random.default_rng(8)
    I_n, shape, r = 70_000, (4, 4), 3
    assert I_n * 16 >= _subspace.TALL_ELEMS
    core = rng.standard_normal((I_n, 16)) * np.linspace(3, 0.1, 16)  # (a spectrum with gaps)
    Y = core.reshape(I_n, *shape).astype(dtype)
    if layout == "permuted":
        Y = np.ascontiguousarray(Y.transpose(2, 0, 1)).transpose(1, 2, 0)
        assert not Y.flags.c_contiguous
    start = np.linalg.qr(rng.standard_normal((I_n, r)))[0].astype(dtype)
    taken = []
    route = _subspace._tall_second_route
    monkeypatch.setattr(_subspace, "_tall_second_route", lambda *a: taken.append(a[0].shape) or route(*a))
    got = [leading_left_singular(Y, 0, r, ExecutionPolicy(workers=w), start=start) for w in (1, 2, 3)]
    assert taken == [(I_n, 16)] * 3
    for U, w in got[1:]:
        np.testing.assert_array_equal(U, got[0][0])
        np.testing.assert_array_equal(w, got[0][1])
    U, w = got[0]
    assert U.flags.c_contiguous and U.dtype == dtype and U.shape == (I_n, r)
    eps = np.finfo(dtype).eps
    U64 = U.astype(np.float64)
    np.testing.assert_allclose(U64.T @ U64, np.eye(r), atol=50 * eps)
    monkeypatch.setattr(_subspace, "TALL_ELEMS", 1 << 62)
    U_ref, w_ref = leading_left_singular(Y, 0, r, default_policy(), start=start)
    np.testing.assert_allclose(w, w_ref, rtol=1e3 * eps)
    assert subspace_sine(U64, U_ref) <= 1e3 * eps


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_long_modes_thin_q_is_cholesky_qr2_on_the_workers(dtype):
    """The long mode's basis of M V (orthogonal columns of norms sqrt(w)) by two passes of CholeskyQR in float64
    (_cholesky_qr2: 100000 x 10 in 4.4 ms against Householder's 22.9): orthonormal to rounding, the span of
    Householder's Q, the same bits for 1-3 workers, B unmodified; None (Householder's QR then) where B's
    columns are dependent or their norms span more than CHOLQR_MARGIN allows."""
    from tuckerkit.engine import ExecutionPolicy, _subspace

    rng = np.random.default_rng(11)
    I_n, r = 20_000, 6
    Q0 = np.linalg.qr(rng.standard_normal((I_n, r)))[0]
    B = (Q0 * np.sqrt(np.logspace(0, -8, r))).astype(dtype)  # (w from 1 to 1e-8: kappa 1e4)
    B0 = B.copy()
    got = [_subspace._cholesky_qr2(B, ExecutionPolicy(workers=w)) for w in (1, 2, 3)]
    assert all(np.array_equal(got[0], g) for g in got[1:]) and np.array_equal(B, B0)
    Q = got[0]
    assert Q.dtype == dtype and Q.shape == (I_n, r)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(Q.astype(np.float64).T @ Q.astype(np.float64), np.eye(r), atol=20 * eps)
    ref = np.linalg.qr(B.astype(np.float64))[0]
    assert subspace_sine(ref, Q) <= 1e3 * eps
    dependent = B.copy()
    dependent[:, -1] = dependent[:, 0]
    assert _subspace._cholesky_qr2(dependent, ExecutionPolicy(workers=2)) is None
    spread = (Q0 * np.sqrt(np.logspace(0, -14, r))).astype(np.float64)  # (kappa 1e7: beyond the margin)
    assert _subspace._cholesky_qr2(spread, ExecutionPolicy(workers=2)) is None


def _planted_tall(rng, I_n, P, r, noise):
    """A tall I_n x P matrix of rank r plus noise of relative size ``noise`` (a projection's unfolding)."""
    A = np.linalg.qr(rng.standard_normal((I_n, r)))[0] * np.linspace(3, 1, r)
    M = A @ np.linalg.qr(rng.standard_normal((P, r)))[0].T
    E = rng.standard_normal((I_n, P))
    return M / np.linalg.norm(M) + noise * E / np.linalg.norm(E)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_the_gram_free_route_gives_the_grams_leading_pairs(warm, dtype):
    """Where P is in the hundreds (P >= GRAM_FREE_MIN_P, below I_n) the second route finds the leading pairs of
    M^T M by subspace iteration on M^T (M Q), without the P x P Gram: the eigenvalues of the SVD (float64's) to
    I_n eps, M V spanning its leading left singular subspace, the same bits for 1-3 workers, M unmodified;
    from HOOI's factor (warm) or from the seeded block (cold)."""
    from tuckerkit.engine import ExecutionPolicy, _subspace

    rng = np.random.default_rng(21)
    I_n, P, r = 3000, 300, 6
    assert _subspace._gram_free_wanted(I_n, P, r, dtype)
    M64 = _planted_tall(rng, I_n, P, r, 0.01)
    M = M64.astype(dtype)
    M0 = M.copy()
    U_svd, s_svd, _ = np.linalg.svd(M.astype(np.float64), full_matrices=False)
    start = np.linalg.qr(U_svd[:, :r] + 1e-3 * rng.standard_normal((I_n, r)))[0].astype(dtype) if warm else None
    got = [_subspace._gram_free_pairs(M, r, start, ExecutionPolicy(workers=w)) for w in (1, 2, 3)]
    assert got[0] is not None and np.array_equal(M, M0)
    for w, B in got[1:]:
        assert np.array_equal(w, got[0][0]) and np.array_equal(B, got[0][1])
    w, B = got[0]
    assert w.dtype == np.float64 and B.dtype == dtype and B.shape == (I_n, r)
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(w, s_svd[:r] ** 2, rtol=I_n * eps)
    # M V: orthogonal columns of norms sqrt(w), spanning the leading left singular vectors
    np.testing.assert_allclose(np.linalg.norm(B.astype(np.float64), axis=0), np.sqrt(w), rtol=I_n * eps)
    Q = np.linalg.qr(B.astype(np.float64))[0]
    assert subspace_sine(Q, U_svd[:, :r]) <= I_n * eps


def test_the_gram_free_route_refuses_what_it_cannot_certify():
    """Gaussian data (no gap after the r-th pair) and noise of 30 % (the energy outside the leading pairs
    above theta_r): None, so the route forms the Gram; complex, a P below GRAM_FREE_MIN_P or not below I_n: not
    tried. Through leading_left_singular the refused step gives the Gram route's result."""
    from tuckerkit.engine import ExecutionPolicy, _subspace

    rng = np.random.default_rng(22)
    pol = ExecutionPolicy(workers=2)
    for M in (rng.standard_normal((3000, 300)), _planted_tall(rng, 3000, 300, 6, 0.3)):
        assert _subspace._gram_free_pairs(M, 6, None, pol) is None
    assert not _subspace._gram_free_wanted(3000, 300, 6, np.complex128)
    assert not _subspace._gram_free_wanted(3000, _subspace.GRAM_FREE_MIN_P - 1, 6, np.float64)
    assert not _subspace._gram_free_wanted(300, 300, 6, np.float64)
    assert (_subspace.GRAM_FREE_MIN_P, _subspace.GRAM_FREE_MAX_STEPS) == (256, 12)
    Y = _planted_tall(rng, 3000, 300, 6, 0.3).reshape(3000, 15, 20)
    U, w = leading_left_singular(Y, 0, 6, pol)
    M = Y.reshape(3000, 300)
    w_ref = np.linalg.eigvalsh(M.T @ M)[::-1][:6]
    np.testing.assert_allclose(w, w_ref, rtol=1e-12)
    U_ref = np.linalg.svd(M, full_matrices=False)[0][:, :6]
    np.testing.assert_allclose(U.T @ U, np.eye(6), atol=1e-13)
    assert subspace_sine(U, U_ref) <= 1e-10


def test_hooi_with_a_long_mode_and_a_large_p_matches_the_gram_route(monkeypatch):
    """HOOI on (10, 10, 10, 2000) at rank 10 (three full-rank modes; the long mode's unfolding 2000 x 1000, P =
    1000): the Gram-free second route gives the Gram route's fit to 1e-12 and the same subspaces (float32: to
    its rounding), and the unfolding of the last mode is a view of the C-ordered tensor (no copy)."""
    import tuckerkit as tk
    from tuckerkit.engine import _subspace

    rng = np.random.default_rng(23)
    shape = (10, 10, 10, 2000)
    core = rng.standard_normal((10, 10, 10, 10))
    Y = core
    for i, n in enumerate(shape):
        Y = np.moveaxis(np.tensordot(np.linalg.qr(rng.standard_normal((n, 10)))[0], Y, axes=(1, i)), 0, i)
    E = rng.standard_normal(shape)
    X = Y / np.linalg.norm(Y) + 0.01 * E / np.linalg.norm(E)
    X0 = X.copy()
    tried = []
    real = _subspace._gram_free_pairs
    monkeypatch.setattr(_subspace, "_gram_free_pairs",
                        lambda M, *a: tried.append(np.shares_memory(M, X)) or real(M, *a))
    with pytest.warns(tk.ConvergenceWarning, match=r"^hooi reached max_iter=4"):
        free = tk.hooi(X, 10, max_iter=4, tol=0)
    assert tried and all(tried) and np.array_equal(X, X0)
    monkeypatch.setattr(_subspace, "GRAM_FREE_MIN_P", 1 << 40)
    with pytest.warns(tk.ConvergenceWarning, match=r"^hooi reached max_iter=4"):
        gram = tk.hooi(X, 10, max_iter=4, tol=0)
    assert abs(free.fit - gram.fit) < 1e-12
    for Uf, Ug in zip(free.factors, gram.factors, strict=True):
        assert subspace_sine(Uf, Ug) <= 1e-10
    # float32 (its products in float32): float64's fit to float32's rounding
    monkeypatch.setattr(_subspace, "GRAM_FREE_MIN_P", 256)
    tried.clear()
    with pytest.warns(tk.ConvergenceWarning, match=r"^hooi reached max_iter=4"):
        free32 = tk.hooi(X.astype(np.float32), 10, max_iter=4, tol=0)
    assert tried and abs(free32.fit - gram.fit) < 100 * np.finfo(np.float32).eps


def _signal_over_noise_gram(rng, n, dtype, scale=30.0):
    """A Gram of three strong components over a cluster of small noise eigenvalues (HOOI's factor step at a
    rank above the signal's): the spectrum where MRRR's vectors lose orthogonality."""
    A = scale * rng.standard_normal((n, 3)) @ rng.standard_normal((3, 3 * n)) + 0.1 * rng.standard_normal((n, 3 * n))
    return (A @ A.T).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "frac"), [(100, 0.3), (100, 0.9), (200, 0.1), (200, 0.5), (200, 0.95)])
def test_leading_pairs_stay_orthonormal_over_a_noise_cluster(dtype, n, frac):
    """Leading pairs of a signal-over-noise Gram, by every host route (``eigh_desc``'s subset and the MRRR route
    of HOOI's second route, both checked and replaced by divide and conquer where their vectors drift):
    orthonormal to ORTH_ULPS ulps (MRRR alone: up to 104000), the same eigenvalues as every pair's to rounding,
    the same bits on a repeat, and G unmodified."""
    from tuckerkit.engine._subspace import ORTH_ULPS, _top_gram_pairs

    assert ORTH_ULPS <= 128  # (the code's own bound no looser than the tests' below)
    rng = np.random.default_rng(n)
    r = max(1, int(frac * n))
    G = _signal_over_noise_gram(rng, n, dtype)
    G0 = G.copy()
    w_all, _ = eigh_desc(G.copy())
    eps = np.finfo(dtype).eps
    for route in (lambda: eigh_desc(G, r), lambda: _top_gram_pairs(G.copy(), r, n)):
        w, V = route()
        assert V.shape == (n, r) and V.dtype == dtype
        assert np.abs(V.T.astype(np.float64) @ V - np.eye(r)).max() <= 128 * eps
        assert np.abs(w - w_all[:r]).max() <= 10 * n * eps * w_all[0]
        w2, V2 = route()
        np.testing.assert_array_equal(w, w2)
        np.testing.assert_array_equal(V, V2)
    np.testing.assert_array_equal(G, G0)


def test_an_f_ordered_gram_falls_back_on_its_own_values(monkeypatch):
    """A Fortran-ordered Gram (LAPACK overwrites it in place) is copied before the subset route, so the
    divide-and-conquer fallback sees the original matrix: the same pairs as a C-ordered copy's."""
    import tuckerkit.engine._subspace as sub

    rng = np.random.default_rng(3)
    G = _signal_over_noise_gram(rng, 60, np.float64)
    monkeypatch.setattr(sub, "orthonormal_enough", lambda V: False)  # (force the fallback)
    wf, Vf = eigh_desc(np.asfortranarray(G), 20)
    wc, Vc = eigh_desc(G.copy(), 20)
    np.testing.assert_array_equal(wf, wc)
    np.testing.assert_array_equal(Vf, Vc)
    np.testing.assert_array_equal(wc, eigh_desc(G.copy())[0][:20])


# ----------------------------------------------------------------- review of 2026-12-04 (numerical robustness)
def test_factors_keep_every_column_on_clustered_eigenvalues():
    """?syevr can return fewer pairs than asked with info 0 where the eigenvalues are clustered (every mode-0
    singular value 1): the factors kept only those (ranks (9, 10, 14) for (11, 10, 14); (0, 0) and a crash in
    cp_als in float32). Divide and conquer takes over there."""
    import warnings

    rng = np.random.default_rng(1)
    X = np.linalg.qr(rng.standard_normal((140, 114)))[0].T.reshape(114, 10, 14)
    for f in (tk.hosvd, tk.st_hosvd, tk.hooi):
        T = f(X, [11, 10, 14])
        assert T.ranks == (11, 10, 14)
        U = T.factors[0]
        np.testing.assert_allclose(U.T @ U, np.eye(11), atol=100 * np.finfo(np.float64).eps)
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((87, 76)))[0].T.astype(np.float32)
    assert tk.hosvd(Q, [1, 1]).ranks == (1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        assert tk.cp_als(Q.reshape(76, 87, 1), 1).factors[0].shape == (76, 1)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_a_rank_above_the_other_modes_product_is_completed_exactly(dtype):
    """P < r <= I_n (a (13, 2, 3) tensor's mode 0 at ranks 7 and 13): the P leading pairs from the P x P Gram,
    completed by orthonormal columns of eigenvalue 0. The error is TensorLy's (SVD) 5e-16, not the 1e-8 of the
    I_n x I_n Gram's subspaces; factors orthonormal; a long mode at such a rank no longer forms its Gram."""
    rng = np.random.default_rng(0)
    U = np.linalg.qr(rng.standard_normal((13, 6)))[0]
    V = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    X = ((U * np.logspace(0, -10, 6)) @ V.T).reshape(13, 2, 3).astype(dtype)
    if dtype == np.complex128:
        X = X + 1j * X[::-1]
    eps = np.finfo(np.float64).eps
    for r0 in (7, 13):
        for f in (tk.hosvd, tk.st_hosvd, tk.hooi):
            T = f(X, [r0, 2, 3])
            F = T.factors[0]
            assert F.shape == (13, r0)
            np.testing.assert_allclose(F.conj().T @ F, np.eye(r0), atol=200 * eps)
            assert T.relative_error(X) <= 200 * eps, (r0, f.__name__, T.relative_error(X))
    big = np.random.default_rng(1).standard_normal((100_000, 3, 3))  # (its Gram would be 80 GB)
    T = tk.hooi(big, [12, 3, 3])
    assert T.ranks == (12, 3, 3) and abs(T.fit - 1) <= 1e-12


def test_a_long_mode_is_not_given_its_own_gram_by_the_rough_start():
    """cp_als / hooi defaults on (3, 3, 30000) and (3, 30000, 3): the float32 start Gram was the long mode's
    own (30000 x 30000: 6.7 GiB, a raw MemoryError); the small side's Gram now."""
    import tracemalloc

    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((3, 3, 30000)), rng.standard_normal((3, 30000, 3))
    tracemalloc.start()
    a, b = tk.cp_als(X, 2), tk.hooi(Y, [2, 2, 2])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * X.nbytes and 0 < a.fit < 1 and 0 < b.fit < 1


def test_max_error_on_a_long_mode_takes_the_small_side(monkeypatch):
    """hosvd / st_hosvd(max_error=) on a long mode over a small rest chose its rank from the mode's own
    I_n x I_n Gram: 3.2-4.2 s on (3000, 3, 3), rank 1069 from rounding-level eigenvalues at max_error 1e-8, and
    74.5 GiB at I_n = 100000. Now the P x P side: the same ranks where the tail is above rounding, the bound
    kept, and the long tensor in a few times its own memory."""
    import tracemalloc

    from tuckerkit.decomposition import _tucker

    rng = np.random.default_rng(0)
    A = np.linalg.qr(rng.standard_normal((3000, 9)))[0] * np.logspace(0, -6, 9)
    X = (A @ np.linalg.qr(rng.standard_normal((9, 9)))[0]).reshape(3000, 3, 3)
    for f in (tk.st_hosvd, tk.hosvd):
        for me in (1e-1, 1e-3, 1e-5, 1e-8):
            T = f(X, max_error=me)
            assert T.relative_error(X) <= me and T.ranks[0] <= 9
            if me == 1e-3 and f is tk.st_hosvd:  # (the I_n x I_n Gram's choice, for comparison: 3 s)
                monkeypatch.setattr(_tucker, "LONG_CHOICE_MIN", 10**9)
                assert f(X, max_error=me).ranks == T.ranks
                monkeypatch.undo()
    big = rng.standard_normal((100_000, 3, 3))
    tracemalloc.start()
    T = tk.st_hosvd(big, max_error=1e-3)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert T.ranks == (9, 3, 3) and peak < 6 * big.nbytes
