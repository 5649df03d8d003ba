"""Hogwild!: several processes update one shared model with no locks at all.

Niu, Recht, Ré & Wright, "Hogwild!: A Lock-Free Approach to Parallelizing Stochastic Gradient
Descent", NIPS 2011. The model lives in shared memory: its weights are a file in the run
folder that every process maps into its memory (``torch.from_file(shared=True)``, mmap's
MAP_SHARED; PyTorch's ``examples/mnist_hogwild`` gets the same with ``share_memory()`` in
forked children). Every process reads it, computes a gradient on its own
samples and writes its update straight into it, without waiting for anyone. Two processes may
overwrite each other's change of the same weight — the paper shows this rarely matters when
the problem is **sparse**: each sample touches only a few of the many weights, so two
concurrent updates seldom touch the same one, and SGD converges nearly as if the updates were
serial. The paper reports an order of magnitude over locking schemes on many cores.

The lab's problem is sparse on purpose: logistic regression on bag-of-words-like samples, each
with ``active`` of ``features`` binary features switched on. An ``nn.EmbeddingBag`` with
``sparse=True`` makes each gradient touch only those rows, exactly Hogwild's setting.
:func:`run_hogwild` trains it twice with the same processes and data:

* ``hogwild``: every process calls ``optimizer.step()`` whenever it likes;
* ``locked``: the update is done holding one shared lock (the operating system's lock on a
  file, ``flock``), so updates never overlap (but processes queue for the lock).

The final weights of both models stay in the run folder (``hogwild.weights``,
``locked.weights``: ``features + 1`` float32 values, the bias last).

The sparsity statistics of the paper are reported too: Ω, the most weights one sample
touches, and Δ, the largest fraction of samples that touch any single weight. Small Ω and Δ
mean few collisions.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from workbench.launch.workers import run_workers
from workbench.rank.workers import run_folder

VARIANTS = ("hogwild", "locked")


class SparseLogisticRegression(nn.Module):
    """Logistic regression on sparse binary features: score = Σ w[active features] + b."""

    def __init__(self, features: int):
        super().__init__()
        self.weights = nn.EmbeddingBag(features, 1, mode="sum", sparse=True)
        nn.init.zeros_(self.weights.weight)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, active: torch.Tensor) -> torch.Tensor:
        """``active``: (batch, k) indices of the features that are on; returns logits."""
        return self.weights(active).squeeze(1) + self.bias


def make_sparse_problem(samples: int = 6000, features: int = 5000, active: int = 8,
                        noise: float = 0.5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded sparse binary classification: (active feature indices, 0/1 labels).

    A hidden weight per feature decides the label: y = [Σ w_true[active] + noise > 0].
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.stack([torch.randperm(features, generator=g)[:active] for _ in range(samples)])
    w_true = torch.randn(features, generator=g)
    score = w_true[x].sum(1) + noise * torch.randn(samples, generator=g)
    return x, (score > 0).float()


def sparsity_stats(x: torch.Tensor, features: int) -> dict[str, float]:
    """Niu et al.'s Ω (max weights per sample) and Δ (max share of samples per weight)."""
    counts = torch.bincount(x.flatten(), minlength=features)
    return {"omega": int(x.shape[1]), "delta": float(counts.max()) / len(x)}


def loss_and_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Mean logistic loss and accuracy of ``model`` on all samples."""
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y).item()
        acc = ((logits > 0).float() == y).float().mean().item()
    return loss, acc


def _shared_model(path: Path, features: int) -> SparseLogisticRegression:
    """The model with its weights in the file `path`, mapped into this process's memory.

    The mapping is shared (``torch.from_file(shared=True)``, mmap's MAP_SHARED): every process
    that maps the same file reads and writes the *same* memory, so an update by one is seen
    by all at once, with no message and no lock. That is Hogwild's shared model. The file
    starts as zeros, the model's initial weights.
    """
    model = SparseLogisticRegression(features)
    flat = torch.from_file(str(path), shared=True, size=features + 1, dtype=torch.float32)
    model.weights.weight.data = flat[:features].view(features, 1)
    model.bias.data = flat[features:]
    return model


@contextmanager
def _file_lock(lock_file: Any) -> Iterator[None]:
    """Hold the operating system's lock on an open file (flock): one holder at a time."""
    fcntl.flock(lock_file, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(lock_file, fcntl.LOCK_UN)


def _train(rank: int, world: int, features: int, x: torch.Tensor, y: torch.Tensor,
           epochs: int, batch_size: int, lr: float) -> dict[str, Any]:
    """One process: train each shared model in turn on my shard (samples rank, rank+P, ...).

    The models and the lock live in the run folder, where every process finds them. After
    the last variant, process 0 measures the final models.
    """
    folder = run_folder()
    if rank == 0:  # create the shared files before anyone maps them
        models = {v: _shared_model(folder / f"{v}.weights", features) for v in VARIANTS}
        (folder / "update.lock").touch()
    dist.barrier()
    if rank != 0:
        models = {v: _shared_model(folder / f"{v}.weights", features) for v in VARIANTS}
    shard = torch.arange(rank, len(x), world)
    out: dict[str, Any] = {}
    with open(folder / "update.lock") as lock:
        for variant, model in models.items():
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            curve = []
            dist.barrier()                                 # every process starts together
            start = time.perf_counter()
            for epoch in range(epochs):
                order = shard[torch.randperm(len(shard),
                                             generator=torch.Generator().manual_seed(epoch + rank))]
                for batch in order.split(batch_size):
                    optimizer.zero_grad()
                    loss = nn.functional.binary_cross_entropy_with_logits(model(x[batch]),
                                                                          y[batch])
                    loss.backward()
                    if variant == "locked":
                        with _file_lock(lock):             # one update at a time
                            optimizer.step()
                    else:
                        optimizer.step()                   # Hogwild!: no lock at all
                if rank == 0:  # a snapshot of the shared model while the others keep writing
                    curve.append({"epoch": epoch + 1, "time_s": time.perf_counter() - start,
                                  "loss": loss_and_accuracy(model, x, y)[0]})
            out[variant] = {"start": start, "end": time.perf_counter(), "curve": curve,
                            "updates": (len(shard) + batch_size - 1) // batch_size * epochs}
    dist.barrier()                                         # every update is in
    if rank == 0:
        for variant, model in models.items():
            out[variant]["final"] = loss_and_accuracy(model, x, y)
    return out


def run_hogwild(processes: int = 2, epochs: int = 3, *, batch_size: int = 4, lr: float = 0.5,
                samples: int = 6000, features: int = 5000, active: int = 8, seed: int = 0,
                runs_dir: str = "runs", timeout: float = 300.0) -> dict[str, Any]:
    """Train the sparse logistic regression lock-free (Hogwild!) and with a lock; compare.

    Returns ``{"hogwild": {...}, "locked": {...}, "initial_loss", "sparsity", "config"}``;
    each variant has ``final_loss``, ``final_accuracy``, ``time_s`` (seconds from the common
    start to the last process finishing), ``updates`` (optimizer steps, all processes) and
    ``loss_curve`` (loss on all samples after each of process 0's epochs).
    """
    if processes < 1 or epochs < 1 or batch_size < 1:
        raise ValueError("processes, epochs and batch_size must be at least 1")
    if not 1 <= active <= features:
        raise ValueError(f"active must be between 1 and features ({features}), got {active}")
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}")
    x, y = make_sparse_problem(samples, features, active, seed=seed)
    initial_loss, _ = loss_and_accuracy(SparseLogisticRegression(features), x, y)
    config = {"processes": processes, "epochs": epochs, "batch_size": batch_size, "lr": lr,
              "samples": samples, "features": features, "active": active, "seed": seed}
    results = run_workers(_train, processes, (features, x, y, epochs, batch_size, lr),
                          name="hogwild", runs_dir=runs_dir, timeout=timeout,
                          names=[f"process {k}" for k in range(processes)], settings=config)
    report: dict[str, Any] = {"initial_loss": initial_loss,
                              "sparsity": sparsity_stats(x, features)}
    for variant in VARIANTS:
        loss, acc = results[0][variant]["final"]
        report[variant] = {
            "final_loss": loss, "final_accuracy": acc,
            "time_s": max(r[variant]["end"] for r in results)
            - min(r[variant]["start"] for r in results),
            "updates": sum(r[variant]["updates"] for r in results),
            "loss_curve": results[0][variant]["curve"]}
    report["config"] = config
    return report
