"""``tuckerkit.compat.pyttb`` against pyttb: its documented examples run on the compat layer, and the same
seed gives the same model as pyttb itself."""

from __future__ import annotations

import doctest
import types

import numpy as np
import pytest

import tuckerkit.compat.pyttb as compat

ttb = pytest.importorskip("pyttb")


def _run_pyttb_examples(name: str) -> doctest.TestResults:
    """Run the Examples of ``pyttb.<name>`` with ``ttb.<name>`` (and the bare name) pointing at the compat layer."""
    original = getattr(ttb, name)
    proxy = types.SimpleNamespace(**{k: getattr(ttb, k) for k in dir(ttb) if not k.startswith("__")})
    for fn in compat.__all__:
        setattr(proxy, fn, getattr(compat, fn))
    globs = {"np": np, "ttb": proxy, name: getattr(compat, name)}
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(original, name, globs=globs):
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", ["cp_als", "hosvd"])  # pyttb 1.8's tucker_als documents no example
def test_pyttb_documented_examples_pass_on_compat(name, capsys):
    state = np.random.get_state()  # noqa: NPY002 (the examples seed numpy's global RNG, as pyttb's draw uses it)
    try:
        result = _run_pyttb_examples(name)
    finally:
        np.random.set_state(state)  # noqa: NPY002
    out = capsys.readouterr().out
    assert result.attempted > 0
    assert result.failed == 0, out


def _planted(shape=(6, 7, 8), rank=3, seed=0):
    rng = np.random.default_rng(seed)
    return np.einsum("ir,jr,kr->ijk", *(rng.random((n, rank)) for n in shape)) + 0.01 * rng.random(shape)


def _seeded(fn, seed, *args, **kwargs):
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(seed)  # noqa: NPY002
    try:
        return fn(*args, **kwargs)
    finally:
        np.random.set_state(state)  # noqa: NPY002


@pytest.mark.parametrize("sparse", [False, True])
def test_cp_als_same_seed_same_model_as_pyttb(sparse):
    X = _planted()
    T = ttb.tensor(X)
    if sparse:
        X[X < np.quantile(X, 0.5)] = 0
        T = ttb.sptensor.from_tensor_type(ttb.tensor(X)) if hasattr(ttb.sptensor, "from_tensor_type") else \
            ttb.tensor(X).to_sptensor()
    M, M0, out = _seeded(ttb.cp_als, 3, T, 3, stoptol=1e-9, maxiters=30, printitn=0)
    K, K0, kout = _seeded(compat.cp_als, 3, T, 3, stoptol=1e-9, maxiters=30, printitn=0)
    eps = np.finfo(np.float64).eps
    assert isinstance(K, ttb.ktensor)
    for A, B in zip(M0.factor_matrices, K0.factor_matrices, strict=True):  # the same start
        np.testing.assert_array_equal(A, B)
    # (seen: fits 57 eps apart, weights 68 eps, factors 105 eps; 30 ALS steps in another order of operations)
    assert abs(out["fit"] - kout["fit"]) < 1e3 * eps
    assert out["iters"] == kout["iters"]
    np.testing.assert_allclose(M.weights, K.weights, rtol=1e4 * eps)
    for A, B in zip(M.factor_matrices, K.factor_matrices, strict=True):
        np.testing.assert_allclose(A, B, atol=1e4 * eps)


def test_tucker_als_same_seed_same_fit_as_pyttb():
    X = ttb.tensor(_planted())
    T, U0, out = _seeded(ttb.tucker_als, 5, X, [2, 3, 2], stoptol=1e-10, maxiters=20, printitn=0)
    S, V0, kout = _seeded(compat.tucker_als, 5, X, [2, 3, 2], stoptol=1e-10, maxiters=20, printitn=0)
    assert isinstance(S, ttb.ttensor)
    assert U0[0] is None and V0[0] is None
    for A, B in zip(U0[1:], V0[1:], strict=True):
        np.testing.assert_array_equal(A, B)
    assert abs(out["fit"] - kout["fit"]) < 1e4 * np.finfo(np.float64).eps
    np.testing.assert_allclose((S.full() - T.full()).norm(), 0, atol=1e3 * np.finfo(np.float64).eps * X.norm())


def test_hosvd_same_ranks_and_bound_as_pyttb():
    X = ttb.tensor(_planted((8, 9, 10), 4))
    for tol in (0.3, 0.05, 1e-3):
        ours = compat.hosvd(X, tol, verbosity=0)
        theirs = ttb.hosvd(X, tol, verbosity=0)
        assert ours.core.shape == theirs.core.shape
        assert (ours.full() - X).norm() <= tol * X.norm()


def test_printing_follows_printitn(capsys):
    X = _planted()
    _seeded(compat.cp_als, 0, X, 2, maxiters=3, stoptol=0, printitn=0)
    assert capsys.readouterr().out == ""
    _seeded(compat.cp_als, 0, X, 2, maxiters=3, stoptol=0, printitn=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "CP_ALS:" and lines[-1].startswith(" Final f = ")
    assert [ln.split(":")[0] for ln in lines[1:-1]] == [" Iter 0", " Iter 2"]


def test_unsupported_options_are_refused_in_one_line():
    X = _planted()
    with pytest.raises(NotImplementedError, match=r"^cp_als: dimorder=\[2, 1, 0\] is not supported by tuckerkit"):
        compat.cp_als(X, 2, dimorder=[2, 1, 0], printitn=0)
    with pytest.raises(TypeError, match=r"^cp_als: input_tensor is a pyttb ktensor; expected a pyttb tensor"):
        compat.cp_als(ttb.ktensor([np.ones((2, 1)), np.ones((3, 1))]), 1, printitn=0)


def test_nvecs_starts_are_pyttbs_and_returned(capsys):
    """init="nvecs" returned no start (Minit None, Uinit all None) and printed none of pyttb's lines."""
    rng = np.random.default_rng(0)
    X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 2)) for n in (5, 6, 7))) + 0.01 * rng.random((5, 6, 7))
    T = ttb.tensor(X)
    M1, M0a, o1 = ttb.cp_als(T, 2, init="nvecs", printitn=0)
    M2, M0b, o2 = compat.cp_als(T, 2, init="nvecs", printitn=0)
    assert isinstance(M0b, ttb.ktensor) and o1["iters"] == o2["iters"]
    np.testing.assert_allclose(M0b.full().data, M0a.full().data, rtol=0, atol=1e-13)
    np.testing.assert_allclose(M2.full().data, M1.full().data, rtol=0, atol=1e-12)
    capsys.readouterr()
    A1, U1, _ = ttb.tucker_als(T, [2, 2, 2], init="nvecs", printitn=0)
    theirs = capsys.readouterr().out
    A2, U2, _ = compat.tucker_als(T, [2, 2, 2], init="nvecs", printitn=0)
    assert capsys.readouterr().out == theirs and "Computing 2 leading e-vector for factor 1" in theirs
    assert U2[0] is None
    for a, b in zip(U1[1:], U2[1:], strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-13)
    np.testing.assert_allclose(A2.full().data, A1.full().data, rtol=0, atol=1e-12)


def test_float32_tensors_compute_in_float64_as_pyttb():
    """float32 ran in single precision here: 8.3e-7 from pyttb's cp_als, a float32 hosvd core."""
    rng = np.random.default_rng(1)
    X = (np.einsum("ir,jr,kr->ijk", *(rng.random((n, 2)) for n in (5, 6, 7)))
         + 0.01 * rng.random((5, 6, 7))).astype(np.float32)
    T = ttb.tensor(X)
    a = ttb.cp_als(T, 2, init="nvecs", printitn=0)[0]
    b = compat.cp_als(T, 2, init="nvecs", printitn=0)[0]
    np.testing.assert_allclose(b.full().data, a.full().data, rtol=0, atol=1e-12)
    h1 = ttb.hosvd(T, 1e-2, verbosity=0)
    h2 = compat.hosvd(T, 1e-2, verbosity=0)
    assert h2.core.data.dtype == np.float64
    np.testing.assert_allclose(h2.full().data, h1.full().data, rtol=0, atol=1e-12)
