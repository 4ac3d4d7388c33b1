"""Issue 18's features against their peers: non-negative CP / Tucker (TensorLy HALS), cp_apr (pyttb),
masked CP and Tucker (TensorLy's masked parafac and tucker).

Every pair starts from the same factors and runs the same number of iterations with no early stop, so the
two sides follow the same algorithm and reach the same objective (the table shows both). Times are medians of
``--repeat`` runs, the two sides alternating. The non-negative cases also time each side to the same fit:
the peer's run above against tuckerkit stopped (by its ``callback``) at the first iteration whose error is at
most the peer's final error (times 1 + 1e-9: rounding), with the iterations each took.

Cases: NN-CP HALS and NN-Tucker HALS on a 200^3 non-negative rank-10 tensor (rank 10; Tucker ranks 10,10,10),
cp_apr on a sparse count tensor (300 x 250 x 200, about 600k nonzeros, rank 10), masked CP-ALS on 100^3 with
50 % missing (rank 5) and on 200^3 (rank 10), masked HOOI on 200^3 with 50 % missing (ranks 10, from the same
orthonormal factors and the core they give the zero-filled tensor; TensorLy's ``tucker(mask=)`` refills the
missing entries from the model at each iteration, as tuckerkit's EM does). ``--quick`` shrinks every case
for a smoke run (seconds).

Run:  python benchmarks/features.py [--quick] [--iters 5] [--repeat 3]
Writes benchmarks/results/features.{json,md,png}.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, environment, write_json, write_text

import tuckerkit as tk


def _rel(X, Xhat, mask=None):
    if mask is not None:
        return float(np.linalg.norm(mask * (X - Xhat)) / np.linalg.norm(mask * X))
    return float(np.linalg.norm(X - Xhat) / np.linalg.norm(X))


def _time(fns, repeat):
    times = {k: [] for k in fns}
    out = {}
    for r in range(repeat):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t0 = time.perf_counter()
            out[k] = fns[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}, out


def _stop_at(target):
    """A tuckerkit callback that stops at the first iteration whose relative error is at most ``target``."""
    return lambda state: 1.0 - state.fit <= target * (1 + 1e-9)


def _to_same_fit(tk_run, peer_run, peer_key, target, iters, repeat):
    """Seconds for each side to reach the peer's error ``target`` (the peer: its fixed-iteration run)."""
    med, out = _time({"tuckerkit": tk_run, peer_key: peer_run}, repeat)
    return {"target": target, "seconds": med, "iterations": {"tuckerkit": out["tuckerkit"].n_iter, peer_key: iters},
            "speedup": med[peer_key] / med["tuckerkit"]}


def nn_cp_case(n, R, iters, repeat):
    import tensorly as tl
    from tensorly.decomposition import non_negative_parafac_hals

    rng = np.random.default_rng(0)
    X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, R)) for _ in range(3))) + 0.01 * rng.random((n, n, n))
    init = [rng.random((n, R)) for _ in range(3)]
    fns = {
        "tuckerkit": lambda: tk.non_negative_cp(X, R, init=[U.copy() for U in init], tol=0, max_iter=iters),
        "tensorly": lambda: non_negative_parafac_hals(X, R, init=tl.cp_tensor.CPTensor((np.ones(R), [U.copy() for U in
                                                                                                   init])),
                                                      n_iter_max=iters, tol=0),
    }
    med, out = _time(fns, repeat)
    err = {"tuckerkit": _rel(X, out["tuckerkit"].to_dense()), "tensorly": _rel(X, tl.cp_to_tensor(out["tensorly"]))}
    same = _to_same_fit(lambda: tk.non_negative_cp(X, R, init=[U.copy() for U in init], tol=0, max_iter=10 * iters,
                                                   callback=_stop_at(err["tensorly"])),
                        fns["tensorly"], "tensorly", err["tensorly"], iters, repeat)
    return {"case": "non-negative CP (HALS)", "peer": "TensorLy non_negative_parafac_hals", "size": f"{n}^3",
            "rank": R, "iterations": iters, "seconds": med, "objective": err, "objective_name": "relative error",
            "to_same_fit": same}


def nn_tucker_case(n, R, iters, repeat):
    import tensorly as tl
    from tensorly.decomposition import non_negative_tucker_hals

    rng = np.random.default_rng(0)
    ranks = (R, R, R)
    X = tk.multi_ttm(rng.random(ranks), [rng.random((n, R)) for _ in range(3)]) + 0.01 * rng.random((n, n, n))
    core, factors = rng.random(ranks), [rng.random((n, R)) for _ in range(3)]
    fns = {
        "tuckerkit": lambda: tk.non_negative_tucker(X, ranks, init=(core.copy(), [U.copy() for U in factors]), tol=0,
                                                    max_iter=iters),
        "tensorly": lambda: non_negative_tucker_hals(
            X, ranks, init=tl.tucker_tensor.TuckerTensor((core.copy(), [U.copy() for U in factors])),
            n_iter_max=iters, tol=0),
    }
    med, out = _time(fns, repeat)
    err = {"tuckerkit": _rel(X, out["tuckerkit"].to_dense()),
           "tensorly": _rel(X, tl.tucker_to_tensor(out["tensorly"]))}
    same = _to_same_fit(lambda: tk.non_negative_tucker(X, ranks, init=(core.copy(), [U.copy() for U in factors]),
                                                       tol=0, max_iter=10 * iters, callback=_stop_at(err["tensorly"])),
                        fns["tensorly"], "tensorly", err["tensorly"], iters, repeat)
    return {"case": "non-negative Tucker (HALS)", "peer": "TensorLy non_negative_tucker_hals", "size": f"{n}^3",
            "rank": R, "iterations": iters, "seconds": med, "objective": err, "objective_name": "relative error",
            "to_same_fit": same}


def apr_case(shape, R, iters, repeat):
    import pyttb as ttb

    from tuckerkit.sparse import COOTensor

    rng = np.random.default_rng(0)
    nnz_target = int(0.05 * np.prod(shape))
    A = [rng.random((n, R)) * (rng.random((n, R)) < 0.3) for n in shape]
    coords = np.stack([rng.integers(0, n, nnz_target) for n in shape], axis=1)
    lam = np.einsum("kr,kr,kr->k", *(U[coords[:, m]] for m, U in enumerate(A))) * 5.0 + 0.5
    vals = rng.poisson(lam).astype(np.float64)
    keep = vals > 0
    X = COOTensor(coords[keep], vals[keep], shape)
    st = ttb.sptensor(X.coords, X.values[:, None], shape)
    init = [rng.random((n, R)) for n in shape]
    tk.cp_apr(X, R, init=init, max_iter=1)  # compile the kernels (cached on disk afterwards)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fns = {
            "tuckerkit": lambda: tk.cp_apr(X, R, init=[U.copy() for U in init], max_iter=iters),
            "pyttb": lambda: ttb.cp_apr(st, R, init=ttb.ktensor([U.copy() for U in init]), maxiters=iters,
                                        printitn=0),
        }
        med, out = _time(fns, repeat)
    ll = {"tuckerkit": out["tuckerkit"].log_likelihood, "pyttb": float(out["pyttb"][2]["obj"])}
    return {"case": "Poisson CP (cp_apr, MU)", "peer": "pyttb cp_apr", "size": "x".join(map(str, shape)) +
            f" nnz={X.nnz}", "rank": R, "iterations": iters, "seconds": med, "objective": ll,
            "objective_name": "log-likelihood"}


def masked_case(n, R, iters, repeat):
    import tensorly as tl
    from tensorly.decomposition import parafac

    rng = np.random.default_rng(0)
    X = np.einsum("ir,jr,kr->ijk", *(rng.standard_normal((n, R)) for _ in range(3)))
    X += 0.01 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(X.shape)
    mask = rng.random(X.shape) > 0.5
    init = [rng.standard_normal((n, R)) for _ in range(3)]
    start = np.where(mask, X, np.einsum("ir,jr,kr->ijk", *init))
    fmask = mask.astype(float)
    fns = {
        "tuckerkit": lambda: tk.cp_als(X, R, mask=mask, init=[U.copy() for U in init], tol=0, max_iter=iters,
                                       linesearch=False),
        "tensorly": lambda: parafac(start, R, mask=fmask, init=tl.cp_tensor.CPTensor((np.ones(R), [U.copy() for U in
                                                                                                   init])),
                                    n_iter_max=iters, tol=0, linesearch=False),
    }
    return _masked_row("masked CP-ALS (50 % missing, EM)", "TensorLy parafac(mask=)", X, mask, R, iters, fns,
                       repeat, tl.cp_to_tensor)


def _masked_row(case, peer, X, mask, R, iters, fns, repeat, peer_dense):
    """A masked case's row: the two calls timed alternately, their errors on the observed entries."""
    med, out = _time(fns, repeat)
    err = {"tuckerkit": _rel(X, out["tuckerkit"].to_dense(), mask),
           "tensorly": _rel(X, peer_dense(out["tensorly"]), mask)}
    return {"case": case, "peer": peer, "size": f"{X.shape[0]}^3", "rank": R, "iterations": iters, "seconds": med,
            "objective": err, "objective_name": "relative error on observed entries"}


def masked_tucker_case(n, R, iters, repeat):
    import tensorly as tl
    from tensorly.decomposition import tucker

    rng = np.random.default_rng(1)
    core = rng.standard_normal((R,) * 3)
    X = tk.multi_ttm(core, [np.linalg.qr(rng.standard_normal((n, R)))[0] for _ in range(3)])
    X += 0.01 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(X.shape)
    mask = rng.random(X.shape) > 0.5
    start = [np.linalg.qr(rng.standard_normal((n, R)))[0] for _ in range(3)]
    core0 = tk.multi_ttm(np.where(mask, X, 0.0), start, transpose=True)
    fmask = mask.astype(float)
    fns = {
        "tuckerkit": lambda: tk.hooi(X, (R,) * 3, mask=mask, init=(core0.copy(), [U.copy() for U in start]), tol=0,
                                     max_iter=iters),
        "tensorly": lambda: tucker(X, [R] * 3, mask=fmask, init=tl.tucker_tensor.TuckerTensor(
            (core0.copy(), [U.copy() for U in start])), n_iter_max=iters, tol=0),
    }
    return _masked_row("masked HOOI (50 % missing, EM)", "TensorLy tucker(mask=)", X, mask, R, iters, fns, repeat,
                       tl.tucker_to_tensor)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a few seconds")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    q = args.quick
    it = args.iters
    rows = [
        nn_cp_case(40 if q else 200, 10, it, args.repeat),
        nn_tucker_case(40 if q else 200, 10 if not q else 5, it, args.repeat),
        apr_case((60, 50, 40) if q else (300, 250, 200), 10, it, args.repeat),
        masked_case(30 if q else 100, 5, it, args.repeat),
        masked_case(40 if q else 200, 10, it, args.repeat),
        masked_tucker_case(30 if q else 200, 10, it, args.repeat),
    ]
    for r in rows:
        peer = next(k for k in r["seconds"] if k != "tuckerkit")
        r["peer_key"] = peer
        r["speedup"] = r["seconds"][peer] / r["seconds"]["tuckerkit"]
        r["per_iteration_ms"] = {k: 1e3 * v / r["iterations"] for k, v in r["seconds"].items()}
        print(f"{r['case']} {r['size']} R={r['rank']}: tuckerkit {r['per_iteration_ms']['tuckerkit']:.1f} ms/it, "
              f"{r['peer']} {r['per_iteration_ms'][peer]:.1f} ms/it (x{r['speedup']:.1f}); {r['objective_name']} "
              f"{r['objective']['tuckerkit']:.6g} vs {r['objective'][peer]:.6g}", flush=True)
        if "to_same_fit" in r:
            s = r["to_same_fit"]
            print(f"  to the same fit ({s['target']:.6g}): tuckerkit {1e3 * s['seconds']['tuckerkit']:.1f} ms "
                  f"({s['iterations']['tuckerkit']} it), peer {1e3 * s['seconds'][peer]:.1f} ms "
                  f"({s['iterations'][peer]} it) (x{s['speedup']:.1f})", flush=True)
    suffix = "_quick" if q else ""
    write_json(f"features{suffix}.json", {"benchmark": "features (issue 18)", "quick": q, "environment": environment(),
                                          "rows": rows})
    lines = [
        "# Non-negative, count and missing data: tuckerkit vs TensorLy / pyttb",
        "",
        f"Same start, {it} iterations each, no early stop; median of {args.repeat} alternating runs"
        f"{' (quick sizes)' if q else ''}.",
        "",
        "| case | size | rank | peer | tuckerkit ms/iter | peer ms/iter | speedup | objective (tuckerkit / peer) |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        p = r["per_iteration_ms"]
        lines.append(f"| {r['case']} | {r['size']} | {r['rank']} | {r['peer']} | {p['tuckerkit']:.1f} | "
                     f"{p[r['peer_key']]:.1f} | {r['speedup']:.1f}x | {r['objective_name']}: "
                     f"{r['objective']['tuckerkit']:.6g} / {r['objective'][r['peer_key']]:.6g} |")
    same = [r for r in rows if "to_same_fit" in r]
    if same:
        lines += [
            "",
            "To the same fit: the peer's run above, and tuckerkit stopped at the first iteration whose error is at "
            "most the peer's final error.",
            "",
            "| case | target error | tuckerkit ms (iterations) | peer ms (iterations) | speedup |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in same:
            s, k = r["to_same_fit"], r["peer_key"]
            lines.append(f"| {r['case']} | {s['target']:.6g} | {1e3 * s['seconds']['tuckerkit']:.1f} "
                         f"({s['iterations']['tuckerkit']}) | {1e3 * s['seconds'][k]:.1f} ({s['iterations'][k]}) | "
                         f"{s['speedup']:.1f}x |")
    write_text(f"features{suffix}.md", "\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = [f"{r['case'].split(' (')[0]}\n{r['size'].split(' ')[0]}" for r in rows]
    ax.bar(range(len(rows)), [r["speedup"] for r in rows], color="C0")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("speedup per iteration (x peer)")
    ax.set_title("tuckerkit vs TensorLy / pyttb, same start and iterations")
    for i, r in enumerate(rows):
        ax.text(i, r["speedup"], f"{r['speedup']:.1f}x", ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"features{suffix}.png", dpi=120)
    print(f"wrote {RESULTS / f'features{suffix}.json'}, .md, .png")


if __name__ == "__main__":
    main()
