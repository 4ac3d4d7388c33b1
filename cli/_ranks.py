"""``tuckerkit ranks``: a rank sweep (error, fit, CORCONDIA and time per rank) printed as a table.

Registered on the application by one import line at the end of ``cli/_app.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from tuckerkit.cli._app import CLIError, _Command, _input_named, _own_process_numba, _parse_ints, _run, app

METHODS = ("cp", "nn-cp", "tucker", "nn-tucker")


@app.command("ranks", cls=_Command)
def ranks_cmd(
    input: Path = typer.Argument(..., metavar="INPUT", show_default=False,
                                 help="The tensor file (.npy, .npz, .mat, .tns, .h5)."),
    method: str = typer.Option("cp", "--method", metavar="METHOD",
                               help="cp, nn-cp (non-negative CP), tucker or nn-tucker (each rank for every mode)."),
    max_rank: int = typer.Option(10, "--max-rank", metavar="R", help="The largest rank tried."),
    min_rank: int = typer.Option(1, "--min-rank", metavar="R", help="The smallest rank tried."),
    nonnegative: bool = typer.Option(False, "--nonnegative",
                                     help="Non-negative factors (the same as --method nn-cp / nn-tucker)."),
    max_iter: int = typer.Option(None, "--max-iter", metavar="N", help="Iterations per rank, at most."),
    stop_tol: float = typer.Option(None, "--stop-tol", metavar="TOL",
                                   help="Stopping tolerance on the fit change (as decompose's --stop-tol)."),
    tol: float = typer.Option(None, "--tol", metavar="TOL", hidden=True,
                              help="Deprecated name of --stop-tol (decompose's --tol is an error target)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Random seed (the table is repeatable)."),
    plot: Path = typer.Option(None, "--plot", metavar="FILE.png", help="Also save the error/CORCONDIA plot."),
    key: str = typer.Option(None, "--key", metavar="NAME", help="Array name in .npz/.mat/.h5 files holding several."),
    shape: str = typer.Option(None, "--shape", metavar="I,J,K", help="Shape of a .tns tensor."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of the table."),
    allow_external: bool = typer.Option(
        False, "--allow-external",
        help="Read HDF5 datasets whose data lives in other files (external storage, virtual datasets)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Decompose at every rank from --min-rank to --max-rank and print error, fit, CORCONDIA and time, with the
    suggested rank (the largest before CORCONDIA falls below 90).

    Example: tuckerkit ranks data.npy --method cp --max-rank 10
    """
    _run(debug, _ranks, input, method, min_rank, max_rank, nonnegative, max_iter, stop_tol, seed, plot, key, shape,
         json_out, allow_external=allow_external, deprecated_tol=tol)


def _ranks(input, method, min_rank, max_rank, nonnegative, max_iter, tol, seed, plot, key, shape, json_out, *,
           allow_external=False, deprecated_tol=None):
    import tuckerkit as tk
    from tuckerkit._validation import check_max_iter, check_nonneg
    from tuckerkit.io import load_tensor

    if method not in METHODS:
        raise CLIError(f"--method {method!r} is not valid; expected one of {', '.join(METHODS)}")
    if nonnegative and not method.startswith("nn-"):
        method = "nn-" + method
    if not 1 <= min_rank <= max_rank:
        raise CLIError(f"--min-rank {min_rank} and --max-rank {max_rank} are invalid; expected "
                       "1 <= --min-rank <= --max-rank")
    if deprecated_tol is not None:
        if tol is not None:
            raise CLIError("pass --stop-tol only; --tol is its deprecated name")
        tol = deprecated_tol
    if max_iter is not None:  # (named as options here, before the sweep: the library names its keywords)
        check_max_iter(max_iter, "--max-iter")
    if tol is not None:
        check_nonneg(tol, "--tol" if deprecated_tol is not None else "--stop-tol")
    plot_format = _check_plot(plot, input) if plot is not None else None
    if input.suffix.lower() == ".tns":
        _own_process_numba()
    X = load_tensor(input, key=key, shape=_parse_ints(shape, "--shape") if shape else None,
                    allow_external=allow_external)
    if method.endswith("tucker") and max_rank > max(X.shape):  # (each rank is capped at its mode's size)
        raise CLIError(f"--max-rank {max_rank} exceeds the largest mode size of {str(input)!r} ({max(X.shape)}); "
                       f"with --method {method} a rank above it repeats rank {max(X.shape)}")
    progress = None
    if not json_out:  # each rank's row as soon as it is done (a failure at the last rank keeps the others)
        from tuckerkit.decomposition._rank import MARKDOWN_HEADER

        def progress(row, started=[]):  # noqa: B006 (the header once, above the first row)
            if not started:
                started.append(True)
                for line in MARKDOWN_HEADER:
                    typer.echo(line)
            typer.echo(row.to_markdown())

    with _input_named(input):
        table = tk.rank_sweep(X, range(min_rank, max_rank + 1), method=method, tol=tol, max_iter=max_iter,
                              random_state=seed, callback=progress)
    if deprecated_tol is not None:  # (after the run, as decompose's: an error stays the only line)
        typer.echo("warning: ranks --tol is deprecated and will be removed in tuckerkit 0.3; use --stop-tol "
                   f"{tol:g} (the convergence tolerance; decompose's --tol is an error target)", err=True)
    if json_out:
        rows = [{"rank": r.rank, "error": r.error, "fit": r.fit,
                 "corcondia": None if r.corcondia != r.corcondia else r.corcondia, "seconds": r.seconds,
                 "n_iter": r.n_iter, "converged": r.converged} for r in table.rows]
        typer.echo(json.dumps({"input": str(input), "method": method, "rows": rows,
                               "suggested_rank": table.suggested_rank}))
    else:
        if table.suggested_rank is not None:
            typer.echo(f"suggested rank: {table.suggested_rank} (largest rank before CORCONDIA falls below "
                       f"{table.threshold:g})")
    if plot is not None:
        from tuckerkit.io import OutputFileError, atomic_write

        ax = table.plot()
        ax.figure.tight_layout()
        # (a temporary file renamed into place: an interrupted or failed write leaves nothing, and a link that
        # appeared at the path meanwhile is refused, never followed)
        try:
            atomic_write(plot, lambda f: ax.figure.savefig(f, format=plot_format, dpi=120), inputs=(input,))
        except OutputFileError as exc:  # (the path taken meanwhile, its folder removed, ...)
            raise _plot_error(exc, plot) from None


def _check_plot(plot: Path, input: Path) -> str:
    """--plot's path, checked before the sweep as ``decompose -o`` checks its output (an image format matplotlib
    writes, a new regular file in an existing writable folder, not the input; ``ranks`` has no --force, so an
    existing file or link is refused); returns the format (the extension, lower case)."""
    from tuckerkit.io import OutputFileError, check_output_path

    try:
        import matplotlib
    except ImportError:
        raise CLIError("--plot needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    formats = sorted(set(Figure().canvas.get_supported_filetypes()) - {"pgf"})  # (pgf needs a LaTeX install)
    fmt = plot.suffix[1:].lower()
    if fmt not in formats:
        raise CLIError(f"--plot {str(plot)!r} has the extension {plot.suffix or '(none)'!r}; expected an image "
                       f"file: {', '.join('.' + f for f in formats)}")
    try:
        check_output_path(plot, inputs=(input,))
    except OutputFileError as exc:
        raise _plot_error(exc, plot) from None
    return fmt


def _plot_error(exc: Exception, plot: Path) -> CLIError:
    """:class:`~tuckerkit.io.OutputFileError`'s message about the output, naming --plot (no --force here)."""
    if getattr(exc, "reason", "") == "exists":
        return CLIError(f"--plot {str(plot)!r} exists; choose another file name")
    msg = str(exc).removeprefix("output ").replace("output folder", "folder")
    return CLIError("--plot " + msg.replace(" (force=True never replaces it)", ""))


# ---------------------------------------------------------------------------------------------------
# issue 18's options of `tuckerkit decompose` (--method cp-apr, --nonnegative, --mask), called from _app.py
# ---------------------------------------------------------------------------------------------------
def check_extra(method: str, nonnegative: bool, mask: Path | None) -> None:
    """The combinations of --nonnegative / --mask / --method cp-apr, before any file is read."""
    if nonnegative and method not in ("hooi", "cp"):
        raise CLIError(f"--nonnegative applies to --method hooi and cp; --method {method} "
                       f"{'is non-negative already' if method == 'cp-apr' else 'does not iterate'}")
    if mask is not None:
        if method not in ("hooi", "cp"):
            raise CLIError(f"--mask applies to --method hooi and cp; received --method {method}")
        if nonnegative:
            raise CLIError("pass either --mask or --nonnegative, not both (missing data is fitted by hooi and cp)")
        if not mask.exists():
            raise CLIError(f"--mask {str(mask)!r} does not exist; expected a boolean .npy of the input's shape")
        if not mask.is_file():  # (a directory, a FIFO, a device)
            raise CLIError(f"--mask {str(mask)!r} is not a regular file; expected a boolean .npy of the input's "
                           "shape")


def run_extra(X, method, rank, rk, target, tol, max_iter, seed, progress, device, nonnegative, mask):
    """Run cp-apr, a non-negative or a masked decomposition for `tuckerkit decompose`."""
    import numpy as np

    import tuckerkit as tk
    from tuckerkit.engine import DenseTensor

    if method == "cp-apr":
        return tk.cp_apr(X, rank, tol=tol, max_iter=max_iter, random_state=seed, callback=progress, device=device)
    if method == "hooi" and rk is None:
        rk = tk.st_hosvd(X, max_error=target, device=device).ranks
    if nonnegative:
        if method == "cp":
            return tk.non_negative_cp(X, rank, tol=tol, max_iter=max_iter, random_state=seed, callback=progress,
                                      device=device)
        return tk.non_negative_tucker(X, rk, tol=tol, max_iter=max_iter, random_state=seed, callback=progress,
                                      device=device)
    from tuckerkit.io._load import _check_npy_size

    with open(mask, "rb") as fh:
        head = fh.read(6)
    if head and head[:2] != b"PK" and head != b"\x93NUMPY":  # numpy would try it as a pickle ("object data")
        what = ("it looks like a text file" if all(32 <= b < 127 or b in (9, 10, 13) for b in head) else
                "it does not start with the .npy header")
        raise CLIError(f"--mask {str(mask)!r} is not a valid .npy file ({what}; expected a boolean array saved by "
                       "numpy.save)")
    if head == b"\x93NUMPY":
        _check_npy_size(mask, f"--mask {str(mask)!r}")
    try:
        m = np.load(mask, allow_pickle=False)
    except EOFError:  # (numpy's answer to an empty file, which click would take for Ctrl-D: "Aborted!")
        raise CLIError(f"--mask {str(mask)!r} could not be read as a .npy array (it is empty; expected a boolean "
                       "array saved by numpy.save)") from None
    except (ValueError, OSError) as exc:
        raise CLIError(f"--mask {str(mask)!r} could not be read as a .npy array ({exc})") from None
    if not isinstance(m, np.ndarray):  # an .npz archive (np.load's NpzFile holds the file open)
        m.close()
        raise CLIError(f"--mask {str(mask)!r} is an .npz archive; expected a boolean .npy of the input's shape")
    Xd = X.data if isinstance(X, DenseTensor) else X
    try:
        if method == "cp":
            return tk.cp_als(Xd, rank, mask=m, tol=tol, max_iter=max_iter, random_state=seed, callback=progress,
                             device=device)
        return tk.hooi(Xd, rk, mask=m, tol=tol, max_iter=max_iter, callback=progress, device=device)
    except (ValueError, TypeError) as exc:  # the library names its keyword; here the option and the file
        msg = str(exc)
        if msg.startswith("mask "):
            raise CLIError(f"--mask {str(mask)!r} {msg[len('mask '):]}") from None
        raise
