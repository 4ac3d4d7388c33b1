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

:func:`certified_top` is the certified subspace iteration of
:func:`~tuckerkit.engine._subspace._top_eigh_subspace` in one compiled call, for Grams of order 13-128 (HOOI's
steps on mid-size tensors, and the 100 x 100 Grams of 200^3's projections at rank 10): there the numpy version
spends most of its time in the fixed costs of a dozen numpy and LAPACK calls per step, and LAPACK's
``?syevr`` in the many level-2 BLAS calls of its reduction (66 us on order 20, 450 us on order 64). The block is
kept as rows, so each product (``Q^T G``, Gram-Schmidt twice, the Ritz vectors) runs along contiguous memory,
and after each Rayleigh-Ritz (Jacobi rotations on the ``k x k`` projection) the block is replaced by its Ritz
vectors. Its two helpers are compiled as functions of their own, not inlined: the first use after installing
compiles the three in 6 s here (10 s inlined, with the same bits and speed), later processes load them from
the cache in milliseconds.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._simd import stack_matrix

#: sweeps of rotations before the kernel declines (quadratic convergence: a 16 x 16 Gram takes six to ten)
MAX_SWEEPS = 40


@njit(cache=True, nogil=True, inline="always")
def _jacobi(A, V, n, fresh):  # pragma: no cover - compiled
    """Eigenpairs of the symmetric ``A[:n, :n]`` (overwritten: its diagonal becomes the eigenvalues) into the
    columns of ``V[:n, :n]`` (``fresh``: from the identity; else ``V``'s rotations go on: ``A`` was rotated by
    ``V`` already, :func:`tiny_left_singular_warm`); False when not converged within ``MAX_SWEEPS``."""
    frob = 0.0
    for a in range(n):
        for b in range(n):
            if fresh:
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


@njit(cache=True, nogil=True, inline="always")
def _leading(A, n, m, order):  # pragma: no cover - compiled
    """The indices of the ``m`` largest diagonal entries of ``A[:n, :n]``, decreasing (the lower index first on a
    tie), into ``order[1, :m]``; ``order[0, :n]`` is scratch (marks)."""
    for a in range(n):
        order[0, a] = 0.0
    for j in range(m):
        best = -1
        for a in range(n):
            if order[0, a] == 0.0 and (best < 0 or A[a, a] > A[best, best]):
                best = a
        order[0, best] = 1.0
        order[1, j] = best


@njit(cache=True, nogil=True, inline="always")
def _householder_q(B, I, r, H, Q):  # noqa: E741 # pragma: no cover - compiled
    """The Q (``I x r``, into ``Q``) of the thin QR of ``B[:I, :r]`` (overwritten) by Householder reflections,
    their vectors into ``H`` (unit norm, or zero where a column needs none: a zero column leaves the
    identity's column, an orthonormal completion as LAPACK's)."""
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


@njit(cache=True, nogil=True, inline="always")
def _sign_fix_cols(U, I, r):  # noqa: E741 # pragma: no cover - compiled
    """The sign fix of :func:`~tuckerkit.engine._subspace.sign_fix` on ``U[:I, :r]`` in place: each column's entry
    of largest magnitude positive (the first on a tie)."""
    for j in range(r):
        best = 0
        for a in range(1, I):
            if abs(U[a, j]) > abs(U[best, j]):
                best = a
        if U[best, j] < 0:
            for a in range(I):
                U[a, j] = -U[a, j]


@njit(cache=True, nogil=True, inline="always")
def product_into(A, B, C, m, k, n):  # pragma: no cover - compiled
    """``C[:m, :n] = A[:m, :k] B[:k, :n]``, each entry one in-order sum (float64)."""
    for a in range(m):
        for b in range(n):
            t = 0.0
            for p in range(k):
                t += A[a, p] * B[p, b]
            C[a, b] = t


@njit(cache=True, nogil=True, inline="always")
def gram_lower(M, A, first):  # pragma: no cover - compiled
    """The Gram of ``M``'s rows (``first``: ``M M^T``) or columns (``M^T M``) into ``A`` in float64, each entry one
    in-order sum, the lower triangle mirrored (exactly symmetric); False (``A`` not to be used) when not finite."""
    I, P = M.shape  # noqa: E741
    n = I if first else P
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
    return True


@njit(cache=True, nogil=True, inline="always")
def _tiny_left_body(M, r, U, w, A, V, warm):  # pragma: no cover - compiled
    # tiny_left_singular's body, its n x n work arrays A and V given (V the previous eigenvectors where ``warm``)
    I, P = M.shape  # noqa: E741
    first = I <= P
    n = I if first else P
    if not gram_lower(M, A, first):
        return False
    if warm:  # A := V^T A V (its lower triangle, mirrored), T = A V first
        # V re-orthonormalized first (modified Gram-Schmidt, twice: n <= 12, well under a microsecond): the
        # rotations keep it orthogonal only to rounding, and a start carried over hundreds of HOOI sweeps drifted
        # (factors 674 ulps from orthonormal after 100 iterations on a 12 x 11 x 10 tensor)
        for _ in range(2):
            for a in range(n):
                for b in range(a):
                    t = 0.0
                    for k in range(n):
                        t += V[k, b] * V[k, a]
                    for k in range(n):
                        V[k, a] -= t * V[k, b]
                t = 0.0
                for k in range(n):
                    t += V[k, a] * V[k, a]
                t = math.sqrt(t)
                if not t > 0.0:
                    return False
                for k in range(n):
                    V[k, a] /= t
        T = stack_matrix(n, n, 0.0)
        product_into(A, V, T, n, n, n)
        for a in range(n):
            for b in range(a + 1):
                t = 0.0
                for k in range(n):
                    t += V[k, a] * T[k, b]
                A[a, b] = t
                A[b, a] = t
    if not _jacobi(A, V, n, not warm):
        return False
    # the leading r, decreasing (the lower index first on a tie): a selection over the eigenvalues
    order = stack_matrix(2, n, 0.0)
    _leading(A, n, r, order)
    for j in range(r):
        w[j] = max(A[int(order[1, j]), int(order[1, j])], 0.0)
    if first:
        for j in range(r):
            k = int(order[1, j])
            for a in range(I):
                U[a, j] = V[a, k]
    else:
        # B = M V[:, order], then its thin QR by Householder reflections (a zero column leaves the identity's
        # column: an orthonormal completion, as LAPACK's)
        B = stack_matrix(I, r, 0.0)
        for a in range(I):
            for j in range(r):
                k = int(order[1, j])
                t = 0.0
                for p in range(P):
                    t += np.float64(M[a, p]) * V[p, k]
                B[a, j] = t
        H = stack_matrix(I, r, 0.0)  # the reflectors' vectors (unit norm, or zero for none)
        Q = stack_matrix(I, r, 0.0)
        _householder_q(B, I, r, H, Q)
        for a in range(I):
            for c in range(r):
                U[a, c] = Q[a, c]
    _sign_fix_cols(U, I, r)
    return True




@njit(cache=True, nogil=True, **NO_RUNTIME)
def tiny_left_singular_warm(M, r, U, w, V, warm):  # pragma: no cover - compiled
    """:func:`tiny_left_singular` keeping the Jacobi eigenvectors of the Gram of ``M``'s smaller side in ``V``
    (``n x n``, float64, ``n = min(I, P)``): where ``warm``, the rotations start from ``V`` (the previous call's,
    for an ``M`` that changed little: HOOI's next sweep) on ``V^T A V`` instead of the identity on ``A``, and
    converge in a sweep or two instead of four to ten; ``V`` holds this call's eigenvectors after it (when it
    returns True). The same eigenpairs to rounding; the bits depend on the start."""
    I, P = M.shape  # noqa: E741
    n = min(I, P)
    return _tiny_left_body(M, r, U, w, stack_matrix(n, n, 0.0), V, warm)


def tiny_left_singular(M: np.ndarray, r: int, U: np.ndarray, w: np.ndarray) -> bool:
    """The ``r`` leading left singular vectors of ``M`` (I x P, C-contiguous, real; ``min(I, P)`` small, its
X
    signs fixed (each column's entry of largest magnitude positive, the first on a tie), and the matching
    eigenvalues of ``M M^T`` into ``w`` (float64, decreasing, clipped at zero). ``I <= P``: the eigenvectors of
    ``M M^T``; else those of ``M^T M``, ``V``, and ``U`` the Q of the thin Householder QR of ``M V``. Returns
    False (``U`` and ``w`` not to be used) when M is not finite or the rotations do not converge.

    :func:`tiny_left_singular_warm` from the identity (one compiled kernel for both: the same rotations, the
    same bits; a second kernel cost some 2 s of compiling on first use)."""
    n = min(M.shape)
    return bool(tiny_left_singular_warm(M, r, U, w, np.empty((n, n)), False))


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, **NO_RUNTIME)
def _rdot(X, a, Y, b, n):  # pragma: no cover - compiled
    """``sum_i X[a, i] Y[b, i]`` for ``i < n`` along two contiguous rows, vectorized: the sum's order is fixed
    when it compiles (the same bits on every call), with as many partial sums as its vectors hold instead of
    one chain of dependent additions (four cycles each). The certified iteration's inner products (the
    Gram-Schmidt projections, the Rayleigh quotient, the residuals and the certificate's norms) were such
    chains: on a 100 x 100 Gram at r = 10 (a planted 1 %-noise projection) 64.6 -> 32.1 us a call from a
    converged start, 157 -> 84 us from one 1e-4 off, 184 -> 120 us cold; the pairs within the same bounds of
    LAPACK's (their last bits differ from the chains')."""
    s = 0.0
    for i in range(n):
        s += X[a, i] * Y[b, i]
    return s


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, **NO_RUNTIME)
def _residual2(Z, Q, j, theta, n):  # pragma: no cover - compiled
    """``sum_i (Z[j, i] - theta Q[j, i])^2``, vectorized as :func:`_rdot`."""
    s = 0.0
    for i in range(n):
        d = Z[j, i] - Q[j, i] * theta
        s += d * d
    return s


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _orthonormalize(B, k, n):  # pragma: no cover - compiled
    """The rows of ``B[:k, :n]`` made orthonormal in place by Gram-Schmidt, each row projected off the earlier
    ones twice (classical Gram-Schmidt twice: orthonormal to rounding while ``cond(B) eps < 1``). False when a
    row is (to rounding) in the span of the earlier ones, or not finite."""
    for j in range(k):
        before = _rdot(B, j, B, j, n)
        if not (before > 0.0 and np.isfinite(before)):
            return False
        for _ in range(2):
            for a in range(j):
                d = _rdot(B, a, B, j, n)
                for i in range(n):
                    B[j, i] -= d * B[a, i]
        after = _rdot(B, j, B, j, n)
        if not after > 1e-20 * before:
            return False
        inv = 1.0 / np.sqrt(after)
        for i in range(n):
            B[j, i] *= inv
    return True


@njit(cache=True, nogil=True, inline="always")
def _combine_rows(C, X, out, k, m, n):  # pragma: no cover - compiled
    """``out[j, :n] = sum_a C[j, a] X[a, :n]`` for ``j < k``, ``a < m``: a row of ``X`` at a time, added in the
    order of ``a`` (the same bits on every call), each along a contiguous row."""
    for j in range(k):
        for i in range(n):
            out[j, i] = 0.0
        for a in range(m):
            c = C[j, a]
            for i in range(n):
                out[j, i] += c * X[a, i]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _ritz_rotate(QT, ZT, k, n, A, S, th, order, T):  # pragma: no cover - compiled
    """Rayleigh-Ritz on the block: the pairs of the symmetrized ``Q^T G Q`` (``ZT = Q^T G``) by Jacobi, the values
    into ``th[0]`` (decreasing, the lower index first on a tie), and the rows of ``QT`` and ``ZT`` replaced by
    the Ritz vectors and ``G`` times them, in that order (``T`` a ``k x n`` work array). The next block then
    starts near its Ritz basis, so its rotations converge in a sweep or two. False when not converged."""
    for a in range(k):
        for b in range(a + 1):
            t = _rdot(QT, a, ZT, b, n)
            u = _rdot(QT, b, ZT, a, n)
            if not np.isfinite(t + u):
                return False
            A[a, b] = 0.5 * (t + u)
            A[b, a] = A[a, b]
    if not _jacobi(A, S, k, True):
        return False
    _leading(A, k, k, order)
    for j in range(k):
        th[0, j] = A[int(order[1, j]), int(order[1, j])]
    for j in range(k):  # (A is free now: the vectors' coefficients, one row each, in the values' order)
        for a in range(k):
            A[j, a] = S[a, int(order[1, j])]
    for X in (QT, ZT):
        _combine_rows(A, X, T, k, k, n)
        for j in range(k):
            for i in range(n):
                X[j, i] = T[j, i]
    return True


@njit(cache=True, nogil=True, **NO_RUNTIME)
def certified_top(G, r, S0, budget, first_check, U, w):  # pragma: no cover - compiled
    """The ``r`` leading eigenpairs of the symmetric float64 ``n x n`` Gram ``G`` (C-contiguous, both triangles
    read) by block subspace iteration with Rayleigh-Ritz, certified as
    :func:`~tuckerkit.engine._subspace._top_eigh_subspace` certifies them, into ``U`` (``n x r``) and ``w``
    (decreasing), the signs fixed as :func:`~tuckerkit.engine._subspace.sign_fix` fixes them. ``S0`` (``n x k``,
    ``r < k < n``): the start block (an estimate of the leading vectors in its first columns, or a fixed seeded
    block), orthonormalized first; at most ``budget`` steps. Returns 1 when
    certified, 0 when refused (a flat spectrum after the r-th pair, no convergence within the budget, pairs it
    cannot certify as the leading ones, a norm outside ``2^-400 .. 2^400``, a block that loses rank, or not
    finite): ``U`` and ``w`` are then not to be used. ``first_check``: a Rayleigh-Ritz after the first step too,
    whose Ritz values refuse a flat spectrum at the cost of one step (from a cold start; from a warm one the
    block is first checked after two steps, one Rayleigh-Ritz fewer). The block is kept as rows (``k x n``), so
    every product runs along a contiguous row of ``n``."""
    n = G.shape[0]
    k = S0.shape[1]
    eps = 2.220446049250313e-16
    QT = stack_matrix(k, n, 0.0)
    ZT = stack_matrix(k, n, 0.0)
    T = stack_matrix(k, n, 0.0)
    A = stack_matrix(k, k, 0.0)
    S = stack_matrix(k, k, 0.0)
    th = stack_matrix(1, k, 0.0)
    order = stack_matrix(2, k, 0.0)
    for j in range(k):
        for i in range(n):
            QT[j, i] = S0[i, j]
    if not _orthonormalize(QT, k, n):
        return 0
    normF = 0.0
    for i in range(n):
        normF += _rdot(G, i, G, i, n)
    normF = np.sqrt(normF)
    if not (2.0 ** -400 <= normF <= 2.0 ** 400):  # (also a NaN or Inf)
        return 0
    tol = 8 * n * eps * normF
    for step in range(1, budget + 1):
        _combine_rows(QT, G, ZT, k, n, n)  # Z^T = Q^T G (G symmetric)
        if step == 1 and first_check:  # a flat spectrum (no gap after the r-th pair) stops here
            if not _ritz_rotate(QT, ZT, k, n, A, S, th, order, T):
                return 0
            t0 = th[0, r - 1]
            if not (t0 > 0.0 and abs(th[0, k - 1]) < 0.5 * t0):
                return 0
        elif step % 2 == 0 or step == budget:
            if not _ritz_rotate(QT, ZT, k, n, A, S, th, order, T):
                return 0
            t0 = th[0, r - 1]
            if not t0 > 0.0:
                return 0
            # the Ritz vectors V are QT's first r rows, G V ZT's: the residuals R = G V - V theta
            res2 = 0.0
            sum2 = 0.0
            gv2 = 0.0
            for j in range(r):
                col2 = _residual2(ZT, QT, j, th[0, j], n)
                gv2 += _rdot(ZT, j, ZT, j, n)
                res2 = max(res2, col2)
                sum2 += col2
            res = np.sqrt(res2)
            if res <= tol:
                # each eigenvalue of G off the Ritz pairs lies within ||R||_F of one of P G P's, whose norm is at
                # most sqrt(||G||_F^2 - 2 ||G V||_F^2 + ||V^T G V||_F^2) (its rounding added)
                vgv2 = 0.0
                for a in range(r):
                    for b in range(r):
                        t = _rdot(QT, a, ZT, b, n)
                        vgv2 += t * t
                rest2 = normF * normF - 2 * gv2 + vgv2
                rest = np.sqrt(max(rest2 + 8 * n * eps * normF * normF, 0.0))
                if rest + 2 * np.sqrt(sum2) + tol < t0:
                    for j in range(r):  # signs fixed as sign_fix's: each column's largest entry positive
                        w[j] = th[0, j]
                        best = 0
                        for i in range(1, n):
                            if abs(QT[j, i]) > abs(QT[j, best]):
                                best = i
                        sg = -1.0 if QT[j, best] < 0 else 1.0
                        for i in range(n):
                            U[i, j] = sg * QT[j, i]
                    return 1
                return 0  # converged to pairs it cannot certify as the leading ones
            rho = abs(th[0, k - 1]) / t0  # (about the residuals' shrink per step)
            if not rho < 1.0 or step + np.log(tol / res) / np.log(max(rho, 1e-300)) > budget:
                return 0
        for j in range(k):
            for i in range(n):
                QT[j, i] = ZT[j, i]
        if not _orthonormalize(QT, k, n):
            return 0
    return 0

load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
