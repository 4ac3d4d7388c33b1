"""Small dense linear algebra of the factor updates: the CP-ALS solve.

On the CPU: LAPACK through scipy (Cholesky, least squares when singular). On a GPU the same small problem
stays on the device (cuSOLVER through ``cupy.linalg``): an R x R solve is cheaper there than a round trip to
the host, which would also synchronize once per factor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace


def spd_solve(V: Any, M: Any) -> Any:
    """Solve ``U V = M`` for U with V symmetric (complex: Hermitian) positive (semi)definite: Cholesky, else
    least squares.

    On a GPU: a pseudo-inverse from ``eigh`` (eigenvalues below ``eps * max`` dropped), which is exact for a
    definite V, handles a singular one, and never needs the host to check for failure.
    """
    xp = array_namespace(V, M)
    if xp is not np:
        w, Q = xp.linalg.eigh(V)
        cut = xp.finfo(V.dtype).eps * V.shape[0] * xp.max(xp.abs(w))
        inv = xp.where(w > cut, 1 / xp.where(w > cut, w, 1), 0).astype(V.dtype)
        return ((M @ Q) * inv[None, :]) @ Q.conj().T
    import scipy.linalg  # here, not at the top: `import tuckerkit` needs no scipy.linalg

    Vt = V.T  # U V = M is V^T U^T = M^T (V^T = conj(V) is Hermitian positive definite too)
    try:
        c = scipy.linalg.cho_factor(Vt, check_finite=False)
        return scipy.linalg.cho_solve(c, M.T, check_finite=False).T
    except np.linalg.LinAlgError:
        sol, *_ = scipy.linalg.lstsq(Vt, M.T, check_finite=False, cond=np.finfo(V.dtype).eps * max(V.shape))
        return sol.T


def cp_factor_update(V: Any, M: Any, out: Any, normalize: bool) -> Any:
    """CP-ALS's factor update on the host for a real dtype: ``U V = M`` solved into ``out`` (I x R, C-contiguous,
    M's dtype) by the compiled row solve (:mod:`._cp_kernels`), and with ``normalize`` the columns divided by
    their norms, which are returned (float64, zero norms as 1); None without ``normalize``. Returns False
    and leaves ``out`` alone when the Cholesky factorization of V fails (singular or indefinite V: the caller
    takes :func:`spd_solve`'s least squares). One thread (see :mod:`._cp_kernels`)."""
    from tuckerkit.decomposition._cp_kernels import CHUNK, cholesky_solve_rows
    from tuckerkit.sparse._mttkrp import slp_vectorize

    try:
        L = np.linalg.cholesky(V)  # numpy's: a sparse CLI run then needs no scipy.linalg import (0.3 s)
    except np.linalg.LinAlgError:
        return False
    dtype = out.dtype
    M = np.ascontiguousarray(M, dtype=dtype)
    I = M.shape[0]  # noqa: E741
    ss = np.empty((-(-I // CHUNK), M.shape[1]), dtype=np.float64)
    L = np.ascontiguousarray(L, dtype=dtype)
    with slp_vectorize():  # SLP packs the lanes of a block into vector registers (at compile time)
        cholesky_solve_rows(M, L, out, ss)
    if not normalize:
        return None
    norms = np.sqrt(ss.sum(axis=0))
    norms[norms == 0] = 1.0
    np.divide(out, norms.astype(dtype), out=out)
    return norms
