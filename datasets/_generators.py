"""Synthetic tensors with planted structure and a known noise level."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuckerkit._validation import _as_int, check_cp_rank, check_nonneg, check_random_state, check_ranks, describe


@dataclass(frozen=True, eq=False)
class Dataset:
    """The one container every loader and generator returns.

    Attributes
    ----------
    data : array, COOTensor or scipy.sparse matrix
        The tensor (or the document-term matrix of a corpus).
    target : array or None
        Labels, where the data has them.
    truth : object
        The planted model of generated data (a TuckerTensor, CPTensor or topic-word matrix), else None.
    description : str
        One line saying what the data is.
    source : str
        Where it comes from (package and function, or generator).
    extra : dict
        Anything else (vocabulary, wavelengths, label names, ...).
    shape : tuple of int
        ``data.shape`` (property).

    Examples
    --------
    >>> import numpy as np
    >>> from tuckerkit.datasets import Dataset
    >>> ds = Dataset(np.zeros((2, 3)), description="zeros", source="example")
    >>> ds.shape, ds.target is None, ds.extra
    ((2, 3), True, {})
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


def _check_shape(shape: Any, who: str) -> tuple[int, ...]:
    """A tensor shape: a sequence of at least two positive integers."""
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | np.ndarray):
        raise TypeError(f"{who}: shape must be a sequence of mode sizes; received {describe(shape)}")
    dims = tuple(_as_int(s, f"shape[{i}]") for i, s in enumerate(shape))
    if len(dims) < 2 or min(dims) < 1:
        raise ValueError(f"{who}: shape={dims} is not valid; expected at least two positive mode sizes")
    return dims


def _check_dtype(dtype: Any, who: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{who}: dtype={describe(dtype)} is not a dtype; expected float32 or float64") from None
    if dt not in (np.float32, np.float64):
        raise TypeError(f"{who}: dtype={dt} is not supported; expected float32 or float64")
    return dt


def _noisy(X: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    if noise == 0:
        return X
    from tuckerkit.engine._operand import frobenius_norm

    E = rng.standard_normal(X.shape)
    # (tuckerkit's norm: one fixed order of the sums; numpy's runs BLAS's dot, whose sums follow its threads,
    # so the data's bits moved with OPENBLAS_NUM_THREADS)
    return X + noise * frobenius_norm(X) / frobenius_norm(E) * E


def make_low_rank_tucker(
    shape: Sequence[int], ranks: Sequence[int], *, noise: float = 0.01, dtype: Any = np.float64,
    random_state: Any = None,
) -> Dataset:
    """A Tucker tensor ``G x_n U_n`` (orthonormal factors, Gaussian core) plus Gaussian noise.

    ``noise`` is the ratio ``||E|| / ||X||``, so the best rank-``ranks`` fit is about ``1 - noise``.

    Parameters
    ----------
    shape : sequence of int
    ranks : sequence of int
        One per mode.
    noise : float, default 0.01
    dtype : {float64, float32}, default float64
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    Dataset
        ``data`` (the noisy tensor) and ``truth`` (the planted :class:`~tuckerkit.TuckerTensor`).

    Examples
    --------
    >>> from tuckerkit.datasets import make_low_rank_tucker
    >>> make_low_rank_tucker((10, 11, 12), (2, 3, 4), random_state=0).shape
    (10, 11, 12)
    """
    from tuckerkit.decomposition import TuckerTensor
    from tuckerkit.engine import multi_ttm

    who = "make_low_rank_tucker"
    shape = _check_shape(shape, who)
    ranks = check_ranks(ranks, shape)
    noise = check_nonneg(noise, "noise")
    dtype = _check_dtype(dtype, who)
    rng = check_random_state(random_state)
    core = rng.standard_normal(tuple(ranks))
    Us = tuple(np.linalg.qr(rng.standard_normal((n, r)))[0] for n, r in zip(shape, ranks, strict=True))
    X = _noisy(np.asarray(multi_ttm(core, list(Us))), noise, rng).astype(dtype)
    return Dataset(X, truth=TuckerTensor(core, Us), description=f"low-rank Tucker {tuple(ranks)} + {noise:g} noise",
                   source="tuckerkit.datasets.make_low_rank_tucker")


def make_low_rank_cp(
    shape: Sequence[int], rank: int, *, noise: float = 0.01, dtype: Any = np.float64, random_state: Any = None
) -> Dataset:
    """A rank-``rank`` CP tensor with Gaussian factors plus Gaussian noise (``||E|| / ||X|| = noise``).

    Parameters
    ----------
    shape : sequence of int
    rank : int
    noise : float, default 0.01
    dtype : {float64, float32}, default float64
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    Dataset
        ``data`` (the noisy tensor) and ``truth`` (the planted :class:`~tuckerkit.CPTensor`, unit weights).

    Examples
    --------
    >>> from tuckerkit.datasets import make_low_rank_cp
    >>> make_low_rank_cp((8, 9, 10), 3, random_state=0).truth.rank
    3
    """
    from tuckerkit.decomposition import CPTensor

    who = "make_low_rank_cp"
    shape = _check_shape(shape, who)
    rank = check_cp_rank(rank)
    noise = check_nonneg(noise, "noise")
    dtype = _check_dtype(dtype, who)
    rng = check_random_state(random_state)
    Us = tuple(rng.standard_normal((n, rank)) for n in shape)
    truth = CPTensor(np.ones(rank), Us)
    X = _noisy(np.asarray(truth.to_dense()), noise, rng).astype(dtype)
    return Dataset(X, truth=truth, description=f"rank-{rank} CP + {noise:g} noise",
                   source="tuckerkit.datasets.make_low_rank_cp")


def make_sparse_tensor(
    shape: Sequence[int], nnz: int | None = None, *, density: float | None = None, distribution: str = "uniform",
    alpha: float = 1.2, dtype: Any = np.float64, random_state: Any = None,
) -> Dataset:
    """A random sparse tensor with exactly ``nnz`` distinct nonzeros, uniform(0, 1] values.

    Parameters
    ----------
    shape : sequence of int
        Mode sizes (order 1 or more).
    nnz : int, optional
        Number of nonzeros; or give ``density`` (the fraction of entries) instead.
    density : float in (0, 1], optional
    distribution : {"uniform", "power_law"}, default "uniform"
        ``"power_law"`` draws each coordinate with probability proportional to ``rank ** -alpha`` (then
        relabels the indices of each mode at random), so slice sizes are skewed like those of ratings,
        knowledge-graph or text tensors.
    alpha : float, default 1.2
        Exponent of the power law.
    dtype : {float64, float32}, default float64
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    Dataset
        ``data`` is a :class:`tuckerkit.sparse.COOTensor`.

    Examples
    --------
    >>> from tuckerkit.datasets import make_sparse_tensor
    >>> X = make_sparse_tensor((30, 40, 50), 500, distribution="power_law", random_state=0).data
    >>> X.shape, X.nnz
    ((30, 40, 50), 500)
    """
    import math

    from tuckerkit.sparse import COOTensor
    from tuckerkit.sparse._coo import linear_key

    who = "make_sparse_tensor"
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | np.ndarray):
        raise TypeError(f"{who}: shape must be a sequence of mode sizes; received {describe(shape)}")
    shape = tuple(_as_int(s, f"shape[{i}]") for i, s in enumerate(shape))
    if not shape or min(shape) < 1:
        raise ValueError(f"shape={shape} is not valid; expected positive mode sizes")
    size = math.prod(shape)
    if (nnz is None) == (density is None):
        raise ValueError("give exactly one of nnz and density")
    if density is not None:
        if isinstance(density, bool) or not isinstance(density, numbers.Real) or not 0 < density <= 1:
            raise ValueError(f"density={describe(density)} is not valid; expected a fraction in (0, 1]")
        nnz = max(1, round(density * size))
    if isinstance(nnz, bool) or not isinstance(nnz, numbers.Integral) or not 1 <= nnz <= size:
        raise ValueError(f"nnz={describe(nnz)} is not valid; expected an integer, 1 <= nnz <= {size} (the number of "
                         "entries)")
    nnz = int(nnz)
    if distribution not in ("uniform", "power_law"):
        raise ValueError(f"distribution={distribution!r} is not valid; expected 'uniform' or 'power_law'")
    if distribution == "power_law" and (isinstance(alpha, bool) or not isinstance(alpha, numbers.Real)
                                        or not 0 < alpha < math.inf):
        raise ValueError(f"alpha={describe(alpha)} is not valid; expected a positive finite exponent")
    dtype = _check_dtype(dtype, who)
    rng = check_random_state(random_state)

    # per mode: None (uniform) or (cdf of rank ** -alpha, random relabelling of the ranks)
    laws: list[tuple[np.ndarray, np.ndarray] | None] = []
    for n in shape:
        if distribution == "uniform":
            laws.append(None)
        else:
            cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -alpha)
            laws.append((cdf / cdf[-1], rng.permutation(n)))

    def column(n: int, law: tuple[np.ndarray, np.ndarray] | None, k: int) -> np.ndarray:
        if law is None:
            return rng.integers(0, n, size=k)
        cdf, relabel = law
        return relabel[np.minimum(np.searchsorted(cdf, rng.random(k), side="right"), n - 1)]

    def draw(k: int) -> np.ndarray:
        return np.stack([column(n, law, k) for n, law in zip(shape, laws, strict=True)], axis=1).astype(np.int64)

    if nnz > size // 2 or size < 64:  # dense-ish: pick distinct linear indices directly
        keys = rng.choice(size, size=nnz, replace=False)
        coords = np.stack(np.unravel_index(keys, shape), axis=1).astype(np.int64)
    else:
        coords = np.empty((0, len(shape)), dtype=np.int64)
        drawn = 0
        while coords.shape[0] < nnz:
            k = int((nnz - coords.shape[0]) * 1.3) + 16
            drawn += k
            more = np.concatenate([coords, draw(k)])
            key = linear_key(more, shape)
            _, first = np.unique(more if key is None else key, axis=0, return_index=True)
            coords = more[np.sort(first)]
            # (the draws so far, not the last batch: a steep law repeats a few coordinates, and the distinct ones
            # plus one batch never passed 50 nnz, so the loop ran forever)
            if distribution == "power_law" and coords.shape[0] < nnz and drawn > 50 * nnz:
                raise ValueError(f"nnz={nnz} distinct coordinates are too many for a power law with alpha={alpha} "
                                 f"on shape {shape}; lower nnz or alpha")
        coords = coords[:nnz]
    values = (1.0 - rng.random(nnz)).astype(dtype)  # in (0, 1]: no explicit zeros
    return Dataset(COOTensor(coords, values, shape),
                   description=f"random sparse tensor {'x'.join(map(str, shape))}, {nnz:,} nonzeros, "
                               f"{distribution.replace('_', '-')} coordinates",
                   source="tuckerkit.datasets.make_sparse_tensor")


def make_lda_corpus(
    n_documents: int = 2000, n_topics: int = 5, vocabulary_size: int = 200, *, document_length: int = 60,
    alpha: float | Sequence[float] = 0.5, beta: float = 0.1, dtype: Any = np.float64, random_state: Any = None,
) -> Dataset:
    """Documents drawn from a latent Dirichlet allocation model with planted topics.

    Each topic is a word distribution drawn from ``Dirichlet(beta)``; each document draws its topic
    proportions from ``Dirichlet(alpha)`` and then ``document_length`` words from the mixture.

    Parameters
    ----------
    n_documents, n_topics, vocabulary_size : int
    document_length : int, default 60
        Words per document (at least 3, as the third-order moment needs three distinct words).
    alpha : float or sequence of n_topics floats, default 0.5
        Dirichlet concentration of the topic proportions (a float applies to every topic).
    beta : float, default 0.1
        Dirichlet concentration of the topic-word distributions (small: peaked topics).
    dtype : {float64, float32}, default float64
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    Dataset
        ``data``: ``scipy.sparse.csr_matrix`` of word counts (n_documents, vocabulary_size); ``truth``: the
        topic-word matrix (vocabulary_size, n_topics), columns summing to 1; ``extra``: ``alpha`` (array),
        ``doc_topic`` (n_documents, n_topics) and ``vocabulary`` (word names ``w0``, ``w1``, ...).

    Examples
    --------
    >>> from tuckerkit.datasets import make_lda_corpus
    >>> corpus = make_lda_corpus(100, 3, 50, random_state=0)
    >>> corpus.shape, corpus.truth.shape, int(corpus.data.sum(axis=1).min())
    ((100, 50), (50, 3), 60)
    """
    import scipy.sparse as sp

    for label, v, lo in (("n_documents", n_documents, 1), ("n_topics", n_topics, 1),
                         ("vocabulary_size", vocabulary_size, 2), ("document_length", document_length, 3)):
        if not isinstance(v, int | np.integer) or v < lo:
            raise ValueError(f"{label}={v!r} is not valid; expected an integer >= {lo}")
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (n_topics,)).copy() if np.ndim(alpha) == 0 \
        else np.asarray(alpha, dtype=np.float64)
    if a.shape != (n_topics,) or np.any(a <= 0):
        raise ValueError(f"alpha must be a positive float or {n_topics} positive floats; received {alpha!r}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"alpha must be a positive float or {n_topics} positive floats; received {alpha!r}")
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not 0 < beta < math.inf:
        raise ValueError(f"beta={describe(beta)} is not valid; expected a positive finite concentration")
    dtype = _check_dtype(dtype, "make_lda_corpus")
    rng = check_random_state(random_state)
    topics = rng.dirichlet(np.full(vocabulary_size, beta), size=n_topics).T  # (V, k)
    theta = rng.dirichlet(a, size=n_documents)  # (D, k)
    p = theta @ topics.T
    p /= p.sum(axis=1, keepdims=True)
    counts = rng.multinomial(document_length, p)
    return Dataset(sp.csr_matrix(counts.astype(dtype)), truth=topics,
                   description=f"LDA corpus: {n_documents} documents of {document_length} words, {n_topics} topics "
                               f"over {vocabulary_size} words (alpha={alpha}, beta={beta})",
                   source="tuckerkit.datasets.make_lda_corpus",
                   extra={"alpha": a, "doc_topic": theta,
                          "vocabulary": np.array([f"w{i}" for i in range(vocabulary_size)])})
