"""FROSTT ``.tns`` text files: one nonzero per line, 1-based coordinates then the value."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _err(p: Path, msg: str):
    from tuckerkit.io._load import TensorFileError

    return TensorFileError(f"{str(p)!r}: {msg}")


def read_tns(
    path: str | os.PathLike, *, shape: Sequence[int] | None = None, dtype=np.float64, policy: Any = None,
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Parse a ``.tns`` file into 0-based ``coords`` (nnz, N), ``values`` (nnz,) and the shape.

    A compiled parser reads the memory-mapped file in pieces of about 8 MiB, in parallel over the policy's
    workers. Coordinates are integers (an optional ``+``); values are decimals with an optional exponent,
    each converted to the same double Python's ``float`` gives (exactly in the parser when its digits fit in
    2**53 and its power of ten is at most 22, else by a correctly rounded fallback). ``#`` comments, blank
    lines, CRLF line ends, a UTF-8 byte order mark and extra whitespace are accepted. The first malformed
    line is reported with its 1-based number, one line, at the cost of reading the file once. Duplicate
    coordinates are kept (they add up when densified or are summed by ``COOTensor``).

    Parameters
    ----------
    path : str or Path
    shape : sequence of int, optional
        Default: the largest index of each mode. A coordinate beyond a given shape is an error.
    dtype : {float64, float32}, default float64
        dtype of ``values`` (float32 values are the float64 ones rounded).
    policy : ExecutionPolicy, optional
        Threads for the parse (default: :func:`~tuckerkit.engine.default_policy`); the result does not
        depend on it.

    Returns
    -------
    coords : ndarray of int32 (int64 when an index needs it), shape (nnz, N)
    values : ndarray, shape (nnz,)
    shape : tuple of int

    Raises
    ------
    TensorFileError
        Missing file, a malformed line (named by its number), inconsistent column counts, indices < 1.

    Examples
    --------
    >>> import os, tempfile
    >>> from tuckerkit.io import read_tns
    >>> path = os.path.join(tempfile.mkdtemp(), "x.tns")
    >>> with open(path, "w") as f:
    ...     _ = f.write("# i j k value\\n1 1 1 2.5\\n2 3 1 -1e-3\\n")
    >>> coords, values, shape = read_tns(path)
    >>> coords.tolist(), values.tolist(), shape
    ([[0, 0, 0], [1, 2, 0]], [2.5, -0.001], (2, 3, 1))
    """
    from tuckerkit.io._load import regular_file

    p = regular_file(path, "input", "a .tns file")  # (a FIFO blocked the read forever; /dev/zero read as empty)
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64; received {dt}")
    if shape is not None:  # (checked as the constructor checks it: 2.7 was truncated to 2, "22" read as (2, 2))
        from tuckerkit.sparse._coo import _check_shape

        shape = _check_shape(shape)
    from tuckerkit.engine._policy import resolve_policy
    from tuckerkit.io import _tnsparse as K

    m = _mapped(p)
    with m as buf:
        start = 3 if buf.shape[0] >= 3 and bytes(buf[:3]) == _BOM else 0
        first, ncol, fstart = K.first_data_line(buf, start)
        if K.bare_cr(buf, start):  # (the file's first line: a comment there swallowed a CR-only file whole)
            _raise_text(p, buf, 1, start)
            raise _err(p, "line 1 holds a carriage return followed by more data (classic Mac line ends); expected "
                          "LF or CRLF line ends")
        if first == 0:
            if shape is not None:  # (an empty tensor written with to_tns reads back, its shape given)
                dims = tuple(int(d) for d in shape)
                if not dims or min(dims) < 1:
                    raise _err(p, f"holds no nonzeros and shape={dims} has an empty mode")
                return np.empty((0, len(dims)), np.int64), np.empty(0, dt), dims
            raise _err(p, "holds no nonzeros (only comments or blank lines); pass its shape to read it as an "
                          "empty tensor")
        if K.bare_cr(buf, fstart):  # (its lines would merge into one: 1 1 1 / 2 2 2 read as one 5-way nonzero)
            _raise_text(p, buf, first, fstart)
            raise _err(p, f"line {first} holds a carriage return followed by more data (classic Mac line ends); "
                          "expected LF or CRLF line ends")
        if ncol < 2 or ncol > K.MAX_COLS:
            _raise_text(p, buf, first, fstart)
            if ncol < 2:
                raise _err(p, f"line {first} has {ncol} column(s); expected coordinates followed by a value")
            raise _err(p, f"line {first} has {ncol} columns; a .tns file holds at most {K.MAX_COLS - 1} "
                          "coordinates and one value")
        coords, vals, cmax = _scan_chunks(p, buf, start, first, ncol, resolve_policy(policy), m.release)
    if dt != np.float64:
        with np.errstate(over="ignore"):
            narrow = vals.astype(dt)
        if narrow.dtype.kind == "f" and not np.isfinite(narrow).all():  # (finite in float64, beyond float32's range)
            at = int(np.flatnonzero(~np.isfinite(narrow))[0])
            raise _err(p, f"value {float(vals[at])!r} (nonzero {at + 1}) is outside the range of {dt.name} (largest "
                          f"{np.finfo(dt).max:.4g}); read it as float64")
        vals = narrow
    return coords, vals, _shape_of(p, cmax, shape)


_BOM = b"\xef\xbb\xbf"


#: the file is cut into pieces of about this many bytes, at line ends (a fixed split: the same pieces on any
#: machine), parsed in parallel
CHUNK_BYTES = 1 << 23


def _scan_chunks(p: Path, buf: np.ndarray, start: int, first: int, ncol: int, policy: Any,
                 release: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from tuckerkit.engine._policy import parallel_map
    from tuckerkit.io import _tnsparse as K

    n = buf.shape[0]
    cuts = [start]
    while cuts[-1] < n:
        nominal = cuts[-1] + CHUNK_BYTES
        if nominal >= n:
            cuts.append(n)
            break
        nl = bytes(buf[nominal: nominal + (1 << 20)]).find(b"\n")
        if nl < 0:  # a line longer than 1 MiB: let the piece run on to the file's end
            cuts.append(n)
            break
        cuts.append(nominal + nl + 1)
    pieces = list(itertools.pairwise(cuts))
    def count(ab: tuple[int, int]) -> int:
        n_ab = int(K.count_lines(buf[ab[0]: ab[1]], 0))
        if release is not None:
            release(*ab)
        return n_ab

    nlines = parallel_map(count, pieces, policy)
    row0 = np.concatenate([[0], np.cumsum(nlines)]).astype(np.int64)
    total = int(row0[-1])
    for itype, limit in ((np.int32, 2**31 - 1), (np.int64, 2**62)):
        # np.empty touches no pages: rows left unused by comments and blank lines cost no memory
        coords = np.empty((total, ncol - 1), dtype=itype)
        vals = np.empty(total, dtype=np.float64)

        def scan(k: int, coords: np.ndarray = coords, vals: np.ndarray = vals, limit: int = limit) -> tuple:
            a, b = pieces[k]
            out = K.scan_tns(buf[a:b], 0, coords[row0[k]: row0[k + 1]], vals[row0[k]: row0[k + 1]], limit,
                             K._POW10, K.CLS)
            if release is not None and out[0] == K.OK and out[8] == 0:
                release(a, b)  # parsed: its pages leave this process's memory (the kernel keeps the cache)
            return out

        results = parallel_map(scan, list(range(len(pieces))), policy)
        if itype is np.int64 or all(r[0] != K.E_BIG for r in results):
            break
    cmax = np.zeros(ncol - 1, dtype=np.int64)
    for k, (st, _rows, line, lstart, f_row, f_s, f_e, f_line, nf, cm) in enumerate(results):
        a = pieces[k][0]
        if nf:  # the piece's lines before any malformed one: their values decide first
            _fallback_values(p, buf, vals, f_row[:nf] + row0[k], f_s[:nf] + a, f_e[:nf] + a,
                             f_line[:nf] + row0[k])
        if st != K.OK:
            _line_error(p, buf, st, int(line + row0[k]), int(lstart + a), first, ncol)
        np.maximum(cmax, cm, out=cmax)
    # close the gaps left by comment and blank lines (a piece's rows move down, never up)
    dst = int(results[0][1])
    for k in range(1, len(pieces)):
        rows = int(results[k][1])
        if dst != row0[k]:
            coords[dst: dst + rows] = coords[row0[k]: row0[k] + rows]
            vals[dst: dst + rows] = vals[row0[k]: row0[k] + rows]
        dst += rows
    return coords[:dst], vals[:dst], cmax


class _mapped:
    """The file's bytes as a read-only uint8 array over a memory map (page cache, not the heap)."""

    def __init__(self, p: Path):
        self.p = p
        self.f: Any = None
        self.mm: Any = None

    def __enter__(self) -> np.ndarray:
        import mmap

        try:
            self.f = open(self.p, "rb")
            size = os.fstat(self.f.fileno()).st_size
        except OSError as exc:
            raise _err(self.p, f"cannot be read ({exc.strerror or exc})") from None
        if size == 0:
            return np.zeros(0, dtype=np.uint8)
        self.mm = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ)
        return np.frombuffer(self.mm, dtype=np.uint8)

    def release(self, a: int, b: int) -> None:
        """Drop the mapped pages of bytes a:b from this process's resident memory (they are read again from
        the page cache if touched), so a large file costs one piece of memory at a time, not its size."""
        import mmap

        if self.mm is None or not hasattr(self.mm, "madvise"):
            return
        page = mmap.PAGESIZE
        lo = (a + page - 1) // page * page
        hi = b // page * page
        if hi > lo:
            try:
                self.mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError, AttributeError):
                pass

    def __exit__(self, *exc: object) -> None:
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:  # an exception traceback still holds a view; the map closes with it
                pass
        if self.f is not None:
            self.f.close()


def _line_text(buf: np.ndarray, lstart: int) -> bytes:
    chunk = bytes(buf[lstart: lstart + 4096])
    return chunk.split(b"\n", 1)[0]


def _line_start(buf: np.ndarray, pos: int) -> int:
    lo = max(0, pos - 4096)
    return lo + bytes(buf[lo:pos]).rfind(b"\n") + 1 if pos else 0


def _raise_text(p: Path, buf: np.ndarray, line: int, pos: int) -> None:
    """A line (holding byte ``pos``) that is not UTF-8 text: the file is not a .tns file at all."""
    raw = _line_text(buf, _line_start(buf, pos))
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _err(p, f"is not a text file (line {line} is not UTF-8); expected a FROSTT .tns file") from None


def _line_error(p: Path, buf: np.ndarray, st: int, line: int, lstart: int, first: int, ncol: int) -> None:
    from tuckerkit.io import _tnsparse as K

    _raise_text(p, buf, line, lstart)
    text = _line_text(buf, lstart).decode("utf-8").split("#", 1)[0]
    toks = text.split()
    shown = " ".join(toks)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    if st == K.E_WIDTH:
        raise _err(p, f"line {line} has {len(toks)} columns but line {first} has {ncol}; "
                      "every line needs the same number of coordinates and one value")
    if st == K.E_COORD:
        raise _err(p, f"line {line} has a coordinate that is not an integer: {shown!r}")
    if st == K.E_LOW:
        raise _err(p, f"line {line} has coordinate(s) below 1 ({' '.join(toks[:-1])[:120]}); "
                      ".tns coordinates are 1-based")
    raise _err(p, f"line {line} has a coordinate above 2**62 ({' '.join(toks[:-1])[:120]}); "
                  "expected indices that fit a 64-bit integer")


def _fallback_values(p: Path, buf: np.ndarray, vals: np.ndarray, rows: np.ndarray, s: np.ndarray, e: np.ndarray,
                     lines: np.ndarray) -> None:
    """Values the compiled parser could not do exactly: numpy's correctly rounded string conversion (the
    digits of each were checked to form a decimal), else Python's ``float`` one token at a time."""
    from tuckerkit.io import _tnsparse as K

    width = int((e - s).max())
    fv = None
    if width <= 64:
        toks = K.gather_tokens(buf, s, e, width).view(f"S{width}").ravel()
        try:
            fv = toks.astype(np.float64)
        except ValueError:
            fv = None
    if fv is None:
        fv = np.empty(rows.shape[0], dtype=np.float64)
        for k in range(rows.shape[0]):
            tok = bytes(buf[s[k]: e[k]])
            try:
                fv[k] = float(tok)
            except ValueError:
                _raise_text(p, buf, int(lines[k]), int(s[k]))
                shown = tok.decode("utf-8", "replace")
                raise _err(p, f"line {int(lines[k])} has a value that is not a number: "
                              f"{shown[:60] + ('...' if len(shown) > 60 else '')!r}") from None
    bad = np.flatnonzero(~np.isfinite(fv))
    if bad.size:
        k = int(bad[0])
        text = bytes(buf[s[k]: e[k]]).decode("utf-8", "replace")
        raise _err(p, f"line {int(lines[k])} has a value that is NaN or infinite: {text[:60]!r}")
    vals[rows] = fv


def _shape_of(p: Path, sizes: np.ndarray, shape: Sequence[int] | None) -> tuple[int, ...]:
    inferred = tuple(int(m) for m in sizes)
    if shape is None:
        shp = inferred
    else:
        shp = tuple(int(s) for s in shape)
        if len(shp) != len(inferred):
            raise _err(p, f"shape {shp} has {len(shp)} modes but the file's lines have {len(inferred)} "
                          "coordinates")
        over = [m for m in range(len(shp)) if inferred[m] > shp[m]]
        if over:
            m = over[0]
            raise _err(p, f"mode {m} has index {inferred[m]} but the given shape allows at most {shp[m]}")
    return shp


def write_tns(path: str | os.PathLike, coords: np.ndarray, values: np.ndarray, *, force: bool = False,
              policy: Any = None) -> None:
    """Write 0-based ``coords`` and ``values`` as a 1-based ``.tns`` file (atomically).

    The text is formatted by a compiled writer: each value with the fewest of up to 15 significant digits that
    read back to the same number (checked exactly), else numpy's shortest round-trip form, so
    :func:`read_tns` returns the same bits. Runs of rows are formatted in parallel over the policy's workers
    and written in order as they are done (the same bytes for any number of workers; the text is never held
    whole).

    Parameters
    ----------
    path : str or Path
    coords : array of int, shape (nnz, N)
        0-based, non-negative.
    values : array of float, shape (nnz,)
        Finite; float32 values are written in float32's shortest form (a .tns file records no dtype: read them
        back with ``read_tns(path, dtype=numpy.float32)`` for the same bits; read as float64 they are the
        nearest doubles of those decimals, 0.1 for float32's 0.100000001).
    force : bool, default False
        Overwrite an existing file (refused otherwise with :class:`OutputFileError`).
    policy : ExecutionPolicy, optional
        Threads for the formatting (default: :func:`~tuckerkit.engine.default_policy`).

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from tuckerkit.io import read_tns, write_tns
    >>> path = os.path.join(tempfile.mkdtemp(), "x.tns")
    >>> write_tns(path, np.array([[0, 1], [2, 0]]), np.array([0.5, 3.0]))
    >>> open(path).read().splitlines()
    ['1 2 0.5', '3 1 3.0']
    >>> read_tns(path)[2]
    (3, 2)
    """
    from tuckerkit.io import _tnsparse as K
    from tuckerkit.io._save import atomic_write

    _check_suffix(path, ".tns")
    c = np.asarray(coords)
    v = np.asarray(values)
    if c.ndim != 2 or c.dtype.kind not in "iu":
        raise ValueError(f"coords must be a 2-D integer array (nnz, N); received {c.dtype} of shape {c.shape}")
    if v.shape != (c.shape[0],) or v.dtype.kind not in "fiub":
        raise ValueError(f"values must be a 1-D numeric array of length {c.shape[0]}; received {v.dtype} of "
                         f"shape {v.shape}")
    if c.size and int(c.min()) < 0:
        raise ValueError(f"coords must be 0-based and non-negative; received a minimum of {int(c.min())}")
    if c.size and int(c.max()) >= 2**62:  # (read_tns refuses a 1-based index above 2**62: never write one)
        raise ValueError(f"coords must be below 2**62 (a .tns index, 1-based, fits 2**62); received a maximum of "
                         f"{int(c.max())}")
    if v.dtype.kind != "f":
        v = v.astype(np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("values holds NaN or infinite entries; a .tns file holds finite numbers")
    from tuckerkit.engine._policy import parallel_map, resolve_policy

    pol = resolve_policy(policy)
    if c.dtype not in (np.int32, np.int64):
        c = c.astype(np.int64)
    c = np.ascontiguousarray(c)
    v = np.ascontiguousarray(v)
    n = c.shape[0]
    pieces = [(a, min(a + WRITE_ROWS, n)) for a in range(0, n, WRITE_ROWS)]

    def piece(ab: tuple[int, int]) -> np.ndarray:
        a, b = ab
        vp = v[a:b]
        if v.dtype == np.float64:
            text, miss = K.format_values(vp, K._POW10)
        else:  # float32 and others: numpy's shortest form of the dtype itself
            text = np.full(b - a, 10, dtype=np.uint8)
            miss = np.arange(b - a, dtype=np.int64)
        if miss.size:
            fill = vp[miss].astype("S32")
            text = K.splice_values(text, miss, fill.view(np.uint8).reshape(miss.size, 32), 32)
        return K.format_rows(c[a:b], text)

    def writer(f):
        step = max(1, pol.workers)
        for k in range(0, len(pieces), step):  # one batch of pieces per worker held at a time
            for data in parallel_map(piece, pieces[k: k + step], pol):
                f.write(memoryview(data))

    atomic_write(path, writer, force=force)


#: rows formatted per piece by :func:`write_tns` (a fixed split: the same text on any machine)
WRITE_ROWS = 1 << 18


#: the members of a sparse ``.npz`` archive (:func:`save_sparse_npz`)
SPARSE_NPZ_KEYS = ("coords", "shape", "values")


def save_sparse_npz(path: str | os.PathLike, coords: np.ndarray, values: np.ndarray, shape: Sequence[int], *,
                    force: bool = False) -> None:
    """Write a sparse tensor as an uncompressed ``.npz`` of ``coords`` (nnz, N) 0-based, ``values`` (nnz,)
    and ``shape`` (N,), atomically (the binary form of a ``.tns`` file: read back at disk speed)."""
    from tuckerkit.io._save import atomic_write

    _check_suffix(path, ".npz")
    arrays = {"coords": np.ascontiguousarray(coords), "values": np.ascontiguousarray(values),
              "shape": np.asarray(shape, dtype=np.int64)}

    def writer(f: Any) -> None:
        np.savez(f, **arrays)  # type: ignore[arg-type]

    atomic_write(path, writer, force=force)


#: the extensions by which load_tensor, open_tensor and the CLI tell the formats apart
_FORMAT_SUFFIXES = (".npy", ".npz", ".tns", ".mat", ".h5", ".hdf5")


def _check_suffix(path: Any, suffix: str) -> None:
    """An output named for another format is refused (a .npz written as "x.tns" was then read by
    ``load_tensor`` as text and refused); any other name is taken (``read_tns`` and ``from_npz`` read any name;
    ``load_tensor`` and the CLI tell the formats apart by the extension)."""
    from tuckerkit.io._save import OutputFileError

    if not isinstance(path, str | os.PathLike):
        from tuckerkit._validation import describe

        raise TypeError(f"path must be a file name (a {suffix} file); received {describe(path)}")
    ext = os.path.splitext(str(path))[1].lower()
    if ext in _FORMAT_SUFFIXES and ext != suffix:
        raise OutputFileError(f"output {str(path)!r} names a {ext} file; this writes the {suffix} format (name it "
                              f"*{suffix})")


def is_sparse_npz(files: Sequence[str]) -> bool:
    """True when an ``.npz`` archive's members are those of :func:`save_sparse_npz`."""
    return tuple(sorted(files)) == SPARSE_NPZ_KEYS


def load_sparse_npz(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """``coords``, ``values`` and ``shape`` of a sparse ``.npz`` (sizes checked against the file and memory
    before reading, no pickles); a one-line :class:`TensorFileError` for anything else."""
    from tuckerkit.io._load import TensorFileError, _check_npz_magic, _check_npz_member, regular_file

    p = regular_file(path, "input", "a sparse .npz file")  # (a FIFO blocked the read forever)
    _check_npz_magic(p)
    try:
        with open(p, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            if not is_sparse_npz(z.files):
                raise _err(p, f"holds the arrays {', '.join(sorted(z.files)) or '(none)'}; a sparse .npz holds "
                              "exactly coords, shape and values")
            for k in SPARSE_NPZ_KEYS:
                _check_npz_member(z, k, p)
            coords, values, shp = z["coords"], z["values"], z["shape"]
    except TensorFileError:
        raise
    except OSError as exc:
        raise _err(p, f"cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise _err(p, f"is not a valid .npz file ({first})") from None
    if shp.ndim != 1 or shp.dtype.kind not in "iu" or shp.size < 1:
        raise _err(p, f"['shape'] must be a 1-D integer array; received {shp.dtype} of shape {shp.shape}")
    N = int(shp.size)
    if coords.ndim != 2 or coords.dtype.kind not in "iu" or coords.shape[1] != N:
        raise _err(p, f"['coords'] must be an integer array of shape (nnz, {N}); received {coords.dtype} of shape "
                      f"{coords.shape}")
    if not values.dtype.isnative:  # ('>f8': the same numbers, byte-swapped)
        values = values.astype(values.dtype.newbyteorder("="))
    if not coords.dtype.isnative:
        coords = coords.astype(coords.dtype.newbyteorder("="))
    if values.dtype not in (np.float32, np.float64) or values.shape != (coords.shape[0],):
        raise _err(p, f"['values'] must be float32 or float64 of shape ({coords.shape[0]},); received "
                      f"{values.dtype} of shape {values.shape}")
    return coords, values, tuple(int(s) for s in shp)
