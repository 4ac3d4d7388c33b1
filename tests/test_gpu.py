"""GPU execution: the same test bodies on numpy, on the numpy-backed cupy stand-in (tests/_fakecupy.py) and, where
a CUDA GPU is present, on the real cupy (``-m gpu``; skipped cleanly otherwise).

What the stand-in proves without a GPU: every cupy branch runs, the engine's cuBLAS ``gemmStridedBatched``
arguments are right (the stand-in executes them from raw pointers, column-major, as cuBLAS does), results stay
device arrays of the input's dtype, and an iteration makes only the host round trips it should (the fit, and
one per factor update for the small eigenproblems and solves, which run on the host's LAPACK).
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from _subspaces import subspace_sine
from conftest import to_numpy
from test_table2 import CASES, SIZES
from tuckerkit.datasets import make_low_rank_cp, make_low_rank_tucker, make_sparse_tensor

import tuckerkit as tk
from tuckerkit.backend import Device, DeviceError, parse_device, to_device
from tuckerkit.engine import contract, gram, khatri_rao, mttkrp, multi_ttm, plan_contraction, ttm
from tuckerkit.engine._gpu import gemm_call, may_share_bounds


def _is_device(xp, a) -> bool:
    return xp is not np and type(a).__module__.split(".")[0] == "cupy"


def _tol(dtype) -> float:
    return float(200 * np.finfo(dtype).eps) if np.dtype(dtype) == np.float64 else float(2000 * np.finfo(dtype).eps)


def _sine_tol(dtype) -> float:
    """Two subspaces of one decomposition computed on the device and on the host, each in ``dtype``: their
    sine (tests/_subspaces.py) is a few hundred roundings amplified by the spectrum's gaps; a margin of about
    1e3 over that (the device's reductions are not the host's)."""
    return 1e-10 if np.dtype(dtype) == np.float64 else 1e-3


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


def test_a_summed_batch_on_device(xp, dtype, monkeypatch):
    """``Remedy.SUMMED_BATCH`` (a contracted mode looped, the products summed) on the device's arrays: one
    piece, the products by cuBLAS strided-batched calls on views into a device temporary (never
    ``cupy.matmul``, which copies), the sum on the device."""
    rng = np.random.default_rng(8)
    X = rng.standard_normal((30, 20, 10)).astype(dtype)
    Q = rng.standard_normal((30, 10, 3)).astype(dtype)
    Xd, Qd = xp.asarray(X), xp.asarray(Q)
    plan = plan_contraction("abc,acz->bz", Xd, Qd, copies="never")
    assert plan.remedy == "summed_batch" and plan.copies == 0, plan.explain()
    fallbacks = []
    if xp is not np:
        real = xp.matmul
        monkeypatch.setattr(xp, "matmul", lambda *a, **k: (fallbacks.append(1), real(*a, **k))[1])
    counts = _counts(xp)
    if counts is not None:
        counts.clear()
    got = contract("abc,acz->bz", Xd, Qd, copies="never")
    assert fallbacks == []
    assert counts is None or counts["gemmStridedBatched"] >= 1
    assert type(got) is type(Xd) and got.dtype == dtype
    ref = np.einsum("abc,acz->bz", X.astype(np.float64), Q.astype(np.float64))
    tol = _tol(dtype)
    np.testing.assert_allclose(to_numpy(got), ref, rtol=tol, atol=tol * np.abs(ref).max())


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
    # a broadcast operand (batch size 1): batch stride 0, which cuBLAS allows
    c = gemm_call((1, 4, 3), (12, 3, 1), (2, 3, 5), (15, 5, 1), (2, 4, 5), (20, 5, 1))
    assert (c.batch, c.stride_a, c.stride_b, c.stride_c) == (2, 15, 0, 20)  # swapped: B is the call's first
    # a negative batch stride (undocumented in cuBLAS) is never issued
    assert gemm_call((2, 4, 3), (-12, 3, 1), (2, 3, 5), (15, 5, 1), (2, 4, 5), (20, 5, 1)) is None
    assert gemm_call((2, 4, 3), (12, 3, 1), (2, 3, 5), (15, 5, 1), (2, 4, 5), (-20, 5, 1)) is None


# ------------------------------------------------------------------- issue 16: views, strides, out=, devices
def _oracle_close(got, spec, *host, dtype):
    """|got - einsum| <= 4 (k + 2) eps einsum(|.|) elementwise, k the number of terms of each output entry."""
    ref = np.einsum(spec, *[h.astype(np.float64) for h in host], optimize=True)
    scale = np.einsum(spec, *[np.abs(h).astype(np.float64) for h in host], optimize=True)
    lhs, rhs = spec.split("->")
    sizes = {ch: n for sub, h in zip(lhs.split(","), host, strict=True) for ch, n in zip(sub, h.shape, strict=True)}
    k = math.prod(sizes[ch] for ch in set(lhs) - set(rhs) - {","})
    g = to_numpy(got)
    assert g.shape == ref.shape and g.dtype == np.dtype(dtype), (g.shape, ref.shape, g.dtype)
    err = np.abs(g.astype(np.float64) - ref)
    bound = 4 * (k + 2) * np.finfo(dtype).eps * scale + np.finfo(dtype).tiny
    assert np.all(err <= bound), f"error {np.max(err - bound):.3g} above the bound"


def test_nested_batches_with_a_broadcast_operand(xp):
    """Issue 16's examples: an operand lacking a batch mode (size 1 there) in a nested batch was indexed
    with the output's batch index (IndexError)."""
    rng = np.random.default_rng(16)
    big = rng.random((8, 8, 4))
    X = xp.asarray(big)[::2, ::2, ::2]
    got = ttm(X, xp.ones((4, 2)), 1, transpose=True)
    _oracle_close(got, "ijk,jr->irk", big[::2, ::2, ::2], np.ones((4, 2)), dtype=np.float64)
    A, B = rng.random((3, 4, 5)), rng.random((2, 4, 6, 5))
    _oracle_close(contract("akd,bkcd->abcd", xp.asarray(A), xp.asarray(B)), "akd,bkcd->abcd", A, B,
                  dtype=np.float64)
    X6 = np.asfortranarray(rng.random((4, 5, 6, 3, 2, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        ref = tk.hooi(X6, 2, tol=0, max_iter=5)
        got6 = tk.hooi(X6, 2, tol=0, max_iter=5, device=_device_arg(xp))
    assert abs(got6.fit - ref.fit) <= _fit_tol(np.float64, ref.fit)


_LETTERS = "abcdef"
_VIEW_KINDS = ("C", "F", "permuted", "sliced", "reversed", "mixed")


def _fuzz_view(rng, shape, dtype, xp):
    """A host array of ``shape`` and the same view on ``xp``, made by slicing and transposing a bigger array
    there: C or F order, permuted, sliced (step 2, offset), reversed modes (negative strides), or all of those."""
    kind = _VIEW_KINDS[rng.integers(len(_VIEW_KINDS))]
    N = len(shape)
    order = np.arange(N)[::-1] if kind == "F" else (rng.permutation(N) if kind in ("permuted", "mixed")
                                                    else np.arange(N))
    step = rng.integers(1, 3, N) if kind in ("sliced", "mixed") else np.ones(N, int)
    off = rng.integers(0, 2, N) * (step > 1)
    rev = (rng.random(N) < 0.5) if kind in ("reversed", "mixed") else np.zeros(N, bool)
    base = rng.standard_normal([int(shape[a] * step[a] + off[a]) for a in order]).astype(dtype)

    def cut(b):
        v = b[tuple(slice(off[a], off[a] + shape[a] * step[a], step[a]) for a in order)]
        v = v[tuple(slice(None, None, -1) if rev[a] else slice(None) for a in order)]
        return v.transpose(np.argsort(order))

    return cut(base), (cut(xp.asarray(base)) if xp is not np else cut(base)), kind


def _fuzz_case(seed: int, xp):
    """One random call (op by seed % 4) on random views: ``(op, view kind, error or None)``."""
    rng = np.random.default_rng(seed)
    N = int(rng.integers(3, 7))
    shape = tuple(int(v) for v in rng.integers(1, 5 if N <= 4 else 4, N))
    dtype = np.float64 if rng.random() < 0.5 else np.float32
    op = ("ttm", "multi_ttm", "mttkrp", "gram")[seed % 4]
    Xh, Xd, kind = _fuzz_view(rng, shape, dtype, xp)
    x, n = _LETTERS[:N], int(rng.integers(N))
    try:
        if op == "ttm":
            t, r = bool(rng.integers(2)), int(rng.integers(1, 4))
            Uh, Ud, _ = _fuzz_view(rng, (shape[n], r) if t else (r, shape[n]), dtype, xp)
            spec = f"{x},{x[n] + 'z' if t else 'z' + x[n]}->{x.replace(x[n], 'z')}"
            got, host = ttm(Xd, Ud, n, transpose=t), (Xh, Uh)
        elif op == "multi_ttm":
            skip = None if rng.random() < 0.3 else n
            mats = [_fuzz_view(rng, (s, int(rng.integers(1, 4))), dtype, xp) for s in shape]
            keep = [m for m in range(N) if m != skip]
            spec = ",".join([x] + [x[m] + x[m].upper() for m in keep]) + "->" + "".join(
                x[m] if m == skip else x[m].upper() for m in range(N))
            got = multi_ttm(Xd, [d for _, d, _ in mats], transpose=True, skip=skip)
            host = (Xh, *[mats[m][0] for m in keep])
        elif op == "mttkrp":
            R = int(rng.integers(1, 4))
            mats = [_fuzz_view(rng, (s, R), dtype, xp) for s in shape]
            spec = ",".join([x] + [x[m] + "z" for m in range(N) if m != n]) + f"->{x[n]}z"
            got = mttkrp(Xd, [d for _, d, _ in mats], n)
            host = (Xh, *[mats[m][0] for m in range(N) if m != n])
        else:
            spec = f"{x},{x.replace(x[n], 'z')}->{x[n]}z"
            got, host = gram(Xd, n), (Xh, Xh)
        _oracle_close(got, spec, *host, dtype=dtype)
    except Exception as exc:
        return op, kind, f"{type(exc).__name__}: {exc}"
    return op, kind, None


_FUZZ_CASES = 800


def test_fuzz_views_against_numpy(xp):
    """ttm, multi_ttm, mttkrp and gram on random orders (3-6), sizes (1-4, size-1 modes included), dtypes
    and views (C, F, permuted, sliced, reversed, mixed; the factors too) against a float64 einsum oracle.
    Before issue 16's fixes 238 of these 800 failed on the stand-in: 40 IndexErrors (a broadcast operand in a
    nested batch), 76 negative batch strides handed to cuBLAS, 122 MTTKRPs whose one-factor Khatri-Rao
    product (the factor itself, F order or a view) did not match its own plan's strides (also on numpy)."""
    failures = [(seed, *res) for seed in range(_FUZZ_CASES) for res in [_fuzz_case(seed, xp)] if res[2]]
    assert not failures, f"{len(failures)} of {_FUZZ_CASES} failed; first: " + "; ".join(
        f"seed {s} {op} {kind}: {err[:160]}" for s, op, kind, err in failures[:3])


def _count_matmul(xp, monkeypatch) -> list:
    calls: list = []
    if xp is not np:
        real = xp.matmul
        monkeypatch.setattr(xp, "matmul", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


def test_negative_batch_strides_are_flipped_or_looped(xp, monkeypatch):
    """A batch axis whose strides are all negative runs backwards (one call, positive strides); one of mixed
    signs is looped. Neither copies (no cupy.matmul) nor hands cuBLAS a negative stride."""
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((3, 4)), rng.standard_normal((5, 4, 6))
    fallbacks = _count_matmul(xp, monkeypatch)
    counts = _counts(xp)
    Bd = xp.asarray(B)[::-1]  # batch mode n reversed in B; the output is fresh (positive): mixed signs
    _oracle_close(contract("mk,nkp->mnp", xp.asarray(A), Bd), "mk,nkp->mnp", A, B[::-1], dtype=np.float64)
    out = xp.zeros((3, 5, 6))[:, ::-1]  # and now the output reversed too: all negative
    if counts is not None:
        counts.clear()
    res = contract("mk,nkp->mnp", xp.asarray(A), Bd, out=out)
    _oracle_close(res, "mk,nkp->mnp", A, B[::-1], dtype=np.float64)
    assert fallbacks == []
    assert counts is None or counts["gemmStridedBatched"] == 1


def test_out_overlapping_an_input_is_computed_through_a_temporary(xp):
    """cuBLAS does not guard an output that overlaps an input (CuPy's matmul checks may_share_bounds)."""
    rng = np.random.default_rng(8)
    A, B = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    Ad = xp.asarray(A.copy())  # (numpy's asarray would not copy)
    got = contract("ij,jk->ik", Ad, xp.asarray(B), out=Ad)  # out is A itself
    assert got is Ad
    _oracle_close(got, "ij,jk->ik", A, B, dtype=np.float64)
    M, T = rng.standard_normal((4, 4)), rng.standard_normal((3, 4, 6))
    Td = xp.asarray(T.copy())
    got = contract("mk,nkp->mnp", xp.asarray(M), Td, out=Td.transpose(1, 0, 2))  # a batched product into B
    _oracle_close(got, "mk,nkp->mnp", M, T, dtype=np.float64)


def test_may_share_bounds():
    base = np.zeros(20)

    def dev(a):  # the cupy attributes the check reads
        return type("V", (), {"data": type("P", (), {"ptr": a.__array_interface__["data"][0]})(),
                              "shape": a.shape, "strides": a.strides, "itemsize": a.itemsize})()

    assert may_share_bounds(dev(base[:10]), dev(base[5:15]))
    assert not may_share_bounds(dev(base[:10]), dev(base[10:]))
    assert may_share_bounds(dev(base[::2]), dev(base[1::2]))  # interleaved: bounds meet (conservative)
    assert may_share_bounds(dev(base[9::-1]), dev(base[:1]))  # negative strides: bounds below the pointer
    assert not may_share_bounds(dev(base[9::-1]), dev(base[10:]))
    assert not may_share_bounds(dev(base[:0]), dev(base))


def _two_gpus(monkeypatch):
    import _fakecupy

    cp, cpx = _fakecupy.make()
    cp.cuda.runtime.getDeviceCount = lambda: 2
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupyx", cpx)
    _fakecupy.COUNTS.clear()
    return cp, _fakecupy.COUNTS


@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_a_cp_sweep_runs_on_the_operands_gpu(monkeypatch, layout):
    """A CP-ALS sweep on arrays of cuda:1 while cuda:0 is current runs there (the operand makes its GPU
    current) and each MTTKRP equals the CPU sweep's. A C- or F-ordered tensor's sweep is direct (cupy.matmul,
    no planner: engine/_direct.py, ``device_direct_applies``); a strided view's runs its plans, cached: the
    second sweep plans nothing, every cuBLAS call on cuda:1."""
    from tuckerkit.engine import DenseTensor, DirectSweep

    cp, counts = _two_gpus(monkeypatch)
    rng = np.random.default_rng(11)
    X = rng.standard_normal((9, 8, 14))
    X = {"C": X, "F": np.asfortranarray(X), "strided": X[:, :, ::2]}[layout]
    Us = [rng.standard_normal((n, 3)) for n in X.shape]
    with cp.cuda.Device(1):
        Xd = cp.asarray(X) if layout != "strided" else cp.asarray(np.ascontiguousarray(X.base))[:, :, ::2]
        op, Fd = DenseTensor(Xd), [cp.asarray(F) for F in Us]
    assert (Xd.flags.c_contiguous, Xd.flags.f_contiguous) == (layout == "C", layout == "F")
    assert cp.cuda.runtime.getDevice() == 0
    ref: dict = {}
    DenseTensor(X).mttkrp_sweep(list(Us), lambda n, M: ref.__setitem__(n, np.array(M)))
    for sweep_no in range(2):
        got: dict = {}
        before = len(op._sweep_plans)
        sweep = op.mttkrp_sweep(list(Fd), lambda n, M, got=got: got.__setitem__(n, M))
        if layout == "strided":
            assert len(op._sweep_plans) == before if sweep_no else before == 0 < len(op._sweep_plans)
            assert not isinstance(sweep.plans[0], DirectSweep)
        else:
            assert len(op._sweep_plans) == 0 and sweep.passes == 2
            (rec,) = sweep.plans
            assert isinstance(rec, DirectSweep) and rec.device == "gpu" and "cupy.matmul" in rec.explain()
        for n in range(3):
            assert got[n].device.id == 1 and got[n].shape == (X.shape[n], 3)
            tol = 512 * np.finfo(np.float64).eps * np.abs(X).sum()
            np.testing.assert_allclose(got[n].get(), ref[n], rtol=0, atol=tol)
    if layout == "strided":
        assert counts["gemm@cuda:1"] > 0
    assert counts["gemm@cuda:0"] == 0
    assert cp.cuda.runtime.getDevice() == 0


def test_cp_als_on_a_gpu_that_is_not_current_keeps_everything_there(monkeypatch):
    """CP-ALS on a tensor of cuda:1 while cuda:0 is current: the host-side R x R state's copies up (V^-1, the
    column norms, the weights at the end) land on cuda:1 with the factors, every engine GEMM runs there, and
    the model equals the CPU's."""
    cp, counts = _two_gpus(monkeypatch)
    X = make_low_rank_cp((12, 11, 10), 3, noise=0.05, random_state=4).data
    with cp.cuda.Device(1):
        Xd = cp.asarray(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        got = tk.cp_als(Xd, 3, tol=0, max_iter=6)
        ref = tk.cp_als(X, 3, tol=0, max_iter=6)
    assert cp.cuda.runtime.getDevice() == 0
    assert got.weights.device.id == 1 and [U.device.id for U in got.factors] == [1, 1, 1]
    assert counts["gemm@cuda:1"] > 0 and counts["gemm@cuda:0"] == 0
    np.testing.assert_allclose(got.fit_history, ref.fit_history, atol=_fit_tol(np.float64, ref.fit))
    np.testing.assert_allclose(to_numpy(got.to_dense()), ref.to_dense(), atol=1e4 * np.finfo(float).eps)


def test_work_runs_on_the_arrays_gpu_not_the_current_one(monkeypatch):
    """Arrays on cuda:1 while cuda:0 is current: results, cuBLAS handle and calls on cuda:1."""
    cp, counts = _two_gpus(monkeypatch)
    rng = np.random.default_rng(9)
    X, U = rng.standard_normal((6, 7, 8)), rng.standard_normal((7, 3))
    Us = [rng.standard_normal((n, 3)) for n in X.shape]
    with cp.cuda.Device(1):
        Xd, Ud, Fd = cp.asarray(X), cp.asarray(U), [cp.asarray(F) for F in Us]
    assert Xd.device.id == 1 and cp.cuda.runtime.getDevice() == 0
    results = [ttm(Xd, Ud, 1, transpose=True), contract("ijk,jr->irk", Xd, Ud), gram(Xd, 2),
               multi_ttm(Xd, [Ud], modes=[1], transpose=True), mttkrp(Xd, Fd, 1)]
    assert [r.device.id for r in results] == [1] * 5
    assert counts["gemm@cuda:1"] >= 5 and counts["gemm@cuda:0"] == 0
    _oracle_close(results[0], "ijk,jr->irk", X, U, dtype=np.float64)
    with cp.cuda.Device(0):
        V = cp.asarray(U)
    with pytest.raises(ValueError, match=r"the operands of one product live on GPUs \[0, 1\]; move them to one "
                                         r"device \(tuckerkit.backend.to_device\) or pass device="):
        ttm(Xd, V, 1, transpose=True)


def test_sparse_gpu_tensor_launches_on_its_own_gpu(monkeypatch):
    """The COO MTTKRP allocates and launches on the tensor's GPU (cuda:1), not the current one (cuda:0)."""
    cp, _ = _two_gpus(monkeypatch)
    import _fakecupy

    from tuckerkit.sparse import _gpu as sgpu

    S = make_sparse_tensor((9, 10, 11), nnz=200, random_state=4).data
    G = S.to(Device("cuda", 1))
    rng = np.random.default_rng(10)
    Us = [rng.standard_normal((n, 3)) for n in S.shape]
    with cp.cuda.Device(1):
        Ud = [cp.asarray(U) for U in Us]
    got = G.mttkrp(Ud, 1)  # the array route (the stand-in has no RawKernel)
    assert got.device.id == 1 and G.gram(0).device.id == 1
    np.testing.assert_allclose(to_numpy(got), mttkrp(S.to_dense(), Us, 1), rtol=1e-12, atol=1e-12)
    launches = []

    class Kernel:  # a RawKernel that records its name and the device current at its launch
        def __init__(self, source, name, options=()):
            self.name = name
            assert name == "coo_mttkrp" or options == ("--fmad=false",)  # the segmented sums round as written

        def __call__(self, grid, block, args):
            launches.append((self.name, _fakecupy._CURRENT[0]))

    monkeypatch.setattr(cp, "RawKernel", Kernel, raising=False)
    monkeypatch.setattr(sgpu, "_KERNELS", {})
    G.mttkrp(Ud, 0)  # mode 0's 200 nonzeros: two chunks of 128, a row across their boundary
    assert launches == [("coo_mttkrp_seg", 1), ("coo_mttkrp_join", 1)]
    assert G.layout(0).srow.device.id == 1
    G.mttkrp(Ud, 2)  # a mode the COO is not sorted by: its order is made on cuda:1 too
    assert G.layout(2).order.device.id == 1 and {d for _, d in launches} == {1}


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
        assert subspace_sine(U, V) <= _sine_tol(dtype)
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


@pytest.mark.parametrize("options", [
    {"normalize": False},
    {"fixed_modes": [2]},  # the last update is a fixed mode's: the fit's inner products are made apart
    {"fixed_modes": [0, 1, 2], "weights": True},  # every mode fixed: the start's weights stay the weights
    {"fixed_modes": [1], "weights": True},  # the start's weights go to the first free mode
    {"orthogonalize": 2, "linesearch": False},
    {"linesearch": True},  # jumps at iterations 6 and 8, kept or not by their fit
    {"huge": True},  # the operand's power-of-two scale moves the start into the first free factor
], ids=["unnormalized", "last-fixed", "all-fixed", "weights-to-free", "orthogonalize", "linesearch", "rescaled"])
def test_cp_als_options_on_device_equal_cpu(xp, dtype, options):
    """A device CP-ALS keeps its Grams and weights on the host (tuckerkit.decomposition._cp._GpuSmallState):
    every option's path gives the CPU's fits, model, weights and fixed factors, and a callback sees device
    weights."""
    X = make_low_rank_cp((14, 15, 16), 3, noise=0.05, dtype=dtype, random_state=1).data
    rng = np.random.default_rng(2)
    init = [rng.standard_normal((n, 3)).astype(dtype) for n in X.shape]
    kw = {"tol": 0, "max_iter": 8, **options}
    if kw.pop("huge", False):  # outside the range the operand keeps unscaled (2^+-40 float32, 2^+-200 float64)
        X = X * np.dtype(dtype).type(2.0 ** (60 if np.dtype(dtype) == np.float32 else 250))
    if kw.pop("weights", False):
        kw["init"] = (np.array([2.0, 0.5, 1.5], dtype=dtype), init)
    else:
        kw["init"] = init
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        ref = tk.cp_als(X, 3, **kw)
        dev_init = ((xp.asarray(kw["init"][0]), [xp.asarray(U) for U in kw["init"][1]])
                    if isinstance(kw["init"], tuple) else [xp.asarray(U) for U in kw["init"]])
        got = tk.cp_als(xp.asarray(X), 3, **{**kw, "init": dev_init},
                        callback=lambda st: seen.append(type(st.weights)))
    assert type(got.weights) is type(xp.asarray(X)) and got.weights.dtype == dtype
    assert seen == [type(xp.asarray(X))] * 8
    # measured on the stand-in: at most 121 eps apart (float32, a start's weights moved to a free mode); the
    # device route's Grams and norms are the same sums in another order
    tol = 2000 * np.finfo(dtype).eps
    np.testing.assert_allclose(got.fit_history, ref.fit_history, atol=_fit_tol(dtype, ref.fit))
    np.testing.assert_allclose(to_numpy(got.weights), ref.weights, rtol=tol)
    for U, V in zip(got.factors, ref.factors, strict=True):
        np.testing.assert_allclose(to_numpy(U), V, atol=tol * np.abs(V).max())
    for n in options.get("fixed_modes", []):
        np.testing.assert_array_equal(to_numpy(got.factors[n]), ref.factors[n])


@pytest.mark.parametrize("where", ["host", "cusolver"])
def test_hooi_factor_updates_on_either_side_of_host_eigh_max(xp, dtype, where, monkeypatch):
    """A device HOOI whose Grams (order 100-120: the certified subspace iteration's range) go to the host's
    LAPACK (the default up to HOST_EIGH_MAX), or stay on cuSOLVER (HOST_EIGH_MAX = 0): either way the CPU's
    fit and subspaces; both routes of leading_left_singular run (the start's I_n x I_n Grams, the sweeps'
    P x P Grams)."""
    from tuckerkit.engine import _subspace

    if where == "cusolver":  # (and the device's Grams: no projection copied down whole)
        monkeypatch.setattr(_subspace, "HOST_EIGH_MAX", 0)
        monkeypatch.setattr(_subspace, "HOST_ROUTE_MAX", 0)
    X = make_low_rank_tucker((120, 110, 100), (5, 6, 7), noise=0.05, dtype=dtype, random_state=0).data
    ref = tk.hooi(X, (5, 6, 7), tol=0, max_iter=3)
    got = tk.hooi(xp.asarray(X), (5, 6, 7), tol=0, max_iter=3)
    assert type(got.core) is type(xp.asarray(X)) and got.core.dtype == dtype
    assert abs(got.fit - ref.fit) <= _fit_tol(dtype, ref.fit)
    for U, V in zip(got.factors, ref.factors, strict=True):
        U = to_numpy(U).astype(np.float64)
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=10 * _tol(dtype))
        assert subspace_sine(U, V) <= _sine_tol(dtype)


@pytest.mark.parametrize("singular", [False, True])
def test_spd_solve_on_device(xp, dtype, singular):
    """CP-ALS's solve U V = M: M V^-1 for a definite V, the minimum-norm M pinv(V) for a singular one (two equal
    factor columns make every Hadamard product of Grams singular), on the host and the device alike."""
    from tuckerkit.decomposition._linalg import spd_solve

    rng = np.random.default_rng(5)
    B = rng.standard_normal((6, 20))
    if singular:
        B[5] = B[4]
    V, M = (B @ B.T).astype(dtype), rng.standard_normal((30, 6)).astype(dtype)
    got = spd_solve(xp.asarray(V), xp.asarray(M))
    assert type(got) is type(xp.asarray(M)) and got.dtype == dtype
    want = M.astype(np.float64) @ np.linalg.pinv(V.astype(np.float64), rcond=1e-6)
    np.testing.assert_allclose(to_numpy(got), want, atol=1e3 * _tol(dtype) * np.abs(want).max())


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


@pytest.mark.parametrize("kernel", ["segmented", "atomic"])
def test_sparse_mttkrp_on_device(xp, dtype, kernel):
    """Both GPU sparse kernels equal the dense MTTKRP on every mode (a short mode of 3 rows included); the
    segmented one (the default) gives the same bits on every call."""
    from tuckerkit.sparse._gpu import GpuCOOTensor

    S = make_sparse_tensor((9, 10, 3, 12), nnz=400, dtype=dtype, random_state=2).data
    if xp is np:
        pytest.skip("the GPU sparse tensor exists only on a cupy namespace")
    G = S.to(Device("cuda")) if kernel == "segmented" else GpuCOOTensor(S, Device("cuda"), kernel)
    assert G.plan().kind == f"coo_{kernel}"
    assert ("bitwise repeatable)" if kernel == "segmented" else "atomicAdd") in G.plan().explain()
    rng = np.random.default_rng(0)
    Us = [rng.standard_normal((n, 4)).astype(dtype) for n in S.shape]
    D = S.to_dense()
    for n in range(4):
        got = G.mttkrp([xp.asarray(U) for U in Us], n)
        ref = mttkrp(D, Us, n)
        np.testing.assert_allclose(to_numpy(got), ref, atol=_tol(dtype) * 50)
        if kernel == "segmented":
            for _ in range(3):
                np.testing.assert_array_equal(to_numpy(G.mttkrp([xp.asarray(U) for U in Us], n)), to_numpy(got))


def test_sparse_gpu_segment_layout(xp):
    """The segmented kernel's layout per mode: the nonzeros' stable order by the mode's index (none where the
    COO order already is), the rows spanning chunks of SEG_CHUNK, made once per mode; an unknown kernel name
    is a one-line error."""
    from tuckerkit.sparse._gpu import SEG_CHUNK, GpuCOOTensor, spanning_rows

    if xp is np:
        pytest.skip("the GPU sparse tensor exists only on a cupy namespace")
    S = make_sparse_tensor((3, 50, 40), nnz=1500, random_state=8).data  # mode 0: 3 rows of ~500 nonzeros
    G = S.to(Device("cuda"))
    for n in range(3):
        lay = G.layout(n)
        assert G.layout(n) is lay
        want = np.argsort(S.coords[:, n], kind="stable")
        if n == 0:
            assert lay.order is None and np.array_equal(want, np.arange(S.nnz))
        else:
            np.testing.assert_array_equal(to_numpy(lay.order), want)
        for got, exp in zip((lay.srow, lay.sfirst, lay.slast),
                            spanning_rows(S.coords[want, n].astype(np.int64), SEG_CHUNK), strict=True):
            np.testing.assert_array_equal(to_numpy(got), exp)
    assert to_numpy(G.layout(0).srow).tolist() == [0, 1, 2]  # each of mode 0's rows spans several chunks
    with pytest.raises(ValueError, match=r"kernel='fast' is not a GPU sparse MTTKRP kernel; expected 'segmented' "
                                         r"or 'atomic'"):
        GpuCOOTensor(S, Device("cuda"), "fast")


@pytest.mark.parametrize("copied_down", [True, False])
def test_host_round_trips_per_iteration(xp, copied_down, monkeypatch):
    """Per iteration, the small eigenproblems and solves run on the host's LAPACK (cuSOLVER is latency-bound
    there): HOOI one round trip per mode where its projection is copied down whole (HOST_ROUTE_MAX: the
    projection and the factor it replaces in one copy, the vectors up); else one on the Gram route (the Gram
    down, the vectors up), two on the other (the P x P Gram, then M V for its thin QR); and the fit (one
    scalar); CP-ALS, whose Grams and weights live
    on the host, one per mode (the new factor's Gram down, with the fit's inner products on the last mode; V
    is host arithmetic and its inverse goes up without a wait), and a line-search jump one more for its
    Grams and one for its fit's inner products. Nothing else: no tensor-sized copy, no per-element check."""
    from tuckerkit.engine import _subspace
    from tuckerkit.engine._subspace import gram_route

    counts = _counts(xp)
    if counts is None:
        pytest.skip("counted on the cupy stand-in")
    if not copied_down:
        monkeypatch.setattr(_subspace, "HOST_ROUTE_MAX", 0)
    X = xp.asarray(make_low_rank_tucker((20, 22, 24), (3, 4, 5), noise=0.01, random_state=0).data)
    Y = xp.asarray(make_low_rank_cp((20, 22, 24), 4, noise=0.01, random_state=0).data)
    per_run = {}
    for name, run in (("hooi", lambda k: tk.hooi(X, (3, 4, 5), tol=0, max_iter=k)),
                      ("cp_als", lambda k: tk.cp_als(Y, 4, tol=0, max_iter=k, linesearch=False)),
                      # a line-search jump (iterations 6, 8, ...) decides on its fit: one more scalar
                      ("cp_als_linesearch", lambda k: tk.cp_als(Y, 4, tol=0, max_iter=k))):
        totals = []
        for k in (3, 7) if name != "cp_als_linesearch" else (5, 9):
            counts.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", tk.ConvergenceWarning)
                run(k)
            totals.append(counts["sync"] + counts["d2h"])
        per_run[name] = (totals[1] - totals[0]) / 4
    # the mode-n projection of X (20, 22, 24) by the other factors (ranks 3, 4, 5)
    hooi = 1 + sum(1 if gram_route(shape, n, r) else 2
                   for n, (shape, r) in enumerate((((20, 4, 5), 3), ((3, 22, 5), 4), ((3, 4, 24), 5))))
    assert hooi == 6  # modes 0, 1, 2: the Gram route (20 <= 4 * 5), then P = 15 < 22 and P = 12 < 24
    if copied_down:
        hooi = 1 + 3
    assert per_run == {"hooi": hooi, "cp_als": 3.0, "cp_als_linesearch": 3.0 + 2 / 2}


# ---------------------------------------------------------------------------------------------- devices
def test_parse_device_errors():
    assert parse_device("cuda:2") == Device("cuda", 2) and str(parse_device("GPU")) == "cuda:0"
    for bad in ("tpu", "cuda:x", "cpu:1", 3):
        with pytest.raises(ValueError, match=r"device=.* is not a device; expected 'cpu', 'cuda' or 'cuda:N'"):
            parse_device(bad)


def test_cuda_without_cupy_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    X = np.ones((3, 4, 5))
    with pytest.raises(DeviceError, match=r"^device='cuda' needs cupy, which is not installed; install it with: "
                                          r"pip install 'tuckerkit\[gpu-cuda13\]' for a CUDA 13 driver, or "
                                          r"'tuckerkit\[gpu-cuda12\]' for CUDA 12 \(nvidia-smi shows the "
                                          r"version\)$"):
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


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segmented_kernel_source_runs_on_cpu(tmp_path, dtype, ordered):
    """The segmented (bitwise-repeatable) kernels' CUDA C, compiled for the CPU with serial grid loops, on the
    layout GpuCOOTensor.layout makes: equal to the dense MTTKRP on every mode, for chunks of 1 to 128 nonzeros
    (rows inside one chunk, rows spanning many, a chunk inside one row, nnz not a multiple of the chunk), a
    short mode of 2 rows, rows with no nonzeros; and every output element is one sum in a fixed order: the
    kernel's result equals a float64-free replay of that order exactly."""
    from tuckerkit.sparse._gpu import segmented_source, spanning_rows

    ctype = "float" if dtype == np.float32 else "double"
    src = ("struct tk_dim3 { long long x; };\nstatic tk_dim3 blockIdx, blockDim, threadIdx;\n"
           "#define __global__\n#define __restrict__ __restrict\n"
           + segmented_source(dtype, np.int32, ordered) +
           f'extern "C" void grid(long long nnz, int N, int R, int mode, int chunk, const int* c, const {ctype}* v, '
           f"const {ctype}* F, const long long* off, const long long* order, {ctype}* out, {ctype}* part, "
           "long long ns, const long long* srow, const long long* sfirst, const long long* slast) {\n"
           "  blockDim.x = 64; long long nch = (nnz + chunk - 1) / chunk;\n"
           "  for (long long b = 0; b < (nch * R + 63) / 64; ++b) for (int t = 0; t < 64; ++t) {\n"
           "    blockIdx.x = b; threadIdx.x = t;\n"
           "    coo_mttkrp_seg(nnz, N, R, mode, chunk, c, v, F, off, order, out, part); }\n"
           "  for (long long b = 0; b < (ns * R + 63) / 64; ++b) for (int t = 0; t < 64; ++t) {\n"
           "    blockIdx.x = b; threadIdx.x = t; coo_mttkrp_join(ns, R, srow, sfirst, slast, part, out); } }\n")
    (tmp_path / "k.cpp").write_text(src)
    so = tmp_path / "k.so"
    subprocess.run(["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "k.cpp")],
                   check=True)
    lib = ctypes.CDLL(str(so))
    p = ctypes.c_void_p
    for shape, nnz in (((2, 9, 8), 140), ((7, 8, 9, 10), 300), ((40, 3, 5), 57)):
        S = make_sparse_tensor(shape, nnz=nnz, dtype=dtype, random_state=5).data
        if shape[0] == 40:  # rows 30-39 of mode 0 hold no nonzero
            keep = S.coords[:, 0] < 30
            S = type(S)(S.coords[keep], S.values[keep], shape)
        rng = np.random.default_rng(2)
        R = 3
        Us = [rng.standard_normal((n, R)).astype(dtype) for n in S.shape]
        coords = np.ascontiguousarray(S.coords.T, dtype=np.int32)
        F = np.ascontiguousarray(np.concatenate(Us))
        off = np.concatenate([[0], np.cumsum(S.shape)[:-1]]).astype(np.int64)
        vals = np.ascontiguousarray(S.values)
        D = S.to_dense()
        for n in range(S.ndim):
            order = np.argsort(coords[n], kind="stable").astype(np.int64)
            if not ordered and np.any(np.diff(coords[n]) < 0):
                continue  # the unordered variant reads the COO order: only a mode it is sorted by
            rows = coords[n][order] if ordered else coords[n]
            for chunk in (1, 2, 3, 7, 128):
                srow, sfirst, slast = spanning_rows(rows.astype(np.int64), chunk)
                nch = -(-S.nnz // chunk)
                out = np.zeros((S.shape[n], R), dtype)
                part = np.full((2 * nch, R), np.nan, dtype)  # a slot read before it is written shows as NaN
                lib.grid(ctypes.c_longlong(S.nnz), S.ndim, R, n, chunk, p(coords.ctypes.data), p(vals.ctypes.data),
                         p(F.ctypes.data), p(off.ctypes.data), p(order.ctypes.data), p(out.ctypes.data),
                         p(part.ctypes.data), ctypes.c_longlong(srow.size), p(srow.ctypes.data),
                         p(sfirst.ctypes.data), p(slast.ctypes.data))
                np.testing.assert_allclose(out, mttkrp(D, Us, n), atol=_tol(dtype) * 50)
                # the fixed order: per chunk, a running sum of the row's products; chunks' sums added in order
                pos = order if ordered else np.arange(S.nnz)
                prod = np.ones((S.nnz, R), dtype) * vals[:, None]
                for m in range(S.ndim):
                    if m != n:
                        prod = prod * Us[m][coords[m]]
                want = np.zeros((S.shape[n], R), dtype)
                for row in np.unique(rows):
                    idx = pos[rows == row]
                    total = None
                    for c in np.unique(np.flatnonzero(rows == row) // chunk):
                        acc = np.zeros(R, dtype)
                        for e in pos[c * chunk:(c + 1) * chunk]:
                            if coords[n][e] == row:
                                acc = (acc + prod[e]).astype(dtype)
                        total = acc if total is None else (total + acc).astype(dtype)
                    assert idx.size and total is not None
                    want[row] = total
                np.testing.assert_array_equal(out, want)


def test_gpu_benchmark_script_runs(xp, tmp_path, monkeypatch):
    """benchmarks/gpu.py end to end at smoke sizes (on the stand-in here, on the GPU with -m gpu): every section
    passes its check, and the results record the status of each section and the device."""
    if xp is np:
        pytest.skip("a GPU benchmark")
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    import _common
    import gpu

    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    monkeypatch.setattr(gpu, "RESULTS", tmp_path)
    assert gpu.main(["--quick", "--no-tensorly", "--dtypes", "float64"]) == 0
    import json

    out = json.loads((tmp_path / "gpu_quick.json").read_text())
    assert out["status"] == {s: {"ok": True, "error": None, "seconds": out["status"][s]["seconds"]}
                             for s in gpu.SECTIONS}
    assert out["environment"]["device"]["gpu"] and out["environment"]["device"]["gpus"] >= 1
    assert len(out["contractions"]) == 72 and max(r["err_over_bound"] for r in out["contractions"]) <= 1
    assert {r["method"] for r in out["tucker"] + out["cp"]} == {"hooi", "cp_als"}
    assert {r["case"] for r in out["sparse"]} == {"cp_als", "short_mode"}
    assert {r["kernel"] for r in out["sparse"] if r["case"] == "short_mode"} == {"segmented", "atomic"}
    assert all(r["repeatable"] for r in out["sparse"] if r["case"] == "cp_als")
    assert [r["call"] for r in out["profile"]] == ["hooi", "cp_als"]
    assert all(r["wall_s"] > 0 and r["top_own_time"][0]["own_s"] >= r["top_own_time"][-1]["own_s"]
               for r in out["profile"])
    assert "== hooi:" in (tmp_path / "gpu_quick_profile.txt").read_text()
    assert {r["problem"] for r in out["linalg"]} == {"gram_eigh", "hooi_projection", "cp_solve"}
    assert all(r["ok"] for r in out["linalg"])
    assert [(r["n"], r["ok"]) for r in out["hostroute"]] == [(20, True)]
    # the A/B restores the defaults after each call
    from tuckerkit.engine import _operand, _subspace

    assert (_subspace.HOST_ROUTE_MAX, _operand.DEVICE_NORM_HOST_MAX) == (1 << 16, 1 << 16)
    md = (tmp_path / "gpu_quick.md").read_text()
    assert "| n | dtype | rank | GPU ms/it |" in md and "| sparse | passed |" in md and "short / long" in md
    assert "| n | dtype | host route ms/it | device route ms/it | host / device |" in md
    # --update: the section run replaces its rows, the others are kept as they were
    assert gpu.main(["linalg", "--quick", "--update", "--dtypes", "float64"]) == 0
    again = json.loads((tmp_path / "gpu_quick.json").read_text())
    assert again["contractions"] == out["contractions"] and again["sparse"] == out["sparse"]
    assert set(again["status"]) == set(gpu.SECTIONS) and again["kept_from_earlier_run"]["sections"] == [
        s for s in gpu.SECTIONS if s != "linalg"]
    assert "cuSOLVER / host" in (tmp_path / "gpu_quick.md").read_text()


def test_gpu_benchmark_records_a_failed_section(xp, tmp_path, monkeypatch):
    """A section that raises is recorded as FAILED with its error, the others still run, and the exit code is 1."""
    if _counts(xp) is None:
        pytest.skip("on the cupy stand-in")
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    import _common
    import gpu

    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    monkeypatch.setattr(gpu, "RESULTS", tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")

    monkeypatch.setattr(gpu, "ttm_section", broken)
    assert gpu.main(["ttm", "cp", "--quick", "--no-tensorly", "--dtypes", "float64"]) == 1
    import json

    out = json.loads((tmp_path / "gpu_quick.json").read_text())
    assert out["status"]["ttm"]["ok"] is False
    assert out["status"]["ttm"]["error"] == "RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED"
    assert out["status"]["cp"]["ok"] is True and len(out["cp"]) == 2
    assert "| ttm | FAILED | RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED |" in (tmp_path / "gpu_quick.md").read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_gpu_fails_without_a_gpu(tmp_path):
    """`make test-gpu` where the interpreter has no cupy, or cupy sees no GPU: exit non-zero with one line."""
    from conftest import cupy_unavailable

    if cupy_unavailable() is None:
        pytest.skip("a GPU is present: make test-gpu would run")
    root = Path(__file__).resolve().parents[1]
    fake = tmp_path / "nocupy"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text("import sys\nsys.modules['cupy'] = None\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    res = subprocess.run(["make", "-s", "-C", str(root), "test-gpu", f"GPU_PYTHON={sys.executable}",
                          f"GPU_VENV={tmp_path / 'venv'}"], env=env | {"PYTHONPATH": str(fake)},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("test-gpu:")]
    assert lines == [f"test-gpu: FAILED: {sys.executable} cannot import cupy (ModuleNotFoundError: import of cupy "
                     "halted; None in sys.modules); run it where cupy is installed or name that interpreter: "
                     "make test-gpu GPU_PYTHON=/path/to/python"]
    assert not (tmp_path / "venv").exists()  # nothing built
    (fake / "cupy").mkdir()  # a cupy that imports but finds no GPU
    (fake / "sitecustomize.py").write_text("")
    (fake / "cupy" / "__init__.py").write_text(
        "import types\n__version__ = '14.2.0'\n"
        "def _count():\n    raise RuntimeError('cudaErrorNoDevice: no CUDA-capable device is detected')\n"
        "cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=_count))\n")
    res = subprocess.run(["make", "-s", "-C", str(root), "test-gpu", f"GPU_PYTHON={sys.executable}",
                          f"GPU_VENV={tmp_path / 'venv'}"], env=env | {"PYTHONPATH": str(fake)},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("test-gpu:")] == [
        "test-gpu: FAILED: cupy 14.2.0 finds no usable CUDA GPU (RuntimeError: cudaErrorNoDevice: no CUDA-capable "
        "device is detected)"]


def test_require_gpu_fails_the_real_cupy_variants(tmp_path):
    """Under TUCKERKIT_REQUIRE_GPU=1 a real-cupy variant without a GPU fails with the reason (not a skip)."""
    from conftest import cupy_unavailable

    why = cupy_unavailable()
    if why is None:
        pytest.skip("a GPU is present: the real-cupy variants run")
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header",
                          "tests/test_gpu.py::test_gemm_call_cases", "tests/test_gpu.py::test_may_share_bounds",
                          "tests/test_gpu.py::test_device_views_and_float32"],
                         cwd=root, env=os.environ | {"TUCKERKIT_REQUIRE_GPU": "1"}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1, res.stdout[-2000:]  # the fixture fails: an error at setup, counted as a failure
    assert f"\nTUCKERKIT_REQUIRE_GPU=1 but {why}\n" in res.stdout
    assert res.stdout.strip().splitlines()[-1].startswith("4 passed, 1 error")


def test_a_fused_host_mttkrp_plan_refuses_device_arrays(monkeypatch):
    """A fused MTTKRP plan (a 3-way host tensor's compiled one-pass form) reused for a device array of the same
    shape, strides and dtype is refused in one line, as a contraction plan is, never handed to the host kernel."""
    import _fakecupy

    from tuckerkit.engine import mttkrp, mttkrp_plan
    from tuckerkit.engine._simd import simd_supported

    if not simd_supported():
        pytest.skip("the compiled kernels need AVX2 and FMA")
    cp, _ = _fakecupy.make()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 70, 80))
    F = [rng.standard_normal((s, 10)) for s in X.shape]
    plan = mttkrp_plan(X, F, 0)
    assert plan.fused
    Xd, Fd = cp.asarray(X), [cp.asarray(U) for U in F]
    with pytest.raises(ValueError, match=r"^plan was made for device 'cpu'; received arrays of the other kind$"):
        mttkrp(Xd, Fd, 0, plan=plan)


@pytest.mark.parametrize("shape, ranks", [((10, 10, 10), (3, 3, 3)), ((20, 20, 20), (2, 2, 2)),
                                          ((8, 8, 8, 8), (3, 3, 3, 3)), ((200, 10, 10), (5, 5, 5)),
                                          ((6, 7, 8), (2, 3, 2))])
def test_a_tucker_models_full_tensor_is_c_ordered(xp, shape, ranks):
    """``TuckerTensor.to_dense()`` (and ``full()``, ``numpy.asarray``) gives a C-ordered array on the model's
    device whatever order of its axes the engine's last product left (several of these shapes come out of it
    permuted), with the values of ``core x_n U_n`` by ``numpy.einsum``."""
    rng = np.random.default_rng(0)
    core = rng.standard_normal(ranks)
    Us = [np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    T = tk.TuckerTensor(xp.asarray(core), tuple(xp.asarray(U) for U in Us))
    full = T.to_dense()
    assert type(full) is type(xp.asarray(core)) and full.flags.c_contiguous and full.shape == shape
    letters = "abcd"[:len(shape)]
    want = np.einsum(",".join([letters.upper()] + [f"{a}{b}" for a, b in zip(letters, letters.upper(), strict=True)])
                     + "->" + letters, core, *Us)
    got = np.asarray(full) if xp is np else np.asarray(T.to("cpu").to_dense())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.abs(want).max())
    if xp is np:
        assert np.asarray(T).flags.c_contiguous and T.full().flags.c_contiguous


@pytest.mark.parametrize("shape, rank", [((10, 10, 10), 5), ((8, 8, 8, 8), 3), ((200, 10, 10), 5), ((12, 9, 7), 2)])
def test_every_tucker_methods_core_and_factors_are_c_ordered(xp, shape, rank):
    """``hosvd``, ``st_hosvd`` and ``hooi`` give a C-ordered core and C-ordered factors on the input's device (the
    engine's last projection had left ``hosvd``'s core of these shapes in another order of its axes), the core
    ``X x_n U_n^T`` of the factors given to ``numpy.einsum``'s precision."""
    X = np.random.default_rng(1).standard_normal(shape)
    for f in (tk.hosvd, tk.st_hosvd, tk.hooi):
        T = f(xp.asarray(X), rank)
        assert T.core.flags.c_contiguous and all(U.flags.c_contiguous for U in T.factors), f.__name__
        Th = T.to("cpu") if xp is not np else T
        letters = "abcd"[:len(shape)]
        want = np.einsum(",".join([letters] + [f"{a}{b}" for a, b in zip(letters, letters.upper(), strict=True)])
                         + "->" + letters.upper(), X, *Th.factors)
        np.testing.assert_allclose(Th.core, want, rtol=0, atol=1e-12 * np.abs(X).sum())
