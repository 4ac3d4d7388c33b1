"""Where numba finds no folder for its cache (a read-only install run by a user without a writable home), tuckerkit
points it at one of the user's own under the temporary directory (``_numba_cache.ensure_numba_cache``): before,
``import tuckerkit`` failed with ``RuntimeError: cannot cache function ...: no locator available``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

from tuckerkit._numba_cache import ensure_numba_cache

UNWRITABLE = "/proc/tuckerkit-test"  # (no one, root included, can create anything under /proc)


def test_no_writable_cache_folder_gets_one_under_the_temporary_directory():
    env = {"HOME": UNWRITABLE}
    got = ensure_numba_cache(UNWRITABLE, env)
    assert got == os.path.join(tempfile.gettempdir(), f"tuckerkit-numba-{os.getuid()}")
    assert env["NUMBA_CACHE_DIR"] == got and os.access(got, os.W_OK)


def test_a_writable_folder_or_the_users_choice_changes_nothing(tmp_path):
    env = {"HOME": UNWRITABLE}
    assert ensure_numba_cache(str(tmp_path), env) is None and "NUMBA_CACHE_DIR" not in env  # (in-tree)
    env = {"HOME": UNWRITABLE, "XDG_CACHE_HOME": str(tmp_path)}
    assert ensure_numba_cache(UNWRITABLE, env) is None and "NUMBA_CACHE_DIR" not in env  # (user-wide)
    env = {"HOME": UNWRITABLE, "NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    assert ensure_numba_cache(UNWRITABLE, env) is None and env["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")


def _run(fallback: bool) -> subprocess.CompletedProcess:
    """A fresh process whose numba finds neither its in-tree nor its user-wide folder (their locators
    refuse, as on a read-only install without a home), with or without the fallback, defining and running a
    cached kernel of tuckerkit's."""
    code = textwrap.dedent(f"""
        import os
        from tuckerkit._numba_cache import ensure_numba_cache
        os.environ.pop("NUMBA_CACHE_DIR", None)
        if {fallback}:
            ensure_numba_cache({UNWRITABLE!r}, os.environ)
        from numba.core import caching
        for cls in (caching.InTreeCacheLocator, caching.UserWideCacheLocator):
            cls.from_function = classmethod(lambda cls, f, p: None)
        import numpy as np
        import tuckerkit as tk
        X = np.random.default_rng(0).random((8, 9, 10))
        print(round(tk.hooi(X, 2).fit, 6))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = UNWRITABLE
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_a_process_without_a_cache_folder_runs_with_the_fallback():
    ok = _run(fallback=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert 0 < float(ok.stdout.strip()) < 1
    bad = _run(fallback=False)  # (what a user met: the kernel could not be defined)
    assert bad.returncode != 0 and "no locator available" in bad.stderr
