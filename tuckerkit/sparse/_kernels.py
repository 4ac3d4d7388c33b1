"""Compiled CSF kernels (numba, cached on disk; run over parts of the tree on the policy's threads).

MTTKRP for the mode at the root of a CSF: each root node (a slice of the output mode) is one parallel
task that walks its fiber tree depth-first with one accumulator row per level, so every output row is
written by exactly one thread (no atomics). Works for any order >= 2. Each thread takes one contiguous run
of roots, cut where the nonzeros divide evenly (power-law slices), so memory is walked in order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import load_lightly
from tuckerkit.sparse._build_unrolled import (
    _build_packed3,
    _build_packed4,
    _build_packed5,
    _build_packed6,
    _count_levels3,
    _count_levels4,
    _count_levels5,
    _count_levels6,
    _first_root_at,
    _grouped_count3,
    _grouped_count4,
    _grouped_count5,
    _grouped_count6,
    _grouped_fill3,
    _grouped_fill4,
    _grouped_fill5,
    _grouped_fill6,
)


@njit(cache=True, nogil=True, fastmath=False)
def _root_range(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, n_levels, r0, r1, out):  # pragma: no cover
    R = out.shape[1]
    acc = np.zeros((n_levels, R), dtype=out.dtype)
    cur = np.zeros(n_levels, dtype=np.int64)
    end = np.zeros(n_levels, dtype=np.int64)
    for r in range(r0, r1):
        cur[1] = pos_all[pos_off[0] + r]
        end[1] = pos_all[pos_off[0] + r + 1]
        depth = 1
        while depth >= 1:
            if cur[depth] >= end[depth]:
                depth -= 1
                if depth >= 1:
                    node = cur[depth]
                    frow = F_off[depth] + idx_all[idx_off[depth] + node]
                    for q in range(R):
                        acc[depth, q] += acc[depth + 1, q] * F_all[frow, q]
                        acc[depth + 1, q] = 0.0
                    cur[depth] += 1
                continue
            node = cur[depth]
            if depth == n_levels - 1:
                v = vals[node]
                frow = F_off[depth] + idx_all[idx_off[depth] + node]
                for q in range(R):
                    acc[depth, q] += v * F_all[frow, q]
                cur[depth] += 1
            else:
                cur[depth + 1] = pos_all[pos_off[depth] + node]
                end[depth + 1] = pos_all[pos_off[depth] + node + 1]
                depth += 1
        orow = idx_all[idx_off[0] + r]
        for q in range(R):
            out[orow, q] = acc[1, q]
            acc[1, q] = 0.0


@njit(cache=True, nogil=True, fastmath=False)
def _root3_range(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, r0, r1, out):  # pragma: no cover
    """The root kernel of a 3-level tree as plain nested loops (the generic walk's depth stack and 2-D
    accumulator indexing cost a third of its time on short fibers); a fiber with one nonzero skips its
    accumulator."""
    R = out.shape[1]
    acc1 = np.zeros(R, dtype=out.dtype)
    acc2 = np.zeros(R, dtype=out.dtype)
    p0, p1 = pos_off[0], pos_off[1]
    i0, i1, i2 = idx_off[0], idx_off[1], idx_off[2]
    f1, f2 = F_off[1], F_off[2]
    for r in range(r0, r1):
        for q in range(R):
            acc1[q] = 0.0
        for j in range(pos_all[p0 + r], pos_all[p0 + r + 1]):
            k0 = pos_all[p1 + j]
            k1 = pos_all[p1 + j + 1]
            row1 = f1 + idx_all[i1 + j]
            if k1 - k0 == 1:
                v = vals[k0]
                row2 = f2 + idx_all[i2 + k0]
                for q in range(R):
                    acc1[q] += v * F_all[row2, q] * F_all[row1, q]
                continue
            for q in range(R):
                acc2[q] = 0.0
            for k in range(k0, k1):
                v = vals[k]
                row2 = f2 + idx_all[i2 + k]
                for q in range(R):
                    acc2[q] += v * F_all[row2, q]
            for q in range(R):
                acc1[q] += acc2[q] * F_all[row1, q]
        orow = idx_all[i0 + r]
        for q in range(R):
            out[orow, q] = acc1[q]


@njit(cache=True, nogil=True, fastmath=False)
def _root4_range(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, r0, r1, out):  # pragma: no cover
    """The root kernel of a 4-level tree as plain nested loops (see :func:`_root3_range`)."""
    R = out.shape[1]
    acc1 = np.zeros(R, dtype=out.dtype)
    acc2 = np.zeros(R, dtype=out.dtype)
    acc3 = np.zeros(R, dtype=out.dtype)
    p0, p1, p2 = pos_off[0], pos_off[1], pos_off[2]
    i0, i1, i2, i3 = idx_off[0], idx_off[1], idx_off[2], idx_off[3]
    f1, f2, f3 = F_off[1], F_off[2], F_off[3]
    for r in range(r0, r1):
        for q in range(R):
            acc1[q] = 0.0
        for j in range(pos_all[p0 + r], pos_all[p0 + r + 1]):
            row1 = f1 + idx_all[i1 + j]
            for q in range(R):
                acc2[q] = 0.0
            for k in range(pos_all[p1 + j], pos_all[p1 + j + 1]):
                l0 = pos_all[p2 + k]
                l1 = pos_all[p2 + k + 1]
                row2 = f2 + idx_all[i2 + k]
                if l1 - l0 == 1:
                    v = vals[l0]
                    row3 = f3 + idx_all[i3 + l0]
                    for q in range(R):
                        acc2[q] += v * F_all[row3, q] * F_all[row2, q]
                    continue
                for q in range(R):
                    acc3[q] = 0.0
                for ll in range(l0, l1):
                    v = vals[ll]
                    row3 = f3 + idx_all[i3 + ll]
                    for q in range(R):
                        acc3[q] += v * F_all[row3, q]
                for q in range(R):
                    acc2[q] += acc3[q] * F_all[row2, q]
            for q in range(R):
                acc1[q] += acc2[q] * F_all[row1, q]
        orow = idx_all[i0 + r]
        for q in range(R):
            out[orow, q] = acc1[q]


def run_parts(kernel, head, bounds, out, private=False, policy=None):
    """``kernel(*head, r0, r1, out)`` (a range of roots; a kernel that releases the GIL) over the parts that
    ``bounds`` cuts, on the policy's threads (:func:`~tuckerkit.engine._policy.parallel_for`), each thread
    taking the next part when free: into ``out`` whole (each output row written by one part) or, ``private``,
    into ``out[t]`` for part ``t``. Not a numba ``prange``: a ``parallel=True`` wrapper costs about 2 s of
    compiling per kernel and dtype, and starts numba's OpenMP threads, which spin on the cores after each call
    (see ``_make_nested``)."""
    from tuckerkit.engine._policy import parallel_for, resolve_policy

    def part(t, _):
        kernel(*head, bounds[t], bounds[t + 1], out[t] if private else out)

    parallel_for(part, bounds.shape[0] - 1, resolve_policy(policy))


class PartsKernel:
    """A range kernel called as ``run(*arrays, bounds, out, policy=None)``: :func:`run_parts` into ``out``
    whole (a root kernel) or into ``out[t]`` for part ``t`` (``private``)."""

    __slots__ = ("kernel", "private")

    def __init__(self, kernel, private=False):
        self.kernel = kernel
        self.private = private

    def __call__(self, *args, policy=None):
        *head, bounds, out = args
        run_parts(self.kernel, head, bounds, out, self.private, policy)


def mttkrp_root(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, n_levels, bounds, out, policy=None):
    """MTTKRP for the mode at the root: each run of roots (cut where the nonzeros split evenly: power-law
    slices) walked by one thread, each output row written once (the 3- and 4-level walks unrolled)."""
    head = (pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off)
    if n_levels == 3:
        run_parts(_root3_range, head, bounds, out, policy=policy)
    elif n_levels == 4:
        run_parts(_root4_range, head, bounds, out, policy=policy)
    else:
        run_parts(_root_range, (*head, n_levels), bounds, out, policy=policy)


@njit(cache=True, nogil=True, fastmath=False)
def _ttmc_range(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, R_lev, P_lev, P_off, n_levels, r0, r1,
                out):  # pragma: no cover
    # tmp[P_off[l]:P_off[l] + P_lev[l]] accumulates, for the current node's children at level l, the sum of
    # kron(F_l[idx], ..., F_{N-1}[idx]) * value: row-major over the levels l..N-1 (the CSF order)
    tmp = np.zeros(P_off[n_levels], dtype=out.dtype)
    cur = np.zeros(n_levels, dtype=np.int64)
    end = np.zeros(n_levels, dtype=np.int64)
    for r in range(r0, r1):
        cur[1] = pos_all[pos_off[0] + r]
        end[1] = pos_all[pos_off[0] + r + 1]
        depth = 1
        while depth >= 1:
            if cur[depth] >= end[depth]:
                depth -= 1
                if depth >= 1:
                    node = cur[depth]
                    frow = F_off[depth] + idx_all[idx_off[depth] + node]
                    inner = P_lev[depth + 1]
                    bd, bn = P_off[depth], P_off[depth + 1]
                    for a in range(R_lev[depth]):
                        f = F_all[frow, a]
                        for b in range(inner):
                            tmp[bd + a * inner + b] += f * tmp[bn + b]
                    for b in range(inner):
                        tmp[bn + b] = 0.0
                    cur[depth] += 1
                continue
            node = cur[depth]
            if depth == n_levels - 1:
                v = vals[node]
                frow = F_off[depth] + idx_all[idx_off[depth] + node]
                bd = P_off[depth]
                for a in range(R_lev[depth]):
                    tmp[bd + a] += v * F_all[frow, a]
                cur[depth] += 1
            else:
                cur[depth + 1] = pos_all[pos_off[depth] + node]
                end[depth + 1] = pos_all[pos_off[depth] + node + 1]
                depth += 1
        orow = idx_all[idx_off[0] + r]
        b1 = P_off[1]
        for b in range(P_lev[1]):
            out[orow, b] = tmp[b1 + b]
            tmp[b1 + b] = 0.0


def ttmc_root(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, R_lev, P_lev, P_off, n_levels, bounds,
              out, policy=None):
    """Sparse tensor times all factor matrices but the root's (transposed): one dense row per root slice."""
    run_parts(_ttmc_range, (pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, R_lev, P_lev, P_off, n_levels),
              bounds, out, policy=policy)


@njit(cache=True, nogil=True, fastmath=False)
def _level_range(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, n_levels, L, r0, r1,
                 out):  # pragma: no cover
    # MTTKRP for the mode at level L >= 1 of the tree: for each node at level L, the Hadamard product of the
    # factor rows on the path above it (pre) times the sum over its subtree below (acc), added into the
    # output row of its index. Rows repeat across roots, so ``out`` must be private to this call.
    R = out.shape[1]
    pre = np.zeros((n_levels, R), dtype=out.dtype)
    acc = np.zeros((n_levels + 1, R), dtype=out.dtype)
    cur = np.zeros(n_levels, dtype=np.int64)
    end = np.zeros(n_levels, dtype=np.int64)
    for r in range(r0, r1):
        rrow = F_off[0] + idx_all[idx_off[0] + r]
        for q in range(R):
            pre[0, q] = F_all[rrow, q]
        cur[1] = pos_all[pos_off[0] + r]
        end[1] = pos_all[pos_off[0] + r + 1]
        depth = 1
        while depth >= 1:
            if cur[depth] >= end[depth]:
                depth -= 1
                if depth >= 1:
                    node = cur[depth]
                    if depth > L:
                        frow = F_off[depth] + idx_all[idx_off[depth] + node]
                        for q in range(R):
                            acc[depth, q] += acc[depth + 1, q] * F_all[frow, q]
                            acc[depth + 1, q] = 0.0
                    elif depth == L:
                        orow = idx_all[idx_off[depth] + node]
                        for q in range(R):
                            out[orow, q] += pre[L - 1, q] * acc[L + 1, q]
                            acc[L + 1, q] = 0.0
                    cur[depth] += 1
                continue
            node = cur[depth]
            if depth == n_levels - 1:
                v = vals[node]
                if depth == L:
                    orow = idx_all[idx_off[depth] + node]
                    for q in range(R):
                        out[orow, q] += v * pre[L - 1, q]
                else:
                    frow = F_off[depth] + idx_all[idx_off[depth] + node]
                    for q in range(R):
                        acc[depth, q] += v * F_all[frow, q]
                cur[depth] += 1
            else:
                if depth < L:
                    frow = F_off[depth] + idx_all[idx_off[depth] + node]
                    for q in range(R):
                        pre[depth, q] = pre[depth - 1, q] * F_all[frow, q]
                cur[depth + 1] = pos_all[pos_off[depth] + node]
                end[depth + 1] = pos_all[pos_off[depth] + node + 1]
                depth += 1


def mttkrp_level(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, n_levels, L, bounds, out_private,
                 policy=None):
    """MTTKRP for an internal or leaf level: one private output per run of roots, summed by the caller."""
    run_parts(_level_range, (pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, n_levels, L), bounds,
              out_private, private=True, policy=policy)


@njit(cache=True, nogil=True)
def radix_argsort(keys):  # pragma: no cover
    """Stable argsort of non-negative int64 keys: LSD radix sort, 16 bits per pass (O(nnz) per pass).

    The CSF build sorts the nonzeros by their linearized coordinates once per tree; for millions of keys
    this is several times faster than ``numpy.argsort``'s comparison sort.
    """
    n = keys.shape[0]
    perm = np.arange(n)
    if n < 2:
        return perm
    kcur = keys.copy()
    ktmp = np.empty(n, dtype=np.int64)
    ptmp = np.empty(n, dtype=np.int64)
    count = np.empty(65537, dtype=np.int64)
    top = kcur.max()
    shift = 0
    while shift < 63 and (top >> shift) > 0:
        count[:] = 0
        for i in range(n):
            count[((kcur[i] >> shift) & 0xFFFF) + 1] += 1
        for d in range(65536):
            count[d + 1] += count[d]
        for i in range(n):
            d = (kcur[i] >> shift) & 0xFFFF
            j = count[d]
            ktmp[j] = kcur[i]
            ptmp[j] = perm[i]
            count[d] = j + 1
        kcur, ktmp = ktmp, kcur
        perm, ptmp = ptmp, perm
        shift += 16
    return perm


@njit(cache=True, nogil=True)
def coo_canonical(coords, values, shape, out_coords):  # pragma: no cover
    """Nonzeros in lexicographic order of their coordinates, duplicates summed (left to right in input
    order) and zeros dropped: the linearized key radix-sorted (skipped when already in order), then one
    gathering pass. ``out_coords`` (nnz, N) receives the rows; returns (values, rows kept, duplicates seen)."""
    n, N = coords.shape
    key = np.empty(n, dtype=np.int64)
    ordered = True
    for i in range(n):
        k = np.int64(0)
        for m in range(N):
            k = k * shape[m] + coords[i, m]
        key[i] = k
        if i and k < key[i - 1]:
            ordered = False
    perm = np.empty(0, dtype=np.int64) if ordered else radix_argsort(key)
    vals = np.empty(n, dtype=values.dtype)
    r = -1
    prev = np.int64(-1)
    dups = False
    for j in range(n):
        i = j if ordered else perm[j]
        k = key[i]
        if k == prev:
            vals[r] += values[i]
            dups = True
            continue
        if r >= 0 and vals[r] == 0.0:
            r -= 1  # the previous coordinate summed to zero: overwrite it
        r += 1
        prev = k
        vals[r] = values[i]
        for m in range(N):
            out_coords[r, m] = coords[i, m]
    if r >= 0 and vals[r] == 0.0:
        r -= 1
    return vals[: r + 1], r + 1, dups


@njit(cache=True, nogil=True)
def sort_rows_by(coords, values, key_modes, sizes, reuse_input=False):  # pragma: no cover
    """Rows of lexicographically ordered nonzeros stably sorted by the coordinates of ``key_modes`` (most
    significant first): one counting-sort pass per key mode, last to first, each moving the rows and values
    themselves (sequential reads, one write stream per slice) instead of gathering through a permutation
    (a cache miss per nonzero). Any tree order is one pass per mode before its increasing tail.
    ``reuse_input``: the input may serve as the second buffer (its contents are then lost; one copy less)."""
    n, N = coords.shape
    src_c = coords
    src_v = values
    dst_c = np.empty_like(coords)
    dst_v = np.empty_like(values)
    spare_c = np.empty((0, N), dtype=coords.dtype)
    spare_v = np.empty(0, dtype=values.dtype)
    first = True
    for t in range(key_modes.shape[0] - 1, -1, -1):
        m = key_modes[t]
        size = sizes[m]
        count = np.zeros(size + 1, dtype=np.int64)
        for i in range(n):
            count[src_c[i, m] + 1] += 1
        for d in range(size):
            count[d + 1] += count[d]
        for i in range(n):
            c = src_c[i, m]
            j = count[c]
            count[c] = j + 1
            for q in range(N):
                dst_c[j, q] = src_c[i, q]
            dst_v[j] = src_v[i]
        if first:  # the input is not written unless allowed: else the second pass gets a buffer of its own
            first = False
            if reuse_input:
                spare_c, spare_v = coords, values
            elif key_modes.shape[0] > 1:
                spare_c = np.empty_like(coords)
                spare_v = np.empty_like(values)
            src_c, src_v, dst_c, dst_v = dst_c, dst_v, spare_c, spare_v
        else:
            src_c, src_v, dst_c, dst_v = dst_c, dst_v, src_c, src_v
    return src_c, src_v


@njit(cache=True, nogil=True)
def coo_canonical_rows(coords, values, shape, reuse_input):  # pragma: no cover
    """Like :func:`coo_canonical` without a linearized key: rows moved by one counting-sort pass per mode
    (skipped when already in order), then duplicates summed and zeros dropped in place. Returns (coords,
    values, rows kept, duplicates seen); the arrays are the input's when it was in order and clean."""
    n, N = coords.shape
    ordered = True
    for i in range(1, n):
        for m in range(N):
            a = coords[i - 1, m]
            b = coords[i, m]
            if a != b:
                if b < a:
                    ordered = False
                break
        if not ordered:
            break
    if ordered:
        c = coords
        v = values
        clean = True
        for i in range(n):
            if values[i] == 0.0:
                clean = False
                break
        if clean:
            for i in range(1, n):
                same = True
                for m in range(N):
                    if coords[i, m] != coords[i - 1, m]:
                        same = False
                        break
                if same:
                    clean = False
                    break
        if clean:
            return coords, values, n, False
        c = coords.copy()
        v = values.copy()
    else:
        c, v = sort_rows_by(coords, values, np.arange(N), shape, reuse_input)
    r = -1
    dups = False
    for i in range(n):
        if r >= 0:
            same = True
            for m in range(N):
                if c[i, m] != c[r, m]:
                    same = False
                    break
            if same:
                v[r] += v[i]
                dups = True
                continue
            if v[r] == 0.0:
                r -= 1
        r += 1
        if r != i:
            for m in range(N):
                c[r, m] = c[i, m]
            v[r] = v[i]
    if r >= 0 and v[r] == 0.0:
        r -= 1
    return c, v, r + 1, dups


def csf_count_levels(coords, order):
    """Nodes per level of the tree of nonzeros already in tree order (sizes the packed arrays exactly)."""
    counts = np.zeros(coords.shape[1], dtype=np.int64)
    count_levels_kernel(coords.shape[1])(coords, order, 0, coords.shape[0], counts)
    return counts


def csf_build_packed(coords, order, idx_all, idx_off, pos_all, pos_off):
    """The levels of the tree written straight into its packed arrays (sized by :func:`csf_count_levels`):
    level ``l``'s node indices at ``idx_all[idx_off[l]:]``, its child pointers at ``pos_all[pos_off[l]:]``."""
    N = coords.shape[1]
    counts = np.zeros(N, dtype=np.int64)
    build_packed_kernel(N)(coords, order, 0, coords.shape[0], counts, idx_all, idx_off, pos_all, pos_off)
    for lev in range(N - 1):
        pos_all[pos_off[lev] + counts[lev]] = counts[lev + 1]
    return counts


# The build's per-part kernels of a tree of 3 to 6 levels are the unrolled ones (``_build_unrolled.py``: node
# counters in registers, 1.5-2x the loops' speed); other trees take the generic loops below. Chosen here, by
# the tree's levels, and not by a branch inside one compiled kernel: a kernel compiles every function it may
# call, so a first build of a 3-way tree compiled all four unrolled variants of each of its two kernels
# (measured on the 2-core machine with an empty cache: about 3 s a kernel, against 0.6-0.9 s for one variant).
def count_levels_kernel(N: int):
    """:func:`csf_count_levels_part`'s kernel for an ``N``-way tree (rows in tree order)."""
    return {3: _count_levels3, 4: _count_levels4, 5: _count_levels5, 6: _count_levels6}.get(
        N, csf_count_levels_part)


def build_packed_kernel(N: int):
    """:func:`csf_build_packed_part`'s kernel for an ``N``-way tree (rows in tree order)."""
    return {3: _build_packed3, 4: _build_packed4, 5: _build_packed5, 6: _build_packed6}.get(
        N, csf_build_packed_part)


def grouped_count_kernel(L: int):
    """:func:`csf_grouped_count_part`'s kernel for rows grouped by root slice with ``L`` modes below the root."""
    return {2: _grouped_count3, 3: _grouped_count4, 4: _grouped_count5, 5: _grouped_count6}.get(
        L, csf_grouped_count_part)


def grouped_fill_kernel(L: int):
    """:func:`csf_grouped_fill_part`'s kernel for rows grouped by root slice with ``L`` modes below the root."""
    return {2: _grouped_fill3, 3: _grouped_fill4, 4: _grouped_fill5, 5: _grouped_fill6}.get(
        L, csf_grouped_fill_part)


@njit(cache=True, nogil=True)
def column_bounds(coords):  # pragma: no cover
    """Per-column minimum and maximum of a (nnz, N) integer array in one pass over its rows (numpy's
    ``min(axis=0)`` on a C-ordered array walks it with a stride, several times slower)."""
    n, N = coords.shape
    lo = np.empty(N, dtype=np.int64)
    hi = np.empty(N, dtype=np.int64)
    for m in range(N):
        lo[m] = coords[0, m]
        hi[m] = coords[0, m]
    for i in range(1, n):
        for m in range(N):
            x = coords[i, m]
            if x < lo[m]:
                lo[m] = x
            elif x > hi[m]:
                hi[m] = x
    return lo, hi



# ------------------------------------------------------------------------------------------------------------
# CSF build in parts: contiguous runs of rows ``lo:hi``, one per thread (the kernels release the GIL); every
# part's result lands where a single pass would put it, so the tree is the same for any number of parts
# ------------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def csf_histogram_part(coords, m, lo, hi, count):  # pragma: no cover
    """``count[c]``: rows ``lo:hi`` whose mode-``m`` coordinate is ``c``."""
    for i in range(lo, hi):
        count[coords[i, m]] += 1


@njit(cache=True, nogil=True)
def csf_root_cursors(count):  # pragma: no cover
    """The per-part counts turned, in place, into each part's first write position in each root slice (the
    slices in increasing order, the parts in order within a slice: a stable counting sort). Returns the number
    of nonempty slices."""
    T, S = count.shape
    run = 0
    roots = 0
    for c in range(S):
        before = run
        for t in range(T):
            x = count[t, c]
            count[t, c] = run
            run += x
        if run > before:
            roots += 1
    return roots


@njit(cache=True, nogil=True)
def csf_root_starts(cur, nnz, idx0, rstart):  # pragma: no cover
    """From the cursors of :func:`csf_root_cursors`: ``idx0`` the nonempty root slices in order, ``rstart`` the
    position of each one's first row (and ``nnz`` after the last)."""
    S = cur.shape[1]
    k = 0
    for c in range(S):
        end = cur[0, c + 1] if c + 1 < S else nnz
        if end > cur[0, c]:
            idx0[k] = c
            rstart[k] = cur[0, c]
            k += 1
    rstart[k] = nnz


@njit(cache=True, nogil=True)
def csf_scatter_part(coords, values, order, lo, hi, cur, dst, dst_v):  # pragma: no cover
    """Rows ``lo:hi`` of nonzeros (in lexicographic order) scattered to their root slice's cursor in ``cur``
    (:func:`csf_root_cursors`; a stable counting sort by the root mode ``order[0]``): ``dst`` receives the
    other coordinates in tree order (the root's is the slice's), ``dst_v`` the values."""
    N = coords.shape[1]
    root = order[0]
    for i in range(lo, hi):
        c = coords[i, root]
        j = cur[c]
        cur[c] = j + 1
        for lev in range(1, N):
            dst[j, lev - 1] = coords[i, order[lev]]
        dst_v[j] = values[i]


@njit(cache=True, nogil=True)
def _grouped_depth(dst, j, L):  # pragma: no cover
    """The first level (1..L) where row ``j`` of the grouped rows leaves row ``j - 1`` of the same slice."""
    for lev in range(1, L):
        if dst[j, lev - 1] != dst[j - 1, lev - 1]:
            return lev
    return L


@njit(cache=True, nogil=True)
def csf_grouped_count_part(dst, rstart, lo, hi, counts):  # pragma: no cover
    """``counts[l]``: the level-``l`` nodes that rows ``lo:hi`` grouped by root slice (:func:`csf_scatter_part`;
    slice ``k`` starts at row ``rstart[k]``) open."""
    L = dst.shape[1]
    k = _first_root_at(rstart, lo)
    nxt = rstart[k]
    for j in range(lo, hi):
        if j == nxt:  # a new root: a node at every level
            k += 1
            nxt = rstart[k]
            for lev in range(L + 1):
                counts[lev] += 1
            continue
        new = 0  # branch-free: whether the row opens a node at this level (it does at every level below)
        for lev in range(1, L):
            new |= dst[j, lev - 1] != dst[j - 1, lev - 1]
            counts[lev] += new
        counts[L] += 1


@njit(cache=True, nogil=True)
def csf_grouped_fill_part(dst, rstart, lo, hi, k, idx_all, idx_off, pos_all, pos_off):  # pragma: no cover
    """The nodes that rows ``lo:hi`` grouped by root slice open, numbered from ``k`` (per level: the nodes of
    the rows before them), written into the packed arrays (:func:`csf_build_packed`) but for the root's
    indices (the nonempty slices, :func:`csf_root_starts`)."""
    L = dst.shape[1]
    r = _first_root_at(rstart, lo)
    nxt = rstart[r]
    for j in range(lo, hi):
        d = 0
        if j == nxt:
            r += 1
            nxt = rstart[r]
        else:
            d = _grouped_depth(dst, j, L)
        for lev in range(d, L + 1):
            kk = k[lev]
            if lev >= 1:
                idx_all[idx_off[lev] + kk] = dst[j, lev - 1]
            if lev - 1 >= d:  # first child of the node this row opened one level up
                pos_all[pos_off[lev - 1] + k[lev - 1] - 1] = kk
            k[lev] = kk + 1


@njit(cache=True, nogil=True)
def csf_count_levels_part(coords, order, lo, hi, counts):  # pragma: no cover
    """:func:`csf_count_levels` of rows ``lo:hi`` (in tree order) into ``counts``: the nodes they open."""
    N = coords.shape[1]
    for i in range(lo, hi):
        if i == 0:
            for lev in range(N):
                counts[lev] += 1
            continue
        new = 0  # branch-free (see csf_grouped_count_part)
        for lev in range(N - 1):
            new |= coords[i, order[lev]] != coords[i - 1, order[lev]]
            counts[lev] += new
        counts[N - 1] += 1


@njit(cache=True, nogil=True)
def csf_build_packed_part(coords, order, lo, hi, k, idx_all, idx_off, pos_all, pos_off):  # pragma: no cover
    """:func:`csf_build_packed` of rows ``lo:hi``, the nodes numbered from ``k`` (the nodes of the rows before
    them, per level; updated)."""
    N = coords.shape[1]
    for i in range(lo, hi):
        d = 0
        if i > 0:
            d = N - 1
            for lev in range(N - 1):
                if coords[i, order[lev]] != coords[i - 1, order[lev]]:
                    d = lev
                    break
        for lev in range(d, N):
            kk = k[lev]
            idx_all[idx_off[lev] + kk] = coords[i, order[lev]]
            if lev - 1 >= d:
                pos_all[pos_off[lev - 1] + k[lev - 1] - 1] = kk
            k[lev] = kk + 1


@njit(cache=True, nogil=True)
def values_hash(bits):  # pragma: no cover - compiled
    """A stamp of a values array's bits (viewed as unsigned integers): each entry mixed with its position by
    splitmix64's finalizer, the results summed (wrapping). Any sign flip, any swap of two entries and any other
    edit changes it but with probability about 2**-64 (the plain sum of the bits had missed an even number of
    sign flips, each adding 2**63, and every swap)."""
    h = np.uint64(0)
    for i in range(bits.size):
        x = np.uint64(bits[i]) ^ (np.uint64(i) * np.uint64(0x9E3779B97F4A7C15))
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        h += x
    return h


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
