"""Files and generated data as users have them, found by a review of the I/O layer and the datasets: each was
a process killed for memory, a loop without end, the wrong file read, or a message that named nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from tuckerkit.datasets import make_lda_corpus, make_sparse_tensor

from tuckerkit.io import TensorFileError, load_tensor

h5py = pytest.importorskip("h5py")


def _tiny_memory(monkeypatch, nbytes):
    from tuckerkit import _validation

    monkeypatch.setattr(_validation, "available_memory", lambda: nbytes)


def test_hdf5_and_mat_sizes_are_checked_before_reading(tmp_path, monkeypatch):
    """A 1.4 KB chunked HDF5 file claiming 20 GB was read whole (the process killed); a .mat file alike."""
    import scipy.io

    h5 = tmp_path / "big.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", shape=(100, 100, 100), dtype="f8", chunks=(10, 10, 10))
        f.create_group("g").create_dataset("b", data=np.arange(6.0).reshape(2, 3))
    mat = tmp_path / "big.mat"
    scipy.io.savemat(mat, {"A": np.zeros((100, 100, 100)), "B": np.ones(3)}, do_compression=True)
    _tiny_memory(monkeypatch, 4_000_000)
    with pytest.raises(TensorFileError, match=r"^'.*big\.h5'\['x'\] holds 0\.008 GB, more than 80% of the 0\.004 GB "
                                              r"of memory available; open it with tuckerkit\.io\.open_tensor"):
        load_tensor(h5, key="x")
    with pytest.raises(TensorFileError, match=r"^'.*big\.mat'\['A'\] holds 0\.008 GB, more than 80% of the 0\.004 "
                                              r"GB of memory available"):
        load_tensor(mat, key="A")
    np.testing.assert_array_equal(load_tensor(h5, key="/g/b"), np.arange(6.0).reshape(2, 3))  # (an absolute path)
    np.testing.assert_array_equal(load_tensor(mat, key="B"), np.ones((1, 3)))  # (that variable alone is read)


def test_matlab_v73_files_are_read_in_matlabs_axis_order(tmp_path):
    """MATLAB's v7.3 .mat (HDF5 inside, the format of variables over 2 GB) was called "not a valid .mat file";
    HDF5 holds its arrays with the axes reversed."""
    A = np.arange(24.0).reshape(2, 3, 4)
    p = tmp_path / "v73.mat"
    with h5py.File(p, "w", userblock_size=512) as f:
        f.create_dataset("A", data=A.transpose())
        f.create_group("#refs#")
    head = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Fri Dec  4 2026 HDF5 schema 1.00 ."
    with open(p, "r+b") as fh:
        fh.write(head.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM")
    np.testing.assert_array_equal(load_tensor(p), A)


def test_dask_npy_reads_the_file_it_opened_whatever_the_folder(tmp_path, monkeypatch):
    pytest.importorskip("dask.array")
    from tuckerkit.io import open_npy_dask

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    np.save(tmp_path / "a" / "x.npy", np.ones((4, 3, 2)))
    np.save(tmp_path / "b" / "x.npy", 8 * np.ones((4, 3, 2)))
    monkeypatch.chdir(tmp_path / "a")
    X = open_npy_dask("x.npy")
    monkeypatch.chdir(tmp_path / "b")
    assert float(X.sum().compute(scheduler="sync")) == 24.0  # (168.0: the other folder's file)
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "text.npy").write_text("hello")
    with pytest.raises(TensorFileError, match=r"empty\.npy' is not a valid \.npy file \(it is empty;"):
        open_npy_dask(tmp_path / "empty.npy")
    with pytest.raises(TensorFileError, match=r"text\.npy' is not a valid \.npy file \(it looks like a text file;"):
        open_npy_dask(tmp_path / "text.npy")


def test_a_loop_of_links_is_named(tmp_path):
    from tuckerkit.io import load_result

    os.symlink(tmp_path / "b.npy", tmp_path / "a.npy")
    os.symlink(tmp_path / "a.npy", tmp_path / "b.npy")
    with pytest.raises(TensorFileError, match=r"^input '.*a\.npy' is a loop of symbolic links; expected a tensor"):
        load_tensor(tmp_path / "a.npy")
    os.symlink(tmp_path / "d.npz", tmp_path / "c.npz")
    os.symlink(tmp_path / "c.npz", tmp_path / "d.npz")
    with pytest.raises(TensorFileError, match=r"^result '.*c\.npz' is a loop of symbolic links; expected a "
                                              r"tuckerkit result file \(\.npz\)$"):
        load_result(tmp_path / "c.npz")


def test_sparse_generator_ends_and_checks_its_arguments():
    """A steep power law looped forever; an int dtype truncated every value to 0."""
    with pytest.raises(ValueError, match=r"^nnz=50 distinct coordinates are too many for a power law with alpha=40"):
        make_sparse_tensor((50, 60, 70), 50, distribution="power_law", alpha=40, random_state=0)
    for kw, err, msg in [
        ({"alpha": float("inf"), "distribution": "power_law"}, ValueError, r"^alpha=inf is not valid; expected a "
                                                                           r"positive finite exponent$"),
        ({"dtype": np.int64}, TypeError, r"^make_sparse_tensor: dtype=int64 is not supported; expected float32 or "
                                         r"float64$"),
        ({"nnz": 2.5}, ValueError, r"^nnz=2\.5 is not valid; expected an integer, 1 <= nnz <= 210"),
        ({"shape": "abc"}, TypeError, r"^make_sparse_tensor: shape must be a sequence of mode sizes; received 'abc'$"),
    ]:
        args = {"shape": (5, 6, 7), "nnz": 20, **kw}
        with pytest.raises(err, match=msg):
            make_sparse_tensor(**args)
    with pytest.raises(ValueError, match=r"^density='0\.5' is not valid; expected a fraction in \(0, 1\]$"):
        make_sparse_tensor((5, 6, 7), density="0.5")
    with pytest.raises(ValueError, match=r"^beta=nan is not valid; expected a positive finite concentration$"):
        make_lda_corpus(beta=float("nan"), random_state=0)
    with pytest.raises(TypeError, match=r"^make_lda_corpus: dtype=complex128 is not supported"):
        make_lda_corpus(dtype=np.complex128, random_state=0)


def test_generated_data_has_the_same_bits_with_any_blas_threads(tmp_path):
    """The noise was scaled by numpy's norm, BLAS's dot, whose sums follow its threads."""
    code = ("import hashlib\nfrom tuckerkit.datasets import make_low_rank_tucker, make_low_rank_cp\n"
            "a = make_low_rank_tucker((60, 50, 40), (3, 3, 3), random_state=1).data\n"
            "b = make_low_rank_cp((60, 50, 40), 3, random_state=1).data\n"
            "print(hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest())\n")
    outs = set()
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1


def test_an_opened_in_memory_tensor_converts_to_its_array(tmp_path):
    from tuckerkit.io import open_tensor

    A = np.arange(24.0).reshape(2, 3, 4)
    np.save(tmp_path / "x.npy", A)
    X = open_tensor(tmp_path / "x.npy")
    np.testing.assert_array_equal(np.asarray(X), A)  # (a 0-d object array before)
    assert np.asarray(X, dtype=np.float32).dtype == np.float32


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_every_reader_refuses_a_fifo_or_device_instead_of_blocking(tmp_path):
    """load_result, load_metadata, the sparse .npz and .tns readers opened a FIFO and blocked forever (the CLI's
    reconstruct too); a .tns link to /dev/zero read as a file of no nonzeros."""
    from tuckerkit.io import load_metadata, load_result, read_tns
    from tuckerkit.sparse import COOTensor

    cases = [("r.npz", load_result, "result", "a tuckerkit result file"),
             ("m.npz", load_metadata, "result", "a tuckerkit result file"),
             ("s.npz", COOTensor.from_npz, "input", "a sparse .npz file"),
             ("t.tns", read_tns, "input", "a .tns file"), ("u.tns", COOTensor.from_tns, "input", "a .tns file")]
    code = ["import sys", "from tuckerkit.io import load_metadata, load_result, read_tns",
            "from tuckerkit.sparse import COOTensor"]
    for name, fn, _, _ in cases:
        os.mkfifo(tmp_path / name)
        code.append(f"try:\n    {fn.__qualname__}({str(tmp_path / name)!r})\nexcept Exception as e:\n    print(e)")
    # (in a child with a timeout: the old readers never returned)
    out = subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert len(lines) == len(cases), out.stdout + out.stderr
    for line, (name, _, noun, expected) in zip(lines, cases, strict=True):
        assert line == (f"{noun} {str(tmp_path / name)!r} is a FIFO (named pipe), not a regular file; expected "
                        f"{expected}{' (.npz)' if noun == 'result' else ''}")
    if os.path.exists("/dev/zero"):
        os.symlink("/dev/zero", tmp_path / "z.tns")
        with pytest.raises(TensorFileError, match=r"is a character device, not a regular file; expected a \.tns"):
            read_tns(tmp_path / "z.tns")


def test_readers_name_a_file_object_given_for_a_path(tmp_path):
    from tuckerkit.io import load_metadata, load_result, read_tns
    from tuckerkit.sparse import COOTensor

    (tmp_path / "f.npz").write_bytes(b"x")
    with open(tmp_path / "f.npz", "rb") as fh:
        for fn in (load_result, load_metadata, read_tns, COOTensor.from_npz, load_tensor):
            with pytest.raises(TypeError, match=r"^path must be a file name \(str or pathlib\.Path\); received "
                                                r".*\(BufferedReader\)$"):
                fn(fh)
        with pytest.raises(TypeError, match=r"received b'f\.npz' \(bytes\)$"):
            load_result(b"f.npz")


def test_sparse_writers_refuse_a_name_their_readers_refuse(tmp_path):
    """save_npz wrote "x.tns", to_tns wrote "y.npz": files load_tensor then read as the format their names say, and
    refused."""
    from tuckerkit.io import OutputFileError, read_tns
    from tuckerkit.sparse import COOTensor

    C = COOTensor([[0, 0], [1, 2]], [1.0, 2.0], shape=(2, 3))
    for write, name, ext, suffix in [(C.save_npz, "x.tns", ".tns", ".npz"), (C.save_npz, "x.npy", ".npy", ".npz"),
                                     (C.to_tns, "y.npz", ".npz", ".tns"), (C.to_tns, "y.H5", ".h5", ".tns")]:
        with pytest.raises(OutputFileError, match=rf"^output '.*{name}' names a \{ext} file; this writes the "
                                                  rf"\{suffix} format \(name it \*\{suffix}\)$"):
            write(tmp_path / name)
    assert not list(tmp_path.iterdir())
    C.save_npz(tmp_path / "ok.NPZ")
    C.save_npz(tmp_path / "plain")  # (names of no known format: taken, as read_tns and from_npz read any name)
    C.to_tns(tmp_path / "ok.txt")
    assert COOTensor.from_npz(tmp_path / "ok.NPZ").shape == COOTensor.from_npz(tmp_path / "plain").shape == (2, 3)
    assert read_tns(tmp_path / "ok.txt")[2] == (2, 3)


def test_a_complex_file_opens_as_the_decompositions_take_it(tmp_path):
    """open_tensor refused a complex .npy that hooi(load_tensor(path)) decomposes; and a complex operand made
    beforehand passed the real-only decompositions unchecked (non_negative_cp ran on it, non_negative_tucker failed
    in numba's typing)."""
    import tuckerkit as tk
    from tuckerkit.engine import as_operand
    from tuckerkit.io import open_tensor

    rng = np.random.default_rng(0)
    Z = rng.standard_normal((6, 7, 8)) + 1j * rng.standard_normal((6, 7, 8))
    np.save(tmp_path / "z.npy", Z)
    op = open_tensor(tmp_path / "z.npy")
    assert op.dtype == np.complex128
    assert tk.hooi(op, (2, 2, 2)).fit == tk.hooi(load_tensor(tmp_path / "z.npy"), (2, 2, 2)).fit
    with pytest.raises(TypeError, match=r"^memory_limit= streams real tensors; X has dtype complex128"):
        open_tensor(tmp_path / "z.npy", memory_limit=100)
    for fn in (tk.non_negative_cp, tk.non_negative_tucker):
        for X in (op, as_operand(Z)):
            with pytest.raises(TypeError, match=r"^X has complex dtype complex128; expected a real tensor"):
                fn(X, 2)
