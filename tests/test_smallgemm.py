"""Compiled small-rank TTM kernels and the roofline cost model that chooses them.

The kernels are checked against ``numpy.einsum`` in float64 (to a few eps of the sum of magnitudes) on every
mode of orders 2-6, sizes 1, 7 and 13, ranks with and without the register-block tails, C and F order and
views; through the planner (forced on by the cost model's constants) and directly. Bits do not depend on
the worker count; GPU plans keep cuBLAS.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import itertools
import math
import pickle
import subprocess
import sys
import types
import weakref

import numpy as np
import pytest
from conftest import make_tensor

import tuckerkit as tk
from tuckerkit.engine import ExecutionPolicy, _handoff, contract, plan_contraction, ttm, ttm_plan
from tuckerkit.engine import _contract as contract_mod
from tuckerkit.engine import _plan as plan_mod
from tuckerkit.engine import _smallgemm as sg
from tuckerkit.engine._plan import CompiledKernel
from tuckerkit.engine._roofline import ENV, Roofline, machine_roofline, parse_override

#: the kernels that leave the wide register blocks out on a 256-bit machine, and the functions of theirs that
#: read ``_ALL_BLOCKS``
_WIDE_READERS = {"_inner_kernel": ("_block_line", "_block_half", "_block"), "_outer_gemm_kernel": ("_gblock",)}


@functools.cache
def _all_blocks_kernel(kernel: str):
    """``kernel`` with every register block and strip compiled in, as a machine with 512-bit vectors compiles
    it. On a 256-bit machine the module leaves the wide blocks out (``_ALL_BLOCKS``), so the tests that force the
    wide tiling there run this copy of the same code, cached by numba under a name of its own
    (``<kernel>_all_blocks``: about 13 s of compiling a dtype for ``_inner_kernel``, once)."""
    from numba import njit

    g = dict(vars(sg), _ALL_BLOCKS=True)

    def copy(disp, name=None, **more):
        f = disp.py_func
        code = f.__code__ if name is None else f.__code__.replace(co_name=name, co_qualname=name)
        opts = {k: v for k, v in disp.targetoptions.items() if k not in ("nopython", "boundscheck")}
        return njit(**opts, **more)(types.FunctionType(code, g, code.co_name, f.__defaults__, f.__closure__))

    for name in _WIDE_READERS[kernel]:
        g[name] = copy(getattr(sg, name))
    return copy(getattr(sg, kernel), kernel + "_all_blocks", cache=True)


@pytest.fixture(autouse=True)
def _fresh_block_tables():
    """Each test starts and ends with the register-block tables (``sg._blocks``, cached by (I, R)) empty: a
    test that forces wide vectors (blocks of up to twelve rows) then leaves none to the next test, whose CPU's
    kernels may have no such blocks (on a 256-bit CPU they returned garbage after such a test)."""
    sg._blocks.cache_clear()
    yield
    sg._blocks.cache_clear()


@pytest.fixture
def all_blocks(monkeypatch):
    """Run ``ttm_inner`` and ``ttm_outer`` on kernels with every block, whatever this CPU's vectors (see
    above); gives the module's own ``_inner_kernel`` and the one the tests run."""
    own = sg._inner_kernel
    if not sg._ALL_BLOCKS:
        for kernel in _WIDE_READERS:
            monkeypatch.setattr(sg, kernel, _all_blocks_kernel(kernel))
    return own, sg._inner_kernel


def test_256_bit_kernels_leave_the_wide_blocks_out(monkeypatch, rng):
    """The kernels compiled for this CPU have the wide register blocks (7-12 rows a two-vector block, strips of
    two lines; ``ttm_outer``'s strips of four vectors too) exactly where vectors are wide: elsewhere
    numba pruned them (half the code to compile), and forcing the wide tiling onto them fails loudly instead of
    computing anything."""
    assert sg._ALL_BLOCKS is sg.wide_vectors()
    X = rng.standard_normal((2, 40, 24))
    U = rng.standard_normal((40, 12))
    Y = np.empty((2, 12, 24))
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    sg._blocks.cache_clear()
    X2, Ut = rng.standard_normal((30, 40)), rng.standard_normal((16, 40))
    Y2 = np.empty((16, 30))
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: False)
    monkeypatch.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: True)
    monkeypatch.setattr(sg, "_outer_rb", lambda: 12)  # (twelve rows of X a two-vector block)
    try:
        if sg._ALL_BLOCKS:
            sg.ttm_inner(X, U, Y, ExecutionPolicy(1))
            _check(X, U, 1, Y)
            sg.ttm_outer(X2, Ut, Y2, ExecutionPolicy(1))
            _check(X2, np.ascontiguousarray(Ut.T), 1, Y2.T)
        else:
            with pytest.raises(ValueError, match="internal error: no register block of that many rows"):
                sg.ttm_inner(X, U, Y, ExecutionPolicy(1))
            with pytest.raises(ValueError, match="internal error: no register block of that many rows"):
                sg.ttm_outer(X2, Ut, Y2, ExecutionPolicy(1))
    finally:
        monkeypatch.undo()
        sg._blocks.cache_clear()


def _ref(X, U, n):
    """``X x_n U^T`` in float64 and the same with absolute values (the scale of the rounding error)."""
    X64, U64 = X.astype(np.float64), U.astype(np.float64)
    ref = np.moveaxis(np.tensordot(X64, U64, axes=(n, 0)), -1, n)
    scale = np.moveaxis(np.tensordot(np.abs(X64), np.abs(U64), axes=(n, 0)), -1, n)
    return ref, scale


def _check(X, U, n, Y):
    ref, scale = _ref(X, U, n)
    eps = np.finfo(X.dtype).eps
    assert Y.dtype == X.dtype and Y.shape == ref.shape
    assert np.all(np.abs(Y - ref) <= 4 * (X.shape[n] + 2) * eps * scale + 1e-300)


def _sliced_view(rng, shape, dtype):
    """A view: a C-ordered tensor sliced on its outermost mode (outer stride not the product of the rest)."""
    big = rng.standard_normal((shape[0] + 3, *shape[1:])).astype(dtype)
    return big[2:2 + shape[0]]


SHAPES = [(7, 13), (13, 7, 1), (7, 13, 7), (1, 7, 13, 7), (7, 1, 13, 7, 1), (1, 7, 1, 13, 1, 7)]


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("how", ["C", "F", "sliced", "view"])
def test_compiled_ttm_matches_einsum_on_every_mode(shape, how, dtype, forced, rng):
    X = _sliced_view(rng, shape, dtype) if how == "sliced" else make_tensor(rng, shape, dtype, how)
    X0 = X.copy()
    for n, R in itertools.product(range(len(shape)), (1, 3, 4, 6)):
        U = rng.standard_normal((shape[n], R)).astype(dtype)
        plan = ttm_plan(X, U, n, transpose=True)
        eligible = shape[n] > 1 and (how in ("C", "F") or (how == "sliced" and n >= 1
                                                             and all(s == 1 for s in shape[1:n])))
        if eligible:
            assert plan.compiled != CompiledKernel.NONE, (n, R, plan.explain())
        _check(X, U, n, ttm(X, U, n, transpose=True, plan=plan))
        _check(X, U, n, ttm(X, np.ascontiguousarray(U.T), n))  # U given as (R, I): the (z, k) spec
    np.testing.assert_array_equal(X, X0)


@pytest.mark.parametrize("R", [1, 2, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("I", [1, 2, 3, 5, 13])
def test_kernels_directly_against_einsum(R, I, dtype, rng):  # noqa: E741
    X = rng.standard_normal((5, I, 131)).astype(dtype)  # 131: a full tile and a ragged one
    U = rng.standard_normal((I, R)).astype(dtype)
    Y = np.full((5, R, 131), np.nan, dtype)
    sg.ttm_inner(X, U, Y)
    _check(X, U, 1, Y)
    X2 = rng.standard_normal((7, I)).astype(dtype)  # 7 rows: a block of four and a tail of three
    Y2 = np.full((R, 7), np.nan, dtype)
    sg.ttm_outer(X2, np.ascontiguousarray(U.T), Y2)
    _check(X2, U, 1, Y2.T)
    # strided output views: rows of a bigger buffer
    buf = np.full((R, 3, 7), np.nan, dtype)
    sg.ttm_outer(X2, np.ascontiguousarray(U.T), buf[:, 1, :])
    _check(X2, U, 1, buf[:, 1, :].T)
    assert np.isnan(buf[:, 0]).all() and np.isnan(buf[:, 2]).all()


@pytest.mark.parametrize("five", [True, False])
@pytest.mark.parametrize("R", [*range(1, 16), 20, 23, 41, 56])
def test_outer_dot_kernel_five_and_two_column_blocks(R, five, dtype, monkeypatch, rng):
    """The last-mode dot-product kernel with columns of U five at a time (the rest in pairs, one of them
    duplicated when odd) and in pairs only: against einsum over every rank up to 15 and some beyond 32
    (planned up to 56 in float64), rows in full tiles of
    four and a ragged one, into a strided output view; the same bits for one and two workers."""
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: False)
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: False)
    monkeypatch.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "_dot_five", lambda length, itemsize: five)
    I = 131  # noqa: E741
    X2 = rng.standard_normal((4 * 40 + 3, I)).astype(dtype)
    U = rng.standard_normal((I, R)).astype(dtype)
    buf = np.full((R, 3, X2.shape[0]), np.nan, dtype)
    sg.ttm_outer(X2, np.ascontiguousarray(U.T), buf[:, 1, :], ExecutionPolicy(1))
    _check(X2, U, 1, buf[:, 1, :].T)
    assert np.isnan(buf[:, 0]).all() and np.isnan(buf[:, 2]).all()
    two = np.empty((R, X2.shape[0]), dtype)
    sg.ttm_outer(X2, np.ascontiguousarray(U.T), two, ExecutionPolicy(2))
    assert two.tobytes() == np.ascontiguousarray(buf[:, 1, :]).tobytes()


def test_outer_dot_kernel_takes_five_columns_only_on_wide_vectors_and_long_rows(monkeypatch):
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    assert [sg._dot_five(n, 4) for n in (32, 49, 50, 200)] == [False, False, True, True]
    assert [sg._dot_five(n, 8) for n in (24, 25, 200)] == [False, True, True]
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert not sg._dot_five(200, 8)


def test_kernels_refuse_negative_strides(rng):
    X = rng.standard_normal((3, 4, 5))
    with pytest.raises(ValueError, match="ttm_inner needs non-empty views with non-negative strides"):
        sg.ttm_inner(X[::-1], np.ones((4, 2)), np.empty((3, 2, 5)))
    with pytest.raises(ValueError, match="ttm_outer needs non-empty views with non-negative strides"):
        sg.ttm_outer(X[0, ::-1], np.ones((2, 5)), np.empty((2, 4)))


def test_kernels_refuse_a_matrix_or_output_of_another_shape(rng):
    """The kernels index U and Y unchecked: a transposed output (the rows of Y3 / Y2 swapped) or a matrix of
    another extent is refused before anything is written, the output left as it was."""
    X = rng.standard_normal((3, 4, 5))
    Y = np.full((3, 5, 2), np.nan)
    with pytest.raises(ValueError, match=r"ttm_inner needs the matrix of shape \(4, 2\) and the output of shape "
                                         r"\(3, 2, 5\); received \(4, 2\) and \(3, 5, 2\)"):
        sg.ttm_inner(X, np.ones((4, 2)), Y)
    with pytest.raises(ValueError, match=r"received \(5, 2\) and \(3, 2, 5\)"):
        sg.ttm_inner(X, np.ones((5, 2)), np.empty((3, 2, 5)))
    Y2 = np.full((4, 2), np.nan)
    with pytest.raises(ValueError, match=r"ttm_outer needs the matrix of shape \(2, 5\) and the output of shape "
                                         r"\(2, 4\); received \(2, 5\) and \(4, 2\)"):
        sg.ttm_outer(X[0], np.ones((2, 5)), Y2)
    with pytest.raises(ValueError, match=r"ttm_outer needs the matrix of shape \(2, 5\)"):
        sg.ttm_outer(X[0], np.ones((2, 4)), np.empty((2, 4)))
    assert np.isnan(Y).all() and np.isnan(Y2).all()


def test_compiled_into_a_given_out(forced, rng):
    X = rng.standard_normal((9, 8, 7))
    U = rng.standard_normal((8, 3))
    out = np.full((9, 3, 7), np.nan)
    plan = plan_contraction("abc,bz->azc", X, U, out=out)
    assert plan.compiled is CompiledKernel.TTM_INNER
    res = contract("abc,bz->azc", X, U, out=out, plan=plan)
    assert res is out
    _check(X, U, 1, out)
    # an out whose layout the kernel cannot write (unit stride on the new mode): BLAS, same numbers
    outF = np.full((9, 3, 7), np.nan, order="F")
    planF = plan_contraction("abc,bz->azc", X, U, out=outF)
    assert planF.compiled is CompiledKernel.NONE
    _check(X, U, 1, contract("abc,bz->azc", X, U, out=outF, plan=planF))


def test_bits_do_not_depend_on_workers_or_repeats(forced, rng, monkeypatch):
    X = rng.standard_normal((97, 63, 81))  # about 7 MFlop per TTM: several tiles pieces (cut finer here than by
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # default, which runs this size on one thread), taken
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 1_000_000)  # by any worker
    for n in range(3):
        U = rng.standard_normal((X.shape[n], 7))
        assert 2 * X.size * 7 // sg.KERNEL_PIECE_FLOPS > 3
        spec = "abc,bz->azc" if n == 1 else ("abc,az->zbc" if n == 0 else "abc,cz->abz")
        results = []
        for w in (1, 2, 3, 1):
            plan = plan_contraction(spec, X, U, policy=ExecutionPolicy(w))
            assert plan.compiled != CompiledKernel.NONE
            results.append(contract(spec, X, U, plan=plan).tobytes())
        assert len(set(results)) == 1


def _launch_cases(rng, dtype):
    """(spec, X, matrix, mode) for a plan's launch: first and middle modes, a 4-way tensor, a sliced view, U in
    F order, the matrix first, odd sizes."""
    X = rng.standard_normal((37, 41, 29)).astype(dtype)
    X4 = rng.standard_normal((5, 13, 7, 11)).astype(dtype)
    V = _sliced_view(rng, (23, 31, 19), dtype)
    return [
        ("abc,az->zbc", X, rng.standard_normal((37, 9)).astype(dtype), 0),
        ("abc,bz->azc", X, rng.standard_normal((41, 20)).astype(dtype), 1),
        ("abc,bz->azc", X, np.asfortranarray(rng.standard_normal((41, 13)).astype(dtype)), 1),
        ("abcd,bz->azcd", X4, rng.standard_normal((13, 6)).astype(dtype), 1),
        ("abc,bz->azc", V, rng.standard_normal((31, 7)).astype(dtype), 1),
        ("zb,abc->azc", rng.standard_normal((11, 41)).astype(dtype), X, 1),
        ("abc,cz->abz", X, rng.standard_normal((29, 5)).astype(dtype), 2),  # the last mode: ttm_outer's kernels
        ("abc,cz->abz", X, np.asfortranarray(rng.standard_normal((29, 24)).astype(dtype)), 2),
        ("abcd,dz->abcz", X4, rng.standard_normal((11, 17)).astype(dtype), 3),
    ]


def _outer_name(R: int, itemsize: int, I: int) -> str:  # noqa: E741
    """The kernel :func:`sg.ttm_outer` runs at rank ``R`` over ``I`` on this CPU (its launch's name)."""
    if sg.outer_vdot_style(R, itemsize, I):
        return "outer_vdot"
    if sg.outer_tr_style(R, itemsize):
        return "outer_tr"
    return "outer_gemm" if sg.outer_gemm_style(R, itemsize) else "outer_dot"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_plans_launch_gives_ttm_inners_bits(forced, dtype, workers, rng, monkeypatch):
    """A plan's compiled TTM is made into a launch at its first call (kept on the plan for those strides) and
    reused: the same bits as :func:`sg.ttm_inner` / :func:`sg.ttm_outer` on the same views (their packing of U,
    tiles and pieces) at every call, einsum's sums to rounding, inputs unmodified."""
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # several pieces at these sizes
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 50_000)
    if _handoff._handoff() is None:
        pytest.skip("no GEMM helpers on this platform (the launch needs them)")
    for spec, A, B, n in _launch_cases(rng, dtype):
        A0, B0 = A.copy(), B.copy()
        X, U = (B, A.T) if spec.startswith("zb") else (A, B)
        plan = plan_contraction(spec, A, B, policy=ExecutionPolicy(workers))
        last = n == X.ndim - 1
        assert plan.compiled is (CompiledKernel.TTM_OUTER if last else CompiledKernel.TTM_INNER), plan.explain()
        first = contract(spec, A, B, plan=plan)
        (launch,) = plan._bound.launch.values()
        assert isinstance(launch, sg._Launch)
        assert launch.name == _outer_name(U.shape[1], X.itemsize, X.shape[n]) if last else launch.name == "inner"
        _check(X, U, n, first)
        # the launch keeps the arrays its rows point to (U's blocks, the strips), never the first call's operands
        assert not any(np.shares_memory(k, v) for k in launch.keep for v in (A, B, first))
        # ttm_inner / ttm_outer on the same views, with their own packing of U and pieces
        if last:
            X2 = X.reshape(-1, X.shape[n])
            want = np.empty((X2.shape[0], U.shape[1]), dtype)
            sg.ttm_outer(X2, np.ascontiguousarray(U.T), want.T, ExecutionPolicy(workers))
        else:
            X3 = X.reshape(math.prod(X.shape[:n]), X.shape[n], -1)
            want = np.empty((X3.shape[0], U.shape[1], X3.shape[2]), dtype)
            sg.ttm_inner(X3, np.ascontiguousarray(U), want, ExecutionPolicy(workers))
        assert np.ascontiguousarray(first).tobytes() == want.tobytes()
        assert contract(spec, A, B, plan=plan).tobytes() == first.tobytes()
        assert len(plan._bound.launch) == 1 and next(iter(plan._bound.launch.values())) is launch
        if workers == 1 and not spec.startswith("zb"):  # every piece on the caller, from the launch's own rows:
            again = np.full_like(first, np.nan)  # no need of the helpers' lock
            with _handoff._handoff().lock:
                assert launch(A, B, again)
            assert again.tobytes() == first.tobytes()
        assert np.array_equal(A, A0) and np.array_equal(B, B0)


def test_a_launch_keeps_no_operand_alive(forced, rng, monkeypatch):
    """A launch (kept on a cached plan, or in a decomposition's dict) holds sizes, indices and its own small
    arrays, never a call's tensor, matrix or output: they are freed when the caller drops them."""
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 50_000)
    if _handoff._handoff() is None:
        pytest.skip("no GEMM helpers on this platform (the launch needs them)")
    kept: dict = {}
    for spec, n_i, R in (("abc,az->zbc", 37, 9), ("abc,bz->azc", 41, 20), ("abc,cz->abz", 29, 5),
                         ("abc,cz->abz", 29, 24), ("dot", 41, 10)):
        X = rng.standard_normal((37, 41, 29))
        U = rng.standard_normal((n_i, R))
        if spec == "dot":
            W = rng.standard_normal((29, R))
            Y = sg.ttm_inner_dot_kept(X, U, W, ExecutionPolicy(2), kept)
            assert isinstance(next(iter(kept.values())), sg._Launch)
        else:
            plan = plan_contraction(spec, X, U, policy=ExecutionPolicy(2))
            Y = contract(spec, X, U, plan=plan)
            assert isinstance(next(iter(plan._bound.launch.values())), sg._Launch)
        refs = [weakref.ref(a) for a in (X, U, Y)]
        del X, U, Y
        gc.collect()
        assert [r() is None for r in refs] == [True, True, True], spec


def test_a_launch_is_left_out_of_copies_and_pickles(forced, rng, monkeypatch):
    """A plan that ran its kernel (a launch on its bound data: rows of this process's addresses) pickles, and so
    does a HOOI result that holds such plans; a deep copy makes its own launch and, with the original dropped,
    still gives the original's bits."""
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 50_000)
    if _handoff._handoff() is None:
        pytest.skip("no GEMM helpers on this platform (the launch needs them)")
    X = rng.standard_normal((37, 41, 29))
    for spec, U in (("abc,bz->azc", rng.standard_normal((41, 20))), ("abc,cz->abz", rng.standard_normal((29, 24)))):
        plan = plan_contraction(spec, X, U, policy=ExecutionPolicy(2))
        want = contract(spec, X, U, plan=plan).tobytes()
        assert isinstance(next(iter(plan._bound.launch.values())), sg._Launch)
        back = pickle.loads(pickle.dumps(plan))
        assert back == plan and contract(spec, X, U, plan=back).tobytes() == want
        copied = copy.deepcopy(plan)
        del plan
        contract_mod._cached_plan.cache_clear()
        gc.collect()
        junk = [np.full(4, 7.0) for _ in range(2000)]  # (memory a freed array's may be reused by)
        assert contract(spec, X, U, plan=copied).tobytes() == want
        assert isinstance(next(iter(copied._bound.launch.values())), sg._Launch)
        del junk
    T = tk.hooi(rng.standard_normal((60, 50, 40)), 5, max_iter=2, tol=0)
    back = pickle.loads(pickle.dumps(T))
    assert np.array_equal(back.core, T.core)


def test_a_launch_gives_way_where_it_cannot_run(forced, rng, monkeypatch):
    """With the helpers busy (another thread's round) or the module's kernel replaced, a launch runs nothing and
    the call takes ttm_inner's own path: the same bits; so does a tensor or matrix whose elements are not
    aligned. A U neither C- nor F-contiguous gets no launch."""
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 50_000)
    h = _handoff._handoff()
    if h is None:
        pytest.skip("no GEMM helpers on this platform (the launch needs them)")
    X = rng.standard_normal((37, 41, 29))
    U = rng.standard_normal((41, 12))
    plan = plan_contraction("abc,bz->azc", X, U, policy=ExecutionPolicy(2))
    want = contract("abc,bz->azc", X, U, plan=plan).tobytes()
    (launch,) = plan._bound.launch.values()
    with h.lock:  # another thread's round
        assert launch(X, U, np.empty((37, 12, 29))) is False
        assert contract("abc,bz->azc", X, U, plan=plan).tobytes() == want
    raw = np.empty(X.nbytes + 1, np.uint8)  # a tensor whose elements are not aligned to their size (numba's
    Xu = np.frombuffer(raw.data, dtype=np.float64, count=X.size, offset=1).reshape(X.shape)  # other overload)
    Xu[...] = X
    assert not Xu.flags.aligned and Xu.strides == X.strides
    assert contract("abc,bz->azc", Xu, U, plan=plan).tobytes() == want
    raw_u = np.empty(U.nbytes + 1, np.uint8)  # the matrix unaligned too
    Uu = np.frombuffer(raw_u.data, dtype=np.float64, count=U.size, offset=1).reshape(U.shape)
    Uu[...] = U
    assert contract("abc,bz->azc", X, Uu, plan=plan).tobytes() == want
    assert list(plan._bound.launch.values()) == [launch]
    own = sg._inner_kernel
    monkeypatch.setattr(sg, "_inner_kernel", own.py_func)  # a stand-in, not the kernel the rows call
    assert launch(X, U, np.empty((37, 12, 29))) is False
    monkeypatch.setattr(sg, "_inner_kernel", own)
    Us = rng.standard_normal((41, 24))[:, :12]  # neither C- nor F-contiguous
    plan_s = plan_contraction("abc,bz->azc", X, Us, policy=ExecutionPolicy(2))
    assert plan_s.compiled is CompiledKernel.TTM_INNER
    got = contract("abc,bz->azc", X, Us, plan=plan_s)
    assert list(plan_s._bound.launch.values()) == [None]
    assert got.tobytes() == contract("abc,bz->azc", X, np.ascontiguousarray(Us), plan=plan).tobytes()


def test_read_only_and_memory_mapped_inputs_give_the_same_bits(forced, rng, tmp_path):
    """A loaded .npy (read-only, or a memory map) is its own numba type: its kernel variant compiles on first use
    (``make demo``'s first HOOI) and must give the writable array's bits on every mode."""
    X = rng.standard_normal((23, 19, 17))
    np.save(tmp_path / "x.npy", X)
    ro = X.copy()
    ro.setflags(write=False)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    for n in range(3):
        U = rng.standard_normal((X.shape[n], 5))
        spec = "abc,bz->azc" if n == 1 else ("abc,az->zbc" if n == 0 else "abc,cz->abz")
        want = contract(spec, X, U, plan=plan_contraction(spec, X, U))
        _check(X, U, n, want)
        for Y in (ro, mm):
            plan = plan_contraction(spec, Y, U)
            assert plan.compiled != CompiledKernel.NONE
            assert contract(spec, Y, U, plan=plan).tobytes() == want.tobytes()


def test_hooi_unchanged_by_the_compiled_kernels(monkeypatch, rng, planned_sweeps):
    X = rng.standard_normal((17, 15, 13, 11))
    ranks = (3, 4, 2, 3)
    init = tk.hosvd(X, ranks)
    with pytest.warns(tk.ConvergenceWarning):
        blas = tk.hooi(X, ranks, init=init, max_iter=4, tol=0.0)
    monkeypatch.setenv(ENV, "bw=1e10,peak=1e10")
    monkeypatch.setattr(plan_mod, "SMALL_RANK_MIN_FLOPS", 0)
    for key in list(sg._KERNEL_EFF):
        monkeypatch.setitem(sg._KERNEL_EFF, key, (50.0, 50.0))
    contract_mod._cached_plan.cache_clear()
    try:
        with pytest.warns(tk.ConvergenceWarning):
            comp = tk.hooi(X, ranks, init=init, max_iter=4, tol=0.0)
        assert any(p.compiled != CompiledKernel.NONE for mp in comp.plans for p in mp.plans)
    finally:
        contract_mod._cached_plan.cache_clear()
    assert abs(comp.fit - blas.fit) <= 1e-12
    for U, V in zip(comp.factors, blas.factors, strict=True):
        np.testing.assert_allclose(U, V, atol=1e-10)


def test_explain_records_the_choice_and_both_estimates(forced, rng):
    X = rng.standard_normal((20, 30, 40))
    plan = ttm_plan(X, rng.standard_normal((40, 5)), 2, transpose=True)
    text = plan.explain()
    assert plan.compiled is CompiledKernel.TTM_OUTER
    assert "compiled small_rank_ttm_outer (BLAS alternative: gemm)" in text
    assert "choice: the compiled kernel computes at least 5 % faster" in text
    names = [name for name, _ in plan.estimates]
    assert names == ["compiled", "blas gemm", "roofline", "compiled compute", "blas gemm compute"]
    est = dict(plan.estimates)
    # the compute terms are what the choice rests on (a tie of bandwidth-bound estimates included), and shown
    assert est["compiled compute"] * 1.05 <= est["blas gemm compute"]
    assert est["compiled"] <= est["blas gemm"]
    line = next(ln for ln in text.splitlines() if ln.startswith("  compute alone"))
    assert line == ("  compute alone (flops / (peak x efficiency)): "
                    f"compiled {est['compiled compute'] * 1e3:.3g} ms, "
                    f"blas gemm {est['blas gemm compute'] * 1e3:.3g} ms")
    assert plan.copies == 40 * 5  # U transposed once into (R, I) rows


def test_small_or_unsuited_cases_stay_on_blas(rng):
    contract_mod._cached_plan.cache_clear()
    X = rng.standard_normal((6, 7, 8))
    assert ttm_plan(X, rng.standard_normal((8, 3)), 2, transpose=True).compiled is CompiledKernel.NONE
    assert ttm_plan(X, rng.standard_normal((8, 3)), 2, transpose=True).estimates == ()  # too small to weigh
    Xc = rng.standard_normal((6, 7, 8)) + 1j  # complex: BLAS only
    assert plan_contraction("abc,cz->abz", Xc, np.ones((8, 2))).compiled is CompiledKernel.NONE


def test_gpu_plans_keep_cublas(forced, rng):
    X = rng.standard_normal((20, 30, 40))
    plan = ttm_plan(X, rng.standard_normal((30, 5)), 1, transpose=True)
    assert plan.compiled is CompiledKernel.TTM_INNER
    gpu = contract_mod._on_gpu(plan)
    assert gpu.compiled is CompiledKernel.NONE and gpu.device == "cuda"
    assert gpu._out_order == plan._sr.blas_out_order
    # the BLAS alternative of the same plan gives the same numbers on the CPU
    blas = dataclasses.replace(plan, compiled=CompiledKernel.NONE, _out_order=plan._sr.blas_out_order)
    U = rng.standard_normal((30, 5))
    np.testing.assert_allclose(blas(X, U), plan(X, U), rtol=0, atol=1e-12)


def test_roofline_override_and_errors(monkeypatch):
    monkeypatch.setenv(ENV, "bw=31e9,peak=1e11")
    r = machine_roofline()
    assert r == Roofline(31e9, 1e11, 2e11, "env")
    assert r.bound(64e6, 160e6, "float64") == pytest.approx(64e6 / 31e9)
    assert r.estimate(64e6, 160e6, "float32", 0.01) == pytest.approx(160e6 / (2e11 * 0.01))
    assert parse_override("peak=2e11,bw=1e9,peak32=3e11").peak32 == 3e11
    for bad in ("bw=1e9", "bw=-1,peak=1e9", "bw=x,peak=1", "bw=1,peak=1,speed=2", "bw=inf,peak=1"):
        with pytest.raises(ValueError, match=r"^TUCKERKIT_ROOFLINE='.*' is invalid; expected 'bw=<bytes/s>"):
            parse_override(bad)


def test_roofline_is_cached_per_machine(monkeypatch, tmp_path):
    import tempfile

    from tuckerkit.engine import _roofline

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # (no calibration of the machine's own fallback read)
    monkeypatch.setattr(_roofline, "_CURRENT", {})
    calls = []
    monkeypatch.setattr(_roofline, "calibrate", lambda: calls.append(1) or Roofline(2e10, 4e10, 8e10))
    first = machine_roofline()
    assert first.source == "calibrated" and (tmp_path / "tuckerkit" / "roofline.json").exists()
    monkeypatch.setattr(_roofline, "_CURRENT", {})  # a new process reads the cache: same numbers
    second = machine_roofline()
    assert second == Roofline(2e10, 4e10, 8e10, "cache") and len(calls) == 1


def test_roofline_cached_under_tmp_when_the_home_cannot_be_written(monkeypatch, tmp_path):
    """A read-only cache folder: the calibration goes to a folder under the temporary directory, so that later
    processes on the machine read it back (each measured its own before: under load, other kernels and bits)."""
    import tempfile

    from tuckerkit.engine import _roofline

    home = tmp_path / "home"
    home.mkdir()
    (home / "tuckerkit").write_text("a file where the folder would be")  # (the cache folder cannot be made)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(_roofline, "_CURRENT", {})
    calls = []
    monkeypatch.setattr(_roofline, "calibrate", lambda: calls.append(1) or Roofline(2e10, 4e10, 8e10))
    assert machine_roofline().source == "calibrated"
    assert (_roofline._fallback_dir() / "roofline.json").exists()
    assert str(_roofline._fallback_dir()).startswith(str(tmp_path / "tmp"))
    monkeypatch.setattr(_roofline, "_CURRENT", {})  # a new process
    assert machine_roofline() == Roofline(2e10, 4e10, 8e10, "cache") and len(calls) == 1


@pytest.mark.parametrize(("text", "model"), [
    (b"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13\n"
     b"cpu MHz\t\t: 2450.000\n\nprocessor\t: 1\nmodel name\t: another\n", "AMD EPYC 7B13"),  # x86: the first entry's
    (b"Processor\t: ARMv7 Processor rev 10 (v7l)\nprocessor\t: 0\nBogoMIPS\t: 38.40\n", "ARMv7 Processor rev 10 (v7l)"),
    (b"processor\t: 0\ncpu\t\t: POWER9 (architected), altivec supported\nclock\t\t: 2300.0MHz\n",
     "POWER9 (architected), altivec supported"),
    (b"processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nprocessor\t: 1\nmodel name\t: late\n", ""),  # arm64
    (b"processor\t: 0\nmodel name\t:\n", ""),  # an empty name
    (b"", ""),
])
def test_cpu_model_is_the_first_processors_model_name(tmp_path, text, model):
    from tuckerkit.engine._roofline import cpu_model

    path = tmp_path / "cpuinfo"
    path.write_bytes(text)
    assert cpu_model(str(path)) == model
    assert cpu_model(str(tmp_path / "missing")) == ""


def test_the_roofline_cache_key_starts_no_process():
    # platform.processor(), which the key once held, runs ``uname -p`` (about 10 ms of a fresh process's first
    # plan); the key is made in a fresh interpreter whose process-starting calls all raise
    code = (
        "import os, subprocess, sys\n"
        "def boom(*a, **k):\n"
        "    raise AssertionError('a process was started')\n"
        "subprocess.Popen.__init__ = boom\n"
        "os.posix_spawn = os.posix_spawnp = os.fork = os.system = os.popen = boom\n"
        "from tuckerkit.engine._roofline import _VERSION, _machine_key, cpu_model\n"
        "key = _machine_key()\n"
        "assert key.split('|')[2] == cpu_model() and key.endswith(f'|v{_VERSION}'), key\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_same_bits_from_several_threads_at_once(forced, rng):
    from concurrent.futures import ThreadPoolExecutor

    X = rng.standard_normal((64, 50, 70))
    U = rng.standard_normal((70, 6))
    plan = plan_contraction("abc,cz->abz", X, U, policy=ExecutionPolicy(2))
    assert plan.compiled is CompiledKernel.TTM_OUTER
    ref = plan(X, U).tobytes()
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: plan(X, U).tobytes(), range(8)))
    assert all(o == ref for o in outs)


def test_explain_says_why_blas_stays(monkeypatch, rng):
    monkeypatch.setenv(ENV, "bw=1e10,peak=1e10")
    monkeypatch.setattr(plan_mod, "SMALL_RANK_MIN_FLOPS", 0)
    # (as with 256-bit vectors: where vectors are wide, long rows over a short mode take the kernel in cache too)
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    contract_mod._cached_plan.cache_clear()
    try:
        # the first mode: the inner kernel's tiles gather rows of 12,000 elements at a stride
        # (rank 12: above SHORT_I_CACHED_MAX_R_256, where a tensor in cache keeps the in-cache constants)
        plan = ttm_plan(rng.standard_normal((20, 30, 400)), rng.standard_normal((20, 12)), 0, transpose=True)
        middle = ttm_plan(rng.standard_normal((20, 30, 40)), rng.standard_normal((30, 32)), 1, transpose=True)
    finally:
        contract_mod._cached_plan.cache_clear()
    assert plan.compiled is CompiledKernel.NONE  # long rows: the inner kernel does not beat BLAS at rank 12
    assert "choice: the compiled kernel would not compute 5 % faster than BLAS" in plan.explain()
    assert dict(plan.estimates)["compiled"] >= dict(plan.estimates)["blas gemm"]
    assert dict(plan.estimates)["compiled compute"] * 1.05 > dict(plan.estimates)["blas gemm compute"]
    assert middle.compiled is CompiledKernel.TTM_INNER  # short rows (40 columns): the kernel
    assert "compiled small_rank_ttm_inner (BLAS alternative: strided_batched_gemm)" in middle.explain()
    assert dict(middle.estimates)["compiled"] < dict(middle.estimates)["blas strided_batched_gemm"]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh_out", "given_out"])
def test_table2_cases_through_the_compiled_kernels(order, fresh, forced, rng):
    """Every seed Table II case (the matrix first: the planner swaps the roles), against einsum."""
    from test_table2 import CASES

    sizes = {"m": 7, "n": 13, "p": 5, "k": 11}
    used = 0
    for _, spec in CASES:
        lhs, outs = spec.split("->")
        a, b = lhs.split(",")
        A = np.asarray(rng.standard_normal([sizes[c] for c in a]), order=order)
        B = np.asarray(rng.standard_normal([sizes[c] for c in b]), order=order)
        out = None if fresh else np.full([sizes[c] for c in outs], np.nan, order=order)
        plan = plan_contraction(spec, A, B, out=out)
        used += plan.compiled != CompiledKernel.NONE
        res = contract(spec, A, B, out=out, plan=plan)
        ref = np.einsum(spec, A, B)
        scale = np.einsum(spec, np.abs(A), np.abs(B))
        assert np.all(np.abs(res - ref) <= 8 * (sizes["k"] + 2) * np.finfo(np.float64).eps * scale), spec
    assert used == 36 if fresh else used >= 10  # a given C/F output fits the kernel in 10 of the cases


@pytest.mark.parametrize("R", [*range(1, 14), 16, 17, 24, 31, 32, 33, 40, 50, 64])
def test_inner_kernel_every_rank_and_column_tail(R, dtype, rng):
    """Row blocks of 1-6 (R cut as evenly as possible), strips of two vectors, one vector and single
    columns at the end of a row, several chunks of i: against einsum, into a strided output view."""
    I = 37  # noqa: E741
    for C in (1, 7, 13, 21, 45, 131):
        X = _sliced_view(rng, (3, I, C), dtype)
        U = rng.standard_normal((I, R)).astype(dtype)
        buf = np.full((3, R + 2, C), np.nan, dtype)
        sg.ttm_inner(X, U, buf[:, 1:R + 1])
        _check(X, U, 1, buf[:, 1:R + 1])
        assert np.isnan(buf[:, 0]).all() and np.isnan(buf[:, R + 1]).all()


@pytest.mark.parametrize("C", [5, 9, 13, 21, 35])
def test_inner_kernel_row_tail_has_the_bits_of_a_full_strip(C, dtype, rng, monkeypatch):
    """The columns at the end of a row (fewer than a packed strip: one vector, then one vector overlapping
    the columns before it, through a private buffer) are the same bits as when the same columns lie inside
    full strips of a wider row (one in-order chain of fused multiply-adds per element), with 1 and 2 workers;
    against einsum, and nothing written outside the view. (The register-blocked kernel's tails: float32 rows of
    5 would take the short-rows kernel, whose sums are trees.)"""
    monkeypatch.setattr(sg, "inner_short_style", lambda R, itemsize, C: False)
    I = 45  # noqa: E741
    wide = rng.standard_normal((3, I, 64)).astype(dtype)
    U = rng.standard_normal((I, 11)).astype(dtype)
    ref = np.empty((3, 11, 64), dtype)
    sg.ttm_inner(wide, U, ref)
    for workers in (1, 2):
        buf = np.full((3, 11, C + 3), np.nan, dtype)
        sg.ttm_inner(np.ascontiguousarray(wide[:, :, :C]), U, buf[:, :, :C], ExecutionPolicy(workers))
        assert buf[:, :, :C].tobytes() == np.ascontiguousarray(ref[:, :, :C]).tobytes(), (C, workers)
        assert np.isnan(buf[:, :, C:]).all()
        _check(wide[:, :, :C], U, 1, buf[:, :, :C])


@pytest.mark.parametrize("R", [10, 23])
def test_inner_kernel_bits_do_not_depend_on_tiling_or_workers(monkeypatch, R, dtype, rng):
    """The tile width, the chunks of i (the partial sums carried through the output), the workers, a second
    call and reading each chunk directly or packed first give the same bits: every element is one in-order
    chain of fused multiply-adds (R = 10 reads X directly; R = 23 directly where vectors are wide, else packed:
    both forced here)."""
    X = rng.standard_normal((5, 301, 333)).astype(dtype)
    U = rng.standard_normal((301, R)).astype(dtype)
    ref = np.empty((5, R, 333), dtype)
    sg.ttm_inner(X, U, ref)
    _check(X, U, 1, ref)
    for wide_direct in (True, False):
        monkeypatch.setattr(sg, "_wide_direct", lambda wide_direct=wide_direct: wide_direct)
        for l1, pack in ((10**9, 256 * 1024), (4096, 256 * 1024), (20 * 1024, 16 * 1024), (2048, 4096)):
            monkeypatch.setattr(sg, "_L1_BYTES", l1)
            monkeypatch.setattr(sg, "_CHUNK_BYTES", pack)
            for workers in (1, 2, 3):
                Y = np.empty_like(ref)
                sg.ttm_inner(X, U, Y, ExecutionPolicy(workers))
                assert Y.tobytes() == ref.tobytes(), (wide_direct, l1, pack, workers)


def test_larger_ranks_read_directly_where_vectors_are_wide(monkeypatch, all_blocks, dtype, rng):
    """R above 16: where vectors are wide each chunk is read straight from X (long rows in chunks of up to
    _MAX_KC rows of 4 KiB tiles; long rows that crowd L1 in the former tiling, read directly too); with 256-bit
    vectors it is packed first, in the former tiling. Both give the same bits as each other and einsum's sums
    to rounding."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)  # blocks of up to twelve rows, whatever this CPU has
    sg._blocks.cache_clear()
    monkeypatch.setattr(sg, "_wide_direct", lambda: True)
    assert sg._tiling(200, 32, 8, 40000, 4, 320000) == (512, 50)  # 200^3 float64, first mode: spread rows
    assert sg._tiling(200, 32, 4, 40000, 4, 160000) == (1024, 50)
    assert sg._direct_chunks(32, 320000, 320000, 50) is True
    assert sg._direct_chunks(32, 1600, 1600, 67) is True  # a middle mode: short rows, never crowded
    # 320x240x160 float64, first mode: rows 75 pages apart crowd one set; the former tiling (chunks of what fills
    # _L1_BYTES: 80 rows), of at most _MAX_KC_WIDE_CROWDED rows, read directly
    crowded = sg._tiling(320, 32, 8, 38400, 4, 307200)
    assert sg._MAX_KC_WIDE_CROWDED == 40
    assert crowded == (816, 40) and sg._l1_crowded(307200, crowded[1])
    assert sg._tiling(80, 20, 4, 512000, 4, 2048000) == (1024, 40)  # 80^4 float32, first mode
    assert sg._direct_chunks(32, 307200, 307200, crowded[1]) is True
    assert sg._direct_chunks(10, 307200, 307200, crowded[1]) is False  # (R <= 16: the tiling caps such chunks)
    monkeypatch.setattr(sg, "_wide_direct", lambda: False)
    assert sg._tiling(320, 32, 8, 38400, 4, 307200) == (400, 80)  # (256-bit vectors: packed, uncapped)
    assert sg._direct_chunks(32, 307200, 307200, 80) is False
    assert sg._tiling(200, 32, 8, 40000, 4, 320000) == (480, 67)
    assert sg._direct_chunks(32, 1600, 1600, 67) is False
    assert sg._direct_chunks(16, 1600, 1600, 67) is True
    # long rows (at least LONG_ROW_BYTES) not line-aligned (spread over L1's sets), and rows two pages apart
    # (each line of a strip in one set: crowded)
    for C in (9000 // np.dtype(dtype).itemsize, 8192 // np.dtype(dtype).itemsize):
        X = _sliced_view(rng, (2, 70, C), dtype)
        U = rng.standard_normal((70, 32)).astype(dtype)
        assert sg._l1_crowded(X.strides[1], 40) is (C * X.itemsize == 8192)
        _same_bits_across(monkeypatch, X, U, "_wide_direct", (lambda: True, lambda: False))
    monkeypatch.undo()
    sg._blocks.cache_clear()


def _same_bits_across(monkeypatch, X, U, setting, values):
    """``ttm_inner`` of the 3-D view ``X`` and ``U`` with ``sg.<setting>`` at each of ``values``, on one worker and
    two: einsum's sums to rounding, and the same bits every time."""
    out = []
    for value in values:
        monkeypatch.setattr(sg, setting, value)
        for workers in (1, 2):
            Y = np.full((X.shape[0], U.shape[1], X.shape[2]), np.nan, X.dtype)
            sg.ttm_inner(X, U, Y, ExecutionPolicy(workers))
            _check(np.ascontiguousarray(X), U, 1, Y)
            out.append(Y.tobytes())
    assert len(set(out)) == 1


def test_rows_of_32_to_96_kib_take_short_chunks(monkeypatch, all_blocks, dtype, rng):
    """R above 16 where vectors are wide: rows of more than 32 KiB and at most 96 KiB take chunks of at most
    _MAX_KC_MID_ROWS rows, in first and middle modes; other long rows, and R up to 16, keep their tiling; the L1
    check looks at the short chunks (80^4's mode 1, crowded in chunks of 64 rows, is not in chunks of 20). The
    same bits as the longer chunks and einsum's sums to rounding."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    sg._blocks.cache_clear()
    monkeypatch.setattr(sg, "_wide_direct", lambda: True)
    it = np.dtype(dtype).itemsize
    assert sg._MAX_KC_MID_ROWS == 25 and sg._MID_ROW_BYTES == (32 << 10, 96 << 10)
    C = 40000 // it  # rows of 40000 bytes
    assert sg._tiling(100, 32, it, C, 4, C * it, True) == (4096 // it, 25)  # 100^4's mode 1, 100x100x5000
    assert sg._tiling(60, 20, it, C, 4, C * it, True)[1] == 20  # (three chunks, as even as possible)
    assert sg._tiling(3000, 32, 8, 9000, 4, 72000, True)[1] == 25  # 3000x30x300's first mode
    assert sg._tiling(80, 32, 8, 6400, 4, 51200, True) == (512, 20)  # 80^4's mode 1
    assert sg._l1_crowded(51200, 80) and not sg._l1_crowded(51200, 20)
    for b in (32 << 10, (96 << 10) + 64, 320000):  # at the bounds' outside, and 200^3's first mode
        assert sg._tiling(100, 32, 1, b, 4, b + 64, True)[1] == 50
    assert sg._tiling(96, 32, 1, 96 << 10, 4, (96 << 10) + 64, True)[1] == 24
    assert sg._tiling(100, 16, it, C, 2, C * it, True) == sg._tiling(100, 16, it, 100000 // it, 2, 100000, True)
    X = _sliced_view(rng, (3, 60, C), dtype)
    U = rng.standard_normal((60, 20)).astype(dtype)
    _same_bits_across(monkeypatch, X, U, "_MAX_KC_MID_ROWS", (sg._MAX_KC_MID_ROWS, sg._MAX_KC))
    monkeypatch.undo()
    sg._blocks.cache_clear()


def test_rows_shorter_than_a_strip_of_two_lines_take_strips_of_one(monkeypatch, all_blocks, dtype, rng):
    """Where vectors are wide and R is above 16, a row shorter than a strip of two lines (four 256-bit vectors)
    takes strips of one line (else all its columns would run in the leftover paths); rows of one such strip or
    more keep strips of two. The same bits either way, einsum's sums to rounding."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    sg._blocks.cache_clear()
    vl = 32 // np.dtype(dtype).itemsize
    seen = []
    real = sg._kernel_tiles
    monkeypatch.setattr(sg, "_kernel_tiles", lambda name, kernel, args, *rest: seen.append(args[15])
                        or real(name, kernel, args, *rest))
    for C, snv in ((4 * vl - 2, 2), (3 * vl, 2), (4 * vl, 4), (5 * vl, 4)):
        X = rng.standard_normal((3, 30, C)).astype(dtype)
        U = rng.standard_normal((30, 20)).astype(dtype)
        Y = np.empty((3, 20, C), dtype)
        sg.ttm_inner(X, U, Y, ExecutionPolicy(2))
        assert seen[-1] == snv, C
        _check(X, U, 1, Y)
        forced = np.empty_like(Y)
        monkeypatch.setattr(sg, "_inner_strip", lambda R: 2)
        sg.ttm_inner(X, U, forced, ExecutionPolicy(2))
        monkeypatch.setattr(sg, "_inner_strip", lambda R: 4)
        assert seen[-1] == 2 and forced.tobytes() == Y.tobytes()
    monkeypatch.undo()
    sg._blocks.cache_clear()


@pytest.mark.parametrize("R", [10, 15, 16, 17, 32])
def test_inner_kernel_strips_of_one_or_two_lines_give_the_same_bits(monkeypatch, all_blocks, R, dtype, rng):
    """Strips of one cache line of each row of X (two 256-bit vectors, or one 512-bit) or two (four, or two):
    the columns left at the end of a row run as a line, a vector or one element at a time, the chunks
    packed (R > 16) or read directly; every width and the leftovers of each against einsum, the same bits."""
    vl = 32 // np.dtype(dtype).itemsize
    for C in (1, vl - 1, vl, 2 * vl, 3 * vl + 1, 4 * vl, 5 * vl + 2, 7 * vl + 3, 75, 200):
        X = _sliced_view(rng, (3, 41, C), dtype)
        U = rng.standard_normal((41, R)).astype(dtype)
        bits = set()
        for snv in (2, 4):
            # blocks of up to twelve rows (the strips of two lines take 8-12), whatever this CPU has
            monkeypatch.setattr(sg, "wide_vectors", lambda: True)
            sg._blocks.cache_clear()
            monkeypatch.setattr(sg, "_inner_strip", lambda R, snv=snv: snv)
            for workers in (1, 2):
                Y = np.full((3, R, C), np.nan, dtype)
                sg.ttm_inner(X, U, Y, ExecutionPolicy(workers))
                _check(np.ascontiguousarray(X), U, 1, Y)
                bits.add(Y.tobytes())
        assert len(bits) == 1, C
    monkeypatch.undo()
    sg._blocks.cache_clear()
    assert sg._inner_strip(R) == (4 if sg.wide_vectors() and R >= 16 else 2)


@pytest.mark.parametrize("R", [13, 15, 16, 24, 32])
def test_long_rows_hinting_the_next_strip_give_the_same_bits(monkeypatch, all_blocks, R, dtype, rng):
    """Long rows (a row cut into tiles) read directly with two row blocks or more: the direct path's blocks also
    hint each row's next strip into L1 (``_AHEAD_L1``; strips of two lines, ``_simd.aquad8`` ..., at R >= 16;
    strips of one line in blocks of 6-8 rows, ``_simd.ablock6`` ..., at R = 13-15). A hint changes no value:
    tiles a fraction of the row, chunks of a few rows, the row's tail; the same bits as the plain blocks (blocks
    of at most 5 rows), on one worker and two, and einsum's sums to rounding."""
    assert sg._AHEAD_L1 is True
    vl = 32 // np.dtype(dtype).itemsize
    ct = 8 * vl  # (two strips of two lines a tile)
    C = 5 * ct + 3 * vl + 1  # five whole tiles, then a line, a vector and one column left
    X = _sliced_view(rng, (2, 37, C), dtype)
    U = rng.standard_normal((37, R)).astype(dtype)
    # (strip, widest row block, whether the hinting blocks run: strips of two lines, or blocks of 6-8 rows)
    configs = [(4, 12, True), (2, 12, R == 16), (2, 5, False)] if R >= 16 else [(2, 12, True), (2, 5, False)]
    bits = set()
    for snv, rb_cap, ahead in configs:
        monkeypatch.setattr(sg, "wide_vectors", lambda: True)  # (blocks of 8-12 rows, whatever this CPU has)
        monkeypatch.setattr(sg, "_inner_rb", lambda rb_cap=rb_cap: rb_cap)
        sg._blocks.cache_clear()
        monkeypatch.setattr(sg, "_inner_strip", lambda R, snv=snv: snv)
        monkeypatch.setattr(sg, "_tiling", lambda *a, **k: (ct, 8))
        monkeypatch.setattr(sg, "_direct_chunks", lambda *a, **k: True)
        g = sg._InnerGeometry(2, 37, C, R, X.itemsize, X.strides[1] // X.itemsize)
        assert (g.snv, g.ct, g.kc, g.packed) == (snv, ct, 8, False) and g.n_tiles == 2 * 6  # (rows of six tiles)
        sizes = [rb for _, rb in g.rows]
        hinted = len(sizes) >= 2 and (snv == 4 or (6 <= min(sizes) and max(sizes) <= 8))
        assert hinted is ahead, sizes  # (the kernel's own rule)
        for workers in (1, 2):
            Y = np.full((2, R, C), np.nan, dtype)
            sg.ttm_inner(X, U, Y, ExecutionPolicy(workers))
            _check(np.ascontiguousarray(X), U, 1, Y)
            bits.add(Y.tobytes())
    assert len(bits) == 1
    monkeypatch.undo()
    sg._blocks.cache_clear()


@pytest.mark.parametrize("R", [10, 13, 32])
def test_inner_kernel_bits_do_not_depend_on_row_blocks(monkeypatch, all_blocks, R, dtype, rng):
    """The row blocks of U (up to WIDE_RB = 12 rows where a line of X is one 512-bit vector, else up to
    MAX_RB = 6) change which rows share a load of X, never a sum: the same bits, and R cut as evenly as
    possible either way."""
    from tuckerkit.engine import _simd

    X = rng.standard_normal((3, 97, 75)).astype(dtype)
    U = rng.standard_normal((97, R)).astype(dtype)
    out = {}
    own, full = all_blocks
    for wide in (True, False):  # (the narrow tiling on this CPU's own kernel, which may lack the wide blocks)
        monkeypatch.setattr(sg, "wide_vectors", lambda wide=wide: wide)
        monkeypatch.setattr(sg, "_inner_kernel", full if wide else own)
        sg._blocks.cache_clear()
        rows = sg._row_blocks(R)
        widest = _simd.WIDE_RB if wide else _simd.MAX_RB
        sizes = [rb for _, rb in rows]
        assert [r0 for r0, _ in rows] == [sum(sizes[:i]) for i in range(len(sizes))]
        assert sum(sizes) == R and max(sizes) <= widest and max(sizes) - min(sizes) <= 1
        out[wide] = np.empty((3, R, 75), dtype)
        sg.ttm_inner(X, U, out[wide])
    sg._blocks.cache_clear()
    assert out[True].tobytes() == out[False].tobytes()
    _check(X, U, 1, out[True])
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    assert [[rb for _, rb in sg._row_blocks(r)] for r in (10, 13, 32)] == [[10], [7, 6], [11, 11, 10]]
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert [[rb for _, rb in sg._row_blocks(r)] for r in (10, 13, 32)] == [[5, 5], [5, 4, 4], [6, 6, 5, 5, 5, 5]]


def _fresh_block(rb, nv, wide, monkeypatch, strided=False):
    """A block intrinsic compiled now (not from the disk cache) with 512-bit vectors or without; the strided
    (``g``) form reads ``up`` as rows ``rb`` elements apart, the packed form's layout."""
    from numba import njit

    from tuckerkit.engine import _simd

    monkeypatch.setattr(_simd, "_WIDE", wide)
    blk = _simd._make(rb, nv, strided)

    if strided:
        @njit(cache=False)
        def run(x, sxi, n, up, y, syr):  # pragma: no cover - compiled
            blk(x, 0, sxi, n, up, 0, rb, 1, y, 0, syr, 0, x, 0, 0, 0)
    else:
        @njit(cache=False)
        def run(x, sxi, n, up, y, syr):  # pragma: no cover - compiled
            blk(x, 0, sxi, n, up, 0, y, 0, syr, 0, x, 0, 0, 0)

    return run


@pytest.mark.parametrize("nr", [1, 3, 8, 16])
def test_tr_block_moves_a_transposed_block_and_nothing_else(nr, dtype, rng):
    """``tr_block``: ``L`` runs of ``L`` elements of the source (rows ``ss`` apart, from ``so``) land transposed
    in the destination, the first ``nr`` of its rows (``ds`` apart, from ``do``), every other element of the
    destination untouched; values moved exactly (any CPU: LLVM splits the 512-bit vectors where it must)."""
    from numba import njit

    from tuckerkit.engine import _simd

    L = 64 // np.dtype(dtype).itemsize
    nr = min(nr, L)

    @njit(cache=False)
    def run(src, so, ss, dst, do, ds, n):  # pragma: no cover - compiled
        _simd.tr_block(src, so, ss, dst, do, ds, n)

    ss, so, ds, do = L + 5, 3, L + 9, 7
    src = rng.standard_normal(so + L * ss).astype(dtype)
    dst = np.full(do + L * ds + 4, np.nan, dtype)
    run(src, so, ss, dst, do, ds, nr)
    blk = src[so:so + L * ss].reshape(L, ss)[:, :L]  # (q, p): element p of run q
    want = np.full_like(dst, np.nan)
    for p in range(nr):
        want[do + p * ds:do + p * ds + L] = blk[:, p]
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 16, 17, 50])
def test_copy_run_moves_the_run_and_nothing_else(n, dtype, rng):
    """``copy_run``: ``n`` elements from ``src[so:]`` to ``dst[do:]`` (whole 512-bit vectors, then one masked),
    every other element of the destination untouched, nothing read past the run (NaN after it in the source
    reaches nothing)."""
    from numba import njit

    from tuckerkit.engine import _simd

    @njit(cache=False)
    def run(src, so, dst, do, k):  # pragma: no cover - compiled
        _simd.copy_run(src, so, dst, do, k)

    src = np.full(n + 40, np.nan, dtype)
    src[3:3 + n] = rng.standard_normal(n)
    dst = np.full(n + 40, -1.0, dtype)
    run(src, 3, dst, 5, n)
    want = np.full_like(dst, -1.0)
    want[5:5 + n] = src[3:3 + n]
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("strided", [False, True], ids=["packed", "strided"])
@pytest.mark.parametrize(("nv", "rb"), [(2, 1), (2, 5), (2, 6), (2, 12), (4, 1), (4, 7), (4, 12), (8, 1), (8, 6)])
def test_wide_block_gives_the_bits_of_two_narrow_vectors(monkeypatch, nv, rb, strided, dtype, rng):
    """A row's ``nv`` 256-bit vectors as ``nv / 2`` 512-bit ones (AVX-512, one per cache line) or as they
    are: each lane the same in-order chain of fused multiply-adds, so the same bits (LLVM splits the wide
    vectors on a CPU without AVX-512, so this runs anywhere); against float64 sums; where the CPU has AVX-512
    the wide block's code uses zmm registers for its fused multiply-adds."""
    import re

    from tuckerkit.engine import _simd

    n = 37
    lanes = nv * 32 // np.dtype(dtype).itemsize
    sx, sy = lanes + 3, lanes + 7  # rows of x and y not aligned
    x = rng.standard_normal(n * sx).astype(dtype)
    up = rng.standard_normal(n * rb).astype(dtype)
    ys = {}
    for wide in (False, True):
        run = _fresh_block(rb, nv, wide, monkeypatch, strided)
        y = np.full(rb * sy, np.nan, dtype)
        run(x, sx, n, up, y, sy)
        ys[wide] = y
        if wide and _simd._detect_feature("avx512f") and _simd.simd_supported():
            asm = run.inspect_asm(run.signatures[0])
            assert re.search(r"vfmadd\w+\s[^\n]*zmm", asm), "no 512-bit fused multiply-add in the wide block"
    assert ys[True].tobytes() == ys[False].tobytes()
    Y = ys[True].reshape(rb, sy)
    assert np.isnan(Y[:, lanes:]).all()
    X = x[:n * sx].reshape(n, sx)[:, :lanes].astype(np.float64)
    Up = up.reshape(n, rb).astype(np.float64)
    ref, scale = Up.T @ X, np.abs(Up.T) @ np.abs(X)
    assert np.all(np.abs(Y[:, :lanes] - ref) <= 4 * (n + 2) * np.finfo(dtype).eps * scale)


def test_wide_vectors_follow_numbas_target(monkeypatch):
    """512-bit blocks only where numba compiles for AVX-512F (its CPU_FEATURES / CPU_NAME settings read as
    :func:`simd_supported` reads them) on top of AVX2 and FMA."""
    from numba.core import config

    from tuckerkit.engine import _simd

    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,+avx512f", raising=False)
    assert _simd._detect_feature("avx512f") is True
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,-avx512f", raising=False)
    assert _simd._detect_feature("avx512f") is False
    monkeypatch.setattr(config, "CPU_FEATURES", None, raising=False)
    monkeypatch.setattr(config, "CPU_NAME", "generic", raising=False)
    assert _simd._detect_feature("avx512f") is False
    monkeypatch.setattr(_simd, "_WIDE", None)
    monkeypatch.setattr(_simd, "_SIMD", False)
    assert _simd.wide_vectors() is False


def test_cpu_name_follows_numbas_target_and_picks_the_u_bound(monkeypatch):
    """The CPU the per-CPU bounds are looked up by: numba's named target (``NUMBA_CPU_NAME``) when set, else the
    host's as LLVM names it; ``wide_outer_u_bytes`` takes that CPU's entry, or the default elsewhere."""
    from numba.core import config

    from tuckerkit.engine import _simd

    monkeypatch.setattr(_simd, "_CPU", None)
    monkeypatch.setattr(config, "CPU_NAME", "haswell", raising=False)
    assert _simd.cpu_name() == "haswell"
    monkeypatch.setattr(_simd, "_CPU", None)
    monkeypatch.setattr(config, "CPU_NAME", None, raising=False)
    import llvmlite.binding as ll

    assert _simd.cpu_name() == ll.get_host_cpu_name()
    for cpu, want in (("znver5", 4 << 20), ("znver4", sg.WIDE_OUTER_U_BYTES), ("haswell", 1 << 20)):
        monkeypatch.setattr(sg, "cpu_name", lambda cpu=cpu: cpu)
        assert sg.wide_outer_u_bytes() == want, cpu
    monkeypatch.setattr(_simd, "_CPU", None)


@pytest.mark.parametrize("order", ["C", "F"])
def test_planner_sends_short_row_middle_modes_to_the_inner_kernel(order, dtype, rng):
    """With the machine's own roofline: a middle mode (short unit-stride rows) of a 3-way tensor goes to the
    inner kernel at ranks 10 and 32, in C and F order; the result is the BLAS plan's to rounding."""
    contract_mod._cached_plan.cache_clear()
    X = np.asarray(rng.standard_normal((120, 90, 100)).astype(dtype), order=order)
    for R in (10, 32):
        U = rng.standard_normal((90, R)).astype(dtype)
        plan = ttm_plan(X, U, 1, transpose=True)
        assert plan.compiled is CompiledKernel.TTM_INNER, plan.explain()
        Y = plan(X, U)
        assert Y.flags.c_contiguous if order == "C" else Y.flags.f_contiguous
        _check(X, U, 1, Y)
        blas = dataclasses.replace(plan, compiled=CompiledKernel.NONE, _out_order=plan._sr.blas_out_order)
        np.testing.assert_allclose(plan(X, U), blas(X, U), rtol=0, atol=8 * 92 * np.finfo(dtype).eps
                                   * np.abs(X).max() * np.abs(U).max())
    contract_mod._cached_plan.cache_clear()


def test_inner_kernel_never_chosen_without_avx2_fma(monkeypatch, forced, rng):
    """On a CPU without AVX2 and FMA (or numba told to compile for one) the planner leaves the inner kernel's
    TTMs on BLAS, even with the cost model forced toward the kernel; the result is still right. The
    detection reads numba's target settings."""
    from tuckerkit.engine import _simd

    X = rng.standard_normal((6, 7, 9))
    U = rng.standard_normal((7, 3))
    assert ttm_plan(X, U, 1, transpose=True).compiled is CompiledKernel.TTM_INNER
    monkeypatch.setattr(_simd, "_SIMD", False)
    contract_mod._cached_plan.cache_clear()
    plan = ttm_plan(X, U, 1, transpose=True)
    assert plan.compiled is CompiledKernel.NONE
    _check(X, U, 1, plan(X, U))
    from numba.core import config

    monkeypatch.setattr(config, "CPU_FEATURES", "+sse2,+avx")
    assert _simd._detect_simd() is False
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,+avx")
    assert _simd._detect_simd() is True
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    monkeypatch.setattr(config, "CPU_NAME", "generic")
    assert _simd._detect_simd() is False
    contract_mod._cached_plan.cache_clear()


@pytest.mark.parametrize("R", [10, 23])
@pytest.mark.parametrize("C", [333, 2100])
def test_inner_kernel_prefetch_changes_no_bit(monkeypatch, C, R, dtype, rng):
    """The prefetch of the next chunk (one run of lines where a chunk's rows lie back to back, else one run per
    row) is a hint: the same bits without it, with 1 and 2 workers, several chunks and tiles, on the direct
    (R = 10) and the packed (R = 23) kernel."""
    X = rng.standard_normal((3, 150, C)).astype(dtype)
    U = rng.standard_normal((150, R)).astype(dtype)
    monkeypatch.setattr(sg, "_L1_BYTES", 4096)  # several chunks of i per tile
    monkeypatch.setattr(sg, "_PREFETCH_NEXT", False)
    ref = np.empty((3, R, C), dtype)
    sg.ttm_inner(X, U, ref)
    _check(X, U, 1, ref)
    monkeypatch.setattr(sg, "_PREFETCH_NEXT", True)
    for workers in (1, 2):
        Y = np.empty_like(ref)
        sg.ttm_inner(X, U, Y, ExecutionPolicy(workers))
        assert Y.tobytes() == ref.tobytes(), workers


def _at_offset(a: np.ndarray, offset: int, row: int = 0) -> np.ndarray:
    """A copy of ``a`` (3-D) whose first element lies ``offset`` bytes past a 64-byte line, its rows ``row``
    elements apart (0: ``a``'s own row length)."""
    A, I, C = a.shape  # noqa: E741
    row = row or C
    it = a.itemsize
    raw = np.empty(A * I * row + 128 // it, a.dtype)
    start = (-raw.ctypes.data % 64 + offset) // it
    out = raw[start:start + A * I * row].reshape(A, I, row)[:, :, :C]
    out[...] = a
    assert out.ctypes.data % 64 == offset
    return out


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("R", [10, 32])
def test_rows_past_a_line_start_their_tiles_at_one_with_the_same_bits(monkeypatch, packed, R, dtype, rng):
    """Where every row of X is as far past a 64-byte line (row strides whole lines) and a row spans several
    tiles, the tiles start at the first aligned column and the columns before it (the head, up to a line less
    one element) are summed on their own: the same bits wherever X and Y lie (every offset of X from a line, Y
    at its own), einsum's sums to rounding, on the direct and the packed kernel, one and two workers; with a
    last tile the head leaves empty, a row of several tiles over three a, and rows a multiple of 4 KiB
    apart. The tiles' sums of :func:`sg.ttm_inner_dot` and :func:`sg.ttm_inner_axpy` keep their tiles (their
    bits would otherwise hang on the address)."""
    monkeypatch.setattr(sg, "_direct_chunks", lambda *a, **k: not packed)
    it = dtype.itemsize
    line = 64 // it
    U = rng.standard_normal((13, R)).astype(dtype)
    g = sg._InnerGeometry(1, 13, 4000, R, it, 4096 * it)
    ct = g.ct
    assert g.packed is packed and -(-4000 // ct) > 1
    # C = 2 tiles and 3 columns: a head of 3 columns or more leaves the third tile empty
    for A, C, row in ((1, 4000, 4096), (3, 2 * ct + 3, 2 * ct + 3 * line), (1, 2 * ct + 3, 4096)):
        X = rng.standard_normal((A, 13, C)).astype(dtype)
        heads = []
        outs = []
        for off in range(0, 64, it):
            Xo = _at_offset(X, off, row)
            assert Xo.strides[1] % 64 == 0
            for workers in (1, 2):
                Y = _at_offset(np.full((A, R, C), np.nan, dtype), (off + 16 * workers) % 64)
                sg.ttm_inner(Xo, U, Y, ExecutionPolicy(workers))
                outs.append(Y.tobytes())
            heads.append((64 - off) % 64 // it)
            assert np.array_equal(Xo, X)
            # the rule: the head where rows are whole lines apart, at least two strips follow and the tiles'
            # sums are not taken; none where a row stride is not a whole number of lines
            fx, w = sg.flat_span(Xo), g.snv * g.vl
            args = (C, Xo.strides[0] // it, Xo.strides[1] // it, w)
            assert sg._head_cols(fx, *args, True) == heads[-1]
            assert sg._head_cols(fx, *args, False) == 0
            assert sg._head_cols(fx, C, Xo.strides[0] // it, Xo.strides[1] // it + 1, w, True) == 0
            assert sg._head_cols(fx, heads[-1] + 2 * w - 1, *args[1:], True) == 0
        _check(X, U, 1, np.frombuffer(outs[0], dtype).reshape(A, R, C))
        assert all(o == outs[0] for o in outs), (A, C)
        assert max(heads) == line - 1 and min(heads) == 0
    # the fused sums: one tiling wherever X lies
    X = rng.standard_normal((2, 13, 4000)).astype(dtype)
    W = rng.standard_normal((4000, R)).astype(dtype)
    Wa = rng.standard_normal((2, R)).astype(dtype)
    dots = {sg.ttm_inner_dot(_at_offset(X, off, 4096), U, W).tobytes() for off in range(0, 64, it)}
    axpys = {sg.ttm_inner_axpy(_at_offset(X, off, 4096), U, Wa).tobytes() for off in range(0, 64, it)}
    assert len(dots) == 1 and len(axpys) == 1


def test_a_launch_reused_at_other_addresses_takes_each_calls_head(forced, dtype, rng, monkeypatch):
    """A plan's launch is kept per operand strides, not addresses: reused on a tensor placed at every offset
    from a line, each call's kernel works out its own head (the tensor's own address): the same bits, one
    launch, einsum's sums to rounding."""
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 50_000)
    if _handoff._handoff() is None:
        pytest.skip("no GEMM helpers on this platform (the launch needs them)")
    X = rng.standard_normal((13, 8, 500)).astype(dtype)  # first mode: rows of 4000 columns, whole lines apart
    U = rng.standard_normal((13, 20)).astype(dtype)
    plan = plan_contraction("abc,az->zbc", X, U, policy=ExecutionPolicy(2))
    assert plan.compiled is CompiledKernel.TTM_INNER, plan.explain()
    outs = []
    for off in range(0, 64, dtype.itemsize):
        Xo = _at_offset(X.reshape(1, 13, 4000), off).reshape(X.shape)
        outs.append(contract("abc,az->zbc", Xo, U, plan=plan).tobytes())
        assert np.array_equal(Xo, X)
    assert len(plan._bound.launch) == 1 and isinstance(next(iter(plan._bound.launch.values())), sg._Launch)
    assert all(o == outs[0] for o in outs)
    _check(X, U, 0, np.frombuffer(outs[0], dtype).reshape(20, 8, 500))


def test_l1_crowding_rule():
    """Rows a multiple of 4 KiB apart share one L1 set; half of that, two sets; odd line strides spread."""
    assert sg._l1_crowded(307200, 32) is True  # 320x240x160 float64, first mode: 75 pages a row
    assert sg._l1_crowded(153600, 32) is False  # float32: rows alternate between two sets, 16 lines each
    assert sg._l1_crowded(153600, 33) is True
    assert sg._l1_crowded(320000, 32) is False  # 200^3 float64: 5000 lines a row, odd, every set
    assert sg._l1_crowded(4096, 16) is False and sg._l1_crowded(4096, 17) is True
    assert sg._l1_crowded(4100, 64) is False  # rows not line-aligned straddle sets


def test_long_rows_take_chunks_by_the_vector_width_with_the_same_bits(monkeypatch, dtype, rng):
    """Long rows (the first mode of a C-ordered tensor) take chunks of at most 32 rows where vectors are wide
    and 16 with 256-bit vectors (_max_kc_long); either cap gives the same bits (each element one in-order chain
    of fused multiply-adds) and einsum's sums to rounding."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    assert sg._max_kc_long() == 32 and sg._tiling(200, 16, 8, 40000, row_bytes=320000)[1] == 29
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert sg._max_kc_long() == 16 and sg._tiling(200, 10, 8, 40000, row_bytes=320000)[1] == 16
    monkeypatch.undo()
    C = 9000 // np.dtype(dtype).itemsize  # (long rows, not line-aligned: spread over L1's sets)
    X = rng.standard_normal((1, 100, C)).astype(dtype)
    U = rng.standard_normal((100, 10)).astype(dtype)
    out = []
    for cap in (32, 16):
        monkeypatch.setattr(sg, "_max_kc_long", lambda cap=cap: cap)
        assert sg._tiling(100, 10, X.itemsize, C, row_bytes=X.strides[1])[1] <= cap
        Y = np.empty((1, 10, C), dtype)
        sg.ttm_inner(X, U, Y, ExecutionPolicy(2))
        _check(X, U, 1, Y)
        out.append(Y.tobytes())
    assert out[0] == out[1]


def test_long_rows_at_one_row_block_take_chunks_of_24_rows_with_the_same_bits(monkeypatch, all_blocks, dtype, rng):
    """Where vectors are wide, long rows at a rank of one row block (R up to 12) take chunks of at most 24 rows
    (_one_block_kc), also where their stride crowds one set of L1 (which lets 32 through); two row blocks keep
    32 rows, 256-bit vectors 16, many long rows their 16. Either cap gives the same bits and einsum's sums to
    rounding (the kernels with every block, whatever this CPU's vectors)."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    assert sg._tiling(200, 10, 8, 40000, row_bytes=320000) == (512, 23)  # 200^3's first mode
    assert sg._tiling(200, 12, 4, 40000, row_bytes=160000) == (1024, 23)
    assert sg._tiling(320, 10, 8, 38400, row_bytes=307200) == (512, 23)  # 320x240x160's: rows 75 x 4 KiB apart
    assert sg._direct_chunks(10, 307200, 307200, 23, True) is True  # (read directly)
    assert sg._tiling(64, 4, 8, 262144, row_bytes=2 << 20) == (512, 22)  # 64^4's
    assert sg._tiling(200, 13, 8, 40000, row_bytes=320000) == (512, 29)  # two row blocks
    assert sg._tiling(320, 16, 8, 38400, row_bytes=307200) == (512, 32)
    assert sg._tiling(200, 10, 8, 400, row_bytes=3200)[1] == 50  # short rows (a middle mode)
    assert sg._tiling(3600, 10, 8, 3600, 2, 28800, True, 3600 * 28800) == (1800, 16)  # many long rows
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert sg._one_block_kc(10, 32) == 32 and sg._tiling(200, 10, 8, 40000, row_bytes=320000)[1] == 16
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    C = 4096 * 3 // np.dtype(dtype).itemsize  # (long rows 12 KiB apart: every row's line in one set of L1)
    X = rng.standard_normal((1, 96, C)).astype(dtype)
    U = rng.standard_normal((96, 10)).astype(dtype)
    out = []
    for cap in (24, 32):
        monkeypatch.setattr(sg, "_MAX_KC_ONE_BLOCK", cap)
        assert sg._InnerGeometry(1, 96, C, 10, X.itemsize, X.strides[1]).kc == {24: 24, 32: 32}[cap]
        Y = np.empty((1, 10, C), dtype)
        sg.ttm_inner(X, U, Y, ExecutionPolicy(2))
        _check(X, U, 1, Y)
        out.append(Y.tobytes())
    assert out[0] == out[1]


@pytest.mark.parametrize("make", [
    lambda: np.empty((10, 200), np.float32).T,  # F order (a product's (I, R) output over an (R, I) buffer)
    lambda: np.empty((10, 20, 30)).transpose(1, 2, 0),  # a rank-outer partial's view
    lambda: np.empty((3, 4, 5, 6)).transpose(2, 0, 3, 1),
    lambda: np.empty((5, 1, 7)).transpose(1, 2, 0),
    lambda: np.empty((4, 5, 6))[:, ::2],  # not one block: the general span
    lambda: np.empty((6, 8))[:, :5],
    lambda: np.arange(24.0).reshape(2, 3, 4),
])
def test_flat_span_is_the_memory_from_the_first_element(make):
    """flat_span's shortcuts (C or F order, or one block in another order of the axes) give the very view its
    general form does: the same first element, length and stride; negative strides give None."""
    a = make()
    span = 1 + sum((n - 1) * (st // a.itemsize) for n, st in zip(a.shape, a.strides, strict=True))
    ref = np.lib.stride_tricks.as_strided(a, shape=(span,), strides=(a.itemsize,))
    got = sg.flat_span(a)
    assert got.__array_interface__["data"][0] == ref.__array_interface__["data"][0]
    assert (got.shape, got.strides) == (ref.shape, ref.strides)
    assert np.shares_memory(got, a)
    assert sg.flat_span(np.empty((4, 5))[:, ::-1]) is None


def test_many_long_rows_take_short_chunks_of_wide_tiles_with_the_same_bits(monkeypatch, all_blocks, dtype, rng):
    """Many long rows of a streamed tensor (CP-ALS's merged first half of a 4-way tensor, (1, I_0 I_1, I_2 I_3))
    at a rank of one row block, where vectors are wide, take chunks of 16 rows of at least two tiles a row of
    at most 16 KiB, split evenly (_many_long_rows); fewer rows, a larger rank, a tensor the caches hold or
    256-bit vectors keep the long rows' tiling. Either tiling gives the same bits and einsum's sums to
    rounding (the kernels with every block, whatever this CPU's vectors)."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    sg._blocks.cache_clear()
    try:
        big = 3600 * 3600 * 8
        assert sg._tiling(3600, 10, 8, 3600, 2, 28800, True, big) == (1800, 16)  # 60^4 float64: two tiles a row
        assert sg._tiling(3600, 10, 4, 3600, 2, 14400, True, big // 2) == (1808, 16)  # (whole lines of float32)
        assert sg._tiling(6400, 12, 8, 6400, 2, 51200, True, 6400 * 6400 * 8) == (1600, 16)  # 80^4: four tiles
        old = (512, 32)  # (the long rows' tiling: 4 KiB tiles, chunks of 32 rows)
        assert sg._tiling(3600, 13, 8, 3600, 2, 28800, True, big) == old  # two row blocks
        assert sg._tiling(999, 10, 8, 3600, 2, 28800, True, 999 * 28800)[0] == old[0]  # few rows
        assert sg._tiling(2000, 10, 4, 2000, 2, 8000, False, 2000 * 8000) == (1024, 63)  # in cache (16 MB)
        monkeypatch.setattr(sg, "MANY_ROWS", False)
        assert sg._tiling(3600, 10, 8, 3600, 2, 28800, True, big) == (512, 24)  # (one row block: _one_block_kc)
        monkeypatch.setattr(sg, "MANY_ROWS", True)
        monkeypatch.setattr(sg, "wide_vectors", lambda: False)
        assert sg._tiling(3600, 10, 8, 3600, 2, 28800, True, big)[0] == old[0]
        monkeypatch.setattr(sg, "wide_vectors", lambda: True)
        C = (33 << 20) // (1024 * np.dtype(dtype).itemsize) + 8  # (a tensor just beyond STREAMED_BYTES)
        X = rng.standard_normal((1, 1024, C)).astype(dtype)
        U = rng.standard_normal((1024, 10)).astype(dtype)
        assert sg._many_long_rows(1024, 10, X.itemsize, C, X.nbytes)
        out = []
        for many in (True, False):
            monkeypatch.setattr(sg, "MANY_ROWS", many)
            Y = np.empty((1, 10, C), dtype)
            sg.ttm_inner(X, U, Y, ExecutionPolicy(2))
            _check(X, U, 1, Y)
            out.append(Y.tobytes())
        assert out[0] == out[1]
    finally:
        sg._blocks.cache_clear()  # (no wide blocks left for the tests after this one)


def test_streamed_short_rows_take_shorter_chunks_with_256_bit_vectors(monkeypatch, dtype, rng):
    """A middle mode (short rows) of a tensor beyond STREAMED_BYTES takes chunks of at most 32 rows with 256-bit
    vectors (_short_kc), 64 otherwise, and its long rows 4 KiB apart are packed first; ttm_inner passes the flag
    by the tensor's bytes to both; the same bits either way and einsum's sums to rounding."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert sg._tiling(200, 10, 8, 200, row_bytes=1600, streamed=True)[1] == 29
    assert sg._tiling(200, 10, 8, 200, row_bytes=1600)[1] == 50
    # long rows a multiple of 4 KiB apart (320x240x160's first mode): packed first when streamed, with 256-bit
    # vectors (more than _L1_LINES_PER_SET_256 lines a set), read directly otherwise
    assert sg._direct_chunks(10, 307200, 307200, 16, streamed=True) is False
    assert sg._direct_chunks(10, 307200, 307200, 16) is True
    assert sg._direct_chunks(10, 320000, 320000, 16, streamed=True) is True  # (200^3: spread over the sets)
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    assert sg._tiling(200, 10, 8, 200, row_bytes=1600, streamed=True)[1] == 50
    assert sg._direct_chunks(10, 307200, 307200, 16, streamed=True) is True
    monkeypatch.undo()
    X = rng.standard_normal((3, 100, 40)).astype(dtype)
    U = rng.standard_normal((100, 10)).astype(dtype)
    seen, real, direct = [], sg._tiling, sg._direct_chunks
    monkeypatch.setattr(sg, "_tiling", lambda *a: seen.append(a[6]) or real(*a))  # (streamed)
    monkeypatch.setattr(sg, "_direct_chunks", lambda *a: seen.append(a[4]) or direct(*a))  # (streamed)
    out = []
    # (a streamed tensor's cap made one that changes this tiling, whatever this CPU's vectors)
    monkeypatch.setattr(sg, "_short_kc", lambda streamed: 8 if streamed else sg._MAX_KC)
    for limit in (1 << 40, 0):  # (in cache, then "streamed": a tensor beyond the limit)
        monkeypatch.setattr(sg, "STREAMED_BYTES", limit)
        Y = np.empty((3, 10, 40), dtype)
        sg.ttm_inner(X, U, Y, ExecutionPolicy(2))
        _check(X, U, 1, Y)
        out.append(Y.tobytes())
    assert seen == [False, False, True, True] and out[0] == out[1]


@pytest.mark.parametrize("wide", [False, True])
def test_crowded_long_rows_take_short_chunks_and_keep_the_bits(monkeypatch, dtype, rng, wide):
    """Long rows a multiple of 4 KiB apart would crowd one L1 set with chunks of 40 rows: their tiling takes at
    most _crowd_lines (16 with 256-bit vectors, 32 where they are wide), which the direct kernel then reads;
    the same bits as chunks of 40 packed first (every element the same in-order chain of fused multiply-adds)
    and as einsum to rounding. Rows not line-aligned or spread over the sets keep their chunks."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: wide)  # (the rule only: the kernels stay this CPU's)
    monkeypatch.setattr(sg, "_max_kc_long", lambda: 40)
    monkeypatch.setattr(sg, "_MAX_KC_ONE_BLOCK", 40)  # (the crowding alone: no cap for one row block)
    assert sg._crowd_lines() == (32 if wide else 16)
    C = 8192 // np.dtype(dtype).itemsize
    X = rng.standard_normal((2, 70, C)).astype(dtype)
    U = rng.standard_normal((70, 10)).astype(dtype)
    assert sg._tiling(70, 10, X.itemsize, C)[1] == 35 and sg._l1_crowded(X.strides[1], 35, sg._crowd_lines())
    kc = sg._tiling(70, 10, X.itemsize, C, row_bytes=X.strides[1])[1]
    assert kc == (24 if wide else 14) and not sg._l1_crowded(X.strides[1], kc, sg._crowd_lines())
    assert sg._direct_chunks(10, X.strides[1], X.strides[1], kc) is True
    assert sg._direct_chunks(10, X.strides[1], X.strides[1], 35) is False
    assert sg._tiling(200, 10, 8, 40000, row_bytes=320000) == sg._tiling(200, 10, 8, 40000)  # 200^3: spread
    assert sg._tiling(200, 10, 8, 40001, row_bytes=320008) == sg._tiling(200, 10, 8, 40001)  # not aligned
    monkeypatch.undo()
    monkeypatch.setattr(sg, "_max_kc_long", lambda: 40)
    direct = np.empty((2, 10, C), dtype)
    sg.ttm_inner(X, U, direct, ExecutionPolicy(2))
    _check(X, U, 1, direct)
    monkeypatch.setattr(sg, "_l1_sets", lambda row_bytes: sg._L1_SETS)  # chunks of 35, packed
    monkeypatch.setattr(sg, "_l1_crowded", lambda row_bytes, kc, lines=16: True)
    packed = np.empty_like(direct)
    sg.ttm_inner(X, U, packed, ExecutionPolicy(2))
    assert packed.tobytes() == direct.tobytes()


@pytest.mark.parametrize("geometry", ["rows back to back", "long rows", "rows apart"])
def test_outer_kernel_prefetch_changes_no_bit(monkeypatch, dtype, rng, geometry):
    """The last-mode dot-product kernel's prefetch of the rows tiles ahead is a hint: the same bits without it, at any
    distance, in shares without a test per line (rows back to back or apart) or a line at a time (long rows,
    shares beyond ``_DOT_BURST``), with a last tile of fewer than four rows."""
    cases = {"rows back to back": (203, 157, 0), "long rows": (41, 1000, 0), "rows apart": (203, 157, 13)}
    A, I, pad = cases[geometry]  # noqa: E741
    X = rng.standard_normal((A, I + pad)).astype(dtype)[:, :I]
    Ut = rng.standard_normal((7, I)).astype(dtype)
    if geometry == "long rows":  # a tile's lines over its three shares (R = 7: two blocks) exceed the burst
        assert 4 * I * X.itemsize // 64 // 3 > sg._DOT_BURST
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: False)  # (the dot products at every rank)
    monkeypatch.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: False)
    monkeypatch.setattr(sg, "_OUTER_PREFETCH", 0)
    ref = np.empty((7, A), dtype)
    sg.ttm_outer(X, Ut, ref)
    np.testing.assert_allclose(ref, Ut.astype(np.float64) @ X.T.astype(np.float64), rtol=0,
                               atol=8 * I * np.finfo(dtype).eps * np.abs(X).max() * np.abs(Ut).max())
    for ahead in (1, 2, 3):
        monkeypatch.setattr(sg, "_OUTER_PREFETCH", ahead)
        for workers in (1, 2):
            Y = np.empty_like(ref)
            sg.ttm_outer(X, Ut, Y, ExecutionPolicy(workers))
            assert Y.tobytes() == ref.tobytes(), (ahead, workers)


# --- the GEMM-like unit-stride kernel (rows of X broadcast against packed columns of U) -------------------


@pytest.fixture
def gemm_style(monkeypatch):
    """:func:`ttm_outer` sent to its GEMM-like kernel at every rank (the rule picks it at R of 16 and more)."""
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: False)
    monkeypatch.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: True)


def _outer_layouts(rng, A, I, R, dtype):  # noqa: E741
    """X2 (A, I) C-ordered and as a sliced view (row stride > I), and outputs (R, A): C, F and strided."""
    big = rng.standard_normal((A, I + 5)).astype(dtype)
    xs = {"C": np.ascontiguousarray(big[:, 2:2 + I]), "sliced": big[:, 2:2 + I]}
    outs = {"rows": lambda: np.full((R, A), np.nan, dtype),  # Y2[r, a] unit-strided along a
            "cols": lambda: np.full((A, R), np.nan, dtype).T,  # unit-strided along r: written directly
            "strided": lambda: np.full((A, 3, R), np.nan, dtype)[:, 1, :].T,
            "both strided": lambda: np.full((R, A, 2), np.nan, dtype)[:, :, 0]}  # no unit stride at all
    return xs, outs


def _layout_bits(rng, A, I, R, dtype):  # noqa: E741
    """``ttm_outer`` on every layout of X and of the output (:func:`_outer_layouts`), each against einsum: the
    set of the results' bits (one element where the layouts agree bit for bit), U and X's C-ordered layout."""
    U = rng.standard_normal((I, R)).astype(dtype)
    Ut = np.ascontiguousarray(U.T)
    xs, outs = _outer_layouts(rng, A, I, R, dtype)
    bits = set()
    for X2, make in itertools.product(xs.values(), outs.values()):
        Y2 = make()
        sg.ttm_outer(X2, Ut, Y2)
        _check(np.ascontiguousarray(X2), U, 1, Y2.T)
        bits.add(np.ascontiguousarray(Y2).tobytes())
    return bits, Ut, xs["C"]


@pytest.mark.parametrize("R", [*range(1, 14), 15, 16, 17, 20, 23, 24, 25, 31, 32, 33, 40, 47, 50, 64])
@pytest.mark.parametrize("rows", [6, 12])
def test_outer_gemm_kernel_every_rank_and_layout(R, rows, dtype, gemm_style, all_blocks, monkeypatch, rng):
    """Every rank (one-, two- and three-vector strips; with 512-bit vectors strips of one, two and four
    vectors: all three at float64 R = 50), every layout, with blocks of six rows of X per
    two-vector strip (256-bit vectors) and of twelve (512-bit, whatever this CPU has): against einsum, and
    the same bits for every layout and both blockings."""
    monkeypatch.setattr(sg, "_outer_rb", lambda: rows)
    for A, I in ((1, 1), (7, 13), (13, 7), (25, 1), (25, 203)):  # noqa: E741
        bits, _, _ = _layout_bits(rng, A, I, R, dtype)
        assert len(bits) == 1, (A, I)  # every layout of X and of the output: the same bits


@pytest.mark.parametrize("R", [6, 8, 12, 16, 24, 32])
def test_outer_gemm_kernel_bits_do_not_depend_on_workers_chunks_or_prefetch(monkeypatch, all_blocks, R, dtype,
                                                                                rng):
    """Several tiles pieces (any worker takes any), chunks of i carried through the output (or the private
    buffer where R is not whole vectors), the prefetch a hint, blocks of 12 or 6 rows of X, and an output with R
    outermost copied out after 1, 3 or 32 tiles (groups that straddle the pieces, and a last one cut short): the
    same bits for all of them."""
    X = rng.standard_normal((1001, 157)).astype(dtype)
    Ut = rng.standard_normal((R, 157)).astype(dtype)
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: False)
    monkeypatch.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: True)
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # (pieces cut finer than by default: several of them)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 250_000)
    assert min(-(-1001 // sg._OUTER_ROWS), 2 * X.size * R // sg.KERNEL_PIECE_FLOPS) > 3
    ref = np.empty((1001, R), dtype).T
    sg.ttm_outer(X, Ut, ref)
    _check(X, np.ascontiguousarray(Ut.T), 1, ref.T)
    for workers, kc, pf, rb in ((2, 0, 2, 12), (1, 8, 0, 6), (2, 50, 1, 12), (3, 157, 2, 6), (2, 0, 2, 4)):
        if kc:
            monkeypatch.setattr(sg, "_outer_kc", lambda rows, itemsize, nv=2, kc=kc: kc)
        monkeypatch.setattr(sg, "_OUTER_GEMM_PREFETCH", pf)
        monkeypatch.setattr(sg, "_outer_rb", lambda rb=rb: rb)
        for out, grp in ((np.empty((1001, R), dtype).T, 32), (np.empty((R, 1001), dtype), 1),
                         (np.empty((R, 1001), dtype), 3), (np.empty((R, 1001), dtype), 32)):
            monkeypatch.setattr(sg, "_OUTER_COPY_TILES", grp)
            sg.ttm_outer(X, Ut, out, ExecutionPolicy(workers))
            assert np.ascontiguousarray(out).tobytes() == np.ascontiguousarray(ref).tobytes(), (workers, kc, pf, grp)


def _tail_split(R: int, itemsize: int) -> int:
    """The columns :func:`sg.ttm_outer`'s register blocks take where the tail is on (whole vectors: 512-bit where
    they are wide)."""
    pad = (64 if sg.wide_vectors() else 32) // itemsize
    return R - R % pad


@pytest.mark.parametrize("R", [18, 26, 34, 50])
def test_outer_tail_columns_are_dot_products_of_each_tile(R, dtype, gemm_style, rng, monkeypatch):
    """With the tail on (:func:`sg.outer_tail_style`), the register blocks take U's columns in whole vectors and
    the few left are dot products of each tile's rows (:func:`sg._tail_dots`): einsum's sums to rounding on every
    layout of X and of the output, the same bits on all of them; the blocks' columns the same bits as the padded
    kernel's (one chain of fused multiply-adds per element either way), the tail's the same bits as the
    dot-product kernel's on those columns alone (its blocks); and one or two workers over many pieces, with the
    output's tiles grouped or not, the same bits."""
    Rm = _tail_split(R, dtype.itemsize)
    assert 0 < Rm < R
    monkeypatch.setattr(sg, "outer_tail_style", lambda R, itemsize: True)
    bits, Ut, X = _layout_bits(rng, 25, 203, R, dtype)
    assert len(bits) == 1
    got = np.frombuffer(next(iter(bits)), dtype).reshape(R, 25)
    monkeypatch.setattr(sg, "outer_tail_style", lambda R, itemsize: False)
    padded = np.empty((R, 25), dtype)
    sg.ttm_outer(X, Ut, padded)
    assert got[:Rm].tobytes() == padded[:Rm].tobytes()
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: False)  # (the dot-product kernel)
    dots = np.empty((R - Rm, 25), dtype)
    sg.ttm_outer(X, np.ascontiguousarray(Ut[Rm:]), dots)
    assert got[Rm:].tobytes() == dots.tobytes()
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: True)
    monkeypatch.setattr(sg, "outer_tail_style", lambda R, itemsize: True)
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # (many pieces, taken by any worker)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 250_000)
    X = rng.standard_normal((1001, 157)).astype(dtype)
    Ut = rng.standard_normal((R, 157)).astype(dtype)
    ref = np.empty((R, 1001), dtype)
    sg.ttm_outer(X, Ut, ref)
    _check(X, np.ascontiguousarray(Ut.T), 1, ref.T)
    for workers, grp in ((1, 32), (2, 32), (2, 3), (3, 1)):
        monkeypatch.setattr(sg, "_OUTER_COPY_TILES", grp)
        for out in (np.full((R, 1001), np.nan, dtype), np.full((1001, R), np.nan, dtype).T):
            sg.ttm_outer(X, Ut, out, ExecutionPolicy(workers))
            assert np.ascontiguousarray(out).tobytes() == ref.tobytes(), (workers, grp)


def test_outer_tail_rule():
    """The tail is taken where vectors are wide, for at most a quarter of a vector (float32 1-4 columns, float64
    1-2) beside ``OUTER_TAIL_MIN_RANK`` columns in whole vectors (float32 16, float64 24); nowhere on 256-bit
    vectors."""
    got = {it: [R for R in range(1, 80) if sg.outer_tail_style(R, it)] for it in (4, 8)}
    if not sg.wide_vectors():
        assert got == {4: [], 8: []}
        return
    assert got[4] == [17, 18, 19, 20, 33, 34, 35, 36, 49, 50, 51, 52, 65, 66, 67, 68]
    assert got[8] == [25, 26, 33, 34, 41, 42, 49, 50, 57, 58, 65, 66, 73, 74]


def test_outer_tail_through_a_kept_plan_takes_each_calls_matrix(forced, dtype, rng, monkeypatch):
    """A plan's launch with the tail on packs each call's matrix into the blocks' columns and the tail's rows:
    a second matrix through the kept launch gives the bits of a fresh ``ttm_outer`` on it (never the first
    call's columns), einsum's sums to rounding, the matrices unmodified."""
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_gemm_style", lambda R, itemsize: True)
    monkeypatch.setattr(sg, "outer_tail_style", lambda R, itemsize: True)
    monkeypatch.setattr(sg, "planned_beyond_max_rank", lambda *a, **k: True)
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 250_000)
    if _handoff._handoff() is None:
        pytest.skip("no GEMM helpers on this platform (the launch needs them)")
    X = rng.standard_normal((30, 37, 157)).astype(dtype)
    U1, U2 = (rng.standard_normal((157, 50)).astype(dtype) for _ in range(2))
    keep = U1.copy(), U2.copy()
    plan = plan_contraction("abc,cz->abz", X, U1, policy=ExecutionPolicy(2))
    assert plan.compiled is CompiledKernel.TTM_OUTER, plan.explain()
    first = contract("abc,cz->abz", X, U1, plan=plan)
    (launch,) = plan._bound.launch.values()
    assert isinstance(launch, sg._Launch) and launch.name == "outer_gemm"
    second = contract("abc,cz->abz", X, U2, plan=plan)
    assert len(plan._bound.launch) == 1 and next(iter(plan._bound.launch.values())) is launch
    for U, got in ((U1, first), (U2, second)):
        _check(X, U, 2, got)
        want = np.empty((30 * 37, 50), dtype)
        sg.ttm_outer(X.reshape(-1, 157), np.ascontiguousarray(U.T), want.T, ExecutionPolicy(2))
        assert np.ascontiguousarray(got).tobytes() == want.tobytes()
    assert np.array_equal(U1, keep[0]) and np.array_equal(U2, keep[1])


@pytest.mark.parametrize("R", [28, 32, 50, 64])
def test_outer_strips_of_four_where_vectors_are_wide(R, dtype, all_blocks, gemm_style, monkeypatch, rng):
    """Where vectors are wide ``ttm_outer``'s strips are four vectors each (two 512-bit vectors, twelve rows),
    then two for the rest; never eight (their block spilled its accumulators inside the kernel). Each strip
    starts where the one before ends, and the kernel gives einsum's sums to rounding for both output layouts
    on two workers, the same bits on one."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    monkeypatch.setattr(sg, "_outer_rb", lambda: 12)
    for nvec, widths in {14: [4, 4, 4, 2], 16: [4, 4, 4, 4], 8: [4, 4], 6: [4, 2], 4: [4], 2: [2]}.items():
        strips = sg._outer_strips(nvec, 4)
        assert strips[:, 1].tolist() == widths
        assert strips[:, 0].tolist() == [4 * sum(widths[:k]) for k in range(len(widths))]
    X = rng.standard_normal((203, 157)).astype(dtype)
    Ut = rng.standard_normal((R, 157)).astype(dtype)
    bits = set()
    for workers in (1, 2):
        for out in (np.full((R, 203), np.nan, dtype), np.full((203, R), np.nan, dtype).T):
            sg.ttm_outer(X, Ut, out, ExecutionPolicy(workers))
            _check(X, np.ascontiguousarray(Ut.T), 1, out.T)
            bits.add(np.ascontiguousarray(out).tobytes())
    assert len(bits) == 1


def test_outer_gemm_kernel_read_only_and_memory_mapped(gemm_style, dtype, rng, tmp_path):
    X = rng.standard_normal((37, 41)).astype(dtype)
    Ut = rng.standard_normal((24, 41)).astype(dtype)
    np.save(tmp_path / "x.npy", X)
    ro = X.copy()
    ro.setflags(write=False)
    want = np.empty((24, 37), dtype)
    sg.ttm_outer(X, Ut, want)
    for Y in (ro, np.load(tmp_path / "x.npy", mmap_mode="r")):
        got = np.empty_like(want)
        sg.ttm_outer(Y, Ut, got, ExecutionPolicy(2))
        assert got.tobytes() == want.tobytes()


# --- the transposed-tile unit-stride kernel (lanes over rows of X, each step's block transposed in registers) --


@pytest.fixture
def tr_style(monkeypatch):
    """:func:`ttm_outer` sent to its transposed-tile kernel at the ranks it has, whatever this CPU's vectors (the
    rule picks it where they are wide; on narrower ones LLVM splits its 512-bit vectors, the same bits)."""
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: sg.TR_MIN_RANK <= R <= (
        sg.TR_MAX_RANK_F64 if itemsize == 8 else sg.TR_MAX_RANK))
    monkeypatch.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)


def _register_blocked(monkeypatch, X2, Ut, make):
    """``ttm_outer`` on the register-blocked kernel into a fresh output from ``make``."""
    with monkeypatch.context() as m:
        m.setattr(sg, "outer_tr_style", lambda R, itemsize: False)
        m.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
        m.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
        m.setattr(sg, "outer_gemm_style", lambda R, itemsize: True)
        Y = make()
        sg.ttm_outer(X2, Ut, Y)
    return Y


@pytest.mark.parametrize("R", range(3, 21))
def test_outer_tr_kernel_gives_the_register_blocked_bits(R, dtype, tr_style, monkeypatch, rng):
    """Every rank of the transposed tile (float32 to 15, float64 to 20), every layout of X and of the output, sums
    over i with no columns left past whole steps and with 1 to 15 left (masked), a last tile of fewer rows:
    against einsum, and the bits of the register-blocked kernel (each output the chain of fused multiply-adds in
    i from zero)."""
    assert (sg.TR_MIN_RANK, sg.TR_MAX_RANK, sg.TR_MAX_RANK_F64) == (3, 15, 20)
    if R > sg.TR_MAX_RANK and np.dtype(dtype).itemsize == 4:
        pytest.skip("float32 takes the transposed tile up to rank 15")
    for A, I in ((1, 1), (7, 13), (17, 16), (25, 203), (33, 48), (9, 31)):  # noqa: E741
        U = rng.standard_normal((I, R)).astype(dtype)
        Ut = np.ascontiguousarray(U.T)
        xs, outs = _outer_layouts(rng, A, I, R, dtype)
        for X2, make in itertools.product(xs.values(), outs.values()):
            Y2 = make()
            sg.ttm_outer(X2, Ut, Y2)
            _check(np.ascontiguousarray(X2), U, 1, Y2.T)
            want = _register_blocked(monkeypatch, X2, Ut, make)
            assert np.ascontiguousarray(Y2).tobytes() == np.ascontiguousarray(want).tobytes(), (A, I)


@pytest.mark.parametrize("R", [3, 8, 10, 15, 20])
def test_outer_tr_kernel_writes_whole_tiles_into_the_output_and_nothing_else(R, dtype, tr_style, monkeypatch, rng):
    """Whole tiles' sums go straight from the registers into an output whose rows (one vector store a sum) or
    columns (the sums transposed, a masked store a row of X) are unit-strided; the last, partial tile through
    the scratch. Outputs as views inside NaN-filled buffers: every element of the view the register-blocked
    kernel's bits (einsum's to rounding), every element around it still NaN."""
    if R > sg.TR_MAX_RANK and np.dtype(dtype).itemsize == 4:
        pytest.skip("float32 takes the transposed tile up to rank 15")
    L = 64 // np.dtype(dtype).itemsize
    A, I = 3 * L + 5, 37  # noqa: E741
    X2 = rng.standard_normal((A, I)).astype(dtype)
    U = rng.standard_normal((I, R)).astype(dtype)
    Ut = np.ascontiguousarray(U.T)
    bufs = {"rows": np.full((R + 2, A + 3), np.nan, dtype), "cols": np.full((A + 2, R + 3), np.nan, dtype),
            "cols apart": np.full((A, 2 * R + 1), np.nan, dtype)}
    views = {"rows": lambda b: b[1:R + 1, 2:A + 2], "cols": lambda b: b[1:A + 1, 1:R + 1].T,
             "cols apart": lambda b: b[:, R:2 * R].T}
    for name, buf in bufs.items():
        Y2 = views[name](buf)
        sg.ttm_outer(X2, Ut, Y2)
        _check(X2, U, 1, Y2.T)
        want = _register_blocked(monkeypatch, X2, Ut, lambda: np.empty((R, A), dtype))
        assert np.ascontiguousarray(Y2).tobytes() == want.tobytes(), name
        outside = np.ones(buf.shape, bool)
        views[name](outside)[...] = False
        assert np.isnan(buf[outside]).all(), name


def test_outer_tr_kernel_beyond_float32_ranks_gives_nan_in_every_layout(monkeypatch, rng):
    """A float32 transposed tile beyond ``TR_MAX_RANK`` (never planned: compiled as NaN sums only) fills every
    output element with NaN, whole tiles stored directly or not, in both layouts: nothing left unwritten."""
    monkeypatch.setattr(sg, "outer_tr_style", lambda R, itemsize: True)
    monkeypatch.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: False)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    X2 = rng.standard_normal((37, 20)).astype(np.float32)
    Ut = rng.standard_normal((sg.TR_MAX_RANK + 1, 20)).astype(np.float32)
    for Y2 in (np.zeros((Ut.shape[0], 37), np.float32), np.zeros((37, Ut.shape[0]), np.float32).T):
        sg.ttm_outer(X2, Ut, Y2)
        assert np.isnan(Y2).all()


def test_outer_tr_kernel_reads_nothing_past_a_row(dtype, tr_style, monkeypatch, rng):
    """The columns past a row's whole steps are loaded masked: NaN right after each row (rows apart in a wider
    array) reaches no output."""
    for I in (13, 16, 37):  # noqa: E741
        big = np.full((41, I + 3), np.nan, dtype)
        big[:, :I] = rng.standard_normal((41, I))
        X2 = big[:, :I]
        Ut = rng.standard_normal((10, I)).astype(dtype)
        Y = np.empty((10, 41), dtype)
        sg.ttm_outer(X2, Ut, Y, ExecutionPolicy(2))
        assert np.isfinite(Y).all()
        assert Y.tobytes() == _register_blocked(monkeypatch, X2, Ut, lambda: np.empty((10, 41), dtype)).tobytes()


def test_outer_tr_kernel_bits_do_not_depend_on_workers_pieces_or_prefetch(tr_style, dtype, monkeypatch, rng):
    """Several pieces of tiles (any worker takes any), the prefetch of the tile one, two or three ahead or none
    (a hint), both output layouts: the same bits for all of them."""
    X = rng.standard_normal((1001, 157)).astype(dtype)
    Ut = rng.standard_normal((10, 157)).astype(dtype)
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # (pieces cut finer than by default: several of them)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 250_000)
    ref = np.empty((10, 1001), dtype)
    sg.ttm_outer(X, Ut, ref)
    _check(X, np.ascontiguousarray(Ut.T), 1, ref.T)
    for workers, ahead in ((2, 2), (1, 0), (2, 1), (3, 3), (2, 0)):
        monkeypatch.setattr(sg, "_OUTER_PREFETCH", ahead)
        for out in (np.empty((10, 1001), dtype), np.empty((1001, 10), dtype).T):
            sg.ttm_outer(X, Ut, out, ExecutionPolicy(workers))
            assert np.ascontiguousarray(out).tobytes() == ref.tobytes(), (workers, ahead)


def test_outer_tr_style_rule(monkeypatch):
    """The transposed tile takes R of 3 to 15 (float64 to 20) where vectors are wide, none elsewhere."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    assert [R for R in range(1, 40) if sg.outer_tr_style(R, 4)] == list(range(3, 16))
    assert [R for R in range(1, 40) if sg.outer_tr_style(R, 8)] == list(range(3, 21))
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert not any(sg.outer_tr_style(R, it) for R in range(1, 40) for it in (4, 8))


# --- the row-dot unit-stride kernel (a few rows of X against every row of U^T, sums by one shuffle network) ---


@pytest.fixture
def vdot_style(monkeypatch):
    """:func:`ttm_outer` sent to its row-dot kernel at the ranks it has, whatever this CPU's vectors and the size
    of U (the rule picks it where vectors are wide; on narrower ones LLVM splits the 512-bit vectors, the same
    bits)."""
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: sg.VDOT_MIN_RANK <= R <= sg.VDOT_MAX_RANK)


@pytest.mark.parametrize("R", range(1, 13))
def test_outer_vdot_kernel_every_rank_layout_and_tail(R, dtype, vdot_style, rng):
    """Every rank of the row-dot kernel (1 to 12: tiles of 8 down to 2 rows), sums over i of whole vectors only,
    of a masked rest only and of both, a last tile of fewer rows, X C-ordered and sliced, every output layout
    (C-ordered rows stored a vector at a time, the others one sum each): einsum's sums to rounding, the same
    bits in every layout, and each output a function of its own row alone (the rows of X permuted: the outputs
    permuted, bit for bit, whichever place in a tile or in the shuffle network a row's sums took)."""
    assert (sg.VDOT_MIN_RANK, sg.VDOT_MAX_RANK) == (1, 12)
    for A, I in ((1, 1), (7, 13), (17, 16), (25, 203), (33, 48), (9, 31), (50, 64)):  # noqa: E741
        bits, Ut, Xc = _layout_bits(rng, A, I, R, dtype)
        assert len(bits) == 1, (A, I)
        perm = rng.permutation(A)
        Yp = np.empty((R, A), dtype)
        sg.ttm_outer(np.ascontiguousarray(Xc[perm]), Ut, Yp)
        Y = np.empty((R, A), dtype)
        sg.ttm_outer(Xc, Ut, Y)
        assert Yp.tobytes() == np.ascontiguousarray(Y[:, perm]).tobytes(), (A, I)


@pytest.mark.parametrize("R", [1, 2, 3, 5, 10, 12])
def test_outer_vdot_kernel_writes_its_view_and_reads_its_rows_only(R, dtype, vdot_style, rng):
    """Outputs as views inside NaN-filled buffers (C-ordered rows: masked vector stores; the others one store a
    sum): every element of the view einsum's to rounding and the C-ordered output's bits, every element around
    it still NaN. X's rows apart in a wider array with NaN after each row: no NaN reaches an output (the rest
    of a row past whole vectors is loaded masked)."""
    A, I = 3 * sg.vdot_rows(R) + 1, 37  # noqa: E741
    big = np.full((A, I + 3), np.nan, dtype)
    big[:, :I] = rng.standard_normal((A, I))
    U = rng.standard_normal((I, R)).astype(dtype)
    Ut = np.ascontiguousarray(U.T)
    want = np.empty((A, R), dtype)
    sg.ttm_outer(np.ascontiguousarray(big[:, :I]), Ut, want.T)
    bufs = {"cols": np.full((A + 2, R + 3), np.nan, dtype), "rows": np.full((R + 2, A + 3), np.nan, dtype),
            "cols apart": np.full((A, 2 * R + 1), np.nan, dtype)}
    views = {"cols": lambda b: b[1:A + 1, 1:R + 1].T, "rows": lambda b: b[1:R + 1, 2:A + 2],
             "cols apart": lambda b: b[:, R:2 * R].T}
    for name, buf in bufs.items():
        Y2 = views[name](buf)
        sg.ttm_outer(big[:, :I], Ut, Y2, ExecutionPolicy(2))
        assert np.isfinite(Y2).all(), name
        _check(np.ascontiguousarray(big[:, :I]), U, 1, Y2.T)
        assert np.ascontiguousarray(Y2.T).tobytes() == want.tobytes(), name
        outside = np.ones(buf.shape, bool)
        views[name](outside)[...] = False
        assert np.isnan(buf[outside]).all(), name


def test_outer_vdot_kernel_bits_do_not_depend_on_workers_pieces_or_prefetch(vdot_style, dtype, monkeypatch, rng):
    """Several pieces of tiles (any worker takes any), the prefetch of rows 2 to 64 ahead, both output layouts:
    the same bits for all of them; NaN and infinities in X reach exactly the outputs of their rows."""
    X = rng.standard_normal((1001, 157)).astype(dtype)
    X[5, 3], X[600, 156], X[1000, 0] = np.nan, np.inf, -np.inf
    Ut = rng.standard_normal((10, 157)).astype(dtype)
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # (pieces cut finer than by default: several of them)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 250_000)
    ref = np.empty((10, 1001), dtype)
    sg.ttm_outer(X, Ut, ref)
    bad = np.zeros(1001, bool)
    bad[[5, 600, 1000]] = True
    assert not np.isfinite(ref[:, bad]).any() and np.isfinite(ref[:, ~bad]).all()
    Xf = X[~bad]
    _check(Xf, np.ascontiguousarray(Ut.T), 1, np.ascontiguousarray(ref[:, ~bad].T))
    for workers, ahead in ((2, 32), (1, 0), (2, 2), (3, 64), (2, 7)):
        monkeypatch.setattr(sg, "VDOT_AHEAD_ROWS", ahead)
        for out in (np.empty((10, 1001), dtype), np.empty((1001, 10), dtype).T):
            sg.ttm_outer(X, Ut, out, ExecutionPolicy(workers))
            assert np.ascontiguousarray(out).tobytes() == ref.tobytes(), (workers, ahead)


def test_outer_vdot_style_rule(monkeypatch):
    """The row-dot kernel takes R of 1 to 12 where vectors are wide, on rows of X of at least four 512-bit
    vectors, and U^T's rows, padded to whole vectors, fit in ``VDOT_U_MAX_BYTES`` = 13 KiB; none elsewhere; its
    tiles' rows keep the accumulators within 24 registers."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    assert sg.VDOT_U_MAX_BYTES == 13 << 10
    for itemsize in (4, 8):
        assert [R for R in range(1, 40) if sg.outer_vdot_style(R, itemsize, 64)] == list(range(1, 13))
    # rows of at least 256 bytes (four vectors): float32 64 elements, float64 32
    assert sg.VDOT_MIN_ROW_BYTES == 256
    assert sg.outer_vdot_style(10, 4, 64) and not sg.outer_vdot_style(10, 4, 63)
    assert sg.outer_vdot_style(10, 8, 32) and not sg.outer_vdot_style(10, 8, 31)
    # float32 R = 10: 320 elements a row (12800 bytes) in, 321 (padded to 336: 13440) out; float64 160 / 161
    assert sg.outer_vdot_style(10, 4, 320) and not sg.outer_vdot_style(10, 4, 321)
    assert sg.outer_vdot_style(10, 8, 160) and not sg.outer_vdot_style(10, 8, 161)
    assert sg.outer_vdot_style(3, 8, 552) and not sg.outer_vdot_style(3, 8, 553)
    assert sg.outer_vdot_style(1, 4, 3328) and not sg.outer_vdot_style(1, 4, 3329)
    assert [sg.vdot_rows(R) for R in range(1, 13)] == [8, 8, 8, 6, 4, 4, 3, 3, 2, 2, 2, 2]
    assert all(sg.vdot_rows(R) * R <= 24 for R in range(1, 13))
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert not any(sg.outer_vdot_style(R, it, 64) for R in range(1, 40) for it in (4, 8))


def test_outer_gemm_style_rule_and_planner(forced, rng, monkeypatch):
    """The rule: with 256-bit vectors R of 16 or more in at most four vectors, little padding (float32 16-32,
    float64 16); with 512-bit vectors R of 16 to ``WIDE_OUTER_F64_MAX_RANK`` = ``WIDE_OUTER_F32_MAX_RANK`` = 64,
    and below 16 float64 R padded by at most a quarter of its columns (6-8, 12-15) and float32 R of 13-15;
    the planner's last-mode plans run it (float32 R = 32 and, with 512-bit vectors, float64 R = 8 through
    ``ttm``: the bits of the direct call)."""
    wide = sg.wide_vectors()
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    assert [sg.outer_gemm_style(R, 4) for R in (10, 15, 16, 22, 24, 32, 33)] == [False, False, True, True, True,
                                                                                   True, False]
    assert [sg.outer_gemm_style(R, 8) for R in (10, 15, 16, 24, 32)] == [False, False, True, False, False]
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    for itemsize in (4, 8):
        assert [sg.outer_gemm_style(R, itemsize) for R in (10, 12, 15, 16, 20, 32, 33, 64, 65)] == [
            False, itemsize == 8, True, True, True, True, True, True, False]
    assert [R for R in range(1, 16) if sg.outer_gemm_style(R, 8)] == [6, 7, 8, 12, 13, 14, 15]
    assert [R for R in range(1, 16) if sg.outer_gemm_style(R, 4)] == [13, 14, 15]
    monkeypatch.setattr(sg, "wide_vectors", lambda: wide)
    for dtype, R in ((np.float32, 32), (np.float64, 8)):
        X = rng.standard_normal((30, 20, 50)).astype(dtype)
        U = rng.standard_normal((50, R)).astype(dtype)
        plan = ttm_plan(X, U, 2, transpose=True)
        assert plan.compiled is CompiledKernel.TTM_OUTER
        Y = ttm(X, U, 2, transpose=True, plan=plan)
        _check(X, U, 2, Y)
        direct = np.empty((600, R), dtype)
        sg.ttm_outer(X.reshape(600, 50), np.ascontiguousarray(U.T), direct.T)
        assert Y.reshape(600, R).tobytes() == direct.tobytes()
        if R == 8 and _handoff._handoff() is not None:  # the rule's kernel on this CPU (a launch needs the
            # helpers): where vectors are wide the row-dot kernel (outer_vdot_style) ahead of the transposed tile
            (launch,) = plan._bound.launch.values()
            assert launch.name == ("outer_vdot" if wide else "outer_dot")


def test_rank_outermost_reads_the_output_layout():
    """``_rank_outermost``: a given output whose rank mode (the matrix's free letter) has the largest stride of
    its modes of more than one element; a fresh output, a rank of one and a rank mode inside are not."""
    spec = plan_mod.Spec("abc", "cz", "abz")
    assert plan_mod._rank_outermost(spec, False, (20, 30, 5), (30, 1, 600))
    assert not plan_mod._rank_outermost(spec, False, (20, 30, 5), (150, 5, 1))
    assert not plan_mod._rank_outermost(spec, False, (20, 30, 5), None)
    assert not plan_mod._rank_outermost(spec, False, (20, 30, 1), (30, 1, 600))
    assert plan_mod._rank_outermost(spec, False, (1, 30, 5), (999999, 1, 30))  # (an extent of one: any stride)
    swapped = plan_mod.Spec("zc", "abc", "abz")  # (the matrix first)
    assert plan_mod._rank_outermost(swapped, True, (20, 30, 5), (30, 1, 600))


@pytest.mark.parametrize("layout", ["rank_outer", "rank_inner", "fresh"])
def test_float32_rank_outer_products_beyond_32_take_the_register_blocked_kernel(layout, rng):
    """float32 last-mode products at R = 33-64 into an output with R outermost (CP-ALS's partials) run the
    register-blocked unit-stride kernel where vectors are wide (measured 0.53-0.89x BLAS's time on large X):
    planned only for such an output, a U of at most ``WIDE_OUTER_U_BYTES`` and rows of X not a multiple of 4 KiB
    apart; einsum's values, the bits of the direct call, and the same bits for one and two workers."""
    assert sg.WIDE_OUTER_F32_MAX_RANK == 64
    X = rng.standard_normal((160, 160, 160)).astype(np.float32)  # 16 MB: from BEYOND_MIN_BYTES
    want = sg.simd_supported() and sg.wide_vectors() and layout == "rank_outer"
    for R in (33, 50, 64, 65):
        U = rng.standard_normal((160, R)).astype(np.float32)
        out = {"rank_outer": np.moveaxis(np.empty((R, 160, 160), np.float32), 0, -1),
               "rank_inner": np.empty((160, 160, R), np.float32), "fresh": None}[layout]
        plan = plan_contraction("abc,cz->abz", X, U, out=out)
        assert (plan.compiled is CompiledKernel.TTM_OUTER) == (want and R <= 64), (R, plan.explain())
        Y = contract("abc,cz->abz", X, U, out=out, plan=plan)
        _check(X, U, 2, Y)
        if plan.compiled is CompiledKernel.TTM_OUTER:
            direct = np.empty((R, 160 * 160), np.float32)
            sg.ttm_outer(X.reshape(-1, 160), np.ascontiguousarray(U.T), direct)
            assert np.moveaxis(Y, -1, 0).reshape(R, -1).tobytes() == direct.tobytes()
            serial = np.empty_like(direct)
            sg.ttm_outer(X.reshape(-1, 160), np.ascontiguousarray(U.T), serial, ExecutionPolicy(workers=1))
            assert serial.tobytes() == direct.tobytes()
    if layout != "rank_outer":
        return
    # rows 16 KiB apart (4096 float32) and a U beyond WIDE_OUTER_U_BYTES keep BLAS; on Zen 5 a U of up to 4 MiB
    # takes the kernel (WIDE_OUTER_U_BYTES_BY_CPU)
    for cpu in ("znver4", "znver5"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sg, "cpu_name", lambda cpu=cpu: cpu)
            for shape, R, zen5 in (((1024, 4096), 50, False), ((400, 8000), 40, True), ((400, 30000), 40, False)):
                contract_mod._cached_plan.cache_clear()
                Xw = np.empty(shape, np.float32)
                out = np.empty((R, shape[0]), np.float32).T
                plan = plan_contraction("ac,cz->az", Xw, np.ones((shape[1], R), np.float32), out=out)
                kernel = want and zen5 and cpu == "znver5"
                assert (plan.compiled is CompiledKernel.TTM_OUTER) is kernel, (cpu, shape, plan.explain())
    contract_mod._cached_plan.cache_clear()


def test_planner_keeps_ranks_above_32_on_blas(rng):
    """Above ``MAX_RANK`` = 32 the planner runs BLAS, whatever the vectors and the layout, on tensors below
    ``BEYOND_MIN_BYTES`` (the register-blocked unit-stride kernel won on large X at R = 50 and 64, but lost
    on the seed's n = 64 cases); the result is einsum's to rounding."""
    contract_mod._cached_plan.cache_clear()
    X = rng.standard_normal((40, 50, 120))
    for R in (33, 50, 64):
        for mode in (0, 1, 2):
            U = rng.standard_normal((X.shape[mode], R))
            plan = ttm_plan(X, U, mode, transpose=True)
            assert plan.compiled is CompiledKernel.NONE, plan.explain()
            _check(X, U, mode, plan(X, U))
    A, B = rng.standard_normal((64, 64)), rng.standard_normal((64, 64, 64))
    for spec in ("pk,mnk->mnp", "nk,mkp->mnp"):
        assert plan_contraction(spec, A, B).compiled is CompiledKernel.NONE


def test_large_tensors_take_the_kernels_beyond_rank_32(monkeypatch, dtype, rng):
    """Above ``MAX_RANK``, on a tensor of at least ``BEYOND_MIN_BYTES`` (measured 0.76-0.99x BLAS's time with
    256-bit vectors, 0.56-0.93x with 512-bit ones): the middle mode runs the inner kernel up to
    ``SHORT_ROWS_MAX_RANK`` = 64, the last mode the outer kernel in float64 only, up to ``OUTER_F64_MAX_RANK``
    = 56 with 256-bit vectors and ``WIDE_OUTER_F64_MAX_RANK`` = 64 with 512-bit ones (there U of at most
    ``WIDE_OUTER_U_BYTES``); the first mode (long rows) with 512-bit vectors the inner kernel on packed chunks
    (:func:`sg._packed_beyond`) up to 64 in both dtypes, with 256-bit ones BLAS; larger R and a smaller tensor
    keep BLAS. The compiled results are einsum's to rounding (the size and flop limits lowered to run them on a
    small tensor)."""
    assert (sg.SHORT_ROWS_MAX_RANK, sg.OUTER_F64_MAX_RANK, sg.WIDE_OUTER_F64_MAX_RANK, sg.WIDE_OUTER_U_BYTES,
            sg.BEYOND_MIN_BYTES, sg.BEYOND_LONG_F32_MIN_BYTES, sg.MAX_RANK) == (64, 56, 64, 1 << 20, 12 << 20,
                                                                                24 << 20, 32)
    f64 = dtype == np.float64
    inner, outer, none = CompiledKernel.TTM_INNER, CompiledKernel.TTM_OUTER, CompiledKernel.NONE
    big = np.empty((200, 200, 200), dtype)  # 32 or 64 MB (np.empty: planning touches no page)
    n = math.ceil((sg.BEYOND_MIN_BYTES / np.dtype(dtype).itemsize) ** (1 / 3))
    below = np.empty((n - 2, n - 2, n - 2), dtype)
    for wide in (False, True):
        monkeypatch.setattr(sg, "wide_vectors", lambda wide=wide: wide)
        contract_mod._cached_plan.cache_clear()
        on = sg.simd_supported()
        top = 64 if wide else 56
        # (the first mode's long rows: packed chunks where vectors are wide)
        long_rows = inner if wide else none
        cases = [(33, 1, inner), (50, 1, inner), (64, 1, inner), (65, 1, none), (33, 0, long_rows),
                 (50, 0, long_rows), (64, 0, long_rows), (65, 0, none),
                 (33, 2, outer if f64 else none), (top, 2, outer if f64 else none), (top + 1, 2, none)]
        for R, mode, want in cases:
            plan = ttm_plan(big, np.ones((200, R), dtype), mode, transpose=True)
            assert plan.compiled is (want if on else none), (wide, R, mode, plan.explain())
        for mode in (0, 1, 2):
            assert ttm_plan(below, np.ones((n - 2, 50), dtype), mode, transpose=True).compiled is none
        # a long contracted last mode: U of 3600 x 50 (1.4 MB in float64) beyond WIDE_OUTER_U_BYTES, within Zen 5's
        # bound (WIDE_OUTER_U_BYTES_BY_CPU); U of 12000 x 50 (4.6 MiB) beyond both
        for cpu in ("znver4", "znver5"):
            monkeypatch.setattr(sg, "cpu_name", lambda cpu=cpu: cpu)
            contract_mod._cached_plan.cache_clear()
            long_last = ttm_plan(np.empty((60, 60, 3600), dtype), np.ones((3600, 50), dtype), 2, transpose=True)
            fits = not wide or cpu == "znver5"
            assert long_last.compiled is (outer if on and f64 and fits else none), (cpu, long_last.explain())
            longer = ttm_plan(np.empty((10, 60, 12000), dtype), np.ones((12000, 50), dtype), 2, transpose=True)
            if wide:  # (with 256-bit vectors the re-reads of U in the cost model decide)
                assert longer.compiled is none, (cpu, longer.explain())
        assert sg.WIDE_OUTER_U_BYTES_BY_CPU == {"znver5": 4 << 20}
        # a first mode's rows of VERY_LONG_ROW_BYTES and more (64^4: 1 MiB in float32): packed chunks up to 64 where
        # vectors are wide (the direct reads' cap, VERY_LONG_F32_MAX_RANK, only where the packing is off)
        very = np.empty((64, 64, 64, 64), dtype)
        assert (sg.VERY_LONG_F32_MAX_RANK, sg.VERY_LONG_ROW_BYTES) == (48, 512 << 10)
        for R, want in ((48, long_rows), (49, long_rows), (64, long_rows), (65, none)):
            plan = ttm_plan(very, np.ones((64, R), dtype), 0, transpose=True)
            assert plan.compiled is (want if on else none), (wide, R, plan.explain())
    monkeypatch.undo()
    if not sg.simd_supported():
        return
    monkeypatch.setattr(sg, "BEYOND_MIN_BYTES", 1)
    monkeypatch.setattr(plan_mod, "SMALL_RANK_MIN_FLOPS", 0)
    contract_mod._cached_plan.cache_clear()
    top = 64 if sg.wide_vectors() else 56
    for order in ("C", "F"):
        X = np.asarray(rng.standard_normal((32, 41, 48)).astype(dtype), order=order)
        last = 2 if order == "C" else 0  # the unit-stride mode
        for R, mode, want in ((40, 1, inner), (64, 1, inner), (41, last, outer if f64 else none),
                              (50, last, outer if f64 else none), (top, last, outer if f64 else none)):
            U = rng.standard_normal((X.shape[mode], R)).astype(dtype)
            plan = ttm_plan(X, U, mode, transpose=True)
            assert plan.compiled is want, plan.explain()
            _check(X, U, mode, plan(X, U))
    # a first mode's long rows (33600 bytes in float32) beyond MAX_RANK: packed chunks where vectors are wide; with
    # the packing off, float32 only (from BEYOND_LONG_F32_MIN_BYTES)
    monkeypatch.setattr(sg, "BEYOND_LONG_F32_MIN_BYTES", 1)
    X = rng.standard_normal((24, 20, 420)).astype(dtype)
    for packed in (True, False):
        monkeypatch.setattr(sg, "PACKED_BEYOND", packed)
        contract_mod._cached_plan.cache_clear()
        for R in (40, 64):
            U = rng.standard_normal((24, R)).astype(dtype)
            plan = ttm_plan(X, U, 0, transpose=True)
            assert plan.compiled is (inner if sg.wide_vectors() and (packed or not f64) else none), plan.explain()
            _check(X, U, 0, plan(X, U))
    contract_mod._cached_plan.cache_clear()


@pytest.mark.parametrize("R", [33, 50, 64])
def test_long_rows_above_rank_32_run_packed_chunks_with_the_direct_reads_bits(R, dtype, all_blocks, monkeypatch,
                                                                             rng):
    """Long rows above ``MAX_RANK`` where vectors are wide (:func:`sg._packed_beyond`): ``ttm_inner`` packs chunks of
    at most ``_PACKED_KC`` rows of ``_PACKED_TILE_BYTES`` tiles (:func:`sg._tiling`) before its row blocks; the
    same bits as the direct reads (the packing off), einsum's to rounding, on a first mode (rows a multiple of 4
    KiB apart and not), a long middle mode and a sliced view, over many pieces on one and two workers."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 500_000)
    it = np.dtype(dtype).itemsize
    assert (sg._PACKED_KC, sg._PACKED_TILE_BYTES, sg.LONG_ROW_BYTES) == (64, 2048, 8192)
    assert sg._packed_beyond(R, sg.LONG_ROW_BYTES) and not sg._packed_beyond(R, sg.LONG_ROW_BYTES - it)
    assert not sg._packed_beyond(sg.MAX_RANK, 1 << 20)
    # from rank 17 up to MAX_RANK: over at most PACKED_MAX_I rows of a tensor of BEYOND_MIN_BYTES or more
    big_n = sg.BEYOND_MIN_BYTES
    assert (sg.PACKED_MAX_I, sg._SHORT_CHUNK_RANK) == (128, 16)
    assert sg._packed_beyond(17, 1 << 20, 128, big_n) and sg._packed_beyond(32, 1 << 20, 64, big_n)
    assert not sg._packed_beyond(16, 1 << 20, 64, big_n) and not sg._packed_beyond(32, 1 << 20, 129, big_n)
    assert not sg._packed_beyond(32, 1 << 20, 64, big_n - 1) and not sg._packed_beyond(32, 8191, 64, big_n)
    big = rng.standard_normal((3, 70, 2 * 2048 + 5)).astype(dtype)
    views = [rng.standard_normal((1, 131, 4096)).astype(dtype), rng.standard_normal((1, 70, 2050)).astype(dtype),
             rng.standard_normal((3, 40, 2500)).astype(dtype), big[:, 3:67, 2:2 + 2 * 2048]]
    for X3 in views:
        A, I, C = X3.shape  # noqa: E741
        assert C * it >= sg.LONG_ROW_BYTES
        U = rng.standard_normal((I, R)).astype(dtype)
        monkeypatch.setattr(sg, "PACKED_BEYOND", True)
        g = sg._InnerGeometry(A, I, C, R, it, X3.strides[1])
        assert g.packed and g.kc <= sg._PACKED_KC and g.ct * it <= sg._PACKED_TILE_BYTES, (g.kc, g.ct)
        got = set()
        for packed, workers in ((True, 1), (True, 2), (False, 2)):
            monkeypatch.setattr(sg, "PACKED_BEYOND", packed)
            assert sg._InnerGeometry(A, I, C, R, it, X3.strides[1]).packed is packed
            Y = np.full((A, R, C), np.nan, dtype)
            sg.ttm_inner(X3, U, Y, ExecutionPolicy(workers))
            _check(np.ascontiguousarray(X3).reshape(A, I, C), U, 1, Y)
            got.add(Y.tobytes())
        assert len(got) == 1, X3.shape


@pytest.mark.parametrize("R", [17, 20, 32])
def test_long_rows_over_few_rows_run_packed_chunks_from_rank_17(R, dtype, all_blocks, monkeypatch, rng):
    """From rank 17 up to ``MAX_RANK`` where vectors are wide, long rows contracted over at most ``PACKED_MAX_I``
    rows of a tensor of ``BEYOND_MIN_BYTES`` or more (4-way first and second modes) run packed chunks too: the same
    bits as the direct reads, einsum's to rounding; more rows, a smaller tensor or R of 16 keep the direct reads;
    and the planner takes the kernel for 64^4's first mode in float64 at R = 24 and 32, packed or read directly
    (whose rows crowd L1: :func:`sg._wide_crowded`, at the long-row rate)."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 500_000)
    it = np.dtype(dtype).itemsize
    X3 = rng.standard_normal((2, 70, 2 * 4096 // it + 3)).astype(dtype)
    A, I, C = X3.shape  # noqa: E741
    U = rng.standard_normal((I, R)).astype(dtype)
    assert not sg._InnerGeometry(A, I, C, R, it, C * it).packed  # (a small tensor: the direct reads)
    assert not sg._InnerGeometry(A, 129, C, R, it, C * it).packed
    assert not sg._InnerGeometry(A, I, C, 16, it, C * it).packed
    monkeypatch.setattr(sg, "BEYOND_MIN_BYTES", 1)
    assert sg._InnerGeometry(A, I, C, R, it, C * it).packed
    got = set()
    for packed in (True, False):
        monkeypatch.setattr(sg, "PACKED_BEYOND", packed)
        Y = np.full((A, R, C), np.nan, dtype)
        sg.ttm_inner(X3, U, Y, ExecutionPolicy(2))
        _check(X3, U, 1, Y)
        got.add(Y.tobytes())
    assert len(got) == 1
    monkeypatch.undo()
    if not (sg.simd_supported() and sg.wide_vectors()):
        return
    contract_mod._cached_plan.cache_clear()
    very = np.empty((64, 64, 64, 64))  # (np.empty: planning touches no page)
    for R2 in (24, 32):
        assert ttm_plan(very, np.ones((64, R2)), 0, transpose=True).compiled is CompiledKernel.TTM_INNER
        monkeypatch.setattr(sg, "PACKED_BEYOND", False)
        contract_mod._cached_plan.cache_clear()
        assert sg._wide_crowded(64, R2, 8, 64 ** 3, 8 * 64 ** 3)
        assert ttm_plan(very, np.ones((64, R2)), 0, transpose=True).compiled is CompiledKernel.TTM_INNER
        monkeypatch.undo()
        contract_mod._cached_plan.cache_clear()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_long_rows_above_rank_16_go_to_blas_on_256_bit_machines(monkeypatch, dtype):
    """The first mode's long rows (over ``LONG_ROW_MIN_I`` rows or more) at R = 17-32: on a 256-bit machine the
    packed kernel measured 1.07-1.32x BLAS's time on most shapes, so its rate there (``_LONG_HI_256``) sits
    below BLAS's and the planner keeps BLAS; with 512-bit vectors the kernel is planned as before (float64's
    rows here, a multiple of 4 KiB apart, too: ``test_crowded_float64_long_rows_take_the_kernel``); R <= 16
    keeps the kernel on both."""
    contract_mod._cached_plan.cache_clear()
    big = np.empty((320, 240, 160), dtype)
    for wide in (False, True):
        monkeypatch.setattr(sg, "wide_vectors", lambda wide=wide: wide)
        contract_mod._cached_plan.cache_clear()
        assert sg.kernel_efficiency("small_rank_ttm_inner", np.dtype(dtype).name, 32, 38400, 320) == (
            sg._KERNEL_EFF[("small_rank_ttm_inner_long", np.dtype(dtype).name)][1] if wide
            else sg._LONG_HI_256[np.dtype(dtype).name])
        for R in (17, 20, 32):
            want = CompiledKernel.TTM_INNER if (wide and sg.simd_supported()) else CompiledKernel.NONE
            plan = ttm_plan(big, np.ones((320, R), dtype), 0, transpose=True)
            assert plan.compiled is want, (wide, R, plan.explain())
        small_r = ttm_plan(big, np.ones((320, 10), dtype), 0, transpose=True)
        assert small_r.compiled is (CompiledKernel.TTM_INNER if sg.simd_supported() else CompiledKernel.NONE)
    assert sg._LONG_HI_256["float64"] < sg.blas_efficiency("small_rank_ttm_inner", "float64", 32)
    assert sg._LONG_HI_256["float32"] < sg.blas_efficiency("small_rank_ttm_inner", "float32", 32)
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_crowded_float64_long_rows_take_the_kernel(monkeypatch, all_blocks, rng):
    """Where vectors are wide, float64 long rows above R = 16 whose chunks crowd L1 (rows a multiple of 4 KiB
    apart: :func:`sg._wide_crowded`, which keeps their chunks short) take the long-row rate like rows that
    spread over L1's sets: with each row's next strip hinted into L1 the kernel measured 0.48-0.65x BLAS's time
    at R = 24-32 on such first modes, where a rate falling with R had sent them to BLAS. So the planner takes the
    kernel at every R above 16, its compute estimate below BLAS's by the planner's margin, and the product is
    einsum's to rounding."""
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    contract_mod._cached_plan.cache_clear()
    # the rule: 320x240x160's first mode (rows 307200 bytes apart) crowds; 200^3's (320000) does not
    assert sg._wide_crowded(320, 32, 8, 38400, 307200) is True
    assert sg._wide_crowded(200, 32, 8, 40000, 320000) is False
    assert sg._wide_crowded(320, 16, 8, 38400, 307200) is False  # (R <= 16: the short chunks' rule)
    assert sg._wide_crowded(320, 32, 8, 38400, 0) is False  # (stride not known)
    long_rate = sg._KERNEL_EFF[("small_rank_ttm_inner_long", "float64")][1]
    for R in (17, 24, 32):  # (crowded or not: the same rate)
        assert sg.kernel_efficiency("small_rank_ttm_inner", "float64", R, 38400, 320) == long_rate
        assert sg.kernel_efficiency("small_rank_ttm_inner", "float64", R, 40000, 200) == long_rate
    assert long_rate > sg.blas_efficiency("small_rank_ttm_inner", "float64", 32)
    inner = CompiledKernel.TTM_INNER if sg.simd_supported() else CompiledKernel.NONE
    for shape, dtype, R in [((64, 8, 512), np.float64, 20), ((64, 8, 512), np.float64, 24),
                            ((64, 8, 512), np.float64, 32), ((64, 8, 512), np.float32, 32),
                            ((64, 8, 500), np.float64, 32)]:
        X = rng.standard_normal(shape).astype(dtype)
        U = rng.standard_normal((64, R)).astype(dtype)
        plan = ttm_plan(X, U, 0, transpose=True)
        assert plan.compiled is inner, (shape, dtype, R, plan.explain())
        if inner is CompiledKernel.TTM_INNER:
            est = dict(plan.estimates)
            assert est["compiled compute"] < plan_mod._SMALL_RANK_MARGIN * est["blas gemm compute"], plan.explain()
        _check(X, U, 0, plan(X, U))
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_short_dot_rows_go_to_blas(monkeypatch, dtype, rng):
    """ttm_outer's dot products along a contracted unit-stride extent of fewer than SHORT_DOT_BYTES (256-bit
    vectors) or WIDE_SHORT_DOT_BYTES (512-bit) bytes (a short last mode): their sums run in LLVM's scalar
    remainder (measured 1.13-2.84x BLAS's time in float32 at I = 6-24, 1.04-1.50x in float64 at I = 6-12, R >= 5,
    on a 256-bit machine; 1.04-1.72x and 1.06-1.69x at I below 128 bytes on the 512-bit one, and mostly above
    1.0x up to 160 bytes), so BLAS is planned there, also where the register-blocked kernel would take R below
    16; a row of the limit keeps the kernel, as does R = 16's register-blocked kernel. Where vectors are wide the
    transposed tile's ranks (lanes over the rows: not slowed by short rows) keep the kernel too, float64 at every
    row length and float32 on rows of 16 elements or more (BLAS measured 1.10-2.36x its time there), and so do
    R = 2's dot products on rows of SHORT_DOT_R2_BYTES or more, not R = 1's. The BLAS plan's result is
    einsum's. (Against OpenBLAS's Haswell kernels; an AVX-512 core's SGEMM is slower on float32 rows of 9-15:
    test_float32_rows_of_9_to_15_keep_the_transposed_tile_against_avx512_openblas.)"""
    monkeypatch.setattr(sg, "openblas_avx512", lambda: False)
    item = np.dtype(dtype).itemsize
    assert (sg.SHORT_DOT_BYTES, sg.WIDE_SHORT_DOT_BYTES) == (192, 192)
    short, long_ = sg.SHORT_DOT_BYTES // item - 2, sg.SHORT_DOT_BYTES // item
    short_w, long_w = sg.WIDE_SHORT_DOT_BYTES // item - 2, sg.WIDE_SHORT_DOT_BYTES // item
    kernel = CompiledKernel.TTM_OUTER if sg.simd_supported() else CompiledKernel.NONE
    for wide in (False, True):
        monkeypatch.setattr(sg, "wide_vectors", lambda wide=wide: wide)
        limit = sg.WIDE_SHORT_DOT_BYTES if wide else sg.SHORT_DOT_BYTES
        for I, R in ((short, 5), (short, 10), (long_, 5), (short, 16), (short_w, 5), (short_w, 10),  # noqa: E741
                     (long_w, 5), (short_w, 8), (short_w, 14), (long_w, 14)):
            contract_mod._cached_plan.cache_clear()
            X = np.empty((4_000_000 // I, I), dtype)
            plan = plan_contraction("ac,cz->az", X, np.empty((I, R), dtype))
            tr = wide and sg.outer_tr_style(R, item) and (item == 8 or I * item >= 64)
            r2 = wide and R == 2 and I * item >= sg.SHORT_DOT_R2_BYTES
            dot_short = I * item < limit and (R < 16 or not sg.outer_gemm_style(R, item)) and not (tr or r2)
            assert plan.compiled is (CompiledKernel.NONE if dot_short else kernel), (wide, I, R, plan.explain())
            assert (sg.kernel_efficiency("small_rank_ttm_outer", np.dtype(dtype).name, R, 0, I)
                    == sg._KERNEL_EFF[("small_rank_ttm_outer", np.dtype(dtype).name)][R > 16]
                    * (sg.SHORT_DOT_RATE if dot_short else 1.0))
    # the transposed tile's rows, where vectors are wide: float32 from 16 elements, float64 from any
    monkeypatch.setattr(sg, "wide_vectors", lambda: True)
    short_both = 16 if item == 8 else 30  # (128 / 120 bytes)
    for I, R, takes in ((16, 3, True), (short_both, 8, True), (47 if item == 4 else 23, 15, True),  # noqa: E741
                        (12, 8, item == 8), (4, 12, item == 8), (short_both, 2, True), (short_both, 1, False),
                        (short_both, 16 if item == 4 else 21, False)):
        contract_mod._cached_plan.cache_clear()
        plan = plan_contraction("ac,cz->az", np.empty((4_000_000 // I, I), dtype), np.empty((I, R), dtype))
        assert (plan.compiled is kernel) is (takes or kernel is CompiledKernel.NONE or (
            R >= 16 and sg.outer_gemm_style(R, item))), (I, R, plan.explain())
    eff = functools.partial(sg.kernel_efficiency, "small_rank_ttm_outer", np.dtype(dtype).name)
    lo = sg._KERNEL_EFF[("small_rank_ttm_outer", np.dtype(dtype).name)][0]
    r2_rows = sg.SHORT_DOT_R2_BYTES // item
    assert eff(2, 0, r2_rows) == lo and eff(2, 0, r2_rows - 1) == lo * sg.SHORT_DOT_RATE
    assert eff(1, 0, r2_rows) == lo * sg.SHORT_DOT_RATE
    monkeypatch.setattr(sg, "wide_vectors", lambda: False)
    contract_mod._cached_plan.cache_clear()
    X, U = make_tensor(rng, (50_000, short), dtype), make_tensor(rng, (short, 5), dtype)
    plan = plan_contraction("ac,cz->az", X, U)
    assert plan.compiled is CompiledKernel.NONE
    want = np.einsum("ac,cz->az", X.astype(np.float64), U.astype(np.float64))
    np.testing.assert_allclose(contract("ac,cz->az", X, U, plan=plan), want,
                               atol=4 * (short + 2) * np.finfo(dtype).eps * np.abs(want).max())
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_batches_of_tiny_gemms_go_to_the_compiled_kernel(monkeypatch, dtype):
    """A middle mode batched over a long first mode ((100000, 10, 10) at R = 5: 100000 GEMMs of 10 x 10 by 10 x
    5) costs BLAS BATCH_CALL_SECONDS a GEMM beyond its flops (measured 370-700 ns), so the planner takes the
    compiled kernel (float32 0.12-0.48x BLAS's time, where the rates alone had kept BLAS); without the call
    term (and without the repacking of U in each call, BLAS_REPACK_COLS) the float32 plan is BLAS's
    strided-batched GEMM. The estimates show the calls. (Against OpenBLAS's Haswell kernels; an AVX-512 core's
    small-matrix kernels: test_many_tiny_float64_slabs_go_to_small_matrix_blas.)"""
    if not sg.simd_supported():
        pytest.skip("ttm_inner's microkernels need AVX2 + FMA")
    monkeypatch.setattr(sg, "openblas_avx512", lambda: False)
    X, U = np.empty((100_000, 10, 10), dtype), np.empty((10, 5), dtype)
    contract_mod._cached_plan.cache_clear()
    plan = plan_contraction("abc,bz->azc", X, U)
    assert plan.compiled is CompiledKernel.TTM_INNER, plan.explain()
    est = dict(plan.estimates)
    assert est["blas strided_batched_gemm"] >= (100_000 - 1) * sg.BATCH_CALL_SECONDS
    monkeypatch.setattr(sg, "BATCH_CALL_SECONDS", 0.0)
    monkeypatch.setattr(plan_mod, "BLAS_REPACK_COLS", 0.0)
    contract_mod._cached_plan.cache_clear()
    without = plan_contraction("abc,bz->azc", X, U)
    if np.dtype(dtype) == np.float32:
        assert without.compiled is CompiledKernel.NONE and without.kind == "strided_batched_gemm"
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


@pytest.mark.parametrize("C", [4, 7, 10])
def test_blas_repacking_u_for_each_gemm_of_few_columns_sends_middle_modes_to_the_kernel(C, monkeypatch, rng):
    """float64 middle modes over a short trailing extent C at R = 32: BLAS's strided batch of GEMMs packs U (R x I)
    again in every call for R x I x C multiply-adds, so its rate is taken as 1 / (1 + BLAS_REPACK_COLS / C) of its
    constant (measured on Zen 5: the kernel at 0.41-0.90x BLAS's time on 45 of 46 plans the term moved, e.g.
    (1000, 1000, 4) at R = 20-64 0.41-0.59x); without the term these stayed on BLAS. The product is einsum's to
    rounding either way."""
    if not sg.simd_supported():
        pytest.skip("ttm_inner's microkernels need AVX2 + FMA")
    n = {4: 1000, 7: 756, 10: 632}[C]
    X = np.empty((n, n, C))
    U = np.empty((n, 32))
    contract_mod._cached_plan.cache_clear()
    plan = ttm_plan(X, U, 1, transpose=True)
    assert plan.compiled is CompiledKernel.TTM_INNER, plan.explain()
    est = dict(plan.estimates)
    t_calls = (n - 1) * sg.BATCH_CALL_SECONDS  # (the batch's calls: not scaled)
    plain = (est["blas strided_batched_gemm compute"] - t_calls) / (1 + plan_mod.BLAS_REPACK_COLS / C) + t_calls
    monkeypatch.setattr(plan_mod, "BLAS_REPACK_COLS", 0.0)
    contract_mod._cached_plan.cache_clear()
    old = ttm_plan(X, U, 1, transpose=True)
    assert old.compiled is CompiledKernel.NONE, old.explain()
    assert dict(old.estimates)["blas strided_batched_gemm compute"] == pytest.approx(plain, rel=1e-9)
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()
    Xs = rng.standard_normal((60, 70, C))
    Us = rng.standard_normal((70, 32))
    _check(Xs, Us, 1, ttm(Xs, Us, 1, transpose=True))


def test_a_large_u_over_few_rows_goes_to_blas(monkeypatch):
    """ttm_outer reads all of U once per tile of rows of X: a long last mode against few rows ((4, 4, 1000000)
    or (10, 10, 100000): U of 8-80 MB re-read 4-25 times, measured 1.6-18x BLAS's time) is planned on BLAS,
    with the re-reads in the compiled estimate; without them (or with U under OUTER_U_CACHED_BYTES, as the
    last mode of 200^3) the kernel. The rule is outer_reread_bytes'. (Where the transposed tile takes R = 10, eight
    rows a tile, the (4, 4, 1000000) case reads U twice and the kernel wins: 15.1 against 17.5 ms.)"""
    if not sg.simd_supported():
        pytest.skip("the compiled kernels need AVX2 + FMA")
    # (the issue's reference machine's roofline, not this machine's calibration: a GEMM peak calibrated under load,
    # 43 GFlop/s on a Zen 5, made the compute estimates outweigh the re-reads)
    monkeypatch.setenv(ENV, "bw=31e9,peak=1e11")
    big, small = np.empty((10, 10, 100_000)), np.empty((200, 200, 200))
    rows = 8 if sg.outer_tr_style(10, 8) else 4  # (a tile's rows: the transposed tile's 8, or 4)
    assert sg.outer_reread_bytes(16, 1_000_000, 10, 8) == (16 // rows - 1) * 80_000_000  # (its further reads)
    assert sg.outer_reread_bytes(40_000, 200, 10, 8) == 0
    monkeypatch.setattr(sg, "cpu_name", lambda: "znver4")  # (a CPU without its own bound)
    for cached, want_big in ((sg.OUTER_U_CACHED_BYTES, CompiledKernel.NONE), (1 << 60, CompiledKernel.TTM_OUTER)):
        monkeypatch.setattr(sg, "OUTER_U_CACHED_BYTES", cached)
        contract_mod._cached_plan.cache_clear()
        plan = ttm_plan(big, np.empty((100_000, 10)), 2, transpose=True)
        assert plan.compiled is want_big, plan.explain()
        assert ttm_plan(small, np.empty((200, 10)), 2, transpose=True).compiled is CompiledKernel.TTM_OUTER
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_a_u_that_outweighs_the_rows_goes_to_blas(monkeypatch):
    """ttm_inner packs U (I x R) in every call and reads it beside X's rows: where U has more elements per element of
    a row (R / C) than INNER_U_MAX_SHARE and the output is one row of tiles (a first mode of (500000, 16)), or U is
    large and re-read by several rows of tiles ((2, 200000, 32) over its middle mode), the planner leaves the TTM to
    BLAS (measured 0.45-0.92x the kernel's time there); U of one block (not packed) and the floors' tensors keep the
    kernel. Without the rule, those plans take the kernel again."""
    if not sg.simd_supported():
        pytest.skip("the compiled kernels need AVX2 + FMA")
    none, inner = CompiledKernel.NONE, CompiledKernel.TTM_INNER
    multi = len(sg._row_blocks(10)) > 1  # (R = 10 takes two blocks where vectors are 256 bits wide)
    floors: dict = {}
    cases = [((500000, 16), 0, 32, "float64", none), ((500000, 16), 0, 20, "float64", inner),
             ((500000, 16), 0, 32, "float32", none), ((1000000, 8), 0, 10, "float32", none if multi else inner),
             ((2, 200000, 32), 1, 32, "float64", none), ((2, 200000, 32), 1, 16, "float64", inner),
             ((200, 200, 200), 1, 32, "float64", inner), ((200, 200, 200), 1, 32, "float32", inner)]
    assert sg.inner_u_heavy(1, 500000, 16, 32, 8) and not sg.inner_u_heavy(1, 500000, 16, 20, 8)
    assert sg.inner_u_heavy(2, 200000, 32, 32, 8) and not sg.inner_u_heavy(2, 200000, 32, 16, 8)
    for heavy_rule in (True, False):
        if not heavy_rule:
            monkeypatch.setattr(sg, "inner_u_heavy", lambda *a: False)
        for shape, mode, R, dtype, want in cases:
            contract_mod._cached_plan.cache_clear()
            plan = ttm_plan(np.empty(shape, dtype), np.empty((shape[mode], R), dtype), mode, transpose=True)
            assert plan.compiled is (want if heavy_rule else inner), (shape, mode, R, dtype, plan.explain())
        # (no mode of the floors' tensors is touched by the rule, whichever plan other rules give it)
        for shape in ((200, 200, 200), (320, 240, 160), (64, 64, 64, 64)):
            for dtype, mode, R in itertools.product(("float64", "float32"), range(len(shape)), (10, 32)):
                contract_mod._cached_plan.cache_clear()
                plan = ttm_plan(np.empty(shape, dtype), np.empty((shape[mode], R), dtype), mode, transpose=True)
                floors[heavy_rule, shape, dtype, mode, R] = plan.compiled
    assert all(floors[(True, *k[1:])] is floors[(False, *k[1:])] for k in floors)
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()
    # and the BLAS plan computes the same product as the kernel
    rng = np.random.default_rng(3)
    X, U = rng.standard_normal((60000, 16)), rng.standard_normal((60000, 32))
    Y = ttm(X, U, 0, transpose=True)
    np.testing.assert_allclose(Y, U.T @ X, rtol=0, atol=64 * np.finfo(np.float64).eps * np.abs(U).sum(0).max()
                               * np.abs(X).max())


def test_a_tensor_times_vector_over_a_first_mode_or_long_rows_goes_to_gemv(monkeypatch):
    """At R = 1 both plans stream X once, and the cost model's tie break (the compute terms) had kept the inner
    kernel; BLAS's GEMV took 0.51-0.94x its time over first modes and rows of LONG_ROW_BYTES and more (60 plans,
    stop 96). gemv_beats_inner sends those to BLAS; R = 2, short middle rows and the last mode keep their plans;
    without the rule all take the kernel again. The BLAS plan's product is checked against einsum."""
    if not sg.simd_supported():
        pytest.skip("the compiled kernels need AVX2 + FMA")
    none, inner = CompiledKernel.NONE, CompiledKernel.TTM_INNER
    cases = [((200, 200, 200), 0, 1, none), ((64, 64, 64, 64), 1, 1, none), ((20, 20, 20, 20, 20), 1, 1, none),
             ((200, 200, 200), 1, 1, inner), ((1000, 1000, 8), 1, 1, inner), ((200, 200, 200), 0, 2, inner)]
    for rule in (True, False):
        if not rule:
            monkeypatch.setattr(sg, "gemv_beats_inner", lambda *a: False)
        for dtype in ("float64", "float32"):
            for shape, mode, R, want in cases:
                contract_mod._cached_plan.cache_clear()
                plan = ttm_plan(np.empty(shape, dtype), np.empty((shape[mode], R), dtype), mode, transpose=True)
                # (without the rule, 256-bit machines leave some of these to BLAS by other rules)
                if rule or want is inner or sg.wide_vectors():
                    assert plan.compiled is (want if rule else inner), (shape, mode, R, dtype, plan.explain())
                if rule and want is none:
                    assert plan.kind in ("gemv", "batched_gemv"), plan.explain()
            contract_mod._cached_plan.cache_clear()
            last = ttm_plan(np.empty((200, 200, 200), dtype), np.empty((200, 1), dtype), 2, transpose=True)
            assert last.compiled is CompiledKernel.TTM_OUTER, last.explain()
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()
    rng = np.random.default_rng(5)
    for mode in (0, 1):
        X, U = rng.standard_normal((40, 50, 60, 70)), rng.standard_normal(((40, 50)[mode], 1))
        _check(X, U, mode, ttm(X, U, mode, transpose=True))


def test_a_large_u_is_packed_by_block_copies_with_the_same_values(monkeypatch):
    """_u_gather packs a U of U_GATHER_COPY_BYTES and more by one strided copy a block instead of one take (which
    reads an index as large as U and writes a fresh array: 34 against 8 ms for 51 MB): the same packed values from
    C- and F-ordered U, and a planned TTM over a middle mode the same bits either way."""
    rng = np.random.default_rng(4)
    for I, R, order in ((5000, 32, "C"), (3000, 50, "F"), (7000, 20, "C")):  # noqa: E741
        U = np.asarray(rng.standard_normal((I, R)), order=order)
        g = sg._InnerGeometry(3, I, 16, R, 8, 128)
        assert U.nbytes >= sg.U_GATHER_COPY_BYTES
        copied = sg._u_gather(g, U)(U)
        monkeypatch.setattr(sg, "U_GATHER_COPY_BYTES", 1 << 60)
        taken = sg._u_gather(g, U)(U)
        monkeypatch.undo()
        assert np.array_equal(copied, taken)
        expect = np.concatenate([U[:, r0:r0 + rb].reshape(-1) for r0, rb in g.rows])
        assert np.array_equal(copied, expect)
    X, U = rng.standard_normal((3, 20000, 24)), rng.standard_normal((20000, 24))
    outs = []
    for limit in (sg.U_GATHER_COPY_BYTES, 1 << 60):
        monkeypatch.setattr(sg, "U_GATHER_COPY_BYTES", limit)
        contract_mod._cached_plan.cache_clear()
        plan = ttm_plan(X, U, 1, transpose=True)
        assert plan.compiled is (CompiledKernel.TTM_INNER if sg.simd_supported() else CompiledKernel.NONE)
        outs.append(plan(X, U))
        outs.append(plan(X, U))
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    _check(X, U, 1, outs[0])


def test_zen5_rereads_a_float64_u_of_8_mib_from_its_caches(monkeypatch):
    """On Zen 5 (OUTER_U_CACHED_F64_BYTES_BY_CPU: 8 MiB) ttm_outer's tiles re-read a float64 U of up to 8 MiB
    without a charge: the last mode of (10, 10, 100000) at R = 10 (U of 7.6 MiB, measured 0.59x BLAS's time) and of
    (400, 32768) at R = 32 (8 MiB, 0.59x) take the kernel there, and BLAS on another CPU; a U of 12 MiB is charged
    on both, and float32 keeps OUTER_U_CACHED_BYTES."""
    if not sg.simd_supported():
        pytest.skip("the compiled kernels need AVX2 + FMA")
    assert sg.OUTER_U_CACHED_F64_BYTES_BY_CPU == {"znver5": 8 << 20}
    monkeypatch.setenv(ENV, "bw=31e9,peak=1e11")  # (a fixed roofline: see test_a_large_u_over_few_rows_goes_to_blas)
    cases = [((10, 10, 100_000), 10, True), ((400, 32768), 32, True), ((10, 10, 150_000), 10, False)]
    for cpu in ("znver4", "znver5"):
        monkeypatch.setattr(sg, "cpu_name", lambda cpu=cpu: cpu)
        assert sg.outer_u_cached_bytes(8) == (8 << 20 if cpu == "znver5" else sg.OUTER_U_CACHED_BYTES)
        assert sg.outer_u_cached_bytes(4) == sg.OUTER_U_CACHED_BYTES
        assert (sg.outer_reread_bytes(100, 100_000, 10, 8) == 0) is (cpu == "znver5")
        assert sg.outer_reread_bytes(100, 150_000, 10, 8) > 0
        for shape, R, cached in cases:
            contract_mod._cached_plan.cache_clear()
            plan = ttm_plan(np.empty(shape), np.empty((shape[-1], R)), len(shape) - 1, transpose=True)
            want = CompiledKernel.TTM_OUTER if cached and cpu == "znver5" else CompiledKernel.NONE
            assert plan.compiled is want, (cpu, shape, R, plan.explain())
    contract_mod._cached_plan.cache_clear()


def test_gemvs_that_reread_a_large_matrix_lose_to_one_gemm(monkeypatch):
    """A short last mode at a small rank ((50000, 8, 8, 8) x_3 at R = 4: A of 3.2M x 8 against 8 x 4) was
    planned as four GEMVs over z, each reading all of A (measured 132-138 ms against one GEMM's 27-41 ms):
    the planner now counts a GEMV batch's re-reads of a matrix it shares (_STREAM_BW), and plans the GEMM;
    without that term it plans the GEMVs again."""
    X, U = np.empty((50_000, 8, 8, 8)), np.empty((8, 4))
    contract_mod._cached_plan.cache_clear()
    plan = ttm_plan(X, U, 3, transpose=True)
    assert plan.kind == "gemm" and plan.remedy == plan_mod.Remedy.NONE, plan.explain()
    monkeypatch.setattr(plan_mod, "_STREAM_BW", 1e30)
    contract_mod._cached_plan.cache_clear()
    again = ttm_plan(X, U, 3, transpose=True)
    assert again.remedy != plan_mod.Remedy.NONE and again.inner_kind == "batched_gemv", again.explain()
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_a_gemv_batchs_exceptional_case_goes_to_the_compiled_kernel(monkeypatch, rng):
    """float32 at R = 2 on a short first mode ((8, 2000, 8, 40) x_0: 2 x 8 against 8 x 640000) has no GEMM the
    planner ranks above a batch of GEMVs over the rank (each reading the whole tensor: the exceptional case's
    zero-copy remedy), and the small-rank step used to skip exceptional cases: 1.83-1.89 ms against the
    compiled kernel's 0.79 (first mode of (10, 10, 10, 10000): 4.6-5.9 against 1.27). The step now weighs the
    kernel against such a batch, whose BLAS estimate counts the tensor read once more per rank beyond one."""
    X = rng.standard_normal((8, 2000, 8, 40)).astype(np.float32)
    U = rng.standard_normal((2, 8)).astype(np.float32)
    contract_mod._cached_plan.cache_clear()
    plan = ttm_plan(X, U, 0)
    assert plan.compiled is CompiledKernel.TTM_INNER and plan.remedy == plan_mod.Remedy.BATCHED_GEMV, plan.explain()
    assert "BLAS alternative: exceptional, remedy batched_gemv" in plan.explain()
    assert plan_mod._gemv_reread_bytes(plan, 4) == X.nbytes  # (the second GEMV reads the tensor again)
    Y = plan(X, U)
    ref = np.einsum("abcd,za->zbcd", X.astype(np.float64), U.astype(np.float64))
    assert np.abs(Y - ref).max() <= 32 * np.finfo(np.float32).eps * np.abs(ref).max()
    assert np.array_equal(plan(X, U), Y)
    monkeypatch.setattr(plan_mod, "_gemv_reread_bytes", lambda plan, itemsize: 0)
    contract_mod._cached_plan.cache_clear()
    once = dict(ttm_plan(X, U, 0).estimates)
    from tuckerkit.engine._roofline import machine_roofline

    blas = "blas exceptional"
    assert dict(plan.estimates)[blas] - once[blas] == pytest.approx(X.nbytes / machine_roofline().bandwidth)
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_long_sum_over_one_tile_is_cut_into_pieces_added_in_order(dtype, rng):
    """A long contracted mode against few short rows ((100000, 10, 10) x_0: the whole output one tile) ran on
    one worker; the sum over i is now cut by the sizes alone (_reduction_cuts), each piece's partial output
    added in piece order: the same bits for 1-3 workers and repeats, those of the pieces summed by hand,
    einsum's to rounding, and X and U unmodified."""
    I, C, R = 50_000, 40, 8  # noqa: E741
    cuts = sg._reduction_cuts(1, I, C, R, np.dtype(dtype).itemsize)
    assert cuts == [I * k // 4 for k in range(5)]  # 32 MFlop: four pieces of 8 MFlop
    X = rng.standard_normal((1, I, C)).astype(dtype)
    U = rng.standard_normal((I, R)).astype(dtype)
    X0, U0 = X.copy(), U.copy()
    outs = []
    for w in (1, 2, 3, 2):
        Y = np.full((1, R, C), np.nan, dtype)
        sg.ttm_inner(X, U, Y, ExecutionPolicy(w))
        outs.append(Y)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    by_hand = np.empty((4, 1, R, C), dtype)
    for k in range(4):
        sg._inner_tiles(X[:, cuts[k]:cuts[k + 1]], U[cuts[k]:cuts[k + 1]], by_hand[k], ExecutionPolicy(1))
    assert np.array_equal(outs[0], ((by_hand[0] + by_hand[1]) + by_hand[2]) + by_hand[3])
    ref = np.einsum("aib,ir->arb", X.astype(np.float64), U.astype(np.float64))
    scale = np.sqrt(I) * np.abs(X).max() * np.abs(U).max()
    assert np.abs(outs[0] - ref).max() <= 8 * np.finfo(dtype).eps * scale
    assert np.array_equal(X, X0) and np.array_equal(U, U0)
    assert sg._reduction_cuts(2, I, C, R, 8) == [0, I]  # two rows of tiles: the workers share those instead
    assert sg._reduction_cuts(1, I, 100_000, R, 8) == [0, I]  # long rows: many tiles


def test_outer_gemm_style_needs_avx2_fma(monkeypatch):
    monkeypatch.setattr(sg, "simd_supported", lambda: False)
    assert not sg.outer_gemm_style(32, 4)


def test_long_rows_over_a_short_mode_go_to_the_kernel_when_streamed(rng, monkeypatch):
    """float64, R <= 16, long unit-stride rows contracted over I < LONG_ROW_MIN_I (the first modes of a 4-way
    tensor): with 256-bit vectors BLAS while the tensor fits the caches (STREAMED_BYTES) above
    SHORT_I_CACHED_MAX_R_256 (R = 12-16: 1.18-1.54x BLAS's time on 100^3 and 30^4), the compiled kernel at lower
    ranks (0.57-1.01x) and beyond the caches, where its next-chunk prefetch pays (measured 0.67-0.99x BLAS's time on
    67-800 MB tensors); where vectors are wide the kernel in cache too (Zen 4: 0.54-1.02x BLAS's time on 2.9-17 MB
    ones); the rule lives in kernel_efficiency, and the streamed result is einsum's to rounding."""
    assert sg.STREAMED_BYTES == 32 << 20 and sg.LONG_ROW_MIN_I == 128 and sg.SHORT_I_CACHED_MAX_R_256 == 10
    args = ("small_rank_ttm_inner", "float64", 12, 40000, 60)
    streamed = sg._KERNEL_EFF[("small_rank_ttm_inner_long_short_i_streamed", "float64")][0]
    for wide in (False, True):
        with monkeypatch.context() as m:
            m.setattr(sg, "wide_vectors", lambda wide=wide: wide)
            assert sg.kernel_efficiency(*args, nbytes=sg.STREAMED_BYTES) == (streamed if wide else sg._KERNEL_EFF[
                ("small_rank_ttm_inner_long_short_i", "float64")][0])
            for R in (3, 10):  # (in cache, up to SHORT_I_CACHED_MAX_R_256: the kernel with either width)
                assert sg.kernel_efficiency("small_rank_ttm_inner", "float64", R, 40000, 60, nbytes=1 << 20) == \
                    streamed
            assert sg.kernel_efficiency(*args, nbytes=sg.STREAMED_BYTES + 1) == streamed
            assert sg.kernel_efficiency("small_rank_ttm_inner", "float64", 10, 40000, 200, nbytes=1 << 40) == \
                sg._KERNEL_EFF[("small_rank_ttm_inner_long", "float64")][0]  # (I >= 128: the long-row constants)
    # (the streamed rate takes the kernel against BLAS's at R <= 16, the in-cache one does not)
    from tuckerkit.engine._plan import _SMALL_RANK_MARGIN

    blas = sg.blas_efficiency("small_rank_ttm_inner", "float64", 10)
    assert 1 / streamed < _SMALL_RANK_MARGIN / blas <= 1 / sg._KERNEL_EFF[
        ("small_rank_ttm_inner_long_short_i", "float64")][0]
    contract_mod._cached_plan.cache_clear()
    small = np.empty((10, 60, 60, 60))  # 17 MB (np.empty: no page is touched by planning)
    big = np.empty((60, 60, 60, 60))  # 104 MB
    assert ttm_plan(small, np.ones((60, 12)), 1, transpose=True).compiled is (
        CompiledKernel.TTM_INNER if sg.wide_vectors() else CompiledKernel.NONE)
    assert ttm_plan(small, np.ones((60, 10)), 1, transpose=True).compiled is (
        CompiledKernel.TTM_INNER if sg.simd_supported() else CompiledKernel.NONE)
    for m in (0, 1):
        plan = ttm_plan(big, np.ones((60, 10)), m, transpose=True)
        assert plan.compiled is CompiledKernel.TTM_INNER, plan.explain()
    X = rng.standard_normal((40, 50, 60, 70))  # 67 MB
    for m, R in ((0, 10), (1, 16)):
        U = rng.standard_normal((X.shape[m], R))
        plan = ttm_plan(X, U, m, transpose=True)
        assert plan.compiled is CompiledKernel.TTM_INNER, plan.explain()
        _check(X, U, m, plan(X, U))
    contract_mod._cached_plan.cache_clear()


def test_a_small_kernel_call_stays_on_the_calling_thread(monkeypatch):
    """Below KERNEL_PARALLEL_FLOPS a compiled kernel's tiles run in one call on the caller's thread (no pool),
    except from WARM_SPLIT_FLOPS while the helpers are awake (two pieces); above it, pieces of at least
    KERNEL_PIECE_FLOPS, at most KERNEL_PIECES_PER_WORKER a worker and MAX_PIECES in all."""
    from tuckerkit.engine._policy import MAX_PIECES

    calls = []
    monkeypatch.setattr(sg, "parallel_for",
                        lambda work, n, policy: calls.append(n) or [work(i, None) for i in range(n)])
    monkeypatch.setattr(sg._handoff, "helpers_spinning", lambda policy: False)  # (asleep, whatever ran before)
    seen = []
    sg._run_tiles(lambda lo, hi: seen.append((lo, hi)), 100, sg.KERNEL_PARALLEL_FLOPS - 1, ExecutionPolicy(2))
    assert seen == [(0, 100)] and calls == []
    seen.clear()
    sg._run_tiles(lambda lo, hi: seen.append((lo, hi)), 100, 3 * sg.KERNEL_PIECE_FLOPS, ExecutionPolicy(2))
    assert calls == [3] and seen == [(0, 33), (33, 66), (66, 100)]
    seen.clear()
    sg._run_tiles(lambda lo, hi: seen.append((lo, hi)), 100, 10**12, ExecutionPolicy(2))
    assert sg.KERNEL_PIECES_PER_WORKER == 2
    assert calls[-1] == 4 and seen == [(0, 25), (25, 50), (50, 75), (75, 100)]
    seen.clear()
    sg._run_tiles(lambda lo, hi: seen.append((lo, hi)), 100, 10**12, ExecutionPolicy(3))
    assert calls[-1] == 6 and seen[0] == (0, 16) and seen[-1] == (83, 100)
    seen.clear()
    sg._run_tiles(lambda lo, hi: seen.append((lo, hi)), 100, 10**12, ExecutionPolicy(MAX_PIECES))
    assert calls[-1] == MAX_PIECES and seen[0] == (0, 100 // MAX_PIECES) and seen[-1][1] == 100
    seen.clear()
    sg._run_tiles(lambda lo, hi: seen.append((lo, hi)), 100, 10**12, ExecutionPolicy(1))  # one worker: one call
    assert seen == [(0, 100)]
    # with the helpers awake, from WARM_SPLIT_FLOPS up to KERNEL_PARALLEL_FLOPS, the cut is in two (none asleep,
    # none below it, none on one worker, none for one tile); it is taken only where the helpers can run the
    # kernel (a Python callable, as here, stays whole: tests/test_handoff.py runs the compiled ones)
    monkeypatch.setattr(sg._handoff, "helpers_spinning", lambda policy: True)
    for flops, policy, n, want in ((sg.WARM_SPLIT_FLOPS, ExecutionPolicy(2), 100, [0, 50, 100]),
                                   (sg.KERNEL_PARALLEL_FLOPS - 1, ExecutionPolicy(3), 101, [0, 50, 101]),
                                   (sg.WARM_SPLIT_FLOPS - 1, ExecutionPolicy(2), 100, [0, 100]),
                                   (sg.WARM_SPLIT_FLOPS, ExecutionPolicy(1), 100, [0, 100]),
                                   (sg.WARM_SPLIT_FLOPS, ExecutionPolicy(2), 1, [0, 1])):
        assert sg._tile_bounds(n, flops, policy, True) == want, (flops, policy, n)
        assert sg._tile_bounds(n, flops, policy) == [0, n]
        seen.clear()
        sg._run_tiles(lambda lo, hi: seen.append((lo, hi)), n, flops, policy)
        assert seen == [(0, n)]


# ------------------------------------------------------------------------------- the fused MTTKRP pass
def _dot_ref(X, U, W):
    """einsum in float64 and the same sum of absolute values (the rounding's scale)."""
    args = [a.astype(np.float64) for a in (X, U, W)]
    return (np.einsum("aic,ir,cr->ar", *args),
            np.einsum("aic,ir,cr->ar", *(np.abs(a) for a in args)))


@pytest.mark.parametrize("R", [1, 3, 10, 12, 13, 17, 32, 50, 64])
def test_ttm_inner_dot_is_the_mttkrp_of_its_three_modes(R, dtype, rng):
    """``ttm_inner_dot`` (the product with U summed against W's columns tile by tile, never written out) is
    ``einsum('aic,ir,cr->ar')`` to the rounding of its two sums, on sliced views, odd extents (1, 7, 13), rows
    shorter than a vector and long rows cut into several tiles (C = 3000: a row's tiles summed in order)."""
    eps = np.finfo(dtype).eps
    for A, I, C in ((1, 7, 13), (7, 13, 1), (13, 1, 7), (3, 37, 5), (5, 21, 131), (2, 40, 3000)):  # noqa: E741
        X = _sliced_view(rng, (A, I, C), dtype)
        U = rng.standard_normal((I, R)).astype(dtype)
        W = rng.standard_normal((C, R)).astype(dtype)
        before = X.copy()
        M = sg.ttm_inner_dot(X, U, W, ExecutionPolicy(2))
        ref, scale = _dot_ref(X, U, W)
        assert M.dtype == dtype and M.shape == (A, R)
        assert np.all(np.abs(M - ref) <= 4 * (I + C + 2) * eps * scale + 1e-300), (A, I, C)
        assert np.array_equal(X, before)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_kept_fused_pass_gives_ttm_inner_dots_bits(monkeypatch, workers, dtype, rng):
    """``ttm_inner_dot_kept`` makes its launch once per sizes and strides (kept in the dict it is given) and gives
    ``ttm_inner_dot``'s bits at every call, for U in C and F order and new values each call; without a dict, with
    the helpers busy, or where the whole output is one tile, it runs ``ttm_inner_dot`` itself."""
    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 50_000)
    h = _handoff._handoff()
    if h is None:
        pytest.skip("no GEMM helpers on this platform (the launch needs them)")
    pol = ExecutionPolicy(workers)
    for A, I, C, R in ((5, 21, 131, 10), (7, 40, 3000, 32), (13, 30, 17, 50)):  # noqa: E741
        X = _sliced_view(rng, (A, I, C), dtype)
        kept: dict = {}
        for order in ("C", "F", "C"):
            U = np.asarray(rng.standard_normal((I, R)).astype(dtype), order=order)
            W = rng.standard_normal((C, R)).astype(dtype)
            X0, U0, W0 = X.copy(), U.copy(), W.copy()
            want = sg.ttm_inner_dot(X, np.ascontiguousarray(U), W, pol)
            got = sg.ttm_inner_dot_kept(X, U, W, pol, kept)
            assert got.tobytes() == want.tobytes(), (A, I, C, R, order)
            assert np.array_equal(X, X0) and np.array_equal(U, U0) and np.array_equal(W, W0)
        launches = list(kept.values())
        assert len(launches) == 2 and all(isinstance(v, sg._Launch) for v in launches)  # one per U order
        assert sg.ttm_inner_dot_kept(X, U, W, pol, None).tobytes() == want.tobytes()
        with h.lock:  # another thread's round: ttm_inner_dot's own path
            assert sg.ttm_inner_dot_kept(X, U, W, pol, kept).tobytes() == want.tobytes()
        assert list(kept.values()) == launches
    X = rng.standard_normal((1, 3000, 40))  # one tile, the sum over i cut: no one pass (None), kept or not
    kept = {}
    assert sg.ttm_inner_dot(X, rng.standard_normal((3000, 4)), rng.standard_normal((40, 4)), pol) is None
    assert sg.ttm_inner_dot_kept(X, rng.standard_normal((3000, 4)), rng.standard_normal((40, 4)), pol, kept) is None
    assert list(kept.values()) == [None]


@pytest.mark.parametrize("R", [10, 32])
def test_ttm_inner_dot_bits_do_not_depend_on_workers_tiles_or_repeats(monkeypatch, R, dtype, rng):
    """Each M[a, r] is the in-order sum of its tiles' sums, each tile's sum in an order fixed when the kernel
    compiled: 1, 2 or 3 workers, a repeat, and narrower tiles or chunks of i (more tiles a row, the partial
    sums carried through the scratch) give the same bits; the tiles' own products are those of ttm_inner."""
    X = rng.standard_normal((6, 301, 333)).astype(dtype)
    U = rng.standard_normal((301, R)).astype(dtype)
    W = rng.standard_normal((333, R)).astype(dtype)
    ref = sg.ttm_inner_dot(X, U, W)
    for workers in (1, 2, 3):
        assert sg.ttm_inner_dot(X, U, W, ExecutionPolicy(workers)).tobytes() == ref.tobytes(), workers
    # one tile a row: the sum of each row of ttm_inner's product against W, in the kernel's own order
    Y = np.empty((6, R, 333), dtype)
    sg.ttm_inner(X, U, Y)
    expect, scale = _dot_ref(X, U, W)
    assert np.all(np.abs(ref - expect) <= 4 * (301 + 333 + 2) * np.finfo(dtype).eps * scale)
    monkeypatch.setattr(sg, "_L1_BYTES", 2048)  # narrow tiles and short chunks
    monkeypatch.setattr(sg, "_CHUNK_BYTES", 4096)
    narrow = sg.ttm_inner_dot(X, U, W, ExecutionPolicy(2))
    assert np.all(np.abs(narrow - expect) <= 4 * (301 + 333 + 2) * np.finfo(dtype).eps * scale)
    assert narrow.tobytes() == sg.ttm_inner_dot(X, U, W, ExecutionPolicy(1)).tobytes()


def test_ttm_inner_dot_refuses_a_view_without_unit_stride_and_leaves_one_tile_to_the_caller(rng):
    """A view whose last axis is not unit-strided is refused in one line; where the whole output is one tile
    (one row a, a long sum over i: the sum cut into pieces, :func:`_reduction_cuts`) it returns None and the
    caller runs the two steps."""
    X = rng.standard_normal((4, 5, 6))
    with pytest.raises(ValueError, match=r"ttm_inner_dot needs a non-empty view with non-negative strides, unit "
                                         r"stride along the last axis"):
        sg.ttm_inner_dot(X.transpose(0, 2, 1), np.ones((6, 2)), np.ones((5, 2)))
    long = rng.standard_normal((1, 200000, 20))
    assert len(sg._reduction_cuts(1, 200000, 20, 16, 8)) > 2
    assert sg.ttm_inner_dot(long, np.ones((200000, 16)), np.ones((20, 16))) is None


@pytest.mark.parametrize("R", [1, 10, 13, 32, 50])
def test_ttm_inner_axpy_is_the_mttkrp_of_its_unit_stride_mode(R, dtype, rng):
    """``ttm_inner_axpy`` (each tile of the product with U, times W's row, added to its piece's sums) is
    ``einsum('aic,ir,ar->cr')`` to the rounding of its sums, on sliced views, odd extents and long rows cut
    into several tiles; the same bits for 1, 2 and 3 workers (the pieces are cut by the sizes alone) and with
    narrow tiles and chunks."""
    eps = np.finfo(dtype).eps
    for A, I, C in ((1, 7, 13), (7, 13, 1), (13, 1, 7), (3, 37, 5), (40, 21, 131), (2, 40, 3000)):  # noqa: E741
        X = _sliced_view(rng, (A, I, C), dtype)
        U = rng.standard_normal((I, R)).astype(dtype)
        W = rng.standard_normal((A, R)).astype(dtype)
        M = sg.ttm_inner_axpy(X, U, W, ExecutionPolicy(2))
        args = [a.astype(np.float64) for a in (X, U, W)]
        ref = np.einsum("aic,ir,ar->cr", *args)
        scale = np.einsum("aic,ir,ar->cr", *(np.abs(a) for a in args))
        assert M.dtype == dtype and M.shape == (C, R)
        assert np.all(np.abs(M - ref) <= 4 * (I + A + 2) * eps * scale + 1e-300), (A, I, C)
        for workers in (1, 3):
            assert sg.ttm_inner_axpy(X, U, W, ExecutionPolicy(workers)).tobytes() == M.tobytes(), workers


def test_ttm_inner_axpy_bits_do_not_depend_on_tiles_and_it_refuses_a_strided_last_axis(monkeypatch, rng):
    X = rng.standard_normal((64, 301, 333))
    U, W = rng.standard_normal((301, 10)), rng.standard_normal((64, 10))
    ref = sg.ttm_inner_axpy(X, U, W, ExecutionPolicy(2))
    monkeypatch.setattr(sg, "_L1_BYTES", 2048)  # several tiles a row, short chunks
    monkeypatch.setattr(sg, "_CHUNK_BYTES", 4096)
    assert sg.ttm_inner_axpy(X, U, W, ExecutionPolicy(2)).tobytes() == ref.tobytes()
    with pytest.raises(ValueError, match=r"ttm_inner_axpy needs a non-empty view with non-negative strides, unit "
                                         r"stride along the last axis"):
        sg.ttm_inner_axpy(X.transpose(0, 2, 1), np.ones((333, 2)), np.ones((64, 2)))


# --- the tiny-rows unit-stride kernel (rows of 2-8 elements: lanes over rows, columns gathered by shuffles) ---


@pytest.fixture
def tiny_style(monkeypatch):
    """:func:`ttm_outer` sent to its tiny-rows kernel at the extents it has, whatever this CPU's vectors (the
    rule picks it with AVX2 + FMA; on 256-bit vectors LLVM splits its 512-bit ones, the same bits)."""
    monkeypatch.setattr(sg, "outer_tiny_style",
                        lambda R, itemsize, length: 2 <= length <= sg.TINY_MAX_I and 1 <= R <= sg.TINY_MAX_R)


def test_tiny_rows_extents_and_rule():
    """Its extents (rows of 2-8 elements, ranks 1-8) and the rule: where the CPU has AVX2 + FMA; the cost model's
    rate for it, and its cut into pieces counted by bytes only past STREAMED_BYTES."""
    assert (sg.TINY_MAX_I, sg.TINY_MAX_R, sg.TINY_TILE_ROWS % 16) == (8, 8, 0)
    wide = sg.simd_supported()
    assert sg.outer_tiny_style(1, 8, 2) is wide and sg.outer_tiny_style(8, 4, 8) is wide
    assert not any(sg.outer_tiny_style(R, 8, n) for R, n in ((1, 1), (9, 4), (4, 9), (0, 4)))
    assert sg.kernel_efficiency("small_rank_ttm_outer", "float64", 3, 0, 4, tiny=True) == sg.TINY_EFF["float64"]
    assert sg.kernel_efficiency("small_rank_ttm_outer", "float32", 3, 0, 4, tiny=True) == sg.TINY_EFF["float32"]
    assert sg.kernel_efficiency("small_rank_ttm_outer", "float64", 3, 0, 4) < sg.TINY_EFF["float64"]
    assert sg._cut_flops("outer_tiny", 10, sg.STREAMED_BYTES) == 10
    assert sg._cut_flops("outer_tiny", 10, sg.STREAMED_BYTES + 1) == 4 * sg.KERNEL_PIECE_FLOPS
    assert sg._cut_flops("outer_tr", 10, sg.STREAMED_BYTES + 1) == 10


@pytest.mark.parametrize("I", range(2, 9))
def test_tiny_rows_kernel_every_extent_and_tail(I, dtype, tiny_style, monkeypatch, rng):  # noqa: E741
    """Every row length (2-8) and rank (1-8), a last block of fewer rows than a vector's lanes (and fewer rows in
    all), tiles past TINY_TILE_ROWS, dense X and output: einsum's sums to rounding, and the bits of the
    register-blocked kernel (each output the chain of fused multiply-adds in i from zero); nothing written
    around the output's rows."""
    L = 64 // np.dtype(dtype).itemsize
    for R in range(1, sg.TINY_MAX_R + 1):
        for A in (1, L - 1, L, 3 * L + 5, sg.TINY_TILE_ROWS + L + 3):
            X2 = rng.standard_normal((A, I)).astype(dtype)
            U = rng.standard_normal((I, R)).astype(dtype)
            Ut = np.ascontiguousarray(U.T)
            buf = np.full((A + 2) * R, np.nan, dtype)
            Y = buf[R:R + A * R].reshape(A, R)
            assert sg._outer_args(X2, Ut, Y.T, sg.flat_span(X2), sg.flat_span(Y.T))[0] == "outer_tiny"
            sg.ttm_outer(X2, Ut, Y.T)
            _check(X2, U, 1, Y)
            want = _register_blocked(monkeypatch, X2, Ut, lambda A=A, R=R: np.full((A, R), np.nan, dtype).T)
            assert Y.tobytes() == np.ascontiguousarray(want.T).tobytes(), (A, R)
            assert np.isnan(buf[:R]).all() and np.isnan(buf[R + A * R:]).all()


def test_tiny_rows_kernel_bits_do_not_depend_on_workers_or_pieces(dtype, tiny_style, monkeypatch, rng):
    """The same bits on one worker and on two, whole and cut into pieces (past STREAMED_BYTES: made small here),
    through ``ttm_outer`` and a plan's launch (the helpers call the kernel by address)."""
    A, I, R = 3 * sg.TINY_TILE_ROWS + 37, 3, 3  # noqa: E741
    X = rng.standard_normal((A, 5, I)).astype(dtype)
    U = rng.standard_normal((I, R)).astype(dtype)
    X2, Ut = X.reshape(-1, I), np.ascontiguousarray(U.T)
    outs = []
    for workers, streamed in ((1, sg.STREAMED_BYTES), (2, sg.STREAMED_BYTES), (2, 1 << 10), (3, 1 << 10)):
        monkeypatch.setattr(sg, "STREAMED_BYTES", streamed)
        Y = np.empty((X2.shape[0], R), dtype)
        sg.ttm_outer(X2, Ut, Y.T, ExecutionPolicy(workers))
        outs.append(Y.tobytes())
    assert all(o == outs[0] for o in outs)
    _check(X2, U, 1, np.frombuffer(outs[0], dtype).reshape(-1, R))
    plan = ttm_plan(X, U, 2, transpose=True, policy=ExecutionPolicy(2))
    if plan.compiled == CompiledKernel.TTM_OUTER:  # (with AVX2 + FMA: the planner's choice)
        for _ in range(2):  # (the first call makes the launch, the second runs it)
            assert plan(X, U).tobytes() == outs[0]


def test_tiny_rows_need_dense_rows_else_another_kernel(dtype, tiny_style, monkeypatch, rng):
    """X's rows apart (a sliced view), or an output whose rows or ranks are apart: another kernel of
    ``ttm_outer`` runs (einsum's sums to rounding); for ranks from 3 the same bits as the tiny kernel's on a
    dense copy where vectors are wide (the transposed tile's and the register-blocked kernel's chain; with
    256-bit vectors the other layouts take the dot-product kernel, whose lanes sum as a tree: einsum's sums to
    rounding there)."""
    A, I = 101, 4  # noqa: E741
    for R in (2, 3, 5):
        U = rng.standard_normal((I, R)).astype(dtype)
        Ut = np.ascontiguousarray(U.T)
        xs, outs = _outer_layouts(rng, A, I, R, dtype)
        dense = np.empty((A, R), dtype)
        sg.ttm_outer(xs["C"], Ut, dense.T)
        for (xn, X2), (on, make) in itertools.product(xs.items(), outs.items()):
            Y2 = make()
            name = sg._outer_args(X2, Ut, Y2, sg.flat_span(X2), sg.flat_span(Y2))[0]
            assert (name == "outer_tiny") is (xn == "C" and on == "cols"), (xn, on)
            sg.ttm_outer(X2, Ut, Y2)
            _check(np.ascontiguousarray(X2), U, 1, Y2.T)
            if R >= 3 and sg.wide_vectors():
                assert np.ascontiguousarray(Y2.T).tobytes() == dense.tobytes(), (xn, on)
            elif name != "outer_tiny":
                assert name == "outer_dot", (xn, on, name)


def test_the_planner_takes_the_tiny_rows_kernel_for_a_short_unit_stride_mode(dtype, monkeypatch, rng):
    """A TTM over a short unit-stride mode (an RGB-like last mode of 4 at rank 2 and 3), which BLAS ran as a
    batch of matrix-vector products after a copy: with AVX2 + FMA the planner takes the tiny-rows kernel
    (also for a preallocated dense output), its explain names it, ``ttm`` gives einsum's sums to rounding.
    Elsewhere the tiny-rows kernel is not run (the rule needs AVX2 + FMA; the cost model then picks BLAS or
    another kernel of ``ttm_outer``). The layout rule (``_tiny_rows``) takes dense rows of X and of the output
    only."""
    from tuckerkit.engine._plan import _tiny_rows

    X = rng.standard_normal((400, 700, 4)).astype(dtype)  # (4.5 / 6.7 MFlop: past SMALL_RANK_MIN_FLOPS)
    for R in (2, 3):
        U = rng.standard_normal((4, R)).astype(dtype)
        ref = np.einsum("abi,ir->abr", X.astype(np.float64), U.astype(np.float64))
        plan = ttm_plan(X, U, 2, transpose=True)
        X2, Y2 = X.reshape(-1, 4), np.empty((X.shape[0] * X.shape[1], R), dtype).T
        kernel = sg._outer_args(X2, np.ascontiguousarray(U.T), Y2, sg.flat_span(X2), sg.flat_span(Y2))[0]
        assert (kernel == "outer_tiny") is sg.simd_supported()
        if sg.simd_supported():
            assert plan.compiled == CompiledKernel.TTM_OUTER, plan.explain()
            assert "compiled small_rank_ttm_outer" in plan.explain()
        got = ttm(X, U, 2, transpose=True)
        eps = np.finfo(dtype).eps
        scale = np.einsum("abi,ir->abr", np.abs(X.astype(np.float64)), np.abs(U.astype(np.float64)))
        assert got.shape == (400, 700, R) and np.all(np.abs(got - ref) <= 4 * 6 * eps * scale)
        out = np.empty((400, 700, R), dtype)
        assert ttm(X, U, 2, transpose=True, out=out) is out and out.tobytes() == got.tobytes()
    # the layout rule itself (strides in elements): rows of X apart, an output's ranks apart
    lay = ((0, 1, 2), 2, (0, 1, 2), True, False)
    shape = (60, 50, 4)
    with monkeypatch.context() as m:
        m.setattr(sg, "outer_tiny_style", lambda R, itemsize, length: True)
        assert _tiny_rows(lay, shape, (200, 4, 1), 3, 8, (60, 50, 3), (150, 3, 1), "C")
        assert not _tiny_rows(lay, shape, (250, 5, 1), 3, 8, (60, 50, 3), (150, 3, 1), "C")
        assert not _tiny_rows(lay, shape, (200, 4, 1), 3, 8, (60, 50, 3), (1, 60, 3000), "C")
        assert not _tiny_rows(lay, shape, (200, 4, 1), 3, 8, (60, 50, 3), (200, 4, 1), "C")
        assert _tiny_rows((*lay[:4], True), shape, (200, 4, 1), 3, 8, (60, 50, 3), None, "auto")
        assert _tiny_rows(lay, shape, (200, 4, 1), 3, 8, (60, 50, 3), None, "C")
        assert not _tiny_rows(lay, shape, (200, 4, 1), 3, 8, (60, 50, 3), None, "F")


def test_tiny_rows_take_a_lower_flop_threshold_than_the_other_kernels(rng):
    """The tiny-rows kernel is planned from SMALL_RANK_TINY_MIN_FLOPS (a 256 x 256 RGB image at rank 2), below
    SMALL_RANK_MIN_FLOPS, with AVX2 + FMA; smaller TTMs (a 128 x 128 one at rank 1) and other kernels'
    shapes of as few flops stay on BLAS."""
    assert plan_mod.SMALL_RANK_TINY_MIN_FLOPS < plan_mod.SMALL_RANK_MIN_FLOPS
    X = rng.standard_normal((256, 256, 3))
    U = rng.standard_normal((3, 2))
    assert 2 * X.size * 2 >= plan_mod.SMALL_RANK_TINY_MIN_FLOPS
    plan = ttm_plan(X, U, 2, transpose=True)
    assert (plan.compiled == CompiledKernel.TTM_OUTER) is sg.simd_supported()
    _check(X, U, 2, plan(X, U))
    small = rng.standard_normal((128, 128, 3))
    assert ttm_plan(small, U[:, :1], 2, transpose=True).compiled == CompiledKernel.NONE
    mid = rng.standard_normal((40, 40, 200))  # (0.64 / 1.28 MFlop at rank 2: a row of 200, not tiny)
    assert ttm_plan(mid, rng.standard_normal((200, 2)), 2, transpose=True).compiled == CompiledKernel.NONE


# --- the short-rows inner kernel (rows of 2-3 elements after the contracted mode, float32 2-7: lanes over the
# contracted rows) ---


@pytest.fixture
def short_style(monkeypatch):
    """:func:`ttm_inner` sent to its short-rows kernel at the extents it has, whatever this CPU's vectors."""
    monkeypatch.setattr(sg, "inner_short_style",
                        lambda R, itemsize, C: 2 <= C <= sg.short_max_c(itemsize) and 1 <= R <= sg.SHORT_MAX_R)


def test_short_rows_extents_and_rule():
    """Rows of 2-3 elements (float32 2-7: shorter than one 256-bit vector) at ranks 1-20, where the CPU has AVX2 +
    FMA; the cost model's rate; its cut counts its flops twice."""
    assert (sg.short_max_c(8), sg.short_max_c(4), sg.SHORT_MAX_R, sg.SHORT_CUT_SCALE) == (3, 7, 20, 2)
    wide = sg.simd_supported()
    assert sg.inner_short_style(1, 8, 2) is wide and sg.inner_short_style(20, 4, 3) is wide
    assert all(sg.inner_short_style(R, 4, C) is wide for R, C in ((1, 4), (8, 5), (16, 6), (20, 7)))
    assert not any(sg.inner_short_style(R, 8, C) for R, C in ((5, 1), (5, 4), (5, 7), (21, 3), (0, 2)))
    assert not any(sg.inner_short_style(R, 4, C) for R, C in ((5, 1), (5, 8), (21, 4)))
    assert sg.kernel_efficiency("small_rank_ttm_inner", "float64", 8, 3, 100, short=True) == sg.SHORT_EFF["float64"]
    assert sg.kernel_efficiency("small_rank_ttm_inner", "float64", 8, 3, 100) < sg.SHORT_EFF["float64"]
    assert sg._cut_flops("inner_short", 10, 1 << 40) == 20


@pytest.mark.parametrize("C", [2, 3, 4, 5, 6, 7])
def test_short_rows_kernel_every_rank_and_tail(C, dtype, short_style, rng):
    """Every rank block (1-20: blocks of SHORT_ACC // C rows of U^T), contracted extents with no rows left past
    whole steps and with some left (masked), one slab and several, into an output view inside a NaN-filled
    buffer: einsum's sums to rounding, nothing written around the view (float64 rows of 4-7: the register-blocked
    kernel, alike)."""
    L = 64 // np.dtype(dtype).itemsize
    eps = np.finfo(dtype).eps
    for R in (1, 2, 5, 8, 9, 16, 20):
        for A, I in ((1, 1), (7, L - 1), (3, L), (2, L + 1), (5, 3 * L + 5), (4, 200)):  # noqa: E741
            X = rng.standard_normal((A, I, C)).astype(dtype)
            U = rng.standard_normal((I, R)).astype(dtype)
            buf = np.full((A, R + 2, C), np.nan, dtype)
            Y = buf[:, 1:R + 1]
            sg.ttm_inner(X, U, Y)
            ref, scale = _ref(X, U, 1)
            assert np.all(np.abs(Y - ref) <= 4 * (I + 2) * eps * scale + 1e-300), (R, A, I)
            assert np.isnan(buf[:, 0]).all() and np.isnan(buf[:, R + 1]).all()


def test_short_rows_kernel_bits_do_not_depend_on_workers_or_tiles(dtype, short_style, monkeypatch, rng):
    """The same bits on 1, 2 and 3 workers and with other tiles (each slab's sums are one tree over the same
    chains), through ``ttm_inner`` and a plan's launch."""
    X = rng.standard_normal((300, 257, 3)).astype(dtype)
    U = rng.standard_normal((257, 10)).astype(dtype)
    want = np.empty((300, 10, 3), dtype)
    sg.ttm_inner(X, U, want, ExecutionPolicy(1))
    _check(X, U, 1, want)
    for workers, tile in ((2, sg.SHORT_TILE_ELEMS), (3, sg.SHORT_TILE_ELEMS), (2, 1)):
        monkeypatch.setattr(sg, "SHORT_TILE_ELEMS", tile)
        got = np.empty_like(want)
        sg.ttm_inner(X, U, got, ExecutionPolicy(workers))
        assert got.tobytes() == want.tobytes(), (workers, tile)
    plan = ttm_plan(X, U, 1, transpose=True, policy=ExecutionPolicy(2))
    if plan.compiled == CompiledKernel.TTM_INNER:  # (with AVX2 + FMA: the planner's choice)
        for _ in range(2):  # (the first call makes the launch, the second runs it)
            assert plan(X, U).tobytes() == want.tobytes()


def test_short_rows_need_back_to_back_rows_else_another_kernel(dtype, short_style, monkeypatch, rng):
    """Slabs whose rows lie apart (a sliced trailing mode) take the register-blocked kernel (einsum's sums to
    rounding), as do rows one element longer than the kernel takes (float64 4, float32 8); the rule
    (``_short_slabs``) sees both."""
    longer = sg.short_max_c(np.dtype(dtype).itemsize) + 1
    big = rng.standard_normal((6, 40, longer + 1)).astype(dtype)
    U = rng.standard_normal((40, 4)).astype(dtype)
    calls = []
    real = sg._inner_short_kernel
    monkeypatch.setattr(sg, "_inner_short_kernel", lambda *a: calls.append(1) or real(*a))
    for X in (big[:, :, :3], big[:, :, :longer], np.ascontiguousarray(big[:, :, :3])):
        Y = np.empty((6, 4, X.shape[2]), dtype)
        sg.ttm_inner(X, U, Y)
        _check(X, U, 1, Y)
    assert len(calls) == 1 and sg._short_slabs(np.ascontiguousarray(big[:, :, :3]))
    assert not sg._short_slabs(big[:, :, :3])


def test_the_planner_takes_the_short_rows_kernel_for_a_middle_mode_before_rgb(dtype, rng):
    """A TTM over the mode before a trailing mode of 3 (an image's width, then its colours): with AVX2 + FMA
    the planner takes the compiled inner kernel (the short rows), ``ttm`` gives einsum's sums to rounding, with
    and without ``out=``; elsewhere BLAS's plan."""
    from tuckerkit.engine._plan import _short_slabs

    X = rng.standard_normal((256, 512, 3)).astype(dtype)
    U = rng.standard_normal((512, 8)).astype(dtype)
    plan = ttm_plan(X, U, 1, transpose=True)
    assert (plan.compiled == CompiledKernel.TTM_INNER) is sg.simd_supported(), plan.explain()
    got = ttm(X, U, 1, transpose=True)
    _check(X, U, 1, got)
    out = np.empty_like(got)
    assert ttm(X, U, 1, transpose=True, out=out) is out and out.tobytes() == got.tobytes()
    lay = ((0, 1, 2), 1, (0, 1, 2), True, True)
    assert _short_slabs(lay, (256, 512, 3), (1536, 3, 1), 8, 8) is sg.simd_supported()
    assert not _short_slabs(lay, (256, 512, 3), (2560, 5, 1), 8, 8)
    assert not _short_slabs(lay, (256, 512, 4), (2048, 4, 1), 8, 8)
    assert _short_slabs(lay, (256, 512, 5), (2560, 5, 1), 8, 4) is sg.simd_supported()  # (float32 rows of 4-7)
    assert not _short_slabs(lay, (256, 512, 8), (4096, 8, 1), 8, 4)


def test_many_tiny_float64_slabs_go_to_small_matrix_blas(monkeypatch, rng):
    """Against an AVX-512 OpenBLAS core (small-matrix kernels) float64 TTMs of at least 4096 slabs of at most 16 rows
    shorter than 24 elements, R >= 3, go to BLAS's batch (0.53-0.89x the register-blocked kernel's time, stop 96);
    slabs of 20 rows, float32 and R = 2 keep the kernel, and with the Haswell kernels all do."""
    if not sg.simd_supported():
        pytest.skip("ttm_inner's microkernels need AVX2 + FMA")
    inner, none = CompiledKernel.TTM_INNER, CompiledKernel.NONE
    cases = [((100000, 10, 10), "float64", 5, none), ((16, 16, 16, 16, 16), "float64", 8, none),
             ((8000, 20, 20), "float64", 8, inner), ((100000, 10, 10), "float32", 5, inner),
             ((100000, 10, 10), "float64", 2, inner)]
    for avx512 in (True, False):
        monkeypatch.setattr(sg, "openblas_avx512", lambda avx512=avx512: avx512)
        for shape, dtype, R, want in cases:
            contract_mod._cached_plan.cache_clear()
            mode = len(shape) - 2
            plan = ttm_plan(np.empty(shape, dtype), np.empty((shape[mode], R), dtype), mode, transpose=True)
            assert plan.compiled is (want if avx512 else inner), (avx512, shape, dtype, R, plan.explain())
            if avx512 and want is none:
                assert plan.kind == "strided_batched_gemm", plan.explain()
        X, U = rng.standard_normal((5000, 12, 12)), rng.standard_normal((12, 4))
        contract_mod._cached_plan.cache_clear()
        _check(X, U, 1, ttm(X, U, 1, transpose=True))
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_many_short_float32_slabs_go_to_small_matrix_blas(monkeypatch, rng):
    """Where numpy's OpenBLAS runs its small-matrix GEMM kernels (SkylakeX and later: openblas_avx512, read from
    threadpoolctl), float32 rows of 5-7 elements over fewer than 64 contracted rows go to its batch of GEMMs, which
    streams them near the memory's rate (0.17-0.80x the short-rows kernel's time over 67 of 69 plans, stop 96);
    one block of rows of U^T over 48 rows and more, longer slabs and rows of 4 keep the kernel, and with the Haswell
    kernels (no small-matrix kernels) all do."""
    from threadpoolctl import threadpool_info
    cores = [str(i.get("architecture", "")).lower() for i in threadpool_info()
             if i.get("internal_api") == "openblas" and "numpy" in str(i.get("filepath", ""))]
    assert sg.openblas_avx512() is (bool(cores) and cores[0] in sg.OPENBLAS_AVX512_CORES)
    if not sg.simd_supported():
        pytest.skip("the short-rows kernel needs AVX2 + FMA")
    inner, none = CompiledKernel.TTM_INNER, CompiledKernel.NONE
    cases = [((100000, 20, 5), 8, none), ((89285, 16, 7), 2, none), ((40000, 50, 5), 4, none),
             ((40000, 50, 5), 3, inner), ((10000, 200, 5), 8, inner), ((100000, 20, 4), 8, inner)]
    for small in (True, False):
        monkeypatch.setattr(sg, "openblas_avx512", lambda small=small: small)
        for shape, R, want in cases:
            contract_mod._cached_plan.cache_clear()
            plan = ttm_plan(np.empty(shape, np.float32), np.empty((shape[1], R), np.float32), 1, transpose=True)
            assert plan.compiled is (want if small else inner), (small, shape, R, plan.explain())
            if small and want is none:
                assert plan.kind == "strided_batched_gemm", plan.explain()
        X, U = rng.standard_normal((3000, 20, 6)).astype(np.float32), rng.standard_normal((20, 8)).astype(np.float32)
        contract_mod._cached_plan.cache_clear()
        _check(X, U, 1, ttm(X, U, 1, transpose=True))
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_float32_rows_of_9_to_15_keep_the_transposed_tile_against_avx512_openblas(monkeypatch, rng):
    """Where numpy's OpenBLAS runs an AVX-512 core its SGEMM over 9-15 contracted elements is slow (the transposed
    tile took 0.24-0.94x its time over 36 plans, stop 96), so the tile keeps its rate there (TR_SHORT_F32_MIN_I);
    with the Haswell kernels those GEMMs run 2-3x faster and the short-dot rule keeps BLAS. Rows of 16 and more
    take the tile either way; the product is einsum's."""
    if not (sg.simd_supported() and sg.outer_tr_style(5, 4)):
        pytest.skip("the transposed tile takes float32 R = 5 where vectors are 512 bits wide")
    assert sg.TR_SHORT_F32_MIN_I == 9
    outer, none = CompiledKernel.TTM_OUTER, CompiledKernel.NONE
    for avx512 in (True, False):
        monkeypatch.setattr(sg, "openblas_avx512", lambda avx512=avx512: avx512)
        for shape, R, want in (((100000, 10, 12), 5, outer if avx512 else none),
                               ((300000, 9), 8, outer if avx512 else none), ((40000, 10, 24), 5, outer)):
            contract_mod._cached_plan.cache_clear()
            plan = ttm_plan(np.empty(shape, np.float32), np.empty((shape[-1], R), np.float32), len(shape) - 1,
                            transpose=True)
            assert plan.compiled is want, (avx512, shape, R, plan.explain())
        X, U = rng.standard_normal((3000, 40, 11)).astype(np.float32), rng.standard_normal((11, 6)).astype(np.float32)
        contract_mod._cached_plan.cache_clear()
        _check(X, U, 2, ttm(X, U, 2, transpose=True))
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()


def test_the_planner_takes_the_short_rows_kernel_for_float32_rows_of_4_to_7(rng):
    """float32 rows of 4-7 elements after the contracted mode (shorter than one 256-bit vector: the register-blocked
    kernel had run them element by element, BLAS as a batch of GEMMs of a few columns): with AVX2 + FMA
    the planner takes the inner kernel, which runs the short-rows kernel, and ``ttm`` gives einsum's sums to
    rounding for every such row length."""
    calls = []
    real = sg._inner_short_kernel
    for C in (4, 5, 6, 7):
        X = rng.standard_normal((400, 300, C)).astype(np.float32)  # (7.7-13 MFlop at rank 8)
        U = rng.standard_normal((300, 8)).astype(np.float32)
        contract_mod._cached_plan.cache_clear()
        plan = ttm_plan(X, U, 1, transpose=True)
        assert (plan.compiled == CompiledKernel.TTM_INNER) is sg.simd_supported(), (C, plan.explain())
        _check(X, U, 1, ttm(X, U, 1, transpose=True))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sg, "_inner_short_kernel", lambda *a, C=C: calls.append(C) or real(*a))
            mp.setattr(sg, "KERNEL_PARALLEL_FLOPS", 1 << 60)  # (one worker: the Python-level call is seen)
            Y = np.empty((400, 8, C), np.float32)
            sg.ttm_inner(X, U, Y)
            _check(X, U, 1, Y)
    assert calls == ([4, 5, 6, 7] if sg.simd_supported() else []), calls
    contract_mod._cached_plan.cache_clear()


def test_a_planar_short_mode_is_weighed_against_blas_copying_the_matrix(dtype, monkeypatch, rng):
    """A tensor stored with its short mode outermost (planar RGB: the colour planes one after another) contracted
    over that mode: BLAS's plan copies the 3 x R matrix (Remedy.COPY_B) for its matrix-vector products; the
    compiled kernels are weighed against such a plan (MATRIX_COPY_KERNELS) and, where the CPU has AVX2 + FMA,
    the inner kernel is taken; ``ttm`` gives einsum's sums to rounding either way."""
    X = rng.standard_normal((3, 500, 800)).astype(dtype).transpose(1, 2, 0)  # (4.8 MFlop at rank 2)
    U = rng.standard_normal((3, 2)).astype(dtype)
    contract_mod._cached_plan.cache_clear()
    plan = ttm_plan(X, U, 2, transpose=True)
    assert (plan.compiled == CompiledKernel.TTM_INNER) is sg.simd_supported(), plan.explain()
    _check(X, U, 2, ttm(X, U, 2, transpose=True))
    monkeypatch.setattr(plan_mod, "MATRIX_COPY_KERNELS", False)
    contract_mod._cached_plan.cache_clear()
    old = ttm_plan(X, U, 2, transpose=True)
    assert old.compiled == CompiledKernel.NONE and old.remedy == plan_mod.Remedy.COPY_B, old.explain()
    _check(X, U, 2, old(X, U))
    contract_mod._cached_plan.cache_clear()


def test_a_blas_plan_copying_the_tensor_is_weighed_against_the_kernels(monkeypatch, rng):
    """float32 (60, 60, 200, 3) contracted over its third mode at rank 2: BLAS's cheapest plan copies the whole
    tensor (Remedy.COPY_A) for a batch of matrix-vector products. The compiled kernels are weighed against such a
    plan too (TENSOR_COPY_KERNELS, the copy counted in BLAS's seconds): where the CPU has AVX2 + FMA the inner
    kernel reads the tensor in place (no element copied; on (200, 200, 200, 3) 3.2 against 26.3 ms), while the
    same plan for cupy operands keeps BLAS's plan and reports its copy; ``ttm`` gives einsum's sums to rounding
    either way."""
    X = rng.standard_normal((60, 60, 200, 3)).astype(np.float32)
    U = rng.standard_normal((200, 2)).astype(np.float32)
    # (by default a tensor of more than LARGER_COPY_BYTES is not copied where views run: checked at the end)
    monkeypatch.setattr(plan_mod, "LARGER_COPY_BYTES", 1 << 40)
    contract_mod._cached_plan.cache_clear()
    plan = ttm_plan(X, U, 2, transpose=True)
    if sg.simd_supported():
        assert plan.compiled == CompiledKernel.TTM_INNER and plan.copies == 0, plan.explain()
        assert "remedy copy_a" in plan.explain().splitlines()[0]
        gpu = contract_mod._on_gpu(plan)  # (cupy operands: cuBLAS on the BLAS plan, which copies the tensor)
        assert gpu.compiled == CompiledKernel.NONE and gpu.remedy == plan_mod.Remedy.COPY_A
        assert gpu.copies == X.size and gpu.bytes_moved > 2 * X.nbytes, gpu.explain()
    _check(X, U, 2, plan(X, U))
    monkeypatch.setattr(plan_mod, "TENSOR_COPY_KERNELS", False)
    contract_mod._cached_plan.cache_clear()
    old = ttm_plan(X, U, 2, transpose=True)
    assert old.compiled == CompiledKernel.NONE and old.remedy == plan_mod.Remedy.COPY_A, old.explain()
    assert old.copies == X.size
    _check(X, U, 2, old(X, U))
    monkeypatch.undo()
    contract_mod._cached_plan.cache_clear()
    # the default: the 8.6 MB tensor is not copied, BLAS's alternative (and a GPU's plan) runs on views
    plan = ttm_plan(X, U, 2, transpose=True)
    assert plan.copies == 0 and contract_mod._on_gpu(plan).copies == 0, plan.explain()
    _check(X, U, 2, plan(X, U))
    contract_mod._cached_plan.cache_clear()


_KEPT_CASES = {  # kernel: (inner, the view shape (A, I) or (A, I, C), R, the style rules forced)
    "outer_dot": (False, (37, 29), 5, dict(outer_tiny_style=False, outer_vdot_style=False, outer_tr_style=False,
                                           outer_gemm_style=False)),
    "outer_gemm": (False, (41, 23), 12, dict(outer_tiny_style=False, outer_vdot_style=False, outer_tr_style=False,
                                             outer_gemm_style=True, outer_tail_style=False)),
    "outer_gemm_tail": (False, (41, 23), 19, dict(outer_tiny_style=False, outer_vdot_style=False,
                                                  outer_tr_style=False, outer_gemm_style=True, outer_tail_style=True)),
    "outer_tr": (False, (45, 31), 6, dict(outer_tiny_style=False, outer_vdot_style=False, outer_tr_style=True)),
    "outer_vdot": (False, (45, 70), 7, dict(outer_tiny_style=False, outer_vdot_style=True)),
    "outer_tiny": (False, (53, 5), 3, dict(outer_tiny_style=True)),
    "inner": (True, (3, 17, 40), 7, dict(inner_short_style=False)),
    "inner_short": (True, (50, 13, 3), 6, dict(inner_short_style=True)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(_KEPT_CASES))
def test_a_kept_ttm_gives_the_functions_bits_for_each_calls_matrix(case, dtype, rng, monkeypatch):
    """:class:`sg.KeptTTM` (a small-rank TTM on fixed views, the matrix given per call) runs the kernel that
    ``ttm_outer`` / ``ttm_inner`` run, with their bits, for each call's matrix: C- or F-ordered (the first call's
    layout read whatever the next one's), read-only; never with arguments of another numba type than theirs (no
    new specialization of the kernel); the views' other memory untouched."""
    inner, shape, R, rules = _KEPT_CASES[case]
    for rule, value in rules.items():
        monkeypatch.setattr(sg, rule, lambda *a, _v=value: _v)
    X = rng.standard_normal(shape).astype(dtype)
    I = shape[1]  # noqa: E741
    if inner:
        Y = np.full((shape[0], R, shape[2]), np.nan, dtype)
        ref = np.empty_like(Y)
    else:  # (the output the transpose of a C array, as CP-ALS's small sweeps give it)
        Yt = np.full((shape[0], R), np.nan, dtype)
        Y, ref = Yt.T, np.empty((shape[0], R), dtype).T
    Us = [rng.standard_normal((I, R)).astype(dtype) for _ in range(3)]
    Us[1] = np.asfortranarray(Us[1])
    Us[2].flags.writeable = False
    kept = sg.KeptTTM.make(inner, X, Us[0], Y)
    assert kept is not None
    name = case.removesuffix("_tail")
    assert kept.kernel is getattr(sg, sg._KERNEL_OF[name])
    assert (18 in kept.at) == case.endswith("_tail")  # (the tail's columns: a second array from the matrix)
    refs = []
    for U in Us:
        if inner:
            sg.ttm_inner(X, np.ascontiguousarray(U), ref)
        else:
            sg.ttm_outer(X, np.ascontiguousarray(U.T), ref)
        refs.append(ref.copy())
    signatures = len(kept.kernel.signatures)
    for U, ref in zip(Us, refs, strict=True):
        kept(U)
        np.testing.assert_array_equal(Y, ref)
        want = np.einsum("aib,ir->arb", X.astype(np.float64), U) if inner else (X.astype(np.float64) @ U).T
        np.testing.assert_allclose(Y, want, rtol=0, atol=I * 8 * np.finfo(dtype).eps * np.abs(want).max())
    assert len(kept.kernel.signatures) == signatures
    if not inner:
        assert not np.isnan(Yt).any()


def test_a_kept_ttm_is_none_where_the_functions_take_another_route(rng):
    """No kept call for views the kernels cannot index (a negative stride), nor for a matrix in neither C nor F
    order (its packing reads one of them)."""
    X = rng.standard_normal((20, 30))
    U = rng.standard_normal((30, 4))
    Y = np.empty((20, 4)).T
    assert sg.KeptTTM.make(False, X[::-1], U, Y) is None
    assert sg.KeptTTM.make(False, X, rng.standard_normal((30, 8))[:, ::2], Y) is None
    assert sg.KeptTTM.make(False, X, U, Y) is not None


def test_a_kept_ttm_keeps_no_packed_matrix_and_copies_no_one_block_matrix(rng):
    """Between calls a :class:`sg.KeptTTM` holds empty arrays where the packed matrix goes (nothing of a call's
    matrix stays alive), and where the inner kernel takes U in one row block its own rows are the packing: a call
    allocates nothing of U's size (CP-ALS's small sweeps had peaked at 1.07x their input against 0.46x)."""
    import tracemalloc

    R = 6  # (one row block on every CPU: at most MAX_RB = 6 rows with 256-bit vectors, WIDE_RB = 12 with wide ones)
    X3 = rng.standard_normal((1, 2500, 50))
    U = rng.standard_normal((2500, R))
    Y = np.empty((1, R, 50))
    kept = sg.KeptTTM.make(True, X3, U, Y)
    assert kept is not None and len(sg._blocks(2500, R)[0]) == 1
    assert all(kept.args[k].size == 0 for k in kept.slots)
    kept(U)
    ref = np.empty_like(Y)
    sg.ttm_inner(X3, U, ref)
    np.testing.assert_array_equal(Y, ref)
    assert all(kept.args[k].size == 0 for k in kept.slots)
    tracemalloc.start()
    try:
        kept(U)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < U.nbytes // 4, peak



@functools.cache
def _family_runners():
    """Compiled callers of the register-block families and of two single blocks they choose between."""
    from numba import njit

    from tuckerkit.engine import _simd

    def plain(fam):
        @njit
        def run(rb, x, sxi, n, up, y, syr):  # y[r, j] = sum_i up[i, r] x[i, j] (up packed as (n, rb) rows)
            fam(rb, x, 0, sxi, n, up, 0, y, 0, syr, 0, x, 0, 0, 0)
        return run

    @njit
    def strided(nv, rb, u, su, n, x, sxa, y, syr):  # y[a, j] = sum_i x[a, i] u[i, j] (x's rows broadcast)
        _simd.gnarrow_blocks(nv, rb, u, 0, su, n, x, 0, 1, sxa, y, 0, syr, 0, u, 0, 0, 0)

    @njit
    def single(x, sxi, n, up, y, syr, u, su, xa, sxa, ya, sya):  # block5 and gtri3 alone
        _simd.block5(x, 0, sxi, n, up, 0, y, 0, syr, 0, x, 0, 0, 0)
        _simd.gtri3(u, 0, su, n, xa, 0, 1, sxa, ya, 0, sya, 0, u, 0, 0, 0)

    return {"line": plain(_simd.line_blocks), "wide_line": plain(_simd.wide_line_blocks),
            "half": plain(_simd.half_blocks), "quad": plain(_simd.quad_blocks), "strided": strided,
            "single": single}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_register_blocks_loop_reaches_machine_code_once_not_unrolled(dtype, rng):
    """Each emitted block loop carries ``llvm.loop.unroll.disable`` (:func:`tuckerkit.engine._simd._not_unrolled`):
    in the optimized IR of a function calling ``block5`` and ``gtri3``, the fused multiply-adds cover each block's
    body once (5 rows of a two-vector strip, 3 rows of three vectors, in lanes: the same on 256- and 512-bit
    vectors), where LLVM's unroller had copied them four times over; the values still match einsum."""
    import re

    run = _family_runners()["single"]
    lanes = 32 // np.dtype(dtype).itemsize
    n, w = 23, 2 * lanes
    x = rng.standard_normal((n, w + 3)).astype(dtype)
    up = rng.standard_normal((n, 5)).astype(dtype)
    u = rng.standard_normal((n, 3 * lanes)).astype(dtype)
    xa = rng.standard_normal((3, n + 2)).astype(dtype)
    y, ya = np.empty((5, w), dtype), np.empty((3, 3 * lanes), dtype)
    run(x.ravel(), w + 3, n, up.ravel(), y.ravel(), w, u.ravel(), 3 * lanes, xa.ravel(), n + 2, ya.ravel(), 3 * lanes)
    tol = 4 * n * np.finfo(dtype).eps
    ref = np.einsum("ir,ij->rj", up.astype(np.float64), x[:, :w].astype(np.float64))
    np.testing.assert_allclose(y, ref, rtol=0, atol=tol * np.abs(ref).max())
    ref = np.einsum("ai,ij->aj", xa[:, :n].astype(np.float64), u.astype(np.float64))
    np.testing.assert_allclose(ya, ref, rtol=0, atol=tol * np.abs(ref).max())
    ir = run.inspect_llvm(run.signatures[-1])
    fma_lanes = sum(int(m) for m in re.findall(r"call [^\n]*@llvm\.fma\.v(\d+)f(?:32|64)\(", ir))
    assert fma_lanes == 5 * w + 3 * 3 * lanes
    assert "llvm.loop.unroll.disable" in ir


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_family_of_register_blocks_runs_the_block_of_its_row_count_and_refuses_others(dtype, rng):
    """A family (:func:`tuckerkit.engine._simd._make_family`: a switch over row counts emitted as IR) computes
    ``y[r, j] = sum_i up[i, r] x[i, j]`` with its block of ``rb`` rows: values against einsum, nothing written past
    the strip, the bits of that block called alone; a row count it does not hold raises the kernels' internal
    error, and a family keyed by its row count alone must have one vector count."""
    from tuckerkit.engine import _simd

    run = _family_runners()
    lanes = 32 // np.dtype(dtype).itemsize  # (one 256-bit vector; a block's strip is nv of them)
    n = 23
    eps = np.finfo(dtype).eps

    def close(got, ref):
        np.testing.assert_allclose(got, ref, rtol=0, atol=4 * n * eps * np.abs(ref).max())

    alone = {}
    for fam, nv, rows in (("line", 2, range(1, 7)), ("wide_line", 2, range(7, 13)), ("half", 1, range(1, 7)),
                          ("quad", 4, range(8, 13))):
        w = nv * lanes
        x = rng.standard_normal((n, w + 3)).astype(dtype)  # (rows longer than the strip)
        for rb in rows:
            up = rng.standard_normal((n, rb)).astype(dtype)
            y = np.full((rb, w + 5), np.nan, dtype)
            run[fam](rb, x.ravel(), w + 3, n, up.ravel(), y.ravel(), w + 5)
            close(y[:, :w], np.einsum("ir,ij->rj", up.astype(np.float64), x[:, :w].astype(np.float64)))
            assert np.isnan(y[:, w:]).all()
            if fam == "line" and rb == 5:
                alone["line5"] = (x, up, y[:, :w].copy())
        with pytest.raises(ValueError, match="internal error: no register block of that many rows"):
            run[fam](max(rows) + 1, x.ravel(), w + 3, n, up.ravel(), y.ravel(), w + 5)
    # the strided family: three vectors of U's columns against three rows of X broadcast, as ttm_outer runs it
    u = rng.standard_normal((n, 3 * lanes)).astype(dtype)
    xa = rng.standard_normal((3, n + 2)).astype(dtype)
    ya = np.empty((3, 3 * lanes), dtype)
    run["strided"](3, 3, u.ravel(), 3 * lanes, n, xa.ravel(), n + 2, ya.ravel(), 3 * lanes)
    close(ya, np.einsum("ai,ij->aj", xa[:, :n].astype(np.float64), u.astype(np.float64)))
    with pytest.raises(ValueError, match="internal error: no register block of that many rows"):
        run["strided"](3, 5, u.ravel(), 3 * lanes, n, xa.ravel(), n + 2, ya.ravel(), 3 * lanes)
    # the same bits as the single blocks block5 and gtri3
    x, up, y5 = alone["line5"]
    w = 2 * lanes
    y1, ya1 = np.empty((5, w), dtype), np.empty((3, 3 * lanes), dtype)
    run["single"](x.ravel(), w + 3, n, up.ravel(), y1.ravel(), w, u.ravel(), 3 * lanes, xa.ravel(), n + 2,
                  ya1.ravel(), 3 * lanes)
    np.testing.assert_array_equal(y1, y5)
    np.testing.assert_array_equal(ya1, ya)
    with pytest.raises(ValueError, match="a family keyed by its row count alone has one vector count"):
        _simd._make_family(((2, 1), (4, 8)))
