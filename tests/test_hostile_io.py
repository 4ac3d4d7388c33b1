"""Hostile conditions around output files: signals during the write, concurrent runs, outputs that are not
regular files, stale temporaries, the umask, and HDF5 files that point at other files (issue 21)."""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tuckerkit.cli import app
from typer.testing import CliRunner

import tuckerkit as tk
from tuckerkit.io import OutputFileError, atomic_write, check_output_path, load_result, save_result
from tuckerkit.io._save import _host_tag, _sweep_stale_temporaries

runner = CliRunner()
HOOK = "_TUCKERKIT_TEST_PAUSE_BEFORE_PUBLISH"
CLI = [sys.executable, "-c", "from tuckerkit.cli import main; main()"]


def _invoke(args):
    return runner.invoke(app, [str(a) for a in args])


def _one_error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def result_file(tmp_path, rng):
    X = rng.standard_normal((6, 7, 8))
    return save_result(tmp_path / "x.tucker.npz", tk.hosvd(X, 2)), X


@pytest.fixture
def npy_input(tmp_path, rng):
    np.save(tmp_path / "x.npy", rng.standard_normal((4, 5, 6)))
    return tmp_path / "x.npy"


#: the command line as a terminal starts it, SIGINT at Python's own handler (Ctrl-C raises KeyboardInterrupt): a
#: test harness run as a background job of a shell without job control (``cmd &`` in a script, ``nohup ... &``)
#: starts with SIGINT ignored, and every child inherits that, so the Ctrl-C test would wait out the pause
CLI_TERMINAL = [sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "from tuckerkit.cli import main; main()"]


def _start_paused(args, marker: Path, cwd: Path) -> subprocess.Popen:
    """A CLI run that stops just before publishing its output (its temporary written and fsynced)."""
    env = dict(os.environ, **{HOOK: str(marker)})
    proc = subprocess.Popen([*CLI_TERMINAL, *(str(a) for a in args)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the run did not reach the write: {proc.communicate()}")
        time.sleep(0.02)
    while not marker.read_text():  # the marker holds the temporary's name once written
        time.sleep(0.01)
    return proc


# ---------------------------------------------------------------------------------------------------- signals
@pytest.mark.parametrize("command, sig", [("reconstruct", "SIGINT"), ("reconstruct", "SIGTERM"),
                                          ("reconstruct", "SIGHUP"), ("decompose", "SIGTERM")])
def test_a_signal_during_the_final_write_keeps_the_old_output_and_removes_the_temporary(result_file, npy_input,
                                                                                       tmp_path, command, sig):
    """SIGTERM during ``reconstruct -o out.npy --force`` left hidden temporaries of up to 1.2 GB; Ctrl-C during
    the final write was swallowed (exit 0)."""
    if sig == "SIGHUP" and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        pytest.skip("SIGHUP is ignored in this process (nohup): the command line inherits that and keeps it")
    res, _ = result_file
    out = tmp_path / ("out.npy" if command == "reconstruct" else "out.npz")
    out.write_bytes(b"the old output")
    marker = tmp_path / "marker"
    args = ([command, res, "-o", out, "--force"] if command == "reconstruct" else
            [command, npy_input, "--ranks", "2,2,2", "-o", out, "--force", "-q"])
    proc = _start_paused(args, marker, tmp_path)
    tmp = Path(marker.read_text())
    assert tmp.parent == tmp_path and tmp.exists() and tmp.stat().st_size > 1000  # caught mid-write
    signum = getattr(signal, sig)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, (stdout, stderr)
    assert stderr.strip().splitlines() == [
        ("interrupted" if sig == "SIGINT" else f"stopped by {sig}") +
        "; no output was written (an existing output is unchanged)"]
    assert stdout == ""
    assert out.read_bytes() == b"the old output"
    assert _temporaries(tmp_path) == []


def test_the_cli_restores_signal_handlers_and_the_library_installs_none(result_file, tmp_path):
    res, _ = result_file
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    seen = {}

    def writer(f):
        seen.update({s: signal.getsignal(s) for s in before})
        f.write(b"x")

    atomic_write(tmp_path / "a.bin", writer)
    assert seen == before  # a library write leaves the process's handlers alone
    assert _invoke(["reconstruct", res, "-o", tmp_path / "b.npy"]).exit_code == 0
    assert {s: signal.getsignal(s) for s in before} == before


def test_an_ignored_sighup_stays_ignored(tmp_path):
    """Under ``nohup`` SIGHUP is ignored on purpose: the command line must not turn it into a stop."""
    from tuckerkit.cli._app import _stop_on_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _stop_on_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


# ------------------------------------------------------------------------------------------ exclusive publish
def test_two_concurrent_runs_cannot_both_succeed(result_file, tmp_path):
    """Two runs without --force started 0.3 s apart both reported success and one result was lost."""
    res, _ = result_file
    out = tmp_path / "out.npy"
    marker = tmp_path / "marker"
    slow = _start_paused(["reconstruct", res, "-o", out, "--index", "0,:,:"], marker, tmp_path)
    fast = subprocess.run([*CLI, "reconstruct", str(res), "-o", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert fast.returncode == 0, fast.stderr
    marker.unlink()  # let the paused run publish now: its target exists
    stdout, stderr = slow.communicate(timeout=60)
    assert slow.returncode == 1, (stdout, stderr)
    assert stderr.strip().splitlines() == [f"error: output {str(out)!r} already exists; pass --force to overwrite it"]
    assert np.load(out).shape == (6, 7, 8)  # the winner's file, whole
    assert _temporaries(tmp_path) == []


@pytest.mark.parametrize("links", [True, False], ids=["hard-link", "no-hard-links"])
def test_publish_is_exclusive_without_force(tmp_path, monkeypatch, links):
    """The target appears between the check and the publish: the write fails, the other file stays."""
    if not links:
        def no_link(*args, **kwargs):
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_link)
    out = tmp_path / "out.bin"
    assert atomic_write(tmp_path / "first.bin", lambda f: f.write(b"mine")).read_bytes() == b"mine"

    def rival(f):
        f.write(b"mine")
        out.write_bytes(b"theirs")

    with pytest.raises(OutputFileError, match=r"output '.*out.bin' already exists; pass force=True to overwrite"):
        atomic_write(out, rival)
    assert out.read_bytes() == b"theirs"
    assert atomic_write(out, rival, force=True).read_bytes() == b"mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.bin", "out.bin"]


# ------------------------------------------------------------------------------------- non-regular outputs
def _non_regular(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    os.symlink("/dev/null", tmp_path / "null-link")
    os.symlink(tmp_path / "fifo", tmp_path / "fifo-link")
    return [("/dev/null", "a character device"), (tmp_path / "fifo", "a FIFO (named pipe)"),
            (tmp_path / "null-link", "a symbolic link to a character device"),
            (tmp_path / "fifo-link", "a symbolic link to a FIFO (named pipe)"), (tmp_path / "dir", "a directory")]


def test_outputs_that_are_not_regular_files_are_refused_even_with_force(npy_input, tmp_path):
    """--force replaced a character device or a FIFO with a regular file."""
    for path, what in _non_regular(tmp_path):
        with pytest.raises(OutputFileError, match=re.escape(f"{str(path)!r} is {what}")) as info:
            check_output_path(path, force=True)
        assert info.value.reason == ("directory" if what == "a directory" else "not-regular")
        if what == "a directory":
            continue
        line = _one_error_line(_invoke(["decompose", npy_input, "--ranks", "1,1,1", "-o", path, "--force"]))
        assert line == (f"error: --output {str(path)!r} is {what}, not a regular file; choose a file path "
                        "(--force never replaces it)")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    assert os.path.islink(tmp_path / "null-link")


def test_reconstruct_refuses_a_fifo_named_like_an_npy(result_file, tmp_path):
    res, _ = result_file
    os.mkfifo(tmp_path / "pipe.npy")
    line = _one_error_line(_invoke(["reconstruct", res, "-o", tmp_path / "pipe.npy", "--force"]))
    assert line.endswith("is a FIFO (named pipe), not a regular file; choose a file path (--force never replaces it)")


def test_a_link_to_a_regular_file_is_still_an_output(npy_input, tmp_path):
    (tmp_path / "real.npz").write_bytes(b"old")
    os.symlink(tmp_path / "real.npz", tmp_path / "link.npz")
    assert _invoke(["decompose", npy_input, "--ranks", "2,2,2", "-o", tmp_path / "link.npz"]).exit_code == 1
    res = _invoke(["decompose", npy_input, "--ranks", "2,2,2", "-o", tmp_path / "link.npz", "--force", "-q"])
    assert res.exit_code == 0, res.output
    assert load_result(tmp_path / "link.npz").ranks == (2, 2, 2)


# --------------------------------------------------------------------------------------- stale temporaries
def test_stale_temporaries_of_our_own_pattern_are_swept(tmp_path):
    host, now = _host_tag(), time.time()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    names = {
        "dead": f".out.npy.tuckerkit-{host}-{dead.pid}-abc123.tmp",  # its process is gone
        "old": f".out.npy.tuckerkit-{host}-{os.getppid()}-abc123.tmp",  # alive, but untouched for 2 hours
        "live": f".out.npy.tuckerkit-{host}-{os.getppid()}-def456.tmp",  # alive and fresh: a write in progress
        "other-host": ".out.npy.tuckerkit-0badf00d-999999-abc123.tmp",  # another machine's, fresh
        "foreign": ".out.npy.x7f3k.tmp",  # not ours
        "foreign-old": "notes.tuckerkit-00000000-1-a.tmp",  # not hidden: not ours either
    }
    for key, name in names.items():
        (tmp_path / name).write_bytes(b"partial")
        if key in ("old", "foreign", "foreign-old"):
            os.utime(tmp_path / name, (now - 7200, now - 7200))
    removed = _sweep_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted([names["dead"], names["old"]])
    left = {names[k] for k in ("live", "other-host", "foreign", "foreign-old")}
    assert {p.name for p in tmp_path.iterdir()} == left
    (tmp_path / names["dead"]).write_bytes(b"partial")
    atomic_write(tmp_path / "new.bin", lambda f: f.write(b"x"))  # every write sweeps its folder first
    assert {p.name for p in tmp_path.iterdir()} == left | {"new.bin"}


# ------------------------------------------------------------------------------------------------------ umask
@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_every_writer_respects_the_umask(tmp_path, rng, mask, mode, npy_input):
    res = tk.hosvd(rng.standard_normal((4, 5, 6)), 2)
    old = os.umask(mask)
    try:
        paths = [save_result(tmp_path / "r.npz", res), atomic_write(tmp_path / "a.bin", lambda f: f.write(b"x"))]
        tk.io.write_tns(tmp_path / "t.tns", np.array([[0, 1, 2]]), np.array([1.0]))
        paths.append(tmp_path / "t.tns")
        assert _invoke(["decompose", npy_input, "--ranks", "2,2,2", "-o", tmp_path / "c.npz", "-q"]).exit_code == 0
        assert _invoke(["reconstruct", tmp_path / "c.npz", "-o", tmp_path / "c.npy"]).exit_code == 0
        paths += [tmp_path / "c.npz", tmp_path / "c.npy"]
    finally:
        os.umask(old)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in paths} == {p.name: oct(mode) for p in paths}


# ------------------------------------------------------------------------------------------ --allow-external
def test_cli_allow_external(tmp_path, rng):
    """The library refused HDF5 external storage; the command line had no way to opt in."""
    h5py = pytest.importorskip("h5py")
    data = rng.standard_normal((4, 5, 6))
    raw = tmp_path / "raw.bin"
    raw.write_bytes(data.tobytes())
    with h5py.File(tmp_path / "ext.h5", "w") as f:
        f.create_dataset("x", shape=data.shape, dtype="f8", external=[(str(raw), 0, data.nbytes)])
    refused = r"\['x'\] keeps its data in external files \('.*raw.bin', \.\.\.\); pass allow_external=True"
    for args in (["info", tmp_path / "ext.h5"], ["decompose", tmp_path / "ext.h5", "--ranks", "2,2,2"]):
        line = _one_error_line(_invoke(args))
        assert "keeps its data in external files" in line and "(--allow-external)" in line, line
    assert not (tmp_path / "ext.h5.tucker.npz").exists()
    res = _invoke(["info", tmp_path / "ext.h5", "--allow-external", "--json"])
    assert res.exit_code == 0 and '"shape": [4, 5, 6]' in res.stdout
    res = _invoke(["decompose", tmp_path / "ext.h5", "--ranks", "4,5,6", "--allow-external", "-q"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "ext.h5.tucker.npz"
    np.testing.assert_allclose(load_result(out).to_dense(), data, atol=100 * np.finfo(float).eps)
    line = _one_error_line(_invoke(["reconstruct", out, "--against", tmp_path / "ext.h5"]))
    assert "keeps its data in external files" in line
    res = _invoke(["reconstruct", out, "--against", tmp_path / "ext.h5", "--allow-external", "--json"])
    assert res.exit_code == 0, res.output
    with pytest.raises(tk.io.TensorFileError, match=refused):
        tk.io.load_tensor(tmp_path / "ext.h5")


def test_a_failed_write_names_the_output_and_leaves_nothing(tmp_path):
    """A full disk or a file-size limit (``ulimit -f``) said ``[Errno 27] File too large`` without naming a file."""
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")

    def too_large(f):
        f.write(b"x" * 10)
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    with pytest.raises(OutputFileError, match=r"^could not write output '.*out\.bin' \(File too large\); an "
                                              r"existing file there is unchanged$") as info:
        atomic_write(path, too_large, force=True)
    assert info.value.reason == "write"
    assert path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["out.bin"]


@pytest.mark.parametrize(("text", "match"), [
    ("1e999", r"^memory_limit='1e999' is not a finite memory size"),
    ("1e400GB", r"^memory_limit='1e400GB' is not a finite memory size"),
    ("...", r"^memory_limit='...' is not a memory size"),
    ("1.2.3GB", r"^memory_limit='1.2.3GB' is not a memory size"),
    ("0.5", r"^memory_limit='0.5' is below one byte"),
])
def test_memory_sizes_that_are_not_finite_numbers_are_refused_in_one_line(text, match):
    from tuckerkit.engine import parse_memory

    with pytest.raises(ValueError, match=match):  # ('1e999' raised OverflowError, a traceback from the CLI)
        parse_memory(text)


@pytest.mark.parametrize(("entry", "match"), [
    ({"fit": 5.0}, r"metadata fit is 5.0; expected a finite number <= 1 or null"),
    ({"input_sha256": 5}, r"metadata input_sha256 is 5; expected a string"),
])
def test_result_metadata_of_the_wrong_kind_is_refused(tmp_path, rng, entry, match):
    import json
    import zipfile

    path = save_result(tmp_path / "r.npz", tk.hosvd(rng.standard_normal((4, 5, 6)), 2))
    with np.load(path) as z:
        members = {k: z[k] for k in z.files}
    meta = json.loads(str(members["metadata"]))
    meta.update(entry)
    members["metadata"] = np.array(json.dumps(meta))
    bad = tmp_path / "bad.npz"
    np.savez(bad, **members)
    assert zipfile.is_zipfile(bad)
    with pytest.raises(ValueError, match=match):  # (an int sha256 failed `info` on a slice; 5.0 read as -4)
        load_result(bad)
