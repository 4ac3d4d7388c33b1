"""Reader fuzz (issue 21): mutated .npy, .npz, .h5, .tns and result files, read through tuckerkit.io and the
command line's ``info``. The only outcomes allowed are success or the package's own one-line errors, within a
memory cap (tracemalloc peak; numpy's buffers are traced). Derandomized with a fixed number of examples, so
every run (and CI) tries the same files."""

from __future__ import annotations

import io
import os
import traceback
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuckerkit as tk
import tuckerkit.io as tkio
from tuckerkit.io import TensorFileError
from tuckerkit.sparse import COOTensor

PEAK_CAP = 64 * 2**20  # bytes: the valid files are a few KB; no mutation may make a reader allocate more
FUZZ = settings(max_examples=30, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
PKG = str(Path(tk.__file__).parent)


# ----------------------------------------------------------------------------------------------- valid seeds
def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _unzip(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 4, 5))
    out = {"npy": _npy_bytes(X), "npz": _zip({"a.npy": _npy_bytes(X)})}
    (d / "s.tns").write_text("# i j k v\n1 1 1 2.5\n2 3 1 -1e-3\n3 4 5 7\n")
    out["tns"] = (d / "s.tns").read_bytes()
    out["tucker"] = tkio.save_result(d / "t.npz", tk.hosvd(X, 2)).read_bytes()
    out["cp"] = tkio.save_result(d / "c.npz", tk.cp_als(X, 2, random_state=0, tol=1e-4)).read_bytes()
    h5py = pytest.importorskip("h5py")
    with h5py.File(d / "s.h5", "w") as f:
        f.create_dataset("x", data=X)
    out["h5"] = (d / "s.h5").read_bytes()
    return out


# -------------------------------------------------------------------------------------------------- mutations
HUGE = [-1, 0, 1, 3, 5, 2**31, 2**40, 10**18, 2**63 - 1]
DESCRS = ["<f8", "<f4", ">f8", "|b1", "<i8", "|O", "<U3", "<c16", "|V8", "<M8[s]", "<f2", "garbage", "(", "{"]
byte_ops = st.lists(
    st.tuples(st.sampled_from(["flip", "truncate", "overwrite", "insert", "delete"]), st.floats(0, 1),
              st.binary(min_size=1, max_size=8)),
    min_size=1, max_size=4)
headers = st.fixed_dictionaries({
    "shape": st.lists(st.sampled_from(HUGE), min_size=0, max_size=5).map(tuple),
    "descr": st.sampled_from(DESCRS),
    "fortran_order": st.sampled_from([False, True, 1, "no"]),
    "version": st.sampled_from([(1, 0), (2, 0), (3, 0), (9, 9)]),
    "keep": st.floats(0, 1),
})


def _apply(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for kind, where, payload in ops:
        i = min(int(where * len(b)), max(len(b) - 1, 0))
        if kind == "flip" and b:
            b[i] ^= 1 << (payload[0] % 8)
        elif kind == "truncate":
            del b[i:]
        elif kind == "overwrite":
            b[i:i + len(payload)] = payload
        elif kind == "insert":
            b[i:i] = payload
        elif kind == "delete":
            del b[i:i + len(payload)]
    return bytes(b)


def _crafted_npy(payload: bytes, h: dict) -> bytes:
    """An .npy whose header says anything (negative, huge or many dimensions, odd dtypes, unknown versions)."""
    text = f"{{'descr': {h['descr']!r}, 'fortran_order': {h['fortran_order']!r}, 'shape': {h['shape']!r}, }}"
    major, minor = h["version"]
    width = 2 if major == 1 else 4
    pad = -(6 + 2 + width + len(text) + 1) % 64
    body = (text + " " * pad + "\n").encode("latin1")
    head = b"\x93NUMPY" + bytes([major, minor]) + len(body).to_bytes(width, "little")
    old = payload[payload.index(b"\n") + 1:] if b"\n" in payload[:200] else b""
    return head + body + old[: int(h["keep"] * len(old))]


def _mutate_zip(data: bytes, ops, h: dict | None, target: int) -> bytes:
    """Mutate one member of an archive (its CRC stays right, so the bytes reach numpy) and rebuild it."""
    members = _unzip(data)
    names = list(members)
    name = names[target % len(names)]
    members[name] = _crafted_npy(members[name], h) if h is not None else _apply(members[name], ops)
    return _zip(members)


# ---------------------------------------------------------------------------------------------------- checks
def _ours(exc: BaseException) -> bool:
    """Raised by tuckerkit itself (the innermost frame is in the package), not a numpy or zipfile error
    passing through."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and last.tb_frame.f_code.co_filename.startswith(PKG)


def _read_safely(fn, path: Path, allowed=(TensorFileError,)):
    tracemalloc.start()
    try:
        fn(path)
    except allowed as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and len(msg) < 600, msg
        assert isinstance(exc, TensorFileError) or _ours(exc), "".join(traceback.format_exception(exc))
    except Exception as exc:  # pragma: no cover - the failure being tested for
        raise AssertionError(f"{path.name}: {type(exc).__name__} escaped:\n"
                             + "".join(traceback.format_exception(exc))) from None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < PEAK_CAP, f"{path.name}: reading allocated {peak / 2**20:.0f} MiB"


def _load(p):
    X = tkio.load_tensor(p)
    if isinstance(X, COOTensor):
        assert X.values.shape == (X.nnz,) and np.isfinite(X.values).all()
    elif X.size:
        float(np.asarray(X).reshape(-1)[-1])  # touch the data (a memory map reads here)


def _open(p):
    with tkio.open_tensor(p) as X:
        X.shape  # noqa: B018


def _info(p):
    from tuckerkit.cli import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["info", str(p)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 0 or (res.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: ")), \
        f"{p.name}: exit {res.exit_code}: {res.output[-2000:]}"
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


# ------------------------------------------------------------------------------------------------------ fuzz
@FUZZ
@given(ops=byte_ops, header=st.one_of(st.none(), headers))
def test_fuzz_npy(seeds, tmp_path, ops, header):
    data = _crafted_npy(seeds["npy"], header) if header is not None else _apply(seeds["npy"], ops)
    p = _write(tmp_path, "f.npy", data)
    _read_safely(_load, p)
    _read_safely(_open, p, (TensorFileError, ValueError, TypeError, MemoryError))
    _read_safely(_info, p)


@FUZZ
@given(ops=byte_ops, header=st.one_of(st.none(), headers), whole=st.booleans())
def test_fuzz_npz(seeds, tmp_path, ops, header, whole):
    data = _apply(seeds["npz"], ops) if whole and header is None else _mutate_zip(seeds["npz"], ops, header, 0)
    p = _write(tmp_path, "f.npz", data)
    _read_safely(_load, p)
    _read_safely(_info, p)


@FUZZ
@given(ops=byte_ops, header=st.one_of(st.none(), headers), whole=st.booleans(), target=st.integers(0, 4),
       kind=st.sampled_from(["tucker", "cp"]))
def test_fuzz_result_files(seeds, tmp_path, ops, header, whole, target, kind):
    data = _apply(seeds[kind], ops) if whole and header is None else _mutate_zip(seeds[kind], ops, header, target)
    p = _write(tmp_path, "r.npz", data)
    _read_safely(tkio.load_result, p)
    _read_safely(tkio.load_metadata, p)
    _read_safely(_info, p)


@settings(FUZZ, max_examples=20)
@given(ops=byte_ops)
def test_fuzz_h5(seeds, tmp_path, ops):
    p = _write(tmp_path, "f.h5", _apply(seeds["h5"], ops))
    _read_safely(_load, p)


@FUZZ
@given(ops=byte_ops, line=st.sampled_from(["", "1 1 1 1e400\n", "\ufeff1 1 1 1\n", "1 1 1e20 1\n", "1 1\n",
                                           "99999999999999999999 1 1 1\n", "0 0 0 0\n", "-1 2 3 4\n",
                                           "1 1 1 nan\n", "1 1 1 1 1\n", "\x00\n"]))
def test_fuzz_tns(seeds, tmp_path, ops, line):
    p = _write(tmp_path, "f.tns", _apply(seeds["tns"] + line.encode(), ops))
    _read_safely(_load, p)
    _read_safely(_open, p, (TensorFileError, ValueError, TypeError, MemoryError))


def test_the_mutations_reach_the_readers(seeds, tmp_path):
    """The crafted headers are well-formed enough for numpy to parse, so the size and dtype checks are tried."""
    h = {"shape": (2**40, 2**20), "descr": "<f8", "fortran_order": False, "version": (1, 0), "keep": 1.0}
    p = _write(tmp_path, "big.npz", _mutate_zip(seeds["npz"], [], h, 0))
    with pytest.raises(TensorFileError, match=r"claims an array of shape \(1099511627776, 1048576\)"):
        tkio.load_tensor(p)
    p = _write(tmp_path, "big.npy", _crafted_npy(seeds["npy"], h))
    with pytest.raises(TensorFileError, match=r"is not a valid .npy file"):
        tkio.load_tensor(p)
    assert os.path.getsize(p) < 1000
