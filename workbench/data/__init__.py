"""Datasets, always local: nothing is downloaded while a job runs.

- `digits`: 1,797 real 8×8 handwritten digits that ship with scikit-learn.
- `synthetic`: a seeded classification problem (`samples` × `features`, 10 classes).
- `synthetic-images`: seeded 1×16×16 "images" whose class is a blob's position, for CNNs.
  Use it where the lesson is about speed; the labels are learnable, so loss still falls.
- `mnist`, `cifar10`: only when already on disk under `$WORKBENCH_DATA` (default
  `~/.cache/workbench/data`) as `mnist.npz` / `cifar10.npz` with arrays `x` and `y`.

Every loader returns float tensors standardised per feature and int64 labels, the same
on every rank, so each rank can take its shard of one shared sample order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass
class Dataset:
    """Inputs `x` (N × ...), labels `y` (N), and the number of classes."""

    x: torch.Tensor
    y: torch.Tensor
    n_classes: int

    def __len__(self) -> int:
        return len(self.y)


def data_dir() -> Path:
    """Where on-disk datasets (MNIST, CIFAR-10) are looked for."""
    return Path(os.environ.get("WORKBENCH_DATA", Path.home() / ".cache" / "workbench" / "data"))


def load_dataset(name: str, samples: int = 2048, features: int = 32, seed: int = 0,
                 dtype: torch.dtype = torch.float32) -> Dataset:
    """Load dataset `name` (see the module docstring); raise FileNotFoundError with a fix."""
    if name == "digits":
        from sklearn.datasets import load_digits

        bunch = load_digits()
        x, y, k = bunch.data.astype(np.float64), bunch.target, 10
    elif name == "synthetic":
        x, y, k = _synthetic_table(samples, features, seed)
    elif name == "synthetic-images":
        x, y, k = _synthetic_images(samples, seed)
    elif name in ("mnist", "cifar10"):
        x, y, k = _from_disk(name)
    else:
        raise ValueError(f"unknown dataset {name!r}")
    x = _standardise(x)
    return Dataset(torch.as_tensor(x, dtype=dtype), torch.as_tensor(y, dtype=torch.int64), k)


def _standardise(x: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance per feature (constant features stay 0)."""
    flat = x.reshape(len(x), -1)
    std = flat.std(axis=0)
    flat = (flat - flat.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return flat.reshape(x.shape)


def _synthetic_table(samples: int, features: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Gaussian clusters, one per class, with noise: linearly separable-ish, 10 classes."""
    rng = np.random.default_rng(seed)
    k = 10
    centers = rng.normal(0.0, 1.0, size=(k, features))
    y = rng.integers(0, k, size=samples)
    x = centers[y] + rng.normal(0.0, 1.5, size=(samples, features))
    return x, y, k


def _synthetic_images(samples: int, seed: int,
                      side: int = 16) -> tuple[np.ndarray, np.ndarray, int]:
    """Noisy 1×side×side images with a bright 4×4 blob; the class is the blob's quadrant cell."""
    rng = np.random.default_rng(seed)
    k, grid = 9, 3
    y = rng.integers(0, k, size=samples)
    x = rng.normal(0.0, 0.5, size=(samples, 1, side, side))
    cell = side // grid
    for i, label in enumerate(y):
        r, c = divmod(int(label), grid)
        r0 = r * cell + rng.integers(0, cell - 3)
        c0 = c * cell + rng.integers(0, cell - 3)
        x[i, 0, r0:r0 + 4, c0:c0 + 4] += 2.0
    return x, y, k


def _from_disk(name: str) -> tuple[np.ndarray, np.ndarray, int]:
    path = data_dir() / f"{name}.npz"
    if not path.exists():
        raise FileNotFoundError(
            f"dataset {name!r} is not on this machine: expected {path} with arrays 'x' and 'y'."
            " The workbench never downloads data while a job runs; use --dataset digits or"
            " synthetic-images, or place the file there (set WORKBENCH_DATA to change the folder).")
    with np.load(path) as f:
        x, y = f["x"].astype(np.float64), f["y"].astype(np.int64)
    if x.ndim == 3:  # N×H×W -> N×1×H×W
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3):  # N×H×W×C -> N×C×H×W
        x = x.transpose(0, 3, 1, 2)
    return x / 255.0, y, int(y.max()) + 1
