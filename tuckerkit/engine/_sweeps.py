"""The dimension-tree sweeps of HOOI (projections) and CP-ALS (MTTKRPs), shared by dense, slab and Dask tensors.

A sweep visits the modes in order (Gauss-Seidel: each update sees the factors updated before it). The modes
are halved: the tensor contracted with the second half's factors serves the first half's updates, then the
tensor contracted with the (updated) first half's factors serves the second half's; recursively. The full
tensor is read twice per sweep for any order. Out-of-core and Dask tensors run the two top-level contractions
as streamed or distributed passes and hand the (small) partial results to the same trees.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import GeneratorType
from typing import Any

import numpy as np

from tuckerkit._validation import check_factor_list
from tuckerkit.backend import array_namespace
from tuckerkit.engine import _workspace
from tuckerkit.engine._contract import _elem_strides, _prewake, contract, execute, plan_contraction
from tuckerkit.engine._direct import (
    device_direct_applies,
    direct_applies,
    direct_mttkrp_sweep,
    direct_ttmc_sweep,
    record,
)
from tuckerkit.engine._mttkrp import _khatri_rao, _merged_view, rank_outer, rank_outer_layout
from tuckerkit.engine._plan import CompiledKernel
from tuckerkit.engine._policy import ExecutionPolicy
from tuckerkit.engine._ttm import CHEAPER, build_multi_ttm_plan, dense_multi_ttm

_LETTERS = "abcdefghijklmnopqrstuvwxyABCDEFGHIJKLMNOPQRSTUVWXY"
_RANK = "Z"

Update = Callable[[int, Any], None]

@dataclass(frozen=True)
class Sweep:
    """What one sweep ran: the plans (for inspection) and how many times it read the full tensor.

    Attributes
    ----------
    plans : tuple
        The engine plans (or a sparse tensor's CSF plan) of the sweep.
    passes : int
        Full reads of the tensor per sweep (2 for a dense dimension tree, N for one kernel per mode).

    Examples
    --------
    >>> from tuckerkit.engine import Sweep
    >>> Sweep((), 2).passes
    2
    """

    plans: tuple[Any, ...]
    passes: int


def tree_spine(ndim: int, first_alone: bool = False) -> list[frozenset[int]]:
    """The partial projections a sweep makes before its first update, each named by the modes it leaves
    unprojected: the first half of the modes, the first half of that, ..., mode 0 alone. Every one of them is
    the tensor projected on the factors a sweep starts from, so a start that made them (ST-HOSVD in an order
    that projects the second halves first) can hand them to the first sweep (``partials``).
    ``first_alone``: the sweep of a 3-way tensor that splits its modes [0] | [1, 2] (:func:`splits_first_alone`),
    whose first partial is mode 0's.

    Examples
    --------
    >>> from tuckerkit.engine._sweeps import tree_spine
    >>> [sorted(s) for s in tree_spine(5)]
    [[0, 1, 2], [0, 1], [0]]
    >>> [sorted(s) for s in tree_spine(3, first_alone=True)]
    [[0]]
    """
    active, spine = list(range(ndim)), []
    while len(active) > 1:
        active = active[:1] if first_alone and len(active) == 3 == ndim else active[:(len(active) + 1) // 2]
        spine.append(frozenset(active))
    return spine


def splits_first_alone(T: Any) -> bool:
    """Whether HOOI's dimension tree splits the modes of ``T`` (the whole tensor) [0] | [1, 2] rather than
    [0, 1] | [2]: a 3-way numpy array whose last mode has the unit stride (C order). Then no pass contracts
    the unit-stride mode alone (``X x_2 U_2``, the slowest of the three single-mode TTMs of a C-ordered
    tensor: 200^3, rank 10, float64, 3.7 ms against 2.3 and 2.9 for the middle and first modes) but the
    middle mode first (the pair's multi-TTM plan chooses it) and the first mode alone: the same flops and
    partial sizes, the same update order. HOOI per iteration, in-process A/B (7 interleaved pairs, 6
    iterations each, HOSVD start), ranks 10 / 32: 200^3 float64 0.87 / 0.98x, float32 0.85 / 0.92x;
    320x240x160 float64 0.82 / 0.91x, float32 0.82 / 0.89x. A default call whose start is converged (one
    iteration, which reads X once either way) is unchanged: 0.98-1.03x over 21 pairs. An F-ordered tensor's
    halves [0, 1] | [2] already leave its outermost mode alone. (cupy: cuBLAS's layouts not measured.)"""
    if not isinstance(T, np.ndarray) or T.ndim != 3:
        return False
    st = [abs(s) for s in _elem_strides(T)]
    if st[0] < st[1] and st[0] < st[2]:  # F order: [0, 1] | [2], unless mirror-skewed (skewed_last)
        return skewed_last(T.shape[::-1])
    return st[2] < st[1] and st[2] < st[0] and not skewed_last(T.shape)


def skewed_last(shape: tuple[int, ...]) -> bool:
    """Whether a 3-way tensor's halves [0, 1] | [2] leave partials more than ``SKEW`` times smaller than
    [0] | [1, 2] (:func:`_partial_elems`): a last mode longer than the first, as (10, 10, 100000),
    (10, 1000, 1000), (20, 500, 500) or (30, 3000, 100). There the C-ordered tensor's HOOI sweeps take the
    halves [0, 1] | [2] after all: [0] | [1, 2] projects mode 0 alone into a partial of a large share of the
    tensor. Per iteration, in-process A/B on the AVX-512 machine (medians of 7, float64), HOOI at rank 5:
    (10, 1000, 1000) 0.46x the time, (20, 500, 500) 0.76x, (10, 10, 100000) 0.92x. Cubes and a long first
    mode keep [0] | [1, 2] (HOOI on (100000, 10, 10) 1.12x and 200^3 1.11x the time with the halves).

    ``SKEW`` was 4 until stop 71; at 1.5 the shapes between take the halves too (8 iterations, medians of 5
    interleaved pairs, ranks 5 / 10 / 20): (30, 3000, 100) (partials 1.68x smaller) 0.93 / 0.92 / 0.79x the
    time, (40, 1000, 200) (2.59x) 0.93 / 0.94 / 0.90x, (100, 200, 300) (2.23x) 0.84 / 0.92 / 0.96x, (100, 300,
    300) (1.99x) 1.00 / 1.01 / 0.94x, (80, 400, 250) (1.87x) 0.98 / 1.02 / 0.95x; those of larger ratios, as
    before, (60, 300, 600), (50, 500, 500), (100, 100, 1000), (20, 500, 500) 0.79-0.99x; below it 200^3
    (1.0x) 1.02-1.08x and 320x240x160 (0.78x) 1.08-1.12x with the halves. CP-ALS adds a condition on its rank
    (:func:`cp_skewed_last`). The mirror image holds for an F-ordered tensor (``skewed_last(shape[::-1])``: a
    first mode much longer than the last takes [0] | [1, 2] instead of its [0, 1] | [2])."""
    return len(shape) == 3 and _partial_elems(tuple(shape), [[1, 2], [0]]) > SKEW * _partial_elems(
        tuple(shape), [[2], [0, 1]])


def cp_skewed_last(shape: tuple[int, ...], R: int) -> bool:
    """Whether CP-ALS's sweep of a C-ordered 3-way tensor takes the halves [0, 1] | [2] (mode 2 alone, then
    modes 0 and 1 with their Khatri-Rao product) rather than [0] | [1, 2]: where those partials are more than
    ``SKEW`` times smaller (:func:`skewed_last`) and the rank is at least ``CP_SKEW_RANK``
    times the first mode's extent. [0] | [1, 2]'s pass over mode 0 alone writes a partial of ``R / I_0``
    times the tensor and reads it back twice (its GEMVs), which costs more than the other split's less
    efficient Khatri-Rao pass only where ``R / I_0`` is large; below that its compiled passes win even on
    skewed shapes. Per iteration, in-process A/B on the AVX-512 machine (float64, 6 iterations, medians of 5
    interleaved pairs; [0, 1] | [2] against [0] | [1, 2]):

    * taken (``R / I_0`` >= 0.4): (30, 3000, 100) R = 20 / 32 / 50 0.76 / 0.87 / 0.87x the time, (50, 500,
      500) R = 32 / 50 0.79 / 0.81x, (60, 300, 600) R = 32 / 50 0.79 / 0.85x, (100, 100, 1000) R = 50 0.92x,
      (100, 300, 300) R = 50 0.89x, (50, 50, 20000) R = 20 / 30 0.68 / 0.69x, (20, 500, 500) R = 8 / 10 0.86 /
      0.89x, (10, 10, 100000) R = 4 / 10 0.74 / 0.52x; ties at the edge: (30, 3000, 100) R = 12 / 16 1.08 /
      1.00x, (100, 300, 300) R = 40 1.02x;
    * left ([0] | [1, 2], where the former rule, the partials alone more than 4 times smaller, took the other
      split): (60, 300, 600) R = 10 1.27x, (100, 100, 1000) R = 10 / 32 1.09 / 1.11x, (50, 50, 20000) R = 10
      1.05x, (50, 500, 500) R = 10 0.99x; given up: (10, 10, 100000) R = 3 0.88x, (20, 500, 500) R = 5 0.95x;
    * cubes and shapes whose partials are not smaller keep [0] | [1, 2] at any rank: 200^3 R = 10 / 32 / 50
      1.05 / 1.20 / 1.13x, 320x240x160 1.22-1.32x, (100, 1000, 100) 1.15-1.19x, (500, 500, 50) 1.43-1.91x,
      (1000, 100, 100) 1.04-1.20x.

    >>> cp_skewed_last((30, 3000, 100), 50), cp_skewed_last((30, 3000, 100), 10), cp_skewed_last((200,) * 3, 200)
    (True, False, False)
    """
    return len(shape) == 3 and R >= CP_SKEW_RANK * shape[0] and skewed_last(shape)


def take_partial(partials: dict[frozenset[int], Any] | None, unprojected: list[int]) -> Any:
    """The partial projection leaving ``unprojected`` from ``partials`` (removed from it: each serves one
    sweep's first updates only), or None."""
    return partials.pop(frozenset(unprojected), None) if partials else None


def _layout_key(*arrays: Any) -> tuple:
    """What a plan made for these arrays depends on besides its spec and policy: their array type, and each
    one's shape, byte strides and dtype (the key of the sweeps' plan caches)."""
    return (type(arrays[0]).__module__, *((a.shape, a.strides, a.dtype.str) for a in arrays))


def ttmc_tree(T: Any, active: list[int], factors: list[Any], update: Update, plans: list,
              policy: ExecutionPolicy, partials: dict[frozenset[int], Any] | None = None,
              cache: dict[Any, Any] | None = None) -> None:
    """HOOI's projections of ``T`` (holding the modes ``active`` unprojected) by halving the active modes;
    a projection found in ``partials`` (keyed by the modes it leaves unprojected) is taken, not computed.
    ``cache``: multi-TTM plans by :func:`_layout_key`, reused across the sweeps of one call (a plan is a
    function of that key only)."""
    # a module-level recursion, not a closure: a self-referencing closure is a reference cycle that kept
    # each sweep's projections alive until the cyclic garbage collector ran (HOOI's peak memory grew with
    # the iteration count: 2.3x the input after 200 iterations on 50^3, against 0.34x)
    if len(active) == 1:
        update(active[0], T)
        return
    half = _ttmc_half(T, active)
    first, second = active[:half], active[half:]
    for part, rest in ((first, second), (second, first)):
        if all(factors[m] is None for m in part):  # (no update below: modes left out of the sweep)
            continue
        Y = take_partial(partials, part)
        if Y is None:
            mats = {m: factors[m] for m in rest if factors[m] is not None}
            Y = _project(T, mats, plans, policy, cache) if mats else T
        ttmc_tree(Y, part, factors, update, plans, policy, partials, cache)
        del Y


def _ttmc_half(T: Any, active: list[int]) -> int:
    """How many of the ``active`` modes of ``T`` HOOI's tree puts in its first half."""
    return 1 if len(active) == 3 and splits_first_alone(T) else (len(active) + 1) // 2


def dense_ttmc_sweep(X: Any, factors: list[Any], update: Update, policy: ExecutionPolicy,
                     partials: dict[frozenset[int], Any] | None = None,
                     cache: dict[Any, Any] | None = None, carry: CarriedPartial | None = None) -> Sweep:
    rank = max((int(U.shape[1]) for U in factors if U is not None), default=1)
    if direct_applies(X, rank, projections=True):  # a small tensor: numpy directly, the same tree (_direct.py)
        direct_ttmc_sweep(X, factors, update, lambda part: take_partial(partials, part), _ttmc_half)
        return Sweep((record("ttmc", X, rank),), min(X.ndim, 2))
    plans: list[Any] = []
    ws = _sweep_workspace(X, cache)
    multi = (carry is not None and not partials and all(U is not None for U in factors)
             and multi_sweep_applies(X, [int(U.shape[1]) for U in factors], MULTI_SWEEP_HOOI_MAX_ORDER))
    if carry is not None and not multi:
        carry.drop()
    with _workspace.using(ws):
        if multi and carry is not None:
            passes = _multi_ttmc_sweep(X, factors, update, plans, policy, cache, carry)
        else:
            ttmc_tree(X, list(range(X.ndim)), factors, update, plans, policy, partials, cache)
            passes = min(X.ndim, 2)
    if ws is not None:
        ws.trim()
    return Sweep(tuple(plans), passes)


def _project(T: Any, mats: dict[int, Any], plans: list, policy: ExecutionPolicy,
             cache: dict[Any, Any] | None) -> Any:
    """``T`` projected on ``mats`` (``T x_m U_m^T``, a HOOI sweep's multi-TTM), the plan kept in the sweep's
    ``cache`` (a plan is a function of the key: the modes, the policy and the arrays' layouts), appended to
    ``plans``; the workspace trimmed after it (its intermediates are idle now: at most one kept)."""
    key = (policy, tuple(mats), _layout_key(T, *mats.values())) if cache is not None else None
    p = cache.get(key) if cache is not None else None
    if p is None:
        p = build_multi_ttm_plan(T, mats, True, policy)
        if cache is not None:
            cache[key] = p
    plans.append(p)
    # (a plan from the cache or made just now: one made for these arrays' layouts (the key), so unchecked)
    Y = dense_multi_ttm(T, mats, True, p, policy, checked=True)
    ws = _workspace.active()
    if ws is not None:
        ws.trim()
    return Y


class _Cycle:
    """What the generator of :func:`_cyclic_projections` reads at each step: the sweep's factors (read when a
    projection is made: Gauss-Seidel), plans list, policy and plan cache, and the passes over ``X`` it made."""

    __slots__ = ("cache", "factors", "passes", "plans", "policy")

    def __init__(self, policy: ExecutionPolicy, cache: dict[Any, Any] | None) -> None:
        self.policy, self.cache = policy, cache
        self.factors: list[Any] = []
        self.plans: list[Any] = []
        self.passes = 0


def _cyclic_projections(X: Any, c: _Cycle) -> Any:
    """HOOI's projections in the cyclic update order 0, 1, ..., N - 1, 0, 1, ... (a generator of ``(n, Y_n)``;
    the caller updates mode ``n`` before the next one): each pass ``X x_j U_j`` serves the N - 1 modes that follow
    ``j``, through a dimension tree on that partial, across the ends of sweeps (the multi-sweep tree)."""
    N = X.ndim
    n = 0
    while True:
        j = (n - 1) % N
        T = _project(X, {j: c.factors[j]}, c.plans, c.policy, c.cache)
        c.passes += 1
        yield from _tree_steps(T, [(n + k) % N for k in range(N - 1)], c)
        del T
        n = (n + N - 1) % N


def _tree_steps(T: Any, active: list[int], c: _Cycle) -> Any:
    """:func:`ttmc_tree` on a partial as a generator of ``(n, Y_n)`` (the caller updates between steps)."""
    if len(active) == 1:
        yield active[0], T
        return
    half = (len(active) + 1) // 2
    first, second = active[:half], active[half:]
    for part, rest in ((first, second), (second, first)):
        Y = _project(T, {m: c.factors[m] for m in rest}, c.plans, c.policy, c.cache)
        yield from _tree_steps(Y, part, c)
        del Y


def _multi_ttmc_sweep(X: Any, factors: list[Any], update: Update, plans: list, policy: ExecutionPolicy,
                      cache: dict[Any, Any] | None, carry: CarriedPartial) -> int:
    """One HOOI sweep (modes 0 to N - 1) of the multi-sweep tree: the cyclic generator
    (:func:`_cyclic_projections`) kept in ``carry`` between sweeps, resumed where every factor is as it left
    them (else a new one). Each projection is the standard tree's, from the same factors. Returns the passes
    over ``X`` the sweep made: N / (N - 1) on average (3-way: 2 and 1 in turn; 4-way: 2, 1, 1)."""
    kept = carry.take(X, factors)
    if kept is None:
        c = _Cycle(policy, cache)
        gen = _cyclic_projections(X, c)
    else:
        gen, c = kept
    c.factors, c.plans, c.passes = factors, plans, 0
    for _ in range(X.ndim):
        n, Y = next(gen)
        update(n, Y)
        del Y
    carry.keep(X, (gen, c), factors)
    return c.passes


def _sweep_workspace(X: Any, cache: dict[Any, Any] | None) -> _workspace.Workspace | None:
    """The call's :class:`~tuckerkit.engine._workspace.Workspace` for a host array's sweeps, kept in its plan
    cache (one decomposition call); None without a cache or for a device array."""
    if cache is None or not isinstance(X, np.ndarray) or not _workspace.supported():
        return None
    ws = cache.get("workspace")
    if ws is None:
        ws = cache["workspace"] = _workspace.Workspace()
    return ws


class MttkrpTree:
    """The dimension tree of one ALS sweep: :meth:`contract_modes` removes modes from a tensor (when the rank
    index is not there yet, with the Khatri-Rao product of their factors, or with the outermost mode's factor
    alone when the partial that leaves is small; then one batched GEMV per mode), :meth:`rec` splits the
    active modes in halves and recurses."""

    def __init__(self, xp, shape, factors, update, plans, policy: ExecutionPolicy,
                 cache: dict[Any, Any] | None = None):
        self.xp, self.shape, self.factors, self.update, self.plans = xp, tuple(shape), factors, update, plans
        self.policy = policy
        self.R = next(int(U.shape[1]) for U in factors if U is not None)
        self.cache = cache
        self.tape: _Recorder | None = None  # (recording this sweep's steps: :func:`_multi_sweep`)

    def _run(self, spec: str, A: Any, B: Any, out: Any) -> Any:
        """``einsum(spec, A, B)`` into ``out``, its plan appended to the sweep's. With a cache (a dense
        operand's, kept for one decomposition call) the plan is built once, keyed by what it depends on, and
        run without :func:`contract`'s checks: the arrays are the sweep's own, aligned, of one dtype (else the
        checked path); a cupy operand's sweep runs under its GPU (:meth:`DenseTensor.mttkrp_sweep`). CP-ALS on
        20^3, R = 10 (fixed costs only): 1.16 -> 0.75 ms per iteration."""
        p, cached = self._plan(spec, A, B, out)
        self.plans.append(p)
        if not cached:
            return contract(spec, A, B, out=out, plan=p)
        return execute(p, A, B, out, self.xp)  # (cupy: the operand made its GPU current for the sweep)

    def _plan(self, spec: str, A: Any, B: Any, out: Any) -> tuple[Any, bool]:
        """The plan of ``einsum(spec, A, B)`` into ``out``, from the cache where it can be kept there (see
        :meth:`_run`), and whether it was."""
        cache = self.cache
        key = None
        if cache is not None and A.dtype == B.dtype == out.dtype:
            item = A.dtype.itemsize
            if not any(st % item for st in (*A.strides, *B.strides, *out.strides)):
                key = (spec, self.policy, _layout_key(A, B, out))
        p = cache.get(key) if key is not None else None  # type: ignore[union-attr]
        if p is None:
            p = plan_contraction(spec, A, B, out=out, policy=self.policy)
            if key is not None:
                cache[key] = p  # type: ignore[index]
        return p, key is not None

    def _fused(self, spec: str, T: Any, t_modes: list[int], first: int, last: int, out: Any) -> Any:
        """A 3-way tensor's MTTKRP for its one remaining mode in one pass, where the planner gives the product
        with ``first``'s factor to the compiled inner kernel and ``last`` is the unit-stride mode: each tile of
        that product summed against ``last``'s factor in cache (:func:`~tuckerkit.engine._smallgemm.ttm_inner_dot`)
        instead of the rank-outer partial written out and read back by a batched matrix-vector product. None
        where it does not apply (the caller runs the two steps). CP-ALS on 200^3 (the product and the
        matrix-vector product alone, two workers, medians of 15 interleaved): float64 R = 10 / 32 / 50 0.72 /
        0.87 / 0.85x the time, float32 0.82 / 0.94 / 0.82x."""
        if self.xp is not np or not FUSE_LAST_GEMV or T.ndim != 3 or not T.flags.aligned:
            return None
        keep = [m for m in t_modes if m not in (first, last)]
        X3 = T.transpose(t_modes.index(keep[0]), t_modes.index(first), t_modes.index(last))
        if X3.strides[2] != X3.itemsize or any(st < 0 or st % X3.itemsize for st in X3.strides):
            return None
        U, W = self.factors[first], self.factors[last]
        if U.dtype != T.dtype or W.dtype != T.dtype:
            return None
        p, _ = self._plan(spec, T, U, out)
        if getattr(p, "compiled", None) != CompiledKernel.TTM_INNER:
            return None
        from tuckerkit.engine._smallgemm import ttm_inner_dot_kept  # (numba: not on import tuckerkit)

        M = ttm_inner_dot_kept(X3, U, W, self.policy, self.cache)
        if M is not None:
            self.plans.append(p)
        return M

    def contract_modes(self, T, t_modes: list[int], gone: list[int], has_r: bool):
        if len(gone) == 1 and self.xp is np and self.cache is not None and REPLAY_STEPS:
            return self._one_mode(T, t_modes, gone[0], has_r)
        xp, factors, R, shape = self.xp, self.factors, self.R, self.shape
        rest = [m for m in t_modes if m not in gone]
        x = "".join(_LETTERS[m] for m in t_modes) + (_RANK if has_r else "")
        out_sub = "".join(_LETTERS[m] for m in rest) + _RANK
        if not has_r:
            t_st = _elem_strides(T)
            order = sorted(gone, key=lambda m: -t_st[t_modes.index(m)])
            first = order[0]
            if len(order) > 1 and T.size // shape[first] <= 2 * math.prod(shape[m] for m in order):
                key = ("first", self.policy, tuple(t_modes), tuple(order),
                       _layout_key(T, *(self.factors[m] for m in order)))
                hit = self.cache.get(key) if self.cache is not None else None
                first = self._cheapest_first(T, t_modes, order, x) if hit is None else hit
                if self.cache is not None:
                    self.cache[key] = first
                order = [first] + [m for m in order if m != first]
                # the outermost mode alone by one GEMM (X_(m)^T U_m, the rank introduced), then the other modes
                # by GEMVs batched over the rank: the same flops as the GEMM with the Khatri-Rao product, no
                # Khatri-Rao product to form, and BLAS's GEMM with the long dimension outside rather than as the
                # reduction (200^3, R = 10: 14 ms instead of 20); taken when the partial it leaves is at most
                # twice the Khatri-Rao product (a 3-way cube; not a 4-way one's first half, 100x larger)
                keep = [m for m in t_modes if m != first]
                spec = f"{x},{_LETTERS[first]}{_RANK}->{''.join(_LETTERS[m] for m in keep)}{_RANK}"
                out = rank_outer(xp, T, [t_modes.index(m) for m in keep], R, T.dtype)
                if len(order) == 2 and len(rest) == 1:
                    M = self._fused(spec, T, t_modes, first, order[1], out)
                    if M is not None:
                        return M, rest
                return self.contract_modes(self._run(spec, T, factors[first], out), keep, order[1:], True)
            kr = _khatri_rao([factors[m] for m in order])
            out = rank_outer(xp, T, [t_modes.index(m) for m in rest], R, T.dtype)
            view = _merged_view(T, [t_modes.index(m) for m in order])
            if view is not None:
                # the modes sit next to each other in memory in the Khatri-Rao product's row order: one axis
                # of a view and a 2-D matrix, so the planner can give the pass to the compiled small-rank
                # kernel (a 4-way tensor's halves: 1.5x faster; a 3-D matrix operand leaves it to BLAS)
                Tm, keep = view
                x_m = "".join(_LETTERS[t_modes[i]] for i in keep) + _LETTERS[order[0]]
                spec = f"{x_m},{_LETTERS[order[0]]}{_RANK}->{out_sub}"
                return self._run(spec, Tm, kr, out), rest
            kr = kr.reshape(*(shape[m] for m in order), R)
            spec = f"{x},{''.join(_LETTERS[m] for m in order)}{_RANK}->{out_sub}"
            return self._run(spec, T, kr, out), rest
        cur, cur_modes = T, list(t_modes)
        for m in gone:
            keep = [k for k in cur_modes if k != m]
            xs = "".join(_LETTERS[k] for k in cur_modes) + _RANK
            outs = "".join(_LETTERS[k] for k in keep) + _RANK
            spec = f"{xs},{_LETTERS[m]}{_RANK}->{outs}"
            out = rank_outer(xp, cur, [cur_modes.index(k) for k in keep], R, cur.dtype)
            # (a 3-way partial of two modes and the rank, the rank outermost: the planner's compiled rank-outer
            # products, CompiledKernel.RANK_OUTER_DOT, in place of BLAS's gemv per rank)
            cur = self._run(spec, cur, factors[m], out)
            cur_modes = keep
        return cur, cur_modes

    def _one_mode(self, T: np.ndarray, t_modes: list[int], m: int, has_r: bool) -> tuple[Any, list[int]]:
        """:meth:`contract_modes` of one mode of a host array with a cache: the product with ``m``'s factor into a
        rank-outer partial (the same spec, plan and output as there), made once per place in the tree and
        layout and replayed after (:class:`_Step`)."""
        got = self._one_mode_run(T, t_modes, m, has_r)
        if self.tape is not None:
            self.tape.product(T, t_modes, m, has_r, got[0], self.cache.get(("step", tuple(t_modes), m, has_r)))  # type: ignore[union-attr]
        return got

    def _one_mode_run(self, T: np.ndarray, t_modes: list[int], m: int, has_r: bool) -> tuple[Any, list[int]]:
        """The product of :meth:`_one_mode`: by its place's :class:`_Step` where the operands fit it, else worked
        out (and the step made for their layout)."""
        key = ("step", tuple(t_modes), m, has_r)
        U = self.factors[m]
        step = self.cache.get(key)  # type: ignore[union-attr]
        if step is not None and step.fits(T, U):
            self.plans.append(step.plan)
            return step(T, U), list(step.rest)
        rest = [k for k in t_modes if k != m]
        x = "".join(_LETTERS[k] for k in t_modes) + (_RANK if has_r else "")
        spec = f"{x},{_LETTERS[m]}{_RANK}->{''.join(_LETTERS[k] for k in rest)}{_RANK}"
        shape, axes = rank_outer_layout(T, [t_modes.index(k) for k in rest], self.R)
        buf = _workspace.empty(shape, T.dtype)
        out = buf.transpose(axes)
        p, cached = self._plan(spec, T, U, out)
        self.plans.append(p)
        if not cached:
            return contract(spec, T, U, out=out, plan=p), rest
        if _buffers_aligned(T, U, out):  # (made again where the layout changed: another tensor of one call)
            from tuckerkit.engine._batched_dot import rank_outer_step  # (numba: not on import tuckerkit)

            self.cache[key] = step = _Step(p, T, U, shape, axes, rest)  # type: ignore[index]
            step.gemv = rank_outer_step(p, T, U, out, buf)
            res = execute(p, T, U, out, np)
            if step.gemv is None and p.compiled != CompiledKernel.NONE:  # (its launch made by this first run)
                from tuckerkit.engine._smallgemm import kept_launch

                step.launch = kept_launch(p, T, U, out)
            return res, rest
        return execute(p, T, U, out, np), rest

    def _cheapest_first(self, T, t_modes: list[int], order: list[int], x: str) -> int:
        """The mode the one-GEMM step starts with: the outermost (``order[0]``), unless the cost model puts
        another mode of the same extent at most ``CHEAPER`` (engine/_ttm.py) of its time (the middle mode of a C-ordered
        cube, each tile of the compiled kernel one run of memory, against the first, whose tiles gather
        rows at a stride). CP-ALS on 200^3, R = 10: 0.97x the iteration time in float64 and float32 (medians
        of 9 interleaved pairs on the shared 2-core machine); R = 32 and 50 keep the outermost mode."""
        def est(m: int) -> float:
            keep = [k for k in t_modes if k != m]
            spec = f"{x},{_LETTERS[m]}{_RANK}->{''.join(_LETTERS[k] for k in keep)}{_RANK}"
            out = rank_outer(self.xp, T, [t_modes.index(k) for k in keep], self.R, T.dtype)
            return plan_contraction(spec, T, self.factors[m], out=out, policy=self.policy).est_seconds

        first = order[0]
        tied = [m for m in order[1:] if self.shape[m] == self.shape[first]]
        if not tied:
            return first
        cost = {m: est(m) for m in [first, *tied]}
        best = min(tied, key=lambda m: cost[m])
        return best if cost[best] < CHEAPER * cost[first] else first

    def rec(self, T, t_modes: list[int], has_r: bool, active: list[int]) -> None:
        if len(active) == 1 and has_r:
            self.update(active[0], T)
            return
        half = (len(active) + 1) // 2
        if not has_r and len(active) == 3 and self.xp is np and _innermost(T, t_modes, active) == active[-1]:
            # a 3-way tensor whose last mode has the unit stride (C order): the halves [0] | [1, 2], so that
            # no pass contracts the unit-stride mode alone (X x_2 U_2, the rank-outer partial written by
            # columns: the slowest of the three single-mode products) but the outermost mode alone and the
            # other two as the middle mode's product then a GEMV. The same flops and partial sizes, the same
            # update order. CP-ALS per iteration, medians of 7 interleaved, 6 iterations, one process, R = 10 /
            # 32 / 50: 200^3 float32 0.86 / 0.89 / 0.87x, float64 0.85 / 0.91 / 1.02x; 320x240x160 float32
            # 0.76 / 0.87 / 0.88x, float64 0.82 / 0.87 / 0.93x. An F-ordered tensor's halves [0, 1] | [2]
            # already contract its outermost mode alone. (Host arrays only: cuBLAS's layouts not measured)
            # Unless [0, 1] | [2] leaves smaller partials at a rank large against the first mode
            # (:func:`cp_skewed_last`)
            if not cp_skewed_last(self.shape, self.R):
                half = 1
        elif (not has_r and len(active) == 3 and self.xp is np and _innermost(T, t_modes, active) == active[0]
              and cp_skewed_last(self.shape[::-1], self.R)):
            half = 1  # (the mirror image: an F-ordered tensor with a first mode much longer than the last)
        first, second = active[:half], active[half:]
        T2, m2 = self.contract_modes(T, t_modes, second, has_r)
        self.rec(T2, m2, True, first)
        del T2  # the first half's partial goes before the second half's is made (CP R50 200^3: 0.52x -> 0.29x of X)
        T1, m1 = self.contract_modes(T, t_modes, first, has_r)
        self.rec(T1, m1, True, second)


def _buffers_aligned(*arrays: np.ndarray) -> bool:
    return all(a.flags.aligned for a in arrays)


class _Step:
    """One place of CP-ALS's dimension tree (:meth:`MttkrpTree._one_mode`: a product with one factor into a
    rank-outer partial) replayed for operands of the layout it was first made for: the plan, the output's
    buffer shape and axes (:func:`~tuckerkit.engine._mttkrp.rank_outer`'s) and, for a rank-outer product, the
    kernel's arguments (:class:`~tuckerkit.engine._batched_dot.RankOuterStep`) kept, so that a sweep does not
    work them out again: the spec, the output's layout, the plan's look-up (its key from the arrays' shapes and
    strides) and the product's checks. The same plan, kernels and arguments: the same bits.

    Why: on 200^3 at rank 10, float32, an iteration's Python steps around its kernels had taken 0.27-0.31 ms of
    1.31-1.37 ms (0.06 ms a pass before its kernels ran, 0.03 ms around each of the three matrix-vector
    products of 27 us); with the steps replayed (interleaved medians of 9 calls of 30 iterations, the same
    bits) the iteration took 0.91x the time (float64 0.94x; 100^3 float64 0.87x; 200^3 float32 at rank 50
    0.97x)."""

    __slots__ = ("axes", "dtype", "gemv", "launch", "layout", "plan", "rest", "shape")

    def __init__(self, plan: Any, T: np.ndarray, U: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...],
                 rest: list[int]) -> None:
        self.plan, self.shape, self.axes, self.rest, self.dtype = plan, shape, axes, tuple(rest), T.dtype
        self.layout = (T.shape, T.strides, U.shape, U.strides)
        self.gemv: Any = None
        self.launch: Any = None  # (a compiled TTM's launch kept on its plan: :func:`~._smallgemm.kept_launch`)

    def fits(self, T: np.ndarray, U: np.ndarray) -> bool:
        return (T.shape, T.strides, U.shape, U.strides) == self.layout and T.dtype == self.dtype \
            and U.dtype == self.dtype

    def __call__(self, T: np.ndarray, U: np.ndarray) -> np.ndarray:
        buf = _workspace.empty(self.shape, self.dtype)
        out = buf.transpose(self.axes)
        if self.gemv is not None:
            self.gemv(T, U, buf.reshape(-1))
            return out
        if self.launch is not None and U.flags.aligned:  # (what execute would run for this plan, without its
            # look-ups: the buffer is the pool's, shared with neither operand)
            _prewake(self.plan)
            if self.launch(T, U, out):
                return out
        return execute(self.plan, T, U, out, np)


#: whether :meth:`MttkrpTree.contract_modes` replays its one-mode products (:class:`_Step`)
REPLAY_STEPS = True


#: whether a 3-way tensor's MTTKRP from a one-GEMM step and a batched matrix-vector product runs as one pass
#: (:meth:`MttkrpTree._fused`)
FUSE_LAST_GEMV = True

#: a C-ordered 3-way tensor's sweeps leave the halves [0] | [1, 2] for [0, 1] | [2] where those partials
#: (:func:`_partial_elems`) are more than this many times smaller (:func:`skewed_last`)
SKEW = 1.5
#: ... and CP-ALS's only where its rank is also at least this many times the first mode's extent
#: (:func:`cp_skewed_last`)
CP_SKEW_RANK = 0.4


#: whether CP-ALS's and HOOI's sweeps share passes across sweeps where they can (:func:`multi_sweep_applies`)
MULTI_SWEEP = True
#: ... where each single-mode partial (``R / I_n`` of the tensor) is at most this share of it: one is kept
#: between two sweeps, so the peak extra memory of CP-ALS and HOOI stays within half the tensor
MULTI_SWEEP_PARTIAL = 0.25
#: ... and where the unit-stride mode has at least this extent or is not shorter than the others (its pass alone
#: is the tree's extra one: the compiled kernel's dot products along it are short below that)
MULTI_SWEEP_UNIT = 128
#: HOOI's sweeps take it up to this order (each pass over X then serves N - 1 updates: N / (N - 1) passes a
#: sweep), from 4 modes on a float64 (or complex128) tensor of at least ``MULTI_SWEEP_NWAY_BYTES``
MULTI_SWEEP_HOOI_MAX_ORDER = 8
MULTI_SWEEP_NWAY_BYTES = 32 << 20
#: CP-ALS's sweeps up to this order (:func:`_multi_sweep`, written for any order: N passes every N - 1 sweeps).
#: From 4 modes not yet: against the two-pass tree (float64, 6 iterations, interleaved medians of 7, stop 83),
#: 60^4 at R = 5 / 7 / 10 0.93-1.00 / 0.99 / 1.02-1.11x the iteration, 64^4 at R = 8 1.03x, 50^4 and 40^4 at R = 5
#: 0.97 / 0.99x, 70^4 at R = 8 0.87x, 80^4 at R = 10 0.86-0.93x, 30^5 at R = 5 1.05x, 24^5 at R = 3 0.79x: its
#: single-mode passes write a partial of R / I_n of X (17 MB on 60^4 at R = 10) that the MTTKRPs then read
#: through BLAS's batched matrix-vector products (0.7-2 ms each, about 2.7 an iteration: the compiled rank-outer
#: products take 3-way partials only, and their merged 3-D views of these ran no faster)
MULTI_SWEEP_CP_MAX_ORDER = 3


def multi_sweep_applies(X: Any, R: int | list[int], max_order: int = 3) -> bool:
    """Whether the sweeps of ``X`` at rank ``R`` (one per mode for HOOI) take the multi-sweep dimension tree
    (CP-ALS's :func:`_multi_sweep`, HOOI's :func:`_multi_ttmc_sweep`): a numpy array of 3 to ``max_order`` modes
    (CP-ALS 3, HOOI ``MULTI_SWEEP_HOOI_MAX_ORDER``) filling one block of memory in C, F or another order of its
    modes (:func:`_unit_mode`), whose single-mode partials (``R_n / I_n`` of the tensor each) are at most
    ``MULTI_SWEEP_PARTIAL`` of it, whose unit-stride mode (C order's last, F order's first) has at least
    ``MULTI_SWEEP_UNIT`` entries or is not shorter than the others, and, from 4 modes, a float64 (or complex128)
    tensor of at least ``MULTI_SWEEP_NWAY_BYTES``.

    Per iteration against the two-pass tree (the AVX-512 machine, float64, 8 iterations, medians of 7
    interleaved pairs in one process; the same fits): 200^3 at R = 10 / 50 0.90 / 0.91x the time (float32
    0.94 / 0.96x; F order 0.91 / 0.93x), 320x240x160 at R = 10 / 32 0.91x, 300^3 at R = 20 0.84x, 150^3 at R = 30
    0.94x, 128^3 at R = 16 0.87x, 100^3 at R = 10 / 25 0.95 / 1.01x, (1000, 100, 100) 0.79x, (100, 1000, 100)
    0.91x, (100, 100, 1000) at R = 25 0.84x, (50, 500, 500) and (60, 300, 600) 0.83x, (40, 1000, 200) 0.85x,
    (200, 200, 150) at R = 20 / 37 0.95 / 0.90x, F-ordered (500, 500, 50) 0.80x (R = 10 unless given). Left to
    the two-pass tree, a unit-stride mode shorter than 128 and than the others: (500, 500, 50) 1.11x, F-ordered
    (50, 500, 500) 1.10x, (300, 300, 60) 1.04x, (200, 200, 100) at R = 10 / 25 0.97 / 1.07x, (200, 200, 120) at
    R = 10 / 20 / 30 0.96 / 1.02 / 0.99x, (300, 300, 100) at R = 10 / 20 0.99 / 1.01x, (250, 250, 80) 1.00x,
    (400, 400, 64) at R = 8 0.98x (given up: (400, 400, 100) 0.90x).

    HOOI (6 iterations from a given start, medians of 5 interleaved pairs, float64 unless said): 200^3 at R =
    10 0.91-0.94x (float32 0.94x, F order 0.82x), 320x240x160 0.89-0.90x, 300^3 at R = 20 0.84x, 60^4 at R = 10
    / 12 / 15 0.88 / 0.85 / 0.86x, 64^4 at R = 8 0.81x, 80^4 at R = 10 0.80x, 50^4 at R = 8 0.89x, 30^5 at R = 5
    0.80x, 16^6 at R = 4 0.99x. Left out from 4 modes: smaller tensors (40^4 at R = 10 / 6, 20 MB, 1.09 /
    0.98x) and float32 (60^4 at R = 10 1.02x, 64^4 1.01x, 50^4 1.01x, 30^5 0.98x; 80^4, 164 MB, 0.90x given up).

    >>> import numpy as np
    >>> multi_sweep_applies(np.empty((200, 200, 200)), 50), multi_sweep_applies(np.empty((200, 200, 200)), 51)
    (True, False)
    >>> multi_sweep_applies(np.empty((1000, 100, 100)), 10), multi_sweep_applies(np.empty((500, 500, 50)), 10)
    (True, False)
    >>> multi_sweep_applies(np.empty((500, 500, 50), order="F"), 10), multi_sweep_applies(np.empty((8,) * 4), 2)
    (True, False)
    >>> multi_sweep_applies(np.empty((60,) * 4), 10, 8), multi_sweep_applies(np.empty((60,) * 4, np.float32), 10, 8)
    (True, False)
    """
    ranks = [R] * X.ndim if isinstance(R, int) else list(R)
    if not (MULTI_SWEEP and type(X) in (np.ndarray, np.memmap) and 3 <= X.ndim <= max_order
            and all(r <= MULTI_SWEEP_PARTIAL * n for r, n in zip(ranks, X.shape, strict=True))):
        return False
    if X.ndim > 3 and (X.dtype.char not in "dD" or X.nbytes < MULTI_SWEEP_NWAY_BYTES):
        return False
    u = _unit_mode(X)
    if u is None:
        return False
    unit, others = X.shape[u], [n for m, n in enumerate(X.shape) if m != u]
    return unit >= MULTI_SWEEP_UNIT or unit >= min(others)


def _unit_mode(X: np.ndarray) -> int | None:
    """The mode of unit stride of an array whose elements fill one block of memory in some order of its modes
    (C, F or any permutation of them; a tensor made by a chain of products often is one), else None.

    >>> import numpy as np
    >>> a = np.empty((4, 5, 6))
    >>> _unit_mode(a), _unit_mode(np.asfortranarray(a)), _unit_mode(a.transpose(2, 0, 1)), _unit_mode(a[:, ::2])
    (2, 0, 0, None)
    """
    order = sorted(range(X.ndim), key=lambda m: (X.strides[m], m))
    step = X.itemsize
    for m in order:
        if X.strides[m] != step:
            return None
        step *= X.shape[m]
    return order[0]


class CarriedPartial:
    """What one sweep leaves for the next in the multi-sweep tree: CP-ALS's partial (``X`` contracted with the
    factor of ``mode``, :func:`_multi_sweep`) or HOOI's suspended cycle of projections (:func:`_multi_ttmc_sweep`),
    with copies of the factors it was made from. The next sweep takes it only where those factors are still the
    same (bit for bit) and the caller vouches that ``X`` is (:meth:`drop` otherwise: a jump of the line search, an
    orthogonalization, a refill of missing entries)."""

    __slots__ = ("factors", "mode", "source", "state")

    def __init__(self) -> None:
        self.state: Any = None
        self.factors: list[Any] = []
        self.source: Any = None
        self.mode: int | None = None

    def drop(self) -> None:
        """Forget what is kept (its memory goes with it; a suspended generator is closed)."""
        state, self.state, self.factors, self.source, self.mode = self.state, None, [], None, None
        if isinstance(state, tuple) and state and isinstance(state[0], GeneratorType):
            state[0].close()

    def keep(self, X: Any, state: Any, factors: list[Any], mode: int | None = None) -> None:
        self.drop()
        self.state, self.factors, self.source, self.mode = state, [F.copy() for F in factors], X, mode

    def take(self, X: Any, factors: list[Any]) -> Any:
        """The kept state where it was made from ``X`` with ``factors`` as they are now, else None; forgotten
        here in either case (the caller keeps its next state)."""
        state, kept, src = self.state, self.factors, self.source
        self.state, self.factors, self.source = None, [], None
        same = (state is not None and src is X and len(kept) == len(factors)
                and all(F.shape == U.shape and F.dtype == U.dtype and np.array_equal(F, U)
                        for F, U in zip(kept, factors, strict=True)))
        if not same and isinstance(state, tuple) and state and isinstance(state[0], GeneratorType):
            state[0].close()
        return state if same else None


def _multi_sweep(X: Any, factors: list[Any], update: Update, policy: ExecutionPolicy,
                 cache: dict[Any, Any] | None, carry: CarriedPartial, plans: list[Any]) -> Sweep:
    """A CP-ALS sweep of the multi-sweep dimension tree (Ma and Solomonik, IPDPS 2021): the pass of ``X``
    contracted with the factor updated last, ``X x_j U_j``, serves the N - 1 MTTKRPs that follow in the cyclic
    update order (every mode but j, until U_j changes again), also across the end of a sweep: N passes every
    N - 1 sweeps instead of two a sweep. Three modes: ``X x_2 U_2`` serves modes 0 and 1, ``X x_1 U_1`` mode 2
    and the next sweep's mode 0 (kept in ``carry``), ``X x_0 U_0`` modes 1 and 2 (three passes every two
    sweeps); four: ``X x_3 U_3`` modes 0-2, ``X x_2 U_2`` mode 3 and the next sweep's 0-1, ``X x_1 U_1`` mode 2,
    3 and then 0, ``X x_0 U_0`` modes 1-3 (four passes every three sweeps). The same updates in the same order
    (Gauss-Seidel), each MTTKRP from the same factors as the standard tree's (the modes a partial serves taken
    from it by the tree's halves, :meth:`MttkrpTree.rec`), so the same iterates to rounding. A sweep that finds
    the kept partial valid (its factor unchanged, bit for bit) starts from it."""
    tree = MttkrpTree(np, X.shape, factors, update, plans, policy, cache)
    N = X.ndim
    modes = list(range(N))
    passes = 0
    m = 0  # the next mode to update
    jk = carry.mode  # (the kept partial's mode)
    kept = carry.take(X, [factors[jk]]) if jk is not None and jk < N else None
    # the sweep's steps replayed from its tape where one of its kind (with the kept partial of mode jk, or none)
    # was recorded for this tensor, else recorded on the way (_Tape)
    key = ("tape", None if kept is None else jk)
    tape = cache.get(key) if cache is not None and REPLAY_STEPS else None
    if tape is not None and tape.source is X:
        box, kept = [kept], None  # (the replay drops the kept partial after its last use: no other reference)
        passes = tape.replay(tree, X, box, carry)
        return Sweep(tuple(plans), passes)
    if cache is not None and REPLAY_STEPS:
        tree.tape = _Recorder(X, None if kept is None else kept[0], update)
        tree.update = tree.tape.update
    while m < N:
        if kept is not None and jk is not None:
            (T, t_modes), j = kept, jk
            kept = None
        else:  # the factor updated last (at the sweep's start: the last mode's, from the sweep before)
            j = (m - 1) % N
            T, t_modes = tree.contract_modes(X, modes, [j], False)
            passes += 1
        # the modes this partial serves in this sweep: from m on, up to the mode before j (cyclically); past
        # the sweep's end it is kept for the next one, which takes it while U_j is unchanged
        serve = list(range(m, N if j < m else j))
        ahead = serve[-1] == N - 1 and 0 < j < N - 1  # (then modes 0 to j - 1 of the next sweep)
        if ahead:
            carry.keep(X, (T, t_modes), [factors[j]], j)
            if tree.tape is not None:
                tree.tape.keep(T, t_modes, j)
        others = [k for k in t_modes if k not in serve]
        if others:
            T, t_modes = tree.contract_modes(T, t_modes, others, True)
        tree.rec(T, t_modes, True, serve)
        del T
        m = serve[-1] + 1
    if tree.tape is not None and tree.tape.ok and cache is not None:
        cache[key] = tree.tape.finish()
    return Sweep(tuple(plans), passes)


_X, _KEPT = -1, -2  # a tape's registers of the tensor and of the kept partial (the others: the ops' outputs)


class _Recorder:
    """A multi-sweep tree sweep's steps as it runs them (:func:`_multi_sweep`): each product with one factor
    (:meth:`MttkrpTree._one_mode`) from the tensor, the kept partial or an earlier product, each update and the
    partial kept for the next sweep, in order. The arrays are known by identity while the sweep runs (weak
    references: the recording keeps nothing alive); a product of an array it does not know (another route of
    the tree) leaves the recording unusable (``ok`` false)."""

    def __init__(self, X: Any, kept: Any, update: Update) -> None:
        import weakref

        self._ref = weakref.ref
        self.source = weakref.ref(X)
        self.regs: dict[int, tuple[int, Any]] = {id(X): (_X, weakref.ref(X))}
        if kept is not None:
            self.regs[id(kept)] = (_KEPT, weakref.ref(kept))
        self.ops: list[tuple] = []
        self.ok = True
        self._update = update

    def _reg(self, a: Any) -> int | None:
        got = self.regs.get(id(a))
        return got[0] if got is not None and got[1]() is a else None

    def product(self, T: Any, t_modes: list[int], m: int, has_r: bool, out: Any, step: Any) -> None:
        src = self._reg(T)
        if src is None:
            self.ok = False
            return
        dst = len(self.ops)
        self.ops.append(("run", src, dst, tuple(t_modes), m, has_r, step))
        self.regs[id(out)] = (dst, self._ref(out))

    def update(self, n: int, M: Any) -> None:
        src = self._reg(M)
        if src is None:
            self.ok = False
        else:
            self.ops.append(("update", src, n))
        self._update(n, M)

    def keep(self, T: Any, t_modes: list[int], j: int) -> None:
        src = self._reg(T)
        if src is None:
            self.ok = False
        else:
            self.ops.append(("keep", src, tuple(t_modes), j))

    def finish(self) -> _Tape:
        return _Tape(self.source(), self.ops)


class _Tape:
    """One kind of multi-sweep tree sweep (from the kept partial of one mode, or from none) as its steps in
    order, recorded at its first run on a tensor (:class:`_Recorder`) and replayed by the later sweeps of that
    kind on it: each product by its :class:`_Step` where the operands still fit it (else as
    :meth:`MttkrpTree._one_mode` makes it), each update and the kept partial as recorded, each array dropped
    after its last use. The same products in the same order from the same factors as the tree's own walk: the
    same bits.

    Why: the walk itself (the halves, the served modes, the steps' look-ups by their place) is Python that runs
    with its code and data out of the caches after each pass over X. Against the steps replayed without a tape
    (interleaved medians of 9 calls of 20 iterations, the same bits): CP-ALS at rank 10 on 200^3 0.96x the
    iteration (float32) and 0.98x (float64), 100^3 float64 0.90x."""

    __slots__ = ("ops", "source")

    def __init__(self, source: Any, ops: list[tuple]) -> None:
        self.source = source
        last: dict[int, int] = {}  # the op of each register's last use
        for k, op in enumerate(ops):
            if op[0] in ("run", "update", "keep"):
                last[op[1]] = k
        frees: dict[int, list[int]] = {}
        for reg, k in last.items():
            frees.setdefault(k, []).append(reg)
        self.ops = [(*op, tuple(frees.get(k, ()))) for k, op in enumerate(ops)]

    def replay(self, tree: MttkrpTree, X: Any, box: list, carry: CarriedPartial) -> int:
        """Run the sweep's steps (``box``: the kept state, or None, taken out of it); returns the passes over
        ``X`` it made."""
        regs: dict[int, Any] = {_X: X}
        kept = box.pop()
        if kept is not None:
            regs[_KEPT] = kept[0]
            kept = None
        factors, plans = tree.factors, tree.plans
        passes = 0
        for i, op in enumerate(self.ops):
            kind = op[0]
            if kind == "run":
                _, src, dst, t_modes, m, has_r, step, free = op
                T, U = regs[src], factors[m]
                if step is not None and step.fits(T, U):
                    plans.append(step.plan)
                    regs[dst] = step(T, U)
                else:  # (the tree's own way; its step, made for these operands, replayed from the next sweep on)
                    regs[dst] = tree._one_mode_run(T, list(t_modes), m, has_r)[0]
                    self.ops[i] = (*op[:6], tree.cache.get(("step", t_modes, m, has_r)), free)  # type: ignore[union-attr]
                passes += src == _X
            elif kind == "update":
                _, src, n, free = op
                tree.update(n, regs[src])
            else:
                _, src, t_modes, j, free = op
                carry.keep(X, (regs[src], list(t_modes)), [factors[j]], j)
            for reg in free:
                if reg != _X:
                    regs.pop(reg, None)
        return passes


def kept_first_mttkrp(X: Any, factors: list[Any], policy: ExecutionPolicy, cache: dict[Any, Any] | None,
                      carry: CarriedPartial) -> Any:
    """Mode 0's MTTKRP of a 3-way ``X`` as the multi-sweep tree's sweep from no kept partial makes it (the pass
    ``X x_2 U_2``, then that partial times ``U_1``), the pass kept in ``carry`` (with a copy of ``U_2``) for the
    next sweep, which starts from it where ``U_2`` is still the same (:func:`_multi_sweep`, serving modes 0 and
    1); None, with nothing kept, where the sweeps of ``X`` do not take the multi-sweep tree (the caller makes
    its MTTKRP its own way).

    For CP-ALS's line search: a jump's fit needs this MTTKRP on the jumped factors, and a jump kept is the next
    sweep's start, whose first pass is this one. Before, the jump's MTTKRP was one fused pass and the next sweep
    made its two passes again (the jump dropped the kept partial): four passes over X in the two iterations
    around a kept jump, three now."""
    R = next((int(U.shape[1]) for U in factors if U is not None), 0)
    if (X.ndim != 3 or cache is None or type(X) is not np.ndarray or any(U is None for U in factors)
            or direct_applies(X, R) or not multi_sweep_applies(X, R, MULTI_SWEEP_CP_MAX_ORDER)):
        return None
    tree = MttkrpTree(np, X.shape, factors, None, [], policy, cache)
    T, t_modes = tree.contract_modes(X, [0, 1, 2], [2], False)
    carry.keep(X, (T, t_modes), [factors[2]], 2)
    # (the sweep's first MTTKRP from this partial, :meth:`MttkrpTree.rec`'s halves: mode 1 contracted)
    return tree.contract_modes(T, t_modes, [1], True)[0]


def _partial_elems(shape: tuple[int, ...], passes: list[list[int]]) -> int:
    """Elements (per rank) of the partials a 3-way sweep's passes write, each pass contracting its modes (in
    memory order, C) from the tensor as :meth:`MttkrpTree.contract_modes` does: one mode, or the outermost one
    alone where the partial it leaves is at most twice the Khatri-Rao product (then a GEMV), else the
    Khatri-Rao product and the output.

    >>> _partial_elems((200, 200, 200), [[1, 2], [0]]), _partial_elems((200, 200, 200), [[2], [0, 1]])
    (80000, 80000)
    >>> _partial_elems((10, 10, 100000), [[1, 2], [0]]), _partial_elems((10, 10, 100000), [[2], [0, 1]])
    (2000000, 100200)
    """
    size = math.prod(shape)
    total = 0
    for gone in passes:
        kr = math.prod(shape[m] for m in gone)
        if len(gone) == 1 or size // shape[gone[0]] <= 2 * kr:
            total += size // shape[gone[0]]
        else:
            total += kr + size // kr
    return total


def _innermost(T: Any, t_modes: list[int], modes: list[int]) -> int:
    """The mode among ``modes`` with the smallest stride in ``T`` (the first of them on a tie)."""
    st = _elem_strides(T)
    return min(modes, key=lambda m: abs(st[t_modes.index(m)]))


def dense_mttkrp_sweep(X: Any, factors: list[Any], update: Update, policy: ExecutionPolicy,
                       cache: dict[Any, Any] | None = None, carry: CarriedPartial | None = None) -> Sweep:
    R = next(int(U.shape[1]) for U in factors if U is not None)
    if direct_applies(X, R) or device_direct_applies(X):  # a small tensor, or a GPU's: matmul directly, the
        direct_mttkrp_sweep(X, factors, update, R)        # same tree (engine/_direct.py)
        return Sweep((record("mttkrp", X, R),), 2)
    plans: list[Any] = []
    if carry is not None and multi_sweep_applies(X, R, MULTI_SWEEP_CP_MAX_ORDER):
        return _multi_sweep(X, factors, update, policy, cache, carry, plans)
    # mode order is the update order (0..N-1); for C or F layouts each half is a memory-adjacent chain
    all_modes = list(range(X.ndim))
    MttkrpTree(array_namespace(X), X.shape, factors, update, plans, policy, cache).rec(X, all_modes, False,
                                                                                         all_modes)
    return Sweep(tuple(plans), min(X.ndim, 2))


def ttmc_sweep(X: Any, factors: list[Any], update: Update) -> tuple[Any, ...]:
    """The N projections of one HOOI sweep, in mode order, each on the latest factors (Gauss-Seidel).

    ``update(n, Y_n)`` receives ``Y_n = X x_{m != n} U_m^T`` (mode ``n`` unprojected, in place) and may
    replace ``factors[n]`` before the next projection. Dense tensors share partial projections (a dimension
    tree): the modes are halved, ``X`` projected on the second half serves the first half and the
    projection on the updated first half serves the second, so the full tensor is read twice per sweep for
    any order. Sparse tensors run one compiled ``ttmc`` per mode (reading only the nonzeros); out-of-core
    and Dask tensors stream or distribute the two top-level projections.

    Parameters
    ----------
    X : array or tensor, shape (I_0, ..., I_{N-1})
        A numpy/cupy array, or any tensor :func:`as_operand` accepts.
    factors : list of arrays, shape (I_n, R_n)
        Read, and possibly replaced by ``update``, in place.
    update : callable ``update(n, Y_n)``

    Returns
    -------
    tuple
        The plans used (engine :class:`MultiTTMPlan` objects, or a sparse tensor's per-mode CSF plan).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import ttmc, ttmc_sweep
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((4, 5, 6, 7))
    >>> U = [np.linalg.qr(rng.random((n, 2)))[0] for n in X.shape]
    >>> seen = {}
    >>> _ = ttmc_sweep(X, U, lambda n, Y: seen.setdefault(n, Y))
    >>> all(np.allclose(seen[n], ttmc(X, U, n)) for n in range(4))
    True
    """
    from tuckerkit.engine._operand import public_operand

    op = public_operand(X, min_ndim=1)
    _check_tucker_factors(factors, op.shape, op.dtype)
    return op.ttmc_sweep(factors, update).plans


def mttkrp_sweep(X: Any, factors: list[Any], update: Update) -> tuple[Any, ...]:
    """The N MTTKRPs of one ALS sweep, in mode order, sharing partial contractions (a dimension tree).

    ``update(n, M_n)`` is called with each ``M_n`` (shape (I_n, R)) as soon as it is ready; it may replace
    ``factors[n]``, and later MTTKRPs of the sweep use the new factor (Gauss-Seidel order, as CP-ALS needs).
    The modes are split into an outer and an inner half: the inner half is contracted first by one GEMM
    with its Khatri-Rao product (old factors), the outer-half MTTKRPs are finished from that partial result
    by GEMVs batched over the rank, then the same from the other side with the updated outer factors (there
    by one GEMM with the outermost factor and batched GEMVs when that partial is at most twice the
    Khatri-Rao product, as for a 3-way tensor). The full tensor is read twice per sweep whatever its order.

    Parameters
    ----------
    X : array or tensor, shape (I_0, ..., I_{N-1})
        A numpy/cupy array, or any tensor :func:`as_operand` accepts (at least 2 modes).
    factors : list of arrays, shape (I_n, R)
        Read, and possibly replaced by ``update``, in place.
    update : callable ``update(n, M_n)``

    Returns
    -------
    tuple
        The engine plans used (for a sparse tensor, its per-mode CSF plan), for inspection.

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.engine import mttkrp, mttkrp_sweep
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((4, 5, 6))
    >>> U = [rng.random((n, 3)) for n in X.shape]
    >>> out = {}
    >>> _ = mttkrp_sweep(X, U, lambda n, M: out.setdefault(n, M))
    >>> all(np.allclose(out[n], mttkrp(X, U, n)) for n in range(3))
    True
    """
    from tuckerkit.engine._operand import public_operand

    op = public_operand(X, min_ndim=2)
    check_factor_list(factors, op.shape, None, op.dtype)
    return op.mttkrp_sweep(factors, update).plans


def _check_tucker_factors(factors: Any, shape, dtype) -> None:
    from tuckerkit._validation import check_matrix

    if len(factors) != len(shape):
        raise ValueError(f"factors has {len(factors)} matrices; expected one per mode of X ({len(shape)})")
    for m, U in enumerate(factors):
        U = check_matrix(U, f"factors[{m}]", dtype)
        if U.shape[0] != shape[m]:
            raise ValueError(f"factors[{m}] has {U.shape[0]} rows but mode {m} of X has size {shape[m]}; "
                             f"expected ({shape[m]}, R_{m})")
