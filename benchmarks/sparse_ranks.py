"""Sparse CP-ALS per iteration at ranks off a multiple of 16: the root MTTKRP on the column-blocked kernels with
zero columns added (``tuckerkit.sparse._mttkrp.padded_rank``, the default from rank 5) against the loop form
(padding off), side by side in one process on the project's sparse benchmark tensors.

Each column of a root MTTKRP is computed alone, by the same operations in the same order in either kernel, so
both arms reach the same fit to the bit (checked here); only the time differs. Per tensor, rank and dtype:
``--iters`` CP-ALS iterations (``tol=0``, the same seeded start), the two arms interleaved ``--repeat`` times,
medians; 2 threads (the default policy), BLAS at one thread inside the kernels.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_ranks.py [--tensors skew3d,unif3d]
      [--ranks 5,10,16,20,24] [--dtypes float64,float32] [--iters 5] [--repeat 3]
Writes benchmarks/results/sparse_ranks.{json,md,png}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, grouped_bars, write_json, write_text
from tuckerkit.datasets import make_sparse_benchmark

import tuckerkit as tk
import tuckerkit.sparse._mttkrp as sparse_mttkrp_module
from tuckerkit.sparse import COOTensor

OFF = 1 << 30  # a PAD_MIN_RANK that no rank reaches: the loop form


def run_arm(X, rank: int, iters: int, pad_min: int):
    sparse_mttkrp_module.PAD_MIN_RANK = pad_min
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tk.cp_als(X, rank, max_iter=iters, tol=0, random_state=0)
    return (time.perf_counter() - t0) / iters, model


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", default="skew3d,unif3d")
    ap.add_argument("--ranks", default="5,10,16,20,24")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    default = sparse_mttkrp_module.PAD_MIN_RANK
    rows = []
    for name in args.tensors.split(","):
        base = make_sparse_benchmark(name).data
        for dt in args.dtypes.split(","):
            X = COOTensor(base.coords, base.values.astype(dt), base.shape)
            for rank in (int(r) for r in args.ranks.split(",")):
                arms = {"padded": default, "loop": OFF}
                for pad in arms.values():  # (warm: trees built, kernels compiled, buffers made)
                    run_arm(X, rank, 1, pad)
                times: dict[str, list[float]] = {k: [] for k in arms}
                fits: dict[str, float] = {}
                for _ in range(args.repeat):
                    for arm, pad in arms.items():
                        t, model = run_arm(X, rank, args.iters, pad)
                        times[arm].append(t)
                        fits[arm] = float(model.fit)
                med = {k: statistics.median(v) for k, v in times.items()}
                sparse_mttkrp_module.PAD_MIN_RANK = default
                row = {"tensor": name, "dtype": dt, "rank": rank,
                       "columns": sparse_mttkrp_module.padded_rank(rank),
                       "padded_ms": med["padded"] * 1e3, "loop_ms": med["loop"] * 1e3,
                       "ratio": med["padded"] / med["loop"], "same_fit": fits["padded"] == fits["loop"],
                       "fit": fits["padded"], "samples_s": times}
                rows.append(row)
                print(f"{name} {dt} rank {rank}: padded to {row['columns']} {row['padded_ms']:.1f} ms/it, loop "
                      f"{row['loop_ms']:.1f} ms/it, ratio {row['ratio']:.2f}, same fit {row['same_fit']}",
                      flush=True)
    sparse_mttkrp_module.PAD_MIN_RANK = default
    write_json("sparse_ranks.json", {"environment": environment(), "args": vars(args), "rows": rows})
    lines = ["# Sparse CP-ALS at ranks off a multiple of 16: zero columns on the blocked kernels vs the loop form",
             "", f"Per iteration, {args.iters} iterations from the same seeded start, tol=0, the two arms "
             f"interleaved {args.repeat} times in one process, medians; 2 threads. Rank 16 takes the blocked "
             "kernels in both arms (no padding): its two columns time the same code.", "",
             "| tensor | dtype | rank | columns computed | padded ms/it | loop ms/it | padded / loop | same fit |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tensor']} | {r['dtype']} | {r['rank']} | {r['columns']} | {r['padded_ms']:.1f} | "
                     f"{r['loop_ms']:.1f} | {r['ratio']:.2f}x | {'yes' if r['same_fit'] else 'NO'} |")
    lines += ["", "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_ranks.py`."]
    write_text("sparse_ranks.md", "\n".join(lines) + "\n")
    groups = [f"{r['tensor']} {r['dtype'][5:]} R{r['rank']}" for r in rows]
    grouped_bars("sparse_ranks.png", groups, {"padded": [r["padded_ms"] for r in rows],
                                              "loop form": [r["loop_ms"] for r in rows]},
                 "ms per iteration", "Sparse CP-ALS: zero columns on the blocked kernels vs the loop form")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
