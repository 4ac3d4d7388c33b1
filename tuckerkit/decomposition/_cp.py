"""CP decomposition by alternating least squares (CP-ALS)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tuckerkit._validation import (
    check_callback,
    check_choice,
    check_cp_rank,
    check_max_iter,
    check_nonneg,
    check_random_state,
    check_tensor,
)
from tuckerkit.decomposition._linalg import gram_eigh, sign_fix, spd_solve
from tuckerkit.decomposition._monitor import IterationState, Monitor
from tuckerkit.decomposition._placement import _maybe_streamed, like, namespace_of, with_device
from tuckerkit.decomposition._results import CPTensor, _sqnorm
from tuckerkit.engine import mttkrp_sweep
from tuckerkit.engine._dask import DaskTensor
from tuckerkit.engine._slabs import SlabTensor
from tuckerkit.engine._threads import with_single_threaded_blas

logger = logging.getLogger(__name__)


def _leading_sparse(X: Any, n: int, k: int, rng: np.random.Generator) -> Any:
    """Leading left singular vectors of a sparse unfolding (ARPACK), or random when it cannot be formed."""
    import scipy.sparse.linalg

    A = X._tk_unfolding(n)
    if k >= min(A.shape) or A.nnz == 0:
        return rng.standard_normal((X.shape[n], k))
    U, _, _ = scipy.sparse.linalg.svds(A.astype(np.float64), k=k, random_state=int(rng.integers(2**31)))
    return U[:, ::-1]


def _svd_init(X: Any, rank: int, rng: np.random.Generator) -> list[Any]:
    """Leading left singular vectors of each unfolding (from the Gram, no unfolding; sparse tensors use
    ARPACK on the sparse unfolding); random columns pad ranks beyond a mode's size."""
    xp = namespace_of(X)
    factors = []
    for n in range(X.ndim):
        k = min(rank, X.shape[n])
        if n == 0 and isinstance(X, SlabTensor):  # ALS updates mode 0 first: its start is never read
            factors.append(rng.standard_normal((X.shape[0], rank)).astype(X.dtype))
            continue
        if hasattr(X, "_tk_mttkrp"):
            V = like(X, _leading_sparse(X, n, k, rng), np.float64)
        else:
            _, V = gram_eigh(X, n, k)
        U = sign_fix(xp.ascontiguousarray(V[:, :k]))
        if rank > k:
            U = xp.concatenate([U, like(X, rng.standard_normal((X.shape[n], rank - k)), U.dtype)], axis=1)
        factors.append(xp.ascontiguousarray(U.astype(X.dtype, copy=False)))
    return factors



@with_device
@with_single_threaded_blas
def cp_als(
    X: Any,
    rank: int,
    *,
    init: str | CPTensor = "svd",
    tol: float = 1e-8,
    max_iter: int = 100,
    random_state: Any = None,
    normalize: bool = True,
    callback: Callable[[IterationState], bool | None] | None = None,
    verbose: bool = False,
    memory_limit: Any = None,
    device: Any = None,
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
    rank : int
        Number of components (may exceed the mode sizes).
    init : {"svd", "random"} or CPTensor, default "svd"
    tol : float, default 1e-8
        Stop when the fit changes by less than ``tol``, or (``tol > 0``) when it decreases, which in exact
        arithmetic it never does (rounding noise, float32). ``tol=0`` runs exactly ``max_iter`` iterations.
    max_iter : int, default 100
    random_state : None, int or numpy Generator
    normalize : bool, default True
        Keep unit-norm factor columns, scale in ``weights``.
    callback : callable, optional
        ``callback(state)`` after each iteration; returning True stops.
    verbose : bool, default False
        Log each iteration (``logging``, INFO).
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

    Returns
    -------
    CPTensor

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> A, B, C = (rng.standard_normal((n, 2)) for n in (8, 9, 10))
    >>> X = np.einsum("ir,jr,kr->ijk", A, B, C)
    >>> round(tk.cp_als(X, 2, random_state=0).fit, 6)
    1.0
    """
    X = _maybe_streamed(X, memory_limit)
    sparse = hasattr(X, "_tk_mttkrp")
    streamed = isinstance(X, SlabTensor | DaskTensor)
    if sparse:
        if X.ndim < 2:
            raise ValueError(f"X must be a tensor with at least 2 dimensions; received {X.ndim}")
    elif not streamed:
        X = check_tensor(X)
    rank = check_cp_rank(rank)
    tol = check_nonneg(tol, "tol")
    max_iter = check_max_iter(max_iter)
    rng = check_random_state(random_state)
    check_callback(callback)
    N = X.ndim
    if isinstance(init, CPTensor):
        if init.shape != X.shape or init.rank != rank:
            raise ValueError(
                f"init has shape {init.shape} and rank {init.rank}; expected shape {X.shape} and rank {rank}"
            )
        factors = [like(X, U, X.dtype).copy() for U in init.factors]
        factors[0] = factors[0] * like(X, init.weights, X.dtype)[None, :]
    else:
        check_choice(init, "init", ("svd", "random"))
        factors = _svd_init(X, rank, rng) if init == "svd" else [
            like(X, rng.random((X.shape[n], rank)), X.dtype) for n in range(N)
        ]
    xp = namespace_of(X)
    weights = xp.ones(rank, dtype=X.dtype)
    grams = [U.T @ U for U in factors]
    normX2 = X.norm() ** 2 if sparse or streamed else _sqnorm(X)
    normX = math.sqrt(normX2)
    mon = Monitor("cp_als", tol, max_iter, callback, verbose)
    it = 0
    last: dict[str, Any] = {}

    def update(n: int, M: Any) -> None:
        nonlocal weights
        V = xp.ones((rank, rank), dtype=X.dtype)
        for m in range(N):
            if m != n:
                V *= grams[m]
        U = spd_solve(V, M.astype(X.dtype, copy=False))
        if normalize:
            norms = xp.linalg.norm(U, axis=0)
            norms = xp.where(norms == 0, 1, norms).astype(X.dtype)
            U = U / norms[None, :]
            weights = norms
        factors[n] = xp.ascontiguousarray(U.astype(X.dtype, copy=False))
        grams[n] = factors[n].T @ factors[n]
        last["M"], last["n"] = M, n

    plans: tuple = ()
    for it in range(1, max_iter + 1):
        if not normalize:
            weights = xp.ones(rank, dtype=X.dtype)
        plans = mttkrp_sweep(X, factors, update)
        # fit from the last MTTKRP: <X, X_hat> = sum_r w_r <M[:, r], U_n[:, r]>; ||X_hat||^2 = w^T (*G) w;
        # combined on the device so that one scalar comes back per iteration
        n = last["n"]
        w64 = weights.astype(xp.float64)
        inner = xp.sum(xp.sum(last["M"].astype(xp.float64) * factors[n], axis=0) * w64)
        V = xp.ones((rank, rank))
        for G in grams:
            V = V * G
        err = math.sqrt(max(float(normX2 - 2 * inner + w64 @ V @ w64), 0.0))
        fit = 1.0 - err / normX if normX > 0 else 1.0
        if mon.step(it, fit, factors):
            break
    mon.finish()
    if not normalize:
        weights = xp.ones(rank, dtype=X.dtype)
    return CPTensor(weights, tuple(factors), it, mon.converged, tuple(mon.history), plans,
                    passes_per_iteration=N if isinstance(X, DaskTensor) else min(N, 2))
