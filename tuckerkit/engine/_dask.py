"""Distributed tensors: a ``dask.array.Array`` decomposed on whatever Dask scheduler is active.

:class:`DaskTensor` gives the engine's dispatch hooks (norm, Gram, TTM, HOOI's projections) a Dask graph:
contractions of the chunked tensor with the (small, broadcast) factor matrices are chunk-local products
summed by Dask's tree reductions, and only the projected tensors, which are small, come back to the
caller. The chunks never leave the workers. ``dask`` is imported only when a Dask array is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np


def is_dask_array(X: Any) -> bool:
    """True for a ``dask.array.Array`` (checked without importing dask).

    Examples
    --------
    >>> import numpy as np
    >>> is_dask_array(np.ones(3))
    False
    """
    return type(X).__module__.split(".")[0] == "dask" and hasattr(X, "chunks")


def _project(da: Any, X: Any, mats: dict[int, Any]) -> Any:
    """``X x_m U_m^T`` for each ``m`` in ``mats`` as a Dask graph (modes keep their positions).

    One task per chunk runs tuckerkit's engine (:func:`~tuckerkit.engine.multi_ttm`) on the chunk and the
    rows of the factors that meet it; the partial products of chunks that differ only in contracted modes
    are summed by Dask's tree reduction. Nothing but the chunk and the small factors meets in a task.
    """
    from tuckerkit.engine._ops import multi_ttm

    N = X.ndim
    modes = sorted(mats)
    idx = "abcdefghijklm"[:N]
    rl = "nopqrstuvwxyz"[:len(modes)]
    args: list[Any] = [X, idx]
    for m, r in zip(modes, rl, strict=True):
        U = np.asarray(mats[m], dtype=X.dtype)
        args += [da.from_array(U, chunks=(X.chunks[m], U.shape[1])), idx[m] + r]
    n_keep = N - len(modes)

    def block(x: np.ndarray, *us: np.ndarray) -> np.ndarray:
        y = multi_ttm(x, list(us), modes=modes, transpose=True)
        y = np.moveaxis(y, modes, range(N - len(modes), N))  # ranks last, in mode order
        return np.expand_dims(y, tuple(modes))  # a unit axis where each contracted mode was

    P = da.blockwise(block, idx + rl, *args, adjust_chunks={idx[m]: 1 for m in modes}, dtype=X.dtype,
                     concatenate=False, meta=np.empty((0,) * (N + len(modes)), dtype=X.dtype))
    Y = P.sum(axis=tuple(modes))  # kept modes, then one rank axis per contracted mode
    return da.moveaxis(Y, list(range(n_keep, N)), modes)


def _gram(da: Any, X: Any, mode: int) -> Any:
    """``X_(n) X_(n)^T``: each chunk's Gram by tuckerkit's engine, summed by a tree reduction (mode ``n`` in
    one chunk); Dask's ``tensordot`` when mode ``n`` is split across chunks (the Gram then pairs chunks)."""
    from tuckerkit.engine._ops import gram

    N = X.ndim
    if len(X.chunks[mode]) > 1:
        others = [m for m in range(N) if m != mode]
        return da.tensordot(X, X, axes=(others, others))
    idx = "abcdefghijklm"[:N]
    out = "yz"

    def block(x: np.ndarray) -> np.ndarray:
        return gram(x, mode).reshape((1,) * (N - 1) + x.shape[mode:mode + 1] * 2)

    others = [m for m in range(N) if m != mode]
    P = da.blockwise(block, "".join(idx[m] for m in others) + out, X, idx,
                     adjust_chunks={idx[m]: 1 for m in others}, new_axes={"y": X.shape[mode], "z": X.shape[mode]},
                     concatenate=True, dtype=X.dtype, meta=np.empty((0,) * (N + 1), dtype=X.dtype))
    return P.sum(axis=tuple(range(N - 1)))


class DaskTensor:
    """A dense tensor held as a ``dask.array.Array``; computations run on the active Dask scheduler.

    Parameters
    ----------
    data : dask.array.Array
        Any chunking; float32/float64 kept, integers computed in float64.

    Examples
    --------
    >>> import dask.array as da
    >>> from tuckerkit.engine import DaskTensor
    >>> X = DaskTensor(da.ones((30, 20, 10), chunks=(7, 20, 10)))
    >>> X.shape, round(X.norm() ** 2)
    ((30, 20, 10), 6000)
    """

    def __init__(self, data: Any):
        if not is_dask_array(data):
            raise TypeError(f"data must be a dask.array.Array; received {type(data).__name__}")
        if data.ndim < 2:
            raise ValueError(f"data must have at least 2 dimensions; received shape {tuple(data.shape)}")
        if any(math.isnan(s) for s in data.shape):
            raise ValueError("data has unknown chunk sizes; call compute_chunk_sizes() first")
        dt = np.dtype(data.dtype)
        self.dtype = dt if dt in (np.float32, np.float64) else np.dtype(np.float64)
        self.data = data.astype(self.dtype) if dt != self.dtype else data
        self.shape = tuple(int(s) for s in data.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"DaskTensor(shape={self.shape}, dtype={self.dtype}, chunks={self.data.chunksize})"

    def norm(self) -> float:
        """Frobenius norm (float64 accumulation on the workers); NaN or Inf gives a clear error."""
        import dask.array as da

        total = float(da.sum(da.square(self.data.astype(np.float64))).compute())
        if not math.isfinite(total):
            raise ValueError("X contains NaN or infinite value(s); remove or impute them first")
        return math.sqrt(total)

    def _tk_gram(self, mode: int) -> np.ndarray:
        import dask.array as da

        return np.asarray(_gram(da, self.data, mode).compute())

    def _tk_ttm(self, U: Any, mode: int) -> np.ndarray:
        return self._tk_project({mode: U})

    def _tk_project(self, mats: dict[int, Any]) -> np.ndarray:
        """``X x_m U_m^T`` for every ``m`` in ``mats``, as one Dask graph."""
        import dask.array as da

        return np.asarray(_project(da, self.data, {m: np.asarray(U, dtype=self.dtype) for m, U in mats.items()})
                          .compute())

    def _tk_ttmc_sweep(self, factors: list[Any], update: Callable[[int, Any], None]) -> tuple[Any, ...]:
        """HOOI's projections in two distributed passes (the dimension tree's top split); the rest of the
        tree runs in memory on the projected tensors."""
        import dask.array as da

        from tuckerkit.engine._ops import _ttmc_tree

        N = self.ndim
        half = (N + 1) // 2
        first, second = list(range(half)), list(range(half, N))
        plans: list[Any] = []
        for part, rest in ((first, second), (second, first)):
            mats = {m: np.asarray(factors[m], dtype=self.dtype) for m in rest}
            Y = np.ascontiguousarray(_project(da, self.data, mats).compute())
            _ttmc_tree(Y, part, factors, update, plans)
        return tuple(plans)

    def _tk_mttkrp_sweep(self, factors: list[Any], update: Callable[[int, Any], None]) -> tuple[Any, ...]:
        """CP-ALS's MTTKRPs, one distributed pass per mode (Gauss-Seidel order: each uses the factors updated
        before it): chunk-local products with the broadcast factors, summed by Dask's tree reduction."""
        import dask.array as da

        N = self.ndim
        letters = "abcdefghijklmnopqrstuvwxyz"[:N]
        for n in range(N):
            others = [m for m in range(N) if m != n]
            spec = f"{letters}," + ",".join(f"{letters[m]}z" for m in others) + f"->{letters[n]}z"
            mats = [da.from_array(np.asarray(factors[m], dtype=self.dtype), chunks=(self.data.chunks[m], -1))
                    for m in others]
            M = da.einsum(spec, self.data, *mats, optimize=True)
            update(n, np.asarray(M.compute()))
        return ()
