"""Whole CLI runs at the edges a review found (one line each, no traceback, nothing written on a refusal)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tuckerkit.cli import app
from typer.testing import CliRunner

import tuckerkit as tk
from tuckerkit.io import load_result


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def x(tmp_path):
    X = tk.datasets.make_low_rank_tucker((20, 18, 16), (4, 3, 5), random_state=0).data
    np.save(tmp_path / "x.npy", X)
    return tmp_path, X


def test_dtype_float32_refuses_a_tensor_it_would_zero_or_overflow(x):
    """--dtype float32 on a 1e-300 tensor made every entry 0 and reported fit 1.000000 for an all-zero model; on
    a 1e200 one it blamed NaN or infinity the file does not hold (a raw numpy overflow warning beside)."""
    d, X = x
    np.save(d / "tiny.npy", X * 1e-300)
    np.save(d / "big.npy", X * 1e200)
    res = _run("decompose", d / "tiny.npy", "--ranks", "4,3,5", "--dtype", "float32")
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert "has every value below float32's range" in res.output and "would make it all zero" in res.output
    for extra in ((), ("--memory-limit", "20KB")):
        res = _run("decompose", d / "big.npy", "--ranks", "4,3,5", "--dtype", "float32", *extra)
        assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
        assert "values beyond float32's range" in res.output and "NaN" not in res.output
    assert not list(d.glob("*.npz"))


def test_info_json_is_valid_json_when_the_norm_is_above_float64(x):
    d, X = x
    np.save(d / "huge.npy", np.sign(X) * 1e307)
    res = _run("info", d / "huge.npy", "--json")
    assert res.exit_code == 0
    info = json.loads(res.output, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert info["frobenius_norm"] is None and info["frobenius_norm_above_float64"] is True
    res = _run("info", d / "huge.npy")
    assert "Frobenius norm   above the largest float64 (1.8e+308)" in res.output


def test_a_folder_or_empty_name_is_named_as_such(x, monkeypatch):
    """'decompose .' and 'reconstruct ""' printed pathlib's "PosixPath('.') has an empty name"."""
    d, _ = x
    monkeypatch.chdir(d)
    res = _run("decompose", ".", "--ranks", "2,2,2")
    assert res.exit_code == 1 and res.output.startswith("error: input '.' is a directory; expected a tensor file")
    res = _run("reconstruct", "")
    assert res.exit_code == 1 and res.output.startswith("error: result '.' is a directory; expected a tuckerkit")


def test_reconstruct_names_a_file_that_is_no_result_before_any_output_check(x):
    """It asked for --force to overwrite the data file beside it, then refused the input once forced."""
    d, X = x
    np.savez(d / "plain.npz", X=X)
    np.save(d / "plain.npy", X)
    before = (d / "plain.npy").read_bytes()
    res = _run("reconstruct", d / "plain.npz")
    assert res.exit_code == 1 and "is not a valid tuckerkit result file: it holds X" in res.output
    assert "--force" not in res.output and (d / "plain.npy").read_bytes() == before


def test_reconstruct_takes_an_upper_case_npy_output(x):
    d, _ = x
    assert _run("decompose", d / "x.npy", "--ranks", "3,3,3", "-o", d / "UP.NPZ", "-q").exit_code == 0
    res = _run("reconstruct", d / "UP.NPZ", "-o", d / "UP.NPY")
    assert res.exit_code == 0, res.output
    assert np.load(d / "UP.NPY").shape == (20, 18, 16)


def test_nonnegative_max_error_says_when_the_fit_misses_it(x):
    """--nonnegative --max-error E took the unconstrained ST-HOSVD's ranks and returned an error above E with no
    word (and the summary called the HALS run 'hooi')."""
    d, X = x
    np.save(d / "pos.npy", np.abs(X))
    res = CliRunner().invoke(app, ["decompose", str(d / "pos.npy"), "--nonnegative", "--max-error", "0.05", "-q",
                                   "--max-iter", "30"])
    assert res.exit_code == 0, res.output
    model = load_result(d / "pos.tucker.npz")
    assert 1 - model.fit > 0.05
    assert (f"warning: --max-error 0.05 chose ranks {list(model.ranks)} from the unconstrained ST-HOSVD; the "
            f"non-negative fit's error is {1 - model.fit:.3g}, above it (pass larger --ranks)") in res.output
    assert "hooi (non-negative) of 20x18x16" in res.output


def test_cp_apr_with_a_memory_limit_or_scheduler_and_key_on_a_sparse_archive(x):
    """cp-apr with --memory-limit failed after the read naming SlabTensor (and only when the file did not fit);
    --key on a sparse .npz was blamed on a csf= the user never passed."""
    d, _ = x
    for opt in (("--memory-limit", "10KB"), ("--scheduler", "local")):
        res = _run("decompose", d / "x.npy", "--method", "cp-apr", "--rank", "3", *opt)
        assert res.exit_code == 1, res.output
        assert res.output == (f"error: --method cp-apr reads its counts into memory; {opt[0]} applies to hooi, "
                              "hosvd and cp\n")
    tk.datasets.make_sparse_tensor((30, 25, 20), 800, random_state=2).data.save_npz(d / "s.npz")
    res = _run("decompose", d / "s.npz", "--key", "coords", "--ranks", "2,2")
    assert res.exit_code == 1 and res.output.startswith("error: --key applies to files holding several dense "
                                                        "arrays;"), res.output
    assert not list(d.glob("*.tucker.npz")) and not list(d.glob("*.cp.npz"))
