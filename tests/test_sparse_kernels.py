"""MTTKRP kernels of CSF trees: the nested-loop kernels of 3 to 6 levels agree bit for bit with the generic
walk and with a dense einsum oracle, for every output level, and the result does not depend on the threads."""

import string
from pathlib import Path

import numpy as np
import pytest

from tuckerkit.engine import ExecutionPolicy
from tuckerkit.sparse import COOTensor, CSFTensor


def _tensor(shape, nnz, seed):
    rng = np.random.default_rng(seed)
    coords = np.stack([rng.integers(0, s, nnz) for s in shape], axis=1)
    return COOTensor(coords, rng.standard_normal(nnz), shape)


def test_generated_file_is_current():
    from tuckerkit.sparse import _make_nested

    path = Path(_make_nested.__file__).with_name("_nested.py")
    assert path.read_text() == _make_nested.source(), "run python -m tuckerkit.sparse._make_nested"


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_nested_kernels_match_the_generic_walk_bitwise(n):
    from tuckerkit.sparse._kernels import mttkrp_level, mttkrp_root
    from tuckerkit.sparse._mttkrp import _pack_levels, _packed_tree, balanced_roots
    from tuckerkit.sparse._nested import KERNELS

    shape = (5, 4, 6, 3, 4, 2)[:n]
    X = _tensor(shape, 150, n)
    C = CSFTensor(X, order=tuple(range(n))[::-1])
    rng = np.random.default_rng(0)
    factors = [rng.standard_normal((s, 3)) for s in shape]
    pos_all, pos_off, idx_all, idx_off = _packed_tree(C)
    dense = X.to_dense()
    letters = string.ascii_lowercase[:n]
    for level in range(n):
        mode = C.order[level]
        F_all, F_off = _pack_levels(C, factors, level, 3, np.float64)
        bounds = balanced_roots(C, 3)
        if level == 0:
            want = np.zeros((shape[mode], 3))
            got = np.zeros((shape[mode], 3))
            mttkrp_root(pos_all, pos_off, idx_all, idx_off, C.values, F_all, F_off, n, bounds, want)
        else:
            want = np.zeros((len(bounds) - 1, shape[mode], 3))
            got = np.zeros_like(want)
            mttkrp_level(pos_all, pos_off, idx_all, idx_off, C.values, F_all, F_off, n, level, bounds, want)
        KERNELS[(n, level)](pos_all, pos_off, idx_all, idx_off, C.values, F_all, F_off, bounds, got)
        assert got.tobytes() == want.tobytes(), f"level {level}"
        total = got if level == 0 else got.sum(axis=0)
        spec = ",".join([letters] + [f"{c}r" for i, c in enumerate(letters) if i != mode]) + f"->{letters[mode]}r"
        oracle = np.einsum(spec, dense, *[factors[m] for m in range(n) if m != mode])
        eps = np.finfo(np.float64).eps
        np.testing.assert_allclose(total, oracle, rtol=0, atol=200 * eps * np.abs(oracle).max())


@pytest.mark.parametrize("kind", ["one", "two", "all"])
@pytest.mark.parametrize("n", [3, 5, 6, 7])
def test_sparse_mttkrp_same_bits_for_any_threads(kind, n):
    from tuckerkit.sparse._mttkrp import sparse_mttkrp

    shape = (6, 5, 7, 4, 3, 5, 2)[:n]
    X = _tensor(shape, 400, 10 + n)
    X.plan(csf=kind)
    rng = np.random.default_rng(1)
    factors = [rng.standard_normal((s, 4)) for s in shape]
    for mode in range(n):
        a = sparse_mttkrp(X, factors, mode, ExecutionPolicy(1))
        b = sparse_mttkrp(X, factors, mode, ExecutionPolicy(2))
        assert a.tobytes() == b.tobytes()
        letters = string.ascii_lowercase[:n]
        spec = ",".join([letters] + [f"{c}r" for i, c in enumerate(letters) if i != mode]) + f"->{letters[mode]}r"
        oracle = np.einsum(spec, X.to_dense(), *[factors[m] for m in range(n) if m != mode])
        np.testing.assert_allclose(a, oracle, rtol=0, atol=200 * np.finfo(float).eps * np.abs(oracle).max())


def _oracle(X, factors, mode):
    n = X.ndim
    letters = string.ascii_lowercase[:n]
    spec = ",".join([letters] + [f"{c}r" for i, c in enumerate(letters) if i != mode]) + f"->{letters[mode]}r"
    return np.einsum(spec, X.to_dense().astype(np.float64), *[factors[m].astype(np.float64) for m in range(n)
                                                             if m != mode])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("R", [16, 32])
@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_blocked_root_kernel_matches_the_loop_form_bitwise(n, R, dtype):
    """The column-blocked root kernel: same bits as the loop form (empty slices and fibers, one-leaf
    fibers and long fibers, odd sizes), and the einsum oracle."""
    from tuckerkit.sparse._mttkrp import _pack_levels, _packed_tree, balanced_roots, level_factors, slp_vectorize
    from tuckerkit.sparse._nested import BLOCKED_ROOT, KERNELS

    shape = (7, 5, 9, 3, 2, 3)[:n]
    rng = np.random.default_rng(n + R)
    # a few long fibers (one slice and one fiber dense) beside scattered single nonzeros; slices 1 and 4 empty
    dense_part = np.stack(np.meshgrid(*[[2]] + [np.arange(s) for s in shape[1:]], indexing="ij"), -1).reshape(-1, n)
    scattered = np.stack([rng.choice([0, 3, 5, 6], 40)] + [rng.integers(0, s, 40) for s in shape[1:]], axis=1)
    coords = np.concatenate([dense_part, scattered])
    X = COOTensor(coords, rng.standard_normal(len(coords)).astype(dtype), shape)
    factors = [rng.standard_normal((s, R)).astype(dtype) for s in shape]
    for mode in range(n):
        C = CSFTensor(X, order=(mode, *[m for m in range(n) if m != mode]))
        pos_all, pos_off, idx_all, idx_off = _packed_tree(C)
        F_all, F_off = _pack_levels(C, factors, 0, R, dtype)
        bounds = balanced_roots(C, 3)
        want = np.zeros((shape[mode], R), dtype)
        got = np.zeros_like(want)
        KERNELS[(n, 0)](pos_all, pos_off, idx_all, idx_off, C.values, F_all, F_off, bounds, want)
        with slp_vectorize():
            BLOCKED_ROOT[n](pos_all, pos_off, idx_all, idx_off, C.values, level_factors(C, factors, 0, R, dtype),
                            bounds, got)
        assert got.tobytes() == want.tobytes(), f"mode {mode}"
        oracle = _oracle(X, factors, mode)
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got, oracle, rtol=0, atol=200 * eps * np.abs(oracle).max())


@pytest.mark.parametrize("R", [16, 32])
@pytest.mark.parametrize(("n", "dtype"), [(3, np.float32), (3, np.float64), (4, np.float32), (4, np.float64),
                                          (5, np.float64), (6, np.float64)])  # (float32 at 5-6: compile time)
def test_blocked_level_kernels_match_the_loop_form_bitwise(n, R, dtype):
    """The column-blocked internal- and leaf-level kernels (every output level below the root of 3- to
    6-level trees): the same bits as the loop form, part by part, on trees with empty slices, one-leaf fibers
    and long fibers, and the einsum oracle once the parts are added."""
    from tuckerkit.sparse._mttkrp import _pack_levels, _packed_tree, balanced_roots, level_factors, slp_vectorize
    from tuckerkit.sparse._nested import BLOCKED_LEVEL, KERNELS

    assert sorted(BLOCKED_LEVEL) == [(k, L) for k in range(3, 7) for L in range(1, k)]
    shape = (7, 5, 9, 3, 2, 3)[:n]
    rng = np.random.default_rng(n + R + 1)
    dense_part = np.stack(np.meshgrid(*[[2]] + [np.arange(s) for s in shape[1:]], indexing="ij"), -1).reshape(-1, n)
    scattered = np.stack([rng.choice([0, 3, 5, 6], 40)] + [rng.integers(0, s, 40) for s in shape[1:]], axis=1)
    coords = np.concatenate([dense_part, scattered])
    X = COOTensor(coords, rng.standard_normal(len(coords)).astype(dtype), shape)
    factors = [rng.standard_normal((s, R)).astype(dtype) for s in shape]
    C = CSFTensor(X, order=tuple(range(n)))
    pos_all, pos_off, idx_all, idx_off = _packed_tree(C)
    bounds = balanced_roots(C, 3)
    for level in range(1, n):
        F_all, F_off = _pack_levels(C, factors, level, R, dtype)
        want = np.zeros((len(bounds) - 1, shape[level], R), dtype)
        got = np.zeros_like(want)
        KERNELS[(n, level)](pos_all, pos_off, idx_all, idx_off, C.values, F_all, F_off, bounds, want)
        with slp_vectorize():
            BLOCKED_LEVEL[(n, level)](pos_all, pos_off, idx_all, idx_off, C.values,
                                      level_factors(C, factors, level, R, dtype), bounds, got)
        assert got.tobytes() == want.tobytes(), f"level {level}"
        oracle = _oracle(X, factors, level)
        np.testing.assert_allclose(got.sum(axis=0), oracle, rtol=0, atol=200 * np.finfo(dtype).eps
                                   * np.abs(oracle).max())


@pytest.mark.parametrize("kind", ["one", "two"])
@pytest.mark.parametrize("R", [4, 10, 16])
@pytest.mark.parametrize("n", [3, 4, 5])
def test_level_modes_through_sparse_mttkrp(n, R, kind):
    """``csf="one"`` / ``"two"`` plans (the modes below a root): the blocked level kernels from rank 2 (zero
    columns up to 8 on the narrow kernels, above 8 up to a multiple of 16), the loop form below it, against
    einsum, the same bits for 1 and 2 workers, and the loop form's bits (the blocked kernels switched off)."""
    from tuckerkit.sparse import _mttkrp as sm
    from tuckerkit.sparse._mttkrp import sparse_mttkrp

    dtype = np.float64
    shape = (40, 1, 50, 30, 7)[:n]
    rng = np.random.default_rng(11 * n + R)
    coords = np.stack([rng.integers(0, s, 400) for s in shape], axis=1)
    coords[:80, 2] = 3  # some long fibers beside the single nonzeros
    X = COOTensor(coords, rng.standard_normal(400).astype(dtype), shape)
    factors = [rng.standard_normal((s, R)).astype(dtype) for s in shape]
    X.plan(csf=kind)
    plan, _ = sm.sparse_plan(X)
    below_root = [m for m in range(n) if plan.assignment[m][1] > 0]
    assert below_root
    for mode in range(n):
        a = sparse_mttkrp(X, factors, mode, ExecutionPolicy(1)).copy()
        b = sparse_mttkrp(X, factors, mode, ExecutionPolicy(2)).copy()
        assert a.tobytes() == b.tobytes() and a.shape == (shape[mode], R)
        oracle = _oracle(X, factors, mode)
        np.testing.assert_allclose(a, oracle, rtol=0, atol=200 * np.finfo(dtype).eps * np.abs(oracle).max())
        level = plan.assignment[mode][1]
        blocked = sm._blocked_level_kernel(n, level, sm.padded_rank(R)) if level > 0 else None
        assert (blocked is not None) == (level > 0 and R >= 2)
        if blocked is not None:
            real = sm._blocked_level_kernel
            sm._blocked_level_kernel = lambda *args: None
            try:
                loop = sparse_mttkrp(X, factors, mode, ExecutionPolicy(2)).copy()
            finally:
                sm._blocked_level_kernel = real
            assert loop.tobytes() == a.tobytes(), f"mode {mode}"


@pytest.mark.parametrize("R", [1, 16, 17, 32])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_sparse_mttkrp_oracle_every_rank_and_dtype(n, dtype, R):
    """sparse_mttkrp (blocked root kernel where R is a multiple of its block, the loop form otherwise) against
    einsum at orders 3-6, odd sizes, ranks 1, 16, 17 and 32; the same bits twice and for 1 and 2 workers."""
    from tuckerkit.sparse._mttkrp import sparse_mttkrp

    shape = (7, 5, 9, 3, 4, 2)[:n]
    rng = np.random.default_rng(3 * n + R)
    coords = np.stack([rng.integers(0, s, 120) for s in shape], axis=1)
    coords[:, 0] = np.where(coords[:, 0] == 1, 0, coords[:, 0])  # slice 1 of mode 0 empty
    X = COOTensor(coords, rng.standard_normal(120).astype(dtype), shape)
    factors = [rng.standard_normal((s, R)).astype(dtype) for s in shape]
    X.plan(csf="all")
    for mode in range(n):
        a = sparse_mttkrp(X, factors, mode, ExecutionPolicy(1))
        b = sparse_mttkrp(X, factors, mode, ExecutionPolicy(2))
        c = sparse_mttkrp(X, factors, mode, ExecutionPolicy(2))
        assert a.dtype == dtype and a.shape == (shape[mode], R) and a.flags.c_contiguous
        assert a.tobytes() == b.tobytes() == c.tobytes()
        oracle = _oracle(X, factors, mode)
        np.testing.assert_allclose(a, oracle, rtol=0, atol=200 * np.finfo(dtype).eps * np.abs(oracle).max())


@pytest.mark.parametrize("R", [1, 4, 5, 10, 16, 17, 32])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_root_kernels_on_fibers_of_one_nonzero(n, dtype, R):
    """Trees whose fibers hold one nonzero each (the uniform-random case the blocked root kernels prefetch
    for: every fiber node's rows fetched ahead, the last ones clamped to the tree's end), extents of 1 and
    empty slices: the kernel the chooser picks (from rank 2 the narrow blocked kernel with zero columns up to
    8, above 8 the wide one with zero columns up to a multiple of 16; the loop form at rank 1) against einsum,
    the same bits for 1 and 2 workers and as the loop form."""
    from tuckerkit.sparse._mttkrp import _blocked_root_kernel, padded_rank, sparse_mttkrp, sparse_plan
    from tuckerkit.sparse._nested import BLOCK, BLOCKED_ROOT, BLOCKED_ROOT_NARROW, KERNELS, NARROW

    # 300 nonzeros: most fibers hold one (the dense oracle kept small)
    shape = (40, 1, 500, 300)[:n] if n <= 4 else (40, 1, 50, 30, 1, 20)[:n]
    rng = np.random.default_rng(7 * n + R)
    nnz = 300
    coords = np.stack([rng.integers(0, s, nnz) for s in shape], axis=1)
    coords[:, 0] = np.where(coords[:, 0] % 7 == 3, 0, coords[:, 0])  # slices 3, 10, ... of mode 0 empty
    X = COOTensor(coords, rng.standard_normal(nnz).astype(dtype), shape)
    factors = [rng.standard_normal((s, R)).astype(dtype) for s in shape]
    X.plan(csf="all")
    chosen = _blocked_root_kernel(n, padded_rank(R))
    assert chosen is (None if R < 2 else BLOCKED_ROOT_NARROW[n] if R <= NARROW else BLOCKED_ROOT[n])
    assert padded_rank(R) == (R if R < 2 else NARROW if R <= NARROW else -(-R // BLOCK) * BLOCK)
    _, csfs = sparse_plan(X)
    for mode in range(n):
        a = sparse_mttkrp(X, factors, mode, ExecutionPolicy(1))
        b = sparse_mttkrp(X, factors, mode, ExecutionPolicy(2))
        assert a.dtype == dtype and a.tobytes() == b.tobytes()
        if chosen is not None:  # the loop form on the same tree: the same bits
            from tuckerkit.sparse._mttkrp import _pack_levels, _packed_tree, balanced_roots

            C = csfs[mode]
            assert C.order[0] == mode
            pos_all, pos_off, idx_all, idx_off = _packed_tree(C)
            F_all, F_off = _pack_levels(C, factors, 0, R, dtype)
            loop = np.zeros((shape[mode], R), dtype)
            KERNELS[(n, 0)](pos_all, pos_off, idx_all, idx_off, C.values, F_all, F_off, balanced_roots(C, 3), loop)
            assert loop.tobytes() == a.tobytes(), f"mode {mode}"
        oracle = _oracle(X, factors, mode)
        np.testing.assert_allclose(a, oracle, rtol=0, atol=200 * np.finfo(dtype).eps * np.abs(oracle).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_operands_start_on_a_cache_line(dtype):
    """The stacked factors and the outputs the kernels touch start on a 64-byte line (a 128-byte row of an
    unaligned array spans three lines)."""
    from tuckerkit.sparse._mttkrp import ALIGN, _pack_levels, aligned_zeros, sparse_mttkrp

    for shape in [(0,), (3, 5), (7, 16), (2, 3, 4)]:
        a = aligned_zeros(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and not a.any()
        assert a.size == 0 or a.ctypes.data % ALIGN == 0
    X = _tensor((7, 5, 9), 60, 4)
    C = CSFTensor(X, order=(0, 1, 2))
    factors = [np.ones((s, 16), dtype) for s in X.shape]
    for skip in range(3):
        F_all, F_off = _pack_levels(C, factors, skip, 16, dtype)
        assert F_all.ctypes.data % ALIGN == 0 and F_all.dtype == dtype
        for lev in range(3):
            if lev != skip:
                rows = X.shape[C.order[lev]]
                np.testing.assert_array_equal(F_all[F_off[lev]:F_off[lev] + rows], factors[C.order[lev]])
    X.plan(csf="all")
    assert sparse_mttkrp(X, factors, 1).ctypes.data % ALIGN == 0


def _work_buffers(X):
    """The MTTKRP work buffers kept on X: {key: [array ids]}."""
    return {k: [id(e[1]) for e in v] for k, v in X.__dict__.get("_tk_work", {}).items()}


@pytest.mark.parametrize("linesearch", [False, True])
@pytest.mark.parametrize("kind", ["all", "two", "one"])
def test_cp_als_reuses_the_mttkrp_work_buffers(kind, linesearch):
    """The outputs and factor stacks of the sparse MTTKRPs are made once per decomposition: the iterations keep
    the same buffers (at most two per purpose and shape: a mode's result is still held while the next one is
    computed), and the tensor holds none once cp_als returns; the same bits as a second call."""
    import tuckerkit as tk

    X = _tensor((30, 20, 25, 12), 900, 7)
    X.plan(csf=kind)
    seen = {}

    def look(state):
        seen[state.iteration] = _work_buffers(X)

    a = tk.cp_als(X, 5, max_iter=14, tol=0, linesearch=linesearch, random_state=0, callback=look)
    assert seen[8] and all(1 <= len(v) <= 2 for v in seen[8].values())
    assert all(seen[it] == seen[8] for it in range(8, 15))
    assert "_tk_work" not in X.__dict__
    b = tk.cp_als(X, 5, max_iter=14, tol=0, linesearch=linesearch, random_state=0)
    assert a.weights.tobytes() == b.weights.tobytes()
    assert all(u.tobytes() == v.tobytes() for u, v in zip(a.factors, b.factors, strict=True))


@pytest.mark.parametrize("kind", ["all", "one"])
def test_a_held_mttkrp_result_is_never_overwritten(kind):
    """A result (or a view of it) the caller keeps is left alone by later calls; a dropped one is reused, and
    what the caller wrote into it does not leak into the next result (rows without nonzeros included)."""
    from tuckerkit.sparse._mttkrp import sparse_mttkrp

    X = _tensor((9, 6, 40), 60, 2)  # mode 2: most rows hold no nonzero
    X.plan(csf=kind)
    rng = np.random.default_rng(0)
    F1 = [rng.standard_normal((s, 4)) for s in X.shape]
    F2 = [rng.standard_normal((s, 4)) for s in X.shape]
    for mode in range(3):
        want1, want2 = _oracle(X, F1, mode), _oracle(X, F2, mode)
        tol = 200 * np.finfo(np.float64).eps * np.abs(want1).max()
        M1 = sparse_mttkrp(X, F1, mode)
        view, kept, address1 = M1[1:, :2], M1.copy(), M1.ctypes.data
        M2 = sparse_mttkrp(X, F2, mode)
        address2 = M2.ctypes.data
        assert address2 != address1 and M1.tobytes() == kept.tobytes()
        np.testing.assert_allclose(M2, want2, rtol=0, atol=tol)
        del M1
        M3 = sparse_mttkrp(X, F2, mode)  # M1's bytes are still held by the view
        assert M3.ctypes.data not in (address1, address2)
        assert view.tobytes() == kept[1:, :2].tobytes() and M3.tobytes() == M2.tobytes()
        M2 += 1.0
        del M2, M3, view
        M4 = sparse_mttkrp(X, F1, mode)  # the dropped buffers again
        M5 = sparse_mttkrp(X, F1, mode)  # the one written into: its rows rewritten or zeroed
        assert (M4.ctypes.data, M5.ctypes.data) == (address1, address2)
        assert M4.tobytes() == M5.tobytes() == kept.tobytes()
        np.testing.assert_allclose(M4, want1, rtol=0, atol=tol)


def test_slp_vectorize_restores_the_setting_after_concurrent_use():
    """Threads entering the SLP switch at once see it on inside, and the last one out restores numba's own
    setting (a save/restore per call would leave it on when two calls interleave)."""
    import threading

    from numba.core import config

    from tuckerkit.sparse._mttkrp import slp_vectorize

    before = config.SLP_VECTORIZE
    seen = []

    def work():
        for _ in range(500):
            with slp_vectorize():
                seen.append(config.SLP_VECTORIZE)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(seen) == {1}
    assert config.SLP_VECTORIZE == before


def test_sparse_kernels_run_on_our_threads_without_numba_parallel():
    """The CSF kernels (the nested ones of 3- to 6-way trees, the generic walks of a 7-way tree, the TTM-chain
    of sparse HOOI) and CP-APR's run over parts on the policy's threads: numba's parallel runtime (its OpenMP
    threads, which spin after each call) never starts. Checked in a fresh process; each MTTKRP against einsum,
    the same bits for 1 and 2 workers; sparse HOOI and CP-APR repeat their bits."""
    import subprocess
    import sys

    code = """
import numpy as np, string
import numba.np.ufunc.parallel as P
from tuckerkit.engine import ExecutionPolicy
from tuckerkit.sparse import COOTensor
from tuckerkit.sparse._mttkrp import sparse_mttkrp

def check(shape, R):
    rng = np.random.default_rng(len(shape) + R)
    X = COOTensor(np.stack([rng.integers(0, s, 60) for s in shape], 1), rng.standard_normal(60), shape)
    f = [rng.standard_normal((s, R)) for s in shape]
    d = X.to_dense()
    L = string.ascii_lowercase[:len(shape)]
    for m in range(len(shape)):
        a = sparse_mttkrp(X, f, m, ExecutionPolicy(2)).copy()
        b = sparse_mttkrp(X, f, m, ExecutionPolicy(1))
        assert a.tobytes() == b.tobytes()
        spec = ",".join([L] + [c + "r" for i, c in enumerate(L) if i != m]) + "->" + L[m] + "r"
        want = np.einsum(spec, d, *[f[k] for k in range(len(shape)) if k != m])
        assert np.abs(a - want).max() <= 200 * np.finfo(np.float64).eps * np.abs(want).max()

for shape in [(7, 5, 9), (4, 3, 5, 2), (3, 4, 2, 3, 2), (2, 3, 2, 2, 3, 2), (2, 3, 2, 2, 3, 2, 2)]:
    for R in (5, 16):
        check(shape, R)
import tuckerkit as tk
rng = np.random.default_rng(0)
shape = (30, 20, 25)
c = np.stack([rng.integers(0, s, 3000) for s in shape], 1)
X = COOTensor(c, rng.integers(1, 4, 3000).astype(float), shape)
for fn in (lambda: tk.hooi(X, 3, max_iter=3).core, lambda: tk.cp_apr(X, 3, max_iter=3, random_state=0).factors[0]):
    a, b = fn(), fn()
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
print(P._is_initialized)
"""
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False"]
