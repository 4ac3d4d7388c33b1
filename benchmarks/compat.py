"""Switching in one import line: ``tuckerkit.compat.tensorly.parafac`` / ``tucker`` against TensorLy's own, and
CP-ALS line search against plain ALS, to the same fit.

Tensors: 200^3 float64, rank 10 + 1 % noise ("planted"), and the same with two nearly collinear components in
one mode ("swamp": plain ALS crawls there). Every run starts from the same random factors.

- parafac to TensorLy's fit: TensorLy's ``parafac(X, 10, init=F0, linesearch=True, n_iter_max=K, tol=0)`` sets
  the target fit; tuckerkit (compat, same arguments) runs until it reaches that fit (a callback stops it).
- line search: ``tk.cp_als`` with and without ``linesearch`` until the fit is within 1e-6 of the best fit
  either reaches in 1000 iterations: iterations and seconds.
- tucker: ``compat.tucker(X, [10]*3)`` vs TensorLy's ``tucker`` (default arguments, same HOSVD start).
Peak extra memory beyond the input: tracemalloc. Medians over ``--repeat`` interleaved runs.

Run:  python benchmarks/compat.py [--quick] [--repeat 3]
Writes benchmarks/results/compat.{json,md,png}.
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
from _common import RESULTS, environment, peak_extra, write_json, write_text

import tuckerkit as tk
from tuckerkit.compat import tensorly as compat


def planted(shape, rank, seed=0, noise=0.01, collinear=False):
    rng = np.random.default_rng(seed)
    Us = [rng.standard_normal((n, rank)) for n in shape]
    if collinear:
        Us[0][:, 1] = Us[0][:, 0] + 0.05 * Us[0][:, 1]
    X = np.einsum("ir,jr,kr->ijk", *Us)
    E = rng.standard_normal(shape)
    return X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def fit_of(X, weights, factors) -> float:
    return 1.0 - np.linalg.norm(X - np.einsum("r,ir,jr,kr->ijk", weights, *factors)) / np.linalg.norm(X)


def until(target: float):
    """A tuckerkit callback that stops at the first iteration whose fit reaches ``target``."""
    def stop(state) -> bool:
        return state.fit >= target
    return stop


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import tensorly.decomposition as tld
    from tensorly.cp_tensor import CPTensor as TLCP

    n, R, K = (60, 10, 30) if args.quick else (200, 10, 30)
    shape = (n, n, n)
    rows, ls_rows, tucker_rows = [], [], []
    warm = planted((20, 20, 20), 3)  # imports, compiled kernels and BLAS warm before any timing
    tld.parafac(warm, 3, n_iter_max=2, linesearch=True, return_errors=True)
    tld.tucker(warm, [3] * 3)
    compat.parafac(warm, 3, n_iter_max=2, linesearch=True)
    compat.tucker(warm, [3] * 3)
    for name, X in (("planted", planted(shape, R)), ("swamp", planted(shape, R, collinear=True))):
        rng = np.random.default_rng(1)
        F0 = [rng.random((m, R)) for m in shape]
        tl_time, tl_fit, tk_time, tk_fit, tk_iters = [], [], [], [], []
        for _ in range(args.repeat):
            # return_errors: TensorLy's line search reads its error list, which tol=0 alone leaves empty
            t, (cp, _) = timed(lambda X=X, F0=F0: tld.parafac(
                X, R, init=TLCP((np.ones(R), [U.copy() for U in F0])), linesearch=True, n_iter_max=K, tol=0,
                return_errors=True))
            target = fit_of(X, cp.weights, cp.factors)
            tl_time.append(t)
            tl_fit.append(target)
            seen = []

            def cb(cp_tensor, err, seen=seen, target=target):
                seen.append(err)
                return bool(1.0 - err >= target - 1e-12)  # TensorLy's rule: stop on `is True`
            t, ours = timed(lambda X=X, F0=F0, cb=cb: compat.parafac(X, R, init=(None, F0), linesearch=True,
                                                                     n_iter_max=1000, tol=0, callback=cb))
            tk_time.append(t)
            tk_fit.append(fit_of(X, ours.weights, ours.factors))
            tk_iters.append(len(seen))
        mem_tl = peak_extra(lambda X=X, F0=F0: tld.parafac(X, R, init=TLCP((np.ones(R), [U.copy() for U in F0])),
                                                           linesearch=True, n_iter_max=8, tol=0, return_errors=True))
        mem_tk = peak_extra(lambda X=X, F0=F0: compat.parafac(X, R, init=(None, F0), linesearch=True, n_iter_max=8,
                                                              tol=0))
        rows.append({"tensor": name, "shape": list(shape), "rank": R, "tensorly_iters": K,
                     "tensorly_s": statistics.median(tl_time), "tensorly_fit": statistics.median(tl_fit),
                     "compat_iters": int(statistics.median(tk_iters)), "compat_s": statistics.median(tk_time),
                     "compat_fit": statistics.median(tk_fit),
                     "speedup": statistics.median(tl_time) / statistics.median(tk_time),
                     "peak_extra_tensorly_MB": mem_tl / 1e6, "peak_extra_compat_MB": mem_tk / 1e6,
                     "input_MB": X.nbytes / 1e6})
        # line search vs plain ALS, to within 1e-6 of the best fit either reaches
        best = max(tk.cp_als(X, R, init=(None, F0), tol=0, max_iter=300 if args.quick else 1000,
                             linesearch=ls).fit for ls in (False, True))
        for ls in (False, True):
            times, iters = [], []
            for _ in range(args.repeat):
                stop = until(best - 1e-6)
                t, cp = timed(lambda X=X, F0=F0, ls=ls, stop=stop: tk.cp_als(
                    X, R, init=(None, F0), tol=0, max_iter=1000, linesearch=ls, callback=stop))
                times.append(t)
                iters.append(cp.n_iter)
            ls_rows.append({"tensor": name, "linesearch": ls, "iters": int(statistics.median(iters)),
                            "s": statistics.median(times), "target_fit": best - 1e-6})
        # tucker
        tt, tk_t = [], []
        for _ in range(args.repeat):
            tt.append(timed(lambda X=X: tld.tucker(X, [R] * 3))[0])
            tk_t.append(timed(lambda X=X: compat.tucker(X, [R] * 3))[0])
        a = tld.tucker(X, [R] * 3)
        b = compat.tucker(X, [R] * 3)
        err = [np.linalg.norm(X - np.einsum("abc,ia,jb,kc->ijk", c.core, *c.factors)) / np.linalg.norm(X)
               for c in (a, b)]
        tucker_rows.append({"tensor": name, "tensorly_s": statistics.median(tt), "compat_s": statistics.median(tk_t),
                            "speedup": statistics.median(tt) / statistics.median(tk_t),
                            "tensorly_error": err[0], "compat_error": err[1]})
    payload = {"environment": environment(), "parafac": rows, "linesearch": ls_rows, "tucker": tucker_rows}
    suffix = "_quick" if args.quick else ""
    write_json(f"compat{suffix}.json", payload)
    lines = ["# Compat layer and line search", "",
             "`compat.parafac(..., linesearch=True)` to TensorLy's fit after its iterations (same start):", "",
             "| tensor | TensorLy s (iters) | compat s (iters) | speed-up | fits | peak extra MB TL / compat (input) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tensor']} {'x'.join(map(str, r['shape']))} R{r['rank']} | {r['tensorly_s']:.3f} "
                     f"({r['tensorly_iters']}) | {r['compat_s']:.3f} ({r['compat_iters']}) | {r['speedup']:.1f}x | "
                     f"{r['tensorly_fit']:.6f} / {r['compat_fit']:.6f} | {r['peak_extra_tensorly_MB']:.0f} / "
                     f"{r['peak_extra_compat_MB']:.0f} ({r['input_MB']:.0f}) |")
    lines += ["", "`tk.cp_als` to within 1e-6 of the best fit, with and without `linesearch`:", "",
              "| tensor | linesearch | iterations | seconds |", "|---|---|---|---|"]
    for r in ls_rows:
        lines.append(f"| {r['tensor']} | {r['linesearch']} | {r['iters']} | {r['s']:.3f} |")
    lines += ["", "`compat.tucker(X, [10]*3)` vs TensorLy's `tucker` (defaults):", "",
              "| tensor | TensorLy s | compat s | speed-up | errors |", "|---|---|---|---|---|"]
    for r in tucker_rows:
        lines.append(f"| {r['tensor']} | {r['tensorly_s']:.3f} | {r['compat_s']:.3f} | {r['speedup']:.1f}x | "
                     f"{r['tensorly_error']:.6f} / {r['compat_error']:.6f} |")
    lines += ["", f"Medians of {args.repeat} runs. Machine: {environment().get('processor') or 'see JSON'}."]
    write_text(f"compat{suffix}.md", "\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        names = [r["tensor"] for r in rows]
        x = np.arange(len(names))
        ax[0].bar(x - 0.2, [r["tensorly_s"] for r in rows], 0.4, label="TensorLy parafac(linesearch)")
        ax[0].bar(x + 0.2, [r["compat_s"] for r in rows], 0.4, label="tuckerkit.compat parafac")
        ax[0].set_xticks(x, names)
        ax[0].set_ylabel("seconds to TensorLy's fit")
        ax[0].legend(fontsize=8)
        for i, ls in enumerate((False, True)):
            ax[1].bar(x + (i - 0.5) * 0.4, [r["iters"] for r in ls_rows if r["linesearch"] == ls], 0.4,
                      label=f"cp_als linesearch={ls}")
        ax[1].set_xticks(x, names)
        ax[1].set_ylabel("iterations to the best fit - 1e-6")
        ax[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(RESULTS / f"compat{suffix}.png", dpi=110)
    except ImportError:  # pragma: no cover
        pass
    print("\n".join(lines))


if __name__ == "__main__":
    main()
