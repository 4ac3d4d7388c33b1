"""Compiled CSF kernels (numba, parallel, cached on disk).

MTTKRP for the mode at the root of a CSF: each root node (a slice of the output mode) is one parallel
task that walks its fiber tree depth-first with one accumulator row per level, so every output row is
written by exactly one thread (no atomics). Works for any order >= 2. The roots are visited in an order
that gives each thread's contiguous share of the loop the same number of nonzeros (power-law slices).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True, fastmath=False)
def mttkrp_root(pos_all, pos_off, idx_all, idx_off, vals, F_all, F_off, n_levels, order, out):  # pragma: no cover
    R = out.shape[1]
    n_root = idx_off[1] - idx_off[0]
    for t in prange(n_root):
        r = order[t]
        acc = np.zeros((n_levels, R), dtype=out.dtype)
        cur = np.zeros(n_levels, dtype=np.int64)
        end = np.zeros(n_levels, dtype=np.int64)
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
