"""Option values converted without pydantic, as typer would convert them.

typer converts every option value through a pydantic ``TypeAdapter`` built on first use: the command line
paid for importing pydantic and building one adapter per option of the command (about 0.2 s of every run,
measured on a 2-core machine) to turn strings into ``int``, ``float``, ``str`` and ``Path``. The values those
options take in practice (``--rank 16``, ``--stop-tol 1e-5``, ``-o out.npz``, defaults) are converted here
directly, to the same objects; anything else (a malformed number, an empty path, a type not listed) goes to
typer's own conversion, built then, so that its results and error messages are typer's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# strings on which Python's int()/float() and pydantic's lax int/float parsing agree (checked in the tests);
# the rest (underscores, signs, spaces, inf, nan, huge integers) go to typer
_INT = re.compile(r"-?[0-9]{1,18}")
_FLOAT = re.compile(r"-?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][-+]?[0-9]{1,3})?")

_NOT_DONE = object()


def _convert(annotation: Any, value: Any, param: Any, ctx: Any) -> Any:
    """The converted value, or ``_NOT_DONE`` for typer to convert."""
    if annotation is str:
        return value if type(value) is str else _NOT_DONE
    if annotation is bool:  # flags (typer passes their bool values through; this sees only other values)
        return value if type(value) is bool else _NOT_DONE
    if annotation is int or annotation is float:  # a number already, or text in the plain decimal form
        if type(value) is annotation:
            return value
        if type(value) is str and (_INT if annotation is int else _FLOAT).fullmatch(value):
            return annotation(value)
        return _NOT_DONE
    if annotation is Path:
        if type(value) is str and value and "\x00" not in value:
            value = Path(value)
        if not isinstance(value, Path):
            return _NOT_DONE
        from typer._click.exceptions import BadParameter
        from typer._param_types import coerce_cli_path

        try:  # typer's checks (exists, readable, ...) on a Path need no pydantic
            return coerce_cli_path(value, param.type_descriptor.parameter_info, path_type=Path, param=param, ctx=ctx)
        except BadParameter:
            return _NOT_DONE  # typer raises it again, with the message built from the text given
    return _NOT_DONE


class _Coercion:
    """Stands in for typer's runtime coercion of one parameter (``param.get_runtime_param()``)."""

    def __init__(self, param: Any):
        self.param = param
        self.typer_own: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # typer's own answer for a single-valued parameter left unset
            return None
        out = _convert(param.type_descriptor.annotation, value, param, ctx)
        if out is not _NOT_DONE:
            return out
        if self.typer_own is None:
            from typer._coercion import build_runtime_param

            self.typer_own = build_runtime_param(param.type_descriptor)
        try:
            return self.typer_own.coerce(value, param=param, ctx=ctx)
        except Exception as exc:  # typer's error, its message unchanged; the text given kept for the CLI's line
            exc.received = value  # type: ignore[attr-defined]
            raise


def _simple(param: Any) -> bool:
    """A single-valued parameter of a plain type, no custom parser, range or choices."""
    desc = getattr(param, "type_descriptor", None)
    info = getattr(desc, "parameter_info", None)
    if desc is None or info is None or getattr(param, "_runtime_param", 0) is not None:
        return False
    if param.nargs != 1 or param.multiple or desc.file_annotation is not None:
        return False
    if getattr(info, "parser", None) is not None or getattr(info, "min", None) is not None:
        return False
    if getattr(info, "max", None) is not None or getattr(info, "path_type", None) is not None:
        return False
    return desc.annotation in (str, int, float, bool, Path)


def install(params: list) -> None:
    """Convert the simple parameters of a command here (see the module's docstring); typer's conversion
    stays in place for the others, and wherever typer's internals are not the ones this was written for."""
    for p in params:
        if _simple(p):
            p._runtime_param = _Coercion(p)
