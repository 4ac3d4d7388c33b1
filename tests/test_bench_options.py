"""The benchmark scripts' own options: a bad value is one line naming the option (argparse's exit 2)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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
    ("spills.py", ["--min-ops", "0"], r"argument --min-ops: expected a positive integer; received '0'"),
    ("whole_run.py", ["--name", "w/x"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                        r"received 'w/x'"),
    ("whole_run.py", ["--repeat", "0"], r"argument --repeat: expected a positive integer; received '0'"),
    ("roofline.py", ["--name", "r/x"], r"argument --name: expected a file stem of letters, digits, _ and -; "
                                       r"received 'r/x'"),
    ("roofline.py", ["--repeat", "-1"], r"argument --repeat: expected a positive integer; received '-1'"),
])
def test_benchmarks_reject_bad_options_in_one_line(script, args, message):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert re.search(message, out.stderr.strip().splitlines()[-1]), out.stderr


def test_ttm_bounds_pair_the_gemm_peak_and_keep_the_runs_highest_beside(monkeypatch):
    """benchmarks/ttm.py: every case's bound is max(its read, flops / the GEMM peak timed in the case's own
    rounds), as its read is timed beside its calls; beside it the bound from the dtype's highest peak sample of
    the run (stricter: a peak sampled in a loaded minute cannot loosen it); ratios follow."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    # (the script's _quiet_blas sets OPENBLAS_THREAD_TIMEOUT where unset: set here, it is undone after the test)
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    import ttm

    rows = [{"dtype": "float64", "t_read": 2e-3, "flops": 5.12e8, "t_tuckerkit": 6e-3, "gemm_peak": 0.8e11},
            {"dtype": "float64", "t_read": 2e-3, "flops": 1.6e8, "t_tuckerkit": 3e-3, "gemm_peak": 1e11},
            {"dtype": "float32", "t_read": 1e-3, "flops": 5.12e8, "t_tuckerkit": 3e-3, "gemm_peak": 2e11}]
    ttm._rebound(rows, {"float64": 1e11, "float32": 2e11})
    assert [r["t_bound"] for r in rows] == pytest.approx([6.4e-3, 2e-3, 2.56e-3], rel=1e-12)
    assert [r["t_bound_top_peak"] for r in rows] == pytest.approx([5.12e-3, 2e-3, 2.56e-3], rel=1e-12)
    assert [r["top_gemm_peak"] for r in rows] == [1e11, 1e11, 2e11]
    assert rows[0]["ratio_bound"] == pytest.approx(6 / 6.4, rel=1e-12)
    assert rows[0]["ratio_bound_top_peak"] == pytest.approx(6 / 5.12, rel=1e-12)
    assert rows[1]["ratio_bound"] == pytest.approx(1.5, rel=1e-12)
    assert rows[2]["ratio_bound"] == pytest.approx(3 / 2.56, rel=1e-12)
    assert all("ratio_bound_numpy_read" not in r for r in rows)  # (no numpy reads timed: nothing made up)


def test_ttm_runs_report_each_cases_median_run(monkeypatch):
    """benchmarks/ttm.py --runs: every run's bounds from the highest peak of all runs, then each case the whole row
    of its median run by the ratio to the bound (an even count: the slower middle one), every run's ratio kept;
    the summary counts the cases within the floor in each run."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    import ttm

    base = {"dtype": "float64", "shape": [8, 8, 8], "rank": 2, "compiled": "none", "kind": "gemm",
            "ratio_blas": 1.0, "ratio_gemm": 1.0, "speedup_tensorly": 2.0, "speedup_pyttb": 3.0, "correct": True,
            "flops": 1e8, "gemm_peak": 1e11}

    def run(tag, t0, t1):
        return [{**base, "mode": 0, "t_read": 1e-3, "t_tuckerkit": t0, "tag": tag},
                {**base, "mode": 1, "t_read": 2e-3, "t_tuckerkit": t1, "tag": tag}]

    runs = [run("a", 1.2e-3, 2.0e-3), run("b", 1.6e-3, 4.0e-3), run("c", 1.4e-3, 3.2e-3)]
    rows = ttm._median_runs(runs, {"float64": 1e11})
    assert [r["tag"] for r in rows] == ["c", "c"]  # (case 0: 1.2 / 1.6 / 1.4 -> 1.4; case 1: 1.0 / 2.0 / 1.6)
    assert [r["ratio_bound"] for r in rows] == pytest.approx([1.4, 1.6], rel=1e-12)
    assert rows[0]["ratio_bound_runs"] == pytest.approx([1.2, 1.6, 1.4], rel=1e-12)
    two = ttm._median_runs([run("a", 1.2e-3, 2.0e-3), run("b", 1.6e-3, 4.0e-3)], {"float64": 1e11})
    assert [r["tag"] for r in two] == ["b", "b"]
    rows[0]["dtype"] = rows[1]["dtype"] = "float64"
    s = ttm.summarize(rows)["float64"]
    assert s["runs"] == 3 and s["cases_within_floor_by_run"] == [2, 0, 1]
    md = ttm.markdown(rows, ttm.summarize(rows))
    assert "median of its 3 whole runs; within 1.5x in each run: 2, 0, 1 of 2." in md


def test_ttm_reports_the_issues_numpy_read_bound_beside_the_verdict(monkeypatch):
    """benchmarks/ttm.py: where numpy's two reads were timed, each row also gets the bound as issue 15 words it
    (the faster of numpy's reduce on one thread and split, or flops / peak), summarized and tabled beside the
    verdict, which stays the stricter bound (the fastest of all four reads)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    import ttm

    base = {"dtype": "float64", "shape": [8, 8, 8], "rank": 2, "mode": 0, "compiled": "none", "kind": "gemm",
            "ratio_blas": 1.0, "ratio_gemm": 1.0, "speedup_tensorly": 2.0, "speedup_pyttb": 3.0, "correct": True,
            "gemm_peak": 1e11}
    rows = [{**base, "t_read": 1e-3, "t_read_1": 3e-3, "t_read_all": 2e-3, "flops": 1e8, "t_tuckerkit": 2.4e-3},
            {**base, "mode": 1, "t_read": 1e-3, "t_read_1": 1.5e-3, "t_read_all": 2e-3, "flops": 4e8,
             "t_tuckerkit": 4e-3}]
    ttm._rebound(rows, {"float64": 1e11})
    assert [r["t_bound"] for r in rows] == [1e-3, 4e-3]  # (the verdict's bound: the fastest read, or flops)
    assert [r["t_bound_numpy_read"] for r in rows] == [2e-3, 4e-3]  # numpy's faster read, or flops / peak
    assert [r["ratio_bound"] for r in rows] == pytest.approx([2.4, 1.0], rel=1e-12)
    assert [r["ratio_bound_numpy_read"] for r in rows] == pytest.approx([1.2, 1.0], rel=1e-12)
    s = ttm.summarize(rows)["float64"]
    assert (s["cases_within_floor"], s["cases_within_floor_numpy_read"]) == (1, 2)
    assert s["worst_ratio_bound_numpy_read"] == pytest.approx(1.2, rel=1e-12)
    md = ttm.markdown(rows, ttm.summarize(rows))
    assert "| 2.40 | 2.40 | 1.20 |" in md and "1/2 cases within 1.5x" in md and "2/2 within 1.5x" in md


def test_the_read_bound_is_the_fastest_read_and_the_compiled_read_reads_all(monkeypatch):
    """benchmarks/roofline.py: the bound's read is the fastest of the four reads (numpy's reduce on one thread and
    split, the compiled loop on one thread and split), other timings untouched, removed with ``pop``; the compiled
    read goes over every element (its sum of squares is numpy's to rounding)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import roofline

    t = {"tuckerkit": 1.0, "read_1": 4.0, "read_all": 3.0, "read_kernel_1": 2.0, "read_kernel_all": 2.5}
    assert roofline.fastest_read(t) == 2.0 and len(t) == 5
    assert roofline.fastest_read(t, pop=True) == 2.0 and t == {"tuckerkit": 1.0}
    X = np.arange(1.0, 3001.0).reshape(10, 300)
    with ThreadPoolExecutor(2) as pool:
        fns = roofline.read_fns(X, pool, 2)
        assert sorted(fns) == ["read_1", "read_all", "read_kernel_1", "read_kernel_all"]
        assert float(fns["read_kernel_1"]()[0]) == pytest.approx(float(X.ravel() @ X.ravel()), rel=1e-13)
        halves = fns["read_kernel_all"]()
        assert float(halves[0][0] + halves[1][0]) == pytest.approx(float(X.ravel() @ X.ravel()), rel=1e-13)



def test_steady_iteration_takes_whole_cycles_of_the_multi_sweep_tree(monkeypatch):
    """benchmarks/roofline.py: the steady iteration is the mean over the last whole cycles of CYCLE iterations,
    so that iterations of one and two passes (the multi-sweep tree's 3 passes every 2 iterations, 4 every 3)
    count alike where a median would take one kind; the first iteration (no stamp before it) is never in it;
    a run shorter than a cycle takes all its gaps; fewer than two callbacks is a one-line error."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import roofline

    assert roofline.CYCLE == 6
    # 11 callbacks: 10 gaps alternating 1 s (one pass) and 2 s (two): the last 6 gaps, 9 s over 6
    stamps = [0.0]
    for k in range(10):
        stamps.append(stamps[-1] + (1.0 if k % 2 else 2.0))
    assert roofline.steady_iteration(stamps) == pytest.approx(1.5, rel=1e-15)
    # 4-mode HOOI's cycle of three (1, 1, 2): 13 callbacks, the last 12 gaps -> 16 s over 12
    stamps = [5.0]
    for k in range(12):
        stamps.append(stamps[-1] + (2.0 if k % 3 == 2 else 1.0))
    assert roofline.steady_iteration(stamps) == pytest.approx(16 / 12, rel=1e-15)
    assert roofline.steady_iteration([0.0, 3.0, 4.0]) == pytest.approx(2.0, rel=1e-15)  # fewer gaps than a cycle
    with pytest.raises(ValueError, match=r"^steady_iteration needs the callbacks of at least 2 iterations; "
                                         r"received 1$"):
        roofline.steady_iteration([1.0])


def test_paired_ratios_set_each_cycle_against_the_read_next_to_its_run(monkeypatch):
    """benchmarks/roofline.py: steady_cycles splits a run into the whole cycles steady_iteration takes together
    (their mean is its value), and paired_ratios sets each against the R of the read sampled after that run, so
    that a drift of the machine between runs moves the cycle and its R together; no runs is a one-line error."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import roofline

    # 14 callbacks: the first gap is dropped (13 gaps: 2 whole cycles of 6, the last ones); cycles of 9 s and 12 s
    stamps = [0.0, 100.0]
    for k in range(12):
        stamps.append(stamps[-1] + ((1.0 if k % 2 else 2.0) if k < 6 else 2.0))
    cycles = roofline.steady_cycles(stamps)
    assert cycles == [pytest.approx(1.5, rel=1e-15), pytest.approx(2.0, rel=1e-15)]
    assert sum(cycles) / 2 == pytest.approx(roofline.steady_iteration(stamps), rel=1e-15)
    assert roofline.steady_cycles([0.0, 3.0, 4.0]) == [pytest.approx(2.0, rel=1e-15)]  # shorter than a cycle
    # a run on a machine twice as slow, with its read twice as slow: the same ratio as the fast run's
    assert roofline.paired_ratios([([1.5, 1.2], 0.5), ([3.0], 1.0)], 2, 0.0) == [
        pytest.approx(1.5, rel=1e-15), pytest.approx(1.2, rel=1e-15), pytest.approx(1.5, rel=1e-15)]
    # R = passes x read + the factor work (timed once, the same for every run)
    assert roofline.paired_ratios([([3.0], 1.0), ([3.0], 0.25)], 2, 1.0) == [
        pytest.approx(1.0, rel=1e-15), pytest.approx(2.0, rel=1e-15)]
    with pytest.raises(ValueError, match=r"^paired_ratios needs at least one run's cycles and read; received none$"):
        roofline.paired_ratios([], 2, 0.0)
    # the read paired with a run is that sample of the read whose median is the fastest (the pooled bound's
    # read), not the least of the sample's reads
    reads = roofline.InterleavedRead(np.ones(64))
    reads.samples = {"read_1": [3.0, 1.5, 2.0], "read_all": [1.0, 5.0, 5.0]}
    assert [reads.at(i) for i in range(3)] == [3.0, 1.5, 2.0]
    assert reads.read() == 2.0
    reads = roofline.InterleavedRead(np.ones(64))
    first = reads.sample(after="tuckerkit")
    assert (first, reads.sample(after="pyttb"), reads.sample(after="tuckerkit")) == (0, 1, 2)
    assert all(len(v) == 3 for v in reads.samples.values())
    reads.read()
    # the medians of the read after each library's calls (the pooled bound's read method's samples)
    reads.samples = {"read_1": [1.0, 4.0, 3.0, 5.0], "read_all": [9.0, 9.0, 9.0, 9.0]}
    reads.after = ["tuckerkit", "pyttb", "tuckerkit", "pyttb"]
    assert reads.by_caller() == {"pyttb": 4.5, "tuckerkit": 2.0}

@pytest.mark.skipif(not all(shutil.which(t) for t in ("as", "objcopy", "objdump")) or sys.platform != "linux",
                    reason="needs GNU binutils (as, objcopy, objdump) on Linux")
def test_spills_counts_vector_stack_accesses_per_loop(monkeypatch, tmp_path):
    """benchmarks/spills.py: in assembled machine code, each loop with fused multiply-adds is found with its
    FMAs and its vector loads / stores off the stack pointer (a loop that keeps an accumulator on the stack:
    2; one in registers: 0); a loop without FMAs is not reported."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    import spills

    (tmp_path / "k.s").write_text(
        ".intel_syntax noprefix\n.text\n"
        "spilled:\n vfmadd231pd zmm0, zmm1, zmmword ptr [rsp+64]\n vmovupd zmmword ptr [rsp+128], zmm0\n"
        " vfmadd231pd zmm2, zmm1, zmm3\n dec rcx\n jnz spilled\n"
        "clean:\n vfmadd231pd zmm4, zmm5, zmm6\n dec rdx\n jnz clean\n"
        "plain:\n add rax, 1\n dec r8\n jnz plain\n ret\n")
    subprocess.run(["as", "-o", str(tmp_path / "k.o"), str(tmp_path / "k.s")], check=True)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(tmp_path / "k.o"), str(tmp_path / "k.bin")],
                   check=True)
    found = spills.loops((tmp_path / "k.bin").read_bytes(), shutil.which("objdump"))
    assert [(d["offset"], d["fma"], d["stack_vector_ops"]) for d in found] == [(0, 2, 2), (found[1]["offset"], 1, 0)]
    assert found[1]["offset"] > 0 and found[0]["instructions"] == 5 and found[1]["instructions"] == 3


def test_cp_runs_report_each_cases_median_run(monkeypatch):
    """benchmarks/cp.py --runs: each case the whole row of its median run by ``/ R flops`` (an even count: the
    slower middle one), every run's ratios and steady times kept."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    import cp

    def row(tag, flops_ratio):
        return {"tag": tag, "ratio_roofline": 2 * flops_ratio, "ratio_roofline_flops": flops_ratio,
                "ratio_roofline_flops_top_peak": 1.1 * flops_ratio, "steady_iteration_ms": 10 * flops_ratio}

    runs = [[row("a", 1.3), row("a", 1.0)], [row("b", 1.1), row("b", 1.2)], [row("c", 1.2), row("c", 0.9)]]
    rows = cp._median_runs(runs)
    assert [r["tag"] for r in rows] == ["c", "a"]
    assert rows[0]["ratio_roofline_flops_runs"] == [1.3, 1.1, 1.2]
    assert rows[1]["steady_iteration_ms_runs"] == pytest.approx([10.0, 12.0, 9.0])
    assert [r["tag"] for r in cp._median_runs(runs[:2])] == ["a", "b"]
    assert "ratio_roofline_flops_runs" not in cp._median_runs(runs[:1])[0]
