"""Compiled small-rank TTM kernels (numba, parallel, cached on disk): the bandwidth-bound regime of seed 002.

A TTM with a small output extent ``R`` (``Y = X x_n U^T``, ``U`` of shape (I_n, R), R up to a few dozen) does
``R`` multiply-adds per element of ``X``: it should run at the speed of one streaming read of ``X``. BLAS sees
it as a skinny GEMM (one extent R) or a batch of small ones and runs it at a fraction of the bandwidth. The
kernels here read ``X`` once, in memory order:

* :func:`ttm_inner` -- the contracted mode is *not* the unit-stride one. ``X`` is seen as ``(A, I, B)`` with
  ``B`` unit-strided (the first or a middle mode of a C-ordered tensor, the last or a middle one of an
  F-ordered one, and views of either); ``Y[a, r, b] = sum_i U[i, r] X[a, i, b]``. Tiles of (a, up to ``_TILE``
  b's) are split over the policy's workers; within a tile the output rows are blocked four at a time over
  ``r``, the reduction unrolled by four, and the innermost loop is the unit-stride ``b`` (vectorized).
* :func:`ttm_outer` -- the contracted mode is the unit-stride one: ``X`` is ``(A, I)`` with ``I`` unit-strided
  and ``Y[a, r] = sum_i X[a, i] U[i, r]``. Four rows of ``X`` at a time, each against every column of ``U``
  (stored transposed, ``(R, I)``): four dot products share each load of ``U``.

Every output element is one sum over ``i`` in a fixed order set at compile time (fixed partial sums in
:func:`ttm_outer`, whose reduction runs along the unit stride); the tiles never split a sum, so the result is
the same bits for any number of workers and any load on a given machine. The kernels are serial and release
the GIL; tuckerkit's own pool runs the tiles (``numba``'s parallel pool would keep spinning threads beside
the BLAS pieces of the next step: measured 3-10x slower CP-ALS iterations on 2 cores).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit.engine._policy import ExecutionPolicy, parallel_for, split_points

#: unit-stride extent of one tile of :func:`ttm_inner` (R x _TILE outputs stay in L1)
_TILE = 128
#: the largest output extent R the kernels are planned for (measured up to 32; beyond, BLAS nears its peak)
MAX_RANK = 32


@njit(cache=True, fastmath={"contract"}, nogil=True)
def _inner_kernel(x, xoff, A, I, B, sxa, sxi, u, y, yoff, sya, syr, t_lo, t_hi):  # noqa: E741 # pragma: no cover
    # slices starting at 0 and loops from 0: numba then drops its negative-index wraparound and LLVM
    # vectorizes the unit-stride loop; each y[r, b] is summed over i in order (two terms per statement,
    # left to right, no fused multiply-add), so the bits do not depend on the tiling
    R = u.shape[1]
    nb = (B + _TILE - 1) // _TILE
    for t in range(t_lo, t_hi):
        a = t // nb
        b0 = (t - a * nb) * _TILE
        m = min(_TILE, B - b0)
        xa = xoff + a * sxa + b0
        ya = yoff + a * sya + b0
        r = 0
        while r < R:
            w = min(4, R - r)
            w = 4 if w == 4 else (2 if w >= 2 else 1)
            y0 = y[ya + r * syr: ya + r * syr + m]
            y1 = y[ya + (r + w - 3) * syr: ya + (r + w - 3) * syr + m] if w == 4 else y0
            y2 = y[ya + (r + w - 2) * syr: ya + (r + w - 2) * syr + m] if w == 4 else y0
            y3 = y[ya + (r + w - 1) * syr: ya + (r + w - 1) * syr + m]
            for b in range(m):
                y0[b] = 0
                y3[b] = 0
                y1[b] = 0
                y2[b] = 0
            if w == 4:
                i = 0
                while i + 4 <= I:
                    xs = x[xa + i * sxi: xa + i * sxi + m]
                    xt = x[xa + (i + 1) * sxi: xa + (i + 1) * sxi + m]
                    xu = x[xa + (i + 2) * sxi: xa + (i + 2) * sxi + m]
                    xv = x[xa + (i + 3) * sxi: xa + (i + 3) * sxi + m]
                    u0, u1, u2, u3 = u[i, r], u[i, r + 1], u[i, r + 2], u[i, r + 3]
                    v0, v1, v2, v3 = u[i + 1, r], u[i + 1, r + 1], u[i + 1, r + 2], u[i + 1, r + 3]
                    e0, e1, e2, e3 = u[i + 2, r], u[i + 2, r + 1], u[i + 2, r + 2], u[i + 2, r + 3]
                    f0, f1, f2, f3 = u[i + 3, r], u[i + 3, r + 1], u[i + 3, r + 2], u[i + 3, r + 3]
                    for b in range(m):
                        p = xs[b]
                        q = xt[b]
                        g = xu[b]
                        h = xv[b]
                        y0[b] = y0[b] + u0 * p + v0 * q + e0 * g + f0 * h
                        y1[b] = y1[b] + u1 * p + v1 * q + e1 * g + f1 * h
                        y2[b] = y2[b] + u2 * p + v2 * q + e2 * g + f2 * h
                        y3[b] = y3[b] + u3 * p + v3 * q + e3 * g + f3 * h
                    i += 4
                while i < I:
                    xs = x[xa + i * sxi: xa + i * sxi + m]
                    u0, u1, u2, u3 = u[i, r], u[i, r + 1], u[i, r + 2], u[i, r + 3]
                    for b in range(m):
                        p = xs[b]
                        y0[b] = y0[b] + u0 * p
                        y1[b] = y1[b] + u1 * p
                        y2[b] = y2[b] + u2 * p
                        y3[b] = y3[b] + u3 * p
                    i += 1
            elif w == 2:
                i = 0
                while i + 2 <= I:
                    xs = x[xa + i * sxi: xa + i * sxi + m]
                    xt = x[xa + (i + 1) * sxi: xa + (i + 1) * sxi + m]
                    u0, u3 = u[i, r], u[i, r + 1]
                    v0, v3 = u[i + 1, r], u[i + 1, r + 1]
                    for b in range(m):
                        p = xs[b]
                        q = xt[b]
                        y0[b] = y0[b] + u0 * p + v0 * q
                        y3[b] = y3[b] + u3 * p + v3 * q
                    i += 2
                if i < I:
                    xs = x[xa + i * sxi: xa + i * sxi + m]
                    u0, u3 = u[i, r], u[i, r + 1]
                    for b in range(m):
                        p = xs[b]
                        y0[b] = y0[b] + u0 * p
                        y3[b] = y3[b] + u3 * p
            else:
                i = 0
                while i + 2 <= I:
                    xs = x[xa + i * sxi: xa + i * sxi + m]
                    xt = x[xa + (i + 1) * sxi: xa + (i + 1) * sxi + m]
                    u0 = u[i, r]
                    v0 = u[i + 1, r]
                    for b in range(m):
                        y0[b] = y0[b] + u0 * xs[b] + v0 * xt[b]
                    i += 2
                if i < I:
                    xs = x[xa + i * sxi: xa + i * sxi + m]
                    u0 = u[i, r]
                    for b in range(m):
                        y0[b] = y0[b] + u0 * xs[b]
            r += w


@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True)
def _outer_kernel(x, xoff, A, I, sxa, ut, y, yoff, sya, syr, t_lo, t_hi, zero):  # noqa: E741 # pragma: no cover
    # four rows of X against two columns of U at a time: eight dot products share the loads; the
    # reduction runs along the unit stride in a compile-time order (vector partial sums, fixed combine)
    R = ut.shape[0]
    for t in range(t_lo, t_hi):
        a0 = 4 * t
        h = min(4, A - a0)
        x0 = x[xoff + a0 * sxa: xoff + a0 * sxa + I]
        x1 = x[xoff + (a0 + min(1, h - 1)) * sxa: xoff + (a0 + min(1, h - 1)) * sxa + I]
        x2 = x[xoff + (a0 + min(2, h - 1)) * sxa: xoff + (a0 + min(2, h - 1)) * sxa + I]
        x3 = x[xoff + (a0 + min(3, h - 1)) * sxa: xoff + (a0 + min(3, h - 1)) * sxa + I]
        r = 0
        while r < R:
            c = ut[r]
            d = ut[min(r + 1, R - 1)]
            s0 = zero  # of the data's dtype (a literal 0 would make float32 sums float64)
            s1 = s0
            s2 = s0
            s3 = s0
            t0 = s0
            t1 = s0
            t2 = s0
            t3 = s0
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
            yr = yoff + r * syr + a0 * sya
            y[yr] = s0
            if h > 1:
                y[yr + sya] = s1
            if h > 2:
                y[yr + 2 * sya] = s2
            if h > 3:
                y[yr + 3 * sya] = s3
            if r + 1 < R:
                yr += syr
                y[yr] = t0
                if h > 1:
                    y[yr + sya] = t1
                if h > 2:
                    y[yr + 2 * sya] = t2
                if h > 3:
                    y[yr + 3 * sya] = t3
            r += 2


def flat_span(a: np.ndarray) -> np.ndarray | None:
    """A 1-D view of the memory ``a`` spans, from its first element (elements apart by ``a``'s strides).

    None when a stride is negative or not a multiple of the itemsize (the kernels index non-negative
    element offsets from the lowest address).
    """
    if a.size == 0 or any(s < 0 or s % a.itemsize for s in a.strides):
        return None
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
    A, I, B = X3.shape  # noqa: E741
    it = X3.itemsize
    args = (fx, 0, A, I, B, X3.strides[0] // it, X3.strides[1] // it, U, fy, 0, Y3.strides[0] // it,
            Y3.strides[1] // it)
    _run_tiles(lambda lo, hi: _inner_kernel(*args, lo, hi), A * ((B + _TILE - 1) // _TILE),
               2 * X3.size * U.shape[1], policy)


def ttm_outer(X2: np.ndarray, Ut: np.ndarray, Y2: np.ndarray, policy: ExecutionPolicy | None = None) -> None:
    """``Y2[r, a] = sum_i X2[a, i] Ut[r, i]`` for a 2-D view ``X2`` with unit stride along ``i``, ``Ut``
    C-contiguous (U transposed) and any strides of the output view ``Y2`` (shape (R, A)); blocks of four rows
    split over the policy's workers.

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
    A, I = X2.shape  # noqa: E741
    it = X2.itemsize
    args = (fx, 0, A, I, X2.strides[0] // it, Ut, fy, 0, Y2.strides[1] // it, Y2.strides[0] // it)
    zero = X2.dtype.type(0)
    _run_tiles(lambda lo, hi: _outer_kernel(*args, lo, hi, zero), (A + 3) // 4, 2 * X2.size * Ut.shape[0], policy)


def _run_tiles(kernel, n_tiles: int, flops: int, policy: ExecutionPolicy | None) -> None:
    """``kernel(lo, hi)`` over a cut of ``range(n_tiles)`` that depends on the sizes only, the pieces taken
    by the policy's workers (the tuckerkit pool: no second thread pool spinning beside BLAS's pieces). Each
    output element belongs to one tile, so the bits do not depend on the cut or the workers."""
    bounds = split_points(n_tiles, flops)
    if len(bounds) <= 2 or policy is None or policy.workers < 2:
        kernel(0, n_tiles)
        return
    parallel_for(lambda i, _: kernel(bounds[i], bounds[i + 1]), len(bounds) - 1, policy)


# ---------------------------------------------------------------------------------------------------
# the cost model's constants: fractions of one core's GEMM peak, (R <= 16, R > 16). From interleaved A/B runs
# in one process on the project's 2-core machine: one core on 100^3 (kernel alone against BLAS alone) and the
# planner's two plans on 200^3 with 2 workers (medians of 15): the unit-stride kernel ran 0.69 / 0.85x the
# BLAS time in float64 and 0.65 / 0.87x in float32 (R = 10 / 32); the other kernel 0.98-1.07x at R = 10 and
# 1.2-1.4x at R = 32, so BLAS keeps it (its constants put it within the 5 % margin or above BLAS).
# ---------------------------------------------------------------------------------------------------
_KERNEL_EFF = {
    ("small_rank_ttm_inner", "float64"): (0.47, 0.47),
    ("small_rank_ttm_inner", "float32"): (0.40, 0.40),
    ("small_rank_ttm_outer", "float64"): (0.70, 0.57),
    ("small_rank_ttm_outer", "float32"): (0.50, 0.50),
}
_BLAS_EFF = {
    ("small_rank_ttm_inner", "float64"): (0.49, 0.68),
    ("small_rank_ttm_inner", "float32"): (0.42, 0.62),
    ("small_rank_ttm_outer", "float64"): (0.45, 0.53),
    ("small_rank_ttm_outer", "float32"): (0.33, 0.43),
}


def kernel_efficiency(variant: str, dtype: str, R: int) -> float:
    """The compiled kernel's flop rate as a fraction of one core's GEMM peak (R <= 16, or above)."""
    lo, hi = _KERNEL_EFF[(variant, dtype)]
    return lo if R <= 16 else hi


def blas_efficiency(variant: str, dtype: str, R: int) -> float:
    """BLAS's rate on the same TTM (a GEMM with one extent R, or a batch of them), as a fraction of peak."""
    lo, hi = _BLAS_EFF[(variant, dtype)]
    return lo if R <= 16 else hi


def _view(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    v = x.reshape(shape)
    if v.size > 1 and not np.shares_memory(v, x):  # pragma: no cover - the planner checked the layout
        raise RuntimeError(f"internal error: the small-rank kernel's view of shape {shape} needed a copy")
    return v


def run_small_rank(plan, A: np.ndarray, B: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Run a plan whose ``compiled`` kernel is a small-rank TTM (operands checked against the plan)."""
    from tuckerkit.engine._plan import CompiledKernel

    lay = plan._sr
    if lay.swap:  # the matrix came first
        A, B = B, A
    X = A.transpose(lay.x_perm)
    no = lay.n_outer
    I = X.shape[no]  # noqa: E741
    a_ext = int(np.prod(X.shape[:no], dtype=np.int64))
    b_ext = int(np.prod(X.shape[no + 1:], dtype=np.int64))
    U = B if lay.u_kz else B.T
    R = U.shape[1]
    Y = out.transpose(lay.out_perm)
    if plan.compiled == CompiledKernel.TTM_INNER:
        ttm_inner(_view(X, (a_ext, I, b_ext)), np.ascontiguousarray(U), _view(Y, (a_ext, R, b_ext)), plan.policy)
    else:
        ttm_outer(_view(X, (a_ext, I)), np.ascontiguousarray(U.T), _view(Y, (a_ext, R)).T, plan.policy)
    return out
