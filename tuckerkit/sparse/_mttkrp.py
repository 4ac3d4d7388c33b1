"""Sparse MTTKRP: per-mode CSF plan and the dispatch target of ``tuckerkit.engine.mttkrp``."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit.engine._policy import ExecutionPolicy, blas_pinned, resolve_policy
from tuckerkit.sparse._coo import COOTensor
from tuckerkit.sparse._csf import CSFTensor, as_coo

#: plan kinds, most memory first
CSF_KINDS = ("all", "two", "one")


@dataclass(frozen=True)
class SparsePlan:
    """Which CSF tree and which kernel serve each mode's MTTKRP.

    ``"all"``: one tree rooted at each mode (every mode gets the root kernel: the fastest, N trees of
    memory); ``"one"``: a single tree, short modes first, shared by all modes (root kernel for its root,
    the internal-level kernel for the middle levels, the leaf kernel for the last: least memory);
    ``"two"``: that tree plus a second one rooted at its leaf mode, so the longest mode gets a root kernel.

    Attributes
    ----------
    kind : {"all", "two", "one"}
    orders : tuple of tuple of int
        The mode order (root first) of each tree.
    assignment : tuple of (int, int)
        For each mode, ``(tree, level)``: level 0 runs the root kernel, deeper levels the internal or leaf
        kernel (thread-private outputs, summed; no atomics).
    bytes : int
        Memory of the trees.
    build_seconds : float
        Time spent building them (once per tensor).
    reason : str
        Why this kind was chosen (the memory budget, or the caller's ``csf=``).

    Examples
    --------
    >>> from tuckerkit.datasets import make_sparse_tensor
    >>> X = make_sparse_tensor((30, 20, 10), 200, random_state=0).data
    >>> plan = X.plan()
    >>> plan.kind, plan.orders
    ('all', ((0, 2, 1), (1, 2, 0), (2, 1, 0)))
    >>> X.plan(csf="one").assignment
    ((0, 2), (0, 1), (0, 0))
    """

    kind: str
    orders: tuple[tuple[int, ...], ...]
    assignment: tuple[tuple[int, int], ...]
    bytes: int
    build_seconds: float
    reason: str = ""

    def kernel(self, mode: int) -> str:
        tree, level = self.assignment[mode]
        n_levels = len(self.orders[tree])
        return "root" if level == 0 else ("leaf" if level == n_levels - 1 else "internal")

    def explain(self) -> str:
        lines = [f"sparse plan '{self.kind}': {len(self.orders)} CSF tree(s), {self.bytes:,} bytes, "
                 f"built in {self.build_seconds * 1e3:.1f} ms" + (f" ({self.reason})" if self.reason else "")]
        for n, (tree, _level) in enumerate(self.assignment):
            lines.append(f"  mode {n}: CSF order {list(self.orders[tree])} ({self.kernel(n)} kernel)")
        return "\n".join(lines)


def _kernel_workers(policy: ExecutionPolicy | None) -> int:
    """Threads the compiled kernels run on (the policy's workers: :func:`~tuckerkit.sparse._kernels.run_parts`)."""
    return resolve_policy(policy).workers


def _estimate_tree_bytes(coo: COOTensor) -> int:
    """An upper bound on one CSF tree's memory: values plus, per level, an index and a pointer per node."""
    itemsize = 4 if max(max(coo.shape), coo.nnz) < 2**31 - 1 else 8
    return coo.nnz * (coo.values.itemsize + (2 * coo.ndim - 1) * itemsize)


def _default_budget() -> int:
    """``csf="auto"``'s memory budget: a quarter of the machine's physical memory. Not of the memory free at
    the moment: the kinds give different bits (their sums run in different orders), and the free memory moves
    with other processes and the page cache, so the same call on a busier moment of the machine gave other
    bits (a 1M-nonzero tensor took 'two' instead of 'all' below 300 MB free)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        total = 32 << 30
    return int(total // 4)


#: cost model of ``csf="auto"``, in units of one root-kernel MTTKRP of one mode (measured on skew3d and 5-way
#: power-law tensors, 2 threads, rank 16): building one CSF tree (row-moving counting sorts plus one level
#: pass) costs about as much as one root MTTKRP; an internal- or leaf-level MTTKRP (thread-private outputs
#: summed afterwards, scattered output rows) about 1.5 of them. Rechecked with the column-blocked level
#: kernels (stop 55, 2-core AVX2, rank 16, medians of 7 interleaved): 1.86-1.96 on skew3d, 1.61-1.95 on
#: unif3d, 1.20-1.32 on skew4d (the loop form had taken 3-4 on the 3-way tensors)
BUILD_COST = 1.0
LEVEL_COST = 1.5
#: iterations assumed when the caller does not say (CP-ALS's default stopping rule converges in 30-80)
DEFAULT_ITERATIONS = 50


def _kind_trees(kind: str, N: int) -> tuple[int, int, int]:
    """(trees, root-kernel modes, level-kernel modes) of a plan kind."""
    if kind == "all":
        return N, N, 0
    if kind == "two" and N > 1:
        return 2, 2, N - 2
    return 1, 1, N - 1


def plan_cost(kind: str, N: int, iterations: int) -> float:
    """Estimated build plus ``iterations`` sweeps of a plan kind, in root-MTTKRP units (see BUILD_COST)."""
    trees, roots, levels = _kind_trees(kind, N)
    return trees * BUILD_COST + iterations * (roots + LEVEL_COST * levels)


def _choose_kind(coo: COOTensor, memory_budget: int | None, iterations: int | None = None) -> tuple[str, str]:
    budget = _default_budget() if memory_budget is None else int(memory_budget)
    one = _estimate_tree_bytes(coo)
    N = coo.ndim
    its = DEFAULT_ITERATIONS if iterations is None else int(iterations)
    said = f"{its} iterations" + (" assumed" if iterations is None else "")
    fits = [k for k in CSF_KINDS if _kind_trees(k, N)[0] * one <= budget]
    if not fits:
        return "one", f"auto: even 1 tree of <= {one:,} bytes exceeds the {budget:,}-byte budget"
    costs = {k: plan_cost(k, N, its) for k in fits}
    kind = min(fits, key=lambda k: (costs[k], -CSF_KINDS.index(k)))  # ties: the fewer trees
    others = ", ".join(f"{k!r} {costs[k]:.0f}" for k in fits if k != kind)
    left = [k for k in CSF_KINDS if k not in fits]
    return kind, (f"auto: {_kind_trees(kind, N)[0]} tree(s) build + {said} cost {costs[kind]:.0f} root-MTTKRP "
                  f"units" + (f" vs {others}" if others else "")
                  + (f"; {', '.join(map(repr, left))} exceed the {budget:,}-byte budget" if left else
                     f"; fits the {budget:,}-byte budget"))


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``; nothing elsewhere).

    The tree builds free sorted copies of the nonzeros of a few tens of MB each; glibc raises its mmap
    threshold after the first such free, so later ones stay in the process's heap and count in its peak
    memory until trimmed (measured: 70 MB of a 2M-nonzero tensor's CLI run)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


def _build_trees(coo: COOTensor, orders: list) -> list[CSFTensor]:
    """The CSF trees of a plan, one after the other, each built in parts on the CPU threads
    (:func:`tuckerkit.sparse._csf._build_in_parts`).

    A tree not rooted at the first mode holds the other coordinates and the values grouped by root slice (32 MB
    for 2M nonzeros of a 3-way tensor) until it is written; building the trees side by side held two such
    copies at once (15 MB more peak memory of a 2M-nonzero CLI run) for a build measured no faster on a shared
    2-core machine (0.23-0.37 s one after the other vs 0.30-0.45 s side by side, skew3d, plan 'all'), so the
    threads share each tree's passes instead."""
    return [CSFTensor(coo, o, _share=True) for o in orders]


def sparse_plan(X: Any, csf: str | None = None, memory_budget: int | None = None,
                iterations: int | None = None) -> tuple[SparsePlan, list]:
    """The per-mode CSF plan of ``X`` (built once and cached on the tensor).

    ``csf=None`` returns the cached plan or builds ``"auto"``; ``"auto"`` picks, among the kinds whose trees
    fit ``memory_budget`` bytes (default: a quarter of the physical memory), the one whose build plus
    ``iterations`` sweeps is cheapest (:func:`plan_cost`; default 50 iterations); ``"all"``, ``"two"`` and
    ``"one"`` force a kind. A different kind replaces the cached plan.
    """
    cache = getattr(X, "_tk_csf", None)
    if csf is None and cache is not None:
        return cache
    if csf is not None and csf != "auto" and csf not in CSF_KINDS:
        raise ValueError(f"csf={csf!r} is not valid; expected 'auto', 'all', 'two' or 'one'")
    t0 = time.perf_counter()
    coo = as_coo(X)
    if iterations is not None and (isinstance(iterations, bool) or not isinstance(iterations, int | np.integer)
                                   or iterations < 1):
        raise ValueError(f"iterations must be a positive integer or None; received {iterations!r}")
    if csf is None or csf == "auto":
        kind, reason = _choose_kind(coo, memory_budget, iterations)
    else:
        kind, reason = csf, f"csf={csf!r}"
    if cache is not None and cache[0].kind == kind:
        if cache[0].reason != reason:  # (the same trees; the reason for this call's choice, with its iterations)
            cache = (dataclasses.replace(cache[0], reason=reason), cache[1])
            X._tk_csf = cache
        return cache
    N = coo.ndim
    short_first = sorted(range(N), key=lambda m: (coo.shape[m], m))
    if kind == "all":
        orders = [(n, *sorted((m for m in range(N) if m != n), key=lambda m: coo.shape[m])) for n in range(N)]
        assignment = [(n, 0) for n in range(N)]
    else:
        orders = [tuple(short_first)]
        assignment = [(0, short_first.index(n)) for n in range(N)]
        if kind == "two" and N > 1:
            leaf = short_first[-1]
            orders.append((leaf, *short_first[:-1]))
            assignment[leaf] = (1, 0)
    csfs = _build_trees(coo, orders)
    release_free_memory()
    plan = SparsePlan(kind, tuple(c.order for c in csfs), tuple(assignment), sum(c.nbytes for c in csfs),
                      time.perf_counter() - t0, reason)
    X._tk_csf = (plan, csfs)
    X._tk_csf_stamp = values_stamp(X)
    return plan, csfs


def values_stamp(X: Any) -> tuple | None:
    """What :meth:`~tuckerkit.sparse._dispatch.SparseOperand.drop_stale_plan` compares: a COO tensor's
    ``values`` array (its address and length) and a position-mixed hash of its entries' bits
    (:func:`~tuckerkit.sparse._kernels.values_hash`, one read), so that an edit in place is seen; None for other
    tensors (a CSF tensor's values are its tree's own)."""
    v = getattr(X, "values", None) if type(X).__name__ == "COOTensor" else None
    if not isinstance(v, np.ndarray) or v.dtype.itemsize not in (4, 8, 16) or not v.flags.c_contiguous:
        return None
    from tuckerkit.sparse._kernels import values_hash

    bits = v.view(np.uint64 if v.dtype.itemsize >= 8 else np.uint32)
    return (v.__array_interface__["data"][0], v.size, int(values_hash(bits)))


def _packed_tree(csf: CSFTensor) -> tuple:
    """The CSF's levels concatenated once (cached on it): the kernel takes flat arrays plus offsets."""
    cache = csf.__dict__.setdefault("_tk_cache", {})
    if "packed" in cache:
        return cache["packed"]
    N = csf.ndim
    idx_off = np.zeros(N + 1, dtype=np.int64)
    for lev in range(N):
        idx_off[lev + 1] = idx_off[lev] + len(csf.idx[lev])
    pos_off = np.zeros(N, dtype=np.int64)
    for lev in range(N - 1):
        pos_off[lev + 1] = pos_off[lev] + len(csf.pos[lev])
    itype = csf.idx[0].dtype
    idx_all = np.concatenate(csf.idx).astype(itype, copy=False)
    pos_all = np.concatenate(csf.pos).astype(itype, copy=False) if N > 1 else np.zeros(1, itype)
    cache["packed"] = (pos_all, pos_off, idx_all, idx_off)
    return cache["packed"]


def balanced_roots(csf: CSFTensor, parts: int) -> np.ndarray:
    """Cut points (``parts + 1``) of the roots into contiguous runs holding equal numbers of nonzeros.

    Contiguous runs keep each thread's walk through the CSF arrays sequential (a heaviest-first dealing of
    roots measured 15-20 % slower for its scattered reads); equal nonzeros keep power-law slices balanced.
    """
    key = ("bounds", parts)
    cache = csf.__dict__.setdefault("_tk_cache", {})
    if key in cache:
        return cache[key]
    n_root = len(csf.idx[0])
    lo, hi = csf.pos[0][:-1].astype(np.int64), csf.pos[0][1:].astype(np.int64)
    for lev in range(1, csf.ndim - 1):  # nonzeros under each root: walk the pointers down to the leaves
        lo, hi = csf.pos[lev][lo].astype(np.int64), csf.pos[lev][hi].astype(np.int64)
    cum = np.concatenate([[0], np.cumsum(hi - lo)])
    targets = cum[-1] * np.arange(parts + 1) / max(parts, 1)
    bounds = np.searchsorted(cum, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, n_root
    bounds = np.maximum.accumulate(np.minimum(bounds, n_root))
    cache[key] = bounds
    return bounds


#: byte alignment of the factor rows and outputs the kernels read and write (a cache line)
ALIGN = 64


def aligned_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A C-contiguous zero array whose data starts on a cache line (:data:`ALIGN` bytes).

    numpy's allocations start 16 bytes into a line, so a 128-byte factor row (rank 16, float64) spans three
    cache lines instead of two: every random row the kernels read costs half again the memory traffic
    (measured: the root kernels 1.3-1.5x faster on aligned factors, skew3d / skew4d / unif3d at rank 16)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = (-buf.ctypes.data) % ALIGN
    return buf[start:start + nbytes].view(dtype).reshape(shape)


def work_buffer(owner: Any, purpose: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An aligned array of ``shape`` kept on the tensor ``owner`` for ``purpose`` and reused by later calls
    (:func:`tuckerkit.engine._buffers.pooled`) until :func:`release_work_buffers`: the kernels' outputs and
    factor stacks are allocated once per decomposition, not per call, so the iterations neither fault in fresh
    pages nor grow the heap (glibc keeps freed blocks of a few MB in the heap once its mmap threshold has
    risen: 20 MB more peak memory measured over a 2M-nonzero CLI run). The modes and trees share the buffers
    of one shape (one mode's result is dropped before the next mode's call, so two of each shape serve a
    sweep). Its contents are stale: the caller writes every entry it reads (or zeroes it)."""
    from tuckerkit.engine._buffers import pooled

    return pooled(owner.__dict__.setdefault("_tk_work", {}), purpose, shape, dtype)


def release_work_buffers(X: Any) -> None:
    """Drop the work buffers kept on ``X`` (:func:`work_buffer`): a decomposition calls it when it returns, so
    that the tensor holds no memory between calls (the next call makes them again, once)."""
    X.__dict__.pop("_tk_work", None)


def _pack_levels(csf: CSFTensor, factors: Sequence[Any], skip_level: int, R: int, dtype,
                 owner: Any = None) -> tuple:
    """The factors of the tree's levels stacked in one aligned array (the skipped level's rows left out); with
    an ``owner``, in a work buffer kept on it (:func:`work_buffer`; every row is written)."""
    N = csf.ndim
    F_off = np.zeros(N, dtype=np.int64)
    rows = [0 if lev == skip_level or factors[csf.order[lev]] is None else csf.shape[csf.order[lev]]
            for lev in range(N)]
    shape = (sum(rows), R)
    F_all = aligned_zeros(shape, dtype) if owner is None else work_buffer(owner, "stack", shape, dtype)
    off = 0
    for lev in range(N):
        F_off[lev] = off
        if rows[lev]:
            F_all[off:off + rows[lev]] = factors[csf.order[lev]]
        off += rows[lev]
    return F_all, F_off


def level_factors(csf: CSFTensor, factors: Sequence[Any], skip_level: int, R: int, dtype: Any,
                  owner: Any = None, columns: int | None = None) -> tuple:
    """The factor of each level of the tree, in level order, as the blocked root kernels take them: a factor
    that is C-contiguous, writable, of ``dtype`` and starts on a cache line (:data:`ALIGN`; CP-ALS's factors
    after their first update) goes as it is, another is copied into an aligned array (with an ``owner``, a
    work buffer kept on it, :func:`work_buffer`); the skipped level gets an empty array. Passing the factors
    saves :func:`_pack_levels`' copy of them into one stack at every call (2.6 MB per mode on unif3d).
    ``columns`` > ``R`` (:func:`padded_rank`): every factor copied, with zero columns after its ``R``."""
    C = R if columns is None else columns
    Fs = []
    for lev in range(csf.ndim):
        U = None if lev == skip_level else factors[csf.order[lev]]
        if U is None:
            Fs.append(np.zeros((0, C), dtype))
            continue
        if C != R or not (isinstance(U, np.ndarray) and U.dtype == dtype and U.flags.c_contiguous
                          and U.flags.writeable and U.ctypes.data % ALIGN == 0):
            shape = (int(U.shape[0]), C)
            A = aligned_zeros(shape, dtype) if owner is None else work_buffer(owner, f"factor{lev}", shape, dtype)
            A[:, :R] = U
            A[:, R:] = 0
            U = A
        Fs.append(U)
    return tuple(Fs)


#: the smallest rank whose MTTKRP runs on the column-blocked kernels with zero columns added (:func:`padded_rank`)
PAD_MIN_RANK = 2
#: whether ranks up to the narrow block (8) run on the narrow kernels (:func:`padded_rank`)
NARROW_RANKS = True


def padded_rank(R: int) -> int:
    """The columns an MTTKRP of rank ``R`` computes: from :data:`PAD_MIN_RANK` up, ``R`` rounded up to the
    narrow kernels' block (8) up to 8, above it to a multiple of the wide kernels' block (16); below, ``R``
    (the loop form). Each column is computed alone, by the same operations in the same order in every kernel,
    so the zero columns change no bit of the others (a test checks it).

    Why: the blocked kernels keep each level's sums in registers, the loop form in memory; on a 1.5M-nonzero
    power-law 3-way tree (2 workers, every mode, medians of 5) the loop form took 7-9 ms at rank 1-4, 11-14
    ms at 5, 15-20 ms at 10-12, 24-25 ms at 24 and 26-28 ms at 40, and the wide blocked ones 7-9 ms at 16,
    14-17 ms at 32 and 19-26 ms at 48. The narrow kernels (stop 56; CP-ALS per iteration on skew3d, unif3d and
    skew4d, both dtypes, three interleaved rounds, two runs, the same fits to the bit): rank 2 0.67-1.11x the
    loop form's time (above 1 on unif3d in one run), 3-4 0.60-0.86x, 5 0.70-0.89x the 16 wide columns', 8
    0.63-0.88x them (0.86-1.07x the loop form's; ``benchmarks/sparse_ranks.py``). Not above 8: a rank of 17-24
    on three narrow passes ran 0.90-1.05x its two wide ones, 40 on five 1.07-1.08x its three (each pass walks
    the whole tree again)."""
    from tuckerkit.sparse._nested import BLOCK, NARROW

    if R < PAD_MIN_RANK:
        return R
    if NARROW_RANKS and R <= NARROW:
        return NARROW
    return -(-R // BLOCK) * BLOCK


def sparse_mttkrp(X: COOTensor | CSFTensor, factors: Sequence[Any], mode: int,
                  policy: ExecutionPolicy | None = None) -> np.ndarray:
    """``X_(n) (khatri-rao of the other factors)`` for a sparse tensor, never densifying it.

    The plan says which tree and level serve ``mode``: the root kernel writes each output row from one
    thread; the internal and leaf kernels accumulate into one private output per thread, then add them.
    """
    from tuckerkit.sparse._kernels import mttkrp_level, mttkrp_root

    plan, csfs = sparse_plan(X)
    tree, level = plan.assignment[mode]
    csf = csfs[tree]
    R = next(U.shape[1] for m, U in enumerate(factors) if m != mode and U is not None)
    dtype = np.result_type(csf.values.dtype, *(U.dtype for m, U in enumerate(factors) if m != mode))
    pos_all, pos_off, idx_all, idx_off = _packed_tree(csf)
    vals = _values_as(csf, dtype)
    workers = _kernel_workers(policy)
    nested = _nested_kernel(csf.ndim, level)
    shape = (csf.shape[mode], R)
    with blas_pinned():  # (the kernels run over parts of the tree on the policy's threads; BLAS on one meanwhile)
        # the outputs and factor stacks are work buffers kept on X (work_buffer): allocated once per tensor
        if level == 0:
            # each root's row is written whole; the rows without a root are zeroed (the buffer may have served
            # another mode, or a caller wrote into a result it then dropped)
            out = work_buffer(X, "out", shape, dtype)
            bounds = balanced_roots(csf, 4 * workers)  # each output row written once: any cut, same bits
            Rp = padded_rank(R)
            blocked = _blocked_root_kernel(csf.ndim, Rp)
            if blocked is not None:  # the factors themselves, one per level (no stacked copy), or padded copies
                Fs = level_factors(csf, factors, 0, R, dtype, X, columns=Rp)
                full = out if Rp == R else work_buffer(X, "out_padded", (shape[0], Rp), dtype)
                full[_rootless_rows(csf)] = 0
                with slp_vectorize():
                    blocked(pos_all, pos_off, idx_all, idx_off, vals, Fs, bounds, full, policy=policy)
                if Rp != R:
                    out[...] = full[:, :R]
                return out
            out[_rootless_rows(csf)] = 0
            F_all, F_off = _pack_levels(csf, factors, 0, R, dtype, X)
            if nested is not None:
                nested(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, bounds, out, policy=policy)
            else:
                mttkrp_root(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, csf.ndim, bounds, out, policy)
            return out
        # a fixed number of private outputs, whatever the workers: the same partial sums, added in the same
        # order, on any machine (bitwise repeatable)
        bounds = balanced_roots(csf, LEVEL_PARTS)
        Rp = padded_rank(R)
        blocked = _blocked_level_kernel(csf.ndim, level, Rp)
        if blocked is not None:  # as the root's: the factors themselves (or padded copies), one per level
            Fs = level_factors(csf, factors, level, R, dtype, X, columns=Rp)
            private = work_buffer(X, "private", (len(bounds) - 1, shape[0], Rp), dtype)
            private.fill(0)  # the kernels add into it
            with slp_vectorize():
                blocked(pos_all, pos_off, idx_all, idx_off, vals, Fs, bounds, private, policy=policy)
            private = private[:, :, :R]  # (the padded columns are zero: dropped)
        else:
            F_all, F_off = _pack_levels(csf, factors, level, R, dtype, X)
            private = work_buffer(X, "private", (len(bounds) - 1, *shape), dtype)
            private.fill(0)  # the kernels add into it
            if nested is not None:
                nested(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, bounds, private, policy=policy)
            else:
                mttkrp_level(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, csf.ndim, level, bounds,
                             private, policy)
        out = work_buffer(X, "out", shape, dtype)
        if private.shape[0] == 1:
            out[...] = private[0]
        else:  # ((p0 + p1) + p2) + ...: the partials added in order
            np.add(private[0], private[1], out=out)
        for t in range(2, private.shape[0]):
            out += private[t]
        return out


def _values_as(csf: CSFTensor, dtype: Any) -> np.ndarray:
    """The tree's values in ``dtype`` (a converted copy made once and kept on the tree for these values)."""
    if csf.values.dtype == dtype:
        return csf.values
    kept = csf.__dict__.get("_tk_values_as")
    if kept is None or kept[0] is not csf.values or kept[1].dtype != dtype:
        kept = csf.__dict__["_tk_values_as"] = (csf.values, csf.values.astype(dtype))
    return kept[1]


def _rootless_rows(csf: CSFTensor) -> np.ndarray:
    """The rows of the root mode that hold no nonzero (cached on the tree)."""
    cache = csf.__dict__.setdefault("_tk_cache", {})
    if "rootless" not in cache:
        present = np.zeros(csf.shape[csf.order[0]], dtype=bool)
        present[csf.idx[0]] = True
        cache["rootless"] = np.flatnonzero(~present)
    return cache["rootless"]


#: private outputs of an internal- or leaf-level MTTKRP (fixed: the result does not depend on the threads)
LEVEL_PARTS = 4


def _nested_kernel(n_levels: int, level: int) -> Any:
    """The nested-loop kernel of a 3- to 6-level tree (None: the generic walk serves deeper trees)."""
    if not 3 <= n_levels <= 6:
        return None
    from tuckerkit.sparse._nested import KERNELS

    return KERNELS[(n_levels, level)]


def _blocked_root_kernel(n_levels: int, R: int) -> Any:
    """The column-blocked root kernel of a 3- to 6-level tree when ``R`` is a multiple of its block (None:
    the loop form serves); same bits as the loop form (see ``_make_nested``)."""
    from tuckerkit.sparse._nested import BLOCK, BLOCKED_ROOT, BLOCKED_ROOT_NARROW, NARROW

    if R <= 0:
        return None
    if R % BLOCK == 0:
        return BLOCKED_ROOT.get(n_levels)
    return BLOCKED_ROOT_NARROW.get(n_levels) if R % NARROW == 0 else None


def _blocked_level_kernel(n_levels: int, level: int, R: int) -> Any:
    """The column-blocked internal- or leaf-level kernel of a 3- to 6-level tree when ``R`` is a multiple of
    its block (None: the loop form serves); same bits as the loop form (see ``_make_nested``)."""
    from tuckerkit.sparse._nested import BLOCK, BLOCKED_LEVEL, BLOCKED_LEVEL_NARROW, NARROW

    if R <= 0:
        return None
    if R % BLOCK == 0:
        return BLOCKED_LEVEL.get((n_levels, level))
    return BLOCKED_LEVEL_NARROW.get((n_levels, level)) if R % NARROW == 0 else None


@contextmanager
def slp_vectorize() -> Iterator[None]:
    """LLVM's SLP vectorizer on while a kernel compiles inside the block.

    numba leaves it off by default (``NUMBA_SLP_VECTORIZE``) and reads the setting at each compilation, so the
    blocked root kernels turn it on for their own compilation only (a cached kernel loads as compiled). It packs
    their rows of scalar accumulators into vector registers; it changes no floating-point operation or order
    (no fast-math), so the bits are the same either way: only the speed depends on it (measured in one process,
    1 thread, rank 16, shared machine: the blocked kernels 1.1-1.25x faster than the loop form on skew3d,
    skew4d and unif3d; without SLP they ran 1.6-2x slower than it)."""
    from numba.core import config

    global _slp_depth, _slp_before
    with _slp_lock:  # counted: calls from several threads restore the setting once, when the last one leaves
        if _slp_depth == 0:
            _slp_before = config.SLP_VECTORIZE  # type: ignore[attr-defined]
            config.SLP_VECTORIZE = 1  # type: ignore[attr-defined]
        _slp_depth += 1
    try:
        yield
    finally:
        with _slp_lock:
            _slp_depth -= 1
            if _slp_depth == 0:
                config.SLP_VECTORIZE = _slp_before  # type: ignore[attr-defined]


_slp_lock = threading.Lock()
_slp_depth = 0
_slp_before: Any = 0


def _rooted_order(shape: Sequence[int], mode: int) -> tuple[int, ...]:
    return (mode, *sorted((m for m in range(len(shape)) if m != mode), key=lambda m: shape[m]))


def sparse_ttmc(X: COOTensor | CSFTensor, factors: Sequence[Any], mode: int,
                policy: ExecutionPolicy | None = None) -> np.ndarray:
    """``X`` times ``factors[m].T`` along every mode ``m != mode``: a dense tensor with ``I_mode`` in position
    ``mode`` and ``R_m`` elsewhere (the projection sparse HOOI needs), from the CSF rooted at ``mode``."""
    from tuckerkit.sparse._kernels import ttmc_root

    plan, csfs = sparse_plan(X)
    tree, level = plan.assignment[mode]
    # the kernel needs a tree rooted at ``mode``: a shared-tree plan builds it for this call only
    csf = csfs[tree] if level == 0 else CSFTensor(as_coo(X), _rooted_order(X.shape, mode), _share=True)
    N = csf.ndim
    others = [m for m in range(N) if m != mode]
    mats = {m: np.asarray(factors[m]) for m in others}
    for m in others:
        U = mats[m]
        if U.ndim != 2 or U.shape[0] != csf.shape[m]:
            raise ValueError(f"factors[{m}] must have shape ({csf.shape[m]}, R); received {U.shape}")
    dtype = np.result_type(csf.values.dtype, *(U.dtype for U in mats.values()))
    ranks = [int(mats[csf.order[lev]].shape[1]) if lev else 0 for lev in range(N)]
    P_lev = np.ones(N + 1, dtype=np.int64)
    for lev in range(N - 1, 0, -1):
        P_lev[lev] = P_lev[lev + 1] * ranks[lev]
    P_off = np.zeros(N + 1, dtype=np.int64)
    for lev in range(1, N):
        P_off[lev + 1] = P_off[lev] + P_lev[lev]
    R_max = max(ranks[1:])
    pos_all, pos_off, idx_all, idx_off = _packed_tree(csf)
    F_off = np.zeros(N, dtype=np.int64)
    F_all = aligned_zeros((sum(csf.shape[csf.order[lev]] for lev in range(1, N)), R_max), dtype)
    off = 0
    for lev in range(1, N):
        U = mats[csf.order[lev]]
        F_off[lev] = off
        F_all[off:off + U.shape[0], : U.shape[1]] = U
        off += U.shape[0]
    out = np.zeros((csf.shape[mode], int(P_lev[1])), dtype=dtype)
    bounds = balanced_roots(csf, 4 * _kernel_workers(policy))
    with blas_pinned():
        ttmc_root(pos_all, pos_off, idx_all, idx_off, csf.values.astype(dtype, copy=False), F_all, F_off,
                  np.asarray(ranks, dtype=np.int64), P_lev, P_off, N, bounds, out, policy)
    Y = out.reshape(csf.shape[mode], *(ranks[lev] for lev in range(1, N)))  # axes in CSF order
    return Y.transpose(np.argsort(csf.order))  # a view with the modes in place
