"""contract / plan_contraction: random contractions (hypothesis), layouts, out=, reuse, dtypes, bad input."""

from __future__ import annotations

import string
import tracemalloc

import numpy as np
import pytest
from conftest import assert_contraction_close, make_tensor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuckerkit.engine import ContractionPlan, KernelKind, Remedy, contract, plan_contraction


@st.composite
def contractions(draw):
    """Random pairwise contractions: orders <= 6, any mix of batch/free/contracted/summed indices."""
    letters = list(string.ascii_lowercase[:10])
    n_idx = draw(st.integers(2, 8))
    idx = letters[:n_idx]
    roles = {}
    for ch in idx:
        roles[ch] = draw(st.sampled_from(["batch", "freeA", "freeB", "contr", "contr", "freeA", "freeB", "sumA"]))
    a = [ch for ch in idx if roles[ch] in ("batch", "freeA", "contr", "sumA")]
    b = [ch for ch in idx if roles[ch] in ("batch", "freeB", "contr")]
    if not a or not b or len(a) > 6 or len(b) > 6:
        a, b = ["i", "k"], ["k", "j"]
        roles = {"i": "freeA", "k": "contr", "j": "freeB"}
    a = draw(st.permutations(a))
    b = draw(st.permutations(b))
    c = draw(st.permutations([ch for ch in roles if roles[ch] in ("batch", "freeA", "freeB")]))
    sizes = {ch: draw(st.sampled_from([1, 2, 3, 4, 5, 7])) for ch in roles}
    spec = f"{''.join(a)},{''.join(b)}->{''.join(c)}"
    la = draw(st.sampled_from(["C", "F", "view"]))
    lb = draw(st.sampled_from(["C", "F", "view"]))
    dt = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**31))
    out_kind = draw(st.sampled_from(["none", "C", "F", "auto"]))
    return spec, sizes, la, lb, dt, seed, out_kind


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contractions())
def test_random_contractions_match_einsum(case):
    spec, sizes, la, lb, dt, seed, out_kind = case
    rng = np.random.default_rng(seed)
    lhs, outs = spec.split("->")
    a, b = lhs.split(",")
    A = make_tensor(rng, [sizes[ch] for ch in a], dt, la)
    B = make_tensor(rng, [sizes[ch] for ch in b], dt, lb)
    A0, B0 = A.copy(), B.copy()
    if out_kind in ("C", "F"):
        out = np.empty([sizes[ch] for ch in outs], dtype=dt, order=out_kind)
        res = contract(spec, A, B, out=out)
        assert res is out
    else:
        res = contract(spec, A, B, out_layout="auto" if out_kind == "auto" else "C")
    assert_contraction_close(res, spec, A, B, dt)
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(B, B0)
    plan = plan_contraction(spec, A, B)
    if plan.remedy == Remedy.NONE:
        assert plan.copies == 0


def test_higher_order_8way(rng):
    A = make_tensor(rng, (2, 3, 2, 3, 2, 2, 3, 2), np.float64, "C")
    B = make_tensor(rng, (3, 2, 3, 2, 2, 3, 2, 2), np.float64, "F")
    spec = "abcdefgh,gfbiedjk->achijk"
    assert_contraction_close(contract(spec, A, B), spec, A, B, np.float64)


def test_out_is_written_in_place(rng):
    A = rng.standard_normal((8, 9))
    B = rng.standard_normal((9, 10, 11))
    out = np.full((8, 10, 11), np.nan)
    res = contract("mk,knp->mnp", A, B, out=out)
    assert res is out and np.shares_memory(res, out)
    np.testing.assert_allclose(out, np.einsum("mk,knp->mnp", A, B), rtol=1e-12, atol=1e-12)


def test_out_view_into_bigger_array(rng):
    A = rng.standard_normal((8, 9))
    B = rng.standard_normal((10, 9, 11))
    big = np.zeros((9, 12, 11))
    out = big[1:, 1:11, :]
    contract("mk,nkp->mnp", A, B, out=out)
    np.testing.assert_allclose(big[1:, 1:11], np.einsum("mk,nkp->mnp", A, B), atol=1e-12)
    assert np.all(big[0] == 0) and np.all(big[:, 0] == 0) and np.all(big[:, 11] == 0)


def test_no_allocation_beyond_output_for_batched_gemm(rng):
    """A strided-batched plan allocates nothing but (at most) the output: views all the way to BLAS."""
    A = rng.standard_normal((64, 64))
    B = rng.standard_normal((64, 64, 64))
    out = np.empty((64, 64, 64))
    plan = plan_contraction("mk,nkp->mnp", A, B, out=out)
    assert plan.kind == KernelKind.STRIDED_BATCHED_GEMM
    for _ in range(2):  # (the first call may import modules lazily; the next looks at the BLAS libraries again)
        contract("mk,nkp->mnp", A, B, out=out, plan=plan)
    tracemalloc.start()
    contract("mk,nkp->mnp", A, B, out=out, plan=plan)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < B.nbytes // 100


def test_plan_is_frozen_printable_and_reusable(rng):
    A = rng.standard_normal((6, 5))
    B = rng.standard_normal((5, 4, 3))
    plan = plan_contraction("mk,knp->mnp", A, B)
    assert isinstance(plan, ContractionPlan)
    with pytest.raises(AttributeError):
        plan.kind = KernelKind.GEMM  # type: ignore[misc]
    text = plan.explain()
    assert "C_{m(np)} = A_{mk} B_{k(np)}" in text and "gemm" in text and "0 elements copied" in text
    assert plan.flops == 2 * 6 * 5 * 4 * 3
    A2, B2 = rng.standard_normal((6, 5)), rng.standard_normal((5, 4, 3))
    np.testing.assert_allclose(contract("mk,knp->mnp", A2, B2, plan=plan), np.einsum("mk,knp->mnp", A2, B2))
    with pytest.raises(ValueError, match=r"plan was made for shapes"):
        contract("mk,knp->mnp", rng.standard_normal((6, 5)), rng.standard_normal((5, 4, 2)), plan=plan)
    with pytest.raises(ValueError, match=r"plan was made for strides"):
        contract("mk,knp->mnp", np.asfortranarray(A2), B2, plan=plan)
    with pytest.raises(ValueError, match=r"plan was made for dtype float64; received float32"):
        contract("mk,knp->mnp", A2.astype(np.float32), B2.astype(np.float32), plan=plan)


def test_strided_batched_notation_and_strides(rng):
    A = rng.standard_normal((6, 5))
    B = rng.standard_normal((4, 5, 3))
    out = np.empty((6, 4, 3))
    plan = plan_contraction("mk,nkp->mnp", A, B, out=out)
    assert plan.kind == KernelKind.STRIDED_BATCHED_GEMM
    assert plan.batch_modes == ("n",)
    assert plan.batch_strides == ((0, 15, 3),)
    assert plan.notation() == "C_{m[n]p} = A_{mk} B_{[n]kp}"


def test_exceptional_case_reports_remedy_and_copies(rng):
    A = np.asfortranarray(rng.standard_normal((5, 4)))  # A_nk
    B = np.asfortranarray(rng.standard_normal((6, 4, 7)))  # B_pkm
    out = np.empty((7, 5, 6), order="F")
    plan = plan_contraction("nk,pkm->mnp", A, B, out=out)
    assert plan.kind == KernelKind.EXCEPTIONAL
    assert plan.remedy in (Remedy.COPY_A, Remedy.COPY_B, Remedy.COPY_OUT, Remedy.BATCHED_GEMV)
    expected = {Remedy.COPY_A: A.size, Remedy.COPY_B: B.size, Remedy.COPY_OUT: out.size, Remedy.BATCHED_GEMV: 0}
    assert plan.copies == expected[plan.remedy]
    assert "remedy" in plan.explain()


def test_auto_layout_avoids_exceptional_copies(rng):
    """With the output layout free, the seed's exceptional case 3.4 needs no copy (a permuted output)."""
    A = np.asfortranarray(rng.standard_normal((50, 40)))
    B = np.asfortranarray(rng.standard_normal((60, 40, 70)))
    plan = plan_contraction("nk,pkm->mnp", A, B, out_layout="auto")
    assert plan.copies == 0 and plan.remedy == Remedy.NONE
    assert_contraction_close(contract("nk,pkm->mnp", A, B), "nk,pkm->mnp", A, B, np.float64)


@pytest.mark.parametrize(
    ("spec", "shapes", "kind"),
    [
        ("k,k->", [(7,), (7,)], KernelKind.DOT),
        ("ik,k->i", [(5, 7), (7,)], KernelKind.GEMV),
        ("i,j->ij", [(5,), (6,)], KernelKind.GER),
        ("bk,bk->b", [(4, 7), (4, 7)], KernelKind.BATCHED_DOT),
        ("bik,bk->bi", [(4, 5, 7), (4, 7)], KernelKind.BATCHED_GEMV),
        ("bik,bkj->bij", [(4, 5, 7), (4, 7, 6)], KernelKind.STRIDED_BATCHED_GEMM),
        ("bcik,bckj->bcij", [(3, 4, 5, 7), (3, 4, 7, 6)], KernelKind.STRIDED_BATCHED_GEMM),
        ("bcik,cbkj->bcij", [(3, 4, 5, 7), (4, 3, 7, 6)], KernelKind.NESTED_BATCHED_GEMM),
    ],
)
def test_degenerate_and_batched_kinds(spec, shapes, kind, rng):
    A, B = (rng.standard_normal(s) for s in shapes)
    plan = plan_contraction(spec, A, B, out_layout="C")
    assert plan.kind == kind, plan.explain()
    assert_contraction_close(contract(spec, A, B), spec, A, B, np.float64)


def test_implicit_output_and_summed_index(rng):
    A, B = rng.standard_normal((3, 4, 5)), rng.standard_normal((4, 6))
    np.testing.assert_allclose(contract("ijk,jl", A, B), np.einsum("ijk,jl", A, B), atol=1e-12)
    plan = plan_contraction("ijk,jl->kl", A, B)
    assert plan.summed_modes == ("i",)
    np.testing.assert_allclose(contract("ijk,jl->kl", A, B), np.einsum("ijk,jl->kl", A, B), atol=1e-12)


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [((0, 4), (4, 5)), ((3, 0), (0, 5)), ((3, 4), (4, 0)), ((1, 4), (4, 1)), ((1, 1), (1, 1))],
)
def test_size_zero_and_one_modes(shape_a, shape_b, rng):
    A, B = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    res = contract("ik,kj->ij", A, B)
    np.testing.assert_allclose(res, A @ B, atol=1e-14)
    assert res.shape == (shape_a[0], shape_b[1])


def test_size_one_modes_in_3d(rng):
    A, B = rng.standard_normal((1, 5)), rng.standard_normal((5, 1, 7))
    assert_contraction_close(contract("mk,knp->mnp", A, B), "mk,knp->mnp", A, B, np.float64)


@pytest.mark.parametrize("dt", [np.int32, np.int64, np.bool_, np.uint8])
def test_integer_and_bool_promote_to_float64(dt):
    A = np.ones((3, 4), dtype=dt)
    B = np.ones((4, 2), dtype=dt)
    res = contract("ik,kj->ij", A, B)
    assert res.dtype == np.float64
    np.testing.assert_array_equal(res, np.full((3, 2), 4.0))


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex64, np.complex128])
def test_float_and_complex_preserved(dt, rng):
    A = (rng.standard_normal((3, 4)) + (1j * rng.standard_normal((3, 4)) if np.dtype(dt).kind == "c" else 0)).astype(dt)
    B = rng.standard_normal((4, 5, 2)).astype(dt)
    res = contract("mk,knp->mnp", A, B)
    assert res.dtype == np.dtype(dt)
    np.testing.assert_allclose(res, np.einsum("mk,knp->mnp", A, B), rtol=np.finfo(dt).eps * 100)


def test_mixed_precision_promotes_to_float64(rng):
    """float32 with float64: computed in float64 (not in float32 and cast up: 6e-8 off)."""
    A, B = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2))
    res = contract("ik,kj->ij", A, B)
    assert res.dtype == np.float64
    np.testing.assert_allclose(res, A.astype(np.float64) @ B, rtol=0, atol=16 * np.finfo(np.float64).eps)


def test_negative_strides(rng):
    A = rng.standard_normal((6, 5))[::-1]
    B = rng.standard_normal((5, 4, 3))[:, ::-1, :]
    assert_contraction_close(contract("mk,knp->mnp", A, B), "mk,knp->mnp", A, B, np.float64)


def test_broadcast_stride_zero_operand(rng):
    A = np.broadcast_to(rng.standard_normal((1, 5)), (6, 5))
    B = rng.standard_normal((5, 4))
    np.testing.assert_allclose(contract("ik,kj->ij", A, B), A @ B, atol=1e-12)


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("mk,knp", None),
        ("mk->mnp", r"names 1 operand\(s\); contract\(\) takes exactly 2"),
        ("mk,kn,np->m", r"names 3 operand\(s\)"),
        ("m1,knp->mnp", r"subscripts of A contain '1'; expected ASCII letters only"),
        ("mk,knp->mnn", r"output index 'n' is repeated"),
        ("mk,knp->mnq", r"output index 'q' appears in neither operand"),
        ("mm,knp->np", r"index 'm' is repeated in operand A"),
        ("mk,kn->mn->x", r"more than one '->'"),
        ("mkq,knp->mnp", r"operand A has 3 subscripts but A.ndim is 2"),
    ],
)
def test_malformed_specs(spec, match, rng):
    A, B = rng.standard_normal((3, 4)), rng.standard_normal((4, 5, 6))
    if match is None:
        assert contract(spec, A, B).shape == (3, 5, 6)  # implicit output is fine
        return
    with pytest.raises(ValueError, match=match):
        contract(spec, A, B)


def test_size_mismatch_names_index(rng):
    with pytest.raises(ValueError, match=r"index 'k' has size 4 in A but size 5 in B"):
        contract("mk,knp->mnp", rng.standard_normal((3, 4)), rng.standard_normal((5, 5, 6)))


def test_non_numeric_dtypes_rejected():
    with pytest.raises(TypeError, match=r"A has dtype <U1; expected a numeric dtype"):
        contract("ik,kj->ij", np.array([["a"]]), np.ones((1, 1)))
    with pytest.raises(TypeError, match=r"B has dtype object; expected a numeric dtype"):
        contract("ik,kj->ij", np.ones((1, 1)), np.array([[object()]], dtype=object))


def test_spec_must_be_string(rng):
    with pytest.raises(TypeError, match=r"spec must be a string"):
        contract(3, rng.standard_normal((2, 2)), rng.standard_normal((2, 2)))  # type: ignore[arg-type]


def test_bad_out(rng):
    A, B = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    with pytest.raises(ValueError, match=r"out has shape \(3, 4\); expected \(3, 5\)"):
        contract("ik,kj->ij", A, B, out=np.empty((3, 4)))
    with pytest.raises(TypeError, match=r"out has dtype float32; expected float64"):
        contract("ik,kj->ij", A, B, out=np.empty((3, 5), dtype=np.float32))
    with pytest.raises(ValueError, match=r"out_layout='X' is not valid; expected one of 'auto', 'C', 'F'"):
        contract("ik,kj->ij", A, B, out_layout="X")


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("ik,kj->ij", [(400, 100), (100, 300)]),  # rows or columns split
        ("ik,kj->ij", [(8, 150000), (150000, 9)]),  # long reduction split, partial outputs added
        ("bik,bkj->bij", [(40, 100, 50), (40, 50, 70)]),  # batch split
        ("mk,nkp->mnp", [(64, 64), (64, 64, 64)]),  # strided-batched with a shared operand
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_threaded_execution_paths_match_einsum(spec, shapes, threads, rng):
    from threadpoolctl import threadpool_limits

    A, B = (rng.standard_normal(s) for s in shapes)
    plan = plan_contraction(spec, A, B)
    assert plan.parallel
    with threadpool_limits(threads, user_api="blas"):
        res = contract(spec, A, B)
    assert_contraction_close(res, spec, A, B, np.float64)


# ----------------------------------------------------------------------------------- copies="never"
def test_copies_never_forces_a_zero_copy_plan(rng):
    A = np.asfortranarray(rng.standard_normal((50, 40)))  # the seed's exceptional case 3.4, output fixed
    B = np.asfortranarray(rng.standard_normal((60, 40, 70)))
    out = np.empty((70, 50, 60), order="F")
    auto = plan_contraction("nk,pkm->mnp", A, B, out=out)
    never = plan_contraction("nk,pkm->mnp", A, B, out=out, copies="never")
    assert auto.kind == KernelKind.EXCEPTIONAL
    assert never.copies == 0 and never.remedy == Remedy.BATCHED_GEMV
    res = contract("nk,pkm->mnp", A, B, out=out, copies="never")
    assert res is out
    assert_contraction_close(res, "nk,pkm->mnp", A, B, np.float64)


def test_copies_never_keeps_blas_where_a_compiled_kernel_would_copy_the_matrix(monkeypatch, rng):
    from tuckerkit.engine import _contract as contract_mod
    from tuckerkit.engine import _plan as plan_mod
    from tuckerkit.engine import _smallgemm as sg
    from tuckerkit.engine._plan import CompiledKernel

    monkeypatch.setenv("TUCKERKIT_ROOFLINE", "bw=1e10,peak=1e10")
    monkeypatch.setattr(plan_mod, "SMALL_RANK_MIN_FLOPS", 0)
    for key in list(sg._KERNEL_EFF):
        monkeypatch.setitem(sg._KERNEL_EFF, key, (50.0, 50.0))
    contract_mod._cached_plan.cache_clear()
    try:
        X, U = rng.standard_normal((20, 30, 40)), rng.standard_normal((40, 5))  # U (I, R): (R, I) rows needed
        assert plan_contraction("abc,cz->abz", X, U).copies == 40 * 5
        never = plan_contraction("abc,cz->abz", X, U, copies="never")
        assert never.compiled is CompiledKernel.NONE and never.copies == 0 and never.estimates
        Ut = np.ascontiguousarray(U.T)  # already (R, I) rows: the kernel needs no copy
        assert plan_contraction("abc,zc->abz", X, Ut, copies="never").compiled is CompiledKernel.TTM_OUTER
        assert_contraction_close(contract("abc,cz->abz", X, U, copies="never"), "abc,cz->abz", X, U, np.float64)
    finally:
        contract_mod._cached_plan.cache_clear()


def test_copies_must_be_auto_or_never(rng):
    A, B = np.ones((3, 4)), np.ones((4, 5))
    with pytest.raises(ValueError, match=r"^copies='always' is not valid; expected one of 'auto', 'never'$"):
        plan_contraction("ik,kj->ij", A, B, copies="always")
    with pytest.raises(ValueError, match=r"^copies=None is not valid; expected one of 'auto', 'never'$"):
        contract("ik,kj->ij", A, B, copies=None)


# ------------------------------------------------------------------- a summed batch (Remedy.SUMMED_BATCH)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_summed_batch_copies_nothing_and_matches_einsum(dtype, rng):
    """``abc,acz->bz``: a and c cannot be one flattened group (b lies between them in A), so each index of a
    is one GEMM over c and the products are summed, where the planner used to copy the whole tensor."""
    X = rng.standard_normal((60, 50, 40)).astype(dtype)
    Q = rng.standard_normal((60, 40, 7)).astype(dtype)
    X0, Q0 = X.copy(), Q.copy()
    plan = plan_contraction("abc,acz->bz", X, Q)
    assert plan.kind == KernelKind.EXCEPTIONAL and plan.remedy == Remedy.SUMMED_BATCH, plan.explain()
    assert plan.copies == 0 and plan.summed_batch == ("a",) and plan.summed_size == 60 and plan.k == 40
    assert plan.flops == 2 * 60 * 50 * 40 * 7
    assert "summed batch: [a] x60" in plan.explain()
    assert plan.notation() == "C_{bz} = A_{[a]bc} B_{[a]cz}"
    res = contract("abc,acz->bz", X, Q)
    assert res.dtype == dtype
    assert_contraction_close(res, "abc,acz->bz", X, Q, dtype)
    assert_contraction_close(plan(X, Q), "abc,acz->bz", X, Q, dtype)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(Q, Q0)


def test_a_summed_batch_gives_the_same_bits_for_any_workers(rng, monkeypatch):
    from tuckerkit.engine import ExecutionPolicy
    from tuckerkit.engine import _contract as contract_mod

    X = rng.standard_normal((300, 200, 100))
    Q = rng.standard_normal((300, 100, 15))
    plan = plan_contraction("abc,acz->bz", X, Q, policy=ExecutionPolicy(workers=2))
    assert plan.remedy == Remedy.SUMMED_BATCH and plan.parallel, plan.explain()
    pieces = contract_mod.summed_pieces(300, plan.flops, 200 * 15 * 8, X.dtype)
    assert len(pieces) > 2 and pieces[0] == 0 and pieces[-1] == 300  # cut by the sizes alone
    runs = [contract("abc,acz->bz", X, Q, policy=ExecutionPolicy(workers=w)) for w in (1, 2, 3, 2)]
    for r in runs[1:]:
        np.testing.assert_array_equal(r, runs[0])
    assert_contraction_close(runs[0], "abc,acz->bz", X, Q, np.float64)
    # products a few at a time (a small temporary): the same sums to rounding
    monkeypatch.setattr(contract_mod, "SUMMED_TEMP_BYTES", 3 * 200 * 15 * 8)
    assert_contraction_close(contract("abc,acz->bz", X, Q), "abc,acz->bz", X, Q, np.float64)
    # at most SUMMED_PARTIAL_BYTES of partial sums
    monkeypatch.setattr(contract_mod, "SUMMED_PARTIAL_BYTES", 2 * 200 * 15 * 8)
    assert contract_mod.summed_pieces(300, plan.flops, 200 * 15 * 8, X.dtype) == [0, 150, 300]
    assert_contraction_close(contract("abc,acz->bz", X, Q, policy=ExecutionPolicy(workers=2)), "abc,acz->bz", X,
                             Q, np.float64)


def test_a_summed_batch_on_views_into_a_given_output(rng):
    """A strided view of a tensor and a strided output view: the products read the views, the sums land in
    ``out``, the tensor is not copied."""
    base = rng.standard_normal((90, 140, 60))
    X = base[:, 10:130, :]  # (a, b, c), rows of b 60 apart inside 140
    Q = rng.standard_normal((90, 60, 5))
    out = np.empty((120, 10), order="F")[:, ::2]  # (b, z), z two columns apart
    before = base.copy()
    plan = plan_contraction("abc,acz->bz", X, Q, out=out)
    assert plan.remedy == Remedy.SUMMED_BATCH and plan.copies == 0, plan.explain()
    res = contract("abc,acz->bz", X, Q, out=out)
    assert res is out
    assert_contraction_close(res, "abc,acz->bz", X, Q, np.float64)
    np.testing.assert_array_equal(base, before)


def test_copies_never_takes_a_summed_batch(rng):
    """Tiny operands: copying A is cheaper (``auto``: the summed batch's fixed cost, about 20 us, is more than
    the copy); ``copies="never"`` still has an evaluation on views."""
    X = rng.standard_normal((8, 6, 5))
    Q = rng.standard_normal((8, 5, 2))
    out = np.empty((6, 2), order="F")
    auto = plan_contraction("abc,acz->bz", X, Q, out=out)
    never = plan_contraction("abc,acz->bz", X, Q, out=out, copies="never")
    assert auto.remedy == Remedy.COPY_A and auto.copies == X.size, auto.explain()
    assert never.remedy == Remedy.SUMMED_BATCH and never.copies == 0, never.explain()
    res = contract("abc,acz->bz", X, Q, out=out, copies="never")
    assert res is out
    assert_contraction_close(res, "abc,acz->bz", X, Q, np.float64)


def test_a_summed_batch_of_two_modes(rng):
    """``abcd,abdz->cz``: a and b flatten into one looped group (adjacent in A and B), d is the GEMM's k."""
    X = rng.standard_normal((6, 7, 8, 9))
    Q = rng.standard_normal((6, 7, 9, 4))
    plan = plan_contraction("abcd,abdz->cz", X, Q, copies="never")
    assert plan.remedy == Remedy.SUMMED_BATCH and plan.summed_batch == ("a", "b"), plan.explain()
    assert plan.summed_size == 42 and plan.k == 9 and plan.copies == 0
    assert_contraction_close(contract("abcd,abdz->cz", X, Q, copies="never"), "abcd,abdz->cz", X, Q,
                             np.float64)
    # with a batch mode kept in the output: one product per (a, e), summed over a
    Y = rng.standard_normal((6, 5, 8, 9))  # (a, e, c, d)
    P = rng.standard_normal((6, 5, 9, 4))  # (a, e, d, z)
    p2 = plan_contraction("aecd,aedz->ecz", Y, P, copies="never")
    assert p2.copies == 0, p2.explain()
    assert_contraction_close(contract("aecd,aedz->ecz", Y, P, copies="never"), "aecd,aedz->ecz", Y, P,
                             np.float64)


@pytest.mark.parametrize("spec", ["abc,acz->bz", "abcd,bdz->acz", "abcd,adz->bcz", "abcd,acz->bdz", "abcd,dbz->acz",
                                  "abcde,bdz->acez", "abc,azc->bz"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_summed_batches_at_every_position_match_einsum(spec, order):
    """The looped mode outer, inner or in the middle of A, in C and F order, with batches of GEMMs inside each
    product: every ``copies="never"`` plan here is a summed batch, equal to einsum to the GEMM bound."""
    rng = np.random.default_rng(sum(map(ord, spec + order)))
    lhs = spec.split("->")[0].split(",")
    sizes = {ch: int(rng.integers(2, 9)) for ch in set("".join(lhs))}
    A, B = (np.asarray(rng.standard_normal([sizes[c] for c in sub]), order=order) for sub in lhs)
    plan = plan_contraction(spec, A, B, copies="never")
    assert plan.remedy == Remedy.SUMMED_BATCH and plan.copies == 0, plan.explain()
    assert plan.summed_size == int(np.prod([sizes[c] for c in plan.summed_batch]))
    assert_contraction_close(contract(spec, A, B, copies="never"), spec, A, B, np.float64)


def test_a_summed_batch_into_an_output_over_its_input(rng, monkeypatch):
    """``out`` a view into B's own buffer: the sums go to a temporary first (the products read B to the end)."""
    from tuckerkit.engine import ExecutionPolicy
    from tuckerkit.engine import _contract as contract_mod

    X = rng.standard_normal((60, 50, 40))
    buf = np.zeros((60, 60, 7))
    buf[:, :40, :] = rng.standard_normal((60, 40, 7))
    Q = buf[:, :40, :]
    ref = np.einsum("abc,acz->bz", X, Q.copy())
    monkeypatch.setattr(contract_mod, "SUMMED_TEMP_BYTES", 50 * 7 * 8)  # one product at a time
    out = buf[59, 10:60, :]  # (b, z): over rows of Q[59], which the last product reads
    assert contract_mod.summed_pieces(60, 2 * 60 * 50 * 40 * 7, out.nbytes, out.dtype) == [0, 60]  # one piece
    res = contract("abc,acz->bz", X, Q, out=out, copies="never", policy=ExecutionPolicy(workers=2))
    assert res is out
    np.testing.assert_allclose(res, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_an_output_over_an_input_gets_the_product_of_the_inputs_as_they_were(rng):
    """``out=`` a view into the tensor's own buffer, on a plan the compiled small-rank kernel runs (it writes
    ``out`` while it still reads ``X``): the result is made apart and copied in, through ``contract``, ``ttm``
    and a plan's call alike."""
    from tuckerkit.engine import ttm

    U = rng.standard_normal((10, 200))
    for run in ("contract", "ttm", "plan"):
        buf = rng.standard_normal((200, 220, 200))
        X = buf[:, :200, :]
        ref = np.einsum("abc,zb->azc", X, U)
        out = buf[:, 190:200, :]  # over the last ten rows of every slab of X
        plan = plan_contraction("abc,zb->azc", X, U, out=out)
        assert plan.compiled.value == "small_rank_ttm_inner", plan.explain()
        res = (contract("abc,zb->azc", X, U, out=out) if run == "contract" else
               ttm(X, U, 1, out=out) if run == "ttm" else plan(X, U, out))
        assert res is out
        np.testing.assert_allclose(res, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_many_tiny_products_are_priced_at_a_batched_rate(monkeypatch):
    """200000 products of (4 x 10) @ (10 x 2) ran in 19 ms against 52 ms for copying A: the cost model prices a
    product of a summed batch without a BLAS call's overhead and at least at a level-2 rate, so it is chosen;
    on operands of a few hundred elements the copy stays cheaper."""
    from tuckerkit.engine import _plan as plan_mod
    from tuckerkit.engine._contract import _cached_plan

    X, Q = np.empty((200000, 4, 10)), np.empty((200000, 10, 2))
    plan = plan_contraction("abc,acz->bz", X, Q)
    assert plan.remedy == Remedy.SUMMED_BATCH and plan.copies == 0, plan.explain()
    monkeypatch.setattr(plan_mod, "_summed_batch", lambda *a, **k: None)
    _cached_plan.cache_clear()
    try:
        before = plan_contraction("abc,acz->bz", X, Q)
    finally:
        monkeypatch.undo()
        _cached_plan.cache_clear()
    assert before.remedy == Remedy.COPY_A and plan.est_seconds < before.est_seconds
    small = plan_contraction("abc,acz->bz", np.empty((8, 6, 5)), np.empty((8, 5, 2)))
    assert small.remedy == Remedy.COPY_A, small.explain()
