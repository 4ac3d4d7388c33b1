"""Compiled small-rank TTM kernels (numba, parallel, cached on disk): the bandwidth-bound regime of seed 002.

A TTM with a small output extent ``R`` (``Y = X x_n U^T``, ``U`` of shape (I_n, R), R up to a few dozen) does
``R`` multiply-adds per element of ``X``: it should run at the speed of one streaming read of ``X``. BLAS sees
it as a skinny GEMM (one extent R) or a batch of small ones and runs it at a fraction of the bandwidth. The
kernels here read ``X`` once, in memory order:

* :func:`ttm_inner` -- the contracted mode is *not* the unit-stride one. ``X`` is seen as ``(A, I, C)`` with
  ``C`` unit-strided (the first or a middle mode of a C-ordered tensor, the last or a middle one of an
  F-ordered one, and views of either); ``Y[a, r, c] = sum_i U[i, r] X[a, i, c]``. Built as GEMM builds its
  inner loops (seed 002's regime: the contraction's own loops, no transposes): tiles of (a, up to ``ct``
  columns) split over the policy's workers, each taken a chunk of ``kc`` rows of ``i`` at a time, in strips
  of 64 bytes (one cache line of each row); a register-blocked microkernel (:mod:`tuckerkit.engine._simd`: up
  to six rows of ``U`` against a strip as two 256-bit vectors, 12 vector accumulators, or up to twelve rows
  against it as one 512-bit vector where numba compiles for AVX-512, and there, for R above 16, strips of two
  lines, two 512-bit vectors a row, 24 accumulators; held in registers over the whole chunk, one
  fused multiply-add per term) runs every row block of ``U`` over each strip straight from X (the strip's
  lines stay in L1 for the blocks after the first). While a chunk computes, the microkernel prefetches the
  next chunk into L2 in runs of consecutive lines (one run when the chunk's rows lie back to back, else one
  per row), so its DRAM reads overlap the arithmetic instead of following it. For long rows whose stride
  crowds one L1 set (:func:`_l1_crowded`), and with 256-bit vectors for ``R`` above ``_DIRECT_MAX_RANK`` (six
  or more row blocks walking each strip), each chunk is first packed into strips, each row of X read once
  in one unit-stride run (:func:`_direct_chunks`).
  The columns at the end of a row (fewer than a strip) run from ``X`` directly, a whole line first (after
  strips of two lines), then one vector at a time, the last vector overlapping the columns before it
  through a private buffer.
* :func:`ttm_inner_dot` -- :func:`ttm_inner`'s tiles summed, as each finishes and while it is still in cache,
  against the columns of a second matrix over the unit-stride mode: a 3-way tensor's MTTKRP
  ``M[a, r] = sum_c W[c, r] sum_i U[i, r] X[a, i, c]`` in one pass, the (A, R, C) product never written out
  (CP-ALS's dimension tree and :func:`tuckerkit.engine.mttkrp` of an outermost mode).
* :func:`ttm_outer` -- the contracted mode is the unit-stride one: ``X`` is ``(A, I)`` with ``I`` unit-strided
  and ``Y[a, r] = sum_i X[a, i] U[i, r]``. Four rows of ``X`` at a time, each against every column of ``U``
  (stored transposed, ``(R, I)``): four dot products share each load of ``U``; the next tile's rows are
  prefetched into L2 in short bursts, one before each pair of columns of ``U``. For R of 16 to four vectors
  (float32 16-32, float64 16; where vectors are wide, R of 16 to 32 in strips of up to four 512-bit vectors,
  :func:`outer_gemm_style`) a GEMM-like kernel instead: ``U`` packed as ``(I, R)`` rows padded to whole
  vectors (512-bit ones where vectors are wide), twelve rows of ``X`` a tile, each element broadcast against a
  strip of two (or three) 256-bit vectors of ``U`` (the inner kernel's register blocks with the roles
  swapped: 12 vector accumulators), or where vectors are wide of one, two or four 512-bit vectors (12 or 24
  accumulators), the rows two tiles ahead prefetched into L2 during the blocks. Where vectors are wide, R of
  3-15 (:func:`outer_tr_style`) takes a transposed tile instead: 16 float32 or 8 float64 rows of X a tile, lanes
  over the rows, each step's block (one 512-bit vector a row) transposed in registers and its columns broadcast
  against U's rows (:func:`tuckerkit.engine._simd._make_tr`): no horizontal sums, no scalar tail, the bits of
  the register-blocked kernel. Ahead of it, R of 1-12 with U of at most ``VDOT_U_MAX_BYTES`` takes the row-dot
  kernel (:func:`outer_vdot_style`): 24 / R rows of X (at most 8) against every row of ``U^T`` as vector dot
  products along the unit stride, the lanes of 16 float32 (8 float64) sums added at once by one shuffle network
  (:func:`tuckerkit.engine._simd._make_vdot`), the sums stored straight into the output.

Every output element is one sum over ``i`` in a fixed order set at compile time (in order, one fused
multiply-add per term, in :func:`ttm_inner` and the GEMM-like :func:`ttm_outer`, the chunks of ``i`` carrying
the exact partial sums through the output; fixed partial sums in the dot products of :func:`ttm_outer`, whose
reduction runs along the unit stride); the tiles never
split a sum, so the result is the same bits for any number of workers, any tiling and any load on a given
machine. The kernels are serial and release the GIL; the GIL-free helpers of :mod:`tuckerkit.engine._handoff`
run the tiles, each piece a compiled call of the kernel by address, or where they cannot (no helpers, or
another thread's round on them) tuckerkit's own pool (``numba``'s parallel pool would keep spinning threads
beside the BLAS pieces of the next step: measured 3-10x slower CP-ALS iterations on 2 cores).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine import _handoff
from tuckerkit.engine._buffers import work_empty
from tuckerkit.engine._contract import read_only
from tuckerkit.engine._plan import CompiledKernel
from tuckerkit.engine._policy import MAX_PIECES, ExecutionPolicy, parallel_for
from tuckerkit.engine._simd import (
    MAX_RB,
    QUAD_MIN_RB,
    QUAD_RB,
    SHORT_ACC,
    TINY_MAX_I,
    TINY_MAX_R,
    TR_MAX_RANK,
    TR_MAX_RANK_F64,
    TR_MIN_RANK,
    VDOT_MAX_RANK,
    VDOT_MIN_RANK,
    WIDE_RB,
    aline_blocks,
    aquad_blocks,
    copy_run,
    cpu_name,
    gnarrow_blocks,
    gwide_blocks,
    half_blocks,
    line_blocks,
    pack_row,
    pack_row4,
    prefetch,
    prefetch_l2,
    quad_blocks,
    short_max_c,
    short_rows,
    short_slab,
    simd_supported,
    tiny_block,
    tr_block,
    tr_tiles,
    vdot1,
    vdot2,
    vdot3,
    vdot4,
    vdot5,
    vdot6,
    vdot7,
    vdot8,
    vdot9,
    vdot10,
    vdot11,
    vdot12,
    vdot_rows,
    wide_half_blocks,
    wide_line_blocks,
    wide_vectors,
)

#: bytes of X in one chunk of a tile of :func:`ttm_inner` (half of a 512 KiB L2: the chunk being computed and
#: the next one, being prefetched, both stay in L2)
_CHUNK_BYTES = 256 * 1024
#: the widest tile, in columns (rows shorter than ``LONG_ROW_BYTES``)
_MAX_TILE = 1024
#: the widest tile of a long row, in bytes, and the most rows of i per chunk there and elsewhere
#: (:func:`_tiling`)
_LONG_TILE_BYTES = 4096
_MAX_KC_LONG = 32
#: ... where R fits one row block of wide vectors (:func:`_one_block_kc`)
_MAX_KC_ONE_BLOCK = 24
#: ... where vectors are 256 bits (AVX2): long rows take chunks of at most 16 rows (:func:`_max_kc_long`)
_MAX_KC_LONG_256 = 16
_MAX_KC = 64
#: the most rows of i per chunk of rows of more than ``_MID_ROW_BYTES[0]`` and at most ``_MID_ROW_BYTES[1]``
#: at R above ``_SHORT_CHUNK_RANK`` where vectors are wide (:func:`_tiling`; other long rows keep ``_MAX_KC``)
_MAX_KC_MID_ROWS = 25
_MID_ROW_BYTES = (32 << 10, 96 << 10)
#: ... and of long rows that crowd L1 (:func:`_l1_crowded`) at R above ``_SHORT_CHUNK_RANK`` where vectors are wide
_MAX_KC_WIDE_CROWDED = 40
#: the smallest R whose strips are two cache lines wide where vectors are wide (:func:`_inner_strip`; its row
#: blocks must have 8 rows or more, ``QUAD_MIN_RB``: R of 13-15 keeps strips of one line). Measured on Zen 4 in
#: one process against strips of one line (the first and middle modes of 200^3 and 320x240x160, two workers,
#: interleaved medians of 11, the same bits): R = 20 / 32 0.86-0.94 / 0.82-0.97x the time in float64 and
#: float32; R = 10 0.89-1.01x on the long rows of the first modes but 1.11-1.12x on the middle modes. On Zen 5
#: (stop 91; two workers, helpers parked between calls, interleaved medians of 15, every inner mode of 200^3,
#: 320x240x160, 64^4, 100^3 and 60^4): R = 16 (two blocks of 8) 0.74-0.98x the time in 19 of 24 cases over two
#: runs (median about 0.88x), 1.03-1.14x in the others (60^4's and 64^4's last inner mode in float32, each
#: 0.74x in the other run); one thread in cache 0.74-0.79x. R = 8 / 10 / 12 stay on one line: 1.0-1.35x the time
#: streamed (0.85-0.95x only on float32 200^3's first mode), though 0.84-0.93x on one thread in cache
_QUAD_MIN_RANK = 16
#: the largest R that takes those capped chunks
_SHORT_CHUNK_RANK = 16
#: bytes of one chunk's rows of U and one strip of X (L1 is 32 KiB)
_L1_BYTES = 20 * 1024
#: the largest R whose row blocks read X directly; beyond, each chunk is packed first (see _inner_kernel).
#: Measured against packing every chunk (one core, 200 x 200 x 200 float64, R = 10): 40 against 28 GFlop/s
#: on four slabs in cache, 32 against 27 streamed from memory; two workers on the shared 2-core machine,
#: interleaved medians: 0.81-0.97x the time at R = 10 (float32 and float64, first and middle modes of 200^3
#: and 320x240x160; the gain shrinks when the machine's memory is slow). At R = 32, with 256-bit vectors, the
#: direct reads of long rows took 1.2-1.9x the packed kernel's time, hence the packing there; where vectors
#: are wide larger R reads directly too (:func:`_direct_chunks`)
_DIRECT_MAX_RANK = 16
#: sets of L1 (32 KiB, 8 ways of 64-byte lines) and the most lines of one strip per set the direct kernel
#: takes (:func:`_l1_crowded`); beyond, the chunk is packed
_L1_SETS = 64
_L1_LINES_PER_SET = 16
#: ... with 256-bit vectors, the most lines of one strip per set before a long-row chunk is packed first
#: (:func:`_direct_chunks`; the tiling's cap keeps ``_L1_LINES_PER_SET``). Measured on a 2-core AVX2 machine
#: (32 KiB 8-way L1; ``ttm_inner`` alone, two workers, interleaved medians of 9, the same bits), the first modes
#: of 320x240x160 and 64^4 float64 at R = 10 (rows a multiple of 4 KiB apart: every row's line in one set),
#: chunks of 16 rows packed first against read directly: 0.67x and 0.78x the time (more streamed ones in
#: :func:`_direct_chunks`); but 1.18-1.23x on tensors the caches hold (64^3, 128^3), so only beyond
#: ``STREAMED_BYTES``
_L1_LINES_PER_SET_256 = 8
#: ... where vectors are wide, for R up to ``_SHORT_CHUNK_RANK``: the lines a set the tiling's cap and the
#: direct kernel take (:func:`_crowd_lines`), as many as the long rows' chunks hold (``_MAX_KC_LONG``), so that
#: rows a multiple of 4 KiB apart take chunks of 32 rows read directly, not of 16. Measured on the AVX-512
#: machine (``ttm_inner`` alone, two workers, interleaved medians of 21 in one process, the same bits), chunks of
#: 32 against 16: the first modes of 320x240x160, 128x128x256 and 256x128x128 and 64^4's mode 1 at R = 12-16
#: 0.71-0.92x the time in float64 and in float32 (320x240x160's float32 rows are two sets apart:
#: chunks of 32 already), R = 8-10 0.76-1.0x, R = 4 0.97-1.0x (one run 1.24x, its minimum 1.0x); one worker alike
#: (0.70-0.95x at R = 10 / 16); in cache (rows of 8-16 KiB, 100-200 of them) 0.72-0.86x. Chunks of 16 rows make
#: twice the microkernel calls, each loading and storing its sums: a float64 200 x 2048 in cache ran at 24
#: against 38 GFlop/s. The former comparison (16 rows read directly against 32 packed first) stays true
_L1_LINES_PER_SET_WIDE = 32
#: rows ahead the packing loop prefetches
_PACK_AHEAD = 8
#: prefetch the next chunk's rows into L2 while the current chunk computes (its DRAM reads overlap the
#: fused multiply-adds instead of following them), in runs of consecutive lines spread over the microkernel
#: calls: the whole chunk in one run where its rows lie back to back (a middle mode whose tile is the whole
#: row), else one run per row (long rows: fewer pages at a time). Measured with the packed kernel on 200^3,
#: one and two workers, against no such prefetch: middle mode 0.82-0.85x the time (R = 10, float64), long
#: rows 0.81-0.89x (row runs; strip-wise 0.86-1.0x); the direct kernel without it ran at a third to half the
#: speed from memory (one core)
_PREFETCH_NEXT = True
#: on long rows (a row cut into tiles: a first mode's, or a long middle mode's) at ranks of 16 and more (strips
#: of two lines, two row blocks and more: :func:`_inner_strip`), the direct path's blocks also hint each line of
#: the row's next strip into L1 at every step (``_simd.aquad8`` ...): the first row block's reads of a strip come
#: from L2, rows a row's length apart. Measured on the Zen 5 machine (the kernel compiled with the hint beside the
#: committed one and a plain copy in one process, two threads, shuffled rounds, medians of 21, the same bits),
#: first modes of 200^3 and 320x240x160: see the stop-92 notes in docs/benchmarks.md. Also R = 13-15 (strips of
#: one line, two blocks of 6-8 rows: ``_simd.ablock6`` ...). Rank 10 (one row block of a one-line strip) ran
#: 0.98-1.12x with the hint: not given it; middle modes with rows of one tile: not given it
_AHEAD_L1 = True
#: tiles ahead :func:`ttm_outer`'s dot-product kernel (four rows of X a tile) and its transposed tile (16 or 8
#: rows) prefetch into L2 (0: none), and the most lines of one share of the dot-product kernel's prefetch issued
#: without a test per line (see _outer_dot_kernel)
_OUTER_PREFETCH = 2
#: rows of X the row-dot kernel (:func:`_outer_vdot_kernel`) prefetches ahead (in whole tiles, at least two)
VDOT_AHEAD_ROWS = 32
#: the largest ``U^T`` (R rows zero-padded to whole 512-bit vectors) the row-dot kernel takes: it is read once
#: for every tile of a few rows of X and must stay in L1 (32 KiB) beside them and the lines prefetched ahead
VDOT_U_MAX_BYTES = 13 << 10
#: the shortest rows of X (in bytes) the row-dot kernel takes: four 512-bit vectors
VDOT_MIN_ROW_BYTES = 256
_DOT_BURST = 64
#: rows of X per tile of :func:`ttm_outer`'s register-blocked kernel (two blocks of six rows, or three of four;
#: with 512-bit vectors one block of twelve: :func:`_outer_rb`)
_OUTER_ROWS = 12
#: tiles ahead the register-blocked kernel prefetches into L2 (0: none; 1 and 2 measured alike, 0 1.1-1.8x the
#: time)
_OUTER_GEMM_PREFETCH = 2
#: tiles of :func:`ttm_outer`'s register-blocked kernel whose results its private buffer collects before they are
#: copied out, where the output has R outermost (Y as (R, A) rows: CP-ALS's partials): each column then gets a
#: run of 384 rows, not of 12 (a line and a half, each line written by two tiles). The same bits (each element
#: is computed as before; only the copy waits). Measured against a copy per tile (``ttm_outer`` alone, two
#: workers, interleaved medians of 15 in one process): X of (40000, 200) float64 R = 16 / 24 / 32 / 50 / 64
#: 0.75-0.86 / 0.84 / 0.82-0.95 / 0.81-0.88 / 0.87x the time, (216000, 60) 0.75-0.85 / 0.91-0.96x, (76800, 160)
#: 0.93x, float32 (40000, 200) 0.89-1.01x, (4096, 200) 0.92-0.99x; groups of 4 / 8 / 16 / 64 gained less or
#: the same. CP-ALS per iteration (6 iterations, medians of 7 interleaved): 60^4 R = 16 / 32 0.96 / 0.92x,
#: 200^3 R = 32 / 50 0.98x, R = 16 1.0x; HOOI on 200^3 unchanged. A rank-last output (written directly) is
#: still 0.6-0.9x the time of an R-outermost one: the copy transposes element by element
_OUTER_COPY_TILES = 32
#: the fewest rows of i per chunk (each microkernel call pays a fixed start and drain)
_MIN_KC = 8
#: the smallest R :func:`ttm_outer` gives its register-blocked kernel where vectors are wide
#: (:func:`outer_gemm_style`) whatever its padding; below it, float64 R whose padding to whole 512-bit vectors
#: is at most a quarter of the columns computed (``_WIDE_GEMM_PAD``: R = 6-8, 12-15) and float32 R from
#: ``_WIDE_GEMM_F32_MIN_RANK``
_WIDE_GEMM_MIN_RANK = 16
_WIDE_GEMM_PAD = 4
_WIDE_GEMM_F32_MIN_RANK = 13
#: the largest output extent R the kernels are planned for (measured up to 32; beyond, BLAS nears its peak),
#: except on a large tensor (:func:`planned_beyond_max_rank`)
MAX_RANK = 32
#: the largest R of :func:`planned_beyond_max_rank`: :func:`ttm_inner` on short rows, :func:`ttm_outer` in
#: float64 (256-bit vectors; ``WIDE_OUTER_F64_MAX_RANK`` where they are wide); and the fewest bytes of the
#: tensor it needs
SHORT_ROWS_MAX_RANK = 64
OUTER_F64_MAX_RANK = 56
WIDE_OUTER_F64_MAX_RANK = 64
#: ... and in float32 where vectors are wide, into an output with R outermost (CP-ALS's partials)
WIDE_OUTER_F32_MAX_RANK = 64
#: ... and the most bytes of U there (:func:`planned_beyond_max_rank`); on the CPUs of
#: ``WIDE_OUTER_U_BYTES_BY_CPU`` (LLVM's name, :func:`cpu_name`) that many instead
WIDE_OUTER_U_BYTES = 1 << 20
#: Zen 5 (stop 95; the kernel's plans against the BLAS plans this bound had chosen, two workers, interleaved
#: medians of 11 in one process): float64 X of (3600, 3600), (4096, 4096), (2000, 8000), (1000, 10000), (2000,
#: 3000), (1000, 5000), (400, 4000) and the last mode of (100, 100, 3000) at R = 40 / 50 / 64, U of 1.1-3.9
#: MiB, 0.43-0.62x BLAS's time, into an output with R outermost (CP-ALS's partials) 0.46-0.50x; float32 R
#: outermost, U of 1.2-3.9 MiB, 0.39-0.56x. (Zen 4 had measured (3600, 3600) at 0.69-0.97x, 0.88-1.08x with R
#: outermost, (4096, 4096) 0.90 / 1.16x and (1000, 10000) 1.04x: its bound stays 1 MiB.)
WIDE_OUTER_U_BYTES_BY_CPU = {"znver5": 4 << 20}
#: ... and, where vectors are wide, the fewest bytes of a float32 tensor whose long rows (a first mode) take
#: :func:`ttm_inner` up to ``SHORT_ROWS_MAX_RANK`` (:func:`planned_beyond_max_rank`)
BEYOND_LONG_F32_MIN_BYTES = 24 << 20
#: ... up to this R where those long rows are ``VERY_LONG_ROW_BYTES`` or more (:func:`planned_beyond_max_rank`)
VERY_LONG_F32_MAX_RANK = 48
VERY_LONG_ROW_BYTES = 512 << 10
BEYOND_MIN_BYTES = 12 << 20
#: (Where vectors are wide :func:`ttm_outer`'s register-blocked kernel keeps 24 accumulators at any R and ran
#: R = 50 / 64 in float64 at 0.76 / 0.68-0.78x BLAS's time on X of (40000, 200), but 1.14-1.75x on (4096, 64)
#: and (4096, 200) and 0.88-1.12x on (40000, 64): planned up to 64 on every tensor, it took the seed's Table II
#: cases of n = 64 with the unit-stride k from 0.74-0.94x to 0.53-0.76x einsum's time; so beyond MAX_RANK only
#: from BEYOND_MIN_BYTES, :func:`planned_beyond_max_rank`)


#: whether the kernels are compiled with the register blocks that only machines with 512-bit vectors choose:
#: :func:`_inner_kernel`'s blocks of 7-12 rows and strips of two lines (:func:`_inner_rb`, :func:`_inner_strip`),
#: :func:`_outer_gemm_kernel`'s blocks of 7-12 rows and strips of four vectors (:func:`_outer_rb`,
#: :func:`_outer_strips`). numba takes this global as a constant and prunes the branches to them where it is
#: False, so a 256-bit machine compiles half the code. Measured on the 2-core AVX2 machine: ``_inner_kernel``
#: 7.0 instead of 13.4 s a dtype (295 instead of 593 kB), ``_outer_gemm_kernel`` 4.6 instead of 9.6 s in
#: float32; the first ``tk.hooi(X, 10)`` on 200^3 after installing 11.0-11.3 s instead of 17.5-20.0 s. The same
#: bits (every variant is the same chain of fused multiply-adds per element: 112 ``ttm_inner`` and 90
#: ``ttm_outer`` cases hashed alike) and the same speed (single-thread TTMs on 200^3, R = 5-32: 0.91-1.06x,
#: noise). numba's cache is per CPU (its features are in the key), as :func:`wide_vectors` is. Tests that force
#: the wide tiling on a 256-bit machine run copies compiled with it True (``tests/test_smallgemm.py``)
_ALL_BLOCKS = wide_vectors()


#: the register blocks, by family: each a switch over its row counts emitted as IR at the call site
#: (:func:`~tuckerkit.engine._simd._make_family`; as an if-chain of single blocks in an inlined function, numba
#: took twice as long to compile :func:`_inner_kernel`). ``_block_quad``: rb of 8-12 rows against a strip of four
#: vectors of x (two cache lines; the strips of two lines are taken for R above 16, whose row blocks, at most
#: WIDE_RB, have at least 8 rows); ``_block_quad_ahead`` / ``_block_line_ahead``: the same blocks / the one-line
#: blocks of 6-8 rows that also hint the row's next strip into L1 (long rows: ``_AHEAD_L1``); ``_wide_line`` /
#: ``_wide_half``: 7-12 rows against a strip of one line / one vector, only where vectors are wide
_block_quad = quad_blocks
_block_quad_ahead = aquad_blocks
_block_line_ahead = aline_blocks
_wide_line = wide_line_blocks
_wide_half = wide_half_blocks


@njit(cache=True, nogil=True, inline="always")
def _block_line(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn):  # pragma: no cover
    # rb rows of U (packed at uo) against a strip of two vectors of x (one cache line)
    if _ALL_BLOCKS and MAX_RB < rb <= WIDE_RB:
        _wide_line(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn)
    else:
        line_blocks(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn)


@njit(cache=True, nogil=True, inline="always")
def _block_half(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn):  # pragma: no cover
    # rb rows of U (packed at uo) against one vector of x
    if _ALL_BLOCKS and MAX_RB < rb <= WIDE_RB:
        _wide_half(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn)
    else:
        half_blocks(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn)


@njit(cache=True, nogil=True, inline="always")
def _block(nv, rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn):  # pragma: no cover
    # one register block of a strip of nv = 4 or 2 vectors (the columns left over call the one- and two-vector
    # families directly: every call site inlines the variants it can reach, and each costs compile time)
    if _ALL_BLOCKS and nv == 4:
        _block_quad(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn)
    else:
        _block_line(rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn)


@njit(cache=True, nogil=True, inline="always")
def _next_run(q, qtot, qr, qs, q0, rstride, w, per, rlen, n, idle):  # pragma: no cover
    """The next piece of the next chunk's prefetch runs for one microkernel call: (first element, lines,
    and the advanced counters q, qr, qs); ``(idle, 0, ...)`` once all ``qtot`` lines are issued."""
    if q >= qtot:
        return idle, 0, q, qr, qs
    pfo = q0 + qr * rstride + qs * w
    pfn = min(per, rlen - qs, n)
    q += pfn
    qs += pfn
    if qs == rlen:
        qs = 0
        qr += 1
    return pfo, pfn, q, qr, qs


@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, **NO_RUNTIME)
def _dot_run(a, ao, b, bo, n):  # pragma: no cover
    # sum_j a[ao + j] b[bo + j], j < n (n >= 1): LLVM splits the sum into vector lanes (reassoc), an order fixed
    # when it compiles, so the same bits on every call on a given machine. Unsigned indices: no negative-index
    # wraparound for LLVM to keep, which left the loop scalar (3 against 9.5 GFlop/s float64, 4 against 24
    # float32, sums of 200 in cache)
    s = a[ao] * b[bo]
    for j in range(1, n):
        s += a[np.uint64(ao + j)] * b[np.uint64(bo + j)]
    return s


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _axpy_run(w, a, ao, b, bo, n):  # pragma: no cover
    # b[bo + j] += w * a[ao + j], j < n: one rounding each (a product and a sum, no fused multiply-add: the
    # same bits whether LLVM vectorizes it or not); unsigned indices (see _dot_run)
    for j in range(n):
        k = np.uint64(bo + j)
        b[k] = b[k] + w * a[np.uint64(ao + j)]


@njit(cache=True, nogil=True, inline="always")
def _head_cols(x, C, sxa, sxi, w, plain):  # pragma: no cover
    # the columns of each row of X before its first line-aligned one: where every row is as far from a line
    # (row strides whole lines) and at least two strips follow, the tiles start there, so that each strip's
    # vectors are whole lines (a 512-bit load across two lines costs two). 0 where the tiles' sums are taken
    # (the bits of a sum over a tile's columns would hang on the tensor's address) or the row is one tile
    # (``plain`` false: a middle mode whose chunk is one run of memory, prefetched as one). Measured on the
    # AVX-512 machine (``ttm_inner`` alone, two workers, interleaved medians of 11-21 in one process, the same
    # bits, X at numpy's usual 16 bytes past a line): first modes of 200^3, 320x240x160, 64^4, 60^4 and 100^3
    # at R = 10 / 32, 0.86-0.98x the time in float64 and 0.84-0.94x in float32; middle modes of 64^4, 80^4 and
    # 100^4 (several tiles a row) 0.78-1.00x, 60^4's 0.97-1.02x; rows of one tile (200^3's and 320x240x160's
    # middle modes) shifted 1.01-1.13x, hence not
    it = x.itemsize
    b = x.ctypes.data
    if not plain or (sxi * it) % 64 or (sxa * it) % 64 or b % it:
        return 0
    h = (64 - b % 64) % 64 // it
    return h if C >= h + 2 * w else 0


@njit(cache=True, fastmath={"contract"}, nogil=True, **NO_RUNTIME)
def _inner_kernel(x, I, C, sxa, sxi, up, blocks, y, sya, syr, vl, ct, kc, pnx, packed, snv, wt, mp, axpy, tl, pk,  # noqa: E741
                  t_lo, t_hi):  # pragma: no cover
    # tile t: row a of the outer extent, columns [c0, c0 + ct) of the unit-stride one (ct a multiple of
    # w = snv * vl), taken kc rows of i at a time (as GEMM blocks its k). For each strip of w columns (one cache
    # line of each row of the chunk, or two where snv = 4: two 512-bit vectors a row, 24 accumulators) every
    # row block of U runs over it straight from X (the strip's kc lines
    # stay in L1 for the blocks after the first, the chunk's rows of U too), carrying its sums in y from chunk
    # to chunk. While a chunk computes, the next one (of this tile, else the next tile's first) is prefetched
    # into L2 in runs of consecutive lines spread over the microkernel calls: one run when the chunk's rows
    # are one block of memory (the whole row in the tile, rows back to back), else one run per row. Every
    # output element is one in-order sum over i, one fused multiply-add per term; the columns left at the end
    # of a row (fewer than w) run two vectors, one vector or one element wide. With ``wt`` (not empty) each
    # finished tile's rows are also summed against ``wt``'s (W transposed, R x C) over the tile's columns into
    # ``mp[t, r]`` (:func:`ttm_inner_dot`: y is then the caller's scratch, sya = 0); with ``axpy`` instead each
    # tile's row r, times ``wt[a, r]`` (W as (A, R)), is added to ``mp[r, c0:c1]`` (:func:`ttm_inner_axpy`)
    nct = (C + ct - 1) // ct
    nblk = blocks.shape[0]
    nr = blocks[nblk - 1, 0] + blocks[nblk - 1, 1]  # R
    w = snv * vl  # the strip
    ln = 2 * vl  # one cache line
    h = _head_cols(x, C, sxa, sxi, w, wt.size == 0 and nct > 1)
    # long rows (a row in several tiles) with two row blocks or more: the blocks hinting each row's next strip,
    # strips of two lines (blocks of 8-12 rows) or of one line in blocks of 6-8 (R = 13-15)
    ahead = False
    if _AHEAD_L1 and nct > 1 and nblk >= 2:
        rlo = blocks[0, 1]
        rhi = blocks[0, 1]
        for k in range(1, nblk):
            rlo = min(rlo, blocks[k, 1])
            rhi = max(rhi, blocks[k, 1])
        ahead = snv == 4 or (snv == 2 and 6 <= rlo and rhi <= 8)
    for t in range(t_lo, t_hi):
        a = t // nct
        c0 = h + (t - a * nct) * ct
        c1 = min(C, c0 + ct)
        if c0 >= C:  # (the last tile of a row, left empty by the head)
            continue
        xa = a * sxa
        ya = a * sya
        ns = (c1 - c0) // w
        if ns > 0:
            for i0 in range(0, I, kc):
                n = min(kc, I - i0)
                # the next chunk: rows [qi0, qi0 + qn) of the tile at (qa, qc0, qc1), as nrun runs of rlen lines
                # rstride elements apart
                qa = xa
                qc0 = c0
                qc1 = c1
                qi0 = i0 + kc
                nrun = 0
                if qi0 >= I:
                    qi0 = 0
                    if t + 1 < t_hi:
                        qa1 = (t + 1) // nct
                        qc0 = h + (t + 1 - qa1 * nct) * ct
                        qc1 = min(C, qc0 + ct)
                        qa = qa1 * sxa
                        nrun = 1 if qc0 < qc1 else 0
                else:
                    nrun = 1
                qn = min(kc, I - qi0)
                q0 = qa + qi0 * sxi + qc0
                rlen = (qc1 - qc0 + ln - 1) // ln + 1  # one more: a row need not start on a line
                rstride = sxi
                if pnx == 0:
                    nrun = 0
                elif qc0 == 0 and qc1 == C and sxi == C:  # whole rows back to back: one block of memory
                    rlen = (qn * C + ln - 1) // ln + 1
                else:
                    nrun = qn if nrun else 0
                qtot = nrun * rlen
                per = (qtot + nblk * ns - 1) // (nblk * ns)
                q = 0
                qr = 0  # q = qr * rlen + qs, kept without a division per microkernel call
                qs = 0
                if packed:
                    # crowded long rows (_l1_crowded) or, with 256-bit vectors, R > _DIRECT_MAX_RANK: the chunk
                    # packed first, strip by strip, reading each row of X once in one unit-stride run (the
                    # blocks then walk the packed strips, not kc rows of X a page apart each), a few rows
                    # ahead prefetched
                    for ii in range(n):
                        i = i0 + ii
                        for s in range(ns * snv // 2):
                            prefetch(x, xa + (i + _PACK_AHEAD) * sxi + c0 + s * ln)
                        if snv == 4:
                            pack_row4(x, xa + i * sxi + c0, pk, ii * w, n * w, ns)
                        else:
                            pack_row(x, xa + i * sxi + c0, pk, ii * w, n * w, ns)
                # every strip against every row block through one call site of each family (each site emits
                # all its blocks: compile time): read straight from X strip by strip (the strip's kc lines stay
                # in L1 over the row blocks), or from the packed strips block by block (the block's rows of U
                # stay in L1 over the tile's strips)
                src = pk if packed else x
                no, ni = (nblk, ns) if packed else (ns, nblk)
                for o in range(no):
                    for m in range(ni):
                        k, s = (o, m) if packed else (m, o)
                        r0, rb, uo = blocks[k, 0], blocks[k, 1], blocks[k, 2]
                        yo = ya + c0 + s * w + r0 * syr
                        if packed:
                            so, ss = s * n * w, w
                            idle = xa + i0 * sxi + c0
                        else:
                            so, ss = xa + i0 * sxi + c0 + s * w, sxi
                            idle = so  # (nothing left to fetch: the line this strip starts at)
                        pfo, pfn, q, qr, qs = _next_run(q, qtot, qr, qs, q0, rstride, ln, per, rlen, n, idle)
                        if _ALL_BLOCKS and ahead and snv == 4 and not packed:
                            _block_quad_ahead(rb, src, so, ss, n, up, uo + i0 * rb, y, yo, syr, i0, x, pfo, ln, pfn)
                        elif _ALL_BLOCKS and ahead and not packed:
                            _block_line_ahead(rb, src, so, ss, n, up, uo + i0 * rb, y, yo, syr, i0, x, pfo, ln, pfn)
                        else:
                            _block(snv, rb, src, so, ss, n, up, uo + i0 * rb, y, yo, syr, i0, x, pfo, ln, pfn)
                while q < qtot:
                    prefetch_l2(x, q0 + qr * rstride + qs * ln)
                    q += 1
                    qs += 1
                    if qs == rlen:
                        qs = 0
                        qr += 1
        c = c0 + ns * w
        if snv == 4 and c + ln <= c1:  # a line left over from strips of two
            for k in range(nblk):
                r0, rb, uo = blocks[k, 0], blocks[k, 1], blocks[k, 2]
                _block_line(rb, x, xa + c, sxi, I, up, uo, y, ya + r0 * syr + c, syr, 0, x, xa + c, 0, 1)
            c += ln
        # the one-vector pieces, all through one call site (each site emits every one-vector block: compile
        # time): a vector left over at c (stored straight into y); the last few columns (fewer than a vector:
        # one vector over the row's last vl columns into the private buffer, since the columns before c belong
        # to this tile's strips or to another tile, maybe being summed by another worker right now; only the
        # new columns copied out); the row's head, the columns before its first line-aligned one
        # (:func:`_head_cols`: one vector at a time into the buffer, only the head's columns copied out). Each
        # is the same in-order chain of fused multiply-adds per element as everywhere else (from a zero start:
        # the first term's product rounded once), so the bits are those of any other tiling
        tv = 1 if c + vl <= c1 else 0
        ce = c + tv * vl  # where the last few columns start
        lc = 1 if ce < c1 and C >= vl else 0
        nh = (h + vl - 1) // vl if h > 0 and c0 == h else 0
        for e in range(tv + lc + nh):
            if e < tv:
                cw, lo, hi = c, 0, 0
            elif e < tv + lc:
                cw, lo, hi = c1 - vl, ce, c1
            else:
                cw = (e - tv - lc) * vl
                lo, hi = cw, min(h, cw + vl)
            for k in range(nblk):
                r0, rb, uo = blocks[k, 0], blocks[k, 1], blocks[k, 2]
                if e < tv:
                    dst, do, ds = y, ya + r0 * syr + cw, syr
                else:
                    dst, do, ds = tl, 0, vl
                _block_half(rb, x, xa + cw, sxi, I, up, uo, dst, do, ds, 0, x, xa + cw, 0, 1)
                for r in range(rb):
                    for j in range(lo, hi):
                        y[ya + (r0 + r) * syr + j] = tl[r * vl + j - cw]
        c = c1 if lc else ce
        for k in range(nblk):  # a row shorter than one vector: element by element
            r0, rb, uo = blocks[k, 0], blocks[k, 1], blocks[k, 2]
            for r in range(rb):
                for j in range(c, c1):
                    acc = x[xa + j] * up[uo + r]
                    for i in range(1, I):
                        acc = acc + up[uo + i * rb + r] * x[xa + i * sxi + j]
                    y[ya + (r0 + r) * syr + j] = acc
        if wt.size > 0:
            if axpy:
                for r in range(nr):
                    _axpy_run(wt[a * nr + r], y, ya + r * syr + c0, mp, r * C + c0, c1 - c0)
            else:
                for r in range(nr):
                    mp[t * nr + r] = _dot_run(y, ya + r * syr + c0, wt, r * C + c0, c1 - c0)


def _wide_direct() -> bool:
    """Whether :func:`ttm_inner` reads X directly for R above ``_DIRECT_MAX_RANK`` (see :func:`_direct_chunks`):
    where vectors are wide (three row blocks of up to twelve rows over strips of two lines)."""
    return wide_vectors()


def _direct_chunks(R: int, row_len: int, row_bytes: int, kc: int, streamed: bool = False, I: int = 0,  # noqa: E741
                   nbytes: int = 0) -> bool:
    """Whether :func:`ttm_inner`'s row blocks read each chunk straight from X (else the chunk is packed into strips
    first): up to ``_DIRECT_MAX_RANK``, not where long rows (``row_len`` bytes of X from at least
    ``LONG_ROW_BYTES``) are ``row_bytes`` apart so that ``kc`` of them crowd L1 (:func:`_l1_crowded`: more than
    ``_L1_LINES_PER_SET`` lines a set, or ``_L1_LINES_PER_SET_256`` with 256-bit vectors on a tensor beyond
    ``STREAMED_BYTES``, the ``streamed`` flag; on a 2-core AVX2 machine, first modes at R = 10-16, two workers,
    interleaved medians of 9 in two runs, packed against direct: 320x240x160 0.72-0.76x (float32 0.99-1.0x), 64^4
    0.73-0.81x (float32 0.95-0.96x), its mode 1 0.85-0.92x; 64^3, 128^3 and 200^3 (cached, or not aligned)
    unchanged), and for R above ``_DIRECT_MAX_RANK`` only where vectors are wide (:func:`_wide_direct`).

    Where vectors are wide, R = 32 read directly (two workers, interleaved medians of 9-21 in one process, the
    same bits) against the chunks packed first: middle modes of 200^3 and 320x240x160 0.77-0.93x the time in
    float64 and float32; the first mode of 200^3 (rows 320000 bytes apart, not crowded) in chunks of 50 rows
    of 4 KiB tiles 0.78-0.87x, but in the former chunks of 67-100 rows of 480-640 columns 0.97-1.14x; the
    first mode of 320x240x160 (rows a multiple of 4 KiB apart: crowded) was then no better than the noise in
    any tiling tried (chunks of 8-100 rows, tiles of 128-2048 columns: the best 0.90-0.97x in one run, 0.98-1.06x
    in another), so it stayed packed; since the tiles run in at most two pieces a worker
    (``KERNEL_PIECES_PER_WORKER``) the crowded rows read directly too, at R above ``_DIRECT_MAX_RANK`` where
    vectors are wide: first modes at R = 20 / 32, two workers, medians of 8 interleaved rounds in one process,
    direct over packed time, float64 / float32: 320x240x160 0.73 / 0.79x and 0.82 / 0.88x, 64^4 0.85 / 0.72x
    and 0.90 / 0.87x, 128x128x256 0.70 / 0.70x and 0.78 / 0.76x, 256x128x128 0.81 / 0.85x and 0.86 / 1.03x;
    64^4's mode 1 0.77-0.90x except float64 R = 32 (1.16x); 200^3 (not crowded) unchanged. With 256-bit
    vectors (six row blocks of up to six rows at R = 32) the direct reads of long rows measured 1.2-1.9x the
    packed time, so there R above ``_DIRECT_MAX_RANK`` stays packed."""
    if R > _DIRECT_MAX_RANK:
        return _wide_direct() and not _packed_beyond(R, row_len, I, nbytes)
    lines = _L1_LINES_PER_SET_256 if streamed and not wide_vectors() else _crowd_lines()
    return not (row_len >= LONG_ROW_BYTES and _l1_crowded(row_bytes, kc, lines))


def _crowd_lines() -> int:
    """The most lines of one strip per L1 set that :func:`ttm_inner`'s direct kernel takes for R up to
    ``_SHORT_CHUNK_RANK`` (the tiling's cap on long rows that crowd L1, and :func:`_direct_chunks`):
    ``_L1_LINES_PER_SET_WIDE`` = 32 where vectors are wide, ``_L1_LINES_PER_SET`` = 16 with 256-bit vectors."""
    return _L1_LINES_PER_SET_WIDE if wide_vectors() else _L1_LINES_PER_SET


def _l1_crowded(row_bytes: int, kc: int, lines: int = _L1_LINES_PER_SET) -> bool:
    """Whether ``kc`` rows of X ``row_bytes`` apart crowd more than ``_L1_LINES_PER_SET`` of one strip's
    lines into one set of L1 (64 sets of 64-byte lines: rows whose stride is a multiple of 4 KiB all land in
    one set). The direct kernel rereads each strip's lines for every row block; crowded, they miss L1.

    Taken for long rows only (each row of a chunk its own run of memory). Measured at R = 10, two workers,
    interleaved medians of 15, direct over packed time: long rows a multiple of 4 KiB apart (first mode of
    320x240x160 and 64^4 float64, 64^4 float32) 0.98-1.14, median 1.08; half of them (320x240x160 float32)
    0.79; 200^3 float64 (not aligned) 0.91. Middle modes (the chunk one run of memory, prefetched into L2 as
    one) gain from reading directly even when crowded: 0.75-0.84 on (200, 256, 256), (100, 512, 128) and
    (40, 512, 512)."""
    if row_bytes % 64:
        return False
    sets = _l1_sets(row_bytes)
    return -(-kc // min(kc, sets)) > lines


def _l1_sets(row_bytes: int) -> int:
    """The sets of L1 that the lines of one column of rows ``row_bytes`` apart spread over (all of them where
    the rows are not line-aligned)."""
    if row_bytes % 64:
        return _L1_SETS
    q = (row_bytes // 64) % _L1_SETS
    return _L1_SETS // math.gcd(q, _L1_SETS) if q else 1


def _tiling(I: int, R: int, itemsize: int, C: int, snv: int = 2, row_bytes: int = 0,  # noqa: E741
            streamed: bool = False, nbytes: int = 0) -> tuple[int, int]:
    """``(ct, kc)`` of :func:`ttm_inner`: rows of i per chunk, so that one row block's rows of U and one strip of X
    (``kc * (rows + strip)`` elements, rows :func:`_inner_rb`) fill at most ``_L1_BYTES``, and at most ``_MAX_KC``
    (``_MAX_KC_LONG`` for rows of ``LONG_ROW_BYTES`` and more), as even as possible over ``I``; columns per tile, a
    multiple of the strip width (64 bytes, 128 with strips of two lines), the chunk
    at most ``_CHUNK_BYTES`` (in L2), at most ``_MAX_TILE``
    (``_LONG_TILE_BYTES`` of a long row) and no more than ``C`` rounded up to whole strips. Long rows (strided
    gathers of ``kc`` rows, one run of ``ct`` columns each) take short chunks of wide tiles: longer runs per row of
    X (the hardware prefetcher streams each) and fewer rows in flight. Measured on the first mode of 200^3 (R = 10,
    two workers, interleaved medians of 15 on the shared 2-core machine) against the former (320 columns, one chunk
    of 200 rows in float32; 320 x 100 in float64): 0.77-0.81x the time in float32, 0.89-0.92x in float64; the middle
    mode (C = 200) with chunks of 50 instead of 200 rows (float32) 0.90x, float64 alike. Only for ``R`` up to
    ``_SHORT_CHUNK_RANK``: at R = 32 (six row blocks of 256-bit vectors over each chunk, measured before the 512-bit
    blocks: compute-bound) the short chunks measured 0.93-1.06x, median 1.01x, so larger ranks keep the former
    chunks of up to ``_L1_BYTES``. Long rows whose stride ``row_bytes`` crowds L1's sets (a multiple of 4 KiB:
    every row's line in one set) take at most :func:`_crowd_lines` rows a set per chunk, so that the direct
    kernel runs them (:func:`_l1_crowded`): 16 rows read directly measured against chunks of 32 rows packed first
    (the first modes of 320x240x160, 64^4 and 128x128x256, two workers, interleaved medians of 9, the same bits)
    0.59-0.64x the time at R = 10 and 0.67-0.87x at R = 16 in float64 and float32 (where the rows are 4
    KiB-aligned); other strides unchanged (1.0x). Where vectors are wide, 32 rows read directly took 0.71-0.92x
    the time of 16 (``_L1_LINES_PER_SET_WIDE``). The same bits for any chunk. ``streamed`` (the tensor beyond
    ``STREAMED_BYTES``): with 256-bit vectors, short rows take chunks of at most ``_MAX_KC_STREAMED_256`` rows (see
    there).

    Above ``_SHORT_CHUNK_RANK`` where vectors are wide, rows of more than 32 KiB and at most 96 KiB
    (``_MID_ROW_BYTES``) take chunks of at most ``_MAX_KC_MID_ROWS`` = 25 rows, other long rows up to ``_MAX_KC``;
    the L1 check (:func:`_l1_crowded`) looks at the chunks they would take. Measured on the AVX-512 machine
    (``ttm_inner`` alone, two workers, interleaved medians of 7 in one process, the same bits), chunks of at most
    25 against 64 rows at R = 20-32: middle modes with such rows (100^4's and 80^4's mode 1; (A, I, C) of I =
    50-200 and C = 5000-12000 in float64, 10000-20000 in float32) 0.63-1.00x the time, 22 cases (100^4's mode 1 at
    R = 20 had taken 1.15x BLAS's time; 80^4's, whose 64-row chunks crowd L1 and so took the former tiling of 80
    rows, 1.26-1.30x); first modes 0.70-1.01x, 16 cases (I = 100-3000: 3000x30x300 at 1.28-1.32x BLAS's time
    before). Other rows were mixed with the same caps, so they keep theirs: rows of 20-32 KiB 0.93-1.11x (60^4's
    mode 1 among them), first modes' rows of 117 KB and more 0.87-1.16x (200^3, 250^3, 150^3, 300x200x150, 60^4,
    100^4; float32 200^3 at 1.10-1.16x), middle modes' rows of 125-640 KB 0.93-1.00x. Long rows that crowd L1
    at R above 16 keep the former tiling, in chunks of at most ``_MAX_KC_WIDE_CROWDED`` = 40 rows (against 64-107:
    what ``_L1_BYTES`` holds): 80^4's first mode (rows 2 MB apart) float32 0.71-0.73x the time at R = 20 / 32
    (1.18-1.20x BLAS's time before), float64 0.96-1.01x; 320x240x160's first mode float64 0.95 / 1.00x at R = 32
    in two runs and 0.89x at 20, float32 0.94x in both; 64^4's first two modes 0.97-1.00x; 128x128x256 0.95-1.03x
    (float32 at R = 20, a 1.3 ms call, 1.17x and 0.97x in two runs); 160x160x128 and 256x128x128 0.99-1.01x;
    chunks of 27-32 rows were mixed (0.70-1.23x). The sums are the same bits for any tiling."""
    w = 32 * snv // itemsize  # the strip: one cache line, or two (:func:`_inner_strip`)
    if _many_long_rows(I, R, itemsize, C, nbytes):
        # (many long rows of a streamed tensor at a rank of one row block, where vectors are wide: chunks of
        # _MANY_ROWS_KC rows of at least two tiles a row of at most _MANY_ROWS_TILE_BYTES, as even as possible)
        tiles = max(2, -(-C * itemsize // _MANY_ROWS_TILE_BYTES))
        per = -(-C // tiles)
        return -(-per // w) * w, _chunk_rows(I, _MANY_ROWS_KC, w, itemsize)
    if _packed_beyond(R, C * itemsize, I, nbytes):
        # (long rows above MAX_RANK, or above _SHORT_CHUNK_RANK over few rows of a large tensor, where vectors are
        # wide: chunks of up to _PACKED_KC rows of tiles of _PACKED_TILE_BYTES a row, packed first: _packed_beyond)
        kc = -(-I // -(-I // _PACKED_KC))
        return max(w, min(_PACKED_TILE_BYTES // itemsize, -(-C // w) * w) // w * w), kc
    short = R <= _SHORT_CHUNK_RANK
    long = short and C * itemsize >= LONG_ROW_BYTES
    cap = (_max_kc_long() if long else _short_kc(streamed)) if short else I
    if not short and C * itemsize >= LONG_ROW_BYTES and _wide_direct():
        wide_cap = _wide_long_cap(C * itemsize)
        if not _wide_crowded(I, R, itemsize, C, row_bytes, snv):
            # larger R on long rows that do not crowd L1 in such chunks, where vectors are wide: read directly
            # (_direct_chunks) in chunks of up to _MAX_KC rows (_MAX_KC_MID_ROWS for rows of 32-96 KiB) of tiles
            # of _LONG_TILE_BYTES
            long = True
            cap = wide_cap
        else:
            # where they crowd L1: the former tiling (chunks of what fills _L1_BYTES), of at most
            # _MAX_KC_WIDE_CROWDED rows
            cap = min(cap, _MAX_KC_WIDE_CROWDED)
    if long and short:
        cap = _one_block_kc(R, cap)
    if long and short and row_bytes:
        # rows whose stride crowds L1's sets (_l1_crowded) take chunks of no more rows than the sets hold, read
        # directly, rather than longer chunks packed first: 0.59-0.87x the time on rows a multiple of 4 KiB apart
        cap = min(cap, _crowd_lines() * _l1_sets(row_bytes))
    kc = _chunk_rows(I, cap, w, itemsize)
    widest = _LONG_TILE_BYTES // itemsize if long else _MAX_TILE
    ct = min(widest, _CHUNK_BYTES // (kc * itemsize), -(-C // w) * w)
    return max(w, ct // w * w), kc


#: whether :func:`ttm_inner` takes the tiling of :func:`_many_long_rows`; the fewest contracted rows it takes, the
#: rows per chunk and the most bytes of a row per tile there
MANY_ROWS = True
MANY_ROWS_MIN_I = 1000
_MANY_ROWS_KC = 16
_MANY_ROWS_TILE_BYTES = 16 << 10


def _many_long_rows(I: int, R: int, itemsize: int, C: int, nbytes: int) -> bool:  # noqa: E741
    """Whether :func:`ttm_inner`'s tiles of long rows (``LONG_ROW_BYTES`` and more) contracted over many of them
    (``I`` from ``MANY_ROWS_MIN_I``: the merged first half of a 4-way tensor in CP-ALS's pass, (I_0 I_1, I_2 I_3))
    take chunks of ``_MANY_ROWS_KC`` = 16 rows of at least two tiles a row, each at most ``_MANY_ROWS_TILE_BYTES``
    = 16 KiB wide (:func:`_tiling`), instead of chunks of 32 rows of 4 KiB tiles: R up to one row block
    (:func:`_inner_rb`), a tensor beyond ``STREAMED_BYTES``, where vectors are wide. The same bits (any tiling).

    Measured on the 2-core Zen 5 machine (``ttm_inner`` alone, two workers, interleaved medians of 15 in one
    process; (1, I, C) views at R = 4 / 8 / 10 / 12, tiles of 16 KiB): float64
    (1, 3600, 3600) 0.86 / 0.90 / 0.76 / 0.90x the time, (1, 4096, 4096) 0.85 / 0.86 / 0.88 / 0.97x,
    (1, 6400, 6400) 0.88 / 0.85 / 0.76 / 0.84x; float32 (1, 3600, 3600) 0.86 / 1.02 / 1.01 / 1.00x, (1, 2500,
    2500) 0.99 / 1.01 / 0.90 / 0.95x, (1, 6400, 6400) 0.94 / 0.89 / 0.85 / 0.89x; at R = 10 (1, 1000, 10000)
    0.92x (float32 0.80x), (1, 1500, 8000) 0.78x. Tiles split evenly instead (at least two a row, whatever
    the workers), R = 10: float64 (1, 3600, 3600) 0.75x, (1, 6400, 6400) 0.72x, float32 (1, 3600, 3600) 0.79x,
    (1, 2000, 2000) float64 (32 MB) 0.89x, where one tile of the whole row had taken 1.31-1.42x (one worker).
    Left out: R = 14 and 16 (1.12-1.27x: two row blocks reread each strip), 200^3's first mode (I = 200,
    float32 1.11x), (1, 500, 20000) (0.98x), and a float32 (1, 2000, 2000) in cache (16 MB, R = 8, 1.09x)."""
    return (MANY_ROWS and I >= MANY_ROWS_MIN_I and R <= _inner_rb() and C * itemsize >= LONG_ROW_BYTES
            and nbytes > STREAMED_BYTES and wide_vectors())


#: whether :func:`ttm_inner` packs the chunks of long rows above ``MAX_RANK`` where vectors are wide, and from
#: rank 17 over at most ``PACKED_MAX_I`` contracted rows of a large tensor (:func:`_packed_beyond`); the rows per
#: chunk and the bytes of a row per tile
PACKED_BEYOND = True
PACKED_MAX_I = 128
_PACKED_KC = 64
_PACKED_TILE_BYTES = 2048


def _packed_beyond(R: int, row_len: int, I: int = 0, nbytes: int = 0) -> bool:  # noqa: E741
    """Whether :func:`ttm_inner` runs rows of ``row_len`` bytes at rank ``R`` in chunks of at most ``_PACKED_KC``
    rows of tiles of ``_PACKED_TILE_BYTES``, each chunk packed into strips before its row blocks (:func:`_tiling`,
    :func:`_direct_chunks`): long rows (``LONG_ROW_BYTES`` and more) above ``MAX_RANK`` where vectors are
    wide. Against the direct reads of such rows (:func:`ttm_inner` alone, two workers, interleaved medians of
    9-11 in one process; chunks of 50-64 rows of 2 KiB tiles), float64 at R = 50: the first mode of 200^3
    0.83-0.90x the time, 320x240x160 0.77-0.81x, 60^4 0.70-0.81x, 150^3 0.84x, mode 1 of 64^4 (rows 32 KiB)
    0.58-0.60x; float32 200^3 0.88-0.95x; at R = 64 0.60-0.91x; but at R = 33-40 the first mode of 200^3
    0.87-1.15x (runs apart), so not below ``MAX_RANK``, where the direct reads were measured the better
    (:func:`_direct_chunks`). The planner's choice for such rows: :func:`planned_beyond_max_rank`.

    Above ``_SHORT_CHUNK_RANK`` up to ``MAX_RANK`` the chunks are packed too where the contracted extent ``I`` is
    at most ``PACKED_MAX_I`` (one or two chunks: 4-way tensors' first and second modes) on a tensor of at least
    ``BEYOND_MIN_BYTES`` (``nbytes``): the planner's plans (BLAS, or the direct reads) against packed chunks, two
    workers, interleaved medians of 7-9, R = 20 / 32, float64: 64^4 modes 0 and 1 0.76 / 0.82x and 0.88 / 0.83x
    the time, 60^4 0.88 / 0.84x and 0.95 / 0.87x, 50x400x400 0.78 / 0.84x, 96x96x96x32 0.86 / 0.88x, 128x128x256
    0.76 / 0.90x, 64x256x256 0.85 / 0.79x; float32 64^4 0.90 / 0.72x and 0.96 / 0.80x, 60^4 0.94 / 0.81x and 0.97
    / 0.89x, 80^4 0.94 / 0.90x and 1.00 / 0.98x, 50x400x400 0.98 / 0.89x, 96x96x96x32 0.95 / 0.78x, 40x200x200x20
    0.83 / 0.82x, 64x256x256 1.00 / 0.78x, 128x128x256 0.94 / 1.01x, 100x100x100x20's mode 1 1.02 / 1.00x. Longer
    contracted extents keep the direct reads there (200^3's and 320x240x160's first modes at R = 20 1.04-1.13x,
    R = 32 0.94-1.03x; 150^3 0.70-0.98x), and so do smaller tensors (100^3 and 120^3: 0.90-1.19x)."""
    if not (PACKED_BEYOND and row_len >= LONG_ROW_BYTES and _wide_direct()):
        return False
    if R > MAX_RANK:
        return True
    return R > _SHORT_CHUNK_RANK and 0 < I <= PACKED_MAX_I and nbytes >= BEYOND_MIN_BYTES


def _wide_long_cap(row_len: int) -> int:
    """The most rows of i per chunk of long rows of ``row_len`` bytes at R above ``_SHORT_CHUNK_RANK`` where
    vectors are wide, before L1's sets are looked at (:func:`_tiling`)."""
    lo, hi = _MID_ROW_BYTES
    return _MAX_KC_MID_ROWS if lo < row_len <= hi else _MAX_KC


def _wide_crowded(I: int, R: int, itemsize: int, C: int, row_bytes: int,  # noqa: E741
                  snv: int | None = None) -> bool:
    """Whether :func:`ttm_inner`'s long rows (``C`` columns, ``row_bytes`` apart) at R above
    ``_SHORT_CHUNK_RANK``, where vectors are wide, crowd L1 in the chunks :func:`_tiling` would give them
    (:func:`_l1_crowded`; strips of ``snv`` 256-bit vectors, :func:`_inner_strip` if None), so that it keeps
    them to chunks of ``_MAX_KC_WIDE_CROWDED`` rows; False elsewhere, and above ``MAX_RANK`` (packed chunks:
    :func:`_packed_beyond`). :func:`_tiling` asks it after its own test of the packed chunks."""
    if (R <= _SHORT_CHUNK_RANK or C * itemsize < LONG_ROW_BYTES or not row_bytes or not _wide_direct()
            or _packed_beyond(R, C * itemsize, I)):  # (packed chunks: no rows crowd L1)
        return False
    w = 32 * (_inner_strip(R) if snv is None else snv) // itemsize
    return _l1_crowded(row_bytes, _chunk_rows(I, _wide_long_cap(C * itemsize), w, itemsize))


def _one_block_kc(R: int, cap: int) -> int:
    """The most rows of i per chunk of a long row (``cap`` before) at a rank of one row block (R up to
    :func:`_inner_rb`) where vectors are wide: at most ``_MAX_KC_ONE_BLOCK`` = 24, rather than ``_MAX_KC_LONG``
    = 32 (and rather than the 32 rows a set of L1 that :func:`_crowd_lines` lets through where rows crowd one
    set). Each strip of X is then read once per chunk: L1 holds it for no second row block, and the fewer rows
    in flight the memory serves faster. Measured on the AVX-512 Zen 5 machine (first modes, ``ttm_inner``
    alone, two workers, interleaved medians of 9 in one process, chunks of 24 rows of 4 KiB tiles against the
    former 29-32, the same bits): R = 4 / 8 / 10 / 12 on (I, C) = 200 x 40000, 320 x 38400 (rows a multiple
    of 4 KiB apart), 64 x 262144 and 128 x 32768, float64 and float32: 0.64-1.04x the time, median about 0.87x
    (320 x 38400 float64 R = 10 0.75x, float32 0.78-0.81x; 200 x 40000 0.74-0.91x); at R = 14 / 16 (two row
    blocks, each rereading the strip) 0.96-1.11x, so those keep theirs. Many long rows
    (:func:`_many_long_rows`) keep their 16 rows of wider tiles (chunks of 24 rows of 4-8 KiB tiles there:
    float64 1.11-1.13x, float32 0.94-0.95x). Whole CP-ALS iterations (rank 10, interleaved medians of 7 calls
    of 20 iterations, the same bits): 200^3 0.92x (float64) and 0.87x (float32), 320x240x160 0.75x, 60^4
    0.99x; HOOI 0.98x, 0.99x, 0.98x and 0.93x. 256-bit vectors keep ``_MAX_KC_LONG_256``."""
    return min(cap, _MAX_KC_ONE_BLOCK) if wide_vectors() and R <= _inner_rb() else cap


def _max_kc_long() -> int:
    """The most rows of i per chunk of a long row (:func:`_tiling`, R up to ``_SHORT_CHUNK_RANK``):
    ``_MAX_KC_LONG`` = 32 where vectors are wide (measured there, see :func:`_tiling`), ``_MAX_KC_LONG_256`` = 16
    with 256-bit vectors. Measured on a 2-core AVX2 machine (2.45 GHz, 32 MiB L3, one 64 MB read 5-6 ms; the
    first mode's ``ttm_inner`` alone, two workers, interleaved medians of 9, caps 32 / 24 / 16 / 12 / 8, the
    same bits for every cap): 200^3 R = 10 float64 9.88 / 8.23 / 7.81 / 7.67 / 8.00 ms (16: 0.79x), float32
    0.80x, R = 16 0.89x, R = 5 0.82x; 320x240x160 float32 0.90x; 300x200x100 0.75x, 150^3 0.79x, 100^3 0.94x,
    120^3 float32 1.03x (noise); where L1's sets already cap the chunk at 16 rows (rows a multiple of 4 KiB
    apart: 320x240x160 float64, 128^3, 64^4) unchanged. Whole CP-ALS iterations on 200^3 (R = 10) 0.93x.
    Fewer rows in flight per chunk: the strided gathers of a chunk are one run per row, and this machine's
    memory has fewer of them to serve."""
    return _MAX_KC_LONG if wide_vectors() else _MAX_KC_LONG_256


#: with 256-bit vectors, the most rows of i per chunk of short rows (a middle mode) of a tensor streamed from
#: memory (``STREAMED_BYTES``); see :func:`_short_kc`
_MAX_KC_STREAMED_256 = 32


def _short_kc(streamed: bool) -> int:
    """The most rows of i per chunk of short rows (:func:`_tiling`, R up to ``_SHORT_CHUNK_RANK``): ``_MAX_KC``
    = 64, or ``_MAX_KC_STREAMED_256`` = 32 with 256-bit vectors on a tensor streamed from memory. Measured on a
    2-core AVX2 machine (middle modes, R = 10, ``ttm_inner`` alone, two workers, interleaved medians of 9, the
    same bits): 200^3 0.88x (float32 0.96x), 64^4's mode 2 0.92x, 320x240x160 0.98x (float32 0.98x); but in
    cache 128^3 1.01x and 100^3 1.06x, hence only beyond ``STREAMED_BYTES``."""
    return _MAX_KC_STREAMED_256 if streamed and not wide_vectors() else _MAX_KC


def _chunk_rows(I: int, cap: int, w: int, itemsize: int) -> int:  # noqa: E741
    """Rows of i per chunk of :func:`_tiling`: at most ``cap`` and what one row block and one strip of ``w``
    columns keep in ``_L1_BYTES``, at least ``_MIN_KC``, as even as possible over ``I``."""
    kc = max(_MIN_KC, min(cap, _L1_BYTES // ((_inner_rb() + w) * itemsize)))
    return -(-I // -(-I // kc))


@functools.lru_cache(maxsize=256)
def _blocks(I: int, R: int) -> tuple[list[tuple[int, int]], np.ndarray]:  # noqa: E741
    """:func:`_row_blocks` of ``R`` and the kernel's table of them: rows (first row, rows, offset of the
    block's packed rows of U), for ``I`` rows of U (kept: the same few tables every sweep)."""
    rows = _row_blocks(R)
    offs = np.cumsum([0] + [I * rb for _, rb in rows])[:-1]
    blocks = np.array([(r0, rb, o) for (r0, rb), o in zip(rows, offs, strict=True)], dtype=np.int64)
    return rows, blocks


def _inner_strip(R: int) -> int:
    """256-bit vectors per strip of :func:`ttm_inner`: four (two cache lines of each row of X, two 512-bit
    vectors: 24 accumulators in twelve rows, a broadcast of U feeding two fused multiply-adds) where vectors
    are wide and ``R`` is at least ``_QUAD_MIN_RANK``, else two (one line). The bits do not depend on it."""
    return 4 if wide_vectors() and R >= _QUAD_MIN_RANK else 2


def _inner_rb() -> int:
    """The widest row block of :func:`ttm_inner`: ``WIDE_RB`` where a row's line is one 512-bit vector, else
    ``MAX_RB`` (the blocking changes no bit: every element is one in-order chain whatever the block)."""
    return WIDE_RB if wide_vectors() else MAX_RB


def _row_blocks(R: int) -> list[tuple[int, int]]:
    """``R`` rows cut into blocks of at most :func:`_inner_rb`, as even as possible (``MAX_RB`` = 6: 10 is
    5 + 5, 32 is 6 + 6 + 5 * 4; ``WIDE_RB`` = 12: 10 is one block, 32 is 11 + 11 + 10)."""
    nb = -(-R // _inner_rb())
    sizes = [R // nb + (1 if i < R % nb else 0) for i in range(nb)]
    starts = [sum(sizes[:i]) for i in range(nb)]
    return list(zip(starts, sizes, strict=True))


#: the register blocks of :func:`ttm_outer` that only machines with 512-bit vectors choose:
#: ``_wide_gblock(nv, rb, ...)``, strips of two vectors with 7-12 rows, strips of four vectors
#: (:func:`_outer_rb`, :func:`_outer_strips`; one switch in the IR, :func:`~tuckerkit.engine._simd._make_family`)
_wide_gblock = gwide_blocks


@njit(cache=True, nogil=True, inline="always")
def _gblock(nv, rb, x, xo, sxi, n, up, uo, sui, sur, y, yo, syr, acc_in, px, pfo, pfs, pfn):  # pragma: no cover
    # one register block of :func:`ttm_outer`: rb rows of X (broadcast, at strides sui, sur) against a strip
    # of nv vectors of the packed U (the wide variants only where ``_ALL_BLOCKS``: see there); two vectors of
    # 1-6 rows, three of 1-4, one of 1-6 otherwise
    if _ALL_BLOCKS and (nv == 4 or (nv == 2 and MAX_RB < rb <= WIDE_RB)):
        _wide_gblock(nv, rb, x, xo, sxi, n, up, uo, sui, sur, y, yo, syr, acc_in, px, pfo, pfs, pfn)
    else:
        gnarrow_blocks(nv, rb, x, xo, sxi, n, up, uo, sui, sur, y, yo, syr, acc_in, px, pfo, pfs, pfn)


@njit(cache=True, nogil=True, inline="always")
def _strip_rows(nv, grw):  # pragma: no cover
    # rows of X per register block of a strip of nv (256-bit) vectors of U: 24 accumulators in two 512-bit
    # vectors a row (nv = 4: only where vectors are wide), 12 in three, grw (12 or 6) in two
    if nv == 4:
        return QUAD_RB
    if nv == 3:
        return 4
    if nv == 2:
        return grw
    return MAX_RB


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _outer_gemm_kernel(x, A, I, sxa, sxi, up, R, strips, y, sya, syr, kc, direct, pfd, grw, tl, t_lo, t_hi, ut, five,  # noqa: E741 # pragma: no cover
                       zero):
    # tile t: rows [12 t, 12 t + 12) of X, each element broadcast against a strip of the packed U (I rows of Rp
    # columns, Rp = R rounded up to whole (512-bit where wide) vectors, the padding zero): the register block of
    # the inner kernel with the roles swapped (rows of X for rows of U, columns of U for columns of X), 12 vector
    # accumulators (six rows x two vectors, or four rows x three; with 512-bit vectors the two are one and the
    # block takes grw = 12 rows), 24 in strips of four 256-bit vectors (twelve rows; only where vectors are
    # wide: _strip_rows), one fused multiply-add per term, i in order. Chunks of
    # kc rows of i (a strip's rows of U and the tile's rows of X stay in L1) carry the exact partial sums
    # through the output. Where the output's rows are unit-strided and R is whole vectors the blocks write Y
    # directly, else into a private buffer copied out (the padded columns dropped): after each tile, or where R
    # is outermost in Y after each group of tiles the buffer holds (``_OUTER_COPY_TILES``), there a line of rows
    # at a time as L x L blocks transposed in registers (:func:`~._simd.tr_block`, where the buffer's rows are
    # whole 512-bit vectors; element by element before: in cache the copy had cost 10-20 % of the time). CP-ALS's
    # rank-outer partials take that copy: X of (40000, 200) at R = 32 / 50, two workers, interleaved medians of
    # 11 (stop 79), 0.89 / 0.88x the time in float64, 0.80 / 1.0x in float32; CP-ALS on 200^3 (6 iterations)
    # 0.91 / 0.97x and 0.95 / 0.93x; the same bits. Where :func:`outer_tail_style` says so, R here is the columns
    # in whole vectors and the rows of ``ut`` (U's last columns) are dot products of each tile's rows after its
    # blocks (:func:`_tail_dots`), stored into Y directly
    Rp = up.shape[0] // I
    nstrip = strips.shape[0]
    ln = 64 // x.itemsize  # elements of one cache line
    lpr = (I * sxi + ln - 1) // ln  # lines of one row of X (from its first element: all inside the array)
    calls = 0
    for s in range(nstrip):
        calls += -(-_OUTER_ROWS // _strip_rows(strips[s, 1], grw))
    calls *= (I + kc - 1) // kc
    contig = sxa == I * sxi  # the rows back to back: a tile's rows are one run of memory
    # tiles whose rows the buffer collects before they are copied out: several where the output has its rows
    # of A unit-strided (R outermost: each copy then a run of that many tiles' rows per column, not of twelve)
    grp = tl.size // (_OUTER_ROWS * Rp) if (not direct and sya == 1 and syr != 1) else 1
    for t in range(t_lo, t_hi):
        a0 = _OUTER_ROWS * t
        h = min(_OUTER_ROWS, A - a0)
        xa = a0 * sxa
        slot = (t - t_lo) % grp
        # the rows pfd tiles ahead are prefetched while this one computes (their DRAM reads overlap the fused
        # multiply-adds instead of following them), spread over the blocks: one run of the whole tile where its
        # rows lie back to back, else one row's lines at most per block. Against a row's lines at most per block
        # on rows back to back (a share of the lines per block, but a row's last few lines a block of their
        # own, so the blocks ran out with a third of the lines left, issued in one burst after the tile):
        # two workers, interleaved medians of 15, the same bits: X of (40000, 200) and (76800, 160) at R = 32
        # 0.88-0.95x the time in float64, 0.85-0.95x in float32; R = 16 / 20 / 50 0.82-0.87 / 0.88 / 0.94-0.96x;
        # (40000, 64) 0.90-0.95x; (4096, 200) 0.92-1.0x; one worker 0.83-0.98x (three runs)
        qa = a0 + _OUTER_ROWS * pfd
        nq = min(_OUTER_ROWS, A - qa) if pfd > 0 and t + pfd < t_hi else 0
        rl = lpr  # lines of one run
        if contig:
            rl = min((nq * sxa + ln - 1) // ln + 1, (x.shape[0] - qa * sxa + ln - 1) // ln)
            nq = 1 if nq > 0 else 0
        qtot = nq * rl
        per = (qtot + calls - 1) // calls
        q = 0
        qr = 0  # q = qr * rl + qs, kept without a division per block
        qs = 0
        for i0 in range(0, I, kc):
            n = min(kc, I - i0)
            for s in range(nstrip):
                c0, nv = strips[s, 0], strips[s, 1]
                gr = _strip_rows(nv, grw)
                for g0 in range(0, h, gr):
                    rb = min(gr, h - g0)
                    pfo = xa + i0 * sxi  # nothing to fetch: the line this block starts at
                    pfn = 0
                    if q < qtot:
                        pfn = min(per, rl - qs, n)
                        pfo = (qa + qr) * sxa + qs * ln
                        q += pfn
                        qs += pfn
                        if qs == rl:
                            qs = 0
                            qr += 1
                    # one call site (each inlines every block variant: compile time)
                    yy = y if direct else tl
                    yo = (a0 + g0) * sya + c0 if direct else (slot * _OUTER_ROWS + g0) * Rp + c0
                    _gblock(nv, rb, up, i0 * Rp + c0, Rp, n, x, xa + g0 * sxa + i0 * sxi, sxi, sxa,
                            yy, yo, sya if direct else Rp, i0, x, pfo, ln, pfn)
        while q < qtot:
            prefetch_l2(x, (qa + qr) * sxa + qs * ln)
            q += 1
            qs += 1
            if qs == rl:
                qs = 0
                qr += 1
        if not direct:
            if syr == 1:  # rows of the output unit-strided: a run of R a row (the padding dropped), whole
                # vectors and one masked (element by element before: 0.70 against 0.81 of the GEMM peak without
                # any copy, float64 R = 50 in cache)
                for a in range(h):
                    copy_run(tl, a * Rp, y, (a0 + a) * sya, R)
            elif sya == 1:  # columns of the output unit-strided (Y as (R, A) rows): a run of the group's rows a
                # column, once the group's last tile is done
                if slot == grp - 1 or t == t_hi - 1:
                    af = a0 - slot * _OUTER_ROWS
                    hh = a0 + h - af
                    for b0 in range(0, hh, ln):  # a line of each column at a time (the buffer's rows in L1)
                        b1 = min(hh, b0 + ln)
                        if b1 - b0 == ln and Rp % ln == 0:
                            # a line's rows by L x L blocks transposed in registers (one vector store a column)
                            for r0 in range(0, R, ln):
                                tr_block(tl, b0 * Rp + r0, Rp, y, af + b0 + r0 * syr, syr, min(ln, R - r0))
                            continue
                        for r in range(R):
                            yr = af + r * syr
                            for a in range(b0, b1):
                                y[yr + a] = tl[a * Rp + r]
            else:
                for a in range(h):
                    for r in range(R):
                        y[(a0 + a) * sya + r * syr] = tl[a * Rp + r]
        if ut.shape[0] > 0:  # the columns past the blocks' whole vectors: dot products of the tile's rows, in cache
            _tail_dots(x, xa, sxa, h, I, ut, y, a0 * sya + R * syr, sya, syr, five, zero)


@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, **NO_RUNTIME)
def _tail_dots(x, xo, sxa, h, I, ut, y, yo, sya, syr, five, zero):  # noqa: E741 # pragma: no cover
    # rows [0, h) of X (from xo, sxa apart, unit-strided) against the rows of ``ut`` (columns of U), stored at
    # y[yo + c * syr + a * sya]: :func:`_outer_dot_kernel`'s blocks of four rows against five or two columns
    R = ut.shape[0]
    for g in range(0, h, 4):
        hg = min(4, h - g)
        o = xo + g * sxa
        x0 = x[o: o + I]
        x1 = x[o + min(1, hg - 1) * sxa: o + min(1, hg - 1) * sxa + I]
        x2 = x[o + min(2, hg - 1) * sxa: o + min(2, hg - 1) * sxa + I]
        x3 = x[o + min(3, hg - 1) * sxa: o + min(3, hg - 1) * sxa + I]
        r = 0
        while r < R:
            r = _dot_step(x0, x1, x2, x3, ut, r, five, I, y, yo + r * syr + g * sya, sya, syr, hg, zero)


#: one tile of the transposed-tile kernel (``_simd.tr3`` ... ``tr20``): R accumulators, the variant of that R, by
#: a switch emitted as IR (``_simd.tr_tiles``)
_tr_tile = tr_tiles


@njit(cache=True, nogil=True, inline="always")
def _vdot_tile(R, x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh):  # noqa: E741 # pragma: no cover
    # one tile of the row-dot kernel (_simd.vdot1 ... vdot12): the variant of that R
    if R == 10:
        vdot10(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 1:
        vdot1(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 2:
        vdot2(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 3:
        vdot3(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 4:
        vdot4(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 5:
        vdot5(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 6:
        vdot6(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 7:
        vdot7(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 8:
        vdot8(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 9:
        vdot9(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 11:
        vdot11(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    elif R == 12:
        vdot12(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)
    else:
        raise ValueError("internal error: no row-dot tile of that rank")


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _outer_vdot_kernel(x, A, I, sxa, u, su, R, y, sya, syr, t_lo, t_hi, pfd):  # noqa: E741 # pragma: no cover
    # tile t: rows [NR t, NR t + NR) of X (NR = vdot_rows(R)), each against the R rows of U^T (packed as (R, su)
    # rows, zero-padded to whole 512-bit vectors) as dot products along the unit stride: NR x R vector
    # accumulators, summed at the end of the rows by one shuffle network (:func:`tuckerkit.engine._simd._make_vdot`)
    # and stored straight into y. The rows pfd tiles ahead are prefetched into L2, a line of each a step.
    NR = vdot_rows(R)
    for t in range(t_lo, t_hi):
        a0 = NR * t
        h = min(NR, A - a0)
        qa = a0 + NR * pfd
        pfh = min(NR, A - qa) if pfd > 0 and t + pfd < t_hi else 0
        _vdot_tile(R, x, a0 * sxa, sxa, h, I, u, su, y, a0 * sya, sya, syr, qa * sxa if pfh > 0 else 0, pfh)


#: the largest R of the short-rows kernel (:func:`inner_short_style`)
SHORT_MAX_R = 20
#: the short-rows kernel's flops count this many times in its cut into pieces (:func:`_cut_flops`): it runs at
#: about half the register-blocked kernels' rate (32 GFlop/s a core in cache at R = 10 on rows of 3), so a call
#: of half their ``KERNEL_PARALLEL_FLOPS`` takes as long
SHORT_CUT_SCALE = 2
#: elements of X per tile of :func:`_inner_short_kernel` (whole slabs, at least one)
SHORT_TILE_ELEMS = 1 << 14


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _inner_short_kernel(x, A, I, C, sxa, ut, su, R, y, sya, syr, syc, spt, t_lo, t_hi):  # noqa: E741 # pragma: no cover
    # tile t: slabs [spt t, spt (t + 1)) of X (slab a: I rows of C unit-strided elements back to back from x[a sxa])
    # against U^T (R rows of su elements in ut, zero-padded past I), a block of SHORT_ACC // C rows of U^T at a time
    # (tuckerkit.engine._simd.short_slab: lanes over i, one accumulator per (row of U^T, column), their lanes summed
    # by one tree), into y[a sya + r syr + c syc]
    nb = SHORT_ACC // C
    for t in range(t_lo, t_hi):
        for a in range(t * spt, min(A, (t + 1) * spt)):
            for r0 in range(0, R, nb):
                short_slab(x, a * sxa, I, C, ut, su, r0, min(nb, R - r0), y, a * sya + r0 * syr, syr, syc)


#: rows of X per tile of :func:`_outer_tiny_kernel` (whole 512-bit blocks of either dtype)
TINY_TILE_ROWS = 2048


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _outer_tiny_kernel(x, A, I, up, R, y, tl, t_lo, t_hi):  # noqa: E741 # pragma: no cover
    # tile t: rows [TINY_TILE_ROWS t, TINY_TILE_ROWS (t + 1)) of a dense (A, I) X into the same rows of a dense
    # (A, R) y, L rows a block (L = 8 float64, 16 float32; tuckerkit.engine._simd.tiny_block: lanes over the rows,
    # each output the chain of fused multiply-adds in i from zero), U packed as (I, R) rows in up. The rows after
    # a tile's last whole block (fewer than L: only in the last tile) are copied into tl, zero-padded, run as one
    # block into tl's second part and only their outputs copied out: the same chain for each of them
    L = 64 // x.itemsize
    for t in range(t_lo, t_hi):
        a0 = t * TINY_TILE_ROWS
        a1 = min(A, a0 + TINY_TILE_ROWS)
        nfull = (a1 - a0) // L
        for b in range(nfull):
            a = a0 + b * L
            tiny_block(x, a * I, I, up, R, y, a * R)
        a = a0 + nfull * L
        if a < a1:
            n = (a1 - a) * I
            for j in range(L * I):
                tl[j] = x[a * I + j] if j < n else 0
            tiny_block(tl, 0, I, up, R, tl, L * I)
            for j in range((a1 - a) * R):
                y[a * R + j] = tl[L * I + j]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _outer_tr_kernel(x, A, I, sxa, up, R, y, sya, syr, tl, t_lo, t_hi, pfd):  # noqa: E741 # pragma: no cover
    # tile t: rows [L t, L t + L) of X (L = 16 float32, 8 float64: one 512-bit vector), lanes over the rows:
    # each step's L x L block transposed in registers and its columns broadcast against U's rows (packed as
    # (Ip, R), Ip = I rounded up to whole L, the padding zero), one accumulator a column of U
    # (:func:`tuckerkit.engine._simd._make_tr`), each output the chain of fused multiply-adds in i from zero.
    # The tile pfd tiles ahead is prefetched into L2, a line of each of its rows a step. A whole tile's sums are
    # stored from the registers straight into y where its rows of A are unit-strided (Y as (R, A) rows: one
    # vector a sum) or its R sums a row are (Y as (A, R): the sums transposed in registers, one masked store a
    # row); a partial tile's, or those of any other layout, land in the piece's buffer tl (R x L) and are
    # copied out element by element. The copy had cost a third of the time on short rows: in cache, one
    # thread, float32 R = 10, of the GEMM peak, rows of 80 / 160 / 200 / 640 elements 0.48 / 0.60 / 0.60 /
    # 0.72 -> 0.66 / 0.73 / 0.70 / 0.76 ((R, A) output; (A, R) 0.62 / 0.68 / 0.67 / 0.74); streamed from
    # memory, two workers, interleaved medians of 11 (stop 79): 0.72-1.02x the time, most 0.79-0.95x; HOOI on
    # 200^3 (10 iterations) 0.94x float64, 0.97x float32, CP-ALS 1.0x / 0.96x; the same bits
    L = 64 // x.itemsize
    for t in range(t_lo, t_hi):
        a0 = L * t
        h = min(L, A - a0)
        qa = a0 + L * pfd
        pfh = min(L, A - qa) if pfd > 0 and t + pfd < t_hi else 0
        # a whole tile's sums go straight into y where its rows or its columns are unit-strided (one vector
        # store a sum, or the sums transposed in registers: no copy through tl)
        # (float32 tiles beyond TR_MAX_RANK, never planned, write NaN sums into tl only)
        how = 0
        yo = 0
        ys = 0
        whole = h == L and R <= (TR_MAX_RANK if L == 16 else TR_MAX_RANK_F64)
        if whole and sya == 1:
            how, yo, ys = 1, a0, syr
        elif whole and syr == 1:
            how, yo, ys = 2, a0 * sya, sya
        _tr_tile(R, x, a0 * sxa, sxa, h, I, up, tl, qa * sxa if pfh > 0 else 0, pfh, y, yo, ys, how)
        if how != 0:
            continue
        if sya == 1:
            for r in range(R):
                yr = a0 + r * syr
                for a in range(h):
                    y[yr + a] = tl[r * L + a]
        else:
            for a in range(h):
                ya = (a0 + a) * sya
                for r in range(R):
                    y[ya + r * syr] = tl[r * L + a]


@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, **NO_RUNTIME)
def _outer_dot_kernel(x, xoff, A, I, sxa, ut, y, yoff, sya, syr, t_lo, t_hi, zero, pfd, w, five):  # noqa: E741 # pragma: no cover
    # four rows of X against five columns of U at a time where ``five`` (twenty dot products share the loads: nine
    # per twenty vector fused multiply-adds; their accumulators need the 32 vector registers of AVX-512), the
    # columns left over (all of them without ``five``) two at a time (eight dot products, six loads); the
    # reduction runs along the unit stride in a compile-time order (vector partial sums, fixed combine)
    R = ut.shape[0]
    n5 = R // 5 if five else 0
    # the rows of the tile pfd tiles ahead are prefetched into L2 in shares, one before each block of columns of
    # U and one after the last (short bursts, so that their DRAM reads overlap the dot products instead of
    # following them): one run of lines where the rows lie back to back, else one run a row. A share of up to
    # ``_DOT_BURST`` lines is a plain loop over consecutive lines (a run split where it ends), no test per
    # line; a longer one (long rows: 1000 float64 elements) is issued a line at a time behind a test, a share
    # before each block only (the former loop: its pace measured better there, 0.96-1.04x against 1.14x).
    # Against that loop everywhere with prefetches one tile ahead (``_OUTER_PREFETCH``, ttm_outer alone, two
    # workers, interleaved medians of 15 in one process, the same bits): X of (40000, 200) R = 10 float64 /
    # float32 0.74-0.82 / 0.79-0.84x the time, R = 12 0.82-0.84 / 0.81-0.83x, R = 3 0.80-0.90 / 0.63-0.69x;
    # (76800, 160) R = 10 0.74-0.84 / 0.80-0.92x; (216000, 60) R = 10 0.73-0.85 / 0.92-0.94x; (10000, 100) and
    # (4096, 64) 0.87-0.95x; but float64 R = 2 and 5 (one block a tile, shares of 50 lines) 1.03-1.11x. One
    # worker, (40000, 200) from memory R = 10: float64 38.4-38.9 against 27.7-28.4 GFlop/s, float32 54.6-60.0
    # against 45.2-46.4, and in L2 ((400, 200)) 38 against 27 and 62 against 47 (the former loop's own cost)
    contig = sxa == I
    lpr = (I + w - 1) // w + 1  # lines of one row (one more: the row need not start on a line)
    nblk = n5 + (R - 5 * n5 + 1) // 2
    last = x.shape[0] - 1
    for t in range(t_lo, t_hi):
        a0 = 4 * t
        h = min(4, A - a0)
        qa = a0 + 4 * pfd
        nq = min(4, A - qa) if pfd > 0 and t + pfd < t_hi else 0
        rl = lpr  # lines of one run
        if contig and nq > 0:
            rl = (nq * I + w - 1) // w + 1
            nq = 1
        per = (nq * rl + nblk) // (nblk + 1)
        paced = per > _DOT_BURST
        if paced:
            per = (nq * rl + nblk - 1) // nblk
        qr = 0  # the run and the line in it of the next prefetch
        qc = 0
        x0 = x[xoff + a0 * sxa: xoff + a0 * sxa + I]
        x1 = x[xoff + (a0 + min(1, h - 1)) * sxa: xoff + (a0 + min(1, h - 1)) * sxa + I]
        x2 = x[xoff + (a0 + min(2, h - 1)) * sxa: xoff + (a0 + min(2, h - 1)) * sxa + I]
        x3 = x[xoff + (a0 + min(3, h - 1)) * sxa: xoff + (a0 + min(3, h - 1)) * sxa + I]
        r = 0
        while r < R:
            if paced:
                for _ in range(per):
                    if qr < nq:
                        prefetch_l2(x, min(xoff + (qa + qr) * sxa + qc * w, last))
                        qc += 1
                        if qc == rl:
                            qc = 0
                            qr += 1
            else:
                m = per
                while m > 0 and qr < nq:
                    k = min(m, rl - qc)
                    o = xoff + (qa + qr) * sxa + qc * w
                    for j in range(k):
                        prefetch_l2(x, min(o + j * w, last))
                    m -= k
                    qc += k
                    if qc == rl:
                        qc = 0
                        qr += 1
            r = _dot_step(x0, x1, x2, x3, ut, r, five, I, y, yoff + r * syr + a0 * sya, sya, syr, h, zero)
        while qr < nq:  # the last share, after the tile's last block
            k = rl - qc
            o = xoff + (qa + qr) * sxa + qc * w
            for j in range(k):
                prefetch_l2(x, min(o + j * w, last))
            qc = 0
            qr += 1


@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, inline="always")
def _dot_step(x0, x1, x2, x3, ut, r, five, I, y, yr, sya, syr, h, zero):  # noqa: E741 # pragma: no cover
    # the dot products of four rows of X with the next five columns of U (rows r.. of ``ut``) where ``five`` and
    # five are left, else the next two (or the last one), stored from y[yr]; the next r
    R = ut.shape[0]
    if five and r + 5 <= R:
        _dot_block5(x0, x1, x2, x3, ut[r], ut[r + 1], ut[r + 2], ut[r + 3], ut[r + 4], I, y, yr, sya, syr, h, zero)
        return r + 5
    _dot_block2(x0, x1, x2, x3, ut[r], ut[min(r + 1, R - 1)], I, y, yr, sya, syr, h, r + 1 < R, zero)
    return r + 2


@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, inline="always")
def _dot_block5(x0, x1, x2, x3, c0, c1, c2, c3, c4, I, y, yr, sya, syr, h, zero):  # noqa: E741 # pragma: no cover
    # the dot products of four rows of X with five columns of U, stored at y[yr + c * syr + a * sya] (a < h)
    s00 = s01 = s02 = s03 = s04 = zero  # (of the data's dtype: a literal 0 would make float32 sums float64)
    s10 = s11 = s12 = s13 = s14 = zero
    s20 = s21 = s22 = s23 = s24 = zero
    s30 = s31 = s32 = s33 = s34 = zero
    for i in range(I):
        p0 = x0[i]
        p1 = x1[i]
        p2 = x2[i]
        p3 = x3[i]
        u0 = c0[i]
        u1 = c1[i]
        u2 = c2[i]
        u3 = c3[i]
        u4 = c4[i]
        s00 += p0 * u0
        s01 += p0 * u1
        s02 += p0 * u2
        s03 += p0 * u3
        s04 += p0 * u4
        s10 += p1 * u0
        s11 += p1 * u1
        s12 += p1 * u2
        s13 += p1 * u3
        s14 += p1 * u4
        s20 += p2 * u0
        s21 += p2 * u1
        s22 += p2 * u2
        s23 += p2 * u3
        s24 += p2 * u4
        s30 += p3 * u0
        s31 += p3 * u1
        s32 += p3 * u2
        s33 += p3 * u3
        s34 += p3 * u4
    _store5(y, yr, syr, s00, s01, s02, s03, s04)
    if h > 1:
        _store5(y, yr + sya, syr, s10, s11, s12, s13, s14)
    if h > 2:
        _store5(y, yr + 2 * sya, syr, s20, s21, s22, s23, s24)
    if h > 3:
        _store5(y, yr + 3 * sya, syr, s30, s31, s32, s33, s34)


@njit(cache=True, nogil=True, inline="always")
def _store5(y, o, syr, v0, v1, v2, v3, v4):  # pragma: no cover
    y[o] = v0
    y[o + syr] = v1
    y[o + 2 * syr] = v2
    y[o + 3 * syr] = v3
    y[o + 4 * syr] = v4


@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, inline="always")
def _dot_block2(x0, x1, x2, x3, c, d, I, y, yr, sya, syr, h, two, zero):  # noqa: E741 # pragma: no cover
    # four rows of X with two columns of U (the second stored only where ``two``)
    s0 = s1 = s2 = s3 = zero
    t0 = t1 = t2 = t3 = zero
    for i in range(I):
        ci = c[i]
        di = d[i]
        p0 = x0[i]
        p1 = x1[i]
        p2 = x2[i]
        p3 = x3[i]
        s0 += p0 * ci
        s1 += p1 * ci
        s2 += p2 * ci
        s3 += p3 * ci
        t0 += p0 * di
        t1 += p1 * di
        t2 += p2 * di
        t3 += p3 * di
    y[yr] = s0
    if h > 1:
        y[yr + sya] = s1
    if h > 2:
        y[yr + 2 * sya] = s2
    if h > 3:
        y[yr + 3 * sya] = s3
    if two:
        yr += syr
        y[yr] = t0
        if h > 1:
            y[yr + sya] = t1
        if h > 2:
            y[yr + 2 * sya] = t2
        if h > 3:
            y[yr + 3 * sya] = t3


def flat_span(a: np.ndarray) -> np.ndarray | None:
    """A 1-D view of the memory ``a`` spans, from its first element (elements apart by ``a``'s strides).

    None when a stride is negative or not a multiple of the itemsize (the kernels index non-negative
    element offsets from the lowest address).
    """
    if a.size == 0 or any(s < 0 or s % a.itemsize for s in a.strides):
        return None
    if a.flags.c_contiguous:  # the common case, without as_strided's ~10 us
        return a.reshape(-1)
    if a.flags.f_contiguous:  # (one block in the other order: its transpose's flat view, the same first element)
        return a.T.reshape(-1)
    if a.ndim > 2:  # one block in some other order of the axes (a rank-outer partial's view)
        b = a.transpose(sorted(range(a.ndim), key=lambda k: -a.strides[k]))
        if b.flags.c_contiguous:
            return b.reshape(-1)
    span = 1 + sum((n - 1) * (s // a.itemsize) for n, s in zip(a.shape, a.strides, strict=True))
    return np.lib.stride_tricks.as_strided(a, shape=(span,), strides=(a.itemsize,))


def ttm_inner(X3: np.ndarray, U: np.ndarray, Y3: np.ndarray, policy: ExecutionPolicy | None = None) -> None:
    """``Y3[a, r, b] = sum_i U[i, r] X3[a, i, b]`` for 3-D views with unit stride along ``b`` (``X3`` and
    ``Y3``) and ``U`` C-contiguous, written into ``Y3``; the tiles split over the policy's workers.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._smallgemm import ttm_inner
    >>> X, U = np.arange(24.0).reshape(2, 3, 4), np.ones((3, 2))
    >>> Y = np.empty((2, 2, 4)); ttm_inner(X, U, Y)
    >>> np.array_equal(Y, np.einsum("aib,ir->arb", X, U))
    True
    """
    fx, fy = flat_span(X3), flat_span(Y3)
    if fx is None or fy is None:
        raise ValueError("ttm_inner needs non-empty views with non-negative strides")
    if any(v.shape[2] > 1 and v.strides[2] != v.itemsize for v in (X3, Y3)):
        raise ValueError("ttm_inner needs unit stride along the last axis of X3 and Y3")
    A, I, C = X3.shape  # noqa: E741
    R = U.shape[1]
    _check_kernel_shapes("ttm_inner", U, (I, R), Y3, (A, R, C))
    if inner_short_style(R, X3.itemsize, C) and _short_slabs(X3):
        args = _short_args(X3, _short_packed(U, X3.dtype), Y3, read_only(fx), fy)
        _kernel_tiles("inner_short", _inner_short_kernel, args, (13, 14), (),
                      _cut_flops("inner_short", 2 * X3.size * R, (X3.size + Y3.size) * X3.itemsize), policy)
        return
    cuts = _reduction_cuts(A, I, C, R, X3.itemsize)
    if len(cuts) == 2:
        _inner_tiles(X3, U, Y3, policy)
        return
    # one tile holds the whole output (a long contracted mode against few short rows): the sum over i cut into
    # pieces by the sizes alone, each piece's partial output its own, added in piece order (the same bits for
    # any number of workers)
    part = np.empty((len(cuts) - 1, A, R, C), Y3.dtype)

    def piece(k: int, _: object) -> None:
        _inner_tiles(X3[:, cuts[k]:cuts[k + 1]], U[cuts[k]:cuts[k + 1]], part[k], None)

    if policy is None or policy.workers < 2:
        for k in range(len(cuts) - 1):
            piece(k, None)
    else:
        parallel_for(piece, len(cuts) - 1, policy)
    np.copyto(Y3, part[0])
    for k in range(1, len(cuts) - 1):
        np.add(Y3, part[k], out=Y3)



def ttm_inner_dot(X3: np.ndarray, U: np.ndarray, W: np.ndarray, policy: ExecutionPolicy | None = None) -> np.ndarray:
    """``M[a, r] = sum_c W[c, r] sum_i U[i, r] X3[a, i, c]`` (shape (A, R)): a 3-way tensor's MTTKRP in one
    pass, the product with ``U`` (:func:`ttm_inner`'s tiles) summed against ``W``'s columns as each tile
    finishes, in cache, instead of written out as (A, R, C) and read back by a batched matrix-vector product
    (CP-ALS's dimension tree, :class:`tuckerkit.engine._sweeps.MttkrpTree`). ``X3`` a 3-D view with unit
    stride along ``c``, ``U`` C-contiguous (I, R), ``W`` (C, R). Each ``M[a, r]`` is the sum over the tiles of
    row ``a`` in order of each tile's sum (its order fixed when the kernel compiles): the same bits for any
    number of workers on a given machine. None where the whole output is one tile (:func:`_reduction_cuts`
    cuts the sum over i there): the caller keeps the two steps.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._smallgemm import ttm_inner_dot
    >>> X, U, W = np.arange(60.0).reshape(3, 4, 5), np.ones((4, 2)), np.arange(10.0).reshape(5, 2)
    >>> np.allclose(ttm_inner_dot(X, U, W), np.einsum("aic,ir,cr->ar", X, U, W))
    True
    """
    if not _one_pass("ttm_inner_dot", X3, U):
        return None  # type: ignore[return-value]
    parts = _inner_tiles(X3, U, None, policy, W)
    assert parts is not None
    return _tile_sums(parts)


def ttm_inner_dot_kept(X3: np.ndarray, U: np.ndarray, W: np.ndarray, policy: ExecutionPolicy | None,
                       kept: dict | None) -> np.ndarray | None:
    """:func:`ttm_inner_dot` (the same bits), with its set-up for these sizes and strides made once and kept
    in ``kept`` (a decomposition call's cache: :class:`_Launch`, U gathered by one ``take``, the helpers' rows
    written with addresses only): CP-ALS runs it once a sweep on the same arrays' shapes."""
    if (kept is None or not (X3.flags.aligned and U.flags.aligned and W.flags.aligned)
            or not X3.dtype == U.dtype == W.dtype):  # (unaligned: numba's other kernel, by its dispatcher)
        return ttm_inner_dot(X3, np.ascontiguousarray(U), W, policy)
    key = ("inner_dot", X3.shape, X3.strides, U.shape, U.strides, W.shape, X3.dtype, policy)
    if key not in kept:
        kept[key] = _dot_launch(X3, U, W, policy)
    launch: _Launch | None = kept[key]
    if launch is not None:
        wt = np.ascontiguousarray(W.T, dtype=X3.dtype)
        mp = np.empty(launch.n_tiles * U.shape[1], X3.dtype)
        if launch.run((X3, launch.pack(U), wt, mp)):
            return _tile_sums(mp.reshape(X3.shape[0], -1, U.shape[1]))
    return ttm_inner_dot(X3, np.ascontiguousarray(U), W, policy)


def _tile_sums(parts: np.ndarray) -> np.ndarray:
    """``M[a] = sum over k of parts[a, k]`` in order of k (the tiles of a row)."""
    if parts.shape[1] == 1:
        return parts[:, 0]
    M = parts[:, 0].copy()
    for k in range(1, parts.shape[1]):
        M += parts[:, k]
    return M


def _dot_launch(X3: np.ndarray, U: np.ndarray, W: np.ndarray, policy: ExecutionPolicy | None) -> _Launch | None:
    """The :class:`_Launch` of :func:`ttm_inner_dot` on views of these sizes and strides (its tensor, packed U,
    W's columns and the tiles' sums per call), or None where :func:`ttm_inner_dot` must run itself."""
    fx = flat_span(X3)
    if (fx is None or (X3.shape[2] > 1 and X3.strides[2] != X3.itemsize) or not _one_pass("ttm_inner_dot", X3, U)
            or not (U.flags.c_contiguous or U.flags.f_contiguous)):
        return None
    A, I, C = X3.shape  # noqa: E741
    it, R = X3.itemsize, U.shape[1]
    g = _InnerGeometry(A, I, C, R, it, X3.strides[1])
    pack = _u_gather(g, U)
    up = np.zeros(I * R, X3.dtype)
    wt = np.ascontiguousarray(W.T, dtype=X3.dtype).reshape(-1)
    mp = np.empty(g.n_tiles * R, X3.dtype)
    args = _inner_sum_args(X3, g, read_only(fx), up, wt, mp, False)
    launch = _Launch("inner", args, (21, 22), (7, 19, 20), (0, 5, 16, 17), 2 * X3.size * R, pack, policy)
    return None if launch.rows.size == 0 else launch


#: :func:`_u_gather` packs a U of at least this many bytes block by block (strided copies into a pooled buffer)
#: instead of by one ``take``: the gather reads an index as large as U and writes a fresh array (on Zen 5, U of
#: 200000 x 32 float64, 51 MB: 33.9 against 8.0 ms; 500000 x 32: 83.9 against 20.4 ms; 2000 x 32, 0.5 MB: 0.037
#: against 0.038 ms; 200 x 32: 0.004 against 0.011 ms)
U_GATHER_COPY_BYTES = 512 << 10


def _u_gather(g: _InnerGeometry, U: np.ndarray):
    """U (I, R; C- or F-contiguous) to the inner kernel's packed blocks (:func:`_blocks`) by one ``take`` of
    its memory, or from ``U_GATHER_COPY_BYTES`` by one strided copy a block: the same values as the
    block-by-block copy of :func:`_inner_tiles`."""
    if U.nbytes >= U_GATHER_COPY_BYTES:
        def copy(u: np.ndarray) -> np.ndarray:
            up = work_empty((u.size,), u.dtype)
            for (r0, rb), off in zip(g.rows, g.blocks[:, 2], strict=True):
                np.copyto(up[off:off + g.I * rb].reshape(g.I, rb), u[:, r0:r0 + rb])
            return up

        return copy
    it = U.itemsize
    su, sr = U.strides[0] // it, U.strides[1] // it
    idx = np.empty(U.size, np.intp)
    for (r0, rb), off in zip(g.rows, g.blocks[:, 2], strict=True):
        idx[off:off + g.I * rb].reshape(g.I, rb)[...] = np.arange(g.I)[:, None] * su + np.arange(r0, r0 + rb) * sr
    if U.flags.c_contiguous:
        return lambda u: u.reshape(-1).take(idx)
    return lambda u: u.T.reshape(-1).take(idx)


def ttm_inner_axpy(X3: np.ndarray, U: np.ndarray, W: np.ndarray, policy: ExecutionPolicy | None = None) -> np.ndarray:
    """``M[c, r] = sum_a W[a, r] sum_i U[i, r] X3[a, i, c]`` (shape (C, R)): a 3-way tensor's MTTKRP for its
    unit-stride mode in one pass, each tile of :func:`ttm_inner`'s product, while in cache, times ``W[a, r]``
    added to the sums of its piece of ``a`` (pieces cut by the sizes alone, summed in order: the same bits for
    any number of workers), instead of the (A, R, C) product written out and read back by a batched
    matrix-vector product. ``X3`` a 3-D view with unit stride along ``c``, ``U`` C-contiguous (I, R), ``W``
    (A, R). None where the whole output is one tile (:func:`_reduction_cuts`).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._smallgemm import ttm_inner_axpy
    >>> X, U, W = np.arange(60.0).reshape(3, 4, 5), np.ones((4, 2)), np.arange(6.0).reshape(3, 2)
    >>> np.allclose(ttm_inner_axpy(X, U, W), np.einsum("aic,ir,ar->cr", X, U, W))
    True
    """
    if not _one_pass("ttm_inner_axpy", X3, U):
        return None  # type: ignore[return-value]
    M = _inner_tiles(X3, U, None, policy, W, axpy=True)
    assert M is not None
    return np.ascontiguousarray(M.T)


def _one_pass(name: str, X3: np.ndarray, U: np.ndarray) -> bool:
    """Whether :func:`ttm_inner_dot` / :func:`ttm_inner_axpy` (``name``) can take ``X3`` in one pass: a view they
    read (else a one-line ``ValueError``) whose output is not one tile (:func:`_reduction_cuts`)."""
    if flat_span(X3) is None or (X3.shape[2] > 1 and X3.strides[2] != X3.itemsize):
        raise ValueError(f"{name} needs a non-empty view with non-negative strides, unit stride along the last axis")
    A, I, C = X3.shape  # noqa: E741
    return len(_reduction_cuts(A, I, C, U.shape[1], X3.itemsize)) == 2


#: :func:`ttm_inner` cuts the sum over ``i`` into pieces where its whole output is one tile and the contraction
#: has at least ``KERNEL_PARALLEL_FLOPS``, each piece at least this many rows of i (see :func:`_reduction_cuts`)
REDUCTION_PIECE_ROWS = 1024


def _reduction_cuts(A: int, I: int, C: int, R: int, itemsize: int) -> list[int]:  # noqa: E741
    """Where :func:`ttm_inner` cuts the sum over ``i`` (``[0, I]``: not at all): only where its output is one
    tile (``A == 1``, ``C`` within one tile's columns), which no worker could share, and the flops reach
    ``KERNEL_PARALLEL_FLOPS``; ``flops // KERNEL_PIECE_FLOPS`` pieces, at most ``MAX_PIECES``, of at least
    ``REDUCTION_PIECE_ROWS`` rows. A function of the sizes only (not of the workers), so the bits are too.
    Measured on (100000, 10, 10) x_0 at R = 16 (float64, two workers, the AVX-512 machine): the TTM 20.1 ms
    before (one worker summing all 100000 rows, U packed by slices), against one read of X in 5.3 ms.

    >>> _reduction_cuts(1, 100000, 100, 16, 8)
    [0, 6250, 12500, 18750, 25000, 31250, 37500, 43750, 50000, 56250, 62500, 68750, 75000, 81250, 87500, 93750, 100000]
    >>> _reduction_cuts(200, 200, 200, 10, 8), _reduction_cuts(1, 50, 1000, 10, 8)
    ([0, 200], [0, 50])
    """
    flops = 2 * A * I * C * R
    if A > 1 or flops < KERNEL_PARALLEL_FLOPS or C > _tiling(I, R, itemsize, C, _inner_strip(R),
                                                              nbytes=A * I * C * itemsize)[0]:
        return [0, I]
    n = max(1, min(MAX_PIECES, flops // KERNEL_PIECE_FLOPS, I // REDUCTION_PIECE_ROWS))
    return [I * k // n for k in range(n + 1)]



class _InnerGeometry:
    """:func:`ttm_inner`'s tiles of an (A, I, C) view at rank R (its sizes, itemsize and the byte stride
    ``sxi`` of its rows alone): U's blocks of rows and where each is packed (:func:`_blocks`), the vector
    length, the strip width, the tile's columns and chunk of rows (:func:`_tiling`), whether chunks are packed,
    the number of tiles and the sizes of a piece's two scratch arrays."""

    __slots__ = ("C", "I", "blocks", "ct", "kc", "n_tiles", "packed", "pk_n", "rows", "snv", "tl_n", "vl")

    def __init__(self, A: int, I: int, C: int, R: int, it: int, sxi: int) -> None:  # noqa: E741
        self.I, self.C = I, C
        self.rows, self.blocks = _blocks(I, R)
        self.vl = vl = 32 // it
        snv = _inner_strip(R)
        if snv == 4 and (int(self.blocks[:, 1].min()) < QUAD_MIN_RB or C < 4 * vl):
            # the strips of two lines have blocks of 8-12 rows; and a row shorter than one such strip would run
            # all its columns in the leftover paths (one line, one vector, the last few): strips of one line
            # instead. Measured on the AVX-512 machine (ttm_inner alone, two workers, interleaved medians of 9,
            # the same bits), (A, I, C) at R = 20 / 32 with C of 12-30 below a strip of two lines (float32
            # (10800, 60, 30), (27000, 30, 30), (20000, 40, 20), (10000, 50, 24); float64 (20000, 40, 12)):
            # 0.70-0.88x the time (float32 120x90x60x30's mode 2 and 30^5's mode 3 had taken 1.13-1.17x BLAS's
            # time); with C of one such strip or more (float32 C = 40, 48; float64 C = 20, 24) strips of one
            # line took 1.05-1.14x, so they keep two
            snv = 2
        self.snv = snv
        streamed = A * I * C * it > STREAMED_BYTES
        nbytes = A * I * C * it
        self.ct, self.kc = _tiling(I, R, it, C, snv, sxi, streamed, nbytes)
        self.packed = not _direct_chunks(R, C * it, sxi, self.kc, streamed, I, nbytes)
        self.n_tiles = A * ((C + self.ct - 1) // self.ct)
        self.tl_n, self.pk_n = WIDE_RB * vl, self.kc * self.ct if self.packed else 1


def _inner_args(X3: np.ndarray, Y3: np.ndarray, g: _InnerGeometry, fx: np.ndarray, up: np.ndarray,
                fy: np.ndarray) -> list:
    """The inner kernel's arguments for ``Y3 = X3 x U`` over all its tiles (no sums against W): the flat spans
    ``fx`` and ``fy`` of the views, U packed as ``up``, the tiling ``g``, a piece's scratch."""
    it = X3.itemsize
    no_dot = _NO_DOT[it]  # (the kernel's wt and mp: no tile summed against W)
    return [fx, g.I, g.C, X3.strides[0] // it, X3.strides[1] // it, up, g.blocks, fy, Y3.strides[0] // it,
            Y3.strides[1] // it, g.vl, g.ct, g.kc, 1 if _PREFETCH_NEXT else 0, g.packed, g.snv, no_dot, no_dot, False,
            np.empty(g.tl_n, X3.dtype), np.empty(g.pk_n, X3.dtype), 0, g.n_tiles]


def _inner_sum_args(X3: np.ndarray, g: _InnerGeometry, fx: np.ndarray, up: np.ndarray, wt: np.ndarray,
                    mp: np.ndarray, add: bool) -> list:
    """:func:`_inner_args` for a tile's rows summed, while in cache, against ``wt`` into ``mp`` (:func:`ttm_inner_dot`;
    with ``add``, :func:`ttm_inner_axpy`'s products added): each tile's rows go to a piece's scratch of one
    row's width (sya = 0)."""
    args = _inner_args(X3, X3, g, fx, up, np.empty(up.size // g.I * g.C, X3.dtype))
    args[8:10] = [0, g.C]
    args[16:19] = [wt, mp, add]
    return args


_NO_DOT = {8: np.empty(0, np.float64), 4: np.empty(0, np.float32)}


def _inner_tiles(X3: np.ndarray, U: np.ndarray, Y3: np.ndarray | None, policy: ExecutionPolicy | None,
                 W: np.ndarray | None = None, axpy: bool = False) -> np.ndarray | None:
    """:func:`ttm_inner` over its tiles (checked views); with ``W`` (:func:`ttm_inner_dot`) no ``Y3``: the
    tiles' sums against W's columns, (A, tiles a row, R)."""
    fx = flat_span(X3)
    fy = flat_span(Y3) if Y3 is not None else None
    assert fx is not None and (fy is not None or W is not None)  # (the callers checked the views)
    fx = read_only(fx)
    A, I, C = X3.shape  # noqa: E741
    it = X3.itemsize
    R = U.shape[1]
    g = _InnerGeometry(A, I, C, R, it, X3.strides[1])
    # U packed block by block, each block's columns as (I, rb) rows (one strided pass over U per block; a
    # concatenation of the blocks' contiguous copies took 4x as long on a 100000 x 16 U)
    if len(g.rows) == 1 and U.flags.c_contiguous and U.dtype == X3.dtype:
        up = U.reshape(-1)  # (one block: U's own rows, as packed; no copy)
    else:
        up = work_empty((I * R,), X3.dtype)
        for (r0, rb), off in zip(g.rows, g.blocks[:, 2], strict=True):
            np.copyto(up[off:off + I * rb].reshape(I, rb), U[:, r0:r0 + rb])
    if W is None:
        assert Y3 is not None and fy is not None
        _kernel_tiles("inner", _inner_kernel, _inner_args(X3, Y3, g, fx, up, fy), (21, 22), (19, 20), 2 * X3.size * R,
                      policy)
        return None
    # the tiles' sums into a scratch of one row's width per call (sya = 0: it stays in cache)
    if axpy:
        # pieces of a by the sizes alone (not the workers), each adding its tiles' rows times W's into its own
        # (R, C) sums in order; the pieces' sums added in piece order: the same bits for any number of workers
        wa = np.ascontiguousarray(W, dtype=X3.dtype).reshape(-1)
        nct = g.n_tiles // A
        n = max(1, min(MAX_PIECES, A, (2 * X3.size * R) // KERNEL_PIECE_FLOPS))
        cuts = [A * k // n for k in range(n + 1)]
        acc = np.zeros((n, R * C), X3.dtype)

        def piece(k: int, _: object) -> None:
            args = _inner_sum_args(X3, g, fx, up, wa, acc[k], True)  # (the kernel allocates nothing)
            args[21:23] = [cuts[k] * nct, cuts[k + 1] * nct]
            _inner_kernel(*args)

        if n < 2 or policy is None or policy.workers < 2:
            for k in range(n):
                piece(k, None)
        else:
            parallel_for(piece, n, policy)
        for k in range(1, n):
            acc[0] += acc[k]
        return acc[0].reshape(R, C)
    # each finished tile's rows summed against W's columns into its own row of mp (per tile: the same bits for
    # any cut)
    wt = np.ascontiguousarray(W.T, dtype=X3.dtype).reshape(-1)
    mp = np.empty(g.n_tiles * R, X3.dtype)
    _kernel_tiles("inner", _inner_kernel, _inner_sum_args(X3, g, fx, up, wt, mp, False), (21, 22), (7, 19, 20),
                  2 * X3.size * R, policy)
    return mp.reshape(A, -1, R)


def _check_kernel_shapes(name: str, U: np.ndarray, u_shape: tuple[int, ...], Y: np.ndarray,
                         y_shape: tuple[int, ...]) -> None:
    """A kernel's matrix and output against the shapes its tensor implies (the kernels index them unchecked)."""
    if tuple(U.shape) != u_shape or tuple(Y.shape) != y_shape:
        raise ValueError(f"{name} needs the matrix of shape {u_shape} and the output of shape {y_shape}; "
                         f"received {tuple(U.shape)} and {tuple(Y.shape)}")


def ttm_outer(X2: np.ndarray, Ut: np.ndarray, Y2: np.ndarray, policy: ExecutionPolicy | None = None) -> None:
    """``Y2[r, a] = sum_i X2[a, i] Ut[r, i]`` for a 2-D view ``X2`` with unit stride along ``i``, ``Ut``
    C-contiguous (U transposed) and any non-negative strides of the output view ``Y2`` (shape (R, A)); tiles of
    rows split over the policy's workers. Dot products along the unit stride (four rows of X against two
    columns of U at a time), or where :func:`outer_gemm_style` says so, rows of X broadcast against packed
    columns of U (the inner kernel's register blocks, a sum in order over ``i`` per element); where vectors are
    wide, the transposed tile (:func:`outer_tr_style`) or, ahead of it, the row-dot kernel
    (:func:`outer_vdot_style`).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._smallgemm import ttm_outer
    >>> X, Ut = np.arange(15.0).reshape(5, 3), np.ones((2, 3))
    >>> Y = np.empty((2, 5)); ttm_outer(X, Ut, Y)
    >>> np.array_equal(Y, Ut @ X.T)
    True
    """
    fx, fy = flat_span(X2), flat_span(Y2)
    if fx is None or fy is None:
        raise ValueError("ttm_outer needs non-empty views with non-negative strides")
    fx = read_only(fx)
    if X2.shape[1] > 1 and X2.strides[1] != X2.itemsize:
        raise ValueError("ttm_outer needs unit stride along the last axis of X2")
    _check_kernel_shapes("ttm_outer", Ut, (Ut.shape[0], X2.shape[1]), Y2, (Ut.shape[0], X2.shape[0]))
    name, args, lohi, fresh, _ = _outer_args(X2, Ut, Y2, fx, fy)
    _kernel_tiles(name, globals()[_KERNEL_OF[name]], args, lohi, fresh,
                  _cut_flops(name, 2 * X2.size * Ut.shape[0], (X2.size + Y2.size) * X2.itemsize), policy)


def _cut_flops(name: str, flops: int, nbytes: int) -> int:
    """The flops by which a kernel's tiles are cut into pieces (:func:`_tile_bounds`): its own, but the tiny-rows
    kernel (bound by the memory, a few flops a byte) over more than ``STREAMED_BYTES`` of X and the output counts
    as a call cut in four. Measured (two workers, interleaved medians of 21): (1000000, 3) float64 at R = 2 (40 MB)
    1.01 against 1.69 ms whole; in the caches whole ran as fast or faster (float64 (250000, 4) at R = 2 / 3 0.27 /
    0.38 against 0.34 / 0.40 ms cut, float32 (1000000, 3) 0.49 against 0.51 ms). The short-rows kernel's flops
    count ``SHORT_CUT_SCALE`` times (its rate is about half the register-blocked kernels')."""
    if name == "outer_tiny" and nbytes > STREAMED_BYTES:
        return max(flops, 4 * KERNEL_PIECE_FLOPS)
    if name == "inner_short":
        return SHORT_CUT_SCALE * flops
    return flops


def _outer_args(X2: np.ndarray, Ut: np.ndarray, Y2: np.ndarray, fx: np.ndarray,
                fy: np.ndarray) -> tuple[str, list, tuple[int, int], tuple[int, ...], tuple[int, ...]]:
    """:func:`ttm_outer`'s kernel (its name in :data:`_KERNEL_OF`) and arguments over all its tiles: the
    positions of the tile range, of a piece's scratch, and of the tensor, the matrix and the output."""
    A, I = X2.shape  # noqa: E741
    R = Ut.shape[0]
    it = X2.itemsize
    vl = 32 // it
    if outer_tiny_style(R, it, I) and _dense_rows(X2, Y2):
        L = 64 // it
        rows = np.ascontiguousarray(Ut.T, X2.dtype).reshape(-1)  # U as (I, R) rows
        targs = [fx, A, I, rows, R, fy, np.empty(L * (I + R), X2.dtype), 0, -(-A // TINY_TILE_ROWS)]
        return "outer_tiny", targs, (7, 8), (6,), (0, 3, 5)
    if outer_vdot_style(R, it, I):
        up = _vdot_packed(Ut.T, X2.dtype)
        su = up.size // R
        vargs = [fx, A, I, X2.strides[0] // it, up, su, R, fy, Y2.strides[1] // it, Y2.strides[0] // it,
                 0, -(-A // vdot_rows(R)), max(2, VDOT_AHEAD_ROWS // vdot_rows(R))]
        return "outer_vdot", vargs, (10, 11), (), (0, 4, 7)
    if outer_tr_style(R, it):
        L = 64 // it
        targs = [fx, A, I, X2.strides[0] // it, _tr_packed(Ut.T, X2.dtype), R, fy, Y2.strides[1] // it,
                 Y2.strides[0] // it, np.empty(R * L, X2.dtype), 0, -(-A // L), _OUTER_PREFETCH]
        return "outer_tr", targs, (10, 11), (9,), (0, 4, 6)
    if not outer_gemm_style(R, it):
        args = [fx, 0, A, I, X2.strides[0] // it, read_only(Ut), fy, 0, Y2.strides[1] // it, Y2.strides[0] // it]
        zero = X2.dtype.type(0)
        rest = (zero, _OUTER_PREFETCH, 64 // it, _dot_five(I, it))
        return "outer_dot", [*args, 0, (A + 3) // 4, *rest], (10, 11), (), (0, 5, 6)
    pad = 2 * vl if wide_vectors() else vl  # whole 512-bit vectors where they are used
    tail = R % pad if outer_tail_style(R, it) else 0
    Rm = R - tail
    up = np.zeros((I, -(-Rm // pad) * pad), X2.dtype)  # U as (I, Rp) rows, padded with zero columns
    up[:, :Rm] = Ut[:Rm].T
    syr, sya = Y2.strides[0] // it, Y2.strides[1] // it
    direct = up.shape[1] == Rm and syr == 1
    # the unit stride of X passed at run time: as a constant LLVM unrolls the block's loop in two, merges
    # neighbouring broadcasts and spills the accumulators
    strips = _outer_strips(up.shape[1] // vl, vl)
    gargs = (fx, A, I, X2.strides[0] // it, 1, up.ravel(), Rm, strips, fy, sya, syr,
             _outer_kc(I, it, int(strips[:, 1].max())), direct, _OUTER_GEMM_PREFETCH, _outer_rb())
    tl_n = _OUTER_ROWS * up.shape[1] * (_OUTER_COPY_TILES if (sya == 1 and syr != 1) else 1)
    ut = read_only(np.ascontiguousarray(Ut[Rm:], X2.dtype))
    return "outer_gemm", [*gargs, np.empty(tl_n, X2.dtype), 0, -(-A // _OUTER_ROWS), ut, _dot_five(I, it),
                          X2.dtype.type(0)], (16, 17), (15,), (0, 5, 8)


#: whether :func:`ttm_outer`'s register-blocked kernel may leave a few columns of U to dot products
#: (:func:`outer_tail_style`), and the fewest columns it keeps in whole vectors there, by itemsize
OUTER_TAIL = True
OUTER_TAIL_MIN_RANK = {4: 16, 8: 24}


def outer_tail_style(R: int, itemsize: int) -> bool:
    """Whether :func:`ttm_outer`'s register-blocked kernel leaves the columns of U past its whole 512-bit vectors
    to dot products of each tile's rows while they are in cache (:func:`_tail_dots`: :func:`_outer_dot_kernel`'s
    blocks) instead of padding U with zero columns to whole vectors: where vectors are wide, at most a quarter of
    a vector left (float32: 1-4 columns, float64: 1-2) beside at least ``OUTER_TAIL_MIN_RANK`` columns in the
    vectors (float32 16, float64 24). The padded columns cost as much as the others (float32 R = 50 computes 64
    columns, R = 18 32); a dot product of a row costs more than a column of the blocks, so a long tail keeps the
    padding. Where the output's rows are unit-strided (R innermost: a TTM's own output) the blocks then write it
    directly instead of through the private buffer.

    Measured on Zen 4 (2 cores, :func:`ttm_outer` alone, two workers, medians of 11-21 interleaved pairs in one
    process, the tail's time over the padded kernel's). X of (40000, 200), the output with R outermost (CP-ALS's
    partials): float32 R = 17 / 18 / 20 / 33 / 34 / 36 / 50 / 52 0.82 / 0.82 / 0.93 / 0.78 / 0.78-0.79 / 0.86 /
    0.92 / 0.91x, float64 R = 25 / 26 / 33 / 34 / 49 / 50 / 58 0.92 / 0.94 / 0.87 / 0.87 / 0.92 / 0.92 / 0.96x;
    with R innermost float32 R = 18 / 20 / 34 / 50 0.74 / 0.87 / 0.77 / 0.86x, float64 R = 26 / 34 / 50 0.89 /
    0.80 / 0.85x; X of (76800, 160), (3600, 3600) and (4096, 64), R outermost, float32 R = 18 / 34 / 50 0.67-0.91 /
    0.73-0.83 / 0.89-0.95x, float64 R = 26 / 34 / 50 0.91-0.98 / 0.86-1.00 / 0.93-0.95x. Left padded: longer
    tails (float32 R = 38 / 40 0.88 / 0.93-0.95x but R = 54 / 57 / 60 / 63 1.02 / 1.02 / 1.03 / 1.09x; float64 R =
    35 / 36 0.93x but 46 1.04x) and float64 R = 17 / 18 (1.00-1.03x)."""
    if not (OUTER_TAIL and wide_vectors()):
        return False
    pad = 64 // itemsize
    tail = R % pad
    return 0 < tail and 4 * tail <= pad and R - tail >= OUTER_TAIL_MIN_RANK.get(itemsize, pad)


def outer_tiny_style(R: int, itemsize: int, I: int) -> bool:  # noqa: E741
    """Whether :func:`ttm_outer` runs the tiny-rows kernel (:func:`_outer_tiny_kernel`: lanes over rows of X, a
    block of 8 float64 or 16 float32 rows loaded as one run and its columns gathered by shuffles) ahead of the
    other kernels, where X's rows and the output's are dense (:func:`_dense_rows`): with AVX2 and FMA, rows of
    2 to ``TINY_MAX_I`` = 8 elements against 1 to ``TINY_MAX_R`` = 8 columns of U. There the other kernels and
    BLAS spend most of their time on rows shorter than a vector (BLAS's GEMM on rows of 3 at R = 3: a few per
    cent of its peak, well below the memory's rate).

    Measured on Zen 4 (2 cores; X of 4M elements, (A, I) dense, the same block in a prototype loop against the
    planner's BLAS plan and one ``numpy.matmul``, interleaved medians of 11, one process): float64 I = 2 / 3 / 5
    / 8 at R = 1-7 0.14-0.62x the plan's time and 0.19-0.86x numpy's; I = 12 0.32-0.71x / 0.35-0.68x; I = 16
    0.53-0.97x / 0.57-1.66x; float32 I = 2-8 0.06-0.37x / 0.12-0.72x, I = 12 0.24-0.61x / 0.46-0.92x, I = 16
    0.35-1.33x / 0.55-2.30x (hence 8). Against the transposed tile on (250000, 4) and (2000000, 3) float64 at
    R = 3: 0.12x and 0.47x its time. Through the planner (``benchmarks/tiny_modes.py``, 9 shapes, both dtypes):
    1.2-6.3x the former BLAS plan's speed, 1.0-4.3x ``numpy.matmul``'s.

    Where vectors are 256 bits (AVX2 and FMA) LLVM splits each 512-bit vector of lanes in two, and the kernel
    still runs (it was wide-only until stop 97). Measured on the 2-core Zen 3 machine (``ttm_outer`` alone, two
    workers, interleaved medians of 9 in one process; (A, I) of 250000 x 4 to 2000000 x 3, I = 2-8, R = 2-8):
    0.24-0.41x the time of the dot-product kernel it replaces in float64 and 0.13-0.36x in float32, and
    1.5-3.3x ``numpy.matmul``'s speed."""
    return simd_supported() and 2 <= I <= TINY_MAX_I and 1 <= R <= TINY_MAX_R


def _dense_rows(X2: np.ndarray, Y2: np.ndarray) -> bool:
    """Whether the rows of ``X2`` (A, I) and of the output ``Y2`` (R, A) lie back to back: X2 one (A, I) and
    Y2's transpose one (A, R) C-ordered block (strides of extents of 1 not looked at)."""
    A, I = X2.shape  # noqa: E741
    R, it = Y2.shape[0], X2.itemsize
    return ((A == 1 or X2.strides[0] == I * it) and (I == 1 or X2.strides[1] == it)
            and (R == 1 or Y2.strides[0] == it) and (A == 1 or Y2.strides[1] == R * it))


def inner_short_style(R: int, itemsize: int, C: int) -> bool:
    """Whether :func:`ttm_inner` runs the short-rows kernel (:func:`_inner_short_kernel`: lanes over the contracted
    rows, a step of 8 float64 or 16 float32 rows of ``C`` elements loaded as one run and its columns gathered by
    shuffles, their sums by one tree at the end of a slab) where each slab's rows lie back to back
    (:func:`_short_slabs`): with AVX2 and FMA, rows of 2 to :func:`short_max_c` elements (float64 3: a short
    trailing mode after the contracted one, an RGB mode; float32 7, every row shorter than one 256-bit vector) and
    ``R`` up to ``SHORT_MAX_R`` = 20 (blocks of ``SHORT_ACC // C`` rows of ``U^T``). There the register-blocked
    kernel's vectors along the rows are mostly empty (float32 rows of 4-7 elements ran element by element) and
    the planner ran BLAS's batch of GEMMs with ``C`` columns.

    Measured on Zen 4 (2 cores; the planner's plans with the kernel against without it, interleaved medians of 15,
    one process), float64 / float32: (1000, 1000, 3)'s mode 1 at R = 10 0.63 / 0.49x the time, (512, 512, 3) R = 8
    0.54 / 0.32x, (64, 256, 256, 3)'s mode 2 R = 8 0.98 / 0.36x, (200, 200, 200, 3)'s mode 2 R = 5 0.60 / 0.28x,
    (1000, 1003, 2) R = 10 0.84 / 0.33x, (2000, 800, 2) R = 20 0.86 / 0.70x, (600, 800, 2) and (600, 800, 3) R = 16
    0.96-1.04x; R = 32 on rows of 3 1.05 / 0.90x (hence 20). float64 rows of 4-8 elements keep the
    register-blocked kernel or BLAS: 4 at R = 6 / 10 1.02 / 1.19x, 5 0.87x, 6 and 7 1.27-1.53x, 8 2.3x; on Zen 5
    (medians of 9, alternated) 0.39-1.28x, mixed. float32 rows of 4-7 elements on Zen 5 (the planner's plans:
    the register-blocked kernel's element-by-element rows, or BLAS's batch, against this kernel, medians of 9,
    alternated, R = 2 / 4 / 8 / 12 / 16 / 20): (16, 16, 16, 16, 16, 4)'s mode 4 0.21 / 0.24 / 0.16 / 0.14 / 0.37 /
    0.36x the time, (100, 100, 100, 4)'s mode 2 0.10-0.30x, (1000, 1000, 4) 0.22-0.60x, (700, 700, 5)
    0.26-0.50x, (512, 512, 6) 0.26-0.73x, (500, 500, 7) 0.25-0.91x, (60, 200, 200, 6)'s mode 2 0.29 / 0.47 /
    0.49 / 1.18 / 0.92 / 0.91x; rows of 8 (one whole vector) 1.3-2.8x, hence 7.

    Where vectors are 256 bits (AVX2 and FMA) LLVM splits each 512-bit step in two, and the kernel still runs
    (it was wide-only until stop 97). Measured on the 2-core Zen 3 machine (``ttm_inner`` alone, two workers,
    interleaved medians of 9 in one process; (1000, 1000, 3), (512, 512, 3), (1000, 1003, 2), (16384, 256, 3),
    (40000, 200, 3) at R = 5-10, float32 also rows of 4-6): 0.10-0.13x the register-blocked kernel's time in
    float64 and 0.07-0.27x in float32, 1.0-5.6x ``numpy.tensordot``'s speed; through the planner (whose plan was
    BLAS's batch there) see ``benchmarks/results/tiny_modes_zen3.md``."""
    return simd_supported() and 2 <= C <= short_max_c(itemsize) and 1 <= R <= SHORT_MAX_R


def _short_slabs(X3: np.ndarray) -> bool:
    """Whether each slab ``X3[a]`` (I, C) of a view lies back to back: unit-strided rows ``C`` apart."""
    _, I, C = X3.shape  # noqa: E741
    return X3.strides[2] == X3.itemsize and (I == 1 or X3.strides[1] == C * X3.itemsize)


def _short_packed(U: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``U`` (I, R) as :func:`_inner_short_kernel` reads it, in ``dtype``: ``U^T`` as C-ordered rows padded with
    zeros past whole 512-bit vectors (one vector more than ``I // L``: the kernel's masked last step reads it even
    where ``I`` is a multiple of ``L``), flat."""
    L = 64 // dtype.itemsize
    up = work_empty((U.shape[1], (U.shape[0] // L + 1) * L), dtype)
    up[:, :U.shape[0]] = U.T
    up[:, U.shape[0]:] = 0
    return up.reshape(-1)


def _short_args(X3: np.ndarray, ut: np.ndarray, Y3: np.ndarray, fx: np.ndarray, fy: np.ndarray) -> list:
    """:func:`_inner_short_kernel`'s arguments over all its tiles (the tile range at 13-14; the tensor, the packed
    matrix and the output at 0, 5, 8)."""
    A, I, C = X3.shape  # noqa: E741
    it = X3.itemsize
    R = Y3.shape[1]
    spt = max(1, SHORT_TILE_ELEMS // max(I * C, 1))
    return [fx, A, I, C, X3.strides[0] // it, ut, ut.size // R, R, fy, Y3.strides[0] // it, Y3.strides[1] // it,
            Y3.strides[2] // it, spt, 0, -(-A // spt)]


def _dot_five(I: int, itemsize: int) -> bool:  # noqa: E741
    """Whether :func:`ttm_outer`'s dot-product kernel takes the columns of U five at a time (twenty
    accumulators) rather than in pairs (eight): only where vectors are wide (:func:`wide_vectors`: 32 vector
    registers; under an AVX2 target's 16 they spill, float64 R = 8 / 10 then 1.6x / 1.2x the time of pairs)
    and on rows of at least 200 bytes. Measured in one process, two workers, interleaved medians of 11-31,
    five at a time against pairs, R = 5 / 8 / 10 / 12 / 15: X of (76800, 160), (40000, 200), (10000, 100),
    (216000, 60), (60000, 60), (12960, 1000): float32 0.78-0.88 / 0.92-1.02 / 0.81-0.95 / 0.82-0.91 /
    0.78-0.91x the time, float64 0.78-1.01 / 0.94-1.02 / 0.78-1.03 / 0.78-0.94 / 0.75-0.88x (200^3's last mode,
    R = 10: 3.61 -> 2.45 ms float32, 5.41 -> 4.09 ms float64); rows of 256 bytes ((4096, 64), (16384, 64))
    0.86-1.09x; rows of 128 bytes (float32 (4096, 32), (16384, 32), (100000, 32)) 0.81-1.14x, hence the row
    length."""
    return wide_vectors() and I * itemsize >= 200


def outer_gemm_style(R: int, itemsize: int) -> bool:
    """Whether :func:`ttm_outer` runs the register-blocked kernel (rows of X broadcast against packed columns
    of U) rather than the dot products along the unit stride. With 256-bit vectors: ``R`` of at least 16 in
    at most four vectors, at most an eighth of them padding (float32 R = 16, 22-24, 29-32; float64 R = 16;
    AVX2 + FMA). Measured on
    a (40000, 200) X streamed from memory, one core's CPU time, medians of 15 interleaved pairs, 3 runs on
    the shared 2-core machine: float32 R = 16 / 24 / 32 0.87-1.07 / 0.79-0.94 / 0.80-0.86x the dot kernel's
    time, float64 R = 16 0.87-0.99x; but float32 R = 10 (16 columns computed) 1.46x, R = 20 (24) 1.02-1.04x,
    float64 R = 10 (12) 1.07x and float64 R = 32 (eight vectors: its U of 51 KiB streams through L1 per tile)
    1.26x.

    Where vectors are wide (:func:`wide_vectors`: strips of up to four 512-bit vectors, 24 accumulators) any
    ``R`` from ``_WIDE_GEMM_MIN_RANK`` = 16 to ``WIDE_OUTER_F64_MAX_RANK`` = 64 in float64 and
    ``WIDE_OUTER_F32_MAX_RANK`` = 64 in float32 (the planner's ranks beyond ``MAX_RANK``:
    :func:`planned_beyond_max_rank`; float32 R = 40 / 50 / 64 on X of (40000, 200), two workers, medians of 9:
    0.71 / 0.72 / 0.71x the dot kernel's time into an output with R outermost, 0.81 / 0.80 / 0.63x with R
    innermost, stop 83). Measured in one process against
    the dot kernel (X of (40000, 200) and (76800, 160), two workers, interleaved medians of 11): float64
    R = 8 / 10 / 12 / 16 / 20 / 24 / 28 / 32 0.90-0.96 / 1.01-1.12 / 0.88-1.02 / 0.72-0.77 / 0.88-0.96 /
    0.68-0.77 / 0.68-0.81 / 0.57-0.65x the dot kernel's time; float32 R = 10 / 12 / 16 / 20 / 24 / 32
    1.05-1.09 / 0.84-0.90 / 0.64-0.66 / 0.85-0.88 / 0.74-0.77 / 0.52-0.63x. On smaller X ((4096, 64),
    (10000, 100), (4096, 200), both output layouts) R = 12 took 0.88-1.21x (float32 1.04-1.21x) the dot
    kernel's time, R = 16 0.68-1.09x, R = 32 0.52-0.99x: hence from 16.

    Below 16 where vectors are wide, float64 R padded to whole 512-bit vectors by at most a quarter of the
    columns computed (R = 6-8 in one vector, 12-15 in two) and float32 R = 13-15 (stop 70). Measured against the
    dot kernel (two workers, interleaved medians of 15, one process; X of (3600, 3600), (12960, 1000), (40000,
    200), (76800, 160), (216000, 60), (10000, 100), (4096, 200), (100000, 10)): float64 R = 6 / 7 / 8
    0.73-0.93 / 0.62-0.95 / 0.73-0.84x the time, R = 12 / 13 / 14 / 15 0.69-1.02 / 0.66-0.98 / 0.65-0.96 /
    0.61-0.96x; float32 R = 13 / 14 / 15 0.63-0.90 / 0.64-0.99 / 0.62-0.99x. Left out: float64 R = 5 (0.67-1.08x),
    9 / 10 (padded by 7 / 6 of 16 columns: 0.74-1.15x), 11 (0.65-1.05x) and float32 R up to 12 (up to 1.64x at R =
    5, 0.66-1.08x at 11-12). Through the planner (the last mode, a preallocated output, medians of 21): float64
    200^3 R = 6 / 14 0.91 / 0.89x, 100x1000x100 R = 12 0.86x, float32 200^3 R = 14 / 15 0.85 / 0.91x; CP-ALS on
    60^4 (5 iterations, medians of 9) float64 R = 6 / 8 / 12 / 14 0.93 / 0.82 / 0.96 / 0.91x, float32 R = 13 / 15
    0.90x."""
    if not simd_supported():
        return False
    if wide_vectors():
        if R < _WIDE_GEMM_MIN_RANK:
            if itemsize == 4:
                return R >= _WIDE_GEMM_F32_MIN_RANK
            rp = -(-R // 8) * 8  # (whole 512-bit vectors of float64)
            return _WIDE_GEMM_PAD * (rp - R) <= rp
        return R <= (WIDE_OUTER_F64_MAX_RANK if itemsize == 8 else WIDE_OUTER_F32_MAX_RANK)
    vl = 32 // itemsize
    rp = -(-R // vl) * vl
    return R >= 16 and rp // vl <= 4 and 8 * (rp - R) <= rp


def _tr_packed(U: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``U`` (I, R) as :func:`_outer_tr_kernel` reads it, in the tensor's ``dtype``: C-ordered rows padded with
    zero rows to whole steps of one 512-bit vector, flat."""
    L = 64 // dtype.itemsize
    up = work_empty((-(-U.shape[0] // L) * L, U.shape[1]), dtype)
    up[:U.shape[0]] = U
    up[U.shape[0]:] = 0
    return up.reshape(-1)


def _vdot_packed(U: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``U`` (I, R) as :func:`_outer_vdot_kernel` reads it, in the tensor's ``dtype``: ``U^T`` as C-ordered rows
    padded with zeros to whole 512-bit vectors, flat."""
    L = 64 // dtype.itemsize
    up = work_empty((U.shape[1], -(-U.shape[0] // L) * L), dtype)
    up[:, :U.shape[0]] = U.T
    up[:, U.shape[0]:] = 0
    return up.reshape(-1)


def outer_vdot_style(R: int, itemsize: int, I: int) -> bool:  # noqa: E741
    """Whether :func:`ttm_outer` runs the row-dot kernel (:func:`_outer_vdot_kernel`: a few rows of X against
    every row of ``U^T`` as vector dot products along the unit stride, their sums by one shuffle network) rather
    than the transposed tile, the register-blocked kernel or the four-row dot products: where vectors are wide,
    ``R`` from ``VDOT_MIN_RANK`` = 1 to ``VDOT_MAX_RANK`` = 12, rows of X of at least ``VDOT_MIN_ROW_BYTES`` and
    ``U^T``'s padded rows within ``VDOT_U_MAX_BYTES`` (each tile reads all of them: they must stay in L1).

    Measured against the transposed tile (stop 80; Zen 4, 2 cores, X streamed from memory, one worker, the
    kernels called directly, interleaved medians of 11), R = 10: float32 (40000, 200) 2.26-2.42 against
    2.72-2.86 ms, (76800, 160) 2.82-3.45 against 3.64-4.02 ms, (133333, 60) 3.61 against 3.97 ms; float64
    (40000, 200) 3.35-4.26 against 3.51-4.52 ms, (133333, 60) 5.29 against 6.29 ms; in cache ((800, 200))
    float32 89 against 75 GFlop/s. Through ``ttm_outer`` with two workers, R = 3-12: float32 0.74-1.0x the
    time on (40000, 200), (76800, 160) and (262144, 64), float64 0.74-1.05x. R = 1 and 2 against the four-row
    dot products (two workers): float32 0.76-0.96x the time on (40000, 200) and (262144, 64), float64
    0.92-0.97x; in cache ((800, 200)) 0.81-0.94x. But rows of 1000 elements (U^T of 40 KB float32 at R = 10,
    read from L2 for every tile of two rows) 1.35-1.45x (float32) and 1.45-1.85x (float64) the time, and U^T of
    15-16 KB already 1.0-1.12x (float64 R = 10 on rows of 200, R = 12 on rows of 160; 12.8 KB: R = 8 on rows
    of 200 0.87-0.91x, R = 10 on rows of 160 0.92-0.99x): hence ``VDOT_U_MAX_BYTES`` = 13 KiB. And rows shorter
    than ``VDOT_MIN_ROW_BYTES`` = 256 (four vectors), where the sums' network outweighs the multiply-adds: two
    workers, X of 1.5-3.2 MB, R = 10, float32 rows of 8 / 20 / 32 / 48 elements 1.18 / 1.29 / 1.25 / 1.55x the
    transposed tile's time (R = 4: 0.88-1.09x), float64 0.93-1.12x."""
    if not (wide_vectors() and VDOT_MIN_RANK <= R <= VDOT_MAX_RANK and I * itemsize >= VDOT_MIN_ROW_BYTES):
        return False
    L = 64 // itemsize
    return R * -(-I // L) * L * itemsize <= VDOT_U_MAX_BYTES


def outer_tr_style(R: int, itemsize: int) -> bool:
    """Whether :func:`ttm_outer` runs the transposed-tile kernel (:func:`_outer_tr_kernel`: lanes over rows of
    X, each step's block of 16 float32 or 8 float64 rows transposed in registers, R accumulators) rather than the
    dot products or the register-blocked kernel: where vectors are wide (:func:`wide_vectors`: one 512-bit
    vector a row's step, 32 registers for the transposed block and the accumulators) and ``R`` is
    ``TR_MIN_RANK`` = 3 to ``TR_MAX_RANK`` = 15, in float64 to ``TR_MAX_RANK_F64`` = 20 (8 columns of the block
    and 20 accumulators). The bits are those of the register-blocked kernel (each output
    the chain of fused multiply-adds in i from zero).

    Measured on Zen 4 (2 cores), one thread in cache (X of (400, 200) and (1000, 60), each kernel called
    directly, medians of 7 interleaved), GFlop/s of the former kernel / the transposed tile: float32 R = 3-12
    (dot products) 26-58 / 34-76, R = 13-15 (register-blocked) 58-66 / 68-77, R = 16 67 / 65; float64 R = 3-5,
    9-11 (dot products) 20-36 / 30-40, R = 6-8, 12-15 (register-blocked) 23-38 / 34-46; on rows of 60
    elements 1.1-2.2x the rate. From memory, two workers, X of (40000, 200) R = 10: float32 1.35-1.37 against
    1.63-1.79 ms, float64 2.09-2.31 against 2.32-2.57 ms (the streaming read 0.8 and 1.7-1.8 ms). R = 16 and
    above keep the register-blocked kernel in float32; R of 1 and 2 the dot products. Float64 R = 16 / 20 against
    the register-blocked kernel (two workers, each kernel called directly, interleaved medians of 15, the same
    bits): (40000, 200) 0.86 / 0.72x the time, (216000, 60) 0.91 / 0.79x, (2000, 200) 0.86 / 0.74x, (400, 200)
    0.96 / 0.80x; R = 24 0.85-0.96x, R = 28 and 32 0.95-1.45x (the accumulators spill), hence 20."""
    return wide_vectors() and TR_MIN_RANK <= R <= (TR_MAX_RANK_F64 if itemsize == 8 else TR_MAX_RANK)


def _outer_strips(nvec: int, vl: int) -> np.ndarray:
    """The strips of :func:`ttm_outer` over ``nvec`` (256-bit) vectors of columns, rows (first column,
    vectors): two vectors each, the first three where ``nvec`` is odd, one where it is 1; where vectors are
    wide (``nvec`` even: whole 512-bit vectors), four each (24 accumulators in twelve rows), then two for the
    rest.

    Zen 4 (``znver4``, 2 cores, ``ttm_outer`` alone on two workers, interleaved medians of 7 in one process, the
    same bits), strips of four against eight (six rows of four 512-bit vectors), float64: X of (40000, 200) at
    R = 28 / 32 / 40 / 48 / 56 / 64 0.61 / 0.55-0.74 / 0.75 / 0.78 / 0.69 / 0.59-0.68x the time, (76800, 160)
    (320x240x160's last mode) R = 32 0.57-0.69x, 64^4's and 60^4's last modes R = 32 / 50 0.62-0.82 / 0.75x,
    (3600, 3600) R = 50 0.79x, and the small (4096, 64), (10000, 100), (4096, 200) at R = 32 0.58-0.73x; both
    output layouts. Zen 5 (``znver5``, full-rate 512-bit units): the strip of eight's block, compiled inside
    this kernel by LLVM 22, kept about 20 of its 24 accumulators on the stack (seen in the machine code the JIT
    ran; its own small function kept them in registers), so there it ran at 0.44x the strips of four's rate
    (one thread, X of (240, 200) in cache, R = 32: 40 against 92 GFlop/s) and ``ttm`` over 200^3's last mode
    took 1.9x the time at R = 32 and 50 (interleaved medians of 11). The strips of eight had measured the
    better ones on an AVX-512 Intel machine before; they are no longer compiled."""
    if wide_vectors() and nvec % 2 == 0:
        widths = [4] * (nvec // 4) + ([2] if nvec % 4 else [])
    else:
        widths = [nvec] if nvec <= 3 else ([3] if nvec % 2 else []) + [2] * (nvec // 2 - (nvec % 2))
    starts = np.cumsum([0, *widths[:-1]]) * vl
    return np.array([(c, w) for c, w in zip(starts, widths, strict=True)], dtype=np.int64).reshape(-1, 2)


def _outer_rb() -> int:
    """Rows of X per two-vector block of :func:`ttm_outer`'s register-blocked kernel: the whole tile
    (``_OUTER_ROWS`` = 12 accumulators) where the two vectors are one 512-bit vector, else ``MAX_RB``.
    Measured against blocks of six (both 512-bit; X of (40000, 200) and (76800, 160), float64 R = 16,
    float32 R = 16, 24, 32, two workers, interleaved medians of 15): 0.91-1.01x the time, the same bits."""
    return _OUTER_ROWS if wide_vectors() else MAX_RB


def _outer_kc(I: int, itemsize: int, nv: int = 2) -> int:  # noqa: E741
    """Rows of i per chunk of :func:`ttm_outer`: a strip of the packed U (64 bytes a row; ``32 * nv`` for the
    strips of four vectors) and one block's :func:`_outer_rb` rows of X (the tile's
    ``_OUTER_ROWS`` for those strips) fill at most ``_L1_BYTES``, as even as possible over ``I``."""
    line = 64 if nv <= 3 else 32 * nv
    kc = max(_MIN_KC, _L1_BYTES // (line + (_outer_rb() if nv <= 3 else _OUTER_ROWS) * itemsize))
    nch = -(-I // kc)
    return -(-I // nch)


#: a compiled kernel's call of fewer flops runs on the calling thread: waking the pool and cutting the tiles
#: cost more than the second core gives back. Above it, pieces of at least ``KERNEL_PIECE_FLOPS`` (at most
#: ``MAX_PIECES``). Against the former cut (pieces from 1 MFlop on: 5-16 pieces), TTMs of n^3 at R = 10 / 32
#: on every compiled mode, two workers, 26 interleaved pairs in one process: float64 64^3-80^3 0.61-1.04x
#: the time (median 0.92), 100^3-160^3 0.91-1.06x (median 0.97); float32 64^3-80^3 0.50-1.04x (median
#: 0.78), 100^3-160^3 0.77-1.05x (median 0.97). From 128 MFlop (200^3 at R = 10) the cut is the former one
KERNEL_PARALLEL_FLOPS = 16_000_000
KERNEL_PIECE_FLOPS = 8_000_000
#: ... and at most this many pieces a worker. Each piece starts on a chunk nobody prefetched and the last ones
#: leave a worker idle; each output element still belongs to one tile, so the bits do not change. Measured
#: against up to 16 pieces (the AVX-512 machine, every compiled mode of 200^3, 320x240x160, 150^3, 100^3 and
#: 64^4 at R = 10 and 32, both dtypes, two workers, medians of 12 interleaved rounds in one process): 4 pieces
#: 0.87-1.05x the time (median 0.96x; 200^3 R = 32 mode 0 5.94 -> 5.18 ms float64), 2 pieces 0.87-1.00x (median
#: 0.95x); two a worker keeps some balance on a loaded machine
KERNEL_PIECES_PER_WORKER = 2
#: a compiled call of at least this many flops but fewer than ``KERNEL_PARALLEL_FLOPS`` is cut in two where the
#: helpers are awake (:func:`tuckerkit.engine._handoff.helpers_spinning`: within their spin after a round, as in
#: a decomposition's sweep, whose small projections follow its large ones), and runs whole where they sleep
#: (a cold call: their wake-up costs more than the second core gives back). Measured on the 2-core Zen 4
#: machine (interleaved medians of 31 in one process, the same bits), two pieces against one: HOOI's small
#: projections of 200^3 at R = 10 ((200, 200, 10), (200, 10, 200), (10, 200, 200), 8 MFlop) right after a
#: 200^3 TTM on the helpers float64 0.70-0.85x the time, float32 0.89-0.92x, and right after a parked spell
#: 0.89-1.09x / 1.21-1.35x; 64^3 and 80^3 at R = 10 (5-10 MFlop) awake float64 0.70-0.98x, float32 0.75-0.94x.
#: HOOI's iteration on 200^3 0.95x the time, CP-ALS's 0.95-0.98x (the same fits)
WARM_SPLIT_FLOPS = 4_000_000


def _kernel_tiles(name: str, kernel, args: list, lohi: tuple[int, int], fresh: tuple[int, ...], flops: int,
                  policy: ExecutionPolicy | None) -> None:
    """``kernel(*args)`` over its tiles (:func:`_run_tiles`), from one argument list: the tile range at positions
    ``lohi`` (``args`` holds the whole range), the arrays at positions ``fresh`` a piece's own scratch (a fresh
    copy for each piece the Python pool runs; see :func:`tuckerkit.engine._handoff.run_kernel` for the helpers)."""

    whole = (args[lohi[0]], args[lohi[1]])

    def piece(lo: int, hi: int) -> None:
        a = list(args)
        a[lohi[0]], a[lohi[1]] = lo, hi
        if (lo, hi) != whole:  # a piece of a cut: its own scratch
            for j in fresh:
                a[j] = np.empty_like(args[j])
        kernel(*a)

    _run_tiles(piece, args[lohi[1]], flops, policy, (name, kernel, args, lohi, fresh))


def _tile_bounds(n_tiles: int, flops: int, policy: ExecutionPolicy | None, awake: bool = False) -> list[int]:
    """The cut of ``range(n_tiles)`` into pieces (:func:`_run_tiles`): ``[0, n_tiles]`` where it runs whole;
    ``awake``: the helpers are awake, so a call from ``WARM_SPLIT_FLOPS`` on is cut in two."""
    workers = 1 if policy is None else policy.workers
    if awake and warm_split(flops, policy) and n_tiles >= 2:
        return [0, n_tiles // 2, n_tiles]
    n = min(n_tiles, MAX_PIECES, KERNEL_PIECES_PER_WORKER * workers, flops // KERNEL_PIECE_FLOPS)
    if flops < KERNEL_PARALLEL_FLOPS or n < 2 or workers < 2:
        return [0, n_tiles]
    return [n_tiles * i // n for i in range(n + 1)]


def warm_split(flops: int, policy: ExecutionPolicy | None) -> bool:
    """Whether a compiled call of ``flops`` runs in two pieces when the helpers are awake and whole otherwise
    (``WARM_SPLIT_FLOPS``)."""
    return WARM_SPLIT_FLOPS <= flops < KERNEL_PARALLEL_FLOPS and policy is not None and policy.workers >= 2


def _run_tiles(kernel, n_tiles: int, flops: int, policy: ExecutionPolicy | None,
               by_address: tuple[str, object, list, tuple[int, int], tuple[int, ...]] | None = None) -> None:
    """``kernel(lo, hi)`` over a cut of ``range(n_tiles)`` into at most ``KERNEL_PIECES_PER_WORKER`` pieces a
    worker, the pieces taken by the policy's workers. Each output element belongs to one tile, so the bits do
    not depend on the cut or the workers.

    With ``by_address`` = ``(name, kernel, args, lohi, fresh)`` (the compiled kernel and its whole argument list,
    see :func:`tuckerkit.engine._handoff.run_kernel`) the pieces run on the GIL-free helpers: each piece a
    compiled call of the kernel by address, no Python between the pieces, a helper that needs no wake-up from
    a Python queue nor the GIL to start. Else (no helpers, or another thread's round on them) on the tuckerkit
    pool (no second thread pool spinning beside BLAS's pieces). The same calls on the same tiles either way.

    Measured on the 2-core AVX-512 machine (the first mode of 200^3 and 320x240x160 at R = 32, float64, the
    call right after a threaded BLAS product as in ``benchmarks/ttm.py``, interleaved medians of 25): the
    helpers ran the same four pieces in 0.86-0.92x and 0.90-0.97x the Python pool's time (with the pool, the
    second worker started its first piece 0.1-0.2 ms after the caller, and one worker often finished its last
    piece 0.1-2 ms after the other); 8 or 16 pieces were no better."""
    # (the cut in two for awake helpers only where they can run the kernel: the pool's start would cost what it
    # gives)
    awake = by_address is not None and warm_split(flops, policy) and _handoff.helpers_spinning(policy)
    bounds = _tile_bounds(n_tiles, flops, policy, awake)
    if len(bounds) == 2:
        kernel(0, n_tiles)
        return
    if by_address is not None and _handoff.run_kernel(*by_address[:4], bounds, by_address[4], policy):
        return
    if awake:  # (the helpers taken by another thread meanwhile)
        kernel(0, n_tiles)
        return
    assert policy is not None  # (a cut: two workers or more)
    parallel_for(lambda i, _: kernel(bounds[i], bounds[i + 1]), len(bounds) - 1, policy)


# ---------------------------------------------------------------------------------------------------
# the cost model's constants: fractions of one core's GEMM peak, (R <= 16, R > 16). BLAS's from interleaved
# A/B runs in one process on the project's 2-core machine (one core on 100^3, kernel alone against BLAS alone,
# and the planner's two plans on 200^3 with 2 workers, medians of 15). The unit-stride kernel ran 0.69 / 0.85x
# the BLAS time in float64 and 0.65 / 0.87x in float32 (R = 10 / 32). The register-blocked inner kernel
# (issue 15), one core against one-thread BLAS in CPU time (medians of 7 interleaved with the streaming read;
# the machine shared with three other jobs), on 200^3, 320x240x160 and 64^4 at R = 10 / 32: where the tile's
# rows are short (the middle modes: C = 64..200 unit-stride columns, each tile one run of memory) 0.65-0.81x
# / 0.66-0.89x the BLAS time in float64 and 0.54-0.71x / 0.64-0.86x in float32; where they are long (C of
# 4096 and more: the tile gathers I rows at a stride of C) 0.86-1.13x / 0.69-1.01x in float64, 0.81-0.85x /
# 0.66-1.04x in float32. Its constants are BLAS's over the median ratio of each class. The unit-stride kernel's
# float32 R > 16 (the GEMM-like variant, :func:`outer_gemm_style`): the dot kernel's 0.50 over its measured
# 0.78-0.88x the time (one core, X streamed from memory).
# ---------------------------------------------------------------------------------------------------
_KERNEL_EFF = {
    ("small_rank_ttm_inner", "float64"): (0.68, 0.78),
    ("small_rank_ttm_inner", "float32"): (0.70, 0.78),
    ("small_rank_ttm_inner_long", "float64"): (0.54, 0.80),
    ("small_rank_ttm_inner_long", "float32"): (0.50, 0.71),
    ("small_rank_ttm_inner_long_short_i", "float64"): (0.49, 0.80),
    ("small_rank_ttm_inner_long_short_i", "float32"): (0.50, 0.71),
    ("small_rank_ttm_inner_long_short_i_streamed", "float64"): (0.56, 0.80),
    ("small_rank_ttm_inner_long_short_i_streamed", "float32"): (0.50, 0.71),
    ("small_rank_ttm_outer", "float64"): (0.70, 0.57),
    ("small_rank_ttm_outer", "float32"): (0.50, 0.60),
}
#: ... the long-row rate above R = 16 where vectors are 256 bits (AVX2): below BLAS's, so the first modes' long
#: rows go to BLAS there. The packed kernel against BLAS's plan on the first mode (the planner's plans, two
#: workers, interleaved medians of 9 in one process, 2-core AMD EPYC, stop 56), R = 20 / 32: float64 320x240x160
#: 1.10 / 1.09x the time, 300x200x150 1.10 / 1.07x, 256x160x160 1.11 / 1.12x, 128x128x256 1.08 / 1.08x,
#: 240x128x192 0.97 / 1.07x, 200^3 1.00 / 1.02x; float32 1.08-1.32x, except 200^3 (0.91 / 0.86x) and 240x128x192
#: at R = 32 (0.99x); ``ttm.py``'s "/ BLAS" column had shown 1.02-1.19x on the committed cases (float64 0.80
#: there would mean 0.80 / 0.68 = 1.18x BLAS's speed). The first modes over fewer than ``LONG_ROW_MIN_I`` rows
#: keep their constants (64^4: 0.92-0.99x). With 512-bit vectors the table's 0.80 / 0.71 hold (committed
#: ttm table: 200^3 0.70 / 0.74x, 320x240x160 1.22 / 0.96x)
_LONG_HI_256 = {"float64": 0.62, "float32": 0.55}
# (float64 long rows that crowd L1 where vectors are wide, :func:`_wide_crowded`, take the long-row rates too.
# Stop 79 had given them a rate falling with R, which sent R above 20 to BLAS: the kernel had measured 1.00 /
# 1.08 / 1.13x BLAS's time at R = 24 / 28 / 32 on the Zen 4 machine, each further row block re-reading the
# strip's crowded lines from L2. Stop 92's hint of each row's next strip into L1 (``_AHEAD_L1``) came later.
# With it, on the Zen 5 machine (the planner's BLAS plans against the kernel's plans, interleaved medians of
# 9-11 in one process), the first modes of 320x240x160, 256x160x160, (200, 40960), 512x128x64, 160x256x128,
# 300x256x128, 240x128x192 and (400, 32768) at R = 24 / 28 / 32 took 0.48-0.65x BLAS's time on two workers
# (median 0.61x) and 0.49-0.62x on one; R = 17-21, which had kept the kernel, 0.96-1.06x against itself.)
_BLAS_EFF = {
    ("small_rank_ttm_inner", "float64"): (0.49, 0.68),
    ("small_rank_ttm_inner", "float32"): (0.42, 0.62),
    ("small_rank_ttm_outer", "float64"): (0.45, 0.53),
    ("small_rank_ttm_outer", "float32"): (0.33, 0.43),
}
#: the tiny-rows kernel's rate (:func:`outer_tiny_style`): bound by the memory where BLAS, on rows of 2-8
#: elements, is not, so it stands for a rank against BLAS's (the same bytes read, the compute terms decide): twice
#: BLAS's constant, where it measured 0.06-0.62x the planner's BLAS plans' time (:func:`outer_tiny_style`)
TINY_EFF = {"float64": 0.90, "float32": 0.66}
#: the short-rows kernel's rate (:func:`inner_short_style`), likewise a rank against BLAS's batch of GEMMs with a few
#: columns: twice BLAS's constant at ranks up to 16 (above it, 1.3-1.45x), where it measured 0.28-1.04x the
#: planner's former plans' time
SHORT_EFF = {"float64": 0.98, "float32": 0.84}
#: rates, relative to the packed strips, of :func:`ttm_inner`'s columns left at the end of a row: vectors
#: read from X directly (measured 0.9-1.2 on (200, 200, 10) and (200, 200, 13) against BLAS, one core;
#: taken lower for rows that do not stay in cache), and single elements in rows shorter than one vector
#: (serial chains: about 1/64 of the float32 vector rate, 1/32 of the float64)
TAIL_VECTOR_RATE = 0.8
TAIL_SCALAR_RATE = 0.03
#: long rows contracted over fewer rows than this keep the constants measured before the next-chunk prefetch
#: (``_long_short_i``): with it, float64 at R <= 16 ran 0.80-0.96x BLAS's time on the first mode of 200^3 and
#: 320x240x160 (I = 200, 320; 1 and 2 workers, 9 interleaved pairs, shared machine), but 1.0-1.5x on 64^4
LONG_ROW_MIN_I = 128
#: a tensor of more bytes than this is streamed from memory by each pass (beyond the caches it shares), where
#: the kernel's next-chunk prefetch pays for long rows over a short ``I`` (``_long_short_i_streamed``): float64,
#: R = 4-16, the first two modes of 60^4, 64^4, 100^4, 30^5, 16^6 and 40x50x60x70 (67-800 MB), 15 interleaved
#: pairs in one process, stop 45: 0.67-0.94x BLAS's time with one worker (median 0.80) and 0.72-0.99x with two
#: (median 0.85), except 64^4 at R = 16 (1.04-1.16x: its rows 2 MiB apart map to the same cache sets);
#: on tensors held in cache (100^3, 120x90x110, 10x60x60x60: 8-17 MB) 1.03-1.57x, which the plain
#: ``_long_short_i`` constants (BLAS) keep. Measured on days of slow memory (one read at 8-19 GB/s, against
#: 25-31 on quiet ones); ``benchmarks/ttm.py``'s "/ BLAS" column on 64^4 shows the ratio in every run. Where
#: vectors are wide the tensors held in cache take the streamed constants too (so float64 takes the kernel):
#: on the 2-core Zen 4 machine (stop 81; the planner's plans against the same plans run by BLAS, each call after
#: a parked spell, interleaved medians of 11 in one process), float64 first modes over I = 10-120 with rows of
#: 6000-216000 columns in 2.9-17 MB (100^3, 120x90x110, 10x60x60x60, 60x10x60x60, 60x60x10x10, 30^4, 16^5) at R
#: = 4 / 8 / 16 0.67-1.02x / 0.54-0.98x / 0.61-0.88x BLAS's time (median 0.82x); HOOI on 60^4 took the first of
#: them at 0.64-0.67x in its sweeps
STREAMED_BYTES = 32 << 20
#: ... and where vectors are 256 bits, the tensors held in cache up to this rank (stop 98, the 2-core Zen 3 machine:
#: the planner's BLAS plan against the compiled plan forced, each call right after a threaded 300 x 300 product,
#: interleaved medians of 25 in one process): float64 first modes of 100^3, 10x60x60x60, 30^4, 16^5 and 80^3 at
#: R = 3 / 5 / 10 0.57-0.64x / 0.71-0.77x / 0.65-1.01x BLAS's time (60x10x60x60's second mode, I = 10, 0.48x at R =
#: 8); HOOI from the same start (10 iterations) 0.84-0.91x on 90^3-120^3. R = 12-16 stay with BLAS (0.62-1.54x:
#: 100^3 and 30^4 1.18-1.54x)
SHORT_I_CACHED_MAX_R_256 = 10
#: bytes of one unit-stride row from which :func:`ttm_inner`'s tiles count as long (strided gathers)
LONG_ROW_BYTES = 8192
#: :func:`ttm_outer`'s dot products (not :func:`outer_gemm_style`) along a contracted unit-stride extent of
#: fewer bytes than this, where vectors are 256 bits: LLVM's vector loop (a vector times its unroll) is longer
#: than the row, so the sums run in the scalar remainder; their rate is the constant times ``SHORT_DOT_RATE``.
#: Measured on the 2-core AVX2 machine (a C-ordered (E / I, I) X against I x R, E = 8M elements, the
#: planner's compiled plan against its BLAS plan, two workers, medians of 7 interleaved, R = 3-20, three
#: runs): float32 I = 6-24 1.13-2.84x BLAS's time, I = 32-40 0.78-1.53x (1.0-1.2x in two runs of three),
#: I = 48 0.71-0.91x, I = 64 0.68-0.89x; float64 I = 6-12 0.93-1.50x (1.04-1.50x at R >= 5), I = 16
#: 0.70-1.25x (1.0-1.25x in two runs), I = 24 0.71-1.09x, I = 32 0.61-1.01x. The short last modes of
#: (1000, 100, 10) or (100000, 10, 10) are such rows: float32 100000 x 10 x 10 at R = 5, 17 against 7 ms
#: on BLAS. The register-blocked kernel (R = 16) keeps its rate (0.55-0.94x BLAS's time at I = 6-40).
SHORT_DOT_BYTES = 192
SHORT_DOT_RATE = 0.45
#: ... where vectors are wide (512 bits): the same rate below this many bytes. Measured on the AVX-512 machine
#: (a C-ordered (E / I, I) X against I x R, E = 8M elements, the planner's compiled plan against its BLAS
#: plan, two workers, interleaved medians of 7, R = 3-12): float32 I = 6-30 (below 128 bytes) 0.97-1.72x
#: BLAS's time at R = 5-12, all but one case above 1.0x (0.73-1.20x at R = 3), I = 32-48 0.53-1.02x; float64
#: I = 6-12 1.06-1.69x (0.96x once), I = 16-48 0.57-1.06x. The last modes of 20^5 and 40x40x40x40x10 in
#: float32 (I = 20, 10) and of 40x40x40x40x10 in float64 were such rows (1.16-1.71x BLAS's time at R = 5-10).
#: Since the dot products take five columns at a time on rows of 200 bytes and more (:func:`_dot_five`), rows
#: below 192 bytes are short here too (stop 70; (E / 20 / I, 20, I) against I x R, E = 3.2M and 8M elements,
#: the compiled plan forced against the BLAS plan, two workers, interleaved medians of 11, R = 3 / 5 / 10):
#: float64 I = 16-20 (128-160 bytes) 0.96-1.48x BLAS's time (10 of 12 above 1.0x), I = 24 0.88-1.44x, I = 32-40
#: 0.60-0.93x; float32 I = 32-40 (128-160 bytes) 0.65-1.69x (10 of 12 above 1.0x), I = 48-64 0.53-1.10x. The
#: ranks of the transposed tile (:func:`outer_tr_style`, which came later: lanes over the rows, each step's block
#: transposed in registers) keep their rate on such rows. Measured on the Zen 5 machine (stop 95; the same
#: (E / I, I), E = 8M elements, the kernel's plan against the BLAS plan the rule had chosen, two workers,
#: interleaved medians of 9, R = 3 / 5 / 8 / 12 / 15): float32 I = 16 0.73-0.84x BLAS's time (R = 15 0.62x),
#: I = 24 0.55-0.78x, I = 30 0.36-0.75x, I = 40 0.39-0.49x, I = 47 0.36-0.50x; float64 I = 16 0.59-0.73x,
#: I = 8 at R = 12 / 15 0.94 / 0.53x; with the rule lifted, BLAS's plans took 1.10-2.36x the kernel's time in
#: float64 at I = 4-40 and R = 3-20, in float32 1.14-2.23x at I = 16-40 but 0.52-1.07x at I = 4-12 (a float32
#: block's rows shorter than its 16 lanes), where the rule stays. R of 1 and 2 run the dot products: R = 1
#: keeps the rule (BLAS's matrix-vector product measured 0.64-1.18x the kernel's time on float64 rows of 24-47
#: and the kernel 0.81-2.29x BLAS's on float32 rows of 12-47)
WIDE_SHORT_DOT_BYTES = 192
#: ... R = 2's dot products keep their rate on rows of this many bytes and more where vectors are wide: measured
#: (as above, medians of 11) 0.29-0.52x BLAS's time on float32 rows of 24-47 elements, 0.68-0.73x on float64 rows
#: of 16-20; below, float32 I = 16 / 20 1.59 / 0.97x, float64 I = 12 0.98x
SHORT_DOT_R2_BYTES = 96
#: ... and the transposed tile keeps its rate on float32 rows of this many elements and more (below 16) where
#: numpy's OpenBLAS runs an AVX-512 core (:func:`openblas_avx512`): its SGEMM over 9-15 contracted elements took
#: 1.2-2.4x the tile's time on Zen 5 (stop 96; the last mode of (A, 10, I) for I = 9 / 10 / 12 / 14 / 15 at R = 3 /
#: 5 / 8 / 12, A of 70000-100000, two workers, interleaved medians of 9: the tile at 0.41-0.84x BLAS's time in all 20),
#: where the Haswell kernels ran the same GEMMs in 1.8-3.1 ms against 4-8 ms (the tile 0.96-1.42x their time at R =
#: 3-8, 0.64-0.82x at 12)
TR_SHORT_F32_MIN_I = 9
#: :func:`tiny_slabs_to_blas`: the fewest slabs, the most rows a slab and the elements a row stays below
TINY_SLABS_MIN_A = 4096
TINY_SLABS_MAX_I = 16
TINY_SLABS_MAX_C = 24
#: a batch of GEMMs on BLAS costs this much per GEMM beyond its flops (the batched loop's call, its
#: operands' set-up, a tiny GEMM's packing): the strided-batched alternative of :func:`ttm_inner` adds it
#: per GEMM. Measured on the 2-core AVX2 machine (the middle mode, batched over the first: X of (A, B, C)
#: against B x R, R = 5 / 10, two workers): 370-700 ns a GEMM for 10 x 10 to 20 x 20 slices, where the
#: compiled kernel ran float32 (100000, 10, 10) in 0.12-0.26x BLAS's time (which the rates alone put at a
#: ninth of the kernel's) and float64 (100000, 20, 5) in 0.28x
BATCH_CALL_SECONDS = 0.4e-6
#: OpenBLAS's AVX-512 cores on x86-64 (``openblas_get_corename``, lower case; :func:`openblas_avx512`)
OPENBLAS_AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
#: :func:`short_rows_to_blas`: float32 rows of at least this many elements, over fewer contracted rows than
#: ``SHORT_ODD_MIN_I`` (unless one block of rows of U^T covers at least ``SHORT_ODD_ONE_BLOCK_I``)
SHORT_ODD_MIN_C = 5
SHORT_ODD_MIN_I = 64
SHORT_ODD_ONE_BLOCK_I = 48
#: :func:`ttm_outer` reads all of U (I x R) once per tile of rows of X (4 rows for the dot products,
#: ``_OUTER_ROWS`` for the register-blocked kernel): where U is larger than this it comes from memory each
#: time, and the planner counts those reads (:func:`outer_reread_bytes`). Measured on the 2-core AVX2 machine
#: (the last mode of (A / I ... , I) tensors, the planner's compiled plan against its BLAS plan, medians of 5
#: interleaved): U of 6.4-25 MB over 16-100 rows of X 1.6-18x BLAS's time ((10, 10, 100000) float64 R = 10
#: 18.1 against 11.5 ms, (4, 4, 1000000) float64 R = 10 147 against 25 ms); U of 4 MB and less 0.85-1.16x
#: ((10, 10, 100000) float32 R = 10, float64 R = 5; (50, 50, 4000), (100, 100, 1000), (20, 200, 2000) at
#: R = 3-32)
OUTER_U_CACHED_BYTES = 4 << 20
#: ... and, for a float64 U, on the CPUs of ``OUTER_U_CACHED_F64_BYTES_BY_CPU`` (:func:`cpu_name`) that many instead
#: (:func:`outer_u_cached_bytes`). Zen 5 (stop 96; its L3 of 32 MiB; the last mode of (A, I) and (A, B, I) float64
#: tensors, the kernel's plan against the BLAS plan, two workers, interleaved medians of 7-9 in one process, three
#: runs): U of 6-8 MiB at R = 8-32 over 100-600 rows 0.46-0.87x BLAS's time in 23 of 25 cases ((400, 32768) at R =
#: 24 / 32 0.57 / 0.59x, (10, 10, 100000) at R = 10 0.59x; (10, 10, 32768) at R = 24 / 32 1.01 / 1.10x); 10-12 MiB
#: 0.57-0.95x in one run, but at R = 24 1.27-1.37x in another; 15-16 MiB mixed (0.60-1.40x); 24 MiB 0.72-1.33x.
#: float32 keeps 4 MiB: its register-blocked kernel took 1.13-2.25x BLAS's time at R = 20 and 32 on U of 6-10 MiB
OUTER_U_CACHED_F64_BYTES_BY_CPU = {"znver5": 8 << 20}
#: :func:`ttm_inner` packs U block by block in every call where R takes more than one block (:func:`_row_blocks`) and
#: reads it beside the tensor's rows: where U has more than this many elements per element of a row of X (R / C) and
#: the output is one row of tiles (a tall first mode into few columns: (500000, 16) at R = 32, U twice the tensor),
#: BLAS's one GEMM, which packs both in cache-sized panels, is faster (:func:`inner_u_heavy`). Measured on Zen 5
#: (stop 96; the kernel's plan against the BLAS plan, two workers, interleaved medians of 9 in one process, two or
#: three runs; kernel time / BLAS time): float64 (500000, 16) at R = 16 / 20 / 24 / 32 / 48 / 64 (R / C = R / 16)
#: 0.67 / 0.70 / 0.72-0.74 / 1.05-1.09 / 1.21-1.38 / 1.28-1.54, (200000, 40) at R = 20 / 32 / 48 / 64 0.60 / 0.86 /
#: 1.02 / 1.12-1.28, (100000, 64) 0.65 / 0.77 / 0.92 / 1.00, (1000000, 8) at R = 16-64 1.4-2.8, (100000, 10, 10)
#: at R = 20-64 0.52-0.76; float32 (500000, 16) at R = 16 / 20 / 24 / 32 / 48 / 64 1.1-1.35 / 0.98-1.01 / 0.94-1.05
#: / 1.8-2.0 / 2.2-2.4 / 3.0-3.2, (200000, 40) at R = 20 / 24 / 32 / 48 / 64 0.89-0.98 / 0.83-0.95 / 1.2-1.4 /
#: 1.27-1.56 / 1.6-1.75, (100000, 64) at R = 32 / 48 / 64 1.03-1.25 / 1.15-1.28 / 1.5-1.6, (100000, 10, 10) at R = 32
#: / 48 / 64 0.91-1.10 / 1.05-1.16 / 1.22-1.37, (1000000, 8) at R = 16 1.4-1.5; a single block (float32 (1000000, 8)
#: at R = 5 / 10, (500000, 16) at R = 10) 0.33-0.46
INNER_U_MAX_SHARE = {8: 1.5, 4: 0.45}
#: ... and where the tensor has more than one row of tiles (A > 1), each reads all of U again: from memory where U
#: is large. Measured as above, on middle modes (after U's packing by block copies, ``U_GATHER_COPY_BYTES``):
#: float64 (2, 200000, 32) at R = 32 / 48 / 64 (U of 51-102 MB, R / C = 1-2) 1.28 / 1.30 / 1.37, (4, 100000, 8) at
#: R = 32 / 48 / 64 (26-51 MB) 0.88 / 1.39 / 1.24, (8, 50000, 16) at R = 64 (26 MB) 0.93, (4, 100000, 8), (3,
#: 100000, 16), (4, 60000, 16) at R = 12-24 (19 MB and less) 0.32-0.81; float32 (2, 200000, 32) at R = 32 / 48 / 64
#: (U of 26-51 MB) 1.37-1.54 / 1.71-1.82 / 2.2-2.3, (4, 100000, 8) at R = 20 / 24 / 32 / 48 / 64 (8-26 MB) 0.89-1.45
#: / 1.0 / 0.75-0.77 / 1.49-1.61 / 1.54-2.1, (8, 50000, 16) at R = 48 / 64 (10 / 13 MB) 1.0-1.12 / 1.22-1.52. Pairs
#: of (U's bytes above, R / C above); float32's rows of 8 at R = 32 (U of 13 MB) stay a miss
INNER_U_REREAD_LIMITS = {8: ((32 << 20, 0.75),), 4: ((8 << 20, 2.5), (24 << 20, 0.75))}


def planned_beyond_max_rank(inner: bool, itemsize: int, R: int, row_bytes: int, nbytes: int,
                            contracted: int = 0, rank_outer: bool = False) -> bool:
    """Whether a compiled kernel is planned for an ``R`` above ``MAX_RANK``, on a tensor of at least
    ``BEYOND_MIN_BYTES`` on a machine with AVX2 + FMA (measured with 256-bit vectors, and with 512-bit ones):
    :func:`ttm_inner` (``inner``) up to ``SHORT_ROWS_MAX_RANK`` = 64 where the unit-stride rows are short
    (``row_bytes`` below ``LONG_ROW_BYTES``: a middle mode, each tile one run of memory), and
    :func:`ttm_outer` (the unit-stride mode contracted; its dot products with 256-bit vectors, its register
    blocks with 512-bit ones) in float64 up to ``OUTER_F64_MAX_RANK`` = 56. There
    BLAS sees the TTM as a batch of GEMMs of R x I by I x C with C a few hundred, or as one GEMM with an
    extent R, below its peak; the inner kernel's blocks of six rows of U keep their sums in registers at any
    R, the dot kernel shares each load of four rows of X among the columns of U.

    Measured on the 2-core AVX2 machine (the planner's compiled plan against its BLAS plan, two workers,
    medians of 9 interleaved pairs in one process). Inner, R = 40 / 50 / 64: the middle mode of 200^3 float64
    0.86 / 0.85 / 0.93x the time, float32 0.80 / 0.88 / 0.90x; 320x240x160 float64 0.82 / 0.87 / 0.87x,
    float32 0.80 / 0.80 / 0.88x; 240x120x180 float64 0.88 / 0.80 / 0.94x, float32 0.82 / 0.84 / 0.90x; 180^3
    float64 0.98 / 0.92 / 0.95x, float32 0.89 / 0.83 / 0.89x; 150^3 float64 (27 MB) 0.83 / 0.89 / 0.91x,
    float32 (13.5 MB) 0.88 / 0.80 / 0.92x; mode 2 of 60^4 float64 0.83 / 0.82 / 0.87x, float32 0.89 / 0.86 /
    0.91x. Outer float64, R = 36 / 44 / 50 / 56: the last mode of 200^3 0.88 / 0.86 / 0.90 / 0.97x, 320x240x160
    0.76 / 0.88 / 0.87 / 0.88x, 150^3 0.85 / 0.92 / 0.99 / 0.94x, 128^3 (16.8 MB) 0.96 / 0.89 / 0.90 / 0.90x.
    Left to BLAS: smaller tensors (inner: 128^3 float32, 8.4 MB, 0.86-1.00x; 100^3 float32 0.99-1.19x; 64^3
    1.13-1.80x, the seed's Table II cases of n = 64 among them), R of 80 and 100 (inner 0.89-0.98x: BLAS nears
    its peak), the outer kernel at R = 64 (float64 0.99-1.09x) and in float32 (1.0-1.66x at R = 40-64), the
    long rows of a first mode (200^3 and 320x240x160: 0.90-1.12x).

    Where vectors are wide (:func:`wide_vectors`: the inner kernel's strips of two 512-bit vectors in blocks of up to
    twelve rows, the outer one's strips of up to four vectors) the same rule, the outer kernel in float64 up to
    ``WIDE_OUTER_F64_MAX_RANK`` = 64 where U (the ``contracted`` extent times R) takes at most ``WIDE_OUTER_U_BYTES``:
    each tile of twelve rows of X reads all of U again, from L2 while it fits there beside the streamed rows. Measured
    on the 2-core AVX-512 machine (the compiled plan forced against the BLAS plan, two workers, medians of 8 interleaved
    rounds in one process, R = 40 / 50 / 64). Inner on short rows: the middle mode of 200^3 float64 0.71 / 0.74 / 0.76x
    the time, float32 0.80 / 0.79 / 0.84x; 320x240x160 float64 0.67 / 0.69 / 0.70x, float32 0.62 / 0.64 / 0.73x; 150^3
    float64 0.92 / 0.77 / 0.74x, float32 0.93 / 0.73 / 0.88x; 240x120x180 float64 0.83 / 0.76 / 0.84x, float32 0.96 /
    0.78 / 0.82x; 400x400x50 float64 0.77 / 0.82 / 0.65x, float32 0.85 / 0.91 / 0.81x; 50x400x400 float64 0.81 / 0.85 /
    0.93x, float32 0.80 / 0.80 / 0.87x; mode 2 of 60^4 and 64^4 0.83-0.92x. Outer float64: the last mode of 200^3 0.60 /
    0.73 / 0.70x, 320x240x160 0.62 / 0.71 / 0.72x, 150^3 0.72 / 0.79 / 0.73x, 240x120x180 0.65 / 0.76 / 0.68x,
    50x400x400 0.56 / 0.64 / 0.62x, 60^4 and 64^4 0.72-0.90x, 128^3 (16.8 MB) 0.71 / 1.00 / 0.88x; X of (40000, 200),
    (76800, 160), (8000, 2000), (10000, 1000) at R = 40-50: 0.67-0.82x, or 0.71-0.97x where the output has R outermost
    (a CP-ALS partial: BLAS's GEMM then has R rows, its better shape). But a longer contracted extent: (3600, 3600) at R
    = 40 / 50 / 64 0.69 / 0.84 / 0.97x, with R outermost 0.88 / 1.02 / 1.08x (CP-ALS on 60^4 at R = 50: 1.04-1.06x the
    iteration), (4096, 4096) 0.90x and 1.16x, (1000, 10000) 1.04x: U of 1.2-4 MB; hence the bound on U. Left to BLAS
    there as on 256-bit machines: the outer kernel in float32 (200^3 1.15 / 0.99 / 0.85x, 150^3 1.03-1.28x, 240x120x180
    0.89-1.22x, 60^4 and 64^4 1.14-1.25x at R = 40-50), the long rows of a first mode in float64 (0.96-1.24x) and
    in float32 below ``BEYOND_LONG_F32_MIN_BYTES`` (150^3, 13.5 MB, 0.93-1.17x; 240x120x180, 20.7 MB, 1.02-1.16x),
    and the long middle rows of 4-way tensors (60^4 mode 1 float64 1.06-1.10x). float32 first modes from 24 MiB
    (after the kernels' tiles ran in at most two pieces a worker) take the inner kernel: R = 40 / 50 / 64 200^3
    0.74 / 0.74 / 0.89x BLAS's time, 320x240x160 0.75 / 0.75 / 0.92x, 250^3 0.76 / 0.78 / 0.88x, 300x200x150
    0.80 / 0.84 / 0.93x, 60^4 0.64 / 0.84x, 64^4 0.93-0.99x; 256x256x128 1.03 / 0.91 / 1.03x and 400x400x50
    1.02 / 1.07 / 0.99x (no shape rule found for those two). float32 outer products (``rank_outer``: into an output
    with R outermost, CP-ALS's partials) up to ``WIDE_OUTER_F32_MAX_RANK`` = 64 by the register-blocked kernel
    (:func:`outer_gemm_style`; the dot kernel had run them before, at 1.0-1.66x BLAS's time) where U takes at most
    ``WIDE_OUTER_U_BYTES`` and the rows of X do not lie a multiple of 4 KiB apart: measured (stop 83, the
    planner's plans with the rule against its BLAS plans, two workers, interleaved medians of 9 in one process,
    R = 36 / 40 / 50 / 64) 200^3 0.63 / 0.63 / 0.70 / 0.68x the time, 320x240x160 0.59 / 0.57 / 0.79 / 0.64x,
    150^3 0.59 / 0.68 / 0.81 / 0.84x, 240x120x180 0.65 / 0.58 / 0.60 / 0.70x, 60^4 0.86 / 0.72 / 0.88 / 0.82x,
    64^4 0.72 / 0.69 / 0.74 / 0.75x, (3600, 3600) 0.75 / 0.72 / 0.81 / 0.74x, (10000, 1000) 0.75 / 0.64 / 0.73 /
    0.68x, (8000, 2000) 0.77 / 0.64 / 0.81 / 0.53x, 400x400x50 0.81-0.89x, 50x400x400 0.67-0.80x, 100x1000x100
    0.64-0.75x; left to BLAS: rows 16 KiB apart ((4096, 4096): 0.87-1.04x), a U of 1.4-2.6 MB ((1000, 10000):
    0.93-1.03x), and an output with R innermost (a TTM's own layout: 0.73-0.94x on 200^3, 320x240x160 and 150^3
    but 1.04-1.12x on 60^4, 1.21x on 64^4 at R = 40, 1.01-1.26x on 400x400x50, 1.21-1.34x on (4096, 4096)).
    CP-ALS at R = 50 on 200^3 (its middle-mode pass):
    float64 0.92x, float32 0.87x the iteration. Rows of ``VERY_LONG_ROW_BYTES`` = 512 KiB and more (4-way first
    modes) only up to ``VERY_LONG_F32_MAX_RANK`` = 48: measured with the kernels on the helpers (the planner's
    plans, two workers, interleaved medians of 9), R = 40 / 48 / 56 / 64, 64^4 0.95 / 0.89 / 1.09x at 48-64, 70^4
    0.69 / 0.71 / 1.01 / 1.12x, 80^4 1.12x at 40 and 1.27 / 1.41x at 50 / 64, 90^4 0.70 / 0.91 / 1.03 / 1.08x,
    40x200x200x20 0.87 / 0.87 / 1.02 / 1.21x, 100^4 0.68 / 0.93 / 0.94 / 0.99x, 60^4 0.74-0.93x (its gains at
    50-64 given up); shorter rows keep R up to 64 (200^3, 320x240x160, 250^3, 300x200x150, 100x1000x100,
    128x256x256, 3000x30x300: 0.65-0.96x at R = 50-64; 1000x100x100's rows of 40 KB 1.03-1.21x, not covered).

    Since stop 84, where vectors are wide, long rows above ``MAX_RANK`` run the inner kernel on chunks packed first
    (:func:`_packed_beyond`: up to 64 rows of 2 KiB tiles), and then every long row of either dtype takes it up to
    ``SHORT_ROWS_MAX_RANK`` (the rules above for long rows stand where the packing is off). Measured on Zen 4 (the
    planner's plans with the rule against those before it: BLAS, or float32's inner kernel reading X directly;
    two workers, interleaved medians of 7-9 in one process), float64 / float32: R = 40 / 64 the first mode of 200^3
    (into an output with R outermost) 0.92 / 0.94x and 0.98 / 0.93x, 320x240x160 0.96 / 0.98x and 0.97 / 0.93x,
    64^4 0.79 / 0.85x and 0.66 / 0.63x, 150^3 0.88 / 0.85x and 0.74 / 0.80x, 100^3 (below ``BEYOND_MIN_BYTES``,
    left out) 0.85 / 0.77x and 0.84 / 0.86x, mode 1 of 60^4 0.90 / 0.92x and 0.87 / 0.84x; R = 50 / 64 80^4
    0.87 / 0.94x and 0.65 / 0.71x, 70^4 0.86 / 0.86x and 0.72 / 0.72x, 256x256x128 0.99 / 1.00x and 0.87 / 0.88x,
    400x400x50 0.90 / 0.96x and 0.91 / 0.95x, 1000x100x100 0.89 / 0.91x and 0.88 / 0.84x; R = 40 / 50 240x120x180
    0.96 / 0.89x and 0.79 / 0.81x, 250^3 0.97 / 0.91x and 0.87 / 0.92x, 300x200x150 0.90 / 0.94x and 1.02 / 0.95x,
    mode 1 of 64^4 0.78 / 0.85x and 0.74 / 0.75x; R = 33 / 36 200^3 0.90 / 0.81-0.88x and 1.02 / 0.99-1.0x,
    320x240x160 0.92 / 0.97x and 1.00 / 0.97x, 60^4 mode 1 0.90 / 0.85x and 0.87 / 0.89x, 64^4 0.78 / 0.77x and
    0.75 / 0.72x, 150^3 0.81 / 0.86x and 0.63 / 0.60x. The same bits as the direct reads (any tiling).

    >>> planned_beyond_max_rank(True, 8, 50, 1600, 64 << 20) == simd_supported()
    True
    >>> long = planned_beyond_max_rank(True, 8, 50, 320000, 64 << 20)  # a first mode's rows: packed chunks
    >>> long == (simd_supported() and wide_vectors()), planned_beyond_max_rank(True, 8, 65, 1600, 1 << 30)
    (True, False)
    >>> planned_beyond_max_rank(False, 4, 40, 0, 64 << 20, 200), planned_beyond_max_rank(False, 8, 65, 0, 64 << 20, 200)
    (False, False)
    >>> planned_beyond_max_rank(False, 8, 50, 0, 64 << 20, 200) == simd_supported()
    True
    >>> fits = 3600 * 50 * 8 <= wide_outer_u_bytes()  # U of 1.4 MB: beyond 1 MiB, within Zen 5's 4 MiB
    >>> planned_beyond_max_rank(False, 8, 50, 0, 64 << 20, 3600) == (simd_supported() and (not wide_vectors() or fits))
    True
    >>> f32 = 32 << 20  # a float32 tensor of 32 MiB
    >>> planned_beyond_max_rank(False, 4, 50, 0, f32, 200, rank_outer=True) == (simd_supported() and wide_vectors())
    True
    >>> planned_beyond_max_rank(False, 4, 50, 0, f32, 4096, True), planned_beyond_max_rank(False, 4, 50, 0, f32, 200)
    (False, False)
    >>> very = 512 << 10  # a first mode's rows of 512 KiB
    >>> planned_beyond_max_rank(True, 4, 56, 2 * very, 64 << 20) == (simd_supported() and wide_vectors())
    True
    >>> planned_beyond_max_rank(True, 4, 65, very, 1 << 30)
    False
    >>> planned_beyond_max_rank(True, 4, 48, 1 << 20, 64 << 20) == (simd_supported() and wide_vectors())
    True
    """
    if not (MAX_RANK < R and nbytes >= BEYOND_MIN_BYTES and simd_supported()):
        return False
    if inner:
        if R > SHORT_ROWS_MAX_RANK:
            return False
        if row_bytes > 0 and _packed_beyond(R, row_bytes):
            return True
        return 0 < row_bytes < LONG_ROW_BYTES or (row_bytes > 0 and wide_vectors() and itemsize == 4
                                                  and nbytes >= BEYOND_LONG_F32_MIN_BYTES
                                                  and (R <= VERY_LONG_F32_MAX_RANK or row_bytes < VERY_LONG_ROW_BYTES))
    if not wide_vectors():
        return itemsize == 8 and R <= OUTER_F64_MAX_RANK
    u_fits = 0 < contracted * R * itemsize <= wide_outer_u_bytes()
    if itemsize == 4:
        return rank_outer and R <= WIDE_OUTER_F32_MAX_RANK and u_fits and (contracted * itemsize) % 4096 != 0
    return R <= WIDE_OUTER_F64_MAX_RANK and u_fits


def wide_outer_u_bytes() -> int:
    """The most bytes of U :func:`planned_beyond_max_rank` gives :func:`ttm_outer` above ``MAX_RANK`` where vectors
    are wide: ``WIDE_OUTER_U_BYTES``, or this CPU's entry in ``WIDE_OUTER_U_BYTES_BY_CPU``."""
    return WIDE_OUTER_U_BYTES_BY_CPU.get(cpu_name(), WIDE_OUTER_U_BYTES)


def kernel_efficiency(variant: str, dtype: str, R: int, columns: int = 0, contracted: int = 0,
                      nbytes: int = 0, tiny: bool = False, short: bool = False) -> float:
    """The compiled kernel's flop rate as a fraction of one core's GEMM peak (R <= 16, or above).

    ``contracted``: the contracted extent ``I`` (0: not known). Long rows contracted over fewer than
    ``LONG_ROW_MIN_I`` rows (one short chunk per tile: the microkernel's start and drain weigh more) take the
    ``_long_short_i`` constants, or ``_long_short_i_streamed`` where the tensor's ``nbytes`` exceed
    ``STREAMED_BYTES``.

    :func:`ttm_outer`'s dot products along a contracted extent of fewer than ``SHORT_DOT_BYTES`` (256-bit
    vectors; ``WIDE_SHORT_DOT_BYTES`` with 512-bit ones) run at ``SHORT_DOT_RATE`` of the rate, and so does its
    register-blocked kernel there below R = 16.

    ``columns``: the unit-stride extent ``C`` of :func:`ttm_inner` (0: not known). Rows of at least
    ``LONG_ROW_BYTES`` take the long-row constants. The columns left over at the end of a row, fewer than one
    packed strip of 64 bytes, run from X directly one vector at a time (the last vector overlapping the
    columns before it, counted in full) at ``TAIL_VECTOR_RATE`` of the rate; a row shorter than one vector
    runs element by element (one serial chain of fused multiply-adds per output) at ``TAIL_SCALAR_RATE``;
    the times add (the rates combine harmonically).

    Rows whose stride crowds L1 (:func:`_wide_crowded`) take the long-row rates too (see the note above
    ``_BLAS_EFF``).

    ``tiny``: :func:`ttm_outer` runs its tiny-rows kernel (:func:`outer_tiny_style` on dense rows): ``TINY_EFF``.
    ``short``: :func:`ttm_inner` runs its short-rows kernel (:func:`inner_short_style` on slabs whose rows lie
    back to back): ``SHORT_EFF``.
    """
    if tiny and variant == "small_rank_ttm_outer":
        return TINY_EFF[dtype]
    if short and variant == "small_rank_ttm_inner":
        return SHORT_EFF[dtype]
    key = variant
    itemsize = 4 if dtype == "float32" else 8
    if variant == "small_rank_ttm_inner" and columns * itemsize >= LONG_ROW_BYTES:
        key = variant + ("_long_short_i" if 0 < contracted < LONG_ROW_MIN_I else "_long")
        if key.endswith("_short_i") and (nbytes > STREAMED_BYTES or wide_vectors() or R <= SHORT_I_CACHED_MAX_R_256):
            key += "_streamed"
    lo, hi = _KERNEL_EFF[(key, dtype)]
    if key == "small_rank_ttm_inner_long" and not wide_vectors():
        hi = _LONG_HI_256[dtype]
    eff = lo if R <= 16 else hi
    short_dot = WIDE_SHORT_DOT_BYTES if wide_vectors() else SHORT_DOT_BYTES
    if (variant == "small_rank_ttm_outer" and 0 < contracted * itemsize < short_dot
            and (R < _WIDE_GEMM_MIN_RANK or not outer_gemm_style(R, itemsize))
            and not (outer_tr_style(R, itemsize) and (itemsize == 8 or contracted * itemsize >= 64
                                                      or (contracted >= TR_SHORT_F32_MIN_I and openblas_avx512())))
            and not (R == 2 and contracted * itemsize >= SHORT_DOT_R2_BYTES and wide_vectors())):
        # (below rank 16 the register-blocked kernel too: on rows of 4-20 elements it took 0.76-1.44x BLAS's
        # time at float64 R = 6-12 and 1.30-2.44x at float32 R = 13-14, two runs, stop 70. The transposed tile,
        # lanes over the rows, is not slowed by short rows, but float32's below 16 elements (a block's row
        # shorter than its vector): ``WIDE_SHORT_DOT_BYTES``)
        eff *= SHORT_DOT_RATE
    if variant == "small_rank_ttm_inner" and columns > 0:
        vl = 32 // itemsize
        full = columns - columns % (2 * vl)
        if columns < vl:
            eff *= TAIL_SCALAR_RATE
        else:
            eff *= columns / (full + -(-(columns - full) // vl) * vl / TAIL_VECTOR_RATE)
    return eff


def inner_u_heavy(A: int, I: int, C: int, R: int, itemsize: int) -> bool:  # noqa: E741
    """Whether U (``I`` x ``R``) weighs too much beside the rows of an (``A``, ``I``, ``C``) tensor for
    :func:`ttm_inner` (the planner then leaves the TTM to BLAS), where R takes more than one block (U packed in each
    call): U's elements per element of a row of X, ``R / C``, above
    ``INNER_U_MAX_SHARE`` where the output is one row of tiles (``A`` = 1: U read once, beside X), or above a share
    of ``INNER_U_REREAD_LIMITS`` where U exceeds its bytes (``A`` > 1: each row of tiles reads all of U again).

    >>> inner_u_heavy(1, 500000, 16, 32, 8), inner_u_heavy(1, 500000, 16, 16, 8), inner_u_heavy(200, 200, 200, 32, 8)
    (True, False, False)
    >>> inner_u_heavy(2, 200000, 32, 32, 8), inner_u_heavy(2, 200000, 32, 16, 8)  # U of 51 / 26 MB, shares 1 / 0.5
    (True, False)
    """
    if len(_row_blocks(R)) < 2:
        return False  # (one block: U's own rows, not packed)
    share = R / C
    if A == 1:
        return share > INNER_U_MAX_SHARE[itemsize]
    return any(I * R * itemsize > u and share > most for u, most in INNER_U_REREAD_LIMITS[itemsize])


def gemv_beats_inner(A: int, C: int, R: int, itemsize: int) -> bool:
    """Whether BLAS's GEMV runs a tensor-times-vector (``R`` = 1) of an (``A``, I, ``C``) tensor faster than
    :func:`ttm_inner`: over a first mode (``A`` = 1) or rows of at least ``LONG_ROW_BYTES`` (the middle modes of
    4-way and longer tensors), where both stream X from memory once and their compute terms (the cost model's tie
    break) say nothing about how fast. Measured on Zen 5 (stop 96; the kernel's plan against the BLAS plan, two
    workers, interleaved medians of 9 in one process; BLAS's time / the kernel's): first modes float64 200^3,
    320x240x160, 300^3, 100x1000x100, 64^4, 60^4, 50^4, 30x40x50x60, 20^5, (1000, 1000, 8), (5000, 40, 40),
    (100000, 10, 16), (200000, 4, 20), (40000, 200) 0.49-0.93, float32 0.52-0.95 (and 1.02 on (100000, 10, 16));
    long rows (mode 1 of 64^4, 60^4, 50^4, 30x40x50x60, 20^5) float64 0.57-0.77, float32 0.53-0.79. Left to
    the kernel: shorter middle rows, float64 0.84-0.91 on 3-way tensors of 200-300 a side but 1.23-1.51 on
    (5000, 40, 40), (100000, 10, 16) and (1000, 1000, 8), float32 0.98-1.23 on most (0.50-0.61 on 30x40x50x60's
    and (200000, 4, 20)'s).

    >>> gemv_beats_inner(1, 40000, 1, 8), gemv_beats_inner(200, 200, 1, 8), gemv_beats_inner(64, 4096, 1, 4)
    (True, False, True)
    >>> gemv_beats_inner(1, 40000, 2, 8)
    False
    """
    return R == 1 and (A == 1 or C * itemsize >= LONG_ROW_BYTES)


@functools.lru_cache(maxsize=1)
def openblas_avx512() -> bool:
    """Whether numpy's OpenBLAS runs one of its AVX-512 cores (``OPENBLAS_AVX512_CORES``, read once from threadpoolctl;
    the core is fixed when OpenBLAS loads, ``OPENBLAS_CORETYPE`` pins another). Their GEMMs differ from the Haswell
    kernels' where the planner's constants were measured: small-matrix kernels run its batches of tiny GEMMs near the
    memory's rate (:func:`short_rows_to_blas`), and float32 GEMMs over fewer than 16 contracted elements run at a
    fraction of the Haswell kernels' speed (:func:`kernel_efficiency`'s short dot products, ``TR_SHORT_F32_MIN_I``)."""
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("internal_api") == "openblas" and "numpy" in str(info.get("filepath", "")):
                return str(info.get("architecture", "")).lower() in OPENBLAS_AVX512_CORES
    except Exception:  # pragma: no cover - threadpoolctl missing or another BLAS
        return False
    return False


def short_rows_to_blas(R: int, itemsize: int, C: int, I: int) -> bool:  # noqa: E741
    """Whether the planner gives a TTM that :func:`inner_short_style` would run to BLAS's batch of GEMMs instead:
    float32 rows of ``SHORT_ODD_MIN_C`` (5) to 7 elements over fewer than ``SHORT_ODD_MIN_I`` contracted rows, where
    numpy's OpenBLAS has small-matrix kernels (:func:`openblas_avx512`), unless one block of rows of U^T (``R`` at
    most ``SHORT_ACC // C``) covers at least ``SHORT_ODD_ONE_BLOCK_I`` rows. Each slab then takes one or two of the
    kernel's steps of 16 rows, and each block of rows of U^T loads and shuffles the slab again (gathering its
    columns at an odd stride), while OpenBLAS's small-matrix kernels stream the batch near the memory's rate.
    Measured on Zen 5 with OpenBLAS 0.3.31's SkylakeX kernels (stop 96; (A, I, C) of 10-12M elements, two workers,
    interleaved medians of 7; the short-rows kernel's time over BLAS's): rows of 5-7 over I = 16-20 at R = 2-16
    1.8-5.7x (BLAS 3.7-8.6 ms; the register-blocked kernel 8.5-32 ms, 6.8-7.0 at R = 16), over I = 5 at R = 3 / 8 /
    16 1.07 / 3.9 / 4.6x, over I = 50 at R = 4-16 1.28-4.75x but at R = 2 (one block) 0.69 / 0.75x; from I = 200
    the kernel keeps them (0.40-0.80x at R = 2-4, up to 1.9x at R = 16). With the Haswell kernels
    (``OPENBLAS_CORETYPE=Haswell``) a tiny GEMM of a batch costs 145-226 ns of wall time against 36-82 ns, and the
    kernel keeps these.

    >>> import tuckerkit.engine._smallgemm as sg
    >>> sg.short_rows_to_blas(8, 4, 5, 20) == sg.openblas_avx512(), sg.short_rows_to_blas(8, 4, 4, 20)
    (True, False)
    >>> sg.short_rows_to_blas(3, 4, 5, 50), sg.short_rows_to_blas(8, 4, 5, 200)
    (False, False)
    """
    if itemsize != 4 or C < SHORT_ODD_MIN_C or I >= SHORT_ODD_MIN_I or not openblas_avx512():
        return False
    return not (R <= short_rows(C) and I >= SHORT_ODD_ONE_BLOCK_I)


def tiny_slabs_to_blas(A: int, I: int, C: int, R: int, itemsize: int) -> bool:  # noqa: E741
    """Whether the planner gives a float64 TTM of many tiny slabs to BLAS's batch of GEMMs instead of
    :func:`ttm_inner`'s register-blocked kernel, where numpy's OpenBLAS runs an AVX-512 core
    (:func:`openblas_avx512`; its small-matrix kernels): at least ``TINY_SLABS_MIN_A`` slabs of at most
    ``TINY_SLABS_MAX_I`` rows shorter than ``TINY_SLABS_MAX_C`` elements (less than three 512-bit vectors), R of 3
    and more. Each slab is one of the kernel's tiles, its rows mostly a vector and a tail. Measured on Zen 5 with the
    SkylakeX kernels (stop 96; the planner's plans with the rule against without, two workers, interleaved medians of
    9; BLAS's time over the kernel's): (100000, 10, 10) at R = 3 / 5 / 8 0.73 / 0.80 / 0.76, (20000, 10, 10) 0.63 /
    0.61 / 0.53, (50000, 8, 8, 8)'s mode 2 0.77 / 0.82 / 0.89, 10^6's mode 4 0.66 / 0.61 / 0.56, 16^5's mode 3 at R =
    3-16 0.64-0.79, (40000, 12, 12) 0.85-0.87; over 20 rows (8000, 20, 20) and 20^5's mode 3 at R =
    3-16 0.82-1.10, (100000, 20, 5) 0.91-1.11, hence 16 rows.

    >>> import tuckerkit.engine._smallgemm as sg
    >>> sg.tiny_slabs_to_blas(100000, 10, 10, 5, 8) == sg.openblas_avx512(), sg.tiny_slabs_to_blas(200, 200, 200, 5, 8)
    (True, False)
    """
    return (itemsize == 8 and R >= 3 and A >= TINY_SLABS_MIN_A and I <= TINY_SLABS_MAX_I and C < TINY_SLABS_MAX_C
            and openblas_avx512())


def outer_u_cached_bytes(itemsize: int) -> int:
    """The most bytes of U that :func:`ttm_outer`'s tiles re-read from the caches: ``OUTER_U_CACHED_BYTES``, or for
    float64 this CPU's entry in ``OUTER_U_CACHED_F64_BYTES_BY_CPU``."""
    if itemsize == 8:
        return OUTER_U_CACHED_F64_BYTES_BY_CPU.get(cpu_name(), OUTER_U_CACHED_BYTES)
    return OUTER_U_CACHED_BYTES


def outer_reread_bytes(A: int, I: int, R: int, itemsize: int) -> int:  # noqa: E741
    """The bytes :func:`ttm_outer` reads beyond the tensor, the output and one pass over U: U read again for
    each further tile of rows of X where U exceeds :func:`outer_u_cached_bytes` (else 0).

    >>> outer_reread_bytes(100, 1000000, 2, 8), outer_reread_bytes(40000, 200, 10, 8)
    (384000000, 0)
    """
    u = I * R * itemsize
    if u <= outer_u_cached_bytes(itemsize):
        return 0
    rows = (vdot_rows(R) if outer_vdot_style(R, itemsize, I) else 64 // itemsize if outer_tr_style(R, itemsize)
            else _OUTER_ROWS if outer_gemm_style(R, itemsize) else 4)
    return (-(-A // rows) - 1) * u


def blas_efficiency(variant: str, dtype: str, R: int) -> float:
    """BLAS's rate on the same TTM (a GEMM with one extent R, or a batch of them), as a fraction of peak."""
    lo, hi = _BLAS_EFF[(variant, dtype)]
    return lo if R <= 16 else hi


class _Launch:
    """A plan's compiled TTM call with all that depends only on its operands' sizes and strides worked out at
    its first call (:func:`_launch`): the kernel's rows for the helpers, in which a call writes only the
    addresses of its tensor, its packed matrix, its output and its pieces' scratch, and the matrix's packing
    (``pack``: B to the array the kernel reads). Right after a large product (the code and data of the Python
    steps out of the caches) those steps had taken 0.6-0.8 ms a call (200^3's first mode at R = 32). The
    kernel, its arguments, tiles and pieces are :func:`ttm_inner`'s / :func:`ttm_outer`'s: the same bits."""

    __slots__ = ("cols", "dtype", "keep", "kernel", "n_tiles", "name", "offsets", "pack", "policy", "rows",
                 "scratch_n", "warm")

    def __init__(self, name: str, args: list, lohi: tuple[int, int], fresh: tuple[int, ...], at: tuple[int, ...],
                 flops: int, pack, policy: ExecutionPolicy | None) -> None:
        kernel = _KERNEL_OF[name]
        self.name, self.kernel, self.pack, self.policy = name, globals()[kernel], pack, policy
        self.n_tiles = int(args[lohi[1]])
        self.dtype = args[0].dtype
        # the arrays the rows point to that no call replaces (U's blocks, the strips): alive with the launch (and
        # not the first call's operands)
        self.keep = [a for k, a in enumerate(args) if isinstance(a, np.ndarray) and k not in (*at, *fresh)]
        self.rows, self.cols, self.offsets, self.scratch_n = self._cut(
            args, lohi, fresh, at, _tile_bounds(self.n_tiles, flops, policy))
        # the cut in two taken while the helpers are awake (warm_split), beside the one taken while they sleep
        self.warm = self._cut(args, lohi, fresh, at, _tile_bounds(self.n_tiles, flops, policy, True)) \
            if warm_split(flops, policy) and self.n_tiles >= 2 and self.rows.size else None

    def _cut(self, args: list, lohi: tuple[int, int], fresh: tuple[int, ...], at: tuple[int, ...],
             bounds: list[int]) -> tuple[np.ndarray, list[int], list[np.ndarray], int]:
        """The helpers' rows of one cut of the tiles (none without helpers), the columns a call writes, each
        piece's scratch offsets and the scratch's size."""
        n = len(bounds) - 1
        # each piece's scratch arrays 64-byte aligned, the pieces one after another in one block
        line = 64 // self.dtype.itemsize
        sizes = [-(-args[j].size // line) * line for j in fresh]
        per = sum(sizes)
        starts = np.cumsum([0, *sizes[:-1]], dtype=np.int64)
        offsets = [(np.arange(n, dtype=np.int64) * per + s0) * self.dtype.itemsize for s0 in starts]
        got = _handoff.kernel_rows(self.name, self.kernel, args, lohi, bounds, fresh)
        if got is None:  # (no rows: no helpers)
            return np.empty((0, 0), np.int64), [0] * (len(at) + len(fresh)), offsets, 0
        rows, cols, _ = got
        return rows, [cols[k] for k in (*at, *fresh)], offsets, n * per + line if fresh else 0

    def __call__(self, A: np.ndarray, B: np.ndarray, out: np.ndarray) -> bool:
        """The product of the operands (``A`` the tensor, ``B`` the matrix, with the strides the launch was
        made for) into ``out``; False, with nothing run, where the helpers are busy or the module's kernel is
        no longer the one the rows call (a test's stand-in)."""
        p = self.pack(B)  # (the packed matrix, or a tuple of it and the arrays at the positions after the output)
        return self.run((A, p, out) if not isinstance(p, tuple) else (A, p[0], out, *p[1:]))

    def run(self, arrays: tuple[np.ndarray, ...]) -> bool:
        """The kernel over its pieces with ``arrays`` at the positions ``at`` it was made with (their flat spans
        from their first elements); False, with nothing run, as for a call."""
        if globals()[_KERNEL_OF[self.name]] is not self.kernel:
            return False
        rows, cols, offsets, scratch_n = self.warm if self.warm is not None and _handoff.helpers_spinning(
            self.policy) else (self.rows, self.cols, self.offsets, self.scratch_n)
        rows = rows.copy()
        for c, a in zip(cols[:len(arrays)], arrays, strict=True):
            rows[:, c] = _handoff._address(a)
        if scratch_n:
            scratch = np.empty(scratch_n, self.dtype)
            base = _handoff._address(scratch)
            base += -base % 64
            for c, off in zip(cols[len(arrays):], offsets, strict=True):
                rows[:, c] = off + base
        return _handoff.run_rows(rows, self.policy)


_KERNEL_OF = {"inner": "_inner_kernel", "outer_dot": "_outer_dot_kernel", "outer_gemm": "_outer_gemm_kernel",
              "outer_tr": "_outer_tr_kernel", "outer_vdot": "_outer_vdot_kernel", "outer_tiny": "_outer_tiny_kernel",
              "inner_short": "_inner_short_kernel"}


def _launch(plan, B: np.ndarray, X: np.ndarray, U: np.ndarray, Y: np.ndarray, u_kz: bool) -> _Launch | None:
    """The plan's :class:`_Launch` for operands of these strides (the matrix ``B``; ``X``, ``U``, ``Y`` the 3-D
    (inner) or 2-D (outer) views the kernel takes), made at the first such call and kept on the plan's bound
    data; None where the kernel's own function must run: the views are not the kernel's (negative strides),
    the inner kernel's sum over i is cut (:func:`_reduction_cuts`), B is neither C- nor F-contiguous, or
    there are no helpers to run on."""
    if not (B.flags.c_contiguous or B.flags.f_contiguous):
        return None
    parts = _launch_parts(plan.compiled == CompiledKernel.TTM_INNER, X, U, Y, u_kz)
    if parts is None:
        return None
    launch = _Launch(*parts, plan.policy)
    return None if launch.rows.size == 0 else launch


def _launch_parts(inner: bool, X: np.ndarray, U: np.ndarray, Y: np.ndarray, u_kz: bool
                  ) -> tuple[str, list, tuple[int, int], tuple[int, ...], tuple[int, ...], int, Any] | None:
    """The kernel (its name in :data:`_KERNEL_OF`) and arguments of :func:`ttm_inner` (``inner``) or
    :func:`ttm_outer` on the views ``X``, ``U`` (I, R), ``Y`` over all its tiles: the positions of the tile range,
    of a piece's scratch and of the arrays a call replaces (the tensor, the packed matrix, the output, then any
    more of the matrix's), the flops its tiles are cut by, and the packing of the matrix ``B`` of a later call
    (``U`` is ``B``, or ``B.T`` without ``u_kz``; the layout of the first call's). None where the kernel's own
    function must run (:func:`_launch`)."""
    fx, fy = flat_span(X), flat_span(Y)
    if fx is None or fy is None:
        return None
    fx = read_only(fx)
    it, R = X.itemsize, U.shape[1]
    flops = 2 * X.size * R
    # (the packing functions hold sizes and indices, never the first call's arrays)
    u_of = (lambda b: b) if u_kz else (lambda b: b.T)  # U is B or B.T
    if inner and inner_short_style(R, it, X.shape[2]) and _short_slabs(X):
        dtype = X.dtype
        args = _short_args(X, _short_packed(U, dtype), Y, fx, fy)
        return ("inner_short", args, (13, 14), (), (0, 5, 8), _cut_flops("inner_short", flops, (X.size + Y.size) * it),
                lambda b: _short_packed(u_of(b), dtype))
    if inner:
        A3, I, C = X.shape  # noqa: E741
        if X.strides[2] != it or Y.strides[2] != it or len(_reduction_cuts(A3, I, C, R, it)) != 2:
            return None
        g = _InnerGeometry(A3, I, C, R, it, X.strides[1])
        if len(g.rows) == 1 and U.flags.c_contiguous and U.dtype == X.dtype:
            # one block: U's own rows are the packing (as :func:`_inner_tiles` takes them), no gathered copy
            dtype = X.dtype

            def pack(b):
                return np.ascontiguousarray(u_of(b), dtype).reshape(-1)
        else:
            gather = _u_gather(g, U)

            def pack(b):
                return gather(u_of(b))
        # (the first call's packed U as the argument: of its type, and no zero-filled stand-in of I x R)
        args = _inner_args(X, Y, g, fx, pack(U if u_kz else U.T), fy)
        return "inner", args, (21, 22), (19, 20), (0, 5, 7), flops, pack
    if X.shape[1] > 1 and X.strides[1] != it:
        return None
    name, args, lohi, fresh, at = _outer_args(X, np.ascontiguousarray(U.T), Y, fx, fy)
    if name == "outer_dot":
        def pack(b):
            return np.ascontiguousarray(u_of(b).T)
    elif name == "outer_tr":
        dtype = X.dtype

        def pack(b):
            return _tr_packed(u_of(b), dtype)
    elif name == "outer_vdot":
        dtype = X.dtype

        def pack(b):
            return _vdot_packed(u_of(b), dtype)
    elif name == "outer_tiny":
        dtype = X.dtype

        def pack(b):
            return np.ascontiguousarray(u_of(b), dtype).reshape(-1)
    else:
        shape, dtype = (X.shape[1], args[5].size // X.shape[1]), X.dtype
        Rm = int(args[6])  # (the columns in the blocks' vectors; those past them are dot products: _tail_dots)

        def pack(b):
            u = u_of(b)
            up = np.zeros(shape, dtype)
            up[:, :Rm] = u[:, :Rm]
            return up if Rm == R else (up, np.ascontiguousarray(u[:, Rm:].T, dtype))
        if Rm < R:
            at = (*at, 18)
    return name, args, lohi, fresh, at, _cut_flops(name, flops, (X.size + Y.size) * it), pack


class KeptTTM:
    """:func:`ttm_inner` (``inner``) or :func:`ttm_outer` on fixed views ``X`` and ``Y`` (as those take them),
    for matrices ``U`` (I, R) of the first call's dtype and layout given at each call, on this thread: the
    kernel's arguments (its tiling, scratch and the views' spans) worked out once, a call packs ``U`` and calls
    the kernel over all its tiles. The same kernel, arguments and tiles as those functions: the same bits. For a
    caller that runs one product on the same buffers many times (CP-ALS's small sweeps: ``_small_cp``); the
    views must stay alive and unchanged in shape while it is used. ``KeptTTM.make`` gives None where those
    functions would cut the product or take another route."""

    __slots__ = ("args", "at", "c_order", "kernel", "pack", "slots")

    def __init__(self, name: str, args: list, at: tuple[int, ...], pack, c_order: bool) -> None:
        self.kernel, self.args, self.at, self.pack = globals()[_KERNEL_OF[name]], list(args), at, pack
        self.c_order = c_order  # (the first call's layout of U, which the packing reads)
        # the packed matrix's positions, each holding an empty array of the first call's numba type (its rank,
        # read-only or not) between calls: no packed matrix is kept alive after its call (CP-ALS's small
        # sweeps' peak memory: 50^3 at rank 10 had taken 1.07x the input against 0.47x with one kept)
        self.slots = (at[1], *at[3:])
        for k in self.slots:
            old = self.args[k]
            self.args[k] = _empty_like_type(old)

    def __call__(self, U: np.ndarray) -> None:
        if not (U.flags.c_contiguous if self.c_order else U.flags.f_contiguous):
            U = np.ascontiguousarray(U) if self.c_order else np.asfortranarray(U)
        p = self.pack(U)
        args = self.args
        empties = [args[k] for k in self.slots]
        for k, a, e in zip(self.slots, p if isinstance(p, tuple) else (p,), empties, strict=True):
            a = a if a.ndim == e.ndim else a.reshape(-1)
            args[k] = read_only(a) if not e.flags.writeable else a if a.flags.writeable else a.copy()
        try:
            self.kernel(*args)
        finally:
            for k, e in zip(self.slots, empties, strict=True):
                args[k] = e

    @classmethod
    def make(cls, inner: bool, X: np.ndarray, U: np.ndarray, Y: np.ndarray) -> KeptTTM | None:
        if not (U.flags.c_contiguous or U.flags.f_contiguous):
            return None
        parts = _launch_parts(inner, X, U, Y, True)
        if parts is None:
            return None
        name, args, _, _, at, _, pack = parts  # (no policy: one piece, all the tiles, as those functions run it)
        return cls(name, args, at, pack, bool(U.flags.c_contiguous))


def _empty_like_type(a: np.ndarray) -> np.ndarray:
    """An empty array of ``a``'s numba type: its dtype, rank, C layout and writeability."""
    e = np.empty((0,) * a.ndim, a.dtype)
    return e if a.flags.writeable else read_only(e)


def _view(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    v = x.reshape(shape)
    if v.size > 1 and not np.shares_memory(v, x):  # pragma: no cover - the planner checked the layout
        raise RuntimeError(f"internal error: the small-rank kernel's view of shape {shape} needed a copy")
    return v


def kept_launch(plan, A: np.ndarray, B: np.ndarray, out: np.ndarray) -> _Launch | None:
    """The :class:`_Launch` that :func:`run_small_rank` keeps on ``plan`` for operands of these strides (made at
    its first such call), or None: a caller that runs the plan on such operands again may call it directly, as
    ``launch(A, B, out)`` (False from it: run the plan). None for a plan whose matrix comes first (the launch
    takes the operands the other way round)."""
    lay, bound = plan._sr, plan._bound
    if lay is None or bound is None or plan._bd is not None or lay.swap:
        return None
    return bound.launch.get((A.strides, B.strides, out.strides))


def run_small_rank(plan, A: np.ndarray, B: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Run a plan whose ``compiled`` kernel is a small-rank TTM or the batched dot product (operands checked
    against the plan)."""
    if plan._bd is not None:
        from tuckerkit.engine._batched_dot import run_batched_dot

        return run_batched_dot(plan, A, B, out)
    lay = plan._sr
    if lay.swap:  # the matrix came first
        A, B = B, A
    # a launch kept on the plan's bound data for these strides (none for unaligned operands: numba's kernel for
    # those, by its dispatcher)
    launches = plan._bound.launch if plan._bound is not None and A.flags.aligned and B.flags.aligned \
        and out.flags.aligned else None
    key = (A.strides, B.strides, out.strides)
    if launches is not None:
        launch = launches.get(key)
        if launch is not None and launch(A, B, out):
            return out
    X = A.transpose(lay.x_perm)
    no = lay.n_outer
    I = X.shape[no]  # noqa: E741
    a_ext = math.prod(X.shape[:no])
    b_ext = math.prod(X.shape[no + 1:])
    U = B if lay.u_kz else B.T
    R = U.shape[1]
    Y = out.transpose(lay.out_perm)
    inner = plan.compiled == CompiledKernel.TTM_INNER
    if inner:
        Xv, Yv = _view(X, (a_ext, I, b_ext)), _view(Y, (a_ext, R, b_ext))
    else:
        Xv, Yv = _view(X, (a_ext, I)), _view(Y, (a_ext, R)).T
    if launches is not None and key not in launches:  # (the first call with these strides)
        launch = launches[key] = _launch(plan, B, Xv, U, Yv, lay.u_kz)
        if launch is not None and launch(A, B, out):
            return out
    if inner:
        ttm_inner(Xv, np.ascontiguousarray(U), Yv, plan.policy)
    else:
        ttm_outer(Xv, np.ascontiguousarray(U.T), Yv, plan.policy)
    return out


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
