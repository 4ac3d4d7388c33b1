"""Dense MTTKRP per mode against the roofline bound, the two-step plan, TensorLy, pyttb and plain numpy.

Tensors 200^3, 320x240x160 and 60^4; ranks 10, 32 and 50; float64 and float32. For each (tensor, dtype, rank,
mode): tuckerkit ``mttkrp(X, factors, mode)`` with its plan (``mttkrp_plan``), against
  * bound      : max(one streaming read of X, 2 |X| R flops / GEMM peak), both measured in this run (the read
                 interleaved with the case's calls, the faster of one thread and one per core; the peak a
                 2000^2 GEMM on every core), as in benchmarks/ttm.py;
  * two_step   : where the plan is one fused pass (a 3-way tensor's outermost mode), the plan tuckerkit made
                 before it: the product with the middle factor written out, then a batched GEMV (the A/B of
                 the fused pass, interleaved in one process);
  * tensorly   : ``tensorly.tenalg.unfolding_dot_khatri_rao(X, (None, factors), mode)``;
  * pyttb      : ``pyttb.tensor(X).mttkrp(factors, mode)``;
  * numpy      : the textbook form, the unfolding (a copy) times the Khatri-Rao product of the others.
Peak extra memory (tracemalloc, one untimed call each) of tuckerkit and TensorLy. Medians of interleaved
repeats. Writes benchmarks/results/mttkrp.{json,md,png}.

Run:  python benchmarks/mttkrp.py [--quick]      (--quick: 120^3 and 40^4, ranks 10 and 32, 3 repeats)
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, interleaved, peak_extra, per_mode_plot, write_json, write_text
from roofline import fastest_read, gemm_peak, read_fns

from tuckerkit.engine import _mttkrp as mttkrp_mod
from tuckerkit.engine import khatri_rao, mttkrp, mttkrp_plan
from tuckerkit.engine._policy import default_policy


def two_step_plan(X, factors, mode, policy):
    """The plan of ``mode`` without the fused pass (its rule switched off for the call; the other rules, such
    as the merged first step, as they are)."""
    keep = mttkrp_mod._fused_plan
    mttkrp_mod._fused_plan = lambda *a: None
    try:
        return mttkrp_plan(X, factors, mode, policy=policy)
    finally:
        mttkrp_mod._fused_plan = keep


def textbook(X, factors, mode):
    """The unfolding (a copy, TensorLy's convention: the other modes in order) times the Khatri-Rao product."""
    others = [U for m, U in enumerate(factors) if m != mode]
    Xn = np.moveaxis(X, mode, 0).reshape(X.shape[mode], -1)
    return Xn @ khatri_rao(others)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    import pyttb
    from tensorly.tenalg import unfolding_dot_khatri_rao

    shapes = [(120, 120, 120), (40, 40, 40, 40)] if args.quick else [(200, 200, 200), (320, 240, 160),
                                                                      (60, 60, 60, 60)]
    ranks = [10, 32] if args.quick else [10, 32, 50]
    repeat = 3 if args.quick else args.repeat
    rng = np.random.default_rng(0)
    peaks = {dt: gemm_peak(dt, 3) for dt in (np.float64, np.float32)}
    ncpu = max(os.cpu_count() or 1, 1)
    pool = ThreadPoolExecutor(ncpu)
    policy = default_policy()
    rows = []
    for dtype in (np.float64, np.float32):
        name = np.dtype(dtype).name
        eps = float(np.finfo(dtype).eps)
        for shape in shapes:
            X = rng.standard_normal(shape).astype(dtype)
            reads = read_fns(X, pool, ncpu)
            Xt = pyttb.tensor(X, copy=False)
            for R in ranks:
                factors = [rng.standard_normal((n, R)).astype(dtype) for n in shape]
                for mode in range(len(shape)):
                    plan = mttkrp_plan(X, factors, mode, policy=policy)
                    fns = {
                        "tuckerkit": lambda plan=plan, X=X, F=factors: plan(X, F),
                        "tensorly": lambda X=X, F=factors, m=mode: unfolding_dot_khatri_rao(X, (None, F), m),
                        "pyttb": lambda Xt=Xt, F=factors, m=mode: Xt.mttkrp(F, m),
                        "numpy": lambda X=X, F=factors, m=mode: textbook(X, F, m),
                    }
                    if plan.fused:
                        old = two_step_plan(X, factors, mode, policy)
                        fns["two_step"] = lambda old=old, X=X, F=factors: old(X, F)
                    t = interleaved({**fns, **reads}, repeat)
                    t.setdefault("two_step", t["tuckerkit"])
                    read = fastest_read(t)
                    flops = 2.0 * X.size * R
                    bound = max(read, flops / peaks[dtype])
                    x64 = X.astype(np.float64)
                    ref = textbook(x64, [U.astype(np.float64) for U in factors], mode)
                    scale = textbook(np.abs(x64), [np.abs(U.astype(np.float64)) for U in factors], mode)
                    got = mttkrp(X, factors, mode)
                    err = float(np.max(np.abs(got - ref) / scale))
                    mem_tk = peak_extra(lambda plan=plan, X=X, F=factors: plan(X, F))
                    mem_tl = peak_extra(lambda X=X, F=factors, m=mode: unfolding_dot_khatri_rao(X, (None, F), m))
                    row = {
                        "dtype": name, "shape": list(shape), "rank": R, "mode": mode, "fused": plan.fused,
                        "steps": [str(p.compiled) if str(p.compiled) != "none" else str(p.kind) for p in plan.plans],
                        "rel_error": err, "correct": err <= (X.size // shape[mode] + 2) * eps,
                        "t_read": read, "gemm_peak": peaks[dtype], "t_bound": bound,
                        **{f"t_{k}": v for k, v in t.items()},
                        "ratio_bound": t["tuckerkit"] / bound,
                        "ratio_two_step": t["tuckerkit"] / t["two_step"],
                        "speedup_tensorly": t["tensorly"] / t["tuckerkit"],
                        "speedup_pyttb": t["pyttb"] / t["tuckerkit"],
                        "speedup_numpy": t["numpy"] / t["tuckerkit"],
                        "peak_extra_tuckerkit": mem_tk / X.nbytes, "peak_extra_tensorly": mem_tl / X.nbytes,
                    }
                    rows.append(row)
                    print(f"{name} {'x'.join(map(str, shape)):12s} R={R:3d} mode {mode}: "
                          f"{'fused' if plan.fused else 'steps':5s} {t['tuckerkit'] * 1e3:7.2f} ms | /bound "
                          f"{row['ratio_bound']:.2f} /two-step {row['ratio_two_step']:.2f} | x TL "
                          f"{row['speedup_tensorly']:.1f} x pyttb {row['speedup_pyttb']:.1f} x numpy "
                          f"{row['speedup_numpy']:.1f} | mem {row['peak_extra_tuckerkit']:.3f} / "
                          f"{row['peak_extra_tensorly']:.3f}", flush=True)
    pool.shutdown()
    summary = summarize(rows)
    write_json("mttkrp.json", {"benchmark": "mttkrp", "environment": environment(), "summary": summary,
                               "rows": rows})
    md = markdown(rows, summary)
    write_text("mttkrp.md", md)
    plot(rows)
    print(md.split("\n## Per case")[0])


def summarize(rows):
    out = {"all_correct": all(r["correct"] for r in rows)}
    for dt in ("float64", "float32"):
        sel = [r for r in rows if r["dtype"] == dt]
        if not sel:
            continue
        fused = [r for r in sel if r["fused"]]
        out[dt] = {
            "median_ratio_bound": float(np.median([r["ratio_bound"] for r in sel])),
            "worst_ratio_bound": max(r["ratio_bound"] for r in sel),
            "fused_cases": len(fused), "cases": len(sel),
            "fused_over_two_step": [min(r["ratio_two_step"] for r in fused), max(r["ratio_two_step"] for r in fused)]
            if fused else None,
            "speedup_tensorly": [min(r["speedup_tensorly"] for r in sel), max(r["speedup_tensorly"] for r in sel)],
            "speedup_pyttb": [min(r["speedup_pyttb"] for r in sel), max(r["speedup_pyttb"] for r in sel)],
            "speedup_numpy": [min(r["speedup_numpy"] for r in sel), max(r["speedup_numpy"] for r in sel)],
            "peak_extra_tuckerkit_max": max(r["peak_extra_tuckerkit"] for r in sel),
            "peak_extra_tensorly_max": max(r["peak_extra_tensorly"] for r in sel),
        }
    return out


def markdown(rows, summary) -> str:
    lines = [
        "# Dense MTTKRP per mode: tuckerkit vs the roofline bound, its two-step plan, TensorLy, pyttb and numpy",
        "",
        "bound = max(one streaming read of X, 2 |X| R flops / GEMM peak), measured in the same run; `/ two-step`: "
        "the fused pass against the plan made without it (1.00 where the plan is not fused); speed-ups are the "
        "other's time / tuckerkit's (TensorLy `unfolding_dot_khatri_rao`, pyttb `tensor.mttkrp`, numpy: the "
        "unfolding times the Khatri-Rao product); peak extra memory in units of the input (tracemalloc).",
        "",
    ]
    for dt in ("float64", "float32"):
        s = summary.get(dt)
        if not s:
            continue
        fz = s["fused_over_two_step"]
        lines.append(
            f"* {dt}: median {s['median_ratio_bound']:.2f}x the bound (worst {s['worst_ratio_bound']:.2f}x); "
            + (f"{s['fused_cases']} of {s['cases']} cases one fused pass, {fz[0]:.2f}-{fz[1]:.2f}x the two steps' "
               "time; " if fz else "")
            + f"{s['speedup_tensorly'][0]:.1f}-{s['speedup_tensorly'][1]:.1f}x TensorLy, "
            f"{s['speedup_pyttb'][0]:.1f}-{s['speedup_pyttb'][1]:.1f}x pyttb, "
            f"{s['speedup_numpy'][0]:.1f}-{s['speedup_numpy'][1]:.1f}x numpy; peak extra memory at most "
            f"{s['peak_extra_tuckerkit_max']:.3f}x the input (TensorLy {s['peak_extra_tensorly_max']:.2f}x).")
    lines += [
        "",
        "## Per case",
        "",
        "| dtype | shape | rank | mode | plan | ms | bound ms | / bound | / two-step | x TensorLy | x pyttb "
        "| x numpy | peak extra tk / TL |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dtype']} | {'x'.join(map(str, r['shape']))} | {r['rank']} | {r['mode']} | "
            f"{'fused pass' if r['fused'] else ' + '.join(r['steps'])} | {r['t_tuckerkit'] * 1e3:.2f} | "
            f"{r['t_bound'] * 1e3:.2f} | {r['ratio_bound']:.2f} | {r['ratio_two_step']:.2f} | "
            f"{r['speedup_tensorly']:.1f} | {r['speedup_pyttb']:.1f} | {r['speedup_numpy']:.1f} | "
            f"{r['peak_extra_tuckerkit']:.3f} / {r['peak_extra_tensorly']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(rows) -> None:
    per_mode_plot("mttkrp.png", rows, "speedup_tensorly", "speed-up over TensorLy",
                  "Dense MTTKRP: TensorLy's time / tuckerkit's, same inputs, same run", log=True)

if __name__ == "__main__":
    main()
