"""FROSTT ``.tns`` text files: one nonzero per line, 1-based coordinates then the value."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _err(p: Path, msg: str):
    from tuckerkit.io._load import TensorFileError

    return TensorFileError(f"{str(p)!r}: {msg}")


def read_tns(
    path: str | os.PathLike, *, shape: Sequence[int] | None = None, dtype=np.float64
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Parse a ``.tns`` file into 0-based ``coords`` (nnz, N), ``values`` (nnz,) and the shape.

    Valid files go through numpy's C parser (``numpy.loadtxt``: no Python loop per line); a file it rejects
    is read again by a precise reader that names the malformed line. ``#`` comments, blank lines, trailing
    whitespace and scientific notation are accepted. Duplicate coordinates are kept (they add up when
    densified or are summed by ``COOTensor``).

    Parameters
    ----------
    path : str or Path
    shape : sequence of int, optional
        Default: the largest index of each mode. A coordinate beyond a given shape is an error.
    dtype : {float64, float32}, default float64
        dtype of ``values``.

    Returns
    -------
    coords : ndarray of int, shape (nnz, N)
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
    p = Path(path)
    fast = _read_fast(p, dtype)
    if fast is not None:
        coords, vals = fast
        return coords, vals, _shape_of(p, coords, shape)
    # slow path: only for files the fast reader rejected, to name the offending line
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise _err(p, "is not a text file (not UTF-8); expected a FROSTT .tns file") from None
    lines = text.splitlines()
    body = [(i + 1, ln.split("#", 1)[0].strip()) for i, ln in enumerate(lines)]
    body = [(i, ln) for i, ln in body if ln]
    if not body:
        raise _err(p, "holds no nonzeros (only comments or blank lines)")
    tokens = [ln.split() for _, ln in body]
    widths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    ncol = int(widths[0])
    if ncol < 2:
        raise _err(p, f"line {body[0][0]} has {ncol} column(s); expected coordinates followed by a value")
    bad = np.flatnonzero(widths != ncol)
    if bad.size:
        i = int(bad[0])
        raise _err(p, f"line {body[i][0]} has {int(widths[i])} columns but line {body[0][0]} has {ncol}; "
                      "every line needs the same number of coordinates and one value")
    flat = [tok for t in tokens for tok in t]
    arr = np.array(flat, dtype=object).reshape(len(tokens), ncol)
    try:
        idx = arr[:, :-1].astype(np.int64)
    except (ValueError, OverflowError):
        row = _first_bad(arr[:, :-1], int)
        line = " ".join(arr[row])
        raise _err(p, f"line {body[row][0]} has a coordinate that is not an integer: {line!r}") from None
    try:
        vals = arr[:, -1].astype(dtype)
    except ValueError:
        row = _first_bad(arr[:, -1:], float)
        raise _err(p, f"line {body[row][0]} has a value that is not a number: {arr[row, -1]!r}") from None
    low = np.flatnonzero((idx < 1).any(axis=1))
    if low.size:
        row = int(low[0])
        raise _err(p, f"line {body[row][0]} has coordinate(s) below 1 ({' '.join(arr[row, :-1])}); "
                      ".tns coordinates are 1-based")
    coords = idx - 1
    if not np.all(np.isfinite(vals)):
        row = int(np.flatnonzero(~np.isfinite(vals))[0])
        raise _err(p, f"line {body[row][0]} has a value that is NaN or infinite: {arr[row, -1]!r}")
    return coords, vals, _shape_of(p, coords, shape)


def _read_fast(p: Path, dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """numpy's C parser (comments, blank lines, exponents); None when the file needs the precise reader."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "empty input file" and friends: handled by the slow path
            data = np.loadtxt(p, comments="#", ndmin=2, dtype=np.float64)
    except (ValueError, UnicodeDecodeError, OSError):
        return None
    if data.shape[0] == 0 or data.shape[1] < 2:
        return None
    raw = data[:, :-1]
    if not np.all(raw == np.floor(raw)) or raw.min() < 1 or raw.max() >= 2.0**53:
        return None
    vals = data[:, -1].astype(dtype)
    if not np.all(np.isfinite(vals)):
        return None
    return raw.astype(np.int64) - 1, vals


def _shape_of(p: Path, coords: np.ndarray, shape: Sequence[int] | None) -> tuple[int, ...]:
    inferred = tuple(int(m) + 1 for m in coords.max(axis=0))
    if shape is None:
        shp = inferred
    else:
        shp = tuple(int(s) for s in shape)
        if len(shp) != coords.shape[1]:
            raise _err(p, f"shape {shp} has {len(shp)} modes but the file's lines have {coords.shape[1]} "
                          "coordinates")
        over = [m for m in range(len(shp)) if inferred[m] > shp[m]]
        if over:
            m = over[0]
            raise _err(p, f"mode {m} has index {inferred[m]} but the given shape allows at most {shp[m]}")
    return shp


def _first_bad(block: np.ndarray, conv) -> int:
    for r in range(block.shape[0]):
        try:
            for tok in block[r]:
                conv(tok)
        except ValueError:
            return r
    return 0


def write_tns(path: str | os.PathLike, coords: np.ndarray, values: np.ndarray, *, force: bool = False) -> None:
    """Write 0-based ``coords`` and ``values`` as a 1-based ``.tns`` file (atomically).

    Parameters
    ----------
    path : str or Path
    coords : array of int, shape (nnz, N)
    values : array, shape (nnz,)
        Written with 17 significant digits (float64 round-trips exactly).
    force : bool, default False
        Overwrite an existing file (refused otherwise with :class:`OutputFileError`).

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from tuckerkit.io import read_tns, write_tns
    >>> path = os.path.join(tempfile.mkdtemp(), "x.tns")
    >>> write_tns(path, np.array([[0, 1], [2, 0]]), np.array([0.5, 3.0]))
    >>> open(path).read().splitlines()
    ['1 2 0.5', '3 1 3']
    >>> read_tns(path)[2]
    (3, 2)
    """
    from tuckerkit.io._save import atomic_write

    coords = np.asarray(coords)
    data = np.column_stack([coords + 1, np.asarray(values)])
    fmt = " ".join(["%d"] * coords.shape[1] + ["%.17g"])

    def writer(f):
        np.savetxt(f, data, fmt=fmt)

    atomic_write(path, writer, force=force)
