"""Datasets shipped as ``tuckerkit.datasets``: generators (no network access, ever).

The loaders of real data (faces, Indian Pines, text corpora) come with the datasets issue.
"""

from tuckerkit.datasets._generators import Dataset, make_low_rank_cp, make_low_rank_tucker

__all__ = ["Dataset", "make_low_rank_cp", "make_low_rank_tucker"]
