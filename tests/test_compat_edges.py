"""The compatibility layers at the edges a review found: full-rank modes from a random start, svd callables,
TensorLy's non-negative Tucker stop, pyttb's argument checks in pyttb's names."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pyttb = pytest.importorskip("pyttb")
tld = pytest.importorskip("tensorly.decomposition")

import tuckerkit.compat.pyttb as tkp  # noqa: E402
import tuckerkit.compat.tensorly as tkt  # noqa: E402

X = np.random.default_rng(0).random((6, 7, 8))


@pytest.mark.parametrize("ranks", [[2, 3, 8], [2, 7, 4]])
def test_a_full_rank_mode_from_a_random_start_follows_the_peers(ranks):
    """HOOI left a full-rank mode out of its sweeps as an identity, though a random start's factor there is no
    rotation: the first projections differed from pyttb's and TensorLy's (fits 0.584 against 0.585)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.random.seed(1)  # noqa: NPY002 (the peers' own draw)
        _, _, ref = pyttb.tucker_als(pyttb.tensor(X), ranks, printitn=0)
        np.random.seed(1)  # noqa: NPY002
        _, _, got = tkp.tucker_als(pyttb.tensor(X), ranks, printitn=0)
        assert got["iters"] == ref["iters"] and abs(got["fit"] - ref["fit"]) < 1e-12
        np.random.seed(1)  # noqa: NPY002
        _, e_ref = tld.tucker(X, ranks, init="random", return_errors=True)
        np.random.seed(1)  # noqa: NPY002
        _, e_got = tkt.tucker(X, ranks, init="random", return_errors=True)
    assert len(e_got) == len(e_ref)
    np.testing.assert_allclose(e_got, e_ref, rtol=0, atol=1e-12)


def test_an_svd_function_of_ones_own_is_refused_not_ignored():
    for fn in (lambda: tkt.tucker(X, [2, 3, 4], svd=np.linalg.svd), lambda: tkt.parafac(X, 3, svd=np.linalg.svd)):
        with pytest.raises(NotImplementedError, match=r"svd=svd \(a function of your own\) is not supported; "
                                                      r"tuckerkit computes its own subspaces"):
            fn()


@pytest.mark.parametrize("ranks", [[2, 2, 2], [2, 3, 4], [3, 3, 3]])
@pytest.mark.parametrize("tol", [10e-5, 1e-3])
def test_non_negative_tucker_stops_where_tensorly_does(ranks, tol):
    """Its own rule stopped one iteration before TensorLy's (which tests from the third iteration on)."""
    ref = tld.non_negative_tucker(X, ranks, tol=tol, return_errors=True)[1]
    got = tkt.non_negative_tucker(X, ranks, tol=tol, return_errors=True)[1]
    assert len(got) == len(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_pyttb_arguments_are_checked_in_pyttbs_names():
    Xt = pyttb.tensor(X)
    for optdims in ([-1], [3]):  # (every mode fixed: the random start came back as the result)
        with pytest.raises(ValueError, match=rf"^cp_als: optdims=\[{optdims[0]}\] holds \[{optdims[0]}\]; expected "
                                             r"modes 0\.\.2$"):
            tkp.cp_als(Xt, 3, optdims=optdims, printitn=0)
    with pytest.raises(ValueError, match=r"^tucker_als: rank has 2 entries; expected 3 \(one per mode\)"):
        tkp.tucker_als(X, [2, 2], printitn=0)
    with pytest.raises(ValueError, match=r"^tucker_als: init='eig' is not valid; expected 'random', 'nvecs' or a "
                                         r"list of factor matrices$"):
        tkp.tucker_als(X, 2, init="eig", printitn=0)
    with pytest.raises(ValueError, match=r"^cp_als: maxiters=0 is invalid; expected an integer >= 1$"):
        tkp.cp_als(X, 2, maxiters=0, printitn=0)
    with pytest.raises(ValueError, match=r"^cp_als: stoptol=-1 is invalid; expected a number >= 0$"):
        tkp.cp_als(X, 2, stoptol=-1, printitn=0)
    T, P = tkp.hosvd(X, 0, verbosity=0), pyttb.hosvd(Xt, 0, verbosity=0)  # (tol 0: every rank kept)
    assert T.core.shape == P.core.shape == X.shape
    np.testing.assert_allclose(T.full().data, X, atol=1e-12)
