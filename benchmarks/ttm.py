"""TTM per mode against the machine's roofline, BLAS, an equal-size GEMM, TensorLy's mode_dot and pyttb's ttm.

Tensors 200^3 and 320x240x160 (the issue-15 floors) and 64^4; ranks 10 and 32; float64 and float32.
For each (tensor, dtype, rank, mode): tuckerkit ``ttm(X, U, mode, transpose=True)`` with the plan the
planner chose, against
  * bound      : the roofline bound max(one streaming read of X, flops / GEMM peak), both timed in the
                 case's own interleaved rounds beside its calls, medians, so that a drift of the machine's
                 memory speed or of its cores' vector throughput (a neighbour on the host) moves bound and
                 call alike (the read: the fastest of ``np.add.reduce``, the same split over one thread per
                 core, and both by a compiled loop, benchmarks/roofline.py ``read_fns``; the peak: a 2000^2
                 GEMM on every core); beside it the bound with the run's highest GEMM sample
                 (``ratio_bound_top_peak``: stricter, the highest of many noisy samples, the verdict until
                 2026-12-04) and the bound with the read as issue 15 words it (numpy's reduce on one thread
                 or split; ``ratio_bound_numpy_read``);
  * blas       : the same plan run by BLAS (when the cost model chose the compiled kernel: the A/B of the
                 choice, interleaved in one process);
  * gemm       : one flattened GEMM with the same flops (``U.T @ X.reshape(I_n, -1)``);
  * tensorly   : ``tensorly.tenalg.mode_dot(X, U.T, mode)``; pyttb: ``pyttb.tensor(X).ttm(U.T, mode)``.
Medians of interleaved repeats. Writes benchmarks/results/ttm.{json,md,png}.

Run:  python benchmarks/ttm.py [--quick]      (--quick: 120^3 and 48^4, 3 repeats; about a minute)
      python benchmarks/ttm.py --runs 3       (three whole runs; each case the figures of its median run)
      python benchmarks/ttm.py --ranks 6,8,12,14 --name ttm_ranks    (other ranks, written to ttm_ranks.*)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, interleaved, per_mode_plot, positive_int, result_stem, write_json, write_text
from roofline import GemmSample, fastest_read, gemm_peak, read_fns

from tuckerkit.engine import ttm, ttm_plan
from tuckerkit.engine._plan import CompiledKernel
from tuckerkit.engine._roofline import machine_roofline


def rank_list(text: str) -> list[int]:
    """``--ranks``: comma-separated positive integers."""
    try:
        return [positive_int(r) for r in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers such as 10,32; received {text!r}") from None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--device", default="cpu", help="cuda: run this benchmark on the GPU (benchmarks/gpu.py)")
    ap.add_argument("--ranks", default=[10, 32], type=rank_list,
                    help="comma-separated ranks (default: the floor's 10,32)")
    ap.add_argument("--name", default="ttm", type=result_stem,
                    help="results file stem under benchmarks/results (default: ttm)")
    ap.add_argument("--runs", default=1, type=positive_int,
                    help="whole runs of every case, one after another; each case reports its median run (default 1)")
    args = ap.parse_args(argv)
    if args.device != "cpu":
        import gpu

        return gpu.main(["ttm", *(["--quick"] if args.quick else [])])
    import pyttb
    import tensorly.tenalg as tlalg

    shapes = [(120, 120, 120), (48, 48, 48, 48)] if args.quick else [
        (200, 200, 200), (320, 240, 160), (64, 64, 64, 64)]
    repeat = 3 if args.quick else args.repeat
    ranks = args.ranks
    # the GEMM peak sampled at the start and before each tensor, and in every case's rounds: the verdict's bound
    # takes the case's own (paired) peak, the top-peak bound the highest of all samples
    peaks = {dt: [gemm_peak(dt, 3)] for dt in (np.float64, np.float32)}
    ncpu = max(os.cpu_count() or 1, 1)
    pool = ThreadPoolExecutor(ncpu)  # the read split over one thread per core
    runs = [_one_run(shapes, ranks, repeat, pool, ncpu, peaks, tlalg, pyttb) for _ in range(args.runs)]
    pool.shutdown()
    rows = _median_runs(runs, {np.dtype(dt).name: max(v) for dt, v in peaks.items()})
    summary = summarize(rows)
    summary["gemm_peak_samples"] = {np.dtype(dt).name: v for dt, v in peaks.items()}
    env = environment()
    env["roofline_model"] = dataclasses.asdict(machine_roofline())
    write_json(f"{args.name}.json", {"benchmark": "ttm", "environment": env, "summary": summary, "rows": rows})
    md = markdown(rows, summary, ranks)
    write_text(f"{args.name}.md", md)
    plot(rows, f"{args.name}.png")
    print(md.split("\n## Per case")[0])


def _one_run(shapes, ranks, repeat: int, pool, ncpu: int, peaks: dict, tlalg, pyttb) -> list[dict]:
    """One whole run: every (dtype, tensor, rank, mode) case timed interleaved with its peers, reads and a GEMM
    (its median the case's paired peak); the GEMM peak also sampled before each tensor; all into ``peaks``."""
    rng = np.random.default_rng(0)  # (the same tensors and matrices every run)
    rows = []
    for dtype in (np.float64, np.float32):
        name = np.dtype(dtype).name
        g = GemmSample(dtype)  # (its GEMM timed in the case's rounds too: the peak paired with the calls it bounds)
        for shape in shapes:
            X = rng.standard_normal(shape).astype(dtype)
            peaks[dtype].append(gemm_peak(dtype, 3))
            reads = read_fns(X, pool, ncpu)
            Xt = pyttb.tensor(X, copy=False)
            for R in ranks:
                for mode in range(len(shape)):
                    U = rng.standard_normal((shape[mode], R)).astype(dtype)
                    plan = ttm_plan(X, U, mode, transpose=True)
                    Xm = X.reshape(shape[mode], -1)  # same-size flattened GEMM (memory reinterpretation)
                    fns = {
                        "tuckerkit": lambda X=X, U=U, plan=plan: plan(X, U),
                        "gemm": lambda U=U, Xm=Xm: U.T @ Xm,
                        "tensorly": lambda X=X, U=U, mode=mode: tlalg.mode_dot(X, U.T, mode),
                        "pyttb": lambda Xt=Xt, U=U, mode=mode: Xt.ttm(U.T, mode),
                        "gemm_peak": lambda g=g: np.matmul(g.A, g.B, out=g.C),
                    }
                    if plan.compiled != CompiledKernel.NONE and plan._sr is not None:
                        blas = dataclasses.replace(plan, compiled=CompiledKernel.NONE,
                                                   _out_order=plan._sr.blas_out_order)
                        fns["blas"] = lambda X=X, U=U, blas=blas: blas(X, U)
                    t = interleaved({**fns, **reads}, repeat)
                    t.setdefault("blas", t["tuckerkit"])
                    read = fastest_read(t)
                    flops = 2.0 * X.size * R
                    paired = 2.0 * g.n**3 / t.pop("gemm_peak")  # (the GEMM peak in this case's rounds, median)
                    peaks[dtype].append(paired)
                    bound = max(read, flops / paired)
                    ref = np.moveaxis(np.tensordot(U.T.astype(np.float64), X.astype(np.float64), axes=(1, mode)),
                                      0, mode)
                    err = float(np.max(np.abs(ttm(X, U, mode, transpose=True) - ref)) / np.max(np.abs(ref)))
                    row = {
                        "dtype": name, "shape": list(shape), "rank": R, "mode": mode, "kind": str(plan.kind),
                        "compiled": str(plan.compiled), "copies": plan.copies, "parallel": plan.parallel,
                        "estimates_s": dict(plan.estimates), "rel_error": err,
                        "correct": err <= 64 * shape[mode] * float(np.finfo(dtype).eps),
                        "t_read": read, "gemm_peak": paired, "t_bound": bound, "flops": flops,
                        **{f"t_{k}": v for k, v in t.items()},
                        "ratio_bound": t["tuckerkit"] / bound,
                        "ratio_blas": t["tuckerkit"] / t["blas"],
                        "ratio_gemm": t["tuckerkit"] / t["gemm"],
                        "speedup_tensorly": t["tensorly"] / t["tuckerkit"],
                        "speedup_pyttb": t["pyttb"] / t["tuckerkit"],
                    }
                    rows.append(row)
                    print(f"{name} {'x'.join(map(str, shape)):12s} R={R:3d} mode {mode}: "
                          f"{row['compiled'] if row['compiled'] != 'none' else row['kind']:22s} "
                          f"{t['tuckerkit'] * 1e3:7.2f} ms | /bound {row['ratio_bound']:.2f} "
                          f"/blas {row['ratio_blas']:.2f} /gemm {row['ratio_gemm']:.2f} | x TL "
                          f"{row['speedup_tensorly']:.2f} x pyttb {row['speedup_pyttb']:.2f}", flush=True)
    return rows


def _median_runs(runs: list[list[dict]], peak: dict) -> list[dict]:
    """The rows of ``--runs`` whole runs (the same cases in the same order): each run's bounds worked out again
    (:func:`_rebound`, ``peak`` the highest GEMM peak sample of all runs by dtype), then for each case the row of
    its median run by the ratio to the bound (an even count: the slower of the middle two), every figure of it
    from that one run (its calls and the read and GEMM next to them), with every run's ratio in
    ``ratio_bound_runs``."""
    for rows in runs:
        _rebound(rows, peak)
    out = []
    for case in zip(*runs, strict=True):
        order = sorted(case, key=lambda r: r["ratio_bound"])
        row = dict(order[len(order) // 2])
        if len(case) > 1:
            row["ratio_bound_runs"] = [r["ratio_bound"] for r in case]
            row["ratio_bound_top_peak_runs"] = [r["ratio_bound_top_peak"] for r in case]
        out.append(row)
    return out


def _rebound(rows, peak: dict) -> None:
    """Each row's bound: the verdict's ``t_bound`` = max(the fastest read, flops / the GEMM peak), both timed in
    the case's own interleaved rounds (``gemm_peak``: the median of a 2000^2 GEMM on every core run in each round
    beside the calls, as the reads are), so that a minute in which a neighbour takes the cores' vector units slows
    the bound's GEMM as it slows the kernel; beside it ``t_bound_top_peak``, the flops bound from the run's highest
    GEMM sample of the dtype (``peak``: the start's, every case's; stricter, since the highest of many noisy
    samples sits above any one minute's peak), and, where the row has numpy's two reads, the bound as issue 15
    words the read (the faster of ``np.add.reduce`` on one thread and split over the cores, with the paired peak:
    ``t_bound_numpy_read``)."""
    for r in rows:
        r["top_gemm_peak"] = peak[r["dtype"]]
        r["t_bound"] = max(r["t_read"], r["flops"] / r["gemm_peak"])
        r["ratio_bound"] = r["t_tuckerkit"] / r["t_bound"]
        r["t_bound_top_peak"] = max(r["t_read"], r["flops"] / r["top_gemm_peak"])
        r["ratio_bound_top_peak"] = r["t_tuckerkit"] / r["t_bound_top_peak"]
        if "t_read_1" in r and "t_read_all" in r:
            r["t_bound_numpy_read"] = max(min(r["t_read_1"], r["t_read_all"]), r["flops"] / r["gemm_peak"])
            r["ratio_bound_numpy_read"] = r["t_tuckerkit"] / r["t_bound_numpy_read"]


def summarize(rows):
    out = {"all_correct": all(r["correct"] for r in rows), "floor": 1.5}
    for dt in ("float64", "float32"):
        sel = [r for r in rows if r["dtype"] == dt and len(r["shape"]) == 3]
        if sel:
            worst = max(sel, key=lambda r: r["ratio_bound"])
            out[dt] = {
                "worst_ratio_bound": worst["ratio_bound"],
                "worst_case": f"{'x'.join(map(str, worst['shape']))} R={worst['rank']} mode {worst['mode']}",
                "median_ratio_bound": float(np.median([r["ratio_bound"] for r in sel])),
                "cases_within_floor": sum(r["ratio_bound"] <= 1.5 for r in sel),
                "cases": len(sel),
                "compiled_cases": sum(r["compiled"] != "none" for r in sel),
                "compiled_over_blas_median": float(np.median([r["ratio_blas"] for r in sel
                                                              if r["compiled"] != "none"] or [1.0])),
                "min_speedup_tensorly": min(r["speedup_tensorly"] for r in sel),
                "min_speedup_pyttb": min(r["speedup_pyttb"] for r in sel),
            }
            if all("ratio_bound_runs" in r for r in sel):
                n = len(sel[0]["ratio_bound_runs"])
                out[dt]["runs"] = n
                out[dt]["cases_within_floor_by_run"] = [sum(r["ratio_bound_runs"][k] <= 1.5 for r in sel)
                                                        for k in range(n)]
            out[dt].update({
                "worst_ratio_bound_top_peak": max(r["ratio_bound_top_peak"] for r in sel),
                "median_ratio_bound_top_peak": float(np.median([r["ratio_bound_top_peak"] for r in sel])),
                "cases_within_floor_top_peak": sum(r["ratio_bound_top_peak"] <= 1.5 for r in sel),
                "paired_gemm_peak_range": [min(r["gemm_peak"] for r in sel), max(r["gemm_peak"] for r in sel)],
                "top_gemm_peak": sel[0]["top_gemm_peak"],
            })
            if all("ratio_bound_numpy_read" in r for r in sel):
                out[dt].update({
                    "worst_ratio_bound_numpy_read": max(r["ratio_bound_numpy_read"] for r in sel),
                    "median_ratio_bound_numpy_read": float(np.median([r["ratio_bound_numpy_read"] for r in sel])),
                    "cases_within_floor_numpy_read": sum(r["ratio_bound_numpy_read"] <= 1.5 for r in sel),
                })
    return out


def markdown(rows, summary, ranks=(10, 32)) -> str:
    floor = ("Floor (issue 15): <= 1.5x the bound on every 3-way case." if list(ranks) == [10, 32] else
             f"Ranks {', '.join(map(str, ranks))}: outside issue 15's floor (ranks 10 and 32), the same bound "
             "and counts for reference.")
    lines = [
        "# TTM per mode against the roofline bound, BLAS, an equal-size GEMM, TensorLy and pyttb",
        "",
        "bound = max(one streaming read of X, flops / GEMM peak), both timed in each case's own interleaved rounds "
        "beside its calls (the read: the fastest of numpy's and a compiled loop's, on one thread and split over "
        "the cores; the peak: a 2000^2 GEMM on every core), medians; `/ top-peak bound`: the flops bound from the "
        "run's highest GEMM sample instead (stricter: the highest of many noisy samples); ratios are "
        "tuckerkit time / reference (lower is better), speedups other / tuckerkit. `blas`: the same plan run "
        f"by BLAS where the cost model chose a compiled kernel (1.00 elsewhere). {floor}",
        "",
    ]
    for dt in ("float64", "float32"):
        s = summary.get(dt)
        if s:
            lines.append(
                f"* {dt}: worst {s['worst_ratio_bound']:.2f}x the bound ({s['worst_case']}), median "
                f"{s['median_ratio_bound']:.2f}x; {s['cases_within_floor']}/{s['cases']} cases within 1.5x; "
                f"compiled kernel chosen in {s['compiled_cases']} (median {s['compiled_over_blas_median']:.2f}x "
                f"the BLAS time); at least {s['min_speedup_tensorly']:.1f}x TensorLy, "
                f"{s['min_speedup_pyttb']:.1f}x pyttb.")
            if "runs" in s:
                lines.append(
                    f"  Each case from the median of its {s['runs']} whole runs; within 1.5x in each run: "
                    f"{', '.join(map(str, s['cases_within_floor_by_run']))} of {s['cases']}.")
            lines.append(
                f"  The GEMM peak in the cases' rounds: {s['paired_gemm_peak_range'][0] / 1e9:.0f}-"
                f"{s['paired_gemm_peak_range'][1] / 1e9:.0f} GFlop/s, the run's highest sample "
                f"{s['top_gemm_peak'] / 1e9:.0f}; against the flops bound from that highest sample: worst "
                f"{s['worst_ratio_bound_top_peak']:.2f}x, median {s['median_ratio_bound_top_peak']:.2f}x, "
                f"{s['cases_within_floor_top_peak']}/{s['cases']} within 1.5x.")
            if "cases_within_floor_numpy_read" in s:
                lines.append(
                    f"  Against the bound with the issue's read (numpy's reduce, one thread or split; not bound by "
                    f"memory on every machine, so not the verdict): worst {s['worst_ratio_bound_numpy_read']:.2f}x, "
                    f"median {s['median_ratio_bound_numpy_read']:.2f}x, {s['cases_within_floor_numpy_read']}/"
                    f"{s['cases']} within 1.5x.")
    lines += [
        "",
        "## Per case",
        "",
        "| dtype | shape | rank | mode | kernel | ms | bound ms | / bound | / top-peak bound | / numpy-read bound "
        "| / BLAS | / equal GEMM | x TensorLy | x pyttb |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kern = r["compiled"] if r["compiled"] != "none" else r["kind"]
        numpy_read = f"{r['ratio_bound_numpy_read']:.2f}" if "ratio_bound_numpy_read" in r else "-"
        lines.append(
            f"| {r['dtype']} | {'x'.join(map(str, r['shape']))} | {r['rank']} | {r['mode']} | {kern} | "
            f"{r['t_tuckerkit'] * 1e3:.2f} | {r['t_bound'] * 1e3:.2f} | {r['ratio_bound']:.2f} | "
            f"{r['ratio_bound_top_peak']:.2f} | {numpy_read} | "
            f"{r['ratio_blas']:.2f} | {r['ratio_gemm']:.2f} | {r['speedup_tensorly']:.2f} | "
            f"{r['speedup_pyttb']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(rows, name: str = "ttm.png") -> None:
    per_mode_plot(name, rows, "ratio_bound", "time / roofline bound",
                  "TTM time relative to the roofline bound measured in the same run", lines=(1.0, 1.5))

if __name__ == "__main__":
    main()
