"""Hostile but honest inputs: no silent wrong answer, no deep error, no file read that should not be."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.io import TensorFileError, load_metadata, load_result, load_tensor, open_tensor, save_result
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


# ------------------------------------------------------------------------------------------- result files
def _members(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _tampered(tmp_path, src, name, drop=(), meta=None, **replace):
    arrays = {k: v for k, v in _members(src).items() if k not in drop}
    arrays.update(replace)
    if meta is not None:
        arrays["metadata"] = np.array(meta if isinstance(meta, str) else json.dumps(meta))
    np.savez(tmp_path / name, **arrays)
    return tmp_path / name


@pytest.fixture
def results(tmp_path, rng):
    X = rng.standard_normal((4, 5, 6))
    tucker = save_result(tmp_path / "t.npz", tk.hooi(X, (2, 3, 4)))
    cp = save_result(tmp_path / "c.npz", tk.cp_als(X, 2, random_state=0, tol=1e-4))
    return tucker, cp


def _tampered_cases(tmp_path, tucker, cp):
    t = _members(tucker)
    meta = json.loads(str(t["metadata"]))
    nan_core = t["core"].copy()
    nan_core[0, 0, 0] = np.nan
    return [
        (_tampered(tmp_path, tucker, "list.npz", meta="[1, 2]"), "metadata is a JSON list; expected a JSON object"),
        (_tampered(tmp_path, tucker, "json.npz", meta="{not json"), r"metadata is not valid JSON \("),
        (_tampered(tmp_path, tucker, "mbytes.npz", metadata=np.arange(3)),
         r"metadata is an array of dtype int64 and shape \(3,\); expected one JSON text"),
        (_tampered(tmp_path, cp, "weights.npz", drop=("factors_0", "factors_1", "factors_2")), "factors_0 is missing"),
        (_tampered(tmp_path, tucker, "missing.npz", drop=("factors_1",)), "factors_1 is missing"),
        (_tampered(tmp_path, tucker, "last.npz", drop=("factors_2",), meta={**meta, "shape": [4, 5]}),
         r"factors_2 is missing \(the core has 3 modes\)"),
        (_tampered(tmp_path, tucker, "cols.npz", factors_0=np.ones((4, 6))),
         "factors_0 has 6 columns, core mode 0 has 2"),
        (_tampered(tmp_path, tucker, "rows.npz", factors_1=np.linalg.qr(np.ones((7, 3)))[0]),
         r"factors_1 has 7 rows, metadata shape\[1\] is 5"),
        (_tampered(tmp_path, cp, "cpw.npz", weights=np.ones(3)), "factors_0 has 2 columns, weights has 3"),
        (_tampered(tmp_path, cp, "cpw2.npz", weights=np.ones((2, 1))),
         "weights has 2 dimensions; expected a vector"),
        (_tampered(tmp_path, tucker, "nan.npz", core=nan_core), r"core holds NaN or infinity \(1 entry\)"),
        (_tampered(tmp_path, tucker, "inf.npz", factors_2=np.full((6, 4), np.inf)),
         r"factors_2 holds NaN or infinity \(24 entries\)"),
        (_tampered(tmp_path, tucker, "int.npz", core=t["core"].astype(np.int64)),
         "core has dtype int64; expected float32, float64, complex64 or complex128"),
        (_tampered(tmp_path, tucker, "mixed.npz", factors_1=t["factors_1"].astype(np.float32)),
         "factors_1 has dtype float32 but core has float64; expected one dtype"),
        (_tampered(tmp_path, tucker, "str.npz", factors_0=np.array([["a", "b"]] * 4)),
         "factors_0 has dtype <U1; expected float32, float64, complex64 or complex128"),
        (_tampered(tmp_path, tucker, "extra.npz", payload=np.ones(3)), "it holds the unknown member 'payload'"),
        (_tampered(tmp_path, tucker, "both.npz", weights=np.ones(2)), "it holds both core .* and weights"),
        (_tampered(tmp_path, tucker, "ranks.npz", meta={**meta, "ranks": [2, 3, 5]}),
         r"metadata ranks \[2, 3, 5\] differ from the core's shape \[2, 3, 4\]"),
        (_tampered(tmp_path, tucker, "niter.npz", meta={**meta, "n_iter": [1]}),
         r"metadata n_iter is \[1\]; expected an integer >= 0"),
        (_tampered(tmp_path, tucker, "fit.npz", meta={**meta, "fit": "high"}),
         r"metadata fit is \"high\"; expected a finite number <= 1 or null"),
        (_tampered(tmp_path, tucker, "conv.npz", meta={**meta, "converged": "yes"}),
         r"metadata converged is \"yes\"; expected true or false"),
        (_tampered(tmp_path, tucker, "shape.npz", meta={**meta, "shape": [4, 5]}),
         "metadata shape has 2 modes but there are 3 factors"),
        (_tampered(tmp_path, tucker, "vec.npz", factors_0=np.ones(4)),
         r"factors_0 has 1 dimensions; expected a matrix"),
    ]


def test_tampered_result_files_are_one_line_file_errors(tmp_path, results):
    """A JSON list as metadata gave AttributeError, a CP file with only weights IndexError, a missing factor a
    TuckerTensor of the wrong order; shapes were never checked against each other."""
    tucker, cp = results
    assert load_result(tucker).ranks == (2, 3, 4) and load_result(cp).rank == 2
    for path, match in _tampered_cases(tmp_path, tucker, cp):
        with pytest.raises(TensorFileError, match=rf"^'{re.escape(str(path))}' is not a valid tuckerkit result "
                                                  rf"file: {match}") as info:
            load_result(path)
        assert "\n" not in str(info.value)


def test_the_cli_prints_a_tampered_result_as_one_line(tmp_path, results):
    from tuckerkit.cli import app
    from typer.testing import CliRunner

    tucker, cp = results
    for path, match in _tampered_cases(tmp_path, tucker, cp)[:6]:
        for args in (["info", str(path)], ["reconstruct", str(path), "-o", str(tmp_path / "o.npy")]):
            res = CliRunner().invoke(app, args)
            lines = res.output.strip().splitlines()
            assert res.exit_code == 1 and len(lines) == 1, res.output
            assert re.search(match, lines[0]) and lines[0].startswith("error: "), lines[0]
    assert not (tmp_path / "o.npy").exists()


def test_a_damaged_zip_directory_that_hides_the_metadata_is_refused(tmp_path, results):
    """One flipped bit in the last factor's directory entry (its comment length) hid the metadata member after
    it: the result loaded as a bare one (no fit, 0 iterations) without an error."""
    import struct
    import zipfile

    from tuckerkit.io import load_metadata

    tucker, _ = results
    raw = bytearray(tucker.read_bytes())
    cd_size, cd_offset = struct.unpack("<II", raw[-22 + 12: -22 + 20])
    with zipfile.ZipFile(tucker) as zf:
        last = zf.infolist()[-2]  # the entry before metadata.npy
    directory = bytes(raw[cd_offset: cd_offset + cd_size])
    at = cd_offset + directory.index(last.filename.encode()) - 46 + 32  # its comment length
    raw[at] ^= 1 << 6
    bad = tmp_path / "flipped.npz"
    bad.write_bytes(raw)
    with zipfile.ZipFile(bad) as zf:
        assert "metadata.npy" not in zf.namelist()  # (what the damage does: zipfile lists 4 members)
    msg = r"its zip directory lists 4 member\(s\) but its end record counts 5; the file is corrupt$"
    with pytest.raises(TensorFileError, match=msg):
        load_result(bad)
    with pytest.raises(TensorFileError, match=msg):
        load_metadata(bad)


def test_a_result_that_is_not_an_archive(tmp_path):
    with open(tmp_path / "plain.npz", "wb") as f:
        np.save(f, np.ones((2, 2)))  # an .npy under an .npz name
    with pytest.raises(TensorFileError, match=r"is not a valid tuckerkit result file: it holds one array, not"):
        load_result(tmp_path / "plain.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(TensorFileError, match=r"is not a valid tuckerkit result file: it is not a zip archive"):
        load_result(tmp_path / "text.npz")
    np.savez(tmp_path / "m.npz", metadata=np.array("[]"), core=np.ones((1, 1)))
    with pytest.raises(TensorFileError, match=r"is not a valid tuckerkit result file: metadata is a JSON list"):
        load_metadata(tmp_path / "m.npz")


# ------------------------------------------------------------------------------------------ deep errors
def test_estimator_ranks_are_validated_in_fit(rng):
    from tuckerkit import CPDecomposer, TuckerDecomposer

    X = rng.standard_normal((10, 5, 6))
    est = TuckerDecomposer(ranks=2.5)  # sklearn style: __init__ stores, fit validates
    with pytest.raises(TypeError, match=r"^ranks must be an integer or a sequence of 2 integers \(one per feature "
                                        r"mode\); received 2.5 \(float\)$"):
        est.fit(X)
    with pytest.raises(TypeError, match=r"^ranks must be an integer or a sequence of 2 integers \(one per feature "
                                        r"mode\); received '22' \(str\)$"):
        TuckerDecomposer(ranks="22").fit(X)
    with pytest.raises(TypeError, match=r"received True \(bool\)$"):
        TuckerDecomposer(ranks=True).fit(X)
    with pytest.raises(TypeError, match=r"^ranks\[0\] must be an integer; received 2.5 \(float\)$"):
        TuckerDecomposer(ranks=[2.5, 2]).fit(X)
    with pytest.raises(ValueError, match=r"^ranks\[1\]=7 exceeds the size of feature mode 1 \(6; X's mode 2\)"):
        TuckerDecomposer(ranks=[2, 7]).fit(X)
    with pytest.raises(TypeError, match=r"^sample_rank must be an integer; received 1.5 \(float\)$"):
        TuckerDecomposer(ranks=2, sample_rank=1.5).fit(X)
    assert TuckerDecomposer(ranks=np.array(3)).fit(X).ranks_ == (3, 3)
    with pytest.raises(TypeError, match=r"^rank must be an integer; received '2' \(str\)$"):
        CPDecomposer(rank="2").fit(X)


def test_a_0d_array_rank_is_one_rank_for_every_mode(rng):
    X = rng.standard_normal((4, 5, 6))
    assert tk.hooi(X, np.array(2)).ranks == tk.hooi(X, 2).ranks == (2, 2, 2)
    assert tk.st_hosvd(X, np.int64(3)).ranks == (3, 3, 3)
    with pytest.raises(TypeError, match=r"ranks must be an integer or a sequence of 3 integers \(one per mode\); "
                                        r"received 2.5"):
        tk.hooi(X, np.array(2.5))


def test_a_model_without_a_fit_round_trips_and_an_unreadable_one_is_never_written(tmp_path, rng):
    """A model built by hand (or converted from TensorLy) has no fit: it was written as NaN; a result that
    load_result would refuse (NaN entries, a float16 core) is refused before anything is written."""
    factors = tuple(np.linalg.qr(rng.standard_normal((n, 2)))[0] for n in (4, 5, 6))
    T = tk.TuckerTensor(rng.standard_normal((2, 2, 2)), factors)
    p = save_result(tmp_path / "hand.npz", T)
    assert load_metadata(p)["fit"] is None and load_result(p).fit_history == ()
    legacy = _tampered(tmp_path, p, "legacy.npz", meta={**load_metadata(p), "fit": float("nan")})
    assert load_result(legacy).fit_history == ()  # written so by earlier versions: read as "not recorded"
    with pytest.raises(ValueError, match=r"^result cannot be saved to '.*nan.npz': core holds NaN or infinity "
                                         r"\(8 entries\)$"):
        save_result(tmp_path / "nan.npz", tk.TuckerTensor(np.full((2, 2, 2), np.nan), factors))
    with pytest.raises(ValueError, match=r"^result cannot be saved to '.*h.npz': core has dtype float16; "
                                         r"expected float32, float64, complex64 or complex128$"):
        save_result(tmp_path / "h.npz", tk.TuckerTensor(np.ones((2, 2, 2), dtype=np.float16), factors))
    with pytest.raises(ValueError, match=r"^result cannot be saved to '.*c.npz': factors_0 has dtype float64 but "
                                         r"core has complex128; expected one dtype"):
        save_result(tmp_path / "c.npz", tk.TuckerTensor(np.ones((2, 2, 2), dtype=complex), factors))
    assert sorted(f.name for f in tmp_path.iterdir()) == ["hand.npz", "legacy.npz"]
