"""Datasets shipped as ``tuckerkit.datasets``: generators (no network access, ever).

The loaders of real data (faces, Indian Pines, text corpora) come with the datasets issue.
"""

from tuckerkit.datasets._generators import Dataset, make_low_rank_cp, make_low_rank_tucker
from tuckerkit.datasets._sparse_bench import SPARSE_BENCHMARKS, make_sparse_benchmark

__all__ = ["SPARSE_BENCHMARKS", "Dataset", "make_low_rank_cp", "make_low_rank_tucker", "make_sparse_benchmark"]
