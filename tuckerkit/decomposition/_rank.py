"""Choosing and comparing ranks: core consistency (CORCONDIA), the factor match score, and a rank sweep.

CORCONDIA (Bro and Kiers, 2003) asks how far the least-squares Tucker core of ``X`` on a CP model's factors is
from the superdiagonal core the CP model assumes: ``G = X x_n pinv(U_n)``, ``100 (1 - ||G - T||^2 / R)``.
It is computed through the operand's projection (``X.multi_ttm`` with the factors' pseudo-inverses: one
pass over a dense tensor, the CSF kernel on a sparse one), never through a Khatri-Rao product.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit._validation import check_callback, check_choice, check_cp_rank, describe
from tuckerkit.backend import to_host


def _cp_parts(cp: Any, name: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(weights, factors)`` of a CP model (tuckerkit's, TensorLy's, pyttb's, or a pair) on the host."""
    from tuckerkit._validation import _unpack_model

    try:
        model = _unpack_model(cp, "cp")
    except TypeError:
        raise TypeError(f"{name} is {describe(cp)}, a Tucker model; expected a CP model (CPTensor) or a "
                        "(weights, factors) pair") from None
    if model is None:
        if isinstance(cp, list | tuple) and len(cp) == 2 and isinstance(cp[1], list | tuple):
            model = (cp[0], list(cp[1]))
        else:
            raise TypeError(f"{name} is {describe(cp)}; expected a CP model (CPTensor) or a (weights, factors) pair")
    w, factors = model
    host = [np.asarray(to_host(U)) for U in factors]
    if w is not None:
        w = np.asarray(to_host(w))
    if any(np.iscomplexobj(a) for a in (*host, w) if a is not None):
        # (a cast to float64 dropped the imaginary parts with only numpy's ComplexWarning: CORCONDIA 100.0)
        raise TypeError(f"{name} has complex factors or weights; expected a real CP model (these diagnostics are "
                        "defined for real ones)")
    factors = [np.asarray(U, dtype=np.float64) for U in host]
    if not factors or any(U.ndim != 2 for U in factors):
        raise ValueError(f"{name} has no factor matrices; expected one (I_n, R) matrix per mode")
    R = factors[0].shape[1]
    if any(U.shape[1] != R for U in factors):
        raise ValueError(f"{name}'s factors have {[U.shape[1] for U in factors]} columns; expected the same rank")
    if R == 0:
        raise ValueError(f"{name} has rank 0 (no components); expected at least one component")
    w = np.ones(R) if w is None else np.asarray(w, dtype=np.float64).reshape(-1)
    if w.shape != (R,):
        raise ValueError(f"{name}'s weights have shape {w.shape}; expected ({R},)")
    bad = sum(int(np.count_nonzero(~np.isfinite(a))) for a in (w, *factors))
    if bad:
        # (an infinity hung LAPACK's SVD inside pinv; a NaN gave its raw error, a non-finite weight NaN)
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s) in its weights or factors; expected "
                         "finite numbers")
    return w, factors


def corcondia(X: Any, cp: Any) -> float:
    """Core consistency diagnostic (CORCONDIA) of a CP model of ``X``, in percent.

    ``G = X x_0 pinv(U_0) x_1 ... x_{N-1} pinv(U_{N-1})`` (the weights folded into ``U_0``) is the best Tucker
    core on the CP factors; the score is ``100 (1 - ||G - T||^2 / R)`` with ``T`` the superdiagonal identity.
    Close to 100: the CP model is appropriate (the rank is not too high); low or negative: over-factored.
    ``X`` is read once through its projection (dense, sparse, out-of-core), never densified.

    Parameters
    ----------
    X : array, COOTensor or CSFTensor, shape (I_0, ..., I_{N-1})
    cp : CPTensor, TensorLy ``CPTensor``, pyttb ``ktensor`` or ``(weights, factors)``

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 3)) for n in (10, 11, 12)))
    >>> round(tk.corcondia(X, tk.cp_als(X, 3, tol=1e-12, max_iter=1000)), 4)
    100.0
    """
    from tuckerkit.engine import as_operand

    op = as_operand(X, check_finite=True, real=True, min_ndim=2)
    w, factors = _cp_parts(cp, "cp")
    if tuple(U.shape[0] for U in factors) != tuple(op.shape):
        raise ValueError(f"cp has shape {tuple(U.shape[0] for U in factors)}; expected the shape of X {op.shape}")
    R = w.shape[0]
    # (its core has R^N entries, in float64 with its target and their difference: rank 2000 on a 3-way tensor
    # asked numpy for 59.6 GiB after 17 s of sweeps)
    _check_corcondia_memory(R, len(factors))
    peak = float(np.max(np.abs(w))) if w.size else 0.0
    span = 50 if np.dtype(op.dtype).char in "fF" else 500  # (single precision's range is 2^+-126)
    if peak > 0 and not 2.0**-span <= peak <= 2.0**span:  # (X and the weights by one power of two: G is unchanged,
        # and the weights folded into U_0 neither overflow nor underflow its pinv: 1e307 and 1e-310 gave NaN)
        lim = 1000 if span == 500 else 120  # (a power representable in X's dtype: 2^1029 is not, nor 2^130 in float32)
        k = max(-lim, min(lim, -math.frexp(peak)[1]))
        op = op.scaled(math.ldexp(1.0, k))
        w = np.asarray(w, dtype=np.float64) * math.ldexp(1.0, k)
    factors[0] = factors[0] * w[None, :]
    pinvs = {n: op.xp.asarray(np.linalg.pinv(U).astype(op.dtype)) for n, U in enumerate(factors)}
    G = np.asarray(to_host(op.multi_ttm(pinvs)), dtype=np.float64)
    T = np.zeros_like(G)
    T[(np.arange(R),) * G.ndim] = 1.0
    return float(100.0 * (1.0 - np.sum((G - T) ** 2) / R))


def _check_corcondia_memory(R: int, N: int) -> None:
    from tuckerkit._validation import check_fits_memory

    check_fits_memory(3.0 * 8 * float(R) ** N, f"CORCONDIA at rank {R} (a core of {R}^{N} entries)",
                      "choose a smaller rank (CORCONDIA is meant for ranks up to a few tens)")


@dataclass(frozen=True)
class FactorMatch:
    """How well two CP models agree, after aligning their components (:func:`factor_match_score`).

    Unpacks as ``score, permutation = factor_match_score(a, b)``.

    Attributes
    ----------
    score : float
        Mean over the components of ``a`` of the matched congruences, in [0, 1] (cosines rounded above 1 are
        taken as 1); 1 means the same model up to permutation, scaling and sign.
    permutation : ndarray of int, shape (R_a,)
        ``b``'s component matched to each component of ``a``: ``b.factors[n][:, permutation]`` lines up.
    congruences : ndarray, shape (R_a,)
        Per-component score: the product over the modes of ``|cos|`` between the matched columns (times the
        weight penalty ``1 - |w_a - w_b| / max(w_a, w_b)`` when ``weights=True``).
    signs : ndarray of +1/-1, shape (R_a, N)
        The sign that aligns each matched column of ``b`` with ``a`` in each mode.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> a = tk.CPTensor(np.ones(2), tuple(rng.random((n, 2)) for n in (4, 5, 6)))
    >>> score, perm = tk.factor_match_score(a, a)
    >>> round(score, 12), perm.tolist()
    (1.0, [0, 1])
    """

    score: float
    permutation: np.ndarray
    congruences: np.ndarray
    signs: np.ndarray

    def __iter__(self):
        return iter((self.score, self.permutation))


def factor_match_score(a: Any, b: Any, *, weights: bool = False) -> FactorMatch:
    """Factor match score (FMS) of two CP models, with their components aligned by the best permutation.

    The congruence of components ``r`` of ``a`` and ``s`` of ``b`` is the product over the modes of the
    absolute cosines between their columns (signs may flip in pairs, and scale moves between modes and
    weights, without changing a CP model); the permutation maximizing the total congruence is found by
    the Hungarian method (``scipy.optimize.linear_sum_assignment``), so ``b`` may have more components
    than ``a``.

    Parameters
    ----------
    a, b : CPTensor, TensorLy ``CPTensor``, pyttb ``ktensor`` or ``(weights, factors)``
        Of the same shape; ``b`` has at least as many components as ``a``.
    weights : bool, default False
        Also penalize differing component norms by ``1 - |l_a - l_b| / max(l_a, l_b)``, where ``l`` is the
        weight times the product of the column norms (the Tensor Toolbox's ``score`` with weights).

    Returns
    -------
    FactorMatch
        ``score`` and ``permutation`` (unpackable as that pair), ``congruences`` and ``signs``.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> A = [rng.random((n, 3)) for n in (5, 6, 7)]
    >>> a = tk.CPTensor(np.ones(3), tuple(A))
    >>> b = tk.CPTensor(np.ones(3), (-2 * A[0][:, [2, 0, 1]], -A[1][:, [2, 0, 1]], 0.5 * A[2][:, [2, 0, 1]]))
    >>> score, perm = tk.factor_match_score(a, b)
    >>> round(score, 12), perm.tolist()
    (1.0, [1, 2, 0])
    """
    from scipy.optimize import linear_sum_assignment

    from tuckerkit._validation import check_bool

    weights = check_bool(weights, "weights")
    wa, fa = _cp_parts(a, "a")
    wb, fb = _cp_parts(b, "b")
    if tuple(U.shape[0] for U in fa) != tuple(U.shape[0] for U in fb):
        raise ValueError(f"a has shape {tuple(U.shape[0] for U in fa)} and b has shape "
                         f"{tuple(U.shape[0] for U in fb)}; expected the same shape")
    Ra, Rb = wa.shape[0], wb.shape[0]
    if Rb < Ra:
        raise ValueError(f"b has {Rb} components and a has {Ra}; expected b to have at least as many as a")
    C = np.ones((Ra, Rb))
    S = []
    la, lb = np.abs(wa).copy(), np.abs(wb).copy()
    for A, B in zip(fa, fb, strict=True):
        na, nb = np.linalg.norm(A, axis=0), np.linalg.norm(B, axis=0)
        la, lb = la * na, lb * nb
        cos = (A.T @ B) / np.where(na == 0, 1, na)[:, None] / np.where(nb == 0, 1, nb)[None, :]
        C = C * np.minimum(np.abs(cos), 1.0)  # (a column against itself: 1 + 2e-16 by rounding)
        S.append(np.where(cos < 0, -1.0, 1.0))
    if weights:
        big = np.maximum(la[:, None], lb[None, :])
        C = C * (1 - np.abs(la[:, None] - lb[None, :]) / np.where(big == 0, 1, big))
    rows, cols = linear_sum_assignment(-C)
    perm = np.empty(Ra, dtype=np.intp)
    perm[rows] = cols
    cong = C[np.arange(Ra), perm]
    signs = np.stack([s[np.arange(Ra), perm] for s in S], axis=1)
    return FactorMatch(float(np.mean(cong)), perm, cong, signs)


# ---------------------------------------------------------------------------------------------------
# rank sweep
# ---------------------------------------------------------------------------------------------------
SWEEP_METHODS = ("cp", "nn-cp", "tucker", "nn-tucker")


@dataclass(frozen=True)
class RankRow:
    """One rank of a :class:`RankSweep`.

    Attributes
    ----------
    rank : int
    error : float
        Relative error ``||X - X_hat|| / ||X||``.
    fit : float
        ``1 - error``.
    corcondia : float
        Core consistency in percent (NaN for Tucker methods).
    seconds : float
        Wall time of the decomposition.
    n_iter : int
    converged : bool

    Examples
    --------
    >>> import tuckerkit as tk
    >>> tk.RankRow(2, 0.1, 0.9, 99.5, 0.01, 12, True).fit
    0.9
    """

    rank: int
    error: float
    fit: float
    corcondia: float
    seconds: float
    n_iter: int
    converged: bool

    def to_markdown(self) -> str:
        """The row's line of :meth:`RankSweep.to_markdown` (below :data:`MARKDOWN_HEADER`)."""
        cc = "-" if math.isnan(self.corcondia) else f"{self.corcondia:.1f}"
        return (f"| {self.rank} | {self.error:.4g} | {self.fit:.4f} | {cc} | {self.seconds:.3g} | {self.n_iter} | "
                f"{'yes' if self.converged else 'no'} |")


#: the two header lines of :meth:`RankSweep.to_markdown`
MARKDOWN_HEADER = ("| rank | error | fit | corcondia | seconds | iterations | converged |",
                   "|---:|---:|---:|---:|---:|---:|:---|")


@dataclass(frozen=True)
class RankSweep:
    """The table a rank sweep returns (:func:`rank_sweep`): one :class:`RankRow` per rank.

    Attributes
    ----------
    method : str
    rows : tuple of RankRow
    threshold : float
        CORCONDIA below which a rank counts as over-factored.
    seed : int or None
        The seed every rank's decomposition got (see Notes).

    Notes
    -----
    ``str(table)`` (or :meth:`to_markdown`) prints it; :meth:`plot` draws error and CORCONDIA against the
    rank (matplotlib); ``suggested_rank`` is the largest rank before CORCONDIA first falls below
    ``threshold`` (CP methods; None for Tucker, which has no core consistency). ``seed``: the seed every rank's
    decomposition got (``random_state`` itself when an integer, so ``cp_als(X, r, random_state=seed)`` rebuilds
    a row's model; drawn once from a Generator or from fresh entropy otherwise).

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 2)) for n in (8, 9, 10)))
    >>> table = tk.rank_sweep(X, [1, 2, 3], random_state=0)
    >>> [row.rank for row in table.rows], table.suggested_rank
    ([1, 2, 3], 2)
    """

    method: str
    rows: tuple[RankRow, ...]
    threshold: float = 90.0
    seed: int | None = None

    @property
    def suggested_rank(self) -> int | None:
        if self.method not in ("cp", "nn-cp") or not self.rows:
            return None
        best = None
        for row in sorted(self.rows, key=lambda r: r.rank):  # (rows in the order the ranks were given: ascending)
            if not row.corcondia >= self.threshold:
                break
            best = row.rank
        return best

    def to_markdown(self) -> str:
        """The table as Markdown (one line per rank)."""
        return "\n".join([*MARKDOWN_HEADER, *(r.to_markdown() for r in self.rows)])

    def __str__(self) -> str:
        return self.to_markdown()

    def plot(self, ax: Any = None) -> Any:
        """Relative error (left axis) and CORCONDIA (right axis, CP) against the rank; returns the axes.

        Needs matplotlib; ``ax`` is an existing axes to draw on (a new figure otherwise).
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("RankSweep.plot needs matplotlib; install it with pip install matplotlib") from None
        if ax is None:
            _, ax = plt.subplots(figsize=(5, 3.2))
        ranks = [r.rank for r in self.rows]
        ax.plot(ranks, [r.error for r in self.rows], "o-", color="C0", label="relative error")
        ax.set_xlabel("rank")
        ax.set_ylabel("relative error", color="C0")
        ax.set_xticks(ranks)
        if self.method in ("cp", "nn-cp"):
            ax2 = ax.twinx()
            ax2.plot(ranks, [r.corcondia for r in self.rows], "s--", color="C1", label="CORCONDIA")
            ax2.set_ylabel("CORCONDIA (%)", color="C1")
            ax2.set_ylim(min(-5.0, *(r.corcondia for r in self.rows if math.isfinite(r.corcondia))), 105)
        ax.set_title(f"rank sweep ({self.method})")
        return ax


def rank_sweep(
    X: Any,
    ranks: Sequence[int],
    *,
    method: str = "cp",
    tol: float | None = None,
    max_iter: int | None = None,
    random_state: Any = None,
    threshold: float = 90.0,
    device: Any = None,
    callback: Any = None,
) -> RankSweep:
    """Decompose ``X`` at each rank and tabulate error, fit, CORCONDIA and time, to choose a rank.

    Parameters
    ----------
    X : array, COOTensor or CSFTensor
    ranks : sequence of int
        CP ranks, each once (the table lists them ascending); for Tucker methods each entry is used for every
        mode (capped at the mode's size).
    method : {"cp", "nn-cp", "tucker", "nn-tucker"}, default "cp"
        :func:`cp_als`, :func:`non_negative_cp`, :func:`hooi` or :func:`non_negative_tucker`.
    tol, max_iter : optional
        Passed on (each method's own defaults when None).
    random_state : None, int or numpy Generator
        Every rank gets the same seed, so the table is repeatable: an integer is that seed (``cp_als(X, r,
        random_state=random_state)`` rebuilds a row's model); from a Generator or None one is drawn once. The
        table records it (``seed``).
    threshold : float, default 90.0
        The CORCONDIA below which a rank counts as over-factored (``suggested_rank``).
    device : optional
        Passed on.
    callback : callable, optional
        ``callback(row)`` with each :class:`RankRow` as soon as its rank is done (a long sweep's rows shown as
        they come; the command line's ``ranks`` prints them so).

    Returns
    -------
    RankSweep

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> X = np.einsum("ir,jr,kr->ijk", *(rng.standard_normal((n, 3)) for n in (8, 9, 10)))
    >>> table = tk.rank_sweep(X, range(1, 5), random_state=0)
    >>> table.suggested_rank, round(table.rows[2].fit, 4)
    (3, 1.0)
    """
    import warnings

    from tuckerkit._validation import check_random_state
    from tuckerkit.decomposition._cp import cp_als
    from tuckerkit.decomposition._nonneg import non_negative_cp, non_negative_tucker
    from tuckerkit.decomposition._results import ConvergenceWarning
    from tuckerkit.decomposition._tucker import hooi
    from tuckerkit.engine import as_operand

    method = check_choice(method, "method", SWEEP_METHODS)
    if isinstance(ranks, str | bytes) or not hasattr(ranks, "__iter__"):
        raise TypeError(f"ranks is {describe(ranks)}; expected a sequence of positive integers such as [1, 2, 3]")
    rank_list = [check_cp_rank(r, "ranks") for r in ranks]
    if not rank_list:
        raise ValueError("ranks is empty; expected at least one rank")
    twice = sorted({r for r in rank_list if rank_list.count(r) > 1})
    if twice:
        raise ValueError(f"ranks has {twice[0]} more than once; expected each rank once")
    rank_list.sort()  # (suggested_rank reads the ranks in ascending order, whatever order they came in)
    if isinstance(threshold, str | bytes | bool | np.bool_):
        raise TypeError(f"threshold must be a number; received {describe(threshold)}")
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        raise TypeError(f"threshold must be a number; received {describe(threshold)}") from None
    if not math.isfinite(threshold):  # (NaN: no rank ever fell below it, and the suggestion was silently None)
        raise ValueError(f"threshold must be a finite number (a CORCONDIA percentage such as 90); received {threshold}")
    check_callback(callback)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool | np.bool_):
        check_random_state(random_state)  # (its checks: a negative seed is refused as cp_als refuses it)
        seed = int(random_state)
    else:
        seed = int(check_random_state(random_state).integers(2**31 - 1))
    op = as_operand(X, check_finite=True, real=True, min_ndim=2)
    if method in ("cp", "nn-cp"):  # (before the sweep, not after its decompositions)
        _check_corcondia_memory(max(rank_list), op.ndim)
    opts: dict[str, Any] = {"random_state": seed, "device": device}
    if tol is not None:
        opts["tol"] = tol
    if max_iter is not None:
        opts["max_iter"] = max_iter
    rows = []
    model: Any
    for r in rank_list:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            if method in ("cp", "nn-cp"):
                model = (cp_als if method == "cp" else non_negative_cp)(op, r, **opts)
            else:
                rr = [min(r, s) for s in op.shape]
                model = (hooi if method == "tucker" else non_negative_tucker)(op, rr, **opts)
        seconds = time.perf_counter() - t0
        cc = corcondia(op, model) if method in ("cp", "nn-cp") else float("nan")
        rows.append(RankRow(r, 1.0 - model.fit, model.fit, cc, seconds, model.n_iter, model.converged))
        if callback is not None:
            callback(rows[-1])
    return RankSweep(method, tuple(rows), threshold, seed)
