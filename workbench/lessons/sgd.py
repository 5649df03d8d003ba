"""Stochastic gradient descent in one process, small enough to read in a notebook.

Notebook 01 trains a softmax (multinomial logistic) regression on scikit-learn's 1,797 digits
with plain mini-batch SGD, and asks what the batch size and the learning rate change.
Notebook 02 uses :func:`shard_gradients` to show why data parallelism averages gradients.

The model is one linear layer, ``logits = x W + b``, and the loss is the mean cross-entropy
over a batch. Its full-data loss is convex, so gradient descent with a small enough learning
rate always goes downhill, and what we see in the curves is the effect of the batch and the
step size, not of a tricky model.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn
from torch.nn import functional as F

from workbench.data import Dataset, load_dataset


@lru_cache(maxsize=1)
def digits() -> Dataset:
    """The digits, standardised (64 features per 8×8 image, 10 classes), loaded once."""
    return load_dataset("digits")


def logreg(seed: int = 0) -> nn.Linear:
    """A fresh softmax regression for the digits: 64 inputs, 10 outputs (650 parameters)."""
    torch.manual_seed(seed)
    return nn.Linear(64, 10)


def full_loss(model: nn.Module, data: Dataset) -> float:
    """The quantity SGD minimises: the mean cross-entropy over *all* samples."""
    with torch.no_grad():
        return float(F.cross_entropy(model(data.x), data.y))


def sgd_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> float:
    """One step of gradient descent on the batch ``(x, y)``: w ← w − lr · ∇loss(w).

    Returns the batch's loss before the step. With the whole dataset as the batch this is
    (full) gradient descent; with a random part of it, stochastic gradient descent.
    """
    loss = F.cross_entropy(model(x), y)      # mean over the batch
    model.zero_grad()
    loss.backward()                          # fills p.grad for every parameter p
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad                 # the update rule, written out
    return loss.item()


def _check(batch_size: int, lr: float, n: int) -> None:
    """Refuse settings that cannot train, saying what would work."""
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be between 1 and {n} (the number of digits), "
                         f"got {batch_size}")
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}")


def minibatch_sgd(batch_size: int, lr: float, epochs: int = 1, seed: int = 0,
                  points: int = 100) -> dict[str, list[float]]:
    """Train a fresh softmax regression with mini-batch SGD; return its learning curve.

    Each epoch visits the samples once in a new random order, ``batch_size`` at a time (an
    incomplete last batch is dropped). About ``points`` times per epoch the loss on the whole
    dataset is recorded, so curves of different batch sizes can be compared per step or per
    sample seen. Returns ``{"step", "samples", "loss"}``, lists of the same length.
    """
    data = digits()
    n = len(data)
    _check(batch_size, lr, n)
    model, gen = logreg(seed), torch.Generator().manual_seed(seed)
    steps_per_epoch = n // batch_size
    every = max(1, steps_per_epoch // points)
    curve: dict[str, list[float]] = {"step": [0], "samples": [0], "loss": [full_loss(model, data)]}
    step = 0
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for i in range(steps_per_epoch):
            idx = order[i * batch_size:(i + 1) * batch_size]
            sgd_step(model, data.x[idx], data.y[idx], lr)
            step += 1
            if step % every == 0 or i == steps_per_epoch - 1:
                curve["step"].append(step)
                curve["samples"].append(step * batch_size)
                curve["loss"].append(full_loss(model, data))
    return curve


def _gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of the mean loss on ``(x, y)``, all parameters as one flat vector."""
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def gradient_noise(batch_sizes: list[int], trials: int = 100, seed: int = 0) -> list[dict]:
    """How far a mini-batch gradient is from the full gradient, for each batch size.

    For ``trials`` random batches (drawn with replacement) we measure the squared distance
    ‖g_B − ∇L‖² between the batch gradient g_B and the full-data gradient ∇L, at the same
    weights. Its mean is σ²/B for independent samples (σ² the variance of one sample's
    gradient): quadrupling the batch halves the typical error. Returns rows ``batch_size,
    noise`` (the mean squared distance) and ``relative`` (noise ÷ ‖∇L‖²).
    """
    data, model = digits(), logreg(seed)
    gen = torch.Generator().manual_seed(seed)
    full = _gradient(model, data.x, data.y)
    rows = []
    for b in batch_sizes:
        errors = []
        for _ in range(trials):
            idx = torch.randint(len(data), (b,), generator=gen)
            errors.append(float((_gradient(model, data.x[idx], data.y[idx]) - full).pow(2).sum()))
        noise = sum(errors) / trials
        rows.append({"batch_size": b, "noise": noise, "relative": noise / float(full.pow(2).sum())})
    return rows


def shard_gradients(batch_size: int = 32, world_size: int = 2, seed: int = 0) -> dict:
    """Compare the gradient of one global batch with what ``world_size`` ranks compute.

    The global batch of ``batch_size`` samples is cut into ``world_size`` equal shards, as
    data parallelism does; each "rank" computes the gradient of the mean loss on its shard.
    Returns the largest absolute difference between the global-batch gradient and the
    *average* of the shard gradients (rounding only, about 1e-8), and with their *sum*
    (``world_size`` times too large: the classic bug).
    """
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} must be a multiple of world_size "
                         f"{world_size}, so that every shard has the same size")
    data, model = digits(), logreg(seed)
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:batch_size]
    whole = _gradient(model, data.x[idx], data.y[idx])
    shards = [_gradient(model, data.x[part], data.y[part]) for part in idx.chunk(world_size)]
    average = sum(shards) / world_size
    return {"batch_size": batch_size, "world_size": world_size,
            "max_diff_average": float((average - whole).abs().max()),
            "max_diff_sum": float((sum(shards) - whole).abs().max()),
            "gradient_max": float(whole.abs().max())}
