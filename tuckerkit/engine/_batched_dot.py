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


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
