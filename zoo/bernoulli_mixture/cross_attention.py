r"""A trained cross-attention layer of the mixture's form: the completion experiment's baseline.

The mixture completes the missing pixels ``M`` from the observed ones ``O`` by one attention,
``p(z = k | x_O) = softmax_k(q K^T + b)`` with the query ``q = [x_O, 1 - x_O]``, then predicts
``p(x_M | x_O) = sum_k p(z = k | x_O) prod_{d in M} Bernoulli(x_d | theta_kd)``. There the keys
``[log theta, log(1 - theta)]``, the bias ``log pi`` and the values ``theta`` are tied to one
generative model fitted to whole images.

:class:`CrossAttentionCompleter` unties them: free keys (K, 2|O|), bias (K,) and value logits
(K, |M|), the tensors the mixture reads out, fitted by Adam to maximise the same objective,
``sum_n log p(x_M | x_O)``, for one fixed mask. Untied, they are more free numbers than the
mixture spends on these pixels, K (2|O| + 1 + |M|) against K (|O| + |M| + 1) - 1 (each of the
mixture's keys comes from |O| numbers): 1.5 times as many for the upper half of an image. It is
trained for the conditional task alone (discriminatively), so it shows what the generative tie
costs or buys.
"""

from __future__ import annotations

import math

import numpy as np

from zoo.attention import torch_attention
from zoo.bernoulli_mixture import as_binary
from zoo.devices import for_torch


class CrossAttentionCompleter:
    """Free keys, bias and values read out as ``softmax(q K^T + b)``, trained by gradient descent.

    Parameters
    ----------
    observed_mask : array_like of bool, shape (D,)
        ``True`` at the observed pixels; the rest are predicted.
    K : int
        Number of keys and values (the mixture's number of components).
    device : str
        Torch device of the parameters and of the data during training and scoring.
    """

    def __init__(self, observed_mask, K: int, device: str = "cpu"):
        import torch

        mask = np.asarray(observed_mask)
        if mask.dtype != bool or mask.ndim != 1 or mask.all() or not mask.any():
            raise ValueError(
                "expected observed_mask: a (D,) boolean array with some pixels observed and "
                "some missing."
            )
        if isinstance(K, bool) or not isinstance(K, int | np.integer) or K < 1:
            raise ValueError(f"K must be a positive int; got {K!r}.")
        self.observed, self.missing = np.flatnonzero(mask), np.flatnonzero(~mask)
        self.K, self.device, self.torch = int(K), torch.device(device), torch
        self.params: dict | None = None

    def _initial(self, x, rng):
        """Keys and values of K random training images, smoothed like a Beta(2, 2) prior."""
        rows = x[rng.choice(len(x), size=self.K, replace=len(x) < self.K)]
        theta = (rows + 1.0) / 3.0
        keys = np.concatenate(
            [np.log(theta[:, self.observed]), np.log1p(-theta[:, self.observed])], axis=1
        )
        values = np.log(theta[:, self.missing]) - np.log1p(-theta[:, self.missing])
        return {"keys": keys, "bias": np.zeros(self.K), "value_logits": values}

    def _query(self, x):
        xo = x[:, self.observed]
        return self.torch.cat([xo, 1.0 - xo], dim=1)

    def _log_prob_missing(self, params, x):
        """``log p(x_M | x_O)`` (N,) of a float tensor batch ``x`` (N, D)."""
        torch = self.torch
        scores = self._query(x) @ params["keys"].T + params["bias"]
        log_w = torch.log_softmax(scores, dim=-1)
        logits = params["value_logits"]  # (K, |M|)
        xm = x[:, self.missing]
        # sum_d log Bernoulli(x_d | sigmoid(l_kd)) = x @ l^T - sum_d softplus(l_kd)
        log_px = xm @ logits.T - torch.nn.functional.softplus(logits).sum(-1)
        return torch.logsumexp(log_w + log_px, dim=-1)

    def fit(
        self,
        x,
        *,
        epochs: int = 10,
        batch_size: int = 500,
        lr: float = 0.01,
        seed: int = 0,
        progress: bool = False,
    ):
        """Maximise ``sum_n log p(x_M | x_O)`` over the binary images ``x`` (N, D) with Adam.

        Returns ``self``; ``history`` holds the mean objective (nats per image) of each epoch.
        Raises a ValueError for no images or a ``batch_size`` that is not a positive int.
        """
        torch = self.torch
        x = self._checked_images(x)
        if len(x) < 1:  # the keys and values start from training images
            raise ValueError(f"expected at least one image to fit; got x of shape {x.shape}.")
        _check_positive_int("batch_size", batch_size)
        rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        params = {
            name: torch.tensor(value, dtype=torch.float32, device=self.device, requires_grad=True)
            for name, value in self._initial(x, rng).items()
        }
        optimizer = torch.optim.Adam(params.values(), lr=lr)
        data = torch.as_tensor(for_torch(x), dtype=torch.float32, device=self.device)
        steps = math.ceil(len(x) / batch_size)
        self.history = []
        from tqdm.auto import tqdm

        # disable=None: shown on a terminal only, so that logs and pipes stay free of
        # carriage-return noise.
        bar = tqdm(range(epochs), desc="cross-attention", disable=None if progress else True)
        for _ in bar:
            order = torch.as_tensor(rng.permutation(len(x)), device=self.device)
            total = 0.0
            for i in range(steps):
                batch = data[order[i * batch_size : (i + 1) * batch_size]]
                loss = -self._log_prob_missing(params, batch).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += -loss.item() * len(batch)
            self.history.append(total / len(x))
            bar.set_postfix(objective=f"{self.history[-1]:.2f}")
        self.params = {k: v.detach() for k, v in params.items()}
        return self

    def _checked_images(self, x) -> np.ndarray:
        """``x`` as binary images (N, D) of this layer's width, or a ValueError saying why not:
        the scores are log-probabilities of 0/1 pixels, meaningless for grey levels."""
        x = np.asarray(x)
        width = len(self.observed) + len(self.missing)
        if x.ndim != 2 or x.shape[1] != width:
            raise ValueError(f"expected x of shape (N, {width}); got {x.shape}.")
        return as_binary(x, "x")

    def _check_fitted(self, x):
        if self.params is None:
            raise RuntimeError("call fit() first.")
        x = self._checked_images(x)
        return self.torch.as_tensor(for_torch(x), dtype=self.torch.float32, device=self.device)

    def log_prob_missing(self, x, chunk: int = 2000) -> np.ndarray:
        """``log p(x_M | x_O)`` (N,) in nats, for binary images ``x`` (N, D), scored ``chunk``
        (a positive int) images at a time."""
        _check_positive_int("chunk", chunk)
        x = self._check_fitted(x)
        if len(x) == 0:  # no chunks to concatenate
            return np.zeros(0)
        with self.torch.no_grad():
            out = [
                self._log_prob_missing(self.params, x[i : i + chunk])
                for i in range(0, len(x), chunk)
            ]
        return self.torch.cat(out).cpu().numpy().astype(np.float64)

    def complete(self, x) -> tuple[np.ndarray, np.ndarray]:
        """``E[x_M | x_O]`` (N, |M|) and the attention weights (N, K), through ``zoo.attention``."""
        torch = self.torch
        x = self._check_fitted(x)
        with torch.no_grad():
            query = self._query(x)[:, None, :]  # one query per image
            mean, weights = torch_attention.scaled_dot_product_attention(
                query,
                self.params["keys"],
                torch.sigmoid(self.params["value_logits"]),
                bias=self.params["bias"],
                scale=1.0,
                return_weights=True,
            )
        return mean[:, 0].cpu().numpy(), weights[:, 0].cpu().numpy()


def _check_positive_int(name: str, value) -> None:
    """A ValueError naming ``name`` unless ``value`` is an int (numpy's included, not a bool)
    of at least 1."""
    valid_int = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not valid_int or value < 1:
        raise ValueError(f"{name} must be a positive int; got {value!r}.")
