"""Poisson CP (cp_apr): pyttb's cp_apr from the same start, sparse = dense, invariants, repeatability, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.sparse import COOTensor, CSFTensor


def _counts(rng, shape=(20, 22, 24), rank=3, scale=3.0):
    A = [rng.random((n, rank)) * (rng.random((n, rank)) < 0.5) for n in shape]
    return rng.poisson(scale * np.einsum("ir,jr,kr->ijk", *A)).astype(np.float64)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        return fn(*args, **kwargs)


def _loglik_dense(X, model):
    M = np.asarray(model.to_dense(), dtype=np.float64)
    nz = X != 0
    return float(np.sum(X[nz] * np.log(M[nz])) - M.sum())


@pytest.mark.parametrize("iters", [1, 5, 25, 60])
def test_same_or_better_log_likelihood_than_pyttb_from_the_same_start(iters, rng):
    ttb = pytest.importorskip("pyttb")
    X = _counts(rng)
    init = [rng.random((n, 3)) for n in X.shape]
    sub = np.argwhere(X)
    st = ttb.sptensor(sub, X[X != 0][:, None], X.shape)
    _, _, out = ttb.cp_apr(st, 3, init=ttb.ktensor([U.copy() for U in init]), maxiters=iters, printitn=0)
    M = _quiet(tk.cp_apr, COOTensor.from_dense(X), 3, init=init, max_iter=iters)
    assert M.log_likelihood >= out["obj"] - 1e-10 * abs(out["obj"])
    assert M.log_likelihood == pytest.approx(_loglik_dense(X, M), rel=1e-12)


def test_dense_coo_and_csf_give_the_same_bits_and_counts_are_conserved(rng):
    X = _counts(rng)
    runs = [_quiet(tk.cp_apr, Y, 3, random_state=0, max_iter=30)
            for Y in (X, COOTensor.from_dense(X), CSFTensor.from_coo(COOTensor.from_dense(X)))]
    for M in runs[1:]:
        assert M.log_likelihood == runs[0].log_likelihood and M.fit_history == runs[0].fit_history
        assert all(np.array_equal(U, V) for U, V in zip(M.factors, runs[0].factors, strict=True))
    M = runs[0]
    assert all(bool((U >= 0).all()) for U in M.factors)
    np.testing.assert_allclose([U.sum(axis=0) for U in M.factors], 1.0, rtol=1e-12)  # unit-sum columns
    assert float(M.weights.sum()) == pytest.approx(X.sum(), rel=1e-9)  # MU keeps the expected total count
    assert abs((1 - M.fit) - np.linalg.norm(X - M.to_dense()) / np.linalg.norm(X)) < 1e-9


def test_bitwise_repeatable_for_any_thread_count(rng):
    from threadpoolctl import threadpool_limits

    X = COOTensor.from_dense(_counts(rng, shape=(40, 42, 44), scale=8.0))
    assert X.nnz * 6 >= 1 << 16  # the parallel kernels run
    a = _quiet(tk.cp_apr, X, 6, random_state=0, max_iter=5)
    with threadpool_limits(1):
        b = _quiet(tk.cp_apr, X, 6, random_state=0, max_iter=5)
    assert a.log_likelihood == b.log_likelihood
    assert all(np.array_equal(U, V) for U, V in zip(a.factors, b.factors, strict=True))


def test_converges_on_a_planted_model_and_beats_a_lower_rank(rng):
    X = _counts(rng, scale=20.0)
    M3 = tk.cp_apr(X, 3, random_state=0)
    assert M3.converged and M3.kkt_violation < 1e-4
    M1 = _quiet(tk.cp_apr, X, 1, random_state=0)
    assert M3.log_likelihood > M1.log_likelihood


def test_float32_kept_and_convergence_warning(rng):
    X = _counts(rng).astype(np.float32)
    with pytest.warns(tk.ConvergenceWarning, match=r"^cp_apr reached max_iter=2"):
        M = tk.cp_apr(X, 3, random_state=0, max_iter=2)
    assert M.weights.dtype == np.float32 and M.factors[0].dtype == np.float32 and not M.converged


def test_bad_input(rng):
    X = _counts(rng)
    neg = X.copy()
    neg[0, 0, 0] = -1
    with pytest.raises(ValueError, match=r"^X has negative entries; cp_apr models non-negative counts$"):
        tk.cp_apr(neg, 2)
    with pytest.raises(ValueError, match=r"^X has no nonzero entries"):
        tk.cp_apr(np.zeros((3, 4, 5)), 2)
    with pytest.raises(ValueError, match=r"^cp_apr runs on the CPU .*received device='cuda'$"):
        tk.cp_apr(X, 2, device="cuda")
    init = [rng.random((n, 2)) for n in X.shape]
    init[0][0, 0] = -0.5
    with pytest.raises(ValueError, match=r"^init has negative entries; cp_apr needs a non-negative start"):
        tk.cp_apr(X, 2, init=init)
    with pytest.raises(ValueError, match=r"^max_inner_iter=0 is invalid; expected an integer >= 1$"):
        tk.cp_apr(X, 2, max_inner_iter=0)
    with pytest.raises(ValueError, match=r"^init='svd' is not valid; expected one of 'random'"):
        tk.cp_apr(X, 2, init="svd")


@pytest.mark.parametrize("workers", [2, 3])
def test_kernels_over_parts_are_the_serial_rows_bit_for_bit(workers):
    """CP-APR's kernels cut into parts on the policy's threads (``phi`` where the nonzeros split evenly: a
    power-law mode, empty rows) give the bits of one serial pass, and the numpy formulas."""
    from tuckerkit.decomposition import _apr_kernels as K
    from tuckerkit.engine import ExecutionPolicy

    rng = np.random.default_rng(workers)
    rows, R, nnz = 50, 4, 3000
    w = 1.0 / np.arange(1, rows + 1) ** 1.5
    w[[3, 7, 8]] = 0  # rows without nonzeros
    counts = np.bincount(rng.choice(rows, nnz, p=w / w.sum()), minlength=rows)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    vals = rng.integers(1, 5, nnz).astype(np.float64)
    Pi = rng.random((nnz, R))
    B = rng.random((rows, R))
    serial = np.empty((rows, R))
    K._phi_rows(ptr, vals, Pi, B, 1e-10, 0, rows, serial)
    got = np.full((rows, R), np.nan)
    K.phi(ptr, vals, Pi, B, 1e-10, got, ExecutionPolicy(workers))
    assert got.tobytes() == serial.tobytes()
    rowid = np.repeat(np.arange(rows), counts)
    want = np.zeros((rows, R))
    np.add.at(want, rowid, (vals / np.maximum(np.einsum("kr,kr->k", B[rowid], Pi), 1e-10))[:, None] * Pi)
    np.testing.assert_allclose(got, want, rtol=50 * np.finfo(np.float64).eps, atol=0)
    shape = (6, 7, 5)
    coords = np.stack([rng.integers(0, s, nnz) for s in shape], axis=1)
    Us = [rng.random((s, R)) for s in shape]
    F_all, F_off = np.concatenate(Us), np.array([0, 6, 13])
    pi_serial, pi = np.empty((nnz, R)), np.empty((nnz, R))
    K._gather_pi_rows(coords, F_all, F_off, 1, 0, nnz, pi_serial)
    K.gather_pi(coords, F_all, F_off, 1, pi, ExecutionPolicy(workers))
    assert pi.tobytes() == pi_serial.tobytes()
    np.testing.assert_array_equal(pi, Us[0][coords[:, 0]] * Us[2][coords[:, 2]])
    wts = rng.random(R)
    m_serial, m = np.empty(nnz), np.empty(nnz)
    K._model_at_rows(coords, F_all, F_off, wts, 0, nnz, m_serial)
    K.model_at(coords, F_all, F_off, wts, m, ExecutionPolicy(workers))
    assert m.tobytes() == m_serial.tobytes()
    ref = np.einsum("r,kr,kr,kr->k", wts, *(U[coords[:, i]] for i, U in enumerate(Us)))
    np.testing.assert_allclose(m, ref, rtol=20 * np.finfo(np.float64).eps, atol=0)
