"""The transpose-free contraction engine: plans on strided views, GEMM and strided-batched GEMM; the operand
protocol every tensor kind implements; the execution policy."""

from tuckerkit.engine._buffers import release_memory, set_pool_limit
from tuckerkit.engine._contract import contract, plan_contraction
from tuckerkit.engine._dask import DaskTensor
from tuckerkit.engine._direct import DirectSweep
from tuckerkit.engine._gram import GramPlan, gram, gram_plan
from tuckerkit.engine._mttkrp import MTTKRPPlan, khatri_rao, mttkrp, mttkrp_plan
from tuckerkit.engine._operand import DenseTensor, Operand, as_operand
from tuckerkit.engine._plan import CompiledKernel, ContractionPlan, KernelKind, Remedy
from tuckerkit.engine._policy import ExecutionPolicy, blas_pinned, default_policy
from tuckerkit.engine._slabs import SlabTensor, parse_memory
from tuckerkit.engine._sweeps import Sweep, mttkrp_sweep, ttmc_sweep
from tuckerkit.engine._ttm import MultiTTMPlan, multi_ttm, multi_ttm_plan, ttm, ttm_plan, ttmc

__all__ = [
    "CompiledKernel",
    "ContractionPlan",
    "DaskTensor",
    "DenseTensor",
    "DirectSweep",
    "ExecutionPolicy",
    "GramPlan",
    "KernelKind",
    "MTTKRPPlan",
    "MultiTTMPlan",
    "Operand",
    "Remedy",
    "SlabTensor",
    "Sweep",
    "as_operand",
    "blas_pinned",
    "contract",
    "default_policy",
    "gram",
    "gram_plan",
    "khatri_rao",
    "mttkrp",
    "mttkrp_plan",
    "mttkrp_sweep",
    "multi_ttm",
    "multi_ttm_plan",
    "parse_memory",
    "plan_contraction",
    "release_memory",
    "set_pool_limit",
    "ttm",
    "ttm_plan",
    "ttmc",
    "ttmc_sweep",
]
