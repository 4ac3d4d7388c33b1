"""Contractions whose contracted modes do not sit together in memory: the summed batch against copying.

``abc,acz->bz`` (a subspace step's product on a middle mode) needs ``a`` and ``c`` summed, but ``b`` lies
between them in ``A``: no flattening makes it one GEMM on views. tuckerkit loops ``a`` as a summed batch
(``Remedy.SUMMED_BATCH``: one GEMM on views per index, the products summed a few MB at a time, the pieces cut
by the sizes alone). Side by side in one run, on the same operands: tuckerkit's plan; the remedy it took before
(copying the operand that blocks the GEMM, ``copy_a``: the planner asked without the summed batch);
``numpy.einsum(optimize=True)``; transpose-transpose-GEMM-transpose (``ttgt``, the Tensor Toolbox's and
TensorLy's evaluation). Medians of interleaved calls; peak extra memory of one untimed call (tracemalloc).

Run:  python benchmarks/summed.py [--repeat 7] [--quick]
Writes benchmarks/results/summed.{json,md,png}.
"""

from __future__ import annotations

import sys
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import case_arguments, case_operands, case_table, interleaved, peak_extra, rel_error, write_cases
from contractions import ttgt

from tuckerkit.engine import _plan, contract, plan_contraction
from tuckerkit.engine._contract import _cached_plan

CASES = [  # (spec, sizes, dtype)
    ("abc,acz->bz", {"a": 1000, "b": 1000, "c": 50, "z": 15}, "float64"),
    ("abc,acz->bz", {"a": 1000, "b": 1000, "c": 50, "z": 15}, "float32"),
    ("abc,acz->bz", {"a": 1000, "b": 1000, "c": 10, "z": 15}, "float64"),
    ("abc,acz->bz", {"a": 200, "b": 300, "c": 100, "z": 15}, "float64"),
    ("abcd,bdz->acz", {"a": 50, "b": 100, "c": 80, "d": 60, "z": 10}, "float64"),
    ("abc,azc->bz", {"a": 400, "b": 400, "c": 400, "z": 10}, "float32"),
]
QUICK = [("abc,acz->bz", {"a": 100, "b": 100, "c": 20, "z": 5}, "float64")]


def without_summed_batch(spec: str, A, B):
    """The plan the planner made before the summed batch existed (its remedies without it)."""
    keep = _plan._summed_batch
    _plan._summed_batch = lambda *a, **k: None
    _cached_plan.cache_clear()
    try:
        return plan_contraction(spec, A, B)
    finally:
        _plan._summed_batch = keep
        _cached_plan.cache_clear()


def callables(spec: str, A, B, plan, before) -> dict:
    return {
        "tuckerkit": lambda: contract(spec, A, B, plan=plan),
        "copy remedy": lambda: contract(spec, A, B, plan=before),
        "einsum": lambda: np.einsum(spec, A, B, optimize=True),
        "ttgt": lambda: ttgt(spec, A, B),
    }


def main(argv=None) -> None:
    args, repeat = case_arguments(__doc__, 7, "one small case, 3 repeats (a smoke run)", argv)
    rows = []
    for spec, sizes, dt, A, B, shape in case_operands(QUICK if args.quick else CASES):
        plan = plan_contraction(spec, A, B)
        before = without_summed_batch(spec, A, B)
        err = rel_error(spec, A, B, contract(spec, A, B, plan=plan))
        fns = callables(spec, A, B, plan, before)
        t = interleaved(fns, repeat)
        mem = {k: peak_extra(f) / A.nbytes for k, f in fns.items()}
        rows.append({
            "spec": spec, "shape_a": shape, "sizes": sizes, "dtype": dt, "remedy": str(plan.remedy),
            "summed_batch": "".join(plan.summed_batch), "remedy_before": str(before.remedy),
            "copies": plan.copies, "copies_before": before.copies, "rel_err": err,
            **{f"t_{k}": v for k, v in t.items()}, **{f"mem_{k}": v for k, v in mem.items()},
            "x_copy": t["copy remedy"] / t["tuckerkit"], "x_einsum": t["einsum"] / t["tuckerkit"],
            "x_ttgt": t["ttgt"] / t["tuckerkit"],
        })
        r = rows[-1]
        print(f"{spec:14s} {shape:16s} {dt:8s} {r['remedy']:13s} tk {t['tuckerkit'] * 1e3:8.2f} ms  "
              f"x copy {r['x_copy']:.2f}  x einsum {r['x_einsum']:.2f}  x ttgt {r['x_ttgt']:.2f}  "
              f"mem tk {mem['tuckerkit']:.3f} copy {mem['copy remedy']:.2f} (x A)", flush=True)
    write_cases("summed", rows, repeat, markdown(rows, repeat), ("tuckerkit", "copy remedy", "einsum", "ttgt"),
                "Summed batch: tuckerkit vs copying vs einsum vs TTGT")


def markdown(rows, repeat: int) -> str:
    intro = (f"Medians of {repeat} interleaved calls in one process; `copy remedy`: the plan made without the summed "
             "batch (a copy of the operand that blocks the GEMM); speed-ups other / tuckerkit; peak extra memory of "
             "one call in units of A's bytes; rel. error: the largest difference from einsum in float64 over its "
             "largest entry.")
    header = ["spec", "A", "dtype", "plan", "ms", "x copy remedy", "x einsum", "x TTGT",
              "peak extra tk / copy / einsum / TTGT (x A)", "rel. error"]
    cells = [[f"`{r['spec']}`", r["shape_a"], r["dtype"], f"{r['remedy']} [{r['summed_batch']}] (before: "
              f"{r['remedy_before']})", f"{r['t_tuckerkit'] * 1e3:.2f}", f"{r['x_copy']:.2f}", f"{r['x_einsum']:.2f}",
              f"{r['x_ttgt']:.2f}", f"{r['mem_tuckerkit']:.3f} / {r['mem_copy remedy']:.2f} / {r['mem_einsum']:.2f} / "
              f"{r['mem_ttgt']:.2f}", f"{r['rel_err']:.1e}"] for r in rows]
    return case_table("summed", "Contractions whose contracted modes are apart in memory: the summed batch", intro,
                      header, cells)


if __name__ == "__main__":
    main()
