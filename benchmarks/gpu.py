"""GPU benchmarks (cupy): Table II contractions, TTM vs the device-copy floor, HOOI and CP-ALS vs TensorLy-cupy,
sparse CP-ALS and the sparse MTTKRP's kernels on a short mode.

* contractions: the 36 seed Table II cases on n x n and n x n x n device arrays: tuckerkit (cuBLAS strided-batched
  GEMM on views) vs ``cupy.einsum`` (cuTENSOR when cupy enables it) vs TTGT on cupy (permute copies, one GEMM);
  each result checked elementwise against a float64 ``cupy.einsum`` (|C - ref| <= 4 (k + 2) eps |A||B|);
* ttm: ``X x_n U^T`` for every mode, ranks 8 and 16, vs one device copy of X (the bandwidth floor);
* tucker: HOOI, core 10^3 on n^3 tensors (seed Fig. 9), the same initial factors and iterations for tuckerkit
  on the GPU, TensorLy with its cupy backend, and tuckerkit on the CPU; float32 and float64; the GPU fit must
  equal the CPU fit to rounding;
* cp: CP-ALS, rank 10 and 50, same set-up;
* linalg: the small eigenproblems and solves of the factor updates, cuSOLVER on the device vs the host's LAPACK
  with the copies (what tuckerkit does up to order ``HOST_EIGH_MAX``): an n x n Gram's leading 10 pairs
  (``cupy.linalg.eigh`` vs the host's ``eigh_desc`` on one BLAS thread), HOOI's n x 100 projection
  (``cupy.linalg.svd`` vs ``leading_left_singular``), and CP-ALS's R x R solve (the former ``eigh``
  pseudo-inverse vs ``spd_solve``);
* profile: where a device HOOI and CP-ALS call spends its host time (cProfile of one 10-iteration call each on
  a float64 n^3 tensor, n = 200; the top functions by own time and by cumulative time, in the JSON and in
  ``gpu_profile.txt``): the GPU path is bound by host overhead at these sizes, so this says what to trim;
* sparse: CP-ALS (rank 16) on the project's sparse benchmark tensors, GPU (COO; the segmented kernel, the
  default, and the atomic one) vs tuckerkit's CPU kernel, same initial factors, and whether two GPU runs give
  the same bits (the segmented kernel must); and one MTTKRP on a short mode (8 rows: every atomicAdd of the
  atomic kernel lands on 8 x R addresses) vs a long mode of the same tensor, per kernel (``short_over_long``).

Times are medians of interleaved repeats with a device synchronization before each clock read; device memory
is cupy's memory pool after each run (pool freed before). A section that raises or fails its check is
recorded as failed (``status`` in the JSON and the markdown) and the run goes on; the exit code is 1 when any
failed. The device (name, compute capability, memory, CUDA runtime and driver versions, cupy) is recorded.
Results are written after each section, so a run cut short keeps what it measured.
Needs a CUDA GPU and cupy (``tuckerkit[gpu-cuda13]`` or ``[gpu-cuda12]``); TensorLy for its columns.
``make test-gpu`` runs it after the real-GPU tests on a machine with a preinstalled cupy.

* hostroute: device HOOI with its small pieces on the host (a projection of at most ``HOST_ROUTE_MAX``
  elements copied down whole for its factor step, a core's norm summed on the host: the defaults) against the
  device's own route for them, alternating calls, n = 100-800, the fits equal to rounding.

Run:  python benchmarks/gpu.py [contractions ttm tucker cp linalg sparse profile hostroute] [--quick]
      [--sizes 200,400,800] [--update]
Writes benchmarks/results/gpu.{json,md,png} (``--quick``: gpu_quick.*, a smoke run that keeps the real results;
``--update``: the sections run replace theirs in the existing results, the others are kept).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
from _common import environment, geomean, write_json, write_text
from contractions import table2, ttgt
from tuckerkit.datasets import make_low_rank_cp, make_low_rank_tucker, make_sparse_benchmark, make_sparse_tensor

import tuckerkit as tk
from tuckerkit.engine import contract, plan_contraction, ttm

SECTIONS = ("contractions", "ttm", "tucker", "cp", "linalg", "sparse", "profile", "hostroute")
RESULTS = _common.RESULTS


class CheckFailed(RuntimeError):
    """A section ran but its results are wrong."""


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (for the JSON and a markdown table cell)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".replace("|", "/")[:300]


def _sync(cp) -> None:
    cp.cuda.runtime.deviceSynchronize()


def _median_times(cp, fns: dict, repeat: int) -> dict[str, float]:
    for fn in fns.values():  # warm-up: plans, cuBLAS handles, kernel compilation
        fn()
    _sync(cp)
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeat):
        for k in names[r % len(names):] + names[: r % len(names)]:
            _sync(cp)
            t0 = time.perf_counter()
            fns[k]()
            _sync(cp)
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _fit_tol(dt, fit: float) -> float:
    """GPU and CPU fits of the same run agree to rounding, amplified near a perfect fit (1 - fit small)."""
    return float(100 * np.finfo(dt).eps / max(1 - fit, 1e-3))


def contractions(cp, sizes, dtypes, repeat):
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        for dt in dtypes:
            A = cp.asarray(rng.standard_normal((n, n)).astype(dt))
            B = cp.asarray(rng.standard_normal((n, n, n)).astype(dt))
            A64, B64 = A.astype(np.float64), B.astype(np.float64)
            aA, aB = cp.abs(A64), cp.abs(B64)
            for case, spec in table2():
                plan = plan_contraction(spec, A, B)
                got = contract(spec, A, B, plan=plan)
                ref = cp.einsum(spec, A64, B64)
                bound = 4 * (n + 2) * float(np.finfo(dt).eps) * cp.einsum(spec, aA, aB)
                worst = float(cp.max(cp.abs(got.astype(np.float64) - ref) / (bound + np.finfo(dt).tiny)))
                err = float(cp.max(cp.abs(got - ref)) / max(float(cp.max(cp.abs(ref))), 1e-30))
                t = _median_times(cp, {"tuckerkit": lambda s=spec, p=plan, A=A, B=B: contract(s, A, B, plan=p),
                                       "cupy_einsum": lambda s=spec, A=A, B=B: cp.einsum(s, A, B),
                                       "ttgt": lambda s=spec, A=A, B=B: ttgt(s, A, B, xp=cp)}, repeat)
                rows.append({"case": case, "spec": spec, "n": n, "dtype": dt, "kind": str(plan.kind),
                             "copies": plan.copies, **{f"t_{k}": v for k, v in t.items()},
                             "speedup_einsum": t["cupy_einsum"] / t["tuckerkit"],
                             "speedup_ttgt": t["ttgt"] / t["tuckerkit"], "rel_err": err, "err_over_bound": worst,
                             "ok": worst <= 1})
                print(f"n={n} {dt} {case} {spec:12s} tk {t['tuckerkit'] * 1e3:.3f} ms  einsum x"
                      f"{rows[-1]['speedup_einsum']:.2f}  ttgt x{rows[-1]['speedup_ttgt']:.2f}"
                      f"{'' if worst <= 1 else '  WRONG: error ' + format(worst, '.1f') + 'x its bound'}", flush=True)
    bad = [f"{r['case']} n={r['n']} {r['dtype']}" for r in rows if not r["ok"]]
    if bad:
        raise CheckFailed(f"{len(bad)} contraction(s) exceed the GEMM error bound: {', '.join(bad[:5])}")
    return rows


def ttm_section(cp, n, dtypes, ranks, repeat):
    rows = []
    rng = np.random.default_rng(1)
    for dt in dtypes:
        X = cp.asarray(rng.standard_normal((n, n, n)).astype(dt))
        for r in ranks:
            for mode in range(3):
                U = cp.asarray(rng.standard_normal((n, r)).astype(dt))
                t = _median_times(cp, {"tuckerkit": lambda U=U, m=mode, X=X: ttm(X, U, m, transpose=True),
                                       "copy": lambda X=X: X.copy()}, repeat)
                rows.append({"n": n, "dtype": dt, "rank": r, "mode": mode, "t_tuckerkit": t["tuckerkit"],
                             "t_copy": t["copy"], "over_copy": t["tuckerkit"] / t["copy"],
                             "copy_GBps": 2 * X.nbytes / t["copy"] / 1e9})
                print(f"TTM n={n} {dt} R={r} mode {mode}: {t['tuckerkit'] * 1e3:.3f} ms = "
                      f"{rows[-1]['over_copy']:.2f}x a device copy", flush=True)
    return rows


def linalg_section(cp, orders, repeat):
    """cuSOLVER on the device vs the host route (copy down, LAPACK, copy up) for the factor updates' small
    problems; each pair of results checked against the other."""
    from tuckerkit.backend import to_host
    from tuckerkit.decomposition._linalg import spd_solve
    from tuckerkit.engine import ExecutionPolicy, blas_pinned
    from tuckerkit.engine._subspace import _on_host, eigh_desc, leading_left_singular

    def host_eigh(G, r):  # what eigh_desc does with a device Gram of order <= HOST_EIGH_MAX, at any order
        with blas_pinned():
            return _on_host(cp, *eigh_desc(to_host(G), r))

    rows = []
    rng = np.random.default_rng(4)
    policy = ExecutionPolicy()
    for n in orders:  # an n x n Gram (decaying spectrum), its 10 leading pairs
        A = rng.standard_normal((n, 2 * n)) * (0.9 ** np.arange(n))[:, None]
        G = cp.asarray(A @ A.T)
        r = min(10, n - 1)
        t = _median_times(cp, {"device": lambda G=G: cp.linalg.eigh(G),
                               "host": lambda G=G, r=r: host_eigh(G, r)}, repeat)
        w_dev = cp.asnumpy(cp.linalg.eigh(G)[0])[::-1][:r]
        w_host = cp.asnumpy(host_eigh(G, r)[0])
        ok = bool(np.allclose(w_dev, w_host, rtol=1e-10, atol=1e-12 * abs(w_dev[0])))
        rows.append({"problem": "gram_eigh", "n": n, "r": r, "t_device": t["device"], "t_host": t["host"],
                     "device_over_host": t["device"] / t["host"], "ok": ok})
    for n in (o for o in orders if o >= 100):  # HOOI's n x 100 projection: its 10 leading left vectors
        Y = cp.asarray(rng.standard_normal((n, 10, 10)))
        M = Y.reshape(n, 100)
        t = _median_times(cp, {"device": lambda M=M: cp.linalg.svd(M, full_matrices=False),
                               "host": lambda Y=Y: leading_left_singular(Y, 0, 10, policy)}, repeat)
        Ud = cp.linalg.svd(M, full_matrices=False)[0][:, :10]
        Uh = leading_left_singular(Y, 0, 10, policy)[0]
        gap = float(cp.linalg.norm(Ud @ Ud.T - Uh @ Uh.T))  # the same subspace
        rows.append({"problem": "hooi_projection", "n": n, "r": 10, "t_device": t["device"], "t_host": t["host"],
                     "device_over_host": t["device"] / t["host"], "ok": gap < 1e-8})
    for R in (10, 50):  # CP-ALS: U V = M, M 400 x R
        B = rng.standard_normal((R, 3 * R))
        V = cp.asarray(B @ B.T)
        M = cp.asarray(rng.standard_normal((400, R)))

        def old(V=V, M=M):
            w, Q = cp.linalg.eigh(V)
            cut = cp.finfo(V.dtype).eps * V.shape[0] * cp.max(cp.abs(w))
            inv = cp.where(w > cut, 1 / cp.where(w > cut, w, 1), 0).astype(V.dtype)
            return ((M @ Q) * inv[None, :]) @ Q.T

        t = _median_times(cp, {"device": old, "host": lambda V=V, M=M: spd_solve(V, M)}, repeat)
        err = float(cp.max(cp.abs(old() - spd_solve(V, M))) / cp.max(cp.abs(old())))
        rows.append({"problem": "cp_solve", "n": R, "r": R, "t_device": t["device"], "t_host": t["host"],
                     "device_over_host": t["device"] / t["host"], "ok": err < 1e-8})
    for row in rows:
        print(f"linalg {row['problem']} n={row['n']}: cuSOLVER {row['t_device'] * 1e3:.3f} ms, host route "
              f"{row['t_host'] * 1e3:.3f} ms (x{row['device_over_host']:.1f})" + ("" if row["ok"] else "  WRONG"),
              flush=True)
    bad = [f"{r['problem']} n={r['n']}" for r in rows if not r["ok"]]
    if bad:
        raise CheckFailed(f"the host and device routes disagree: {', '.join(bad)}")
    return rows


def _pool_bytes(cp, fn):
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks() if hasattr(pool, "free_all_blocks") else None
    out = fn()
    _sync(cp)
    return out, int(pool.total_bytes())


def _tensorly(with_tensorly: bool, notes: list[str]):
    if not with_tensorly:
        return None
    try:
        import tensorly
    except ImportError as exc:
        notes.append(f"TensorLy-cupy not run: {exc} (carry its wheel: make test-gpu WHEELS=dir)")
        return None
    return tensorly


def decompositions(cp, kind, sizes, dtypes, iters, repeat, with_tensorly, notes):
    rows = []
    tl = _tensorly(with_tensorly, notes)
    for n in sizes:
        for dt in dtypes:
            if kind == "tucker":
                data = make_low_rank_tucker((n, n, n), (10, 10, 10), noise=0.01, dtype=dt,
                                                        random_state=0).data
                init = tk.st_hosvd(data, (10, 10, 10))
            else:
                data = make_low_rank_cp((n, n, n), 10, noise=0.01, dtype=dt, random_state=0).data
            Xd = cp.asarray(data)
            for R in ((10,) if kind == "tucker" else (10, 50)):
                if kind == "tucker":
                    def gpu(Xd=Xd, init=init):
                        return tk.hooi(Xd, (10, 10, 10), init=init, tol=0, max_iter=iters)

                    def cpu(data=data, init=init):
                        return tk.hooi(data, (10, 10, 10), init=init, tol=0, max_iter=iters)
                else:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        init = tk.cp_als(data, R, tol=0, max_iter=1, random_state=0, linesearch=False)
                    def gpu(Xd=Xd, init=init, R=R):
                        return tk.cp_als(Xd, R, init=init, tol=0, max_iter=iters, linesearch=False)

                    def cpu(data=data, init=init, R=R):
                        return tk.cp_als(data, R, init=init, tol=0, max_iter=iters, linesearch=False)
                fns = {"tuckerkit_gpu": gpu, "tuckerkit_cpu": cpu}
                if tl is not None:
                    runner = _tensorly_runner(tl, cp, kind, Xd, init, R, iters)
                    try:  # TensorLy is a reference, not the thing tested: its failure is noted, not fatal
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            runner()
                        fns["tensorly_cupy"] = runner
                    except Exception as exc:
                        notes.append(f"TensorLy-cupy failed, its columns are n/a: {_one_line(exc)}")
                        tl = None
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res, pool = _pool_bytes(cp, gpu)
                    ref = cpu()
                    t = _median_times(cp, fns, repeat)
                diff = abs(res.fit - ref.fit)
                row = {"method": "hooi" if kind == "tucker" else "cp_als", "n": n, "dtype": dt, "rank": R,
                       "iterations": iters, **{f"t_{k}": v / iters for k, v in t.items()}, "fit_gpu": res.fit,
                       "fit_cpu": ref.fit, "ok": diff <= _fit_tol(dt, ref.fit),
                       "gpu_pool_bytes": pool, "input_bytes": int(Xd.nbytes),
                       "speedup_cpu": t["tuckerkit_cpu"] / t["tuckerkit_gpu"]}
                if "tensorly_cupy" in t:
                    row["speedup_tensorly_cupy"] = t["tensorly_cupy"] / t["tuckerkit_gpu"]
                rows.append(row)
                print(f"{row['method']} n={n} {dt} R={R}: GPU {row['t_tuckerkit_gpu'] * 1e3:.2f} ms/it, CPU x"
                      f"{row['speedup_cpu']:.1f}" + (f", TensorLy-cupy x{row['speedup_tensorly_cupy']:.1f}"
                                                     if "speedup_tensorly_cupy" in row else "")
                      + ("" if row["ok"] else f"  WRONG: fit {res.fit:.8f} on the GPU, {ref.fit:.8f} on the CPU"),
                      flush=True)
    bad = [f"{r['method']} n={r['n']} {r['dtype']} R={r['rank']}" for r in rows if not r["ok"]]
    if bad:
        raise CheckFailed(f"the GPU fit differs from the CPU fit beyond rounding: {', '.join(bad[:5])}")
    return rows


def _tensorly_runner(tl, cp, kind, Xd, init, R, iters):
    import tensorly.decomposition as tld

    def run():
        tl.set_backend("cupy")
        try:
            if kind == "tucker":
                core0, f0 = cp.asarray(init.core), [cp.asarray(U) for U in init.factors]
                return tld.tucker(Xd, rank=[10, 10, 10], init=(core0, f0), n_iter_max=iters, tol=0)
            w0, f0 = cp.asarray(init.weights), [cp.asarray(U) for U in init.factors]
            return tld.parafac(Xd, R, init=(w0, f0), n_iter_max=iters, tol=0, normalize_factors=True)
        finally:
            tl.set_backend("numpy")
    return run


def hostroute_section(cp, sizes, dtypes, iters, repeat):
    """Device HOOI (core 10^3, same start as the tucker section) with its small pieces on the host (the
    defaults: a projection of at most ``HOST_ROUTE_MAX`` elements copied down whole for its factor step, a core
    of at most ``DEVICE_NORM_HOST_MAX`` summed on the host) against the device's own route for them (both
    limits 0), in alternating calls; the two fits must agree to rounding."""
    from tuckerkit.engine import _operand, _subspace

    defaults = (_subspace.HOST_ROUTE_MAX, _operand.DEVICE_NORM_HOST_MAX)

    def routed(on, fn):
        def run():
            _subspace.HOST_ROUTE_MAX, _operand.DEVICE_NORM_HOST_MAX = defaults if on else (0, 0)
            try:
                return fn()
            finally:
                _subspace.HOST_ROUTE_MAX, _operand.DEVICE_NORM_HOST_MAX = defaults
        return run

    rows = []
    for n in sizes:
        for dt in dtypes:
            data = make_low_rank_tucker((n, n, n), (10, 10, 10), noise=0.01, dtype=dt, random_state=0).data
            init = tk.st_hosvd(data, (10, 10, 10))
            Xd = cp.asarray(data)

            def hooi(Xd=Xd, init=init):
                return tk.hooi(Xd, (10, 10, 10), init=init, tol=0, max_iter=iters)

            fns = {"host": routed(True, hooi), "device": routed(False, hooi)}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fits = {k: fn().fit for k, fn in fns.items()}
                t = _median_times(cp, fns, repeat)
            row = {"n": n, "dtype": dt, "iterations": iters, "t_host_route": t["host"] / iters,
                   "t_device_route": t["device"] / iters, "host_over_device": t["host"] / t["device"],
                   "fit_host_route": fits["host"], "fit_device_route": fits["device"],
                   "ok": abs(fits["host"] - fits["device"]) <= _fit_tol(dt, fits["device"])}
            rows.append(row)
            print(f"hostroute n={n} {dt}: host route {row['t_host_route'] * 1e3:.2f} ms/it, device route "
                  f"{row['t_device_route'] * 1e3:.2f} ms/it (x{row['host_over_device']:.2f})"
                  + ("" if row["ok"] else f"  WRONG: fits {fits['host']:.8f} / {fits['device']:.8f}"), flush=True)
    bad = [f"n={r['n']} {r['dtype']}" for r in rows if not r["ok"]]
    if bad:
        raise CheckFailed(f"the host route's fit differs from the device route's beyond rounding: {', '.join(bad)}")
    return rows


def profile_section(cp, n: int, stem: str):
    """cProfile of one device HOOI and one CP-ALS call (10 iterations, float64 n^3, rank 10, same start as the
    tucker and cp sections); the text report goes to ``{stem}_profile.txt``."""
    import cProfile
    import io
    import pstats

    rows, text = [], []
    X = make_low_rank_tucker((n, n, n), (10, 10, 10), noise=0.01, dtype="float64", random_state=0).data
    Y = make_low_rank_cp((n, n, n), 10, noise=0.01, dtype="float64", random_state=0).data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tinit = tk.st_hosvd(X, (10, 10, 10))
        cinit = tk.cp_als(Y, 10, tol=0, max_iter=1, random_state=0, linesearch=False)
        Xd, Yd = cp.asarray(X), cp.asarray(Y)
        calls = {"hooi": lambda: tk.hooi(Xd, (10, 10, 10), init=tinit, tol=0, max_iter=10),
                 "cp_als": lambda: tk.cp_als(Yd, 10, init=cinit, tol=0, max_iter=10, linesearch=False)}
        for name, fn in calls.items():
            fn()  # warm-up
            _sync(cp)
            t0 = time.perf_counter()
            fn()
            _sync(cp)
            wall = time.perf_counter() - t0
            prof = cProfile.Profile()
            prof.enable()
            fn()
            _sync(cp)
            prof.disable()
            st = pstats.Stats(prof)
            top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:25]  # (cc, nc, tottime, cumtime, callers)
            rows.append({"call": name, "n": n, "iterations": 10, "wall_s": wall,
                         "top_own_time": [{"function": f"{Path(f).name}:{line}({fn_name})", "calls": v[1],
                                           "own_s": v[2], "cumulative_s": v[3]}
                                          for (f, line, fn_name), v in top]})
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(40)
            text.append(f"== {name}: {wall * 1e3:.2f} ms for 10 iterations (without the profiler)\n{buf.getvalue()}")
            print(f"profile {name} n={n}: {wall * 1e3:.2f} ms per 10 iterations", flush=True)
    write_text(f"{stem}_profile.txt", "\n".join(text))
    return rows


def _with_kernel(kernel, fn):
    """``fn()`` with new GPU sparse tensors made with the MTTKRP ``kernel`` ("segmented" or "atomic")."""
    from tuckerkit.sparse import _gpu as sgpu

    before = sgpu.MTTKRP_KERNEL
    sgpu.MTTKRP_KERNEL = kernel
    try:
        return fn()
    finally:
        sgpu.MTTKRP_KERNEL = before


def _same_bits(a, b) -> bool:
    return all(np.array_equal(_host(U), _host(V)) for U, V in zip(a.factors, b.factors, strict=True)) and \
        np.array_equal(_host(a.weights), _host(b.weights))


def _host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def sparse_section(cp, quick: bool, dtypes, repeat):
    """Sparse CP-ALS per iteration, GPU (the segmented kernel, the default, and the atomic one) vs CPU (same
    init), whether two GPU runs give the same bits, and one MTTKRP on a short mode vs a long one per kernel."""
    from tuckerkit.backend import Device
    from tuckerkit.sparse._gpu import GpuCOOTensor

    rows: list[dict] = []
    rank, iters = (4, 3) if quick else (16, 10)
    tensors = ({"small": make_sparse_tensor((30, 40, 50), nnz=3000, random_state=1).data} if quick else
               {name: make_sparse_benchmark(name).data for name in ("skew3d", "unif3d", "skew4d")})
    for name, S in tensors.items():
        for dt in dtypes:
            X = S.astype(dt)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                init = tk.cp_als(X, rank, tol=0, max_iter=1, random_state=0, linesearch=False)

                def gpu(X=X, init=init):
                    return tk.cp_als(X, rank, init=init, tol=0, max_iter=iters, device="cuda", linesearch=False)

                def gpu_atomic(gpu=gpu):
                    return _with_kernel("atomic", gpu)

                def cpu(X=X, init=init):
                    return tk.cp_als(X, rank, init=init, tol=0, max_iter=iters, linesearch=False)

                res, ref = gpu(), cpu()
                res2, atomic, atomic2 = gpu(), gpu_atomic(), gpu_atomic()
                t = _median_times(cp, {"tuckerkit_gpu": gpu, "tuckerkit_gpu_atomic": gpu_atomic,
                                       "tuckerkit_cpu": cpu}, max(1, repeat // 3))
            repeatable = _same_bits(res, res2)
            ok = (abs(res.fit - ref.fit) <= _fit_tol(X.dtype, ref.fit)
                  and abs(atomic.fit - ref.fit) <= _fit_tol(X.dtype, ref.fit) and repeatable)
            rows.append({"case": "cp_als", "tensor": name, "shape": list(X.shape), "nnz": int(X.nnz), "dtype": str(dt),
                         "rank": rank, "iterations": iters, "t_gpu": t["tuckerkit_gpu"] / iters,
                         "t_gpu_atomic": t["tuckerkit_gpu_atomic"] / iters,
                         "t_cpu": t["tuckerkit_cpu"] / iters, "speedup_cpu": t["tuckerkit_cpu"] / t["tuckerkit_gpu"],
                         "segmented_over_atomic": t["tuckerkit_gpu"] / t["tuckerkit_gpu_atomic"],
                         "repeatable": repeatable, "atomic_repeatable": _same_bits(atomic, atomic2),
                         "fit_gpu": res.fit, "fit_gpu_atomic": atomic.fit, "fit_cpu": ref.fit, "ok": ok})
            print(f"sparse CP-ALS {name} {dt}: GPU {rows[-1]['t_gpu'] * 1e3:.2f} ms/it (atomic "
                  f"{rows[-1]['t_gpu_atomic'] * 1e3:.2f}), CPU x{rows[-1]['speedup_cpu']:.1f}, same bits twice: "
                  f"{repeatable} (atomic {rows[-1]['atomic_repeatable']})" + ("" if ok else "  WRONG"), flush=True)
    # a short mode: the same nonzeros, MTTKRP into 8 rows vs into a long mode, each kernel
    shape, nnz = ((8, 60, 60), 4000) if quick else ((8, 20000, 20000), 4_000_000)
    S = make_sparse_tensor(shape, nnz=nnz, random_state=2).data
    rng = np.random.default_rng(3)
    for kernel in ("segmented", "atomic"):
        G = GpuCOOTensor(S, Device("cuda"), kernel)
        for R in (rank, 64):
            Us = [cp.asarray(rng.standard_normal((n, R))) for n in shape]
            got = G.mttkrp(Us, 0)
            ref = S.mttkrp([cp.asnumpy(U) for U in Us], 0)
            err = float(np.max(np.abs(cp.asnumpy(got) - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
            t = _median_times(cp, {"short": lambda Us=Us, G=G: G.mttkrp(Us, 0),
                                   "long": lambda Us=Us, G=G: G.mttkrp(Us, 1)}, repeat)
            rows.append({"case": "short_mode", "kernel": kernel, "shape": list(shape), "nnz": nnz, "dtype": "float64",
                         "rank": R, "t_short": t["short"], "t_long": t["long"],
                         "short_over_long": t["short"] / t["long"], "rel_err": err, "ok": err <= 1e-10})
            print(f"sparse MTTKRP {kernel} {shape} nnz={nnz} R={R}: mode 0 (8 rows) {t['short'] * 1e3:.3f} ms, "
                  f"mode 1 {t['long'] * 1e3:.3f} ms: x{rows[-1]['short_over_long']:.2f}", flush=True)
    bad = [f"{r['case']} {r.get('tensor', '')} {r['dtype']} R={r['rank']}" for r in rows if not r["ok"]]
    if bad:
        raise CheckFailed(f"sparse results differ from the CPU beyond rounding: {', '.join(bad[:5])}")
    return rows


def device_info(cp) -> dict:
    """The GPU and CUDA the run used (None for what the cupy build cannot tell)."""
    info: dict = {"cupy": getattr(cp, "__version__", None)}
    rt = cp.cuda.runtime
    for key, fn in (("gpus", "getDeviceCount"), ("cuda_runtime", "runtimeGetVersion"),
                    ("cuda_driver", "driverGetVersion")):
        try:
            info[key] = int(getattr(rt, fn)())
        except Exception:
            info[key] = None
    try:
        props = rt.getDeviceProperties(0)
        name = props["name"]
        info["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        info["compute_capability"] = f"{props.get('major')}.{props.get('minor')}"
        info["memory_GB"] = round(int(props.get("totalGlobalMem", 0)) / 1e9, 1)
        info["multiprocessors"] = props.get("multiProcessorCount")
    except Exception as exc:
        info["gpu"] = None
        info["gpu_error"] = f"{type(exc).__name__}: {exc}"
    return info


def _table(title: str, header: list[str], rows: list[list]) -> list[str]:
    """A markdown section: its heading, a table of ``rows`` under ``header``, a blank line."""
    return [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]


def markdown(out: dict) -> str:
    dev = out.get("environment", {}).get("device", {})
    lines = ["# GPU (cupy)", "",
             f"Device: {dev.get('gpu')} (compute capability {dev.get('compute_capability')}, "
             f"{dev.get('memory_GB')} GB), CUDA runtime {dev.get('cuda_runtime')}, driver {dev.get('cuda_driver')}, "
             f"cupy {dev.get('cupy')}.", ""]
    if out.get("status"):
        lines += ["| section | status | detail |", "|---|---|---|"]
        for sec, st in out["status"].items():
            lines.append(f"| {sec} | {'passed' if st['ok'] else 'FAILED'} | {st.get('error') or ''} |")
        lines += [""] + [f"* {n}" for n in dict.fromkeys(out.get("notes", []))] + [""]
    if out.get("contractions"):
        rows = out["contractions"]
        lines += ["## Table II contractions", "", "| n | dtype | geo-mean vs cupy.einsum | geo-mean vs TTGT on cupy |",
                  "|---|---|---|---|"]
        for n in sorted({r["n"] for r in rows}):
            for dt in sorted({r["dtype"] for r in rows}):
                sel = [r for r in rows if r["n"] == n and r["dtype"] == dt]
                lines.append(f"| {n} | {dt} | {geomean(r['speedup_einsum'] for r in sel):.2f}x | "
                             f"{geomean(r['speedup_ttgt'] for r in sel):.2f}x |")
        lines.append("")
    if out.get("ttm"):
        lines += ["## TTM vs one device copy of X", "", "| n | dtype | rank | worst mode / copy | copy GB/s |",
                  "|---|---|---|---|---|"]
        for key in sorted({(r["n"], r["dtype"], r["rank"]) for r in out["ttm"]}):
            sel = [r for r in out["ttm"] if (r["n"], r["dtype"], r["rank"]) == key]
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {max(r['over_copy'] for r in sel):.2f}x | "
                         f"{statistics.median(r['copy_GBps'] for r in sel):.0f} |")
        lines.append("")
    for sec in ("tucker", "cp"):
        if out.get(sec):
            lines += [f"## {'HOOI (core 10^3)' if sec == 'tucker' else 'CP-ALS'}", "",
                      "| n | dtype | rank | GPU ms/it | vs tuckerkit CPU | vs TensorLy-cupy | fit | GPU pool MB |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in out[sec]:
                tlr = f"{r['speedup_tensorly_cupy']:.1f}x" if "speedup_tensorly_cupy" in r else "n/a"
                lines.append(f"| {r['n']} | {r['dtype']} | {r['rank']} | {r['t_tuckerkit_gpu'] * 1e3:.2f} | "
                             f"{r['speedup_cpu']:.1f}x | {tlr} | {r['fit_gpu']:.6f} | "
                             f"{r['gpu_pool_bytes'] / 1e6:.0f} |")
            lines.append("")
    if out.get("linalg"):
        lines += _table("Small eigenproblems and solves: cuSOLVER vs the host route (copies included)",
                        ["problem", "n", "cuSOLVER ms", "host route ms", "cuSOLVER / host"],
                        [[r["problem"], r["n"], f"{r['t_device'] * 1e3:.3f}", f"{r['t_host'] * 1e3:.3f}",
                          f"{r['device_over_host']:.1f}x"] for r in out["linalg"]])
    if out.get("profile"):
        lines += _table("Host time of a device call (cProfile; full report in the profile text file)",
                        ["call", "n", "ms per 10 iterations", "top functions by own time (ms)"],
                        [[r["call"], r["n"], f"{r['wall_s'] * 1e3:.2f}",
                          ", ".join(f"{t['function']} {t['own_s'] * 1e3:.1f}" for t in r["top_own_time"][:5])]
                         for r in out["profile"]])
    if out.get("hostroute"):
        lines += _table("HOOI's small pieces on the host vs on the device (core 10^3; time host route / device "
                        "route)", ["n", "dtype", "host route ms/it", "device route ms/it", "host / device"],
                        [[r["n"], r["dtype"], f"{r['t_host_route'] * 1e3:.2f}", f"{r['t_device_route'] * 1e3:.2f}",
                          f"{r['host_over_device']:.2f}x"] for r in out["hostroute"]])
    if out.get("sparse"):
        cp_rows = [r for r in out["sparse"] if r["case"] == "cp_als"]
        lines += ["## Sparse CP-ALS (COO) on the GPU vs tuckerkit's CPU kernel", "",
                  "The GPU's default MTTKRP is the segmented kernel (bitwise repeatable); the atomic one for "
                  "comparison.", "",
                  "| tensor | nnz | dtype | rank | GPU ms/it | atomic ms/it | CPU ms/it | speed-up | same bits twice "
                  "(atomic) | fit |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in cp_rows:
            seg, atomic = ((f"{r['t_gpu'] * 1e3:.2f}", f"{r['t_gpu_atomic'] * 1e3:.2f}") if "t_gpu_atomic" in r
                           else ("n/a", f"{r['t_gpu'] * 1e3:.2f}"))  # (results from before the segmented kernel)
            bits = (f"{'yes' if r['repeatable'] else 'NO'} ({'yes' if r['atomic_repeatable'] else 'no'})"
                    if "repeatable" in r else "n/a")
            lines.append(f"| {r['tensor']} | {r['nnz']:,} | {r['dtype']} | {r['rank']} | {seg} | {atomic} | "
                         f"{r['t_cpu'] * 1e3:.2f} | {r['speedup_cpu']:.1f}x | {bits} | {r['fit_gpu']:.6f} |")
        lines += ["", "## Sparse MTTKRP on a short mode (8 rows) vs a long mode, same nonzeros", "",
                  "| kernel | shape | nnz | rank | short ms | long ms | short / long |",
                  "|---|---|---|---|---|---|---|"]
        for r in out["sparse"]:
            if r["case"] in ("short_mode", "atomics_short_mode"):
                lines.append(f"| {r.get('kernel', 'atomic')} | {'x'.join(map(str, r['shape']))} | {r['nnz']:,} | "
                             f"{r['rank']} | {r['t_short'] * 1e3:.3f} | {r['t_long'] * 1e3:.3f} | "
                             f"{r['short_over_long']:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def plot(out: dict, stem: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for sec, marker in (("tucker", "o"), ("cp", "s")):
        rows = [r for r in out.get(sec, []) if "speedup_tensorly_cupy" in r]
        if rows:
            ax.plot([r["n"] for r in rows], [r["speedup_tensorly_cupy"] for r in rows], marker, label=sec)
    ax.axhline(1, color="gray", lw=0.5)
    ax.set_xlabel("n (n x n x n tensor)")
    ax.set_ylabel("speed-up vs TensorLy-cupy")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / f"{stem}.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    """Run the sections asked for; 0 when every one passed, 1 otherwise (what failed is in the results)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)} (default: all)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 repeats (a smoke run; writes gpu_quick.*)")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--sizes", default=None, help="n for the tucker and cp sections, e.g. 200,400,800")
    ap.add_argument("--no-tensorly", action="store_true", help="skip the TensorLy-cupy runs")
    ap.add_argument("--update", action="store_true",
                    help="keep the other sections of the existing results file (the ones run are replaced)")
    args = ap.parse_args(argv)
    secs = args.sections or list(SECTIONS)
    if set(secs) - set(SECTIONS):
        ap.error(f"unknown section(s) {sorted(set(secs) - set(SECTIONS))}; expected any of {', '.join(SECTIONS)}")
    from tuckerkit.backend import get_cupy, parse_device

    cp = get_cupy(parse_device("cuda"))
    dtypes = args.dtypes.split(",")
    rep = 3 if args.quick else 9
    sizes = [int(v) for v in args.sizes.split(",")] if args.sizes else None
    stem = "gpu_quick" if args.quick else "gpu"
    env = environment()
    env["device"] = device_info(cp)
    out: dict = {"benchmark": "gpu", "quick": args.quick, "environment": env, "status": {}, "notes": []}
    if args.update and (RESULTS / f"{stem}.json").exists():
        import json

        old = json.loads((RESULTS / f"{stem}.json").read_text())
        kept = [sec for sec in SECTIONS if sec in old and sec not in secs]
        out.update({sec: old[sec] for sec in kept})
        out["status"] = {sec: old.get("status", {}).get(sec, {"ok": True, "error": None}) for sec in kept}
        out["kept_from_earlier_run"] = {"sections": kept, "environment": old.get("environment")}
    runs = {
        "contractions": lambda: contractions(cp, [16, 32] if args.quick else [64, 128, 256, 512], dtypes, rep),
        "ttm": lambda: ttm_section(cp, 32 if args.quick else 512, dtypes, (8, 16), rep),
        "tucker": lambda: decompositions(cp, "tucker", sizes or ([20] if args.quick else [200, 400, 600, 800]),
                                         dtypes, 3 if args.quick else 10, rep if args.quick else 5,
                                         not args.no_tensorly, out["notes"]),
        "cp": lambda: decompositions(cp, "cp", sizes or ([20] if args.quick else [200, 400]), dtypes,
                                     3 if args.quick else 10, rep if args.quick else 5, not args.no_tensorly,
                                     out["notes"]),
        "linalg": lambda: linalg_section(cp, [10, 50, 100] if args.quick else [10, 50, 100, 200, 400, 800, 1600],
                                         rep if args.quick else 15),
        "sparse": lambda: sparse_section(cp, args.quick, dtypes, rep),
        "profile": lambda: profile_section(cp, 20 if args.quick else 200, stem),
        "hostroute": lambda: hostroute_section(cp, [20] if args.quick else [100, 200, 400, 600, 800], dtypes,
                                               3 if args.quick else 10, rep if args.quick else 7),
    }
    for sec in secs:
        t0 = time.perf_counter()
        try:
            out[sec] = runs[sec]()
            out["status"][sec] = {"ok": True, "error": None}
        except Exception as exc:  # record it and go on: one broken section must not hide the others
            out["status"][sec] = {"ok": False, "error": _one_line(exc)}
            print(f"section {sec} FAILED: {out['status'][sec]['error']}", file=sys.stderr, flush=True)
            traceback.print_exc()
        out["status"][sec]["seconds"] = round(time.perf_counter() - t0, 1)
        write_json(f"{stem}.json", out)
        write_text(f"{stem}.md", markdown(out))
    plot(out, stem)
    print(markdown(out))
    failed = [s for s, st in out["status"].items() if not st["ok"]]
    if failed:
        print(f"gpu benchmark: FAILED section(s): {', '.join(failed)} (benchmarks/results/{stem}.json)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
