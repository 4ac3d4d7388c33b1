"""The TensorLy layer's random starts are TensorLy's: ``init="random"`` (and the random columns that pad an SVD
start past a mode's size) drawn from the same RandomState in the same order, so that ``np.random.seed(s)``, an
integer ``random_state`` or a ``RandomState`` gives the same run in both (before, a Generator seeded from the
RandomState drew other numbers: 0.35 apart after one ``parafac`` iteration)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tuckerkit.compat.tensorly as compat

tl = pytest.importorskip("tensorly")
td = pytest.importorskip("tensorly.decomposition")

X = np.random.default_rng(2).random((6, 7, 8))
TOL = 1e3 * np.finfo(np.float64).eps  # (the same iterates from the same start, up to rounding)

CP = lambda r: tl.cp_to_tensor(r)  # noqa: E731
TUCKER = lambda r: tl.tucker_to_tensor(r)  # noqa: E731
PARTIAL = lambda r: tl.tenalg.multi_mode_dot(r[0][0], r[0][1], modes=[1, 2])  # noqa: E731

CASES = {
    "parafac": (lambda m, rs, it: m.parafac(X, 3, n_iter_max=it, init="random", tol=0, random_state=rs), CP),
    "parafac_svd_padded": (lambda m, rs, it: m.parafac(X, 9, n_iter_max=it, init="svd", tol=0, random_state=rs), CP),
    "tucker": (lambda m, rs, it: m.tucker(X, [2, 3, 4], n_iter_max=it, init="random", tol=0, random_state=rs),
               TUCKER),
    "partial_tucker": (lambda m, rs, it: m.partial_tucker(X, [3, 4], modes=[1, 2], n_iter_max=it, init="random",
                                                          tol=0, random_state=rs), PARTIAL),
    "non_negative_parafac": (lambda m, rs, it: m.non_negative_parafac(X, 3, n_iter_max=it, init="random", tol=0,
                                                                      random_state=rs), CP),
    "non_negative_parafac_hals": (lambda m, rs, it: m.non_negative_parafac_hals(X, 3, n_iter_max=it, init="random",
                                                                                tol=0, random_state=rs), CP),
    "non_negative_tucker": (lambda m, rs, it: m.non_negative_tucker(X, [2, 3, 4], n_iter_max=it, init="random",
                                                                    tol=0, random_state=rs), TUCKER),
}


def _seeded(kind):
    """The random_state argument of one run (numpy's global RNG reseeded for None)."""
    if kind == "global":
        np.random.seed(5)  # noqa: NPY002 (TensorLy's None is numpy's global RandomState)
        return None
    return 7 if kind == "int" else np.random.RandomState(9)


@pytest.mark.parametrize("iters", [1, 4])
@pytest.mark.parametrize("kind", ["global", "int", "RandomState"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_random_start_is_tensorlys(case, kind, iters):
    run, full = CASES[case]
    state = np.random.get_state()  # noqa: NPY002
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (TensorLy's own warnings: rank above a mode's size)
            theirs = full(run(td, _seeded(kind), iters))
            ours = full(run(compat, _seeded(kind), iters))
    finally:
        np.random.set_state(state)  # noqa: NPY002
    assert np.abs(theirs - ours).max() <= TOL * np.abs(theirs).max()


def test_the_global_rng_moves_as_tensorlys():
    """After a run from numpy's global RNG, the next draw is the one TensorLy's run leaves."""
    state = np.random.get_state()  # noqa: NPY002
    try:
        np.random.seed(5)  # noqa: NPY002
        td.parafac(X, 3, n_iter_max=2, init="random", tol=0)
        after_theirs = np.random.random_sample()  # noqa: NPY002
        np.random.seed(5)  # noqa: NPY002
        compat.parafac(X, 3, n_iter_max=2, init="random", tol=0)
        assert np.random.random_sample() == after_theirs  # noqa: NPY002
    finally:
        np.random.set_state(state)  # noqa: NPY002


def test_a_float32_random_start_is_drawn_in_float32():
    state = np.random.get_state()  # noqa: NPY002
    try:
        cp = compat.parafac(X.astype(np.float32), 3, n_iter_max=0, init="random", random_state=4)
        want = np.random.RandomState(4).random_sample((6, 3)).astype(np.float32)
    finally:
        np.random.set_state(state)  # noqa: NPY002
    assert cp.factors[0].dtype == np.float32
    np.testing.assert_array_equal(cp.factors[0], want)


def test_a_random_state_of_another_kind_is_refused_in_one_line():
    with pytest.raises(TypeError, match=r"^random_state must be None, an int, or a numpy Generator; received str$"):
        compat.parafac(X, 3, init="random", random_state="seven")
