"""The direct route of small dense tensors (engine/_direct.py): HOOI's and CP-ALS's sweeps, the start's TTMs and
the line search's MTTKRP straight through numpy, against einsum oracles and the planned route."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from conftest import draw as _rand
from conftest import planned_only

import tuckerkit as tk
from tuckerkit.engine._direct import (
    DIRECT_MAX_FLOPS,
    DIRECT_MTTKRP_ELEMS,
    DIRECT_SWEEP_FLOPS,
    DIRECT_TTMC_ELEMS,
    DIRECT_TTMC_ELEMS_F32_256,
    DIRECT_TTMC_ELEMS_F64,
    ROWS_MIN_ELEMS,
    DirectSweep,
    direct_applies,
    direct_mttkrp,
    direct_ttm,
    memory_order,
    operand_mttkrp,
    operand_ttm,
)
from tuckerkit.engine._operand import DenseTensor
from tuckerkit.engine._policy import ExecutionPolicy
from tuckerkit.engine._sweeps import dense_mttkrp_sweep, dense_ttmc_sweep

_L = "abcdefg"
SHAPES = [(7, 1), (5, 6, 7), (1, 4, 3), (4, 1, 5, 3), (3, 4, 1, 2, 3), (2, 3, 2, 1, 3, 2)]
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _laid_out(X, layout):
    """``X``'s values in memory order ``layout``: "C", "F", or "perm" (the axes' memory order rolled by one, as
    a chain of products leaves a tensor: neither C nor F for three or more axes of size > 1)."""
    if layout == "C":
        return np.ascontiguousarray(X)
    if layout == "F":
        return np.asfortranarray(X)
    roll = [X.ndim - 1, *range(X.ndim - 1)]
    Y = X.transpose(roll).copy(order="C").transpose(np.argsort(roll))
    assert np.array_equal(Y, X) and not np.shares_memory(Y, X)
    return Y


def _eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def _mttkrp_ref(X, factors, n):
    x = _L[:X.ndim]
    spec = ",".join([x] + [x[m] + "z" for m in range(X.ndim) if m != n]) + f"->{x[n]}z"
    ops = [X.astype(np.complex128)] + [factors[m].astype(np.complex128) for m in range(X.ndim) if m != n]
    mags = [np.abs(o) for o in ops]
    return np.einsum(spec, *ops), np.einsum(spec, *mags)


def _projection_ref(X, factors, n):
    """``X x_{m != n} U_m^H`` in complex128, and the same of the magnitudes (the rounding bound's scale)."""
    x = _L[:X.ndim]
    up = x.upper()
    keep = [m for m in range(X.ndim) if m != n]
    out = "".join(x[m] if m == n else up[m] for m in range(X.ndim))
    spec = ",".join([x] + [x[m] + up[m] for m in keep]) + "->" + out
    ops = [X.astype(np.complex128)] + [np.conj(factors[m]).astype(np.complex128) for m in keep]
    return np.einsum(spec, *ops, optimize=True), np.einsum(spec, *(np.abs(o) for o in ops), optimize=True)


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_direct_mttkrp_sweep_is_gauss_seidel_against_einsum(shape, dtype, layout, rng):
    """Each mode's MTTKRP against einsum with the factors as the sweep has left them (each update replaces
    its factor before the later modes, in mode order for an F-ordered tensor too), within the dtype's rounding;
    X unchanged; a record in place of plans."""
    R = 3
    X = _laid_out(_rand(rng, shape, dtype), layout)
    keep = X.copy()
    factors = [_rand(rng, (s, R), dtype) for s in shape]
    seen = {}

    def update(n, M):
        ref, scale = _mttkrp_ref(X, factors, n)
        seen[n] = M.dtype
        assert M.shape == (shape[n], R)
        assert np.all(np.abs(M - ref) <= 4 * (X.size // shape[n] + len(shape)) * _eps(dtype) * scale + 1e-30)
        factors[n] = _rand(rng, (shape[n], R), dtype)  # the next modes must see this one

    assert direct_applies(X, R)
    sweep = dense_mttkrp_sweep(X, factors, update, ExecutionPolicy())
    assert sorted(seen) == list(range(len(shape))) and set(seen.values()) == {np.dtype(dtype)}
    assert np.array_equal(X, keep)
    assert sweep.passes == 2 and isinstance(sweep.plans[0], DirectSweep) and sweep.plans[0].kind == "mttkrp"


@pytest.mark.parametrize("layout", ["C", "F", "perm"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_direct_ttmc_sweep_is_gauss_seidel_against_einsum(shape, dtype, layout, rng):
    """Each mode's projection against einsum with the factors as the sweep has left them, the modes in order
    whatever the tensor's memory order; every projection in the tensor's own order of axes in memory."""
    X = _laid_out(_rand(rng, shape, dtype), layout)
    keep = X.copy()
    order = memory_order(X)
    ranks = [max(1, s - 1) for s in shape]
    factors = [_rand(rng, (s, r), dtype) for s, r in zip(shape, ranks, strict=True)]
    seen = []

    def update(n, Y):
        ref, scale = _projection_ref(X, factors, n)
        assert Y.shape == ref.shape and Y.transpose(order).flags.c_contiguous
        assert np.all(np.abs(Y - ref) <= 4 * (X.size + len(shape)) * _eps(dtype) * scale + 1e-30)
        seen.append(n)
        factors[n] = _rand(rng, (shape[n], ranks[n]), dtype)

    assert direct_applies(X, max(ranks), projections=True)
    sweep = dense_ttmc_sweep(X, factors, update, ExecutionPolicy())
    assert seen == list(range(len(shape)))
    assert np.array_equal(X, keep)
    assert isinstance(sweep.plans[0], DirectSweep) and sweep.plans[0].kind == "ttmc"


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_direct_mttkrp_of_every_mode_against_einsum(shape, dtype, layout, rng):
    """Size-1 modes still scale by their factor's row (the first and the last mode included); an F-ordered
    tensor as the C-contiguous view of its memory (the modes reversed)."""
    R = 2
    X = _laid_out(_rand(rng, shape, dtype), layout)
    factors = [_rand(rng, (s, R), dtype) for s in shape]
    for n in range(len(shape)):
        M = direct_mttkrp(X, factors, n, R)
        ref, scale = _mttkrp_ref(X, factors, n)
        assert M.shape == (shape[n], R) and M.flags.c_contiguous
        assert np.all(np.abs(M - ref) <= 4 * X.size * _eps(dtype) * scale + 1e-30)


@pytest.mark.parametrize("shape", [(4, 5, 6, 3), (30, 41, 2, 27)])
@pytest.mark.parametrize("layout", ["C", "F", "perm"])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_direct_ttm_against_einsum(dtype, transpose, layout, shape, rng):
    """Every mode, against einsum within the dtype's rounding; never a copy of the tensor: the result is one
    C-contiguous buffer in some order of its axes. A C-ordered tensor gives a C-ordered result; another memory
    order is kept, except that from ROWS_MIN_ELEMS elements a product over the axis last in memory puts the new
    mode first in memory (the factor's rows against the tensor's)."""
    X = _laid_out(_rand(rng, shape, dtype), layout)
    order = memory_order(X)
    rows = layout != "C" and X.size >= ROWS_MIN_ELEMS
    for n in range(4):
        U = _rand(rng, (X.shape[n], 2) if transpose else (2, X.shape[n]), dtype)
        x = "abcd"
        spec = f"{x},{x[n] + 'z' if transpose else 'z' + x[n]}->{x[:n]}z{x[n + 1:]}"
        W = np.conj(U) if transpose else U  # transpose: U^H
        ref = np.einsum(spec, X.astype(np.complex128), W.astype(np.complex128))
        scale = np.einsum(spec, np.abs(X), np.abs(W))
        Y = direct_ttm(X, U, n, transpose)
        assert Y.dtype == X.dtype and Y.flags.c_contiguous == (layout == "C")
        last = [a for a in order if X.shape[a] > 1][-1]  # (the axis last in memory)
        want = (n, *(a for a in order if a != n)) if rows and n == last else order
        assert Y.transpose(want).flags.c_contiguous
        assert np.all(np.abs(Y - ref) <= 4 * X.shape[n] * _eps(dtype) * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("kind", ["mttkrp", "ttmc"])
def test_mid_size_products_are_cut_for_the_workers_with_the_same_bits(kind, dtype, rng, monkeypatch):
    """A product with the tensor of at least CONTRACT_PARALLEL_FLOPS (float64 terms) is cut into pieces by the
    sizes alone (cpu_matmul: the batch, rows or columns): the sweep still matches einsum within the dtype's
    rounding, and one worker gives the bits of two."""
    import tuckerkit.engine._contract as contract_mod
    import tuckerkit.engine._direct as direct_mod

    # (2 x size x R a product with X: 22.1 / 16.8 MFlop in float64 terms, above CONTRACT_PARALLEL_FLOPS; the
    # MTTKRP's tensor within DIRECT_MTTKRP_ELEMS, the projections' 4-way one within DIRECT_TTMC_ELEMS on any machine)
    shape, R = ((30, 32, 30, 32), 12) if kind == "ttmc" else ((64, 64, 64), 32)
    R *= 2 if dtype == np.float32 else 1  # (single precision counts half its flops)
    X = _rand(rng, shape, dtype)
    start = [_rand(rng, (s, R), dtype) for s in shape]
    cuts = []
    real = contract_mod.cpu_matmul
    monkeypatch.setattr(contract_mod, "cpu_matmul", lambda *a: cuts.append(a[3]) or real(*a))

    def run(workers):
        monkeypatch.setattr(direct_mod, "default_policy", lambda: ExecutionPolicy(workers=workers))
        factors = [U.copy() for U in start]
        got = {}

        def update(n, M):
            ref, scale = (_mttkrp_ref if kind == "mttkrp" else _projection_ref)(X, factors, n)
            assert np.all(np.abs(M - ref) <= 4 * (X.size // shape[n] + 3) * _eps(dtype) * scale + 1e-30)
            got[n] = np.array(M)
            factors[n] = _rand(np.random.default_rng(n), (shape[n], R), dtype)

        sweep = (dense_mttkrp_sweep if kind == "mttkrp" else dense_ttmc_sweep)(X, factors, update, ExecutionPolicy())
        assert isinstance(sweep.plans[0], DirectSweep)
        return got

    one = run(1)
    assert cuts and all(f >= 16_000_000 for f in cuts)  # (each big product went through the cut)
    two = run(2)
    assert sorted(one) == list(range(len(shape)))
    for n in one:
        assert one[n].tobytes() == two[n].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_single_mid_size_mttkrp_is_cut_with_the_same_bits(dtype, rng, monkeypatch):
    """The line search's MTTKRP of every mode: its product with the tensor cut for the workers (the reduction
    for the last mode), against einsum within the dtype's rounding, one worker's bits equal to two's."""
    import tuckerkit.engine._contract as contract_mod
    import tuckerkit.engine._direct as direct_mod

    shape, R = (64, 64, 64), 32 * (2 if dtype == np.float32 else 1)
    X = _rand(rng, shape, dtype)
    factors = [_rand(rng, (s, R), dtype) for s in shape]
    cuts = []
    real = contract_mod.cpu_matmul
    monkeypatch.setattr(contract_mod, "cpu_matmul", lambda *a: cuts.append(a[3]) or real(*a))
    for n in range(3):
        got = []
        for workers in (1, 2):
            monkeypatch.setattr(direct_mod, "default_policy", lambda w=workers: ExecutionPolicy(workers=w))
            got.append(direct_mttkrp(X, factors, n, R))
        ref, scale = _mttkrp_ref(X, factors, n)
        assert np.all(np.abs(got[0] - ref) <= 4 * X.size * _eps(dtype) * scale)
        assert got[0].tobytes() == got[1].tobytes() and got[0].flags.c_contiguous
    assert len(cuts) == 6


def test_the_route_is_chosen_by_size_and_layout(rng):
    """C-contiguous numpy arrays go direct up to DIRECT_SWEEP_FLOPS (4 * size * rank) at any size, and up to
    DIRECT_MTTKRP_ELEMS (CP-ALS) / DIRECT_TTMC_ELEMS (HOOI) elements within DIRECT_MAX_FLOPS; a larger one is
    planned. F-ordered arrays go direct too, and HOOI's projections take any order of the axes without gaps; a
    strided view (a reshape would copy it) is planned, as is CP-ALS's sweep of an order neither C nor F."""
    X = rng.standard_normal((10, 10, 10))
    assert direct_applies(X, DIRECT_MAX_FLOPS // (4 * X.size))
    assert not direct_applies(X, DIRECT_MAX_FLOPS // (4 * X.size) + 1)
    for F in (np.asfortranarray(X), np.asfortranarray(X[:, :1])):
        assert direct_applies(F, 2) and direct_applies(F, 2, projections=True)
    assert not direct_applies(np.asfortranarray(X), DIRECT_MAX_FLOPS // (4 * X.size) + 1, projections=True)
    perm = _laid_out(X, "perm")
    assert direct_applies(perm, 2, projections=True) and not direct_applies(perm, 2)
    for strided in (X[:, ::2], X[::-1], np.asfortranarray(X)[:, 1:]):
        assert not direct_applies(strided, 2) and not direct_applies(strided, 2, projections=True)
    mid = np.empty((70, 65, 60))  # (above DIRECT_MTTKRP_ELEMS; np.empty: no page touched)
    r = DIRECT_SWEEP_FLOPS // (4 * mid.size)
    assert mid.size > DIRECT_MTTKRP_ELEMS and direct_applies(mid, r) and not direct_applies(mid, r + 1)
    assert direct_applies(mid, r + 1, projections=True)
    edge = np.empty((64, 64, 64))  # (2^18 elements)
    assert direct_applies(edge, 32) and not direct_applies(np.empty((65, 64, 64)), 32)
    # HOOI's projections go further: up to DIRECT_TTMC_ELEMS elements and DIRECT_MAX_FLOPS
    big = np.empty((32, 64, 32, 32), dtype=np.float32)  # (2^21 elements; 4-way: the same bound on every machine)
    assert direct_applies(big, 10, projections=True) and not direct_applies(big, 10)
    assert not direct_applies(np.empty((33, 64, 32, 32)), 10, projections=True)
    assert not direct_applies(big, DIRECT_MAX_FLOPS // (4 * big.size) + 1, projections=True)
    U = [rng.standard_normal((10, 2)) for _ in range(3)]
    planned = dense_mttkrp_sweep(perm, U, lambda n, M: None, ExecutionPolicy())
    assert not isinstance(planned.plans[0], DirectSweep)
    direct = dense_mttkrp_sweep(np.asfortranarray(X), U, lambda n, M: None, ExecutionPolicy())
    assert isinstance(direct.plans[0], DirectSweep)
    # the operand helpers: direct for a small dense operand, the operand's own otherwise (other dtypes too)
    op = DenseTensor(X)
    np.testing.assert_array_equal(operand_ttm(op, U[1], 1, ExecutionPolicy()), direct_ttm(X, U[1], 1, True))
    np.testing.assert_array_equal(operand_mttkrp(op, U, 2, ExecutionPolicy()), direct_mttkrp(X, U, 2, 2))
    U32 = [u.astype(np.float32) for u in U]
    np.testing.assert_array_equal(operand_mttkrp(op, U32, 2, ExecutionPolicy()), op.mttkrp(U32, 2))


@pytest.mark.parametrize(("simd", "wide"), [(False, False), (True, False), (True, True)])
def test_hooi_projects_3way_tensors_directly_only_to_their_bound_where_the_kernels_run(simd, wide, rng, monkeypatch):
    """Where the compiled kernels run (AVX2 + FMA) a 3-way float64 tensor's HOOI projections run directly only up to
    DIRECT_TTMC_ELEMS_F64 elements (beyond, the planned sweep and its compiled kernels), and a 3-way float32
    tensor's up to DIRECT_TTMC_ELEMS_F32_256 where vectors are 256 bits wide; 4-way tensors, float32 with
    AVX-512 and machines without the kernels keep DIRECT_TTMC_ELEMS. The route's record says which bound let it run
    directly, HOOI gives the same fit on either route, and DIRECT_TTMC_ELEMS = 0 turns the route off for all."""
    from tuckerkit.engine import _direct, _simd

    monkeypatch.setattr(_simd, "simd_supported", lambda: simd)
    monkeypatch.setattr(_simd, "wide_vectors", lambda: wide)
    assert DIRECT_TTMC_ELEMS_F64 < DIRECT_TTMC_ELEMS_F32_256 < DIRECT_TTMC_ELEMS
    edge = np.empty((64, 64, 128))  # (2^19 elements; np.empty: no page touched)
    past = np.empty((64, 65, 128))
    assert edge.size == DIRECT_TTMC_ELEMS_F64
    assert direct_applies(edge, 10, projections=True)
    assert direct_applies(past, 10, projections=True) is not simd
    f32_edge = np.empty((64, 96, 128), np.float32)  # (3 x 2^18 elements)
    f32_past = np.empty((64, 97, 128), np.float32)
    assert f32_edge.size == DIRECT_TTMC_ELEMS_F32_256
    assert direct_applies(past.astype(np.float32), 10, projections=True)
    assert direct_applies(f32_edge, 10, projections=True)
    assert direct_applies(f32_past, 10, projections=True) is not (simd and not wide)
    # a 4-way float64 tensor of as many elements, float32 within DIRECT_TTMC_ELEMS without the 256-bit bound, and
    # CP-ALS's MTTKRPs: unchanged
    assert direct_applies(np.empty((32, 32, 32, 32)), 10, projections=True)
    assert direct_applies(np.empty((128, 128, 128), np.float32), 10, projections=True) is not (simd and not wide)
    assert not direct_applies(past, 10)
    X = rng.standard_normal((66, 70, 120))  # (554400 elements: past the float64 bound)
    T = tk.hooi(X, 4, max_iter=2, tol=0)
    assert isinstance(T.plans[0], DirectSweep) is not simd
    small = tk.hooi(X[:60], 4, max_iter=2, tol=0)  # (504000 elements: within every bound)
    assert isinstance(small.plans[0], DirectSweep) and small.plans[0].kind == "ttmc"
    bound = "DIRECT_TTMC_ELEMS_F64 (524288)" if simd else "DIRECT_TTMC_ELEMS (2097152)"
    assert f"504000 elements <= {bound} and" in small.plans[0].explain()
    if not simd:
        assert "554400 elements <= DIRECT_TTMC_ELEMS (2097152)" in T.plans[0].explain()
    f32 = tk.hooi(X.astype(np.float32), 4, max_iter=2, tol=0)  # (float32: within its 256-bit bound)
    assert isinstance(f32.plans[0], DirectSweep)
    f32_bound = ("DIRECT_TTMC_ELEMS_F32_256 (786432)" if simd and not wide else "DIRECT_TTMC_ELEMS (2097152)")
    assert f"554400 elements <= {f32_bound} and" in f32.plans[0].explain()
    # the other route from the same start: the same fit to rounding (their sums run in other orders)
    monkeypatch.setattr(_simd, "simd_supported", lambda: not simd)
    monkeypatch.setattr(_simd, "wide_vectors", lambda: not simd and wide)
    other = tk.hooi(X, 4, max_iter=2, tol=0)
    assert isinstance(other.plans[0], DirectSweep) is simd
    assert abs(T.fit - other.fit) <= X.size * np.finfo(np.float64).eps
    monkeypatch.setattr(_direct, "DIRECT_TTMC_ELEMS", 0)  # (every bound only lowers it)
    assert not direct_applies(f32_edge, 10, projections=True) and not direct_applies(edge, 10, projections=True)


def test_the_record_explains_the_route(rng):
    X = rng.standard_normal((6, 7, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        C = tk.cp_als(X, 2, max_iter=3, tol=0)
        T = tk.hooi(X, 2, max_iter=3, tol=0)
    (c,), (t,) = C.plans, T.plans
    # (a small 3-way tensor: compiled steps, engine/_small_hooi.py and decomposition/_small_cp.py)
    assert (c.kind, c.shape, c.dtype, c.rank, c.flops) == ("mttkrp_compiled", (6, 7, 8), np.dtype("float64"), 2,
                                                           4 * 336 * 2)
    assert t.kind == "ttmc_compiled" and t.rank == 2
    assert t.explain().startswith("compiled ttmc sweep of a 6x7x8 float64 tensor, rank 2: each factor step")
    assert c.explain().startswith("compiled mttkrp sweep of a 6x7x8 float64 tensor, rank 2: two products")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        (d,) = tk.cp_als(X, 33, max_iter=3, tol=0).plans  # (rank 33, beyond the compiled sweep's: the direct route)
    assert d.explain().startswith("direct mttkrp sweep of a 6x7x8 float64 tensor, rank 33: 44352 flops")


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(12, 13, 14), (6, 7, 5, 8)])
def test_decompositions_agree_on_both_routes(shape, dtype, rng, monkeypatch):
    """HOOI, CP-ALS (line search on) and ST-HOSVD on a small tensor: the direct route against the planned one,
    fits equal to the dtype's rounding, factors' subspaces equal; each route repeats its own bits."""
    X = rng.standard_normal(shape).astype(dtype)
    tol = 1e3 * _eps(dtype)

    def run():
        return (tk.hooi(X, 3, max_iter=8, tol=0), tk.cp_als(X, 3, max_iter=12, tol=0), tk.st_hosvd(X, 3))

    direct = run()
    again = run()
    planned_only(monkeypatch)
    planned = run()
    assert isinstance(direct[0].plans[0], DirectSweep) and not isinstance(planned[0].plans[0], DirectSweep)
    for a, b, c in zip(direct, again, planned, strict=True):
        assert a.fit == b.fit  # the same bits on a repeat
        for U, V in zip(a.factors, b.factors, strict=True):
            np.testing.assert_array_equal(U, V)
        assert abs(a.fit - c.fit) <= tol
    for a, c in (direct[0], planned[0]), (direct[2], planned[2]):
        for U, V in zip(a.factors, c.factors, strict=True):  # orthonormal bases of the same subspaces
            np.testing.assert_allclose(U.T @ V @ V.T @ U, np.eye(U.shape[1]), atol=math.sqrt(tol))


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_hooi_projects_directly_where_cp_als_plans(rng, planned_cp):
    """Between the two thresholds: HOOI's sweep is direct (its explain names the projection rule), CP-ALS's
    planned; HOOI's fit equals the planned route's to rounding."""
    X = rng.standard_normal((70, 65, 60))
    assert direct_applies(X, 10, projections=True) and not direct_applies(X, 10)
    T = tk.hooi(X, 10, max_iter=3, tol=0)
    C = tk.cp_als(X, 10, max_iter=2, tol=0)
    assert isinstance(T.plans[0], DirectSweep) and "DIRECT_TTMC_ELEMS" in T.plans[0].explain()
    assert not isinstance(C.plans[0], DirectSweep)
    with pytest.MonkeyPatch.context() as mp:
        planned_only(mp)
        P = tk.hooi(X, 10, max_iter=3, tol=0)
    assert not isinstance(P.plans[0], DirectSweep)
    assert abs(T.fit - P.fit) <= 1e3 * _eps(np.float64)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
@pytest.mark.parametrize("order", ["C", "F"])
def test_a_memory_mapped_tensor_takes_the_route_of_its_copy(order, rng, tmp_path):
    """A .npy file's tensor (a read-only memory map; an F-ordered one as numpy saves a Fortran array) and the
    same array in memory: the same route, the same bits (the CLI's results equal the API's)."""
    from tuckerkit.io import load_tensor

    X = np.asarray(rng.standard_normal((9, 11, 10)), order=order)
    np.save(tmp_path / "x.npy", X)
    M = load_tensor(tmp_path / "x.npy", mmap=True)
    assert isinstance(M, np.memmap) and direct_applies(M, 3) and M.flags.f_contiguous == (order == "F")
    for f in (lambda A: tk.hooi(A, 3, max_iter=4, tol=0), lambda A: tk.cp_als(A, 3, max_iter=6, tol=0)):
        a, b = f(X), f(M)
        assert isinstance(a.plans[0], DirectSweep) and isinstance(b.plans[0], DirectSweep)
        assert a.fit == b.fit
        for U, V in zip(a.factors, b.factors, strict=True):
            np.testing.assert_array_equal(U, V)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["F", "perm"])
def test_other_memory_orders_take_the_direct_route(layout, dtype, rng):
    """An F-ordered tensor (pyttb's, MATLAB's) and one in another order of its axes (a Tucker model's
    ``to_dense``): HOOI and ST-HOSVD go direct, CP-ALS too for F order (planned otherwise); fits equal the C
    array's to the dtype's rounding, the factors span the same subspaces, a repeat gives the same bits and the
    tensor is unchanged."""
    C = rng.standard_normal((12, 13, 14)).astype(dtype)
    X = _laid_out(C, layout)
    keep = X.copy(order="K")
    tol = 1e3 * _eps(dtype)

    def run(A):
        return (tk.hooi(A, 3, max_iter=8, tol=0), tk.cp_als(A, 3, max_iter=12, tol=0), tk.st_hosvd(A, 3))

    got, again, ref = run(X), run(X), run(C)
    assert isinstance(got[0].plans[0], DirectSweep)
    assert isinstance(got[1].plans[0], DirectSweep) == (layout == "F")
    for a, b, c in zip(got, again, ref, strict=True):
        assert a.fit == b.fit
        for U, V in zip(a.factors, b.factors, strict=True):
            np.testing.assert_array_equal(U, V)
        assert abs(a.fit - c.fit) <= tol
    for a, c in (got[0], ref[0]), (got[2], ref[2]):
        for U, V in zip(a.factors, c.factors, strict=True):
            np.testing.assert_allclose(U.T @ V @ V.T @ U, np.eye(U.shape[1]), atol=math.sqrt(tol))
    assert np.array_equal(X, keep) and X.strides == keep.strides


@pytest.mark.parametrize("layout", ["F", "perm"])
def test_the_norm_of_another_memory_order_copies_nothing(layout, rng):
    """``||X||`` of an F-ordered or otherwise permuted tensor is summed over runs of its own memory: no copy
    of the tensor (numpy's allocations traced), the value equal to the C array's within float64 rounding."""
    import tracemalloc

    from tuckerkit.engine._operand import sqnorm_scaled

    C = rng.standard_normal((96, 96, 96))
    X = _laid_out(C, layout)
    s0, q0 = sqnorm_scaled(C, 1 << 12, ExecutionPolicy(workers=2))  # (first: the pool's and BLAS's one-off state)
    tracemalloc.start()
    try:
        scale, ssq = sqnorm_scaled(X, 1 << 12, ExecutionPolicy(workers=2))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < X.nbytes // 8
    assert abs(scale * math.sqrt(ssq) - s0 * math.sqrt(q0)) <= 4 * X.size * _eps(np.float64) * s0 * math.sqrt(q0)
