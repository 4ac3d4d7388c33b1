"""CP-APR's compiled kernels over the nonzeros (numba, parallel over independent rows, cached on disk);
imported on first use so that ``import tuckerkit`` does not load numba."""

from __future__ import annotations

from numba import njit, prange

from tuckerkit._numba_load import load_lightly


@njit(parallel=True, cache=True)
def _gather_pi(coords, F_all, F_off, n, out):  # pragma: no cover - compiled
    """``out[k, r] = prod_{m != n} U_m[coords[k, m], r]`` (the Khatri-Rao rows of the nonzeros)."""
    nnz, N = coords.shape
    R = out.shape[1]
    for k in prange(nnz):
        for r in range(R):
            p = 1.0
            for m in range(N):
                if m != n:
                    p *= F_all[F_off[m] + coords[k, m], r]
            out[k, r] = p


@njit(parallel=True, cache=True)
def _phi(ptr, vals, Pi, B, eps, out):  # pragma: no cover - compiled
    """``out[i] = sum_{k in row i} vals[k] / max(B[i] . Pi[k], eps) * Pi[k]``, one thread per row, in order."""
    rows, R = B.shape
    for i in prange(rows):
        for r in range(R):
            out[i, r] = 0.0
        for k in range(ptr[i], ptr[i + 1]):
            v = 0.0
            for r in range(R):
                v += B[i, r] * Pi[k, r]
            w = vals[k] / max(v, eps)
            for r in range(R):
                out[i, r] += w * Pi[k, r]


@njit(parallel=True, cache=True)
def _model_at(coords, F_all, F_off, weights, out):  # pragma: no cover - compiled
    """``out[k] = sum_r w_r prod_m U_m[coords[k, m], r]``: the model at the nonzeros."""
    nnz, N = coords.shape
    R = weights.shape[0]
    for k in prange(nnz):
        s = 0.0
        for r in range(R):
            p = weights[r]
            for m in range(N):
                p *= F_all[F_off[m] + coords[k, m], r]
            s += p
        out[k] = s


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
