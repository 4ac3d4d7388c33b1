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

    def __init__(self, coo: COOTensor, order: Sequence[int] | None = None):
        if not isinstance(coo, COOTensor):
            raise TypeError(f"CSFTensor is built from a COOTensor; received {type(coo).__name__}")
        N = coo.ndim
        if order is None:
            order = sorted(range(N), key=lambda m: coo.shape[m])
        order = tuple(int(m) for m in order)
        if sorted(order) != list(range(N)):
            raise ValueError(f"order={order} is not a permutation of the modes 0..{N - 1}")
        self.shape = coo.shape
        self.order = order
        from tuckerkit.sparse._kernels import csf_build_packed, csf_count_levels, radix_argsort, sort_rows_by

        nnz = coo.nnz
        itype = np.int32 if max(max(self.shape), nnz) < 2**31 - 1 else np.int64
        coords = np.ascontiguousarray(coo.coords)
        values = coo.values
        # a COOTensor is in lexicographic order: a tree whose order ends in increasing modes needs a stable
        # sort by its leading modes only, one counting-sort pass each (rows moved, not gathered)
        lead = N - 1  # the fewest leading modes after which the order increases
        while lead > 0 and order[lead - 1] < order[lead]:
            lead -= 1
        if nnz and lead and sum(self.shape[m] for m in order[:lead]) <= 8 * nnz + (1 << 20):
            coords, values = sort_rows_by(coords, values, np.asarray(order[:lead], dtype=np.int64),
                                          np.asarray(self.shape, dtype=np.int64))
        elif nnz and lead:  # modes too long for counting arrays: a radix sort of the linearized key
            c = coords[:, list(order)]
            key = linear_key(c, [self.shape[m] for m in order])
            perm = radix_argsort(key) if key is not None else np.lexsort(c.T[::-1])
            coords, values = coords[perm], values[perm]
        # every level in one index array and one pointer array, sized exactly by a counting pass (the
        # kernels' packed form: the tree is held once); idx[lev] and pos[lev] are views into them
        order_arr = np.asarray(order, dtype=np.int64)
        counts = csf_count_levels(coords, order_arr)
        idx_off = np.zeros(N + 1, dtype=np.int64)
        idx_off[1:] = np.cumsum(counts)
        pos_off = np.zeros(N, dtype=np.int64)
        pos_off[1:] = np.cumsum(counts[: N - 1] + 1)
        idx_all = np.empty(int(idx_off[N]), dtype=itype)
        pos_all = np.empty(max(int(pos_off[N - 1]), 1), dtype=itype)
        csf_build_packed(coords, order_arr, idx_all, idx_off, pos_all, pos_off)
        del coords
        self.idx = [idx_all[idx_off[lev]: idx_off[lev + 1]] for lev in range(N)]
        self.pos = [pos_all[pos_off[lev]: pos_off[lev] + counts[lev] + 1] for lev in range(N - 1)]
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
