"""BLAS inside HOOI's and CP-ALS's iterations: every BLAS/LAPACK call of the loop (Grams, the factor step,
the solve, the fit, the partial contractions) runs with BLAS at one thread, so OpenBLAS's worker threads are
never woken inside the loop (an idle OpenBLAS worker spins ~0.1 s after each multi-threaded call and would
take the second core from tuckerkit's two-worker kernels), and the caller's thread count comes back exactly
after the call."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import planned_only
from threadpoolctl import threadpool_info, threadpool_limits

import tuckerkit as tk
import tuckerkit.decomposition._cp as cp_mod
import tuckerkit.decomposition._small_cp as small_cp_mod
import tuckerkit.decomposition._tucker as tucker_mod
import tuckerkit.engine._direct as direct_mod
import tuckerkit.engine._subspace as subspace_mod
import tuckerkit.engine._sweeps as sweeps_mod
from tuckerkit.engine import ExecutionPolicy


def _blas_threads():
    return {d["filepath"]: d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}


def _probe(monkeypatch, seen, targets):
    """Wrap each ``(module, name)`` so that every call records the BLAS thread counts in force."""
    for mod, name in targets:
        f = getattr(mod, name)

        def wrapped(*a, _f=f, _name=name, **k):
            seen.append((_name, frozenset(_blas_threads().values())))
            return _f(*a, **k)

        monkeypatch.setattr(mod, name, wrapped)


CP_CALLS = [(cp_mod, "cp_factor_update"), (cp_mod, "cp_sweep_update"), (cp_mod, "spd_solve"), (cp_mod, "_gram"),
            (cp_mod, "_cp_fit"), (cp_mod, "cp_fit_error"), (sweeps_mod, "contract"), (sweeps_mod, "execute")]
HOOI_CALLS = [(tucker_mod, "_subspace"), (tucker_mod, "frobenius_norm"), (subspace_mod, "eigh_desc"),
              (sweeps_mod, "dense_multi_ttm")]
#: the direct route's (engine/_direct.py): its recursions run inside its own pin and the call's
DIRECT_CALLS = [(direct_mod, "_mttkrp_rec"), (direct_mod, "_ttmc_rec"), (direct_mod, "_ttm_rows")]


#: CP-ALS's compiled sweep (decomposition/_small_cp.py): its products run inside its own pin and the call's
SMALL_CP_CALLS = [(small_cp_mod, "_c")]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("method", "route"), [("cp_als", "planned"), ("cp_als", "direct"), ("cp_als", "compiled"),
                                               ("hooi", "planned"), ("hooi", "direct")])
def test_iteration_blas_calls_run_at_one_thread_and_the_caller_setting_is_restored(monkeypatch, rng, dtype,
                                                                                  method, route):
    import scipy.linalg  # noqa: F401  (scipy's wheel brings its own OpenBLAS: both are held)

    X = rng.standard_normal((61, 50, 43)).astype(dtype)  # (4 * size * rank: 3.1 MFlop at rank 6, direct)
    assert direct_mod.direct_applies(X, 6)
    if route == "planned":
        planned_only(monkeypatch)
    if route == "direct":  # (CP-ALS's compiled sweep off: the direct route's recursions)
        monkeypatch.setattr(cp_mod, "_SMALL_SWEEPS", False)
    seen: list = []
    _probe(monkeypatch, seen, (CP_CALLS if method == "cp_als" else HOOI_CALLS) + DIRECT_CALLS + SMALL_CP_CALLS)
    with threadpool_limits(2, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        before = _blas_threads()
        assert set(before.values()) == {2}
        if method == "cp_als":
            tk.cp_als(X, 6, tol=0, max_iter=3)
        else:
            tk.hooi(X, (5, 4, 6), tol=0, max_iter=3)
        after = _blas_threads()
    assert after == before  # the caller's setting, exactly
    names = {name for name, _ in seen}
    expected = ({"_gram", "cp_fit_error"} if method == "cp_als" else {"_subspace", "frobenius_norm"})
    if method == "cp_als":
        expected |= {"_c"} if route == "compiled" else {"cp_sweep_update"}
    expected |= ({"execute"} if method == "cp_als" else {"dense_multi_ttm"}) if route == "planned" else \
        set() if route == "compiled" else ({"_mttkrp_rec"} if method == "cp_als" else {"_ttmc_rec", "_ttm_rows"})
    assert expected <= names  # the probes sit on the loop's calls
    assert not names & {"execute", "dense_multi_ttm", "_mttkrp_rec", "_ttmc_rec", "_c"} - expected  # the one route
    bad = [(name, counts) for name, counts in seen if counts != {1}]
    assert not bad, f"BLAS calls inside the iteration ran with more than one thread: {bad[:5]}"


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
@pytest.mark.parametrize("route", ["planned", "direct"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_iteration_same_bits_with_one_and_two_workers_and_blas_threads(monkeypatch, rng, dtype, route):
    """The caller's BLAS setting (1 or 2 threads) and the policy's workers (1 or 2) change no bit."""
    import tuckerkit.decomposition._entry as entry

    X = rng.standard_normal((57, 64, 45)).astype(dtype)
    assert direct_mod.direct_applies(X, 6)  # (4 * size * rank: 3.9 MFlop)
    if route == "planned":
        planned_only(monkeypatch)
    runs = []
    for blas, workers in ((2, 2), (1, 1), (2, 1), (1, 2)):
        monkeypatch.setattr(entry, "default_policy", lambda w=workers: ExecutionPolicy(workers=w))
        with threadpool_limits(blas, user_api="blas"):
            runs.append((tk.hooi(X, (5, 6, 4), tol=0, max_iter=3), tk.cp_als(X, 5, tol=0, max_iter=3)))
    ref = runs[0]
    for T, C in runs[1:]:
        np.testing.assert_array_equal(T.core, ref[0].core)
        for U, V in zip(T.factors + C.factors, ref[0].factors + ref[1].factors, strict=True):
            np.testing.assert_array_equal(U, V)
        np.testing.assert_array_equal(C.weights, ref[1].weights)


@pytest.mark.parametrize("n", [10_001, 12_000, 100_000, 240_000])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_long_dot_products_same_bits_for_any_caller_blas_threads(rng, n, dtype):
    """A dot product of fewer than PIN_FLOPS flops but more than DOT_SERIAL_MAX entries is held to one BLAS
    thread: OpenBLAS's threaded dot adds per-thread partial sums (other bits) and wakes its idle worker."""
    a = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    with threadpool_limits(1, user_api="blas"):
        one = tk.contract("i,i->", a, b)
        one_batched = tk.contract("zi,zi->z", a.reshape(1, n), b.reshape(1, n))
    with threadpool_limits(2, user_api="blas"):
        two = tk.contract("i,i->", a, b)
        two_batched = tk.contract("zi,zi->z", a.reshape(1, n), b.reshape(1, n))
        assert set(_blas_threads().values()) == {2}  # restored
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one_batched, two_batched)
    ref = np.dot(a.astype(np.float64), b.astype(np.float64))
    tol = 4 * n * np.finfo(dtype).eps * float(np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert abs(float(one) - ref) <= tol


@pytest.mark.parametrize("shape", [(30, 500, 1), (50, 190, 1), (1, 30, 500)])
def test_small_grams_held_to_one_blas_thread(monkeypatch, rng, shape):
    """A Gram of n^2 k >= SYRK_PIN_MADDS multiply-adds (below PIN_FLOPS) runs with BLAS held to one thread
    (OpenBLAS threads such a SYRK and its worker then spins ~0.1 s); the caller's setting comes back."""
    import tuckerkit.engine._gram as gram_mod

    X = rng.standard_normal(shape)
    mode = 0 if shape[0] > 1 else 1
    entered: list = []
    real = gram_mod.blas_pinned

    def probe():
        entered.append(True)
        return real()

    monkeypatch.setattr(gram_mod, "blas_pinned", probe)
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        G = tk.gram(X, mode)
        assert _blas_threads() == before
    assert entered
    U = np.moveaxis(X, mode, 0).reshape(X.shape[mode], -1)
    np.testing.assert_allclose(G, U @ U.T, rtol=1e-12, atol=1e-12 * float(np.abs(U).max() ** 2 * U.shape[1]))
