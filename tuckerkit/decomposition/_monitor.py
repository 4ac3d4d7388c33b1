"""The iteration bookkeeping shared by HOOI and CP-ALS: fit history, callback, stopping rule, warning."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuckerkit.decomposition._results import ConvergenceWarning

logger = logging.getLogger("tuckerkit.decomposition")


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


class Monitor:
    """Records fits and decides when to stop.

    Stops when the fit changes by less than ``tol``, or (``tol > 0``) when it decreases, which in exact
    arithmetic it never does for HOOI and ALS (rounding noise, float32); or when the callback returns True.
    """

    def __init__(self, name: str, tol: float, max_iter: int, callback: Callable | None, verbose: bool):
        self.name, self.tol, self.max_iter = name, tol, max_iter
        self.callback, self.verbose = callback, verbose
        self.history: list[float] = []
        self.converged = False
        self.stopped = False
        self.start = time.perf_counter()

    def step(self, iteration: int, fit: float, factors) -> bool:
        """Record one iteration's fit; True means stop iterating."""
        change = abs(fit - self.history[-1]) if self.history else float("inf")
        self.history.append(fit)
        if self.verbose:
            logger.info("%s iteration %d: fit %.10f (change %.3g)", self.name, iteration, fit, change)
        if self.callback is not None and self.callback(
            IterationState(iteration, fit, change, time.perf_counter() - self.start, tuple(factors))
        ) is True:
            self.stopped = True
            return True
        if change < self.tol or (self.tol > 0 and len(self.history) > 1 and fit < self.history[-2]):
            self.converged = True
            return True
        return False

    def finish(self) -> None:
        """Warn when the loop ran out of iterations (pointing at the caller's line, outside tuckerkit)."""
        from tuckerkit.decomposition._entry import caller_stacklevel

        if not self.converged and not self.stopped:
            warnings.warn(
                f"{self.name} reached max_iter={self.max_iter} before the fit changed by less than tol={self.tol}",
                ConvergenceWarning,
                stacklevel=caller_stacklevel(),
            )
