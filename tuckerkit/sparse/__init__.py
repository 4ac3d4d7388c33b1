"""Sparse tensors: COO and CSF formats, per-mode CSF plans, compiled MTTKRP kernels (numba).

The kernels load (and numba compiles or reads its cache) on first use; importing this package is cheap.
"""

from tuckerkit.sparse._coo import COOTensor
from tuckerkit.sparse._csf import CSFTensor

__all__ = ["COOTensor", "CSFTensor", "is_sparse"]


def is_sparse(X: object) -> bool:
    """True for tuckerkit's sparse tensor types (the one dispatch test of the engine)."""
    return isinstance(X, COOTensor | CSFTensor)
