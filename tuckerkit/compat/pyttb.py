"""pyttb's decomposition functions, computed by tuckerkit: ``from tuckerkit.compat.pyttb import cp_als``.

Same names, arguments, defaults and return values as pyttb's ``cp_als``, ``tucker_als`` and ``hosvd`` (pyttb
1.8): ``(ktensor, init, output)``, ``(ttensor, Uinit, output)`` and a ``ttensor``, pyttb's own objects when
pyttb is installed (tuckerkit's results otherwise). A random start is drawn as pyttb draws it (numpy's global
``np.random.uniform``), so ``np.random.seed(s)`` gives both libraries the same starting point. Inputs: a pyttb
``tensor`` or ``sptensor``, or a numpy array. One difference: ``dimorder`` must be the natural
order (refused in one line otherwise). Progress is printed as pyttb prints it (``printitn``; ``printitn=0`` for
none): these entry points stand in for pyttb's, whose users read those lines.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import numpy as np

from tuckerkit.compat import _installed

__all__ = ["cp_als", "hosvd", "tucker_als"]


def _tk():
    import tuckerkit

    return tuckerkit


def _wide(a: Any) -> Any:
    """float32 data in float64, as pyttb computes (its ktensors and ttensors hold float64): float32 input ran in
    single precision here, 8.3e-7 from pyttb's cp_als and a float32 hosvd core. Other dtypes as they are."""
    return a.astype(np.float64) if getattr(a, "dtype", None) == np.float32 else a


def _operand(input_tensor: Any, who: str) -> Any:
    """A pyttb tensor's data, a pyttb sptensor as a COOTensor, or the array itself (never copied, but float32
    widened to float64 as pyttb computes)."""
    kind = type(input_tensor).__name__
    module = type(input_tensor).__module__ or ""
    if module.startswith("pyttb") and kind == "tensor":
        return _wide(input_tensor.data)
    if module.startswith("pyttb") and kind == "sptensor":
        from tuckerkit.sparse import COOTensor

        return COOTensor(np.asarray(input_tensor.subs), _wide(np.asarray(input_tensor.vals).reshape(-1)),
                         tuple(input_tensor.shape))
    if module.startswith("pyttb"):
        raise TypeError(f"{who}: input_tensor is a pyttb {kind}; expected a pyttb tensor or sptensor (or a numpy "
                        "array)")
    return _wide(input_tensor)


def _nvecs(input_tensor: Any, X: Any, ranks: Any, modes: Any, say: bool = False) -> list[np.ndarray] | None:
    """pyttb's ``nvecs`` start (each mode's leading eigenvectors of its unfolding's Gram, pyttb's signs), made by
    pyttb itself where it is installed (``say``: with its lines, as ``tucker_als`` prints them), so that the
    returned start (``Minit`` / ``Uinit``) is pyttb's; None without pyttb (tuckerkit's SVD start then, the same
    subspaces)."""
    if not _installed("pyttb"):
        return None
    import pyttb

    T = input_tensor if (type(input_tensor).__module__ or "").startswith("pyttb") else pyttb.tensor(np.asarray(X))
    out = []
    for n in modes:
        if say:
            print(f" Computing {ranks[n]} leading e-vector for factor {n}.\n")
        out.append(np.asarray(T.nvecs(n, ranks[n]), dtype=np.float64))
    return out


def _natural_order(dimorder: Any, N: int, who: str) -> None:
    if dimorder is not None and [int(d) for d in np.asarray(dimorder).reshape(-1)] != list(range(N)):
        raise NotImplementedError(f"{who}: dimorder={[int(d) for d in np.asarray(dimorder).reshape(-1)]} is not "
                                  "supported by "
                                  f"tuckerkit; expected None or {list(range(N))}")


def _prepare(input_tensor: Any, dimorder: Any, who: str) -> tuple[Any, tuple[int, ...], int]:
    X = _operand(input_tensor, who)
    shape = tuple(int(s) for s in X.shape)
    _natural_order(dimorder, len(shape), who)
    return X, shape, len(shape)


class _Progress:
    """pyttb's iteration lines (0-based iteration numbers), every ``printitn`` iterations and the last."""

    def __init__(self, printitn: Any, fmt: str):
        self.every = int(printitn) if printitn and printitn > 0 else 0
        self.fmt, self.last = fmt, -1

    def __call__(self, state: Any) -> None:
        it = state.iteration - 1
        if self.every and it % self.every == 0:
            print(self.fmt.format(it=it, fit=state.fit, change=state.fit_change if it else state.fit))
            self.last = it

    def finish(self, history: tuple[float, ...]) -> None:
        it = len(history) - 1
        if self.every and it > self.last and history:
            change = abs(history[-1] - history[-2]) if it else history[-1]
            print(self.fmt.format(it=it, fit=history[-1], change=change))


def _fix_signs(weights: np.ndarray, factors: list[np.ndarray]) -> None:
    """pyttb's ``fixsigns``: in each component, make the largest-magnitude entry of every factor column
    positive by flipping pairs of columns; with an odd count, the column whose largest entry is smallest in
    magnitude stays negative (the model is unchanged)."""
    for r in range(weights.shape[0]):
        peaks = [U[np.argmax(np.abs(U[:, r])), r] for U in factors]
        negative = [n for n, p in enumerate(peaks) if p < 0]
        if len(negative) % 2:
            keep = min(negative, key=lambda n: abs(peaks[n]))
            negative.remove(keep)
        for n in negative:
            factors[n][:, r] *= -1


def cp_als(input_tensor: Any, rank: int, stoptol: float = 1e-4, maxiters: int = 1000, dimorder: Any = None,
           optdims: Any = None, init: Any = "random", printitn: int = 1, fixsigns: bool = True) -> tuple:
    """pyttb's ``cp_als``, computed by :func:`tuckerkit.cp_als`.

    ``optdims`` (the modes to optimize) becomes ``fixed_modes`` (the others); ``init`` is ``"random"`` (drawn
    as pyttb draws it), ``"nvecs"`` (tuckerkit's ``"svd"``) or a ``ktensor``.

    Parameters
    ----------
    input_tensor : pyttb tensor or sptensor, or array
    rank : int
    stoptol : float
        Stop when the fit changes by less than this.
    maxiters : int
    dimorder : None
        Only the natural order.
    optdims : list of int, optional
        The modes to optimize (the others stay as initialized).
    init : {"random", "nvecs"} or ktensor
    printitn : int
        Print every ``printitn`` iterations (0: never).
    fixsigns : bool
        Make each factor column's largest-magnitude entry positive where the model allows.

    Returns
    -------
    (ktensor, init, output)
        The model (pyttb's ``ktensor``, columns normalized, components sorted by weight, signs fixed), the
        start as a ``ktensor`` and a dict with ``params``, ``iters``, ``normresidual`` and ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.pyttb import cp_als
    >>> rng = np.random.default_rng(0)
    >>> X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 2)) for n in (5, 6, 7)))
    >>> np.random.seed(0)  # the random start is drawn as pyttb draws it, from numpy's global generator
    >>> M, M0, out = cp_als(X, 2, stoptol=1e-10, printitn=0)
    >>> round(out["fit"], 6)
    1.0
    """
    tk = _tk()
    X, shape, N = _prepare(input_tensor, dimorder, "cp_als")
    _check_iteration_args("cp_als", stoptol, maxiters)
    opt = list(range(N)) if optdims is None else [int(d) for d in np.asarray(optdims).reshape(-1)]
    bad = [d for d in opt if not 0 <= d < N]
    if bad:  # (-1 or N fixed every mode: the random start came back as the result)
        raise ValueError(f"cp_als: optdims={opt} holds {bad}; expected modes 0..{N - 1}")
    fixed = [n for n in range(N) if n not in opt]
    if isinstance(init, str) and init.lower() == "random":
        start: Any = [np.random.uniform(0, 1, (shape[n], rank)) for n in range(N)]  # noqa: NPY002 (pyttb's draw)
    elif isinstance(init, str) and init.lower() == "nvecs":
        vecs = _nvecs(input_tensor, X, [rank] * N, range(N))  # (pyttb's own: its start, and its Minit)
        start = "svd" if vecs is None else list(vecs)
    else:
        start = init
    progress = _Progress(printitn, " Iter {it}: f = {fit:e} f-delta = {change:7.1e}")
    if progress.every:
        print("CP_ALS:")
    with warnings.catch_warnings():  # pyttb stops at maxiters silently
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        cp = tk.cp_als(X, rank, init=start, tol=stoptol, max_iter=maxiters, fixed_modes=fixed, callback=progress,
                       linesearch=False)  # pyttb: plain ALS
    progress.finish(cp.fit_history)
    weights = np.array(cp.weights, dtype=np.float64)
    factors = [np.array(U, dtype=np.float64) for U in cp.factors]
    norms = [np.linalg.norm(U, axis=0) for U in factors]
    for n, U in enumerate(factors):
        nz = np.where(norms[n] > 0, norms[n], 1.0)
        factors[n] = U / nz
        weights = weights * nz
    order = np.argsort(-weights, kind="stable")
    weights, factors = weights[order], [U[:, order] for U in factors]
    if fixsigns:
        _fix_signs(weights, factors)
    fit = float(cp.fit)
    normX = float(np.linalg.norm(np.asarray(X).ravel(order="K"))) if not hasattr(X, "norm") else float(X.norm())
    output = {
        "params": {"stoptol": stoptol, "maxiters": maxiters, "dimorder": np.arange(N) if dimorder is None else dimorder,
                   "optdims": np.asarray(opt),
                   "printitn": printitn, "fixsigns": fixsigns},
        "iters": cp.n_iter - 1,  # pyttb's 0-based index of the last iteration
        "normresidual": (1.0 - fit) * normX,
        "fit": fit,
    }
    if progress.every:
        print(f" Final f = {fit:e}")
    if isinstance(start, list):
        init_model: Any = (np.ones(rank), start)
    elif isinstance(start, str):
        init_model = None
    else:
        init_model = start
    if _installed("pyttb"):
        import pyttb

        model = pyttb.ktensor([U.copy() for U in factors], weights.copy())
        if isinstance(init_model, tuple):
            init_model = pyttb.ktensor([U.copy() for U in init_model[1]], init_model[0].copy())
        return model, init_model, output
    return tk.CPTensor(weights, tuple(factors)), init_model, output


def _check_iteration_args(who: str, stoptol: Any, maxiters: Any) -> None:
    """pyttb's names in the messages (tuckerkit's ``tol`` / ``max_iter`` had been named for ``stoptol`` /
    ``maxiters``)."""
    if isinstance(maxiters, bool) or not isinstance(maxiters, numbers.Integral) or maxiters < 1:
        raise ValueError(f"{who}: maxiters={maxiters!r} is invalid; expected an integer >= 1")
    if isinstance(stoptol, bool) or not isinstance(stoptol, numbers.Real) or not 0 <= float(stoptol) < float("inf"):
        raise ValueError(f"{who}: stoptol={stoptol!r} is invalid; expected a number >= 0")


def tucker_als(input_tensor: Any, rank: Any, stoptol: float = 1e-4, maxiters: int = 1000, dimorder: Any = None,
               init: Any = "random", printitn: int = 1) -> tuple:
    """pyttb's ``tucker_als`` (HOOI), computed by :func:`tuckerkit.hooi`.

    ``init`` is ``"random"`` (drawn as pyttb draws it: uniform factors for every mode but the first),
    ``"nvecs"`` (tuckerkit's ``"hosvd"``) or a list of factor matrices.

    Parameters
    ----------
    input_tensor : pyttb tensor or array
    rank : int or list of int
    stoptol : float
    maxiters : int
    dimorder : None
        Only the natural order.
    init : {"random", "nvecs"} or list of arrays
    printitn : int
        Print every ``printitn`` iterations (0: never).

    Returns
    -------
    (ttensor, Uinit, output)
        The model (pyttb's ``ttensor``), the starting factors (the first is None, as in pyttb) and a dict with
        ``params``, ``iters``, ``normresidual`` and ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.pyttb import tucker_als
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> T, U0, out = tucker_als(X, [2, 3, 4], printitn=0)
    >>> T.core.shape, out["iters"] > 0
    ((2, 3, 4), True)
    """
    tk = _tk()
    X, shape, N = _prepare(input_tensor, dimorder, "tucker_als")
    _check_iteration_args("tucker_als", stoptol, maxiters)
    ranks = [int(rank)] * N if np.ndim(rank) == 0 else [int(r) for r in rank]
    if len(ranks) != N:  # (a bare IndexError)
        raise ValueError(f"tucker_als: rank has {len(ranks)} entries; expected {N} (one per mode) or one number")
    if isinstance(init, str) and init.lower() not in ("random", "nvecs", "eigs"):  # (split into characters)
        raise ValueError(f"tucker_als: init={init!r} is not valid; expected 'random', 'nvecs' or a list of factor "
                         "matrices")
    if isinstance(init, str) and init.lower() == "random":
        Uinit: list[Any] = [None] + [np.random.uniform(0, 1, (shape[n], ranks[n]))  # noqa: NPY002 (pyttb's draw)
                                     for n in range(1, N)]
        start: Any = [np.zeros((shape[0], ranks[0])), *Uinit[1:]]  # the first is never read before its update
    elif isinstance(init, str) and init.lower() in ("nvecs", "eigs"):
        vecs = _nvecs(input_tensor, X, ranks, range(1, N), say=True)  # (pyttb's own: its start, and its Uinit)
        if vecs is None:
            Uinit, start = [None] * N, "hosvd"
        else:
            Uinit = [None, *vecs]
            start = [np.zeros((shape[0], ranks[0])), *vecs]
    else:
        Uinit = list(init)
        start = [np.zeros((shape[0], ranks[0])) if U is None else U for U in Uinit]
    progress = _Progress(printitn, " Iter {it}: fit = {fit:e} fitdelta = {change:7.1e}")
    if progress.every:
        print("\nTucker Alternating Least-Squares:\n")
    with warnings.catch_warnings():  # pyttb stops at maxiters silently
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        T = tk.hooi(X, ranks, init=start, tol=stoptol, max_iter=maxiters, callback=progress)
    fit = float(T.fit)
    normX = float(np.linalg.norm(np.asarray(X).ravel(order="K"))) if not hasattr(X, "norm") else float(X.norm())
    output = {"params": (stoptol, maxiters, printitn, np.arange(N) if dimorder is None else dimorder),
              "iters": T.n_iter - 1, "normresidual": (1.0 - fit) * normX, "fit": fit}
    return (T.to_pyttb() if _installed("pyttb") else T), Uinit, output


def hosvd(input_tensor: Any, tol: float, verbosity: float = 1, dimorder: Any = None, sequential: bool = True,
          ranks: Any = None) -> Any:
    """pyttb's ``hosvd``: ranks chosen so that the relative error is at most ``tol`` (or ``ranks`` given).

    ``sequential=True`` is :func:`tuckerkit.st_hosvd` (in ``dimorder``), False :func:`tuckerkit.hosvd`.

    Parameters
    ----------
    input_tensor : pyttb tensor or array
    tol : float
        Relative error target (tuckerkit's ``max_error``).
    verbosity : float
        Accepted; nothing is printed.
    dimorder : list of int, optional
        The order of the sequential truncation (default: natural).
    sequential : bool
    ranks : list of int, optional
        Fixed ranks instead of ``tol``.

    Returns
    -------
    ttensor
        pyttb's ``ttensor`` when pyttb is installed (tuckerkit's ``TuckerTensor`` otherwise).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.compat.pyttb import hosvd
    >>> X = np.random.default_rng(0).random((5, 6, 7))
    >>> T = hosvd(X, 0.5)
    >>> bool(np.linalg.norm(X - T.full().data) <= 0.5 * np.linalg.norm(X))
    True
    """
    tk = _tk()
    X = _operand(input_tensor, "hosvd")
    given = None if ranks is None else [int(r) for r in np.asarray(ranks).reshape(-1)]
    target = None if given is not None else tol
    if given is None and isinstance(tol, numbers.Real) and not isinstance(tol, bool) and tol == 0:
        given = list(np.shape(X) if not hasattr(X, "shape") else X.shape)  # (pyttb: tol 0 keeps every rank)
        target = None
    if sequential:
        order: Any = list(range(np.ndim(X) if not hasattr(X, "ndim") else X.ndim)) if dimorder is None else \
            [int(d) for d in np.asarray(dimorder).reshape(-1)]
        T = tk.st_hosvd(X, given, max_error=target, order=order)
    else:
        T = tk.hosvd(X, given, max_error=target)
    return T.to_pyttb() if _installed("pyttb") else T
