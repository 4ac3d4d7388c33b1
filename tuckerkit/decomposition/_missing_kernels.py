"""EM imputation's compiled fill (numba, cached on disk; imported on first use by
:class:`tuckerkit.decomposition._missing.EStep`), and the observed entries' count, mean and norm for the first
fill (:func:`~tuckerkit.decomposition._missing.prepare_masked`) in two passes instead of a gather of them
(100-170 ms on 200^3 with NumPy's boolean indexing and masked copies, 30-50 ms here).

One pass over a piece of the filled tensor and the model's values there: the missing entries take the model's
values and the model's array is overwritten by the residual, exactly zero at the missing entries. Why compiled:
NumPy's masked forms (``np.copyto(..., where=)``, ``np.where``) branch on every entry and ran at 4-7 ns an
entry on a random mask (a piece of 32k entries: 136-246 us, against ~10 us for a subtraction).

The new values go to a scratch array first and are copied back in a second loop: written straight into ``x``,
the compiler sees that an observed entry stores what it loaded and turns the loop into masked stores
(``vmaskmovpd``), which AMD's cores run microcoded: 53 us a piece against 21 us this way (float64, 2-core
AMD EPYC). Serial and exact (a select and one subtraction per entry): the same bits as the NumPy forms.

(Tried: the model's values formed in the same kernel, and the sum of squares taken in it in eight lanes;
without fastmath neither vectorized, and the piece took 2-3x the time of BLAS's GEMM, this kernel and
``np.dot``.)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly


@njit(cache=True, nogil=True, **NO_RUNTIME)
def fill_residual(x, t, observed, scratch):  # pragma: no cover - compiled
    """``x[k] = t[k]`` where not ``observed[k]``; ``t[k] = x[k] - t[k]`` where observed and ``0`` elsewhere (x, t:
    1-D, one dtype; observed: 1-D bool; scratch: at least as long as x, x's dtype)."""
    n = x.shape[0]
    for k in range(n):
        xv = x[k]
        tv = t[k]
        o = observed[k]
        scratch[k] = xv if o else tv
        t[k] = xv - tv if o else 0.0  # (a float32 difference is exact in float64 and back)
    for k in range(n):
        x[k] = scratch[k]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def residual_only(x, t, observed):  # pragma: no cover - compiled
    """``t[k] = x[k] - t[k]`` where observed, ``0`` elsewhere; x unchanged (a model judged without filling it
    in: CP-ALS's line search on masked data)."""
    for k in range(x.shape[0]):
        xv = x[k]
        tv = t[k]
        t[k] = xv - tv if observed[k] else 0.0


@njit(cache=True, nogil=True, **NO_RUNTIME)
def observed_sums(x, observed, inv_scale, s):  # pragma: no cover - compiled
    """``(count, largest magnitude, any NaN or infinity, sum, sum of squares)`` of the observed entries times
    ``inv_scale`` (a power of two: exact), in float64 (x: 1-D; observed: 1-D bool; s: float64 scratch, any
    length). Each block of x is first copied to ``s`` with the missing entries selected away (a store of a
    select, which vectorizes; a select inside the sums compiled to a branch, which a random mask mispredicts
    half the time: 2.5x the time), then summed in four lanes (the entries ``k`` with ``k % 4`` alike, within
    each block) added at the end in lane order: a fixed order, the same bits on every call."""
    count = np.int64(0)
    t0 = t1 = t2 = t3 = 0.0
    q0 = q1 = q2 = q3 = 0.0
    a0 = a1 = a2 = a3 = 0.0
    bad = False
    n = x.shape[0]
    b = s.shape[0]
    for lo in range(0, n, b):
        hi = min(n, lo + b)
        for k in range(lo, hi):
            xv = np.float64(x[k]) * inv_scale
            s[k - lo] = xv if observed[k] else 0.0
        for k in range(lo, hi):
            count += np.int64(observed[k])
        m = hi - lo
        m4 = m - m % 4
        for j in range(0, m4, 4):
            v0 = s[j]
            v1 = s[j + 1]
            v2 = s[j + 2]
            v3 = s[j + 3]
            t0 += v0
            t1 += v1
            t2 += v2
            t3 += v3
            q0 += v0 * v0
            q1 += v1 * v1
            q2 += v2 * v2
            q3 += v3 * v3
            w0, w1, w2, w3 = abs(v0), abs(v1), abs(v2), abs(v3)
            a0 = w0 if w0 > a0 else a0
            a1 = w1 if w1 > a1 else a1
            a2 = w2 if w2 > a2 else a2
            a3 = w3 if w3 > a3 else a3
            bad |= not (w0 + w1 + w2 + w3 <= 1.7976931348623157e308)  # (a NaN compares false)
        for j in range(m4, m):
            v = s[j]
            t0 += v
            q0 += v * v
            w = abs(v)
            a0 = w if w > a0 else a0
            bad |= not (w <= 1.7976931348623157e308)
    amax = max(max(a0, a1), max(a2, a3))
    return count, amax, bad, ((t0 + t1) + t2) + t3, ((q0 + q1) + q2) + q3


@njit(cache=True, nogil=True, **NO_RUNTIME)
def fill_value(x, observed, value, scratch):  # pragma: no cover - compiled
    """``x[k] = value`` where not ``observed[k]`` (x: 1-D; observed: 1-D bool; value: x's dtype; scratch: 1-D,
    x's dtype, any length: blocks of x go through it, as in :func:`fill_residual`)."""
    n = x.shape[0]
    b = scratch.shape[0]
    for lo in range(0, n, b):
        hi = min(n, lo + b)
        for k in range(lo, hi):
            xv = x[k]
            scratch[k - lo] = xv if observed[k] else value
        for k in range(lo, hi):
            x[k] = scratch[k - lo]


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
