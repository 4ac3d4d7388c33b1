"""CP-ALS's compiled factor solve (numba, cached on disk); imported on first use so that ``import tuckerkit``
does not load numba.

``U V = M`` with ``V = L L^T`` (Cholesky, R x R) is, row by row, a forward substitution with ``L`` and a back
substitution with ``L^T``. LAPACK's ``potrs`` runs it on ``M^T`` with 10^4-10^5 right-hand sides of 16 entries
at ~3 GFlop/s (1.7 ms for 20000 x 16); here :data:`BLOCK` rows are solved side by side (one vector lane each),
and the column sums of squares that ``normalize`` needs are added up on the way, in pieces of :data:`CHUNK`
rows added in piece order. Each call runs on one thread: a parallel version (the pieces over numba's threads,
the same bits) measured no faster on the shared 2-core machine, where each parallel launch waits for a
descheduled thread; a long factor's step (:func:`tuckerkit.decomposition._linalg.cp_sweep_update`) cuts its
rows into runs of whole pieces for tuckerkit's own workers instead (100000 x 16: the solve 7.6 -> 3.7 ms on
two, the same bits). No fastmath: every lane does the same IEEE operations in the same order as a row solved
alone.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._simd import stack_matrix

#: rows solved side by side (vector lanes)
BLOCK = 16
#: rows whose sums of squares are added up apart, then in piece order
CHUNK = 512
#: the largest R whose work arrays (2 x R x BLOCK elements, 16 kB at 64 in float64) the solve keeps on the
#: stack, a small part of any thread's (Python's smallest is 32 kB, the usual 8 MB); beyond,
#: :func:`cholesky_solve_rows_heap`, which loads numba's runtime
STACK_MAX_R = 64


@njit(cache=True, nogil=True, inline="always")
def _solve_rows(M, L, U, ss, T, acc):  # pragma: no cover - compiled
    """``U[i] = M[i] (L L^T)^{-1}`` for every row (M, U: I x R, C-contiguous; L: R x R lower triangular) and
    ``ss[p, r]``: the sum of ``U[i, r]**2`` (float64) over the rows of piece ``p`` (``ss``: pieces x R).
    ``T`` (R x BLOCK, U's dtype) and ``acc`` (R x BLOCK, float64): the kernel's work arrays."""
    I, R = M.shape  # noqa: E741
    pieces = ss.shape[0]
    for p in range(pieces):
        r0 = p * CHUNK
        r1 = min(I, r0 + CHUNK)
        for i in range(R):
            for b in range(BLOCK):
                acc[i, b] = 0.0
        for s in range(r0, r1, BLOCK):
            nb = min(BLOCK, r1 - s)
            for i in range(R):
                for b in range(nb):
                    T[i, b] = M[s + b, i]
                for b in range(nb, BLOCK):
                    T[i, b] = 0
            # column by column (each step updates the rows below it: no chain through one entry), the
            # subtractions of an entry in the order of the row-by-row substitution
            for k in range(R):  # forward: L y = m
                d = L[k, k]
                for b in range(BLOCK):
                    T[k, b] /= d
                for i in range(k + 1, R):
                    lik = L[i, k]
                    for b in range(BLOCK):
                        T[i, b] -= lik * T[k, b]
            for k in range(R - 1, -1, -1):  # back: L^T u = y
                d = L[k, k]
                for b in range(BLOCK):
                    T[k, b] /= d
                for i in range(k):
                    lki = L[k, i]
                    for b in range(BLOCK):
                        T[i, b] -= lki * T[k, b]
                for b in range(BLOCK):
                    v = np.float64(T[k, b])
                    acc[k, b] += v * v
            for i in range(R):
                for b in range(nb):
                    U[s + b, i] = T[i, b]
        for i in range(R):  # the lanes in order
            t = 0.0
            for b in range(BLOCK):
                t += acc[i, b]
            ss[p, i] = t


@njit(cache=True, nogil=True, **NO_RUNTIME)
def cholesky_solve_rows(M, L, U, ss):  # pragma: no cover - compiled
    """:func:`_solve_rows` with its work arrays on the stack (R <= :data:`STACK_MAX_R`): no numba runtime."""
    R = M.shape[1]
    _solve_rows(M, L, U, ss, stack_matrix(R, BLOCK, U), stack_matrix(R, BLOCK, 0.0))


@njit(cache=True, nogil=True)
def cholesky_solve_rows_heap(M, L, U, ss):  # pragma: no cover - compiled
    """:func:`_solve_rows` with its work arrays from numba's allocator (any R)."""
    R = M.shape[1]
    _solve_rows(M, L, U, ss, np.empty((R, BLOCK), dtype=U.dtype), np.empty((R, BLOCK), dtype=np.float64))


#: the largest R whose whole update (:func:`sweep_update`: Cholesky, solve, norms) is one compiled call; its
#: work arrays (L, R x R, and the solve's two, R x BLOCK: 2048 elements at most, 16 kB in float64) stay on the
#: stack
FUSED_MAX_R = 32


@njit(cache=True, nogil=True, inline="always")
def _cholesky(V, L, eps):  # pragma: no cover - compiled
    """``L`` (R x R): the lower Cholesky factor of ``V`` read from its lower triangle (as numpy's
    ``cholesky``), upper triangle zeroed; False when a pivot is not positive (or NaN), or when V is singular in
    working precision by :func:`tuckerkit.decomposition._linalg._definite`'s rule (smallest squared pivot at
    most ``eps * R`` times the largest, in float64). Column by column (left-looking, ``?potf2``'s order): each
    entry its inner products in index order, in V's dtype."""
    R = V.shape[0]
    for j in range(R):
        for i in range(j):
            L[i, j] = 0
        s = V[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0:
            return False
        d = np.sqrt(s)
        L[j, j] = d
        for i in range(j + 1, R):
            t = V[i, j]
            for k in range(j):
                t -= L[i, k] * L[j, k]
            L[i, j] = t / d
    lo = np.inf
    hi = 0.0
    for j in range(R):
        q = np.float64(L[j, j]) ** 2
        lo = min(lo, q)
        hi = max(hi, q)
    return lo > hi * eps * R


@njit(cache=True, nogil=True, inline="always")
def _fused(V, M, U, ss, norms, normalize, eps):  # pragma: no cover - compiled
    # (see sweep_update)
    R = M.shape[1]
    L = stack_matrix(R, R, U)
    if not _cholesky(V, L, eps):
        return False
    _solve_rows(M, L, U, ss, stack_matrix(R, BLOCK, U), stack_matrix(R, BLOCK, 0.0))
    if normalize:
        _normalize(U, ss, norms)
    return True


@njit(cache=True, nogil=True, inline="always")
def _normalize(U, ss, norms):  # pragma: no cover - compiled
    """The columns' norms from the pieces' sums of squares (added in piece order; a zero norm taken as 1) into
    ``norms``, and U's columns divided by them (cast to U's dtype)."""
    nd = stack_matrix(1, U.shape[1], U)  # the norms in U's dtype
    _norms(ss, norms, nd)
    _scale(U, nd)


@njit(cache=True, nogil=True, inline="always")
def _norms(ss, norms, nd):  # pragma: no cover - compiled
    for r in range(norms.shape[0]):
        t = 0.0
        for p in range(ss.shape[0]):
            t += ss[p, r]
        t = np.sqrt(t)
        norms[r] = t if t != 0 else 1.0
        nd[0, r] = norms[r]


@njit(cache=True, nogil=True, inline="always")
def _scale(U, nd):  # pragma: no cover - compiled
    for i in range(U.shape[0]):
        for r in range(U.shape[1]):
            U[i, r] /= nd[0, r]


@njit(cache=True, nogil=True, inline="always")
def _sweep_v(grams, n, V):  # pragma: no cover - compiled
    """``V``: the Hadamard product of ``grams[m]`` for every ``m != n``, in order of ``m``, from ones."""
    R = V.shape[0]
    for a in range(R):
        for b in range(R):
            V[a, b] = 1
    for m in range(grams.shape[0]):
        if m != n:
            Gm = grams[m]
            for a in range(R):
                for b in range(R):
                    V[a, b] *= Gm[a, b]


@njit(cache=True, nogil=True, inline="always")
def _inner(M, U, inner):  # pragma: no cover - compiled
    """``inner[r] = sum_i M[i, r] U[i, r]`` in float64, the rows in order."""
    R = U.shape[1]
    for r in range(R):
        inner[r] = 0.0
    for i in range(U.shape[0]):
        for r in range(R):
            inner[r] += np.float64(M[i, r]) * np.float64(U[i, r])


@njit(cache=True, nogil=True, **NO_RUNTIME)
def sweep_factor(grams, n, L, eps):  # pragma: no cover - compiled
    """:func:`sweep_update`'s ``V`` and its Cholesky factor into ``L`` (R x R; False as there): the first part of
    its update split for the workers (:func:`tuckerkit.decomposition._linalg.cp_sweep_update`)."""
    V = stack_matrix(L.shape[0], L.shape[0], L)
    _sweep_v(grams, n, V)
    return _cholesky(V, L, eps)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def sweep_norms(ss, norms, nd):  # pragma: no cover - compiled
    """:func:`sweep_update`'s column norms from the row solve's sums of squares, into ``norms`` (float64) and
    ``nd`` (1 x R, U's dtype); the same code, the same bits."""
    _norms(ss, norms, nd)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def sweep_scale(U, nd):  # pragma: no cover - compiled
    """U's columns divided by ``nd`` (1 x R), row by row: any run of rows alone, the same bits."""
    _scale(U, nd)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def sweep_inner(M, U, inner):  # pragma: no cover - compiled
    """:func:`sweep_update`'s fit terms ``inner[r] = sum_i M[i, r] U[i, r]`` (float64, rows in order)."""
    _inner(M, U, inner)


#: the most multiply-adds (``I R (R + 1) / 2``) of a factor's Gram that :func:`sweep_update` makes itself;
#: beyond, the caller's BLAS (a loop of ours is slower than SYRK once the factor is long)
SWEEP_GRAM_MAX = 1 << 16


@njit(cache=True, nogil=True, **NO_RUNTIME)
def sweep_update(grams, n, M, U, ss, norms, normalize, eps, gram, want_inner, inner):  # pragma: no cover - compiled
    """One step of a CP-ALS sweep on the host in one call, for R <= :data:`FUSED_MAX_R`: ``V``, the Hadamard
    product of ``grams[m]`` (``grams``: N x R x R, U's dtype) for every ``m != n`` in order of ``m`` (from ones,
    as a loop of numpy products; ``n = -1`` and one Gram: ``V`` itself), the whole update solved into ``U``:
    V's Cholesky factor (:func:`_cholesky`), the rows of ``U V = M`` (:func:`_solve_rows`) with their columns'
    sums of squares in ``ss``, and with ``normalize`` the columns' norms into ``norms`` (float64; the pieces of
    ``ss`` added in order, a zero norm taken as 1) and U's columns divided by them (cast to U's dtype); then,
    with ``gram``, ``grams[n] = U^T U`` (each entry its sum over the rows in order, the lower triangle
    mirrored), and with ``want_inner``, ``inner[r] = sum_i M[i, r] U[i, r]`` in float64 (the fit's
    ``<X, X_hat>`` when ``n`` is the sweep's last mode; rows in order, as numpy's reduction over axis 0).
    Returns False, with ``U``, ``grams`` and ``inner`` untouched, when V is not definite in working
    precision."""
    if not sweep_step(grams, n, M, U, ss, norms, normalize, eps, gram):
        return False
    if want_inner:
        _inner(M, U, inner)
    return True


@njit(cache=True, nogil=True, **NO_RUNTIME)
def sweep_step(grams, n, M, U, ss, norms, normalize, eps, gram):  # pragma: no cover - compiled
    """:func:`sweep_update` without the fit's inner products: ``V``, the solve into ``U`` (False where V is not
    definite, nothing changed), the norms, and with ``gram`` the new Gram into ``grams[n]``. Its work arrays (V,
    L and the solve's two: 2 R^2 + 2 R x BLOCK elements, 24 kB at R = 32 in float64) are on the stack."""
    R = M.shape[1]
    V = stack_matrix(R, R, U)
    _sweep_v(grams, n, V)
    if not _fused(V, M, U, ss, norms, normalize, eps):
        return False
    if gram:
        gram_rows(U, grams[n])
    return True


@njit(cache=True, nogil=True, inline="always")
def gram_rows(U, G):  # pragma: no cover - compiled
    """``G = U^T U`` in U's dtype: each entry its sum over the rows in order (row by row into the lower triangle, a
    row's products side by side), the lower triangle mirrored."""
    R = U.shape[1]
    for a in range(R):
        for b in range(R):
            G[a, b] = 0
    for i in range(U.shape[0]):
        for a in range(R):
            ua = U[i, a]
            for b in range(a + 1):
                G[a, b] += ua * U[i, b]
    for a in range(R):
        for b in range(a):
            G[b, a] = G[a, b]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def gram64(U, G):  # pragma: no cover - compiled
    """``G = U^T U`` in float64 (G: R x R float64, overwritten): each entry the sum over the rows in order of the
    products of the entries widened to float64 (exact for float32 ones), row by row into G's lower triangle
    (a row's products side by side), then mirrored: the fit's Grams of a short float32 factor
    (:func:`tuckerkit.decomposition._cp._fit_grams`)."""
    R = U.shape[1]
    for a in range(R):
        for b in range(R):
            G[a, b] = 0.0
    for i in range(U.shape[0]):
        for a in range(R):
            ua = np.float64(U[i, a])
            for b in range(a + 1):
                G[a, b] += ua * np.float64(U[i, b])
    for a in range(R):
        for b in range(a):
            G[b, a] = G[a, b]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def fit_error(inner, weights, grams, norm):  # pragma: no cover - compiled
    """``||X - X_hat||^2 / ||X||^2`` of a real CP model from ``inner[r] = <M[:, r], U_n[:, r]>`` (float64), its
    weights and the factors' Grams (N x R x R): ``1 - 2 sum_r w_r inner_r + w^T (hadamard of the Grams) w``
    with ``w`` the weights over ``norm`` (``||X||``), every sum in float64 in index order."""
    N = grams.shape[0]
    R = inner.shape[0]
    s = 0.0
    for r in range(R):
        s += inner[r] * (np.float64(weights[r]) / norm)
    q = 0.0
    for a in range(R):
        t = 0.0
        for b in range(R):
            v = 1.0
            for m in range(N):
                v *= np.float64(grams[m, a, b])
            t += v * (np.float64(weights[b]) / norm)
        q += (np.float64(weights[a]) / norm) * t
    return 1.0 - 2.0 * (s / norm) + q


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
