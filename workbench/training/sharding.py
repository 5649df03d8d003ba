"""How the samples of an epoch are split between ranks: every rank draws the same seeded
permutation for epoch `e`, cut into global batches of `world_size × batch_size`; rank `r`
takes the `r`-th slice of each. Averaging the slices' gradients gives the gradient of the
mean loss over the global batch, so N ranks with batch b take the same steps as one process
with batch N·b (an incomplete last global batch is dropped in both). docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import torch


def epoch_order(n_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The seeded sample order of `epoch`, identical on every rank."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n_samples, generator=gen)


def steps_per_epoch(n_samples: int, world_size: int, batch_size: int) -> int:
    """Number of full global batches in one epoch."""
    return n_samples // (world_size * batch_size)


def shard(order: torch.Tensor, step: int, rank: int, world_size: int,
          batch_size: int) -> torch.Tensor:
    """Indices of the samples that `rank` trains on at `step` of this epoch."""
    start = step * world_size * batch_size + rank * batch_size
    return order[start:start + batch_size]


def holdout_split(n_samples: int, seed: int, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation) sample indices: `fraction` of the samples, drawn with `seed`, held
    out, the same on every rank and run (a resumed one too): accuracy on samples the model
    was fitted to rewards memorising. With `fraction` 0 both are every sample."""
    n_val = round(n_samples * fraction)
    if n_val == 0:
        every = torch.arange(n_samples)
        return every, every
    perm = epoch_order(n_samples, seed, 1_000_002)  # an epoch past any run's last
    return perm[n_val:].sort().values, perm[:n_val].sort().values


def eval_shard(val_idx: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """The contiguous slice of the held-out samples that `rank` evaluates (sizes differ by <= 1)."""
    return val_idx.tensor_split(world_size)[rank]
