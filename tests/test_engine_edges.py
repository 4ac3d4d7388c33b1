"""The engine's public calls on inputs at their edges (a review of stop 104: each test failed on the code
before it)."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import tuckerkit as tk


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gram_of_any_view_is_exactly_symmetric(dtype, rng):
    """A strided, reversed or broadcast view's Gram: exactly symmetric, as a contiguous array's (numpy ran such
    views' ``V @ V.T`` as GEMM, not SYRK: 8.9e-16 and 1.9e-6 off), and within a few eps of the float64 product."""
    views = [rng.standard_normal((7, 80)).astype(dtype)[:, ::2], rng.standard_normal((64, 16)).astype(dtype)[::-1],
             rng.standard_normal((30, 20, 12)).astype(dtype)[::-1, ..., ::-1],
             np.broadcast_to(rng.standard_normal((1, 9, 5)).astype(dtype), (6, 9, 5))]
    for X in views:
        for mode in range(X.ndim):
            G = tk.gram(X, mode)
            assert np.array_equal(G, G.T)
            Xn = np.moveaxis(X.astype(np.float64), mode, 0).reshape(X.shape[mode], -1)
            ref, mag = Xn @ Xn.T, np.abs(Xn) @ np.abs(Xn).T
            assert np.all(np.abs(G - ref) <= 4 * Xn.shape[1] * np.finfo(dtype).eps * mag)


def test_one_line_errors_and_edge_shapes():
    """A 1-D MTTKRP whose only factor is None names it (a raw AttributeError); a Khatri-Rao product of rank 0 is
    (prod I, 0) (a raw reshape error); ``multi_ttm(modes=)`` takes a 1-D integer array and says it wants ints
    ("a sequence of matrices" before)."""
    with pytest.raises(ValueError, match=r"^factors\[0\] is None and is the only matrix: a 1-D tensor's MTTKRP "
                                         r"takes the rank R from it; expected a matrix of shape \(3, R\)$"):
        tk.mttkrp(np.arange(3.0), [None], 0)
    assert tk.khatri_rao([np.ones((3, 0)), np.ones((4, 0))]).shape == (12, 0)
    X, U = np.arange(12.0).reshape(3, 4), np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(tk.multi_ttm(X, [U], modes=np.array([0])), U @ X)
    with pytest.raises(TypeError, match=r"^modes must be a sequence of ints \(one mode per matrix\); received 0$"):
        tk.multi_ttm(X, [U], modes=0)


def test_a_plan_runs_on_the_integer_operands_it_was_made_from_and_refuses_contrary_options(rng):
    """``plan(A, B)`` on the int / bool operands ``plan_contraction`` was given (promoted to float64 as
    ``contract`` promotes them; refused before), float32 to a float64 plan still refused; ``contract(plan=)``
    with ``copies="never"`` for a plan that copies, or an ``out_layout`` the plan does not allocate, is refused
    in one line (both were silently ignored)."""
    A, B = np.arange(12).reshape(3, 4), np.ones((4, 5))
    p = tk.plan_contraction("ik,kj->ij", A, B)
    np.testing.assert_array_equal(p(A, B), A @ B)
    Ab = np.ones((3, 4), bool)
    np.testing.assert_array_equal(tk.plan_contraction("ik,kj->ij", Ab, Ab.T.copy())(Ab, Ab.T.copy()),
                                  np.full((3, 3), 4.0))
    with pytest.raises(ValueError, match=r"^plan was made for dtype float64; received A of dtype float32$"):
        p(A.astype(np.float32), B)
    Ar = rng.standard_normal((200, 300))[::-1, ::-1]
    Br = np.ones((300, 50))
    q = tk.plan_contraction("ik,kj->ij", Ar, Br)
    assert q.copies > 0
    with pytest.raises(ValueError, match=r"^copies='never', but plan copies \d+ elements"):
        tk.contract("ik,kj->ij", Ar, Br, plan=q, copies="never")
    with pytest.raises(ValueError, match=r"^out_layout='F', but plan was made with out_layout='auto'"):
        tk.contract("ik,kj->ij", Ar, Br, plan=q, out_layout="F")
    assert tk.contract("ik,kj->ij", Ar, Br, plan=q, out_layout="C").flags.c_contiguous  # (what it allocates)
    f = tk.plan_contraction("ik,kj->ij", Ar, Br, out_layout="F")
    got = tk.contract("ik,kj->ij", Ar, Br, plan=f, out_layout="F")
    assert got.flags.f_contiguous
    np.testing.assert_allclose(got, Ar @ Br, rtol=1e-12)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
@pytest.mark.parametrize("kind", ["dense", "gapped", "reversed"])
def test_a_plan_made_for_an_out_runs_without_one(perm, kind):
    """A plan made with out= in the (m, p, n) memory order and called without out failed in numpy's reshape
    ("Unable to avoid creating a copy"): a fresh output now takes the planned out's axis order."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((30, 40)), rng.standard_normal((50, 40, 20))
    ref = np.einsum("mk,nkp->mnp", A, B)
    shape = tuple(ref.shape[i] for i in perm)
    buf = (np.empty((*shape[:-1], 2 * shape[-1]))[..., ::2] if kind == "gapped" else
           np.empty(shape)[::-1] if kind == "reversed" else np.empty(shape))
    out = buf.transpose(np.argsort(perm))
    for layout in ("auto", "C", "F"):
        plan = tk.plan_contraction("mk,nkp->mnp", A, B, out=out, out_layout=layout)
        tol = 64 * 40 * np.finfo(np.float64).eps * np.abs(ref).max()
        np.testing.assert_allclose(plan(A, B), ref, rtol=0, atol=tol)
        np.testing.assert_allclose(tk.contract("mk,nkp->mnp", A, B, plan=plan), ref, rtol=0, atol=tol)
        assert plan(A, B, out) is out
        np.testing.assert_allclose(out, ref, rtol=0, atol=tol)


@pytest.mark.parametrize("shape", [(15,), (3, 5, 1), (5, 3), (3, 6)])
def test_an_out_of_another_shape_is_refused_before_planning(shape):
    """An out of another order failed inside the planner (zip() argument 2 is shorter than argument 1), and
    plan_contraction planned with an out of the wrong extents without a word."""
    A, B = np.ones((3, 4)), np.ones((4, 5))
    msg = rf"^out has shape {re.escape(str(shape))}; expected \(3, 5\) for spec 'ik,kj->ij'$"
    with pytest.raises(ValueError, match=msg):
        tk.contract("ik,kj->ij", A, B, out=np.empty(shape))
    with pytest.raises(ValueError, match=msg):
        tk.plan_contraction("ik,kj->ij", A, B, out=np.empty(shape))
    with pytest.raises(ValueError, match=r"^out has shape \(1,\); expected \(\) for spec 'i,i->'$"):
        tk.contract("i,i->", A[0], A[0], out=np.empty(1))


def test_an_exceptional_case_copies_the_smaller_operand_not_the_tensor():
    """A view with no unit-stride axis was copied whole (64 MB; the call's memory 1.05x the input, HOOI's
    1.12x) where the evaluation on views ran as fast: the remedy copies the smaller operand, as documented."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 200, 400))[:, :, ::2]
    U = rng.standard_normal((200, 10))
    for spec, mode in (("ijk,ir->rjk", 0), ("ijk,jr->irk", 1), ("ijk,kr->ijr", 2)):
        plan = tk.plan_contraction(spec, X, U)
        assert plan.copies <= U.size, (spec, plan.remedy, plan.copies)
        ref = np.moveaxis(np.tensordot(U, X, axes=(0, mode)), 0, mode)
        got = np.moveaxis(plan(X, U), {0: 0, 1: 1, 2: 2}[mode], mode) if spec == "ijk,ir->rjk" else plan(X, U)
        want = np.tensordot(U, X, axes=(0, 0)) if mode == 0 else ref
        tol = 64 * 200 * np.finfo(np.float64).eps * np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def test_contract_names_a_sparse_operand():
    from tuckerkit.sparse import COOTensor

    S = COOTensor(np.array([[0, 0, 0], [1, 1, 1]]), np.array([1.0, 2.0]), (2, 2, 2))
    for fn in (tk.contract, tk.plan_contraction):
        with pytest.raises(TypeError, match=r"^A is a COOTensor; contract takes dense arrays \(numpy's, cupy's\): "
                                            r"for a sparse or streamed tensor use tk\.ttm, tk\.multi_ttm or "
                                            r"tk\.mttkrp, which take any operand$"):
            fn("ijk,ir->rjk", S, np.ones((2, 3)))


def test_the_start_grams_buffers_are_no_wider_than_their_pieces():
    """Each worker's float32 buffer of the start Gram was a fixed 2 MiB, whatever its piece: the whole of a 64^3
    tensor, a default CP-ALS's extra memory 2.37x the input (1.0x after); now no wider than a piece, all the
    buffers together at most an eighth of the tensor."""
    import tracemalloc

    from tuckerkit.engine import ExecutionPolicy, release_memory
    from tuckerkit.engine._gram import start_gram

    X = np.asfortranarray(np.random.default_rng(0).standard_normal((64, 64, 64)))
    for n in (1, 2):
        policy = ExecutionPolicy(workers=2)
        start_gram(X, n, policy)
        release_memory()  # (the block pool's idle blocks would serve the call untraced)
        tracemalloc.start()
        tracemalloc.reset_peak()
        got = start_gram(X, n, policy)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 0.3 * X.nbytes, (n, peak / X.nbytes)  # (the two buffers were 1.07x and 2.07x)
        G = np.tensordot(X, X, axes=([m for m in range(3) if m != n],) * 2)
        if got is not None:
            np.testing.assert_allclose(np.asarray(got[0], dtype=np.float64), G, rtol=0,
                                       atol=1e-5 * np.abs(G).max())


def test_byte_swapped_operands_keep_their_precision():
    """'>f4' operands of contract gave float64 results, and '>c8' / '>c16' matrices were refused as "not numeric"
    (the tensor X of that dtype was taken)."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    got = tk.contract("ij,jk->ik", A.astype(">f4"), B.astype(">f4"))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, A.astype(np.float32) @ B.astype(np.float32), rtol=8 * np.finfo(np.float32).eps)
    Z = (A + 1j * A[::-1]).astype(">c8")
    np.testing.assert_allclose(tk.contract("ij,j->i", Z, np.ones(4)), Z.astype(np.complex64).sum(axis=1),
                               rtol=8 * np.finfo(np.float32).eps)
    U = np.ones((1, 3), dtype=">c16")
    X = rng.standard_normal((2, 3))
    np.testing.assert_allclose(tk.ttm(X, U, 1), X @ U.astype(np.complex128).T, rtol=1e-15)


def test_masked_arrays_and_matrices_as_the_other_calls_take_them():
    """contract read a masked array's masked entries as data (every other call refuses them), and khatri_rao of
    numpy.matrix operands failed in numpy's broadcasting words."""
    A = np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[0, 1], [0, 0]])
    with pytest.raises(ValueError, match=r"^A is a masked array with 1 masked entry"):
        tk.contract("ij,j->i", A, np.ones(2))
    np.testing.assert_array_equal(tk.contract("ij,j->i", np.ma.masked_array([[1.0, 2.0]], mask=[[0, 0]]),
                                              np.ones(2)), [3.0])
    M = [np.matrix(np.arange(4.0).reshape(2, 2)), np.matrix(np.arange(6.0).reshape(3, 2))]
    np.testing.assert_array_equal(tk.khatri_rao(M), tk.khatri_rao([np.asarray(U) for U in M]))


def test_contract_takes_array_likes_and_names_a_masked_out():
    """An array-like with __array__ but no strides (a table) was refused after the sparse check came in; a masked
    out= failed in numpy.ma's broadcasting; '>f2' operands gave float64 where '<f2' give float32."""

    class Table:
        shape = (3, 4)

        def __array__(self, dtype=None, copy=None):
            return np.arange(12.0).reshape(3, 4)

    np.testing.assert_array_equal(tk.contract("ij,jk->ik", Table(), np.ones((4, 2))),
                                  np.arange(12.0).reshape(3, 4) @ np.ones((4, 2)))
    with pytest.raises(TypeError, match=r"^out is a masked array; expected a plain numpy array"):
        tk.contract("ij,jk->ik", np.ones((4, 5)), np.ones((5, 3)), out=np.ma.masked_array(np.zeros((4, 3))))
    A, B = np.ones((4, 5), "<f2"), np.ones((5, 3), "<f2")
    assert tk.contract("ij,jk->ik", A.astype(">f2"), B.astype(">f2")).dtype == tk.contract("ij,jk->ik", A, B).dtype
