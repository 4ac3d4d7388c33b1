"""Register-blocked microkernels for the small-rank TTM, written as LLVM IR (numba intrinsics).

LLVM does not vectorize a block of scalar accumulators held across a loop (its SLP pass leaves them scalar
and spills them), so the block is spelled out here with explicit vector types: ``RB`` rows of ``NV`` vectors
of ``VL`` lanes (``VL`` = 32 bytes over the itemsize: four float64 or eight float32, one AVX2 register;
LLVM splits or fuses them on other vector widths). One call computes

    ``y[yo + r * syr + j] = sum_i up[uo + i * RB + r] * x[xo + i * sxi + j]``,  ``r < RB``, ``j < NV * VL``,

with the sum over ``i`` in order, one fused multiply-add (``llvm.fma``) per term: the bits depend on nothing
but the operands. The accumulators stay in registers (``RB * NV + NV + 1 <= 16`` ymm for the blocks chosen
with 256-bit vectors), each row of ``x`` is loaded once for all ``RB`` rows, and ``up`` holds the block's
``RB`` columns of ``U`` packed row by row.
Where numba compiles for AVX-512 (:func:`wide_vectors`) each pair of a row's vectors is one 512-bit vector
(one 64-byte line of ``x``: half the loads and fused multiply-adds, the same lanes, the same bits), and the rows
go up to ``WIDE_RB`` (``RB + 2 <= 32`` zmm). Measured against two 256-bit vectors and blocks of six
(200^3 and 320x240x160, first and middle modes, two workers; the width in separate processes over three
interleaved rounds, the blocking in one process, medians of 15): 0.67-0.88x the time at R = 32, 0.78-1.0x
at R = 10 (one block of ten rows instead of two of five), the same bits in every case.

The first ``pfn`` iterations also prefetch ``px[pfo + i * pfs]`` into L2 (the caller's next chunk; a compare
and a branch in the others): a hint that changes no value. The ``g`` variants (``gblock``, ``ghalf``, ``gtri``:
three vectors a row, at most four rows; the two-vector ``gblock`` up to ``WIDE_RB`` rows; ``gquad``,
four, only where vectors are wide) read ``up`` at any
strides, ``up[uo + i * sui + r * sur]``: rows of a tensor broadcast against packed columns of a matrix
(:func:`tuckerkit.engine._smallgemm.ttm_outer`).

numba's disk cache keys a compiled kernel on its own source file: a change here reaches kernels already
cached only with a change to (or a touch of) the files that call these blocks (``_smallgemm.py``).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable


def simd_supported() -> bool:
    """Whether the CPU numba compiles for has AVX2 and FMA, which the microkernels are written for.

    Elsewhere LLVM would still compile them (vectors split, ``llvm.fma`` a call to the correctly rounded
    ``fma`` of libm: the same bits) but many times slower than BLAS, so the planner does not choose them.
    ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` (numba's own settings for the CPU it compiles for) are
    honoured: a ``generic`` target has neither.

    >>> isinstance(simd_supported(), bool)
    True
    """
    global _SIMD
    if _SIMD is None:
        _SIMD = _detect_simd()
    return _SIMD


_SIMD: bool | None = None


def _detect_simd() -> bool:
    return _detect_feature("avx2") and _detect_feature("fma")


#: vectors of one row of the full-width block (the block is NV * VL columns wide); a one-vector variant
#: takes the columns left over
NV = 2
#: the widest row block (RB * NV accumulators + NV row loads + one broadcast within 16 registers)
MAX_RB = 6


def _lanes(dtype) -> int:
    return 4 if dtype == types.float64 else 8


def wide_vectors() -> bool:
    """Whether the CPU numba compiles for has AVX-512F: then a block's two vectors of a row (one 64-byte cache
    line of ``x``) are one 512-bit vector, half the loads and fused multiply-adds for the same lanes. Each lane
    is the same chain of fused multiply-adds either way, so the bits do not change. Honours
    ``NUMBA_CPU_FEATURES``/``NUMBA_CPU_NAME`` as :func:`simd_supported` does.

    >>> isinstance(wide_vectors(), bool)
    True
    """
    global _WIDE
    if _WIDE is None:
        _WIDE = simd_supported() and _detect_feature("avx512f")
    return _WIDE


_WIDE: bool | None = None


def cpu_name() -> str:
    """The CPU numba compiles for, as LLVM names it (``znver5``, ``skylake-avx512``, ...): ``NUMBA_CPU_NAME``
    when set to a named target, else the host's (``generic`` where llvmlite cannot tell). A few of the planner's
    bounds were measured per CPU and are looked up by it."""
    global _CPU
    if _CPU is None:
        from numba.core import config

        cpu = getattr(config, "CPU_NAME", None)
        if cpu is None or cpu in ("host", ""):
            try:
                import llvmlite.binding as ll

                cpu = ll.get_host_cpu_name()
            except Exception:  # pragma: no cover - llvmlite without the query
                cpu = "generic"
        _CPU = str(cpu)
    return _CPU


_CPU: str | None = None


def _detect_feature(name: str) -> bool:
    """Whether numba compiles for a CPU with feature ``name``: its ``CPU_FEATURES`` setting
    (``NUMBA_CPU_FEATURES``) when given; none for a named target (``NUMBA_CPU_NAME``, e.g. ``generic`` for
    portable caches); else the host's features as numba itself reads them
    (``numba.core.codegen.get_host_cpu_features``: no AVX feature when ``NUMBA_ENABLE_AVX=0``, which numba
    also sets on CPUs it distrusts), the string its code and its disk cache are made for."""
    from numba.core import config

    features = getattr(config, "CPU_FEATURES", None)  # set from NUMBA_CPU_FEATURES at numba's import
    if features is not None:  # numba compiles for these features, whatever the host has
        return f"+{name}" in str(features).split(",")
    cpu = getattr(config, "CPU_NAME", None)
    if cpu is not None and cpu not in ("host", ""):
        return False  # a named target: not assumed to have the feature
    try:
        from numba.core.codegen import get_host_cpu_features

        return f"+{name}" in str(get_host_cpu_features()).split(",")
    except Exception:  # pragma: no cover - llvmlite without the query
        return False


def _counted_loop(builder: Any, name: str, init: list[Any], n: Any) -> tuple[Any, list[Any], Any, Any]:
    """Open a loop ``for iv in range(n)`` carrying the values ``init`` (vector accumulators): returns the
    induction variable, the carried values' phis (fed from ``init`` on entry), the block the loop exits to and
    the loop's head; the builder is left in the body, whose end the caller closes with :func:`_close_loop`."""
    i64 = ir.IntType(64)
    pre = builder.block
    head = builder.append_basic_block(f"{name}.head")
    body = builder.append_basic_block(f"{name}.body")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(head)
    builder.position_at_end(head)
    iv = builder.phi(i64)
    iv.add_incoming(ir.Constant(i64, 0), pre)
    phis = [builder.phi(v.type) for v in init]
    for p, v in zip(phis, init, strict=True):
        p.add_incoming(v, pre)
    builder.cbranch(builder.icmp_signed("<", iv, n), body, done)
    builder.position_at_end(body)
    return iv, phis, done, head


def _close_loop(builder: Any, iv: Any, phis: list[Any], new: list[Any], done: Any, head: Any) -> None:
    """End a :func:`_counted_loop`'s body: the carried values become ``new``, ``iv`` steps by one, and the
    builder moves past the loop."""
    latch = builder.block
    iv.add_incoming(builder.add(iv, ir.Constant(ir.IntType(64), 1)), latch)
    for p, v in zip(phis, new, strict=True):
        p.add_incoming(v, latch)
    _not_unrolled(builder, builder.branch(head))
    builder.position_at_end(done)


class _LoopID(ir.values.MDValue):
    """A loop's own metadata node for LLVM (``!n = distinct !{!n, hints...}``): llvmlite's ``add_metadata``
    makes neither a distinct node nor one that names itself."""

    def __init__(self, module: Any, hints: list[Any]) -> None:
        super().__init__(module, (), name=str(len(module.metadata)))
        self.operands = (self, *hints)

    def descr(self, buf: list[str]) -> None:
        buf.append("distinct ")
        super().descr(buf)

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def _not_unrolled(builder: Any, backedge: Any) -> None:
    """Mark the loop whose back edge is ``backedge`` not to be unrolled (``llvm.loop.unroll.disable``).

    A block's body is already a full register block; LLVM's unroller copied most of them three or four times
    (the inner TTM kernel's fused multiply-adds 468 -> 1554 in its machine code) and took a quarter of the
    kernel's LLVM time. Measured without the copies (the inner kernel compiled both ways in one process, 24 cases:
    first and middle modes of 200^3 and 320x240x160, ranks 10 / 16 / 32, both dtypes, two threads, shuffled
    rounds, medians of 11): 0.90-1.09x the time, median 0.996x (a second copy of the unrolled kernel against the
    first: 0.90-1.06x, median 0.998x), the same bits."""
    m = builder.module
    hint = m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")])
    backedge.set_metadata("llvm.loop", _LoopID(m, [hint]))


def _block_types(x: Any, up: Any, y: Any, px: Any) -> bool:
    return (isinstance(x, types.Array) and x.dtype in (types.float32, types.float64)
            and isinstance(up, types.Array) and isinstance(y, types.Array)
            and up.dtype == x.dtype and y.dtype == x.dtype and isinstance(px, types.Array))


def _block_sig(strided: bool, x: Any, up: Any, y: Any, px: Any, keys: int = 0) -> Any:
    i = types.int64
    if strided:
        return types.void(*([i] * keys), x, i, i, i, up, i, i, i, y, i, i, i, px, i, i, i)
    return types.void(*([i] * keys), x, i, i, i, up, i, y, i, i, i, px, i, i, i)


def _emit(context: Any, builder: Any, argtys: tuple, args: tuple, RB: int, NV: int, strided: bool,
          ahead: int) -> None:
    """Emit one register block's IR at the builder (see :func:`_make`); ``argtys``/``args``: the block's argument
    types and values, without the family's leading keys (:func:`_make_family`)."""
    if strided:
        xarr, xo_, sxi_, n_, uparr, uo_, sui_, sur_, yarr, yo_, syr_, acc_in_, pxarr, pfo_, pfs_, pfn_ = args
        ky, kp = 8, 12
    else:
        xarr, xo_, sxi_, n_, uparr, uo_, yarr, yo_, syr_, acc_in_, pxarr, pfo_, pfs_, pfn_ = args
        sui_, sur_ = ir.Constant(ir.IntType(64), RB), ir.Constant(ir.IntType(64), 1)
        ky, kp = 6, 10
    fty = context.get_value_type(argtys[0].dtype)
    VL, NVr = _lanes(argtys[0].dtype), NV
    if NV % 2 == 0 and wide_vectors():  # each cache line of the row as one 512-bit vector (the same lanes)
        VL, NVr = 2 * VL, NV // 2
    vty = ir.VectorType(fty, VL)
    i64, i32 = ir.IntType(64), ir.IntType(32)

    def data(k, val):
        return cgutils.create_struct_proxy(argtys[k])(context, builder, value=val).data

    xp = builder.gep(data(0, xarr), [xo_])
    upp = builder.gep(data(4, uparr), [uo_])
    yp = builder.gep(data(ky, yarr), [yo_])
    pxp = data(kp, pxarr)
    pfetch = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]),
        "llvm.prefetch.p0")
    fname = f"llvm.fma.v{VL}f{64 if argtys[0].dtype == types.float64 else 32}"
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty, vty, vty]), fname)
    zero = ir.Constant(vty, [ir.Constant(fty, 0.0)] * VL)
    undef = ir.Constant(vty, ir.Undefined)
    splat = ir.Constant(ir.VectorType(i32, VL), [0] * VL)
    # the sum so far: zero, or (acc_in) the partial sums the previous chunk of i left in y: the
    # chain of fused multiply-adds goes on from the same values, so chunking does not change a bit
    cont = builder.icmp_signed("!=", acc_in_, ir.Constant(i64, 0))
    init = []
    for r in range(RB):
        yrow = builder.gep(yp, [builder.mul(ir.Constant(i64, r), syr_)])
        init.append([builder.select(cont, builder.load(builder.bitcast(
            builder.gep(yrow, [ir.Constant(i64, v * VL)]), vty.as_pointer()), align=1), zero)
            for v in range(NVr)])
    # the start of each row of up (loop-invariant: one base register and the iteration's offset a load)
    ubase = [builder.gep(upp, [builder.mul(ir.Constant(i64, r), sur_)]) for r in range(RB)]
    iv, flat, done, head = _counted_loop(builder, "rb", [a for row in init for a in row], n_)
    acc = [flat[r * NVr:(r + 1) * NVr] for r in range(RB)]
    # the prefetch of the first pfn iterations: px[pfo + iv * pfs] into L2 (a hint that changes no
    # value: the caller's next rows, fetched while these compute); a compare and a branch where it has
    # none (the loop issues few integer operations beside its loads and fused multiply-adds)
    pfb = builder.append_basic_block("rb.pf")
    main = builder.append_basic_block("rb.main")
    builder.cbranch(builder.icmp_signed("<", iv, pfn_), pfb, main)
    builder.position_at_end(pfb)
    pptr = builder.gep(pxp, [builder.add(pfo_, builder.mul(iv, pfs_))])
    builder.call(pfetch, [builder.bitcast(pptr, ir.IntType(8).as_pointer()), ir.Constant(i32, 0),
                          ir.Constant(i32, 2), ir.Constant(i32, 1)])
    builder.branch(main)
    builder.position_at_end(main)
    xrow = builder.gep(xp, [builder.mul(iv, sxi_)])
    if ahead:
        # each line of this row's strip ``ahead`` strips on (the next: the NVr vectors after these) hinted
        # into L1: a hint that changes no value (see ``aquad8``)
        for v in range(NVr):
            nptr = builder.gep(xrow, [ir.Constant(i64, (ahead * NVr + v) * VL)])
            builder.call(pfetch, [builder.bitcast(nptr, ir.IntType(8).as_pointer()), ir.Constant(i32, 0),
                                  ir.Constant(i32, 3), ir.Constant(i32, 1)])
    xs = [builder.load(builder.bitcast(builder.gep(xrow, [ir.Constant(i64, v * VL)]), vty.as_pointer()),
                       align=1) for v in range(NVr)]
    uoff = builder.mul(iv, sui_)
    new = []
    for r in range(RB):
        u = builder.load(builder.gep(ubase[r], [uoff]))
        ub = builder.shuffle_vector(builder.insert_element(undef, u, ir.Constant(i32, 0)), undef, splat)
        new.append([builder.call(fma, [ub, xs[v], acc[r][v]]) for v in range(NVr)])
    _close_loop(builder, iv, flat, [a for row in new for a in row], done, head)
    for r in range(RB):
        yrow = builder.gep(yp, [builder.mul(ir.Constant(i64, r), syr_)])
        for v in range(NVr):
            ptr = builder.bitcast(builder.gep(yrow, [ir.Constant(i64, v * VL)]), vty.as_pointer())
            builder.store(acc[r][v], ptr, align=1)


def _make(RB: int, NV: int, strided: bool = False, ahead: int = 0):
    def _typed(x, up, y, px):
        if not _block_types(x, up, y, px):
            return None

        def codegen(context, builder, sig, args):
            _emit(context, builder, sig.args, args, RB, NV, strided, ahead)
            return context.get_dummy_value()

        return _block_sig(strided, x, up, y, px), codegen

    if strided:
        @intrinsic
        def gblock(typingctx, x, xo, sxi, n, up, uo, sui, sur, y, yo, syr, acc_in, px, pfo, pfs, pfn):
            return _typed(x, up, y, px)

        return gblock

    @intrinsic
    def block(typingctx, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn):
        return _typed(x, up, y, px)

    return block


def _make_family(members: tuple[tuple[int, int], ...], strided: bool = False, ahead: int = 0):
    """One intrinsic for a family of register blocks, ``fam(rb, <block's arguments>)`` (or, ``strided``,
    ``fam(nv, rb, ...)``): the block of ``rb`` rows (and ``nv`` vectors) of ``members`` (pairs ``(nv, rb)``), chosen
    by a switch in the emitted IR (``strided``: a switch on ``nv``, then one on ``rb``); any other pair raises
    ``ValueError``. The same IR at each call site as the if-chains over single blocks it replaces, without
    numba inlining a function holding such a chain at each call site: the inner TTM kernel compiles in less
    than half the time (see ``_smallgemm._block_quad``). One switch on ``nv * 64 + rb`` instead of the two cost
    ``ttm_outer``'s float64 register-blocked kernel 6-13 % of its time (measured on Zen 5; the cause not
    settled: its hot loops came out the same)."""
    keys = 2 if strided else 1
    if not strided and len({nv for nv, _ in members}) != 1:
        raise ValueError("a family keyed by its row count alone has one vector count")

    def _typed(k, x, up, y, px):
        if not (all(isinstance(t, types.Integer) for t in k) and _block_types(x, up, y, px)):
            return None

        def codegen(context, builder, sig, args):
            i64 = ir.IntType(64)
            bad = builder.append_basic_block("fam.bad")
            end = builder.append_basic_block("fam.end")
            nvs = list(dict.fromkeys(nv for nv, _ in members))
            outer = builder.switch(args[0], bad) if strided else None
            for nv in nvs:
                if outer is not None:  # a switch on nv, then one on rb
                    on_nv = builder.append_basic_block(f"fam.nv{nv}")
                    outer.add_case(ir.Constant(i64, nv), on_nv)
                    builder.position_at_end(on_nv)
                sw = builder.switch(args[keys - 1], bad)
                for nv2, rb in members:
                    if nv2 != nv:
                        continue
                    case = builder.append_basic_block(f"fam.{nv}x{rb}")
                    sw.add_case(ir.Constant(i64, rb), case)
                    builder.position_at_end(case)
                    _emit(context, builder, sig.args[keys:], args[keys:], rb, nv, strided, ahead)
                    builder.branch(end)
                if outer is None:
                    break
            builder.position_at_end(bad)
            context.call_conv.return_user_exc(builder, ValueError,
                                              ("internal error: no register block of that many rows",))
            builder.position_at_end(end)
            return context.get_dummy_value()

        return _block_sig(strided, x, up, y, px, keys), codegen

    if strided:
        @intrinsic
        def gfamily(typingctx, nv, rb, x, xo, sxi, n, up, uo, sui, sur, y, yo, syr, acc_in, px, pfo, pfs, pfn):
            return _typed((nv, rb), x, up, y, px)

        return gfamily

    @intrinsic
    def family(typingctx, rb, x, xo, sxi, n, up, uo, y, yo, syr, acc_in, px, pfo, pfs, pfn):
        return _typed((rb,), x, up, y, px)

    return family


block1, block2, block3, block4, block5, block6 = (_make(rb, NV) for rb in range(1, MAX_RB + 1))
half1, half2, half3, half4, half5, half6 = (_make(rb, 1) for rb in range(1, MAX_RB + 1))
#: the widest row block where a row's line is one 512-bit vector (:func:`wide_vectors`): twelve accumulators
#: (at least the eight chains of fused multiply-adds in flight that the two FMA units' latency asks; a rank-10
#: TTM in one block) in 32 registers; with two 256-bit vectors a row, ``MAX_RB`` = 6 (16 registers). The 7-12
#: row blocks are compiled on any CPU but chosen only where vectors are wide (narrow, they would spill)
WIDE_RB = 12
block7, block8, block9, block10, block11, block12 = (_make(rb, NV) for rb in range(7, WIDE_RB + 1))
half7, half8, half9, half10, half11, half12 = (_make(rb, 1) for rb in range(7, WIDE_RB + 1))
#: the same blocks with ``up`` read at any strides: ``up[uo + i * sui + r * sur]`` (two more arguments after
#: ``uo``): rows of a tensor broadcast against packed columns of ``U`` (:func:`~._smallgemm.ttm_outer`)
gblock1, gblock2, gblock3, gblock4, gblock5, gblock6 = (_make(rb, NV, True) for rb in range(1, MAX_RB + 1))
gblock7, gblock8, gblock9, gblock10, gblock11, gblock12 = (_make(rb, NV, True) for rb in range(7, WIDE_RB + 1))
ghalf1, ghalf2, ghalf3, ghalf4, ghalf5, ghalf6 = (_make(rb, 1, True) for rb in range(1, MAX_RB + 1))
#: four 256-bit vectors a row, chosen only where vectors are wide (:func:`wide_vectors`): two 512-bit vectors
#: (two cache lines of a row of ``up``), up to twelve rows (24 accumulators: a broadcast feeds two fused
#: multiply-adds, so the loads no longer bound the block). No wider strip: eight vectors a row in six rows (24
#: accumulators, four loads of ``up`` a step) left LLVM 22's register allocator, inside ``ttm_outer``'s kernel,
#: keeping about 20 of the accumulators on the stack, loaded and stored at every step (on Zen 5 the kernel ran
#: at 0.44x the rate of the strips of four, one thread in cache), though in a small function of its own the
#: same block kept them all in registers
gquad1, gquad2, gquad3, gquad4, gquad5, gquad6, gquad7, gquad8, gquad9, gquad10, gquad11, gquad12 = (
    _make(rb, 4, True) for rb in range(1, WIDE_RB + 1))
QUAD_RB = WIDE_RB
#: the packed (inner kernel's) blocks of four vectors a row: strips of two cache lines of ``x`` (24 accumulators
#: in twelve rows; only where vectors are wide, for R above 16, whose row blocks have 8-12 rows)
QUAD_MIN_RB = 8
quad8, quad9, quad10, quad11, quad12 = (_make(rb, 4) for rb in range(QUAD_MIN_RB, WIDE_RB + 1))
#: the same blocks that also hint each line of the row's next strip (the two lines after the strip's) into L1
#: at every step: :func:`~._smallgemm.ttm_inner` on long rows (a row cut into tiles: a first mode's rows lie a
#: row's length apart, far more than a page, and each strip's lines come to L1 from L2 as its first row block
#: reads them; the hardware's L1 prefetchers do not follow such strides) at ranks of 16 and more (two row blocks
#: and more). Measured on the Zen 5 machine (the first modes of 200^3 and 320x240x160, two threads, the kernel
#: with the hint compiled beside the committed one and a plain copy in one process, shuffled rounds, the same
#: bits): see ``_smallgemm._AHEAD_L1``
aquad8, aquad9, aquad10, aquad11, aquad12 = (_make(rb, 4, ahead=1) for rb in range(QUAD_MIN_RB, WIDE_RB + 1))
#: ... and strips of one line in blocks of 6-8 rows (R = 13-15 where vectors are wide: two blocks)
ablock6, ablock7, ablock8 = (_make(rb, NV, ahead=1) for rb in (6, 7, 8))
#: the families of blocks the kernels choose from by their row count (:func:`_make_family`): ``line_blocks(rb,
#: ...)`` is ``block<rb>`` for rb of 1-6, ``wide_line_blocks`` of 7-12 (only where vectors are wide), ``half_`` the
#: one-vector blocks, ``quad_blocks`` and ``aquad_blocks`` 8-12 rows of strips of two lines, ``aline_blocks`` the
#: one-line strips of 6-8 rows that hint the next strip
line_blocks = _make_family(tuple((NV, rb) for rb in range(1, MAX_RB + 1)))
wide_line_blocks = _make_family(tuple((NV, rb) for rb in range(MAX_RB + 1, WIDE_RB + 1)))
half_blocks = _make_family(tuple((1, rb) for rb in range(1, MAX_RB + 1)))
wide_half_blocks = _make_family(tuple((1, rb) for rb in range(MAX_RB + 1, WIDE_RB + 1)))
quad_blocks = _make_family(tuple((4, rb) for rb in range(QUAD_MIN_RB, WIDE_RB + 1)))
aquad_blocks = _make_family(tuple((4, rb) for rb in range(QUAD_MIN_RB, WIDE_RB + 1)), ahead=1)
aline_blocks = _make_family(tuple((NV, rb) for rb in (6, 7, 8)), ahead=1)
#: three vectors a row (12 accumulators in four rows): an odd number of vectors of columns without a
#: one-vector strip (six accumulators: half the fused multiply-adds in flight that the FMA units take)
gtri1, gtri2, gtri3, gtri4 = (_make(rb, 3, True) for rb in range(1, 5))

#: ... and the strided ones, ``gfamily(nv, rb, ...)``: ``gnarrow_blocks`` two vectors of 1-6 rows, three of 1-4,
#: one of 1-6; ``gwide_blocks`` (only where vectors are wide) two vectors of 7-12 rows, four of 1-12
gnarrow_blocks = _make_family(tuple((NV, rb) for rb in range(1, MAX_RB + 1)) + tuple((3, rb) for rb in range(1, 5))
                              + tuple((1, rb) for rb in range(1, MAX_RB + 1)), strided=True)
gwide_blocks = _make_family(tuple((NV, rb) for rb in range(WIDE_RB, MAX_RB, -1))
                            + tuple((4, rb) for rb in range(WIDE_RB, 0, -1)), strided=True)

def _make_prefetch(locality: int):
    @intrinsic
    def prefetch(typingctx, x, i):
        if not isinstance(x, types.Array):
            return None

        def codegen(context, builder, sig, args):
            arr, idx = args
            ptr = cgutils.create_struct_proxy(sig.args[0])(context, builder, value=arr).data
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]),
                "llvm.prefetch.p0")
            builder.call(fn, [builder.bitcast(builder.gep(ptr, [idx]), ir.IntType(8).as_pointer()),
                              ir.Constant(i32, 0), ir.Constant(i32, locality), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(x, types.int64), codegen

    return prefetch


#: ``prefetch(x, i)``: hint the cache line holding ``x[i]`` (a 1-D array) into L1; no effect on the result,
#: for any ``i``
prefetch = _make_prefetch(3)
#: ``prefetch_l2(x, i)``: the same hint into L2 only (the next chunk of a tile, fetched while this one computes)
prefetch_l2 = _make_prefetch(2)


def _make_pack(NV: int):
    @intrinsic
    def pack_row(typingctx, x, xo, pk, po, ps, ns):
        return _pack_typed(NV, x, pk)

    return pack_row


def _pack_typed(NV, x, pk):
    """``pk[po + s * ps + j] = x[xo + s * W + j]`` for ``s < ns``, ``j < W`` (``W = NV * VL``: one strip):
    one row of a tile copied strip by strip into the packed buffer, a vector at a time."""
    if not (isinstance(x, types.Array) and x.dtype in (types.float32, types.float64)
            and isinstance(pk, types.Array) and pk.dtype == x.dtype):
        return None

    def codegen(context, builder, sig, args):
        xarr, xo_, pkarr, po_, ps_, ns_ = args
        fty = context.get_value_type(sig.args[0].dtype)
        VL = _lanes(sig.args[0].dtype)
        vty = ir.VectorType(fty, VL)
        i64 = ir.IntType(64)
        xp = builder.gep(cgutils.create_struct_proxy(sig.args[0])(context, builder, value=xarr).data, [xo_])
        pp = builder.gep(cgutils.create_struct_proxy(sig.args[2])(context, builder, value=pkarr).data, [po_])
        sv, _, done, head = _counted_loop(builder, "pk", [], ns_)
        src = builder.gep(xp, [builder.mul(sv, ir.Constant(i64, NV * VL))])
        dst = builder.gep(pp, [builder.mul(sv, ps_)])
        for v in range(NV):
            val = builder.load(builder.bitcast(builder.gep(src, [ir.Constant(i64, v * VL)]), vty.as_pointer()), align=1)
            builder.store(val, builder.bitcast(builder.gep(dst, [ir.Constant(i64, v * VL)]), vty.as_pointer()), align=1)
        _close_loop(builder, sv, [], [], done, head)
        return context.get_dummy_value()

    i = types.int64
    return types.void(x, i, pk, i, i, i), codegen


#: ``pack_row(x, xo, pk, po, ps, ns)``: ``pk[po + s * ps + j] = x[xo + s * W + j]`` for ``s < ns``, ``j < W``
#: (one strip of two 256-bit vectors, ``W = 2 * VL``): a row of a tile copied strip by strip into the packed
#: buffer, a vector at a time; ``pack_row4`` the same for strips of four vectors
pack_row = _make_pack(NV)
pack_row4 = _make_pack(2 * NV)


def _stack_matrix(typingctx, rows, cols, like):
    """A C-contiguous ``(rows, cols)`` scratch array of ``like``'s dtype (an array or a scalar) on the calling
    kernel's stack, uninitialized, valid until the kernel returns: a kernel's work arrays without numba's
    runtime (NRT: its allocator, the ``numba.np.arrayobj`` import and the runtime's set-up in the first call
    of a process), and, unlike arrays passed in, known to LLVM not to alias the kernel's arguments (a row
    solve vectorizes as with ``np.empty``: 2-3.5x faster than with scratch arrays passed in). Call it once at
    the top of a kernel, outside its loops, for a few kilobytes (the caller bounds ``rows * cols``): the
    space is the thread's stack."""
    dt = like.dtype if isinstance(like, types.Array) else like
    if not isinstance(rows, types.Integer) or not isinstance(cols, types.Integer) or \
            dt not in (types.float32, types.float64):
        return None
    aryty = types.Array(dt, 2, "C")

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        r, c = (builder.sext(a, i64) if a.type.width < 64 else a for a in args[:2])
        lty = context.get_data_type(dt)
        ptr = builder.alloca(lty, size=builder.mul(r, c))
        ptr.align = 64
        size = context.get_constant(types.intp, context.get_abi_sizeof(lty))
        ary = context.make_array(aryty)(context, builder)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        ary.nitems = builder.mul(r, c)
        ary.itemsize = size
        ary.data = ptr
        ary.shape = cgutils.pack_array(builder, [r, c])
        ary.strides = cgutils.pack_array(builder, [builder.mul(c, size), size])
        return ary._getvalue()

    return aryty(rows, cols, like), codegen


#: ``stack_matrix(rows, cols, like)`` inside a kernel (:func:`_stack_matrix`)
stack_matrix: Any = intrinsic(_stack_matrix)


#: the ranks of the transposed-tile kernel (:func:`_make_tr`; :func:`tuckerkit.engine._smallgemm.outer_tr_style`):
#: float32 up to ``TR_MAX_RANK`` (16 columns of the block and R accumulators in 32 registers), float64 up to
#: ``TR_MAX_RANK_F64`` (8 columns)
TR_MIN_RANK = 3
TR_MAX_RANK = 15
TR_MAX_RANK_F64 = 20


def _transpose_ir(builder: Any, v: list[Any], L: int) -> list[Any]:
    """The ``L x L`` block of ``L`` vectors ``v`` (``L`` lanes each) transposed: ``log2 L`` rounds of two-source
    shuffles, block ``(a, j)`` swapping with ``(j, a)``, halves first; vector ``j`` of the result holds lane ``j``
    of every vector of ``v``."""
    i32 = ir.IntType(32)
    v = list(v)
    hh = L // 2
    while hh >= 1:
        lo = ir.Constant(ir.VectorType(i32, L), [q if q & hh == 0 else L + q - hh for q in range(L)])
        hi = ir.Constant(ir.VectorType(i32, L), [q + hh if q & hh == 0 else L + q for q in range(L)])
        nv = list(v)
        for p in range(L):
            if p & hh == 0:
                nv[p] = builder.shuffle_vector(v[p], v[p + hh], lo)
                nv[p + hh] = builder.shuffle_vector(v[p], v[p + hh], hi)
        v = nv
        hh //= 2
    return v


@intrinsic
def _tr_block(typingctx, src, so, ss, dst, do, ds, nr):
    """``dst[do + p * ds + q] = src[so + q * ss + p]`` for ``q < L`` and ``p < nr`` (``L`` the lanes of one 512-bit
    vector, ``nr <= L``): ``L`` vectors of ``src`` loaded, transposed in registers (:func:`_transpose_ir`) and
    the first ``nr`` stored. The source's ``L`` runs of ``L`` elements must lie inside it; the values are
    moved, not computed (the same bits)."""
    if not (isinstance(src, types.Array) and src.dtype in (types.float32, types.float64)
            and isinstance(dst, types.Array) and dst.dtype == src.dtype):
        return None

    def codegen(context, builder, sig, args):
        sarr, so_, ss_, darr, do_, ds_, nr_ = args
        dt = sig.args[0].dtype
        L = 512 // (64 if dt == types.float64 else 32)
        vty = ir.VectorType(context.get_value_type(dt), L)
        i64 = ir.IntType(64)

        def c(v):
            return ir.Constant(i64, v)

        sp = cgutils.create_struct_proxy(sig.args[0])(context, builder, value=sarr).data
        dp = cgutils.create_struct_proxy(sig.args[3])(context, builder, value=darr).data
        rows = [builder.load(builder.bitcast(builder.gep(sp, [builder.add(so_, builder.mul(c(q), ss_))]),
                                             vty.as_pointer()), align=1) for q in range(L)]
        cols = _transpose_ir(builder, rows, L)
        for p in range(L):
            yes = builder.append_basic_block(f"trb.st{p}")
            nxt = builder.append_basic_block(f"trb.nx{p}")
            builder.cbranch(builder.icmp_signed(">", nr_, c(p)), yes, nxt)
            builder.position_at_end(yes)
            at = builder.add(do_, builder.mul(c(p), ds_))
            builder.store(cols[p], builder.bitcast(builder.gep(dp, [at]), vty.as_pointer()), align=1)
            builder.branch(nxt)
            builder.position_at_end(nxt)
        return context.get_dummy_value()

    i = types.int64
    return types.void(src, i, i, dst, i, i, i), codegen


tr_block: Any = _tr_block  # (called from compiled code with the arguments after typingctx)


@intrinsic
def _copy_run(typingctx, src, so, dst, do, n):
    """``dst[do + j] = src[so + j]`` for ``j < n``: whole 512-bit vectors, then one masked load and store for
    the rest (nothing read or written past the run); values moved exactly."""
    if not (isinstance(src, types.Array) and src.dtype in (types.float32, types.float64)
            and isinstance(dst, types.Array) and dst.dtype == src.dtype):
        return None

    def codegen(context, builder, sig, args):
        sarr, so_, darr, do_, n_ = args
        dt = sig.args[0].dtype
        bits = 64 if dt == types.float64 else 32
        L = 512 // bits
        fty = context.get_value_type(dt)
        vty = ir.VectorType(fty, L)
        i64, i32 = ir.IntType(64), ir.IntType(32)
        mty = ir.VectorType(ir.IntType(1), L)
        sp = cgutils.create_struct_proxy(sig.args[0])(context, builder, value=sarr).data
        dp = cgutils.create_struct_proxy(sig.args[2])(context, builder, value=darr).data
        nfull = builder.sdiv(n_, ir.Constant(i64, L))
        k, _, done, head = _counted_loop(builder, "cr", [], nfull)
        off = builder.mul(k, ir.Constant(i64, L))
        v = builder.load(builder.bitcast(builder.gep(sp, [builder.add(so_, off)]), vty.as_pointer()), align=1)
        builder.store(v, builder.bitcast(builder.gep(dp, [builder.add(do_, off)]), vty.as_pointer()), align=1)
        _close_loop(builder, k, [], [], done, head)
        off = builder.mul(nfull, ir.Constant(i64, L))
        rest = builder.sub(n_, off)
        yes = builder.append_basic_block("cr.tail")
        end = builder.append_basic_block("cr.end")
        builder.cbranch(builder.icmp_signed(">", rest, ir.Constant(i64, 0)), yes, end)
        builder.position_at_end(yes)
        mask = _lanes_below(builder, rest, L)
        mload = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vty, [vty.as_pointer(), i32, mty, vty]), f"llvm.masked.load.v{L}f{bits}.p0")
        mstore = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), i32, mty]),
            f"llvm.masked.store.v{L}f{bits}.p0")
        zero = ir.Constant(vty, [ir.Constant(fty, 0.0)] * L)
        v = builder.call(mload, [builder.bitcast(builder.gep(sp, [builder.add(so_, off)]), vty.as_pointer()),
                                 ir.Constant(i32, 1), mask, zero])
        builder.call(mstore, [v, builder.bitcast(builder.gep(dp, [builder.add(do_, off)]), vty.as_pointer()),
                              ir.Constant(i32, 1), mask])
        builder.branch(end)
        builder.position_at_end(end)
        return context.get_dummy_value()

    i = types.int64
    return types.void(src, i, dst, i, i), codegen


copy_run: Any = _copy_run  # (called from compiled code with the arguments after typingctx)


def _float_arrays(x: Any, *others: Any) -> bool:
    """Whether ``x`` is a float32 / float64 array type and every one of ``others`` an array of its dtype (the
    typing check of the tile intrinsics)."""
    return (isinstance(x, types.Array) and x.dtype in (types.float32, types.float64)
            and all(isinstance(o, types.Array) and o.dtype == x.dtype for o in others))


def _wide_types(context: Any, dt: Any) -> tuple[int, int, Any, Any]:
    """The bits of ``dt`` (float32 / float64), the lanes of a 512-bit vector of it, its LLVM type and that
    vector's."""
    bits = 64 if dt == types.float64 else 32
    fty = context.get_value_type(dt)
    return bits, 512 // bits, fty, ir.VectorType(fty, 512 // bits)


def _rows_loop(builder: Any, name: str, rp: list[Any], n: Any, L: int, bits: int, vty: Any, init: list[Any],
               step: Any, prefetch: Any) -> list[Any]:
    """The sums of a sweep along rows of ``n`` elements from ``rp`` (row pointers): ``step(acc, rows, i0,
    live)`` on each whole ``L``-element vector of every row (``live`` None; ``prefetch(i0)`` after the step's
    loads), then once on the ``n % L`` elements left, loaded masked (nothing read past a row, zeros beyond;
    ``live`` that count), the carried values starting at ``init``."""
    i64, i32 = ir.IntType(64), ir.IntType(32)
    mload = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vty, [vty.as_pointer(), i32, ir.VectorType(ir.IntType(1), L), vty]),
        f"llvm.masked.load.v{L}f{bits}.p0")
    zero = ir.Constant(vty, [ir.Constant(vty.element, 0.0)] * L)
    nfull = builder.sdiv(n, ir.Constant(i64, L))
    tail = builder.sub(n, builder.mul(nfull, ir.Constant(i64, L)))
    k, acc, done, head = _counted_loop(builder, name, init, nfull)
    i0 = builder.mul(k, ir.Constant(i64, L))
    rows = [builder.load(builder.bitcast(builder.gep(p, [i0]), vty.as_pointer()), align=1) for p in rp]
    prefetch(i0)
    _close_loop(builder, k, acc, step(acc, rows, i0, None), done, head)
    tail_b = builder.append_basic_block(f"{name}.tail")
    fin = builder.append_basic_block(f"{name}.fin")
    done_end = builder.block
    builder.cbranch(builder.icmp_signed(">", tail, ir.Constant(i64, 0)), tail_b, fin)
    builder.position_at_end(tail_b)
    i0 = builder.mul(nfull, ir.Constant(i64, L))
    mask = _lanes_below(builder, tail, L)
    rows = [builder.call(mload, [builder.bitcast(builder.gep(p, [i0]), vty.as_pointer()), ir.Constant(i32, 1),
                                 mask, zero]) for p in rp]
    tnew = step(acc, rows, i0, tail)
    tail_end = builder.block
    builder.branch(fin)
    builder.position_at_end(fin)
    sums = []
    for a, t in zip(acc, tnew, strict=True):
        ph = builder.phi(vty)
        ph.add_incoming(a, done_end)
        ph.add_incoming(t, tail_end)
        sums.append(ph)
    return sums


def _row_ptrs(builder: Any, xp: Any, base: Any, n: Any, stride: Any, count: int) -> list[Any]:
    """Pointers to ``count`` rows at ``xp[base + a * stride]``, the rows from ``n`` on repeating row ``n - 1``
    (a tile's rows past the tensor's end: computed, not stored)."""
    i64 = ir.IntType(64)
    last = builder.sub(n, ir.Constant(i64, 1))
    return [builder.gep(xp, [builder.add(base, builder.mul(builder.select(
        builder.icmp_signed("<", ir.Constant(i64, a), n), ir.Constant(i64, a), last), stride))])
        for a in range(count)]


def _prefetch_rows(builder: Any, ptrs: list[Any], offs: list[Any], live: Any, name: str) -> None:
    """Prefetch into L2 the line of element ``off`` of each row in ``ptrs``, for each ``off`` of ``offs``, where
    ``live`` (the rows ahead, an int64) is positive: a hint that changes no value."""
    i32, i8p = ir.IntType(32), ir.IntType(8).as_pointer()
    pfetch = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
    yes = builder.append_basic_block(f"{name}.pf")
    no = builder.append_basic_block(f"{name}.nopf")
    builder.cbranch(builder.icmp_signed(">", live, ir.Constant(ir.IntType(64), 0)), yes, no)
    builder.position_at_end(yes)
    for p in ptrs:
        for off in offs:
            builder.call(pfetch, [builder.bitcast(builder.gep(p, [off]), i8p), ir.Constant(i32, 0),
                                  ir.Constant(i32, 2), ir.Constant(i32, 1)])
    builder.branch(no)
    builder.position_at_end(no)


def _lanes_below(builder: Any, n: Any, L: int) -> Any:
    """The mask of the lanes ``j < n`` (``n`` an int64) of an ``L``-lane vector."""
    i64, i32 = ir.IntType(64), ir.IntType(32)
    vi = ir.VectorType(i64, L)
    vundef = ir.Constant(vi, ir.Undefined)
    nv = builder.shuffle_vector(builder.insert_element(vundef, n, ir.Constant(i32, 0)), vundef,
                                ir.Constant(ir.VectorType(i32, L), [0] * L))
    return builder.icmp_signed("<", ir.Constant(vi, list(range(L))), nv)


def _emit_tr(context: Any, builder: Any, argtys: tuple, args: tuple, R: int) -> None:
    """Emit one transposed tile of rank ``R`` at the builder (see :func:`_make_tr`): ``argtys``/``args`` the
    tile's argument types and values, without a family's leading rank (:func:`_make_tr_family`)."""
    xarr, xo_, sxa_, h_, I_, uparr, tlarr, pfo_, pfh_, yarr, yo_, ys_, how_ = args
    dt = argtys[0].dtype
    bits, L, fty, vty = _wide_types(context, dt)
    i64, i32 = ir.IntType(64), ir.IntType(32)
    if dt == types.float32 and R > TR_MAX_RANK:
        # (float32 ranks beyond TR_MAX_RANK are never planned: compiled as a tile of NaN sums only, not
        # the full block each float32 kernel would otherwise carry; written into tl, which the caller then
        # copies out, whatever ``how`` asks)
        nan = ir.Constant(vty, [ir.Constant(fty, float("nan"))] * L)
        tlp = cgutils.create_struct_proxy(argtys[6])(context, builder, value=tlarr).data
        for r in range(R):
            builder.store(nan, builder.bitcast(builder.gep(tlp, [ir.Constant(i64, r * L)]),
                                               vty.as_pointer()), align=1)
        return

    def c(v):
        return ir.Constant(i64, v)

    def data(k, val):
        return cgutils.create_struct_proxy(argtys[k])(context, builder, value=val).data

    xp, upp, tlp = data(0, xarr), data(5, uparr), data(6, tlarr)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty, vty, vty]),
                                         f"llvm.fma.v{L}f{bits}")
    mty = ir.VectorType(ir.IntType(1), L)
    zero = ir.Constant(vty, [ir.Constant(fty, 0.0)] * L)
    undef = ir.Constant(vty, ir.Undefined)
    splat = ir.Constant(ir.VectorType(i32, L), [0] * L)
    rp = _row_ptrs(builder, xp, xo_, h_, sxa_, L)
    pf = _row_ptrs(builder, xp, pfo_, pfh_, sxa_, L)
    last_i = builder.sub(I_, c(1))

    def prefetch_rows(off):
        _prefetch_rows(builder, pf, [off], pfh_, "tr")

    def transpose(v):
        return _transpose_ir(builder, v, L)

    def step(acc, cols, i0, live=None):
        out = list(acc)
        for j in range(L):
            urow = builder.gep(upp, [builder.mul(builder.add(i0, c(j)), c(R))])
            keep = None if live is None else builder.icmp_signed("<", c(j), live)
            for r in range(R):
                u = builder.load(builder.gep(urow, [c(r)]))
                ub = builder.shuffle_vector(builder.insert_element(undef, u, ir.Constant(i32, 0)), undef,
                                            splat)
                s = builder.call(fma, [cols[j], ub, out[r]])
                out[r] = s if keep is None else builder.select(keep, s, out[r])
        return out

    prefetch_rows(c(0))

    def ahead(i0):
        off = builder.add(i0, c(L - 1))
        prefetch_rows(builder.select(builder.icmp_signed("<", off, last_i), off, last_i))

    sums = _rows_loop(builder, "tr", rp, I_, L, bits, vty, [zero] * R,
                      lambda acc, rows, i0, live: step(acc, transpose(rows), i0, live), ahead)
    # the sums out: into tl (how 0), or straight into the output y at yo, the tile's rows unit-strided
    # (how 1: sum r a vector at yo + r ys), or its columns unit-strided (how 2: the sums transposed in
    # registers, L at a time, each row a's R values a masked store at yo + a ys)
    yp = data(9, yarr)
    b_tl = builder.append_basic_block("tr.tl")
    b_rows = builder.append_basic_block("tr.rows")
    b_cols = builder.append_basic_block("tr.cols")
    b_end = builder.append_basic_block("tr.end")
    sw = builder.switch(how_, b_tl)
    sw.add_case(c(1), b_rows)
    sw.add_case(c(2), b_cols)
    builder.position_at_end(b_tl)
    for r in range(R):
        builder.store(sums[r], builder.bitcast(builder.gep(tlp, [c(r * L)]), vty.as_pointer()), align=1)
    builder.branch(b_end)
    builder.position_at_end(b_rows)
    for r in range(R):
        at = builder.add(yo_, builder.mul(c(r), ys_))
        builder.store(sums[r], builder.bitcast(builder.gep(yp, [at]), vty.as_pointer()), align=1)
    builder.branch(b_end)
    builder.position_at_end(b_cols)
    mstore = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), i32, mty]),
        f"llvm.masked.store.v{L}f{bits}.p0")
    for g in range(0, R, L):
        nr = min(L, R - g)
        cols = transpose(sums[g:g + nr] + [zero] * (L - nr))
        keep = ir.Constant(mty, [ir.Constant(ir.IntType(1), int(q < nr)) for q in range(L)])
        for a in range(L):
            at = builder.add(yo_, builder.add(builder.mul(c(a), ys_), c(g)))
            builder.call(mstore, [cols[a], builder.bitcast(builder.gep(yp, [at]), vty.as_pointer()),
                                  ir.Constant(i32, 1), keep])
    builder.branch(b_end)
    builder.position_at_end(b_end)


def _make_tr(R: int):
    """``trR(x, xo, sxa, h, I, up, tl, pfo, pfh)``: one tile of ``ttm_outer`` with lanes over rows of X (float32
    R up to ``TR_MAX_RANK``, float64 up to ``TR_MAX_RANK_F64``).

    The tile is ``L`` rows of X (``L`` = 16 float32 or 8 float64: one 512-bit vector of each; rows past ``h``
    repeat row ``h - 1``), row ``a`` at ``x[xo + a * sxa]`` with ``i`` unit-strided. Each step loads ``L``
    elements of every row, transposes the ``L x L`` block in registers (``log2 L`` rounds of two-source
    shuffles: block ``(a, j)`` swaps with ``(j, a)``, halves first), so that vector ``j`` holds column
    ``i0 + j`` of the tile's rows, and adds it times ``U[i0 + j, r]`` (broadcast from ``up``, ``U`` packed as
    ``(Ip, R)`` rows) into accumulator ``r``: ``R`` vector accumulators, one fused multiply-add per term, ``i``
    in order, the sums stored as ``tl[r * L + a]``. The ``I % L`` columns left are loaded masked (nothing read
    past a row) and only their ``I % L`` products are added: every output is the chain of fused multiply-adds
    in ``i`` from zero, the bits of :func:`tuckerkit.engine._smallgemm.ttm_outer`'s register-blocked kernel.

    Against the dot products, where ``R`` is small the transposed tile takes no horizontal sums and no scalar
    tail (four rows of X against five columns of U: each output's vector of partial sums reduced at the end of
    its row, twelve shuffles and adds, and a row of 200 float32 leaves 8 elements after whole vectors).

    Each step also prefetches into L2 one line of each row of the tile at ``x[pfo]`` (``pfh`` rows, none where
    it is 0: the tile the caller computes next but one), a row's first line before the loop and at step ``k``
    the line of element ``min(k L + L - 1, I - 1)``: the rows' ``I`` elements span at most ``I / L + 1``
    lines, as many as the steps, plus one."""
    @intrinsic
    def tr(typingctx, x, xo, sxa, h, I, up, tl, pfo, pfh, y, yo, ys, how):  # noqa: E741
        if not _float_arrays(x, up, tl, y):
            return None

        def codegen(context, builder, sig, args):
            _emit_tr(context, builder, sig.args, args, R)
            return context.get_dummy_value()

        i = types.int64
        return types.void(x, i, i, i, i, up, tl, i, i, y, i, i, i), codegen

    return tr


def _make_tr_family(ranks: tuple[int, ...]):
    """``tr_tiles(R, x, xo, sxa, h, I, up, tl, pfo, pfh, y, yo, ys, how)``: the transposed tile of rank ``R``
    (one of ``ranks``), chosen by a switch in the emitted IR; any other ``R`` raises ``ValueError``. As
    :func:`_make_family` for the register blocks: the if-chain over ``trR`` it replaces, without numba inlining
    it (``ttm_outer``'s transposed-tile kernel compiles faster)."""
    @intrinsic
    def tr_tiles(typingctx, R, x, xo, sxa, h, I, up, tl, pfo, pfh, y, yo, ys, how):  # noqa: E741
        if not (isinstance(R, types.Integer) and _float_arrays(x, up, tl, y)):
            return None

        def codegen(context, builder, sig, args):
            i64 = ir.IntType(64)
            bad = builder.append_basic_block("trs.bad")
            end = builder.append_basic_block("trs.end")
            sw = builder.switch(args[0], bad)
            for r in ranks:
                case = builder.append_basic_block(f"trs.{r}")
                sw.add_case(ir.Constant(i64, r), case)
                builder.position_at_end(case)
                _emit_tr(context, builder, sig.args[1:], args[1:], r)
                builder.branch(end)
            builder.position_at_end(bad)
            context.call_conv.return_user_exc(builder, ValueError, ("internal error: no transposed tile of that rank",))
            builder.position_at_end(end)
            return context.get_dummy_value()

        i = types.int64
        return types.void(i, x, i, i, i, i, up, tl, i, i, y, i, i, i), codegen

    return tr_tiles


tr3, tr4, tr5, tr6, tr7, tr8, tr9, tr10, tr11, tr12, tr13, tr14, tr15, tr16, tr17, tr18, tr19, tr20 = (
    _make_tr(r) for r in range(TR_MIN_RANK, TR_MAX_RANK_F64 + 1))
#: all of them in one switch: ``tr_tiles(R, ...)``
tr_tiles = _make_tr_family(tuple(range(TR_MIN_RANK, TR_MAX_RANK_F64 + 1)))


#: the ranks of the row-dot kernel (:func:`_make_vdot`; :func:`tuckerkit.engine._smallgemm.outer_vdot_style`)
VDOT_MIN_RANK = 1
VDOT_MAX_RANK = 12


@register_jitable
def vdot_rows(R: int) -> int:
    """The rows of X a tile of :func:`_make_vdot`'s kernel takes at rank ``R``: as many as keep the
    accumulators (rows x ``R``) within 24 of the 32 vector registers, at most 8 (callable from compiled
    code too).

    >>> [vdot_rows(r) for r in (1, 3, 4, 5, 8, 9, 12)]
    [8, 8, 6, 4, 3, 2, 2]
    """
    return max(1, min(8, 24 // R))


def _reduce_ir(builder: Any, v: list[Any], L: int) -> Any:
    """The sums of the lanes of ``L`` vectors ``v`` (``L`` lanes each) as one vector, lane ``j`` the sum of
    ``v[j]``: ``log2 L`` rounds, each pairing vectors ``p`` and ``p + hh`` with the shuffles of
    :func:`_transpose_ir` and adding the two halves (half the vectors after each round). Every lane's sum is
    the same tree over its own vector's lanes (``hh`` = L/2 first: lane ``q`` plus lane ``q + hh``), whichever
    place the vector has in ``v``."""
    i32 = ir.IntType(32)
    v = list(v)
    hh = L // 2
    while hh >= 1:
        lo = ir.Constant(ir.VectorType(i32, L), [q if q & hh == 0 else L + q - hh for q in range(L)])
        hi = ir.Constant(ir.VectorType(i32, L), [q + hh if q & hh == 0 else L + q for q in range(L)])
        v = [builder.fadd(builder.shuffle_vector(v[p], v[p + hh], lo), builder.shuffle_vector(v[p], v[p + hh], hi))
             for p in range(hh)]
        hh //= 2
    return v[0]


def _make_vdot(R: int):
    """``vdotR(x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh)``: one tile of ``ttm_outer`` as dot products
    along the unit stride, ``NR`` = :func:`vdot_rows` rows of X against the ``R`` rows of ``U^T``.

    Row ``a`` of the tile at ``x[xo + a * sxa]`` (``I`` elements, unit-strided; rows past ``h`` repeat row
    ``h - 1``, computed and not stored), row ``r`` of ``U^T`` at ``u[r * su]`` zero-padded to whole 512-bit
    vectors. Each step loads one vector of each row of X and of each row of ``U^T`` and adds their products into
    ``NR x R`` vector accumulators (one fused multiply-add per vector: lane ``l`` of an accumulator holds the
    chain over ``i = l, l + L, ...`` in order from zero); the ``I % L`` elements left are loaded masked (nothing
    read past a row, the lanes beyond zero against U's zero padding). The accumulators are then summed ``L`` at
    a time by one shuffle network (:func:`_reduce_ir`): about two shuffles and one add an output, where a
    transposed tile (:func:`_make_tr`) takes four shuffles for every ``L`` elements of a row. The sums go to
    ``y[yo + a * sya + r * syr]``: one masked store for each ``L`` of them where the output's rows are
    C-ordered (``syr == 1`` and ``sya == R``), else one scalar store each. The bits: each output the same tree
    over its ``L`` lane chains, whatever the tile, ``NR`` or the output's layout.

    Before the loop one line of each of the ``pfh`` rows at ``x[pfo + a * sxa]`` is prefetched into L2 at the
    row's first and last element, and each step the line of element ``min(k L + L - 1, I - 1)``: every line of
    those rows (a row of ``I`` elements spans at most ``I / L + 2`` lines), the tile the caller computes
    ``pfd`` tiles ahead. An empty inline-assembly barrier with a memory clobber opens each step: without it
    LLVM unrolled the loop in two and hoisted both steps' loads of U ahead of the multiply-adds, spilling the
    accumulators (in cache, float32 R = 10: 73 -> 89 GFlop/s)."""
    NR = vdot_rows(R)

    @intrinsic
    def vdot(typingctx, x, xo, sxa, h, I, u, su, y, yo, sya, syr, pfo, pfh):  # noqa: E741
        if not _float_arrays(x, u, y):
            return None

        def codegen(context, builder, sig, args):
            xarr, xo_, sxa_, h_, I_, uarr, su_, yarr, yo_, sya_, syr_, pfo_, pfh_ = args
            bits, L, fty, vty = _wide_types(context, sig.args[0].dtype)
            i64, i32 = ir.IntType(64), ir.IntType(32)
            mty = ir.VectorType(ir.IntType(1), L)

            def c(v):
                return ir.Constant(i64, v)

            def data(k, val):
                return cgutils.create_struct_proxy(sig.args[k])(context, builder, value=val).data

            def fn(name, ret, argt):
                return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, argt), name)

            xp, up, yp = data(0, xarr), data(5, uarr), data(7, yarr)
            fma = fn(f"llvm.fma.v{L}f{bits}", vty, [vty, vty, vty])
            mstore = fn(f"llvm.masked.store.v{L}f{bits}.p0", ir.VoidType(), [vty, vty.as_pointer(), i32, mty])
            zero = ir.Constant(vty, [ir.Constant(fty, 0.0)] * L)
            rp = _row_ptrs(builder, xp, xo_, h_, sxa_, NR)
            pf = _row_ptrs(builder, xp, pfo_, pfh_, sxa_, NR)
            urow = [builder.gep(up, [builder.mul(c(r), su_)]) for r in range(R)]
            last_i = builder.sub(I_, c(1))

            def prefetch_rows(offs):
                _prefetch_rows(builder, pf, offs, pfh_, "vd")

            def step(acc, xs, i0, live):  # (live: the masked rest's count, nothing to mask: zeros against zeros)
                builder.asm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", [], True)
                out = list(acc)
                for r in range(R):
                    uv = builder.load(builder.bitcast(builder.gep(urow[r], [i0]), vty.as_pointer()), align=1)
                    for a in range(NR):
                        out[a * R + r] = builder.call(fma, [xs[a], uv, out[a * R + r]])
                return out

            prefetch_rows([c(0), last_i])

            def ahead(i0):
                off = builder.add(i0, c(L - 1))
                prefetch_rows([builder.select(builder.icmp_signed("<", off, last_i), off, last_i)])

            sums = _rows_loop(builder, "vd", rp, I_, L, bits, vty, [zero] * (NR * R), step, ahead)
            n = NR * R
            groups = list(range(0, n, L))
            vecs = [_reduce_ir(builder, sums[g:g + L] + [zero] * (L - min(L, n - g)), L) for g in groups]
            contig = builder.and_(builder.icmp_signed("==", syr_, c(1)), builder.icmp_signed("==", sya_, c(R)))
            b_c = builder.append_basic_block("vd.c")
            b_s = builder.append_basic_block("vd.s")
            b_e = builder.append_basic_block("vd.e")
            builder.cbranch(contig, b_c, b_s)
            builder.position_at_end(b_c)  # C-ordered rows: the tile's h R sums back to back
            hr = builder.mul(h_, c(R))
            for v, g in zip(vecs, groups, strict=True):
                m = _lanes_below(builder, builder.sub(hr, c(g)), L)
                builder.call(mstore, [v, builder.bitcast(builder.gep(yp, [builder.add(yo_, c(g))]), vty.as_pointer()),
                                      ir.Constant(i32, 1), m])
            builder.branch(b_e)
            builder.position_at_end(b_s)  # any other strides: one store a sum, rows below h
            for v, g in zip(vecs, groups, strict=True):
                for j in range(min(L, n - g)):
                    a, r = divmod(g + j, R)
                    at = builder.add(yo_, builder.add(builder.mul(c(a), sya_), builder.mul(c(r), syr_)))
                    if a == 0:  # (h >= 1: the first row is always stored)
                        builder.store(builder.extract_element(v, ir.Constant(i32, j)), builder.gep(yp, [at]))
                        continue
                    yes = builder.append_basic_block("vd.st")
                    nxt = builder.append_basic_block("vd.nx")
                    builder.cbranch(builder.icmp_signed("<", c(a), h_), yes, nxt)
                    builder.position_at_end(yes)
                    builder.store(builder.extract_element(v, ir.Constant(i32, j)), builder.gep(yp, [at]))
                    builder.branch(nxt)
                    builder.position_at_end(nxt)
            builder.branch(b_e)
            builder.position_at_end(b_e)
            return context.get_dummy_value()

        i = types.int64
        return types.void(x, i, i, i, i, u, i, y, i, i, i, i, i), codegen

    return vdot


vdot1, vdot2, vdot3, vdot4, vdot5, vdot6, vdot7, vdot8, vdot9, vdot10, vdot11, vdot12 = (
    _make_vdot(r) for r in range(VDOT_MIN_RANK, VDOT_MAX_RANK + 1))


#: the extents of the tiny-rows kernel (:func:`_make_tiny`; :func:`tuckerkit.engine._smallgemm.outer_tiny_style`):
#: rows of X of 2 to ``TINY_MAX_I`` elements against 1 to ``TINY_MAX_R`` columns of U
TINY_MAX_I = 8
TINY_MAX_R = 8
#: the key of an (I, R) pair in the kernel's switch: ``I * TINY_KEY + R``
TINY_KEY = 16


def _make_tiny():
    """``tiny_block(x, xo, I, up, R, y, yo)``: ``L`` rows of a dense ``(A, I)`` X against ``U`` (``I x R``,
    packed as C-ordered rows in ``up``) into the same rows of a dense ``(A, R)`` output, where the rows are too
    short for vectors along them (``L`` = 8 float64 or 16 float32: one 512-bit vector of lanes over rows).

    The block's ``L x I`` elements are one run of memory: they are loaded as ``I`` vectors (one load of ``I L``
    lanes), and a shuffle for each ``i`` gathers column ``i`` of the block (lane ``a`` from element
    ``a I + i``); accumulator ``r`` is then the chain of fused multiply-adds ``fma(col_i, U[i, r], acc)`` over
    ``i`` in order from zero (the bits of :func:`tuckerkit.engine._smallgemm.ttm_outer`'s transposed tile and
    register-blocked kernels), and one shuffle interleaves the ``R`` accumulators into the block's ``L x R``
    outputs (lane ``a R + r`` from accumulator ``r``'s lane ``a``), stored as one run. ``I`` and ``R`` are
    read at run time: the code holds one branch for each pair of ``2 <= I <=`` :data:`TINY_MAX_I` and ``1 <= R
    <=`` :data:`TINY_MAX_R` (any other pair does nothing). LLVM lowers the shuffles to two-source lane
    permutes: about ``I + R`` of them a block against ``I R`` fused multiply-adds and ``I + R`` vector
    memory operations, where BLAS's GEMM on rows of 2-8 elements runs a few per cent of its peak."""
    @intrinsic
    def tiny(typingctx, x, xo, I, up, R, y, yo):  # noqa: E741
        if not _float_arrays(x, up, y):
            return None

        def codegen(context, builder, sig, args):
            xarr, xo_, I_, uparr, R_, yarr, yo_ = args
            dt = sig.args[0].dtype
            bits, L, fty, vty = _wide_types(context, dt)
            i64, i32 = ir.IntType(64), ir.IntType(32)

            def data(k, val):
                return cgutils.create_struct_proxy(sig.args[k])(context, builder, value=val).data

            xp, upp, yp = data(0, xarr), data(3, uparr), data(5, yarr)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty, vty, vty]),
                                                 f"llvm.fma.v{L}f{bits}")
            undef = ir.Constant(vty, ir.Undefined)
            zero = ir.Constant(vty, [ir.Constant(fty, 0.0)] * L)
            splat = ir.Constant(ir.VectorType(i32, L), [0] * L)

            def lanes(idx):
                return ir.Constant(ir.VectorType(i32, len(idx)), idx)

            end = builder.append_basic_block("tiny.end")
            key = builder.add(builder.mul(I_, ir.Constant(i64, TINY_KEY)), R_)
            sw = builder.switch(key, end)
            for ni in range(2, TINY_MAX_I + 1):
                xty = ir.VectorType(fty, ni * L)
                for nr in range(1, TINY_MAX_R + 1):
                    b = builder.append_basic_block(f"tiny.{ni}.{nr}")
                    sw.add_case(ir.Constant(i64, ni * TINY_KEY + nr), b)
                    builder.position_at_end(b)
                    blk = builder.load(builder.bitcast(builder.gep(xp, [xo_]), xty.as_pointer()), align=1)
                    cols = [builder.shuffle_vector(blk, ir.Constant(xty, ir.Undefined),
                                                   lanes([a * ni + i for a in range(L)])) for i in range(ni)]
                    acc = []
                    for r in range(nr):
                        s = zero
                        for i in range(ni):
                            u = builder.load(builder.gep(upp, [ir.Constant(i64, i * nr + r)]))
                            ub = builder.shuffle_vector(builder.insert_element(undef, u, ir.Constant(i32, 0)),
                                                        undef, splat)
                            s = builder.call(fma, [cols[i], ub, s])
                        acc.append(s)
                    # the accumulators side by side (nr L lanes), then interleaved: lane a nr + r from acc[r][a]
                    cat, width = acc[0], L
                    for r in range(1, nr):
                        nxt = acc[r]
                        if width > L:
                            nxt = builder.shuffle_vector(nxt, undef, lanes(list(range(L)) + [0] * (width - L)))
                        cat = builder.shuffle_vector(cat, nxt, lanes(list(range(width + L))))
                        width += L
                    out = cat if nr == 1 else builder.shuffle_vector(
                        cat, ir.Constant(cat.type, ir.Undefined),
                        lanes([(k % nr) * L + k // nr for k in range(nr * L)]))
                    builder.store(out, builder.bitcast(builder.gep(yp, [yo_]), ir.VectorType(fty, nr * L).as_pointer()),
                                  align=1)
                    builder.branch(end)
            builder.position_at_end(end)
            return context.get_dummy_value()

        i = types.int64
        return types.void(x, i, i, up, i, y, i), codegen

    return tiny


tiny_block = _make_tiny()


#: the short-rows kernel (:func:`_make_short`; :func:`tuckerkit.engine._smallgemm.inner_short_style`): rows of 2 to
#: ``SHORT_MAX_C`` unit-strided elements after the contracted mode (float32: up to ``SHORT_MAX_C_F32``, rows
#: shorter than one 256-bit vector), at most ``SHORT_ACC`` vector accumulators (a block of ``SHORT_ACC // C``
#: rows of ``U^T`` against the ``C`` columns; 24 of them spilled: (1000, 1000, 3) float64 at R = 8 in one block
#: of 24 took 0.65x BLAS's time, at R = 10 in two of 15 0.32x)
SHORT_MAX_C = 3
SHORT_MAX_C_F32 = 7
SHORT_ACC = 16
#: the key of a (C, rows) pair in the kernel's switch: ``C * SHORT_KEY + rows``
SHORT_KEY = 32


def short_max_c(itemsize: int) -> int:
    """The longest rows (in elements) the short-rows kernel takes for elements of ``itemsize`` bytes."""
    return SHORT_MAX_C_F32 if itemsize == 4 else SHORT_MAX_C


def short_rows(C: int) -> int:
    """The rows of ``U^T`` a block of the short-rows kernel takes for rows of ``C`` elements."""
    return SHORT_ACC // C


def _make_short():
    """``short_slab(x, xo, I, C, ut, su, r0, nb, y, yo, syr, syc)``: one slab of X (``I`` rows of ``C``
    unit-strided elements back to back from ``x[xo]``: a TTM's contracted mode followed by a short trailing mode,
    ``2 <= C <=`` :func:`short_max_c`) against rows ``r0 .. r0 + nb - 1`` of ``U^T`` (packed as rows of ``su``
    elements in ``ut``, zero-padded past ``I`` through the vector the masked last step reads), into
    ``y[yo + r syr + c syc]``; ``nb`` at most :func:`short_rows`.

    Lanes over ``i``: each step loads ``L`` rows of the slab (``L C`` elements, one run: 8 float64 or 16 float32
    rows) as ``C`` vectors, a shuffle for each ``c`` gathers column ``c`` (lane ``j`` from element ``j C + c``),
    and accumulator ``(r, c)`` takes ``fma(col_c, ut[r, i0 .. i0 + L), acc)``: ``nb C`` accumulators, lane ``j``
    the in-order chain over ``i = j (mod L)``. The rows left after whole steps are loaded masked (nothing read
    past the slab; their lanes, and ``ut``'s padding, zero). At the end each accumulator's lanes are summed by
    one tree (:func:`_reduce_ir`, ``L`` accumulators at a time): every output the same tree over the same chains,
    whatever its place (the bits differ from the other kernels' in-order chains in the last place, as any change
    of summation order does). ``C`` and ``nb`` are read at run time: one branch for each pair (``C`` from 2 to
    :func:`short_max_c`, ``nb`` from 1 to :func:`short_rows`), any other pair does nothing."""
    @intrinsic
    def short(typingctx, x, xo, I, C, ut, su, r0, nb, y, yo, syr, syc):  # noqa: E741
        if not _float_arrays(x, ut, y):
            return None

        def codegen(context, builder, sig, args):
            xarr, xo_, I_, C_, utarr, su_, r0_, nb_, yarr, yo_, syr_, syc_ = args
            dt = sig.args[0].dtype
            bits, L, fty, vty = _wide_types(context, dt)
            i64, i32 = ir.IntType(64), ir.IntType(32)

            def data(k, val):
                return cgutils.create_struct_proxy(sig.args[k])(context, builder, value=val).data

            def c(v):
                return ir.Constant(i64, v)

            def lanes(idx):
                return ir.Constant(ir.VectorType(i32, len(idx)), idx)

            xp, utp, yp = data(0, xarr), data(4, utarr), data(8, yarr)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty, vty, vty]),
                                                 f"llvm.fma.v{L}f{bits}")
            zero = ir.Constant(vty, [ir.Constant(fty, 0.0)] * L)
            nfull = builder.sdiv(I_, c(L))
            rest = builder.sub(I_, builder.mul(nfull, c(L)))
            end = builder.append_basic_block("short.end")
            sw = builder.switch(builder.add(builder.mul(C_, c(SHORT_KEY)), nb_), end)
            for nc in range(2, short_max_c(bits // 8) + 1):
                bty = ir.VectorType(fty, nc * L)
                mty = ir.VectorType(ir.IntType(1), nc * L)
                mload = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(bty, [bty.as_pointer(), i32, mty, bty]),
                    f"llvm.masked.load.v{nc * L}f{bits}.p0")
                for nr in range(1, short_rows(nc) + 1):
                    b = builder.append_basic_block(f"short.{nc}.{nr}")
                    sw.add_case(c(nc * SHORT_KEY + nr), b)
                    builder.position_at_end(b)
                    urow = [builder.gep(utp, [builder.mul(builder.add(r0_, c(r)), su_)]) for r in range(nr)]

                    def step(acc, blk, i0, nc=nc, nr=nr, bty=bty, urow=urow):
                        cols = [builder.shuffle_vector(blk, ir.Constant(bty, ir.Undefined),
                                                       lanes([j * nc + q for j in range(L)])) for q in range(nc)]
                        out = list(acc)
                        for r in range(nr):
                            u = builder.load(builder.bitcast(builder.gep(urow[r], [i0]), vty.as_pointer()), align=1)
                            for q in range(nc):
                                out[r * nc + q] = builder.call(fma, [cols[q], u, acc[r * nc + q]])
                        return out

                    k, acc, done, head = _counted_loop(builder, f"short.{nc}.{nr}", [zero] * (nr * nc), nfull)
                    i0 = builder.mul(k, c(L))
                    blk = builder.load(builder.bitcast(builder.gep(xp, [builder.add(xo_, builder.mul(i0, c(nc)))]),
                                                       bty.as_pointer()), align=1)
                    _close_loop(builder, k, acc, step(acc, blk, i0), done, head)
                    i0 = builder.mul(nfull, c(L))
                    vi = ir.VectorType(i64, nc * L)
                    vund = ir.Constant(vi, ir.Undefined)
                    lim = builder.shuffle_vector(
                        builder.insert_element(vund, builder.mul(rest, c(nc)), ir.Constant(i32, 0)), vund,
                        lanes([0] * (nc * L)))
                    mask = builder.icmp_signed("<", ir.Constant(vi, list(range(nc * L))), lim)
                    blk = builder.call(mload, [
                        builder.bitcast(builder.gep(xp, [builder.add(xo_, builder.mul(i0, c(nc)))]), bty.as_pointer()),
                        ir.Constant(i32, 1), mask, ir.Constant(bty, [ir.Constant(fty, 0.0)] * (nc * L))])
                    sums = step(acc, blk, i0)
                    for g in range(0, nr * nc, L):
                        part = sums[g:g + L]
                        red = _reduce_ir(builder, part + [zero] * (L - len(part)), L)
                        for j in range(len(part)):
                            r, q = divmod(g + j, nc)
                            at = builder.add(yo_, builder.add(builder.mul(c(r), syr_), builder.mul(c(q), syc_)))
                            builder.store(builder.extract_element(red, ir.Constant(i32, j)), builder.gep(yp, [at]))
                    builder.branch(end)
            builder.position_at_end(end)
            return context.get_dummy_value()

        i = types.int64
        return types.void(x, i, i, i, ut, i, i, i, y, i, i, i), codegen

    return short


short_slab = _make_short()
