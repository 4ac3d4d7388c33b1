"""Bad input gets a clear one-line error and loses nothing: the reviewer's confirmed defects (all-zero tensors in
CP, empty and non-finite files on the command line, --plot, empty --index slices, the models' relative_error and
constructors, the TensorLy layer, extreme magnitudes, the CLI's option names)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from conftest import cli_invoke, folder_state, one_line_error

import tuckerkit as tk
from tuckerkit.sparse import COOTensor


@pytest.fixture
def cp_result(tmp_path, x_file):
    p, _ = x_file
    out = tmp_path / "x.cp.npz"
    res = cli_invoke(["decompose", p, "--method", "cp", "--rank", "2", "--seed", "0", "-q", "-o", out])
    assert res.exit_code == 0, res.output
    return out



# ------------------------------------------------------------------------------------ 1. CP of an all-zero tensor
@pytest.mark.parametrize("kwargs", [{}, {"linesearch": False}, {"normalize": False}, {"rank": 40},
                                    {"dtype": np.float32}, {"dtype": np.complex128}, {"init": "random"}])
def test_cp_als_of_zeros_is_the_exact_zero_model(kwargs):
    kwargs = dict(kwargs)
    dtype, rank = kwargs.pop("dtype", np.float64), kwargs.pop("rank", 2)
    cp = tk.cp_als(np.zeros((4, 5, 6), dtype=dtype), rank, **kwargs)
    assert cp.fit == 1.0 and cp.converged
    assert float(np.abs(cp.full()).max()) == 0.0
    if kwargs.get("normalize", True):
        assert not np.any(cp.weights)


def test_cp_of_zeros_sparse_estimator_and_tensorly():
    cp = tk.cp_als(COOTensor(np.zeros((0, 3), int), np.zeros(0), (3, 3, 3)), 1)
    assert cp.fit == 1.0 and not np.any(cp.weights)
    est = tk.CPDecomposer(rank=2).fit(np.zeros((20, 6, 7)))
    assert est.transform(np.zeros((20, 6, 7))).shape == (20, 2)
    from tuckerkit.compat import tensorly as tl

    _, factors = tl.parafac(np.zeros((4, 5, 6)), 2)  # (normalize_factors=False: TensorLy's weights of ones)
    assert [U.shape for U in factors] == [(4, 2), (5, 2), (6, 2)] and not any(np.any(U) for U in factors)


def test_cli_cp_and_ranks_of_zeros(tmp_path):
    p = tmp_path / "zeros.npy"
    np.save(p, np.zeros((4, 5, 6)))
    res = cli_invoke(["decompose", p, "--method", "cp", "--rank", "2", "-q"])
    assert res.exit_code == 0, res.output
    assert "fit 1.000000 (relative error 0.000e+00)" in res.stdout
    res = cli_invoke(["ranks", p, "--max-rank", "2"])
    assert res.exit_code == 0, res.output
    assert "| 2 | 0 | 1.0000 |" in res.stdout


# ------------------------------------------------------------------------------- 2. an empty --mask (and others)
def test_cli_empty_mask_file_is_one_line(tmp_path, x_file):
    p, _ = x_file
    (tmp_path / "empty.npy").write_bytes(b"")
    before = folder_state(tmp_path)
    res = cli_invoke(["decompose", p, "--method", "cp", "--rank", "2", "--mask", tmp_path / "empty.npy",
                   "-o", tmp_path / "out.npz"])
    one_line_error(res, f"--mask {str(tmp_path / 'empty.npy')!r} could not be read as a .npy array (it is empty; "
                         "expected a boolean array saved by numpy.save)")
    assert folder_state(tmp_path) == before


def test_cli_npz_mask_is_one_line(tmp_path, x_file):
    p, X = x_file
    np.savez(tmp_path / "m.npz", m=np.ones(X.shape, bool))
    res = cli_invoke(["decompose", p, "--method", "cp", "--rank", "2", "--mask", tmp_path / "m.npz",
                   "-o", tmp_path / "out.npz"])
    one_line_error(res, f"--mask {str(tmp_path / 'm.npz')!r} is an .npz archive; expected a boolean .npy of the "
                         "input's shape")


@pytest.mark.parametrize("command", [["info"], ["ranks"], ["decompose", "--method", "cp", "--rank", "2"],
                                     ["reconstruct", "RESULT", "--against"]])
def test_cli_every_file_read_answers_an_empty_file_in_one_line(tmp_path, cp_result, command):
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    args = [cp_result if a == "RESULT" else a for a in command]
    res = cli_invoke([*args[:1], *(args[1:] if command[0] == "reconstruct" else []), empty,
                   *([] if command[0] == "reconstruct" else args[1:])])
    one_line_error(res, f"{str(empty)!r} is not a valid .npy file (it is empty; expected an array saved by "
                         "numpy.save)")


# ----------------------------------------------------------------------------------------------- 3. ranks --plot
@pytest.mark.parametrize("name, message", [
    ("r.txt", "has the extension '.txt'; expected an image file: "),
    ("r", "has the extension '(none)'; expected an image file: "),
    ("r.pgf", "has the extension '.pgf'; expected an image file: "),
])
def test_cli_ranks_plot_extension_is_checked_first(tmp_path, x_file, monkeypatch, name, message):
    p, _ = x_file
    monkeypatch.setattr(tk, "rank_sweep", lambda *a, **k: pytest.fail("the sweep ran before --plot was checked"))
    res = cli_invoke(["ranks", p, "--max-rank", "1", "--plot", tmp_path / name])
    assert res.exit_code == 1, res.output
    line = f"error: --plot {str(tmp_path / name)!r} {message}"
    assert len(res.output.strip().splitlines()) == 1 and res.output.startswith(line), res.output
    assert ".png" in res.output and ".pgf" not in res.output.split("expected")[1]


def test_cli_ranks_plot_folder_existing_file_and_dangling_link(tmp_path, x_file, monkeypatch):
    p, _ = x_file
    monkeypatch.setattr(tk, "rank_sweep", lambda *a, **k: pytest.fail("the sweep ran before --plot was checked"))
    res = cli_invoke(["ranks", p, "--plot", tmp_path / "no" / "r.png"])
    one_line_error(res, f"--plot folder {str(tmp_path / 'no')!r} does not exist")
    (tmp_path / "old.png").write_bytes(b"keep")
    res = cli_invoke(["ranks", p, "--plot", tmp_path / "old.png"])
    one_line_error(res, f"--plot {str(tmp_path / 'old.png')!r} exists; choose another file name")
    assert (tmp_path / "old.png").read_bytes() == b"keep"
    link = tmp_path / "link.png"
    os.symlink(tmp_path / "target.png", link)  # dangling: savefig would have created the target through it
    res = cli_invoke(["ranks", p, "--plot", link])
    one_line_error(res, f"--plot {str(link)!r} exists; choose another file name")
    assert not (tmp_path / "target.png").exists()


def test_cli_ranks_plot_is_written_through_a_temporary(tmp_path, x_file, monkeypatch):
    pytest.importorskip("matplotlib")
    import tuckerkit.io._save as save

    p, _ = x_file
    written = []
    real = save.atomic_write

    def spy(path, writer, **kw):
        written.append(path)
        return real(path, writer, **kw)

    monkeypatch.setattr(save, "atomic_write", spy)
    monkeypatch.setattr(tk.io, "atomic_write", spy)
    res = cli_invoke(["ranks", p, "--max-rank", "1", "--plot", tmp_path / "r.svg"])
    assert res.exit_code == 0, res.output
    assert written == [tmp_path / "r.svg"] and (tmp_path / "r.svg").read_bytes().lstrip().startswith(b"<?xml")
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".tmp")]


# ------------------------------------------------------------------------------------ 4. reconstruct --against NaN
def test_cli_reconstruct_against_a_non_finite_file(tmp_path, x_file, cp_result):
    _, X = x_file
    Y = X.copy()
    Y[0, 0, 0], Y[1, 1, 1] = np.nan, np.inf
    np.save(tmp_path / "bad.npy", Y)
    before = folder_state(tmp_path)
    res = cli_invoke(["reconstruct", cp_result, "--against", tmp_path / "bad.npy", "-o", tmp_path / "r.npy"])
    one_line_error(res, f"--against {str(tmp_path / 'bad.npy')!r} contains 2 NaN or infinite value(s); remove or "
                         "impute them first")
    assert folder_state(tmp_path) == before
    res = cli_invoke(["reconstruct", cp_result, "--against", tmp_path / "bad.npy", "--index", "1:,:,:"])
    one_line_error(res, f"--against {str(tmp_path / 'bad.npy')!r} (index 1:,:,:) contains 1 NaN or infinite "
                         "value(s); remove or impute them first")


# ------------------------------------------------------------------------------------- 5. an --index of nothing
@pytest.mark.parametrize("index, entry, text, mode, size", [
    ("0:0,:,:", 0, "0:0", 0, 6), ("5:2,:,:", 0, "5:2", 0, 6), ("100:,:,:", 0, "100:", 0, 6),
    (":,:-7,:", 1, ":-7", 1, 7),
])
def test_cli_reconstruct_index_selecting_nothing(tmp_path, x_file, cp_result, index, entry, text, mode, size):
    before = folder_state(tmp_path)
    res = cli_invoke(["reconstruct", cp_result, "--index", index, "-o", tmp_path / "r.npy", "--against", x_file[0]])
    one_line_error(res, f"--index entry {entry} ({text!r}) selects nothing from mode {mode} of size {size}; "
                         "expected a:b with a < b, both within the mode (negative: from its end)")
    assert folder_state(tmp_path) == before


# --------------------------------------------------------------------------- 6. relative_error's reference tensor
@pytest.fixture(params=[np.float64, np.float32])  # (float32: the double-precision compiled route)
def models(rng, request):
    X = rng.random((6, 7, 8)).astype(request.param)
    return X, tk.hooi(X, 2), tk.cp_als(X, 2, random_state=0)


@pytest.mark.parametrize("kind", ["tucker", "cp"])
def test_relative_error_refuses_a_bad_reference(models, kind):
    X, T, C = models
    M = T if kind == "tucker" else C
    for Y in (X[:5], COOTensor.from_dense(X[:5]), X.ravel()):
        with pytest.raises(ValueError, match=r"^X has shape \((5, 7, 8|336,)\); expected the model's shape "
                                             r"\(6, 7, 8\)$"):
            M.relative_error(Y)
    Y = X.copy()
    Y[0, 0, :3] = [np.nan, np.inf, -np.inf]
    with pytest.raises(ValueError, match=r"^X contains 3 NaN or infinite value\(s\); remove or impute them first$"):
        M.relative_error(Y)
    for Z in (np.zeros(X.shape), COOTensor.from_dense(np.zeros(X.shape))):
        with pytest.raises(ValueError, match=re.escape("X has zero norm (every entry is 0); the relative error "
                                                       "||X - X_hat|| / ||X|| of a nonzero model is undefined")):
            M.relative_error(Z)
    assert M.relative_error(X) == pytest.approx(1 - M.fit, abs=1e2 * float(np.finfo(X.dtype).eps))  # (1 eps seen)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_relative_error_of_the_zero_model_against_zeros_is_zero(dtype):
    Z = np.zeros((4, 5, 6), dtype)
    for M in (tk.hooi(Z, 2), tk.cp_als(Z, 2)):
        assert M.relative_error(Z) == 0.0 and M.relative_error(COOTensor.from_dense(Z)) == 0.0


def test_cli_reconstruct_against_zeros_with_a_nonzero_model(tmp_path, cp_result):
    np.save(tmp_path / "z.npy", np.zeros((6, 7, 8)))
    res = cli_invoke(["reconstruct", cp_result, "--against", tmp_path / "z.npy"])
    one_line_error(res, f"--against {str(tmp_path / 'z.npy')!r} has zero norm (every entry is 0); the relative "
                         "error ||X - X_hat|| / ||X|| of a nonzero model is undefined")


# ------------------------------------------------------------------------------------------ 7. the TensorLy layer
def test_tensorly_mask_of_the_wrong_shape(rng):
    from tuckerkit.compat import tensorly as tl

    X = rng.random((6, 7, 8))
    with pytest.raises(ValueError, match=r"^parafac: mask has shape \(6, 7\); expected the tensor's shape "
                                         r"\(6, 7, 8\)$"):
        tl.parafac(X, 2, mask=np.ones((6, 7), bool))
    with pytest.raises(ValueError, match=r"^tucker: mask has shape \(6, 7, 1\); expected the tensor's shape "
                                         r"\(6, 7, 8\)$"):
        tl.tucker(X, rank=2, mask=np.ones((6, 7, 1)))
    with pytest.raises(ValueError, match=r"^partial_tucker: mask has shape \(3,\); expected the tensor's shape"):
        tl.partial_tucker(X, rank=2, modes=[0], mask=np.ones(3))
    with pytest.raises(TypeError, match=r"^parafac: mask is 'abc'; expected a boolean array of the tensor's shape"):
        tl.parafac(X, 2, mask="abc")


@pytest.mark.parametrize("fn, rank, message", [
    ("tucker", 2.5, "tucker: rank must be None, an integer or a sequence of 3 integers; received 2.5"),
    ("tucker", "a", "tucker: rank must be None, an integer or a sequence of 3 integers; received 'a'"),
    ("tucker", [2, 2.5, 2], "tucker: rank[1] must be an integer; received 2.5 (float)"),
    ("non_negative_tucker", 2.5,
     "non_negative_tucker: rank must be None, an integer or a sequence of 3 integers; received 2.5"),
])
def test_tensorly_tucker_rank_that_is_not_an_integer(rng, fn, rank, message):
    from tuckerkit.compat import tensorly as tl

    with pytest.raises(TypeError, match="^" + re.escape(message) + "$"):
        getattr(tl, fn)(rng.random((6, 7, 8)), rank=rank)
    with pytest.raises(TypeError, match=r"^partial_tucker: rank must be None, an integer or a sequence of 2 "):
        tl.partial_tucker(rng.random((6, 7, 8)), rank=2.5, modes=[0, 1])
    core, _ = tl.tucker(rng.random((6, 7, 8)), rank=np.int64(2))  # numpy integers stay valid
    assert core.shape == (2, 2, 2)


# ---------------------------------------------------------------------------------- 8. the models' constructors
def test_model_constructors_validate_their_parts(models, rng):
    _, T, C = models
    with pytest.raises(TypeError, match=r"^weights is None; expected a 1-D array of R weights"):
        tk.CPTensor(None, C.factors)
    with pytest.raises(ValueError, match=r"^factors\[0\] has shape \(6, 2\); expected 3 columns \(rank R = 3, the "
                                         r"length of weights\)$"):
        tk.CPTensor(np.ones(3), C.factors)
    with pytest.raises(ValueError, match=r"^factors\[1\] has shape \(7, 3\); expected 2 columns"):
        tk.CPTensor(C.weights, (C.factors[0], rng.random((7, 3)), C.factors[2]))
    with pytest.raises(ValueError, match=r"^factors is empty; expected one \(I_n, R\) matrix per mode$"):
        tk.CPTensor(C.weights, ())
    with pytest.raises(TypeError, match=r"^factors\[0\] is \[1, 2\]; expected a 2-D array"):
        tk.CPTensor(C.weights, ([1, 2],))
    with pytest.raises(ValueError, match=r"^core has 3 modes \(shape \(2, 2, 2\)\) but factors has 2 matrices; "
                                         r"expected one factor per mode of the core$"):
        tk.TuckerTensor(T.core, T.factors[:2])
    with pytest.raises(ValueError, match=r"^factors\[0\] has shape \(6, 3\); expected 2 columns \(the core's size "
                                         r"along mode 0, core shape \(2, 2, 2\)\)$"):
        tk.TuckerTensor(T.core, (rng.random((6, 3)), *T.factors[1:]))
    with pytest.raises(TypeError, match=r"^core is None; expected an array"):
        tk.TuckerTensor(None, T.factors)
    with pytest.raises(TypeError, match=r"^factors is None; expected a tuple of 2-D arrays"):
        tk.TuckerTensor(T.core, None)


def test_model_constructors_keep_valid_edge_cases():
    assert tk.CPTensor(np.ones(0), (np.ones((3, 0)), np.ones((4, 0)))).to_dense().shape == (3, 4)
    assert tk.TuckerTensor(np.array(2.0), ()).shape == ()
    cp = tk.CPTensor(np.ones(2), [np.ones((3, 2)), np.ones((4, 2))])  # a list of factors is kept as a tuple
    assert isinstance(cp.factors, tuple) and cp.shape == (3, 4)


# ------------------------------------------------------------------------------- 9. extreme finite magnitudes
def _same_factors(A, B, tol):
    return max(float(np.abs(a - b).max()) for a, b in zip(A.factors, B.factors, strict=True)) <= tol


@pytest.mark.parametrize("scale", [1e-310, 2.0**-1060 * 1e4, 1e307])
def test_hooi_of_a_subnormal_or_huge_tensor_is_the_scaled_model(rng, scale):
    X = rng.random((6, 7, 8))
    ref, T = tk.hooi(X, 2), tk.hooi(X * scale, 2)
    assert T.ranks == (2, 2, 2) and T.fit == pytest.approx(ref.fit, abs=1e-9)
    tol = 1e-12 if scale > 1e-310 / 2 else 1e-3  # (a float64 subnormal below 1e-310 holds fewer bits)
    assert _same_factors(T, ref, tol)
    np.testing.assert_allclose(T.core / scale, ref.core, rtol=tol, atol=tol * float(np.abs(ref.core).max()))


@pytest.mark.parametrize("scale", [1e-310, 1e307])
def test_cp_als_of_a_subnormal_or_huge_tensor_is_the_scaled_model(rng, scale):
    X = rng.random((6, 7, 8))
    ref, C = tk.cp_als(X, 2), tk.cp_als(X * scale, 2)
    assert C.fit == pytest.approx(ref.fit, abs=1e-12) and _same_factors(C, ref, 1e-12)
    np.testing.assert_allclose(C.weights / scale, ref.weights, rtol=1e-12)
    sparse = tk.cp_als(COOTensor.from_dense(X * scale), 2)
    assert sparse.fit == pytest.approx(ref.fit, abs=1e-12)  # (1.4e-15 seen)


def test_float32_subnormal_tensor_keeps_its_ranks(rng):
    X = rng.random((6, 7, 8)).astype(np.float32)
    ref = tk.hooi(X, 2)
    T = tk.hooi(X * np.float32(1e-42), 2)  # float32 subnormals (about 10 significant bits)
    assert T.ranks == (2, 2, 2) and T.core.dtype == np.float32 and T.fit == pytest.approx(ref.fit, abs=1e-3)
    C = tk.cp_als(X * np.float32(1e-42), 2)
    assert C.rank == 2 and C.fit == pytest.approx(tk.cp_als(X, 2).fit, abs=1e-3)


def test_a_tensor_whose_model_overflows_its_dtype_is_refused(rng):
    X = rng.random((6, 7, 8))
    msg = (r"^X has a Frobenius norm above the largest float64 \(1\.798e\+308\), so the model's core or weights "
           r"overflow in X's units; expected X divided by a power of two")
    for call in (lambda: tk.hooi(X * 2.0**1023, 2), lambda: tk.cp_als(X * 2.0**1023, 2),
                 lambda: tk.hooi(X * 2.0**1023, 2, memory_limit=1000)):
        with pytest.raises(ValueError, match=msg):
            call()


# ------------------------------------------------------------------------------------- 10. info of a NaN tensor
def test_cli_info_of_a_tensor_with_nan_names_the_count(tmp_path, x_file):
    import json

    _, X = x_file
    Y = X.copy()
    Y[0, 0, 0], Y[1, 2, 3] = np.nan, np.nan
    np.save(tmp_path / "nan.npy", Y)
    res = cli_invoke(["info", tmp_path / "nan.npy"])
    assert res.exit_code == 0, res.output
    assert "Frobenius norm   undefined: 2 NaN or infinite value(s)\n" in res.stdout and "norm   inf" not in res.stdout
    res = cli_invoke(["info", tmp_path / "nan.npy", "--json"])
    info = json.loads(res.stdout)
    assert info["frobenius_norm"] is None and info["nan_or_inf"] == 2


# ------------------------------------------------------------------------------ 11. options named as options
@pytest.mark.parametrize("args, message", [
    (["ranks", "X", "--max-iter", "0"], "--max-iter=0 is invalid; expected an integer >= 1"),
    (["ranks", "X", "--tol", "-1"], "--tol=-1.0 is invalid; expected a finite number >= 0"),
    (["decompose", "X", "--ranks", "2,2,2", "--memory-limit", "1B", "-o", "OUT"],
     "--memory-limit=1 bytes is too small: the mode-1 Gram has shape (7, 7) (392 bytes), more than the limit; raise "
     "--memory-limit (a Gram's size does not depend on the ranks)"),
])
def test_cli_messages_name_the_option(tmp_path, x_file, monkeypatch, args, message):
    monkeypatch.setattr(tk, "rank_sweep", lambda *a, **k: pytest.fail("the sweep ran before the options were checked"))
    sub = {"X": x_file[0], "OUT": tmp_path / "out.npz"}
    res = cli_invoke([sub.get(a, a) for a in args])
    one_line_error(res, message)
    assert not (tmp_path / "out.npz").exists()


def test_cli_bad_scheduler_address_names_the_option(x_file, tmp_path):
    pytest.importorskip("dask.distributed")
    res = cli_invoke(["decompose", x_file[0], "--ranks", "2,2,2", "--scheduler", "bogus", "-o", tmp_path / "o.npz"])
    one_line_error(res, "--scheduler 'bogus' is not a scheduler address (missing port number in address 'bogus'); "
                         "expected 'local' or an address such as tcp://host:8786")
