"""A disk cache for numba's kernels wherever tuckerkit runs.

Every kernel is ``@njit(cache=True)``, and numba looks for a cache folder when the kernel is defined: the
package's own ``__pycache__`` if it can write there, else its user-wide folder (``$XDG_CACHE_HOME/numba`` or
``~/.cache/numba``). Where neither is writable (a read-only install run by a user without a home, as in a
container started with ``--user``), numba refuses to define the kernel and ``import tuckerkit`` failed with
``RuntimeError: cannot cache function ...: no locator available``. :func:`ensure_numba_cache` then points
numba at a folder of the user's own under the temporary directory (``NUMBA_CACHE_DIR``; only one that user
alone can write, :func:`private_tmp_folder`), before any kernel is defined; a cache folder the user chose is
never changed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import MutableMapping


def _writable(path: str) -> bool:
    """Whether a cache can live in ``path`` (numba's own test: create it, then a file in it)."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def private_tmp_folder(name: str) -> str | None:
    """``<tmp>/<name>`` as a folder only this user can write (made with mode 0700 if absent), or None: no
    temporary directory at all, or a folder there that is a link, another user's, or writable by others. The
    name is predictable, so another user could make it first and fill it: numba unpickles its cache's index
    files, and a planted one ran its code as the user who imported tuckerkit."""
    try:
        folder = os.path.join(tempfile.gettempdir(), name)
    except (OSError, FileNotFoundError):  # (no usable temporary directory: gettempdir raises)
        return None
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode):  # (a link, or a file: never followed)
        return None
    if not hasattr(os, "getuid"):  # (Windows: no owner or mode bits here, every folder reads 0o777; the
        # temporary directory is the user's own profile's)
        return folder
    if st.st_uid != os.getuid() or st.st_mode & 0o022:  # (another user's, or one others could write into: what
        # they put there, files or writable subfolders, would stay; tightening its mode kept them)
        return None
    return folder


def ensure_numba_cache(package_dir: str | None = None,
                       environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Set ``NUMBA_CACHE_DIR`` to ``<tmp>/tuckerkit-numba-<uid>`` where numba would find no cache folder for
    tuckerkit's kernels (neither ``package_dir``'s ``engine/__pycache__`` nor numba's user-wide folder is
    writable) and none is set; returns the folder set, else None.

    Examples
    --------
    >>> ensure_numba_cache(environ={"NUMBA_CACHE_DIR": "/somewhere"}) is None  # (the user's choice is kept)
    True
    """
    if environ.get("NUMBA_CACHE_DIR"):
        return None
    pkg = package_dir if package_dir is not None else os.path.dirname(os.path.abspath(__file__))
    if _writable(os.path.join(pkg, "engine", "__pycache__")):
        return None
    home_cache = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                               ".cache")
    if _writable(os.path.join(home_cache, "numba")):
        return None
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = private_tmp_folder(f"tuckerkit-numba-{uid}")
    if folder is None:  # (the shared name taken, or not safe: a fresh private folder, this process's cache only)
        try:
            folder = tempfile.mkdtemp(prefix=f"tuckerkit-numba-{uid}-")
        except (OSError, FileNotFoundError):
            return None  # (nowhere to write: numba's own message stands)
    if not _writable(folder):
        return None
    environ["NUMBA_CACHE_DIR"] = folder
    numba = sys.modules.get("numba")
    if numba is not None and environ is os.environ:  # (numba read its configuration when it was imported)
        numba.core.config.CACHE_DIR = folder
    return folder


ensure_numba_cache()  # (on import: tuckerkit/__init__.py imports this module before any other)
