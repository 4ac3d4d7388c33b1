"""What the engine calls on a sparse tensor (shared by COOTensor and CSFTensor)."""

from __future__ import annotations

from typing import Any

import numpy as np


class SparseShape:
    """What every sparse tensor (host or GPU) derives from its ``shape`` and ``values``."""

    shape: tuple[int, ...]
    values: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.values.dtype)


class SparseKernels(SparseShape):
    """Mixin of COOTensor and CSFTensor: shared properties and the hooks ``tuckerkit.engine`` dispatches to
    (sparse is a kernel, not a branch)."""

    values: np.ndarray

    def norm(self) -> float:
        """Frobenius norm from the nonzeros (float64 accumulation)."""
        v = self.values.astype(np.float64)
        return float(np.sqrt(v @ v))

    def plan(self, csf: str | None = None, *, memory_budget: int | None = None) -> Any:
        """The per-mode kernel plan MTTKRP uses on this tensor (:class:`SparsePlan`; builds the CSFs once).

        Parameters
        ----------
        csf : {None, "auto", "all", "two", "one"}, default None
            None: the cached plan, else ``"auto"``. ``"auto"`` takes the fastest kind whose trees fit
            ``memory_budget``; the others force a kind (replacing a cached plan of another kind).
        memory_budget : int, optional
            Bytes the CSF trees may use (default: a quarter of the available memory).

        Returns
        -------
        SparsePlan

        Examples
        --------
        >>> from tuckerkit.sparse import COOTensor
        >>> X = COOTensor([[0, 0, 0], [1, 2, 3]], [1.0, 2.0], shape=(2, 3, 4))
        >>> print(X.plan().explain().splitlines()[1])
          mode 0: CSF order [0, 1, 2] (root kernel)
        >>> X.plan(memory_budget=100).kind
        'one'
        """
        from tuckerkit.sparse._mttkrp import sparse_plan

        if csf is None and memory_budget is not None:
            csf = "auto"
        return sparse_plan(self, csf, memory_budget)[0]

    def _tk_mttkrp(self, factors, mode: int):
        """Called by ``tuckerkit.engine.mttkrp``: the compiled CSF kernel, never a densification."""
        from tuckerkit.sparse._mttkrp import sparse_mttkrp

        return sparse_mttkrp(self, factors, mode)  # type: ignore[arg-type]

    def _tk_to_device(self, device: Any) -> Any:
        """This tensor on ``device``: itself on the CPU, a :class:`GpuCOOTensor` on a GPU."""
        if not device.is_gpu:
            return self
        from tuckerkit.sparse._csf import as_coo
        from tuckerkit.sparse._gpu import GpuCOOTensor

        return GpuCOOTensor(as_coo(self), device)

    def _tk_ttmc(self, factors, mode: int):
        """Called by ``tuckerkit.engine.multi_ttm`` with ``transpose=True, skip=mode``: the compiled CSF kernel."""
        from tuckerkit.sparse._mttkrp import sparse_ttmc

        return sparse_ttmc(self, factors, mode)  # type: ignore[arg-type]

    def _tk_unfolding(self, mode: int) -> Any:
        """The mode-``mode`` unfolding as a scipy CSR matrix, keeping only the columns that hold nonzeros.

        Dropping empty columns leaves ``A A^T`` and the left singular vectors unchanged, and keeps the
        matrix at most ``nnz`` wide: ARPACK's final SVD is then ``k x nnz`` instead of ``k x prod(other
        modes)`` (a 10000^3 tensor's unfolding has 1e8 columns; its SVD took 8 s and 0.8 GB).
        """
        import scipy.sparse

        from tuckerkit.sparse._coo import linear_key
        from tuckerkit.sparse._csf import as_coo

        coo = as_coo(self)
        others = [m for m in range(coo.ndim) if m != mode]
        if others:
            rest = coo.coords[:, others]
            key = linear_key(rest, [coo.shape[m] for m in others])
            _, col = np.unique(rest if key is None else key, axis=0, return_inverse=True)
            col = col.reshape(-1)
        else:
            col = np.zeros(coo.nnz, np.int64)
        ncols = int(col.max()) + 1 if col.size else 0
        return scipy.sparse.csr_matrix((coo.values, (coo.coords[:, mode], col)), shape=(coo.shape[mode], ncols))
