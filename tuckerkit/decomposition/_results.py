"""Result containers: TuckerTensor and CPTensor (frozen; unpack like TensorLy's tuples)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, device_of, to_device, to_host


class ConvergenceWarning(UserWarning):
    """An iterative decomposition reached ``max_iter`` before its convergence test passed.

    The result is still returned (with ``converged=False``); filter the warning with the standard
    :mod:`warnings` machinery when running a fixed number of iterations on purpose (``tol=0``).

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> X = np.random.default_rng(0).standard_normal((6, 7, 8))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     T = tk.hooi(X, (2, 2, 2), tol=0, max_iter=2)
    >>> caught[0].category.__name__, T.converged, T.n_iter
    ('ConvergenceWarning', False, 2)
    """


def _sqnorm(X: Any, chunk_elems: int = 1 << 18) -> float:
    """||X||_F^2 accumulated in float64 over slabs (no full-size temporary)."""
    xp = array_namespace(X)
    if X.size == 0:
        return 0.0
    if X.ndim == 0:
        v = float(X)
        return v * v
    if xp is not np:  # on a GPU: accumulate on the device, one value copied back (one synchronization)
        rows = max(1, (chunk_elems << 6) // max(1, X.size // X.shape[0]))
        acc = xp.zeros((), dtype=xp.float64)
        for start in range(0, X.shape[0], rows):
            blk = X[start:start + rows].astype(xp.float64, copy=False).ravel()
            acc += xp.vdot(blk, blk).real
        return float(acc)
    rows = max(1, chunk_elems // max(1, X.size // X.shape[0]))
    total = 0.0
    for start in range(0, X.shape[0], rows):
        blk = X[start:start + rows].astype(xp.float64, copy=False)
        total += float(xp.vdot(blk.ravel(), blk.ravel()).real)
    return total


def _relative_error(X: Any, Xhat: Any) -> float:
    """``||X - X_hat|| / ||X||`` in float64 on the host (a diagnostic: one copy back from a GPU); the norms
    are scaled, so no magnitude the dtype can hold overflows or underflows them."""
    from tuckerkit.engine._operand import frobenius_norm

    X = np.asarray(to_host(X), dtype=np.float64)
    diff = X - np.asarray(to_host(Xhat), dtype=np.float64)
    return frobenius_norm(diff) / frobenius_norm(X)


class _Model:
    """What both results share: unpacking as a ``(first, factors)`` pair, shape, latest fit."""

    factors: tuple[Any, ...]
    fit_history: tuple[float, ...]

    def _pair(self) -> tuple[Any, list[Any]]:
        raise NotImplementedError

    def __iter__(self):
        return iter(self._pair())

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int):
        return self._pair()[i]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(U.shape[0]) for U in self.factors)

    @property
    def fit(self) -> float:
        return self.fit_history[-1] if self.fit_history else float("nan")

    @property
    def device(self) -> str:
        """Where the arrays live: ``"cpu"`` or ``"cuda:N"``."""
        return str(device_of(self.factors[0])) if self.factors else "cpu"

    def to(self, device: str) -> Any:
        """The same model with its arrays on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``); no copy when
        they are there already.

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> T = tk.hosvd(np.random.default_rng(0).standard_normal((4, 5, 6)), 2)
        >>> T.to("cpu") is T, T.device
        (True, 'cpu')
        """
        import dataclasses

        from tuckerkit.backend import parse_device

        if str(parse_device(device)) == self.device:
            return self
        first = "core" if hasattr(self, "core") else "weights"
        moved = {first: to_device(getattr(self, first), device),
                 "factors": tuple(to_device(U, device) for U in self.factors)}
        return dataclasses.replace(self, **moved)  # type: ignore[type-var]


@dataclass(frozen=True, eq=False)
class TuckerTensor(_Model):
    """A Tucker model: ``core`` multiplied along every mode ``n`` by ``factors[n]`` (``X ~ core x_n U_n``).

    Unpacks like TensorLy's ``(core, factors)``: ``core, factors = hooi(X, ranks)``.

    Attributes
    ----------
    core : array, shape (R_0, ..., R_{N-1})
    factors : tuple of arrays, shape (I_n, R_n), orthonormal columns
    n_iter : int
        Iterations run (0 for the one-pass HOSVD variants).
    converged : bool
    fit_history : tuple of float
        ``1 - ||X - X_hat|| / ||X||`` after each iteration (HOOI) or after the pass (HOSVD).
    plans : tuple
        Kernel plans used by the last iteration (engine ``ContractionPlan`` objects), for inspection.
    passes_per_iteration : int
        Full passes over the input tensor per iteration (dimension-tree reuse).
    ranks : tuple of int
        The core's shape (property).
    fit : float
        The last entry of ``fit_history`` (property).

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> X = np.random.default_rng(0).standard_normal((6, 7, 8))
    >>> T = tk.hosvd(X, (2, 3, 4))
    >>> core, factors = T
    >>> T.ranks, T.to_dense().shape, [U.shape for U in factors]
    ((2, 3, 4), (6, 7, 8), [(6, 2), (7, 3), (8, 4)])
    >>> bool(np.isclose(T.fit, 1 - T.relative_error(X)))
    True
    """

    core: Any
    factors: tuple[Any, ...]
    n_iter: int = 0
    converged: bool = True
    fit_history: tuple[float, ...] = ()
    plans: tuple[Any, ...] = field(default=(), repr=False)
    passes_per_iteration: int = 0

    def _pair(self) -> tuple[Any, list[Any]]:
        return self.core, list(self.factors)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.core.shape)

    def to_dense(self) -> Any:
        """The full tensor ``core x_n U_n`` (allocates ``prod(shape)`` elements)."""
        from tuckerkit.engine import multi_ttm

        return multi_ttm(self.core, list(self.factors))

    def norm(self) -> float:
        """Frobenius norm of the model (equal to the core's norm when the factors are orthonormal)."""
        grams = [U.T @ U for U in self.factors]
        from tuckerkit.engine import multi_ttm

        G = self.core
        return math.sqrt(max(float((G * multi_ttm(G, grams)).sum()), 0.0))

    def relative_error(self, X: Any) -> float:
        """``||X - X_hat||_F / ||X||_F`` computed with a dense reconstruction."""
        return _relative_error(X, self.to_dense())

    def compression_ratio(self) -> float:
        """Entries of the full tensor over entries stored by the model."""
        stored = math.prod(self.ranks) + sum(U.size for U in self.factors)
        return math.prod(self.shape) / stored

    def to_tensorly(self):
        """Convert to ``tensorly.tucker_tensor.TuckerTensor`` (needs TensorLy)."""
        from tensorly.tucker_tensor import TuckerTensor as TLTucker

        return TLTucker((self.core, list(self.factors)))

    @classmethod
    def from_tensorly(cls, obj) -> TuckerTensor:
        """Build from a TensorLy TuckerTensor or a ``(core, factors)`` pair."""
        core, factors = obj
        return cls(np.asarray(core), tuple(np.asarray(U) for U in factors))


@dataclass(frozen=True, eq=False)
class CPTensor(_Model):
    """A CP model: ``X ~ sum_r weights[r] * U_0[:, r] o U_1[:, r] o U_2[:, r]`` (any order).

    Unpacks like TensorLy's ``(weights, factors)``.

    Attributes
    ----------
    weights : array, shape (R,)
    factors : tuple of arrays, shape (I_n, R) (unit-norm columns when ``normalize=True``)
    n_iter, converged, fit_history, plans, passes_per_iteration : see :class:`TuckerTensor`
    rank : int
        Number of components (property).

    Examples
    --------
    >>> import numpy as np
    >>> import tuckerkit as tk
    >>> rng = np.random.default_rng(0)
    >>> cp = tk.CPTensor(np.array([2.0, 1.0]), (rng.random((4, 2)), rng.random((5, 2)), rng.random((6, 2))))
    >>> weights, factors = cp
    >>> cp.rank, cp.to_dense().shape
    (2, (4, 5, 6))
    >>> bool(np.isclose(cp.norm(), np.linalg.norm(cp.to_dense())))
    True
    """

    weights: Any
    factors: tuple[Any, ...]
    n_iter: int = 0
    converged: bool = True
    fit_history: tuple[float, ...] = ()
    plans: tuple[Any, ...] = field(default=(), repr=False)
    passes_per_iteration: int = 0

    def _pair(self) -> tuple[Any, list[Any]]:
        return self.weights, list(self.factors)

    @property
    def rank(self) -> int:
        return int(self.weights.shape[0])

    def to_dense(self) -> Any:
        """The full tensor (allocates ``prod(shape)`` elements)."""
        from tuckerkit.engine import khatri_rao

        first = self.factors[0] * self.weights[None, :]
        rest = khatri_rao(list(self.factors[1:])) if len(self.factors) > 1 else None
        if rest is None:
            return first.sum(axis=1)
        return (first @ rest.T).reshape(self.shape)

    def norm(self) -> float:
        """Frobenius norm of the model from the factor Grams (no reconstruction)."""
        V = np.ones((self.rank, self.rank))
        for U in self.factors:
            V = V * np.asarray(to_host(U.T @ U), dtype=np.float64)
        w = np.asarray(to_host(self.weights), dtype=np.float64)
        return math.sqrt(max(float(w @ V @ w), 0.0))

    def relative_error(self, X: Any) -> float:
        return _relative_error(X, self.to_dense())

    def to_tensorly(self):
        """Convert to ``tensorly.cp_tensor.CPTensor`` (needs TensorLy)."""
        from tensorly.cp_tensor import CPTensor as TLCP

        return TLCP((self.weights, list(self.factors)))

    @classmethod
    def from_tensorly(cls, obj) -> CPTensor:
        weights, factors = obj
        factors = tuple(np.asarray(U) for U in factors)
        if weights is None:
            weights = np.ones(factors[0].shape[1], dtype=factors[0].dtype)
        return cls(np.asarray(weights), factors)
