"""``device=`` for the decompositions: run where asked, give results back where the input lives."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tuckerkit.backend import array_namespace, check_fits, get_cupy, on_device, parse_device, resolve_device
from tuckerkit.engine._dask import DaskTensor, is_dask_array
from tuckerkit.engine._slabs import SlabTensor, parse_memory

F = TypeVar("F", bound=Callable[..., Any])


def with_device(func: F) -> F:
    """Decorator: resolve ``device=`` (None: where ``X`` lives), move ``X`` once, run under that device,
    and return the result on the input's device (a host input with ``device="cuda"`` gets numpy arrays back;
    ``result.to("cuda")`` keeps them on the GPU)."""

    @functools.wraps(func)
    def wrapper(X: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.pop("device", None)
        if device is None:
            return func(X, *args, **kwargs)
        dev = parse_device(device)
        if dev.is_gpu:
            get_cupy(dev, label=str(device))
        if dev.is_gpu and (is_dask_array(X) or kwargs.get("memory_limit") is not None):
            raise ValueError(f"device={device!r} cannot be combined with a Dask array or memory_limit; "
                             "out-of-core and distributed runs use device='cpu'")
        if dev.is_gpu and hasattr(X, "shape") and hasattr(X, "dtype") and not hasattr(X, "_tk_to_device"):
            from tuckerkit.backend import device_of

            if device_of(X) != dev:
                check_fits(math.prod(X.shape) * np.dtype(X.dtype).itemsize, dev)
        Xd, dev, home = resolve_device(X, device)
        with on_device(dev):
            res = func(Xd, *args, **kwargs)
        return res.to(str(home)) if dev != home else res

    return wrapper  # type: ignore[return-value]


def namespace_of(X: Any) -> Any:
    """The array module the work on ``X`` uses (a GPU sparse tensor carries its own; other sparse, streamed
    and Dask tensors work with numpy)."""
    if hasattr(X, "xp"):
        return X.xp
    if hasattr(X, "_tk_mttkrp") or hasattr(X, "_tk_ttmc_sweep"):
        return np
    return array_namespace(X)


def like(X: Any, U: Any, dtype: Any) -> Any:
    """``U`` as an array of ``dtype`` where ``X``'s work runs (one copy when it is elsewhere)."""
    xp = namespace_of(X)
    if xp is np:
        from tuckerkit.backend import to_host

        return np.asarray(to_host(U), dtype=dtype)
    return xp.asarray(U, dtype=dtype)


def _maybe_streamed(X: Any, memory_limit: Any) -> Any:
    """``X`` wrapped as a :class:`DaskTensor` (a Dask array) or a :class:`SlabTensor` (larger than
    ``memory_limit`` bytes); anything else unchanged."""
    if is_dask_array(X):
        return DaskTensor(X)
    if memory_limit is None or isinstance(X, SlabTensor | DaskTensor) or hasattr(X, "_tk_mttkrp"):
        return X
    limit = parse_memory(memory_limit)
    if hasattr(X, "shape") and hasattr(X, "dtype"):
        nbytes = math.prod(X.shape) * max(np.dtype(X.dtype).itemsize, 4)
        if nbytes > limit:
            return SlabTensor(X, limit)
    return X
