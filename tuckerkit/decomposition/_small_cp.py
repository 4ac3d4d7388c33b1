"""CP-ALS's sweeps of a small dense tensor (2 to 4 modes) with compiled factor steps (numba, cached on disk).

On a tensor of a few thousand elements an ALS iteration is a few tens of thousands of flops, but the direct
route (:func:`~tuckerkit.engine._direct.direct_mttkrp_sweep`) makes it in some thirty numpy calls (Khatri-Rao
products, two products with the tensor, GEMVs batched over the rank, each factor's update through its Python
wrapper), each a few microseconds: on 10^3 to 30^3 tensors (rank 3-5) an iteration took 70-135 us. Here
(:class:`SmallCPSweep`) a sweep is four calls (five with 4 modes: the second half's Khatri-Rao product first),
the dimension tree's:

* the product of the tensor with the Khatri-Rao product of the second half's factors (BLAS, one thread, the
  partial ``P`` with the rank last: ``(first half, R)``), then one compiled call (:func:`half_sweep`) for the
  first half's modes: each mode's MTTKRP from ``P`` (the other mode of the half contracted with its factor, the
  first mode's new factor for the second), its update (:func:`~._cp_kernels.sweep_step`: V from the other
  Grams, Cholesky, the row solve, the norms, the new Gram; the kernel of the direct route's update) and the
  Khatri-Rao product of the half's new factors;
* the same for the second half, from the product of the tensor with that Khatri-Rao product, with the fit's
  inner products of the last mode.

A half has one or two modes (2 to 4 modes in all), in memory order: an F-ordered tensor is read as the C array
of its memory (its modes reversed), each half's modes then swapped in its partial, the updates still in mode
order. Where a mode's ``V`` is not definite in working precision the kernel stops before that mode and returns
it; the caller's update (its least squares, :func:`~._linalg.spd_solve`) takes that mode from the kernel's
MTTKRP, and the kernel goes on from the next one. Missing data (``mask=``) takes the same sweep: the E step
refills in place the array whose views the sweep reads. Where the step is not the fused ALS update (fixed modes,
``non_negative_cp``'s HALS and multiplicative updates) :meth:`SmallCPSweep.mttkrp_sweep` gives the MTTKRPs alone
by the same tree, each to the caller's update: in-process, whole calls 0.57-0.92x the direct route's time with a
fixed mode, 0.72-0.94x for ``non_negative_cp``. Line-search jumps take compiled unit columns and Grams
(:meth:`SmallCPSweep.renorm`) and one product with the tensor for their fit (:meth:`SmallCPSweep.inner_of`).

The arithmetic is serial in a fixed order in the tensor's dtype and BLAS runs on one thread: the same bits on
every call and for any number of workers. Where vectors are wide, from :data:`SMALL_CP_KERNEL_WORK` of size x
rank the two products run the engine's small-rank kernels on the calling thread instead
(:func:`kernel_products`, fixed chains as well), and with them the sweep also takes tensors past the direct
route (:func:`beyond_direct`). The bits differ from the direct route's (its MTTKRPs are numpy's batched GEMVs
with the rank first); the fits agree to rounding (the tests compare both routes).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.decomposition._cp_kernels import CHUNK, FUSED_MAX_R, SWEEP_GRAM_MAX, _inner, gram_rows, sweep_step
from tuckerkit.decomposition._linalg import _RAN

#: the compiled sweep is taken on tensors of at most this many elements (the direct route's own bound,
#: ``DIRECT_MTTKRP_ELEMS``) and at most :data:`SMALL_CP_MAX_WORK` of ``X.size * R``. Measured per iteration
#: against the direct route (the AVX-512 machine, 25 plain ALS iterations from the same random start, planted
#: tensors at 1 % noise, medians of 11 interleaved in one process, compiled / direct time): float64 10^3 R = 3
#: 0.26x (20 against 77 us), 20^3 R = 5 0.46x, 30^3 R = 5 0.45x, 40^3 R = 5 / 10 0.57 / 0.65x, 50^3 R = 10 0.84x,
#: 64^3 R = 4 / 10 0.80 / 0.98x, 10^4 R = 3 0.21x, 16^4 R = 5 0.48x, 20^4 R = 5 0.64x, 22^4 R = 10 0.92x,
#: (100, 50) R = 5 0.34x, (200, 10, 10) R = 4 0.53x, 24^3 R = 16 0.48x, 30^3 R = 32 0.56x; float32 10^3 0.26x,
#: 50^3 R = 10 0.63x, 64^3 R = 10 0.71x, 20^4 R = 5 0.44x. Beyond: 64^3 R = 32 (8.4 M) 1.05x
SMALL_CP_MAX_ELEMS = 1 << 18
#: ... where the products with the tensor (the same BLAS GEMMs in both routes, here with the rank last)
#: dominate
SMALL_CP_MAX_WORK = 1 << 22
#: from this much ``X.size * R`` on (by itemsize), at ranks up to ``SMALL_CP_KERNEL_MAX_RANK``, where vectors are
#: wide, the two products with the tensor run the engine's compiled small-rank kernels on the calling thread
#: (:meth:`SmallCPSweep._product`) instead of BLAS's GEMM on one thread; see :func:`kernel_products`
SMALL_CP_KERNEL_WORK = {8: 1 << 20, 4: 1 << 20}
SMALL_CP_KERNEL_MAX_RANK = 10
#: ... float32 at ranks below this one from twice ``SMALL_CP_KERNEL_WORK`` only
SMALL_CP_KERNEL_F32_MIN_RANK = 4
#: whether the sweeps' products with the tensor by the small-rank kernels keep their kernel's arguments between
#: calls (:meth:`SmallCPSweep._kept_product`; the same bits either way)
KEEP_PRODUCTS = True


def kernel_products(X: np.ndarray, rank: int) -> bool:
    """Whether :class:`SmallCPSweep`'s products with the tensor run the engine's small-rank kernels
    (:func:`~tuckerkit.engine._smallgemm.ttm_outer` where the matrix of the tensor is C-ordered,
    :func:`~tuckerkit.engine._smallgemm.ttm_inner` on its transpose), on the calling thread, instead of BLAS's
    GEMM on one thread: where vectors are wide, ``rank`` is at most :data:`SMALL_CP_KERNEL_MAX_RANK` and
    ``X.size * rank`` at least :data:`SMALL_CP_KERNEL_WORK` (1 M; float32 below rank
    :data:`SMALL_CP_KERNEL_F32_MIN_RANK` 2 M). BLAS's GEMM with an extent of the rank runs at about a third of
    one core's peak there; below the bounds the kernels' fixed costs weigh more, and BLAS's products run from L2
    (a float64 tensor of 0.5 MB: 40^3 at R = 5 / 10 took 1.21 / 1.26x BLAS's time with the kernels).

    Measured on the Zen 5 machine (whole ``cp_als`` calls of 25 plain ALS iterations from the same random
    start, planted tensors at 1 % noise, interleaved medians of 15 in one process, kernels over BLAS): float64
    64^3 R = 4 / 5 / 10 0.72 / 0.55 / 0.68x the time, 52^3 R = 10 0.83x, 50^3 0.85x, 48^3 0.91x, 500 x 500 R =
    5 0.55x, 30^3 x 8 R = 8 0.80x, 20 x 100 x 120 R = 10 0.66x; float32 64^3 R = 10 0.82x, 20 x 100 x 120 0.87x.
    Left to BLAS: float32 below 2 M (50^3 R = 10 1.02-1.06x, 64^3 R = 4 0.94x, 30^3 x 8 R = 8 0.95x), and
    larger ranks (40^3 R = 16 / 20 float64 1.00-1.04x, 50^3 R = 16 float32 1.60x). The fits agree to rounding.
    Since the products keep their kernel's arguments (``KEEP_PRODUCTS``, stop 91; the same measure): float32
    from 1 M at ranks 4-10 0.62-0.89x the time (48^3 and 50^3 R = 10 0.87-0.89x, 64^3 R = 4 / 5 0.76-0.81 /
    0.66x, 30^3 x 8 R = 8 0.78x, 500 x 500 R = 5 0.62x), below it 1.30-1.32x (40^3 and 45^3 R = 10); at ranks 1-3
    float32 still loses or ties (1024 x 1024 and 100^3 R = 1 1.96 / 1.65x, 100^3 R = 2 / 3 1.02 / 1.05x), float64
    ties (1024 x 1024 R = 1 1.01x, 100^3 R = 2 / 3 1.05 / 1.07x; 80^3 R = 2 0.89x).
    The kernels' sums are deterministic (each element one fixed chain) and run on the calling thread: the same
    bits on every call and for any number of workers, as BLAS on one thread."""
    from tuckerkit.engine._simd import wide_vectors

    work = SMALL_CP_KERNEL_WORK.get(X.itemsize, 1 << 62)
    if X.itemsize == 4 and rank < SMALL_CP_KERNEL_F32_MIN_RANK:
        work *= 2
    return rank <= SMALL_CP_KERNEL_MAX_RANK and X.size * rank >= work and wide_vectors()


def small_cp_applies(X: np.ndarray, rank: int) -> bool:
    """Whether CP-ALS's sweeps of ``X`` (a numpy array on the direct route, or within :func:`beyond_direct`) take
    :class:`SmallCPSweep`: 2 to 4 modes, float32 or float64, C or F order, at most :data:`SMALL_CP_MAX_ELEMS`
    elements and :data:`SMALL_CP_MAX_WORK` of ``X.size * rank`` (or the larger bounds of :func:`beyond_direct`),
    ``rank`` within the fused update's (``FUSED_MAX_R``) and every factor's Gram within the update's own
    (``SWEEP_GRAM_MAX`` multiply-adds)."""
    return (2 <= X.ndim <= 4 and X.dtype.char in "fd" and 0 < X.size and 1 <= rank <= FUSED_MAX_R
            and ((X.size <= SMALL_CP_MAX_ELEMS and X.size * rank <= SMALL_CP_MAX_WORK) or beyond_direct(X, rank))
            and (X.flags.c_contiguous or X.flags.f_contiguous)
            and max(X.shape) * rank * (rank + 1) // 2 <= SWEEP_GRAM_MAX)


#: the larger bounds of :func:`beyond_direct`: elements, and ``X.size * R``
SMALL_CP_KERNEL_MAX_ELEMS = 1 << 20
SMALL_CP_KERNEL_MAX_WORK = 6 << 20


def beyond_direct(X: np.ndarray, rank: int) -> bool:
    """Whether ``X`` takes :class:`SmallCPSweep` past the direct route's bounds (and :data:`SMALL_CP_MAX_ELEMS`):
    where its products with the tensor run the small-rank kernels (:func:`kernel_products`), up to
    :data:`SMALL_CP_KERNEL_MAX_ELEMS` elements and :data:`SMALL_CP_KERNEL_MAX_WORK` of ``X.size * rank``, a 3-way
    tensor in C order only. There the planner's route (the multi-sweep tree over two workers) spends more on its
    Python steps than the compiled sweep on one thread spends in all.

    Measured on the Zen 5 machine (whole ``cp_als`` calls of 25 plain ALS iterations from the same random start,
    planted tensors at 1 % noise, interleaved medians of 11 in one process, compiled sweep over the planner's
    route): float64 70^3 R = 10 0.80-0.90x the time, 80^3 0.91-0.97x, 90^3 R = 5 0.86-0.94x, 100^3 R = 4-6
    0.90-0.93x, 128 x 128 x 64 R = 6 0.83x, 1000 x 3 x 300 R = 4 0.72x, 25^4 R = 5 0.49-0.53x, 30^4 R = 5 / 10
    0.70-0.73 / 0.83x, 700 x 700 R = 5 0.76-0.90x; float32 70^3 / 80^3 R = 10 0.77 / 0.85-0.90x, 30^4 R = 5
    0.64x. Beyond the work bound the planner's route keeps them: 90^3 R = 10 0.98-1.03x, 200 x 60 x 60 R = 10
    1.09x, 100^3 R = 10 1.35x, 120^3 1.43x. A 3-way tensor in F order stays there too: its products are the
    transposed ones (long rows contracted over a few), and the compiled sweep took 0.97-1.55x the time (70^3,
    80^3, 90^3, 64 x 128 x 64, 128 x 128 x 64); F-ordered 2- and 4-way tensors gain as C-ordered ones. The
    float32 tensors that the kernels' lower bound (stop 91) brings here: 70^3 R = 4 / 5 0.66x, 64 x 80 x 80 R = 4
    0.61x, 80^3 R = 4 0.88x."""
    return (X.size <= SMALL_CP_KERNEL_MAX_ELEMS and X.size * rank <= SMALL_CP_KERNEL_MAX_WORK
            and (X.ndim != 3 or X.flags.c_contiguous) and kernel_products(X, rank)
            and (X.itemsize != 4 or X.size // min(X.shape) <= BEYOND_F32_MAX_CHAIN))


#: :func:`beyond_direct` takes a float32 tensor only where its products' sums are at most this long (bounded by
#: ``X.size / min(X.shape)``): the small-rank kernels sum each in one float32 chain, and the fit from the last
#: mode's MTTKRP was that much less accurate. Measured on the Zen 5 (CP-ALS, 20 plain iterations from one random
#: start, medians of 7 interleaved, compiled sweep against the planner's route): (200, 150, 10) at R = 4 (sums
#: of 30000) 1.22x the time with the fit 9.8e-6 off the true one (5.9e-7 on the planner's route: a review had
#: found a stop reported as converged on a fit drop of 9e-6 where the true fit rose 5e-5); 100^3 R = 4 (10000)
#: 0.99x, 2.3e-6 off (6.5e-8); 128 x 128 x 64 R = 6 (16384) 0.97x, 1.8e-6 (1.3e-7); kept: 70^3 R = 5 / 10
#: (4900) 0.65 / 0.88x, 2.4e-7 / 4.0e-7 off; 80^3 R = 10 (6400) 0.92x, 2.7e-7
BEYOND_F32_MAX_CHAIN = 8192


@njit(cache=True, nogil=True, inline="always")
def _mttkrp_of(P, U, M, along_b):  # pragma: no cover - compiled
    """From the partial ``P`` (Ia x Ib x R): ``M[a, r] = sum_b P[a, b, r] U[b, r]`` (``along_b``) or
    ``M[b, r] = sum_a P[a, b, r] U[a, r]``, each sum in index order."""
    Ia, Ib, R = P.shape
    if along_b:
        for a in range(Ia):
            for r in range(R):
                M[a, r] = 0
            for b in range(Ib):
                for r in range(R):
                    M[a, r] += P[a, b, r] * U[b, r]
    else:
        for b in range(Ib):
            for r in range(R):
                M[b, r] = 0
        for a in range(Ia):
            for b in range(Ib):
                for r in range(R):
                    M[b, r] += P[a, b, r] * U[a, r]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def half_sweep(P, b_first, Uy, Ux, Uyn, grams, nx, ny, Mx, My, ss, norms, normalize, eps, start, want_inner,
               inner, kr):  # pragma: no cover - compiled
    """The two modes of a half from its partial ``P`` (Ia x Ib x R, the half's modes in memory order; the first
    updated, ``x``, is axis b with ``b_first``, else axis a): from ``start`` 0, ``Mx`` from ``P`` and ``Uy``
    (``y``'s factor before the sweep) and ``x``'s update into ``Ux``; then ``My`` from ``P`` and ``Ux`` and
    ``y``'s update into ``Uyn`` (:func:`~._cp_kernels.sweep_step`: the Grams in ``grams`` (N x R x R) replaced,
    the norms in ``norms``), with ``want_inner`` the fit's ``inner[r] = <My[:, r], Uyn[:, r]>``, and where ``kr``
    has rows, ``kr[a Ib + b, r] = A[a, r] B[b, r]`` of the half's new factors. Returns -1, or the step (0: x, 1:
    y) whose V was not definite, its MTTKRP in ``Mx`` / ``My``, nothing after it done (``start`` 1: ``Ux`` is
    x's new factor, given)."""
    Ia, Ib, R = P.shape
    if start == 0:
        _mttkrp_of(P, Uy, Mx, not b_first)
        if not sweep_step(grams, nx, Mx, Ux, ss[:(Mx.shape[0] + CHUNK - 1) // CHUNK], norms, normalize, eps, True):
            return 0
    _mttkrp_of(P, Ux, My, b_first)
    if not sweep_step(grams, ny, My, Uyn, ss[:(My.shape[0] + CHUNK - 1) // CHUNK], norms, normalize, eps, True):
        return 1
    if want_inner:
        _inner(My, Uyn, inner)
    if kr.shape[0] > 0:
        A, B = (Uyn, Ux) if b_first else (Ux, Uyn)
        for a in range(Ia):
            for b in range(Ib):
                o = a * Ib + b
                for r in range(R):
                    kr[o, r] = A[a, r] * B[b, r]
    return -1


@njit(cache=True, nogil=True, **NO_RUNTIME)
def partial_mttkrp(P, U, M, along_b):  # pragma: no cover - compiled
    """:func:`_mttkrp_of` alone (:meth:`SmallCPSweep.mttkrp_sweep`: a mode's MTTKRP from its half's partial)."""
    _mttkrp_of(P, U, M, along_b)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def half_one(M, grams, n, U, ss, norms, normalize, eps, want_inner, inner):  # pragma: no cover - compiled
    """A half of one mode: ``M`` is its MTTKRP; the update into ``U`` as :func:`half_sweep`'s (False where V is
    not definite, nothing changed), with ``want_inner`` the fit's inner products."""
    if not sweep_step(grams, n, M, U, ss[:(M.shape[0] + CHUNK - 1) // CHUNK], norms, normalize, eps, True):
        return False
    if want_inner:
        _inner(M, U, inner)
    return True


@njit(cache=True, nogil=True, **NO_RUNTIME)
def khatri_rao_pair(A, B, kr):  # pragma: no cover - compiled
    """``kr[a Ib + b, r] = A[a, r] B[b, r]`` (:func:`half_sweep`'s Khatri-Rao product of a half)."""
    Ib = B.shape[0]
    for a in range(A.shape[0]):
        for b in range(Ib):
            o = a * Ib + b
            for r in range(A.shape[1]):
                kr[o, r] = A[a, r] * B[b, r]


@njit(cache=True, nogil=True, **NO_RUNTIME)
def unit_columns(F, normalize, norms, G):  # pragma: no cover - compiled
    """A jumped factor's step (:meth:`SmallCPSweep.renorm`): with ``normalize``, ``norms[r]`` the norm of column
    ``r`` (float64, the rows in order; zero taken as 1) and the column divided by it (cast to F's dtype); then
    ``G = F^T F`` (:func:`~._cp_kernels.gram_rows`, the sweep's own Gram)."""
    I, R = F.shape  # noqa: E741
    if normalize:
        for r in range(R):
            norms[r] = 0.0
        for i in range(I):
            for r in range(R):
                v = np.float64(F[i, r])
                norms[r] += v * v
        for r in range(R):
            t = np.sqrt(norms[r])
            norms[r] = t if t != 0 else 1.0
        for i in range(I):
            for r in range(R):
                F[i, r] /= F.dtype.type(norms[r])
    gram_rows(F, G)


class SmallCPSweep:
    """CP-ALS's sweeps of one call on ``X`` (:func:`small_cp_applies`) at rank ``R``: the work arrays, made
    once, :meth:`sweep` (the fused ALS steps) and :meth:`mttkrp_sweep` (the MTTKRPs alone, for another update)."""

    def __init__(self, X: np.ndarray, R: int):
        from tuckerkit.decomposition._linalg import _EPS
        from tuckerkit.engine._direct import DirectSweep
        from tuckerkit.engine._sweeps import Sweep

        shape, N, dt = X.shape, X.ndim, X.dtype
        self.N, self.R, self.dtype, self.eps = N, R, dt, _EPS[dt.char]
        h = (N + 1) // 2
        F = math.prod(shape[:h])
        S = X.size // F
        fo = not X.flags.c_contiguous
        # the tensor as a (first half, second half) matrix and its transpose, views either way; each half's
        # modes in memory order (an F-ordered tensor's reversed)
        if not fo:
            X2 = X.reshape(F, S)
            mats, halves = (X2, X2.T), (list(range(h)), list(range(h, N)))
        else:
            X2 = X.T.reshape(S, F)
            mats, halves = (X2.T, X2), (list(range(h))[::-1], list(range(h, N))[::-1])
        self.mats, self.halves = mats, halves
        self.parts = [np.empty((F, R), dt), np.empty((S, R), dt)]
        # each half's Khatri-Rao product (its memory order), the product with the tensor before the other half
        self.krs: list[Any] = [np.empty((F, R), dt) if len(halves[0]) == 2 else None,
                    np.empty((S, R), dt) if len(halves[1]) == 2 else None]
        self.M = [np.empty((shape[n], R), dt) for n in range(N)]
        self.ss = np.empty((-(-max(shape) // CHUNK), R), np.float64)
        self.norms = np.empty(R, np.float64)
        self.inner = np.empty(R, np.float64)
        self.no_kr = np.empty((0, R), dt)
        self.kernels: tuple[Any, Any] = (half_sweep, half_one)
        # the products with the tensor by the small-rank kernels (kernel_products): where a half's matrix is the
        # transpose of a C array, the inner kernel writes (1, R, rows) into its scratch, copied into the partial
        self.by_kernel = kernel_products(X, R)
        self.tmp = [np.empty((1, R, m.shape[0]), dt) if self.by_kernel and not m.flags.c_contiguous else None
                    for m in mats]
        self.direct = False
        # each half's product with the tensor into its partial as a kept kernel call (_product; False: none)
        self.kept: list[Any] = [None, None]
        self.record = Sweep((DirectSweep("mttkrp_compiled", shape, dt, R, 4 * X.size * R, "cpu"),), 2)

        # each half's steps, worked out once: (modes, the matrix of its product with the tensor, the partial
        # (3-D for two modes), whether it holds the last mode, its Khatri-Rao output, and for two modes the one
        # updated first (x) and second (y), whether x is the partial's axis b, and the MTTKRP buffers)
        self.plan: list[tuple[Any, ...]] = []
        for k, modes in enumerate(halves):
            part, want = self.parts[k], N - 1 in modes
            if len(modes) == 1:
                self.plan.append((modes, mats[k], part, want, None, modes[0], modes[0], False, None, None))
                continue
            a, b = modes
            x, y = (b, a) if b < a else (a, b)
            P3 = part.reshape(shape[a], shape[b], R)
            kr = self.krs[0] if k == 0 else self.no_kr  # (the second half's is made at the next sweep's start)
            self.plan.append((modes, mats[k], P3, want, kr, x, y, b < a, self.M[x], self.M[y]))

    def _product(self, k: int, other: np.ndarray, out: np.ndarray) -> None:
        """``out = mats[k] @ other`` (``out`` C-ordered (rows, R), ``other`` C-ordered (columns, R)): BLAS's GEMM
        (the caller pins it to one thread), or where :func:`kernel_products` said so the engine's small-rank kernel
        on this thread: the matrix C-ordered, :func:`~tuckerkit.engine._smallgemm.ttm_outer` into ``out``'s
        transpose; the transpose of a C array, :func:`~tuckerkit.engine._smallgemm.ttm_inner` on that array into
        the half's scratch, then copied."""
        mat = self.mats[k]
        if not self.by_kernel:
            np.matmul(mat, other, out=out)
            return
        tmp, p = self.tmp[k], self.parts[k]
        # (the kept call writes the half's partial, which every caller passes, as itself or a view of it)
        kept: Any = self.kept[k] if out is p or (out.base is p and out.shape == p.shape) else False
        if kept is None:
            kept = self.kept[k] = self._kept_product(k, other, p)
        if kept:
            kept(other)
        else:
            from tuckerkit.engine._smallgemm import ttm_inner, ttm_outer

            if tmp is None:
                ttm_outer(mat, np.ascontiguousarray(other.T), out.T, None)
            else:
                ttm_inner(mat.T.reshape(1, *mat.T.shape), other, tmp, None)
        if tmp is not None:
            np.copyto(out, tmp[0].T)

    def _kept_product(self, k: int, other: np.ndarray, out: np.ndarray) -> Any:
        """The small-rank kernel's call of :meth:`_product` ``k`` into ``out`` with its arguments worked out once
        (:class:`~tuckerkit.engine._smallgemm.KeptTTM`: the same kernel and bits as ``ttm_outer`` /
        ``ttm_inner``, without their per-call steps), or False (those functions then run). Off with
        :data:`KEEP_PRODUCTS`."""
        from tuckerkit.engine._smallgemm import KeptTTM

        if not KEEP_PRODUCTS:
            return False
        mat, tmp = self.mats[k], self.tmp[k]
        if tmp is None:
            kept = KeptTTM.make(False, mat, other, out.T)
        else:
            kept = KeptTTM.make(True, mat.T.reshape(1, *mat.T.shape), other, tmp)
        return False if kept is None else kept

    def _kr(self, k: int, factors: list[Any]) -> Any:
        """Half ``k``'s Khatri-Rao product of ``factors`` (its memory order; a one-mode half's factor itself)."""
        modes = self.halves[k]
        if len(modes) == 1:
            return _c(factors[modes[0]])
        kr = self.krs[k]
        khatri_rao_pair(_c(factors[modes[0]]), _c(factors[modes[1]]), kr)
        return kr

    def sweep(self, factors: list[Any], grams: np.ndarray, normalize: bool, update: Any, last: dict) -> Any:
        """One sweep: ``factors`` replaced in place (fresh C arrays), ``grams`` (N x R x R, the call's stack)
        with them, and ``last`` as the caller's ``update`` leaves it (the last mode's MTTKRP, that mode and the
        fit's inner products). Returns the last mode's column norms (float64: the weights) with ``normalize``;
        None without, or where that mode took ``update`` (a V not definite: the caller's least squares, which sets
        the caller's weights itself)."""
        from tuckerkit.engine._policy import blas_pinned

        R, dt, eps, norms, inner, ss = self.R, self.dtype, self.eps, self.norms, self.inner, self.ss
        normalize = bool(normalize)
        done = False  # whether the last update was this kernel's
        if not self.direct:  # (each kernel itself once it has run in this process, else its first-run wrapper)
            self.kernels = _kernels(dt)
            two, one = self.kernels  # (the kernels this tensor's halves use)
            self.direct = ((two is half_sweep or all(len(h) == 1 for h in self.halves))
                           and (one is half_one or all(len(h) == 2 for h in self.halves)))
        two, one = self.kernels
        other = self._kr(1, factors)
        # (the products with X on one BLAS thread: the same bits in any setting; inside a decomposition's call,
        # which holds the pin already, a counter)
        with blas_pinned():
            for k, (modes, _, part, want, kr, x, y, b_first, Mx, My) in enumerate(self.plan):
                self._product(k, other, part if kr is None else part.reshape(-1, R))
                if kr is None:  # one mode: the partial is its MTTKRP
                    U = np.empty(part.shape, dt)
                    done = one(part, grams, x, U, ss, norms, normalize, eps, want, inner)
                    if done:
                        factors[x] = other = U
                        last["M"], last["n"], last["inner"] = part, x, inner if want else None
                    else:
                        update(x, part.copy())
                        other = _c(factors[x])
                    continue
                Ux, Uyn = np.empty(Mx.shape, dt), np.empty(My.shape, dt)
                code = two(part, b_first, _c(factors[y]), Ux, Uyn, grams, x, y, Mx, My, ss, norms, normalize,
                           eps, 0, want, inner, kr)
                if code == 0:  # x's V not definite: the caller's least squares, then y from x's new factor
                    update(x, Mx.copy())
                    Ux = _c(factors[x])
                    code = two(part, b_first, _c(factors[y]), Ux, Uyn, grams, x, y, Mx, My, ss, norms,
                               normalize, eps, 1, want, inner, kr)
                factors[x] = Ux
                done = code == -1
                if done:
                    factors[y] = Uyn
                    last["M"], last["n"], last["inner"] = My, y, inner if want else None
                else:  # y's V not definite: the caller's least squares (and the half's Khatri-Rao product here)
                    update(y, My.copy())
                    if kr.shape[0]:
                        khatri_rao_pair(_c(factors[modes[0]]), _c(factors[modes[1]]), kr)
                other = kr
        return norms.copy() if done and normalize else None

    def mttkrp_sweep(self, factors: list[Any], update: Any) -> Any:
        """The N MTTKRPs of one sweep in mode order, ``update(n, M_n)`` after each (which may replace
        ``factors[n]``), as the engine's ``mttkrp_sweep`` gives them (``M_n``: (I_n, R), C-contiguous, a buffer
        of this object's, valid until the next sweep), by the same tree as :meth:`sweep`: the two products
        with the tensor on BLAS and each MTTKRP of a two-mode half from its partial in one compiled call
        (:func:`partial_mttkrp`). For the callers whose step is not the fused ALS update: fixed modes,
        non-negative CP. Returns the sweep's record."""
        from tuckerkit.engine._policy import blas_pinned

        R = self.R
        with blas_pinned():
            other = self._kr(1, factors)
            for k, (modes, _, part, _, kr, x, y, b_first, Mx, My) in enumerate(self.plan):
                self._product(k, other, part if kr is None else part.reshape(-1, R))
                if kr is None:  # one mode: the partial is its MTTKRP
                    update(x, part)
                    other = _c(factors[x])
                    continue
                partial_mttkrp(part, _c(factors[y]), Mx, not b_first)
                update(x, Mx)
                partial_mttkrp(part, _c(factors[x]), My, b_first)
                update(y, My)
                if kr.shape[0]:
                    khatri_rao_pair(_c(factors[modes[0]]), _c(factors[modes[1]]), kr)
                other = kr
        return self.record

    def renorm(self, F: list[Any], w: Any, fixed: frozenset[int], normalize: bool) -> tuple[list[Any], Any, list]:
        """A line-search jump's model (``F``: fresh arrays, changed in place) with unit columns, their norms into
        ``w``, and its Grams (views of one N x R x R array), one compiled call a mode (:func:`unit_columns`);
        the hook of ``_Jumps.attempt``."""
        G = np.empty((self.N, self.R, self.R), self.dtype)
        norms = self.norms
        for n, U in enumerate(F):
            U = F[n] = _c(U)
            unit_columns(U, bool(normalize and n not in fixed), norms, G[n])
            if normalize and n not in fixed:
                w = (w * norms).astype(w.dtype, copy=False)  # (the weights keep their dtype: float32's too)
        return F, w, list(G)

    def inner_of(self, F: list[Any]) -> np.ndarray:
        """``inner[r] = <X, a_r o b_r o ...>`` of the model's factors ``F`` (float64): the last mode's
        ``<M[:, r], F[:, r]>`` that the fit takes, from one product with the tensor (the first half's partial
        against the Khatri-Rao product of the first half's factors); a line-search jump's fit."""
        from tuckerkit.decomposition._cp_kernels import sweep_inner
        from tuckerkit.engine._policy import blas_pinned

        part = self.parts[0]
        with blas_pinned():
            self._product(0, self._kr(1, F), part)
        first = self.halves[0]
        if len(first) == 1:
            kr = _c(F[first[0]])
        else:
            kr = self.krs[0]
            khatri_rao_pair(_c(F[first[0]]), _c(F[first[1]]), kr)
        inner = np.empty(self.R, np.float64)
        sweep_inner(part, kr, inner)
        return inner


def _c(U: np.ndarray) -> np.ndarray:
    """``U`` as a C array (the kernels' one layout): itself where it is one (the usual case)."""
    return U if U.flags.c_contiguous else np.ascontiguousarray(U)


def _kernels(dtype: np.dtype) -> tuple[Any, Any]:
    """:func:`half_sweep` and :func:`half_one` for ``dtype``: the kernels themselves once each has run in this
    process for it, else wrappers whose call compiles with SLP on (``_linalg._first_run``: the row solve's
    lanes packed into vector registers)."""
    from tuckerkit.decomposition._linalg import _first_run

    return tuple(k if (k, dtype.char) in _RAN else functools.partial(_first_run, k, dtype)
                 for k in (half_sweep, half_one))  # type: ignore[return-value]


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
