"""tuckerkit: Tucker and CP decompositions on a transpose-free tensor contraction engine."""

from tuckerkit._version import __version__
from tuckerkit.decomposition import (
    ConvergenceWarning,
    CPTensor,
    IterationState,
    TuckerTensor,
    cp_als,
    hooi,
    hosvd,
    st_hosvd,
)
from tuckerkit.engine import (
    ContractionPlan,
    KernelKind,
    Remedy,
    contract,
    gram,
    khatri_rao,
    mttkrp,
    multi_ttm,
    plan_contraction,
    ttm,
)

__all__ = [
    "CPDecomposer",
    "CPTensor",
    "ContractionPlan",
    "ConvergenceWarning",
    "IterationState",
    "KernelKind",
    "Remedy",
    "TuckerDecomposer",
    "TuckerTensor",
    "__version__",
    "contract",
    "cp_als",
    "gram",
    "hooi",
    "hosvd",
    "khatri_rao",
    "mttkrp",
    "multi_ttm",
    "plan_contraction",
    "st_hosvd",
    "ttm",
]


def __getattr__(name: str):
    # the estimators import scikit-learn: loaded on first use, so `import tuckerkit` stays light
    if name in ("TuckerDecomposer", "CPDecomposer"):
        from tuckerkit import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module 'tuckerkit' has no attribute {name!r}")
