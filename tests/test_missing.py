"""Missing data (``mask=`` on cp_als and hooi, EM imputation): recovery, TensorLy's masked parafac, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import to_numpy

import tuckerkit as tk
from tuckerkit.sparse import COOTensor


def _planted_cp(rng, shape=(16, 17, 18), rank=3, noise=1e-3):
    A = [rng.standard_normal((n, rank)) for n in shape]
    Xt = np.einsum("ir,jr,kr->ijk", *A)
    E = noise * np.linalg.norm(Xt) / np.sqrt(Xt.size) * rng.standard_normal(shape)
    return Xt, Xt + E, float(np.linalg.norm(E) / np.linalg.norm(Xt))


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        return fn(*args, **kwargs)


@pytest.mark.parametrize("missing", [0.3, 0.5, 0.7])
def test_cp_and_hooi_recover_a_planted_tensor_to_the_noise_level(missing, rng):
    Xt, X, noise = _planted_cp(rng)
    mask = rng.random(X.shape) >= missing
    Xn = np.where(mask, X, np.nan)  # missing entries may hold anything, NaN included
    cp = _quiet(tk.cp_als, Xn, 3, mask=mask, tol=1e-10, max_iter=400, random_state=0)
    assert np.linalg.norm(cp.to_dense() - Xt) / np.linalg.norm(Xt) <= noise
    assert abs((1 - cp.fit) - np.linalg.norm(mask * (X - cp.to_dense())) / np.linalg.norm(mask * X)) < 1e-9
    T = _quiet(tk.hooi, Xn, (3, 3, 3), mask=mask, tol=1e-10, max_iter=400)
    assert np.linalg.norm(T.to_dense() - Xt) / np.linalg.norm(Xt) <= noise


@pytest.mark.parametrize("iters", [1, 5, 30])
def test_masked_cp_equal_or_better_than_tensorly_masked_parafac_from_the_same_start(iters, rng):
    tl = pytest.importorskip("tensorly")
    from tensorly.decomposition import parafac

    _, X, _ = _planted_cp(rng, noise=0.01)
    mask = rng.random(X.shape) > 0.5
    init = [rng.standard_normal((n, 3)) for n in X.shape]
    start = np.einsum("ir,jr,kr->ijk", *init)  # TensorLy's first sweep reads the values at the missing entries
    ref = parafac(np.where(mask, X, start), 3, mask=mask.astype(float), n_iter_max=iters, tol=0, linesearch=False,
                  init=tl.cp_tensor.CPTensor((np.ones(3), [U.copy() for U in init])))
    cp = _quiet(tk.cp_als, np.where(mask, X, 0.0), 3, mask=mask, init=init, tol=0, max_iter=iters, linesearch=False)

    def observed_error(model):
        return np.linalg.norm(mask * (X - np.asarray(model))) / np.linalg.norm(mask * X)

    assert observed_error(cp.to_dense()) <= observed_error(tl.cp_to_tensor(ref)) * (1 + 1e-9) + 1e-12


def test_observed_error_never_increases_and_results_repeat(rng):
    _, X, _ = _planted_cp(rng, noise=0.05)
    mask = rng.random(X.shape) > 0.6
    for fn, r in ((tk.cp_als, 4), (tk.hooi, (3, 3, 3))):
        a = _quiet(fn, X, r, mask=mask, tol=0, max_iter=25, random_state=0)
        b = _quiet(fn, X, r, mask=mask, tol=0, max_iter=25, random_state=0)
        assert np.all(np.diff(a.fit_history) >= -1e-9)  # EM: the observed-entry error never increases
        assert a.fit_history == b.fit_history and all(
            np.array_equal(U, V) for U, V in zip(a.factors, b.factors, strict=True))


def test_full_mask_equals_the_unmasked_decomposition(rng):
    _, X, _ = _planted_cp(rng, noise=0.05)
    full = np.ones(X.shape, dtype=bool)
    a = _quiet(tk.cp_als, X, 3, tol=0, max_iter=6)
    b = _quiet(tk.cp_als, X, 3, mask=full, tol=0, max_iter=6)
    np.testing.assert_allclose(b.to_dense(), a.to_dense(), rtol=0, atol=1e-10 * np.abs(X).max())
    c, d = _quiet(tk.hooi, X, 3, tol=0, max_iter=4), _quiet(tk.hooi, X, 3, mask=full, tol=0, max_iter=4)
    np.testing.assert_allclose(d.to_dense(), c.to_dense(), rtol=0, atol=1e-10 * np.abs(X).max())


def test_float32_kept(rng):
    _, X, _ = _planted_cp(rng, noise=0.01)
    mask = rng.random(X.shape) > 0.4
    cp = _quiet(tk.cp_als, X.astype(np.float32), 3, mask=mask, max_iter=50, random_state=0)
    T = _quiet(tk.hooi, X.astype(np.float32), 3, mask=mask, max_iter=20)
    assert cp.weights.dtype == np.float32 and T.core.dtype == np.float32 and cp.fit > 0.98 and T.fit > 0.98
    # float64's fits to float32's rounding (2.4e-10 apart seen for CP-ALS)
    cp64 = _quiet(tk.cp_als, X, 3, mask=mask, max_iter=50, random_state=0)
    T64 = _quiet(tk.hooi, X, 3, mask=mask, max_iter=20)
    eps = np.finfo(np.float32).eps
    assert abs(cp.fit - cp64.fit) <= 1e3 * eps and abs(T.fit - T64.fit) <= 1e3 * eps


def test_masked_on_device_equals_cpu(xp):
    rng = np.random.default_rng(0)
    _, X, _ = _planted_cp(rng, noise=0.01)
    mask = rng.random(X.shape) > 0.4
    ref = _quiet(tk.cp_als, X, 3, mask=mask, tol=0, max_iter=5)
    got = _quiet(tk.cp_als, xp.asarray(X), 3, mask=xp.asarray(mask), tol=0, max_iter=5)
    np.testing.assert_allclose(got.fit_history, ref.fit_history, rtol=0, atol=1e-10)
    np.testing.assert_allclose(to_numpy(got.to_dense()), ref.to_dense(), rtol=0, atol=1e-9 * np.abs(X).max())


@pytest.mark.parametrize("fn,r", [(tk.cp_als, 2), (tk.hooi, 2)])
def test_mask_bad_input(fn, r, rng):
    X = rng.random((4, 5, 6))
    with pytest.raises(ValueError, match=r"^mask has shape \(4, 5\); expected X's shape \(4, 5, 6\)$"):
        fn(X, r, mask=np.ones((4, 5), dtype=bool))
    with pytest.raises(TypeError, match=r"^mask has dtype float64; expected a boolean array \(True = observed\)$"):
        fn(X, r, mask=np.ones(X.shape))
    with pytest.raises(ValueError, match=r"^mask has shape \(1,\); expected X's shape \(4, 5, 6\)$"):
        fn(X, r, mask=[True])  # (a list is taken as X is: an array of its shape)
    with pytest.raises(TypeError, match=r"^mask is \[\[True\], \[True, False\]\] of uneven lengths; expected a "
                                        r"boolean array of X's shape"):
        fn(X, r, mask=[[True], [True, False]])
    with pytest.raises(TypeError, match=r"^mask is 'all'; expected a boolean array of X.s shape"):
        fn(X, r, mask="all")
    with pytest.raises(ValueError, match=r"^mask has no True entry"):
        fn(X, r, mask=np.zeros(X.shape, dtype=bool))
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"^X has NaN or infinite values at observed entries"):
        fn(bad, r, mask=np.ones(X.shape, dtype=bool))
    with pytest.raises(TypeError, match=r"^mask= needs a dense in-memory X"):
        fn(COOTensor.from_dense(X), r, mask=np.ones(X.shape, dtype=bool))
    with pytest.raises(ValueError, match=r"^mask= cannot be combined with memory_limit="):
        fn(X, r, mask=np.ones(X.shape, dtype=bool), memory_limit="1MB")


@pytest.mark.parametrize("fn,r", [(tk.cp_als, 2), (tk.hooi, 2)])
def test_a_mask_of_nested_lists_is_its_array(fn, r, rng):
    X = rng.random((4, 5, 6))
    mask = rng.random(X.shape) > 0.3
    want = _quiet(fn, X, r, mask=mask, tol=0, max_iter=3)
    got = _quiet(fn, X, r, mask=mask.tolist(), tol=0, max_iter=3)
    assert got.fit_history == want.fit_history


def test_mask_accepts_the_dense_operand(rng):
    from tuckerkit.engine import as_operand

    _, X, _ = _planted_cp(rng, noise=0.01)
    mask = rng.random(X.shape) > 0.4
    a = _quiet(tk.cp_als, X, 3, mask=mask, tol=0, max_iter=3)
    b = _quiet(tk.cp_als, as_operand(X), 3, mask=mask, tol=0, max_iter=3)
    assert a.fit_history == b.fit_history


def _models(rng, shape, rank, dtype):
    from tuckerkit.decomposition._missing import CPModel, TuckerModel

    w = rng.random(rank).astype(dtype) + 0.5
    F = [rng.standard_normal((n, rank)).astype(dtype) for n in shape]
    core = rng.standard_normal((rank,) * len(shape)).astype(dtype)
    letters = "abcdef"[:len(shape)]
    cp_dense = np.einsum(",".join(f"{c}r" for c in letters) + ",r->" + letters, *(U.astype(np.float64) for U in F),
                         w.astype(np.float64))
    tk_dense = tk.multi_ttm(core.astype(np.float64), [U.astype(np.float64) for U in F])
    return [(CPModel(w, F), cp_dense), (TuckerModel(core, F), tk_dense)]


@pytest.mark.parametrize("shape", [(5, 6, 7), (9, 11), (3, 4, 5, 6), (1, 7, 1, 13)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("piece", [4, 16, 64, 1 << 15])  # one row cut in ranges, rows of a slab, whole slabs
def test_e_step_in_pieces_fills_the_model_and_measures_the_observed_residual(shape, dtype, piece, rng,
                                                                               monkeypatch):
    from tuckerkit.decomposition import _missing
    from tuckerkit.engine._policy import ExecutionPolicy

    monkeypatch.setattr(_missing, "E_PIECE_ELEMS", piece)
    monkeypatch.setattr(_missing, "E_PIECES_PER_TASK", 2)
    eps = np.finfo(dtype).eps
    X0 = rng.standard_normal(shape).astype(dtype)
    mask = rng.random(shape) > 0.4
    mask.flat[0] = True
    for model, dense in _models(rng, shape, 3, dtype):
        scale = np.abs(dense).max() + np.abs(X0).max()
        fits, filled = [], []
        for workers in (1, 2, 3):
            e = _missing.EStep(X0.copy(), mask, ExecutionPolicy(workers=workers))
            assert e.pieces
            fits.append(e.step(model))
            filled.append(e.X)
        # the same bits for any number of workers
        assert fits[0] == fits[1] == fits[2] and all(np.array_equal(filled[0], f) for f in filled[1:])
        got = filled[0]
        assert np.array_equal(got[mask], X0[mask])  # observed entries untouched
        np.testing.assert_allclose(got[~mask], dense[~mask], rtol=0, atol=64 * eps * scale)
        X64 = X0.astype(np.float64)
        want = 1 - np.linalg.norm(np.where(mask, X64 - dense, 0)) / np.linalg.norm(np.where(mask, X64, 0))
        assert abs(fits[0] - want) <= 64 * eps * scale
        # the whole-array form (a GPU's, or a tensor that is not C-contiguous) agrees
        whole = _missing.EStep(X0.copy(), mask, pieces=False)
        assert not whole.pieces
        assert abs(whole.step(model) - fits[0]) <= 64 * eps * scale
        np.testing.assert_allclose(whole.X, got, rtol=0, atol=64 * eps * scale)
        # a fill alone (the start) writes the same values and leaves the observed entries
        only = _missing.EStep(X0.copy(), mask)
        only.fill(model)
        assert np.array_equal(only.X, got)


def test_e_step_extreme_values_sum_scaled(rng):
    from tuckerkit.decomposition._missing import CPModel, EStep

    X = rng.standard_normal((6, 7, 8)) * 1e200
    mask = rng.random(X.shape) > 0.5
    F = [rng.standard_normal((n, 2)) for n in X.shape]
    model = CPModel(np.ones(2), F)
    dense = np.einsum("ir,jr,kr->ijk", *F)
    fit = EStep(X.copy(), mask).step(model)
    Xs = X / 1e200
    want = 1 - np.linalg.norm(np.where(mask, Xs - dense / 1e200, 0)) / np.linalg.norm(np.where(mask, Xs, 0))
    assert np.isfinite(fit) and abs(fit - want) < 1e-12
    bad = CPModel(np.array([np.inf, 1.0]), F)
    assert EStep(X.copy(), mask).step(bad) == -np.inf


def test_masked_calls_from_any_layout_give_the_same_bits(rng):
    _, X, _ = _planted_cp(rng, noise=0.05)
    mask = rng.random(X.shape) > 0.5
    for fn, r in ((tk.cp_als, 3), (tk.hooi, (3, 3, 3))):
        a = _quiet(fn, X, r, mask=mask, tol=0, max_iter=4, random_state=0)
        b = _quiet(fn, np.asfortranarray(X), r, mask=np.asfortranarray(mask), tol=0, max_iter=4, random_state=0)
        assert a.fit_history == b.fit_history


def test_masked_hooi_starts_from_the_sketched_st_hosvd(rng):
    """The default start of a masked HOOI is the sketched ST-HOSVD of the filled tensor (the same bits as
    asking for it; a fixed seed when random_state is None, so default calls repeat their bits), and it
    reaches the HOSVD start's fit."""
    _, X, _ = _planted_cp(rng, noise=0.01)
    mask = rng.random(X.shape) > 0.5
    a = _quiet(tk.hooi, X, (3, 3, 3), mask=mask, tol=0, max_iter=3)
    b = _quiet(tk.hooi, X, (3, 3, 3), mask=mask, tol=0, max_iter=3, init="st_hosvd_sketch")
    c = _quiet(tk.hooi, X, (3, 3, 3), mask=mask, tol=0, max_iter=3)
    assert a.fit_history == b.fit_history == c.fit_history
    assert all(np.array_equal(U, V) for U, V in zip(a.factors, c.factors, strict=True))
    d = _quiet(tk.hooi, X, (3, 3, 3), mask=mask, tol=1e-12, max_iter=200)
    e = _quiet(tk.hooi, X, (3, 3, 3), mask=mask, tol=1e-12, max_iter=200, init="hosvd")
    assert abs(d.fit - e.fit) < 1e-9


def test_masked_cp_line_search_judges_jumps_on_the_observed_entries(rng, monkeypatch):
    """With ``mask=`` the line search judges a jump by the observed entries' fit (the tensor left as it is:
    the same bits as the E step's fit of that model) and an accepted jump refills the missing entries: the
    observed error never increases, the reported fit is the returned model's, and with 80 % missing the
    default stop comes in fewer iterations than plain EM-ALS."""
    import tuckerkit.decomposition._cp as cp_mod
    from tuckerkit.decomposition._missing import CPModel, EStep

    _, X, _ = _planted_cp(rng, shape=(30, 31, 32), noise=0.01)
    mask = rng.random(X.shape) > 0.8
    F = [rng.standard_normal((n, 3)) for n in X.shape]
    e = EStep(np.where(mask, X, 0.5), mask)
    before = e.X.copy()
    judged = e.observed_fit(CPModel(np.ones(3), F))
    assert np.array_equal(e.X, before)
    assert judged == e.step(CPModel(np.ones(3), F))

    accepted = []
    attempt = cp_mod._Jumps.attempt
    monkeypatch.setattr(cp_mod._Jumps, "attempt", lambda self, *a, **k: accepted.append(
        attempt(self, *a, **k)) or accepted[-1])
    a = _quiet(tk.cp_als, X, 3, mask=mask, tol=1e-8, max_iter=500, random_state=0)
    assert any(j is not None for j in accepted)
    monkeypatch.undo()
    b = _quiet(tk.cp_als, X, 3, mask=mask, tol=1e-8, max_iter=500, random_state=0, linesearch=False)
    assert np.all(np.diff(a.fit_history) >= -1e-12)
    observed_error = np.linalg.norm(mask * (X - a.to_dense())) / np.linalg.norm(mask * X)
    assert abs((1 - a.fit) - observed_error) < 1e-9
    assert a.n_iter < b.n_iter and a.fit >= b.fit - 1e-6


@pytest.mark.parametrize("masked", [False, True])
def test_a_tucker_starts_core_is_checked_in_one_line(masked):
    """hooi(mask=, init=(core, factors)) uses the core for the first fill but never checked it: a NaN core
    failed in LAPACK (?syevd), a core of other extents named the engine's matrices[0], a scalar "X"."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((10, 11, 12))
    mask = rng.random(X.shape) > 0.4 if masked else None
    Us = [np.linalg.qr(rng.standard_normal((n, 3)))[0] for n in X.shape]
    for core, exc, msg in [
        (np.full((3, 3, 3), np.nan), ValueError, r"^init's core contains NaN or infinite values; expected finite"),
        (np.ones((2, 2, 2)), ValueError, r"^init's core has shape \(2, 2, 2\); expected \(3, 3, 3\) \(the ranks\)$"),
        (1.0, ValueError, r"^init's core has shape \(\); expected \(3, 3, 3\) \(the ranks\)$"),
        (np.full((3, 3, 3), "a"), TypeError, r"^init's core has dtype <U1; expected numbers$"),
    ]:
        with pytest.raises(exc, match=msg):
            tk.hooi(X, 3, init=(core, Us), mask=mask, max_iter=2)


def test_a_masked_start_beyond_the_dtypes_range_is_refused_in_one_line():
    """A masked CP-ALS from factors of 1e100 (finite) filled the missing entries with ~1e300: the Grams overflowed
    and LAPACK failed (DLASCL's illegal value, then 'SVD did not converge'); the same start without a mask is
    rescaled and runs. HOOI's core 1e308 the same."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((10, 11, 12))
    mask = rng.random(X.shape) > 0.4
    F = [1e100 * rng.random((n, 3)) for n in X.shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        assert np.isfinite(tk.cp_als(X, 3, init=F, max_iter=3, tol=0).fit)
    msg = (r"^init's model, filled in at the missing entries, gives the tensor a root-mean-square of .*, beyond "
           r"float64's safe range \(the observed entries': 0\.987\); scale the start to the data's magnitude$")
    with pytest.raises(ValueError, match=msg):
        tk.cp_als(np.where(mask, X, np.nan), 3, init=F, mask=mask, max_iter=3, tol=0)
    Us = [np.linalg.qr(rng.standard_normal((n, 3)))[0] for n in X.shape]
    with pytest.raises(ValueError, match=msg):
        tk.hooi(X, 3, init=(np.full((3, 3, 3), 1e308), Us), mask=mask, max_iter=2)
