"""A ``.npy`` file as a Dask array whose tasks read their own rows from the file.

``dask.array.from_array(numpy.load(path, mmap_mode="r"))`` would pickle the memory map, i.e. the whole tensor,
into the graph; here each task carries only the path and the rows it needs, so a worker (on this machine
or any machine that sees the same file system) reads just its slab.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from tuckerkit.io._load import TensorFileError, _check_npy_magic, _check_npy_size, _check_path, _first_line


class _NpyRows:
    """Picklable by path: ``shape``, ``dtype`` and row slicing of a ``.npy`` file, opened on each access."""

    def __init__(self, path: Path):
        self.path = str(path)
        arr = np.load(self.path, mmap_mode="r", allow_pickle=False)
        self.shape, self.dtype, self.ndim = arr.shape, arr.dtype, arr.ndim
        self.fortran = bool(arr.flags.f_contiguous and not arr.flags.c_contiguous)
        self.size_bytes = os.stat(self.path).st_size

    def __getitem__(self, index: Any) -> np.ndarray:
        # the file as opened, or a one-line error naming it: a file replaced or truncated since gave numpy's
        # "mmap length is greater than file size", einsum's index sizes, or other data read without a word
        try:
            size = os.stat(self.path).st_size
            arr = np.load(self.path, mmap_mode="r", allow_pickle=False) if size == self.size_bytes else None
        except (OSError, ValueError, EOFError) as exc:
            raise TensorFileError(f"{self.path!r} could not be read again ({_first_line(exc) or type(exc).__name__})"
                                  "; it changed since open_npy_dask opened it") from None
        if arr is None or arr.shape != self.shape or arr.dtype != self.dtype or \
                bool(arr.flags.f_contiguous and not arr.flags.c_contiguous) != self.fortran:
            raise TensorFileError(f"{self.path!r} changed since open_npy_dask opened it (shape {self.shape}, dtype "
                                  f"{self.dtype}, {self.size_bytes:,} bytes then); open it again")
        return np.array(arr[index])


def open_npy_dask(path: str | os.PathLike, *, chunk_bytes: int = 256 << 20, chunks: Any = None) -> Any:
    """Open a ``.npy`` file as a ``dask.array.Array`` chunked along its first mode.

    Parameters
    ----------
    path : path-like
        A ``.npy`` file (read lazily, never loaded whole).
    chunk_bytes : int or str, default 256 MiB
        Target chunk size in bytes (or a size such as ``"64MB"``); chunks hold whole slabs ``X[i:j]``.
    chunks : optional
        Explicit Dask chunks (overrides ``chunk_bytes``).

    Returns
    -------
    dask.array.Array

    Raises
    ------
    TensorFileError
        For a missing, unreadable or non-numeric file; ``ImportError`` without dask.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from tuckerkit.io import open_npy_dask
    >>> p = tempfile.mkdtemp() + "/x.npy"; np.save(p, np.arange(24.0).reshape(4, 3, 2))
    >>> X = open_npy_dask(p, chunk_bytes=96)
    >>> X.chunks[0], float(X.sum().compute())
    ((2, 2), 276.0)
    """
    try:
        import dask.array as da
    except ImportError:
        raise ImportError("open_npy_dask needs dask; install it with: pip install 'tuckerkit[distributed]'") from None
    # (absolute: the chunks reopen the file by name, later, maybe from another folder or on another worker;
    # a relative name read whatever file it named there)
    p = Path(os.path.abspath(_check_path(path)))
    if p.suffix.lower() != ".npy":
        raise TensorFileError(f"input {str(p)!r} is not a .npy file; open_npy_dask reads .npy files (open others "
                              "with tuckerkit.io.open_tensor)")
    _check_npy_magic(p)
    _check_npy_size(p)
    try:
        rows = _NpyRows(p)
    except (ValueError, EOFError, OSError) as exc:
        raise TensorFileError(f"{str(p)!r} is not a readable .npy array ({_first_line(exc) or type(exc).__name__})"
                              ) from None
    if rows.dtype.kind not in "biufc":
        raise TensorFileError(f"{p}: dtype {rows.dtype} is not numeric; expected a numeric array")
    if rows.ndim < 1:
        raise TensorFileError(f"{p}: a 0-d array; expected a tensor")
    if chunks is None:
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int | np.integer | str):
            raise TypeError(f"chunk_bytes must be a number of bytes or a size such as '64MB'; received "
                            f"{chunk_bytes!r}")
        from tuckerkit.engine._slabs import parse_memory

        chunk_bytes = parse_memory(chunk_bytes, "chunk_bytes")
        row_bytes = max(1, int(np.prod(rows.shape[1:])) * rows.dtype.itemsize)
        step = max(1, min(rows.shape[0], int(chunk_bytes) // row_bytes))
        chunks = (step, *rows.shape[1:])
    return da.from_array(rows, chunks=chunks, asarray=False, lock=False, inline_array=True, meta=np.empty(
        (0,) * rows.ndim, dtype=rows.dtype))
