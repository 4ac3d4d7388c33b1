"""The pieces of a split GEMM, and of a compiled small-rank kernel, handed to helper threads without the GIL.

:func:`~tuckerkit.engine._contract.cpu_matmul` cuts a large product into pieces by the sizes alone. Run on the
Python pool (:func:`~tuckerkit.engine._policy.parallel_for`), each piece is a Python call on a pool thread that
first needs a wake-up from the pool's queue and then the GIL: measured on the project's 2-core VM (64 x 4096 x
64, float64, 300 calls) the helper started its piece 75-260 us after the call and 10 % of the calls stalled for
3-19 ms, so a two-piece GEMM of about a millisecond ran 1.3-2.3x the time of OpenBLAS's own two threads.

Here each piece is a descriptor (the ``cblas_?gemm`` arguments of one piece, a batch of them at fixed strides)
in an ``int64`` table, and every thread runs pieces through a compiled loop that calls numpy's OpenBLAS by
address, holding no GIL:

* the caller publishes a round (the table, the piece count, a sequence number) with atomic stores, then claims
  pieces itself, one compare-and-swap each, and waits for the count of finished pieces;
* each helper thread lives in one compiled loop for the life of the process: it spins (``pause``) on the
  sequence number for :data:`SPIN_SECONDS` after its last round, claiming pieces as they come, then sleeps on
  a futex that the next round wakes (the wake-up and the claim need no GIL and no Python); any other parallel
  section (:func:`park`) sends the spinning helpers to sleep first, so they never take a core from it. At exit
  the helpers are stopped and joined.

Measured on the project's 2-core VM (float64 unless said, medians of interleaved runs in one process, pieces
as cut before): a loop of five calls of the seed's Table II contractions took 0.81x the time of the Python
pool's at n = 64 (1.20 -> 1.48x einsum) and 0.94x at n = 128, float32 n = 128 0.94x (float32 n = 64 is one
call). A single call whose helper is asleep (the benchmarks' setting: they park the helpers after every timed
call) gains little: Table II 0.99-1.02x, single GEMMs of 4096 x 64 x 64 and 512^3 0.84-0.92x. The
decompositions hand off few products (HOOI on 60^4 and CP-ALS at rank 50 on 200^3: six a call; HOOI on 200^3
and CP-ALS at rank 10: none), so their times did not move (0.96-1.03x, noise) while their compiled kernels
ran on the Python pool; those now run here too (below).

The compiled side allocates nothing (every table comes from Python), so it compiles with ``NO_RUNTIME`` and loads
from the cache without setting numba's runtime up (about 25 ms of a process's first call: a 4-way HOOI between
2^21 elements and 60^4, e.g. 42x40x38x36, cuts a product over the helpers in its first sweep).

The compiled small-rank kernels (:mod:`tuckerkit.engine._smallgemm`: ``_inner_kernel``, ``_outer_gemm_kernel``,
``_outer_dot_kernel``, ``_outer_tr_kernel``, ``_outer_vdot_kernel``) hand their tiles to the same helpers
(:func:`run_kernel`): a piece is a row of a second table, the address of the C wrapper numba compiles beside
every kernel (``cfunc.<name>``: the arguments by value, an array as numba's array struct) and the kernel's
arguments, arrays as address and extents; the compiled loop rebuilds the structs (:func:`_call_kernel`) and
calls the wrapper, so the same machine code runs
as from Python. Measured on the project's 2-core AVX-512 VM (interleaved medians in one process, the call after
a threaded BLAS product and the helpers asleep, as in the benchmarks; the same bits on both routes): TTMs of
200^3 and 320x240x160 at R = 10 and 32, every mode, float32 and float64, 0.89-1.03x the Python pool's time
(median 0.95x); with the pool, the second worker started 0.1-0.2 ms after the caller and one often finished
0.1-2 ms after the other. Five iterations of ``hooi`` and ``cp_als`` (200^3 at ranks 10 and 50, 60^4 at 10)
0.88-1.00x over two runs (medians 0.91x and 0.93x).

Every piece is the same BLAS call whichever thread runs it (a piece is a function of the sizes, as before), and
with one worker the caller runs the same descriptors in order: the bits do not depend on the workers or the
load. Only float32 and float64 operands whose 2-D slices have a unit stride (BLAS's layouts) take this route,
on x86-64 with numpy's bundled OpenBLAS (``scipy_cblas_?gemm64_``); anything else (or
``TUCKERKIT_BLAS_HANDOFF=0``, which also sends the kernels' tiles back to the Python pool) runs on the Python
pool as before.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading
import time
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from tuckerkit._numba_load import NO_RUNTIME, load_lightly
from tuckerkit.engine._policy import _in_worker, parallel_for, quiet_blas_workers  # (at load: not per call)

#: seconds a helper keeps spinning after its last piece before it sleeps (a round within that starts at once)
SPIN_SECONDS = 1e-3
#: descriptor columns: gemm address, 1 for float64, transA, transB, m, n, k, a, lda, b, ldb, c, ldc, batch,
#: and the batch's strides of a, b and c in bytes
_NCOL = 17
_ROWS = 64  # the most pieces of one round (MAX_PIECES is 16)
_MAX_HELPERS = 63
# ctrl slots, each on its own cache line (8 int64): the round's sequence number, pieces finished, the next
# claim (sequence << 32 | piece), the round's piece count, its helpers, park
_SEQ, _DONE, _NEXT, _NP, _NH, _PARK, _STOP = (8 * i for i in range(7))
# per-helper state: the last sequence handled, 1 while asleep, the times it left its sleep (written by the helper)
_HSEQ, _ASLEEP, _WAKES = 0, 1, 2


# ---------------------------------------------------------------------------------------------------
# intrinsics: atomic loads, stores, compare-and-swap and add on int64 (and int32) arrays; a spin-wait hint;
# the cycle counter; calls by address of cblas_?gemm (ILP64) and of libc's syscall (a futex)
# ---------------------------------------------------------------------------------------------------
def _intrinsic(fn: Any) -> Any:
    """numba's ``intrinsic`` (typed as Any: the compiled callers pass numba's typing context implicitly)."""
    return intrinsic(fn)


def _item_ptr(context, builder, aty, arr, idx):
    a = context.make_array(aty)(context, builder, arr)
    return cgutils.get_item_pointer(context, builder, aty, a, [idx])


@_intrinsic
def _aload(typingctx, arr, idx):
    def codegen(context, builder, sig, args):
        return builder.load_atomic(_item_ptr(context, builder, sig.args[0], *args), "seq_cst", 8)

    return types.int64(arr, idx), codegen


@_intrinsic
def _astore(typingctx, arr, idx, val):
    def codegen(context, builder, sig, args):
        builder.store_atomic(args[2], _item_ptr(context, builder, sig.args[0], args[0], args[1]), "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@_intrinsic
def _acas(typingctx, arr, idx, old, new):
    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1])
        return builder.extract_value(builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst"), 1)

    return types.boolean(arr, idx, old, new), codegen


@_intrinsic
def _aadd(typingctx, arr, idx, val):
    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("add", _item_ptr(context, builder, sig.args[0], args[0], args[1]), args[2],
                                  "seq_cst")

    return types.int64(arr, idx, val), codegen


@_intrinsic
def _pause(typingctx):
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                            "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


@_intrinsic
def _cycles(typingctx):
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.int64(), codegen


@_intrinsic
def _futex(typingctx, fp, arr, idx, op, val):
    # syscall(SYS_futex, &arr[idx] (an int32), op, val, NULL): libc's variadic syscall, called by address
    def codegen(context, builder, sig, args):
        fp, arr, idx, op, val = args
        i64 = ir.IntType(64)
        ptr = _item_ptr(context, builder, sig.args[1], arr, idx)
        fnty = ir.FunctionType(i64, [i64], var_arg=True)
        return builder.call(builder.inttoptr(fp, fnty.as_pointer()),
                            [ir.Constant(i64, 202), builder.ptrtoint(ptr, i64), op, builder.trunc(val, ir.IntType(32)),
                             ir.Constant(i64, 0)])

    return types.int64(fp, arr, idx, op, val), codegen


@_intrinsic
def _aload32(typingctx, arr, idx):
    def codegen(context, builder, sig, args):
        v = builder.load_atomic(_item_ptr(context, builder, sig.args[0], *args), "seq_cst", 4)
        return builder.sext(v, ir.IntType(64))

    return types.int64(arr, idx), codegen


@_intrinsic
def _aadd32(typingctx, arr, idx):
    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], *args)
        builder.atomic_rmw("add", ptr, ir.Constant(ir.IntType(32), 1), "seq_cst")
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@_intrinsic
def _gemm(typingctx, fp, dbl, ta, tb, m, n, k, a, lda, b, ldb, c, ldc):
    def codegen(context, builder, sig, args):
        fp, dbl, ta, tb, m, n, k, a, lda, b, ldb, c, ldc = args
        i64, i32 = ir.IntType(64), ir.IntType(32)
        with builder.if_else(builder.icmp_signed("!=", dbl, ir.Constant(i64, 0))) as (then, other):
            for fty, branch in ((ir.DoubleType(), then), (ir.FloatType(), other)):
                with branch:
                    pt = fty.as_pointer()
                    fnty = ir.FunctionType(ir.VoidType(),
                                           [i32, i32, i32, i64, i64, i64, fty, pt, i64, pt, i64, fty, pt, i64])
                    builder.call(builder.inttoptr(fp, fnty.as_pointer()),
                                 [ir.Constant(i32, 101), builder.trunc(ta, i32), builder.trunc(tb, i32), m, n, k,
                                  ir.Constant(fty, 1.0), builder.inttoptr(a, pt), lda, builder.inttoptr(b, pt), ldb,
                                  ir.Constant(fty, 0.0), builder.inttoptr(c, pt), ldc])
        return context.get_dummy_value()

    return types.void(*([types.int64] * 13)), codegen


# ---------------------------------------------------------------------------------------------------
# the compiled small-rank kernels' pieces (tuckerkit.engine._smallgemm), called by address: each descriptor row of
# the kernel table K is (kind, the address of the kernel's C wrapper, its arguments), an array as its address
# and extents, a scalar as itself; the kind says the pattern of the arguments and their dtype
# ---------------------------------------------------------------------------------------------------
#: kernel descriptor columns (the longest pattern, _inner_kernel's, takes 34)
_KCOL = 40
#: the argument patterns: ``a`` a 1-D C array of the kernel's dtype (address, length), ``u`` a 2-D one (address,
#: rows, columns), ``m`` a 2-D C array of int64 (a table of blocks or strips), ``i`` an int64, ``b`` a bool (0 or
#: 1), ``z`` the dtype's zero (no column)
KERNEL_PATTERNS = {
    "inner": "aiiiiamaiiiiiibiaabaaii",  # _inner_kernel
    "outer_gemm": "aiiiiaimaiiibiiaiiubz",  # _outer_gemm_kernel
    "outer_dot": "aiiiiuaiiiiiziib",  # _outer_dot_kernel
    "batched_dot": "aiiaiaiiibii",  # _batched_dot_kernel (tuckerkit.engine._batched_dot)
    "outer_tr": "aiiiaiaiiaiii",  # _outer_tr_kernel
    "outer_vdot": "aiiiaiiaiiiii",  # _outer_vdot_kernel
    "outer_tiny": "aiiaiaaii",  # _outer_tiny_kernel
    "inner_short": "aiiiiaiiaiiiiii",  # _inner_short_kernel
    "rank_dots": "aiiiaaiiii",  # _rank_outer_dots (tuckerkit.engine._batched_dot)
    "rank_axpys": "aiiiaaiiaii",  # _rank_outer_axpys (tuckerkit.engine._batched_dot)
}
#: kind codes: pattern and dtype
KERNEL_KINDS = {(name, it): 1 + 2 * k + (it == 4) for k, name in enumerate(KERNEL_PATTERNS) for it in (8, 4)}


def _emit_kernel_call(context: Any, builder: Any, kty: Any, karr: Any, row: Any, pattern: str, dtype: Any) -> None:
    """Call the function at address ``K[row, 1]`` with the arguments of ``pattern`` built from ``K[row, 2:]``
    (arrays as numba's array structs: no owner, C strides): the values numba passes to a kernel's C wrapper
    (``cfunc.<name>``: its arguments by value, a readonly array the same struct)."""
    i64 = ir.IntType(64)
    data_t = context.get_data_type(dtype)
    item = ir.Constant(i64, context.get_abi_sizeof(data_t))
    col = [1]

    def take() -> Any:
        v = builder.load(cgutils.get_item_pointer(context, builder, kty, karr, [row, ir.Constant(i64, col[0])]))
        col[0] += 1
        return v

    def array(nd: int, el: Any, el_t: Any, el_size: Any) -> Any:
        data = builder.inttoptr(take(), el_t.as_pointer())
        shape = [take() for _ in range(nd)]
        strides = [el_size] if nd == 1 else [builder.mul(shape[1], el_size), el_size]
        arr = context.make_array(types.Array(el, nd, "C"))(context, builder)
        context.populate_array(arr, data=data, shape=cgutils.pack_array(builder, shape),
                               strides=cgutils.pack_array(builder, strides), itemsize=el_size, meminfo=None)
        return arr._getvalue()

    fn = take()
    vals = []
    for p in pattern:
        if p == "a":
            vals.append(array(1, dtype, data_t, item))
        elif p == "u":
            vals.append(array(2, dtype, data_t, item))
        elif p == "m":
            vals.append(array(2, types.int64, i64, ir.Constant(i64, 8)))
        elif p == "i":
            vals.append(take())
        elif p == "b":
            vals.append(builder.icmp_signed("!=", take(), ir.Constant(i64, 0)))
        else:  # "z"
            vals.append(ir.Constant(context.get_value_type(dtype), 0.0))
    fnty = ir.FunctionType(context.get_value_type(types.none), [v.type for v in vals])
    builder.call(builder.inttoptr(fn, fnty.as_pointer()), vals)


@_intrinsic
def _call_kernel(typingctx, K, i):
    """``K[i]``'s kernel (its kind ``K[i, 0]``: a pattern of :data:`KERNEL_PATTERNS` and a dtype) called by address."""
    if not isinstance(K, types.Array) or K.dtype != types.int64:
        return None

    def codegen(context, builder, sig, args):
        karr = context.make_array(sig.args[0])(context, builder, args[0])
        kind = builder.load(cgutils.get_item_pointer(context, builder, sig.args[0], karr,
                                                     [args[1], ir.Constant(ir.IntType(64), 0)]))
        done = builder.append_basic_block("kernel.done")
        switch = builder.switch(kind, done)
        for (name, it), code in KERNEL_KINDS.items():
            case = builder.append_basic_block(f"kernel.{name}{it}")
            switch.add_case(ir.Constant(ir.IntType(64), code), case)
            builder.position_at_end(case)
            _emit_kernel_call(context, builder, sig.args[0], karr, args[1], KERNEL_PATTERNS[name],
                              types.float64 if it == 8 else types.float32)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return types.void(K, types.int64), codegen


# ---------------------------------------------------------------------------------------------------
# the compiled side: run a piece, claim pieces, serve rounds, publish a round and wait
# ---------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, **NO_RUNTIME)
def _run_piece(D, K, i):  # pragma: no cover - compiled
    if D[i, 0] == 0:  # a kernel's piece (K), not a GEMM's
        _call_kernel(K, i)
        return
    for j in range(D[i, 13]):
        _gemm(D[i, 0], D[i, 1], D[i, 2], D[i, 3], D[i, 4], D[i, 5], D[i, 6], D[i, 7] + j * D[i, 14], D[i, 8],
              D[i, 9] + j * D[i, 15], D[i, 10], D[i, 11] + j * D[i, 16], D[i, 12])


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _claim(ctrl, D, K, seq):  # pragma: no cover - compiled
    npieces = _aload(ctrl, _NP)
    while True:
        v = _aload(ctrl, _NEXT)
        if (v >> 32) != seq or (v & 0xFFFFFFFF) >= npieces:
            return
        if _acas(ctrl, _NEXT, v, v + 1):
            _run_piece(D, K, v & 0xFFFFFFFF)
            _aadd(ctrl, _DONE, 1)


_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE forms


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _helper_loop(ctrl, D, K, hs, word, h, spin, sysc):  # pragma: no cover - compiled
    # helper h, for the life of the process: the rounds that include it; after ``spin`` cycles without one, or
    # when parked, asleep on the futex ``word`` until a round wakes it (no GIL, no Python on the way)
    seen = _aload(hs, h * 8 + _HSEQ)
    t0 = _cycles()
    while _aload(ctrl, _STOP) == 0:
        s = _aload(ctrl, _SEQ)
        if s != seen:
            if h < _aload(ctrl, _NH):
                _claim(ctrl, D, K, s)
            seen = s
            _astore(hs, h * 8 + _HSEQ, s)
            t0 = _cycles()
        elif _aload(ctrl, _PARK) == 0 and _cycles() - t0 <= spin:
            _pause()
        else:
            w = _aload32(word, 0)
            _astore(hs, h * 8 + _ASLEEP, 1)
            if _aload(ctrl, _SEQ) == seen and _aload(ctrl, _STOP) == 0:  # else a round came meanwhile
                _futex(sysc, word, 0, _FUTEX_WAIT, w)
            _astore(hs, h * 8 + _ASLEEP, 0)
            _astore(hs, h * 8 + _WAKES, _aload(hs, h * 8 + _WAKES) + 1)
            t0 = _cycles()


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _round(ctrl, D, K, hs, word, npieces, nhelpers, seq, sysc):  # pragma: no cover - compiled
    # publish a round, wake its helpers that sleep, take pieces until none is left, wait for the others
    _astore(ctrl, _NP, npieces)
    _astore(ctrl, _NH, nhelpers)
    _astore(ctrl, _DONE, 0)
    _astore(ctrl, _NEXT, seq << 32)
    _astore(ctrl, _PARK, 0)
    _astore(ctrl, _SEQ, seq)
    asleep = 0
    for h in range(nhelpers):
        asleep += _aload(hs, h * 8 + _ASLEEP)
    if asleep:
        _aadd32(word, 0)
        _futex(sysc, word, 0, _FUTEX_WAKE, 1 << 30)  # (any waiter may be woken: wake them all)
    _claim(ctrl, D, K, seq)
    while _aload(ctrl, _DONE) != npieces:
        _pause()


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _prewake(ctrl, hs, word, nhelpers, sysc):  # pragma: no cover - compiled
    # let the helpers spin again and wake those that sleep, ahead of a round (no round is published: a woken
    # helper finds none and spins, as after a round, until one comes or its spin ends)
    _astore(ctrl, _PARK, 0)
    asleep = 0
    for h in range(nhelpers):
        asleep += _aload(hs, h * 8 + _ASLEEP)
    if asleep:
        _aadd32(word, 0)
        _futex(sysc, word, 0, _FUTEX_WAKE, 1 << 30)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _spinning(ctrl, hs, nhelpers):  # pragma: no cover - compiled
    # whether the first nhelpers helpers are awake (spinning or at a round) and none is parked
    if _aload(ctrl, _PARK) != 0:
        return False
    for h in range(nhelpers):
        if _aload(hs, h * 8 + _ASLEEP) != 0:
            return False
    return True


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _wake_all(ctrl, word, sysc):  # pragma: no cover - compiled
    _aadd32(word, 0)
    _futex(sysc, word, 0, _FUTEX_WAKE, 1 << 30)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _run_all(D, K, npieces):  # pragma: no cover - compiled
    for i in range(npieces):
        _run_piece(D, K, i)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _store(arr, i, v):  # pragma: no cover - compiled
    _astore(arr, i, v)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _load(arr, i):  # pragma: no cover - compiled
    return _aload(arr, i)


# ---------------------------------------------------------------------------------------------------
# the Python side
# ---------------------------------------------------------------------------------------------------
def _gemm_addresses() -> tuple[int, int, int] | None:
    """The addresses of ``cblas_dgemm`` and ``cblas_sgemm`` in the OpenBLAS numpy itself calls (the ILP64
    ``scipy_openblas64_`` numpy's wheels bundle) and of libc's ``syscall`` (the helpers' futex), or None."""
    if (platform.machine().lower() not in ("x86_64", "amd64") or not sys.platform.startswith("linux")
            or os.environ.get("TUCKERKIT_BLAS_HANDOFF") == "0"):
        return None
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            path = info.get("filepath", "")
            if info.get("internal_api") == "openblas" and "numpy" in path and "openblas64_" in path:
                lib = ctypes.CDLL(path)
                dgemm, sgemm, sysc = (ctypes.cast(f, ctypes.c_void_p).value for f in (
                    lib.scipy_cblas_dgemm64_, lib.scipy_cblas_sgemm64_, ctypes.CDLL(None).syscall))
                if dgemm is None or sgemm is None or sysc is None:
                    return None
                return dgemm, sgemm, sysc
    except Exception:  # pragma: no cover - another BLAS build: the Python pool instead
        return None
    return None


class _Handoff:
    """The round table, the control words and the helper threads of one process."""

    def __init__(self, addresses: tuple[int, int, int]) -> None:
        self.dgemm, self.sgemm, self.sysc = addresses
        self.ctrl = np.zeros(8 * 7, np.int64)
        self.D = np.zeros((_ROWS, _NCOL), np.int64)
        self.K = np.zeros((_ROWS, _KCOL), np.int64)
        self.hs = np.zeros(8 * _MAX_HELPERS, np.int64)
        self.word = np.zeros(16, np.int32)  # the futex the helpers sleep on
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.seq = 0
        self.pid = os.getpid()
        self.spin = int(SPIN_SECONDS * _cycle_rate())
        self.others = max(1, (os.cpu_count() or 2) - 1)  # the other CPUs (os.cpu_count: 3 us a call)

    def helpers(self, n: int) -> None:
        """At least ``n`` helper threads (made on first use, kept for the process)."""
        for h in range(len(self.threads), min(n, _MAX_HELPERS)):
            self.hs[h * 8 + _HSEQ] = self.seq  # a new helper has seen every round so far
            t = threading.Thread(target=_helper_loop, args=(self.ctrl, self.D, self.K, self.hs, self.word, h,
                                                            self.spin, self.sysc), daemon=True,
                                 name=f"tuckerkit-blas-{h}")
            t.start()
            self.threads.append(t)

    def run(self, descs: list[list[int]], workers: int) -> None:
        n = len(descs)
        self.D[:n] = descs
        self._go(n, workers)

    def run_kernels(self, rows: np.ndarray, workers: int) -> None:
        """The kernel pieces of ``rows`` (n x columns of K) over the helpers and the caller."""
        n = rows.shape[0]
        self.K[:n, :rows.shape[1]] = rows
        self.D[:n, 0] = 0  # (kernel pieces)
        self._go(n, workers)

    def _go(self, n: int, workers: int) -> None:
        if workers < 2:
            _run_all(self.D, self.K, n)
            return
        # (no more spinning helpers than the other CPUs: on an oversubscribed machine a spinner would share a
        # core with a helper still computing; the pieces, hence the bits, do not depend on it)
        nh = min(workers - 1, _MAX_HELPERS, self.others)
        self.helpers(nh)
        self.seq += 1
        _round(self.ctrl, self.D, self.K, self.hs, self.word, n, nh, self.seq, self.sysc)

    def park(self) -> None:
        _store(self.ctrl, _PARK, 1)

    def stop(self) -> None:
        """End the helper threads (at exit, before the arrays they read are freed)."""
        _store(self.ctrl, _STOP, 1)
        _wake_all(self.ctrl, self.word, self.sysc)
        for t in self.threads:
            t.join(timeout=1.0)


def _cycle_rate() -> float:
    """``llvm.readcyclecounter`` ticks per second (the TSC: a fixed rate on x86-64), measured over ~0.5 ms
    (the helpers' spin, 1 ms, needs no more; it is paid once a process, at the first round)."""
    c0, t0 = _cycles_now(), time.perf_counter()
    while time.perf_counter() - t0 < 5e-4:
        pass
    return max((_cycles_now() - c0) / (time.perf_counter() - t0), 1e8)


@njit(cache=True, nogil=True, **NO_RUNTIME)
def _cycles_now():  # pragma: no cover - compiled
    return _cycles()


_STATE: dict[str, Any] = {}
_STATE_LOCK = threading.Lock()


def _handoff() -> _Handoff | None:
    h = _STATE.get("h", False)
    if h is not False and (h is None or h.pid == os.getpid()):
        return h
    with _STATE_LOCK:
        h = _STATE.get("h", False)
        if h is False or (h is not None and h.pid != os.getpid()):  # first use, or a forked child: no helpers
            addresses = _gemm_addresses()
            h = _STATE["h"] = _Handoff(addresses) if addresses is not None else None
            if h is not None:
                atexit.register(h.stop)
        return h


def park() -> None:
    """Send the spinning helpers to sleep (before another parallel section, which needs the cores)."""
    h = _STATE.get("h")
    if h:
        h.park()


def prewake() -> None:
    """Start waking the helpers that sleep, for a round the caller is about to publish: a sleeping thread takes
    tens of microseconds to run again (a futex wake, and on a virtual machine the host's wake of its CPU), which
    then overlaps the caller's own work before the round (planning, the output, the pieces' descriptors)
    instead of delaying the round's other pieces. Nothing where no helper exists yet (the first round makes
    them) or in a forked child. ``contract`` calls it for a plan that runs in pieces: float32 GEMMs of 33.5
    MFlop on 2 cores (Table II, n = 64), every call cold, 1-3 % faster in an in-process A/B (the wake takes
    longer than the set-up it overlaps)."""
    h = _STATE.get("h")
    if h and h.threads and h.pid == os.getpid():
        _prewake(h.ctrl, h.hs, h.word, len(h.threads), h.sysc)


def helpers_spinning(policy: Any) -> bool:
    """Whether the helpers a round of ``policy`` would use are awake now: spinning within their
    :data:`SPIN_SECONDS` after a round (or at one), not parked, not asleep. A round then starts at once; a
    sleeping helper takes tens of microseconds to run again (a futex wake, and on a virtual machine the host's
    wake of its CPU), which a call of a few tenths of a millisecond does not win back. A hint read without a
    lock: a helper may fall asleep right after (the round then wakes it, as any round does); the pieces a
    caller cuts by it never change a result's bits."""
    if policy is None or policy.workers < 2:
        return False
    h = _STATE.get("h")
    if not h or h.pid != os.getpid():
        return False
    nh = min(policy.workers - 1, _MAX_HELPERS, h.others)
    return len(h.threads) >= nh and bool(_spinning(h.ctrl, h.hs, nh))


def _layout(x: np.ndarray, it: int) -> tuple[int, int] | None:
    """(CblasNoTrans or CblasTrans, leading dimension) of a 2-D row-major view, or None (no unit stride)."""
    r, q = x.shape[-2:]
    s0, s1 = x.strides[-2], x.strides[-1]
    if s0 % it or s1 % it or s0 < 0 or s1 < 0:
        return None
    s0, s1 = s0 // it, s1 // it
    if s1 == 1 or q == 1:
        ld = s0 if r > 1 else q
        return (111, ld) if ld >= max(q, 1) else None
    if s0 == 1 or r == 1:
        ld = s1 if q > 1 else r
        return (112, ld) if ld >= max(r, 1) else None
    return None


def describe(a: np.ndarray, b: np.ndarray, c: np.ndarray, addresses: tuple[int, int]) -> tuple[list[int], bool] | None:
    """The descriptor of ``c[...] = a @ b`` (2-D, or 3-D with one batch axis, broadcast where its extent is 1
    in ``a`` or ``b``) and whether it computes ``c^T = b^T a^T`` (``c`` column-major), or None where BLAS
    cannot take the views as they are."""
    if c.dtype not in (np.float64, np.float32) or a.dtype != c.dtype or b.dtype != c.dtype or c.size == 0:
        return None
    if not (c.ndim == a.ndim == b.ndim and c.ndim in (2, 3)) or a.shape[-1] == 0:
        return None
    it = c.itemsize
    nb = c.shape[0] if c.ndim == 3 else 1

    def bstride(x: np.ndarray) -> int | None:
        if x.ndim == 2 or x.shape[0] == 1:
            return 0
        return x.strides[0] if x.shape[0] == nb else None

    sa, sb, sc = bstride(a), bstride(b), bstride(c)
    if sa is None or sb is None or sc is None:
        return None
    lc = _layout(c, it)
    if lc is None:
        return None
    swapped = lc[0] == 112
    if swapped:  # c column-major: c^T = b^T a^T, row-major
        a, b, c = np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2), np.swapaxes(c, -1, -2)
        sa, sb = sb, sa
        lc = _layout(c, it)
        if lc is None:  # pragma: no cover - a transposed column-major view is row-major
            return None
    la, lb = _layout(a, it), _layout(b, it)
    if la is None or lb is None:
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    return [addresses[0] if it == 8 else addresses[1], int(it == 8), la[0], lb[0], m, n, k,
            _address(a), la[1], _address(b), lb[1], _address(c), lc[1], nb, sa, sb, sc], swapped


# descriptor columns
_M, _N, _K, _A, _B, _C, _NB, _SA, _SB, _SC = 4, 5, 6, 7, 9, 11, 13, 14, 15, 16


def run_split(av: np.ndarray, bv: np.ndarray, cv: np.ndarray, axis: int, bounds: list[int], policy: Any,
              partial: np.ndarray | None = None) -> bool:
    """``cv[...] = av @ bv`` (2-D, or 3-D with one batch axis) in pieces along ``axis`` of ``cv`` (0 the batch
    of a 3-D product, ``ndim - 2`` the rows, ``ndim - 1`` the columns) cut at ``bounds``; or, given
    ``partial`` (pieces x cv's shape), along the reduction: piece ``i`` of the reduction into ``partial[i]``.
    On the policy's workers, BLAS held to one thread by the caller. False (nothing done) where the views do
    not fit BLAS or there is no numpy OpenBLAS to call. Every piece is the same BLAS call on every route: the
    helpers, or (another thread using them) the Python pool running the compiled calls, or (one worker, a
    call from inside a worker) the calling thread."""
    h = _handoff()
    npieces = len(bounds) - 1
    if h is None or npieces > _ROWS:
        return False
    got = describe(av, bv, cv if partial is None else partial[0], (h.dgemm, h.sgemm))
    if got is None:
        return False
    base, swapped = got
    nd = cv.ndim
    rows = []
    for i in range(npieces):
        lo, hi = bounds[i], bounds[i + 1]
        d = list(base)
        if partial is not None:  # the reduction: a's columns, b's rows, partial i
            d[_K] = hi - lo
            d[_B if swapped else _A] += lo * av.strides[-1]
            d[_A if swapped else _B] += lo * bv.strides[-2]
            d[_C] += i * partial.strides[0]
        elif nd == 3 and axis == 0:  # the batch
            d[_NB] = hi - lo
            d[_A] += lo * d[_SA]
            d[_B] += lo * d[_SB]
            d[_C] += lo * d[_SC]
        elif axis == nd - 2:  # rows of c: a's rows
            d[_N if swapped else _M] = hi - lo
            d[_B if swapped else _A] += lo * av.strides[-2]
            d[_C] += lo * cv.strides[-2]
        elif axis == nd - 1:  # columns of c: b's columns
            d[_M if swapped else _N] = hi - lo
            d[_A if swapped else _B] += lo * bv.strides[-1]
            d[_C] += lo * cv.strides[-1]
        else:
            return False
        rows.append(d)
    workers = 1 if _in_worker() else policy.workers
    if h.lock.acquire(blocking=False):
        try:
            h.run(rows, workers)
        finally:
            h.lock.release()
        return True
    table = np.array(rows, dtype=np.int64)
    parallel_for(lambda i, _: _run_piece(table, _NO_KERNELS, i), npieces, policy)
    return True


_NO_KERNELS = np.zeros((1, _KCOL), np.int64)


def _address(x: np.ndarray) -> int:
    return int(x.__array_interface__["data"][0])


def kernel_address(disp: Any, args: list[Any], lohi: tuple[int, int]) -> int | None:
    """The address of the C wrapper numba made for the overload of the kernel ``disp`` that ``args`` call (loaded
    from the cache, or compiled, by one call over no tiles: ``lohi`` are the positions of the tile range), kept
    on the dispatcher by dtype; None where an array is not aligned or not C-contiguous (another overload, and
    the rows describe C arrays: the Python pool takes those), ``disp`` is no numba dispatcher (a test's stand-in)
    or numba made no such wrapper."""
    overloads = getattr(disp, "overloads", None)
    if overloads is None or not all(a.flags.aligned and a.flags.c_contiguous
                                    for a in args if isinstance(a, np.ndarray)):
        return None
    key = args[0].dtype.char
    known = disp.__dict__.setdefault("_tuckerkit_cwrap", {})
    addr = known.get(key)
    if addr is None:
        sig = tuple(disp.typeof_pyval(a) for a in args)
        if sig not in overloads:
            none = list(args)
            none[lohi[0]] = none[lohi[1]] = 0
            disp(*none)
        cres = overloads.get(sig)
        try:
            addr = int(cres.library.get_pointer_to_function(cres.fndesc.llvm_cfunc_wrapper_name) or 0)
        except Exception:  # pragma: no cover - another numba: the Python pool instead
            addr = 0
        known[key] = addr
    return addr or None


def kernel_rows(name: str, disp: Any, args: list[Any], lohi: tuple[int, int], bounds: list[int],
                fresh: tuple[int, ...]) -> tuple[np.ndarray, list[int], list[np.ndarray]] | None:
    """The rows of ``disp(*args)`` (a compiled small-rank kernel of :data:`KERNEL_PATTERNS` ``name``) over the
    tile ranges ``[bounds[i], bounds[i + 1])`` (at positions ``lohi``), for :meth:`_Handoff.run_kernels`: the
    rows, the column of each argument, and the scratch blocks of the pieces after the first (the arrays at
    positions ``fresh``: a copy each, alive until the round ends). None where there are no helpers or ``disp``
    cannot be called by address."""
    h = _handoff()
    n = len(bounds) - 1
    kind = KERNEL_KINDS.get((name, args[0].itemsize))
    if h is None or n > _ROWS or kind is None:
        return None
    addr = kernel_address(disp, args, lohi)
    if addr is None:
        return None
    row = [kind, addr]
    cols = []
    for p, a in zip(KERNEL_PATTERNS[name], args, strict=True):
        cols.append(len(row))
        if p in "aum":
            row.append(_address(a))
            row.extend(a.shape)
        elif p != "z":
            row.append(int(a))
    rows = np.array([row] * n, dtype=np.int64)
    rows[:, cols[lohi[0]]] = bounds[:-1]
    rows[:, cols[lohi[1]]] = bounds[1:]
    # each further piece's scratch: one block a fresh argument, a piece's copy at its own offset
    scratch = [np.empty((n - 1, args[j].size), args[j].dtype) for j in fresh]
    for j, block in zip(fresh, scratch, strict=True):
        base, step = _address(block), block.strides[0]
        rows[1:, cols[j]] = [base + step * k for k in range(n - 1)]
    return rows, cols, scratch


def run_rows(rows: np.ndarray, policy: Any) -> bool:
    """The kernel pieces of ``rows`` (:func:`kernel_rows`) on the helpers and the caller, each piece claimed by
    whichever thread is free; False, with nothing run, where there are no helpers or they are busy (another
    thread's round: the caller then takes the Python pool). One piece, or one worker, runs every piece on the
    caller in order from ``rows`` itself: no helpers, no lock (other threads' rounds go on meanwhile)."""
    h = _handoff()
    if h is None:
        return False
    n = rows.shape[0]
    if n < 2 or policy is None or policy.workers < 2 or _in_worker():
        _run_all(_KERNEL_PIECES, rows, n)
        return True
    if not h.lock.acquire(blocking=False):
        return False
    try:
        quiet_blas_workers()  # OpenBLAS's workers spinning beside the helpers would share their cores
        h.run_kernels(rows, policy.workers)
    finally:
        h.lock.release()
    return True


_KERNEL_PIECES = np.zeros((_ROWS, _NCOL), np.int64)  # a round table of kernel pieces only (read, never written)


def run_kernel(name: str, disp: Any, args: list[Any], lohi: tuple[int, int], bounds: list[int],
               fresh: tuple[int, ...], policy: Any) -> bool:
    """``disp(*args)`` over the tile ranges ``[bounds[i], bounds[i + 1])`` (:func:`kernel_rows`) on the helpers
    and the caller (:func:`run_rows`). False, with nothing run, where there are no helpers, they are busy or
    ``disp`` cannot be called by address."""
    got = kernel_rows(name, disp, args, lohi, bounds, fresh)
    if got is None:
        return False
    rows, _, scratch = got
    ran = run_rows(rows, policy)
    del scratch  # (alive until the round ended)
    return ran


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
