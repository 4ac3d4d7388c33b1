"""The machine's roofline (streaming bandwidth, GEMM peak) and the cost model built on it.

The planner estimates each candidate for a contraction as ``max(bytes / bandwidth, flops / rate)``, where the
rate is the GEMM peak times the candidate's efficiency: BLAS's from the extents of its GEMM (skinny extents
run far from peak), a compiled small-rank kernel's from a constant measured against BLAS in the same process
(``benchmarks/roofline.py``, ``benchmarks/ttm.py``). Both numbers are per core: the choice must not depend
on the worker count (the same call gives the same bits with one worker or several).

Calibration runs once per machine, in well under a second (one streaming reduce of 64 MB, one 384^3 GEMM
per dtype, one thread each), and is cached as JSON under the user's cache directory
(``$XDG_CACHE_HOME/tuckerkit`` or ``~/.cache/tuckerkit``; where that cannot be written, ``<tmp>/tuckerkit-<uid>``).
``TUCKERKIT_ROOFLINE="bw=31e9,peak=1e11"`` (bytes/s
and float64 flop/s; ``peak32=`` for float32, default twice ``peak``) overrides it and skips the calibration.
The cached numbers are read back as they are, so on one machine the same call picks the same kernel, and
therefore gives the same bits, on every run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ENV = "TUCKERKIT_ROOFLINE"
_FILE = "roofline.json"
_VERSION = 2


@dataclass(frozen=True)
class Roofline:
    """One core's streaming read bandwidth and GEMM peaks, and where they came from.

    Attributes
    ----------
    bandwidth : float
        Bytes per second of one streaming read on one core.
    peak64, peak32 : float
        Flop/s of a large float64 / float32 GEMM on one core.
    source : str
        ``"calibrated"``, ``"cache"`` or ``"env"``.

    Examples
    --------
    >>> from tuckerkit.engine._roofline import Roofline
    >>> r = Roofline(bandwidth=20e9, peak64=100e9, peak32=200e9, source="env")
    >>> r.bound(8_000_000 * 8, 160_000_000, "float64")  # 64 MB read vs 160 MFlop: bandwidth-bound
    0.0032
    """

    bandwidth: float
    peak64: float
    peak32: float
    source: str = "calibrated"

    def peak(self, dtype: str) -> float:
        """The GEMM peak for ``dtype`` (float32 and complex64 use ``peak32``)."""
        return self.peak32 if dtype in ("float32", "complex64") else self.peak64

    def bound(self, nbytes: float, flops: float, dtype: str) -> float:
        """Seconds of the roofline bound ``max(bytes / bandwidth, flops / peak)``."""
        return max(nbytes / self.bandwidth, flops / self.peak(dtype))

    def estimate(self, nbytes: float, flops: float, dtype: str, efficiency: float) -> float:
        """Seconds of a kernel running at ``efficiency`` times the peak, bounded by the bandwidth."""
        return max(nbytes / self.bandwidth, flops / (self.peak(dtype) * max(efficiency, 1e-6)))


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tuckerkit"


def _fallback_dir() -> Path | None:
    """Where the calibration is kept when the user's cache folder cannot be written (a read-only home, no home):
    a folder of the user's own under the temporary directory, so that the processes of one machine share one
    calibration (the kernels it chooses, and so the bits) rather than each measuring its own; None where that
    folder is not the user's alone (another user could plant a calibration that steers the kernels)."""
    from tuckerkit._numba_cache import private_tmp_folder

    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = private_tmp_folder(f"tuckerkit-{uid}")
    return Path(folder) if folder is not None else None


def _entry_roofline(entry: Any) -> Roofline | None:
    """A cache entry's roofline, or None when it is not one: every number finite and positive (a 0 made every
    planning divide by zero, in every process; NaN turned every candidate into the compiled kernel)."""
    try:
        vals = [float(entry[k]) for k in ("bandwidth", "peak64", "peak32")]
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(v) and v > 0 for v in vals):
        return None
    return Roofline(vals[0], vals[1], vals[2], "cache")


def _read_entry(path: Path, key: str) -> tuple[Roofline | None, dict]:
    """(the roofline under ``key`` in the cache file ``path``, or None; the file's whole contents, {} when it is
    missing or corrupt)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, {}
    if not isinstance(data, dict):
        return None, {}
    return _entry_roofline(data.get(key)), data


def _store(path: Path, key: str, fresh: Roofline) -> Roofline:
    """Record ``fresh`` under ``key`` in ``path``, unless another process recorded one first (read again under
    an exclusive lock of ``path``'s ``.lock`` file): then that one is returned. Processes started together on a
    fresh machine each measured their own and chose kernels by it: the same call gave other bits in one of
    three. Raises OSError where the folder cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        try:
            import fcntl

            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover (no fcntl: Windows; first writer wins by the rename alone)
            pass
        found, data = _read_entry(path, key)
        if found is not None:
            return found
        data[key] = {k: v for k, v in asdict(fresh).items() if k != "source"}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
        return fresh


def _machine_key() -> str:
    """The cache entry's key: host name, architecture, CPU model (:func:`cpu_model`), CPU count, cache version."""
    return f"{platform.node()}|{platform.machine()}|{cpu_model()}|{os.cpu_count()}|v{_VERSION}"


#: the fields of ``/proc/cpuinfo`` that name the CPU model: x86 ("model name"), 32-bit ARM ("Processor"; arm64
#: kernels give none), MIPS ("cpu model"), POWER ("cpu")
_MODEL_FIELDS = (b"model name", b"Processor", b"cpu model", b"cpu")


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name as the first processor entry of ``path`` (Linux's ``/proc/cpuinfo``) gives it, or
    "" where there is none. Read without starting a process: ``platform.processor()``, which the key used
    before, runs ``uname -p`` on Linux and macOS (on the project's 2-core VM 9.5-11 ms in a bare interpreter,
    2-6 ms inside a fresh process's first ``tk.hooi``), for a value ("" or "x86_64" on Linux) that told machines
    apart no better than the architecture. A changed key means one calibration (about 0.2 s) on first use.

    Examples
    --------
    >>> from tuckerkit.engine._roofline import cpu_model
    >>> isinstance(cpu_model(), str), cpu_model("/nonexistent/cpuinfo")
    (True, '')
    """
    try:
        with open(path, "rb") as f:
            head = f.read(16384)  # the first processor's entry (a few hundred bytes, a few kB with many flags)
    except OSError:
        return ""
    for line in head.split(b"\n"):
        if not line.strip():
            break  # the end of the first processor's entry
        key, sep, value = line.partition(b":")
        if sep and key.strip() in _MODEL_FIELDS and value.strip():
            return value.strip().decode("utf-8", "replace")
    return ""


def parse_override(text: str) -> Roofline:
    """The roofline an environment override describes: ``"bw=31e9,peak=1e11[,peak32=2e11]"``.

    Examples
    --------
    >>> from tuckerkit.engine._roofline import parse_override
    >>> parse_override("bw=31e9,peak=1e11")
    Roofline(bandwidth=31000000000.0, peak64=100000000000.0, peak32=200000000000.0, source='env')
    >>> parse_override("bw=31e9")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: TUCKERKIT_ROOFLINE='bw=31e9' is invalid; expected 'bw=<bytes/s>,peak=<flop/s>' with positive ...
    """
    vals: dict[str, float] = {}
    try:
        for part in text.split(","):
            key, _, value = part.partition("=")
            vals[key.strip()] = float(value)
    except ValueError:
        vals = {}
    ok = ({"bw", "peak"} <= set(vals) <= {"bw", "peak", "peak32"}
          and all(math.isfinite(v) and v > 0 for v in vals.values()))
    if not ok:
        raise ValueError(f"{ENV}={text!r} is invalid; expected 'bw=<bytes/s>,peak=<flop/s>' with positive "
                         "numbers (optional: peak32=<flop/s>)")
    return Roofline(vals["bw"], vals["peak"], vals.get("peak32", 2 * vals["peak"]), "env")


def _best_of(fn, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate() -> Roofline:
    """Measure one core's streaming read and GEMM peaks now (BLAS held to one thread); about 0.2 s. The read is
    the faster of numpy's ``add.reduce`` and a compiled loop over the same 64 MB (the norm kernel,
    :func:`~tuckerkit.engine._norm_kernels.piece_sums`): on Zen 5 numpy's pairwise sum runs at 13-19 GB/s on
    one core where the compiled loop reads 36-42 GB/s, so the reduce alone halved the bandwidth the planner
    weighs re-reads with (cache version 2: calibrations made by the reduce alone are made again).

    Examples
    --------
    >>> from tuckerkit.engine._roofline import calibrate
    >>> r = calibrate()
    >>> r.bandwidth > 1e8 and r.peak64 > 1e8 and r.source
    'calibrated'
    """
    from tuckerkit.engine._norm_kernels import piece_sums
    from tuckerkit.engine._policy import blas_pinned

    x = np.ones(8 * 1024 * 1024)  # 64 MB: larger than the last-level caches it may share
    out = np.empty(1)
    bw = x.nbytes / min(_best_of(lambda: np.add.reduce(x), 5),
                        _best_of(lambda: piece_sums(x, x.size, out, 0, 1), 5))
    n = 384
    peaks = {}
    with blas_pinned():
        for dt in (np.float64, np.float32):
            a = np.full((n, n), 0.5, dtype=dt)
            c = np.empty_like(a)
            peaks[dt] = 2.0 * n**3 / _best_of(lambda a=a, c=c: np.matmul(a, a, out=c), 4)
    return Roofline(bw, peaks[np.float64], peaks[np.float32], "calibrated")


_LOCK = threading.Lock()
_CURRENT: dict[str, Roofline] = {}


def machine_roofline() -> Roofline:
    """The roofline the planner uses: the environment override, else the cache, else a calibration (then
    cached). Read once per process.

    Examples
    --------
    >>> from tuckerkit.engine._roofline import machine_roofline
    >>> machine_roofline().source in ("env", "cache", "calibrated")
    True
    """
    text = os.environ.get(ENV)
    if text:
        return parse_override(text)
    with _LOCK:
        if "r" in _CURRENT:
            return _CURRENT["r"]
        key = _machine_key()
        found = None
        fallback = _fallback_dir()
        paths = [_cache_dir() / _FILE] + ([fallback / _FILE] if fallback is not None else [])
        for path in paths:
            found = _read_entry(path, key)[0]
            if found is not None:
                break
        if found is None:  # (none, or one that is not finite and positive: measured and written again)
            fresh = calibrate()
            found = fresh
            for path in paths:  # the user's cache folder, else the fallback under the temporary directory
                try:
                    found = _store(path, key, fresh)
                    break
                except OSError:  # (read-only: the next folder; neither: once per process)
                    continue
        _CURRENT["r"] = found
        return found
