"""Load tensors from .npy (memory-mapped), .npz, .mat, .tns (FROSTT) and .h5/.hdf5 files."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = (".npy", ".npz", ".mat", ".tns", ".h5", ".hdf5")


class TensorFileError(ValueError):
    """A tensor file is missing, unreadable, corrupt or of an unsupported kind (one-line message).

    A subclass of ``ValueError``; the CLI prints its message as ``error: ...`` and exits with status 1.

    Examples
    --------
    >>> from tuckerkit.io import TensorFileError, load_tensor
    >>> try:
    ...     load_tensor("no-such-file.npy")
    ... except TensorFileError as exc:
    ...     print(exc)
    input file 'no-such-file.npy' does not exist
    """


def regular_file(path: Any, noun: str = "input", expected: str = "a tensor file") -> Path:
    """``path`` as a Path to a regular file that exists, or a one-line error: a file object or bytes for a name
    (TypeError), a missing file, a folder, a loop of links, or a FIFO, device or socket (a FIFO blocked every
    reader forever before it was opened; /dev/zero read as an empty .tns) (:class:`TensorFileError`, naming the
    file as ``noun`` and what was ``expected``)."""
    if not isinstance(path, str | os.PathLike):
        from tuckerkit._validation import describe

        raise TypeError(f"path must be a file name (str or pathlib.Path); received {describe(path)} "
                        f"({type(path).__name__})")
    p = Path(path)
    try:
        os.stat(p)
    except FileNotFoundError:
        raise TensorFileError(f"{noun} file {str(p)!r} does not exist") from None
    except PermissionError:  # (Path.exists raised it bare: a folder on the path that cannot be searched)
        raise TensorFileError(f"{noun} file {str(p)!r} cannot be reached (permission denied on a folder of its "
                              "path)") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TensorFileError(f"{noun} {str(p)!r} is a loop of symbolic links; expected {expected}") from None
        raise TensorFileError(f"{noun} file {str(p)!r} cannot be read ({exc.strerror})") from None
    if p.is_dir():
        raise TensorFileError(f"{noun} {str(p)!r} is a directory; expected {expected}")
    mode = p.stat().st_mode
    if not stat.S_ISREG(mode):  # (a FIFO blocked the read forever; /dev/urandom read as an empty .tns)
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        raise TensorFileError(f"{noun} {str(p)!r} is {kind}, not a regular file; expected {expected}")
    return p


def _check_path(path: str | os.PathLike) -> Path:
    p = regular_file(path, "input", f"a tensor file ({', '.join(FORMATS)})")
    if p.suffix.lower() not in FORMATS:
        raise TensorFileError(
            f"input {str(p)!r} has the unknown extension {p.suffix or '(none)'!r}; "
            f"expected one of {', '.join(FORMATS)}"
        )
    if not os.access(p, os.R_OK):
        raise TensorFileError(f"input file {str(p)!r} is not readable (permission denied)")
    return p


def _check_options(p: Path, key: str | None, shape: Sequence[int] | None) -> None:
    """``key`` names an array inside a file that holds several (.npz, .mat, .h5/.hdf5) and ``shape`` is the
    shape of a .tns tensor; given for any other file they would be silently ignored, so they are refused."""
    ext = p.suffix.lower()
    if key is not None and ext not in (".npz", ".mat", ".h5", ".hdf5"):
        raise TensorFileError(f"--key / key={key!r} applies only to .npz, .mat, .h5 and .hdf5 files (it names the "
                              f"array to read); received the {ext} file {str(p)!r}")
    if shape is not None and ext != ".tns":
        shp = tuple(shape) if isinstance(shape, Sequence | np.ndarray) and not isinstance(shape, str) else shape
        raise TensorFileError(f"--shape / shape={shp!r} applies only to .tns files (the shape of a sparse tensor); "
                              f"received the {ext} file {str(p)!r}")


def _check_array(arr: Any, where: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise TensorFileError(f"{where} does not hold an array (found {type(arr).__name__})")
    if arr.dtype.kind not in "biufc":
        raise TensorFileError(
            f"{where} holds an array of dtype {arr.dtype}; expected numbers (float, complex, int or bool)"
        )
    return arr


def _pick_key(keys: Sequence[str], key: str | None, where: str) -> str:
    if key is not None:
        if key not in keys:
            names = ", ".join(keys) or "(none)"
            raise TensorFileError(f"{where} has no array named {key!r}; its arrays are: {names}")
        return key
    if len(keys) == 1:
        return keys[0]
    if not keys:
        raise TensorFileError(f"{where} holds no arrays")
    raise TensorFileError(f"{where} holds several arrays ({', '.join(keys)}); choose one with --key / key=")


def _check_npy_magic(p: Path) -> None:
    """A ``.npy`` file starts with ``\\x93NUMPY``; anything else (a text file, a pickle) is not one. Without this
    check numpy hands the bytes to its pickle fallback, whose refusal reads as "an object array"."""
    try:
        with open(p, "rb") as f:
            head = f.read(6)
    except OSError as exc:
        raise TensorFileError(f"{str(p)!r} cannot be read ({exc.strerror or exc})") from None
    if head != b"\x93NUMPY":
        what = "it is empty" if not head else (
            "it looks like a text file" if all(32 <= b < 127 or b in (9, 10, 13) for b in head) else
            "it does not start with the .npy header")
        raise TensorFileError(f"{str(p)!r} is not a valid .npy file ({what}; expected an array saved by numpy.save)")


def _check_npz_magic(p: Path) -> None:
    """An ``.npz`` archive is a zip file (``PK\\x03\\x04``, or ``PK\\x05\\x06`` when it holds nothing); anything else
    is not one. Without this check numpy hands a text file to its pickle fallback, whose refusal reads as "an
    object array"."""
    try:
        with open(p, "rb") as f:
            head = f.read(6)
    except OSError as exc:
        raise TensorFileError(f"{str(p)!r} cannot be read ({exc.strerror or exc})") from None
    if head[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):
        what = "it is empty" if not head else "it is a .npy file (one array)" if head == b"\x93NUMPY" else (
            "it looks like a text file" if all(32 <= b < 127 or b in (9, 10, 13) for b in head) else
            "it does not start with the zip header")
        raise TensorFileError(f"{str(p)!r} is not a valid .npz file ({what}; expected a zip archive saved by "
                              "numpy.savez)")


def _check_npy_size(p: Path, label: str | None = None) -> None:
    """The bytes a ``.npy`` header claims (its shape times its item size, in exact integers: no overflow
    warnings) must be the bytes that follow it: a truncated file, or a header claiming more or fewer elements
    than the file holds, is refused here with both sizes, before numpy maps or reads it. Headers numpy cannot
    parse, negative dimensions and object arrays are left to ``numpy.load``, which refuses them itself."""
    label = label or repr(str(p))
    try:
        with open(p, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
            offset = f.tell()
    except Exception:
        return
    if dtype.hasobject or any(int(d) < 0 for d in shape):
        return
    claimed = dtype.itemsize
    for d in shape:
        claimed *= int(d)
    present = p.stat().st_size - offset
    if claimed != present:
        fault = ("the file is truncated or corrupt" if claimed > present else
                 "a .npy file holds exactly the bytes its header claims")
        raise TensorFileError(
            f"{label} is not a valid .npy file (its header claims an array of shape {tuple(shape)} and dtype "
            f"{dtype} ({claimed:,} bytes) but {present:,} bytes of data are present; {fault})"
        )


def _object_error(p: Path) -> TensorFileError:
    return TensorFileError(f"{str(p)!r} holds an object array; expected numbers (float, int or bool)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _check_npz_member(z: Any, k: str, p: Path) -> None:
    """Compare a member's claimed array size with its real (uncompressed) size and the memory before reading:
    a 317-byte file claiming 72.8 TiB, or a deflate bomb, is refused here instead of allocating."""
    name = k + ".npy"
    try:
        info = z.zip.getinfo(name)
        with z.zip.open(name) as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
            header = fh.tell() if hasattr(fh, "tell") else 0
    except KeyError:
        return  # numpy reports the missing member itself
    claimed = int(np.prod([int(d) for d in shape], dtype=np.float64) * np.dtype(dtype).itemsize)
    if any(int(d) < 0 for d in shape) or claimed > info.file_size - header + 64:
        raise TensorFileError(
            f"{str(p)!r}[{k!r}] claims an array of shape {tuple(shape)} ({claimed:,} bytes) but holds "
            f"{info.file_size:,} bytes; the file is corrupt"
        )
    from tuckerkit._validation import available_memory

    if claimed > available_memory():
        raise TensorFileError(f"{str(p)!r}[{k!r}] holds {claimed / 1e9:.3g} GB, more than the memory available")


def _check_h5_storage(ds: Any, where: str, allow_external: bool) -> None:
    """Refuse datasets whose bytes live in other files (external storage, virtual datasets) unless asked: a
    crafted .h5 could otherwise pull any local file into a tensor."""
    if allow_external:
        return
    if getattr(ds, "external", None):
        raise TensorFileError(f"{where} keeps its data in external files ({ds.external[0][0]!r}, ...); pass "
                              "allow_external=True (--allow-external) to read them")
    if getattr(ds, "is_virtual", False):
        raise TensorFileError(f"{where} is a virtual dataset mapping other files; pass allow_external=True "
                              "(--allow-external) to read it")


#: the share of the memory available that an array read whole may take (the reading library's own buffers, and
#: the process, need the rest: a 21.6 GB dataset with 22 GB free was read, and the process killed)
FIT_SHARE = 0.8


def _check_fits(claimed: float, where: str, how: str) -> None:
    """Refuse, before reading, an array larger than the memory available now (one line with both sizes):
    a small file can claim any size (a 1.4 KB chunked HDF5 dataset of 20 GB was read, and the process killed)."""
    from tuckerkit._validation import available_memory

    avail = available_memory()
    if claimed > FIT_SHARE * avail:
        raise TensorFileError(f"{where} holds {claimed / 1e9:.3g} GB, more than {FIT_SHARE:.0%} of the "
                              f"{avail / 1e9:.3g} GB of memory available; {how}")


def _mat_variables(p: Path) -> list[tuple[str, tuple[int, ...], str]] | None:
    """The variables of a .mat file as (name, shape, MATLAB class) from its headers (nothing read), or None
    for a MATLAB v7.3 file (HDF5 inside)."""
    import scipy.io

    try:
        return [(name, tuple(int(d) for d in shape), cls) for name, shape, cls in scipy.io.whosmat(p)]
    except NotImplementedError:  # (scipy: "Please use HDF reader for matlab v7.3 files")
        return None


#: bytes per entry of MATLAB's numeric classes (whosmat's names)
_MAT_ITEMSIZE = {"double": 8, "single": 4, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4,
                 "uint32": 4, "int64": 8, "uint64": 8, "logical": 1}


def _read_h5(p: Path, key: str | None, allow_external: bool, matlab: bool = False) -> np.ndarray:
    """One dataset of an HDF5 file (``matlab``: a MATLAB v7.3 .mat file, whose arrays HDF5 holds with their axes
    reversed: read back in MATLAB's order), its size checked against the memory first."""
    try:
        import h5py
    except ImportError:
        raise TensorFileError(
            f"reading {p.suffix} files needs h5py, which is not installed; install it with pip install h5py"
        ) from None
    k = key or ""
    try:
        with h5py.File(p, "r") as f:
            names: list[str] = []
            f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
            if matlab:  # (MATLAB's own bookkeeping: #refs#, #subsystem#)
                names = [n for n in names if not n.startswith("#")]
            if key is not None and key.startswith("/") and key.lstrip("/") in names:
                key = key.lstrip("/")  # (HDF5's absolute path of the same dataset)
            k = _pick_key(names, key, repr(str(p)))
            ds = f[k]
            _check_h5_storage(ds, f"{str(p)!r}[{k!r}]", allow_external)
            if ds.shape is not None and ds.dtype.kind in "biuf":
                _check_fits(float(np.prod([float(d) for d in ds.shape])) * ds.dtype.itemsize,
                            f"{str(p)!r}[{k!r}]", "open it with tuckerkit.io.open_tensor(..., memory_limit=...) "
                            "(--memory-limit) to stream it")
            arr = ds[()]
    except TensorFileError:
        raise
    except MemoryError:
        raise TensorFileError(f"{str(p)!r}[{k!r}] does not fit in the memory available") from None
    except Exception as exc:
        raise TensorFileError(f"{str(p)!r} is not a valid {'MATLAB v7.3 .mat' if matlab else 'HDF5'} file "
                              f"({_first_line(exc)})") from None
    if matlab and isinstance(arr, np.ndarray):
        arr = arr.transpose()
    return _check_array(arr, f"{str(p)!r}[{k!r}]")


def load_tensor(
    path: str | os.PathLike, *, key: str | None = None, shape: Sequence[int] | None = None, mmap: bool = True,
    allow_external: bool = False,
) -> Any:
    """Load a dense tensor from a file, choosing the reader by extension.

    Parameters
    ----------
    path : str or Path
        ``.npy`` (memory-mapped read-only by default, read once), ``.npz`` (one array, or ``key``), ``.mat``
        (MATLAB, ``key`` selects a variable), ``.tns`` (FROSTT text: 1-based coordinates then the value;
        ``#`` comments and blank lines allowed; a sparse :class:`~tuckerkit.sparse.COOTensor`, never
        densified), ``.h5``/``.hdf5`` (needs h5py; ``key`` is the dataset path).
    key : str, optional
        Array name inside ``.npz``/``.mat``/``.h5`` files holding several.
    shape : sequence of int, optional
        Shape of a ``.tns`` tensor (default: the largest index in each mode).
    mmap : bool, default True
        Memory-map ``.npy`` files instead of reading them into memory.
    allow_external : bool, default False
        Read HDF5 datasets whose data lives in other files (external storage, virtual datasets); refused by
        default, since a crafted file could otherwise read any local file.

    Returns
    -------
    numpy.ndarray (a read-only numpy.memmap for ``.npy``), or a COOTensor for ``.tns`` and for a sparse
    ``.npz`` (exactly the arrays ``coords``, ``shape``, ``values``: :meth:`COOTensor.save_npz`)

    Raises
    ------
    TensorFileError
        Missing, unreadable, corrupt or unsupported files, with a one-line message.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from tuckerkit.io import load_tensor
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "x.npy"); np.save(p, np.ones((2, 3, 4)))
    >>> load_tensor(p).shape
    (2, 3, 4)
    """
    p = _check_path(path)
    _check_options(p, key, shape)
    ext = p.suffix.lower()
    if ext == ".npy":
        _check_npy_magic(p)
        _check_npy_size(p)
        try:
            arr = np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
        except ValueError as exc:
            if "allow_pickle" in str(exc) or "Object arrays" in str(exc) or "Python objects" in str(exc):
                raise _object_error(p) from None
            raise TensorFileError(f"{str(p)!r} is not a valid .npy file ({exc})") from None
        except Exception as exc:  # a crafted header fails deep inside numpy (OverflowError, ...)
            raise TensorFileError(f"{str(p)!r} is not a valid .npy file ({_first_line(exc)})") from None
        return _check_array(arr, repr(str(p)))
    if ext == ".npz":
        from tuckerkit.io._tns import is_sparse_npz

        _check_npz_magic(p)
        try:
            with open(p, "rb") as fh, np.load(fh, allow_pickle=False) as z:  # closed even when corrupt
                if key is None and is_sparse_npz(z.files):  # coords, shape, values: COOTensor.save_npz
                    from tuckerkit.sparse import COOTensor

                    return COOTensor.from_npz(p)
                k = _pick_key(list(z.files), key, repr(str(p)))
                _check_npz_member(z, k, p)
                arr = z[k]
        except TensorFileError:
            raise
        except ValueError as exc:
            if "allow_pickle" in str(exc) or "Object arrays" in str(exc):
                raise _object_error(p) from None
            raise TensorFileError(f"{str(p)!r} is not a valid .npz file ({exc})") from None
        except Exception as exc:
            raise TensorFileError(f"{str(p)!r} is not a valid .npz file ({_first_line(exc)})") from None
        return _check_array(arr, f"{str(p)!r}[{k!r}]")
    if ext == ".mat":
        import scipy.io

        try:
            found = _mat_variables(p)
        except Exception as exc:  # scipy raises many kinds for corrupt files
            raise TensorFileError(f"{str(p)!r} is not a valid .mat file ({_first_line(exc) or type(exc).__name__})"
                                  ) from None
        if found is None:  # MATLAB v7.3: HDF5 inside, arrays stored with their axes reversed
            return _read_h5(p, key, allow_external, matlab=True)
        k = _pick_key([name for name, _, _ in found], key, repr(str(p)))
        shape_k, cls = next((sh, c) for name, sh, c in found if name == k)
        if cls in _MAT_ITEMSIZE:
            _check_fits(float(np.prod([float(d) for d in shape_k])) * _MAT_ITEMSIZE[cls], f"{str(p)!r}[{k!r}]",
                        "save it as .npy and open it with tuckerkit.io.open_tensor(..., memory_limit=...)")
        try:
            data = scipy.io.loadmat(p, variable_names=[k])  # (that variable alone)
        except MemoryError:
            raise TensorFileError(f"{str(p)!r}[{k!r}] does not fit in the memory available") from None
        except Exception as exc:
            raise TensorFileError(f"{str(p)!r} is not a valid .mat file ({_first_line(exc) or type(exc).__name__})"
                                  ) from None
        if k not in data:
            raise TensorFileError(f"{str(p)!r} is not a valid .mat file (its variable {k!r} could not be read)")
        return _check_array(data[k], f"{str(p)!r}[{k!r}]")
    if ext == ".tns":
        from tuckerkit.sparse import COOTensor

        return COOTensor.from_tns(p, shape=shape)  # sparse: never densified
    return _read_h5(p, key, allow_external)


def open_h5_dataset(path: str | os.PathLike, key: str | None = None, *, allow_external: bool = False) -> Any:
    """An HDF5 dataset opened lazily (read in slabs by an out-of-core run); the file stays open with it.

    External storage and virtual datasets (whose data lives in other files) are refused unless
    ``allow_external=True``."""
    p = _check_path(path)
    try:
        import h5py
    except ImportError:
        raise TensorFileError(
            f"reading {p.suffix} files needs h5py, which is not installed; install it with pip install h5py"
        ) from None
    try:
        f = h5py.File(p, "r")
        names: list[str] = []
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        k = _pick_key(names, key, repr(str(p)))
        ds = f[k]
        _check_h5_storage(ds, f"{str(p)!r}[{k!r}]", allow_external)
    except TensorFileError:
        f.close()
        raise
    except Exception as exc:
        raise TensorFileError(f"{str(p)!r} is not a valid HDF5 file ({_first_line(exc)})") from None
    if ds.shape is None:  # (a null dataspace, h5py.Empty: "'NoneType' object is not iterable" below)
        f.close()
        raise TensorFileError(f"{str(p)!r}[{k!r}] does not hold an array (found Empty)")
    if ds.dtype.kind not in "biuf":
        dt = ds.dtype
        f.close()
        if dt.kind == "c":  # (streamed: real tensors only, as memory_limit everywhere)
            raise TensorFileError(f"{str(p)!r}[{k!r}] has complex dtype {dt}; memory_limit streams real "
                                  "tensors (load it whole, without memory_limit, for a complex decomposition)")
        raise TensorFileError(f"{str(p)!r}[{k!r}] holds an array of dtype {dt}; expected numbers")
    return ds
