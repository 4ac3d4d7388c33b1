"""Building sparse tensors: COO canonical order against a lexsort oracle, CSF trees of every mode order
against the COO nonzeros, and the automatic plan's choice."""

import itertools

import numpy as np
import pytest

from tuckerkit.sparse import COOTensor, CSFTensor


def test_generated_build_kernels_are_current():
    from pathlib import Path

    from tuckerkit.sparse import _make_build

    path = Path(_make_build.__file__).with_name("_build_unrolled.py")
    assert path.read_text() == _make_build.source(), "run python -m tuckerkit.sparse._make_build"


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


@pytest.mark.parametrize("shape", [(6, 5, 4), (4, 3, 5, 2), (3, 4, 2, 3, 2), (2, 3, 2, 2, 3, 2), (2, 2, 3, 2, 2, 2, 3)])
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
    trees = X._tk_csf[1]
    again = X.plan(csf="auto")  # the same kind: the cached trees are kept, the reason is this call's
    assert again.kind == many.kind and X._tk_csf[1] is trees and "50 iterations assumed" in again.reason
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


# ------------------------------------------------------------------------------------------------------------
# the CSF build in parts against a lexsort construction: same arrays, bits and order for any number of parts
# ------------------------------------------------------------------------------------------------------------
def _reference_tree(X, order):
    """The CSF levels of ``X`` in ``order`` from a stable lexsort of its coordinates (plain numpy)."""
    c = X.coords[:, list(order)].astype(np.int64)
    perm = np.lexsort(c.T[::-1])
    c, v = c[perm], X.values[perm]
    n, N = c.shape
    new = np.zeros(n, dtype=bool)
    starts = []
    for lev in range(N):
        changed = np.ones(n, dtype=bool)
        changed[1:] = c[1:, lev] != c[:-1, lev]
        new |= changed
        starts.append(np.flatnonzero(new))
    idx = [c[s, lev] for lev, s in enumerate(starts)]
    pos = [np.append(np.searchsorted(starts[lev + 1], starts[lev]), len(starts[lev + 1])) for lev in range(N - 1)]
    return idx, pos, v


def _assert_tree(C, X, order):
    idx, pos, v = _reference_tree(X, order)
    itype = np.int32 if max(max(X.shape), X.nnz) < 2**31 - 1 else np.int64
    assert C.order == tuple(order) and len(C.idx) == len(order) and len(C.pos) == len(order) - 1
    for got, want in zip([*C.idx, *C.pos], [*idx, *pos], strict=True):
        assert got.dtype == itype
        np.testing.assert_array_equal(got, want)
    assert C.values.dtype == X.values.dtype and C.values.tobytes() == v.tobytes()


def _parts_build(X, order, parts):
    """The packed arrays of :func:`_build_in_parts` in ``parts`` parts as a CSFTensor-like object."""
    from types import SimpleNamespace

    from tuckerkit.sparse import _csf

    N = X.ndim
    lead = N - 1
    while lead > 0 and order[lead - 1] < order[lead]:
        lead -= 1
    itype = np.int32 if max(max(X.shape), X.nnz) < 2**31 - 1 else np.int64
    assert _csf._in_parts(X.nnz, N, tuple(order), lead, X.shape)
    coords = np.ascontiguousarray(X.coords)
    before = coords.copy(), X.values.copy()
    idx_all, idx_off, pos_all, pos_off, counts, values = _csf._build_in_parts(
        coords, X.values, tuple(order), lead, X.shape, itype, parts)
    assert coords.tobytes() == before[0].tobytes() and X.values.tobytes() == before[1].tobytes()  # inputs kept
    assert (values is X.values) == (lead == 0)  # an order already lexicographic shares the COO's values
    return SimpleNamespace(order=tuple(order), idx=[idx_all[idx_off[lev]: idx_off[lev + 1]] for lev in range(N)],
                           pos=[pos_all[pos_off[lev]: pos_off[lev] + counts[lev] + 1] for lev in range(N - 1)],
                           values=values)


def _orders(N, cap=30):
    orders = list(itertools.permutations(range(N)))
    return orders if len(orders) <= cap else [*orders[:: len(orders) // cap], orders[-1]]


def _random_coo(shape, n, seed):
    rng = np.random.default_rng(seed)
    c = np.stack([rng.integers(0, s, n) for s in shape], axis=1)
    v = rng.integers(-3, 4, n).astype(np.float64) + rng.random(n) * (rng.random(n) < 0.5)  # duplicates, zeros
    return COOTensor(c, v, shape)


@pytest.mark.parametrize("shape", [(7, 5), (6, 5, 4), (4, 3, 5, 2), (3, 4, 2, 3, 2), (2, 3, 2, 2, 3, 2),
                                   (3, 1, 2, 1, 3, 2), (2, 3, 1, 2, 2, 3, 2), (1, 1, 1), (40, 1, 30)])
@pytest.mark.parametrize("n", [1, 2, 25, 400])
def test_csf_build_in_parts_matches_lexsort_reference(shape, n):
    X = _random_coo(shape, n, seed=n + len(shape))
    assert X.nnz >= 1
    for order in _orders(len(shape)):
        _assert_tree(CSFTensor(X, order=order), X, order)
        for parts in (1, 2, 3, 5):
            _assert_tree(_parts_build(X, order, parts), X, order)


@pytest.mark.parametrize("shape", [(6, 5, 4), (4, 3, 5, 2), (3, 4, 2, 3, 2), (2, 3, 2, 2, 3, 2)])
def test_unrolled_build_kernels_make_the_generic_loops_trees(shape, monkeypatch):
    """Trees of 3 to 6 levels are built by the unrolled kernels, chosen by the tree's levels outside the compiled
    code (so that a first build compiles only its own); the generic loops, forced for the same trees, give the
    same arrays, in parts and sorted, as the reference."""
    from tuckerkit.sparse import _build_unrolled as U
    from tuckerkit.sparse import _kernels as K

    N = len(shape)
    assert K.count_levels_kernel(N) is getattr(U, f"_count_levels{N}")
    assert K.build_packed_kernel(N) is getattr(U, f"_build_packed{N}")
    assert K.grouped_count_kernel(N - 1) is getattr(U, f"_grouped_count{N}")
    assert K.grouped_fill_kernel(N - 1) is getattr(U, f"_grouped_fill{N}")
    for other in (2, 7):
        assert K.count_levels_kernel(other) is K.csf_count_levels_part
        assert K.build_packed_kernel(other) is K.csf_build_packed_part
    assert K.grouped_count_kernel(6) is K.csf_grouped_count_part and K.grouped_fill_kernel(1) is K.csf_grouped_fill_part
    X = _random_coo(shape, 300, seed=N)
    orders = _orders(N, cap=8)
    unrolled = [[a.tobytes() for a in (*T.idx, *T.pos, T.values)]
                for order in orders for T in (_parts_build(X, order, 3), CSFTensor(X, order=order))]
    monkeypatch.setattr(K, "count_levels_kernel", lambda N: K.csf_count_levels_part)
    monkeypatch.setattr(K, "build_packed_kernel", lambda N: K.csf_build_packed_part)
    monkeypatch.setattr(K, "grouped_count_kernel", lambda L: K.csf_grouped_count_part)
    monkeypatch.setattr(K, "grouped_fill_kernel", lambda L: K.csf_grouped_fill_part)
    generic = []
    for order in orders:
        for T in (_parts_build(X, order, 3), CSFTensor(X, order=order)):
            _assert_tree(T, X, order)
            generic.append([a.tobytes() for a in (*T.idx, *T.pos, T.values)])
    assert generic == unrolled


def test_csf_build_without_nonzeros_and_with_one_mode():
    Z = COOTensor(np.zeros((3, 3), dtype=np.int64), np.zeros(3), shape=(4, 5, 6))
    for order in _orders(3):
        C = CSFTensor(Z, order=order)
        assert [len(i) for i in C.idx] == [0, 0, 0] and [p.tolist() for p in C.pos] == [[0], [0]]
    V = COOTensor([[3], [1], [3]], [1.0, 2.0, 0.5], shape=(5,))
    _assert_tree(CSFTensor(V, order=(0,)), V, (0,))


@pytest.mark.parametrize("big", [2**31 - 2, 2**31 - 1, 2**40])
def test_csf_build_with_modes_near_the_index_limits(big):
    """A mode of 2**31 - 2 entries keeps int32 indices, 2**31 - 1 needs int64; a root mode that long is
    sorted by the linearized key (no per-slice arrays), 2**40 with a product past 2**62 by lexsort."""
    rng = np.random.default_rng(big % 1000)
    shape = (3, big, 4, 2)
    n = 300
    c = np.stack([rng.integers(0, 3, n), big - 1 - rng.integers(0, 5, n), rng.integers(0, 4, n),
                  rng.integers(0, 2, n)], axis=1)
    X = COOTensor(c, rng.standard_normal(n), shape)
    assert X.coords.dtype == (np.int32 if big < 2**31 - 1 else np.int64)
    for order in _orders(4):
        _assert_tree(CSFTensor(X, order=order), X, order)
        if order[0] != 1 and (1 not in order[1:3] or list(order[1:]) == sorted(order[1:])):
            for parts in (1, 3):
                _assert_tree(_parts_build(X, order, parts), X, order)


def test_csf_build_same_trees_for_any_parts_and_threads(monkeypatch):
    """Whole plans (every kind) built in 1, 2 or 3 parts, and under one thread: the same arrays, so every
    MTTKRP keeps its bits; a tensor large enough that the default build cuts it in parts."""
    from threadpoolctl import threadpool_limits

    from tuckerkit.sparse import _csf
    from tuckerkit.sparse._mttkrp import sparse_mttkrp, sparse_plan

    rng = np.random.default_rng(3)
    shape = (300, 40, 1000, 7)
    n = 160_000
    w = 1.0 / np.arange(1, 301) ** 1.2  # power-law slices of the first mode
    c = np.stack([rng.choice(300, n, p=w / w.sum()), *(rng.integers(0, s, n) for s in shape[1:])], axis=1)
    X0 = COOTensor(c, rng.standard_normal(n), shape)
    factors = [rng.standard_normal((s, 5)) for s in shape]

    def trees(kind, parts=None):
        if parts is not None:
            monkeypatch.setattr(_csf, "_build_parts", lambda nnz, n_root: parts)
        X = COOTensor(X0.coords, X0.values, shape)
        _, csfs = sparse_plan(X, csf=kind)
        monkeypatch.undo()
        arrays = [a.tobytes() for C in csfs for a in (*C.idx, *C.pos, C.values)]
        return arrays, [sparse_mttkrp(X, factors, m).tobytes() for m in range(4)]

    for kind in ("all", "two", "one"):
        want = trees(kind, 1)
        assert trees(kind, 2) == want and trees(kind, 3) == want and trees(kind) == want
        with threadpool_limits(1):
            assert trees(kind) == want
    X = COOTensor(X0.coords, X0.values, shape)
    for order in [(0, 1, 2, 3), (2, 0, 1, 3), (3, 2, 1, 0)]:
        _assert_tree(CSFTensor(X, order=order), X, order)
