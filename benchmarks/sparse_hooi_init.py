"""Sparse HOOI's start: the Khatri-Rao sketch (the default) against ARPACK on the sparse unfolding
(``init="hosvd"``), whole calls side by side in one process.

A planted sparse low-rank tensor (sparse factors, 1 % noise on its nonzeros: a default call converges) and
the unstructured benchmark tensors skew3d, unif3d and skew4d (no low-rank structure: ``max_iter`` caps the
calls); rank 8 per mode, float64. Each call's wall time (trees and kernels warm: one call of each start
first), fit and iterations; the two starts alternated ``--repeat`` times, medians.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_hooi_init.py
      [--tensors planted,skew3d,unif3d,skew4d] [--rank 8] [--max-iter 10] [--repeat 2]
Writes benchmarks/results/sparse_hooi_init.{json,md,png}.
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
from _common import environment, grouped_bars, write_json, write_text
from tuckerkit.datasets import make_sparse_benchmark

import tuckerkit as tk
from tuckerkit.sparse import COOTensor

STARTS = {"sketch (default)": "st_hosvd", "ARPACK (init='hosvd')": "hosvd"}


def planted(shape=(3000, 2000, 1000), rank=8, density=0.01, noise=0.01, seed=0) -> COOTensor:
    """An exactly low-rank sparse tensor (factors with ``density`` of nonzeros per column, a Gaussian core),
    its nonzeros perturbed by ``noise`` (relative)."""
    rng = np.random.default_rng(seed)
    Us = []
    for n in shape:
        U = np.zeros((n, rank))
        for c in range(rank):
            rows = rng.choice(n, max(1, int(density * n)), replace=False)
            U[rows, c] = rng.random(len(rows)) + 0.5
        Us.append(U)
    core = rng.standard_normal((rank,) * len(shape))
    support = [np.nonzero(U.any(axis=1))[0] for U in Us]
    coords = np.stack([g.ravel() for g in np.meshgrid(*support, indexing="ij")], axis=1)
    vals = np.einsum("abc,na,nb,nc->n", core, *(U[coords[:, m]] for m, U in enumerate(Us)))
    keep = vals != 0
    vals = vals[keep] * (1 + noise * rng.standard_normal(int(keep.sum())))
    return COOTensor(coords[keep], vals, shape)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", default="planted,skew3d,unif3d,skew4d")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--max-iter", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    rows = []
    for name in args.tensors.split(","):
        X = planted(rank=args.rank) if name == "planted" else make_sparse_benchmark(name).data
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for init in STARTS.values():  # (warm: trees built, kernels compiled)
                tk.hooi(X, args.rank, init=init, max_iter=1, tol=0)
            times: dict[str, list[float]] = {k: [] for k in STARTS}
            result = {}
            for _ in range(args.repeat):
                for label, init in STARTS.items():
                    t0 = time.perf_counter()
                    T = tk.hooi(X, args.rank, init=init, max_iter=args.max_iter)
                    times[label].append(time.perf_counter() - t0)
                    result[label] = {"fit": float(T.fit), "iterations": len(T.fit_history),
                                     "converged": bool(T.converged)}
        med = {k: statistics.median(v) for k, v in times.items()}
        sk, ar = list(STARTS)
        row = {"tensor": name, "shape": list(X.shape), "nnz": int(X.nnz), "seconds": med, "samples_s": times,
               "result": result, "speedup": med[ar] / med[sk]}
        rows.append(row)
        print(f"{name}: " + "; ".join(f"{k} {med[k]:.2f} s fit {result[k]['fit']:.6f} ({result[k]['iterations']} it)"
                                     for k in STARTS) + f"; x {row['speedup']:.1f}", flush=True)
    write_json("sparse_hooi_init.json", {"environment": environment(), "args": vars(args), "rows": rows})
    sk, ar = list(STARTS)
    lines = ["# Sparse HOOI: the Khatri-Rao sketch start (default) vs ARPACK (`init='hosvd'`)", "",
             f"Whole `tk.hooi(X, {args.rank}, max_iter={args.max_iter})` calls, float64, the two starts alternated "
             f"{args.repeat} times in one process (trees and kernels warm), medians.", "",
             "| tensor | nonzeros | sketch s | fit | iterations | ARPACK s | fit | iterations | ARPACK / sketch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, b = r["result"][sk], r["result"][ar]
        lines.append(f"| {r['tensor']} {'x'.join(map(str, r['shape']))} | {r['nnz']:,} | {r['seconds'][sk]:.2f} | "
                     f"{a['fit']:.6f} | {a['iterations']} | {r['seconds'][ar]:.2f} | {b['fit']:.6f} | "
                     f"{b['iterations']} | {r['speedup']:.1f}x |")
    lines += ["", "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sparse_hooi_init.py`."]
    write_text("sparse_hooi_init.md", "\n".join(lines) + "\n")
    grouped_bars("sparse_hooi_init.png", [r["tensor"] for r in rows],
                 {k: [r["seconds"][k] for r in rows] for k in STARTS}, "seconds per call",
                 "Sparse HOOI, whole calls: sketch start vs ARPACK start")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
