"""Result containers: TuckerTensor and CPTensor (frozen, with read-only arrays; unpack like TensorLy's tuples).

Frozen means the fields cannot be rebound *and* the numpy arrays they hold cannot be written: each is stored as
a read-only view (``T.core[0, 0, 0] = 1`` raises ``ValueError: assignment destination is read-only``). The view
costs nothing and leaves the arrays a user passed in writable; ``T.core.copy()`` gives a writable copy. A model
that is still being written to by a running algorithm would otherwise change under its reader, and a cached
result (a fitted estimator's factors, a loaded file) could be corrupted by one stray in-place operation. CuPy
arrays have no read-only flag: results on a GPU are frozen by convention only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, device_of, to_device, to_host


def _pow2_scaled(arrays: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Each array divided by the power of two at or above its largest magnitude (exact: only exponents
    change), and the sum of those powers' exponents: a product of the arrays' norms is the scaled arrays' times
    ``2 ** exponent``. An all-zero or non-finite array is left as it is. Integer and bool arrays are taken as
    float64 (a power-of-two scale in their own dtype was 0: the norm of a model of integer factors read 0.0); the
    scaling is ``numpy.ldexp``, exact at any exponent the dtype holds (a product with ``2 ** -e`` as one number
    overflowed for subnormal arrays: ``2 ** 1060`` is past float64)."""
    out, total = [], 0
    for a in arrays:
        if a.dtype.kind in "biu":
            a = a.astype(np.float64)
        m = float(np.max(np.abs(a))) if a.size else 0.0
        if m == 0.0 or not math.isfinite(m):
            out.append(a)
            continue
        e = math.frexp(m)[1]
        if np.iscomplexobj(a):
            b = np.empty_like(a)
            b.real, b.imag = np.ldexp(a.real, -e), np.ldexp(a.imag, -e)
        else:
            b = np.ldexp(a, -e)
        out.append(b)
        total += e
    return out, total


def _nonfinite(arrays: Any) -> float | None:
    """NaN where any of a model's arrays holds a NaN, infinity where one holds an infinity (and none a NaN), None
    where all are finite: what its norm and its relative error to a finite tensor are then (numpy's own results
    on the reconstruction), whichever way they are computed."""
    found = None
    for a in arrays:
        if a.dtype.kind not in "fc" or a.size == 0:
            continue
        xp = array_namespace(a)  # (a device array tested where it is: two flags come back, not the array)
        if bool(xp.isnan(a).any()):
            return math.nan
        if found is None and bool(xp.isinf(a).any()):
            found = math.inf
    return found


def _pair(obj: Any, what: str, kind: str) -> tuple[Any, Any]:
    """``obj``'s two parts for ``from_tensorly`` (a TensorLy model or a pair whose second entry is a non-empty
    sequence of factor matrices), or a one-line ``TypeError`` naming what was expected."""
    from tuckerkit._validation import describe

    try:
        first, factors = obj[0], obj[1]
        ok = len(obj) == 2 and not isinstance(factors, str) and len(factors) > 0
    except (TypeError, IndexError, KeyError):
        ok = False
    if not ok:
        raise TypeError(f"obj must be a TensorLy {kind} or a {what} pair with at least one factor matrix; received "
                        f"{describe(obj)}")
    return first, factors


def _ldexp(x: float, e: int) -> float:
    """``x * 2 ** e``, infinity past the largest float and 0.0 below the smallest."""
    try:
        return math.ldexp(x, e)
    except OverflowError:
        return math.inf


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
    are scaled, so no magnitude the dtype can hold overflows or underflows them. An all-zero ``X``: see
    :func:`_error_from_identity`."""
    from tuckerkit.engine._operand import frobenius_norm

    wide = np.complex128 if np.iscomplexobj(X) or np.iscomplexobj(Xhat) else np.float64
    X = np.asarray(to_host(X), dtype=wide)
    diff = X - np.asarray(to_host(Xhat), dtype=wide)
    normX, err = frobenius_norm(X), frobenius_norm(diff)
    if normX > 0:
        return err / normX
    if err > 0:
        raise _zero_reference()
    return 0.0


#: the most elements of one block of :func:`error_and_norm_blocks` (its float64 difference: 2 MiB, in L2 while
#: summed); at most a 64th of the tensor
ERROR_BLOCK_ELEMS = 1 << 18


def _blocked_error_applies(X: Any, *arrays: Any) -> bool:
    """Whether ``relative_error`` takes the blocked route (:func:`error_and_norm_blocks`): a real float32 /
    float64 numpy ``X`` filling its memory in some order of its axes (no gaps), and a real model on the host."""
    from tuckerkit.engine._direct import memory_order

    return (isinstance(X, np.ndarray) and X.dtype in (np.float32, np.float64) and X.ndim >= 2 and X.size > 0
            and memory_order(X) is not None and all(isinstance(a, np.ndarray) and a.dtype.kind == "f"
                                                    for a in arrays))


def error_and_norm_blocks(X: np.ndarray, first: Any, policy: Any = None) -> tuple[float, float]:
    """``(||X - X_hat||, ||X||)`` without ``X_hat``: ``first(order)`` gives ``(A, B)`` with ``A @ B`` the model's
    unfolding along ``order[0]``, its columns in the order of ``order[1:]`` (``order``: ``X``'s axes from the
    slowest in memory to the fastest, so that ``X`` unfolded that way is a view). Blocks of
    ``ERROR_BLOCK_ELEMS`` of that unfolding are reconstructed one at a time (``A``'s rows times ``B``'s
    columns, in the model's dtype, as ``to_dense`` computes them), subtracted from ``X``'s in float64 and summed
    squared in float64 (scaled as the norm's pieces are), on the default policy's workers with BLAS at one
    thread; the blocks' sums are combined in block order, so the bits do not depend on the workers. Where a
    block holds whole rows of the unfolding (the usual case) ``X``'s own squares are summed there too, so ``X``
    is read once (with ``relative_error``'s NaN / Inf check, :func:`_blocked_relative_error`).

    The dense route before it read ``X`` three times (the check, the norm, the difference) and made the whole
    reconstruction, a float64 copy of it and of a float32 ``X``, and their difference: 2.05x the input's bytes
    in extra memory for float64, 7.05x for float32, and 24-46 ms on 200^3 (rank 10; a whole default HOOI call
    takes about as long). Here the extra memory is ``B`` (the model with its first mode left out: ``rank / I``
    of the tensor) and one block per worker: 0.11x / 0.20x, 11-17 ms."""
    from tuckerkit.engine._direct import memory_order
    from tuckerkit.engine._operand import _piece_ssq, combine_pairs, frobenius_norm
    from tuckerkit.engine._policy import blas_pinned, default_policy, parallel_for

    order = memory_order(X)
    assert order is not None
    A, B = first(order)
    A = np.ascontiguousarray(A)  # (B as it comes: a transposed Khatri-Rao product is BLAS's too, no copy)
    Xm = X.transpose(order).reshape(A.shape[0], -1)  # (a view: X.transpose(order) is C-contiguous)
    rows, cols = Xm.shape
    # (at most a 64th of X a block, at least 4096 elements: a small X's scratch stays small beside it)
    cb = min(cols, ERROR_BLOCK_ELEMS, max(1 << 12, X.size // 64))
    rb = max(1, min(ERROR_BLOCK_ELEMS, max(1 << 12, X.size // 64)) // cb)
    blocks = [(r, c) for r in range(0, rows, rb) for c in range(0, cols, cb)]
    pairs: list[tuple[float, float]] = [(1.0, 0.0)] * len(blocks)
    # whole rows a block (the usual case): X's own pieces summed there too, while in cache (no second read)
    own: list[tuple[float, float]] | None = [(1.0, 0.0)] * len(blocks) if cb == cols else None
    hat_dtype = np.result_type(A, B)

    def work(i: int, scratch: tuple[np.ndarray, np.ndarray]) -> None:
        r0, c0 = blocks[i]
        r1, c1 = min(rows, r0 + rb), min(cols, c0 + cb)
        n = (r1 - r0) * (c1 - c0)
        hat = scratch[0][:n].reshape(r1 - r0, c1 - c0)
        diff = scratch[1][:n]
        np.matmul(A[r0:r1], B[:, c0:c1], out=hat)
        np.subtract(Xm[r0:r1, c0:c1], hat, out=diff.reshape(r1 - r0, c1 - c0))
        pairs[i] = _piece_ssq(diff)  # (dot products on one BLAS thread: the pin holds every thread's)
        if own is not None:
            own[i] = _piece_ssq(Xm[r0:r1].reshape(-1))

    with blas_pinned(), np.errstate(over="ignore", under="ignore", invalid="ignore"):
        parallel_for(work, len(blocks), policy if policy is not None else default_policy(),
                     lambda: (np.empty(rb * cb, hat_dtype), np.empty(rb * cb, np.float64)))
    scale, ssq = combine_pairs(pairs)
    if own is not None:
        xs, xq = combine_pairs(own)
        normX = xs * math.sqrt(xq)
    else:
        normX = frobenius_norm(X)
    return scale * math.sqrt(ssq), normX


def _zero_reference() -> ValueError:
    return ValueError("X has zero norm (every entry is 0); the relative error ||X - X_hat|| / ||X|| of a nonzero "
                      "model is undefined")


def _reference(X: Any, shape: tuple[int, ...], check: bool = True) -> Any:
    """The operand of ``relative_error``'s ``X``: finite (NaN and Inf refused, counted), of the model's shape.
    ``check=False``: a numpy array's NaN / Inf scan is left to the caller (its other checks as always), which
    then calls ``op.check_finite()`` or reads ``X`` in a way that finds them (:func:`_blocked_relative_error`)."""
    from tuckerkit._validation import check_tensor
    from tuckerkit.engine import as_operand

    if not check and isinstance(X, np.ndarray):
        op = as_operand(check_tensor(X, "X", min_ndim=1, allow_complex=True, check_finite=False), min_ndim=1)
    else:
        op = as_operand(X, min_ndim=1, check_finite=True)
    if tuple(op.shape) != tuple(shape):
        raise ValueError(f"X has shape {tuple(op.shape)}; expected the model's shape {tuple(shape)}")
    return op


def _blocked_relative_error(op: Any, arrays: tuple[Any, ...], first: Any) -> float | None:
    """``relative_error`` of a dense operand by blocks (:func:`error_and_norm_blocks`) where it applies
    (:func:`_blocked_error_applies`), its finiteness checked by the same read (a NaN or an infinity makes the
    sums non-finite: then counted and refused in one line); None elsewhere, ``X`` then checked."""
    if not _blocked_error_applies(op.data, *arrays):
        op.check_finite()
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        err, normX = error_and_norm_blocks(op.data, first)
    if not (math.isfinite(err) and math.isfinite(normX)):
        op.check_finite()  # raises, naming the count (a finite X whose sums overflow cannot: they are scaled)
    if normX > 0:
        return err / normX
    if err > 0:
        raise _zero_reference()
    return 0.0


def _single_relative_error(op: Any, arrays: tuple[Any, ...], kind: str) -> float | None:
    """``relative_error`` of a float32 numpy ``X`` against a real model on the host, the residual and ``||X||``
    formed in double precision in one read by the compiled sum (:func:`~tuckerkit.decomposition._entry.
    double_residual`, as a float32 decomposition's fit near 1), its finiteness checked by the same read; None
    elsewhere (or where X's axes leave gaps in memory). The blocked route reconstructs in the model's dtype: a
    float32 model's own rounding, about eps32 of ``||X||``, was then part of the error (an exact 60 x 70 x 80
    Tucker model read 1.56e-7 for 1.26e-7), and it took 12.9-13.3 ms on 200^3 at rank 10 where this takes 6.9-7.5
    (interleaved medians, Tucker and CP models)."""
    data = op.data
    if not (isinstance(data, np.ndarray) and data.dtype == np.float32) or \
            not all(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in arrays):
        return None
    from tuckerkit.decomposition._entry import double_residual
    from tuckerkit.engine import default_policy

    if kind == "tucker":
        from tuckerkit.decomposition._tucker import TuckerResidual as Model
    else:
        from tuckerkit.decomposition._cp import CPResidual as Model  # type: ignore[assignment]
    got = double_residual(data, Model(np, arrays[0], arrays[1:]), default_policy())
    if got is None:
        return None
    err2, norm2 = got
    if not (math.isfinite(err2) and math.isfinite(norm2)):
        op.check_finite()  # (raises, naming the count)
    if norm2 > 0:
        return math.sqrt(err2) / math.sqrt(norm2)
    if err2 > 0:
        raise _zero_reference()
    return 0.0


def _wide(a: Any) -> np.ndarray:
    """A host copy in float64 (complex128 for a complex array): sums of products without rounding to float32."""
    return np.asarray(to_host(a), dtype=np.complex128 if np.iscomplexobj(a) else np.float64)


def _adjoint(U: Any) -> Any:
    """``U^H`` (``U^T`` for a real U, a view: ``U.T @ U`` stays numpy's symmetric product)."""
    return U.conj().T if np.iscomplexobj(U) else U.T


def _dense_input(op: Any) -> bool:
    """Whether a relative error can be taken entry by entry (an in-memory dense array)."""
    from tuckerkit.engine import DenseTensor

    return isinstance(op, DenseTensor)


def _sparse_error(op: Any, kind: str, lead: Any, factors: Any) -> float | None:
    """``||X - X_hat|| / ||X||`` of a real sparse tensor against a host model, from the residual in float64
    (:func:`~tuckerkit.decomposition._entry.sparse_residual_sq`: the identity's float32 products read 0.0 for a
    true 5.4e-6); None where that does not apply (not sparse, complex, a device model, a zero or non-finite
    sum: the identity then)."""
    if getattr(op, "nnz", None) is None or not all(isinstance(a, np.ndarray) for a in (lead, *factors)) or \
            any(np.iscomplexobj(a) for a in (lead, *factors)):
        return None
    from tuckerkit.decomposition._entry import sparse_residual_sq

    if kind == "tucker":
        from tuckerkit.decomposition._tucker import TuckerResidual as Model
    else:
        from tuckerkit.decomposition._cp import CPResidual as Model  # type: ignore[assignment]
    normX = op.norm()
    if not (normX > 0 and math.isfinite(normX)):
        return None
    # (values and model times 2 ** -shift, exact: squares of 1e300 or 1e-300 had read 0.0 for a true 0.78)
    values = op.values  # (a COO's or a CSF tree's: the same entries)
    shift = math.frexp(float(np.max(np.abs(values))))[1] if values.size else 0
    res = sparse_residual_sq(op, Model(np, np.ldexp(lead, -shift) if shift else lead, factors), shift)
    return math.sqrt(res) / math.ldexp(normX, -shift) if math.isfinite(res) else None


def _degenerate_error(op: Any, arrays: tuple[Any, ...], empty: bool) -> float | None:
    """``relative_error`` where the model decides it alone: NaN / infinity for a model holding one (after ``X``'s
    own checks: numpy's result on the reconstruction, the same on every route), 1.0 for a model of no components
    (a rank or core extent 0: the zero model) against a non-zero ``X`` (0.0 against zeros); None otherwise."""
    bad = _nonfinite(arrays)
    if bad is None and not empty:
        return None
    check = getattr(op, "check_finite", None)
    if check is not None:
        check()
    normX = op.norm()
    if bad is not None:
        return bad
    return 1.0 if normX > 0 else 0.0


def _error_from_identity(normX: float, inner: float, normXhat: float) -> float:
    """``||X - X_hat|| / ||X||`` from ``||X||``, ``<X, X_hat>`` and ``||X_hat||`` (in units of ``||X||``). An
    all-zero ``X``: 0.0 for the zero model (exact, as a decomposition of zeros reports fit 1.0), else a
    ``ValueError`` (the ratio is undefined)."""
    if normX <= 0:
        if normXhat > 0:
            raise _zero_reference()
        return 0.0
    a, b = inner / normX / normX, normXhat / normX
    return math.sqrt(max(1.0 - 2.0 * a + b * b, 0.0))


def _read_only(a: Any) -> Any:
    """A read-only view of a numpy array (the caller's array keeps its own flags); other arrays unchanged."""
    if isinstance(a, np.ndarray):
        if not a.flags.writeable:
            return a
        v = a.view()
        v.flags.writeable = False
        return v
    return a


def _host_array(a: Any) -> Any:
    """A peer's array (numpy, or anything ``numpy.asarray`` takes) as numpy, on the host."""
    return np.asarray(to_host(a)) if hasattr(a, "shape") else np.asarray(a)


def _check_factors(factors: Any) -> tuple[Any, ...]:
    """A model's ``factors``: a sequence (tuple, list) of 2-D arrays (numpy, cupy: only their shapes are read;
    entries are not checked, so a model built by hand may hold NaN, which ``save_result`` refuses)."""
    if isinstance(factors, str | bytes) or hasattr(factors, "shape") or not hasattr(factors, "__iter__"):
        from tuckerkit._validation import describe

        raise TypeError(f"factors is {describe(factors)}; expected a tuple of 2-D arrays, one (I_n, R_n) matrix per "
                        "mode")
    factors = tuple(factors)
    for n, U in enumerate(factors):
        if not hasattr(U, "shape") or not hasattr(U, "dtype") or len(U.shape) != 2:
            from tuckerkit._validation import describe

            raise TypeError(f"factors[{n}] is {describe(U)}; expected a 2-D array (an (I_{n}, R_{n}) matrix)")
    return factors


class _Model:
    """What both results share: unpacking as a ``(first, factors)`` pair, shape, latest fit, reconstruction."""

    factors: tuple[Any, ...]
    fit_history: tuple[float, ...]

    def __setstate__(self, state: dict[str, Any]) -> None:
        # (unpickling and copy.deepcopy set the fields without __post_init__: the arrays come back writable)
        for k, v in state.items():
            object.__setattr__(self, k, v)
        self._freeze("core" if "core" in state else "weights")

    def _freeze(self, first: str) -> None:
        object.__setattr__(self, first, _read_only(getattr(self, first)))
        object.__setattr__(self, "factors", tuple(_read_only(U) for U in self.factors))
        object.__setattr__(self, "fit_history", tuple(float(f) for f in self.fit_history))
        object.__setattr__(self, "plans", tuple(self.plans))  # type: ignore[attr-defined]

    def to_dense(self) -> Any:
        raise NotImplementedError

    def full(self) -> Any:
        """The full tensor, as pyttb's ``full()`` (the same as :meth:`to_dense`).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> T = tk.hosvd(np.random.default_rng(0).standard_normal((4, 5, 6)), 2)
        >>> bool(np.array_equal(T.full(), T.to_dense())), np.asarray(T).shape
        (True, (4, 5, 6))
        """
        return self.to_dense()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``numpy.asarray(model)``: the dense reconstruction on the host (``prod(shape)`` elements)."""
        if copy is False:
            raise ValueError("a model cannot be viewed as an array without a copy: it is reconstructed")
        dense = np.asarray(to_host(self.to_dense()))
        return dense if dtype is None else dense.astype(dtype, copy=False)

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
        ``1 - ||X - X_hat|| / ||X||`` after each iteration (HOOI) or after the pass (HOSVD). These come from norms
        or eigenvalues (``||X||^2 - ||core||^2``, the energy each step keeps) without another pass over X, so
        they carry about ``sqrt(eps)`` of X's dtype in absolute error (float64: ~2e-8). On dense data in memory
        a fit above ``1 - sqrt(200 eps)`` (0.995 in single precision, 1 - 2.1e-7 in double: an error where the
        norms' rounding starts to show; a near-perfect float32 model read up to ~5e-4 low, an exact float64 one
        3e-8 for 1e-15) is instead that of the residual formed in double precision, at the cost of one more
        read of X: HOSVD's and ST-HOSVD's one value, and every such entry of the history of HOOI, CP-ALS and the
        non-negative methods (where they are in that regime each iteration's fit is the residual's: it decides
        their convergence, and the callback sees it), one more read of X per iteration there. A rank choice by
        ``max_error`` on single-precision data takes its Grams in double precision. :meth:`relative_error`
        compares entry by entry.
    plans : tuple
        Kernel plans used by the last iteration (engine ``ContractionPlan`` objects), for inspection.
    passes_per_iteration : int or float
        Full passes over the input tensor per iteration (dimension-tree reuse); where the sweeps share passes
        across sweeps (the multi-sweep tree: CP-ALS on 3 modes, HOOI on 3 to 8), the mean over the call to two
        decimals (1.5 for 3 modes, 1.33 for 4). HOOI's and CP-ALS's count every read of X: a line-search jump's
        fit (CP-ALS) and the residual fits near an exact fit (one each) too.
    ranks : tuple of int
        The core's shape (property).
    fit : float
        The last entry of ``fit_history`` (property).

    Notes
    -----
    Frozen: the fields cannot be rebound and the numpy arrays are read-only views (``core.copy()`` to edit); a
    core given in another layout than C's is copied to a C-ordered one first.
    ``to_dense()``, ``full()`` (pyttb's name) and ``numpy.asarray(T)`` reconstruct the full tensor (C-ordered);
    ``to_tensorly()`` / ``from_tensorly()`` and ``to_pyttb()`` / ``from_pyttb()`` convert both ways.

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
    >>> T.core.flags.writeable
    False
    """

    core: Any
    factors: tuple[Any, ...]
    n_iter: int = 0
    converged: bool = True
    fit_history: tuple[float, ...] = ()
    plans: tuple[Any, ...] = field(default=(), repr=False)
    passes_per_iteration: int | float = 0

    def __post_init__(self) -> None:
        factors = _check_factors(self.factors)
        core = self.core
        if not hasattr(core, "shape") or not hasattr(core, "dtype"):
            from tuckerkit._validation import describe

            raise TypeError(f"core is {describe(core)}; expected an array of shape (R_0, ..., R_{{N-1}})")
        if len(core.shape) != len(factors):
            raise ValueError(f"core has {len(core.shape)} modes (shape {tuple(core.shape)}) but factors has "
                             f"{len(factors)} matrices; expected one factor per mode of the core")
        for n, U in enumerate(factors):
            if U.shape[1] != core.shape[n]:
                raise ValueError(f"factors[{n}] has shape {tuple(U.shape)}; expected {core.shape[n]} columns (the "
                                 f"core's size along mode {n}, core shape {tuple(core.shape)})")
        if getattr(getattr(core, "flags", None), "c_contiguous", True) is False:
            # (a C-ordered core, as numpy makes arrays: the engine's projections may leave a core's axes in another
            # order in memory; the core is small)
            object.__setattr__(self, "core", array_namespace(core).ascontiguousarray(core))
        object.__setattr__(self, "factors", factors)
        self._freeze("core")

    def _pair(self) -> tuple[Any, list[Any]]:
        return self.core, list(self.factors)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.core.shape)

    def to_dense(self) -> Any:
        """The full tensor ``core x_n U_n`` (allocates ``prod(shape)`` elements), C-ordered, as numpy makes an
        array: the engine's products leave their result in whichever order of its axes the last one wrote (a
        10^3 tensor at rank 3 as (10, 10, 10) with strides (80, 8, 800)), and that one is copied then. A
        C-ordered result is what a user's next step expects (a reshape without a copy; ``hooi``'s compiled sweep
        of a small tensor takes C and F order only)."""
        full = self._full()
        return full if full.flags.c_contiguous else array_namespace(full).ascontiguousarray(full)

    def _full(self) -> Any:
        """The full tensor in the order of its axes that the engine's products leave (:meth:`to_dense` without
        its copy: for the library's own sums over it)."""
        from tuckerkit.engine import multi_ttm

        if not self.factors:  # (a model of no modes: its core, a scalar; multi_ttm takes tensors of one mode or more)
            return array_namespace(self.core).array(self.core, copy=True)
        return multi_ttm(self.core, list(self.factors))

    def _unfolded(self, order: tuple[int, ...]) -> tuple[Any, Any]:
        """``(A, B)``: the reconstruction unfolded along ``order[0]`` is ``A @ B``, its columns in the order of
        ``order[1:]`` (:func:`error_and_norm_blocks`)."""
        from tuckerkit.engine import multi_ttm

        core = self.core.transpose(order)
        rest = list(range(1, len(order)))
        G = multi_ttm(core, [self.factors[m] for m in order[1:]], modes=rest) if rest else core
        return self.factors[order[0]], np.ascontiguousarray(G).reshape(core.shape[0], -1)

    def norm(self) -> float:
        """Frobenius norm of the model (equal to the core's norm when the factors are orthonormal); the core and
        each factor scaled by a power of two first (exact), so that no square overflows or underflows."""
        from tuckerkit.engine import multi_ttm

        bad = _nonfinite((self.core, *self.factors))
        if bad is not None:
            return bad
        if not self.factors:  # (no modes: the core is the model)
            return float(abs(to_host(self.core).reshape(-1)[0]))
        (G, *Us), e = _pow2_scaled([to_host(self.core), *(to_host(U) for U in self.factors)])
        grams = [_adjoint(U) @ U for U in Us]
        GG = (G.conj() if np.iscomplexobj(G) else G) * multi_ttm(G, grams)
        return _ldexp(math.sqrt(max(float(GG.sum().real), 0.0)), e)

    def relative_error(self, X: Any) -> float:
        """``||X - X_hat||_F / ||X||_F``.

        A dense array is compared entry by entry with the reconstruction (accurate to a few eps even for a
        near-perfect fit; float32 data against a real model: the residual and the norm in double precision, in
        one read, without the reconstruction); a real sparse tensor by the residual in float64 over its nonzeros
        plus the model's norm off them; an out-of-core or Dask tensor through the identity
        ``||X - X_hat||^2 = ||X||^2 - 2 <X, X_hat> + ||X_hat||^2``, where ``<X, X_hat> = <X x_n U_n^T, core>`` is
        one projection of ``X`` (never densified; accurate to about ``sqrt(eps)`` relative to ``||X||``).

        ``X`` must have the model's shape and finite entries (a one-line ``ValueError`` otherwise). An all-zero
        ``X`` gives 0.0 for a zero model (exact) and a ``ValueError`` for any other (the ratio is undefined).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> from tuckerkit.sparse import COOTensor
        >>> X = np.random.default_rng(0).standard_normal((6, 7, 8))
        >>> T = tk.hosvd(X, 3)
        >>> bool(abs(T.relative_error(COOTensor.from_dense(X)) - T.relative_error(X)) < 1e-8)
        True
        """
        op = _reference(X, self.shape, check=False)
        early = _degenerate_error(op, (self.core, *self.factors), self.core.size == 0)
        if early is not None:
            return early
        if _dense_input(op):
            got = _single_relative_error(op, (self.core, *self.factors), "tucker")
            if got is None:
                got = _blocked_relative_error(op, (self.core, *self.factors), self._unfolded)
            return got if got is not None else _relative_error(op.data, self._full())
        got = _sparse_error(op, "tucker", self.core, self.factors)
        if got is not None:
            return got
        inner = _wide(op.multi_ttm(dict(enumerate(self.factors)), transpose=True))
        return _error_from_identity(op.norm(), float(np.sum(inner * _wide(self.core).conj()).real), self.norm())

    def compression_ratio(self) -> float:
        """Entries of the full tensor over entries stored by the model."""
        stored = math.prod(self.ranks) + sum(U.size for U in self.factors)
        return math.prod(self.shape) / stored

    def to_tensorly(self):
        """Convert to ``tensorly.tucker_tensor.TuckerTensor`` (needs TensorLy; host arrays, copied so that
        TensorLy may write to them).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> T = tk.hosvd(np.random.default_rng(0).standard_normal((4, 5, 6)), 2)
        >>> tl = T.to_tensorly()
        >>> type(tl).__name__, tk.TuckerTensor.from_tensorly(tl).ranks
        ('TuckerTensor', (2, 2, 2))
        """
        from tensorly.tucker_tensor import TuckerTensor as TLTucker

        return TLTucker((_host_array(self.core).copy(), [_host_array(U).copy() for U in self.factors]))

    @classmethod
    def from_tensorly(cls, obj) -> TuckerTensor:
        """Build from a TensorLy TuckerTensor or a ``(core, factors)`` pair (host arrays, copied: an edit of the
        TensorLy object afterwards leaves the frozen model as it was).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> rng = np.random.default_rng(0)
        >>> T = tk.TuckerTensor.from_tensorly((rng.random((2, 3)), [rng.random((4, 2)), rng.random((5, 3))]))
        >>> T.shape, T.ranks
        ((4, 5), (2, 3))
        """
        core, factors = _pair(obj, "(core, factors)", "TuckerTensor")
        return cls(np.array(_host_array(core)), tuple(np.array(_host_array(U)) for U in factors))

    def to_pyttb(self):
        """Convert to a ``pyttb.ttensor`` (needs pyttb; host arrays, copied).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> X = np.random.default_rng(0).standard_normal((4, 5, 6))
        >>> T = tk.hosvd(X, 2)
        >>> tt = T.to_pyttb()
        >>> type(tt).__name__, bool(np.allclose(tt.full().data, T.to_dense()))
        ('ttensor', True)
        """
        import pyttb

        return pyttb.ttensor(pyttb.tensor(_host_array(self.core)), [_host_array(U) for U in self.factors], copy=True)

    @classmethod
    def from_pyttb(cls, obj) -> TuckerTensor:
        """Build from a ``pyttb.ttensor`` (copies of its core and factor matrices, as host arrays).

        Examples
        --------
        >>> import numpy as np
        >>> import pyttb
        >>> import tuckerkit as tk
        >>> rng = np.random.default_rng(0)
        >>> tt = pyttb.ttensor(pyttb.tensor(rng.random((2, 3))), [rng.random((4, 2)), rng.random((5, 3))])
        >>> T = tk.TuckerTensor.from_pyttb(tt)
        >>> T.ranks, bool(np.allclose(T.full(), tt.full().data))
        ((2, 3), True)
        """
        if type(obj).__name__ != "ttensor" or not hasattr(obj, "factor_matrices"):
            from tuckerkit._validation import describe

            raise TypeError(f"from_pyttb expects a pyttb.ttensor; received {describe(obj)}")
        core = getattr(obj.core, "data", None)
        if core is None:
            raise TypeError(f"from_pyttb expects a ttensor with a dense core; its core is a {type(obj.core).__name__}")
        # (copies: the model is frozen, and pyttb's in-place methods, normalize or an edit of factor_matrices,
        # rewrote a model that shared their memory)
        return cls(np.array(core), tuple(np.array(U) for U in obj.factor_matrices))


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

    Notes
    -----
    Frozen, with read-only arrays, as :class:`TuckerTensor`; ``to_dense()``, ``full()`` and
    ``numpy.asarray(cp)`` reconstruct; ``to_tensorly()`` / ``from_tensorly()`` and ``to_pyttb()`` /
    ``from_pyttb()`` (a ``pyttb.ktensor``) convert both ways.

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
    passes_per_iteration: int | float = 0

    def __post_init__(self) -> None:
        factors = _check_factors(self.factors)
        w = self.weights
        if not hasattr(w, "shape") or not hasattr(w, "dtype") or len(w.shape) != 1:
            from tuckerkit._validation import describe

            raise TypeError(f"weights is {describe(w)}; expected a 1-D array of R weights (from_tensorly takes None "
                            "as ones)")
        if not factors:
            raise ValueError("factors is empty; expected one (I_n, R) matrix per mode")
        for n, U in enumerate(factors):
            if U.shape[1] != w.shape[0]:
                raise ValueError(f"factors[{n}] has shape {tuple(U.shape)}; expected {w.shape[0]} columns (rank R = "
                                 f"{w.shape[0]}, the length of weights)")
        object.__setattr__(self, "factors", factors)
        self._freeze("weights")

    def _pair(self) -> tuple[Any, list[Any]]:
        return self.weights, list(self.factors)

    @property
    def rank(self) -> int:
        return int(self.weights.shape[0])

    def to_dense(self) -> Any:
        """The full tensor (allocates ``prod(shape)`` elements); a model of integer or bool arrays in float64, as
        :meth:`TuckerTensor.to_dense` gives it (in their own dtype the products wrapped around)."""
        from tuckerkit.engine import khatri_rao

        factors = [U.astype("float64") if U.dtype.kind in "biu" else U for U in self.factors]
        w = self.weights.astype("float64") if self.weights.dtype.kind in "biu" else self.weights
        first = factors[0] * w[None, :]
        rest = khatri_rao(factors[1:]) if len(factors) > 1 else None
        if rest is None:
            return first.sum(axis=1)
        return (first @ rest.T).reshape(self.shape)

    def _unfolded(self, order: tuple[int, ...]) -> tuple[Any, Any]:
        """``(A, B)``: the reconstruction unfolded along ``order[0]`` is ``A @ B``, its columns in the order of
        ``order[1:]`` (:func:`error_and_norm_blocks`)."""
        from tuckerkit.engine import khatri_rao

        first = self.factors[order[0]] * self.weights[None, :]
        return first, khatri_rao([self.factors[m] for m in order[1:]]).T

    def norm(self) -> float:
        """Frobenius norm of the model from the factor Grams (no reconstruction); the weights and each factor
        scaled by a power of two first (exact), so that no square overflows or underflows."""
        bad = _nonfinite((self.weights, *self.factors))
        if bad is not None:
            return bad
        (w, *Us), e = _pow2_scaled([to_host(self.weights), *(to_host(U) for U in self.factors)])
        V = np.ones((self.rank, self.rank))
        for U in Us:
            V = V * _wide(_adjoint(U) @ U)
        w = _wide(w)
        return _ldexp(math.sqrt(max(float((w.conj() @ V @ w).real), 0.0)), e)

    def relative_error(self, X: Any) -> float:
        """``||X - X_hat||_F / ||X||_F``: entry by entry for a dense array; for a sparse, out-of-core or Dask
        tensor from the identity ``||X||^2 - 2 <X, X_hat> + ||X_hat||^2`` with ``<X, X_hat>`` from one MTTKRP
        (never densified; the checks on ``X``: see :meth:`TuckerTensor.relative_error`).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> from tuckerkit.sparse import COOTensor
        >>> X = np.random.default_rng(0).standard_normal((6, 7, 8))
        >>> C = tk.cp_als(X, 3, random_state=0, max_iter=20, tol=0)
        >>> bool(abs(C.relative_error(COOTensor.from_dense(X)) - C.relative_error(X)) < 1e-8)
        True
        """
        op = _reference(X, self.shape, check=False)
        early = _degenerate_error(op, (self.weights, *self.factors), self.weights.size == 0)
        if early is not None:
            return early
        if _dense_input(op):
            got = _single_relative_error(op, (self.weights, *self.factors), "cp")
            if got is None:
                got = _blocked_relative_error(op, (self.weights, *self.factors), self._unfolded)
            return got if got is not None else _relative_error(op.data, self.to_dense())
        got = _sparse_error(op, "cp", self.weights, self.factors)
        if got is not None:
            return got
        M = _wide(op.mttkrp([U.conj() if np.iscomplexobj(U) else U for U in self.factors], 0))
        U0 = _wide(self.factors[0])
        w = _wide(self.weights)
        return _error_from_identity(op.norm(), float(np.sum(np.sum(M * U0.conj(), axis=0) * w).real), self.norm())

    def to_tensorly(self):
        """Convert to ``tensorly.cp_tensor.CPTensor`` (needs TensorLy; host arrays, copied so that TensorLy
        may write to them).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> rng = np.random.default_rng(0)
        >>> cp = tk.CPTensor(np.array([2.0, 1.0]), (rng.random((4, 2)), rng.random((5, 2))))
        >>> type(cp.to_tensorly()).__name__, tk.CPTensor.from_tensorly(cp.to_tensorly()).rank
        ('CPTensor', 2)
        """
        from tensorly.cp_tensor import CPTensor as TLCP

        return TLCP((_host_array(self.weights).copy(), [_host_array(U).copy() for U in self.factors]))

    @classmethod
    def from_tensorly(cls, obj) -> CPTensor:
        """Build from a TensorLy CPTensor or a ``(weights, factors)`` pair; ``weights=None`` means ones (host
        arrays, copied: an edit of the TensorLy object afterwards leaves the frozen model as it was).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> rng = np.random.default_rng(0)
        >>> tk.CPTensor.from_tensorly((None, [rng.random((4, 2)), rng.random((5, 2))])).weights
        array([1., 1.])
        """
        weights, factors = _pair(obj, "(weights, factors)", "CPTensor")
        factors = tuple(np.array(_host_array(U)) for U in factors)
        if weights is None:
            weights = np.ones(factors[0].shape[1], dtype=factors[0].dtype)
        return cls(np.array(_host_array(weights)), factors)

    def to_pyttb(self):
        """Convert to a ``pyttb.ktensor`` (needs pyttb; host arrays, copied).

        Examples
        --------
        >>> import numpy as np
        >>> import tuckerkit as tk
        >>> rng = np.random.default_rng(0)
        >>> cp = tk.CPTensor(np.array([2.0, 1.0]), (rng.random((4, 2)), rng.random((5, 2)), rng.random((3, 2))))
        >>> kt = cp.to_pyttb()
        >>> type(kt).__name__, bool(np.allclose(kt.full().data, cp.to_dense()))
        ('ktensor', True)

        A float32 model's factors are widened to float64 (pyttb's ktensor holds float64 only); a complex model is
        refused in one line.
        """
        import pyttb

        factors = [_host_array(U) for U in self.factors]
        if any(np.iscomplexobj(U) for U in factors):
            raise TypeError(f"to_pyttb: this CP model is complex ({factors[0].dtype}); pyttb's ktensor holds real "
                            "float64 factors only")
        # (pyttb's ktensor asserts float64 factors: a float32 model is widened, exactly)
        return pyttb.ktensor([U.astype(np.float64) for U in factors], _host_array(self.weights).astype(np.float64),
                             copy=True)

    @classmethod
    def from_pyttb(cls, obj) -> CPTensor:
        """Build from a ``pyttb.ktensor`` (copies of its weights and factor matrices, as host arrays).

        Examples
        --------
        >>> import numpy as np
        >>> import pyttb
        >>> import tuckerkit as tk
        >>> rng = np.random.default_rng(0)
        >>> kt = pyttb.ktensor([rng.random((4, 2)), rng.random((5, 2))], np.array([3.0, 1.0]))
        >>> cp = tk.CPTensor.from_pyttb(kt)
        >>> cp.rank, bool(np.allclose(cp.full(), kt.full().data))
        (2, True)
        """
        if type(obj).__name__ != "ktensor" or not hasattr(obj, "factor_matrices"):
            from tuckerkit._validation import describe

            raise TypeError(f"from_pyttb expects a pyttb.ktensor; received {describe(obj)}")
        # (copies, as TuckerTensor.from_pyttb: ktensor.normalize() rewrote a model that shared its weights)
        return cls(np.array(obj.weights), tuple(np.array(U) for U in obj.factor_matrices))
