"""Packaging: the import is light, the console script works, the CLI stub answers."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tuckerkit.cli import app
from typer.testing import CliRunner

import tuckerkit


def test_import_does_not_pull_optional_heavy_packages():
    code = (
        "import sys, tuckerkit; "
        "bad = [m for m in ('cupy', 'tensorly', 'pyttb', 'matplotlib', 'numba', 'sklearn') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_names_exported():
    for name in tuckerkit.__all__:
        assert hasattr(tuckerkit, name)


def test_cli_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout.strip() == f"tuckerkit {tuckerkit.__version__}"


def test_cli_plan_prints_notation():
    res = CliRunner().invoke(app, ["plan", "mk,pkn->mnp", "--shapes", "8x8,8x8x8"])
    assert res.exit_code == 0, res.output
    assert "C_{mn[p]} = A_{mk} B_{[p]kn}" in res.stdout and "strided_batched_gemm" in res.stdout


def test_cli_plan_bad_input_is_one_line_exit_1():
    res = CliRunner().invoke(app, ["plan", "mk,pkn->mnp", "--shapes", "8x8,9x9x9"])
    assert res.exit_code == 1
    assert res.output.strip() == (
        "error: index 'k' has size 8 in A but size 9 in B; contracted and shared indices must have equal sizes"
    )


def test_console_script_subprocess():
    """`make test` installs the package: its console script sits next to this interpreter and runs."""
    exe = shutil.which("tuckerkit", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert exe is not None, "the tuckerkit console script is not installed next to this interpreter"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"tuckerkit {tuckerkit.__version__}"
