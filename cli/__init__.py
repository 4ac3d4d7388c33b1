"""The ``tuckerkit`` command line (shipped inside the wheel as ``tuckerkit.cli``)."""

from tuckerkit.cli._app import app, main

__all__ = ["app", "main"]
