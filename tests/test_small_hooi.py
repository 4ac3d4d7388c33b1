"""HOOI's compiled sweep of small 3-way tensors (tuckerkit/engine/_small_hooi.py) against the direct route, an
einsum + SVD reference iteration, and its own repeats."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.decomposition import _tucker
from tuckerkit.engine import _small_hooi
from tuckerkit.engine._small_hooi import GRAM, OTHER, TINY, small_sweep_routes

pytestmark = pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")


def planted_tucker(rng, shape, ranks, dtype, noise):
    """A Tucker tensor of ``ranks`` (orthonormal factors, Gaussian core) plus Gaussian noise of relative size
    ``noise``, C-contiguous."""
    core = rng.standard_normal(ranks)
    Us = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    X = np.einsum("abc,ia,jb,kc->ijk", core, *Us)
    E = rng.standard_normal(shape)
    return np.ascontiguousarray((X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E).astype(dtype))


def _eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def _hooi(X, ranks, compiled: bool, monkeypatch, **kw):
    monkeypatch.setattr(_tucker, "_SMALL_SWEEPS", compiled)
    return tk.hooi(X, ranks, **kw)


def _same_subspace(U, V, tol):
    k = U.shape[1]
    np.testing.assert_allclose(U.T @ V @ V.T @ U, np.eye(k), atol=tol)


def test_routes_mirror_the_factor_steps():
    """Each mode's route is the one leading_left_singular takes on that unfolding: the tiny Jacobi route on Grams
    of order <= 12, else the certified iteration on the smaller side's Gram; None where any mode has neither, the
    tensor is not 3-way or the work bound is passed."""
    assert small_sweep_routes((10, 10, 10), (3, 3, 3)) == (TINY, TINY, TINY)  # (P = 9)
    assert small_sweep_routes((20, 20, 20), (5, 5, 5)) == (GRAM, GRAM, GRAM)  # (I_n = 20 <= P = 25)
    assert small_sweep_routes((30, 30, 30), (5, 5, 5)) == (OTHER, OTHER, OTHER)  # (P = 25 < I_n = 30)
    assert small_sweep_routes((200, 10, 10), (4, 4, 4)) == (OTHER, TINY, TINY)
    assert small_sweep_routes((10, 10, 10, 10), (3, 3, 3, 3)) == (TINY,) * 4  # (I_n = 10 <= P = 27)
    assert small_sweep_routes((12, 12, 12, 12), (4, 4, 4, 4)) == (TINY,) * 4  # (Gram order 12)
    assert small_sweep_routes((14, 14, 14, 14), (3, 3, 3, 3)) == (GRAM,) * 4  # (I_n = 14 <= P = 27)
    assert small_sweep_routes((20, 20, 20, 20), (5, 5, 5, 5)) is None  # (4-way: 160000 * 25 > 500000)
    assert small_sweep_routes((6, 6, 6, 6, 6), (2,) * 5) is None  # (5-way: the direct route)
    assert small_sweep_routes((40, 40, 40), (10, 10, 10)) is None  # (64000 * 10^4 > SMALL_SWEEP_MAX_WORK)
    assert small_sweep_routes((70, 70, 70), (3, 3, 3)) is None  # (beyond SMALL_SWEEP_MAX_ELEMS)
    assert small_sweep_routes((10, 10, 10), (10, 3, 3)) is None  # (a full-rank mode)
    assert small_sweep_routes((25, 20, 15), (2, 8, 3)) is None  # (mode 1: r = 8 > P = 6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("shape", "ranks"), [((10, 10, 10), (3, 3, 3)), ((20, 20, 20), (5, 5, 5)),
                                              ((30, 30, 30), (5, 5, 5)), ((200, 10, 10), (4, 4, 4)),
                                              ((12, 20, 30), (3, 4, 5)), ((13, 7, 5), (2, 3, 2))])
@pytest.mark.parametrize("order", ["C", "F"])
def test_compiled_sweep_matches_the_direct_route(shape, ranks, dtype, order, rng, monkeypatch):
    """10 iterations from the same HOSVD start, C and F order: every iteration's fit equal to the direct route's
    to the fit's rounding, the factors orthonormal bases of the same subspaces, the core the projection on them;
    the result is recorded as the compiled sweep's."""
    X = np.asarray(planted_tucker(rng, shape, ranks, np.float64, noise=1e-2).astype(dtype), order=order)
    keep = X.copy()
    a = _hooi(X, ranks, True, monkeypatch, init="hosvd", max_iter=10, tol=0)
    b = _hooi(X, ranks, False, monkeypatch, init="hosvd", max_iter=10, tol=0)
    np.testing.assert_array_equal(X, keep)  # the input unchanged
    assert a.plans[0].kind == "ttmc_compiled" and b.plans[0].kind == "ttmc" and a.passes_per_iteration == 2
    eps = _eps(dtype)
    # (the fit 1 - sqrt(1 - (|G|/|X|)^2) turns eps-level errors of the core's norm into eps / (1 - fit))
    tol = 1e2 * eps / (1 - b.fit)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=tol)
    for U, V in zip(a.factors, b.factors, strict=True):
        assert U.dtype == dtype and U.flags.c_contiguous
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e2 * eps)
        _same_subspace(U, V, 1e3 * eps)
    assert a.core.dtype == dtype
    core = np.einsum("ijk,ia,jb,kc->abc", X.astype(np.float64), *(U.astype(np.float64) for U in a.factors))
    np.testing.assert_allclose(a.core, core, rtol=0, atol=1e2 * eps * np.abs(core).max())


@pytest.mark.parametrize(("shape", "ranks"), [((10, 10, 10), (3, 3, 3)), ((20, 20, 20), (5, 5, 5)),
                                              ((30, 30, 30), (5, 5, 5))])
def test_one_compiled_sweep_is_the_reference_iteration(shape, ranks, rng, monkeypatch):
    """One sweep from given factors against HOOI written out with einsum and numpy's SVD (each mode's factor
    the leading left singular vectors of the projection on the others' newest factors, in mode order)."""
    X = planted_tucker(rng, shape, ranks, np.float64, noise=1e-2)
    start = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    got = _hooi(X, ranks, True, monkeypatch, init=[U.copy() for U in start], max_iter=1, tol=0)
    U = list(start)
    specs = ("ijk,jb,kc->ibc", "ijk,ia,kc->jac", "ijk,ia,jb->kab")
    for n in range(3):
        Y = np.einsum(specs[n], X, *(U[m] for m in range(3) if m != n)).reshape(shape[n], -1)
        U[n] = np.linalg.svd(Y, full_matrices=False)[0][:, :ranks[n]]
    for A, B in zip(got.factors, U, strict=True):
        _same_subspace(A, B, 1e-12)
    core = np.einsum("ijk,ia,jb,kc->abc", X, *U)
    assert got.fit_history[0] == pytest.approx(1 - np.sqrt(1 - (np.linalg.norm(core) / np.linalg.norm(X)) ** 2),
                                               abs=1e-12)


def test_same_bits_on_every_call_and_for_a_memory_map(rng, tmp_path):
    """The same call twice, and on the same values mapped from a .npy file: the same bits."""
    from tuckerkit.io import load_tensor

    X = planted_tucker(rng, (20, 20, 20), (5, 5, 5), np.float64, noise=1e-2)
    np.save(tmp_path / "x.npy", X)
    M = load_tensor(tmp_path / "x.npy", mmap=True)
    runs = [tk.hooi(A, 5, max_iter=6, tol=0) for A in (X, X, M)]
    assert all(r.plans[0].kind == "ttmc_compiled" for r in runs)
    for r in runs[1:]:
        assert r.fit_history == runs[0].fit_history
        np.testing.assert_array_equal(r.core, runs[0].core)
        for U, V in zip(r.factors, runs[0].factors, strict=True):
            np.testing.assert_array_equal(U, V)


@pytest.mark.parametrize("shape", [(20, 20, 20), (30, 30, 30)])
def test_refused_steps_take_lapack_and_the_sweep_goes_on(shape, rng, monkeypatch):
    """A Gaussian tensor (no gap after the r-th pair): the certified iteration refuses each mode, whose factor comes
    from LAPACK's route on the unfolding the call left, the sweep going on from the next mode (the core made
    after the last mode's refusal too); with every step refused, the later sweeps take the direct route. The
    fits equal the direct route's throughout (its steps refuse alike)."""
    X = rng.standard_normal(shape)
    tried = []
    real = _small_hooi.SmallSweep._certified
    monkeypatch.setattr(_small_hooi.SmallSweep, "_certified", lambda self, n: tried.append((n, out := real(self, n)))
                        or out)
    a = _hooi(X, 5, True, monkeypatch, init="hosvd", max_iter=8, tol=0)
    assert tried == [(0, False), (1, False), (2, False)] and a.plans[0].kind == "ttmc"
    b = _hooi(X, 5, False, monkeypatch, init="hosvd", max_iter=8, tol=0)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e3 * _eps(np.float64))
    for U, V in zip(a.factors, b.factors, strict=True):
        _same_subspace(U, V, 1e-8)
    one = _hooi(X, 5, True, monkeypatch, init="hosvd", max_iter=1, tol=0)  # (the core after mode 2's LAPACK step)
    core = np.einsum("ijk,ia,jb,kc->abc", X, *one.factors)
    np.testing.assert_allclose(one.core, core, rtol=0, atol=1e-13 * np.abs(core).max())
    assert one.fit_history[0] == pytest.approx(b.fit_history[0], abs=1e3 * _eps(np.float64))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("shape", "ranks"), [((10, 10, 10, 10), (3, 3, 3, 3)), ((8, 9, 10, 11), (2, 3, 2, 3)),
                                              ((14, 14, 14, 14), (3, 3, 3, 3)), ((30, 6, 7, 8), (4, 2, 3, 2))])
def test_four_way_sweeps_match_the_direct_route(shape, ranks, dtype, rng, monkeypatch):
    """4-way tensors in C and F order: the same comparison as the 3-way one (fits to the fit's rounding, the same
    subspaces, the core the projection: the F-ordered run's core axes come back in order)."""
    core = rng.standard_normal(ranks)
    Us = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    X = np.einsum("abcd,ia,jb,kc,ld->ijkl", core, *Us)
    E = rng.standard_normal(shape)
    X = (X + 1e-2 * np.linalg.norm(X) / np.linalg.norm(E) * E).astype(dtype)
    a = _hooi(X, ranks, True, monkeypatch, init="hosvd", max_iter=8, tol=0)
    b = _hooi(X, ranks, False, monkeypatch, init="hosvd", max_iter=8, tol=0)
    assert a.plans[0].kind == "ttmc_compiled" and b.plans[0].kind == "ttmc"
    eps = _eps(dtype)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * eps / (1 - b.fit))
    for U, V in zip(a.factors, b.factors, strict=True):
        assert U.dtype == dtype
        _same_subspace(U, V, 1e3 * eps)
    ref = np.einsum("ijkl,ia,jb,kc,ld->abcd", X.astype(np.float64), *(U.astype(np.float64) for U in a.factors))
    np.testing.assert_allclose(a.core, ref, rtol=0, atol=1e2 * eps * np.abs(ref).max())
    f = _hooi(np.asfortranarray(X), ranks, True, monkeypatch, init="hosvd", max_iter=8, tol=0)
    assert f.plans[0].kind == "ttmc_compiled"
    np.testing.assert_allclose(f.fit_history, b.fit_history, rtol=0, atol=1e2 * eps / (1 - b.fit))
    for U, V in zip(f.factors, b.factors, strict=True):
        _same_subspace(U, V, 1e3 * eps)
    ref = np.einsum("ijkl,ia,jb,kc,ld->abcd", X.astype(np.float64), *(U.astype(np.float64) for U in f.factors))
    np.testing.assert_allclose(f.core, ref, rtol=0, atol=1e2 * eps * np.abs(ref).max())


def test_one_four_way_sweep_is_the_reference_iteration(rng, monkeypatch):
    """One 4-way sweep from given factors against HOOI written out with einsum and numpy's SVD."""
    shape, ranks = (9, 10, 11, 12), (2, 3, 2, 3)
    X = rng.standard_normal(shape) + np.einsum("a,i,j,k,l->ijkl", [5.0], *(rng.standard_normal(n) for n in shape))
    start = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    got = _hooi(X, ranks, True, monkeypatch, init=[U.copy() for U in start], max_iter=1, tol=0)
    assert got.plans[0].kind == "ttmc_compiled"
    U = list(start)
    specs = ("ijkl,jb,kc,ld->ibcd", "ijkl,ia,kc,ld->jacd", "ijkl,ia,jb,ld->kabd", "ijkl,ia,jb,kc->labc")
    for n in range(4):
        Y = np.einsum(specs[n], X, *(U[m] for m in range(4) if m != n)).reshape(shape[n], -1)
        U[n] = np.linalg.svd(Y, full_matrices=False)[0][:, :ranks[n]]
    for A, B in zip(got.factors, U, strict=True):
        _same_subspace(A, B, 1e-10)


def test_planted_sweeps_certify_every_step(rng, monkeypatch):
    """On a planted tensor every step of every sweep is certified by the compiled iteration (no LAPACK)."""
    X = planted_tucker(rng, (30, 30, 30), (5, 5, 5), np.float64, noise=1e-2)
    tried = []
    real = _small_hooi.SmallSweep._certified
    monkeypatch.setattr(_small_hooi.SmallSweep, "_certified", lambda self, n: tried.append(out := real(self, n))
                        or out)
    assert tk.hooi(X, 5, init="hosvd", max_iter=5, tol=0).plans[0].kind == "ttmc_compiled"
    assert tried == [True] * 15


def test_convergence_and_callback_as_the_direct_route(rng, monkeypatch):
    """A default call (ST-HOSVD start, tol): the same number of iterations, convergence flag and callback
    states as the direct route; a callback that stops ends the compiled loop too."""
    X = planted_tucker(rng, (16, 17, 18), (3, 4, 3), np.float64, noise=1e-2)
    runs = []
    for compiled in (True, False):
        seen = []
        T = _hooi(X, (3, 4, 3), compiled, monkeypatch, callback=lambda s, seen=seen: seen.append(s.iteration))
        runs.append((T.n_iter, T.converged, seen))
    assert runs[0] == runs[1] and runs[0][1]
    monkeypatch.setattr(_tucker, "_SMALL_SWEEPS", True)
    T = tk.hooi(X, (3, 4, 3), tol=0, max_iter=50, callback=lambda s: s.iteration == 3)
    assert T.n_iter == 3 and T.plans[0].kind == "ttmc_compiled"


def test_where_it_does_not_apply_the_direct_route_runs(rng):
    """A strided view, the randomized SVD, a 5-way tensor, a tensor beyond the work bound and a float32 tensor
    with missing data keep the direct route; fixed factors and a float64 tensor's missing data take the compiled
    one."""
    X = planted_tucker(rng, (12, 13, 14), (3, 3, 3), np.float64, noise=1e-2)
    mask = rng.random(X.shape) > 0.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [tk.hooi(np.transpose(X, (1, 0, 2)), 3, max_iter=2, tol=0),
                 tk.hooi(X, 3, max_iter=2, tol=0, svd="randomized", random_state=0),
                 tk.hooi(rng.standard_normal((6, 6, 6, 6, 6)), 2, max_iter=2, tol=0),
                 tk.hooi(rng.standard_normal((40, 40, 40)), 10, max_iter=2, tol=0),
                 tk.hooi(np.where(mask, X, np.nan).astype(np.float32), 3, mask=mask, max_iter=2, tol=0)]
        taken = [tk.hooi(X, 3, max_iter=2, tol=0, init=tk.hooi(X, 3, max_iter=1, tol=0), fixed_factors=[1]),
                 tk.hooi(np.where(mask, X, np.nan), 3, mask=mask, max_iter=2, tol=0)]
    assert [c.plans[0].kind for c in cases] == ["ttmc"] * 5
    assert [c.plans[0].kind for c in taken] == ["ttmc_compiled"] * 2
    assert tk.hooi(X, 3, max_iter=2, tol=0).plans[0].kind == "ttmc_compiled"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(("shape", "ranks"), [((10, 11, 12), (3, 3, 3)), ((20, 20, 20), (5, 4, 5)),
                                              ((8, 9, 7, 6), (3, 3, 3, 3))])
def test_fixed_factors_and_missing_data_match_the_direct_route(shape, ranks, order, dtype, rng, monkeypatch):
    """Fixed factors (the first, a middle and the last mode) and missing data (30 %, float64: the E step refills in
    place the array the compiled sweep reads; float32 keeps the direct route) on the compiled sweep: a fixed
    factor comes back exactly as given, the fits follow the direct route's to ``100 eps / (1 - fit)``."""
    N = len(shape)
    core = rng.standard_normal(ranks)
    Us = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    X = tk.TuckerTensor(core, tuple(Us)).to_dense()
    E = rng.standard_normal(shape)
    X = np.asarray((X + 1e-2 * np.linalg.norm(X) / np.linalg.norm(E) * E).astype(dtype), order=order)
    start = [np.linalg.qr(U + 0.3 * rng.standard_normal(U.shape))[0].astype(dtype) for U in Us]
    mask = rng.random(shape) > 0.3
    eps = _eps(dtype)
    runs = [({"fixed_factors": [m]}, X) for m in sorted({0, N // 2, N - 1})]
    if dtype == np.float64:
        runs += [({"mask": mask}, np.where(mask, X, np.nan)), ({"mask": mask, "fixed_factors": [1]},
                                                               np.where(mask, X, np.nan))]
    swept = []
    real = _small_hooi.SmallSweep.sweep
    monkeypatch.setattr(_small_hooi.SmallSweep, "sweep", lambda self, *a, **k: swept.append(1) or real(self, *a, **k))
    for kw, Xin in runs:
        Xin = np.asarray(Xin, order=order)
        before = len(swept)
        a = _hooi(Xin, ranks, True, monkeypatch, init=[U.copy() for U in start], max_iter=6, tol=0, **kw)
        assert len(swept) > before  # (the compiled sweep ran: from the first sweep on)
        b = _hooi(Xin, ranks, False, monkeypatch, init=[U.copy() for U in start], max_iter=6, tol=0, **kw)
        assert b.plans[0].kind == "ttmc" and a.n_iter == b.n_iter == 6
        for m in kw.get("fixed_factors", []):
            assert np.array_equal(a.factors[m], start[m])
        np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * eps / (1 - b.fit))


@pytest.mark.parametrize("shape", [(10, 9), (9, 10), (12, 12), (30, 4)])
def test_warm_jacobi_finds_the_cold_pairs(shape, rng):
    """tiny_left_singular_warm from the identity, from the previous call's eigenvectors and from an unrelated
    orthogonal start: the same leading pairs as the cold kernel to rounding, its eigenvectors orthonormal."""
    from tuckerkit.engine._tiny_kernels import tiny_left_singular, tiny_left_singular_warm

    I, P = shape  # noqa: E741
    r = 3
    M = rng.standard_normal(shape) * np.geomspace(1, 1e-3, P)[None, :]
    U0, w0 = np.empty((I, r)), np.empty(r)
    assert tiny_left_singular(M, r, U0, w0)
    n = min(I, P)
    starts = [(np.zeros((n, n)), False), (None, True), (np.linalg.qr(rng.standard_normal((n, n)))[0], True)]
    V = np.zeros((n, n))
    for V0, warm in starts:
        if V0 is not None:
            V = V0.copy()
        U, w = np.empty((I, r)), np.empty(r)
        assert tiny_left_singular_warm(M, r, U, w, V, warm)
        np.testing.assert_allclose(w, w0, rtol=0, atol=1e2 * _eps(np.float64) * w0[0])
        _same_subspace(U, U0, 1e-10)
        np.testing.assert_allclose(V.T @ V, np.eye(n), atol=1e-13)


def test_same_bits_for_one_or_more_blas_threads_and_workers(rng):
    """The products on one BLAS thread whatever the caller set, the kernels serial: the same bits under
    ``threadpool_limits(1)`` (tuckerkit serial too) as with every core."""
    from threadpoolctl import threadpool_limits

    X = planted_tucker(rng, (30, 30, 30), (5, 5, 5), np.float64, noise=1e-2)
    a = tk.hooi(X, 5, max_iter=4, tol=0)
    with threadpool_limits(1):
        b = tk.hooi(X, 5, max_iter=4, tol=0)
    assert a.plans[0].kind == b.plans[0].kind == "ttmc_compiled"
    np.testing.assert_array_equal(a.core, b.core)
    for U, V in zip(a.factors, b.factors, strict=True):
        np.testing.assert_array_equal(U, V)


def test_long_runs_keep_the_factors_orthonormal():
    """The compiled factor step's warm start (the previous sweep's Jacobi eigenvectors) is re-orthonormalized:
    carried over hundreds of sweeps without it, the factors drifted to 674 ulps from orthonormal at 100
    iterations (858 at 500) on a 12 x 11 x 10 Gaussian tensor at ranks (7, 6, 5)."""
    import warnings

    X = np.random.default_rng(0).standard_normal((12, 11, 10))
    eps = np.finfo(np.float64).eps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        for it in (100, 500):
            T = tk.hooi(X, [7, 6, 5], tol=0, max_iter=it)
            for U in T.factors:
                assert np.abs(U.T @ U - np.eye(U.shape[1])).max() <= 32 * eps
