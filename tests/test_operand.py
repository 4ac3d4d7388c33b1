"""One operand protocol: every public operation works on every tensor kind (or says in one line why not),
plans are bound to what they were made for, and files open as the right operand."""

from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse

import tuckerkit as tk
from tuckerkit.engine import DenseTensor, Operand, SlabTensor, as_operand
from tuckerkit.sparse import COOTensor, CSFTensor

EPS = np.finfo(np.float64).eps


def _sparse_dense(rng, shape, density=0.3):
    D = rng.standard_normal(shape)
    D[rng.random(shape) > density] = 0.0
    return D


def _kinds(D):
    """The same tensor as every operand kind tuckerkit accepts."""
    import dask.array as da

    coo = COOTensor.from_dense(D)
    kinds = {
        "numpy": D,
        "fortran": np.asfortranarray(D),
        "coo": coo,
        "csf": CSFTensor(coo, tuple(reversed(range(D.ndim)))),
        "slab": SlabTensor(D, memory_limit=4 * D[0].nbytes * 3),  # 3 rows per slab
        "dask": da.from_array(D, chunks=tuple(max(1, s // 2) for s in D.shape)),
    }
    if D.ndim == 2:
        kinds["scipy"] = scipy.sparse.csr_matrix(D)
    return kinds


def _close(a, b, scale):
    a = a.to_dense() if isinstance(a, COOTensor) else np.asarray(a)
    np.testing.assert_allclose(a, b, rtol=0, atol=200 * EPS * scale)


@pytest.mark.parametrize("shape", [(7, 6, 5), (9, 8)])
def test_every_engine_operation_on_every_operand_kind(shape, rng):
    D = _sparse_dense(rng, shape)
    scale = np.abs(D).sum()
    U = [rng.standard_normal((s, 3)) for s in shape]
    for name, X in _kinds(D).items():
        assert isinstance(as_operand(X), Operand), name
        for n in range(len(shape)):
            _close(tk.ttm(X, U[n], n, transpose=True), tk.ttm(D, U[n], n, transpose=True), scale)
            _close(tk.ttm(X, U[n].T, n), tk.ttm(D, U[n].T, n), scale)
            _close(tk.gram(X, n), tk.gram(D, n), scale * np.abs(D).max())
            _close(tk.mttkrp(X, U, n), tk.mttkrp(D, U, n), scale * 10)
            _close(tk.multi_ttm(X, U, transpose=True, skip=n), tk.multi_ttm(D, U, transpose=True, skip=n), scale * 10)
        _close(tk.multi_ttm(X, U, transpose=True), tk.multi_ttm(D, U, transpose=True), scale * 30)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_every_decomposition_on_every_operand_kind(rng):
    """The issue's failures: hosvd of a SlabTensor / COOTensor and st_hosvd(COOTensor, tol=) raised deep
    TypeErrors. Every kind now gives the dense tensor's answer."""
    D = _sparse_dense(rng, (9, 8, 7), density=0.6)
    ranks = (3, 3, 2)
    ref = {
        "hosvd": tk.hosvd(D, ranks),
        "st_hosvd": tk.st_hosvd(D, ranks, order=[2, 0, 1]),
        "tol": tk.st_hosvd(D, max_error=0.6),
        "hooi": tk.hooi(D, ranks, init="hosvd", max_iter=5, tol=0),
        "cp": tk.cp_als(D, 3, init="random", random_state=1, max_iter=5, tol=0),
    }
    for name, X in _kinds(D).items():
        got = {
            "hosvd": tk.hosvd(X, ranks),
            "st_hosvd": tk.st_hosvd(X, ranks, order=[2, 0, 1]),
            "tol": tk.st_hosvd(X, max_error=0.6, order=[2, 0, 1]),
            "hooi": tk.hooi(X, ranks, init=ref["hosvd"], max_iter=5, tol=0),
            "cp": tk.cp_als(X, 3, init="random", random_state=1, max_iter=5, tol=0),
        }
        for key in ("hosvd", "st_hosvd", "hooi"):
            assert abs(got[key].fit - ref[key].fit) < 1e-8, (name, key, got[key].fit, ref[key].fit)
        assert got["tol"].ranks == tk.st_hosvd(D, max_error=0.6, order=[2, 0, 1]).ranks, name
        np.testing.assert_allclose(got["cp"].fit_history, ref["cp"].fit_history, rtol=0, atol=1e-10, err_msg=name)


def test_unsupported_types_fail_at_the_entry_in_one_line():
    msg = (r"X is a dict; expected a numpy or cupy array \(or array-like\), a COOTensor or CSFTensor, a "
           r"SlabTensor, a DaskTensor or dask.array.Array, a scipy.sparse matrix, or a pydata sparse array$")
    for call in (lambda: tk.ttm({}, np.ones((2, 2)), 0), lambda: tk.gram({}, 0), lambda: tk.hooi({}, 2),
                 lambda: tk.cp_als({}, 2), lambda: tk.mttkrp({}, [None], 0)):
        with pytest.raises(TypeError, match=msg):
            call()
    with pytest.raises(TypeError, match=r"X is a str; .* \(open files with tuckerkit.io.open_tensor\)"):
        tk.hosvd("data.npy", 2)
    with pytest.raises(TypeError, match=r"X is None; expected"):
        tk.st_hosvd(None, 2)


def test_operations_that_only_dense_arrays_take_say_so(rng):
    X = COOTensor.from_dense(_sparse_dense(rng, (4, 5, 6)))
    U = rng.standard_normal((5, 2))
    with pytest.raises(ValueError, match=r"out= applies to dense arrays; a COOTensor computes its own result"):
        tk.ttm(X, U, 1, transpose=True, out=np.empty((4, 2, 6)))
    S = SlabTensor(rng.standard_normal((10, 5, 6)), 4000)
    with pytest.raises(ValueError, match=r"plan= applies to dense arrays; a SlabTensor computes its own result"):
        tk.mttkrp(S, [None, U, rng.standard_normal((6, 2))], 0, plan=object())
    with pytest.raises(ValueError, match=r"a SlabTensor runs on the CPU; received device='cuda:0'"):
        S.to(tk.backend.parse_device("cuda"))


# -------------------------------------------------------------------------------------------- bound plans
def test_a_contraction_plan_runs_only_its_own_spec(rng):
    """The issue's case: a plan of ik,kj->ij reused with ki,kj->ij silently returned A @ B."""
    A, B = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    plan = tk.plan_contraction("ik,kj->ij", A, B)
    with pytest.raises(ValueError, match=r"plan was made for spec 'ik,kj->ij'; received spec 'ki,kj->ij'"):
        tk.contract("ki,kj->ij", A, B, plan=plan)
    np.testing.assert_allclose(tk.contract("ik,kj->ij", A, B, plan=plan), A @ B, atol=1e-13)
    np.testing.assert_allclose(plan(A, B), A @ B, atol=1e-13)
    with pytest.raises(ValueError, match=r"plan was made for dtype float64; received A of dtype float32"):
        plan(A.astype(np.float32), B)
    with pytest.raises(ValueError, match=r"plan was made for shapes \(\(5, 5\), \(5, 5\)\); received A, B of shapes"):
        plan(A[:4], B)
    with pytest.raises(ValueError, match=r"plan was made for strides"):
        plan(np.asfortranarray(A), B)
    with pytest.raises(ValueError, match=r"ttm\(mode=0, transpose=False\) runs 'abc,za->zbc'"):
        X = rng.standard_normal((5, 6, 7))
        tk.ttm(X, A, 0, plan=tk.engine.ttm_plan(X, rng.standard_normal((5, 6)), 1))


def test_an_mttkrp_plan_runs_only_its_own_mode(rng):
    X = rng.standard_normal((5, 6, 7))
    U = [rng.standard_normal((s, 3)) for s in X.shape]
    plan = tk.engine.mttkrp_plan(X, U, 0)
    with pytest.raises(ValueError, match=r"plan was made for mode 0; received mode 1 \(make a plan for it\)"):
        tk.mttkrp(X, U, 1, plan=plan)
    with pytest.raises(ValueError, match=r"plan was made for X of shape \(5, 6, 7\), strides .*rank 3"):
        tk.mttkrp(X, [V[:, :2] for V in U], 0, plan=plan)
    np.testing.assert_allclose(plan(X, U), tk.mttkrp(X, U, 0), rtol=1e-13, atol=1e-13)


def test_a_multi_ttm_plan_runs_only_its_own_modes(rng):
    """The issue's case: a plan reused with another skip raised a bare KeyError."""
    X = rng.standard_normal((5, 6, 7))
    U = [rng.standard_normal((s, 2)) for s in X.shape]
    plan = tk.engine.multi_ttm_plan(X, U, transpose=True, skip=0)
    with pytest.raises(ValueError, match=r"plan was made for modes \[1, 2\] with transpose=True; received modes "
                                         r"\[0, 2\] with transpose=True"):
        tk.multi_ttm(X, U, transpose=True, skip=1, plan=plan)
    with pytest.raises(ValueError, match=r"plan was made for X of shape \(5, 6, 7\)"):
        tk.multi_ttm(np.asfortranarray(X), U, transpose=True, skip=0, plan=plan)
    np.testing.assert_array_equal(plan(X, U), tk.multi_ttm(X, U, transpose=True, skip=0, plan=plan))


def test_a_gram_plan_runs_only_its_own_tensor(rng):
    X = rng.standard_normal((5, 6, 7))
    plan = tk.engine.gram_plan(X, 1)
    with pytest.raises(ValueError, match=r"plan was made for mode 1, .*; received mode 2"):
        tk.gram(X, 2, plan=plan)
    np.testing.assert_array_equal(plan(X), tk.gram(X, 1, plan=plan))


def test_plans_are_frozen_and_printable(rng):
    X = rng.standard_normal((5, 6, 7))
    U = [rng.standard_normal((s, 2)) for s in X.shape]
    for p in (tk.engine.multi_ttm_plan(X, U, transpose=True), tk.engine.mttkrp_plan(X, U, 1),
              tk.engine.gram_plan(X, 0), tk.engine.ttm_plan(X, U[0], 0, transpose=True)):
        assert "mode" in p.explain() or "C_{" in p.explain()
        with pytest.raises(AttributeError):
            p.mode = 3  # type: ignore[misc]


# -------------------------------------------------------------------------------------------------- files
def test_open_tensor_returns_the_right_operand(tmp_path, rng):
    import h5py

    from tuckerkit.io import load_tensor, open_tensor

    X = rng.standard_normal((20, 6, 5))
    np.save(tmp_path / "x.npy", X)
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("T", data=X)
    S0 = COOTensor.from_dense(_sparse_dense(rng, (4, 5, 6)))
    tk.io.write_tns(tmp_path / "s.tns", S0.coords, S0.values)
    assert isinstance(open_tensor(tmp_path / "x.npy"), DenseTensor)
    with open_tensor(tmp_path / "x.npy", memory_limit=2000) as S:
        assert isinstance(S, SlabTensor) and S.slab_rows == 2
        assert S.norm() == pytest.approx(np.linalg.norm(X), rel=1e-14)
    with open_tensor(tmp_path / "x.h5", memory_limit=2000) as H:
        assert isinstance(H, SlabTensor)
        np.testing.assert_allclose(H.gram(1), tk.gram(X, 1), rtol=1e-13)
    assert not H.data.id.valid  # closing the operand closed the file
    assert isinstance(open_tensor(tmp_path / "x.h5", memory_limit="1GB"), DenseTensor)  # fits: read whole
    T = open_tensor(tmp_path / "s.tns", csf="one")
    assert isinstance(T, COOTensor) and T.plan().kind == "one"
    assert isinstance(load_tensor(tmp_path / "s.tns"), COOTensor)  # never densified
    assert isinstance(open_tensor(tmp_path / "x.npy", scheduler=None), DenseTensor)


def test_open_tensor_errors(tmp_path, rng):
    from tuckerkit.io import open_tensor

    bad = rng.standard_normal((4, 5, 6))
    bad[1, 2, 3] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    np.save(tmp_path / "v.npy", np.ones(5))
    with pytest.raises(ValueError, match=r"tensor in '.*nan.npy' contains 1 NaN or infinite value\(s\)"):
        open_tensor(tmp_path / "nan.npy")
    assert open_tensor(tmp_path / "nan.npy", check_finite=False).shape == (4, 5, 6)
    with pytest.raises(ValueError, match=r"at least 2 dimensions; received a 1-d array"):
        open_tensor(tmp_path / "v.npy")
    with pytest.raises(ValueError, match=r"csf='three' is not valid; expected one of 'auto', 'all', 'two', 'one'"):
        open_tensor(tmp_path / "v.npy", csf="three")
    (tmp_path / "x.tns").write_text("1 1 1 1.0\n")
    with pytest.raises(ValueError, match=r"scheduler reads .npy files chunk by chunk; received '.tns'"):
        open_tensor(tmp_path / "x.tns", scheduler="local")


def test_a_cli_run_scans_for_nan_once(tmp_path, rng, monkeypatch):
    """The issue: one CLI run scanned X for NaN/Inf three times."""
    from tuckerkit.cli import app
    from typer.testing import CliRunner

    from tuckerkit import _validation

    np.save(tmp_path / "x.npy", rng.standard_normal((20, 21, 22)))
    calls = []
    real = _validation.count_nonfinite
    monkeypatch.setattr(_validation, "count_nonfinite", lambda X, *a: calls.append(X.shape) or real(X, *a))
    monkeypatch.setattr(sys.modules["tuckerkit.engine._operand"], "count_nonfinite", _validation.count_nonfinite)
    for args in (["--tol", "0.2"], ["--ranks", "2,2,2"], ["--method", "cp", "--rank", "2"]):
        calls.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = CliRunner().invoke(app, ["decompose", str(tmp_path / "x.npy"), *args, "--force", "-q"])
        assert res.exit_code == 0, res.output
        assert calls == [], (args, calls)  # the norm's pass is the scan: a NaN or Inf makes the norm non-finite
    bad = rng.standard_normal((20, 21, 22))
    bad[1, 2, 3] = np.inf
    np.save(tmp_path / "bad.npy", bad)
    calls.clear()
    res = CliRunner().invoke(app, ["decompose", str(tmp_path / "bad.npy"), "--ranks", "2,2,2", "--force", "-q"])
    assert res.exit_code != 0 and "contains 1 NaN or infinite value(s)" in res.output
    assert calls == [(20, 21, 22)]  # counted once, for the message


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_relative_error_of_a_huge_sparse_tensor_never_densifies():
    """cp.relative_error(X_sparse) tried to allocate the dense tensor (44.7 GiB in the report)."""
    import tracemalloc

    from tuckerkit.datasets import make_sparse_tensor

    X = make_sparse_tensor((10_000, 10_000, 10_000), nnz=5_000, random_state=0).data  # 1e12 logical entries
    C = tk.cp_als(X, 3, random_state=0, max_iter=5, tol=0)
    T = tk.hooi(X, (3, 3, 3), max_iter=3, tol=0)
    tracemalloc.start()
    errors = (C.relative_error(X), T.relative_error(X))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50e6
    assert errors[0] == pytest.approx(1 - C.fit, abs=1e-7)
    assert errors[1] == pytest.approx(1 - T.fit, abs=1e-7)


@pytest.mark.parametrize("kind", ["plain", "huge_piece", "tiny_piece", "mixed", "float32"])
def test_norm_one_read_per_piece_matches_an_exact_oracle(kind, rng):
    """The norm reads an ordinary piece once (one dot product) and rescales only extreme pieces (squares that
    overflow or underflow); either way it is the exact norm to within the float64 sum's rounding, and a NaN
    or an Inf makes it infinite. 80,000 entries: two pieces, one of them extreme."""
    import fractions

    from tuckerkit.engine._operand import frobenius_norm

    X = rng.standard_normal((50, 40, 40))
    if kind == "huge_piece":
        X[42:45] *= 1e300
    elif kind == "tiny_piece":
        X[:] *= 1e-300
        X[42:45] *= 1e-10
    elif kind == "mixed":
        X[47, 0, 0], X[20:22] = 1e250, 0.0
    elif kind == "float32":
        X = X.astype(np.float32)
    k = fractions.Fraction(2) ** (600 if kind in ("huge_piece", "mixed") else -1000 if kind == "tiny_piece" else 0)
    exact = sum(fractions.Fraction(float(v)) ** 2 for v in X.ravel())
    ref = math.sqrt(float(exact / k**2)) * float(k)
    assert abs(frobenius_norm(X) - ref) <= 1e3 * np.finfo(np.float64).eps * ref
    X.ravel()[12345] = np.nan
    assert frobenius_norm(X) == math.inf


@pytest.mark.parametrize("layout", ["C", "strided"])
def test_norm_same_bits_for_any_number_of_workers(layout, rng):
    """The norm's pieces are summed on the policy's workers and combined in piece order on the caller's thread:
    the same bits as one worker (and as the old one-thread loop), an extreme piece rescaled and a NaN in the
    last piece still making it infinite."""
    from tuckerkit.engine import ExecutionPolicy
    from tuckerkit.engine._operand import combine_scaled, sqnorm_scaled

    X = rng.standard_normal((130, 90, 70))
    X[100:103] *= 1e300  # an extreme piece among ordinary ones
    if layout == "strided":
        X = X[:, ::2, 1:]
    got = [sqnorm_scaled(X, 1 << 12, ExecutionPolicy(workers=w)) for w in (1, 2, 3)]
    assert got[0] == got[1] == got[2]
    # the oracle: the same pieces summed one after another on this thread
    from tuckerkit.engine._operand import _piece_ssq, _pieces

    acc = (1.0, 0.0)
    with np.errstate(over="ignore"):  # the extreme piece's first dot overflows (then it is summed scaled)
        for blk in _pieces(X, 1 << 12):
            acc = combine_scaled(acc, _piece_ssq(blk))
    assert got[0] == acc
    exact = np.linalg.norm((X / 2.0**997).ravel()) * 2.0**997
    assert got[0][0] * math.sqrt(got[0][1]) == pytest.approx(exact, rel=1e3 * np.finfo(np.float64).eps)
    Y = np.array(X)
    Y[-1, -1, -1] = np.nan
    assert sqnorm_scaled(Y, 1 << 12, ExecutionPolicy(workers=2)) == (math.inf, 1.0)


def _norm_layout(X, layout):
    if layout == "F":
        return np.asfortranarray(X)
    if layout == "perm":  # memory order (1, 2, 0): neither C nor F
        return X.transpose(1, 2, 0).copy().transpose(2, 0, 1)
    return X


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "F", "perm"])
def test_a_large_norm_sums_its_pieces_in_one_compiled_loop(dtype, layout, rng):
    """From ``COMPILED_NORM_MIN`` elements a float32 or float64 tensor's pieces (runs of its memory in any order
    of its axes) are summed by the compiled loop, float32 widened to float64 on the way: nothing copied, the same
    bits for any number of workers, the pairs those sums give combined in piece order, and within the bound of
    recursive summation of the exact norm (float32 squares are exact in float64, so ``math.fsum`` of them is
    the exactly rounded sum)."""
    import tracemalloc

    from tuckerkit.engine import ExecutionPolicy
    from tuckerkit.engine._norm_kernels import piece_sums
    from tuckerkit.engine._operand import (
        COMPILED_NORM_MIN,
        _compiled_run,
        _piece_ssq,
        _pieces,
        combine_pairs,
        sqnorm_scaled,
    )

    X = _norm_layout(rng.standard_normal((128, 96, 96)).astype(dtype), layout)
    assert X.size >= COMPILED_NORM_MIN
    flat = _compiled_run(X)
    assert flat is not None and np.shares_memory(flat, X)
    chunk = 1 << 12  # 288 pieces: 18 tasks of 16
    got = [sqnorm_scaled(X, chunk, ExecutionPolicy(workers=w)) for w in (1, 2, 3)]
    assert got[0] == got[1] == got[2]
    sums = []
    for blk in _pieces(X, chunk):
        out = np.empty(1)
        piece_sums(blk, blk.size, out, 0, 1)
        sums.append(float(out[0]))
    assert got[0] == combine_pairs([_piece_ssq(blk, q) for blk, q in zip(_pieces(X, chunk), sums, strict=True)])
    x64 = X.astype(np.float64).ravel()
    exact = math.fsum((x64 * x64).tolist())  # (float64: each square rounded once, well inside the bound)
    scale, ssq = got[0]
    assert scale == 1.0 and abs(ssq - exact) <= (chunk + X.size // chunk) * EPS * exact
    # nothing copied: the float32 pieces were widened in registers, not into float64 copies (512 KiB each before)
    tracemalloc.start()
    try:
        sqnorm_scaled(X, policy=ExecutionPolicy(workers=2))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10
    for bad in (np.nan, np.inf, -np.inf):
        Y = X.copy(order="K")
        Y[77, 5, 90] = bad
        assert sqnorm_scaled(Y, chunk, ExecutionPolicy(workers=2)) == (math.inf, 1.0)


@pytest.mark.parametrize("kind", ["huge_piece", "tiny"])
def test_a_large_norm_rescales_an_extreme_piece_after_the_compiled_loop(kind, rng):
    """A piece whose compiled sum overflows (or whose magnitude is far below float64's safe range) is summed
    again scaled by a power of two: the norm of a 2^20-element tensor with pieces of 1e300 (or every entry
    of order 1e-300) is exact to float64 rounding, and it still took the compiled loop."""
    from tuckerkit.engine._operand import _compiled_run, frobenius_norm

    X = rng.standard_normal((128, 96, 96))
    k = 2.0**997 if kind == "huge_piece" else 2.0**-1000
    if kind == "huge_piece":
        X[100:103] *= 1e300
    else:
        X *= 1e-300
    assert _compiled_run(X) is not None
    x = (X / k).ravel()
    exact = math.sqrt(math.fsum((x * x).tolist())) * k
    assert abs(frobenius_norm(X) - exact) <= 1e3 * EPS * exact


def test_a_dense_operand_builds_each_sweep_plan_once(rng, monkeypatch, planned_sweeps):
    """HOOI's sweeps reuse the multi-TTM plans of earlier sweeps on the same operand (same shapes, strides,
    dtypes): the same plan objects, the same bits as freshly built plans; another layout or rank builds anew."""
    import tuckerkit.engine._sweeps as sweeps

    built = []
    real = sweeps.build_multi_ttm_plan
    monkeypatch.setattr(sweeps, "build_multi_ttm_plan", lambda *a: built.append(a) or real(*a))
    D = rng.standard_normal((9, 8, 7))

    def run(op, ranks):
        outs = {}
        factors = [np.linalg.qr(rng.standard_normal((s, r)))[0] for s, r in zip(D.shape, ranks, strict=True)]
        sweep = op.ttmc_sweep(factors, lambda n, Y: outs.__setitem__(n, np.array(Y)))
        return sweep, outs, factors

    op = DenseTensor(D)
    first, _, _ = run(op, (3, 2, 4))
    n_first = len(built)
    assert n_first == len(first.plans) > 0
    second, outs, factors = run(op, (3, 2, 4))
    assert len(built) == n_first  # nothing built again
    assert all(a is b for a, b in zip(first.plans, second.plans, strict=True))
    fresh = {}
    DenseTensor(D).ttmc_sweep(factors, lambda n, Y: fresh.__setitem__(n, np.array(Y)))
    for n in range(D.ndim):
        assert np.array_equal(outs[n], fresh[n])
        skip = [m for m in range(D.ndim) if m != n]
        ref = tk.multi_ttm(D, [factors[m] for m in skip], modes=skip, transpose=True)
        np.testing.assert_allclose(outs[n], ref, rtol=0, atol=50 * EPS * np.abs(D).sum())
    built.clear()
    run(op, (2, 2, 2))  # other ranks: other plans
    assert len(built) == len(first.plans)
    built.clear()
    run(DenseTensor(np.asfortranarray(D)), (3, 2, 4))  # another operand, another layout
    assert len(built) == len(first.plans)


@pytest.mark.parametrize("shape", [(9, 8, 7), (5, 4, 6, 3)])
def test_a_dense_operand_builds_each_mttkrp_sweep_plan_once(shape, rng, monkeypatch, planned_sweeps):
    """CP-ALS's sweeps reuse the contraction plans of earlier sweeps on the same operand and run them
    unchecked: the same plan objects, the same bits as a fresh operand's sweep, each MTTKRP equal to
    ``tk.mttkrp``'s; another rank builds anew."""
    import tuckerkit.engine._sweeps as sweeps

    built = []
    real = sweeps.plan_contraction
    monkeypatch.setattr(sweeps, "plan_contraction", lambda *a, **k: built.append(a) or real(*a, **k))
    D = rng.standard_normal(shape)

    def run(op, R):
        outs = {}
        factors = [rng.standard_normal((s, R)) for s in shape]
        sweep = op.mttkrp_sweep(factors, lambda n, M: outs.__setitem__(n, np.array(M)))
        return sweep, outs, factors

    op = DenseTensor(D)
    first, _, _ = run(op, 3)
    n_first = len(built)
    assert n_first >= len(first.plans) > 0
    second, outs, factors = run(op, 3)
    assert len(built) == n_first  # nothing planned again (estimates included)
    assert all(a is b for a, b in zip(first.plans, second.plans, strict=True))
    fresh = {}
    DenseTensor(D).mttkrp_sweep(factors, lambda n, M: fresh.__setitem__(n, np.array(M)))
    for n in range(D.ndim):
        assert np.array_equal(outs[n], fresh[n])
        ref = tk.mttkrp(D, factors, n)
        np.testing.assert_allclose(outs[n], ref, rtol=0, atol=50 * EPS * np.abs(D).sum() * 10)
    built.clear()
    run(op, 2)
    assert len(built) > 0
