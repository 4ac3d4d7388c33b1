"""A subspace oracle shared by the tests: the sine of the largest principal angle between two column spaces.

Cosines (the singular values of ``U^T V`` against 1) are blind to small angles: ``1 - cos(t)`` is ``t^2 / 2``,
so a check of the cosines to ``a`` passed any angle up to ``sqrt(2 a)`` (to 1e-8: a subspace 1e-4 off). The sine
is first order in the angle.
"""

from __future__ import annotations

import numpy as np


def subspace_sine(U, V) -> float:
    """``||(I - Q_U Q_U^H) Q_V||_2`` in double precision, ``Q_U`` / ``Q_V`` orthonormal bases of ``U``'s / ``V``'s
    columns (numpy or cupy arrays of any float or complex dtype, the same number of rows): 0 for the same space,
    the sine of the largest principal angle otherwise."""
    def basis(A):
        A = np.asarray(A.get() if hasattr(A, "get") else A)
        return np.linalg.qr(A.astype(np.complex128 if np.iscomplexobj(A) else np.float64))[0]

    Qu, Qv = basis(U), basis(V)
    return float(np.linalg.norm(Qv - Qu @ (Qu.conj().T @ Qv), 2))
