"""Missing data for CP-ALS and HOOI (``mask=``, True = observed) by EM imputation.

Each iteration fills the missing entries with the current model's values and runs one ordinary iteration of
the algorithm on the completed tensor: ``cp_als`` and ``hooi`` run their own iterations (``_cp_als``,
``_hooi``: the same sweeps, updates, fixed modes, plans and devices) on the filled array and call the
:class:`EStep` here after each sweep, for the observed-entry fit and the refill. Why EM rather than weighted
(CP-WOPT-style) updates: a weighted least-squares factor update couples every row through its own mask
pattern (one R x R system per row, or a gradient method with a step size), which the engine's MTTKRP cannot
express; EM keeps each update the exact ALS / HOOI step of the completed tensor, and the observed-entry error
never increases from one iteration to the next (each step minimizes a majorizer of it that touches it at the
current model). The price is one reconstruction per iteration (formed piece by piece: :class:`EStep`), so
``mask=`` needs a dense, in-memory ``X``. The first fill is the mean of the observed entries (or the given
start's values); HOOI's default start (``"st_hosvd"``) is then the sketched ST-HOSVD of the filled tensor
(:func:`masked_hooi`). CP-ALS's line search judges a jump by :meth:`EStep.observed_fit` (the filled tensor
left as it is) and refills the missing entries from an accepted one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuckerkit._validation import count_nonfinite, describe
from tuckerkit.backend import array_namespace
from tuckerkit.decomposition._entry import decomposition_call
from tuckerkit.decomposition._results import CPTensor, TuckerTensor
from tuckerkit.engine._operand import _SAFE_HI, _SAFE_LO


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
    if isinstance(mask, list | tuple):  # (nested lists, as X may be given)
        try:
            mask = np.asarray(mask)
        except ValueError:  # (ragged)
            raise TypeError(f"mask is {describe(mask)} of uneven lengths; expected a boolean array of X's shape "
                            "(True = observed)") from None
    if not hasattr(mask, "shape") or not hasattr(mask, "dtype"):
        raise TypeError(f"mask is {describe(mask)}; expected a boolean array of X's shape (True = observed)")
    if tuple(mask.shape) != tuple(X.shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}; expected X's shape {tuple(X.shape)}")
    if np.dtype(mask.dtype) != np.bool_:
        raise TypeError(f"mask has dtype {mask.dtype}; expected a boolean array (True = observed)")
    mask = xp.asarray(mask)
    if xp is np:  # a C-ordered copy whatever X's layout: the E step works on its rows (EStep), and a call on
        # an F-ordered X gives the bits of the same call on a C-ordered one
        from tuckerkit.decomposition._missing_kernels import fill_value

        filled = np.array(X, order="C")
        mask = np.ascontiguousarray(mask)
        n_obs, bad, mean, _ = observed_moments(filled, mask)
        _check_observed(n_obs, bad)
        fill_value(filled.reshape(-1), mask.reshape(-1), X.dtype.type(mean), np.empty(4096, X.dtype))
        return filled, mask, mean
    n_obs = int(mask.sum())
    observed = X[mask]
    _check_observed(n_obs, bool(n_obs) and bool(count_nonfinite(observed)))
    mean = float(observed.astype(np.float64).mean())
    filled = xp.where(mask, X, X.dtype.type(mean)).astype(X.dtype, copy=False)
    return filled, mask, mean


def _check_observed(n_obs: int, bad: bool) -> None:
    if n_obs == 0:
        raise ValueError("mask has no True entry; at least one entry of X must be observed")
    if bad:
        raise ValueError("X has NaN or infinite values at observed entries (mask True); only missing entries "
                         "may hold them")


def observed_moments(X: np.ndarray, mask: np.ndarray) -> tuple[int, bool, float, float]:
    """``(count, any NaN or infinity, mean, norm)`` of a C-ordered host array's observed entries (mask: C-ordered
    bool, True = observed), in float64: one compiled pass, and a second scaled by a power of two where the
    entries' size needs it (no finite input overflows); serial, so the same bits on every call."""
    from tuckerkit.decomposition._missing_kernels import observed_sums

    x, o, s = X.reshape(-1), mask.reshape(-1), np.empty(2048)
    count, amax, bad, total, ssq = observed_sums(x, o, 1.0, s)
    if bad or count == 0:
        return int(count), bool(bad), math.nan, math.nan
    e = 0
    if amax != 0.0 and not _SAFE_LO <= amax <= _SAFE_HI:  # (squares or a sum that could over- or underflow)
        e = max(math.frexp(amax)[1], -1021)  # (a subnormal amax: 2^-e stays a float, amax 2^-e >= 2^-53)
        _, _, _, total, ssq = observed_sums(x, o, math.ldexp(1.0, -e), s)
    return int(count), False, math.ldexp(total / count, e), math.ldexp(math.sqrt(ssq), e)


#: elements of one piece of the E step (its model values and the residual stay in cache while it is worked on).
#: Measured on the 2-core machine (a step on 200^3 float64 at rank 10 and 100^3 at rank 5, CP and Tucker,
#: medians of 5): 2^15 1.15-1.5x the time of 2^16 (each piece pays ~30 us of Python and BLAS call costs, with
#: the GIL held for part of them), 2^17 0.87-0.93x on 200^3 but 1.1-1.5x on 100^3 (too few pieces for two
#: workers)
E_PIECE_ELEMS = 1 << 16
#: pieces per task on the policy's workers
E_PIECES_PER_TASK = 2


class CPModel:
    """The CP model ``sum_r w_r a_r o b_r o ...`` for the E step, as ``left @ right`` on ``X.reshape(P, I_last)``
    (``P``: the other extents' product): ``right`` is the last factor transposed, and the rows of ``left`` (the
    Khatri-Rao product of the other factors, the weights in the first) are made a block at a time, a row of
    the first factor times the middle factors' Khatri-Rao product (``Q x R``, ``Q = P / I_0``). Nothing as
    large as the tensor is formed."""

    def __init__(self, weights: Any, factors: Sequence[Any]):
        self.factors, self.weights = list(factors), weights
        shape = tuple(int(U.shape[0]) for U in factors)
        self.rows, self.cols = math.prod(shape[:-1]), shape[-1]
        self.slab = math.prod(shape[1:-1])  # rows of the (rows, cols) view per index of the first mode
        self.right: Any = None  # (the pieces' arrays, host only: made by the first left())

    def _prepare(self) -> None:
        from tuckerkit.engine import khatri_rao

        self._first = self.factors[0] * self.weights[None, :]
        self._middle = (khatri_rao(self.factors[1:-1]) if len(self.factors) > 2
                        else np.ones((1, len(self.weights)), dtype=self._first.dtype))
        self.right = np.ascontiguousarray(self.factors[-1].T)

    def full(self) -> Any:
        """The whole dense model (the device path)."""
        from tuckerkit.decomposition._cp import _cp_full

        return _cp_full(self.weights, self.factors)

    def left(self, r0: int, r1: int) -> Any:
        """Rows ``r0:r1`` of ``left``: whole slabs of the first mode, or rows of one slab."""
        if self.right is None:  # (the first call, before the pieces run on the workers: see EStep._run)
            self._prepare()
        Q = self.slab
        i0, q0 = divmod(r0, Q)
        if r1 - r0 <= Q - q0:  # within one slab
            return self._middle[q0:q0 + r1 - r0] * self._first[i0]
        return (self._first[i0:r1 // Q, None, :] * self._middle[None, :, :]).reshape(r1 - r0, -1)


class TuckerModel:
    """The Tucker model ``G x_0 U_0 x_1 U_1 ...`` for the E step, as ``left @ right`` on ``X.reshape(P,
    I_last)``: ``left`` is the core times every factor but the last (``P x R_last``, ``R_last / I_last`` of the
    tensor's size), made once a step, and ``right`` the last factor transposed."""

    def __init__(self, core: Any, factors: Sequence[Any]):
        self.core, self.factors = core, list(factors)
        shape = tuple(int(U.shape[0]) for U in factors)
        self.rows, self.cols = math.prod(shape[:-1]), shape[-1]
        self.slab = math.prod(shape[1:-1])
        self.right: Any = None
        self._left: Any = None

    def full(self) -> Any:
        """The whole dense model (the device path)."""
        from tuckerkit.engine import multi_ttm

        return multi_ttm(self.core, self.factors)

    def left(self, r0: int, r1: int) -> Any:
        """Rows ``r0:r1`` of ``left``."""
        if self._left is None:  # (made once per step, before the pieces run on the workers: see EStep._run)
            from tuckerkit.engine import multi_ttm

            self._left = multi_ttm(self.core, self.factors, skip=len(self.factors) - 1).reshape(self.rows, -1)
            self.right = np.ascontiguousarray(self.factors[-1].T)
        return self._left[r0:r1]


class EStep:
    """EM imputation's E step around an algorithm's own iterations: the operand the sweeps read is the filled
    array itself, and after each sweep :meth:`step` gives the fit on the observed entries,
    ``1 - ||P(X - X_hat)|| / ||P(X)||``, and writes the model's values into the missing entries (in place).

    On the host the model (:class:`CPModel`, :class:`TuckerModel`) is formed by pieces of ``E_PIECE_ELEMS``
    elements, each filled in and its residual's sum of squares taken while it is in cache (after the fill the
    missing entries' residual is exactly zero, so the piece's whole residual is its observed one); the pieces
    run on the policy's workers with BLAS at one thread and their sums are combined in piece order, so the
    bits are the same for any number of workers. No array as large as the tensor is formed (the whole-array
    form took three: the model, the residual and its masked copy). Measured on the 2-core machine against
    that form (whole calls, separate processes, two rounds): an iteration of masked CP-ALS / HOOI on 100^3 at
    rank 5 25-28 / 25-30 ms -> 5-8 / 6-10 ms, on 200^3 at rank 10 158-178 / 146-171 ms -> 37-46 / 34-53 ms;
    the call's peak traced memory 4.1x the tensor -> 1.05-1.4x with a random start (the filled copy is one;
    a review measured 1.3x on 100^3 at rank 5, and 1.5-1.7x / 1.6x for HOOI / CP-ALS with their default starts,
    whose Grams add their work). On a GPU (or a
    tensor that is not C-contiguous) the whole model is formed as before.
    :func:`~tuckerkit.decomposition._cp._cp_als` and :func:`~tuckerkit.decomposition._tucker._hooi` call it;
    everything else is their iteration unchanged."""

    def __init__(self, filled: Any, mask: Any, policy: Any = None, pieces: bool = True):
        from tuckerkit.engine._operand import frobenius_norm

        self.xp = array_namespace(filled)
        self.pieces = pieces and self.xp is np and filled.flags.c_contiguous and filled.size > 0
        self.X, self.policy = filled, policy
        if self.pieces:
            self.observed = np.ascontiguousarray(mask)
            self.norm_obs = observed_moments(filled, self.observed)[3]
        else:
            self.missing = ~mask
            self.norm_obs = frobenius_norm(self.xp.where(mask, filled, 0))

    def fill_start(self, model: Any) -> None:
        """:meth:`fill` from a start the caller gave, refused in one line where its values at the missing entries
        put the tensor's magnitude outside its dtype's safe range (the observed data set the call's scale before:
        a start of 1e100-sized factors overflowed the Grams and LAPACK failed, 1e-100-sized ones underflowed to a
        zero model reported as converged, where the same starts without a mask are rescaled)."""
        import math

        from tuckerkit.decomposition._entry import _RMS_RANGE
        from tuckerkit.engine._operand import frobenius_norm

        self.fill(model)
        dt = np.dtype(self.X.dtype)
        lo, hi = _RMS_RANGE.get(dt, (2.0**-40, 2.0**40))
        size = max(int(self.X.size), 1)
        rms = frobenius_norm(self.X) / math.sqrt(size)
        if math.isfinite(rms) and rms <= hi and (rms >= lo or self.norm_obs < lo * math.sqrt(size)):
            return  # (in range; or below it only because the observed data are too: their own scale)
        n_obs = int(self.observed.sum()) if self.pieces else int(size - int(self.missing.sum()))
        obs = self.norm_obs / math.sqrt(max(n_obs, 1))
        raise ValueError(f"init's model, filled in at the missing entries, gives the tensor a root-mean-square of "
                         f"{rms:.3g}, beyond {dt.name}'s safe range (the observed entries': {obs:.3g}); scale the "
                         "start to the data's magnitude")

    def fill(self, model: Any) -> None:
        """The missing entries take the model's values."""
        if not self.pieces:
            self.xp.copyto(self.X, model.full().astype(self.X.dtype, copy=False), where=self.missing)
            return
        self._run(model, False)

    def step(self, model: Any) -> float:
        """The observed-entry fit of the model, then :meth:`fill`."""
        return self._measure(model, fill=True)

    def observed_fit(self, model: Any) -> float:
        """The observed-entry fit of the model, the tensor left as it is (a line search's trial model); the
        same bits as :meth:`step`'s fit of that model."""
        return self._measure(model, fill=False)

    def _measure(self, model: Any, fill: bool) -> float:
        from tuckerkit.engine._operand import frobenius_norm

        if not self.pieces:
            Xhat = model.full()
            norm = frobenius_norm(self.xp.where(self.missing, 0, self.X - Xhat))
            if fill:
                self.xp.copyto(self.X, Xhat.astype(self.X.dtype, copy=False), where=self.missing)
        else:
            scale, ssq = self._run(model, True, fill=fill)
            norm = scale * math.sqrt(ssq)
        return 1.0 if self.norm_obs <= 0 else 1.0 - norm / self.norm_obs

    def _run(self, model: Any, residual: bool, fill: bool = True) -> tuple[float, float]:
        from tuckerkit.decomposition._missing_kernels import fill_residual, residual_only
        from tuckerkit.engine._operand import _piece_ssq, combine_pairs
        from tuckerkit.engine._policy import blas_pinned, parallel_for, resolve_policy

        rows, cols = model.rows, model.cols
        flat_x, flat_o = self.X.reshape(-1), self.observed.reshape(-1)
        # pieces: whole slabs of the first mode, or rows of one slab, or (where a row is longer than a piece) a
        # range of one row; each one a contiguous range of the flat arrays
        Q, E = model.slab, E_PIECE_ELEMS
        if Q * cols <= E:
            step = Q * max(1, E // (Q * cols))
            pieces = [(r, min(r + step, rows), 0, cols) for r in range(0, rows, step)]
        elif cols <= E:
            k = -(-Q // max(1, E // cols))  # pieces per slab, of equal rows
            pieces = [(s + Q * j // k, s + Q * (j + 1) // k, 0, cols) for s in range(0, rows, Q) for j in range(k)]
        else:
            pieces = [(r, r + 1, c, min(c + E, cols)) for r in range(rows) for c in range(0, cols, E)]
        pairs: list[tuple[float, float]] = [(1.0, 0.0)] * len(pieces)
        dtype = self.X.dtype
        model.left(0, 0)  # (a model's shared pieces made here, once, not raced for by the workers)
        right = model.right

        def work(t: int, scratch: Any) -> None:
            with np.errstate(over="ignore", under="ignore", invalid="ignore"):
                for i in range(t * E_PIECES_PER_TASK, min((t + 1) * E_PIECES_PER_TASK, len(pieces))):
                    r0, r1, c0, c1 = pieces[i]
                    T = np.matmul(model.left(r0, r1), right[:, c0:c1]).astype(dtype, copy=False).reshape(-1)
                    lo, hi = r0 * cols + c0, (r1 - 1) * cols + c1
                    if fill:
                        fill_residual(flat_x[lo:hi], T, flat_o[lo:hi], scratch)
                    else:
                        residual_only(flat_x[lo:hi], T, flat_o[lo:hi])
                    if residual:
                        pairs[i] = _piece_ssq(T)

        with blas_pinned():  # (each piece's GEMM on its worker's thread: the same bits for any number of them)
            parallel_for(work, -(-len(pieces) // E_PIECES_PER_TASK), resolve_policy(self.policy),
                         lambda: np.empty(E_PIECE_ELEMS, dtype))
        return combine_pairs(pairs)


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
        em = EStep(call.X.data, call.like(mask, bool), call.policy)
        return call.result(_cp_als(call, rank, init, tol, max_iter, random_state, normalize, callback, verbose,
                                   dataclasses.replace(extras, em=em)))


def masked_hooi(X: Any, ranks: Any, mask: Any, *, init: Any, tol: Any, max_iter: Any, random_state: Any,
                callback: Any, verbose: bool, memory_limit: Any, device: Any, fixed_factors: Any = ()) -> TuckerTensor:
    """:func:`hooi` with ``mask=``: its iterations on the filled tensor, with the E step after each sweep (see
    the module); ``fit_history`` holds the fit on the observed entries. ``"st_hosvd"`` (the default) starts
    from the sketched ST-HOSVD of the filled tensor: the EM iterations, not the start, set the count.
    Measured (whole default calls, 2-core AVX2, planted Tucker tensors 200^3 at 1 % and 30 % noise, 60^4 and
    150x100x80, 30 / 50 / 80 % missing: 12 cases, two rounds): the HOSVD of the filled tensor (the start
    before), the sketch and a random start reached the same fit (8 digits) in the same 9-52 iterations (the
    random start one more in 4 cases); the sketch took 0.45-3.12 s against the HOSVD's 0.56-3.29 s (0-23 %
    less: three Grams of the whole tensor saved)."""
    from tuckerkit.decomposition._tucker import _hooi

    ctx, mask = _filled_call(X, mask, memory_limit, device)
    with ctx as call:
        em = EStep(call.X.data, call.like(mask, bool), call.policy)
        init = "st_hosvd_sketch" if isinstance(init, str) and init == "st_hosvd" else init
        return call.result(_hooi(call, ranks, init, tol, max_iter, random_state, callback, verbose, fixed_factors,
                                 em=em))
