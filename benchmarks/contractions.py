"""Seed Table II contractions: tuckerkit vs numpy.einsum(optimize=True) vs transpose-transpose-GEMM-transpose.

Every one of the 36 single-mode 2nd x 3rd order cases (seed 000, Table II) on C-ordered n x n and n x n x n
operands (one pair per n and dtype, the spec labelling its modes), n in {32, 64, 128, 256}, float32 and
float64; medians of interleaved calls in one process, taken in ``--repeat`` passes over all 36 cases (n = 256
two fewer but at least five), each pass timing every case round-robin for at least 0.2 s / passes. A slow
spell of the shared machine (it lasts seconds) then falls in one pass of many cases rather than in every
repeat of a few, and each case's median leaves it out: with all repeats of a case back to back, the worst
of 72 cases was set by whichever case a slow spell hit (n = 64, 2026-11-28: cases of one kind and size ran
0.33 and 0.64 ms). After every call tuckerkit's GEMM helpers are parked, so each of its calls starts cold,
and OpenBLAS's idle workers sleep at once (``_quiet_blas``), so each einsum or TTGT call starts cold too.

``--warm``: each library as in a loop of its own calls, which is what a user timing one of them sees. OpenBLAS
keeps its defaults (its workers spin for about 0.1 s after a threaded call, so einsum's and TTGT's next call
finds them awake), and each callable runs in a block of back-to-back calls (the first one of a block not
timed), the blocks round-robin; between blocks, not within them, tuckerkit's helpers are parked and OpenBLAS's
workers stopped, so no block runs beside threads another library left spinning. Small calls gain most from it:
einsum's and TTGT's GEMMs run on OpenBLAS's two threads without waking them, where tuckerkit holds a GEMM
below CONTRACT_PARALLEL_FLOPS to one thread (OpenBLAS's threads change the bits of some shapes). Writes
contractions_warm.{json,md}.

Run:  python benchmarks/contractions.py [--sizes 32,64,128,256] [--repeat 7] [--quick] [--warm]
Writes benchmarks/results/contractions.{json,md,png}.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

WARM = "--warm" in sys.argv[1:]
if not WARM:
    import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import _park, environment, geomean, interleaved_samples, result_stem, write_json, write_text  # noqa: E402

from tuckerkit.engine import contract, plan_contraction  # noqa: E402

_FREE = {"m": "np", "n": "mp", "p": "mn"}
_B_PATTERNS = ["k{y}{z}", "k{z}{y}", "{y}k{z}", "{z}k{y}", "{y}{z}k", "{z}{y}k"]


def table2():
    out = []
    for i, (x, k_first) in enumerate((x, kf) for x in "mnp" for kf in (False, True)):
        a = ("k" + x) if k_first else (x + "k")
        y, z = _FREE[x]
        for j, pat in enumerate(_B_PATTERNS):
            out.append((f"{i + 1}.{j + 1}", f"{a},{pat.format(y=y, z=z)}->mnp"))
    return out


def ttgt(spec: str, A, B, xp=np):
    """The conventional evaluation (Tensor Toolbox, TensorLy): permute copies, one GEMM, permute the result
    (``xp``: numpy, or cupy for the GPU benchmark)."""
    lhs, c = spec.split("->")
    a, b = lhs.split(",")
    K = [x for x in a if x in b and x not in c]
    I = [x for x in c if x in a]  # noqa: E741
    J = [x for x in c if x in b]
    size = dict(zip(a, A.shape, strict=True)) | dict(zip(b, B.shape, strict=True))
    Ap = xp.ascontiguousarray(A.transpose([a.index(x) for x in I + K])).reshape(
        math.prod(size[x] for x in I), math.prod(size[x] for x in K)
    )
    Bp = xp.ascontiguousarray(B.transpose([b.index(x) for x in K + J])).reshape(
        math.prod(size[x] for x in K), math.prod(size[x] for x in J)
    )
    Cp = (Ap @ Bp).reshape([size[x] for x in I + J])
    return xp.ascontiguousarray(Cp.transpose([(I + J).index(x) for x in c]))


def _case(case: str, spec: str, A, B) -> dict:
    """One Table II case on the shared operands: its plan, its error against einsum, the three callables and
    their samples."""
    plan = plan_contraction(spec, A, B)
    ref = np.einsum(spec, A, B, optimize=True)
    err = float(np.max(np.abs(contract(spec, A, B) - ref)) / max(np.max(np.abs(ref)), 1e-30))
    fns = {
        "tuckerkit": lambda: contract(spec, A, B, plan=plan),
        "einsum": lambda: np.einsum(spec, A, B, optimize=True),
        "ttgt": lambda: ttgt(spec, A, B),
    }
    return {"case": case, "spec": spec, "plan": plan, "err": err, "fns": fns, "samples": {k: [] for k in fns}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="32,64,128,256")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="n=32,64 only, 3 repeats (a smoke run)")
    ap.add_argument("--name", default=None, type=result_stem,
                    help="results file stem under benchmarks/results (default: contractions, contractions_warm)")
    ap.add_argument("--device", default="cpu", help="cuda: run this benchmark on the GPU (benchmarks/gpu.py)")
    ap.add_argument("--warm", action="store_true",
                    help="each library as in a loop of its own calls: OpenBLAS's defaults, blocks of calls")
    args = ap.parse_args(argv)
    if args.warm != WARM:  # (called with argv, not from the command line: the OpenBLAS setting is already made)
        raise SystemExit("--warm must be given on the command line (it decides OpenBLAS's setting at import)")
    if args.device != "cpu":
        import gpu

        return gpu.main(["contractions", *(["--quick"] if args.quick else [])])
    sizes = [32, 64] if args.quick else [int(s) for s in args.sizes.split(",")]
    repeat = 3 if args.quick else args.repeat
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        # passes over all 36 cases, each pass timing every case for a share of its time: a slow spell of the
        # shared machine (seconds) then falls in one pass of many cases instead of every repeat of a few, and
        # each case's median over its passes leaves it out
        passes = repeat if n <= 128 else max(5, repeat - 2)
        for dt in args.dtypes.split(","):
            A = rng.standard_normal((n, n)).astype(dt)
            B = rng.standard_normal((n, n, n)).astype(dt)  # (one operand for all cases: the spec labels its modes)
            cases = [_case(case, spec, A, B) for case, spec in table2()]
            for p in range(passes):
                for c in cases[p % len(cases):] + cases[: p % len(cases)]:
                    timed = (block_samples(c["fns"], 0.2 / passes) if args.warm else
                             interleaved_samples(c["fns"], 1, min_time=0.2 / passes, warm=p == 0))
                    for k, v in timed.items():
                        c["samples"][k].extend(v)
            for c in cases:
                t = {k: float(np.median(v)) for k, v in c["samples"].items()}
                plan = c["plan"]
                rows.append(
                    {
                        "case": c["case"], "spec": c["spec"], "operands": c["spec"].split("->")[0].split(","),
                        "n": n, "dtype": dt, "kind": str(plan.kind), "remedy": str(plan.remedy),
                        "copies": plan.copies, "t_tuckerkit": t["tuckerkit"], "t_einsum": t["einsum"],
                        "t_ttgt": t["ttgt"], "speedup_einsum": t["einsum"] / t["tuckerkit"],
                        "speedup_ttgt": t["ttgt"] / t["tuckerkit"],
                        "speedup_best": min(t["einsum"], t["ttgt"]) / t["tuckerkit"], "rel_err": c["err"],
                        "samples": len(c["samples"]["tuckerkit"]),
                    }
                )
                r = rows[-1]
                print(
                    f"n={n:4d} {dt:8s} {r['case']:4s} {r['spec']:12s} {r['kind']:22s} "
                    f"tk {r['t_tuckerkit'] * 1e3:8.3f} ms einsum x{r['speedup_einsum']:5.2f} "
                    f"ttgt x{r['speedup_ttgt']:5.2f}",
                    flush=True,
                )
    summary = summarize(rows)
    name = args.name or ("contractions_warm" if args.warm else "contractions")
    payload = {"benchmark": name, "environment": environment(), "summary": summary, "rows": rows,
               "regime": REGIME_WARM if args.warm else REGIME_COLD}
    write_json(f"{name}.json", payload)
    write_text(f"{name}.md", markdown(rows, summary, args.warm))
    if not args.warm:
        plot(rows, name)
    print(markdown(rows, summary, args.warm).split("\n## Per case")[0])


REGIME_WARM = "warm: blocks of back-to-back calls, OpenBLAS defaults, threads parked only between blocks"
REGIME_COLD = "cold: calls interleaved, tuckerkit's helpers parked, OPENBLAS_THREAD_TIMEOUT=4"


def block_samples(fns, min_time: float) -> dict[str, list[float]]:
    """Each callable's seconds per call over a block of back-to-back calls lasting at least ``min_time`` / 3
    (at least three calls; one more before them not timed), the callables' blocks one after another: each
    library in the state its own previous call left (``--warm``). Between blocks tuckerkit's helpers are parked
    and OpenBLAS's workers stopped (:func:`~tuckerkit.engine._policy.quiet_blas_workers`), so no block runs
    beside threads another library left spinning; each block's untimed first call wakes its own."""
    from tuckerkit.engine._policy import quiet_blas_workers

    out: dict[str, list[float]] = {}
    for k, fn in fns.items():
        fn()
        times = []
        start = time.perf_counter()
        while len(times) < 3 or time.perf_counter() - start < min_time / 3:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[k] = times
        _park()
        quiet_blas_workers()
    return out


def summarize(rows):
    small = [r for r in rows if r["n"] <= 128]
    out = {
        "geomean_speedup_vs_einsum_n<=128": geomean(r["speedup_einsum"] for r in small),
        "geomean_speedup_vs_ttgt_n<=128": geomean(r["speedup_ttgt"] for r in small),
        "min_speedup_vs_faster_n<=128": min((r["speedup_best"] for r in small), default=float("nan")),
        "worst_case_n<=128": min(small, key=lambda r: r["speedup_best"])["case"] if small else None,
    }
    for n in sorted({r["n"] for r in rows}):
        sel = [r for r in rows if r["n"] == n]
        out[f"n={n}"] = {
            "geomean_vs_einsum": geomean(r["speedup_einsum"] for r in sel),
            "geomean_vs_ttgt": geomean(r["speedup_ttgt"] for r in sel),
            "min_vs_faster": min(r["speedup_best"] for r in sel),
        }
    return out


def markdown(rows, summary, warm: bool = False) -> str:
    how = ("each library warm, as in a loop of its own calls: blocks of back-to-back calls, OpenBLAS's defaults "
           "(its workers stay awake between einsum's calls), threads parked only between blocks; medians over the "
           "blocks of several "
           "passes, one process" if warm else
           "every call cold: calls interleaved round-robin, tuckerkit's helpers parked and OpenBLAS's workers "
           "asleep (OPENBLAS_THREAD_TIMEOUT=4) before each; median of interleaved repeats, one process")
    lines = [
        "# Table II contractions: tuckerkit vs numpy.einsum(optimize=True) vs TTGT" + (" (warm)" if warm else ""),
        "",
        f"Speedup = other time / tuckerkit time ({how}).",
        "",
        "| n | geo-mean vs einsum | geo-mean vs TTGT | worst case vs the faster of the two |",
        "|---|---|---|---|",
    ]
    for key, val in summary.items():
        if key.startswith("n="):
            lines.append(
                f"| {key[2:]} | {val['geomean_vs_einsum']:.2f}x | {val['geomean_vs_ttgt']:.2f}x | "
                f"{val['min_vs_faster']:.2f}x |"
            )
    lines += [
        "",
        f"Across n <= 128: geometric mean {summary['geomean_speedup_vs_einsum_n<=128']:.2f}x over einsum, "
        f"{summary['geomean_speedup_vs_ttgt_n<=128']:.2f}x over TTGT; worst case "
        f"{summary['min_speedup_vs_faster_n<=128']:.2f}x of the faster baseline (case {summary['worst_case_n<=128']}).",
        "",
        "## Per case",
        "",
        "| n | dtype | case | spec | kernel | tuckerkit ms | x einsum | x TTGT |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['dtype']} | {r['case']} | `{r['spec']}` | {r['kind']} | {r['t_tuckerkit'] * 1e3:.3f} | "
            f"{r['speedup_einsum']:.2f} | {r['speedup_ttgt']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows, name: str = "contractions") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["n"] for r in rows})
    cases = [c for c, _ in table2()]
    fig, axes = plt.subplots(len(sizes), 1, figsize=(13, 2.6 * len(sizes)), sharex=True, squeeze=False)
    shown = "float64" if any(r["dtype"] == "float64" for r in rows) else rows[0]["dtype"]  # (--dtypes float32)
    for ax, n in zip(axes[:, 0], sizes, strict=True):
        sel = {r["case"]: r for r in rows if r["n"] == n and r["dtype"] == shown}
        x = np.arange(len(cases))
        ax.bar(x - 0.2, [sel[c]["speedup_einsum"] for c in cases], 0.4, label="vs numpy.einsum(optimize=True)")
        ax.bar(x + 0.2, [sel[c]["speedup_ttgt"] for c in cases], 0.4, label="vs TTGT")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylabel(f"n={n}\nspeedup")
    axes[-1, 0].set_xticks(np.arange(len(cases)), cases, rotation=90)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[0, 0].set_title(f"tuckerkit speedup per seed Table II case ({shown}, C-ordered operands)")
    fig.tight_layout()
    from _common import RESULTS

    fig.savefig(RESULTS / f"{name}.png", dpi=110)


if __name__ == "__main__":
    main()
