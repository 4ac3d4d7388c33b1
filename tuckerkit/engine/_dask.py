"""Distributed tensors: a ``dask.array.Array`` decomposed on whatever Dask scheduler is active.

:class:`DaskTensor` is an :class:`~tuckerkit.engine.Operand` whose norm, Grams, projections, MTTKRPs and sweeps
are Dask graphs:
contractions of the chunked tensor with the (small, broadcast) factor matrices are chunk-local products
summed by Dask's tree reductions, and only the projected tensors, which are small, come back to the
caller. The chunks never leave the workers. ``dask`` is imported only when a Dask array is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tuckerkit.engine._operand import OperandBase, combine_scaled, sqnorm_scaled
from tuckerkit.engine._policy import ExecutionPolicy, resolve_policy
from tuckerkit.engine._subspace import eigh_desc, sign_fix
from tuckerkit.engine._sweeps import Sweep, take_partial, ttmc_tree

#: one worker per Dask task: Dask runs the tasks side by side
_SERIAL = ExecutionPolicy(workers=1)


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
    from tuckerkit.engine._ttm import dense_multi_ttm

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
        y = dense_multi_ttm(x, dict(zip(modes, us, strict=True)), True, None, _SERIAL)
        y = np.moveaxis(y, modes, range(N - len(modes), N))  # ranks last, in mode order
        return np.expand_dims(y, tuple(modes))  # a unit axis where each contracted mode was

    P = da.blockwise(block, idx + rl, *args, adjust_chunks={idx[m]: 1 for m in modes}, dtype=X.dtype,
                     concatenate=False, meta=np.empty((0,) * (N + len(modes)), dtype=X.dtype))
    Y = P.sum(axis=tuple(modes))  # kept modes, then one rank axis per contracted mode
    return da.moveaxis(Y, list(range(n_keep, N)), modes)


def _gram(da: Any, X: Any, mode: int) -> Any:
    """``X_(n) X_(n)^T``: each chunk's Gram by tuckerkit's engine, summed by a tree reduction (mode ``n`` in
    one chunk); Dask's ``tensordot`` when mode ``n`` is split across chunks (the Gram then pairs chunks)."""
    from tuckerkit.engine._gram import dense_gram

    N = X.ndim
    if len(X.chunks[mode]) > 1:
        others = [m for m in range(N) if m != mode]
        return da.tensordot(X, X, axes=(others, others))
    idx = "abcdefghijklm"[:N]
    out = "yz"

    def block(x: np.ndarray) -> np.ndarray:
        return dense_gram(x, mode, None, _SERIAL).reshape((1,) * (N - 1) + x.shape[mode:mode + 1] * 2)

    others = [m for m in range(N) if m != mode]
    P = da.blockwise(block, "".join(idx[m] for m in others) + out, X, idx,
                     adjust_chunks={idx[m]: 1 for m in others}, new_axes={"y": X.shape[mode], "z": X.shape[mode]},
                     concatenate=True, dtype=X.dtype, meta=np.empty((0,) * (N + 1), dtype=X.dtype))
    return P.sum(axis=tuple(range(N - 1)))


def _mttkrp(da: Any, X: Any, factors: list[Any], mode: int) -> Any:
    """Mode ``mode``'s MTTKRP as a Dask graph: one task per chunk runs tuckerkit's engine
    (:func:`~tuckerkit.engine._mttkrp.dense_mttkrp`) on the chunk and the rows of the factors that meet it, and
    the partials of chunks that differ only in the other modes are summed by Dask's tree reduction, in the same
    order in every process. (``dask.array.einsum`` ordered its summed axes by a set of letters, so its sums
    followed the process's string-hash seed: other bits from one run to the next.)"""
    from tuckerkit.engine._mttkrp import dense_mttkrp

    N = X.ndim
    others = [m for m in range(N) if m != mode]
    idx = "abcdefghijklm"[:N]
    args: list[Any] = [X, idx]
    R = int(factors[others[0]].shape[1])
    for m in others:
        args += [da.from_array(factors[m], chunks=(X.chunks[m], R)), idx[m] + "z"]

    def block(x: np.ndarray, *us: np.ndarray) -> np.ndarray:
        fs: list[Any] = [None] * N
        for m, u in zip(others, us, strict=True):
            fs[m] = u
        y = dense_mttkrp(x, fs, mode, R, None, _SERIAL)  # (rows of mode, R)
        return y.reshape(tuple(1 for _ in others) + y.shape)

    out = "".join(idx[m] for m in others) + idx[mode] + "z"
    P = da.blockwise(block, out, *args, adjust_chunks={idx[m]: 1 for m in others}, dtype=X.dtype,
                     concatenate=True, meta=np.empty((0,) * (N + 1), dtype=X.dtype))
    return P.sum(axis=tuple(range(N - 1)))


class DaskTensor(OperandBase):
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
            raise ValueError(f"X (a Dask array) must have at least 2 dimensions; received shape {tuple(data.shape)}")
        if any(math.isnan(s) for s in data.shape):
            raise ValueError("X (a Dask array) has unknown chunk sizes (after boolean indexing, say); call its "
                             "compute_chunk_sizes() first")
        dt = np.dtype(data.dtype)
        if dt.kind == "c":  # (cast to float64 below it kept the real part alone, silently)
            raise TypeError(f"X has complex dtype {dt} as a DaskTensor; expected a numpy or cupy array in memory "
                            "for complex tensors (no memory_limit, Dask or sparse input)")
        if dt.kind not in "biuf":
            raise TypeError(f"the Dask array has dtype {dt}; expected numbers (float32 or float64; integers and "
                            "bools are computed in float64)")
        self.dtype = dt if dt in (np.float32, np.float64) else np.dtype(np.float64)
        self.data = data.astype(self.dtype) if dt != self.dtype else data
        self.shape = tuple(int(s) for s in data.shape)
        self.closer: Callable[[], None] | None = None  # closes a Dask client this tensor's opener started

    def scaled(self, factor: float) -> DaskTensor:
        return DaskTensor(self.data * self.dtype.type(factor))

    def close(self) -> None:
        """Close the Dask client (and cluster) :func:`tuckerkit.io.open_tensor` started for this tensor."""
        if self.closer is not None:
            self.closer()
            self.closer = None

    @property
    def streamed(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"DaskTensor(shape={self.shape}, dtype={self.dtype}, chunks={self.data.chunksize})"

    def norm(self) -> float:
        """Frobenius norm in one distributed pass: each chunk's scaled sum of squares (float64, see
        :func:`~tuckerkit.engine._operand.sqnorm_scaled`), combined in chunk order here; NaN or Inf gives a
        clear error."""
        import dask.array as da

        N = self.ndim

        def block(x: np.ndarray) -> np.ndarray:
            return np.array(sqnorm_scaled(np.asarray(x))).reshape((1,) * N + (2,))

        chunks = (*((1,) * len(c) for c in self.data.chunks), (2,))
        parts = da.map_blocks(block, self.data, new_axis=N, chunks=chunks, dtype=np.float64).compute()
        acc = (1.0, 0.0)
        for s, q in parts.reshape(-1, 2):
            acc = combine_scaled(acc, (float(s), float(q)))
        total = acc[0] * math.sqrt(acc[1])
        if not math.isfinite(total):
            raise ValueError("X contains NaN or infinite value(s); remove or impute them first")
        return total

    def gram(self, mode: int, *, plan: Any = None, policy: ExecutionPolicy | None = None) -> np.ndarray:
        import dask.array as da

        self._dense_only("plan=", plan)
        return np.asarray(_gram(da, self.data, mode).compute())

    def multi_ttm(self, mats: Mapping[int, Any], *, transpose: bool = False, plan: Any = None,
                  policy: ExecutionPolicy | None = None) -> np.ndarray:
        """``X x_m U_m`` (transposed) for every ``m`` in ``mats``, as one Dask graph."""
        import dask.array as da

        self._dense_only("plan=", plan)
        # (the matrices' dtype joins X's, as in memory: a complex one had been cast to X's real dtype, zeros and a
        # ComplexWarning; a float64 one to float32 for float32 data)
        dt = _joined(self.dtype, *(np.asarray(U).dtype for U in mats.values()))
        # (each chunk's projection is the engine's transposed one, U^H for a complex U: the un-transposed call's
        # U therefore goes in as conj(U^T))
        mats_t = {m: np.ascontiguousarray(U if transpose else np.conj(np.asarray(U).T), dtype=dt)
                  for m, U in mats.items()}
        data = self.data if dt == self.dtype else self.data.astype(dt)
        return np.asarray(_project(da, data, mats_t).compute())

    def mttkrp(self, factors: Sequence[Any], mode: int, *, plan: Any = None,
               policy: ExecutionPolicy | None = None) -> np.ndarray:
        """One mode's MTTKRP: chunk-local products with the broadcast factors, summed by a tree reduction."""
        import dask.array as da

        self._dense_only("plan=", plan)
        dt = _joined(self.dtype, *(np.asarray(U).dtype for m, U in enumerate(factors) if m != mode))
        data = self.data if dt == self.dtype else self.data.astype(dt)
        return np.asarray(_mttkrp(da, data, [np.asarray(U, dtype=dt) if m != mode else None
                                              for m, U in enumerate(factors)], mode).compute())

    def leading_subspace(self, mode: int, rank: int, *, rng: np.random.Generator | None = None,
                         policy: ExecutionPolicy | None = None) -> tuple[np.ndarray, np.ndarray]:
        mode = self._subspace_args(mode, rank)
        w, V = eigh_desc(self.gram(mode), rank)
        return sign_fix(np.ascontiguousarray(V)), w

    def preferred_init(self, ranks: Sequence[int]) -> str:
        return "st_hosvd_sketch"

    def ttmc_sweep(self, factors: list[Any], update: Callable[[int, Any], None], *,
                   policy: ExecutionPolicy | None = None, partials: dict[frozenset[int], Any] | None = None) -> Sweep:
        """HOOI's projections in two distributed passes (the dimension tree's top split; one taken from
        ``partials`` when the start made it); the rest of the tree runs in memory on the projected tensors."""
        pol = resolve_policy(policy)
        N = self.ndim
        half = (N + 1) // 2
        first, second = list(range(half)), list(range(half, N))
        plans: list[Any] = []
        for part, rest in ((first, second), (second, first)):
            Y = take_partial(partials, part)
            if Y is None:
                Y = np.ascontiguousarray(self.multi_ttm({m: factors[m] for m in rest}, transpose=True))
            ttmc_tree(Y, part, factors, update, plans, pol, partials)
            del Y
        return Sweep(tuple(plans), 2)

    def mttkrp_sweep(self, factors: list[Any], update: Callable[[int, Any], None], *,
                     policy: ExecutionPolicy | None = None) -> Sweep:
        """CP-ALS's MTTKRPs, one distributed pass per mode (Gauss-Seidel order: each uses the factors updated
        before it)."""
        for n in range(self.ndim):
            update(n, self.mttkrp(factors, n))
        return Sweep((), self.ndim)


def _joined(*dtypes: Any) -> np.dtype:
    """The dtype a product of X and matrices of these dtypes takes in memory: numpy's promotion, integers and
    bools as float64, half precision as float32."""
    dt = np.result_type(*[np.dtype(d) if np.dtype(d).kind in "fc" else np.dtype(np.float64) for d in dtypes])
    return np.dtype(np.float32) if dt == np.float16 else dt
