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
