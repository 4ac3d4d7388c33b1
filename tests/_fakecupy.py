"""A numpy-backed stand-in for cupy, so the GPU code paths run (and are checked) on a machine without a GPU.

It is *not* a GPU: arrays are numpy arrays of a subclass whose module is ``cupy``, so tuckerkit's namespace
resolution takes its cupy branch. It counts what would cost a host-device round trip on a real GPU
(``.get()``, ``asnumpy``, ``float()``/``item()``/``bool()`` of a device scalar, ``asarray`` of host data), and
it implements ``cublas.{s,d}gemmStridedBatched`` from raw pointers, column-major, exactly as cuBLAS reads
its arguments, so the engine's strided-batched call descriptors are executed, not just computed, and it
refuses what cuBLAS does not promise: a negative batch stride (undocumented), a zero output batch stride, an
output overlapping an input, a handle used while another device is current. It keeps a current device
(``cuda.Device(i)`` as a context, ``runtime.getDevice``) and gives each new array the current device (a view,
its base's), so multi-GPU placement is checked too; ``COUNTS["gemm@cuda:N"]`` counts the calls per device.
Real-GPU runs use the same test bodies with the real cupy (``pytest -m gpu``).
"""

from __future__ import annotations

import ctypes
import types
from collections import Counter
from typing import Any

import numpy as np

COUNTS: Counter = Counter()
_CURRENT = [0]  # the current device (cupy.cuda.runtime.getDevice())


class ndarray(np.ndarray):
    __module__ = "cupy"

    def get(self) -> np.ndarray:
        COUNTS["d2h"] += 1
        return np.array(self.view(np.ndarray))

    def __float__(self) -> float:
        COUNTS["sync"] += 1
        return float(self.view(np.ndarray))

    def __int__(self) -> int:
        COUNTS["sync"] += 1
        return int(self.view(np.ndarray))

    def __bool__(self) -> bool:
        COUNTS["sync"] += 1
        return bool(self.view(np.ndarray))

    def item(self, *args):
        COUNTS["sync"] += 1
        return self.view(np.ndarray).item(*args)

    def tolist(self):
        COUNTS["d2h"] += 1
        return self.view(np.ndarray).tolist()

    def reshape(self, *shape, order="C", **kwargs):
        if kwargs:  # cupy's reshape has no copy= (numpy 2's has)
            raise TypeError(f"reshape() got an unexpected keyword argument {next(iter(kwargs))!r}")
        return super().reshape(*shape, order=order)

    @property
    def data(self):  # cupy's MemoryPointer: .ptr is the address of the first element
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])

    def __array_finalize__(self, obj):  # a view keeps its base's device; a new array is on the current one
        self._tk_device = getattr(obj, "_tk_device", _CURRENT[0])

    @property
    def device(self):
        return types.SimpleNamespace(id=getattr(self, "_tk_device", 0))

    def __array_wrap__(self, arr, context=None, return_scalar=False):  # reductions give 0-d device arrays
        return np.asarray(arr).view(ndarray)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # cupy refuses a host array in a device operation (numpy scalars are fine): so does the stand-in, so
        # that a numpy array mixed into a device computation fails here as on a GPU (cupyx.scatter_add's
        # np.add.at takes host indices)
        out = kwargs.get("out") or ()
        if not (ufunc is np.add and method == "at"):
            for x in (*inputs, *out):
                if type(x) is np.ndarray:
                    raise TypeError(f"Unsupported type {type(x)} (a host array in a device operation)")
        args = [x.view(np.ndarray) if isinstance(x, ndarray) else x for x in inputs]
        if out:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, ndarray) else o for o in out)
        res = getattr(ufunc, method)(*args, **kwargs)
        if out:
            return out[0] if len(out) == 1 else out
        return _wrap(res)

    def __array_function__(self, func, types_, args, kwargs):
        return _wrap(super().__array_function__(func, types_, args, kwargs))


def _dev(x: Any) -> Any:
    if isinstance(x, np.ndarray) and not isinstance(x, ndarray):
        return x.view(ndarray)
    return x


def _wrap(out: Any) -> Any:
    if isinstance(out, np.generic):
        return np.asarray(out).view(ndarray)
    if isinstance(out, tuple):
        return tuple(_wrap(o) for o in out)
    if isinstance(out, list):
        return [_wrap(o) for o in out]
    if type(out).__name__ in ("EighResult", "SVDResult", "QRResult", "SlogdetResult"):
        return tuple(_wrap(o) for o in out)
    return _dev(out)


def asarray(x: Any, dtype: Any = None, order: Any = None) -> ndarray:
    if not isinstance(x, ndarray):
        COUNTS["h2d"] += 1
        return np.array(x, dtype=dtype, order=order or "K").view(ndarray)
    out = _dev(np.asarray(x, dtype=dtype, order=order))
    out._tk_device = x._tk_device  # cupy.asarray of a device array leaves it on its device
    return out


def array(x: Any, dtype: Any = None, copy: bool = True, order: str = "K") -> ndarray:
    if not isinstance(x, ndarray):
        COUNTS["h2d"] += 1
    return np.array(x, dtype=dtype, copy=copy, order=order).view(ndarray)


def asnumpy(x: Any) -> np.ndarray:
    if isinstance(x, ndarray):
        COUNTS["d2h"] += 1
        return np.array(x.view(np.ndarray))
    return np.asarray(x)


def _passthrough(name: str):
    f = getattr(np, name)

    def g(*args, **kwargs):
        return _wrap(f(*args, **kwargs))

    g.__name__ = name
    return g


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        f = getattr(np, name)
        return _passthrough(name) if callable(f) and not isinstance(f, type) else f


def _linalg() -> types.ModuleType:
    m = types.ModuleType("cupy.linalg")
    def wrapped(f):
        return lambda *a, **k: _wrap(f(*a, **k))

    for name in ("eigh", "svd", "qr", "solve", "cholesky", "norm", "pinv", "lstsq", "inv"):
        setattr(m, name, wrapped(getattr(np.linalg, name)))
    m.LinAlgError = np.linalg.LinAlgError
    return m


def _read_scalar(ptr: int, dtype) -> float:
    c = ctypes.c_float if np.dtype(dtype) == np.float32 else ctypes.c_double
    return c.from_address(ptr).value


def _strided(ptr: int, dtype, shape, strides_elems) -> np.ndarray:
    """A numpy view of device memory at ``ptr`` with element strides (what cuBLAS reads)."""
    dt = np.dtype(dtype)
    base = np.ctypeslib.as_array((ctypes.c_byte * dt.itemsize).from_address(ptr)).view(dt)
    return np.lib.stride_tricks.as_strided(base, shape=shape, strides=[s * dt.itemsize for s in strides_elems])


class _Handle(int):
    """A cuBLAS handle: bound to the device that was current when it was made."""

    device: int


def _handle() -> _Handle:
    h = _Handle(1)
    h.device = _CURRENT[0]
    return h


def _gemm_strided_batched(dtype):
    def gemm(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
             batch):
        COUNTS["gemmStridedBatched"] += 1
        COUNTS[f"gemm@cuda:{_CURRENT[0]}"] += 1
        assert handle.device == _CURRENT[0], (
            f"the cuBLAS handle of cuda:{handle.device} is used while cuda:{_CURRENT[0]} is current")
        for name, ld, rows in (("lda", lda, k if transa else m), ("ldb", ldb, n if transb else k), ("ldc", ldc, m)):
            assert ld >= max(1, rows), f"cuBLAS would reject {name}={ld} < {rows}"
        for name, st in (("strideA", strideA), ("strideB", strideB), ("strideC", strideC)):
            assert st >= 0, f"{name}={st}: cuBLAS documents no negative batch stride"
        assert batch == 1 or strideC != 0, "strideC=0 writes every batch into one matrix"
        a = _strided(A, dtype, (batch, *((k, m) if transa else (m, k))), (strideA, 1, lda))
        b = _strided(B, dtype, (batch, *((n, k) if transb else (k, n))), (strideB, 1, ldb))
        c = _strided(C, dtype, (batch, m, n), (strideC, 1, ldc))
        for name, x in (("A", a), ("B", b)):  # cuBLAS reads and writes without a guard
            assert not (np.may_share_memory(c, x) and np.shares_memory(c, x)), f"C overlaps {name}"
        opa = np.swapaxes(a, 1, 2) if transa else a
        opb = np.swapaxes(b, 1, 2) if transb else b
        al, be = _read_scalar(alpha, dtype), _read_scalar(beta, dtype)
        res = al * np.matmul(opa, opb)
        if be != 0:
            res += be * c
        c[...] = res
    return gemm


class _Device:
    def __init__(self, index: int | None = None):
        self.id = _CURRENT[0] if index is None else int(index)
        self._stack: list[int] = []

    def __enter__(self):
        self._stack.append(_CURRENT[0])
        _CURRENT[0] = self.id
        return self

    def __exit__(self, *exc):
        _CURRENT[0] = self._stack.pop()
        return False


def _set_device(index: int) -> None:
    _CURRENT[0] = int(index)


_PROPS = {"name": b"cupy stand-in (numpy, no GPU)", "major": 0, "minor": 0, "totalGlobalMem": 16 << 30,
          "multiProcessorCount": 0}


class _Pool:
    def used_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0


def make() -> tuple[types.ModuleType, types.ModuleType]:
    """Fresh ``cupy`` and ``cupyx`` stand-in modules (install them in ``sys.modules``)."""
    cp = _Module("cupy")
    cp.ndarray = ndarray
    cp.asarray, cp.array, cp.asnumpy = asarray, array, asnumpy
    cp.linalg = _linalg()
    cp.float32, cp.float64 = np.float32, np.float64
    cublas = types.SimpleNamespace(sgemmStridedBatched=_gemm_strided_batched(np.float32),
                                   dgemmStridedBatched=_gemm_strided_batched(np.float64),
                                   CUBLAS_OP_N=0, CUBLAS_OP_T=1)
    _CURRENT[0] = 0
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, memGetInfo=lambda: (8 << 30, 16 << 30),
                                    deviceSynchronize=lambda: COUNTS.update(["sync"]),
                                    getDevice=lambda: _CURRENT[0], setDevice=_set_device,
                                    getDeviceProperties=lambda i: dict(_PROPS), runtimeGetVersion=lambda: 0,
                                    driverGetVersion=lambda: 0)
    cp.cuda = types.SimpleNamespace(Device=_Device, runtime=runtime, cublas=cublas,
                                    device=types.SimpleNamespace(get_cublas_handle=_handle),
                                    Stream=types.SimpleNamespace(null=types.SimpleNamespace(
                                        synchronize=lambda: COUNTS.update(["sync"]))))
    pool = _Pool()
    cp.get_default_memory_pool = lambda: pool
    cp.__version__ = "0.0-fake"
    cpx = types.ModuleType("cupyx")

    def scatter_add(a, indices, b):
        np.add.at(a.view(np.ndarray), indices, np.asarray(b))

    cpx.scatter_add = scatter_add
    return cp, cpx
