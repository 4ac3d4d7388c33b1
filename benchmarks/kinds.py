"""Every kind of contraction plan against numpy.einsum, and against the engine as it was before stop 73.

A user who moves ``numpy.einsum`` calls to ``tuckerkit.contract`` meets every plan kind: GEMM, GEMV, dot,
outer products, their batches, summed batches, the compiled kernels. This runs one case of each on operands of
1-50 MB (and a few small ones), side by side in one process: tuckerkit's plan; ``before``, the same call with
stop 73's four rules off (matrix-vector products cut by their bytes, summed batches of matrix-vector products,
outer products by numpy's multiply, the batched dot kernel); ``numpy.einsum`` without and with
``optimize=True``. Medians of interleaved calls, tuckerkit's helpers parked after each (every call starts
cold); peak extra memory of one untimed call (tracemalloc).

Run:  python benchmarks/kinds.py [--repeat 9] [--quick]
Writes benchmarks/results/kinds.{json,md,png}.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import case_arguments, case_operands, case_table, interleaved, peak_extra, rel_error, write_cases

from tuckerkit.engine import _contract, _plan, contract, plan_contraction

CASES = [  # (spec, sizes, dtype)
    ("mk,kn->mn", {"m": 1000, "k": 1000, "n": 1000}, "float64"),
    ("abc,cd->abd", {"a": 200, "b": 200, "c": 200, "d": 10}, "float64"),
    ("abc,bd->adc", {"a": 200, "b": 200, "c": 200, "d": 10}, "float64"),
    ("abc,c->ab", {"a": 200, "b": 180, "c": 160}, "float64"),
    ("abc,a->bc", {"a": 200, "b": 180, "c": 160}, "float64"),
    ("abc,b->ac", {"a": 200, "b": 180, "c": 160}, "float64"),
    ("abc,ab->c", {"a": 200, "b": 180, "c": 160}, "float64"),
    ("ab,a->b", {"a": 2000, "b": 2000}, "float64"),
    ("abc,abc->", {"a": 200, "b": 180, "c": 160}, "float64"),
    ("abc,ac->b", {"a": 200, "b": 180, "c": 160}, "float64"),
    ("abcd,ad->bc", {"a": 60, "b": 50, "c": 40, "d": 30}, "float64"),
    ("abc,acz->bz", {"a": 200, "b": 300, "c": 100, "z": 15}, "float64"),
    ("abz,bz->az", {"a": 200, "b": 200, "z": 50}, "float64"),
    ("az,bz->abz", {"a": 600, "b": 500, "z": 12}, "float64"),
    ("a,b->ba", {"a": 3000, "b": 2000}, "float64"),
    ("abc,c->ab", {"a": 200, "b": 180, "c": 160}, "float32"),
    ("abc,ac->b", {"a": 200, "b": 180, "c": 160}, "float32"),
    ("ab,b->a", {"a": 60, "b": 50}, "float64"),
    ("abz,bz->az", {"a": 30, "b": 20, "z": 8}, "float64"),
]
QUICK = [("abc,ac->b", {"a": 40, "b": 30, "c": 20}, "float64"), ("az,bz->abz", {"a": 60, "b": 50, "z": 4}, "float64")]


@contextlib.contextmanager
def before_stop_73(planning: bool = False):
    """The engine's rules as they were before stop 73, within the block; ``planning``: plans made there are not
    cached (the timed calls take the plan made so and need no such clearing)."""
    saved = (_contract.STREAM_PIECE_BYTES, _contract.OUTER_BY_UFUNC, _plan.SUMMED_GEMV, _plan.BATCHED_DOT_MIN_FLOPS)
    _contract.STREAM_PIECE_BYTES, _contract.OUTER_BY_UFUNC = 1 << 62, False
    _plan.SUMMED_GEMV, _plan.BATCHED_DOT_MIN_FLOPS = False, 1 << 62
    if planning:
        _contract._cached_plan.cache_clear()
    try:
        yield
    finally:
        (_contract.STREAM_PIECE_BYTES, _contract.OUTER_BY_UFUNC, _plan.SUMMED_GEMV,
         _plan.BATCHED_DOT_MIN_FLOPS) = saved
        if planning:
            _contract._cached_plan.cache_clear()


def plan_out_bytes(plan) -> int:
    return int(np.prod(plan.shapes[2])) * np.dtype(plan.dtype).itemsize


def _plan_name(plan) -> str:
    if str(plan.compiled) != "none":
        return str(plan.compiled)
    return f"{plan.kind} ({plan.remedy})" if str(plan.remedy) != "none" else str(plan.kind)


def main(argv=None) -> None:
    args, repeat = case_arguments(__doc__, 9, "two small cases, 3 repeats (a smoke run)", argv)
    rows = []
    for spec, sizes, dt, A, B, shape in case_operands(QUICK if args.quick else CASES):
        plan = plan_contraction(spec, A, B)
        with before_stop_73(planning=True):
            old = plan_contraction(spec, A, B)

        def before(spec=spec, A=A, B=B, old=old):
            with before_stop_73():
                return contract(spec, A, B, plan=old)

        err = rel_error(spec, A, B, contract(spec, A, B, plan=plan))
        fns = {
            "tuckerkit": lambda spec=spec, A=A, B=B, plan=plan: contract(spec, A, B, plan=plan),
            "before": before,
            "einsum": lambda spec=spec, A=A, B=B: np.einsum(spec, A, B),
            "einsum_opt": lambda spec=spec, A=A, B=B: np.einsum(spec, A, B, optimize=True),
        }
        t = interleaved(fns, repeat)
        big = max(A.nbytes, B.nbytes, plan_out_bytes(plan))  # (the largest array: an outer product's output)
        mem = {k: peak_extra(fns[k]) / big for k in ("tuckerkit", "before")}
        rows.append({
            "spec": spec, "shape_a": shape, "sizes": sizes, "dtype": dt, "plan": _plan_name(plan),
            "plan_before": _plan_name(old), "rel_err": err, **{f"t_{k}": v for k, v in t.items()},
            **{f"mem_{k}": v for k, v in mem.items()},
            "x_before": t["before"] / t["tuckerkit"], "x_einsum": t["einsum"] / t["tuckerkit"],
            "x_einsum_opt": t["einsum_opt"] / t["tuckerkit"],
        })
        r = rows[-1]
        print(f"{spec:13s} {shape:14s} {dt:8s} {r['plan']:34s} tk {t['tuckerkit'] * 1e3:8.3f} ms  x before "
              f"{r['x_before']:.2f}  x einsum {r['x_einsum']:.2f}  x einsum opt {r['x_einsum_opt']:.2f}", flush=True)
    write_cases("kinds", rows, repeat, markdown(rows, repeat), ("tuckerkit", "before", "einsum", "einsum_opt"),
                "Every plan kind: tuckerkit vs before stop 73 vs einsum")


def markdown(rows, repeat: int) -> str:
    intro = (f"Medians of {repeat} interleaved calls in one process, tuckerkit's helpers parked after each; `before`: "
             "the same call with stop 73's rules off (its plan in brackets where it differs); speed-ups other / "
             "tuckerkit (above 1: tuckerkit faster); peak extra memory of one call in units of the largest array's "
             "bytes (operands and result); rel. error: the largest difference from einsum in float64 over its "
             "largest entry.")
    header = ["spec", "A", "dtype", "plan (before)", "ms", "x before", "x einsum", "x einsum(optimize)",
              "peak extra tk / before", "rel. error"]
    cells = [[f"`{r['spec']}`", r["shape_a"], r["dtype"],
              r["plan"] + (f" ({r['plan_before']})" if r["plan_before"] != r["plan"] else ""),
              f"{r['t_tuckerkit'] * 1e3:.3f}", f"{r['x_before']:.2f}", f"{r['x_einsum']:.2f}",
              f"{r['x_einsum_opt']:.2f}", f"{r['mem_tuckerkit']:.3f} / {r['mem_before']:.3f}", f"{r['rel_err']:.1e}"]
             for r in rows]
    return case_table("kinds", "Every kind of contraction plan against numpy.einsum, and against the engine before "
                      "stop 73", intro, header, cells)


if __name__ == "__main__":
    main()
