"""TensorLy's decomposition functions, computed by tuckerkit: ``from tuckerkit.compat.tensorly import tucker``.

Same names, arguments, defaults and return values as ``tensorly.decomposition`` (TensorLy 0.8-0.10); the
results are TensorLy's own ``CPTensor`` / ``TuckerTensor`` when TensorLy is installed, tuckerkit's otherwise.
The work is tuckerkit's: the dimension-tree sweeps without unfoldings, the engine's contractions. Differences
that a caller can see are listed in :doc:`/coming_from` and refused in one line where an option cannot be
honoured (``l2_reg``, an unknown ``svd``, complex tensors in the non-negative methods). Complex tensors go
through ``parafac``, ``tucker`` and ``partial_tucker`` with TensorLy's conventions (projections by ``U^H``,
the MTTKRP with conjugated factors, real CP weights).
"""

from __future__ import annotations

import inspect
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tuckerkit._validation import _as_int, check_random_state, describe
from tuckerkit.compat import _installed
from tuckerkit.decomposition._monitor import stops

__all__ = [
    "CP",
    "CP_NN",
    "CP_NN_HALS",
    "Tucker",
    "Tucker_NN",
    "Tucker_NN_HALS",
    "non_negative_parafac",
    "non_negative_parafac_hals",
    "non_negative_tucker",
    "non_negative_tucker_hals",
    "parafac",
    "partial_tucker",
    "tucker",
]

# TensorLy's SVD choices: "randomized_svd" is tuckerkit's svd="randomized" in the Tucker factor steps; the others
# give the same leading subspace, which tuckerkit computes its own way (svd="exact").
_SVD_NAMES = ("truncated_svd", "symeig_svd", "randomized_svd", "svd")


def _tk_svd(svd: Any) -> str:
    return "randomized" if svd == "randomized_svd" else "exact"


def _tk():
    import tuckerkit

    return tuckerkit


def _array(tensor: Any, who: str, complex_ok: bool = False) -> Any:
    """The tensor as given; a complex one is refused by the methods that are real only (non-negative)."""
    if not complex_ok and hasattr(tensor, "dtype") and \
            np.issubdtype(getattr(tensor, "dtype", np.float64), np.complexfloating):
        raise TypeError(f"{who}: tensor is {tensor.dtype}; expected a real tensor (float32 or float64) for a "
                        "non-negative decomposition")
    return tensor


def _random_state(random_state: Any) -> Any:
    """TensorLy's None: numpy's global RandomState (so ``np.random.seed`` makes a run repeat)."""
    return np.random.mtrand._rand if random_state is None else random_state


def _tl_uniform(random_state: Any) -> Callable[..., np.ndarray]:
    """TensorLy's uniform draws: ``random_sample`` of the RandomState its ``check_random_state`` gives (numpy's
    global one for None, a new one for an integer seed, a RandomState as given); a Generator draws by its own
    ``random``. Anything else is refused in one line."""
    rs = _random_state(random_state)
    if isinstance(rs, numbers.Integral) and not isinstance(rs, bool):
        rs = np.random.RandomState(int(rs))
    if isinstance(rs, np.random.RandomState):
        return rs.random_sample
    return check_random_state(rs).random


def _real_dtype(tensor: Any) -> Any:
    """The dtype TensorLy's draws take: the tensor's real precision (float64 for integers and bools)."""
    dt = np.asarray(tensor).dtype if not hasattr(tensor, "dtype") else np.dtype(tensor.dtype)
    return np.finfo(dt).dtype if np.issubdtype(dt, np.inexact) else np.dtype(np.float64)


def _tl_random_cp(tensor: Any, rank: int, random_state: Any) -> tuple[Any, list[Any]]:
    """TensorLy's ``init="random"`` CP start (``random_cp``): weights of ones, the factors drawn uniform in mode
    order from its RandomState."""
    draw, dt = _tl_uniform(random_state), _real_dtype(tensor)
    return np.ones(rank, dt), [draw((s, rank)).astype(dt) for s in np.shape(tensor)]


def _tl_random_tucker(tensor: Any, ranks: Sequence[int], modes: Sequence[int], random_state: Any) -> tuple:
    """TensorLy's ``init="random"`` Tucker start (``initialize_tucker``): the core drawn first (plus 0.01), then
    each factor of ``modes`` in order, uniform from its RandomState."""
    draw, dt, shape = _tl_uniform(random_state), _real_dtype(tensor), np.shape(tensor)
    core = (draw(tuple(ranks)) + 0.01).astype(dt)
    return core, [draw((shape[m], r)).astype(dt) for m, r in zip(modes, ranks, strict=True)]


def _check_svd(svd: Any, who: str) -> None:
    if callable(svd) and not isinstance(svd, str):  # (accepted and then ignored: tuckerkit computes its subspaces)
        raise NotImplementedError(f"{who}: svd={getattr(svd, '__name__', 'a callable')} (a function of your own) is "
                                  f"not supported; tuckerkit computes its own subspaces: pass one of "
                                  f"{', '.join(repr(s) for s in _SVD_NAMES)}")
    if not (isinstance(svd, str) and svd in _SVD_NAMES):
        names = ", ".join(repr(s) for s in _SVD_NAMES)
        raise ValueError(f"{who}: svd={svd!r} is not valid; expected one of {names}")


def _mask_kw(fn: Callable, mask: Any, who: str, shape: Sequence[int]) -> dict[str, Any]:
    """``mask=`` for ``fn`` (TensorLy's masks may be 0/1 numbers: nonzero is observed), of the tensor's shape
    (checked here, before the masked start fills the tensor: the native API's message, not a broadcast error)."""
    if mask is None:
        return {}
    if "mask" not in inspect.signature(fn).parameters:
        raise NotImplementedError(f"{who}: mask= is not supported by this version of tuckerkit")
    if not hasattr(mask, "shape") and not isinstance(mask, list | tuple):
        raise TypeError(f"{who}: mask is {describe(mask)}; expected a boolean array of the tensor's shape (True = "
                        "observed)")
    mask = np.asarray(mask) != 0
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{who}: mask has shape {tuple(mask.shape)}; expected the tensor's shape {tuple(shape)}")
    return {"mask": mask}


def _orthogonalize(orthogonalise: Any, n_iter_max: int) -> int:
    # TensorLy orthonormalizes while iteration <= orthogonalise (0-based): True means the first two iterations;
    # a value that is not an int means every iteration
    if not orthogonalise:
        return 0
    if isinstance(orthogonalise, numbers.Integral):
        return int(orthogonalise) + 1
    return max(int(n_iter_max), 1)


def _sparsify(residual: np.ndarray, sparsity: Any) -> np.ndarray:
    """The ``k`` largest-magnitude entries of ``residual`` (TensorLy's ``sparsify_tensor``), the rest zero."""
    k = int(sparsity * residual.size) if isinstance(sparsity, float) else int(sparsity)
    k = max(0, min(k, residual.size))
    out = np.zeros_like(residual)
    if k:
        flat = residual.reshape(-1)
        keep = np.argpartition(np.abs(flat), flat.size - k)[flat.size - k:]
        out.reshape(-1)[keep] = flat[keep]
    return out


def _cp_result(weights: Any, factors: Sequence[Any]) -> Any:
    if _installed("tensorly"):
        from tensorly.cp_tensor import CPTensor as TLCP

        return TLCP((np.asarray(weights).copy(), [np.asarray(U).copy() for U in factors]))
    return _tk().CPTensor(np.asarray(weights), tuple(np.asarray(U) for U in factors))


def _tucker_result(core: Any, factors: Sequence[Any]) -> Any:
    if _installed("tensorly"):
        from tensorly.tucker_tensor import TuckerTensor as TLTucker

        return TLTucker((np.asarray(core).copy(), [np.asarray(U).copy() for U in factors]))
    return _tk().TuckerTensor(np.asarray(core), tuple(np.asarray(U) for U in factors))


def parafac(tensor: Any, rank: int, n_iter_max: int = 100, init: Any = "svd", svd: Any = "truncated_svd",
            normalize_factors: bool = False, orthogonalise: Any = False, tol: float = 1e-8,
            random_state: Any = None, verbose: Any = 0, return_errors: bool = False, sparsity: Any = None,
            l2_reg: float = 0, mask: Any = None, cvg_criterion: str = "abs_rec_error",
            fixed_modes: Sequence[int] | None = None, svd_mask_repeats: int = 5, linesearch: bool = False,
            callback: Callable | None = None) -> Any:
    """TensorLy's ``parafac`` (CP by alternating least squares), computed by :func:`tuckerkit.cp_als`.

    Parameters are TensorLy's. ``svd`` may be any of TensorLy's names (tuckerkit computes the same leading
    subspace its own way); ``l2_reg`` other than 0 is refused; ``mask`` needs
    tuckerkit's ``cp_als(mask=)``. ``n_iter_max=0`` returns the initialization. ``callback(cp_tensor,
    rec_error)`` is called with the start, then after each iteration, and stops the run by returning True.

    Parameters
    ----------
    tensor : array
        Dense (float32, float64, complex64 or complex128 kept).
    rank : int
    n_iter_max, tol, random_state, verbose : as TensorLy's
        ``max_iter``, ``tol``, ``random_state`` and ``verbose`` of :func:`tuckerkit.cp_als`; ``random_state``
        None draws from numpy's global RNG as TensorLy does.
    init : {"svd", "random"}, a CPTensor or (weights, factors)
    svd : str
        Any of TensorLy's names (the same subspace, computed tuckerkit's way).
    normalize_factors : bool
        Unit-norm columns with the scale in ``weights`` (else ``weights`` are ones).
    orthogonalise : bool or int
        QR-orthonormalize the factors during the first iterations (``orthogonalize`` of cp_als).
    return_errors : bool
        Also return the relative error after each iteration.
    sparsity : float or int, optional
        Also return a sparse component: the residual's largest entries (a fraction of the entries, or a count).
    l2_reg : float
        Only 0.
    mask : array, optional
        Observed entries: TensorLy's iterations (each sweep on the tensor as it stands, the first on the entries
        as passed, later ones after the missing entries took the model's values; the filled tensor's errors;
        TensorLy's own masked SVD start where TensorLy is installed). With ``orthogonalise`` or ``sparsity``,
        tuckerkit's EM-ALS (``cp_als(mask=)``) instead.
    cvg_criterion : {"abs_rec_error", "rec_error"}
    fixed_modes : list of int, optional
    svd_mask_repeats : int
        Accepted for compatibility; the masked start is tuckerkit's.
    linesearch : bool
        TensorLy's line search (its jumps, its acceptance, its error list); with ``mask``, ``orthogonalise``,
        ``sparsity`` or ``normalize_factors``, tuckerkit's own (with ``mask`` none).
    callback : callable, optional

    Returns
    -------
    CPTensor
        TensorLy's ``CPTensor`` when TensorLy is installed (tuckerkit's otherwise); ``(cp_tensor, errors)``
        with ``return_errors``, ``(cp_tensor, sparse_component)`` with ``sparsity`` (and both:
        ``((cp_tensor, sparse_component), errors)``).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import parafac
    >>> rng = np.random.default_rng(0)
    >>> X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 2)) for n in (5, 6, 7)))
    >>> weights, factors = parafac(X, 2, tol=1e-12, linesearch=True)
    >>> [U.shape for U in factors]
    [(5, 2), (6, 2), (7, 2)]
    """
    tk = _tk()
    who = "parafac"
    tensor = _array(tensor, who, complex_ok=True)
    _check_svd(svd, who)
    if l2_reg:
        raise NotImplementedError(f"{who}: l2_reg={l2_reg!r} is not supported by tuckerkit; expected 0")
    if cvg_criterion not in ("abs_rec_error", "rec_error"):
        raise TypeError(f"{who}: cvg_criterion={cvg_criterion!r} is not valid; expected 'abs_rec_error' or "
                        "'rec_error'")
    kw = _mask_kw(tk.cp_als, mask, who, np.shape(tensor))
    N = np.ndim(tensor)
    fixed = list(range(N)) if n_iter_max == 0 else _tl_fixed_modes(fixed_modes, N, "")
    random_state = _random_state(random_state)
    if isinstance(init, str) and init == "random":  # (drawn as TensorLy draws it: np.random.seed repeats it)
        init = _tl_random_cp(tensor, rank, random_state)
    elif isinstance(init, str) and init == "svd" and mask is None and any(s < rank for s in np.shape(tensor)):
        init = _tl_padded_svd_cp(tensor, rank, random_state)
    elif isinstance(init, str) and init == "svd" and mask is None and n_iter_max == 0:
        init = _tl_cp_svd_start(np.asarray(tensor), rank, svd) or init  # (the start returned: TensorLy's own)
    init = _free_mode_starts(init, np.shape(tensor), rank, fixed, random_state)
    if mask is not None and init == "svd" and (n_iter_max == 0 or not fixed):
        # TensorLy's own masked SVD start where it is installed (the same start, so the same run)
        init = _tl_masked_svd_start(tensor, kw["mask"], rank, svd, random_state, int(svd_mask_repeats)) or init
    if mask is not None and (n_iter_max == 0 or init == "svd"):
        init = _masked_start(tensor, kw["mask"], rank, init, int(svd_mask_repeats), random_state)
        if n_iter_max == 0:
            return _cp_result(*init)
    if mask is not None and not orthogonalise and not sparsity:
        return _tl_masked_parafac(tensor, kw["mask"], rank, init, int(n_iter_max), tol, cvg_criterion,
                                  bool(normalize_factors), fixed, callback, return_errors, random_state)
    if (linesearch or callback is not None or sparsity) and mask is None and not orthogonalise \
            and not normalize_factors and n_iter_max > 0:
        return _tl_sweeps_parafac(tensor, rank, init, int(n_iter_max), tol, cvg_criterion, fixed, callback,
                                  return_errors, bool(linesearch), sparsity, svd)
    tk_callback = None
    if callback is not None:
        def tk_callback(state: Any) -> bool:
            w = state.weights if state.weights is not None else np.ones(rank)
            return stops(callback(_cp_result(w, state.factors), 1.0 - state.fit))
    with warnings.catch_warnings():  # TensorLy stops at n_iter_max silently
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        # (a start made here, or the SVD's, which draws nothing: tuckerkit's seed, so that numpy's global RNG
        # moves only by TensorLy's draws)
        tk_rs = None if not isinstance(init, str) or init == "svd" else random_state
        cp = tk.cp_als(tensor, rank, init=init, tol=tol, max_iter=max(int(n_iter_max), 1), random_state=tk_rs,
                       normalize=bool(normalize_factors), fixed_modes=fixed, linesearch=bool(linesearch),
                       orthogonalize=_orthogonalize(orthogonalise, n_iter_max), callback=tk_callback,
                       verbose=bool(verbose), **kw)
    result = _cp_result(cp.weights, cp.factors)
    errors = [1.0 - f for f in cp.fit_history] if n_iter_max else []  # (TensorLy: no iteration, no error)
    if sparsity:
        dense = np.asarray(tensor)
        result = (result, _sparsify(dense - np.asarray(cp.full()), sparsity))
    return (result, errors) if return_errors else result


def _tl_fixed_modes(fixed_modes: Any, N: int, why: str) -> list[int]:
    """TensorLy's ``fixed_modes`` of ``parafac`` and ``non_negative_parafac``: the last mode cannot be fixed
    unless every mode is (then the start is returned); asked for, it is updated anyway after TensorLy's own
    warning (kept fixed here before, silently: another result)."""
    fixed = sorted({int(m) % N for m in (fixed_modes or ())})
    if N - 1 in fixed and len(fixed) < N:
        warnings.warn(f"You asked for fixing the last mode, which is not supported{why}.\n The last mode will not "
                      "be fixed. Consider using tl.moveaxis()", UserWarning, stacklevel=3)
        fixed.remove(N - 1)
    return fixed


def _tl_padded_svd_cp(tensor: Any, rank: int, random_state: Any) -> tuple[Any, list[Any]]:
    """TensorLy's SVD start where ``rank`` exceeds a mode's size: each mode's leading left singular vectors
    (tuckerkit's start, every mode computed), the columns past the mode's size drawn uniform from TensorLy's
    RandomState, mode by mode in order."""
    tk = _tk()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        start = tk.cp_als(tensor, rank, init="svd", fixed_modes=range(np.ndim(tensor)), max_iter=1, tol=0,
                          linesearch=False)
    draw = _tl_uniform(random_state)
    factors = [np.array(U) for U in start.factors]
    for U in factors:
        if U.shape[0] < rank:
            U[:, U.shape[0]:] = draw((U.shape[0], rank - U.shape[0]))
    return np.asarray(start.weights), factors


def _free_mode_starts(init: Any, shape: Sequence[int], rank: int, fixed: Sequence[int], random_state: Any) -> Any:
    """TensorLy accepts a start whose factor has the wrong number of rows on a mode that is not fixed and is
    never read before its update (every mode before it fixed): such a factor is replaced by random columns."""
    if isinstance(init, str):
        return init
    weights, factors = (init[0], init[1]) if isinstance(init, tuple | list) and len(init) == 2 and \
        not hasattr(init[1], "shape") else (getattr(init, "weights", None), getattr(init, "factors", init))
    try:
        factors = [np.asarray(U) for U in factors]
    except TypeError:
        return init
    if len(factors) != len(shape) or all(U.ndim != 2 or U.shape[0] == s for U, s in zip(factors, shape, strict=True)):
        return init
    rng = check_random_state(random_state)
    out = []
    for n, (U, s) in enumerate(zip(factors, shape, strict=True)):
        unread = n not in fixed and all(m in fixed for m in range(n))
        out.append(rng.random((s, rank)) if U.ndim == 2 and U.shape[0] != s and unread else U)
    return (weights, out)


def _tl_sweeps_parafac(tensor: Any, rank: int, init: Any, n_iter_max: int, tol: Any, cvg_criterion: str,
                       fixed: list[int], callback: Any, return_errors: bool, linesearch: bool,
                       sparsity: Any = None, svd: Any = "truncated_svd") -> Any:
    """TensorLy's ``parafac`` loop around one :func:`tuckerkit.cp_als` sweep an iteration, for what its own loop
    does differently: its line search (at even iterations past the sixth, a jump of ``iteration ** (1 / p)``
    along the last two iterations' step, kept when the error drops, ``p`` raised after four failures; those
    iterations add no error to the list), ``callback`` called once with the start before the first
    iteration, and with ``sparsity`` the errors (and so the stop) of the residual without its sparse part, the
    callback given ``(cp, sparse)``. tuckerkit's own line search took other steps (error lists of 30 against 47
    entries); with ``sparsity`` the plain errors were reported (0.075 apart)."""
    tk = _tk()
    X = np.asarray(tensor)
    N = X.ndim
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        tl_start = _tl_cp_svd_start(X, rank, svd) if isinstance(init, str) else None
        if tl_start is not None:  # (TensorLy's own: its first factor scaled by the singular values)
            model = tl_start
        elif isinstance(init, str):  # (the SVD start's factors, weights ones)
            s = tk.cp_als(X, rank, init=init, fixed_modes=range(N), max_iter=1, tol=0, normalize=False,
                          linesearch=False)
            model = (np.asarray(s.weights), [np.asarray(U) for U in s.factors])
        else:
            w0, f0 = (init[0], init[1]) if isinstance(init, tuple | list) and len(init) == 2 and \
                not hasattr(init[1], "shape") else (getattr(init, "weights", None), getattr(init, "factors", init))
            f0 = [np.asarray(U) for U in f0]
            model = (np.ones(rank, dtype=f0[0].real.dtype) if w0 is None else np.asarray(w0), f0)
    norm = float(np.linalg.norm(X.reshape(-1)))

    def residual(w: Any, fs: Sequence[Any]) -> np.ndarray:
        return X - np.asarray(tk.CPTensor(w, tuple(fs)).full())

    def error(w: Any, fs: Sequence[Any]) -> float:
        R = residual(w, fs)
        if sparsity:
            R = R - _sparsify(R, sparsity)
        return float(np.linalg.norm(R.reshape(-1)))

    def given(w: Any, fs: Sequence[Any]) -> Any:  # (what the callback and the result hold)
        cp = _cp_result(w, fs)
        return (cp, _sparsify(residual(w, fs), sparsity)) if sparsity else cp

    if callback is not None:  # (TensorLy's call with the start; its answer is not read)
        callback(given(*model), error(*model) / norm if norm > 0 else 0.0)
    errors: list[float] = []
    acc_pow, acc_fail, max_fail = 2.0, 0, 4
    last: Any = None
    rec_error = 0.0
    for iteration in range(n_iter_max):
        if linesearch and iteration % 2 == 0:
            last = (model[0].copy(), [U.copy() for U in model[1]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tk.ConvergenceWarning)
            cp = tk.cp_als(X, rank, init=model, max_iter=1, tol=0, normalize=False, linesearch=False,
                           fixed_modes=fixed)
        model = (np.asarray(cp.weights), [np.asarray(U) for U in cp.factors])
        line_iter = linesearch and iteration % 2 == 0 and iteration > 5
        if line_iter:
            jump = iteration ** (1.0 / acc_pow)
            new = (last[0] + (model[0] - last[0]) * jump,
                   [a + (b - a) * jump for a, b in zip(last[1], model[1], strict=True)])
            if norm > 0 and error(*new) / norm < errors[-1]:
                model, acc_fail = new, 0
            else:
                acc_fail += 1
                if acc_fail == max_fail:
                    acc_pow, acc_fail = acc_pow + 1.0, 0
        else:
            rec_error = error(*model) / norm if norm > 0 else 0.0
            errors.append(rec_error)
        if callback is not None and stops(callback(given(*model), rec_error)):
            break
        if tol and iteration >= 1:
            drop = errors[-2] - errors[-1]
            if (abs(drop) if cvg_criterion == "abs_rec_error" else drop) < tol:
                break
    result = given(*model)
    return (result, errors) if return_errors else result


def _tensorly_numpy() -> bool:
    """Whether TensorLy is installed and runs on its numpy backend: then its own initializers make the starts the
    layer must share with it (their arrays are the numpy arrays tuckerkit takes)."""
    if not _installed("tensorly"):
        return False
    import tensorly as tl

    return bool(tl.get_backend() == "numpy")


def _tl_cp_svd_start(X: np.ndarray, rank: int, svd: Any) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """TensorLy's ``initialize_cp(init="svd")`` where TensorLy runs on its numpy backend (and every mode is at least
    ``rank`` long: the padded start is :func:`_tl_padded_svd_cp`'s), else None. Its first factor carries the
    singular values, which the start's model (``n_iter_max=0``, the callback's first call) shows: 0.49 against
    0.92 error from the singular vectors alone."""
    if any(n < rank for n in X.shape) or not _tensorly_numpy():
        return None
    from tensorly.decomposition._cp import initialize_cp

    weights, factors = initialize_cp(X if X.dtype.kind in "fc" else X.astype(np.float64), rank, init="svd", svd=svd)
    return np.asarray(weights), [np.asarray(U) for U in factors]


def _tl_masked_tucker_start(tensor: Any, ranks: Sequence[int], modes: Sequence[int], mask: np.ndarray, svd: Any,
                            random_state: Any, repeats: int = 5) -> Any:
    """TensorLy's ``initialize_tucker(init="svd", mask=...)`` (its masked SVD start) as a TuckerTensor where
    TensorLy runs on its numpy backend, else None (tuckerkit's HOSVD of the filled tensor then: 0.21 apart after
    five iterations)."""
    if not _tensorly_numpy():
        return None
    from tensorly.decomposition._tucker import initialize_tucker

    X = np.asarray(tensor)
    X = X if X.dtype.kind in "fc" else X.astype(np.float64)
    core, factors = initialize_tucker(X, list(ranks), list(modes), init="svd", svd=svd, random_state=random_state,
                                      mask=mask.astype(X.real.dtype), svd_mask_repeats=repeats)
    return np.asarray(core), [np.asarray(U) for U in factors]


def _tl_masked_svd_start(tensor: Any, mask: np.ndarray, rank: int, svd: Any, random_state: Any,
                         repeats: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """TensorLy's ``initialize_cp(init="svd", mask=...)`` where TensorLy runs on its numpy backend, else None."""
    if not _tensorly_numpy():
        return None
    from tensorly.decomposition._cp import initialize_cp

    X = np.asarray(tensor)
    weights, factors = initialize_cp(X if X.dtype.kind in "fc" else X.astype(np.float64), rank, init="svd", svd=svd,
                                     random_state=random_state, mask=mask.astype(X.dtype if X.dtype.kind in "fc"
                                                                                 else np.float64),
                                     svd_mask_repeats=repeats)
    return np.asarray(weights), [np.asarray(U) for U in factors]


def _tl_masked_parafac(tensor: Any, mask: np.ndarray, rank: int, init: Any, n_iter_max: int, tol: Any,
                       cvg_criterion: str, normalize_factors: bool, fixed: list[int], callback: Any,
                       return_errors: bool, random_state: Any) -> Any:
    """TensorLy's masked ``parafac``, iteration for iteration: each sweep (one :func:`tuckerkit.cp_als`
    iteration from the current model) runs on the tensor as it stands, the first on the entries as passed (the
    missing ones included), each later one after the missing entries took the model's values; the error is that
    of the filled tensor, ``||T - M|| / ||T||``, and the stop TensorLy's. tuckerkit's own EM-ALS fills before the
    first sweep and reports the observed entries' fit: 0.66 apart after one iteration, other error lists."""
    tk = _tk()
    T = np.array(np.asarray(tensor), dtype=np.result_type(np.asarray(tensor).dtype, np.float32))
    X = T.copy()
    weights, factors = _masked_start(tensor, mask, rank, init, 0, random_state) if not isinstance(init, str) \
        else (None, None)
    model = (weights, factors) if factors is not None else init
    if callback is not None and not isinstance(model, str):  # (TensorLy's call with the start, filled by it)
        full0 = np.asarray(tk.CPTensor(np.asarray(model[0]), tuple(np.asarray(U) for U in model[1])).full())
        T0 = np.where(mask, X, full0)
        n0 = float(np.linalg.norm(T0.reshape(-1)))
        callback(_cp_result(*model), float(np.linalg.norm((T0 - full0).reshape(-1))) / n0 if n0 > 0 else 0.0)
    errors: list[float] = []
    cp: Any = None
    for it in range(n_iter_max):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tk.ConvergenceWarning)
            cp = tk.cp_als(T, rank, init=model, max_iter=1, tol=0, fixed_modes=fixed, linesearch=False,
                           random_state=None if not isinstance(model, str) else random_state)
        full = np.asarray(cp.full())
        T = np.where(mask, X, full)
        nt = float(np.linalg.norm(T.reshape(-1)))
        errors.append(float(np.linalg.norm((T - full).reshape(-1))) / nt if nt > 0 else 0.0)
        model = (np.asarray(cp.weights), [np.asarray(U) for U in cp.factors])
        if callback is not None and stops(callback(_cp_result(*model), errors[-1])):
            break
        if tol and it >= 1:
            drop = errors[-2] - errors[-1]
            if (abs(drop) if cvg_criterion == "abs_rec_error" else drop) < tol:
                break
    weights, factors = model if not isinstance(model, str) else (np.ones(rank), [])
    weights, factors = np.asarray(weights), [np.asarray(U) for U in factors]
    if normalize_factors:
        for n in range(len(factors)):
            norms = np.linalg.norm(factors[n], axis=0)
            norms = np.where(norms > 0, norms, 1.0)
            factors[n], weights = factors[n] / norms, weights * norms
    else:  # (TensorLy's weights stay ones: the scale on the factors, on the last updated mode)
        free = [n for n in range(len(factors)) if n not in fixed]
        if free:
            factors[free[-1]] = factors[free[-1]] * weights[None, :].astype(factors[free[-1]].dtype)
            weights = np.ones_like(weights)
    result = _cp_result(weights.astype(factors[0].real.dtype) if factors else weights, factors)
    return (result, errors) if return_errors else result


def _masked_start(tensor: Any, mask: np.ndarray, rank: int, init: Any, repeats: int, random_state: Any) -> Any:
    """TensorLy's masked start: the start computed on the tensor with its missing entries filled (first with
    the mean of the observed ones), then ``svd_mask_repeats`` times (``init="svd"``) refilled with the current
    model and recomputed (one ALS sweep from the SVD start, so that the model has its scale)."""
    tk = _tk()
    X = np.asarray(tensor, dtype=np.float64 if np.asarray(tensor).dtype.kind != "f" else None)
    filled = np.where(mask, X, X[mask].mean())
    N = X.ndim
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        if isinstance(init, str):
            start = tk.cp_als(filled, rank, init=init, fixed_modes=range(N), max_iter=1, tol=0,
                              random_state=random_state, linesearch=False)
        else:
            start = tk.CPTensor.from_tensorly(init) if not isinstance(init, tuple | list) else None
            if start is None:
                weights, factors = init if len(init) == 2 and not hasattr(init[1], "shape") else (None, init)
                start = tk.CPTensor(np.ones(rank) if weights is None else np.asarray(weights),
                                    tuple(np.asarray(U) for U in factors))
        for _ in range(repeats if init == "svd" else 0):
            filled = np.where(mask, X, np.asarray(start.full()))
            start = tk.cp_als(filled, rank, init="svd", max_iter=1, tol=0, linesearch=False)
    return np.asarray(start.weights), [np.asarray(U) for U in start.factors]


def _tucker_ranks(rank: Any, shape: Sequence[int], who: str) -> list[int]:
    """TensorLy's ``rank``: None (every mode's size), one integer (capped at each mode's size) or one integer per
    mode (the native API then checks their range); anything else is refused in one line."""
    if rank is None:
        return list(shape)
    if isinstance(rank, np.ndarray) and rank.ndim == 0:
        rank = rank.item()
    if isinstance(rank, numbers.Integral) and not isinstance(rank, bool):
        return [min(int(rank), s) for s in shape]
    if isinstance(rank, str) or not isinstance(rank, Sequence | np.ndarray):
        raise TypeError(f"{who}: rank must be None, an integer or a sequence of {len(shape)} integers; received "
                        f"{describe(rank)}")
    ranks = [_as_int(r, f"{who}: rank[{i}]") for i, r in enumerate(rank)]
    if len(ranks) != len(shape):
        raise ValueError(f"{who}: rank has {len(ranks)} entries; expected {len(shape)}, one per mode")
    return ranks


def _tucker_init(init: Any) -> Any:
    if isinstance(init, str):
        if init == "svd":
            return "hosvd"
        if init == "random":
            return "random"
        raise ValueError(f"tucker: init={init!r} is not valid; expected 'svd', 'random', a TuckerTensor or a list "
                         "of factor matrices")
    return init


def _tl_tol(tol: Any, who: str) -> float:
    """TensorLy's ``tol`` of its HOOI: a non-negative number, or None (no stop before ``n_iter_max``, as 0)."""
    if tol is None:
        return 0.0
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 <= float(tol) < math.inf:
        raise TypeError(f"{who}: tol must be a non-negative number or None; received {describe(tol)}")
    return float(tol)


def _tl_hooi_stop(tol: float) -> Callable[[Any], bool]:
    """TensorLy's stop of ``tucker`` and ``partial_tucker``, as a :func:`tuckerkit.hooi` callback (run with
    ``tol=0``): after an iteration from the third on whose relative error changed by less than ``tol`` from
    the one before (none when ``tol`` is 0). tuckerkit's own rule may stop from the first iteration on (against
    its start's fit), so the default call ran one iteration fewer than TensorLy's."""
    errors: list[float] = []

    def stop(state: Any) -> bool:
        errors.append(1.0 - state.fit)
        return bool(tol) and len(errors) > 2 and abs(errors[-2] - errors[-1]) < tol

    return stop


def tucker(tensor: Any, rank: Any, fixed_factors: Sequence[int] | None = None, n_iter_max: int = 100,
           init: Any = "svd", return_errors: bool = False, svd: Any = "truncated_svd", tol: float = 10e-5,
           random_state: Any = None, mask: Any = None, verbose: Any = False) -> Any:
    """TensorLy's ``tucker`` (HOOI), computed by :func:`tuckerkit.hooi`.

    Parameters are TensorLy's: ``rank`` None keeps every mode's size, an int applies to every mode (capped
    at the mode's size); ``init="svd"`` is tuckerkit's ``"hosvd"``; ``mask`` needs tuckerkit's
    ``hooi(mask=)``.

    Parameters
    ----------
    tensor : array
    rank : None, int or list of int
    fixed_factors : list of int, optional
        Modes whose factor stays as given in ``init``.
    n_iter_max, tol, random_state, verbose : as TensorLy's
        ``max_iter``, ``tol``, ``random_state`` and ``verbose`` of :func:`tuckerkit.hooi`.
    init : {"svd", "random"}, a TuckerTensor, (core, factors) or a list of factors
    return_errors : bool
        Also return the relative error after each iteration.
    svd : str
        Any of TensorLy's names; ``"randomized_svd"`` runs tuckerkit's ``svd="randomized"`` factor steps.
    mask : array, optional
        Observed entries (needs tuckerkit's ``hooi(mask=)``).

    Returns
    -------
    TuckerTensor
        TensorLy's ``TuckerTensor`` when TensorLy is installed (tuckerkit's otherwise); ``(tucker_tensor,
        errors)`` with ``return_errors``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import tucker
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> core, factors = tucker(X, rank=[2, 3, 4])
    >>> core.shape
    (2, 3, 4)
    """
    tk = _tk()
    who = "tucker"
    tensor = _array(tensor, who, complex_ok=True)
    _check_svd(svd, who)
    tol = _tl_tol(tol, who)
    kw = _mask_kw(tk.hooi, mask, who, np.shape(tensor))
    ranks = _tucker_ranks(rank, np.shape(tensor), who)
    random_state = _random_state(random_state)
    if fixed_factors:  # TensorLy: HOOI on the other modes (the fixed ones kept whole), then the fixed projected
        return _tucker_fixed(tensor, ranks, fixed_factors, n_iter_max, init, svd, tol, random_state, mask, verbose)
    drawn = None
    if isinstance(init, str) and init == "random":  # (drawn as TensorLy draws it: np.random.seed repeats it)
        drawn = _tl_random_tucker(tensor, ranks, range(len(ranks)), random_state)
        init = tk.TuckerTensor(*drawn)
    elif isinstance(init, str) and init == "svd" and mask is not None:
        started = _tl_masked_tucker_start(tensor, ranks, list(range(len(ranks))), kw["mask"], svd, random_state)
        init = tk.TuckerTensor(started[0], tuple(started[1])) if started is not None else init
    if n_iter_max == 0 and not isinstance(init, str):  # TensorLy returns its start as it is, with no errors
        core0, factors0 = init if isinstance(init, tuple) else (init[0], init[1])
        result = _tucker_result(np.asarray(core0), [np.asarray(U) for U in factors0])
        return (result, []) if return_errors else result
    with warnings.catch_warnings():  # TensorLy stops at n_iter_max silently
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        fixed = list(range(len(ranks))) if n_iter_max == 0 else []
        T = tk.hooi(tensor, ranks, init=_tucker_init(init), tol=0, max_iter=max(int(n_iter_max), 1),
                    callback=_tl_hooi_stop(tol), svd=_tk_svd(svd), fixed_factors=fixed, verbose=bool(verbose), **kw,
                    # (the randomized SVD's draws only: the start is made above or by the SVD)
                    random_state=random_state if _tk_svd(svd) == "randomized" else None)
    result = _tucker_result(T.core, T.factors)
    errors = [1.0 - f for f in T.fit_history] if n_iter_max else []
    return (result, errors) if return_errors else result


def _tucker_fixed(tensor: Any, ranks: list[int], fixed_factors: Sequence[int], n_iter_max: int, init: Any, svd: Any,
                  tol: float, random_state: Any, mask: Any, verbose: Any) -> Any:
    """TensorLy's ``tucker(fixed_factors=...)``: its start's core times the fixed factors, HOOI along the other
    modes only (:func:`partial_tucker`: the fixed modes are not projected during the updates), the core then
    projected on the fixed factors. Returns the TuckerTensor alone (TensorLy ignores ``return_errors`` here)."""
    tk = _tk()
    N = len(ranks)
    if isinstance(init, str):
        raise ValueError(f"tucker: fixed_factors={list(fixed_factors)} needs init to be a Tucker model (core, "
                         f"factors) whose factors are kept; received init={init!r}")
    core0, factors0 = (init[0], init[1]) if isinstance(init, tuple | list) and len(init) == 2 \
        else (init.core, init.factors) if hasattr(init, "core") else (init[0], init[1])
    fixed = sorted({int(m) % N for m in fixed_factors})
    kept = [np.asarray(factors0[m]) for m in fixed]
    modes = [m for m in range(N) if m not in fixed]
    core = tk.multi_ttm(np.asarray(core0), kept, modes=fixed) if fixed else np.asarray(core0)
    if not modes:  # every mode fixed: the start, its core projected back
        core = tk.multi_ttm(tk.multi_ttm(np.asarray(core0), kept, modes=fixed), kept, modes=fixed, transpose=True)
        return _tucker_result(core, [np.asarray(U) for U in factors0])
    (core, new), _ = partial_tucker(tensor, [ranks[m] for m in modes], modes=modes, n_iter_max=n_iter_max,
                                    init=(core, [np.asarray(factors0[m]) for m in modes]), tol=tol, svd=svd,
                                    random_state=random_state, verbose=verbose, mask=mask)
    core = tk.multi_ttm(core, kept, modes=fixed, transpose=True)
    factors = list(new)
    for m, U in zip(fixed, kept, strict=True):
        factors.insert(m, U)
    return _tucker_result(core, factors)


def partial_tucker(tensor: Any, rank: Any, modes: Sequence[int] | None = None, n_iter_max: int = 100,
                   init: Any = "svd", tol: float = 10e-5, svd: Any = "truncated_svd", random_state: Any = None,
                   verbose: Any = False, mask: Any = None, svd_mask_repeats: int = 5) -> Any:
    """TensorLy's ``partial_tucker``: HOOI along ``modes`` only, the other modes kept whole in the core.

    Computed by :func:`tuckerkit.hooi` with identity factors held fixed on the other modes.

    Parameters
    ----------
    tensor : array
    rank : None, int or list of int
        One rank per entry of ``modes``.
    modes : list of int, optional
        The modes to decompose (default: all).
    n_iter_max, tol, random_state, verbose : as TensorLy's
    init : {"svd", "random"} or (core, factors)
    svd : str
        Any of TensorLy's names; ``"randomized_svd"`` runs tuckerkit's ``svd="randomized"`` factor steps.
    mask : array, optional
        Observed entries (needs tuckerkit's ``hooi(mask=)``).
    svd_mask_repeats : int
        Accepted for compatibility.

    Returns
    -------
    ((core, factors), rec_errors)
        ``factors`` has one matrix per entry of ``modes``; the core keeps the other modes' full sizes.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import partial_tucker
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> (core, factors), errors = partial_tucker(X, rank=[3, 4], modes=[1, 2])
    >>> core.shape, [U.shape for U in factors]
    ((5, 3, 4), [(6, 3), (7, 4)])
    """
    tk = _tk()
    who = "partial_tucker"
    tensor = _array(tensor, who, complex_ok=True)
    _check_svd(svd, who)
    tol = _tl_tol(tol, who)
    kw = _mask_kw(tk.hooi, mask, who, np.shape(tensor))
    shape = np.shape(tensor)
    N = len(shape)
    modes = list(range(N)) if modes is None else [int(m) % N for m in modes]
    sub = _tucker_ranks(rank, [shape[m] for m in modes], who)
    ranks = list(shape)
    for m, r in zip(modes, sub, strict=True):
        ranks[m] = r
    dtype = np.asarray(tensor).dtype if np.issubdtype(np.asarray(tensor).dtype, np.inexact) else np.float64
    # the randomized SVD's draws (only then: an exact run leaves numpy's global RNG as TensorLy's would)
    sketch_rng = check_random_state(_random_state(random_state)) if _tk_svd(svd) == "randomized" else None
    tl_start = _tl_masked_tucker_start(tensor, sub, modes, kw["mask"], svd, _random_state(random_state),
                                       int(svd_mask_repeats)) if isinstance(init, str) and init == "svd" \
        and mask is not None else None
    if tl_start is not None and n_iter_max == 0:  # (TensorLy returns its start as it is)
        return (tl_start[0], [U.copy() for U in tl_start[1]]), []
    if tl_start is not None:
        picked = dict(zip(modes, tl_start[1], strict=True))
    elif isinstance(init, str):
        if init == "svd":
            guess = tk.hosvd(np.asarray(tensor, dtype=dtype), [ranks[m] if m in modes else 1 for m in range(N)],
                             svd=_tk_svd(svd), random_state=sketch_rng)
            picked = {m: np.asarray(guess.factors[m]) for m in modes}
        elif init == "random":  # (drawn as TensorLy draws it, its core first: np.random.seed repeats it)
            _, drawn = _tl_random_tucker(tensor, sub, modes, random_state)
            picked = dict(zip(modes, drawn, strict=True))
        else:
            raise ValueError(f"{who}: init={init!r} is not valid; expected 'svd', 'random' or (core, factors)")
    else:
        given = init[1] if isinstance(init, tuple | list) and len(init) == 2 and not hasattr(init[1], "shape") \
            else getattr(init, "factors", init)
        picked = {m: np.asarray(U) for m, U in zip(modes, given, strict=True)}
    factors = [picked[m] if m in picked else np.eye(shape[m], dtype=dtype) for m in range(N)]
    others = [m for m in range(N) if m not in modes]
    # (with a mask, TensorLy's start core too: its model fills the missing entries before the first iteration)
    start: Any = factors if tl_start is None else tk.TuckerTensor(tl_start[0], tuple(factors))
    with warnings.catch_warnings():  # TensorLy stops at n_iter_max silently
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        T = tk.hooi(tensor, ranks, init=start, tol=0, max_iter=max(int(n_iter_max), 1), svd=_tk_svd(svd),
                    random_state=sketch_rng, callback=_tl_hooi_stop(tol),
                    fixed_factors=list(range(N)) if n_iter_max == 0 else others, verbose=bool(verbose), **kw)
    core = np.asarray(T.core)
    errors = [1.0 - f for f in T.fit_history] if n_iter_max else []
    return (core, [np.asarray(T.factors[m]).copy() for m in modes]), errors


class _Decomposition:
    """TensorLy's estimator shell: ``fit(tensor)`` returns self, ``fit_transform(tensor)`` the decomposition."""

    def fit_transform(self, tensor: Any) -> Any:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def fit(self, tensor: Any) -> Any:
        self.fit_transform(tensor)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__} decomposition of rank {self.rank} (tuckerkit)"  # type: ignore[attr-defined]


class CP(_Decomposition):
    """TensorLy's ``CP`` class: the arguments of :func:`parafac`, kept; ``fit_transform`` runs it.

    After fitting, ``decomposition_`` holds the CP tensor and ``errors_`` the reconstruction errors.

    Parameters
    ----------
    rank, n_iter_max, init, svd, normalize_factors, orthogonalise, tol, random_state, verbose : see parafac
    sparsity, l2_reg, mask, cvg_criterion, fixed_modes, svd_mask_repeats, linesearch, callback : see parafac

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import CP
    >>> X = np.random.default_rng(0).random((4, 5, 6))
    >>> len(CP(rank=2, tol=1e-10).fit(X).decomposition_.factors)
    3
    """

    def __init__(self, rank: int, n_iter_max: int = 100, init: Any = "svd", svd: Any = "truncated_svd",
                 normalize_factors: bool = False, orthogonalise: Any = False, tol: float = 1e-8,
                 random_state: Any = None, verbose: Any = 0, sparsity: Any = None, l2_reg: float = 0,
                 mask: Any = None, cvg_criterion: str = "abs_rec_error", fixed_modes: Any = None,
                 svd_mask_repeats: int = 5, linesearch: bool = False, callback: Callable | None = None):
        self.rank, self.n_iter_max, self.init, self.svd = rank, n_iter_max, init, svd
        self.normalize_factors, self.orthogonalise, self.tol = normalize_factors, orthogonalise, tol
        self.random_state, self.verbose, self.sparsity, self.l2_reg = random_state, verbose, sparsity, l2_reg
        self.mask, self.cvg_criterion, self.fixed_modes = mask, cvg_criterion, fixed_modes
        self.svd_mask_repeats, self.linesearch, self.callback = svd_mask_repeats, linesearch, callback

    def fit_transform(self, tensor: Any) -> Any:
        """Decompose ``tensor``; returns (and keeps in ``decomposition_``) the CP tensor."""
        cp_tensor, errors = parafac(
            tensor, rank=self.rank, n_iter_max=self.n_iter_max, init=self.init, svd=self.svd,
            normalize_factors=self.normalize_factors, orthogonalise=self.orthogonalise, tol=self.tol,
            random_state=self.random_state, verbose=self.verbose, sparsity=self.sparsity, l2_reg=self.l2_reg,
            mask=self.mask, cvg_criterion=self.cvg_criterion, fixed_modes=self.fixed_modes,
            svd_mask_repeats=self.svd_mask_repeats, linesearch=self.linesearch, return_errors=True,
            callback=self.callback)
        self.decomposition_, self.errors_ = cp_tensor, errors
        return cp_tensor


class Tucker(_Decomposition):
    """TensorLy's ``Tucker`` class: the arguments of :func:`tucker`, kept; ``fit_transform`` runs it.

    Parameters
    ----------
    rank, n_iter_max, init, return_errors, svd, tol, fixed_factors, random_state, mask, verbose : see tucker

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import Tucker
    >>> X = np.random.default_rng(0).random((4, 5, 6))
    >>> Tucker(rank=[2, 2, 3]).fit_transform(X).core.shape
    (2, 2, 3)
    """

    def __init__(self, rank: Any = None, n_iter_max: int = 100, init: Any = "svd", return_errors: bool = False,
                 svd: Any = "truncated_svd", tol: float = 10e-5, fixed_factors: Any = None, random_state: Any = None,
                 mask: Any = None, verbose: Any = False):
        self.rank, self.n_iter_max, self.init, self.return_errors = rank, n_iter_max, init, return_errors
        self.svd, self.tol, self.fixed_factors, self.random_state = svd, tol, fixed_factors, random_state
        self.mask, self.verbose = mask, verbose

    def fit_transform(self, tensor: Any) -> Any:
        """Decompose ``tensor``; returns (and keeps in ``decomposition_``) the Tucker tensor."""
        result = tucker(tensor, rank=self.rank, fixed_factors=self.fixed_factors, n_iter_max=self.n_iter_max,
                        init=self.init, return_errors=self.return_errors, svd=self.svd, tol=self.tol,
                        random_state=self.random_state, mask=self.mask, verbose=self.verbose)
        self.decomposition_ = result
        return result


def _refuse(who: str, **options: Any) -> None:
    """One line naming the first TensorLy option given a value this layer cannot honour."""
    for name, (value, default) in options.items():
        if not (value is default or (isinstance(value, str | bool) and value == default)):
            raise NotImplementedError(f"{who}: {name}={describe(value)} is not supported by tuckerkit; expected "
                                      f"{default!r}")


def _tl_nn_svd_start(kind: str, tensor: Any, rank: Any, svd: Any, random_state: Any,
                     normalize_factors: bool = False) -> Any:
    """TensorLy's own ``init="svd"`` start of its non-negative methods (NNDSVDa on each unfolding's leading
    singular vectors, then magnitudes), made by TensorLy's ``initialize_cp`` / ``initialize_tucker`` where
    TensorLy runs on its numpy backend: the same start, so the same run step for step (tuckerkit's own
    ``"svd"`` start, the singular vectors' magnitudes, ended 0.15 apart on a default ``non_negative_parafac``).
    ``"svd"`` (tuckerkit's start) where TensorLy is not installed or runs another backend."""
    if not _tensorly_numpy():
        return "svd"
    X = np.asarray(tensor)
    if X.dtype.kind not in "f":
        X = X.astype(np.float64)
    if kind == "cp":
        from tensorly.decomposition._cp import initialize_cp

        weights, factors = initialize_cp(X, rank, init="svd", svd=svd, non_negative=True,
                                         random_state=random_state, normalize_factors=normalize_factors)
        return np.asarray(weights), [np.asarray(U) for U in factors]
    from tensorly.decomposition._tucker import initialize_tucker

    core, factors = initialize_tucker(X, rank, range(X.ndim), init="svd", svd=svd, random_state=random_state,
                                      non_negative=True)
    return _tk().TuckerTensor(np.asarray(core), tuple(np.asarray(U) for U in factors))


def _nn_cp(who: str, method: str, tensor: Any, rank: int, n_iter_max: int, init: Any, svd: Any, tol: float,
           random_state: Any, verbose: Any, normalize_factors: bool, return_errors: bool, fixed_modes: Any = None,
           nn_modes: Any = "all") -> Any:
    tk = _tk()
    tensor = _array(tensor, who)
    _check_svd(svd, who)
    N = np.ndim(tensor)
    fixed = (sorted({int(m) % N for m in (fixed_modes or ())}) if method == "hals" else
             _tl_fixed_modes(fixed_modes, N, " while tol is fixed"))  # (TensorLy's HALS fixes any mode)
    free = [n for n in range(N) if n not in fixed]
    nn = None if isinstance(nn_modes, str) and nn_modes == "all" else sorted(int(m) % N for m in nn_modes)
    if isinstance(init, str) and init == "random":  # (drawn as TensorLy draws it: np.random.seed repeats it)
        init = _tl_random_cp(tensor, rank, random_state)
    elif isinstance(init, str) and init == "svd" and not fixed:
        init = _tl_nn_svd_start("cp", tensor, rank, svd, _random_state(random_state), normalize_factors)
    with warnings.catch_warnings():  # TensorLy stops at n_iter_max silently
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        cp = tk.non_negative_cp(tensor, rank, method=method, init=init, tol=tol, max_iter=max(int(n_iter_max), 1),
                                # (the SVD start's padding columns only: a random start is made above)
                                random_state=_random_state(random_state) if isinstance(init, str) else None,
                                verbose=bool(verbose), fixed_modes=fixed,
                                nonnegative_modes=nn)
    factors = [np.asarray(U) for U in cp.factors]
    weights = np.asarray(cp.weights).astype(factors[0].dtype)  # (float32 stays float32, as TensorLy's)
    if normalize_factors:
        for n in free:
            norms = np.linalg.norm(factors[n], axis=0)
            norms = np.where(norms > 0, norms, 1.0)
            factors[n], weights = factors[n] / norms, weights * norms
    elif free:  # the scale on the first free mode: fixed factors come back as given
        factors[free[0]] = factors[free[0]] * weights[None, :]
        weights = np.ones_like(weights)
    result = _cp_result(weights.astype(factors[0].dtype), factors)
    return (result, [1.0 - f for f in cp.fit_history]) if return_errors else result


def non_negative_parafac(tensor: Any, rank: int, n_iter_max: int = 100, init: Any = "svd",
                         svd: Any = "truncated_svd", tol: float = 10e-7, random_state: Any = None, verbose: Any = 0,
                         normalize_factors: bool = False, return_errors: bool = False, mask: Any = None,
                         cvg_criterion: str = "abs_rec_error", fixed_modes: Any = None) -> Any:
    """TensorLy's ``non_negative_parafac`` (multiplicative updates), by :func:`tuckerkit.non_negative_cp`.

    Parameters
    ----------
    tensor : array
    rank : int
    n_iter_max, init, svd, tol, random_state, verbose, normalize_factors, return_errors : as TensorLy's
    fixed_modes : list of int, optional
    mask : None
        Not supported (refused in one line).
    cvg_criterion : str
        Accepted; the stop is a change of fit below ``tol``.

    Returns
    -------
    CPTensor
        TensorLy's ``CPTensor`` (``(cp, errors)`` with ``return_errors``).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import non_negative_parafac
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> bool(all((U >= 0).all() for U in non_negative_parafac(X, 2).factors))
    True
    """
    _refuse("non_negative_parafac", mask=(mask, None))
    return _nn_cp("non_negative_parafac", "mu", tensor, rank, n_iter_max, init, svd, tol, random_state, verbose,
                  normalize_factors, return_errors, fixed_modes)


def non_negative_parafac_hals(tensor: Any, rank: int, n_iter_max: int = 100, init: Any = "svd",
                              svd: Any = "truncated_svd", tol: float = 10e-8, random_state: Any = None,
                              sparsity_coefficients: Any = None, fixed_modes: Any = None, nn_modes: Any = "all",
                              exact: bool = False, normalize_factors: bool = False, verbose: Any = False,
                              return_errors: bool = False, cvg_criterion: str = "abs_rec_error") -> Any:
    """TensorLy's ``non_negative_parafac_hals``, by :func:`tuckerkit.non_negative_cp` (HALS).

    Parameters
    ----------
    tensor : array
    rank : int
    n_iter_max, init, svd, tol, random_state, verbose, normalize_factors, return_errors : as TensorLy's
    sparsity_coefficients : None
        Not supported (refused in one line).
    fixed_modes : list of int, optional
    nn_modes : "all" or set of int
        The non-negative modes (the others unconstrained).
    exact : False
        Not supported (refused in one line).
    cvg_criterion : str
        Accepted; the stop is a change of fit below ``tol``.

    Returns
    -------
    CPTensor
        TensorLy's ``CPTensor`` (``(cp, errors)`` with ``return_errors``).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import non_negative_parafac_hals
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> weights, factors = non_negative_parafac_hals(X, 2)
    >>> [U.shape for U in factors]
    [(5, 2), (6, 2), (7, 2)]
    """
    _refuse("non_negative_parafac_hals", sparsity_coefficients=(sparsity_coefficients, None), exact=(exact, False))
    return _nn_cp("non_negative_parafac_hals", "hals", tensor, rank, n_iter_max, init, svd, tol, random_state,
                  verbose, normalize_factors, return_errors, fixed_modes, nn_modes)


def _nn_tucker(who: str, method: str, tensor: Any, rank: Any, n_iter_max: int, init: Any, tol: float,
               random_state: Any, verbose: Any, return_errors: bool, svd: Any = "truncated_svd") -> Any:
    tk = _tk()
    tensor = _array(tensor, who)
    ranks = _tucker_ranks(rank, np.shape(tensor), who)
    if isinstance(init, str) and init == "random":  # (drawn as TensorLy draws it: np.random.seed repeats it)
        init = tk.TuckerTensor(*_tl_random_tucker(tensor, ranks, range(len(ranks)), random_state))
    elif isinstance(init, str) and init == "svd":
        init = _tl_nn_svd_start("tucker", tensor, ranks, svd, _random_state(random_state))
    from tuckerkit.decomposition._nonneg import CORE_STEPS, CORE_STEPS_NOW

    # (TensorLy's HALS caps its core step's FISTA iterations at n_iter_max too)
    token = CORE_STEPS_NOW.set(max(1, min(CORE_STEPS, int(n_iter_max)))) if method == "hals" else None
    try:
        with warnings.catch_warnings():  # TensorLy stops at n_iter_max silently
            warnings.simplefilter("ignore", tk.ConvergenceWarning)
            # (MU: TensorLy's stop, from the third iteration, as its tucker's; its own rule stopped one earlier)
            stop = {"tol": 0.0, "callback": _tl_hooi_stop(tol)} if method == "mu" else {"tol": tol}
            T = tk.non_negative_tucker(tensor, ranks, method=method, init=init, **stop,
                                       max_iter=max(int(n_iter_max), 1),
                                       random_state=_random_state(random_state) if isinstance(init, str) else None,
                                       verbose=bool(verbose))
    finally:
        if token is not None:
            CORE_STEPS_NOW.reset(token)
    result = _tucker_result(T.core, T.factors)
    return (result, [1.0 - f for f in T.fit_history]) if return_errors else result


def non_negative_tucker(tensor: Any, rank: Any, n_iter_max: int = 10, init: Any = "svd", tol: float = 10e-5,
                        random_state: Any = None, verbose: Any = False, return_errors: bool = False,
                        normalize_factors: bool = False) -> Any:
    """TensorLy's ``non_negative_tucker`` (multiplicative updates), by :func:`tuckerkit.non_negative_tucker`.

    Parameters
    ----------
    tensor : array
    rank : None, int or list of int
    n_iter_max, init, tol, random_state, verbose, return_errors : as TensorLy's
    normalize_factors : False
        Not supported (refused in one line).

    Returns
    -------
    TuckerTensor
        TensorLy's ``TuckerTensor`` (``(tucker, errors)`` with ``return_errors``).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import non_negative_tucker
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> non_negative_tucker(X, [2, 2, 2]).core.shape
    (2, 2, 2)
    """
    _refuse("non_negative_tucker", normalize_factors=(normalize_factors, False))
    return _nn_tucker("non_negative_tucker", "mu", tensor, rank, n_iter_max, init, tol, random_state, verbose,
                      return_errors)


def non_negative_tucker_hals(tensor: Any, rank: Any, n_iter_max: int = 100, init: Any = "svd",
                             svd: Any = "truncated_svd", tol: float = 1e-8, sparsity_coefficients: Any = None,
                             core_sparsity_coefficient: Any = None, fixed_modes: Any = None,
                             random_state: Any = None, verbose: Any = False, normalize_factors: bool = False,
                             return_errors: bool = False, exact: bool = False, algorithm: str = "fista") -> Any:
    """TensorLy's ``non_negative_tucker_hals``, by :func:`tuckerkit.non_negative_tucker` (HALS factors, FISTA core).

    Parameters
    ----------
    tensor : array
    rank : None, int or list of int
    n_iter_max, init, svd, tol, random_state, verbose, return_errors : as TensorLy's
    sparsity_coefficients, core_sparsity_coefficient, fixed_modes : None
        Not supported (refused in one line).
    normalize_factors, exact : False
        Not supported (refused in one line).
    algorithm : "fista"
        The core step (the only one).

    Returns
    -------
    TuckerTensor
        TensorLy's ``TuckerTensor`` (``(tucker, errors)`` with ``return_errors``).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import non_negative_tucker_hals
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> non_negative_tucker_hals(X, [2, 2, 2]).core.shape
    (2, 2, 2)
    """
    _check_svd(svd, "non_negative_tucker_hals")
    _refuse("non_negative_tucker_hals", sparsity_coefficients=(sparsity_coefficients, None),
            core_sparsity_coefficient=(core_sparsity_coefficient, None), fixed_modes=(fixed_modes, None),
            normalize_factors=(normalize_factors, False), exact=(exact, False), algorithm=(algorithm, "fista"))
    return _nn_tucker("non_negative_tucker_hals", "hals", tensor, rank, n_iter_max, init, tol, random_state, verbose,
                      return_errors, svd)


class _Wrapper(_Decomposition):
    """TensorLy's estimator class of one function: every keyword of the function kept, ``fit_transform`` calls it
    (looked up by name when called) with ``return_errors=True``; ``decomposition_`` and ``errors_`` after."""

    _function = ""
    _signature: inspect.Signature | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._signature = inspect.signature(globals()[cls._function])  # the real function's, kept

    #: the order TensorLy's class takes its options in positionally (the function's where it is the same)
    _positional: tuple[str, ...] = ()

    def __init__(self, rank: Any = None, *args: Any, **options: Any):
        sig = type(self)._signature
        sig = sig if sig is not None else inspect.signature(globals()[self._function])
        known = [p for p in sig.parameters if p not in ("tensor", "rank", "return_errors")]
        order = list(type(self)._positional) or known
        if len(args) > len(order):
            raise TypeError(f"{type(self).__name__}() takes at most {len(order) + 1} positional arguments (rank, "
                            f"{', '.join(order)}); received {len(args) + 1}")
        for name, value in zip(order, args, strict=False):  # (TensorLy's classes take them positionally too)
            if name in options:
                raise TypeError(f"{type(self).__name__}() got multiple values for argument {name!r}")
            options[name] = value
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected option {unknown[0]!r}; expected one of "
                            f"{', '.join(known)}")
        self.rank = rank
        for name in known:
            setattr(self, name, options.get(name, sig.parameters[name].default))
        self._options = known

    def fit_transform(self, tensor: Any) -> Any:
        """Decompose ``tensor``; returns (and keeps in ``decomposition_``) the decomposition."""
        fn = globals()[self._function]
        result, errors = fn(tensor, rank=self.rank, return_errors=True,
                            **{name: getattr(self, name) for name in self._options})
        self.decomposition_, self.errors_ = result, errors
        return result


def _wrapper_class(name: str, function: str, rank_doc: str, example: str, positional: tuple[str, ...] = ()) -> type:
    """TensorLy's estimator class ``name`` for the compat ``function`` (its docstring says which)."""
    doc = f"""TensorLy's ``{name}``: :func:`{function}` as an estimator.

    Parameters
    ----------
    rank : {rank_doc}
    **options
        Any keyword of :func:`{function}` but ``return_errors``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.tensorly import {name}
    >>> X = np.random.default_rng(0).random((4, 5, 6))
    >>> {example}
    """
    return type(name, (_Wrapper,), {"_function": function, "__doc__": doc, "__module__": __name__,
                                    "_positional": positional})


CP_NN = _wrapper_class("CP_NN", "non_negative_parafac", "int",
                       "len(CP_NN(rank=2).fit(X).decomposition_.factors)\n    3")
CP_NN_HALS = _wrapper_class("CP_NN_HALS", "non_negative_parafac_hals", "int",
                            "len(CP_NN_HALS(rank=2).fit(X).errors_) > 0\n    True",
                            ("n_iter_max", "init", "svd", "tol", "sparsity_coefficients", "fixed_modes", "nn_modes",
                             "exact", "verbose", "normalize_factors", "cvg_criterion", "random_state"))
Tucker_NN = _wrapper_class("Tucker_NN", "non_negative_tucker", "list of int",
                           "Tucker_NN(rank=[2, 2, 2]).fit_transform(X).core.shape\n    (2, 2, 2)")
Tucker_NN_HALS = _wrapper_class("Tucker_NN_HALS", "non_negative_tucker_hals", "list of int",
                                "Tucker_NN_HALS(rank=[2, 2, 2]).fit_transform(X).core.shape\n    (2, 2, 2)")
