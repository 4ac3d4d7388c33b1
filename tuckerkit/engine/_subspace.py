"""Leading subspaces of a dense tensor's unfoldings, from its Gram matrix or the small unfolding.

On the CPU: LAPACK through scipy (``eigh`` of only the leading pairs); on a GPU the same small problems stay on
the device (cuSOLVER through ``cupy.linalg``): an I_n x I_n ``eigh`` is cheaper there than a round trip.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg

from tuckerkit.backend import array_namespace
from tuckerkit.engine._gram import dense_gram
from tuckerkit.engine._policy import ExecutionPolicy


def sign_fix(U: Any) -> Any:
    """Flip column signs so the entry of largest magnitude in each column is positive (deterministic output).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._subspace import sign_fix
    >>> sign_fix(np.array([[1.0, 2.0], [-3.0, 0.5]]))
    array([[-1. ,  2. ],
           [ 3. ,  0.5]])
    """
    xp = array_namespace(U)
    idx = xp.argmax(xp.abs(U), axis=0)
    signs = xp.sign(U[idx, xp.arange(U.shape[1])])
    signs = xp.where(signs == 0, 1, signs).astype(U.dtype)
    return U * signs[None, :]


def eigh_desc(G: Any, r: int | None = None) -> tuple[Any, Any]:
    """Eigen-pairs of a symmetric matrix in decreasing order (all, or the leading ``r``)."""
    I_n = G.shape[0]
    xp = array_namespace(G)
    if xp is not np:  # cuSOLVER's syevd: all pairs (no subset routine), ascending
        w, V = xp.linalg.eigh(G)
        if r is not None and r < I_n:
            w, V = w[I_n - r:], V[:, I_n - r:]
    elif r is None or r >= I_n:
        w, V = scipy.linalg.eigh(G, overwrite_a=True, check_finite=False)
    else:
        w, V = scipy.linalg.eigh(G, subset_by_index=[I_n - r, I_n - 1], overwrite_a=True, check_finite=False)
    return w[::-1], V[:, ::-1]


def leading_left_singular(Y: Any, n: int, r: int, policy: ExecutionPolicy) -> tuple[Any, Any]:
    """The ``r`` leading left singular vectors of the mode-``n`` unfolding of a dense array ``Y`` (sign-fixed)
    and the matching eigenvalues of ``Y_(n) Y_(n)^T`` (squared singular values).

    Eigenvectors of the I_n x I_n Gram (formed without unfolding) when ``I_n <= P`` (P = entries of the
    complement of a mode-n fiber); a thin SVD of the (small) unfolding when P < I_n, cost I_n P^2 instead of
    I_n^3.
    """
    I_n = Y.shape[n]
    P = Y.size // I_n
    xp = array_namespace(Y)
    if I_n <= P or r > P:
        w, V = eigh_desc(dense_gram(Y, n, None, policy), r)
        return sign_fix(xp.ascontiguousarray(V)), w
    M = xp.moveaxis(Y, n, 0).reshape(I_n, P)
    if xp is np:
        U, s, _ = scipy.linalg.svd(M, full_matrices=False, check_finite=False)
    else:
        U, s, _ = xp.linalg.svd(M, full_matrices=False)
    return sign_fix(xp.ascontiguousarray(U[:, :r])), (s[:r] * s[:r]).astype(Y.dtype)
