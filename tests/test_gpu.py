"""GPU execution: the same test bodies on numpy, on the numpy-backed cupy stand-in (tests/_fakecupy.py) and, where
a CUDA GPU is present, on the real cupy (``-m gpu``; skipped cleanly otherwise).

What the stand-in proves without a GPU: every cupy branch runs, the engine's cuBLAS ``gemmStridedBatched``
arguments are right (the stand-in executes them from raw pointers, column-major, as cuBLAS does), results stay
device arrays of the input's dtype, and an iteration makes exactly one host round trip (the fit).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import to_numpy
from test_table2 import CASES, SIZES
from tuckerkit.datasets import make_low_rank_cp, make_low_rank_tucker, make_sparse_tensor

import tuckerkit as tk
from tuckerkit.backend import Device, DeviceError, parse_device, to_device
from tuckerkit.engine import contract, gram, khatri_rao, mttkrp, multi_ttm, plan_contraction, ttm
from tuckerkit.engine._gpu import gemm_call


def _is_device(xp, a) -> bool:
    return xp is not np and type(a).__module__.split(".")[0] == "cupy"


def _tol(dtype) -> float:
    return float(200 * np.finfo(dtype).eps) if np.dtype(dtype) == np.float64 else float(2000 * np.finfo(dtype).eps)


def _fit_tol(dtype, fit) -> float:
    """A fit is 1 - sqrt(||X||^2 - ||G||^2) / ||X||: a rounding of c eps ||X||^2 in either norm moves it by
    c eps / (2 (1 - fit)) (cancellation near a perfect fit); c = 100."""
    return float(50 * np.finfo(dtype).eps / max(1 - fit, 1e-3))


def _counts(xp):
    """The stand-in's counter of host round trips (None on numpy and on the real cupy)."""
    return sys.modules["_fakecupy"].COUNTS if getattr(xp, "__version__", "") == "0.0-fake" else None


# ------------------------------------------------------------------------------------------------- engine
@pytest.mark.parametrize(("case", "spec"), CASES, ids=[c for c, _ in CASES])
@pytest.mark.parametrize("order", ["C", "F"])
def test_table2_on_device_equals_einsum(xp, case, spec, order, monkeypatch):
    rng = np.random.default_rng(3)
    a, b = spec.split("->")[0].split(",")
    A = np.asarray(rng.standard_normal([SIZES[c] for c in a]), order=order)
    B = np.asarray(rng.standard_normal([SIZES[c] for c in b]), order=order)
    Ad, Bd = xp.asarray(A), xp.asarray(B)
    fallbacks = []
    if xp is not np:  # count cupy.matmul's calls: the route that copies
        real = xp.matmul
        monkeypatch.setattr(xp, "matmul", lambda *a, **k: (fallbacks.append(1), real(*a, **k))[1])
    counts = _counts(xp)
    if counts is not None:
        counts.clear()
    C = contract(spec, Ad, Bd)
    assert type(C) is type(Ad)
    np.testing.assert_allclose(to_numpy(C), np.einsum(spec, A, B), rtol=1e-12, atol=1e-12)
    plan = plan_contraction(spec, Ad, Bd)
    if xp is not np:
        assert plan.device == "cuda"
        if plan.copies == 0:  # every non-exceptional case: cuBLAS calls on views, never cupy.matmul's copies
            assert fallbacks == []
            assert counts is None or counts["gemmStridedBatched"] >= 1
    else:
        assert plan.device == "cpu"


def test_device_views_and_float32(xp):
    rng = np.random.default_rng(4)
    big = xp.asarray(rng.standard_normal((9, 8, 13)).astype(np.float32))
    X = big.transpose(2, 0, 1)[1::2]  # a strided device view, no unit-stride mode in C order
    U = xp.asarray(rng.standard_normal((9, 3)).astype(np.float32))
    ref = np.einsum("ijk,jr->irk", to_numpy(X), to_numpy(U))
    got = ttm(X, U, 1, transpose=True)
    assert got.dtype == np.float32 and type(got) is type(X)
    np.testing.assert_allclose(to_numpy(got), ref, rtol=1e-4, atol=1e-4)


def test_ops_on_device(xp, dtype):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 7, 8)).astype(dtype)
    Us = [rng.standard_normal((n, 3)).astype(dtype) for n in X.shape]
    Xd, Ud = xp.asarray(X), [xp.asarray(U) for U in Us]
    tol = _tol(dtype)
    pairs = [
        (ttm(Xd, Ud[1], 1, transpose=True), np.einsum("ijk,jr->irk", X, Us[1])),
        (multi_ttm(Xd, Ud, transpose=True), np.einsum("ijk,ia,jb,kc->abc", X, *Us)),
        (gram(Xd, 2), np.einsum("ijk,ijl->kl", X, X)),
        (mttkrp(Xd, Ud, 1), np.einsum("ijk,ir,kr->jr", X, Us[0], Us[2])),
        (khatri_rao(Ud[:2]), np.einsum("ir,jr->ijr", Us[0], Us[1]).reshape(-1, 3)),
    ]
    for got, ref in pairs:
        assert got.dtype == dtype and type(got) is type(Xd)
        np.testing.assert_allclose(to_numpy(got), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_ops_device_keyword(xp):
    """``device=`` on the engine's operations: host operands computed on the device, results back on the host."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((5, 6, 7))
    Us = [rng.standard_normal((n, 2)) for n in X.shape]
    dev = "cpu" if xp is np else "cuda"
    pairs = [
        (contract("ijk,jr->irk", X, Us[1], device=dev), np.einsum("ijk,jr->irk", X, Us[1])),
        (ttm(X, Us[2], 2, transpose=True, device=dev), np.einsum("ijk,kr->ijr", X, Us[2])),
        (multi_ttm(X, Us, transpose=True, device=dev), np.einsum("ijk,ia,jb,kc->abc", X, *Us)),
        (gram(X, 0, device=dev), np.einsum("ijk,ljk->il", X, X)),
        (mttkrp(X, Us, 0, device=dev), np.einsum("ijk,jr,kr->ir", X, Us[1], Us[2])),
        (khatri_rao(Us[:2], device=dev), np.einsum("ir,jr->ijr", Us[0], Us[1]).reshape(-1, 2)),
    ]
    for got, ref in pairs:
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    if xp is not np:
        Xd = xp.asarray(X)
        got = ttm(Xd, Us[0], 0, transpose=True, device="cpu")  # a device operand computed on the host
        assert type(got) is type(Xd)
        with pytest.raises(ValueError, match=r"out is on cpu; expected it on device='cuda'"):
            ttm(X, Us[0], 0, transpose=True, out=np.empty((2, 6, 7)), device="cuda")


def test_gemm_call_cases():
    # C order everywhere: cuBLAS computes C^T = B^T A^T on the same memory
    c = gemm_call((2, 4, 3), (12, 3, 1), (2, 3, 5), (15, 5, 1), (2, 4, 5), (20, 5, 1))
    assert (c.swap, c.m, c.n, c.k, c.batch, c.stride_a, c.stride_b, c.stride_c) == (True, 5, 4, 3, 2, 15, 12, 20)
    # F-order output: issued directly; A read transposed
    c = gemm_call((4, 3), (3, 1), (3, 5), (1, 3), (4, 5), (1, 4))
    assert (c.swap, c.transa, c.transb, c.lda, c.ldb, c.ldc) == (False, 1, 0, 3, 3, 4)
    # no unit stride in a matrix: no call (the exceptional case)
    assert gemm_call((4, 3), (6, 2), (3, 5), (5, 1), (4, 5), (5, 1)) is None
    # a batch written to one output matrix is refused
    assert gemm_call((2, 4, 3), (12, 3, 1), (2, 3, 5), (15, 5, 1), (2, 4, 5), (0, 5, 1)) is None


# ------------------------------------------------------------------------------------------ decompositions
def _device_arg(xp):
    return "cpu" if xp is np else "cuda"


@pytest.mark.parametrize("method", ["hosvd", "st_hosvd", "hooi"])
def test_tucker_on_device_equals_cpu(xp, dtype, method):
    X = make_low_rank_tucker((20, 22, 24), (3, 4, 5), noise=0.01, dtype=dtype, random_state=0).data
    f = getattr(tk, method)
    ref = f(X, (3, 4, 5))
    got = f(X, (3, 4, 5), device=_device_arg(xp))  # a host input comes back on the host
    assert isinstance(got.core, np.ndarray) and got.core.dtype == dtype and got.device == "cpu"
    assert abs(got.fit - ref.fit) <= _fit_tol(dtype, ref.fit)
    for U, V in zip(got.factors, ref.factors, strict=True):  # same subspaces
        s = np.linalg.svd(U.T.astype(np.float64) @ V, compute_uv=False)
        np.testing.assert_allclose(s, 1, atol=10 * _tol(dtype) ** 0.5)
    Xd = xp.asarray(X)  # a device input stays on the device
    on = f(Xd, (3, 4, 5))
    assert type(on.core) is type(Xd) and on.core.dtype == dtype
    assert on.device == ("cpu" if xp is np else "cuda:0")
    np.testing.assert_allclose(on.to("cpu").core, got.core, rtol=0, atol=50 * _tol(dtype) * np.abs(got.core).max())


def test_sketched_st_hosvd_on_device_equals_cpu(xp, dtype):
    X = make_low_rank_tucker((20, 22, 24), (3, 4, 5), noise=0.01, dtype=dtype, random_state=0).data
    ref = tk.st_hosvd(X, (3, 4, 5), sketch=True, random_state=1)
    got = tk.st_hosvd(X, (3, 4, 5), sketch=True, random_state=1, device=_device_arg(xp))
    assert abs(got.fit - ref.fit) <= _fit_tol(dtype, ref.fit)
    np.testing.assert_allclose(got.to_dense(), ref.to_dense(), atol=100 * _tol(dtype) * np.abs(X).max())


def test_cp_als_on_device_equals_cpu(xp, dtype):
    X = make_low_rank_cp((20, 22, 24), 4, noise=0.01, dtype=dtype, random_state=0).data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        ref = tk.cp_als(X, 4, tol=0, max_iter=8)
        got = tk.cp_als(xp.asarray(X), 4, tol=0, max_iter=8)
    assert type(got.weights) is type(xp.asarray(X)) and got.weights.dtype == dtype
    np.testing.assert_allclose(got.fit_history, ref.fit_history, atol=_fit_tol(dtype, ref.fit))
    np.testing.assert_allclose(to_numpy(got.to_dense()), ref.to_dense(), atol=100 * _tol(dtype) * np.abs(X).max())


def test_sparse_cp_als_on_device_equals_cpu(xp, dtype):
    S = make_sparse_tensor((30, 40, 50), nnz=3000, dtype=dtype, random_state=1).data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        ref = tk.cp_als(S, 5, tol=0, max_iter=6)
        got = tk.cp_als(S, 5, tol=0, max_iter=6, device=_device_arg(xp))
    assert isinstance(got.weights, np.ndarray) and got.weights.dtype == dtype
    np.testing.assert_allclose(got.fit_history, ref.fit_history, atol=_fit_tol(dtype, ref.fit))
    for U, V in zip(got.factors, ref.factors, strict=True):
        np.testing.assert_allclose(U, V, atol=100 * _tol(dtype))


def test_sparse_mttkrp_on_device(xp, dtype):
    S = make_sparse_tensor((9, 10, 11, 12), nnz=400, dtype=dtype, random_state=2).data
    if xp is np:
        pytest.skip("the GPU sparse tensor exists only on a cupy namespace")
    G = S.to(Device("cuda"))
    assert "atomicAdd" in G.plan().explain()
    rng = np.random.default_rng(0)
    Us = [rng.standard_normal((n, 4)).astype(dtype) for n in S.shape]
    D = S.to_dense()
    for n in range(4):
        got = G.mttkrp([xp.asarray(U) for U in Us], n)
        ref = mttkrp(D, Us, n)
        np.testing.assert_allclose(to_numpy(got), ref, atol=_tol(dtype) * 50)


def test_one_host_round_trip_per_iteration(xp):
    counts = _counts(xp)
    if counts is None:
        pytest.skip("counted on the cupy stand-in")
    X = xp.asarray(make_low_rank_tucker((20, 22, 24), (3, 4, 5), noise=0.01, random_state=0).data)
    Y = xp.asarray(make_low_rank_cp((20, 22, 24), 4, noise=0.01, random_state=0).data)
    per_run = {}
    for name, run in (("hooi", lambda k: tk.hooi(X, (3, 4, 5), tol=0, max_iter=k)),
                      ("cp_als", lambda k: tk.cp_als(Y, 4, tol=0, max_iter=k))):
        totals = []
        for k in (3, 7):
            counts.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", tk.ConvergenceWarning)
                run(k)
            totals.append(counts["sync"] + counts["d2h"])
        per_run[name] = (totals[1] - totals[0]) / 4
    assert per_run == {"hooi": 1.0, "cp_als": 1.0}


# ---------------------------------------------------------------------------------------------- devices
def test_parse_device_errors():
    assert parse_device("cuda:2") == Device("cuda", 2) and str(parse_device("GPU")) == "cuda:0"
    for bad in ("tpu", "cuda:x", "cpu:1", 3):
        with pytest.raises(ValueError, match=r"device=.* is not a device; expected 'cpu', 'cuda' or 'cuda:N'"):
            parse_device(bad)


def test_cuda_without_cupy_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    X = np.ones((3, 4, 5))
    with pytest.raises(DeviceError, match=r"device='cuda' needs cupy, which is not installed; install it with: "
                                          r"pip install 'tuckerkit\[gpu\]'"):
        tk.hooi(X, 2, device="cuda")
    with pytest.raises(DeviceError, match="needs cupy"):
        to_device(X, "cuda:0")
    assert tk.hooi(X, 2, device="cpu").core.shape == (2, 2, 2)


def test_cuda_device_checks(monkeypatch):
    import _fakecupy

    cp, _ = _fakecupy.make()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    X = np.ones((30, 40, 50))
    with pytest.raises(DeviceError, match=r"device='cuda:3': this machine has 1 GPU\(s\), cuda:0 to cuda:0"):
        tk.hooi(X, 2, device="cuda:3")
    cp.cuda.runtime.memGetInfo = lambda: (1000, 16 << 30)
    with pytest.raises(DeviceError, match=r"X needs 0.00 GB on cuda:0 but 0.00 GB is free; use device='cpu'"):
        tk.cp_als(X, 2, device="cuda")
    with pytest.raises(ValueError, match=r"device='cuda' cannot be combined with a Dask array or memory_limit"):
        tk.hooi(X, 2, device="cuda", memory_limit="1GB")
    S = make_sparse_tensor((5, 6, 7), nnz=20, random_state=0).data
    cp.cuda.runtime.memGetInfo = lambda: (8 << 30, 16 << 30)
    with pytest.raises(ValueError, match=r"sparse HOOI runs on the CPU; pass device='cpu'"):
        tk.hooi(S, 2, device="cuda")


def test_no_gpu_is_a_clear_error(monkeypatch):
    import _fakecupy

    cp, _ = _fakecupy.make()

    def broken():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    cp.cuda.runtime.getDeviceCount = broken
    monkeypatch.setitem(sys.modules, "cupy", cp)
    with pytest.raises(DeviceError, match=r"device='cuda:0': no usable CUDA GPU on this machine \(RuntimeError: "
                                          r"cudaErrorNoDevice"):
        tk.st_hosvd(np.ones((3, 4, 5)), 2, device="cuda:0")


# ------------------------------------------------------------------------------------- the CUDA kernel
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the CUDA source on the CPU")
@pytest.mark.parametrize(("dtype", "idx"), [(np.float32, np.int32), (np.float64, np.int64)])
def test_cuda_kernel_source_runs_on_cpu(tmp_path, dtype, idx):
    """The RawKernel's CUDA C, compiled for the CPU with a serial grid loop, equals the dense MTTKRP."""
    from tuckerkit.sparse._gpu import kernel_source

    ctype = "float" if dtype == np.float32 else "double"
    itype = "int" if idx == np.int32 else "long long"
    src = ("struct tk_dim3 { long long x; };\nstatic tk_dim3 blockIdx, blockDim, threadIdx;\n"
           "#define __global__\n#define __restrict__ __restrict\n"
           "template <class T> static T atomicAdd(T* p, T v) { T o = *p; *p += v; return o; }\n"
           + kernel_source(dtype, idx) +
           f'extern "C" void grid(long long nnz, int N, int R, int mode, const {itype}* c, const {ctype}* v, '
           f"const {ctype}* F, const long long* off, {ctype}* out) {{\n"
           "  blockDim.x = 256; long long blocks = (nnz * R + 255) / 256;\n"
           "  for (long long b = 0; b < blocks; ++b) for (int t = 0; t < 256; ++t) {\n"
           "    blockIdx.x = b; threadIdx.x = t; coo_mttkrp(nnz, N, R, mode, c, v, F, off, out); } }\n")
    (tmp_path / "k.cpp").write_text(src)
    so = tmp_path / "k.so"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "k.cpp")], check=True)
    lib = ctypes.CDLL(str(so))
    S = make_sparse_tensor((7, 8, 9, 10), nnz=300, dtype=dtype, random_state=3).data
    rng = np.random.default_rng(1)
    Us = [rng.standard_normal((n, 5)).astype(dtype) for n in S.shape]
    coords = np.ascontiguousarray(S.coords.T, dtype=idx)
    F = np.ascontiguousarray(np.concatenate(Us))
    off = np.concatenate([[0], np.cumsum(S.shape)[:-1]]).astype(np.int64)
    vals = np.ascontiguousarray(S.values)
    p = ctypes.c_void_p
    for n in range(4):
        out = np.zeros((S.shape[n], 5), dtype)
        lib.grid(ctypes.c_longlong(S.nnz), 4, 5, n, p(coords.ctypes.data), p(vals.ctypes.data), p(F.ctypes.data),
                 p(off.ctypes.data), p(out.ctypes.data))
        np.testing.assert_allclose(out, mttkrp(S.to_dense(), Us, n), atol=_tol(dtype) * 50)


def test_gpu_benchmark_script_runs(xp, tmp_path, monkeypatch):
    """benchmarks/gpu.py end to end at smoke sizes (on the stand-in here, on the GPU with -m gpu)."""
    if xp is np:
        pytest.skip("a GPU benchmark")
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    import _common
    import gpu

    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    monkeypatch.setattr(gpu, "RESULTS", tmp_path)
    gpu.main(["--quick", "--no-tensorly", "--dtypes", "float64"])
    import json

    out = json.loads((tmp_path / "gpu.json").read_text())
    assert len(out["contractions"]) == 72 and max(r["rel_err"] for r in out["contractions"]) < 1e-12
    assert {r["method"] for r in out["tucker"] + out["cp"]} == {"hooi", "cp_als"}
    assert "| n | dtype | rank | GPU ms/it |" in (tmp_path / "gpu.md").read_text()
