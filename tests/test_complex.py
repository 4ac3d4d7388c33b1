"""Complex tensors (complex64, complex128) through the engine and the dense decompositions.

The engine's operations against ``numpy.einsum`` (``transpose=True`` applies ``U^H``, the Gram is
``X_(n) X_(n)^H``, the MTTKRP is the plain multilinear contraction), always on BLAS (the compiled small-rank
kernels are real only); HOSVD / ST-HOSVD / HOOI / CP-ALS on planted complex models, against TensorLy's
complex ``parafac`` and ``tucker`` from the same start; results saved and loaded; the methods that are real
only refuse complex input in one line. Tolerances come from the dtype's eps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import to_numpy

import tuckerkit as tk
from tuckerkit.engine import (
    CompiledKernel,
    contract,
    gram,
    gram_plan,
    mttkrp,
    multi_ttm,
    multi_ttm_plan,
    plan_contraction,
    ttm,
    ttm_plan,
)

CDTYPES = [np.complex64, np.complex128]
pytestmark = pytest.mark.filterwarnings("ignore::tuckerkit.ConvergenceWarning")  # fixed iteration counts


@pytest.fixture(params=CDTYPES, ids=["complex64", "complex128"])
def cdtype(request):
    return np.dtype(request.param)


def crandn(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def make_complex(rng, shape, dtype, layout):
    """A complex tensor in C order, F order, or a strided view (step 2 on mode 0 of a reversed-order array)."""
    shape = tuple(shape)
    if layout == "C":
        return crandn(rng, shape, dtype)
    if layout == "F":
        return np.asfortranarray(crandn(rng, shape, dtype))
    big = crandn(rng, (*reversed(shape[1:]), 2 * shape[0] + 1), dtype)
    x = big.transpose(tuple(range(len(shape) - 1, -1, -1)))[1::2][: shape[0]]
    assert x.shape == shape and not (x.flags.c_contiguous or x.flags.f_contiguous)
    return x


def assert_close_to_einsum(C, spec, A, B, dtype, conj_b=False):
    """|C - einsum| <= 8 (k + 2) eps einsum(|A|, |B|) elementwise, in complex128 (the GEMM error bound)."""
    A, B, C = to_numpy(A), to_numpy(B), to_numpy(C)
    Bref = np.conj(B) if conj_b else B
    ref = np.einsum(spec, A.astype(np.complex128), Bref.astype(np.complex128))
    scale = np.einsum(spec, np.abs(A).astype(np.float64), np.abs(B).astype(np.float64))
    lhs, out = spec.split("->")
    a, b = lhs.split(",")
    sizes = dict(zip(a, A.shape, strict=True)) | dict(zip(b, B.shape, strict=True))
    k = math.prod(sizes[c] for c in set(a + b) if c not in out)
    assert C.dtype == np.dtype(dtype) and C.shape == ref.shape
    eps = np.finfo(dtype).eps
    excess = np.abs(C.astype(np.complex128) - ref) - 8 * (k + 2) * eps * scale
    assert excess.max() <= np.finfo(dtype).tiny, f"error exceeds the bound by {excess.max()}"


# ---------------------------------------------------------------------------------------------------
# engine
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["C", "F", "view"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("transpose", [False, True])
def test_ttm_against_einsum(cdtype, layout, mode, transpose, rng):
    X = make_complex(rng, (7, 5, 9), cdtype, layout)
    U = crandn(rng, (X.shape[mode], 3) if transpose else (3, X.shape[mode]), cdtype)
    x = "abc"
    u = (x[mode] + "z") if transpose else ("z" + x[mode])
    spec = f"{x},{u}->{x[:mode]}z{x[mode + 1:]}"
    Y = ttm(X, U, mode, transpose=transpose)
    assert_close_to_einsum(Y, spec, X, U, cdtype, conj_b=transpose)  # transpose=True is U^H
    plan = ttm_plan(X, U, mode, transpose=transpose)
    assert plan.dtype == str(cdtype) and plan.compiled is CompiledKernel.NONE
    np.testing.assert_array_equal(ttm(X, U, mode, transpose=transpose, plan=plan), Y)


@pytest.mark.parametrize("layout", ["C", "F", "view"])
@pytest.mark.parametrize("transpose", [False, True])
def test_multi_ttm_against_einsum(cdtype, layout, transpose, rng):
    X = make_complex(rng, (6, 7, 5, 3), cdtype, layout)
    mats = [crandn(rng, (n, r) if transpose else (r, n), cdtype) for n, r in zip(X.shape, (2, 3, 4, 2), strict=True)]
    Y = multi_ttm(X, mats, transpose=transpose, skip=2)
    U = [np.conj(M).T if transpose else M for M in mats]
    ref = np.einsum("abcd,pa,qb,sd->pqcs", X.astype(np.complex128), *(u.astype(np.complex128) for i, u in
                                                                       enumerate(U) if i != 2))
    scale = np.einsum("abcd,pa,qb,sd->pqcs", np.abs(X), *(np.abs(u) for i, u in enumerate(U) if i != 2))
    eps = np.finfo(cdtype).eps
    assert Y.dtype == cdtype
    assert np.max(np.abs(Y - ref) - 8 * 3 * (7 + 2) * eps * scale) <= 0
    plan = multi_ttm_plan(X, mats, transpose=transpose, skip=2)
    assert all(p.compiled is CompiledKernel.NONE for p in plan.plans)
    np.testing.assert_array_equal(multi_ttm(X, mats, transpose=transpose, skip=2, plan=plan), Y)
    np.testing.assert_array_equal(plan(X, {m: M for m, M in enumerate(mats) if m != 2}), Y)


@pytest.mark.parametrize("view", ["C", "F", "view", "step2", "window"])
def test_gram_is_hermitian_against_einsum(cdtype, view, rng):
    """Every route: one product, the slab sum, and the contraction of views that cannot be flattened (real
    and imaginary parts as views, no conjugate copy of the tensor)."""
    if view in ("C", "F", "view"):
        X = make_complex(rng, (5, 8, 9), cdtype, view)
    else:
        big = crandn(rng, (5, 8, 9), cdtype)
        X = big[::2, ::2, ::2] if view == "step2" else big[:, 1:7, 2:5]
    routes = set()
    for n in range(3):
        G = gram(X, n)
        routes.add(gram_plan(X, n).route)
        x = "abc"
        spec = f"{x},{x[:n]}z{x[n + 1:]}->{x[n]}z"
        assert_close_to_einsum(G, spec, X, X, cdtype, conj_b=True)
        np.testing.assert_array_equal(G, np.conj(G).T)  # Hermitian to the bit
        assert np.all(np.linalg.eigvalsh(G.astype(np.complex128)) >= -100 * np.finfo(cdtype).eps * np.abs(G).max())
    if view in ("step2", "window"):
        assert "blocks" in routes


def test_gram_of_a_large_unfolding_sums_column_blocks(monkeypatch, rng):
    """The one-product route conjugates one column block at a time: same numbers as einsum."""
    from tuckerkit.engine import _gram

    monkeypatch.setattr(_gram, "_CONJ_ELEMS", 40)  # blocks of 40 // 6 = 6 columns
    X = crandn(rng, (6, 7, 11))
    assert gram_plan(X, 0).route == "syrk"
    assert_close_to_einsum(gram(X, 0), "abc,zbc->az", X, X, np.complex128, conj_b=True)


@pytest.mark.parametrize("layout", ["C", "F", "view"])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_mttkrp_against_einsum(cdtype, layout, mode, rng):
    """The MTTKRP is the plain multilinear contraction (CP-ALS passes conjugated factors)."""
    X = make_complex(rng, (5, 6, 7, 3), cdtype, layout)
    F = [crandn(rng, (n, 4), cdtype) for n in X.shape]
    M = mttkrp(X, F, mode)
    subs = "abcd"
    others = [m for m in range(4) if m != mode]
    spec = f"{subs},{','.join(subs[m] + 'r' for m in others)}->{subs[mode]}r"
    ref = np.einsum(spec, X.astype(np.complex128), *(F[m].astype(np.complex128) for m in others))
    scale = np.einsum(spec, np.abs(X), *(np.abs(F[m]) for m in others))
    k = math.prod(X.shape[m] for m in others)
    assert M.dtype == cdtype
    assert np.max(np.abs(M - ref) - 8 * (k + 4) * np.finfo(cdtype).eps * scale) <= 0


@pytest.mark.parametrize("spec,sa,sb", [("mk,pkn->mnp", (5, 7), (3, 7, 6)), ("abc,cd->abd", (4, 5, 7), (7, 3)),
                                        ("ijk,jkl->il", (3, 4, 5), (4, 5, 6))])
def test_contract_against_einsum(cdtype, spec, sa, sb, rng):
    A, B = crandn(rng, sa, cdtype), crandn(rng, sb, cdtype)
    assert_close_to_einsum(contract(spec, A, B), spec, A, B, cdtype)
    Bt = crandn(rng, sb[::-1], cdtype).T  # an F-ordered view
    assert_close_to_einsum(contract(spec, A, Bt), spec, A, Bt, cdtype)


def test_complex_never_takes_the_compiled_kernels(forced, cdtype, rng):
    """Where the cost model picks the compiled small-rank kernel for a real TTM, the complex one stays on
    BLAS (ZGEMM/CGEMM) and is right."""
    X = rng.standard_normal((20, 30, 40))
    U = rng.standard_normal((40, 5))
    assert ttm_plan(X, U, 2, transpose=True).compiled is not CompiledKernel.NONE
    Xc, Uc = crandn(rng, X.shape, cdtype), crandn(rng, U.shape, cdtype)
    for mode, V in ((2, Uc), (1, crandn(rng, (30, 5), cdtype))):
        plan = ttm_plan(Xc, V, mode, transpose=True)
        assert plan.compiled is CompiledKernel.NONE and "compiled" not in plan.explain().split("\n")[0]
        spec = "abc,cz->abz" if mode == 2 else "abc,bz->azc"
        assert_close_to_einsum(ttm(Xc, V, mode, transpose=True), spec, Xc, V, cdtype, conj_b=True)
    assert plan_contraction("abc,cz->abz", Xc, Uc).compiled is CompiledKernel.NONE


def test_norm_is_the_modulus(cdtype, rng):
    from tuckerkit.engine._operand import frobenius_norm

    X = make_complex(rng, (6, 7, 8), cdtype, "view")
    ref = np.sqrt(np.sum(np.abs(X.astype(np.complex128)) ** 2))
    assert abs(frobenius_norm(X) - ref) <= 10 * np.finfo(cdtype).eps * ref
    assert frobenius_norm(np.full((3, 4), 1e200 + 1e200j)) == pytest.approx(math.sqrt(24) * 1e200, rel=1e-15)


# ---------------------------------------------------------------------------------------------------
# decompositions
# ---------------------------------------------------------------------------------------------------
def planted_tucker(rng, shape, ranks, dtype):
    core = crandn(rng, ranks)
    Us = [np.linalg.qr(crandn(rng, (n, r)))[0] for n, r in zip(shape, ranks, strict=True)]
    return np.einsum("abc,ia,jb,kc->ijk", core, *Us).astype(dtype), Us


def subspace_gap(U, V):
    """``||(I - U U^H) V||_2`` for orthonormal U, V: the sine of the largest principal angle."""
    return float(np.linalg.norm(V - U @ (U.conj().T @ V), 2))


@pytest.mark.parametrize("method", ["hosvd", "st_hosvd", "hooi"])
def test_tucker_recovers_a_planted_complex_model(method, cdtype, rng):
    shape, ranks = (20, 17, 15), (3, 4, 2)
    X, Us = planted_tucker(rng, shape, ranks, cdtype)
    T = getattr(tk, method)(X, list(ranks))
    eps = np.finfo(cdtype).eps
    assert T.core.dtype == cdtype and all(U.dtype == cdtype for U in T.factors)
    for U, V in zip(T.factors, Us, strict=True):
        np.testing.assert_allclose(U.conj().T @ U, np.eye(U.shape[1]), rtol=0, atol=100 * eps)
        assert subspace_gap(U.astype(np.complex128), V) <= 1000 * eps
        top = np.abs(U).argmax(axis=0)  # phase fixed: the largest entry of each column is real and positive
        assert np.all(U[top, np.arange(U.shape[1])].real > 0)
        assert np.all(np.abs(U[top, np.arange(U.shape[1])].imag) <= 10 * eps)
    assert T.relative_error(X) <= 1000 * eps
    assert abs(T.fit - 1.0) <= 10 * math.sqrt(eps)  # a fit from norms: 1 - sqrt(1 - r^2) resolves sqrt(eps)
    assert abs(T.norm() - np.linalg.norm(X.astype(np.complex128))) <= 100 * eps * np.linalg.norm(X)


def test_hooi_on_a_noisy_complex_model_reaches_the_noise_level(cdtype, rng):
    shape, ranks = (30, 25, 20), (4, 3, 5)
    X, Us = planted_tucker(rng, shape, ranks, np.complex128)
    N = crandn(rng, shape)
    nu = 1e-3 * np.linalg.norm(X) / np.linalg.norm(N)  # noise at 0.1 % of the signal
    Xn = (X + nu * N).astype(cdtype)
    T = tk.hooi(Xn, list(ranks), tol=0, max_iter=10)
    noise = nu * np.linalg.norm(N) / np.linalg.norm(Xn)
    err = T.relative_error(Xn)
    # the model can only absorb the part of the noise that lies in its subspaces (a fraction of order
    # prod(ranks) / size); it never does worse than the noise itself (the planted model's error)
    assert (1 - 0.05) * noise <= err <= noise * (1 + 10 * np.finfo(cdtype).eps ** 0.5)
    for U, V in zip(T.factors, Us, strict=True):
        assert subspace_gap(U.astype(np.complex128), V) <= 20 * noise
    fits = np.array(T.fit_history)
    # monotone to the resolution of a fit from norms: eps / (1 - fit) (1e-4 in complex64 at 0.1 % error)
    assert np.all(np.diff(fits) >= -10 * np.finfo(cdtype).eps / (1 - fits[-1]))


def test_st_hosvd_max_error_and_sketch_on_complex(rng):
    X, _ = planted_tucker(rng, (20, 18, 16), (3, 2, 4), np.complex128)
    assert tk.st_hosvd(X, max_error=1e-6).ranks == (3, 2, 4)
    assert tk.hosvd(X, max_error=1e-6).ranks == (3, 2, 4)
    S = tk.st_hosvd(X, [3, 2, 4], sketch=True, random_state=0)
    assert S.core.dtype == np.complex128 and S.relative_error(X) <= 1000 * np.finfo(np.float64).eps


def planted_cp(rng, shape, rank, dtype):
    F = [crandn(rng, (n, rank)) for n in shape]
    return np.einsum("ir,jr,kr->ijk", *F).astype(dtype), F


@pytest.mark.parametrize("linesearch", [False, True])
@pytest.mark.parametrize("init", ["svd", "random"])
def test_cp_als_recovers_a_planted_complex_model(linesearch, init, cdtype, rng):
    X, _ = planted_cp(rng, (9, 10, 11), 3, cdtype)
    C = tk.cp_als(X, 3, init=init, tol=0, max_iter=300, linesearch=linesearch, random_state=1)
    eps = np.finfo(cdtype).eps
    assert C.weights.dtype == np.finfo(cdtype).dtype  # real weights of the same precision
    assert all(U.dtype == cdtype for U in C.factors)
    assert np.all(C.weights > 0)
    for U in C.factors:
        np.testing.assert_allclose(np.linalg.norm(U, axis=0), 1.0, rtol=0, atol=100 * eps)
    assert C.relative_error(X) <= 1000 * eps
    assert abs(C.norm() - np.linalg.norm(X.astype(np.complex128))) <= 1000 * eps * np.linalg.norm(X)
    fits = np.array(C.fit_history)
    assert fits[-1] >= 1 - 100 * math.sqrt(eps)
    # monotone (the line search keeps only improving jumps) to the resolution of the fit from the last MTTKRP,
    # 1 - sqrt(||X||^2 - 2 <X, X_hat> + ||X_hat||^2): sqrt(eps) near a perfect fit
    assert np.all(np.diff(fits) >= -10 * math.sqrt(eps))


def test_cp_als_options_on_complex(rng):
    X, F = planted_cp(rng, (8, 9, 10), 2, np.complex128)
    C = tk.cp_als(X, 2, init=list(F), fixed_modes=[1], tol=0, max_iter=5, normalize=False)
    np.testing.assert_array_equal(C.factors[1], F[1])
    assert C.relative_error(X) <= 1e3 * np.finfo(np.float64).eps
    orth = tk.cp_als(X, 2, orthogonalize=2, tol=0, max_iter=200, random_state=0)
    assert orth.relative_error(X) <= 1000 * np.finfo(np.float64).eps  # an orthogonalized start converges too


def test_same_call_same_bits_on_complex(rng):
    X, _ = planted_tucker(rng, (12, 11, 10), (2, 3, 2), np.complex128)
    X = X + 0.01 * crandn(rng, X.shape)
    for run in (lambda: tk.hooi(X, [2, 3, 2], init="random", random_state=3, tol=0, max_iter=4),
                lambda: tk.cp_als(X, 3, tol=0, max_iter=8, random_state=3)):
        a, b = run(), run()
        for u, v in zip(a.factors, b.factors, strict=True):
            assert np.array_equal(u, v)
        assert a.fit_history == b.fit_history


def test_input_unmodified_and_results_round_trip(tmp_path, rng):
    from tuckerkit.io import load_result, save_result

    X, _ = planted_cp(rng, (6, 7, 8), 2, np.complex64)
    before = X.copy()
    for R in (tk.hooi(X, [2, 2, 2]), tk.cp_als(X, 2, random_state=0)):
        assert np.array_equal(X, before)
        path = save_result(tmp_path / f"{type(R).__name__}.npz", R)
        L = load_result(path)
        assert type(L) is type(R) and L.fit == R.fit
        np.testing.assert_array_equal(L.to_dense(), R.to_dense())
        assert L.to_dense().dtype == np.complex64
        assert L.relative_error(X) == R.relative_error(X)


def test_real_only_methods_refuse_complex_in_one_line(tmp_path, rng):
    from tuckerkit.sparse import COOTensor

    X = crandn(rng, (5, 6, 7))
    one_line = r"[^\n]*$"
    with pytest.raises(TypeError, match=r"^X has complex dtype complex128; expected a real tensor" + one_line):
        tk.non_negative_cp(X, 2)
    with pytest.raises(TypeError, match=r"^mask= needs a real X \(float32 or float64\); received X of complex "
                                        r"dtype complex128$"):
        tk.hooi(X, 2, mask=np.ones(X.shape, bool))
    with pytest.raises(TypeError, match=r"^memory_limit= streams real tensors; X has dtype complex128 \(decompose a "
                                        r"complex tensor in memory, without memory_limit\)$"):
        tk.hooi(X, 2, memory_limit="1KB")  # out of core: slabs are real
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match=r"^X has complex dtype complex128 as a DaskTensor; expected a numpy or "
                                        r"cupy array in memory" + one_line):
        tk.cp_als(da.from_array(X, chunks=3), 2)
    with pytest.raises(TypeError, match=r"^values has dtype complex128; expected float32 or float64"):
        COOTensor(np.array([[0, 0, 0]]), np.array([1 + 1j]), (2, 2, 2))
    from tuckerkit.compat.tensorly import non_negative_parafac

    with pytest.raises(TypeError, match=r"^non_negative_parafac: tensor is complex128; expected a real tensor "
                                        r"\(float32 or float64\) for a non-negative decomposition$"):
        non_negative_parafac(X, 2)


def test_complex_on_the_gpu_code_path(xp, rng):
    """One body on numpy and the GPU path (fakecupy without a GPU, cupy with one)."""
    X, _ = planted_tucker(rng, (10, 9, 8), (2, 3, 2), np.complex128)
    T = tk.hooi(xp.asarray(X), [2, 3, 2], tol=0, max_iter=3)
    assert T.core.dtype == np.complex128
    assert T.relative_error(X) <= 1000 * np.finfo(np.float64).eps
    Y, _ = planted_cp(rng, (7, 8, 9), 2, np.complex128)
    C = tk.cp_als(xp.asarray(Y), 2, tol=0, max_iter=200, random_state=0)
    assert C.relative_error(Y) <= 1000 * np.finfo(np.float64).eps


# ---------------------------------------------------------------------------------------------------
# against TensorLy, from the same start
# ---------------------------------------------------------------------------------------------------
def test_parafac_matches_tensorly_on_complex(rng):
    tl = pytest.importorskip("tensorly")
    from tensorly.decomposition import parafac as tl_parafac

    from tuckerkit.compat.tensorly import parafac

    X, _ = planted_cp(rng, (7, 8, 9), 3, np.complex128)
    X = X + 0.05 * crandn(rng, X.shape)
    start = [crandn(rng, (n, 3)) for n in X.shape]
    ours, err_ours = parafac(X, 3, init=(np.ones(3), [U.copy() for U in start]), n_iter_max=15, tol=0,
                             return_errors=True)
    theirs, err_theirs = tl_parafac(tl.tensor(X), 3, init=tl.cp_tensor.CPTensor((np.ones(3), [U.copy() for U in
                                                                                              start])),
                                    n_iter_max=15, tol=0, return_errors=True)
    A, B = tl.cp_to_tensor(ours), tl.cp_to_tensor(theirs)
    assert np.linalg.norm(A - B) <= 1e4 * np.finfo(np.float64).eps * np.linalg.norm(B)
    # the same iterates: the same errors after each iteration (TensorLy's from the last MTTKRP, ~sqrt(eps))
    np.testing.assert_allclose(err_ours, err_theirs[: len(err_ours)], rtol=0,
                               atol=100 * math.sqrt(np.finfo(np.float64).eps))


def test_tucker_matches_tensorly_on_complex(rng):
    tl = pytest.importorskip("tensorly")
    from tensorly.decomposition import tucker as tl_tucker

    from tuckerkit.compat.tensorly import tucker

    X, _ = planted_tucker(rng, (12, 10, 9), (3, 2, 3), np.complex128)
    X = X + 0.05 * crandn(rng, X.shape)
    start = [np.linalg.qr(crandn(rng, (n, r)))[0] for n, r in zip(X.shape, (3, 2, 3), strict=True)]
    ours = tucker(X, [3, 2, 3], init=[U.copy() for U in start], n_iter_max=5, tol=0)
    theirs = tl_tucker(tl.tensor(X), [3, 2, 3], init=tl.tucker_tensor.TuckerTensor(
        (np.zeros((3, 2, 3), complex), [U.copy() for U in start])), n_iter_max=5, tol=0)
    A, B = tl.tucker_to_tensor(ours), tl.tucker_to_tensor(theirs)
    err_a, err_b = np.linalg.norm(X - A) / np.linalg.norm(X), np.linalg.norm(X - B) / np.linalg.norm(X)
    assert abs(err_a - err_b) <= 100 * np.finfo(np.float64).eps
    assert np.linalg.norm(A - B) <= 1e4 * np.finfo(np.float64).eps * np.linalg.norm(B)


def test_complex256_is_computed_in_complex128():
    """numpy's clongdouble (complex256) was accepted at the entry and failed mid-run naming an internal
    operand; it is computed in complex128 as longdouble is in float64 (the same results as the cast)."""
    X = np.random.default_rng(0).standard_normal((5, 6, 7)) * (1 + 1j)
    for f in (tk.hosvd, tk.st_hosvd, tk.hooi):
        a, b = f(X.astype(np.clongdouble), 2), f(X, 2)
        assert a.core.dtype == np.complex128 and a.fit == b.fit
        np.testing.assert_array_equal(a.core, b.core)
        for U, V in zip(a.factors, b.factors, strict=True):
            np.testing.assert_array_equal(U, V)
