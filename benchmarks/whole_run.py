"""Whole runs, as a user times them: a fresh Python process that imports, reads a .npy file, decomposes it with
each library's defaults and writes the result; tuckerkit's command line beside the scripts.

For HOOI (rank 10 per mode, a Tucker tensor plus 1 % noise) and CP-ALS (rank 10, a CP tensor plus 1 % noise)
on 200^3 float64 files (64 MB, read from the page cache):

* ``tuckerkit decompose X.npy --ranks 10,10,10`` (``--method cp --rank 10``), the command line;
* ``tk.hooi(X, 10)`` / ``tk.cp_als(X, 10)``, TensorLy ``tucker`` / ``parafac`` and pyttb ``tucker_als`` /
  ``cp_als`` (``printitn=0``), each a script: ``import``, ``np.load``, the call, ``np.savez`` of the result;
* ``import`` alone of each library (with numpy), the floor of every run of it.

The clock is the parent's, around the whole process (start to exit); each script also reports its own import,
read, call and write times. The fit of each script's result is computed here afterwards from the file it
wrote, the same way for all (the command line's is its own summary's). Peak memory: the child's own peak
resident set (``VmHWM``; the command line's from one more run through its entry point). Medians of
``--repeat`` rounds after one warm-up round (it fills numba's and Python's caches as any user's first run does
once), the commands taken in a rotating order. Children run with OpenBLAS's defaults (the OpenBLAS variables
of this machine's environment removed) and with Python's bytecode cache on (an installed package has it).

Run:  python benchmarks/whole_run.py [--repeat 5] [--quick] [--name whole_run]
Writes benchmarks/results/whole_run.{json,md,png} (``--name``: that file stem instead).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _quiet_blas  # noqa: F401  (this process's own OpenBLAS; the children get the defaults)
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, grouped_bars, positive_int, result_stem, write_json, write_text
from defaults import cp_tensor, fit_cp, fit_tucker, tucker_tensor

_DROP = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_THREAD_TIMEOUT", "PYTHONDONTWRITEBYTECODE")

_SCRIPT = """
import time
t0 = time.perf_counter()
import json, numpy as np
{imports}
t1 = time.perf_counter()
X = np.load({path!r})
t2 = time.perf_counter()
{call}
t3 = time.perf_counter()
np.savez({out!r}, *arrays)
t4 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "read": t2 - t1, "call": t3 - t2, "write": t4 - t3, "peak_mb": {peak}}}))
"""

#: the process's own peak resident set, MB (VmHWM: this process's memory only; ``wait4``'s maximum would also
#: count the parent's pages at the fork)
_PEAK = "int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1024"

_CALLS = {
    "tucker": {
        "tuckerkit": ("import tuckerkit as tk",
                      "T = tk.hooi(X, 10); core, factors = T.core, T.factors; arrays = [core, *factors]"),
        "tensorly": ("from tensorly.decomposition import tucker",
                     "core, factors = tucker(X, rank=[10, 10, 10]); arrays = [core, *factors]"),
        "pyttb": ("import pyttb",
                  "np.random.seed(0)\nT = pyttb.tucker_als(pyttb.tensor(X, copy=False), 10, printitn=0)[0]\n"
                  "core, factors = T.core.data, T.factor_matrices; arrays = [core, *factors]"),
    },
    "cp": {
        "tuckerkit": ("import tuckerkit as tk",
                      "K = tk.cp_als(X, 10); weights, factors = K.weights, K.factors; arrays = [weights, *factors]"),
        "tensorly": ("from tensorly.decomposition import parafac",
                     "weights, factors = parafac(X, 10); arrays = [weights, *factors]"),
        "pyttb": ("import pyttb",
                  "np.random.seed(0)\nK = pyttb.cp_als(pyttb.tensor(X, copy=False), 10, printitn=0)[0]\n"
                  "weights, factors = K.weights, K.factor_matrices; arrays = [weights, *factors]"),
    },
}

_IMPORTS = {"tuckerkit": "import numpy, tuckerkit", "tensorly": "import numpy, tensorly.decomposition",
            "pyttb": "import numpy, pyttb"}

#: the command line run in-process by the console script's own entry point, its peak reported at exit
_CLI_PEAK = ("import atexit, json, sys\n"
             "atexit.register(lambda: print(json.dumps({{'peak_mb': {peak}}})))\n"
             "sys.argv = {argv!r}\n"
             "from tuckerkit.cli import main\n"
             "sys.exit(main())\n")


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _DROP}


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("tuckerkit")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tuckerkit.cli"]


def _timed(cmd: list[str]) -> dict:
    """Run ``cmd`` in a fresh process: its wall seconds, its peak RSS (MB) and its stdout's last JSON line."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env())
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {err.decode()[-800:]}")
    return {"wall": wall, "report": _report(out.decode())}


def _report(out: str) -> dict:
    rep: dict = {}
    for ln in out.splitlines():
        if ln.startswith("{"):
            rep.update(json.loads(ln))
    return rep


def commands(kind: str, path: Path, tmp: Path) -> dict[str, list[str]]:
    cmds: dict[str, list[str]] = {}
    cli = [*_cli(), "decompose", str(path), "--quiet", "--force", "--json", "-o", str(tmp / f"cli_{kind}.npz")]
    cli += ["--ranks", "10,10,10"] if kind == "tucker" else ["--method", "cp", "--rank", "10"]
    cmds["tuckerkit CLI"] = cli
    for lib, (imports, call) in _CALLS[kind].items():
        src = _SCRIPT.format(imports=imports, path=str(path), call=call, out=str(tmp / f"{lib}_{kind}.npz"),
                             peak=_PEAK)
        cmds[lib] = [sys.executable, "-c", src]
    return cmds


def run(repeat: int, n: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="tuckerkit-whole-run-"))
    try:
        files = {"tucker": tmp / "tucker.npy", "cp": tmp / "cp.npy"}
        np.save(files["tucker"], tucker_tensor((n,) * 3, (10,) * 3))
        np.save(files["cp"], cp_tensor((n,) * 3, 10))
        jobs = {(kind, name): cmd for kind in files for name, cmd in commands(kind, files[kind], tmp).items()}
        report = f"\nimport json\nprint(json.dumps({{'peak_mb': {_PEAK}}}))"
        jobs.update({("import", lib): [sys.executable, "-c", src + report] for lib, src in _IMPORTS.items()})
        keys = list(jobs)
        samples: dict[tuple[str, str], list[dict]] = {k: [] for k in keys}
        for rnd in range(repeat + 1):  # round 0: the warm-up
            order = keys[rnd % len(keys):] + keys[:rnd % len(keys)]
            for k in order:
                r = _timed(jobs[k])
                if rnd:
                    samples[k].append(r)
            print(f"round {rnd}/{repeat} done", flush=True)
        for kind in files:  # the command line's peak: one more run through its entry point, in-process
            argv = ["tuckerkit", *jobs[(kind, "tuckerkit CLI")][len(_cli()):]]
            rep = _timed([sys.executable, "-c", _CLI_PEAK.format(peak=_PEAK, argv=argv)])["report"]
            for r in samples[(kind, "tuckerkit CLI")]:
                r["report"]["peak_mb"] = rep["peak_mb"]
        rows = []
        for (kind, name), runs in samples.items():
            row = {"kind": kind, "command": name, "wall": statistics.median(r["wall"] for r in runs),
                   "walls": [r["wall"] for r in runs],
                   "peak_rss_mb": max(r["report"].get("peak_mb", float("nan")) for r in runs)}
            reps = [r["report"] for r in runs if r["report"]]
            if reps and "read" in reps[0]:
                for part in ("import", "read", "call", "write"):
                    row[part] = statistics.median(r[part] for r in reps)
                # the fit of the result it wrote, computed here (outside every clock), the same way for all
                X = np.load(files[kind])
                with np.load(tmp / f"{name}_{kind}.npz") as z:
                    arrays = [z[f"arr_{i}"] for i in range(len(z.files))]
                row["fit"] = (fit_tucker if kind == "tucker" else fit_cp)(X, arrays[0], arrays[1:])
            elif reps and "fit" in reps[0]:  # the command line's summary
                row["fit"] = reps[0]["fit"]
                row["call"] = statistics.median(r["seconds"] for r in reps)
            rows.append(row)
        return {"rows": rows, "shape": [n] * 3}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(res: dict, stem: str = "whole_run") -> str:
    rows = res["rows"]
    n = res["shape"][0]
    by = {(r["kind"], r["command"]): r for r in rows}
    lines = [f"# Whole runs: a fresh process reads a {n}^3 float64 .npy, decomposes it, writes the result", "",
             "Each library's defaults (rank 10); the clock around the whole process. Medians of the rounds after "
             "a warm-up round; `import` of the library alone for reference. Speed-up: the other's wall / "
             "tuckerkit's (the script's; the command line's in brackets).", ""]
    for kind, title in (("tucker", "HOOI / tucker / tucker_als"), ("cp", "CP-ALS / parafac / cp_als")):
        tk_s = by[(kind, "tuckerkit")]["wall"]
        cli_s = by[(kind, "tuckerkit CLI")]["wall"]
        lines += [f"## {title}", "",
                  "| run | wall s | speed-up | import s | read s | call s | write s | fit | peak RSS MB |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name in ("tuckerkit CLI", "tuckerkit", "tensorly", "pyttb"):
            r = by[(kind, name)]
            sp = "" if name.startswith("tuckerkit") else f"{r['wall'] / tk_s:.1f}x ({r['wall'] / cli_s:.1f}x)"

            def f(k, r=r):
                return f"{r[k]:.3f}" if k in r else "-"

            lines.append(f"| {name} | {r['wall']:.2f} | {sp} | {f('import')} | {f('read')} | {f('call')} | "
                         f"{f('write')} | {r.get('fit', float('nan')):.6f} | {r['peak_rss_mb']:.0f} |")
        lines.append("")
    lines += ["## `import` alone (with numpy)", "", "| library | wall s | peak RSS MB |", "|---|---|---|"]
    for lib in _IMPORTS:
        r = by[("import", lib)]
        lines.append(f"| {lib} | {r['wall']:.2f} | {r['peak_rss_mb']:.0f} |")
    lines += ["", "The command line's `call` is its own summary's `seconds` (the read and the decomposition). "
              "Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/whole_run.py`. "
              f"Machine and versions: {stem}.json."]
    return "\n".join(lines) + "\n"


def plot(res: dict, stem: str = "whole_run") -> None:
    by = {(r["kind"], r["command"]): r for r in res["rows"]}
    n = res["shape"][0]
    grouped_bars(f"{stem}.png", [f"HOOI {n}^3", f"CP-ALS {n}^3"],
                 {name: [by[(k, name)]["wall"] for k in ("tucker", "cp")]
                  for name in ("tuckerkit CLI", "tuckerkit", "tensorly", "pyttb")},
                 "seconds, whole process", "Whole runs: import, read, decompose, write (lower is better)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=positive_int, default=5)
    ap.add_argument("--quick", action="store_true", help="60^3, one round (a smoke run)")
    ap.add_argument("--name", default="whole_run", type=result_stem,
                    help="results file stem under benchmarks/results (default: whole_run)")
    args = ap.parse_args(argv)
    n, repeat = (60, 1) if args.quick else (200, args.repeat)
    res = run(repeat, n)
    env = environment()
    env["children"] = {"dropped": list(_DROP)}
    write_json(f"{args.name}.json", {"benchmark": "whole_run", "environment": env, **res})
    write_text(f"{args.name}.md", markdown(res, args.name))
    plot(res, args.name)
    print(markdown(res, args.name))


if __name__ == "__main__":
    main()
