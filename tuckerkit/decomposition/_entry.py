"""What every decomposition does on entry and exit: the operand, the device, the execution policy.

``with decomposition_call(X, device=..., memory_limit=...) as call`` resolves ``X`` once (validated, finite,
real; out of core when larger than ``memory_limit``; moved to ``device``), resolves the execution policy,
holds BLAS to one thread and makes the device current for the body; ``call.result(model)`` gives the model
back on the device the input came from (a host input computed on a GPU returns numpy arrays).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuckerkit.backend import Device, device_of, on_device
from tuckerkit.engine import ExecutionPolicy, as_operand, blas_pinned, default_policy

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Call:
    """One decomposition call: its operand, policy, and the devices it computes on and returns to."""

    X: Any
    policy: ExecutionPolicy
    home: Device
    device: Device

    def result(self, model: Any) -> Any:
        """``model`` on the device the input came from."""
        return model.to(str(self.home)) if self.device != self.home else model

    def like(self, U: Any, dtype: Any = None) -> Any:
        """``U`` as an array where the work runs (one copy when it lives elsewhere), of ``dtype``."""
        xp = self.X.xp
        dt = self.X.dtype if dtype is None else dtype
        if xp is np:
            from tuckerkit.backend import to_host

            return np.asarray(to_host(U), dtype=dt)
        return xp.asarray(U, dtype=dt)


def _home(X: Any) -> Device:
    dev = getattr(X, "device", None)
    return dev if isinstance(dev, Device) else device_of(X)


@contextmanager
def decomposition_call(X: Any, *, device: Any = None, memory_limit: Any = None, min_ndim: int = 2) -> Iterator[Call]:
    """Resolve a decomposition's input and run its body under the call's policy and device (see module)."""
    home = _home(X)
    op = as_operand(X, memory_limit=memory_limit, device=device, check_finite=True, real=True, min_ndim=min_ndim)
    policy = default_policy()
    with ExitStack() as stack:
        stack.enter_context(blas_pinned())
        stack.enter_context(on_device(op.device))
        yield Call(op, policy, home, op.device)


def _library_dirs() -> tuple[str, ...]:
    """tuckerkit's folders, and scikit-learn's when it is loaded: its wrappers (``fit_transform``,
    ``Pipeline``, ``cross_val_score``) lie between the user's line and the estimators' calls."""
    import sys

    dirs = [_PACKAGE_DIR]
    for mod in ("tuckerkit.cli", "tuckerkit.datasets", "sklearn"):
        m = sys.modules.get(mod)
        path = getattr(m, "__file__", None)
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)))
    return tuple(d + os.sep for d in dirs)


def caller_stacklevel() -> int:
    """The ``stacklevel`` of ``warnings.warn`` that points at the first frame outside tuckerkit (the user's
    line), however many of tuckerkit's own frames (decorators, context managers, helpers) and scikit-learn's
    (an estimator called through ``fit_transform`` or a ``Pipeline``) lie between; the outermost frame when
    there is none (a call from a worker thread)."""
    import sys

    skip = _library_dirs()
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name.startswith(skip) or os.path.basename(name) == "contextlib.py"):
            return level
        if frame.f_back is None:
            return level
        frame = frame.f_back
        level += 1
    return level
