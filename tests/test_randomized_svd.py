"""``svd="randomized"``: the randomized range finder of the Tucker factor steps (HOSVD, ST-HOSVD, HOOI).

On a planted low-rank tensor the randomized subspace is the exact one to rounding; on a noisy one HOOI's error
after convergence stays within a stated bound of the exact factor step's; a seed gives the same bits; real and
complex, C / F / view layouts, numpy and the GPU code path.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import to_numpy

import tuckerkit as tk
from tuckerkit.engine import _subspace as subspace
from tuckerkit.engine import default_policy
from tuckerkit.engine._subspace import leading_left_singular, randomized_left_singular

pytestmark = pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")


def planted(rng, shape, ranks, dtype=np.float64, noise=0.0):
    cplx = np.dtype(dtype).kind == "c"

    def draw(s):
        return rng.standard_normal(s) + (1j * rng.standard_normal(s) if cplx else 0)

    core = draw(ranks)
    Us = [np.linalg.qr(draw((n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    X = np.einsum("abc,ia,jb,kc->ijk", core, *Us)
    if noise:
        N = draw(shape)
        X = X + noise * np.linalg.norm(X) / np.linalg.norm(N) * N
    return X.astype(dtype), Us


def in_layout(X, layout):
    """``X`` stored in C order, F order, or as a strided view (step 2 on mode 0 of a reversed-order array)."""
    if layout == "C":
        return np.ascontiguousarray(X)
    if layout == "F":
        return np.asfortranarray(X)
    big = np.zeros((*reversed(X.shape[1:]), 2 * X.shape[0] + 1), dtype=X.dtype)
    v = big.transpose(tuple(range(X.ndim - 1, -1, -1)))[1::2][: X.shape[0]]
    v[...] = X
    assert not (v.flags.c_contiguous or v.flags.f_contiguous)
    return v


def gap(U, V):
    """Sine of the largest principal angle between the column spaces of orthonormal U and V."""
    U, V = np.asarray(U, dtype=np.complex128), np.asarray(V, dtype=np.complex128)
    return float(np.linalg.norm(V - U @ (U.conj().T @ V), 2))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("layout", ["C", "F", "view"])
def test_engine_subspace_equals_the_exact_one_on_a_low_rank_tensor(dtype, layout, rng):
    X0, _ = planted(rng, (41, 37, 33), (4, 3, 5), np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    X = in_layout(X0.astype(dtype), layout)
    eps = np.finfo(dtype).eps
    pol = default_policy()
    for n, r in enumerate((4, 3, 5)):
        U, w = randomized_left_singular(X, n, r, np.random.default_rng(1), pol)
        Ue, we = leading_left_singular(X, n, r, pol)
        assert U.dtype == np.dtype(dtype) and w.dtype == np.finfo(dtype).dtype
        np.testing.assert_allclose(U.conj().T @ U, np.eye(r), rtol=0, atol=100 * eps)
        assert gap(U, Ue) <= 1000 * eps
        # same phase convention: the same vectors, not only the same span (distinct singular values)
        np.testing.assert_allclose(U, Ue, rtol=0, atol=1000 * eps)
        np.testing.assert_allclose(w, we, rtol=100 * eps * 10, atol=100 * eps * float(we.max()))


def test_engine_falls_back_to_the_exact_route_when_the_sketch_is_not_smaller(rng):
    X, _ = planted(rng, (12, 10, 8), (2, 2, 2))
    pol = default_policy()
    for n in range(3):  # k = 2 + 10 >= min(I_n, P): the exact route, bit for bit
        U, w = randomized_left_singular(X, n, 2, np.random.default_rng(0), pol)
        Ue, we = leading_left_singular(X, n, 2, pol)
        assert np.array_equal(U, Ue) and np.array_equal(w, we)


@pytest.mark.parametrize("method", ["hosvd", "st_hosvd", "hooi"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_decompositions_recover_a_planted_model(method, dtype, rng):
    X, Us = planted(rng, (50, 45, 40), (4, 5, 3), dtype)
    eps = np.finfo(dtype).eps
    T = getattr(tk, method)(X, [4, 5, 3], svd="randomized")
    E = getattr(tk, method)(X, [4, 5, 3])
    for U, Ue, V in zip(T.factors, E.factors, Us, strict=True):
        assert gap(U, V) <= 1000 * eps
        assert gap(U, Ue) <= 1000 * eps
    assert T.relative_error(X) <= 1000 * eps


@pytest.mark.parametrize("noise", [0.01, 0.3])
def test_hooi_error_within_a_bound_of_the_exact_one(noise, rng):
    """On a noisy tensor HOOI converges to the same fit with either factor step: the randomized range finder
    (two power iterations) only perturbs where the iterations start, the fixed point is the same. Bound:
    relative errors equal to 1e4 eps, and the randomized never worse by more than that."""
    X, _ = planted(rng, (60, 50, 40), (5, 4, 6), noise=noise)
    E = tk.hooi(X, [5, 4, 6], tol=1e-12, max_iter=200)
    T = tk.hooi(X, [5, 4, 6], svd="randomized", tol=1e-12, max_iter=200)
    e, t = E.relative_error(X), T.relative_error(X)
    assert t <= e * (1 + 1e4 * np.finfo(np.float64).eps)
    assert abs(t - e) <= 1e4 * np.finfo(np.float64).eps
    # without the iterations: ST-HOSVD's error within a small factor of the exact one (HMT's bound is far wider)
    S, Se = tk.st_hosvd(X, [5, 4, 6], svd="randomized"), tk.st_hosvd(X, [5, 4, 6])
    # (the exact error is the smaller one to rounding: both are equal to an ulp when the sketch is exact)
    assert Se.relative_error(X) <= S.relative_error(X) * (1 + 16 * np.finfo(np.float64).eps)
    assert S.relative_error(X) <= (1 + 1e-3) * Se.relative_error(X)


def test_same_bits_twice_and_the_seed_matters_only_in_the_bits(rng):
    X, _ = planted(rng, (60, 50, 40), (5, 4, 6), noise=0.2)
    runs = [lambda rs: tk.hooi(X, [5, 4, 6], svd="randomized", random_state=rs, tol=0, max_iter=3),
            lambda rs: tk.hosvd(X, [5, 4, 6], svd="randomized", random_state=rs),
            lambda rs: tk.st_hosvd(X, [5, 4, 6], svd="randomized", random_state=rs)]
    for run in runs:
        a, b, c = run(None), run(None), run(7)
        assert all(np.array_equal(u, v) for u, v in zip(a.factors, b.factors, strict=True))
        assert np.array_equal(a.core, b.core) and a.fit_history == b.fit_history
        assert all(np.array_equal(u, v) for u, v in zip(run(7).factors, c.factors, strict=True))
        assert any(not np.array_equal(u, v) for u, v in zip(a.factors, c.factors, strict=True))
        assert all(gap(u, v) <= 1e-3 for u, v in zip(a.factors, c.factors, strict=True))


def test_the_randomized_route_is_the_one_taken(monkeypatch, rng):
    calls = []
    real = subspace.randomized_left_singular

    def spy(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    from tuckerkit.decomposition import _tucker

    monkeypatch.setattr(_tucker, "randomized_left_singular", spy)
    X, _ = planted(rng, (60, 50, 40), (5, 4, 6), noise=0.1)
    tk.hooi(X, [5, 4, 6], tol=0, max_iter=2)
    assert calls == []
    tk.hooi(X, [5, 4, 6], svd="randomized", tol=0, max_iter=2)
    # ST-HOSVD's three steps, then three per iteration but the first sweep's first: ST-HOSVD's last step
    # (mode 0, from the same projection) made that factor
    assert calls == [2, 1, 0, 1, 2, 0, 1, 2]
    from tuckerkit.compat.tensorly import tucker

    calls.clear()
    tucker(X, [5, 4, 6], svd="randomized_svd", n_iter_max=2, tol=0)
    assert len(calls) == 3 + 2 * 3  # TensorLy's name maps to it (HOSVD start, then the iterations)
    calls.clear()
    tucker(X, [5, 4, 6], svd="truncated_svd", n_iter_max=2, tol=0)
    assert calls == []


def test_bad_svd_values_are_refused_in_one_line(rng):
    X = rng.standard_normal((5, 6, 7))
    for call in (lambda s: tk.hooi(X, 2, svd=s), lambda s: tk.hosvd(X, 2, svd=s),
                 lambda s: tk.st_hosvd(X, 2, svd=s)):
        with pytest.raises(ValueError, match=r"^svd='fast' is not valid; expected one of 'exact', 'randomized'$"):
            call("fast")
    with pytest.raises(ValueError, match=r"^svd='randomized' needs ranks; with max_error the rank choice needs "
                                         r"every eigenvalue \(use svd='exact'\)$"):
        tk.st_hosvd(X, max_error=0.1, svd="randomized")
    with pytest.raises(ValueError, match=r"^svd='randomized' needs ranks; with max_error"):
        tk.hosvd(X, max_error=0.1, svd="randomized")
    with pytest.raises(ValueError, match=r"^mask= runs the exact factor step; received svd='randomized'"):
        tk.hooi(X, 2, mask=np.ones(X.shape, bool), svd="randomized")


def test_randomized_on_the_gpu_code_path(xp, rng):
    X, Us = planted(rng, (50, 45, 40), (4, 5, 3), np.complex128)
    T = tk.hooi(xp.asarray(X), [4, 5, 3], svd="randomized", tol=0, max_iter=2)
    eps = np.finfo(np.float64).eps
    for U, V in zip(T.factors, Us, strict=True):
        assert gap(to_numpy(U), V) <= 1000 * eps
    assert math.isclose(T.fit, 1.0, abs_tol=10 * math.sqrt(eps))


def test_randomized_hooi_does_not_call_a_fit_decrease_convergence():
    """Randomized factor steps need not ascend: a decrease (0.121465 -> 0.121201 on a Gaussian 40^3 at rank 20)
    stopped the run as converged, returning the worse model. It now runs on; converged only on a small change."""
    import warnings

    X = np.random.default_rng(0).standard_normal((40, 40, 40))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        T = tk.hooi(X, 20, svd="randomized", max_iter=30)
    h = np.asarray(T.fit_history)
    assert np.any(np.diff(h) < 0)  # (it did decrease on the way)
    assert T.converged is bool(abs(h[-1] - h[-2]) < 1e-8)
