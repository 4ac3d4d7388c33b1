"""Sparse CP-ALS per iteration on the memory-saving CSF plans (``csf="one"`` and ``"two"``): the modes below a
tree's root on the column-blocked internal- and leaf-level kernels (the default, ``_blocked_level_kernel``)
against their loop form, side by side in one process; the ``"all"`` plan (a tree per mode, every mode on a
root kernel) beside them for reference, with each plan's tree memory.

``"one"`` and ``"two"`` are what ``csf="auto"`` picks when a tree per mode does not fit the memory budget (or
what a caller asks for). Each column of a level MTTKRP is computed alone, by the same operations in the same
order in either kernel, and the parts' private outputs are added in the same order, so both arms reach the
same fit to the bit (checked here); only the time differs. Per tensor, plan, rank and dtype: ``--iters``
CP-ALS iterations (``tol=0``, the same seeded start), the arms interleaved ``--repeat`` times, medians; 2
threads (the default policy), BLAS at one thread inside the kernels.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_levels.py
      [--tensors skew3d,unif3d,skew4d] [--ranks 10,16,32] [--dtypes float64,float32] [--iters 5] [--repeat 3]
Writes benchmarks/results/sparse_levels.{json,md,png}.
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

BLOCKED = sparse_mttkrp_module._blocked_level_kernel


def _loop_form(*_args):
    return None


def run_arm(X, rank: int, iters: int, blocked: bool):
    sparse_mttkrp_module._blocked_level_kernel = BLOCKED if blocked else _loop_form
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = tk.cp_als(X, rank, max_iter=iters, tol=0, random_state=0)
        return (time.perf_counter() - t0) / iters, model
    finally:
        sparse_mttkrp_module._blocked_level_kernel = BLOCKED


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", default="skew3d,unif3d,skew4d")
    ap.add_argument("--ranks", default="10,16,32")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    for name in args.tensors.split(","):
        base = make_sparse_benchmark(name).data
        for dt in args.dtypes.split(","):
            tensors = {}
            for kind in ("one", "two", "all"):  # one tensor object per plan (a plan is cached on its tensor)
                tensors[kind] = COOTensor(base.coords, base.values.astype(dt), base.shape)
                tensors[kind].plan(csf=kind)
            for rank in (int(r) for r in args.ranks.split(",")):
                arms = {("one", True): "one blocked", ("one", False): "one loop", ("two", True): "two blocked",
                        ("two", False): "two loop", ("all", True): "all"}
                for kind, blocked in arms:  # (warm: trees built, kernels compiled, buffers made)
                    run_arm(tensors[kind], rank, 1, blocked)
                times: dict[str, list[float]] = {a: [] for a in arms.values()}
                fits: dict[str, float] = {}
                for _ in range(args.repeat):
                    for (kind, blocked), arm in arms.items():
                        t, model = run_arm(tensors[kind], rank, args.iters, blocked)
                        times[arm].append(t)
                        fits[arm] = float(model.fit)
                med = {a: statistics.median(v) * 1e3 for a, v in times.items()}
                row = {"tensor": name, "dtype": dt, "rank": rank, "ms": med, "samples_s": times, "fits": fits,
                       "tree_mb": {k: tensors[k].plan().bytes / 1e6 for k in ("one", "two", "all")}}
                for kind in ("one", "two"):
                    row[f"{kind}_ratio"] = med[f"{kind} blocked"] / med[f"{kind} loop"]
                    row[f"{kind}_same_fit"] = fits[f"{kind} blocked"] == fits[f"{kind} loop"]
                rows.append(row)
                print(f"{name} {dt} rank {rank}: " + ", ".join(f"{a} {v:.1f}" for a, v in med.items())
                      + f" ms/it; blocked / loop: one {row['one_ratio']:.2f}, two {row['two_ratio']:.2f}; same fits "
                      f"{row['one_same_fit'] and row['two_same_fit']}", flush=True)
    write_json("sparse_levels.json", {"environment": environment(), "args": vars(args), "rows": rows})
    lines = ["# Sparse CP-ALS on the memory-saving plans: blocked level kernels vs the loop form",
             "", f"Per iteration (ms), {args.iters} iterations from the same seeded start, tol=0, the arms "
             f"interleaved {args.repeat} times in one process, medians; 2 threads. `one` / `two`: one tree (or "
             "two) shared by the modes, the modes below a root on the level kernels; `all`: a tree per mode "
             "(root kernels only), for reference. Trees: the plans' memory.", "",
             "| tensor | dtype | rank | one blocked | one loop | blocked / loop | two blocked | two loop | "
             "blocked / loop | all | same fits | trees one / two / all MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m, mb = r["ms"], r["tree_mb"]
        same = "yes" if r["one_same_fit"] and r["two_same_fit"] else "NO"
        lines.append(f"| {r['tensor']} | {r['dtype']} | {r['rank']} | {m['one blocked']:.1f} | {m['one loop']:.1f} | "
                     f"{r['one_ratio']:.2f}x | {m['two blocked']:.1f} | {m['two loop']:.1f} | {r['two_ratio']:.2f}x | "
                     f"{m['all']:.1f} | {same} | {mb['one']:.0f} / {mb['two']:.0f} / {mb['all']:.0f} |")
    lines += ["", "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_levels.py`."]
    write_text("sparse_levels.md", "\n".join(lines) + "\n")
    groups = [f"{r['tensor']} {r['dtype'][5:]} R{r['rank']}" for r in rows]
    grouped_bars("sparse_levels.png", groups,
                 {arm: [r["ms"][arm] for r in rows] for arm in ("one blocked", "one loop", "two blocked",
                                                               "two loop", "all")},
                 "ms per iteration", "Sparse CP-ALS on csf='one' / 'two': blocked level kernels vs the loop form")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
