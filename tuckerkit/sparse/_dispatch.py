"""The operand protocol for sparse tensors (shared by COOTensor and CSFTensor): sparse is a kernel, not a branch."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tuckerkit.backend import Device
from tuckerkit.engine._operand import OperandBase
from tuckerkit.engine._policy import ExecutionPolicy, resolve_policy, scipy_linalg
from tuckerkit.engine._subspace import sign_fix
from tuckerkit.engine._sweeps import Sweep

#: extra Gaussian columns of the sketch of :meth:`SparseOperand.sketched_subspace` (the range finder's
#: oversampling)
SKETCH_OVERSAMPLE = 10


class SparseShape:
    """What every sparse tensor (host or GPU) derives from its ``shape`` and ``values``."""

    shape: tuple[int, ...]
    values: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    @property
    def stored_entries(self) -> int:
        """The nonzeros (what the tensor stores; a dense tensor stores every entry)."""
        return self.nnz

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.values.dtype)


def _available_bytes() -> int:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 << 30


def values_norm(values: Any) -> float:
    """Frobenius norm from the nonzeros (float64, scaled by the largest magnitude: no overflow)."""
    from tuckerkit.engine._operand import frobenius_norm

    return frobenius_norm(values)


def coo_ttm(coo: Any, U: Any, mode: int) -> Any:
    """``X x_mode U^T`` for a COO tensor and ``U`` of shape (I_mode, J): a COO tensor whose mode ``mode`` has
    size J, one entry per (fiber of X along ``mode`` holding a nonzero, j).

    The nonzeros are grouped by their fiber (the other modes' coordinates) once; then, for each j, one
    weighted ``bincount`` over the groups (sums in the nonzeros' order: the same bits on every run). Memory:
    the result (fibers x J) and a few arrays of nnz, never nnz x J (a 40 MB tensor projected to 5 x 5 x 5
    took 600 MB that way)."""
    from tuckerkit.sparse._coo import COOTensor

    U = np.asarray(U)
    J = int(U.shape[1])
    c = coo.coords
    others = [m for m in range(coo.ndim) if m != mode]
    dtype = np.result_type(coo.values.dtype, U.dtype)
    shape = list(coo.shape)
    shape[mode] = J
    if coo.nnz == 0:
        return COOTensor(np.zeros((0, coo.ndim), dtype=np.int64), np.zeros(0, dtype=dtype), shape)
    if others:
        try:
            key = np.ravel_multi_index(tuple(c[:, m] for m in others), [coo.shape[m] for m in others])
            _, inv = np.unique(key, return_inverse=True)
        except ValueError:  # (more fibers than an int64 index counts: the coordinate rows themselves)
            _, inv = np.unique(c[:, others], axis=0, return_inverse=True)
        inv = inv.reshape(-1)
    else:
        inv = np.zeros(coo.nnz, dtype=np.intp)
    F = int(inv.max()) + 1
    need = float(F) * J * (np.dtype(dtype).itemsize + 8 * coo.ndim)  # (the result's values and coordinates)
    if need > _available_bytes() // 2:  # (numpy's raw MemoryError, or the OOM killer)
        raise MemoryError(f"projecting mode {mode} of this sparse tensor onto {J} columns makes {F:,} x {J:,} "
                          f"entries ({need / 1e9:.1f} GB), more than half the available memory; ask for smaller "
                          "ranks, or a larger max_error")
    first = np.empty(F, dtype=np.intp)
    first[inv[::-1]] = np.arange(coo.nnz - 1, -1, -1)  # each fiber's first nonzero
    Ut = np.ascontiguousarray(U.T)  # (J x I_mode: each column of U gathered from one contiguous row)
    idx = c[:, mode]
    vals = np.empty((F, J), dtype=dtype)
    for j in range(J):  # (one column at a time: nnz elements held, never nnz x J)
        w = coo.values * Ut[j][idx]
        if np.iscomplexobj(w):
            vals[:, j] = np.bincount(inv, w.real, F) + 1j * np.bincount(inv, w.imag, F)
        else:
            vals[:, j] = np.bincount(inv, w, F)
    out = np.repeat(c[first], J, axis=0)
    out[:, mode] = np.tile(np.arange(J, dtype=out.dtype), F)
    return COOTensor(out, vals.reshape(-1), shape)


class SparseOperand(SparseShape, OperandBase):
    """The operand protocol of COOTensor and CSFTensor: compiled CSF kernels, never a densification."""

    values: np.ndarray

    @property
    def device(self) -> Device:
        return Device("cpu")

    def norm(self) -> float:
        """Frobenius norm from the nonzeros (float64 accumulation, scaled: no overflow)."""
        return values_norm(self.values)

    def drop_stale_plan(self) -> bool:
        """Drop the cached CSF plan when ``values`` changed since its trees were built (edited in place, or
        another array assigned): the trees hold the values in their own order, so the next decomposition read
        the old ones (a fit of 0.0606 for 0.2721). One read of the values, at each decomposition's start and
        each public engine call (:func:`~tuckerkit.engine._operand.public_operand`). True when dropped."""
        from tuckerkit.sparse._mttkrp import values_stamp

        stamp = self.__dict__.get("_tk_csf_stamp")
        if self.__dict__.get("_tk_csf") is None or stamp is None or values_stamp(self) == stamp:
            return False
        if self.__dict__.get("_coords") is None:  # (dropped while the plan held them: rebuilt from a tree first)
            _ = getattr(self, "coords")  # noqa: B009 (a COO tensor's property)
        del self.__dict__["_tk_csf"]
        self.__dict__.pop("_tk_csf_stamp", None)
        return True

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled (or deep-copied): the cached CSF plan, pickled with its trees, is kept when the values are
        the ones its trees were built from, its stamp moved to the new ``values`` array. The stamp holds the
        array's address, which never matched after unpickling: the plan was dropped on first use, so a kind
        forced with ``X.plan(csf="one")`` was silently replaced (another kind, other bits) and the pickled
        trees were carried for nothing."""
        self.__dict__.update(state)
        stamp = state.get("_tk_csf_stamp")
        if state.get("_tk_csf") is None or stamp is None:
            return
        from tuckerkit.sparse._mttkrp import values_stamp

        now = values_stamp(self)
        if now is not None and tuple(now[1:]) == tuple(stamp[1:]):  # (the same length and entries' bits)
            self.__dict__["_tk_csf_stamp"] = now

    def scaled(self, factor: float) -> Any:
        """The tensor with its values times ``factor``; the CSF trees built so far are kept (their index
        arrays shared, their values scaled)."""
        import copy

        out = copy.copy(self)
        out.values = self.values * self.values.dtype.type(factor)
        cache = self.__dict__.get("_tk_csf")
        if cache is not None:
            trees = []
            for tree in cache[1]:
                t = copy.copy(tree)
                t.values = tree.values * tree.values.dtype.type(factor)
                trees.append(t)
            out.__dict__["_tk_csf"] = (cache[0], trees)
        return out

    def to(self, device: Device) -> Any:
        """This tensor on ``device``: itself on the CPU, a :class:`GpuCOOTensor` (COO in device memory) on a GPU."""
        if not device.is_gpu:
            return self
        from tuckerkit.sparse._csf import as_coo
        from tuckerkit.sparse._gpu import GpuCOOTensor

        return GpuCOOTensor(as_coo(self), device)

    def plan(self, csf: str | None = None, *, memory_budget: int | None = None,
             iterations: int | None = None) -> Any:
        """The per-mode kernel plan MTTKRP uses on this tensor (:class:`SparsePlan`; builds the CSFs once).

        Parameters
        ----------
        csf : {None, "auto", "all", "two", "one"}, default None
            None: the cached plan, else ``"auto"``. ``"auto"`` takes, among the kinds whose trees fit
            ``memory_budget``, the one whose build plus ``iterations`` sweeps is estimated cheapest (the plan's
            ``reason`` and ``explain()`` give the estimates); the others force a kind (replacing a cached
            plan of another kind).
        memory_budget : int, optional
            Bytes the CSF trees may use (default: a quarter of the physical memory).
        iterations : int, optional
            Sweeps the caller expects to run (CP-ALS: ``max_iter``), weighed against the build time by
            ``"auto"``; default 50.

        Returns
        -------
        SparsePlan

        Examples
        --------
        >>> from tuckerkit.sparse import COOTensor
        >>> X = COOTensor([[0, 0, 0], [1, 2, 3]], [1.0, 2.0], shape=(2, 3, 4))
        >>> print(X.plan().explain().splitlines()[1])
          mode 0: CSF order [0, 1, 2] (root kernel)
        >>> X.plan(memory_budget=100).kind
        'one'
        >>> X.plan(csf="auto", iterations=1).kind  # one sweep: building three trees does not pay
        'one'
        """
        from tuckerkit.engine._slabs import parse_memory
        from tuckerkit.sparse._mttkrp import sparse_plan

        if memory_budget is not None:  # (bytes or a size such as "1GB", as memory_limit= everywhere)
            memory_budget = parse_memory(memory_budget, "memory_budget")
            if memory_budget < 1:
                raise ValueError(f"memory_budget={memory_budget} is invalid; expected a positive number of bytes")
        if csf is None and (memory_budget is not None or iterations is not None):
            csf = "auto"
        self.drop_stale_plan()  # (values edited since: a cached plan of the asked kind was handed back stale)
        return sparse_plan(self, csf, memory_budget, iterations)[0]

    # -- the operand protocol ------------------------------------------------------------------------
    def unfolding(self, mode: int) -> Any:
        """The mode-``mode`` unfolding as a scipy CSR matrix, keeping only the columns that hold nonzeros.

        Dropping empty columns leaves ``A A^T`` and the left singular vectors unchanged, and keeps the
        matrix at most ``nnz`` wide: ARPACK's final SVD is then ``k x nnz`` instead of ``k x prod(other
        modes)`` (a 10000^3 tensor's unfolding has 1e8 columns; its SVD took 8 s and 0.8 GB).

        Examples
        --------
        >>> from tuckerkit.sparse import COOTensor
        >>> X = COOTensor([[0, 0, 0], [1, 2, 3]], [1.0, 2.0], shape=(2, 3, 4))
        >>> X.unfolding(0).shape
        (2, 2)
        """
        import scipy.sparse

        from tuckerkit.sparse._coo import linear_key
        from tuckerkit.sparse._csf import as_coo

        coo = as_coo(self)
        others = [m for m in range(coo.ndim) if m != mode]
        if others:
            rest = coo.coords[:, others]
            key = linear_key(rest, [coo.shape[m] for m in others])
            _, col = np.unique(rest if key is None else key, axis=0, return_inverse=True)
            col = col.reshape(-1)
        else:
            col = np.zeros(coo.nnz, np.int64)
        ncols = int(col.max()) + 1 if col.size else 0
        return scipy.sparse.csr_matrix((coo.values, (coo.coords[:, mode], col)), shape=(coo.shape[mode], ncols))

    def gram(self, mode: int, *, plan: Any = None, policy: ExecutionPolicy | None = None) -> np.ndarray:
        """``X_(n) X_(n)^T`` from the sparse unfolding (a dense I_n x I_n result; refused when it would take
        more than a quarter of the available memory), accumulated in double precision and rounded once to the
        values' dtype (:meth:`wide_gram`)."""
        self._dense_only("plan=", plan)
        return np.asarray(self.wide_gram(mode), dtype=self.dtype)

    def wide_gram(self, mode: int) -> np.ndarray:
        """``X_(n) X_(n)^T`` accumulated in double precision (complex128 for complex values), whatever the values'
        dtype: scipy's sparse product sums each entry's products one after another in the operands' dtype, so
        a float32 unfolding's Gram carried rounding of about its row length times eps32 (a 40 x 45 x 50 tensor
        with every entry stored: ``st_hosvd(max_error=1e-4)`` then kept an error of 6.2e-4). :meth:`gram`
        rounds this once to the values' dtype; a single-precision rank choice keeps it (see
        ``tuckerkit.decomposition._tucker.DOUBLE_GRAM_BUDGET``). Refused, as :meth:`gram`, above a quarter of
        the available memory."""
        In = self.shape[mode]
        need = In * In * 16
        if need > _available_bytes() // 4:
            raise ValueError(
                f"the mode-{mode} Gram of this sparse tensor is {In} x {In} ({need / 1e9:.1f} GB), more than a "
                "quarter of the available memory; pass ranks (leading subspaces by ARPACK) instead of max_error"
            )
        A = self.unfolding(mode)
        A = A.astype(np.complex128 if A.dtype.kind == "c" else np.float64, copy=False)
        return (A @ A.T).toarray()

    def multi_ttm(self, mats: Mapping[int, Any], *, transpose: bool = False, plan: Any = None,
                  policy: ExecutionPolicy | None = None) -> Any:
        """``X x_m U_m`` (transposed) for every ``m`` in ``mats``: all modes but at most one by the compiled
        ttmc kernel (a dense result), fewer modes one at a time as COO tensors (a COOTensor result)."""
        from tuckerkit.engine._ttm import dense_ttm
        from tuckerkit.sparse._csf import as_coo
        from tuckerkit.sparse._mttkrp import sparse_ttmc

        self._dense_only("plan=", plan)
        pol = resolve_policy(policy)
        # (I_m, J_m) matrices K_m with the result X x_m K_m^T: U^T un-transposed, conj(U) transposed (the conjugate
        # transpose, as the dense engine's; the kernels take K as given: a complex call conjugated one mode only)
        mats_t = {m: np.asarray(U).T if not transpose else np.conj(np.asarray(U)) for m, U in mats.items()}
        if self.ndim == 1:  # (a vector: x^T K over its nonzeros; the tree kernel needs a mode besides the root)
            coo = as_coo(self)
            if not mats_t:
                return coo
            U = mats_t[0]
            dtype = np.result_type(coo.values.dtype, U.dtype)
            return np.asarray(coo.values.astype(dtype) @ U[coo.coords[:, 0]].astype(dtype, copy=False))
        left = [m for m in range(self.ndim) if m not in mats_t]
        if len(left) <= 1:
            # all modes: project all but the shortest by the kernel, then that one densely
            skip = left[0] if left else min(mats_t, key=lambda m: (self.shape[m], m))
            shape = [self.shape[m] if m == skip else mats_t[m].shape[1] for m in range(self.ndim)]
            need = math.prod(float(d) for d in shape) * np.dtype(self.dtype).itemsize
            if need > _available_bytes() // 2:  # (numpy's raw MemoryError after the work, or the OOM killer)
                raise MemoryError(f"the dense projection of this sparse tensor has shape {tuple(shape)} "
                                  f"({need / 1e9:.1f} GB), more than half the available memory; ask for smaller "
                                  "ranks, or a larger max_error")
            factors = [mats_t.get(m) for m in range(self.ndim)]
            Y = sparse_ttmc(self, factors, skip, pol)  # type: ignore[arg-type]
            # (the dense step's transposed product conjugates: conj(K) gives K^T)
            return Y if left else dense_ttm(Y, np.conj(mats_t[skip]), skip, True, None, None, pol)
        out = as_coo(self)
        for m in sorted(mats_t, key=lambda m: mats_t[m].shape[1] / self.shape[m]):
            out = coo_ttm(out, mats_t[m], m)
        return out

    def mttkrp(self, factors: Sequence[Any], mode: int, *, plan: Any = None,
               policy: ExecutionPolicy | None = None) -> np.ndarray:
        """The compiled CSF kernel of this mode's plan (:meth:`plan`). The factors are checked as
        :func:`tuckerkit.mttkrp` checks them (a short one had been read past its end: garbage, or a crash), and
        values edited since the trees were built are read anew (:meth:`drop_stale_plan`), as there."""
        from tuckerkit._validation import check_factor_list, check_mode

        self._dense_only("plan=", plan)
        n = check_mode(mode, self.ndim)
        facs, _ = check_factor_list(factors, self.shape, n, self.dtype)
        self.drop_stale_plan()
        return self.checked_mttkrp(facs, n, policy=policy)

    def checked_mttkrp(self, factors: Sequence[Any], mode: int, *, policy: ExecutionPolicy | None = None) -> Any:
        """:meth:`mttkrp` of factors and a mode already checked, the values already current (what
        :func:`tuckerkit.mttkrp` and the decompositions call after their own checks: not twice)."""
        from tuckerkit.sparse._csf import as_coo
        from tuckerkit.sparse._mttkrp import sparse_mttkrp

        if self.ndim == 1:  # (no other factor: each row of the result is the entry times ones(R))
            coo = as_coo(self)
            v = np.zeros(self.shape[0], dtype=np.result_type(coo.values.dtype, factors[0].dtype))
            np.add.at(v, coo.coords[:, 0], coo.values)
            return v[:, None] * np.ones((1, factors[0].shape[1]), dtype=v.dtype)
        return sparse_mttkrp(self, factors, mode, resolve_policy(policy))  # type: ignore[arg-type]

    def release_work_buffers(self) -> None:
        """Drop the MTTKRP work buffers kept on this tensor across a decomposition's iterations."""
        from tuckerkit.sparse._mttkrp import release_work_buffers

        release_work_buffers(self)

    def _per_mode(self, kernel: Callable[..., Any], factors: list[Any], update: Callable[[int, Any], None],
                  policy: ExecutionPolicy | None) -> Sweep:
        pol = resolve_policy(policy)
        for n in range(self.ndim):  # one compiled kernel per mode, each reading only the nonzeros
            update(n, kernel(self, factors, n, pol))
        return Sweep((self.plan(),), self.ndim)

    def ttmc_sweep(self, factors: list[Any], update: Callable[[int, Any], None], *,
                   policy: ExecutionPolicy | None = None, partials: dict[frozenset[int], Any] | None = None) -> Sweep:
        """One compiled ttmc per mode (each reads only the nonzeros; ``partials`` are not used)."""
        from tuckerkit.sparse._mttkrp import sparse_ttmc

        return self._per_mode(sparse_ttmc, factors, update, policy)

    def mttkrp_sweep(self, factors: list[Any], update: Callable[[int, Any], None], *,
                     policy: ExecutionPolicy | None = None) -> Sweep:
        """One compiled MTTKRP per mode (each reads only the nonzeros)."""
        from tuckerkit.sparse._mttkrp import sparse_mttkrp

        return self._per_mode(sparse_mttkrp, factors, update, policy)

    def leading_subspace(self, mode: int, rank: int, *, rng: np.random.Generator | None = None,
                         policy: ExecutionPolicy | None = None) -> tuple[np.ndarray, np.ndarray]:
        """ARPACK's leading singular vectors of the sparse unfolding (orthonormalized; :func:`leading_left`);
        where ARPACK cannot run (``rank`` at least the unfolding's rows or its nonzero columns) or the smaller
        side is short (:data:`DENSE_GRAM_MAX_ROWS`) the exact ones, from the dense Gram of the smaller side
        (random columns only for an unfolding with no nonzeros, or past its rank).
        Before, random columns stood in for every such rank, so a sparse ``hosvd`` / ``st_hosvd`` with a mode
        of size 1, a rank equal to the product of the others or very few nonzeros returned random factors
        and reported a fit of 0 (the dense call: 1.0)."""
        mode = self._subspace_args(mode, rank)
        scipy_linalg()  # (ARPACK's BLAS is scipy's OpenBLAS: held at one thread in a pinned call)
        import scipy.sparse.linalg

        from tuckerkit.engine._policy import blas_pinned

        rng = np.random.default_rng(0) if rng is None else rng
        A = self.unfolding(mode)
        # scaled by a power of two to a largest magnitude in [1, 2): exact, so the result does not depend on the
        # data's magnitude (before, a Gram underflowed at 1e-155: an arbitrary basis, overflowed at 1e200: NaN,
        # and ARPACK's absolute tolerance floor cut its accuracy below about 1e-6: other bits there now)
        _, e = np.frexp(float(np.max(np.abs(A.data)))) if A.nnz else (0.0, 1)
        A = A * np.ldexp(1.0, 1 - int(e)) if e != 1 else A
        if A.nnz == 0:
            V = rng.standard_normal((self.shape[mode], rank))
            s = np.zeros(rank)
        elif rank >= min(A.shape) or min(A.shape) <= DENSE_GRAM_MAX_ROWS:
            V, s = _exact_left(A, rank, rng)
        else:
            try:
                with blas_pinned():  # (LAPACK on one thread: the same bits whatever the machine's threads)
                    V, s = leading_left(A.astype(np.float64, copy=False), rank, int(rng.integers(2**31)))
            except (scipy.sparse.linalg.ArpackError, scipy.sparse.linalg.ArpackNoConvergence) as exc:
                if self.shape[mode] > 4096:  # no dense fallback of that size: one line, not a traceback
                    raise ValueError(f"mode {mode}: ARPACK could not compute the leading {rank} singular vectors "
                                     f"of the sparse unfolding ({str(exc).splitlines()[0]})") from None
                from tuckerkit.engine._subspace import eigh_desc

                w, V = eigh_desc((A @ A.T).toarray().astype(np.float64), rank)
                s = np.sqrt(np.clip(w, 0.0, None))
        Q, _ = np.linalg.qr(V)  # orthonormal also when ARPACK could not run
        with np.errstate(over="ignore"):  # (the eigenvalues of a Gram past the dtype's range: inf, as numpy's)
            w = np.ldexp(s * s, 2 * (int(e) - 1)).astype(self.dtype)
        return sign_fix(np.ascontiguousarray(Q)).astype(self.dtype, copy=False), w

    def preferred_init(self, ranks: Sequence[int]) -> str:
        """``"kr_sketch"``: each factor from a sketch of the sparse unfolding (:meth:`sketched_subspace`;
        ST-HOSVD's projections would grow the nonzeros)."""
        return "kr_sketch"

    def sketched_subspace(self, mode: int, rank: int, rng: np.random.Generator,
                          policy: ExecutionPolicy | None = None) -> np.ndarray:
        """An orthonormal basis of ``rank`` columns for the range of the unfolding ``X_(mode)``, from a sketch
        ``X_(mode) (G_{N-1} kr ... kr G_0)`` (modes other than ``mode``): a Khatri-Rao product of Gaussian
        matrices of ``rank + SKETCH_OVERSAMPLE`` columns as the randomized range finder's test matrix
        (Halko, Martinsson and Tropp 2011, with the structured test matrix of tensor sketching), so the
        sketch is one MTTKRP of the compiled CSF kernels, never a dense unfolding; then the leading left
        singular vectors of the ``I_mode x (rank + oversample)`` sketch. HOOI's default start on a sparse
        tensor; the draws come from ``rng``, so a seeded call repeats its bits."""
        from tuckerkit.engine._policy import blas_pinned

        k = rank + SKETCH_OVERSAMPLE
        G = [None if m == mode else rng.standard_normal((n, k)).astype(self.dtype) for m, n in enumerate(self.shape)]
        Y = np.asarray(self.checked_mttkrp(G, mode, policy=policy), dtype=np.float64)
        with blas_pinned():  # (LAPACK on one thread: the same bits whatever the machine's threads)
            Q, T = np.linalg.qr(Y)
            V, _, _ = np.linalg.svd(T)
            U = Q @ V[:, :rank]
        return sign_fix(np.ascontiguousarray(U)).astype(self.dtype, copy=False)


def _exact_left(A: Any, rank: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The ``rank`` leading left singular vectors and values of a sparse ``A`` whose smaller side is at most
    ``rank`` or small (:data:`DENSE_GRAM_MAX_ROWS`): from the dense Gram of that side in float64 (``A A^T`` for
    few rows; ``A^T A`` for few columns, then ``A V`` scaled, the columns past its rank filled by random ones that
    the caller's QR makes orthonormal)."""
    from tuckerkit.engine._policy import blas_pinned
    from tuckerkit.engine._subspace import eigh_desc

    A64 = A.astype(np.float64)
    n, m = A64.shape
    with blas_pinned():  # (LAPACK on one thread: the same bits whatever the machine's threads)
        if n <= m:
            w, V = eigh_desc((A64 @ A64.T).toarray(), n)
            V = V[:, :rank] if rank <= n else np.hstack([V, rng.standard_normal((n, rank - n))])
            w = np.concatenate([w, np.zeros(max(rank - n, 0))])[:rank]
        else:
            w, W = eigh_desc((A64.T @ A64).toarray(), m)
            keep = w > w[0] * m * np.finfo(np.float64).eps if w.size and w[0] > 0 else np.zeros(m, bool)
            keep[rank:] = False  # (the leading ``rank`` at most: a small mode's rank below its columns)
            U = np.asarray(A64 @ W[:, keep]) / np.sqrt(w[keep])[None, :]
            V = np.hstack([U, rng.standard_normal((n, rank - U.shape[1]))])
            w = np.concatenate([w[keep], np.zeros(rank - U.shape[1])])
    return V, np.sqrt(np.clip(w, 0.0, None))


#: a sparse unfolding whose smaller side is at most this long takes its leading subspace from the dense Gram of that
#: side (exact, and the same bits on every call); larger ones run ARPACK (:func:`leading_left`).
DENSE_GRAM_MAX_ROWS = 512


def _gram_products(B: Any, BT: Any, Q: np.ndarray) -> np.ndarray:
    """``B B^T Q``, one column at a time: no (longer side x columns) block (see :func:`leading_left`)."""
    Z = np.empty_like(Q)
    for j in range(Q.shape[1]):
        Z[:, j] = B @ (BT @ Q[:, j])
    return Z


def _top_subspace(B: Any, BT: Any, k: int, seed: int) -> np.ndarray:
    """An orthonormal basis (p x k) of the ``k`` leading eigenvectors of ``B B^T`` (p x p), the same bits on
    every call with the same ``seed``. ARPACK (``eigsh``) starts from a seeded vector, and where its Krylov space
    runs out (an operator of rank below its ``ncv`` Lanczos vectors, or with few distinct eigenvalues: a
    constant or repeated block) it restarts from a random vector: scipy 1.17 and later draw that vector from
    ``rng``, seeded here too (left to the operating system's entropy, two identical sparse ``hosvd`` calls gave
    factors up to 1.2 apart). Older scipy (Python 3.10's: 1.17 needs 3.11) draws it from ARPACK's own
    process-wide state, which no argument reaches: there a seeded block subspace iteration
    (:func:`_subspace_iteration`) runs first, and ARPACK as before (accurate, not repeatable on such operators)
    only where that does not converge within its steps."""
    import scipy.sparse.linalg

    p = B.shape[0]
    takes_rng = _eigsh_takes_rng()
    if not takes_rng:
        Q = _subspace_iteration(B, BT, k, seed)
        if Q is not None:
            return Q
    op = scipy.sparse.linalg.LinearOperator((p, p), matvec=lambda x: B @ (BT @ x), dtype=np.float64)
    v0 = np.random.default_rng(seed).standard_normal(p)
    kw: dict[str, Any] = {"rng": np.random.default_rng(seed + 1)} if takes_rng else {}
    _, Q = scipy.sparse.linalg.eigsh(op, k=k, which="LM", tol=0, v0=v0, **kw)
    return np.linalg.qr(Q)[0]


#: the most steps of :func:`_subspace_iteration` (each ``2 k + 10`` products with the Gram); past them ARPACK runs
SUBSPACE_ITER_MAX = 300


def _subspace_iteration(B: Any, BT: Any, k: int, seed: int) -> np.ndarray | None:
    """The ``k`` leading eigenvectors of ``B B^T`` by block subspace iteration (orthogonal iteration with
    Rayleigh-Ritz) from a seeded Gaussian block of ``2 k + 10`` columns: the Ritz vectors of the first step at
    which every one of the ``k`` Ritz pairs has a residual within rounding of the largest eigenvalue (``16
    sqrt(p) eps lambda_1``); None where none does within :data:`SUBSPACE_ITER_MAX` steps (eigenvalues that decay
    slowly past the ``k``-th: a noise-like unfolding). Deterministic, for a scipy whose ARPACK restarts from
    unseeded draws; it applies the Gram more often than ARPACK does (a power-law count tensor in about 20 steps,
    600 products against ARPACK's 300)."""
    p = B.shape[0]
    b = min(p, 2 * k + 10)
    Q = np.linalg.qr(np.random.default_rng(seed).standard_normal((p, b)))[0]
    tol = 16 * np.sqrt(p) * np.finfo(np.float64).eps
    for _ in range(SUBSPACE_ITER_MAX):
        Z = _gram_products(B, BT, Q)
        G = Q.T @ Z
        w, W = np.linalg.eigh((G + G.T) / 2)
        w, W = w[::-1][:k], W[:, ::-1][:, :k]
        residual = np.linalg.norm(Z @ W - (Q @ W) * w, axis=0).max()
        if w[0] <= 0 or residual <= tol * w[0]:
            return Q @ W  # (the Ritz vectors of this step's basis)
        Q = np.linalg.qr(Z)[0]
    return None


@functools.cache
def _eigsh_takes_rng() -> bool:
    import inspect

    import scipy.sparse.linalg

    return "rng" in inspect.signature(scipy.sparse.linalg.eigsh).parameters


def leading_left(A: Any, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` leading left singular vectors and singular values (descending) of a sparse ``A``, the same
    bits on every call with the same ``seed`` (:func:`_top_subspace`).

    ARPACK runs on the Gram of the smaller side, as ``scipy.sparse.linalg.svds`` does, and the k x k
    Rayleigh-Ritz problem is solved from the Gram's products one column at a time, instead of forming and
    factoring a (longer side x k) block as ``svds`` does: a 2M-nonzero unfolding with 734,236 columns took
    230 MB of peak memory that way, for a result of I_n x k. A wide matrix (the usual unfolding: I_n rows, up
    to nnz columns): ``A A^T`` (I_n x I_n). A tall one: ``A^T A``, and then ``A V`` scaled (``svds`` itself
    is not used: its eigensolver restarts from unseeded draws); columns past the unfolding's rank are left
    zero, for the caller's QR to fill."""
    linalg = scipy_linalg()

    n, m = A.shape
    AT = A.T
    tall = n > m
    p = m if tall else n
    B, BT = (AT, A) if tall else (A, AT)  # the Gram is B B^T (p x p)
    Q = _top_subspace(B, BT, k, seed)
    Z = _gram_products(B, BT, Q)
    G = Q.T @ Z
    w, W = linalg.eigh((G + G.T) / 2)
    order = np.argsort(w)[::-1]
    w, W = np.clip(w[order], 0.0, None), Q @ W[:, order]
    s = np.sqrt(w)
    if not tall:
        return W, s
    keep = w > w[0] * p * np.finfo(np.float64).eps if w[0] > 0 else np.zeros(k, bool)
    U = np.zeros((n, k))
    U[:, keep] = np.asarray(A @ W[:, keep]) / s[keep][None, :]
    s[~keep] = 0.0
    return U, s


def gpu_sparse_refusal(what: str) -> ValueError:
    return ValueError(f"sparse {what} runs on the CPU; pass device='cpu' (sparse CP-ALS runs on a GPU)")

