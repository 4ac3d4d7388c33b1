"""GPU benchmarks (cupy): Table II contractions, TTM vs the device-copy floor, HOOI and CP-ALS vs TensorLy-cupy.

* contractions: the 36 seed Table II cases on n x n and n x n x n device arrays: tuckerkit (cuBLAS strided-batched
  GEMM on views) vs ``cupy.einsum`` (cuTENSOR when cupy enables it) vs TTGT on cupy (permute copies, one GEMM);
* ttm: ``X x_n U^T`` for every mode, ranks 8 and 16, vs one device copy of X (the bandwidth floor);
* tucker: HOOI, core 10^3 on n^3 tensors (seed Fig. 9), the same initial factors and iterations for tuckerkit
  on the GPU, TensorLy with its cupy backend, and tuckerkit on the CPU; float32 and float64;
* cp: CP-ALS, rank 10 and 50, same set-up.

Times are medians of interleaved repeats with a device synchronization before each clock read; device memory
is cupy's memory pool after each run (pool freed before). ``benchmarks/{contractions,ttm,tucker,cp}.py
--device cuda`` run the matching section. Needs a CUDA GPU and ``pip install 'tuckerkit[gpu,bench]'``.

Run:  python benchmarks/gpu.py [contractions ttm tucker cp] [--quick]
Writes benchmarks/results/gpu.{json,md,png}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, environment, geomean, write_json, write_text
from contractions import table2, ttgt
from tuckerkit.datasets import make_low_rank_cp, make_low_rank_tucker

import tuckerkit as tk
from tuckerkit.engine import contract, plan_contraction, ttm

SECTIONS = ("contractions", "ttm", "tucker", "cp")


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


def contractions(cp, sizes, dtypes, repeat):
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        for dt in dtypes:
            A = cp.asarray(rng.standard_normal((n, n)).astype(dt))
            B = cp.asarray(rng.standard_normal((n, n, n)).astype(dt))
            for case, spec in table2():
                plan = plan_contraction(spec, A, B)
                ref = cp.einsum(spec, A, B)
                got = contract(spec, A, B, plan=plan)
                err = float(cp.max(cp.abs(got - ref)) / max(float(cp.max(cp.abs(ref))), 1e-30))
                t = _median_times(cp, {"tuckerkit": lambda s=spec, p=plan, A=A, B=B: contract(s, A, B, plan=p),
                                       "cupy_einsum": lambda s=spec, A=A, B=B: cp.einsum(s, A, B),
                                       "ttgt": lambda s=spec, A=A, B=B: ttgt(s, A, B, xp=cp)}, repeat)
                rows.append({"case": case, "spec": spec, "n": n, "dtype": dt, "kind": str(plan.kind),
                             "copies": plan.copies, **{f"t_{k}": v for k, v in t.items()},
                             "speedup_einsum": t["cupy_einsum"] / t["tuckerkit"],
                             "speedup_ttgt": t["ttgt"] / t["tuckerkit"], "rel_err": err})
                print(f"n={n} {dt} {case} {spec:12s} tk {t['tuckerkit'] * 1e3:.3f} ms  einsum x"
                      f"{rows[-1]['speedup_einsum']:.2f}  ttgt x{rows[-1]['speedup_ttgt']:.2f}", flush=True)
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


def _pool_bytes(cp, fn):
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks() if hasattr(pool, "free_all_blocks") else None
    out = fn()
    _sync(cp)
    return out, int(pool.total_bytes())


def decompositions(cp, kind, sizes, dtypes, iters, repeat, with_tensorly):
    rows = []
    tl = None
    if with_tensorly:
        import tensorly

        tl = tensorly
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
                        init = tk.cp_als(data, R, tol=0, max_iter=1, random_state=0)
                    def gpu(Xd=Xd, init=init, R=R):
                        return tk.cp_als(Xd, R, init=init, tol=0, max_iter=iters)

                    def cpu(data=data, init=init, R=R):
                        return tk.cp_als(data, R, init=init, tol=0, max_iter=iters)
                fns = {"tuckerkit_gpu": gpu, "tuckerkit_cpu": cpu}
                if tl is not None:
                    fns["tensorly_cupy"] = _tensorly_runner(tl, cp, kind, Xd, init, R, iters)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res, pool = _pool_bytes(cp, gpu)
                    t = _median_times(cp, fns, repeat)
                row = {"method": "hooi" if kind == "tucker" else "cp_als", "n": n, "dtype": dt, "rank": R,
                       "iterations": iters, **{f"t_{k}": v / iters for k, v in t.items()}, "fit_gpu": res.fit,
                       "gpu_pool_bytes": pool, "input_bytes": int(Xd.nbytes),
                       "speedup_cpu": t["tuckerkit_cpu"] / t["tuckerkit_gpu"]}
                if "tensorly_cupy" in t:
                    row["speedup_tensorly_cupy"] = t["tensorly_cupy"] / t["tuckerkit_gpu"]
                rows.append(row)
                print(f"{row['method']} n={n} {dt} R={R}: GPU {row['t_tuckerkit_gpu'] * 1e3:.2f} ms/it, CPU x"
                      f"{row['speedup_cpu']:.1f}" + (f", TensorLy-cupy x{row['speedup_tensorly_cupy']:.1f}"
                                                     if "speedup_tensorly_cupy" in row else ""), flush=True)
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


def markdown(out: dict) -> str:
    lines = ["# GPU (cupy)", ""]
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
    return "\n".join(lines)


def plot(out: dict) -> None:
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
    fig.savefig(RESULTS / "gpu.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)} (default: all)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 repeats (a smoke run)")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--no-tensorly", action="store_true", help="skip the TensorLy-cupy runs")
    args = ap.parse_args(argv)
    from tuckerkit.backend import get_cupy, parse_device

    cp = get_cupy(parse_device("cuda"))
    dtypes = args.dtypes.split(",")
    rep = 3 if args.quick else 9
    out: dict = {}
    secs = args.sections or list(SECTIONS)
    if set(secs) - set(SECTIONS):
        ap.error(f"unknown section(s) {sorted(set(secs) - set(SECTIONS))}; expected any of {', '.join(SECTIONS)}")
    if "contractions" in secs:
        out["contractions"] = contractions(cp, [16, 32] if args.quick else [64, 128, 256, 512], dtypes, rep)
    if "ttm" in secs:
        out["ttm"] = ttm_section(cp, 32 if args.quick else 512, dtypes, (8, 16), rep)
    if "tucker" in secs:
        out["tucker"] = decompositions(cp, "tucker", [20] if args.quick else [100, 200, 300, 400, 512], dtypes,
                                       3 if args.quick else 10, rep if args.quick else 5, not args.no_tensorly)
    if "cp" in secs:
        out["cp"] = decompositions(cp, "cp", [20] if args.quick else [100, 200, 300], dtypes,
                                   3 if args.quick else 10, rep if args.quick else 5, not args.no_tensorly)
    env = environment()
    env["cupy"] = getattr(cp, "__version__", None)
    try:
        props = cp.cuda.runtime.getDeviceProperties(0)
        env["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    except Exception:
        env["gpu"] = None
    write_json("gpu.json", {"benchmark": "gpu", "environment": env, **out})
    write_text("gpu.md", markdown(out))
    plot(out)
    print(markdown(out))


if __name__ == "__main__":
    main()
