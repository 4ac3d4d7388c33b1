"""Shared helpers for the benchmarks: interleaved timing, environment record, result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def positive_int(text: str) -> int:
    """An argparse type: a positive integer (else one line naming the option, exit 2)."""
    import argparse

    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; received {text!r}")
    return int(text)


@contextlib.contextmanager
def sweeps_flag(name: str, value):
    """``tuckerkit.engine._sweeps.<name>`` set to ``value`` within the block (an A/B of a sweep rule in one run)."""
    from tuckerkit.engine import _sweeps

    before = getattr(_sweeps, name)
    setattr(_sweeps, name, value)
    try:
        yield
    finally:
        setattr(_sweeps, name, before)


def _cpu_model() -> str | None:
    """The processor: its model name, family / model numbers and widest vector ISA, from ``/proc/cpuinfo`` on
    Linux (``platform.processor()`` is empty there; a virtual machine's model name can be as bare as "AMD
    EPYC", and the family tells the generation: AMD 25 is Zen 3 / 4, 26 Zen 5)."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model", "flags") and key not in info:
                    info[key] = value.strip()
                if not line.strip() and info:
                    break
    except OSError:
        pass
    if not info:
        return platform.processor() or None
    flags = set(info.get("flags", "").split())
    isa = next((f for f in ("avx512f", "avx2", "neon", "asimd") if f in flags), "")
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}"
            f"{', ' + isa if isa else ''})")


def _commit() -> str | None:
    """The repository's commit the run measured (with ``+dirty`` when files differ from it), if git can tell."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict:
    """Machine, library versions and the BLAS kernel that ran (threadpoolctl)."""
    import numpy as np

    env = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_model": _cpu_model(),
        "commit": _commit(),
        "cpu_count": os.cpu_count(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "OPENBLAS_THREAD_TIMEOUT": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        from threadpoolctl import threadpool_info

        env["blas"] = [
            {k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "threading_layer")}
            for d in threadpool_info()
        ]
    except ImportError:  # pragma: no cover
        env["blas"] = "threadpoolctl not installed"
    for mod in ("tensorly", "pyttb", "scipy"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:
            env[mod] = None
    return env


def interleaved(fns: dict[str, Callable[[], object]], repeat: int, min_time: float = 0.0) -> dict[str, float]:
    """Median seconds of each callable, run round-robin ``repeat`` times after one warm-up each.

    After each call tuckerkit's GEMM helpers are sent to sleep (:func:`_park`), so that no callable runs beside
    a thread the one before left spinning (as ``_quiet_blas`` does for OpenBLAS's): each of tuckerkit's calls
    then starts with its helpers asleep, as a first call does."""
    return {k: statistics.median(v) for k, v in interleaved_samples(fns, repeat, min_time).items()}


def interleaved_samples(fns: dict[str, Callable[[], object]], repeat: int, min_time: float = 0.0,
                        warm: bool = True) -> dict[str, list[float]]:
    """The seconds of every timed call of :func:`interleaved` (at least ``repeat`` rounds, and at least
    ``min_time`` of them), before the medians; ``warm=False``: no warm-up call (the callables ran before)."""
    for fn in fns.values() if warm else ():
        fn()
        _park()
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    rounds = 0
    start = time.perf_counter()
    # each round in its own order, a seeded shuffle: a rotation of one fixed order kept every callable after the
    # same one (in benchmarks/small.py tuckerkit always after pyttb, whose threaded BLAS and allocations left the
    # caches cold: 1.3-1.4x the time of the same call after tuckerkit's own F-ordered run)
    shuffle = random.Random(len(names))
    while rounds < repeat or ((time.perf_counter() - start) < min_time and rounds < 50 * repeat):
        order = names[:]
        shuffle.shuffle(order)
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
            _park()
        rounds += 1
    return times


def _park() -> None:
    """Send tuckerkit's spinning GEMM helpers to sleep, when they exist (outside any timed region)."""
    handoff = sys.modules.get("tuckerkit.engine._handoff")
    if handoff is not None:
        handoff.park()


def peak_extra(fn: Callable[[], object]) -> int:
    """Peak bytes that ``fn()`` allocates beyond what was live when it started (tracemalloc; numpy's buffers
    included), from one untimed call. tuckerkit's block pool is emptied first (its idle blocks, made before the
    trace, would serve the call without a traced allocation); the blocks the call makes are counted, also
    those that go idle in the pool during it."""
    import tracemalloc

    engine = sys.modules.get("tuckerkit.engine")
    if engine is not None:
        engine.release_memory()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    tmp.replace(path)
    return path


def write_text(name: str, text: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def geomean(xs) -> float:
    xs = list(xs)
    return float(statistics.geometric_mean(xs)) if xs else float("nan")


def per_mode_plot(name: str, rows: list[dict], key: str, ylabel: str, title: str, lines: tuple = (1.0,),
                  log: bool = False) -> None:
    """One panel per tensor shape: ``row[key]`` against the mode, a line per (dtype, rank), horizontal marks at
    ``lines`` (the first black, the others red dashed); written to ``results/name``; nothing without
    matplotlib."""
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - the bench extra installs it
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({tuple(r["shape"]) for r in rows}, key=lambda s: (len(s), s))
    fig, axes = plt.subplots(1, len(shapes), figsize=(4 * len(shapes), 3.4), squeeze=False)
    for ax, shape in zip(axes[0], shapes, strict=True):
        for dt, mark in (("float64", "o-"), ("float32", "s--")):
            sel = [r for r in rows if tuple(r["shape"]) == shape and r["dtype"] == dt]
            for R in sorted({r["rank"] for r in sel}):
                rr = [r for r in sel if r["rank"] == R]
                ax.plot([r["mode"] for r in rr], [r[key] for r in rr], mark, label=f"{dt} R={R}")
        for i, y in enumerate(lines):
            ax.axhline(y, color="k" if i == 0 else "r", lw=0.8, ls="-" if i == 0 else "--")
        if log:
            ax.set_yscale("log")
        ax.set_title("x".join(map(str, shape)))
        ax.set_xlabel("mode")
        ax.set_ylabel(ylabel)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(RESULTS / name, dpi=110)
    plt.close(fig)


def case_arguments(doc: str, repeat: int, quick: str, argv=None):
    """A per-case benchmark's command line (``--repeat``, ``--quick``): the parsed arguments and the repeats."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--repeat", type=positive_int, default=repeat)
    ap.add_argument("--quick", action="store_true", help=quick)
    args = ap.parse_args(argv)
    return args, 3 if args.quick else args.repeat


def case_operands(cases):
    """``(spec, sizes, dtype, A, B, shape)`` for each case ``(spec, sizes, dtype)``: random operands laid out as
    the spec names their modes (one seeded generator for the run), and A's shape as ``"axbxc"``."""
    import numpy as np

    rng = np.random.default_rng(0)
    for spec, sizes, dt in cases:
        a, b = spec.split("->")[0].split(",")
        A = rng.standard_normal([sizes[c] for c in a]).astype(dt)
        B = rng.standard_normal([sizes[c] for c in b]).astype(dt)
        yield spec, sizes, dt, A, B, "x".join(str(sizes[c]) for c in a)


def rel_error(spec: str, A, B, got) -> float:
    """The largest difference of ``got`` from ``einsum(spec)`` in float64, over the reference's largest entry."""
    import numpy as np

    ref = np.einsum(spec, A.astype(np.float64), B.astype(np.float64))
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-300))


def case_table(stem: str, title: str, intro: str, header: list[str], cells: list[list[str]]) -> str:
    """A per-case benchmark's markdown: ``# title``, ``intro``, the table (a row of ``cells`` per case) and how to
    reproduce it (``benchmarks/<stem>.py``)."""
    lines = [f"# {title}", "", intro, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    lines += ["", f"Reproduce: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/{stem}.py`. Machine "
              f"and versions: {stem}.json.", ""]
    return "\n".join(lines)


def write_cases(stem: str, rows: list[dict], repeat: int, md: str, keys: tuple[str, ...], title: str) -> None:
    """A per-case benchmark's results: ``stem``.json (the rows, the environment, the repeats), ``stem``.md (``md``,
    also printed) and ``stem``.png (each row's ``t_<key>`` in ms, a bar per key, labelled by spec, A's shape and
    dtype)."""
    write_json(f"{stem}.json", {"benchmark": stem, "environment": environment(), "repeat": repeat, "rows": rows})
    write_text(f"{stem}.md", md)
    labels = [f"{r['spec']} {r['shape_a']} {r['dtype'][-2:]}" for r in rows]
    grouped_bars(f"{stem}.png", labels, {k: [r[f"t_{k}"] * 1e3 for r in rows] for k in keys},
                 "ms (lower is better)", title, log=True)
    print(md)


def grouped_bars(name: str, groups: list[str], series: dict[str, list[float]], ylabel: str, title: str,
                 log: bool = False) -> None:
    """A bar chart of ``series`` (label -> one value per group) side by side in each group, written to
    ``results/name``; nothing when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4))
    x = np.arange(len(groups))
    w = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * w, values, w, label=label, color=f"C{i}")
    ax.set_xticks(x, groups)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / name, dpi=110)
    plt.close(fig)


def result_stem(text: str) -> str:
    """``--name``: a file stem (letters, digits, ``_`` and ``-``), written under benchmarks/results."""
    import argparse

    if not text or not all(c.isalnum() or c in "_-" for c in text):
        raise argparse.ArgumentTypeError(f"expected a file stem of letters, digits, _ and -; received {text!r}")
    return text
