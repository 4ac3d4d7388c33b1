"""Leading subspaces of a dense tensor's unfoldings, from its Gram matrix or the small unfolding.

On the CPU: LAPACK through scipy (``eigh`` of only the leading pairs), after a certified subspace iteration
on large float64 Grams with a spectral gap. On a GPU the Grams and the products with the tensor stay on the
device (cuBLAS), while a small eigenproblem (order up to :data:`HOST_EIGH_MAX`) goes to the host's LAPACK:
cuSOLVER's ``syevd`` / ``gesvd`` on such matrices is bound by launches and internal synchronizations
(measured on an H200: HOOI on 200^3 with rank 10 took 33 ms per iteration, TensorLy's cupy backend the same,
on the device's SVD of the 200 x 100 projections; 6-9 ms with this module's host route).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, to_host
from tuckerkit.engine._gram import dense_gram
from tuckerkit.engine._policy import SYRK_PIN_MADDS, ExecutionPolicy, blas_pinned, scipy_linalg


def sign_fix(U: Any) -> Any:
    """Flip column signs so the entry of largest magnitude in each column is positive (deterministic output);
    a complex column is multiplied by the phase that makes that entry real and positive.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._subspace import sign_fix
    >>> sign_fix(np.array([[1.0, 2.0], [-3.0, 0.5]]))
    array([[-1. ,  2. ],
           [ 3. ,  0.5]])
    """
    if type(U) is np.ndarray and U.dtype.kind != "c":  # (the same arithmetic, fewer calls: HOOI's small steps)
        top = U[np.abs(U).argmax(axis=0), np.arange(U.shape[1])]
        signs = np.sign(top)
        signs[signs == 0] = 1
        return U * signs.astype(U.dtype, copy=False)[None, :]
    xp = array_namespace(U)
    idx = xp.argmax(xp.abs(U), axis=0)
    top = U[idx, xp.arange(U.shape[1])]
    if U.dtype.kind == "c":  # a complex column's phase: its largest entry made real and positive (TensorLy's)
        mag = xp.abs(top)
        phase = xp.where(mag == 0, 1, top / xp.where(mag == 0, 1, mag)).astype(U.dtype)
        return U * xp.conj(phase)[None, :]
    signs = xp.sign(top)
    signs = xp.where(signs == 0, 1, signs).astype(U.dtype)
    return U * signs[None, :]


def eigh_desc(G: Any, r: int | None = None) -> tuple[Any, Any]:
    """Eigen-pairs of a symmetric (complex: Hermitian) matrix in decreasing order (all, or the leading ``r``);
    the eigenvalues are real."""
    I_n = G.shape[0]
    xp = array_namespace(G)
    if xp is not np and I_n <= HOST_EIGH_MAX:  # small: the host's LAPACK (see the module's docstring)
        with blas_pinned():
            return _on_host(xp, *eigh_desc(to_host(G), r))
    if xp is not np:  # cuSOLVER's syevd: all pairs (no subset routine), ascending
        w, V = xp.linalg.eigh(G)
        if r is not None and r < I_n:
            w, V = w[I_n - r:], V[:, I_n - r:]
    elif G.dtype.char not in "fdFD" or I_n == 0 or (r is not None and r < 1):  # scipy converts or checks
        linalg = scipy_linalg()  # (not at the top: `import tuckerkit` and sparse runs need no scipy.linalg)
        if r is None or r >= I_n:
            w, V = linalg.eigh(G, overwrite_a=True, check_finite=False, driver="evd")
        else:
            w, V = linalg.eigh(G, subset_by_index=[I_n - r, I_n - 1], overwrite_a=True, check_finite=False)
    elif r is None or r >= I_n:  # every pair: divide and conquer (see _EVD_DRIVERS)
        drv = _evd_driver(G.dtype.char)
        w, V, info = drv(G, compute_v=1, lower=1, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"?syevd / ?heevd failed (info={info})")
    else:  # scipy.linalg.eigh's own ?syevr / ?heevr call (same arguments and workspace: the same bits), without
        # its per-call checks and workspace query: ~0.2 ms of a 100 x 100 subset eigh (HOOI's factor step)
        # (a C-ordered G reaches LAPACK as a copy and stays intact for the fallback below; any other is copied)
        keep = G if G.flags.c_contiguous and not G.flags.f_contiguous else G.copy()
        drv, lwork = _evr_driver(G.dtype.char, I_n)
        w, V, m, *_, info = drv(a=G, range="I", il=I_n - r + 1, iu=I_n, lower=1, compute_v=1, overwrite_a=1,
                                **lwork)
        if info != 0:
            raise np.linalg.LinAlgError(f"?syevr / ?heevr failed (info={info})")
        w, V = w[:m], V[:, :m]
        # (see ORTH_ULPS: every pair by divide and conquer, the leading r kept; also where ?syevr returned fewer
        # than r pairs with info 0, as it can on tightly clustered eigenvalues: factors lost columns)
        if m < r or not orthonormal_enough(V):
            w, V, info = _evd_driver(G.dtype.char)(keep, compute_v=1, lower=1, overwrite_a=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"?syevd / ?heevd failed (info={info})")
            w, V = w[I_n - r:], V[:, I_n - r:]
    return w[::-1], V[:, ::-1]


#: the most ``|V^H V - I|`` (in ulps of V's dtype) that eigenvectors from an MRRR-based LAPACK route
#: (``?syevr`` / ``?heevr`` on a subset, ``?stemr`` in :func:`_top_eigh_mrrr`) may show before every pair is
#: computed by divide and conquer instead (:func:`orthonormal_enough`). MRRR keeps vectors orthogonal to
#: O(n eps) only where the eigenvalues it separates are not tightly clustered relative to the largest; a Gram
#: of a few strong components over noise (HOOI's factor step at a rank above the signal's) is such a case.
#: Measured on 100 x 100 and 200 x 200 Grams of a rank-3 signal plus noise, r = 5-95 % of the order, six
#: each: ``?stemr``'s vectors 4-104000 ulps from orthonormal (650-2800 from r = 10 %), ``?syevr``'s subsets
#: 3-26; a float32 (100, 4, 58) projection of HOOI at rank 95: ``?ssyevr`` 2400 ulps (2.9e-4), the factor
#: 1.2e-4 from orthonormal; ``?syevd`` 4-12 ulps on all. The check costs n r^2 multiply-adds
ORTH_ULPS = 128


def orthonormal_enough(V: Any) -> bool:
    """Whether the columns of a host matrix ``V`` are orthonormal to :data:`ORTH_ULPS` ulps of its dtype."""
    r = V.shape[1]
    if r == 0:
        return True
    C = V.conj().T @ V
    C[np.diag_indices(r)] -= 1
    return float(np.abs(C).max()) <= ORTH_ULPS * float(np.finfo(V.dtype).eps)


#: every eigenpair of a host Gram (a factor of full rank, or the spectrum a tolerance picks ranks from) by
#: ``?syevd`` / ``?heevd`` (divide and conquer), not ``?syevr``: MRRR on a whole spectrum left the vectors
#: orthonormal only to hundreds or thousands of ulps where the small eigenvalues cluster (a mode's noise).
#: Measured (one BLAS thread, Grams of n x 3n Gaussian matrices): |V^T V - I| 19 / 86 / 411 / 371 / 514 / 2717 eps
#: against 6 / 6 / 10 / 8 / 8 / 11 eps at n = 13 / 31 / 64 / 128 / 200 / 500, in 0.75-1.3x the time; the
#: full-rank factor (31 x 31) of HOOI and ST-HOSVD on a (16, 31, 5, 5) tensor was 5.7e-13 / 6.6e-13 from
#: orthonormal, now 2.7e-15 / 2.3e-15. Subsets of the leading pairs keep
#: their routes (inverse iteration, MRRR on the wanted pairs: within 50 eps in the same measurement).
_EVD_DRIVERS: dict[str, Any] = {}


def _evd_driver(char: str) -> Any:
    """LAPACK's ``?syevd`` (real) / ``?heevd`` (complex) for dtype ``char`` (its default workspace: the one
    a whole decomposition needs, fixed by the order, so the same bits on every call); cached."""
    hit = _EVD_DRIVERS.get(char)
    if hit is None:
        lapack = scipy_linalg().lapack
        hit = _EVD_DRIVERS[char] = lapack.get_lapack_funcs(("heevd" if char in "FD" else "syevd",),
                                                          (np.empty((1, 1), dtype=char),))[0]
    return hit


_EVR_DRIVERS: dict[tuple[str, int], tuple[Any, dict[str, int]]] = {}


#: largest order of a device Gram whose eigenproblem is solved on the host (copied down, LAPACK on one BLAS
#: thread, the vectors copied up). Measured on an H200 with 16 host cores (``benchmarks/gpu.py linalg``, two
#: runs): the 10 leading pairs of a Gram of order 10-100 1.0-1.8x faster on the host route, of order 200 0.6x,
#: 400-1600 0.02-0.4x (cuSOLVER 1.8-17.5 ms); HOOI's 100 x 100 projection Gram with its thin QR 1.7-2.8 ms on
#: the host against 7.9-11.8 ms for cuSOLVER's ``gesvd`` of the projection
HOST_EIGH_MAX = 128

#: a device array of at most this many elements (HOOI's projections of an n^3 tensor at rank 10 up to n = 655)
#: is copied down whole and :func:`leading_left_singular` runs the host's route on it (the Gram, the warm-started
#: eigenproblem, ``M V`` and the thin QR; the vectors copied up): one round trip a mode instead of one or two plus
#: the device's launches, and the same arithmetic as on the CPU for the same projection
HOST_ROUTE_MAX = 1 << 16


def _on_host(xp: Any, w: Any, V: Any) -> tuple[Any, Any]:
    """Host eigenpairs (or any two host arrays) as contiguous arrays of namespace ``xp`` (copied up)."""
    return xp.asarray(np.ascontiguousarray(w)), xp.asarray(np.ascontiguousarray(V))


def _completed(xp: Any, U: Any, w: Any, r: int) -> tuple[Any, Any]:
    """``U`` (I_n x k orthonormal, with its eigenvalues ``w``) completed to ``r`` orthonormal columns: the
    unfolding has rank at most k = P, so any orthonormal complement spans the rest, with eigenvalue 0. The
    complement is a fixed Gaussian block (seed 0: the same columns on every call) projected off ``U`` twice
    and orthonormalized. Before, such a rank took the mode's own I_n x I_n Gram: O(I_n^3) (3.4 s for a
    (3000, 2, 2) tensor at rank 5; an I_n x I_n allocation of 74.5 GiB at I_n = 100000) and only
    sqrt(eps)-accurate subspaces (an error of 1e-8 where TensorLy's SVD gave 5e-16)."""
    Uh, wh = to_host(U), to_host(w)
    I_n, k = Uh.shape
    rng = np.random.default_rng(0)
    E = rng.standard_normal((I_n, r - k))
    if Uh.dtype.kind == "c":
        E = E + 1j * rng.standard_normal((I_n, r - k))
    E = E.astype(Uh.dtype)
    for _ in range(2):  # (twice: the complement orthogonal to U to working precision)
        E -= Uh @ (Uh.conj().T @ E)
    with blas_pinned():
        Q = _thin_q(np.asfortranarray(E))
    out = np.ascontiguousarray(np.concatenate([Uh, Q], axis=1))
    return _on_host(xp, out, np.concatenate([wh, np.zeros(r - k, dtype=wh.dtype)]))


def _both_down(xp: Any, Y: Any, start: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A small device array ``Y`` and the optional device ``start`` on the host, in one copy where their dtypes
    match (the two joined on the device first)."""
    if start is None:
        return to_host(Y), None
    if start.dtype != Y.dtype or start.ndim != 2:
        return to_host(Y), to_host(start)
    both = to_host(xp.concatenate((Y.reshape(-1), start.reshape(-1))))
    return both[:Y.size].reshape(Y.shape), both[Y.size:].reshape(start.shape)


def _evr_driver(char: str, n: int) -> tuple[Any, dict[str, int]]:
    """LAPACK's ``?syevr`` (real) / ``?heevr`` (complex) for dtype ``char`` and its optimal workspace for order
    ``n``, exactly as :func:`scipy.linalg.eigh` picks them (driver ``"evr"``, ``lower=True``); cached."""
    hit = _EVR_DRIVERS.get((char, n))
    if hit is not None:
        return hit
    lapack = scipy_linalg().lapack
    pfx = "heevr" if char in "FD" else "syevr"
    proto = np.empty((1, 1), dtype=char)
    drv, drvlw = lapack.get_lapack_funcs((pfx, pfx + "_lwork"), (proto,))
    lw = lapack._compute_lwork(drvlw, n=n, lower=True)
    names = ("lwork", "lrwork", "liwork") if pfx == "heevr" else ("lwork", "liwork")
    hit = _EVR_DRIVERS[(char, n)] = (drv, dict(zip(names, lw if isinstance(lw, tuple) else (lw,), strict=True)))
    return hit


_MRRR_DRIVERS: dict[tuple[str, int, int], tuple[Any, Any, Any, int, int]] = {}


def _top_eigh_mrrr(G: Any, r: int) -> tuple[Any, Any] | None:
    """The ``r`` leading eigenpairs (decreasing) of a real symmetric ``n x n`` matrix ``G`` (``1 <= r < n``;
    may be overwritten), or None when LAPACK reports a failure or the vectors are not orthonormal to
    :data:`ORTH_ULPS` ulps (the caller falls back to :func:`eigh_desc`).

    ``?sytrd`` (tridiagonal form), ``?stemr`` (MRRR: only the ``r`` wanted pairs of the tridiagonal, O(n r)),
    then ``?ormqr`` (the reflectors applied to those ``r`` vectors only: ``?ormtr``'s own route). ``?syevr``
    with a subset (:func:`eigh_desc`) takes bisection + inverse iteration instead of MRRR: float64 100 x 100,
    r = 10: 0.91x its time (interleaved, median); float32's ``?stemr`` was 1.2x slower, so the caller keeps
    ``?ssyevr`` there. Fixed workspaces: the same bits on every call."""
    n = G.shape[0]
    key = (G.dtype.char, n, r)
    hit = _MRRR_DRIVERS.get(key)
    if hit is None:
        lapack = scipy_linalg().lapack
        sytrd, stemr, ormqr = lapack.get_lapack_funcs(("sytrd", "stemr", "ormqr"), (G,))
        lw_trd = int(lapack.get_lapack_funcs(("sytrd_lwork",), (G,))[0](n, lower=1)[0])
        z = np.zeros((n - 1, n - 1), dtype=G.dtype, order="F")
        lw_mqr = int(ormqr("L", "N", z, np.zeros(n - 1, G.dtype), np.zeros((n - 1, r), G.dtype, order="F"),
                           lwork=-1)[1][0])
        hit = _MRRR_DRIVERS[key] = (sytrd, stemr, ormqr, max(lw_trd, 1), max(lw_mqr, r, 1))
    sytrd, stemr, ormqr, lw_trd, lw_mqr = hit
    c, d, e, tau, info = sytrd(G, lower=1, lwork=lw_trd, overwrite_a=1)
    if info != 0:
        return None
    e_n = np.zeros(n, dtype=G.dtype)
    e_n[:n - 1] = e
    m, w, z, info = stemr(d, e_n, 2, 0.0, 1.0, n - r + 1, n, compute_v=1)
    if info != 0 or m != r:
        return None
    V = np.asfortranarray(z[:, :r])
    cq, _, info = ormqr("L", "N", c[1:, :n - 1], tau, V[1:], lwork=lw_mqr, overwrite_c=1)
    if info != 0:
        return None
    V[1:] = cq
    if not orthonormal_enough(V):  # (MRRR on a tight cluster: see ORTH_ULPS; the caller's LAPACK route instead)
        return None
    return w[r - 1::-1].copy(), V[:, ::-1]


#: the certified subspace iteration (:func:`_top_eigh_subspace`) is tried on Grams of at least this order
#: (below it LAPACK's eigensolvers take about as long as a few of its iterations)
SUBSPACE_MIN_ORDER = 96
#: ... and, from a warm start (an estimate of the leading vectors: HOOI's current factor), from this order: two
#: steps then usually certify (measured 0.11 ms against LAPACK's 0.19 ms on a 50 x 50 Gram, 0.14 ms against
#: 0.21 cold and 0.5 for LAPACK on 100 x 100)
WARM_MIN_ORDER = 32
_SUBSPACE_STARTS: dict[tuple[int, int], np.ndarray] = {}
#: ... on Grams whose Frobenius norm lies in this range (its squares and the residuals' neither overflow nor
#: underflow: outside it LAPACK, which scales, decides)
_SUBSPACE_NORM_RANGE = (2.0**-400, 2.0**400)


def _top_eigh_subspace(G: np.ndarray, r: int,
                       start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``r`` leading eigenpairs (decreasing) of a symmetric float64 ``n x n`` matrix ``G`` (a Gram: both of
    its triangles are read; not modified) by block subspace iteration with Rayleigh-Ritz, or None when it
    cannot certify them within its budget (the caller then runs LAPACK).

    A block of ``k = r + max(4, r // 2)`` columns from a fixed seeded start (the same for every call of the
    order: deterministic), or ``start`` (``n x r``, float64: an estimate of the leading vectors, e.g. HOOI's
    factor of the previous iteration) completed by the first ``k - r`` seeded columns, is multiplied by ``G``
    and re-orthonormalized; every second step its Ritz pairs are
    checked (after the first, only the start's Rayleigh quotient: a ratio ``theta_k / theta_r`` of 0.5 or more
    stops it, as a spectrum without a gap after the r-th pair does). They are accepted only when (1) each of
    the ``r`` residuals ``||G v - theta v||`` is at most ``8 n eps ||G||_F``, a backward error of LAPACK's
    class, and (2) no other eigenvalue of ``G`` can reach ``theta_r``: with ``P`` the projector off the Ritz
    vectors ``V`` and ``R`` the residuals, every such eigenvalue is within ``||R||_F`` of one of ``P G P``
    (Weyl, on the 2 x 2 block form), whose norm is at most ``||P G P||_F = sqrt(||G||_F^2 - 2 ||G V||_F^2 +
    ||V^T G V||_F^2)``, exact and computed from the block (with a margin for its rounding); the condition is
    ``||P G P||_F + 2 ||R||_F < theta_r``. So a start blind to a leading eigenvector cannot pass (that
    eigenvalue stays in ``P G P``), nor a negative eigenvalue as large in magnitude, nor ``theta_r`` equal to
    the next, nor a tail too heavy for the bound, nor a Frobenius norm outside ``2^-400 .. 2^400`` (where
    squares would underflow or overflow): LAPACK decides there.

    On orders and ranks :func:`_compiled_order` accepts, the iteration is one compiled call instead
    (:func:`_compiled_top`; the same certificate, a block of ``r + 1`` columns from a warm start, its own step
    budget, the signs fixed), tried from a cold start too, and on float32 Grams as well (their float64 copy).

    The budget: at most ``0.6 n / k + 2`` steps (below the cost of LAPACK's tridiagonal route), and an early
    stop when the Ritz values' ratio ``theta_k / theta_r`` (about the residuals' shrink per step) predicts
    more. Accuracy: eigenvalues as ``?syevr``'s (~1e-15 relative to the largest); eigenvectors to the
    residual over each pair's gap, measured 1e-15 to 1e-14 from ``?syevr``'s on Grams of 1 %-noise Tucker
    tensors, up to ~1e-8 where the r-th eigenvalue is 1e-6 of the first (LAPACK's own ~1e-10 there).
    Measured (2 cores, interleaved, 1 % noise Tucker tensors): 200 x 200, r = 10: 0.51 ms in 4 steps against
    ``?syevr``'s 1.44 ms; 100 x 100: 0.27 against 0.49 ms; on 36 planted Grams (n = 100, 200; noise 1-20 %)
    it certified 18, in 0.35x LAPACK's time. A flat spectrum (Gaussian noise alone) is refused after the
    first step (0.05-0.1 ms)."""
    n = G.shape[0]
    k = r + max(4, r // 2)
    warm = start is not None and start.shape == (n, r) and start.dtype == np.float64
    if G.dtype.char in "fd" and _compiled_order(n, r):
        ok = start is not None and _warm_start_ok(start, n, r) and start.dtype == G.dtype
        return _compiled_top(G, r, start if ok else None)
    if G.dtype != np.float64 or n < (WARM_MIN_ORDER if warm else SUBSPACE_MIN_ORDER) or 3 * k > n or r < 1:
        return None
    Q = _seeded_block(n, k)
    if warm and start is not None:
        with blas_pinned():
            Q = _thin_q(np.hstack([start, Q[:, :k - r]]))
    normF = tol = 0.0
    # (a step costs ~n^2 k plus a fixed ~30 us: 0.13 ms at 200 x 15, 0.07 ms at 100 x 15; LAPACK ~n^3: 1.44 ms,
    # 0.49 ms: the break-even is ~11 and ~7 steps)
    budget = max(2, (n // k) * 6 // 10 + 2)
    with blas_pinned():
        for step in range(1, budget + 1):
            Z = G @ Q
            if step == 1:  # a flat spectrum (no gap after the r-th pair) stops here, at the cost of one step
                H = Q.T @ Z
                if not np.isfinite(H).all():  # (a NaN or Inf in G: LAPACK's route reports it)
                    return None
                th = np.linalg.eigvalsh(H)[::-1]
                if not th[r - 1] > 0 or abs(th[k - 1]) >= 0.5 * th[r - 1]:
                    return None
                normF = math.sqrt(float(np.einsum("ij,ij->", G, G)))
                if not _SUBSPACE_NORM_RANGE[0] <= normF <= _SUBSPACE_NORM_RANGE[1]:
                    return None
                tol = 8 * n * np.finfo(np.float64).eps * normF
            elif step % 2 == 0 or step == budget:
                th, S = np.linalg.eigh(Q.T @ Z)  # ascending
                th, S = th[::-1], S[:, ::-1]
                if not th[r - 1] > 0:
                    return None
                V, GV = Q @ S[:, :r], Z @ S[:, :r]
                R = GV - V * th[None, :r]
                col2 = np.einsum("ij,ij->j", R, R)
                res = math.sqrt(float(col2.max()))
                if res <= tol:
                    # G = [V W] [[Theta, E^T], [E, C]] [V W]^T with ||E|| <= ||R||_F: each eigenvalue of G lies
                    # within ||R||_F of one of Theta's or of C's (Weyl), and C's are at most ||P G P||_F; that
                    # norm squared from the block, plus its own rounding (a few eps ||G||_F^2: the three sums
                    # cancel when the rest is small)
                    VGV = V.T @ GV
                    rest2 = normF * normF - 2 * float(np.einsum("ij,ij->", GV, GV)) + float(
                        np.einsum("ij,ij->", VGV, VGV))
                    rest = math.sqrt(max(rest2 + 8 * n * np.finfo(np.float64).eps * normF * normF, 0.0))
                    if rest + 2 * math.sqrt(float(col2.sum())) + tol < th[r - 1]:
                        return th[:r].copy(), V
                    return None  # converged to pairs it cannot certify as the leading ones
                rho = abs(th[k - 1]) / th[r - 1]  # (about the residuals' shrink per step)
                if rho >= 1 or step + math.log(tol / res) / math.log(max(rho, 1e-300)) > budget:
                    return None
            Q = _thin_q(Z)
    return None


#: Gram orders at which :func:`_top_eigh_subspace` runs the compiled iteration (:func:`._tiny_kernels.certified_top`)
#: ... for at most this many pairs; outside them the iteration above (numpy and LAPACK calls) or LAPACK alone.
#: Measured (one thread, planted Grams at 1 % noise, warm starts, medians of interleaved calls): against the
#: numpy iteration 0.37-0.58x the time at r = 10 on orders 48-128 (order 100: 211 against 427 us) and 0.73x at
#: r = 16 on order 100; against LAPACK's ``?syevr`` (which the numpy iteration leaves to below order 32) 19
#: against 66 us on order 20 (r = 5). On order 200-256 it was no faster than the numpy iteration (whose
#: products are BLAS's), and at r = 20-32 its Rayleigh-Ritz (Jacobi rotations) catches up with LAPACK
COMPILED_ORDERS = (13, 128)
COMPILED_MAX_RANK = 16
#: ... and its budget of steps: a step (Z = G Q and Gram-Schmidt) takes 1-2 us on order 14 and ~11 us on order
#: 64 against LAPACK's 40 and ~450 us, so the break-even is some 20 steps, Rayleigh-Ritz included; the early
#: stop (the Ritz values' ratio predicts more steps than this) refuses what would not converge in it. Measured
#: steps to certify on planted Grams: 4 at 1 % noise (gap ratio ~1e-4) from the fixed start, 10 at 10 % noise
#: (ratio 0.02; 6 from a warm start)
COMPILED_STEPS = 12
#: its seeded starts (C order; the numpy iteration keeps its own, :data:`_SUBSPACE_STARTS`, in LAPACK's layout)
_COMPILED_STARTS: dict[tuple[int, int], np.ndarray] = {}


def _compiled_order(n: int, r: int) -> bool:
    """Whether :func:`_top_eigh_subspace` runs the compiled iteration on an ``n x n`` float64 or float32 Gram
    for ``r`` pairs: an order in :data:`COMPILED_ORDERS`, ``1 <= r <=`` :data:`COMPILED_MAX_RANK` and a cold block
    (``r + 2`` columns) of at most half the order."""
    return COMPILED_ORDERS[0] <= n <= COMPILED_ORDERS[1] and 1 <= r <= COMPILED_MAX_RANK and 2 * (r + 2) <= n


#: :func:`tuckerkit.engine._tiny_kernels.certified_top`, bound at its first use (see ``_contract._SMALL_RANK``)
_CERTIFIED_TOP: list[Any] = [None]


def _compiled_top(G: np.ndarray, r: int, start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_top_eigh_subspace` by one compiled call (:func:`._tiny_kernels.certified_top`: the same
    certificate, a block of ``r + 1`` columns from a warm start and ``r + 2`` from the fixed seeded one, kept as
    rows so every product runs along contiguous memory, Rayleigh-Ritz by Jacobi rotations), or None when it
    refuses, within :data:`COMPILED_STEPS` steps. Cold, ``r + 2`` columns measured 0.51-0.64x LAPACK's time on
    planted Grams of order 20-128 (``r + max(4, r // 2)``, the numpy iteration's, 0.60-1.11x), refusing one of
    seven (order 100 at 10 % noise: 81 us, then LAPACK). A float32 Gram: the iteration certifies the pairs of
    its exact float64 copy, which are returned rounded to float32 (more accurate than ``?ssyevr``'s)."""
    certified_top = _CERTIFIED_TOP[0]
    if certified_top is None:  # (numba's module: not on import tuckerkit; bound once, as _contract's hot paths)
        from tuckerkit.engine._tiny_kernels import certified_top

        _CERTIFIED_TOP[0] = certified_top
    n = G.shape[0]
    dtype = G.dtype
    if dtype != np.float64:  # (float32: the iteration on the Gram's exact float64 copy; results rounded back)
        G = G.astype(np.float64)
        start = None if start is None else start.astype(np.float64)
    k = r + 1 if start is not None else r + 2
    Q = compiled_seed(n, k)
    S0 = Q if start is None else np.concatenate((start, Q[:, :1]), axis=1)
    U = np.empty((n, r))
    w = np.empty(r)
    if not certified_top(np.ascontiguousarray(G), r, S0, COMPILED_STEPS, start is None, U, w):
        return None
    return (w, U) if dtype == np.float64 else (w.astype(dtype), U.astype(dtype))


def compiled_seed(n: int, k: int) -> np.ndarray:
    """The compiled iteration's fixed start for order ``n`` and ``k`` columns (C order, float64): the thin Q of a
    seeded Gaussian block, made once per process (:data:`_COMPILED_STARTS`)."""
    Q = _COMPILED_STARTS.get((n, k))
    if Q is None:
        with blas_pinned():
            Q = _COMPILED_STARTS[(n, k)] = np.ascontiguousarray(
                _thin_q(np.random.default_rng(7919 * n + k).standard_normal((n, k))))
    return Q


class SubspaceBackoff:
    """One mode's memory, over one decomposition call, of whether :func:`_top_eigh_subspace` certified its
    warm-started factor steps: after a refusal it is skipped for the next step, after a second refusal in a
    row for the next two, then four, eight, at most ``MAX_SKIP``; a step it certifies resets the streak. A
    spectrum with no gap after the r-th pair (a tensor without that much structure: Gaussian data, a rank
    above the data's) is refused every time, at about two steps' cost (0.3-1.2 ms on 100 x 100 to 200 x 200
    Grams) before LAPACK computes the pairs anyway. The skips depend on the call's own earlier steps only, so
    the same call takes the same route and gives the same bits on every run, and an iteration's result does
    not depend on ``max_iter``; a skipped step's result is the one its refusal would have left to LAPACK.
    HOOI per iteration, 20 iterations from HOSVD, in-process A/B (9 interleaved pairs; the same fits to the
    bit): Gaussian 200^3 rank 32 0.87x, Gaussian 100^3 rank 10 0.86x, Gaussian 200^3 rank 10 0.98x (its
    refusals are cheap), a rank-10 planted 200^3 decomposed at rank 32 0.90x, from a random start 0.95x;
    where every step certifies, unchanged.

    Examples
    --------
    >>> from tuckerkit.engine._subspace import SubspaceBackoff
    >>> b = SubspaceBackoff()
    >>> tried = []
    >>> for _ in range(8):
    ...     tried.append(b.wanted())
    ...     if tried[-1]:
    ...         b.record(False)
    >>> tried
    [True, False, True, False, False, True, False, False]
    """

    MAX_SKIP = 16

    def __init__(self) -> None:
        self.streak = 0
        self.skip = 0

    def wanted(self) -> bool:
        """Whether this step tries the certified iteration (False: one of the skipped steps, counted)."""
        if self.skip:
            self.skip -= 1
            return False
        return True

    def record(self, certified: bool) -> None:
        """The outcome of a step that tried it."""
        if certified:
            self.streak = 0
            return
        self.streak += 1
        self.skip = min(1 << (self.streak - 1), self.MAX_SKIP)


class SkipBackoff(SubspaceBackoff):
    """A :class:`SubspaceBackoff` that skips every step: :func:`leading_left_singular` then goes straight to
    LAPACK (for a caller that already tried the certified iteration on this step)."""

    def wanted(self) -> bool:
        return False


def _tried(G: np.ndarray, r: int, start: np.ndarray | None,
           backoff: SubspaceBackoff | None) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_top_eigh_subspace` unless ``backoff`` skips this step (then None: LAPACK's route); its outcome
    recorded in ``backoff``."""
    if backoff is not None and not backoff.wanted():
        return None
    top = _top_eigh_subspace(G, r, start)
    if backoff is not None:
        backoff.record(top is not None)
    return top


_QR_DRIVERS: dict[tuple[str, int, int], tuple[Any, Any, int, int]] = {}


def _numpy_qr() -> tuple[Any, Any] | None:
    """numpy's ``qr_r_raw`` and ``qr_reduced`` gufuncs (``numpy.linalg.qr``'s own), or None where this numpy
    lacks them (then scipy's LAPACK, as before)."""
    try:
        from numpy.linalg import _umath_linalg as um
    except ImportError:  # pragma: no cover - another numpy
        return None
    raw, reduced = getattr(um, "qr_r_raw", None), getattr(um, "qr_reduced", None)
    if raw is None or reduced is None or "d->d" not in raw.types or "dd->d" not in reduced.types:
        return None  # pragma: no cover - another numpy
    return raw, reduced


_NP_QR = _numpy_qr()


def _thin_q(A: Any) -> Any:
    """The Q of the thin QR of a tall C- or Fortran-ordered matrix ``A`` (may be overwritten):
    :func:`scipy.linalg.qr`'s own ``?geqrf`` + ``?orgqr`` / ``?ungqr`` calls with the same (cached) optimal
    workspaces, so the same bits, without its per-call workspace queries, checks and unused ``R``.

    float64 and complex128: numpy's own LAPACK gufuncs instead (``numpy.linalg.qr``'s ``?geqrf`` + ``?orgqr``
    with optimal workspaces, without its wrapper), Q written in Fortran order like LAPACK's: the same bits and
    layout as scipy's calls (both wheels' OpenBLAS carries the reference LAPACK; checked on 30-1000 rows and
    1-40 columns, C and F order, BLAS pinned), in 0.4-1.0x their time, and no ``import scipy.linalg``
    (0.11-0.16 s of a fresh process's first HOOI call, whose eigensteps need no other LAPACK when the
    subspace iteration certifies them)."""
    m, k = A.shape
    if A.dtype.char in "dD" and m >= k > 0 and _NP_QR is not None:
        raw, reduced = _NP_QR
        if not A.flags.writeable:  # (the gufunc factors A in place, as LAPACK does)
            A = A.copy()
        sig = A.dtype.char
        Q = np.empty((k, m), dtype=A.dtype).T  # Fortran order, as LAPACK's (scipy's) Q: later products alike
        return reduced(A, raw(A, signature=f"{sig}->{sig}"), signature=f"{sig}{sig}->{sig}", out=Q)
    if A.dtype.char not in "fdFD" or m < k or k == 0:
        return scipy_linalg().qr(A, mode="economic", overwrite_a=True, check_finite=False)[0]
    key = (A.dtype.char, m, k)
    hit = _QR_DRIVERS.get(key)
    if hit is None:
        lapack = scipy_linalg().lapack
        geqrf, orgqr = lapack.get_lapack_funcs(("geqrf", "orgqr"), (A,))
        z = np.zeros((m, k), dtype=A.dtype, order="F")
        lw1 = int(geqrf(z, lwork=-1)[-2][0].real)
        lw2 = int(orgqr(z, np.zeros(k, dtype=A.dtype), lwork=-1)[-2][0].real)
        hit = _QR_DRIVERS[key] = (geqrf, orgqr, lw1, lw2)
    geqrf, orgqr, lw1, lw2 = hit
    qr, tau, _, info = geqrf(A, lwork=lw1, overwrite_a=1)
    if info == 0:
        Q, _, info = orgqr(qr, tau, lwork=lw2, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"?geqrf / ?orgqr failed (info={info})")
    return Q


def leading_left_singular(Y: Any, n: int, r: int, policy: ExecutionPolicy, gram: Any = None,
                          start: Any = None, backoff: SubspaceBackoff | None = None) -> tuple[Any, Any]:
    """The ``r`` leading left singular vectors of the mode-``n`` unfolding of a dense array ``Y`` (sign-fixed)
    and the matching eigenvalues of ``Y_(n) Y_(n)^T`` (squared singular values; ``Y_(n) Y_(n)^H`` and real
    eigenvalues for a complex ``Y``).

    Always from the Gram of the smaller side of the unfolding ``M = Y_(n)`` (I_n x P, P = entries of the
    complement of a mode-n fiber), never a full SVD:

    * ``I_n <= P``: the leading eigenvectors of the I_n x I_n Gram ``M M^T`` (formed without unfolding);
    * ``P < I_n`` (HOOI's projections, P = prod of the other ranks): the leading eigenpairs ``(w, V)`` of the
      P x P Gram ``M^T M``, then ``U = orth(M V)``: the columns of ``M V`` are orthogonal with norms
      ``sqrt(w)``, so a thin QR only normalizes them (and keeps the basis orthonormal when ``Y`` has fewer
      than ``r`` nonzero singular values). Same subspace as the SVD, at about half its cost (200 x 100:
      measured in ``benchmarks/roofline.py``). float64: the leading pairs by MRRR (:func:`_top_eigh_mrrr`,
      ``?syevr`` if LAPACK fails); float32 / complex: ``?syevr`` / ``?heevr``.

    On the host, a real array whose Gram (on either route) has order at most :data:`TINY_ORDER` = 12 (HOOI's
    steps on small tensors) takes one compiled call instead (:mod:`._tiny_kernels`: the Gram in float64, cyclic
    Jacobi rotations, the leading pairs, a thin Householder QR on the second route, the sign fix), with ``r``
    below that order, a Gram of at most 16384 multiply-adds and, on the second route, an I_n x r factor of at
    most 512 entries: 18 instead of 97 us for a 10 x 3 x 3 projection, HOOI on 10^3 at rank 3 0.56x the time
    (10 iterations; 10^4 0.67x), the same subspace to rounding over the gap. Where it declines (not finite, or
    not converged) LAPACK's route runs.

    On the host, a float64 Gram of order 96 or more first tries the certified subspace iteration of
    :func:`_top_eigh_subspace` (both routes): 2.8x faster than ``?syevr`` on a 200 x 200 Gram with a spectral
    gap, the same eigenvalues, eigenvectors to the residual over each gap (a backward error of LAPACK's
    class), and LAPACK's route whenever it cannot certify them. On orders 13-128 with ``r <= 16`` (and a block
    of at most half the order) the same iteration runs as one compiled call, warm or cold
    (:data:`COMPILED_ORDERS`): HOOI with 10 iterations from the same start 0.55-0.83x the time on 20^3-100^3 and
    20^4-30^4 at 1 % noise, unchanged on Gaussian tensors (where it refuses after one step); float32 Grams too
    (their exact float64 copy; float32 HOOI 0.61-0.80x on 20^3-100^3 and 20^4, 0.96x on 200^3).

    Deterministic: LAPACK on one BLAS thread, signs fixed by :func:`sign_fix`. On a GPU an array of at most
    :data:`HOST_ROUTE_MAX` elements is copied down and takes the host's route (``start`` and ``backoff``
    included); a larger one's Gram (and ``M V``) are made on the device and the eigenproblem of order <=
    :data:`HOST_EIGH_MAX` is solved on the host by the same routines (the Gram copied down, the vectors up:
    one round trip on the first route, two on the second, whose thin QR runs on the host too); a larger one
    stays on the device (cuSOLVER's ``syevd`` and QR).

    On the host, the second route on a long real unfolding (``I_n P >= TALL_ELEMS``) with ``P`` of at least
    :data:`GRAM_FREE_MIN_P` first tries :func:`_gram_free_pairs` (a certified subspace iteration on ``M^T (M Q)``,
    no P x P Gram: HOOI on (10, 10, 10, 10000) at rank 10 0.22x the iteration time, the same fit), warm from
    ``start`` in float32 too.

    ``gram``: ``Y_(n) Y_(n)^T`` when it was already made (the first route takes it instead of computing it; see
    :func:`gram_route`). ``start``: an estimate of the result (``I_n x r``; HOOI passes the factor it is about
    to replace) that warm-starts the certified subspace iteration, down to order :data:`WARM_MIN_ORDER`: the
    first route starts from it, the second from ``M^T start`` (one step of the iteration from it, in the other
    side's space). Host float64 only; the result is certified as from a cold start (a start blind to a leading
    eigenvector cannot pass), and deterministic for the same ``start``. ``backoff``: the mode's
    :class:`SubspaceBackoff` over the call (HOOI's), which skips the warm-started iteration after refusals.
    """
    I_n = Y.shape[n]
    P = Y.size // I_n
    if P < r <= I_n and gram is None:  # more columns than the unfolding's rank: its P pairs, then a completion
        U, w = leading_left_singular(Y, n, P, policy, None, None, backoff)
        return _completed(array_namespace(Y), U, w, r)
    if gram is None and _tiny(Y, I_n, P, r):
        got = _tiny_left(Y, n, I_n, P, r)
        if got is not None:
            return got
    xp = array_namespace(Y)
    if xp is not np and gram is None and Y.size <= HOST_ROUTE_MAX:  # small: the host's route (see HOST_ROUTE_MAX)
        Yh, start_h = _both_down(xp, Y, start)
        U, w = leading_left_singular(Yh, n, r, policy, None, start_h, backoff)
        return _on_host(xp, U, w)
    if gram_route(Y.shape, n, r):
        G = gram if gram is not None else _small_gram(Y, n, I_n, P) if _small(Y, I_n, P) else \
            dense_gram(Y, n, None, policy)
        if xp is not np and I_n > HOST_EIGH_MAX:
            w, V = eigh_desc(G, r)
            return sign_fix(xp.ascontiguousarray(V)), w
        warm = start if xp is np and _warm_start_ok(start, I_n, r) else None
        G = to_host(G)  # (a device Gram of small order: its eigenproblem on the host)
        top = _tried(G, r, warm, backoff if warm is not None else None) if r < I_n else None
        if top is not None and G.dtype.char in "fd" and _compiled_order(I_n, r):  # (its signs already fixed)
            return _on_host(xp, top[1], top[0])
        if top is None:
            with blas_pinned():
                top = eigh_desc(G, r)
        V, w = _on_host(xp, sign_fix(np.ascontiguousarray(top[1])), top[0])
        return V, w
    if 0 < n == Y.ndim - 1 and xp is np and Y.flags.c_contiguous:  # a C array's last mode: its unfolding a view
        M = Y.reshape(P, I_n).T  # (of Fortran order: no copy of the tensor for BLAS, which takes either)
    else:
        M = (Y if n == 0 else Y.transpose((n, *(m for m in range(Y.ndim) if m != n)))).reshape(I_n, P)
    real = real_dtype(Y.dtype)
    if xp is not np:  # the P x P Gram and M V on the device; a small P's eigenproblem and thin QR on the host
        G = M.conj().T @ M if M.dtype.kind == "c" else M.T @ M
        if P > HOST_EIGH_MAX:  # cuSOLVER's syevd and QR (not gesvd of M: 4-5x slower, measured at P = 100)
            w, V = eigh_desc(G, r)
            Q = xp.linalg.qr(M @ V)[0]
            return sign_fix(xp.ascontiguousarray(Q)), xp.clip(w, 0, None).astype(real, copy=False)
        with blas_pinned():
            w, V = _top_gram_pairs(to_host(G), r, P)
        B = to_host(M @ xp.asarray(np.ascontiguousarray(V)))
        with blas_pinned():
            Q = _thin_q(B)
        return _on_host(xp, _sign_fix_c(Q), np.clip(w, 0, None).astype(real, copy=False))
    warm = _warm_start_ok(start, I_n, r) and (M.dtype.char == "d" or _compiled_order(P, r))
    if M.dtype.kind != "c" and I_n * P >= TALL_ELEMS:  # (a long mode: its products cut for the workers)
        # (its Gram-free step takes a float32 start too; its Gram's iteration as here)
        free_warm = _warm_start_ok(start, I_n, r) and _gram_free_wanted(I_n, P, r, M.dtype)
        return _tall_second_route(M, r, policy, start if warm or free_warm else None, backoff, real)
    with blas_pinned():
        G = M.conj().T @ M if M.dtype.kind == "c" else M.T @ M
        W = M.T @ start if warm else None
        w, V = _top_gram_pairs(G, r, P, W, backoff if W is not None else None)
        Q = _thin_q(M @ V)
    return _sign_fix_c(Q), np.maximum(w, 0).astype(real, copy=False)


#: the host's second route on an unfolding of at least this many elements (a long mode: HOOI on 100000 x 10 x
#: 10 at rank 5, a 100000 x 25 unfolding) cuts its three products with the unfolding for the workers
TALL_ELEMS = 1 << 20


def _tall_second_route(M: np.ndarray, r: int, policy: ExecutionPolicy, start: Any,
                       backoff: SubspaceBackoff | None, real: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`leading_left_singular`'s second route on a tall real unfolding ``M`` (I_n x P): ``M^T M``, the
    warm start's ``M^T start`` and ``M V`` each cut into pieces by the sizes alone (the engine's
    ``cpu_matmul``: the reduction's partial products added in piece order, or rows), run on the policy's
    workers, so the bits do not depend on their number. Before, each was one single-threaded BLAS call: a
    100000 x 25 float64 unfolding's three products took about 15 ms of a 70-80 ms HOOI iteration. Where P is
    in the hundreds (:func:`_gram_free_wanted`) the pairs come from :func:`_gram_free_pairs` first, without the
    Gram; the Gram's route where it refuses."""
    from tuckerkit.engine._contract import cpu_matmul

    I_n, P = M.shape
    got = None
    if _gram_free_wanted(I_n, P, r, M.dtype):
        # (the mode's backoff governs this route here; a skipped or refused step forms the Gram, whose pairs
        # then come from the cold iteration or LAPACK)
        if backoff is None or backoff.wanted():
            got = _gram_free_pairs(M, r, None if start is None else np.ascontiguousarray(start, dtype=M.dtype),
                                   policy)
            if backoff is not None:
                backoff.record(got is not None)
        start = None
    elif start is not None and not (M.dtype.char == "d" or _compiled_order(P, r)):
        start = None  # (float32 Grams: the compiled iteration's orders only)
    if got is not None:
        w, B = got
    else:
        G = np.empty((P, P), dtype=M.dtype)
        cpu_matmul(M.T, M, G, 2 * I_n * P * P, policy)
        W = None
        if start is not None:
            W = np.empty((P, r), dtype=M.dtype)
            cpu_matmul(M.T, np.ascontiguousarray(start, dtype=M.dtype), W, 2 * I_n * P * r, policy)
        with blas_pinned():
            w, V = _top_gram_pairs(G, r, P, W, backoff if W is not None else None)
        B = np.empty((I_n, r), dtype=M.dtype)
        cpu_matmul(M, np.ascontiguousarray(V, dtype=M.dtype), B, 2 * I_n * P * r, policy)
    Q = _cholesky_qr2(B, policy)
    if Q is None:
        with blas_pinned():
            Q = _thin_q(B)
    return _sign_fix_c(Q), np.maximum(w, 0).astype(real, copy=False)


#: the second route skips the P x P Gram of a tall real unfolding from this many columns (see
#: :func:`_gram_free_pairs`), with at most ``GRAM_FREE_MAX_STEPS`` steps and at least two
GRAM_FREE_MIN_P = 256
GRAM_FREE_MAX_STEPS = 12


def _gram_free_wanted(I_n: int, P: int, r: int, dtype: Any) -> bool:
    """Whether the second route on a tall ``I_n x P`` unfolding tries :func:`_gram_free_pairs` first: float32 or
    float64, ``P`` of at least ``GRAM_FREE_MIN_P`` (and below ``I_n``: the second route), a block of ``r`` plus a few
    columns within a third of ``P``, and a step budget (a step's 4 I_n P k flops, against the Gram's 2 I_n P^2
    and its eigenproblem) of at least two steps.

    >>> _gram_free_wanted(10000, 1000, 10, np.float64), _gram_free_wanted(10000, 100, 10, np.float64)
    (True, False)
    >>> _gram_free_wanted(10000, 1000, 10, np.float32), _gram_free_wanted(10000, 1000, 10, np.complex128)
    (True, False)
    """
    k = r + max(4, r // 2)
    return (np.dtype(dtype) in (np.float32, np.float64) and GRAM_FREE_MIN_P <= P < I_n and 3 * k <= P and r >= 1
            and _gram_free_budget(P, k) >= 2)


def _gram_free_budget(P: int, k: int) -> int:
    """Steps :func:`_gram_free_pairs` may take: a quarter of the Gram's cost in steps (2 I_n P^2 / (4 I_n P k)
    = P / 2k, halved: its steps read the unfolding twice from memory, the Gram computes at the GEMM's peak),
    at most ``GRAM_FREE_MAX_STEPS``."""
    return min(GRAM_FREE_MAX_STEPS, P // (4 * k))


def _gram_free_pairs(M: np.ndarray, r: int, start: np.ndarray | None,
                     policy: ExecutionPolicy) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``r`` leading eigenvalues of ``G = M^T M`` (decreasing) and ``M V`` for their eigenvectors ``V``, for
    a tall float32 or float64 ``M`` (I_n x P, P in the hundreds or more), without forming ``G``: block subspace
    iteration on the operator ``Q -> M^T (M Q)`` with Rayleigh-Ritz, or None when it cannot certify the pairs
    within its budget (the caller forms the Gram then). The products run in ``M``'s dtype, the rest in float64;
    float32's tolerances in its own ``eps``.

    HOOI's second route forms the P x P Gram (2 I_n P^2 flops: 20 GFlop for a 10000 x 1000 unfolding, the long mode of
    (10, 10, 10, 10000) at rank 10, whose other modes are full-rank) for a handful of its leading pairs. Here a block of
    ``k = r + max(4, r // 2)`` columns starts from ``M^T start`` (``start``: I_n x r, HOOI's current factor: one step of
    the iteration from it) completed by seeded columns, or (``start`` None: the decomposition's start) from the seeded
    columns alone (fixed per ``(P, k)``), each step two products with ``M`` (4 I_n P k flops, two reads of it) planned
    as contractions (the compiled small-rank kernels where the planner takes them; the same bits for any number of
    workers). The pairs are accepted as :func:`_top_eigh_subspace` accepts them, with what the operator gives instead of
    ``||G||_F``: each residual ``||G v - theta v||`` at most ``8 (I_n + P) eps theta_1`` (``theta_1 <= ||G||``, so a
    stricter bound; ``I_n``: the products' rounding), and no other eigenvalue of ``G`` able to reach ``theta_r``: ``G``
    is positive semidefinite, so ``P G P``'s largest eigenvalue is at most its trace, ``trace(G) - trace(V^T G V) =
    ||M||_F^2 - sum(theta)`` (the energy outside the Ritz vectors, with a margin for its rounding); the condition is
    ``trace rest + 2 ||R||_F + tol < theta_r``. A spectrum with that much energy beyond the r-th pair (noise above a few
    per cent of the data, a rank above the data's) is refused, usually after one step from a warm start, two from a cold
    one (where the energy outside the Ritz vectors is still twice ``theta_r``): the caller's Gram and LAPACK decide
    there. The first step stops on a Ritz ratio ``theta_k / theta_r`` of 0.5 or more, later steps when the ratio
    predicts more steps than the budget (:func:`_gram_free_budget`).

    Measured (2 workers, the AVX-512 machine, float64, planted Tucker tensors, HOOI from its default start, 6
    iterations, interleaved with the Gram route): the 10000 x 1000 unfolding's step 45 ms warm and 54 ms cold,
    against the Gram route's 230; HOOI per iteration on (10, 10, 10, 10000) at rank 10 247 -> 55 ms (0.22x) at
    1 % and 10 % noise, at 30 % 1.04x (refused); (10000, 30, 30) at ranks (10, 30, 30) 0.34x, (20000, 20, 20)
    at (10, 20, 20) 0.59x, (40, 40, 3000) at (20, 20, 16) 0.49x, (3000, 40, 40) at (16, 20, 20) 0.74x, (5000,
    50, 50) at (20, 20, 20) 0.85x; the same fits to 1e-12. float32: (10, 10, 10, 10000) 149 -> 25 ms (0.17x),
    (10000, 30, 30) 0.27x, its fits nearer float64's than the float32 Gram's (5e-8 against 3e-7)."""
    from tuckerkit.engine._contract import contract, plan_contraction

    I_n, P = M.shape
    k = r + max(4, r // 2)
    dt = M.dtype  # (the products in M's dtype; the Rayleigh-Ritz, the certificate and the basis in float64)
    trace = _operator_trace(M)
    if trace is None:
        return None
    seeded = _seeded_block(P, k)
    if start is None:  # (cold: HOOI's start, ST-HOSVD's first mode)
        Q0 = seeded.copy()
    else:
        W = np.empty((P, r), dt)
        contract("ci,cr->ir", M, start, out=W, policy=policy)
        with blas_pinned():
            Q0 = np.ascontiguousarray(_thin_q(np.hstack([W.astype(np.float64), seeded[:, :k - r]])))
    # the products as planned contractions: skinny GEMMs (k columns) that the compiled small-rank kernels run
    # at the speed of a read of M (10000 x 1000: 4.6 and 5.6 ms against BLAS's 11 each); (M Q)^T's rows
    # unit-strided, as the kernel writes them
    BT = np.empty((k, I_n), dt)
    Z = np.empty((P, k), dt)
    Qd = np.empty((P, k), dt)
    p_b = plan_contraction("ci,ir->rc", M, Qd, out=BT, policy=policy)
    p_z = plan_contraction("ci,rc->ir", M, BT, out=Z, policy=policy)

    def gram_times(Q: np.ndarray) -> np.ndarray:
        np.copyto(Qd, Q)
        contract("ci,ir->rc", M, Qd, out=BT, plan=p_b)
        contract("ci,rc->ir", M, BT, out=Z, plan=p_z)
        return Z.astype(np.float64, copy=False)

    got = _certified_top(gram_times, Q0, r, trace, float(np.finfo(dt).eps), I_n + P, _gram_free_budget(P, k),
                         start is not None)
    if got is None:
        return None
    th, _, S = got
    return th, (BT.T @ S[:, :r].astype(dt)).astype(dt, copy=False)  # M V = (M Q) S, Q the last step's


def _operator_trace(M: Any) -> float | None:
    """``||M||_F^2`` (the trace of ``M^T M`` and of ``M M^T``) in float64, or None outside the range where its
    squares and the residuals' neither overflow nor underflow."""
    from tuckerkit.engine._operand import frobenius_norm

    with blas_pinned():
        trace = frobenius_norm(M) ** 2
    return trace if _SUBSPACE_NORM_RANGE[0] <= trace <= _SUBSPACE_NORM_RANGE[1] else None


def _seeded_block(n: int, k: int) -> np.ndarray:
    """The fixed orthonormal n x k start block of the certified iterations (seeded by the sizes alone)."""
    Q = _SUBSPACE_STARTS.get((n, k))
    if Q is None:
        with blas_pinned():
            Q = _SUBSPACE_STARTS[(n, k)] = _thin_q(np.random.default_rng(7919 * n + k).standard_normal((n, k)))
    return Q


def _certified_top(gram_times: Any, Q: np.ndarray, r: int, trace: float, eps: float, length: int, budget: int,
                   warm: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The certified block subspace iteration of :func:`_gram_free_pairs` on a positive semidefinite operator ``G``
    given by ``gram_times(Q) = G Q`` (float64, n x k) from the orthonormal float64 block ``Q`` (n x k):
    ``(theta[:r], V, S)`` (the leading Ritz values, their vectors ``V = Q S[:, :r]`` and the Rayleigh-Ritz rotation
    ``S`` of the last step's ``Q``), or None. ``trace``: the trace of ``G``; ``eps`` and ``length`` (the products'
    sums' length): the rounding of its products; ``warm``: ``Q`` holds an estimate of the result (the energy test
    from the first step)."""
    k = Q.shape[1]
    for step in range(1, budget + 1):
        Z64 = gram_times(Q)
        with blas_pinned():
            H = Q.T @ Z64
            if not np.isfinite(H).all():
                return None
            th, S = np.linalg.eigh((H + H.T) * 0.5)  # ascending
            th, S = th[::-1], S[:, ::-1]
            if not th[r - 1] > 0 or (step == 1 and abs(th[k - 1]) >= 0.5 * th[r - 1]):
                return None
            if (warm or step > 1) and trace - float(th[:r].sum()) >= 2 * th[r - 1]:
                # (the energy outside the Ritz vectors: the pairs converge to at most this much more, so the
                # certificate would need the rest to fall from twice theta_r below it; not worth the steps)
                return None
            V, GV = Q @ S[:, :r], Z64 @ S[:, :r]
            R = GV - V * th[None, :r]
            col2 = np.einsum("ij,ij->j", R, R)
            res = math.sqrt(float(col2.max()))
            tol = 8 * length * eps * float(th[0])
            if res <= tol:
                inside = float(np.einsum("ij,ij->", V, GV))  # trace(V^T G V)
                rest = max(trace - inside + 8 * length * eps * trace, 0.0)
                if rest + 2 * math.sqrt(float(col2.sum())) + tol < th[r - 1]:
                    return th[:r].copy(), V, S
                return None
            rho = abs(float(th[k - 1])) / float(th[r - 1])
            if rho >= 1 or step + math.log(tol / res) / math.log(max(rho, 1e-300)) > budget:
                return None
            Q = np.ascontiguousarray(_thin_q(Z64.copy()))
    return None


#: :func:`_cholesky_qr2` declines a matrix whose columns' squared norms (its Gram's Cholesky pivots) span more
#: than ``1 / (CHOLQR_MARGIN * eps)``: there two passes of CholeskyQR would lose orthogonality
CHOLQR_MARGIN = 1e6


def _cholesky_qr2(B: np.ndarray, policy: ExecutionPolicy) -> np.ndarray | None:
    """An orthonormal basis of the columns of a tall real ``B`` (I x r) by two passes of CholeskyQR in float64:
    ``Q <- Q R^{-1}`` with ``R^T R = Q^T Q``, the products through the engine's ``cpu_matmul`` (cut for the workers
    by the sizes: the same bits for any number of them), or None where the Gram's Cholesky factor fails or its
    pivots span too much (``CHOLQR_MARGIN``): then the caller's Householder QR. B is HOOI's ``M V``, whose columns
    are orthogonal with norms ``sqrt(w)``, so its condition is ``sqrt(w_1 / w_r)`` and the first pass already
    orthonormalizes it to ``kappa^2 eps``, the second to rounding. The same subspace as Householder's Q to
    rounding (the signs are fixed after). 100000 x 10 float64: 4.4 ms on two workers against ``?geqrf`` +
    ``?orgqr``'s 22.9 on one; 100000 x 5 2.0 against 5.6 ms."""
    from tuckerkit.engine._contract import cpu_matmul

    I_n, r = B.shape
    Q = B.astype(np.float64, copy=False)
    eps = float(np.finfo(np.float64).eps)
    for _ in range(2):
        G = np.empty((r, r))
        cpu_matmul(Q.T, Q, G, 2 * I_n * r * r, policy)
        with blas_pinned():
            try:
                L = np.linalg.cholesky(G)
            except np.linalg.LinAlgError:
                return None
            d = np.diag(L) ** 2
            if not np.isfinite(L).all() or not d.min() > d.max() * CHOLQR_MARGIN * eps:
                return None
            W = np.linalg.inv(L.T)  # (R^{-1}: upper triangular, r x r)
        Qn = np.empty((I_n, r))
        cpu_matmul(Q, W, Qn, 2 * I_n * r * r, policy)
        Q = Qn
    return Q.astype(B.dtype, copy=False)


def _sign_fix_c(Q: np.ndarray) -> np.ndarray:
    """``sign_fix(np.ascontiguousarray(Q))`` of a real host matrix in any layout (the thin QR's Fortran-ordered
    Q), bit for bit, in one pass: the signs from ``Q`` as it is (a Fortran-ordered column is one run of
    memory), then the product written C-contiguous (a complex Q: that expression itself). A Fortran-ordered
    100000 x 5 Q (a long mode's factor step; best of 7, one core): float64 2.7 against 4.3 ms, float32 1.5
    against 1.9 ms."""
    if Q.dtype.kind == "c" or Q.ndim != 2:
        return sign_fix(np.ascontiguousarray(Q))
    top = Q[np.abs(Q).argmax(axis=0), np.arange(Q.shape[1])]
    signs = np.sign(top)
    signs[signs == 0] = 1
    out = np.empty(Q.shape, dtype=Q.dtype)
    return np.multiply(Q, signs.astype(Q.dtype, copy=False)[None, :], out=out)


#: the largest Gram order :func:`leading_left_singular` gives the compiled tiny route (:mod:`._tiny_kernels`:
#: cyclic Jacobi rotations, about 3 n^3 flops a sweep and six to ten sweeps). Measured against the LAPACK route
#: (one thread, the call alone): order 9-10 0.11-0.51x the time, 12 0.45-0.59x, but 16 0.85-1.32x
TINY_ORDER = 12
#: the most multiply-adds of the tiny route's Gram (n (n + 1) / 2 times the long side, one chain each, not
#: vectorized): 4 x 1000 0.28x the LAPACK route's time, but a 16 x 2000 unfolding 2.1x
_TINY_GRAM_MADDS = 16384
#: the most elements of the I_n x r factor the tiny route's other side (I_n > P) works on, three arrays of them
#: on the kernel's stack (12 kB in float64)
_TINY_FACTOR_ELEMS = 512


def _tiny(Y: Any, I_n: int, P: int, r: int) -> bool:
    """Whether :func:`leading_left_singular` takes the compiled tiny route (:mod:`._tiny_kernels`): a real host
    array whose smaller side's Gram has order at most ``TINY_ORDER`` and takes at most ``_TINY_GRAM_MADDS``,
    ``r`` below that order, and (Gram of the other side) an I_n x r factor of at most ``_TINY_FACTOR_ELEMS``."""
    if type(Y) not in (np.ndarray, np.memmap) or Y.dtype.char not in "fd" or not 0 < r < min(I_n, P):
        return False
    n = min(I_n, P)
    return (n <= TINY_ORDER and n * (n + 1) // 2 * max(I_n, P) <= _TINY_GRAM_MADDS
            and (I_n <= P or I_n * r <= _TINY_FACTOR_ELEMS))


def _tiny_left(Y: np.ndarray, n: int, I_n: int, P: int, r: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`leading_left_singular` by the compiled tiny route, or None where the kernel declines (not finite,
    or not converged): the caller's LAPACK route then."""
    from tuckerkit.engine._tiny_kernels import tiny_left_singular

    M = _unfolding(Y, n, I_n, P)
    U = np.empty((I_n, r), dtype=Y.dtype)
    w = np.empty(r, dtype=np.float64)
    if not tiny_left_singular(M, r, U, w):
        return None
    return U, w.astype(Y.dtype, copy=False)


def _small(Y: Any, I_n: int, P: int) -> bool:
    """Whether ``Y``'s mode Gram is small enough to make directly (:func:`_small_gram`): a real numpy array whose
    Gram OpenBLAS's SYRK runs on one thread in any setting (``SYRK_PIN_MADDS``)."""
    return type(Y) in (np.ndarray, np.memmap) and Y.dtype.kind == "f" and I_n * I_n * P < SYRK_PIN_MADDS


def _small_gram(Y: np.ndarray, n: int, I_n: int, P: int) -> Any:
    """``Y_(n) Y_(n)^T`` of a small real array: one SYRK (exactly symmetric) on the unfolding, copied when mode
    ``n`` is not the first (a few kB). The planned Gram's fixed costs are several times this on HOOI's small
    projections: 20 x 5 x 5, 4.8 against 32.5 us."""
    M = _unfolding(Y, n, I_n, P)
    return M @ M.T  # (numpy's SYRK: M and M.T one C-contiguous buffer)


def _unfolding(Y: np.ndarray, n: int, I_n: int, P: int) -> np.ndarray:
    """The mode-``n`` unfolding of a small array as one C-contiguous I_n x P matrix (copied unless it is one)."""
    return np.ascontiguousarray((Y if n == 0 else Y.transpose((n, *(m for m in range(Y.ndim) if m != n))))
                                .reshape(I_n, P))


def _top_gram_pairs(G: Any, r: int, P: int, start: Any = None,
                    backoff: SubspaceBackoff | None = None) -> tuple[Any, Any]:
    """The ``r`` leading eigenpairs of the host's P x P Gram ``G`` (may be overwritten): the certified subspace
    iteration (from ``start`` when given; unless ``backoff`` skips it), then MRRR (float64), else ``?syevr`` /
    ``?heevr``."""
    # the iteration: float64, or float32 on the compiled one's orders; MRRR float64 only (float32's ?stemr
    # measured slower than ?ssyevr's subset route: 1.2x on 100 x 100, r = 10)
    tried = G.dtype.char == "d" or (G.dtype.char == "f" and _compiled_order(P, r))
    top = _tried(G, r, start, backoff) if tried and r < P else None
    if top is None and G.dtype.char == "d" and r < P:
        top = _top_eigh_mrrr(G, r)
    return top if top is not None else eigh_desc(G, r)


def _warm_start_ok(start: Any, I_n: int, r: int) -> bool:
    """Whether ``start`` can warm-start the subspace iteration: a host ``I_n x r`` array, float64 (float32 too
    for the compiled iteration's orders: :func:`_top_eigh_subspace` checks)."""
    return isinstance(start, np.ndarray) and start.dtype.char in "fd" and start.shape == (I_n, r)


def gram_route(shape: tuple[int, ...], n: int, r: int) -> bool:
    """Whether :func:`leading_left_singular` takes mode ``n``'s own I_n x I_n Gram (not the Gram of the other
    side of the unfolding).

    Examples
    --------
    >>> from tuckerkit.engine._subspace import gram_route
    >>> gram_route((200, 200, 200), 0, 10), gram_route((200, 10, 10), 0, 10)
    (True, False)
    """
    I_n = shape[n]
    P = math.prod(shape) // max(I_n, 1)
    return I_n <= P


def real_dtype(dtype: Any) -> np.dtype:
    """The real dtype of the same precision (float32 for complex64, float64 for complex128)."""
    dt = np.dtype(dtype)
    return np.finfo(dt).dtype if dt.kind == "c" else dt


#: randomized SVD: extra sketch columns beyond the rank (Halko, Martinsson & Tropp's ``p``; TensorLy uses 5,
#: scikit-learn 10)
OVERSAMPLES = 10
#: randomized SVD: power (subspace) iterations, each re-orthonormalized (TensorLy's ``n_iter=2``)
POWER_ITERATIONS = 2
#: elements of one block of per-slab products summed by the sketch (a fixed cut: the bits do not vary)
_BLOCK_ELEMS = 1 << 20


def _orth(xp, A: Any) -> Any:
    """An orthonormal basis of the columns of a tall matrix (thin QR; LAPACK on one BLAS thread)."""
    if xp is np:
        linalg = scipy_linalg()
        with blas_pinned():
            Q, _ = linalg.qr(A, mode="economic", overwrite_a=False, check_finite=False)
        return Q
    Q, _ = xp.linalg.qr(A)
    return Q


def _product(xp, a: Any, b: Any, policy: ExecutionPolicy) -> Any:
    """``a @ b`` on views (batched when 3-D) into a new array: the engine's deterministic CPU split, or cuBLAS."""
    from tuckerkit.engine._contract import cpu_matmul
    from tuckerkit.engine._gpu import gpu_matmul

    out = xp.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype)
    if xp is np:
        cpu_matmul(a, b, out, int(np.prod(out.shape)) * a.shape[-1], policy)
    else:
        gpu_matmul(xp, a, b, out)
    return out


class _Unfolding:
    """``Y_(n)`` as the sum over slabs ``Y_(n) = [Xv[0] ... Xv[o-1]]`` of a no-copy view ``Xv`` of shape
    (outer, I_n, inner) (the Gram's slab view): products with it and its transpose are GEMMs on views."""

    def __init__(self, xp, Xv: Any, policy: ExecutionPolicy):
        self.xp, self.Xv, self.policy = xp, Xv, policy
        self.no, self.In, self.ri = Xv.shape

    def times(self, W: Any) -> Any:
        """``Y_(n) W`` for ``W`` of shape (outer, inner, k): shape (I_n, k)."""
        xp, Xv, k = self.xp, self.Xv, W.shape[-1]
        if self.no == 1:
            return _product(xp, Xv[0], W[0], self.policy)
        if self.ri == 1:  # the unfolding's transpose is one strided matrix (outer, I_n)
            return _product(xp, Xv[:, :, 0].T, W[:, 0, :], self.policy)
        step = max(1, _BLOCK_ELEMS // max(self.In * k, 1))
        acc = xp.zeros((self.In, k), dtype=Xv.dtype)
        for s in range(0, self.no, step):
            acc += _product(xp, Xv[s:s + step], W[s:s + step], self.policy).sum(axis=0)
        return acc

    def adjoint_times(self, Q: Any) -> Any:
        """``Y_(n)^H Q`` for ``Q`` of shape (I_n, k): shape (outer, inner, k)."""
        xp, Xv = self.xp, self.Xv
        cplx = Xv.dtype.kind == "c"
        Qc = xp.conj(Q) if cplx else Q
        if self.no == 1:
            out = _product(xp, Xv[0].T, Qc, self.policy)[None]
        elif self.ri == 1:
            out = _product(xp, Xv[:, :, 0], Qc, self.policy)[:, None, :]
        else:
            out = _product(xp, xp.swapaxes(Xv, 1, 2), Qc[None], self.policy)  # Q broadcast over the slabs
        return xp.conj(out) if cplx else out


def randomized_left_singular(Y: Any, n: int, r: int, rng: np.random.Generator, policy: ExecutionPolicy, *,
                             oversamples: int = OVERSAMPLES, power_iterations: int = POWER_ITERATIONS
                             ) -> tuple[Any, Any]:
    """The ``r`` leading left singular vectors of ``Y_(n)`` by a randomized range finder (Halko, Martinsson and
    Tropp 2011, Algorithm 4.4), and the matching eigenvalues of ``Y_(n) Y_(n)^H``; same output as
    :func:`leading_left_singular`.

    ``k = r + oversamples`` Gaussian test vectors (complex Gaussian for a complex ``Y``; drawn from ``rng`` on the
    host, so a seed gives the same bits everywhere) are multiplied by ``Y_(n)`` slab by slab on a view of ``Y``
    (no unfolding, no copy); ``power_iterations`` times the basis is refined by ``Y_(n) Y_(n)^H`` (each product
    re-orthonormalized by a thin QR); the exact leading subspace of the small projection ``Q^H Y_(n)`` (from its
    k x k Gram) gives ``U = Q V``. Cost: ``2 + 2 * power_iterations`` products of ``Y_(n)`` with ``k`` columns,
    against the Gram's ``I_n`` columns and an ``I_n x I_n`` eigendecomposition. Falls back to the exact route when
    the sketch would not be smaller than the unfolding (``k >= min(I_n, P)``) or when the modes of ``Y`` cannot
    be viewed as slabs without a copy.
    """
    from tuckerkit.engine._gram import _slab_view, build_gram_plan

    I_n = Y.shape[n]
    P = Y.size // I_n
    k = r + int(oversamples)
    gp = build_gram_plan(Y, n, policy)
    if k >= min(I_n, P) or gp.route == "blocks":
        return leading_left_singular(Y, n, r, policy)
    xp = array_namespace(Y)
    M = _Unfolding(xp, _slab_view(Y, n, list(gp.outer), list(gp.inner)), policy)
    shape_w = (M.no, M.ri, k)
    cplx = Y.dtype.kind == "c"
    omega = rng.standard_normal(shape_w)
    if cplx:
        omega = (omega + 1j * rng.standard_normal(shape_w)) * np.sqrt(0.5)
    Q = _orth(xp, M.times(xp.asarray(omega.astype(Y.dtype))))
    for _ in range(int(power_iterations)):
        W = _orth(xp, M.adjoint_times(Q).reshape(P, k))
        Q = _orth(xp, M.times(xp.ascontiguousarray(W).reshape(shape_w)))
    B = M.adjoint_times(Q).reshape(P, k)  # (Q^H Y_(n))^H
    with blas_pinned():  # small products on one BLAS thread: the same bits on every run
        G = B.conj().T @ B if cplx else B.T @ B  # Q^H Y_(n) Y_(n)^H Q, k x k
        w, V = eigh_desc(G, r)
        U = sign_fix(xp.ascontiguousarray(Q @ V))
    return U, xp.clip(w, 0, None).astype(real_dtype(Y.dtype), copy=False)
