"""Small and mid-size tensors: whole HOOI and CP-ALS calls, tuckerkit vs TensorLy vs pyttb.

On a small tensor a call's fixed costs decide: planning, dispatch, small linear algebra. tuckerkit runs the
sweeps of such tensors straight through numpy (``tuckerkit/engine/_direct.py``); this benchmark times whole
calls on 10^3 to 100^3 and 10^4 to 30^4 float64 tensors (low rank + 1 % noise) from the same initial factors
and for the same number of iterations (no early stop) in every library, interleaved in one process:

* HOOI: ``tk.hooi`` / TensorLy ``tucker`` / pyttb ``tucker_als``, the same HOSVD start, 10 iterations;
* CP-ALS: ``tk.cp_als`` (plain ALS: ``linesearch=False``, as the others) / TensorLy ``parafac`` / pyttb
  ``cp_als``, the same random start, 25 iterations.

``planned`` is tuckerkit with the direct route turned off (every sweep planned, as before it existed), in the
same run. ``F-ordered`` is tuckerkit on the same values in Fortran order (as pyttb, MATLAB and
``numpy.asfortranarray`` hold a tensor), from the same start, in the same run. Fits are computed after the
timed calls, the same way for every library; peak memory beyond the input (tracemalloc) the median of three
more, untimed calls of each (at 10^3, 8 kB, fixed allocations of a few tens of kB dominate that ratio).

Run:  python benchmarks/small.py [--quick] [--repeat 15] [--name small]
Writes benchmarks/results/small.{json,md,png}.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, grouped_bars, interleaved, peak_extra, result_stem, write_json, write_text

import tuckerkit as tk
from tuckerkit.decomposition import _small_cp
from tuckerkit.engine import _direct

HOOI_ITERS, CP_ITERS = 10, 25


def planted(shape, rank, seed=0, noise=0.01):
    rng = np.random.default_rng(seed)
    X = np.asarray(tk.CPTensor(np.ones(rank), tuple(rng.standard_normal((n, rank)) for n in shape)).to_dense())
    E = rng.standard_normal(shape)
    return X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E


def fit_of(X, Xhat) -> float:
    return 1.0 - float(np.linalg.norm(X - Xhat) / np.linalg.norm(X))


class _Planned:
    """tuckerkit with engine/_direct.py's route off inside the block (and CP-ALS's compiled sweep past it,
    ``_small_cp.beyond_direct``): the planner's route."""

    def __enter__(self):
        self.saved = (_direct.DIRECT_SWEEP_FLOPS, _direct.DIRECT_TTMC_ELEMS, _direct.DIRECT_MTTKRP_ELEMS,
                      _small_cp.SMALL_CP_KERNEL_MAX_ELEMS)
        _direct.DIRECT_SWEEP_FLOPS = _direct.DIRECT_TTMC_ELEMS = _direct.DIRECT_MTTKRP_ELEMS = 0
        _small_cp.SMALL_CP_KERNEL_MAX_ELEMS = 0

    def __exit__(self, *exc):
        (_direct.DIRECT_SWEEP_FLOPS, _direct.DIRECT_TTMC_ELEMS, _direct.DIRECT_MTTKRP_ELEMS,
         _small_cp.SMALL_CP_KERNEL_MAX_ELEMS) = self.saved


def hooi_runners(X, rank, out):
    import pyttb as ttb
    import tensorly.decomposition as tld

    ranks = [rank] * X.ndim
    init = tk.hosvd(X, ranks)
    Xt = ttb.tensor(X, copy=False)

    def ours():
        out["tuckerkit"] = tk.hooi(X, ranks, init=init, max_iter=HOOI_ITERS, tol=0.0)

    def planned():
        with _Planned():
            out["planned"] = tk.hooi(X, ranks, init=init, max_iter=HOOI_ITERS, tol=0.0)

    XF = np.asfortranarray(X)

    def fortran():
        out["fortran"] = tk.hooi(XF, ranks, init=init, max_iter=HOOI_ITERS, tol=0.0)

    def tensorly():
        out["tensorly"] = tld.tucker(X, rank=ranks, init=(init.core.copy(), [U.copy() for U in init.factors]),
                                     n_iter_max=HOOI_ITERS, tol=0, svd="truncated_svd")

    def pyttb_run():
        out["pyttb"] = ttb.tucker_als(Xt, ranks, stoptol=0.0, maxiters=HOOI_ITERS,
                                      init=[U.copy() for U in init.factors], printitn=0)[0]

    dense = {"tuckerkit": lambda T: np.asarray(T.to_dense()), "planned": lambda T: np.asarray(T.to_dense()),
             "fortran": lambda T: np.asarray(T.to_dense()),
             "tensorly": lambda T: np.asarray(T.to_tensor()), "pyttb": lambda T: np.asarray(T.full().data)}
    return {"tuckerkit": ours, "planned": planned, "fortran": fortran, "tensorly": tensorly, "pyttb": pyttb_run}, dense


def cp_runners(X, rank, out):
    import pyttb as ttb
    import tensorly.decomposition as tld
    from tensorly.cp_tensor import CPTensor as TLCP

    rng = np.random.default_rng(1)
    init = [rng.standard_normal((n, rank)) for n in X.shape]
    Xt = ttb.tensor(X, copy=False)

    def ours():
        out["tuckerkit"] = tk.cp_als(X, rank, init=tk.CPTensor(np.ones(rank), tuple(U.copy() for U in init)),
                                     max_iter=CP_ITERS, tol=0.0, linesearch=False)

    def planned():
        with _Planned():
            out["planned"] = tk.cp_als(X, rank, init=tk.CPTensor(np.ones(rank), tuple(U.copy() for U in init)),
                                       max_iter=CP_ITERS, tol=0.0, linesearch=False)

    XF = np.asfortranarray(X)

    def fortran():
        out["fortran"] = tk.cp_als(XF, rank, init=tk.CPTensor(np.ones(rank), tuple(U.copy() for U in init)),
                                   max_iter=CP_ITERS, tol=0.0, linesearch=False)

    def tensorly():
        out["tensorly"] = tld.parafac(X, rank, init=TLCP((np.ones(rank), [U.copy() for U in init])),
                                      n_iter_max=CP_ITERS, tol=0, normalize_factors=True)

    def pyttb_run():
        out["pyttb"] = ttb.cp_als(Xt, rank, stoptol=0.0, maxiters=CP_ITERS,
                                  init=ttb.ktensor([U.copy() for U in init]), printitn=0)[0]

    dense = {"tuckerkit": lambda T: np.asarray(T.to_dense()), "planned": lambda T: np.asarray(T.to_dense()),
             "fortran": lambda T: np.asarray(T.to_dense()),
             "tensorly": lambda T: np.asarray(T.to_tensor()), "pyttb": lambda T: np.asarray(T.full().data)}
    return {"tuckerkit": ours, "planned": planned, "fortran": fortran, "tensorly": tensorly, "pyttb": pyttb_run}, dense


CASES = [((10, 10, 10), 3), ((20, 20, 20), 5), ((30, 30, 30), 5), ((50, 50, 50), 10), ((100, 100, 100), 10),
         ((10, 10, 10, 10), 3), ((20, 20, 20, 20), 5), ((30, 30, 30, 30), 5)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--name", default="small", type=result_stem,
                    help="results file stem under benchmarks/results (default: small)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.getLogger().setLevel(logging.ERROR)  # (TensorLy's note on copying a C-ordered input, every call)
    cases = CASES[:2] if args.quick else CASES
    rows = []
    for method, make in (("HOOI", hooi_runners), ("CP-ALS", cp_runners)):
        for shape, rank in cases:
            X = planted(shape, rank)
            out: dict = {}
            fns, dense = make(X, rank, out)
            t = interleaved(fns, args.repeat)
            fits = {k: fit_of(X, dense[k](out[k])) for k in fns}
            # (untimed; the median of three: a library's first traced call also counts one-off state, 190 KB of
            # caches for tuckerkit, against 57 KB steady on 10^3)
            mem = {k: float(np.median([peak_extra(fns[k]) for _ in range(3)])) / X.nbytes
                   for k in ("tuckerkit", "tensorly", "pyttb")}
            route, froute = (route_of(out[k]) for k in ("tuckerkit", "fortran"))
            row = {"method": method, "shape": list(shape), "rank": rank, "seconds": t, "fit": fits,
                   "peak_extra_over_input": mem, "input_bytes": int(X.nbytes),
                   "route": route, "route_fortran": froute,
                   "fortran_over_c": t["fortran"] / t["tuckerkit"],
                   "x_tensorly": t["tensorly"] / t["tuckerkit"], "x_pyttb": t["pyttb"] / t["tuckerkit"],
                   "direct_over_planned": t["tuckerkit"] / t["planned"]}
            rows.append(row)
            print(f"{method} {'x'.join(map(str, shape))} R={rank} ({row['route']}): tk {t['tuckerkit'] * 1e3:.2f} ms, "
                  f"planned {t['planned'] * 1e3:.2f}, F-ordered {t['fortran'] * 1e3:.2f} ({row['route_fortran']}), "
                  f"TL {t['tensorly'] * 1e3:.2f}, pyttb {t['pyttb'] * 1e3:.2f} | "
                  f"x TL {row['x_tensorly']:.2f} x pyttb {row['x_pyttb']:.2f} | mem "
                  + " / ".join(f"{v:.2f}" for v in mem.values()) + " | fits "
                  + " ".join(f"{fits[k]:.8f}" for k in fns), flush=True)
    write_json(f"{args.name}.json", {"benchmark": "small", "environment": environment(), "hooi_iterations": HOOI_ITERS,
                              "cp_iterations": CP_ITERS, "repeat": args.repeat, "rows": rows})
    md = markdown(rows, args.repeat)
    write_text(f"{args.name}.md", md)
    groups = [f"{r['method'][:2]} {'x'.join(map(str, r['shape']))}" for r in rows]
    grouped_bars(f"{args.name}.png", groups, {"x TensorLy": [r["x_tensorly"] for r in rows],
                                       "x pyttb": [r["x_pyttb"] for r in rows],
                                       "planned / direct": [1 / r["direct_over_planned"] for r in rows]},
                 "speedup of tuckerkit (log)", "Small tensors: whole calls, same start and iterations", log=True)
    print(md)


def route_of(result) -> str:
    """``direct`` (engine/_direct.py's numpy sweep), ``compiled`` (HOOI's compiled factor steps of small 3- and
    4-way tensors, engine/_small_hooi.py, or CP-ALS's compiled sweeps of small 2- to 4-way tensors,
    decomposition/_small_cp.py) or ``planned``, from a result's first plan record."""
    p = result.plans[0] if result.plans else None
    if type(p).__name__ != "DirectSweep":
        return "planned"
    return "compiled" if p.kind in ("ttmc_compiled", "mttkrp_compiled") else "direct"


def markdown(rows, repeat) -> str:
    lines = [
        "# Small and mid-size tensors: whole calls, tuckerkit vs TensorLy vs pyttb",
        "",
        f"float64, low rank + 1 % noise; the same start in every library (HOOI: HOSVD, {HOOI_ITERS} iterations; "
        f"CP-ALS: random factors, {CP_ITERS} iterations, plain ALS), no early stop; medians of {repeat} "
        "interleaved calls in one process. `route`: `direct` (engine/_direct.py's numpy sweeps), `compiled` "
        "(HOOI's compiled factor steps, engine/_small_hooi.py; CP-ALS's compiled sweeps, "
        "decomposition/_small_cp.py) or `planned`; `planned`: tuckerkit with its direct "
        "route for small tensors (and so its compiled steps) turned off; `F-ordered`: tuckerkit on the same values "
        "in Fortran order (pyttb's and MATLAB's layout), from the same start; both in the same run. Speedups are "
        "other / tuckerkit.",
        "",
        "| method | shape | rank | route | tuckerkit ms | planned ms | F-ordered ms (route) | TensorLy ms | pyttb ms "
        "| x TensorLy | x pyttb | planned / tuckerkit | F / C | fit tk / TL / pyttb | peak extra tk / TL / pyttb "
        "(x input) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, f = r["seconds"], r["fit"]
        lines.append(f"| {r['method']} | {'x'.join(map(str, r['shape']))} | {r['rank']} | {r['route']} | "
                     f"{t['tuckerkit'] * 1e3:.2f} | {t['planned'] * 1e3:.2f} | {t['fortran'] * 1e3:.2f} "
                     f"({r['route_fortran']}) | {t['tensorly'] * 1e3:.2f} | "
                     f"{t['pyttb'] * 1e3:.2f} | {r['x_tensorly']:.2f} | {r['x_pyttb']:.2f} | "
                     f"{1 / r['direct_over_planned']:.2f} | {r['fortran_over_c']:.2f} | "
                     f"{f['tuckerkit']:.6f} / {f['tensorly']:.6f} / "
                     f"{f['pyttb']:.6f} | " + " / ".join(f"{v:.2f}" for v in r["peak_extra_over_input"].values())
                     + " |")
    lines += ["", "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/small.py`. Machine "
              "and library versions: see small.json.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
