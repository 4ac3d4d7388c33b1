"""CSFTensor: compressed sparse fibers (one compressed level per mode, root to leaf)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tuckerkit.sparse._coo import COOTensor, linear_key
from tuckerkit.sparse._dispatch import SparseOperand


class CSFTensor(SparseOperand):
    """A sparse tensor stored as a tree of fibers in a chosen mode order (taco's compressed levels).

    Level ``l`` holds ``idx[l]`` (the coordinate in mode ``order[l]`` of each node) and, for every level but
    the last, ``pos[l]`` (node ``k``'s children are ``pos[l][k]:pos[l][k+1]`` of level ``l+1``). ``values``
    align with the last level. Index arrays are int32 when the sizes fit.

    Parameters
    ----------
    coo : COOTensor
    order : sequence of int, optional
        Mode order from root to leaf. Default: the shortest modes first.

    Examples
    --------
    >>> from tuckerkit.sparse import COOTensor, CSFTensor
    >>> X = COOTensor([[0, 0, 1], [0, 1, 0], [1, 1, 1]], [1.0, 2.0, 3.0], shape=(2, 2, 2))
    >>> C = CSFTensor(X, order=(0, 1, 2))
    >>> [len(i) for i in C.idx], C.pos[0].tolist()
    ([2, 3, 3], [0, 2, 3])
    """

    def __init__(self, coo: COOTensor, order: Sequence[int] | None = None, *, _share: bool = False):
        if not isinstance(coo, COOTensor):
            raise TypeError(f"CSFTensor is built from a COOTensor; received {type(coo).__name__}")
        N = coo.ndim
        if order is None:
            order = sorted(range(N), key=lambda m: coo.shape[m])
        from tuckerkit._validation import _as_int, describe

        if isinstance(order, str | bytes) or not hasattr(order, "__iter__"):
            raise TypeError(f"order must be a permutation of the modes 0..{N - 1} (a sequence of ints); received "
                            f"{describe(order)}")
        order = tuple(_as_int(m, f"order[{i}]") for i, m in enumerate(order))  # (0.9 was read as mode 0)
        if sorted(order) != list(range(N)):
            raise ValueError(f"order={order} is not a permutation of the modes 0..{N - 1}")
        self.shape = coo.shape
        self.order = order
        nnz = coo.nnz
        itype = np.int32 if max(max(self.shape), nnz) < 2**31 - 1 else np.int64
        coords = np.ascontiguousarray(coo.coords)
        values = coo.values
        # a COOTensor is in lexicographic order: a tree whose order ends in increasing modes needs its rows
        # regrouped by its leading modes only
        lead = N - 1  # the fewest leading modes after which the order increases
        while lead > 0 and order[lead - 1] < order[lead]:
            lead -= 1
        if _in_parts(nnz, N, order, lead, self.shape):
            idx_all, idx_off, pos_all, pos_off, counts, values = _build_in_parts(
                coords, values, order, lead, self.shape, itype)
        else:
            idx_all, idx_off, pos_all, pos_off, counts, values = _build_sorted(
                coords, values, order, lead, self.shape, itype)
        self.idx = [idx_all[idx_off[lev]: idx_off[lev + 1]] for lev in range(N)]
        self.pos = [pos_all[pos_off[lev]: pos_off[lev] + counts[lev] + 1] for lev in range(N - 1)]
        if values is coo.values and not _share:
            # (a tree in the COO's own order takes its values array as it is; a tree built by the user is a
            # snapshot whatever its order, so it gets its own copy. The plans' trees share it: _share)
            values = values.copy()
        self.values = values
        self.__dict__["_tk_cache"] = {"packed": (pos_all, pos_off, idx_all, idx_off)}

    @classmethod
    def from_coo(cls, coo: COOTensor, order: Sequence[int] | None = None) -> CSFTensor:
        return cls(coo, order)

    @property
    def nbytes(self) -> int:
        """Memory footprint of the index and value arrays."""
        return int(sum(a.nbytes for a in self.idx) + sum(a.nbytes for a in self.pos) + self.values.nbytes)

    def to_coo(self) -> COOTensor:
        N = self.ndim
        cols: list[Any] = [None] * N
        cols[N - 1] = self.idx[N - 1]
        expand = np.arange(len(self.idx[N - 1]))
        for lev in range(N - 2, -1, -1):
            counts = np.diff(self.pos[lev])
            owner = np.repeat(np.arange(len(self.idx[lev])), counts)  # level-lev node of each level+1 node
            expand = owner[expand]
            cols[lev] = self.idx[lev][expand]
        coords = np.empty((self.nnz, N), dtype=np.int64)
        for lev, m in enumerate(self.order):
            coords[:, m] = cols[lev]
        return COOTensor(coords, self.values, self.shape)

    def __repr__(self) -> str:
        return f"CSFTensor(shape={self.shape}, nnz={self.nnz}, order={self.order}, bytes={self.nbytes})"


def as_coo(X: Any) -> COOTensor:
    if isinstance(X, COOTensor):
        return X
    if isinstance(X, CSFTensor):
        return X.to_coo()
    raise TypeError(f"expected a COOTensor or CSFTensor; received {type(X).__name__}")


def _in_parts(nnz: int, N: int, order: tuple[int, ...], lead: int, shape: tuple[int, ...]) -> bool:
    """Whether :func:`_build_in_parts` serves a tree: nonzeros, two modes or more, and modes to regroup short
    enough for counting arrays (else :func:`_build_sorted`'s radix sort)."""
    return bool(nnz) and N >= 2 and (not lead or sum(shape[m] for m in order[:lead]) <= 8 * nnz + (1 << 20))


def _build_parts(nnz: int, n_root: int) -> int:
    """Parts (threads) of a tree's build: the default policy's workers (the parts run on its threads,
    :func:`~tuckerkit.engine._policy.parallel_for`, not numba's), fewer for few nonzeros (a part per 64k) or
    long root modes (each part counts the root slices in an array of its own: at most ``nnz`` entries in all).
    The tree is the same for any number of parts."""
    from tuckerkit.engine._policy import resolve_policy

    return max(1, min(resolve_policy(None).workers, nnz >> 16, nnz // max(n_root, 1)))


def _build_in_parts(coords: np.ndarray, values: np.ndarray, order: tuple[int, ...], lead: int,
                    shape: tuple[int, ...], itype: Any, parts: int | None = None) -> tuple:
    """The tree built by the compiled kernels in ``parts`` contiguous runs of rows, one per thread (default:
    :func:`_build_parts`); the same arrays, bits and order for any number of parts as :func:`_build_sorted`.

    The rows are in lexicographic order, so a tree whose order is its root then increasing modes (``lead``
    <= 1) needs them grouped by root slice only: a stable counting sort (per-part histograms, then each part
    scatters its rows at its own cursors) that moves the other coordinates, in tree order, and the values; a
    pass counts each part's nodes per level, a last one writes them from where the parts before it end. An
    order already lexicographic (``lead`` 0) is read in place (its values shared with the COO). Middle modes
    out of order (``lead`` >= 2) are first regrouped by counting sorts (:func:`sort_rows_by`)."""
    from tuckerkit.engine._policy import parallel_for, resolve_policy
    from tuckerkit.sparse import _kernels as K

    nnz, N = coords.shape
    n_root = shape[order[0]]
    if parts is None:
        parts = _build_parts(nnz, n_root if lead else 0)
    policy = resolve_policy(None)
    order_arr = np.asarray(order, dtype=np.int64)
    b = [nnz * t // parts for t in range(parts + 1)]

    def each(fn: Any) -> None:
        parallel_for(lambda t, _: fn(t, b[t], b[t + 1]), parts, policy)

    counts = np.zeros((parts, N), dtype=np.int64)
    if lead == 0:
        count = K.count_levels_kernel(N)
        each(lambda t, lo, hi: count(coords, order_arr, lo, hi, counts[t]))
    else:
        if lead >= 2:  # stable regrouping by the middle modes out of order (the root's is the scatter's)
            coords, values = K.sort_rows_by(coords, values, np.asarray(order[1:lead], dtype=np.int64),
                                            np.asarray(shape, dtype=np.int64))
        cur = np.zeros((parts, n_root), dtype=np.int64)
        root = order[0]
        each(lambda t, lo, hi: K.csf_histogram_part(coords, root, lo, hi, cur[t]))
        roots = K.csf_root_cursors(cur)
        idx0 = np.empty(roots, dtype=itype)
        rstart = np.empty(roots + 1, dtype=np.int64)
        K.csf_root_starts(cur, nnz, idx0, rstart)
        dst = np.empty((nnz, N - 1), dtype=coords.dtype)
        dst_v = np.empty(nnz, dtype=values.dtype)
        src, src_v = coords, values
        each(lambda t, lo, hi: K.csf_scatter_part(src, src_v, order_arr, lo, hi, cur[t], dst, dst_v))
        del coords, values, src, src_v, cur
        gcount = K.grouped_count_kernel(N - 1)
        each(lambda t, lo, hi: gcount(dst, rstart, lo, hi, counts[t]))
    total = counts.sum(axis=0)
    starts = np.zeros_like(counts)
    np.cumsum(counts[:-1], axis=0, out=starts[1:])
    idx_all, idx_off, pos_all, pos_off = _packed_arrays(total, itype)
    if lead == 0:
        build = K.build_packed_kernel(N)
        each(lambda t, lo, hi: build(coords, order_arr, lo, hi, starts[t], idx_all, idx_off, pos_all, pos_off))
    else:
        idx_all[:roots] = idx0
        del idx0
        fill = K.grouped_fill_kernel(N - 1)
        each(lambda t, lo, hi: fill(dst, rstart, lo, hi, starts[t], idx_all, idx_off, pos_all, pos_off))
        values = dst_v
    for lev in range(N - 1):  # each level's closing pointer
        pos_all[pos_off[lev] + total[lev]] = total[lev + 1]
    return idx_all, idx_off, pos_all, pos_off, total, values


def _packed_arrays(counts: np.ndarray, itype: Any) -> tuple:
    """The packed index and pointer arrays of a tree with ``counts[lev]`` nodes per level, and their offsets."""
    N = len(counts)
    idx_off = np.zeros(N + 1, dtype=np.int64)
    idx_off[1:] = np.cumsum(counts)
    pos_off = np.zeros(N, dtype=np.int64)
    pos_off[1:] = np.cumsum(counts[: N - 1] + 1)
    return (np.empty(int(idx_off[N]), dtype=itype), idx_off, np.empty(max(int(pos_off[N - 1]), 1), dtype=itype),
            pos_off)


def _build_sorted(coords: np.ndarray, values: np.ndarray, order: tuple[int, ...], lead: int,
                  shape: tuple[int, ...], itype: Any) -> tuple:
    """The tree from a sorted copy of the nonzeros: rows moved into tree order by counting sorts (a radix sort
    of the linearized key where the modes are too long for counting arrays), then a counting pass sizing the
    packed arrays and a pass writing them."""
    from tuckerkit.sparse._kernels import csf_build_packed, csf_count_levels, radix_argsort, sort_rows_by

    nnz = coords.shape[0]
    if nnz and lead and sum(shape[m] for m in order[:lead]) <= 8 * nnz + (1 << 20):
        coords, values = sort_rows_by(coords, values, np.asarray(order[:lead], dtype=np.int64),
                                      np.asarray(shape, dtype=np.int64))
    elif nnz and lead:  # modes too long for counting arrays: a radix sort of the linearized key
        c = coords[:, list(order)]
        key = linear_key(c, [shape[m] for m in order])
        perm = radix_argsort(key) if key is not None else np.lexsort(c.T[::-1])
        coords, values = coords[perm], values[perm]
    # every level in one index array and one pointer array, sized exactly by a counting pass (the
    # kernels' packed form: the tree is held once); idx[lev] and pos[lev] are views into them
    order_arr = np.asarray(order, dtype=np.int64)
    counts = csf_count_levels(coords, order_arr)
    idx_all, idx_off, pos_all, pos_off = _packed_arrays(counts, itype)
    csf_build_packed(coords, order_arr, idx_all, idx_off, pos_all, pos_off)
    return idx_all, idx_off, pos_all, pos_off, counts, values
