"""tuckerkit's own compiled kernels load from numba's disk cache without numba's compiler set-up.

Every kernel is ``@njit(cache=True)``: after the first run of a kernel, later processes load its machine code
from the cache in milliseconds. But numba's loader first "refreshes" its compiler (``target_context.refresh()``):
it imports some forty modules of its own (the array, unicode and random implementations, and through
``numba.np.linalg`` all of ``scipy.linalg``) and installs their typing and lowering tables. None of that is
needed to run machine code loaded from the cache, only to compile new code, yet it is most of the first call of
a process: measured on the 2-core machine (200^3, rank 10, a fresh process), ``tk.hooi(X, 10)`` took 0.68-0.78 s
on its first call and 0.04 s on the next; of the first, numba's refresh was 0.18-0.25 s, importing numba
0.17-0.23 s and ``scipy.linalg`` 0.11-0.16 s (then for the eigensteps' thin QR, which now runs numpy's LAPACK:
:func:`tuckerkit.engine._subspace._thin_q`). With both changes the first call took 0.446 s against 0.775 s
(medians of 7 interleaved fresh processes).

:func:`load_lightly` changes, for the kernels of one module only, the loader of each one's cache: it initializes
numba's runtime (NRT, the memory functions the loaded code calls; idempotent) and loads, without the refresh.
Nothing else in the process changes: a kernel of another library, or one of ours that is not in the cache
yet, goes through numba's usual path, whose compiler refreshes itself before compiling. Where numba's internals
are not the ones this was written for (the attributes checked below), nothing is changed.

Each such kernel also skips numba's scan for third-party extensions before its first call
(:func:`_no_extension_scan`): the scan is left to the first kernel that is not ours, or to a compilation.

A kernel compiled with ``_nrt=False`` (it allocates nothing: its work arrays come from the caller or from
the stack, :func:`tuckerkit.engine._simd.stack_matrix`) loads without the runtime at all: the dense TTM and
Gram kernels and CP-ALS's row solve, so a first default ``tk.hooi`` or ``tk.cp_als`` never sets NRT up (about
25 ms) nor imports numba's array allocator (``numba.np.arrayobj`` and the unicode modules it pulls in, 20-25
ms), which loading a kernel that calls ``np.empty`` does.

The command line goes further in its own process (``cli/_startup.py``): there every cached kernel,
ours or not, loads this way and numba's scan for third-party extensions is skipped, which an application
importing tuckerkit must keep.
"""

from __future__ import annotations

from types import MethodType
from typing import Any

#: ``njit`` options of a kernel that allocates nothing: compiled without numba's runtime (NRT), so that it loads
#: from the cache without setting the runtime up (``@njit(cache=True, **NO_RUNTIME)``)
NO_RUNTIME: dict[str, Any] = {"_nrt": False}

#: set on a cache object whose loader :func:`load_lightly` replaced
_MARK = "_tuckerkit_light"
#: set on such a cache object: whether its kernel needs numba's runtime (NRT) initialized before it loads
_NRT = "_tuckerkit_nrt"


def load_lightly(namespace: dict[str, Any]) -> int:
    """Make the cached numba kernels among ``namespace``'s values (a kernel module's ``globals()``) load
    without numba's compiler refresh; returns how many it changed (0 where numba's internals differ)."""
    try:
        from numba.core import caching
        from numba.core.registry import CPUDispatcher
        from numba.core.runtime import rtsys
    except ImportError:  # pragma: no cover - numba is a dependency
        return 0
    function_cache = getattr(caching, "FunctionCache", None)
    if function_cache is None or not hasattr(rtsys, "initialize") or not all(
            hasattr(function_cache, a) for a in ("load_overload", "_load_overload",
                                                  "_guard_against_spurious_io_errors")):
        return 0  # pragma: no cover - another numba
    changed = 0
    for obj in list(namespace.values()):
        if not isinstance(obj, CPUDispatcher):
            continue
        cache: Any = getattr(obj, "_cache", None)
        if cache is None or type(cache) is not function_cache or getattr(cache, _MARK, False):
            continue
        cache.load_overload = MethodType(_load_overload, cache)
        setattr(cache, _MARK, True)
        if callable(getattr(obj, "_compilation_chain_init_hook", None)):
            obj._compilation_chain_init_hook = _no_extension_scan  # type: ignore[attr-defined]  # (the instance)
        # a kernel compiled without numba's runtime (``_nrt=False``: it allocates nothing) loads without it
        setattr(cache, _NRT, bool(getattr(obj, "targetoptions", {}).get("_nrt", True)))
        changed += 1
    return changed


def _no_extension_scan() -> None:
    """Our kernels' ``_compilation_chain_init_hook``: nothing. numba's own runs ``entrypoints.init_all()``
    before it types a call's arguments, to load the third-party extensions installed (every distribution's
    ``numba_extensions`` entry points: 28-32 ms on the 2-core machine, pydata ``sparse``'s import included, more
    where many packages are installed). Our kernels take NumPy arrays and numbers only; a cache miss still
    scans them (the compiler's refresh calls ``init_all``), and so does the first kernel of any other library
    (numba's flag stays unset until then)."""


def _load_overload(self: Any, sig: Any, target_context: Any) -> Any:
    """numba's ``Cache.load_overload`` without ``target_context.refresh()``: only the runtime (NRT) that the
    loaded code calls is initialized first. None (numba then compiles, refreshing as usual) on a cache miss."""
    if getattr(self, _NRT, True):
        from numba.core.runtime import rtsys

        rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)
    return None  # pragma: no cover - the guard swallowed an I/O error: numba compiles instead
