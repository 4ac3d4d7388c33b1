"""Dot products batched over a mode all three operands share with unit stride: the compiled kernel against BLAS.

``abz,bz->az`` and its kin (the second step of an MTTKRP whose partial keeps the rank ``z`` innermost) contract
one mode while ``z`` runs through A, B and the output. BLAS sees one dot product per (kept index, z) along a
stride of z's extent: numpy's stacked ``matmul`` runs them one by one. tuckerkit's planner gives such a plan to
a compiled kernel (``unit_batch_dot``: rows of A times rows of B added into rows of C, a vector at a time, A read
once). Side by side in one run, on the same operands: tuckerkit's plan; the same plan run by BLAS (``blas``: the
planner's choice before the kernel); ``numpy.einsum`` without and with ``optimize=True``; the roofline read of A
(the faster of one thread and one thread per core, interleaved with the calls). Medians of interleaved calls;
peak extra memory of one untimed call (tracemalloc).

Run:  python benchmarks/batched_dot.py [--repeat 15] [--quick]
Writes benchmarks/results/batched_dot.{json,md,png}.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import case_arguments, case_operands, case_table, interleaved, peak_extra, rel_error, write_cases
from roofline import fastest_read, read_fns

from tuckerkit.engine import CompiledKernel, contract, plan_contraction

CASES = [  # (spec, sizes, dtype)
    ("abz,bz->az", {"a": 200, "b": 200, "z": 10}, "float64"),
    ("abz,az->bz", {"a": 200, "b": 200, "z": 10}, "float64"),
    ("abz,bz->az", {"a": 200, "b": 200, "z": 50}, "float64"),
    ("abz,az->bz", {"a": 200, "b": 200, "z": 50}, "float64"),
    ("abz,bz->az", {"a": 200, "b": 200, "z": 50}, "float32"),
    ("abz,bz->az", {"a": 1000, "b": 100, "z": 32}, "float64"),
    ("abcz,cz->abz", {"a": 60, "b": 60, "c": 60, "z": 10}, "float64"),
    ("abcz,az->bcz", {"a": 60, "b": 60, "c": 60, "z": 10}, "float64"),
    ("abcz,bz->acz", {"a": 60, "b": 60, "c": 60, "z": 10}, "float64"),
    ("abz,bz->az", {"a": 60, "b": 50, "z": 16}, "float64"),
]
QUICK = [("abz,bz->az", {"a": 60, "b": 50, "z": 16}, "float64")]


def main(argv=None) -> None:
    args, repeat = case_arguments(__doc__, 15, "one small case, 3 repeats (a smoke run)", argv)
    ncpu = max(os.cpu_count() or 1, 1)
    pool = ThreadPoolExecutor(ncpu)
    rows = []
    for spec, sizes, dt, A, B, shape in case_operands(QUICK if args.quick else CASES):
        plan = plan_contraction(spec, A, B)
        blas = plan if plan._bd is None else dataclasses.replace(
            plan, compiled=CompiledKernel.NONE, _bd=None, _out_order=plan._bd.blas_out_order)
        err = rel_error(spec, A, B, contract(spec, A, B, plan=plan))
        fns = {
            "tuckerkit": lambda spec=spec, A=A, B=B, plan=plan: contract(spec, A, B, plan=plan),
            "blas": lambda spec=spec, A=A, B=B, blas=blas: contract(spec, A, B, plan=blas),
            "einsum": lambda spec=spec, A=A, B=B: np.einsum(spec, A, B),
            "einsum_opt": lambda spec=spec, A=A, B=B: np.einsum(spec, A, B, optimize=True),
        }
        t = interleaved({**fns, **read_fns(A, pool, ncpu)}, repeat)
        read = fastest_read(t, pop=True)
        mem = {k: peak_extra(f) / A.nbytes for k, f in fns.items()}
        rows.append({
            "spec": spec, "shape_a": shape, "sizes": sizes, "dtype": dt, "compiled": str(plan.compiled),
            "kind": str(plan.kind), "rel_err": err, "t_read": read, **{f"t_{k}": v for k, v in t.items()},
            **{f"mem_{k}": v for k, v in mem.items()},
            "x_blas": t["blas"] / t["tuckerkit"], "x_einsum": t["einsum"] / t["tuckerkit"],
            "x_einsum_opt": t["einsum_opt"] / t["tuckerkit"], "over_read": t["tuckerkit"] / read,
        })
        r = rows[-1]
        print(f"{spec:14s} {shape:12s} {dt:8s} {r['compiled']:15s} tk {t['tuckerkit'] * 1e3:7.3f} ms  "
              f"x blas {r['x_blas']:.2f}  x einsum {r['x_einsum']:.2f}  x einsum opt {r['x_einsum_opt']:.2f}  "
              f"/ read {r['over_read']:.2f}", flush=True)
    pool.shutdown()
    write_cases("batched_dot", rows, repeat, markdown(rows, repeat), ("tuckerkit", "blas", "einsum", "einsum_opt"),
                "Batched dot along a shared unit-stride mode")


def markdown(rows, repeat: int) -> str:
    intro = (f"Medians of {repeat} interleaved calls in one process; `blas`: the same plan run by BLAS (the "
             "planner's choice before the compiled kernel); speed-ups other / tuckerkit; `/ read`: tuckerkit's time "
             "over one streaming read of A (the faster of one thread and one per core, interleaved); peak extra "
             "memory of one call in units of A's bytes; rel. error: the largest difference from einsum in float64 "
             "over its largest entry.")
    header = ["spec", "A", "dtype", "plan", "ms", "x BLAS", "x einsum", "x einsum(optimize)", "/ read",
              "peak extra tk / BLAS / einsum (x A)", "rel. error"]
    cells = [[f"`{r['spec']}`", r["shape_a"], r["dtype"], r["compiled"], f"{r['t_tuckerkit'] * 1e3:.3f}",
              f"{r['x_blas']:.2f}", f"{r['x_einsum']:.2f}", f"{r['x_einsum_opt']:.2f}", f"{r['over_read']:.2f}",
              f"{r['mem_tuckerkit']:.3f} / {r['mem_blas']:.3f} / {r['mem_einsum']:.3f}", f"{r['rel_err']:.1e}"]
             for r in rows]
    return case_table("batched_dot", "Dot products batched over a shared unit-stride mode: the compiled kernel "
                      "against BLAS and einsum", intro, header, cells)


if __name__ == "__main__":
    main()
