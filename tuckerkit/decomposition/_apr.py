"""Poisson CP for count data: CP-APR by multiplicative updates (Chi and Kolda, 2012).

The model ``M = sum_r w_r a_r o b_r o ...`` maximizes the Poisson log-likelihood ``sum x log m - sum m``. Each
outer iteration visits the modes; in mode ``n`` the weights move into ``B = U_n diag(w)`` and ``B`` is scaled
by ``Phi = (X_(n) / max(B Pi^T, eps)) Pi`` (``Pi`` the Khatri-Rao rows of the other factors) until the KKT
violation ``max |min(B, 1 - Phi)|`` is below ``tol`` or ``max_inner_iter`` updates ran; then its columns are
normalized to sum 1 (the sums are the new weights). Entries stuck at zero where ``Phi > 1`` (a KKT
violation: the likelihood would grow with them) are nudged by ``kappa = 0.01`` ("scooching", the Tensor
Toolbox's rule; pyttb nudges wherever ``Phi > 0``, which keeps re-opening exact zeros of the optimum and can
keep the run from ever meeting the KKT tolerance).

Everything runs over the nonzeros only: ``X_(n) / (B Pi^T)`` is zero wherever ``X`` is, so ``Phi`` needs the
model at the nonzeros and the ``Pi`` rows of the nonzeros (gathered once per mode), and the log-likelihood
the model at the nonzeros plus ``sum m = sum_r w_r`` (unit-sum columns). Compiled kernels (numba) work per
output row over the nonzeros sorted by that mode's index: each row is summed by one thread in a fixed order,
so the result has the same bits for any thread count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit._validation import (
    check_callback,
    check_cp_rank,
    check_init,
    check_max_iter,
    check_nonneg,
    check_random_state,
    describe,
)
from tuckerkit.decomposition._monitor import IterationState, Monitor
from tuckerkit.decomposition._results import CPTensor

#: scooching (Chi and Kolda; the Tensor Toolbox): an entry below KAPPA_TOL whose Phi exceeds 1 is raised by KAPPA
KAPPA, KAPPA_TOL = 0.01, 1e-10
#: the smallest model value divided by (pyttb's and the Tensor Toolbox's ``epsDivZero``)
EPS_DIV_ZERO = 1e-10
#: below this many nonzeros x rank the kernels run on one thread (a parallel launch costs more than the work)
SERIAL_BELOW = 1 << 16


@dataclass(frozen=True, eq=False)
class PoissonCPTensor(CPTensor):
    """The CP model :func:`cp_apr` returns: a :class:`CPTensor` (columns summing to 1, the expected count of
    each component in ``weights``) with the Poisson log-likelihood.

    Attributes
    ----------
    weights : array, shape (R,)
    factors : tuple of arrays, shape (I_n, R)
    n_iter, converged, fit_history, plans, passes_per_iteration : see :class:`CPTensor`
        ``fit_history`` holds the least-squares fit ``1 - ||X - M|| / ||X||`` after each iteration.
    log_likelihood : float
        ``sum_{x != 0} x log m - sum m`` at the end (the constant ``-sum log x!`` left out, as pyttb and the
        Tensor Toolbox do).
    kkt_violation : float
        The largest KKT violation of the last iteration's subproblems.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> X = np.random.default_rng(0).poisson(2.0, (5, 6, 7))
    >>> M = tk.cp_apr(X, 2, random_state=0)
    >>> type(M).__name__, bool(np.isfinite(M.log_likelihood)), np.allclose(M.factors[0].sum(axis=0), 1)
    ('PoissonCPTensor', True, True)
    """

    log_likelihood: float = float("nan")
    kkt_violation: float = float("nan")


class _Nonzeros:
    """The nonzeros of a count tensor, sorted once per mode by that mode's index (row pointers per mode)."""

    def __init__(self, coords: np.ndarray, values: np.ndarray, shape: tuple[int, ...]):
        self.shape = shape
        self.coords = np.ascontiguousarray(coords, dtype=np.int64)
        self.values = np.ascontiguousarray(values, dtype=np.float64)
        self.sorted: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for n, size in enumerate(shape):
            perm = np.argsort(self.coords[:, n], kind="stable")
            ptr = np.zeros(size + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.coords[:, n], minlength=size), out=ptr[1:])
            self.sorted.append((np.ascontiguousarray(self.coords[perm]), np.ascontiguousarray(self.values[perm]),
                                ptr))


def _stack(factors: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(factors), dtype=np.int64)
    np.cumsum([U.shape[0] for U in factors[:-1]], out=off[1:])
    return np.ascontiguousarray(np.concatenate(factors, axis=0)), off


def _count_data(X: Any, device: Any) -> tuple[_Nonzeros, np.dtype]:
    """The nonzeros of ``X`` (dense array, COOTensor or CSFTensor), checked: finite, real, non-negative."""
    from tuckerkit.backend import parse_device
    from tuckerkit.engine import DenseTensor, as_operand
    from tuckerkit.sparse import COOTensor, CSFTensor

    if device is not None and parse_device(device).is_gpu:
        raise ValueError(f"cp_apr runs on the CPU (compiled kernels over the nonzeros); received device={device!r}")
    op = as_operand(X, check_finite=True, real=True, min_ndim=2)
    if isinstance(op, DenseTensor):
        from tuckerkit.backend import to_host

        coo = COOTensor.from_dense(np.asarray(to_host(op.data)))
    elif isinstance(op, COOTensor | CSFTensor):
        coo = op if isinstance(op, COOTensor) else op.to_coo()
    else:
        raise TypeError("cp_apr needs an in-memory dense array, COOTensor or CSFTensor; received a "
                        f"{type(op).__name__}")
    if coo.nnz == 0:
        raise ValueError("X has no nonzero entries; a Poisson model of all-zero counts is zero")
    if float(coo.values.min()) < 0:
        raise ValueError("X has negative entries; cp_apr models non-negative counts")
    with np.errstate(over="ignore"):
        total = float(np.sum(coo.values, dtype=np.float64))
    # (its sums of model values overflowed: an all-NaN model at 1e307, no error; float32 counts summing beyond
    # float32's range came back as infinite weights)
    top = min(2.0**1000, float(np.finfo(coo.values.dtype).max) / 2 if coo.values.dtype.kind == "f" else 2.0**1000)
    if not total < top:
        what = f"to {total:.3g}" if math.isfinite(total) else "beyond the largest float64"
        raise ValueError(f"X's entries sum {what}, more than cp_apr's sums hold in {coo.values.dtype} (about "
                         f"{top:.3g}); it models counts: scale the data down")
    return _Nonzeros(coo.coords, coo.values, tuple(coo.shape)), np.dtype(coo.values.dtype)


def cp_apr(
    X: Any,
    rank: int,
    *,
    init: Any = "random",
    tol: float = 1e-4,
    max_iter: int = 1000,
    max_inner_iter: int = 10,
    random_state: Any = None,
    callback: Callable[[IterationState], bool | None] | None = None,
    verbose: bool = False,
    device: Any = None,
) -> PoissonCPTensor:
    """Poisson CP decomposition of count data by alternating Poisson regression (CP-APR, multiplicative
    updates; Chi and Kolda 2012), as ``cp_apr`` of the Tensor Toolbox and pyttb.

    Works over the nonzeros only (a dense array is read for its nonzeros once): per inner update one pass
    over the nonzeros with a compiled kernel, never a dense Khatri-Rao product or a reconstruction.

    Parameters
    ----------
    X : array, COOTensor or CSFTensor of non-negative values (counts), shape (I_0, ..., I_{N-1})
    rank : int
    init : {"random"}, a CP model, or the factor matrices; default "random"
        ``"random"``: uniform [0, 1) entries (pyttb's start). A given start must be non-negative.
    tol : float, default 1e-4
        The KKT tolerance (pyttb's ``stoptol``): a mode's subproblem stops when ``max |min(B, 1 - Phi)|``
        is below it; the run converges when no subproblem needed an update.
    max_iter : int, default 1000
        Outer iterations.
    max_inner_iter : int, default 10
        Multiplicative updates per mode per outer iteration, at most.
    random_state : None, int or numpy Generator
        The random start's seed. None: a fixed seed (0), so a default call repeats its bits (pyttb's
        ``cp_apr`` starts from an unseeded draw).
    callback : callable, optional
        ``callback(state)`` after each outer iteration (``state.fit`` is the least-squares fit); True stops.
    verbose : bool, default False
    device : {None, "cpu"}, default None
        CPU only.

    Returns
    -------
    PoissonCPTensor
        Columns summing to 1, expected counts per component in ``weights``, ``log_likelihood``.

    Warns
    -----
    ConvergenceWarning
        When ``max_iter`` is reached before every subproblem meets the KKT tolerance.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> A, B, C = (rng.random((n, 2)) for n in (10, 11, 12))
    >>> X = rng.poisson(5 * np.einsum("ir,jr,kr->ijk", A, B, C))
    >>> M = tk.cp_apr(X, 2, random_state=0)
    >>> M.converged, M.rank, round(float(M.weights.sum() / X.sum()), 6)
    (True, 2, 1.0)
    """
    import time

    from tuckerkit.decomposition._monitor import call_clock
    from tuckerkit.engine import ExecutionPolicy, default_policy
    from tuckerkit.engine._policy import blas_pinned

    started = time.perf_counter()
    data, dtype = _count_data(X, device)
    rank = check_cp_rank(rank)
    tol = check_nonneg(tol, "tol")
    max_iter = check_max_iter(max_iter)
    max_inner_iter = check_max_iter(max_inner_iter, "max_inner_iter")
    rng = check_random_state(0 if random_state is None else random_state)  # (None: a default call repeats its bits)
    check_callback(callback)
    shape = data.shape
    init = check_init(init, shape, rank, kind="cp", methods=("random",), dtype=dtype, nonzero_from=0)
    if isinstance(init, str):
        factors = [rng.random((n, rank)) for n in shape]
        weights = np.ones(rank)
    else:
        w0, given = init
        factors = [np.array(U, dtype=np.float64) for U in given]
        weights = np.ones(rank) if w0 is None else np.array(w0, dtype=np.float64)
        if any(float(U.min()) < 0 for U in factors) or float(weights.min()) < 0:
            raise ValueError(f"init has negative entries; cp_apr needs a non-negative start, received {describe(init)}")
    # threads pay off once a kernel call has enough nonzeros; the bits do not depend on the count
    policy = default_policy() if data.coords.shape[0] * rank >= SERIAL_BELOW else ExecutionPolicy(workers=1)
    with blas_pinned(), call_clock(started):  # (the kernels run on the policy's threads; BLAS on one meanwhile)
        model = _cp_apr(data, rank, factors, weights, tol, max_iter, max_inner_iter, callback, verbose, policy)
    if dtype != np.float64:
        import dataclasses

        model = dataclasses.replace(model, weights=model.weights.astype(dtype),
                                    factors=tuple(U.astype(dtype) for U in model.factors))
    return model


def _normalize1(U: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns of ``U`` scaled to sum 1 (a zero column stays), the sums multiplied into ``weights``."""
    s = np.abs(U).sum(axis=0)
    return U / np.where(s == 0, 1, s)[None, :], weights * s


def _cp_apr(data: _Nonzeros, rank: int, factors: list[np.ndarray], weights: np.ndarray, tol: float,
            max_iter: int, max_inner_iter: int, callback: Any, verbose: bool, policy: Any = None) -> PoissonCPTensor:
    from tuckerkit.decomposition._apr_kernels import gather_pi, phi

    N = len(data.shape)
    for n in range(N):  # every column to unit sum, the scale in the weights
        factors[n], weights = _normalize1(factors[n], weights)
    Phi = [np.zeros_like(U) for U in factors]
    from tuckerkit.engine._operand import frobenius_norm

    normX = frobenius_norm(data.values)  # (scaled: no square overflows or underflows)
    mon = Monitor("cp_apr", 0.0, max_iter, callback, verbose, rule=f"KKT tolerance tol={tol:g}")
    kkt_last, it, passes = float("inf"), 0, 0  # (passes: reads of every nonzero, as a sweep's of X)
    Pi = np.empty((data.coords.shape[0], rank))
    for it in range(1, max_iter + 1):
        converged = True
        kkt = np.zeros(N)
        for n in range(N):
            B = factors[n]
            if it > 1:
                bump = (Phi[n] > 1) & (B < KAPPA_TOL)  # a KKT violation at zero (pyttb tests > 0)
                if bump.any():
                    B = B + KAPPA * bump
            B = B * weights[None, :]  # the weights move into this mode
            weights = np.ones(rank)
            coords_n, vals_n, ptr = data.sorted[n]
            others = [factors[m] if m != n else np.zeros((1, rank)) for m in range(N)]
            F_all, F_off = _stack(others)
            gather_pi(coords_n, F_all, F_off, n, Pi, policy)
            B = np.ascontiguousarray(B)
            passes += 1
            for _ in range(max_inner_iter):
                phi(ptr, vals_n, Pi, B, EPS_DIV_ZERO, Phi[n], policy)
                passes += 1
                kkt[n] = float(np.max(np.abs(np.minimum(B, 1 - Phi[n]))))
                if kkt[n] < tol:
                    break
                converged = False
                B = B * Phi[n]
            factors[n], weights = _normalize1(B, weights)
        kkt_last = float(kkt.max())
        passes += 1  # (the fit's model values at the nonzeros)
        stop = mon.step(it, _ls_fit(data, factors, weights, normX, policy), factors, weights)
        if converged:  # every subproblem met the KKT tolerance without an update
            mon.converge(f"KKT violation {kkt_last:.3g} below tol={tol:g} in every subproblem")
            break
        if stop:
            break
    _finish(mon, tol)
    ll = _log_likelihood(data, factors, weights, policy)
    from tuckerkit.decomposition._entry import mean_passes

    return PoissonCPTensor(weights, tuple(factors), it, mon.converged, tuple(mon.history), (),
                           mean_passes(passes, it), log_likelihood=ll, kkt_violation=kkt_last)


def _finish(mon: Monitor, tol: float) -> None:
    """The monitor's closing line, with CP-APR's own warning: its stopping rule is the KKT tolerance."""
    import warnings

    from tuckerkit.decomposition._entry import caller_stacklevel
    from tuckerkit.decomposition._results import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mon.finish()
    if not mon.converged and not mon.stopped:
        warnings.warn(f"cp_apr reached max_iter={mon.max_iter} before every subproblem met the KKT tolerance "
                      f"tol={tol}", ConvergenceWarning, stacklevel=caller_stacklevel())


def _values_at(data: _Nonzeros, factors: list[np.ndarray], weights: np.ndarray, policy: Any = None) -> np.ndarray:
    from tuckerkit.decomposition._apr_kernels import model_at

    F_all, F_off = _stack(factors)
    out = np.empty(data.coords.shape[0])
    model_at(data.coords, F_all, F_off, np.ascontiguousarray(weights, dtype=np.float64), out, policy)
    return out


def _log_likelihood(data: _Nonzeros, factors: list[np.ndarray], weights: np.ndarray, policy: Any = None) -> float:
    """``sum x log m - sum m`` over the nonzeros; ``sum m = sum_r w_r prod_n colsum(U_n)``."""
    m = _values_at(data, factors, weights, policy)
    total = float(np.sum(weights * np.prod([U.sum(axis=0) for U in factors], axis=0)))
    with np.errstate(divide="ignore"):
        return float(np.sum(data.values * np.log(m))) - total


def _ls_fit(data: _Nonzeros, factors: list[np.ndarray], weights: np.ndarray, normX: float,
            policy: Any = None) -> float:
    """``1 - ||X - M|| / ||X||`` from the model at the nonzeros and the Grams (no reconstruction); the values
    and the weights divided by the power of two at or above the largest value first (exact), so that no square
    overflows or underflows (counts times 1e-300 read a fit of 1.0, times 1e200 NaN)."""
    peak = float(np.max(np.abs(data.values))) if data.values.size else 0.0
    if peak == 0:  # (not normX: its square underflows to 0 for values near 1e-160)
        return 1.0
    # (the exponent within +-1000: a subnormal peak's power of two, 2^1029, overflowed math.ldexp)
    scale = math.ldexp(1.0, max(-1000, min(1000, -math.frexp(peak)[1]))) if peak > 0 and math.isfinite(peak) else 1.0
    vals = data.values * scale
    w = weights * scale
    m = _values_at(data, factors, w, policy)
    inner = float(vals @ m)
    nx2 = float(vals @ vals)
    V = np.ones((weights.shape[0],) * 2)
    for U in factors:
        V = V * (U.T @ U)
    err2 = nx2 - 2 * inner + float(w @ V @ w)
    return 1.0 - math.sqrt(max(err2, 0.0)) / math.sqrt(nx2) if nx2 > 0 else 1.0
