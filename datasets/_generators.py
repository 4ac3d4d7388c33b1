"""Synthetic tensors with planted structure and a known noise level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuckerkit._validation import check_random_state


@dataclass(frozen=True, eq=False)
class Dataset:
    """The one container every loader and generator returns.

    Attributes
    ----------
    data : array
        The tensor.
    target : array or None
        Labels, where the data has them.
    truth : object
        The planted model for generated data (a TuckerTensor or CPTensor), else None.
    description : str
    source : str
    """

    data: Any
    target: Any = None
    truth: Any = None
    description: str = ""
    source: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


def _noisy(X: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    if noise < 0:
        raise ValueError(f"noise={noise} is negative; expected a relative noise level >= 0")
    if noise == 0:
        return X
    E = rng.standard_normal(X.shape)
    return X + noise * np.linalg.norm(X) / np.linalg.norm(E) * E


def make_low_rank_tucker(
    shape: Sequence[int], ranks: Sequence[int], *, noise: float = 0.01, dtype: Any = np.float64,
    random_state: Any = None,
) -> Dataset:
    """A Tucker tensor ``G x_n U_n`` (orthonormal factors, Gaussian core) plus Gaussian noise.

    ``noise`` is the ratio ``||E|| / ||X||``, so the best rank-``ranks`` fit is about ``1 - noise``.

    Examples
    --------
    >>> from tuckerkit.datasets import make_low_rank_tucker
    >>> make_low_rank_tucker((10, 11, 12), (2, 3, 4), random_state=0).shape
    (10, 11, 12)
    """
    from tuckerkit.decomposition import TuckerTensor
    from tuckerkit.engine import multi_ttm

    rng = check_random_state(random_state)
    if len(shape) != len(ranks):
        raise ValueError(f"ranks has {len(ranks)} entries but shape has {len(shape)}; expected one rank per mode")
    core = rng.standard_normal(tuple(ranks))
    Us = tuple(np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True))
    X = _noisy(np.asarray(multi_ttm(core, list(Us))), noise, rng).astype(dtype)
    return Dataset(X, truth=TuckerTensor(core, Us), description=f"low-rank Tucker {tuple(ranks)} + {noise:g} noise",
                   source="tuckerkit.datasets.make_low_rank_tucker")


def make_low_rank_cp(
    shape: Sequence[int], rank: int, *, noise: float = 0.01, dtype: Any = np.float64, random_state: Any = None
) -> Dataset:
    """A rank-``rank`` CP tensor with Gaussian factors plus Gaussian noise (``||E|| / ||X|| = noise``).

    Examples
    --------
    >>> from tuckerkit.datasets import make_low_rank_cp
    >>> make_low_rank_cp((8, 9, 10), 3, random_state=0).truth.rank
    3
    """
    from tuckerkit.decomposition import CPTensor

    rng = check_random_state(random_state)
    Us = tuple(rng.standard_normal((n, rank)) for n in shape)
    truth = CPTensor(np.ones(rank), Us)
    X = _noisy(np.asarray(truth.to_dense()), noise, rng).astype(dtype)
    return Dataset(X, truth=truth, description=f"rank-{rank} CP + {noise:g} noise",
                   source="tuckerkit.datasets.make_low_rank_cp")
