"""What the command line sets up in its own process before its first compiled kernel runs.

numba loads a kernel compiled by an earlier run from its cache (``cache=True``) in a few milliseconds, but
before the first one it "refreshes" its compiler's registries: it imports some forty modules of its own
(``numba.np.random``, the unicode and array implementations, ...), and through ``numba.np.linalg`` all of
``scipy.linalg``, then installs their typing and lowering tables; it also scans the installed distributions
for ``numba_extensions`` entry points and imports them (pydata ``sparse`` registers one). None of that is
needed to run machine code loaded from the cache, only to compile: measured 0.3-0.5 s and 30 MB of a CLI run
on a ``.tns`` file (2-core machine), which otherwise only loads its kernels.

:func:`light_numba` makes loading a cached kernel initialize numba's runtime (NRT: the memory functions the
kernels call) without that refresh. A kernel that is not in the cache still compiles as before: numba's
compiler refreshes the registries itself before compiling. Third-party numba extensions are not loaded (the
CLI's kernels take NumPy arrays only). Done for the console script's own process only (``main()``), never
by the library or by an application that imports it: there only tuckerkit's own kernels load without the
refresh and without the extension scan (``tuckerkit/_numba_load.py``), and numba scans for extensions as usual
before the first kernel that is not ours.
"""

from __future__ import annotations


def light_numba() -> bool:
    """Load cached kernels without numba's registry refresh and extension scan in this process (see the
    module's docstring). True when done; False (nothing changed) where numba is not the one this was
    written for (its internals differ)."""
    try:
        from numba.core import caching, entrypoints
        from numba.core.runtime import rtsys
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    cache = getattr(caching, "Cache", None)
    needed = ("load_overload", "_load_overload", "_guard_against_spurious_io_errors")
    if cache is None or not all(hasattr(cache, a) for a in needed) or not hasattr(rtsys, "initialize") or \
            not hasattr(entrypoints, "_already_initialized"):
        return False
    if getattr(cache.load_overload, "tuckerkit_light", False):
        return True

    from tuckerkit._numba_load import _load_overload

    def load_overload(self, sig, target_context):
        """numba's ``Cache.load_overload`` without ``target_context.refresh()`` (the library's own kernels'
        loader, :func:`tuckerkit._numba_load._load_overload`), for every cached kernel of this process."""
        return _load_overload(self, sig, target_context)

    load_overload.tuckerkit_light = True  # type: ignore[attr-defined]
    cache.load_overload = load_overload
    entrypoints._already_initialized = True
    return True
