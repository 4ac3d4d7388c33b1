"""CP-ALS's multi-sweep dimension tree on 3-way tensors (engine/_sweeps.py: ``multi_sweep_applies``,
``CarriedPartial``, ``_multi_sweep``): a pass of X contracted with one factor serves the two MTTKRPs that follow
each other in the cyclic update order, so two sweeps read X three times instead of four, with the same updates."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.engine import DenseTensor, _sweeps
from tuckerkit.engine._sweeps import CarriedPartial, multi_sweep_applies

SPECS = ["abc,bz,cz->az", "abc,az,cz->bz", "abc,az,bz->cz"]  # (CP-ALS: the MTTKRP of each mode)


def _run_sweeps(op, factors, n_sweeps, rng, carry, between=None, projections=False):
    """``n_sweeps`` sweeps of ``op`` (CP-ALS's MTTKRPs, or with ``projections`` HOOI's) whose update replaces each
    factor by a fresh random one (orthonormal for HOOI); each MTTKRP or projection is checked against einsum on
    the factors it saw. Returns the sweeps."""
    X = op.data
    dtype = X.dtype
    Xd = X.astype(np.float64)
    specs = SPECS
    out = []
    for k in range(n_sweeps):
        if between is not None and k:
            between(k, factors)

        def update(n, M):
            seen = [f.astype(np.float64) for f in factors]
            if projections:
                ref = Xd
                for m in range(X.ndim):  # (X x_m U_m^T for every m but n)
                    ref = ref if m == n else np.moveaxis(np.tensordot(ref, seen[m], axes=(m, 0)), -1, m)
            else:
                ref = np.einsum(specs[n], Xd, *(seen[m] for m in range(3) if m != n), optimize=True)
            tol = 4 * X.size // X.shape[n] * np.finfo(dtype).eps * np.abs(ref).max()
            np.testing.assert_allclose(np.asarray(M), ref, rtol=0, atol=tol)
            U = rng.standard_normal(factors[n].shape)
            factors[n] = (np.linalg.qr(U)[0] if projections else U).astype(dtype)

        sweep = op.ttmc_sweep if projections else op.mttkrp_sweep
        out.append(sweep(factors, update, **({"carry": carry} if carry is not None else {})))
    return out


def _passes(sweeps) -> list[int]:
    return [s.passes for s in sweeps]


def _full_passes(X, sweep) -> list[str]:
    """The specs of a CP sweep's passes over all of ``X``."""
    return [p.spec for p in sweep.plans if math.prod(p.shapes[0]) == X.size]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_two_sweeps_read_x_three_times_and_every_mttkrp_is_einsums(order, dtype, rng, planned_sweeps):
    """Sweeps alternate: X x_2 U_2 (modes 0 and 1), X x_1 U_1 (mode 2, kept), then the kept partial (mode 0)
    and X x_0 U_0 (modes 1 and 2). Every MTTKRP equals einsum's on the factors it saw (Gauss-Seidel)."""
    X = np.asarray(rng.standard_normal((24, 20, 28)), order=order).astype(dtype, order="K")
    assert multi_sweep_applies(X, 5)
    factors = [rng.standard_normal((n, 5)).astype(dtype) for n in X.shape]
    got = _run_sweeps(DenseTensor(X), factors, 5, rng, CarriedPartial())
    assert _passes(got) == [2, 1, 2, 1, 2]
    one = [s.split("->")[0].split(",")[1][0] for s in _full_passes(X, got[0])]  # the factor each pass contracts
    two = [s.split("->")[0].split(",")[1][0] for s in _full_passes(X, got[1])]
    assert (one, two) == (["c", "b"], ["a"])


def test_without_a_carrier_every_sweep_reads_x_twice(rng, planned_sweeps):
    X = rng.standard_normal((24, 20, 28))
    factors = [rng.standard_normal((n, 5)) for n in X.shape]
    assert _passes(_run_sweeps(DenseTensor(X), factors, 3, rng, None)) == [2, 2, 2]


@pytest.mark.parametrize("change", ["one_ulp", "drop", "other_tensor"])
def test_a_kept_partial_serves_only_the_factor_and_tensor_it_was_made_from(change, rng, planned_sweeps):
    """Between sweeps, mode 1's factor moved by one ulp in one entry, the carrier dropped, or the sweep run on
    another tensor: the next sweep makes its two passes (and every MTTKRP is still einsum's)."""
    X = rng.standard_normal((24, 20, 28))
    op = DenseTensor(X)
    carry = CarriedPartial()
    factors = [rng.standard_normal((n, 5)) for n in X.shape]
    assert _passes(_run_sweeps(op, factors, 1, rng, carry)) == [2]
    assert carry.state is not None and carry.state[0].shape == (24, 28, 5)
    if change == "one_ulp":
        factors[1] = factors[1].copy()
        factors[1][3, 2] = np.nextafter(factors[1][3, 2], np.inf)
        target = op
    elif change == "drop":
        carry.drop()
        target = op
    else:
        target = DenseTensor(X.copy())
    assert _passes(_run_sweeps(target, factors, 1, rng, carry)) == [2]


def test_the_rule_which_tensors_and_ranks_take_the_multi_sweep_tree(monkeypatch):
    """3-way numpy arrays in C or F order; every single-mode partial (R / I_n of X) at most a quarter of X; the
    unit-stride mode at least MULTI_SWEEP_UNIT long or not shorter than the others; the module flag on."""
    assert _sweeps.MULTI_SWEEP_PARTIAL == 0.25 and _sweeps.MULTI_SWEEP_UNIT == 128
    cube = np.empty((200, 200, 200))
    assert multi_sweep_applies(cube, 50) and not multi_sweep_applies(cube, 51)
    assert multi_sweep_applies(np.empty((1000, 100, 100)), 10)  # (the unit-stride mode ties the shortest)
    assert multi_sweep_applies(np.empty((100, 100, 150)), 10)  # (>= 128)
    assert not multi_sweep_applies(np.empty((500, 500, 50)), 10)  # (shorter than 128 and the others)
    assert multi_sweep_applies(np.empty((500, 500, 50), order="F"), 10)  # (F order: the first mode is unit)
    assert not multi_sweep_applies(np.empty((50, 500, 500), order="F"), 10)
    assert not multi_sweep_applies(np.empty((30, 3000, 100)), 10)  # (R / 30 > 0.25)
    assert not multi_sweep_applies(cube[:, ::2], 10)  # (not one block of memory)
    assert multi_sweep_applies(np.empty((100, 100, 150)).transpose(2, 0, 1), 10)  # (another order: unit mode 0)
    assert not multi_sweep_applies(np.empty((500, 500, 50)).transpose(1, 2, 0), 10)  # (its unit mode: 50 long)
    assert not multi_sweep_applies(np.empty((40,) * 4), 5)  # (4-way)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP", False)
    assert not multi_sweep_applies(cube, 10)


def _planted(shape, rank, dtype, order, seed=5):
    rng = np.random.default_rng(seed)
    X = tk.CPTensor(np.ones(rank), tuple(rng.standard_normal((s, rank)) for s in shape)).to_dense()
    return np.asarray(X + 0.1 * rng.standard_normal(shape), dtype=dtype, order=order), rng


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cp_als_takes_the_multi_sweep_tree_with_the_two_pass_trees_fits(order, dtype, monkeypatch, planned_cp):
    """CP-ALS past the small routes: 1.5 passes over X per iteration, every iteration's fit the two-pass
    tree's to rounding, the same bits on a repeat, X unmodified."""
    X, rng = _planted((90, 70, 80), 4, dtype, order)
    before = X.copy()
    init = [rng.standard_normal((s, 6)).astype(dtype) for s in X.shape]

    def fits(multi: bool):
        monkeypatch.setattr(_sweeps, "MULTI_SWEEP", multi)
        seen: list[float] = []
        with pytest.warns(tk.ConvergenceWarning):
            res = tk.cp_als(X, 6, init=init, max_iter=6, tol=0, linesearch=False,
                            callback=lambda st: seen.append(st.fit) and None)
        return seen, res

    one, res = fits(True)
    assert res.passes_per_iteration == 1.5
    assert fits(True)[1].factors[0].tobytes() == res.factors[0].tobytes()
    two, ref = fits(False)
    assert ref.passes_per_iteration == 2
    np.testing.assert_allclose(one, two, rtol=0, atol=200 * np.finfo(dtype).eps)
    for U, V in zip(res.factors, ref.factors, strict=True):
        np.testing.assert_allclose(U, V, rtol=0, atol=1e4 * np.finfo(dtype).eps * np.abs(V).max())
    assert np.array_equal(X, before)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cp_als_tree_plans_keep_their_kernel_launches_with_the_same_bits(dtype, monkeypatch, planned_sweeps, forced,
                                                                        planned_cp):
    """The multi-sweep tree's compiled passes run their cached plans with its own output buffers, and the engine
    binds such a plan on its first run (_contract.KEEP_LAUNCHES): each works out its launch (tiles, packing,
    helpers' rows) once per plan and replays it in later sweeps, not at every call; the iterates are the same
    bits as without the binding, and X is unmodified."""
    from tuckerkit.engine import _contract, _smallgemm

    X, rng = _planted((90, 70, 80), 4, dtype, "C")
    before = X.copy()
    init = [rng.standard_normal((s, 6)).astype(dtype) for s in X.shape]
    made: list[str] = []
    own = _smallgemm._launch

    def counted(plan, *args):
        made.append(plan.spec)
        return own(plan, *args)

    monkeypatch.setattr(_smallgemm, "_launch", counted)

    def run(bind: bool):
        monkeypatch.setattr(_contract, "KEEP_LAUNCHES", bind)
        _contract._cached_plan.cache_clear()  # (fresh plans: an earlier test's may be bound, launches made)
        made.clear()
        with pytest.warns(tk.ConvergenceWarning):
            res = tk.cp_als(X, 6, init=init, max_iter=8, tol=0, linesearch=False)
        return res, list(made)

    bound, launches = run(True)
    # (``forced``: the cost model sends every pass to a compiled kernel, whatever this CPU)
    assert any(p.compiled == _smallgemm.CompiledKernel.TTM_INNER for p in bound.plans)
    assert bound.passes_per_iteration == 1.5
    assert 1 <= len(launches) == len(set(launches)) <= X.ndim  # (at most one launch made per pass's plan)
    unbound, none = run(False)
    assert none == []
    for U, V in zip(bound.factors, unbound.factors, strict=True):
        assert U.tobytes() == V.tobytes()
    assert np.array_equal(X, before)
    _contract._cached_plan.cache_clear()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cp_als_tree_steps_are_replayed_with_the_same_bits(order, dtype, monkeypatch, planned_sweeps, planned_cp,
                                                          forced):
    """The tree's one-mode products (the passes over X and the matrix-vector products on the partials) are worked
    out once per place and layout and replayed in later sweeps (_sweeps._Step, REPLAY_STEPS), the matrix-vector
    products by their kernel's arguments kept (_batched_dot.RankOuterStep) where the planner chose that kernel: the
    iterates are the same bits as without the replay, the sweeps' plans the same, X unmodified."""
    from tuckerkit.engine import _handoff, _plan
    from tuckerkit.engine._batched_dot import RankOuterStep

    # (``forced``, no flop bound and no margin: the passes and the partials' products all go to compiled kernels,
    # whatever this CPU)
    monkeypatch.setattr(_plan, "BATCHED_DOT_MIN_FLOPS", 0)
    monkeypatch.setattr(_plan, "_SMALL_RANK_MARGIN", math.inf)
    X, rng = _planted((90, 70, 80), 4, dtype, order)
    before = X.copy()
    init = [rng.standard_normal((s, 6)).astype(dtype) for s in X.shape]
    # (a pass over X, the plan's kernel the rank-outer one, its step kept, a compiled TTM's launch kept)
    ran: list[tuple[bool, bool, bool, bool]] = []
    own = _sweeps._Step.__call__

    def counted(self, T, U):
        ran.append((T.size == X.size, self.plan.compiled == _sweeps.CompiledKernel.RANK_OUTER_DOT,
                    isinstance(self.gemv, RankOuterStep), self.launch is not None))
        return own(self, T, U)

    monkeypatch.setattr(_sweeps._Step, "__call__", counted)

    def run(replay: bool):
        monkeypatch.setattr(_sweeps, "REPLAY_STEPS", replay)
        ran.clear()
        with pytest.warns(tk.ConvergenceWarning):
            res = tk.cp_als(X, 6, init=init, max_iter=8, tol=0, linesearch=False)
        return res, list(ran)

    replayed, steps = run(True)
    assert replayed.passes_per_iteration == 1.5
    # 8 iterations: 12 passes and 24 matrix-vector products; each of the 3 passes' places and 6 products' places
    # works its step out once (the first sweeps), every later one is replayed
    assert sum(s[0] for s in steps) == 12 - 3 and len(steps) == 12 + 24 - 9
    # (a product the planner gave the rank-outer kernel keeps that kernel's arguments; no pass over X does)
    assert all(kept == (rank_outer and not full) for full, rank_outer, kept, _ in steps)
    assert sum(s[2] for s in steps) == 24 - 6
    # (each pass's compiled TTM replayed by the launch its plan keeps, where there are helpers to run it on)
    assert [s[3] for s in steps if s[0]] == [_handoff._handoff() is not None] * 9
    plain, none = run(False)
    assert none == []
    assert [p.spec for p in replayed.plans] == [p.spec for p in plain.plans]
    for U, V in zip(replayed.factors, plain.factors, strict=True):
        assert U.tobytes() == V.tobytes()
    assert replayed.fit == plain.fit
    assert np.array_equal(X, before)


def test_a_tree_step_is_made_again_for_another_layout_of_its_place(rng, planned_sweeps):
    """One cache (one decomposition call's) over sweeps of a C- and then an F-ordered tensor of one shape: the same
    places in the tree with other strides work their steps out again (no step replayed on arrays of another
    layout), and every MTTKRP is einsum's on the factors it saw."""
    from tuckerkit.engine import ExecutionPolicy
    from tuckerkit.engine._sweeps import dense_mttkrp_sweep

    cache: dict = {}
    policy = ExecutionPolicy()
    for order in ("C", "F", "C"):
        X = np.asarray(rng.standard_normal((24, 20, 28)), order=order)
        factors = [rng.standard_normal((n, 5)) for n in X.shape]
        seen = []

        def update(n, M, X=X, factors=factors, seen=seen):
            np.testing.assert_allclose(M, _mttkrp_ref(X, factors, n), rtol=0,
                                       atol=64 * X.size // X.shape[n] * np.finfo(X.dtype).eps * np.abs(M).max())
            seen.append(n)
            factors[n] = rng.standard_normal(factors[n].shape)

        for _ in range(3):
            dense_mttkrp_sweep(X, factors, update, policy, cache, CarriedPartial())
        assert seen == [0, 1, 2] * 3
        steps = [v for k, v in cache.items() if isinstance(k, tuple) and k[0] == "step"]
        assert steps and all(st.layout[1] == X.strides for st in steps if st.layout[0] == X.shape)


def test_multi_sweep_tapes_replay_each_kind_of_sweep_and_fall_back_step_by_step(rng, planned_sweeps, monkeypatch):
    """The multi-sweep tree's sweeps are recorded once per kind (from no kept partial, from the kept one) and
    replayed after (_sweeps._Tape): every MTTKRP is still einsum's on the factors it saw, also when the factors
    come in another layout mid-call (F-ordered: the replay runs those products the tree's own way), and the
    sweeps read X as the tree does (2, 1, 2, 1, ...)."""
    from tuckerkit.engine import ExecutionPolicy
    from tuckerkit.engine._sweeps import dense_mttkrp_sweep

    replays = []
    own = _sweeps._Tape.replay

    def counted(self, *args):
        replays.append(self)
        return own(self, *args)

    worked = []  # (the products worked out the tree's way, per sweep)
    own_run = _sweeps.MttkrpTree._one_mode_run

    def run(self, T, t_modes, m, has_r):
        step = self.cache.get(("step", tuple(t_modes), m, has_r))
        worked[-1] += not (step is not None and step.fits(T, self.factors[m]))
        return own_run(self, T, t_modes, m, has_r)

    monkeypatch.setattr(_sweeps._Tape, "replay", counted)
    monkeypatch.setattr(_sweeps.MttkrpTree, "_one_mode_run", run)
    X = rng.standard_normal((24, 20, 28))
    factors = [rng.standard_normal((n, 5)) for n in X.shape]
    cache: dict = {}
    carry = CarriedPartial()
    passes = []
    for k in range(12):
        worked.append(0)
        fortran = k in (4, 5)

        def update(n, M, fortran=fortran):
            np.testing.assert_allclose(M, _mttkrp_ref(X, factors, n), rtol=0,
                                       atol=64 * X.size // X.shape[n] * np.finfo(X.dtype).eps * np.abs(M).max())
            U = rng.standard_normal(factors[n].shape)
            factors[n] = np.asfortranarray(U) if fortran else U

        passes.append(dense_mttkrp_sweep(X, factors, update, ExecutionPolicy(), cache, carry).passes)
    assert passes == [2, 1] * 6
    tapes = {k: v for k, v in cache.items() if isinstance(k, tuple) and k[0] == "tape"}
    assert set(tapes) == {("tape", None), ("tape", 1)}
    assert len(replays) == 10 and set(map(id, replays)) == set(map(id, tapes.values()))
    # the first two sweeps work every product out (5 and 4); C-ordered factors replay them all (sweeps 2-3);
    # F-ordered ones (made in sweeps 4-5, read up to sweep 7) have the products that take them worked out, and
    # their places' steps made for the layout they meet: once the factors are all C-ordered again, every
    # product is replayed (sweeps 10-11)
    assert worked[:4] == [5, 4, 0, 0] and all(worked[4:8]) and worked[10:] == [0, 0]


def test_cp_als_with_line_search_jumps_follows_the_two_pass_tree(monkeypatch, planned_sweeps, planned_cp):
    """With the line search (jumps tried every second iteration from the sixth, after the sweeps that keep
    nothing) the fits follow the two-pass tree's to rounding; each jump's fit comes from the multi-sweep tree's
    first pass on the jumped factors, kept for the next sweep (a kept jump then saves that sweep's pass); a
    drop of the carrier between sweeps makes the next sweep read X twice."""
    X, rng = _planted((90, 70, 80), 4, np.float64, "C")
    init = [rng.standard_normal((s, 6)) for s in X.shape]

    def run(multi: bool):
        monkeypatch.setattr(_sweeps, "MULTI_SWEEP", multi)
        seen: list[float] = []
        with pytest.warns(tk.ConvergenceWarning):
            res = tk.cp_als(X, 6, init=init, max_iter=30, tol=1e-14, callback=lambda st: seen.append(st.fit) and None)
        return seen, res

    jumps = []
    own = _sweeps.kept_first_mttkrp

    def counted(*args):
        jumps.append(own(*args))
        return jumps[-1]

    monkeypatch.setattr(_sweeps, "kept_first_mttkrp", counted)
    monkeypatch.setattr(tk.engine._operand, "kept_first_mttkrp", counted)
    one, res = run(True)
    tries = len(range(6, len(one) + 1, 2))  # (a jump tried at every even iteration from the sixth)
    assert len(jumps) == tries and all(M is not None for M in jumps)  # (each from the tree's first pass, kept)
    two, ref = run(False)
    assert len(jumps) == 2 * tries and all(M is None for M in jumps[tries:])  # (the two-pass tree: its own MTTKRP)
    # (a kept jump's next sweep starts from its pass; every read counted, the jumps' too: the two-pass tree reads
    # X twice a sweep and once more a jump, the multi-sweep tree less)
    assert res.passes_per_iteration < ref.passes_per_iteration == round(2 + tries / len(two), 2)
    np.testing.assert_allclose(one, two, rtol=0, atol=1e-12)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP", True)
    carry = CarriedPartial()
    factors = [rng.standard_normal((n, 5)) for n in X.shape]
    op = DenseTensor(X)
    assert _passes(_run_sweeps(op, factors, 1, rng, carry)) == [2]
    carry.drop()
    assert carry.state is None and _passes(_run_sweeps(op, factors, 2, rng, carry)) == [2, 1]


def test_cp_als_peak_memory_with_a_kept_partial_stays_within_half_the_tensor():
    """One partial of at most a quarter of X lives between sweeps; the call's peak extra memory (tracemalloc,
    numpy's allocations) stays within half of X. (The same call runs once untraced first: a kernel that numba
    compiles in this process would otherwise count its compiler's Python allocations, tens of megabytes.)"""
    X, rng = _planted((100, 100, 100), 4, np.float64, "C")
    init = [rng.standard_normal((s, 25)) for s in X.shape]
    assert multi_sweep_applies(X, 25)
    with pytest.warns(tk.ConvergenceWarning):
        tk.cp_als(X, 25, init=init, max_iter=4, tol=0, linesearch=False)
    tracemalloc.start()
    try:
        with pytest.warns(tk.ConvergenceWarning):
            res = tk.cp_als(X, 25, init=init, max_iter=4, tol=0, linesearch=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.passes_per_iteration == 1.5
    assert peak <= 0.5 * X.nbytes, peak / X.nbytes


# --------------------------------------------------------------------------------------------------------------
# HOOI: the same tree for projections
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hooi_sweeps_share_a_pass_and_every_projection_is_einsums(order, dtype, rng, planned_sweeps):
    """HOOI's 3-way sweeps alternate two passes over X and one, with ranks differing by mode; every projection
    (mode n left unprojected) equals einsum's on the factors it saw; a one-ulp change of mode 1's factor between
    sweeps makes the next sweep read X twice."""
    X = np.asarray(rng.standard_normal((24, 20, 28)), order=order).astype(dtype, order="K")
    ranks = (4, 5, 3)
    assert multi_sweep_applies(X, list(ranks))
    factors = [np.linalg.qr(rng.standard_normal((n, r)))[0].astype(dtype) for n, r in
               zip(X.shape, ranks, strict=True)]
    carry = CarriedPartial()
    assert _passes(_run_sweeps(DenseTensor(X), factors, 5, rng, carry, projections=True)) == [2, 1, 2, 1, 2]

    def nudge(k, factors):
        factors[1] = factors[1].copy()
        factors[1][0, 0] = np.nextafter(factors[1][0, 0], np.inf)

    assert _passes(_run_sweeps(DenseTensor(X), factors, 3, rng, CarriedPartial(), nudge, True)) == [2, 2, 2]
    assert _passes(_run_sweeps(DenseTensor(X), factors, 2, rng, None, projections=True)) == [2, 2]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hooi_takes_the_multi_sweep_tree_with_the_two_pass_trees_fits(order, dtype, monkeypatch, planned_sweeps):
    """HOOI on the planned route from a given start: 1.5 passes per iteration, every iteration's fit the
    two-pass tree's to rounding, the factors' subspaces the same, the same bits on a repeat, X unmodified."""
    from tuckerkit.decomposition import _tucker

    monkeypatch.setattr(_tucker, "_SMALL_SWEEPS", False)
    rng = np.random.default_rng(7)
    shape, ranks = (90, 70, 80), (6, 5, 4)
    X = tk.TuckerTensor(rng.standard_normal(ranks), tuple(np.linalg.qr(rng.standard_normal((s, r)))[0]
                                                          for s, r in zip(shape, ranks, strict=True))).to_dense()
    X = np.asarray(X + 0.05 * np.abs(X).max() * rng.standard_normal(shape), dtype=dtype, order=order)
    before = X.copy()
    init = [np.linalg.qr(rng.standard_normal((s, r)))[0].astype(dtype) for s, r in
            zip(shape, ranks, strict=True)]

    def run(multi: bool):
        monkeypatch.setattr(_sweeps, "MULTI_SWEEP", multi)
        with pytest.warns(tk.ConvergenceWarning):
            return tk.hooi(X, ranks, init=init, max_iter=6, tol=0)

    one = run(True)
    assert one.passes_per_iteration == 1.5
    assert run(True).core.tobytes() == one.core.tobytes()
    two = run(False)
    assert two.passes_per_iteration == 2
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(one.fit_history, two.fit_history, rtol=0, atol=100 * eps)
    for U, V in zip(one.factors, two.factors, strict=True):  # (the same subspaces: U U^T = V V^T)
        np.testing.assert_allclose(U @ U.T, V @ V.T, rtol=0, atol=1e3 * eps)
    assert np.array_equal(X, before)


def test_hooi_4way_sweeps_make_one_pass_per_three_updates(rng, planned_sweeps, monkeypatch):
    """4 modes (the size floor lowered for the test): each pass X x_j U_j serves the three updates after j,
    across sweeps, so sweeps make 2, 1, 1 passes in turn; every projection is the product of X with the other
    factors (tensordot) on the factors it saw; float32 keeps the two-pass tree from 4 modes."""
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP_NWAY_BYTES", 0)
    X = rng.standard_normal((14, 12, 16, 13))
    ranks = (3, 2, 3, 3)
    assert multi_sweep_applies(X, list(ranks), _sweeps.MULTI_SWEEP_HOOI_MAX_ORDER)
    assert not multi_sweep_applies(X.astype(np.float32), list(ranks), _sweeps.MULTI_SWEEP_HOOI_MAX_ORDER)
    assert not multi_sweep_applies(X, list(ranks))  # (CP-ALS: 3 modes)
    factors = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(X.shape, ranks, strict=True)]
    got = _run_sweeps(DenseTensor(X), factors, 6, rng, CarriedPartial(), projections=True)
    assert _passes(got) == [2, 1, 1, 2, 1, 1]


def test_hooi_4way_with_the_multi_sweep_tree_has_the_two_pass_trees_fits(rng, planned_sweeps, monkeypatch):
    from tuckerkit.decomposition import _tucker

    monkeypatch.setattr(_tucker, "_SMALL_SWEEPS", False)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP_NWAY_BYTES", 0)
    shape, ranks = (24, 26, 28, 30), (4, 3, 5, 4)
    X = tk.TuckerTensor(rng.standard_normal(ranks), tuple(np.linalg.qr(rng.standard_normal((s, r)))[0]
                                                          for s, r in zip(shape, ranks, strict=True))).to_dense()
    X = X + 0.05 * np.abs(X).max() * rng.standard_normal(shape)
    init = [np.linalg.qr(rng.standard_normal((s, r)))[0] for s, r in zip(shape, ranks, strict=True)]

    def run(multi: bool):
        monkeypatch.setattr(_sweeps, "MULTI_SWEEP", multi)
        with pytest.warns(tk.ConvergenceWarning):
            return tk.hooi(X, ranks, init=init, max_iter=6, tol=0)

    one, two = run(True), run(False)
    assert (one.passes_per_iteration, two.passes_per_iteration) == (round(8 / 6, 2), 2)
    np.testing.assert_allclose(one.fit_history, two.fit_history, rtol=0, atol=100 * np.finfo(np.float64).eps)
    for U, V in zip(one.factors, two.factors, strict=True):
        np.testing.assert_allclose(U @ U.T, V @ V.T, rtol=0, atol=1e3 * np.finfo(np.float64).eps)


def test_a_sweeps_cached_plans_are_not_checked_again_and_a_given_plan_still_is(rng, planned_sweeps, monkeypatch):
    """HOOI's sweep runs each multi-TTM plan from its cache, keyed by the arrays' layouts, without the plan's
    check (the key already is it): a HOOI call with the check made to fail gives the same factors and fit as one
    with it; a plan given to ``dense_multi_ttm`` by a caller is still checked (a one-line error for other
    arrays)."""
    from tuckerkit.engine import ExecutionPolicy
    from tuckerkit.engine._ttm import MultiTTMPlan, build_multi_ttm_plan, dense_multi_ttm

    X = rng.standard_normal((30, 24, 20))
    ref = tk.hooi(X, 4, max_iter=4, tol=0.0, init="hosvd")
    calls = []
    real = MultiTTMPlan.check

    def failing(self, *args):
        calls.append(1)
        raise AssertionError("a sweep's cached plan was checked again")

    monkeypatch.setattr(MultiTTMPlan, "check", failing)
    got = tk.hooi(X, 4, max_iter=4, tol=0.0, init="hosvd")
    assert calls == []
    assert got.fit == ref.fit
    for a, b in zip(got.factors, ref.factors, strict=True):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(MultiTTMPlan, "check", real)
    mats = {1: rng.standard_normal((24, 4)), 2: rng.standard_normal((20, 4))}
    plan = build_multi_ttm_plan(X, mats, True, ExecutionPolicy())
    with pytest.raises(ValueError, match=r"plan was made for X of shape \(30, 24, 20\)"):
        dense_multi_ttm(X[:, :, :10], {1: mats[1], 2: mats[2][:10]}, True, plan, ExecutionPolicy())


def _mttkrp_ref(X, factors, n):
    """Mode n's MTTKRP by einsum in float64 (any order)."""
    letters = "abcdefgh"[:X.ndim]
    spec = ",".join([letters] + [letters[m] + "z" for m in range(X.ndim) if m != n]) + f"->{letters[n]}z"
    return np.einsum(spec, X.astype(np.float64), *(factors[m].astype(np.float64) for m in range(X.ndim) if m != n),
                     optimize=True)


@pytest.mark.parametrize(("shape", "passes"), [((12, 10, 14, 11), [2, 1, 1, 2, 1, 1]),
                                                 ((8, 9, 8, 10, 8), [2, 1, 1, 1, 2, 1])])
def test_nway_cp_sweeps_share_passes_where_enabled(shape, passes, rng, planned_sweeps, monkeypatch):
    """The multi-sweep tree from 4 modes (``MULTI_SWEEP_CP_MAX_ORDER``; off by default, measured no faster yet):
    each pass ``X x_j U_j`` serves the N - 1 updates after mode j's, so N sweeps of 4 modes read X 4 times in 3
    sweeps (5 modes: 5 in 4), and every MTTKRP is einsum's on the factors it saw (Gauss-Seidel)."""
    assert _sweeps.MULTI_SWEEP_CP_MAX_ORDER == 3
    X = rng.standard_normal(shape)
    assert not multi_sweep_applies(X, 2, _sweeps.MULTI_SWEEP_CP_MAX_ORDER)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP_CP_MAX_ORDER", 8)
    monkeypatch.setattr(_sweeps, "MULTI_SWEEP_NWAY_BYTES", 0)
    assert multi_sweep_applies(X, 2, _sweeps.MULTI_SWEEP_CP_MAX_ORDER)
    factors = [rng.standard_normal((n, 2)) for n in shape]
    op, carry = DenseTensor(X), CarriedPartial()
    got = []
    for _ in range(len(passes)):
        def update(n, M):
            ref = _mttkrp_ref(X, factors, n)
            np.testing.assert_allclose(np.asarray(M), ref, rtol=0,
                                       atol=4 * X.size // X.shape[n] * np.finfo(np.float64).eps * np.abs(ref).max())
            factors[n] = rng.standard_normal(factors[n].shape)

        got.append(op.mttkrp_sweep(factors, update, carry=carry).passes)
    assert got == passes


def test_nway_cp_als_with_the_multi_sweep_tree_has_the_two_pass_trees_fits(monkeypatch, planned_sweeps):
    """CP-ALS on a 4-way tensor with the multi-sweep tree turned on: 4/3 passes over X an iteration, every
    iteration's fit and the factors the two-pass tree's to rounding."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((14, 12, 13, 15))
    init = [rng.standard_normal((s, 3)) for s in X.shape]

    def fits(order: int):
        monkeypatch.setattr(_sweeps, "MULTI_SWEEP_CP_MAX_ORDER", order)
        monkeypatch.setattr(_sweeps, "MULTI_SWEEP_NWAY_BYTES", 0)
        seen: list[float] = []
        with pytest.warns(tk.ConvergenceWarning):
            res = tk.cp_als(X, 3, init=init, max_iter=6, tol=0, linesearch=False,
                            callback=lambda st: seen.append(st.fit) and None)
        return seen, res

    one, res = fits(8)
    two, ref = fits(3)
    assert (res.passes_per_iteration, ref.passes_per_iteration) == (1.33, 2)
    np.testing.assert_allclose(one, two, rtol=0, atol=200 * np.finfo(np.float64).eps)
    for U, V in zip(res.factors, ref.factors, strict=True):
        np.testing.assert_allclose(U, V, rtol=0, atol=1e4 * np.finfo(np.float64).eps * np.abs(V).max())
