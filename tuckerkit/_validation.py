"""Validation of user input, done once at each public entry point before any work.

Messages name the parameter, what was expected and what was received.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuckerkit.backend import array_namespace, result_dtype

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


def check_tensor(X: Any, name: str = "X", *, min_ndim: int = 2, allow_complex: bool = False,
                 check_finite: bool = True) -> Any:
    """Return ``X`` as a float32/float64 array (ints and bools promoted), or raise a one-line error."""
    if X is None:
        raise TypeError(f"{name} is None; expected an array of at least {min_ndim} dimensions")
    if not hasattr(X, "dtype") or not hasattr(X, "shape"):
        try:
            X = np.asarray(X)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"{name} could not be converted to an array: {exc}") from None
    dt = np.dtype(X.dtype)
    if dt.kind in "biu":
        X = X.astype(np.float64)
    elif dt == np.float16:
        X = X.astype(np.float32)
    elif dt.kind == "c" and allow_complex:
        pass
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


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.integer):
        raise TypeError(f"{name} must be an integer; received {value!r} ({type(value).__name__})")
    return operator.index(value)


def check_ranks(ranks: Any, shape: Sequence[int], name: str = "ranks") -> tuple[int, ...]:
    """Tucker ranks: one integer per mode (or one integer for all), each in [1, mode size]."""
    ndim = len(shape)
    if isinstance(ranks, np.ndarray) and ranks.ndim == 0:
        ranks = ranks.item()  # a 0-d array is one rank for every mode
    if isinstance(ranks, numbers.Integral | np.integer) and not isinstance(ranks, bool):
        ranks = [int(ranks)] * ndim
    if isinstance(ranks, str) or not isinstance(ranks, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a sequence of {ndim} integers; received {ranks!r}")
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


def check_cp_rank(rank: Any, name: str = "rank") -> int:
    r = _as_int(rank, name)
    if r < 1:
        raise ValueError(f"{name}={r} is not positive; expected an integer >= 1")
    return r


def check_unit_interval(value: Any, name: str) -> float:
    """A float strictly between 0 and 1 (e.g. the error tolerance of st_hosvd)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number in (0, 1); received {value!r}") from None
    if not 0.0 < v < 1.0 or not np.isfinite(v):
        raise ValueError(f"{name}={value!r} is outside (0, 1); expected a relative error such as 0.01")
    return v


def check_nonneg(value: Any, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a non-negative number; received {value!r}") from None
    if not v >= 0.0 or not np.isfinite(v):
        raise ValueError(f"{name}={value!r} is invalid; expected a finite number >= 0")
    return v


def check_max_iter(value: Any, name: str = "max_iter") -> int:
    v = _as_int(value, name)
    if v < 1:
        raise ValueError(f"{name}={v} is invalid; expected an integer >= 1")
    return v


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
        raise ValueError(f"{name}={value!r} is not valid; expected one of {opts}")
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


def describe(x: Any) -> str:
    """A short description of a value for an error message: never the array's entries."""
    shape = getattr(x, "shape", None)
    if shape is not None and hasattr(x, "dtype"):
        return f"an array of shape {tuple(shape)} and dtype {x.dtype}"
    text = repr(x)
    return text if len(text) <= 60 else f"a {type(x).__name__}"


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
    R = ranks.pop() if ranks else 0
    if R == 0 and any(U is not None for U in out):
        raise ValueError(f"{name} have 0 columns; expected a rank R >= 1")
    return out, R


def check_bool(value: Any, name: str) -> bool:
    """True or False (numpy bools too); a one-line ``TypeError`` for anything else (``"no"`` is not False)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False; received {describe(value)}")


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
