"""Tucker (HOSVD, ST-HOSVD, HOOI) and CP (CP-ALS) decompositions built on the contraction engine."""

from tuckerkit.decomposition._apr import PoissonCPTensor, cp_apr
from tuckerkit.decomposition._cp import cp_als
from tuckerkit.decomposition._monitor import IterationState
from tuckerkit.decomposition._nonneg import non_negative_cp, non_negative_tucker
from tuckerkit.decomposition._rank import (
    FactorMatch,
    RankRow,
    RankSweep,
    corcondia,
    factor_match_score,
    rank_sweep,
)
from tuckerkit.decomposition._results import ConvergenceWarning, CPTensor, TuckerTensor
from tuckerkit.decomposition._tucker import hooi, hosvd, st_hosvd

__all__ = [
    "CPTensor",
    "ConvergenceWarning",
    "FactorMatch",
    "IterationState",
    "PoissonCPTensor",
    "RankRow",
    "RankSweep",
    "TuckerTensor",
    "corcondia",
    "cp_als",
    "cp_apr",
    "factor_match_score",
    "hooi",
    "hosvd",
    "non_negative_cp",
    "non_negative_tucker",
    "rank_sweep",
    "st_hosvd",
]
