"""The models a rank trains: small enough for CPU cores, different enough to teach scaling.

- `logreg`: one linear layer; convex, the model of notebook 01.
- `mlp`: two hidden layers of `width` units (ReLU). Wide MLPs have many parameters and
  little work per parameter, so they are communication-bound.
- `cnn`: two 3×3 conv layers of `width` channels, then global average pooling and a linear
  head. The pooling keeps the parameter count small while the convolutions do many FLOPs
  per parameter, so it is compute-bound and scales well.

No dropout or batch norm: the data-parallel trajectory must equal the serial one exactly.

Lessons it serves: notebooks/01_sgd_from_scratch.ipynb (logreg) and
notebooks/02_data_parallelism_horovod.ipynb.
"""

from __future__ import annotations

import torch
from torch import nn


def build_model(name: str, in_shape: tuple[int, ...], n_classes: int, width: int = 64) -> nn.Module:
    """Build model `name` for inputs of shape `in_shape` (without the batch dimension)."""
    if name == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(_numel(in_shape), n_classes))
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(_numel(in_shape), width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, n_classes),
        )
    if name == "cnn":
        if len(in_shape) != 3:
            raise ValueError(f"cnn needs image inputs (C×H×W), got shape {in_shape}")
        return nn.Sequential(
            nn.Conv2d(in_shape[0], width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(width, n_classes),
        )
    raise ValueError(f"unknown model {name!r}")


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (each one float is allreduced every step)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def make_optimizer(name: str, params, lr: float, momentum: float = 0.0,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """SGD (with optional momentum and weight decay) or Adam."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}")
