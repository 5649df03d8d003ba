"""Datasets, always local: nothing is downloaded while a job runs.

- `digits`: 1,797 real 8×8 handwritten digits that ship with scikit-learn.
- `synthetic`: a seeded classification problem (`samples` × `features`, 10 classes).
- `synthetic-images`: seeded 1×16×16 "images" whose class is a blob's position, for CNNs.
  Use it where the lesson is about speed; the labels are learnable, so loss still falls.
- `mnist`, `cifar10`: only when already on disk under `$WORKBENCH_DATA` (default
  `~/.cache/workbench/data`) as `mnist.npz` / `cifar10.npz` with arrays `x` and `y`.

Every loader returns float tensors standardised per feature and int64 labels, the same
on every rank, so each rank can take its shard of one shared sample order.

Memory: the inputs are made directly in the training dtype (float32 by default),
standardised a block of rows at a time, so no full-size float64 copy ever exists (CIFAR-10
as float64 with temporaries took about 3 GB per rank). With `cache_dir` (the training
ranks pass one per host), the first rank of a host writes the prepared arrays there, and
every rank of that host maps the same file: the page cache holds them once per host.

Lessons it serves: notebooks/01_sgd_from_scratch.ipynb (the digits a rank learns) and every
job of the later lessons.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from workbench.records.private import check_own_folder
from workbench.records.store import atomic_file, make_folder, open_file


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
                 dtype: torch.dtype = torch.float32, cache_dir: Path | None = None) -> Dataset:
    """Load dataset `name` (see the module docstring); raise FileNotFoundError with a fix.

    With `cache_dir`, the prepared arrays are made once there and then mapped from the file
    by every caller (concurrent callers wait for the first one: see `_prepared`).
    """
    def prepare() -> tuple[np.ndarray, np.ndarray, int]:
        x, y, k = _raw(name, samples, features, seed)
        return _standardise(x, np.dtype(str(dtype).removeprefix("torch."))), y, k

    if cache_dir is None:
        x, y, k = prepare()
    else:
        x, y, k = _prepared(Path(cache_dir), _cache_key(name, samples, features, seed, dtype),
                            prepare)
    return Dataset(torch.from_numpy(x), torch.from_numpy(y).to(torch.int64), k)


def _raw(name: str, samples: int, features: int,
         seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The inputs as made or stored (any numeric dtype), the labels, the number of classes."""
    if name == "digits":
        return _digits()
    if name == "synthetic":
        return _synthetic_table(samples, features, seed)
    if name == "synthetic-images":
        return _synthetic_images(samples, seed)
    if name in ("mnist", "cifar10"):
        return _from_disk(name)
    raise ValueError(f"unknown dataset {name!r}")


#: Bytes of float64 a block of rows may take while it is standardised (8 MiB): the only
#: float64 temporaries are one block long, whatever the dataset's size.
BLOCK_BYTES = 8 << 20


def _standardise(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Zero mean, unit variance per feature (constant features stay 0), as `dtype`.

    Mean and variance are summed in float64, block by block (two passes, which is exact
    where one pass of sums of squares would cancel); each block is then written straight
    into the `dtype` result.
    """
    n = len(x)
    flat = x.reshape(n, -1)
    rows = max(1, BLOCK_BYTES // (8 * flat.shape[1]))
    blocks = [slice(i, min(i + rows, n)) for i in range(0, n, rows)]
    mean = sum(flat[b].sum(axis=0, dtype=np.float64) for b in blocks) / n
    var = np.zeros_like(mean)
    for b in blocks:
        d = flat[b] - mean
        d *= d
        var += d.sum(axis=0)
    std = np.sqrt(var / n)
    scale = np.where(std > 0, std, 1.0)
    out = np.empty(flat.shape, dtype=dtype)
    for b in blocks:
        d = flat[b] - mean
        d /= scale
        out[b] = d
    return out.reshape(x.shape)


def _cache_key(name: str, samples: int, features: int, seed: int, dtype: torch.dtype) -> str:
    """A file name for these settings (and, for files on disk, that file's size and age)."""
    parts: dict[str, object] = {"name": name, "dtype": str(dtype), "version": 1}
    if name in ("synthetic", "synthetic-images"):
        parts.update(samples=samples, seed=seed)
    if name == "synthetic":
        parts["features"] = features
    if name in ("mnist", "cifar10"):
        stat = _stored(name).stat()
        parts.update(size=stat.st_size, mtime=stat.st_mtime_ns)
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    return f"{name}-{str(dtype).removeprefix('torch.')}-{digest}"


def _prepared(folder: Path, key: str,
              prepare: Callable[[], tuple[np.ndarray, np.ndarray, int]]
              ) -> tuple[np.ndarray, np.ndarray, int]:
    """The arrays of `key` in `folder`, prepared by the first caller, mapped by all.

    A lock file serialises the ranks of a host: the first prepares and writes (each file to
    a temporary name, then renamed, the inputs last, so a half-written file is never
    seen), the others wait and then only map the finished files. The inputs are mapped
    copy-on-write ("c"): the pages stay shared between ranks as long as nobody writes.
    """
    check_own_folder(make_folder(folder, 0o700).parent)
    x_path, y_path, meta_path = (folder / f"{key}.{part}" for part in ("x.npy", "y.npy", "json"))
    with open(open_file(folder / f"{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not x_path.exists():
            x, y, k = prepare()
            for path, write in ((y_path, lambda f: np.save(f, y)),
                                (meta_path, lambda f: f.write(json.dumps({"classes": k}).encode())),
                                (x_path, lambda f: np.save(f, x))):
                with atomic_file(path) as f:
                    write(f)
    k = json.loads(meta_path.read_text())["classes"]
    return np.load(x_path, mmap_mode="c"), np.load(y_path), k


def _digits() -> tuple[np.ndarray, np.ndarray, int]:
    """scikit-learn's digits, read from the file it ships (each row: 64 pixels, the label).

    The same arrays as `sklearn.datasets.load_digits()` (tests/test_data.py), without
    importing scikit-learn and SciPy, which cost every rank about a second of CPU; with a
    scikit-learn that keeps the file elsewhere, its own loader.
    """
    spec = importlib.util.find_spec("sklearn")
    folders = spec.submodule_search_locations if spec is not None else None
    path = Path(folders[0]) / "datasets" / "data" / "digits.csv.gz" if folders else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data, bunch.target, 10
    table = np.loadtxt(path, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64), 10


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


def _stored(name: str) -> Path:
    """The file of a stored dataset; FileNotFoundError saying what to do when it is absent."""
    path = data_dir() / f"{name}.npz"
    if not path.exists():
        raise FileNotFoundError(
            f"dataset {name!r} is not on this machine: expected {path} with arrays 'x' and 'y'."
            " The workbench never downloads data while a job runs; use --dataset digits or"
            " synthetic-images, or place the file there (set WORKBENCH_DATA to change the folder).")
    return path


def _from_disk(name: str) -> tuple[np.ndarray, np.ndarray, int]:
    with np.load(_stored(name)) as f:
        x, y = f["x"], f["y"].astype(np.int64)   # x stays as stored (uint8 pixels)
    if x.ndim == 3:  # N×H×W -> N×1×H×W
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3):  # N×H×W×C -> N×C×H×W
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    # No division by 255: standardising per feature removes any common scale anyway.
    return x, y, int(y.max()) + 1
