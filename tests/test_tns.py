"""The .tns reader and writer: values bitwise equal to Python's float(), errors naming the right line, pieces
parsed in parallel giving the same result as one, and the sparse .npz format."""

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuckerkit.engine import ExecutionPolicy
from tuckerkit.io import TensorFileError, _tns, read_tns, write_tns

_DIR = tempfile.mkdtemp(prefix="tk-tns-")

# decimal tokens: signs, leading zeros, long mantissas, exponents near the limits of float64
_digits = st.text("0123456789", min_size=1, max_size=25)
_token = st.builds(
    lambda sign, ip, fp, ex: sign + ip + fp + ex,
    st.sampled_from(["", "+", "-"]),
    _digits,
    st.one_of(st.just(""), st.just("."), st.builds(lambda d: "." + d, _digits)),
    st.one_of(st.just(""), st.builds(lambda e, s, d: e + s + str(d), st.sampled_from("eE"),
                                     st.sampled_from(["", "+", "-"]), st.integers(0, 340))),
)
_from_float = st.builds(
    lambda x, fmt: fmt(x),
    st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True),
    st.sampled_from([repr, lambda x: f"{x:.17g}", lambda x: f"{x:.16e}", lambda x: f"{x:.10f}",
                     lambda x: f"{x:+.5E}", lambda x: f"{x:.20g}"]),
)
_SPECIAL = ["5e-324", "4.9e-324", "2.4703282292062327e-324", "2.2250738585072011e-308", "2.2250738585072014e-308",
            "1e308", "1.7976931348623157e308", "-0.0", "+0", "0e999", "9007199254740993", "9007199254740992.5",
            "0.1", "1e22", "1e23", "8.98846567431158e307", "123456789012345678901234567890e-10",
            "0.30000000000000004", ".5", "5.", "+.5e-3", "1_000.5"]


def _write(name: str, text: str) -> str:
    path = os.path.join(_DIR, name)
    with open(path, "w", newline="") as f:
        f.write(text)
    return path


def _finite(tok: str) -> bool:
    return bool(np.isfinite(float(tok)))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_token, _from_float), min_size=1, max_size=40))
def test_values_bitwise_equal_python_float(tokens):
    tokens = [t for t in tokens if _finite(t)]
    if not tokens:
        return
    path = _write("hyp.tns", "".join(f"{i + 1} 1 {t}\n" for i, t in enumerate(tokens)))
    _, values, shape = read_tns(path)
    want = np.array([float(t) for t in tokens])
    assert values.view(np.int64).tolist() == want.view(np.int64).tolist()  # same bits, -0.0 included
    assert shape == (len(tokens), 1)


def test_special_values_bitwise():
    path = _write("special.tns", "".join(f"1 {i + 1} {t}\n" for i, t in enumerate(_SPECIAL)))
    _, values, _ = read_tns(path)
    want = np.array([float(t) for t in _SPECIAL])
    assert values.view(np.int64).tolist() == want.view(np.int64).tolist()
    assert np.signbit(values[_SPECIAL.index("-0.0")])


def test_comments_blank_lines_crlf_bom_and_whitespace():
    text = "\ufeff# header\r\n\r\n 1\t2 3   4.5 # trailing comment\r\n   \n#\n2 1 1 -1e-3\n3 3 3 +7"
    path = _write("misc.tns", text)
    coords, values, shape = read_tns(path)
    assert coords.tolist() == [[0, 1, 2], [1, 0, 0], [2, 2, 2]]
    assert values.tolist() == [4.5, -0.001, 7.0]
    assert shape == (3, 3, 3)
    assert coords.dtype == np.int32


@pytest.mark.parametrize(("text", "match"), [
    ("1 1 1 1.0\n1 1 1e20 2.0\n", r"line 2 has a coordinate that is not an integer: '1 1 1e20 2.0'"),
    ("1 1 1 1.0\n1 2 2.0\n", r"line 2 has 3 columns but line 1 has 4; every line needs"),
    ("# c\n1 1 1 1.0\n0 2 1 2.0\n", r"line 3 has coordinate\(s\) below 1 \(0 2 1\); .tns coordinates are 1-based"),
    ("1 1 1 1.0\n\n1 -2 1 2.0\n", r"line 3 has coordinate\(s\) below 1"),
    ("1 1 1 abc\n", r"line 1 has a value that is not a number: 'abc'"),
    ("1 1 1 1.0\n2 2 2 nan\n", r"line 2 has a value that is NaN or infinite: 'nan'"),
    ("1 1 1 1.0\n2 2 2 1e400\n", r"line 2 has a value that is NaN or infinite: '1e400'"),
    ("1 1 1 1.0\n2 2 2 -inf\n", r"line 2 has a value that is NaN or infinite: '-inf'"),
    ("1 1 9999999999999999999999 1.0\n", r"line 1 has a coordinate above 2\*\*62"),
    ("# only a comment\n\n", r"holds no nonzeros \(only comments or blank lines\)"),
    ("", r"holds no nonzeros"),
    ("5\n", r"line 1 has 1 column\(s\); expected coordinates followed by a value"),
    ("1 1 1 1.0\n1 1 1 1.0 2.0\n", r"line 2 has 5 columns but line 1 has 4"),
])
def test_errors_name_the_right_line(text, match):
    path = _write("bad.tns", text)
    with pytest.raises(TensorFileError, match=match):
        read_tns(path)


def test_not_utf8_is_not_a_text_file():
    path = os.path.join(_DIR, "bin.tns")
    with open(path, "wb") as f:
        f.write(b"1 1 1 1.0\n\x93NUMPY\xff\xfe 2 3\n")
    with pytest.raises(TensorFileError, match=r"is not a text file \(line 2 is not UTF-8\)"):
        read_tns(path)


def test_first_error_wins_across_pieces_and_values(monkeypatch):
    """Pieces of a few bytes: line numbers, gaps from comments, and the earliest error are the same as in
    one piece (a bad value on line 40 beats a bad coordinate on line 90)."""
    lines = [f"{i % 7 + 1} {i % 5 + 1} {i + 1} {i * 0.25!r}" for i in range(100)]
    lines[10] = "# a comment inside"
    lines[11] = ""
    good = _write("good.tns", "\n".join(lines) + "\n")
    ref = read_tns(good, policy=ExecutionPolicy(1))
    monkeypatch.setattr(_tns, "CHUNK_BYTES", 37)
    for w in (1, 2):
        c, v, s = read_tns(good, policy=ExecutionPolicy(w))
        np.testing.assert_array_equal(c, ref[0])
        assert v.tobytes() == ref[1].tobytes() and s == ref[2]
    assert c.shape[0] == 98
    bad = list(lines)
    bad[39] = "1 1 1 1e999"
    bad[89] = "1 x 1 1.0"
    path = _write("bad2.tns", "\n".join(bad) + "\n")
    with pytest.raises(TensorFileError, match=r"line 40 has a value that is NaN or infinite"):
        read_tns(path, policy=ExecutionPolicy(2))
    bad[39] = lines[39]
    path = _write("bad3.tns", "\n".join(bad) + "\n")
    with pytest.raises(TensorFileError, match=r"line 90 has a coordinate that is not an integer: '1 x 1 1.0'"):
        read_tns(path, policy=ExecutionPolicy(2))


def test_large_coordinates_switch_to_int64():
    path = _write("big.tns", "1 1 1.0\n3000000000 2 2.0\n")
    coords, _, shape = read_tns(path)
    assert coords.dtype == np.int64
    assert coords.tolist() == [[0, 0], [2999999999, 1]] and shape == (3000000000, 2)


def test_shape_option_and_float32():
    path = _write("s.tns", "1 2 0.1\n2 1 3\n")
    _, v, s = read_tns(path, shape=(4, 5), dtype=np.float32)
    assert s == (4, 5) and v.dtype == np.float32 and v.tolist() == [np.float32(0.1), 3.0]
    with pytest.raises(TensorFileError, match=r"mode 1 has index 2 but the given shape allows at most 1"):
        read_tns(path, shape=(4, 1))
    with pytest.raises(ValueError, match=r"dtype must be float32 or float64; received int64"):
        read_tns(path, dtype=np.int64)


def test_missing_file():
    with pytest.raises(TensorFileError, match=r"cannot be read"):
        read_tns(os.path.join(_DIR, "none.tns"))


# ------------------------------------------------------------------------------------------------- writing
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_write_read_round_trip_bitwise(tmp_path, dtype):
    rng = np.random.default_rng(3)
    coords = np.stack([rng.integers(0, n, 3000) for n in (7, 11000, 3)], axis=1)
    values = np.concatenate([rng.standard_normal(1000) * 10.0 ** rng.integers(-30, 30, 1000),
                             np.round(rng.random(1000), 6), rng.random(1000)]).astype(dtype)
    special = np.array([5e-324, 1e308, -0.0, 1e16, 123456789012345.0, 1e-5, 0.1, 2.0**60], dtype=np.float64)
    if dtype == np.float64:
        values[:8] = special
    write_tns(tmp_path / "w.tns", coords, values)
    c, v, _ = read_tns(tmp_path / "w.tns", dtype=dtype)
    np.testing.assert_array_equal(c, coords)
    assert v.tobytes() == values.tobytes()


def test_write_text_is_short_and_plain(tmp_path):
    values = np.array([0.5, 3.0, -0.001, 1e-7, 1234.5, 1e20, -0.0, 0.1 + 0.2])
    coords = np.arange(8).reshape(8, 1)
    write_tns(tmp_path / "t.tns", coords, values)
    got = [ln.split()[1] for ln in (tmp_path / "t.tns").read_text().splitlines()]
    assert got == ["0.5", "3.0", "-0.001", "1e-7", "1234.5", "1e20", "-0.0", "0.30000000000000004"]
    assert [float(t) for t in got] == values.tolist()


def test_write_refuses_bad_input(tmp_path):
    with pytest.raises(ValueError, match=r"coords must be 0-based and non-negative; received a minimum of -1"):
        write_tns(tmp_path / "a.tns", np.array([[-1, 0]]), np.array([1.0]))
    with pytest.raises(ValueError, match=r"values holds NaN or infinite entries"):
        write_tns(tmp_path / "a.tns", np.array([[1, 0]]), np.array([np.nan]))
    with pytest.raises(ValueError, match=r"values must be a 1-D numeric array of length 1; received float64 of "
                                         r"shape \(2,\)"):
        write_tns(tmp_path / "a.tns", np.array([[1, 0]]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"coords must be a 2-D integer array"):
        write_tns(tmp_path / "a.tns", np.array([1.5, 0]), np.array([1.0, 2.0]))


# ------------------------------------------------------------------------------------------- sparse .npz
def test_sparse_npz_round_trip_through_every_door(tmp_path):
    from tuckerkit.io import load_tensor, open_tensor
    from tuckerkit.sparse import COOTensor

    rng = np.random.default_rng(5)
    X = COOTensor(np.stack([rng.integers(0, n, 500) for n in (9, 8, 7)], axis=1), rng.standard_normal(500),
                  shape=(9, 8, 7))
    X.save_npz(tmp_path / "x.npz")
    for Y in (COOTensor.from_npz(tmp_path / "x.npz"), load_tensor(tmp_path / "x.npz")):
        assert isinstance(Y, COOTensor) and Y.shape == X.shape
        np.testing.assert_array_equal(Y.coords, X.coords)
        assert Y.values.tobytes() == X.values.tobytes()
    assert open_tensor(tmp_path / "x.npz").nnz == X.nnz
    from tuckerkit.io import OutputFileError

    with pytest.raises(OutputFileError):
        X.save_npz(tmp_path / "x.npz")
    X.to_tns(tmp_path / "x.tns")
    Z = COOTensor.from_tns(tmp_path / "x.tns", shape=X.shape)
    assert Z.values.tobytes() == X.values.tobytes()


def test_sparse_npz_refuses_malformed(tmp_path):
    from tuckerkit.sparse import COOTensor

    np.savez(tmp_path / "a.npz", coords=np.zeros((3, 2), dtype=np.int32), values=np.ones(3), shape=np.array([2]))
    with pytest.raises(TensorFileError, match=r"\['coords'\] must be an integer array of shape \(nnz, 1\); "
                                              r"received int32 of shape \(3, 2\)"):
        COOTensor.from_npz(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", coords=np.zeros((3, 1), dtype=np.int32), values=np.ones(3, dtype=np.int8),
             shape=np.array([2]))
    with pytest.raises(TensorFileError, match=r"\['values'\] must be float32 or float64 of shape \(3,\); received "
                                              r"int8"):
        COOTensor.from_npz(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", coords=np.array([[5]]), values=np.ones(1), shape=np.array([2]))
    with pytest.raises(TensorFileError, match=r"coords\[:, 0\] spans 5..5 but mode 0 has size 2"):
        COOTensor.from_npz(tmp_path / "c.npz")
    np.savez(tmp_path / "d.npz", a=np.ones(2))
    with pytest.raises(TensorFileError, match=r"holds the arrays a; a sparse .npz holds exactly coords, shape and "
                                              r"values"):
        COOTensor.from_npz(tmp_path / "d.npz")
