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
