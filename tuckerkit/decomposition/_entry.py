"""What every decomposition does on entry and exit: the operand, the device, the execution policy.

``with decomposition_call(X, device=..., memory_limit=...) as call`` resolves ``X`` once (validated, finite,
real unless the method takes complex tensors; out of core when larger than ``memory_limit``; moved to
``device``), resolves the execution policy, holds BLAS to one thread and makes the device current for the body;
``call.result(model)`` gives the model back on the device the input came from (a host input computed on a GPU
returns numpy arrays).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuckerkit._validation import check_mode, describe
from tuckerkit.backend import Device, device_of, on_device, to_host
from tuckerkit.engine import ExecutionPolicy, as_operand, blas_pinned, default_policy

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: the root-mean-square magnitude a tensor may have before it is rescaled (a power of two, exact) so that
#: squares, Grams and norms neither overflow nor underflow: float32 squares span 2^-126..2^128, float64
#: 2^-1022..2^1024, and a Gram entry sums up to millions of squares
_RMS_RANGE = {np.dtype(np.float32): (2.0**-40, 2.0**40), np.dtype(np.float64): (2.0**-200, 2.0**200),
              np.dtype(np.complex64): (2.0**-40, 2.0**40), np.dtype(np.complex128): (2.0**-200, 2.0**200)}


#: a fit from norms, ``||X||^2 - ||X_hat||^2`` (Tucker: ``||G||^2``; ST-HOSVD: its discarded eigenvalues; CP: the
#: Grams and ``<X, X_hat>``), is the difference of numbers each rounded by about eps ``||X||^2`` (eps of X's
#: precision): the squared relative error is off by ``dd`` of 0.1-3 eps, the error itself by ``dd / (2 err)``.
#: Measured on 200^3 float32 Tucker tensors of rank 10 (HOSVD, ST-HOSVD, HOOI): at errors 0.01 / 0.005 / 0.002
#: / 0.001 the reported ones were up to 0.06 % / 0.14 % / 1.1 % / 18 % off; on a 60 x 70 x 80 one of ranks (5,
#: 6, 7) at noise 1e-4 / 1e-5 / none, HOSVD read 1.8e-4 / 2.2e-4 / 1.3e-4 for 1.0e-4 / 1.0e-5 / 1.3e-7, HOOI
#: 3.7e-4 / 2.5e-4 / 1.2e-4; CP-ALS (a rank-5 CP tensor) read 0 for 1.0e-5 and 1.2e-4 for 1.9e-5. In float64
#: the same at eps64: an exact 50 x 60 x 70 model of ranks (5, 6, 7) read 3.2e-8 by ST-HOSVD for 1.3e-15 (HOSVD
#: and HOOI 0, from a negative difference held at 0). Below an error of ``sqrt(RESIDUAL_FIT_EPS eps)``
#: (:func:`residual_fit_below`: 0.0049 in single precision, 2.1e-7 in double; there 3 eps is 0.6 % of the
#: error) the fit reported (HOSVD's and ST-HOSVD's value, the last of HOOI's, CP-ALS's and the non-negative
#: methods' histories) is the residual's, formed in double precision (:meth:`Call.residual_fit`): one more read
#: of X (on 200^3 float32 at rank 10 3-11 ms on Tucker calls of 24-90 ms and CP-ALS's of 99-170 ms; 0.01-0.13
#: ms at 10^3-50^3; exact float64 models of rank 10, interleaved medians: 200^3 10-14 ms on HOSVD, ST-HOSVD,
#: HOOI and CP-ALS calls of 65-340 ms, 50^3 0.3-1.3 ms on calls of 2-14 ms)
RESIDUAL_FIT_EPS = 200.0


def residual_fit_below(dtype: Any) -> float:
    """The error below which a fit from norms of data of ``dtype`` is replaced by the residual's
    (:meth:`Call.refines_fit`): ``sqrt(RESIDUAL_FIT_EPS eps)`` of its precision.

    >>> round(residual_fit_below(np.float32), 4), f"{residual_fit_below(np.complex128):.2g}"
    (0.0049, '2.1e-07')
    """
    return math.sqrt(RESIDUAL_FIT_EPS * float(np.finfo(np.dtype(dtype)).eps))
#: bytes (at double precision) of X converted per piece of :meth:`Call.residual_fit` where the compiled sum does
#: not apply: its extra memory is a few such pieces (the piece, the model's values on it, their difference)
RESIDUAL_PIECE_BYTES = 16 << 20
#: bytes of the model's rest (``r x C`` float64) per piece of the compiled sum: its only extra memory
RESIDUAL_REST_BYTES = 4 << 20
#: bytes of one column block of the rest that the compiled sum keeps in cache (its width: these over 8 r, within
#: 64-1024 columns)
RESIDUAL_BLOCK_BYTES = 128 << 10
#: multiply-adds of a piece of the compiled sum below which it runs on the calling thread (about 0.2 ms at the
#: kernel's 6-9 GFMA/s; waking a worker costs tens of microseconds: 50^3 at rank 3 took 0.23 ms more with the
#: workers, 0.1 ms more without)
RESIDUAL_PARALLEL_FMAS = 1 << 21


def double_residual(data: Any, model: Any, policy: ExecutionPolicy) -> tuple[float, float] | None:
    """``(||X - X_hat||^2, ||X||^2)`` in float64 by the compiled sum, for a real array on the host whose axes in
    memory order make it C-contiguous (None for any other): rows of its outermost mode against the rest, in
    pieces of rows of the next (:meth:`Call.residual_fit`, ``relative_error`` of a single-precision model);
    each piece's column blocks in groups over the policy's workers, every block's sums apart, all added exactly
    at the end (``math.fsum``). ``model``: a :class:`ResidualModel`."""
    from tuckerkit.decomposition._residual_kernels import residual_blocks
    from tuckerkit.engine._policy import parallel_for

    if not isinstance(data, np.ndarray) or data.dtype.kind != "f" or data.ndim < 2:
        return None
    perm = sorted(range(data.ndim), key=lambda k: (-abs(data.strides[k]), k))  # (memory order)
    Xp = data.transpose(perm)
    if not Xp.flags.c_contiguous:
        return None
    m, order = perm[0], perm[1:]
    A = np.ascontiguousarray(model.cut(m), dtype=np.float64)
    r = A.shape[1]
    inner = math.prod(Xp.shape[2:])
    width = max(64, min(1024, RESIDUAL_BLOCK_BYTES // (8 * r)))
    step = max(1, RESIDUAL_REST_BYTES // (8 * r * max(inner, 1)))
    res: list[float] = []
    sq: list[float] = []
    for lo in range(0, Xp.shape[1], step):
        hi = min(lo + step, Xp.shape[1])
        X2 = Xp[:, lo:hi].reshape(Xp.shape[0], (hi - lo) * inner)  # (a view: the rows' pieces are contiguous)
        with blas_pinned():  # (its GEMMs on one thread: the same bits for any BLAS thread count)
            Z = np.ascontiguousarray(model.rest(m, order, lo, hi), dtype=np.float64)
        out = np.empty((-(-X2.shape[1] // width), 2))
        group = max(1, -(-out.shape[0] // (4 * max(policy.workers, 1))))  # (blocks a task: ~4 tasks a worker)

        def blocks(t: int, tmp: Any, X2: Any = X2, Z: Any = Z, out: Any = out, group: int = group) -> None:
            residual_blocks(X2, A, Z, width, out, tmp, t * group, min((t + 1) * group, out.shape[0]))

        if X2.size * r < RESIDUAL_PARALLEL_FMAS:  # (a small piece: on this thread, no worker woken)
            residual_blocks(X2, A, Z, width, out, np.empty(width), 0, out.shape[0])
        else:
            parallel_for(blocks, -(-out.shape[0] // group), policy, lambda: np.empty(width))
        res.extend(out[:, 0].tolist())
        sq.extend(out[:, 1].tolist())
    return math.fsum(res), math.fsum(sq)


class ResidualModel:
    """A model as :meth:`Call.residual_fit` takes it: ``lead`` (a Tucker core, CP weights) and the factors, each
    converted once to a precision asked for (:meth:`_of`), mode ``m``'s factor in float64 (:meth:`cut`); the
    subclasses give ``rest(m, order, lo, hi)`` and ``values(idx, dtype)``."""

    def __init__(self, xp: Any, lead: Any, factors: Sequence[Any]) -> None:
        self.xp, self.lead, self.factors = xp, lead, list(factors)
        self.wide: dict[Any, tuple[Any, list[Any]]] = {}

    def _of(self, dtype: Any) -> tuple[Any, list[Any]]:
        if dtype not in self.wide:
            xp = self.xp
            self.wide[dtype] = (xp.asarray(self.lead, dtype=dtype), [xp.asarray(U, dtype=dtype) for U in self.factors])
        return self.wide[dtype]

    def cut(self, m: int) -> Any:
        return self._of(np.dtype(np.float64))[1][m]

    def at(self, coords: np.ndarray) -> np.ndarray:
        """The model's values (float64) at the points ``coords`` (``k x N`` indices; a sparse tensor's
        nonzeros)."""
        raise NotImplementedError

    def point_width(self) -> int:
        """Float64 elements :meth:`at` holds per point (its chunks are sized by it)."""
        raise NotImplementedError

    def norm_sq(self) -> float:
        """``||X_hat||^2`` in float64 from the factors' Grams (never the model formed)."""
        raise NotImplementedError


def sparse_residual_sq(X: Any, model: ResidualModel, shift: int = 0) -> float:
    """``||X - X_hat||^2`` of a sparse tensor on the host in float64: over the nonzeros, the model's values at
    them (:meth:`ResidualModel.at`, chunks of fixed size: the same bits every run), plus the model's norm off
    them (:meth:`ResidualModel.norm_sq` less their squares; nothing where the nonzeros are every entry, as a
    dense tensor's: the difference of two near-equal sums had left an error near ``sqrt(eps)``). ``shift``: the
    values taken times ``2 ** -shift`` (exact), for a model scaled alike, so that squares of extreme magnitudes
    neither overflow nor underflow."""
    from tuckerkit.sparse._csf import as_coo

    coo = as_coo(X)
    coords, values = coo.coords, coo.values
    step = max(256, RESIDUAL_PIECE_BYTES // (8 * max(1, model.point_width())))
    inside = on_model = 0.0
    for lo in range(0, coo.nnz, step):
        m = model.at(coords[lo:lo + step])
        v = np.asarray(values[lo:lo + step], dtype=np.float64)
        d = (np.ldexp(v, -shift) if shift else v) - m
        inside += float(d @ d)
        on_model += float(m @ m)
    if coo.nnz == math.prod(coo.shape):  # (coordinates are unique: every entry is a nonzero)
        return inside
    return inside + max(model.norm_sq() - on_model, 0.0)


@dataclass(frozen=True)
class Call:
    """One decomposition call: its operand, policy, the devices it computes on and returns to, the norm of
    the input and the power of two the operand was scaled by (1.0 unless its magnitude was extreme).
    ``grams``: Grams of ``X`` made on entry (``first_gram``), each handed out once by :meth:`gram` or
    :meth:`leading_subspace`."""

    X: Any
    policy: ExecutionPolicy
    home: Device
    device: Device
    norm: float = 0.0
    scale: float = 1.0
    grams: dict[int, Any] = field(default_factory=dict, repr=False)
    #: reads of X by :meth:`residual_fit` so far (each one pass over the tensor: counted in the passes reported),
    #: in a list: the call is frozen
    reads: list[int] = field(default_factory=lambda: [0], repr=False)

    @property
    def residual_reads(self) -> int:
        return self.reads[0]

    def gram(self, Y: Any, mode: int) -> Any:
        """``Y.gram(mode)``: the Gram made on entry when ``Y`` is the call's operand (handed out once), else
        computed."""
        G = self.grams.pop(mode, None) if Y is self.X else None
        return Y.gram(mode, policy=self.policy) if G is None else G

    def leading_subspace(self, Y: Any, mode: int, rank: int, rng: Any, start: Any = None,
                         rough: bool = False, backoff: Any = None) -> tuple[Any, Any]:
        """``Y.leading_subspace(mode, rank)``, from the Gram made on entry when ``Y`` is the call's dense
        operand (handed out once); a dense ``Y`` with ``start`` (an estimate of the result: HOOI's current
        factor) warm-starts :func:`~tuckerkit.engine._subspace.leading_left_singular`'s eigensolver, which
        ``backoff`` (the mode's :class:`~tuckerkit.engine._subspace.SubspaceBackoff`) skips after refusals.
        ``rough``: for a start that iterations refine (CP-ALS's SVD start, the steps of HOOI's ST-HOSVD start
        before its last), the Gram of a float64 numpy operand (the call's, or a projection of it) from float32
        products where the magnitudes allow (:func:`_rough_gram`)."""
        from tuckerkit.engine import DenseTensor
        from tuckerkit.engine._subspace import gram_route, leading_left_singular

        G = self.grams.pop(mode, None) if Y is self.X else None
        if G is None and rough and isinstance(Y, DenseTensor) and self.scale == 1.0 and \
                gram_route(Y.shape, mode, rank):  # (a long mode's I_n x I_n Gram was made even where P is small)
            got = _rough_gram(Y, mode, self.policy)
            if got is not None and math.isfinite(got[1]):
                G = got[0]
        if isinstance(Y, DenseTensor) and (G is not None or start is not None):
            return leading_left_singular(Y.data, mode, rank, self.policy, gram=G, start=start, backoff=backoff)
        return Y.leading_subspace(mode, rank, rng=rng, policy=self.policy)

    def unscale(self, A: Any) -> Any:
        """An array of the scaled problem (a core, CP weights) in the input's units. A ``ValueError`` where they
        overflow there: a finite X whose norm exceeds its dtype's largest value has a core (CP weights) that
        its dtype cannot hold."""
        if self.scale == 1.0:
            return A
        with np.errstate(over="ignore"):  # (refused below, in one line)
            out = A * A.dtype.type(1.0 / self.scale)
        xp = self.X.xp
        if self.scale > 1.0 and bool(xp.any(A != 0)):  # (a tiny X: its model may fall into subnormals there)
            info = np.finfo(A.dtype)
            top = float(xp.max(xp.abs(out)))
            if top < math.ldexp(float(info.tiny), -(info.nmant // 2)):  # (over half its bits gone: 1e-310 keeps 44)
                import warnings

                warnings.warn(f"X is so small that the model's largest core or weight entry ({top:.3g}) is subnormal "
                              f"in {np.dtype(A.dtype).name}: most of its digits are lost in X's units (expected X "
                              "multiplied by a power of two, e.g. X * 2**64, the model scaled back by it)",
                              RuntimeWarning, stacklevel=caller_stacklevel())
        if self.scale < 1.0:
            if not bool(xp.isfinite(out).all()) and bool(xp.isfinite(A).all()):
                big = float(np.finfo(A.dtype).max)
                raise ValueError(f"X has a Frobenius norm above the largest {np.dtype(A.dtype).name} ({big:.4g}), so "
                                 "the model's core or weights overflow in X's units; expected X divided by a power "
                                 "of two (e.g. X / 2**16), the model scaled back by it")
        return out

    def refines_fit(self, fit: float) -> bool:
        """Whether a fit from norms (or from discarded eigenvalues) is replaced by :meth:`residual_fit`'s: a
        dense tensor in memory, or a sparse one on the host, whose fit from norms says an error below
        :func:`residual_fit_below` of its precision."""
        from tuckerkit.engine import DenseTensor, SlabTensor

        X = self.X
        kind = (isinstance(X, DenseTensor | SlabTensor)
                or (getattr(X, "nnz", None) is not None and X.xp is np))
        return kind and self.norm > 0 and 1.0 - fit < residual_fit_below(X.dtype)

    def with_residual_fit(self, history: Sequence[float], model: Callable[[], Any]) -> tuple[float, ...]:
        """An iteration's fit history with its last entry replaced by :meth:`residual_fit` of ``model()`` (the
        final model, of the scaled problem) where :meth:`refines_fit` says so; the others as they are."""
        history = tuple(history)
        if history and self.refines_fit(history[-1]):
            return (*history[:-1], self.residual_fit(model()))
        return history

    def residual_fit(self, model: Any) -> float:
        """``1 - ||X - X_hat|| / ||X||`` of the call's dense operand, the residual formed in double precision.

        ``model`` (a :class:`ResidualModel` of the scaled problem: :class:`~tuckerkit.decomposition._tucker.
        TuckerResidual`, :class:`~tuckerkit.decomposition._cp.CPResidual`) gives ``cut(m)``, mode ``m``'s
        factor (``I_m x r``), ``rest(m, order, lo, hi)``, the rest of the model as ``r x C`` over the other modes
        in ``order`` (outermost first, the first one's rows ``lo:hi``), both float64, and ``values(idx,
        dtype)``, its values on ``X[idx]``. A real tensor on the host whose modes, in memory order, make it
        C-contiguous goes to the compiled sum (:func:`double_residual`: X read once, the model never formed;
        ``rest`` in pieces of about :data:`RESIDUAL_REST_BYTES`); any other (complex, a strided view, the GPU's)
        is summed by slab ranges of about :data:`RESIDUAL_PIECE_BYTES` (each converted, the model's values
        subtracted and squared). Every sum is added in a fixed order: the same bits for any
        number of threads."""
        from tuckerkit.engine._gram import slab_ranges

        if self.norm <= 0:
            return 1.0
        self.reads[0] += 1
        if getattr(self.X, "nnz", None) is not None:  # (a float32 planted tensor read 1.0000000 for 0.9999889)
            return 1.0 - math.sqrt(sparse_residual_sq(self.X, model)) / self.norm
        if getattr(self.X, "streamed", False) and hasattr(self.X, "slabs"):
            return 1.0 - math.sqrt(_streamed_residual_sq(self.X, model)) / self.norm
        data = self.X.data
        xp = self.X.xp
        got = double_residual(data, model, self.policy)
        if got is not None:
            return 1.0 - math.sqrt(got[0]) / self.norm
        wide = np.dtype(np.complex128 if np.dtype(data.dtype).kind == "c" else np.float64)
        res = 0.0
        for idx in slab_ranges(data, None, wide.itemsize, RESIDUAL_PIECE_BYTES):
            diff = xp.asarray(data[idx], dtype=wide) - model.values(idx, wide)
            sq = diff.real * diff.real
            if wide.kind == "c":
                sq += diff.imag * diff.imag
            res += float(xp.sum(sq))
        return 1.0 - math.sqrt(res) / self.norm

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


def _streamed_residual_sq(X: Any, model: Any) -> float:
    """``||X - X_hat||^2`` in float64 of a tensor read in slabs along mode 0 (:class:`~tuckerkit.engine.
    SlabTensor`: one more pass over the file), each slab in pieces of at most :data:`RESIDUAL_PIECE_BYTES` of
    float64 and a sixteenth of the slab's bytes (the model's values on a piece and the difference); summed in
    a fixed order. A float32 tensor streamed from disk read an error of 3.6e-4 from norms for a true 1.0e-5."""
    rest = max(1, math.prod(X.shape[1:]))
    # (a piece's float64 values at most a sixteenth of a slab's bytes too: the memory_limit sized the slabs, and
    # half a slab took a near-exact HOOI to 1.57x the limit)
    step = max(1, min(RESIDUAL_PIECE_BYTES // (8 * rest), X.slab_rows * np.dtype(X.dtype).itemsize // 128))
    res = 0.0
    # (slabs of half the rows: this pass runs beside what the iteration holds, two slabs in flight)
    for s, slab in X.slabs(rows=max(1, X.slab_rows // 2)):
        for a in range(0, slab.shape[0], step):
            b = min(a + step, slab.shape[0])
            idx = (slice(s + a, s + b), *(slice(None) for _ in X.shape[1:]))
            diff = np.asarray(slab[a:b], dtype=np.float64) - model.values(idx, np.dtype(np.float64))
            res += float(np.sum(diff * diff))
    return res


def _home(X: Any) -> Device:
    dev = getattr(X, "device", None)
    return dev if isinstance(dev, Device) else device_of(X)


def _check_complex_dense(X: Any, op: Any) -> None:
    """Complex tensors are decomposed in memory: a streamed, distributed or sparse kind is refused."""
    from tuckerkit.engine import DenseTensor

    dt = getattr(X, "dtype", None)
    if dt is not None and np.dtype(dt).kind == "c" and not isinstance(op, DenseTensor):
        raise TypeError(f"X has complex dtype {np.dtype(dt)} as a {type(op).__name__}; expected a numpy or cupy "
                        "array in memory for complex tensors (no memory_limit, Dask or sparse input)")


#: a tensor of at most this many elements takes no Gram on entry: its norm's pass costs a few microseconds, the
#: Gram's set-up some fifty (see :func:`decomposition_call`). Whole default calls, skipped / entry Gram (the AVX-512
#: machine, medians of 15 interleaved in one process): 10^3 cp_als 0.83x, hooi 0.80x, st_hosvd 0.75x, hosvd 0.85x;
#: 12^3 0.83-0.88x; 20^3 0.89-0.97x; from 30^3 and 10^4 0.94-1.08x (noise), so the bound stays below them
SMALL_NO_FIRST_GRAM = 1 << 13


@contextmanager
def decomposition_call(X: Any, *, device: Any = None, memory_limit: Any = None, min_ndim: int = 2,
                       complex_ok: bool = False, first_gram: Callable[[Any], int | None] | None = None,
                       rough_first_gram: bool | Callable[[Any, int], bool] = False) -> Iterator[Call]:
    """Resolve a decomposition's input and run its body under the call's policy and device (see module).

    ``complex_ok``: the method accepts complex64/complex128 dense arrays (HOSVD, ST-HOSVD, HOOI, CP-ALS);
    otherwise a complex input is refused in one line. ``first_gram(op)``: the mode whose Gram the body computes
    first from the whole tensor (or None); for a float64 array in memory that Gram is made here instead of the
    norm's pass, the norm taken from its trace (``||X||^2``; a NaN or Inf makes it non-finite as it makes the
    norm), and handed to the body by ``call.gram`` / ``call.leading_subspace``: one read of ``X`` fewer (not for a
    tensor of at most :data:`SMALL_NO_FIRST_GRAM` elements, whose read costs less than the Gram's set-up). When
    the trace is not finite, is zero or the magnitude calls for a rescale, the Gram is dropped and the norm's
    own pass decides as always. ``rough_first_gram``: that Gram only seeds a start which iterations refine
    (HOOI's ST-HOSVD start), so a numpy array's is made from float32 products
    (:func:`~tuckerkit.engine._gram.start_gram`), its trace still exact; the exact Gram where the magnitudes
    do not suit float32 (root-mean-square outside float32's safe range, or a non-finite product). The body
    must not take a fit from its eigenvalues."""
    from tuckerkit.decomposition._monitor import call_clock

    with call_clock():  # (IterationState.elapsed counts from here: the start included)
        yield from _decomposition_call(X, device, memory_limit, min_ndim, complex_ok, first_gram, rough_first_gram)


def _decomposition_call(X: Any, device: Any, memory_limit: Any, min_ndim: int, complex_ok: bool,
                        first_gram: Callable[[Any], int | None] | None,
                        rough_first_gram: bool | Callable[[Any, int], bool]) -> Iterator[Call]:
    from tuckerkit.engine import DenseTensor

    home = _home(X)
    op = as_operand(X, memory_limit=memory_limit, device=device, check_finite=False, real=not complex_ok,
                    min_ndim=min_ndim)
    if memory_limit is not None and getattr(op, "nnz", None) is not None:  # (it was ignored without a word)
        raise ValueError(f"memory_limit={memory_limit!r} streams dense tensors (arrays, memory maps, HDF5 "
                         f"datasets); X is a sparse {type(X).__name__}, decomposed in memory from its nonzeros")
    if memory_limit is not None and type(op).__name__ == "DaskTensor":  # (ignored without a word, too)
        raise ValueError(f"memory_limit={memory_limit!r} streams dense tensors held here (arrays, memory maps, "
                         "HDF5 datasets); X is a Dask array, whose chunks its scheduler's workers hold (size them "
                         "with its chunks)")
    if complex_ok:
        _check_complex_dense(X, op)
    elif np.dtype(op.dtype).kind == "c":  # (an operand made before, as_operand(Z) or open_tensor: passed through
        # unchecked; non_negative_cp ran on it, non_negative_tucker failed in numba's typing)
        raise TypeError(f"X has complex dtype {op.dtype}; expected a real tensor (float32 or float64)")
    # a dense array is checked for NaN and Inf by the norm's own pass (either makes the norm non-finite; only
    # then are they counted, for the message): one read of X instead of two (8 of 25 ms on a 200^3 tensor)
    dense = isinstance(op, DenseTensor)
    if not dense:
        op.check_finite()
        drop = getattr(op, "drop_stale_plan", None)
        if drop is not None:  # (a sparse tensor whose values changed since its CSF trees were built)
            drop()
    policy = default_policy()
    with ExitStack() as stack:
        stack.enter_context(blas_pinned())
        stack.enter_context(on_device(op.device))
        grams = {}
        mode = (first_gram(op) if dense and first_gram is not None and op.dtype == np.float64
                and op.size > SMALL_NO_FIRST_GRAM else None)
        if mode is not None:
            with np.errstate(over="ignore", invalid="ignore"):  # (an extreme magnitude: the norm's pass decides)
                rough = rough_first_gram(op, mode) if callable(rough_first_gram) else rough_first_gram
                G, tr = _first_gram(op, mode, policy, rough)
            if math.isfinite(tr) and tr > 0 and _scale_for(math.sqrt(tr), op.size, op.dtype) == 1.0:
                grams[mode] = G
                op._finite = True  # (a NaN or Inf would have made the trace non-finite)
                yield Call(op, policy, home, op.device, math.sqrt(tr), 1.0, grams)
                return
            del G
        norm = op.norm()
        if dense:
            if not math.isfinite(norm):
                op.check_finite()  # raises, naming the count (a finite tensor whose norm overflows passes)
            op._finite = True
        scale = _scale_for(norm, op.size, op.dtype, lambda: _max_magnitude(op))
        if scale != 1.0:  # an extreme magnitude: compute on X * 2^k (exact), give the model back in X's units
            op = op.scaled(scale)
            # (a finite tensor whose norm overflowed, or is subnormal and so rounded: 7e-11 relative at 1e-315, a
            # reported error of 1.2e-5 for 7.8e-9: the scaled one's own, one more pass of an extreme tensor)
            norm = norm * scale if math.isfinite(norm) and norm >= np.finfo(np.float64).tiny else op.norm()
        yield Call(op, policy, home, op.device, norm, scale)


def _first_gram(op: Any, mode: int, policy: ExecutionPolicy, rough: bool) -> tuple[Any, float]:
    """The Gram ``decomposition_call`` makes on entry and its trace (``||X||^2``); ``rough``: from float32
    products where the magnitudes allow (see :func:`decomposition_call`)."""
    if rough:
        got = _rough_gram(op, mode, policy)
        if got is not None:
            return got
    G = op.gram(mode, policy=policy)
    return G, float(to_host(op.xp.trace(G)))


def _rough_gram(op: Any, mode: int, policy: ExecutionPolicy) -> tuple[Any, float] | None:
    """Mode ``mode``'s Gram of a float64 numpy operand from float32 products
    (:func:`~tuckerkit.engine._gram.start_gram`) and its exact trace; a non-finite trace is returned as it is
    (the caller's norm pass decides); None where it does not apply, or where the magnitudes do not suit float32
    (root-mean-square outside float32's safe range, or a non-finite product)."""
    if op.xp is not np or getattr(op, "dtype", None) != np.float64 or not hasattr(op, "data"):
        return None
    from tuckerkit.engine._gram import start_gram

    got = start_gram(op.data, mode, policy)
    if got is None:
        return None
    G, ssq = got
    tr = float(ssq.sum())
    if not (math.isfinite(tr) and tr > 0):
        return G, tr  # (a NaN or Inf: dropped by the caller, the norm's pass decides)
    lo, hi = _RMS_RANGE[np.dtype(np.float32)]
    if lo <= math.sqrt(tr / op.size) <= hi and bool(np.isfinite(G).all()):
        return G, tr
    return None


#: the largest exponent ``e`` of a rescale ``2^e`` (and of its inverse, which scales the model back): both stay
#: normal numbers of the dtype (float32: 2^-126..2^127, float64: 2^-1022..2^1023)
_SCALE_EXP = {"f": 126, "d": 1022}


def _scale_for(norm: float, size: int, dtype: Any, amax: Callable[[], float | None] | None = None) -> float:
    """The power of two that brings the tensor's magnitude near 1 when its root-mean-square magnitude lies
    outside the safe range of its dtype (or its norm overflowed: a finite tensor near the dtype's largest
    value), else 1.0 (decompositions are scale-equivariant: their fits and ranks do not change, their cores and
    weights scale back).

    The power is taken from the largest magnitude, ``amax()`` (one more pass over X, made only for such
    extreme tensors; None where the operand has no cheap one: then from the root-mean-square), by its binary
    exponent (``math.frexp``: no square, so subnormal and near-overflow tensors alike), and kept within
    ``2^-e .. 2^e`` (``_SCALE_EXP``) so that it and its inverse are normal numbers of the dtype, never inf or 0:
    a subnormal float64 tensor (amax >= 2^-1074) is brought to amax >= 2^-52."""
    if not norm > 0 or math.isnan(norm):
        return 1.0
    lo, hi = _RMS_RANGE.get(np.dtype(dtype), (2.0**-40, 2.0**40))
    rms = norm / math.sqrt(max(size, 1))
    if math.isfinite(norm) and lo <= rms <= hi:
        return 1.0
    ref = amax() if amax is not None else None
    if ref is None or not (0 < ref < math.inf):
        # (no amax: the norm overflowed, so max |x| >= 2^1024 / sqrt(size): take the largest float; or the
        # root-mean-square underflowed: take the smallest)
        ref = rms if 0 < rms < math.inf else (float(np.finfo(np.float64).max) if math.isinf(rms) else 5e-324)
    limit = _SCALE_EXP["f" if np.dtype(dtype).char in "fF" else "d"]
    return math.ldexp(1.0, max(-limit, min(limit, -math.frexp(ref)[1])))


def _max_magnitude(op: Any) -> float | None:
    """``max |x|`` of a dense tensor in memory or of a sparse tensor's stored values (float, on the host);
    None for the streamed kinds (a rescale then goes by the root-mean-square)."""
    from tuckerkit.engine import DenseTensor

    data = op.data if isinstance(op, DenseTensor) else getattr(op, "values", None)
    if data is None or not hasattr(data, "shape"):
        return None
    if data.size == 0:
        return 0.0
    xp = op.xp
    return float(to_host(xp.max(xp.abs(data))))


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


def carries_partials(X: Any) -> bool:
    """Whether CP-ALS and HOOI hand ``X``'s sweeps a :class:`~tuckerkit.engine._sweeps.CarriedPartial`: a dense
    tensor in memory (its sweeps decide whether they use it)."""
    from tuckerkit.engine import DenseTensor

    return isinstance(X, DenseTensor) and isinstance(X.data, np.ndarray)


def mean_passes(passes: int, iterations: int) -> int | float:
    """Full reads of X per iteration over the call: an int where every sweep made as many (2 for the dimension
    tree), else the mean to two decimals (the multi-sweep tree's 2 and 1: 1.5).

    >>> mean_passes(20, 10), mean_passes(15, 10), mean_passes(0, 0)
    (2, 1.5, 0)
    """
    if iterations <= 0:
        return 0
    mean = passes / iterations
    return int(mean) if mean.is_integer() else round(mean, 2)


def check_fixed_modes(fixed_modes: Any, ndim: int, name: str = "fixed_modes") -> frozenset[int]:
    """Distinct mode indices (``fixed_modes`` of CP-ALS, ``fixed_factors`` of HOOI); None or () for none."""
    if fixed_modes is None:
        return frozenset()
    if isinstance(fixed_modes, numbers.Integral | np.integer) and not isinstance(fixed_modes, bool):
        fixed_modes = [fixed_modes]
    if isinstance(fixed_modes, str) or not isinstance(fixed_modes, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a sequence of mode indices; received {describe(fixed_modes)}")
    modes = [check_mode(m, ndim, f"{name}[{i}]") for i, m in enumerate(fixed_modes)]
    if len(set(modes)) != len(modes):
        raise ValueError(f"{name}={describe(list(fixed_modes))} repeats a mode; expected distinct modes")
    return frozenset(modes)


#: the magnitudes a given start's factor may have before :func:`scaled_start` rescales it (2^-64 to 2^64: the
#: Grams of a few such factors, multiplied together, stay far inside float64's range)
START_MAGNITUDE = 2.0**64


#: the same bound for single precision: the Hadamard product of a 4-way tensor's Grams of 1e10-sized factors
#: overflowed float32 (LAPACK's SLASCL error), 1e-12-sized ones underflowed to a fit of 0.0 reported as converged
START_MAGNITUDE_SINGLE = 2.0**8


def scaled_start(factors: list[Any], keep: Any = (), single: float = START_MAGNITUDE_SINGLE) -> list[Any]:
    """A given start's factors (but those of the modes in ``keep``: fixed factors come back as given), each whose
    largest magnitude lies outside ``[1 / M, M]`` (``M``: :data:`START_MAGNITUDE`, :data:`START_MAGNITUDE_SINGLE`
    in single precision) divided by the power of two at or above it (exact). The iterations are invariant to a
    free factor's scale (each update recomputes it, or keeps only its subspace), but its Grams and projections
    were not: factors of 1e100 overflowed (LAPACK errors, a core-dimension error), factors of 1e-100 underflowed
    to a fit of 0.0 reported as converged. Factors within that range are left as they are, bit for bit (and a
    power of two scales every product exactly: the same bits either way, where nothing over- or underflows, for the
    updates that recompute a factor whole; ``single``: the bound in single precision, wider for the non-negative
    updates, whose steps start from the factor's own values)."""
    out = list(factors)
    for n, U in enumerate(out):
        if n in keep or U.size == 0:
            continue
        real = U.real.dtype if U.dtype.kind == "c" else U.dtype
        bound = single if np.dtype(real).itemsize <= 4 else START_MAGNITUDE
        m = float(abs(U).max())
        if m == 0 or not math.isfinite(m) or 1 / bound <= m <= bound:
            continue
        out[n] = U * np.dtype(real).type(math.ldexp(1.0, -math.frexp(m)[1]))
    return out
