"""Typer application. Commands parse, call the public API and format; nothing else."""

from __future__ import annotations

import typer

from tuckerkit._version import __version__

app = typer.Typer(
    name="tuckerkit",
    help="Tucker and CP tensor decompositions on a transpose-free contraction engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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

    Example: tuckerkit plan "mk,pkn->mnp" --shapes 64x64,64x64x64
    """


@app.command("plan")
def plan_cmd(
    spec: str = typer.Argument(..., help="Einsum-style subscripts for two operands, e.g. 'mk,pkn->mnp'."),
    shapes: str = typer.Option(..., "--shapes", help="Operand shapes, e.g. 64x64,64x64x64."),
    order: str = typer.Option("C", "--order", help="Memory order of the operands: C or F."),
    dtype: str = typer.Option("float64", "--dtype", help="float32 or float64."),
) -> None:
    """Print the contraction plan for operands of the given shapes.

    Example: tuckerkit plan "mk,pkn->mnp" --shapes 64x64,64x64x64 --order F
    """
    import numpy as np

    from tuckerkit.engine import plan_contraction

    try:
        parts = [tuple(int(d) for d in s.split("x")) for s in shapes.split(",")]
        if len(parts) != 2:
            raise ValueError(f"--shapes names {len(parts)} shape(s); expected two, e.g. 64x64,64x64x64")
        if order not in ("C", "F"):
            raise ValueError(f"--order {order!r} is not valid; expected C or F")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"--dtype {dtype!r} is not valid; expected float32 or float64")
        A = np.empty(parts[0], dtype=dtype, order=order)  # type: ignore[call-overload]
        B = np.empty(parts[1], dtype=dtype, order=order)  # type: ignore[call-overload]
        typer.echo(plan_contraction(spec, A, B).explain())
    except (ValueError, TypeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def main() -> None:
    """Console-script entry point."""
    app()
