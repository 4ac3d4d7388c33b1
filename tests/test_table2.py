"""Seed Table II: all 36 single-mode 2nd x 3rd order contractions, kernel kinds and einsum oracles."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_contraction_close, make_tensor

from tuckerkit.engine import KernelKind, Remedy, contract, plan_contraction
from tuckerkit.engine._contract import operand_views
from tuckerkit.engine._plan import _blasable

_FREE = {"m": "np", "n": "mp", "p": "mn"}
_B_PATTERNS = ["k{y}{z}", "k{z}{y}", "{y}k{z}", "{z}k{y}", "{y}{z}k", "{z}{y}k"]


def table2_cases():
    """(case id, spec) in the seed's numbering: A in {mk, km, nk, kn, pk, kp}, B per _B_PATTERNS."""
    out = []
    for i, (x, k_first) in enumerate((x, kf) for x in "mnp" for kf in (False, True)):
        a = ("k" + x) if k_first else (x + "k")
        y, z = _FREE[x]
        for j, pat in enumerate(_B_PATTERNS):
            out.append((f"{i + 1}.{j + 1}", f"{a},{pat.format(y=y, z=z)}->mnp"))
    return out


CASES = table2_cases()
SEED_GEMM = {"1.1", "1.5", "2.1", "2.5", "5.1", "5.5", "6.1", "6.5"}
SEED_EXCEPTIONAL = {"3.4", "3.6", "4.4", "4.6", "5.4", "5.6", "6.4", "6.6"}
SIZES = {"m": 7, "n": 5, "p": 6, "k": 4}


def _reverse_spec(spec: str) -> str:
    lhs, out = spec.split("->")
    a, b = lhs.split(",")
    return f"{a[::-1]},{b[::-1]}->{out[::-1]}"


def test_table_has_36_distinct_cases():
    assert len({spec for _, spec in CASES}) == 36
    assert len(SEED_GEMM) == 8 and len(SEED_EXCEPTIONAL) == 8


@pytest.mark.parametrize(("case", "spec"), CASES, ids=[c for c, _ in CASES])
@pytest.mark.parametrize("convention", ["seed_column_major", "translated_row_major"])
def test_kernel_kind_matches_seed(case, spec, convention, rng):
    """Column-major operands and output (the seed's convention), and the same memory seen in C order."""
    if convention == "translated_row_major":
        spec = _reverse_spec(spec)
        order = "C"
    else:
        order = "F"
    lhs, outs = spec.split("->")
    a, b = lhs.split(",")
    A = np.asarray(rng.standard_normal([SIZES[c] for c in a]), order=order)
    B = np.asarray(rng.standard_normal([SIZES[c] for c in b]), order=order)
    out = np.empty([SIZES[c] for c in outs], order=order)
    plan = plan_contraction(spec, A, B, out=out)
    if case in SEED_GEMM:
        assert plan.kind == KernelKind.GEMM, plan.explain()
    elif case in SEED_EXCEPTIONAL:
        assert plan.kind == KernelKind.EXCEPTIONAL, plan.explain()
        assert plan.remedy != Remedy.NONE
        assert plan.copies <= max(A.size, B.size, out.size)
    else:
        assert plan.kind == KernelKind.STRIDED_BATCHED_GEMM, plan.explain()
    if case not in SEED_EXCEPTIONAL:
        assert plan.copies == 0
        assert plan.remedy == Remedy.NONE
    res = contract(spec, A, B, out=out, plan=plan)
    assert res is out
    assert_contraction_close(res, spec, A, B, np.float64)


@pytest.mark.parametrize(("case", "spec"), CASES, ids=[c for c, _ in CASES])
def test_table2_oracle_all_layouts(case, spec, dtype, layout, rng):
    lhs, _ = spec.split("->")
    a, b = lhs.split(",")
    A = make_tensor(rng, [SIZES[c] for c in a], dtype, layout)
    B = make_tensor(rng, [SIZES[c] for c in b], dtype, layout)
    A0, B0 = A.copy(), B.copy()
    for out_layout in ("auto", "C", "F"):
        res = contract(spec, A, B, out_layout=out_layout)
        assert_contraction_close(res, spec, A, B, dtype)
        if out_layout == "C":
            assert res.flags.c_contiguous
        if out_layout == "F":
            assert res.flags.f_contiguous
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(B, B0)


@pytest.mark.parametrize(("case", "spec"), CASES, ids=[c for c, _ in CASES])
def test_views_are_blas_slices_without_copies(case, spec, rng):
    """Every non-exceptional plan hands BLAS views of the caller's memory whose 2-D slices are BLAS-legal."""
    lhs, outs = spec.split("->")
    a, b = lhs.split(",")
    A = np.asfortranarray(rng.standard_normal([SIZES[c] for c in a]))
    B = np.asfortranarray(rng.standard_normal([SIZES[c] for c in b]))
    out = np.empty([SIZES[c] for c in outs], order="F")
    plan = plan_contraction(spec, A, B, out=out)
    av, bv, cv, target = operand_views(plan, A, B, out)
    if plan.remedy == Remedy.NONE:
        assert np.shares_memory(av, A) and np.shares_memory(bv, B) and np.shares_memory(cv, out)
        assert target is None
    for view in (av, bv, cv):
        r, c = view.shape[-2:]
        sr, sc = (s // view.itemsize for s in view.strides[-2:])
        if r > 1 and c > 1:
            assert _blasable(sr, r, sc, c), (view.shape, view.strides)


#: the cases whose B has the reduction last and whose free output is one GEMM (seed Table II, n = 64)
_K_LAST_GEMM = ["1.5", "1.6", "2.5", "2.6", "3.5", "3.6", "4.5", "4.6", "5.6", "6.6"]


@pytest.mark.parametrize("case", _K_LAST_GEMM)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_free_output_rows_from_the_larger_operand(case, dtype, rng):
    """SGEMM with the larger operand's reduction at unit stride: the free output is laid out so that BLAS's
    rows run over that operand (the output's unit stride in A's free mode), where short rows ran 1.10-1.41x
    slower; DGEMM keeps the row-major output of the GEMM's own rows and columns (no preference measured)."""
    spec = dict(CASES)[case]
    lhs, outs = spec.split("->")
    a, b = lhs.split(",")
    A = rng.standard_normal([64] * len(a)).astype(dtype)
    B = rng.standard_normal([64] * len(b)).astype(dtype)
    plan = plan_contraction(spec, A, B)
    assert plan.kind == KernelKind.GEMM and plan.copies == 0
    res = contract(spec, A, B, plan=plan)
    assert_contraction_close(res, spec, A, B, dtype)
    free_a = next(c for c in a if c != "k")
    unit = outs[int(np.argmin(res.strides))]
    if dtype == np.float32:
        assert unit == free_a, (plan.explain(), res.strides)
    else:
        assert unit != free_a, (plan.explain(), res.strides)
