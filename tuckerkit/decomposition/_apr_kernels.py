"""CP-APR's compiled kernels over the nonzeros (numba, cached on disk; imported on first use so that
``import tuckerkit`` does not load numba). Each takes a range of independent rows and releases the GIL; the
wrappers run the ranges on the policy's threads (:func:`tuckerkit.sparse._kernels.run_parts`), not in a numba
``prange``: every row is computed alone, so the bits do not depend on the cut or the threads."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from tuckerkit._numba_load import load_lightly


@njit(cache=True, nogil=True)
def _gather_pi_rows(coords, F_all, F_off, n, lo, hi, out):  # pragma: no cover - compiled
    """``out[k, r] = prod_{m != n} U_m[coords[k, m], r]`` for ``lo <= k < hi`` (the Khatri-Rao rows of the
    nonzeros)."""
    N = coords.shape[1]
    R = out.shape[1]
    for k in range(lo, hi):
        for r in range(R):
            p = 1.0
            for m in range(N):
                if m != n:
                    p *= F_all[F_off[m] + coords[k, m], r]
            out[k, r] = p


@njit(cache=True, nogil=True)
def _phi_rows(ptr, vals, Pi, B, eps, lo, hi, out):  # pragma: no cover - compiled
    """``out[i] = sum_{k in row i} vals[k] / max(B[i] . Pi[k], eps) * Pi[k]`` for ``lo <= i < hi``, in order."""
    R = B.shape[1]
    for i in range(lo, hi):
        for r in range(R):
            out[i, r] = 0.0
        for k in range(ptr[i], ptr[i + 1]):
            v = 0.0
            for r in range(R):
                v += B[i, r] * Pi[k, r]
            w = vals[k] / max(v, eps)
            for r in range(R):
                out[i, r] += w * Pi[k, r]


@njit(cache=True, nogil=True)
def _model_at_rows(coords, F_all, F_off, weights, lo, hi, out):  # pragma: no cover - compiled
    """``out[k] = sum_r w_r prod_m U_m[coords[k, m], r]`` for ``lo <= k < hi``: the model at the nonzeros."""
    N = coords.shape[1]
    R = weights.shape[0]
    for k in range(lo, hi):
        s = 0.0
        for r in range(R):
            p = weights[r]
            for m in range(N):
                p *= F_all[F_off[m] + coords[k, m], r]
            s += p
        out[k] = s


def _over_rows(kernel: Any, head: tuple, rows: int, out: np.ndarray, policy: Any, ptr: Any = None) -> None:
    """``kernel(*head, lo, hi, out)`` over ``rows`` cut into four parts per worker (of equal rows, or with
    ``ptr`` (rows + 1 offsets) of about equal nonzeros: a mode of power-law slices), on the policy's threads
    (:func:`tuckerkit.sparse._kernels.run_parts`; one part, on the calling thread, for one worker)."""
    from tuckerkit.engine._policy import resolve_policy
    from tuckerkit.sparse._kernels import run_parts

    pol = resolve_policy(policy)
    parts = max(1, min(rows, 4 * pol.workers if pol.workers > 1 else 1))
    if ptr is None or parts == 1:
        cuts = [rows * t // parts for t in range(parts + 1)]
    else:  # (ptr is nondecreasing and ends at the total: the cuts are too, within 0..rows)
        total = int(ptr[rows])
        cuts = [0, *(int(np.searchsorted(ptr, total * t // parts)) for t in range(1, parts)), rows]
    run_parts(kernel, head, np.asarray(cuts, dtype=np.int64), out, policy=pol)


def gather_pi(coords, F_all, F_off, n, out, policy=None) -> None:
    """:func:`_gather_pi_rows` over every nonzero."""
    _over_rows(_gather_pi_rows, (coords, F_all, F_off, n), coords.shape[0], out, policy)


def phi(ptr, vals, Pi, B, eps, out, policy=None) -> None:
    """:func:`_phi_rows` over every row of ``B``, cut where the nonzeros split evenly."""
    _over_rows(_phi_rows, (ptr, vals, Pi, B, eps), B.shape[0], out, policy, ptr)


def model_at(coords, F_all, F_off, weights, out, policy=None) -> None:
    """:func:`_model_at_rows` over every nonzero."""
    _over_rows(_model_at_rows, (coords, F_all, F_off, weights), coords.shape[0], out, policy)


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
