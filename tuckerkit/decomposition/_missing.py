"""Missing data for CP-ALS and HOOI (``mask=``, True = observed) by EM imputation.

Each iteration fills the missing entries with the current model's values and runs one ordinary iteration of
the algorithm on the completed tensor: ``cp_als`` and ``hooi`` run their own iterations (``_cp_als``,
``_hooi``: the same sweeps, updates, fixed modes, plans and devices) on the filled array and call the
:class:`EStep` here after each sweep, for the observed-entry fit and the refill. Why EM rather than weighted
(CP-WOPT-style) updates: a weighted least-squares factor update couples every row through its own mask
pattern (one R x R system per row, or a gradient method with a step size), which the engine's MTTKRP cannot
express; EM keeps each update the exact ALS / HOOI step of the completed tensor, and the observed-entry error
never increases from one iteration to the next (each step minimizes a majorizer of it that touches it at the
current model). The price is one reconstruction per iteration, as large as the tensor, so ``mask=`` needs a
dense, in-memory ``X``. The first fill is the mean of the observed entries (or the given start's values);
HOOI's ``"st_hosvd"`` start is then the HOSVD of the filled tensor. CP-ALS's line search stays off: its
extrapolated model would be judged on the filled entries too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuckerkit._validation import count_nonfinite, describe
from tuckerkit.backend import array_namespace
from tuckerkit.decomposition._entry import decomposition_call
from tuckerkit.decomposition._results import CPTensor, TuckerTensor


def prepare_masked(X: Any, mask: Any) -> tuple[Any, Any, float]:
    """Validate ``X`` (dense, any values at the missing entries, NaN included) and ``mask`` (a boolean array
    of X's shape, True = observed, at least one True); returns ``X`` with its missing entries set to the mean
    of the observed ones (the first imputation), the mask as a bool array and that mean."""
    from tuckerkit.engine import DenseTensor
    from tuckerkit.engine._operand import dense_array

    if isinstance(X, DenseTensor):
        X = X.data
    if getattr(X, "nnz", None) is not None or type(X).__name__ in ("COOTensor", "CSFTensor", "SlabTensor",
                                                                   "DaskTensor"):
        raise TypeError(f"mask= needs a dense in-memory X (EM imputation fills it in); received a {type(X).__name__}")
    X = dense_array(X, "X", min_ndim=2)
    if X.dtype.kind == "c":
        raise TypeError(f"mask= needs a real X (float32 or float64); received X of complex dtype {X.dtype}")
    xp = array_namespace(X)
    if not hasattr(mask, "shape") or not hasattr(mask, "dtype"):
        raise TypeError(f"mask is {describe(mask)}; expected a boolean array of X's shape (True = observed)")
    if tuple(mask.shape) != tuple(X.shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}; expected X's shape {tuple(X.shape)}")
    if np.dtype(mask.dtype) != np.bool_:
        raise TypeError(f"mask has dtype {mask.dtype}; expected a boolean array (True = observed)")
    mask = xp.asarray(mask)
    n_obs = int(mask.sum())
    if n_obs == 0:
        raise ValueError("mask has no True entry; at least one entry of X must be observed")
    observed = X[mask]
    if count_nonfinite(observed):
        raise ValueError("X has NaN or infinite values at observed entries (mask True); only missing entries "
                         "may hold them")
    mean = float(observed.astype(np.float64).mean())
    filled = xp.where(mask, X, X.dtype.type(mean)).astype(X.dtype, copy=False)
    return filled, mask, mean


class EStep:
    """EM imputation's E step around an algorithm's own iterations: the operand the sweeps read is the filled
    array itself, and after each sweep :meth:`step` gives the fit on the observed entries,
    ``1 - ||P(X - X_hat)|| / ||P(X)||``, and writes the model's values into the missing entries (in place: no
    second tensor-sized array is kept). :func:`~tuckerkit.decomposition._cp._cp_als` and
    :func:`~tuckerkit.decomposition._tucker._hooi` call it; everything else is their iteration unchanged."""

    def __init__(self, filled: Any, mask: Any):
        from tuckerkit.engine._operand import frobenius_norm

        self.xp = array_namespace(filled)
        self.X, self.mask, self.missing = filled, mask, ~mask
        self.norm_obs = frobenius_norm(self.xp.where(mask, filled, 0))

    def fill(self, Xhat: Any) -> None:
        """The missing entries take ``Xhat``'s values."""
        self.xp.copyto(self.X, Xhat.astype(self.X.dtype, copy=False), where=self.missing)

    def step(self, Xhat: Any) -> float:
        """The observed-entry fit of the model ``Xhat``, then :meth:`fill`."""
        from tuckerkit.engine._operand import frobenius_norm

        fit = 1.0 if self.norm_obs <= 0 else (
            1.0 - frobenius_norm(self.xp.where(self.mask, self.X - Xhat, 0)) / self.norm_obs)
        self.fill(Xhat)
        return fit


def _filled_call(X: Any, mask: Any, memory_limit: Any, device: Any) -> tuple[Any, Any]:
    if memory_limit is not None:
        raise ValueError("mask= cannot be combined with memory_limit=; EM imputation holds X in memory")
    filled, mask, _ = prepare_masked(X, mask)
    return decomposition_call(filled, device=device), mask


def masked_cp_als(X: Any, rank: Any, mask: Any, *, init: Any, tol: Any, max_iter: Any, random_state: Any,
                  normalize: Any, callback: Any, verbose: bool, memory_limit: Any, device: Any,
                  extras: Any) -> CPTensor:
    """:func:`cp_als` with ``mask=``: its iterations (``extras``: fixed modes, orthogonalization; no line
    search) on the filled tensor, with the E step after each sweep (see the module). ``fit_history`` holds the
    fit on the observed entries."""
    import dataclasses

    from tuckerkit.decomposition._cp import _cp_als

    ctx, mask = _filled_call(X, mask, memory_limit, device)
    with ctx as call:
        em = EStep(call.X.data, call.like(mask, bool))
        return call.result(_cp_als(call, rank, init, tol, max_iter, random_state, normalize, callback, verbose,
                                   dataclasses.replace(extras, linesearch=False, em=em)))


def masked_hooi(X: Any, ranks: Any, mask: Any, *, init: Any, tol: Any, max_iter: Any, random_state: Any,
                callback: Any, verbose: bool, memory_limit: Any, device: Any, fixed_factors: Any = ()) -> TuckerTensor:
    """:func:`hooi` with ``mask=``: its iterations on the filled tensor, with the E step after each sweep (see
    the module); ``fit_history`` holds the fit on the observed entries. ``"st_hosvd"`` starts from the HOSVD
    of the filled tensor (its mean-filled entries would bias ST-HOSVD's successive projections as much)."""
    from tuckerkit.decomposition._tucker import _hooi

    ctx, mask = _filled_call(X, mask, memory_limit, device)
    with ctx as call:
        em = EStep(call.X.data, call.like(mask, bool))
        init = "hosvd" if isinstance(init, str) and init == "st_hosvd" else init
        return call.result(_hooi(call, ranks, init, tol, max_iter, random_state, callback, verbose, fixed_factors,
                                 em=em))
