"""Loaders of real data that ships inside installed packages (never downloaded).

Every loader has the same keyword-only signature (``dtype``) and returns a :class:`Dataset`. The packages that
carry the data are optional: a missing one gives an ImportError that names the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
from tuckerkit.datasets._generators import Dataset

_EXTRA = "pip install 'tuckerkit[examples]'"


def _require(module: str, package: str, loader: str) -> Any:
    """Import ``module`` or fail with a message that names the pip extra providing it."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise ImportError(f"{loader}() needs {package}, which is not installed; install it with: {_EXTRA}")
    return importlib.import_module(module)


def _float_dtype(dtype: Any, loader: str) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"{loader}(dtype={dt}) is not supported; expected float32 or float64")
    return dt


def load_faces(*, dtype: Any = np.float64) -> Dataset:
    """The 200 LFW images that ship with scikit-image, as a ``(200, 25, 25)`` tensor with face labels.

    The first 100 images are faces (``target`` 1), the last 100 are not (``target`` 0): crops of the same
    photographs that miss the face. Pixel values are gray levels in ``[0, 1]``.

    Parameters
    ----------
    dtype : {float64, float32}, default float64

    Returns
    -------
    Dataset
        ``data`` of shape (200, 25, 25), ``target`` of shape (200,) with values in {0, 1}.

    Examples
    --------
    >>> from tuckerkit.datasets import load_faces
    >>> faces = load_faces()
    >>> faces.shape, int(faces.target.sum())
    ((200, 25, 25), 100)
    """
    dt = _float_dtype(dtype, "load_faces")
    skdata = _require("skimage.data", "scikit-image", "load_faces")
    images = np.ascontiguousarray(skdata.lfw_subset(), dtype=dt)
    target = np.r_[np.ones(100, dtype=np.int64), np.zeros(images.shape[0] - 100, dtype=np.int64)]
    return Dataset(
        images, target=target,
        description="LFW subset: 100 face and 100 non-face grayscale 25x25 crops (Labeled Faces in the Wild)",
        source="scikit-image: skimage.data.lfw_subset()",
        extra={"target_names": np.array(["non-face", "face"])},
    )


def load_indian_pines(*, dtype: Any = np.float64) -> Dataset:
    """The Indian Pines hyperspectral cube that ships with TensorLy: ``(145, 145, 200)`` with a ground truth map.

    An AVIRIS scene over the Purdue agronomy farm (1992): 145 x 145 pixels, 200 spectral bands (the
    water-absorption bands removed). ``target`` is the ``(145, 145)`` land-cover map (0 = unlabelled,
    1-16 = classes); ``extra["wavelengths"]`` holds the band centres in nanometres.

    Parameters
    ----------
    dtype : {float64, float32}, default float64

    Returns
    -------
    Dataset

    Examples
    --------
    >>> from tuckerkit.datasets import load_indian_pines
    >>> pines = load_indian_pines(dtype="float32")
    >>> pines.shape, pines.data.dtype, pines.target.shape, int(pines.target.max())
    ((145, 145, 200), dtype('float32'), (145, 145), 16)
    """
    dt = _float_dtype(dtype, "load_indian_pines")
    spec = importlib.util.find_spec("tensorly")
    if spec is None or spec.origin is None:
        raise ImportError(f"load_indian_pines() needs tensorly, which is not installed; install it with: {_EXTRA}")
    folder = Path(spec.origin).parent / "datasets" / "data"
    cube, truth = folder / "Indian_pines_corrected.npy", folder / "Indian_pines_gt.npy"
    for f in (cube, truth):
        if not f.is_file():
            raise FileNotFoundError(f"load_indian_pines(): {f} is missing from the installed tensorly; reinstall it")
    data = np.ascontiguousarray(np.load(cube), dtype=dt)
    target = np.load(truth).astype(np.int64)
    bunch = _require("tensorly.datasets", "tensorly", "load_indian_pines").load_indian_pines()
    wavelengths = np.asarray(bunch["ticks"][1], dtype=np.float64)  # ticks: [labels, band centres]
    return Dataset(
        data, target=target,
        description="Indian Pines: AVIRIS hyperspectral image, 145x145 pixels x 200 bands, 16 land-cover classes",
        source=f"tensorly.datasets ({bunch['reference']}) {bunch['LICENCE']}",
        extra={"wavelengths": wavelengths},
    )


def _gensim_corpora() -> dict[str, Path]:
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        raise ImportError(f"load_text_corpus() needs gensim (its test data holds the corpora), which is not "
                          f"installed; install it with: {_EXTRA}")
    folder = Path(spec.origin).parent / "test" / "test_data"
    return {p.name[: -len(".cor")]: p for p in sorted(folder.glob("*.cor"))}


def load_text_corpus(
    name: str = "lee_background", *, min_df: int = 2, max_features: int | None = None,
    stop_words: str | list[str] | None = "english", dtype: Any = np.float64,
) -> Dataset:
    """A small real English corpus from gensim's test data, as a document-term count matrix.

    Each line of the ``.cor`` file is a document. Words are lower-cased alphabetic tokens of two or more
    letters, English stop words removed, kept when they appear in at least ``min_df`` documents.

    Parameters
    ----------
    name : str, default "lee_background"
        ``"lee_background"`` (300 news articles of the Lee corpus), ``"head500.noblanks"`` (250 stemmed
        Wikipedia articles), or any other ``.cor`` file in gensim's test data (the error lists them).
    min_df : int, default 2
        Minimum number of documents a word must appear in.
    max_features : int, optional
        Keep only the most frequent words.
    stop_words : "english", list of str or None, default "english"
    dtype : {float64, float32}, default float64

    Returns
    -------
    Dataset
        ``data``: a ``scipy.sparse.csr_matrix`` of shape (n_documents, n_words); ``extra["vocabulary"]`` (the
        words, in column order) and ``extra["documents"]`` (the raw text).

    Examples
    --------
    >>> from tuckerkit.datasets import load_text_corpus
    >>> lee = load_text_corpus("lee_background")
    >>> lee.shape[0], lee.shape[1] == len(lee.extra["vocabulary"])
    (300, True)
    """
    dt = _float_dtype(dtype, "load_text_corpus")
    corpora = _gensim_corpora()
    if name not in corpora:
        raise ValueError(f"name={name!r} is not a corpus shipped with gensim; expected one of "
                         f"{', '.join(map(repr, corpora))}")
    if not isinstance(min_df, int | np.integer) or min_df < 1:
        raise ValueError(f"min_df={min_df!r} is not valid; expected an integer >= 1")
    from sklearn.feature_extraction.text import CountVectorizer

    documents = [line.strip() for line in corpora[name].read_text(encoding="utf-8", errors="replace").splitlines()]
    documents = [d for d in documents if d]
    vectorizer = CountVectorizer(lowercase=True, token_pattern=r"(?u)\b[^\W\d_]{2,}\b", stop_words=stop_words,
                                 min_df=int(min_df), max_features=max_features, dtype=dt)
    counts = vectorizer.fit_transform(documents).tocsr()
    return Dataset(
        counts,
        description=f"gensim test corpus {name!r}: {counts.shape[0]} documents, {counts.shape[1]} words "
                    f"(min_df={min_df}, stop words {'removed' if stop_words else 'kept'})",
        source=f"gensim: gensim/test/test_data/{corpora[name].name}",
        extra={"vocabulary": vectorizer.get_feature_names_out(), "documents": documents},
    )
