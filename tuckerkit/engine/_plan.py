"""Contraction planning: flatten, batch, or (for the exceptional cases) pick the cheapest remedy.

The planner follows seed 000 (Shi et al., sections III and IV-D):

* every pairwise contraction is written as ``C[batch, M, N] = sum_K A[batch, M, K] B[batch, K, N]`` where
  ``M``, ``N`` and ``K`` are *groups* of modes that are flattened into one matrix dimension, and every other
  free mode is a batch mode looped over by a strided-batched GEMM;
* a group may only be flattened when its modes are adjacent in memory in every operand that holds it, in the
  same order (rule 2 of seed III-B: ``stride[outer] == stride[inner] * dim[inner]``): legality follows the
  strides, not an assumed layout;
* each 2-D slice handed to BLAS needs one unit stride and a leading dimension at least the other extent
  (otherwise numpy would fall into its non-BLAS loop or copy behind our back);
* among the legal candidates a small cost model picks the fastest: GEMM time from the flop count and the
  efficiency of its three extents (larger GEMMs run closer to peak, IV-D rules 1 and 2), plus a per-call
  overhead for every GEMM of the batch, plus a 2 % preference for batching over the output's outermost mode
  (IV-D rule 3, measured on CPUs in the seed's Fig. 5 and 6);
* when no candidate reaches a level-3 kernel without copying ("exceptional": the only batching left would
  need a unit-stride mode), the remedies are costed and the cheapest is taken and recorded: a batched GEMV
  on views, a single copy of the smaller operand into a GEMM-friendly layout, or a GEMM into a temporary
  output that is copied into ``out``.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from tuckerkit.engine._policy import CONTRACT_PARALLEL_FLOPS, MIN_PARALLEL_FLOPS, ExecutionPolicy, split_work
from tuckerkit.engine._spec import Spec

_SERIAL = ExecutionPolicy(workers=1)

# --- cost model constants (seconds); tuned on a 2-core Zen 4 with OpenBLAS, only their ratios matter ------
_GEMM_PEAK = 60e9  # flop/s of a large GEMM
_GEMM_HALF = 16.0  # extent at which a GEMM dimension runs at half efficiency
_CALL = 1.5e-6  # overhead of one BLAS call inside a batched loop
_VEC_RATE = 4e9  # flop/s of a level-2 (GEMV, dot) kernel
_GER_RATE = 1e9  # element updates/s of an outer product loop
#: bytes/s of a level-2 kernel's pass over a matrix it re-reads: a GEMV batched over an index its matrix lacks
#: reads the whole matrix once per GEMV. The last mode of 50000 x 8 x 8 x 8 at rank 4 (A of 3.2M x 8, four
#: GEMVs over z, 205 MB each) took 162-173 ms against one GEMM's 52-74 ms, which the flop rates alone had
#: ranked the other way (51 against 69 ms)
_STREAM_BW = 10e9
_COPY_BW = 2e9  # bytes/s of a strided (transposing) copy
#: bytes/s one core streams through a compiled loop, in the units of the constants above: what the compiled
#: batched dot products are weighed with against BLAS's batch of level-2 calls (:func:`_consider_batched_dot`,
#: :func:`_consider_rank_outer`), whose estimate comes from those constants. They were weighed with the
#: machine's calibrated bandwidth instead (another unit): a calibration made while other processes loaded the
#: memory (15 GB/s a core for 22 idle) flipped CP-ALS's rank-outer steps to BLAS, and so the bits of the same
#: call. With this constant the choice depends on the contraction only (measured, the kernels ran 1.3-2.8x
#: faster than that BLAS plan on every shape they take: ``benchmarks/batched_dot.py``)
_KERNEL_STREAM_BW = 30e9
_OUTER_PREF = 1.02  # penalty when the batch loop is not over the output's outermost mode
_NARROW = 32  # a row-major GEMM output with fewer columns than this, and many rows, ...
_NARROW_PENALTY = 1.35  # ... ran this much slower than its transpose (benchmarks/ttm.py, last mode)
# a batch of GEMMs whose output slices have gaps between their rows (a slice of a C-ordered output across
# a middle mode: rows n*p apart) ran 1.05-1.17x slower than the same batch into dense slices (Table II
# 1.3 / 2.3 / 5.4 / 6.4 at n = 64, 128, 1 and 2 workers), so a free output is laid out batch-major instead
_GAPPED_OUT_PENALTY = 1.15
# an SGEMM whose larger operand has the reduction as its unit stride ran 1.10-1.41x slower when that operand
# gave the output's columns (short rows: the smaller extent) than when it gave the rows (one thread,
# M x N x K = 4096 x 64 x 64, 16384 x 128 x 128, 65536 x 256 x 256 and 40000 x 10 x 200, medians of three
# interleaved rounds: Table II's x.5 / x.6 cases, B's reduction last, whose free output took short rows at
# 0.55-0.74x einsum). DGEMM showed no such preference (0.90-1.05x at 4096 x 64 x 64), nor SGEMM with the other
# layout of the larger operand (0.84-1.14x), so the penalty is float32's and this layout's only; and only where both
# extents are at least _NARROW (a narrower output is _NARROW_PENALTY's).
_SINGLE_SHORT_ROWS_PENALTY = 1.25


class KernelKind(str, enum.Enum):
    """The BLAS-level kernel a plan runs.

    ``GEMM`` (flattened), ``STRIDED_BATCHED_GEMM`` (one batch mode), ``NESTED_BATCHED_GEMM`` (several),
    ``EXCEPTIONAL`` (a remedy was needed, see :class:`Remedy`), and the degenerate forms ``DOT``, ``GEMV``,
    ``GER`` and their batched versions when a GEMM extent is 1. Members compare equal to their strings.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit import KernelKind, plan_contraction
    >>> plan_contraction("ik,kj->ij", np.ones((3, 4)), np.ones((4, 5))).kind is KernelKind.GEMM
    True
    >>> KernelKind.STRIDED_BATCHED_GEMM == "strided_batched_gemm"
    True
    """

    DOT = "dot"
    GEMV = "gemv"
    GER = "ger"
    GEMM = "gemm"
    BATCHED_DOT = "batched_dot"
    BATCHED_GEMV = "batched_gemv"
    BATCHED_GER = "batched_ger"
    STRIDED_BATCHED_GEMM = "strided_batched_gemm"
    NESTED_BATCHED_GEMM = "nested_batched_gemm"
    EXCEPTIONAL = "exceptional"
    EMPTY = "empty"

    def __str__(self) -> str:
        return self.value


class Remedy(str, enum.Enum):
    """How an exceptional contraction is evaluated.

    ``NONE`` (not exceptional), ``BATCHED_GEMV`` (loop the product as matrix-vector calls, no copy),
    ``SUMMED_BATCH`` (a contracted mode that cannot join the others in one flattened group, e.g. ``a`` of
    ``abc,acz->bz``, looped as a batch whose products are summed: no copy of an operand, a bounded temporary),
    ``COPY_A`` / ``COPY_B`` (copy the smaller operand once into a BLAS-legal layout) or ``COPY_OUT``
    (compute into a temporary and copy it into the requested output); the cheapest by the cost model wins.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit import Remedy, plan_contraction
    >>> plan = plan_contraction("ik,kj->ij", np.ones((3, 4)), np.ones((4, 5)))
    >>> plan.remedy is Remedy.NONE, plan.copies
    (True, 0)
    """

    NONE = "none"
    BATCHED_GEMV = "batched_gemv"
    SUMMED_BATCH = "summed_batch"
    COPY_A = "copy_a"
    COPY_B = "copy_b"
    COPY_OUT = "copy_out"

    def __str__(self) -> str:
        return self.value


class CompiledKernel(str, enum.Enum):
    """A compiled (numba) kernel that runs the plan in place of BLAS, chosen by the roofline cost model.

    ``NONE`` (BLAS runs, as ``kind`` says), ``TTM_INNER`` (a small-rank TTM whose contracted mode is not the
    unit-stride one) and ``TTM_OUTER`` (contracted along the unit stride); see ``tuckerkit.engine._smallgemm``.
    ``BATCHED_DOT``: dot products along one mode, batched over the others and over a mode that all three
    operands share with unit stride (``abz,bz->az``: an MTTKRP's second step with the rank innermost); see
    ``tuckerkit.engine._batched_dot``. ``RANK_OUTER_DOT``: the same products on a 3-way tensor whose shared mode
    is outermost in memory over its two others (CP-ALS's rank-outer partials), one matrix-vector product per
    index of that mode in one compiled loop. CPU only: a plan moved to the GPU runs cuBLAS.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import plan_contraction
    >>> from tuckerkit.engine import CompiledKernel
    >>> plan_contraction("abc,cz->abz", np.ones((3, 4, 5)), np.ones((5, 2))).compiled is CompiledKernel.NONE
    True
    """

    NONE = "none"
    TTM_INNER = "small_rank_ttm_inner"
    TTM_OUTER = "small_rank_ttm_outer"
    BATCHED_DOT = "unit_batch_dot"
    RANK_OUTER_DOT = "rank_outer_dot"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class _SmallRankLayout:
    """How the compiled small-rank TTM sees its operands (views, no copy of the tensor)."""

    x_perm: tuple[int, ...]  # A's axes as (outer group, contracted axis, inner group), memory order
    n_outer: int  # axes in the outer group
    out_perm: tuple[int, ...]  # the output's axes as (outer group, new axis, inner group)
    u_kz: bool  # B's subscripts are (contracted, new): U = B; else U = B.T
    blas_out_order: tuple[int, ...]  # the BLAS plan's allocation order (a GPU run allocates that)
    swap: bool = False  # the tensor is B and the matrix A
    blas_copies: int = 0  # the BLAS plan's copies and bytes moved (a GPU run makes its copies: its remedy)
    blas_bytes: int = 0


@dataclass(frozen=True)
class _BatchedDotLayout:
    """How the compiled batched dot product sees its operands: the tensor as (m, k, z), the matrix as (k, z), the
    output as (m, z), all views (the m axes merged, outer to inner in memory)."""

    x_perm: tuple[int, ...]  # the tensor's axes as (m axes..., k, z)
    u_perm: tuple[int, int]  # the matrix's axes as (k, z)
    out_perm: tuple[int, ...]  # the output's axes as (m axes..., z)
    blas_out_order: tuple[int, ...]  # the BLAS plan's allocation order (a GPU run allocates that)
    swap: bool = False  # the tensor is B and the matrix A
    # RANK_OUTER_DOT: the contracted mode's place (0 or 1) among the tensor's two inner axes; x_perm then gives
    # them outer to inner, then z (outermost in memory), and out_perm the output's axes as (kept mode, z)
    axis: int = -1


@dataclass(frozen=True)
class _OperandLayout:
    """How the executor turns one operand into its ``(*batch, rows, cols)`` view (no copy)."""

    keep_shape: tuple[int, ...]  # shape after pre-reductions with size-1 axes dropped
    perm: tuple[int, ...]  # transpose of the kept axes into batch + row group + column group order
    view_shape: tuple[int, ...]  # final reshape (size-1 entries for batch modes the operand lacks)
    copy_order: tuple[int, ...] | None = None  # when the plan copies this operand: axis order of the copy


#: ``_contract.run_bound_plan``, bound at a plan's first call (a module-level import would be circular; see
#: ``_contract._SMALL_RANK`` for what a function-level import costs a call)
_RUN_BOUND_PLAN: list[Any] = [None]


@dataclass(frozen=True)
class ContractionPlan:
    """A frozen, printable, reusable plan for one pairwise contraction.

    Attributes
    ----------
    spec : str
        Normalized subscripts ``"a,b->c"``.
    kind : KernelKind
        Kernel run after any remedy (``EXCEPTIONAL`` when a remedy was needed; see ``remedy``).
    remedy : Remedy
        ``NONE`` unless the case is exceptional.
    inner_kind : KernelKind
        The kernel actually called (equal to ``kind`` unless exceptional).
    row_modes, col_modes, contracted_modes : tuple of str
        The flattened groups ``M``, ``N`` and ``K`` (outer to inner in memory).
    batch_modes : tuple of str
        Batched modes, outermost loop first (nested batching when there are several); modes that are
        adjacent in every operand are flattened into one batch group, e.g. ``"bc"``.
    batch_sizes : tuple of int
        Extent of each batch mode.
    batch_strides : tuple of tuple of int
        ``(stride in A, stride in B, stride in C)`` in elements for each batch mode (0 = broadcast).
    trans_a, trans_b : bool
        Row-major BLAS transpose flags: ``False`` when the operand's slice has its column group unit-strided.
    lda, ldb, ldc : int
        Leading dimensions (elements) of the slices.
    m, n, k : int
        GEMM extents (product of each group).
    flops : int
        Multiply-adds times two.
    bytes_moved : int
        Bytes read and written: each operand once, plus copies (read and write).
    copies : int
        Elements copied (0 for every non-exceptional case).
    parallel : bool
        On the CPU the product is large enough to be cut into pieces run on the policy's workers (a batch
        split over its largest mode, a single GEMM over its rows or columns; see ``tuckerkit.engine._policy``).
    shapes, strides : tuple
        The operand shapes and element strides the plan was made for (A, B, out).
    dtype : str
        Result dtype.
    summed_modes : tuple of str
        Modes of one operand that appear nowhere else and are summed before the product.
    est_seconds : float
        The planner's time estimate of the plan chosen: for a compiled kernel the roofline model's (the first
        row of ``estimates``), for BLAS the planner's own GEMM model, which the ``estimates`` rows that weighed
        a compiled kernel against it (the roofline model's, shown by :meth:`explain`) need not equal.
    device : str
        ``"cpu"``, or ``"cuda"`` for a plan of cupy operands (run as cuBLAS strided-batched calls).
    policy : ExecutionPolicy
        The workers the plan runs on (the result does not depend on them).
    compiled : CompiledKernel
        ``NONE`` when BLAS runs the plan (``kind``); else the compiled small-rank kernel the roofline cost
        model chose over it (``kind`` is then the BLAS alternative, which a GPU plan runs).
    summed_batch : tuple of str
        With ``Remedy.SUMMED_BATCH``: the contracted modes looped as a batch whose products are summed
        (outer to inner in memory), each product a GEMM of the other groups.
    summed_size : int
        The number of those products (the extent of ``summed_batch``; 1 without one).
    out_layout : str
        The ``out_layout`` the plan was made with (``"auto"``, ``"C"`` or ``"F"``): ``contract(plan=...)`` refuses
        another one that the plan does not allocate.
    estimates : tuple of (str, float)
        The cost model's seconds for each candidate it weighed (``"roofline"`` is the bound
        ``max(bytes / bandwidth, flops / peak)`` of one core), when a compiled kernel was considered; then
        each candidate's compute term alone (``"... compute"``: flops over its rate), which decides where
        both candidates are bandwidth-bound and their estimates tie.

    A plan is callable: ``plan(A, B, out=None)`` runs it on operands of exactly the shapes, strides and dtype
    it was made for, and raises a one-line ``ValueError`` for anything else.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit import contract, plan_contraction
    >>> A, B = np.ones((3, 4)), np.ones((5, 4, 6))
    >>> plan = plan_contraction("mk,nkp->mnp", A, B)
    >>> plan.kind.value, plan.batch_modes, plan.copies
    ('strided_batched_gemm', ('n',), 0)
    >>> plan.notation()
    'C_{m[n]p} = A_{mk} B_{[n]kp}'
    >>> contract("mk,nkp->mnp", A, B, plan=plan).shape
    (3, 5, 6)
    >>> plan(A, B).shape
    (3, 5, 6)
    """

    spec: str
    dtype: str
    kind: KernelKind
    remedy: Remedy
    inner_kind: KernelKind
    row_modes: tuple[str, ...]
    col_modes: tuple[str, ...]
    contracted_modes: tuple[str, ...]
    batch_modes: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    batch_strides: tuple[tuple[int, int, int], ...]
    trans_a: bool
    trans_b: bool
    lda: int
    ldb: int
    ldc: int
    m: int
    n: int
    k: int
    flops: int
    bytes_moved: int
    copies: int
    summed_modes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    strides: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    est_seconds: float
    parallel: bool = False
    device: str = "cpu"
    policy: ExecutionPolicy = _SERIAL
    compiled: CompiledKernel = CompiledKernel.NONE
    estimates: tuple[tuple[str, float], ...] = ()
    summed_batch: tuple[str, ...] = ()
    summed_size: int = 1
    out_layout: str = field(default="auto", repr=False, compare=False)  # (as planned: contract(plan=) checks it)
    _a: _OperandLayout | None = field(default=None, repr=False, compare=False)
    _b: _OperandLayout | None = field(default=None, repr=False, compare=False)
    _c: _OperandLayout | None = field(default=None, repr=False, compare=False)
    _out_order: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _sum_a: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _sum_b: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _sr: _SmallRankLayout | None = field(default=None, repr=False, compare=False)
    _bd: _BatchedDotLayout | None = field(default=None, repr=False, compare=False)
    # what a planned call on numpy arrays needs, made on the first such call (``_contract._bind``)
    _bound: Any = field(default=None, init=False, repr=False, compare=False)

    # ----------------------------------------------------------------------------------------------
    def __call__(self, A: Any, B: Any, out: Any = None) -> Any:
        """Run the plan on ``A`` and ``B`` (checked against what it was made for), into ``out`` if given."""
        run = _RUN_BOUND_PLAN[0]
        if run is None:  # (the engine's entry points, bound once: see _contract's hot-path note)
            from tuckerkit.engine._contract import run_bound_plan as run

            _RUN_BOUND_PLAN[0] = run
        return run(self, A, B, out)

    def notation(self) -> str:
        """The evaluation in the seed's notation, e.g. ``C_{m[n]p} = A_{mk} B_{k[n]p}``."""
        a, b, c = self.spec.replace("->", ",").split(",")
        groups = [g for g in (self.row_modes, self.col_modes, self.contracted_modes) if len(g) > 1]

        def mark(sub: str, transposed: bool) -> tuple[str, str]:
            out: list[str] = []
            done: set[str] = set()
            for ch in sub:
                if ch in done:
                    continue
                grp = next((g for g in groups if ch in g and all(x in sub for x in g)), None)
                bgroup = next((g for g in self.batch_modes if ch in g), None)
                if ch in self.summed_batch:
                    out.append(f"[{ch}]")
                elif bgroup is not None:
                    if len(bgroup) == 1:
                        out.append(f"[{ch}]")
                    elif all(x in sub for x in bgroup):
                        out.append("[(" + "".join(x for x in sub if x in bgroup) + ")]")
                        done.update(bgroup)
                    else:
                        out.append(f"[{ch}]")
                elif grp is not None:
                    out.append("(" + "".join(x for x in sub if x in grp) + ")")
                    done.update(grp)
                else:
                    out.append(ch)
            return "".join(out), ("^T" if transposed else "")

        if self.kind == KernelKind.EMPTY:
            return f"C_{{{c}}} = 0"
        (cs, _), (as_, at), (bs, bt) = mark(c, False), mark(a, self.trans_a), mark(b, self.trans_b)
        return f"C_{{{cs}}} = A_{{{as_}}}{at} B_{{{bs}}}{bt}"

    def explain(self) -> str:
        """A human-readable, multi-line description of the plan."""
        lines = [f"{self.notation()}  ->  {self.kind}"]
        if self.remedy != Remedy.NONE:
            lines[0] += f" (remedy: {self.remedy}, then {self.inner_kind})"
        if self.compiled != CompiledKernel.NONE:
            alt = f"{self.kind}" + (f", remedy {self.remedy}" if self.remedy != Remedy.NONE else "")
            lines[0] = f"{self.notation()}  ->  compiled {self.compiled} (BLAS alternative: {alt})"
        if self.estimates:
            both = [(name, sec) for name, sec in self.estimates if not name.endswith(" compute")]
            alone = [(name[:-len(" compute")], sec) for name, sec in self.estimates if name.endswith(" compute")]
            est = ", ".join(f"{name} {sec * 1e3:.3g} ms" for name, sec in both)
            why = ("the compiled kernel computes at least 5 % faster" if self.compiled != CompiledKernel.NONE
                   else "the compiled kernel would not compute 5 % faster than BLAS")
            lines.append(f"  choice: {why} (per core: {est})")
            if alone:  # (where both candidates are bandwidth-bound their estimates tie: the compute terms decide)
                lines.append("  compute alone (flops / (peak x efficiency)): "
                             + ", ".join(f"{name} {sec * 1e3:.3g} ms" for name, sec in alone))
        if self.parallel:
            how = ("the summed batch cut into pieces" if self.summed_batch else
                   "the batch cut into pieces" if self.batch_modes else "rows or columns cut into pieces")
            lines.append(f"  execution: parallel ({how}, {self.policy.workers} workers)")
        if self.summed_batch:
            lines.append(f"  summed batch: [{''.join(self.summed_batch)}] x{self.summed_size} (no copy: one product "
                         "per index, the products added in a fixed order)")
        if self.batch_modes:
            desc = ", ".join(
                f"[{mode}] x{size} (strides A {sa}, B {sb}, C {sc})"
                for mode, size, (sa, sb, sc) in zip(
                    self.batch_modes, self.batch_sizes, self.batch_strides, strict=True
                )
            )
            lines.append(f"  batch: {desc}")
        lines.append(
            f"  gemm: m={self.m} (modes {''.join(self.row_modes) or '-'}), n={self.n} "
            f"(modes {''.join(self.col_modes) or '-'}), k={self.k} (modes {''.join(self.contracted_modes) or '-'})"
        )
        lines.append(
            f"  flags: opA={'T' if self.trans_a else 'N'} lda={self.lda}, "
            f"opB={'T' if self.trans_b else 'N'} ldb={self.ldb}, ldc={self.ldc}"
        )
        if self.summed_modes:
            lines.append(f"  summed before the product: {''.join(self.summed_modes)}")
        lines.append(
            f"  cost: {self.flops:,} flops, {self.bytes_moved:,} bytes moved, {self.copies:,} elements copied, "
            f"dtype {self.dtype}, device {self.device}"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()


# ---------------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------------
def _chain(modes: tuple[str, ...], sizes: dict[str, int], stride_maps: list[dict[str, int] | None]):
    """Order ``modes`` outer->inner if they can be flattened in every operand of ``stride_maps``.

    ``None`` entries stand for operands whose layout is free (they will be copied or allocated).
    Returns the ordered tuple, or None when flattening is illegal.
    """
    if not modes:
        return ()
    fixed = [s for s in stride_maps if s is not None]
    if not fixed:
        return tuple(modes)
    ref = fixed[0]
    order = tuple(sorted(modes, key=lambda x: -ref[x]))
    for s in fixed:
        for outer, inner in itertools.pairwise(order):
            if s[outer] != s[inner] * sizes[inner]:
                return None
        if s[order[-1]] <= 0:
            return None
    return order


def _runs(modes: list[str], key: dict[str, int]) -> list[tuple[str, ...]]:
    """All contiguous runs (sub-chains) of ``modes`` sorted by descending ``key``, plus the empty run."""
    ordered = sorted(modes, key=lambda x: -key[x])
    out: list[tuple[str, ...]] = [()]
    for i in range(len(ordered)):
        for j in range(i + 1, len(ordered) + 1):
            out.append(tuple(ordered[i:j]))
    return out


def _blasable(s_rows: int, rows: int, s_cols: int, cols: int) -> bool:
    """numpy's test for handing a strided 2-D slice to BLAS: one unit stride, leading dim >= extent."""
    return (s_cols == 1 and s_rows >= max(cols, 1)) or (s_rows == 1 and s_cols >= max(rows, 1))


def _eff(x: int) -> float:
    return x / (x + _GEMM_HALF)


@dataclass
class _Candidate:
    M: tuple[str, ...]
    N: tuple[str, ...]
    K: tuple[str, ...]
    batch: tuple[str, ...]
    kind: KernelKind
    seconds: float
    c_order: tuple[str, ...] | None  # output layout (outer -> inner) when the output is allocated here


def _group_stride(group: tuple[str, ...], strides: dict[str, int] | None) -> int:
    if not group or strides is None:
        return 1
    return strides[group[-1]]


def _evaluate(
    M, N, K, batch, sizes, sA, sB, sC, free_c_cols_major: bool = False, single: bool = False
) -> tuple[KernelKind, float, tuple[bool, bool, int, int, int]] | None:
    """Check BLAS legality of one candidate and estimate its time. ``None`` strides mean 'free layout';
    ``single``: float32 operands."""
    m = math.prod(sizes[x] for x in M)
    n = math.prod(sizes[x] for x in N)
    k = math.prod(sizes[x] for x in K)
    nb = math.prod(sizes[x] for x in batch)
    # slice strides; a free layout is laid out as (rows, cols) row-major
    a_r, a_c = (_group_stride(M, sA), _group_stride(K, sA)) if sA is not None else (k, 1)
    b_r, b_c = (_group_stride(K, sB), _group_stride(N, sB)) if sB is not None else (n, 1)
    if sC is not None:
        c_r, c_c = _group_stride(M, sC), _group_stride(N, sC)
    else:
        c_r, c_c = (1, m) if free_c_cols_major else (n, 1)
    flops = 2 * m * n * k * nb
    if m > 1 and n > 1 and k > 1:
        if not (_blasable(a_r, m, a_c, k) and _blasable(b_r, k, b_c, n) and _blasable(c_r, m, c_c, n)):
            return None
        base = KernelKind.GEMM
        sec = flops / (_GEMM_PEAK * _eff(m) * _eff(n) * _eff(k)) + nb * _CALL
        # numpy runs a column-major output as its transpose: judge the shape BLAS actually sees
        rows, cols = (m, n) if (c_c == 1 and c_r >= n) else (n, m)
        if cols < _NARROW and rows > 4 * cols:  # tall-skinny output: ~1.35x slower than short-wide
            sec *= _NARROW_PENALTY
        if nb > 1 and not (c_c == 1 and c_r == n) and not (c_r == 1 and c_c == m):  # gaps between rows
            sec *= _GAPPED_OUT_PENALTY
        if single and min(m, n) >= _NARROW and _short_rows_from_large(m, n, a_c, b_r, rows == m):
            sec *= _SINGLE_SHORT_ROWS_PENALTY
    elif k > 1 and (m > 1 or n > 1):  # one side is a vector: GEMV on the matrix side
        if m > 1:
            if not (_blasable(a_r, m, a_c, k) and b_r > 0):
                return None
        elif not (_blasable(b_r, k, b_c, n) and a_c > 0):
            return None
        base = KernelKind.GEMV
        sec = flops / _VEC_RATE + nb * _CALL
        # the batch modes the matrix side lacks read each of its slices again for every GEMV over them
        mat = sA if m > 1 else sB
        again = math.prod(sizes[x] for x in batch if x not in mat) if mat is not None else 1
        if again > 1:
            sec += nb * (1 - 1 / again) * (m if m > 1 else n) * k * (4 if single else 8) / _STREAM_BW
    elif k > 1:
        base = KernelKind.DOT
        sec = flops / _VEC_RATE + nb * _CALL
    else:
        base = KernelKind.GER
        sec = m * n * nb / _GER_RATE + nb * _CALL
    if nb > 1 or batch:
        kind = {
            KernelKind.GEMM: KernelKind.STRIDED_BATCHED_GEMM if len(batch) == 1 else KernelKind.NESTED_BATCHED_GEMM,
            KernelKind.GEMV: KernelKind.BATCHED_GEMV,
            KernelKind.DOT: KernelKind.BATCHED_DOT,
            KernelKind.GER: KernelKind.BATCHED_GER,
        }[base]
    else:
        kind = base
    # transpose flags (row-major convention) and leading dimensions
    trans_a = not (a_c == 1 and (m == 1 or a_r >= k)) if m > 1 and k > 1 else False
    trans_b = not (b_c == 1 and (k == 1 or b_r >= n)) if k > 1 and n > 1 else False
    lda = a_c if trans_a else a_r
    ldb = b_c if trans_b else b_r
    ldc = c_r if c_c == 1 else c_c
    return kind, sec, (trans_a, trans_b, lda, ldb, ldc)


def _short_rows_from_large(m: int, n: int, a_c: int, b_r: int, rows_are_m: bool) -> bool:
    """Whether the larger operand of a GEMM, with the reduction as its unit stride, gives the columns of the
    output BLAS sees (its rows then run over the smaller extent)."""
    if m == n:
        return False
    if m > n:  # A is the larger: its rows are the output's rows unless BLAS sees the output transposed
        return a_c == 1 and not rows_are_m
    return b_r == 1 and rows_are_m


def _search(I, J, K, H, sizes, sA, sB, sC, c_pref, single: bool = False):  # noqa: E741
    """Best candidate for the given (possibly free = None) operand layouts, or None (``single``: float32)."""
    k_order = _chain(tuple(K), sizes, [sA, sB])
    if k_order is None:
        return None
    best = None
    key_a = sA if sA is not None else (sC if sC is not None else {x: 0 for x in I})
    key_b = sB if sB is not None else (sC if sC is not None else {x: 0 for x in J})
    for M in _runs(I, key_a):
        m_order = _chain(M, sizes, [sA, sC])
        if m_order is None:
            continue
        for N in _runs(J, key_b):
            n_order = _chain(N, sizes, [sB, sC])
            if n_order is None:
                continue
            batch = [x for x in H] + [x for x in I if x not in M] + [x for x in J if x not in N]
            # loop order: outermost in the output first when the output is fixed, else largest stride first
            ref = sC if sC is not None else {
                x: max(abs((sA or {}).get(x, 0)), abs((sB or {}).get(x, 0))) for x in batch
            }
            batch_t = tuple(sorted(batch, key=lambda x: -ref[x]))
            for cols_major in ((False, True) if sC is None else (False,)):
                res = _evaluate(m_order, n_order, k_order, batch_t, sizes, sA, sB, sC, cols_major, single)
                if res is None:
                    continue
                kind, sec, _ = res
                if len(batch_t) >= 1 and c_pref is not None and batch_t[0] != c_pref:
                    sec *= _OUTER_PREF
                c_order = None
                if sC is None:
                    c_order = batch_t + (n_order + m_order if cols_major else m_order + n_order)
                cand = _Candidate(m_order, n_order, k_order, batch_t, kind, sec, c_order)
                if best is None or cand.seconds < best.seconds - 1e-15:
                    best = cand
    return best


def _contiguous_strides(order: tuple[str, ...], sizes: dict[str, int]) -> dict[str, int]:
    strides, acc = {}, 1
    for x in reversed(order):
        strides[x] = acc
        acc *= sizes[x]
    return strides


def _fresh_strides(shape, layout: str) -> tuple[int, ...]:
    """The element strides of a fresh output of ``shape`` in ``layout`` ``"C"`` or ``"F"``."""
    c_st = _c_strides(tuple(shape) if layout == "C" else tuple(shape)[::-1])
    return c_st if layout == "C" else c_st[::-1]


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def _level3(kind: KernelKind) -> bool:
    return kind in (KernelKind.GEMM, KernelKind.STRIDED_BATCHED_GEMM, KernelKind.NESTED_BATCHED_GEMM)


# ---------------------------------------------------------------------------------------------------
# build_plan, in named steps
# ---------------------------------------------------------------------------------------------------
@dataclass
class _Problem:
    """The contraction as the planner sees it: index sizes and classes, and the kept operand layouts."""

    spec: Spec
    sizes: dict[str, int]
    out_shape: tuple[int, ...]
    size_a: int
    size_b: int
    sum_a: tuple[int, ...]  # axes of A summed before the product (they appear nowhere else)
    sum_b: tuple[int, ...]
    a_keep: str  # A's indices after pre-sums, size-1 ones dropped
    b_keep: str
    c_keep: str
    a_keep_shape: tuple[int, ...]
    b_keep_shape: tuple[int, ...]
    sA: dict[str, int]  # element strides of the kept indices
    sB: dict[str, int]
    H: list[str]  # batch (in A, B and C)
    I: list[str]  # noqa: E741  (in A and C)
    J: list[str]  # in B and C
    K: list[str]  # contracted (in A and B)
    single: bool = False  # float32 operands (:data:`_SINGLE_SHORT_ROWS_PENALTY`)


@dataclass
class _Choice:
    """The candidate the planner settled on, with its remedy and the layouts that became concrete."""

    cand: _Candidate
    remedy: Remedy
    seconds: float
    copies: int
    copy_a: bool
    copy_b: bool
    copy_out: bool
    sA: dict[str, int]
    sB: dict[str, int]
    sC: dict[str, int] | None
    summed: tuple[str, ...] = ()  # Remedy.SUMMED_BATCH's looped contracted modes


def _index_sizes(spec: Spec, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for sub, shape in ((spec.a, a_shape), (spec.b, b_shape)):
        for ch, n in zip(sub, shape, strict=True):
            if ch in sizes and sizes[ch] != n:
                raise ValueError(
                    f"index {ch!r} has size {sizes[ch]} in A but size {n} in B; "
                    "contracted and shared indices must have equal sizes"
                )
            sizes[ch] = n
    return sizes


def _kept(sub: str, shape, strides, summed_axes) -> tuple[dict[str, int], tuple[int, ...], str]:
    """An operand's indices after its pre-sums (a fresh C-ordered array) with size-1 axes dropped."""
    if summed_axes:
        rem = [i for i in range(len(sub)) if i not in summed_axes]
        sub = "".join(sub[i] for i in rem)
        shape = tuple(shape[i] for i in rem)
        strides = _c_strides(shape)
    keep = [i for i, n in enumerate(shape) if n != 1]
    return {sub[i]: strides[i] for i in keep}, tuple(shape[i] for i in keep), "".join(sub[i] for i in keep)


def _problem(spec: Spec, a_shape, a_strides, b_shape, b_strides) -> _Problem:
    """Step 1: sizes, pre-summed indices, kept layouts and the index classes of seed 000's notation."""
    sizes = _index_sizes(spec, a_shape, b_shape)
    # indices that appear in one operand only and not in the output are summed first (size-1 ones are
    # simply dropped with the other size-1 axes)
    sum_a = tuple(i for i, ch in enumerate(spec.a) if ch not in spec.b and ch not in spec.c and sizes[ch] != 1)
    sum_b = tuple(i for i, ch in enumerate(spec.b) if ch not in spec.a and ch not in spec.c and sizes[ch] != 1)
    sA, a_keep_shape, a_keep = _kept(spec.a, a_shape, a_strides, sum_a)
    sB, b_keep_shape, b_keep = _kept(spec.b, b_shape, b_strides, sum_b)
    c_keep = "".join(ch for ch in spec.c if sizes[ch] != 1)
    return _Problem(
        spec, sizes, tuple(sizes[ch] for ch in spec.c), math.prod(a_shape), math.prod(b_shape), sum_a, sum_b,
        a_keep, b_keep, c_keep, a_keep_shape, b_keep_shape, sA, sB,
        H=[x for x in c_keep if x in a_keep and x in b_keep],
        I=[x for x in c_keep if x in a_keep and x not in b_keep],
        J=[x for x in c_keep if x in b_keep and x not in a_keep],
        K=[x for x in a_keep if x in b_keep and x not in c_keep],
    )


def _output_strides(pb: _Problem, out_strides, out_layout: str) -> dict[str, int] | None:
    """Step 2: the output's strides when they are fixed (given ``out``, or C/F order), else None (free)."""
    if out_strides is not None:
        return {ch: st for ch, st, n in zip(pb.spec.c, out_strides, pb.out_shape, strict=True) if n != 1}
    if out_layout in ("C", "F"):
        order = tuple(pb.spec.c) if out_layout == "C" else tuple(reversed(pb.spec.c))
        full = _contiguous_strides(order, pb.sizes)
        return {ch: full[ch] for ch in pb.c_keep}
    return None


def _zero_copy(pb: _Problem, sC, free_out: bool) -> tuple[_Candidate | None, dict[str, int] | None]:
    """Step 3: the best candidate that copies nothing (and the output strides it implies)."""
    args = (pb.I, pb.J, pb.K, pb.H, pb.sizes, pb.sA, pb.sB)
    if not free_out:
        return _search(*args, sC, max(sC, key=lambda x: sC[x]) if sC else None, single=pb.single), sC
    c_pref = _contiguous_strides(tuple(pb.c_keep), pb.sizes)
    best_c = _search(*args, c_pref, pb.c_keep[0] if pb.c_keep else None, single=pb.single)
    best_free = _search(*args, None, None, single=pb.single)
    # prefer the C-ordered output unless the free layout is clearly (>10 %) faster
    if best_c is not None and (best_free is None or best_c.seconds <= 1.10 * best_free.seconds):
        return best_c, c_pref
    return best_free, None


def _remedies(pb: _Problem, chosen: _Candidate | None, sC, c_outer: str | None, itemsize: int,
              allow_copies: bool = True) -> _Choice:
    """Step 4: an exceptional case (no level-3 kernel without a copy): cost every remedy, take the cheapest.

    ``c_outer`` is the outermost index of an output whose layout was fixed by the caller (None otherwise).
    Without ``allow_copies`` only the zero-copy remedies (a batched GEMV on views, a summed batch) are allowed.
    """
    summed = _summed_batch(pb, sC, c_outer, itemsize)
    if not allow_copies:
        if chosen is None and summed is None:
            raise ValueError(f"copies='never' cannot be met for {pb.spec}: no evaluation on views reaches BLAS "
                             "with these strides; pass copies='auto'")
        if summed is not None and (chosen is None or summed[0] < chosen.seconds):
            return _Choice(summed[1], Remedy.SUMMED_BATCH, summed[0], 0, False, False, False, dict(pb.sA),
                           dict(pb.sB), sC, summed[2])
        assert chosen is not None
        return _Choice(chosen, Remedy.BATCHED_GEMV, chosen.seconds, 0, False, False, False, dict(pb.sA),
                       dict(pb.sB), sC)
    item_free = (pb.I, pb.J, pb.K, pb.H, pb.sizes)
    size_a, size_b, size_c = pb.size_a, pb.size_b, math.prod(pb.out_shape)
    options: list[tuple[float, Remedy, _Candidate, int, tuple[bool, bool, bool]]] = []
    if chosen is not None:
        options.append((chosen.seconds, Remedy.BATCHED_GEMV, chosen, 0, (False, False, False)))
    if summed is not None:
        options.append((summed[0], Remedy.SUMMED_BATCH, summed[1], 0, (False, False, False)))
    for which, size in (("A", size_a), ("B", size_b)):
        if (options and size > min(size_a, size_b) and size * itemsize > LARGER_COPY_BYTES):
            continue  # (the larger operand is copied only where nothing runs without a copy: see LARGER_COPY_BYTES)
        cand = _search(*item_free, None if which == "A" else pb.sA, None if which == "B" else pb.sB, sC, c_outer,
                       single=pb.single)
        if cand is not None:
            options.append((cand.seconds + 2 * size * itemsize / _COPY_BW,
                            Remedy.COPY_A if which == "A" else Remedy.COPY_B, cand, size,
                            (which == "A", which == "B", False)))
    if sC is not None:
        cand = _search(*item_free, pb.sA, pb.sB, None, None, single=pb.single)
        if cand is not None:
            options.append((cand.seconds + 2 * size_c * itemsize / _COPY_BW, Remedy.COPY_OUT, cand, size_c,
                            (False, False, True)))
    if not options:  # neither operand alone can be fixed: copy both (and the output if need be)
        cand = _search(*item_free, None, None, sC, c_outer, single=pb.single)
        flags = (True, True, False)
        if cand is None:
            cand = _search(*item_free, None, None, None, None, single=pb.single)
            flags = (True, True, True)
        if cand is None:  # pragma: no cover - free operands and output always admit a GEMM
            raise RuntimeError(f"internal error: no plan for {pb.spec}")
        options.append((cand.seconds, Remedy.COPY_A, cand, size_a + size_b, flags))
    seconds, remedy, cand, copies, (ca, cb, co) = min(options, key=lambda t: t[0])
    return _Choice(cand, remedy, seconds, copies, ca, cb, co, dict(pb.sA), dict(pb.sB), sC,
                   summed[2] if remedy == Remedy.SUMMED_BATCH and summed is not None else ())


#: an exceptional case copies its larger operand (the tensor, against a factor matrix) only when it is at most
#: this many bytes or nothing runs without a copy: the remedy is to copy the smaller operand (design notes). A
#: view of no unit-stride axis (``B[:, :, ::2]`` of 200 x 200 x 400) was copied whole (64 MB, the call's memory
#: 1.05x the input, HOOI's 1.12x), where the batched GEMV on views ran as fast or faster (one thread, medians
#: of 7: modes 0 / 1 / 2 17.8 / 18.9 / 12.7 ms against the copy's 21.4 / 18.4 / 15.3 ms)
LARGER_COPY_BYTES = 8 << 20
#: whether a summed batch may run matrix-vector products (one operand without free modes: ``abc,ac->b``, a
#: tensor's contraction with a matrix over two modes apart), which the planner had run by copying the tensor.
#: Measured against that copy remedy (two workers, medians of 11, float64): ``abc,ac->b`` on 200 x 180 x 160 9.8
#: -> 1.8 ms (one piece; einsum 1.7 ms), ``abc,ca->b`` 21.2 -> 1.8 ms, ``abcd,ad->bc`` and ``abcd,bd->ac`` on
#: 60 x 50 x 40 x 30 4.6 and 3.8 -> 1.2 ms, (1000, 10, 1000) 22.8 -> 4.0 ms (einsum 6.8 ms); no copy of the
#: tensor; a tiny (20, 30, 20) 15 -> 17 us
SUMMED_GEMV = True
#: the temporary of a summed batch (``Remedy.SUMMED_BATCH``): products of this many bytes at a time
SUMMED_TEMP_BYTES = 4 << 20
#: seconds a product of a summed batch costs beyond its flops: numpy's matmul runs a chunk of them in one
#: call, about 0.1 us apiece (measured: 200000 products of (4 x 10) @ (10 x 2) in 18.7 ms), where ``_CALL``
#: prices a separate BLAS call (the estimate had put that batch at 365 ms and chosen a 50 ms copy of A)
_SUMMED_ITEM = 0.1e-6
#: ... and once a call: its pieces, temporaries and sums in Python (about 15-25 us against a copy remedy's 10-23
#: us on operands of a few thousand elements, where a copy is cheaper)
_SUMMED_CALL = 20e-6
#: ... and the most bytes of the partial sums of its pieces (pieces run on the workers, added in order)
SUMMED_PARTIAL_BYTES = 32 << 20


def _summed_batch(pb: _Problem, sC, c_outer: str | None,
                  itemsize: int) -> tuple[float, _Candidate, tuple[str, ...]] | None:
    """The cheapest ``Remedy.SUMMED_BATCH`` evaluation, as (seconds, the candidate for one index of the looped
    modes, the looped modes outer to inner), or None.

    Where the contracted modes cannot be flattened into one group (``a`` and ``c`` of ``abc,acz->bz`` lie on
    either side of ``b`` in A), some of them (S) are looped instead: for each index of S the product of the
    slices is one GEMM (or batch of them) over the other contracted modes, and the products are summed. S is
    any run of contracted modes that flattens in A and B (one view axis) and leaves a level-3 product on views, or
    (one operand keeping no mode, ``SUMMED_GEMV``) a matrix-vector product.
    Its cost: the slice candidate's flops per index (at most at ``_VEC_RATE``: numpy runs a batch of tiny
    products far faster than the GEMM efficiency of tiny extents says) with ``_SUMMED_ITEM`` in place of a BLAS
    call's ``_CALL`` (one batched matmul runs a chunk of products), writing each product to a temporary and
    reading it back for the sum (``_STREAM_BW``), and ``_SUMMED_CALL`` once. Against copying the operand whose layout
    blocks the GEMM (a 400 MB tensor for the example at 1000 x 1000 x 50), it moves no operand and holds a few
    MB."""
    if len(pb.K) < 2 or not (pb.I or pb.J):
        return None
    best = None
    c_elems = math.prod(pb.out_shape)
    for S in _runs(pb.K, pb.sA):
        if not S or len(S) == len(pb.K):
            continue
        s_order = _chain(S, pb.sizes, [pb.sA, pb.sB])
        if s_order is None:
            continue
        rest = [x for x in pb.K if x not in S]
        sA = {x: v for x, v in pb.sA.items() if x not in S}
        sB = {x: v for x, v in pb.sB.items() if x not in S}
        cand = _search(pb.I, pb.J, rest, pb.H, pb.sizes, sA, sB, sC, c_outer, single=pb.single)
        if cand is None or not (_level3(cand.kind) or (SUMMED_GEMV and not (pb.I and pb.J)
                                                        and cand.kind in (KernelKind.GEMV, KernelKind.BATCHED_GEMV))):
            continue
        n_s = math.prod(pb.sizes[x] for x in S)
        nb = math.prod(pb.sizes[x] for x in cand.batch)
        flops = 2 * nb * math.prod(pb.sizes[x] for x in (*cand.M, *cand.N, *cand.K))
        # (one batched matmul call runs the products: no BLAS call's overhead each, and a tiny product at least
        # at a level-2 kernel's rate, where the GEMM efficiency of its tiny extents would price it far above)
        per = min(cand.seconds - nb * _CALL, flops / _VEC_RATE) + nb * _SUMMED_ITEM
        sec = _SUMMED_CALL + n_s * (per + 2 * c_elems * itemsize / _STREAM_BW)
        if best is None or sec < best[0]:
            best = (sec, cand, s_order)
    return best


def _concrete_layouts(pb: _Problem, ch: _Choice) -> None:
    """Step 5: free layouts become concrete: copied operands and an allocated output laid out for the kernel."""
    c = ch.cand
    if ch.copy_a:
        ch.sA = _contiguous_strides(tuple(x for x in c.batch if x in ch.sA) + c.M + c.K, pb.sizes)
    if ch.copy_b:
        ch.sB = _contiguous_strides(tuple(x for x in c.batch if x in ch.sB) + c.K + c.N, pb.sizes)
    if c.c_order is not None:
        ch.sC = _contiguous_strides(c.c_order, pb.sizes)


def _batch_groups(pb: _Problem, ch: _Choice) -> tuple[str, ...]:
    """Step 6: batch modes adjacent in every operand are coalesced into one flattened batch group."""
    groups: list[list[str]] = []
    for x in ch.cand.batch:
        if groups:
            y = groups[-1][-1]
            ok = True
            for smap in (ch.sA, ch.sB, ch.sC or {}):
                if (x in smap) != (y in smap) or (x in smap and smap[y] != smap[x] * pb.sizes[x]):
                    ok = False
            if ok:
                groups[-1].append(x)
                continue
        groups.append([x])
    return tuple("".join(g) for g in groups)


def _operand_layouts(pb: _Problem, ch: _Choice, batch_groups: tuple[str, ...]):
    """Step 7: how the executor views A, B and C as ``(*batch, rows, cols)`` (or copies them, for a remedy)."""
    c = ch.cand

    def layout(keep: str, keep_shape, groups, copy: bool) -> _OperandLayout:
        pos = {x: i for i, x in enumerate(keep)}
        summed = [x for x in ch.summed if x in pos]  # (a summed batch: one leading axis of A's and B's views)
        order = summed + [x for x in c.batch if x in pos] + [x for g in groups for x in g]
        perm = tuple(pos[x] for x in order)
        view_shape = ((math.prod(pb.sizes[x] for x in summed),) if summed else ()) + tuple(
            math.prod(pb.sizes[x] for x in bg) if bg[0] in pos else 1 for bg in batch_groups
        ) + tuple(math.prod(pb.sizes[x] for x in g) for g in groups)
        return _OperandLayout(tuple(keep_shape), perm, view_shape, perm if copy else None)

    return (layout(pb.a_keep, pb.a_keep_shape, (c.M, c.K), ch.copy_a),
            layout(pb.b_keep, pb.b_keep_shape, (c.K, c.N), ch.copy_b),
            layout(pb.c_keep, tuple(pb.sizes[x] for x in pb.c_keep), (c.M, c.N), ch.copy_out))


def _allocation_order(pb: _Problem, ch: _Choice, out_strides, out_layout: str) -> tuple[int, ...]:
    """Step 8: the axis order a fresh output is allocated in (size-1 axes last)."""
    spec = pb.spec
    if out_layout == "F" and out_strides is None:
        return tuple(reversed(range(len(spec.c))))
    if out_strides is not None:  # (a plan made for an out= and then called without one: a fresh output in that
        # out's axis order, which the plan's output views were worked out for; C order failed to reshape)
        return tuple(sorted(range(len(spec.c)), key=lambda i: (pb.sizes[spec.c[i]] == 1, -abs(out_strides[i]), i)))
    if ch.cand.c_order is not None and not ch.copy_out:
        pos_c = {x: i for i, x in enumerate(spec.c)}
        return tuple(pos_c[x] for x in ch.cand.c_order) + tuple(
            i for i, x in enumerate(spec.c) if pb.sizes[x] == 1)
    return tuple(range(len(spec.c)))


def build_plan(
    spec: Spec,
    a_shape: tuple[int, ...],
    a_strides: tuple[int, ...],
    b_shape: tuple[int, ...],
    b_strides: tuple[int, ...],
    dtype: str,
    itemsize: int,
    out_strides: tuple[int, ...] | None,
    out_layout: str,
    policy: ExecutionPolicy = _SERIAL,
    copies: str = "auto",
) -> ContractionPlan:
    """Plan ``spec`` for operands of the given shapes and element strides (see the module docstring);
    ``copies="never"``: zero-copy evaluations only."""
    pb = _problem(spec, a_shape, a_strides, b_shape, b_strides)
    pb.single = dtype == "float32"
    common: dict[str, Any] = dict(
        spec=str(spec), dtype=dtype, summed_modes=tuple(spec.a[i] for i in pb.sum_a) + tuple(
            spec.b[i] for i in pb.sum_b), shapes=(tuple(a_shape), tuple(b_shape), pb.out_shape),
        strides=(tuple(a_strides), tuple(b_strides), tuple(out_strides) if out_strides is not None else ()),
        policy=policy, _sum_a=pb.sum_a, _sum_b=pb.sum_b, out_layout=out_layout)
    size_c = math.prod(pb.out_shape)
    if size_c == 0 or any(pb.sizes[x] == 0 for x in spec.a + spec.b):
        order_e = tuple(range(len(spec.c)))
        return ContractionPlan(
            kind=KernelKind.EMPTY, remedy=Remedy.NONE, inner_kind=KernelKind.EMPTY, row_modes=(), col_modes=(),
            contracted_modes=(), batch_modes=(), batch_sizes=(), batch_strides=(), trans_a=False, trans_b=False,
            lda=0, ldb=0, ldc=0, m=0, n=0, k=0, flops=0, bytes_moved=size_c * itemsize, copies=0, est_seconds=0.0,
            _out_order=order_e if out_layout != "F" else order_e[::-1], **common,
        )
    sC = _output_strides(pb, out_strides, out_layout)
    c_outer = max(sC.items(), key=lambda kv: kv[1])[0] if sC else None
    best, sC = _zero_copy(pb, sC, free_out=out_strides is None and out_layout == "auto")
    if best is None or (pb.I and pb.J and pb.K and not _level3(best.kind)):
        choice = _remedies(pb, best, sC, c_outer, itemsize, allow_copies=copies != "never")
    else:
        choice = _Choice(best, Remedy.NONE, best.seconds, 0, False, False, False, dict(pb.sA), dict(pb.sB), sC)
    _concrete_layouts(pb, choice)
    c = choice.cand
    evaluated = _evaluate(c.M, c.N, c.K, c.batch, pb.sizes, choice.sA, choice.sB, choice.sC)
    if evaluated is None:  # pragma: no cover - the search checked this candidate's legality
        raise RuntimeError(f"internal error: the chosen plan for {spec} is not BLAS-legal")
    kind, _, (trans_a, trans_b, lda, ldb, ldc) = evaluated
    batch_groups = _batch_groups(pb, choice)
    if kind in (KernelKind.STRIDED_BATCHED_GEMM, KernelKind.NESTED_BATCHED_GEMM):
        kind = KernelKind.STRIDED_BATCHED_GEMM if len(batch_groups) == 1 else KernelKind.NESTED_BATCHED_GEMM
    sizes = pb.sizes
    nb_sizes = tuple(math.prod(sizes[x] for x in g) for g in batch_groups)
    la, lb, lc = _operand_layouts(pb, choice, batch_groups)
    m, n, k = (math.prod(sizes[x] for x in grp) for grp in (c.M, c.N, c.K))
    n_summed = math.prod(sizes[x] for x in choice.summed)
    flops = 2 * m * n * k * math.prod(nb_sizes) * n_summed
    base_bytes = (math.prod(a_shape) + math.prod(b_shape) + size_c) * itemsize
    plan = ContractionPlan(
        kind=KernelKind.EXCEPTIONAL if choice.remedy != Remedy.NONE else kind,
        remedy=choice.remedy,
        inner_kind=kind,
        row_modes=c.M,
        col_modes=c.N,
        contracted_modes=c.K,
        batch_modes=batch_groups,
        batch_sizes=nb_sizes,
        batch_strides=tuple((choice.sA.get(g[-1], 0), choice.sB.get(g[-1], 0),
                             choice.sC.get(g[-1], 0) if choice.sC else 0) for g in batch_groups),
        trans_a=trans_a,
        trans_b=trans_b,
        lda=lda,
        ldb=ldb,
        ldc=ldc,
        m=m,
        n=n,
        k=k,
        flops=flops,
        bytes_moved=base_bytes + 2 * choice.copies * itemsize,
        copies=choice.copies,
        est_seconds=choice.seconds,
        parallel=split_work(flops, dtype) >= CONTRACT_PARALLEL_FLOPS and policy.workers > 1,
        _a=la,
        _b=lb,
        _c=lc,
        _out_order=_allocation_order(pb, choice, out_strides, out_layout),
        summed_batch=choice.summed,
        summed_size=n_summed,
        **common,
    )
    plan = _consider_small_rank(plan, spec, a_shape, a_strides, b_shape, b_strides, out_strides, out_layout,
                                copies)
    plan = _consider_batched_dot(plan, spec, a_shape, a_strides, b_shape, b_strides, out_strides, out_layout)
    return _consider_rank_outer(plan, spec, a_shape, a_strides, b_shape, b_strides, copies)


# ---------------------------------------------------------------------------------------------------
# compiled small-rank TTM kernels, weighed against BLAS by the roofline cost model
# ---------------------------------------------------------------------------------------------------
#: a TTM of fewer flops stays on BLAS (the kernel's launch and the first-call compile are not worth it)
SMALL_RANK_MIN_FLOPS = MIN_PARALLEL_FLOPS
#: ... except the tiny-rows kernel's (:func:`_tiny_rows`: a few flops a byte) from this many: measured against
#: the planner's BLAS plans (Zen 4, interleaved medians of 31), float64 / float32 (256, 256, 3) at R = 2 (0.79
#: MFlop) 0.60 / 0.48x the time, (100000, 4) at R = 2 0.33 / 0.19x, (300, 300, 4) at R = 3 0.30 / 0.17x,
#: (512, 512, 3) at R = 2 0.44 / 0.38x; (128, 128, 3) at R = 1 (0.1 MFlop) 0.90 / 1.83x (fixed steps weigh)
SMALL_RANK_TINY_MIN_FLOPS = 1 << 19
#: whether the compiled kernels are weighed against a BLAS plan that copies the matrix (``Remedy.COPY_B``, or
#: ``COPY_A`` where the matrix comes first); they were not, so a tensor stored with a short mode outermost
#: (planar RGB: (1000, 1000, 3) with strides (1000, 1, 10^6)) contracted over it stayed on BLAS's batch of
#: matrix-vector products after a copy of the 3 x R matrix
MATRIX_COPY_KERNELS = True
#: whether the compiled kernels are weighed against a BLAS plan that copies the tensor (``Remedy.COPY_A``, or
#: ``COPY_B`` where the matrix comes first), the copy's seconds counted against BLAS; they were not, so a float32
#: (200, 200, 200, 3) contracted over its third mode at rank 2 copied all 24 million elements for a batch of
#: matrix-vector products (26-30 ms) where the kernel reads the tensor in place (3.2 ms)
TENSOR_COPY_KERNELS = True
#: BLAS's strided batch of GEMMs for :func:`~tuckerkit.engine._smallgemm.ttm_inner`'s layouts (a middle mode: one
#: GEMM of U^T against each slab's C columns) packs U again in every call, R x I elements for R x I x C
#: multiply-adds: its rate is taken as ``1 / (1 + BLAS_REPACK_COLS / C)`` of the constant's
BLAS_REPACK_COLS = 4.8
#: the compiled kernel must be estimated this much faster than BLAS to be chosen (noise in the constants)
_SMALL_RANK_MARGIN = 0.95


def _flattenable(axes: list[int], shape, strides) -> bool:
    """The axes (outer to inner) merge into one with the innermost axis's stride (size-1 axes ignored)."""
    axes = [i for i in axes if shape[i] > 1]
    return all(strides[p] == strides[q] * shape[q] for p, q in itertools.pairwise(axes))


def _ttm_layout(spec: Spec, a_shape, a_strides, b_strides, out_shape, out_strides, out_layout: str):
    """The small-rank kernel's view of a TTM-shaped contraction, or None when it does not apply.

    TTM-shaped: B is a matrix (k, z) or (z, k), k is contracted with one mode of A, z is new, every other
    mode of A goes to the output once. The axes of A before k in memory order must merge into one, those
    after k into one with unit stride (or none: then k is the unit-stride mode), and the output must be
    laid out the same way with z in k's place (a fresh output with ``out_layout="auto"`` is allocated so).
    Returns ``(x_perm, n_outer, out_perm, u_kz, fresh)``; ``fresh``: allocate the output as ``out_perm``.
    """
    a, b, c = spec.a, spec.b, spec.c
    if len(b) != 2 or len(set(a)) != len(a) or len(set(c)) != len(c) or b[0] == b[1]:
        return None
    shared = [x for x in b if x in a]
    if len(shared) != 1:
        return None
    k = shared[0]
    z = b[1] if b[0] == k else b[0]
    if k in c or z not in c or z in a or set(c) != (set(a) - {k}) | {z}:
        return None
    ka = a.index(k)
    if a_shape[ka] < 2 or any(st < 0 for st in a_strides) or any(st < 0 for st in b_strides):
        return None
    others = [i for i in range(len(a)) if i != ka]
    big = sorted((i for i in others if a_shape[i] > 1), key=lambda i: (-a_strides[i], i))
    ones = [i for i in others if a_shape[i] == 1]
    outer = [i for i in big if a_strides[i] > a_strides[ka]]
    inner = [i for i in big if a_strides[i] < a_strides[ka]]
    if len(outer) + len(inner) != len(big) or not _flattenable(outer, a_shape, a_strides):
        return None
    if inner and (a_strides[inner[-1]] != 1 or not _flattenable(inner, a_shape, a_strides)):
        return None
    if not inner and a_strides[ka] != 1:
        return None
    x_perm = tuple(ones + outer + [ka] + inner)
    out_perm = tuple(c.index(a[i]) if i != ka else c.index(z) for i in x_perm)
    n_outer = len(ones) + len(outer)
    if out_strides is None and out_layout == "auto":
        return x_perm, n_outer, out_perm, b[0] == k, True
    if out_strides is None:  # a fresh C- or F-ordered output must happen to have the kernel's layout
        out_strides = _fresh_strides(out_shape, out_layout)
    o = out_strides
    o_outer = [out_perm[j] for j in range(len(ones), n_outer)]
    o_inner = [out_perm[j] for j in range(n_outer + 1, len(out_perm))]
    if any(st < 0 for st in o) or not _flattenable(o_outer, out_shape, o):
        return None
    if o_inner and (o[o_inner[-1]] != 1 or not _flattenable(o_inner, out_shape, o)):
        return None
    oz = out_perm[n_outer]
    if o_inner and o[oz] < o[o_inner[0]] * out_shape[o_inner[0]]:
        return None
    return x_perm, n_outer, out_perm, b[0] == k, False


def _batched_dot_modes(spec: Spec):
    """``(z, k, m_modes)`` of a contraction shaped as a batched dot product, else None: B a matrix of modes k and
    z, both in A, k contracted and z kept; A's other modes (m) and z are the output's, each once."""
    a, b, c = spec.a, spec.b, spec.c
    if len(b) != 2 or b[0] == b[1] or len(set(a)) != len(a) or len(set(c)) != len(c):
        return None
    if not all(x in a for x in b):
        return None
    z = next((x for x in b if x in c), None)
    k = next((x for x in b if x not in c), None)
    if z is None or k is None:
        return None
    m_modes = [x for x in a if x not in (z, k)]
    if set(c) != set(m_modes) | {z} or len(c) != len(m_modes) + 1:
        return None
    return z, k, m_modes


def _batched_dot_layout(spec: Spec, a_shape, a_strides, b_shape, b_strides, out_shape, out_strides,
                        out_layout: str):
    """The compiled batched dot product's view of a contraction, or None where it does not apply: B a matrix of
    modes k and z, k contracted with one mode of A, z in A, B and the output, with unit stride in all three (or
    extent 1), A's other modes (m) kept in the output and merging into one axis in A and in the output (in A's
    memory order). Returns ``(x_perm, u_perm, out_perm, fresh)``; ``fresh``: allocate the output as
    ``out_perm``."""
    modes = _batched_dot_modes(spec)
    if modes is None:
        return None
    a, b, c = spec.a, spec.b, spec.c
    z, k, m_modes = modes
    if any(st < 0 for st in (*a_strides, *b_strides)):
        return None
    za, ka, zb, kb = a.index(z), a.index(k), b.index(z), b.index(k)
    if a_shape[za] > 1 and (a_strides[za] != 1 or b_strides[zb] != 1):
        return None
    m_axes = sorted((a.index(x) for x in m_modes), key=lambda i: (-a_strides[i], i))
    if not _flattenable(m_axes, a_shape, a_strides):
        return None
    x_perm = (*m_axes, ka, za)
    out_perm = (*(c.index(a[i]) for i in m_axes), c.index(z))
    if out_strides is None and out_layout == "auto":
        return x_perm, (kb, zb), out_perm, True
    if out_strides is None:  # a fresh C- or F-ordered output must happen to have the kernel's layout
        out_strides = _fresh_strides(out_shape, out_layout)
    o = out_strides
    if any(st < 0 for st in o) or (out_shape[out_perm[-1]] > 1 and o[out_perm[-1]] != 1):
        return None
    if not _flattenable(list(out_perm[:-1]), out_shape, o):
        return None
    return x_perm, (kb, zb), out_perm, False


#: a batched dot product of fewer flops stays on BLAS: the kernel's call costs about 14 us of Python beside BLAS's
#: 5 us (60 x 50 x 16 float64, 96 kFlop: 0.88x BLAS's speed, 0.5x einsum's)
BATCHED_DOT_MIN_FLOPS = 1 << 18


def _model_bound(nbytes: float, flops: float, dtype: str) -> float:
    """Seconds of a compiled streaming kernel in the cost model's own units (``_KERNEL_STREAM_BW``,
    ``_GEMM_PEAK``; twice the peak in single precision), to weigh against BLAS estimates made of the same
    constants: a choice that no calibration of the machine can flip."""
    peak = _GEMM_PEAK * (2 if dtype in ("float32", "complex64") else 1)
    return max(nbytes / _KERNEL_STREAM_BW, flops / peak)


def _consider_batched_dot(plan: ContractionPlan, spec: Spec, a_shape, a_strides, b_shape, b_strides,
                          out_strides, out_layout: str) -> ContractionPlan:
    """The plan with the compiled batched dot product (``tuckerkit.engine._batched_dot``) where it applies (see
    :func:`_batched_dot_layout`) and the roofline model puts it below BLAS's estimate. BLAS runs such a
    contraction as one dot product per (m, z), strided by z's extent (numpy's stacked ``matmul`` over tiny
    vectors); the kernel streams the tensor once. Measured (``benchmarks/batched_dot.py``: medians of 15
    interleaved calls, the helpers parked after each) against that BLAS plan: 1.3-1.7x faster on 200 x 200 x 10
    (``abz,bz->az``, ``abz,az->bz``), 1.7-2.8x on 200 x 200 x 50, 1000 x 100 x 32 and 60^3 x 10 (``abcz,cz->abz``,
    ``abcz,az->bcz``); against ``numpy.einsum`` 0.98-1.44x faster."""
    if plan.compiled != CompiledKernel.NONE or plan.kind == KernelKind.EMPTY or plan.remedy != Remedy.NONE:
        return plan
    if plan.dtype not in ("float32", "float64") or plan.flops < BATCHED_DOT_MIN_FLOPS:
        return plan
    swap = False
    lay = _batched_dot_layout(spec, a_shape, a_strides, b_shape, b_strides, plan.shapes[2], out_strides,
                              out_layout)
    if lay is None and len(spec.a) == 2:
        lay = _batched_dot_layout(Spec(spec.b, spec.a, spec.c), b_shape, b_strides, a_shape, a_strides,
                                  plan.shapes[2], out_strides, out_layout)
        swap = True
    if lay is None:
        return plan
    from tuckerkit.engine._batched_dot import MAX_Z

    x_perm, u_perm, out_perm, fresh = lay
    t_shape = b_shape if swap else a_shape
    if t_shape[x_perm[-1]] > MAX_Z:
        return plan
    from tuckerkit.engine._roofline import machine_roofline

    itemsize = 4 if plan.dtype == "float32" else 8
    nbytes = (math.prod(a_shape) + math.prod(b_shape) + math.prod(plan.shapes[2])) * itemsize
    roof = machine_roofline()
    t_comp = _model_bound(nbytes, plan.flops, plan.dtype)
    t_blas = plan.est_seconds
    estimates = (("compiled (model)", t_comp), (f"blas {plan.kind} (model)", t_blas),
                 ("roofline", roof.bound(nbytes, plan.flops, plan.dtype)))
    if t_comp >= _SMALL_RANK_MARGIN * t_blas:
        return dataclasses.replace(plan, estimates=estimates)
    layout = _BatchedDotLayout(x_perm, u_perm, out_perm, plan._out_order, swap)
    return dataclasses.replace(plan, compiled=CompiledKernel.BATCHED_DOT, estimates=estimates, _bd=layout,
                               bytes_moved=nbytes, est_seconds=t_comp,
                               _out_order=out_perm if fresh else plan._out_order)


def _rank_outer_layout(spec: Spec, a_shape, a_strides, b_strides):
    """The compiled rank-outer products' view of a contraction (:func:`~._batched_dot.rank_outer_gemv`), or None
    where it does not apply: A of three modes (m, k, z), B a matrix of k and z, the output of m and z; z
    outermost in A's memory with m and k C-contiguous beneath it (extents of at least 2: a smaller one is
    another kernel's shape). Returns ``(x_perm, u_perm, out_perm, axis)``: A's axes outer to inner then z, B's
    as (k, z), the output's as (m, z), and k's place among A's two inner axes. Any output strides."""
    modes = _batched_dot_modes(spec) if len(spec.a) == 3 else None
    if modes is None or min(a_shape) < 2 or any(st < 0 for st in (*a_strides, *b_strides)):
        return None
    a, b, c = spec.a, spec.b, spec.c
    z, k, (m,) = modes
    za, ka, ma = a.index(z), a.index(k), a.index(m)
    inner = sorted((ma, ka), key=lambda i: -a_strides[i])
    if a_strides[inner[1]] != 1 or a_strides[inner[0]] != a_shape[inner[1]] or \
            a_strides[za] != a_shape[ma] * a_shape[ka]:
        return None
    return (*inner, za), (b.index(k), b.index(z)), (c.index(m), c.index(z)), inner.index(ka)


#: the most bytes of a tensor the rank-outer products take: they run on one thread (two over the ranks took
#: 1.14-1.31x the time on partials fresh in L3), and beyond the caches BLAS's threads read faster. Measured on
#: the 2-core Zen 4 machine (medians of 15 interleaved warm calls, stop 79), the compiled loops over BLAS's batch
#: of GEMVs: 200 x 200 x 10 0.82-0.93x, 1000 x 1000 x 10 0.86-0.87x in float64 (80 MB) and 0.95-1.06x in
#: float32; 2000 x 1000 x 32 1.05 / 1.37x in float64 (512 MB), 0.89 / 1.02x in float32. Fresh from the pass that
#: wrote them (CP-ALS's sweeps) the small partials gain more: 0.13-0.14 against 0.3-0.47 ms on 200 x 200 x 10
RANK_OUTER_MAX_BYTES = 128 << 20


def _consider_rank_outer(plan: ContractionPlan, spec: Spec, a_shape, a_strides, b_shape, b_strides,
                         copies: str = "auto") -> ContractionPlan:
    """The plan with the compiled rank-outer products (``CompiledKernel.RANK_OUTER_DOT``) where they apply (see
    :func:`_rank_outer_layout`), the tensor holds at most ``RANK_OUTER_MAX_BYTES`` and the roofline bound is
    below BLAS's estimate for its batch of matrix-vector products. The matrix is read as (z, k) rows: copied
    once (``copies``) unless it already is; ``copies="never"`` then keeps BLAS."""
    if plan.compiled != CompiledKernel.NONE or plan.kind == KernelKind.EMPTY or plan.remedy != Remedy.NONE:
        return plan
    if plan.dtype not in ("float32", "float64") or plan.flops < BATCHED_DOT_MIN_FLOPS:
        return plan
    swap = False
    lay = _rank_outer_layout(spec, a_shape, a_strides, b_strides)
    if lay is None and len(spec.a) == 2:
        lay = _rank_outer_layout(Spec(spec.b, spec.a, spec.c), b_shape, b_strides, a_strides)
        swap = True
    if lay is None:
        return plan
    x_perm, u_perm, out_perm, axis = lay
    t_shape, m_shape, m_strides = (b_shape, a_shape, a_strides) if swap else (a_shape, b_shape, b_strides)
    itemsize = 4 if plan.dtype == "float32" else 8
    if math.prod(t_shape) * itemsize > RANK_OUTER_MAX_BYTES:
        return plan
    kb, zb = u_perm
    # (the layout has extents of at least 2: the matrix is (z, k) rows exactly when k is unit-strided and z
    # strided by k's extent)
    n_copied = 0 if m_strides[kb] == 1 and m_strides[zb] == m_shape[kb] else math.prod(m_shape)
    if n_copied and copies == "never":
        return plan
    from tuckerkit.engine._roofline import machine_roofline

    nbytes = (math.prod(a_shape) + math.prod(b_shape) + math.prod(plan.shapes[2])) * itemsize
    roof = machine_roofline()
    t_comp = _model_bound(nbytes + 2 * n_copied * itemsize, plan.flops, plan.dtype)
    t_blas = plan.est_seconds
    estimates = (("compiled (model)", t_comp), (f"blas {plan.kind} (model)", t_blas),
                 ("roofline", roof.bound(nbytes, plan.flops, plan.dtype)))
    if t_comp >= _SMALL_RANK_MARGIN * t_blas:
        return dataclasses.replace(plan, estimates=estimates)
    layout = _BatchedDotLayout(x_perm, u_perm, out_perm, plan._out_order, swap, axis)
    return dataclasses.replace(plan, compiled=CompiledKernel.RANK_OUTER_DOT, estimates=estimates, _bd=layout,
                               copies=n_copied, bytes_moved=nbytes + 2 * n_copied * itemsize, est_seconds=t_comp,
                               parallel=False)


def _gemv_reread_bytes(plan: ContractionPlan, itemsize: int) -> int:
    """The bytes a plan's batch of GEMVs reads beyond one pass over its operands: the matrix side once more
    for each further index of the batch modes it lacks (0 for any other plan).

    >>> import numpy as np
    >>> from tuckerkit.engine import ttm_plan
    >>> p = ttm_plan(np.ones((10, 10, 10, 10000), np.float32), np.ones((2, 10), np.float32), 0)
    >>> p.inner_kind.value, _gemv_reread_bytes(p, 4)
    ('batched_gemv', 40000000)
    """
    if plan.inner_kind != KernelKind.BATCHED_GEMV:
        return 0
    side = 0 if plan.m > 1 else 1  # the matrix is A when the GEMV's rows come from it, else B
    again = math.prod(size for size, st in zip(plan.batch_sizes, plan.batch_strides, strict=True) if st[side] == 0)
    matrix = plan.m * plan.k if side == 0 else plan.n * plan.k
    lacking = math.prod(plan.batch_sizes) // max(again, 1)
    return (again - 1) * matrix * lacking * itemsize


def _tiny_rows(lay, t_shape, t_strides, R: int, itemsize: int, out_shape, out_strides, out_layout: str) -> bool:
    """Whether a unit-stride TTM (:func:`_ttm_layout`'s ``lay``; the tensor's shape and strides in elements) runs
    :func:`~tuckerkit.engine._smallgemm.ttm_outer`'s tiny-rows kernel: its extents
    (:func:`~tuckerkit.engine._smallgemm.outer_tiny_style`), the rows of X back to back (the merged outer modes'
    stride is ``I``) and those of the output too (a fresh output in the kernel's order, or given strides with z
    unit-strided and the merged outer modes ``R`` apart)."""
    from tuckerkit.engine._smallgemm import outer_tiny_style

    x_perm, n_outer, out_perm, _, fresh = lay
    I = t_shape[x_perm[n_outer]]  # noqa: E741
    if not outer_tiny_style(R, itemsize, I):
        return False
    outer = [i for i in x_perm[:n_outer] if t_shape[i] > 1]
    if outer and t_strides[outer[-1]] != I:
        return False
    if fresh:
        return True
    if out_strides is None:  # (a fresh C- or F-ordered output, as _ttm_layout found it)
        out_strides = _fresh_strides(out_shape, out_layout)
    oz = out_perm[n_outer]
    o_outer = [out_perm[j] for j in range(n_outer) if out_shape[out_perm[j]] > 1]
    return (R == 1 or out_strides[oz] == 1) and (not o_outer or out_strides[o_outer[-1]] == R)


def _short_slabs(lay, t_shape, t_strides, R: int, itemsize: int) -> bool:
    """Whether a TTM with unit-stride modes after the contracted one (:func:`_ttm_layout`'s ``lay``; the tensor's
    shape and strides in elements) runs :func:`~tuckerkit.engine._smallgemm.ttm_inner`'s short-rows kernel: those
    modes' extent ``C`` in its range (:func:`~tuckerkit.engine._smallgemm.inner_short_style`) and the contracted
    mode's stride ``C`` (each slab's rows back to back)."""
    from tuckerkit.engine._smallgemm import inner_short_style

    x_perm, n_outer = lay[0], lay[1]
    C = math.prod(t_shape[i] for i in x_perm[n_outer + 1:])
    k = x_perm[n_outer]
    return inner_short_style(R, itemsize, C) and (t_shape[k] == 1 or t_strides[k] == C)


def _rank_outermost(spec: Spec, swap: bool, out_shape: tuple[int, ...], out_strides) -> bool:
    """Whether a given output (``out_strides``; None: a fresh one) has the matrix's free mode, the rank, outermost:
    the largest stride of its modes of more than one element (CP-ALS's partials, ``abc,cZ->abZ`` into Z-major
    memory)."""
    if out_strides is None:
        return False
    m = spec.a if swap else spec.b
    k = next((spec.c.index(ch) for ch in m if ch in spec.c), None)
    if k is None or out_shape[k] < 2:
        return False
    others = [abs(s) for j, (s, n) in enumerate(zip(out_strides, out_shape, strict=True)) if j != k and n > 1]
    return all(abs(out_strides[k]) > s for s in others)


def _consider_small_rank(plan: ContractionPlan, spec: Spec, a_shape, a_strides, b_shape, b_strides,
                         out_strides, out_layout: str, copies: str = "auto") -> ContractionPlan:
    """The plan with a compiled small-rank TTM kernel when the roofline cost model says it is faster."""
    if plan.dtype not in ("float32", "float64") or plan.kind == KernelKind.EMPTY:
        return plan
    if plan.flops < min(SMALL_RANK_MIN_FLOPS, SMALL_RANK_TINY_MIN_FLOPS):
        return plan
    # the tensor is A and the matrix B, or (the seed's Table II, ``mk,knp->mnp``) the other way round
    swap = False
    m_shape, m_strides = b_shape, b_strides
    lay = _ttm_layout(spec, a_shape, a_strides, b_strides, plan.shapes[2], out_strides, out_layout)
    if lay is None and len(spec.a) == 2:
        lay = _ttm_layout(Spec(spec.b, spec.a, spec.c), b_shape, b_strides, a_strides, plan.shapes[2], out_strides,
                          out_layout)
        swap, m_shape, m_strides = True, a_shape, a_strides
    if lay is None:
        return plan
    from tuckerkit.engine._roofline import machine_roofline
    from tuckerkit.engine._smallgemm import (
        BATCH_CALL_SECONDS,
        MAX_RANK,
        blas_efficiency,
        gemv_beats_inner,
        inner_u_heavy,
        kernel_efficiency,
        outer_reread_bytes,
        planned_beyond_max_rank,
        short_rows_to_blas,
        tiny_slabs_to_blas,
    )

    x_perm, n_outer, out_perm, u_kz, fresh = lay
    R = m_shape[1] if u_kz else m_shape[0]
    variant = CompiledKernel.TTM_INNER if n_outer + 1 < len(x_perm) else CompiledKernel.TTM_OUTER
    t_shape = b_shape if swap else a_shape
    t_strides = b_strides if swap else a_strides
    itemsize = 4 if plan.dtype == "float32" else 8
    # (the tiny-rows kernel: rows of X and of the output back to back; also in place of BLAS's copying remedies,
    # which the other kernels leave to BLAS)
    tiny = variant == CompiledKernel.TTM_OUTER and _tiny_rows(lay, t_shape, t_strides, R, itemsize, plan.shapes[2],
                                                              out_strides, out_layout)
    short = variant == CompiledKernel.TTM_INNER and _short_slabs(lay, t_shape, t_strides, R, itemsize)
    # (BLAS's remedies that copy only the matrix, not the tensor, leave the kernels in the running)
    matrix_copy = MATRIX_COPY_KERNELS and plan.remedy == (Remedy.COPY_A if swap else Remedy.COPY_B)
    # (and those that copy the tensor, the copy in BLAS's seconds)
    tensor_copy = TENSOR_COPY_KERNELS and plan.remedy == (Remedy.COPY_B if swap else Remedy.COPY_A)
    copied_ok = tiny or matrix_copy or tensor_copy
    if (plan.remedy not in (Remedy.NONE, Remedy.BATCHED_GEMV) and not copied_ok) or plan.flops < (
            SMALL_RANK_TINY_MIN_FLOPS if tiny else SMALL_RANK_MIN_FLOPS):
        return plan
    from tuckerkit.engine._simd import simd_supported

    if variant == CompiledKernel.TTM_INNER and not simd_supported():
        return plan  # its microkernels are written for AVX2 + FMA: elsewhere many times slower than BLAS
    columns = math.prod(t_shape[i] for i in x_perm[n_outer + 1:])  # the unit-stride extent (inner kernel)
    slabs = math.prod(t_shape[i] for i in x_perm[:n_outer])  # (the modes before the contracted one)
    contracted = t_shape[x_perm[n_outer]]
    # shapes the rates misjudge, left to a BLAS plan that copies nothing: a U that outweighs the tensor's rows
    # (BLAS's GEMM packs both in cache-sized panels), many slabs of a few short rows against OpenBLAS's small-matrix
    # kernels, a tensor-times-vector over a first mode or long rows (BLAS's GEMV streams them faster)
    if plan.remedy == Remedy.NONE and (
            short_rows_to_blas(R, itemsize, columns, contracted) if short else
            variant == CompiledKernel.TTM_INNER and (
                inner_u_heavy(slabs, contracted, columns, R, itemsize)
                or tiny_slabs_to_blas(slabs, contracted, columns, R, itemsize)
                or gemv_beats_inner(slabs, columns, R, itemsize))):
        return plan
    if R > MAX_RANK and not planned_beyond_max_rank(variant == CompiledKernel.TTM_INNER, itemsize, R,
                                                    columns * itemsize, math.prod(t_shape) * itemsize, contracted,
                                                    _rank_outermost(spec, swap, plan.shapes[2], out_strides)):
        return plan
    roof = machine_roofline()
    nbytes = (math.prod(a_shape) + math.prod(b_shape) + math.prod(plan.shapes[2])) * itemsize
    eff_comp = kernel_efficiency(variant.value, plan.dtype, R, columns, contracted,
                                 math.prod(t_shape) * itemsize, tiny, short)
    # (a batch of GEMMs pays BATCH_CALL_SECONDS a GEMM beyond its flops: many tiny slices are call-bound)
    calls = math.prod(plan.batch_sizes) if plan.inner_kind in (KernelKind.STRIDED_BATCHED_GEMM,
                                                                KernelKind.BATCHED_GEMV) else 1
    t_calls = (calls - 1) * BATCH_CALL_SECONDS + (2 * plan.copies * itemsize / _COPY_BW if tensor_copy else 0.0)
    # (an exceptional case's batch of GEMVs reads the tensor again for each batch index it lacks, e.g. once
    # per rank: added to BLAS's bytes and, those re-reads in seconds, to its compute term)
    reread_blas = _gemv_reread_bytes(plan, itemsize)
    eff_blas = blas_efficiency(variant.value, plan.dtype, R)
    if (variant == CompiledKernel.TTM_INNER and plan.inner_kind == KernelKind.STRIDED_BATCHED_GEMM and calls > 1
            and columns > 0):
        # (each GEMM of the batch packs U again, R x I elements, for R x I x columns multiply-adds: few columns
        # and the packing is most of the call: BLAS_REPACK_COLS)
        eff_blas /= 1.0 + BLAS_REPACK_COLS / columns
    t_blas = roof.estimate(nbytes + reread_blas, plan.flops, plan.dtype, eff_blas) + t_calls
    t_calls += reread_blas / roof.bandwidth
    # (the unit-stride kernel reads U once per tile of rows of X: again from memory where U is large, which
    # stalls the kernel: added to its time, not overlapped)
    reread = outer_reread_bytes(slabs, contracted, R, itemsize) if variant == CompiledKernel.TTM_OUTER else 0
    t_reread = reread / roof.bandwidth
    t_comp = roof.estimate(nbytes, plan.flops, plan.dtype, eff_comp) + t_reread
    peak = roof.peak(plan.dtype)
    estimates = (("compiled", t_comp), (f"blas {plan.kind}", t_blas),
                 ("roofline", roof.bound(nbytes, plan.flops, plan.dtype)),
                 ("compiled compute", plan.flops / (peak * eff_comp) + t_reread),
                 (f"blas {plan.kind} compute",
                  plan.flops / (peak * eff_blas) + t_calls))
    # both read the tensor once: where both are bandwidth-bound the estimates tie and the compute terms
    # decide (peak and bandwidth cancel, so the choice is the same on every machine and every calibration,
    # except where a batch's calls or the kernel's re-reads of U, in seconds, count against the peak's flops:
    # there the calibrated peak and bandwidth weigh them)
    c_comp = 1.0 / eff_comp + t_reread * peak / max(plan.flops, 1)
    c_blas = 1.0 / eff_blas + t_calls * peak / max(plan.flops, 1)
    if t_comp > t_blas or c_comp >= _SMALL_RANK_MARGIN * c_blas:
        return dataclasses.replace(plan, estimates=estimates)
    small = _SmallRankLayout(x_perm, n_outer, out_perm, u_kz, plan._out_order, swap, plan.copies, plan.bytes_moved)
    # the kernel needs U as (I, R) rows (inner) or (R, I) rows (outer), C-contiguous: one copy of the
    # matrix unless it already is
    wants_kz = variant == CompiledKernel.TTM_INNER
    ka, kb = (0, 1) if u_kz else (1, 0)
    st = m_strides
    contiguous = (st[kb] == 1 and st[ka] == m_shape[kb]) if wants_kz else (st[ka] == 1 and st[kb] == m_shape[ka])
    n_copied = 0 if contiguous else math.prod(m_shape)
    if n_copied and copies == "never":
        return dataclasses.replace(plan, estimates=estimates)
    return dataclasses.replace(plan, compiled=variant, estimates=estimates, _sr=small, copies=n_copied,
                               bytes_moved=nbytes + 2 * n_copied * itemsize, est_seconds=t_comp,
                               _out_order=out_perm if fresh else plan._out_order)
