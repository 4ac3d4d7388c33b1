"""One operand protocol: what the decompositions and the engine's operations ask of a tensor.

Every tensor kind tuckerkit accepts implements :class:`Operand` (pyttb's ``tensor`` / ``sptensor`` methods are
the model): a numpy or cupy array through the :class:`DenseTensor` adapter, the sparse
:class:`~tuckerkit.sparse.COOTensor` / :class:`~tuckerkit.sparse.CSFTensor`, the out-of-core
:class:`SlabTensor` and the distributed :class:`DaskTensor`. :func:`as_operand` resolves a user's input to
one, once, at the public entry; below it, algorithms call ``X.gram(n)``, ``X.ttmc_sweep(...)``,
``X.mttkrp(...)`` and never ask what ``X`` is. A new tensor kind is one new class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tuckerkit._validation import MAX_NDIM, check_shape, check_tensor, count_nonfinite, plain_array
from tuckerkit.backend import (
    Device,
    array_namespace,
    check_fits,
    device_of,
    get_cupy,
    on_device,
    parse_device,
    result_dtype,
    to_device,
    to_host,
)
from tuckerkit.engine._direct import memory_order
from tuckerkit.engine._gram import GramPlan, dense_gram
from tuckerkit.engine._mttkrp import MTTKRPPlan, dense_mttkrp
from tuckerkit.engine._plan import ContractionPlan
from tuckerkit.engine._policy import DOT_SERIAL_MAX, ExecutionPolicy, blas_pinned, parallel_for, resolve_policy
from tuckerkit.engine._subspace import leading_left_singular
from tuckerkit.engine._sweeps import (
    CarriedPartial,
    Sweep,
    dense_mttkrp_sweep,
    dense_ttmc_sweep,
    kept_first_mttkrp,
    splits_first_alone,
    tree_spine,
)
from tuckerkit.engine._ttm import MultiTTMPlan, dense_multi_ttm, dense_ttm

#: the engine's subscripts have 50 letters: at most this many modes in a contraction
MAX_ENGINE_NDIM = 50

Update = Callable[[int, Any], None]


@runtime_checkable
class Operand(Protocol):
    """What tuckerkit's algorithms need of a tensor, whatever its kind.

    Attributes: ``shape``, ``dtype``, ``ndim``, ``size``; ``xp`` (the array module results live in) and
    ``device``; ``streamed`` (True when every pass reads the tensor from storage or a cluster: ST-HOSVD then
    truncates the cheapest mode first).

    Methods return arrays in ``xp`` unless said otherwise; factor matrices have shape (I_n, R_n).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import Operand, as_operand
    >>> from tuckerkit.sparse import COOTensor
    >>> X = np.random.default_rng(0).random((4, 5, 6))
    >>> ops = [as_operand(X), COOTensor.from_dense(X), as_operand(X, memory_limit=500)]
    >>> all(isinstance(op, Operand) for op in ops)
    True
    >>> [bool(np.allclose(op.gram(1), ops[0].gram(1))) for op in ops]
    [True, True, True]
    """

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def xp(self) -> ModuleType: ...

    @property
    def device(self) -> Device: ...

    @property
    def streamed(self) -> bool: ...

    def to(self, device: Device) -> Operand:
        """The same tensor on ``device`` (itself when it is there); a one-line error where it cannot go."""
        ...

    def check_finite(self) -> None:
        """A one-line ``ValueError`` if the tensor holds NaN or Inf (streamed kinds check in their norm pass)."""
        ...

    def scaled(self, factor: float) -> Operand:
        """The tensor times ``factor`` (a power of two: exact), for inputs whose scale would overflow or
        underflow squares; dense data is copied, sparse values are, streamed kinds scale as they read."""
        ...

    def norm(self) -> float:
        """The Frobenius norm as a Python float (float64, scaled so that no finite input overflows)."""
        ...

    def gram(self, mode: int, *, plan: GramPlan | None = None, policy: ExecutionPolicy | None = None) -> Any:
        """``X_(mode) X_(mode)^T``, shape (I_mode, I_mode)."""
        ...

    def ttm(self, U: Any, mode: int, *, transpose: bool = False, out: Any = None,
            plan: ContractionPlan | None = None, policy: ExecutionPolicy | None = None) -> Any:
        """``X x_mode U`` (``U^T`` with ``transpose``)."""
        ...

    def multi_ttm(self, mats: Mapping[int, Any], *, transpose: bool = False, plan: MultiTTMPlan | None = None,
                  policy: ExecutionPolicy | None = None) -> Any:
        """``X`` times ``mats[m]`` (transposed) along every mode in ``mats``."""
        ...

    def mttkrp(self, factors: Sequence[Any], mode: int, *, plan: MTTKRPPlan | None = None,
               policy: ExecutionPolicy | None = None) -> Any:
        """``X_(mode)`` times the Khatri-Rao product of the other factors, shape (I_mode, R)."""
        ...

    def ttmc_sweep(self, factors: list[Any], update: Update, *, policy: ExecutionPolicy | None = None,
                   partials: dict[frozenset[int], Any] | None = None) -> Sweep:
        """HOOI's N projections in mode order, ``update(n, X x_{m != n} U_m^T)`` after each. ``partials``:
        projections of ``X`` on the factors as passed, keyed by the modes each leaves unprojected (the start's
        own, :func:`~tuckerkit.engine._sweeps.tree_spine`); a kind may take them instead of computing them
        (removing each it takes) or ignore them."""
        ...

    def sweep_spine(self) -> list[frozenset[int]]:
        """The partials :meth:`ttmc_sweep` makes before its first update, keyed by the modes each leaves
        unprojected (:func:`~tuckerkit.engine._sweeps.tree_spine`): those a start may hand it."""
        ...

    def mttkrp_sweep(self, factors: list[Any], update: Update, *, policy: ExecutionPolicy | None = None) -> Sweep:
        """CP-ALS's N MTTKRPs in mode order, ``update(n, M_n)`` after each."""
        ...

    def leading_subspace(self, mode: int, rank: int, *, rng: np.random.Generator | None = None,
                         policy: ExecutionPolicy | None = None) -> tuple[Any, Any]:
        """The ``rank`` leading left singular vectors of ``X_(mode)`` (orthonormal, sign-fixed) and the
        matching eigenvalues of ``X_(mode) X_(mode)^T``."""
        ...

    def preferred_init(self, ranks: Sequence[int]) -> str:
        """How HOOI starts on this tensor by default: ``"st_hosvd"``, ``"st_hosvd_sketch"`` (a streamed
        tensor whose sketch fits) or ``"hosvd"`` (a sparse tensor, whose projections would grow)."""
        ...


class OperandBase:
    """Defaults shared by tuckerkit's operand kinds (a third-party kind may implement :class:`Operand`
    directly instead)."""

    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def xp(self) -> ModuleType:
        return np

    @property
    def device(self) -> Device:
        return Device("cpu")

    @property
    def streamed(self) -> bool:
        return False

    def _subspace_args(self, mode: Any, rank: Any) -> int:
        """:meth:`Operand.leading_subspace`'s arguments, refused in one line: ``mode`` an integer in
        ``[-ndim, ndim)`` (returned in ``[0, ndim)``), ``rank`` an integer in ``[1, shape[mode]]`` (each kind's
        solver failed in its own words: a SystemError from ARPACK for a rank of 2.5, a RecursionError for the
        dense kind's mode of -1, eigenvalues of another length than the vectors for a rank past the mode)."""
        if isinstance(mode, bool) or not isinstance(mode, (int, np.integer)) or not -self.ndim <= mode < self.ndim:
            raise ValueError(f"mode must be an integer in [-{self.ndim}, {self.ndim}); received {mode!r}")
        mode = int(mode) % self.ndim
        n = self.shape[mode]
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 1 <= rank <= n:
            raise ValueError(f"rank must be an integer in [1, {n}] (the size of mode {mode}); received {rank!r}")
        return mode

    def to(self, device: Device) -> Any:
        if not device.is_gpu:
            return self
        raise ValueError(f"a {type(self).__name__} runs on the CPU; received device={str(device)!r} "
                         "(out-of-core and distributed runs use device='cpu')")

    @property
    def stored_entries(self) -> int:
        """Entries the input stores (every entry of a dense tensor, the nonzeros of a sparse one)."""
        return self.size

    def check_finite(self) -> None:
        return None

    def close(self) -> None:
        """Release what the operand holds open (a file, a Dask client it started); nothing by default."""
        return None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _dense_only(self, what: str, value: Any) -> None:
        if value is not None:
            raise ValueError(f"{what} applies to dense arrays; a {type(self).__name__} computes its own result")

    def ttm(self, U: Any, mode: int, *, transpose: bool = False, out: Any = None,
            plan: ContractionPlan | None = None, policy: ExecutionPolicy | None = None) -> Any:
        self._dense_only("out=", out)
        self._dense_only("plan=", plan)
        return self.multi_ttm({mode: U}, transpose=transpose, policy=policy)  # type: ignore[attr-defined]

    def preferred_init(self, ranks: Sequence[int]) -> str:
        return "st_hosvd"

    def sweep_spine(self) -> list[frozenset[int]]:
        return tree_spine(self.ndim)


#: pieces whose largest magnitude lies in this range are summed unscaled (no square over/underflows that counts)
_SAFE_LO, _SAFE_HI = 2.0**-400, 2.0**400
#: a piece's sum of squares in [size * 2^-799, 2^790] implies its largest magnitude lies in [_SAFE_LO, _SAFE_HI]
#: (max^2 <= ssq <= size * max^2, with room for the sum's rounding)
_SSQ_LO, _SSQ_HI = 2.0**-799, 2.0**790


def _pieces(X: Any, chunk_elems: int):
    """Pieces of about ``chunk_elems`` elements: runs of memory when ``X`` fills its memory in some order of its
    axes (C, F or another: views, in the memory's order), else blocks of its first axis."""
    order = memory_order(X)
    if order is not None:
        flat = X.transpose(order).reshape(-1)  # (a view: C-contiguous after the transpose)
        return (flat[i:i + chunk_elems] for i in range(0, flat.size, chunk_elems))
    rows = max(1, chunk_elems // max(1, X.size // X.shape[0]))
    return (X[s:s + rows] for s in range(0, X.shape[0], rows))


def combine_scaled(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Two ``(scale, ssq)`` pairs (``||x||^2 = scale^2 ssq``) combined into one, without overflow."""
    (s1, q1), (s2, q2) = a, b
    if q1 == 0.0:
        return b
    if q2 == 0.0:
        return a
    if s1 >= s2:
        return s1, q1 + q2 * (s2 / s1) ** 2
    return s2, q2 + q1 * (s1 / s2) ** 2


#: a device array of at most this many elements (a core) is copied down for :func:`sqnorm_scaled` and summed on
#: the host: the same one wait as the device's sum, without its launches, and the host's bits
DEVICE_NORM_HOST_MAX = 1 << 16


def sqnorm_scaled(X: Any, chunk_elems: int = 1 << 16, policy: ExecutionPolicy | None = None) -> tuple[float, float]:
    """``(scale, ssq)`` with ``||X||^2 = scale^2 * ssq`` of a dense array, accumulated in float64 over pieces;
    a piece whose largest magnitude is extreme is scaled by a power of two near it, so no finite input
    overflows or underflows (the idea of LAPACK's nrm2); BLAS is held to one thread and the pieces' sums are
    combined in piece order, so the bits are the same on every run and for any number of ``policy``'s
    workers (None: the default policy). On a GPU the pieces accumulate on the device (one value comes back);
    an array of at most :data:`DEVICE_NORM_HOST_MAX` elements is copied down and summed on the host."""
    if X.size == 0:
        return 1.0, 0.0
    if X.dtype.kind == "c":  # |x|^2 = re^2 + im^2: the two real views (no copy), combined scaled
        return combine_scaled(sqnorm_scaled(X.real, chunk_elems, policy), sqnorm_scaled(X.imag, chunk_elems, policy))
    xp = array_namespace(X)
    if xp is not np and X.size <= DEVICE_NORM_HOST_MAX:  # small (a core): one copy down, the host's sum
        return sqnorm_scaled(to_host(X), chunk_elems, policy)
    if xp is not np:
        amax = xp.zeros((), dtype=xp.float64)
        for blk in _pieces(X, chunk_elems << 6):
            amax = xp.maximum(amax, xp.max(xp.abs(blk)).astype(xp.float64))
        scale = xp.where(amax > 0, amax, 1.0)
        ssq = xp.zeros((), dtype=xp.float64)
        for blk in _pieces(X, chunk_elems << 6):
            b = blk.astype(xp.float64) / scale
            ssq += xp.sum(b * b)
        both = xp.stack([scale, ssq]).get()  # one copy back
        return float(both[0]), float(both[1])
    if X.size <= min(DOT_SERIAL_MAX, chunk_elems):  # one piece, whose dot product OpenBLAS runs on one thread
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # in any setting: the path below's pair
            return _piece_ssq(X)
    # one BLAS thread: a dot product's bits depend on the thread count. The pieces are summed on the policy's
    # workers (groups of pieces, each piece's pair computed alone) and combined in piece order on this thread:
    # the same bits for any number of workers
    pieces = list(_pieces(X, chunk_elems))
    group = 16  # pieces per task: ~1M elements, ~0.3 ms of reading against ~10 us of scheduling
    n_tasks = -(-len(pieces) // group)
    pairs: list[tuple[float, float]] = [(1.0, 0.0)] * len(pieces)
    flat = _compiled_run(X)
    if flat is not None:
        # a float32 / float64 tensor of COMPILED_NORM_MIN elements or more that fills its memory: every piece's
        # sum of squares by the compiled loop (tuckerkit/engine/_norm_kernels.py: float32 widened on the way, no
        # copy), the pieces' pairs then as below from those sums (a piece whose sum is out of range or not
        # finite rescaled or flagged there)
        from tuckerkit.engine._norm_kernels import piece_sums

        sums = np.empty(len(pieces), np.float64)

        def summed(t: int, _: Any) -> None:
            piece_sums(flat, chunk_elems, sums, t * group, min((t + 1) * group, len(pieces)))

        parallel_for(summed, n_tasks, resolve_policy(policy))
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            return combine_pairs([_piece_ssq(blk, q) for blk, q in zip(pieces, sums.tolist(), strict=True)])

    def work(t: int, _: Any) -> None:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # numpy's error state is per thread
            for i in range(t * group, min((t + 1) * group, len(pieces))):
                pairs[i] = _piece_ssq(pieces[i])

    with blas_pinned():
        parallel_for(work, n_tasks, resolve_policy(policy))
    return combine_pairs(pairs)


def combine_pairs(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The ``(scale, ssq)`` pairs of pieces combined in their order (:func:`combine_scaled`); ``(inf, 1)`` as
    soon as one piece held a NaN or an infinity."""
    acc = (1.0, 0.0)
    for pair in pairs:
        if math.isinf(pair[0]):
            return math.inf, 1.0
        acc = combine_scaled(acc, pair)
    return acc


#: a float32 or float64 tensor of at least this many elements filling its memory in some order has its pieces'
#: sums of squares taken by a compiled loop (:func:`sqnorm_scaled`); smaller ones keep BLAS's dot products and
#: never import numba for a norm
COMPILED_NORM_MIN = 1 << 20


def _compiled_run(X: Any) -> Any:
    """The flat view (memory order) of a numpy tensor whose norm's pieces the compiled loop sums, else None."""
    if not isinstance(X, np.ndarray) or X.dtype not in (np.float32, np.float64) or X.size < COMPILED_NORM_MIN:
        return None
    order = memory_order(X)
    if order is None or not X.flags.aligned:
        return None
    return X.transpose(order).reshape(-1)


def _piece_ssq(blk: Any, q: float | None = None) -> tuple[float, float]:
    """``(scale, ssq)`` of one piece; ``(inf, 1)`` when it holds a NaN or an infinity. ``q``: the piece's sum of
    squares where the caller has it (the compiled loop's), else a dot product here. An extreme piece's squares
    may overflow or underflow in that sum (the caller ignores numpy's warnings): it is then summed again,
    scaled by a power of two."""
    if q is None:
        b = blk.astype(np.float64, copy=False).reshape(-1)
        q = float(np.dot(b, b))
    else:
        b = blk.reshape(-1)
    if b.size * _SSQ_LO <= q <= _SSQ_HI:  # then 2^-400 <= max |x| <= 2^400: the safe case below, the
        return 1.0, q  # same bits, with one read of the piece instead of three
    hi, lo = float(blk.max()), float(blk.min())
    amax = max(hi, -lo)
    if not math.isfinite(amax) or math.isnan(hi) or math.isnan(lo):
        return math.inf, 1.0
    if amax == 0.0:
        return 1.0, 0.0
    if _SAFE_LO <= amax <= _SAFE_HI:  # squares neither overflow nor lose anything that matters
        return 1.0, q
    s = math.ldexp(1.0, min(math.frexp(amax)[1], 1023))  # (2^1024 is not a float: amax >= 2^1023 takes 2^1023)
    b = np.asarray(b, dtype=np.float64) / s
    return s, float(np.dot(b, b))


def frobenius_norm(X: Any) -> float:
    """``||X||_F`` of a dense array in float64, scaled against overflow and underflow (see above).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._operand import frobenius_norm
    >>> frobenius_norm(np.full((3, 4), 1e200)), frobenius_norm(np.full((3, 4), 1e-200))
    (3.4641016151377546e+200, 3.4641016151377545e-200)
    """
    scale, ssq = sqnorm_scaled(X)
    return scale * math.sqrt(ssq)


class DenseTensor(OperandBase):
    """The :class:`Operand` adapter of a dense numpy or cupy array (any layout: C, F or a strided view).

    Parameters
    ----------
    data : numpy or cupy array
        float32, float64, complex64 or complex128 (the engine's operations and the dense decompositions), kept
        as it is: no copy.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import DenseTensor
    >>> X = DenseTensor(np.ones((3, 4, 5)))
    >>> X.shape, round(X.norm() ** 2, 9), X.gram(1).shape
    ((3, 4, 5), 60.0, (4, 4))
    """

    def __init__(self, data: Any):
        self.data = data
        self.shape = tuple(int(s) for s in data.shape)
        self.dtype = np.dtype(data.dtype)
        self._finite = False
        # the sweeps' plans (HOOI's multi-TTM, CP-ALS's contractions), kept for this operand's life (one
        # decomposition call): the same shapes, strides and dtypes every iteration, so each plan is built once
        # (~20-60 us each, 4 per 3-way HOOI iteration: 9 % of a 50^3 one)
        self._sweep_plans: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"DenseTensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``numpy.asarray(X)``: the host array it holds (``tuckerkit.io.open_tensor`` gives one for a file read
        into memory; ``np.asarray`` of it was a 0-d object array)."""
        from tuckerkit.backend import to_host

        a = to_host(self.data)
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    @property
    def xp(self) -> ModuleType:
        return array_namespace(self.data)

    @property
    def device(self) -> Device:
        return device_of(self.data)

    def to(self, device: Device) -> DenseTensor:
        if device_of(self.data) == device:
            return self
        if device.is_gpu:
            check_fits(self.size * self.dtype.itemsize, device)
        moved = DenseTensor(to_device(self.data, device))
        moved._finite = self._finite
        return moved

    def check_finite(self) -> None:
        if not self._finite:
            bad = count_nonfinite(self.data)
            if bad:
                raise ValueError(f"X contains {bad} NaN or infinite value(s); remove or impute them first")
            self._finite = True

    def norm(self) -> float:
        return frobenius_norm(self.data)

    def scaled(self, factor: float) -> DenseTensor:
        out = DenseTensor(self.data * self.data.dtype.type(factor))
        out._finite = self._finite
        return out

    def gram(self, mode: int, *, plan: GramPlan | None = None, policy: ExecutionPolicy | None = None) -> Any:
        return dense_gram(self.data, mode, plan, resolve_policy(policy))

    def ttm(self, U: Any, mode: int, *, transpose: bool = False, out: Any = None,
            plan: ContractionPlan | None = None, policy: ExecutionPolicy | None = None) -> Any:
        return dense_ttm(self.data, U, mode, transpose, out, plan, resolve_policy(policy))

    def multi_ttm(self, mats: Mapping[int, Any], *, transpose: bool = False, plan: MultiTTMPlan | None = None,
                  policy: ExecutionPolicy | None = None) -> Any:
        return dense_multi_ttm(self.data, mats, transpose, plan, resolve_policy(policy))

    def mttkrp(self, factors: Sequence[Any], mode: int, *, plan: MTTKRPPlan | None = None,
               policy: ExecutionPolicy | None = None) -> Any:
        R = next(int(U.shape[1]) for m, U in enumerate(factors) if m != mode and U is not None) \
            if self.ndim > 1 else int(factors[0].shape[1])
        return dense_mttkrp(self.data, factors, mode, R, plan, resolve_policy(policy))

    def kept_first_mttkrp(self, factors: list[Any], carry: CarriedPartial, *,
                          policy: ExecutionPolicy | None = None) -> Any:
        """Mode 0's MTTKRP with the pass it takes kept in ``carry`` for the next sweep, or None
        (:func:`~tuckerkit.engine._sweeps.kept_first_mttkrp`)."""
        return kept_first_mttkrp(self.data, factors, resolve_policy(policy), self._sweep_plans, carry)

    def ttmc_sweep(self, factors: list[Any], update: Update, *, policy: ExecutionPolicy | None = None,
                   partials: dict[frozenset[int], Any] | None = None, carry: CarriedPartial | None = None) -> Sweep:
        """:meth:`Operand.ttmc_sweep`; ``carry`` (HOOI's, one per call): where it applies (3 to 8 modes), the
        sweeps share passes across sweeps through it (:func:`~tuckerkit.engine._sweeps.multi_sweep_applies`)."""
        return dense_ttmc_sweep(self.data, factors, update, resolve_policy(policy), partials, self._sweep_plans,
                                carry)

    def sweep_spine(self) -> list[frozenset[int]]:
        return tree_spine(self.ndim, splits_first_alone(self.data))

    def mttkrp_sweep(self, factors: list[Any], update: Update, *, policy: ExecutionPolicy | None = None,
                     carry: CarriedPartial | None = None) -> Sweep:
        """:meth:`Operand.mttkrp_sweep`; ``carry`` (CP-ALS's, one per call): where it applies, the 3-way sweeps
        share a pass between two sweeps through it (:func:`~tuckerkit.engine._sweeps.multi_sweep_applies`)."""
        with on_device(self.device):  # (a GPU's cached plans then run without contract's device handling)
            return dense_mttkrp_sweep(self.data, factors, update, resolve_policy(policy), self._sweep_plans, carry)

    def leading_subspace(self, mode: int, rank: int, *, rng: np.random.Generator | None = None,
                         policy: ExecutionPolicy | None = None) -> tuple[Any, Any]:
        mode = self._subspace_args(mode, rank)
        return leading_left_singular(self.data, mode, rank, resolve_policy(policy))


# ---------------------------------------------------------------------------------------------------
# resolution
# ---------------------------------------------------------------------------------------------------
ACCEPTED = ("a numpy or cupy array (or array-like), a COOTensor or CSFTensor, a SlabTensor, a DaskTensor or "
            "dask.array.Array, a scipy.sparse matrix, or a pydata sparse array")


def _module_root(X: Any) -> str:
    return type(X).__module__.split(".")[0]


def dense_array(X: Any, name: str = "X", *, min_ndim: int = 1) -> Any:
    """``X`` as a numpy/cupy array of a kept dtype (ints and bools promoted to float64); no NaN scan.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine._operand import dense_array
    >>> dense_array([[1, 2], [3, 4]]).dtype
    dtype('float64')
    """
    if X is None:
        raise TypeError(f"{name} is None; expected an array")
    if not (hasattr(X, "dtype") and hasattr(X, "shape") and hasattr(X, "strides")):
        try:
            X = np.asarray(X)
        except (ValueError, TypeError):
            raise TypeError(f"{name} is a {type(X).__name__}; expected {ACCEPTED}") from None
        if X.dtype == object:
            raise TypeError(f"{name} could not be converted to a numeric array (it holds Python objects)")
    X = plain_array(X, name)
    dtype = result_dtype((X.dtype, name))
    if X.dtype != dtype:
        X = X.astype(dtype)
    if X.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s); received a {X.ndim}-d array")
    if X.ndim > MAX_ENGINE_NDIM:
        raise ValueError(f"{name} has {X.ndim} dimensions; at most {MAX_ENGINE_NDIM} are supported")
    return X


def _is_array_like(X: Any) -> bool:
    return hasattr(X, "shape") and hasattr(X, "dtype") and hasattr(X, "__getitem__")


def public_operand(X: Any, **kwargs: Any) -> Any:
    """:func:`as_operand` for the engine's public functions (``mttkrp``, ``ttm``, ``multi_ttm`` / ``ttmc``,
    ``gram``, the sweeps): a sparse tensor whose values changed since its CSF trees were built (edited in place,
    or another array assigned) drops them first, as each decomposition does at its start (one read of the
    values), so a call never reads the old values."""
    op = as_operand(X, **kwargs)
    drop = getattr(op, "drop_stale_plan", None)
    if drop is not None:
        drop()
    return op


def as_operand(
    X: Any,
    *,
    memory_limit: Any = None,
    device: Any = None,
    check_finite: bool = False,
    real: bool = False,
    min_ndim: int = 1,
    dtype: Any = None,
    name: str = "X",
) -> Any:
    """Resolve any tensor tuckerkit accepts to its :class:`Operand`, once, at a public entry.

    Parameters
    ----------
    X : array, array-like or tensor
        A numpy or cupy array (any layout; ints and bools promoted to float64), a numpy memmap, an HDF5 or
        zarr dataset, a :class:`~tuckerkit.sparse.COOTensor` / :class:`~tuckerkit.sparse.CSFTensor`, a
        scipy.sparse matrix (a 2-way sparse tensor), a :class:`SlabTensor`, a :class:`DaskTensor` or a
        ``dask.array.Array``; an operand is returned as it is.
    memory_limit : int or str, optional
        A dense tensor larger than this many bytes (e.g. ``"4GB"``) becomes a :class:`SlabTensor` read in
        slabs (out of core); smaller ones are read into memory.
    device : {None, "cpu", "cuda", "cuda:N"}, optional
        Move the operand there (dense arrays once; sparse tensors as COO in device memory).
    check_finite : bool, default False
        Refuse NaN and Inf (once per operand; streamed kinds check during their norm pass).
    real : bool, default False
        Refuse complex dtypes (the methods that are real only: non-negative, Poisson, missing data).
    min_ndim : int, default 1
    dtype : {None, float32, float64}, optional
        Convert a dense input (slab by slab when it streams); default: keep it.
    name : str, default "X"
        The parameter name in error messages.

    Returns
    -------
    Operand

    Raises
    ------
    TypeError
        One line naming the type received and what is accepted.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import as_operand
    >>> as_operand(np.ones((100, 20, 30)), memory_limit="100KB")
    SlabTensor(shape=(100, 20, 30), dtype=float64, memory_limit=100,000, slab_rows=5)
    >>> as_operand("data.npy")
    Traceback (most recent call last):
    ...
    TypeError: X is a str; expected a numpy or cupy array (or array-like), a COOTensor or CSFTensor, \
a SlabTensor, a DaskTensor or dask.array.Array, a scipy.sparse matrix, or a pydata sparse array (open files with \
tuckerkit.io.open_tensor)
    """
    from tuckerkit.engine._dask import DaskTensor, is_dask_array
    from tuckerkit.engine._slabs import SlabTensor, parse_memory, streams

    dev = parse_device(device) if device is not None else None
    if dev is not None and dev.is_gpu:
        get_cupy(dev, label=str(device))  # one-line errors naming the device as the caller wrote it
    limit = parse_memory(memory_limit) if memory_limit is not None else None
    if dev is not None and dev.is_gpu and (limit is not None or is_dask_array(X) or getattr(X, "streamed", False)):
        raise ValueError(f"device={device!r} cannot be combined with a Dask array or memory_limit; "
                         "out-of-core and distributed runs use device='cpu'")
    op: Any
    if isinstance(X, OperandBase) and limit is not None and isinstance(X, DenseTensor) \
            and isinstance(X.data, np.ndarray):
        X = X.data  # (an opened file's array, a memory map: memory_limit streams it as it would the array)
    if isinstance(X, OperandBase):
        op = X
        held = getattr(X, "memory_limit", None)
        if limit is not None and held is not None and held != limit:
            raise ValueError(f"{name} already streams with memory_limit={held:,} bytes (open_tensor's); "
                             f"memory_limit={limit:,} differs: pass one of them")
    elif isinstance(X, np.ndarray) or _module_root(X) == "cupy":
        op = None
    elif is_dask_array(X):
        op = DaskTensor(X)
    elif _module_root(X) == "scipy" and hasattr(X, "tocoo"):
        from tuckerkit.sparse import COOTensor

        op = COOTensor.from_scipy(X)
    elif _module_root(X) == "sparse" and hasattr(X, "fill_value"):  # pydata sparse (TensorLy's sparse backend)
        from tuckerkit.sparse import COOTensor

        op = COOTensor.from_sparse(X)
    elif isinstance(X, Operand):
        op = X
    elif isinstance(X, str | bytes) or X is None or not (_is_array_like(X) or isinstance(X, list | tuple)):
        hint = " (open files with tuckerkit.io.open_tensor)" if isinstance(X, str | bytes) else ""
        raise TypeError(f"{name} is {'None' if X is None else 'a ' + type(X).__name__}; expected {ACCEPTED}{hint}")
    else:
        op = None
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"dtype={dtype} is not supported; expected float32 or float64")
    if op is None:  # dense
        X = plain_array(X, name)
        if limit is not None and _is_array_like(X) and streams(X.shape, dtype or X.dtype, limit, X.dtype):
            op = SlabTensor(X, limit, dtype=dtype)
        if op is None:
            if not (isinstance(X, np.ndarray) or _module_root(X) == "cupy"):
                try:
                    X = np.asarray(X)  # lists, HDF5 / zarr datasets that fit
                except (ValueError, TypeError):
                    from tuckerkit._validation import describe

                    raise TypeError(f"{name} could not be converted to an array (nested sequences of unequal "
                                    f"lengths, or entries that are not numbers); received {describe(X)}") from None
            if dtype is not None and X.dtype != dtype:
                X = narrowed(X, dtype, name)
            if real or check_finite or min_ndim > 1:  # a decomposition's input: the full one-line checks
                X = check_tensor(X, name, min_ndim=min_ndim, allow_complex=not real, check_finite=check_finite)
            else:
                X = dense_array(X, name, min_ndim=min_ndim)
            op = DenseTensor(X)
            op._finite = check_finite
    else:
        if real or check_finite or min_ndim > 1:
            check_shape(op, name, min_ndim=min_ndim)
            if op.ndim > MAX_NDIM:
                raise ValueError(f"{name} has {op.ndim} dimensions; at most {MAX_NDIM} are supported")
        if check_finite:
            op.check_finite()
    if dev is not None:
        op = op.to(dev)
    return op


def narrowed(X: Any, dtype: Any, name: str) -> Any:
    """``X`` in ``dtype``; where that narrows a floating array (float64 to float32), a one-line ValueError when a
    finite entry overflows (the decomposition had blamed NaN or infinity in the data, and numpy's overflow
    warning leaked) or when every nonzero entry underflows to zero (the CLI's ``--dtype float32`` on a 1e-300
    tensor reported a fit of 1.0 for an all-zero model). One more pass over X, only when it narrows."""
    dt = np.dtype(dtype)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        Y = X.astype(dt)
    src = np.dtype(X.dtype)
    if src.kind not in "fc" or dt.kind not in "fc" or dt.itemsize >= src.itemsize or not hasattr(Y, "size"):
        return Y
    xp = array_namespace(Y)
    finite = xp.isfinite(X)  # (NaN placeholders of missing entries: neither an overflow nor a nonzero)
    if bool(xp.any(xp.isinf(Y) & finite)):
        big = float(xp.abs(xp.where(finite, X, 0)).max())
        raise ValueError(f"{name} has values beyond {dt.name}'s range (largest magnitude {big:.3g}; {dt.name} holds "
                         f"up to {float(np.finfo(dt).max):.3g}): dtype={dt.name} would make them infinite; keep "
                         f"{src.name}, or scale the data")
    kept = finite & (X != 0)
    if Y.size and bool(xp.any(kept)) and not bool(xp.any((Y != 0) & kept)):
        small = float(xp.abs(xp.where(finite, X, 0)).max())
        raise ValueError(f"{name} has every value below {dt.name}'s range (largest magnitude {small:.3g}; "
                         f"{dt.name}'s smallest is {float(np.finfo(dt).smallest_subnormal):.3g}): dtype={dt.name} "
                         f"would make it all zero; keep {src.name}, or scale the data")
    return Y
