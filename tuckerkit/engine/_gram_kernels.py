"""Compiled helpers of :func:`tuckerkit.engine._gram.start_gram`: a block of a float64 unfolding rounded to
float32, its rows' squares summed in float64 on the way, and (:func:`gram_single`) the whole float32 Gram of a
range of the unfolding's columns on the register-blocked microkernels of the small-rank TTM
(:mod:`tuckerkit.engine._simd`) (numba, cached on disk; imported on first use)."""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._simd import gblock1, gblock2, gblock3, gblock4, gblock5, gblock6, wide_vectors
from tuckerkit.engine._smallgemm import _wide_gblock

#: whether :func:`gram_single` takes tiles of up to 12 x 32 entries (rows of two 512-bit vectors, 24
#: accumulators) instead of 6 x 16 (two 256-bit vectors, 12): where numba compiles for AVX-512, whose vectors
#: the narrower tiles used at half width. numba takes the global as a constant (the other branch pruned). The
#: same bits either way: every entry is one chain of fused multiply-adds in row order
_WIDE_TILES = wide_vectors()
#: columns of one tile (:func:`tile_columns`)
_TILE_COLS = 32 if _WIDE_TILES else 16


def tile_columns() -> int:
    """The columns of :func:`gram_single`'s tiles: its buffers' rows are padded to a multiple of this."""
    return _TILE_COLS


@njit(cache=True, nogil=True, **NO_RUNTIME)
def to_single_rows(v, a, b, out, ss):  # pragma: no cover (compiled)
    # out[j, k - a] = float32(v[j, k]) for k in [a, b); ss[j] += the row's squares in float64, summed in eight
    # interleaved partial sums (k - a mod 8) combined in a fixed order: explicit, so no compiler's choice of
    # vector width or alignment peeling can move a bit
    m = a + (b - a) // 8 * 8
    for j in range(v.shape[0]):
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        for k in range(a, m, 8):
            x0, x1, x2, x3 = v[j, k], v[j, k + 1], v[j, k + 2], v[j, k + 3]
            x4, x5, x6, x7 = v[j, k + 4], v[j, k + 5], v[j, k + 6], v[j, k + 7]
            o = k - a
            out[j, o], out[j, o + 1], out[j, o + 2], out[j, o + 3] = (
                np.float32(x0), np.float32(x1), np.float32(x2), np.float32(x3))
            out[j, o + 4], out[j, o + 5], out[j, o + 6], out[j, o + 7] = (
                np.float32(x4), np.float32(x5), np.float32(x6), np.float32(x7))
            s0 += x0 * x0
            s1 += x1 * x1
            s2 += x2 * x2
            s3 += x3 * x3
            s4 += x4 * x4
            s5 += x5 * x5
            s6 += x6 * x6
            s7 += x7 * x7
        t = 0.0
        for k in range(m, b):
            x = v[j, k]
            out[j, k - a] = np.float32(x)
            t += x * x
        ss[j] += (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) + t


@njit(cache=True, nogil=True, **NO_RUNTIME)
def to_single_cols(x2, a, b, out, ss):  # pragma: no cover (compiled)
    # out[k - a, j] = float32(x2[k, j]) for k in [a, b); ss[j] += x2[k, j]^2 in order of k
    for k in range(a, b):
        for j in range(x2.shape[1]):
            x = x2[k, j]
            out[k - a, j] = np.float32(x)
            ss[j] += x * x


@njit(cache=True, nogil=True, **NO_RUNTIME)
def to_single_slabs(xv, a, b, out, ss):  # pragma: no cover (compiled)
    # slabs [a, b) of xv (outer, I_n, R) side by side: out[j, (s - a) R + k] = float32(xv[s, j, k]); ss[j] +=
    # each slab row's squares (to_single_rows's fixed order), slab after slab
    R = xv.shape[2]
    for s in range(a, b):
        to_single_rows(xv[s], 0, R, out[:, (s - a) * R:(s - a + 1) * R], ss)


@njit(nogil=True, **NO_RUNTIME)
def _gram_tile(rb, B, j0, Ip, n, r0, A, acc, px, pfo, pfs, pfn):  # pragma: no cover (compiled)
    # A[r0 + r, j0:j0 + 16] (+)= sum_i B[i, r0 + r] * B[i, j0:j0 + 16] for r < rb <= 6, i < n (B, A: rows of Ip);
    # the first pfn iterations prefetch px[pfo + i pfs] into L2 (none where pfn is 0)
    if rb == 6:
        gblock6(B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)
    elif rb == 5:
        gblock5(B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)
    elif rb == 4:
        gblock4(B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)
    elif rb == 3:
        gblock3(B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)
    elif rb == 2:
        gblock2(B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)
    else:
        gblock1(B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)


@njit(nogil=True, **NO_RUNTIME)
def _gram_tile_wide(rb, B, j0, Ip, n, r0, A, acc, px, pfo, pfs, pfn):  # pragma: no cover (compiled)
    # A[r0 + r, j0:j0 + 32] (+)= sum_i B[i, r0 + r] * B[i, j0:j0 + 32] for r < rb, i < n (B, A: rows of Ip): the
    # unit-stride TTM's strips of four 256-bit vectors (two 512-bit ones); the first pfn iterations prefetch
    # px[pfo + i pfs] into L2 (the next run's rows: a hint, no bit changes)
    _wide_gblock(4, rb, B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)


@njit(nogil=True, **NO_RUNTIME)
def _gram_tile_half(rb, B, j0, Ip, n, r0, A, acc, px, pfo, pfs, pfn):  # pragma: no cover (compiled)
    # :func:`_gram_tile_wide` over 16 columns (two 256-bit vectors a row): the strip that crosses the diagonal
    # where its entries on or below it lie in the first 16 columns
    if rb >= 7:
        _wide_gblock(2, rb, B, j0, Ip, n, B, r0, Ip, 1, A, r0 * Ip + j0, Ip, acc, px, pfo, pfs, pfn)
    else:
        _gram_tile(rb, B, j0, Ip, n, r0, A, acc, px, pfo, pfs, pfn)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def gram_single(v, a, b, kb, kc, B, A, part, ss, vflat):  # pragma: no cover (compiled)
    # Rows [a, b) of v (K, In), each a column of the unfolding: part[j, l] (l <= j) += the float32 sum over each
    # window of kb rows (from a) of float32(v[k, j]) float32(v[k, l]), one chain of fused multiply-adds per
    # entry in row order; ss[j] += v[k, j]^2 in float64, in row order. A window goes through in runs of at most
    # kc rows: each run rounded to float32 into B (n x Ip; Ip = In rounded up to 16, the pad columns zero, set
    # by the caller), then the lower triangle's tiles of 6 x 16 entries of A (Ip x Ip, float32) go on over the
    # run's rows (``acc``: the chains continue from A's values after a window's first run, so the runs do not
    # change a bit); with _WIDE_TILES tiles of 12 x 32 (Ip rounded up to 32), the strip that crosses the diagonal
    # 12 x 16 where its entries on or below it fit in 16 columns (200^3: 24064 -> 22400 tile entries against the
    # triangle's 20100; the Gram on one worker 20.8 -> 19.8 ms, on two 10.9-11.6 -> 10.3-10.7 ms, same bits).
    In = v.shape[1]
    Ip = (In + _TILE_COLS - 1) // _TILE_COLS * _TILE_COLS
    for w0 in range(a, b, kb):
        w1 = min(w0 + kb, b)
        acc = 0
        for s0 in range(w0, w1, kc):
            n = min(s0 + kc, w1) - s0
            for k in range(n):
                o = k * Ip
                for j in range(In):
                    x = v[s0 + k, j]
                    B[o + j] = np.float32(x)
                    ss[j] += x * x
            if _WIDE_TILES:
                # the next run's rows (up to kc rows of v after this run's, one block of memory where v is
                # C-ordered: ``vflat`` its elements, else empty) prefetched into L2 across this run's tiles, one
                # line per iteration of each tile
                step = 64 // vflat.itemsize
                q0 = (s0 + n) * In
                q1 = min(min(s0 + n + kc, b) * In, vflat.size) if s0 + n < b else q0
                lines = (q1 - q0 + step - 1) // step if q1 > q0 else 0
                ntiles = 0
                for r0 in range(0, In, 12):
                    ntiles += (r0 + min(12, In - r0) + 31) // 32
                per = min(n, (lines + ntiles - 1) // ntiles)
                q = 0
                for r0 in range(0, In, 12):
                    rb = min(12, In - r0)
                    for j0 in range(0, r0 + rb, 32):  # (every strip that holds an entry on or below the diagonal)
                        pfn = max(0, min(per, lines - q))
                        if r0 + rb - j0 <= 16:  # (the diagonal's strip needs only its first 16 columns)
                            _gram_tile_half(rb, B, j0, Ip, n, r0, A, acc, vflat, q0 + q * step, step, pfn)
                        else:
                            _gram_tile_wide(rb, B, j0, Ip, n, r0, A, acc, vflat, q0 + q * step, step, pfn)
                        q += pfn
            else:
                for r0 in range(0, In, 6):
                    rb = min(6, In - r0)
                    for j0 in range(0, r0 + rb, 16):  # (every strip that holds an entry on or below the diagonal)
                        _gram_tile(rb, B, j0, Ip, n, r0, A, acc, B, 0, 0, 0)
            acc = 1
        for j in range(In):
            for col in range(j + 1):
                part[j, col] += A[j * Ip + col]


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
