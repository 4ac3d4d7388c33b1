"""The sweeps of HOOI and CP-ALS on small and mid-size dense tensors, run straight through numpy: no planner.

Below :data:`DIRECT_SWEEP_FLOPS` a sweep's contractions are each one single-threaded call (none would be cut
for the workers: they are below ``MIN_PARALLEL_FLOPS`` together), and the planned sweep's fixed costs
(building spec strings, cache keys, operand views, the dispatch of each plan: about 35 us per contraction,
180-200 us per sweep of a 10^3 tensor) are several times the arithmetic. Up to :data:`DIRECT_TTMC_ELEMS`
(HOOI) and :data:`DIRECT_MTTKRP_ELEMS` (CP-ALS) elements, BLAS GEMMs batched over the outer modes still beat
the planned sweep (measured there). The direct sweeps walk the same dimension tree (halves of the modes,
Gauss-Seidel order, two reads of the tensor) with ``numpy.matmul``: the products with the tensor (from
``CONTRACT_PARALLEL_FLOPS`` on cut into pieces for the workers by the sizes alone, as a planned product is:
:func:`_mm`), then GEMMs (HOOI) or GEMVs (CP-ALS) batched over the small partials' outer index.

Sweeps alone, in one process on the 2-core machine (medians of 60, float64, direct / planned): MTTKRP sweeps
0.17-0.27x on 10^3 to 20^3 and 10^4, 0.31-0.60x on 30^3; TTMc sweeps 0.18-0.36x on 10^3 to 50^3 (R = 3) and
10^4, 0.51-0.57x on 40^3 (R = 10) and 64^3 (R = 3). Which route ran is in the result's ``plans``
(:class:`DirectSweep`).

The direct route takes C-contiguous numpy arrays (and memory maps) only: a reshape of anything else would copy
the tensor. It runs under :func:`~tuckerkit.engine.blas_pinned` (one BLAS thread per piece: the same bits in
any setting and for any number of workers).

Cutting the products with the tensor (before: one call on one BLAS thread), sweeps alone, direct cut / direct
uncut, medians of 15 interleaved on a 2-core AVX2 machine (2026-11-29), float64 unless said: TTMc 100^3 R = 10
0.77x, 128^3 0.71x (float32 0.72x), 120^3 R = 32 0.71x, 30^4 R = 10 0.93x, 80^3 R = 20 0.95x; MTTKRP 64^3
R = 32 0.97x (float32 R = 64 0.99x). Whole HOOI calls (10 iterations from HOSVD, R = 10, medians of 11):
100^3 0.85x, 128^3 0.83x, 30^4 0.92x; whole CP-ALS calls (25 plain ALS iterations, R = 10) on 64^3 and 12^5
0.98-1.01x (their products are below the cut).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit.engine._policy import (
    CONTRACT_PARALLEL_FLOPS,
    CONTRACT_PIECE_SCALE,
    MIN_PARALLEL_FLOPS,
    blas_pinned,
    default_policy,
    split_work,
)

#: a sweep of at most this many flops (``4 * X.size * R``: two reads of the tensor, each a multiply-add per
#: element and rank) on a C-contiguous numpy array runs directly (see the module); its contractions would
#: each be one call on one thread in the planned sweep as well
DIRECT_SWEEP_FLOPS = MIN_PARALLEL_FLOPS

#: HOOI's projections (its sweep, the ST-HOSVD start's TTMs, the core) also run directly on tensors of up to
#: this many elements and ``DIRECT_MAX_FLOPS``: one BLAS thread on GEMMs batched over the outer modes beat
#: the planned sweep's two workers there. TTMc sweeps, interleaved medians of 22 in one process, direct /
#: planned, float64, R = 5 / 10 / 20: 64^3 0.52 / 0.60 / 0.66x, 100^3 0.82 / 0.79 / 0.77x (R = 32 / 50:
#: 0.89x), 120^3 0.88 / 0.95 / 0.90x, 200x100x50 0.73-0.84x, 50x100x200 0.88-1.01x, 30^4 0.72-0.81x, 40^4
#: 0.88-0.96x, 16^5 0.74-0.92x; beyond it the planned sweep wins: 160^3 1.13-1.17x (R = 20: 0.91x), 200^3
#: 1.25-1.50x, 60^4 1.12-1.29x. float32, R = 10 / 32: 100^3 0.82 / 0.72x, 128^3 (2^21 elements) 1.06 /
#: 0.89x, 160^3 1.21 / 1.11x, 48^4 1.13 / 1.24x. Rechecked after the compiled kernels stopped splitting small
#: calls (``_smallgemm.KERNEL_PARALLEL_FLOPS``), R = 5 / 10 / 32: 64^3 0.52-0.71x, 100^3 0.81-0.89x, 120^3
#: 0.89-1.01x, 128^3 float32 0.83-1.18x, 40^4 0.87-1.05x. With the products cut for the workers (:func:`_mm`;
#: a 2-core AVX2 machine, 2026-11-29, R = 10, medians of 15 interleaved, each route's plans cached): sweeps
#: 100^3 0.91x, 128^3 0.88x, 40^4 1.03x, 160^3 1.12x (float32 0.95x), 60^4 1.17x, 200^3 1.29x; whole HOOI
#: calls (10 iterations from HOSVD, medians of 11) 100^3 0.98x, 128^3 1.10x, 30^4 0.90x, 40^4 0.89x: the same
#: threshold.
DIRECT_TTMC_ELEMS = 1 << 21
#: ... for a 3-way float64 tensor where vectors are wide (AVX-512: :func:`~tuckerkit.engine._simd.wide_vectors`),
#: whose planned sweep takes the compiled small-rank kernels and the multi-sweep tree (1.5 reads of the tensor an
#: iteration), where OpenBLAS's GEMMs with a short side of 5-20 rows run far below its peak. Measured on the 2-core
#: AVX-512 machine (Zen 4, stop 82; whole HOOI calls, 10 iterations from HOSVD, planned over direct time, in-process
#: medians of 11 interleaved pairs, the same fits to 12 digits), R = 10: 90^3 1.02x, 100^3 0.87x, 110^3 0.88x, 120^3
#: 0.65x, 128^3 0.53x, 64x128x128 0.69x, 50x100x200 0.61x, 200x100x50 0.96x, 60x120x140 0.76x, 256x64x64 0.91x,
#: 64x64x256 0.77x, 1000x100x10 0.91x, 10x100x1000 0.88x, 100x1000x10 0.67x, 4x500x500 0.66x, 500x500x4 (ranks 10,
#: 10, 2) 1.21x; R = 5 / 20: 90^3 0.99 / 0.99x, 100^3 0.82 / 0.76x, 128^3 0.63 / 0.72x; below it direct stays ahead
#: (80^3 1.06x, 64^3 1.04x). Default calls (ST-HOSVD start, to convergence): 90^3 0.94x, 100^3 0.95x, 128^3 0.81x,
#: 60x120x140 0.94x, 500x500x4 1.03x. float32 (80^3-128^3 0.92-1.15x) and 4-way tensors (32^4 0.72 / 0.94 / 1.17x at
#: R = 5 / 10 / 20, 30^4 0.98x, 36^4 0.72x; 16^5 1.08-1.38x) keep ``DIRECT_TTMC_ELEMS``.
#: Since stop 98 the same bound holds with 256-bit vectors (AVX2 + FMA: :func:`~tuckerkit.engine._simd.simd_supported`),
#: where the compiled kernels had since gained their AVX2 forms. Measured on the 2-core Zen 3 machine (AVX2; whole
#: HOOI calls, 10 iterations from the same start, planned over direct time, in-process medians of 9 interleaved
#: pairs, the same fits to 2e-14), R = 10: 80^3 0.93x, 90^3 0.87x, 100^3 0.91x, 120^3 0.82x, 128^3 0.75x, 64x128x128
#: 0.83x, 50x100x200 0.86x, 200x100x50 0.83x, 60x120x140 0.88x, 256x64x64 0.83x, 64x64x256 0.91x, 100x1000x10 0.94x,
#: 10x100x1000 0.90x; R = 5 / 20: 100^3 0.76 / 0.84x, 128^3 0.69 / 0.84x, 80^3 0.97 / 0.93x; below it direct stays
#: ahead (64^3 1.04x). Default calls (ST-HOSVD start, to convergence): 90^3 0.90x, 100^3 0.97x, 128^3 0.95x,
#: 60x120x140 1.05x. 4-way tensors there: 30^4 0.95 / 1.09x at R = 5 / 10, 32^4 1.01 / 0.96x, 36^4 0.94 / 0.85x,
#: 16^5 0.93x (R = 5): they keep ``DIRECT_TTMC_ELEMS``
DIRECT_TTMC_ELEMS_F64 = 1 << 19
#: ... and a 3-way float32 tensor's, where vectors are 256 bits wide (AVX2 without AVX-512; on the AVX-512 Zen 4
#: machine float32 measured 0.92-1.15x and keeps ``DIRECT_TTMC_ELEMS``): on Zen 3, as above, R = 10, 10 iterations
#: 90^3 (729000 elements) 1.05x (default call 1.32x: direct stays), 96^3 0.88x, 100^3 0.85x (default call 0.77x),
#: 110^3 0.78x, 128^3 0.85x (0.85x), 64x128x128 0.83x, 200x100x50 0.84x
DIRECT_TTMC_ELEMS_F32_256 = 3 << 18
#: CP-ALS's MTTKRP sweeps run directly up to this many elements (and ``DIRECT_MAX_FLOPS``). Interleaved
#: medians of 18, direct / planned, float64, R = 5 / 10 / 32, every product on one thread: 50^3 0.62 / 0.70 /
#: 0.78x, 64^3 (2^18 elements) 0.84 / 0.86 / 0.86x, 60x70x62 1.08 / 0.96 / 1.03x, 70^3 0.93 / 0.99 / 1.03x,
#: 80^3 1.01-1.08x, 100^3 1.14-1.31x; 20^4 0.47-0.62x, 24^4 0.70-0.87x, 26^4 0.85-0.98x, 30^4 0.84-0.95x,
#: 40^4 1.02-1.16x, 12^5 0.66-0.77x; float32: 50^3 0.46-0.75x, 64^3 0.73-0.95x, 24^4 0.67-0.86x, 12^5
#: 0.58-0.70x. Rechecked as above: 50^3 0.60-0.75x, 64^3 0.78-0.91x (float32 0.74-0.87x), 24^4 0.61-0.86x,
#: 80^3 1.03-1.12x. With the products cut for the workers (:func:`_mm`), whole CP-ALS calls (25 plain ALS
#: iterations, R = 10, medians of 11 interleaved) on a 2-core AVX2 machine (2026-11-29): 64^3 0.89x, 72^3
#: 0.89x, 26^4 0.89x, 30^4 0.82x, 12^5 0.75x, but 80^3 1.37x, 100^3 1.35x, 120x100x80 1.29x (there OpenBLAS's
#: GEMMs with a short side of 80-100 ran at 8 GFlop/s a core, where the planned sweep takes the compiled
#: kernels): the threshold stays.
DIRECT_MTTKRP_ELEMS = 1 << 18
#: ... and at most this many flops (``4 * X.size * R``) for either: 120^3 at R = 32 (221 MFlop) 0.96x, 128^3
#: float32 at R = 32 (268 MFlop) 0.89x; a larger rank is compute-bound, where the planned sweep has both cores
DIRECT_MAX_FLOPS = 256_000_000

Update = Callable[[int, Any], None]

#: a tensor in another memory order than C's whose product with a factor contracts the axis last in memory, of at
#: least this many elements, takes the factor's rows against the tensor's (see :func:`_ttm_rows`)
ROWS_MIN_ELEMS = 1 << 16


@dataclass(frozen=True)
class DirectSweep:
    """The record of a sweep that ran directly through numpy (a small or mid-size tensor): what a result's
    ``plans`` holds in place of the engine plans.

    Attributes
    ----------
    kind : str
        ``"mttkrp"`` (CP-ALS), ``"ttmc"`` (HOOI), ``"ttmc_compiled"`` (HOOI's sweep of a small 3- or 4-way tensor
        with compiled factor steps, :mod:`tuckerkit.engine._small_hooi`) or ``"mttkrp_compiled"`` (CP-ALS's sweep
        of a small 2- to 4-way tensor with compiled steps, :mod:`tuckerkit.decomposition._small_cp`).
    shape : tuple of int
        The tensor's shape.
    dtype : numpy.dtype
    rank : int
        The largest rank of the factors.
    flops : int
        ``4 * size * rank``, the measure compared with :data:`DIRECT_SWEEP_FLOPS` and :data:`DIRECT_MAX_FLOPS`.
    device : str
        ``"cpu"`` (numpy), or ``"gpu"`` for a cupy tensor's MTTKRP sweep (:func:`device_direct_applies`: any
        size, ``cupy.matmul``).

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> X = np.random.default_rng(0).random((6, 7, 8))
    >>> tk.cp_als(X, 2, max_iter=3, tol=0).plans[0].kind
    'mttkrp_compiled'
    >>> tk.cp_als(X, 33, max_iter=3, tol=0).plans[0].kind  # (beyond the compiled sweep's rank)
    'mttkrp'
    """

    kind: str
    shape: tuple[int, ...]
    dtype: np.dtype
    rank: int
    flops: int
    device: str = "cpu"

    def explain(self) -> str:
        if self.device == "gpu":
            return (f"direct {self.kind} sweep of a {'x'.join(map(str, self.shape))} {self.dtype} tensor on a GPU, "
                    f"rank {self.rank}: cupy.matmul (cuBLAS) on views of the tensor, no planner (a device "
                    "sweep is bound by the host's calls, not by its arithmetic)")
        if self.kind == "ttmc_compiled":
            return (f"compiled ttmc sweep of a {'x'.join(map(str, self.shape))} {self.dtype} tensor, rank "
                    f"{self.rank}: each factor step's unfolding, Gram and eigenproblem in compiled calls "
                    "(engine/_small_hooi.py: SMALL_SWEEP_MAX_ELEMS, size x rank^4 <= SMALL_SWEEP_MAX_WORK), no planner")
        if self.kind == "mttkrp_compiled":
            return (f"compiled mttkrp sweep of a {'x'.join(map(str, self.shape))} {self.dtype} tensor, rank "
                    f"{self.rank}: two products with the tensor on one BLAS thread, each half's MTTKRPs, updates and "
                    "Grams in one compiled call (decomposition/_small_cp.py: SMALL_CP_MAX_ELEMS, "
                    "size x rank <= SMALL_CP_MAX_WORK), no planner")
        elems, name = DIRECT_MTTKRP_ELEMS, "DIRECT_MTTKRP_ELEMS"
        if self.kind == "ttmc":
            elems = ttmc_elems(self.shape, self.dtype, every=True)
            name = "DIRECT_TTMC_ELEMS" if elems == DIRECT_TTMC_ELEMS else \
                "DIRECT_TTMC_ELEMS_F64" if elems == DIRECT_TTMC_ELEMS_F64 else "DIRECT_TTMC_ELEMS_F32_256"
        why = (f"{self.flops} flops <= DIRECT_SWEEP_FLOPS ({DIRECT_SWEEP_FLOPS})" if self.flops <= DIRECT_SWEEP_FLOPS
               else f"{math.prod(self.shape)} elements <= {name} ({elems}) and "
                    f"{self.flops} flops <= DIRECT_MAX_FLOPS ({DIRECT_MAX_FLOPS})")
        return (f"direct {self.kind} sweep of a {'x'.join(map(str, self.shape))} {self.dtype} tensor, rank "
                f"{self.rank}: {why}; numpy.matmul on one BLAS thread, no planner")


#: the array types the direct route takes: numpy's own and its memory maps (a file's tensor takes the route its
#: copy in memory would: the same bits from the CLI as from the API)
_PLAIN = (np.ndarray, np.memmap)


def memory_order(X: Any) -> tuple[int, ...] | None:
    """The axes of ``X`` from the slowest-varying in memory to the fastest, when ``X`` fills its memory without
    gaps in some order of its axes (``X.transpose(order)`` is then C-contiguous: a view), else None (a strided
    view, negative strides). C order gives ``(0, 1, ..., N-1)``, F order the reverse; a tensor made by a chain of
    products (a Tucker model's ``to_dense``, ``multi_ttm``) may have any other.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._direct import memory_order
    >>> X = np.zeros((2, 3, 4))
    >>> memory_order(X), memory_order(np.asfortranarray(X)), memory_order(X.transpose(1, 2, 0))
    ((0, 1, 2), (2, 1, 0), (2, 0, 1))
    >>> memory_order(X[:, ::2]) is None
    True
    """
    if X.flags.c_contiguous:
        return tuple(range(X.ndim))
    if X.flags.f_contiguous:
        return tuple(range(X.ndim - 1, -1, -1))
    if X.size == 0 or any(s < 0 for s in X.strides):
        return None
    order = tuple(sorted(range(X.ndim), key=lambda a: -X.strides[a]))  # (stable: equal strides keep their order)
    return order if X.transpose(order).flags.c_contiguous else None


def _cp_layout(X: Any) -> bool | None:
    """CP-ALS's direct sweep: False for a C layout, True for an F layout (the axes' memory order reversed: each
    half of the modes is still one block of memory), None for any other."""
    return False if X.flags.c_contiguous else True if X.flags.f_contiguous else None


def direct_applies(X: Any, rank: int, projections: bool = False) -> bool:
    """Whether a sweep of ``X`` with factors of at most ``rank`` columns runs directly (see the module):
    ``projections`` for HOOI's (:data:`DIRECT_TTMC_ELEMS`; ``X`` in any order of its axes without gaps,
    :func:`memory_order`), else CP-ALS's MTTKRPs (:data:`DIRECT_MTTKRP_ELEMS`; C or F order)."""
    if type(X) not in _PLAIN or X.ndim < 1:
        return False
    if not X.flags.c_contiguous and (memory_order(X) is None if projections else _cp_layout(X) is None):
        return False
    flops = 4 * X.size * max(rank, 1)
    return flops <= DIRECT_SWEEP_FLOPS or (
        X.size <= (ttmc_elems(X.shape, X.dtype) if projections else DIRECT_MTTKRP_ELEMS) and flops <= DIRECT_MAX_FLOPS)


def ttmc_elems(shape: tuple[int, ...], dtype: Any, every: bool = False) -> int:
    """The most elements of a tensor of ``shape`` and ``dtype`` whose HOOI projections run directly (within
    ``DIRECT_MAX_FLOPS``): for a 3-way tensor where the compiled kernels run (AVX2 + FMA),
    ``DIRECT_TTMC_ELEMS_F64`` in float64 and, where vectors are 256 bits wide, ``DIRECT_TTMC_ELEMS_F32_256`` in
    float32; else ``DIRECT_TTMC_ELEMS``. Without ``every``, a tensor within the smallest bound gets the largest
    (any of them lets it run directly; the CPU is then not looked up).

    Examples
    --------
    >>> from tuckerkit.engine._direct import DIRECT_TTMC_ELEMS, ttmc_elems
    >>> ttmc_elems((80, 80, 80), "float32") == ttmc_elems((10, 10, 10), "float64") == DIRECT_TTMC_ELEMS
    True
    """
    if len(shape) == 3 and (every or math.prod(shape) > DIRECT_TTMC_ELEMS_F64):
        dt = np.dtype(dtype)
        if dt == np.float64 or dt == np.float32:
            from tuckerkit.engine._simd import simd_supported, wide_vectors  # (numba's: only past the bound)

            # (each only lowers DIRECT_TTMC_ELEMS: setting that to 0 turns the route off for every tensor)
            if simd_supported():
                if dt == np.float64:
                    return min(DIRECT_TTMC_ELEMS_F64, DIRECT_TTMC_ELEMS)
                if not wide_vectors():
                    return min(DIRECT_TTMC_ELEMS_F32_256, DIRECT_TTMC_ELEMS)
    return DIRECT_TTMC_ELEMS


def device_direct_applies(X: Any) -> bool:
    """Whether CP-ALS's MTTKRP sweep of a cupy array ``X`` runs directly (:func:`direct_mttkrp_sweep` with
    ``cupy.matmul``): a C- or F-contiguous tensor of at least two modes, whatever its size.

    Why: on a GPU the sweep is bound by the host's calls (an H200 profile of CP-ALS on 200^3, rank 10: about
    0.3 ms of device work an iteration against 3 ms of host time), and a planned contraction costs the host
    about 0.1-0.2 ms (its plan looked up, its operands' views and bounds checked, the cuBLAS descriptor made)
    against about 0.02 ms for a ``cupy.matmul``. The direct sweep makes the same GEMMs with the same partials
    (their sizes: the first half's Khatri-Rao product, ``R`` times the product of its extents, is the planned
    sweep's rank-outer partial's size)."""
    from tuckerkit.backend import is_cupy_array

    return is_cupy_array(X) and X.ndim >= 2 and X.size > 0 and _cp_layout(X) is not None


def record(kind: str, X: np.ndarray, rank: int) -> DirectSweep:
    device = "cpu" if type(X) in _PLAIN else "gpu"
    return DirectSweep(kind, X.shape, X.dtype, rank, 4 * X.size * rank, device)


def _direct_data(op: Any, rank: int, projections: bool, *mats: Any) -> np.ndarray | None:
    """The array of a dense operand whose products with ``mats`` (numpy matrices of its dtype, at most ``rank``
    columns) run directly, else None."""
    from tuckerkit.engine._operand import DenseTensor

    if not isinstance(op, DenseTensor):
        return None
    X = op.data
    if not direct_applies(X, rank, projections) or any(type(U) not in _PLAIN or U.dtype != X.dtype for U in mats):
        return None
    return X


def operand_ttm(op: Any, U: Any, n: int, policy: Any) -> Any:
    """``op x_n U^H`` for the decompositions: :func:`direct_ttm` on a small dense operand (the projections of
    the direct sweeps, bit for bit: ST-HOSVD's steps that HOOI's first sweep takes, HOOI's core), else the
    operand's own ``ttm``. ``op`` may be a host array too (a sweep's projection: wrapped as an operand only
    when it is not small). (The public :func:`~tuckerkit.ttm` always plans: with or without a plan, the same
    bits.)"""
    if type(op) in _PLAIN and direct_applies(op, U.shape[1], True) and type(U) in _PLAIN and U.dtype == op.dtype:
        return direct_ttm(op, U, n, True)
    from tuckerkit.engine._operand import as_operand

    op = as_operand(op)  # (an operand as it is)
    X = _direct_data(op, U.shape[1], True, U)
    if X is not None:
        return direct_ttm(X, U, n, True)
    return op.ttm(U, n, transpose=True, policy=policy)


def operand_mttkrp(op: Any, factors: Sequence[Any], n: int, policy: Any) -> Any:
    """Mode ``n``'s MTTKRP for the decompositions: :func:`direct_mttkrp` on a small dense operand (CP-ALS's line
    search), else the operand's own ``mttkrp``."""
    R = next(int(U.shape[1]) for m, U in enumerate(factors) if m != n)
    X = _direct_data(op, R, False, *(U for m, U in enumerate(factors) if m != n)) if op.ndim > 1 else None
    if X is not None:
        return direct_mttkrp(X, factors, n, R)
    checked = getattr(op, "checked_mttkrp", None)  # (a sparse tensor: the decomposition checked its operands)
    return checked(factors, n, policy=policy) if checked is not None else op.mttkrp(factors, n, policy=policy)


# ---------------------------------------------------------------------------------------------------
# the products with the tensor
# ---------------------------------------------------------------------------------------------------
def _mm(a: Any, b: Any) -> Any:
    """``a @ b`` (2-D, or a 2-D ``a`` against a 3-D ``b`` batched over its first axis), C-contiguous: one
    call below ``CONTRACT_PARALLEL_FLOPS`` (in float64 terms), else cut into pieces by the sizes alone, as a
    planned contraction's product is (:func:`~tuckerkit.engine._contract.cpu_matmul`: the batch, or the rows
    or columns; the GIL-free GEMM helpers take them), so that a mid-size tensor's products use every core.
    Each piece is the BLAS call the workers would make whichever ran it: the same bits for any number of
    workers."""
    if type(b) not in _PLAIN:  # (a device array: cuBLAS, transposed views without copies)
        return _matmul(b)(a, b)
    m, k = a.shape
    n = b.shape[-1]
    flops = 2 * m * n * k * (b.shape[0] if b.ndim == 3 else 1)
    if flops < CONTRACT_PARALLEL_FLOPS or split_work(flops, b.dtype) < CONTRACT_PARALLEL_FLOPS:
        return np.matmul(a, b)  # (the first test alone for a small product: split_work's dtype look-up costs 2 us)
    from tuckerkit.engine._contract import cpu_matmul  # (imports the engine's contraction layer once)

    out = np.empty((*b.shape[:-2], m, n), dtype=np.result_type(a, b))
    cpu_matmul(a[None] if b.ndim == 3 else a, b, out, flops, default_policy(), CONTRACT_PIECE_SCALE)
    return out


def _matmul(X: Any) -> Callable[..., Any]:
    """``numpy.matmul`` for a host array, else its array module's (cupy's)."""
    if type(X) in _PLAIN:
        return np.matmul
    from tuckerkit.backend import array_namespace

    return array_namespace(X).matmul


# ---------------------------------------------------------------------------------------------------
# CP-ALS: the MTTKRPs
# ---------------------------------------------------------------------------------------------------
def _kr(mats: Sequence[Any]) -> Any:
    """The Khatri-Rao product with the row index in C order of ``mats``' modes (the first slowest)."""
    out = mats[0]
    for U in mats[1:]:
        out = (out[:, None, :] * U[None, :, :]).reshape(-1, out.shape[1])
    return out


def direct_mttkrp_sweep(X: np.ndarray, factors: list[Any], update: Update, R: int) -> None:
    """The N MTTKRPs of one ALS sweep of a C- or F-contiguous ``X``, every partial with the rank first: the
    Khatri-Rao product of the second half's factors transposed times ``X`` as (first half, second half)
    transposed gives the first half's partial, the first half's (updated) one times ``X`` the second half's;
    each partial's halves by GEMVs batched over the rank (``numpy.matmul``), recursively. ``update(n, M_n)``
    as in :func:`mttkrp_sweep` (``M_n`` an (I_n, R) view of a rank-first array, as the planned sweep gives).
    An F-ordered ``X`` is read as the C-contiguous view of its memory (the modes reversed): the same halves and
    the same order of updates, every partial's modes reversed in memory (``rev``). A cupy ``X``
    (:func:`device_direct_applies`) takes the same steps with ``cupy.matmul`` (cuBLAS)."""
    shape, N = X.shape, X.ndim
    h = (N + 1) // 2
    first, second = list(range(h)), list(range(h, N))
    F = math.prod(shape[:h])
    rev = bool(_cp_layout(X))
    with blas_pinned():
        if not rev:
            X2 = X.reshape(F, X.size // F)
            P = _mm(_kr([factors[m] for m in second]).T, X2.T)
        else:  # (the memory's rows: the second half's modes, the last slowest; its columns: the first half's)
            X2 = X.T.reshape(X.size // F, F)
            P = _mm(_kr([factors[m] for m in second[::-1]]).T, X2)
        _mttkrp_rec(P, first, shape, R, factors, update, rev)
        del P
        if not rev:
            Q = _mm(_kr([factors[m] for m in first]).T, X2)
        else:
            Q = _mm(_kr([factors[m] for m in first[::-1]]).T, X2.T)
        _mttkrp_rec(Q, second, shape, R, factors, update, rev)


def _mttkrp_rec(T: Any, modes: list[int], shape: Sequence[int], R: int, factors: list[Any],
                update: Update, rev: bool = False) -> None:
    """``T``: C-contiguous, the rank first, then the modes ``modes`` (in order; in reverse order with ``rev``)."""
    if len(modes) == 1:
        update(modes[0], T.T)
        return
    h = (len(modes) + 1) // 2
    first, second = modes[:h], modes[h:]
    F = math.prod(shape[m] for m in first)
    matmul = _matmul(T)
    if not rev:
        T3 = T.reshape(R, F, T.size // (R * F))
        A = matmul(T3, _kr([factors[m] for m in second]).T[:, :, None])[:, :, 0]
    else:  # (the second half's modes first in memory)
        T3 = T.reshape(R, T.size // (R * F), F)
        A = matmul(_kr([factors[m] for m in second[::-1]]).T[:, None, :], T3)[:, 0, :]
    _mttkrp_rec(A, first, shape, R, factors, update, rev)
    del A
    if not rev:
        B = matmul(_kr([factors[m] for m in first]).T[:, None, :], T3)[:, 0, :]
    else:
        B = matmul(T3, _kr([factors[m] for m in first[::-1]]).T[:, :, None])[:, :, 0]
    _mttkrp_rec(B, second, shape, R, factors, update, rev)


def direct_mttkrp(X: np.ndarray, factors: Sequence[Any], n: int, R: int) -> Any:
    """Mode ``n``'s MTTKRP of a C-contiguous ``X`` (at least 2 modes), C-contiguous (I_n, R): ``X`` as
    (modes before n and n, modes after n) times the Khatri-Rao product of the modes after, then the modes before
    by ``einsum`` batched over the rank (a single MTTKRP: CP-ALS's line search); for the last mode one GEMM with
    the Khatri-Rao product of the others. An F-ordered ``X``: the same MTTKRP of its C-contiguous transpose
    (the modes reversed)."""
    if _cp_layout(X):
        return direct_mttkrp(X.T, list(factors)[::-1], X.ndim - 1 - n, R)
    shape = X.shape
    A, I, B = math.prod(shape[:n]), shape[n], math.prod(shape[n + 1:])  # noqa: E741
    with blas_pinned():
        if n == X.ndim - 1:  # (by the mode, not by B == 1: a mode of size 1 still scales by its factor's row)
            return _mm(X.reshape(A, I).T, _kr(factors[:n]))
        P = _mm(X.reshape(A * I, B), _kr(factors[n + 1:]))
        return P if n == 0 else np.einsum("air,ar->ir", P.reshape(A, I, R), _kr(factors[:n]))


# ---------------------------------------------------------------------------------------------------
# HOOI: the projections
# ---------------------------------------------------------------------------------------------------
def _ttm_rows(T: Any, k: int, W: Any, rows: bool = False) -> Any:
    """``T`` with mode ``k`` contracted against the rows of ``W`` (I_k x J), C-contiguous, the new mode in place:
    one GEMM when mode ``k`` is the first or the last of ``T``, else GEMMs batched over the modes before it
    (``T`` is reshaped: a view when it is C-contiguous, as every array of the direct routes is but a start's
    partial). ``T`` in another order of its axes without gaps (:func:`memory_order`: an F-ordered tensor) is
    contracted as the C-contiguous view of its memory, and the result comes back in the same order of axes;
    there, when the contracted axis is the last in memory and the tensor has at least :data:`ROWS_MIN_ELEMS`
    elements (``rows``), the product is ``W^T`` against the tensor's transposed unfolding (the result's new
    mode first in memory): OpenBLAS runs (27000 x 30) @ (30 x 5) in 1.8 ms and (5 x 30) @ (30 x 27000)^T in
    1.2 ms (one thread). HOOI on an F-ordered 30^4 (rank 5, 10 iterations) took 0.82x the time with it, 20^4
    0.90x, 50^3-128^3 0.95-0.97x; C-ordered tensors keep their products (0.96-1.07x with it, noise)."""
    if not T.flags.c_contiguous:
        order = memory_order(T)
        if order is not None:
            back = [0] * len(order)
            for i, a in enumerate(order):
                back[a] = i
            return _ttm_rows(T.transpose(order), back[k], W, T.size >= ROWS_MIN_ELEMS).transpose(back)
    d = T.shape
    A, I, B = math.prod(d[:k]), d[k], math.prod(d[k + 1:])  # noqa: E741
    if B == 1 and rows and A > 1:  # (W^T T^T)^T: the new mode first in memory
        Yt = _mm(W.T, T.reshape(A, I).T).reshape(W.shape[1], *d[:k], *d[k + 1:])
        return Yt.transpose((*range(1, k + 1), 0, *range(k + 1, len(d))))
    if B == 1:
        Y = _mm(T.reshape(A, I), W)
    elif A == 1:
        Y = _mm(W.T, T.reshape(I, B))
    else:
        Y = _mm(W.T, T.reshape(A, I, B))
    return Y.reshape(*d[:k], W.shape[1], *d[k + 1:])


def _project_mode(T: Any, k: int, U: Any) -> Any:
    """``T x_k U^H`` (``U^T`` for a real U)."""
    return _ttm_rows(T, k, U.conj() if U.dtype.kind == "c" else U)


def direct_ttm(X: np.ndarray, U: Any, n: int, transpose: bool) -> Any:
    """``X x_n U`` (``U^H`` / ``U^T`` with ``transpose``) of ``X`` in any order of its axes without gaps (the
    result one buffer in some order of its axes: C-contiguous for a C-contiguous ``X``, :func:`_ttm_rows`), as
    the direct sweeps project: a start's projections made by it are, bit for bit, the ones the first sweep would
    make."""
    with blas_pinned():
        return _project_mode(X, n, U) if transpose else _ttm_rows(X, n, U.T)


def _project(T: Any, modes: Sequence[int], factors: list[Any]) -> Any:
    """``T`` projected on the factors of ``modes``, the mode that shrinks most first (as the planned
    multi-TTM orders them)."""
    for m in sorted((m for m in modes if factors[m] is not None),
                    key=lambda m: factors[m].shape[1] / max(factors[m].shape[0], 1)):
        T = _project_mode(T, m, factors[m])
    return T


def direct_ttmc_sweep(X: np.ndarray, factors: list[Any], update: Update,
                      take: Callable[[list[int]], Any], split: Callable[[Any, list[int]], int]) -> None:
    """The N projections of one HOOI sweep of ``X`` in any order of its axes without gaps (``Y_n = X x_{m != n}
    U_m^H``, mode ``n`` unprojected, the modes in place; each product on the C view of its operand's memory,
    :func:`_ttm_rows`): the modes halved as the planned tree halves them (``split(T, active)`` gives the first
    half's length), a projection found by ``take(unprojected modes)`` (a start's partial)
    used as it is. ``update(n, Y_n)`` as in :func:`ttmc_sweep`."""
    with blas_pinned():
        _ttmc_rec(X, list(range(X.ndim)), factors, update, take, split)


def _ttmc_rec(T: Any, active: list[int], factors: list[Any], update: Update, take: Callable, split: Callable) -> None:
    if len(active) == 1:
        update(active[0], T)
        return
    h = split(T, active)
    first, second = active[:h], active[h:]
    for part, rest in ((first, second), (second, first)):
        if all(factors[m] is None for m in part):  # (no update below: modes left out of the sweep)
            continue
        Y = take(part)
        if Y is None:
            Y = _project(T, rest, factors)
        _ttmc_rec(Y, part, factors, update, take, split)
        del Y
