"""Issue 19, the user's side: each item a first-time user tripped over, checked as that user would meet it.

Items 1-6 were wrong or broken, 7-13 confusing, then what was expected and missing (conversions with TensorLy
and pyttb, ``full()`` / ``numpy.asarray`` reconstruction, a "coming from" page). The command line is driven
through typer's ``CliRunner`` and once as a real subprocess.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from tuckerkit.cli import app
from typer.testing import CliRunner

import tuckerkit as tk
from tuckerkit import ConvergenceWarning, CPTensor, TuckerDecomposer, TuckerTensor
from tuckerkit.io import load_metadata, load_result, save_result

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
EPS64 = np.finfo(np.float64).eps


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _planted(rng, shape=(12, 14, 10), ranks=(3, 4, 2)):
    Us = [rng.standard_normal((n, r)) for n, r in zip(shape, ranks, strict=True)]
    return tk.multi_ttm(rng.standard_normal(ranks), Us)


@pytest.fixture
def tensor_file(tmp_path, rng):
    X = _planted(rng)
    p = tmp_path / "x.npy"
    np.save(p, X)
    return p, X


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ------------------------------------------------------------------------------------------------------------
# 1. output files respect the umask
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_output_files_get_the_umask_permissions_like_np_save(tensor_file, tmp_path, umask):
    p, X = tensor_file
    old = os.umask(umask)
    try:
        np.save(tmp_path / "plain.npy", X)  # what any other tool would create
        assert _cli("decompose", p, "--ranks", "3,4,2", "-q", "-o", tmp_path / "r.npz").exit_code == 0
        assert _cli("reconstruct", tmp_path / "r.npz", "-o", tmp_path / "back.npy").exit_code == 0
        save_result(tmp_path / "api.npz", tk.hosvd(X, 2))
    finally:
        os.umask(old)
    want = 0o666 & ~umask
    assert _mode(tmp_path / "plain.npy") == want
    for name in ("r.npz", "back.npy", "api.npz"):
        assert _mode(tmp_path / name) == want, (name, oct(_mode(tmp_path / name)))


def test_force_overwrite_keeps_the_existing_files_permissions(tensor_file, tmp_path):
    p, _ = tensor_file
    out = tmp_path / "r.npz"
    assert _cli("decompose", p, "--ranks", "3,4,2", "-q", "-o", out).exit_code == 0
    out.chmod(0o640)
    assert _cli("decompose", p, "--ranks", "2,2,2", "-q", "-o", out, "--force").exit_code == 0
    assert _mode(out) == 0o640 and load_result(out).ranks == (2, 2, 2)


# ------------------------------------------------------------------------------------------------------------
# 2. init= as factor lists, pairs and peer objects; messages never print an array
# ------------------------------------------------------------------------------------------------------------
def test_hooi_init_accepts_factor_lists_pairs_and_peer_models(rng):
    import pyttb
    from tensorly.tucker_tensor import TuckerTensor as TLTucker

    X = _planted(rng) + 0.1 * rng.standard_normal((12, 14, 10))
    ranks = (3, 4, 2)
    start = tk.hosvd(X, ranks)
    Us = [np.array(U) for U in start.factors]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = tk.hooi(X, ranks, init=start, max_iter=3, tol=0)
        for init in (Us, tuple(Us), (np.array(start.core), Us), TLTucker((np.array(start.core), Us)),
                     pyttb.ttensor(pyttb.tensor(np.array(start.core)), Us)):
            got = tk.hooi(X, ranks, init=init, max_iter=3, tol=0)
            np.testing.assert_array_equal(got.core, ref.core)
            assert got.fit_history == ref.fit_history
    np.testing.assert_array_equal(Us[0], start.factors[0])  # the user's factors are not modified


def test_cp_init_accepts_factor_lists_weight_pairs_and_peer_models(rng):
    import pyttb
    from tensorly.cp_tensor import CPTensor as TLCP

    X = rng.standard_normal((8, 9, 10))
    R = 3
    Us = [rng.random((n, R)) for n in X.shape]
    w = np.array([2.0, 1.0, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = tk.cp_als(X, R, init=CPTensor(w, tuple(Us)), max_iter=4, tol=0)
        plain = tk.cp_als(X, R, init=CPTensor(np.ones(R), tuple(Us)), max_iter=4, tol=0)
        for init in ((w, Us), [w, Us], TLCP((w, Us)), pyttb.ktensor(Us, w)):
            got = tk.cp_als(X, R, init=init, max_iter=4, tol=0)
            np.testing.assert_array_equal(got.weights, ref.weights)
            assert got.fit_history == ref.fit_history
        for init in (Us, tuple(Us), (None, Us)):  # no weights: ones
            assert tk.cp_als(X, R, init=init, max_iter=4, tol=0).fit_history == plain.fit_history


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda X, U: tk.hooi(X, [5, 5, 5], init=U[0]), TypeError,
     r"^init is an array of shape \(20, 5\) and dtype float64; expected 'st_hosvd', 'st_hosvd_sketch', 'hosvd', "
     r"'random', a "
     r"TuckerTensor or a list of 3 factor matrices \(the factor matrices as a list, one per mode\)$"),
    (lambda X, U: tk.cp_als(X, 5, init=U[0]), TypeError,
     r"^init is an array of shape \(20, 5\) and dtype float64; expected 'auto', 'svd', 'random', a CPTensor or a list"),
    (lambda X, U: tk.hooi(X, [5, 5, 5], init=U[:2]), ValueError,
     r"^init has shape \(20, 20\) and ranks \(5, 5\); expected shape \(20, 20, 20\) and ranks \(5, 5, 5\)$"),
    (lambda X, U: tk.hooi(X, [4, 5, 5], init=U), ValueError,
     r"^init has shape \(20, 20, 20\) and ranks \(5, 5, 5\); expected shape \(20, 20, 20\) and ranks \(4, 5, 5\)$"),
    (lambda X, U: tk.cp_als(X, 4, init=U), ValueError,
     r"^init has shape \(20, 20, 20\) and rank 5; expected shape \(20, 20, 20\) and rank 4$"),
    (lambda X, U: tk.cp_als(X, 5, init=(np.ones(4), U)), ValueError,
     r"^init's weights are an array of shape \(4,\) and dtype float64; expected a vector of 5 weights"),
    (lambda X, U: tk.cp_als(X, 5, init=tk.hosvd(X, 5)), TypeError,
     r"^init is a TuckerTensor, a Tucker model; expected a CP model \(CPTensor\)"),
    (lambda X, U: tk.hooi(X, [5, 5, 5], init=[U[0], U[1], np.full((20, 5), np.nan)]), ValueError,
     r"^init factor 2 contains NaN or infinite values; expected finite numbers$"),
    (lambda X, U: tk.hooi(X, [5, 5, 5], init={"factors": U}), TypeError,
     r"^init is a dict; expected 'st_hosvd', 'st_hosvd_sketch', 'hosvd', 'random', a TuckerTensor or a list of 3 "
     r"factor matrices"),
    (lambda X, U: tk.cp_als(X, 5, init=[U[0], np.zeros((20, 5)), U[2]]), ValueError,
     r"^init factor 1 is all zeros; expected a nonzero start \(the updates multiply by it before replacing it, so "
     r"the model would stay zero\)$"),
    (lambda X, U: tk.cp_als(X, 5, init=[np.zeros((20, 5)), U[1], U[2]], fixed_modes=[0]), ValueError,
     r"^init factor 0 is all zeros; expected a nonzero start"),
    (lambda X, U: tk.non_negative_cp(np.abs(X), 5, init=[np.zeros((20, 5)), *np.abs(U[1:])]), ValueError,
     r"^init factor 0 is all zeros; expected a nonzero start"),
    (lambda X, U: tk.cp_apr(np.round(np.abs(X)), 5, init=[*np.abs(U[:2]), np.zeros((20, 5))]), ValueError,
     r"^init factor 2 is all zeros; expected a nonzero start"),
    (lambda X, U: tk.cp_als(X, 5, init="nvecs"), ValueError,
     r"^init='nvecs' is not valid; expected one of 'auto', 'svd', 'random', a CPTensor \(tuckerkit's or TensorLy's\)"),
])
def test_bad_init_fails_in_one_short_line(rng, call, exc, match):
    X = rng.standard_normal((20, 20, 20))
    U = [rng.standard_normal((20, 5)) for _ in range(3)]
    with pytest.raises(exc, match=match) as info:
        call(X, U)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_a_zero_first_factor_is_a_valid_cp_start(rng):
    """CP-ALS replaces mode 0's start before reading it: a zero one gives the run from the others (bit for bit)."""
    X = rng.standard_normal((8, 9, 10))
    Us = [rng.random((n, 3)) for n in X.shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = tk.cp_als(X, 3, init=Us, max_iter=4, tol=0)
        got = tk.cp_als(X, 3, init=[np.zeros_like(Us[0]), *Us[1:]], max_iter=4, tol=0)
    assert got.fit_history == ref.fit_history and got.fit > 0


def _bad_calls(rng):
    """Many wrong calls a user makes, each with arrays where they do not belong."""
    X = rng.standard_normal((30, 30, 30))
    big = rng.standard_normal((30, 30))
    Us = [rng.standard_normal((30, 4)) for _ in range(3)]
    T = tk.hosvd(X, 4)
    yield lambda: tk.hooi(X, [5, 5, 5], init=Us)
    yield lambda: tk.hooi(X, [5, 5, 5], init=big)
    yield lambda: tk.hooi(X, [5, 5, 5], init=(big, big))
    yield lambda: tk.hooi(X, big)
    yield lambda: tk.hooi(X, [5, 5, big])
    yield lambda: tk.hooi(X, [5, 5, 5], tol=big)
    yield lambda: tk.hooi(X, [5, 5, 5], max_iter=big)
    yield lambda: tk.hooi(X, [5, 5, 5], random_state=big)
    yield lambda: tk.hooi(X, [5, 5, 5], callback=big)
    yield lambda: tk.hooi(X, [5, 5, 5], init=T)
    yield lambda: tk.cp_als(X, 5, init=Us)
    yield lambda: tk.cp_als(X, 4, init=(big, Us))
    yield lambda: tk.cp_als(X, 4, init=[Us])
    yield lambda: tk.cp_als(X, big)
    yield lambda: tk.cp_als(X, 4, init=big)
    yield lambda: tk.cp_als(X, 4, tol=big)
    yield lambda: tk.cp_als(X, 4, normalize=True, init=list(range(100)))
    yield lambda: tk.st_hosvd(X, max_error=big)
    yield lambda: tk.st_hosvd(X, max_error=2.0)
    yield lambda: tk.st_hosvd(X, [5, 5, 5], order=big)
    yield lambda: tk.hosvd(X, max_error=big)
    yield lambda: tk.hosvd(X, [40, 5, 5])
    yield lambda: tk.ttm(X, big[:, :7], 0)
    yield lambda: tk.multi_ttm(X, big)
    yield lambda: tk.mttkrp(X, big, 0)
    yield lambda: tk.mttkrp(X, [big, big], 0)
    yield lambda: tk.gram(X, big)
    yield lambda: tk.hooi(big, [5, 5, 5])
    yield lambda: tk.hooi(list(X), [5, 5, 5], init=Us)
    yield lambda: TuckerTensor.from_pyttb(big)
    yield lambda: CPTensor.from_pyttb(Us)
    yield lambda: TuckerDecomposer(ranks=(2, 2)).fit(X).transform(X[:, :20])


def test_no_error_message_prints_an_array(rng):
    seen = 0
    for call in _bad_calls(rng):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                call()
            except (ValueError, TypeError) as exc:
                msg = str(exc)
            else:
                continue
        seen += 1
        assert "\n" not in msg and len(msg) < 400, msg
        assert not re.search(r"array\(|\[\[|\d\.\d{4,}e?[+-]?\d*\s+-?\d", msg), msg
    assert seen >= 28


# ------------------------------------------------------------------------------------------------------------
# 3. reconstruct of a tensor file says it once; info of a text file says what it is
# ------------------------------------------------------------------------------------------------------------
def test_reconstruct_of_a_tensor_file_and_info_of_a_text_file(tensor_file, tmp_path):
    p, _ = tensor_file
    res = _cli("reconstruct", p, "-o", tmp_path / "b.npy")
    assert res.exit_code == 1
    assert res.output.strip() == (f"error: '{p}' is not a valid tuckerkit result file: it holds one array, not the "
                                  ".npz archive written by tuckerkit decompose (or save_result)")
    junk = tmp_path / "junk.npy"
    junk.write_text("this is not an array\n1 2 3\n")
    res = _cli("info", junk)
    assert res.exit_code == 1
    assert res.output.strip() == (f"error: '{junk}' is not a valid .npy file (it looks like a text file; expected "
                                  "an array saved by numpy.save)")
    (tmp_path / "other.npz").write_bytes((tmp_path / "x.npy").read_bytes()[:0] or b"")
    np.savez(tmp_path / "other.npz", a=np.ones(3))
    res = _cli("reconstruct", tmp_path / "other.npz", "-o", tmp_path / "c.npy")
    assert res.output.count("not a valid tuckerkit result file") == 1 and "holds a; expected core" in res.output


# ------------------------------------------------------------------------------------------------------------
# 4. n_features_in_ counts the entries of a sample
# ------------------------------------------------------------------------------------------------------------
def test_estimators_count_features_as_sample_entries_and_take_flattened_samples(rng):
    from tuckerkit import CPDecomposer

    X = rng.standard_normal((40, 25, 25))
    for est in (TuckerDecomposer(ranks=(3, 3)), CPDecomposer(rank=3, random_state=0, tol=1e-4)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X)
        assert est.n_features_in_ == 625 and est.feature_shape_ == (25, 25)
        np.testing.assert_array_equal(est.transform(X.reshape(40, 625)), est.transform(X))
        with pytest.raises(ValueError, match=rf"^X has samples of shape \(24, 24\), but {type(est).__name__} was "
                                             r"fitted on samples of shape \(25, 25\) \(625 features; samples "
                                             r"flattened to 625 features are accepted too\)$"):
            est.transform(X[:, :24, :24])
        with pytest.raises(ValueError, match=r"X has samples of shape \(576,\), but"):
            est.transform(X[:, :24, :24].reshape(40, -1))


# ------------------------------------------------------------------------------------------------------------
# 5. warnings point at the caller's line
# ------------------------------------------------------------------------------------------------------------
def test_warnings_point_at_the_callers_line(rng):
    from tuckerkit import CPDecomposer

    X = rng.standard_normal((10, 6, 7))
    calls = [
        lambda: tk.hooi(X, (2, 2, 2), tol=0, max_iter=1),
        lambda: tk.cp_als(X, 2, tol=0, max_iter=1),
        lambda: TuckerDecomposer(ranks=2, tol=0, max_iter=1).fit(X),
        lambda: TuckerDecomposer(ranks=2, tol=0, max_iter=1).fit_transform(X),  # through scikit-learn's wrapper
        lambda: CPDecomposer(rank=2, tol=0, max_iter=1).fit_transform(X),
        lambda: tk.st_hosvd(X, tol=0.5),  # the deprecation (FutureWarning) as well
    ]
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert caught, call
        for w in caught:  # the line of the user's call: here, the lambda's
            assert (w.filename, w.lineno) == (__file__, call.__code__.co_firstlineno), (
                w.category.__name__, w.filename, w.lineno)


# ------------------------------------------------------------------------------------------------------------
# 6. results are frozen, arrays included
# ------------------------------------------------------------------------------------------------------------
def test_results_are_read_only_and_everything_still_works(rng, tmp_path):
    X = _planted(rng)
    T = tk.hooi(X, (3, 4, 2))
    cp = tk.cp_als(X, 2, random_state=0, tol=1e-6, max_iter=500)
    for arr in (T.core, *T.factors, cp.weights, *cp.factors):
        assert not arr.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        T.core[0, 0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        T.factors[1][:] = 0
    with pytest.raises(ValueError, match="read-only"):
        cp.weights *= 2
    core, _ = T
    assert core is T.core and T.to("cpu") is T
    np.testing.assert_allclose(T.to_dense(), X, atol=1e-10 * np.abs(X).max())
    copy = T.core.copy()
    copy[0, 0, 0] = 1  # a copy is the user's to change
    # the arrays a user hands in stay writable: the result holds read-only views of them
    w, Us = np.ones(2), [rng.random((n, 2)) for n in (4, 5, 6)]
    mine = CPTensor(w, tuple(Us))
    w[0] = 3.0
    assert mine.weights[0] == 3.0 and not mine.weights.flags.writeable and w.flags.writeable
    back = load_result(save_result(tmp_path / "t.npz", T))
    assert not back.core.flags.writeable and back.fit == T.fit
    # the results go back in as starting points, estimators fit and transform
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert tk.hooi(X, (3, 4, 2), init=T, max_iter=2).ranks == (3, 4, 2)
        assert tk.cp_als(X, 2, init=cp, max_iter=2).rank == 2
    est = TuckerDecomposer(ranks=(2, 2)).fit(X)
    assert est.transform(X).shape == (12, 4)
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        T.core = np.zeros((3, 4, 2))  # type: ignore[misc]


def test_sparse_kernels_take_read_only_factors(rng):
    from tuckerkit.datasets import make_sparse_tensor

    S = make_sparse_tensor((30, 20, 10), 400, random_state=0).data
    cp = tk.cp_als(S, 3, random_state=0, tol=1e-6, max_iter=200)
    assert not cp.factors[0].flags.writeable
    M = tk.mttkrp(S, cp.factors, 0)
    np.testing.assert_allclose(M, tk.mttkrp(S.to_dense(), [U.copy() for U in cp.factors], 0),
                               atol=100 * EPS64 * np.abs(M).max())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        T = tk.hooi(S, (2, 2, 2), max_iter=3)
        assert tk.hooi(S, (2, 2, 2), init=T, max_iter=2).ranks == (2, 2, 2)


# ------------------------------------------------------------------------------------------------------------
# 7. the rank-choice target (max_error) and the convergence tolerance (tol) have different names
# ------------------------------------------------------------------------------------------------------------
def test_max_error_chooses_ranks_and_tol_is_its_deprecated_name(rng):
    X = _planted(rng) + 1e-3 * rng.standard_normal((12, 14, 10))
    T = tk.st_hosvd(X, max_error=0.01)
    assert T.ranks == (3, 4, 2) and T.relative_error(X) <= 0.01
    with pytest.warns(FutureWarning, match=r"^st_hosvd\(tol=\.\.\.\) is deprecated and will be removed in tuckerkit "
                                           r"0\.3; use max_error=0\.01 \(the error target of the rank choice\)\. tol "
                                           r"is the convergence tolerance of hooi and cp_als\.$"):
        old = tk.st_hosvd(X, tol=0.01)
    np.testing.assert_array_equal(old.core, T.core)
    with pytest.raises(ValueError, match=r"^pass max_error only; tol is its deprecated name \(received both: "
                                         r"tol=0\.1, max_error=0\.1\)$"):
        tk.st_hosvd(X, tol=0.1, max_error=0.1)
    with pytest.raises(ValueError, match=r"^max_error=1\.5 is outside \(0, 1\); expected a relative error"):
        tk.st_hosvd(X, max_error=1.5)


def test_hosvd_takes_the_rank_choice_target(rng):
    X = _planted(rng) + 1e-3 * rng.standard_normal((12, 14, 10))
    for target in (0.3, 0.1, 0.01):
        T = tk.hosvd(X, max_error=target)
        assert T.relative_error(X) <= target
        # minimal per mode: one component fewer in any mode breaks that mode's share of the budget
        for n in range(3):
            w = np.sort(np.linalg.eigvalsh(tk.gram(X, n)))[::-1]
            budget = target**2 * float(np.sum(X * X)) / 3
            assert w[T.ranks[n]:].sum() <= budget * (1 + 1e-12)
            assert T.ranks[n] == 1 or w[T.ranks[n] - 1:].sum() > budget
    assert tk.hosvd(X, max_error=0.01).ranks == (3, 4, 2)
    with pytest.raises(ValueError, match=r"^pass exactly one of ranks and max_error; received both$"):
        tk.hosvd(X, (2, 2, 2), max_error=0.1)
    with pytest.raises(ValueError, match=r"^pass exactly one of ranks and max_error; received neither$"):
        tk.hosvd(X)


def test_tucker_estimator_max_error_chooses_ranks(rng):
    A = rng.standard_normal((30, 2))
    X = np.einsum("sr,ir,jr->sij", A, rng.standard_normal((6, 2)), rng.standard_normal((7, 2)))
    X += 1e-4 * rng.standard_normal(X.shape)
    est = TuckerDecomposer(max_error=0.01).fit(X)
    assert est.ranks_ == tk.st_hosvd(X, max_error=0.01).ranks[1:] == (2, 2)
    assert est.transform(X).shape == (30, 4) and est.fit_ > 0.99
    assert TuckerDecomposer().fit(X).ranks_ == (5, 5)  # the default stays 5 per feature mode
    with pytest.raises(ValueError, match=r"^pass either ranks or max_error, not both; max_error chooses the ranks$"):
        TuckerDecomposer(ranks=(2, 2), max_error=0.1).fit(X)
    # tol is the convergence tolerance only: a loose one stops HOOI early, and leaves the ranks alone
    assert TuckerDecomposer(ranks=(2, 3), tol=0.1).fit(X).ranks_ == (2, 3)


def test_cli_max_error_stop_tol_and_iterations(tensor_file, tmp_path):
    p, _ = tensor_file
    res = _cli("decompose", p, "--max-error", "0.01", "--json", "-o", tmp_path / "a.npz")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ranks"] == [3, 4, 2] and res.stderr == ""
    res = _cli("decompose", p, "--tol", "0.01", "--json", "-o", tmp_path / "b.npz")  # deprecated, still works
    assert res.exit_code == 0 and json.loads(res.stdout)["ranks"] == [3, 4, 2]
    assert res.stderr.strip() == ("warning: --tol is deprecated and will be removed in tuckerkit 0.3; use "
                                  "--max-error 0.01 (the error target that chooses the ranks). The convergence "
                                  "tolerance is --stop-tol.")
    # a fixed number of iterations: --iterations, or --stop-tol 0 with --max-iter (which warns)
    res = _cli("decompose", p, "--ranks", "2,2,2", "--iterations", "4", "--json", "-o", tmp_path / "c.npz")
    assert res.exit_code == 0 and res.stderr == ""
    assert json.loads(res.stdout)["iterations"] == 4 and load_metadata(tmp_path / "c.npz")["tol"] == 0.0
    res = _cli("decompose", p, "--method", "cp", "--rank", "2", "--seed", "0", "--stop-tol", "0", "--max-iter",
               "3", "--json", "-o", tmp_path / "d.npz")
    assert res.exit_code == 0 and json.loads(res.stdout)["iterations"] == 3
    assert res.stderr.startswith("warning: cp_als reached max_iter=3 before the fit changed by less than tol=0")
    res = _cli("decompose", p, "--method", "cp", "--rank", "2", "--seed", "0", "--stop-tol", "0.5", "--json",
               "-o", tmp_path / "e.npz")
    assert res.exit_code == 0 and json.loads(res.stdout)["iterations"] <= 3  # a loose tolerance stops early
    for args, msg in [
        (["--ranks", "2,2,2", "--iterations", "3", "--max-iter", "5"],
         "error: pass either --iterations N (exactly N iterations) or --max-iter / --stop-tol, not both"),
        (["--ranks", "2,2,2", "--stop-tol", "-1"], "error: --stop-tol=-1.0 is invalid; expected a finite number >= 0"),
        (["--ranks", "2,2,2", "--iterations", "0"], "error: --iterations=0 is invalid; expected an integer >= 1"),
        (["--method", "hosvd", "--ranks", "2,2,2", "--iterations", "3"],
         "error: --method hosvd does not iterate; --iterations, --max-iter and --stop-tol are for hooi and cp"),
        (["--max-error", "0.1", "--tol", "0.1"], "error: pass --max-error only; --tol is its deprecated name"),
        (["--max-error", "0", "-o", tmp_path / "f.npz"], "error: --max-error=0.0 is outside (0, 1)"),
    ]:
        res = _cli("decompose", p, *args)
        assert res.exit_code == 1 and res.output.strip().startswith(msg), res.output


# ------------------------------------------------------------------------------------------------------------
# 8. verbose=True shows the iterations on stderr and changes nothing
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["hooi", "cp_als"])
def test_verbose_prints_one_line_per_iteration_on_stderr(rng, capsys, method):
    X = rng.standard_normal((8, 9, 10))
    run = (lambda **kw: tk.hooi(X, (2, 3, 2), init="random", random_state=0, **kw)) if method == "hooi" else (
        lambda **kw: tk.cp_als(X, 2, random_state=0, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        quiet = run(max_iter=6, tol=0)
        assert capsys.readouterr().err == ""
        loud = run(max_iter=6, tol=0, verbose=True)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 7 and all(line.startswith(f"{method} iteration {i + 1}: fit ") for i, line in
                                 enumerate(err[:6]))
    assert err[-1] == f"{method} reached max_iter=6 without converging (tol=0), fit {loud.fit:.10f}"
    assert quiet.fit_history == loud.fit_history
    np.testing.assert_array_equal(quiet.factors[0], loud.factors[0])
    run(max_iter=200, tol=1e-3, verbose=True)
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"{method} converged after ")


def test_verbose_goes_through_logging_once_when_logging_shows_info(rng, capsys, caplog):
    X = rng.standard_normal((8, 9, 10))
    with caplog.at_level(logging.INFO, logger="tuckerkit"):
        tk.hooi(X, (2, 2, 2), verbose=True, tol=1e-3)
    assert "hooi iteration 1: fit" in caplog.text and capsys.readouterr().err == ""  # not twice


# ------------------------------------------------------------------------------------------------------------
# 9. the command line
# ------------------------------------------------------------------------------------------------------------
def test_cli_usage_help_and_force_hint(tensor_file):
    p, _ = tensor_file
    for cmd, arg in (("decompose", "INPUT"), ("info", "FILE"), ("reconstruct", "RESULT"), ("plan", "SPEC")):
        res = _cli(cmd, "--help")
        assert res.exit_code == 0 and f"Usage: tuckerkit {cmd} [OPTIONS] {arg}\n" in res.stdout, res.stdout
        assert "{" not in res.stdout.splitlines()[0]
    text = " ".join(_cli("decompose", "--help").stdout.split())
    assert ".tucker.npz (hooi, hosvd) or .cp.npz (cp)" in text and "faces.mat -> faces.mat.tucker.npz" in text
    assert _cli("decompose", p, "--ranks", "1,1,1").exit_code == 0
    res = _cli("decompose", p, "--ranks", "1,1,1")
    assert res.exit_code == 1
    assert res.output.strip() == f"error: output '{p.with_name('x.tucker.npz')}' already exists; pass --force to " \
                                 "overwrite it"


def test_cli_default_outputs_are_distinct_per_input_format(tmp_path, rng):
    import scipy.io

    X = _planted(rng)
    np.save(tmp_path / "faces.npy", X)
    scipy.io.savemat(tmp_path / "faces.mat", {"X": X})
    for name in ("faces.npy", "faces.mat"):
        assert _cli("decompose", tmp_path / name, "--ranks", "2,2,2", "-q").exit_code == 0
        assert _cli("decompose", tmp_path / name, "--method", "cp", "--rank", "2", "-q").exit_code == 0
    assert sorted(q.name for q in tmp_path.iterdir()) == [
        "faces.cp.npz", "faces.mat", "faces.mat.cp.npz", "faces.mat.tucker.npz", "faces.npy", "faces.tucker.npz"]


def test_cli_info_sizes_are_human_readable_and_results_are_described(tensor_file, tmp_path):
    p, _ = tensor_file
    out = _cli("info", p).stdout
    assert re.search(r"^size\s+13\.4 KB \(13,440 bytes\)$", out, re.M), out
    assert re.search(r"^available RAM\s+[\d.]+ [KMGT]B \([\d,]+ bytes\)$", out, re.M), out
    assert re.search(r"^shape\s+12 x 14 x 10$", out, re.M) and re.search(r"^fits in RAM\s+yes$", out, re.M)
    assert json.loads(_cli("info", p, "--json").stdout)["bytes"] == 13_440  # JSON keeps numbers
    assert _cli("decompose", p, "--ranks", "3,4,2", "-q").exit_code == 0
    res = _cli("info", p.with_name("x.tucker.npz"))
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert re.search(r"^file\s+.*x\.tucker\.npz \(Tucker result, hooi\)$", out, re.M), out
    assert re.search(r"^shape\s+12 x 14 x 10 float64, ranks 3 x 4 x 2$", out, re.M), out
    assert re.search(r"^fit\s+1\.0+ \(relative error .*\), \d+ iterations, converged$", out, re.M), out
    assert re.search(r"^size\s+1\.09 KB stored, 13\.4 KB as a dense tensor \(compression 12\.4x\)$", out, re.M), out
    assert re.search(rf"^from\s+{re.escape(str(p.resolve()))} \(sha256 [0-9a-f]{{12}}\.\.\.\)$", out, re.M), out
    info = json.loads(_cli("info", p.with_name("x.tucker.npz"), "--json").stdout)
    assert info["ranks"] == [3, 4, 2] and info["kind"] == "Tucker result" and info["method"] == "hooi"
    assert info["compression_ratio"] == pytest.approx(1680 / (24 + 12 * 3 + 14 * 4 + 10 * 2))


def test_cli_reconstruct_reports_the_error_against_the_original(tensor_file, tmp_path, rng):
    _, X = tensor_file
    noisy = X + 0.01 * np.linalg.norm(X) / np.sqrt(X.size) * rng.standard_normal(X.shape)
    np.save(tmp_path / "noisy.npy", noisy)
    assert _cli("decompose", tmp_path / "noisy.npy", "--ranks", "3,4,2", "-q").exit_code == 0
    result = tmp_path / "noisy.tucker.npz"
    T = load_result(result)
    res = _cli("reconstruct", result, "--against", tmp_path / "noisy.npy", "--json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    want = np.linalg.norm(noisy - T.full()) / np.linalg.norm(noisy)
    assert abs(got["relative_error"] - want) < 100 * EPS64 and "output" not in got  # only the report
    assert not (tmp_path / "noisy.tucker.npy").exists()
    res = _cli("reconstruct", result, "--against", tmp_path / "noisy.npy", "--index", "1,:,2:5")
    part = noisy[1, :, 2:5]
    want = np.linalg.norm(part - T.full()[1, :, 2:5]) / np.linalg.norm(part)
    assert res.exit_code == 0 and res.stdout.startswith(f"relative error against {tmp_path / 'noisy.npy'} "
                                                        "(index 1,:,2:5): ")
    assert float(res.stdout.split(": ")[1].split()[0]) == pytest.approx(want, rel=1e-3)
    res = _cli("reconstruct", result)  # no -o: the result's name with .npy
    assert res.exit_code == 0 and (tmp_path / "noisy.tucker.npy").exists()
    assert res.stdout.startswith(f"wrote 12x14x10 float64 tensor to {tmp_path / 'noisy.tucker.npy'} (13.")
    np.testing.assert_allclose(np.load(tmp_path / "noisy.tucker.npy"), T.full(), atol=100 * EPS64)
    np.save(tmp_path / "small.npy", X[:5])
    res = _cli("reconstruct", result, "--against", tmp_path / "small.npy")
    assert res.exit_code == 1 and res.output.strip() == (
        f"error: --against '{tmp_path / 'small.npy'}' has shape (5, 14, 10) but the result reconstructs shape "
        "(12, 14, 10)")


def test_cli_progress_bar_estimates_the_time_left():
    from rich.console import Console
    from tuckerkit.cli._app import _human_bytes, _human_seconds, _Progress

    from tuckerkit.decomposition import IterationState

    assert _Progress.remaining(10.0, 2, 10) == pytest.approx(40.0)  # 5 s per iteration, 8 left
    assert (_human_seconds(3.25), _human_seconds(42), _human_seconds(75.2), _human_seconds(4000)) == (
        "3.2 s", "42 s", "1 min 15 s", "1 h 06 min")
    assert (_human_bytes(999), _human_bytes(13_440), _human_bytes(4e9)) == ("999 B", "13.4 KB", "4 GB")
    buf = io.StringIO()
    bar = _Progress(True, 10, console=Console(file=buf, force_terminal=True, width=150), after=0.0)
    for i in (1, 2, 3):
        bar(IterationState(i, 0.5, 0.01, 0.0, ()))
    bar.bar.refresh()
    bar.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert re.search(r"iteration 3/10 .* fit 0\.500000 .* at most [\d.]+ s left", text), text


def test_cli_real_subprocess_decompose_info_reconstruct(tensor_file, tmp_path):
    exe = shutil.which("tuckerkit", path=str(Path(sys.executable).parent))
    assert exe is not None
    p, _ = tensor_file

    def run(*args):
        return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300)

    out = run("decompose", p, "--max-error", "0.01", "--iterations", "3")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert f"-> {p.with_name('x.tucker.npz')} (" in out.stdout
    info = run("info", p.with_name("x.tucker.npz"))
    assert info.returncode == 0 and "Tucker result, hooi" in info.stdout and "ranks 3 x 4 x 2" in info.stdout
    rec = run("reconstruct", p.with_name("x.tucker.npz"), "--against", p)
    assert rec.returncode == 0 and rec.stdout.startswith(f"relative error against {p}: ")
    assert float(rec.stdout.split(": ")[1].split()[0]) < 1e-8
    usage = run("decompose")
    assert usage.returncode == 2 and "Usage: tuckerkit decompose [OPTIONS] INPUT" in usage.stderr


# ------------------------------------------------------------------------------------------------------------
# 10. tk.io and tk.datasets without importing them
# ------------------------------------------------------------------------------------------------------------
def test_subpackages_are_lazy_attributes():
    code = ("import sys, tuckerkit as tk\n"
            "assert 'tuckerkit.io' not in sys.modules and 'tuckerkit.datasets' not in sys.modules\n"
            "print(tk.io.load_tensor.__name__, tk.datasets.make_low_rank_cp.__name__, tk.sparse.COOTensor.__name__)\n"
            "assert {'io', 'datasets', 'sparse'} <= set(dir(tk))\n"
            "try:\n    tk.nothing\nexcept AttributeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["load_tensor make_low_rank_cp COOTensor",
                                       "module 'tuckerkit' has no attribute 'nothing'"]


# ------------------------------------------------------------------------------------------------------------
# 12, 13. the docs and the README
# ------------------------------------------------------------------------------------------------------------
def test_guide_pages_have_a_section_and_the_cli_page_is_a_full_reference():
    from tuckerkit.cli._reference import reference_markdown

    docs = ROOT / "docs"
    toc = (docs / "guide" / "index.md").read_text()
    for page in sorted((docs / "guide").glob("*.md")):
        if page.stem != "index":
            assert f"\n{page.stem}\n" in toc, f"guide/{page.name} is not in the guide's table of contents"
    assert "guide/index" in (docs / "index.md").read_text()
    assert "{include} ../_generated/cli_reference.md" in (docs / "guide" / "cli.md").read_text()
    ref = reference_markdown()
    import typer

    group = typer.main.get_command(app)
    ctx = group.make_context("tuckerkit", [], resilient_parsing=True)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert f"## `tuckerkit {name}`" in ref
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert f"`{opt}" in ref or f", {opt}" in ref, (name, opt)
    assert "tuckerkit.css" in (docs / "conf.py").read_text() and "pre-wrap" in (docs / "_static" / "tuckerkit.css"
                                                                                 ).read_text()


def test_notebooks_hide_their_results_and_show_figures():
    import nbformat

    for name in ("faces.ipynb", "topic_model.ipynb", "sparse_cp.ipynb"):
        nb = nbformat.read(ROOT / "examples" / name, as_version=4)
        last = [c for c in nb.cells if c.cell_type == "code"][-1]
        assert "RESULTS" in last.source and "remove-cell" in last.metadata.get("tags", [])
        assert last.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}
        pngs = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        assert pngs >= 1, f"{name} has no figure"
    faces = nbformat.read(ROOT / "examples" / "faces.ipynb", as_version=4)
    src = "\n".join(c.source for c in faces.cells)
    assert "NullFormatter" in src and "np.percentile(X[p], [1, 99])" in src and "max_error=tol" in src


def test_readme_headline_table_is_made_from_the_committed_results(monkeypatch):
    """The README's headline figures are benchmarks/headline.py's output from benchmarks/results (rerun it with
    --write after committing new results): no figure in it can drift from a results file."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import headline

    readme = (ROOT / "README.md").read_text()
    block = headline.readme_block(readme)
    assert block is not None, "README.md lost its generated headline table"
    assert block == headline.table()
    assert "| HOOI per iteration, 200^3 rank 10 float64" in block and block.count("\n|") >= 10


def test_readme_is_short_and_the_rest_moved_to_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 12_000, len(readme.encode())
    assert "make demo" in readme and "make test" in readme
    for heading in re.findall(r"^#+ (.*)$", readme, re.M):
        assert len(heading) <= 30, heading
    for page in ("docs/benchmarks.md", "docs/design.md", "docs/coming_from.md"):
        assert page in readme
    design = (ROOT / "docs" / "design.md").read_text()
    bench = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "* **Engine** (`tuckerkit/engine/_plan.py`). A contraction is cast as" in design and "## Status" in design
    assert "| tensor | iterations | tuckerkit | / roofline R | TensorLy `tucker` | pyttb `tucker_als` |" in bench


# ------------------------------------------------------------------------------------------------------------
# expected and missing: conversions both ways, full() / numpy.asarray, the "coming from" page
# ------------------------------------------------------------------------------------------------------------
def test_pyttb_and_tensorly_conversions_both_ways(rng):
    import pyttb

    X = _planted(rng)
    T = tk.hooi(X, (3, 4, 2))
    tt = T.to_pyttb()
    assert isinstance(tt, pyttb.ttensor)
    np.testing.assert_allclose(tt.full().data, T.full(), atol=100 * EPS64 * np.abs(X).max())
    back = TuckerTensor.from_pyttb(tt)
    np.testing.assert_array_equal(back.core, T.core)
    cp = tk.cp_als(X, 2, random_state=0, tol=1e-6, max_iter=300)
    kt = cp.to_pyttb()
    assert isinstance(kt, pyttb.ktensor)
    np.testing.assert_allclose(kt.full().data, cp.full(), atol=100 * EPS64 * np.abs(X).max())
    np.testing.assert_array_equal(CPTensor.from_pyttb(kt).weights, cp.weights)
    # a model from pyttb owns its arrays: pyttb's in-place methods rewrote one that shared them
    mine, weights = CPTensor.from_pyttb(kt), np.array(kt.weights)
    kt.normalize()
    kt.factor_matrices[0][:] = 0
    np.testing.assert_array_equal(mine.weights, weights)
    assert np.abs(mine.full()).max() > 0
    back = TuckerTensor.from_pyttb(tt)
    tt.factor_matrices[0][:] = 0
    np.testing.assert_array_equal(back.factors[0], T.factors[0])
    tl_T = T.to_tensorly()
    from_tl = TuckerTensor.from_tensorly(tl_T)
    tl_cp = cp.to_tensorly()
    cp_from_tl = CPTensor.from_tensorly(tl_cp)
    tl_cp.factors[0][:] = 0  # (the TensorLy objects edited afterwards: the models built from them stay)
    tl_cp.weights[:] = 7
    np.testing.assert_array_equal(cp_from_tl.factors[0], cp.factors[0])
    np.testing.assert_array_equal(cp_from_tl.weights, cp.weights)
    tl_T[0][0, 0, 0] += 1.0  # TensorLy may write to its copy; ours is unchanged
    np.testing.assert_array_equal(from_tl.core, T.core)
    assert T.core[0, 0, 0] != tl_T[0][0, 0, 0]
    with pytest.raises(TypeError, match=r"^from_pyttb expects a pyttb\.ttensor; received a CPTensor$"):
        TuckerTensor.from_pyttb(cp)


def test_a_float32_cp_model_goes_to_pyttb_widened_and_a_complex_one_is_refused(rng):
    X = _planted(rng)
    cp = tk.cp_als(X.astype(np.float32), 2, random_state=0)
    kt = cp.to_pyttb()  # (pyttb's ktensor asserted float64 factors)
    for U, V in zip(kt.factor_matrices, cp.factors, strict=True):
        assert U.dtype == np.float64
        np.testing.assert_array_equal(U, V.astype(np.float64))
    Z = X + 1j * rng.standard_normal(X.shape)
    with pytest.raises(TypeError, match=r"^to_pyttb: this CP model is complex \(complex128\); pyttb's ktensor holds "
                                        r"real float64 factors only$"):
        tk.cp_als(Z, 2, random_state=0).to_pyttb()


def test_full_and_asarray_reconstruct(rng):
    X = _planted(rng)
    for model in (tk.hooi(X, (3, 4, 2)), tk.cp_als(X, 3, random_state=0, tol=1e-6, max_iter=300)):
        dense = model.to_dense()
        np.testing.assert_array_equal(model.full(), dense)
        np.testing.assert_array_equal(np.asarray(model), dense)
        assert np.asarray(model, dtype=np.float32).dtype == np.float32
        assert np.array(model).shape == (12, 14, 10)
        assert float(np.linalg.norm(np.asarray(model))) == pytest.approx(model.norm(), rel=1e-10)


def test_coming_from_page_runs():
    text = (ROOT / "docs" / "coming_from.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    for name in ("tucker_als", "parafac", "n_iter_max", "rank=", "stoptol", "max_error", "hosvd"):
        assert name in text, name
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in blocks:
            exec(compile(block, "coming_from.md", "exec"), namespace)


def test_new_starts_and_rank_targets_are_scale_equivariant(rng):
    """A factor-list start and hosvd's max_error behave the same on X and on X * 2^900 (rescaled inside)."""
    X = _planted(rng) + 1e-3 * rng.standard_normal((12, 14, 10))
    big = X * 2.0**900
    Us = [rng.random((n, 3)) for n in X.shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = tk.cp_als(X, 3, init=Us, max_iter=5, tol=0)
        b = tk.cp_als(big, 3, init=[U.copy() for U in Us], max_iter=5, tol=0)
    np.testing.assert_allclose(b.fit_history, a.fit_history, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.weights / 2.0**900, a.weights, rtol=1e-10)
    assert tk.hosvd(big, max_error=0.01).ranks == tk.hosvd(X, max_error=0.01).ranks == (3, 4, 2)


@pytest.mark.parametrize("fn, r", [(tk.cp_als, 2), (tk.hooi, 2), (tk.non_negative_cp, 2)])
@pytest.mark.parametrize(("kw", "exc", "match"), [
    ({"tol": "1e-3"}, TypeError, r"^tol must be a non-negative number; received '1e-3'$"),
    ({"tol": True}, TypeError, r"^tol must be a non-negative number; received True$"),
    ({"verbose": "no"}, TypeError,
     r"^verbose must be True or False \(or an integer level, 0 = quiet\); received 'no'$"),
])
def test_tol_and_verbose_are_numbers_and_flags_not_strings(fn, r, kw, exc, match, rng):
    """A string or a bool was converted (``tol="1e-3"`` ran with 1e-3, ``verbose="no"`` printed every iteration)."""
    X = rng.random((6, 7, 8))
    with pytest.raises(exc, match=match):
        fn(X, r, **kw)


def test_verbose_takes_an_integer_level(rng, capsys):
    X = rng.random((6, 7, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        quiet = tk.cp_als(X, 2, verbose=np.int64(0), max_iter=3, tol=0)
        assert capsys.readouterr().err == ""
        loud = tk.cp_als(X, 2, verbose=1, max_iter=3, tol=0)
    assert capsys.readouterr().err.count("\n") >= 3 and loud.fit_history == quiet.fit_history
