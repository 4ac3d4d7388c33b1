"""HOOI's sweep of a small 3-way dense tensor in one compiled call (numba, cached on disk).

On a tensor of a few thousand elements an iteration of HOOI is a few tens of thousands of flops: five
products with the tensor and its projections and three small eigenproblems. Run as numpy and LAPACK calls
through the planner-free direct route (:mod:`._direct`) and :func:`~._subspace.leading_left_singular`, each step
costs a few microseconds of Python and dispatch, some forty of them an iteration: on 10^3 to 30^3 tensors
(rank 3-5) an iteration took 180-380 us for about 20-50 us of arithmetic. Here the whole sweep is one call:

* the projections in float64 (a float32 tensor's too), two reads of the tensor as the dimension tree does it:
  ``T = X x_2 U_2^T`` gives mode 0's unfolding (``T x_1 U_1^T``) and, with the new ``U_0``, mode 1's
  (``T x_0 U_0^T``); ``S = X x_0 U_0^T`` gives mode 2's (``S x_1 U_1^T``), and the core ``Y_2 x_2 U_2^T``;
* each factor by the route :func:`~._subspace.leading_left_singular` takes for that unfolding on the host: the
  tiny Jacobi route (:func:`._tiny_kernels.tiny_left_singular`) on Grams of order at most
  :data:`~._subspace.TINY_ORDER`, else the certified subspace iteration warm-started from the factor it replaces
  (:func:`._tiny_kernels.certified_top`, the same start block: the factor and the first column of the order's
  seeded block) on the smaller side's Gram, followed on the other side (``I_n > P``) by ``orth(M V)``
  (Householder) and the sign fix. Where that iteration refuses (no gap after the r-th pair) or the mode's
  :class:`~._subspace.SubspaceBackoff` skips it, the call returns the mode's unfolding: the caller takes LAPACK's
  route for that factor (:func:`~._subspace.leading_left_singular`) and calls again for the modes after it.

The arithmetic is serial, in a fixed order (the dot products along the tensor's rows in a compile-time order):
the same bits on every call and for any number of workers. The bits differ from the direct route's (numpy's
products in the tensor's dtype); the subspaces agree to rounding over each gap (tests compare both routes and
the einsum reference).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._tiny_kernels import _householder_q, _sign_fix_cols, certified_top, tiny_left_singular

#: the compiled sweep is taken where ``X.size * max(ranks)**2`` is at most this (its loops' share grows with the
#: rank's square: the unfoldings' products and Grams). Measured per iteration against the direct route (10
#: iterations from HOSVD, planted tensors at 1 % noise, float64, medians of 3 x 15 in one process): 10^3 R = 3
#: 0.42x the time, 16^3 R = 6 0.40x, 20^3 R = 5 0.46x, 12^3 R = 10 0.68x, 36^3 R = 4 0.47x, 30^3 R = 5 0.54x,
#: (60, 20, 20) R = 5 0.65x, (200, 10, 10) R = 4 0.75x, 25^3 R = 8 0.81x, (100, 20, 10) R = 5 0.86x, 30^3 R = 6
#: 0.95x (all within the bound); beyond it 24^3 R = 10 1.02x, 40^3 R = 5 1.05x, 32^3 R = 8 1.07x, 50^3 R = 5
#: 1.21x, 40^3 R = 10 2.3x
SMALL_SWEEP_MAX_WORK = 1_200_000
#: routes of a mode's factor step (:func:`small_sweep_routes`)
TINY, GRAM, OTHER = 0, 1, 2


def small_sweep_routes(shape: tuple[int, ...], ranks: tuple[int, ...]) -> tuple[int, ...] | None:
    """The route of each mode's factor step in :func:`small_sweep` (``TINY``, ``GRAM``: the certified iteration on
    the mode's own Gram, ``OTHER``: on the Gram of the other side), or None where the compiled sweep does not
    apply: not 3-way, beyond ``SMALL_SWEEP_MAX_WORK``, or a mode whose unfolding takes neither the
    tiny route nor the compiled iteration's orders (:func:`~._subspace._compiled_order`). The choice mirrors
    :func:`~._subspace.leading_left_singular`'s on the host for that unfolding."""
    from tuckerkit.engine._subspace import _TINY_FACTOR_ELEMS, _TINY_GRAM_MADDS, TINY_ORDER, _compiled_order

    if len(shape) != 3 or len(ranks) != 3 or math.prod(shape) * max(ranks) ** 2 > SMALL_SWEEP_MAX_WORK:
        return None
    routes = []
    for n in range(3):
        I_n, r = shape[n], ranks[n]
        P = math.prod(ranks[m] for m in range(3) if m != n)
        if not 0 < r < min(I_n, P):
            return None  # (full-rank modes and r >= P: the general sweep's own handling)
        k = min(I_n, P)
        if k <= TINY_ORDER and k * (k + 1) // 2 * max(I_n, P) <= _TINY_GRAM_MADDS and (
                I_n <= P or I_n * r <= _TINY_FACTOR_ELEMS):
            routes.append(TINY)
        elif I_n <= P and _compiled_order(I_n, r):
            routes.append(GRAM)
        elif P < I_n and _compiled_order(P, r):
            routes.append(OTHER)
        else:
            return None
    return tuple(routes)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, **NO_RUNTIME)
def _project_last(X, U2, T):  # pragma: no cover - compiled
    """``T[p, c] = sum_k X[p, k] U2[k, c]`` (X as (I0 I1, I2)), float64: dot products along X's rows."""
    I01, I2 = X.shape
    r2 = U2.shape[1]
    for p in range(I01):
        for c in range(r2):
            acc = 0.0
            for k in range(I2):
                acc += np.float64(X[p, k]) * np.float64(U2[k, c])
            T[p, c] = acc


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, **NO_RUNTIME)
def _project_first(X, U0, S):  # pragma: no cover - compiled
    """``S[a, q] = sum_i X[i, q] U0[i, a]`` (X as (I0, I1 I2)), float64: rows of X added along their length."""
    I0, Q = X.shape
    r0 = U0.shape[1]
    for a in range(r0):
        for q in range(Q):
            S[a, q] = 0.0
        for i in range(I0):
            u = np.float64(U0[i, a])
            for q in range(Q):
                S[a, q] += u * np.float64(X[i, q])


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _factor(M, r, route, try_it, start, seed, budget, G, S0, W, V, B, H, Q, U, w):  # pragma: no cover
    """The ``r`` leading left singular vectors of ``M`` (I x P, float64, C-contiguous) into ``U`` by ``route``
    (see the module), ``start`` the factor being replaced; 1 when found, 0 when the caller must take LAPACK's
    route (the tiny route declined, the iteration refused, or ``try_it`` is 0)."""
    I, P = M.shape  # noqa: E741
    if route == 0:
        return 1 if tiny_left_singular(M, r, U, w) else 0
    if not try_it:
        return 0
    if route == 1:  # G = M M^T (its lower triangle, mirrored: exactly symmetric)
        for x in range(I):
            for y in range(x + 1):
                t = 0.0
                for p in range(P):
                    t += M[x, p] * M[y, p]
                G[x, y] = t
                G[y, x] = t
        for x in range(I):
            for j in range(r):
                S0[x, j] = np.float64(start[x, j])
            S0[x, r] = seed[x]
        return certified_top(G, r, S0, budget, False, U, w)
    # route 2: G = M^T M, the start's image W = M^T start, then U = orth(M V), signs fixed
    for p in range(P):
        for q in range(p + 1):
            G[p, q] = 0.0
        for j in range(r):
            W[p, j] = 0.0
    for x in range(I):
        for p in range(P):
            m = M[x, p]
            for q in range(p + 1):
                G[p, q] += m * M[x, q]
            for j in range(r):
                W[p, j] += m * np.float64(start[x, j])
    for p in range(P):
        for q in range(p):
            G[q, p] = G[p, q]
        for j in range(r):
            S0[p, j] = W[p, j]
        S0[p, r] = seed[p]
    if not certified_top(G, r, S0, budget, False, V, w):
        return 0
    for x in range(I):
        for j in range(r):
            t = 0.0
            for p in range(P):
                t += M[x, p] * V[p, j]
            B[x, j] = t
    _householder_q(B, I, r, H, Q)
    for x in range(I):
        for j in range(r):
            U[x, j] = Q[x, j]
    _sign_fix_cols(U, I, r)
    return 1


@njit(cache=True, nogil=True, **NO_RUNTIME)
def small_sweep(X3, first, F0, F1, F2, N0, N1, N2, routes, tries, seed0, seed1, seed2, budget,
                T, S, M0, M1, M2, G0, G1, G2, S00, S01, S02, W, V, B, H, Q, U, w, core):  # pragma: no cover
    """Modes ``first``..2 of one HOOI sweep of ``X3`` (I0 x I1 x I2, C-contiguous): ``F0..F2`` the factors the
    sweep starts from, ``N0..N2`` the new ones (written for the modes it finds), mode n's unfolding left in
    ``M_n``. Returns 3 when the sweep is done (the core in ``core``, (r0 r1, r2)), else the mode whose factor the
    caller must find by LAPACK's route (from ``M_n``), then calling again from the mode after it. Modes before
    ``first`` use ``N``. ``T`` (I0 I1 x r2) is recomputed when the sweep starts at mode 1."""
    I0, I1, I2 = X3.shape
    r0, r1, r2 = F0.shape[1], F1.shape[1], F2.shape[1]
    X2 = X3.reshape((I0 * I1, I2))
    if first <= 1:
        _project_last(X2, F2, T)  # T = X x_2 F2^T as (I0 I1, r2)
    if first == 0:
        for i in range(I0):  # M0[i, b r2 + c] = sum_j F1[j, b] T[i j, c]
            for q in range(r1 * r2):
                M0[i, q] = 0.0
            for j in range(I1):
                row = i * I1 + j
                for b in range(r1):
                    u = np.float64(F1[j, b])
                    for c in range(r2):
                        M0[i, b * r2 + c] += u * T[row, c]
        if not _factor(M0, r0, routes[0], tries[0], F0, seed0, budget, G0, S00, W, V, B, H, Q, U, w):
            return 0
        for i in range(I0):
            for a in range(r0):
                N0[i, a] = U[i, a]
    if first <= 1:
        for j in range(I1):  # M1[j, a r2 + c] = sum_i N0[i, a] T[i j, c]
            for q in range(r0 * r2):
                M1[j, q] = 0.0
        for i in range(I0):
            for j in range(I1):
                row = i * I1 + j
                for a in range(r0):
                    u = np.float64(N0[i, a])
                    for c in range(r2):
                        M1[j, a * r2 + c] += u * T[row, c]
        if not _factor(M1, r1, routes[1], tries[1], F1, seed1, budget, G1, S01, W, V, B, H, Q, U, w):
            return 1
        for j in range(I1):
            for b in range(r1):
                N1[j, b] = U[j, b]
    _project_first(X3.reshape((I0, I1 * I2)), N0, S)  # S = X x_0 N0^T as (r0, I1 I2)
    for k in range(I2):  # M2[k, a r1 + b] = sum_j N1[j, b] S[a, j I2 + k]
        for q in range(r0 * r1):
            M2[k, q] = 0.0
    for a in range(r0):
        for j in range(I1):
            for b in range(r1):
                u = np.float64(N1[j, b])
                for k in range(I2):
                    M2[k, a * r1 + b] += u * S[a, j * I2 + k]
    if not _factor(M2, r2, routes[2], tries[2], F2, seed2, budget, G2, S02, W, V, B, H, Q, U, w):
        return 2
    for k in range(I2):
        for c in range(r2):
            N2[k, c] = U[k, c]
    for q in range(r0 * r1):  # the core: M2^T N2 as (r0 r1, r2)
        for c in range(r2):
            core[q, c] = 0.0
    for k in range(I2):
        for q in range(r0 * r1):
            m = M2[k, q]
            for c in range(r2):
                core[q, c] += m * np.float64(N2[k, c])
    return 3


class SmallSweep:
    """The work arrays and fixed inputs of :func:`small_sweep` for one HOOI call on ``X`` (3-way, C-contiguous,
    float32 or float64) at ``ranks``, whose factor steps take ``routes`` (:func:`small_sweep_routes`)."""

    def __init__(self, X: np.ndarray, ranks: tuple[int, ...], routes: tuple[int, ...]):
        from tuckerkit.engine._direct import DirectSweep
        from tuckerkit.engine._subspace import COMPILED_STEPS, compiled_seed
        from tuckerkit.engine._sweeps import Sweep

        I0, I1, I2 = X.shape
        r0, r1, r2 = ranks
        from tuckerkit.engine._contract import read_only

        # (a read-only ndarray view whatever came in, a memory map too: one compiled signature a dtype)
        self.X, self.ranks, self.routes = read_only(np.asarray(X)), ranks, np.asarray(routes, dtype=np.int64)
        self.budget = COMPILED_STEPS
        P = (r1 * r2, r0 * r2, r0 * r1)
        f8 = np.float64
        self.T = np.empty((I0 * I1, r2), f8)
        self.S = np.empty((r0, I1 * I2), f8)
        self.M = [np.empty((X.shape[n], P[n]), f8) for n in range(3)]
        order = [min(X.shape[n], P[n]) if routes[n] != TINY else 1 for n in range(3)]
        self.G = [np.empty((g, g), f8) for g in order]
        self.S0 = [np.empty((g, ranks[n] + 1), f8) for n, g in enumerate(order)]
        self.seeds = [compiled_seed(g, ranks[n] + 1)[:, 0].copy() if routes[n] != TINY else np.zeros(1)
                      for n, g in enumerate(order)]
        pmax, imax, rmax = max(P), max(X.shape), max(ranks)
        self.W, self.V = np.empty((pmax, rmax), f8), np.empty((pmax, rmax), f8)
        self.B, self.H, self.Q = (np.empty((imax, rmax), f8) for _ in range(3))
        self.U, self.w = np.empty((imax, rmax), f8), np.empty(rmax, f8)
        self.core = np.empty((r0 * r1, r2), f8)
        rank = max(ranks)
        # what a result's ``plans`` records (kind "ttmc_compiled"), and two reads of X a sweep
        self.sweep = Sweep((DirectSweep("ttmc_compiled", X.shape, X.dtype, rank, 4 * X.size * rank, "cpu"),), 2)

    def run(self, old: list[Any], new: list[Any], tries: list[bool], first: int) -> int:
        """One call of :func:`small_sweep` from mode ``first``: ``old`` the factors the sweep started from, ``new``
        the sweep's new ones (those before ``first`` already found; fresh arrays of ``X``'s dtype are put in for
        the others, and filled for the modes it finds). Returns the mode it stopped at (3: done)."""
        X = self.X
        for n in range(first, 3):
            new[n] = np.empty(old[n].shape, dtype=X.dtype)
        return int(small_sweep(X, first, *old, *new, self.routes, np.asarray(tries, dtype=np.int64), *self.seeds,
                               self.budget, self.T, self.S, *self.M, *self.G, *self.S0, self.W, self.V, self.B,
                               self.H, self.Q, self.U, self.w, self.core))


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
