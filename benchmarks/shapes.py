"""Shapes outside the floors' tables: HOOI and CP-ALS per iteration on 5- and 6-way and skewed tensors.

tuckerkit against TensorLy (``tucker`` / ``parafac``) and pyttb (``tucker_als`` / ``cp_als``), the same start and
iterations (no early stop), float64, and against the two-pass bound max(2 streaming reads of X, the two passes'
flops / GEMM peak) measured in the same run. ``tuckerkit (stop 70 rules)`` is tuckerkit with the rules stop 71
changed put back (HOOI's 3-way tree from partials 4x smaller, CP-ALS's from partials 4x smaller at any rank,
up to 16 pieces per BLAS product, no workspace for HOOI's projections) and without stop 72's multi-sweep CP
tree, interleaved with the others: the A/B of those rules in one run. Medians of interleaved repeats; peak extra
memory (tracemalloc) of one call each.

Run:  python benchmarks/shapes.py [--quick] [--iters 3] [--repeat 3]
Writes benchmarks/results/shapes.{json,md,png}.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import warnings
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import _park, environment, grouped_bars, peak_extra, positive_int, write_json, write_text
from roofline import gemm_peak, read_bound

import tuckerkit as tk
from tuckerkit.engine import _contract, _sweeps, _workspace


@contextlib.contextmanager
def stop70_rules():
    """tuckerkit's rules before stop 71 (and without stop 72's multi-sweep CP tree), for the A/B column."""
    saved = (_sweeps.SKEW, _sweeps.CP_SKEW_RANK, _contract.BLAS_MAX_PIECES, _workspace.MIN_BYTES, _sweeps.MULTI_SWEEP)
    (_sweeps.SKEW, _sweeps.CP_SKEW_RANK, _contract.BLAS_MAX_PIECES, _workspace.MIN_BYTES,
     _sweeps.MULTI_SWEEP) = 4, 0.0, 16, 1 << 62, False
    try:
        yield
    finally:
        (_sweeps.SKEW, _sweeps.CP_SKEW_RANK, _contract.BLAS_MAX_PIECES, _workspace.MIN_BYTES,
         _sweeps.MULTI_SWEEP) = saved


def runners(kind: str, X: np.ndarray, R: int, iters: int) -> dict:
    import pyttb as ttb
    import tensorly.decomposition as tld
    from tensorly.cp_tensor import CPTensor as TLCP

    rng = np.random.default_rng(1)
    Xt = ttb.tensor(X, copy=False)
    if kind == "hooi":
        f0 = [np.linalg.qr(rng.standard_normal((n, R)))[0] for n in X.shape]
        core0 = tk.multi_ttm(X, f0, transpose=True)
        init = tk.TuckerTensor(core0, tuple(f0))

        def ours():
            return tk.hooi(X, R, init=init, max_iter=iters, tol=0.0).fit

        def tensorly():
            T = tld.tucker(X, rank=[R] * X.ndim, init=(core0.copy(), [U.copy() for U in f0]), n_iter_max=iters, tol=0)
            return 1 - np.linalg.norm(X - np.asarray(T.to_tensor())) / np.linalg.norm(X)

        def pyttb_run():
            _, _, info = ttb.tucker_als(Xt, [R] * X.ndim, stoptol=0.0, maxiters=iters, init=[U.copy() for U in f0],
                                        printitn=0)
            return float(info["fit"])
    else:
        f0 = [rng.standard_normal((n, R)) for n in X.shape]

        def ours():
            return tk.cp_als(X, R, init=tk.CPTensor(np.ones(R), tuple(U.copy() for U in f0)), max_iter=iters,
                             tol=0.0, linesearch=False).fit

        def tensorly():
            cp = tld.parafac(X, R, init=TLCP((np.ones(R), [U.copy() for U in f0])), n_iter_max=iters, tol=0,
                             normalize_factors=True)
            return 1 - np.linalg.norm(X - np.asarray(cp.to_tensor())) / np.linalg.norm(X)

        def pyttb_run():
            _, _, info = ttb.cp_als(Xt, R, stoptol=0.0, maxiters=iters, init=ttb.ktensor([U.copy() for U in f0]),
                                    printitn=0)
            return float(info["fit"])

    def old():
        with stop70_rules():
            return ours()

    return {"tuckerkit": ours, "tuckerkit (stop 70 rules)": old, "tensorly": tensorly, "pyttb": pyttb_run}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=positive_int, default=3)
    ap.add_argument("--repeat", type=positive_int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    cases = [("hooi", (30,) * 5, 10), ("hooi", (16,) * 6, 10), ("hooi", (30, 3000, 100), 10),
             ("hooi", (40, 1000, 200), 10), ("hooi", (64,) * 4, 32), ("cp", (30, 3000, 100), 50),
             ("cp", (60, 300, 600), 10), ("cp", (60,) * 4, 50)]
    if args.quick:
        cases = [("hooi", (12, 12, 12, 12, 12), 4), ("cp", (20, 600, 40), 10)]
    rng = np.random.default_rng(0)
    rows = []
    for kind, shape, R in cases:
        X = rng.standard_normal(shape)
        fns = runners(kind, X, R, args.iters)
        fits, times = {}, {k: [] for k in fns}
        for fn in fns.values():  # warm-up: plans, compiled kernels
            fn()
            _park()
        for r in range(args.repeat):
            for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                t0 = time.perf_counter()
                fits[k] = float(fns[k]())
                times[k].append(time.perf_counter() - t0)
                _park()
        per_it = {k: float(np.median(v)) / args.iters for k, v in times.items()}
        read = read_bound(X, 5)["read"]
        peak = gemm_peak(X.dtype, 3)
        pass_flops = 2.0 * X.size * R
        bound = 2 * max(read, pass_flops / peak)
        mem = {k: peak_extra(fns[k]) / X.nbytes for k in ("tuckerkit", "tuckerkit (stop 70 rules)")}
        row = {"call": kind, "shape": list(shape), "rank": R, "iters": args.iters, "ms_per_iter":
               {k: 1e3 * v for k, v in per_it.items()}, "bound_ms": 1e3 * bound, "read_ms": 1e3 * read,
               "gemm_peak_gflops": peak / 1e9, "fits": fits, "peak_extra_x_input": mem}
        rows.append(row)
        print(kind, shape, R, {k: round(v, 1) for k, v in row["ms_per_iter"].items()}, "bound",
              round(row["bound_ms"], 1), flush=True)
    write_json("shapes.json", {"env": environment(), "rows": rows})
    name = {"hooi": "HOOI", "cp": "CP-ALS"}
    lines = ["# Shapes outside the floors' tables: HOOI and CP-ALS per iteration", "",
             "Random float64 tensors, the same start and iterations for every library (no early stop), medians of "
             f"{args.repeat} interleaved repeats of {args.iters} iterations. bound = max(2 streaming reads of X, "
             "the two passes' flops / GEMM peak), measured in this run. `stop 70 rules`: tuckerkit with the rules "
             "stop 71 changed put back (HOOI's 3-way tree from partials 4x smaller, CP-ALS's at any rank, 16 pieces "
             "per BLAS product, no workspace for HOOI's projections) and stop 72's multi-sweep CP tree off. Peak: "
             "extra memory of one call, in units of the input.",
             "", "| call | shape | rank | tuckerkit ms/iter | / bound | stop 70 rules ms/iter | new / old | x TensorLy "
             "| x pyttb | peak tk / old (x input) | fit tk / TL / pyttb |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["ms_per_iter"]
        tk_ms, old_ms = t["tuckerkit"], t["tuckerkit (stop 70 rules)"]
        f = r["fits"]
        lines.append(
            f"| {name[r['call']]} | {'x'.join(map(str, r['shape']))} | {r['rank']} | {tk_ms:.1f} | "
            f"{tk_ms / r['bound_ms']:.2f} | {old_ms:.1f} | {tk_ms / old_ms:.2f} | {t['tensorly'] / tk_ms:.1f} | "
            f"{t['pyttb'] / tk_ms:.1f} | {r['peak_extra_x_input']['tuckerkit']:.2f} / "
            f"{r['peak_extra_x_input']['tuckerkit (stop 70 rules)']:.2f} | "
            f"{f['tuckerkit']:.6f} / {f['tensorly']:.6f} / {f['pyttb']:.6f} |")
    lines += ["", "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/shapes.py`. Machine and "
              "library versions: see shapes.json.", ""]
    write_text("shapes.md", "\n".join(lines))
    labels = [f"{name[r['call']]} {'x'.join(map(str, r['shape']))} R{r['rank']}" for r in rows]
    grouped_bars("shapes.png", labels, {
        "tuckerkit / bound": [r["ms_per_iter"]["tuckerkit"] / r["bound_ms"] for r in rows],
        "stop 70 rules / bound": [r["ms_per_iter"]["tuckerkit (stop 70 rules)"] / r["bound_ms"] for r in rows]},
        "time per iteration / bound", "HOOI and CP-ALS off the floors' tables")


if __name__ == "__main__":
    main()
