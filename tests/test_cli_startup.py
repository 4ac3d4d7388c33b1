"""Start-up of `import tuckerkit` and of the command line: what they import, and that the shortcuts they take
(option values converted without pydantic, cached kernels loaded without numba's registry refresh) give the
same values, messages and result files as the long way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
from tuckerkit.cli import app
from tuckerkit.cli._params import _Coercion
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param
from typer.testing import CliRunner


def _run_py(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_import_tuckerkit_leaves_heavy_packages_unimported():
    code = ("import sys, json, tuckerkit\n"
            "heavy = ('scipy.linalg', 'scipy.sparse', 'scipy.optimize', 'dask', 'sklearn', 'numba', 'pydantic',"
            " 'rich', 'h5py', 'sparse', 'typer')\n"
            "print(json.dumps([m for m in heavy if m in sys.modules]))\n")
    out = _run_py(code)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_functions_that_need_scipy_linalg_still_import_it():
    code = ("import sys, numpy as np, tuckerkit as tk\n"
            "from tuckerkit.decomposition._linalg import spd_solve\n"
            "V = np.array([[4.0, 1.0], [1.0, 3.0]]); M = np.array([[1.0, 2.0]])\n"
            "U = spd_solve(V, M)\n"
            "assert np.allclose(U @ V, M), U\n"
            "X = np.random.default_rng(0).random((6, 5, 4))\n"
            "T = tk.hosvd(X, (2, 2, 2))\n"
            "print('scipy.linalg' in sys.modules, T.ranks)\n")
    out = _run_py(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "(2,", "2,", "2)"]


def test_a_default_hooi_call_on_low_rank_data_needs_no_scipy_linalg():
    """The eigensteps of HOOI's default call certify by subspace iteration, whose QR is numpy's own LAPACK:
    a fresh process whose kernels come from numba's cache then never imports scipy.linalg (0.11-0.16 s of the
    first call), nor numpy.ma (20-26 ms)."""
    code = ("import sys, numpy as np, tuckerkit as tk\n"
            "rng = np.random.default_rng(0)\n"
            "U = [np.linalg.qr(rng.standard_normal((n, 10)))[0] for n in (120, 110, 100)]\n"
            "X = np.einsum('abc,ia,jb,kc->ijk', rng.standard_normal((10, 10, 10)), *U, optimize=True)\n"
            "X += 1e-3 * np.linalg.norm(X) * rng.standard_normal(X.shape) / np.sqrt(X.size)\n"
            "T = tk.hooi(X, 10)\n"
            "print('scipy.linalg' in sys.modules, 'numpy.ma' in sys.modules, round(float(T.fit), 4))\n")
    for _ in range(2):  # the first run compiles what numba's cache lacks (its compiler imports scipy.linalg)
        out = _run_py(code)
        assert out.returncode == 0, out.stderr
    # nor numpy.ma: numba's typing of our kernels' array arguments would import it (tuckerkit/_numba_load.py)
    assert out.stdout.split() == ["False", "False", "0.999"]


def _decompose_params():
    cmd = typer.main.get_command(app).commands["decompose"]
    return cmd, {p.name: p for p in cmd.params}


INTS = ["0", "16", "-3", "007", "+5", " 5", "5 ", "1_000", "1e3", "3.0", "abc", "", "99999999999999999999",
        "123456789012345678", "\u0661\u0662", "0x10", "--1"]
FLOATS = ["1e-5", "0.01", ".5", "5.", "-0", "-0.0", "1E3", "0", "42", "inf", "-inf", "nan", "1_0", "abc", "",
          "1e400", "1e-400", "2.2250738585072014e-308", "0.1e-310", "123456789012345678901234567890",
          "1e-5 ", " 1", "+1.5", "1.5e+2", "1.5e", "e5", ".", "-.5", "0.30000000000000004", "1e-05"]
STRS = ["hooi", "", " x ", "cuda:0", "10,10,10", "\u00e9"]


def _outcome(rt, value, param, ctx):
    try:
        out = rt.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return ("error", exc.format_message())
    return ("value", type(out), out if not isinstance(out, float) or out == out else "nan")


@pytest.mark.parametrize("name,values", [("rank", INTS), ("seed", INTS), ("stop_tol", FLOATS),
                                         ("max_error", FLOATS), ("method", STRS), ("ranks", STRS)])
def test_option_values_convert_as_typer_does(name, values):
    cmd, params = _decompose_params()
    ctx = Context(cmd)
    p = params[name]
    typer_own = build_runtime_param(p.type_descriptor)
    ours = _Coercion(p)
    for v in [*values, None]:
        assert _outcome(ours, v, p, ctx) == _outcome(typer_own, v, p, ctx), v
    for v in values:  # bit for bit, -0.0 and the correctly rounded decimals included
        a, b = _outcome(ours, v, p, ctx), _outcome(typer_own, v, p, ctx)
        if a[0] == "value" and isinstance(a[2], float):
            assert np.float64(a[2]).tobytes() == np.float64(b[2]).tobytes(), v


def test_path_values_convert_as_typer_does(tmp_path):
    cmd, params = _decompose_params()
    ctx = Context(cmd)
    (tmp_path / "x.npy").write_bytes(b"")
    values = [str(tmp_path / "x.npy"), str(tmp_path / "missing.npz"), str(tmp_path), "-", "", "rel/out.npz",
              tmp_path / "x.npy"]
    for name in ("input", "output", "mask"):
        p = params[name]
        typer_own, ours = build_runtime_param(p.type_descriptor), _Coercion(p)
        for v in [*values, None]:
            assert _outcome(ours, v, p, ctx) == _outcome(typer_own, v, p, ctx), (name, v)


def test_bad_option_value_message_is_typer_own():
    res = CliRunner().invoke(app, ["decompose", "x.npy", "--method", "cp", "--rank", "abc"])
    assert res.exit_code == 2
    assert res.output.splitlines() == ["error: --rank must be an integer; received 'abc'"]  # one line (the CLI's)
    res = CliRunner().invoke(app, ["decompose", "x.npy", "--method", "cp", "--rank", "3", "--stop-tol", "1e"])
    assert res.exit_code == 2
    assert res.output.splitlines() == ["error: --stop-tol must be a number; received '1e'"]


def _write_tns(path: Path) -> None:
    rng = np.random.default_rng(3)
    shape = (30, 25, 20)
    coords = np.unique(np.stack([rng.integers(0, s, 1500) for s in shape], axis=1), axis=0)
    vals = rng.random(coords.shape[0]) + 0.1
    lines = [" ".join(str(int(i) + 1) for i in c) + f" {float(v)!r}" for c, v in zip(coords, vals, strict=True)]
    path.write_text("\n".join(lines) + "\n")


_CLI = """
import atexit, gc, json, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, file=sys.stderr))  # runs last
sys.argv = ["tuckerkit", "decompose", {tns!r}, *{args!r}, "-o", {out!r}]
from tuckerkit.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = ("pydantic", "typer._adapters", "numba.np.random.generator_methods", "numba.np.polynomial",
         "numba.typed.typedset", "numba.np.linalg", "sparse", *{extra!r})
print(json.dumps([m for m in heavy if m in sys.modules]), file=sys.stderr)
"""


_CP_ARGS = ["--method", "cp", "--rank", "4", "--iterations", "5", "--seed", "1", "--force", "--no-linesearch",
            "--quiet"]


@pytest.mark.parametrize(("suffix", "args", "summary"), [
    (".tns", _CP_ARGS, "cp of 30x25x20 float64: rank 4"),
    (".npy", _CP_ARGS, "cp of 30x25x20 float64: rank 4"),
    (".npy", ["--ranks", "3,3,3", "--iterations", "3", "--force", "--quiet"], "hooi of 30x25x20 float64"),
])
def test_console_script_run_loads_cached_kernels_lightly_and_writes_the_same_result(tmp_path, suffix, args,
                                                                                     summary):
    tns = tmp_path / f"t{suffix}"
    _write_tns(tmp_path / "t.tns")
    if suffix == ".npy":  # the same tensor, dense
        from tuckerkit.io import load_tensor

        np.save(tns, load_tensor(tmp_path / "t.tns").to_dense())
    ref = tmp_path / "ref.npz"
    res = CliRunner().invoke(app, ["decompose", str(tns), *args, "-o", str(ref)])
    assert res.exit_code == 0, res.output  # in this process: numba's usual path (and its cache written)
    out = tmp_path / "out.npz"
    # a sparse CP run needs no LAPACK (numpy's Cholesky): scipy.linalg stays unloaded (0.1-0.3 s, 15 MB)
    code = _CLI.format(tns=str(tns), args=args, out=str(out), extra=("scipy.linalg",) if suffix == ".tns" else ())
    for _ in range(2):  # the second run finds every kernel in the cache, whatever ran before
        run = _run_py(code, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    assert json.loads(run.stderr.strip().splitlines()[-2]) == []
    assert run.stderr.strip().splitlines()[-1] == "frozen at exit: True"  # main()'s last exit handler ran
    assert summary in run.stdout
    with np.load(ref) as a, np.load(out) as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            if k != "metadata":
                assert a[k].tobytes() == b[k].tobytes(), k
        ma, mb = json.loads(str(a["metadata"])), json.loads(str(b["metadata"]))
    for k in ("seconds", "timestamp"):
        ma.pop(k), mb.pop(k)
    assert ma == mb


def test_light_numba_is_only_for_the_console_script_process():
    from tuckerkit.cli import _app

    assert _app._OWN_PROCESS is False  # CliRunner and applications keep numba as it is
    import numba.core.caching as caching

    assert not getattr(caching.Cache.load_overload, "tuckerkit_light", False)


@pytest.mark.parametrize("kind", ["all", "two", "one"])
def test_dropped_coordinates_come_back_equal(kind):
    from tuckerkit.sparse import COOTensor

    rng = np.random.default_rng(5)
    for shape in [(30, 25, 20), (5, 6, 7, 8), (40, 3)]:
        X = COOTensor(np.stack([rng.integers(0, s, 700) for s in shape], axis=1), rng.random(700), shape)
        assert not X._drop_coords()  # no plan yet: kept
        c0, v0 = X.coords.copy(), X.values.copy()
        X.plan(csf=kind)
        assert X._drop_coords() and X.__dict__["_coords"] is None
        assert X.nnz == c0.shape[0] and np.array_equal(X.values, v0)
        c1 = X.coords  # rebuilt from a tree of the plan
        assert c1.dtype == c0.dtype and c1.flags.c_contiguous and np.array_equal(c1, c0)
        assert X.coords is c1  # once


@pytest.mark.parametrize("linesearch", ["--linesearch", "--no-linesearch"])
def test_cli_sparse_cp_runs_without_the_coordinates(tmp_path, monkeypatch, linesearch):
    import tuckerkit as tk

    tns = tmp_path / "t.tns"
    _write_tns(tns)
    seen = []
    real = tk.cp_als

    def spy(X, *a, **k):
        seen.append(X)
        out = real(X, *a, **k)
        seen.append(X.__dict__.get("_coords", "kept"))
        return out

    monkeypatch.setattr(tk, "cp_als", spy)
    res = CliRunner().invoke(app, ["decompose", str(tns), "--method", "cp", "--rank", "3", "--max-iter", "8",
                                   "--seed", "0", "-o", str(tmp_path / "o.npz"), linesearch, "--quiet"])
    assert res.exit_code == 0, res.output
    assert len(seen) == 2 and seen[1] is None  # dropped before CP-ALS and not needed by it
    from tuckerkit.sparse import COOTensor

    ref = COOTensor.from_tns(tns)
    assert np.array_equal(seen[0].coords, ref.coords)  # and rebuilt equal when asked for afterwards


_LIGHT_RUN = """
import json, sys
sys.path.insert(0, {user!r})
import numpy as np
import tuckerkit as tk
X = np.random.default_rng(3).random((50, 120, 100))
U = np.random.default_rng(4).random((6, 120))
Y = tk.ttm(X, U, 1)  # the compiled small-rank kernel, loaded from numba's cache (after the first run)
from tuckerkit.engine import _smallgemm
assert _smallgemm._inner_kernel.signatures  # (it ran: not a BLAS plan)
ok = bool(np.allclose(Y, np.einsum("ijk,rj->irk", X, U), rtol=0, atol=4 * 120 * np.finfo(float).eps * 120))
ours = "numba.np.linalg" in sys.modules  # imported only by numba's compiler refresh
import user_kernels
assert user_kernels.twice(21) == 42  # a cached kernel of the application's own: numba's usual path
print(json.dumps([ok, ours, "numba.np.linalg" in sys.modules]))
"""


def test_cached_kernels_of_tuckerkit_alone_load_without_numbas_refresh(tmp_path):
    """A process whose tuckerkit kernels come from numba's cache never runs numba's compiler refresh for them
    (tuckerkit/_numba_load.py), while an application's own cached kernel in the same process still loads the
    usual way: the refresh, hence numba.np.linalg, comes with it."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "user_kernels.py").write_text("from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n"
                                          "    return 2 * x\n")
    code = _LIGHT_RUN.format(user=str(user))
    first = _run_py(code, cwd=tmp_path)  # compiles whatever the cache lacks (numba's usual path)
    assert first.returncode == 0, first.stderr
    second = _run_py(code, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1]) == [True, False, True]


def test_load_lightly_changes_only_the_kernels_it_is_given():
    from numba import njit
    from numba.core.caching import Cache

    from tuckerkit import _numba_load
    from tuckerkit.engine import _gram_kernels

    assert getattr(_gram_kernels.to_single_cols._cache, _numba_load._MARK, False)
    assert "load_overload" in vars(_gram_kernels.to_single_cols._cache)  # on the instance, not the class
    assert _numba_load.load_lightly(vars(_gram_kernels)) == 0  # each kernel once

    @njit(cache=True)
    def other(x):  # pragma: no cover - compiled
        return x + 1

    ns = {"other": other, "plain": lambda x: x, "number": 3}
    assert "load_overload" not in vars(other._cache)
    assert _numba_load.load_lightly(ns) == 1
    assert "load_overload" in vars(other._cache) and other(1) == 2
    assert Cache.load_overload.__qualname__ == "Cache.load_overload"  # numba's own class is left as it is


def test_read_only_and_writable_inputs_share_one_compiled_specialization(tmp_path):
    """numba compiles and loads one specialization per argument type, and a read-only array is another type:
    the compiled kernels take their inputs read-only whatever the caller's flag, so a tensor mapped from a file
    and one in memory use the same machine code (a fresh process's first HOOI on a memory-mapped 200^3 loaded
    ``_inner_kernel`` twice), with the same bits."""
    code = ("import json, numpy as np, tuckerkit as tk\n"
            "from tuckerkit.engine import _gram_kernels as g, _smallgemm as s\n"
            "from tuckerkit.engine import ttm\n"
            "rng = np.random.default_rng(0)\n"
            "X = rng.standard_normal((60, 50, 70))\n"
            f"np.save({str(tmp_path / 'x.npy')!r}, X)\n"
            f"M = np.load({str(tmp_path / 'x.npy')!r}, mmap_mode='r')\n"
            "same = []\n"
            "for R in (5, 10, 12):\n"
            "    for m in range(3):\n"
            "        U = rng.standard_normal((X.shape[m], R))\n"
            "        same.append(ttm(X, U, m, transpose=True).tobytes() == ttm(M, U, m, transpose=True).tobytes())\n"
            "a, b = tk.hooi(X, 5, max_iter=2, tol=0), tk.hooi(M, 5, max_iter=2, tol=0)\n"
            "same.append(a.core.tobytes() == b.core.tobytes())\n"
            "sigs = {k.py_func.__name__: [str(t[0]) for t in k.signatures] for k in (\n"
            "    s._inner_kernel, s._outer_dot_kernel, s._outer_gemm_kernel, s._outer_tr_kernel,\n"
            "    s._outer_vdot_kernel, g.to_single_cols,\n"
            "    g.to_single_rows,\n"
            "    g.to_single_slabs)}\n"
            "print(json.dumps([all(same), sigs]))\n")
    out = _run_py(code)
    assert out.returncode == 0, out.stderr
    same, sigs = json.loads(out.stdout.strip().splitlines()[-1])
    assert same
    used = {name: types for name, types in sigs.items() if types}
    assert "_inner_kernel" in used and ("_outer_dot_kernel" in used or "_outer_vdot_kernel" in used)  # (the
    # compiled TTMs ran: the last mode's row-dot kernel where vectors are wide, else its dot products)
    for name, types in used.items():
        assert len(types) == 1 and types[0].startswith("readonly array(float64"), (name, types)


def test_default_dense_calls_load_their_kernels_without_numbas_runtime():
    """The dense kernels of a default HOOI and CP-ALS allocate nothing (scratch from the caller, or on the stack
    for CP's row solve): compiled with ``_nrt=False``, they load from the cache without numba's runtime, whose
    set-up (about 25 ms) and array allocator (``numba.np.arrayobj``, 20-25 ms of imports) a process's first call
    then never pays; nor numba's scan for third-party extensions (28-32 ms), which the first kernel of another
    library still runs. The first run fills the cache (compiling sets the runtime up); the second loads from
    it. (The tensors are above engine/_direct.py's thresholds: smaller ones run no kernel of ours.)"""
    code = ("import json, sys, numpy as np, tuckerkit as tk\n"
            "rng = np.random.default_rng(0)\n"
            "out = []\n"
            "for dt in (np.float64, np.float32):\n"
            "    X = rng.standard_normal((140, 130, 120)).astype(dt)\n"
            "    for r in (5, 16):\n"  # (16: the register-blocked outer kernel with 256- and 512-bit vectors)
            "        out.append(float(tk.hooi(X, r, max_iter=3, tol=0).fit))\n"
            "        out.append(float(tk.cp_als(X, r, max_iter=3, tol=0).fit))\n"
            "    X4 = rng.standard_normal((30, 28, 26, 24)).astype(dt)\n"
            "    out.append(float(tk.cp_als(X4, 4, max_iter=3, tol=0).fit))\n"
            "    X5 = rng.standard_normal((42, 40, 38, 36)).astype(dt)\n"  # (a BLAS product cut over the helpers)
            "    out.append(float(tk.hooi(X5, 4, max_iter=2, tol=0).fit))\n"
            "from numba.core.runtime import rtsys\n"
            "from tuckerkit.engine import _smallgemm as s\n"
            "ran = [k.py_func.__name__ for k in (s._inner_kernel, s._outer_dot_kernel, s._outer_gemm_kernel,"
            " s._outer_tr_kernel, s._outer_vdot_kernel) if k.signatures]\n"
            "from tuckerkit.engine import ExecutionPolicy, _handoff\n"  # (a product cut over the GEMM helpers,
            "A, B, C = rng.standard_normal((512, 256)), rng.standard_normal((256, 256)), np.empty((512, 256))\n"
            "split = _handoff.run_split(A, B, C, 0, [0, 256, 512], ExecutionPolicy(workers=2))\n"  # as a 4-way
            "ran += ['_round'] if split and _handoff._round.signatures and np.allclose(C, A @ B) else []\n"  # HOOI's)
            "from numba.core import entrypoints\n"
            "scanned = entrypoints._already_initialized\n"
            "from numba import njit\n"
            "print(json.dumps([getattr(rtsys, '_init', None), 'numba.np.arrayobj' in sys.modules, ran, out, scanned,"
            " njit(lambda x: x + 1)(1) == 2 and entrypoints._already_initialized, s.wide_vectors()]))\n")
    first = _run_py(code)
    assert first.returncode == 0, first.stderr
    out = _run_py(code)
    assert out.returncode == 0, out.stderr
    nrt, arrayobj, ran, fits, scanned, scanned_later, wide = json.loads(out.stdout.strip().splitlines()[-1])
    # (the last mode's small ranks: the row-dot kernel where vectors are wide (float64 R = 16 the transposed
    # tile), else the dot products)
    assert sorted(ran) == ["_inner_kernel", "_outer_gemm_kernel", "_outer_tr_kernel", "_outer_vdot_kernel",
                           "_round"] if wide else \
        ["_inner_kernel", "_outer_dot_kernel", "_outer_gemm_kernel", "_round"]
    assert nrt is False and arrayobj is False
    # numba's scan for third-party extensions: not run for our cached kernels, run for the first other kernel
    assert scanned is False and scanned_later is True
    assert fits == json.loads(first.stdout.strip().splitlines()[-1])[3]  # (loaded or compiled: the same bits)


_LAZY_RUN = """
import json, sys, numpy as np
import numba.core.codegen as cg
parsed = []
_parse = cg.ll.parse_bitcode
def counting(data, *a):
    parsed.append(len(data))
    return _parse(data, *a)
cg.ll.parse_bitcode = counting
import tuckerkit as tk
from tuckerkit.engine import _gram_kernels as g, _smallgemm as s
rng = np.random.default_rng(0)
X = rng.standard_normal((140, 130, 120))
fit = float(tk.hooi(X, 5, max_iter=2, tol=0).fit)
lib = s._inner_kernel.overloads[s._inner_kernel.signatures[0]].library
lazy = [lib._shared_module is None, len(parsed)]
v = rng.standard_normal((3, 21))
out, ss = np.empty((3, 21), np.float32), np.zeros(3)
g.to_single_rows(v, 0, 21, out, ss)
callee = g.to_single_rows.overloads[g.to_single_rows.signatures[0]].library
before = callee._shared_module is None
from numba import njit
@njit
def caller(v, a, b, out, ss):  # (a and b as int64 arguments: the signature loaded above, not a literal's)
    g.to_single_rows(v, a, b, out, ss)
    return ss[0]
out2, ss2 = np.empty_like(out), np.zeros(3)
first = caller(v, 0, 21, out2, ss2)
one = len(g.to_single_rows.signatures) == 1
linked = [bool(x) for x in (before and one, callee._shared_module is not None, first == ss[0], np.array_equal(ss2, ss),
          np.array_equal(out2, v.astype(np.float32)), np.allclose(ss, (v * v).sum(axis=1), rtol=1e-15))]
print(json.dumps([lazy, linked, fit]))
"""


def test_cached_kernels_load_without_parsing_their_bitcode_which_a_later_link_still_gets():
    """A kernel loaded from numba's cache takes the symbols it defines from its machine code: no bitcode is
    parsed for a dense HOOI's kernels. A later
    compilation that calls a kernel so loaded still links it in: its bitcode is parsed then, and the new
    function gives the kernel's own values. The first run compiles (and links) whatever the cache lacks; the
    second loads."""
    first = _run_py(_LAZY_RUN)
    assert first.returncode == 0, first.stderr
    second = _run_py(_LAZY_RUN)
    assert second.returncode == 0, second.stderr
    lazy, linked, fit = json.loads(second.stdout.strip().splitlines()[-1])
    assert lazy == [True, 0]
    assert linked == [True, True, True, True, True, True]
    assert fit == json.loads(first.stdout.strip().splitlines()[-1])[2]  # (loaded or compiled: the same bits)


def test_defined_symbols_are_the_definitions_of_the_kernels_bitcode():
    """The names :func:`defined_symbols` reads from a compiled library's ELF object are exactly the functions and
    globals its bitcode defines (numba's loader lists those), for a kernel alone, one that calls another and one
    holding a constant array; anything that is not a little-endian ELF64 object gives None."""
    from llvmlite import binding as ll
    from numba import njit

    from tuckerkit._numba_load import defined_symbols

    table = np.arange(5.0)

    @njit
    def inner(x):  # pragma: no cover - compiled
        return x * 2.0 + 1.0

    @njit
    def outer(a):  # pragma: no cover - compiled
        s = 0.0
        for i in range(a.shape[0]):
            s += inner(a[i]) + table[i % 5]
        return s

    assert outer(np.ones(7)) == 7 * 3.0 + (0 + 1 + 2 + 3 + 4) + 0 + 1
    checked = 0
    for disp in (inner, outer):
        for cres in disp.overloads.values():
            _, kind, (obj, bitcode) = cres.library.serialize_using_object_code()
            assert kind == "object"
            mod = ll.parse_bitcode(bitcode)
            want = {g.name for gs in (mod.functions, mod.global_variables) for g in gs if not g.is_declaration}
            assert defined_symbols(obj) == want and want
            checked += 1
    assert checked == 2
    assert defined_symbols(b"") is None
    assert defined_symbols(b"\x7fELF\x01\x01" + bytes(100)) is None  # (32-bit)
    assert defined_symbols(b"\x7fELF\x02\x01" + bytes(10)) is None  # (truncated)
    assert defined_symbols(b"\x7fELF\x02\x01" + bytes(200)) is None  # (no symbol table)


@pytest.mark.parametrize("make", [
    lambda: np.zeros((3, 4)), lambda: np.zeros((3, 4), order="F"), lambda: np.zeros((6, 4))[::2],
    lambda: np.zeros(5, np.float32), lambda: np.zeros((2, 2, 2), np.complex128), lambda: np.array(3.0),
    lambda: np.zeros(4, bool), lambda: np.zeros((3, 1), np.int64), lambda: np.zeros((0, 3)),
])
@pytest.mark.parametrize("writeable", [True, False])
def test_array_type_is_numbas_own_type_of_the_argument(make, writeable):
    from numba import typeof
    from numba.core.typing.typeof import Purpose

    from tuckerkit._numba_load import array_type

    a = make()
    a.flags.writeable = writeable
    assert array_type(a) == typeof(a, Purpose.argument)


def test_our_kernels_type_other_arrays_as_numba_does():
    """Only a plain ndarray is typed by the shortcut: a dtype numba does not take, a masked array and a memory
    map take numba's own path (its errors and types)."""
    from numba import typeof
    from numba.core.errors import NumbaTypeError

    from tuckerkit._numba_load import array_type
    from tuckerkit.engine import _gram_kernels as g

    assert array_type(np.zeros(3, np.longdouble)) is None
    masked = np.ma.masked_array(np.zeros((2, 8)), mask=False)
    with pytest.raises(NumbaTypeError, match=r"Unsupported array type: numpy\.ma\.MaskedArray"):
        g.to_single_rows(masked, 0, 8, np.empty((2, 8), np.float32), np.zeros(2))
    v = np.zeros((2, 8))
    assert g.to_single_rows.typeof_pyval(v) == typeof(v)
    assert "typeof_pyval" in vars(g.to_single_rows)  # (on the instance: numba's class is left as it is)
