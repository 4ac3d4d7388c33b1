"""The benchmark scripts' own options: a bad value is one line naming the option (argparse's exit 2)."""

import os
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
    ("tiny_modes.py", ["--repeat", "0"], r"argument --repeat: expected a positive integer; received '0'"),
    ("tiny_modes.py", ["--name", "../t"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                          r"received '\.\./t'"),
])
def test_benchmarks_reject_bad_options_in_one_line(script, args, message):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert re.search(message, out.stderr.strip().splitlines()[-1]), out.stderr


def test_ttm_bounds_take_the_runs_highest_gemm_peak(monkeypatch):
    """benchmarks/ttm.py: every case's bound is max(its read, flops / the dtype's highest peak sample of the run),
    so a peak sampled in a loaded minute cannot loosen the flops bound; ratios follow."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    # (the script's _quiet_blas sets OPENBLAS_THREAD_TIMEOUT where unset: set here, it is undone after the test)
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    import ttm

    rows = [{"dtype": "float64", "t_read": 2e-3, "flops": 5.12e8, "t_tuckerkit": 6e-3},
            {"dtype": "float64", "t_read": 2e-3, "flops": 1.6e8, "t_tuckerkit": 3e-3},
            {"dtype": "float32", "t_read": 1e-3, "flops": 5.12e8, "t_tuckerkit": 3e-3}]
    ttm._rebound(rows, {"float64": 1e11, "float32": 2e11})
    assert [r["t_bound"] for r in rows] == [5.12e-3, 2e-3, 2.56e-3]
    assert [r["gemm_peak"] for r in rows] == [1e11, 1e11, 2e11]
    assert rows[0]["ratio_bound"] == pytest.approx(6 / 5.12, rel=1e-12)
    assert rows[1]["ratio_bound"] == pytest.approx(1.5, rel=1e-12)
    assert rows[2]["ratio_bound"] == pytest.approx(3 / 2.56, rel=1e-12)
