"""OpenBLAS's spinning workers quieted before a parallel section (``_policy.quiet_blas_workers``).

Each case runs in a fresh interpreter: the step acts only when no Python thread but the caller (and
tuckerkit's own) is alive, and pytest's workers keep threads of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from tuckerkit.engine import _policy

_POOLS = [i for i in threadpool_info() if i["user_api"] == "blas" and i["internal_api"] == "openblas"
          and i.get("threading_layer") == "pthreads"]
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _POOLS or len(os.sched_getaffinity(0)) < 2,
    reason="needs OpenBLAS with its own worker threads (Linux, 2 threads or more)")

_PRELUDE = """
import json, threading, numpy as np
import tuckerkit as tk
import tuckerkit.engine._norm_kernels  # (a call's first parallel section, the norm's: loaded as after any earlier
from tuckerkit.engine import _policy   # call of a process, numba's first import outlasting a product's spin)
A = np.random.default_rng(0).standard_normal((400, 400))
ref = A @ A
_policy._openblas_pools()
pool = next(p for path, p in _policy._QUIET.items() if p is not None and 'numpy' in path)  # numpy's OpenBLAS
out = {}
"""


_THREAD_SETTINGS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_THREAD_TIMEOUT")


def _run(body: str, env: dict[str, str] | None = None) -> dict:
    # OpenBLAS as a fresh process starts it (a test before may have left dask's one-thread settings behind)
    e = {k: v for k, v in os.environ.items() if k not in _THREAD_SETTINGS}
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", _PRELUDE + body], capture_output=True, text=True, timeout=300, env=e)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_threaded_product_leaves_a_spinning_worker_that_the_step_ends_and_blas_starts_again():
    out = _run("""
B = A @ A                                   # OpenBLAS's worker spins for ~0.1 s after this
out['spinning'] = _policy._foreign_threads_running()
out['quieted'] = _policy.quiet_blas_workers()
out['pool up after'] = bool(pool.avail.value)
out['spinning after'] = _policy._foreign_threads_running()
C = A @ A                                   # the pool starts again on the next threaded call
out['pool up again'] = bool(pool.avail.value)
out['same bits'] = bool(np.array_equal(B, ref) and np.array_equal(C, ref))
print(json.dumps(out))
""")
    assert out == {"spinning": True, "quieted": True, "pool up after": False, "spinning after": False,
                   "pool up again": True, "same bits": True}


def test_nothing_is_stopped_while_another_python_thread_lives_or_when_turned_off():
    out = _run("""
stop = threading.Event()
t = threading.Thread(target=stop.wait); t.start()
A @ A
out['with a thread'] = _policy.quiet_blas_workers()
out['pool up'] = bool(pool.avail.value)
stop.set(); t.join()
print(json.dumps(out))
""")
    assert out == {"with a thread": False, "pool up": True}
    out = _run("""
A @ A
out['turned off'] = _policy.quiet_blas_workers()
out['pool up'] = bool(pool.avail.value)
print(json.dumps(out))
""", env={"TUCKERKIT_BLAS_QUIET": "0"})
    assert out == {"turned off": False, "pool up": True}


def test_nothing_is_stopped_when_no_worker_spins():
    out = _run("""
import time
A @ A
time.sleep(0.6)                            # past OpenBLAS's 2^28-cycle spin: the worker sleeps
out['spinning'] = _policy._foreign_threads_running()
out['quieted'] = _policy.quiet_blas_workers()
out['pool up'] = bool(pool.avail.value)
print(json.dumps(out))
""")
    assert out == {"spinning": False, "quieted": False, "pool up": True}


def test_a_decomposition_after_a_threaded_product_gives_the_same_bits_and_restores_the_count():
    """The first parallel section of ``cp_als`` (its norm's pass) quiets the worker the product left; the
    factors are the bits of a call with the step turned off, and the caller's thread count is back after the
    call. The norm's compiled loop is loaded before the product, as after any earlier call of a process: a
    first import of numba takes longer than the worker spins."""
    body = """
from threadpoolctl import threadpool_info
X = np.random.default_rng(1).standard_normal((120, 110, 100))
A @ A
cp = tk.cp_als(X, 8, max_iter=3, tol=0, init="random", random_state=0)
out['quieted'] = _policy._PIN.quieted
out['stopped'] = _policy.QUIETED[0]
out['threads'] = sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'})
np.save('{path}', np.concatenate([f.ravel() for f in cp.factors]))
print(json.dumps(out))
"""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        on = _run(body.replace("{path}", f"{d}/on.npy"))
        off = _run(body.replace("{path}", f"{d}/off.npy"), env={"TUCKERKIT_BLAS_QUIET": "0"})
        assert on["quieted"] and off["quieted"]  # looked once (off: the switch is read after the flag is set)
        # numpy's pool, and scipy's too when its workers still spin from its loading during the call
        assert on["stopped"] in (1, 2) and off["stopped"] == 0
        assert on["threads"] == off["threads"] == [min(len(os.sched_getaffinity(0)), 64)]
        assert np.array_equal(np.load(f"{d}/on.npy"), np.load(f"{d}/off.npy"))


class _UpPool:
    """A stand-in for an OpenBLAS pool that is up with workers (never stopped here: nothing spins)."""

    path = "numpy"

    def idle_workers(self) -> bool:
        return True


def test_inside_a_pinned_call_the_step_looks_once(monkeypatch):
    looks = []
    monkeypatch.setattr(_policy, "_foreign_threads_running", lambda: looks.append(1) or False)
    monkeypatch.setattr(_policy, "_openblas_pools", lambda: [_UpPool()])
    monkeypatch.delenv("TUCKERKIT_BLAS_QUIET", raising=False)
    monkeypatch.setattr(_policy.threading, "enumerate", lambda: [_policy.threading.current_thread()])
    with _policy.blas_pinned():
        assert _policy.quiet_blas_workers() is False
        assert _policy.quiet_blas_workers() is False
    with _policy.blas_pinned():
        _policy.quiet_blas_workers()
    assert len(looks) == 2


def test_no_look_at_proc_where_no_pool_is_up(monkeypatch):
    """With no OpenBLAS pool up (stopped, or one thread) nothing could be stopped: the step returns before
    reading ``/proc``; with one up it looks."""
    looks = []
    monkeypatch.setattr(_policy, "_foreign_threads_running", lambda: looks.append(1) or False)
    monkeypatch.delenv("TUCKERKIT_BLAS_QUIET", raising=False)
    monkeypatch.setattr(_policy.threading, "enumerate", lambda: [_policy.threading.current_thread()])
    down = _UpPool()
    down.idle_workers = lambda: False  # type: ignore[method-assign]
    monkeypatch.setattr(_policy, "_openblas_pools", lambda: [down])
    assert _policy.quiet_blas_workers() is False and looks == []
    monkeypatch.setattr(_policy, "_openblas_pools", lambda: [])
    assert _policy.quiet_blas_workers() is False and looks == []
    monkeypatch.setattr(_policy, "_openblas_pools", lambda: [down, _UpPool()])
    assert _policy.quiet_blas_workers() is False and looks == [1]


@pytest.mark.parametrize(("timeout", "spin_log2"), [(None, 28), ("4", 4), ("2", 4), ("16", 16), ("17", 17),
                                                   ("40", 30)])
def test_workers_that_sleep_at_once_are_left_alone(timeout, spin_log2):
    """OpenBLAS's workers spin 2^n cycler ticks, n from OPENBLAS_THREAD_TIMEOUT clamped to 4-30 (28 unset): with
    n of QUIET_SPIN_LOG2 or less they sleep at once, and the step neither looks at ``/proc`` nor stops the pool."""
    body = """
looks = []
running = _policy._foreign_threads_running
_policy._foreign_threads_running = lambda: looks.append(1) or running()
B = A @ A
out['spin'] = pool.spin_log2
out['quieted'] = _policy.quiet_blas_workers()
out['looked'] = len(looks)
out['pool up after'] = bool(pool.avail.value)
out['same bits'] = bool(np.array_equal(B, ref))
print(json.dumps(out))
"""
    out = _run(body, env={} if timeout is None else {"OPENBLAS_THREAD_TIMEOUT": timeout})
    assert out["spin"] == spin_log2 and out["same bits"]
    if spin_log2 <= _policy.QUIET_SPIN_LOG2:
        assert out == {"spin": spin_log2, "quieted": False, "looked": 0, "pool up after": True, "same bits": True}
    else:  # (it looks; at 2^17 ticks, ~50 us, the worker may be asleep by then)
        assert out["looked"] == 1
        if spin_log2 == 28:
            assert out["quieted"] is True and out["pool up after"] is False


def test_a_large_cut_product_quiets_the_workers_first_and_keeps_its_bits():
    """A product cut over the workers from QUIET_MIN_FLOPS (here 2 x 300 x 400 x 300 = 72 MFlop) looks
    before its pieces run (on the GIL-free helpers, which share the cores with OpenBLAS's workers)."""
    body = """
from tuckerkit.engine import ExecutionPolicy, plan_contraction
rng = np.random.default_rng(2)
P, Q = rng.standard_normal((300, 400)), rng.standard_normal((400, 300))
plan = plan_contraction("ik,kj->ij", P, Q, policy=ExecutionPolicy(workers=2))
import time
time.sleep(0.6)                            # past the spin of the prelude's product
ref = plan(P, Q)                            # nothing spins
out['stopped before'] = _policy.QUIETED[0]
A @ A
again = plan(P, Q)
out['stopped after'] = _policy.QUIETED[0]
out['same bits'] = bool(np.array_equal(ref, again))
out['close to numpy'] = bool(np.allclose(ref, P @ Q, rtol=1e-13, atol=1e-12))
print(json.dumps(out))
"""
    assert _run(body) == {"stopped before": 0, "stopped after": 1, "same bits": True, "close to numpy": True}


def test_a_stopped_pool_stays_stopped_across_calls_until_the_next_threaded_product():
    """The pin sets a stopped pool's thread count without starting it (OpenBLAS's setter would start it, its
    workers then spinning into the next call: back-to-back calls each stopped a pool again)."""
    out = _run("""
from threadpoolctl import threadpool_info
X = np.random.default_rng(1).standard_normal((120, 110, 100))
def numpy_threads():
    return [i['num_threads'] for i in threadpool_info() if 'numpy' in i['filepath']][0]
before = numpy_threads()
A @ A
first = tk.cp_als(X, 8, max_iter=2, tol=0, init="random", random_state=0)
out['stopped'] = _policy.QUIETED[0]
out['pool up after the call'] = bool(pool.avail.value)
out['count restored'] = numpy_threads() == before
second = tk.cp_als(X, 8, max_iter=2, tol=0, init="random", random_state=0)
out['stopped again'] = _policy.QUIETED[0] - out['stopped']
out['same bits'] = all(np.array_equal(a, b) for a, b in zip(first.factors, second.factors))
C = A @ A
out['pool up after a product'] = bool(pool.avail.value)
out['product right'] = bool(np.array_equal(C, ref))
print(json.dumps(out))
""")
    assert out.pop("stopped") >= 1
    assert out == {"pool up after the call": False, "count restored": True, "stopped again": 0, "same bits": True,
                   "pool up after a product": True, "product right": True}
