"""The benchmark scripts' own options: a bad value is one line naming the option (argparse's exit 2)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("script", "args", "message"), [
    ("ttm.py", ["--ranks", "10,x"], r"argument --ranks: expected comma-separated positive integers such as 10,32; "
                                    r"received '10,x'"),
    ("ttm.py", ["--ranks", "0"], r"argument --ranks: expected comma-separated positive integers"),
    ("ttm.py", ["--name", "../ttm"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                     r"received '\.\./ttm'"),
    ("cp.py", ["--name", "cp/x"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                  r"received 'cp/x'"),
    ("tucker.py", ["--name", ""], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                  r"received ''"),
    ("defaults.py", ["--name", "a b"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                       r"received 'a b'"),
    ("contractions.py", ["--name", "../c"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                            r"received '\.\./c'"),
    ("shapes.py", ["--iters", "0"], r"argument --iters: expected a positive integer; received '0'"),
    ("shapes.py", ["--repeat", "x"], r"argument --repeat: expected a positive integer; received 'x'"),
])
def test_benchmarks_reject_bad_options_in_one_line(script, args, message):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert re.search(message, out.stderr.strip().splitlines()[-1]), out.stderr
