"""Devices: ``"cpu"``, ``"cuda"`` and ``"cuda:N"``; moving arrays and results between host and GPU.

cupy is imported only when a GPU device is asked for (or a cupy array is given), so ``import tuckerkit``
works without it and ``device="cuda"`` then fails with one line saying how to install it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from tuckerkit.backend._namespace import is_cupy_array

GPU_EXTRA = ("pip install 'tuckerkit[gpu-cuda13]' for a CUDA 13 driver, or 'tuckerkit[gpu-cuda12]' for "
             "CUDA 12 (nvidia-smi shows the version)")


class DeviceError(RuntimeError):
    """A device that cannot be used here: cupy missing, no GPU, an index out of range, too little memory.

    Examples
    --------
    >>> from tuckerkit.backend import DeviceError
    >>> issubclass(DeviceError, RuntimeError)
    True
    """


@dataclass(frozen=True)
class Device:
    """A parsed device.

    Attributes
    ----------
    kind : {"cpu", "cuda"}
    index : int
        The GPU number (0 for ``"cuda"``; 0 and unused for the CPU).

    Examples
    --------
    >>> from tuckerkit.backend import parse_device
    >>> parse_device("cuda:1"), str(parse_device("cpu"))
    (Device(kind='cuda', index=1), 'cpu')
    """

    kind: str
    index: int = 0

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"


def parse_device(device: Any, name: str = "device") -> Device:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` (or a :class:`Device`) as a :class:`Device`; a clear error otherwise.

    Parameters
    ----------
    device : str or Device
        ``"gpu"`` is accepted for ``"cuda"``; case and surrounding spaces are ignored.
    name : str, default "device"
        The parameter name used in error messages.

    Returns
    -------
    Device

    Raises
    ------
    ValueError
        ``device='tpu' is not a device; expected 'cpu', 'cuda' or 'cuda:N'``.

    Examples
    --------
    >>> from tuckerkit.backend import parse_device
    >>> parse_device("cuda")
    Device(kind='cuda', index=0)
    """
    if isinstance(device, Device):
        return device
    m = re.fullmatch(r"(cpu|cuda|gpu)(?::(\d+))?", str(device).strip().lower()) if isinstance(device, str) else None
    if m is None or (m.group(1) == "cpu" and m.group(2) is not None):
        raise ValueError(f"{name}={device!r} is not a device; expected 'cpu', 'cuda' or 'cuda:N'")
    if m.group(1) == "cpu":
        return Device("cpu")
    return Device("cuda", int(m.group(2) or 0))


def get_cupy(device: Device | None = None, name: str = "device", label: str | None = None) -> ModuleType:
    """Import cupy and check that ``device`` exists.

    Parameters
    ----------
    device : Device, optional
        Default ``cuda:0``.
    name : str, default "device"
        The parameter name used in error messages.
    label : str, optional
        The device as the caller wrote it (for the message).

    Returns
    -------
    module
        ``cupy``.

    Raises
    ------
    DeviceError
        cupy not installed (with the install command), no usable GPU, or an index beyond the GPUs present.

    Examples
    --------
    >>> import sys
    >>> from tuckerkit.backend import DeviceError, get_cupy
    >>> try:
    ...     cupy = get_cupy()
    ... except DeviceError as exc:  # on a machine without cupy or without a GPU
    ...     print(str(exc).split(";")[0].startswith("device="))
    ... else:
    ...     print(True)
    True
    """
    if label is None:
        label = str(device) if device is not None else "cuda"
    try:
        import cupy
    except ImportError as exc:
        if not isinstance(exc, ModuleNotFoundError) or exc.name not in (None, "cupy"):  # installed but broken
            first = str(exc).splitlines()[0] if str(exc) else "no details"
            raise DeviceError(f"{name}={label!r}: cupy is installed but cannot be imported ({type(exc).__name__}: "
                              f"{first}); is it the build for this machine's CUDA major version? "
                              f"{GPU_EXTRA}") from None
        raise DeviceError(
            f"{name}={label!r} needs cupy, which is not installed; install it with: {GPU_EXTRA}"
        ) from None
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # the CUDA driver/runtime is missing or broken
        raise DeviceError(f"{name}={label!r}: no usable CUDA GPU on this machine ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'no details'}); use device='cpu'") from None
    index = device.index if device is not None else 0
    if count == 0:
        raise DeviceError(f"{name}={label!r}: no CUDA GPU on this machine; use device='cpu'")
    if index >= count:
        raise DeviceError(f"{name}={label!r}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}")
    return cupy


def device_of(x: Any) -> Device:
    """The device an array lives on (numpy, memory maps and everything else: cpu).

    Parameters
    ----------
    x : object

    Returns
    -------
    Device

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.backend import device_of
    >>> str(device_of(np.ones(2)))
    'cpu'
    """
    if is_cupy_array(x):
        dev = getattr(x, "device", None)
        return Device("cuda", int(getattr(dev, "id", 0) or 0))
    return Device("cpu")


@contextlib.contextmanager
def on_device(device: Device) -> Iterator[None]:
    """Make ``device`` cupy's current device inside the block (nothing for the CPU).

    Parameters
    ----------
    device : Device

    Yields
    ------
    None

    Examples
    --------
    >>> from tuckerkit.backend import on_device, parse_device
    >>> with on_device(parse_device("cpu")):
    ...     pass
    """
    if not device.is_gpu:
        yield
        return
    cupy = sys.modules["cupy"]
    with cupy.cuda.Device(device.index):
        yield


def to_device(x: Any, device: Device | str) -> Any:
    """``x`` on ``device``: numpy -> cupy is one host-to-device copy, cupy -> numpy one copy back; an array
    already there is returned as is (no copy).

    Parameters
    ----------
    x : array or None
    device : str or Device

    Returns
    -------
    array or None

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.backend import to_device
    >>> a = np.ones(3)
    >>> to_device(a, "cpu") is a
    True
    """
    dev = parse_device(device)
    if x is None:
        return None
    if dev.is_gpu:
        cupy = get_cupy(dev, label=str(device))
        if is_cupy_array(x) and device_of(x) == dev:
            return x
        with cupy.cuda.Device(dev.index):
            return cupy.asarray(x)
    if is_cupy_array(x):
        return sys.modules["cupy"].asnumpy(x)
    return x


def to_host(x: Any) -> Any:
    """A numpy array (cupy arrays copied back, anything else unchanged).

    Parameters
    ----------
    x : object

    Returns
    -------
    object

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.backend import to_host
    >>> a = np.ones(2)
    >>> to_host(a) is a
    True
    """
    if is_cupy_array(x):
        return sys.modules["cupy"].asnumpy(x)
    return x


def memory_info(device: Device | str = "cuda") -> dict[str, int]:
    """Free and total bytes of a GPU, plus what cupy's memory pool uses and holds.

    Parameters
    ----------
    device : str or Device, default "cuda"

    Returns
    -------
    dict
        ``free``, ``total``, ``used_by_pool``, ``held_by_pool`` (bytes).

    Examples
    --------
    >>> from tuckerkit.backend import memory_info
    >>> memory_info("cpu")
    Traceback (most recent call last):
    ...
    ValueError: memory_info reports GPU memory; pass device='cuda' or 'cuda:N'
    """
    dev = parse_device(device)
    if not dev.is_gpu:
        raise ValueError("memory_info reports GPU memory; pass device='cuda' or 'cuda:N'")
    cupy = get_cupy(dev)
    with cupy.cuda.Device(dev.index):
        free, total = cupy.cuda.runtime.memGetInfo()
        pool = cupy.get_default_memory_pool()
        return {"free": int(free), "total": int(total), "used_by_pool": int(pool.used_bytes()),
                "held_by_pool": int(pool.total_bytes())}


def check_fits(nbytes: int, device: Device, what: str = "X") -> None:
    """Refuse, with one line, an input that cannot fit in the GPU's free memory.

    Parameters
    ----------
    nbytes : int
        Bytes the input needs on the device.
    device : Device
        Nothing is checked for the CPU.
    what : str, default "X"
        The name used in the message.

    Raises
    ------
    DeviceError
        ``X needs 12.00 GB on cuda:0 but 8.00 GB is free; use device='cpu' with memory_limit= ...``.

    Examples
    --------
    >>> from tuckerkit.backend import check_fits, parse_device
    >>> check_fits(10**12, parse_device("cpu"))  # the CPU is never refused here
    """
    if not device.is_gpu:
        return
    info = memory_info(device)
    avail = info["free"] + info["held_by_pool"] - info["used_by_pool"]
    if nbytes > avail:
        raise DeviceError(
            f"{what} needs {nbytes / 1e9:.2f} GB on {device} but {avail / 1e9:.2f} GB is free; "
            "use device='cpu' with memory_limit= (out of core) or a smaller dtype"
        )


_F = TypeVar("_F", bound=Callable[..., Any])


def _is_dense(a: Any) -> bool:
    return isinstance(a, np.ndarray) or is_cupy_array(a)


def device_op(func: _F) -> _F:
    """Decorator for the engine's operations: ``device=`` copies the dense operands (lists of them too) to that
    device once, runs there, and returns the result on the first operand's device. ``out=`` must already
    live on ``device``. Without ``device=``, an operation on cupy arrays runs with the first one's GPU made
    current (its allocations, cuBLAS handle and kernel launches; not whichever GPU happens to be current)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        device = kwargs.pop("device", None) if kwargs else None
        if device is None:
            for a in args:  # (a loop, not all() over a generator: a small contraction's call pays for each step)
                t = type(a)
                if t is not np.ndarray and t is not str:
                    break
            else:
                return func(*args, **kwargs)  # numpy arrays (and a spec): nothing to move, no GPU to make current
        dense = [a for a in args if _is_dense(a)] + [x for a in args if isinstance(a, list | tuple)
                                                      for x in a if _is_dense(x)]
        if device is None:
            gpu = next((a for a in dense if is_cupy_array(a)), None)
            if gpu is None:
                return func(*args, **kwargs)
            with on_device(device_of(gpu)):
                return func(*args, **kwargs)
        dev = parse_device(device)
        if dev.is_gpu:
            get_cupy(dev, label=str(device))
        home = device_of(dense[0]) if dense else Device("cpu")
        out = kwargs.get("out")
        if out is not None and device_of(out) != dev:
            raise ValueError(f"out is on {device_of(out)}; expected it on device={device!r}")

        def move(a: Any) -> Any:
            if isinstance(a, list | tuple):
                return type(a)(move(x) for x in a)
            return to_device(a, dev) if _is_dense(a) else a

        with on_device(dev):
            res = func(*(move(a) for a in args), **kwargs)
        return res if out is not None or dev == home else to_device(res, home)

    return wrapper  # type: ignore[return-value]
