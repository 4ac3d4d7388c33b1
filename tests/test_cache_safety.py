"""The caches tuckerkit keeps outside the process (numba's kernels, the roofline calibration): only in folders the
user alone can write, values checked when read back, one calibration per machine even when processes start
together."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile

import pytest

from tuckerkit._numba_cache import ensure_numba_cache, private_tmp_folder
from tuckerkit.engine import _roofline
from tuckerkit.engine._roofline import ENV, Roofline, machine_roofline

posix = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")


@posix
def test_private_tmp_folder_is_made_for_the_user_alone(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = private_tmp_folder("tk-fresh")
    assert folder == str(tmp_path / "tk-fresh")
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0
    assert private_tmp_folder("tk-fresh") == folder  # (found again by the next process)


@posix
def test_a_folder_others_can_write_or_a_link_is_never_used(monkeypatch, tmp_path):
    """The fallback folder's name is predictable: another user could make it first (world-writable) and plant
    an index file that numba unpickles, running their code as the user who imports tuckerkit."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other = 0 if os.getuid() != 0 else 65534
    (tmp_path / "tk-theirs").mkdir()
    os.chmod(tmp_path / "tk-theirs", 0o777)
    if os.getuid() == 0:
        os.chown(tmp_path / "tk-theirs", other, other)
        assert private_tmp_folder("tk-theirs") is None  # (another user's: never used)
    else:  # pragma: no cover (only root can give a folder away)
        assert os.lstat(tmp_path / "tk-theirs").st_uid == os.getuid()
    # the user's own but group- or world-writable: never used (tightening its mode kept whatever others put there)
    (tmp_path / "tk-open").mkdir()
    os.chmod(tmp_path / "tk-open", 0o777)
    (tmp_path / "tk-open" / "planted.nbi").write_text("x")
    assert private_tmp_folder("tk-open") is None
    assert os.lstat(tmp_path / "tk-open").st_mode & 0o777 == 0o777
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", tmp_path / "tk-link")
    assert private_tmp_folder("tk-link") is None
    (tmp_path / "tk-file").write_text("not a folder")
    assert private_tmp_folder("tk-file") is None
    # numba's fallback: where the package and the home cannot hold a cache and the tmp folder is not private,
    # NUMBA_CACHE_DIR is left unset (numba's own message) rather than pointed there
    uid = os.getuid()
    blocked = tmp_path / "ro"
    blocked.write_text("a file where the folders would be")
    env = {"XDG_CACHE_HOME": str(blocked)}
    if uid == 0:  # (the shared name another user's: a fresh private folder of this process instead)
        (tmp_path / f"tuckerkit-numba-{uid}").mkdir()
        os.chown(tmp_path / f"tuckerkit-numba-{uid}", other, other)
        fresh = ensure_numba_cache(package_dir=str(blocked), environ=env)
        assert fresh is not None and fresh != str(tmp_path / f"tuckerkit-numba-{uid}")
        assert os.lstat(fresh).st_uid == uid and os.lstat(fresh).st_mode & 0o077 == 0
        os.chown(tmp_path / f"tuckerkit-numba-{uid}", 0, 0)
        env = {"XDG_CACHE_HOME": str(blocked)}
    assert ensure_numba_cache(package_dir=str(blocked), environ=env) == str(tmp_path / f"tuckerkit-numba-{uid}")
    assert env["NUMBA_CACHE_DIR"] == str(tmp_path / f"tuckerkit-numba-{uid}")


def test_on_windows_the_temporary_folder_is_taken_as_the_users(monkeypatch, tmp_path):
    """Windows has no owners or mode bits here (every folder reads 0o777): the check refused every folder, so each
    process calibrated its own roofline and a read-only install could not cache its kernels."""
    import tuckerkit._numba_cache as nc

    class _NoUid:
        def __getattr__(self, name):
            if name == "getuid":
                raise AttributeError(name)
            return getattr(os, name)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(nc, "os", _NoUid())
    assert nc.private_tmp_folder("tk-win") == str(tmp_path / "tk-win")


def test_no_temporary_directory_at_all_is_not_an_error(monkeypatch):
    def none() -> str:
        raise FileNotFoundError("No usable temporary directory found")

    monkeypatch.setattr(tempfile, "gettempdir", none)
    assert private_tmp_folder("tk-any") is None


def _fresh(monkeypatch, tmp_path, calls):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    monkeypatch.setattr(_roofline, "_CURRENT", {})
    monkeypatch.setattr(_roofline, "calibrate", lambda: calls.append(1) or Roofline(2e10, 4e10, 8e10))
    return tmp_path / "tuckerkit" / "roofline.json"


@pytest.mark.parametrize("bad", [0, -1.0, "nan", None, "x"])
def test_a_cached_roofline_that_is_not_finite_and_positive_is_measured_again(monkeypatch, tmp_path, bad):
    """A 0 in the cache made every planning divide by zero, in every process (a bare ZeroDivisionError); NaN
    turned every candidate into the compiled kernel, a negative one printed negative estimates."""
    calls: list[int] = []
    path = _fresh(monkeypatch, tmp_path, calls)
    path.parent.mkdir(parents=True)
    value = float(bad) if bad == "nan" else bad
    path.write_text(json.dumps({_roofline._machine_key(): {"bandwidth": value, "peak64": 6e10, "peak32": 1.2e11},
                                "other": {"kept": True}}))
    r = machine_roofline()
    assert r == Roofline(2e10, 4e10, 8e10, "calibrated") and calls == [1]
    data = json.loads(path.read_text())
    assert data["other"] == {"kept": True}
    assert data[_roofline._machine_key()] == {"bandwidth": 2e10, "peak64": 4e10, "peak32": 8e10}
    assert all(math.isfinite(v) and v > 0 for v in data[_roofline._machine_key()].values())


def test_processes_calibrating_together_all_use_the_first_one_written(monkeypatch, tmp_path):
    """Processes started together on a fresh machine each measured and used their own roofline (kernels chosen
    by it: the same call gave other bits in one process of three). A calibration now goes to the file under a
    lock, and one already there (another process's, written meanwhile) is used instead."""
    calls: list[int] = []
    path = _fresh(monkeypatch, tmp_path, calls)
    key = _roofline._machine_key()

    def another_process_first() -> Roofline:
        calls.append(1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({key: {"bandwidth": 3e10, "peak64": 5e10, "peak32": 9e10}}))
        return Roofline(2e10, 4e10, 8e10)

    monkeypatch.setattr(_roofline, "calibrate", another_process_first)
    assert machine_roofline() == Roofline(3e10, 5e10, 9e10, "cache") and calls == [1]
    assert json.loads(path.read_text())[key] == {"bandwidth": 3e10, "peak64": 5e10, "peak32": 9e10}
