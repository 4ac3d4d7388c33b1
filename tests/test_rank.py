"""Choosing the rank: CORCONDIA, the factor match score, the rank sweep and ``tuckerkit ranks``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from tuckerkit.cli import app
from typer.testing import CliRunner

import tuckerkit as tk
from tuckerkit.sparse import COOTensor

runner = CliRunner()


def _planted(rng, shape=(10, 11, 12), rank=3, noise=0.0):
    A = [rng.standard_normal((n, rank)) for n in shape]
    X = np.einsum("ir,jr,kr->ijk", *A)
    return X + noise * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(shape), A


def _corcondia_reference(X, w, A):
    """Bro and Kiers from the definition: vec(G) = pinv(kron of the factors) vec(X) (tiny sizes only)."""
    A = [U.copy() for U in A]
    A[0] = A[0] * w[None, :]
    K = A[0]
    for U in A[1:]:
        K = np.kron(K, U)  # C-order vec: the last mode fastest
    G = (np.linalg.pinv(K) @ X.reshape(-1)).reshape((A[0].shape[1],) * X.ndim)
    T = np.zeros_like(G)
    T[(np.arange(G.shape[0]),) * G.ndim] = 1
    return 100 * (1 - np.sum((G - T) ** 2) / G.shape[0])


def test_corcondia_100_at_the_true_rank_and_low_when_over_factored(rng):
    X, A = _planted(rng)
    assert tk.corcondia(X, tk.CPTensor(np.ones(3), tuple(A))) == pytest.approx(100.0, abs=1e-8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        fitted = tk.cp_als(X, 3, tol=1e-12, max_iter=2000)
        over = tk.cp_als(X, 5, tol=0, max_iter=200, random_state=0)
    assert tk.corcondia(X, fitted) == pytest.approx(100.0, abs=1e-4)
    assert tk.corcondia(X, over) < 50


def test_corcondia_matches_the_definition_dense_and_sparse(rng):
    X = rng.random((5, 6, 7))
    w, A = np.array([2.0, 0.5, 1.0, 3.0]), [rng.random((n, 4)) for n in X.shape]
    ref = _corcondia_reference(X, w, A)
    assert tk.corcondia(X, (w, A)) == pytest.approx(ref, rel=1e-9, abs=1e-9)
    assert tk.corcondia(COOTensor.from_dense(X), (w, A)) == pytest.approx(ref, rel=1e-9, abs=1e-9)
    tl = pytest.importorskip("tensorly")
    assert tk.corcondia(X, tl.cp_tensor.CPTensor((w, A))) == pytest.approx(ref, rel=1e-9, abs=1e-9)


def test_factor_match_score_of_a_permuted_rescaled_sign_flipped_copy(rng):
    A = [rng.standard_normal((n, 4)) for n in (6, 7, 8)]
    perm = np.array([2, 0, 3, 1])
    B = [-3.0 * A[0][:, perm], -A[1][:, perm], 0.25 * A[2][:, perm]]
    a, b = tk.CPTensor(np.ones(4), tuple(A)), tk.CPTensor(np.full(4, 2.0), tuple(B))
    m = tk.factor_match_score(a, b)
    score, p = m
    assert score == pytest.approx(1.0, abs=1e-12)
    assert np.array_equal(B[0][:, p], -3.0 * A[0])  # b's columns line up with a's after the permutation
    assert np.array_equal(m.signs[:, :2], -np.ones((4, 2))) and np.array_equal(m.signs[:, 2], np.ones(4))
    assert tk.factor_match_score(a, b, weights=True).score < 1  # different norms are penalized
    other = tk.CPTensor(np.ones(4), tuple(rng.standard_normal((n, 4)) for n in (6, 7, 8)))
    assert tk.factor_match_score(a, other).score < 0.5


def test_factor_match_score_recovers_a_planted_model(rng):
    X, A = _planted(rng, noise=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        cp = tk.cp_als(X, 3, tol=1e-10, max_iter=500)
    assert tk.factor_match_score(tk.CPTensor(np.ones(3), tuple(A)), cp).score > 0.99


@pytest.mark.parametrize("a,b,exc,match", [
    ("x", None, TypeError, r"^a is 'x'; expected a CP model"),
    (None, "y", TypeError, r"^a is None; expected a CP model"),
])
def test_factor_match_score_bad_input(a, b, exc, match):
    with pytest.raises(exc, match=match):
        tk.factor_match_score(a, b)


def test_factor_match_score_rank_and_shape_errors(rng):
    a = tk.CPTensor(np.ones(3), tuple(rng.random((n, 3)) for n in (4, 5, 6)))
    b = tk.CPTensor(np.ones(2), tuple(rng.random((n, 2)) for n in (4, 5, 6)))
    with pytest.raises(ValueError, match=r"^b has 2 components and a has 3; expected b to have at least as many"):
        tk.factor_match_score(a, b)
    c = tk.CPTensor(np.ones(3), tuple(rng.random((n, 3)) for n in (4, 5, 7)))
    with pytest.raises(ValueError, match=r"^a has shape \(4, 5, 6\) and b has shape \(4, 5, 7\)"):
        tk.factor_match_score(a, c)
    with pytest.raises(ValueError, match=r"^cp has shape \(4, 5, 6\); expected the shape of X \(4, 5, 7\)"):
        tk.corcondia(np.ones((4, 5, 7)), a)


@pytest.mark.parametrize("method", ["cp", "nn-cp"])
def test_rank_sweep_finds_the_planted_rank(method, rng):
    if method == "cp":
        X, _ = _planted(rng, noise=0.01)
    else:
        X = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 3)) * (rng.random((n, 3)) < 0.7) for n in (10, 11, 12)))
    table = tk.rank_sweep(X, range(1, 6), method=method, random_state=0, max_iter=300)
    assert [r.rank for r in table.rows] == [1, 2, 3, 4, 5]
    assert table.suggested_rank == 3
    # at the planted rank the error is the noise's (relative 0.01 for cp: 0.0096 seen) or rounding's (nn-cp's
    # exact data: 6.4e-7 seen, the non-negative solver's stopping tolerance)
    assert table.rows[2].error < (0.0105 if method == "cp" else 1e-5) and table.rows[0].error > table.rows[2].error
    assert "| 3 |" in str(table)
    again = tk.rank_sweep(X, range(1, 6), method=method, random_state=0, max_iter=300)
    assert [r.fit for r in again.rows] == [r.fit for r in table.rows]  # repeatable


def test_rank_sweep_tucker_and_plot(rng, tmp_path):
    X = tk.multi_ttm(rng.standard_normal((2, 2, 2)), [rng.standard_normal((n, 2)) for n in (8, 9, 10)])
    table = tk.rank_sweep(X, [1, 2, 3], method="tucker")
    assert table.suggested_rank is None and np.isnan(table.rows[0].corcondia)
    assert table.rows[1].error < 1e-6 < table.rows[0].error  # the fit identity: ~sqrt(eps)
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    ax = tk.rank_sweep(X, [1, 2], method="cp", random_state=0).plot()
    ax.figure.savefig(tmp_path / "ranks.png")
    assert (tmp_path / "ranks.png").stat().st_size > 1000


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"ranks": [1, 0]}, ValueError, r"^ranks=0 is not positive; expected an integer >= 1"),
    ({"ranks": "3"}, TypeError, r"^ranks is '3'; expected a sequence of positive integers"),
    ({"ranks": []}, ValueError, r"^ranks is empty"),
    ({"ranks": [1], "method": "parafac"}, ValueError, r"^method='parafac' is not valid; expected one of 'cp'"),
])
def test_rank_sweep_bad_input(kwargs, exc, match, rng):
    with pytest.raises(exc, match=match):
        tk.rank_sweep(rng.random((4, 5, 6)), **kwargs)


def test_cli_ranks_prints_the_table_and_json(rng, tmp_path):
    X, _ = _planted(rng, noise=0.01)
    p = tmp_path / "x.npy"
    np.save(p, X)
    res = runner.invoke(app, ["ranks", str(p), "--method", "cp", "--max-rank", "4", "--max-iter", "200"])
    assert res.exit_code == 0, res.output
    assert "| rank | error | fit | corcondia |" in res.stdout and "suggested rank: 3" in res.stdout
    res = runner.invoke(app, ["ranks", str(p), "--max-rank", "2", "--json", "--nonnegative", "--plot",
                              str(tmp_path / "r.png")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["method"] == "nn-cp" and [r["rank"] for r in out["rows"]] == [1, 2]
    assert (tmp_path / "r.png").exists()
    res = runner.invoke(app, ["ranks", str(p), "--method", "pca"])
    assert res.exit_code == 1 and "error: --method 'pca' is not valid; expected one of cp, nn-cp" in res.output
    res = runner.invoke(app, ["ranks", str(p), "--min-rank", "3", "--max-rank", "2"])
    assert res.exit_code == 1 and "--min-rank 3 and --max-rank 2 are invalid" in res.output


def test_cli_decompose_nonnegative_cp_apr_and_mask(rng, tmp_path):
    from tuckerkit.io import load_result

    A = [rng.random((n, 2)) for n in (10, 11, 12)]
    X = np.einsum("ir,jr,kr->ijk", *A)
    p = tmp_path / "x.npy"
    np.save(p, X)
    res = runner.invoke(app, ["decompose", str(p), "--method", "cp", "--rank", "2", "--nonnegative", "--seed", "0",
                              "-o", str(tmp_path / "nn.npz"), "--json", "--quiet"])
    assert res.exit_code == 0, res.output
    cp = load_result(tmp_path / "nn.npz")
    assert all(bool((U >= 0).all()) for U in cp.factors) and json.loads(res.stdout)["fit"] > 0.99
    res = runner.invoke(app, ["decompose", str(p), "--ranks", "2,2,2", "--nonnegative", "-o",
                              str(tmp_path / "nt.npz"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert bool((load_result(tmp_path / "nt.npz").core >= 0).all())
    counts = tmp_path / "c.npy"
    np.save(counts, rng.poisson(3 * X).astype(float))
    res = runner.invoke(app, ["decompose", str(counts), "--method", "cp-apr", "--rank", "2", "--seed", "0", "--json",
                              "--quiet"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["method"] == "cp-apr" and (tmp_path / "c.cp.npz").exists()
    mask = rng.random(X.shape) > 0.3
    np.save(tmp_path / "m.npy", mask)
    Xn = np.where(mask, X, 0.0)
    np.save(tmp_path / "xm.npy", Xn)
    res = runner.invoke(app, ["decompose", str(tmp_path / "xm.npy"), "--method", "cp", "--rank", "2", "--mask",
                              str(tmp_path / "m.npy"), "--max-iter", "500", "--stop-tol", "1e-12", "--quiet"])
    assert res.exit_code == 0, res.output
    cp = load_result(tmp_path / "xm.cp.npz")
    assert np.linalg.norm(cp.to_dense() - X) / np.linalg.norm(X) < 1e-4  # the missing entries are recovered
    for args, msg in [
        (["--method", "hosvd", "--ranks", "2,2,2", "--nonnegative"], "--nonnegative applies to --method hooi and cp"),
        (["--method", "cp-apr", "--rank", "2", "--mask", str(tmp_path / "m.npy")], "--mask applies to --method hooi"),
        (["--ranks", "2,2,2", "--mask", str(tmp_path / "nope.npy")], "--mask '"),
        (["--method", "cp-apr"], "--method cp-apr needs --rank R"),
    ]:
        res = runner.invoke(app, ["decompose", str(p), *args])
        assert res.exit_code == 1 and msg in res.output, res.output


def test_corcondia_past_memory_is_refused_before_the_sweep(monkeypatch):
    """Its core has R^N entries: rank 2000 on a 3-way tensor asked numpy for 59.6 GiB after 17 s of sweeps."""
    import tuckerkit.decomposition._cp as cp_module

    X = np.random.default_rng(0).random((20, 30, 40))
    big = tk.CPTensor(np.ones(2000), tuple(np.random.default_rng(1).random((n, 2000)) for n in X.shape))
    with pytest.raises(MemoryError, match=r"^CORCONDIA at rank 2000 \(a core of 2000\^3 entries\) needs about "):
        tk.corcondia(X, big)

    def no_fit(*args, **kwargs):
        raise AssertionError("a fit ran before the sweep's ranks were checked")

    monkeypatch.setattr(cp_module, "cp_als", no_fit)  # (refused up front, not after the rank-1 fit)
    with pytest.raises(MemoryError, match=r"^CORCONDIA at rank 2001 "):
        tk.rank_sweep(X, [1, 2001])


def test_rank_sweep_callback_gets_each_row_as_it_is_done(rng):
    X = np.einsum("ir,jr,kr->ijk", *(rng.standard_normal((n, 2)) for n in (6, 7, 8)))
    seen = []
    table = tk.rank_sweep(X, [1, 2, 3], random_state=0, callback=lambda row: seen.append(row))
    assert seen == list(table.rows)
    with pytest.raises(TypeError, match=r"callback must be callable or None; received str"):
        tk.rank_sweep(X, [1], callback="print")


def test_cli_ranks_prints_each_row_before_a_later_rank_fails(tmp_path, monkeypatch, rng):
    """The table was printed only at the end: a failure at the last rank lost the rows before it."""
    from conftest import cli_invoke

    from tuckerkit.decomposition import _cp

    p = tmp_path / "x.npy"
    np.save(p, rng.standard_normal((6, 7, 8)))
    real = _cp.cp_als

    def failing(X, r, **kw):
        if r == 3:
            raise MemoryError("rank 3 ran out of memory")
        return real(X, r, **kw)

    monkeypatch.setattr(_cp, "cp_als", failing)  # (rank_sweep imports it from there at each call)
    res = cli_invoke(["ranks", p, "--max-rank", "3"])
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert lines[0].startswith("| rank | error | fit | corcondia |")
    assert [ln.split("|")[1].strip() for ln in lines[2:4]] == ["1", "2"]
    assert "rank 3 ran out of memory" in res.output


def _exact_cp(rng, R=3, shape=(7, 8, 9)):
    F = [rng.standard_normal((n, R)) for n in shape]
    return np.einsum("ir,jr,kr->ijk", *F), F


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_diagnostics_refuse_non_finite_or_complex_or_empty_models(bad, rng):
    """A factor or weight holding an infinity or a NaN is refused in one line naming the model (an infinity hung
    LAPACK's SVD inside pinv, a NaN gave its raw error, an infinite weight NaN); complex factors or weights are
    refused (a cast dropped their imaginary parts: CORCONDIA 100.0, FMS 0.0 with a ComplexWarning); a model of
    rank 0 is refused (NaN with numpy warnings)."""
    X, F = _exact_cp(rng)
    w = np.ones(3)
    G = [F[0], F[1].copy(), F[2]]
    G[1][0, 0] = bad
    with pytest.raises(ValueError, match=r"^cp contains 1 NaN or infinite value\(s\) in its weights or factors"):
        tk.corcondia(X, (w, G))
    with pytest.raises(ValueError, match=r"^cp contains 1 NaN or infinite value\(s\)"):
        tk.corcondia(X, (np.array([1.0, bad, 1.0]), F))
    with pytest.raises(ValueError, match=r"^b contains 1 NaN or infinite value\(s\)"):
        tk.factor_match_score((w, F), (w, G))
    with pytest.raises(TypeError, match=r"^cp has complex factors or weights; expected a real CP model"):
        tk.corcondia(X, (w, [F[0] + 1j * F[0], F[1], F[2]]))
    with pytest.raises(TypeError, match=r"^b has complex factors or weights"):
        tk.factor_match_score((w, F), (w, [1j * F[0], F[1], F[2]]))
    empty = (w[:0], [U[:, :0] for U in F])
    with pytest.raises(ValueError, match=r"^cp has rank 0 \(no components\); expected at least one component"):
        tk.corcondia(X, empty)
    with pytest.raises(ValueError, match=r"^a has rank 0"):
        tk.factor_match_score(empty, (w, F))
    np.testing.assert_array_equal(G[0], F[0])  # (inputs untouched)


def test_factor_match_score_stays_in_its_range_and_translates_pyttb_score(rng):
    """Self-comparisons score exactly 1 (cosines rounded above 1 had given 1 + 2e-16); pyttb's ``K.score(L)``
    (L with fewer components, the weight penalty on by default) is ``factor_match_score(L, K, weights=True)``
    as docs/coming_from.md says."""
    for _ in range(50):
        G = [rng.standard_normal((n, 2)) for n in (4, 5, 6)]
        fm = tk.factor_match_score((np.ones(2), G), (np.ones(2), G))
        assert fm.score <= 1.0 and np.all(fm.congruences <= 1.0)
        assert fm.score == pytest.approx(1.0, abs=4 * np.finfo(np.float64).eps)
    ttb = pytest.importorskip("pyttb")
    U = [rng.random((n, 3)) for n in (4, 5, 6)]
    K = ttb.ktensor([u.copy() for u in U], np.array([1.0, 2, 3]))
    L = ttb.ktensor([u[:, :2].copy() for u in U], np.array([1.0, 4]))
    assert tk.factor_match_score(L, K, weights=True).score == pytest.approx(K.score(L)[0], abs=1e-12)


def test_rank_sweep_sorts_ranks_records_its_seed_and_refuses_repeats(rng):
    """Ranks given in any order are swept ascending, so ``suggested_rank`` is the largest rank before CORCONDIA
    first falls below the threshold (``[2, 1]`` had suggested 1 where 2 passed); a repeated rank and a string or
    bool threshold are refused in one line; an integer ``random_state`` is the seed every rank got (the table
    records it), so ``cp_als`` with it rebuilds a row (a hidden derived seed did not)."""
    Y = np.einsum("ir,jr,kr->ijk", *(rng.random((n, 2)) for n in (8, 9, 10)))
    up = tk.rank_sweep(Y, [1, 2, 3], random_state=0, tol=1e-10, max_iter=500)
    down = tk.rank_sweep(Y, [3, 1, 2], random_state=0, tol=1e-10, max_iter=500)
    assert [r.rank for r in down.rows] == [1, 2, 3]
    assert [r.fit for r in down.rows] == [r.fit for r in up.rows]
    assert down.suggested_rank == up.suggested_rank == 2
    assert up.seed == 0
    Z = rng.random((4, 5, 6))
    row = tk.rank_sweep(Z, [7], random_state=5, max_iter=30).rows[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.ConvergenceWarning)
        assert tk.cp_als(Z, 7, random_state=5, max_iter=30).fit == row.fit
    drawn = tk.rank_sweep(Z, [2], random_state=np.random.default_rng(3), max_iter=5)
    assert isinstance(drawn.seed, int)
    with pytest.raises(ValueError, match=r"^ranks has 2 more than once; expected each rank once"):
        tk.rank_sweep(Y, [2, 2, 3])
    for bad in ("95", True):
        with pytest.raises(TypeError, match=r"^threshold must be a number; received"):
            tk.rank_sweep(Y, [1, 2], threshold=bad)


def test_corcondia_is_the_same_at_extreme_magnitudes():
    """The weights folded into U_0 before its pinv overflowed at 1e307 and underflowed at 1e-310: NaN, where the
    diagnostic does not depend on X's scale."""
    B = np.random.default_rng(0).standard_normal((4, 5, 6))
    ref = tk.corcondia(B, tk.cp_als(B, 2))
    for scale in (1e307, 1e-310):
        X = B * scale
        got = tk.corcondia(X, tk.cp_als(X, 2))
        assert abs(got - ref) <= 1e-9 * abs(ref), (scale, got, ref)
