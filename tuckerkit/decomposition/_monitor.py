"""The iteration bookkeeping shared by HOOI and CP-ALS: fit history, callback, stopping rule, warning."""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit._validation import check_verbose
from tuckerkit.decomposition._results import ConvergenceWarning

logger = logging.getLogger("tuckerkit.decomposition")


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
                 start_fit: float | None = None):
        self.name, self.tol, self.max_iter = name, tol, max_iter
        self.start_fit = start_fit  # the start's own fit, when it has one: the first iteration is compared with it
        self.callback, self.verbose = callback, check_verbose(verbose)
        self.history: list[float] = []
        self.converged = False
        self.stopped = False
        self.start = time.perf_counter()

    def step(self, iteration: int, fit: float, factors, weights: Any = None, *, may_decrease: bool = False) -> bool:
        """Record one iteration's fit; True means stop iterating. ``may_decrease``: this iteration changed the
        model outside the algorithm's descent (CP-ALS's ``orthogonalize``), so a lower fit is not a stop."""
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
        if change < self.tol or (self.tol > 0 and not may_decrease and prev is not None and fit < prev):
            self.converged = True
            return True
        return False

    def _say(self, line: str) -> None:
        if not self.verbose:
            logger.debug("%s", line)
            return
        logger.info("%s", line)
        if not (logger.isEnabledFor(logging.INFO) and logger.hasHandlers()):
            print(line, file=sys.stderr, flush=True)

    def finish(self) -> None:
        """Warn when the loop ran out of iterations (pointing at the caller's line, outside tuckerkit)."""
        from tuckerkit.decomposition._entry import caller_stacklevel

        n = len(self.history)
        if self.converged:
            self._say(f"{self.name} converged after {n} iteration{'s' if n != 1 else ''} "
                      f"(fit change below tol={self.tol:g}), fit {self.history[-1]:.10f}")
        elif self.stopped:
            self._say(f"{self.name} stopped by the callback after {n} iteration{'s' if n != 1 else ''}")
        else:
            self._say(f"{self.name} reached max_iter={self.max_iter} without converging (tol={self.tol:g})")
        if not self.converged and not self.stopped:
            warnings.warn(
                f"{self.name} reached max_iter={self.max_iter} before the fit changed by less than tol={self.tol}",
                ConvergenceWarning,
                stacklevel=caller_stacklevel(),
            )
