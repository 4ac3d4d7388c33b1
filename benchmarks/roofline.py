"""The machine's roofline next to today's dense kernels: where tuckerkit stands against the bound.

Measured in one process, medians of interleaved repeats:
  * read       : one streaming read of X, the fastest of ``np.add.reduce(X.ravel())``, the same reduce split
                 over one thread per core (the bandwidth of all cores), and both again with a compiled sum of
                 squares (tuckerkit's norm kernel) in place of numpy's reduce: on Zen 5 numpy's pairwise sum
                 runs at 13-19 GB/s on one core where the memory gives 36-42 (both cores: 21-26 against
                 44-57 GB/s), so its read alone overstates the bound;
  * gemm peak  : OpenBLAS ``A @ B`` on 2000 x 2000 matrices (default threads), float64 and float32;
  * ttm        : ``tk.ttm(X, U, n, transpose=True)`` per mode, as a ratio to the roofline bound
                 max(read, flops / peak);
  * hooi / cp  : seconds per iteration (the steady state: the mean over whole cycles of the multi-sweep tree
                 after the first iteration, from the callbacks' times, same init, ``tol=0``), as a
                 ratio to R = passes x read + the factor-update work timed alone;
  * subspace   : HOOI's factor step on a (200, 10, 10) projection: SVD of the 200 x 100 unfolding against
                 the Gram of the smaller side with ``eigh`` (what :func:`leading_left_singular` runs).
Tensor: 200^3 (``--quick``: 120^3), rank 10, float64 and float32.

Run:  python benchmarks/roofline.py [--quick] [--repeat 7] [--name roofline]
Writes benchmarks/results/<name>.{json,md} (default roofline).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _quiet_blas  # noqa: F401  (before numpy: OpenBLAS's idle threads sleep instead of spinning)
import numpy as np
import scipy.linalg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, interleaved, positive_int, result_stem, write_json, write_text

import tuckerkit as tk
from tuckerkit.decomposition._linalg import spd_solve
from tuckerkit.engine._norm_kernels import piece_sums
from tuckerkit.engine._policy import blas_pinned, default_policy
from tuckerkit.engine._subspace import leading_left_singular


def _kernel_read(x: np.ndarray) -> np.ndarray:
    """One streaming read of the 1-D ``x`` by a compiled loop (tuckerkit's sum-of-squares kernel, LLVM's vector
    lanes): the read that numpy's pairwise ``add.reduce`` does not reach on every machine."""
    out = np.empty(1)
    piece_sums(x, max(x.size, 1), out, 0, 1)
    return out


def read_fns(X: np.ndarray, pool: ThreadPoolExecutor, k: int) -> dict[str, Callable[[], object]]:
    """One streaming read of X: on one thread (``read_1``), split in ``k`` over the pool (``read_all``), and
    the same two by a compiled loop (``read_kernel_1``, ``read_kernel_all``); to be timed interleaved with the
    calls they bound (the machine's memory speed drifts between runs). The bound is the fastest of them
    (:func:`fastest_read`)."""
    flat = X.reshape(-1)
    cuts = np.linspace(0, flat.size, k + 1).astype(int)
    parts = [flat[a:b] for a, b in itertools.pairwise(cuts)]
    _kernel_read(flat[:16])  # compiled (or loaded from numba's cache) before anything is timed
    return {"read_1": lambda: np.add.reduce(flat), "read_all": lambda: list(pool.map(np.add.reduce, parts)),
            "read_kernel_1": lambda: _kernel_read(flat),
            "read_kernel_all": lambda: list(pool.map(_kernel_read, parts))}


def fastest_read(t: dict[str, float], pop: bool = False) -> float:
    """The read bound from the timings of :func:`read_fns` among ``t`` (seconds): the fastest of them; with
    ``pop`` they are removed from ``t``."""
    names = [k for k in t if k.startswith("read_")]
    read = min(t[k] for k in names)
    if pop:
        for k in names:
            del t[k]
    return read


class InterleavedRead:
    """Samples of one streaming read of X (:func:`read_fns`) taken between the timed calls of a benchmark, so
    that the roofline's read and the calls it bounds see the same state of the machine."""

    def __init__(self, X: np.ndarray) -> None:
        self.k = max(os.cpu_count() or 1, 1)
        self.pool = ThreadPoolExecutor(self.k)
        self.fns = read_fns(X, self.pool, self.k)
        self.samples: dict[str, list[float]] = {name: [] for name in self.fns}
        self.after: list[str] = []  # (the call each sample followed)

    def sample(self, after: str = "") -> int:
        """Time each read once, ``after`` the call named so (:meth:`by_caller`); the sample's index (for
        :meth:`at`)."""
        for name, fn in self.fns.items():
            t0 = time.perf_counter()
            fn()
            self.samples[name].append(time.perf_counter() - t0)
        self.after.append(after)
        return len(self.samples[name]) - 1

    def by_caller(self) -> dict[str, float]:
        """The median of the fastest read method's samples (:meth:`at`) after each named call: whether the
        machine reads slower after one library's calls than after another's."""
        names = sorted({a for a in self.after if a})
        return {k: statistics.median(self.at(i) for i, a in enumerate(self.after) if a == k) for k in names}

    def at(self, i: int) -> float:
        """Sample ``i`` of the read whose median is the fastest (the read :meth:`read` gives): the bound next to
        the call timed just before it (:func:`paired_ratios`). Not the fastest of that sample's reads, a minimum
        of noisy times that sits below every median."""
        best = min(self.samples, key=lambda k: statistics.median(self.samples[k]))
        return self.samples[best][i]

    def read(self) -> float:
        """The fastest of the reads' medians; the pool is shut down."""
        self.pool.shutdown()
        return min(statistics.median(v) for v in self.samples.values())


def read_bound(X: np.ndarray, repeat: int) -> dict[str, float]:
    """Seconds of one streaming read of X: one thread, and split over one thread per core, by numpy's reduce
    and by a compiled loop (:func:`read_fns`); ``read`` the fastest."""
    k = max(os.cpu_count() or 1, 1)
    pool = ThreadPoolExecutor(k)
    try:
        t = interleaved(read_fns(X, pool, k), repeat)
    finally:
        pool.shutdown()
    t["read"] = fastest_read(t)
    return t


def gemm_peak(dtype, repeat: int, n: int = 2000) -> float:
    """Flop/s of OpenBLAS on n x n matrices (median of ``repeat``; the matrices of :class:`GemmSample`)."""
    g = GemmSample(dtype, n)
    t = interleaved({"gemm": lambda: np.matmul(g.A, g.B, out=g.C)}, repeat)["gemm"]
    return 2.0 * n**3 / t


class GemmSample:
    """One timed OpenBLAS GEMM of n x n matrices (as :func:`gemm_peak`'s), sampled between a benchmark's timed
    calls: the peak drifts with the machine as the read does (the same 2000^3 ``dgemm`` at 101 and 180 GFlop/s
    in two runs of one session), so one median at the end can sit in a loaded minute; the flops bound takes the
    run's highest sample (benchmarks/cp.py, as benchmarks/ttm.py does)."""

    def __init__(self, dtype, n: int = 2000) -> None:
        rng = np.random.default_rng(1)
        self.n = n
        self.A = rng.standard_normal((n, n)).astype(dtype)
        self.B = rng.standard_normal((n, n)).astype(dtype)
        self.C = np.empty((n, n), dtype)
        np.matmul(self.A, self.B, out=self.C)  # (BLAS's threads and buffers up before the first sample)

    def sample(self) -> float:
        """Flop/s of one GEMM, now."""
        t0 = time.perf_counter()
        np.matmul(self.A, self.B, out=self.C)
        return 2.0 * self.n**3 / (time.perf_counter() - t0)


#: iterations the steady-state time of a decomposition is taken over (:func:`steady_iteration`): whole cycles of
#: the multi-sweep tree, whose iterations alternate between one and two passes over X (3 modes: 3 passes every 2
#: iterations; 4-mode HOOI: 4 every 3), so that the cheap and the dear iterations count alike
CYCLE = 6


def steady_iteration(stamps: list[float]) -> float:
    """Seconds per iteration in the steady state, from the times ``stamps`` of one run's callbacks (one after each
    iteration): the mean over the last ``CYCLE`` iterations, or over the most whole cycles of them that the run
    has after its first iteration (the first iteration, with its start-up, the norm of X and, in the multi-sweep
    tree, the second pass no earlier sweep left, is not in it: that is the whole call's). A median of the gaps
    would take the cheap or the dear iterations of the tree's cycle, whichever came more often.

    >>> steady_iteration([1.0, 3.0, 4.0, 6.0, 7.0, 9.0, 10.0, 12.0])
    1.5
    """
    gaps = len(stamps) - 1
    if gaps < 1:
        raise ValueError(f"steady_iteration needs the callbacks of at least 2 iterations; received {len(stamps)}")
    k = gaps // CYCLE * CYCLE or gaps
    return (stamps[-1] - stamps[-1 - k]) / k


def steady_cycles(stamps: list[float]) -> list[float]:
    """Seconds per iteration of each whole cycle of ``CYCLE`` iterations that the run has after its first
    iteration, the last ones (the cycles :func:`steady_iteration` takes together), oldest first; a run shorter
    than one cycle gives its one steady mean.

    >>> steady_cycles([0.0, 1.0, 3.0, 4.0, 6.0, 7.0, 9.0, 11.0, 14.0, 16.0, 19.0, 21.0, 24.0])
    [1.5, 2.5]
    """
    gaps = len(stamps) - 1
    n = gaps // CYCLE
    if n == 0:
        return [steady_iteration(stamps)]
    end = len(stamps) - 1
    return [(stamps[end - (n - 1 - c) * CYCLE] - stamps[end - (n - c) * CYCLE]) / CYCLE for c in range(n)]


def paired_ratios(pairs: list[tuple[list[float], float]], passes: int, rest: float) -> list[float]:
    """Each steady cycle of a run over the roofline R made with the read sampled right after that run:
    ``pairs`` holds, per run, its :func:`steady_cycles` and that read (seconds); R = ``passes`` reads +
    ``rest`` (the factor work timed alone). On a machine whose memory speed drifts between runs (the same HOOI
    iteration 3.8-6.3 ms in one session), a ratio of two medians taken apart (the runs', the reads') moves with
    the drift; each cycle against the read next to it does not.

    >>> paired_ratios([([2.0, 3.0], 1.0), ([4.0], 2.0)], 2, 0.0)
    [1.0, 1.5, 1.0]
    """
    if not pairs:
        raise ValueError("paired_ratios needs at least one run's cycles and read; received none")
    return [c / (passes * read + rest) for cycles, read in pairs for c in cycles]


def per_iteration(run) -> float:
    """Seconds per iteration of one decomposition run in the steady state (:func:`steady_iteration`)."""
    stamps: list[float] = []
    run(lambda s: stamps.append(time.perf_counter()))
    return steady_iteration(stamps)


def measure(dtype, n: int, R: int, iters: int, repeat: int, rng, rows: list, summary: dict) -> None:
    """One dtype: its roofline and kernels, appended to ``rows`` and ``summary``."""
    name = dtype.name
    X = rng.standard_normal((n, n, n)).astype(dtype)
    rb = read_bound(X, repeat)
    peak = gemm_peak(dtype, max(3, repeat // 2))
    read = rb["read"]
    summary[name] = {"read_1_s": rb["read_1"], "read_all_s": rb["read_all"], "read_kernel_1_s": rb["read_kernel_1"],
                     "read_kernel_all_s": rb["read_kernel_all"], "read_s": read,
                     "bandwidth_Bps": X.nbytes / read, "gemm_peak_flops": peak}
    Us = [np.linalg.qr(rng.standard_normal((n, R)))[0].astype(dtype) for _ in range(3)]
    fns = {f"ttm{m}": (lambda m=m: tk.ttm(X, Us[m], m, transpose=True)) for m in range(3)}
    t = interleaved(fns, repeat)
    bound = max(read, 2.0 * X.size * R / peak)
    for m in range(3):
        rows.append({"dtype": name, "op": f"ttm mode {m}", "seconds": t[f"ttm{m}"], "bound_s": bound,
                     "ratio": t[f"ttm{m}"] / bound})
    # the HOOI factor step alone: SVD of the (200, 100) unfolding vs the engine's choice
    Y = tk.multi_ttm(X, Us, skip=0, transpose=True)
    M = Y.reshape(n, -1)
    pol = default_policy()
    with blas_pinned():  # as inside a decomposition: BLAS and LAPACK on one thread
        ts = interleaved({
            "svd": lambda M=M: scipy.linalg.svd(M, full_matrices=False, check_finite=False),
            "engine": lambda Y=Y: leading_left_singular(Y, 0, R, pol),
            # as inside HOOI: warm-started from the factor it replaces
            "engine_warm": lambda Y=Y: leading_left_singular(Y, 0, R, pol, start=Us[0]),
        }, repeat)
    summary[name]["factor_step_svd_s"] = ts["svd"]
    summary[name]["factor_step_engine_s"] = ts["engine"]
    summary[name]["factor_step_engine_warm_s"] = ts["engine_warm"]
    # whole iterations: the same init for every repeat
    init = tk.st_hosvd(X, [R] * 3)
    hooi_it = statistics.median(per_iteration(
        lambda cb: tk.hooi(X, [R] * 3, init=init, max_iter=iters, tol=0.0, callback=cb))
        for _ in range(3))
    cp_init = [rng.standard_normal((n, R)).astype(dtype) for _ in range(3)]
    cp_it = statistics.median(per_iteration(
        lambda cb: tk.cp_als(X, R, init=cp_init, max_iter=iters, tol=0.0, callback=cb, linesearch=False))
        for _ in range(3))
    # factor work alone: HOOI = 3 factor steps + the core; CP = 3 x (Hadamard of Grams + solve)
    G = [U.T @ U for U in cp_init]
    Mk = rng.standard_normal((n, R)).astype(dtype)
    eye = np.eye(R, dtype=dtype)
    with blas_pinned():
        tf = interleaved({
            "cp_factor": lambda: [spd_solve(G[0] * G[1] + eye, Mk) for _ in range(3)],
        }, repeat)
    R_hooi = 2 * read + 3 * ts["engine_warm"]
    R_cp = 2 * read + tf["cp_factor"]
    rows.append({"dtype": name, "op": "hooi iteration", "seconds": hooi_it, "bound_s": R_hooi,
                 "ratio": hooi_it / R_hooi})
    rows.append({"dtype": name, "op": "cp_als iteration", "seconds": cp_it, "bound_s": R_cp,
                 "ratio": cp_it / R_cp})
    for r in rows[-5:]:
        print(f"{name:8s} {r['op']:18s} {r['seconds'] * 1e3:8.2f} ms  bound {r['bound_s'] * 1e3:7.2f} ms"
              f"  ratio {r['ratio']:.2f}", flush=True)
    print(f"{name:8s} read 1 thread {rb['read_1'] * 1e3:.2f} ms, all cores {rb['read_all'] * 1e3:.2f} ms, "
          f"compiled {rb['read_kernel_1'] * 1e3:.2f} / {rb['read_kernel_all'] * 1e3:.2f} ms "
          f"({X.nbytes / read / 1e9:.1f} GB/s); gemm {peak / 1e9:.1f} GFlop/s; factor step svd "
          f"{ts['svd'] * 1e3:.2f} ms, engine {ts['engine'] * 1e3:.2f} ms (warm {ts['engine_warm'] * 1e3:.2f})",
          flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=positive_int, default=7)
    ap.add_argument("--name", default="roofline", type=result_stem,
                    help="results file stem under benchmarks/results (default: roofline)")
    args = ap.parse_args(argv)
    n = 120 if args.quick else 200
    R = 10
    iters = 6 if args.quick else 11
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    summary: dict[str, dict] = {}
    for dtype in (np.float64, np.float32):
        measure(np.dtype(dtype), n, R, iters, args.repeat, rng, rows, summary)
    write_json(f"{args.name}.json", {"benchmark": "roofline", "size": n, "rank": R, "environment": environment(),
                                 "summary": summary, "rows": rows})
    write_text(f"{args.name}.md", markdown(n, R, summary, rows))


def markdown(n, R, summary, rows) -> str:
    lines = [f"# Roofline of this machine and tuckerkit against it ({n}^3, rank {R})", ""]
    for name, s in summary.items():
        lines.append(f"* {name}: one read {s['read_s'] * 1e3:.2f} ms ({s['bandwidth_Bps'] / 1e9:.1f} GB/s; "
                     f"numpy's reduce on 1 thread {s['read_1_s'] * 1e3:.2f} ms, on all "
                     f"{s['read_all_s'] * 1e3:.2f} ms; a compiled read {s['read_kernel_1_s'] * 1e3:.2f} / "
                     f"{s['read_kernel_all_s'] * 1e3:.2f} ms), GEMM peak {s['gemm_peak_flops'] / 1e9:.1f} "
                     f"GFlop/s; HOOI factor step: SVD {s['factor_step_svd_s'] * 1e3:.2f} ms, engine "
                     f"{s['factor_step_engine_s'] * 1e3:.2f} ms")
    lines += ["", "| dtype | operation | ms | roofline bound ms | ratio |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['op']} | {r['seconds'] * 1e3:.2f} | {r['bound_s'] * 1e3:.2f} | "
                     f"{r['ratio']:.2f} |")
    lines += ["", "TTM bound: max(one read of X, 2 I^3 R / GEMM peak). Iteration bound R: 2 passes x one read "
              "+ the factor work timed alone (HOOI: 3 factor steps as the engine runs them; CP: 3 x Gram "
              "Hadamard + Cholesky solve)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
