"""The transpose-free contraction engine: plans on strided views, GEMM and strided-batched GEMM."""

from tuckerkit.engine._contract import contract, plan_contraction
from tuckerkit.engine._dask import DaskTensor
from tuckerkit.engine._ops import (
    GramPlan,
    MTTKRPPlan,
    MultiTTMPlan,
    gram,
    gram_plan,
    khatri_rao,
    mttkrp,
    mttkrp_plan,
    mttkrp_sweep,
    multi_ttm,
    multi_ttm_plan,
    ttm,
    ttm_plan,
    ttmc,
    ttmc_sweep,
)
from tuckerkit.engine._plan import ContractionPlan, KernelKind, Remedy
from tuckerkit.engine._slabs import SlabTensor

__all__ = [
    "ContractionPlan",
    "DaskTensor",
    "GramPlan",
    "KernelKind",
    "MTTKRPPlan",
    "MultiTTMPlan",
    "Remedy",
    "SlabTensor",
    "contract",
    "gram",
    "gram_plan",
    "khatri_rao",
    "mttkrp",
    "mttkrp_plan",
    "mttkrp_sweep",
    "multi_ttm",
    "multi_ttm_plan",
    "plan_contraction",
    "ttm",
    "ttm_plan",
    "ttmc",
    "ttmc_sweep",
]
