"""The sums of squares of a tensor's pieces in one compiled pass (numba, cached on disk; imported on first use by
:func:`tuckerkit.engine._operand.sqnorm_scaled` for tensors of at least ``COMPILED_NORM_MIN`` elements).

A decomposition whose start needs no Gram (factors given, a random start) reads its tensor once for the norm
before it iterates (the fit's denominator and the NaN / Inf check). Before this kernel each piece of 64Ki
elements was a BLAS dot product of the piece with itself, float32 pieces first copied to float64: measured on
the 2-core AVX-512 machine (200^3, two workers, medians of 21 interleaved with one streaming read of the tensor
split over both cores), float64 2.04 ms against a read of 1.68 ms, float32 2.56 ms against 0.81 ms (the copies).
Here every piece is one loop that widens each element to float64 and adds its square: a float32 tensor is read
once and nothing is copied.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, **NO_RUNTIME)
def piece_sums(x, chunk, out, t_lo, t_hi):  # pragma: no cover (compiled)
    """``out[t] = sum(float64(x[j])**2)`` over ``j`` in ``[t * chunk, min(x.size, (t + 1) * chunk))``, for each
    piece ``t_lo <= t < t_hi`` of the 1-D array ``x`` (float32 or float64). LLVM splits each piece's sum into
    vector lanes (``reassoc``): an order fixed when it compiles, so the same bits on every call on a given
    machine, whichever thread runs the piece. Unsigned indices: no negative-index wraparound for LLVM to keep,
    which would leave the loop scalar. A NaN or an infinity makes its piece's sum NaN or infinite (no ``nnan``
    / ``ninf`` flag lets LLVM assume otherwise)."""
    n = x.size
    for t in range(t_lo, t_hi):
        lo = t * chunk
        hi = min(n, lo + chunk)
        v = np.float64(x[lo])
        acc = v * v
        for i in range(lo + 1, hi):
            v = np.float64(x[np.uint64(i)])
            acc += v * v
        out[t] = acc


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
