"""Planned calls on the arrays a plan was made for (the lean path): same results and bits as the full checks,
every check still raised, and the batch-major output of a batch whose C-ordered slices would have gaps."""

from __future__ import annotations

import numpy as np
import pytest
from test_table2 import CASES  # the seed's 36 Table II cases, numbered as the seed does

from tuckerkit.engine import KernelKind, contract, plan_contraction


def _tol(dtype) -> float:
    # a length-n reduction of products of O(1) numbers: a few n eps relative to the largest entry
    return 8 * 16 * float(np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("case", "spec"), CASES, ids=[c for c, _ in CASES])
def test_table2_planned_calls_match_einsum_and_the_checked_path_bitwise(case, spec, dtype):
    rng = np.random.default_rng(int(case.replace(".", "")))
    n = 7
    A = rng.standard_normal((n, n)).astype(dtype)
    B = rng.standard_normal((n, n, n)).astype(dtype)
    plan = plan_contraction(spec, A, B)
    first = contract(spec, A, B, plan=plan)  # the checked path (this spelling not yet seen)
    again = contract(spec, A, B, plan=plan)  # the lean path
    called = plan(A, B)
    fresh = contract(spec, A, B)  # no plan: the cached plan, the general path
    ref = np.einsum(spec, A.astype(np.float64), B.astype(np.float64))
    scale = max(float(np.max(np.abs(ref))), 1.0)
    assert np.max(np.abs(again - ref)) <= _tol(dtype) * scale
    assert again.dtype == np.dtype(dtype) and again.shape == ref.shape
    for other in (first, called, fresh):
        np.testing.assert_array_equal(again, other)
    assert again is not first and not np.shares_memory(again, first)  # a fresh output every call


def test_lean_path_keeps_every_check(rng):
    A = rng.standard_normal((6, 5))
    B = rng.standard_normal((5, 4, 3))
    plan = plan_contraction("mk,knp->mnp", A, B)
    contract("mk,knp->mnp", A, B, plan=plan)
    contract("mk,knp->mnp", A, B, plan=plan)  # the spelling is now known: later calls take the lean path
    with pytest.raises(ValueError, match=r"plan was made for shapes"):
        contract("mk,knp->mnp", A, rng.standard_normal((5, 4, 2)), plan=plan)
    with pytest.raises(ValueError, match=r"plan was made for strides"):
        contract("mk,knp->mnp", np.asfortranarray(A), B, plan=plan)
    with pytest.raises(ValueError, match=r"plan was made for dtype float64; received float32"):
        contract("mk,knp->mnp", A.astype(np.float32), B.astype(np.float32), plan=plan)
    with pytest.raises(ValueError, match=r"plan was made for spec 'mk,knp->mnp'; received spec 'mk,knp->mpn'"):
        contract("mk,knp->mpn", A, B, plan=plan)
    with pytest.raises(ValueError, match=r"copies='sometimes' is not valid"):
        contract("mk,knp->mnp", A, B, plan=plan, copies="sometimes")
    with pytest.raises(ValueError, match=r"out_layout='K' is not valid"):
        contract("mk,knp->mnp", A, B, plan=plan, out_layout="K")
    with pytest.raises(TypeError, match=r"spec must be a string"):
        contract(["mk,knp->mnp"], A, B, plan=plan)
    with pytest.raises(TypeError, match=r"plan must be a ContractionPlan"):
        contract("mk,knp->mnp", A, B, plan="not a plan")
    # an equivalent spelling is accepted (checked once, then on the lean path) and gives the same bits
    ref = contract("mk,knp->mnp", A, B, plan=plan)
    np.testing.assert_array_equal(contract("mk, knp -> mnp", A, B, plan=plan), ref)
    np.testing.assert_array_equal(contract("mk, knp -> mnp", A, B, plan=plan), ref)
    # integer operands are promoted, then checked against the plan's dtype
    with pytest.raises(ValueError, match=r"plan was made for dtype float32; received float64"):
        contract("mk,knp->mnp", A.astype(np.int64), B.astype(np.int64),
                 plan=plan_contraction("mk,knp->mnp", A.astype(np.float32), B.astype(np.float32)))


def test_plan_call_lean_path_keeps_its_checks(rng):
    A = rng.standard_normal((6, 5))
    B = rng.standard_normal((5, 4, 3))
    plan = plan_contraction("mk,knp->mnp", A, B)
    np.testing.assert_array_equal(plan(A, B), contract("mk,knp->mnp", A, B, plan=plan))
    with pytest.raises(ValueError, match=r"plan was made for dtype float64; received A of dtype float32"):
        plan(A.astype(np.float32), B)
    with pytest.raises(TypeError, match=r"A must be a numpy or cupy array for a plan call; received list"):
        plan(A.tolist(), B)
    with pytest.raises(ValueError, match=r"plan was made for strides"):
        plan(A, np.asfortranarray(B))
    out = np.empty((6, 4, 3))
    with pytest.raises(ValueError, match=r"plan was made for out strides a fresh array"):
        plan(A, B, out)


def test_pre_summed_and_copied_operands_on_the_lean_path(rng):
    # a summed mode (no views-only steps) and an exceptional remedy take the general executor
    A = rng.standard_normal((4, 3, 5))
    B = rng.standard_normal((5, 6))
    plan = plan_contraction("asi,ij->aj", A, B)
    ref = np.einsum("asi,ij->aj", A, B)
    for _ in range(2):
        np.testing.assert_allclose(contract("asi,ij->aj", A, B, plan=plan), ref, rtol=1e-12, atol=1e-12)
    X = rng.standard_normal((4, 5, 6))[:, ::2, :]
    Y = rng.standard_normal((6, 3))
    plan = plan_contraction("abk,kc->abc", X, Y)
    for _ in range(2):
        np.testing.assert_allclose(contract("abk,kc->abc", X, Y, plan=plan), np.einsum("abk,kc->abc", X, Y),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ["1.3", "2.3", "5.4", "6.4"])
def test_gapped_batch_output_is_laid_out_batch_major(case, rng):
    """A batch over a middle mode of a C-ordered output writes slices with gaps between rows: a free output is
    allocated batch-major instead (a permuted view, as numpy.einsum may return); out_layout='C' keeps C."""
    spec = dict(CASES)[case]
    n = 8
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n, n))
    auto = plan_contraction(spec, A, B)
    fixed = plan_contraction(spec, A, B, out_layout="C")
    assert auto.kind == fixed.kind == KernelKind.STRIDED_BATCHED_GEMM
    batch = auto.batch_modes[0]
    assert auto.strides[2] == () and auto.batch_strides[0][2] == n * n  # the batch mode is outermost
    ref = np.einsum(spec, A, B)
    got, got_c = contract(spec, A, B, plan=auto), contract(spec, A, B, plan=fixed)
    assert not got.flags.c_contiguous and got_c.flags.c_contiguous
    assert got.strides["mnp".index(batch)] == n * n * got.itemsize
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got, got_c)  # the same GEMMs on dense or gapped slices


def _fast_plans():
    from tuckerkit.engine import _contract

    return _contract._FAST_PLANS


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_a_repeated_default_call_reuses_its_plan_with_the_same_bits(dtype, rng):
    """``contract`` with every option at its default on numpy operands of one floating dtype keeps the plan it
    made under the spec, shapes, strides, dtype and default policy, and a repeat runs it on the bound route:
    the same bits as the first call, as the plan's own call and as a call with ``policy=`` given (the full
    path); a fresh output each time; the operands unchanged."""
    A = rng.standard_normal((30, 40)).astype(dtype)
    B = rng.standard_normal((40, 50, 6)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        A = A + 1j * rng.standard_normal(A.shape)
        B = B + 1j * rng.standard_normal(B.shape)
    A0, B0 = A.copy(), B.copy()
    fast = _fast_plans()
    fast.clear()
    first = contract("mk,knp->mnp", A, B)
    assert len(fast) == 1
    (key, plan), = fast.items()
    assert key[:6] == ("mk,knp->mnp", A.shape, A.strides, B.shape, B.strides, A.dtype)
    again = contract("mk,knp->mnp", A, B)
    np.testing.assert_array_equal(again, first)
    assert not np.shares_memory(again, first)
    np.testing.assert_array_equal(plan(A, B), first)
    from tuckerkit.engine import default_policy

    np.testing.assert_array_equal(contract("mk,knp->mnp", A, B, policy=default_policy()), first)
    ref = np.einsum("mk,knp->mnp", A.astype(np.complex128), B.astype(np.complex128))
    assert np.max(np.abs(again - ref)) <= _tol(dtype) * 40 / 16 * max(float(np.max(np.abs(ref))), 1.0)
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(B, B0)


def test_the_kept_plans_are_told_apart_by_strides_and_dtype_and_skip_converted_operands(rng):
    """A transposed view, another dtype or byte order and an operand ``contract`` converts (integers promoted, a
    misaligned view copied) never take a plan kept for other operands: each result is einsum's; converted operands and
    calls with any option given keep no plan; the kept plans stay within their bound."""
    from tuckerkit.engine import _contract

    fast = _fast_plans()
    fast.clear()
    A = rng.standard_normal((20, 20))
    B = rng.standard_normal((20, 20))
    for a, b in ((A, B), (A.T, B), (A, B.T), (A.astype(np.float32), B.astype(np.float32))):
        got = contract("ij,jk->ik", a, b)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert np.max(np.abs(got - ref)) <= _tol(a.dtype) * 20 / 16 * float(np.max(np.abs(ref)))
        np.testing.assert_array_equal(contract("ij,jk->ik", a, b), got)  # (the kept plan: the same bits)
    assert len(fast) == 4
    swapped = A.astype(">f8")  # (another byte order: never a native plan's)
    np.testing.assert_allclose(contract("ij,jk->ik", swapped, swapped), A @ A, rtol=0, atol=1e-12 * np.abs(A @ A).max())
    np.testing.assert_allclose(contract("ij,jk->ik", A, A), A @ A, rtol=0, atol=1e-12 * np.abs(A @ A).max())
    ints = np.arange(400).reshape(20, 20)
    np.testing.assert_array_equal(contract("ij,jk->ik", ints, ints), ints.astype(np.float64) @ ints)
    raw = np.zeros(20 * 20 * 8 + 1, np.uint8)[1:].view(np.float64).reshape(20, 20)  # (misaligned: copied)
    raw[...] = A
    np.testing.assert_allclose(contract("ij,jk->ik", raw, B), A @ B, rtol=0, atol=1e-12 * np.abs(A @ B).max())
    contract("ij,jk->ik", A, B, out_layout="F")
    contract("ij,jk->ik", A, B, copies="never")
    assert len(fast) == 4
    for n in range(_contract._FAST_MAX + 3):
        contract("i,i->", np.ones(n + 1), np.ones(n + 1))
    assert 0 < len(fast) <= _contract._FAST_MAX


def test_a_kept_plan_follows_the_default_policy(rng):
    """The default policy is part of the key: under ``threadpool_limits(1)`` (tuckerkit serial too) a call takes
    a plan made for one worker, and the same bits."""
    from threadpoolctl import threadpool_limits

    from tuckerkit.engine import default_policy

    fast = _fast_plans()
    fast.clear()
    A = rng.standard_normal((400, 300))
    B = rng.standard_normal((300, 200))
    got = contract("ij,jk->ik", A, B)
    with threadpool_limits(1):
        serial = contract("ij,jk->ik", A, B)
    assert {k[-1].workers for k in fast} == {1, default_policy().workers}
    np.testing.assert_array_equal(serial, got)


def test_the_default_policy_is_one_object_per_worker_count_and_follows_blas():
    """default_policy() hands out one (immutable) policy per worker count, read from the BLAS count the caller
    set each time: threadpool_limits(1) makes it serial at once, and the caller's count comes back after."""
    from threadpoolctl import threadpool_limits

    from tuckerkit.engine import ExecutionPolicy, default_policy

    before = default_policy()
    assert default_policy() is before
    with threadpool_limits(1):
        serial = default_policy()
        assert serial == ExecutionPolicy(workers=1) and default_policy() is serial
    assert default_policy() is before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("case", "spec"), [c for c in CASES if c[0] in ("1.1", "1.3", "2.4", "3.6", "5.2", "6.5")])
def test_one_gemm_plans_run_directly_with_the_bits_of_the_general_route(case, spec, dtype, monkeypatch):
    """A plan whose product is one GEMM on one BLAS thread (Table II at n = 32: 2 MFlop) is bound to the direct
    route, which skips cpu_matmul's checks: the same bits as cpu_matmul's route (the bound flag turned off),
    einsum within the dtype's rounding, BLAS's count restored; products below PIN_FLOPS, outer products and
    those cut into pieces are not."""
    from tuckerkit.engine import _contract

    rng = np.random.default_rng(int(case.replace(".", "")))
    n = 32
    A = rng.standard_normal((n, n)).astype(dtype)
    B = rng.standard_normal((n, n, n)).astype(dtype)
    plan = plan_contraction(spec, A, B)
    bound = _contract._bind(plan)
    assert plan.kind != KernelKind.EMPTY and bound.direct
    seen = []
    real = _contract.cpu_matmul
    monkeypatch.setattr(_contract, "cpu_matmul", lambda *a: seen.append(a[3]) or real(*a))
    got = plan(A, B)
    assert seen == []  # (the direct route)
    bound.direct = False
    general = plan(A, B)
    assert seen == [plan.flops]
    np.testing.assert_array_equal(got, general)
    ref = np.einsum(spec, A.astype(np.float64), B.astype(np.float64))
    assert np.max(np.abs(got - ref)) <= 4 * n * float(np.finfo(dtype).eps) * np.max(np.abs(ref))
    from tuckerkit.engine._policy import _PIN

    assert _PIN.inside == 0 and _PIN.saved is None
    for a_shape, b_shape, spec2 in (((8, 8), (8, 8, 8), spec),  # below PIN_FLOPS: its own unpinned call
                                    ((n, 1), (1, n, n), "mk,knp->mnp"),  # an outer product
                                    ((128, 128), (128, 128, 128), "mk,knp->mnp")):  # cut into pieces
        other = plan_contraction(spec2, np.ones(a_shape, dtype), np.ones(b_shape, dtype))
        assert not _contract._bind(other).direct, (a_shape, b_shape)


def _fast_ttm():
    from tuckerkit.engine import _ttm

    return _ttm._FAST_TTM


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "F", "view"])
@pytest.mark.parametrize(("mode", "transpose"), [(0, True), (1, False), (2, True), (-1, False)])
def test_a_repeated_ttm_reuses_its_plan_with_the_same_bits(dtype, layout, mode, transpose, rng):
    """``ttm`` on numpy arrays of one real dtype with ``out``, ``plan`` and ``device`` left out keeps the plan of
    its first call under the operands' shapes, strides, dtype, the mode, ``transpose`` and the default policy; a
    repeat runs it on the plan's bound route: the same bits as the first call and as ``ttm(..., plan=)``, a fresh
    output, einsum's values, the operands unchanged."""
    from tuckerkit.engine import ttm, ttm_plan

    base = rng.standard_normal((13, 17, 21)).astype(dtype)
    X = {"C": base, "F": np.asfortranarray(base), "view": base[::2, 1:, ::3]}[layout]
    n = mode % 3
    U = rng.standard_normal((X.shape[n], 5) if transpose else (5, X.shape[n])).astype(dtype)
    X0, U0 = X.copy(), U.copy()
    fast = _fast_ttm()
    fast.clear()
    first = ttm(X, U, mode, transpose=transpose)
    assert len(fast) == 1
    (key, plan), = fast.items()
    assert key[:8] == (X.shape, X.strides, X.dtype, U.shape, U.strides, U.dtype, mode, transpose)
    again = ttm(X, U, mode, transpose=transpose)
    np.testing.assert_array_equal(again, first)
    assert not np.shares_memory(again, first)
    assert plan is ttm_plan(X, U, mode, transpose=transpose)  # (the planner's cached plan for these operands)
    np.testing.assert_array_equal(ttm(X, U, mode, transpose=transpose, plan=plan), again)
    letters = "abc"
    u = letters[n] + "z" if transpose else "z" + letters[n]
    ref = np.einsum(f"abc,{u}->{letters[:n]}z{letters[n + 1:]}", X.astype(np.float64), U.astype(np.float64))
    assert again.dtype == np.dtype(dtype) and again.shape == ref.shape
    assert np.max(np.abs(again - ref)) <= _tol(dtype) * 21 / 16 * max(float(np.max(np.abs(ref))), 1.0)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(U, U0)


def test_ttm_kept_plans_keep_every_check_and_skip_what_the_checks_convert(rng, monkeypatch):
    """After a kept plan, a bad matrix, mode or ``transpose`` still gets its one-line error; a NumPy integer mode,
    a complex or integer operand and another layout are right (the converted ones keep no plan); the kept
    plans stay within their bound."""
    from tuckerkit.engine import _ttm, ttm

    fast = _fast_ttm()
    fast.clear()
    X = rng.standard_normal((6, 7, 8))
    U = rng.standard_normal((7, 3))
    Y = ttm(X, U, 1, transpose=True)
    np.testing.assert_array_equal(ttm(X, U, 1, transpose=True), Y)
    assert len(fast) == 1
    with pytest.raises(ValueError, match=r"U has 6 rows but mode 1 of X has size 7; expected U of shape \(7, J\)"):
        ttm(X, U[:6], 1, transpose=True)
    with pytest.raises(TypeError, match="mode must be an integer; received bool"):
        ttm(X, U, True, transpose=True)
    with pytest.raises(ValueError, match="mode=3 is out of range for a tensor with 3 modes"):
        ttm(X, U, 3, transpose=True)
    np.testing.assert_array_equal(ttm(X, U, np.int64(1), transpose=True), Y)  # (the checked path: the same plan)
    Uc = U + 1j * rng.standard_normal(U.shape)
    np.testing.assert_allclose(ttm(X, Uc, 1, transpose=True), np.einsum("abc,bz->azc", X, Uc.conj()),
                               rtol=0, atol=1e-13 * 8)
    ints = np.arange(6 * 7 * 8).reshape(6, 7, 8)
    np.testing.assert_array_equal(ttm(ints, np.ones((7, 1)), 1, transpose=True), ints.sum(axis=1, keepdims=True))
    assert len(fast) == 1  # (complex and integer calls keep none)
    Xf = np.asfortranarray(X)
    np.testing.assert_array_equal(ttm(Xf, U, 1, transpose=True), ttm(Xf, U, 1, transpose=True))
    assert len(fast) == 2 and np.max(np.abs(ttm(Xf, U, 1, transpose=True) - Y)) <= 1e-13 * np.max(np.abs(Y))
    monkeypatch.setattr(_ttm, "_FAST_TTM_MAX", 3)
    for k in range(5):
        ttm(np.ones((k + 2, 3)), np.ones((3, 2)), 1, transpose=True)
    assert 0 < len(fast) <= 3


def test_a_kept_ttm_plan_follows_the_default_policy(rng):
    """Under ``threadpool_limits(1)`` (tuckerkit serial too) a repeated ``ttm`` takes a plan made for one worker:
    the same bits (every output element is one in-order sum for any number of workers)."""
    from threadpoolctl import threadpool_limits

    from tuckerkit.engine import default_policy, ttm

    fast = _fast_ttm()
    fast.clear()
    X = rng.standard_normal((100, 90, 80))
    U = rng.standard_normal((90, 10))
    got = ttm(X, U, 1, transpose=True)
    with threadpool_limits(1):
        serial = ttm(X, U, 1, transpose=True)
        np.testing.assert_array_equal(ttm(X, U, 1, transpose=True), serial)
    assert {k[-1].workers for k in fast} == {1, default_policy().workers}
    assert {p.policy.workers for p in fast.values()} == {1, default_policy().workers}
    np.testing.assert_array_equal(serial, got)
    np.testing.assert_array_equal(ttm(X, U, 1, transpose=True), got)
