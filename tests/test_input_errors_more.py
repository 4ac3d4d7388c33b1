"""Bad input gets a clear one-line error and loses nothing, second batch of the reviewer's confirmed defects:
corrupt .npy headers, files that are not the archive they claim to be, COOTensor's coordinates and shape, the
engine helpers' matrices and ``out=``, ``plan --shapes``, result metadata, options a format does not use, and
the ranks message."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_invoke, folder_state, one_line_error

import tuckerkit as tk
from tuckerkit.io import TensorFileError, load_metadata, load_result, load_tensor, open_tensor, save_result
from tuckerkit.sparse import COOTensor


def _npy(path: Path, shape, data_bytes: int, descr: str = "<f8") -> Path:
    """A .npy file whose header claims ``shape`` followed by ``data_bytes`` zero bytes."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    path.write_bytes(buf.getvalue() + b"\0" * data_bytes)
    return path


def _size_message(p, shape, claimed: int, present: int, dtype="float64") -> str:
    fault = ("the file is truncated or corrupt" if claimed > present else
             "a .npy file holds exactly the bytes its header claims")
    return (f"{str(p)!r} is not a valid .npy file (its header claims an array of shape {tuple(shape)} and dtype "
            f"{dtype} ({claimed:,} bytes) but {present:,} bytes of data are present; {fault})")


# -------------------------------------------------------------------------------------- 1. corrupt .npy headers
def test_a_truncated_npy_names_the_claimed_and_the_present_size(tmp_path, x_file):
    p, _ = x_file
    t = tmp_path / "trunc.npy"
    t.write_bytes(p.read_bytes()[:200])  # the header (128 bytes) and 72 bytes of the 2,688
    message = _size_message(t, (6, 7, 8), 2688, 72)
    for mmap in (True, False):
        with pytest.raises(TensorFileError) as info:
            load_tensor(t, mmap=mmap)
        assert str(info.value) == message
    before = folder_state(tmp_path)
    res = cli_invoke(["decompose", t, "--ranks", "2,2,2", "-o", tmp_path / "out.npz"])
    one_line_error(res, message)
    one_line_error(cli_invoke(["info", t]), message)
    assert folder_state(tmp_path) == before


def test_a_header_claiming_more_than_the_file_holds(tmp_path):
    p = _npy(tmp_path / "big.npy", (10, 10, 10), 800)
    with pytest.raises(TensorFileError) as info:
        open_tensor(p)
    assert str(info.value) == _size_message(p, (10, 10, 10), 8000, 800)


def test_a_header_claiming_a_huge_shape_warns_nothing(tmp_path):
    p = _npy(tmp_path / "huge.npy", (2**40, 2**40, 2**40), 800)
    claimed = 2**120 * 8
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TensorFileError) as info:
            load_tensor(p)
    assert str(info.value) == _size_message(p, (2**40, 2**40, 2**40), claimed, 800)
    assert [str(w.message) for w in caught] == []


def test_cli_huge_header_is_one_line_on_stderr(tmp_path):
    """The console script itself: numpy's two 'RuntimeWarning: overflow' lines came before the error."""
    p = _npy(tmp_path / "huge.npy", (2**40, 2**40, 2**40), 800)
    exe = Path(sys.executable).with_name("tuckerkit")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from tuckerkit.cli import main; main()"]
    proc = subprocess.run([*cmd, "info", str(p)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "default"})
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: " + _size_message(p, (2**40, 2**40, 2**40), 2**120 * 8, 800)], proc.stderr


def test_a_header_claiming_fewer_elements_than_the_file_holds_is_refused(tmp_path):
    p = _npy(tmp_path / "small.npy", (2, 2, 2), 800)
    message = _size_message(p, (2, 2, 2), 64, 800)
    with pytest.raises(TensorFileError) as info:
        load_tensor(p)
    assert str(info.value) == message
    one_line_error(cli_invoke(["info", p]), message)
    exact = _npy(tmp_path / "exact.npy", (2, 2, 2), 64)  # the bytes the header claims: read as before
    assert load_tensor(exact).shape == (2, 2, 2)


def test_a_corrupt_mask_is_one_line(tmp_path, x_file):
    p, _ = x_file
    m = _npy(tmp_path / "mask.npy", (6, 7, 8), 10, descr="|b1")
    before = folder_state(tmp_path)
    res = cli_invoke(["decompose", p, "--method", "cp", "--rank", "2", "--mask", m, "-o", tmp_path / "out.npz"])
    one_line_error(res, f"--mask {str(m)!r} is not a valid .npy file (its header claims an array of shape "
                         "(6, 7, 8) and dtype bool (336 bytes) but 10 bytes of data are present; the file is "
                         "truncated or corrupt)")
    assert folder_state(tmp_path) == before


# ---------------------------------------------------------------------- 2. a text file as .npz or as --mask
def test_a_text_file_named_npz_is_not_an_object_array(tmp_path):
    p = tmp_path / "t.npz"
    p.write_text("hello, this is text\n")
    message = (f"{str(p)!r} is not a valid .npz file (it looks like a text file; expected a zip archive saved by "
               "numpy.savez)")
    with pytest.raises(TensorFileError) as info:
        load_tensor(p)
    assert str(info.value) == message
    with pytest.raises(TensorFileError) as info:
        COOTensor.from_npz(p)
    assert str(info.value) == message
    with pytest.raises(TensorFileError, match=r"is not a valid tuckerkit result file: it is not a zip archive"):
        load_metadata(p)
    res = cli_invoke(["decompose", p, "--ranks", "1,1", "-o", tmp_path / "out.npz"])
    one_line_error(res, message)
    e = tmp_path / "e.npz"
    e.write_bytes(b"")
    with pytest.raises(TensorFileError, match=r"^'.*e\.npz' is not a valid \.npz file \(it is empty; expected a zip "
                                              r"archive saved by numpy\.savez\)$"):
        load_tensor(e)
    n = tmp_path / "n.npz"
    n.write_bytes(_npy(tmp_path / "n.npy", (2,), 16).read_bytes())
    with pytest.raises(TensorFileError, match=r"is not a valid \.npz file \(it is a \.npy file \(one array\); "):
        load_tensor(n)


def test_a_text_file_as_mask_is_not_pickled_data(tmp_path, x_file):
    p, _ = x_file
    m = tmp_path / "mask.npy"
    m.write_text("1 0 1\n")
    before = folder_state(tmp_path)
    res = cli_invoke(["decompose", p, "--method", "cp", "--rank", "2", "--mask", m, "-o", tmp_path / "out.npz"])
    one_line_error(res, f"--mask {str(m)!r} is not a valid .npy file (it looks like a text file; expected a "
                         "boolean array saved by numpy.save)")
    assert "pickle" not in res.output
    assert folder_state(tmp_path) == before


# ------------------------------------------------------------------------ 3. COOTensor's coordinates and shape
@pytest.mark.parametrize("coords, shape, exc, message", [
    (np.array([[1e30, 0, 0]]), (3, 3, 3), ValueError,
     "coords[:, 0] spans 1e+30..1e+30 but mode 0 has size 3; expected 0 <= index < 3"),
    (np.array([[1e30, 0, 0]]), None, ValueError,
     "coords[:, 0] spans 1e+30..1e+30, beyond the int64 range; expected indices 0 <= index < the mode size"),
    (np.array([[0, 0, -1e30]]), (3, 3, 3), ValueError,
     "coords[:, 2] spans -1e+30..-1e+30 but mode 2 has size 3; expected 0 <= index < 3"),
    (np.array([[2**63 + 5, 0, 0]], dtype=np.uint64), None, ValueError,
     "coords[:, 0] spans 9223372036854775813..9223372036854775813, beyond the int64 range; expected indices "
     "0 <= index < the mode size"),
    (np.array([[2**63 + 5, 0, 0]], dtype=np.uint64), (3, 3, 3), ValueError,
     "coords[:, 0] spans 9223372036854775813..9223372036854775813 but mode 0 has size 3; expected "
     "0 <= index < 3"),
    (np.array([["a", "0", "0"]]), (3, 3, 3), TypeError,
     "coords must be an integer array of shape (nnz, N); received dtype <U1"),
    (np.array([[np.nan, 0, 0]]), (3, 3, 3), ValueError,
     "coords contains 1 NaN or infinite value(s); expected integer indices"),
    (np.array([[0, 0, 0]]), (-3, 3, 3), ValueError,
     "shape (-3, 3, 3) has the negative size -3 in mode 0; expected mode sizes >= 1"),
    (np.array([[0, 0, 0]]), (3.5, 3, 3), TypeError, "shape[0] must be an integer; received 3.5 (float)"),
    (np.array([[0, 0, 0]]), (3, True, 3), TypeError, "shape[1] must be an integer; received True (bool)"),
    (np.array([[0, 0, 0]]), 3, TypeError, "shape must be a sequence of integers (one per mode); received 3"),
    (np.array([[0, 0, 0]]), (2**70, 3, 3), ValueError,
     f"shape ({2**70}, 3, 3) has the size {2**70} in mode 0, beyond the int64 range; expected mode sizes below "
     "2**63"),
])
def test_coo_tensor_refuses_bad_coords_and_shape(coords, shape, exc, message):
    with pytest.raises(exc) as info:
        COOTensor(coords, np.ones(coords.shape[0]), shape=shape)
    assert str(info.value) == message


def test_coo_tensor_keeps_valid_coords_and_shapes():
    assert COOTensor(np.array([[2, 0, 0]], dtype=np.uint64), [1.0], shape=(3, 3, 3)).shape == (3, 3, 3)
    assert COOTensor(np.array([[2.0, 1.0, 0.0]]), [1.0], shape=np.array([3, 3, 3])).shape == (3, 3, 3)
    assert COOTensor([[2, 1, 0]], [1.0], shape=(np.int64(3), 3, 3)).shape == (3, 3, 3)
    assert COOTensor([[2, 1, 0]], [1.0]).shape == (3, 2, 1)


# ------------------------------------------------------------------- 4. the engine helpers' matrices and out=
def test_khatri_rao_names_the_one_dimensional_matrix():
    with pytest.raises(ValueError) as info:
        tk.khatri_rao([np.ones(3), np.ones(3)])
    assert str(info.value) == "matrices[0] is 1-D (shape (3,)); expected a 2-D matrix of shape (I_0, R)"
    with pytest.raises(ValueError) as info:
        tk.khatri_rao([np.ones((3, 2)), np.ones(3)])
    assert str(info.value) == "matrices[1] is 1-D (shape (3,)); expected a 2-D matrix of shape (I_1, R)"
    with pytest.raises(TypeError) as info:
        tk.khatri_rao([np.ones((3, 2)), [[1, 2]]])
    assert str(info.value) == "matrices[1] is [[1, 2]]; expected a 2-D array of shape (I_1, R)"
    with pytest.raises(ValueError, match=r"^matrices\[1\] has shape \(3, 3\); expected 2-D with 2 columns like "
                                         r"matrices\[0\]$"):
        tk.khatri_rao([np.ones((3, 2)), np.ones((3, 3))])


def _read_only(shape):
    a = np.zeros(shape)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("call", [
    lambda out: tk.ttm(np.ones((3, 4, 5)), np.ones((2, 3)), 0, out=out),
    lambda out: tk.ttm(np.ones((3, 4, 5)), np.ones((2, 3)), 0, out=out, device="cpu"),
    lambda out: tk.contract("ij,jk->ik", np.ones((2, 3)), np.ones((3, 4)), out=out),
    lambda out: tk.engine.ttm_plan(np.ones((3, 4, 5)), np.ones((2, 3)), 0)(np.ones((3, 4, 5)), np.ones((2, 3)),
                                                                            out),
])
def test_out_that_is_not_an_array_is_named(call):
    with pytest.raises(TypeError) as info:
        call([[1]])
    assert str(info.value) == ("out must be a numpy array (a cupy array on the GPU) to write the result into; "
                               "received [[1]] (list)")


@pytest.mark.parametrize("call, shape", [
    (lambda out: tk.ttm(np.ones((3, 4, 5)), np.ones((2, 3)), 0, out=out), (2, 4, 5)),
    (lambda out: tk.contract("ij,jk->ik", np.ones((2, 3)), np.ones((3, 4)), out=out), (2, 4)),
    (lambda out: tk.engine.ttm_plan(np.ones((3, 4, 5)), np.ones((2, 3)), 0)(np.ones((3, 4, 5)), np.ones((2, 3)),
                                                                            out), (2, 4, 5)),
])
def test_a_read_only_out_is_named(call, shape):
    out = _read_only(shape)
    with pytest.raises(ValueError) as info:
        call(out)
    assert str(info.value) == (f"out is read-only (an array of shape {shape} and dtype float64); expected a "
                               "writeable array to write the result into")
    assert not out.any()


def test_a_read_only_out_may_still_shape_a_plan():
    """plan_contraction reads only out's strides: a read-only template is fine there."""
    plan = tk.engine.plan_contraction("ij,jk->ik", np.ones((2, 3)), np.ones((3, 4)), out=_read_only((2, 4)))
    out = np.zeros((2, 4))
    assert np.array_equal(plan(np.ones((2, 3)), np.ones((3, 4)), out), np.full((2, 4), 3.0))


# ---------------------------------------------------------------------------------------- 5. plan --shapes
@pytest.mark.parametrize("shapes, message", [
    ("-3x4,4x5", "--shapes '-3x4,4x5': operand 1 (-3x4) has the size -3; expected sizes >= 1"),
    ("0x4,4x5", "--shapes '0x4,4x5': operand 1 (0x4) has the size 0; expected sizes >= 1"),
    ("3x4,4x0", "--shapes '3x4,4x0': operand 2 (4x0) has the size 0; expected sizes >= 1"),
    ("99999999999x99999999999,99999999999x4",
     "--shapes '99999999999x99999999999,99999999999x4': operand 1 (99999999999x99999999999) would hold "
     "79,999,999,998,400,000,000,008 bytes; expected operands below 2**63 bytes"),
])
def test_cli_plan_refuses_bad_shapes_in_one_line(shapes, message):
    one_line_error(cli_invoke(["plan", "mk,kn->mn", "--shapes", shapes]), message)


def test_cli_plan_of_operands_that_cannot_be_allocated_names_shapes():
    res = cli_invoke(["plan", "mk,kn->mn", "--shapes", "400000x400000x400x400,4x5"])
    assert res.exit_code == 1, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert res.output.startswith("error: --shapes '400000x400000x400x400,4x5' cannot be planned here ("), res.output
    assert res.output.rstrip().endswith("; expected smaller operands"), res.output


# ------------------------------------------------------------------------------------- 6. result metadata
@pytest.fixture
def tucker_model(rng):
    return tk.hosvd(rng.standard_normal((4, 5, 6)), 2)


@pytest.mark.parametrize("metadata, exc, message", [
    ({"where": Path("x")}, TypeError, "metadata['where'] is PosixPath('x') (PosixPath); expected a JSON value (a "
                                      "string, number, bool, None, or a list or dict of them)"),
    ({"obj": {1, 2}}, TypeError, "metadata['obj'] is {1, 2} (set); expected a JSON value (a string, number, bool, "
                                 "None, or a list or dict of them)"),
    ({"score": float("nan")}, ValueError, "metadata['score'] is or holds a non-finite number (nan); expected "
                                          "finite numbers (JSON has no NaN or infinity)"),
    ({"scores": [1.0, math.inf]}, ValueError, "metadata['scores'] is or holds a non-finite number ([1.0, inf]); "
                                              "expected finite numbers (JSON has no NaN or infinity)"),
    ({"kind": "cp"}, ValueError, "metadata['kind'] is recorded from the result itself (kind, ranks, fit, n_iter, "
                                 "converged, dtype, shape, passes_per_iteration, log_likelihood, kkt_violation); "
                                 "choose another key"),
    ({"fit": 0.99}, ValueError, "metadata['fit'] is recorded from the result itself (kind, ranks, fit, n_iter, "
                                "converged, dtype, shape, passes_per_iteration, log_likelihood, kkt_violation); "
                                "choose another key"),
    # (a caller's input_sha256 replaced the file's, on which the CLI's reconstruct relies)
    ({"input_sha256": "0" * 64}, ValueError, "metadata['input_sha256'] is recorded from input_path (the decomposed "
                                             "file: its path and SHA-256); pass input_path=, or choose another key"),
    ({"input_path": "/elsewhere.npy"}, ValueError, "metadata['input_path'] is recorded from input_path (the "
                                                   "decomposed file: its path and SHA-256); pass input_path=, or "
                                                   "choose another key"),
    ({1: "one"}, TypeError, "metadata key 1 (int) is not a string; expected string keys"),
])
def test_save_result_refuses_metadata_it_cannot_store_faithfully(tmp_path, tucker_model, metadata, exc, message):
    if sys.platform == "win32" and "PosixPath" in message:  # pragma: no cover
        pytest.skip("POSIX path repr")
    with pytest.raises(exc) as info:
        save_result(tmp_path / "t.npz", tucker_model, metadata=metadata)
    assert str(info.value) == message
    assert not list(tmp_path.iterdir())


def test_save_result_stores_numpy_numbers_as_numbers_and_json_is_standard(tmp_path, tucker_model):
    p = save_result(tmp_path / "t.npz", tucker_model, metadata={"run": np.int64(7), "x": {"y": np.float32(2.5)}})
    meta = load_metadata(p)
    assert meta["run"] == 7 and meta["x"] == {"y": 2.5} and meta["kind"] == "tucker"
    with np.load(p) as z:
        text = str(z["metadata"])
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


def test_cli_info_shows_the_true_kind_and_no_none(tmp_path, tucker_model):
    p = save_result(tmp_path / "t.npz", tucker_model)
    res = cli_invoke(["info", p])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == f"file       {p} (Tucker result, tucker)"
    bare = tmp_path / "bare.npz"  # a result without a metadata member
    np.savez(bare, core=np.asarray(tucker_model.core),
             **{f"factors_{i}": np.asarray(U) for i, U in enumerate(tucker_model.factors)})
    assert isinstance(load_result(bare), tk.TuckerTensor)
    res = cli_invoke(["info", bare])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == f"file       {bare} (Tucker result)"
    assert "None" not in res.output


# -------------------------------------------------------------------- 7. options the file's format does not use
def test_key_and_shape_for_a_npy_are_refused(tmp_path, x_file):
    p, _ = x_file
    key_message = (f"--key / key='a' applies only to .npz, .mat, .h5 and .hdf5 files (it names the array to read); "
                   f"received the .npy file {str(p)!r}")
    shape_message = (f"--shape / shape=(1, 2, 3) applies only to .tns files (the shape of a sparse tensor); "
                     f"received the .npy file {str(p)!r}")
    for fn in (load_tensor, open_tensor):
        with pytest.raises(TensorFileError) as info:
            fn(p, key="a")
        assert str(info.value) == key_message
        with pytest.raises(TensorFileError) as info:
            fn(p, shape=(1, 2, 3))
        assert str(info.value) == shape_message
    before = folder_state(tmp_path)
    one_line_error(cli_invoke(["decompose", p, "--key", "a", "--ranks", "2,2,2", "-o", tmp_path / "o.npz"]),
                    key_message)
    one_line_error(cli_invoke(["decompose", p, "--shape", "1,2,3", "--ranks", "2,2,2", "-o", tmp_path / "o.npz"]),
                    shape_message)
    one_line_error(cli_invoke(["info", p, "--shape", "1,2,3"]), shape_message)
    one_line_error(cli_invoke(["ranks", p, "--key", "a"]), key_message)
    assert folder_state(tmp_path) == before


def test_key_for_a_tns_and_shape_for_a_npz_are_refused(tmp_path):
    t = tmp_path / "s.tns"
    t.write_text("1 1 1 2.0\n2 2 2 1.0\n")
    with pytest.raises(TensorFileError, match=r"^--key / key='a' applies only to .npz, .mat, .h5 and .hdf5 files "):
        load_tensor(t, key="a")
    assert load_tensor(t, shape=(3, 3, 3)).shape == (3, 3, 3)
    z = tmp_path / "a.npz"
    np.savez(z, a=np.ones((2, 3)))
    with pytest.raises(TensorFileError, match=r"^--shape / shape=\(2, 3\) applies only to .tns files"):
        load_tensor(z, shape=(2, 3))
    assert load_tensor(z, key="a").shape == (2, 3)


# --------------------------------------------------------------------------------------- 8. the ranks message
@pytest.mark.parametrize("ranks, text", [(2.5, "2.5 (float)"), ("ab", "'ab' (str)"), (None, "None (NoneType)"),
                                         (np.array(2.5), "2.5 (float)")])
def test_hooi_ranks_message_says_an_int_is_accepted(rng, ranks, text):
    X = rng.standard_normal((4, 5, 6))
    with pytest.raises(TypeError) as info:
        tk.hooi(X, ranks)
    assert str(info.value) == f"ranks must be an integer or a sequence of 3 integers (one per mode); received {text}"


def test_save_result_names_a_bad_input_path(tmp_path, tucker_model):
    """A missing input_path, a folder or an int raised bare FileNotFoundError / IsADirectoryError / TypeError."""
    with pytest.raises(TypeError, match=r"^input_path must be a file name \(str or pathlib\.Path\); received 3$"):
        save_result(tmp_path / "t.npz", tucker_model, input_path=3)
    with pytest.raises(TensorFileError, match=r"^input_path file '.*nope\.npy' does not exist$"):
        save_result(tmp_path / "t.npz", tucker_model, input_path=tmp_path / "nope.npy")
    with pytest.raises(TensorFileError, match=r"^input_path '.*' is a directory; expected the decomposed tensor"):
        save_result(tmp_path / "t.npz", tucker_model, input_path=tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_poisson_model_and_the_passes_come_back_from_a_result_file(tmp_path):
    """A saved cp_apr model loaded back as a plain CPTensor: its log-likelihood and KKT violation lost; every
    result's passes_per_iteration came back 0."""
    M = tk.cp_apr(np.random.default_rng(0).poisson(2.0, (5, 6, 7)), 2, random_state=0)
    B = load_result(save_result(tmp_path / "p.npz", M))
    assert type(B) is tk.PoissonCPTensor
    assert (B.log_likelihood, B.kkt_violation, B.passes_per_iteration, B.n_iter, B.fit) == (
        M.log_likelihood, M.kkt_violation, M.passes_per_iteration, M.n_iter, M.fit)
    np.testing.assert_array_equal(B.weights, M.weights)
    T = tk.hooi(np.random.default_rng(0).standard_normal((6, 7, 8)), 2, tol=1e-4)
    assert load_result(save_result(tmp_path / "t.npz", T)).passes_per_iteration == T.passes_per_iteration > 0
