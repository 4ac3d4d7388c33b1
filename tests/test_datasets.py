"""Loaders return the packaged data unchanged in the one container; generators plant what they promise."""

import importlib.util

import numpy as np
import pytest
from tuckerkit.datasets import _loaders, make_low_rank_cp, make_low_rank_tucker

from tuckerkit import datasets as D


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_load_faces_is_the_skimage_subset(dtype):
    skdata = pytest.importorskip("skimage.data")
    faces = D.load_faces(dtype=dtype)
    ref = skdata.lfw_subset()
    assert faces.shape == (200, 25, 25) and faces.data.dtype == dtype and faces.data.flags.c_contiguous
    np.testing.assert_array_equal(faces.data, ref.astype(dtype))
    np.testing.assert_array_equal(faces.target, np.r_[np.ones(100), np.zeros(100)])
    assert 0.0 <= faces.data.min() and faces.data.max() <= 1.0
    assert "scikit-image" in faces.source and faces.description


def test_load_indian_pines_matches_tensorly():
    tl_data = pytest.importorskip("tensorly.datasets")
    pines = D.load_indian_pines()
    ref = tl_data.load_indian_pines()
    assert pines.shape == (145, 145, 200)
    np.testing.assert_array_equal(pines.data, np.asarray(ref["tensor"], dtype=np.float64))
    assert pines.target.shape == (145, 145) and set(np.unique(pines.target)) == set(range(17))
    w = pines.extra["wavelengths"]
    assert w.shape == (200,) and 400 <= w.min() < w.max() <= 2500  # AVIRIS spectrometers overlap a little


def test_load_text_corpus_counts_words():
    pytest.importorskip("gensim")
    lee = D.load_text_corpus("lee_background", min_df=2)
    vocab = list(lee.extra["vocabulary"])
    docs = lee.extra["documents"]
    assert lee.shape == (300, len(vocab)) and len(docs) == 300
    assert "the" not in vocab and all(w.isalpha() and w == w.lower() for w in vocab)
    # a recount of one word in one document by hand
    j = vocab.index("government")
    d = int(np.argmax(lee.data[:, j].toarray()))
    words = [w.lower() for w in __import__("re").findall(r"[^\W\d_]{2,}", docs[d])]
    assert lee.data[d, j] == words.count("government")
    # every kept word is in at least min_df documents
    assert int((lee.data > 0).sum(axis=0).min()) >= 2
    small = D.load_text_corpus("lee_background", max_features=50, dtype=np.float32)
    assert small.shape == (300, 50) and small.data.dtype == np.float32


def test_load_text_corpus_errors(monkeypatch):
    pytest.importorskip("gensim")
    with pytest.raises(ValueError, match=r"name='nope' is not a corpus shipped with gensim; expected one of .*"
                                         r"'lee_background'"):
        D.load_text_corpus("nope")
    with pytest.raises(ValueError, match=r"min_df=0 is not valid; expected an integer >= 1"):
        D.load_text_corpus(min_df=0)
    with pytest.raises(TypeError, match=r"load_text_corpus\(dtype=int64\) is not supported"):
        D.load_text_corpus(dtype=np.int64)
    real = importlib.util.find_spec
    monkeypatch.setattr(_loaders.importlib.util, "find_spec", lambda n, *a: None if n == "gensim" else real(n, *a))
    with pytest.raises(ImportError, match=r"load_text_corpus\(\) needs gensim .* pip install 'tuckerkit\[examples\]'"):
        D.load_text_corpus()


def test_missing_packages_name_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(_loaders.importlib.util, "find_spec",
                        lambda n, *a: None if n in ("skimage", "tensorly") else real(n, *a))
    with pytest.raises(ImportError, match=r"load_faces\(\) needs scikit-image, which is not installed; install it "
                                         r"with: pip install 'tuckerkit\[examples\]'"):
        D.load_faces()
    with pytest.raises(ImportError, match=r"load_indian_pines\(\) needs tensorly"):
        D.load_indian_pines()


@pytest.mark.parametrize("distribution", ["uniform", "power_law"])
def test_make_sparse_tensor(distribution):
    ds = D.make_sparse_tensor((40, 50, 60), 3000, distribution=distribution, random_state=3)
    X = ds.data
    assert X.shape == (40, 50, 60) and X.nnz == 3000
    assert np.unique(X.coords, axis=0).shape[0] == 3000
    assert X.values.min() > 0 and X.values.max() <= 1
    again = D.make_sparse_tensor((40, 50, 60), 3000, distribution=distribution, random_state=3).data
    np.testing.assert_array_equal(X.coords, again.coords)
    np.testing.assert_array_equal(X.values, again.values)
    slice_sizes = np.bincount(X.coords[:, 0], minlength=40)
    if distribution == "power_law":
        assert slice_sizes.max() > 5 * slice_sizes.mean()
    else:
        assert slice_sizes.max() < 2 * slice_sizes.mean()


def test_make_sparse_tensor_density_and_errors():
    X = D.make_sparse_tensor((4, 5), density=1.0, dtype=np.float32, random_state=0).data
    assert X.nnz == 20 and X.values.dtype == np.float32
    assert D.make_sparse_tensor((10, 10, 10), density=0.05, random_state=0).data.nnz == 50
    with pytest.raises(ValueError, match="give exactly one of nnz and density"):
        D.make_sparse_tensor((4, 5))
    with pytest.raises(ValueError, match=r"nnz=21 is not valid; expected an integer, 1 <= nnz <= 20"):
        D.make_sparse_tensor((4, 5), 21)
    with pytest.raises(ValueError, match=r"distribution='zipf' is not valid"):
        D.make_sparse_tensor((4, 5), 3, distribution="zipf")
    with pytest.raises(ValueError, match=r"shape=\(4, 0\) is not valid"):
        D.make_sparse_tensor((4, 0), 3)


def test_make_lda_corpus_follows_the_model():
    L, V, k = 40, 30, 4
    ds = D.make_lda_corpus(4000, k, V, document_length=L, alpha=0.3, random_state=1)
    C = ds.data.toarray()
    assert C.shape == (4000, V) and np.all(C.sum(axis=1) == L)
    Phi = ds.truth
    assert Phi.shape == (V, k) and np.allclose(Phi.sum(axis=0), 1, atol=1e-12) and Phi.min() >= 0
    theta = ds.extra["doc_topic"]
    # E[c_d] = L * Phi theta_d: the mean count vector is within a few standard errors of its expectation
    expected = L * (theta @ Phi.T)
    resid = (C - expected).mean(axis=0)
    se = np.sqrt(expected.mean(axis=0) / C.shape[0]) + 1e-12
    assert np.max(np.abs(resid) / se) < 6
    np.testing.assert_array_equal(ds.extra["alpha"], np.full(k, 0.3))
    again = D.make_lda_corpus(4000, k, V, document_length=L, alpha=0.3, random_state=1)
    np.testing.assert_array_equal(again.data.toarray(), C)


def test_make_lda_corpus_errors():
    with pytest.raises(ValueError, match=r"document_length=2 is not valid; expected an integer >= 3"):
        D.make_lda_corpus(10, 2, 5, document_length=2)
    with pytest.raises(ValueError, match=r"alpha must be a positive float or 3 positive floats"):
        D.make_lda_corpus(10, 3, 5, alpha=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"beta=0 is not valid"):
        D.make_lda_corpus(10, 3, 5, beta=0)


def test_one_container_for_everything():
    made = [D.make_low_rank_tucker((4, 5, 6), (2, 2, 2), random_state=0), D.make_low_rank_cp((4, 5, 6), 2),
            D.make_sparse_tensor((4, 5, 6), 10, random_state=0), D.make_lda_corpus(5, 2, 6, random_state=0)]
    for ds in made:
        assert isinstance(ds, D.Dataset) and ds.shape == tuple(ds.data.shape) and ds.description and ds.source


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: make_low_rank_tucker((5, 6, 7), (6, 2, 2)), ValueError,
     r"^ranks\[0\]=6 exceeds the size of mode 0 \(5\); each rank must be between 1 and its mode size$"),
    (lambda: make_low_rank_tucker((5, 6, 7), (0, 2, 2)), ValueError, r"^ranks\[0\]=0 is not positive"),
    (lambda: make_low_rank_tucker((5, 6, 7), (2, 2)), ValueError,
     r"^ranks has 2 entries but the tensor has 3 modes; expected 3$"),
    (lambda: make_low_rank_tucker((5, 6, 7), (2, 2, 2), dtype=np.int32), TypeError,
     r"^make_low_rank_tucker: dtype=int32 is not supported; expected float32 or float64$"),
    (lambda: make_low_rank_tucker((0, 6, 7), (1, 2, 2)), ValueError,
     r"^make_low_rank_tucker: shape=\(0, 6, 7\) is not valid; expected at least two positive mode sizes$"),
    (lambda: make_low_rank_tucker((5, 6, 7), (2, 2, 2), noise=float("nan")), ValueError,
     r"^noise=nan is invalid; expected a finite number >= 0$"),
    (lambda: make_low_rank_cp((5, 6, 7), 0), ValueError, r"^rank=0 is not positive; expected an integer >= 1$"),
    (lambda: make_low_rank_cp((5, 6, 7), 2.5), TypeError, r"^rank must be an integer; received 2.5 \(float\)$"),
    (lambda: make_low_rank_cp((5, 6), 2, dtype=bool), TypeError,
     r"^make_low_rank_cp: dtype=bool is not supported; expected float32 or float64$"),
    (lambda: make_low_rank_cp((5, 6), 2, dtype="U1"), TypeError, r"^make_low_rank_cp: dtype=<U1 is not supported"),
    (lambda: make_low_rank_cp((5,), 2), ValueError, r"^make_low_rank_cp: shape=\(5,\) is not valid"),
    (lambda: make_low_rank_cp("abc", 2), TypeError,
     r"^make_low_rank_cp: shape must be a sequence of mode sizes; received 'abc'$"),
    (lambda: make_low_rank_cp((5, 6), 2, noise=-0.1), ValueError, r"^noise=-0.1 is invalid; expected a finite"),
    (lambda: make_low_rank_cp((5, 6), 2, noise="0.1"), TypeError,
     r"^noise must be a non-negative number; received '0.1'$"),
])
def test_the_generators_refuse_bad_arguments_in_one_line(call, exc, match):
    with pytest.raises(exc, match=match) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_generators_plant_what_they_say(dtype):
    T = make_low_rank_tucker((10, 11, 12), (2, 3, 4), noise=0.05, dtype=dtype, random_state=0)
    C = make_low_rank_cp((10, 11, 12), 3, noise=0.0, dtype=dtype, random_state=0)
    assert T.data.dtype == dtype and C.data.dtype == dtype
    clean = np.asarray(T.truth.to_dense())
    assert abs(np.linalg.norm(T.data - clean) / np.linalg.norm(clean) - 0.05) <= 100 * np.finfo(dtype).eps
    np.testing.assert_allclose(C.data, np.asarray(C.truth.to_dense()), rtol=0,
                               atol=10 * np.finfo(dtype).eps * np.abs(C.data).max())
