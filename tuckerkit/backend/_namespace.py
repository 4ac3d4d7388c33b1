"""Resolve the array module of the inputs and apply the dtype policy.

The policy, used by every public entry point:

* float32, float64, complex64 and complex128 are preserved;
* bool and integer inputs are promoted to float64, float16 to float32;
* object, string and other non-numeric dtypes are rejected with ``TypeError``.

cupy is never imported here: an array is recognised as a cupy array by the name of its module, so importing
tuckerkit without cupy installed works.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import numpy as np

_KEPT = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64), np.dtype(np.complex128))


def is_cupy_array(x: Any) -> bool:
    """Return True when ``x`` is a cupy ndarray (without importing cupy).

    Parameters
    ----------
    x : object

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.backend import is_cupy_array
    >>> is_cupy_array(np.ones(3))
    False
    """
    return type(x).__module__.split(".")[0] == "cupy"


def array_namespace(*arrays: Any) -> ModuleType:
    """Return the array module (``numpy`` or ``cupy``) shared by ``arrays``.

    Parameters
    ----------
    *arrays : arrays, scalars or None
        None and scalars are ignored.

    Returns
    -------
    module
        ``numpy`` or ``cupy``.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.backend import array_namespace
    >>> array_namespace(np.ones(2), None, 3.0).__name__
    'numpy'

    Raises
    ------
    TypeError
        If numpy and cupy arrays are mixed.
    """
    for a in arrays:  # plain numpy arrays (and None): the common case, without a look at each
        if a is not None and type(a) is not np.ndarray:
            break
    else:
        return np
    kinds = {is_cupy_array(a) for a in arrays if a is not None and not np.isscalar(a)}
    if len(kinds) > 1:
        raise TypeError(
            "operands mix numpy and cupy arrays; move them to one device first "
            "(expected all numpy or all cupy)"
        )
    if kinds == {True}:
        return sys.modules["cupy"]
    return np


def _checked_dtype(dtype: np.dtype, name: str) -> np.dtype:
    if dtype in _KEPT:
        return dtype
    if not dtype.isnative:  # ('>f4' is float32, '>c8' complex64, '>f2' float16: the same numbers in the machine's
        # byte order; '>f4' had become float64 and '>c8' was refused as "not numeric")
        dtype = dtype.newbyteorder("=")
        if dtype in _KEPT:
            return dtype
    if dtype.kind in "biu":
        return np.dtype(np.float64)
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype.kind == "f":  # longdouble and friends: BLAS has no kernel for them
        return np.dtype(np.float64)
    raise TypeError(
        f"{name} has dtype {dtype}; expected a numeric dtype (float32, float64, complex64, complex128, "
        "or an integer/bool dtype, which is promoted to float64)"
    )


def result_dtype(*dtypes_and_names: tuple[Any, str]) -> np.dtype:
    """Common floating dtype of several operands after the policy, e.g. ``(A.dtype, "A")``.

    float32 and float64 are kept, integers and bools become float64, anything else (complex, object,
    strings) is refused with a message naming the operand.

    Parameters
    ----------
    *dtypes_and_names : (dtype, str) pairs

    Returns
    -------
    numpy.dtype

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.backend import result_dtype
    >>> result_dtype((np.float32, "A"), (np.float32, "B")), result_dtype((np.float32, "A"), (np.int64, "B"))
    (dtype('float32'), dtype('float64'))
    """
    checked = [_checked_dtype(np.dtype(d), n) for d, n in dtypes_and_names]
    return np.dtype(np.result_type(*checked))


def to_float_array(x: Any, name: str, xp: ModuleType | None = None) -> Any:
    """Return ``x`` as an array of a kept floating dtype, without copying when it already is one.

    Lists and scalars are converted; integer/bool arrays are promoted to float64.

    Parameters
    ----------
    x : array_like
    name : str
        The parameter name used in error messages.
    xp : module, optional
        ``numpy`` or ``cupy``; default: the namespace of ``x``.

    Returns
    -------
    array

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.backend import to_float_array
    >>> to_float_array([1, 2], "X").dtype, to_float_array(np.ones(2, np.float32), "X").dtype
    (dtype('float64'), dtype('float32'))
    """
    if xp is None:
        xp = array_namespace(x)
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        try:
            x = np.asarray(x)
        except (ValueError, TypeError) as exc:  # ragged lists and the like
            raise TypeError(f"{name} could not be converted to an array: {exc}") from None
        if xp is not np:
            x = xp.asarray(x)
    dtype = _checked_dtype(np.dtype(x.dtype), name)
    if x.dtype != dtype:
        x = x.astype(dtype)
    return x
