"""TTM per mode vs the streaming floor, an equal-size GEMM, TensorLy's mode_dot and pyttb's ttm.

Tensors: 3-way 200^3 and 400^3, 4-way 64^4 and 96^4 (float64); ranks 5, 10, 16, 64.
For each (tensor, rank, mode): tuckerkit ``ttm(X, U, mode, transpose=True)`` vs
  * floor_sum  : ``X.sum()`` (one streaming read of X),
  * floor_copy : ``np.copyto(buf, X)`` (one read and one write of X),
  * gemm       : one flattened GEMM with the same flop count (``U.T @ X.reshape(I_n, -1)`` on a C-ordered
                 matrix of the same size, the equal-size upper reference of GETT/TCCG),
  * tensorly   : ``tensorly.tenalg.mode_dot(X, U.T, mode)``,
  * pyttb      : ``pyttb.tensor(X).ttm(U.T, mode)``.
Median of interleaved repeats in one process. Writes benchmarks/results/ttm.{json,md,png}.

Run:  python benchmarks/ttm.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, environment, interleaved, write_json, write_text

from tuckerkit.engine import ttm, ttm_plan


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cuda: run this benchmark on the GPU (benchmarks/gpu.py)")
    args = ap.parse_args(argv)
    if args.device != "cpu":
        import gpu

        return gpu.main(["ttm", *(["--quick"] if args.quick else [])])
    import pyttb
    import tensorly.tenalg as tlalg

    shapes = [(200, 200, 200), (64, 64, 64, 64)] if args.quick else [
        (200, 200, 200), (400, 400, 400), (64, 64, 64, 64), (96, 96, 96, 96)
    ]
    ranks = [5, 16] if args.quick else [5, 10, 16, 64]
    rng = np.random.default_rng(0)
    rows = []
    for shape in shapes:
        X = rng.standard_normal(shape)
        buf = np.empty_like(X)
        big = X.size > 50_000_000
        Xt = pyttb.tensor(X, copy=False)
        for R in ranks:
            for mode in range(len(shape)):
                U = rng.standard_normal((shape[mode], R))
                plan = ttm_plan(X, U, mode, transpose=True)
                Xm = X.reshape(shape[mode], -1)  # same-size flattened GEMM (memory reinterpretation, no copy)
                fns = {
                    "tuckerkit": lambda X=X, U=U, mode=mode, plan=plan: ttm(X, U, mode, transpose=True, plan=plan),
                    "floor_sum": lambda X=X: X.sum(),
                    "floor_copy": lambda X=X, buf=buf: np.copyto(buf, X),
                    "gemm": lambda U=U, Xm=Xm: U.T @ Xm,
                    "tensorly": lambda X=X, U=U, mode=mode: tlalg.mode_dot(X, U.T, mode),
                }
                if not big:
                    fns["pyttb"] = lambda Xt=Xt, U=U, mode=mode: Xt.ttm(U.T, mode)
                t = interleaved(fns, 3 if big else args.repeat)
                ref = np.moveaxis(np.tensordot(U.T, X, axes=(1, mode)), 0, mode)
                ok = bool(np.allclose(ttm(X, U, mode, transpose=True), ref))
                row = {
                    "shape": list(shape), "rank": R, "mode": mode, "kind": str(plan.kind), "copies": plan.copies,
                    "parallel": plan.parallel, "correct": ok,
                    **{f"t_{k}": v for k, v in t.items()},
                    "ratio_floor_sum": t["tuckerkit"] / t["floor_sum"],
                    "ratio_floor_copy": t["tuckerkit"] / t["floor_copy"],
                    "ratio_gemm": t["tuckerkit"] / t["gemm"],
                    "speedup_tensorly": t["tensorly"] / t["tuckerkit"],
                    "speedup_pyttb": (t["pyttb"] / t["tuckerkit"]) if "pyttb" in t else None,
                }
                rows.append(row)
                print(
                    f"{'x'.join(map(str, shape)):12s} R={R:3d} mode {mode}: {row['kind']:22s} "
                    f"{t['tuckerkit'] * 1e3:8.2f} ms | /sum {row['ratio_floor_sum']:.2f} "
                    f"/copy {row['ratio_floor_copy']:.2f} "
                    f"/gemm {row['ratio_gemm']:.2f} | x tensorly {row['speedup_tensorly']:.2f}"
                    + (f" x pyttb {row['speedup_pyttb']:.2f}" if row["speedup_pyttb"] else ""),
                    flush=True,
                )
    summary = summarize(rows)
    write_json("ttm.json", {"benchmark": "ttm", "environment": environment(), "summary": summary, "rows": rows})
    md = markdown(rows, summary)
    write_text("ttm.md", md)
    plot(rows)
    print(md.split("\n## Per case")[0])


def summarize(rows):
    sel = [r for r in rows if r["shape"] == [200, 200, 200] and r["rank"] <= 16]
    mid = [r for r in rows if r["shape"] == [200, 200, 200] and r["mode"] == 1]
    return {
        "200^3_rank<=16_worst_ratio_floor_sum": max((r["ratio_floor_sum"] for r in sel), default=None),
        "200^3_rank<=16_worst_ratio_floor_copy": max((r["ratio_floor_copy"] for r in sel), default=None),
        "200^3_rank<=16_worst_mode": max(sel, key=lambda r: r["ratio_floor_sum"])["mode"] if sel else None,
        "200^3_middle_mode_min_speedup_tensorly": min((r["speedup_tensorly"] for r in mid), default=None),
        "all_correct": all(r["correct"] for r in rows),
    }


def markdown(rows, summary) -> str:
    s = summary
    lines = [
        "# TTM per mode: tuckerkit vs streaming floors, equal-size GEMM, TensorLy, pyttb",
        "",
        "Ratios are tuckerkit time / reference time (lower is better); speedups are other / tuckerkit.",
        "",
        f"* 200^3 float64, rank <= 16, worst mode ({s['200^3_rank<=16_worst_mode']}): "
        f"{s['200^3_rank<=16_worst_ratio_floor_sum']:.2f}x the `X.sum()` floor, "
        f"{s['200^3_rank<=16_worst_ratio_floor_copy']:.2f}x the copy floor.",
        f"* 200^3 middle mode: at least {s['200^3_middle_mode_min_speedup_tensorly']:.2f}x faster than "
        "`tensorly.tenalg.mode_dot` (all ranks).",
        "",
        "## Per case",
        "",
        "| shape | rank | mode | kernel | tuckerkit ms | / X.sum() | / copy | / equal GEMM | x TensorLy | x pyttb |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        py = f"{r['speedup_pyttb']:.2f}" if r["speedup_pyttb"] else "-"
        lines.append(
            f"| {'x'.join(map(str, r['shape']))} | {r['rank']} | {r['mode']} | {r['kind']} | "
            f"{r['t_tuckerkit'] * 1e3:.2f} | {r['ratio_floor_sum']:.2f} | {r['ratio_floor_copy']:.2f} | "
            f"{r['ratio_gemm']:.2f} | {r['speedup_tensorly']:.2f} | {py} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({tuple(r["shape"]) for r in rows}, key=lambda s: (len(s), s))
    fig, axes = plt.subplots(1, len(shapes), figsize=(4 * len(shapes), 3.4), squeeze=False)
    for ax, shape in zip(axes[0], shapes, strict=True):
        sel = [r for r in rows if tuple(r["shape"]) == shape]
        ranks = sorted({r["rank"] for r in sel})
        for R in ranks:
            rr = [r for r in sel if r["rank"] == R]
            ax.plot([r["mode"] for r in rr], [r["ratio_floor_sum"] for r in rr], "o-", label=f"rank {R}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(2.0, color="r", lw=0.8, ls="--")
        ax.set_title("x".join(map(str, shape)))
        ax.set_xlabel("mode")
        ax.set_ylabel("time / X.sum()")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("TTM time relative to one streaming pass over the tensor")
    fig.tight_layout()
    fig.savefig(RESULTS / "ttm.png", dpi=110)


if __name__ == "__main__":
    main()
