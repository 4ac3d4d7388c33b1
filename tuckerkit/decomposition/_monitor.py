"""The iteration bookkeeping shared by HOOI and CP-ALS: fit history, callback, stopping rule, warning."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit._validation import check_verbose
from tuckerkit.decomposition._results import ConvergenceWarning

logger = logging.getLogger("tuckerkit.decomposition")

#: when the running decomposition call started (``time.perf_counter()``, set on entry by
#: :func:`~tuckerkit.decomposition._entry.decomposition_call` and CP-APR): ``IterationState.elapsed`` counts from
#: there, the start included (a sparse SVD start was 0.12 of 0.13 s that a clock started at the loop left out)
CALL_START: ContextVar[float | None] = ContextVar("tuckerkit_call_start", default=None)


@contextlib.contextmanager
def call_clock(started: float | None = None) -> Iterator[None]:
    """:data:`CALL_START` set to ``started`` (default: now) for the body: a decomposition call's clock."""
    token = CALL_START.set(time.perf_counter() if started is None else started)
    try:
        yield
    finally:
        CALL_START.reset(token)


def stops(answer: Any) -> bool:
    """Whether a callback's answer stops the iterations: True, or numpy's True (a comparison of numpy numbers,
    ``np.abs(s.fit_change) < 1e-3``, answers ``np.True_``, which ``is True`` had ignored); anything else (None,
    a number, the state itself) does not."""
    return (answer is True) or (isinstance(answer, np.bool_) and bool(answer))


@dataclass(frozen=True)
class IterationState:
    """What ``callback(state)`` receives after each iteration; return True to stop.

    Attributes
    ----------
    iteration : int
        1-based iteration number.
    fit : float
        ``1 - ||X - X_hat|| / ||X||`` after this iteration.
    fit_change : float
        Change of fit since the previous iteration.
    elapsed : float
        Seconds since the decomposition started.
    factors : tuple of arrays
        The current factor matrices (do not modify them).
    weights : array or None
        CP-ALS: the current weights (do not modify them); None for Tucker.

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> X = np.random.default_rng(0).standard_normal((6, 7, 8))
    >>> seen = []
    >>> T = tk.hooi(X, (2, 2, 2), callback=lambda s: seen.append(s.iteration) or s.iteration == 3)
    >>> seen, T.n_iter
    ([1, 2, 3], 3)
    """

    iteration: int
    fit: float
    fit_change: float
    elapsed: float
    factors: tuple[Any, ...]
    weights: Any = None


class Monitor:
    """Records fits and decides when to stop.

    Stops when the fit changes by less than ``tol``, or (``tol > 0``) when it decreases, which in exact
    arithmetic it never does for HOOI and ALS (rounding noise, float32); or when the callback returns True.
    ``start_fit``: the fit of the start, measured the way the iterations measure theirs (HOOI from ST-HOSVD:
    the start's core); the first iteration's change is then taken from it, so a start that is already a
    fixed point costs one iteration, not two.

    Each iteration's line goes to the ``tuckerkit.decomposition`` logger: at DEBUG level, or with ``verbose`` at
    INFO level and, unless logging is set up to show INFO records of that logger (then they already appear
    once, through the user's handlers), written to standard error as scikit-learn's ``verbose`` prints its
    progress: the user asked to see it, and Python's logging hides INFO by default. ``sys.stderr`` is looked
    up when written, so redirections apply. Nothing here feeds back into the computation.
    """

    def __init__(self, name: str, tol: float, max_iter: int, callback: Callable | None, verbose: bool,
                 start_fit: float | None = None, rule: str | None = None):
        self.name, self.tol, self.max_iter = name, tol, max_iter
        self.start_fit = start_fit  # the start's own fit, when it has one: the first iteration is compared with it
        self.callback, self.verbose = callback, check_verbose(verbose)
        self.history: list[float] = []
        self.converged = False
        self.stopped = False
        #: the stopping rule in force, for the closing line of a run that did not converge
        self.rule = rule if rule is not None else f"tol={tol:g}"
        #: why the run converged, for its closing line (the rule that fired, with its numbers)
        self.why = ""
        started = CALL_START.get()
        self.start = started if started is not None else time.perf_counter()

    def converge(self, why: str) -> None:
        """Converged by the method's own rule (CP-APR's KKT tolerance), ``why`` for the closing line."""
        self.converged, self.why = True, why

    def step(self, iteration: int, fit: float, factors, weights: Any = None, *, may_decrease: bool = False,
             noise: float = math.inf) -> bool:
        """Record one iteration's fit; True means stop iterating. ``may_decrease``: this iteration changed the
        model outside the algorithm's descent (CP-ALS's ``orthogonalize``), so a lower fit is not a stop.
        ``noise``: a decrease is a stop only when at most this (the rounding of the fits compared; by default any
        decrease is)."""
        prev = self.history[-1] if self.history else self.start_fit
        change = abs(fit - prev) if prev is not None else float("inf")
        self.history.append(fit)
        if self.verbose or logger.isEnabledFor(logging.DEBUG):  # (the line made only for a reader: 5-15 us)
            self._say(f"{self.name} iteration {iteration}: fit {fit:.10f} (change {change:.3g}), "
                      f"{time.perf_counter() - self.start:.3f} s")
        if self.callback is not None and stops(self.callback(
            IterationState(iteration, fit, change, time.perf_counter() - self.start, tuple(factors), weights)
        )):
            self.stopped = True
            return True
        if change < self.tol:
            self.converge(f"fit change {change:.3g} below tol={self.tol:g}")
            return True
        if self.tol > 0 and not may_decrease and prev is not None and fit < prev and prev - fit <= noise:
            self.converge(f"the fit decreased by {prev - fit:.3g}: no progress left at this precision; "
                          f"tol={self.tol:g}")
            return True
        return False

    def _say(self, line: str) -> None:
        if not self.verbose:
            logger.debug("%s", line)
            return
        logger.info("%s", line)
        if not (logger.isEnabledFor(logging.INFO) and logger.hasHandlers()):
            print(line, file=sys.stderr, flush=True)

    def finish(self, fit: float | None = None, collapsed: bool = False) -> None:
        """The closing line (why the run stopped, and ``fit``: the fit the result reports, by default the last
        iteration's); warn when the loop ran out of iterations (pointing at the caller's line, outside tuckerkit).
        ``collapsed``: the run ended at an all-zero model (its caller warns), not converged."""
        from tuckerkit.decomposition._entry import caller_stacklevel

        n = len(self.history)
        its = f"{n} iteration{'s' if n != 1 else ''}"
        if fit is None and self.history:
            fit = self.history[-1]
        at = f", fit {fit:.10f}" if fit is not None else ""
        if collapsed:
            self._say(f"{self.name} ended at an all-zero model after {its}{at}")
        elif self.converged:
            self._say(f"{self.name} converged after {its} ({self.why}){at}")
        elif self.stopped:
            self._say(f"{self.name} stopped by the callback after {its}{at}")
        else:
            self._say(f"{self.name} reached max_iter={self.max_iter} without converging ({self.rule}){at}")
        if not self.converged and not self.stopped:
            warnings.warn(
                f"{self.name} reached max_iter={self.max_iter} before the fit changed by less than tol={self.tol}",
                ConvergenceWarning,
                stacklevel=caller_stacklevel(),
            )
