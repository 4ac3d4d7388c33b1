"""Typer application. Commands parse, call the public API and format; nothing else.

Exit codes: 0 success, 1 bad input or failed run (one line on stderr; ``--debug`` shows the traceback),
2 usage errors (typer), 130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import typer
from typer._click.exceptions import BadParameter, UsageError
from typer.core import TyperCommand, TyperGroup

from tuckerkit._version import __version__


class _Group(TyperGroup):
    """typer's group, its options (``--version``, ``--help``) converted without pydantic (``cli/_params.py``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from tuckerkit.cli._params import install

        install(self.get_params(ctx))
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:  # an unknown option of the group: one line
            raise _one_line(exc, ctx, "tuckerkit --help") from None

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:  # an unknown command: one line
            raise _one_line(exc, ctx, "tuckerkit --help") from None


app = typer.Typer(
    cls=_Group,
    name="tuckerkit",
    help="Tucker and CP tensor decompositions on a transpose-free contraction engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


class _BadValue(UsageError):
    """A malformed option value: a usage error (exit code 2) shown as one line, ``error: --max-iter must be an
    integer; received '2.5'``, without the usage block."""

    def show(self, file: Any = None) -> None:
        typer.echo(f"error: {self.format_message()}", err=True)


def _one_line(exc: UsageError, ctx: Any, see: str | None = None) -> UsageError:
    """click's usage error (``Error: No such option: --bogus`` under a usage block) as one line pointing at
    ``see`` (the command's help); a command given no arguments at all keeps click's usage block (``tuckerkit
    decompose`` alone: how to call it), and bare ``tuckerkit`` its help."""
    if (isinstance(exc, _BadValue) or type(exc).__name__ == "NoArgsIsHelpError"
            or not getattr(ctx, "_tk_args", True)):
        return exc
    text = exc.format_message().rstrip(".")
    see = see or f"tuckerkit {ctx.info_name} --help"
    return _BadValue(f"{text[:1].lower()}{text[1:]} (see '{see}')", ctx)


class _Command(TyperCommand):
    """typer's command with the conventional usage line, ``Usage: tuckerkit decompose [OPTIONS] INPUT``
    (typer writes a required argument as ``{input}``), and its plain option values converted without
    pydantic (:mod:`tuckerkit.cli._params`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from tuckerkit.cli._params import install

        install(self.get_params(ctx))  # ints, floats, strings and paths converted without importing pydantic
        ctx._tk_args = bool(args)  # (no arguments at all: click's usage block, _one_line)
        try:
            return super().parse_args(ctx, args)
        except BadParameter as exc:  # a malformed number: one line naming the option and the text received
            param: Any = exc.param
            annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
            kind = "an integer" if annotation is int else "a number" if annotation is float else None
            if param is None or kind is None or not hasattr(exc, "received"):
                raise _one_line(exc, ctx) from None
            opts = [o for o in getattr(param, "opts", ()) if o.startswith("--")]
            name = max(opts, key=len) if opts else (param.name or "").upper()
            raise _BadValue(f"{name} must be {kind}; received {exc.received!r}", ctx) from None
        except UsageError as exc:  # click's unknown option, missing argument or value: one line, not its block
            raise _one_line(exc, ctx) from None

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = param.metavar or (param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
        return pieces


def _human_bytes(n: float) -> str:
    """``1280000`` -> ``"1.28 MB"`` (decimal units, as ``--memory-limit 4GB`` reads them)."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"  # pragma: no cover


def _human_seconds(t: float) -> str:
    """``75.2`` -> ``"1 min 15 s"``."""
    t = float(t)
    if not math.isfinite(t):
        return "?"
    t = max(t, 0.0)
    if t < 10:
        return f"{t:.1f} s"
    if t < 60:
        return f"{t:.0f} s"
    m, sec = divmod(round(t), 60)
    if m < 60:
        return f"{m} min {sec:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tuckerkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Tucker and CP tensor decompositions.

    Example: tuckerkit decompose data.npy --ranks 10,10,10
    """


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command is so that it unwinds as after Ctrl-C (temporaries removed)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals():
    """While a command runs, SIGTERM and SIGHUP stop it as Ctrl-C does: the exception unwinds the write in
    progress, which removes its temporary file and leaves an existing output unchanged. The handlers are the
    command line's own (the library installs none), a signal the caller ignores (``nohup``) stays ignored, and
    the previous handlers are restored on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated(signum)

    saved = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's ignored SIGHUP stays so
            saved[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


def _run(debug: bool, fn, *args, **kwargs):
    """Run a command body: one-line errors (exit 1), Ctrl-C (exit 130), SIGTERM/SIGHUP (exit 128 + the signal
    number), tracebacks only with --debug."""
    try:
        with _stop_on_signals():
            return fn(*args, **kwargs)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        typer.echo(f"{how}; no output was written (an existing output is unchanged)", err=True)
        raise typer.Exit(128 + signum) from None
    except typer.Exit:
        raise
    except BrokenPipeError:  # (the reader went away, `tuckerkit info x.npy | head -1`: nothing more to say)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(141) from None
    except (CLIError, ValueError, TypeError, OSError, MemoryError, ImportError) as exc:
        if debug:
            traceback.print_exc()
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = getattr(exc, "reason", None)
        if reason == "exists":  # the library names its keyword; here the option
            msg = msg.replace("pass force=True to overwrite it", "pass --force to overwrite it")
        elif reason == "not-regular":
            msg = "--" + msg.replace("force=True", "--force")
        elif reason == "memory-limit":  # the library names its keyword; here the option
            msg = msg.replace("memory_limit=", "--memory-limit=").replace("raise memory_limit", "raise --memory-limit")
        # the library's keywords named as the options that set them
        msg = re.sub(r"^random_state=", "--seed ", msg)
        msg = re.sub(r"^rank=", "--rank ", msg).replace("device='cpu'", "--device cpu")
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(1) from None


@contextlib.contextmanager
def _input_named(path: Path):
    """The library's refusals of its argument ``X`` (``X contains 1 NaN or infinite value(s); ...``, ``X has
    negative entries; ...``, ``X must have at least 1 dimension(s); ...``), named as the input file it was read
    from (``'x.npy' contains ...``)."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        if msg.startswith("X ") and not isinstance(exc, CLIError):
            raise CLIError(f"{str(path)!r} {msg[2:]}") from None
        raise


def _parse_ints(text: str, name: str) -> list[int]:
    try:
        vals = [int(t) for t in text.split(",")]
    except ValueError:
        raise CLIError(f"{name} must be comma-separated integers such as 10,10,10; received {text!r}") from None
    if name == "--shape" and min(vals) < 1:  # (-1 read as "the shape allows at most -1")
        raise CLIError(f"--shape sizes must be >= 1; received {text!r}")
    return vals


def _check_device(device: str) -> str | None:
    """None for the CPU, else the device string after checking that cupy and the GPU are there."""
    from tuckerkit.backend import get_cupy, parse_device

    try:
        dev = parse_device(device, "--device")
    except ValueError:
        raise CLIError(f"--device {device!r} is not valid; expected cpu, cuda or cuda:N") from None
    if not dev.is_gpu:
        return None
    try:
        get_cupy(dev, "--device", label=device)
    except RuntimeError as exc:
        raise CLIError(str(exc)) from None
    return device


def _ratio_text(r: float) -> str:
    """A compression ratio to one decimal, or to three digits below 0.1 (a result larger than its sparse input
    had printed 0.0x)."""
    return f"{r:.1f}" if r >= 0.1 else f"{r:.3g}"


def _default_output(inp: Path, method: str) -> Path:
    """``x.npy`` -> ``x.tucker.npz`` / ``x.cp.npz``; any other format keeps its extension in the name
    (``x.mat`` -> ``x.mat.tucker.npz``), so that ``x.npy`` and ``x.mat`` beside it never share a result."""
    if not inp.name:  # ('.' or '': the input's own one-line error, not pathlib's "has an empty name")
        from tuckerkit.io._load import _check_path

        _check_path(inp)
    suffix = ".cp.npz" if method in ("cp", "cp-apr") else ".tucker.npz"
    stem = inp.name[: -len(".npy")] if inp.name.lower().endswith(".npy") else inp.name
    return inp.with_name(stem + suffix)


class _Progress:
    """A rich progress line on stderr, shown only for runs longer than about a second on a terminal.

    It shows the iteration, the fit and its change, the time so far and an estimate of the time left: the
    mean time per iteration so far times the iterations left to ``--max-iter`` (an upper bound: the run stops
    earlier when it converges, which is why it reads "at most").
    """

    def __init__(self, enabled: bool, total: int, *, console: Any = None, after: float = 1.0):
        self.enabled = enabled
        self.total = total
        self.console = console
        self.after = after
        self.start = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    @staticmethod
    def remaining(elapsed: float, done: int, total: int) -> float:
        """Seconds left if every remaining iteration takes the mean time of those done."""
        return elapsed / done * max(total - done, 0) if done > 0 else float("nan")

    def __call__(self, state) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.perf_counter() - self.start < self.after:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self.bar = Progress(
                TextColumn("iteration {task.completed}/{task.total}"),
                BarColumn(),
                TextColumn("fit {task.fields[fit]:.6f}  change {task.fields[change]:.2e}"),
                TextColumn("{task.fields[elapsed]}, at most {task.fields[left]} left"),
                console=self.console if self.console is not None else Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("decompose", total=self.total, fit=0.0, change=0.0, elapsed="",
                                          left="")
        change = state.fit_change if math.isfinite(state.fit_change) else 0.0
        elapsed = time.perf_counter() - self.start
        self.bar.update(self.task, completed=state.iteration, fit=state.fit, change=change,
                        elapsed=_human_seconds(elapsed),
                        left=_human_seconds(self.remaining(elapsed, state.iteration, self.total)))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


_INPUT_HELP = "Tensor file: .npy, .npz, .mat, .tns, .h5/.hdf5."


@app.command("decompose", cls=_Command)
def decompose_cmd(
    input: Path = typer.Argument(..., metavar="INPUT", help=_INPUT_HELP, show_default=False),
    ranks: str = typer.Option(None, "--ranks", metavar="R,R,R", help="Tucker ranks, one per mode, e.g. 10,10,10."),
    max_error: float = typer.Option(
        None, "--max-error", metavar="E",
        help="Choose the Tucker ranks: the smallest with relative error <= E, in (0, 1), e.g. 0.01."),
    method: str = typer.Option("hooi", "--method", metavar="hooi|hosvd|cp|cp-apr",
                               help="The decomposition (cp-apr: Poisson CP of counts)."),
    rank: int = typer.Option(None, "--rank", metavar="R", help="CP rank (with --method cp)."),
    stop_tol: float = typer.Option(
        None, "--stop-tol", metavar="T",
        help="Convergence tolerance of hooi and cp: stop when the fit changes by less than T "
             "(default: hooi 1e-8, cp 1e-5; Python's tol=); 0 runs --max-iter iterations."),
    max_iter: int = typer.Option(None, "--max-iter", metavar="N",
                                 help="Iteration limit (default: hooi 100, cp 200)."),
    iterations: int = typer.Option(None, "--iterations", metavar="N",
                                   help="Run exactly N iterations of hooi or cp: no convergence test, no warning."),
    device: str = typer.Option("cpu", "--device", metavar="cpu|cuda|cuda:N",
                               help="Where to compute (cuda needs tuckerkit[gpu-cuda13] or [gpu-cuda12])."),
    dtype: str = typer.Option(None, "--dtype", metavar="float32|float64",
                              help="Compute in this precision (default: keep the file's)."),
    seed: int = typer.Option(None, "--seed", metavar="S",
                             help="Random seed of the random starts (cp-apr, --nonnegative, and cp on a sparse "
                                  ".tns or .npz; cp on a dense tensor starts from the SVD and draws only the columns "
                                  "a rank above a mode's size adds)."),
    output: Path = typer.Option(
        None, "--output", "-o", metavar="OUT.npz",
        help="Result file. Default: the input's name with .tucker.npz (hooi, hosvd) or .cp.npz (cp): "
             "faces.npy -> faces.tucker.npz; other formats keep their extension: faces.mat -> "
             "faces.mat.tucker.npz."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no convergence warning."),
    key: str = typer.Option(None, "--key", metavar="NAME", help="Array name in .npz/.mat/.h5 files holding several."),
    shape: str = typer.Option(None, "--shape", metavar="I,J,K", help="Shape of a .tns tensor, e.g. 100,200,300."),
    csf: str = typer.Option("auto", "--csf", metavar="auto|all|two|one", help="Sparse (.tns) kernel plan."),
    memory_limit: str = typer.Option(None, "--memory-limit", metavar="SIZE",
                                     help="Read a larger tensor in slabs within this memory, e.g. 4GB."),
    scheduler: str = typer.Option(None, "--scheduler", metavar="local|ADDRESS",
                                  help="Run on Dask: 'local' (a LocalCluster) or a scheduler address, "
                                       "e.g. tcp://host:8786 (.npy input)."),
    tol: float = typer.Option(None, "--tol", metavar="E",
                              help="Deprecated name of --max-error (removed in tuckerkit 0.3)."),
    nonnegative: bool = typer.Option(False, "--nonnegative", help="Non-negative factors (hooi, cp)."),
    mask: Path = typer.Option(None, "--mask", metavar="MASK.npy",
                              help="Missing data: a boolean .npy of the input's shape, True = observed (hooi, cp)."),
    allow_external: bool = typer.Option(
        False, "--allow-external",
        help="Read HDF5 datasets whose data lives in other files (external storage, virtual datasets); refused "
             "by default, since a crafted .h5 could read any local file."),
    linesearch: bool = typer.Option(
        True, "--linesearch/--no-linesearch",
        help="CP-ALS line search (on by default); --no-linesearch runs plain ALS, iteration for iteration the "
             "algorithm of SPLATT and pyttb."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Decompose a tensor file and write the result (.npz).

    Example: tuckerkit decompose data.npy --ranks 10,10,10 --output data.tucker.npz
    """
    _run(debug, _decompose, input, ranks, max_error, method, rank, device, dtype, max_iter, seed, output, force,
         json_out, quiet, key, shape, csf, memory_limit, scheduler, stop_tol=stop_tol, iterations=iterations,
         tol=tol, nonnegative=nonnegative, mask=mask, allow_external=allow_external, linesearch=linesearch)


def _sparse_input(path: Path) -> bool:
    """Whether ``path`` holds a sparse tensor: a ``.tns`` file, or an ``.npz`` archive written by
    ``COOTensor.save_npz`` (its member names read, nothing else)."""
    ext = path.suffix.lower()
    if ext == ".tns":
        return True
    if ext != ".npz":
        return False
    import zipfile

    from tuckerkit.io._tns import is_sparse_npz

    try:
        with zipfile.ZipFile(path) as z:
            return is_sparse_npz([n[:-4] if n.endswith(".npy") else n for n in z.namelist()])
    except (OSError, zipfile.BadZipFile):  # (the reader says what is wrong with it)
        return False


def _check_decompose_options(method, ranks, target, target_name, rank, dtype, csf, max_iter, device,
                             memory_limit, scheduler, input, stop_tol=None, iterations=None):
    """The options alone, before any file is touched (one-line errors naming the option)."""
    from tuckerkit._validation import check_max_iter, check_nonneg, check_unit_interval

    if method not in ("hooi", "hosvd", "cp", "cp-apr"):
        raise CLIError(f"--method {method!r} is not valid; expected hooi, hosvd, cp or cp-apr")
    if dtype not in (None, "float32", "float64"):
        raise CLIError(f"--dtype {dtype!r} is not valid; expected float32 or float64")
    if csf not in ("auto", "all", "two", "one"):
        raise CLIError(f"--csf {csf!r} is not valid; expected auto, all, two or one")
    if method in ("cp", "cp-apr"):
        if rank is None:
            raise CLIError(f"--method {method} needs --rank R (the number of components)")
        if ranks is not None or target is not None:
            hint = (" (--tol is the deprecated error target; the convergence tolerance is --stop-tol)"
                    if target_name == "--tol" else "")
            raise CLIError(f"--method {method} takes --rank, not --ranks or {target_name}{hint}")
        if rank < 1:
            raise CLIError(f"--rank {rank} is not positive; expected an integer >= 1")
    else:
        if rank is not None:
            raise CLIError(f"--rank is for --method cp; --method {method} takes --ranks or --max-error")
        if ranks is not None and target is not None:
            raise CLIError(f"pass either --ranks or {target_name}, not both")
        if ranks is None and target is None:
            raise CLIError("pass --ranks (e.g. 10,10,10) or --max-error (e.g. 0.01)")
        if target is not None:
            check_unit_interval(target, target_name)
    if iterations is not None:
        if max_iter is not None or stop_tol is not None:
            raise CLIError("pass either --iterations N (exactly N iterations) or --max-iter / --stop-tol, not both")
        check_max_iter(iterations, "--iterations")
    if max_iter is not None:
        check_max_iter(max_iter, "--max-iter")
    if stop_tol is not None:
        check_nonneg(stop_tol, "--stop-tol")
    if method == "hosvd" and (iterations is not None or stop_tol is not None or max_iter is not None):
        raise CLIError("--method hosvd does not iterate; --iterations, --max-iter and --stop-tol are for hooi and cp")
    dev = _check_device(device)
    if dev is not None and (memory_limit is not None or scheduler is not None):
        raise CLIError(f"--device {device} cannot be combined with --memory-limit or --scheduler (those run on the "
                       "CPU)")
    sparse = _sparse_input(input)
    if csf != "auto" and not sparse:  # (options that would be ignored are refused)
        raise CLIError(f"--csf applies to sparse input (.tns, a sparse .npz); received a dense "
                       f"{input.suffix or 'no-extension'} file")
    if memory_limit is not None and sparse:
        raise CLIError(f"--memory-limit streams dense .npy and .h5 files; {str(input)!r} holds a sparse tensor, "
                       "read whole")
    if memory_limit is not None and input.suffix.lower() in (".npz", ".mat"):
        raise CLIError(f"--memory-limit streams .npy and .h5 files; a {input.suffix} file is read whole (save its "
                       "array with numpy.save to stream it)")
    if scheduler is not None:
        if input.suffix.lower() != ".npy":
            raise CLIError(f"--scheduler reads .npy files chunk by chunk; received {input.suffix or 'no extension'!r}")
        if memory_limit is not None:
            raise CLIError("pass either --scheduler or --memory-limit, not both")
    return dev


def _decompose(input, ranks, max_error, method, rank, device, dtype, max_iter, seed, output, force, json_out, quiet,
               key, shape, csf="auto", memory_limit=None, scheduler=None, *, stop_tol=None, iterations=None,
               tol=None, nonnegative=False, mask=None, allow_external=False, linesearch=True):
    from tuckerkit.cli._ranks import check_extra, run_extra

    import tuckerkit as tk
    from tuckerkit._validation import check_ranks
    from tuckerkit.engine import parse_memory
    from tuckerkit.io import check_output_path, connect_scheduler, open_tensor, save_result

    if tol is not None and max_error is not None:
        raise CLIError("pass --max-error only; --tol is its deprecated name")
    target, target_name = (tol, "--tol") if tol is not None else (max_error, "--max-error")
    dev = _check_decompose_options(method, ranks, target, target_name, rank, dtype, csf, max_iter, device,
                                   memory_limit, scheduler, input, stop_tol=stop_tol, iterations=iterations)
    check_extra(method, nonnegative, mask)
    if method == "cp-apr" and (memory_limit is not None or scheduler is not None):  # (it failed after the read,
        # naming SlabTensor / DaskTensor, and only when the file did not fit the limit)
        which = "--memory-limit" if memory_limit is not None else "--scheduler"
        raise CLIError(f"--method cp-apr reads its counts into memory; {which} applies to hooi, hosvd and cp")
    sparse = _sparse_input(input)  # (.tns, or a COOTensor.save_npz archive)
    if sparse and key is not None:  # (an array of the archive decomposed as a dense tensor failed on csf=)
        raise CLIError(f"--key applies to files holding several dense arrays; {str(input)!r} is one sparse tensor "
                       "(coords, shape, values), read whole: leave --key out")
    if seed is not None and method in ("hooi", "hosvd") and not nonnegative:
        raise CLIError(f"--seed applies to --method cp and cp-apr (random starts) and --nonnegative; --method "
                       f"{method} starts from the SVD and draws nothing")
    if mask is not None and ((ranks is None and method == "hooi") or memory_limit is not None
                             or sparse or scheduler is not None):
        # (--max-error chose the ranks from every entry, the missing ones too; the masked fit needs X in memory)
        why = ("--ranks (a rank choice by --max-error would read the missing entries)" if ranks is None and
               method == "hooi" else "a dense tensor in memory (not a sparse file, --memory-limit or --scheduler)")
        raise CLIError(f"--mask needs {why}")
    if not linesearch and (method != "cp" or nonnegative or mask is not None):
        raise CLIError("--no-linesearch applies to --method cp (plain CP-ALS) only")
    fixed = iterations is not None
    # the defaults are the method's own (CP-ALS stops at a fit change of 1e-5 within 200 iterations, HOOI at
    # 1e-8 within 100, the non-negative solvers at 1e-6 within 200, cp_apr at 1e-4 within 1000): see tk.cp_als,
    # tk.hooi, tk.non_negative_cp / non_negative_tucker and tk.cp_apr
    default_iter, default_tol = ((200, 1e-6) if nonnegative and method != "cp-apr" else
                                 {"cp": (200, 1e-5), "cp-apr": (1000, 1e-4)}.get(method, (100, 1e-8)))
    n_iter_max = iterations if fixed else (max_iter if max_iter is not None else default_iter)
    conv_tol = 0.0 if fixed else (stop_tol if stop_tol is not None else default_tol)
    limit = parse_memory(memory_limit, "--memory-limit") if memory_limit is not None else None
    shp = _parse_ints(shape, "--shape") if shape else None
    out = output if output is not None else _default_output(input, method)
    # (before the work: save_result refused it only once the run had finished; the input itself is named so below)
    if out.suffix.lower() != ".npz" and out.resolve() != Path(input).resolve() and (out.is_file() or
                                                                                  not out.exists()):
        raise CLIError(f"--output {str(out)!r} must end in .npz (the result file)")
    check_output_path(out, force=force, inputs=(input, mask))  # (before a whole .npz / .mat / .h5 is read)
    client = cluster = None
    progress = _Progress(enabled=(not quiet) and sys.stderr.isatty(), total=n_iter_max)
    try:
        if scheduler is not None:  # every worker reads its own slabs of the file: nothing is loaded here
            from tuckerkit.io._load import _check_path

            _check_path(input)  # (a missing file said at once, before a cluster starts: seconds)
            client, cluster = connect_scheduler(scheduler, name="--scheduler")
        # the file's metadata, the ranks and the output path are checked before the one NaN/Inf scan, which
        # the decomposition runs as it reads the tensor
        _own_process_numba()  # this process is the CLI's: cached kernels load without a refresh
        with _input_named(input), open_tensor(
                input, key=key, shape=shp, dtype=dtype, memory_limit=limit, scheduler=client,
                csf=csf if sparse else None, check_finite=False,
                allow_external=allow_external, iterations=n_iter_max) as X:
            rk = check_ranks(_parse_ints(ranks, "--ranks"), X.shape, "--ranks") if ranks is not None else None
            check_output_path(out, force=force, inputs=(input, mask))
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", tk.ConvergenceWarning)
                try:
                    res: tk.TuckerTensor | tk.CPTensor
                    if method == "cp-apr" or nonnegative or mask is not None:  # issue 18's options (_ranks.py)
                        res = run_extra(X, method, rank, rk, target, conv_tol, n_iter_max, seed, progress, dev,
                                        nonnegative, mask)
                    elif method == "cp":
                        if dev is None and hasattr(X, "_drop_coords"):  # a .tns tensor: CP-ALS on the CPU reads
                            X._drop_coords()  # its trees and values only; the coordinates' memory goes back
                        res = tk.cp_als(X, rank, tol=conv_tol, max_iter=n_iter_max, random_state=seed,
                                        callback=progress, device=dev, linesearch=linesearch)
                    elif method == "hosvd":
                        res = tk.st_hosvd(X, rk, device=dev) if rk is not None else tk.st_hosvd(
                            X, max_error=target, device=dev)
                    else:
                        if rk is None:
                            rk = tk.st_hosvd(X, max_error=target, device=dev).ranks
                        res = tk.hooi(X, rk, tol=conv_tol, max_iter=n_iter_max, callback=progress, device=dev)
                finally:
                    progress.close()
            seconds = time.perf_counter() - t0
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    if (target is not None and ranks is None and (nonnegative or mask is not None) and isinstance(res, tk.TuckerTensor)
            and 1.0 - res.fit > target):
        # (the ranks chosen by the unconstrained ST-HOSVD for --max-error; the constrained run need not meet it)
        full = list(res.ranks) == list(X.shape)
        advice = ("the ranks are the tensor's shape already: no model of this kind meets it" if full
                  else "pass larger --ranks")
        typer.echo(f"warning: --max-error {target:g} chose ranks {list(res.ranks)} from the unconstrained ST-HOSVD; "
                   f"the {'non-negative' if nonnegative else 'masked'} fit's error is {1.0 - res.fit:.3g}, above it "
                   f"({advice})", err=True)
    if tol is not None:  # printed after the run, so that an error stays the only line
        typer.echo(f"warning: --tol is deprecated and will be removed in tuckerkit 0.3; use --max-error {tol:g} "
                   "(the error target that chooses the ranks). The convergence tolerance is --stop-tol.", err=True)
    if not quiet:
        for w in caught:  # (the advice only where the iteration limit ended the run; --iterations asked for it)
            limit = "max_iter" in str(w.message)
            if fixed and limit:
                continue
            hint = ("; raise --max-iter, loosen --stop-tol, or pass --iterations N to run a fixed number"
                    if limit else "")
            typer.echo(f"warning: {w.message}{hint}", err=True)
    streamed = getattr(X, "slab_rows", None)
    meta = {"method": method, "device": device, "input_shape": list(X.shape), "seconds": seconds}
    if nonnegative:
        meta["nonnegative"] = True
    if mask is not None:
        meta["mask"] = str(mask)
    if seed is not None:
        meta["seed"] = seed
    if method != "hosvd":
        meta.update(tol=conv_tol, max_iter=n_iter_max)
    if scheduler is not None:
        meta["scheduler"] = scheduler
    if streamed is not None:
        meta.update(memory_limit=limit, slab_rows=streamed)
    path = save_result(out, res, metadata=meta, input_path=input, force=force, other_inputs=(mask,))
    ranks_out: int | list[int]
    if isinstance(res, tk.CPTensor):
        stored, ranks_out = res.weights.size, res.rank
    else:
        stored, ranks_out = res.core.size, list(res.ranks)
    stored += sum(U.size for U in res.factors)
    summary = {
        "input": str(input),
        "shape": list(X.shape),
        "dtype": str(X.dtype),
        "method": f"{method} (non-negative)" if nonnegative else method,
        "ranks": ranks_out,
        "fit": res.fit,
        "relative_error": 1.0 - res.fit,
        "iterations": res.n_iter,
        "converged": res.converged,
        "seconds": round(seconds, 4),
        "compression_ratio": X.stored_entries / stored,
        "output": str(path),
    }
    if X.stored_entries != X.size:
        summary["nonzeros"] = X.stored_entries
    if input.suffix.lower() == ".tns":
        summary["csf_plan"] = X.plan().kind
    if streamed is not None:
        summary["memory_limit"], summary["slab_rows"] = limit, streamed
    if json_out:
        typer.echo(json.dumps(summary))
    else:
        against = "the nonzeros" if X.stored_entries != X.size else "the input"
        typer.echo(
            f"{summary['method']} of {'x'.join(map(str, X.shape))} {X.dtype}: "
            f"{'rank' if method in ('cp', 'cp-apr') else 'ranks'} {summary['ranks']}, "
            f"fit {res.fit:.6f} (relative error {1 - res.fit:.3e}), {res.n_iter} "
            f"iteration{'' if res.n_iter == 1 else 's'}, "
            f"{_human_seconds(seconds)}, compression {_ratio_text(summary['compression_ratio'])}x against {against} -> "
            f"{path} ({_human_bytes(path.stat().st_size)})"
        )


@app.command("info", cls=_Command)
def info_cmd(
    input: Path = typer.Argument(..., metavar="FILE", show_default=False,
                                 help="A tensor file (.npy, .npz, .mat, .tns, .h5) or a result written by decompose."),
    key: str = typer.Option(None, "--key", metavar="NAME", help="Array name in .npz/.mat/.h5 files holding several."),
    shape: str = typer.Option(None, "--shape", metavar="I,J,K", help="Shape of a .tns tensor."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object (sizes in bytes)."),
    allow_external: bool = typer.Option(
        False, "--allow-external",
        help="Read HDF5 datasets whose data lives in other files (external storage, virtual datasets); refused "
             "by default, since a crafted .h5 could read any local file."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Describe a tensor file (shape, dtype, size, nonzeros, norm, whether it fits in RAM) or a result file
    (method, ranks, fit, iterations, compression, the input it came from).

    Example: tuckerkit info data.npy
    """
    _run(debug, _info, input, key, shape, json_out, allow_external=allow_external)


def _is_result_file(path: Path) -> bool:
    """A ``.npz`` that claims to be a result (``metadata`` or ``factors_*`` members), whose reading then checks
    the rest; a plain tensor archive has neither."""
    import zipfile

    if path.suffix.lower() != ".npz" or not path.is_file():
        return False
    try:
        with zipfile.ZipFile(path) as z:
            names = {n[:-4] if n.endswith(".npy") else n for n in z.namelist()}
    except (OSError, zipfile.BadZipFile):
        return False
    return "metadata" in names or any(n.startswith("factors_") for n in names)


def _result_info(path: Path) -> dict[str, Any]:
    import numpy as np

    from tuckerkit.decomposition import CPTensor
    from tuckerkit.io import load_metadata, load_result

    res = load_result(path)
    meta = load_metadata(path)
    cp = isinstance(res, CPTensor)
    first = res.weights if isinstance(res, CPTensor) else res.core
    rank: Any = res.rank if isinstance(res, CPTensor) else list(res.ranks)
    stored = sum(int(U.size) for U in res.factors) + int(first.size)
    itemsize = np.dtype(res.factors[0].dtype).itemsize
    dense = math.prod(res.shape)
    info: dict[str, Any] = {
        "input": str(path), "kind": "CP result" if cp else "Tucker result", "method": meta.get("method", meta.get(
            "kind")), "shape": list(res.shape), "rank" if cp else "ranks": rank,
        "dtype": str(res.factors[0].dtype), "fit": res.fit if res.fit_history else None,
        "relative_error": 1.0 - res.fit if res.fit_history else None, "iterations": res.n_iter,
        "converged": meta.get("converged"), "bytes": stored * itemsize, "dense_bytes": dense * itemsize,
        "compression_ratio": dense / stored}
    for k in ("input_path", "input_sha256", "tuckerkit_version", "timestamp", "seconds", "device"):
        if k in meta:
            info[k] = meta[k]
    return info


def _print_result_info(info: dict[str, Any], path: Path, json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(info))
        return
    rk = f"rank {info['rank']}" if "rank" in info else "ranks " + " x ".join(map(str, info["ranks"]))
    fit = (f"{info['fit']:.6f} (relative error {info['relative_error']:.3e})" if info["fit"] is not None
           else "not recorded")
    conv = {True: ", converged", False: ", not converged"}.get(info["converged"], "")
    lines = [
        ("file", f"{path} ({info['kind']}{'' if info['method'] is None else ', ' + str(info['method'])})"),
        ("shape", f"{' x '.join(map(str, info['shape']))} {info['dtype']}, {rk}"),
        ("fit", f"{fit}, {info['iterations']} iterations{conv}"),
        ("size", f"{_human_bytes(info['bytes'])} stored, {_human_bytes(info['dense_bytes'])} as a dense tensor "
                 f"(compression {info['compression_ratio']:.1f}x)"),
    ]
    if "input_path" in info:
        lines.append(("from", f"{info['input_path']} (sha256 {info.get('input_sha256', '?')[:12]}...)"))
    if "timestamp" in info:
        lines.append(("written", f"{info['timestamp']} by tuckerkit {info.get('tuckerkit_version', '?')}"))
    for label, text in lines:
        typer.echo(f"{label:10s} {text}")


def _info(input, key, shape, json_out, *, allow_external=False):
    with _input_named(input):  # (the library's refusals of X named as the file)
        _info_of(input, key, shape, json_out, allow_external=allow_external)


def _info_of(input, key, shape, json_out, *, allow_external=False):
    import numpy as np

    from tuckerkit._validation import count_nonfinite
    from tuckerkit.engine import as_operand
    from tuckerkit.engine._operand import frobenius_norm
    from tuckerkit.io import load_tensor
    from tuckerkit.sparse import COOTensor

    if key is None and _is_result_file(input):
        _print_result_info(_result_info(input), input, json_out)
        return
    if input.suffix.lower() == ".tns":
        _own_process_numba()
    X = load_tensor(input, key=key, shape=_parse_ints(shape, "--shape") if shape else None,
                    allow_external=allow_external)
    info: dict[str, Any]
    if isinstance(X, COOTensor):
        info = {
            "input": str(input), "shape": list(X.shape), "dtype": str(X.dtype), "format": "sparse (COO)",
            "nnz": X.nnz, "density": X.density, "bytes": X.nbytes, "frobenius_norm": X.norm(),
            "dense_bytes": int(math.prod(float(d) for d in X.shape) * X.dtype.itemsize)}
        if not math.isfinite(info["frobenius_norm"]):  # (JSON has no Infinity: as the dense branch)
            info["frobenius_norm"] = None
            info["frobenius_norm_above_float64"] = True
    else:
        info = {"input": str(input), "shape": list(X.shape), "dtype": str(X.dtype), "bytes": int(X.nbytes),
                "ndim": X.ndim}
        if X.dtype.kind in "biufc" and X.size:
            # (integers and booleans summed piece by piece in float64, complex by its two real views: no copy of
            # the tensor; a 64 MB int64 file peaked at 235 MB through a float64 copy)
            norm = frobenius_norm(X) if X.dtype.kind in "biuc" else as_operand(X).norm()
            bad = count_nonfinite(X) if X.dtype.kind in "fc" and not math.isfinite(norm) else 0
            # (NaN or Inf entries: no norm, their count instead; a finite tensor whose norm is above the largest
            # float64: no norm either, JSON has no Infinity)
            info["frobenius_norm"] = norm if math.isfinite(norm) else None
            if bad:
                info["nan_or_inf"] = bad
            elif not math.isfinite(norm):
                info["frobenius_norm_above_float64"] = True
            nnz = int(np.count_nonzero(X))
            info["nnz"] = nnz
            info["density"] = nnz / X.size
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            info["available_ram_bytes"] = int(avail)
            info["fits_in_ram"] = bool(X.nbytes < avail)
        except (ValueError, OSError, AttributeError):
            pass
    if json_out:
        typer.echo(json.dumps(info))
        return
    labels = {"bytes": "size", "dense_bytes": "dense size", "available_ram_bytes": "available RAM",
              "frobenius_norm": "Frobenius norm", "fits_in_ram": "fits in RAM"}
    for k, v in info.items():
        if k in ("nan_or_inf", "frobenius_norm_above_float64"):
            continue
        if k == "frobenius_norm" and v is None and "nan_or_inf" not in info:
            v = f"above the largest float64 ({float(np.finfo(np.float64).max):.3g})"
        elif k == "frobenius_norm" and v is None:
            v = f"undefined: {info['nan_or_inf']} NaN or infinite value(s)"
        elif k in ("bytes", "dense_bytes", "available_ram_bytes"):
            v = f"{_human_bytes(v)} ({v:,} bytes)"
        elif k == "shape":
            v = " x ".join(map(str, v))
        elif k == "density":
            v = f"{v:.3g}"
        elif isinstance(v, float):
            v = f"{v:.6g}"
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        typer.echo(f"{labels.get(k, k):16s} {v}")


@app.command("reconstruct", cls=_Command)
def reconstruct_cmd(
    result: Path = typer.Argument(..., metavar="RESULT", show_default=False,
                                  help="Result file written by 'tuckerkit decompose' (.npz)."),
    output: Path = typer.Option(
        None, "--output", "-o", metavar="OUT.npy",
        help="Where to write the tensor. Default: the result's name with .npy (x.tucker.npz -> x.tucker.npy); "
             "with --against and no --output nothing is written."),
    against: Path = typer.Option(
        None, "--against", metavar="X.npy",
        help="The original tensor file: print the relative error ||X - X_hat|| / ||X|| (of the --index part)."),
    key: str = typer.Option(None, "--key", metavar="NAME",
                            help="Array name in the --against file if it holds several."),
    index: str = typer.Option(None, "--index", metavar="0,:,3:5", help="A slice per mode (default: all)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object (shape, output, relative_error)."),
    allow_external: bool = typer.Option(
        False, "--allow-external",
        help="Read an --against HDF5 dataset whose data lives in other files (external storage, virtual "
             "datasets); refused by default, since a crafted .h5 could read any local file."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Rebuild the full tensor (or a slice of it) from a result file, and compare it with the original.

    Example: tuckerkit reconstruct data.tucker.npz --output approx.npy --against data.npy --index 0,:,:
    """
    _run(debug, _reconstruct, result, output, index, force, against=against, key=key, json_out=json_out,
         allow_external=allow_external)


def _parse_index(text: str, shape: tuple[int, ...]) -> list:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != len(shape):
        raise CLIError(
            f"--index has {len(parts)} entries but the tensor has {len(shape)} modes; expected one per mode"
        )
    out: list = []
    for m, p in enumerate(parts):
        try:
            if p == ":":
                out.append(slice(None))
            elif ":" in p:
                a, b = p.split(":", 1)
                sl = slice(int(a) if a else None, int(b) if b else None)
                if not len(range(*sl.indices(shape[m]))):
                    raise CLIError(f"--index entry {m} ({p!r}) selects nothing from mode {m} of size {shape[m]}; "
                                   "expected a:b with a < b, both within the mode (negative: from its end)")
                out.append(sl)
            else:
                i = int(p)
                if not -shape[m] <= i < shape[m]:
                    raise CLIError(f"--index entry {m} ({i}) is out of range for mode {m} of size {shape[m]}")
                out.append(i)
        except ValueError:
            raise CLIError(f"--index entry {m} ({p!r}) is not an integer, a:b or ':'") from None
    return out


def _relative_error(X: Any, Xhat: Any, name: str = "X") -> float:
    """``||X - X_hat|| / ||X||`` in float64, a slab of mode 0 at a time (``X`` may be memory-mapped). A NaN or
    Inf in ``X`` is refused as decompose refuses it (one line naming ``name``), not reported as an error of inf
    or nan; so is an all-zero ``X`` against a nonzero model (0.0 against the zero model, as
    :meth:`TuckerTensor.relative_error`)."""
    import numpy as np

    if X.ndim == 0:
        X, Xhat = X.reshape(1), Xhat.reshape(1)
    rows = max(1, (1 << 22) // max(1, X.size // max(X.shape[0], 1)))
    num = den = 0.0
    scale = 0.0
    bad = 0
    for start in range(0, X.shape[0], rows):  # scale-safe: the largest entry first, as LAPACK's nrm2
        slab = np.asarray(X[start:start + rows])
        if slab.dtype.kind in "fc":
            bad += int(slab.size - np.count_nonzero(np.isfinite(slab)))
        if not bad:
            scale = max(scale, float(np.abs(slab).max(initial=0.0)))
    if bad:
        raise CLIError(f"{name} contains {bad} NaN or infinite value(s); remove or impute them first")
    scale = scale or 1.0
    # complex on either side: complex128 (a real cast would drop the imaginary parts)
    work = np.complex128 if X.dtype.kind == "c" or np.dtype(Xhat.dtype).kind == "c" else np.float64
    for start in range(0, X.shape[0], rows):
        a = np.asarray(X[start:start + rows], dtype=work) / scale
        b = np.asarray(Xhat[start:start + rows], dtype=work) / scale
        num += float(np.vdot(a - b, a - b).real)
        den += float(np.vdot(a, a).real)
    if den > 0 or num == 0:
        return math.sqrt(num / den) if den > 0 else 0.0
    raise CLIError(f"{name} has zero norm (every entry is 0); the relative error ||X - X_hat|| / ||X|| of a nonzero "
                   "model is undefined")


def _decomposed_from(result: Path) -> Path | None:
    """The input file recorded in a result's metadata (None where it is not there or not readable: the result's
    own reading then says why)."""
    from tuckerkit.io import load_metadata

    try:
        got = load_metadata(result).get("input_path")
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return Path(got) if isinstance(got, str) and got else None


def _reconstruct(result, output, index, force, *, against=None, key=None, json_out=False, allow_external=False):
    import numpy as np

    from tuckerkit.decomposition import CPTensor
    from tuckerkit.engine import multi_ttm
    from tuckerkit.io import atomic_write, check_output_path, load_result, load_tensor
    from tuckerkit.sparse import COOTensor

    if against is None and (key is not None or allow_external):
        raise CLIError(f"{'--key' if key is not None else '--allow-external'} applies to the --against file; pass "
                       "--against X.npy with it")
    if index is not None and not index.strip():
        raise CLIError("--index is empty; expected a slice per mode, e.g. 0,:,3:5")
    # the result first: a file that is no result (or a folder, '') is named as such before any output check
    # (which had asked for --force to overwrite the data file beside it)
    res = load_result(result)
    if output is None and against is None:
        output = result.with_name((result.name[:-4] if result.name.lower().endswith(".npz") else result.name)
                                  + ".npy")
    # the tensor the result was decomposed from (its metadata's resolved path) is never an output, --force or
    # not: 'decompose data.npy -o data.npz' then 'reconstruct data.npz --force' replaced data.npy
    inputs = tuple(p for p in (result, against, _decomposed_from(result)) if p is not None)
    if output is not None:
        if output.suffix.lower() != ".npy":  # (any case, as the readers take it)
            raise CLIError(f"--output {str(output)!r} must end in .npy")
        check_output_path(output, force=force, inputs=inputs)
    idx = _parse_index(index, res.shape) if index else [slice(None)] * len(res.shape)
    X = None
    if against is not None:
        X = load_tensor(against, key=key, allow_external=allow_external)
        if isinstance(X, COOTensor):
            raise CLIError(f"--against {str(against)!r} is a sparse tensor; compare against a dense file "
                           "(.npy, .npz, .mat, .h5)")
        if tuple(X.shape) != tuple(res.shape):
            raise CLIError(f"--against {str(against)!r} has shape {tuple(X.shape)} but the result reconstructs "
                           f"shape {tuple(res.shape)}")
    facs = [np.atleast_2d(U[i]) if isinstance(i, int) else U[i] for U, i in zip(res.factors, idx, strict=True)]
    from tuckerkit._validation import check_fits_memory

    sizes = [int(F.shape[0]) for F in facs]  # (numpy named a 201 GiB uint8 buffer, not the tensor)
    check_fits_memory(2.0 * math.prod(sizes) * np.dtype(res.factors[0].dtype).itemsize,
                      f"the reconstructed {'x'.join(map(str, sizes))} tensor",
                      "reconstruct a part of it with --index, e.g. --index 0,:,:")
    if isinstance(res, CPTensor):
        dense = np.asarray(CPTensor(res.weights, tuple(facs)).to_dense())
    else:
        dense = np.asarray(multi_ttm(res.core, facs))
    squeeze = tuple(m for m, i in enumerate(idx) if isinstance(i, int))
    dense = dense.reshape([s for m, s in enumerate(dense.shape) if m not in squeeze])
    summary: dict[str, Any] = {"result": str(result), "shape": list(dense.shape), "dtype": str(dense.dtype)}
    if X is not None:
        summary["against"] = str(against)
        summary["relative_error"] = _relative_error(X[tuple(idx)], dense, f"--against {str(against)!r}"
                                                      + ("" if index is None else f" (index {index})"))
    if output is not None:
        atomic_write(output, lambda f: np.save(f, dense), force=force, inputs=inputs)
        summary["output"] = str(output)
    if json_out:
        typer.echo(json.dumps(summary))
        return
    part = "" if index is None else f" (index {index})"
    if output is not None:
        what = f"{'x'.join(map(str, dense.shape))} {dense.dtype} tensor" if dense.ndim else f"{dense.dtype} scalar"
        typer.echo(f"wrote {what}{part} to {output} "
                   f"({_human_bytes(output.stat().st_size)})")
    if X is not None:
        err = summary["relative_error"]
        typer.echo(f"relative error against {against}{part}: {err:.3e} (fit {1 - err:.6f})")


@app.command("plan", cls=_Command)
def plan_cmd(
    spec: str = typer.Argument(..., metavar="SPEC", show_default=False,
                               help="Einsum-style subscripts for two operands, e.g. 'mk,pkn->mnp'."),
    shapes: str = typer.Option(..., "--shapes", metavar="AxB,CxDxE", help="Operand shapes, e.g. 64x64,64x64x64."),
    order: str = typer.Option("C", "--order", metavar="C|F", help="Memory order of the operands."),
    dtype: str = typer.Option("float64", "--dtype", metavar="float32|float64", help="Precision of the operands."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Print the contraction plan for operands of the given shapes.

    Example: tuckerkit plan "mk,pkn->mnp" --shapes 64x64,64x64x64 --order F
    """
    _run(debug, _plan, spec, shapes, order, dtype)


def _plan(spec, shapes, order, dtype):
    import numpy as np

    from tuckerkit.engine import plan_contraction

    try:
        parts = [tuple(int(d) for d in s.split("x")) for s in shapes.split(",")]
    except ValueError:
        raise CLIError(f"--shapes must look like 64x64,64x64x64; received {shapes!r}") from None
    if len(parts) != 2:
        raise CLIError(f"--shapes names {len(parts)} shape(s); expected two, e.g. 64x64,64x64x64")
    if order not in ("C", "F"):
        raise CLIError(f"--order {order!r} is not valid; expected C or F")
    if dtype not in ("float32", "float64"):
        raise CLIError(f"--dtype {dtype!r} is not valid; expected float32 or float64")
    for i, part in enumerate(parts):
        text = "x".join(map(str, part))
        bad = next((d for d in part if d < 1), None)
        if bad is not None:
            raise CLIError(f"--shapes {shapes!r}: operand {i + 1} ({text}) has the size {bad}; expected sizes >= 1")
        nbytes = math.prod(part) * np.dtype(dtype).itemsize
        if nbytes >= 2**63:
            raise CLIError(f"--shapes {shapes!r}: operand {i + 1} ({text}) would hold {nbytes:,} bytes; expected "
                           "operands below 2**63 bytes")
    try:
        A = np.empty(parts[0], dtype=dtype, order=order)  # (not written: the plan reads shapes and strides only)
        B = np.empty(parts[1], dtype=dtype, order=order)
    except (ValueError, MemoryError) as exc:
        raise CLIError(f"--shapes {shapes!r} cannot be planned here ({str(exc).splitlines()[0]}); expected "
                       "smaller operands") from None
    typer.echo(plan_contraction(spec, A, B).explain())


#: True in the console script's own process (``main()``), where :func:`_own_process_numba` may change numba's
#: process-wide behaviour; False when the app runs inside another program (tests, ``CliRunner``)
_OWN_PROCESS = False


def _own_process_numba() -> None:
    """Before the first compiled kernel of a run: every cached kernel loads without numba's registry refresh
    and numba's scan for third-party extensions is skipped (``cli/_startup.py``), in the console script's
    process only. tuckerkit's own kernels load so in any process (``tuckerkit/_numba_load.py``); what this
    adds is the extension scan (0.03-0.06 s)."""
    if _OWN_PROCESS:
        from tuckerkit.cli._startup import light_numba

        light_numba()


def main() -> None:
    """Console-script entry point."""
    import atexit
    import gc

    global _OWN_PROCESS
    _OWN_PROCESS = True
    # the last exit handler (they run last-registered first): the interpreter's final garbage collections
    # then skip the objects alive at exit, which the end of the process frees anyway. With numba loaded
    # they took 0.3-0.5 s of every sparse run's exit (0.06 s frozen; measured on a 2-core machine). Output
    # files are closed and renamed into place before, exit handlers still run, the streams are flushed.
    atexit.register(gc.freeze)
    app()


import tuckerkit.cli._ranks  # noqa: E402, F401  (registers `tuckerkit ranks`)
