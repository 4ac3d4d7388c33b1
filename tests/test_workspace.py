"""The sweeps' workspace (engine/_workspace.py): large temporaries of one decomposition call come from blocks it
keeps, a block is handed out again only when nothing references it or any view of it, at most one idle block
is kept, and HOOI's sweeps give the same bits with it as without it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tuckerkit as tk
from tuckerkit.engine import ExecutionPolicy, as_operand
from tuckerkit.engine import _workspace as W

pytestmark = pytest.mark.skipif(not W.supported(), reason="a free-threaded Python has no workspace")


def test_a_block_is_handed_out_again_only_when_no_view_of_it_is_alive():
    ws = W.Workspace()
    a = ws.empty((10, 12), np.float64)
    assert a.shape == (10, 12) and a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable
    views = [a.T, a.reshape(120)[5:], a[::2].view(np.int64)]
    del a
    for v in views:  # any view keeps its block in use: the next request maps a new one
        b = ws.empty((10, 12), np.float64)
        assert len(ws.blocks) == 2 and not np.shares_memory(b, v)
        del b
        ws.blocks.pop()  # (forget the new block: only the view holds the first)
    del v, views
    c = ws.empty((6, 20), np.float64)  # nothing holds the block: the same memory, another shape
    assert len(ws.blocks) == 1 and c.base is ws.blocks[0] and c.shape == (6, 20)


def test_a_request_takes_the_smallest_idle_block_of_one_to_two_times_its_bytes():
    ws = W.Workspace()
    big, mid = ws.empty((1000,), np.float64), ws.empty((600,), np.float64)
    del big, mid
    x = ws.empty((500,), np.float64)  # 4000 bytes: 8000 and 4800 both fit, the smaller is taken
    assert x.base is ws.blocks[1]
    y = ws.empty((300,), np.float32)  # 1200 bytes: 8000 is more than twice that, so a new block
    assert len(ws.blocks) == 3 and ws.blocks[2].nbytes == 1200 and y.base is ws.blocks[2]
    z = ws.empty((1200,), np.float64)  # 9600 bytes: no block is that large
    assert len(ws.blocks) == 4 and z.base is ws.blocks[3]
    assert ws.held_bytes() == 8000 + 4800 + 1200 + 9600


def test_a_copy_or_pickle_of_a_workspace_starts_empty():
    import copy
    import pickle

    ws = W.Workspace()
    a = ws.empty((100,), np.float64)
    for other in (pickle.loads(pickle.dumps(ws)), copy.deepcopy(ws)):
        assert other.blocks == [] and other.held_bytes() == 0
        b = other.empty((100,), np.float64)
        assert not np.shares_memory(a, b) and len(other.blocks) == 1


def test_trim_keeps_the_blocks_in_use_and_the_largest_idle_one():
    ws = W.Workspace()
    a = ws.empty((100,), np.float64)
    b = ws.empty((300,), np.float64)
    c = ws.empty((200,), np.float64)
    del b, c
    ws.trim()
    assert [blk.nbytes for blk in ws.blocks] == [800, 2400] and a.base is ws.blocks[0]
    a[:] = 7.0  # still its caller's
    del a
    ws.trim()
    assert [blk.nbytes for blk in ws.blocks] == [2400]


def test_only_large_arrays_on_the_activating_thread_come_from_the_workspace(monkeypatch):
    monkeypatch.setattr(W, "MIN_BYTES", 1024)
    ws = W.Workspace()
    assert W.active() is None and W.empty((200,), np.float64).base is None
    seen = {}
    with W.using(ws):
        assert W.active() is ws
        big = W.empty((200,), np.float64)  # 1600 bytes
        small = W.empty((100,), np.float64)  # 800 bytes: numpy's
        with W.using(None):
            assert W.empty((200,), np.float64).base is None
        assert W.active() is ws  # restored after the inner block

        def other():
            seen["ws"], seen["base"] = W.active(), W.empty((200,), np.float64).base

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert W.active() is None
    assert big.base is ws.blocks[0] and small.base is None and len(ws.blocks) == 1
    assert seen == {"ws": None, "base": None}


def _hooi_sweeps(X, factors, n_sweeps, keep=None):
    """``n_sweeps`` HOOI sweeps on one operand (one call's plan cache and workspace), each leaf's factor
    replaced by its leading left singular vectors; ``keep``: a dict the leaf partials are kept in."""
    op = as_operand(X)
    F = [f.copy() for f in factors]

    def update(n, Y):
        M = np.moveaxis(np.asarray(Y), n, 0).reshape(Y.shape[n], -1)
        F[n] = np.linalg.svd(M, full_matrices=False)[0][:, : F[n].shape[1]]
        if keep is not None:
            keep.setdefault(n, []).append((Y, np.array(Y)))

    for _ in range(n_sweeps):
        op.ttmc_sweep(F, update, policy=ExecutionPolicy(workers=2))
    return F, op


@pytest.mark.parametrize("shape", [(14, 12, 10, 9), (20, 18, 16), (8, 9, 10, 11, 7)])
def test_hooi_sweeps_draw_their_projections_from_the_workspace_with_the_same_bits(shape, rng, monkeypatch,
                                                                                  planned_sweeps):
    X = rng.standard_normal(shape)
    X0 = X.copy()
    factors = [np.linalg.qr(rng.standard_normal((n, 3)))[0] for n in shape]
    monkeypatch.setattr(W, "MIN_BYTES", 1 << 62)
    off, op_off = _hooi_sweeps(X, factors, 3)
    assert "workspace" not in op_off._sweep_plans or not op_off._sweep_plans["workspace"].blocks
    monkeypatch.setattr(W, "MIN_BYTES", 1)  # every projection from the workspace
    on, op_on = _hooi_sweeps(X, factors, 3)
    ws = op_on._sweep_plans["workspace"]
    assert ws.blocks and sum(ws._idle(i) for i in range(len(ws.blocks))) <= 1  # trimmed after the sweep
    for a, b in zip(off, on, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(X, X0)
    # the projections themselves are einsum's (the first sweep's first leaf, from the starting factors)
    ref = np.einsum(X, list(range(len(shape))), *[a for m in range(1, len(shape)) for a in (factors[m], [m, 10 + m])],
                    [0, *(10 + m for m in range(1, len(shape)))])
    got = {}
    _hooi_sweeps(X, factors, 1, got)
    np.testing.assert_allclose(got[0][0][1], ref, rtol=0, atol=64 * np.finfo(np.float64).eps * np.abs(X).sum())


def test_a_partial_kept_by_the_caller_is_never_written_again(rng, monkeypatch, planned_sweeps):
    monkeypatch.setattr(W, "MIN_BYTES", 1)
    X = rng.standard_normal((16, 14, 12, 10))
    factors = [np.linalg.qr(rng.standard_normal((n, 4)))[0] for n in X.shape]
    kept: dict = {}
    _hooi_sweeps(X, factors, 4, kept)
    assert sum(len(v) for v in kept.values()) == 4 * X.ndim
    for pairs in kept.values():
        for Y, copy in pairs:
            np.testing.assert_array_equal(Y, copy)


def test_hooi_from_the_public_call_is_the_same_with_and_without_the_workspace(rng, monkeypatch, planned_sweeps):
    X = rng.standard_normal((24, 20, 18, 16))
    monkeypatch.setattr(W, "MIN_BYTES", 1 << 62)
    with pytest.warns(tk.ConvergenceWarning, match=r"^hooi reached max_iter=5"):
        a = tk.hooi(X, 4, max_iter=5, tol=0)
    monkeypatch.setattr(W, "MIN_BYTES", 1)
    with pytest.warns(tk.ConvergenceWarning, match=r"^hooi reached max_iter=5"):
        b = tk.hooi(X, 4, max_iter=5, tol=0)
    np.testing.assert_array_equal(a.core, b.core)
    for fa, fb in zip(a.factors, b.factors, strict=True):
        np.testing.assert_array_equal(fa, fb)
