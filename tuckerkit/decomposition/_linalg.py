"""Small dense linear algebra shared by the decompositions (factor updates, solves).

On the CPU: LAPACK through scipy (``eigh`` of only the leading pairs, Cholesky). On a GPU the same small
problems stay on the device (cuSOLVER through ``cupy.linalg``): an I_n x I_n ``eigh`` or an R x R solve is
cheaper there than a round trip to the host, which would also synchronize once per factor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg

from tuckerkit.backend import array_namespace
from tuckerkit.engine import gram


def sign_fix(U: Any) -> Any:
    """Flip column signs so the entry of largest magnitude in each column is positive (deterministic output)."""
    xp = array_namespace(U)
    idx = xp.argmax(xp.abs(U), axis=0)
    signs = xp.sign(U[idx, xp.arange(U.shape[1])])
    signs = xp.where(signs == 0, 1, signs).astype(U.dtype)
    return U * signs[None, :]


def gram_eigh(Y: Any, n: int, r: int | None = None) -> tuple[Any, Any]:
    """Eigen-pairs of ``Y_(n) Y_(n)^T`` in decreasing order (all, or the leading ``r``)."""
    G = gram(Y, n)
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


def leading_left_singular(Y: Any, n: int, r: int) -> tuple[Any, str]:
    """The ``r`` leading left singular vectors of the mode-``n`` unfolding of ``Y`` and the route used.

    ``"gram_eigh"``: eigenvectors of the I_n x I_n Gram (formed without unfolding) when ``I_n <= P``
    (P = entries per mode-n fiber's complement); ``"svd"``: a thin SVD of the (small) unfolding when P < I_n,
    cost I_n P^2 instead of I_n^3.
    """
    I_n = Y.shape[n]
    P = Y.size // I_n
    if I_n <= P or r > P:
        _, V = gram_eigh(Y, n, r)
        return sign_fix(array_namespace(V).ascontiguousarray(V)), "gram_eigh"
    xp = array_namespace(Y)
    M = xp.moveaxis(Y, n, 0).reshape(I_n, P)
    if xp is np:
        U, _, _ = scipy.linalg.svd(M, full_matrices=False, check_finite=False)
    else:
        U, _, _ = xp.linalg.svd(M, full_matrices=False)
    return sign_fix(xp.ascontiguousarray(U[:, :r])), "svd"


def spd_solve(V: Any, M: Any) -> Any:
    """Solve ``U V = M`` for U with V symmetric positive (semi)definite: Cholesky, else least squares.

    On a GPU: a pseudo-inverse from ``eigh`` (eigenvalues below ``eps * max`` dropped), which is exact for a
    definite V, handles a singular one, and never needs the host to check for failure.
    """
    xp = array_namespace(V, M)
    if xp is not np:
        w, Q = xp.linalg.eigh(V)
        cut = xp.finfo(V.dtype).eps * V.shape[0] * xp.max(xp.abs(w))
        inv = xp.where(w > cut, 1 / xp.where(w > cut, w, 1), 0).astype(V.dtype)
        return ((M @ Q) * inv[None, :]) @ Q.T
    try:
        c = scipy.linalg.cho_factor(V, check_finite=False)
        return scipy.linalg.cho_solve(c, M.T, check_finite=False).T
    except np.linalg.LinAlgError:
        sol, *_ = scipy.linalg.lstsq(V, M.T, check_finite=False, cond=np.finfo(V.dtype).eps * max(V.shape))
        return sol.T
