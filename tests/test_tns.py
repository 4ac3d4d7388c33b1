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


def _dir() -> str:
    """This module's folder (made on first use, under pytest's temporary folder: conftest.py)."""
    global _DIR
    if _DIR is None:
        _DIR = tempfile.mkdtemp(prefix="tk-tns-")
    return _DIR


_DIR: str | None = None

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
    path = os.path.join(_dir(), name)
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
    # 2**63 and 2**63 * 10 (the digits once overflowed int64 and were reported as "below 1")
    ("1 9223372036854775808 1 1.0\n", r"line 1 has a coordinate above 2\*\*62"),
    ("1 92233720368547758080 1 1.0\n", r"line 1 has a coordinate above 2\*\*62"),
    ("1 4611686018427387905 1 1.0\n", r"line 1 has a coordinate above 2\*\*62"),
    # classic Mac line ends: every line would merge into one (1 1 1 / 2 2 2 read as one 5-way nonzero)
    ("1 1 1\r2 2 2\r", r"line 1 holds a carriage return followed by more data \(classic Mac line ends\); "
                       r"expected LF or CRLF line ends"),
    ("# c\r\n1 1 1\r2 2 2\r", r"line 2 holds a carriage return followed by more data"),
    # a comment first swallowed a CR-only file whole ("holds no nonzeros"; with shape= an empty tensor)
    ("# header\r1 1 1 1.0\r2 2 2 2.0\r", r"line 1 holds a carriage return followed by more data"),
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
    path = os.path.join(_dir(), "bin.tns")
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


def test_largest_index_written_reads_back(tmp_path):
    write_tns(tmp_path / "big.tns", np.array([[0, 2**62 - 1]]), np.array([1.5]))
    coords, values, shape = read_tns(tmp_path / "big.tns")
    assert coords.tolist() == [[0, 2**62 - 1]] and values.tolist() == [1.5] and shape == (1, 2**62)


def test_carriage_returns_at_line_ends_and_before_comments_are_blanks():
    coords, values, shape = read_tns(_write("cr.tns", "1 1 1 \r \r\n2 2 2\r\n"))
    assert coords.tolist() == [[0, 0], [1, 1]] and values.tolist() == [1.0, 2.0] and shape == (2, 2)


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
    with pytest.raises(TensorFileError, match=r"^input file '.*none\.tns' does not exist$"):
        read_tns(os.path.join(_dir(), "none.tns"))


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
    with pytest.raises(TypeError, match=r"policy must be an ExecutionPolicy or None; received int"):
        write_tns(tmp_path / "a.tns", np.array([[1, 0]]), np.array([1.0]), policy=2)
    # the largest index read_tns takes, 1-based, is 2**62: a 0-based 2**62 was written and then refused
    with pytest.raises(ValueError, match=r"coords must be below 2\*\*62 .* received a maximum of 4611686018427387904"):
        write_tns(tmp_path / "a.tns", np.array([[0, 2**62]]), np.array([1.0]))
    assert not (tmp_path / "a.tns").exists()  # nothing written by any refused call


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

    with pytest.raises(OutputFileError, match=r"^output '.*x\.npz' already exists; pass force=True to overwrite it$"):
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


# ------------------------------------------------------------------ randomized files against a plain reference
_BLANKS = " \t\r\v\f"


def _reference(text: bytes) -> tuple[list, list, tuple]:
    """A plain Python reading of a .tns file: (0-based coordinate rows, values, shape); raises ValueError with
    the 1-based number of the first malformed line."""
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    rows, vals, ncol = [], [], None
    for no, raw in enumerate(text.split(b"\n"), 1):
        toks = raw.split(b"#", 1)[0].decode()
        for b in _BLANKS[1:]:
            toks = toks.replace(b, " ")
        parts = toks.split(" ")
        parts = [t for t in parts if t]
        if not parts:
            continue
        ncol = ncol or len(parts)
        if len(parts) != ncol or not all(t.lstrip("+").isdigit() and int(t) >= 1 for t in parts[:-1]):
            raise ValueError(no)
        v = float(parts[-1].replace("_", "x"))  # .tns values have no underscores
        if not np.isfinite(v):
            raise ValueError(no)
        rows.append([int(t) - 1 for t in parts[:-1]])
        vals.append(v)
    return rows, vals, tuple(max(r[m] for r in rows) + 1 for m in range(ncol - 1))


def _random_value(rng) -> str:
    x = float(rng.standard_normal() * 10.0 ** rng.integers(-30, 30))
    k = int(rng.integers(12))
    if k == 0:
        return repr(x)
    if k == 1:
        return f"{x:.17g}"
    if k == 2:
        return f"{x:.{int(rng.integers(1, 19))}f}"
    if k == 3:
        return f"{x:+.6E}"
    if k == 4:
        return str(int(rng.integers(-10**6, 10**6)))
    if k == 5:
        return rng.choice(["-0", "+0", "0.0", "-0.000", ".5", "5.", "+.25", "-7.", "0001.50", "1e22", "1e23"])
    if k == 6:  # 16 to 20 digits: around 2**53 and past the fast path
        return "".join(rng.choice(list("0123456789"), int(rng.integers(16, 21)))) + rng.choice(["", ".5", "e-3"])
    return f"{rng.random():.{int(rng.integers(1, 12))}f}"


def _random_tns(rng, nlines: int, ncoord: int) -> bytes:
    out = []
    if rng.random() < 0.3:
        out.append("\ufeff" if rng.random() < 0.5 else "")
    for _ in range(nlines):
        r = rng.random()
        if r < 0.08:
            out.append("# a comment 1 2 3 4.5" if rng.random() < 0.5 else "#")
        elif r < 0.14:
            out.append(rng.choice(["", "   ", "\t", "\r"]))
        else:
            sep = lambda: rng.choice([" ", " ", " ", "\t", "  ", " \t "])  # noqa: E731
            toks = []
            for _m in range(ncoord):
                c = str(int(rng.integers(1, 40 if rng.random() < 0.9 else 10**9)))
                if rng.random() < 0.05:
                    c = rng.choice(["+", "0", "00"]) + c
                toks.append(c)
            toks.append(_random_value(rng))
            line = "".join(t + sep() for t in toks[:-1]) + toks[-1]
            if rng.random() < 0.1:
                line = rng.choice([" ", "\t", "  "]) + line
            if rng.random() < 0.1:
                line += rng.choice([" ", "\t", " # note", "# x", "\r"])
            out.append(line)
    eol = "\r\n" if rng.random() < 0.3 else "\n"
    text = eol.join(out)
    if rng.random() < 0.7:
        text += eol
    return text.encode()


def _same(got, ref):
    rows, vals, shape = ref
    c, v, s = got
    assert c.tolist() == rows
    assert v.tobytes() == np.array(vals, dtype=np.float64).tobytes()  # bitwise, -0.0 included
    assert s == shape


@pytest.mark.parametrize("seed", range(12))
def test_random_files_match_plain_reference_for_any_pieces_and_threads(monkeypatch, seed):
    """Random files (comments, blank lines, CRLF, tabs, signs, leading zeros, values of every form, a BOM,
    with or without a last newline) read as a plain Python reading does, bit for bit, in one piece or in
    pieces of a few bytes on 1, 2 or 3 threads."""
    rng = np.random.default_rng(seed)
    text = _random_tns(rng, int(rng.integers(1, 300)), int(rng.integers(1, 5)))
    path = os.path.join(_dir(), f"rand{seed}.tns")
    with open(path, "wb") as f:
        f.write(text)
    ref = _reference(text)
    _same(read_tns(path, policy=ExecutionPolicy(1)), ref)
    for chunk in (int(rng.integers(1, 64)), int(rng.integers(64, 2048))):
        monkeypatch.setattr(_tns, "CHUNK_BYTES", chunk)
        for w in (1, 2, 3):
            _same(read_tns(path, policy=ExecutionPolicy(w)), ref)


def test_every_cut_position_of_a_small_file(monkeypatch):
    """Pieces cut at every byte (inside comments and numbers, right at a newline, a CR before it) on 2
    threads: the same rows as one piece."""
    text = b"# head 1 2\r\n1 2 3.5\r\n\r\n 10\t2 -0.25 # c\n#\n3 30 1e-3\n2 2 +7\n\n4 1 0.1"
    path = os.path.join(_dir(), "cuts.tns")
    with open(path, "wb") as f:
        f.write(text)
    ref = _reference(text)
    for chunk in range(1, len(text) + 2):
        monkeypatch.setattr(_tns, "CHUNK_BYTES", chunk)
        _same(read_tns(path, policy=ExecutionPolicy(2)), ref)


@pytest.mark.parametrize(("bad", "match"), [
    ("1 1 x 1.0", r"line {} has a coordinate that is not an integer: '1 1 x 1.0'"),
    ("1 1 1.0", r"line {} has 3 columns but line 3 has 4"),
    ("1 0 1 1.0", r"line {} has coordinate\(s\) below 1 \(1 0 1\)"),
    ("1 1 1 1e999", r"line {} has a value that is NaN or infinite: '1e999'"),
    ("1 1 1 abc", r"line {} has a value that is not a number: 'abc'"),
    ("1 1 1 1.0 2", r"line {} has 5 columns but line 3 has 4"),
])
@pytest.mark.parametrize("where", [150, 399])
def test_error_line_numbers_in_a_later_piece(monkeypatch, bad, match, where):
    """A bad line in the last pieces (the file cut in pieces of ~100 bytes, read on 2 threads) is named by
    its line in the file, counted across the pieces before it, comments and blank lines included."""
    lines = ["# header"] + [f"{i % 9 + 1} {i % 4 + 1} {i + 1} {i / 8!r}" if i % 17 else "" for i in range(400)]
    lines[where] = bad
    path = _write("late.tns", "\r\n".join(lines))
    monkeypatch.setattr(_tns, "CHUNK_BYTES", 100)
    for w in (1, 2):
        with pytest.raises(TensorFileError, match=match.format(where + 1)):
            read_tns(path, policy=ExecutionPolicy(w))


def test_count_lines_matches_python():
    from tuckerkit.io import _tnsparse as K

    rng = np.random.default_rng(9)
    for n in (0, 1, 2, 31, 32, 33, 100, 1000):
        buf = rng.choice(np.array([10, 32, 49, 35, 13], dtype=np.uint8), n)
        for start in {0, 1, n // 2, n}:
            if start > n:
                continue
            b = bytes(buf[start:])
            want = b.count(b"\n") + (1 if b and not b.endswith(b"\n") else 0)
            assert K.count_lines(buf, start) == want


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_write_in_pieces_gives_the_same_bytes_for_any_pieces_and_threads(tmp_path, monkeypatch, dtype):
    """Runs of rows formatted in parallel and written in order: the same file as one run, on 1 or 2
    threads, for pieces of any size (one row, a few rows, uneven tails), and it reads back bit for bit."""
    rng = np.random.default_rng(11)
    n = 1000
    coords = np.stack([rng.integers(0, s, n) for s in (3, 10**6, 2**31 - 1)], axis=1).astype(np.int64)
    values = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(dtype)
    values[::13] = np.round(values[::13], 3)
    write_tns(tmp_path / "one.tns", coords, values, policy=ExecutionPolicy(1))
    ref = (tmp_path / "one.tns").read_bytes()
    assert ref.count(b"\n") == n
    for rows in (1, 7, 256, 999):
        monkeypatch.setattr(_tns, "WRITE_ROWS", rows)
        for w in (1, 2):
            write_tns(tmp_path / "p.tns", coords, values, force=True, policy=ExecutionPolicy(w))
            assert (tmp_path / "p.tns").read_bytes() == ref
    c, v, _ = read_tns(tmp_path / "p.tns", dtype=dtype)
    np.testing.assert_array_equal(c, coords)
    assert v.tobytes() == values.tobytes()
    write_tns(tmp_path / "i32.tns", coords.astype(np.int32) % 1000, values, policy=ExecutionPolicy(2))
    write_tns(tmp_path / "u16.tns", (coords % 1000).astype(np.uint16), values, policy=ExecutionPolicy(2))
    assert (tmp_path / "i32.tns").read_bytes() == (tmp_path / "u16.tns").read_bytes()
