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


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
