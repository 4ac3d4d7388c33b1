"""The execution policy: how many threads a call uses, BLAS held to one thread, and fixed work splits.

Bitwise-repeatable results need two things, both measured on this project's machines:

* **BLAS at a fixed thread count.** OpenBLAS's results depend on its thread count: a 700 x 600 x 500 dgemm
  differs in the last bits between 1 and 2 threads, a dot product of 10^6 entries by 1e-10, and ``eigh`` of a
  300 x 300 matrix returns eigenvectors with other signs. The thread count is one setting for the whole
  process, so tuckerkit holds every loaded BLAS library (numpy's and scipy's bundle their own) to one thread
  while any of its calls runs (:func:`blas_pinned`, counted across threads, the caller's settings restored
  exactly when the last call returns, also on an exception). Below about 5e5 flops OpenBLAS runs one thread
  anyway (``m n k < 262144``), so small products leave BLAS alone, except a long reduction (a dot product
  of more than :data:`DOT_SERIAL_MAX` entries) and a symmetric rank-k update of :data:`SYRK_PIN_MADDS`
  multiply-adds or more, which OpenBLAS threads at smaller sizes.
* **Splits that do not depend on the machine.** Work is cut into pieces whose number follows from the sizes
  alone (:func:`split_points`), never from the number of workers or the load; the workers take pieces
  dynamically (one descheduled thread never holds up a static share), every piece writes its own part of the
  output, and partial sums are added in piece order. The same call therefore gives the same bits with one
  worker or several, on an idle or a busy machine, and from several threads at once.

An :class:`ExecutionPolicy` is resolved once at a public entry and passed down (operands and plans carry it);
nothing below reads a process-wide setting.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

#: a product of fewer flops runs as one BLAS call without holding BLAS (OpenBLAS: m n k < 262144 is serial)
PIN_FLOPS = 500_000
#: ... unless its reduction is longer: OpenBLAS's dot product runs on several threads from 10^4 entries
#: whatever the flops, with partial sums per thread (measured: ``contract("i,i->")`` of 11000-240000 entries
#: differed in the last bits between 1 and 2 threads, and woke OpenBLAS's idle worker)
DOT_SERIAL_MAX = 10_000
#: a symmetric rank-k update ``V V^T`` (V: n x k) of fewer multiply-adds ``n^2 k`` runs without holding BLAS:
#: OpenBLAS's SYRK ran on 2 threads from between 3.1e5 and 4.5e5 (50 x 190 and 30 x 500 woke its worker, whose
#: ~0.1 s of spinning then takes a core from the next two-worker kernel; 30 x 340 and 64 x 64 did not)
SYRK_PIN_MADDS = 262_144
#: a product of at least this many flops is cut into pieces (a thread hand-off costs ~30-50 us)
MIN_PARALLEL_FLOPS = 4_000_000
#: the smallest piece of a split product (about 0.1-0.2 ms of one core)
MIN_CHUNK_FLOPS = 1_000_000
#: the most pieces a product is cut into, whatever the machine (enough to balance up to ~8 workers)
MAX_PIECES = 16
#: a planned contraction's pieces are at least this many times MIN_CHUNK_FLOPS, and a product that is cut at all
#: gets at least two: a piece's Python side (slicing, the call, the hand-off) costs ~5 us and each piece re-packs
#: its share of an operand. The n = 64 Table II single GEMMs (33.5 MFlop, float64, 2 workers, medians of 31
#: interleaved runs): 8 pieces of 4 MFlop 0.77-0.94x einsum's one two-thread OpenBLAS call, 2 pieces of 16 MFlop
#: 0.90-1.03x (32 MFlop pieces: no better); 10-13 MFlop products 0.64-0.81x -> 0.76-0.84x. Since stop 38 the
#: pieces are counted in float64 terms (:func:`split_work`) and are at least 32 MFlop of them: Table II n = 128
#: (medians of 5 interleaved runs, 36 cases, pieces of 32 against 16): float32 0.955x the time (0.80-1.10x per
#: case; 4 pieces instead of 16), float64 0.997x; HOOI and CP-ALS on 200^3 and 60^4 0.85-1.06x (noise).
CONTRACT_PIECE_SCALE = 32
#: the smallest planned contraction that is cut into pieces (two or more), in float64 flops: a float32 product
#: counts half its flops (:func:`split_work`: it computes about twice as fast, so the same flops are half the
#: time against the same hand-off). Below it one BLAS call on one thread. Table II (the seed's 36 cases,
#: medians of 15-21 interleaved runs, geometric means against einsum, pieces -> one call): float64 n = 50
#: (12.5 MFlop) 0.93 -> 1.20x, n = 56 (19.7 MFlop) 0.99 -> 0.96x, n = 64 (33.5 MFlop) 1.10-1.12 -> 0.93-1.06x;
#: float32 n = 64 0.87-0.89 -> 1.00x (the strided batches 1.17-1.36 -> 1.27-2.08x), n = 72 (53.7 MFlop)
#: 1.01 -> 0.96x, n = 80 (81.9 MFlop) 0.98 -> 0.76x. Lowered from 20 to 16 MFlop (stop 42) so that float32 n = 64
#: (16.7 MFlop in float64 terms) is cut in two: with each library warm, as in a loop of its own calls
#: (``benchmarks/contractions.py --warm``: OpenBLAS's two threads awake for einsum), its 36 cases went from
#: 0.80x einsum (geometric mean, two runs; its plain GEMMs 0.57-0.69x each) to 1.05-1.08x; every call cold
#: (the default run) 1.04-1.09x -> 1.01x
CONTRACT_PARALLEL_FLOPS = 16_000_000


def split_work(flops: int, dtype: Any) -> int:
    """``flops`` in float64 terms for the decision to cut a product into pieces: half for float32 and
    complex64 (single precision computes about twice as fast on the same vectors)."""
    return flops // 2 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else flops


@dataclass(frozen=True)
class ExecutionPolicy:
    """How a call runs on the CPU, resolved once at the public entry and carried by operands and plans.

    Attributes
    ----------
    workers : int
        Threads tuckerkit spreads its pieces of work and its compiled kernels over. The pieces themselves
        do not depend on it, so the result is the same bits for any value.

    Examples
    --------
    >>> from tuckerkit.engine import ExecutionPolicy
    >>> ExecutionPolicy(workers=1)
    ExecutionPolicy(workers=1)
    >>> ExecutionPolicy(workers=0)
    Traceback (most recent call last):
    ...
    ValueError: workers=0 is invalid; expected an integer >= 1
    """

    workers: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers={self.workers!r} is invalid; expected an integer >= 1")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_policy() -> ExecutionPolicy:
    """The policy of a call that names none: one worker per CPU this process may use, at most as many as
    the caller lets BLAS use (``threadpoolctl.threadpool_limits(1)`` makes tuckerkit serial too).

    Returns
    -------
    ExecutionPolicy

    Examples
    --------
    >>> from tuckerkit.engine import default_policy
    >>> default_policy().workers >= 1
    True
    """
    workers = max(1, min(_cpus(), _PIN.caller_threads()))
    policy = _DEFAULT_POLICIES.get(workers)
    if policy is None:
        policy = _DEFAULT_POLICIES[workers] = ExecutionPolicy(workers=workers)
    return policy


#: the default policies made so far, by their worker count (a policy is immutable: one object per count serves
#: every call, which then skips the dataclass's construction and checks; see :data:`_contract._FAST_PLANS`)
_DEFAULT_POLICIES: dict[int, ExecutionPolicy] = {}


def resolve_policy(policy: ExecutionPolicy | None) -> ExecutionPolicy:
    """``policy``, or :func:`default_policy` when None; a one-line error for anything else."""
    if policy is None:
        return default_policy()
    if not isinstance(policy, ExecutionPolicy):
        raise TypeError(f"policy must be an ExecutionPolicy or None; received {type(policy).__name__}")
    return policy


# ---------------------------------------------------------------------------------------------------
# BLAS threads
# ---------------------------------------------------------------------------------------------------
class _BlasPin:
    """Holds every loaded BLAS library at one thread while at least one tuckerkit call is inside.

    The count is the one piece of process-wide state the engine keeps: BLAS's thread count is itself
    process-wide, and the caller's settings must come back exactly when the last concurrent call leaves.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.mine = threading.local()  # (``n``: the calls of this thread inside, for a fork's child)
        self.saved: list[int] | None = None
        self.pinned: list[Any] = []
        self.libs: list[Any] | None = None
        self.modules_seen = -1
        # per library: (get, set) of its thread count, resolved once per look at the loaded libraries
        self.access: list[tuple[Callable[[], int], Callable[[int], Any]]] = []
        self.pinned_access: list[tuple[Callable[[], int], Callable[[int], Any]]] = []
        self.quieted = False  # quiet_blas_workers looked during the outermost call

    def _libraries(self) -> list[Any]:
        # a library loaded since the last look (an import) is found by looking again; one loaded inside a
        # pinned call is pinned by the next nested entry, or at once by :func:`scipy_linalg`
        if self.libs is None or len(sys.modules) != self.modules_seen:
            self.modules_seen = len(sys.modules)
            try:
                from threadpoolctl import ThreadpoolController

                ctl = ThreadpoolController()
                self.libs = [c for c in ctl.lib_controllers if c.user_api == "blas"]
            except Exception:  # pragma: no cover - threadpoolctl missing or an unknown BLAS
                self.libs = []
            self.access = [self._accessors(lib) for lib in self.libs]
        return self.libs

    @classmethod
    def _accessors(cls, lib: Any) -> tuple[Callable[[], int], Callable[[int], Any]]:
        """The library's thread-count getter and setter: OpenBLAS's own C entry points when it runs its own
        threads (a ctypes call each, about 1 us less than threadpoolctl's per-call symbol look-ups), else
        threadpoolctl's."""
        if getattr(lib, "internal_api", None) == "openblas" and getattr(lib, "threading_layer", None) != "openmp":
            try:
                get = lib._get_symbol("openblas_get_num_threads")
                put = lib._get_symbol("openblas_set_num_threads")
            except Exception:  # pragma: no cover - another threadpoolctl
                get = put = None
            if get is not None and put is not None:
                pool = _pool_of(lib)
                if pool is None:
                    return get, put
                # a pool that quiet_blas_workers stopped stays stopped: OpenBLAS's setter would start it again
                # (its workers then spinning for 0.1 s, found and stopped by the next call: measured, 22 stops
                # in 23 back-to-back hooi calls)
                return get, (lambda n, put=put, pool=pool: pool.set_count_stopped(n) or put(n))
        return (lambda: int(lib.num_threads)), (lambda n: cls._set(lib, n))

    def caller_threads(self) -> int:
        """The BLAS thread count the caller set (while pinned: the count saved on the way in)."""
        with self.lock:
            if self.saved is not None:
                return max(self.saved, default=1)
            self._libraries()
            # (each library's own getter: OpenBLAS's C entry point, not threadpoolctl's property, which looks the
            # symbol up again on every call; a loop, not max() over a generator: every small call pays for this)
            most = 0
            for get, _ in self.access:
                n = int(get())
                if n > most:
                    most = n
            return most if self.access else _cpus()

    @staticmethod
    def _set(lib: Any, n: int) -> None:
        # threadpoolctl lets only one "controlling" Python thread change OpenBLAS's (process-wide) count and
        # silently ignores the others; a tuckerkit call may come from any thread, so set it directly
        setter = getattr(lib, "_real_set_num_threads", None) or lib.set_num_threads
        setter(n)

    def enter(self) -> None:
        with self.lock:
            if self.inside == 0:
                self.quieted = False
                self.pinned = list(self._libraries())
                access = self.pinned_access = list(self.access)
                self.saved = saved = []
                for get, put in access:
                    n = get()
                    saved.append(n)
                    if n != 1:
                        put(1)
            elif len(sys.modules) != self.modules_seen:  # an import inside the pin: pin what it loaded too
                self._pin_new()
            self.inside += 1
            self.mine.n = getattr(self.mine, "n", 0) + 1

    def _pin_new(self) -> None:
        """Hold at one thread the libraries loaded since the outermost call came in (lock held)."""
        have = {getattr(lib, "filepath", None) for lib in self.pinned}  # (a new look makes new controllers)
        for lib, acc in zip(self._libraries(), self.access, strict=True):
            if getattr(lib, "filepath", None) not in have:
                n = acc[0]()
                if n != 1:
                    acc[1](1)
                self.pinned.append(lib)
                self.pinned_access.append(acc)
                if self.saved is not None:
                    self.saved.append(n)

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1
            self.mine.n = getattr(self.mine, "n", 1) - 1
            if self.inside == 0:
                self._restore()

    def _restore(self) -> None:
        """Every pinned library back at the caller's count (lock held, or no other thread)."""
        saved = self.saved or []
        for i, (get, put) in enumerate(self.pinned_access):
            n = saved[i]
            if n != 1 or int(get()) != n:  # one it held at 1 is set back without asking first
                put(n)
        self.saved = None

    def after_fork_in_child(self) -> None:
        """A forked child has only the thread that forked: the calls other threads were inside never leave
        there. The count becomes that thread's own (0 unless a callback forked), and at 0 the libraries go back
        to the caller's counts (the child's calls had stopped pinning, their bits changed, and
        ``threadpool_limits(1)`` was ignored). The lock is made anew (another thread may have held it)."""
        self.lock = threading.Lock()
        self.inside = max(0, getattr(self.mine, "n", 0))
        if self.inside == 0 and self.saved is not None:
            try:
                self._restore()
            except Exception:  # pragma: no cover (a library that cannot be set in the child: left as it is)
                self.saved = None

    # a context manager without a generator (a planned small contraction enters it on every call)
    __enter__ = enter

    def __exit__(self, *exc: object) -> None:
        self.leave()


_PIN = _BlasPin()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_PIN.after_fork_in_child)


def scipy_linalg() -> Any:
    """``scipy.linalg``, imported where first needed (``import tuckerkit`` and sparse CP runs never load it:
    0.1-0.3 s and 15 MB of a command-line run). Its wheel bundles an OpenBLAS of its own: loaded inside a
    pinned call, that library is held at one thread before this returns, so the call's LAPACK runs as every
    later call's does (measured before: the first ``cp_als(X, 50)`` of a process on 200^3 gave other bits than
    the next ones; ``eigh``'s results change with the thread count). Every LAPACK call of tuckerkit's gets
    ``scipy.linalg`` through this function, except those numpy's own LAPACK makes (``numpy.linalg``, and the
    float64 and complex128 thin QR of :func:`tuckerkit.engine._subspace._thin_q`), whose OpenBLAS is numpy's."""
    import scipy.linalg

    pin = _PIN
    if pin.inside and len(sys.modules) != pin.modules_seen:
        with pin.lock:
            if pin.inside:
                pin._pin_new()
    return scipy.linalg


# ---------------------------------------------------------------------------------------------------
# OpenBLAS's idle workers
# ---------------------------------------------------------------------------------------------------
QUIET_MIN_FLOPS = 64_000_000
"""A product split over the workers from this many flops first quiets OpenBLAS's spinning workers."""


QUIET_SPIN_LOG2 = 16
"""Pools whose idle workers spin at most 2^this ticks of the cycle counter (``OPENBLAS_THREAD_TIMEOUT`` of 16 or
less; about 20-30 us at 2-3 GHz) are left alone: their workers sleep before a look at ``/proc`` (0.1-0.15 ms right
after a 64 MB product) would find them running. Measured on the 2-core AVX-512 machine with
``OPENBLAS_THREAD_TIMEOUT=4`` (the benchmarks' setting), the call right after a threaded product: the worker's
``/proc`` state was ``S`` in 41 of 41 looks, and the step cost 0.15-0.3 ms of each call to find nothing."""


class _OpenblasPool:
    """The entry points of one OpenBLAS library's own thread pool: its shutdown (what OpenBLAS itself runs
    before a ``fork``; the next threaded call starts the workers again), whether the pool is up, how many
    threads it has, and its thread count."""

    def __init__(self, path: str, config: bytes) -> None:
        import ctypes

        lib = ctypes.CDLL(path)
        self.path = path
        self.shutdown = lib.blas_thread_shutdown_
        self.avail = ctypes.c_int.in_dll(lib, "blas_server_avail")
        self.threads = ctypes.c_int.in_dll(lib, "blas_num_threads")
        self.count = ctypes.c_int.in_dll(lib, "blas_cpu_number")
        # without thread affinity, OpenBLAS's setter does nothing else to a pool's count than store it
        self.plain_count = b"NO_AFFINITY" in config
        # how long its idle workers spin before they sleep: 2^n ticks of the cycle counter, n from
        # OPENBLAS_THREAD_TIMEOUT (read when OpenBLAS loads; OpenBLAS clamps it to 4-30, 0 or unset: its default 28)
        try:
            n = int(lib.openblas_thread_timeout())
        except AttributeError:  # pragma: no cover - an OpenBLAS without the entry point: its default
            n = 0
        self.spin_log2 = min(max(n, 4), 30) if n > 0 else 28

    def idle_workers(self) -> bool:
        """Whether the pool is up with workers that spin long enough to matter (:data:`QUIET_SPIN_LOG2`)."""
        return self.spin_log2 > QUIET_SPIN_LOG2 and bool(self.avail.value) and self.threads.value > 1

    def set_count_stopped(self, n: int) -> bool:
        """Set the thread count of a stopped pool without starting it (the next threaded call starts it, as
        after a ``fork``); False where the pool is up or OpenBLAS's own setter must do it."""
        if self.plain_count and not self.avail.value and 1 <= n <= max(self.threads.value, 1):
            self.count.value = n
            return True
        return False


_QUIET: dict[str, _OpenblasPool | None] = {}
QUIETED = [0]  # pools stopped by quiet_blas_workers in this process (for tests and diagnostics)


def _pool_of(lib: Any) -> _OpenblasPool | None:
    """The pool of a loaded OpenBLAS library that runs its own (pthreads) workers and exports the entry
    points (numpy's and scipy's wheels since OpenBLAS 0.3.2x); None for others, which are left alone."""
    path = getattr(lib, "filepath", None)
    if (not path or getattr(lib, "internal_api", None) != "openblas"
            or getattr(lib, "threading_layer", None) != "pthreads"):
        return None
    if path not in _QUIET:
        try:
            import ctypes

            cfg = lib._get_symbol("openblas_get_config")
            cfg.restype = ctypes.c_char_p
            _QUIET[path] = _OpenblasPool(path, cfg() or b"")
        except Exception:  # another build or threadpoolctl: no such symbols
            _QUIET[path] = None
    return _QUIET[path]


_POOLS_SEEN: list[Any] = [None, []]  # the library list last looked at, and its pools


def _openblas_pools() -> list[_OpenblasPool]:
    """The pools of the loaded OpenBLAS libraries (:func:`_pool_of`), looked up again when the list changes."""
    libs = _PIN._libraries()
    if _POOLS_SEEN[0] is not libs:
        _POOLS_SEEN[:] = [libs, [p for p in map(_pool_of, libs) if p is not None]]
    return _POOLS_SEEN[1]


def _foreign_threads_running() -> bool:
    """Whether a thread of this process that Python did not start (a BLAS library's worker) is running or
    runnable now: ``R`` in its ``/proc`` state (Linux only; elsewhere False)."""
    own = {t.native_id for t in threading.enumerate()}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # pragma: no cover - not Linux
        return False
    for name in tids:
        if not name.isdigit() or int(name) in own:
            continue
        try:  # (os.open / os.read: about 30 us less than open() per call, cold, right after a 64 MB read)
            fd = os.open(f"/proc/self/task/{name}/stat", os.O_RDONLY)
        except OSError:  # the thread ended meanwhile
            continue
        try:
            stat = os.read(fd, 1024)
        except OSError:  # pragma: no cover - the thread ended between the open and the read
            continue
        finally:
            os.close(fd)
        end = stat.rfind(b")")
        if stat[end + 2:end + 3] == b"R":
            return True
    return False


def quiet_blas_workers() -> bool:
    """Stop OpenBLAS's workers that spin beside a parallel section of ours; True when it did.

    After a multi-threaded call OpenBLAS's workers wait for the next one spinning (``nop`` loops, no yield)
    for 2^28 cycles, about 0.1 s: a numpy product just before a tuckerkit call leaves one on each other core,
    and the call's workers share their cores with it. Measured on the 2-core machine (OpenBLAS's default
    timeout; each call right after a threaded 500 x 500 product, medians of 9 interleaved with the step off):
    0.70x the time for ``hooi(X, 10)`` on 200^3 (38.9 against 55.8 ms), 0.84x for ``cp_als(X, 10)``, 0.72-0.83x
    for rank-32 TTMs; calls back to back with no product between: 0.96-1.02x.
    The step runs OpenBLAS's own pool shutdown, the one OpenBLAS runs before every ``fork``: the workers end;
    the pin sets a stopped pool's thread count without starting it (:meth:`_OpenblasPool.set_count_stopped`),
    and the next threaded BLAS call starts it again (about 0.1 ms). Back-to-back calls then find nothing to
    stop (with OpenBLAS's setter restarting the pool, 22 of 23 back-to-back ``hooi`` calls stopped it again).

    It acts only when an OpenBLAS pool is up with workers that spin (not with ``OPENBLAS_THREAD_TIMEOUT`` of
    :data:`QUIET_SPIN_LOG2` or less) and a thread Python did not start is running (``/proc``, about 15 us to
    look warm, 0.1-0.2 ms right after a 64 MB read: skipped where no such pool is up), and never
    while a Python thread other than tuckerkit's own is alive: another thread could be inside BLAS, whose
    pool must not end under it. Inside a pinned call it looks once (every BLAS library stays at one thread
    until the call returns, so no worker starts spinning again). ``TUCKERKIT_BLAS_QUIET=0`` turns it off.
    """
    pin = _PIN
    if pin.inside and pin.quieted:
        return False
    if pin.inside:
        pin.quieted = True
    if os.environ.get("TUCKERKIT_BLAS_QUIET") == "0":
        return False
    # (no pool up with workers that spin: nothing to stop, and no look at /proc, 0.1-0.3 ms cold)
    pools = [p for p in _openblas_pools() if p.idle_workers()]
    if not pools:
        return False
    me = threading.current_thread()
    if any(t is not me and not t.name.startswith("tuckerkit") for t in threading.enumerate()):
        return False
    if not _foreign_threads_running():
        return False
    done = False
    with pin.lock:
        # numpy's library first (the one numpy's products run on), then the others while a foreign thread
        # still runs: once none does, the pools left are left up
        pools.sort(key=lambda p: "numpy" not in p.path)
        for pool in pools:
            if done and not _foreign_threads_running():
                break
            if pool.idle_workers():
                pool.shutdown()
                QUIETED[0] += 1
                done = True
    return done


def blas_pinned() -> _BlasPin:
    """Every BLAS library at one thread inside the block (re-entrant, safe from several threads); the
    caller's thread counts restored exactly when the last block exits, also on an exception.

    Returns
    -------
    context manager
        Use as ``with blas_pinned(): ...``.

    Examples
    --------
    >>> from threadpoolctl import threadpool_info
    >>> from tuckerkit.engine import blas_pinned
    >>> with blas_pinned():
    ...     {d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}
    {1}
    """
    return _PIN


# ---------------------------------------------------------------------------------------------------
# splits and workers
# ---------------------------------------------------------------------------------------------------
def split_points(size: int, flops: int, most: int = MAX_PIECES) -> list[int]:
    """Cut points splitting ``size`` items of ``flops`` work into pieces of at least MIN_CHUNK_FLOPS each
    and at most ``most`` pieces (MAX_PIECES; :data:`BLAS_MAX_PIECES` for a BLAS product): a function of the
    sizes only (and of ``most``), never of the workers or the load.

    Examples
    --------
    >>> from tuckerkit.engine._policy import split_points
    >>> split_points(10, 100), split_points(10, 4_000_000), split_points(10, 4_000_000, most=2)
    ([0, 10], [0, 2, 5, 7, 10], [0, 5, 10])
    """
    n = max(1, min(size, most, flops // MIN_CHUNK_FLOPS))
    return [size * i // n for i in range(n + 1)]


def blas_max_pieces(cpus: int | None) -> int:
    """The most pieces :func:`~tuckerkit.engine._contract.cpu_matmul` cuts a BLAS product into on a machine
    of ``cpus`` logical CPUs (``os.cpu_count()``; None: unknown): two a CPU, rounded up to a power of two
    (so the pieces balance over 1, 2, 4 ... workers), between 2 and MAX_PIECES.

    Each piece is a BLAS call of its own that packs its share of one operand and all of the other again, so
    more pieces than the cores can run at once cost time. Measured on the project's 2-core AVX-512 machine
    (float64, two workers, interleaved medians of 9 in one process; 16 -> 4 pieces): a 1000^3 GEMM 17.9 ->
    14.4 ms (OpenBLAS's own two threads: 14.1), 60^4's two CP-ALS partials at rank 50 ((3600 x 3600) times
    (3600 x 50), either side) 14.6-15.0 -> 12.8-12.9 ms each, 200^3's first- and last-mode products at ranks
    32 and 50 0.96-1.02x; whole calls (5 iterations, medians of 3 rounds, two runs): CP-ALS on 60^4 at rank
    50 0.88x the time in float64 and 0.96x in float32, on 200^3 0.98x; HOOI (60^4 at ranks 10 and 20, 200^3,
    100^4) and CP-ALS at rank 10 0.98-1.02x; the seed's Table II at n = 128 / 256 (geometric means over its
    36 cases, medians of 3-9 rounds) 0.97 / 0.99x in float64, 0.99 / 0.97x in float32, every case 0.84-1.09x.
    Two pieces instead of four ran 0.97-1.03x of that, but leave a busy machine's free core no piece to take
    from the other.

    The bits of a BLAS product depend on its cut (OpenBLAS sums a piece's own blocks), so they are the same
    for any workers and any load on one machine, and on machines of the same CPU count.

    >>> [blas_max_pieces(c) for c in (None, 1, 2, 3, 4, 8, 64)]
    [16, 2, 4, 8, 8, 16, 16]
    """
    if not cpus or cpus < 1:
        return MAX_PIECES
    return max(2, min(MAX_PIECES, 1 << (2 * cpus - 1).bit_length()))


#: :func:`blas_max_pieces` of this machine (fixed at import: its CPU count, not the process's affinity)
BLAS_MAX_PIECES = blas_max_pieces(os.cpu_count())


_POOL_LOCK = threading.Lock()
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(n: int) -> ThreadPoolExecutor:
    """A shared pool of ``n`` helper threads (a process resource like numba's own pool; made on first use)."""
    with _POOL_LOCK:
        pool = _POOLS.get(n)
        if pool is None:
            pool = _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tuckerkit")
        return pool


def _in_worker() -> bool:
    return threading.current_thread().name.startswith("tuckerkit")


def parallel_for(work: Callable[[int, Any], None], n_items: int, policy: ExecutionPolicy,
                 make_state: Callable[[], Any] = lambda: None) -> list[Any]:
    """Run ``work(i, state)`` for ``i in range(n_items)`` on the calling thread and up to ``workers - 1``
    pool threads; each thread takes the next unclaimed item when free and keeps its own ``state`` from
    ``make_state()``. Returns the states of the threads that took part.

    Items must not depend on which thread runs them (write disjoint outputs, or partials combined by the
    caller in item order): then the result is the same for any number of workers. One failing item stops
    the others taking new items, and nothing runs on after the call returns.
    """
    w = min(policy.workers, n_items)
    if w < 2 or _in_worker():
        st = make_state()
        for i in range(n_items):
            work(i, st)
        return [st]
    counter = itertools.count()
    lock = threading.Lock()
    failed = threading.Event()
    # the pool threads see the work through this list, emptied before returning: a finished task's closure
    # stays reachable from its pool thread until that thread next runs (and a cancelled one from the queue),
    # and through ``work`` it held the caller's arrays (CP-ALS under load: the previous dimension-tree partial
    # alive beside the next, 2-3x the peak)
    task: list[Callable[..., Any]] = [work, make_state]

    def drain() -> Any:
        if not task:
            return None
        run, make = task
        st = None
        while not failed.is_set():
            with lock:
                i = next(counter)
            if i >= n_items:
                return st
            if st is None:
                st = make()
            try:
                run(i, st)
            except BaseException:
                failed.set()
                raise
        return st

    handoff = sys.modules.get("tuckerkit.engine._handoff")
    if handoff is not None:  # the GIL-free GEMM helpers stop spinning: this section needs the cores
        handoff.park()
    quiet_blas_workers()  # and so do OpenBLAS's own
    pool = _pool(w - 1)
    futures = []
    for _ in range(w - 1):
        try:
            futures.append(pool.submit(drain))
        except RuntimeError:  # (the interpreter is shutting down: an atexit hook's or a daemon thread's call raised
            # "cannot schedule new futures after interpreter shutdown"; the items run here and on those submitted)
            break
    error: BaseException | None = None
    try:
        states = [drain()]
    except BaseException as exc:
        error, states = exc, []
    for f in futures:
        if f.cancel():  # never started
            continue
        try:  # already running: it holds at most one item; never leave it writing after we return
            states.append(f.result())
        except BaseException as exc:
            error = error or exc
    task.clear()
    del futures
    if error is not None:
        raise error
    return [st for st in states if st is not None]


def parallel_map(fn: Callable[[Any], Any], items: list, policy: ExecutionPolicy) -> list:
    """``[fn(item) for item in items]`` over the policy's workers (dynamically scheduled, results in order)."""
    out: list[Any] = [None] * len(items)

    def work(i: int, _: Any) -> None:
        out[i] = fn(items[i])

    parallel_for(work, len(items), policy)
    return out
