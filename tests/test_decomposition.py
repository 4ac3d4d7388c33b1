"""hosvd / st_hosvd / hooi / cp_als: planted models, invariants, oracles (TensorLy, pyttb), bad input."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest
from conftest import make_tensor, planned_only, traced_peak

import tuckerkit as tk
from tuckerkit import ConvergenceWarning, CPTensor, TuckerTensor

NOISE = 1e-3


def planted_tucker(rng, shape, ranks, dtype, noise=NOISE, layout="C"):
    core = rng.standard_normal(ranks)
    Us = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    X = tk.multi_ttm(core, Us)
    E = rng.standard_normal(shape)
    X = X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E
    Xl = make_tensor(rng, shape, dtype, layout)
    Xl[...] = X.astype(dtype)
    return Xl


def planted_cp(rng, shape, rank, dtype, noise=NOISE):
    Us = [rng.standard_normal((n, rank)) for n in shape]
    X = np.asarray(CPTensor(np.ones(rank), tuple(Us)).to_dense())
    E = rng.standard_normal(shape)
    return (X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E).astype(dtype)


def _eps(dtype):
    return float(np.finfo(dtype).eps)


CASES = [((12, 13, 14), (3, 4, 2)), ((8, 9, 10, 7), (2, 3, 2, 3)), ((6, 7, 5, 6, 5), (2, 2, 3, 2, 2))]


@pytest.mark.parametrize(("shape", "ranks"), CASES)
@pytest.mark.parametrize("method", ["hosvd", "st_hosvd", "hooi"])
def test_tucker_recovers_planted_model(shape, ranks, method, dtype, layout, rng):
    X = planted_tucker(rng, shape, ranks, dtype, layout=layout)
    X0 = X.copy()
    T = getattr(tk, method)(X, ranks)
    assert isinstance(T, TuckerTensor)
    assert T.core.dtype == dtype and all(U.dtype == dtype for U in T.factors)
    assert T.ranks == tuple(ranks) and T.shape == tuple(shape)
    err = T.relative_error(X)
    assert err <= NOISE * 1.05 + 200 * _eps(dtype)
    assert abs((1 - err) - T.fit) <= 100 * np.sqrt(_eps(dtype)) * (1 if dtype == np.float64 else 10)
    for U in T.factors:
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=50 * _eps(dtype) * U.shape[0])
    np.testing.assert_array_equal(X, X0)


@pytest.mark.parametrize(("shape", "rank"), [((10, 11, 12), 3), ((7, 8, 6, 9), 2), ((5, 6, 4, 5, 6), 2)])
def test_cp_recovers_planted_model(shape, rank, dtype, rng):
    X = planted_cp(rng, shape, rank, dtype)
    X0 = X.copy()
    cp = tk.cp_als(X, rank, random_state=1, max_iter=500, tol=1e-12 if dtype == np.float64 else 1e-7)
    assert isinstance(cp, CPTensor)
    assert cp.weights.dtype == dtype and all(U.dtype == dtype for U in cp.factors)
    err = cp.relative_error(X)
    assert err <= NOISE * 1.05 + 1e3 * _eps(dtype)
    assert abs((1 - err) - cp.fit) <= 1e-6 if dtype == np.float64 else 5e-3
    for U in cp.factors:
        np.testing.assert_allclose(np.linalg.norm(U, axis=0), 1.0, rtol=10 * _eps(dtype))
    np.testing.assert_array_equal(X, X0)


def test_hooi_fit_is_non_decreasing_and_improves_on_hosvd(rng):
    X = rng.standard_normal((15, 16, 17))  # no planted structure: HOOI has work to do
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        T = tk.hooi(X, [4, 4, 4], init="random", random_state=0, max_iter=30, tol=0)
    h = np.array(T.fit_history)
    assert len(h) == 30 and T.n_iter == 30 and not T.converged
    assert np.all(np.diff(h) >= -1e-12)
    assert h[-1] >= tk.hosvd(X, [4, 4, 4]).fit - 1e-12
    assert T.passes_per_iteration == 2


def test_st_hosvd_tol_meets_bound_and_ranks_are_minimal(rng):
    ranks = (3, 4, 2, 3)
    X = planted_tucker(rng, (10, 11, 9, 12), ranks, np.float64, noise=1e-6)
    T = tk.st_hosvd(X, max_error=1e-3)
    assert T.ranks == ranks
    assert T.relative_error(X) <= 1e-3
    for tol in (0.3, 0.1, 0.03):
        Y = rng.standard_normal((9, 10, 11))
        T = tk.st_hosvd(Y, max_error=tol)
        assert T.relative_error(Y) <= tol
        assert abs(T.relative_error(Y) - (1 - T.fit)) < 1e-10
        # minimality of the first processed mode (the largest, mode 2): one component fewer breaks its budget
        w = np.sort(np.linalg.eigvalsh(tk.gram(Y, 2)))[::-1]
        budget = tol**2 * float(np.sum(Y * Y)) / 3
        r = T.ranks[2]
        assert w[r:].sum() <= budget < w[r - 1:].sum()


def _decaying_tucker(rng, shape=(40, 45, 50), R=30, rate=0.35):
    """A Tucker tensor whose multilinear singular values decay over several orders (no exact low rank): every
    error target picks intermediate ranks."""
    d = np.exp(-rate * np.arange(R))
    core = rng.standard_normal((R, R, R)) * np.einsum("i,j,k->ijk", d, d, d)
    Us = [np.linalg.qr(rng.standard_normal((n, R)))[0] for n in shape]
    return tk.multi_ttm(core, Us)


def _true_error(X, T):
    """``||X - X_hat|| / ||X||`` with the model and X in float64 (not the model's own rounding to float32)."""
    full = tk.multi_ttm(T.core.astype(np.float64), [U.astype(np.float64) for U in T.factors])
    X64 = X.astype(np.float64)
    return float(np.linalg.norm((X64 - full).ravel()) / np.linalg.norm(X64.ravel()))


@pytest.mark.parametrize("method", ["st_hosvd", "hosvd"])
@pytest.mark.parametrize("max_error", [1e-2, 1e-3, 1e-4, 3e-5])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_a_float32_rank_choice_keeps_the_bound_and_picks_float64s_ranks(method, max_error, layout, rng):
    """float32 data: the ranks a max_error picks are those of the same values in float64, the bound holds, and
    the reported error is the model's to float32's rounding (Grams formed in float32 had picked (37, 39, 44)
    for an error of 1.35e-4 at max_error 1e-4, and reported errors above max_error for models within it)."""
    X64 = _decaying_tucker(rng)
    X32 = np.asarray(X64.astype(np.float32), order=layout)
    X0 = X32.copy()
    fn = getattr(tk, method)
    ref = fn(X32.astype(np.float64), max_error=max_error)
    T = fn(X32, max_error=max_error)
    assert np.array_equal(X32, X0)
    assert T.core.dtype == np.float32 and all(U.dtype == np.float32 for U in T.factors)
    assert T.ranks == ref.ranks
    err = _true_error(X32, T)
    assert err <= max_error
    eps = np.finfo(np.float32).eps
    assert abs((1 - T.fit) - err) <= 10 * eps + 1e-3 * err
    again = fn(X32, max_error=max_error)  # the same bits on a repeat
    assert np.array_equal(again.core, T.core) and again.fit == T.fit


@pytest.mark.parametrize("method", ["st_hosvd", "hosvd"])
def test_a_sparse_float32_rank_choice_keeps_the_bound_and_picks_float64s_ranks(method, rng):
    """The same on a sparse tensor (every entry stored: the Gram's row products longest): its Grams accumulated
    in double precision (scipy's float32 product had left an error of 6.2e-4 at max_error 1e-4), the ranks of
    the float64 values, the bound kept, and the float32 Gram itself within a few eps32 of the exact one."""
    from tuckerkit.sparse import COOTensor

    X64 = _decaying_tucker(rng)
    X32 = X64.astype(np.float32)
    S32, S64 = COOTensor.from_dense(X32), COOTensor.from_dense(X32.astype(np.float64))
    for max_error in (1e-3, 1e-4):
        ref = getattr(tk, method)(S64, max_error=max_error)
        T = getattr(tk, method)(S32, max_error=max_error)
        assert T.ranks == ref.ranks
        assert T.relative_error(X32) <= max_error
    M = X32.astype(np.float64).reshape(X32.shape[0], -1)
    exact = M @ M.T
    G = tk.gram(S32, 0)
    assert G.dtype == np.float32
    assert np.abs(G - exact).max() <= 4 * np.finfo(np.float32).eps * np.abs(exact).max()


def test_the_double_gram_of_float32_data_is_cut_into_slab_ranges_in_order(rng, monkeypatch):
    """The float64 Gram of float32 data converts at most ``DOUBLE_GRAM_PIECE_BYTES`` of X at a time: with pieces of
    one slab the chosen ranks and factors match one piece's to float64 rounding, and each piece count gives
    the same bits on a repeat."""
    from tuckerkit.decomposition import _tucker as tucker_mod

    X = _decaying_tucker(rng, shape=(20, 24, 28), R=16, rate=0.5).astype(np.float32)
    whole = tk.st_hosvd(X, max_error=1e-4)
    monkeypatch.setattr(tucker_mod, "DOUBLE_GRAM_PIECE_BYTES", 1)
    cut = tk.st_hosvd(X, max_error=1e-4)
    assert cut.ranks == whole.ranks
    for a, b in zip(cut.factors, whole.factors, strict=True):
        assert np.abs(np.abs(a.T @ b) - np.eye(a.shape[1])).max() < 1e-4  # the same subspaces, column by column
    assert abs(cut.fit - whole.fit) < 1e-6
    again = tk.st_hosvd(X, max_error=1e-4)
    assert np.array_equal(again.core, cut.core)


@pytest.mark.parametrize("seed", [3, 8])
def test_float32_hooi_at_ranks_above_the_signal_keeps_orthonormal_factors(seed):
    """HOOI in float32 at ranks far above a rank-3 signal (95 of 100 on mode 0): its factor steps pick vectors
    inside the noise cluster, where LAPACK's MRRR-based subset routes drifted (these seeds: factors 1643 and
    5787 ulps from orthonormal); checked and redone by divide and conquer, every factor stays within
    128 ulps (``ORTH_ULPS``), and the fit matches the reconstruction's."""

    rng = np.random.default_rng(seed)
    s, ranks, r0 = (100, 5, 128), (95, 4, 58), (3, 3, 3)
    X = (tk.multi_ttm(rng.standard_normal(r0), [rng.standard_normal((x, k)) for x, k in zip(s, r0, strict=True)])
         + 0.1 * rng.standard_normal(s)).astype(np.float32)
    T = tk.hooi(X, ranks, max_iter=3)
    eps = np.finfo(np.float32).eps
    for U in T.factors:
        assert np.abs(U.T.astype(np.float64) @ U - np.eye(U.shape[1])).max() <= 128 * eps
    assert abs((1 - T.fit) - T.relative_error(X)) <= 5e-4  # (a fit from norms in float32: see fit_history)


def test_st_hosvd_order_option_and_auto(rng):
    X = planted_tucker(rng, (10, 20, 30), (2, 3, 4), np.float64)
    a = tk.st_hosvd(X, (2, 3, 4))
    b = tk.st_hosvd(X, (2, 3, 4), order=[2, 1, 0])
    assert abs(a.fit - b.fit) < 1e-6


def test_same_random_state_gives_identical_results(rng):
    X = rng.standard_normal((9, 10, 11))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = tk.hooi(X, [3, 3, 3], init="random", random_state=7, max_iter=5)
        b = tk.hooi(X, [3, 3, 3], init="random", random_state=7, max_iter=5)
        c = tk.cp_als(X, 4, init="random", random_state=3, max_iter=5)
        d = tk.cp_als(X, 4, init="random", random_state=3, max_iter=5)
    np.testing.assert_array_equal(a.core, b.core)
    for U, V in zip(c.factors, d.factors, strict=True):
        np.testing.assert_array_equal(U, V)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
@pytest.mark.parametrize("method", ["hooi", "cp_als", "st_hosvd"])
def test_c_and_f_order_give_the_same_answer(method, rng):
    X = planted_tucker(rng, (10, 12, 14), (3, 3, 3), np.float64)
    XF = np.asfortranarray(X)
    eps = np.finfo(np.float64).eps
    if method == "cp_als":
        a = tk.cp_als(X, 3, random_state=0, max_iter=20, tol=1e-8)
        b = tk.cp_als(XF, 3, random_state=0, max_iter=20, tol=1e-8)
        np.testing.assert_allclose(a.to_dense(), b.to_dense(), atol=1e3 * eps * np.abs(X).max())  # (4e-15 seen)
    else:  # (the same bits seen; the layouts may take other kernels, so to rounding)
        a, b = getattr(tk, method)(X, (3, 3, 3)), getattr(tk, method)(XF, (3, 3, 3))
        np.testing.assert_allclose(a.core, b.core, atol=1e2 * eps * np.abs(a.core).max())
        for U, V in zip(a.factors, b.factors, strict=True):
            np.testing.assert_allclose(U, V, atol=1e2 * eps)


@pytest.mark.parametrize("order", [2, 6, 8])
def test_orders_2_to_8(order, rng):
    shape = (5, 4, 3, 3, 2, 3, 2, 2)[:order]
    ranks = tuple(max(1, s - 1) for s in shape)
    X = rng.standard_normal(shape)
    T = tk.hooi(X, ranks, max_iter=50, tol=1e-10)
    assert T.ranks == ranks
    assert abs(T.relative_error(X) - (1 - T.fit)) < 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cp = tk.cp_als(X, 3, max_iter=10)
    assert abs(cp.relative_error(X) - (1 - cp.fit)) < 1e-8


def test_cp_rank_may_exceed_mode_sizes(rng):
    X = rng.standard_normal((3, 4, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cp = tk.cp_als(X, 7, max_iter=200, random_state=0)
    assert cp.rank == 7 and [U.shape for U in cp.factors] == [(3, 7), (4, 7), (5, 7)]
    assert abs(cp.relative_error(X) - (1 - cp.fit)) < 1e-7
    assert cp.fit > 0.5


def test_convergence_warning_callback_and_verbose(rng, caplog):
    X = rng.standard_normal((8, 9, 10))
    with pytest.warns(ConvergenceWarning, match=r"hooi reached max_iter=2 before the fit changed by less than tol=0.0"):
        tk.hooi(X, [2, 2, 2], init="random", random_state=0, max_iter=2, tol=0.0)
    with pytest.warns(ConvergenceWarning, match=r"cp_als reached max_iter=3"):
        tk.cp_als(X, 2, max_iter=3, tol=0.0)
    seen = []

    def stop_at_3(state):
        seen.append((state.iteration, state.fit))
        return state.iteration == 3

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        cp = tk.cp_als(X, 2, max_iter=50, tol=0.0, callback=stop_at_3)
    assert cp.n_iter == 3 and [i for i, _ in seen] == [1, 2, 3] and not cp.converged
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = tk.cp_als(X, 2, max_iter=8, tol=0.0, random_state=0)
        with caplog.at_level(logging.INFO, logger="tuckerkit"):
            b = tk.cp_als(X, 2, max_iter=8, tol=0.0, random_state=0, verbose=True)
    assert "cp_als iteration 8" in caplog.text
    np.testing.assert_array_equal(a.weights, b.weights)


def test_results_unpack_reconstruct_and_norm(rng):
    X = planted_tucker(rng, (6, 7, 8), (2, 3, 2), np.float64)
    T = tk.hooi(X, (2, 3, 2))
    core, factors = T
    assert core is T.core and len(factors) == 3 and T[0] is T.core
    assert abs(T.norm() - np.linalg.norm(T.to_dense())) < 1e-10 * T.norm()
    assert T.compression_ratio() == 336 / (12 + 12 + 21 + 16)
    cp = tk.cp_als(planted_cp(rng, (6, 7, 8), 2, np.float64), 2, random_state=0)
    w, fs = cp
    assert w is cp.weights and len(fs) == 3
    assert abs(cp.norm() - np.linalg.norm(cp.to_dense())) < 1e-10 * cp.norm()


def test_tensorly_conversion_round_trip(rng):
    pytest.importorskip("tensorly")
    import tensorly as tl

    X = planted_tucker(rng, (6, 7, 8), (2, 3, 2), np.float64)
    T = tk.hooi(X, (2, 3, 2))
    tlT = T.to_tensorly()
    np.testing.assert_allclose(tl.tucker_to_tensor(tlT), T.to_dense(), atol=1e-12)
    back = TuckerTensor.from_tensorly(tlT)
    np.testing.assert_allclose(back.to_dense(), T.to_dense(), atol=1e-12)
    cp = tk.cp_als(planted_cp(rng, (6, 7, 8), 2, np.float64), 2, random_state=0)
    np.testing.assert_allclose(tl.cp_to_tensor(cp.to_tensorly()), cp.to_dense(), atol=1e-12)
    np.testing.assert_allclose(CPTensor.from_tensorly(cp.to_tensorly()).to_dense(), cp.to_dense(), atol=1e-12)


# ------------------------------------------------------------------------------------ oracles: TensorLy, pyttb
def test_hooi_matches_tensorly_and_pyttb_from_same_init(rng):
    tl_dec = pytest.importorskip("tensorly.decomposition")
    ttb = pytest.importorskip("pyttb")
    X = rng.standard_normal((12, 10, 14))
    ranks = (3, 4, 2)
    init = tk.hosvd(X, ranks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = tk.hooi(X, ranks, init=init, max_iter=6, tol=0.0)
        tlT = tl_dec.tucker(X, rank=list(ranks), init=(init.core.copy(), [U.copy() for U in init.factors]),
                            n_iter_max=6, tol=0)
        _, _, info = ttb.tucker_als(ttb.tensor(X.copy()), list(ranks), stoptol=0.0, maxiters=6,
                                    init=[U.copy() for U in init.factors], printitn=0)
    tl_fit = 1 - np.linalg.norm(X - np.asarray(tlT.to_tensor())) / np.linalg.norm(X)
    assert abs(ours.fit - tl_fit) <= 1e-6 * abs(tl_fit)
    assert abs(ours.fit - info["fit"]) <= 1e-6 * abs(info["fit"])


@pytest.mark.parametrize(("shape", "ranks"), [((40, 6, 7), (3, 6, 7)), ((30, 6, 25), (4, 6, 3)),
                                             ((9, 8, 5, 20), (3, 8, 5, 4))])
@pytest.mark.parametrize("route", ["direct", "planned"])
def test_hooi_leaves_full_rank_modes_out_of_its_sweeps(shape, ranks, route, rng, monkeypatch):
    """A mode of full rank (R_n = I_n) only rotates the others' unfoldings: HOOI leaves it out of its sweeps
    (no projection, no update: (100000, 10, 10) at rank 10 read X three times an iteration, 122 -> 81 ms)
    and makes its factor once from the core. The same model as with every mode swept (fit to 1e-12, the
    reconstruction to rounding), the same fit as TensorLy's and pyttb's from the same start, orthonormal
    factors, the full-rank factor the core's leading left singular vectors, and X unmodified."""
    import tuckerkit.decomposition._tucker as tucker_mod

    tl_dec = pytest.importorskip("tensorly.decomposition")
    ttb = pytest.importorskip("pyttb")
    X = planted_tucker(rng, shape, ranks, np.float64, noise=0.05)
    X0 = X.copy()
    init = tk.hosvd(X, ranks)
    if route == "planned":  # (the planned tree's sweeps, as a large tensor's)
        planned_only(monkeypatch)
    seen = []
    real = tucker_mod.leading_left_singular
    monkeypatch.setattr(tucker_mod, "leading_left_singular",
                        lambda Y, n, *a, **k: seen.append(n) or real(Y, n, *a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = tk.hooi(X, ranks, init=init, max_iter=5, tol=0.0)
        steps = list(seen)
        monkeypatch.setattr(tucker_mod, "_full_modes", lambda *a: set())
        every = tk.hooi(X, ranks, init=init, max_iter=5, tol=0.0)
        tlT = tl_dec.tucker(X, rank=list(ranks), init=(init.core.copy(), [U.copy() for U in init.factors]),
                            n_iter_max=5, tol=0)
        _, _, info = ttb.tucker_als(ttb.tensor(X.copy()), list(ranks), stoptol=0.0, maxiters=5,
                                    init=[U.copy() for U in init.factors], printitn=0)
    full = [n for n in range(len(shape)) if ranks[n] == shape[n]]
    swept = [n for n in range(len(shape)) if n not in full]
    assert steps == swept * 5 + full and seen[len(steps):] == list(range(len(shape))) * 5
    kinds = {type(p).__name__ for p in ours.plans}
    assert kinds == ({"DirectSweep"} if route == "direct" else set() if len(swept) == 1 else {"MultiTTMPlan"})
    assert abs(ours.fit - every.fit) <= 1e-12
    np.testing.assert_allclose(ours.full(), every.full(), rtol=0, atol=1e-12 * np.abs(X).max())
    tl_fit = 1 - np.linalg.norm(X - np.asarray(tlT.to_tensor())) / np.linalg.norm(X)
    assert abs(ours.fit - tl_fit) <= 1e-9 and abs(ours.fit - info["fit"]) <= 1e-9
    for n, U in enumerate(ours.factors):
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=100 * _eps(np.float64))
        if n in full:  # the core's mode-n Gram is diagonal in the factor's basis, in descending order
            Gn = np.moveaxis(ours.core, n, 0).reshape(shape[n], -1)
            G = Gn @ Gn.T
            assert np.abs(G - np.diag(np.diag(G))).max() <= 1e-10 * np.abs(G).max()
            assert np.all(np.diff(np.diag(G)) <= 1e-10 * np.abs(G).max())
    np.testing.assert_array_equal(X, X0)


def test_cp_als_matches_tensorly_and_pyttb_from_same_init(rng):
    tl_dec = pytest.importorskip("tensorly.decomposition")
    ttb = pytest.importorskip("pyttb")
    from tensorly.cp_tensor import CPTensor as TLCP

    X = rng.standard_normal((9, 10, 11))
    R = 4
    init = [rng.standard_normal((n, R)) for n in X.shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = tk.cp_als(X, R, init=CPTensor(np.ones(R), tuple(U.copy() for U in init)), max_iter=7, tol=0.0,
                         linesearch=False)  # plain ALS, iteration for iteration the peers' algorithm
        tl_cp = tl_dec.parafac(X, R, init=TLCP((np.ones(R), [U.copy() for U in init])), n_iter_max=7, tol=0,
                               normalize_factors=True)
        _, _, info = ttb.cp_als(ttb.tensor(X.copy()), R, stoptol=0.0, maxiters=7,
                                init=ttb.ktensor([U.copy() for U in init]), printitn=0)
    tl_fit = 1 - np.linalg.norm(X - np.asarray(tl_cp.to_tensor())) / np.linalg.norm(X)
    assert abs(ours.fit - tl_fit) <= 1e-6 * abs(tl_fit)
    assert abs(ours.fit - info["fit"]) <= 1e-6 * abs(info["fit"])
    assert abs(ours.fit - (1 - ours.relative_error(X))) < 1e-10


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"ranks": [2, 2]}, ValueError, r"ranks has 2 entries but the tensor has 3 modes; expected 3"),
        ({"ranks": [2, 0, 2]}, ValueError, r"ranks\[1\]=0 is not positive; each rank must be between 1 and its mode"),
        ({"ranks": [2, 9, 2]}, ValueError, r"ranks\[1\]=9 exceeds the size of mode 1 \(5\); each rank must be"),
        ({"ranks": [2, 2.5, 2]}, TypeError, r"ranks\[1\] must be an integer; received 2.5"),
        ({"ranks": [2, 2, 2], "max_iter": 0}, ValueError, r"max_iter=0 is invalid; expected an integer >= 1"),
        ({"ranks": [2, 2, 2], "tol": -1}, ValueError, r"tol=-1 is invalid; expected a finite number >= 0"),
        ({"ranks": [2, 2, 2], "init": "magic"}, ValueError, r"init='magic' is not valid; expected 'st_hosvd'"),
        ({"ranks": [2, 2, 2], "random_state": "x"}, TypeError, r"random_state must be None, an int, or a numpy"),
        ({"ranks": [2, 2, 2], "callback": 3}, TypeError, r"callback must be callable or None; received int"),
    ],
)
def test_hooi_bad_arguments(kwargs, exc, match, rng):
    with pytest.raises(exc, match=match):
        tk.hooi(rng.standard_normal((4, 5, 6)), **kwargs)


def test_st_hosvd_rank_tol_exclusive_and_range(rng):
    X = rng.standard_normal((4, 5, 6))
    with pytest.raises(ValueError, match=r"pass exactly one of ranks and tol; received both"):
        tk.st_hosvd(X, [2, 2, 2], tol=0.1)
    with pytest.raises(ValueError, match=r"pass exactly one of ranks and max_error; received neither"):
        tk.st_hosvd(X)
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"tol=.* is outside \(0, 1\); expected a relative error"):
            tk.st_hosvd(X, tol=bad)
    with pytest.raises(ValueError, match=r"order=\[0, 0, 1\] is not a permutation of the modes 0..2"):
        tk.st_hosvd(X, [2, 2, 2], order=[0, 0, 1])


@pytest.mark.parametrize("fn", ["hooi", "cp_als", "hosvd", "st_hosvd"])
def test_bad_tensors(fn, rng):
    call = {
        "hooi": lambda X: tk.hooi(X, 1),
        "cp_als": lambda X: tk.cp_als(X, 1),
        "hosvd": lambda X: tk.hosvd(X, 1),
        "st_hosvd": lambda X: tk.st_hosvd(X, 1),
    }[fn]
    X = rng.standard_normal((4, 5, 6))
    X[1, 2, 3] = np.nan
    X[0, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"X contains 2 NaN or infinite value\(s\); remove or impute them first"):
        call(X)
    with pytest.raises(ValueError, match=r"X has an empty mode 1 \(shape \(3, 0, 4\)\)"):
        call(np.ones((3, 0, 4)))
    with pytest.raises(ValueError, match=r"X must be a tensor with at least 2 dimensions; received a 1-d array"):
        call(np.ones(5))
    with pytest.raises(TypeError, match=r"X has dtype <U1; expected a numeric tensor"):
        call(np.array([["a", "b"], ["c", "d"]]))
    assert call(np.ones((2, 3), dtype=complex)).factors[0].dtype == np.complex128  # complex: decomposed as such


def test_cp_bad_arguments(rng):
    X = rng.standard_normal((4, 5, 6))
    with pytest.raises(ValueError, match=r"rank=0 is not positive; expected an integer >= 1"):
        tk.cp_als(X, 0)
    with pytest.raises(ValueError, match=r"init='nvecs' is not valid; expected one of 'auto', 'svd', 'random'"):
        tk.cp_als(X, 2, init="nvecs")
    with pytest.raises(ValueError, match=r"init has shape \(4, 5\) and rank 2; expected shape \(4, 5, 6\)"):
        tk.cp_als(X, 2, init=CPTensor(np.ones(2), (np.ones((4, 2)), np.ones((5, 2)))))


def test_integer_tensor_promoted(rng):
    X = rng.integers(0, 5, size=(5, 6, 7))
    T = tk.hooi(X, [2, 2, 2])
    assert T.core.dtype == np.float64
    F = tk.hooi(X.astype(np.float64), [2, 2, 2])  # computed as the float64 cast
    np.testing.assert_array_equal(T.core, F.core)
    for U, V in zip(T.factors, F.factors, strict=True):
        np.testing.assert_array_equal(U, V)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_hooi_peak_memory_does_not_grow_with_iterations():
    import tracemalloc

    X = np.random.default_rng(0).standard_normal((50, 50, 50))
    init = tk.hosvd(X, (10, 10, 10))
    tk.hooi(X, (10, 10, 10), init=init, tol=0, max_iter=2)  # plans cached, kernels warm
    peaks = []
    for its in (10, 150):
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tk.hooi(X, (10, 10, 10), init=init, tol=0, max_iter=its)
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()
    # no unfolding copy, and no iteration's projections kept alive into the next (a reference cycle once
    # made this 1.7x the input after 150 iterations)
    assert peaks[0] < 0.8 * X.nbytes and peaks[1] < 0.8 * X.nbytes


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_cp_als_dense_peak_memory_holds_one_partial_at_a_time():
    import gc
    import tracemalloc

    # rank 40 on 80^3: each half of the dimension tree leaves an 80x80x40 partial (half the input); the first
    # is freed before the second is made: the peak is one partial and change (measured 1.12-1.14 partials;
    # 2.1 when the first was kept). The collector is held off so that the figure depends on references only.
    rng = np.random.default_rng(3)
    X = rng.standard_normal((80, 80, 80))
    init = tk.CPTensor(np.ones(40), tuple(rng.standard_normal((80, 40)) for _ in range(3)))
    tk.cp_als(X, 40, init=init, tol=0, max_iter=2, linesearch=False)  # plans cached, kernels warm
    gc.collect()
    gc.disable()
    try:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tk.cp_als(X, 40, init=init, tol=0, max_iter=5, linesearch=False)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    finally:
        gc.enable()
    partial = 80 * 80 * 40 * X.itemsize
    assert peak < 1.6 * partial, (peak, partial)


def test_hooi_compares_its_first_iteration_with_the_st_hosvd_start(rng):
    """The ST-HOSVD start's fit (from its core, as each iteration's) is iteration 0: a start that is already a
    fixed point to within ``tol`` costs one iteration, and that iteration is the same computation as one
    iteration from the same factors given as ``init``."""
    ranks = (3, 4, 2)
    X = planted_tucker(rng, (20, 21, 22), ranks, np.float64, noise=1e-3)
    S = tk.st_hosvd(X, ranks)
    start_fit = 1 - np.sqrt(max(1 - (np.linalg.norm(S.core) / np.linalg.norm(X)) ** 2, 0.0))
    seen = []
    T = tk.hooi(X, ranks, callback=lambda s: seen.append((s.fit, s.fit_change)) and False)
    assert T.n_iter == 1 and T.converged
    assert seen[0][1] == pytest.approx(abs(T.fit - start_fit), abs=1e3 * _eps(np.float64))
    assert seen[0][1] < 1e-8
    # HOOI never lowers the fit of its start, to rounding: fit = 1 - sqrt(1 - (|G| / |X|)^2) turns a relative
    # error of a few eps in the core's norm into one of a few eps / (1 - fit) in the fit (1000x at this noise)
    assert T.fit >= start_fit - 100 * _eps(np.float64) / (1 - start_fit)
    with pytest.warns(ConvergenceWarning, match="reached max_iter=1"):
        one = tk.hooi(X, ranks, init=list(S.factors), max_iter=1, tol=0)
    np.testing.assert_array_equal(T.core, one.core)
    for U, V in zip(T.factors, one.factors, strict=True):
        np.testing.assert_array_equal(U, V)
    # a start without a fit of its own (random, given factors) still needs two iterations to see a change
    R = tk.hooi(X, ranks, init=list(S.factors))
    assert R.n_iter >= 2 and R.converged
    assert abs(R.fit - T.fit) <= 1e-8
    # tol=0 still runs every iteration
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert tk.hooi(X, ranks, tol=0, max_iter=3).n_iter == 3


def test_hooi_sketched_start_by_name(rng):
    """``init="st_hosvd_sketch"`` starts from ST-HOSVD with ``sketch=True`` (its fit is iteration 0) and ends at
    the default start's fit; on a sparse tensor it is the Khatri-Rao sketch's start, as ``"st_hosvd"`` is
    there."""
    ranks = (3, 4, 2)
    X = planted_tucker(rng, (30, 31, 32), ranks, np.float64, noise=0.05)
    S = tk.st_hosvd(X, ranks, sketch=True)
    start_fit = 1 - np.sqrt(max(1 - (np.linalg.norm(S.core) / np.linalg.norm(X)) ** 2, 0.0))
    seen = []
    T = tk.hooi(X, ranks, init="st_hosvd_sketch", callback=lambda s: seen.append(s.fit_change) and False)
    assert seen[0] == pytest.approx(T.fit_history[0] - start_fit, abs=1e3 * _eps(np.float64))
    assert T.converged and abs(T.fit - tk.hooi(X, ranks).fit) <= 1e-8
    with pytest.warns(ConvergenceWarning):
        one = tk.hooi(X, ranks, init=list(S.factors), max_iter=1, tol=0)
    # the first sweep takes the start's projection on its first factor, which the sketch made as
    # (X x_n Q^T) x_n (Q^T U): X x_n U to rounding
    assert T.fit_history[0] == pytest.approx(one.fit_history[0], abs=1e2 * _eps(np.float64))
    from tuckerkit.sparse import COOTensor

    Xs = COOTensor.from_dense(np.where(np.abs(X) > 0.5 * np.abs(X).max(), X, 0.0))
    with pytest.warns(ConvergenceWarning):  # three iterations, tol=0
        a = tk.hooi(Xs, ranks, init="st_hosvd_sketch", max_iter=3, tol=0)
        b = tk.hooi(Xs, ranks, max_iter=3, tol=0)
    np.testing.assert_array_equal(a.core, b.core)


def test_sparse_hooi_starts_from_a_khatri_rao_sketch(rng):
    """A sparse tensor's default start: each factor from one MTTKRP of the tensor with Gaussian factors of
    ``R_n + 10`` columns (a Khatri-Rao test matrix) and the leading left singular vectors of that sketch:
    orthonormal factors spanning the unfolding's range on an exactly low-rank sparse tensor, the same bits for
    the same call (seeded), other bits for other draws; no work buffer left on the tensor; on a noisy one the default
    call reaches the fit of the ARPACK start (``init="hosvd"``, kept) to 1e-10; float32 stays float32."""
    from tuckerkit.sparse import COOTensor
    from tuckerkit.sparse._dispatch import SKETCH_OVERSAMPLE

    assert SKETCH_OVERSAMPLE == 10
    shape, ranks = (60, 50, 40), (3, 4, 2)
    Us = []
    for n, r in zip(shape, ranks, strict=True):  # sparse factors: an exactly low-rank sparse tensor
        U = np.where(rng.random((n, r)) < 0.2, rng.random((n, r)) + 0.5, 0.0)
        U[rng.integers(0, n), :] = 1.0  # (no empty column)
        Us.append(U)
    core = rng.standard_normal(ranks)
    dense = np.einsum("abc,ia,jb,kc->ijk", core, *Us)
    X = COOTensor.from_dense(dense)
    assert X.preferred_init(ranks) == "kr_sketch"
    for n in range(3):
        U = X.sketched_subspace(n, ranks[n], np.random.default_rng(0))
        assert U.shape == (shape[n], ranks[n]) and U.dtype == np.float64
        np.testing.assert_allclose(U.T @ U, np.eye(ranks[n]), atol=100 * _eps(np.float64))
        unfold = np.moveaxis(dense, n, 0).reshape(shape[n], -1)
        resid = unfold - U @ (U.T @ unfold)  # the unfolding has rank R_n: the basis spans its range
        assert np.linalg.norm(resid) <= 1e4 * _eps(np.float64) * np.linalg.norm(unfold)
    a, b = tk.hooi(X, ranks), tk.hooi(X, ranks)
    assert not getattr(X, "_tk_work", {})  # the sketch's MTTKRP buffers are not kept on the tensor
    assert a.core.tobytes() == b.core.tobytes() and all(
        u.tobytes() == v.tobytes() for u, v in zip(a.factors, b.factors, strict=True))
    noisy = COOTensor(X.coords, X.values * (1 + 0.01 * rng.standard_normal(X.nnz)), shape)
    d, e = tk.hooi(noisy, ranks), tk.hooi(noisy, ranks, init="hosvd")
    assert d.converged and e.converged and abs(d.fit - e.fit) <= 1e-10
    s0 = noisy.sketched_subspace(0, 3, np.random.default_rng(0))
    s1 = noisy.sketched_subspace(0, 3, np.random.default_rng(1))
    assert s0.tobytes() != s1.tobytes()
    X32 = COOTensor(X.coords, X.values.astype(np.float32), shape)
    f = tk.hooi(X32, ranks)
    assert f.core.dtype == np.float32 and all(U.dtype == np.float32 for U in f.factors)
    assert abs(f.fit - a.fit) <= 10 * np.sqrt(_eps(np.float32))  # (1 - sqrt(1 - |core|^2 / |X|^2) near 1)


def test_st_hosvd_auto_order_is_the_cheapest_and_cubes_end_with_mode_0(rng):
    """``order="auto"`` with ranks: the order with the fewest multiply-adds (the first step's Gram dominates, so
    the shortest mode goes first), the same factors as that order given explicitly; among equal costs the one
    HOOI's first sweep continues (a cube's result is bitwise the one of order [2, 1, 0]); the error bound of
    each order holds."""
    X = planted_tucker(rng, (40, 30, 20), (4, 4, 4), np.float64, noise=0.05)
    auto = tk.st_hosvd(X, (4, 4, 4))
    given = tk.st_hosvd(X, (4, 4, 4), order=[2, 1, 0])
    np.testing.assert_array_equal(auto.core, given.core)
    largest_first = tk.st_hosvd(X, (4, 4, 4), order=[0, 1, 2])  # the largest reduction first (the old rule)
    assert not np.array_equal(auto.core, largest_first.core)
    for T in (auto, largest_first):
        # ST-HOSVD's bound, sqrt(N) times the best rank-(4, 4, 4) error (at most the planted noise, 0.05)
        assert T.relative_error(X) <= np.sqrt(3) * 0.05
    cube = planted_tucker(rng, (15, 15, 15), (3, 3, 3), np.float64)
    np.testing.assert_array_equal(tk.st_hosvd(cube, 3).core, tk.st_hosvd(cube, 3, order=[2, 1, 0]).core)
    # the multiply-adds behind the choice: 20 first is cheaper than 40 first (min(I_n, rest) |X| per Gram)
    from tuckerkit.decomposition._tucker import _cheapest_order, _tree_order

    assert _cheapest_order((40, 30, 20), (4, 4, 4)) == [2, 1, 0]
    assert _cheapest_order((40, 30, 20), (4, 4, 4), first=0)[0] == 0
    assert _cheapest_order((15, 15, 15), (3, 3, 3)) == [0, 1, 2]
    # HOOI's sweep order: the second half of the modes, then the second half of the first half, ..., mode 0
    assert _tree_order((15, 15, 15), (3, 3, 3)) == [2, 1, 0]
    assert _tree_order((9, 9, 9, 9), (2, 2, 2, 2)) == [2, 3, 1, 0]
    assert _tree_order((8,) * 5, (2,) * 5) == [3, 4, 2, 1, 0]
    assert _tree_order((8, 9), (2, 3)) == [1, 0]
    # not when it costs more than the projection it saves (a Gram of 300 x 6000 first, not one of 20 x 90000),
    # nor when a streamed tensor's first mode is not in the second half
    assert _tree_order((20, 300, 300), (4, 4, 4)) is None
    assert _cheapest_order((20, 300, 300), (4, 4, 4))[0] == 0
    assert _tree_order((9, 9, 9, 9), (2, 2, 2, 2), first=1) is None


def _brute_cheapest_order(shape, ranks, sketch=False, first=None):
    """The documented rule by enumeration: the order of fewest modeled multiply-adds, the first such in
    lexicographic order (optionally the orders starting with ``first`` only)."""
    import itertools

    from tuckerkit.decomposition._tucker import _step_cost

    def cost(seq):
        size, total = math.prod(shape), 0
        for i, n in enumerate(seq):
            total += _step_cost(size, shape[n], ranks[n], sketch and i == 0)
            size = size // shape[n] * ranks[n]
        return total

    perms = (p for p in itertools.permutations(range(len(shape))) if first is None or p[0] == first)
    return list(min(perms, key=cost))


def test_the_cheapest_order_is_the_enumerations_without_enumerating(monkeypatch):
    """ST-HOSVD's mode order (HOOI's start, every st_hosvd call): the same order as the enumeration of all N!
    orders, ties to the lexicographically first, with and without a sketched first step or a fixed first mode;
    but found over the sets of modes done (a step's size depends on the set, not its order): an 8-way
    tensor's search takes at most 2^8 x 8 x 2 step costs, not 8! x 8 (which was 0.37 s of every call)."""
    from tuckerkit.decomposition import _tucker

    rng = np.random.default_rng(3)
    for trial in range(300):
        N = int(rng.integers(1, 7))
        shape = [int(x) for x in rng.choice([1, 2, 3, 5, 8, 20, 64, 200], size=N)]
        if trial % 3 == 0:
            shape = [int(rng.choice([4, 10, 50]))] * N  # (ties everywhere)
        ranks = [int(rng.integers(1, s + 1)) for s in shape]
        sketch, first = bool(trial % 2), (int(rng.integers(0, N)) if trial % 5 == 0 else None)
        assert _tucker._cheapest_order(shape, ranks, sketch, first) == \
            _brute_cheapest_order(shape, ranks, sketch, first), (shape, ranks, sketch, first)
    calls = []
    real = _tucker._step_cost
    monkeypatch.setattr(_tucker, "_step_cost", lambda *a: calls.append(1) or real(*a))
    shape, ranks = (5, 3, 7, 2, 9, 4, 6, 8), (2, 1, 3, 2, 4, 2, 3, 1)
    _tucker._cheapest_order_cached.cache_clear()
    got = _tucker._cheapest_order(shape, ranks)
    assert 0 < len(calls) <= 2 * 2**8 * 8
    monkeypatch.setattr(_tucker, "_step_cost", real)
    assert got == _brute_cheapest_order(shape, ranks)
    assert _tucker._cheapest_order(shape, ranks, True, 3) == _brute_cheapest_order(shape, ranks, True, 3)


@pytest.mark.parametrize("structure", ["gaussian", "planted"])
def test_hooi_skips_the_warm_eigensolver_after_refusals_with_the_same_bits(rng, monkeypatch, structure):
    """HOOI's factor steps try the certified subspace iteration from the current factor; on a tensor without a
    gap after the r-th singular value (Gaussian data) it refuses every time, so each mode skips it for 1, 2,
    4, ... steps after each refusal; where it certifies (a planted model) every step tries it. Skipped or not,
    the result is the same to the bit (LAPACK computes what a refusal would have left to it), at every
    iteration count."""
    from tuckerkit.engine import _subspace

    if structure == "gaussian":
        X = rng.standard_normal((100, 104, 108))
    else:
        X = planted_tucker(rng, (100, 104, 108), (6, 6, 6), np.float64, noise=1e-2)
    init = tk.hosvd(X, 6)  # (each projection's Gram: 36 x 36, of the order the warm start begins at)
    tries, outcomes = [], []
    real = _subspace._top_eigh_subspace

    def spy(G, r, start=None):
        out = real(G, r, start)
        if start is not None:
            tries.append(G.shape)
            outcomes.append(out is not None)
        return out

    monkeypatch.setattr(_subspace, "_top_eigh_subspace", spy)
    with pytest.warns(ConvergenceWarning):
        got = tk.hooi(X, 6, init=init, max_iter=12, tol=0)
    n_tried = len(tries)
    with pytest.warns(ConvergenceWarning):
        short = tk.hooi(X, 6, init=init, max_iter=5, tol=0)
    monkeypatch.setattr(_subspace.SubspaceBackoff, "wanted", lambda self: True)  # the eigensolver on every step
    tries.clear()
    outcomes.clear()
    with pytest.warns(ConvergenceWarning):
        every = tk.hooi(X, 6, init=init, max_iter=12, tol=0)
    if structure == "gaussian":
        assert not any(outcomes) and len(tries) == 3 * 12
        assert n_tried == 3 * 4  # each mode at steps 1, 3, 6 and 11 of 12
    else:
        assert all(outcomes) and n_tried == len(tries) == 3 * 12
    np.testing.assert_array_equal(got.core, every.core)
    for U, V in zip(got.factors, every.factors, strict=True):
        np.testing.assert_array_equal(U, V)
    assert got.fit_history[:5] == short.fit_history


@pytest.mark.parametrize("route", ["planned", "direct"])
@pytest.mark.parametrize(("shape", "ranks"), [
    ((20, 21, 22), (3, 4, 2)),
    ((9, 10, 11, 12), (2, 3, 2, 3)),
    ((6, 7, 5, 8, 6), (2, 2, 3, 2, 2)),
])
def test_hooi_first_sweep_takes_the_start_projections(rng, monkeypatch, shape, ranks, route):
    """HOOI's ST-HOSVD start projects the modes in the order of the first sweep's partial projections, so the
    first sweep takes them instead of reading ``X`` again (one read of the full tensor, not two) and skips its
    first update (ST-HOSVD's last step made that factor from the same projection); the result is the one
    iteration from the start's factors given as ``init`` (which reads ``X`` twice), bit for bit. On both
    routes of the sweep: planned, and direct (a small tensor's, engine/_direct.py)."""
    from tuckerkit.decomposition import _tucker
    from tuckerkit.engine import _direct, _sweeps

    X = planted_tucker(rng, shape, ranks, np.float64, noise=1e-2)
    assert _direct.direct_applies(X, max(ranks))
    reads = []
    if route == "planned":
        planned_only(monkeypatch)
    # (the direct route's sweep in numpy, not the compiled sweep of small 3-way tensors, which takes no partials:
    # test_small_hooi.py)
    monkeypatch.setattr(_tucker, "_SMALL_SWEEPS", False)
    # (the standard tree, which the start's projections belong to; from a given init the 3-way sweeps would take
    # the multi-sweep tree, whose contractions differ in rounding: tests/test_multi_sweep.py)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP", False)
    mod, name = (_sweeps, "dense_multi_ttm") if route == "planned" else (_direct, "_project")
    real = getattr(mod, name)

    def spy(T, mats, *args, **kwargs):
        reads.append(T.shape == X.shape)
        return real(T, mats, *args, **kwargs)

    monkeypatch.setattr(mod, name, spy)
    S = tk.st_hosvd(X, ranks)
    with pytest.warns(ConvergenceWarning, match="reached max_iter=1"):
        T = tk.hooi(X, ranks, max_iter=1, tol=0)
    assert sum(reads) == 1
    reads.clear()
    with pytest.warns(ConvergenceWarning, match="reached max_iter=1"):
        one = tk.hooi(X, ranks, init=list(S.factors), max_iter=1, tol=0)
    assert sum(reads) == 2
    eps = _eps(np.float64)
    if len(shape) <= 4:  # (5 modes: ST-HOSVD projects modes 3 and 4 one at a time, the sweep's plan both at once)
        np.testing.assert_array_equal(T.core, one.core)
    np.testing.assert_allclose(T.core, one.core, rtol=0, atol=1e2 * eps * np.abs(one.core).max())
    for U, V in zip(T.factors, one.factors, strict=True):
        np.testing.assert_allclose(U, V, rtol=0, atol=1e3 * eps)
    # the start is tk.st_hosvd's: its fit is iteration 0 of the default call
    start_fit = 1 - np.sqrt(max(1 - (np.linalg.norm(S.core) / np.linalg.norm(X)) ** 2, 0.0))
    seen = []
    T = tk.hooi(X, ranks, callback=lambda st: seen.append(st.fit_change) and False)
    assert seen[0] == pytest.approx(abs(T.fit_history[0] - start_fit), abs=1e3 * eps)


@pytest.mark.parametrize(("method", "kwargs"), [
    ("hooi", {"ranks": (3, 4, 2)}),
    ("st_hosvd", {"ranks": (3, 4, 2)}),
    ("st_hosvd", {"ranks": (3, 4, 2), "order": [1, 0, 2]}),
    ("st_hosvd", {"max_error": 0.05}),
    ("hosvd", {"ranks": (3, 4, 2)}),
    ("hosvd", {"max_error": 0.05}),
])
def test_the_first_gram_is_made_on_entry_in_place_of_the_norm(rng, monkeypatch, method, kwargs):
    """A dense float64 call whose first step takes a mode's Gram of the whole tensor makes that Gram on entry
    and takes ||X|| from its trace: no norm's pass (one read of X fewer), the same model as with the norm's
    pass to a few eps, and a NaN or Inf still refused with its count."""
    from tuckerkit.decomposition import _tucker
    from tuckerkit.engine._operand import DenseTensor

    X = planted_tucker(rng, (20, 21, 22), (3, 4, 2), np.float64, noise=1e-2)
    before = X.copy()
    norms = []
    real = DenseTensor.norm
    monkeypatch.setattr(DenseTensor, "norm", lambda self: norms.append(self.shape) or real(self))
    fn = getattr(tk, method)
    T = fn(X, **kwargs)
    assert norms == []
    np.testing.assert_array_equal(X, before)
    # the reference: the same call with the norm's own pass (no Gram on entry)
    monkeypatch.setattr(_tucker, "_entry_gram", lambda *a, **k: (lambda op: None))
    ref = fn(X, **kwargs)
    assert norms == [X.shape]
    eps = _eps(np.float64)
    assert T.ranks == ref.ranks
    np.testing.assert_allclose(T.core, ref.core, rtol=0, atol=1e2 * eps * np.abs(ref.core).max())
    for U, V in zip(T.factors, ref.factors, strict=True):
        np.testing.assert_allclose(U, V, rtol=0, atol=1e3 * eps)
    # the fits: the same norm to a few eps (each fit is 1 - sqrt(1 - r^2): a relative change d of the norm
    # moves it by about d / (1 - fit))
    for a, b in zip(T.fit_history, ref.fit_history, strict=True):
        assert a == pytest.approx(b, abs=1e2 * eps / (1 - b))
    monkeypatch.undo()
    bad = X.copy()
    bad[1, 2, 3], bad[4, 5, 6] = np.nan, -np.inf
    with pytest.raises(ValueError, match=r"^X contains 2 NaN or infinite value\(s\); remove or impute them first$"):
        fn(bad, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"init": "svd", "fixed_modes": [0]}, {"init": "svd", "linesearch": True}])
def test_cp_als_svd_start_takes_its_first_gram_on_entry(rng, monkeypatch, kwargs):
    """CP-ALS's SVD start on a dense float64 tensor makes its first Gram (mode 1; mode 0 when that is fixed) on
    entry in place of the norm's pass: the same model and fits as with the norm's pass, to a few eps."""
    from tuckerkit.decomposition import _cp
    from tuckerkit.engine._operand import DenseTensor

    X = planted_cp(rng, (20, 21, 22), 3, np.float64)
    norms = []
    real = DenseTensor.norm
    monkeypatch.setattr(DenseTensor, "norm", lambda self: norms.append(self.shape) or real(self))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        T = tk.cp_als(X, 3, max_iter=20, **kwargs)
        assert norms == []
        monkeypatch.setattr(_cp, "_entry_gram", lambda *a, **k: (lambda op: None))
        ref = tk.cp_als(X, 3, max_iter=20, **kwargs)
    assert norms == [X.shape]
    eps = _eps(np.float64)
    assert T.n_iter == ref.n_iter
    np.testing.assert_allclose(T.fit_history, ref.fit_history, rtol=0, atol=1e3 * eps)
    for U, V in zip(T.factors, ref.factors, strict=True):
        np.testing.assert_allclose(U, V, rtol=0, atol=1e5 * eps)
    np.testing.assert_allclose(T.weights, ref.weights, rtol=1e5 * eps)
    monkeypatch.undo()
    bad = X.copy()
    bad[3, 2, 1] = np.inf
    with pytest.raises(ValueError, match=r"^X contains 1 NaN or infinite value\(s\); remove or impute them first$"):
        tk.cp_als(bad, 3, **kwargs)


@pytest.mark.parametrize("method", ["hooi", "st_hosvd", "hosvd", "cp_als"])
def test_a_small_tensor_takes_the_norms_pass_instead_of_the_entry_gram(rng, monkeypatch, method):
    """At most SMALL_NO_FIRST_GRAM elements (2^13: 20^3 is within) the call takes the norm's pass (a few
    microseconds) and no Gram on entry (its set-up some fifty): the same model as with the entry Gram to a few
    eps; with the bound one element below the tensor's size, the entry Gram."""
    from tuckerkit.decomposition import _entry
    from tuckerkit.engine._operand import DenseTensor

    norms, grams = [], []
    real_norm, real_gram = DenseTensor.norm, _entry._first_gram
    monkeypatch.setattr(DenseTensor, "norm", lambda self: norms.append(self.shape) or real_norm(self))
    monkeypatch.setattr(_entry, "_first_gram", lambda *a: grams.append(a[1]) or real_gram(*a))
    fn = getattr(tk, method)
    X = planted_tucker(rng, (20, 20, 20), (3, 4, 2), np.float64, noise=1e-2)
    assert X.size <= _entry.SMALL_NO_FIRST_GRAM
    kw = {"max_iter": 5, "tol": 0} if method in ("hooi", "cp_als") else {}
    rank = 3 if method == "cp_als" else (3, 4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        T = fn(X, rank, **kw)
        assert norms == [X.shape] and grams == []
        monkeypatch.setattr(_entry, "SMALL_NO_FIRST_GRAM", 0)  # (the entry Gram, as for larger tensors)
        ref = fn(X, rank, **kw)
        assert norms == [X.shape] and len(grams) == 1
        monkeypatch.setattr(_entry, "SMALL_NO_FIRST_GRAM", X.size - 1)  # (the bound one element below)
        fn(X, rank, **kw)
        assert norms == [X.shape] and len(grams) == 2
    eps = _eps(np.float64)
    np.testing.assert_allclose(T.to_dense(), ref.to_dense(), rtol=0, atol=1e3 * eps * np.abs(X).max())


def test_the_entry_gram_gives_way_to_the_norms_pass_on_extreme_or_zero_input(rng, monkeypatch):
    """The Gram made on entry is dropped where its trace cannot give the norm: an all-zero tensor (the norm's
    pass decides; the model is zero), a magnitude that overflows or underflows the squares (the norm's pass
    rescales: the same ranks and factors as at unit scale)."""
    from tuckerkit.engine._operand import DenseTensor

    norms = []
    real = DenseTensor.norm
    monkeypatch.setattr(DenseTensor, "norm", lambda self: norms.append(self.shape) or real(self))
    Z = tk.st_hosvd(np.zeros((6, 7, 8)), (2, 2, 2))
    assert norms == [(6, 7, 8)] and not np.any(Z.core)
    X = planted_tucker(rng, (20, 21, 22), (3, 4, 2), np.float64, noise=1e-2)
    unit = tk.st_hosvd(X, max_error=0.05)
    for scale in (1e160, 1e-160):
        norms.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (no overflow warning from the dropped Gram)
            T = tk.st_hosvd(X * scale, max_error=0.05)
        assert norms == [X.shape]
        assert T.ranks == unit.ranks
        for U, V in zip(T.factors, unit.factors, strict=True):
            np.testing.assert_allclose(U, V, rtol=0, atol=1e3 * _eps(np.float64))


def _dense_error(X, Xhat):
    """The oracle: the whole difference in float64, summed exactly (math.fsum) over its squares."""
    import math

    d = (np.asarray(X, np.float64) - np.asarray(Xhat, np.float64)).ravel()
    x = np.asarray(X, np.float64).ravel()
    return math.sqrt(math.fsum((d * d).tolist())) / math.sqrt(math.fsum((x * x).tolist()))


def _in_memory_order(X, layout):
    if layout == "F":
        return np.asfortranarray(X)
    if layout == "perm":  # memory order (2, 0, 1, ...): neither C nor F
        order = (X.ndim - 1, *range(X.ndim - 1))
        return X.transpose(order).copy().transpose(np.argsort(order))
    return X


@pytest.mark.parametrize("layout", ["C", "F", "perm"])
@pytest.mark.parametrize("kind", ["tucker", "cp"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_relative_error_of_a_dense_array_is_blocked_and_matches_the_whole_difference(layout, kind, dt, rng):
    """``relative_error`` on a real numpy array reconstructs one block of the model at a time (no
    reconstruction of the whole tensor, no float64 copies): the value of the whole difference taken in
    float64 (within a few eps of the sum, the reconstruction's own rounding aside), any memory order of
    ``X``, float32 and float64, mixed with the other dtype's model, X unmodified; a near-exact model's error at
    the level of its rounding."""
    from tuckerkit.decomposition import _results

    shape = (23, 19, 17)
    X = _in_memory_order(rng.standard_normal(shape).astype(dt), layout)
    X0 = X.copy()
    M = tk.hooi(X, (4, 3, 5)) if kind == "tucker" else tk.cp_als(X, 4, random_state=0, max_iter=30, tol=0)
    assert _results._blocked_error_applies(X, *M.factors)
    got = M.relative_error(X)
    # the reconstruction blocked or whole rounds differently in the model's dtype: a few of its eps a term
    assert got == pytest.approx(_dense_error(X, M.to_dense()), rel=100 * _eps(dt), abs=0)
    np.testing.assert_array_equal(X, X0)
    other = np.float64 if dt == np.float32 else np.float32
    Y = X.astype(other)
    assert M.relative_error(Y) == pytest.approx(_dense_error(Y, M.to_dense()), rel=100 * _eps(np.float32), abs=0)
    exact = np.asarray(M.to_dense(), np.float64)  # an exact model of its own reconstruction
    assert M.relative_error(exact) <= 100 * _eps(dt)


def test_relative_error_blocks_cut_long_rows_and_give_the_same_bits_for_any_workers(rng, monkeypatch):
    """Rows longer than a block are cut into column blocks too (a 3 x 5000 x 2 tensor with blocks of 1000
    elements: 30 blocks), the blocks' sums combined in block order: the same bits for 1, 2 and 3 workers."""
    from tuckerkit.decomposition import _results
    from tuckerkit.engine import ExecutionPolicy

    monkeypatch.setattr(_results, "ERROR_BLOCK_ELEMS", 1000)
    X = rng.standard_normal((3, 5000, 2))
    C = tk.cp_als(X, 2, random_state=0, max_iter=5, tol=0)
    got = [_results.error_and_norm_blocks(X, C._unfolded, ExecutionPolicy(workers=w)) for w in (1, 2, 3)]
    assert got[0] == got[1] == got[2]
    assert got[0][1] == pytest.approx(np.linalg.norm(X.ravel()), rel=100 * _eps(np.float64), abs=0)
    assert C.relative_error(X) == got[0][0] / got[0][1]
    assert got[0][0] / got[0][1] == pytest.approx(_dense_error(X, C.to_dense()), rel=100 * _eps(np.float64), abs=0)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_relative_error_of_a_large_array_allocates_little(dt, rng):
    """The extra memory of ``relative_error`` on 96^3 (rank 8, Tucker and CP): below half the input's bytes
    (the reconstruction's unfolding factor B, made once, and one block per worker: blocks of at most a 64th of
    the tensor), where the whole difference took 2x the input in float64 and 7x in float32."""
    X = rng.standard_normal((96, 96, 96)).astype(dt)
    for M in (tk.hosvd(X, 8), tk.CPTensor(np.ones(8, dt), tuple(rng.standard_normal((96, 8)).astype(dt)
                                                                  for _ in range(3)))):
        assert traced_peak(lambda M=M: M.relative_error(X)) < X.nbytes // 2
