"""scikit-learn estimators: thin shells over hooi / cp_als for tensors of samples."""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from tuckerkit._validation import (
    check_bool,
    check_choice,
    check_cp_rank,
    check_feature_ranks,
    check_tensor,
    check_unit_interval,
)
from tuckerkit.decomposition import cp_als, hooi, non_negative_cp, non_negative_tucker, st_hosvd
from tuckerkit.decomposition._entry import caller_stacklevel
from tuckerkit.decomposition._linalg import spd_solve
from tuckerkit.decomposition._results import ConvergenceWarning
from tuckerkit.engine import khatri_rao, mttkrp, multi_ttm

_CHECKS: dict[str, Any] = {"allow_nd": True, "dtype": [np.float64, np.float32], "ensure_min_samples": 1,
                           "ensure_min_features": 1}


def _as_samples(X: Any, est: BaseEstimator, reset: bool) -> np.ndarray:
    """scikit-learn's validation plus the tensor checks of tuckerkit.

    A sample is a tensor of shape ``feature_shape_``; ``n_features_in_`` is its number of entries
    (``prod(feature_shape_)``: 625 for 25 x 25 images), as every scikit-learn step after a flattening would
    count them. After fitting on tensors, ``transform`` also takes the samples flattened to
    ``(n_samples, n_features_in_)``; a sample of another shape is refused in one line naming both shapes.
    """
    if X is None:  # (scikit-learn's message spoke of "a scalar array" over three lines)
        raise TypeError("X is None; expected an array of samples of shape (n_samples, d_1, ...)")
    shape, dt = getattr(X, "shape", None), getattr(X, "dtype", None)
    if shape is not None and dt is not None:  # (scikit-learn's messages printed the whole array, over many lines)
        if np.dtype(dt).kind == "c":
            raise ValueError(f"Complex data not supported: X has dtype {np.dtype(dt)}; the estimators take real "
                             "samples (tk.hooi and tk.cp_als decompose complex tensors)")
        if len(shape) < 2:
            raise ValueError(f"X must have shape (n_samples, d_1, ...); received an array of shape {tuple(shape)} "
                             "(Reshape your data: X[None] for one sample)")
    # samples of several modes (fitted so, or given so to a model fitted on vectors): scikit-learn would count
    # the second mode's size as the number of features
    nd = len(shape) if shape is not None else np.asarray(X).ndim if isinstance(X, list | tuple) else 2
    fitted_nd = not reset and (len(getattr(est, "feature_shape_", ())) > 1 or nd > 2)
    if fitted_nd:
        X = check_array(X, input_name="X", **_CHECKS)
    else:
        X = validate_data(est, X, reset=reset, **_CHECKS)
    X = check_tensor(X, "X", min_ndim=2)
    if reset:
        est.feature_shape_ = tuple(int(s) for s in X.shape[1:])
        est.n_features_in_ = math.prod(est.feature_shape_)
    elif fitted_nd and X.ndim == 2 and X.shape[1] == est.n_features_in_:
        X = X.reshape(X.shape[0], *est.feature_shape_)  # flattened samples
    elif tuple(X.shape[1:]) != est.feature_shape_:
        raise ValueError(
            f"X has samples of shape {tuple(X.shape[1:])}, but {type(est).__name__} was fitted on samples of "
            f"shape {est.feature_shape_} ({est.n_features_in_} features; samples flattened to "
            f"{est.n_features_in_} features are accepted too)"
        )
    return X


def _blocked_score(X: np.ndarray, codes: np.ndarray, features: Any) -> float | None:
    """``1 - ||X - codes @ B|| / ||X||`` (1.0 for an all-zero ``X``), ``B = features()`` the learned feature
    factors as one (codes x features) matrix, by blocks of the reconstruction
    (:func:`tuckerkit.decomposition._results.error_and_norm_blocks`): no whole reconstruction, no whole
    difference, where ``X`` is a C-ordered float32 / float64 array and ``B`` holds at most a quarter of its
    entries (a Kronecker product of many wide factors may not); None elsewhere (the caller reconstructs).
    Against the whole difference (TuckerDecomposer, 2000 samples of 40 x 40, ranks 8 x 8): the same score
    to float64 rounding, in a fraction of the memory."""
    from tuckerkit.decomposition._results import _blocked_error_applies, error_and_norm_blocks

    if not (X.flags.c_contiguous and _blocked_error_applies(X, codes)
            and codes.shape[1] * X.size // X.shape[0] <= X.size // 4):
        return None
    B = features()
    err, nx = error_and_norm_blocks(X, lambda order: (codes, B))
    return 1.0 - err / nx if nx > 0 else 1.0


def _as_codes(Z: Any, name: str, dtype: Any) -> np.ndarray:
    """The features or coefficients that ``inverse_transform`` takes: numbers, finite (scikit-learn's
    refusal of NaN or infinity, as ``transform`` and ``fit`` give), of the learned factors' dtype."""
    return check_array(Z, dtype=dtype, input_name=name, ensure_2d=False, allow_nd=True, ensure_min_samples=0)


#: the fitted arrays of the estimators, read-only as the results they come from (again after a pickle or a copy)
_FITTED = ("core_", "factors_", "sample_factor_", "weights_")


class _TensorTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """What both estimators share: scikit-learn's output names (``get_feature_names_out``: the class name and
    a number, as PCA's; so ``set_output`` works in pipelines), the fitted arrays kept read-only across pickling
    and copying, tags for samples of several modes in float32 or float64, and the decompositions'
    :class:`~tuckerkit.ConvergenceWarning` raised as one that is also scikit-learn's (a filter on either
    catches it)."""

    def __setstate__(self, state):
        super().__setstate__(state)
        for name in _FITTED:
            value = self.__dict__.get(name)
            for a in value if isinstance(value, list) else [value]:
                if isinstance(a, np.ndarray):
                    a.flags.writeable = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.three_d_array = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    def _decompose(self, run, *args, **kwargs):
        """``run(*args, **kwargs)``, its ConvergenceWarning raised again as :class:`EstimatorConvergenceWarning`."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run(*args, **kwargs)
        for w in caught:
            if issubclass(w.category, ConvergenceWarning):  # (pointing at the user's line)
                warnings.warn(EstimatorConvergenceWarning(str(w.message)), stacklevel=caller_stacklevel())
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return result


class EstimatorConvergenceWarning(ConvergenceWarning, SklearnConvergenceWarning):
    """The estimators' :class:`~tuckerkit.ConvergenceWarning`: also scikit-learn's
    :class:`sklearn.exceptions.ConvergenceWarning`, so a filter on either (a grid search's, say) catches it."""


_TUCKER_INITS = ("st_hosvd", "st_hosvd_sketch", "hosvd", "random")


class TuckerDecomposer(_TensorTransformer):
    """Tucker decomposition of a tensor of samples ``(n_samples, d_1, ..., d_k)`` as a transformer.

    ``fit`` learns orthonormal factors for the feature modes by HOOI (the sample mode is kept: its rank is
    ``sample_rank``, by default as large as the feature core, which leaves the feature factors exactly those
    of a decomposition with the sample mode untouched); ``transform`` projects samples on them and returns
    ``(n_samples, prod(ranks))`` features; ``inverse_transform`` maps features back.

    Parameters
    ----------
    ranks : int or sequence of int, optional
        Ranks of the feature modes (an int applies to every feature mode; capped at each mode's size).
        Default: 5, unless ``max_error`` chooses them.
    sample_rank : int, optional
        Rank of the sample mode during ``fit``.
    max_error : float in (0, 1), optional
        Choose the feature ranks instead of giving them: the smallest ranks with which ST-HOSVD of the
        training tensor meets ``||X - X_hat|| <= max_error * ||X||`` (see :func:`tuckerkit.st_hosvd`); HOOI
        then refines them. Not with ``ranks``.
    tol : float, default 1e-8
        HOOI's convergence tolerance on the change of fit (see :func:`tuckerkit.hooi`); it does not choose
        ranks (that is ``max_error``).
    max_iter, random_state : see :func:`tuckerkit.hooi`.
    init : {"st_hosvd", "st_hosvd_sketch", "hosvd", "random"}, default "st_hosvd"
        HOOI's start (see :func:`tuckerkit.hooi`); with ``nonnegative``, "st_hosvd" (non-negative Tucker's
        ``"svd"`` start) or "random".
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where ``fit`` runs the decomposition (see :func:`tuckerkit.hooi`); the learned factors are host arrays
        for host inputs, so ``transform`` and pipelines work unchanged.
    nonnegative : bool, default False
        Non-negative core and factors (:func:`tuckerkit.non_negative_tucker`; ``init="st_hosvd"`` means its
        ``"svd"`` start); ``transform`` then gives the least-squares core of each sample (the factors'
        pseudo-inverses: they are not orthonormal).

    Attributes
    ----------
    factors_ : list of arrays, shape (d_i, r_i)
    core_ : array, shape (sample_rank, r_1, ..., r_k)
    ranks_ : tuple of int
        The feature ranks used (given, or chosen by ``max_error``).
    fit_ : float
        Fit ``1 - ||X - X_hat|| / ||X||`` on the training tensor.
    n_iter_ : int
    feature_shape_ : tuple of int
        The shape of one sample, ``(d_1, ..., d_k)``.
    n_features_in_ : int
        ``prod(feature_shape_)``, the entries of one sample.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit import TuckerDecomposer
    >>> X = np.random.default_rng(0).standard_normal((20, 6, 7))
    >>> est = TuckerDecomposer(ranks=(2, 3)).fit(X)
    >>> est.transform(X).shape, est.n_features_in_, est.transform(X.reshape(20, 42)).shape
    ((20, 6), 42, (20, 6))
    """

    def __init__(self, ranks: Any = None, *, sample_rank: int | None = None, max_error: float | None = None,
                 tol: float = 1e-8, max_iter: int = 100, init: str = "st_hosvd", random_state: Any = None,
                 device: Any = None, nonnegative: bool = False):
        self.ranks = ranks
        self.nonnegative = nonnegative
        self.device = device
        self.sample_rank = sample_rank
        self.max_error = max_error
        self.tol = tol
        self.max_iter = max_iter
        self.init = init
        self.random_state = random_state

    def _feature_ranks(self, X: np.ndarray) -> tuple[int, ...]:
        shape = X.shape[1:]
        r = self.ranks
        if self.max_error is not None:
            if r is not None:
                raise ValueError("pass either ranks or max_error, not both; max_error chooses the ranks")
            target = check_unit_interval(self.max_error, "max_error")
            return st_hosvd(X, max_error=target, device=self.device).ranks[1:]
        return check_feature_ranks(5 if r is None else r, shape, "ranks")

    def fit(self, X, y=None):
        X = _as_samples(X, self, reset=True)
        fr = self._feature_ranks(X)
        s = check_cp_rank(self.sample_rank, "sample_rank") if self.sample_rank is not None else min(
            X.shape[0], math.prod(fr))
        if s > X.shape[0]:
            raise ValueError(f"sample_rank={s} exceeds the number of samples ({X.shape[0]}); expected an integer "
                             "between 1 and the number of samples")
        nonneg = check_bool(self.nonnegative, "nonnegative")
        # (a string here: the factors of a given start would have to cover the samples' mode too)
        check_choice(self.init, "init", ("st_hosvd", "random") if nonneg else _TUCKER_INITS)
        if nonneg:
            T = self._decompose(non_negative_tucker, X, (s, *fr), init="svd" if self.init == "st_hosvd" else self.init,
                                tol=self.tol, max_iter=self.max_iter, random_state=self.random_state,
                                device=self.device)
        else:
            T = self._decompose(hooi, X, (s, *fr), init=self.init, tol=self.tol, max_iter=self.max_iter,
                                random_state=self.random_state, device=self.device)
        self.nonnegative_ = nonneg
        self.core_ = T.core
        self.factors_ = list(T.factors[1:])
        self.sample_factor_ = T.factors[0]
        self.fit_ = T.fit
        self.n_iter_ = T.n_iter
        self.ranks_ = fr
        return self

    def transform(self, X):
        check_is_fitted(self, "factors_")
        X = _as_samples(X, self, reset=False)
        if getattr(self, "nonnegative_", False):  # non-orthonormal factors: the least-squares core
            Z = multi_ttm(X, [None, *(np.linalg.pinv(U) for U in self.factors_)], skip=0)
            return np.ascontiguousarray(Z).reshape(X.shape[0], -1)
        Z = multi_ttm(X, [None, *self.factors_], transpose=True, skip=0)
        return np.ascontiguousarray(Z).reshape(X.shape[0], -1)

    def inverse_transform(self, Z):
        check_is_fitted(self, "factors_")
        Z = _as_codes(Z, "Z", self.factors_[0].dtype)
        if Z.ndim != 2 or Z.shape[1] != math.prod(self.ranks_):
            raise ValueError(f"Z must have shape (n_samples, {math.prod(self.ranks_)}); received {Z.shape}")
        G = Z.reshape(Z.shape[0], *self.ranks_)
        # (C-ordered, as scikit-learn's transformers give their arrays: the engine's last product leaves the samples'
        # axis wherever it writes fastest)
        return np.ascontiguousarray(multi_ttm(G, [None, *self.factors_], skip=0))

    def score(self, X, y=None) -> float:
        """Fit ``1 - ||X - X_hat|| / ||X||`` of the projection of ``X`` on the learned feature factors (1.0 for
        an all-zero ``X``). The reconstruction is never made whole (:func:`_blocked_score`)."""
        check_is_fitted(self, "factors_")
        X = _as_samples(X, self, reset=False)
        Z = self.transform(X)
        got = _blocked_score(X, Z, lambda: functools.reduce(np.kron, self.factors_).T)
        if got is not None:
            return got
        Xh = self.inverse_transform(Z)
        nx = float(np.linalg.norm(X.reshape(-1)))
        return 1.0 - float(np.linalg.norm((X - Xh).reshape(-1))) / nx if nx > 0 else 1.0

    @property
    def _n_features_out(self) -> int:
        return math.prod(self.ranks_)


class CPDecomposer(_TensorTransformer):
    """CP decomposition of a tensor of samples as a transformer.

    ``fit`` runs :func:`tuckerkit.cp_als` on ``(n_samples, d_1, ..., d_k)``; ``transform`` solves least squares
    for the sample-mode coefficients of new samples against the learned feature factors (and weights),
    returning ``(n_samples, rank)``; ``inverse_transform`` rebuilds samples from coefficients.

    Parameters
    ----------
    rank : int, default 5
    tol, max_iter, init, random_state, normalize : see :func:`tuckerkit.cp_als`.
    device : {None, "cpu", "cuda", "cuda:N"}, default None
        Where ``fit`` runs CP-ALS; the learned factors are host arrays for host inputs.
    nonnegative : bool, default False
        Non-negative factors (:func:`tuckerkit.non_negative_cp`, HALS; ``normalize`` does not apply);
        ``transform`` then solves a non-negative least-squares problem per sample (HALS sweeps).

    Attributes
    ----------
    weights_ : array, shape (rank,)
    factors_ : list of arrays, shape (d_i, rank) (feature modes)
    fit_ : float
    n_iter_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit import CPDecomposer
    >>> X = np.random.default_rng(0).standard_normal((20, 6, 7))
    >>> CPDecomposer(rank=3, random_state=0, tol=1e-3).fit_transform(X).shape
    (20, 3)
    """

    def __init__(self, rank: int = 5, *, tol: float = 1e-5, max_iter: int = 200, init: str = "svd",
                 random_state: Any = None, normalize: bool = True, device: Any = None, nonnegative: bool = False):
        self.rank = rank
        self.nonnegative = nonnegative
        self.device = device
        self.tol = tol
        self.max_iter = max_iter
        self.init = init
        self.random_state = random_state
        self.normalize = normalize

    def fit(self, X, y=None):
        X = _as_samples(X, self, reset=True)
        nonneg = check_bool(self.nonnegative, "nonnegative")
        if nonneg:
            cp = self._decompose(non_negative_cp, X, self.rank, init=self.init, tol=self.tol, max_iter=self.max_iter,
                                 random_state=self.random_state, device=self.device)
        else:
            cp = self._decompose(cp_als, X, self.rank, init=self.init, tol=self.tol, max_iter=self.max_iter,
                                 random_state=self.random_state, normalize=self.normalize, device=self.device)
        self.nonnegative_ = nonneg
        self.weights_ = cp.weights
        self.sample_factor_ = cp.factors[0]
        self.factors_ = list(cp.factors[1:])
        self.fit_ = cp.fit
        self.n_iter_ = cp.n_iter
        return self

    def _scaled(self):
        return [self.factors_[0] * self.weights_[None, :], *self.factors_[1:]]

    def transform(self, X):
        check_is_fitted(self, "factors_")
        X = _as_samples(X, self, reset=False)
        F = self._scaled()
        M = mttkrp(X, [None, *F], 0)
        R = self.weights_.shape[0]  # (the fitted rank: set_params(rank=...) before a refit changes nothing here)
        V = np.ones((R, R), dtype=M.dtype)
        for U in F:
            V = V * (U.T @ U)
        C = spd_solve(V, M)
        if getattr(self, "nonnegative_", False):  # non-negative least squares from the clipped solution
            from tuckerkit.decomposition._nonneg import hals_rows

            # every sweep (until none moves anything): each sample's coefficients are its own, whatever batch it
            # comes in (a stop on the whole batch's move would not be)
            C = hals_rows(np.maximum(C, 0).T.copy(), np.ascontiguousarray(M.T), V, sweeps=200, stop=-1.0).T
        return C

    def inverse_transform(self, C):
        check_is_fitted(self, "factors_")
        C = _as_codes(C, "C", self.factors_[0].dtype)
        R = self.weights_.shape[0]
        if C.ndim != 2 or C.shape[1] != R:
            raise ValueError(f"C must have shape (n_samples, {R}); received {C.shape}")
        F = self._scaled()
        rest = khatri_rao(F)
        return (C @ rest.T).reshape(C.shape[0], *self.feature_shape_)

    def score(self, X, y=None) -> float:
        """Fit ``1 - ||X - X_hat|| / ||X||`` of the least-squares reconstruction of ``X`` (1.0 for an all-zero
        ``X``). The reconstruction is never made whole (:func:`_blocked_score`)."""
        check_is_fitted(self, "factors_")
        X = _as_samples(X, self, reset=False)
        C = self.transform(X)
        got = _blocked_score(X, C, lambda: khatri_rao(self._scaled()).T)
        if got is not None:
            return got
        Xh = self.inverse_transform(C)
        nx = float(np.linalg.norm(X.reshape(-1)))
        return 1.0 - float(np.linalg.norm((X - Xh).reshape(-1))) / nx if nx > 0 else 1.0

    @property
    def _n_features_out(self) -> int:
        return int(self.weights_.shape[0])
