"""Result files (.npz with the factors and a JSON metadata entry), written atomically."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import socket
import stat
import tempfile
import time
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
        Which check failed: ``"exists"``, ``"input"``, ``"directory"``, ``"not-regular"`` (a device, a FIFO,
        a socket or a link to one), ``"no-folder"``, ``"unwritable"`` or ``"write"`` (the write itself failed: a
        full disk, a file-size limit)
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
    """Refuse an output that is an input, exists (without ``force``), is not a regular file (a device, a FIFO,
    a directory, a link to one of those: refused even with ``force``), or sits in an unwritable folder.

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
    found = _non_regular(p)
    if found == "a directory":
        raise OutputFileError(f"output {str(p)!r} is a directory; expected a file path", "directory")
    if found:
        raise OutputFileError(f"output {str(p)!r} is {found}, not a regular file; choose a file path (force=True "
                              "never replaces it)", "not-regular")
    if os.path.lexists(p) and not force:
        raise OutputFileError(f"output {str(p)!r} already exists; pass force=True to overwrite it", "exists")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise OutputFileError(f"output folder {str(parent)!r} does not exist", "no-folder")
    if not os.access(parent, os.W_OK):
        raise OutputFileError(f"output folder {str(parent)!r} is not writable (permission denied)", "unwritable")
    return p


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _non_regular(p: Path) -> str:
    """``""`` for a regular file, a dangling link or nothing; else what is there (a symlink is judged by its
    target): ``"a character device"``, ``"a FIFO (named pipe)"``, ``"a directory"``, ..."""
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return ""
    if stat.S_ISREG(mode):
        return ""
    for test, name in _KINDS:
        if test(mode):
            return ("a symbolic link to " + name) if os.path.islink(p) and name != "a directory" else name
    return "not a regular file"  # pragma: no cover


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


_TEMP_TAG = ".tuckerkit-"
_TEMP_RE = re.compile(r"^\..+\.tuckerkit-([0-9a-f]{8})-(\d+)-[a-z0-9_]+\.tmp$")
_STALE_SECONDS = 3600.0
_PAUSE_HOOK = "_TUCKERKIT_TEST_PAUSE_BEFORE_PUBLISH"  # tests only: see _test_pause


def _temp_stem(name: str) -> str:
    """The output's name as it starts its temporary file's name: a long one (over 160 bytes; the temporary
    adds about 40 to it, and a name may have 255) cut to its first 120 bytes and a hash of the whole."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= 160:
        return name
    return raw[:120].decode("utf-8", "ignore") + "~" + hashlib.sha256(raw).hexdigest()[:8]


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's process (or a PID that cannot be one)
    return True


def _sweep_stale_temporaries(folder: str | Path, *, max_age: float = _STALE_SECONDS) -> list[Path]:
    """Remove temporary files that an interrupted or killed tuckerkit write left in ``folder``.

    Only files of tuckerkit's own pattern are touched (``.<name>.tuckerkit-<host>-<pid>-<random>.tmp``,
    regular files owned by this user): those written on this machine by a process that no longer exists, and
    any not modified for ``max_age`` seconds (a write in progress keeps its temporary fresh). Every
    :func:`atomic_write` runs this on its target folder first.

    Parameters
    ----------
    folder : str or Path
    max_age : float, default 3600
        Seconds since the last modification after which a temporary is stale whatever its process.

    Returns
    -------
    list of Path
        The files removed.

    Examples
    --------
    >>> import os, tempfile
    >>> from tuckerkit.io._save import _sweep_stale_temporaries
    >>> folder = tempfile.mkdtemp()
    >>> dead = os.path.join(folder, ".out.npy.tuckerkit-00000000-999999999-abc.tmp")
    >>> open(dead, "wb").close(); os.utime(dead, (0, 0))
    >>> open(os.path.join(folder, ".out.npy.other.tmp"), "wb").close()
    >>> [p.name for p in _sweep_stale_temporaries(folder)], sorted(os.listdir(folder))
    (['.out.npy.tuckerkit-00000000-999999999-abc.tmp'], ['.out.npy.other.tmp'])
    """
    removed: list[Path] = []
    host, me, uid, now = _host_tag(), os.getpid(), os.getuid(), time.time()
    try:
        entries = list(os.scandir(os.fspath(folder)))
    except OSError:
        return removed
    for entry in entries:
        if _TEMP_TAG not in entry.name:
            continue
        m = _TEMP_RE.match(entry.name)
        if m is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            continue
        pid = int(m.group(2))
        dead = m.group(1) == host and pid != me and not _pid_alive(pid)
        if dead or now - st.st_mtime > max_age:
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass
    return removed


def _test_pause(tmp: str) -> None:
    """Tests only: with ``_TUCKERKIT_TEST_PAUSE_BEFORE_PUBLISH=<marker>`` in the environment, write the
    temporary's name to ``<marker>`` and wait (at most 60 s) until the test removes it, so that a signal or a
    rival write can land at exactly this point."""
    marker = os.environ.get(_PAUSE_HOOK)
    if not marker:
        return
    Path(marker).write_text(tmp)
    deadline = time.monotonic() + 60
    while os.path.lexists(marker) and time.monotonic() < deadline:
        time.sleep(0.01)


_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS,
             errno.EACCES}


def _exists_error(p: Path) -> OutputFileError:
    return OutputFileError(f"output {str(p)!r} already exists; pass force=True to overwrite it", "exists")


def _publish_exclusive(tmp: str, p: Path) -> None:
    """Move ``tmp`` to ``p`` only if nothing is there, atomically: a hard link (which fails if ``p`` exists),
    or where the file system has none, an ``O_EXCL`` claim of ``p`` that the rename then replaces. Of two
    writers racing for one path exactly one succeeds; the other gets the "exists" error."""
    try:
        os.link(tmp, p, follow_symlinks=False)
    except FileExistsError:
        raise _exists_error(p) from None
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            raise _exists_error(p) from None
        claim = os.fstat(fd)
        os.close(fd)
        try:
            os.replace(tmp, p)
        except BaseException:
            try:
                if os.path.samestat(os.lstat(p), claim):
                    os.unlink(p)  # our empty claim, never someone else's file
            except OSError:
                pass
            raise
        return
    os.unlink(tmp)


def atomic_write(path: str | os.PathLike, writer: Callable[[Any], None], *, force: bool = False,
                 inputs: tuple = ()) -> Path:
    """Write via a temporary file in the target folder, fsync, then publish it at ``path`` in one step.

    Without ``force`` the publish is exclusive (a hard link, or an ``O_EXCL`` claim where links are not
    supported): if ``path`` appeared meanwhile, for instance written by a concurrent run, this write fails
    with the "exists" :class:`OutputFileError` and the other file stays. With ``force`` the temporary is
    renamed over ``path``. Outputs that are not regular files (devices, FIFOs, directories, links to them)
    are refused even with ``force``.

    Nothing is left behind if ``writer`` fails or an exception (``KeyboardInterrupt`` included) interrupts
    the write: the temporary is removed and an existing ``path`` is unchanged. Temporaries are named
    ``.<name>.tuckerkit-<host>-<pid>-<random>.tmp``; the next write to the folder removes those left by a
    killed process (one of this machine that is gone, or any untouched for an hour). No signal handler is
    installed here: a program that wants SIGTERM handled like Ctrl-C installs its own (the command line
    does). The file gets the permissions
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

    Raises
    ------
    OutputFileError
        See :func:`check_output_path`; also when ``path`` appears during the write (without ``force``).

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
    folder = p.parent if str(p.parent) else Path(".")
    _sweep_stale_temporaries(folder)
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{_temp_stem(p.name)}{_TEMP_TAG}{_host_tag()}-{os.getpid()}-",
                                   suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        _test_pause(tmp)
        if force:
            check_output_path(p, force=True, inputs=inputs)  # it may have become a device or a FIFO meanwhile
            os.replace(tmp, p)
        else:
            _publish_exclusive(tmp, p)
    except BaseException as exc:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(exc, OSError):  # (a full disk, a file-size limit: "[Errno 27] File too large" named no file)
            why = exc.strerror or str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OutputFileError(f"could not write output {str(p)!r} ({why}); an existing file there is "
                                  "unchanged", "write") from exc
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


#: the metadata entries save_result records from the result itself: a caller's ``metadata`` may not set them
RESULT_KEYS = ("kind", "ranks", "fit", "n_iter", "converged", "dtype", "shape", "passes_per_iteration",
               "log_likelihood", "kkt_violation")
#: the metadata entries save_result records from its ``input_path``: a caller's ``metadata`` may not set them
#: either (a caller's "input_sha256" replaced the file's, on which the CLI's reconstruct relies)
INPUT_KEYS = ("input_path", "input_sha256")


def _json_scalar(v: Any) -> Any:
    """``json.dumps``'s ``default``: numpy's numbers and bools as the Python ones they hold; nothing else (no
    silent ``str()``)."""
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def _check_metadata(metadata: Any) -> dict:
    """A caller's ``metadata``: a dict of string keys and JSON values (finite numbers), none of
    :data:`RESULT_KEYS`; a one-line error naming the entry otherwise."""
    from tuckerkit._validation import describe

    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict of JSON values; received {describe(metadata)}")
    for k, v in metadata.items():
        if not isinstance(k, str):
            raise TypeError(f"metadata key {describe(k)} ({type(k).__name__}) is not a string; expected string keys")
        if k in RESULT_KEYS:
            raise ValueError(f"metadata[{k!r}] is recorded from the result itself ({', '.join(RESULT_KEYS)}); "
                             "choose another key")
        if k in INPUT_KEYS:
            raise ValueError(f"metadata[{k!r}] is recorded from input_path (the decomposed file: its path and "
                             "SHA-256); pass input_path=, or choose another key")
        try:
            json.dumps(v, default=_json_scalar, allow_nan=False)
        except ValueError:
            raise ValueError(f"metadata[{k!r}] is or holds a non-finite number ({describe(v)}); expected finite "
                             "numbers (JSON has no NaN or infinity)") from None
        except (TypeError, RecursionError):
            raise TypeError(f"metadata[{k!r}] is {describe(v)} ({type(v).__name__}); expected a JSON value (a "
                            "string, number, bool, None, or a list or dict of them)") from None
    return metadata


def save_result(
    path: str | os.PathLike,
    result: TuckerTensor | CPTensor,
    *,
    metadata: dict | None = None,
    input_path: str | os.PathLike | None = None,
    force: bool = False,
    other_inputs: tuple = (),
) -> Path:
    """Save a decomposition as ``.npz``: ``core``/``factors_i`` or ``weights``/``factors_i`` plus ``metadata``.

    The metadata (JSON) records the kind (``tucker`` or ``cp``), ranks, fit, iterations, whether it converged,
    the dtype, the input's shape, the passes over the input per iteration (and a :class:`~tuckerkit.
    PoissonCPTensor`'s log-likelihood and KKT violation, which :func:`load_result` gives back), the input's path
    and SHA-256 (with ``input_path``), the tuckerkit version and a timestamp, merged with ``metadata``. The write
    is atomic; an existing file is refused unless ``force``; the output may never be the input.

    Parameters
    ----------
    path : str or Path
        Must end in ``.npz``.
    result : TuckerTensor or CPTensor
    metadata : dict, optional
        Extra JSON-serializable entries (string keys; finite numbers; numpy scalars are stored as numbers);
        the entries recorded from the result itself (:data:`RESULT_KEYS`) or from ``input_path``
        (``input_path``, ``input_sha256``) are refused.
    input_path : str or Path, optional
        The decomposed file: recorded with its SHA-256, and refused as the output.
    other_inputs : tuple of paths, default ()
        Other files the call read (a mask), refused as the output too.
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
    if not isinstance(path, str | os.PathLike):  # (a model here printed itself, arrays and all, in the message)
        from tuckerkit._validation import describe

        hint = ("; the path comes first: save_result(path, result)" if isinstance(path, TuckerTensor | CPTensor)
                else "")
        raise TypeError(f"path must be a file name ending in .npz; received {describe(path)}{hint}")
    if not str(path).lower().endswith(".npz"):  # (any case, as the readers take it)
        raise OutputFileError(f"output {str(path)!r} must end in .npz")
    metadata = _check_metadata(metadata)
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
    for name, a in arrays.items():  # ('>f8': the same numbers; stored in the machine's order, as numpy.save does)
        if not a.dtype.isnative:
            arrays[name] = a.astype(a.dtype.newbyteorder("="))
    fit = float(result.fit) if result.fit_history and math.isfinite(result.fit) else None
    from tuckerkit.decomposition._apr import PoissonCPTensor

    poisson = {}
    if isinstance(result, PoissonCPTensor):  # (loaded back as a plain CPTensor, these two lost)
        poisson = {k: (float(v) if math.isfinite(float(v)) else None)
                   for k, v in (("log_likelihood", result.log_likelihood), ("kkt_violation", result.kkt_violation))}
    meta = {
        "kind": kind,
        "ranks": ranks,
        "fit": fit,
        "n_iter": int(result.n_iter),
        "converged": bool(result.converged),
        "dtype": str(arrays["factors_0"].dtype),
        "shape": list(result.shape),
        "passes_per_iteration": result.passes_per_iteration,
        **poisson,
        "tuckerkit_version": __version__,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if input_path is not None:
        if not isinstance(input_path, str | os.PathLike):
            from tuckerkit._validation import describe

            raise TypeError(f"input_path must be a file name (str or pathlib.Path); received {describe(input_path)}")
        from tuckerkit.io._load import regular_file

        regular_file(input_path, "input_path", "the decomposed tensor file")
        meta["input_path"] = str(Path(input_path).resolve())
        meta["input_sha256"] = sha256_of(input_path)
    meta.update(metadata)
    arrays["metadata"] = np.array(json.dumps(meta, default=_json_scalar, allow_nan=False))
    try:  # never write a file that load_result would refuse
        _read_result_members(_Members(arrays), Path(path))
    except ValueError as exc:
        what = str(exc).split("tuckerkit result file: ", 1)[-1]
        raise ValueError(f"result cannot be saved to {str(path)!r}: {what}") from None

    def writer(f):
        np.savez(f, **arrays)  # type: ignore[arg-type]

    return atomic_write(path, writer, force=force, inputs=(input_path, *other_inputs))


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
    from tuckerkit.io._load import TensorFileError, regular_file

    p = regular_file(path, "result", "a tuckerkit result file (.npz)")  # (a FIFO blocked the read forever)
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
            if head[:2] != b"PK":  # read nothing else: numpy would load a plain .npy (or try a pickle) whole
                what = "it holds one array" if head == b"\x93NUM" else "it is not a zip archive"
                raise TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file: {what}, not the .npz "
                                      "archive written by tuckerkit decompose (or save_result)")
            fh.seek(0)
            with np.load(fh, allow_pickle=False) as z:
                _check_entry_count(fh, z, p)
                arrays, meta = _read_result_members(z, p)
    except TensorFileError:
        raise
    except Exception as exc:  # a corrupt archive fails in zipfile, zlib or numpy with many exception types
        raise TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file ({_first_line(exc)})") from None
    factors = tuple(arrays[f"factors_{i}"] for i in range(len(arrays) - 1))
    fit = meta.get("fit")
    kw: dict[str, Any] = {"n_iter": meta.get("n_iter", 0), "converged": meta.get("converged", True),
                          "fit_history": (float(fit),) if fit is not None and math.isfinite(fit) else (),
                          "passes_per_iteration": meta.get("passes_per_iteration", 0)}
    if "core" in arrays:
        return TuckerTensor(arrays["core"], factors, **kw)
    if "log_likelihood" in meta or "kkt_violation" in meta:  # (a cp_apr model)
        from tuckerkit.decomposition._apr import PoissonCPTensor

        nan = float("nan")
        return PoissonCPTensor(arrays["weights"], factors, **kw,
                               log_likelihood=nan if meta.get("log_likelihood") is None else meta["log_likelihood"],
                               kkt_violation=nan if meta.get("kkt_violation") is None else meta["kkt_violation"])
    return CPTensor(arrays["weights"], factors, **kw)


def _check_entry_count(fh: Any, z: Any, p: Path) -> None:
    """The archive's end record counts as many members as its central directory lists: a damaged directory
    entry (one flipped bit in a member's comment length) hides the members after it, and a result read without
    its metadata member would load as a bare one (no fit, no iterations) instead of failing."""
    end = fh.seek(0, os.SEEK_END)
    if end < 22:
        return
    fh.seek(end - 22)
    tail = fh.read(22)
    if tail[:4] != b"PK\x05\x06":  # (an archive comment or ZIP64 records: not written by save_result)
        return
    total = int.from_bytes(tail[10:12], "little")
    listed = len(z.zip.infolist())
    if total != 0xFFFF and total != listed:
        raise _result_error(p, f"its zip directory lists {listed} member(s) but its end record counts {total}; "
                               "the file is corrupt")


class _Members(dict):
    """Arrays about to be saved, seen as the archive ``load_result`` reads."""

    @property
    def files(self) -> list[str]:
        return list(self)


_FACTOR_RE = re.compile(r"^factors_(0|[1-9][0-9]{0,5})$")
#: the dtypes a saved result may hold
_RESULT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64), np.dtype(np.complex128))


def _result_error(p: Path, what: str) -> ValueError:
    from tuckerkit.io._load import TensorFileError

    return TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file: {what}")


def _read_result_members(z: Any, p: Path) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and metadata of a result archive, every member checked against the others (one line in the
    file's terms: ``factors_2 is missing``, ``factors_0 has 3 columns, core mode 0 has 6``)."""
    from tuckerkit.io._load import _check_npz_member

    names = list(z.files)
    if "core" not in names and "weights" not in names:
        raise _result_error(p, f"it holds {', '.join(sorted(names)[:8]) or 'no arrays'}; expected core or weights "
                               "and factors_0, ...")
    for name in names:
        if name not in ("core", "weights", "metadata") and not _FACTOR_RE.match(name):
            raise _result_error(p, f"it holds the unknown member {name[:80]!r}; a result holds core or weights, "
                                   "factors_0, factors_1, ... and metadata")
    if "core" in names and "weights" in names:
        raise _result_error(p, "it holds both core (Tucker) and weights (CP); expected one of them")
    first = "core" if "core" in names else "weights"
    idx = sorted(int(n[len("factors_"):]) for n in names if n.startswith("factors_"))
    n = (idx[-1] + 1) if idx else 0
    for i in range(max(n, 1)):
        if i not in idx:
            raise _result_error(p, f"factors_{i} is missing")
    meta = _read_metadata(z, p) if "metadata" in names else {}
    arrays: dict[str, np.ndarray] = {}
    for name in [first] + [f"factors_{i}" for i in range(n)]:
        if hasattr(z, "zip"):
            _check_npz_member(z, name, p)
        a = z[name]
        if not a.dtype.isnative:  # ('>f8': the same numbers, byte-swapped)
            a = a.astype(a.dtype.newbyteorder("="))
        if a.dtype not in _RESULT_DTYPES:
            raise _result_error(p, f"{name} has dtype {a.dtype}; expected float32, float64, complex64 or complex128")
        ref = arrays.get(first, a).dtype
        # one dtype; a complex CP model keeps real weights of its factors' precision
        same = a.dtype == ref or (first == "weights" and ref.kind == "f" and a.dtype.kind == "c"
                                  and np.finfo(a.dtype).dtype == ref)
        if not same or (name.startswith("factors_") and name != "factors_0" and a.dtype != arrays["factors_0"].dtype):
            raise _result_error(p, f"{name} has dtype {a.dtype} but {first} has {ref}; expected one dtype (complex "
                                   "factors with real weights of the same precision for a CP model)")
        arrays[name] = a
    core = arrays[first]
    if first == "core" and core.ndim > n:
        raise _result_error(p, f"factors_{n} is missing (the core has {core.ndim} modes)")
    if first == "core" and core.ndim < n:
        raise _result_error(p, f"the core has {core.ndim} modes but there are {n} factors")
    if first == "weights" and core.ndim != 1:
        raise _result_error(p, f"weights has {core.ndim} dimensions; expected a vector (one weight per component)")
    shape = meta.get("shape")
    if shape is not None and len(shape) != n:
        raise _result_error(p, f"metadata shape has {len(shape)} modes but there are {n} factors")
    for i in range(n):
        U = arrays[f"factors_{i}"]
        if U.ndim != 2:
            raise _result_error(p, f"factors_{i} has {U.ndim} dimensions; expected a matrix (rows x rank)")
        want, of = (core.shape[i], f"core mode {i} has") if first == "core" else (core.shape[0], "weights has")
        if U.shape[1] != want:
            raise _result_error(p, f"factors_{i} has {U.shape[1]} columns, {of} {want}")
        if U.shape[0] < 1 or U.shape[1] < 1:
            raise _result_error(p, f"factors_{i} has shape {U.shape}; expected at least one row and one column")
        if shape is not None and U.shape[0] != shape[i]:
            raise _result_error(p, f"factors_{i} has {U.shape[0]} rows, metadata shape[{i}] is {shape[i]}")
    ranks = meta.get("ranks")
    if ranks is not None:
        held = list(core.shape) if first == "core" else int(core.shape[0])
        if ranks != held:
            raise _result_error(p, f"metadata ranks {ranks} differ from the {first}'s "
                                   f"{'shape' if first == 'core' else 'length'} {held}")
    for name, a in arrays.items():
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        if bad:
            raise _result_error(p, f"{name} holds NaN or infinity ({bad} entr{'y' if bad == 1 else 'ies'})")
    return arrays, meta


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _read_metadata(z: Any, p: Path) -> dict:
    """The ``metadata`` member: one JSON object, its known entries of the right types."""
    from tuckerkit.io._load import _check_npz_member

    if hasattr(z, "zip"):
        _check_npz_member(z, "metadata", p)
    m = z["metadata"]
    if m.dtype.kind != "U" or m.ndim != 0:
        raise _result_error(p, f"metadata is an array of dtype {m.dtype} and shape {m.shape}; expected one JSON "
                               "text")
    try:
        meta = json.loads(str(m))
    except ValueError as exc:
        raise _result_error(p, f"metadata is not valid JSON ({_first_line(exc)})") from None
    if not isinstance(meta, dict):
        raise _result_error(p, f"metadata is a JSON {type(meta).__name__}; expected a JSON object")
    checks = {
        "n_iter": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
        "converged": (lambda v: isinstance(v, bool), "true or false"),
        # (NaN: not recorded; above 1 is no fit, 1 - error with error >= 0: 5.0 read as an error of -4)
        "fit": (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                        and not math.isinf(v) and not v > 1), "a finite number <= 1 or null"),
        "shape": (lambda v: isinstance(v, list) and all(_is_int(d) and d >= 1 for d in v),
                  "a list of positive integers"),
        "ranks": (lambda v: (_is_int(v) and v >= 1) or (isinstance(v, list) and all(_is_int(d) and d >= 1
                                                                                      for d in v)),
                  "a positive integer or a list of them"),
    }
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    checks["passes_per_iteration"] = (lambda v: number(v) and v >= 0, "a number >= 0")
    checks["log_likelihood"] = (lambda v: v is None or number(v), "a finite number or null")
    checks["kkt_violation"] = (lambda v: v is None or (number(v) and v >= 0), "a number >= 0 or null")
    for k in ("input_path", "input_sha256"):  # (recorded by save_result from input_path)
        checks[k] = (lambda v: isinstance(v, str), "a string")  # (an int sha256 failed 'info' on a slice)
    for k, (ok, expected) in checks.items():
        if k in meta and not ok(meta[k]):
            raise _result_error(p, f"metadata {k} is {json.dumps(meta[k])[:60]}; expected {expected}")
    return meta


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
    from tuckerkit.io._load import TensorFileError, regular_file

    p = regular_file(path, "result", "a tuckerkit result file (.npz)")
    try:
        with open(p, "rb") as fh:
            if fh.read(2) != b"PK":  # not a zip archive: numpy would load a plain .npy (or try a pickle) whole
                raise TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file: it is not a zip archive, "
                                      "not the .npz archive written by tuckerkit decompose (or save_result)")
            fh.seek(0)
            with np.load(fh, allow_pickle=False) as z:
                _check_entry_count(fh, z, p)
                return _read_metadata(z, p) if "metadata" in z.files else {}
    except TensorFileError:
        raise
    except Exception as exc:
        raise TensorFileError(f"{str(p)!r} is not a valid tuckerkit result file ({_first_line(exc)})") from None
