"""The compiled sum of squares of a model's residual in double precision (numba, cached on disk); imported on
first use so that ``import tuckerkit`` does not load numba.

A Tucker or CP model on a tensor viewed as ``X2 = (I_m, C)`` (its outermost mode in memory against the rest,
flattened) is ``A Z``: ``A`` the mode's factor (``I_m x r``), ``Z`` the rest of the model (``r x C``: the core
times the other factors, or the weighted Khatri-Rao product of the other factors). :func:`residual_blocks` sums
``(X2 - A Z)^2`` without forming ``A Z``: column block by column block (``Z``'s block stays in cache), each row's
piece of the model made in a small work vector, subtracted and squared on the way, every value in float64.
NumPy's form of the same sum (a float64 copy of a slab of X, the model's slab from GEMMs, the difference, its
squares and their sum) took 34-50 ms on a 200^3 float32 tensor at rank 10 (the 2-core machine); this 11-12 ms
on one thread, 6-8 ms on two (6-9 GFMA/s a thread: each block's row of the model goes through a work vector in
L1, a load and a store per four products).
``fastmath`` lets the sum of one block be kept in vector lanes: its order is fixed by the code and the block's
width, so a call repeats its bits; each block's sum is written apart and the caller adds them in block order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly

#: the fast-math flags of the sum: reassociation (vector lanes) and fused multiply-adds, no assumption about
#: NaN or infinities (a non-finite X gives non-finite sums, which the callers refuse)
_FLAGS = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=_FLAGS, **NO_RUNTIME)
def residual_blocks(X, A, Z, width, out, tmp, b_lo, b_hi):  # pragma: no cover - compiled
    """``out[b, 0]`` for ``b_lo <= b < b_hi``: the sum of ``(X[i, c] - sum_k A[i, k] Z[k, c])**2`` in float64
    over every row ``i`` and the columns ``c`` of block ``b`` (``width`` columns each, the last one shorter);
    ``out[b, 1]``: the sum of ``X[i, c]**2`` there (the same read: ``relative_error``'s ``||X||``). ``X``: I x C
    with unit column stride (float32 or float64), ``A``: I x r, ``Z``: r x C (C-contiguous, float64), ``tmp``:
    ``width`` float64 elements of work (one per thread), ``out``: ``ceil(C / width) x 2`` float64. A NaN or an
    infinity in X makes its block's sums non-finite (no ``nnan`` / ``ninf`` flag)."""
    I, C = X.shape  # noqa: E741
    r = A.shape[1]
    for b in range(b_lo, b_hi):
        c0 = b * width
        w = min(C - c0, width)
        s = 0.0
        q = 0.0
        for i in range(I):
            k = 0
            if r >= 4:
                _set_four(A[i, 0], A[i, 1], A[i, 2], A[i, 3], Z[0], Z[1], Z[2], Z[3], c0, w, tmp)
                k = 4
            else:
                _set_row(A[i, 0], Z[0], c0, w, tmp)
                k = 1
            while k + 4 <= r:  # (four rows of Z a pass over tmp: a load and a store of it per four products)
                _add_four(A[i, k], A[i, k + 1], A[i, k + 2], A[i, k + 3], Z[k], Z[k + 1], Z[k + 2], Z[k + 3],
                          c0, w, tmp)
                k += 4
            while k < r:
                _add_row(A[i, k], Z[k], c0, w, tmp)
                k += 1
            ds, dq = _sq_diff(X[i], c0, w, tmp)
            s += ds
            q += dq
        out[b, 0] = s
        out[b, 1] = q


@njit(cache=True, nogil=True, fastmath=_FLAGS, inline="always")
def _set_four(a0, a1, a2, a3, z0, z1, z2, z3, c0, w, tmp):  # pragma: no cover - compiled
    for c in range(w):
        j = np.uint64(c0 + c)
        tmp[np.uint64(c)] = a0 * z0[j] + a1 * z1[j] + a2 * z2[j] + a3 * z3[j]


@njit(cache=True, nogil=True, fastmath=_FLAGS, inline="always")
def _set_row(a, z, c0, w, tmp):  # pragma: no cover - compiled
    for c in range(w):
        tmp[np.uint64(c)] = a * z[np.uint64(c0 + c)]


@njit(cache=True, nogil=True, fastmath=_FLAGS, inline="always")
def _add_four(a0, a1, a2, a3, z0, z1, z2, z3, c0, w, tmp):  # pragma: no cover - compiled
    # tmp[c] += sum of a_j z_j[c0 + c], c < w (unsigned indices: no negative-index wraparound for LLVM to keep,
    # which leaves a loop scalar; see engine/_smallgemm.py's _dot_run)
    for c in range(w):
        k = np.uint64(c)
        j = np.uint64(c0 + c)
        tmp[k] += a0 * z0[j] + a1 * z1[j] + a2 * z2[j] + a3 * z3[j]


@njit(cache=True, nogil=True, fastmath=_FLAGS, inline="always")
def _add_row(a, z, c0, w, tmp):  # pragma: no cover - compiled
    for c in range(w):
        k = np.uint64(c)
        tmp[k] += a * z[np.uint64(c0 + c)]


@njit(cache=True, nogil=True, fastmath=_FLAGS, inline="always")
def _sq_diff(x, c0, w, tmp):  # pragma: no cover - compiled
    # the sums of (x[c0 + c] - tmp[c])^2 and of x[c0 + c]^2 in float64, c < w: in vector lanes (reassoc), an
    # order fixed when it compiles
    s = 0.0
    q = 0.0
    for c in range(w):
        v = np.float64(x[np.uint64(c0 + c)])
        d = v - tmp[np.uint64(c)]
        s += d * d
        q += v * v
    return s, q


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
