"""Out-of-core Tucker: a memory-mapped tensor larger than ``memory_limit`` is read in slabs, gives the in-memory
answer, and never holds more than the limit."""

import os
import tracemalloc
import warnings

import numpy as np
import pytest
from tuckerkit.datasets import make_low_rank_tucker

import tuckerkit as tk
import tuckerkit.io
from tuckerkit.engine import SlabTensor
from tuckerkit.engine._slabs import parse_memory


@pytest.fixture
def memmapped(tmp_path):
    def make(shape, ranks, dtype=np.float64, seed=0):
        X = make_low_rank_tucker(shape, ranks, noise=0.05, dtype=dtype, random_state=seed).data
        path = tmp_path / f"x{seed}.npy"
        np.save(path, X)
        return X, np.load(path, mmap_mode="r")

    return make


@pytest.mark.parametrize(("shape", "ranks", "limit"), [
    ((61, 50, 40), (5, 6, 4), 450_000),  # slabs of 7 rows (14 in float32): the last one is short
    ((23, 18, 16, 14), (3, 4, 3, 2), 390_000),  # 4-way, slabs of 3 rows (6 in float32)
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_streamed_hooi_equals_in_memory(memmapped, shape, ranks, limit, dtype):
    X, M = memmapped(shape, ranks, dtype)
    S = SlabTensor(M, limit)
    assert 1 < S.slab_rows < shape[0] and shape[0] % S.slab_rows != 0
    init = tk.hosvd(X, ranks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        a = tk.hooi(X, ranks, init=init, max_iter=4, tol=0)
        b = tk.hooi(M, ranks, init=init, max_iter=4, tol=0, memory_limit=limit)
    eps = np.finfo(dtype).eps
    assert b.core.dtype == dtype and b.passes_per_iteration == 2
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=100 * eps)
    np.testing.assert_allclose(b.to_dense(), a.to_dense(), rtol=0, atol=200 * eps * np.abs(X).max())


def test_streamed_st_hosvd_equals_in_memory(memmapped):
    X, M = memmapped((61, 50, 40), (5, 6, 4))
    # out of core the shortest mode but 0 goes first, then the cheapest order of the rest (mode 1's Gram of the
    # projected 61 x 50 x 4 tensor before mode 0's)
    a = tk.st_hosvd(X, (5, 6, 4), order=[2, 1, 0])
    b = tk.st_hosvd(M, (5, 6, 4), memory_limit="100KB")
    np.testing.assert_allclose(b.to_dense(), a.to_dense(), atol=1e-12 * np.abs(X).max())
    c = tk.st_hosvd(X, max_error=0.1, order=[2, 0, 1])
    d = tk.st_hosvd(M, max_error=0.1, memory_limit=100_000)
    assert d.ranks == c.ranks and d.relative_error(X) <= 0.1
    assert d.fit == pytest.approx(c.fit, abs=1e-12)


def test_sketched_first_step(memmapped):
    """The randomized range finder: the same answer in memory and out of core (same seed), orthonormal
    factors, an error close to the exact ST-HOSVD's, and HOOI from it converging to the same fit."""
    X, M = memmapped((61, 50, 40), (5, 6, 4))
    exact = tk.st_hosvd(X, (5, 6, 4), order=[2, 0, 1])
    a = tk.st_hosvd(X, (5, 6, 4), order=[2, 1, 0], sketch=True, random_state=3)
    b = tk.st_hosvd(M, (5, 6, 4), memory_limit="400KB", sketch=True, random_state=3)  # the same order
    np.testing.assert_allclose(b.to_dense(), a.to_dense(), atol=1e-12 * np.abs(X).max())
    for U in b.factors:
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-12)
    assert b.relative_error(X) <= 1.25 * exact.relative_error(X)
    c = tk.st_hosvd(M, (5, 6, 4), memory_limit="400KB", sketch=True)  # random_state=None: a fixed seed
    np.testing.assert_array_equal(c.core, tk.st_hosvd(M, (5, 6, 4), memory_limit="400KB", sketch=True).core)
    h = tk.hooi(M, (5, 6, 4), memory_limit="400KB")  # streamed: HOOI starts from the sketched ST-HOSVD
    assert h.converged and h.fit == pytest.approx(tk.hooi(X, (5, 6, 4)).fit, abs=1e-8)
    with pytest.raises(ValueError, match=r"sketch=True needs ranks; with tol the rank choice needs every"):
        tk.st_hosvd(X, tol=0.1, sketch=True)


def test_default_init_and_random_init_streamed(memmapped):
    X, M = memmapped((61, 50, 40), (5, 6, 4))
    a = tk.hooi(X, (5, 6, 4))
    b = tk.hooi(M, (5, 6, 4), memory_limit="100KB")
    assert b.converged and b.fit == pytest.approx(a.fit, abs=1e-9)
    c = tk.hooi(M, (5, 6, 4), init="random", random_state=0, memory_limit="100KB")
    assert c.fit == pytest.approx(a.fit, abs=1e-6)
    for U in b.factors:
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-12)


def test_peak_memory_stays_under_the_limit(memmapped):
    X, M = memmapped((120, 60, 50), (4, 4, 4))  # 2.9 MB on disk
    limit = 700_000
    init = tk.hosvd(X, (4, 4, 4))
    del X
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        tk.hooi(M, (4, 4, 4), init=init, max_iter=1, tol=0, memory_limit=limit)  # warm caches and kernels
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        T = tk.hooi(M, (4, 4, 4), init=init, max_iter=3, tol=0, memory_limit=limit)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    assert M.nbytes > 4 * limit
    assert peak < limit, f"peak {peak:,} bytes over the {limit:,}-byte limit"
    assert 0.9 < T.fit < 1


def test_slabs_shrink_beside_an_in_memory_partial(memmapped):
    """The slabs take a quarter of what the held partial leaves of the limit: CP-ALS's (200, 60, 4) partial is
    384 KB of a 700 KB limit, and two slabs of a quarter of the whole limit beside it peaked at 1.51x the limit
    (traced); now 1.1x (the factor updates and the engine's buffers beside them)."""
    from tuckerkit.engine._buffers import release_memory

    _, M = memmapped((200, 60, 50), (4, 4, 4), seed=2)
    limit = 700_000

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tk.ConvergenceWarning)
            return tk.cp_als(M, 4, random_state=0, max_iter=5, tol=0, memory_limit=limit)

    ref = run()
    release_memory()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    got = run()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert got.fit_history == ref.fit_history
    assert peak < 1.25 * limit, f"peak {peak:,} bytes, {peak / limit:.2f}x the {limit:,}-byte limit"


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_small_tensors_stay_in_memory_and_bad_limits():
    X = np.random.default_rng(0).standard_normal((10, 11, 12))
    T = tk.hooi(X, 2, memory_limit="1GB")
    assert T.passes_per_iteration == 2 and T.fit > 0
    assert parse_memory("4GB") == 4_000_000_000 and parse_memory("1.5 KiB") == 1536
    with pytest.raises(ValueError, match=r"memory_limit='lots' is not a memory size; expected bytes or e.g. '4GB'"):
        tk.hooi(X, 2, memory_limit="lots")
    with pytest.raises(ValueError, match=r"memory_limit=0 is not positive"):
        tk.st_hosvd(X, 2, memory_limit=0)
    with pytest.raises(ValueError, match=r"data must have at least 2 dimensions; received shape \(5,\)"):
        SlabTensor(np.ones(5), 100)


def test_streamed_nan_is_reported(tmp_path):
    X = np.ones((40, 30, 20))
    X[33, 2, 7] = np.nan
    np.save(tmp_path / "nan.npy", X)
    M = np.load(tmp_path / "nan.npy", mmap_mode="r")
    with pytest.raises(ValueError, match=r"X contains NaN or infinite value\(s\); remove or impute them first"):
        tk.hooi(M, 2, memory_limit=50_000)


def test_slab_gram_and_ttm_match_the_engine(rng):
    X = rng.standard_normal((37, 8, 9))
    S = SlabTensor(X, 4 * 72 * 8 * 5)  # 5 rows per slab
    U = rng.standard_normal((9, 3))
    np.testing.assert_allclose(tk.gram(S, 2), tk.gram(X, 2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tk.ttm(S, U, 2, transpose=True), tk.ttm(X, U, 2, transpose=True), atol=1e-12)
    V = rng.standard_normal((37, 4))
    np.testing.assert_allclose(tk.ttm(S, V, 0, transpose=True), tk.ttm(X, V, 0, transpose=True), atol=1e-12)
    # the slab mode's Gram pairs every two slabs (blocks G[a, b] = A B^T): equal to the in-memory one
    np.testing.assert_allclose(tk.gram(S, 0), tk.gram(X, 0), rtol=1e-12, atol=1e-12)
    W = [rng.standard_normal((n, 2)) for n in X.shape]
    for n in range(3):  # the MTTKRP of every mode streams too
        np.testing.assert_allclose(tk.mttkrp(S, W, n), tk.mttkrp(X, W, n), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tk.multi_ttm(S, W, transpose=True), tk.multi_ttm(X, W, transpose=True), atol=1e-12)
    with pytest.raises(ValueError, match=r"plan= applies to dense arrays; a SlabTensor computes its own result"):
        tk.gram(S, 1, plan=tk.engine.gram_plan(X, 1))
    assert S.norm() == pytest.approx(np.linalg.norm(X), rel=1e-14)


def test_file_reads_and_views_give_the_same_slabs(memmapped):
    X, M = memmapped((30, 20, 10), (3, 3, 3), seed=3)
    whole, view = SlabTensor(M, 20_000), SlabTensor(M[4:], 20_000)
    assert whole._file_source() is not None and view._file_source() is None
    np.testing.assert_array_equal(np.concatenate([s for _, s in whole.slabs()]), X)
    np.testing.assert_array_equal(np.concatenate([s for _, s in view.slabs()]), X[4:])
    assert SlabTensor(M, 20_000, dtype=np.float32).norm() == pytest.approx(np.linalg.norm(X), rel=1e-6)


def test_projection_too_large_for_the_limit_is_refused(memmapped):
    _, M = memmapped((200, 100, 30), (3, 3, 3), seed=5)  # 4.8 MB; the first projection is 200 x 100 x R
    with pytest.raises(ValueError, match=r"memory_limit=500,000 bytes is too small: the mode-2 projection has shape "
                                         r"\(200, 100, 20\) \(3,200,000 bytes\), more than the limit"):
        tk.st_hosvd(M, (3, 3, 20), memory_limit=500_000)


@pytest.mark.parametrize(("shape", "limit"), [
    ((61, 50, 40), 450_000),  # slabs of 7 rows: the last one short
    ((23, 18, 16, 14), 390_000),  # 4-way
    ((300, 40), 40_000),  # a matrix: both halves of the tree are one mode
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_streamed_cp_als_equals_in_memory(tmp_path, shape, limit, dtype):
    from tuckerkit.datasets import make_low_rank_cp

    X = make_low_rank_cp(shape, 3, noise=0.05, dtype=dtype, random_state=0).data
    np.save(tmp_path / "x.npy", X)
    M = np.load(tmp_path / "x.npy", mmap_mode="r")
    S = SlabTensor(M, limit)
    assert 1 < S.slab_rows < shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        init = tk.cp_als(X, 3, max_iter=1, tol=0, random_state=0)
        a = tk.cp_als(X, 3, init=init, max_iter=5, tol=0)
        b = tk.cp_als(M, 3, init=init, max_iter=5, tol=0, memory_limit=limit)
        c = tk.cp_als(M, 3, max_iter=5, tol=0, memory_limit=limit, random_state=0)  # the default (svd) init
    eps = np.finfo(dtype).eps
    assert b.passes_per_iteration == 2 and b.weights.dtype == dtype
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=2e4 * eps)
    for U, V in zip(b.factors, a.factors, strict=True):
        np.testing.assert_allclose(U, V, atol=1e3 * eps)
    assert c.fit > 0.9


@pytest.mark.parametrize("store", ["hdf5", "zarr"])
def test_hdf5_and_zarr_arrays_stream(tmp_path, store):
    """An h5py dataset or a zarr array larger than the limit is read in slabs and gives the in-memory answer."""
    X = make_low_rank_tucker((61, 50, 40), (5, 6, 4), noise=0.05, random_state=3).data
    if store == "hdf5":
        h5py = pytest.importorskip("h5py")
        f = h5py.File(tmp_path / "x.h5", "w")
        f.create_dataset("x", data=X, chunks=(7, 50, 40))
        D = f["x"]
    else:
        zarr = pytest.importorskip("zarr")
        D = zarr.open(str(tmp_path / "x.zarr"), mode="w", shape=X.shape, chunks=(9, 50, 40), dtype=X.dtype)
        D[...] = X
    S = SlabTensor(D, 200_000)
    assert 1 < S.slab_rows < 61 and S._file_source() is None
    init = tk.hosvd(X, (5, 6, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        a = tk.hooi(X, (5, 6, 4), init=init, max_iter=3, tol=0)
        b = tk.hooi(D, (5, 6, 4), init=init, max_iter=3, tol=0, memory_limit=200_000)
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=1e-12)
    if store == "hdf5":
        f.close()
        from tuckerkit.cli import app
        from typer.testing import CliRunner

        res = CliRunner().invoke(app, ["decompose", str(tmp_path / "x.h5"), "--ranks", "5,6,4", "--memory-limit",
                                       "200KB", "--json", "-q", "-o", str(tmp_path / "o.npz")])
        assert res.exit_code == 0, res.output
        assert 1 <= tk.io.load_metadata(tmp_path / "o.npz")["slab_rows"] < 61
        res = CliRunner().invoke(app, ["decompose", str(tmp_path / "x.h5"), "--ranks", "5,6,4", "--memory-limit",
                                       "1GB", "--json", "-q", "-o", str(tmp_path / "p.npz")])  # fits: read whole
        assert res.exit_code == 0, res.output


def test_bad_out_of_core_inputs(tmp_path):
    """One-line errors naming what is wrong, for the new out-of-core entry points."""
    from tuckerkit.cli import app
    from typer.testing import CliRunner

    X = np.ones((6, 5, 4))
    with pytest.raises(ValueError, match=r"memory_limit='lots' is not a memory size; expected bytes or e.g. '4GB'"):
        tk.cp_als(X, 2, memory_limit="lots")
    with pytest.raises(tk.io.TensorFileError, match=r"does not exist"):
        tk.io.open_npy_dask(tmp_path / "missing.npy")
    (tmp_path / "bad.h5").write_bytes(b"not hdf5 at all")
    res = CliRunner().invoke(app, ["decompose", str(tmp_path / "bad.h5"), "--ranks", "2,2,2", "--memory-limit",
                                   "1KB", "-o", str(tmp_path / "o.npz")])
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert "is not a valid HDF5 file" in res.output and not (tmp_path / "o.npz").exists()
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["a"], f["b"] = X, X
    res = CliRunner().invoke(app, ["decompose", str(tmp_path / "two.h5"), "--ranks", "2,2,2", "--memory-limit",
                                   "1KB", "-o", str(tmp_path / "o.npz")])
    assert res.exit_code == 1
    assert res.output.strip().endswith("holds several arrays (a, b); choose one with --key / key=")


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_streamed_hooi_first_sweep_takes_the_start_projection(memmapped, monkeypatch):
    """Out of core, the default start's first (streamed) step projects the sweep's second half of the modes,
    so the first sweep takes that projection: one streamed pass instead of two; the answer is the in-memory
    one from the same start."""
    X, M = memmapped((61, 50, 40), (5, 6, 4))
    limit = 450_000
    passes = []
    real = SlabTensor.slabs

    def spy(self, *args, **kwargs):
        passes.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SlabTensor, "slabs", spy)
    pref = SlabTensor(M, limit).preferred_init((5, 6, 4))
    tk.st_hosvd(M, (5, 6, 4), memory_limit=limit, sketch=pref == "st_hosvd_sketch")
    start = len(passes)
    passes.clear()
    one = tk.hooi(M, (5, 6, 4), max_iter=1, tol=0, memory_limit=limit)
    assert len(passes) == start + 1
    passes.clear()
    two = tk.hooi(M, (5, 6, 4), max_iter=2, tol=0, memory_limit=limit)
    assert len(passes) == start + 1 + 2
    a = tk.hooi(X, (5, 6, 4), init=pref, max_iter=2, tol=0)
    np.testing.assert_allclose(two.fit_history, a.fit_history, rtol=0, atol=100 * np.finfo(X.dtype).eps)
    assert one.fit_history[0] == two.fit_history[0]


def test_a_complex_tensor_larger_than_the_limit_is_refused_naming_the_limit(tmp_path):
    np.save(tmp_path / "cx.npy", np.random.default_rng(0).random((20, 30, 40)) + 1j)
    M = np.load(tmp_path / "cx.npy", mmap_mode="r")
    assert tk.hooi(M, (3, 3, 3), memory_limit="1GB").core.dtype == np.complex128  # (fits: in memory)
    with pytest.raises(TypeError, match=r"^memory_limit= streams real tensors; X has dtype complex128 \(decompose a "
                                        r"complex tensor in memory, without memory_limit\)$"):
        tk.hooi(M, (3, 3, 3), memory_limit="100KB")  # ("data has dtype complex128; expected numbers" before)


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_a_streamed_memmap_is_read_as_the_caller_holds_it(tmp_path, how):
    """The plain file reads went by path: a file replaced after ``np.load(mmap_mode="r")`` was decomposed
    instead of the caller's array (fit 0.0025 for 0.9900), a removed one failed with a bare FileNotFoundError.
    Where the path no longer names the mapped file, the slabs are read through the mapping."""
    import os

    A = make_low_rank_tucker((60, 50, 40), (4, 4, 4), noise=0.01, random_state=0).data
    path = tmp_path / "x.npy"
    np.save(path, A)
    M = np.load(path, mmap_mode="r")
    ref = tk.hooi(A, (4, 4, 4), max_iter=3, tol=0)
    if how == "replaced":
        np.save(tmp_path / "new.npy", np.random.default_rng(5).standard_normal(A.shape))
        os.replace(tmp_path / "new.npy", path)
    else:
        os.remove(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        got = tk.hooi(M, (4, 4, 4), max_iter=3, tol=0, memory_limit="100KB")
    assert abs(got.fit - ref.fit) <= 1e-10


# ------------------------------------------------------------------ review of 2026-12-04 (out of core, Dask)
def test_memory_limit_streams_an_opened_file_and_refuses_a_second_limit(tmp_path):
    """memory_limit= on what open_tensor returned: an in-memory DenseTensor over the file's map streams it as
    the array would (it was read whole without a word); a SlabTensor opened with another limit is refused."""
    from tuckerkit.engine import as_operand

    X = make_low_rank_tucker((30, 20, 16), (3, 4, 2), noise=0.01, random_state=0).data
    p = tmp_path / "x.npy"
    np.save(p, X)
    init = tk.hosvd(X, (3, 4, 2))
    ref = tk.hooi(X, (3, 4, 2), init=init, max_iter=3, tol=0)
    with tuckerkit.io.open_tensor(p) as D:
        assert isinstance(as_operand(D, memory_limit="20KB"), SlabTensor)
        got = tk.hooi(D, (3, 4, 2), init=init, max_iter=3, tol=0, memory_limit="20KB")
    assert abs(got.fit - ref.fit) <= 1000 * np.finfo(np.float64).eps  # (the slabs' sums in another order)
    with tuckerkit.io.open_tensor(p, memory_limit="30KB") as S:
        assert tk.hooi(S, (3, 4, 2), init=init, max_iter=3, tol=0, memory_limit="30KB").n_iter == 3
        with pytest.raises(ValueError, match=r"^X already streams with memory_limit=30,000 bytes \(open_tensor's\); "
                                             r"memory_limit=10,000 differs: pass one of them$"):
            tk.hooi(S, (3, 4, 2), memory_limit="10KB")


def test_streaming_counts_the_dtype_computed_in_and_the_file_s():
    from tuckerkit.engine._slabs import streams

    shape = (100, 100, 10)  # 100,000 entries
    assert streams(shape, "int16", 500_000)  # (computed in float64: 800 KB)
    assert not streams(shape, "float32", 500_000)
    assert streams(shape, "float32", 500_000, source="float64")  # (read from 8 bytes an entry)
    X = np.zeros(shape, dtype=np.int16)
    S = SlabTensor(X, 400_000)
    assert S.dtype == np.float64 and S.slab_rows == 400_000 // (4 * 1000 * (8 + 2))


def test_npz_mat_and_sparse_files_refuse_memory_limit(tmp_path):
    X = np.ones((4, 5, 6))
    np.savez(tmp_path / "x.npz", X=X)
    with pytest.raises(ValueError, match=r"memory_limit streams .npy and .h5 files; .* is a .npz file, read whole"):
        tuckerkit.io.open_tensor(tmp_path / "x.npz", memory_limit="1KB")
    from tuckerkit.sparse import COOTensor

    COOTensor.from_dense(X).to_tns(tmp_path / "x.tns")
    with pytest.raises(ValueError, match=r"memory_limit streams dense files; .* holds a sparse tensor, read whole"):
        tuckerkit.io.open_tensor(tmp_path / "x.tns", memory_limit="1KB")


def test_open_npy_dask_notices_a_changed_file_and_checks_its_options(tmp_path):
    pytest.importorskip("dask")
    from tuckerkit.io import TensorFileError, open_npy_dask

    p = tmp_path / "r.npy"
    np.save(p, np.arange(120.0).reshape(6, 5, 4))
    D = open_npy_dask(p, chunk_bytes="160B")
    assert D.chunks[0] == (1,) * 6 and float(D.sum().compute()) == 7140.0
    for change in (np.arange(60.0).reshape(3, 5, 4), np.arange(120.0).reshape(6, 4, 5),
                   np.arange(240.0, dtype=np.float32).reshape(12, 5, 4)):
        np.save(p, change)
        with pytest.raises(TensorFileError, match=r"r.npy' changed since open_npy_dask opened it .*open it again$"):
            D.sum().compute()
    for bad, err, msg in ((0, ValueError, r"chunk_bytes=0 is not positive"),
                          (None, TypeError, r"chunk_bytes must be a number of bytes or a size such as '64MB'"),
                          ("1XB", ValueError, r"chunk_bytes='1XB' is not a memory size")):
        with pytest.raises(err, match=msg):
            open_npy_dask(p, chunk_bytes=bad)
    with pytest.raises(TypeError, match=r"^scheduler must be 'local', a scheduler address .*; received 5"):
        tuckerkit.io.open_tensor(p, scheduler=5)


def test_a_complex_hdf5_dataset_under_memory_limit_says_why(tmp_path):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f.create_dataset("c", data=np.ones((4, 5, 6)) * (1 + 1j))
    with pytest.raises(tuckerkit.io.TensorFileError, match=r"has complex dtype complex128; memory_limit streams "
                                                           r"real tensors"):
        tuckerkit.io.open_tensor(tmp_path / "c.h5", key="c", memory_limit="1KB")


def test_a_float32_tensor_streamed_from_disk_reports_the_residuals_fit(tmp_path):
    """Near an exact fit the fit from norms is rounding in float32: a streamed 40x41x42 tensor of ranks (3, 3, 3)
    at noise 1e-5 read an error of 3.6e-4 for a true 1.0e-5 (the same call in memory read the truth). The
    residual is now formed slab by slab in double precision there, as in memory."""
    rng = np.random.default_rng(0)
    G = rng.standard_normal((3, 3, 3))
    Us = [np.linalg.qr(rng.standard_normal((n, 3)))[0] for n in (40, 41, 42)]
    X = np.asarray(tk.multi_ttm(G, Us))
    X = (X + 1e-5 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(X.shape)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    seen = []
    op = tuckerkit.io.open_tensor(tmp_path / "x.npy", memory_limit=40000)
    T = tk.hooi(op, (3, 3, 3), callback=lambda s: seen.append(s.fit))
    err = T.relative_error(X)
    assert abs((1 - T.fit) - err) < 1e-7 * err and seen[-1] == T.fit
    S = tk.st_hosvd(tuckerkit.io.open_tensor(tmp_path / "x.npy", memory_limit=40000), (3, 3, 3))
    assert abs((1 - S.fit) - S.relative_error(X)) < 1e-7 * S.relative_error(X)


def test_streaming_an_array_like_never_scales_its_data_in_place():
    """Slabs of an array-like (not an ndarray) that were views of the caller's data were rescaled in place on
    every pass at extreme magnitudes: the caller's array zeroed at 1e30 (fit 0.0), made infinite at 1e-30."""

    class ArrayLike:
        def __init__(self, a):
            self.a, self.shape, self.dtype = a, a.shape, a.dtype

        def __getitem__(self, k):
            return self.a[k]

    X = np.random.default_rng(0).standard_normal((200, 30, 25)).astype(np.float32) * np.float32(1e30)
    keep = X.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        streamed = tk.hooi(ArrayLike(X), (4, 3, 3), memory_limit="300KB", max_iter=5, tol=0)
        ref = tk.hooi(X, (4, 3, 3), max_iter=5, tol=0)
    np.testing.assert_array_equal(X, keep)
    assert abs(streamed.fit - ref.fit) < 1e-5


def test_a_near_exact_streamed_fit_stays_within_the_memory_limit(tmp_path):
    """The residual fit formed slab by slab (a near-exact float32 fit) took HOOI to 1.57x its memory limit."""
    rng = np.random.default_rng(2)
    U = [np.linalg.qr(rng.standard_normal((n, 5)))[0] for n in (400, 60, 50)]
    X = np.einsum("abc,ia,jb,kc->ijk", rng.standard_normal((5, 5, 5)), *U).astype(np.float32)
    np.save(tmp_path / "exact.npy", X)
    M = np.load(tmp_path / "exact.npy", mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        tk.hooi(M, (5, 5, 5), memory_limit=1_000_000, max_iter=3)  # (compiled, cached)
        tk.engine.release_memory()
        tracemalloc.start()
        model = tk.hooi(M, (5, 5, 5), memory_limit=1_000_000, max_iter=3)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert model.fit > 0.9999 and peak < 1_000_000, peak


def test_a_streamed_float32_rank_choice_takes_its_grams_in_double_precision(tmp_path):
    """As in memory (the docstrings' promise): the float32 Grams' rounding chose ranks (4, 3, 7) and (65, 7, 6)
    for an exact (4, 3, 3) tensor streamed from disk."""
    rng = np.random.default_rng(0)
    G = rng.standard_normal((4, 3, 3))
    U = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip((200, 30, 25), (4, 3, 3), strict=True)]
    X = np.einsum("abc,ia,jb,kc->ijk", G, *U).astype(np.float32)
    np.save(tmp_path / "t32.npy", X)
    M = np.load(tmp_path / "t32.npy", mmap_mode="r")
    assert tk.st_hosvd(X, max_error=3e-4).ranks == (4, 3, 3)
    assert tk.st_hosvd(M, max_error=3e-4, memory_limit="300KB").ranks == (4, 3, 3)
    assert tk.hosvd(SlabTensor(M, "700KB"), max_error=3e-4).ranks == (4, 3, 3)
    S = SlabTensor(M, "400KB")
    for n in range(3):
        ref = np.tensordot(X.astype(np.float64), X.astype(np.float64), axes=([m for m in range(3) if m != n],) * 2)
        np.testing.assert_allclose(S.wide_gram(n), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_an_explicit_st_hosvd_order_is_kept_when_streaming():
    """Streamed, the given order (1, 0, 2) was replaced by (2, 1, 0) without a word (another fit)."""
    X = np.random.default_rng(0).standard_normal((200, 30, 25))
    ref = tk.st_hosvd(X, (4, 3, 3), order=(1, 0, 2))
    got = tk.st_hosvd(X, (4, 3, 3), order=(1, 0, 2), memory_limit="300KB")
    assert abs(got.fit - ref.fit) < 1e-12
    auto = tk.st_hosvd(X, (4, 3, 3), memory_limit="300KB")  # ("auto" streamed: the shortest mode first)
    assert abs(auto.fit - tk.st_hosvd(X, (4, 3, 3), order=(2, 1, 0)).fit) < 1e-12


def test_a_closed_streamed_file_is_named_as_such(tmp_path):
    """After open_tensor's with block, a streamed HDF5 tensor failed in h5py's words (an invalid dataset
    identifier, a dataspace error)."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f["x"] = np.random.default_rng(0).standard_normal((60, 30, 25))
    with tuckerkit.io.open_tensor(tmp_path / "c.h5", memory_limit="100KB") as X:
        assert X.streamed
    for fn in (lambda: tk.hooi(X, (2, 2, 2)), lambda: tk.ttm(X, np.ones((2, 30)), 1)):
        with pytest.raises(ValueError, match=r"^this tensor's file was closed \(the with block of open_tensor "
                                             r"ended, or close\(\) was called\); open it again to read it$"):
            fn()


def test_a_file_rewritten_during_a_streamed_run_is_refused(tmp_path):
    """A .npy rewritten in place between passes (the same inode) gave a fit for the new contents (0.99999 where
    the original's was -581), an HDF5 file truncated mid-run read zeros: the file's size, time and identity are
    checked at every pass. Float16 data streamed are computed in float32, as in memory (float64 before)."""
    X = np.random.default_rng(0).standard_normal((200, 30, 25))
    np.save(tmp_path / "m.npy", X)
    M = np.load(tmp_path / "m.npy", mmap_mode="r")
    seen = []

    def rewrite(state):
        if not seen:
            seen.append(1)
            with open(tmp_path / "m.npy", "r+b") as f:  # (another writer, the same file)
                f.seek(-8, 2)
                f.write(np.float64(7.0).tobytes())
            os.utime(tmp_path / "m.npy", ns=(1, 1))

    with pytest.raises(ValueError, match=r"changed while it was decomposed \(its size, time or identity\); a tensor "
                                         r"read in slabs must stay as it is during the call$"):
        tk.hooi(M, (3, 3, 3), memory_limit="300KB", max_iter=3, tol=0, callback=rewrite)
    np.save(tmp_path / "h.npy", X.astype(np.float16))
    assert SlabTensor(np.load(tmp_path / "h.npy", mmap_mode="r"), "200KB").dtype == np.float32
