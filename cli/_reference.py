"""The command-line reference as Markdown, generated from the typer application itself (the docs build writes
it to ``docs/_generated/cli_reference.md``), so the page lists exactly the commands and options that exist."""

from __future__ import annotations

import inspect
from typing import Any

import typer


def _option_line(param: Any) -> str:
    if param.param_type_name == "argument":
        name = param.metavar or (param.name or "").upper()
        head = f"`{name}`"
        required = " Required." if param.required else ""
    elif param.param_type_name == "option":
        names = ", ".join(param.opts + param.secondary_opts)
        meta = "" if param.is_flag else f" {param.metavar or (param.type.name or '').upper()}"
        head = f"`{names}{meta}`"
        required = " Required." if param.required else ""
        if not param.is_flag and not param.required and param.default is not None and param.show_default is not False:
            required += f" Default: `{param.default}`."
    else:  # pragma: no cover - click has no other kind
        head, required = f"`{param.name}`", ""
    text = (getattr(param, "help", None) or "").strip()
    return f"- {head}: {text}{required}".rstrip()


def _command_section(name: str, cmd: Any, parent: Any) -> list[str]:
    ctx = cmd.make_context(name, [], parent=parent, resilient_parsing=True)
    usage = " ".join(["tuckerkit", name, *cmd.collect_usage_pieces(ctx)])
    doc = inspect.cleandoc(cmd.help or "")
    paragraphs = [p.strip() for p in doc.split("\n\n") if p.strip()]
    lines = [f"## `tuckerkit {name}`", "", "```text", usage, "```", ""]
    examples = [p for p in paragraphs if p.startswith("Example:")]
    for p in paragraphs:
        if not p.startswith("Example:"):
            lines += [" ".join(p.split()), ""]
    for p in examples:
        lines += ["```bash", p[len("Example:"):].strip(), "```", ""]
    params = [p for p in cmd.get_params(ctx) if p.name != "help"]
    args = [p for p in params if p.param_type_name == "argument"]
    opts = [p for p in params if p.param_type_name == "option"]
    if args:
        lines += ["Arguments:", ""] + [_option_line(p) for p in args] + [""]
    if opts:
        lines += ["Options:", ""] + [_option_line(p) for p in opts] + ["- `--help`: Show the help and exit.", ""]
    return lines


def reference_markdown(app: typer.Typer | None = None) -> str:
    """Every command of the ``tuckerkit`` application with its usage line, description, example, arguments
    and options (help text and default), as Markdown sections (``##`` per command).

    Parameters
    ----------
    app : typer.Typer, optional
        Default: the ``tuckerkit`` application.

    Returns
    -------
    str

    Examples
    --------
    >>> from tuckerkit.cli._reference import reference_markdown
    >>> text = reference_markdown()
    >>> "## `tuckerkit decompose`" in text and "`--max-error E`" in text
    True
    """
    if app is None:
        from tuckerkit.cli._app import app as default_app

        app = default_app
    group: Any = typer.main.get_command(app)
    root = group.make_context("tuckerkit", [], resilient_parsing=True)
    lines: list[str] = []
    for name in group.list_commands(root):
        cmd = group.get_command(root, name)
        if cmd is not None and not cmd.hidden:
            lines += _command_section(name, cmd, root)
    return "\n".join(lines).rstrip() + "\n"
