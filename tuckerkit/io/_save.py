"""Result files (.npz with the factors and a JSON metadata entry), written atomically."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tuckerkit._version import __version__
from tuckerkit.decomposition import CPTensor, TuckerTensor


class OutputFileError(ValueError):
    """An output file cannot be written safely (exists, is the input, or its folder is not writable).

    Parameters
    ----------
    message : str
        The one-line message.
    reason : str, default ""
        Which check failed: ``"exists"``, ``"input"``, ``"directory"``, ``"no-folder"`` or ``"unwritable"``
        (the command line words its own hint from it: ``--force`` rather than ``force=True``).

    Examples
    --------
    >>> import os, tempfile
    >>> from tuckerkit.io import OutputFileError, check_output_path
    >>> existing = tempfile.NamedTemporaryFile(suffix=".npz", delete=False).name
    >>> try:
    ...     check_output_path(existing)
    ... except OutputFileError as exc:
    ...     print(str(exc).split(";")[1].strip(), exc.reason)
    pass force=True to overwrite it exists
    """

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_output_path(path: str | os.PathLike, *, force: bool = False, inputs: tuple = ()) -> Path:
    """Refuse an output that is an input, exists (without ``force``), or sits in an unwritable folder.

    Parameters
    ----------
    path : str or Path
        The output to be written.
    force : bool, default False
        Accept an existing file (never an input, never a directory).
    inputs : tuple of paths, default ()
        Files the output must not be (compared by inode, so links and relative paths are caught).

    Returns
    -------
    Path

    Raises
    ------
    OutputFileError

    Examples
    --------
    >>> import os, tempfile
    >>> from tuckerkit.io import check_output_path
    >>> folder = tempfile.mkdtemp()
    >>> check_output_path(os.path.join(folder, "new.npz")).name
    'new.npz'
    """
    p = Path(path)
    for inp in inputs:
        if inp is not None and (_same_file(p, Path(inp)) or p.resolve() == Path(inp).resolve()):
            raise OutputFileError(f"output {str(p)!r} is the input file; choose another output path", "input")
    if p.exists() and p.is_dir():
        raise OutputFileError(f"output {str(p)!r} is a directory; expected a file path", "directory")
    if p.exists() and not force:
        raise OutputFileError(f"output {str(p)!r} already exists; pass force=True to overwrite it", "exists")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise OutputFileError(f"output folder {str(parent)!r} does not exist", "no-folder")
    if not os.access(parent, os.W_OK):
        raise OutputFileError(f"output folder {str(parent)!r} is not writable (permission denied)", "unwritable")
    return p


def _umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux), else set and restored."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _new_file_mode(p: Path) -> int:
    """The permission bits ``open(p, "w")`` would give: an existing file's own, else 0o666 less the umask."""
    try:
        return p.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def atomic_write(path: str | os.PathLike, writer: Callable[[Any], None], *, force: bool = False,
                 inputs: tuple = ()) -> Path:
    """Write via a temporary file in the target folder, fsync, then rename over ``path``.

    Nothing is left behind if ``writer`` fails or the process is interrupted. The file gets the permissions
    a plain ``open(path, "w")`` would give it (``0o666`` less the umask; an overwritten file keeps its own),
    not the private ``0o600`` of a temporary file.

    Parameters
    ----------
    path : str or Path
    writer : callable
        ``writer(f)`` writes the content to the binary file object ``f``.
    force, inputs : see :func:`check_output_path`

    Returns
    -------
    Path

    Examples
    --------
    >>> import os, tempfile
    >>> from tuckerkit.io import atomic_write
    >>> path = os.path.join(tempfile.mkdtemp(), "out.bin")
    >>> atomic_write(path, lambda f: f.write(b"abc")).read_bytes()
    b'abc'
    >>> def broken(f):
    ...     raise RuntimeError("disk full")
    >>> try:
    ...     atomic_write(path, broken, force=True)
    ... except RuntimeError:
    ...     pass
    >>> open(path, "rb").read(), sorted(os.listdir(os.path.dirname(path)))
    (b'abc', ['out.bin'])
    """
    p = check_output_path(path, force=force, inputs=inputs)
    mode = _new_file_mode(p)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def save_result(
    path: str | os.PathLike,
    result: TuckerTensor | CPTensor,
    *,
    metadata: dict | None = None,
    input_path: str | os.PathLike | None = None,
    force: bool = False,
) -> Path:
    """Save a decomposition as ``.npz``: ``core``/``factors_i`` or ``weights``/``factors_i`` plus ``metadata``.

    The metadata (JSON) records the method, ranks, fit, iterations, dtype, device, input shape, input path and
    SHA-256, the tuckerkit version and a timestamp, merged with ``metadata``. The write is atomic; an
    existing file is refused unless ``force``; the output may never be the input.

    Parameters
    ----------
    path : str or Path
        Must end in ``.npz``.
    result : TuckerTensor or CPTensor
    metadata : dict, optional
        Extra JSON-serializable entries.
    input_path : str or Path, optional
        The decomposed file: recorded with its SHA-256, and refused as the output.
    force : bool, default False

    Returns
    -------
    Path

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> import tuckerkit as tk
    >>> from tuckerkit.io import save_result, load_result
    >>> T = tk.hosvd(np.random.default_rng(0).standard_normal((4, 5, 6)), 2)
    >>> p = save_result(os.path.join(tempfile.mkdtemp(), "t.npz"), T)
    >>> load_result(p).ranks
    (2, 2, 2)
    """
    if not str(path).endswith(".npz"):
        raise OutputFileError(f"output {str(path)!r} must end in .npz")
    arrays: dict[str, np.ndarray] = {}
    if isinstance(result, TuckerTensor):
        arrays["core"] = np.asarray(result.core)
        kind = "tucker"
        ranks: Any = list(result.ranks)
    elif isinstance(result, CPTensor):
        arrays["weights"] = np.asarray(result.weights)
        kind = "cp"
        ranks = result.rank
    else:
        raise TypeError(f"result must be a TuckerTensor or CPTensor; received {type(result).__name__}")
    for i, U in enumerate(result.factors):
        arrays[f"factors_{i}"] = np.asarray(U)
    meta = {
        "kind": kind,
        "ranks": ranks,
        "fit": result.fit,
        "n_iter": result.n_iter,
        "converged": result.converged,
        "dtype": str(result.factors[0].dtype),
        "shape": list(result.shape),
        "tuckerkit_version": __version__,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if input_path is not None:
        meta["input_path"] = str(Path(input_path).resolve())
        meta["input_sha256"] = sha256_of(input_path)
    meta.update(metadata or {})
    arrays["metadata"] = np.array(json.dumps(meta, default=str))

    def writer(f):
        np.savez(f, **arrays)  # type: ignore[arg-type]

    return atomic_write(path, writer, force=force, inputs=(input_path,))


def load_result(path: str | os.PathLike) -> TuckerTensor | CPTensor:
    """Load a result saved by :func:`save_result` (or the CLI) as a TuckerTensor or CPTensor.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    TuckerTensor or CPTensor
        With ``n_iter`` and the final fit restored from the metadata.

    Raises
    ------
    TensorFileError
        Missing, corrupt or not a tuckerkit result.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> from tuckerkit.io import load_result, save_result
    >>> X = np.random.default_rng(0).standard_normal((4, 5, 6))
    >>> cp = tk.cp_als(X, 2, random_state=0, tol=1e-4)
    >>> back = load_result(save_result(os.path.join(tempfile.mkdtemp(), "cp.npz"), cp))
    >>> back.rank, bool(np.allclose(back.to_dense(), cp.to_dense())), back.fit == cp.fit
    (2, True, True)
    """
    from tuckerkit.io._load import TensorFileError

    p = Path(path)
    if not p.exists():
        raise TensorFileError(f"result file {str(p)!r} does not exist")
    try:
        loaded = np.load(p, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file: it holds one array, not the "
                                  ".npz archive written by tuckerkit decompose (or save_result)")
        with loaded as z:
            files = set(z.files)
            if not ({"core", "weights"} & files) or "factors_0" not in files:
                raise TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file: it holds "
                                      f"{', '.join(sorted(files)[:8]) or 'no arrays'}; expected core or weights "
                                      "and factors_0, ...")
            n = len([f for f in files if f.startswith("factors_")])
            factors = tuple(z[f"factors_{i}"] for i in range(n))
            meta = json.loads(str(z["metadata"])) if "metadata" in files else {}
            kw: dict[str, Any] = {"n_iter": int(meta.get("n_iter", 0)), "converged": bool(meta.get("converged", True)),
                                  "fit_history": (float(meta["fit"]),) if meta.get("fit") is not None else ()}
            if "core" in files:
                return TuckerTensor(z["core"], factors, **kw)
            if "weights" in files:
                return CPTensor(z["weights"], factors, **kw)
    except TensorFileError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file ({_first_line(exc)})") from None

    raise TensorFileError(f"{str(p)!r} is not a tuckerkit result file (no 'core' or 'weights' array)")


def load_metadata(path: str | os.PathLike) -> dict:
    """The JSON metadata of a result file.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    dict
        Empty when the file has no metadata.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> from tuckerkit.io import load_metadata, save_result
    >>> T = tk.hosvd(np.random.default_rng(0).standard_normal((4, 5, 6)), 2)
    >>> meta = load_metadata(save_result(os.path.join(tempfile.mkdtemp(), "t.npz"), T, metadata={"run": 7}))
    >>> meta["kind"], meta["ranks"], meta["run"]
    ('tucker', [2, 2, 2], 7)
    """
    with np.load(path, allow_pickle=False) as z:
        return json.loads(str(z["metadata"])) if "metadata" in z.files else {}
