"""Bandwidth-bound contractions: matrix-vector products cut by their bytes, a summed batch of matrix-vector
products instead of a copy of the tensor, outer products written by numpy's multiply.

Each is checked against ``numpy.einsum`` (float64 references, tolerances from the dtype's eps), for the bits it
must keep (one call against its pieces, any number of workers), and for what it must not do (copy the tensor).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tuckerkit.engine import ExecutionPolicy, contract, plan_contraction
from tuckerkit.engine import _contract as contract_mod
from tuckerkit.engine import _plan as plan_mod
from tuckerkit.engine._plan import KernelKind, Remedy


def _close(got, A, B, spec):
    a, b = (np.asarray(x, np.float64) for x in (A, B))
    ref = np.einsum(spec, a, b)
    mag = np.einsum(spec, np.abs(a), np.abs(b))
    eps = np.finfo(np.asarray(got).dtype).eps
    n_terms = max(1, a.size * b.size // max(ref.size, 1))
    assert got.shape == ref.shape
    assert np.all(np.abs(np.asarray(got, np.float64) - ref) <= 4 * n_terms ** 0.5 * eps * mag + 1e-300)


@pytest.fixture
def fresh_plans():
    contract_mod._cached_plan.cache_clear()
    yield
    contract_mod._cached_plan.cache_clear()


@pytest.mark.parametrize(("spec", "sa", "sb"), [
    ("abc,ac->b", (40, 30, 20), (40, 20)),
    ("abc,ca->b", (40, 30, 20), (20, 40)),
    ("abcd,ad->bc", (12, 10, 9, 8), (12, 8)),
    ("abcd,bd->ac", (12, 10, 9, 8), (10, 8)),
    ("ac,abc->b", (40, 20), (40, 30, 20)),
])
def test_summed_batch_of_matrix_vector_products_copies_nothing(spec, sa, sb, dtype, rng, fresh_plans, monkeypatch):
    """The contracted modes sit on either side of a kept one in the tensor, and the other operand keeps no mode:
    one matrix-vector product per index of the looped mode, summed, where the planner had copied the tensor."""
    A = rng.standard_normal(sa).astype(dtype)
    B = rng.standard_normal(sb).astype(dtype)
    plan = plan_contraction(spec, A, B)
    assert plan.remedy == Remedy.SUMMED_BATCH and plan.copies == 0, plan.explain()
    assert plan.inner_kind in (KernelKind.GEMV, KernelKind.BATCHED_GEMV)
    assert "(remedy: summed_batch, then" in plan.explain()
    A0, B0 = A.copy(), B.copy()
    got = contract(spec, A, B, plan=plan)
    _close(got, A, B, spec)
    assert np.array_equal(A, A0) and np.array_equal(B, B0)
    # the same numbers from one worker and three (the cut is the sizes')
    for w in (1, 3):
        assert contract(spec, A, B, policy=ExecutionPolicy(w)).tobytes() == got.tobytes()
    monkeypatch.setattr(plan_mod, "SUMMED_GEMV", False)  # the former plan: a copy of the tensor
    contract_mod._cached_plan.cache_clear()
    before = plan_contraction(spec, A, B)
    assert before.remedy in (Remedy.COPY_A, Remedy.COPY_B) and before.copies == max(A.size, B.size), before.explain()
    _close(contract(spec, A, B, plan=before), A, B, spec)


def test_summed_matrix_vector_products_hold_no_copy_of_the_tensor(rng, fresh_plans):
    A = rng.standard_normal((200, 90, 80))
    B = rng.standard_normal((200, 80))
    contract("abc,ac->b", A, B)  # (plans and pools made)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    got = contract("abc,ac->b", A, B)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert peak < 0.05 * A.nbytes, peak  # (the copy remedy held A's 11.5 MB again)
    _close(got, A, B, "abc,ac->b")


@pytest.mark.parametrize(("spec", "sa", "sb", "how"), [
    ("abc,c->ab", (100, 80, 40), (40,), "rows"),
    ("abc,a->bc", (40, 50, 600), (40,), "rows"),  # a transposed matrix with long runs: its rows
    ("ab,a->b", (60, 8000), (60,), "rows"),  # (the same, as the planner lays it out)
    ("a,ab->b", (60,), (60, 8000), "cols"),  # a vector times a matrix: its columns
    ("abc,b->ac", (100, 40, 80), (40,), "batch"),  # a batch of matrix-vector products: the batch
    ("abc,ab->c", (100, 80, 40), (100, 80), "reduction"),  # a transposed matrix in short runs: its reduction
    ("abc,abc->", (60, 50, 40), (60, 50, 40), "reduction"),  # a dot product
])
def test_matrix_vector_products_cut_by_bytes(spec, sa, sb, how, dtype, rng, monkeypatch):
    """A bandwidth-bound product of a few MB is cut into pieces by its sizes alone: over its batch, its rows or its
    columns, else its reduction (the partial products added in piece order). The same bits for one worker, two or
    three; the bits may differ from the uncut call's, as for any cut. (Products below ``PIN_FLOPS`` run as one call
    before any cut is weighed: these are above it.)"""
    A = rng.standard_normal(sa).astype(dtype)
    B = rng.standard_normal(sb).astype(dtype)
    monkeypatch.setattr(contract_mod, "STREAM_PIECE_BYTES", 1 << 62)  # one call
    _close(contract(spec, A, B), A, B, spec)
    calls = []
    split_batch, split_1d = contract_mod._split_batch, contract_mod._split_1d
    monkeypatch.setattr(contract_mod, "_split_batch",
                        lambda *a, **k: (calls.append(("batch", k["bounds"])), split_batch(*a, **k)))
    monkeypatch.setattr(contract_mod, "_split_1d", lambda av, bv, cv, h, bounds, pol: (
        calls.append((h, bounds)), split_1d(av, bv, cv, h, bounds, pol)))
    monkeypatch.setattr(contract_mod, "STREAM_PIECE_BYTES", 1 << 10)  # pieces of 1 KB
    if how != "reduction":  # (short runs: 512 columns a piece would leave these the reduction)
        monkeypatch.setattr(contract_mod, "STREAM_MIN_COLUMNS", 4)
    first = contract(spec, A, B, policy=ExecutionPolicy(1))
    _close(first, A, B, spec)
    for w in (2, 3):
        got = contract(spec, A, B, policy=ExecutionPolicy(w))
        assert got.tobytes() == first.tobytes(), (spec, w)
    assert calls and {h for h, _ in calls} == {how} and all(len(b) > 2 for _, b in calls), calls


def test_stream_cut_rules():
    """The rows of a transposed matrix are cut only where each piece keeps long runs of them, a vector times a
    matrix only over wide columns; else the reduction; a matrix product or a few bytes never."""
    pol = ExecutionPolicy(2)

    def cut(av, bv):
        cv = np.empty(av.shape[:-1] + bv.shape[-1:])
        got = []
        split_1d = contract_mod._split_1d
        try:
            contract_mod._split_1d = lambda av, bv, cv, h, b, p: (got.append((h, b)), split_1d(av, bv, cv, h, b, p))
            ran = contract_mod._stream_split(av, bv, cv, pol)
        finally:
            contract_mod._split_1d = split_1d
        if ran:
            np.testing.assert_allclose(cv, av @ bv, rtol=1e-12, atol=1e-9)
        return got[0] if ran else None

    big = 1 << 20  # (8 MB of float64: two pieces)
    assert cut(np.ones((big // 8, 8)), np.ones((8, 1))) == ("rows", [0, big // 16, big // 8])
    assert cut(np.ones((big // 8, 8)).T, np.ones((big // 8, 1))) == ("reduction", [0, big // 16, big // 8])
    assert cut(np.ones((8, big // 8)).T, np.ones((8, 1))) == ("rows", [0, big // 16, big // 8])  # long runs
    assert cut(np.ones((1, 64)), np.ones((64, big // 64))) == ("cols", [0, big // 128, big // 64])
    assert cut(np.ones((1, big // 64)), np.ones((big // 64, 64))) == ("reduction", [0, big // 128, big // 64])
    assert cut(np.ones((1, big)), np.ones((big, 1))) == ("reduction", [0, big // 2, big])  # a dot product
    assert cut(np.ones((4, 4)), np.ones((4, 1))) is None  # a few bytes: one call
    assert cut(np.ones((16, 16)), np.ones((16, 16))) is None  # a matrix product: not this rule's


def test_a_cut_reduction_copies_no_piece(rng):
    """A narrow matrix times a vector (too few rows to cut) is cut along its reduction; its pieces (a few rows'
    halves, strided) are read in place, not copied."""
    av = rng.standard_normal((3, 1 << 19))  # 12 MB, three rows
    bv = rng.standard_normal((1 << 19, 1))
    cv = np.empty((3, 1))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    assert contract_mod._stream_split(av, bv, cv, ExecutionPolicy(2))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert peak < 0.01 * av.nbytes, peak
    np.testing.assert_allclose(cv, av @ bv, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize(("spec", "sa", "sb"), [
    ("az,bz->abz", (70, 6), (50, 6)),
    ("az,bz->zab", (70, 6), (50, 6)),
    ("a,b->ab", (300,), (200,)),
    ("a,b->ba", (300,), (200,)),
    ("ab,c->abc", (30, 20), (16,)),
    ("ab,c->cab", (30, 20), (16,)),
])
def test_outer_products_by_multiply_keep_the_bits(spec, sa, sb, dtype, rng, monkeypatch):
    """No reduction: each element is one product, rounded once, whoever writes it (numpy's multiply in the
    output's memory order, or the GER batch it replaces), equal to einsum's."""
    A = rng.standard_normal(sa).astype(dtype)
    B = rng.standard_normal(sb).astype(dtype)
    got = contract(spec, A, B)
    assert np.array_equal(got, np.einsum(spec, A, B))
    monkeypatch.setattr(contract_mod, "OUTER_BY_UFUNC", False)
    assert np.array_equal(contract(spec, A, B), got)
    out = np.full(got.shape, np.nan, dtype)
    monkeypatch.setattr(contract_mod, "OUTER_BY_UFUNC", True)
    contract(spec, A, B, out=out)
    assert np.array_equal(out, got)
    # complex operands keep BLAS's path, and its numbers
    Ac, Bc = A + 1j * A[::-1], B - 2j * B
    np.testing.assert_allclose(contract(spec, Ac, Bc), np.einsum(spec, Ac, Bc), rtol=8 * np.finfo(dtype).eps)
