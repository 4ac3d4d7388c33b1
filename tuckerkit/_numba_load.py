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

Two more costs of a first call are skipped for our kernels only:

* numba's cache stores each kernel's machine code with the LLVM bitcode of its module beside it, and its loader
  parses that bitcode on every load (``llvmlite.binding.parse_bitcode``), only to list the symbols the code
  defines and to keep the module in case a later compilation links the kernel in. For ``_inner_kernel`` (all
  its register-block variants: 380 kB of bitcode) that was 37-65 ms of the 40-70 ms its load took; the list is
  read from the machine code's own ELF symbol table instead (:func:`defined_symbols`, 0.1 ms; the same names
  as the bitcode's definitions for every kernel in the cache, a test checks it) and the bitcode is parsed only
  if a compilation asks for it (:func:`_symbols_from_object`). ``_inner_kernel`` then loads in 3-4 ms.
* numba types a call's arguments before it loads, and for an array it first asks whether it is a
  ``numpy.ma.MaskedArray``: that first access of ``numpy.ma`` imports it (20-26 ms). A plain ndarray is typed
  directly (:func:`_typeof_pyval`).

Measured on the 2-core AVX2 machine (a fresh process reads a 200^3 float64 ``.npy`` and makes the default
call, medians of 15 interleaved processes, both items against neither): the first ``tk.hooi(X, 10)`` 0.605 ->
0.519 s, the first ``tk.cp_als(X, 10)`` 0.855 -> 0.795 s (the steady HOOI call is 0.05-0.06 s; most of the
rest is importing numba, 0.3-0.4 s there).

The command line goes further in its own process (``cli/_startup.py``): there every cached kernel,
ours or not, loads this way and numba's scan for third-party extensions is skipped, which an application
importing tuckerkit must keep.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from types import MethodType
from typing import Any

import numpy as np

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
        if isinstance(getattr(obj, "_types_active_call", None), set):
            obj.typeof_pyval = MethodType(_typeof_pyval, obj)  # type: ignore[method-assign]  # (the instance)
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


def _typeof_pyval(self: Any, val: Any) -> Any:
    """Our kernels' ``typeof_pyval`` (numba types the arguments of a call it has no machine code for yet by it,
    before it loads or compiles): a plain ``numpy.ndarray``'s type made directly (:func:`array_type`), else
    numba's own. numba's own first asks whether the array is a ``numpy.ma.MaskedArray``, and that first
    access of ``numpy.ma`` imports it (20-26 ms of a fresh process's first call); a plain ndarray never is one."""
    if type(val) is np.ndarray:
        tp = array_type(val)
        if tp is not None:
            self._types_active_call.add(tp)
            return tp
    return type(self).typeof_pyval(self, val)


def array_type(val: np.ndarray) -> Any:
    """numba's type of a plain ndarray argument, as ``numba.typeof(val, Purpose.argument)`` makes it (dtype,
    dimensions, layout, read-only flag), without the masked-array check; None for a dtype numba does not take
    (numba's own path then reports it)."""
    from numba.core import errors, types
    from numba.np import numpy_support

    try:
        dtype = numpy_support.from_dtype(val.dtype)
    except errors.NumbaNotImplementedError:
        return None
    return types.Array(dtype, val.ndim, numpy_support.map_layout(val), readonly=not val.flags.writeable)


def _load_overload(self: Any, sig: Any, target_context: Any) -> Any:
    """numba's ``Cache.load_overload`` without ``target_context.refresh()``: only the runtime (NRT) that the
    loaded code calls is initialized first. None (numba then compiles, refreshing as usual) on a cache miss."""
    if getattr(self, _NRT, True):
        from numba.core.runtime import rtsys

        rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors(), _symbols_from_object(target_context.codegen()):
        return self._load_overload(sig, target_context)
    return None  # pragma: no cover - the guard swallowed an I/O error: numba compiles instead


@contextmanager
def _symbols_from_object(codegen: Any) -> Iterator[None]:
    """While one of our kernels loads: its library is rebuilt from its object code with the names of the symbols
    it defines read from the object's ELF symbol table (:func:`defined_symbols`), instead of from the LLVM bitcode
    that numba's cache stores beside it, which numba parses on every load (``llvmlite.binding.parse_bitcode``) only
    to learn those names and to keep the module for linking into a later compilation. The bitcode is kept and
    parsed when a compilation first asks for it (:func:`_lazy_linking`). Where the format or numba's internals
    differ, numba's own loader runs. (Loads run under numba's compiler lock: the codegen's loader is replaced for
    this load only.)"""
    lib_cls = getattr(codegen, "_library_class", None)
    engine: Any = getattr(codegen, "_engine", None)
    if lib_cls is None or not all(hasattr(lib_cls, a) for a in _LIBRARY_ATTRS) or not isinstance(
            getattr(engine, "_defined_symbols", None), set) or "unserialize_library" in vars(codegen):
        yield  # pragma: no cover - another numba
        return

    def unserialize(state: Any) -> Any:
        name, kind, data = state
        names = defined_symbols(data[0]) if kind == "object" else None
        if not names:
            return lib_cls._unserialize(codegen, state)
        object_code, shared_bitcode = data
        lib = codegen.create_library(name)
        lib.enable_object_caching()
        lib._set_compiled_object(object_code)
        lib._get_module_for_linking = _lazy_linking(lib, shared_bitcode)
        lib._finalize_final_module()
        engine._defined_symbols |= names
        return lib

    codegen.unserialize_library = unserialize
    try:
        yield
    finally:
        del codegen.unserialize_library


#: the library attributes :func:`_symbols_from_object` relies on (numba's ``CPUCodeLibrary``)
_LIBRARY_ATTRS = ("_unserialize", "enable_object_caching", "_set_compiled_object", "_get_module_for_linking",
                  "_finalize_final_module")


def _lazy_linking(lib: Any, bitcode: bytes) -> Any:
    """The library's ``_get_module_for_linking``: the module parsed from its cached bitcode on the first call
    (a later compilation that links this kernel in), as numba's loader would have parsed it on load."""
    def get() -> Any:
        if lib._shared_module is None:
            from llvmlite import binding as ll

            lib._shared_module = ll.parse_bitcode(bitcode)
        return lib._shared_module

    return get


_ELF64_LE = b"\x7fELF\x02\x01"
_SHT_SYMTAB = 2
#: symbol types numba's loader would list from the module: none, data objects, functions (not sections, files)
_SYMBOL_TYPES = (0, 1, 2)


def defined_symbols(obj: bytes) -> set[str] | None:
    """The names of the symbols that a little-endian ELF64 object (numba's cached machine code on Linux x86-64)
    defines: every named function, data object or untyped symbol of its symbol table whose section is not
    undefined, as numba lists the definitions of the module the object was compiled from (functions and
    globals that are not declarations, internal ones included). None where ``obj`` is not such an object or
    has no symbol table (numba's loader then runs)."""
    if len(obj) < 64 or not obj.startswith(_ELF64_LE):
        return None
    try:
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
        names: set[str] = set()
        found = False
        for sh in sections:
            if sh[1] != _SHT_SYMTAB:
                continue
            found = True
            _, _, _, _, off, size, link, _, _, entsize = sh
            stroff = sections[link][4]
            for k in range(off + entsize, off + size, entsize):  # (entry 0 is the null symbol)
                st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", obj, k)
                if st_shndx == 0 or st_name == 0 or st_info & 0xF not in _SYMBOL_TYPES:
                    continue
                end = obj.index(b"\0", stroff + st_name)
                names.add(obj[stroff + st_name:end].decode())
        return names if found else None
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        return None
