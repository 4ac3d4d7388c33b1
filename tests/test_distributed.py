"""Dask arrays: the same decompositions run as Dask graphs on a LocalCluster and give the in-memory answer."""

import warnings

import numpy as np
import pytest
from tuckerkit.datasets import make_low_rank_tucker

import tuckerkit as tk
import tuckerkit.io
from tuckerkit.engine import DaskTensor

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("dask.distributed")


@pytest.fixture(scope="module")
def client():
    """Two worker processes, started and closed by the test module."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.mark.parametrize(("shape", "ranks", "chunks"), [
    ((41, 30, 25), (4, 5, 3), (13, 11, 9)),  # chunk boundaries inside every mode, uneven last chunks
    ((17, 14, 12, 10), (3, 3, 2, 2), (5, 6, 5, 4)),
])
def test_dask_hooi_equals_in_memory(client, shape, ranks, chunks):
    X = make_low_rank_tucker(shape, ranks, noise=0.05, random_state=0).data
    D = da.from_array(X, chunks=chunks)
    init = tk.hosvd(X, ranks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        a = tk.hooi(X, ranks, init=init, max_iter=3, tol=0)
        b = tk.hooi(D, ranks, init=init, max_iter=3, tol=0)
    assert isinstance(b.core, np.ndarray) and b.passes_per_iteration == 2
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.to_dense(), a.to_dense(), atol=1e-10 * np.abs(X).max())


def test_dask_st_hosvd_and_default_init(client):
    X = make_low_rank_tucker((41, 30, 25), (4, 5, 3), noise=0.05, random_state=1).data
    D = da.from_array(X, chunks=(10, 30, 7))
    a = tk.st_hosvd(X, max_error=0.1, order=[2, 0, 1])
    b = tk.st_hosvd(D, max_error=0.1)
    assert b.ranks == a.ranks and b.fit == pytest.approx(a.fit, abs=1e-12)
    T = tk.hooi(D, (4, 5, 3))
    assert T.converged and T.fit == pytest.approx(tk.hooi(X, (4, 5, 3)).fit, abs=1e-9)


def test_dask_cp_als_equals_in_memory(client):
    from tuckerkit.datasets import make_low_rank_cp

    X = make_low_rank_cp((41, 30, 25), 3, noise=0.05, random_state=0).data
    D = da.from_array(X, chunks=(13, 11, 9))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        init = tk.cp_als(X, 3, max_iter=1, tol=0, random_state=0)
        a = tk.cp_als(X, 3, init=init, max_iter=4, tol=0)
        b = tk.cp_als(D, 3, init=init, max_iter=4, tol=0)
    assert b.passes_per_iteration == 3
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=1e-12)
    for U, V in zip(b.factors, a.factors, strict=True):
        np.testing.assert_allclose(U, V, atol=1e-10)


def test_open_npy_dask_reads_slabs_from_the_file(client, tmp_path):
    from tuckerkit.io import open_npy_dask

    X = make_low_rank_tucker((41, 30, 25), (4, 5, 3), noise=0.05, random_state=2).data
    np.save(tmp_path / "x.npy", X)
    D = open_npy_dask(tmp_path / "x.npy", chunk_bytes=8 * 30 * 25 * 6)
    assert D.chunks[0] == (6, 6, 6, 6, 6, 6, 5)
    assert len(__import__("pickle").dumps(D)) < 20_000  # the graph holds a path, not the tensor
    init = tk.hosvd(X, (4, 5, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        a = tk.hooi(X, (4, 5, 3), init=init, max_iter=2, tol=0)
        b = tk.hooi(D, (4, 5, 3), init=init, max_iter=2, tol=0)
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=1e-12)
    (tmp_path / "s.npy").write_bytes(b"not an array")
    with pytest.raises(tk.io.TensorFileError, match=r"s\.npy' is not a valid \.npy file \(it looks like a text file"):
        open_npy_dask(tmp_path / "s.npy")


@pytest.mark.parametrize("chunks", [(7, 30, 25), (7, 11, 25), (41, 30, 9)])
def test_dask_gram_and_projection_by_the_engine(client, chunks):
    """Chunk-local Grams / projections (tuckerkit's engine per chunk, tree-summed) equal numpy's."""
    from tuckerkit.engine import gram, multi_ttm

    rng = np.random.default_rng(5)
    X = rng.standard_normal((41, 30, 25))
    D = DaskTensor(da.from_array(X, chunks=chunks))
    for n in range(3):
        np.testing.assert_allclose(D.gram(n), gram(X, n), rtol=1e-12, atol=1e-10)
        U = rng.standard_normal((X.shape[n], 4))
        np.testing.assert_allclose(D.ttm(U, n, transpose=True), tk.ttm(X, U, n, transpose=True), rtol=1e-12, atol=1e-10)
    Us = [rng.standard_normal((n, 3)) for n in X.shape]
    from tuckerkit.engine._dask import _project

    got = _project(da, D.data, {0: Us[0], 2: Us[2]}).compute()
    np.testing.assert_allclose(got, multi_ttm(X, [Us[0], Us[2]], modes=[0, 2], transpose=True), atol=1e-10)


def test_dask_errors():
    with pytest.raises(TypeError, match=r"data must be a dask\.array\.Array; received ndarray"):
        DaskTensor(np.ones((3, 4)))
    bad = da.from_array(np.full((6, 5, 4), np.nan), chunks=3)
    with pytest.raises(ValueError, match=r"X contains NaN or infinite value\(s\)"):
        tk.hooi(bad, 2)  # the default (synchronous) scheduler when no client is active


def test_dask_cp_als_same_bits_whatever_the_hash_seed(tmp_path):
    """Dask CP-ALS repeats its bits from process to process: dask.array.einsum (the MTTKRP before) ordered its
    summed axes by a set of letters, so the chunk partials were added in an order that followed the process's
    string-hash seed (6 different results in 10 runs)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "dask_cp.py"
    script.write_text(
        "import hashlib, warnings, numpy as np, dask, dask.array as da, tuckerkit as tk\n"
        "warnings.simplefilter('ignore')\n"
        "rng = np.random.default_rng(0)\n"
        "A = [rng.standard_normal((n, 8)) for n in (60, 50, 40)]\n"
        "Y = np.einsum('ir,jr,kr->ijk', *A) + 0.01 * rng.standard_normal((60, 50, 40))\n"
        "with dask.config.set(scheduler='sync'):\n"
        "    T = tk.cp_als(da.from_array(Y, chunks=(15, 25, 20)), 8, random_state=0, max_iter=5)\n"
        "print(hashlib.sha256(b''.join(a.tobytes() for a in (T.weights, *T.factors))).hexdigest())\n")
    outs = set()
    for seed in ("0", "1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1


def test_dask_mttkrp_equals_in_memory(rng):
    X = rng.standard_normal((23, 17, 12, 5))
    D = DaskTensor(da.from_array(X, chunks=(7, 9, 5, 5)))
    fs = [rng.standard_normal((n, 4)) for n in X.shape]
    for mode in range(4):
        want = tk.mttkrp(X, fs, mode)
        got = D.mttkrp(fs, mode)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=100 * np.finfo(np.float64).eps * np.abs(want).max())


def test_complex_dask_arrays_and_memory_limits_are_refused_in_one_line(rng):
    """A complex Dask array was cast to float64 (its real part, silently: gram 38.4 off, a non-negative CP of
    Re(X)); memory_limit= on a Dask array was ignored."""
    X = rng.standard_normal((8, 9, 10))
    D = da.from_array(X + 1j * X, chunks=4)
    for call in (lambda: tk.gram(D, 0), lambda: tk.non_negative_cp(D, 2, max_iter=2), lambda: tk.hooi(D, 2)):
        with pytest.raises(TypeError, match=r"^X has complex dtype complex128 as a DaskTensor; expected a numpy or "
                                             r"cupy array in memory for complex tensors"):
            call()
    with pytest.raises(ValueError, match=r"^memory_limit=100 streams dense tensors held here .*; X is a Dask "
                                         r"array"):
        tk.hooi(da.from_array(X, chunks=5), [2, 2, 2], memory_limit=100)


def test_dask_projections_take_the_matrices_dtype_as_in_memory():
    """A complex matrix was cast to the Dask tensor's real dtype (zeros, a ComplexWarning), a float64 matrix to
    float32 for float32 data; and the un-transposed complex projection came back conjugated."""
    import dask

    with dask.config.set(scheduler="synchronous"):
        X = np.random.default_rng(0).standard_normal((17, 9, 8))
        U = (1 + 2j) * np.random.default_rng(1).standard_normal((2, 9))
        D = da.from_array(X, chunks=(5, 4, 3))
        for transpose, M in ((False, U), (True, U.T)):
            got = np.asarray(tk.ttm(D, M, 1, transpose=transpose))
            ref = tk.ttm(X, M, 1, transpose=transpose)
            assert got.dtype == ref.dtype == np.complex128
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13 * np.abs(ref).max())
        X32 = X.astype(np.float32)
        V = np.random.default_rng(2).standard_normal((2, 9))
        got = np.asarray(tk.ttm(da.from_array(X32, chunks=(5, 4, 3)), V, 1))
        assert got.dtype == tk.ttm(X32, V, 1).dtype == np.float64
        F = [np.ones((17, 2)), 1j * np.ones((9, 2)), np.ones((8, 2))]
        np.testing.assert_allclose(np.asarray(tk.mttkrp(D, F, 0)), tk.mttkrp(X, F, 0), rtol=1e-13)
