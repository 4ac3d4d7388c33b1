"""Hostile but honest inputs: no silent wrong answer, no deep error, no file read that should not be."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.io import TensorFileError, load_tensor, open_tensor
from tuckerkit.sparse import COOTensor


def test_duplicate_entries_summing_to_infinity_are_refused(tmp_path):
    """A .tns whose duplicates sum to inf wrote a NaN result with exit 0 (or an ArpackError traceback)."""
    with pytest.raises(ValueError, match=r"values: duplicate coordinates sum to NaN or infinity at 1 coordinate\(s\) "
                                         r"\(first: \[0, 0, 0\], 0-based\); the sums must be finite"):
        COOTensor([[0, 0, 0], [0, 0, 0], [1, 1, 1]], [1e308, 1e308, 1.0])
    (tmp_path / "inf.tns").write_text("1 1 1 1e308\n1 1 1 1e308\n2 2 2 1.0\n")
    with pytest.raises(ValueError, match=r"duplicate coordinates sum to NaN or infinity"):
        open_tensor(tmp_path / "inf.tns")


def test_h5_external_storage_is_refused_unless_allowed(tmp_path):
    import h5py

    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(range(64)))
    with h5py.File(tmp_path / "ext.h5", "w") as f:
        f.create_dataset("x", shape=(4, 4, 4), dtype="u1", external=[(str(secret), 0, 64)])
    msg = r"\['x'\] keeps its data in external files \('.*secret.bin', \.\.\.\); pass allow_external=True"
    with pytest.raises(TensorFileError, match=msg):
        load_tensor(tmp_path / "ext.h5")
    with pytest.raises(TensorFileError, match=msg):
        open_tensor(tmp_path / "ext.h5", memory_limit=10)
    assert load_tensor(tmp_path / "ext.h5", allow_external=True)[1, 1, 1] == 21
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f.create_dataset("d", data=np.arange(8.0))
    layout = h5py.VirtualLayout(shape=(8,), dtype="f8")
    layout[:] = h5py.VirtualSource(str(tmp_path / "src.h5"), "d", shape=(8,))
    with h5py.File(tmp_path / "virt.h5", "w") as f:
        f.create_virtual_dataset("v", layout)
    with pytest.raises(TensorFileError, match=r"is a virtual dataset mapping other files; pass allow_external=True"):
        load_tensor(tmp_path / "virt.h5")


def test_a_crafted_npy_header_is_a_file_error(tmp_path):
    p = tmp_path / "neg.npy"
    np.save(p, np.ones((2, 3)))
    p.write_bytes(p.read_bytes().replace(b"(2, 3)", b"(-2, 3)"))
    with pytest.raises(TensorFileError, match=r"is not a valid .npy file \(negative dimensions are not allowed\)"):
        load_tensor(p)


def test_npz_size_guard(tmp_path):
    """A 317-byte file claiming 72.8 TiB went straight to allocation."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**7, 10**6)})
    with zipfile.ZipFile(tmp_path / "big.npz", "w") as z:
        z.writestr("a.npy", buf.getvalue() + b"\0" * 64)
    assert os.path.getsize(tmp_path / "big.npz") < 400
    with pytest.raises(TensorFileError, match=r"\['a'\] claims an array of shape \(10000000, 1000000\) "
                                              r"\(80,000,000,000,000 bytes\) but holds \d+ bytes; the file is corrupt"):
        load_tensor(tmp_path / "big.npz")


def test_a_cp_rank_beyond_memory_is_refused_before_allocating():
    with pytest.raises(MemoryError, match=r"rank=100000 needs about [\d.]+ GB but [\d.]+ GB is available; choose a "
                                          r"smaller rank"):
        tk.cp_als(np.ones((3, 3, 3)), 100000)


def test_deep_errors_become_one_line_errors(rng):
    X = rng.standard_normal((4, 5, 6))
    assert tk.hosvd(X, np.array(2)).ranks == (2, 2, 2)  # a 0-d array is one rank for every mode
    with pytest.raises(ValueError, match=r"random_state=-1 is invalid; expected None, an int >= 0, or a numpy "
                                         r"Generator"):
        tk.hooi(X, 2, random_state=-1)
    with pytest.raises(TypeError, match=r"normalize must be True or False; received 'no'"):
        tk.cp_als(X, 2, normalize="no")
    with pytest.raises(ValueError, match=r"factors have 0 columns; expected a rank R >= 1"):
        tk.mttkrp(X, [np.ones((4, 0)), np.ones((5, 0)), np.ones((6, 0))], 0)
    with pytest.raises(TypeError, match=r"order must be an integer; received float"):
        tk.st_hosvd(X, 2, order=[0.0, 1, 2])
    with pytest.raises(TypeError, match=r"order must be an integer; received bool"):
        tk.st_hosvd(X, 2, order=[False, True, 2])
    with pytest.raises(TypeError, match=r"mode must be an integer; received bool"):
        tk.ttm(X, np.ones((2, 5)), True)
    gen = (U for U in [np.ones((4, 2)), np.ones((5, 2)), np.ones((6, 2))])
    np.testing.assert_allclose(tk.multi_ttm(X, gen, transpose=True),
                               tk.multi_ttm(X, [np.ones((4, 2)), np.ones((5, 2)), np.ones((6, 2))], transpose=True))
