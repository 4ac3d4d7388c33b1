"""``make demo``: contractions with their plans and timings, then Tucker and CP on a generated tensor."""

from __future__ import annotations

import time

import numpy as np

from tuckerkit.engine import contract, gram, mttkrp, plan_contraction, ttm


def _median_time(fn, repeat: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    rng = np.random.default_rng(0)
    n = 96
    cases = [
        ("case 1.1 (C order)", "mk,knp->mnp", rng.random((n, n)), rng.random((n, n, n))),
        ("case 1.3 (C order)", "mk,nkp->mnp", rng.random((n, n)), rng.random((n, n, n))),
        ("case 3.4 (F order, exceptional in the seed)", "nk,pkm->mnp", np.asfortranarray(rng.random((n, n))),
         np.asfortranarray(rng.random((n, n, n)))),
        ("TTM mode 1 of a 96^3 tensor, rank 10", "abc,zb->azc", rng.random((n, n, n)), rng.random((10, n))),
    ]
    print(f"tuckerkit engine demo: contractions of {n}^3 float64 tensors (median of 7 runs)\n")
    for title, spec, A, B in cases:
        plan = plan_contraction(spec, A, B)
        t_tk = _median_time(lambda spec=spec, A=A, B=B: contract(spec, A, B))
        t_np = _median_time(lambda spec=spec, A=A, B=B: np.einsum(spec, A, B, optimize=True))
        ok = np.allclose(contract(spec, A, B), np.einsum(spec, A, B))
        print(f"== {title}: {spec}")
        print(plan.explain())
        print(
            f"   tuckerkit {t_tk * 1e3:.3f} ms | numpy.einsum(optimize=True) {t_np * 1e3:.3f} ms | "
            f"speedup {t_np / t_tk:.1f}x | matches einsum: {ok}\n"
        )
    X = rng.random((n, n, n))
    U = [rng.random((n, 16)) for _ in range(3)]
    print("== ops on a 96^3 tensor (median of 7 runs)")
    for name, fn in [
        ("ttm(X, U^T, 1)", lambda: ttm(X, U[1], 1, transpose=True)),
        ("gram(X, 1)", lambda: gram(X, 1)),
        ("mttkrp(X, U, 1), rank 16", lambda: mttkrp(X, U, 1)),
        ("X.sum() (one pass over X)", lambda: X.sum()),
    ]:
        print(f"   {name:32s} {_median_time(fn) * 1e3:8.3f} ms")
    _decompositions(rng)


def _decompositions(rng) -> None:
    import tuckerkit as tk

    n, r = 150, 10
    core = rng.standard_normal((r, r, r))
    U = [np.linalg.qr(rng.standard_normal((n, r)))[0] for _ in range(3)]
    X = tk.multi_ttm(core, U)
    noise = rng.standard_normal(X.shape)
    X += 0.01 * np.linalg.norm(X) / np.linalg.norm(noise) * noise
    print(f"\n== decompositions of a {n}^3 float64 tensor: Tucker rank {r} + 1 % noise")
    t0 = time.perf_counter()
    T = tk.st_hosvd(X, max_error=0.02)
    print(f"   st_hosvd(max_error=0.02): ranks {T.ranks}, relative error {1 - T.fit:.5f}, "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
    t0 = time.perf_counter()
    T = tk.hooi(X, [r, r, r])
    print(f"   hooi(ranks={r}): fit {T.fit:.6f} after {T.n_iter} iterations (converged: {T.converged}), "
          f"{T.passes_per_iteration} passes over X per iteration, {(time.perf_counter() - t0) * 1e3:.1f} ms")
    Y = tk.CPTensor(np.ones(5), tuple(rng.standard_normal((n, 5)) for _ in range(3))).to_dense()
    t0 = time.perf_counter()
    cp = tk.cp_als(Y, 5, random_state=0)
    print(f"   cp_als(rank=5) on a rank-5 tensor: fit {cp.fit:.6f} after {cp.n_iter} iterations, "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
