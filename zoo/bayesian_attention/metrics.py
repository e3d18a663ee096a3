"""Classification metrics for the calibration and out-of-distribution study (numpy only).

All functions take predicted class probabilities ``probs`` (N, C) (rows summing to one) and
integer ``labels`` (N,), or scores and binary labels for :func:`auroc`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "accuracy",
    "auroc",
    "expected_calibration_error",
    "negative_log_likelihood",
    "predictive_entropy",
    "reliability",
]


def _check_probs(probs, labels=None):
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[1] < 2:
        raise ValueError(f"expected probs of shape (N, C) with C >= 2; got {probs.shape}.")
    if not np.all(np.isfinite(probs)) or probs.min(initial=0) < 0:
        raise ValueError("expected finite, non-negative probabilities.")
    if labels is None:
        return probs, None
    labels = np.asarray(labels)
    if labels.shape != (len(probs),) or labels.dtype.kind not in "iu":
        raise ValueError(
            f"expected integer labels of shape ({len(probs)},); got shape {labels.shape}, "
            f"dtype {labels.dtype}."
        )
    if labels.size and (labels.min() < 0 or labels.max() >= probs.shape[1]):
        raise ValueError(
            f"expected labels in 0..{probs.shape[1] - 1}; got {labels.min()}..{labels.max()}."
        )
    return probs, labels


def accuracy(probs, labels) -> float:
    """Fraction of rows whose most probable class is the label."""
    probs, labels = _check_probs(probs, labels)
    return float(np.mean(probs.argmax(1) == labels))


def negative_log_likelihood(probs, labels, eps: float = 1e-12) -> float:
    """Mean ``-log p(label)`` in nats (probabilities floored at ``eps``)."""
    probs, labels = _check_probs(probs, labels)
    return float(-np.mean(np.log(np.maximum(probs[np.arange(len(labels)), labels], eps))))


def predictive_entropy(probs) -> np.ndarray:
    """Entropy of each row, ``-sum_c p_c log p_c`` in nats (``0 log 0 = 0``); shape (N,)."""
    probs, _ = _check_probs(probs)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(probs > 0, probs * np.log(probs), 0.0)
    return -terms.sum(1)


def reliability(probs, labels, num_bins: int = 15):
    """Confidence (max probability) binned into ``num_bins`` equal bins of (0, 1].

    Returns
    -------
    confidence, accuracy : ndarray (num_bins,)
        Mean confidence and accuracy of the rows in each bin (NaN for an empty bin).
    count : ndarray (num_bins,)
        Rows per bin. Bin ``b`` holds confidences in ``(b / num_bins, (b + 1) / num_bins]``.
    """
    probs, labels = _check_probs(probs, labels)
    if isinstance(num_bins, bool) or not isinstance(num_bins, int | np.integer) or num_bins < 1:
        raise ValueError(f"expected num_bins to be an int >= 1; got {num_bins!r}.")
    confidence = probs.max(1)
    correct = (probs.argmax(1) == labels).astype(np.float64)
    index = np.clip(np.ceil(confidence * num_bins).astype(int) - 1, 0, num_bins - 1)
    count = np.bincount(index, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(index, confidence, num_bins) / count
        mean_acc = np.bincount(index, correct, num_bins) / count
    return mean_conf, mean_acc, count


def expected_calibration_error(probs, labels, num_bins: int = 15) -> float:
    """ECE (Guo et al. 2017): ``sum_b (n_b / N) |accuracy_b - confidence_b|`` over ``num_bins``
    equal-width confidence bins."""
    conf, acc, count = reliability(probs, labels, num_bins)
    used = count > 0
    if not used.any():
        return float("nan")
    return float(np.sum(count[used] * np.abs(acc[used] - conf[used])) / count.sum())


def auroc(scores, is_positive) -> float:
    """Area under the ROC curve of ``scores`` for separating positives from negatives: the
    probability that a random positive scores above a random negative, ties counting one half
    (Mann-Whitney U with average ranks)."""
    import scipy.stats  # here, not at the top: it takes most of a second to import

    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(is_positive)
    if scores.ndim != 1 or positive.shape != scores.shape:
        raise ValueError(
            f"expected 1-D scores and labels of the same shape; got {scores.shape} and "
            f"{positive.shape}."
        )
    if positive.dtype != bool:
        if not np.all(np.isin(positive, (0, 1))):
            raise ValueError("expected binary labels (bool, or 0 / 1).")
        positive = positive.astype(bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"expected both classes; got {n_pos} positive, {n_neg} negative.")
    if not np.all(np.isfinite(scores)):
        raise ValueError("expected finite scores.")
    ranks = scipy.stats.rankdata(scores)  # average ranks for ties
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
