"""HALS's compiled inner sweeps (numba, serial, cached on disk); imported on first use so that
``import tuckerkit`` does not load numba.

The sweeps are R x I x R multiply-adds each (a few hundred microseconds of NumPy calls per factor update at
R = 10, a few microseconds compiled): one call runs every inner sweep of one factor update. The sums run in
a fixed order (no fastmath reassociation), so the same call gives the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import load_lightly


@njit(cache=True, nogil=True)
def hals_sweeps(Ut, UtM, V, inv, sweeps, stop, zero):  # pragma: no cover - compiled
    """Up to ``sweeps`` HALS sweeps over the rows of ``Ut`` (R x I, C-contiguous, updated in place): row ``k``
    becomes ``max(0, Ut[k] + (UtM[k] - V[k] @ Ut) * inv[k])``; stops after a sweep whose squared move is at
    most ``stop`` times the first sweep's. ``zero`` is 0 of the data's dtype. Returns the sweeps run."""
    R, I = Ut.shape  # noqa: E741
    acc = np.empty(I, dtype=Ut.dtype)
    first = -1.0
    done = 0
    for _ in range(sweeps):
        moved = 0.0
        for k in range(R):
            for i in range(I):
                acc[i] = zero
            for j in range(R):  # acc = V[k] @ Ut, j in order
                v = V[k, j]
                for i in range(I):
                    acc[i] += v * Ut[j, i]
            w = inv[k]
            for i in range(I):
                old = Ut[k, i]
                new = old + (UtM[k, i] - acc[i]) * w
                if new < zero:
                    new = zero
                d = float(new - old)
                moved += d * d
                Ut[k, i] = new
        done += 1
        if first < 0.0:
            first = moved
        if moved <= stop * first:
            break
    return done


@njit(cache=True, nogil=True)
def core_fista(G, P, grams, ranks, lr, coefs, stop, zero):  # pragma: no cover - compiled
    """Non-negative Tucker's core step (:func:`tuckerkit.decomposition._nonneg._core_fista`) in one call:
    up to ``len(coefs)`` projected accelerated gradient steps ``x = max(y - lr (y x_n grams[n] - P), 0)``,
    ``y = x + coefs[s] (x - x_prev)``, stopping after a step whose squared move is at most ``stop`` times the
    first step's. G, P: the core and the projection, flat (C order); grams: (N, Rmax, Rmax), mode n's Gram in
    its leading ``ranks[n] x ranks[n]``; lr: one-element array; coefs, lr and zero in G's dtype, and every
    operation in it (the sums of squares in float64), in a fixed order: the same bits on every call.
    Returns the new core (flat)."""
    S = G.shape[0]
    N = ranks.shape[0]
    x = G.copy()
    y = G.copy()
    a = np.empty_like(G)
    b = np.empty_like(G)
    step = lr[0]
    first = -1.0
    for s in range(coefs.shape[0]):
        src = y
        for n in range(N):  # dst = src x_n grams[n]: (A, R_n, B) views of the flat core
            dst = a if n % 2 == 0 else b
            Rn = ranks[n]
            A = 1
            for m in range(n):
                A *= ranks[m]
            B = S // (A * Rn)
            for p in range(A):
                for i in range(Rn):
                    o = (p * Rn + i) * B
                    for q in range(B):
                        dst[o + q] = zero
                    for j in range(Rn):
                        g = grams[n, i, j]
                        c = (p * Rn + j) * B
                        for q in range(B):
                            dst[o + q] += g * src[c + q]
            src = dst
        coef = coefs[s]
        moved = 0.0
        for k in range(S):
            v = y[k] - step * (src[k] - P[k])
            if v < zero:
                v = zero
            d = v - x[k]
            moved += np.float64(d * d)
            y[k] = v + coef * d
            x[k] = v
        if first < 0.0:
            first = moved
        if moved <= stop * first:
            break
    return x


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
