"""Validation of user input, done once at each public entry point before any work.

Messages name the parameter, what was expected and what was received.
"""

from __future__ import annotations

import numbers
import operator
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, result_dtype, to_host

MAX_NDIM = 25


def count_nonfinite(X: Any, chunk_elems: int = 1 << 22) -> int:
    """Number of NaN/Inf entries, computed in slabs so no full-size mask is allocated."""
    xp = array_namespace(X)
    if X.ndim == 0:
        return int(not bool(xp.isfinite(X)))
    rows = max(1, chunk_elems // max(1, X.size // max(X.shape[0], 1)))
    if xp is not np:  # count on the device, one value back
        good = xp.zeros((), dtype=xp.int64)
        for start in range(0, X.shape[0], rows):
            good += xp.count_nonzero(xp.isfinite(X[start:start + rows]))
        return int(X.size - int(good))
    bad = 0
    for start in range(0, X.shape[0], rows):
        blk = X[start:start + rows]
        bad += int(blk.size - int(xp.count_nonzero(xp.isfinite(blk))))
    return bad


def check_shape(X: Any, name: str = "X", *, min_ndim: int = 2) -> None:
    """Order and empty modes only (cheap: no pass over the data)."""
    if X.ndim < min_ndim:
        raise ValueError(
            f"{name} must be a tensor with at least {min_ndim} dimensions; received a {X.ndim}-d array "
            f"of shape {tuple(X.shape)}"
        )
    if X.ndim > MAX_NDIM:
        raise ValueError(f"{name} has {X.ndim} dimensions; at most {MAX_NDIM} are supported")
    empty = [i for i, s in enumerate(X.shape) if s == 0]
    if empty:
        raise ValueError(
            f"{name} has an empty mode {empty[0]} (shape {tuple(X.shape)}); every mode must have at least one entry"
        )


def plain_array(X: Any, name: str = "X") -> Any:
    """``X`` as numpy's own array type in the machine's byte order, where it is another: a masked array without
    masked entries as its data (with masked entries a one-line ``ValueError``: the mask would be ignored, its
    entries read as data), ``numpy.matrix`` (its products are matrix products, and it is always 2-D) as a plain
    array, a byte-swapped dtype (``'>f4'`` on a little-endian machine) as the
    native one (it was taken as a foreign dtype: float64 results for float32 data). Anything else is returned
    as it is.

    Examples
    --------
    >>> import numpy as np
    >>> plain_array(np.ones(3, dtype=">f4")).dtype.isnative
    True
    """
    if not isinstance(X, np.ndarray):
        return X
    ma = sys.modules.get("numpy.ma")  # (not np.ma: that imports numpy.ma, 20-26 ms, where no masked array can be)
    if ma is not None and isinstance(X, ma.MaskedArray):
        masked = int(ma.count_masked(X))
        if masked:
            raise ValueError(
                f"{name} is a masked array with {masked} masked entr{'y' if masked == 1 else 'ies'}; pass "
                f"{name}.data with mask=~{name}.mask (True where observed; hooi and cp_als take it), or fill "
                f"them first ({name}.filled(value))"
            )
        X = ma.getdata(X)
    if isinstance(X, np.matrix):
        X = np.asarray(X)
    if not X.dtype.isnative:
        X = X.astype(X.dtype.newbyteorder("="))
    return X


def check_tensor(X: Any, name: str = "X", *, min_ndim: int = 2, allow_complex: bool = False,
                 check_finite: bool = True) -> Any:
    """Return ``X`` as a float32/float64 array (ints and bools promoted), or raise a one-line error."""
    if X is None:
        raise TypeError(f"{name} is None; expected an array of at least {min_ndim} dimensions")
    if not hasattr(X, "dtype") or not hasattr(X, "shape"):
        X = _from_nested(X, name)
    X = plain_array(X, name)
    dt = np.dtype(X.dtype)
    if dt.kind in "biu":
        X = X.astype(np.float64)
    elif dt == np.float16:
        X = X.astype(np.float32)
    elif dt.kind == "c" and allow_complex:
        if dt not in (np.complex64, np.complex128):  # (complex256 failed mid-run naming an internal operand)
            X = X.astype(np.complex128)
    elif dt.kind == "c":
        raise TypeError(f"{name} has complex dtype {dt}; expected a real tensor (float32 or float64)")
    elif dt not in (np.float32, np.float64):
        if dt.kind == "f":
            X = X.astype(np.float64)
        else:
            raise TypeError(
                f"{name} has dtype {dt}; expected a numeric tensor (float32 or float64; integers and bools "
                "are promoted to float64)"
            )
    check_shape(X, name, min_ndim=min_ndim)
    bad = count_nonfinite(X) if check_finite else 0
    if bad:
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s); remove or impute them first")
    return X


def _from_nested(X: Any, name: str) -> np.ndarray:
    """``np.asarray(X)`` of a list or other sequence, or a one-line ``TypeError`` naming ``name``."""
    try:
        return np.asarray(X)
    except (ValueError, TypeError):
        raise TypeError(f"{name} could not be converted to an array (nested sequences of unequal lengths, or "
                        f"entries that are not numbers); received {describe(X)}") from None


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.integer):
        raise TypeError(f"{name} must be an integer; received {describe(value)} ({type(value).__name__})")
    return operator.index(value)


def check_ranks(ranks: Any, shape: Sequence[int], name: str = "ranks") -> tuple[int, ...]:
    """Tucker ranks: one integer per mode (or one integer for all), each in [1, mode size]."""
    ndim = len(shape)
    if isinstance(ranks, np.ndarray) and ranks.ndim == 0:
        ranks = ranks.item()  # a 0-d array is one rank for every mode
    if isinstance(ranks, numbers.Integral | np.integer) and not isinstance(ranks, bool):
        ranks = [int(ranks)] * ndim
    if isinstance(ranks, str) or not isinstance(ranks, Sequence | np.ndarray):
        raise TypeError(f"{name} must be an integer or a sequence of {ndim} integers (one per mode); received "
                        f"{describe(ranks)} ({type(ranks).__name__})")
    ranks = list(ranks)
    if len(ranks) != ndim:
        raise ValueError(f"{name} has {len(ranks)} entries but the tensor has {ndim} modes; expected {ndim}")
    out = []
    for i, r in enumerate(ranks):
        r = _as_int(r, f"{name}[{i}]")
        if r < 1:
            raise ValueError(f"{name}[{i}]={r} is not positive; each rank must be between 1 and its mode size")
        if r > shape[i]:
            raise ValueError(
                f"{name}[{i}]={r} exceeds the size of mode {i} ({shape[i]}); each rank must be between 1 "
                "and its mode size"
            )
        out.append(r)
    return tuple(out)


def check_feature_ranks(ranks: Any, shape: Sequence[int], name: str = "ranks") -> tuple[int, ...]:
    """An estimator's feature ranks: one integer for every feature mode (capped at each mode's size; a 0-d
    array counts as one) or one integer per feature mode, each in [1, mode size]."""
    k = len(shape)
    if isinstance(ranks, np.ndarray) and ranks.ndim == 0:
        ranks = ranks.item()
    if isinstance(ranks, numbers.Integral | np.integer) and not isinstance(ranks, bool):
        r = int(ranks)
        if r < 1:
            raise ValueError(f"{name}={r} is not positive; expected integers >= 1")
        return tuple(min(r, s) for s in shape)
    if isinstance(ranks, str | bytes) or not isinstance(ranks, Sequence | np.ndarray):
        raise TypeError(f"{name} must be an integer or a sequence of {k} integers (one per feature mode); "
                        f"received {describe(ranks)} ({type(ranks).__name__})")
    if len(ranks) != k:
        raise ValueError(f"{name} has {len(ranks)} entries but the samples have {k} feature modes; expected {k}")
    try:
        return check_ranks(ranks, shape, name)
    except ValueError as exc:  # (its modes are the samples' feature modes: X's modes 1, 2, ...)
        msg = re.sub(r"the size of mode (\d+) \((\d+)\)",
                     lambda m: f"the size of feature mode {m[1]} ({m[2]}; X's mode {int(m[1]) + 1})", str(exc))
        raise ValueError(msg) from None


def check_cp_rank(rank: Any, name: str = "rank") -> int:
    r = _as_int(rank, name)
    if r < 1:
        raise ValueError(f"{name}={r} is not positive; expected an integer >= 1")
    return r


def check_unit_interval(value: Any, name: str) -> float:
    """A float strictly between 0 and 1 (e.g. the error tolerance of st_hosvd); a string or a bool is refused, not
    converted."""
    if isinstance(value, str | bytes | bool | np.bool_):
        raise TypeError(f"{name} must be a number in (0, 1); received {describe(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number in (0, 1); received {describe(value)}") from None
    if not 0.0 < v < 1.0 or not np.isfinite(v):
        raise ValueError(f"{name}={describe(value)} is outside (0, 1); expected a relative error such as 0.01")
    return v


def check_nonneg(value: Any, name: str) -> float:
    """A finite number >= 0 (a Python or numpy number, a 0-d array); a string or a bool is refused, not
    converted."""
    if isinstance(value, str | bytes | bool | np.bool_):
        raise TypeError(f"{name} must be a non-negative number; received {describe(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a non-negative number; received {describe(value)}") from None
    if not v >= 0.0 or not np.isfinite(v):
        raise ValueError(f"{name}={describe(value)} is invalid; expected a finite number >= 0")
    return v


def check_max_iter(value: Any, name: str = "max_iter") -> int:
    v = _as_int(value, name)
    if v < 1:
        raise ValueError(f"{name}={v} is invalid; expected an integer >= 1")
    return v


SVD_METHODS = ("exact", "randomized")


def check_svd(svd: Any) -> str:
    """The factor step's SVD: ``"exact"`` or ``"randomized"``."""
    if not isinstance(svd, str) or svd not in SVD_METHODS:
        raise ValueError(f"svd={describe(svd)} is not valid; expected one of {', '.join(map(repr, SVD_METHODS))}")
    return svd


def check_random_state(random_state: Any) -> np.random.Generator:
    """Resolve ``random_state`` once: None, an int seed, a Generator or a legacy RandomState."""
    if random_state is None or isinstance(random_state, numbers.Integral | np.integer):
        if isinstance(random_state, bool):
            raise TypeError("random_state must be None, an int, or a numpy Generator; received a bool")
        if random_state is not None and int(random_state) < 0:
            raise ValueError(f"random_state={int(random_state)} is invalid; expected None, an int >= 0, or a numpy "
                             "Generator")
        return np.random.default_rng(None if random_state is None else int(random_state))
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    raise TypeError(
        f"random_state must be None, an int, or a numpy Generator; received {type(random_state).__name__}"
    )


def check_choice(value: Any, name: str, options: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in options:
        opts = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name}={describe(value)} is not valid; expected one of {opts}")
    return value


def check_callback(callback: Any) -> Any:
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None; received {type(callback).__name__}")
    return callback


# ---------------------------------------------------------------------------------------------------
# the engine operations' arguments (modes, matrices, factor lists)
# ---------------------------------------------------------------------------------------------------
def check_mode(mode: Any, ndim: int, name: str = "mode") -> int:
    """A mode index in ``[-ndim, ndim)`` (negative counts from the end); bools are refused."""
    if isinstance(mode, bool) or not isinstance(mode, numbers.Integral | np.integer):
        raise TypeError(f"{name} must be an integer; received {type(mode).__name__}")
    m = operator.index(mode)
    if not -ndim <= m < ndim:
        raise ValueError(f"{name}={m} is out of range for a tensor with {ndim} modes; expected 0 <= {name} < {ndim}")
    return m % ndim


def describe(x: Any, *, limit: int = 60, depth: int = 1) -> str:
    """A short description of a value for an error message: never an array's entries.

    Short scalars and strings are shown as their ``repr``; arrays (anything with ``shape`` and ``dtype``) by
    shape and dtype; lists and tuples by their length and their items' descriptions (the first few); anything
    else whose ``repr`` is long or spans lines by its type name. The result stays under a few hundred
    characters whatever ``x`` holds: items are described ``depth`` levels down (a nested list's items as lists
    of a length; a 3-level list of booleans took 667 characters before).

    >>> describe([[[True] * 8] * 7] * 6)
    'a list of 6 items (a list of 7 items; a list of 7 items; a list of 7 items, ... (3 more))'
    """
    shape = getattr(x, "shape", None)
    if shape is not None and hasattr(x, "dtype"):
        try:
            shp = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            shp = shape
        if shp == ():
            return _short_repr(x, limit) or f"a 0-d array of dtype {x.dtype}"
        return f"an array of shape {shp} and dtype {x.dtype}"
    if isinstance(x, list | tuple) and not _short_repr(x, limit):
        kind = type(x).__name__
        if depth <= 0:
            return f"a {kind} of {len(x)} item{'s' if len(x) != 1 else ''}"
        items = [describe(v, limit=40, depth=depth - 1) for v in x[:3]]
        more = f", ... ({len(x) - 3} more)" if len(x) > 3 else ""
        return f"a {kind} of {len(x)} item{'s' if len(x) != 1 else ''} ({'; '.join(items)}{more})"
    return _short_repr(x, limit) or f"a {type(x).__name__}"


def _short_repr(x: Any, limit: int) -> str | None:
    """``repr(x)`` when it is one short line, else None."""
    try:
        text = repr(x)
    except Exception:
        return None
    return text if len(text) <= limit and "\n" not in text else None


def check_matrix(U: Any, name: str, dtype: Any) -> Any:
    """A 2-D numeric matrix, converted to the result dtype of itself and ``dtype``."""
    if U is None:
        raise TypeError(f"{name} is None; expected a 2-D matrix")
    if not hasattr(U, "dtype") or not hasattr(U, "shape"):
        try:
            U = np.asarray(U)
        except (ValueError, TypeError):
            raise TypeError(f"{name} could not be converted to a matrix; received {describe(U)}") from None
    result_dtype((U.dtype, name))
    if U.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix; received an array of shape {tuple(U.shape)}")
    want = np.result_type(U.dtype, dtype)
    if want.kind in "biu":
        want = np.dtype(np.float64)
    if U.dtype != want:
        U = U.astype(want)
    return U


def check_matrices(matrices: Any, name: str = "matrices") -> list[Any]:
    """A list from any sequence or iterable of matrices (a generator is read once); a one-line error else."""
    if isinstance(matrices, str) or hasattr(matrices, "shape"):
        raise TypeError(f"{name} must be a sequence of matrices; received {describe(matrices)}")
    try:
        return list(matrices)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of matrices; received {describe(matrices)}") from None


def int_sequence(value: Any, name: str, what: str) -> list[Any]:
    """``value`` as a list of its entries: a sequence, or a 1-D integer array; a bare number, a string or another
    array refused in one line saying ``what`` is expected (the entries are checked by the caller)."""
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu":
        return [int(m) for m in value]
    if isinstance(value, str | bytes) or hasattr(value, "shape") or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be {what}; received {describe(value)}")
    return list(value)


def check_factor_list(factors: Any, shape: Sequence[int], skip: int | None, dtype: Any,
                      name: str = "factors") -> tuple[list[Any], int]:
    """One (I_m, R) matrix per mode with a common R (the entry of ``skip`` may be None); returns them, R."""
    facs = check_matrices(factors, name)
    if len(facs) != len(shape):
        raise ValueError(f"{name} has {len(facs)} matrices; expected one per mode of X ({len(shape)})")
    out: list[Any] = []
    ranks = set()
    for m, U in enumerate(facs):
        if m == skip and U is None:
            out.append(None)
            continue
        U = check_matrix(U, f"{name}[{m}]", dtype)
        if U.shape[0] != shape[m]:
            raise ValueError(
                f"{name}[{m}] has {U.shape[0]} rows but mode {m} of X has size {shape[m]}; expected a matrix of "
                f"shape ({shape[m]}, R)"
            )
        ranks.add(int(U.shape[1]))
        out.append(U)
    if len(ranks) > 1:
        raise ValueError(f"{name} have different numbers of columns {sorted(ranks)}; expected one rank R")
    if not ranks and out:  # (a 1-D tensor whose one factor, the skipped one, is None: no R to read)
        raise ValueError(f"{name}[{skip}] is None and is the only matrix: a 1-D tensor's MTTKRP takes the rank R "
                         f"from it; expected a matrix of shape ({shape[0]}, R)")
    R = ranks.pop() if ranks else 0
    if R == 0 and any(U is not None for U in out):
        raise ValueError(f"{name} have 0 columns; expected a rank R >= 1")
    return out, R


# ---------------------------------------------------------------------------------------------------
# the decompositions' ``init=``: a method name, a model (ours, TensorLy's, pyttb's) or the factor matrices
# ---------------------------------------------------------------------------------------------------
def _is_matrix_list(x: Any) -> bool:
    return isinstance(x, list | tuple) and all(hasattr(U, "shape") or isinstance(U, list | tuple) for U in x)


def _unpack_model(init: Any, kind: str) -> tuple[Any, list[Any]] | None:
    """``(first, factors)`` of a Tucker or CP model object (tuckerkit's, TensorLy's, pyttb's), or None when
    ``init`` is not one; a model of the other kind (``kind`` is ``"tucker"`` or ``"cp"``) is refused."""
    name = type(init).__name__
    module = type(init).__module__ or ""
    if module.startswith("tensorly") and name in ("TuckerTensor", "CPTensor"):
        first, factors = init[0], init[1]
        got = "tucker" if name == "TuckerTensor" else "cp"
        label = f"TensorLy's {name}"
    elif module.startswith("pyttb") and name in ("ttensor", "ktensor"):
        got = "tucker" if name == "ttensor" else "cp"
        first = getattr(init.core, "data", init.core) if got == "tucker" else init.weights
        factors = init.factor_matrices
        label = f"a pyttb {name}"
    elif hasattr(init, "factors") and (hasattr(init, "core") or hasattr(init, "weights")):
        got = "tucker" if hasattr(init, "core") else "cp"
        first, factors = (init.core if got == "tucker" else init.weights), init.factors
        label = f"a {name}"
    else:
        return None
    if got != kind:
        want = "a Tucker model (TuckerTensor)" if kind == "tucker" else "a CP model (CPTensor)"
        raise TypeError(f"init is {label}, a {'Tucker' if got == 'tucker' else 'CP'} model; expected {want}, "
                        "a method name or the factor matrices")
    return first, list(factors)


def check_init(init: Any, shape: Sequence[int], ranks: Sequence[int] | int, *, kind: str,
               methods: Sequence[str], dtype: Any = None,
               nonzero_from: int | None = None) -> str | tuple[Any, list[Any]]:
    """The ``init=`` of HOOI (``kind="tucker"``, ``ranks`` per mode) or CP-ALS (``kind="cp"``, one ``rank``).

    Accepted: one of ``methods``; a model (tuckerkit's ``TuckerTensor``/``CPTensor``, TensorLy's, pyttb's
    ``ttensor``/``ktensor``); a list or tuple of one factor matrix per mode; a ``(core, factors)`` (Tucker) or
    ``(weights, factors)`` (CP, ``weights`` may be None) pair. Returns the method name, or ``(first,
    factors)``: the core or weights (None when not given) and the factor matrices, checked for their shapes
    (``(I_n, R_n)``; CP: ``(I_n, rank)``) and finite, numeric values. Every message is one line and shows
    shapes and dtypes, never an array's entries. With ``dtype`` (X's) real, complex factors, core or weights
    are refused (a cast would drop their imaginary parts). With ``nonzero_from`` (CP), a factor of that mode or a
    later one that is all zeros is refused: the updates read it before they replace it, and a product with it
    keeps the model zero (CP-ALS reported a fit of 0, converged, from such a start).
    """
    N = len(shape)
    real_x = dtype is not None and np.dtype(dtype).kind != "c"
    if isinstance(init, str):
        if init not in methods:
            names = ", ".join(repr(m) for m in methods)
            what = (f"a TuckerTensor (tuckerkit's or TensorLy's) or a list of {N} factor matrices" if kind == "tucker"
                    else f"a CPTensor (tuckerkit's or TensorLy's), a list of {N} factor matrices or a "
                         "(weights, factors) pair")
            lead = "" if kind == "tucker" else "one of "
            raise ValueError(f"init={describe(init)} is not valid; expected {lead}{names}, {what}")
        return init
    model = _unpack_model(init, kind)
    if model is not None:
        first, factors = model
    elif isinstance(init, list | tuple) and len(init) == 2 and _is_matrix_list(init[1]) and not (
            hasattr(init[1], "shape")):
        first, factors = init[0], list(init[1])  # (core, factors) / (weights, factors)
    elif isinstance(init, list | tuple) and _is_matrix_list(init):
        first, factors = None, list(init)
    else:
        shape_hint = "the factor matrices as a list, one per mode" if hasattr(init, "shape") else \
            "a method name, a model or a list of factor matrices"
        opts = ", ".join(repr(m) for m in methods)
        model_name = "TuckerTensor" if kind == "tucker" else "CPTensor"
        raise TypeError(f"init is {describe(init)}; expected {opts}, a {model_name} or a list of {N} factor "
                        f"matrices ({shape_hint})")
    if not factors:
        raise ValueError(f"init has no factor matrices; expected {N}, one per mode of X")
    checked = []
    for n, U in enumerate(factors):
        U = check_matrix(U, f"init factor {n}", np.float32)
        if real_x and np.dtype(U.dtype).kind == "c":
            raise TypeError(f"init's factors[{n}] has complex dtype {U.dtype}; expected real factors for a real X "
                            f"({np.dtype(dtype)})")
        if count_nonfinite(U):
            raise ValueError(f"init factor {n} contains NaN or infinite values; expected finite numbers")
        if kind == "cp" and nonzero_from is not None and n >= nonzero_from and U.size and not np.any(U):
            raise ValueError(f"init factor {n} is all zeros; expected a nonzero start (the updates multiply by it "
                             "before replacing it, so the model would stay zero)")
        checked.append(U)
    got_shape = tuple(int(U.shape[0]) for U in checked)
    cols = tuple(int(U.shape[1]) for U in checked)
    if kind == "tucker":
        want = tuple(ranks)  # type: ignore[arg-type]
        if got_shape != tuple(shape) or cols != want:
            raise ValueError(f"init has shape {got_shape} and ranks {cols}; expected shape {tuple(shape)} and "
                             f"ranks {want}")
        if first is not None:  # (used with mask=, for the first fill: a NaN core failed in LAPACK, a scalar or one
            # of other extents in the engine's words about matrices[0] and X)
            first = _start_lead(first, "core", want, lambda a: f"init's core has shape {tuple(a.shape)}; expected "
                                f"{want} (the ranks)", "a real core", real_x, dtype)
        return first, checked
    if len(set(cols)) > 1:
        raise ValueError(f"init's factor matrices have {list(cols)} columns; expected {ranks} each (the rank)")
    if got_shape != tuple(shape) or cols[0] != ranks:
        raise ValueError(f"init has shape {got_shape} and rank {cols[0]}; expected shape {tuple(shape)} and "
                         f"rank {ranks}")
    if first is not None:
        w = _start_lead(first, "weights", (ranks,), lambda a: f"init's weights are {describe(a)}; expected a vector "
                        f"of {ranks} weights (or None)", "real weights", real_x, dtype)
        if nonzero_from == 0 and w.size and not np.any(np.asarray(to_host(w))):
            # (cp_apr ran from it to a zero model reported converged, KKT violation 0.0, log-likelihood -inf)
            raise ValueError("init's weights are all zero; expected a nonzero start (the updates multiply by them, "
                             "so the model would stay zero)")
        first = w
    return first, checked


def _start_lead(first: Any, name: str, want: tuple, shape_message: Callable[[Any], str], real_one: str,
                real_x: bool, dtype: Any) -> Any:
    """A start's core (Tucker) or weights (CP) as an array of shape ``want``: numbers, real for a real X,
    finite; a one-line error naming it otherwise."""
    a = first if hasattr(first, "shape") and hasattr(first, "dtype") else np.asarray(first)
    has, contains = ("have", "contain") if name == "weights" else ("has", "contains")
    if tuple(a.shape) != want:
        raise ValueError(shape_message(a))
    if np.dtype(a.dtype).kind not in "biufc":
        raise TypeError(f"init's {name} {has} dtype {a.dtype}; expected numbers")
    if real_x and np.dtype(a.dtype).kind == "c":
        raise TypeError(f"init's {name} {has} complex dtype {a.dtype}; expected {real_one} for a real X "
                        f"({np.dtype(dtype)})")
    if count_nonfinite(a):
        raise ValueError(f"init's {name} {contains} NaN or infinite values; expected finite numbers")
    return a


def check_bool(value: Any, name: str) -> bool:
    """True or False (numpy bools too); a one-line ``TypeError`` for anything else (``"no"`` is not False)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False; received {describe(value)}")


def check_verbose(value: Any) -> bool:
    """``verbose``: True or False, or an integer level as scikit-learn's (0 is quiet); a one-line ``TypeError``
    for anything else (``"no"`` printed every iteration before)."""
    if isinstance(value, bool | np.bool_ | numbers.Integral | np.integer):
        return bool(value)
    raise TypeError(f"verbose must be True or False (or an integer level, 0 = quiet); received {describe(value)}")


def available_memory() -> int:
    """Bytes of memory available now (the total where it cannot be read)."""
    import os

    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 << 30


def check_fits_memory(nbytes: float, what: str, fix: str) -> None:
    """Refuse, before allocating, work whose memory exceeds what is available, with the figures."""
    avail = available_memory()
    if nbytes > avail:
        raise MemoryError(f"{what} needs about {nbytes / 1e9:.3g} GB but {avail / 1e9:.3g} GB is available; {fix}")
