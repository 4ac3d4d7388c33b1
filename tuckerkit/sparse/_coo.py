"""COOTensor: coordinates and values of the nonzeros of a sparse tensor."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuckerkit.sparse._dispatch import SparseOperand

#: ``to_dense`` refuses tensors with more entries than this (override with ``limit=``)
DENSE_LIMIT = 100_000_000


def _check_shape(shape: Any) -> tuple[int, ...]:
    """A tensor's ``shape``: a sequence of integers (bools and floats such as 3.5 refused, not truncated),
    none negative and each below 2**63; a one-line error naming the entry otherwise."""
    from tuckerkit._validation import _as_int, describe

    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | np.ndarray):
        raise TypeError(f"shape must be a sequence of integers (one per mode); received {describe(shape)}")
    out = tuple(_as_int(s, f"shape[{i}]") for i, s in enumerate(shape))
    for i, s in enumerate(out):
        if s < 0:
            raise ValueError(f"shape {out} has the negative size {s} in mode {i}; expected mode sizes >= 1")
        if s >= 2**63:
            raise ValueError(f"shape {out} has the size {s} in mode {i}, beyond the int64 range; expected mode "
                             "sizes below 2**63")
    return out


def _index_text(x: Any) -> str:
    """An index bound for a message: exact for integers, ``%g`` for floats (1e+30, not 31 digits)."""
    return f"{float(x):g}" if isinstance(x, float | np.floating) else str(int(x))


class COOTensor(SparseOperand):
    """A sparse tensor in coordinate format: ``coords`` (nnz, N) 0-based, ``values`` (nnz,), ``shape``.

    Duplicate coordinates are summed and explicit zeros dropped at construction (so ``nnz`` counts
    distinct nonzeros); the nonzeros are kept in lexicographic order of their coordinates.

    Parameters
    ----------
    coords : array_like of int, shape (nnz, N)
    values : array_like, shape (nnz,)
        float32/float64 kept; integers and bools promoted to float64.
    shape : sequence of int, optional
        Default: one more than the largest coordinate in each mode.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.sparse import COOTensor
    >>> X = COOTensor([[0, 1, 2], [0, 1, 2], [1, 0, 0]], [1.0, 2.0, 0.0], shape=(2, 2, 3))
    >>> X.nnz, X.shape, float(X.to_dense()[0, 1, 2])
    (1, (2, 2, 3), 3.0)
    """

    def __init__(self, coords: Any, values: Any, shape: Sequence[int] | None = None):
        self._setup(coords, values, shape, owned=False)

    @classmethod
    def _owned(cls, coords: np.ndarray, values: np.ndarray, shape: Sequence[int], *, checked: bool = False
               ) -> COOTensor:
        """A tensor that may keep ``coords`` and ``values`` themselves (fresh arrays nobody else holds, e.g. a
        file just parsed): no copy when they are already canonical. ``checked``: the caller has verified
        the bounds and finiteness (the ``.tns`` parser has), so they are not checked again."""
        out = object.__new__(cls)
        out._setup(coords, values, shape, owned=True, checked=checked)
        return out

    def _setup(self, coords: Any, values: Any, shape: Sequence[int] | None, owned: bool,
               checked: bool = False) -> None:
        c = np.asarray(coords)
        v = np.asarray(values)
        if not c.dtype.isnative:  # ('>i8': the same indices; the compiled passes are typed for native ones)
            c, owned = c.astype(c.dtype.newbyteorder("=")), True
        if not v.dtype.isnative:  # ('>f8' is float64, byte-swapped)
            v, owned = v.astype(v.dtype.newbyteorder("=")), True
        if not c.flags.writeable or not v.flags.writeable:  # (a memory-mapped file: the compiled canonical pass
            c, v, owned = np.array(c), np.array(v), True    # is typed for writeable arrays; numba's TypingError)
        if c.ndim != 2 or (c.shape[0] and not c.shape[1]):
            raise ValueError(f"coords must be a 2-D array of shape (nnz, N), N >= 1; received shape {c.shape}")
        if c.dtype.kind == "b":  # (True read as index 1)
            raise TypeError("coords must be an integer array of shape (nnz, N); received dtype bool")
        if v.ndim != 1 or v.shape[0] != c.shape[0]:
            raise ValueError(f"values must have shape ({c.shape[0]},) to match coords; received {v.shape}")
        if c.dtype.kind not in "biuf":
            raise TypeError(f"coords must be an integer array of shape (nnz, N); received dtype {c.dtype}")
        if c.dtype.kind == "f" and c.size and not np.all(np.isfinite(c)):
            bad = int(c.size - np.count_nonzero(np.isfinite(c)))
            raise ValueError(f"coords contains {bad} NaN or infinite value(s); expected integer indices")
        if shape is not None:
            shape = _check_shape(shape)
        if c.size and c.dtype.kind in "uf":  # beyond int64 (1e30, uint64 >= 2**63): refused before the cast
            lo, hi = c.min(axis=0), c.max(axis=0)
            for m in range(c.shape[1]):
                if hi[m] >= 2**63 or (c.dtype.kind == "f" and lo[m] < -2**63):
                    span = f"{_index_text(lo[m])}..{_index_text(hi[m])}"
                    if shape is not None and len(shape) == c.shape[1]:
                        raise ValueError(f"coords[:, {m}] spans {span} but mode {m} has size {shape[m]}; expected "
                                         f"0 <= index < {shape[m]}")
                    raise ValueError(f"coords[:, {m}] spans {span}, beyond the int64 range; expected indices "
                                     "0 <= index < the mode size")
        if c.dtype.kind not in "iu":
            if c.size and not np.all(np.equal(np.mod(c, 1), 0)):
                raise TypeError(f"coords must be integers; received dtype {c.dtype} with fractional entries")
            c = c.astype(np.int64)
        if v.dtype.kind in "biu":
            v = v.astype(np.float64)
        elif v.dtype not in (np.float32, np.float64):
            raise TypeError(f"values has dtype {v.dtype}; expected float32 or float64 (ints are promoted)")
        if not checked and not np.all(np.isfinite(v)):
            bad = int(v.size - np.count_nonzero(np.isfinite(v)))
            raise ValueError(f"values contains {bad} NaN or infinite value(s); remove or impute them first")
        N = c.shape[1]
        if shape is None:
            if c.shape[0] == 0:
                raise ValueError("shape is required for a tensor without nonzeros")
            low = c.min(axis=0)
            if (low < 0).any():  # (the shape inferred from the largest index then read "an empty mode")
                m = int(np.argmax(low < 0))
                raise ValueError(f"coords[:, {m}] has the negative index {int(low[m])}; expected 0 <= index < the "
                                 "mode size")
            from tuckerkit.sparse._kernels import column_bounds

            shape = tuple(int(m) + 1 for m in column_bounds(np.ascontiguousarray(c))[1])
        shape = tuple(int(s) for s in shape)
        if len(shape) != N:
            raise ValueError(f"shape {shape} has {len(shape)} modes but coords has {N} columns; expected equal")
        if any(s < 1 for s in shape):
            raise ValueError(f"shape {shape} has an empty mode; every mode must have at least one entry")
        if c.size and not checked:
            from tuckerkit.sparse._kernels import column_bounds

            lo, hi = column_bounds(np.ascontiguousarray(c))
            for m in range(N):
                if lo[m] < 0 or hi[m] >= shape[m]:
                    raise ValueError(
                        f"coords[:, {m}] spans {int(lo[m])}..{int(hi[m])} but mode {m} has size {shape[m]}; "
                        f"expected 0 <= index < {shape[m]}"
                    )
        self.shape = shape
        cs, vs = _canonical(c, v, shape, owned)
        if not owned and (np.shares_memory(cs, c) or np.shares_memory(vs, v)):
            cs, vs = cs.copy(), vs.copy()  # never alias the caller's arrays
        self.coords, self.values = cs, vs

    @property
    def coords(self) -> np.ndarray:
        """The coordinates, (nnz, N) 0-based, in lexicographic order."""
        c = self.__dict__.get("_coords")
        if c is None:  # dropped by _drop_coords: the same rows again, from a tree of the cached plan
            c = self.__dict__["_coords"] = _coords_from_plan(self)
        return c

    @coords.setter
    def coords(self, value: np.ndarray) -> None:
        self.__dict__["_coords"] = value

    def _drop_coords(self) -> bool:
        """Free the coordinate array while the cached CSF plan holds the same nonzeros (the trees index them
        themselves): for a caller that needs only the trees and ``values`` from now on, such as a sparse
        CP-ALS (a 2M-nonzero 3-way tensor's coordinates are 24 MB). ``coords``, read again, is rebuilt from a
        tree, equal to what it was. False (nothing dropped) without a plan."""
        cache = self.__dict__.get("_tk_csf")
        if cache is None or not cache[1] or self.__dict__.get("_coords") is None:
            return False
        self.__dict__["_coords"] = None
        return True

    # ------------------------------------------------------------------------------------------- builders
    @classmethod
    def from_dense(cls, X: Any) -> COOTensor:
        X = np.asarray(X)
        if X.ndim < 1:
            raise ValueError(f"from_dense: X is a 0-d array ({X.dtype}); expected an array of at least one mode")
        idx = np.nonzero(X)
        return cls(np.stack(idx, axis=1), X[idx], X.shape)

    @classmethod
    def from_scipy(cls, M: Any) -> COOTensor:
        """From a scipy.sparse matrix (a 2-way tensor)."""
        if not hasattr(M, "tocoo"):
            from tuckerkit._validation import describe

            raise TypeError(f"from_scipy: M is {describe(M)} ({type(M).__name__}); expected a scipy.sparse matrix "
                            "or array (COOTensor.from_dense takes a numpy array)")
        M = M.tocoo()
        if len(M.shape) != 2:  # (scipy >= 1.15's n-D coo_array: its coordinates, one row per mode)
            return cls(np.stack([np.asarray(c) for c in M.coords], axis=1), M.data, M.shape)
        return cls(np.stack([M.row, M.col], axis=1), M.data, M.shape)

    @classmethod
    def from_sparse(cls, S: Any) -> COOTensor:
        """From a pydata ``sparse`` array (``COO``, ``GCXS``, ``DOK``: converted to COO first). Its
        ``fill_value`` must be 0 (a tensor whose unstored entries are another value is not sparse here)."""
        fill = getattr(S, "fill_value", 0)
        if fill is not None and np.asarray(fill).item() != 0:
            raise ValueError(f"from_sparse: S has fill_value={np.asarray(fill).item()!r}; expected 0 (its unstored "
                             "entries are that value, not zeros)")
        if not hasattr(S, "coords") and hasattr(S, "asformat"):
            S = S.asformat("coo")
        if not hasattr(S, "coords"):
            from tuckerkit._validation import describe

            raise TypeError(f"from_sparse: S is {describe(S)} ({type(S).__name__}); expected a pydata sparse array")
        return cls(np.asarray(S.coords).T, np.asarray(S.data), S.shape)

    @classmethod
    def from_tns(cls, path: str | os.PathLike, *, shape: Sequence[int] | None = None,
                 dtype: Any = np.float64) -> COOTensor:
        """Read a FROSTT ``.tns`` file (see :func:`tuckerkit.io.read_tns`)."""
        from tuckerkit.io import read_tns

        coords, values, shp = read_tns(path, shape=shape, dtype=dtype)
        return cls._owned(coords, values, shp, checked=True)

    def to_tns(self, path: str | os.PathLike, *, force: bool = False) -> None:
        """Write a FROSTT ``.tns`` file (see :func:`tuckerkit.io.write_tns`). The format stores no shape: a reader
        takes each mode's largest index, so where a mode has empty slices past its last nonzero a
        ``UserWarning`` says which shape to pass back to :meth:`from_tns` (:meth:`save_npz` keeps the shape). Nor
        does it store the dtype: float32 values come back with the same bits from ``from_tns(path,
        dtype=numpy.float32)``."""
        from tuckerkit.io import write_tns

        write_tns(path, self.coords, self.values, force=force)
        seen = tuple(int(c) + 1 for c in self.coords.max(axis=0)) if self.nnz else (0,) * self.ndim
        if seen != tuple(self.shape):
            import warnings

            warnings.warn(f"{path}: the .tns format stores no shape; read back it is {seen}, not {tuple(self.shape)}: "
                          f"pass shape={tuple(self.shape)} to from_tns (save_npz keeps the shape)", UserWarning,
                          stacklevel=2)

    def save_npz(self, path: str | os.PathLike, *, force: bool = False) -> None:
        """Write the binary sparse format: an uncompressed ``.npz`` holding ``coords`` (nnz, N) 0-based,
        ``values`` (nnz,) and ``shape`` (N,), read back by :meth:`from_npz` or ``tuckerkit.io.load_tensor``
        at disk speed (no text to parse). Refuses to overwrite without ``force``."""
        from tuckerkit.io._tns import save_sparse_npz

        save_sparse_npz(path, self.coords, self.values, self.shape, force=force)

    @classmethod
    def from_npz(cls, path: str | os.PathLike) -> COOTensor:
        """Read the binary sparse format written by :meth:`save_npz` (sizes checked before reading)."""
        from tuckerkit.io._load import TensorFileError
        from tuckerkit.io._tns import load_sparse_npz

        coords, values, shp = load_sparse_npz(path)
        try:
            return cls(coords, values, shp)
        except (ValueError, TypeError) as exc:
            raise TensorFileError(f"{str(path)!r}: {exc}") from None

    # ------------------------------------------------------------------------------------------ properties
    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def density(self) -> float:
        return self.nnz / float(math.prod(float(s) for s in self.shape))

    @property
    def nbytes(self) -> int:
        return int(self.coords.nbytes + self.values.nbytes)

    def astype(self, dtype: Any) -> COOTensor:
        """The same nonzeros with values of ``dtype`` (float32 or float64), through the constructor's checks: a
        value the cast makes zero is dropped, one it makes infinite refused (it kept explicit zeros and took
        int and string dtypes, which failed later with numpy's messages)."""
        dt = np.dtype(dtype)
        if dt not in (np.float32, np.float64):
            raise TypeError(f"astype: dtype {dt} is not supported; expected float32 or float64")
        from tuckerkit.engine._operand import narrowed

        # (an overflow named as such, not as NaN in the data; every nonzero below the dtype's range refused: the
        # tensor became empty and a decomposition reported fit 1.0)
        values = narrowed(self.values, dt, "X") if self.values.size else self.values.astype(dt)
        return COOTensor._owned(np.array(self.coords), values, self.shape)

    def to_dense(self, *, limit: int = DENSE_LIMIT) -> np.ndarray:
        """The dense array; refused above ``limit`` entries (sparse data rarely fits densified)."""
        n = math.prod(float(s) for s in self.shape)
        if n > limit:
            raise ValueError(
                f"to_dense() would allocate {n:.3g} entries (shape {self.shape}), more than limit={limit:.3g}; "
                "keep the tensor sparse or raise the limit"
            )
        X = np.zeros(self.shape, dtype=self.dtype)
        X[tuple(self.coords.T)] = self.values
        return X

    def __repr__(self) -> str:
        return f"COOTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype})"


def _canonical(c: np.ndarray, v: np.ndarray, shape: tuple[int, ...], owned: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """Sort lexicographically, sum duplicates, drop zeros; int32 coordinates when they fit."""
    itype = np.int32 if max(shape) < 2**31 - 1 else np.int64
    n = c.shape[0]
    if n and sum(shape) <= 8 * n + (1 << 20):
        # one compiled pass: rows moved by counting sorts (none when already sorted), duplicates summed in
        # place; no linearized key, no permutation (the least memory: the input and one sorted copy)
        from tuckerkit.sparse._kernels import coo_canonical_rows

        c0 = np.ascontiguousarray(c, dtype=itype)
        v0 = np.ascontiguousarray(v)
        reuse = (owned or c0 is not c) and (owned or v0 is not v) and c0.flags.writeable and v0.flags.writeable
        cs, vals, kept, dups = coo_canonical_rows(c0, v0, np.asarray(shape, dtype=np.int64), reuse)
        if dups and not np.all(np.isfinite(vals[:kept])):
            _non_finite_sums(cs[:kept], vals[:kept])
        if kept == n:
            return cs, vals
        return cs[:kept].copy(), vals[:kept].copy()
    if n and math.prod(float(x) for x in shape) < 2.0**62:
        # modes too long for counting arrays: a radix sort of the linearized key, then one gathering pass
        from tuckerkit.sparse._kernels import coo_canonical

        out = np.empty(c.shape, dtype=itype)
        vals, kept, dups = coo_canonical(np.ascontiguousarray(c), np.ascontiguousarray(v),
                                         np.asarray(shape, dtype=np.int64), out)
        c = out[:kept] if kept == n else out[:kept].copy()
        if dups and not np.all(np.isfinite(vals)):
            _non_finite_sums(c, vals)
        return c, vals if kept == vals.shape[0] else vals.copy()
    if c.shape[0]:
        order = np.lexsort(c.T[::-1])
        c, v = c[order], v[order]
        new = np.ones(c.shape[0], dtype=bool)
        new[1:] = np.any(c[1:] != c[:-1], axis=1)
        if not new.all():
            starts = np.flatnonzero(new)
            with np.errstate(over="ignore", invalid="ignore"):
                v = np.add.reduceat(v, starts)
            c = c[starts]
            if not np.all(np.isfinite(v)):
                _non_finite_sums(c, v)
        keep = v != 0
        if not keep.all():
            c, v = c[keep], v[keep]
    return np.ascontiguousarray(c, dtype=itype), np.ascontiguousarray(v)


def _coords_from_plan(X: COOTensor) -> np.ndarray:
    """The coordinates of ``X`` in its canonical (lexicographic) order, from a tree of its cached plan (its
    rows sorted again: the coordinates are distinct, so the order is the same)."""
    return X.__dict__["_tk_csf"][1][0].to_coo().coords


def _non_finite_sums(c: np.ndarray, v: np.ndarray) -> None:
    bad = int(v.size - np.count_nonzero(np.isfinite(v)))
    raise ValueError(f"values: duplicate coordinates sum to NaN or infinity at {bad} coordinate(s) "
                     f"(first: {[int(i) for i in c[~np.isfinite(v)][0]]}, 0-based); the sums must be "
                     "finite")


def linear_key(c: np.ndarray, shape: Sequence[int]) -> np.ndarray | None:
    """Row-major linear index of each coordinate row (None when the tensor has 2**63 entries or more)."""
    if math.prod(float(x) for x in shape) >= 2.0**62:
        return None
    key = np.zeros(c.shape[0], dtype=np.int64)
    for m, size in enumerate(shape):
        key *= int(size)
        key += c[:, m]
    return key
