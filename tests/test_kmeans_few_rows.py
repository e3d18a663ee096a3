"""The k-means start where x has fewer distinct rows than K: one clear warning of the zoo's
instead of scipy's divide-by-zero and empty-cluster warnings, and each distinct row a component
of its own; ordinary data start exactly where scipy's k-means puts them."""

import warnings

import numpy as np
from scipy.cluster.vq import kmeans2

from zoo.initialization import initial_responsibilities

FEW_ROWS = (
    "x has 3 distinct rows, fewer than K = 5 components: init='{}' gives each distinct row a "
    "component and starts 2 empty. Use a smaller K, or pass init as (N, K) responsibilities."
)


def _recorded(x, K, init, seed=0):
    """The responsibilities and every warning raised while computing them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resp = initial_responsibilities(x, K, init, seed)
    return resp, caught


def test_kmeans_with_fewer_distinct_rows_than_components_warns_once_and_clearly():
    x = np.repeat(np.random.default_rng(0).normal(size=(3, 2)), 10, axis=0)
    resp, caught = _recorded(x, 5, "kmeans")
    assert [(w.category, str(w.message)) for w in caught] == [
        (RuntimeWarning, FEW_ROWS.format("kmeans"))
    ]
    assert caught[0].filename == __file__  # points at the caller, not at scipy
    # Each distinct row a component of its own, its ten copies with it; two components empty.
    np.testing.assert_array_equal(np.sort(resp.sum(0)), [0, 0, 10, 10, 10])
    labels = resp.argmax(1).reshape(3, 10)
    assert (labels == labels[:, :1]).all() and len(set(labels[:, 0])) == 3


def test_kmeans_and_random_from_data_give_the_same_warning():
    x = np.repeat(np.random.default_rng(1).normal(size=(3, 4)), 4, axis=0)
    messages = {}
    for init in ("kmeans", "random_from_data"):
        _, caught = _recorded(x, 5, init)
        assert len(caught) == 1
        messages[init] = str(caught[0].message)
    assert messages == {init: FEW_ROWS.format(init) for init in messages}


def test_kmeans_with_fewer_rows_than_components_warns_without_scipy():
    x = np.random.default_rng(2).normal(size=(3, 2))
    resp, caught = _recorded(x, 5, "kmeans")
    assert len(caught) == 1 and "x has 3 distinct rows" in str(caught[0].message)
    np.testing.assert_array_equal(np.sort(resp.sum(0)), [0, 0, 1, 1, 1])


def _scipy_kmeans_start(x, K, seed):
    """The k-means start as scipy gives it: k-means++ seeding from the seed's generator."""
    _, labels = kmeans2(x, K, seed=np.random.default_rng(seed), minit="++")
    return np.eye(K)[labels]


def test_kmeans_start_on_ordinary_data_is_scipys_bit_for_bit():
    rng = np.random.default_rng(3)
    blobs = np.concatenate([rng.normal(c, 1.0, size=(200, 3)) for c in (-4.0, 0.0, 4.0)])
    # The first 40 rows repeat one value: the distinct rows are counted beyond them.
    repeated_first = np.concatenate([np.zeros((40, 3)), rng.normal(size=(300, 3))])
    cases = [(blobs, 3), (blobs.astype(np.float32), 4), (repeated_first, 8), (blobs[:7], 7)]
    for x, K in cases:
        for seed in (0, 1, 5):
            resp, caught = _recorded(x, K, "kmeans", seed)
            np.testing.assert_array_equal(resp, _scipy_kmeans_start(x, K, seed))
            assert caught == []
