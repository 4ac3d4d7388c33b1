"""The benchmark scripts' own options: a bad value is one line naming the option (argparse's exit 2)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("args", "message"), [
    (["--ranks", "10,x"], r"argument --ranks: expected comma-separated positive integers such as 10,32; "
                          r"received '10,x'"),
    (["--ranks", "0"], r"argument --ranks: expected comma-separated positive integers"),
    (["--name", "../ttm"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                           r"received '\.\./ttm'"),
])
def test_ttm_benchmark_rejects_bad_options_in_one_line(args, message):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ttm.py"), *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert re.search(message, out.stderr.strip().splitlines()[-1]), out.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--iters", "0"], r"argument --iters: expected a positive integer; received '0'"),
    (["--repeat", "x"], r"argument --repeat: expected a positive integer; received 'x'"),
])
def test_shapes_benchmark_rejects_bad_options_in_one_line(args, message):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "shapes.py"), *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert re.search(message, out.stderr.strip().splitlines()[-1]), out.stderr
