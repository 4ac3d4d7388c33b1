"""Medians over repeated full runs of ``benchmarks/sparse_tensors.py`` (this machine is shared: single runs move 2x).

Copy each run's ``results/sparse.json`` to ``results/sparse_runs/run_<name>.json``, then run this script; it
writes ``results/sparse_runs.md`` with the per-run figures and their medians against the issue's floors.

Run:  python benchmarks/sparse_runs.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, write_text


def main() -> None:
    runs = {p.stem.removeprefix("run_"): json.loads(p.read_text())
            for p in sorted((RESULTS / "sparse_runs").glob("run_*.json"))}
    if not runs:
        raise SystemExit("no runs in benchmarks/results/sparse_runs/")
    tensors = [r["tensor"] for r in next(iter(runs.values()))["rows"]]
    names = list(runs)
    lines = [f"# Sparse CP-ALS over {len(runs)} full runs ({', '.join(names)}): per run, and the median", "",
             "| tensor | measure | " + " | ".join(names) + " | median | floor |",
             "|---|---|" + "---|" * len(names) + "---|---|"]
    for t in tensors:
        rows = {n: next(r for r in runs[n]["rows"] if r["tensor"] == t) for n in names}
        measures = [
            ("ms/iteration, 2 threads", lambda r: r["threads2"]["iteration_ms"], ".0f", None),
            ("/ SPLATT, 2 threads (BLAS 1)", lambda r: r["threads2"]["iteration_ms"] / r["splatt_ms"][-1], ".2f",
             "<= 1.5"),
            ("ms/iteration, 1 thread", lambda r: r["threads1"]["iteration_ms"], ".0f", None),
            ("/ SPLATT, 1 thread", lambda r: r["threads1"]["iteration_ms"] / r["splatt_ms"][0], ".2f", "<= 1.5"),
            ("x pyttb per iteration", lambda r: r["speedup_vs_pyttb_iteration"], ".1f",
             ">= 15" if t != "unif3d" else None),
            ("x pyttb MTTKRP", lambda r: r["speedup_vs_pyttb_mttkrp"], ".1f", ">= 20" if t != "unif3d" else None),
            ("CSF build s ('all')", lambda r: r["csf_build_s"], ".2f", None),
            ("build / 2-thread iteration", lambda r: r["csf_build_s"] * 1e3 / r["threads2"]["iteration_ms"], ".1f",
             "< 5"),
        ]
        for label, fn, fmt, floor in measures:
            vals = [fn(rows[n]) for n in names]
            lines.append(f"| {t} | {label} | " + " | ".join(format(v, fmt) for v in vals)
                         + f" | {format(statistics.median(vals), fmt)} | {floor or ''} |")
    lines += ["", "SPLATT reference figures (ms per iteration: 1 thread; 2 threads with BLAS held to 1 thread, its "
              "best) are from the issue; every run is a fresh process on the same shared 2-core VM."]
    write_text("sparse_runs.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
