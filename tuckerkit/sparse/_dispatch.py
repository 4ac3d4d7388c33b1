"""What the engine calls on a sparse tensor (shared by COOTensor and CSFTensor)."""

from __future__ import annotations

from typing import Any

import numpy as np


class SparseKernels:
    """Mixin of COOTensor and CSFTensor: shared properties and the hooks ``tuckerkit.engine`` dispatches to
    (sparse is a kernel, not a branch)."""

    shape: tuple[int, ...]
    values: np.ndarray

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    def norm(self) -> float:
        """Frobenius norm from the nonzeros (float64 accumulation)."""
        v = self.values.astype(np.float64)
        return float(np.sqrt(v @ v))

    def plan(self) -> Any:
        """The per-mode kernel plan MTTKRP uses on this tensor (:class:`SparsePlan`; builds the CSFs once).

        Examples
        --------
        >>> from tuckerkit.sparse import COOTensor
        >>> X = COOTensor([[0, 0, 0], [1, 2, 3]], [1.0, 2.0], shape=(2, 3, 4))
        >>> print(X.plan().explain().splitlines()[1])
          mode 0: CSF order [0, 1, 2] (root kernel)
        """
        from tuckerkit.sparse._mttkrp import sparse_plan

        return sparse_plan(self)[0]

    def _tk_mttkrp(self, factors, mode: int):
        """Called by ``tuckerkit.engine.mttkrp``: the compiled CSF kernel, never a densification."""
        from tuckerkit.sparse._mttkrp import sparse_mttkrp

        return sparse_mttkrp(self, factors, mode)  # type: ignore[arg-type]

    def _tk_unfolding(self, mode: int) -> Any:
        """The mode-``mode`` unfolding as a scipy CSR matrix (None when its column count overflows int64)."""
        import scipy.sparse

        from tuckerkit.sparse._csf import as_coo

        coo = as_coo(self)
        others = [m for m in range(coo.ndim) if m != mode]
        ncols = 1
        for m in others:
            ncols *= coo.shape[m]
        if ncols >= 2**62:
            return None
        if others:
            col = np.ravel_multi_index(tuple(coo.coords[:, m].astype(np.int64) for m in others),
                                       tuple(coo.shape[m] for m in others))
        else:
            col = np.zeros(coo.nnz, np.int64)
        return scipy.sparse.csr_matrix((coo.values, (coo.coords[:, mode], col)), shape=(coo.shape[mode], ncols))
