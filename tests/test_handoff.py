"""The GIL-free GEMM helpers (engine/_handoff.py): the pieces of a split product are the same BLAS calls on
every route (the helpers, the caller alone, the Python pool), so the bits never depend on the route, the
workers or other threads; the helpers sleep when idle and never keep a process from exiting."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tuckerkit.engine import ExecutionPolicy
from tuckerkit.engine import _handoff as H
from tuckerkit.engine._contract import cpu_matmul

needs_helpers = pytest.mark.skipif(H._handoff() is None, reason="no numpy OpenBLAS on x86-64 Linux to hand off to")


def _layouts(rng, dtype):
    """(name, a, b, c) products of every kind the splits make: rows, columns, the reduction, batches."""
    def f(x):
        return np.asfortranarray(x)

    a = rng.standard_normal((600, 90)).astype(dtype)
    b = rng.standard_normal((90, 80)).astype(dtype)
    wide = rng.standard_normal((60, 700)).astype(dtype)
    w2 = rng.standard_normal((700, 500)).astype(dtype)
    tall = rng.standard_normal((9, 60000)).astype(dtype)
    t2 = rng.standard_normal((60000, 7)).astype(dtype)
    A3 = rng.standard_normal((40, 70, 60)).astype(dtype)
    B3 = rng.standard_normal((40, 60, 50)).astype(dtype)
    B1 = rng.standard_normal((1, 60, 50)).astype(dtype)
    S3 = rng.standard_normal((70, 40, 60)).astype(dtype).transpose(1, 0, 2)  # batch stride 60, rows 2400 apart
    return [
        ("rows", a, b, np.empty((600, 80), dtype)),
        ("rows, F operands", f(a), f(b), np.empty((600, 80), dtype)),
        ("rows, F output", a, b, np.empty((80, 600), dtype).T),
        ("columns", wide, w2, np.empty((60, 500), dtype)),
        ("columns, F output", f(wide), w2, np.empty((500, 60), dtype).T),
        ("reduction", tall, t2, np.empty((9, 7), dtype)),
        ("reduction, F operands", f(tall), f(t2), np.empty((9, 7), dtype)),
        ("batch", A3, B3, np.empty((40, 70, 50), dtype)),
        ("batch, broadcast", A3, B1, np.empty((40, 70, 50), dtype)),
        ("batch, strided", S3, B3, np.empty((40, 70, 50), dtype)),
    ]


def _run(a, b, c, workers):
    out = np.full_like(c, np.nan) if c.flags.c_contiguous else np.full(c.T.shape, np.nan, c.dtype).T
    cpu_matmul(a, b, out, 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if a.ndim == 3 else 1),
               ExecutionPolicy(workers=workers), 1)
    return out


@needs_helpers
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_route_gives_the_same_bits_and_matches_einsum(dtype, rng, monkeypatch):
    pieces: list[int] = []
    real = H._Handoff.run

    def counted(self, descs, workers):
        pieces.append(len(descs))
        return real(self, descs, workers)

    for name, a, b, c in _layouts(rng, dtype):
        got = {w: _run(a, b, c, w) for w in (2, 3, 1)}
        pieces.clear()
        with monkeypatch.context() as m:
            m.setattr(H._Handoff, "run", counted)
            again = _run(a, b, c, 2)
        assert pieces and pieces[0] >= 2, name  # the product was cut and the helpers took it
        with monkeypatch.context() as m:  # the Python pool and numpy's matmul on each piece
            m.setattr(H, "_handoff", lambda: None)
            pool = _run(a, b, c, 2)
        for w, r in got.items():
            np.testing.assert_array_equal(r, got[1], err_msg=f"{name}: {w} workers")
        np.testing.assert_array_equal(again, got[1], err_msg=name)
        np.testing.assert_array_equal(pool, got[1], err_msg=f"{name}: the Python pool")
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        k = a.shape[-1]
        np.testing.assert_allclose(got[2], ref, rtol=0,
                                   atol=4 * k * np.finfo(dtype).eps * np.abs(ref).max(), err_msg=name)


@needs_helpers
def test_threads_sharing_the_helpers_get_the_sequential_bits(rng):
    """Several threads at once: one holds the helpers, the others run the same calls on the Python pool."""
    cases = _layouts(rng, np.float64)
    ref = [_run(a, b, c, 2) for _, a, b, c in cases]
    errors: list = []

    def run():
        try:
            for _ in range(3):
                for (name, a, b, c), r in zip(cases, ref, strict=True):
                    np.testing.assert_array_equal(_run(a, b, c, 2), r, err_msg=name)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]


def test_views_blas_cannot_take_are_not_described(rng):
    a = rng.standard_normal((40, 30))
    b = rng.standard_normal((30, 20))
    c = np.empty((40, 20))
    addresses = (1, 2)
    assert H.describe(a, b, c, addresses) is not None
    assert H.describe(a[::2, ::2], b[:15], c[:20], addresses) is None  # no unit stride
    assert H.describe(a.astype(np.complex128), b.astype(np.complex128), c.astype(np.complex128), addresses) is None
    assert H.describe(a[:, :0], b[:0], c, addresses) is None  # an empty reduction
    assert H.describe(np.ones((3, 4, 5)), np.ones((2, 5, 6)), np.empty((3, 4, 6)), addresses) is None  # batches
    d, swapped = H.describe(a, b, np.empty((20, 40)).T, addresses)
    assert swapped and d[4:7] == [20, 40, 30]  # c^T = b^T a^T
    # a strided view that falls back still gives the product
    out = np.empty((20, 10))
    cpu_matmul(a[::2, ::2], b[:15, ::2], out, 10**8, ExecutionPolicy(workers=2))
    ref = a[::2, ::2] @ b[:15, ::2]
    np.testing.assert_allclose(out, ref, rtol=0, atol=4 * 15 * np.finfo(np.float64).eps * np.abs(ref).max())


def _cpu_ticks(native_id: int) -> int:
    fields = open(f"/proc/self/task/{native_id}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, clock ticks


@needs_helpers
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_helpers_sleep_when_idle_and_when_parked(rng):
    a, b, c = _layouts(rng, np.float64)[0][1:]
    _run(a, b, c, 2)
    h = H._handoff()
    helper = h.threads[0]
    H.park()
    deadline = time.monotonic() + 5
    while H._load(h.hs, H._ASLEEP) != 1:
        assert time.monotonic() < deadline, "a parked helper did not go to sleep"
        time.sleep(1e-3)
    before = _cpu_ticks(helper.native_id)
    time.sleep(0.5)
    assert _cpu_ticks(helper.native_id) - before <= 2  # (clock ticks of 10 ms): asleep, not spinning
    _run(a, b, c, 2)  # a round wakes it
    time.sleep(0.2)  # past the spin: asleep again without a park
    before = _cpu_ticks(helper.native_id)
    time.sleep(0.5)
    assert _cpu_ticks(helper.native_id) - before <= 2


_CHILD = """
import hashlib, os, sys
import numpy as np
from tuckerkit.engine import ExecutionPolicy
from tuckerkit.engine._contract import cpu_matmul
rng = np.random.default_rng(1)
a, b = rng.standard_normal((3000, 64)), rng.standard_normal((64, 64))
def digest():
    c = np.empty((3000, 64))
    cpu_matmul(a, b, c, 2 * 3000 * 64 * 64, ExecutionPolicy(workers=2), 1)
    return hashlib.sha256(c.tobytes()).hexdigest()
first = digest()
if sys.argv[1] == "fork":
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, digest().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 64).decode() == first, "the forked child computed other bits"
print(first)
"""


@needs_helpers
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")
def test_exit_fork_and_the_environment_switch_keep_the_bits():
    """A process with helpers exits at once; a forked child makes its own; TUCKERKIT_BLAS_HANDOFF=0 (the
    Python pool and numpy's matmul) gives the same bits."""
    env = {k: v for k, v in os.environ.items() if k != "TUCKERKIT_BLAS_HANDOFF"}
    runs = []
    for mode, extra in (("plain", {}), ("fork", {}), ("plain", {"TUCKERKIT_BLAS_HANDOFF": "0"})):
        p = subprocess.run([sys.executable, "-c", _CHILD, mode], env={**env, **extra}, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        runs.append(p.stdout.strip())
    assert len(set(runs)) == 1 and len(runs[0]) == 64
