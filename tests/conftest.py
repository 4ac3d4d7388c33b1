"""Shared fixtures: array namespace (numpy, and cupy where a GPU is present), dtype, layout, seed.

The real-cupy variants skip cleanly where cupy or a GPU is missing, unless ``TUCKERKIT_REQUIRE_GPU=1``
(``make test-gpu`` sets it): then each of them fails with the reason, so a GPU run cannot pass by skipping.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

REQUIRE_GPU = os.environ.get("TUCKERKIT_REQUIRE_GPU", "").strip() not in ("", "0")


def cupy_unavailable() -> str | None:
    """Why the real cupy cannot run here (one line), or None when it can."""
    try:
        import cupy
    except ModuleNotFoundError as exc:
        if exc.name in (None, "cupy"):
            return "cupy is not installed"
        return f"cupy cannot be imported (ModuleNotFoundError: {exc})"
    except Exception as exc:  # installed but broken (e.g. the build for another CUDA major version)
        return f"cupy cannot be imported ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else "no details"
        return f"cupy finds no usable CUDA GPU ({type(exc).__name__}: {first})"
    return None if count > 0 else "cupy finds no CUDA GPU"


_CUPY_MISSING = cupy_unavailable()


@pytest.fixture(autouse=True)
def _empty_block_pool(monkeypatch):
    """Every test starts with the engine's block pool empty, and ``tracemalloc.start()`` empties it again: a
    peak-memory figure then counts the blocks the traced call makes, not idle ones that an earlier call (a
    warm-up, another test) left for it to reuse untraced."""
    import tracemalloc

    from tuckerkit.engine import release_memory

    release_memory()
    start = tracemalloc.start

    def start_empty(*args):
        release_memory()
        return start(*args)

    monkeypatch.setattr(tracemalloc, "start", start_empty)
    yield
def traced_peak(fn) -> int:
    """Peak bytes ``fn()`` allocates (tracemalloc; numpy's buffers included) from an empty block pool, after
    one untraced call (plans, compiled kernels, first-use state)."""
    import tracemalloc

    fn()
    tracemalloc.start()  # (empties the pool: _empty_block_pool)
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


_XP_PARAMS = [pytest.param("numpy", id="numpy"), pytest.param("fakecupy", id="fakecupy")]
_XP_PARAMS.append(
    pytest.param(
        "cupy",
        id="cupy",
        marks=[pytest.mark.gpu] + ([pytest.mark.skip(reason=_CUPY_MISSING)] if _CUPY_MISSING and not REQUIRE_GPU
                                   else []),
    )
)


@pytest.fixture(params=_XP_PARAMS)
def xp(request, monkeypatch):
    """The array module under test: numpy; ``fakecupy`` (tests/_fakecupy.py: numpy-backed, so every GPU code
    path runs and its host round trips are counted without a GPU); the real cupy where a GPU is present
    (skipped cleanly otherwise; failed, with the reason, under ``TUCKERKIT_REQUIRE_GPU=1``)."""
    if request.param == "numpy":
        return np
    if request.param == "fakecupy":
        import _fakecupy

        cp, cpx = _fakecupy.make()
        monkeypatch.setitem(sys.modules, "cupy", cp)
        monkeypatch.setitem(sys.modules, "cupyx", cpx)
        _fakecupy.COUNTS.clear()
        return cp
    if _CUPY_MISSING:  # only reached under TUCKERKIT_REQUIRE_GPU=1
        pytest.fail(f"TUCKERKIT_REQUIRE_GPU=1 but {_CUPY_MISSING}", pytrace=False)
    import cupy

    return cupy


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def dtype(request):
    return np.dtype(request.param)


@pytest.fixture(params=["C", "F", "view"])
def layout(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


def make_tensor(rng, shape, dtype=np.float64, layout="C", xp=np):
    """A random tensor of ``shape`` in the given layout: C order, F order, or a strided (sliced, permuted) view."""
    shape = tuple(shape)
    if layout == "C":
        x = rng.standard_normal(shape).astype(dtype)
    elif layout == "F":
        x = np.asfortranarray(rng.standard_normal(shape).astype(dtype))
    elif layout == "view":
        # a slice with step 2 on the first mode of a bigger array, stored in reversed mode order
        if not shape:
            return xp.asarray(rng.standard_normal(()).astype(dtype))
        big = rng.standard_normal((*reversed(shape[1:]), 2 * shape[0] + 1)).astype(dtype)
        x = big.transpose(tuple(range(len(shape) - 1, -1, -1)))[1::2][: shape[0]]
        assert x.shape == shape
    else:
        raise ValueError(layout)
    if xp is np:
        return x
    out = xp.empty(x.shape, dtype=x.dtype, order="F" if layout == "F" else "C")
    out[...] = xp.asarray(x)
    return out


def draw(rng, shape, dtype):
    """A standard normal array of ``dtype`` (complex: independent real and imaginary parts)."""
    A = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        A = A + 1j * rng.standard_normal(shape)
    return A.astype(dtype)


def to_numpy(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def assert_contraction_close(result, spec, A, B, dtype):
    """|C - einsum| <= c * k * eps * einsum(|A|, |B|) elementwise (the standard GEMM error bound)."""
    A, B, C = to_numpy(A), to_numpy(B), to_numpy(result)
    ref = np.einsum(spec, A.astype(np.float64), B.astype(np.float64))
    scale = np.einsum(spec, np.abs(A).astype(np.float64), np.abs(B).astype(np.float64))
    lhs = spec.split("->")[0].split(",")
    summed = {ch for ch in lhs[0] + lhs[1] if ch not in spec.split("->")[1]}
    sizes = {}
    for sub, arr in zip(lhs, (A, B), strict=True):
        sizes.update(dict(zip(sub, arr.shape, strict=True)))
    k = int(np.prod([sizes[ch] for ch in summed])) if summed else 1
    eps = np.finfo(dtype).eps
    assert C.shape == ref.shape
    assert C.dtype == np.dtype(dtype)
    err = np.abs(C.astype(np.float64) - ref)
    bound = 4 * (k + 2) * eps * scale + np.finfo(dtype).tiny
    worst = np.max(err - bound) if err.size else 0.0
    assert worst <= 0, f"error exceeds bound by {worst}: max err {err.max()}"


def pytest_collection_modifyitems(config, items):
    """Cases a test module lists in its ``KNOWN`` as (test name, parameter, value, reason, exception) are expected
    to fail with that exception (strict: one that starts passing, or fails otherwise, fails the run, so the list
    stays true)."""
    for item in items:
        known = getattr(getattr(item, "module", None), "KNOWN", None)
        if not known:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        for name, param, value, reason, raises in known:
            if item.originalname == name and (param is None or params.get(param) == value):
                item.add_marker(pytest.mark.xfail(strict=True, reason=reason, raises=raises))


@pytest.fixture
def forced(monkeypatch):
    """The cost model's constants set so that every eligible real TTM runs the compiled small-rank kernel, at
    any size (tests/test_smallgemm.py; tests/test_complex.py checks that complex ones still do not)."""
    from tuckerkit.engine import _contract as contract_mod
    from tuckerkit.engine import _plan as plan_mod
    from tuckerkit.engine import _smallgemm as sg
    from tuckerkit.engine._roofline import ENV

    monkeypatch.setenv(ENV, "bw=1e10,peak=1e10")
    monkeypatch.setattr(plan_mod, "SMALL_RANK_MIN_FLOPS", 0)
    monkeypatch.setattr(plan_mod, "SMALL_RANK_TINY_MIN_FLOPS", 0)
    for key in list(sg._KERNEL_EFF):
        monkeypatch.setitem(sg._KERNEL_EFF, key, (50.0, 50.0))
    for table in (sg.TINY_EFF, sg.SHORT_EFF):  # (the tiny- and short-rows kernels' own rates)
        for key in list(table):
            monkeypatch.setitem(table, key, 50.0)
    # (and the planner's rules that leave some shapes to BLAS whatever the rates: a heavy U, a GEMV's R = 1,
    # many short slabs against OpenBLAS's small-matrix kernels)
    monkeypatch.setattr(sg, "inner_u_heavy", lambda *a: False)
    monkeypatch.setattr(sg, "gemv_beats_inner", lambda *a: False)
    monkeypatch.setattr(sg, "short_rows_to_blas", lambda *a: False)
    monkeypatch.setattr(sg, "tiny_slabs_to_blas", lambda *a: False)
    contract_mod._cached_plan.cache_clear()
    yield
    contract_mod._cached_plan.cache_clear()


@pytest.fixture
def planned_cp(monkeypatch):
    """CP-ALS's compiled small sweep kept within the direct route's bounds (no tensor past them takes it where
    its products run the small-rank kernels, ``_small_cp.beyond_direct``): tests of the planner's CP sweeps on
    mid-size tensors."""
    from tuckerkit.decomposition import _small_cp

    monkeypatch.setattr(_small_cp, "SMALL_CP_KERNEL_MAX_ELEMS", 0)


@pytest.fixture
def planned_sweeps(monkeypatch):
    """Every dense sweep planned, however small the tensor (tests of the planned route's own behaviour; by
    default a small tensor takes the direct route of engine/_direct.py)."""
    planned_only(monkeypatch)


def planned_only(monkeypatch) -> None:
    """Turn engine/_direct.py's route off for the test (its thresholds; ``DIRECT_TTMC_ELEMS`` = 0 caps the 3-way
    ones too)."""
    from tuckerkit.engine import _direct

    monkeypatch.setattr(_direct, "DIRECT_SWEEP_FLOPS", 0)
    monkeypatch.setattr(_direct, "DIRECT_TTMC_ELEMS", 0)
    monkeypatch.setattr(_direct, "DIRECT_MTTKRP_ELEMS", 0)


def cli_invoke(args):
    """The command line in-process (typer's runner), every argument as a string."""
    from tuckerkit.cli import app
    from typer.testing import CliRunner

    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(res, message: str) -> None:
    """Exit 1, exactly one line on the output, ``error: <message>`` (no traceback, no 'Aborted!')."""
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines() == [f"error: {message}"], res.output


def folder_state(path):
    """Each file's size and modification time in a folder: equal before and after a refused call."""
    return {q.name: (q.stat().st_size, q.stat().st_mtime_ns) for q in path.iterdir()}


@pytest.fixture
def x_file(tmp_path, rng):
    """A (6, 7, 8) float64 tensor saved as ``x.npy``: the path and the array."""
    X = rng.random((6, 7, 8))
    p = tmp_path / "x.npy"
    np.save(p, X)
    return p, X
