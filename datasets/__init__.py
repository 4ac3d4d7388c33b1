"""Datasets shipped as ``tuckerkit.datasets``: loaders of data inside installed packages, and generators.

Nothing here touches the network. Every function returns a :class:`Dataset` (``data``, ``target``, ``truth``,
``description``, ``source``, ``shape``, ``extra``).
"""

from tuckerkit.datasets._generators import (
    Dataset,
    make_lda_corpus,
    make_low_rank_cp,
    make_low_rank_tucker,
    make_sparse_tensor,
)
from tuckerkit.datasets._loaders import load_faces, load_indian_pines, load_text_corpus
from tuckerkit.datasets._sparse_bench import SPARSE_BENCHMARKS, make_sparse_benchmark

__all__ = [
    "SPARSE_BENCHMARKS",
    "Dataset",
    "load_faces",
    "load_indian_pines",
    "load_text_corpus",
    "make_lda_corpus",
    "make_low_rank_cp",
    "make_low_rank_tucker",
    "make_sparse_benchmark",
    "make_sparse_tensor",
]
