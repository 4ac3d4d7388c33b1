"""HOOI's sweeps of a small 3- or 4-way dense tensor with compiled factor steps (numba, cached on disk).

On a tensor of a few thousand elements an iteration of HOOI is a few tens of thousands of flops: five
products with the tensor and its projections and three small eigenproblems. Run as numpy and LAPACK calls
through the planner-free direct route (:mod:`._direct`) and :func:`~._subspace.leading_left_singular`, each step
costs a few microseconds of Python and dispatch, some forty of them an iteration: on 10^3 to 30^3 tensors
(rank 3-5) an iteration took 180-380 us for about 20-50 us of arithmetic. Here (:class:`SmallSweep`) a mode's
step is three calls:

* the product with the tensor where the dimension tree reads it (BLAS, float64; a float32 tensor copied to
  float64 once a call): ``T = X x_2 U_2^T`` before mode 0, whose unfolding is ``T x_1 U_1^T`` and mode 1's (with
  the new ``U_0``) ``T x_0 U_0^T``; ``S = X x_0 U_0^T`` before mode 2, whose unfolding is ``S x_1 U_1^T`` (4
  modes: ``T`` projects modes 2 and 3 at once, on the Kronecker product of their factors, and ``S`` modes 0 and
  1; modes 2 and 3 come from ``S``, :class:`SmallSweep`);
* one compiled call (:func:`_prepare`) makes the mode's unfolding from them and, for the certified iteration,
  its Gram and start block;
* the factor by the route :func:`~._subspace.leading_left_singular` takes for that unfolding on the host: the
  tiny Jacobi route on Grams of order at most :data:`~._subspace.TINY_ORDER`
  (:func:`._tiny_kernels.tiny_left_singular_warm`: the rotations start from the mode's previous eigenvectors,
  one or two sweeps instead of four to ten; 10^3 at rank 3 0.68x the iteration's time), else the certified
  subspace iteration warm-started from the factor it replaces (:func:`._tiny_kernels.certified_top`, the same
  start block: the factor and the first column of the order's seeded block) on the smaller side's Gram,
  followed on the other side (``I_n > P``) by ``orth(M V)`` (Householder, :func:`_other_side`) and the sign
  fix. Where that iteration refuses (no gap after the r-th pair) or the mode's
  :class:`~._subspace.SubspaceBackoff` skips it, LAPACK's route runs on the unfolding.

Every array the kernels see is float64 and the sweep's own, so they compile once for both dtypes (1.1-1.6 s
on first use). The arithmetic is serial in a fixed order and BLAS runs on one thread: the same bits on every
call and for any number of workers. The bits differ from the direct route's (numpy's products in the tensor's
dtype); the subspaces agree to rounding over each gap (tests compare both routes and an einsum + SVD reference).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._tiny_kernels import (
    _householder_q,
    _sign_fix_cols,
    certified_top,
    gram_lower,
    product_into,
    tiny_left_singular_warm,
)

#: the compiled sweep is taken on tensors of at most ``SMALL_SWEEP_MAX_ELEMS`` elements where ``X.size *
#: max(ranks)**4`` is at most ``SMALL_SWEEP_MAX_WORK`` (its loops, the unfoldings' products and Grams, grow with
#: the rank's square and fourth power; the products with X are BLAS's). Measured per iteration against the direct
#: route (the AVX-512 machine, 10 iterations from HOSVD, planted tensors at 1 % noise, float64, medians of 3 x 11
#: interleaved in one process, compiled / direct time): 10^3 R = 3 0.40x (73 against 183 us), 20^3 R = 5 0.49x,
#: 30^3 R = 5 0.46x, 40^3 R = 5 0.60x, 50^3 R = 5 0.67x, 64^3 R = 5 0.88x, (60, 20, 20) R = 5 0.51x,
#: (200, 10, 10) R = 4 0.57x, 32^3 R = 8 0.87x, 24^3 R = 10 0.83x (whole 10-iteration calls 0.49-0.93x); Gaussian
#: tensors 0.49x on 10^3, 1.01-1.02x on 20^3 and 30^3 (every certified step refused: the direct route from the
#: second sweep on). Beyond the bounds (an earlier build, the same comparison): 40^3 R = 8 0.93x, 80^3 R = 4
#: 0.92x, 64^3 R = 6 0.97x, 30^3 R = 10 1.01x, 50^3 R = 8 1.30x, 100^3 R = 3 1.44x, 40^3 R = 10 1.78x
SMALL_SWEEP_MAX_ELEMS = 1 << 18
SMALL_SWEEP_MAX_WORK = 200_000_000
#: ... and a 4-way tensor where ``X.size * max(ranks)**2`` is at most this: its products with X take the
#: Kronecker product of two factors (``r^2`` multiply-adds an element, against about ``r`` for two TTMs in a
#: row). Per iteration against the direct route (as above): 10^4 R = 3 0.58x, 12^4 R = 4 0.73x; beyond, 16^4
#: R = 4 1.23x, 20^4 R = 5 1.70x, 22^4 R = 5 1.55x
SMALL_SWEEP_MAX_WORK_4 = 500_000
#: routes of a mode's factor step (:func:`small_sweep_routes`)
TINY, GRAM, OTHER = 0, 1, 2


def small_sweep_routes(shape: tuple[int, ...], ranks: tuple[int, ...]) -> tuple[int, ...] | None:
    """The route of each mode's factor step in :class:`SmallSweep` (``TINY``, ``GRAM``: the certified iteration on
    the mode's own Gram, ``OTHER``: on the Gram of the other side), or None where the compiled sweep does not
    apply: not 3- or 4-way, beyond ``SMALL_SWEEP_MAX_ELEMS``, ``SMALL_SWEEP_MAX_WORK`` or (4-way)
    ``SMALL_SWEEP_MAX_WORK_4``, or a mode whose unfolding
    takes neither the tiny route nor the compiled iteration's orders (:func:`~._subspace._compiled_order`). The
    choice mirrors :func:`~._subspace.leading_left_singular`'s on the host for that unfolding."""
    from tuckerkit.engine._subspace import _TINY_FACTOR_ELEMS, _TINY_GRAM_MADDS, TINY_ORDER, _compiled_order

    size = math.prod(shape)
    N = len(shape)
    if N not in (3, 4) or len(ranks) != N or size > SMALL_SWEEP_MAX_ELEMS or size * max(ranks) ** 4 > \
            SMALL_SWEEP_MAX_WORK or (N == 4 and size * max(ranks) ** 2 > SMALL_SWEEP_MAX_WORK_4):
        return None
    routes = []
    for n in range(N):
        I_n, r = shape[n], ranks[n]
        P = math.prod(ranks[m] for m in range(N) if m != n)
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


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _prepare(form, P, s0, s1, s2, n0, n1, n2, U, M, route, start, seed, G, S0):  # pragma: no cover - compiled
    """A mode's step up to its eigenproblem, every array float64: its unfolding ``M`` from a partial projection
    ``P`` (flat; three index groups of sizes ``n0, n1, n2`` at strides ``s0, s1, s2``: two modes still free and
    the others' ranks ``t``) and a factor ``U`` of one of the free modes, by ``form``:

    * 0: ``M[i, b n2 + t] = sum_j U[j, b] P[i, j, t]`` (the first free mode; ``U`` the second's),
    * 1: ``M[j, a n2 + t] = sum_i U[i, a] P[i, j, t]`` (the second; ``U`` the first's new factor),
    * 2: ``M[k, t r + d] = sum_l U[l, d] P[t, k, l]`` (``P``'s ranks first; the first free mode),
    * 3: ``M[l, t r + c] = sum_k U[k, c] P[t, k, l]`` (the second),

    and for the certified iteration (``route`` GRAM / OTHER) its Gram ``G`` and start block ``S0`` (``start``, the
    factor being replaced, or its image ``M^T start`` on the other side, then the first column of the order's
    seeded block, ``seed``)."""
    I, Pm = M.shape  # noqa: E741
    rU = U.shape[1]
    for x in range(I):
        for q in range(Pm):
            M[x, q] = 0.0
    if form < 2:  # (0: rows i, U's rows j; 1: rows j, U's rows i)
        for i in range(n0):
            for j in range(n1):
                o = i * s0 + j * s1
                row, ur = (i, j) if form == 0 else (j, i)
                for b in range(rU):
                    u = U[ur, b]
                    for t in range(n2):
                        M[row, b * n2 + t] += u * P[o + t * s2]
    elif form == 2:
        for t in range(n0):
            for k in range(n1):
                for d in range(rU):
                    acc = 0.0
                    for l in range(n2):  # noqa: E741
                        acc += U[l, d] * P[t * s0 + k * s1 + l * s2]
                    M[k, t * rU + d] = acc
    else:
        for t in range(n0):
            for k in range(n1):
                o = t * s0 + k * s1
                for c in range(rU):
                    u = U[k, c]
                    for l in range(n2):  # noqa: E741
                        M[l, t * rU + c] += u * P[o + l * s2]
    r = start.shape[1]
    if route == 1:  # the mode's own Gram M M^T, the start block: the factor, then the seeded column
        if not gram_lower(M, G, True):
            G[0, 0] = np.nan  # (not finite: the certified iteration refuses, LAPACK's route says why)
        for x in range(I):
            for j in range(r):
                S0[x, j] = start[x, j]
            S0[x, r] = seed[x]
    elif route == 2:  # the other side's M^T M; the start block: the factor's image M^T start, the seeded column
        if not gram_lower(M, G, False):
            G[0, 0] = np.nan
        for p in range(Pm):
            for j in range(r):
                S0[p, j] = 0.0
            S0[p, r] = seed[p]
        for x in range(I):
            for p in range(Pm):
                m = M[x, p]
                for j in range(r):
                    S0[p, j] += m * start[x, j]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _other_side(M, V, B, H, Q, U):  # pragma: no cover - compiled
    """``U`` = the Q of the thin QR of ``M V`` (Householder), signs fixed: the left vectors from the right ones."""
    I, P = M.shape  # noqa: E741
    r = V.shape[1]
    product_into(M, V, B, I, P, r)
    _householder_q(B, I, r, H, Q)
    for x in range(I):
        for j in range(r):
            U[x, j] = Q[x, j]
    _sign_fix_cols(U, I, r)


def _shared(t: tuple[int, int], s: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Float64 arrays of shapes ``t`` and ``s`` in one buffer: a sweep's partials ``T`` (modes 0 and 1) and ``S``
    (the rest), never needed at once."""
    buf = np.empty(max(t[0] * t[1], s[0] * s[1]), np.float64)
    return buf[:t[0] * t[1]].reshape(t), buf[:s[0] * s[1]].reshape(s)


class SmallSweep:
    """HOOI's sweeps of one call on ``X`` (3- or 4-way, C or F order; float32 or float64) at
    ``ranks``, whose factor steps take ``routes`` (:func:`small_sweep_routes`): the work arrays, made once, and
    :meth:`sweep`.

    The dimension tree: the tensor's two products, ``T`` (the first two modes free, the others projected on the
    sweep's starting factors) before mode 0 and ``S`` (the first ``N - 2`` modes projected on their new factors,
    the last two free; for 3 modes ``X x_0 U_0^T``) before mode 2; modes 0 and 1 from ``T``, the rest from ``S``
    (:func:`_prepare`'s forms)."""

    def __init__(self, X: np.ndarray, ranks: tuple[int, ...], routes: tuple[int, ...]):
        from tuckerkit.engine._direct import DirectSweep
        from tuckerkit.engine._subspace import COMPILED_STEPS, compiled_seed
        from tuckerkit.engine._sweeps import Sweep

        shape, N = X.shape, X.ndim
        self.dtype, self.shape, self.ranks, self.routes, self.N = X.dtype, shape, ranks, routes, N
        # the tensor as float64 (a float32 one copied once a call: a small tensor) in its own order, as the
        # matrices of its two products (an F-ordered one's: F matrices, BLAS's transposed layout)
        self.fo = not X.flags.c_contiguous
        layout: Literal["C", "F"] = "F" if self.fo else "C"
        X64 = np.asarray(X, dtype=np.float64, order=layout)
        I0, I1 = shape[0], shape[1]
        r0, r1 = ranks[0], ranks[1]
        rest, rrest = math.prod(shape[2:]), math.prod(ranks[2:])
        f8 = np.float64
        if N == 3:
            I2, r2 = shape[2], ranks[2]
            self.X_t, self.X_s = X64.reshape(I0 * I1, I2, order=layout), X64.reshape(I0, I1 * I2, order=layout)
            self.T, self.S = _shared((I0 * I1, r2), (r0, I1 * I2))
            T_st = (r2, I0 * r2, 1) if self.fo else (I1 * r2, r2, 1)
            S_st = (I1 * I2, 1, I1) if self.fo else (I1 * I2, I2, 1)
            # (mode, form, partial, strides, sizes)
            self.steps = [(0, 0, self.T, T_st, (I0, I1, r2)), (1, 1, self.T, T_st, (I0, I1, r2)),
                          (2, 3, self.S, S_st, (r0, I1, I2))]
        else:  # 4-way: T = X (I0 I1, I2 I3) @ (U2 kron U3), S = (N0 kron N1)^T X (F order: the Kronecker factors
            # swapped, so that their rows follow X's F-ordered index pairs; S's rank pairs (b, a), see sweep)
            I2, I3 = shape[2], shape[3]
            self.X_t = self.X_s = X64.reshape(I0 * I1, rest, order=layout)
            self.T, self.S = _shared((I0 * I1, rrest), (r0 * r1, rest))
            T_st, S_st = ((rrest, I0 * rrest, 1), (rest, 1, I2)) if self.fo else ((I1 * rrest, rrest, 1), (rest, I3, 1))
            self.steps = [(0, 0, self.T, T_st, (I0, I1, rrest)), (1, 1, self.T, T_st, (I0, I1, rrest)),
                          (2, 2, self.S, S_st, (r0 * r1, I2, I3)), (3, 3, self.S, S_st, (r0 * r1, I2, I3))]
        self.budget = COMPILED_STEPS
        P = [math.prod(ranks[m] for m in range(N) if m != n) for n in range(N)]
        self.M = [np.empty((shape[n], P[n]), f8) for n in range(N)]
        order = [min(shape[n], P[n]) if routes[n] != TINY else 1 for n in range(N)]
        self.G = [np.empty((g, g), f8) for g in order]
        self.S0 = [np.empty((g, ranks[n] + 1), f8) for n, g in enumerate(order)]
        self.seeds = [compiled_seed(g, ranks[n] + 1)[:, 0].copy() if routes[n] != TINY else np.zeros(1)
                      for n, g in enumerate(order)]
        self.U = [np.empty((shape[n], ranks[n]), f8) for n in range(N)]
        self.V = [np.empty((g, ranks[n]), f8) for n, g in enumerate(order)]
        self.w = np.empty(max(ranks), f8)
        # the tiny route's Jacobi eigenvectors of each mode's last step, its next rotations' start
        self.J = [np.zeros((min(shape[n], P[n]),) * 2 if routes[n] == TINY else (1, 1), f8) for n in range(N)]
        self.warm = [False] * N
        # (the other side's three I_n x r work arrays: views of one set, the largest mode's)
        big = [np.empty(max(shape[n] * ranks[n] for n in range(N)), f8) for _ in range(3)]
        self.work = [tuple(b[:shape[n] * ranks[n]].reshape(shape[n], ranks[n]) for b in big) for n in range(N)]
        rank = max(ranks)
        # what a result's ``plans`` records (kind "ttmc_compiled"), and two reads of X a sweep
        self.record = Sweep((DirectSweep("ttmc_compiled", shape, X.dtype, rank, 4 * X.size * rank, "cpu"),), 2)

    def _certified(self, n: int) -> bool:
        """Mode ``n``'s certified iteration (its Gram and start block made): the leading pairs into ``U[n]`` (the
        left vectors: on the other side from the right ones in ``V[n]``); False where it refuses."""
        r = self.ranks[n]
        if self.routes[n] == GRAM:
            return bool(certified_top(self.G[n], r, self.S0[n], self.budget, False, self.U[n], self.w[:r]))
        if not certified_top(self.G[n], r, self.S0[n], self.budget, False, self.V[n], self.w[:r]):
            return False
        _other_side(self.M[n], self.V[n], *self.work[n], self.U[n])
        return True

    def _products(self, n: int, F: list[Any], N: list[Any]) -> None:
        """The tensor's product before mode ``n`` (0: ``T``, 2: ``S``; none before the others)."""
        swap = self.fo and self.N == 4
        if n == 0:
            np.matmul(self.X_t, F[2] if self.N == 3 else np.kron(F[3], F[2]) if swap else np.kron(F[2], F[3]),
                      out=self.T)
        elif n == 2:
            np.matmul(N[0].T if self.N == 3 else (np.kron(N[1], N[0]) if swap else np.kron(N[0], N[1])).T,
                      self.X_s, out=self.S)

    def sweep(self, factors: list[Any], backoffs: list[Any], policy: Any,
              fixed: frozenset[int] = frozenset()) -> tuple[list[Any], Any, bool]:
        """One sweep from ``factors``: the new factors (fresh C-contiguous arrays of ``X``'s dtype; a ``fixed``
        mode's as given, its unfolding still made for the projections after it), the core
        (``X``'s dtype) and whether the next sweep should take this route too. Each mode's step: the products with
        ``X`` (BLAS, float64), the unfolding and its Gram by :func:`_prepare`, then the tiny route or (unless the
        mode's :class:`~._subspace.SubspaceBackoff` skips it) the certified iteration; where either declines,
        LAPACK's route (:func:`~._subspace.leading_left_singular` on the unfolding). The backoffs see each outcome
        as in the direct route. Where every mode off the tiny route went to LAPACK (a tensor without a gap after
        the r-th pair: Gaussian data) these calls only add their own cost (30^3 at rank 5: 1.2x the direct
        route's time an iteration), so the caller's later sweeps take the direct route."""
        from tuckerkit.engine._policy import blas_pinned
        from tuckerkit.engine._subspace import SkipBackoff, leading_left_singular

        routes, ranks, dtype, f8 = self.routes, self.ranks, self.dtype, np.float64
        # (the factors as float64 C arrays of their own: the kernels' one signature for both dtypes)
        F = [U if U.dtype == f8 and U.flags.c_contiguous and U.flags.writeable else np.array(U, dtype=f8)
             for U in (np.asarray(V) for V in factors)]
        N = list(F)
        lapack = 0
        with blas_pinned():  # (the products with X on one BLAS thread: the same bits in any setting)
            for n, form, part, st, sizes in self.steps:
                self._products(n, F, N)
                # the factor of the other free mode: the second's old one (forms 0, 2), the first's new one (1, 3)
                other = F[n + 1] if form in (0, 2) else N[n - 1]
                _prepare(form, part.reshape(-1), *st, *sizes, other, self.M[n], routes[n], F[n], self.seeds[n],
                         self.G[n], self.S0[n])
                r = ranks[n]
                if n in fixed:
                    continue
                if routes[n] == TINY:
                    ok = self.warm[n] = bool(tiny_left_singular_warm(self.M[n], r, self.U[n], self.w[:r], self.J[n],
                                                                     self.warm[n]))
                elif backoffs[n].wanted():
                    ok = self._certified(n)
                    backoffs[n].record(ok)
                else:
                    ok = False
                if ok:
                    N[n] = self.U[n].copy()
                else:
                    lapack += routes[n] != TINY
                    # (with a start and a backoff that skips, the route goes straight to LAPACK: no cold retry)
                    U, _ = leading_left_singular(self.M[n], 0, r, policy, start=F[n], backoff=SkipBackoff())
                    N[n] = np.array(U, dtype=f8)
            last = self.N - 1
            core = self.M[last].T @ N[last]
            if self.fo and self.N == 4:  # (S's rank pairs (b, a): the core's first two modes swapped back)
                core = core.reshape(ranks[1], ranks[0], *ranks[2:]).transpose(1, 0, 2, 3)
            core = core.reshape(ranks)
        out = [factors[n] if n in fixed else U if dtype == f8 else U.astype(dtype) for n, U in enumerate(N)]
        free = sum(routes[n] != TINY for n in range(self.N) if n not in fixed)
        return out, core.astype(dtype, copy=False), not 0 < lapack == free


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
