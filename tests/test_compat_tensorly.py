"""TensorLy's own decomposition tests, run against ``tuckerkit.compat.tensorly``.

The test modules that ship inside the installed tensorly wheel are imported (never copied), the names they
call are pointed at the compat layer, and pytest collects their test functions from here. Cases that cannot
pass are listed once, in ``KNOWN``, with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest

import tuckerkit.compat.tensorly as compat

# The cases that cannot pass, in one place: (test name, parameter that selects them, its value, reason).
# tests/conftest.py marks them xfail(strict=True), so a case that starts passing is noticed.
KNOWN = [
    ("test_non_negative_tucker_hals_active_set", None, None,
     "algorithm='active_set' (TensorLy's active-set core solver) is refused in one line: the core step is FISTA"),
]



@pytest.fixture(autouse=True)
def _seeded_global_rng():
    """Some of TensorLy's cases draw from numpy's global RNG (``random_cp`` without a seed, ``init="random"``
    without ``random_state``): seeded, every run is the same run."""
    state = np.random.get_state()  # noqa: NPY002 (the legacy global RNG is what these tests use)
    np.random.seed(0)  # noqa: NPY002
    yield
    np.random.set_state(state)  # noqa: NPY002


tl_cp = pytest.importorskip("tensorly.decomposition.tests.test_cp")
tl_tucker = pytest.importorskip("tensorly.decomposition.tests.test_tucker")

for _module in (tl_cp, tl_tucker):
    for _name in compat.__all__:  # the functions and TensorLy's CP / Tucker classes
        if hasattr(_module, _name):
            setattr(_module, _name, getattr(compat, _name))

from tensorly.decomposition.tests.test_cp import test_masked_parafac, test_parafac, test_parafac_linesearch  # noqa: E402,F401,I001
from tensorly.decomposition.tests.test_cp import test_parafac_does_not_modify_init  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_partial_tucker, test_tucker  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_tucker_runs_with_factors_only_init  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_masked_tucker  # noqa: E402,F401
from tensorly.decomposition.tests.test_cp import test_non_negative_parafac  # noqa: E402,F401
from tensorly.decomposition.tests.test_cp import test_non_negative_parafac_hals_one_unconstrained  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_non_negative_tucker  # noqa: E402,F401
from tensorly.decomposition.tests.test_tucker import test_non_negative_tucker_hals_active_set  # noqa: E402,F401
