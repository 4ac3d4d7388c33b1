"""The leading left singular subspace of a tiny unfolding in one compiled call (numba, cached on disk; imported
on first use by :func:`tuckerkit.engine._subspace.leading_left_singular`).

HOOI on a small tensor spends most of its time in the factor step's fixed costs, not its flops: on 10^3 to
30^3 (rank 3-5) :func:`~tuckerkit.engine._subspace.leading_left_singular` was 53-55 % of a call, each step a
handful of LAPACK calls through Python wrappers (numpy's ``eigh`` of a 9 x 9 Gram 17 us, scipy's ``sytrd`` +
``stemr`` + ``ormqr`` 31 us, the thin QR 13 us, the sign fix 7 us) for a few thousand flops. Here, for a Gram
of order at most ``TINY_ORDER`` (:mod:`._subspace`), one call forms the Gram of the smaller side, finds its
eigenpairs by cyclic Jacobi rotations, takes the leading ``r`` (a thin Householder QR of ``M V`` on the other
side, as the LAPACK route does) and fixes the signs.

Cyclic Jacobi: each sweep zeroes every off-diagonal entry once, in row order, with the rotation of Golub and
Van Loan (Algorithm 8.5.2, the smaller of the two angles); sweeps stop when the off-diagonal part is below
``eps`` of the matrix's Frobenius norm. Its eigenvalues carry errors of the order of ``eps`` times that norm
and its eigenvectors of that over the gap, as LAPACK's symmetric solvers. Everything is computed in float64 (a
float32 unfolding too: its Gram's entries carry no float32 rounding), serially, in a fixed order: the same bits
on every call. Not finite, or not converged within :data:`MAX_SWEEPS`: the kernel declines and the caller takes
the LAPACK route.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._simd import stack_matrix

#: sweeps of rotations before the kernel declines (quadratic convergence: a 16 x 16 Gram takes six to ten)
MAX_SWEEPS = 40


@njit(cache=True, nogil=True, inline="always")
def _jacobi(A, V, n):  # pragma: no cover - compiled
    """Eigenpairs of the symmetric ``A[:n, :n]`` (overwritten: its diagonal becomes the eigenvalues) into the
    columns of ``V[:n, :n]``; False when not converged within ``MAX_SWEEPS``."""
    frob = 0.0
    for a in range(n):
        for b in range(n):
            V[a, b] = 1.0 if a == b else 0.0
            frob += A[a, b] * A[a, b]
    tol = (2.220446049250313e-16 ** 2) * frob
    for _ in range(MAX_SWEEPS):
        off = 0.0
        for p in range(n):
            for q in range(p + 1, n):
                off += A[p, q] * A[p, q]
        if 2.0 * off <= tol:
            return True
        for p in range(n - 1):
            for q in range(p + 1, n):
                apq = A[p, q]
                if apq == 0.0:
                    continue
                theta = (A[q, q] - A[p, p]) / (2.0 * apq)
                if abs(theta) > 1e150:
                    t = 0.5 / theta
                else:
                    t = 1.0 / (abs(theta) + np.sqrt(theta * theta + 1.0))
                    if theta < 0.0:
                        t = -t
                c = 1.0 / np.sqrt(t * t + 1.0)
                s = t * c
                for k in range(n):  # columns p and q
                    akp = A[k, p]
                    akq = A[k, q]
                    A[k, p] = c * akp - s * akq
                    A[k, q] = s * akp + c * akq
                for k in range(n):  # rows p and q
                    apk = A[p, k]
                    aqk = A[q, k]
                    A[p, k] = c * apk - s * aqk
                    A[q, k] = s * apk + c * aqk
                A[p, q] = 0.0
                A[q, p] = 0.0
                for k in range(n):
                    vkp = V[k, p]
                    vkq = V[k, q]
                    V[k, p] = c * vkp - s * vkq
                    V[k, q] = s * vkp + c * vkq
    return False


@njit(cache=True, nogil=True, **NO_RUNTIME)
def tiny_left_singular(M, r, U, w):  # pragma: no cover - compiled
    """The ``r`` leading left singular vectors of ``M`` (I x P, C-contiguous, real; ``min(I, P)`` small, its
    n x n work arrays on the stack: the caller bounds it; ``r < min(I, P)``) into ``U`` (I x r, M's dtype),
    signs fixed (each column's entry of largest magnitude positive, the first on a tie), and the matching
    eigenvalues of ``M M^T`` into ``w`` (float64, decreasing, clipped at zero). ``I <= P``: the eigenvectors of
    ``M M^T``; else those of ``M^T M``, ``V``, and ``U`` the Q of the thin Householder QR of ``M V``. Returns
    False (``U`` and ``w`` not to be used) when M is not finite or the rotations do not converge."""
    I, P = M.shape  # noqa: E741
    first = I <= P
    n = I if first else P
    A = stack_matrix(n, n, 0.0)
    V = stack_matrix(n, n, 0.0)
    for a in range(n):
        for b in range(a + 1):
            t = 0.0
            if first:
                for k in range(P):
                    t += np.float64(M[a, k]) * np.float64(M[b, k])
            else:
                for k in range(I):
                    t += np.float64(M[k, a]) * np.float64(M[k, b])
            if not np.isfinite(t):
                return False
            A[a, b] = t
            A[b, a] = t
    if not _jacobi(A, V, n):
        return False
    # the leading r, decreasing (the lower index first on a tie): a selection over the eigenvalues
    idx = stack_matrix(1, n, 0.0)
    for k in range(n):
        idx[0, k] = 0.0
    order = stack_matrix(1, r, 0.0)
    for j in range(r):
        best = -1
        for k in range(n):
            if idx[0, k] == 0.0 and (best < 0 or A[k, k] > A[best, best]):
                best = k
        idx[0, best] = 1.0
        order[0, j] = best
        w[j] = max(A[best, best], 0.0)
    if first:
        for j in range(r):
            k = int(order[0, j])
            for a in range(I):
                U[a, j] = V[a, k]
    else:
        # B = M V[:, order], then its thin QR by Householder reflections (a zero column leaves the identity's
        # column: an orthonormal completion, as LAPACK's)
        B = stack_matrix(I, r, 0.0)
        for a in range(I):
            for j in range(r):
                k = int(order[0, j])
                t = 0.0
                for p in range(P):
                    t += np.float64(M[a, p]) * V[p, k]
                B[a, j] = t
        H = stack_matrix(I, r, 0.0)  # the reflectors' vectors (unit norm, or zero for none)
        for j in range(r):
            nrm = 0.0
            for a in range(j, I):
                nrm += B[a, j] * B[a, j]
            nrm = np.sqrt(nrm)
            for a in range(I):
                H[a, j] = 0.0
            if nrm == 0.0:
                continue
            alpha = -nrm if B[j, j] >= 0.0 else nrm
            for a in range(j, I):
                H[a, j] = B[a, j]
            H[j, j] -= alpha
            vn = 0.0
            for a in range(j, I):
                vn += H[a, j] * H[a, j]
            vn = np.sqrt(vn)
            if vn == 0.0:
                continue
            for a in range(j, I):
                H[a, j] /= vn
            for c in range(j, r):  # B := (I - 2 h h^T) B
                d = 0.0
                for a in range(j, I):
                    d += H[a, j] * B[a, c]
                for a in range(j, I):
                    B[a, c] -= 2.0 * d * H[a, j]
        # Q = H_0 H_1 ... H_{r-1} applied to the first r columns of the identity
        Q = stack_matrix(I, r, 0.0)
        for a in range(I):
            for c in range(r):
                Q[a, c] = 1.0 if a == c else 0.0
        for j in range(r - 1, -1, -1):
            for c in range(r):
                d = 0.0
                for a in range(j, I):
                    d += H[a, j] * Q[a, c]
                for a in range(j, I):
                    Q[a, c] -= 2.0 * d * H[a, j]
        for a in range(I):
            for c in range(r):
                U[a, c] = Q[a, c]
    for j in range(r):  # the sign fix: each column's entry of largest magnitude positive (the first on a tie)
        best = 0
        for a in range(1, I):
            if abs(U[a, j]) > abs(U[best, j]):
                best = a
        if U[best, j] < 0:
            for a in range(I):
                U[a, j] = -U[a, j]
    return True


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
