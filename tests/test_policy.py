"""The execution policy: BLAS held to one thread inside tuckerkit and restored exactly, fixed work splits
taken dynamically by the workers, and the same bits whatever the number of workers, the machine's load, or
how many threads call at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import tuckerkit as tk
from tuckerkit.engine import ExecutionPolicy, blas_pinned, default_policy, plan_contraction
from tuckerkit.engine._policy import parallel_for, split_points

TWO = ExecutionPolicy(workers=2)
ONE = ExecutionPolicy(workers=1)


def _blas_threads():
    return {d["filepath"]: d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}


def test_blas_pinned_holds_every_blas_library_and_restores_exactly():
    import scipy.linalg  # noqa: F401  (scipy's wheel brings its own OpenBLAS)

    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        assert len(before) >= 1 and set(before.values()) == {2}
        with blas_pinned():
            assert set(_blas_threads().values()) == {1}
            with blas_pinned():  # re-entrant
                assert set(_blas_threads().values()) == {1}
            assert set(_blas_threads().values()) == {1}
            assert default_policy().workers == min(2, len(__import__("os").sched_getaffinity(0)))
        assert _blas_threads() == before
        with pytest.raises(RuntimeError, match="inside"), blas_pinned():
            raise RuntimeError("an error inside")
        assert _blas_threads() == before  # also after an exception


def test_blas_pin_is_held_while_any_thread_is_inside():
    """Two threads overlap: BLAS stays at one thread until the last leaves, then comes back exactly."""
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        inside, leave_first, seen = threading.Event(), threading.Event(), []

        def first():
            with blas_pinned():
                inside.set()
                leave_first.wait(5)

        t = threading.Thread(target=first)
        t.start()
        inside.wait(5)
        with blas_pinned():
            leave_first.set()
            t.join(5)
            seen.append(set(_blas_threads().values()))  # the first thread left; we are still inside
        assert seen == [{1}]
        assert _blas_threads() == before


def test_a_call_with_an_error_restores_blas(rng):
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        with pytest.raises(ValueError, match=r"ranks\[0\]=9 exceeds the size of mode 0"):
            tk.hooi(rng.standard_normal((4, 5, 6)), (9, 2, 2))
        assert _blas_threads() == before


@pytest.mark.parametrize("n_items", [1, 2, 7, 50])
def test_parallel_for_runs_each_item_once(n_items):
    seen, lock = [], threading.Lock()

    def work(i, state):
        state.append(i)
        with lock:
            seen.append(i)

    states = parallel_for(work, n_items, TWO, list)
    assert sorted(seen) == list(range(n_items))
    assert sorted(i for st in states for i in st) == list(range(n_items))
    assert 1 <= len(states) <= 2


@pytest.mark.parametrize("n_items", [1, 2, 9])
def test_parallel_for_keeps_nothing_of_the_work_after_returning(n_items):
    import gc
    import weakref

    class Big:  # stands for the caller's arrays, reachable only through the work function
        pass

    # a pool thread used to keep the finished task (and through it the caller's arrays) until it next ran:
    # CP-ALS under load then held one dimension-tree partial beside the next
    gc.disable()
    try:
        alive = 0
        for _ in range(200):
            obj = Big()
            ref = weakref.ref(obj)

            def work(i, state, obj=obj):
                state.append(obj)

            parallel_for(work, n_items, TWO, list)
            del work, obj
            alive += ref() is not None
    finally:
        gc.enable()
    assert alive == 0


def test_parallel_for_propagates_errors():
    def work(i, _):
        if i == 3:
            raise ValueError("item 3 failed")

    with pytest.raises(ValueError, match="item 3 failed"):
        parallel_for(work, 8, TWO)


def test_parallel_for_stops_all_threads_on_error():
    done, lock = [], threading.Lock()

    def work(i, _):
        if i == 0:
            raise RuntimeError("first item failed")
        threading.Event().wait(0.001)  # 1000 items take a second; the failure comes first
        with lock:
            done.append(i)

    with pytest.raises(RuntimeError, match="first item failed"):
        parallel_for(work, 1000, TWO)
    seen = len(done)
    assert seen < 500  # the others stopped taking items
    threading.Event().wait(0.05)
    assert len(done) == seen  # and nothing runs after the call returned


def test_split_points_depend_on_the_sizes_only():
    assert split_points(10, 100) == [0, 10]
    assert split_points(1000, 10**12) == [1000 * i // 16 for i in range(17)]  # at most 16 pieces
    assert split_points(3, 10**12) == [0, 1, 2, 3]
    assert split_points(1000, 10**12, most=4) == [0, 250, 500, 750, 1000]
    assert split_points(3, 10**12, most=2) == [0, 1, 3]


def test_blas_products_take_at_most_two_pieces_a_cpu():
    """Two a CPU rounded up to a power of two, between 2 and 16; fixed at import from the machine's CPU count."""
    from tuckerkit.engine._policy import BLAS_MAX_PIECES, MAX_PIECES, blas_max_pieces

    assert [blas_max_pieces(c) for c in (1, 2, 3, 4, 5, 8, 9, 256)] == [2, 4, 8, 8, 16, 16, 16, 16]
    assert blas_max_pieces(None) == blas_max_pieces(0) == MAX_PIECES  # unknown: as before
    assert BLAS_MAX_PIECES == blas_max_pieces(os.cpu_count())


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("bik,bkj->bij", [(40, 100, 50), (40, 50, 70)]),  # batch pieces
        ("ibk,bkj->bij", [(100, 40, 50), (40, 50, 70)]),  # batch pieces on a strided operand
        ("mk,nkp->mnp", [(64, 64), (64, 64, 64)]),  # a strided batch with a shared operand
        ("ik,kj->ij", [(400, 300), (300, 200)]),  # one GEMM cut into row pieces
        ("ik,kj->ij", [(30, 600), (600, 700)]),  # one GEMM cut into column pieces
    ],
)
def test_split_products_match_numpy_and_are_bitwise_the_same_for_any_workers(spec, shapes, rng):
    A, B = (rng.standard_normal(s) for s in shapes)
    p2 = plan_contraction(spec, A, B, policy=TWO)
    p1 = plan_contraction(spec, A, B, policy=ONE)
    assert p2.parallel and "2 workers" in p2.explain()
    r2, r1 = p2(A, B), p1(A, B)
    np.testing.assert_array_equal(r1, r2)
    ref = np.einsum(spec, A, B)
    k = A.shape[-1]
    np.testing.assert_allclose(r2, ref, rtol=0, atol=8 * k * np.finfo(np.float64).eps * np.abs(ref).max())


@pytest.mark.parametrize(("shape", "mode"), [((60, 50, 40), 1), ((120, 300), 0), ((30, 20, 400), 2),
                                           ((200, 90, 10), 1), ((40, 60, 3, 5), 1)])  # (short slabs: packed)
def test_gram_is_bitwise_the_same_for_any_workers(shape, mode, rng):
    X = rng.standard_normal(shape)
    g1 = tk.engine.gram_plan(X, mode, policy=ONE)(X)
    g2 = tk.engine.gram_plan(X, mode, policy=TWO)(X)
    np.testing.assert_array_equal(g1, g2)
    U = np.moveaxis(X, mode, 0).reshape(shape[mode], -1)
    np.testing.assert_allclose(g2, U @ U.T, rtol=0, atol=4 * U.shape[1] * np.finfo(float).eps * (U * U).sum(1).max())


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_hooi_and_cp_same_bits_serial_and_threaded(rng):
    X = rng.standard_normal((60, 50, 40))
    with threadpool_limits(2, user_api="blas"):
        T2 = tk.hooi(X, (5, 5, 5), tol=0, max_iter=3)
        C2 = tk.cp_als(X, 4, tol=0, max_iter=3)
    with threadpool_limits(1, user_api="blas"):  # the default policy follows: one worker
        T1 = tk.hooi(X, (5, 5, 5), tol=0, max_iter=3)
        C1 = tk.cp_als(X, 4, tol=0, max_iter=3)
    np.testing.assert_array_equal(T1.core, T2.core)
    assert T1.fit_history == T2.fit_history
    for U, V in zip(C1.factors, C2.factors, strict=True):
        np.testing.assert_array_equal(U, V)


def _runs(X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        return (tk.hooi(X, (4, 5, 3), tol=0, max_iter=4), tk.cp_als(X, 3, tol=0, max_iter=4))


def _same(a, b):
    np.testing.assert_array_equal(a[0].core, b[0].core)
    for U, V in zip(a[0].factors + a[1].factors, b[0].factors + b[1].factors, strict=True):
        np.testing.assert_array_equal(U, V)
    np.testing.assert_array_equal(a[1].weights, b[1].weights)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_concurrent_calls_give_the_sequential_bits(rng):
    """Four threads decomposing one tensor at once get exactly what the same calls get one after another."""
    X = rng.standard_normal((70, 60, 50))
    ref = _runs(X)
    out: list = [None] * 4
    errors: list = []

    def run(i):
        try:
            out[i] = _runs(X)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    for got in out:
        _same(got, ref)


def test_same_bits_beside_a_busy_process(rng):
    """A process spinning on every CPU changes how the work is scheduled, never the result."""
    X = rng.standard_normal((70, 60, 50))
    ref = _runs(X)
    busy = subprocess.Popen([sys.executable, "-c", "import multiprocessing as m, itertools\n"
                             "def spin(_):\n    for _ in itertools.count(): pass\n"
                             "m.Pool(2).map(spin, range(2))"])
    try:
        got = _runs(X)
    finally:
        busy.kill()
        busy.wait()
    _same(got, ref)


_FIRST_CALL = """
import hashlib, json, sys, warnings
import numpy as np
import tuckerkit as tk
from threadpoolctl import threadpool_info
from tuckerkit.engine import blas_pinned
from tuckerkit.engine._policy import scipy_linalg
fresh = "scipy.linalg" not in sys.modules  # tuckerkit's import leaves scipy's LAPACK (its own OpenBLAS) unloaded
with blas_pinned():
    still = "scipy.linalg" not in sys.modules  # nor does entering a pinned call
    scipy_linalg()  # loaded inside the pin: held at one thread at once
    inside = {d["filepath"]: d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}
X = np.random.default_rng(0).standard_normal((150, 150, 150))
with warnings.catch_warnings():
    warnings.simplefilter("ignore", tk.ConvergenceWarning)
    runs = [tk.cp_als(X, 30, max_iter=1, tol=0) for _ in range(2)]
digests = [hashlib.sha256(b"".join(U.tobytes() for U in r.factors)).hexdigest() for r in runs]
print(json.dumps({"fresh": fresh and still, "threads inside": sorted(set(inside.values())),
                  "scipy's BLAS pinned": any("scipy" in f and "numpy" not in f for f in inside),
                  "same bits": digests[0] == digests[1]}))
"""

_FIRST_CALL_UNLOADED = """
import hashlib, json, sys, warnings
import numpy as np
import tuckerkit as tk
X = np.random.default_rng(0).standard_normal((150, 150, 150))
with warnings.catch_warnings():
    warnings.simplefilter("ignore", tk.ConvergenceWarning)
    runs = [tk.cp_als(X, 30, max_iter=1, tol=0) for _ in range(2)]
digests = [hashlib.sha256(b"".join(U.tobytes() for U in r.factors)).hexdigest() for r in runs]
print(json.dumps({"scipy.linalg loaded by the call": "scipy.linalg" in sys.modules,
                  "same bits": digests[0] == digests[1]}))
"""


def test_the_first_call_of_a_process_gives_the_bits_of_the_next():
    """scipy's LAPACK is loaded by a decomposition's first call, inside the pin: it must be pinned too. Before,
    scipy's OpenBLAS ran that call's ``eigh`` on two threads: the first ``cp_als(X, 30)`` of a process on 150^3
    gave other bits than the second."""
    # OpenBLAS as a fresh process starts it (a test before may have left dask's one-thread settings behind)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                            "GOTO_NUM_THREADS", "MKL_NUM_THREADS")}
    p = subprocess.run([sys.executable, "-c", _FIRST_CALL], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout) == {"fresh": True, "threads inside": [1], "scipy's BLAS pinned": True,
                                    "same bits": True}
    # and where scipy.linalg is first loaded by the call itself (no look before it)
    p = subprocess.run([sys.executable, "-c", _FIRST_CALL_UNLOADED], capture_output=True, text=True, timeout=300,
                       env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout) == {"scipy.linalg loaded by the call": True, "same bits": True}


def test_policy_is_validated():
    with pytest.raises(ValueError, match=r"workers=0 is invalid; expected an integer >= 1"):
        ExecutionPolicy(workers=0)
    with pytest.raises(TypeError, match=r"policy must be an ExecutionPolicy or None; received int"):
        plan_contraction("ik,kj->ij", np.ones((2, 3)), np.ones((3, 4)), policy=2)


@pytest.mark.parametrize(("dtype", "n", "cut"), [(np.float64, 50, False), (np.float64, 64, True),
                                                 (np.float32, 56, False), (np.float32, 64, True)])
def test_a_planned_contraction_is_cut_from_16_mflop_in_float64_terms(dtype, n, cut, rng, monkeypatch):
    """A planned contraction is cut into pieces from CONTRACT_PARALLEL_FLOPS float64 flops (a float32 one
    counts half): below, one BLAS call (float64 n = 50, 12.5 MFlop, and float32 n = 56, 9.8 in float64 terms);
    the seed's n = 64 single GEMMs in float32 (16.7) are cut in two. Either way the product matches einsum,
    and the bits do not depend on the workers."""
    from tuckerkit.engine import _contract

    A = rng.standard_normal((n, n)).astype(dtype)
    B = rng.standard_normal((n, n, n)).astype(dtype)
    p2 = plan_contraction("mk,knp->mnp", A, B, policy=TWO)
    assert p2.parallel == cut
    calls = []  # pieces of each cut product: on the GIL-free helpers, or on the Python pool
    real, real_split = _contract.parallel_for, _contract.run_split
    monkeypatch.setattr(_contract, "parallel_for", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    def split(*a, **k):
        done = real_split(*a, **k)
        if done:
            calls.append(len(a[4]) - 1)
        return done

    monkeypatch.setattr(_contract, "run_split", split)
    r2 = p2(A, B)
    assert (len(calls) == 1 and calls[0] >= 2) if cut else calls == []
    r1 = plan_contraction("mk,knp->mnp", A, B, policy=ONE)(A, B)
    np.testing.assert_array_equal(r1, r2)
    ref = np.einsum("mk,knp->mnp", A.astype(np.float64), B.astype(np.float64))
    np.testing.assert_allclose(r2, ref, rtol=0, atol=8 * n * np.finfo(dtype).eps * np.abs(ref).max())


_FORK_CHILD = """
import os, sys, threading
import numpy as np, threadpoolctl
import tuckerkit as tk
from tuckerkit.engine._policy import _PIN, blas_pinned
threadpoolctl.threadpool_limits(2)
inside, hold = threading.Event(), threading.Event()

def busy():
    with blas_pinned():
        inside.set()
        hold.wait(60)

t = threading.Thread(target=busy)
t.start()
inside.wait(60)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    counts = [c["num_threads"] for c in threadpoolctl.threadpool_info() if c["user_api"] == "blas"]
    with threadpoolctl.threadpool_limits(1):
        serial = tk.engine.default_policy().workers
    os.write(w, f"{_PIN.inside} {max(counts)} {serial}".encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 100).decode())
hold.set()
t.join()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_while_another_thread_is_inside_a_call_is_not_left_pinned():
    """The child inherited the other thread's pin (inside=1, BLAS held at one thread): its own calls stopped
    pinning (other bits), the counts never came back, and threadpool_limits(1) was ignored."""
    out = subprocess.run([sys.executable, "-c", _FORK_CHILD], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr
    inside, blas, serial = map(int, out.stdout.split())
    assert inside == 0 and blas == 2 and serial == 1, out.stdout


def test_a_call_at_interpreter_exit_runs_on_the_calling_thread():
    """An atexit hook's call (or a daemon thread's at exit) raised 'cannot schedule new futures after
    interpreter shutdown' from the worker pool whenever the policy had two workers."""
    code = ("import atexit, warnings, numpy as np, threadpoolctl, tuckerkit as tk\n"
            "warnings.simplefilter('ignore')\nthreadpoolctl.threadpool_limits(2)\n"
            "X = np.random.default_rng(0).standard_normal((120, 120, 120))\n"
            "ref = tk.hooi(X, 10, max_iter=1).fit\n"
            "atexit.register(lambda: print(tk.hooi(X, 10, max_iter=1).fit == ref))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]
