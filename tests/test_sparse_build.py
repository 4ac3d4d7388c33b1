"""Building sparse tensors: COO canonical order against a lexsort oracle, CSF trees of every mode order
against the COO nonzeros, and the automatic plan's choice."""

import itertools

import numpy as np
import pytest

from tuckerkit.sparse import COOTensor, CSFTensor


def _oracle(c, v, shape):
    """Lexicographic order, duplicates summed left to right, zeros dropped (plain Python)."""
    acc: dict = {}
    for row, x in zip(map(tuple, c.tolist()), v.tolist(), strict=True):
        acc[row] = acc[row] + x if row in acc else x
    keys = sorted(k for k, x in acc.items() if x != 0)
    return np.array(keys, dtype=np.int64).reshape(-1, len(shape)), np.array([acc[k] for k in keys])


@pytest.mark.parametrize("shape", [(5, 4, 3), (2, 3, 2, 3, 2), (40,), (3, 1, 2, 1, 3, 2)])
@pytest.mark.parametrize("sorted_in", [False, True])
def test_coo_canonical_matches_oracle(shape, sorted_in):
    rng = np.random.default_rng(len(shape))
    n = 300
    c = np.stack([rng.integers(0, s, n) for s in shape], axis=1)
    v = rng.integers(-2, 3, n).astype(np.float64)  # many duplicates and zero sums
    if sorted_in:
        order = np.lexsort(c.T[::-1])
        c, v = c[order], v[order]
    X = COOTensor(c, v, shape)
    wc, wv = _oracle(c, v, shape)
    np.testing.assert_array_equal(X.coords, wc)
    np.testing.assert_array_equal(X.values, wv)
    assert X.coords.dtype == np.int32
    assert not np.shares_memory(X.coords, c) and not np.shares_memory(X.values, v)
    clean = COOTensor(X.coords, X.values, shape)  # canonical already: equal, and still a copy
    assert clean.values.tobytes() == X.values.tobytes() and not np.shares_memory(clean.values, X.values)


def test_coo_duplicate_sums_must_be_finite():
    with pytest.raises(ValueError, match=r"duplicate coordinates sum to NaN or infinity at 1 coordinate\(s\) "
                                         r"\(first: \[0, 0\], 0-based\)"):
        COOTensor([[0, 0], [0, 0], [1, 1]], [1e308, 1e308, 1.0])


def test_coo_all_zero_values():
    X = COOTensor([[0, 0], [1, 1]], [0.0, -0.0], shape=(2, 2))
    assert X.nnz == 0 and X.coords.shape == (0, 2)


@pytest.mark.parametrize("shape", [(6, 5, 4), (4, 3, 5, 2), (3, 4, 2, 3, 2), (2, 3, 2, 2, 3, 2)])
def test_csf_every_order_holds_the_nonzeros(shape):
    rng = np.random.default_rng(sum(shape))
    n = 200
    X = COOTensor(np.stack([rng.integers(0, s, n) for s in shape], axis=1), rng.standard_normal(n), shape)
    N = len(shape)
    orders = list(itertools.permutations(range(N)))
    for order in [*orders[:: max(1, len(orders) // 24)], orders[-1]]:
        C = CSFTensor(X, order=order)
        back = C.to_coo()
        np.testing.assert_array_equal(back.coords, X.coords)
        assert back.values.tobytes() == X.values.tobytes()
        # each level's nodes are distinct within their parent and sorted
        for lev in range(N - 1):
            for k in range(len(C.idx[lev])):
                kids = C.idx[lev + 1][C.pos[lev][k]: C.pos[lev][k + 1]]
                assert np.all(np.diff(kids) > 0)
        assert np.all(np.diff(C.idx[0]) > 0)


def test_auto_plan_weighs_build_against_iterations():
    from tuckerkit.sparse._mttkrp import plan_cost

    rng = np.random.default_rng(0)
    shape = (6, 5, 4, 3, 7)
    X = COOTensor(np.stack([rng.integers(0, s, 300) for s in shape], axis=1), rng.random(300), shape)
    one = X.plan(csf="auto", iterations=1)
    assert one.kind == "one" and "1 iterations cost" in one.reason
    many = X.plan(csf="auto", iterations=20)
    assert many.kind == "all" and len(many.orders) == 5
    assert plan_cost("all", 5, 20) < plan_cost("two", 5, 20) < plan_cost("one", 5, 20)
    assert "vs 'two'" in many.explain() and "'one'" in many.explain()
    assert X.plan(csf="auto") is many  # the same kind: the cached trees are kept
    fresh = COOTensor(X.coords, X.values, shape)
    assert fresh.plan(csf="auto").reason.startswith("auto: 5 tree(s) build + 50 iterations assumed")
    small = X.plan(csf="auto", iterations=20, memory_budget=1)
    assert small.kind == "one" and "exceeds the 1-byte budget" in small.reason
    with pytest.raises(ValueError, match=r"iterations must be a positive integer or None; received 0"):
        X.plan(csf="auto", iterations=0)


@pytest.mark.parametrize("shape", [(30, 400), (300, 20)])
def test_leading_left_matches_dense_svd(shape):
    import scipy.sparse

    from tuckerkit.sparse._dispatch import leading_left

    rng = np.random.default_rng(7)
    A = scipy.sparse.random(*shape, density=0.1, random_state=rng, format="csr")
    A = A + scipy.sparse.diags(np.arange(1.0, min(shape) + 1), shape=shape)  # a spread spectrum
    U, s = leading_left(A.tocsr(), 5, 0)
    Ud, sd, _ = np.linalg.svd(A.toarray())
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(s, sd[:5], rtol=1e3 * eps)
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e3 * eps)
    np.testing.assert_allclose(np.abs(U.T @ Ud[:, :5]), np.eye(5), atol=1e5 * eps)  # same subspace
    U2, s2 = leading_left(A.tocsr(), 5, 0)
    assert U2.tobytes() == U.tobytes() and s2.tobytes() == s.tobytes()
