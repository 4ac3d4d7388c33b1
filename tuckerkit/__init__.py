"""tuckerkit: Tucker and CP decompositions on a transpose-free tensor contraction engine."""

from tuckerkit._version import __version__
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
    "ContractionPlan",
    "KernelKind",
    "Remedy",
    "__version__",
    "contract",
    "gram",
    "khatri_rao",
    "mttkrp",
    "multi_ttm",
    "plan_contraction",
    "ttm",
]
