"""CP-ALS's compiled sweep of small dense tensors (tuckerkit/decomposition/_small_cp.py): where it is taken, its
agreement with the direct route and with an einsum + solve reference sweep, its repeatable bits, the least-squares
fallback where a V is not definite, zeros, and what it leaves alone (the input, the init, a callback's arrays)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.decomposition import _cp as cp_mod
from tuckerkit.decomposition import _small_cp
from tuckerkit.decomposition._small_cp import SMALL_CP_MAX_ELEMS, SMALL_CP_MAX_WORK, small_cp_applies

pytestmark = pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")

#: a shape and rank of each order the compiled sweep covers (two, three and four modes)
SHAPES = {2: ((9, 7), 3), 3: ((10, 11, 12), 4), 4: ((6, 7, 5, 8), 3)}


def _eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def planted(rng, shape, rank, dtype=np.float64, order="C", noise=1e-2):
    """A CP tensor of ``rank`` (Gaussian factors, unit weights) plus Gaussian noise of relative size ``noise``, in
    ``order``; and its factors."""
    factors = [rng.standard_normal((n, rank)) for n in shape]
    X = tk.CPTensor(np.ones(rank), tuple(factors)).to_dense()
    E = rng.standard_normal(shape)
    X = X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E
    return np.asarray(X.astype(dtype), order=order), factors


def near_start(rng, factors, spread=1.0):
    """A start of the planted factors plus Gaussian noise of entries ``spread`` (as large as the factors' own at 1:
    the first iterations do real work, the run still goes to the planted model)."""
    rank = factors[0].shape[1]
    return tk.CPTensor(np.ones(rank), tuple(U + spread * rng.standard_normal(U.shape) for U in factors))


def _cp(X, rank, compiled: bool, monkeypatch, **kw):
    """``tk.cp_als`` with the compiled sweep allowed (``compiled``) or turned off (the direct route)."""
    monkeypatch.setattr(cp_mod, "_SMALL_SWEEPS", compiled)
    return tk.cp_als(X, rank, **kw)


def _rel(A, B) -> float:
    """``||A - B|| / ||B||`` in float64."""
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    return float(np.linalg.norm(A - B) / np.linalg.norm(B))


def _unit(U):
    """``U``'s columns scaled to unit norm, in float64."""
    U = np.asarray(U, np.float64)
    return U / np.linalg.norm(U, axis=0)


@pytest.fixture(params=["blas", "kernels"])
def products(request, monkeypatch):
    """The compiled sweep's products with the tensor by BLAS (the test shapes are below SMALL_CP_KERNEL_WORK) or
    by the engine's small-rank kernels at any size (``kernel_products`` forced)."""
    if request.param == "kernels":
        monkeypatch.setattr(_small_cp, "kernel_products", lambda X, rank: True)
    return request.param


def _same_bits(a, b) -> None:
    assert a.fit_history == b.fit_history
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.weights.dtype == b.weights.dtype
    for U, V in zip(a.factors, b.factors, strict=True):
        assert U.dtype == V.dtype
        np.testing.assert_array_equal(U, V)


# ---------------------------------------------------------------------------------------------------------------
# 1. where the compiled sweep is taken


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N", [2, 3, 4])
def test_small_dense_tensors_take_the_compiled_sweep(N, dtype, order, rng):
    """2, 3 and 4 modes, float32 and float64, C and F order: the result is recorded as the compiled sweep's (two
    passes over the tensor per iteration), in the tensor's dtype."""
    shape, R = SHAPES[N]
    X, _ = planted(rng, shape, R, dtype, order)
    res = tk.cp_als(X, R, max_iter=3, tol=0)
    assert [p.kind for p in res.plans] == ["mttkrp_compiled"] and res.passes_per_iteration == 2
    assert res.weights.dtype == dtype and all(U.dtype == dtype for U in res.factors)
    assert small_cp_applies(X, R)


def test_a_memory_mapped_npy_takes_the_compiled_sweep(rng, tmp_path):
    """A read-only ``np.memmap`` from ``np.load(mmap_mode="r")`` is a plain host array to the route."""
    X, _ = planted(rng, (10, 11, 12), 4)
    np.save(tmp_path / "x.npy", X)
    M = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert type(M) is np.memmap and not M.flags.writeable
    assert tk.cp_als(M, 4, max_iter=3, tol=0).plans[0].kind == "mttkrp_compiled"


def test_where_it_does_not_apply_another_route_runs(rng):
    """A rank above 32, five modes, a strided view, complex data and a tensor beyond SMALL_CP_MAX_ELEMS take
    another route; the plain call on the same tensor takes the compiled one, and so do fixed modes, missing data
    and non-negative CP (their MTTKRPs alone: :meth:`SmallCPSweep.mttkrp_sweep`, or the fused sweep with the E
    step)."""
    X, _ = planted(rng, (10, 11, 12), 3)
    start = [rng.standard_normal((n, 3)) for n in X.shape]
    big = rng.standard_normal((70, 70, 70))
    assert big.size > SMALL_CP_MAX_ELEMS
    taken = {
        "fixed_modes": tk.cp_als(X, 3, init=start, fixed_modes=[1], max_iter=2, tol=0),
        "mask": tk.cp_als(X, 3, mask=np.ones(X.shape, bool), max_iter=2, tol=0),
        "non_negative_cp": tk.non_negative_cp(np.abs(X), 3, max_iter=2, tol=0),
        "non_negative_cp mu": tk.non_negative_cp(np.abs(X), 3, method="mu", max_iter=2, tol=0),
    }
    assert all(res.plans[0].kind == "mttkrp_compiled" for res in taken.values()), taken
    cases = {
        "rank 33": tk.cp_als(X, 33, max_iter=2, tol=0),
        "5 modes": tk.cp_als(rng.standard_normal((4, 5, 3, 4, 5)), 2, max_iter=2, tol=0),
        "view": tk.cp_als(X[:, ::2], 3, max_iter=2, tol=0),
        "complex128": tk.cp_als(X.astype(np.complex128), 3, max_iter=2, tol=0),
        "beyond the bound": tk.cp_als(big, 2, max_iter=2, tol=0),
    }
    kinds = {name: res.plans[0].kind for name, res in cases.items()}
    assert all(k != "mttkrp_compiled" for k in kinds.values()), kinds
    assert tk.cp_als(X, 3, max_iter=2, tol=0).plans[0].kind == "mttkrp_compiled"


def test_small_cp_applies_at_its_bounds(monkeypatch):
    """Each bound taken exactly is within, one past it is not: the elements, the work ``size * rank`` (both with the
    real constants and with small ones patched in), the rank (32, the fused update's), the Gram's work; and the
    orders, dtypes and layouts it refuses."""
    e = np.empty
    # the real constants: 64^3 = SMALL_CP_MAX_ELEMS elements; at rank 16 size * rank is SMALL_CP_MAX_WORK
    assert 64 ** 3 == SMALL_CP_MAX_ELEMS and 64 ** 3 * 16 == SMALL_CP_MAX_WORK
    assert small_cp_applies(e((64, 64, 64)), 16)
    assert not small_cp_applies(e((64, 64, 64)), 17)
    assert not small_cp_applies(e((5, (SMALL_CP_MAX_ELEMS + 1) // 5)), 1)  # (5 * 52429 = 2^18 + 1 elements)
    assert small_cp_applies(e((4, SMALL_CP_MAX_ELEMS // 4)), 1)
    # the rank: 32 within, 33 not; the Gram's work max(shape) * R (R + 1) / 2 = 124 * 528 <= 2^16 < 125 * 528
    assert small_cp_applies(e((124, 4)), 32)
    assert not small_cp_applies(e((125, 4)), 32)
    assert not small_cp_applies(e((10, 11)), 33)
    assert not small_cp_applies(e((10, 11)), 0)
    # small bounds patched in: size * rank = 7 * 11 * 13 = 1001
    monkeypatch.setattr(_small_cp, "SMALL_CP_MAX_WORK", 1001)
    assert small_cp_applies(e((7, 11)), 13)
    monkeypatch.setattr(_small_cp, "SMALL_CP_MAX_WORK", 1000)
    assert not small_cp_applies(e((7, 11)), 13)
    assert small_cp_applies(e((7, 11)), 12)
    monkeypatch.setattr(_small_cp, "SMALL_CP_MAX_ELEMS", 77)
    assert small_cp_applies(e((7, 11)), 2)
    monkeypatch.setattr(_small_cp, "SMALL_CP_MAX_ELEMS", 76)
    assert not small_cp_applies(e((7, 11)), 2)
    monkeypatch.undo()
    # orders, dtypes, layouts
    assert small_cp_applies(e((3, 4), order="F"), 2) and small_cp_applies(e((3, 4, 5, 6), np.float32), 2)
    assert not small_cp_applies(e(12), 2)
    assert not small_cp_applies(e((3, 4, 5, 6, 2)), 2)
    for dt in (np.complex128, np.complex64, np.float16, np.int64):
        assert not small_cp_applies(e((3, 4, 5), dt), 2)
    assert not small_cp_applies(e((6, 8, 5))[:, ::2], 2)
    assert not small_cp_applies(e((0, 4, 5)), 2)


# ---------------------------------------------------------------------------------------------------------------
# 2. the same iterations as the direct route


def _record_jumps(monkeypatch):
    """Wrap the line search's attempt: the returned list gets ``(iteration, fit, the jumped model's fit)`` of each
    jump tried (kept where the second is larger)."""
    seen = []
    real = cp_mod._Jumps.attempt

    def attempt(self, it, before, factors, weights, fixed, normalize, fit, fit_of, renorm=None):
        def judged(*args):
            new = fit_of(*args)
            seen.append((it, fit, new))
            return new

        return real(self, it, before, factors, weights, fixed, normalize, fit, judged, renorm)

    monkeypatch.setattr(cp_mod._Jumps, "attempt", attempt)
    return seen


@pytest.mark.parametrize(("linesearch", "normalize"), list(itertools.product([True, False], [True, False])))
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N", [2, 3, 4])
def test_compiled_sweep_matches_the_direct_route(N, dtype, order, linesearch, normalize, rng, monkeypatch, products):
    """8 iterations from the same start (planted rank-R tensors at 1 % noise): every iteration's fit equal to the
    direct route's to the fit's rounding, the line search's jumps (iterations 6 and 8) judged alike, and the final
    models (weights, factors, reconstruction) equal to rounding, in the tensor's dtype; the routes recorded as
    such."""
    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype, order)
    start = near_start(rng, factors)
    kw = dict(init=start, max_iter=8, tol=0, linesearch=linesearch, normalize=normalize)
    jumps = _record_jumps(monkeypatch)
    a = _cp(X, R, True, monkeypatch, **kw)
    ja = jumps[:]
    jumps.clear()
    b = _cp(X, R, False, monkeypatch, **kw)
    jb = jumps[:]
    assert a.plans[0].kind == "mttkrp_compiled" and b.plans[0].kind == "mttkrp"
    assert a.n_iter == b.n_iter == 8
    eps = _eps(dtype)
    # The fit is 1 - sqrt(err2) with err2 = 1 - 2 <X, X_hat> / |X|^2 + |X_hat|^2 / |X|^2: eps-sized errors of the
    # terms become eps / (1 - fit) in the fit (measured differences <= 4.2 such units over 13 seeds).
    unit = eps / (1 - b.fit)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * unit)
    # (the weights' dtype after a kept jump: test_float32_weights_stay_float32_after_kept_jumps)
    assert all(U.dtype == dtype and U.flags.c_contiguous for U in a.factors)
    # A jump is kept when it raises the fit. Once ALS has converged to the fit's rounding (float32 does within
    # 8 iterations) that gain is itself rounding, and the two routes may judge it either way: the models then
    # differ by the jump's step (the fits, flat there, do not). Clear decisions must agree; where one was judged
    # differently the models are not compared (with the fixture's seed: the 2-way float32 runs, margins 0.7
    # units). test_kept_jumps_match_the_direct_route compares models after jumps judged by wide margins.
    assert [j[0] for j in ja] == [j[0] for j in jb] == ([6, 8] if linesearch else [])
    alike = True
    for (_, fa, na), (_, fb, nb) in zip(ja, jb, strict=True):
        if (na > fa) != (nb > fb):
            alike = False
            assert max(abs(na - fa), abs(nb - fb)) <= 1e2 * unit
    if not alike:
        return
    # the models themselves (measured <= 41 eps relative, weights 29 eps, over 13 seeds): the same iterates
    assert _rel(a.to_dense(), b.to_dense()) <= 1e2 * eps
    # (the weights, column norms of the model, carry the fit's conditioning as the fits do: 2.7e-14 relative seen
    # with OpenBLAS's Haswell kernels, float64)
    np.testing.assert_allclose(a.weights, b.weights, rtol=1e2 * unit)
    # each factor's columns up to their scale (without normalize, the scale moves between the modes' columns
    # along a direction the model does not see: measured up to 240 eps32 in the factors, 3 eps in the model);
    # the directions carry the CP problem's own condition (measured up to 150 eps over 13 seeds)
    for U, V in zip(a.factors, b.factors, strict=True):
        np.testing.assert_allclose(_unit(U), _unit(V), rtol=0, atol=1e3 * eps)
    if normalize:
        for U in a.factors:
            np.testing.assert_allclose(np.linalg.norm(U.astype(np.float64), axis=0), 1.0, rtol=0, atol=1e2 * eps)
    else:
        assert not (a.weights - 1).any()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kept_jumps_match_the_direct_route(dtype, order, rng, monkeypatch):
    """From a random start ALS is far from converged at iterations 6 and 8, and the line search judges the jumps by
    margins of thousands of the fit's rounding units, keeping at least one (asserted, the same in both routes: the
    comparison is then between the same iterates): the jumped model's unit columns and Grams feed the compiled
    route's next sweep as the direct route's. Every fit and the final model equal to rounding."""
    X, _ = planted(rng, (10, 11, 12), 4, dtype, order)
    jumps = _record_jumps(monkeypatch)
    kw = dict(init="random", random_state=0, max_iter=8, tol=0)
    a = _cp(X, 4, True, monkeypatch, **kw)
    ja = jumps[:]
    jumps.clear()
    b = _cp(X, 4, False, monkeypatch, **kw)
    assert a.plans[0].kind == "mttkrp_compiled" and b.plans[0].kind == "mttkrp"
    eps = _eps(dtype)
    unit = eps / (1 - b.fit)
    for jumped in (ja, jb := jumps[:]):
        assert [it for it, _, _ in jumped] == [6, 8] and all(abs(new - fit) > 1e3 * unit for _, fit, new in jumped)
    kept = [new > fit for _, fit, new in ja]
    assert kept == [new > fit for _, fit, new in jb] and any(kept)  # (the fixture's seed: both kept)
    np.testing.assert_allclose([f for _, f, _ in ja], [f for _, f, _ in jb], rtol=0, atol=1e2 * unit)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * unit)
    # a random start's first iterations (ALS's swamp) amplify rounding: measured <= 88 eps here, 310 eps over 7
    # seeds (the fits <= 61 units)
    assert _rel(a.to_dense(), b.to_dense()) <= 1e3 * eps


@pytest.mark.parametrize("compiled", [True, False])
def test_float32_weights_stay_float32_after_kept_jumps(compiled, rng, monkeypatch):
    """A float32 tensor from a random start (ALS still far from converged at the first jumps: with the fixture's
    seed those of iterations 6 and 8 are kept, by margins far beyond rounding): the weights a callback sees at
    every iteration and the result's are float32, as the factors, on the compiled route as on the direct one."""
    X, _ = planted(rng, (10, 11, 12), 4, np.float32)
    jumps = _record_jumps(monkeypatch)
    seen = []
    res = _cp(X, 4, compiled, monkeypatch, init="random", random_state=0, max_iter=12, tol=0,
              callback=lambda state: seen.append(state.weights.dtype))
    assert res.plans[0].kind == ("mttkrp_compiled" if compiled else "mttkrp")
    assert [it for it, _, _ in jumps] == [6, 8, 10, 12] and any(new > fit for _, fit, new in jumps)
    assert all(U.dtype == np.float32 for U in res.factors)
    assert seen == [np.float32] * 12
    assert res.weights.dtype == np.float32


# ---------------------------------------------------------------------------------------------------------------
# 3. the ALS sweep written out with einsum and numpy's solve


def reference_als(X, start, n_iter):
    """Plain CP-ALS in float64: for each mode in order, the MTTKRP by einsum, V the Hadamard product of the other
    factors' Grams, ``U = M V^-1`` (numpy's solve), its columns' norms into the weights. ``start``: the factors
    (the first one is never read: mode 0 is updated first). Returns the weights, the factors and the fit."""
    X = np.asarray(X, np.float64)
    U = [np.asarray(F, np.float64).copy() for F in start]
    N, R = X.ndim, U[0].shape[1]
    letters = "abcd"[:N]
    w = np.ones(R)
    for _ in range(n_iter):
        for n in range(N):
            others = [m for m in range(N) if m != n]
            spec = letters + "," + ",".join(f"{letters[m]}r" for m in others) + f"->{letters[n]}r"
            M = np.einsum(spec, X, *(U[m] for m in others))
            V = np.ones((R, R))
            for m in others:
                V *= U[m].T @ U[m]
            Un = np.linalg.solve(V, M.T).T
            w = np.linalg.norm(Un, axis=0)
            U[n] = Un / w
    model = np.einsum("r," + ",".join(f"{c}r" for c in letters) + "->" + letters, w, *U)
    return w, U, 1 - np.linalg.norm(X - model) / np.linalg.norm(X)


@pytest.mark.parametrize("n_iter", [1, 3])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("N", [3, 4])
def test_compiled_sweeps_are_the_reference_iteration(N, dtype, order, n_iter, rng, monkeypatch, products):
    """1 and 3 sweeps from a given CP model (its weights go into mode 0's factor, which the first update does not
    read): unit-norm factors and weights equal to plain ALS written out with einsum and solve, in float64 from
    the same float values, and the fit equal to the reference model's. (The start halfway to the planted model:
    from farther, the first 4-way sweeps amplify any rounding ~1000x, whatever computes them.)"""
    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype, order)
    start = near_start(rng, factors, spread=0.5)
    start = tk.CPTensor(np.linspace(1.0, 2.0, R).astype(dtype), tuple(U.astype(dtype) for U in start.factors))
    got = _cp(X, R, True, monkeypatch, init=start, max_iter=n_iter, tol=0, linesearch=False)
    assert got.plans[0].kind == "mttkrp_compiled" and got.n_iter == n_iter
    w, U, fit = reference_als(X, start.factors, n_iter)
    eps = _eps(dtype)
    # rounding in the working dtype, through R x R solves of condition <= 15 and up to 3 sweeps (measured
    # differences <= 6 eps over 13 seeds); the fit's own rounding as in the route comparison (<= 2.6 units)
    tol = 1e2 * eps
    np.testing.assert_allclose(got.weights, w, rtol=tol)
    for A, B in zip(got.factors, U, strict=True):
        np.testing.assert_allclose(A, B, rtol=0, atol=tol)
    assert got.fit == pytest.approx(fit, abs=1e2 * eps / (1 - fit))


# ---------------------------------------------------------------------------------------------------------------
# 4. the same bits


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_same_bits_on_every_call_for_a_memory_map_and_for_any_threads(dtype, rng, tmp_path, products):
    """The default call (SVD start, line search) twice, on the same values mapped from a .npy file, and under
    ``threadpool_limits(1)``: the same bits (weights, factors, every fit)."""
    from threadpoolctl import threadpool_limits

    X, _ = planted(rng, (20, 21, 22), 5, dtype)
    np.save(tmp_path / "x.npy", X)
    M = np.load(tmp_path / "x.npy", mmap_mode="r")
    kw = dict(max_iter=10, tol=0)
    runs = [tk.cp_als(X, 5, **kw), tk.cp_als(X, 5, **kw), tk.cp_als(M, 5, **kw)]
    with threadpool_limits(1):
        runs.append(tk.cp_als(X, 5, **kw))
    assert all(r.plans[0].kind == "mttkrp_compiled" for r in runs)
    for r in runs[1:]:
        _same_bits(r, runs[0])


# ---------------------------------------------------------------------------------------------------------------
# 5. a V that is not definite: the caller's least squares


def _count_spd_solve(monkeypatch):
    """Wrap ``_cp.spd_solve`` (the caller's least squares): the returned list gets each call's mode size."""
    calls = []
    real = cp_mod.spd_solve

    def counted(V, M):
        calls.append(M.shape[0])
        return real(V, M)

    monkeypatch.setattr(cp_mod, "spd_solve", counted)
    return calls


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("N", [2, 3, 4])
def test_kernel_refusing_every_v_hands_each_mode_to_the_caller(N, dtype, order, normalize, rng, monkeypatch):
    """The compiled sweep's definiteness threshold raised so that its kernel refuses every V (``lo > hi * eps * R``
    never holds with eps = 1): each mode of each sweep goes to the caller's update (its own compiled step, whose
    threshold is untouched, solves it), the kernel going on from the next mode every time: the first and second
    steps of two-mode halves, one-mode halves, the last mode (the weights then the caller's). Every iteration's
    fit and the model equal the direct route's to rounding (the same updates on a well-conditioned problem)."""
    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype, order)
    start = near_start(rng, factors, spread=0.5)  # (see the reference test: no early amplification of rounding)
    real_init = _small_cp.SmallCPSweep.__init__

    def refusing(self, X, R):
        real_init(self, X, R)
        self.eps = 1.0

    monkeypatch.setattr(_small_cp.SmallCPSweep, "__init__", refusing)
    modes = []
    real_update = cp_mod.cp_sweep_update

    def counted(grams, n, *args, **kw):
        modes.append(n)
        return real_update(grams, n, *args, **kw)

    monkeypatch.setattr(cp_mod, "cp_sweep_update", counted)
    kw = dict(init=start, max_iter=4, tol=0, linesearch=False, normalize=normalize)
    a = _cp(X, R, True, monkeypatch, **kw)
    assert a.plans[0].kind == "mttkrp_compiled"
    assert modes == list(range(N)) * 4  # every update, in mode order: the caller's
    modes.clear()
    b = _cp(X, R, False, monkeypatch, **kw)
    assert modes == list(range(N)) * 4 and b.plans[0].kind == "mttkrp"
    eps = _eps(dtype)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * eps / (1 - b.fit))
    assert _rel(a.to_dense(), b.to_dense()) <= 1e2 * eps
    assert all(U.dtype == dtype for U in a.factors) and a.weights.dtype == dtype
    if normalize:  # (the weights carry the fit's conditioning, as above)
        np.testing.assert_allclose(a.weights, b.weights, rtol=1e2 * eps / (1 - b.fit))
    else:
        assert not (a.weights - 1).any()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("N", [2, 3])
def test_every_v_singular_takes_least_squares_as_the_direct_route(N, dtype, order, rng, monkeypatch):
    """A start whose first two columns are equal in every mode: every Hadamard product of Grams has two equal rows,
    the least-squares solution keeps the columns equal (to rounding), so every update of both sweeps leaves the
    kernel for spd_solve (the one-mode halves', and the two-mode half's first and second steps); the compiled
    route's result equals the direct route's to rounding, finite. (Two sweeps: the pair of equal columns is a
    saddle that later sweeps may leave, the rounding difference growing ~1000x a sweep on some tensors. Not 4
    modes: there V, the Hadamard product of three Grams whose columns are equal only to rounding, can have a last
    Cholesky pivot of a few eps of the largest, above the definiteness rule's R eps, and either route's kernel
    then solves with it; test_kernel_refusing_every_v_hands_each_mode_to_the_caller covers 4 modes.)"""
    shape, R = SHAPES[N]
    X, _ = planted(rng, shape, R, dtype, order)
    start = []
    for n in shape:
        U = rng.standard_normal((n, R))
        U[:, 1] = U[:, 0]
        start.append(U)
    calls = _count_spd_solve(monkeypatch)
    kw = dict(init=start, max_iter=2, tol=0, linesearch=False)
    runs = []
    for compiled in (True, False):
        calls.clear()
        runs.append(_cp(X, R, compiled, monkeypatch, **kw))
        assert calls == [*shape, *shape]  # every mode of both sweeps, in mode order (so on 13 seeds)
    a, b = runs
    assert a.plans[0].kind == "mttkrp_compiled" and b.plans[0].kind == "mttkrp"
    assert all(np.isfinite(U).all() for U in a.factors) and np.isfinite(a.weights).all()
    eps = _eps(dtype)
    # (measured over 13 seeds: <= 2.2 eps / (1 - fit) and 20 eps)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * eps / (1 - b.fit))
    assert _rel(a.to_dense(), b.to_dense()) <= 1e2 * eps
    # the factors: the two equal columns are equal only to rounding, and their difference is least squares' noise
    # (in the direction the singular V drops); their mean and the other columns are determined (measured <= 61 eps)
    for U, V in zip(a.factors, b.factors, strict=True):
        np.testing.assert_allclose(U[:, 2:], V[:, 2:], rtol=0, atol=1e3 * eps)
        np.testing.assert_allclose(U[:, :2].mean(axis=1), V[:, :2].mean(axis=1), rtol=0, atol=1e3 * eps)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("N", [3, 4])
def test_one_singular_v_then_the_kernel_goes_on(N, dtype, order, rng, monkeypatch):
    """Only the run's first update has a singular V: a start of small integers (exact Grams) whose middle factors
    have rank one (columns in proportion 4 : 2 : 1) and whose last factor has rank two (third column the sum of
    the others), so that mode 0's V, the Hadamard product of the others' Grams, is exactly singular (its last
    pivot of rounding size, well below the definiteness rule's eps * R); mode 0's least-squares factor lacks a
    direction the last factor has, so every later V is definite. One spd_solve call in all, in both routes, the
    kernel going on from mode 1 in the same half; the results equal to rounding."""
    shape, _ = SHAPES[N]
    R = 3
    X, _ = planted(rng, shape, R, dtype, order)
    start = [rng.standard_normal((shape[0], R))]
    start += [np.outer(rng.integers(-3, 4, n), [4.0, 2.0, 1.0]) for n in shape[1:-1]]
    last = rng.integers(-3, 4, (shape[-1], R)).astype(np.float64)
    last[:, 2] = last[:, 0] + last[:, 1]
    start.append(last)
    calls = _count_spd_solve(monkeypatch)
    kw = dict(init=start, max_iter=6, tol=0, linesearch=False)
    a = _cp(X, R, True, monkeypatch, **kw)
    assert a.plans[0].kind == "mttkrp_compiled" and calls == [shape[0]]
    calls.clear()
    b = _cp(X, R, False, monkeypatch, **kw)
    assert calls == [shape[0]]
    assert all(np.isfinite(U).all() for U in a.factors)
    eps = _eps(dtype)
    # the degenerate start's first sweeps (factors in a two-dimensional span) amplify the rounding of the
    # least-squares step: measured over 13 seeds up to 62 eps / (1 - fit) in the fits and 200 eps in the model
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e3 * eps / (1 - b.fit))
    assert _rel(a.to_dense(), b.to_dense()) <= 1e3 * eps


# ---------------------------------------------------------------------------------------------------------------
# 6.-9. zeros, what is left alone, orthogonalize


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_all_zero_tensor_gives_the_zero_model_on_both_routes(dtype, order, monkeypatch):
    """An all-zero tensor: fit 1.0 every iteration, zero weights and factors, on the compiled route as on the
    direct one."""
    X = np.zeros((5, 6, 7), dtype, order=order)
    for compiled, kind in ((True, "mttkrp_compiled"), (False, "mttkrp")):
        res = _cp(X, 2, compiled, monkeypatch)
        assert res.plans[0].kind == kind
        assert res.fit == 1.0 and set(res.fit_history) == {1.0}
        assert res.weights.dtype == dtype and not res.weights.any()
        assert all(U.dtype == dtype and not U.any() for U in res.factors)


def test_factors_a_callback_saw_are_not_rewritten(rng):
    """The compiled sweep writes each new factor into a fresh array: the arrays (factors and weights) a callback
    was given at every iteration hold the same values after the call, and the last ones are the result's."""
    X, factors = planted(rng, (10, 11, 12), 4)
    seen = []

    def callback(state):
        seen.append((list(state.factors), [U.copy() for U in state.factors], state.weights,
                     np.array(state.weights, copy=True)))

    res = tk.cp_als(X, 4, init=near_start(rng, factors), max_iter=7, tol=0, callback=callback)
    assert res.plans[0].kind == "mttkrp_compiled" and len(seen) == 7
    for held, copies, w, w_copy in seen:
        for U, C in zip(held, copies, strict=True):
            assert np.array_equal(U, C)
        assert np.array_equal(w, w_copy)
    # (distinct arrays each iteration: nothing was rewritten in place and compared with itself)
    assert len({id(U) for held, *_ in seen for U in held}) == 7 * 3
    for U, C in zip(res.factors, seen[-1][1], strict=True):
        np.testing.assert_array_equal(U, C)


@pytest.mark.parametrize("order", ["C", "F"])
def test_input_and_start_are_left_as_they_are(order, rng):
    """The tensor (C and F order) and the start's arrays keep their bits through the compiled sweeps (line search
    and normalization included)."""
    X, factors = planted(rng, (6, 7, 5, 8), 3, order=order)
    start = near_start(rng, factors)
    keep_x = X.copy(order="K")
    keep_f = [U.copy() for U in start.factors]
    keep_w = start.weights.copy()
    res = tk.cp_als(X, 3, init=start, max_iter=10, tol=0)
    assert res.plans[0].kind == "mttkrp_compiled"
    np.testing.assert_array_equal(X, keep_x)
    assert X.flags.f_contiguous == (order == "F")
    for U, K in zip(start.factors, keep_f, strict=True):
        np.testing.assert_array_equal(U, K)
    np.testing.assert_array_equal(start.weights, keep_w)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("N", [3, 4])
def test_orthogonalize_on_the_compiled_route_matches_the_direct_route(N, dtype, rng, monkeypatch):
    """``orthogonalize=2`` (each factor replaced by its QR's Q before the first two iterations, their Grams reset):
    the compiled route runs it, with every fit equal to the direct route's to the fit's rounding."""
    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype)
    kw = dict(init=near_start(rng, factors), max_iter=6, tol=0, orthogonalize=2, linesearch=False)
    a = _cp(X, R, True, monkeypatch, **kw)
    b = _cp(X, R, False, monkeypatch, **kw)
    assert a.plans[0].kind == "mttkrp_compiled" and b.plans[0].kind == "mttkrp"
    eps = _eps(dtype)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * eps / (1 - b.fit))
    assert _rel(a.to_dense(), b.to_dense()) <= 1e2 * eps


# ---------------------------------------------------------------------------------------------------------------
# the MTTKRPs alone (SmallCPSweep.mttkrp_sweep): fixed modes, missing data and non-negative CP


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("N", [2, 3, 4])
def test_fixed_modes_on_the_compiled_tree_match_the_direct_route(N, order, dtype, rng, monkeypatch):
    """CP-ALS with a fixed mode (the first, a middle and the last, in turn) takes the compiled tree's MTTKRPs and
    the caller's update: the fixed factor comes back exactly as given, the fits follow the direct route's to
    ``100 eps / (1 - fit)`` and the models agree to the fit's conditioning."""
    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype, order)
    start = [np.asarray(U, dtype) for U in near_start(rng, factors).factors]
    eps = _eps(dtype)
    for fixed in sorted({0, N // 2, N - 1}):
        kw = {"init": [U.copy() for U in start], "fixed_modes": [fixed], "max_iter": 8, "tol": 0,
              "linesearch": False}
        a, b = _cp(X, R, True, monkeypatch, **kw), _cp(X, R, False, monkeypatch, **kw)
        assert a.plans[0].kind == "mttkrp_compiled" and b.plans[0].kind == "mttkrp"
        assert np.array_equal(a.factors[fixed], start[fixed])
        unit = eps / (1 - b.fit)
        np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * unit)
        assert _rel(a.to_dense(), b.to_dense()) <= 1e2 * unit


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("N", [3, 4])
def test_missing_data_on_the_compiled_sweep_matches_the_direct_route(N, dtype, rng, monkeypatch):
    """Masked CP-ALS (40 % missing) on the compiled sweep: the E step refills the operand's array in place, which
    the sweep's views read; the observed-entry fits follow the direct route's to ``100 eps / (1 - fit)`` (a
    free and a fixed-mode run, with and without the line search)."""
    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype)
    mask = rng.random(shape) > 0.4
    Xn = np.where(mask, X, np.nan).astype(dtype)
    start = [np.asarray(U, dtype) for U in near_start(rng, factors).factors]
    eps = _eps(dtype)
    for fixed, ls in ((), False), ((), True), ((1,), False):
        kw = {"mask": mask, "init": [U.copy() for U in start], "fixed_modes": fixed, "max_iter": 10, "tol": 0,
              "linesearch": ls}
        a, b = _cp(Xn, R, True, monkeypatch, **kw), _cp(Xn, R, False, monkeypatch, **kw)
        assert a.plans[0].kind == "mttkrp_compiled" and b.plans[0].kind == "mttkrp"
        np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * eps / (1 - b.fit))


@pytest.mark.parametrize("method", ["hals", "mu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("N", "order"), [(2, "C"), (3, "C"), (3, "F"), (4, "C"), (4, "F")])
def test_non_negative_cp_on_the_compiled_tree_matches_the_direct_route(N, order, dtype, method, rng, monkeypatch):
    """``non_negative_cp`` takes the compiled tree's MTTKRPs on a small tensor: fits and models as the direct
    route's to ``100 eps / (1 - fit)``, every entry non-negative, the same bits on a repeat."""
    shape, R = SHAPES[N]
    factors = [rng.random((n, R)) for n in shape]
    X = np.asarray((tk.CPTensor(np.ones(R), tuple(factors)).to_dense() + 1e-2 * rng.random(shape)).astype(dtype),
                   order=order)
    start = [rng.random((n, R)).astype(dtype) for n in shape]
    eps = _eps(dtype)

    def run(compiled):
        monkeypatch.setattr(cp_mod, "_SMALL_SWEEPS", compiled)
        return tk.non_negative_cp(X, R, method=method, init=[U.copy() for U in start], max_iter=10, tol=0)

    a, b, c = run(True), run(False), run(True)
    assert a.plans[0].kind == "mttkrp_compiled" and b.plans[0].kind == "mttkrp"
    unit = eps / (1 - b.fit)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * unit)
    assert _rel(a.to_dense(), b.to_dense()) <= 1e2 * unit
    assert all((U >= 0).all() for U in a.factors)
    assert all(np.array_equal(U, V) for U, V in zip(a.factors, c.factors, strict=True))
    assert np.array_equal(a.weights, c.weights)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("N", [2, 3, 4])
def test_forced_kernels_run_each_sweeps_two_products(N, order, dtype, rng, monkeypatch):
    """With ``kernel_products`` forced (and the kept calls off, see below), each sweep's two products with the
    tensor run the small-rank kernels (one ``ttm_outer`` on the C-ordered matrix of the tensor and one
    ``ttm_inner`` on its transpose, C or F order), none by BLAS's ``matmul``; the factors, fits and weights are
    the BLAS route's to rounding."""
    from tuckerkit.engine import _smallgemm as sg

    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype, order)
    start = near_start(rng, factors)
    kw = dict(init=start, max_iter=3, tol=0, linesearch=False)
    b = tk.cp_als(X, R, **kw)
    calls = []
    for name in ("ttm_outer", "ttm_inner"):
        real = getattr(sg, name)
        monkeypatch.setattr(sg, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    monkeypatch.setattr(_small_cp, "kernel_products", lambda X, rank: True)
    monkeypatch.setattr(_small_cp, "KEEP_PRODUCTS", False)
    a = tk.cp_als(X, R, **kw)
    assert a.plans[0].kind == "mttkrp_compiled"
    assert sorted(calls) == ["ttm_inner"] * 3 + ["ttm_outer"] * 3
    unit = _eps(dtype) / (1 - b.fit)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * unit)
    # (the models carry the CP problem's conditioning, as in test_compiled_sweep_matches_the_direct_route: over 6
    # seeds the 4-way models differed by up to 160 eps (float64) and 190 eps (float32, 256-bit vectors' kernels),
    # the 2- and 3-way ones by at most 8 eps)
    assert _rel(a.to_dense(), b.to_dense()) <= 1e3 * _eps(dtype)


@pytest.mark.parametrize("linesearch", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("N", [2, 3, 4])
def test_kept_products_give_the_functions_bits(N, order, dtype, linesearch, rng, monkeypatch):
    """The sweeps' products by the small-rank kernels keep their kernel's arguments (``KEEP_PRODUCTS``: one
    :class:`~tuckerkit.engine._smallgemm.KeptTTM` per half, made at its first product, called at every later one,
    ``ttm_outer`` / ``ttm_inner`` never): the same bits as those functions' calls, a line search's jumps
    included; the tensor unmodified."""
    from tuckerkit.engine import _smallgemm as sg

    shape, R = SHAPES[N]
    X, factors = planted(rng, shape, R, dtype, order)
    X0 = X.copy(order="K")
    start = near_start(rng, factors)
    kw = dict(init=start, max_iter=10, tol=0, linesearch=linesearch)
    monkeypatch.setattr(_small_cp, "kernel_products", lambda X, rank: True)
    monkeypatch.setattr(_small_cp, "KEEP_PRODUCTS", False)
    b = tk.cp_als(X, R, **kw)
    made, kept, functions, fits = [], [], [], []
    real_inner = _small_cp.SmallCPSweep.inner_of
    monkeypatch.setattr(_small_cp.SmallCPSweep, "inner_of", lambda self, F: fits.append(1) or real_inner(self, F))
    real_make, real_call = sg.KeptTTM.make.__func__, sg.KeptTTM.__call__
    monkeypatch.setattr(sg.KeptTTM, "make", classmethod(lambda cls, *a: made.append(a[0]) or real_make(cls, *a)))
    monkeypatch.setattr(sg.KeptTTM, "__call__", lambda self, U: kept.append(U.shape) or real_call(self, U))
    for name in ("ttm_outer", "ttm_inner"):
        real = getattr(sg, name)
        monkeypatch.setattr(sg, name, lambda *a, _real=real, _name=name: functions.append(_name) or _real(*a))
    monkeypatch.setattr(_small_cp, "KEEP_PRODUCTS", True)
    a = tk.cp_als(X, R, **kw)
    _same_bits(a, b)
    assert sorted(made) == [False, True] and functions == []
    assert len(kept) == 2 * 10 + len(fits)  # (two a sweep, one for each jump's fit)
    assert (len(fits) > 0) == linesearch
    np.testing.assert_array_equal(X, X0)


def test_kernel_products_rule(monkeypatch):
    """The small-rank kernels take the products from SMALL_CP_KERNEL_WORK of X.size * R (1 M; float32 below rank 4
    2 M) at ranks up to SMALL_CP_KERNEL_MAX_RANK, where vectors are wide; BLAS elsewhere."""
    monkeypatch.setattr("tuckerkit.engine._simd.wide_vectors", lambda: True)
    f64, f32 = np.empty((64, 64, 64)), np.empty((64, 64, 64), np.float32)
    assert _small_cp.kernel_products(f64, 10) and _small_cp.kernel_products(f64, 4)
    assert not _small_cp.kernel_products(f64, 11)  # (a larger rank)
    assert not _small_cp.kernel_products(np.empty((40, 40, 40)), 10)  # (640 k)
    assert _small_cp.kernel_products(f32, 10) and _small_cp.kernel_products(f32, 4)  # (2.6 M; 1.05 M)
    assert not _small_cp.kernel_products(f32, 3) and not _small_cp.kernel_products(np.empty((45,) * 3, np.float32), 10)
    assert _small_cp.kernel_products(np.empty((128, 128, 64), np.float32), 2)  # (2.1 M at rank 2)
    assert not _small_cp.kernel_products(np.empty((100, 100, 100), np.float32), 1)  # (1 M at rank 1)
    monkeypatch.setattr("tuckerkit.engine._simd.wide_vectors", lambda: False)
    assert not _small_cp.kernel_products(f64, 10)


def test_beyond_direct_bounds(monkeypatch):
    """Past the direct route the compiled sweep takes tensors whose products run the small-rank kernels, up to
    SMALL_CP_KERNEL_MAX_ELEMS elements and SMALL_CP_KERNEL_MAX_WORK of size * rank, each bound taken exactly
    within; not at larger ranks, nor a 3-way tensor in F order (2- and 4-way ones in F order are), nor with
    256-bit vectors."""
    e = np.empty
    monkeypatch.setattr("tuckerkit.engine._simd.wide_vectors", lambda: True)
    most = 64 * 128 * 128
    assert _small_cp.SMALL_CP_KERNEL_MAX_ELEMS == most and _small_cp.SMALL_CP_KERNEL_MAX_WORK == 6 * most
    assert _small_cp.beyond_direct(e((64, 128, 128)), 6) and small_cp_applies(e((64, 128, 128)), 6)
    assert not _small_cp.beyond_direct(e((64, 128, 128)), 7)  # (the work)
    assert not _small_cp.beyond_direct(e((1025, 1024)), 5)  # (the elements)
    assert _small_cp.beyond_direct(e((80, 80, 80)), 10) and not _small_cp.beyond_direct(e((80, 80, 80)), 11)
    assert not _small_cp.beyond_direct(e((70, 70, 70)), 2)  # (below the kernels' work: the planner's route)
    assert _small_cp.beyond_direct(e((80, 80, 80), np.float32), 10)
    assert _small_cp.beyond_direct(e((80, 80, 80), np.float32), 4)  # (1 M from rank 4)
    assert not _small_cp.beyond_direct(e((80, 80, 80), np.float32), 3)  # (float32's 2 M below rank 4)
    assert not _small_cp.beyond_direct(e((80, 80, 80), order="F"), 10)  # (a 3-way tensor in F order)
    assert _small_cp.beyond_direct(e((30, 30, 30, 30), order="F"), 5)
    assert _small_cp.beyond_direct(e((700, 700), order="F"), 5)
    monkeypatch.setattr("tuckerkit.engine._simd.wide_vectors", lambda: False)
    assert not _small_cp.beyond_direct(e((80, 80, 80)), 10) and not small_cp_applies(e((80, 80, 80)), 10)


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_tensor_beyond_the_direct_route_matches_the_planned_route(order, rng, monkeypatch):
    """A 70^3 tensor at rank 4 (past the direct route's elements, 1.4 M of size * rank) takes the compiled sweep
    in C order where vectors are wide (its products on the small-rank kernels), the planner's route elsewhere (F
    order: a 3-way tensor's transposed products); either way its fits and model equal the planner's route's to
    rounding, and a repeat gives the same bits."""
    from tuckerkit.engine._simd import wide_vectors

    X, factors = planted(rng, (70, 70, 70), 4, np.float64, order)
    start = near_start(rng, factors)
    kw = dict(init=start, max_iter=4, tol=0, linesearch=False)
    a, c = tk.cp_als(X, 4, **kw), tk.cp_als(X, 4, **kw)
    b = _cp(X, 4, False, monkeypatch, **kw)
    assert (a.plans[0].kind == "mttkrp_compiled") is (wide_vectors() and order == "C")
    assert b.plans[0].kind != "mttkrp_compiled"
    unit = _eps(np.float64) / (1 - b.fit)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e2 * unit)
    assert _rel(a.to_dense(), b.to_dense()) <= 1e2 * _eps(np.float64)
    _same_bits(a, c)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("N", [2, 3, 4])
def test_mttkrp_sweep_gives_each_modes_mttkrp(N, order, dtype, rng, products):
    """``SmallCPSweep.mttkrp_sweep`` with an update that replaces each factor by a fresh random one: every
    ``M_n`` is mode n's MTTKRP of the factors in force at its turn (the earlier modes' new ones, Gauss-Seidel),
    against ``numpy.einsum`` in float64 to ``100 eps`` of the products' scale, in mode order."""
    shape, R = SHAPES[N]
    X = np.asarray(rng.standard_normal(shape).astype(dtype), order=order)
    factors = [rng.standard_normal((n, R)).astype(dtype) for n in shape]
    new = [rng.standard_normal((n, R)).astype(dtype) for n in shape]
    sweep = _small_cp.SmallCPSweep(X, R)
    seen = []

    def update(n, M):
        seen.append((n, M.copy(), [np.asarray(U, np.float64) for U in factors]))
        factors[n] = new[n]

    assert sweep.mttkrp_sweep(factors, update).plans[0].kind == "mttkrp_compiled"
    assert [n for n, _, _ in seen] == list(range(N))
    letters = "abcd"[:N]
    for n, M, F in seen:
        others = [m for m in range(N) if m != n]
        spec = f"{letters},{','.join(letters[m] + 'r' for m in others)}->{letters[n]}r"
        want = np.einsum(spec, X.astype(np.float64), *(F[m] for m in others))
        scale = np.einsum(spec, np.abs(X.astype(np.float64)), *(np.abs(F[m]) for m in others))
        assert np.all(np.abs(M - want) <= 1e2 * _eps(dtype) * scale)
