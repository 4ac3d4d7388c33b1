"""The compiled batched dot product along a mode that all three operands share with unit stride.

``C[m, z] = sum_k A[m, k, z] B[k, z]``: a batch of dot products along ``k``, one per ``(m, z)``, where ``z``
(the rank of a CP-ALS partial) has unit stride in ``A``, ``B`` and ``C``. This is the second step of a dense
MTTKRP whose partial keeps the rank innermost (``abz,bz->az``, ``abz,az->bz``). BLAS sees it as a batch of one
dot product per ``(m, z)`` along a stride of ``Z`` elements: numpy's stacked ``matmul`` runs those one at a
time. Here each row ``A[m, k, :]`` (a run of ``Z`` elements) is multiplied by ``B[k, :]`` and added into
``C[m, :]``, a vector at a time, so ``A`` streams once in memory order.

Every ``C[m, z]`` is one chain in increasing ``k``, one fused multiply-add per term from zero. The loop order
(``m`` outside or ``k`` outside, whichever follows ``A``'s memory) and the pieces of ``m`` the workers take
change none of it, so the bits depend on the operands only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._contract import read_only
from tuckerkit.engine._policy import ExecutionPolicy
from tuckerkit.engine._simd import stack_matrix


@njit(cache=True, fastmath={"contract"}, nogil=True, **NO_RUNTIME)
def _batched_dot_kernel(a, sam, sak, b, sbk, c, scm, K, Z, m_outer, m_lo, m_hi):  # pragma: no cover
    # rows [m_lo, m_hi) of C (each a run of Z elements from c[m * scm]), in blocks of mb rows whose sums stay in a
    # scratch on the stack (LLVM then knows they alias nothing), copied out when the block is done. Unsigned
    # indices in the loops over z: no negative-index wraparound for LLVM to keep, which leaves a loop scalar
    mb = max(1, min(m_hi - m_lo, _SCRATCH // Z))
    acc = stack_matrix(1, mb * Z, c)
    for m0 in range(m_lo, m_hi, mb):
        nb = min(mb, m_hi - m0)
        for j in range(nb * Z):
            acc[0, np.uint64(j)] = 0.0
        if m_outer:  # A's rows of one m lie together (k inside m in memory): one m at a time
            for i in range(nb):
                for k in range(K):
                    _axpy_row(acc, i * Z, a, (m0 + i) * sam + k * sak, b, k * sbk, Z)
        else:  # k outside m in memory: one k at a time over the block's rows (A read in memory order)
            for k in range(K):
                for i in range(nb):
                    _axpy_row(acc, i * Z, a, (m0 + i) * sam + k * sak, b, k * sbk, Z)
        for i in range(nb):
            co = (m0 + i) * scm
            for z in range(Z):
                c[np.uint64(co + z)] = acc[0, np.uint64(i * Z + z)]


@njit(cache=True, fastmath={"contract"}, nogil=True, inline="always", **NO_RUNTIME)
def _axpy_row(acc, o, a, ao, b, bo, Z):  # pragma: no cover
    # acc[0, o + z] += a[ao + z] * b[bo + z], z < Z: one fused multiply-add per element
    for z in range(Z):
        acc[0, np.uint64(o + z)] += a[np.uint64(ao + z)] * b[np.uint64(bo + z)]


#: elements of the kernel's scratch on the stack (its blocks of rows of C: 32 KiB in float64); the planner takes
#: the kernel for ``Z`` up to this (:data:`MAX_Z`)
_SCRATCH = 4096
MAX_Z = _SCRATCH


#: the kernel reads ``A`` once (two flops per element of it): its pieces are cut as if it did this many times the
#: flops, so that a partial of a few megabytes is shared by the workers (it streams at one core's bandwidth alone)
STREAM_WEIGHT = 1


def _span(x: np.ndarray) -> np.ndarray:
    """A 1-D view of the memory ``x`` spans from its first element (non-negative strides, checked by the plan)."""
    from tuckerkit.engine._smallgemm import flat_span

    f = flat_span(x)
    if f is None:  # pragma: no cover - the planner checked the strides
        raise ValueError("the batched dot kernel needs non-empty views with non-negative strides")
    return f


def batched_dot(A3: np.ndarray, B2: np.ndarray, C2: np.ndarray, policy: ExecutionPolicy | None = None) -> None:
    """``C2[m, z] = sum_k A3[m, k, z] B2[k, z]`` for views with unit stride along ``z`` (the last axis of each),
    written into ``C2``; pieces of ``m`` on the policy's workers.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._batched_dot import batched_dot
    >>> A, B = np.arange(24.0).reshape(2, 3, 4), np.ones((3, 4))
    >>> C = np.empty((2, 4)); batched_dot(A, B, C)
    >>> np.array_equal(C, np.einsum("mkz,kz->mz", A, B))
    True
    """
    M, K, Z = A3.shape
    if B2.shape != (K, Z) or C2.shape != (M, Z):
        raise ValueError(f"batched_dot needs B of shape {(K, Z)} and C of shape {(M, Z)}; received "
                         f"{tuple(B2.shape)} and {tuple(C2.shape)}")
    if not (A3.dtype == B2.dtype == C2.dtype) or A3.dtype not in (np.float32, np.float64):
        raise ValueError(f"batched_dot needs float32 or float64 operands of one dtype; received {A3.dtype}, "
                         f"{B2.dtype}, {C2.dtype}")
    if M == 0 or Z == 0:
        return
    if K == 0:  # an empty sum
        C2[...] = 0
        return
    if any(x.shape[-1] > 1 and x.strides[-1] != x.itemsize for x in (A3, B2, C2)):
        raise ValueError("batched_dot needs unit stride along the last axis of each operand")
    if Z > MAX_Z:
        raise ValueError(f"batched_dot takes at most {MAX_Z} elements along z; received {Z}")
    it = A3.itemsize
    sam, sak = A3.strides[0] // it, A3.strides[1] // it
    m_outer = M == 1 or abs(sak) < abs(sam) or K == 1
    args = [read_only(_span(A3)), sam, sak, read_only(_span(B2)), B2.strides[0] // it, _span(C2),
            C2.strides[0] // it, K, Z, m_outer, 0, M]
    from tuckerkit.engine._smallgemm import _kernel_tiles

    # (pieces by flops as the TTM kernels' are: one piece below KERNEL_PARALLEL_FLOPS, 8M elements of A. Two
    # workers on a partial of 3.2-16 MB, woken from their sleep, took 1.1-1.5x one thread's time, medians of 15
    # interleaved calls with the helpers parked after each)
    _kernel_tiles("batched_dot", _batched_dot_kernel, args, (10, 11), (), 2 * A3.size, policy)


def run_batched_dot(plan: Any, A: np.ndarray, B: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Run a plan whose ``compiled`` kernel is the batched dot product (operands checked against the plan): the
    views of its layout (``plan._bd``), no copy."""
    lay = plan._bd
    if lay.axis >= 0:  # the rank outermost (CompiledKernel.RANK_OUTER_DOT)
        T, W = (B, A) if lay.swap else (A, B)
        if not rank_outer_gemv(T.transpose(lay.x_perm), W.transpose(lay.u_perm), out.transpose(lay.out_perm),
                               lay.axis, plan.policy):
            # (a misaligned operand: the same plan by BLAS)
            import dataclasses

            from tuckerkit.engine._contract import execute
            from tuckerkit.engine._plan import CompiledKernel

            execute(dataclasses.replace(plan, compiled=CompiledKernel.NONE, _bd=None), A, B, out, np)
        return out
    if lay.swap:  # the matrix came first
        A, B = B, A
    X = A.transpose(lay.x_perm)
    M = math.prod(X.shape[:-2])
    A3 = _merged(X, (M, *X.shape[-2:]))
    Y = out.transpose(lay.out_perm)
    C2 = _merged(Y, (M, Y.shape[-1]))
    batched_dot(A3, B.transpose(lay.u_perm), C2, plan.policy)
    return out


def _merged(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` reshaped to ``shape`` as a view (the planner checked that its leading axes merge)."""
    v = x.reshape(shape)
    if v.size > 1 and not np.shares_memory(v, x):  # pragma: no cover - the planner checked the layout
        raise RuntimeError(f"internal error: the batched dot kernel's view of shape {shape} needed a copy")
    return v


# ---------------------------------------------------------------------------------------------------
# the same products on a partial whose rank is outermost in memory (CP-ALS's rank-outer partials, engine/_mttkrp.py
# rank_outer): for each z a matrix-vector product with one (A x B) matrix of the partial, a contiguous block
# ---------------------------------------------------------------------------------------------------
@njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, **NO_RUNTIME)
def _rank_outer_dots(p, Z, A, B, w, c, scz, sca, z_lo, z_hi):  # pragma: no cover
    # c[a * sca + z * scz] = sum_b p[(z * A + a) * B + b] * w[z * B + b] for z in [z_lo, z_hi): one dot product
    # along a row of the partial per (z, a), its lanes split by LLVM (reassoc: an order fixed when it compiles).
    # Unsigned indices
    for z in range(z_lo, z_hi):
        wo = z * B
        for a in range(A):
            po = (z * A + a) * B
            s = p[po] * w[wo]
            for b in range(1, B):
                s += p[np.uint64(po + b)] * w[np.uint64(wo + b)]
            c[a * sca + z * scz] = s


@njit(cache=True, fastmath={"contract"}, nogil=True, **NO_RUNTIME)
def _rank_outer_axpys(p, Z, A, B, w, c, scz, scb, y, z_lo, z_hi):  # pragma: no cover
    # c[b * scb + z * scz] = sum_a w[z * A + a] * p[(z * A + a) * B + b] for z in [z_lo, z_hi): the rows of the
    # partial's block z scaled and added in order of a into y (B elements, in L1), one fused multiply-add per
    # term from the first product, then copied out
    for z in range(z_lo, z_hi):
        wo = z * A
        po = z * A * B
        w0 = w[wo]
        for b in range(B):
            y[np.uint64(b)] = w0 * p[np.uint64(po + b)]
        for a in range(1, A):
            wa = w[wo + a]
            ro = po + a * B
            for b in range(B):
                y[np.uint64(b)] += wa * p[np.uint64(ro + b)]
        for b in range(B):
            c[b * scb + z * scz] = y[b]


def rank_outer_gemv(P: np.ndarray, W: np.ndarray, out: np.ndarray, axis: int,
                    policy: ExecutionPolicy | None = None) -> bool:
    """``out[x, z] = sum_k P[.., z] W[k, z]`` over ``axis`` (0 or 1) of a 3-D partial ``P`` (two modes, then the
    rank ``z``) whose rank is outermost in memory and whose two modes lie C-contiguous beneath it (CP-ALS's
    rank-outer partials), ``x`` the other mode; written into ``out`` (any non-negative strides). False, with
    nothing done, for any other layout or dtype (the caller's plan runs it).

    BLAS ran these as one matrix-vector product per ``z`` (``dgemv`` on a 200 x 200 block: 0.3-0.47 ms for a
    200 x 200 x 10 partial fresh from the pass that wrote it, 0.17-0.31 ms warm). Here each is one compiled loop
    over the partial in memory order, on one thread: 0.13-0.14 ms fresh, 0.09-0.10 ms warm (the 2-core Zen 4
    machine, medians of 15). In CP-ALS's sweeps on 200^3 at rank 10 (10 iterations, 30 such steps, interleaved
    medians of 11) the steps took 0.71x the time in float64 (7.57 -> 5.35 ms a call) and 0.74x in float32, the
    whole call 0.94-1.01x over five runs (median 0.97x: the machine's noise is of that size). Each output is one
    chain in order of ``k`` (axis 0: fused multiply-adds from the first product; axis 1: a dot product whose
    lanes LLVM fixes when it compiles): the bits depend on the operands only.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._batched_dot import rank_outer_gemv
    >>> P = np.arange(24.0).reshape(4, 3, 2).transpose(1, 2, 0)  # (3, 2, z = 4), z outermost in memory
    >>> W = np.ones((2, 4)); out = np.empty((3, 4))
    >>> rank_outer_gemv(P, W, out, 1), np.array_equal(out, np.einsum("abz,bz->az", P, W))
    (True, True)
    """
    got = _gemv_layout(P, W, out, axis)
    if got is None:
        return False
    blocks, c, dims = got
    _gemv(read_only(blocks.reshape(-1)), W, c, dims, axis, policy)
    return True


def _gemv_layout(P: np.ndarray, W: np.ndarray, out: np.ndarray, axis: int) -> tuple[Any, Any, tuple] | None:
    """:func:`rank_outer_gemv`'s checks: the partial's blocks (z, a, b), the output's flat span and the kernel's
    sizes and output strides ``(Z, A, B, scz, sc)``; None where the kernel does not take these operands."""
    if P.ndim != 3 or axis not in (0, 1) or P.dtype not in (np.float32, np.float64) or not (
            P.dtype == W.dtype == out.dtype):
        return None
    A, B, Z = P.shape
    K, X = (A, B) if axis == 0 else (B, A)
    if W.shape != (K, Z) or out.shape != (X, Z) or min(A, B, Z) == 0 or out.ndim != 2:
        return None
    blocks = P.transpose(2, 0, 1)
    if not (blocks.flags.c_contiguous and blocks.flags.aligned) or any(st < 0 for st in out.strides):
        return None
    from tuckerkit.engine._smallgemm import flat_span

    c = flat_span(out)
    if c is None:
        return None
    it = out.itemsize
    return blocks, c, (Z, A, B, out.strides[1] // it, out.strides[0] // it)


def _gemv(p: np.ndarray, W: np.ndarray, c: np.ndarray, dims: tuple, axis: int,
          policy: ExecutionPolicy | None = None) -> None:
    """The kernel of :func:`rank_outer_gemv` (``p`` the partial's blocks, flat and read-only), over the ranks
    ``z``: in one piece, or where ``policy`` has two workers or more and the product is large enough for the
    TTM kernels' cut (:func:`~._smallgemm._kernel_tiles`: from ``WARM_SPLIT_FLOPS`` where the helpers are awake,
    as in CP-ALS's sweeps right after a pass; from ``KERNEL_PARALLEL_FLOPS`` otherwise) in pieces of whole
    ranks on the GIL-free helpers. Each output element is computed whole by one piece, in the same order: the
    same bits for any cut.

    Why: one thread had been measured faster at rank 10 (the ranks cut in two took 1.14-1.31x the time in
    CP-ALS's sweeps on 200^3, the partial of 0.8 MFlop fresh in L3), and stays so below the cut; at rank 50
    (float32: 4 MFlop, 8 MB) the two steps an iteration took 0.6-0.7 ms of CP-ALS's 5.1-6.1 ms on one thread,
    the other core idle. Measured on the 2-core Zen 5 (CP-ALS on 200^3, steady iterations, medians of 9
    interleaved calls of 14 iterations, the same bits): rank 50 0.93-0.94x the time in float32 and 0.94-0.95x
    in float64 (two runs), rank 64 0.96x / 0.94x, rank 30 (below the cut) 1.00x."""
    Z, A, B, scz, sc = dims
    w = np.ascontiguousarray(W.T).reshape(-1)  # (Z x K: each z's vector a run)
    from tuckerkit.engine._smallgemm import _kernel_tiles

    flops = 2 * Z * A * B
    if axis == 1:
        _kernel_tiles("rank_dots", _rank_outer_dots, [p, Z, A, B, w, c, scz, sc, 0, Z], (8, 9), (), flops, policy)
    else:
        _kernel_tiles("rank_axpys", _rank_outer_axpys, [p, Z, A, B, w, c, scz, sc, np.empty(B, p.dtype), 0, Z],
                      (9, 10), (8,), flops, policy)


class RankOuterStep:
    """A plan's rank-outer product (``CompiledKernel.RANK_OUTER_DOT``, :func:`run_batched_dot`) with what depends
    only on its operands' shapes and strides worked out once (:func:`rank_outer_step`): a call takes the operands
    (of those shapes and strides) and the output's buffer, flat, and runs the kernel with the arguments
    :func:`rank_outer_gemv` gives it: the same bits. For CP-ALS's sweeps, which make such a product two or three
    times an iteration on partials of one layout: its Python steps (the plan's look-up, the checks, the views)
    had taken about as long as the kernel on 200^3 at rank 10 (30 against 27 us)."""

    __slots__ = ("axis", "dims", "perm", "policy", "swap", "u_perm")

    def __init__(self, axis: int, dims: tuple, perm: tuple[int, ...], swap: bool, u_perm: tuple[int, ...],
                 policy: ExecutionPolicy | None = None):
        self.axis, self.dims, self.perm, self.swap, self.u_perm = axis, dims, perm, swap, u_perm
        self.policy = policy

    def __call__(self, A: np.ndarray, B: np.ndarray, c: np.ndarray) -> None:
        T, W = (B, A) if self.swap else (A, B)
        p = T.transpose(self.perm).reshape(-1)  # (a view: its blocks were C-contiguous when prepared)
        p.flags.writeable = False  # (the read-only type the kernel was compiled for, as read_only gives it)
        _gemv(p, W.transpose(self.u_perm), c, self.dims, self.axis, self.policy)


def rank_outer_step(plan: Any, A: np.ndarray, B: np.ndarray, out: np.ndarray, buf: np.ndarray) -> RankOuterStep | None:
    """``plan``'s :class:`RankOuterStep` for operands of the shapes and strides of ``A``, ``B`` and ``out`` (a view
    of the C-ordered ``buf``, whose flat span it must be), or None where the plan is not a rank-outer product or
    the kernel would not take these operands (the caller runs the plan)."""
    lay = getattr(plan, "_bd", None)
    if lay is None or lay.axis < 0 or not buf.flags.c_contiguous:
        return None
    T, W = (B, A) if lay.swap else (A, B)
    got = _gemv_layout(T.transpose(lay.x_perm), W.transpose(lay.u_perm), out.transpose(lay.out_perm), lay.axis)
    if got is None:
        return None
    c, dims = got[1], got[2]
    if c.size != buf.size or c.__array_interface__["data"][0] != buf.__array_interface__["data"][0]:
        return None
    x = lay.x_perm
    return RankOuterStep(lay.axis, dims, (x[2], x[0], x[1]), lay.swap, tuple(lay.u_perm), plan.policy)


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
