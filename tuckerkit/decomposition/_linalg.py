"""Small dense linear algebra of the factor updates: the CP-ALS solve.

On the CPU: LAPACK through scipy (Cholesky, least squares when singular). On a GPU the R x R matrix goes to
the host (one round trip per factor), its inverse comes back and the I x R product runs on the device:
cuSOLVER's ``syevd`` on a 10 x 10 to 50 x 50 matrix is bound by its launches and synchronizations (measured
on an H200: CP-ALS on 200^3 took 5-10 ms per iteration with it, 0.4-0.6x TensorLy's cupy backend). A real
tensor's GPU CP-ALS keeps V on the host in the first place (``_cp._GpuSmallState``) and calls
:func:`spd_inverse` directly; :func:`spd_solve`'s device branch serves complex and masked runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, to_host
from tuckerkit.engine._policy import blas_pinned, scipy_linalg


def _definite(L: Any) -> bool:
    """Whether a Cholesky factor ``L`` (either triangle) of an R x R matrix is that of a definite one in working
    precision: its smallest squared pivot above ``eps * R`` times its largest. A singular V (e.g. two equal
    factor columns) can pass the factorization with a last pivot of rounding size (measured: 0.3-0.6 eps of
    the largest), whose inverse would be rounding noise times 1/eps. (Python floats on the diagonal's list:
    a few microseconds less than numpy's reductions at these sizes, the same decision.)"""
    d = [abs(x) ** 2 for x in np.diagonal(L).tolist()]
    eps = _EPS.get(L.dtype.char) or float(np.finfo(L.dtype).eps)
    return not d or min(d) > max(d) * eps * L.shape[0]


#: the machine epsilon of each working dtype, by type character (complex: its real part's)
_EPS = {c: float(np.finfo(c).eps) for c in "fdFD"}


def spd_solve(V: Any, M: Any) -> Any:
    """Solve ``U V = M`` for U with V symmetric (complex: Hermitian) positive (semi)definite: Cholesky, else
    least squares.

    On a GPU: ``M @ inv(V)`` with the inverse made on the host by :func:`spd_inverse`.
    """
    xp = array_namespace(V, M)
    if xp is not np:
        return M @ xp.asarray(spd_inverse(to_host(V)))
    linalg = scipy_linalg()  # (not at the top: `import tuckerkit` needs no scipy.linalg)
    Vt = V.T  # U V = M is V^T U^T = M^T (V^T = conj(V) is Hermitian positive definite too)
    try:
        c = linalg.cho_factor(Vt, check_finite=False)
        if _definite(c[0]):
            return linalg.cho_solve(c, M.T, check_finite=False).T
    except np.linalg.LinAlgError:
        pass
    sol, *_ = linalg.lstsq(Vt, M.T, check_finite=False, cond=np.finfo(V.dtype).eps * max(V.shape))
    return sol.T


#: the strictly lower triangle's index pairs of each order :func:`spd_inverse` has mirrored
_LOWER: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def spd_inverse(V: Any) -> Any:
    """The inverse of a host matrix ``V``, symmetric (complex: Hermitian) positive semidefinite: from its
    Cholesky factor, or where that fails (singular or indefinite V) the pseudo-inverse of its eigenpairs with
    the eigenvalues below ``eps * R * max |w|`` dropped. LAPACK on one BLAS thread (deterministic).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.decomposition._linalg import spd_inverse
    >>> spd_inverse(np.array([[4.0, 0.0], [0.0, 0.0]]))
    array([[0.25, 0.  ],
           [0.  , 0.  ]])
    """
    lapack = scipy_linalg().lapack
    with blas_pinned():  # LAPACK's ?potrf, then ?potri (the inverse from the Cholesky factor)
        potrf, potri = lapack.get_lapack_funcs(("potrf", "potri"), (V,))
        c, info = potrf(V, lower=1, clean=1)
        if info == 0 and _definite(c):
            inv, info = potri(c, lower=1)
            if info == 0:  # the lower triangle of the inverse, mirrored (index pairs kept per order: a
                lo = _LOWER.get(V.shape[0])  # third of the call's time at R = 10 went to np.tril)
                if lo is None:
                    lo = _LOWER[V.shape[0]] = np.tril_indices(V.shape[0], -1)
                inv[lo[1], lo[0]] = inv[lo].conj()
                return inv
        w, Q = np.linalg.eigh(V)
        cut = np.finfo(V.dtype).eps * V.shape[0] * np.max(np.abs(w), initial=0.0)
        inv = np.where(w > cut, 1 / np.where(w > cut, w, 1), 0).astype(V.dtype)
        return (Q * inv[None, :]) @ Q.conj().T


#: (kernel, dtype character) pairs :func:`cp_factor_update` has run in this process (compiled or loaded)
_RAN: set[tuple[Any, str]] = set()


def _row_solve() -> tuple[Any, Any, Any, int, int, int]:
    """The compiled updates and their constants, imported once (numba loads with the first)."""
    global _ROW_SOLVE
    if _ROW_SOLVE is None:
        from tuckerkit.decomposition._cp_kernels import (
            CHUNK,
            FUSED_MAX_R,
            STACK_MAX_R,
            cholesky_solve_rows,
            cholesky_solve_rows_heap,
            sweep_update,
        )

        _ROW_SOLVE = (cholesky_solve_rows, cholesky_solve_rows_heap, sweep_update, CHUNK, STACK_MAX_R, FUSED_MAX_R)
    return _ROW_SOLVE


_ROW_SOLVE: tuple[Any, Any, Any, int, int, int] | None = None


def _first_run(kernel: Any, dtype: Any, *args: Any) -> Any:
    """``kernel(*args)``; its first call in a process for a dtype may compile: with SLP on, which packs the row
    solve's lanes into vector registers."""
    if (kernel, dtype.char) in _RAN:
        return kernel(*args)
    from tuckerkit.sparse._mttkrp import slp_vectorize

    with slp_vectorize():
        result = kernel(*args)
    _RAN.add((kernel, dtype.char))
    return result


def cp_factor_update(V: Any, M: Any, out: Any, normalize: bool) -> Any:
    """CP-ALS's factor update on the host for a real dtype: ``U V = M`` solved into ``out`` (I x R, C-contiguous,
    M's dtype) by the compiled row solve (:mod:`._cp_kernels`), and with ``normalize`` the columns divided by
    their norms, which are returned (float64, zero norms as 1); None without ``normalize``. Returns False
    and leaves ``out`` alone when the Cholesky factorization of V fails or shows V singular in working
    precision (:func:`_definite`; the caller takes :func:`spd_solve`'s least squares). One thread (see
    :mod:`._cp_kernels`).

    Up to ``FUSED_MAX_R`` columns the whole update, V's Cholesky factor included, is one compiled call
    (:func:`._cp_kernels.sweep_update` with V as its one Gram): numpy's ``cholesky``, the definiteness check
    and the norms' numpy calls cost about 30 us an update in Python (R = 3: 33.7 against 3.2 us), which is most
    of a small tensor's factor step. Larger R factors V with numpy's LAPACK, then the compiled row solve."""
    solve, heap, fused, chunk, stack_max, fused_max = _row_solve()
    dtype = out.dtype
    I, R = M.shape  # noqa: E741
    if R <= fused_max and V.dtype == dtype and dtype.char in "fd":
        ss = np.empty((-(-I // chunk), R), dtype=np.float64)
        norms = np.empty(R, dtype=np.float64)
        # (sweep_update's V from one Gram and no mode left out: 1 * V, V exactly; no Gram and no inner products)
        if not _first_run(fused, dtype, np.ascontiguousarray(V)[None], -1, np.ascontiguousarray(M, dtype=dtype), out,
                          ss, norms, bool(normalize), _EPS[dtype.char], False, False, np.empty(0)):
            return False
        return norms if normalize else None
    try:
        L = np.linalg.cholesky(V)  # numpy's: a sparse CLI run then needs no scipy.linalg import (0.3 s)
    except np.linalg.LinAlgError:
        return False
    if not _definite(L):
        return False
    M = np.ascontiguousarray(M, dtype=dtype)
    ss = np.empty((-(-I // chunk), R), dtype=np.float64)
    L = np.ascontiguousarray(L, dtype=dtype)
    _first_run(solve if R <= stack_max else heap, dtype, M, L, out, ss)
    if not normalize:
        return None
    norms = np.sqrt(ss.sum(axis=0))
    norms[norms == 0] = 1.0
    np.divide(out, norms.astype(dtype), out=out)
    return norms


def sweep_fits(R: int, dtype: Any) -> bool:
    """Whether :func:`cp_sweep_update` takes a factor of rank ``R`` and ``dtype`` (real, ``R`` at most the
    fused update's limit)."""
    return np.dtype(dtype).char in "fd" and R <= _row_solve()[5]


#: (:func:`cp_sweep_update`'s kernel and constants, imported on its first call)
_SWEEP: tuple[Any, int, int] | None = None


#: :func:`cp_sweep_update` cuts the row solve of a factor of at least this many rows into pieces for the workers
#: (the same bits: each piece a run of whole ``CHUNK``-row pieces of the one call's, see there)
SWEEP_PARALLEL_ROWS = 1 << 15


def cp_sweep_update(grams: np.ndarray, n: int, M: np.ndarray, out: np.ndarray, normalize: bool,
                    want_inner: bool, policy: Any = None) -> tuple[Any, Any]:
    """CP-ALS's step for mode ``n`` in one compiled call (:func:`._cp_kernels.sweep_update`): ``V`` from
    ``grams`` (N x R x R, ``out``'s dtype; every mode's Gram, ``n``'s ignored), the update solved into ``out``
    as :func:`cp_factor_update` solves it with that V (the same kernel, the same bits), and ``grams[n]``
    replaced by the new factor's Gram: made in the call for a factor of at most ``SWEEP_GRAM_MAX``
    multiply-adds, else by BLAS here. Returns ``(norms, inner)``: the norms as :func:`cp_factor_update`
    returns them, ``inner`` (float64, R) the fit's ``<M[:, r], U[:, r]>`` with ``want_inner`` (else None);
    ``(False, None)`` with nothing changed when V is not definite (the caller's least squares).

    Why: on a small tensor a factor step is a few microseconds of arithmetic, and the numpy calls around it
    (V's products, the Gram, the fit's column sums) cost more than the solve.

    A long factor (``SWEEP_PARALLEL_ROWS`` rows or more) with a ``policy`` of several workers takes the same
    steps in three calls, the row solve cut into runs of whole ``CHUNK``-row pieces for the workers (each row
    and each piece's sums of squares computed as in the one call: the same bits): 100000 x 16 float64 11.9 ->
    7.9 ms (the solve 7.6 -> 3.7 ms on two workers)."""
    global _SWEEP
    if _SWEEP is None:
        from tuckerkit.decomposition._cp_kernels import CHUNK, SWEEP_GRAM_MAX, sweep_update

        _SWEEP = (sweep_update, SWEEP_GRAM_MAX, CHUNK)
    kernel, gram_max, chunk = _SWEEP  # (the kernel of cp_factor_update's fused update too)
    dtype = out.dtype
    I, R = M.shape  # noqa: E741
    ss = np.empty((-(-I // chunk), R), dtype=np.float64)
    norms = np.empty(R, dtype=np.float64)
    inner = np.empty(R if want_inner else 0, dtype=np.float64)
    gram = I * R * (R + 1) // 2 <= gram_max
    M = np.ascontiguousarray(M, dtype=dtype)
    if I >= SWEEP_PARALLEL_ROWS and not gram and policy is not None and policy.workers > 1:
        if not _split_sweep(grams, n, M, out, ss, norms, bool(normalize), want_inner, inner, chunk, policy):
            return False, None
        gram = False
    elif not _first_run(kernel, dtype, grams, n, M, out, ss, norms, bool(normalize), _EPS[dtype.char], gram,
                        want_inner, inner):
        return False, None
    if not gram:
        grams[n] = out.T @ out  # (numpy's SYRK for a product with its own transpose)
    return (norms if normalize else None), (inner if want_inner else None)


def _split_sweep(grams: np.ndarray, n: int, M: np.ndarray, out: np.ndarray, ss: np.ndarray, norms: np.ndarray,
                 normalize: bool, want_inner: bool, inner: np.ndarray, chunk: int, policy: Any) -> bool:
    """:func:`cp_sweep_update`'s steps with the row solve on the workers (False where V is not definite)."""
    from tuckerkit.decomposition._cp_kernels import sweep_factor, sweep_inner, sweep_norms, sweep_scale
    from tuckerkit.engine._policy import parallel_for, split_points

    dtype = out.dtype
    R = M.shape[1]
    L = np.empty((R, R), dtype=dtype)
    if not sweep_factor(grams, n, L, _EPS[dtype.char]):
        return False
    solve = _row_solve()[0]
    pieces = split_points(ss.shape[0], 2 * M.size * R)  # (in CHUNK-row pieces: by the sizes alone)

    def run(k: int, _: Any) -> None:
        p0, p1 = pieces[k], pieces[k + 1]
        solve(M[p0 * chunk:p1 * chunk], L, out[p0 * chunk:p1 * chunk], ss[p0:p1])

    _first_run(solve, dtype, M[:0], L, out[:0], ss[:0])  # (a first call compiles alone, outside the workers)
    parallel_for(run, len(pieces) - 1, policy)
    if normalize:
        nd = np.empty((1, R), dtype=dtype)
        sweep_norms(ss, norms, nd)
        parallel_for(lambda k, _: sweep_scale(out[pieces[k] * chunk:pieces[k + 1] * chunk], nd), len(pieces) - 1,
                     policy)
    if want_inner:
        sweep_inner(M, out, inner)
    return True


def cp_fit_error(inner: np.ndarray, weights: np.ndarray, grams: np.ndarray, norm: float) -> float:
    """``||X - X_hat||^2 / ||X||^2`` of a real CP model (:func:`._cp_kernels.fit_error`); 0.0 for an all-zero X
    (``norm`` 0: the model is zero too, an exact fit, as HOOI reports on zeros)."""
    if not norm > 0:
        return 0.0
    from tuckerkit.decomposition._cp_kernels import fit_error

    return float(fit_error(inner, weights, grams, float(norm)))
