"""CP-ALS: tuckerkit vs TensorLy ``parafac`` vs pyttb ``cp_als``, per-iteration time, fit and peak memory.

Rank 10 and 50 on 200^3 and 60^4 float64 tensors (low rank 10 + 1 % noise); every library starts from the
same random factors and runs the same number of iterations with no early stop; the final fits are compared.
Peak extra memory beyond the input is measured with tracemalloc. A float32 case, and every iteration as a ratio
to its roofline R = 2 passes x one streaming read of X + the factor work timed alone (per mode: the Hadamard
product of the other Grams, the Cholesky solve, the new Gram), all measured in the same run. The iteration
against R is tuckerkit's steady state (``steady``: the median over every timed run's cycles of 6 iterations after
its first, from the callbacks' times, benchmarks/roofline.py's ``steady_cycles``; ``/ R``: the median of each
cycle over the R made with the read sampled right after its run, ``paired_ratios``; ``/ R flops`` with each pass
bounded by max(read, its flops / the GEMM peak sampled right after the run, ``GemmSample``), and ``/ R flops top``
with the highest of those samples and the end's median for every run, stricter); the whole call over the
iterations (its start, the norm of X and the first sweep's second pass spread over them) is the figure set against
the other libraries, and against R too (``/ R whole``).

Run:  python benchmarks/cp.py [--quick] [--iters 10]
      python benchmarks/cp.py --runs 3 --repeat 5     (three whole runs; each case the figures of its median run)
Writes benchmarks/results/cp.{json,md,png}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, environment, interleaved, positive_int, result_stem, sweeps_flag, write_json, write_text
from roofline import GemmSample, InterleavedRead, gemm_peak, paired_ratios, read_bound, steady_cycles

import tuckerkit as tk
from tuckerkit.decomposition._linalg import spd_solve
from tuckerkit.engine import release_memory


def iteration_roofline(X, factors, repeat: int = 5, read: float | None = None) -> dict:
    """R = 2 x one streaming read of X + one iteration's factor work timed alone (same run), and R_flops: each
    pass bound by max(one read, its 2 |X| rank flops / GEMM peak) instead of the read alone (at rank 50 the
    passes' GEMM work, not the read, is the floor)."""
    read = read_bound(X, repeat)["read"] if read is None else read  # else: sampled between the timed runs
    peak = gemm_peak(X.dtype, repeat)
    pass_flops = 2.0 * X.size * factors[0].shape[1]
    N = len(factors)
    Ms = [np.ascontiguousarray(U) for U in factors]  # stand-ins for the MTTKRPs: same shapes

    def factor_work():
        grams = [U.T @ U for U in factors]
        for n in range(N):
            V = np.ones_like(grams[0])
            for m in range(N):
                if m != n:
                    V *= grams[m]
            U = spd_solve(V + np.eye(V.shape[0], dtype=V.dtype), Ms[n])
            grams[n] = U.T @ U

    t = interleaved({"factor": factor_work}, repeat)
    return {"read_s": read, "factor_s": t["factor"], "passes": 2, "R_s": 2 * read + t["factor"],
            "gemm_peak_flops": peak, "pass_flops": pass_flops,
            "R_flops_s": 2 * max(read, pass_flops / peak) + t["factor"]}


def _passes(X, R, init) -> float:
    """tuckerkit's full passes over X per iteration on this case (four iterations, the pattern's mean)."""
    return tk.cp_als(X, R, init=[U.copy() for U in init], max_iter=4, tol=0.0, linesearch=False).passes_per_iteration


def planted(shape, rank, seed=0, noise=0.01):
    rng = np.random.default_rng(seed)
    Us = [rng.standard_normal((n, rank)) for n in shape]
    X = np.asarray(tk.CPTensor(np.ones(rank), tuple(Us)).to_dense())
    E = rng.standard_normal(shape)
    return X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E


def _median_runs(runs: list[list[dict]]) -> list[dict]:
    """The rows of ``--runs`` whole runs (the same cases in the same order): for each case the row of its median
    run by ``ratio_roofline_flops`` (an even count: the slower of the middle two), every figure of it from that
    one run, with every run's ratios in ``ratio_roofline_runs`` / ``ratio_roofline_flops_runs``. On the shared
    2-core machines two runs a minute apart differed by up to 1.5x (CP-ALS float32 rank 50: 4.41 and 6.99 ms
    steady): one run is a sample of the minute it ran in."""
    out = []
    for case in zip(*runs, strict=True):
        row = dict(sorted(case, key=lambda r: r["ratio_roofline_flops"])[len(case) // 2])
        if len(case) > 1:
            for key in ("ratio_roofline", "ratio_roofline_flops", "ratio_roofline_flops_top_peak"):
                row[f"{key}_runs"] = [r[key] for r in case]
            row["steady_iteration_ms_runs"] = [r["steady_iteration_ms"] for r in case]
        out.append(row)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cuda: run this benchmark on the GPU (benchmarks/gpu.py)")
    ap.add_argument("--name", default="cp", type=result_stem,
                    help="results file stem under benchmarks/results (default: cp)")
    ap.add_argument("--runs", default=1, type=positive_int,
                    help="whole runs of every case, one after another; each case reports its median run (default 1)")
    args = ap.parse_args(argv)
    if args.device != "cpu":
        import gpu

        return gpu.main(["cp", *(["--quick"] if args.quick else [])])
    warnings.simplefilter("ignore")
    import pyttb as ttb
    import tensorly.decomposition as tld
    from tensorly.cp_tensor import CPTensor as TLCP

    cases = [((200, 200, 200), 10, "float64"), ((200, 200, 200), 50, "float64"), ((200, 200, 200), 10, "float32"),
             ((200, 200, 200), 50, "float32"), ((60, 60, 60, 60), 10, "float64"), ((60, 60, 60, 60), 50, "float64")]
    if args.quick:
        cases = [((60, 60, 60), 10, "float64"), ((60, 60, 60), 10, "float32")]
    whole_runs: list[list[dict]] = []
    for _ in range(args.runs):
        rows: list[dict] = []
        whole_runs.append(rows)
        for shape, R, dtype in cases:
            X = planted(shape, 10).astype(dtype)
            rng = np.random.default_rng(1)
            init = [rng.standard_normal((n, R)).astype(dtype) for n in shape]
            it = args.iters
            Xt = ttb.tensor(X.astype(np.float64), copy=False)  # pyttb computes in float64 only

            stamps: list[float] = []  # (the times of the last call's callbacks)

            def ours(X=X, R=R, init=init, it=it, stamps=stamps):
                stamps.clear()
                return tk.cp_als(X, R, init=tk.CPTensor(np.ones(R), tuple(U.copy() for U in init)), max_iter=it,
                                 tol=0.0, linesearch=False, callback=lambda _: stamps.append(time.perf_counter())).fit

            def tensorly(X=X, R=R, init=init, it=it):  # (the model: its fit is computed after the timed call)
                return tld.parafac(X, R, init=TLCP((np.ones(R), [U.copy() for U in init])), n_iter_max=it, tol=0,
                                   normalize_factors=True)

            def pyttb_run(Xt=Xt, R=R, init=init, it=it):
                k0 = ttb.ktensor([U.astype(np.float64) for U in init])
                _, _, info = ttb.cp_als(Xt, R, stoptol=0.0, maxiters=it, init=k0, printitn=0)
                return float(info["fit"])

            def two_pass(X=X, R=R, init=init, it=it):
                with sweeps_flag("MULTI_SWEEP", False):  # the two-pass tree of stop 71 (3-way tensors)
                    return ours(X, R, init, it)

            fns = {"tuckerkit": ours, "tensorly": tensorly, "pyttb": pyttb_run}
            if len(shape) == 3:
                fns["two_pass"] = two_pass
            times = {k: [] for k in fns}
            runs: list[tuple[list[float], int]] = []  # (each run's steady cycles, the read sampled right after it)
            fits = {}
            for fn in fns.values():  # warm-up: plans, compiled kernels, first-touch allocations
                fn()
            reads = InterleavedRead(X)
            gemm = GemmSample(X.dtype)
            peaks = []  # (the GEMM peak sampled right after each of tuckerkit's runs, after its read)
            for r in range(args.repeat):
                for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                    t0 = time.perf_counter()
                    got = fns[k]()
                    times[k].append(time.perf_counter() - t0)
                    fits[k] = (float(got) if k != "tensorly" else
                               float(1 - np.linalg.norm(X - np.asarray(got.to_tensor())) / np.linalg.norm(X)))
                    i = reads.sample(after=k)
                    if k == "tuckerkit":
                        runs.append((steady_cycles(stamps), i))
                        peaks.append(gemm.sample())
            med = {k: float(np.median(v)) for k, v in times.items()}
            steady_s = statistics.median(c for cycles, _ in runs for c in cycles)  # (every run's cycles)
            pairs = [(cycles, reads.at(i)) for cycles, i in runs]
            read_after = reads.by_caller()
            mem = {}
            for k in ("tuckerkit", "tensorly"):
                release_memory()  # (from an empty block pool: idle blocks would serve the call untraced)
                tracemalloc.start()
                base = tracemalloc.get_traced_memory()[0]
                fns[k]()
                mem[k] = tracemalloc.get_traced_memory()[1] - base
                tracemalloc.stop()
            roof = iteration_roofline(X, init, read=reads.read())
            # the flops bound of each run from the GEMM peak sampled right after it (as its read is: a minute in which a
            # neighbour takes the cores' vector units slows bound and run alike), the verdict; beside it the bound from
            # the highest of all samples (its median at the end too), stricter
            top = max([roof["gemm_peak_flops"], *peaks])
            row = {
                "shape": list(shape), "rank": R, "dtype": dtype, "iterations": it, "seconds": med,
                "roofline": roof, "steady_iteration_ms": 1e3 * steady_s,
                "read_after_s": read_after,  # (the median read sampled after each library's calls)
                # each steady cycle against R made with the read sampled right after its run (benchmarks/roofline.py
                # paired_ratios), the median; ``_pooled``: the median cycle over R from the median read
                "ratio_roofline": statistics.median(paired_ratios(pairs, roof["passes"], roof["factor_s"])),
                "ratio_roofline_flops": statistics.median(paired_ratios(
                    [(c, max(read, roof["pass_flops"] / pk)) for (c, read), pk in zip(pairs, peaks, strict=True)],
                    roof["passes"], roof["factor_s"])),
                "ratio_roofline_flops_top_peak": statistics.median(paired_ratios(
                    [(c, max(read, roof["pass_flops"] / top)) for c, read in pairs], roof["passes"], roof["factor_s"])),
                "gemm_peak_samples_flops": peaks, "top_gemm_peak_flops": top,
                "ratio_roofline_pooled": steady_s / roof["R_s"],
                "ratio_roofline_flops_pooled": steady_s / roof["R_flops_s"],
                "ratio_roofline_whole": med["tuckerkit"] / it / roof["R_s"],
                "ratio_roofline_flops_whole": med["tuckerkit"] / it / roof["R_flops_s"],
                "per_iteration_ms": {k: 1e3 * v / it for k, v in med.items()}, "fit": fits,
                "speedup_vs_tensorly": med["tensorly"] / med["tuckerkit"],
                "speedup_vs_pyttb": med["pyttb"] / med["tuckerkit"],
                "peak_extra_over_input": {k: v / X.nbytes for k, v in mem.items()}, "input_bytes": int(X.nbytes),
                "fit_gap": max(abs(fits["tuckerkit"] - fits["tensorly"]), abs(fits["tuckerkit"] - fits["pyttb"])),
                "passes_per_iteration": _passes(X, R, init),
            }
            # R counts the standard tree's two passes (the R); also against the passes tuckerkit takes
            row["ratio_roofline_measured_passes"] = steady_s / (
                row["passes_per_iteration"] * roof["read_s"] + roof["factor_s"])
            if "two_pass" in med:
                row["ratio_two_pass"] = med["tuckerkit"] / med["two_pass"]
            rows.append(row)
            print(f"CP {'x'.join(map(str, shape))} {dtype} R={R}: tk {row['per_iteration_ms']['tuckerkit']:.1f} ms/it "
                  f"(steady {row['steady_iteration_ms']:.2f}; /R {row['ratio_roofline']:.2f}, whole "
                  f"{row['ratio_roofline_whole']:.2f}, R {roof['R_s'] * 1e3:.2f} ms) | "
                  f"TL x{row['speedup_vs_tensorly']:.1f} pyttb x{row['speedup_vs_pyttb']:.1f} | fits {fits} | "
                  f"mem {row['peak_extra_over_input']}", flush=True)
    rows = _median_runs(whole_runs)
    summary = {
        "min_speedup_vs_tensorly": min(r["speedup_vs_tensorly"] for r in rows),
        "min_speedup_vs_pyttb": min(r["speedup_vs_pyttb"] for r in rows),
        "max_fit_gap": max(r["fit_gap"] for r in rows),
        "worst_ratio_roofline": max(r["ratio_roofline"] for r in rows),
        "worst_ratio_roofline_flops": max(r["ratio_roofline_flops"] for r in rows),
        "worst_ratio_roofline_flops_top_peak": max(r["ratio_roofline_flops_top_peak"] for r in rows),
        "worst_ratio_roofline_whole": max(r["ratio_roofline_whole"] for r in rows),
        "worst_ratio_roofline_flops_whole": max(r["ratio_roofline_flops_whole"] for r in rows),
        "ratio_two_pass": {f"{'x'.join(map(str, r['shape']))} R={r['rank']} {r['dtype']}": r["ratio_two_pass"]
                           for r in rows if "ratio_two_pass" in r},
        "max_peak_extra_over_input_rank10": max(
            (r["peak_extra_over_input"]["tuckerkit"] for r in rows if r["rank"] <= 10), default=None),
    }
    write_json(f"{args.name}.json",
               {"benchmark": "cp_als", "environment": environment(), "summary": summary, "rows": rows})
    lines = [
        "# CP-ALS: tuckerkit vs TensorLy parafac vs pyttb cp_als",
        "",
        f"Same random initial factors, {rows[0]['iterations']} iterations each, no early stop; median of repeats.",
        "",
        f"* At least {summary['min_speedup_vs_tensorly']:.1f}x faster per iteration than TensorLy, "
        f"{summary['min_speedup_vs_pyttb']:.1f}x than pyttb; largest fit difference {summary['max_fit_gap']:.1e}.",
        f"* Iteration (the steady state, `steady`: the median over the timed runs' cycles of 6 iterations after "
        f"the first, from the callbacks' times) against its roofline R (2 reads of X + the factor work alone), "
        f"each cycle against the R of the read sampled right after its run, the median: at worst "
        f"{summary['worst_ratio_roofline']:.2f}x (floor: 1.25x). With each pass bounded by max(read, its "
        f"2 |X| rank flops / the GEMM peak sampled right after the run, with its read) instead (R flops): "
        f"at worst {summary['worst_ratio_roofline_flops']:.2f}x ({summary['worst_ratio_roofline_flops_top_peak']:.2f}x "
        f"with the run's highest GEMM sample for every run, `/ R flops top`). "
        f"The whole call over its iterations (start, norm of X and first sweep included) against the same: "
        f"{summary['worst_ratio_roofline_whole']:.2f}x / {summary['worst_ratio_roofline_flops_whole']:.2f}x.",
        *([f"* 3-way: the multi-sweep tree at {min(two.values()):.2f}-{max(two.values()):.2f}x the two-pass "
           f"tree's time."] if (two := summary["ratio_two_pass"]) else []),
        *([f"* Each case from the median of its {len(rows[0]['ratio_roofline_flops_runs'])} whole runs by `/ R "
           f"flops` (every figure of a row from that one run); `/ R flops` in each run: " + "; ".join(
               f"{'x'.join(map(str, r['shape']))} {r['dtype']} R={r['rank']} "
               + ", ".join(f"{v:.2f}" for v in r["ratio_roofline_flops_runs"]) for r in rows) + "."]
          if "ratio_roofline_flops_runs" in rows[0] else []),
        "",
        "3-way tensors: tuckerkit's sweeps share a pass between two sweeps (the multi-sweep dimension tree: 1.5 "
        "passes over X per iteration, `passes`); R keeps the two passes of the standard tree, and `two-pass` is "
        "tuckerkit with that tree, interleaved in the same run (`/ two-pass`: the multi-sweep tree's time over it).",
        *([f"Against R made with the passes tuckerkit's iteration takes instead of two: at worst {max(m):.2f}x."]
          if (m := [r["ratio_roofline_measured_passes"] for r in rows if "ratio_roofline_measured_passes" in r])
          else []),
        "",
        "pyttb computes in float64 only: on a float32 row it runs on the float64 copy of the tensor (made outside "
        "its timing). TensorLy's fit is computed after its timed and traced call, as the others report theirs.",
        "",
        "| shape | dtype | rank | tuckerkit ms/iter | steady ms | passes | two-pass ms/iter | / two-pass | R ms | / R "
        "| / R whole | R flops ms | / R flops | / R flops top | TensorLy | pyttb | x TensorLy | x pyttb "
        "| fit tk / TL / pyttb "
        "| peak extra tk / TL (x input) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, f = r["per_iteration_ms"], r["fit"]
        two = (f"{p['two_pass']:.1f} | {r['ratio_two_pass']:.2f}" if "two_pass" in p else "- | -")
        lines.append(
            f"| {'x'.join(map(str, r['shape']))} | {r['dtype']} | {r['rank']} | {p['tuckerkit']:.1f} | "
            f"{r['steady_iteration_ms']:.2f} | {r['passes_per_iteration']} | {two} | "
            f"{r['roofline']['R_s'] * 1e3:.2f} | {r['ratio_roofline']:.2f} | {r['ratio_roofline_whole']:.2f} | "
            f"{r['roofline']['R_flops_s'] * 1e3:.2f} | {r['ratio_roofline_flops']:.2f} | "
            f"{r['ratio_roofline_flops_top_peak']:.2f} | {p['tensorly']:.1f} | "
            f"{p['pyttb']:.1f} | {r['speedup_vs_tensorly']:.1f} | {r['speedup_vs_pyttb']:.1f} | "
            f"{f['tuckerkit']:.6f} / {f['tensorly']:.6f} / {f['pyttb']:.6f} | "
            f"{r['peak_extra_over_input']['tuckerkit']:.3f} / {r['peak_extra_over_input']['tensorly']:.3f} |"
        )
    write_text(f"{args.name}.md", "\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels = [f"{'x'.join(map(str, r['shape']))}\nR={r['rank']} {r['dtype']}" for r in rows]
    x = np.arange(len(rows))
    for i, k in enumerate(("tuckerkit", "tensorly", "pyttb")):
        ax.bar(x + (i - 1) * 0.27, [r["per_iteration_ms"][k] for r in rows], 0.27, label=k)
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylabel("ms per CP-ALS iteration")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{args.name}.png", dpi=110)
    plt.close(fig)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
