"""ttm, multi_ttm, gram, mttkrp, khatri_rao against dense numpy oracles; their bad-input messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _subspaces import subspace_sine
from conftest import make_tensor

from tuckerkit.engine import gram, gram_plan, khatri_rao, mttkrp, mttkrp_plan, multi_ttm, multi_ttm_plan, ttm, ttm_plan
from tuckerkit.engine._simd import simd_supported

SHAPES = [(6, 7, 8), (4, 5, 3, 6), (3, 4, 2, 3, 5), (5, 6)]


def _unfold(X, n):
    return np.moveaxis(np.asarray(X), n, 0).reshape(X.shape[n], -1)


def _tol(dtype, k):
    return 8 * (k + 2) * np.finfo(dtype).eps


def _ttm_ref(X, U, n):
    return np.moveaxis(np.tensordot(U.astype(np.float64), X.astype(np.float64), axes=(1, n)), 0, n)


@pytest.mark.parametrize("shape", SHAPES)
def test_ttm_every_mode(shape, dtype, layout, rng):
    X = make_tensor(rng, shape, dtype, layout)
    X0 = X.copy()
    for n in range(len(shape)):
        U = rng.standard_normal((3, shape[n])).astype(dtype)
        ref = _ttm_ref(X, U, n)
        scale = _ttm_ref(np.abs(X), np.abs(U), n)
        for res in (ttm(X, U, n), ttm(X, np.ascontiguousarray(U.T), n, transpose=True), ttm(X, U, n - len(shape))):
            assert res.dtype == dtype
            assert res.shape == ref.shape
            assert np.all(np.abs(res - ref) <= _tol(dtype, shape[n]) * scale + 1e-30)
    np.testing.assert_array_equal(X, X0)


def test_ttm_plan_reuse_and_zero_copy(rng):
    X = rng.standard_normal((20, 30, 40))
    U = rng.standard_normal((30, 5))
    plan = ttm_plan(X, U, 1, transpose=True)
    assert plan.copies == 0
    X2 = rng.standard_normal((20, 30, 40))
    np.testing.assert_allclose(ttm(X2, U, 1, transpose=True, plan=plan), _ttm_ref(X2, U.T, 1), atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_multi_ttm_all_and_skip(shape, dtype, layout, rng):
    X = make_tensor(rng, shape, dtype, layout)
    Us = [rng.standard_normal((s, max(1, s // 2))).astype(dtype) for s in shape]
    for skip in [None, *range(len(shape))]:
        ref = X.astype(np.float64)
        for n in range(len(shape)):
            if n != skip:
                ref = _ttm_ref(ref, Us[n].T, n)
        res = multi_ttm(X, Us, transpose=True, skip=skip)
        assert res.dtype == dtype
        np.testing.assert_allclose(res, ref, rtol=0, atol=_tol(dtype, int(np.prod(shape))) * np.abs(ref).max() * 10)
    plan = multi_ttm_plan(X, Us, transpose=True, skip=0)
    np.testing.assert_allclose(multi_ttm(X, Us, transpose=True, skip=0, plan=plan),
                               multi_ttm(X, Us, transpose=True, skip=0), rtol=0, atol=0)
    assert all(p.copies == 0 for p in plan.plans) or layout == "view"


def test_multi_ttm_order_is_largest_reduction_first(rng):
    X = rng.standard_normal((40, 10, 30))
    Us = [rng.standard_normal((40, 2)), rng.standard_normal((10, 8)), rng.standard_normal((30, 3))]
    plan = multi_ttm_plan(X, Us, transpose=True)
    assert plan.order == (0, 2, 1)  # 2/40 < 3/30 < 8/10
    assert "largest reduction first" in plan.explain()


@pytest.mark.parametrize("n", [10, 1000])
def test_multi_ttm_float32_tensor_float64_matrices(n, rng):
    # a float32 tensor times float64 matrices computes in float64 (as ttm does) on every route: at n = 1000 the
    # compiled kernels were handed the float32 tensor with float64 matrices (a numba TypingError), at n = 10 the
    # result came back in float32
    X = rng.standard_normal((n, 20, 24)).astype(np.float32)
    Us = [np.linalg.qr(rng.standard_normal((m, r)))[0] for m, r in ((20, 5), (24, 6))]
    X0 = X.copy()
    res = multi_ttm(X, Us, modes=[1, 2], transpose=True)
    ref = np.einsum("aij,ir,js->ars", X.astype(np.float64), *Us)
    assert res.dtype == np.float64
    assert np.abs(res - ref).max() <= 50 * np.finfo(np.float64).eps * np.abs(X).max() * 24 * 20
    plan = multi_ttm_plan(X, Us, modes=[1, 2], transpose=True)
    np.testing.assert_array_equal(multi_ttm(X, Us, modes=[1, 2], transpose=True, plan=plan), res)
    np.testing.assert_array_equal(plan(X, {1: Us[0], 2: Us[1]}), res)
    np.testing.assert_array_equal(X, X0)
    with pytest.raises(ValueError, match=r"plan was made for matrices of dtype float64; received matrices\[\d\] of "
                                         r"dtype float32"):
        plan(X, {1: Us[0].astype(np.float32), 2: Us[1].astype(np.float32)})


def test_multi_ttm_same_bits_with_and_without_its_plan(rng):
    # the chain without a plan takes the order multi_ttm_plan takes (here the cost model starts at the last mode)
    X = rng.standard_normal((10, 20, 24))
    Us = [np.linalg.qr(rng.standard_normal((m, r)))[0] for m, r in ((20, 5), (24, 6))]
    plan = multi_ttm_plan(X, Us, modes=[1, 2], transpose=True)
    np.testing.assert_array_equal(multi_ttm(X, Us, modes=[1, 2], transpose=True),
                                  multi_ttm(X, Us, modes=[1, 2], transpose=True, plan=plan))


def test_multi_ttm_with_modes(rng):
    X = rng.standard_normal((4, 5, 6))
    U0, U2 = rng.standard_normal((2, 4)), rng.standard_normal((3, 6))
    ref = _ttm_ref(_ttm_ref(X, U0, 0), U2, 2)
    np.testing.assert_allclose(multi_ttm(X, [U0, U2], modes=[0, 2]), ref, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_gram_every_mode(shape, dtype, layout, rng):
    X = make_tensor(rng, shape, dtype, layout)
    for n in range(len(shape)):
        Xn = _unfold(X.astype(np.float64), n)
        ref = Xn @ Xn.T
        scale = np.abs(Xn) @ np.abs(Xn).T
        G = gram(X, n)
        assert G.dtype == dtype and G.shape == (shape[n], shape[n])
        assert np.all(np.abs(G - ref) <= _tol(dtype, Xn.shape[1]) * scale)


def test_gram_large_inner_loop_path(rng):
    X = rng.standard_normal((3, 5, 70))
    Xn = _unfold(X, 1)
    np.testing.assert_allclose(gram(X, 1), Xn @ Xn.T, rtol=1e-12)


def test_khatri_rao_matches_definition(rng):
    A, B, C = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((2, 4))
    K = khatri_rao([A, B, C])
    for r in range(4):
        np.testing.assert_allclose(K[:, r], np.kron(np.kron(A[:, r], B[:, r]), C[:, r]))
    with pytest.raises(ValueError, match=r"matrices\[1\] has shape \(5, 3\); expected 2-D with 4 columns"):
        khatri_rao([A, B[:, :3]])
    with pytest.raises(ValueError, match=r"matrices is empty"):
        khatri_rao([])


def _mttkrp_ref(X, factors, n):
    letters = "abcdefgh"[: X.ndim]
    ins = ",".join(letters[i] + "r" for i in range(X.ndim) if i != n)
    return np.einsum(f"{letters},{ins}->{letters[n]}r", X.astype(np.float64),
                     *[factors[i].astype(np.float64) for i in range(X.ndim) if i != n])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rank", [1, 3, 40])
def test_mttkrp_every_mode(shape, rank, dtype, layout, rng):
    X = make_tensor(rng, shape, dtype, layout)
    factors = [rng.standard_normal((s, rank)).astype(dtype) for s in shape]
    for n in range(len(shape)):
        ref = _mttkrp_ref(X, factors, n)
        scale = _mttkrp_ref(np.abs(X), [np.abs(f) for f in factors], n)
        M = mttkrp(X, [None if i == n else f for i, f in enumerate(factors)], n)
        assert M.dtype == dtype and M.shape == (shape[n], rank)
        k = int(np.prod(shape)) // shape[n]
        assert np.all(np.abs(M - ref) <= _tol(dtype, k) * scale + 1e-30)


def test_mttkrp_plan_two_steps_without_large_khatri_rao(rng):
    X = rng.standard_normal((30, 40, 50))
    factors = [rng.standard_normal((s, 8)) for s in X.shape]
    plan = mttkrp_plan(X, factors, 1)
    assert plan.first == (2,) and plan.second == (0,)
    assert plan.intermediate_elements == 30 * 40 * 8
    assert all(p.copies == 0 for p in plan.plans)
    assert "batched over the rank" in plan.explain()
    small = [rng.standard_normal((s, 4)) for s in X.shape]
    end = mttkrp_plan(X, small, 0)
    assert end.first == (1, 2) and end.second == ()  # small rank: one GEMM with a Khatri-Rao of 2000 x 4
    np.testing.assert_allclose(mttkrp(X, factors, 1, plan=plan), _mttkrp_ref(X, factors, 1), rtol=1e-10)


@pytest.mark.parametrize(("dtype", "mode", "chains"), [(np.float64, 0, True), (np.float64, 2, True),
                                                     (np.float32, 0, False), (np.float32, 2, True)])
def test_mttkrp_of_a_large_tensor_takes_two_chains(dtype, mode, chains, rng):
    """From a million elements the one-sided MTTKRP contracts the far mode first (a TTM, the compiled kernel
    at small rank) and the near one batched over the rank, instead of one GEMM with the whole Khatri-Rao
    product (0.43-0.88x the time in float64); single precision keeps the one GEMM where the side lies inside
    the mode (mode 0 of a C-order tensor: 0.70-1.31x measured). Where the compiled kernels run, a 3-way
    tensor's first and last modes are one fused pass instead (the middle mode's product, summed or added up
    against the other factor in cache)."""
    X = rng.standard_normal((100, 100, 120)).astype(dtype)
    factors = [rng.standard_normal((s, 6)).astype(dtype) for s in X.shape]
    plan = mttkrp_plan(X, factors, mode)
    far, near = ((2,), (1,)) if mode == 0 else ((0,), (1,))
    if simd_supported():  # (the compiled kernel takes the middle mode's product: one fused pass)
        assert (plan.fused, plan.first, plan.second, plan.intermediate_elements) == (True, (1,), (2 - mode,), 0)
    else:
        assert (plan.first, plan.second) == ((far, near) if chains else ((1, 2), ()))
    small = mttkrp_plan(X[:40], [factors[0][:40], *factors[1:]], mode)  # 480,000 elements: one GEMM
    assert small.fused if simd_supported() else small.second == ()
    ref = _mttkrp_ref(X.astype(np.float64), [U.astype(np.float64) for U in factors], mode)
    got = mttkrp(X, factors, mode, plan=plan)
    k = X.size // X.shape[mode]
    np.testing.assert_allclose(got, ref, rtol=0, atol=4 * np.sqrt(k) * np.finfo(dtype).eps * np.abs(ref).max())


def test_mttkrp_large_rank_end_mode_splits(rng):
    X = rng.standard_normal((6, 7, 8, 9))
    factors = [rng.standard_normal((s, 50)) for s in X.shape]
    plan = mttkrp_plan(X, factors, 0)
    assert plan.second != ()  # rank 50 > sizes: the side is split to keep temporaries small
    np.testing.assert_allclose(mttkrp(X, factors, 0), _mttkrp_ref(X, factors, 0), rtol=1e-10)


# ------------------------------------------------------------------------------------------------ bad input
def test_ttm_bad_inputs(rng):
    X = rng.standard_normal((3, 4, 5))
    with pytest.raises(ValueError, match=r"mode=3 is out of range for a tensor with 3 modes"):
        ttm(X, rng.standard_normal((2, 4)), 3)
    with pytest.raises(TypeError, match=r"mode must be an integer; received float"):
        ttm(X, rng.standard_normal((2, 4)), 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"U has 5 columns but mode 1 of X has size 4; expected U of shape \(J, 4\)"):
        ttm(X, rng.standard_normal((2, 5)), 1)
    with pytest.raises(ValueError, match=r"U has 5 rows but mode 1 of X has size 4"):
        ttm(X, rng.standard_normal((5, 2)), 1, transpose=True)
    with pytest.raises(ValueError, match=r"U must be a 2-D matrix; received an array of shape \(4,\)"):
        ttm(X, rng.standard_normal(4), 1)
    with pytest.raises(TypeError, match=r"X has dtype object"):
        ttm(np.empty((2, 2), dtype=object), np.ones((2, 2)), 0)


def test_multi_ttm_bad_inputs(rng):
    X = rng.standard_normal((3, 4, 5))
    Us = [rng.standard_normal((s, 2)) for s in (3, 4, 5)]
    with pytest.raises(ValueError, match=r"matrices has 2 entries; expected one per mode of X \(3\)"):
        multi_ttm(X, Us[:2])
    with pytest.raises(ValueError, match=r"matrices\[1\] is None but mode 1 is not skipped"):
        multi_ttm(X, [Us[0], None, Us[2]], transpose=True)
    with pytest.raises(ValueError, match=r"matrices\[2\] has shape \(4, 2\) but mode 2 of X has size 5"):
        multi_ttm(X, [Us[0], Us[1], Us[1]], transpose=True)
    with pytest.raises(ValueError, match=r"modes \[0, 0\] repeats a mode"):
        multi_ttm(X, Us[:2], modes=[0, 0], transpose=True)
    with pytest.raises(ValueError, match=r"skip=5 is out of range"):
        multi_ttm(X, Us, skip=5, transpose=True)


@pytest.mark.parametrize("shape", [(60, 60, 60), (30, 30, 30), (40, 90, 25), (200, 120, 10)])
def test_gram_middle_mode_temporaries_stay_a_fraction_of_the_tensor(shape, rng):
    import gc
    import tracemalloc

    # the slabs route batches slab products: the batch (and numpy's copies of it) is capped by the tensor's
    # size, so a small tensor's Gram does not allocate the tensor over again (60^3 had 2.2x its size)
    X = rng.standard_normal(shape)
    Xn = np.moveaxis(X, 1, 0).reshape(shape[1], -1)
    gram(X, 1)
    gc.collect()
    gc.disable()
    try:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        G = gram(X, 1)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    finally:
        gc.enable()
    ref = Xn @ Xn.T  # entries' error bound: (terms) x eps x the largest |x_i . x_j| <= the largest diagonal
    np.testing.assert_allclose(G, ref, rtol=0, atol=Xn.shape[1] * np.finfo(X.dtype).eps * ref.diagonal().max())
    assert peak < 0.6 * X.nbytes + 2 * G.nbytes + (64 << 10) * 4, (peak, X.nbytes)


@pytest.mark.parametrize("shape, mode", [((60, 60, 60, 60), 0), ((60, 60, 60, 60), 3), ((300, 50, 60), 0),
                                         ((400, 20, 20), 0)])
def test_gram_long_rows_same_bits_for_any_workers(shape, mode, rng):
    from tuckerkit.engine import ExecutionPolicy

    # one long (I_n, K) view: column pieces with their partial Grams added in order (the first three), or
    # row blocks of the lower triangle where the partials would be too large (400 x 400 from 400 x 400)
    X = rng.standard_normal(shape)
    Xn = np.moveaxis(X, mode, 0).reshape(shape[mode], -1)
    ref = Xn @ Xn.T
    got = [gram(X, mode, plan=gram_plan(X, mode, policy=ExecutionPolicy(workers=w))) for w in (1, 2, 3)]
    tol = Xn.shape[1] * np.finfo(X.dtype).eps * ref.diagonal().max()
    np.testing.assert_allclose(got[0], ref, rtol=0, atol=tol)
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])
    assert np.array_equal(got[0], got[0].T)


def test_gram_and_mttkrp_bad_inputs(rng):
    X = rng.standard_normal((3, 4, 5))
    with pytest.raises(ValueError, match=r"mode=-4 is out of range"):
        gram(X, -4)
    with pytest.raises(ValueError, match=r"factors has 2 matrices; expected one per mode of X \(3\)"):
        mttkrp(X, [np.ones((3, 2)), np.ones((4, 2))], 0)
    with pytest.raises(ValueError, match=r"factors\[2\] has 6 rows but mode 2 of X has size 5"):
        mttkrp(X, [None, np.ones((4, 2)), np.ones((6, 2))], 0)
    with pytest.raises(ValueError, match=r"factors have different numbers of columns \[2, 3\]"):
        mttkrp(X, [None, np.ones((4, 2)), np.ones((5, 3))], 0)
    with pytest.raises(ValueError, match=r"X must have at least 1 dimension\(s\); received a 0-d array"):
        gram(np.float64(3.0), 0)


def test_gram_plan_routes_and_reuse(rng):
    X = rng.standard_normal((6, 7, 8))
    assert gram_plan(X, 0).route == "syrk" and gram_plan(X, 2).route == "syrk"
    p1 = gram_plan(X, 1)
    assert p1.route == "slabs" and p1.outer == (0,) and p1.inner == (2,)
    assert "loop over modes [0]" in p1.explain()
    Xn = _unfold(X, 1)
    np.testing.assert_allclose(gram(X, 1, plan=p1), Xn @ Xn.T, rtol=1e-12)
    with pytest.raises(ValueError, match=r"plan was made for mode 1, shape \(6, 7, 8\)"):
        gram(np.asfortranarray(X), 1, plan=p1)
    V = rng.standard_normal((6, 7, 8, 2))[:, :, :, 0]  # non-flattenable inner modes: the engine's remedy
    assert gram_plan(V, 0).route in ("blocks", "syrk", "slabs")
    Vn = _unfold(V, 0)
    np.testing.assert_allclose(gram(V, 0), Vn @ Vn.T, rtol=1e-12)


# ------------------------------------------------------------------------ HOOI's factor step: Gram, not SVD
def _planted_gram(rng, n, r, noise):
    """A PSD Gram with r well-separated leading eigenvalues (10 down to 1) over a noise floor."""
    U = np.linalg.qr(rng.standard_normal((n, r)))[0]
    A = U * np.linspace(10.0, 1.0, r)[None, :] @ rng.standard_normal((r, 3 * n)) / np.sqrt(3 * n)
    A += noise * rng.standard_normal((n, 3 * n)) / np.sqrt(3 * n)
    return A @ A.T


@pytest.mark.parametrize(("n", "r", "noise"), [(100, 5, 1e-2), (200, 10, 1e-2), (200, 10, 0.1), (301, 20, 1e-3)])
def test_certified_subspace_iteration_matches_lapack(rng, n, r, noise):
    """The leading eigenpairs of a Gram with a spectral gap by subspace iteration equal LAPACK's to a few eps
    over each pair's gap; the Gram is not modified and the same call gives the same bits."""
    import scipy.linalg

    from tuckerkit.engine._subspace import _top_eigh_subspace, sign_fix

    G = _planted_gram(rng, n, r, noise)
    G0 = G.copy()
    out = _top_eigh_subspace(G, r)
    assert out is not None
    w, V = out
    np.testing.assert_array_equal(G, G0)
    wl, Vl = scipy.linalg.eigh(G0, subset_by_index=[n - r - 1, n - 1])
    wl, Vl = wl[::-1], Vl[:, ::-1]
    eps = np.finfo(np.float64).eps
    normG = np.linalg.norm(G0, 2)
    np.testing.assert_allclose(w, wl[:r], rtol=0, atol=64 * n * eps * normG)
    gaps = np.minimum(np.abs(np.diff(wl, prepend=np.inf))[:r], np.abs(np.diff(wl))[:r])  # to each neighbour
    err = np.abs(sign_fix(V) - sign_fix(np.ascontiguousarray(Vl[:, :r]))).max(axis=0)
    assert np.all(err <= 64 * n * eps * normG / gaps), (err, gaps)
    np.testing.assert_allclose(V.T @ V, np.eye(r), rtol=0, atol=64 * n * eps)
    w2, V2 = _top_eigh_subspace(G, r)
    assert w2.tobytes() == w.tobytes() and V2.tobytes() == V.tobytes()


def test_certified_subspace_iteration_refuses_what_it_cannot_certify(rng):
    """None (LAPACK decides) for a flat spectrum, a float32 or small Gram, and a Gram whose leading
    eigenvector the fixed start cannot see: there the Ritz pairs converge at once with tiny residuals, and only
    the bound on the rest of the spectrum (||P G P||_F) tells that they are not the leading ones."""
    from tuckerkit.engine import _subspace
    from tuckerkit.engine._subspace import _top_eigh_subspace

    A = rng.standard_normal((200, 600))
    assert _top_eigh_subspace(A @ A.T, 10) is None  # no gap: refused after its first check
    G = _planted_gram(rng, 200, 10, 1e-2)
    assert _top_eigh_subspace(G.astype(np.float32), 10) is None
    assert _top_eigh_subspace(G[:12, :12].copy(), 3) is None  # below the compiled iteration's orders
    assert _top_eigh_subspace(G[:64, :64].copy(), 17) is None  # above its ranks, below the numpy one's orders
    assert _top_eigh_subspace(np.zeros((200, 200)), 10) is None
    for bad in (np.nan, np.inf):
        B = G.copy()
        B[3, 3] = bad
        assert _top_eigh_subspace(B, 10) is None
    n, r = 200, 10
    k = r + max(4, r // 2)
    assert _top_eigh_subspace(G, r) is not None
    # an invariant subspace = the start's span (eigenvalues 1.0 .. 0.68 and small ones) and one eigenvalue off
    # it that belongs among the leading r: 0.7, between the block's 9th and 10th (0.716, 0.68)
    _assert_blind_and_bad_spectra_refused(rng, G, _subspace._SUBSPACE_STARTS[(n, k)], r)


def _assert_blind_and_bad_spectra_refused(rng, G, Q0, r):
    """``_top_eigh_subspace`` refuses (1) a Gram whose leading eigenvector is orthogonal to the fixed start
    ``Q0`` (``n x k``): the start's span is invariant (eigenvalues 1.0 .. 0.5 on its first r columns, ~1e-3
    on the rest) and the eigenvalue off it, 5.0 or 0.7, is among the leading r; (2) ``G`` with a negative
    eigenvalue larger in magnitude than the r-th (the block converges to the others); (3) ``G`` with its r-th
    eigenvalue equal to the next (no gap)."""
    from tuckerkit.engine._subspace import _top_eigh_subspace

    n, k = Q0.shape
    u = rng.standard_normal(n)
    u -= Q0 @ (Q0.T @ u)
    u /= np.linalg.norm(u)
    mu = np.linspace(2.0, 1.0, k) * 1e-3 + np.linspace(1.0, 0.5, k) * (np.arange(k) < r)
    for hidden in (5.0, 0.7):
        blind = (Q0 * mu[None, :]) @ Q0.T + hidden * np.outer(u, u)
        assert hidden in np.round(np.linalg.eigvalsh(blind)[-r:], 12)
        assert _top_eigh_subspace(blind, r) is None
    w, U = np.linalg.eigh(G)
    for w2 in (np.where(np.arange(n) == 0, -20.0, w), np.where(np.arange(n) == n - r - 1, w[n - r], w)):
        assert _top_eigh_subspace((U * w2[None, :]) @ U.T, r) is None


@pytest.mark.parametrize(("n", "r", "noise"), [(50, 10, 1e-2), (100, 5, 1e-2), (200, 10, 0.1)])
def test_certified_subspace_iteration_from_a_warm_start(rng, n, r, noise):
    """From a warm start (the leading vectors perturbed, as HOOI's previous factor) the pairs are LAPACK's to a
    few eps over the gaps (50 x 50: an order only a warm start is tried at); from a wrong start (vectors of
    another matrix, one blind to the leading eigenvector, zeros) the result is still the leading pairs or None,
    never other pairs; the same start gives the same bits; a start of another dtype or shape is ignored."""
    import scipy.linalg

    from tuckerkit.engine import _subspace
    from tuckerkit.engine._subspace import _top_eigh_subspace, sign_fix

    G = _planted_gram(rng, n, r, noise)
    wl, Vl = scipy.linalg.eigh(G, subset_by_index=[n - r - 1, n - 1])
    wl, Vl = wl[::-1], np.ascontiguousarray(Vl[:, ::-1])
    eps = np.finfo(np.float64).eps
    normG = np.linalg.norm(G, 2)
    gaps = np.minimum(np.abs(np.diff(wl, prepend=np.inf))[:r], np.abs(np.diff(wl))[:r])

    def check(out):
        w, V = out
        np.testing.assert_allclose(w, wl[:r], rtol=0, atol=64 * n * eps * normG)
        err = np.abs(sign_fix(V) - sign_fix(Vl[:, :r])).max(axis=0)
        assert np.all(err <= 64 * n * eps * normG / gaps), (err, gaps)

    warm = Vl[:, :r] + 1e-4 * rng.standard_normal((n, r))
    out = _top_eigh_subspace(G, r, warm)
    cold = _top_eigh_subspace(G, r)
    assert out is not None
    check(out)
    # (too small for a cold start, unless the compiled iteration takes the order)
    assert (cold is None) == (n < _subspace.SUBSPACE_MIN_ORDER and not _subspace._compiled_order(n, r))
    for ignored in (warm.astype(np.float32), warm[:, :-1].copy()):
        got = _top_eigh_subspace(G, r, ignored)
        assert got is None if cold is None else got[1].tobytes() == cold[1].tobytes()
    again = _top_eigh_subspace(G, r, warm)
    assert again[0].tobytes() == out[0].tobytes() and again[1].tobytes() == out[1].tobytes()
    A = rng.standard_normal((n, 2 * n))
    other = np.linalg.eigh(A @ A.T)[1][:, -r:]  # another matrix's vectors
    blind = Vl[:, 1:r + 1]  # the 2nd to (r+1)-th: orthogonal to the leading one
    for start in (other, blind, np.zeros((n, r))):
        got = _top_eigh_subspace(G, r, np.ascontiguousarray(start))
        if got is not None:
            check(got)


def test_hooi_warm_starts_its_factor_steps(rng):
    """HOOI hands each factor step the factor it replaces: the eigensolves of a 50^3 HOOI (orders below the cold
    start's minimum) are certified from it, the model equals a run without warm starts to rounding, and two
    runs give the same bits."""
    from tuckerkit.datasets import make_low_rank_tucker

    import tuckerkit as tk
    from tuckerkit.engine import _subspace

    X = make_low_rank_tucker((50, 50, 50), (10, 10, 10), noise=0.01, random_state=1).data
    init = tk.hosvd(X, 10)
    calls = []
    real = _subspace._top_eigh_subspace

    def spy(G, r, start=None):
        out = real(G, r, start)
        calls.append((start is not None, out is not None))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_subspace, "_top_eigh_subspace", spy)
        res = tk.hooi(X, 10, init=init, tol=0, max_iter=4)
    assert calls and all(calls) and len(calls) == 12  # 4 iterations x 3 modes, each warm and certified
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_subspace, "WARM_MIN_ORDER", 10**9)  # no warm starts: LAPACK at this order
        mp.setattr(_subspace, "_compiled_order", lambda n, r: False)
        cold = tk.hooi(X, 10, init=init, tol=0, max_iter=4)
    eps = np.finfo(np.float64).eps
    assert abs(res.fit - cold.fit) <= 1e3 * eps
    for U, V in zip(res.factors, cold.factors, strict=True):
        np.testing.assert_allclose(U, V, rtol=0, atol=1e6 * eps)  # (eigenvectors to eps over the gaps)
    again = tk.hooi(X, 10, init=init, tol=0, max_iter=4)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(again.factors, res.factors, strict=True))
    assert again.core.tobytes() == res.core.tobytes()


@pytest.mark.parametrize(("n", "r", "noise"), [(14, 3, 1e-2), (20, 5, 1e-2), (37, 7, 1e-3), (64, 10, 1e-2),
                                                (64, 10, 0.1), (100, 16, 1e-2), (128, 12, 1e-2)])
def test_compiled_iteration_matches_lapack(rng, n, r, noise):
    """On the orders and ranks the compiled iteration takes (certified_top), cold and from a warm start: LAPACK's
    pairs to a few eps over each pair's gap, orthonormal, the signs already sign_fix's, the Gram unmodified,
    the same bits on a repeat; the numpy iteration is not consulted."""
    import scipy.linalg

    from tuckerkit.engine import _subspace
    from tuckerkit.engine._subspace import _top_eigh_subspace, sign_fix

    assert _subspace._compiled_order(n, r)
    G = _planted_gram(rng, n, r, noise)
    G0 = G.copy()
    wl, Vl = scipy.linalg.eigh(G0, subset_by_index=[n - r - 1, n - 1])
    wl, Vl = wl[::-1], np.ascontiguousarray(Vl[:, ::-1])
    eps = np.finfo(np.float64).eps
    normG = np.linalg.norm(G0, 2)
    gaps = np.minimum(np.abs(np.diff(wl, prepend=np.inf))[:r], np.abs(np.diff(wl))[:r])
    warm = Vl[:, :r] + 1e-3 * rng.standard_normal((n, r))
    outs = [_top_eigh_subspace(G, r), _top_eigh_subspace(G, r, warm)]
    for out in outs:
        assert out is not None
        w, V = out
        np.testing.assert_array_equal(G, G0)
        np.testing.assert_allclose(w, wl[:r], rtol=0, atol=64 * n * eps * normG)
        assert V.tobytes() == sign_fix(V).tobytes()
        err = np.abs(V - sign_fix(Vl[:, :r])).max(axis=0)
        assert np.all(err <= 64 * n * eps * normG / gaps), (err, gaps)
        np.testing.assert_allclose(V.T @ V, np.eye(r), rtol=0, atol=64 * n * eps)
    with pytest.MonkeyPatch.context() as mp:  # (the numpy iteration's every step calls _thin_q: not reached)
        mp.setattr(_subspace, "_thin_q", None)
        for start, (w, V) in zip((None, warm), outs, strict=True):
            w2, V2 = _top_eigh_subspace(G, r, start)
            assert w2.tobytes() == w.tobytes() and V2.tobytes() == V.tobytes()


@pytest.mark.parametrize(("n", "r"), [(20, 5), (64, 10), (128, 12)])
def test_compiled_iteration_on_a_float32_gram(rng, n, r):
    """A float32 Gram (and a float32 warm start) on the compiled iteration's orders: the pairs of its exact
    float64 copy, rounded to float32 (LAPACK's float64 pairs of that copy to float32's rounding over the gaps),
    orthonormal to float32's eps, signs fixed, the same bits on a repeat; ?ssyevr's own answer is no closer."""
    import scipy.linalg

    from tuckerkit.engine._subspace import _top_eigh_subspace, sign_fix

    G = _planted_gram(rng, n, r, 1e-2).astype(np.float32)
    G64 = G.astype(np.float64)
    wl, Vl = scipy.linalg.eigh(G64, subset_by_index=[n - r - 1, n - 1])
    wl, Vl = wl[::-1], np.ascontiguousarray(Vl[:, ::-1])
    gaps = np.minimum(np.abs(np.diff(wl, prepend=np.inf))[:r], np.abs(np.diff(wl))[:r])
    eps32 = float(np.finfo(np.float32).eps)
    normG = np.linalg.norm(G64, 2)
    Vs = scipy.linalg.eigh(G, subset_by_index=[n - r, n - 1])[1]  # LAPACK in float32
    err_lapack32 = np.abs(sign_fix(np.ascontiguousarray(Vs[:, ::-1])) - sign_fix(Vl[:, :r])).max()
    for start in (None, (Vl[:, :r] + 1e-3 * rng.standard_normal((n, r))).astype(np.float32)):
        out = _top_eigh_subspace(G, r, start)
        assert out is not None
        w, V = out
        assert w.dtype == np.float32 and V.dtype == np.float32
        np.testing.assert_allclose(w, wl[:r], rtol=2 * eps32, atol=0)
        assert V.tobytes() == sign_fix(V).tobytes()
        err = np.abs(V.astype(np.float64) - sign_fix(Vl[:, :r])).max(axis=0)
        assert np.all(err <= eps32 + 64 * n * np.finfo(np.float64).eps * normG / gaps), (err, gaps)
        assert err.max() <= err_lapack32
        np.testing.assert_allclose(V.T.astype(np.float64) @ V, np.eye(r), rtol=0, atol=4 * n * eps32)
        again = _top_eigh_subspace(G, r, start)
        assert again[0].tobytes() == w.tobytes() and again[1].tobytes() == V.tobytes()


def test_compiled_iteration_refuses_what_it_cannot_certify(rng):
    """The compiled iteration returns None (LAPACK decides) for a flat spectrum, zeros, a NaN or Inf, a norm
    whose squares would underflow or overflow, a Gram whose leading eigenvector its fixed start cannot see (the
    Ritz pairs converge at once; only the bound on the rest of the spectrum tells), a negative eigenvalue larger
    in magnitude than the r-th, and an r-th eigenvalue equal to the next; from a wrong warm start it gives the
    leading pairs or None, never other pairs."""
    import scipy.linalg

    from tuckerkit.engine import _subspace
    from tuckerkit.engine._subspace import _top_eigh_subspace, sign_fix

    n, r = 64, 10
    k = r + 2  # (the compiled iteration's cold block)
    assert _subspace._compiled_order(n, r)
    A = rng.standard_normal((n, 3 * n))
    assert _top_eigh_subspace(A @ A.T, r) is None
    assert _top_eigh_subspace(np.zeros((n, n)), r) is None
    G = _planted_gram(rng, n, r, 1e-2)
    assert _top_eigh_subspace(G, r) is not None
    for bad in (np.nan, np.inf):
        B = G.copy()
        B[3, 3] = bad
        assert _top_eigh_subspace(B, r) is None
        assert _top_eigh_subspace(B, r, np.linalg.eigh(G)[1][:, -r:].copy()) is None
    for scale, refused in ((1e-170, True), (1e-60, False), (1e100, False), (1e200, True)):
        assert (_top_eigh_subspace(G * scale, r) is None) == refused
    _assert_blind_and_bad_spectra_refused(rng, G, _subspace._COMPILED_STARTS[(n, k)], r)
    wl, Vl = scipy.linalg.eigh(G, subset_by_index=[n - r - 1, n - 1])
    wl, Vl = wl[::-1], np.ascontiguousarray(Vl[:, ::-1])
    gaps = np.minimum(np.abs(np.diff(wl, prepend=np.inf))[:r], np.abs(np.diff(wl))[:r])
    eps = np.finfo(np.float64).eps
    other = np.linalg.eigh(A @ A.T)[1][:, -r:]  # another matrix's vectors
    for start in (other, Vl[:, 1:r + 1], np.zeros((n, r))):  # ... and one blind to the leading vector
        got = _top_eigh_subspace(G, r, np.ascontiguousarray(start))
        if got is not None:
            np.testing.assert_allclose(got[0], wl[:r], rtol=0, atol=64 * n * eps * np.linalg.norm(G, 2))
            err = np.abs(got[1] - sign_fix(Vl[:, :r])).max(axis=0)
            assert np.all(err <= 64 * n * eps * np.linalg.norm(G, 2) / gaps)


@pytest.mark.parametrize("scale", [1e-170, 1e-83, 1e-60, 1e60, 1e150, 1e200])
def test_certified_subspace_iteration_at_extreme_scales(rng, scale):
    """A Gram scaled toward the ends of float64: refused where its squares would underflow or overflow (LAPACK,
    which scales, decides), else the same pairs as LAPACK on the scaled Gram."""
    import scipy.linalg

    from tuckerkit.engine._subspace import _top_eigh_subspace, sign_fix

    G = _planted_gram(rng, 200, 10, 1e-2) * scale
    out = _top_eigh_subspace(G, 10)
    normF = np.linalg.norm(G / scale) * scale
    assert (out is None) == (not 2.0**-400 <= normF <= 2.0**400)
    if out is not None:
        wl, Vl = scipy.linalg.eigh(G, subset_by_index=[190, 199])
        eps = np.finfo(np.float64).eps
        np.testing.assert_allclose(out[0], wl[::-1], rtol=0, atol=64 * 200 * eps * normF)
        gap = (wl[0] - np.linalg.eigvalsh(G)[-11]) / normF
        np.testing.assert_allclose(sign_fix(out[1]), sign_fix(np.ascontiguousarray(Vl[:, ::-1])), rtol=0,
                                   atol=64 * 200 * eps / gap)


def test_leading_left_singular_takes_the_certified_route_on_large_grams(rng):
    """Both routes of leading_left_singular (the I_n x I_n Gram, the Gram of the other side) take the certified
    subspace iteration on a large planted tensor and match the SVD to a few eps over the gaps."""
    from tuckerkit.engine import _subspace, default_policy
    from tuckerkit.engine._subspace import leading_left_singular, sign_fix

    taken = []
    real = _subspace._top_eigh_subspace

    def _subspace_spy(G, r, start=None):
        out = real(G, r, start)
        taken.append((G.shape, out is not None))
        return out

    for shape in ((200, 30, 30), (200, 12, 12)):  # mode 0: its 200 x 200 Gram; the 144 x 144 of the other side
        n, r = 0, 8
        core = rng.standard_normal((8, 8, 8))
        Us = [np.linalg.qr(rng.standard_normal((s, 8)))[0] for s in shape]
        Y = multi_ttm(core, Us) + 1e-3 * rng.standard_normal(shape)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_subspace, "_top_eigh_subspace", _subspace_spy)
            U, w = leading_left_singular(Y, n, r, default_policy())
        M = _unfold(Y, n)
        Ur, s, _ = np.linalg.svd(M, full_matrices=False)
        eps = np.finfo(np.float64).eps
        gap = np.min(-np.diff(s[:r + 1] ** 2)) / s[0] ** 2
        assert np.max(np.abs(U - sign_fix(Ur[:, :r]))) <= 1e3 * eps / gap
        np.testing.assert_allclose(w, s[:r] ** 2, rtol=0, atol=1e3 * eps * s[0] ** 2)
    assert taken == [((200, 200), True), ((144, 144), True)]  # (taken and certified)


@pytest.mark.parametrize("shape,n,r", [((40, 3, 4), 0, 5), ((3, 40, 4), 1, 12), ((2, 3, 29), 2, 6),
                                       ((31, 2, 2, 3), 0, 12), ((5, 6), 1, 4)])
def test_leading_left_singular_matches_the_svd(shape, n, r, dtype, rng):
    from tuckerkit.engine import default_policy
    from tuckerkit.engine._subspace import leading_left_singular, sign_fix

    Y = rng.standard_normal(shape).astype(dtype)
    U, w = leading_left_singular(Y, n, r, default_policy())
    M = _unfold(Y.astype(np.float64), n)
    Ur, s, _ = np.linalg.svd(M, full_matrices=False)
    eps = np.finfo(dtype).eps
    # each vector is fixed to eps over its relative gap to its neighbours (the next one's too when r < len(s))
    gap = np.min(-np.diff(s[:min(r + 1, len(s))] ** 2)) / s[0] ** 2 if r > 1 or r < len(s) else 1.0
    assert U.dtype == dtype and U.shape == (shape[n], r) and U.flags.c_contiguous
    np.testing.assert_allclose(U.T.astype(np.float64) @ U, np.eye(r), atol=64 * eps)
    # the same vectors as the SVD's (signs fixed the same way), to a few eps over the relative gap
    assert np.max(np.abs(U - sign_fix(Ur[:, :r]))) <= 64 * eps / gap
    np.testing.assert_allclose(w, s[:r] ** 2, rtol=0, atol=64 * eps * s[0] ** 2)


def test_leading_left_singular_of_a_rank_deficient_projection_is_orthonormal(rng):
    from tuckerkit.engine import default_policy
    from tuckerkit.engine._subspace import leading_left_singular

    # rank 2 unfolding (30 x 6), 5 vectors asked: the first 2 span its range, all 5 are orthonormal
    Y = np.einsum("ir,rj->ij", rng.standard_normal((30, 2)), rng.standard_normal((2, 6))).reshape(30, 2, 3)
    U, w = leading_left_singular(Y, 0, 5, default_policy())
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=64 * eps)
    Q = np.linalg.qr(Y.reshape(30, 6))[0][:, :2]
    assert subspace_sine(Q, U[:, :2]) <= 1e3 * eps
    assert np.all(w[2:] <= 1e3 * eps * w[0])
    U2, w2 = leading_left_singular(Y, 0, 5, default_policy())
    assert U.tobytes() == U2.tobytes() and w.tobytes() == w2.tobytes()


@pytest.mark.parametrize("shape,ranks", [((14, 12, 16), (3, 4, 2)), ((9, 8, 7, 10), (2, 3, 2, 3))])
@pytest.mark.parametrize("iters", [1, 3, 10])
def test_hooi_fit_equals_tensorly_and_pyttb_to_rounding(shape, ranks, iters, rng):
    """From the same start, HOOI's fit equals TensorLy's and pyttb's at every iteration count (the issue asks
    1e-8; they agree to rounding: 2.2e-16 measured) and its subspaces are TensorLy's (sines 3.3e-15)."""
    import warnings

    import tuckerkit as tk

    tl_dec = pytest.importorskip("tensorly.decomposition")
    ttb = pytest.importorskip("pyttb")
    X = rng.standard_normal(shape)
    init = tk.hosvd(X, ranks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = tk.hooi(X, ranks, init=init, max_iter=iters, tol=0.0)
        tlT = tl_dec.tucker(X, rank=list(ranks), init=(init.core.copy(), [U.copy() for U in init.factors]),
                            n_iter_max=iters, tol=0)
        _, _, info = ttb.tucker_als(ttb.tensor(X.copy()), list(ranks), stoptol=0.0, maxiters=iters,
                                    init=[U.copy() for U in init.factors], printitn=0)
    tl_fit = 1 - np.linalg.norm(X - np.asarray(tlT.to_tensor())) / np.linalg.norm(X)
    assert ours.n_iter == iters
    eps = np.finfo(np.float64).eps
    assert abs(ours.fit - tl_fit) <= 1e3 * eps
    assert abs(ours.fit - float(info["fit"])) <= 1e3 * eps
    # same subspaces as TensorLy's factors
    for U, V in zip(ours.factors, tlT.factors, strict=True):
        assert subspace_sine(U, np.asarray(V)) <= 1e-12


@pytest.mark.parametrize("shape", [(24, 20, 16, 12), (12, 10, 9, 8, 7)])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mttkrp_sweep_with_merged_halves_matches_einsum(shape, layout, dtype, rng, planned_sweeps):
    from tuckerkit.engine import mttkrp_sweep

    # a half whose modes sit next to each other in memory is contracted as one axis of a view with the 2-D
    # Khatri-Rao product (the compiled kernel may take it); a strided view keeps the 3-D product
    base = rng.standard_normal(tuple(n + 3 for n in shape) if layout == "strided" else shape).astype(dtype)
    X = (base[tuple(slice(1, 1 + n) for n in shape)] if layout == "strided"
         else np.asfortranarray(base) if layout == "F" else base)
    R = 6
    U = [rng.standard_normal((n, R)).astype(dtype) for n in shape]
    letters = "abcdefg"[: len(shape)]
    got = {}
    plans = mttkrp_sweep(X, [u.copy() for u in U], lambda n, M: got.setdefault(n, M.copy()))
    Xd = X.astype(np.float64)
    for n in range(len(shape)):  # no factor replaced by update: every MTTKRP uses the starting factors
        others = [m for m in range(len(shape)) if m != n]
        spec = f"{letters}," + ",".join(f"{letters[m]}z" for m in others) + f"->{letters[n]}z"
        ref = np.einsum(spec, Xd, *(U[m].astype(np.float64) for m in others), optimize=True)
        tol = 4 * math.prod(shape) // shape[n] * np.finfo(dtype).eps * np.abs(ref).max()
        np.testing.assert_allclose(got[n], ref, rtol=0, atol=tol)
    assert np.array_equal(X, base[tuple(slice(1, 1 + n) for n in shape)] if layout == "strided" else X)
    # the halves of a C- or F-ordered tensor are merged (a 2-D matrix operand); a strided view's are not
    passes = [p for p in plans if math.prod(p.shapes[0]) == X.size]
    assert len(passes) == 2
    assert [len(p.shapes[1]) for p in passes] == ([3, len(shape) - 1] if layout == "strided" else [2, 2])


@pytest.mark.parametrize("shape, mode", [((10, 100, 10), 1), ((10, 200, 10), 1), ((7, 33, 13), 1),
                                         ((100, 10, 10), 1), ((300, 10, 10), 1)])
def test_gram_of_a_small_projection_packed_whole(shape, mode, rng, monkeypatch):
    """HOOI's small projections take one packed SYRK: exactly symmetric, equal to the unfolding's Gram to
    the dtype's rounding, the same bits for one and two workers, and no thread hand-off."""
    import tuckerkit.engine._gram as gram_mod
    from tuckerkit.engine import ExecutionPolicy

    X = rng.standard_normal(shape)
    assert gram_plan(X, mode).route == "slabs"
    monkeypatch.setattr(gram_mod, "parallel_for", lambda *a, **k: pytest.fail("a small Gram was cut into pieces"))
    G = gram_plan(X, mode, policy=ExecutionPolicy(workers=2))(X)
    assert np.array_equal(G, G.T)
    assert np.array_equal(G, gram_plan(X, mode, policy=ExecutionPolicy(workers=1))(X))
    assert np.array_equal(G, gram(X, mode))
    Xn = _unfold(X, mode)
    ref = Xn @ Xn.T
    np.testing.assert_allclose(G, ref, rtol=0, atol=Xn.shape[1] * np.finfo(X.dtype).eps * ref.diagonal().max())


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ttmc_sweep_of_a_3way_tensor_never_projects_its_unit_stride_mode_alone(order, dtype, rng, planned_sweeps):
    """HOOI's sweep reads X twice; on a C-ordered 3-way tensor the two reads project modes {1, 2} and mode 0
    (the halves [0] | [1, 2]), never the unit-stride mode 2 alone; an F-ordered one keeps [0, 1] | [2]
    (its unit-stride mode 0 goes with mode 1). The operand names the partials its sweep takes from a start,
    every update sees the latest factors (Gauss-Seidel), and each projection equals einsum's."""
    from tuckerkit.engine import as_operand, ttmc_sweep

    X = np.asarray(rng.standard_normal((24, 20, 16)), order=order).astype(dtype, order="K")
    U0 = [np.linalg.qr(rng.standard_normal((n, r)))[0].astype(dtype) for n, r in zip(X.shape, (3, 4, 5), strict=True)]
    new = [np.linalg.qr(rng.standard_normal((n, r)))[0].astype(dtype) for n, r in zip(X.shape, (3, 4, 5), strict=True)]
    factors = [u.copy() for u in U0]
    got, used = {}, {}

    def update(n, Y):
        got[n] = np.array(Y)
        used[n] = [f.copy() for f in factors]
        factors[n] = new[n]

    plans = ttmc_sweep(X, factors, update)
    passes = sorted(sorted(p.order) for p in plans if p.shape == X.shape)
    assert passes == ([[0], [1, 2]] if order == "C" else [[0, 1], [2]])
    assert [sorted(s) for s in as_operand(X).sweep_spine()] == ([[0]] if order == "C" else [[0, 1], [0]])
    Xd = X.astype(np.float64)
    for n in range(3):
        assert all(np.array_equal(used[n][m], new[m] if m < n else U0[m]) for m in range(3) if m != n)
        spec = {0: "abc,bj,ck->ajk", 1: "abc,ai,ck->ibk", 2: "abc,ai,bj->ijc"}[n]
        ref = np.einsum(spec, Xd, *(used[n][m].astype(np.float64) for m in range(3) if m != n), optimize=True)
        tol = 4 * X.size // X.shape[n] * np.finfo(dtype).eps * np.abs(Xd).max()
        np.testing.assert_allclose(got[n], ref, rtol=0, atol=tol)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_skewed_3way_hooi_sweep_takes_the_halves_with_small_projections(order, dtype, rng, planned_sweeps):
    """HOOI's tree on a C-ordered tensor with a last mode much longer than the first ((4, 5, 600); measured on
    (10, 1000, 1000) at rank 5: 0.46x the iteration) projects modes {0, 1} and mode 2 ([0, 1] | [2], not
    [0] | [1, 2], whose projection of mode 0 alone kept most of the tensor); the operand's spine (the
    partials a start hands over) says the same, and every projection is einsum's to rounding. The mirror
    image: an F-ordered (600, 5, 4) takes [0] | [1, 2] instead of its [0, 1] | [2]."""
    from tuckerkit.engine import as_operand, ttmc_sweep
    from tuckerkit.engine._sweeps import skewed_last, splits_first_alone

    assert skewed_last((10, 1000, 1000)) and skewed_last((20, 500, 500)) and skewed_last((10, 10, 100000))
    # partials 1.68x and 2.59x smaller, above SKEW = 1.5 (HOOI 0.79-0.94x the iteration with the halves)
    assert skewed_last((30, 3000, 100)) and skewed_last((40, 1000, 200))
    assert not any(map(skewed_last, [(200, 200, 200), (100000, 10, 10), (320, 240, 160), (60, 60, 60, 60)]))
    X = rng.standard_normal((4, 5, 600)).astype(dtype)
    if order == "F":
        X = np.asfortranarray(rng.standard_normal((600, 5, 4)).astype(dtype))
    assert splits_first_alone(X) == (order == "F") and splits_first_alone(np.empty((24, 20, 16)))
    assert not splits_first_alone(np.empty((24, 20, 16), order="F"))
    factors = [np.linalg.qr(rng.standard_normal((n, 3)))[0].astype(dtype) for n in X.shape]
    got = {}
    plans = ttmc_sweep(X, [f.copy() for f in factors], lambda n, Y: got.setdefault(n, np.array(Y)))
    halves = [[0, 1], [2]] if order == "C" else [[0], [1, 2]]
    assert sorted(sorted(p.order) for p in plans if p.shape == X.shape) == halves
    assert [sorted(s) for s in as_operand(X).sweep_spine()] == ([[0, 1], [0]] if order == "C" else [[0]])
    Xd = X.astype(np.float64)
    for n in range(3):
        spec = {0: "abc,bj,ck->ajk", 1: "abc,ai,ck->ibk", 2: "abc,ai,bj->ijc"}[n]
        ref = np.einsum(spec, Xd, *(factors[m].astype(np.float64) for m in range(3) if m != n), optimize=True)
        np.testing.assert_allclose(got[n], ref, rtol=0, atol=4 * X.size * np.finfo(dtype).eps * np.abs(Xd).max())


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_skewed_3way_mttkrp_sweep_takes_the_halves_with_small_partials(order, dtype, rng, planned_sweeps):
    """A C-ordered 3-way tensor with a long last mode ((4, 5, 600); measured on (10, 10, 100000) at R = 16) has
    the halves [0, 1] | [2]: its partials 640 elements a rank against 5400 for [0] | [1, 2] (SKEW = 1.5), whose
    pass over mode 0 alone wrote a partial of 1.6x the tensor there. The passes: mode 2 alone (a partial of
    4 x 5 x R, then GEMVs), then modes 0 and 1 with their Khatri-Rao product (one GEMM on a merged view); the
    updates Gauss-Seidel, each MTTKRP einsum's to rounding. A cube keeps [0] | [1, 2]. The mirror image: an
    F-ordered (600, 5, 4) takes [0] | [1, 2] (modes 1 and 2 by their Khatri-Rao product, then mode 0 alone)."""
    from tuckerkit.engine._sweeps import SKEW, _partial_elems

    assert (_partial_elems((4, 5, 600), [[1, 2], [0]]), _partial_elems((4, 5, 600), [[2], [0, 1]])) == (5400, 640)
    assert 5400 > SKEW * 640
    assert _partial_elems((24, 24, 24), [[1, 2], [0]]) <= _partial_elems((24, 24, 24), [[2], [0, 1]])
    X = rng.standard_normal((4, 5, 600)).astype(dtype)
    if order == "F":
        X = np.asfortranarray(rng.standard_normal((600, 5, 4)).astype(dtype))
    passes = _checked_mttkrp_sweep(X, 5, rng)
    assert passes == (["abc,cZ->abZ", "ca,aZ->cZ"] if order == "C" else ["ac,cZ->aZ", "abc,aZ->bcZ"])


def _checked_mttkrp_sweep(X, R, rng) -> list[str]:
    """One 3-way MTTKRP sweep of ``X`` at rank ``R`` whose update replaces each factor: every MTTKRP is einsum's
    to rounding on the factors it saw (Gauss-Seidel: the new ones before its mode, the first ones after).
    Returns the specs of the passes over all of ``X``."""
    from tuckerkit.engine import mttkrp_sweep

    dtype = X.dtype
    U0 = [rng.standard_normal((n, R)).astype(dtype) for n in X.shape]
    new = [rng.standard_normal((n, R)).astype(dtype) for n in X.shape]
    factors = [u.copy() for u in U0]
    got, used = {}, {}

    def update(n, M):
        got[n], used[n] = np.array(M), [f.copy() for f in factors]
        factors[n] = new[n]

    plans = mttkrp_sweep(X, factors, update)
    Xd = X.astype(np.float64)
    for n, spec in enumerate(["abc,bz,cz->az", "abc,az,cz->bz", "abc,az,bz->cz"]):
        assert all(np.array_equal(used[n][m], new[m] if m < n else U0[m]) for m in range(3) if m != n)
        ref = np.einsum(spec, Xd, *(used[n][m].astype(np.float64) for m in range(3) if m != n), optimize=True)
        tol = 4 * X.size // X.shape[n] * np.finfo(dtype).eps * np.abs(ref).max()
        np.testing.assert_allclose(got[n], ref, rtol=0, atol=tol)
    return [p.spec for p in plans if math.prod(p.shapes[0]) == X.size]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(("R", "split_last"), [(3, False), (5, True)])
def test_cp_sweep_takes_the_skewed_halves_only_at_a_rank_large_against_the_first_mode(order, R, split_last, rng,
                                                                                    planned_sweeps):
    """(12, 5, 600): the halves [0, 1] | [2] leave partials 8.3x smaller (720 against 6012 elements a rank), but
    [0] | [1, 2]'s pass over mode 0 alone writes only R / 12 of the tensor: at R = 3 (0.25 < CP_SKEW_RANK = 0.4)
    the sweep keeps [0] | [1, 2] (the Khatri-Rao pass of modes 1 and 2, then mode 0 alone and GEMVs), at R = 5
    it takes [0, 1] | [2] (measured: (60, 300, 600) at R = 10 1.27x the time with [0, 1] | [2], at R = 32
    0.79x). The mirror image for F order. Every MTTKRP einsum's to rounding, Gauss-Seidel."""
    from tuckerkit.engine._sweeps import CP_SKEW_RANK, SKEW, _partial_elems, cp_skewed_last

    shape = (12, 5, 600)
    assert (_partial_elems(shape, [[1, 2], [0]]), _partial_elems(shape, [[2], [0, 1]])) == (6012, 720)
    assert 6012 > SKEW * 720 and 3 < CP_SKEW_RANK * 12 <= 5
    assert cp_skewed_last(shape, R) == split_last and not cp_skewed_last((24, 24, 24), 24)
    X = rng.standard_normal(shape) if order == "C" else np.asfortranarray(rng.standard_normal(shape[::-1]))
    skewed = {"C": ["abc,cZ->abZ", "ca,aZ->cZ"], "F": ["ac,cZ->aZ", "abc,aZ->bcZ"]}[order]
    plain = {"C": ["ab,bZ->aZ", "abc,aZ->bcZ"], "F": ["abc,cZ->abZ", "cb,bZ->cZ"]}[order]
    assert _checked_mttkrp_sweep(X, R, rng) == (skewed if split_last else plain)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mttkrp_sweep_of_a_3way_tensor_never_contracts_its_unit_stride_mode_alone(order, dtype, rng, planned_sweeps):
    """A 3-way sweep's two passes over X contract one mode each by a GEMM; neither is the unit-stride mode
    (C order: the halves [0] | [1, 2]; F order: [0, 1] | [2]), and every MTTKRP still equals einsum's."""
    from tuckerkit.engine import mttkrp_sweep

    X = np.asarray(rng.standard_normal((24, 20, 16)), order=order).astype(dtype, order="K")
    U = [rng.standard_normal((n, 5)).astype(dtype) for n in X.shape]
    got = {}
    plans = mttkrp_sweep(X, [u.copy() for u in U], lambda n, M: got.setdefault(n, M.copy()))
    unit = "c" if order == "C" else "a"
    passes = [p.spec for p in plans if math.prod(p.shapes[0]) == X.size]
    assert passes == (["abc,bZ->acZ", "abc,aZ->bcZ"] if order == "C" else ["abc,cZ->abZ", "abc,bZ->acZ"])
    assert all(s.split(",")[1][0] != unit for s in passes)
    Xd = X.astype(np.float64)
    for n, spec in enumerate(["abc,bz,cz->az", "abc,az,cz->bz", "abc,az,bz->cz"]):
        ref = np.einsum(spec, Xd, *(U[m].astype(np.float64) for m in range(3) if m != n), optimize=True)
        tol = 4 * X.size // X.shape[n] * np.finfo(dtype).eps * np.abs(ref).max()
        np.testing.assert_allclose(got[n], ref, rtol=0, atol=tol)


@pytest.mark.parametrize("order", ["C", "F"])
def test_mttkrp_of_the_outermost_mode_is_one_fused_pass(order, dtype, rng):
    """A 3-way tensor's outermost mode (C order's first, F order's last) whose product with the middle mode's
    factor the planner gives the compiled kernel: one pass, each tile summed against the unit-stride mode's
    factor in cache (no intermediate); einsum's values to rounding, the same bits on a second call and through
    the plan; the middle mode likewise where its product is compiled, and the unit-stride mode (the middle
    product's tiles times the outer factor, added up)."""
    if not simd_supported():
        pytest.skip("the compiled kernels need AVX2 and FMA")
    X = np.asarray(rng.standard_normal((60, 70, 80)).astype(dtype), order=order)
    factors = [rng.standard_normal((s, 10)).astype(dtype) for s in X.shape]
    n = 0 if order == "C" else 2
    plan = mttkrp_plan(X, factors, n)
    assert plan.fused and plan.intermediate_elements == 0 and len(plan.plans) == 1
    assert (plan.first, plan.second) == ((1,), (2,) if order == "C" else (0,))
    assert plan.explain().startswith(f"mttkrp mode {n}: one pass, mode 1 contracted by the compiled kernel")
    got = mttkrp(X, factors, n)
    ref = _mttkrp_ref(X, factors, n)
    scale = _mttkrp_ref(np.abs(X), [np.abs(f) for f in factors], n)
    assert np.all(np.abs(got - ref) <= _tol(dtype, X.size // X.shape[n]) * scale)
    assert got.tobytes() == mttkrp(X, factors, n).tobytes() == plan(X, factors).tobytes()
    unit = 2 if order == "C" else 0
    last = mttkrp_plan(X, factors, unit)  # the unit-stride mode: the middle mode's product times the outer factor
    assert last.fused and (last.first, last.second) == ((1,), (n,))
    assert last.explain().startswith(f"mttkrp mode {unit}: one pass, mode 1 contracted by the compiled kernel, "
                                     f"each tile times mode {n}'s factor added up in cache")
    middle = mttkrp_plan(X, factors, 1)  # (fused where the planner gives its product to the compiled kernel)
    assert (middle.first, middle.second) == ((2 - unit,), (unit,)) if middle.fused else True
    for m, p in ((1, middle), (unit, last)):
        ref = _mttkrp_ref(X, factors, m)
        scale = _mttkrp_ref(np.abs(X), [np.abs(f) for f in factors], m)
        got = p(X, factors)
        assert np.all(np.abs(got - ref) <= _tol(dtype, X.size // X.shape[m]) * scale)
        assert got.tobytes() == mttkrp(X, factors, m).tobytes()


@pytest.mark.parametrize("order", ["C", "F"])
def test_mttkrp_first_step_takes_its_side_as_one_merged_axis(order, dtype, rng):
    """A side of modes that lie next to each other in memory (a 4-way tensor's halves) is contracted as one
    merged axis of a view against the 2-D Khatri-Rao product, so the planner can give the step to the compiled
    kernels (a 3-D matrix operand leaves it to BLAS): every mode of C and F order against einsum, the first
    step's plan made for a 3-D view and a 2-D matrix, the same bits through the plan."""
    X = np.asarray(rng.standard_normal((30, 40, 50, 60)).astype(dtype), order=order)
    factors = [rng.standard_normal((s, 10)).astype(dtype) for s in X.shape]
    merged = 0
    for n in range(4):
        plan = mttkrp_plan(X, factors, n)
        got = mttkrp(X, factors, n)
        ref = _mttkrp_ref(X, factors, n)
        scale = _mttkrp_ref(np.abs(X), [np.abs(f) for f in factors], n)
        assert np.all(np.abs(got - ref) <= _tol(dtype, X.size // X.shape[n]) * scale)
        assert got.tobytes() == plan(X, factors).tobytes()
        first = plan.plans[0]
        if len(plan.first) > 1:
            assert len(first.shapes[0]) == 4 - len(plan.first) + 1 and len(first.shapes[1]) == 2
            merged += 1
            if simd_supported():
                assert str(first.compiled) != "none", first.explain()
    assert merged == 4


@pytest.mark.parametrize("order", ["C", "F"])
def test_float32_side_inside_the_mode_takes_two_chains_where_the_kernels_compile(order, rng):
    """A float32 4-way tensor's outermost mode: its side (the other three modes, inside it in memory) in two
    chains (the far end's merged axis first, then a GEMV) up to rank 32 where the compiled kernels run, else one
    GEMM with the side's Khatri-Rao product (so a rank-40 one, whose first chain step would be BLAS's); einsum's
    values either way."""
    shape = (200, 20, 20, 20) if order == "C" else (20, 20, 20, 200)  # the side's Khatri-Rao product small
    X = np.asarray(rng.standard_normal(shape).astype(np.float32), order=order)
    n = 0 if order == "C" else 3
    for R in (10, 40):
        factors = [rng.standard_normal((s, R)).astype(np.float32) for s in X.shape]
        plan = mttkrp_plan(X, factors, n)
        two = R <= 32 and simd_supported()
        assert (len(plan.second) == 1) is two and len(plan.first) == (2 if two else 3), (R, plan.explain())
        ref = _mttkrp_ref(X, factors, n)
        scale = _mttkrp_ref(np.abs(X), [np.abs(f) for f in factors], n)
        assert np.all(np.abs(mttkrp(X, factors, n) - ref) <= _tol(np.float32, X.size // X.shape[n]) * scale)


def test_mttkrp_of_a_unit_stride_mode_beside_an_extent_one_mode(rng):
    """A review's find: the unit-stride mode of a (1, I, C) tensor has a view of one row, where the kernel cuts
    the sum over i instead of fusing (it returned None, which mttkrp handed back, CP-ALS's line search failed on
    and an out-of-core tensor's one-row last slab could not add): its two steps, against einsum; CP-ALS runs;
    slabs of one row give the in-memory MTTKRP."""
    from tuckerkit.engine import SlabTensor

    X = rng.standard_normal((1, 8192, 64))
    factors = [rng.standard_normal((s, 16)) for s in X.shape]
    plan = mttkrp_plan(X, factors, 2)
    assert not plan.fused
    got = mttkrp(X, factors, 2)
    ref = _mttkrp_ref(X, factors, 2)
    scale = _mttkrp_ref(np.abs(X), [np.abs(f) for f in factors], 2)
    assert got.shape == (64, 16) and np.all(np.abs(got - ref) <= _tol(np.float64, 8192) * scale)
    import tuckerkit as tk

    with pytest.warns(tk.ConvergenceWarning):
        assert 0 < tk.cp_als(X, 16, max_iter=8, tol=0, init="random", random_state=0).fit <= 1
    Y = rng.standard_normal((3, 8192, 64))
    fy = [rng.standard_normal((s, 16)) for s in Y.shape]
    slabs = SlabTensor(Y, memory_limit=32 * 2**20)  # (slabs of two rows and one)
    for n in range(3):
        ref = _mttkrp_ref(Y, fy, n)
        scale = _mttkrp_ref(np.abs(Y), [np.abs(f) for f in fy], n)
        assert np.all(np.abs(slabs.mttkrp(fy, n) - ref) <= _tol(np.float64, Y.size // Y.shape[n]) * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("piece_bytes", [None, 1])
def test_a_window_gram_is_as_accurate_as_its_copys(dtype, piece_bytes, rng, monkeypatch):
    """A window of a larger array (modes that cannot be flattened) takes the blocks route: slab ranges copied
    contiguous one at a time (here whole, or one slab each), each reduced by the SYRK or slab route: the same
    accuracy as the contiguous copy's Gram against the float64 / complex128 one (its bits where the window is
    one block; the engine's batched GEMV over all P entries, the former route, was 1000x worse in float32:
    4.6e-4 against 6.8e-7 on this shape), Hermitian to the bit, the same bits for one and two workers, X
    unmodified."""
    from tuckerkit.engine import ExecutionPolicy, _gram

    if piece_bytes is not None:
        monkeypatch.setattr(_gram, "GRAM_BLOCK_BYTES", piece_bytes)
    shape = (3, 100, 20, 2, 128)
    big = rng.standard_normal([s + 2 for s in shape]) + 3.0  # (a mean: long sums of same-signed products)
    if np.dtype(dtype).kind == "c":
        big = big + 1j * rng.standard_normal(big.shape)
    big = big.astype(dtype)
    X = big[tuple(slice(1, 1 + s) for s in shape)]
    X0 = X.copy()
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    eps = np.finfo(dtype).eps
    for n in (0, 3):
        assert gram_plan(X, n).route == "blocks"
        M = np.moveaxis(X.astype(wide), n, 0).reshape(shape[n], -1)
        ref = M @ M.conj().T
        G = gram(X, n, plan=gram_plan(X, n, policy=ExecutionPolicy(workers=2)))
        G1 = gram(X, n, plan=gram_plan(X, n, policy=ExecutionPolicy(workers=1)))
        np.testing.assert_array_equal(G, G1)
        np.testing.assert_array_equal(G, G.conj().T)
        Gc = gram(np.ascontiguousarray(X), n)
        if piece_bytes is None:  # (one block: the copy's own Gram)
            np.testing.assert_array_equal(G, Gc)
        err = np.abs(G.astype(wide) - ref).max() / np.abs(ref).max()
        err_c = np.abs(Gc.astype(wide) - ref).max() / np.abs(ref).max()
        assert err <= 2 * err_c + 16 * eps
    np.testing.assert_array_equal(X, X0)
