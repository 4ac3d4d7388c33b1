"""The sparse benchmark tensors (skew3d, skew4d, unif3d, skew5d, skew6d), regenerated inside the package.

The project's sparse benchmarks use FROSTT-style tensors whose recipe is fixed (base seed 12345, a child
seed per tensor, power-law coordinates with exponent 1.2 relabelled by a random permutation per mode, a
coverage block that puts at least one nonzero in every slice, first-occurrence de-duplication until exactly
``nnz`` distinct coordinates exist, uniform(0, 1) values, random output order). This module draws the same
random numbers in the same order, so the tensors are identical bit for bit to the reference files (checked
against their md5 sums by ``benchmarks/sparse_tensors.py``), and the project never needs files from outside itself.
skew5d (3000^5) and skew6d (1000^6), 1M nonzeros each, follow the same recipe at orders 5 and 6 (issue 17:
sparse CP-ALS at every order 3-6 against SPLATT); their md5 sums are of tuckerkit's own output.
"""

from __future__ import annotations

import numpy as np
from tuckerkit.datasets._generators import Dataset

_BASE_SEED = 12345
_ALPHA = 1.2

#: name -> (dims, nnz, power-law?, seed); md5 of the .tns text written with ``%d ... %.10f``
SPARSE_BENCHMARKS = {
    "skew3d": ((20000, 20000, 20000), 2_000_000, True, _BASE_SEED + 1, "8d19ce308edcad9751395810553565bb"),
    "skew4d": ((5000, 5000, 5000, 5000), 1_000_000, True, _BASE_SEED + 2, "e46f050b6f9408b185b9fee8fa6672ae"),
    "unif3d": ((10000, 10000, 10000), 1_000_000, False, _BASE_SEED + 3, "1af207d371049572bd6abd18b17ecd1b"),
    "skew5d": ((3000,) * 5, 1_000_000, True, _BASE_SEED + 4, "9384067f4feecbd4b5c1e514d8891d4b"),
    "skew6d": ((1000,) * 6, 1_000_000, True, _BASE_SEED + 5, "552bc9d52bb72ae0cf2335c6bc11a733"),
}


def _mode_sampler(rng: np.random.Generator, dim: int, skewed: bool):
    if not skewed:
        return lambda count: rng.integers(0, dim, size=count)
    weights = np.arange(1, dim + 1, dtype=np.float64) ** (-_ALPHA)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    relabel = rng.permutation(dim)  # drawn when the sampler is made, mode by mode

    def draw(count: int) -> np.ndarray:
        ranks = np.minimum(np.searchsorted(cdf, rng.random(count), side="right"), dim - 1)
        return relabel[ranks]

    return draw


def _first_occurrences(coords: np.ndarray, strides: np.ndarray) -> np.ndarray:
    _, first = np.unique(coords @ strides, return_index=True)
    return coords[np.sort(first)]


def sparse_benchmark_coords(dims, nnz: int, skewed: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """0-based coordinates (nnz, N) and values of one benchmark tensor, in the reference's output order."""
    rng = np.random.default_rng(seed)
    n_modes = len(dims)
    draws = [_mode_sampler(rng, d, skewed) for d in dims]
    n_cover = max(dims)
    coords = np.empty((n_cover, n_modes), dtype=np.int64)
    for m, d in enumerate(dims):
        column = draws[m](n_cover)
        column[:d] = rng.permutation(d)  # every slice of every mode gets a nonzero
        coords[:, m] = column
    strides = np.ones(n_modes, dtype=np.int64)
    for m in range(n_modes - 2, -1, -1):
        strides[m] = strides[m + 1] * dims[m + 1]
    coords = _first_occurrences(coords, strides)
    while coords.shape[0] < nnz:
        missing = nnz - coords.shape[0]
        batch = int(missing * 1.3) + 1000
        extra = np.stack([draws[m](batch) for m in range(n_modes)], axis=1)
        coords = _first_occurrences(np.concatenate([coords, extra]), strides)
    coords = coords[:nnz]
    values = rng.random(nnz)
    shuffle = rng.permutation(nnz)
    return coords[shuffle], values[shuffle]


def make_sparse_benchmark(name: str) -> Dataset:
    """One of the project's sparse benchmark tensors as a COOTensor (``data``), generated, never downloaded.

    Parameters
    ----------
    name : {"skew3d", "skew4d", "unif3d", "skew5d", "skew6d"}
        ``skew3d``: 20000^3, 2M nonzeros; ``skew4d``: 5000^4, 1M; ``unif3d``: 10000^3, 1M uniform;
        ``skew5d``: 3000^5, 1M; ``skew6d``: 1000^6, 1M. The skewed ones draw each coordinate from a power
        law (Zipf exponent 1.2, relabelled by a random permutation per mode, every slice non-empty); values
        are uniform on [0, 1). The recipe for any shape and count is
        ``tuckerkit.datasets._sparse_bench.sparse_benchmark_coords(dims, nnz, skewed, seed)``.

    Returns
    -------
    Dataset
        ``data`` is a :class:`tuckerkit.sparse.COOTensor`; ``extra`` holds the raw coordinates and values in
        file order and the md5 of the reference ``.tns`` file.

    Examples
    --------
    >>> from tuckerkit.datasets import make_sparse_benchmark
    >>> X = make_sparse_benchmark("unif3d").data
    >>> X.shape, X.nnz
    ((10000, 10000, 10000), 1000000)
    """
    from tuckerkit.sparse import COOTensor

    if name not in SPARSE_BENCHMARKS:
        raise ValueError(f"name={name!r} is not valid; expected one of {', '.join(map(repr, SPARSE_BENCHMARKS))}")
    dims, nnz, skewed, seed, md5 = SPARSE_BENCHMARKS[name]
    coords, values = sparse_benchmark_coords(dims, nnz, skewed, seed)
    return Dataset(COOTensor(coords, values, dims), description=f"{name}: {'x'.join(map(str, dims))}, {nnz:,} "
                   f"nonzeros, {'power-law' if skewed else 'uniform'} coordinates",
                   source="tuckerkit.datasets.make_sparse_benchmark (seeded generator)",
                   extra={"coords": coords, "values": values, "md5": md5})
