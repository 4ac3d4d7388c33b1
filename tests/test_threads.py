"""The CPU threading policy: every BLAS library held to one thread inside tuckerkit, dynamically scheduled
splits that compute the same products, and a fall-back to one thread when other processes hold the CPUs."""

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from tuckerkit import contract, hooi
from tuckerkit.engine import _threads as th


def _blas_threads():
    return {d["filepath"]: d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}


@pytest.fixture
def two_free_cpus(monkeypatch):
    """Pretend the machine is idle with two CPUs, so the parallel paths run whatever the CI load is."""
    monkeypatch.setattr(th, "free_cpus", lambda: 2)
    with threadpool_limits(2, user_api="blas"):
        yield


def test_single_threaded_blas_holds_every_blas_library(two_free_cpus):
    import scipy.linalg  # noqa: F401  (scipy's wheel brings its own OpenBLAS)

    before = _blas_threads()
    assert len(before) >= 1 and set(before.values()) == {2}
    with th.single_threaded_blas():
        assert set(_blas_threads().values()) == {1}
        with th.single_threaded_blas():  # re-entrant
            assert set(_blas_threads().values()) == {1}
        assert th.workers() == 2
    assert _blas_threads() == before


@pytest.mark.parametrize("n_items", [1, 2, 7, 50])
def test_dynamic_for_runs_each_item_once(two_free_cpus, n_items):
    seen, lock = [], threading.Lock()

    def work(i, state):
        state.append(i)
        with lock:
            seen.append(i)

    with th.single_threaded_blas():
        states = th.dynamic_for(work, n_items, list)
    assert sorted(seen) == list(range(n_items))
    assert sorted(i for st in states for i in st) == list(range(n_items))
    assert 1 <= len(states) <= 2


def test_dynamic_for_propagates_errors(two_free_cpus):
    def work(i, _):
        if i == 3:
            raise ValueError("item 3 failed")

    with th.single_threaded_blas(), pytest.raises(ValueError, match="item 3 failed"):
        th.dynamic_for(work, 8)


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("bik,bkj->bij", [(40, 60, 50), (40, 50, 70)]),  # batch blocks
        ("ibk,bkj->bij", [(60, 40, 50), (40, 50, 70)]),  # batch blocks on a strided operand
        ("mk,nkp->mnp", [(64, 64), (64, 64, 64)]),  # strided batch with a shared operand
    ],
)
def test_split_products_match_numpy(two_free_cpus, spec, shapes, rng):
    A, B = (rng.standard_normal(s) for s in shapes)
    th._STATE["eff"] = [0.0, 0.0]
    with th.single_threaded_blas():
        res = contract(spec, A, B)
    assert th._STATE["eff"][0] > 0, "the batch was not split"
    ref = np.einsum(spec, A, B)
    k = A.shape[-1]
    np.testing.assert_allclose(res, ref, rtol=0, atol=8 * k * np.finfo(np.float64).eps * np.abs(ref).max())


def test_busy_machine_runs_on_one_thread(monkeypatch):
    monkeypatch.setattr(th, "_running_elsewhere", lambda: 64)
    th._STATE.pop("free", None)
    with threadpool_limits(2, user_api="blas"), th.single_threaded_blas():
        assert th.free_cpus() == 1 and th.workers() == 1
    th._STATE.pop("free", None)


def test_free_cpus_is_within_the_cpu_count():
    th._STATE.pop("free", None)
    assert 1 <= th.free_cpus() <= (len(__import__("os").sched_getaffinity(0)))


def test_one_large_gemm_uses_blas_threads(two_free_cpus, rng):
    A, B = rng.standard_normal((400, 300)), rng.standard_normal((300, 200))
    seen = []
    lib = th._blas()
    orig = lib.set_num_threads
    lib.set_num_threads = lambda n: (seen.append(n), orig(n))[1]
    try:
        with th.single_threaded_blas():
            res = contract("ik,kj->ij", A, B)
    finally:
        lib.set_num_threads = orig
    assert 2 in seen and seen[-1] != 2  # raised for the call, lowered after
    np.testing.assert_allclose(res, A @ B, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")
def test_hooi_same_answer_serial_and_threaded(two_free_cpus, rng):
    X = rng.standard_normal((60, 50, 40))
    T2 = hooi(X, (5, 5, 5), tol=0, max_iter=3)
    with threadpool_limits(1, user_api="blas"):
        T1 = hooi(X, (5, 5, 5), tol=0, max_iter=3)
    assert abs(T1.fit - T2.fit) < 1e-12
    np.testing.assert_allclose(np.abs(T1.core), np.abs(T2.core), rtol=1e-8, atol=1e-10)


def test_dynamic_for_stops_all_threads_on_error(two_free_cpus):
    done, lock = [], threading.Lock()

    def work(i, _):
        if i == 0:
            raise RuntimeError("first item failed")
        threading.Event().wait(0.001)  # 1000 items take a second; the failure comes first
        with lock:
            done.append(i)

    with th.single_threaded_blas(), pytest.raises(RuntimeError, match="first item failed"):
        th.dynamic_for(work, 1000)
    seen = len(done)
    assert seen < 500  # the others stopped taking items
    threading.Event().wait(0.05)
    assert len(done) == seen  # and nothing runs after the call returned
