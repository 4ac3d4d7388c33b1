"""TTM over a short unit-stride mode, or over the mode before one (rows of 2-8 elements: an RGB mode; float32 rows
of 4-7 take the short-rows kernel too since stop 95).

For each case (tensor, mode, dtype, rank): tuckerkit ``ttm(X, U, mode, transpose=True)`` with the plan the planner
makes (where vectors are wide the tiny-rows kernel for the last mode, the short-rows kernel for the mode before a
trailing mode of 2-3), ``tuckerkit (BLAS)``: the same plan run by BLAS as before stop 82 (its batched
matrix-vector products after a copy of U, its GEMM, or its batch of GEMMs), TensorLy ``mode_dot``, pyttb
``ttm``, and plain numpy (one ``matmul`` of X's rows against U for the last mode, ``tensordot`` for the mode
before), all on the same inputs, interleaved; against
the bound of moving X and the output once at the rate of one streaming read of X (the fastest of numpy's
``add.reduce`` and a compiled loop, on one thread and split over one thread per core: benchmarks/roofline.py's
``read_fns``, timed in the same run): the read's time times (bytes of X + bytes of the output) / bytes of X.
Medians of interleaved repeats.

Run:  python benchmarks/tiny_modes.py [--quick] [--repeat 11]
Writes benchmarks/results/tiny_modes.{json,md,png}.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, grouped_bars, interleaved, positive_int, result_stem, write_json, write_text
from roofline import fastest_read, read_fns

from tuckerkit.engine import ttm, ttm_plan
from tuckerkit.engine._plan import CompiledKernel

#: (shape, mode, rank): the last (unit-stride) mode, or the mode before a short trailing one (the last three before the
#: stop 96 pair: trailing modes of 4-6, the short-rows kernel's in float32 since stop 95; then many slabs of 20 rows of
#: 5, BLAS's against an AVX-512 OpenBLAS core, and float32 rows of 12, the transposed tile's there, since stop 96)
CASES = [((2000, 1000, 3), 2, 2), ((2000, 1000, 3), 2, 3), ((1000, 1000, 4), 2, 2), ((64, 256, 256, 3), 3, 2),
         ((500, 500, 4), 2, 3), ((100000, 8), 1, 4), ((1000, 800, 6), 2, 5), ((512, 512, 3), 2, 2),
         ((256, 256, 3), 2, 2), ((1000, 1000, 3), 1, 10), ((512, 512, 3), 1, 8), ((64, 256, 256, 3), 2, 8),
         ((200, 200, 200, 3), 2, 5), ((1000, 1003, 2), 1, 10), ((1000, 1000, 4), 1, 8), ((512, 512, 6), 1, 8),
         ((100, 100, 100, 4), 2, 8), ((100000, 20, 5), 1, 8), ((100000, 10, 12), 2, 5)]


def case_runners(X: np.ndarray, U: np.ndarray, mode: int) -> dict:
    import pyttb
    import tensorly.tenalg as tlalg

    plan = ttm_plan(X, U, mode, transpose=True)
    blas = dataclasses.replace(plan, compiled=CompiledKernel.NONE,
                               _out_order=plan._sr.blas_out_order) if plan._sr is not None else plan
    Xt = pyttb.tensor(X, copy=False)
    if mode == X.ndim - 1:
        X2 = X.reshape(-1, X.shape[-1])
        out = np.empty((X2.shape[0], U.shape[1]), X.dtype)

        def numpy_ttm():
            return np.matmul(X2, U, out=out)
    else:
        def numpy_ttm():
            return np.moveaxis(np.tensordot(X, U, axes=(mode, 0)), -1, mode)
    return {"tuckerkit": lambda: plan(X, U), "tuckerkit (BLAS)": lambda: blas(X, U),
            "tensorly": lambda: tlalg.mode_dot(X, U.T, mode), "pyttb": lambda: Xt.ttm(U.T, mode),
            "numpy": numpy_ttm}, plan


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=positive_int, default=11)
    ap.add_argument("--name", default="tiny_modes", type=result_stem,
                    help="results file stem under benchmarks/results (default: tiny_modes)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.getLogger().setLevel(logging.ERROR)  # (pyttb logs a copy of each C-ordered input)
    cases = CASES[:2] if args.quick else CASES
    rng = np.random.default_rng(0)
    rows = []
    k = max(os.cpu_count() or 1, 1)
    pool = ThreadPoolExecutor(k)
    for dtype in ("float64", "float32"):
        for shape, mode, R in cases:
            X = rng.standard_normal(shape).astype(dtype)
            U = rng.standard_normal((shape[mode], R)).astype(dtype)
            fns, plan = case_runners(X, U, mode)
            ref = np.moveaxis(np.tensordot(X.astype(np.float64), U.astype(np.float64), axes=(mode, 0)), -1, mode)
            err = float(np.max(np.abs(ttm(X, U, mode, transpose=True) - ref)) / np.max(np.abs(ref)))
            fns.update(read_fns(X, pool, k))
            t = interleaved(fns, args.repeat)
            read = fastest_read(t, pop=True)
            bound = read * (X.size + ref.size) / X.size
            row = {"shape": list(shape), "mode": mode, "rank": R, "dtype": dtype, "compiled": plan.compiled.value,
                   "rel_error": err, "seconds": t, "read": read, "bound": bound,
                   "ratio_bound": t["tuckerkit"] / bound,
                   **{f"speedup_{k}": t[k] / t["tuckerkit"] for k in ("tuckerkit (BLAS)", "tensorly", "pyttb",
                                                                       "numpy")}}
            rows.append(row)
            print(f"{dtype} {'x'.join(map(str, shape))} mode {mode} R={R} ({row['compiled']}): "
                  f"tk {t['tuckerkit'] * 1e3:.2f} ms, "
                  f"{row['ratio_bound']:.2f}x the bound; x{row['speedup_tuckerkit (BLAS)']:.1f} BLAS plan, "
                  f"x{row['speedup_numpy']:.1f} numpy, x{row['speedup_tensorly']:.1f} TensorLy, "
                  f"x{row['speedup_pyttb']:.1f} pyttb", flush=True)
    write_json(f"{args.name}.json", {"benchmark": "tiny_modes", "environment": environment(), "rows": rows})
    lines = ["# TTM over a short unit-stride mode, or the mode before one", "",
             "tuckerkit `ttm(X, U, mode, transpose=True)` against the same plan run by BLAS, TensorLy "
             "`mode_dot`, pyttb `ttm` and numpy (one `matmul` of X's rows for the last mode, `tensordot` for "
             "the mode before); the bound: X and the output moved once "
             "at the rate of one streaming read of X (the fastest of numpy's reduce and a compiled loop, one "
             "thread and all cores), timed in the same run. Medians of "
             f"{args.repeat} interleaved repeats; "
             "speed-ups are the other's time over tuckerkit's.", "",
             "| shape | mode | dtype | rank | plan | tuckerkit ms | / bound | x BLAS plan | x numpy | x TensorLy "
             "| x pyttb |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['mode']} | {r['dtype']} | {r['rank']} | "
                     f"{r['compiled']} | "
                     f"{r['seconds']['tuckerkit'] * 1e3:.2f} | {r['ratio_bound']:.2f} | "
                     f"{r['speedup_tuckerkit (BLAS)']:.1f} | {r['speedup_numpy']:.1f} | "
                     f"{r['speedup_tensorly']:.1f} | {r['speedup_pyttb']:.1f} |")
    lines += ["", "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/tiny_modes.py`."]
    write_text(f"{args.name}.md", "\n".join(lines) + "\n")
    groups = [f"{'x'.join(map(str, r['shape']))} m{r['mode']} R{r['rank']} {r['dtype'][5:]}" for r in rows]
    grouped_bars(f"{args.name}.png", groups,
                 {k: [r["seconds"][k] * 1e3 for r in rows] for k in ("tuckerkit", "tuckerkit (BLAS)", "numpy",
                                                                     "tensorly", "pyttb")},
                 "ms (lower is better)", "TTM over a short unit-stride mode or the mode before one", log=True)
    pool.shutdown()


if __name__ == "__main__":
    main()
