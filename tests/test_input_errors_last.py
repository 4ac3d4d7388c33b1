"""Bad input gets a clear one-line error: the last confirmed defects (complex starts for a real X, the
estimators' sample_rank and inverse_transform, the CLI's NaN input file, malformed numeric option values)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from conftest import cli_invoke, folder_state, one_line_error

import tuckerkit as tk


# ------------------------------------------------------------------ 1. complex init factors / core for a real X
@pytest.fixture
def real_x(rng):
    return rng.random((5, 6, 7))


def _complex_factors(rng, shape, r):
    return [rng.random((s, r)) + 1j * rng.random((s, r)) for s in shape]


@pytest.mark.parametrize("how", ["list", "pair", "mask"])
def test_cp_als_refuses_complex_init_factors_for_a_real_x(rng, real_x, how):
    U = _complex_factors(rng, real_x.shape, 2)
    init = (None, U) if how == "pair" else U
    kw = {"mask": np.ones(real_x.shape, bool)} if how == "mask" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning either: refused before any cast
        with pytest.raises(TypeError, match=r"^init's factors\[0\] has complex dtype complex128; expected real "
                                            r"factors for a real X \(float64\)$"):
            tk.cp_als(real_x, 2, init=init, **kw)


def test_cp_als_refuses_complex_init_weights_for_a_real_x(rng, real_x):
    U = [u.real for u in _complex_factors(rng, real_x.shape, 2)]
    with pytest.raises(TypeError, match=r"^init's weights have complex dtype complex128; expected real weights "
                                        r"for a real X \(float64\)$"):
        tk.cp_als(real_x, 2, init=(np.ones(2) + 1j, U))


@pytest.mark.parametrize("how", ["list", "mask"])
def test_hooi_refuses_complex_init_factors_for_a_real_x(rng, real_x, how):
    U = _complex_factors(rng, real_x.shape, 2)
    U[0] = U[0].real.copy()  # the first complex one is named
    kw = {"mask": np.ones(real_x.shape, bool)} if how == "mask" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match=r"^init's factors\[1\] has complex dtype complex128; expected real "
                                            r"factors for a real X \(float64\)$"):
            tk.hooi(real_x, (2, 2, 2), init=U, **kw)


def test_hooi_refuses_a_complex_init_core_for_a_real_x(rng, real_x):
    U = [u.real for u in _complex_factors(rng, real_x.shape, 2)]
    with pytest.raises(TypeError, match=r"^init's core has complex dtype complex128; expected a real core for a "
                                        r"real X \(float64\)$"):
        tk.hooi(real_x, (2, 2, 2), init=(np.ones((2, 2, 2)) + 1j, U))


def test_real_init_for_a_complex_x_still_works(rng, real_x):
    U = [u.real for u in _complex_factors(rng, real_x.shape, 2)]
    Xc = real_x + 1j * rng.random(real_x.shape)
    assert tk.cp_als(Xc, 2, init=U).factors[0].dtype.kind == "c"
    assert tk.hooi(Xc, (2, 2, 2), init=U).core.dtype.kind == "c"
    assert tk.hooi(real_x, (2, 2, 2), init=U).core.dtype == np.float64


# ------------------------------------------------------------------------- 2. the estimators' sample_rank named
@pytest.mark.parametrize("nonnegative", [False, True])
def test_tucker_decomposer_names_sample_rank(rng, nonnegative):
    X = rng.random((20, 6, 7))
    with pytest.raises(ValueError, match=r"^sample_rank=100 exceeds the number of samples \(20\); expected an "
                                         r"integer between 1 and the number of samples$"):
        tk.TuckerDecomposer(ranks=(2, 3), sample_rank=100, nonnegative=nonnegative).fit(X)
    with pytest.raises(ValueError, match=r"^ranks\[0\]=10 exceeds the size of feature mode 0 \(6; X's mode 1\)"):
        tk.TuckerDecomposer(ranks=(10, 3)).fit(X)
    assert tk.TuckerDecomposer(ranks=(2, 3), sample_rank=20).fit(X).core_.shape == (20, 2, 3)


# ------------------------------------------------------------------------ 3. inverse_transform of NaN / Inf
@pytest.fixture
def fitted(rng):
    X = rng.random((20, 6, 7))
    return X, tk.TuckerDecomposer(ranks=(2, 3)).fit(X), tk.CPDecomposer(rank=2, random_state=0).fit(X)


@pytest.mark.parametrize("bad, text", [(np.nan, "NaN"), (np.inf, "infinity"), (-np.inf, "infinity")])
def test_inverse_transform_refuses_non_finite_input(fitted, bad, text):
    X, tucker, cp = fitted
    Z = tucker.transform(X)
    Z[3, 1] = bad
    with pytest.raises(ValueError, match=rf"^Input Z contains {text}"):
        tucker.inverse_transform(Z)
    C = cp.transform(X)
    C[0, 0] = bad
    with pytest.raises(ValueError, match=rf"^Input C contains {text}"):
        cp.inverse_transform(C)


def test_inverse_transform_keeps_its_shape_check_and_results(fitted):
    X, tucker, cp = fitted
    assert tucker.inverse_transform(tucker.transform(X)).shape == X.shape
    assert cp.inverse_transform(cp.transform(X)).shape == X.shape
    assert tucker.inverse_transform(np.zeros((0, 6))).shape == (0, 6, 7)
    with pytest.raises(ValueError, match=re.escape("Z must have shape (n_samples, 6); received (2, 5)")):
        tucker.inverse_transform(np.zeros((2, 5)))
    with pytest.raises(ValueError, match=re.escape("C must have shape (n_samples, 2); received (3,)")):
        cp.inverse_transform(np.zeros(3))


# ------------------------------------------------------------------------- 4. the CLI names the NaN input file
@pytest.fixture
def nan_file(tmp_path, rng):
    X = rng.random((6, 7, 8))
    X[0, 0, 0] = np.nan
    p = tmp_path / "nan.npy"
    np.save(p, X)
    return p


@pytest.mark.parametrize("args", [
    ["decompose", "--ranks", "2,2,2"], ["decompose", "--max-error", "0.1"], ["decompose", "--method", "cp",
                                                                             "--rank", "2"],
    ["decompose", "--method", "hosvd", "--ranks", "2,2,2"], ["decompose", "--method", "cp", "--rank", "2",
                                                             "--nonnegative"],
    ["decompose", "--ranks", "2,2,2", "--memory-limit", "1KB"], ["ranks", "--max-rank", "2"],
    ["ranks", "--max-rank", "2", "--method", "tucker"],
])
def test_cli_names_the_input_file_holding_nan(tmp_path, nan_file, args):
    before = folder_state(tmp_path)
    res = cli_invoke([args[0], nan_file, *args[1:], "-q"] if args[0] == "decompose" else [args[0], nan_file,
                                                                                           *args[1:]])
    assert res.exit_code == 1, res.output
    line = res.output.strip()
    assert re.fullmatch(rf"error: {re.escape(repr(str(nan_file)))} contains (1 )?NaN or infinite value\(s\); "
                        r"remove or impute them first", line), res.output
    assert folder_state(tmp_path) == before


def test_cli_names_the_input_file_holding_nan_with_a_mask(tmp_path, nan_file):
    np.save(tmp_path / "mask.npy", np.ones((6, 7, 8), bool))
    res = cli_invoke(["decompose", nan_file, "--ranks", "2,2,2", "--mask", tmp_path / "mask.npy", "-q"])
    one_line_error(res, f"{str(nan_file)!r} has NaN or infinite values at observed entries (mask True); only "
                        "missing entries may hold them")


def test_cli_info_of_a_nan_file_still_reports(nan_file):
    res = cli_invoke(["info", nan_file])
    assert res.exit_code == 0 and "undefined: 1 NaN or infinite value(s)" in res.stdout


# --------------------------------------------------------------------- 5. malformed numeric option values
@pytest.mark.parametrize("args, message", [
    (["decompose", "X", "--max-iter", "2.5"], "--max-iter must be an integer; received '2.5'"),
    (["decompose", "X", "--seed", "x"], "--seed must be an integer; received 'x'"),
    (["decompose", "X", "--stop-tol", "a"], "--stop-tol must be a number; received 'a'"),
    (["decompose", "X", "--max-error", "abc"], "--max-error must be a number; received 'abc'"),
    (["decompose", "X", "--method", "cp", "--rank", ""], "--rank must be an integer; received ''"),
    (["decompose", "X", "--iterations", "1e3"], "--iterations must be an integer; received '1e3'"),
    (["ranks", "X", "--max-rank", "q"], "--max-rank must be an integer; received 'q'"),
    (["ranks", "X", "--tol", "1e"], "--tol must be a number; received '1e'"),
])
def test_cli_bad_numeric_option_value_is_one_line(tmp_path, x_file, args, message):
    before = folder_state(tmp_path)
    res = cli_invoke([x_file[0] if a == "X" else a for a in args])
    assert res.exit_code == 2, res.output  # a usage error, as the other usage errors (tests/test_cli.py)
    assert res.output.strip().splitlines() == [f"error: {message}"], res.output
    assert folder_state(tmp_path) == before


def test_cli_other_usage_errors_keep_their_usage_block():
    res = cli_invoke(["decompose"])
    assert res.exit_code == 2 and "Usage: tuckerkit decompose [OPTIONS] INPUT" in res.output


@pytest.mark.parametrize("method", ["non_negative_cp", "non_negative_tucker", "cp_apr"])
def test_the_other_decompositions_refuse_complex_init_for_a_real_x(rng, method):
    """Non-negative CP and Tucker and CP-APR take the same check of ``init``'s dtype against X's."""
    X = rng.random((5, 6, 7))
    U = _complex_factors(rng, X.shape, 2)
    if method == "non_negative_tucker":
        init = (np.abs(rng.standard_normal((2, 2, 2))), [np.abs(u) + 0j for u in U])
    else:
        init = [np.abs(u) + 0j for u in U]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match=r"^init's factors\[0\] has complex dtype complex128; expected real "
                                            r"factors for a real X \(float64\)$"):
            getattr(tk, method)(X, 2, init=init)


def test_tucker_decomposer_names_the_feature_mode_of_a_rank_too_large():
    """An estimator's ranks are per feature mode (X's modes after the samples'): the message says which."""
    X = np.random.default_rng(0).random((20, 6, 7))
    with pytest.raises(ValueError, match=re.escape("ranks[1]=10 exceeds the size of feature mode 1 (7; X's mode 2); "
                                                   "each rank must be between 1 and its mode size")):
        tk.TuckerDecomposer(ranks=(3, 10)).fit(X)
