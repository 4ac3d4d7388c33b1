"""Sparse tensors: COO/CSF construction, CSF MTTKRP against the dense engine, sparse CP-ALS == dense CP-ALS."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse

import tuckerkit as tk
from tuckerkit.sparse import COOTensor, CSFTensor, is_sparse


def random_sparse(rng, shape, density=0.2, dtype=np.float64, empty_slices=True):
    D = rng.standard_normal(shape).astype(dtype)
    D[rng.random(shape) > density] = 0
    if empty_slices:
        D[0] = 0  # an empty slice in mode 0
        D[(slice(None), -1)] = 0  # and one in mode 1
    return D


@pytest.mark.parametrize("csf", ["all", "two", "one"])
@pytest.mark.parametrize("shape", [(6, 7, 8), (5, 4, 6, 3), (3, 4, 2, 3, 4), (1, 5, 6), (7, 1, 1)])
def test_mttkrp_matches_dense_every_mode(shape, dtype, csf, rng):
    D = random_sparse(rng, shape, dtype=dtype, empty_slices=min(shape) > 1)
    X = COOTensor.from_dense(D)
    assert X.plan(csf=csf).kind == csf
    for R in (1, 4):
        fs = [rng.standard_normal((s, R)).astype(dtype) for s in shape]
        for n in range(len(shape)):
            got = tk.mttkrp(X, fs, n)
            ref = tk.mttkrp(D, fs, n)
            assert got.dtype == dtype
            np.testing.assert_allclose(got, ref, rtol=50 * np.finfo(dtype).eps, atol=50 * np.finfo(dtype).eps * max(
                1.0, float(np.abs(ref).max())))


def test_coo_sums_duplicates_drops_zeros_and_validates():
    X = COOTensor([[0, 1, 2], [0, 1, 2], [1, 0, 0], [1, 1, 1]], [1.0, 2.0, 5.0, 0.0], shape=(2, 2, 3))
    assert X.nnz == 2 and X.to_dense()[0, 1, 2] == 3.0 and X.to_dense()[1, 0, 0] == 5.0
    assert X.coords.dtype == np.int32
    assert X.density == pytest.approx(2 / 12)
    assert X.norm() == pytest.approx(np.sqrt(9 + 25))
    with pytest.raises(ValueError, match=r"coords\[:, 1\] spans 0..5 but mode 1 has size 3"):
        COOTensor([[0, 0], [0, 5]], [1.0, 2.0], shape=(2, 3))
    with pytest.raises(ValueError, match=r"values contains 1 NaN or infinite value"):
        COOTensor([[0, 0]], [np.nan], shape=(2, 3))
    with pytest.raises(ValueError, match=r"values must have shape \(2,\) to match coords"):
        COOTensor([[0, 0], [1, 1]], [1.0], shape=(2, 3))
    with pytest.raises(ValueError, match=r"to_dense\(\) would allocate 1e\+12 entries"):
        COOTensor([[0, 0, 0]], [1.0], shape=(10_000, 10_000, 10_000)).to_dense()


def test_builders_scipy_and_tns(tmp_path, rng):
    M = scipy.sparse.random(20, 30, density=0.1, random_state=0, format="csr")
    X = COOTensor.from_scipy(M)
    np.testing.assert_array_equal(X.to_dense(), M.toarray())
    p = tmp_path / "t.tns"
    p.write_text("# comment\n1 2 3 1.5\n\n2 1 1 2.5e0\n1 2 3 1.0\n")
    T = COOTensor.from_tns(p)
    assert T.shape == (2, 2, 3) and T.nnz == 2 and T.to_dense()[0, 1, 2] == 2.5


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0), None])
def test_csf_round_trip_and_levels(order, rng):
    D = random_sparse(rng, (6, 7, 8))
    X = COOTensor.from_dense(D)
    C = CSFTensor(X, order)
    np.testing.assert_array_equal(C.to_coo().to_dense(), D)
    assert len(C.idx[-1]) == X.nnz == C.nnz
    for lev in range(2):
        assert C.pos[lev][0] == 0 and C.pos[lev][-1] == len(C.idx[lev + 1])
        assert np.all(np.diff(C.pos[lev]) >= 1)  # every node has a child
    assert C.nbytes > 0 and "CSFTensor" in repr(C)


def test_sparse_cp_als_equals_dense_cp_als(rng):
    D = random_sparse(rng, (9, 10, 11), density=0.3)
    X = COOTensor.from_dense(D)
    init = tk.CPTensor(np.ones(3), tuple(rng.standard_normal((s, 3)) for s in D.shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        a = tk.cp_als(X, 3, init=init, max_iter=8, tol=0.0)
        b = tk.cp_als(D, 3, init=init, max_iter=8, tol=0.0)
    assert a.fit == pytest.approx(b.fit, abs=1e-12)
    np.testing.assert_allclose(a.to_dense(), b.to_dense(), atol=1e-10 * np.abs(D).max())
    assert is_sparse(X) and not is_sparse(D)


def test_sparse_cp_als_svd_init_and_planted_recovery(rng):
    shape, R = (30, 40, 50), 3
    Us = [rng.random((s, R)) for s in shape]
    D = np.asarray(tk.CPTensor(np.ones(R), tuple(Us)).to_dense())
    D[rng.random(shape) > 0.5] = 0  # a sparse pattern of a low-rank tensor is not low rank; fit stays < 1
    X = COOTensor.from_dense(D)
    cp = tk.cp_als(X, R, random_state=0, max_iter=200, tol=1e-9)
    assert abs(cp.fit - (1 - cp.relative_error(D))) < 1e-8


def test_sparse_cp_never_densifies(rng):
    shape = (10_000, 10_000, 10_000)  # 1e12 logical entries
    nnz = 100_000
    coords = rng.integers(0, 10_000, size=(nnz, 3))
    X = COOTensor(coords, rng.random(nnz), shape)
    init = tk.CPTensor(np.ones(4), tuple(rng.random((s, 4)) for s in shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        tk.cp_als(X, 4, init=init, max_iter=1, tol=0.0)  # compile and build the CSF plan outside the trace
        tracemalloc.start()
        cp = tk.cp_als(X, 4, init=init, max_iter=3, tol=0.0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64 * 2**20  # far below the 8 TB a dense tensor would need
    assert np.isfinite(cp.fit)


def test_sparse_mttkrp_bad_factors(rng):
    X = COOTensor.from_dense(random_sparse(rng, (4, 5, 6)))
    with pytest.raises(ValueError, match=r"factors\[2\] has 7 rows but mode 2 of X has size 6; expected a matrix "
                                         r"of shape \(6, R\)"):
        tk.mttkrp(X, [None, np.ones((5, 2)), np.ones((7, 2))], 0)
    with pytest.raises(ValueError, match=r"factors has 2 matrices; expected one per mode of X \(3\)"):
        tk.mttkrp(X, [None, np.ones((5, 2))], 0)


def test_sparse_benchmark_generator_is_deterministic_and_covers_every_slice():
    from tuckerkit.datasets._sparse_bench import sparse_benchmark_coords

    c1, v1 = sparse_benchmark_coords((50, 60, 70), 3000, True, 7)
    c2, v2 = sparse_benchmark_coords((50, 60, 70), 3000, True, 7)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(v1, v2)
    assert c1.shape == (3000, 3) and len({tuple(r) for r in c1}) == 3000  # distinct coordinates
    for m, d in enumerate((50, 60, 70)):
        assert np.bincount(c1[:, m], minlength=d).min() >= 1  # no empty slice
    counts = np.bincount(c1[:, 0], minlength=50)
    assert counts.max() > 5 * np.median(counts)  # power-law slices
    with pytest.raises(ValueError, match=r"name='big' is not valid; expected one of 'skew3d', 'skew4d', 'unif3d', "
                                         r"'skew5d', 'skew6d'"):
        from tuckerkit.datasets import make_sparse_benchmark

        make_sparse_benchmark("big")


def test_tns_write_read_round_trip_fast_path(tmp_path, rng):
    from tuckerkit.io import read_tns, write_tns

    coords = np.stack([rng.integers(0, n, 5000) for n in (30, 40, 50)], axis=1)
    values = rng.standard_normal(5000)
    write_tns(tmp_path / "r.tns", coords, values)
    c, v, shape = read_tns(tmp_path / "r.tns")
    np.testing.assert_array_equal(c, coords)
    np.testing.assert_array_equal(v, values)  # %.17g round-trips float64 exactly
    assert shape == tuple(int(m) + 1 for m in coords.max(axis=0))
    _, _, shape2 = read_tns(tmp_path / "r.tns", shape=(30, 40, 50))
    assert shape2 == (30, 40, 50)


def test_sparse_cp_reports_its_per_mode_plan():
    from tuckerkit.datasets import make_sparse_tensor

    from tuckerkit.sparse import SparsePlan

    X = make_sparse_tensor((30, 20, 10), 400, random_state=0).data
    with pytest.warns(tk.ConvergenceWarning, match="max_iter=3"):
        res = tk.cp_als(X, 3, random_state=0, max_iter=3, tol=0)
    (plan,) = res.plans
    assert isinstance(plan, SparsePlan) and plan.kind == "all" and plan is X.plan()
    assert [o[0] for o in plan.orders] == [0, 1, 2] and plan.bytes > 0
    assert "mode 2: CSF order [2, 1, 0] (root kernel)" in plan.explain()


@pytest.mark.parametrize("csf", ["all", "one"])
@pytest.mark.parametrize("shape", [(6, 7, 8), (5, 4, 6, 3), (3, 4, 2, 3, 4), (1, 5, 6), (7, 1, 1), (9, 8)])
def test_ttmc_matches_dense_every_mode(shape, dtype, csf, rng):
    D = random_sparse(rng, shape, dtype=dtype, empty_slices=min(shape) > 1)
    X = COOTensor.from_dense(D)
    X.plan(csf=csf)
    for ranks in ([1] * len(shape), [min(s, r) for s, r in zip(shape, (2, 3, 1, 2, 3), strict=False)]):
        fs = [rng.standard_normal((s, r)).astype(dtype) for s, r in zip(shape, ranks, strict=True)]
        for n in range(len(shape)):
            got = tk.engine.ttmc(X, fs, n)
            ref = tk.multi_ttm(D, fs, transpose=True, skip=n)
            assert got.shape == ref.shape and got.dtype == dtype
            np.testing.assert_allclose(got, ref, rtol=50 * np.finfo(dtype).eps, atol=50 * np.finfo(dtype).eps * max(
                1.0, float(np.abs(ref).max())))


def test_ttmc_int64_indices_duplicates_and_csf_input(rng):
    coords = np.array([[0, 1, 2], [0, 1, 2], [3, 0, 1], [2, 2, 0]], dtype=np.int64)
    X = COOTensor(coords, [1.0, 2.0, -1.0, 4.0], shape=(4, 3, 3))  # the duplicate adds up to 3.0
    D = X.to_dense()
    assert D[0, 1, 2] == 3.0
    fs = [rng.standard_normal((s, 2)) for s in X.shape]
    for T in (X, CSFTensor(X, (2, 0, 1))):
        for n in range(3):
            np.testing.assert_allclose(tk.engine.ttmc(T, fs, n), tk.multi_ttm(D, fs, transpose=True, skip=n),
                                       rtol=1e-13, atol=1e-13)


def test_sparse_multi_ttm_on_any_modes_equals_dense(rng):
    """All modes but one (the ttmc kernel), all modes (ttmc then one dense TTM), fewer modes (COO results, no
    densifying), transposed or not: every form equals the dense computation."""
    D = random_sparse(rng, (4, 5, 6))
    X = COOTensor.from_dense(D)
    fs = [rng.standard_normal((s, 2)) for s in X.shape]
    tol = dict(rtol=0, atol=50 * np.finfo(np.float64).eps * np.abs(D).sum())
    np.testing.assert_allclose(tk.multi_ttm(X, [U.T for U in fs], skip=0), tk.multi_ttm(D, [U.T for U in fs], skip=0),
                               **tol)
    core = tk.multi_ttm(X, fs, transpose=True)
    assert isinstance(core, np.ndarray) and core.shape == (2, 2, 2)
    np.testing.assert_allclose(core, tk.multi_ttm(D, fs, transpose=True), **tol)
    part = tk.multi_ttm(X, [fs[1]], modes=[1], transpose=True)
    assert isinstance(part, COOTensor) and part.shape == (4, 2, 6)
    np.testing.assert_allclose(part.to_dense(), tk.ttm(D, fs[1], 1, transpose=True), **tol)
    one = tk.ttm(CSFTensor(X, (2, 0, 1)), fs[2].T, 2)
    assert isinstance(one, COOTensor)
    np.testing.assert_allclose(one.to_dense(), tk.ttm(D, fs[2].T, 2), **tol)
    with pytest.raises(ValueError, match=r"matrices\[2\] has shape \(5, 2\) but mode 2 of X has size 6"):
        tk.multi_ttm(X, [fs[0], fs[1], fs[1]], transpose=True, skip=0)
    with pytest.raises(ValueError, match=r"out= applies to dense arrays; a COOTensor computes its own result"):
        tk.ttm(X, fs[0], 0, transpose=True, out=np.empty((2, 5, 6)))


@pytest.mark.parametrize("shape", [(9, 10, 11), (6, 7, 5, 4)])
def test_sparse_hooi_equals_dense_hooi(shape, rng):
    D = random_sparse(rng, shape, density=0.3)
    X = COOTensor.from_dense(D)
    ranks = [3] * len(shape)
    init = tk.hosvd(D, ranks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        a = tk.hooi(X, ranks, init=init, max_iter=6, tol=0.0)
        b = tk.hooi(D, ranks, init=init, max_iter=6, tol=0.0)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.to_dense(), b.to_dense(), atol=1e-10 * np.abs(D).max())
    for U in a.factors:
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-12)
    assert a.passes_per_iteration == len(shape) and a.plans[0] is X.plan()


def test_sparse_hooi_default_init_fits_like_dense(rng):
    D = random_sparse(rng, (20, 25, 30), density=0.2)
    X = COOTensor.from_dense(D)
    a = tk.hooi(X, (4, 4, 4), random_state=0)
    b = tk.hooi(D, (4, 4, 4))
    assert a.converged and np.all(np.diff(a.fit_history) >= -1e-12)
    assert abs(a.fit - (1 - a.relative_error(D))) < 1e-10
    assert a.fit == pytest.approx(b.fit, abs=2e-3)  # HOOI's local optimum from different starts


def test_sparse_hooi_never_densifies(rng):
    shape = (10_000, 10_000, 10_000)  # 1e12 logical entries
    nnz = 100_000
    X = COOTensor(rng.integers(0, 10_000, size=(nnz, 3)), rng.random(nnz), shape)
    init = tk.TuckerTensor(np.zeros((5, 5, 5)), tuple(np.linalg.qr(rng.random((s, 5)))[0] for s in shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        tk.hooi(X, 5, init=init, max_iter=1, tol=0.0)  # compile and build the CSF plan outside the trace
        tracemalloc.start()
        T = tk.hooi(X, 5, init=init, max_iter=2, tol=0.0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the projections are 10_000 x 25 per mode (2 MB); a dense tensor would be 8 TB
    assert peak < 64 * 2**20
    assert 0 < T.fit < 1


def test_plan_kinds_memory_and_assignment(rng):
    X = COOTensor.from_dense(random_sparse(rng, (9, 5, 7, 6), density=0.4))
    plans = {k: X.plan(csf=k) for k in ("all", "two", "one")}
    assert plans["all"].bytes > plans["two"].bytes > plans["one"].bytes
    one = plans["one"]
    assert one.orders == ((1, 3, 2, 0),)  # short modes first
    assert [one.kernel(n) for n in range(4)] == ["leaf", "root", "internal", "internal"]
    two = plans["two"]
    assert two.orders[1][0] == 0 and two.kernel(0) == "root" and two.kernel(1) == "root"
    assert all(plans["all"].kernel(n) == "root" for n in range(4))
    assert "mode 2: CSF order [1, 3, 2, 0] (internal kernel)" in one.explain()


def test_auto_plan_follows_the_memory_budget(rng):
    from tuckerkit.sparse._mttkrp import _estimate_tree_bytes

    X = COOTensor.from_dense(random_sparse(rng, (9, 5, 7), density=0.4))
    one = _estimate_tree_bytes(X)
    assert X.plan(memory_budget=3 * one).kind == "all"
    assert X.plan(memory_budget=3 * one - 1).kind == "two"
    assert X.plan(memory_budget=2 * one - 1).kind == "one"
    assert "exceed" in X.plan().reason and X.plan().bytes <= one
    assert X.plan(csf="auto").kind == "all"  # the default budget (a quarter of the free memory) fits
    with pytest.raises(ValueError, match=r"csf='three' is not valid; expected 'auto', 'all', 'two' or 'one'"):
        X.plan(csf="three")


@pytest.mark.parametrize("csf", ["two", "one"])
def test_sparse_cp_als_same_on_every_plan(csf, rng):
    D = random_sparse(rng, (12, 9, 10), density=0.3)
    init = tk.CPTensor(np.ones(3), tuple(rng.standard_normal((s, 3)) for s in D.shape))
    X, Y = COOTensor.from_dense(D), COOTensor.from_dense(D)
    Y.plan(csf=csf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        a = tk.cp_als(X, 3, init=init, max_iter=5, tol=0.0)
        b = tk.cp_als(Y, 3, init=init, max_iter=5, tol=0.0)
    np.testing.assert_allclose(a.fit_history, b.fit_history, rtol=0, atol=1e-12)
    assert b.plans[0].kind == csf


# ------------------------------------------------------------------------------------------------------------
# the sparse review of stop 101: random factors for ranks ARPACK cannot take, a sparse core, read-only input,
# astype without checks, memory_limit ignored
# ------------------------------------------------------------------------------------------------------------
def _few_nonzeros():
    D = np.zeros((3, 1, 4))
    D[0, 0] = [1, 0, 2, 0]
    D[2, 0] = [0, 3, 0, 1]
    rng = np.random.default_rng(0)
    Dd = rng.random((6, 7, 8)) * (rng.random((6, 7, 8)) < 0.3)
    return [(D, (2, 1, 2)), (Dd, (2, 2, 4)), (Dd, (6, 7, 8)), (Dd, (1, 1, 1))]


@pytest.mark.parametrize("method", ["hosvd", "st_hosvd"])
@pytest.mark.parametrize("case", range(4))
def test_sparse_hosvd_at_ranks_arpack_cannot_take_matches_dense(method, case):
    """A mode of size 1, a rank equal to the product of the others, full ranks: the sparse call returned random
    factors and a fit of 0 where the dense one read 1.0 (random columns stood in for ARPACK)."""
    D, ranks = _few_nonzeros()[case]
    dense = getattr(tk, method)(D, ranks)
    sparse = getattr(tk, method)(COOTensor.from_dense(D), ranks)
    true = sparse.relative_error(D)
    assert abs(true - dense.relative_error(D)) <= 1e-12
    assert abs((1.0 - sparse.fit) - true) <= 1e-7  # (from norms: sqrt(eps) where the error is 0)
    assert type(sparse.core) is np.ndarray and not sparse.core.flags.writeable
    for U in sparse.factors:
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-13)


def test_a_sparse_st_hosvd_result_saves_and_converts(tmp_path):
    D, ranks = _few_nonzeros()[0]
    T = tk.st_hosvd(COOTensor.from_dense(D), ranks)  # (its core was a COOTensor: unsaveable, no to_pyttb)
    back = tk.io.load_result(tk.io.save_result(tmp_path / "t.npz", T))
    np.testing.assert_array_equal(back.core, T.core)
    assert T.to_pyttb().core.shape == ranks


def test_read_only_coordinates_and_values_are_taken(tmp_path):
    np.save(tmp_path / "v.npy", np.array([1.0, 2.0]))
    values = np.load(tmp_path / "v.npy", mmap_mode="r")  # (numba's TypingError: a kernel typed for writeable)
    coords = np.array([[0, 1], [1, 0]], dtype=np.int32)
    coords.setflags(write=False)
    X = COOTensor(coords, values, (2, 2))
    np.testing.assert_array_equal(X.to_dense(), [[0.0, 1.0], [2.0, 0.0]])
    assert np.array_equal(np.load(tmp_path / "v.npy"), [1.0, 2.0])


def test_astype_keeps_the_invariants():
    Z = COOTensor([[0, 0], [1, 1]], [1e-300, 0.4], (2, 2))
    assert Z.astype(np.float32).nnz == 1  # (the value the cast made zero was kept as an explicit zero)
    np.testing.assert_array_equal(Z.astype(np.float32).values, np.float32([0.4]))
    with pytest.raises(TypeError, match=r"^astype: dtype int64 is not supported; expected float32 or float64$"):
        Z.astype(np.int64)
    with pytest.raises(ValueError, match=r"^X has values beyond float32's range \(largest magnitude 1e\+300"):
        COOTensor([[0, 0]], [1e300], (2, 2)).astype(np.float32)  # (an overflow named as such, not as NaN)


@pytest.mark.parametrize("fn", [tk.cp_als, tk.hooi])
def test_memory_limit_on_a_sparse_tensor_is_refused(fn):
    X = COOTensor.from_dense(_few_nonzeros()[1][0])
    with pytest.raises(ValueError, match=r"^memory_limit='1KB' streams dense tensors \(arrays, memory maps, HDF5 "
                                         r"datasets\); X is a sparse COOTensor"):
        fn(X, 2, memory_limit="1KB")


def test_an_empty_tensor_round_trips_through_tns_with_its_shape(tmp_path):
    path = tmp_path / "e.tns"
    COOTensor(np.empty((0, 3), int), [], (4, 5, 6)).to_tns(path)
    back = COOTensor.from_tns(path, shape=(4, 5, 6))  # (it was refused: "holds no nonzeros")
    assert back.shape == (4, 5, 6) and back.nnz == 0
    with pytest.raises(ValueError, match=r"holds no nonzeros \(only comments or blank lines\); pass its shape to "
                                         r"read it as an empty tensor$"):
        COOTensor.from_tns(path)


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda X: CSFTensor(X, (0.9, 1, 2)), TypeError, r"^order\[0\] must be an integer; received 0.9 \(float\)$"),
    (lambda X: COOTensor([[-1, 0]], [1.0]), ValueError, r"^coords\[:, 0\] has the negative index -1; expected"),
    (lambda X: COOTensor(np.empty((1, 0), int), [1.0], ()), ValueError,
     r"^coords must be a 2-D array of shape \(nnz, N\), N >= 1; received shape \(1, 0\)$"),
    (lambda X: COOTensor.from_scipy(np.eye(2)), TypeError, r"^from_scipy: M is an array of shape \(2, 2\)"),
    (lambda X: COOTensor.from_dense(3.0), ValueError, r"^from_dense: X is a 0-d array \(float64\)"),
    (lambda X: COOTensor([[True, False]], [1.0], (2, 2)), TypeError, r"received dtype bool$"),
])
def test_malformed_sparse_input_is_named_in_one_line(call, exc, match):
    """These were truncated (a float order), misnamed ("an empty mode" for a negative index) or numpy's and
    Python's own messages."""
    X = COOTensor.from_dense(np.random.default_rng(0).random((3, 4, 5)))
    with pytest.raises(exc, match=match):
        call(X)


def test_auto_plan_does_not_move_with_the_free_memory(monkeypatch):
    """csf="auto"'s budget is a quarter of the physical memory, not of the free memory: the kinds sum in different
    orders, and with the free memory under 300 MB a 1M-nonzero tensor took 'two' instead of 'all' (other bits)."""
    import os

    from tuckerkit.sparse._mttkrp import _default_budget

    rng = np.random.default_rng(0)
    shape = (300, 250, 200)
    coords = np.stack([rng.integers(0, n, 200_000) for n in shape], 1)
    vals = rng.standard_normal(200_000)
    free_then = COOTensor(coords, vals, shape).plan()
    real = os.sysconf
    monkeypatch.setattr(os, "sysconf", lambda n: 1 if n == "SC_AVPHYS_PAGES" else real(n))
    assert _default_budget() == real("SC_PHYS_PAGES") * real("SC_PAGE_SIZE") // 4
    busy = COOTensor(coords, vals, shape).plan()
    assert busy.kind == free_then.kind == "all"


def test_values_edited_after_a_run_are_read_by_the_next(rng):
    """The CSF trees hold copies of the values: an in-place edit (or another array assigned) after a run left the
    next run on the old values (a fit of 0.0606 for 0.2721)."""
    shape = (20, 15, 10)
    coords = np.stack([rng.integers(0, n, 600) for n in shape], 1)
    X = COOTensor(coords, rng.standard_normal(600), shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        tk.cp_als(X, 3, random_state=0, max_iter=5)
        tk.hooi(X, 2, max_iter=2)
        X._drop_coords()  # (as a sparse CP-ALS may leave it: rebuilt from a tree before the plan goes)
        X.values[:] = np.abs(X.values) * 2.0
        fresh = COOTensor(X.coords.copy(), X.values.copy(), shape)
        for run in (lambda T: tk.cp_als(T, 3, random_state=0, max_iter=5), lambda T: tk.hooi(T, 2, max_iter=2)):
            assert run(X).fit == run(fresh).fit
        X.values = -X.values  # (another array)
        fresh = COOTensor(X.coords.copy(), X.values.copy(), shape)
        assert tk.cp_als(X, 3, random_state=0, max_iter=5).fit == tk.cp_als(fresh, 3, random_state=0, max_iter=5).fit
        plan = X.plan()
        tk.cp_als(X, 3, random_state=0, max_iter=2)
        assert X.plan() is plan  # (unchanged values: the cached plan is kept)


def test_plan_with_iterations_explains_this_choice_when_the_kind_is_cached():
    """A cached plan of the same kind came back with its old reason (50 iterations assumed) when asked with
    iterations=20."""
    from tuckerkit.datasets import make_sparse_tensor

    X = make_sparse_tensor((300, 200, 100), 20000, distribution="power_law", random_state=0).data
    first = X.plan()
    assert "50 iterations assumed" in first.explain()
    again = X.plan(csf="auto", iterations=20)
    assert again.kind == first.kind
    assert "build + 20 iterations cost" in again.explain() and "50 iterations" not in again.explain()
    assert X.plan() is again  # (kept: the next call without arguments returns it)


def test_sketched_st_hosvd_and_byte_swapped_input_on_sparse_tensors(rng):
    """st_hosvd(sketch=True) on a sparse tensor took the norm of its sparse projection as a dense array (a
    TypeError); byte-swapped values were refused as not float64, byte-swapped coordinates a numba TypingError."""
    A = rng.standard_normal((15, 13, 11))
    X = COOTensor.from_dense(A)
    assert tk.st_hosvd(X, [3, 3, 3], sketch=True).fit == pytest.approx(tk.st_hosvd(A, [3, 3, 3], sketch=True).fit,
                                                                        abs=1e-10)
    B = np.arange(1.0, 25.0).reshape(2, 3, 4)
    for Y in (COOTensor.from_dense(B.astype(">f8")), COOTensor(np.argwhere(B).astype(">i8"), B.ravel(), B.shape)):
        assert Y.values.dtype == np.float64 and Y.values.dtype.isnative and Y.coords.dtype.isnative
        np.testing.assert_array_equal(Y.to_dense(), B)


def test_engine_calls_after_values_edited_read_the_new_values():
    """tk.mttkrp / ttm / multi_ttm / ttmc / gram on a COO tensor whose values were edited in place (or replaced)
    after its trees were built: every mode's result equals einsum on the new dense tensor (the tree in the
    tensor's own order shares the values, the others had the old copies)."""
    from tuckerkit.engine import gram, ttmc

    shape = (5, 10, 20)
    rng = np.random.default_rng(0)
    lin = rng.choice(1000, 100, replace=False)
    X = COOTensor(np.stack(np.unravel_index(lin, shape), 1), rng.random(100), shape)
    F = [rng.random((s, 3)) for s in shape]
    for n in range(3):
        tk.mttkrp(X, F, n)  # (the trees built and cached)
    for edit in ("in place", "assigned"):
        if edit == "in place":
            X.values *= 2
        else:
            X.values = X.values * 3
        D = X.to_dense()
        tol = 64 * np.finfo(np.float64).eps * np.abs(D).sum()
        for n in range(3):
            others = [m for m in range(3) if m != n]
            ref = np.einsum(f"ijk,{'ijk'[others[0]]}r,{'ijk'[others[1]]}r->{'ijk'[n]}r", D, F[others[0]], F[others[1]])
            np.testing.assert_allclose(tk.mttkrp(X, F, n), ref, rtol=0, atol=tol)
            np.testing.assert_allclose(np.asarray(ttmc(X, F, n)), tk.multi_ttm(D, F, skip=n, transpose=True),
                                       rtol=0, atol=tol)
            Dn = np.moveaxis(D, n, 0).reshape(shape[n], -1)
            np.testing.assert_allclose(np.asarray(gram(X, n)), Dn @ Dn.T, rtol=0, atol=tol * np.abs(D).max())
        np.testing.assert_allclose(np.asarray(tk.ttm(X, F[1], 1, transpose=True).to_dense()),
                                   tk.ttm(D, F[1], 1, transpose=True), rtol=0, atol=tol)


def test_tns_float32_read_refuses_values_beyond_its_range(tmp_path):
    p = tmp_path / "big.tns"
    p.write_text("1 1 1 1e39\n2 2 2 1\n2 1 2 3\n")
    with pytest.raises(ValueError, match=r"value 1e\+39 \(nonzero \d\) is outside the range of float32 .*read it "
                                         r"as float64"):
        COOTensor.from_tns(p, dtype=np.float32)
    assert COOTensor.from_tns(p).values.max() == 1e39  # (float64 holds it)


def test_pydata_sparse_arrays_in_every_format_and_their_fill_value():
    sparse = pytest.importorskip("sparse")
    D = np.zeros((4, 3, 2))
    D[0, 1, 1], D[3, 2, 0], D[2, 0, 1] = 1.5, -2.0, 4.0
    S = sparse.COO.from_numpy(D)
    for form in (S, sparse.GCXS(S), sparse.DOK(S)):
        np.testing.assert_array_equal(COOTensor.from_sparse(form).to_dense(), D)
    with pytest.raises(ValueError, match=r"from_sparse: S has fill_value=5.0; expected 0"):
        COOTensor.from_sparse(sparse.COO(np.array([[0], [0]]), np.array([1.0]), shape=(2, 2), fill_value=5.0))
    # straight into the engine and the decompositions, as a COO tensor
    F = [np.ones((n, 2)) for n in D.shape]
    np.testing.assert_array_equal(tk.mttkrp(S, F, 0), tk.mttkrp(D, F, 0))
    a, b = tk.cp_als(S, 2, random_state=0), tk.cp_als(COOTensor.from_dense(D), 2, random_state=0)
    assert a.fit == b.fit


def test_scipy_nd_coo_array():
    import scipy.sparse as sp

    if not hasattr(sp, "coo_array"):
        pytest.skip("no coo_array")
    D = np.zeros((3, 2, 4))
    D[1, 0, 3], D[2, 1, 0] = 2.0, 3.0
    try:
        M = sp.coo_array(D)
    except (ValueError, TypeError):
        pytest.skip("this scipy's coo_array is 2-D only")
    np.testing.assert_array_equal(COOTensor.from_scipy(M).to_dense(), D)


def test_plan_options_are_checked_in_one_line():
    X = COOTensor.from_dense(np.arange(24.0).reshape(2, 3, 4))
    assert X.plan(memory_budget="1GB").kind in ("all", "two", "one")
    for bad, err, msg in ((dict(memory_budget=-5), ValueError, r"memory_budget=-5 is not positive; expected a "
                                                               r"memory size"),
                          (dict(memory_budget=float("nan")), ValueError, r"memory_budget=nan is not a memory size"),
                          (dict(iterations=True), ValueError, r"iterations must be a positive integer or None; "
                                                              r"received True"),
                          (dict(iterations=0), ValueError, r"iterations must be a positive integer or None; "
                                                           r"received 0")):
        with pytest.raises(err, match=msg):
            X.plan(**bad)


def test_a_projection_too_large_for_memory_is_refused_in_one_line(monkeypatch):
    """max_error= on a (2000, 2000, 500) tensor of 20,000 random nonzeros keeps ranks in the thousands: the
    projections needed 225 GiB (numpy's raw MemoryError after the work, or the OOM killer); now one line
    before allocating, naming the sizes."""
    from tuckerkit.sparse import _dispatch

    monkeypatch.setattr(_dispatch, "_available_bytes", lambda: 1 << 30)
    rng = np.random.default_rng(0)
    shape, nnz = (2000, 2000, 500), 20000
    X = COOTensor(np.stack([rng.integers(0, s, nnz) for s in shape], 1), rng.random(nnz), shape)
    with pytest.raises(MemoryError, match=r"^projecting mode \d of this sparse tensor onto [\d,]+ columns makes "
                                          r"[\d,]+ x [\d,]+ entries \(.* GB\), more than half the available memory"):
        tk.st_hosvd(X, max_error=0.5)
    with pytest.raises(MemoryError, match=r"^the dense projection of this sparse tensor has shape \(.*\) \(.* GB\)"):
        tk.multi_ttm(X, [np.ones((2000, 1000)), np.ones((2000, 1000)), None], skip=2, transpose=True)
