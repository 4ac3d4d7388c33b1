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
    "CPTensor",
    "ContractionPlan",
    "ConvergenceWarning",
    "IterationState",
    "KernelKind",
    "Remedy",
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
