"""The Gram from float32 products that seeds HOOI's ST-HOSVD start and CP-ALS's SVD start (engine/_gram.py
``start_gram``)."""

from __future__ import annotations

import numpy as np
import pytest
from _subspaces import subspace_sine

import tuckerkit as tk
from tuckerkit.decomposition import _entry
from tuckerkit.engine import ExecutionPolicy, _gram, as_operand
from tuckerkit.engine._gram import _dense_gram, start_gram

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
ONE, TWO = ExecutionPolicy(workers=1), ExecutionPolicy(workers=2)


def _planted(rng, shape, ranks, noise=1e-2):
    X = tk.multi_ttm(rng.standard_normal(ranks), [np.linalg.qr(rng.standard_normal((n, r)))[0]
                                                  for n, r in zip(shape, ranks, strict=True)])
    E = rng.standard_normal(shape)
    return X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E


def _tensor(rng, shape, order):
    X = rng.standard_normal(shape)
    return np.asfortranarray(X) if order == "F" else X


@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("mode", [0, 2])
def test_start_gram_is_the_gram_to_float32_rounding(rng, order, mode, tiles, monkeypatch):
    """Either end mode of a C or F array (rows of the unfolding or of its transpose of unit stride), on the
    tile kernel where it applies and on numpy's SSYRK (every CPU's route elsewhere): within the worst-case
    bound of float32 inputs and float32 sums over one block, (kb + 2) eps32 |X_(n)| |X_(n)|^T; exactly
    symmetric; the diagonal's exact float64 squares; the same bits for one or two workers and on a second
    call; the input unchanged."""
    if tiles and not _gram._start_tiles_apply(1):
        pytest.skip("the tile kernel runs on CPUs with AVX2 and FMA")
    if not tiles:
        monkeypatch.setattr(_gram, "_start_tiles_apply", lambda In: False)
    X = _tensor(rng, (60, 70, 80), order)
    before = X.copy()
    got = start_gram(X, mode, TWO)
    assert got is not None
    G, ssq = got
    ref = _dense_gram(X, mode, None, ONE)
    absref = _dense_gram(np.abs(X), mode, None, ONE)
    In = X.shape[mode]
    K = X.size // In
    kb = min(K, max(16, _gram._START_BLOCK_BYTES // (4 * In)))  # (a block's columns: float32 sums over them)
    assert np.all(np.abs(G - ref) <= (kb + 2) * EPS32 * absref)
    assert np.abs(G - ref).max() > 1e3 * EPS64 * np.abs(ref).max()  # (float32 products: not the float64 Gram)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(ssq, np.diag(ref), rtol=K * EPS64, atol=0)
    G1, s1 = start_gram(X, mode, ONE)
    G2, s2 = start_gram(X, mode, TWO)
    np.testing.assert_array_equal(G1, G)
    np.testing.assert_array_equal(G2, G)
    np.testing.assert_array_equal(s1, ssq)
    np.testing.assert_array_equal(s2, ssq)
    np.testing.assert_array_equal(X, before)


def test_start_gram_blocks_cover_every_column(rng, monkeypatch):
    """Blocks that do not divide the pieces (a short last block in each piece): still every column, once."""
    monkeypatch.setattr(_gram, "_START_BLOCK_BYTES", 4 * 60 * 37)  # 37 columns a block
    X = rng.standard_normal((60, 70, 80))
    G, ssq = start_gram(X, 0, TWO)
    ref = _dense_gram(X, 0, None, ONE)
    absref = _dense_gram(np.abs(X), 0, None, ONE)
    assert np.all(np.abs(G - ref) <= 39 * EPS32 * absref)
    np.testing.assert_allclose(ssq, np.diag(ref), rtol=5600 * EPS64, atol=0)


@pytest.mark.parametrize("order", ["C", "F"])
def test_start_gram_of_a_middle_mode_is_the_gram_to_float32_rounding(rng, order, monkeypatch):
    """A middle mode (a sum over slabs with unit-stride rows, packed side by side in float32): within the bound
    of float32 sums over one pack, (k R + 2) eps32 |X_(n)| |X_(n)|^T, packs that do not divide the pieces
    included; exactly symmetric; the diagonal's exact float64 squares; the same bits for one or two workers;
    the input unchanged."""
    monkeypatch.setattr(_gram, "_START_BLOCK_BYTES", 4 * 70 * 80 * 3)  # three slabs a pack (C order)
    X = _tensor(rng, (60, 70, 80), order)
    before = X.copy()
    G, ssq = start_gram(X, 1, TWO)
    ref = _dense_gram(X, 1, None, ONE)
    absref = _dense_gram(np.abs(X), 1, None, ONE)
    R = 80 if order == "C" else 60  # the unit-stride side of the slabs
    k = max(1, _gram._START_BLOCK_BYTES // (4 * 70 * R))
    assert np.all(np.abs(G - ref) <= (k * R + 2) * EPS32 * absref)
    assert np.abs(G - ref).max() > 1e3 * EPS64 * np.abs(ref).max()
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(ssq, np.diag(ref), rtol=X.size // 70 * EPS64, atol=0)
    G1, s1 = start_gram(X, 1, ONE)
    np.testing.assert_array_equal(G1, G)
    np.testing.assert_array_equal(s1, ssq)
    np.testing.assert_array_equal(X, before)


def test_start_gram_declines_where_it_does_not_apply(rng):
    """None for float32 (already single precision), a last mode or a middle one without a unit stride, and a
    Gram too small to be worth a second route."""
    X = rng.standard_normal((60, 70, 80))
    assert start_gram(X.astype(np.float32), 0, TWO) is None
    assert start_gram(X[:, :, ::2], 2, TWO) is None
    assert start_gram(X[:, :, ::2], 1, TWO) is None
    assert start_gram(rng.standard_normal((10, 11, 12)), 0, TWO) is None
    assert start_gram(rng.standard_normal((10, 11, 12)), 1, TWO) is None


def test_a_small_gram_is_declined_before_planning_and_at_the_threshold_exactly(rng, monkeypatch):
    """The size test (I_n^2 K flops, as both routes count them) runs before a plan is made: below the
    threshold no plan is made and the answer is None; at it, every mode's start Gram is made."""
    from tuckerkit.engine._policy import MIN_PARALLEL_FLOPS

    made = []
    real = _gram.build_gram_plan
    monkeypatch.setattr(_gram, "build_gram_plan", lambda *a: made.append(a) or real(*a))
    assert 4 * MIN_PARALLEL_FLOPS == 100 * 40 * 40 * 100  # (the shapes below sit on it)
    for n, at, below in ((0, (100, 40, 40), (99, 40, 40)), (1, (40, 100, 40), (39, 100, 40)),
                         (2, (40, 40, 100), (40, 40, 99))):
        made.clear()
        assert start_gram(rng.standard_normal(below), n, TWO) is None and not made
        X = rng.standard_normal(at)
        G, ssq = start_gram(X, n, TWO)
        assert made and G.shape == (X.shape[n], X.shape[n])
        np.testing.assert_allclose(ssq.sum(), np.sum(X * X), rtol=1e3 * np.finfo(float).eps)


def test_gram_plans_are_kept_per_spec(rng):
    """A plan depends on the array type, shape, strides, dtype, mode and policy only: the same spec gives the
    same plan object, any other part gives another one, and the plan still checks what it is given."""
    from tuckerkit.engine._gram import build_gram_plan

    X = rng.standard_normal((6, 7, 8))
    p = build_gram_plan(X, 1, TWO)
    assert build_gram_plan(X.copy(), 1, TWO) is p
    others = [build_gram_plan(X, 0, TWO), build_gram_plan(X, 1, ExecutionPolicy(workers=1)),
              build_gram_plan(X.astype(np.float32), 1, TWO), build_gram_plan(np.asfortranarray(X), 1, TWO),
              build_gram_plan(X[:, :, :7], 1, TWO)]
    assert all(q is not p for q in others) and len({id(q) for q in others}) == len(others)
    np.testing.assert_allclose(p(X), np.einsum("ijk,ilk->jl", X, X), rtol=0, atol=1e3 * np.finfo(float).eps
                               * np.abs(X).max() ** 2 * X.size)
    with pytest.raises(ValueError, match="plan was made for mode 1, shape"):
        p(X[:, :, :7])


def test_cp_starts_from_rough_grams_and_reaches_the_same_model(rng, monkeypatch):
    """CP-ALS's SVD start takes the Grams of modes 1 and 2 from float32 products (the first made on entry, its
    trace the exact norm), and ends where the exact Grams' start ends: the same iterations, the fit to a few
    eps, the same model to float32's rounding of the start (ALS removes it: 7.7e-12 apart)."""
    X = tk.datasets.make_low_rank_cp((60, 70, 80), 4, noise=0.01, random_state=3).data
    calls = []
    real = _gram.start_gram
    monkeypatch.setattr(_gram, "start_gram", lambda *a: calls.append(a[1]) or real(*a))
    T = tk.cp_als(X, 4)
    assert calls == [1, 2]
    monkeypatch.setattr(_entry, "_rough_gram", lambda *a: None)
    ref = tk.cp_als(X, 4)
    assert T.n_iter == ref.n_iter
    assert T.fit == pytest.approx(ref.fit, abs=1e2 * EPS64 / (1 - ref.fit))
    dense, dref = T.to_dense(), ref.to_dense()
    assert np.linalg.norm(dense - dref) <= EPS32 * np.linalg.norm(dref)  # (measured: 7.7e-12)


@pytest.mark.parametrize("shape, ranks, grams", [
    ((60, 70, 80), (4, 5, 6), [((60, 70, 80), 0, True), ((4, 70, 80), 1, False)]),  # (too small: exact)
    ((120, 120, 120), (10, 10, 10), [((120, 120, 120), 2, True), ((120, 120, 10), 1, True)]),
    # (the third step's Gram, 56^2 x 2100 multiply-adds, is below start_gram's size: it declines)
    ((56, 50, 44, 38), (4, 5, 6, 7), [((56, 50, 44, 38), 3, True), ((56, 50, 44, 7), 2, True),
                                      ((56, 50, 6, 7), 1, False)]),
])
def test_hooi_starts_from_the_rough_gram_and_reaches_the_same_model(rng, monkeypatch, shape, ranks, grams):
    """HOOI's default start takes its entry Gram and the Gram of each later ST-HOSVD step but the last from
    float32 products where start_gram applies (on X, then on the projections; the last step's factor is the
    first sweep's first update, so its Gram stays exact), and ends where the exact Grams' start ends: the same
    iterations, the fit to a few eps of the norm, the same subspaces."""
    X = _planted(rng, shape, ranks)
    calls = []
    real = _gram.start_gram

    def spy(*a):
        got = real(*a)
        calls.append((a[0].shape, a[1], got is not None))
        return got

    monkeypatch.setattr(_gram, "start_gram", spy)
    T = tk.hooi(X, ranks)
    assert calls == grams
    monkeypatch.setattr(_entry, "_rough_gram", lambda *a: None)
    ref = tk.hooi(X, ranks)
    assert T.n_iter == ref.n_iter
    assert T.fit == pytest.approx(ref.fit, abs=1e2 * EPS64 / (1 - ref.fit))
    for U, V in zip(T.factors, ref.factors, strict=True):
        assert subspace_sine(U, V) <= 1e-10


@pytest.mark.parametrize("scale", [2.0**-60, 2.0**60])
def test_the_rough_gram_gives_way_to_the_exact_one_outside_float32s_range(rng, scale):
    """A root-mean-square magnitude outside float32's safe range (2^-40..2^40) takes the exact Gram (its
    bits), where a unit-scale tensor takes the rough one with the exact trace."""
    X = rng.standard_normal((60, 70, 80))
    op = as_operand(X)
    G, tr = _entry._first_gram(op, 2, TWO, True)
    exact = op.gram(2, policy=TWO)
    assert not np.array_equal(G, exact)
    assert tr == pytest.approx(float(np.trace(exact)), rel=1e3 * EPS64)
    op = as_operand(X * scale)
    G, tr = _entry._first_gram(op, 2, TWO, True)
    exact = op.gram(2, policy=TWO)
    np.testing.assert_array_equal(G, exact)
    assert tr == float(np.trace(exact))


def test_hooi_with_the_rough_start_still_refuses_nan_with_its_count(rng):
    X = rng.standard_normal((60, 70, 80))
    X[5, 6, 7], X[50, 60, 70] = np.nan, np.inf
    with pytest.raises(ValueError, match=r"^X contains 2 NaN or infinite value\(s\); remove or impute them first$"):
        tk.hooi(X, 3)


needs_tiles = pytest.mark.skipif(not _gram._start_tiles_apply(1),
                                 reason="the tile kernel runs on CPUs with AVX2 and FMA")
needs_f32_tiles = pytest.mark.skipif(not _gram._tiles_apply(1),
                                     reason="float32 Grams take the tile kernel on AVX2 CPUs with 256-bit vectors")


@needs_tiles
@pytest.mark.parametrize("In", [1, 5, 6, 7, 12, 13, 16, 17, 25, 32, 33, 40, 44, 45, 50, 200])
def test_the_tile_kernel_is_the_gram_to_float32_rounding(rng, In, monkeypatch):
    """The tile kernel (:func:`_gram._start_gram_tiles`) on sizes that fill no tile exactly (rows of 6, columns
    of 16; where vectors are wide 12 x 32, the diagonal's strip 12 x 16 where it fits: 44, 45 and 50 there with
    7-12 rows, 5, 13 and 40 with fewer) and on runs and windows that divide neither the pieces nor each
    other, its next run prefetched (W C-ordered) or not (a strided W, the same bits): within the bound of float32
    sums over one window, (window + 2) eps32 |W|^T |W|; exactly symmetric; the diagonal's float64 squares;
    the same bits for one or two workers, for any run length (each entry is one chain over its window) and on
    a repeat; W unchanged."""
    K = 301
    W = rng.standard_normal((K, In))
    before = W.copy()
    cuts, window = [0, 97, 203, K], 41
    ref = W.T @ W
    absref = np.abs(W).T @ np.abs(W)
    monkeypatch.setattr(_gram, "_TILE_RUN", 11)
    G, ssq = _gram._start_gram_tiles(W, cuts, window, TWO)
    assert np.all(np.abs(G - ref) <= (window + 2) * EPS32 * absref)
    if In > 1:
        assert np.abs(G - ref).max() > 1e3 * EPS64 * np.abs(ref).max()  # (float32 products)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(ssq, np.diag(ref), rtol=K * EPS64, atol=0)
    G1, s1 = _gram._start_gram_tiles(W, cuts, window, ONE)
    np.testing.assert_array_equal(G1, G)
    np.testing.assert_array_equal(s1, ssq)
    for run in (1, 41, 1000):
        monkeypatch.setattr(_gram, "_TILE_RUN", run)
        Gr, sr = _gram._start_gram_tiles(W, cuts, window, TWO)
        np.testing.assert_array_equal(Gr, G)
        np.testing.assert_array_equal(sr, ssq)
    strided = np.asfortranarray(W)  # (not C-ordered: no prefetch of the next run)
    Gs, s_s = _gram._start_gram_tiles(strided, cuts, window, TWO)
    np.testing.assert_array_equal(Gs, G)
    np.testing.assert_array_equal(s_s, ssq)
    np.testing.assert_array_equal(W, before)


@needs_tiles
def test_the_tile_kernel_takes_the_last_mode_of_a_c_array_only(rng, monkeypatch):
    """start_gram's last mode of a C array (the first of an F array) goes to the tile kernel with SSYRK's
    pieces (float32 sums over ``_TILE_WINDOW`` columns) up to ``_TILE_MAX_ORDER``; its first mode and its middle
    ones keep numpy's SSYRK (a transpose to round them), and so does a longer last mode."""
    calls = []
    real = _gram._start_gram_tiles
    monkeypatch.setattr(_gram, "_start_gram_tiles", lambda W, cuts, window, pol: calls.append(
        (W.shape, cuts[-1], window)) or real(W, cuts, window, pol))
    X = rng.standard_normal((60, 70, 80))
    for mode in (0, 1, 2):
        assert start_gram(X, mode, TWO) is not None
    assert calls == [((60 * 70, 80), 60 * 70, _gram._TILE_WINDOW)]
    assert start_gram(np.asfortranarray(X), 0, TWO) is not None
    assert calls[1] == ((70 * 80, 60), 70 * 80, _gram._TILE_WINDOW)
    big = _gram._TILE_MAX_ORDER + 1  # (above it the float32 triangle leaves L2: SSYRK)
    assert start_gram(rng.standard_normal((200, big)), 1, TWO) is not None
    assert start_gram(rng.standard_normal((200, big - 1)), 1, TWO) is not None
    assert calls[2:] == [((200, big - 1), 200, _gram._TILE_WINDOW)]


@needs_f32_tiles
@pytest.mark.parametrize("order, mode", [("C", 2), ("F", 0)])
def test_a_long_float32_gram_takes_the_tile_kernel(rng, monkeypatch, order, mode):
    """A float32 Gram whose unfolding's transpose has unit-stride rows and is long enough for column pieces
    goes to the tile kernel: the float32 sums over windows of ``_TILE_WINDOW`` columns, the rest in float64,
    one rounding at the end: within (window + 2) eps32 |X_(n)| |X_(n)|^T + eps32 |G| of the float64 Gram;
    exactly symmetric; the same bits for one or two workers; X unchanged."""
    X = _tensor(rng, (60, 70, 80), order).astype(np.float32)
    before = X.copy()
    calls = []
    real = _gram._start_gram_tiles
    monkeypatch.setattr(_gram, "_start_gram_tiles", lambda *a: calls.append(a[0].shape) or real(*a))
    G = as_operand(X).gram(mode, policy=TWO)
    In = X.shape[mode]
    assert calls == [(X.size // In, In)]
    assert G.dtype == np.float32
    X64 = X.astype(np.float64)
    ref = _dense_gram(X64, mode, None, ONE)
    absref = _dense_gram(np.abs(X64), mode, None, ONE)
    bound = (_gram._TILE_WINDOW + 2) * EPS32 * absref + EPS32 * np.abs(ref)
    assert np.all(np.abs(G - ref) <= bound)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_array_equal(as_operand(X).gram(mode, policy=ONE), G)
    np.testing.assert_array_equal(X, before)
