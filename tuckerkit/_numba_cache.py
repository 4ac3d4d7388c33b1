"""A disk cache for numba's kernels wherever tuckerkit runs.

Every kernel is ``@njit(cache=True)``, and numba looks for a cache folder when the kernel is defined: the
package's own ``__pycache__`` if it can write there, else its user-wide folder (``$XDG_CACHE_HOME/numba`` or
``~/.cache/numba``). Where neither is writable (a read-only install run by a user without a home, as in a
container started with ``--user``), numba refuses to define the kernel and ``import tuckerkit`` failed with
``RuntimeError: cannot cache function ...: no locator available``. :func:`ensure_numba_cache` then points
numba at a folder of the user's own under the temporary directory (``NUMBA_CACHE_DIR``), before any kernel is
defined; a cache folder the user chose is never changed.
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
    folder = os.path.join(tempfile.gettempdir(), f"tuckerkit-numba-{uid}")
    if not _writable(folder):
        return None  # (nowhere to write: numba's own message stands)
    environ["NUMBA_CACHE_DIR"] = folder
    numba = sys.modules.get("numba")
    if numba is not None and environ is os.environ:  # (numba read its configuration when it was imported)
        numba.core.config.CACHE_DIR = folder
    return folder


ensure_numba_cache()  # (on import: tuckerkit/__init__.py imports this module before any other)
