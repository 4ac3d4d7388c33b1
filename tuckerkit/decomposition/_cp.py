"""CP decomposition by alternating least squares (CP-ALS)."""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit._validation import (
    check_bool,
    check_callback,
    check_cp_rank,
    check_fits_memory,
    check_init,
    check_max_iter,
    check_nonneg,
    check_random_state,
    describe,
)
from tuckerkit.backend import to_host
from tuckerkit.decomposition._entry import (
    Call,
    ResidualModel,
    carries_partials,
    check_fixed_modes,
    decomposition_call,
    mean_passes,
    scaled_start,
)
from tuckerkit.decomposition._linalg import (
    cp_factor_update,
    cp_fit_error,
    cp_sweep_update,
    spd_inverse,
    spd_solve,
    sweep_fits,
)
from tuckerkit.decomposition._missing import CPModel
from tuckerkit.decomposition._monitor import IterationState, Monitor
from tuckerkit.decomposition._results import CPTensor
from tuckerkit.engine._buffers import pooled
from tuckerkit.engine._direct import operand_mttkrp
from tuckerkit.engine._subspace import gram_route, real_dtype
from tuckerkit.engine._sweeps import CarriedPartial

logger = logging.getLogger(__name__)


#: the most entries of a factor that CP-ALS's one-call step (:func:`cp_sweep_update`) writes into a fresh array
#: instead of a pooled one (:func:`~tuckerkit.engine._buffers.pooled`: a few microseconds of bookkeeping, which
#: pays where a factor's pages would otherwise be faulted in anew each step)
_FRESH_MAX = 4096


def _check_rank_fits(X: Any, rank: int) -> None:
    """A CP rank has no upper bound but memory: refuse one whose Grams, factors and MTTKRP partials (the
    larger half of the modes times R) cannot fit, before allocating anything."""
    from tuckerkit.sparse import is_sparse

    N, item = X.ndim, X.dtype.itemsize
    half = (N + 1) // 2
    # the compiled sparse kernels keep no dense partial (a 20000^3 tensor's would be 51 GB at rank 16)
    partial = 0 if is_sparse(X) else max(math.prod(X.shape[:half]), math.prod(X.shape[half:]))
    need = item * rank * ((N + 3) * rank + 3 * sum(X.shape) + partial)
    check_fits_memory(need, f"rank={rank}", "choose a smaller rank")


def _svd_init(call: Call, rank: int, rng: np.random.Generator, first: bool = False,
              fixed: frozenset[int] = frozenset()) -> list[Any]:
    """Leading left singular vectors of each unfolding (the operand's own route: a Gram without unfolding,
    ARPACK on a sparse unfolding, a streamed Gram); random columns pad ranks beyond a mode's size. A ``fixed``
    mode's are the exact ones (no float32 Gram: its start is returned as the model's factor, never refined;
    from float32 products it was 1e-8 off the float64 singular vectors).

    ALS updates mode 0 first from the other factors alone, so its start is never read: it is left zero (no
    work, and no Gram of the slab mode of an out-of-core tensor), unless ``first`` (mode 0 is fixed)."""
    X = call.X
    xp = X.xp
    factors = [xp.zeros((X.shape[0], rank), dtype=X.dtype)]
    for n in range(0 if first else 1, X.ndim):
        k = min(rank, X.shape[n])
        # (the first from the Gram made on entry; each from float32 products where that applies: a start)
        U, _ = call.leading_subspace(X, n, k, rng, rough=n not in fixed)
        if rank > k:
            U = xp.concatenate([U, call.like(rng.standard_normal((X.shape[n], rank - k)), U.dtype)], axis=1)
        U = xp.ascontiguousarray(U.astype(X.dtype, copy=False))
        if n == 0:
            factors[0] = U
        else:
            factors.append(U)
    return factors


def cp_als(
    X: Any,
    rank: int,
    *,
    init: Any = "auto",
    tol: float = 1e-5,
    max_iter: int = 200,
    random_state: Any = None,
    normalize: bool = True,
    fixed_modes: Sequence[int] = (),
    linesearch: bool = True,
    orthogonalize: int = 0,
    callback: Callable[[IterationState], bool | None] | None = None,
    verbose: bool = False,
    memory_limit: Any = None,
    device: Any = None,
    mask: Any = None,
) -> CPTensor:
    """CP decomposition ``X ~ sum_r w_r a_r o b_r o c_r`` (any order) by alternating least squares.

    Each factor update solves ``U_n (hadamard of the other Grams) = MTTKRP_n`` (Cholesky, least squares
    when the system is singular). The MTTKRPs of one sweep share partial contractions (a dimension tree
    on the engine: two full passes over ``X`` per iteration, no unfolding, no Khatri-Rao product with as
    many rows as the unfolding has columns). The fit comes from the last MTTKRP and the Grams:
    ``||X - X_hat||^2 = ||X||^2 - 2 <X, X_hat> + ||X_hat||^2``.

    Parameters
    ----------
    X : array, shape (I_0, ..., I_{N-1})
        float32 and float64 (dense, sparse, out of core); complex64 and complex128 for a dense array in memory,
        with TensorLy's conventions: the model stays multilinear (no conjugate), the MTTKRP contracts with the
        conjugated factors, the normal equations use ``U^T conj(U)``, the weights are real and the fit uses
        ``|x|^2``.
    rank : int
        Number of components (may exceed the mode sizes).
    init : {"auto", "svd", "random"}, a CP model, or the factor matrices; default "auto"
        ``"auto"``: ``"svd"`` (leading left singular vectors of each unfolding) for a dense tensor, ``"random"``
        (uniform [0, 1) entries) for a sparse one, as SPLATT and pyttb start: the SVD of a sparse unfolding
        (ARPACK) took 15 of the 19 seconds of a whole 3-way run, the random start converges as well; with
        ``random_state=None`` that random start uses a fixed seed, so a default call repeats its bits.
        On a float64 numpy array the SVD start's Grams (every mode but the first, which ALS updates before
        reading it) are formed from float32 products (:func:`~tuckerkit.engine._gram.start_gram`; ``||X||``,
        from the first of them, and every later step stay float64): the iterations remove the difference.
        Measured (planted rank-10 tensors at 1 % noise, interleaved medians of 9): 200^3 the whole default
        call 236 -> 197 ms, 320x240x160 433 -> 405 ms, 60^4 229 -> 218 ms, each with the same iterations and
        the fit within 3e-14; a magnitude outside float32's range takes the exact Grams.
        A model: a :class:`CPTensor`, TensorLy's ``CPTensor`` or a pyttb ``ktensor`` of the tensor's shape
        and ``rank``. Factors: a list or tuple of one ``(I_n, rank)`` matrix per mode, or a
        ``(weights, factors)`` pair (``weights`` may be None); the weights scale the first factor.
    tol : float, default 1e-5
        The convergence tolerance (TensorLy's and scikit-learn's ``tol``; pyttb's ``stoptol``): stop when
        the fit changes by less than ``tol``, or (``tol > 0``) when it decreases, which in exact arithmetic
        it never does (rounding noise, float32; in single precision only a decrease within the fits' rounding
        stops: beyond it the solve stepped back for real, near an exact fit with collinear components, and the
        run goes on). ``tol=0`` runs exactly ``max_iter`` iterations. The
        default is SPLATT's rule: CP-ALS creeps (its fit still changes by 1e-6 after hundreds of iterations
        on real data), so the 1e-8 of HOOI never stopped it. Measured with ``max_iter=500`` and plain ALS:
        the Indian Pines cube (rank 10) stops at 72 iterations within 7e-4 of the 500-iteration fit, the
        faces (rank 10) at 89 within 1e-3, a planted rank-10 tensor at 6; pyttb's 1e-4 stopped at 14 and 20
        with fits 2-4x further off. With the default line search: 31 and 39 iterations, same fits.
    max_iter : int, default 200
    random_state : None, int or numpy Generator
        The seed of a random start, and of the columns that pad the SVD start where ``rank`` exceeds a mode's
        size. None: a fixed seed (0), so a default call repeats its bits, except with ``init="random"``
        asked for, which then starts from fresh entropy.
    normalize : bool, default True
        Keep unit-norm factor columns, scale in ``weights``.
    fixed_modes : sequence of int, default ()
        Modes whose factor matrix stays as initialized (TensorLy's ``fixed_modes``; any mode, the last
        included). Give their factors through ``init``; weights given with ``init`` then scale the first
        mode that is not fixed, so a fixed factor is returned exactly as given (in ``X``'s dtype: a float64
        factor for float32 data comes back rounded to float32, as the computation uses it).
    linesearch : bool, default True
        Extrapolate the factors every second iteration after the fourth, ``F_prev + j (F - F_prev)`` with
        ``j = iteration ** (1 / p)`` (Bro's acceleration, as TensorLy's ``linesearch=True``), keeping the jump
        only when it improves the fit; ``p`` grows after four rejected jumps in a row. A jump costs one
        MTTKRP (about half an iteration); the fit stays monotone. The default because it wins where it was
        measured: with the default stop the Indian Pines cube (rank 10) takes 31 iterations instead of 72
        (0.70 s instead of 1.45 s, the same fit), the faces 39 instead of 89, and where ALS crawls (nearly
        collinear components) a third to a quarter of the iterations (``benchmarks/compat.py``).
        ``linesearch=False`` is plain ALS, iteration for iteration the algorithm of pyttb's ``cp_als`` and
        TensorLy's default ``parafac``. With ``mask=`` a jump is judged on the observed entries (see ``mask``).
    orthogonalize : int, default 0
        Replace each factor with at least as many rows as ``rank`` by the Q of its QR factorization before
        each of the first ``orthogonalize`` iterations (TensorLy's ``orthogonalise``): a start that avoids
        degenerate, nearly collinear components; the fit is not monotone during those iterations.
    callback : callable, optional
        ``callback(state)`` after each iteration; returning True stops.
    verbose : bool, default False
        Print one line per iteration (fit, change, seconds) and a last line saying why it stopped on
        standard error, as scikit-learn's ``verbose`` does; never changes the computation (the lines also
        go to the ``tuckerkit.decomposition`` logger at DEBUG level).
    memory_limit : int or str, optional
        Bytes (or ``"4GB"``) the computation may hold. A dense tensor larger than that (typically a
        memory-mapped ``.npy``) is read in slabs along mode 0: two streamed passes per iteration (the
        dimension tree's halves), the next slab read while the current one is contracted. A Dask array runs
        one distributed pass per mode on the active scheduler.
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where to compute; None: where ``X`` lives. A host input (dense, or a COOTensor/CSFTensor, whose
        nonzeros go to the GPU as COO with an atomics MTTKRP kernel) is copied once; the result comes back
        as numpy arrays. On a GPU the Grams, solves and MTTKRPs stay on the device; the fit is the one
        value copied back per iteration.
    mask : boolean array of X's shape, optional
        Missing data: True where ``X`` is observed (other entries may hold anything, NaN included). Fitted by
        EM imputation (the missing entries take the model's values before each ALS sweep; the observed-entry
        error never increases); ``fit`` is then the fit on the observed entries. Needs a dense ``X``; combines
        with ``fixed_modes`` and ``orthogonalize`` (the same iterations) and with the line search, whose jumps
        are then judged by the observed entries' fit (one pass over X, leaving it as it is; an accepted jump
        refills the missing entries). Measured (planted CP tensors 100^3, 200x150x100, 60^4; default stop;
        two rounds): at 80 % missing 15-19 iterations instead of 28-39 (0.62-0.83x the time, the same or a
        higher fit), at 50 % 10-13 instead of 12-14 (0.92-1.24x the time: each jump is a pass more), at 30 %
        the same iterations (0.9-1.08x); ``linesearch=False`` follows TensorLy's masked ``parafac`` iteration
        for iteration.

    Returns
    -------
    CPTensor
        An all-zero ``X`` (dense or sparse) gives the zero model, exactly: zero factors (fixed ones as given),
        zero weights with ``normalize``, ``fit`` 1.0 (as HOOI and ``non_negative_cp`` report on zeros).

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> A, B, C = (rng.standard_normal((n, 2)) for n in (8, 9, 10))
    >>> X = np.einsum("ir,jr,kr->ijk", A, B, C)
    >>> round(tk.cp_als(X, 2, random_state=0, tol=1e-10).fit, 6)
    1.0
    """
    if mask is not None:  # missing data: the same iterations with an E step after each sweep (_missing.py)
        from tuckerkit.decomposition._missing import masked_cp_als

        return masked_cp_als(X, rank, mask, init=init, tol=tol, max_iter=max_iter, random_state=random_state,
                             normalize=normalize, callback=callback, verbose=verbose, memory_limit=memory_limit,
                             device=device, extras=Extras(fixed_modes, linesearch, orthogonalize))
    with decomposition_call(X, device=device, memory_limit=memory_limit, complex_ok=True,
                            first_gram=_entry_gram(rank, init, fixed_modes),
                            rough_first_gram=_rough_entry(fixed_modes)) as call:
        return call.result(_cp_als(call, rank, init, tol, max_iter, random_state, normalize, callback, verbose,
                                   Extras(fixed_modes, linesearch, orthogonalize)))


def _entry_gram(rank: Any, init: Any, fixed_modes: Any) -> Callable[[Any], int | None]:
    """``decomposition_call``'s ``first_gram`` for the SVD start of a dense tensor in memory: the first mode it
    takes a Gram of (1, or 0 when mode 0 is fixed), when its route is that Gram; else None (invalid arguments
    too: the body raises on them as always)."""
    def mode(op: Any) -> int | None:
        if not (isinstance(init, str) and init in ("auto", "svd")) or op.streamed:
            return None
        try:
            fixed = check_fixed_modes(fixed_modes, op.ndim)
            n = 0 if 0 in fixed else 1
            k = min(check_cp_rank(rank), op.shape[n]) if n < op.ndim else 0
        except (TypeError, ValueError):
            return None
        return n if k > 0 and gram_route(op.shape, n, k) else None

    return mode


def _rough_entry(fixed_modes: Any) -> Callable[[Any, int], bool]:
    """``decomposition_call``'s ``rough_first_gram``: the Gram made on entry may come from float32 products unless
    its mode is fixed (a fixed mode's SVD start is its final factor, never refined: from float32 products it was
    1e-8 off the float64 singular vectors)."""
    def rough(op: Any, mode: int) -> bool:
        try:
            return mode not in check_fixed_modes(fixed_modes, op.ndim)
        except (TypeError, ValueError):
            return True

    return rough


@dataclass(frozen=True)
class Extras:
    """The options beyond plain ALS, validated by :func:`_cp_als`; ``em``: missing data, the E step run after
    each sweep (:class:`~tuckerkit.decomposition._missing.EStep`: it refills the missing entries of the
    operand's array with the model's values and gives the fit on the observed entries)."""

    fixed_modes: Any = ()
    linesearch: Any = False
    orthogonalize: Any = 0
    em: Any = None


def _check_orthogonalize(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.integer) or value < 0:
        raise ValueError(f"orthogonalize={describe(value)} is not valid; expected the number of iterations (an int "
                         ">= 0) before which the factors are orthonormalized")
    return int(value)


def _cp_als(call: Call, rank: Any, init: Any, tol: Any, max_iter: Any, random_state: Any, normalize: bool,
            callback: Any, verbose: bool, extras: Extras = Extras()) -> CPTensor:
    X, policy = call.X, call.policy
    rank = check_cp_rank(rank)
    normalize = check_bool(normalize, "normalize")
    fixed = check_fixed_modes(extras.fixed_modes, X.ndim)
    linesearch = check_bool(extras.linesearch, "linesearch")
    orthogonalize = _check_orthogonalize(extras.orthogonalize)
    _check_rank_fits(X, rank)
    tol = check_nonneg(tol, "tol")
    max_iter = check_max_iter(max_iter)
    # (None: seed 0, so that a default call repeats its bits, the SVD start's padding columns included; and no
    # Generator from fresh OS entropy, 50 us, for a start that draws nothing)
    rng = check_random_state(0 if random_state is None else random_state)
    check_callback(callback)
    N = X.ndim
    # (mode 0's start is replaced before it is read unless it is fixed)
    init = check_init(init, X.shape, rank, kind="cp", methods=("auto", "svd", "random"), dtype=X.dtype,
                      nonzero_from=0 if 0 in fixed else 1)
    if init == "auto":  # SVD starts for dense tensors; random ones for sparse, as SPLATT and pyttb start
        init = "random" if X.stored_entries < X.size else "svd"  # sparse operands store their nonzeros only
    elif init == "random" and random_state is None:
        rng = check_random_state(None)  # init="random" asked for: a start from fresh entropy
    xp = X.xp
    cplx = X.dtype.kind == "c"
    wdt = real_dtype(X.dtype)  # CP weights are real (column norms), complex tensors included
    em = extras.em
    # a real tensor on a GPU keeps the R x R state (the factors' Grams, the weights) on the host: the update's
    # solve runs there anyway (cuSOLVER is latency-bound at R x R), so V needs no copy down, the new factor's
    # Gram (one small copy down) gives its column norms, and the fit is host arithmetic; the device runs two
    # GEMMs and one scaling per factor (see _GpuSmallState)
    small = _GpuSmallState(xp, X.dtype, rank) if xp is not np and not cplx and em is None else None
    sxp = np if small is not None else xp  # the namespace of the Grams and the weights
    weights = sxp.ones(rank, dtype=wdt)
    free = [n for n in range(N) if n not in fixed]
    if not isinstance(init, str):
        weights0, given = init
        factors = [call.like(U).astype(X.dtype).copy() for U in given]
        # the weights (and the operand's power-of-two scale, exact) go to the first free mode, so that a fixed
        # factor stays exactly as given; with every mode fixed they stay weights
        if weights0 is not None and np.dtype(weights0.dtype).kind == "c" and not cplx:
            raise TypeError(f"init's weights have complex dtype {weights0.dtype}; expected real weights for a real "
                            f"X ({X.dtype})")
        scale = call.like(weights0).astype(X.dtype) if weights0 is not None else None
        if call.scale != 1.0:
            # (ones on the factors' device: the weights may live on the host, see _GpuSmallState)
            scale = (scale if scale is not None else xp.ones(rank, dtype=X.dtype)) * X.dtype.type(call.scale)
        if scale is not None:
            if free:
                factors[free[0]] = factors[free[0]] * scale[None, :]
            elif cplx and bool(xp.any(scale.imag != 0)):
                raise ValueError("init's weights have nonzero imaginary parts and every mode is fixed; expected "
                                 "real weights (or a mode left free to take their phases)")
            else:
                weights = scale.real.astype(wdt) if cplx else scale
                if small is not None:
                    weights = to_host(weights)
        if em is None:  # (with the E step the start's model fills the missing entries: its scale counts)
            factors = scaled_start(factors, keep=fixed)
    else:
        factors = _svd_init(call, rank, rng, first=0 in fixed, fixed=frozenset(fixed)) if init == "svd" else [
            call.like(rng.random((X.shape[n], rank))) for n in range(N)
        ]
    if em is not None and not isinstance(init, str):  # the start's values at the missing entries
        em.fill_start(CPModel(weights, factors))
        # (then its factors' scale no longer counts: 1e-100-sized ones underflowed the Grams to a zero model)
        factors = scaled_start(factors, keep=fixed)
    # with complex factors the model stays multilinear (no conjugate, as TensorLy's): the MTTKRP contracts
    # with the conjugated factors, X_(n) conj(KR), and the Grams are U^T conj(U), so that U_n V = M_n is
    # the least-squares update (V = K^T conj(K), Hermitian positive definite)
    conj = [U.conj() for U in factors] if cplx else factors
    grams = small.grams(factors) if small is not None else [_gram(U) for U in factors]
    normX = call.norm
    mon = Monitor("cp_als" if em is None else "cp_als(mask)", tol, max_iter, callback, verbose)
    it = 0
    last: dict[str, Any] = {}
    # real dtypes on the host: the compiled Cholesky row solve (_cp_kernels) writing into buffers kept for the
    # call (engine._buffers.pooled: a factor is rewritten in place unless something else holds it)
    fused = xp is np and not cplx
    buffers: dict = {}
    # ... and up to the fused update's rank, each step is one compiled call (cp_sweep_update: V, the solve, the
    # new factor's Gram and the fit's inner products) over the Grams kept in one N x R x R array, ``grams``
    # its views, and the fit another (cp_fit_error)
    stack = None
    if fused and sweep_fits(rank, X.dtype):
        stack = np.empty((N, rank, rank), dtype=X.dtype)
        for m, G in enumerate(grams):
            stack[m] = G
        grams = list(stack)

    # a small dense tensor's sweeps: four or five calls each (_small_cp.py), the same update where V is not definite;
    # with fixed modes its MTTKRPs alone, each handed to ``update`` (missing data too: the E step refills the
    # operand's array in place, which the sweep reads through its views)
    csmall = _small_cp_sweep(X, rank) if stack is not None else None
    # a dense tensor's 3-way sweeps may leave a partial for the next (the multi-sweep dimension tree:
    # engine/_sweeps.py, multi_sweep_applies); not with missing data, whose E step rewrites X between sweeps
    carry = CarriedPartial() if em is None and csmall is None and carries_partials(X) else None
    passes = 0
    reads0 = call.residual_reads  # (those of the start are not an iteration's)

    def set_gram(n: int, G: Any) -> None:
        if stack is not None:
            stack[n] = G
        else:
            grams[n] = G

    def update(n: int, M: Any) -> None:
        nonlocal weights
        last["M"], last["n"], last["inner"] = M, n, None
        if n in fixed:
            return
        if stack is not None:  # one compiled call (where V is not definite: the least squares below)
            factors[n] = None  # (a small factor is a fresh array: cheaper than the pool's bookkeeping)
            U = (np.empty((X.shape[n], rank), X.dtype) if X.shape[n] * rank <= _FRESH_MAX
                 else pooled(buffers, n, (X.shape[n], rank), X.dtype))
            norms, last["inner"] = cp_sweep_update(stack, n, M, U, normalize, want_inner=n == N - 1,
                                                   policy=call.policy)
            if norms is not False:
                if normalize:
                    weights = norms.astype(wdt)
                factors[n] = U
                return
        V = sxp.ones((rank, rank), dtype=X.dtype)
        for m in range(N):
            if m != n:
                V *= grams[m]
        if small is not None:
            factors[n], grams[n], norms, last["inner"] = small.update(V, M, n, normalize, want_inner=n == N - 1)
            if normalize:
                weights = norms.astype(wdt)
            return
        if fused and stack is None:  # the compiled solve into a reused buffer (never a factor held elsewhere)
            factors[n] = None  # the factor being replaced is not read: its buffer is free unless held elsewhere
            U = pooled(buffers, n, (X.shape[n], rank), X.dtype)
            norms = cp_factor_update(V, M, U, normalize)
            if norms is not False:
                if normalize:
                    weights = norms.astype(wdt)
                factors[n] = U
                grams[n] = _gram(U)
                return
        U = spd_solve(V, M.astype(X.dtype, copy=False))
        if normalize:
            norms = xp.linalg.norm(U, axis=0)
            norms = xp.where(norms == 0, 1, norms).astype(wdt)
            U = U / norms[None, :]
            weights = norms
        factors[n] = xp.ascontiguousarray(U.astype(X.dtype, copy=False))
        if cplx:
            conj[n] = factors[n].conj()
        set_gram(n, _gram(factors[n]))

    sweep = None
    jumps = _Jumps()
    jump_kept = [False]  # (whether the last jump's fit kept its pass in ``carry``)
    chosen: list[int] = []

    def jump_mode() -> int:  # (chosen at the first jump tried)
        if not chosen:
            chosen.append(_jump_fit_mode(X, N, rank, policy))
        return chosen[0]
    for it in range(1, max_iter + 1):
        if it <= orthogonalize:
            if carry is not None:  # (the factors change outside the sweep)
                carry.drop()
            for n in free:
                if X.shape[n] >= rank:
                    factors[n] = xp.ascontiguousarray(xp.linalg.qr(factors[n])[0].astype(X.dtype, copy=False))
                    set_gram(n, small.grams([factors[n]])[0] if small is not None else _gram(factors[n]))
                    if cplx:
                        conj[n] = factors[n].conj()
        if not normalize and free:
            weights = sxp.ones(rank, dtype=wdt)
        trying = linesearch and free and it > 4 and it % 2 == 0
        refined = False  # (the jump judged by the residuals' fits: ``fit`` is already the residual's)
        if trying:
            before = [U.copy() for U in factors], weights.copy()
        if csmall is not None and not fixed:
            norms = csmall.sweep(factors, stack, normalize, update, last)
            if norms is not None and normalize:
                weights = norms.astype(wdt)
            sweep = csmall.record
        elif csmall is not None:
            sweep = csmall.mttkrp_sweep(factors, update)
        elif carry is not None:
            sweep = X.mttkrp_sweep(conj, update, policy=policy, carry=carry)
        else:
            sweep = X.mttkrp_sweep(conj, update, policy=policy)
        passes += sweep.passes
        if small is not None:
            inner = last["inner"]
            if inner is None:  # the sweep's last update was not mode N - 1's, or that mode is fixed
                inner = small.inner(last["M"], factors[last["n"]])
            fit = _fit_from_inner(np, normX, inner, weights, grams)
        elif stack is not None and em is None:
            inner = last["inner"]
            if inner is None:  # as above
                inner = _inner_columns(np, last["M"], factors[last["n"]])
            fit = _fit_of_error(normX, cp_fit_error(inner, weights, _fit_grams(factors, stack, weights, normX),
                                                    normX))
        elif em is None:
            fit = _cp_fit(xp, normX, last["M"], factors[last["n"]], weights,
                          _fit_grams(factors, grams, weights, normX))
        else:  # the E step: the fit on the observed entries, then the missing ones refilled for the next sweep
            fit = em.step(CPModel(weights, factors))
        if trying:
            def fit_of(F: list[Any], w: Any, G: list[Any]) -> float:
                if em is not None:  # missing data: the jumped model on the observed entries, X left as it is
                    return em.observed_fit(CPModel(w, F))
                if csmall is not None:  # (one product with X and a compiled sum: <X, X_hat> from the first half's
                    # partial, the sweep's from the last mode's MTTKRP: the same value to rounding)
                    return _fit_of_error(normX, cp_fit_error(csmall.inner_of(F), w, _fit_grams(F, G, w, normX), normX))
                Fc = [U.conj() for U in F] if cplx else F
                # (the multi-sweep tree's first pass on the jumped factors, kept for the next sweep: a jump kept
                # saves that sweep's pass, engine._sweeps.kept_first_mttkrp)
                M = X.kept_first_mttkrp(Fc, carry, policy=policy) if carry is not None and not cplx else None
                n = 0
                jump_kept[0] = M is not None
                if M is None:
                    n = jump_mode()
                    M = operand_mttkrp(X, Fc, n, policy)  # (a small tensor's: numpy directly)
                if small is not None:
                    return _fit_from_inner(np, normX, small.inner(M, F[n]), w, G)
                if stack is not None:  # (the sweep's fit's own arithmetic: a jump is kept when it is better)
                    inner = _inner_columns(np, M, F[n])
                    return _fit_of_error(normX, cp_fit_error(inner, w, _fit_grams(F, G, w, normX), normX))
                return _cp_fit(xp, normX, M, F[n], w, _fit_grams(F, G, w, normX))

            refined = em is None and call.refines_fit(fit)
            if refined:  # (near 1 both fits from the Grams are rounding: float32 kept jumps that raised the error
                # from 1.22e-4 to 1.79e-4 and then stopped as converged; the residuals' fits judge the jump there)
                fit = call.residual_fit(CPResidual(xp, weights, factors))

                def fit_of(F: list[Any], w: Any, G: list[Any]) -> float:
                    jump_kept[0] = False
                    return call.residual_fit(CPResidual(xp, w, F))

            if not refined:  # (the jumped model's fit reads X once more; the residual's are counted by the call)
                passes += 1
            jumped = jumps.attempt(it, before, factors, weights, fixed, normalize, fit, fit_of,
                                   renorm=small.renorm if small is not None else
                                   csmall.renorm if csmall is not None else None)
            if jumped is not None:
                factors[:], weights, G, fit = jumped
                if carry is not None and not jump_kept[0]:  # (the kept partial holds a factor the jump replaced;
                    # the jump's own pass, kept, holds the jumped one)
                    carry.drop()
                for n, Gn in enumerate(G):
                    set_gram(n, Gn)
                if em is not None:  # the missing entries take the jumped model's values for the next sweep
                    em.fill(CPModel(weights, factors))
                if cplx:
                    conj[:] = [U.conj() for U in factors]
        if em is None and not refined and call.refines_fit(fit):  # (near 1 the fit from the Grams is rounding:
            # float32's noise "decreased" and stopped planted 30^3 tensors as converged at errors 8e-4 - 1.7e-3 where
            # float64 reaches 1e-4; the residual's, in float64, one more read of X in that regime only, steers the stop)
            fit = call.residual_fit(CPResidual(xp, weights, factors))
            refined = True
        # in single precision a decrease beyond the fits' rounding is no noise but a real step back of the solve near
        # an exact fit (collinear components: 0.99929 -> 0.99830, then 0.99931 -> 0.99333, each stopped as
        # converged at errors of 1.7e-3 and 6.7e-3 where the run goes on to 8.5e-6): a stop only within that
        # rounding (none for the residual's fit; from the Grams about 3 eps / (2 error)); the change below tol
        # still stops, and double precision keeps its rule
        noise = math.inf
        if X.dtype.char in "fF":
            noise = 0.0 if refined else 3.0 * float(np.finfo(X.dtype).eps) / (2.0 * max(1.0 - fit, 1e-30))
        shown = xp.asarray(weights) if small is not None and callback is not None else weights
        if mon.step(it, fit, factors, weights=shown, may_decrease=it <= orthogonalize, noise=noise):
            break
    passes += call.residual_reads - reads0  # (the residual fits that steered the iterations: a read of X each)
    if small is not None:
        weights = xp.asarray(weights)
    # (single precision near an exact fit: the last fit is the residual's; not on the observed entries)
    history = call.with_residual_fit(mon.history, lambda: CPResidual(xp, weights, factors)) if em is None \
        else tuple(mon.history)
    mon.finish(history[-1] if history else None)  # (the closing line with the fit the result reports)
    release = getattr(X, "release_work_buffers", None)
    if release is not None:  # a sparse tensor's MTTKRP buffers, kept across the iterations, go with the call
        release()
    if normX <= 0 and normalize and free and em is None:  # all-zero X: its free factors are zero, the weights too
        weights = xp.zeros_like(weights)
    if normalize or not free:
        weights = call.unscale(weights)
    else:
        weights = xp.ones(rank, dtype=wdt)
        factors[free[0]] = call.unscale(factors[free[0]])
    return CPTensor(weights, tuple(factors), it, mon.converged, history,
                    sweep.plans if sweep is not None else (), passes_per_iteration=mean_passes(passes, it))


def _small_cp_sweep(X: Any, rank: int) -> Any:
    """The compiled sweep's set-up (:class:`~tuckerkit.decomposition._small_cp.SmallCPSweep`) where CP-ALS's (or
    non-negative CP's) sweeps of ``X`` take it: a dense host tensor on the direct route
    (``engine._direct.direct_applies``), or past it within ``_small_cp.beyond_direct``, and within
    :func:`~tuckerkit.decomposition._small_cp.small_cp_applies`; else None. (The caller checks the rest: CP-ALS a
    real dtype and a rank within the fused update.)"""
    from tuckerkit.engine import DenseTensor

    if not _SMALL_SWEEPS or not isinstance(X, DenseTensor) or type(X.data) not in (np.ndarray, np.memmap):
        return None
    from tuckerkit.decomposition._small_cp import SmallCPSweep, beyond_direct, small_cp_applies
    from tuckerkit.engine._direct import direct_applies

    data = X.data
    return SmallCPSweep(data, rank) if small_cp_applies(data, rank) and (
        direct_applies(data, rank) or beyond_direct(data, rank)) else None


#: whether CP-ALS takes the compiled sweep of small tensors where it applies (:func:`_small_cp_sweep`; tests turn
#: it off to compare with the direct route)
_SMALL_SWEEPS = True


class _Jumps:
    """Bro's extrapolation for ALS: ``F_prev + j (F - F_prev)``, ``j = iteration ** (1 / p)``, kept only when it
    improves the fit; ``p`` grows by one after four rejections in a row (a gentler jump)."""

    def __init__(self) -> None:
        self.power, self.failures = 2.0, 0

    def attempt(self, it: int, before: tuple[list[Any], Any], factors: list[Any], weights: Any,
                fixed: frozenset[int], normalize: bool, fit: float, fit_of: Callable,
                renorm: Callable | None = None) -> tuple | None:
        """``renorm(F, w, fixed, normalize) -> (F, w, G)``: the jumped model's unit columns and Grams another
        way (a GPU's: :meth:`_GpuSmallState.renorm`); by default here, on the factors' device."""
        prev, w_prev = before
        jump = it ** (1.0 / self.power)
        F = [U if n in fixed else P + (U - P) * U.dtype.type(jump)
             for n, (P, U) in enumerate(zip(prev, factors, strict=True))]
        w = w_prev + (weights - w_prev) * weights.dtype.type(jump) if normalize else weights
        if renorm is not None:
            F, w, G = renorm(F, w, fixed, normalize)
        else:
            if normalize:  # unit columns again, their norms into the weights: the same model
                for n in range(len(F)):
                    if n not in fixed:
                        norms = (F[n] * F[n].conj()).real.sum(axis=0) ** 0.5
                        norms = norms + (norms == 0)
                        F[n], w = F[n] / norms[None, :], w * norms
            G = [_gram(U) for U in F]
        new_fit = fit_of(F, w, G)
        if new_fit > fit:
            self.failures = 0
            return F, w, G, new_fit
        self.failures += 1
        if self.failures == 4:
            self.power, self.failures = self.power + 1.0, 0
        return None


class _GpuSmallState:
    """CP-ALS's R x R state on the host for a real tensor on a GPU: the factors' Grams and the weights are host
    arrays, and each factor update is, on the device, ``U = M V^-1`` and ``G = U^T U`` (two GEMMs), one copy
    of ``G`` down (with the fit's ``<M[:, r], U[:, r]>`` for the sweep's last mode), and the columns scaled by
    the norms on ``G``'s diagonal (one elementwise kernel). ``V`` is the Hadamard product of host Grams and is
    inverted by the host's LAPACK (:func:`spd_inverse`), so nothing waits for the device but that one copy.

    Why: the device path is bound by the host's launches at these sizes (an H200 profile: ~20 small cupy
    calls per factor update, ~15 per fit; CP-ALS on 200^3 at 0.5-0.8x TensorLy's cupy backend). Here each
    update launches 5 (the factor's Gram is scaled on the host, where its diagonal gives the norms)."""

    def __init__(self, xp: Any, dtype: Any, rank: int) -> None:
        self.xp, self.dtype, self.rank = xp, np.dtype(dtype), rank

    def grams(self, factors: Sequence[Any]) -> list[Any]:
        """The factors' Grams on the host: one copy down for all of them."""
        G = to_host(self.xp.stack([_gram(U) for U in factors]))
        return [g.astype(self.dtype, copy=False) for g in G]

    def inner(self, M: Any, U: Any) -> Any:
        """``<M[:, r], U[:, r]>`` in float64, on the host."""
        return to_host(_inner_columns(self.xp, M, U))

    def update(self, V: Any, M: Any, n: int, normalize: bool, want_inner: bool) -> tuple[Any, Any, Any, Any]:
        """``(U, G, norms, inner)``: the new factor (device, unit columns with ``normalize``), its Gram (host),
        the column norms (host float64; None without ``normalize``) and, with ``want_inner``, the fit's inner
        products with the new factor (host float64; else None)."""
        xp, dt, R = self.xp, self.dtype, self.rank
        U = M.astype(dt, copy=False) @ xp.asarray(spd_inverse(V))
        G = _gram(U).ravel()
        # with the inner products: one copy of both, the Gram widened to float64 (exactly)
        got = to_host(xp.concatenate([G.astype(xp.float64, copy=False), _inner_columns(xp, M, U)])
                      if want_inner else G)
        G = got[:R * R].reshape(R, R)
        inner = got[R * R:].astype(np.float64) if want_inner else None
        if not normalize:
            return U, G.astype(dt, copy=False), None, inner
        norms = np.sqrt(np.diagonal(G).astype(np.float64))
        norms[norms == 0] = 1.0
        U /= xp.asarray(norms.astype(dt))[None, :]
        G = (G / np.outer(norms, norms)).astype(dt)
        return U, G, norms, (inner / norms if inner is not None else None)

    def renorm(self, F: list[Any], w: Any, fixed: frozenset[int], normalize: bool) -> tuple[list[Any], Any, list]:
        """A jumped model's unit columns (their norms into ``w``) and Grams, from one copy of the Grams down."""
        G = self.grams(F)
        if normalize:
            for n in range(len(F)):
                if n not in fixed:
                    norms = np.sqrt(np.diagonal(G[n]).astype(np.float64))
                    norms[norms == 0] = 1.0
                    F[n] /= self.xp.asarray(norms.astype(self.dtype))[None, :]
                    w = (w * norms).astype(w.dtype)
                    G[n] = (G[n] / np.outer(norms, norms)).astype(self.dtype)
        return F, w, G


def _inner_columns(xp: Any, M: Any, U: Any) -> Any:
    """``sum_i M[i, r] U[i, r]`` for each r, in float64 (the products exact for float32 data)."""
    return xp.sum(M.astype(xp.float64, copy=False) * U.astype(xp.float64, copy=False), axis=0)


def _cp_full(weights: Any, factors: Sequence[Any]) -> Any:
    """The dense model ``sum_r w_r a_r o b_r o ...`` (EM imputation's reconstruction), one GEMM."""
    from tuckerkit.engine import khatri_rao

    first = factors[0] * weights[None, :]
    rest = khatri_rao(list(factors[1:]))
    shape = tuple(int(U.shape[0]) for U in factors)
    return (first @ rest.T).reshape(shape)


def _gram(U: Any) -> Any:
    """``U^T conj(U)`` (``U^T U`` for real U): the factor's piece of the ALS normal equations."""
    return U.T @ U.conj() if U.dtype.kind == "c" else U.T @ U


class CPResidual(ResidualModel):
    """``sum_r w_r a_r o b_r o ...`` as :meth:`~tuckerkit.decomposition._entry.Call.residual_fit` takes a model
    (:class:`~tuckerkit.decomposition._entry.ResidualModel`: ``lead`` is the weights)."""

    def rest(self, m: int, order: Sequence[int], lo: int, hi: int) -> Any:
        """The weighted Khatri-Rao product of the factors but ``m``'s in ``order`` (``order[0]``'s rows
        ``lo:hi``), as ``R x C``: built in that layout, each factor's transpose (a copy: unit stride) broadcast into
        the next axis."""
        w, Fs = self._of(np.dtype(np.float64))
        Y = w[:, None]
        for j, k in enumerate(order):
            F = Fs[k][lo:hi] if j == 0 else Fs[k]
            Y = (Y[:, :, None] * np.ascontiguousarray(F.T)[:, None, :]).reshape(w.shape[0], -1)
        return Y

    def at(self, coords: np.ndarray) -> np.ndarray:
        w, Fs = self._of(np.dtype(np.float64))
        P = w[None, :] * Fs[0][coords[:, 0]]
        for k in range(1, len(Fs)):
            P *= Fs[k][coords[:, k]]
        return P.sum(axis=1)

    def point_width(self) -> int:
        return int(self.factors[0].shape[1])

    def norm_sq(self) -> float:
        w, Fs = self._of(np.dtype(np.float64))
        V = np.ones((w.shape[0], w.shape[0]))
        for F in Fs:
            V *= F.T @ F
        return float(w @ V @ w)

    def values(self, idx: tuple[slice, ...], dtype: Any) -> Any:
        """The values on ``X[idx]``: the modes' rows multiplied in as a growing Khatri-Rao product, the longest
        of the range's modes last as one GEMM (the product held: the range's elements over that mode's length
        times the rank)."""
        xp = self.xp
        w, Fs = self._of(dtype)
        parts = [F[idx[k]] for k, F in enumerate(Fs)]
        N = len(parts)
        last = max(range(N), key=lambda k: (parts[k].shape[0], -k))
        order = [k for k in range(N) if k != last]
        M = parts[order[0]] * w[None, :] if order else w[None, :]
        for k in order[1:]:
            M = (M[:, None, :] * parts[k][None, :, :]).reshape(-1, w.shape[0])
        out = (M @ parts[last].T).reshape([parts[k].shape[0] for k in order] + [parts[last].shape[0]])
        return xp.moveaxis(out, -1, last)


def _cp_fit(xp: Any, normX: float, M: Any, U: Any, weights: Any, grams: list[Any]) -> float:
    """The fit from the last MTTKRP ``M`` of mode ``n`` and the Grams, in units of ``||X||`` (no square of the
    data's scale): ``||X - X_hat||^2 = ||X||^2 - 2 <X, X_hat> + ||X_hat||^2`` with ``<X, X_hat> = sum_r w_r
    <M[:, r], U_n[:, r]>`` and ``||X_hat||^2 = w^T (hadamard of the Grams) w``; combined on the device so
    that one scalar comes back per iteration."""
    if normX <= 0:
        return 1.0
    if M.dtype.kind != "c":
        return _fit_from_inner(xp, normX, _inner_columns(xp, M, U), weights, grams)
    w = weights.astype(xp.float64) / normX  # complex: Re <X, X_hat> and w^T V w of the Hermitian V (real)
    inner = xp.sum(xp.sum((M.astype(xp.complex128) * U.conj()).real, axis=0) * w) / normX
    V = xp.ones((w.shape[0], w.shape[0]), dtype=xp.complex128)
    for G in grams:
        V = V * G
    err2 = float(1.0 - 2 * inner + (w @ V @ w).real)
    return 1.0 - math.sqrt(max(err2, 0.0))


def _fit_grams(factors: Sequence[Any], grams: Any, weights: Any, norm: float) -> Any:
    """The Grams the fit's ``||X_hat||^2 = w^T (hadamard of the Grams) w`` takes: for a float32 model on the host,
    the factors' Grams in float64 (one N x R x R array) where each factor is short (``I_n R (R + 1) / 2`` at most
    ``_GRAM64_LOOP_MAX``: :func:`._cp_kernels.gram64`, a few microseconds) or where the weights are large
    (``sum |w_r| > 4 sqrt(R) ||X||``, a degeneracy: BLAS on float64 copies of pieces of the rows); else
    ``grams`` (stacked where they are a list of host arrays: :func:`cp_fit_error`'s operand).

    Why: where components grow and cancel (a two-factor degeneracy, common in CP-ALS on real data), the
    weights reach 10^3-10^5 times ``||X||`` and ``||X_hat||^2`` cancels ``2 <X, X_hat>`` to a few digits; the
    float32 Grams' rounding (about eps times the squared weights over ``||X||^2``) then exceeded the error itself.
    Measured on a planted 6x7x5x8 float32 tensor from a start with two equal columns: the fit reported 1.0 where
    the model's is 0.567 (float32 Grams), 0.56719 with float64 ones. Without a degeneracy ``sum |w_r|`` stays
    within about ``sqrt(R) ||X||`` and the float32 Grams' rounding is about ``R eps`` of ``||X||^2``: a long
    factor (sparse tensors' modes of 10^5 rows; 200000 x 32 took 13 ms a factor in float64 pieces against float32
    SYRK's 6.6) keeps them then."""
    U0: Any = factors[0] if len(factors) else None
    if grams is not None and type(U0) in (np.ndarray, np.memmap) and U0.dtype == np.float32:  # (one kind a call)
        global _GRAM64
        if _GRAM64 is None:
            from tuckerkit.decomposition._cp_kernels import gram64

            _GRAM64 = gram64
        R = U0.shape[1]
        short = all(U.shape[0] * R * (R + 1) <= 2 * _GRAM64_LOOP_MAX for U in factors)
        if short or float(np.abs(weights).sum()) > 4 * math.sqrt(R) * norm:
            out = np.empty((len(factors), R, R))
            for n, U in enumerate(factors):
                if U.shape[0] * R * (R + 1) <= 2 * _GRAM64_LOOP_MAX:
                    _GRAM64(U if U.flags.c_contiguous else np.ascontiguousarray(U), out[n])
                    continue
                out[n] = 0.0  # (pieces of rows in float64, added in piece order)
                for i in range(0, U.shape[0], _GRAM64_ROWS):
                    P = U[i:i + _GRAM64_ROWS].astype(np.float64)
                    out[n] += P.T @ P
            return out
    if isinstance(grams, list) and grams and all(type(G) is np.ndarray for G in grams):
        return np.stack(grams)
    return grams


_GRAM64: Any = None  # (_cp_kernels.gram64, imported on first use)


def _jump_fit_mode(X: Any, N: int, rank: int, policy: Any) -> int:
    """The mode whose MTTKRP gives a line-search jump's fit (``<X, X_hat>`` is the same from any mode): a 3-way
    host tensor's outermost mode where its MTTKRP is one fused pass (:func:`tuckerkit.engine._mttkrp._fused_plan`:
    C order's first mode, F order's last), else the last. One MTTKRP (benchmarks/mttkrp.py, C order, the last
    mode now one fused pass too): 200^3 and 320x240x160, float64 R = 10-50 0.85-0.91x the last mode's time,
    float32 0.85-1.01x; a jump is tried every second iteration after the fourth. (Measured against the last
    mode's former two steps, the iteration with the default line search took 0.95-0.99x.)"""
    data = getattr(X, "data", None)
    if N == 3 and isinstance(data, np.ndarray) and type(data) in (np.ndarray, np.memmap):
        from tuckerkit.engine._mttkrp import _fused_plan

        outer = max(range(N), key=lambda n: abs(data.strides[n]))  # (its rows back to back: the cheapest pass)
        if _fused_plan(data, outer, rank, policy) is not None:
            return outer
    return N - 1


#: :func:`_fit_grams` makes a factor's float64 Gram in its compiled loop up to this many multiply-adds
#: (``I R (R + 1) / 2``), else with BLAS on float64 copies of ``_GRAM64_ROWS`` rows at a time
_GRAM64_LOOP_MAX = 1 << 16
_GRAM64_ROWS = 1 << 15


def _fit_of_error(normX: float, err2: float) -> float:
    """The fit ``1 - ||X - X_hat|| / ||X||`` from :func:`cp_fit_error`'s relative squared error."""
    return 1.0 if normX <= 0 else 1.0 - math.sqrt(max(err2, 0.0))


def _fit_from_inner(xp: Any, normX: float, inner: Any, weights: Any, grams: list[Any]) -> float:
    """:func:`_cp_fit` of a real model from ``inner[r] = <M[:, r], U_n[:, r]>`` (float64), all arrays of ``xp``."""
    if normX <= 0:
        return 1.0
    w = weights.astype(xp.float64) / normX
    inner = xp.sum(inner * w) / normX
    V = xp.ones((w.shape[0], w.shape[0]))
    for G in grams:
        V = V * G
    err2 = float(1.0 - 2 * inner + w @ V @ w)
    return 1.0 - math.sqrt(max(err2, 0.0))
