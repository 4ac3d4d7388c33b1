"""Typer application. Commands parse, call the public API and format; nothing else.

Exit codes: 0 success, 1 bad input or failed run (one line on stderr; ``--debug`` shows the traceback),
2 usage errors (typer), 130 interrupted.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import typer

from tuckerkit._version import __version__

app = typer.Typer(
    name="tuckerkit",
    help="Tucker and CP tensor decompositions on a transpose-free contraction engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


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


def _run(debug: bool, fn, *args, **kwargs):
    """Run a command body: one-line errors (exit 1), Ctrl-C (exit 130), tracebacks only with --debug."""
    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:
        typer.echo("interrupted; no output was written", err=True)
        raise typer.Exit(130) from None
    except typer.Exit:
        raise
    except (CLIError, ValueError, TypeError, OSError, MemoryError, ImportError) as exc:
        if debug:
            traceback.print_exc()
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(1) from None


def _parse_ints(text: str, name: str) -> list[int]:
    try:
        vals = [int(t) for t in text.split(",")]
    except ValueError:
        raise CLIError(f"{name} must be comma-separated integers such as 10,10,10; received {text!r}") from None
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


def _default_output(inp: Path, method: str) -> Path:
    suffix = ".cp.npz" if method == "cp" else ".tucker.npz"
    return inp.with_name(inp.name.rsplit(".", 1)[0] + suffix)


class _Progress:
    """A rich progress line on stderr, shown only for runs longer than about a second on a terminal."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled
        self.total = total
        self.start = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, state) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.perf_counter() - self.start < 1.0:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self.bar = Progress(
                TextColumn("iteration {task.completed}/{task.total}"),
                BarColumn(),
                TextColumn("fit {task.fields[fit]:.6f}  change {task.fields[change]:.2e}"),
                TextColumn("{task.fields[elapsed]:.1f} s"),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("decompose", total=self.total, fit=0.0, change=0.0, elapsed=0.0)
        change = state.fit_change if math.isfinite(state.fit_change) else 0.0
        self.bar.update(self.task, completed=state.iteration, fit=state.fit, change=change,
                        elapsed=time.perf_counter() - self.start)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command("decompose")
def decompose_cmd(
    input: Path = typer.Argument(..., help="Tensor file: .npy, .npz, .mat, .tns, .h5/.hdf5."),
    ranks: str = typer.Option(None, "--ranks", help="Tucker ranks, one per mode, e.g. 10,10,10."),
    tol: float = typer.Option(None, "--tol", help="Relative error for automatic Tucker ranks, in (0, 1)."),
    method: str = typer.Option("hooi", "--method", help="hooi, hosvd or cp."),
    rank: int = typer.Option(None, "--rank", help="CP rank (with --method cp)."),
    device: str = typer.Option("cpu", "--device",
                               help="cpu, cuda or cuda:N (needs tuckerkit[gpu-cuda13] or [gpu-cuda12])."),
    dtype: str = typer.Option(None, "--dtype", help="float32 or float64 (default: keep the file's)."),
    max_iter: int = typer.Option(100, "--max-iter", help="Iteration limit for hooi and cp."),
    seed: int = typer.Option(None, "--seed", help="Random seed (cp initialization)."),
    output: Path = typer.Option(None, "--output", "-o", help="Result file (.npz); default INPUT.tucker.npz."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    key: str = typer.Option(None, "--key", help="Array name in .npz/.mat/.h5 files holding several."),
    shape: str = typer.Option(None, "--shape", help="Shape of a .tns tensor, e.g. 100,200,300."),
    csf: str = typer.Option("auto", "--csf", help="Sparse (.tns) kernel plan: auto, all, two or one."),
    memory_limit: str = typer.Option(None, "--memory-limit",
                                     help="Read a larger tensor in slabs within this memory, e.g. 4GB."),
    scheduler: str = typer.Option(None, "--scheduler",
                                  help="Run on Dask: 'local' (a LocalCluster) or a scheduler address, "
                                       "e.g. tcp://host:8786 (.npy input)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Decompose a tensor file and write the result (.npz).

    Example: tuckerkit decompose data.npy --ranks 10,10,10 --output data.tucker.npz
    """
    _run(debug, _decompose, input, ranks, tol, method, rank, device, dtype, max_iter, seed, output, force,
         json_out, quiet, key, shape, csf, memory_limit, scheduler)


def _check_decompose_options(method, ranks, tol, rank, dtype, csf, max_iter, device, memory_limit, scheduler,
                             input):
    """The options alone, before any file is touched (one-line errors naming the option)."""
    from tuckerkit._validation import check_max_iter, check_unit_interval

    if method not in ("hooi", "hosvd", "cp"):
        raise CLIError(f"--method {method!r} is not valid; expected hooi, hosvd or cp")
    if dtype not in (None, "float32", "float64"):
        raise CLIError(f"--dtype {dtype!r} is not valid; expected float32 or float64")
    if csf not in ("auto", "all", "two", "one"):
        raise CLIError(f"--csf {csf!r} is not valid; expected auto, all, two or one")
    if method == "cp":
        if rank is None:
            raise CLIError("--method cp needs --rank R (the number of components)")
        if ranks is not None or tol is not None:
            raise CLIError("--method cp takes --rank, not --ranks or --tol")
        if rank < 1:
            raise CLIError(f"--rank {rank} is not positive; expected an integer >= 1")
    else:
        if rank is not None:
            raise CLIError(f"--rank is for --method cp; --method {method} takes --ranks or --tol")
        if ranks is not None and tol is not None:
            raise CLIError("pass either --ranks or --tol, not both")
        if ranks is None and tol is None:
            raise CLIError("pass --ranks (e.g. 10,10,10) or --tol (e.g. 0.01)")
        if tol is not None:
            check_unit_interval(tol, "--tol")
    check_max_iter(max_iter, "--max-iter")
    dev = _check_device(device)
    if dev is not None and (memory_limit is not None or scheduler is not None):
        raise CLIError(f"--device {device} cannot be combined with --memory-limit or --scheduler (those run on the "
                       "CPU)")
    if scheduler is not None:
        if input.suffix.lower() != ".npy":
            raise CLIError(f"--scheduler reads .npy files chunk by chunk; received {input.suffix or 'no extension'!r}")
        if memory_limit is not None:
            raise CLIError("pass either --scheduler or --memory-limit, not both")
    return dev


def _decompose(input, ranks, tol, method, rank, device, dtype, max_iter, seed, output, force, json_out, quiet,
               key, shape, csf="auto", memory_limit=None, scheduler=None):
    import tuckerkit as tk
    from tuckerkit._validation import check_ranks
    from tuckerkit.engine import parse_memory
    from tuckerkit.io import check_output_path, connect_scheduler, open_tensor, save_result

    dev = _check_decompose_options(method, ranks, tol, rank, dtype, csf, max_iter, device, memory_limit, scheduler,
                                   input)
    limit = parse_memory(memory_limit, "--memory-limit") if memory_limit is not None else None
    shp = _parse_ints(shape, "--shape") if shape else None
    out = output if output is not None else _default_output(input, method)
    client = cluster = None
    progress = _Progress(enabled=(not quiet) and sys.stderr.isatty(), total=max_iter)
    try:
        if scheduler is not None:  # every worker reads its own slabs of the file: nothing is loaded here
            client, cluster = connect_scheduler(scheduler, name="--scheduler")
        # the file's metadata, the ranks and the output path are checked before the one NaN/Inf scan, which
        # the decomposition runs as it reads the tensor
        with open_tensor(input, key=key, shape=shp, dtype=dtype, memory_limit=limit, scheduler=client,
                         csf=csf if input.suffix.lower() == ".tns" else None, check_finite=False) as X:
            rk = check_ranks(_parse_ints(ranks, "--ranks"), X.shape, "--ranks") if ranks is not None else None
            check_output_path(out, force=force, inputs=(input,))
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", tk.ConvergenceWarning)
                try:
                    res: tk.TuckerTensor | tk.CPTensor
                    if method == "cp":
                        res = tk.cp_als(X, rank, max_iter=max_iter, random_state=seed, callback=progress, device=dev)
                    elif method == "hosvd":
                        res = tk.st_hosvd(X, rk, device=dev) if rk is not None else tk.st_hosvd(X, tol=tol,
                                                                                               device=dev)
                    else:
                        if rk is None:
                            rk = tk.st_hosvd(X, tol=tol, device=dev).ranks
                        res = tk.hooi(X, rk, max_iter=max_iter, callback=progress, device=dev)
                finally:
                    progress.close()
            seconds = time.perf_counter() - t0
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    if not quiet:
        for w in caught:
            typer.echo(f"warning: {w.message}", err=True)
    streamed = getattr(X, "slab_rows", None)
    meta = {"method": method, "device": device, "input_shape": list(X.shape), "seconds": seconds}
    if scheduler is not None:
        meta["scheduler"] = scheduler
    if streamed is not None:
        meta.update(memory_limit=limit, slab_rows=streamed)
    path = save_result(out, res, metadata=meta, input_path=input, force=force)
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
        "method": method,
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
            f"{'rank' if method == 'cp' else 'ranks'} {summary['ranks']}, "
            f"fit {res.fit:.6f} (relative error {1 - res.fit:.3e}), {res.n_iter} iterations, "
            f"{seconds:.2f} s, compression {summary['compression_ratio']:.1f}x against {against} -> {path}"
        )


@app.command("info")
def info_cmd(
    input: Path = typer.Argument(..., help="Tensor file."),
    key: str = typer.Option(None, "--key", help="Array name in .npz/.mat/.h5 files holding several."),
    shape: str = typer.Option(None, "--shape", help="Shape of a .tns tensor."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Describe a tensor file: shape, dtype, memory, nonzeros, norm, and whether it fits in RAM.

    Example: tuckerkit info data.npy
    """
    _run(debug, _info, input, key, shape, json_out)


def _info(input, key, shape, json_out):
    import numpy as np

    from tuckerkit.engine import as_operand
    from tuckerkit.io import load_tensor
    from tuckerkit.sparse import COOTensor

    X = load_tensor(input, key=key, shape=_parse_ints(shape, "--shape") if shape else None)
    if isinstance(X, COOTensor):
        info: dict[str, Any] = {
            "input": str(input), "shape": list(X.shape), "dtype": str(X.dtype), "format": "sparse (COO)",
            "nnz": X.nnz, "density": X.density, "bytes": X.nbytes, "frobenius_norm": X.norm(),
            "dense_bytes": int(math.prod(float(d) for d in X.shape) * X.dtype.itemsize)}
    else:
        info = {"input": str(input), "shape": list(X.shape), "dtype": str(X.dtype), "bytes": int(X.nbytes),
                "ndim": X.ndim}
        if X.dtype.kind in "biuf" and X.size:
            Xf = X if X.dtype.kind == "f" else X.astype(np.float64)
            info["frobenius_norm"] = as_operand(Xf).norm()
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
    for k, v in info.items():
        typer.echo(f"{k:20s} {v}")


@app.command("reconstruct")
def reconstruct_cmd(
    result: Path = typer.Argument(..., help="Result file written by 'tuckerkit decompose'."),
    output: Path = typer.Option(..., "--output", "-o", help="Output .npy file."),
    index: str = typer.Option(None, "--index", help="A slice per mode, e.g. '0,:,3:5' (default: all)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Rebuild the full tensor (or a slice of it) from a result file.

    Example: tuckerkit reconstruct data.tucker.npz --output approx.npy --index 0,:,:
    """
    _run(debug, _reconstruct, result, output, index, force)


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
                out.append(slice(int(a) if a else None, int(b) if b else None))
            else:
                i = int(p)
                if not -shape[m] <= i < shape[m]:
                    raise CLIError(f"--index entry {m} ({i}) is out of range for mode {m} of size {shape[m]}")
                out.append(i)
        except ValueError:
            raise CLIError(f"--index entry {m} ({p!r}) is not an integer, a:b or ':'") from None
    return out


def _reconstruct(result, output, index, force):
    import numpy as np

    from tuckerkit.decomposition import CPTensor
    from tuckerkit.engine import multi_ttm
    from tuckerkit.io import atomic_write, check_output_path, load_result

    if output.suffix != ".npy":
        raise CLIError(f"--output {str(output)!r} must end in .npy")
    check_output_path(output, force=force, inputs=(result,))
    res = load_result(result)
    idx = _parse_index(index, res.shape) if index else [slice(None)] * len(res.shape)
    facs = [np.atleast_2d(U[i]) if isinstance(i, int) else U[i] for U, i in zip(res.factors, idx, strict=True)]
    if isinstance(res, CPTensor):
        dense = np.asarray(CPTensor(res.weights, tuple(facs)).to_dense())
    else:
        dense = np.asarray(multi_ttm(res.core, facs))
    squeeze = tuple(m for m, i in enumerate(idx) if isinstance(i, int))
    dense = dense.reshape([s for m, s in enumerate(dense.shape) if m not in squeeze])
    atomic_write(output, lambda f: np.save(f, dense), force=force, inputs=(result,))
    typer.echo(f"wrote {'x'.join(map(str, dense.shape))} {dense.dtype} tensor to {output}")


@app.command("plan")
def plan_cmd(
    spec: str = typer.Argument(..., help="Einsum-style subscripts for two operands, e.g. 'mk,pkn->mnp'."),
    shapes: str = typer.Option(..., "--shapes", help="Operand shapes, e.g. 64x64,64x64x64."),
    order: str = typer.Option("C", "--order", help="Memory order of the operands: C or F."),
    dtype: str = typer.Option("float64", "--dtype", help="float32 or float64."),
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
    A = np.empty(parts[0], dtype=dtype, order=order)
    B = np.empty(parts[1], dtype=dtype, order=order)
    typer.echo(plan_contraction(spec, A, B).explain())


def main() -> None:
    """Console-script entry point."""
    app()
