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

EPS = np.finfo(np.float64).eps

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


def _in_threads(body, n: int, timeout: float) -> None:
    """``body()`` on ``n`` threads at once; the first failure of any is raised here."""
    errors: list = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not errors, errors[0]


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
@pytest.mark.parametrize("most", [2, 4, 16])
def test_a_product_is_cut_into_at_most_the_machines_pieces(most, rng, monkeypatch):
    """The cut's count follows ``BLAS_MAX_PIECES`` (two a CPU; set here to each value a machine can have):
    the same pieces and bits for any workers, the product matches einsum."""
    from tuckerkit.engine import _contract
    from tuckerkit.engine._policy import split_points

    monkeypatch.setattr(_contract, "BLAS_MAX_PIECES", most)
    pieces: list[int] = []
    real = H._Handoff.run

    def counted(self, descs, workers):
        pieces.append(len(descs))
        return real(self, descs, workers)

    monkeypatch.setattr(H._Handoff, "run", counted)
    a = rng.standard_normal((1000, 300))
    b = rng.standard_normal((300, 200))
    got = {w: _run(a, b, np.empty((1000, 200)), w) for w in (1, 2, 3)}
    expected = len(split_points(1000, 2 * 1000 * 300 * 200, most)) - 1
    assert expected == most  # 120 MFlop: enough for 16 pieces of 1 MFlop, so the cap decides
    assert pieces == [most] * 3  # the same pieces for one, two and three workers
    for w in (2, 3):
        np.testing.assert_array_equal(got[w], got[1], err_msg=f"{w} workers")
    ref = a @ b
    np.testing.assert_allclose(got[1], ref, rtol=0, atol=4 * 300 * np.finfo(np.float64).eps * np.abs(ref).max())


@needs_helpers
def test_threads_sharing_the_helpers_get_the_sequential_bits(rng):
    """Several threads at once: one holds the helpers, the others run the same calls on the Python pool."""
    cases = _layouts(rng, np.float64)
    ref = [_run(a, b, c, 2) for _, a, b, c in cases]

    def run():
        for _ in range(3):
            for (name, a, b, c), r in zip(cases, ref, strict=True):
                np.testing.assert_array_equal(_run(a, b, c, 2), r, err_msg=name)

    _in_threads(run, 4, 120)


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


@needs_helpers
def test_prewake_wakes_a_sleeping_helper_without_a_round(rng):
    """``prewake`` lets a parked, sleeping helper run again before any round is published: it wakes (its count
    of wakes goes up), finds no round, spins, and sleeps again after its spin; nothing is published (the round
    counter stays); the next round's bits are unchanged."""
    a, b, c = _layouts(rng, np.float64)[0][1:]
    first = _run(a, b, c, 2)
    h = H._handoff()
    H.park()
    deadline = time.monotonic() + 5
    while H._load(h.hs, H._ASLEEP) != 1:
        assert time.monotonic() < deadline, "a parked helper did not go to sleep"
        time.sleep(1e-3)
    seq, wakes = H._load(h.ctrl, H._SEQ), H._load(h.hs, H._WAKES)
    H.prewake()
    assert H._load(h.ctrl, H._PARK) == 0
    deadline = time.monotonic() + 5
    while H._load(h.hs, H._WAKES) == wakes:
        assert time.monotonic() < deadline, "prewake did not wake the sleeping helper"
        time.sleep(1e-3)
    deadline = time.monotonic() + 5
    while H._load(h.hs, H._ASLEEP) != 1:  # (its spin over, with no round: asleep again)
        assert time.monotonic() < deadline, "a prewoken helper kept spinning"
        time.sleep(1e-3)
    assert H._load(h.ctrl, H._SEQ) == seq  # (no round)
    np.testing.assert_array_equal(_run(a, b, c, 2), first)


def test_a_contract_in_pieces_prewakes_the_helpers_and_a_small_one_does_not(rng, monkeypatch):
    """``contract`` starts waking the helpers for a plan that runs in pieces (before its output and the
    pieces' set-up), and leaves them alone for a product it runs in one call; the results are einsum's."""
    from tuckerkit.engine import contract, plan_contraction

    two = ExecutionPolicy(workers=2)
    contract("ik,kj->ij", np.ones((300, 300)), np.ones((300, 300)), policy=two)  # (the helpers' module loaded)
    calls = []
    monkeypatch.setattr(H, "prewake", lambda: calls.append(1))
    A, B = rng.standard_normal((300, 200)), rng.standard_normal((200, 300))
    p = plan_contraction("ik,kj->ij", A, B, policy=two)
    assert p.parallel
    tol = 200 * EPS * (np.abs(A) @ np.abs(B))
    assert np.all(np.abs(contract("ik,kj->ij", A, B, policy=two) - A @ B) <= tol)
    assert calls == [1]
    assert np.all(np.abs(p(A, B) - A @ B) <= tol)  # (a plan call: the bound route prewakes too)
    assert calls == [1, 1]
    a, b = rng.standard_normal((20, 30)), rng.standard_normal((30, 20))
    assert not plan_contraction("ik,kj->ij", a, b, policy=two).parallel
    contract("ik,kj->ij", a, b, policy=two)
    assert calls == [1, 1]


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


# ---------------------------------------------------------------------------------------------------
# the compiled small-rank kernels' pieces on the helpers (tuckerkit.engine._smallgemm._run_tiles)
# ---------------------------------------------------------------------------------------------------
def _kernel_cases(rng, dtype):
    """(name, call) of every kernel the helpers take: the inner kernel (plain, and summed against W), the
    outer dot-product, transposed-tile and register-blocked kernels; each call returns the result of the given
    policy."""
    from tuckerkit.engine import _smallgemm as sg

    X3 = rng.standard_normal((3, 97, 5003)).astype(dtype)  # odd extents: tiles with ragged ends
    X1 = rng.standard_normal((1, 120, 20000)).astype(dtype)  # a first mode: long rows
    U10, U32 = (rng.standard_normal((97, r)).astype(dtype) for r in (10, 32))
    V32 = rng.standard_normal((120, 32)).astype(dtype)
    W = rng.standard_normal((5003, 10)).astype(dtype)
    X2 = rng.standard_normal((9999, 77)).astype(dtype)
    Ut2, Ut8, Ut24 = (rng.standard_normal((r, 77)).astype(dtype) for r in (2, 8, 24))

    def inner(X, U):
        def call(policy):
            Y = np.full((X.shape[0], U.shape[1], X.shape[2]), np.nan, dtype)
            sg.ttm_inner(X, U, Y, policy)
            return Y
        return call

    def outer(Ut):
        def call(policy):
            Y = np.full((Ut.shape[0], X2.shape[0]), np.nan, dtype)
            sg.ttm_outer(X2, Ut, Y, policy)
            return Y
        return call

    refs = {
        "inner R=10": np.einsum("aic,ir->arc", X3.astype(np.float64), U10.astype(np.float64)),
        "inner R=32": np.einsum("aic,ir->arc", X3.astype(np.float64), U32.astype(np.float64)),
        "inner, long rows": np.einsum("aic,ir->arc", X1.astype(np.float64), V32.astype(np.float64)),
        "inner summed against W": np.einsum("aic,ir,cr->ar", X3.astype(np.float64), U10.astype(np.float64),
                                            W.astype(np.float64)),
        "outer, dot products": Ut2.astype(np.float64) @ X2.T.astype(np.float64),
        "outer, R = 8 (transposed tiles where vectors are wide)": Ut8.astype(np.float64) @ X2.T.astype(np.float64),
        "outer, register blocks": Ut24.astype(np.float64) @ X2.T.astype(np.float64),
    }
    calls = {
        "inner R=10": inner(X3, U10),
        "inner R=32": inner(X3, U32),
        "inner, long rows": inner(X1, V32),
        "inner summed against W": lambda policy: sg.ttm_inner_dot(X3, U10, W, policy),
        "outer, dot products": outer(Ut2),
        "outer, R = 8 (transposed tiles where vectors are wide)": outer(Ut8),
        "outer, register blocks": outer(Ut24),
    }
    return [(name, calls[name], refs[name]) for name in calls]


@needs_helpers
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_kernels_pieces_on_the_helpers_give_the_pools_bits(dtype, rng, monkeypatch):
    """Each compiled kernel cut in pieces runs them on the helpers (a compiled call by address each), with the
    bits of the Python pool, of one worker and of three, and matches a float64 einsum."""
    from tuckerkit.engine import _smallgemm as sg

    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)  # (small enough to run in a moment, cut all the same)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 1_000_000)
    rounds: list[tuple[int, int]] = []
    real = H._Handoff.run_kernels

    def counted(self, rows, workers):
        rounds.append((rows.shape[0], workers))
        return real(self, rows, workers)

    for name, call, ref in _kernel_cases(rng, dtype):
        rounds.clear()
        with monkeypatch.context() as m:
            m.setattr(H._Handoff, "run_kernels", counted)
            helpers = call(ExecutionPolicy(workers=2))
        assert rounds and rounds[0][0] >= 2 and rounds[0][1] == 2, name  # cut, and taken by the helpers
        with monkeypatch.context() as m:
            m.setattr(H, "_handoff", lambda: None)
            pool = call(ExecutionPolicy(workers=2))
        np.testing.assert_array_equal(helpers, pool, err_msg=name)
        for w in (1, 3):
            np.testing.assert_array_equal(call(ExecutionPolicy(workers=w)), pool, err_msg=f"{name}: {w} workers")
        length = {"inner summed against W": 97 * 5003, "inner, long rows": 120}.get(name, 97 if "inner" in name
                                                                                   else 77)
        scale = np.abs(ref).max()
        np.testing.assert_allclose(helpers, ref, rtol=0, atol=4 * length * np.finfo(dtype).eps * scale, err_msg=name)


@needs_helpers
def test_a_kernel_the_helpers_cannot_call_runs_on_the_pool(rng, monkeypatch):
    """A stand-in that is no numba dispatcher, an unaligned operand, and helpers busy with another thread's
    round: each runs on the Python pool, with the same bits."""
    from tuckerkit.engine import _smallgemm as sg

    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 1_000_000)
    _, call, _ = _kernel_cases(rng, np.float64)[1]  # inner R=32
    ref = call(ExecutionPolicy(workers=2))
    rounds: list[int] = []
    real = H._Handoff.run_kernels
    monkeypatch.setattr(H._Handoff, "run_kernels", lambda self, rows, w: rounds.append(1) or real(self, rows, w))
    kernel = sg._inner_kernel
    monkeypatch.setattr(sg, "_inner_kernel", lambda *args: kernel(*args))  # a Python stand-in
    np.testing.assert_array_equal(call(ExecutionPolicy(workers=2)), ref)
    assert rounds == []
    monkeypatch.setattr(sg, "_inner_kernel", kernel)
    h = H._handoff()
    with h.lock:  # another thread's round holds the helpers
        np.testing.assert_array_equal(call(ExecutionPolicy(workers=2)), ref)
    assert rounds == []
    np.testing.assert_array_equal(call(ExecutionPolicy(workers=2)), ref)
    assert rounds == [1]
    # an operand whose elements are not aligned to their size: another numba overload, so the pool
    X = rng.standard_normal((2, 50, 4001))
    raw = np.empty(X.nbytes + 1, np.uint8)
    Xu = np.frombuffer(raw.data, dtype=np.float64, count=X.size, offset=1).reshape(X.shape)
    Xu[...] = X
    assert not Xu.flags.aligned
    U = rng.standard_normal((50, 32))
    Y, Yu = np.empty((2, 32, 4001)), np.empty((2, 32, 4001))
    rounds.clear()
    sg.ttm_inner(Xu, U, Yu, ExecutionPolicy(workers=2))
    assert rounds == []
    sg.ttm_inner(X, U, Y, ExecutionPolicy(workers=2))
    assert rounds == [1]
    np.testing.assert_array_equal(Yu, Y)
    # U transposed given in F order to the dot-product kernel: the rows describe C arrays only, so the pool (and
    # another overload, whose vectorized dot products round differently: ttm_outer's callers pass C arrays)
    X2 = rng.standard_normal((9999, 77))
    Ut = rng.standard_normal((2, 77))  # (R = 2: the dot products where the row-dot kernel is not taken)
    monkeypatch.setattr(sg, "outer_vdot_style", lambda R, itemsize, length: False)
    assert not sg.outer_gemm_style(2, 8) and not sg.outer_tr_style(2, 8)
    Z, Zf = np.empty((2, 9999)), np.empty((2, 9999))
    rounds.clear()
    sg.ttm_outer(X2, np.asfortranarray(Ut), Zf, ExecutionPolicy(workers=2))
    assert rounds == []
    sg.ttm_outer(X2, Ut, Z, ExecutionPolicy(workers=2))
    assert rounds == [1]
    np.testing.assert_allclose(Zf, Z, rtol=0, atol=4 * 77 * np.finfo(np.float64).eps * np.abs(Z).max())


@needs_helpers
def test_a_kernel_address_is_its_c_wrapper_kept_by_dtype(rng):
    """The address is the overload's C wrapper (loaded or compiled by a call over no tiles), the same on every
    call; a function that is no dispatcher has none."""
    from tuckerkit.engine import _smallgemm as sg

    X = rng.standard_normal((1, 40, 3000))
    U = rng.standard_normal((40, 10))
    Y = np.empty((1, 10, 3000))
    got: dict[str, list] = {}
    real = H.kernel_address

    def spy(disp, args, lohi):
        got.setdefault("args", []).append((disp, list(args), lohi))
        return real(disp, args, lohi)

    import unittest.mock

    with unittest.mock.patch.object(H, "kernel_address", spy), \
            unittest.mock.patch.object(sg, "KERNEL_PARALLEL_FLOPS", 0), \
            unittest.mock.patch.object(sg, "KERNEL_PIECE_FLOPS", 100_000):
        sg.ttm_inner(X, U, Y, ExecutionPolicy(workers=2))
    disp, args, lohi = got["args"][0]
    a1, a2 = H.kernel_address(disp, args, lohi), H.kernel_address(disp, args, lohi)
    assert isinstance(a1, int) and a1 > 0 and a1 == a2
    assert disp.__dict__["_tuckerkit_cwrap"]["d"] == a1
    assert H.kernel_address(lambda *a: None, args, lohi) is None
    np.testing.assert_allclose(Y[0], U.T @ X[0], rtol=0, atol=160 * np.finfo(np.float64).eps * np.abs(Y).max())


@needs_helpers
def test_threads_calling_the_kernels_at_once_get_the_sequential_bits(rng, monkeypatch):
    """Four threads running the kernels at once: one round at a time holds the helpers, the other calls take the
    Python pool meanwhile; every result has the bits of the same call made alone."""
    from tuckerkit.engine import _smallgemm as sg

    monkeypatch.setattr(sg, "KERNEL_PARALLEL_FLOPS", 0)
    monkeypatch.setattr(sg, "KERNEL_PIECE_FLOPS", 1_000_000)
    cases = _kernel_cases(rng, np.float64)
    ref = [call(ExecutionPolicy(workers=2)) for _, call, _ in cases]
    rounds: list[int] = []
    real = H._Handoff.run_kernels
    monkeypatch.setattr(H._Handoff, "run_kernels", lambda self, rows, w: rounds.append(1) or real(self, rows, w))

    def run() -> None:
        for _ in range(3):
            for (name, call, _), r in zip(cases, ref, strict=True):
                np.testing.assert_array_equal(call(ExecutionPolicy(workers=2)), r, err_msg=name)

    _in_threads(run, 4, 300)
    assert 0 < len(rounds) <= 4 * 3 * len(cases)  # the helpers took some of the calls, never more than all


def test_spinning_reads_the_park_word_and_each_helpers_sleep_flag():
    """``_spinning``: the first n helpers awake and none parked; a parked pool, or any of those n asleep, is not
    (a helper beyond the n asked about does not count)."""
    ctrl = np.zeros(8 * 7, np.int64)
    hs = np.zeros(8 * 4, np.int64)
    assert H._spinning(ctrl, hs, 3) and H._spinning(ctrl, hs, 0)
    hs[2 * 8 + H._ASLEEP] = 1
    assert not H._spinning(ctrl, hs, 3) and H._spinning(ctrl, hs, 2)
    hs[2 * 8 + H._ASLEEP] = 0
    ctrl[H._PARK] = 1
    assert not H._spinning(ctrl, hs, 3) and not H._spinning(ctrl, hs, 0)


@needs_helpers
def test_helpers_spinning_is_false_for_one_worker_and_for_parked_helpers(rng):
    a, b, c = _layouts(rng, np.float64)[0][1:]
    _run(a, b, c, 2)
    h = H._handoff()
    assert not H.helpers_spinning(None) and not H.helpers_spinning(ExecutionPolicy(workers=1))
    H.park()
    deadline = time.monotonic() + 5
    while H._load(h.hs, H._ASLEEP) != 1:
        assert time.monotonic() < deadline, "a parked helper did not go to sleep"
        time.sleep(1e-3)
    assert not H.helpers_spinning(ExecutionPolicy(workers=2))
    H.prewake()  # (awake again: not parked, the flag cleared once it runs)
    deadline = time.monotonic() + 5
    while H._load(h.hs, H._ASLEEP) != 0 and time.monotonic() < deadline:
        pass
    assert H._load(h.ctrl, H._PARK) == 0


@needs_helpers
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_small_compiled_call_is_cut_in_two_only_while_the_helpers_are_awake(dtype, rng, monkeypatch):
    """A compiled TTM of ``WARM_SPLIT_FLOPS`` to ``KERNEL_PARALLEL_FLOPS`` (HOOI's small projections of 200^3
    at rank 10: 8 MFlop; inner kernels with one long and many short rows, the unit-stride kernel) runs in two
    pieces on the helpers while they are awake and whole on the caller while they sleep, through a plan's
    launch and through the kernel's own entry alike: the same bits each way, as one worker's, and einsum's
    values within the dtype's bound. Below ``WARM_SPLIT_FLOPS``, or on one worker, always whole."""
    from tuckerkit.engine import _contract as contract_mod
    from tuckerkit.engine import _smallgemm as sg
    from tuckerkit.engine import ttm_plan

    assert sg.WARM_SPLIT_FLOPS <= 8_000_000 < sg.KERNEL_PARALLEL_FLOPS
    rounds: list[int] = []
    real = H._Handoff.run_kernels
    monkeypatch.setattr(H._Handoff, "run_kernels", lambda self, rows, w: rounds.append(rows.shape[0])
                        or real(self, rows, w))
    awake = [True]
    monkeypatch.setattr(H, "helpers_spinning", lambda policy: awake[0] and policy is not None
                        and policy.workers >= 2)
    contract_mod._cached_plan.cache_clear()
    U = rng.standard_normal((200, 10)).astype(dtype)
    for shape, mode in (((200, 200, 10), 1), ((200, 10, 200), 0), ((10, 200, 200), 2), ((10, 200, 200), 1)):
        X = rng.standard_normal(shape).astype(dtype)
        plan = ttm_plan(X, U, mode, transpose=True)
        assert plan.compiled is not sg.CompiledKernel.NONE, plan.explain()
        ref = np.moveaxis(np.tensordot(U.T.astype(np.float64), X.astype(np.float64), axes=(1, mode)), 0, mode)
        out = {}
        for state in (True, False, True):  # (the launch made awake at the first call, then asleep, then awake)
            awake[0] = state
            rounds.clear()
            out[state] = plan(X, U)
            assert rounds == ([2] if state else []), (shape, mode, state)
        np.testing.assert_array_equal(out[True], out[False], err_msg=f"{shape} mode {mode}")
        bound = 4 * 200 * np.finfo(dtype).eps * np.abs(ref).max()
        np.testing.assert_allclose(out[True], ref, rtol=0, atol=bound)
    # the kernel's own entry (no plan): cut in two awake, whole asleep, one worker's bits either way
    X3 = rng.standard_normal((200, 200, 10)).astype(dtype)
    one = np.empty((200, 10, 10), dtype)
    sg.ttm_inner(X3, U, one, ExecutionPolicy(workers=1))
    for state in (True, False):
        awake[0] = state
        rounds.clear()
        Y = np.full((200, 10, 10), np.nan, dtype)
        sg.ttm_inner(X3, U, Y, ExecutionPolicy(workers=2))
        assert rounds == ([2] if state else [])
        np.testing.assert_array_equal(Y, one)
    # below WARM_SPLIT_FLOPS (3.2 MFlop), or one worker: whole, awake or not
    awake[0] = True
    small = rng.standard_normal((80, 200, 10)).astype(dtype)
    rounds.clear()
    sg.ttm_inner(small, U, np.empty((80, 10, 10), dtype), ExecutionPolicy(workers=2))
    sg.ttm_inner(X3, U, np.empty((200, 10, 10), dtype), ExecutionPolicy(workers=1))
    assert rounds == []
    contract_mod._cached_plan.cache_clear()
