"""Sparse tensors: COO and CSF formats, per-mode CSF plans, compiled MTTKRP kernels (numba).

The kernels load (and numba compiles or reads its cache) on first use; importing this package is cheap.
"""

from tuckerkit.sparse._coo import COOTensor
from tuckerkit.sparse._csf import CSFTensor
from tuckerkit.sparse._mttkrp import SparsePlan

__all__ = ["COOTensor", "CSFTensor", "SparsePlan", "is_sparse"]


def is_sparse(X: object) -> bool:
    """True for tuckerkit's sparse tensor types (the one dispatch test of the engine).

    Parameters
    ----------
    X : object

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.sparse import COOTensor, is_sparse
    >>> is_sparse(COOTensor.from_dense(np.eye(3))), is_sparse(np.eye(3))
    (True, False)
    """
    return isinstance(X, COOTensor | CSFTensor)
