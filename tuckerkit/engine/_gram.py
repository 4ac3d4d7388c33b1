"""The Gram matrix of an unfolding, ``X_(n) X_(n)^T``, without forming the unfolding."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit._validation import check_mode
from tuckerkit.backend import array_namespace
from tuckerkit.backend._device import device_op
from tuckerkit.engine._buffers import work_empty, work_zeros
from tuckerkit.engine._contract import _elem_strides, _view, cpu_matmul, read_only
from tuckerkit.engine._gpu import gpu_matmul
from tuckerkit.engine._policy import (
    MAX_PIECES,
    MIN_PARALLEL_FLOPS,
    PIN_FLOPS,
    SYRK_PIN_MADDS,
    ExecutionPolicy,
    blas_pinned,
    parallel_for,
    resolve_policy,
    split_points,
)

#: the partial Grams of a split sum may hold this many bytes in all (else fewer pieces)
_PARTIALS_BYTES = 64 << 20
#: columns of one packed SYRK of short slabs (128 to 512 measured within the noise of a shared machine)
_PACK_COLS = 256
#: ... or this many elements a pack where I_n is small (a pack of 256 columns of 16 rows is one SYRK of about a
#: microsecond against ~10 us of Python a pack: (10, 10, 10, 10, 16, 10)'s mode 4, 10^4 slabs, 400 packs)
_PACK_ELEMS = 256 * 256
#: ... for I_n up to this (measured, two workers, medians of 15, 256 columns -> _PACK_ELEMS: (10, 10, 10, 10, 16, 10)
#: mode 4 12.2-12.9 -> 5.6-6.0 ms, (2000, 50, 10) mode 1 4.4-4.5 -> 3.2 ms; but (200, 200, 10) mode 1 5.1-5.4 ->
#: 6.1-6.2 ms with 327 columns, so larger I_n keep _PACK_COLS)
_SMALL_PACK_IN = 64
_SERIAL = ExecutionPolicy(workers=1)


@dataclass(frozen=True)
class GramPlan:
    """How :func:`gram` evaluates ``X_(n) X_(n)^T``, bound to the tensor it was made for.

    Attributes
    ----------
    mode : int
    outer : tuple of int
        Modes looped over (larger strides than ``mode``).
    inner : tuple of int
        Modes reduced by each SYRK/GEMM.
    route : {"syrk", "slabs", "blocks"}
        ``"syrk"``: one product (cut into row blocks of the lower triangle when large); ``"slabs"``: a sum
        over the outer index, cut into a fixed number of pieces by the sizes, partial sums added in order;
        ``"blocks"``: the modes cannot be flattened without a copy: contiguous copies of slab ranges (at most
        ``GRAM_BLOCK_BYTES`` each), each reduced by the routes above, added in order.
    shape, strides : tuple of int
        The tensor the plan was made for.
    dtype : str
    policy : ExecutionPolicy
        The workers the pieces run on (the result does not depend on them).

    A plan is callable: ``plan(X)`` on a tensor of the same shape, strides and dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import gram_plan
    >>> gram_plan(np.ones((4, 5, 6)), 0).route, gram_plan(np.ones((4, 5, 6)), 1).route
    ('syrk', 'slabs')
    """

    mode: int
    outer: tuple[int, ...]
    inner: tuple[int, ...]
    route: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str = ""
    policy: ExecutionPolicy = _SERIAL

    def explain(self) -> str:
        return (f"gram mode {self.mode}: {self.route}, loop over modes {list(self.outer)}, "
                f"reduce modes {list(self.inner)}")

    def __call__(self, X: Any) -> Any:
        """``X_(n) X_(n)^T`` for a tensor of exactly the shape, strides and dtype of the plan."""
        return dense_gram(X, self.mode, self, self.policy)

    def check(self, X: Any, mode: int) -> None:
        got = (mode, tuple(X.shape), _elem_strides(X), str(X.dtype))
        if got != (self.mode, self.shape, self.strides, self.dtype or got[3]):
            raise ValueError(
                f"plan was made for mode {self.mode}, shape {self.shape}, strides {self.strides}, dtype "
                f"{self.dtype}; received mode {got[0]}, shape {got[1]}, strides {got[2]}, dtype {got[3]}"
            )


#: plans made, by (array type, shape, element strides, dtype, mode, policy): a plan depends on nothing else, and
#: a small tensor's decomposition asks for the same few several times a call (about 50 us each to make)
_PLANS: dict[tuple, GramPlan] = {}
_PLANS_MAX = 256


def build_gram_plan(X: Any, n: int, policy: ExecutionPolicy) -> GramPlan:
    st = _elem_strides(X)
    key = (type(X), tuple(X.shape), st, X.dtype, n, policy)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _make_gram_plan(X, n, policy, st)
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _make_gram_plan(X: Any, n: int, policy: ExecutionPolicy, st: tuple[int, ...]) -> GramPlan:
    others = [m for m in range(X.ndim) if m != n and X.shape[m] != 1]
    outer = tuple(sorted((m for m in others if st[m] > st[n] or X.shape[n] == 1), key=lambda m: -st[m]))
    inner = tuple(sorted((m for m in others if m not in outer), key=lambda m: -st[m]))
    try:
        _slab_view(X, n, outer, inner)
        n_outer = math.prod(X.shape[m] for m in outer)
        R = math.prod(X.shape[m] for m in inner)
        route = "syrk" if (R == 1 or n_outer == 1) else "slabs"
    except (ValueError, TypeError, RuntimeError):
        route = "blocks"
    return GramPlan(n, outer, inner, route, tuple(X.shape), st, str(X.dtype), policy)


#: the bytes of one block of :func:`blocks_gram` (a contiguous copy of a slab range of a view whose modes cannot
#: be flattened): its only extra memory besides the block's own Gram
GRAM_BLOCK_BYTES = 16 << 20


def blocks_gram(X: Any, n: int, policy: ExecutionPolicy, dtype: Any = None, limit: int = GRAM_BLOCK_BYTES) -> Any:
    """``X_(n) X_(n)^T`` (unconjugated; the caller makes a complex one Hermitian) by slab ranges of the outermost
    other mode, each copied contiguous (in ``dtype``, default X's; at most ``limit`` bytes of it) and reduced by
    the SYRK or slab route, their Grams added in order (a cut by the sizes: the same bits for any workers). The
    route ``"blocks"`` of a view whose modes cannot be flattened; a single-precision rank choice's Gram in
    double precision (``tuckerkit.decomposition._tucker.DOUBLE_GRAM_BUDGET``).

    Before, such a view took the engine's remedy for the contraction (a copy of the whole tensor, then a GEMV
    batched over the mode): one float32 dot product of all P entries per element, rounded along the way, so a
    (3, 100, 20, 2, 128) window of a larger array had its mode-3 Gram 4.6e-4 off (its C copy's: 6.8e-7) and
    ST-HOSVD reported a fit 1.3e-3 from the model's."""
    xp = array_namespace(X)
    dt = np.dtype(X.dtype if dtype is None else dtype)
    G = None
    for idx in slab_ranges(X, n, dt.itemsize, limit):
        part = _dense_gram(xp.ascontiguousarray(X[idx], dtype=dt), n, None, policy)
        G = part if G is None else G + part
    return G if G is not None else xp.zeros((X.shape[n], X.shape[n]), dtype=dt)


def slab_ranges(X: Any, skip: int | None, itemsize: int, limit: int) -> Iterator[tuple[slice, ...]]:
    """Index tuples of consecutive slab ranges of ``X``'s outermost mode in memory (other than ``skip``), each of
    at most ``limit`` bytes at ``itemsize`` bytes an element (one slab where a slab alone is larger); a fixed
    cut by the sizes and strides. Nothing for an empty mode.

    >>> import numpy as np
    >>> [r[0] for r in slab_ranges(np.ones((5, 4)), 1, 8, 64)]
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    others = [k for k in range(X.ndim) if k != skip]
    if not others:
        yield tuple(slice(None) for _ in range(X.ndim))
        return
    m = max(others, key=lambda k: (abs(X.strides[k]), -k))
    step = max(1, limit // (max(1, X.size // max(X.shape[m], 1)) * itemsize))
    for a in range(0, X.shape[m], step):
        idx = [slice(None)] * X.ndim
        idx[m] = slice(a, min(a + step, X.shape[m]))
        yield tuple(idx)


def _slab_view(X: Any, n: int, outer, inner) -> Any:
    """``X`` as (outer, I_n, inner) without a copy (raises when the modes cannot be flattened)."""
    n_outer = math.prod(X.shape[m] for m in outer)
    R = math.prod(X.shape[m] for m in inner)
    ones = [m for m in range(X.ndim) if m != n and X.shape[m] == 1]
    return _view(X.transpose([*outer, n, *inner, *ones]), (n_outer, X.shape[n], R))


#: a tensor of at most this many bytes whose Gram takes fewer flops than this is packed whole into one
#: matrix and multiplied by one SYRK (the slab route's pieces and partial Grams cost more than they save);
#: the copy is small in absolute terms (HOOI's projections: 80-240 kB for 100^3-300^3 at rank 10), never a
#: large tensor's
_ONE_PACK_BYTES = 256 << 10
_ONE_PACK_FLOPS = 4 * MIN_PARALLEL_FLOPS

#: flops of one column piece of a long SYRK (its Gram computed alone, the partial Grams added in order)
_SYRK_PIECE_FLOPS = 400_000_000


def _column_pieces(In: int, K: int, itemsize: int) -> int:
    """Column pieces of a long (I_n, K) SYRK (:func:`_syrk_pieces`, :func:`start_gram`): about
    ``_SYRK_PIECE_FLOPS`` each, their partial Grams at most an eighth of the matrix's bytes and 64 MiB."""
    most = min(_PARTIALS_BYTES, In * K * itemsize // 8) // max(In * In * itemsize, 1)
    return min(16, most, max(2, In * In * K // _SYRK_PIECE_FLOPS), K)


def _syrk_pieces(V: Any, G: Any, conj, policy: ExecutionPolicy) -> None:
    """``G = V V^H`` for one large (I_n, K) view.

    Long rows (the usual case: the first mode's Gram of a C-ordered tensor, 200 x 40000) are cut into column
    pieces of about ``_SYRK_PIECE_FLOPS`` each, one SYRK per piece into its own partial Gram, the partials added
    in piece order: the tensor is read once. The cut depends on the sizes only (the same bits for any number
    of workers). 200^3's first mode: 25-35 ms on two workers, against 78-98 ms for the row blocks below (each
    block read up to all of ``V`` again) and 49 ms for OpenBLAS's own two-thread SYRK. The partials are at most
    an eighth of ``V``'s bytes and 64 MiB; when that leaves fewer than two pieces, the lower triangle is cut
    into row blocks of equal work (a fixed cut, each block written by one product), then mirrored. A float32
    ``V`` whose transpose has rows of unit stride takes the same column pieces on the tile kernel
    (:func:`_start_gram_tiles`) where it applies."""
    In, K = V.shape
    flops = In * In * K
    n_cols = _column_pieces(In, K, V.itemsize)
    if n_cols >= 2:
        cuts_k = [K * i // n_cols for i in range(n_cols + 1)]
        if G.dtype == np.float32 and V.strides[0] == V.itemsize and _tiles_apply(In):
            # (float32 rows of V^T with a unit stride: the tile kernel, float32 sums over short windows, the
            # windows and partials added in float64, one rounding at the end)
            G[...] = _start_gram_tiles(V.T, cuts_k, _TILE_WINDOW, policy)[0]
            return
        parts = work_empty((n_cols, In, In), G.dtype)

        def col_work(i: int, _: Any) -> None:
            Vp = V[:, cuts_k[i]:cuts_k[i + 1]]
            np.matmul(Vp, conj(Vp).T, out=parts[i])

        parallel_for(col_work, n_cols, policy)
        G[...] = parts[0]
        for i in range(1, n_cols):  # in piece order: the same bits whoever computed each piece
            G += parts[i]
        return
    pieces = max(1, min(16, flops // (4 * MIN_PARALLEL_FLOPS)))
    # rows [r_i, r_{i+1}) cost about r_{i+1}^2 - r_i^2: equal work cuts at sqrt(i / pieces)
    cuts = sorted({0, In, *(round(In * math.sqrt(i / pieces)) for i in range(1, pieces))})

    def work(i: int, _: Any) -> None:
        lo, hi = cuts[i], cuts[i + 1]
        np.matmul(V[lo:hi], conj(V[:hi]).T, out=G[lo:hi, :hi])

    parallel_for(work, len(cuts) - 1, policy)
    for lo, hi in itertools.pairwise(cuts):  # the upper triangle from the blocks below, the diagonal blocks'
        G[lo:hi, hi:] = conj(G[hi:, lo:hi]).T  # included (a GEMM block is not exactly symmetric)
        iu = _triu(hi - lo)
        blk = G[lo:hi, lo:hi]
        blk[iu] = conj(blk.T[iu])


#: bytes of one float32 block of :func:`start_gram` (I_n rows of the block's columns), about one core's L2: each
#: SSYRK gets a long reduction. 200^3, two workers, interleaved medians of 9, two rounds, 512 KiB / 1 / 2 / 4 MiB:
#: the last mode 18.7-19.6 / 18.0-18.7 / 16.5-17.4 / 15.7-20.6 ms, the first mode 27.1-28.1 / 23.2-25.4 /
#: 22.1-24.1 / 21.2-24.3 ms (the float64 Gram: 23.1-29.3 and 24.2-30.7 ms in the same rounds)
_START_BLOCK_BYTES = 2 << 20


def _start_buffer_bytes(nbytes: int) -> int:
    """The most bytes one worker's float32 buffer of :func:`start_gram` holds: a sixteenth of the tensor (two
    2 MiB buffers were 2.07x a 64^3 tensor, whose default CP-ALS then took 2.37x the input in extra memory);
    tensors of 32 MiB and more keep the 2 MiB blocks. By the size alone, never the workers: the blocks, and so
    the bits, are the same for any number of them."""
    return nbytes // 16


def start_gram(X: Any, n: int, policy: ExecutionPolicy) -> tuple[np.ndarray, np.ndarray] | None:
    """``X_(n) X_(n)^T`` of a float64 array from float32 products, for a start that iterations refine, and the
    exact float64 squared norms of the rows of ``X_(n)`` (the diagonal, hence ``||X||^2``); None where it does
    not apply (not a float64 numpy array, the mode's unfolding neither one matrix view with a unit stride nor
    slabs with unit-stride rows, or a Gram of fewer than ``4 * MIN_PARALLEL_FLOPS`` multiply-adds).

    One matrix (the first or the last mode of a C-ordered tensor): the unfolding is read once, in the column pieces of
    :func:`_syrk_pieces` (the same fixed cut), each piece in blocks of ``_START_BLOCK_BYTES``: a block is rounded to
    float32 (its rows' squares summed in float64 on the way) and multiplied by one SSYRK; each block's product is added
    to its piece's float64 partial, the partials in piece order (the same bits for any number of workers). SSYRK runs at
    about twice DSYRK's flops: 200^3's last mode, two workers, 16.5-17.4 ms against 23-29 ms for the float64 Gram; the
    first mode 22-24 against 24-31 ms. Where the rows of unit stride are the unfolding's transpose's (the last mode) on
    a CPU with AVX2 and FMA (:func:`_start_tiles_apply`), the pieces go to the tile kernel instead
    (:func:`_start_gram_tiles`: float32 sums over ``_TILE_WINDOW`` columns, 0.76-0.83x the time of the SSYRK route on
    200^3). Slabs (a middle mode: ``X`` as (outer, I_n, inner) with unit-stride rows): a fixed cut of the outer index
    into pieces, each piece's slabs rounded to float32 side by side into packs of about ``_START_BLOCK_BYTES``, one
    SSYRK per pack (:func:`_start_gram_slabs`). The entries carry float32's rounding (relative error about 1e-7 on
    200^3): the caller's fit must not come from its eigenvalues. A value beyond float32's range makes the
    result non-finite (the caller then takes the exact Gram)."""
    if not isinstance(X, np.ndarray) or X.dtype != np.float64 or X.ndim < 2:
        return None
    if X.shape[n] * X.size < 4 * MIN_PARALLEL_FLOPS:  # (either route's I_n^2 K below: decided before planning)
        return None
    plan = build_gram_plan(X, n, policy)
    if plan.route == "slabs":
        return _start_gram_slabs(X, plan, policy)
    if plan.route != "syrk":
        return None
    Xv = _slab_view(X, n, list(plan.outer), list(plan.inner))
    V = Xv[:, :, 0].T if Xv.shape[2] == 1 else Xv[0]
    In, K = V.shape
    if In * In * K < 4 * MIN_PARALLEL_FLOPS:
        return None
    it = V.itemsize
    if V.strides[1] == it:
        rows = True  # (I_n, K) rows of unit stride: X's first mode
    elif V.strides[0] == it:
        rows = False  # V^T rows of unit stride: X's last mode
    else:
        return None
    n_cols = max(1, _column_pieces(In, K, it))  # (the same cut as the float64 Gram's)
    cuts = [K * i // n_cols for i in range(n_cols + 1)]
    # (no wider than the widest piece: a fixed 2 MiB buffer a worker was the whole of a 64^3 tensor, a default
    # CP-ALS's extra memory 2.37x the input; the same blocks, so the same bits)
    kb = max(1, min(max(16, _START_BLOCK_BYTES // (4 * In)), max(b - a for a, b in itertools.pairwise(cuts)),
                    max(16, _start_buffer_bytes(V.size * it) // (4 * In))))
    if not rows and _start_tiles_apply(In):
        return _start_gram_tiles(V.T, cuts, _TILE_WINDOW, policy)
    from tuckerkit.engine._gram_kernels import to_single_cols, to_single_rows  # (numba: loaded on first use)

    Vr = read_only(V)  # (one compiled specialization for arrays in memory and mapped from files)

    def piece(i: int, buf: Any, tmp: Any, part: Any, ss: Any) -> None:
        for a in range(cuts[i], cuts[i + 1], kb):
            b = min(a + kb, cuts[i + 1])
            if rows:
                blk = buf[:In * (b - a)].reshape(In, b - a)
                to_single_rows(Vr, a, b, blk, ss)
                np.matmul(blk, blk.T, out=tmp)  # numpy's SSYRK (exactly symmetric)
            else:
                blk = buf[:In * (b - a)].reshape(b - a, In)
                to_single_cols(Vr.T, a, b, blk, ss)
                np.matmul(blk.T, blk, out=tmp)
            part += tmp

    return _pieces_in_order(piece, n_cols, In, In * kb, policy)


#: rows of one run of :func:`_start_gram_tiles` (rounded to float32 into a buffer that stays in L2: 128 x 208
#: float32 is 104 kB for I_n = 200; 64-256 measured within 10 % of each other)
_TILE_RUN = 128
#: rows of one float32 sum of :func:`_start_gram_tiles` (one chain of fused multiply-adds per entry; the sums
#: added in float64): short, so that the float32 rounding stays that of a short sum (the entry of a window adds
#: I_n^2 / 2 float64 additions to its 256 I_n^2 / 2 multiply-adds)
_TILE_WINDOW = 256


#: the largest I_n of :func:`_start_gram_tiles`: each run of rows updates all of the float32 lower triangle, which
#: stops fitting in L2 above this (two workers, interleaved, against SSYRK's route: I_n = 256 0.74x the time,
#: 384 0.89x, 512 1.00x, 768 1.10x, 1024 1.45x)
_TILE_MAX_ORDER = 384


def _tiles_apply(In: int) -> bool:
    """Whether a float32 Gram of order ``In`` takes the tile kernel (:func:`_start_gram_tiles`) instead of numpy's
    SSYRK: CPUs with AVX2 and FMA whose vectors are 256 bits wide, where it was measured, and I_n up to
    ``_TILE_MAX_ORDER``. (With AVX-512, float32 data going straight to OpenBLAS's SkylakeX SSYRK, the 12 x 32
    tiles took a float32 HOOI default call on 200^3 to 1.05x its time: not there. A float64 tensor's start
    Gram: :func:`_start_tiles_apply`.)"""
    from tuckerkit.engine._simd import simd_supported, wide_vectors

    return In <= _TILE_MAX_ORDER and simd_supported() and not wide_vectors()


def _start_tiles_apply(In: int) -> bool:
    """Whether :func:`start_gram` (a float64 tensor's Gram from float32 products) takes the tile kernel: I_n up
    to ``_TILE_MAX_ORDER`` on CPUs with AVX2 and FMA, whatever their vector width. Where vectors are wide the
    kernel's tiles are 12 x 32 (two 512-bit vectors a row, 24 accumulators: :mod:`._gram_kernels`), its next
    run of rows prefetched across a run's tiles: 200^3's last mode 10.5 against 12.5-12.8 ms for SSYRK's route
    (two workers, interleaved medians of 12; the 6 x 16 tiles at half the vector width had tied with it,
    12.9-13.3 ms); whole default ``tk.hooi(X, 10)`` calls (interleaved medians of 11) 0.89x the time on 200^3,
    0.91x on 300^3 and 320x240x160, 0.96x on 100^3."""
    from tuckerkit.engine._simd import simd_supported

    return In <= _TILE_MAX_ORDER and simd_supported()


def _start_gram_tiles(W: np.ndarray, cuts: list[int], window: int,
                      policy: ExecutionPolicy) -> tuple[np.ndarray, np.ndarray]:
    """``W^T W`` of ``W`` (K, I_n) with rows of unit stride (the unfolding's transpose of a C-ordered tensor's
    last mode), float32 or float64 (rounded to float32), on the tile kernel
    (:func:`~tuckerkit.engine._gram_kernels.gram_single`), and the float64 squared norms of its columns: the
    rows cut at ``cuts`` (a fixed cut by the sizes) into pieces, each piece's rows summed in float32 over
    windows of ``window`` rows from its start, the windows' sums added to the piece's float64 partial, the
    partials in piece order (the same bits for any number of workers); the lower triangle, then mirrored
    (exactly symmetric). Used by :func:`start_gram` (float64 data, a start's Gram) and by :func:`_syrk_pieces`
    (a float32 Gram, rounded to float32 once at the end: 200^3's error against the float64 Gram of the same
    data 5.9e-8 of its largest entry, SSYRK's pieces 1.3e-7).

    Why: numpy's SSYRK takes a block already rounded to float32 (one pass over the block to round it, another in BLAS to
    pack it) and runs at about half of sgemm's flop rate on these shapes (I_n x I_n from a long side). Here each run of
    ``_TILE_RUN`` rows is rounded into a buffer that stays in L2 and multiplied there by 6 x 16 register tiles of the
    lower triangle (12 x 32 where vectors are wide; the small-rank TTM's microkernel, one chain of fused multiply-adds
    per entry). Measured on the 2-core AVX2 machine: one thread on 10000 x 200 float32 rows already in L2, the tiles
    68-70 GFlop/s of the Gram's I_n^2 K against SSYRK's 37-49; 200^3's last mode on two workers (31 interleaved pairs,
    median ratios) 0.76-0.78x the time of SSYRK's route from float64 and 0.79x from float32, on one worker 0.85-1.01x
    and 0.85-0.99x (this VM's times moved 2x between rounds); whole default ``tk.hooi(X, 10)`` calls, float64
    (interleaved medians of 11-21): 0.82-0.88x the time on 200^3, 0.80-0.86x on 300^3, 0.88-0.96x on 320x240x160,
    0.94-1.01x on 100^3; float32 calls 0.96x on 200^3 (21 pairs; their first Gram is a float32 Gram) and 0.84x on 300^3.
    Not taken for the first mode or a middle one (the rows of the unfolding itself of unit stride): rounding them into
    the buffer's columns is a transpose, and there it measured 0.92-1.36x SSYRK's route (one thread; 1.05-1.28x on
    60^4's middle modes, 1.28-1.36x on 200^3's)."""
    from tuckerkit.engine._gram_kernels import gram_single, tile_columns  # (numba: loaded on first use)

    In = W.shape[1]
    Ip = -(-In // tile_columns()) * tile_columns()
    Wr = read_only(W)  # (one compiled specialization for arrays in memory and mapped from files)
    run = _TILE_RUN

    # (W's elements as one block, for the kernel's prefetch of its next rows; empty where W is not C-ordered)
    flat = Wr.reshape(-1) if Wr.flags.c_contiguous else Wr[:0, 0]

    def piece(i: int, B: Any, A: Any, part: Any, ss: Any) -> None:
        gram_single(Wr, cuts[i], cuts[i + 1], window, run, B, A, part, ss, flat)

    G, s = _pieces_in_order(piece, len(cuts) - 1, In, 0, policy,
                            lambda: (work_zeros((run * Ip,), np.float32), work_empty((Ip * Ip,), np.float32)))
    iu = _triu(In)
    G[iu] = G.T[iu]
    return G, s


def _pieces_in_order(piece: Any, n_pieces: int, In: int, buf_elems: int, policy: ExecutionPolicy,
                     make_state: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Run :func:`start_gram`'s pieces, ``piece(i, *state, partial Gram, partial squares)`` (each thread's state
    from ``make_state()``; by default a float32 buffer of ``buf_elems`` and an I_n x I_n float32 product), then
    add the partials in piece order (the same bits for any number of workers)."""
    parts = work_zeros((n_pieces, In, In), np.float64)
    ssq = np.zeros((n_pieces, In))

    def work(i: int, st: Any) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # (per thread; an overflow: the caller's exact Gram)
            piece(i, *st, parts[i], ssq[i])

    make = make_state or (lambda: (work_empty((buf_elems,), np.float32), work_empty((In, In), np.float32)))
    # every thread's state made before the pieces start, one for each thread that may take a piece: which
    # threads take one depends on the timing (under load the caller may take them all), and states made only
    # when a thread starts made a call's allocations depend on it, hence its page faults where the pool had
    # no idle block of the size yet (the third default HOOI on 200^3 in a fresh process: 160-360 faults in
    # one run of 10-14 under load, none otherwise)
    states = [make() for _ in range(max(1, min(policy.workers, n_pieces)))]
    with blas_pinned():
        parallel_for(work, n_pieces, policy, make_state=states.pop)
    G, s = parts[0], ssq[0]
    for i in range(1, n_pieces):
        G += parts[i]
        s += ssq[i]
    return G, s


def _start_gram_slabs(X: np.ndarray, plan: GramPlan, policy: ExecutionPolicy) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`start_gram` of a mode whose unfolding is a stack of slabs ``Xv[a]`` (I_n, R) with unit-stride rows
    (a middle mode of a C-ordered tensor): ``sum_a Xv[a] Xv[a]^T``. The outer index is cut into pieces by the
    sizes alone (at most ``MAX_PIECES``, partials within ``_PARTIALS_BYTES``); a piece rounds its slabs to
    float32 side by side into packs of about ``_START_BLOCK_BYTES`` ((I_n, k R): the rows' squares summed in
    float64 on the way, slab by slab), one SSYRK per pack added to the piece's float64 partial, the partials
    added in piece order: the same bits for any number of workers. 200^3's middle mode, two workers,
    interleaved medians of 9: 19.9-24.6 against 27.9-31.9 ms for the float64 Gram; 60^4's mode 2 26.2-26.5
    against 38.6-41.6 ms, its mode 1 (two slabs a pack of 60 x 3600) 23.5-24.6 against 20.0-24.6 ms."""
    Xv = _slab_view(X, plan.mode, list(plan.outer), list(plan.inner))
    n_outer, In, R = Xv.shape
    it = X.itemsize
    if In * In * R * n_outer < 4 * MIN_PARALLEL_FLOPS or (Xv.strides[2] != it and R > 1):
        return None
    k = max(1, min(n_outer, _START_BLOCK_BYTES // (4 * In * R)))  # slabs per pack
    most = max(1, _PARTIALS_BYTES // (In * In * it))
    n_pieces = max(1, min(MAX_PIECES, most, n_outer, max(2, In * In * R * n_outer // _SYRK_PIECE_FLOPS)))
    bounds = [n_outer * i // n_pieces for i in range(n_pieces + 1)]
    k = min(k, max(b - a for a, b in itertools.pairwise(bounds)),  # (a pack no wider than a piece: as above)
            max(1, _start_buffer_bytes(X.size * it) // (4 * In * R)))
    from tuckerkit.engine._gram_kernels import to_single_slabs  # (numba: loaded on first use)

    Xr = read_only(Xv)

    def piece(i: int, buf: Any, tmp: Any, part: Any, ss: Any) -> None:
        for a in range(bounds[i], bounds[i + 1], k):
            b = min(a + k, bounds[i + 1])
            blk = buf[:In * (b - a) * R].reshape(In, (b - a) * R)
            to_single_slabs(Xr, a, b, blk, ss)
            np.matmul(blk, blk.T, out=tmp)  # numpy's SSYRK (exactly symmetric)
            part += tmp

    return _pieces_in_order(piece, n_pieces, In, In * k * R, policy)


#: a complex Gram conjugates this many elements of the tensor at a time (numpy's matmul has no conjugate flag)
_CONJ_ELEMS = 1 << 20


def _herk_columns(xp, V: Any, G: Any, policy: ExecutionPolicy) -> None:
    """``G = V V^H`` for a complex (I_n, K) view, summed over fixed column blocks (the conjugate of one block
    at a time, never of the whole tensor), each block one ZGEMM/CGEMM, the partial products added in order."""
    In, K = V.shape
    step = max(1, _CONJ_ELEMS // max(In, 1))
    tmp = xp.empty_like(G)
    for k0 in range(0, K, step):
        blk = V[:, k0:k0 + step]
        if xp is np:
            cpu_matmul(blk, blk.conj().T, tmp, In * In * blk.shape[1], policy)
        else:
            gpu_matmul(xp, blk, blk.conj().T, tmp)
        G += tmp


def _hermitian(G: Any) -> Any:
    """A Gram made exactly symmetric (Hermitian where complex): the strict upper triangle from the lower one, a
    complex diagonal real. ZGEMM does not mirror as SYRK does, and numpy runs a real ``V @ V.T`` as SYRK only
    where BLAS takes the view: a strided, reversed or broadcast one went to GEMM (a 7 x 40 step-2 view's Gram
    8.9e-16 off symmetric, a reversed float32 one 1.9e-6). Where SYRK mirrored, nothing changes."""
    xp = array_namespace(G)
    iu = xp.triu_indices(G.shape[0], 1)
    G[iu] = xp.conj(G.T[iu]) if G.dtype.kind == "c" else G.T[iu]
    if G.dtype.kind == "c":
        d = xp.arange(G.shape[0])
        G[d, d] = G[d, d].real
    return G


def dense_gram(X: Any, n: int, plan: GramPlan | None, policy: ExecutionPolicy) -> Any:
    """``X_(n) X_(n)^T`` of a dense array (arguments validated), exactly symmetric; ``X_(n) X_(n)^H`` (exactly
    Hermitian) of a complex one."""
    return _hermitian(_dense_gram(X, n, plan, policy))


def _dense_gram(X: Any, n: int, plan: GramPlan | None, policy: ExecutionPolicy) -> Any:
    xp = array_namespace(X)
    if plan is None:
        plan = build_gram_plan(X, n, policy)
    else:
        if not isinstance(plan, GramPlan):
            raise TypeError(f"plan must be a GramPlan from gram_plan; received {type(plan).__name__}")
        plan.check(X, n)
    In = X.shape[n]
    if plan.route == "blocks":
        return blocks_gram(X, n, plan.policy)
    outer, inner = list(plan.outer), list(plan.inner)
    Xv = _slab_view(X, n, outer, inner)
    n_outer, R = Xv.shape[0], Xv.shape[2]
    G = xp.zeros((In, In), dtype=X.dtype)
    if X.size == 0:
        return G
    conj = (lambda v: v.conj()) if X.dtype.kind == "c" else (lambda v: v)
    flops = In * In * R * n_outer
    if R == 1 or n_outer == 1:
        V = Xv[:, :, 0].T if R == 1 else Xv[0]
        if X.dtype.kind == "c":
            _herk_columns(xp, V, G, plan.policy)
            return G
        if xp is not np:
            gpu_matmul(xp, V, conj(V).T, G)
        elif flops < SYRK_PIN_MADDS:  # (OpenBLAS threads a larger SYRK below PIN_FLOPS: see SYRK_PIN_MADDS)
            np.matmul(V, conj(V).T, out=G)  # numpy runs V @ V.T as a symmetric rank-k update
        else:
            with blas_pinned():
                if flops < 4 * MIN_PARALLEL_FLOPS:
                    np.matmul(V, conj(V).T, out=G)
                else:
                    _syrk_pieces(V, G, conj, plan.policy)
        return G
    # a sum over the outer index: a fixed cut into pieces (by the sizes), one partial Gram per piece, the
    # partials added in piece order; within a piece, one SYRK per slab or batched GEMMs over a few slabs
    bounds = split_points(n_outer, flops)
    most = max(1, _PARTIALS_BYTES // max(In * In * X.itemsize, 1))
    if len(bounds) - 1 > most:
        bounds = [n_outer * i // most for i in range(most + 1)]
    # slabs per batched GEMM: their products (and numpy's operand copies for the stack) at most 4 MiB and an
    # eighth of X, or 64 KiB (on 60^3 a 4 MiB batch was all 60 slabs: 2.2x X of temporaries for a 29 kB Gram)
    cap = min(4 << 20, max(64 << 10, X.size * X.itemsize // 8))
    # (one GEMM a slab from R = 64, unless its slabs are tiny: HOOI's leaves of 16^6 at rank 10, (10, 10, 10, 16,
    # 10, 10) on mode 3, took 1000 Python-level products of 16 x 100 slabs, 4.9-6.0 ms; batched 2.1-2.4 ms)
    chunk = 1 if R >= 64 and In * R >= 4096 else max(1, min(n_outer, cap // max(In * In * X.itemsize, 1)))
    # short slabs on the host (R < 64: the middle mode of a projected tensor, e.g. (200, 200, 10)): a few
    # slabs side by side copied into one (I_n, ~_PACK_COLS) matrix, one SYRK each, instead of one I_n x I_n
    # product per slab (each a rank-R update that reads and writes the whole Gram): (200, 200, 10) mode 1,
    # ST-HOSVD's second step on 200^3, 5.6-9.2 -> 1.6-2.7 ms on two workers; the copies are of at most
    # _PACK_COLS columns, never of the tensor
    pack = xp is np and X.dtype.kind != "c" and R < 64
    if pack and flops < _ONE_PACK_FLOPS and X.size * X.itemsize <= _ONE_PACK_BYTES:
        # a small tensor (HOOI's projections, e.g. (10, 200, 10) mode 1): all its slabs in one pack, one SYRK,
        # no pieces and no thread hand-off ((10, 100, 10): 364 -> 78 us, (10, 200, 10): 632 -> 224 us; by the sizes)
        V = work_empty((In, n_outer * R), X.dtype)
        V.reshape(In, n_outer, R)[...] = Xv.transpose(1, 0, 2)
        with blas_pinned():
            np.matmul(V, V.T, out=G)  # numpy's SYRK: an exactly symmetric result
        return G
    if pack:  # each pack at most _PACK_COLS columns (small I_n: _PACK_ELEMS elements) and `cap` bytes; the pieces a
        # few packs long, their partial Grams within `cap` as well (the flop split's pieces would be single short
        # SYRKs, each with its partial)
        cols = _PACK_ELEMS // In if In <= _SMALL_PACK_IN else _PACK_COLS
        chunk = max(1, min(n_outer, cols // R, cap // max(In * R * X.itemsize, 1)))
        n_pieces = min(MAX_PIECES, most, -(-n_outer // chunk), max(2, cap // max(In * In * X.itemsize, 1)))
        bounds = [n_outer * i // n_pieces for i in range(n_pieces + 1)]
    partials = work_zeros((len(bounds) - 1, In, In), X.dtype) if xp is np else xp.zeros((len(bounds) - 1, In, In),
                                                                                          dtype=X.dtype)

    def mm(a, b, out):
        return np.matmul(a, b, out=out) if xp is np else gpu_matmul(xp, a, b, out)

    def work(i: int, tmp: Any) -> None:
        acc = partials[i]
        if pack:
            buf, prod = tmp
            for start in range(bounds[i], bounds[i + 1], chunk):
                blk = Xv[start:min(start + chunk, bounds[i + 1])]
                b = buf[:, :blk.shape[0] * R]
                b.reshape(In, blk.shape[0], R)[...] = blk.transpose(1, 0, 2)
                np.matmul(b, b.T, out=prod)  # numpy's SYRK
                acc += prod
            return
        for start in range(bounds[i], bounds[i + 1], chunk):
            blk = Xv[start:min(start + chunk, bounds[i + 1])]
            if blk.shape[0] == 1:
                mm(blk[0], conj(blk[0]).T, out=tmp[0])
                acc += tmp[0]
            else:
                t = tmp[: blk.shape[0]]
                mm(blk, xp.swapaxes(conj(blk), 1, 2), out=t)
                acc += t.sum(axis=0)

    def new_tmp() -> Any:
        if pack:
            return work_empty((In, chunk * R), X.dtype), work_empty((In, In), X.dtype)
        return xp.empty((chunk, In, In), dtype=X.dtype)

    if xp is np and flops >= PIN_FLOPS:
        with blas_pinned():
            parallel_for(work, len(bounds) - 1, plan.policy, new_tmp)
    else:
        tmp = new_tmp()
        for i in range(len(bounds) - 1):
            work(i, tmp)
    for i in range(partials.shape[0]):  # in piece order: the same bits whoever computed each piece
        G += partials[i]
    return G


@functools.lru_cache(maxsize=32)
def _triu(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.triu_indices(n, 1)``, kept (read-only): 2 x 160 KB for a 200 x 200 Gram, made every call otherwise."""
    iu = np.triu_indices(n, 1)
    for a in iu:
        a.flags.writeable = False
    return iu


def gram_plan(X: Any, mode: int, *, policy: ExecutionPolicy | None = None) -> GramPlan:
    """The :class:`GramPlan` that :func:`gram` uses for this dense tensor and mode.

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
    mode : int
    policy : ExecutionPolicy, optional
        The workers the plan runs on (default: :func:`default_policy`).

    Returns
    -------
    GramPlan

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import gram, gram_plan
    >>> X = np.ones((4, 5, 6))
    >>> plan = gram_plan(X, 1)
    >>> plan.route, plan.outer, plan.inner, gram(X, 1, plan=plan).shape, plan(X).shape
    ('slabs', (0,), (2,), (5, 5), (5, 5))
    """
    from tuckerkit.engine._operand import dense_array

    X = dense_array(X, "X")
    return build_gram_plan(X, check_mode(mode, X.ndim), resolve_policy(policy))


@device_op
def gram(X: Any, mode: int, *, plan: GramPlan | None = None, device: Any = None) -> Any:
    """The Gram matrix of the mode-``mode`` unfolding, ``X_(n) X_(n)^T``, without forming the unfolding
    (``X_(n) X_(n)^H``, Hermitian, for a complex tensor).

    On a dense array the modes stored outside ``mode`` (larger strides) are looped over and the modes
    inside it are the reduction of each GEMM (``X[o] @ X[o].T`` on views, which numpy runs as a symmetric
    rank-k update). Other tensor kinds bring their own (a sparse unfolding's product, slabs summed, a Dask
    tree reduction).

    Parameters
    ----------
    X : array or tensor, shape (I_0, ..., I_{N-1})
        A numpy/cupy array, or any tensor :func:`as_operand` accepts.
    mode : int
    plan : GramPlan, optional
        From :func:`gram_plan` for a dense tensor of the same shape, strides and dtype, and this mode.
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where the operands live. Operands elsewhere are copied there once and the
        result comes back to the first operand's device.

    Returns
    -------
    array, shape (I_mode, I_mode)

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import gram
    >>> X = np.arange(24.0).reshape(2, 3, 4)
    >>> np.allclose(gram(X, 1), np.moveaxis(X, 1, 0).reshape(3, -1) @ np.moveaxis(X, 1, 0).reshape(3, -1).T)
    True
    """
    from tuckerkit.engine._operand import public_operand

    op = public_operand(X)
    return op.gram(check_mode(mode, op.ndim), plan=plan)
