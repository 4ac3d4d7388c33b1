"""The compiled batched dot product along a mode all three operands share with unit stride (``abz,bz->az``).

Checked against ``numpy.einsum`` in float64 (to a few eps of the sum of magnitudes) through the planner and
directly: every placement of the contracted and kept modes, swapped operands, 2- to 5-way tensors, sizes 1, 7 and
13, sliced views, given outputs of either layout. Where the shared mode is not unit-strided the plan stays on
BLAS. The bits do not depend on the workers, the pieces or the loop order; GPU plans keep cuBLAS.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from tuckerkit.engine import ExecutionPolicy, contract, plan_contraction
from tuckerkit.engine import _batched_dot as bd
from tuckerkit.engine import _contract as contract_mod
from tuckerkit.engine import _plan as plan_mod
from tuckerkit.engine._plan import CompiledKernel, KernelKind


@pytest.fixture
def forced(monkeypatch):
    """The kernel planned at any size (the planner keeps calls below ``BATCHED_DOT_MIN_FLOPS`` on BLAS)."""
    monkeypatch.setattr(plan_mod, "BATCHED_DOT_MIN_FLOPS", 0)
    contract_mod._cached_plan.cache_clear()
    yield
    contract_mod._cached_plan.cache_clear()


def _close(got, A, B, spec):
    """``got`` against einsum in float64, to 16 eps of the sum of the terms' magnitudes (per element)."""
    a, b = (np.asarray(x, np.float64) for x in (A, B))
    ref = np.einsum(spec, a, b)
    mag = np.einsum(spec, np.abs(a), np.abs(b))
    eps = np.finfo(np.asarray(got).dtype).eps
    assert got.shape == ref.shape
    assert np.all(np.abs(np.asarray(got, np.float64) - ref) <= 16 * eps * mag + np.finfo(np.float64).tiny)


def _operands(rng, spec, sizes, dtype):
    a, b = spec.split("->")[0].split(",")
    A = rng.standard_normal([sizes[c] for c in a]).astype(dtype)
    B = rng.standard_normal([sizes[c] for c in b]).astype(dtype)
    return A, B


SPECS = ["abz,bz->az", "abz,az->bz", "abz,bz->za", "bz,abz->az", "az,abz->bz", "abcz,cz->abz", "abcz,az->bcz",
         "abcz,cz->baz", "kz,kz->z", "abcdz,dz->abcz", "abcdz,az->bcdz"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 7, 13])
def test_batched_dot_against_einsum(spec, n, dtype, rng, forced):
    sizes = dict(zip("abcdkz", [n + 1, n, 3, 2, n + 2, n], strict=True))
    sizes["z"] = max(n, 2)  # (a shared mode of extent 1 is no batch: BLAS)
    A, B = _operands(rng, spec, sizes, dtype)
    A0, B0 = A.copy(), B.copy()
    plan = plan_contraction(spec, A, B)
    got = contract(spec, A, B, plan=plan)
    _close(got, A, B, spec)
    assert np.array_equal(A, A0) and np.array_equal(B, B0)  # the operands are only read
    assert plan.compiled is CompiledKernel.BATCHED_DOT, plan.explain()


def test_the_planner_takes_it_above_the_floor_and_explains(rng):
    A = rng.standard_normal((120, 80, 16))
    U = rng.standard_normal((80, 16))
    plan = plan_contraction("abz,bz->az", A, U)
    assert plan.flops >= plan_mod.BATCHED_DOT_MIN_FLOPS
    assert plan.compiled is CompiledKernel.BATCHED_DOT
    assert plan.kind is KernelKind.BATCHED_DOT  # the BLAS alternative
    text = plan.explain()
    assert "compiled unit_batch_dot (BLAS alternative: batched_dot)" in text
    assert "choice: the compiled kernel computes at least 5 % faster" in text
    small = plan_contraction("abz,bz->az", A[:60, :50], U[:50])
    assert small.flops < plan_mod.BATCHED_DOT_MIN_FLOPS
    assert small.compiled is CompiledKernel.NONE  # below BATCHED_DOT_MIN_FLOPS: BLAS
    _close(contract("abz,bz->az", A[:60, :50], U[:50]), A[:60, :50], U[:50], "abz,bz->az")


def test_not_taken_where_the_shared_mode_is_not_unit_strided(rng, forced):
    """The rank outermost (a CP-ALS partial's layout) is not this kernel's: the rank-outer products take it
    (``test_planner_takes_the_rank_outer_products``), or BLAS's batch of matrix-vector products."""
    P = np.ascontiguousarray(rng.standard_normal((16, 60, 50))).transpose(1, 2, 0)  # (a, b, z), z outermost
    U = rng.standard_normal((50, 16))
    plan = plan_contraction("abz,bz->az", P, U)
    assert plan.compiled is CompiledKernel.RANK_OUTER_DOT
    _close(contract("abz,bz->az", P, U), P, U, "abz,bz->az")
    # unit-strided in A but not in B, or not in a given output: BLAS too
    A = rng.standard_normal((60, 50, 16))
    Ut = np.ascontiguousarray(U.T).T  # (50, 16) with z strided
    assert plan_contraction("abz,bz->az", A, Ut).compiled is CompiledKernel.NONE
    out = np.empty((16, 60)).T
    assert plan_contraction("abz,bz->az", A, U, out=out).compiled is CompiledKernel.NONE
    _close(contract("abz,bz->az", A, U, out=out), A, U, "abz,bz->az")
    # complex: BLAS only
    Ac = A + 1j
    assert plan_contraction("abz,bz->az", Ac, U + 0j).compiled is CompiledKernel.NONE


def test_views_and_given_outputs(dtype, rng, forced):
    """Sliced operands (rows of A apart by more than their extent, B a column slice) and outputs of both layouts
    and a strided one, into which the kernel writes only its elements."""
    big = rng.standard_normal((60, 44, 40)).astype(dtype)
    A = big[2:52, 1:41, 5:37]  # (50, 40, 32), z unit-strided, the other strides padded
    Bb = rng.standard_normal((40, 45)).astype(dtype)
    B = Bb[:, 4:36]
    for spec in ("abz,bz->az", "abz,az->bz"):
        b = B if spec == "abz,bz->az" else rng.standard_normal((50, 32)).astype(dtype)
        m = 50 if spec == "abz,bz->az" else 40
        outs = [np.full((m, 32), np.nan, dtype), np.full((m, 3, 32), np.nan, dtype)[:, 1, :]]
        for out in outs:
            plan = plan_contraction(spec, A, b, out=out)
            assert plan.compiled is CompiledKernel.BATCHED_DOT
            base = out.base if out.base is not None else out
            before = base.copy()
            contract(spec, A, b, out=out)
            _close(out, A, b, spec)
            untouched = np.ones(base.shape, bool)
            if out.base is not None:
                untouched[:, 1, :] = False
                assert np.isnan(base[untouched]).all() and np.isnan(before[untouched]).all()
        # a fresh C- or F-ordered output: the kernel where that layout has z unit-strided
        assert plan_contraction(spec, A, b, out_layout="C").compiled is CompiledKernel.BATCHED_DOT
        assert plan_contraction(spec, A, b, out_layout="F").compiled is CompiledKernel.NONE
        _close(contract(spec, A, b, out_layout="F"), A, b, spec)


@pytest.mark.parametrize("m_outer", [True, False])
def test_bits_do_not_depend_on_workers_pieces_or_loop_order(m_outer, dtype, rng, monkeypatch):
    """Each element is one chain of fused multiply-adds in increasing k: one worker or three, pieces of any
    size, m outside k or k outside m in the loop, blocks of rows in the kernel's scratch (64 rows of z = 64, the
    last block short): the same bits."""
    A = rng.standard_normal((203, 57, 64)).astype(dtype)
    B = rng.standard_normal((57, 64)).astype(dtype)
    assert bd._SCRATCH // 64 < 203  # (several blocks)
    ref = np.empty((203, 64), dtype)
    bd.batched_dot(A, B, ref)
    _close(ref, A, B, "mkz,kz->mz")
    out = np.empty_like(ref)
    for lo, hi in ((0, 203), (0, 70), (70, 203), (5, 6)):  # the kernel on its own, the chosen loop order forced
        bd._batched_dot_kernel(A.reshape(-1), 57 * 64, 64, B.reshape(-1), 64, out.reshape(-1), 64, 57, 64, m_outer,
                               lo, hi)
    assert out.tobytes() == ref.tobytes()
    from tuckerkit.engine import _smallgemm as sg

    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # (pieces cut finer than by default: several of them)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 100_000)
    for workers in (1, 2, 3):
        out2 = np.empty_like(ref)
        bd.batched_dot(A, B, out2, ExecutionPolicy(workers))
        assert out2.tobytes() == ref.tobytes(), workers
    # k outermost in memory (the other loop order chosen): the same bits
    At = np.ascontiguousarray(A.transpose(1, 0, 2)).transpose(1, 0, 2)
    out3 = np.empty_like(ref)
    bd.batched_dot(At, B, out3)
    assert out3.tobytes() == ref.tobytes()


def test_direct_call_errors(rng):
    A = rng.standard_normal((4, 5, 6))
    with pytest.raises(ValueError, match=r"batched_dot needs B of shape \(5, 6\) and C of shape \(4, 6\); received "
                                         r"\(6, 5\) and \(4, 6\)"):
        bd.batched_dot(A, np.ones((6, 5)), np.empty((4, 6)))
    with pytest.raises(ValueError, match="batched_dot needs float32 or float64 operands of one dtype; received "
                                         "float64, float32, float64"):
        bd.batched_dot(A, np.ones((5, 6), np.float32), np.empty((4, 6)))
    with pytest.raises(ValueError, match="batched_dot needs unit stride along the last axis of each operand"):
        bd.batched_dot(A, np.ones((6, 5)).T, np.empty((4, 6)))
    wide = np.ones((1, 2, bd.MAX_Z + 1))
    with pytest.raises(ValueError, match=f"batched_dot takes at most {bd.MAX_Z} elements along z; received "
                                         f"{bd.MAX_Z + 1}"):
        bd.batched_dot(wide, np.ones((2, bd.MAX_Z + 1)), np.empty((1, bd.MAX_Z + 1)))
    # empty extents: nothing to sum is zero
    out = np.full((4, 6), np.nan)
    bd.batched_dot(np.ones((4, 0, 6)), np.ones((0, 6)), out)
    assert np.array_equal(out, np.zeros((4, 6)))


def test_wide_shared_mode_stays_on_blas(rng, forced):
    A = rng.standard_normal((2, 3, bd.MAX_Z + 8))
    U = rng.standard_normal((3, bd.MAX_Z + 8))
    assert plan_contraction("abz,bz->az", A, U).compiled is CompiledKernel.NONE
    _close(contract("abz,bz->az", A, U), A, U, "abz,bz->az")


def test_gpu_plans_keep_cublas(rng, forced):
    A = rng.standard_normal((60, 50, 16))
    U = rng.standard_normal((50, 16))
    plan = plan_contraction("abz,bz->az", A, U)
    assert plan.compiled is CompiledKernel.BATCHED_DOT
    gpu = contract_mod._on_gpu(plan)
    assert gpu.compiled is CompiledKernel.NONE and gpu.device == "cuda"
    assert gpu._out_order == plan._bd.blas_out_order
    blas = dataclasses.replace(plan, compiled=CompiledKernel.NONE, _bd=None, _out_order=plan._bd.blas_out_order)
    np.testing.assert_allclose(blas(A, U), plan(A, U), rtol=0, atol=1e-12)


def test_plan_reuse_and_repeat_bits(rng, forced):
    """A plan called again on other operands of its shapes and strides, and the same call twice: the same bits
    as a fresh call (the plan binds nothing of the first operands)."""
    specs = ["abz,bz->az", "bz,abz->az", "abcz,az->bcz"]
    for spec in specs:
        sizes = dict(a=40, b=41, c=5, z=24)
        A, B = _operands(rng, spec, sizes, np.float64)
        A2, B2 = _operands(rng, spec, sizes, np.float64)
        plan = plan_contraction(spec, A, B)
        assert plan.compiled is CompiledKernel.BATCHED_DOT
        first = plan(A, B)
        assert plan(A2, B2).tobytes() == contract(spec, A2, B2).tobytes()
        assert plan(A, B).tobytes() == first.tobytes()
    for a, b in itertools.product([np.float32, np.float64], repeat=2):
        if a != b:  # mixed dtypes: the planner's usual promotion, no kernel on mismatched arrays
            A = rng.standard_normal((40, 41, 24)).astype(a)
            U = rng.standard_normal((41, 24)).astype(b)
            _close(contract("abz,bz->az", A, U), A, U, "abz,bz->az")


def _rank_outer(rng, A, B, Z, dtype):
    """A partial (A, B, Z) with the rank outermost in memory, as CP-ALS's sweeps make them."""
    return rng.standard_normal((Z, A, B)).astype(dtype).transpose(1, 2, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("A", "B", "Z"), [(1, 7, 3), (7, 1, 3), (13, 7, 1), (7, 13, 10), (200, 200, 10)])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("out_layout", ["rank_outer", "C"])
def test_rank_outer_products_match_einsum(dtype, A, B, Z, axis, out_layout, rng):
    """``rank_outer_gemv`` on a rank-outer partial: ``abz,az->bz`` (axis 0) and ``abz,bz->az`` (axis 1) against
    ``numpy.einsum`` in float64, within a few eps of the sum of magnitudes, into a rank-outer or a C-ordered
    output; the partial and the matrix left unmodified, the same bits on a second call."""
    P = _rank_outer(rng, A, B, Z, dtype)
    K, X = (A, B) if axis == 0 else (B, A)
    W = rng.standard_normal((K, Z)).astype(dtype)
    P0, W0 = P.copy(), W.copy()
    out = np.empty((Z, X), dtype).T if out_layout == "rank_outer" else np.empty((X, Z), dtype)
    assert bd.rank_outer_gemv(P, W, out, axis)
    spec = "abz,az->bz" if axis == 0 else "abz,bz->az"
    ref = np.einsum(spec, P.astype(np.float64), W.astype(np.float64))
    mag = np.einsum(spec, np.abs(P.astype(np.float64)), np.abs(W.astype(np.float64)))
    assert np.all(np.abs(out - ref) <= 4 * K * np.finfo(dtype).eps * mag)
    again = np.empty_like(out)
    bd.rank_outer_gemv(P, W, again, axis)
    assert np.array_equal(out, again)
    np.testing.assert_array_equal(P, P0)
    np.testing.assert_array_equal(W, W0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1])
def test_rank_outer_products_in_pieces_give_the_bits_of_one_thread(dtype, axis, rng, monkeypatch):
    """A rank-outer product large enough for the kernels' cut (33 ranks of 600 x 500: 20 MFlop) runs in pieces of
    whole ranks on the GIL-free helpers (or the Python pool where there are none) with two workers: the same bits
    as one thread, within a few eps of einsum's float64 result, the pieces really taken by the helpers where
    they exist; a small one (rank 10 of 200 x 200, 0.8 MFlop) stays in one piece."""
    from tuckerkit.engine import _handoff

    ran = []
    real = _handoff.run_kernel

    def spy(name, *args, **kw):
        got = real(name, *args, **kw)
        ran.append((name, got))
        return got

    monkeypatch.setattr(_handoff, "run_kernel", spy)
    two = ExecutionPolicy(workers=2)
    P = _rank_outer(rng, 600, 500, 33, dtype)
    K, X = (600, 500) if axis == 0 else (500, 600)
    W = rng.standard_normal((K, 33)).astype(dtype)
    one, split = np.empty((X, 33), dtype), np.empty((X, 33), dtype)
    assert bd.rank_outer_gemv(P, W, one, axis, None)
    assert ran == []
    assert bd.rank_outer_gemv(P, W, split, axis, two)
    name = "rank_axpys" if axis == 0 else "rank_dots"
    assert [n for n, _ in ran] == [name]
    if _handoff._handoff() is not None:
        assert ran[0][1] is True
    assert np.array_equal(one, split)
    spec = "abz,az->bz" if axis == 0 else "abz,bz->az"
    ref = np.einsum(spec, P.astype(np.float64), W.astype(np.float64))
    mag = np.einsum(spec, np.abs(P.astype(np.float64)), np.abs(W.astype(np.float64)))
    assert np.all(np.abs(split - ref) <= 4 * K * np.finfo(dtype).eps * mag)
    ran.clear()
    small = _rank_outer(rng, 200, 200, 10, dtype)
    assert bd.rank_outer_gemv(small, W[:200, :10].copy(), np.empty((200, 10), dtype), axis, two)
    assert ran == []


def test_rank_outer_products_decline_other_layouts_and_dtypes(rng):
    """Anything but a float32 / float64 partial whose rank is outermost over two C-contiguous modes is left to
    the caller's plan (False, the output untouched): the rank innermost, a strided partial, mixed dtypes, complex
    operands, mismatched shapes."""
    W = rng.standard_normal((7, 3))
    out = np.full((5, 3), 7.0)
    inner = rng.standard_normal((7, 5, 3))  # (a, b, z) C-ordered: the rank innermost
    strided = _rank_outer(rng, 7, 10, 3, np.float64)[:, ::2]
    cases = [(inner, W, out, 0), (strided, W, out, 0), (_rank_outer(rng, 7, 5, 3, np.float32), W, out, 0),
             (_rank_outer(rng, 7, 5, 3, np.complex128), W.astype(np.complex128), out.astype(np.complex128), 0),
             (_rank_outer(rng, 7, 5, 3, np.float64), W[:6], out, 0), (_rank_outer(rng, 7, 5, 3, np.float64), W, out, 1)]
    for P, Wc, o, axis in cases:
        before = o.copy()
        assert not bd.rank_outer_gemv(P, Wc, o, axis)
        np.testing.assert_array_equal(o, before)


def _clear_plans():
    contract_mod._cached_plan.cache_clear()
    contract_mod._FAST_PLANS.clear()


def test_cp_als_sweeps_take_the_rank_outer_products(rng, monkeypatch):
    """CP-ALS's 3-way sweeps run their matrix-vector steps through the planner's rank-outer products (three an
    iteration on a multi-sweep 200 x 190 x 180 tensor; their plans recorded in the sweep's), and the result
    matches the BLAS route's to float64 rounding: the same fit within 1e-12 and factors within 1e-9 after 6
    iterations."""
    import tuckerkit as tk
    from tuckerkit.engine import _sweeps

    X = rng.standard_normal((200, 190, 180))
    init = tk.CPTensor(np.ones(5), tuple(rng.standard_normal((n, 5)) for n in X.shape))
    calls, kinds = [], []
    real, real_rec = bd.rank_outer_gemv, _sweeps.MttkrpTree._run

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    def rec(self, spec, A, B, out):
        got = real_rec(self, spec, A, B, out)
        kinds.append(self.plans[-1].compiled)
        return got

    monkeypatch.setattr(bd, "rank_outer_gemv", spy)
    monkeypatch.setattr(_sweeps.MttkrpTree, "_run", rec)
    monkeypatch.setattr(_sweeps, "REPLAY_STEPS", False)  # (each product through its plan: replayed steps call the
    # kernel with the arguments kept, tests/test_multi_sweep.py)
    _clear_plans()
    a = tk.cp_als(X, 5, init=init, max_iter=6, tol=0, linesearch=False)
    assert len(calls) >= 12 and all(calls)
    assert kinds.count(CompiledKernel.RANK_OUTER_DOT) == len(calls)
    monkeypatch.setattr(plan_mod, "RANK_OUTER_MAX_BYTES", 0)  # (the planner keeps BLAS's gemv per rank)
    _clear_plans()
    n, nk = len(calls), len(kinds)
    b = tk.cp_als(X, 5, init=init, max_iter=6, tol=0, linesearch=False)
    _clear_plans()
    assert len(calls) == n and len(kinds) == 2 * nk and CompiledKernel.RANK_OUTER_DOT not in kinds[nk:]
    assert abs(a.fit - b.fit) <= 1e-12
    for U, V in zip(a.factors, b.factors, strict=True):
        np.testing.assert_allclose(U, V, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", ["abz,bz->az", "abz,az->bz", "bz,abz->az", "abz,bz->za", "baz,bz->az",
                                  "abz,zb->az"])
def test_planner_takes_the_rank_outer_products(spec, dtype, rng):
    """A 3-way tensor whose shared mode is outermost over its two C-contiguous others (``P[a, b, z]`` stored as
    ``(z, a, b)``, or ``(z, b, a)``): the planner's ``RANK_OUTER_DOT`` for either contracted mode, swapped
    operands, a matrix given as (k, z) or (z, k) (one copy of it recorded, none where its rows are z's), a fresh
    or given output of any layout; the product einsum's to rounding, the operands unmodified, the same bits
    twice, and the explanation names the kernel and BLAS's alternative."""
    a, b = spec.split("->")[0].split(",")
    t, m = (b, a) if len(a) == 2 else (a, b)
    sizes = {"a": 120, "b": 100, "z": 16}
    # the tensor with z outermost, then its other two modes in the order they appear in its subscripts
    T = rng.standard_normal([sizes[c] for c in "z" + t.replace("z", "")]).astype(dtype)
    T = T.transpose([("z" + t.replace("z", "")).index(c) for c in t])
    W = rng.standard_normal([sizes[c] for c in m]).astype(dtype)
    ops = (W, T) if len(a) == 2 else (T, W)
    plan = plan_contraction(spec, *ops)
    assert plan.compiled is CompiledKernel.RANK_OUTER_DOT, plan.explain()
    z_rows = m.index("z") == 0  # (z, k) C-ordered: each z's vector a run
    assert plan.copies == (0 if z_rows else W.size) and not plan.parallel
    assert "compiled rank_outer_dot (BLAS alternative: batched_gemv)" in plan.explain()
    before = [x.copy() for x in ops]
    got = plan(*ops)
    _close(got, *ops, spec)
    assert np.array_equal(got, plan(*ops))
    for x, x0 in zip(ops, before, strict=True):
        np.testing.assert_array_equal(x, x0)
    c = spec.split("->")[1]
    for out in (np.full([sizes[x] for x in c], np.nan, dtype), np.full([sizes[x] for x in c[::-1]], np.nan, dtype).T,
                np.full([sizes[x] + 3 for x in c], np.nan, dtype)[1:-2, 2:-1]):
        res = contract(spec, *ops, out=out)
        assert res is out
        _close(out, *ops, spec)
        assert plan_contraction(spec, *ops, out=out).compiled is CompiledKernel.RANK_OUTER_DOT


def test_rank_outer_products_declined(rng, monkeypatch):
    """BLAS keeps: a matrix that needs a copy under ``copies="never"`` (none needed: taken), a tensor beyond
    ``RANK_OUTER_MAX_BYTES``, fewer flops than ``BATCHED_DOT_MIN_FLOPS``, an extent of 1, modes beneath the rank
    that are not C-contiguous, complex operands; a GPU plan runs cuBLAS. Each product einsum's to rounding."""
    P = rng.standard_normal((16, 120, 100)).transpose(1, 2, 0)
    U = rng.standard_normal((100, 16))
    assert plan_contraction("abz,bz->az", P, U, copies="never").compiled is CompiledKernel.NONE
    Uz = np.ascontiguousarray(U.T).T  # (b, z) with each z's vector a run: no copy
    plan = plan_contraction("abz,bz->az", P, Uz, copies="never")
    assert plan.compiled is CompiledKernel.RANK_OUTER_DOT and plan.copies == 0
    _close(plan(P, Uz), P, Uz, "abz,bz->az")
    monkeypatch.setattr(plan_mod, "RANK_OUTER_MAX_BYTES", P.nbytes - 1)
    contract_mod._cached_plan.cache_clear()
    assert plan_contraction("abz,bz->az", P, U).compiled is CompiledKernel.NONE
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()
    small = rng.standard_normal((4, 30, 20)).transpose(1, 2, 0)  # 4800 flops
    thin = rng.standard_normal((16, 1, 5000)).transpose(1, 2, 0)
    gaps = rng.standard_normal((16, 120, 200))[:, :, ::2].transpose(1, 2, 0)  # b strided
    fortran = rng.standard_normal((16, 100, 120)).transpose(2, 1, 0)  # (a, b, z) with a innermost: (z, b, a)
    for X, spec, W in [(small, "abz,bz->az", rng.standard_normal((20, 4))),
                       (thin, "abz,bz->az", rng.standard_normal((5000, 16))),
                       (gaps, "abz,bz->az", U)]:
        plan = plan_contraction(spec, X, W)
        assert plan.compiled is CompiledKernel.NONE, (X.shape, X.strides, plan.explain())
        _close(contract(spec, X, W), X, W, spec)
    Pc, Uc = P + 1j * P[::-1], U - 2j
    assert plan_contraction("abz,bz->az", Pc, Uc).compiled is CompiledKernel.NONE
    ref = np.einsum("abz,bz->az", Pc, Uc)
    assert np.abs(contract("abz,bz->az", Pc, Uc) - ref).max() <= 1e-12 * np.abs(ref).max()
    plan = plan_contraction("abz,az->bz", fortran, rng.standard_normal((120, 16)))
    assert plan.compiled is CompiledKernel.RANK_OUTER_DOT  # (b outer, a inner: the dot products along a)
    assert contract_mod._on_gpu(plan).compiled is CompiledKernel.NONE


def test_rank_outer_plan_on_a_misaligned_partial_runs_blas(rng):
    """A plan made for aligned operands, called on a misaligned partial of the same strides: the compiled loops
    decline it and the same plan's BLAS alternative runs; einsum's product to rounding."""
    P = rng.standard_normal((16, 120, 100)).transpose(1, 2, 0)
    U = rng.standard_normal((100, 16))
    plan = plan_contraction("abz,bz->az", P, U)
    assert plan.compiled is CompiledKernel.RANK_OUTER_DOT
    raw = np.zeros(P.nbytes + 8, np.uint8)
    odd = np.frombuffer(raw.data, np.float64, P.size, offset=1).reshape(16, 120, 100)
    odd[...] = P.transpose(2, 0, 1)
    Q = odd.transpose(1, 2, 0)
    assert not Q.flags.aligned and Q.strides == P.strides
    assert not bd.rank_outer_gemv(Q, U, np.empty((120, 16)), 1)
    got = plan(Q, U)
    _close(got, Q, U, "abz,bz->az")
    np.testing.assert_allclose(got, plan(P, U), rtol=0, atol=64 * np.finfo(np.float64).eps * np.abs(got).max())


@pytest.mark.parametrize("bw", ["40e9", "22e9", "15e9", "5e9"])
def test_the_choice_does_not_move_with_the_calibration(bw, monkeypatch):
    """The compiled dot products are weighed against BLAS's batch in the cost model's own units: weighed with
    the calibrated bandwidth, a calibration made under memory load (15 GB/s a core for 22 idle) flipped CP-ALS's
    rank-outer steps to BLAS, and so the bits of the same call."""
    from tuckerkit.engine import _contract

    monkeypatch.setenv("TUCKERKIT_ROOFLINE", f"bw={bw},peak=4.4e10")
    _contract._cached_plan.cache_clear()
    try:
        P = np.zeros((10, 200, 180)).transpose(1, 2, 0)  # a rank-outer partial, as CP-ALS's dimension tree makes
        plan = plan_contraction("abz,bz->az", P, np.zeros((180, 10)))
        assert plan.compiled is CompiledKernel.RANK_OUTER_DOT, plan.explain()
        assert "compiled (model)" in plan.explain()
        Y = np.zeros((200, 180, 10))
        plan = plan_contraction("abz,bz->az", Y, np.zeros((180, 10)))
        assert plan.compiled is CompiledKernel.BATCHED_DOT, plan.explain()
    finally:
        _contract._cached_plan.cache_clear()
