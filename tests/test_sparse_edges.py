"""The sparse tensor classes at their edges (a review of stop 104: each test failed on the code before it)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.sparse import COOTensor, CSFTensor


def _small():
    return COOTensor([[0, 0, 0], [1, 1, 1], [0, 1, 2], [1, 0, 1]], [1.0, 2.0, 3.0, 4.0], (2, 2, 3))


def _ones():
    return [np.ones((2, 1)), np.ones((2, 1)), np.ones((3, 1))]


def test_mttkrp_methods_check_their_factors():
    """``X.mttkrp`` (COO and CSF) checks the factors as ``tk.mttkrp`` does: a factor one row short of a mode of a
    million read past its end (a segmentation fault), a few rows short gave garbage."""
    X = COOTensor([[0, 0, 0], [1, 999_999, 2]], [1.0, 2.0], shape=(2, 1_000_000, 3))
    bad = [np.ones((2, 4)), np.ones((1, 4)), np.ones((3, 4))]
    for T in (X, CSFTensor(X)):
        with pytest.raises(ValueError, match=r"^factors\[1\] has 1 rows but mode 1 of X has size 1000000"):
            T.mttkrp(bad, 0)


def test_edited_values_are_seen_by_every_call():
    """Negating the values in place (an even number of sign flips: the stamp was the plain sum of the bits,
    which that leaves unchanged) or swapping two of them: ``tk.mttkrp`` and the methods give the new tensor's
    result on every mode, as a fresh tensor built from the edited values does (they gave the old one's; the
    method had never checked)."""
    F = _ones()
    for edit in ("negate", "swap", "assign"):
        X = _small()
        for m in range(3):
            tk.mttkrp(X, F, m)  # (its trees built)
        if edit == "negate":
            X.values *= -1
        elif edit == "swap":
            X.values[[0, 3]] = X.values[[3, 0]]
        else:
            X.values = X.values * 2
        fresh = COOTensor(X.coords.copy(), X.values.copy(), X.shape)
        for m in range(3):
            want = tk.mttkrp(fresh, F, m)
            np.testing.assert_array_equal(tk.mttkrp(X, F, m), want)
            np.testing.assert_array_equal(X.mttkrp(F, m), want)


def test_a_one_way_sparse_mttkrp_is_the_dense_one():
    """A 1-way sparse tensor's MTTKRP: the entries times ones (a bare StopIteration before), as the dense call."""
    dense = tk.mttkrp(np.array([0.0, 1.0, 0.0]), [np.ones((3, 2))], 0)
    got = tk.mttkrp(COOTensor([[1]], [1.0], (3,)), [np.ones((3, 2))], 0)
    np.testing.assert_array_equal(got, dense)


def test_a_csf_tensor_is_a_snapshot_in_any_order():
    """A CSF tensor built by the user keeps its values when the COO's change, whatever its mode order (a tree in
    the COO's own order shared its values array)."""
    X = _small()
    A, B = CSFTensor(X, (0, 1, 2)), CSFTensor(X, (1, 0, 2))
    a, b = A.values.copy(), B.values.copy()
    X.values *= 10
    np.testing.assert_array_equal(A.values, a)
    np.testing.assert_array_equal(B.values, b)
    with pytest.raises(TypeError, match=r"^order must be a permutation of the modes 0..2 \(a sequence of ints\)"):
        CSFTensor(X, 0)


def test_tns_shape_checked_and_kept_by_a_warning(tmp_path):
    """``from_tns(shape=)`` checks the shape as the constructor does (2.7 was truncated to 2, "22" read as
    (2, 2), 5 a raw TypeError); ``to_tns`` warns where the format cannot keep the shape (a 10 x 10 tensor read
    back as 1 x 1 with no word), and the shape it names reads it back."""
    p = tmp_path / "a.tns"
    p.write_text("1 1 1.0\n2 2 1.0\n")
    with pytest.raises(TypeError, match=r"^shape\[0\] must be an integer; received 2.7"):
        COOTensor.from_tns(p, shape=(2.7, 2))
    for bad in ("22", 5):
        with pytest.raises(TypeError, match=r"^shape must be a sequence of integers"):
            COOTensor.from_tns(p, shape=bad)
    q = tmp_path / "b.tns"
    with pytest.warns(UserWarning, match=r"the \.tns format stores no shape; read back it is \(1, 1\), not "
                                         r"\(10, 10\): pass shape=\(10, 10\) to from_tns"):
        COOTensor([[0, 0]], [1.0], (10, 10)).to_tns(q)
    assert COOTensor.from_tns(q, shape=(10, 10)).shape == (10, 10)
    r = tmp_path / "c.tns"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        COOTensor([[0, 0], [1, 2]], [1.0, 2.0], (2, 3)).to_tns(r)  # (its shape is its largest indices: no word)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_an_unpickled_coo_tensor_keeps_its_plan_and_bits(how):
    """The cached plan's stamp held the values array's address, which never matched after unpickling: a kind
    forced with X.plan(csf="one") was dropped on first use (cp_als ran "all": other bits), and plan(csf="one")
    again handed back the stale cache."""
    import copy
    import pickle

    X = np.random.default_rng(0).random((6, 7, 8))
    X[X < 0.7] = 0
    A = COOTensor.from_dense(X)
    A.plan(csf="one")
    B = pickle.loads(pickle.dumps(A)) if how == "pickle" else copy.deepcopy(A)
    assert B.plan().kind == "one"
    a, b = tk.cp_als(A, 3, random_state=0), tk.cp_als(B, 3, random_state=0)
    assert a.plans[0].kind == b.plans[0].kind == "one"
    for U, V in zip(a.factors, b.factors, strict=True):
        np.testing.assert_array_equal(U, V)
    C = pickle.loads(pickle.dumps(A))
    C.values[0] += 1.0  # (edited after unpickling: the plan is rebuilt, of the kind asked)
    assert C.plan(csf="one").kind == "one"
    dense = C.to_dense()
    np.testing.assert_allclose(tk.mttkrp(C, [np.ones((n, 2)) for n in C.shape], 0),
                               np.einsum("ijk,jr,kr->ir", dense, np.ones((7, 2)), np.ones((8, 2))), rtol=1e-14)


def test_sparse_decompositions_repeat_their_bits_on_a_rank_deficient_unfolding():
    """ARPACK restarts from its own process-wide random state when the Krylov space runs out (a constant block:
    unfoldings of rank 1): two identical sparse hosvd / non_negative_cp calls gave factors up to 1.2 apart. Small
    modes now take the dense Gram's exact subspace."""
    X = COOTensor.from_dense(np.ones((4, 5, 6)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        for fn in (lambda: tk.non_negative_cp(X, 3), lambda: tk.hosvd(X, 3), lambda: tk.st_hosvd(X, 3),
                   lambda: tk.non_negative_tucker(X, 3), lambda: tk.cp_als(X, 3, init="svd")):
            a, b = fn(), fn()
            for U, V in zip(a.factors, b.factors, strict=True):
                np.testing.assert_array_equal(U, V)
            assert a.fit > 1 - 1e-5


def test_ttm_of_a_one_way_sparse_tensor():
    """ttm / multi_ttm of a 1-D sparse tensor failed with "max() arg is an empty sequence" (the tree kernel needs
    a mode besides its root)."""
    x = np.array([1.0, 0.0, 3.0, 0.0, 5.0])
    X = COOTensor.from_dense(x)
    U = np.arange(10.0).reshape(2, 5)
    np.testing.assert_array_equal(tk.ttm(X, U, 0), tk.ttm(x, U, 0))
    np.testing.assert_array_equal(tk.multi_ttm(X, [U.T], transpose=True), U @ x)
    assert isinstance(tk.multi_ttm(X, [None], skip=0), COOTensor)


def test_sparse_projections_with_complex_matrices_match_the_dense_ones():
    """The sparse multi_ttm conjugated its last (dense-step) mode only, and the 1-D path none: the dense engine's
    transposed product is the conjugate transpose, the un-transposed one plain."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 4, 3)) * (rng.random((5, 4, 3)) < 0.4)
    S = COOTensor.from_dense(X)
    Us = [rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n)) for n in X.shape]
    np.testing.assert_allclose(tk.multi_ttm(S, Us), np.einsum("abc,ia,jb,kc->ijk", X, *Us), rtol=1e-13, atol=1e-13)
    Ut = [U.T for U in Us]
    np.testing.assert_allclose(tk.multi_ttm(S, Ut, transpose=True), tk.multi_ttm(X, Ut, transpose=True),
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(tk.multi_ttm(S, Us, skip=1), tk.multi_ttm(X, Us, skip=1), rtol=1e-13, atol=1e-13)
    x = np.array([0.0, 2, 0, -1, 3])
    np.testing.assert_allclose(tk.ttm(COOTensor.from_dense(x), Us[0].T, 0, transpose=True),
                               tk.ttm(x, Us[0].T, 0, transpose=True), rtol=1e-13)


def test_narrowing_a_sparse_tensor_names_an_overflow_and_refuses_an_empty_result():
    rng = np.random.default_rng(0)
    X = rng.random((10, 9, 8)) * (rng.random((10, 9, 8)) < 0.3)
    with pytest.raises(ValueError, match=r"^X has every value below float32's range"):
        COOTensor.from_dense(X * 1e-300).astype(np.float32)
    with pytest.raises(ValueError, match=r"^X has values beyond float32's range"):
        COOTensor.from_dense(X * 1e300).astype(np.float32)


@pytest.mark.parametrize("arpack", [True, False])
@pytest.mark.parametrize("tall", [False, True])
def test_leading_left_repeats_its_bits_when_the_krylov_space_runs_out(monkeypatch, tall, arpack):
    """ARPACK restarts from a random vector where its Krylov space runs out (here at once: a Gram with one
    distinct eigenvalue); that vector came from the operating system's entropy (wide unfoldings) or from svds'
    unseeded eigensolver (tall ones), so two identical calls on modes past the dense-Gram size gave other
    factors (0.45 / 0.29 apart). Seeded now (scipy >= 1.17 takes ``rng``; older scipy, whose ARPACK draws from
    its own state, runs a seeded subspace iteration instead: ``arpack=False``): the same bits, and still the
    leading subspace."""
    import scipy.sparse

    from tuckerkit.sparse import _dispatch

    if arpack and not _dispatch._eigsh_takes_rng():
        pytest.skip("this scipy's eigsh takes no rng (scipy >= 1.17 does); its fallback runs in arpack=False")
    monkeypatch.setattr(_dispatch, "_eigsh_takes_rng", lambda: arpack)
    n = _dispatch.DENSE_GRAM_MAX_ROWS + 88
    eye = scipy.sparse.identity(n, format="csr")
    A = (scipy.sparse.vstack if tall else scipy.sparse.hstack)([eye, eye]).tocsr()
    U, s = _dispatch.leading_left(A, 5, 3)
    U2, s2 = _dispatch.leading_left(A, 5, 3)
    assert U.tobytes() == U2.tobytes() and s.tobytes() == s2.tobytes()
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(s, np.sqrt(2.0), rtol=1e2 * eps)
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e2 * eps)
    # a sparse hosvd with such a mode (its unfolding [I I]): two calls, the same bits, after other eigsh calls
    X = COOTensor.from_dense(np.repeat(np.eye(n)[:, :, None], 2, axis=2))
    a = tk.hosvd(X, (5, 3, 2))
    scipy.sparse.linalg.eigsh(scipy.sparse.identity(40, format="csr"), k=3)  # (moves ARPACK's own state)
    b = tk.hosvd(X, (5, 3, 2))
    for P, R in zip(a.factors, b.factors, strict=True):
        np.testing.assert_array_equal(P, R)


@pytest.mark.parametrize("shape", [(700, 900), (900, 700)])
def test_the_seeded_subspace_iteration_finds_the_leading_singular_vectors(monkeypatch, shape):
    """The fallback for a scipy whose ARPACK restarts from unseeded draws: the leading singular pairs of a wide
    and a tall sparse matrix as numpy's dense SVD gives them (values to rounding, the subspace's sine to
    rounding over the gap), twice the same bits."""
    import scipy.sparse
    from _subspaces import subspace_sine

    from tuckerkit.sparse import _dispatch

    monkeypatch.setattr(_dispatch, "_eigsh_takes_rng", lambda: False)
    rng = np.random.default_rng(5)
    A = scipy.sparse.random(*shape, density=0.01, random_state=rng, format="csr")
    A = (A + scipy.sparse.diags(np.linspace(10.0, 1.0, min(shape)), shape=shape)).tocsr()  # a spread spectrum
    U, s = _dispatch.leading_left(A, 6, 0)
    U2, s2 = _dispatch.leading_left(A, 6, 0)
    assert U.tobytes() == U2.tobytes() and s.tobytes() == s2.tobytes()
    Ud, sd, _ = np.linalg.svd(A.toarray(), full_matrices=False)
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(s, sd[:6], rtol=1e3 * eps)
    gap = (sd[5] - sd[6]) / sd[0]
    assert subspace_sine(U, Ud[:, :6]) <= 1e3 * eps / gap


@pytest.mark.parametrize("shape", [(700, 30, 30), (100, 20, 20)])
def test_sparse_leading_subspace_at_extreme_magnitudes(shape):
    """The operand protocol's leading_subspace on a sparse tensor formed its Gram from the raw values: at 1e-155
    the Gram underflowed (an arbitrary basis, sine 1.0), at 1e200 it overflowed (NaN and LAPACK's DLASCL line).
    Scaled by a power of two now (exact): the subspace of the unscaled data, the eigenvalues scaled back (0 /
    inf where they leave float64), and the same bits for data scaled by any power of two."""
    from _subspaces import subspace_sine

    rng = np.random.default_rng(0)
    base = rng.standard_normal(shape) * (rng.random(shape) < 0.05)
    U0 = np.linalg.svd(base.reshape(shape[0], -1), full_matrices=False)[0][:, :5]
    U1, w1 = COOTensor.from_dense(base).leading_subspace(0, 5)
    U2, w2 = COOTensor.from_dense(base * 2.0**-700).leading_subspace(0, 5)
    assert U1.tobytes() == U2.tobytes() and np.array_equal(w2, np.ldexp(w1, -1400))
    eps = np.finfo(np.float64).eps
    for scale in (1e-155, 1e-200, 1e200):
        U, w = COOTensor.from_dense(base * scale).leading_subspace(0, 5)
        assert np.isfinite(U).all() and subspace_sine(U, U0) <= 1e4 * eps
    assert w[0] == np.inf


def test_leading_subspace_refuses_bad_modes_and_ranks():
    """A rank of 2.5 reached ARPACK (SystemError), 0 gave scipy's "k must be greater than 0", a mode of 3 an
    IndexError, a rank past the mode eigenvalues of another length than the vectors; the dense operand's mode
    of -1 recursed (it counts from the end now, on both). One line each, on every operand kind."""
    from tuckerkit.engine import as_operand

    rng = np.random.default_rng(0)
    d = rng.standard_normal((20, 6, 7)) * (rng.random((20, 6, 7)) < 0.3)
    for X in (COOTensor.from_dense(d), as_operand(d)):
        for mode, rank, match in ((0, 2.5, r"^rank must be an integer in \[1, 20\] \(the size of mode 0\); "
                                           r"received 2\.5$"),
                                  (0, 0, r"received 0$"), (1, 7, r"^rank must be an integer in \[1, 6\] "
                                                                 r"\(the size of mode 1\); received 7$"),
                                  (3, 2, r"^mode must be an integer in \[-3, 3\); received 3$"),
                                  (-4, 2, r"received -4$"), (True, 2, r"received True$")):
            with pytest.raises(ValueError, match=match):
                X.leading_subspace(mode, rank)
        # a negative mode counts from the end, as the sparse kind's other calls take it
        for P, Q in zip(X.leading_subspace(-1, 2), X.leading_subspace(2, 2), strict=True):
            np.testing.assert_array_equal(P, Q)


def test_the_subspace_iteration_hands_over_to_arpack_where_it_does_not_converge(monkeypatch):
    """Eigenvalues that decay slowly past the k-th (a gap of 1e-4) take the iteration past its steps: it returned
    its last estimate silently (a sine of 5e-2 to the exact subspace, and the vectors of one step with the basis
    of the next). None now, and ARPACK runs as before: the exact subspace."""
    import scipy.sparse
    from _subspaces import subspace_sine

    from tuckerkit.sparse import _dispatch

    monkeypatch.setattr(_dispatch, "_eigsh_takes_rng", lambda: False)
    monkeypatch.setattr(_dispatch, "SUBSPACE_ITER_MAX", 20)
    n = 600
    lam = 1 - 1e-4 * np.arange(n)
    A = scipy.sparse.hstack([scipy.sparse.diags(np.sqrt(lam)), scipy.sparse.csr_matrix((n, 100))]).tocsr()
    assert _dispatch._subspace_iteration(A, A.T.tocsr(), 5, 0) is None
    U, s = _dispatch.leading_left(A, 5, 0)
    eps = np.finfo(np.float64).eps
    assert subspace_sine(U, np.eye(n)[:, :5]) <= 1e-8
    np.testing.assert_allclose(s, np.sqrt(lam[:5]), rtol=1e2 * eps)
