"""tuckerkit: Tucker and CP decompositions on a transpose-free tensor contraction engine."""

from tuckerkit import _numba_cache  # noqa: F401 (first: numba's cache folder, before any kernel is defined)
from tuckerkit._version import __version__
from tuckerkit.decomposition import (
    ConvergenceWarning,
    CPTensor,
    FactorMatch,
    IterationState,
    PoissonCPTensor,
    RankRow,
    RankSweep,
    TuckerTensor,
    corcondia,
    cp_als,
    cp_apr,
    factor_match_score,
    hooi,
    hosvd,
    non_negative_cp,
    non_negative_tucker,
    rank_sweep,
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
    "FactorMatch",
    "IterationState",
    "KernelKind",
    "PoissonCPTensor",
    "RankRow",
    "RankSweep",
    "Remedy",
    "TuckerDecomposer",
    "TuckerTensor",
    "__version__",
    "contract",
    "corcondia",
    "cp_als",
    "cp_apr",
    "factor_match_score",
    "gram",
    "hooi",
    "hosvd",
    "khatri_rao",
    "mttkrp",
    "multi_ttm",
    "non_negative_cp",
    "non_negative_tucker",
    "plan_contraction",
    "rank_sweep",
    "st_hosvd",
    "ttm",
]


# subpackages imported on first use (`tk.io.load_tensor`, `tk.datasets.load_faces`), so that `import tuckerkit`
# stays light: the estimators import scikit-learn, the datasets and io pull in scipy.io and the file readers
_SUBMODULES = ("backend", "datasets", "decomposition", "engine", "estimators", "io", "sparse")


def __getattr__(name: str):
    import importlib

    if name in ("TuckerDecomposer", "CPDecomposer"):
        return getattr(importlib.import_module("tuckerkit.estimators"), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"tuckerkit.{name}")
    raise AttributeError(f"module 'tuckerkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
