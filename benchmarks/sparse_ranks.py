"""Sparse CP-ALS per iteration at ranks off a multiple of 16: the MTTKRPs on the column-blocked kernels with
zero columns added (``tuckerkit.sparse._mttkrp.padded_rank``: the default, from rank 2 the narrow kernels'
8 columns up to rank 8, above it a multiple of 16) against the wide kernels only (16 columns from rank 5: the
default before stop 56) and the loop form (padding off), side by side in one process on the project's sparse
benchmark tensors.

Each column of an MTTKRP is computed alone, by the same operations in the same order in every kernel, so
all arms reach the same fit to the bit (checked here); only the time differs. Per tensor, rank and dtype:
``--iters`` CP-ALS iterations (``tol=0``, the same seeded start), the arms interleaved ``--repeat`` times,
medians; 2 threads (the default policy), BLAS at one thread inside the kernels.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_ranks.py [--tensors skew3d,unif3d]
      [--ranks 2,4,5,8,10,16,20,24] [--dtypes float64,float32] [--iters 5] [--repeat 3]
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
#: (PAD_MIN_RANK, NARROW_RANKS) of each arm
ARMS = {"default": None, "wide": (5, False), "loop": (OFF, False)}


def run_arm(X, rank: int, iters: int, setting):
    sparse_mttkrp_module.PAD_MIN_RANK, sparse_mttkrp_module.NARROW_RANKS = setting
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tk.cp_als(X, rank, max_iter=iters, tol=0, random_state=0)
    return (time.perf_counter() - t0) / iters, model


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", default="skew3d,unif3d")
    ap.add_argument("--ranks", default="2,4,5,8,10,16,20,24")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    default = (sparse_mttkrp_module.PAD_MIN_RANK, sparse_mttkrp_module.NARROW_RANKS)
    arms = {k: (default if v is None else v) for k, v in ARMS.items()}
    rows = []
    for name in args.tensors.split(","):
        base = make_sparse_benchmark(name).data
        for dt in args.dtypes.split(","):
            X = COOTensor(base.coords, base.values.astype(dt), base.shape)
            for rank in (int(r) for r in args.ranks.split(",")):
                for setting in arms.values():  # (warm: trees built, kernels compiled, buffers made)
                    run_arm(X, rank, 1, setting)
                times: dict[str, list[float]] = {k: [] for k in arms}
                fits: dict[str, float] = {}
                for rep in range(args.repeat):
                    for arm in (list(arms) if rep % 2 == 0 else list(arms)[::-1]):
                        t, model = run_arm(X, rank, args.iters, arms[arm])
                        times[arm].append(t)
                        fits[arm] = float(model.fit)
                med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
                columns = {}
                for arm, setting in arms.items():
                    sparse_mttkrp_module.PAD_MIN_RANK, sparse_mttkrp_module.NARROW_RANKS = setting
                    columns[arm] = sparse_mttkrp_module.padded_rank(rank)
                sparse_mttkrp_module.PAD_MIN_RANK, sparse_mttkrp_module.NARROW_RANKS = default
                row = {"tensor": name, "dtype": dt, "rank": rank, "columns": columns, "ms": med,
                       "over_wide": med["default"] / med["wide"], "over_loop": med["default"] / med["loop"],
                       "same_fit": len(set(fits.values())) == 1, "fit": fits["default"], "samples_s": times}
                rows.append(row)
                print(f"{name} {dt} rank {rank}: " + ", ".join(f"{k} ({columns[k]} columns) {v:.1f} ms/it"
                                                            for k, v in med.items())
                      + f"; same fit {row['same_fit']}", flush=True)
    sparse_mttkrp_module.PAD_MIN_RANK, sparse_mttkrp_module.NARROW_RANKS = default
    write_json("sparse_ranks.json", {"environment": environment(), "args": vars(args), "rows": rows})
    lines = ["# Sparse CP-ALS at ranks off a multiple of 16: zero columns on the blocked kernels vs the loop form",
             "", f"Per iteration, {args.iters} iterations from the same seeded start, tol=0, the arms interleaved "
             f"{args.repeat} times in one process, medians; 2 threads. default: the narrow kernels (8 columns) "
             "from rank 2 to 8, the wide ones (a multiple of 16) above; wide: 16-column kernels only, from rank 5 "
             "(the default before stop 56); loop: no zero columns.", "",
             "| tensor | dtype | rank | columns (default / wide) | default ms/it | wide ms/it | loop ms/it | "
             "default / wide | default / loop | same fit |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, m = r["columns"], r["ms"]
        lines.append(f"| {r['tensor']} | {r['dtype']} | {r['rank']} | {c['default']} / {c['wide']} | "
                     f"{m['default']:.1f} | {m['wide']:.1f} | {m['loop']:.1f} | {r['over_wide']:.2f}x | "
                     f"{r['over_loop']:.2f}x | {'yes' if r['same_fit'] else 'NO'} |")
    lines += ["", "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_ranks.py`."]
    write_text("sparse_ranks.md", "\n".join(lines) + "\n")
    groups = [f"{r['tensor']} {r['dtype'][5:]} R{r['rank']}" for r in rows]
    grouped_bars("sparse_ranks.png", groups, {k: [r["ms"][k] for r in rows] for k in arms},
                 "ms per iteration", "Sparse CP-ALS: narrow and wide blocked kernels vs the loop form")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
