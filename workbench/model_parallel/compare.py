"""Data vs model parallelism, side by side, on the same model and the same batches.

With P workers there are two basic ways to split the training of one MLP:

* **Data parallelism**: every worker holds the *whole* model and takes 1/P of each batch;
  after the backward pass the gradients are summed with a ring allreduce (the one written
  from scratch in :mod:`workbench.synchronization.ring_allreduce`, so its bytes can be
  counted). Memory: full parameters, gradients and optimizer state on every worker, but only
  1/P of the activations. Communication: about 2·(P−1)/P × the gradient's bytes per worker per
  step, whatever the batch size (Patarasuk & Yuan 2009).
* **Model (pipeline) parallelism**: worker k holds 1/P of the layers and sees every sample
  (:mod:`workbench.model_parallel.pipeline`, GPipe schedule, M micro-batches). Memory: 1/P of
  the parameters, gradients and optimizer state, but the activations of all M micro-batches.
  Communication: the activations at each cut forwards and their gradients backwards —
  batch × width × 4 bytes each way per cut per step, whatever the number of parameters (a
  middle stage sends both ways: 2 × batch × width × 4 bytes).

:func:`compare` runs both in the same processes and *measures* memory per worker (parameters,
gradients, optimizer state, and activations as autograd saved them), bytes sent per worker per
step, and seconds per step. Both train exactly the same model on the same batches, so their
losses agree with each other (and with the unsplit model).

Which to choose: when the model (× 4 with Adam: weights, gradients, two moments) does not fit
one worker, or its gradients are much larger than the activations at a cut (wide layers,
small batches), model parallelism needs less memory and fewer bytes. When the model fits and
the batch is large, data parallelism keeps every worker busy (no bubble) and its traffic does
not grow with the batch. Try ``width=1024, batch_size=32`` against ``width=64,
batch_size=1024`` and compare the measured numbers.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector

from workbench.launch.workers import run_workers
from workbench.model_parallel.layouts import pipeline_bytes
from workbench.model_parallel.memory import ActivationMeter, memory_breakdown
from workbench.model_parallel.pipeline import (
    PipelineConfig,
    batches,
    make_blocks,
    make_optimizer,
    train_stage,
)
from workbench.synchronization.ring_allreduce import ring_allreduce


def _data_parallel(rank: int, world: int, cfg: PipelineConfig, x: torch.Tensor,
                   y: torch.Tensor, n_classes: int) -> dict[str, Any]:
    """One data-parallel worker: whole model, 1/P of each batch, ring-allreduced gradients."""
    model = nn.Sequential(*make_blocks(x.shape[1], cfg.width, cfg.layers, n_classes, cfg.seed))
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr)
    activations = ActivationMeter(model.parameters())
    sent = [0]

    def send(t: torch.Tensor, dst: int):
        sent[0] += t.numel() * t.element_size()
        return dist.isend(t.contiguous(), dst)

    losses, step_times = [], []
    for idx in batches(len(x), cfg):
        mine = idx.tensor_split(world)[rank]
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        with activations.recording() as n_saved:
            # My samples' share of the whole batch's mean loss: the summed gradients of all
            # workers are then exactly the gradient of the whole batch.
            loss = nn.functional.cross_entropy(model(x[mine]), y[mine]) * (len(mine) / len(idx))
        loss.backward()
        activations.release(n_saved[0])
        grads = parameters_to_vector(p.grad for p in model.parameters())
        ring_allreduce(grads, rank, world, send, lambda t, src: dist.recv(t, src))
        torch.nn.utils.vector_to_parameters(grads, [p.grad for p in model.parameters()])
        optimizer.step()
        step_times.append(time.perf_counter() - start)
        total = torch.tensor([loss.item()])
        dist.all_reduce(total)                 # for the report only (not counted as traffic)
        losses.append(total.item())
    return {"losses": losses, "step_times": step_times, "bytes_sent": sent[0],
            "memory": memory_breakdown(model, optimizer, activations.peak)}


def _both(rank: int, world: int, cfg: PipelineConfig, x: torch.Tensor, y: torch.Tensor,
          n_classes: int) -> dict[str, Any]:
    """Entry point of each process: the data-parallel run, then the pipeline run."""
    return {"data": _data_parallel(rank, world, cfg, x, y, n_classes),
            "model": train_stage(rank, cfg, x, y, n_classes)}


def _median_after_first(values: list[float]) -> float:
    """Median of per-step values, leaving out the first (warm-up) step when there are more."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def compare(workers: int = 2, *, width: int = 512, layers: int = 4, batch_size: int = 64,
            microbatches: int = 4, steps: int = 4, optimizer: str = "adam", lr: float = 0.01,
            seed: int = 0, runs_dir: str = "runs", timeout: float = 300.0) -> dict[str, Any]:
    """Train the same MLP data-parallel and pipeline-parallel on ``workers`` processes.

    Returns ``{"config", "model", "data_parallel", "model_parallel"}``. Each strategy has
    ``memory_per_worker`` (bytes: ``params_bytes``, ``grads_bytes``, ``optimizer_bytes``,
    ``activations_bytes``, ``total_bytes``; the largest worker for the pipeline),
    ``comm_bytes_per_step`` (bytes the busiest worker sends per step, measured),
    ``predicted_comm_bytes_per_step`` (from the formulas in the module docstring),
    ``step_time_s`` (median seconds per step, warm-up step excluded) and ``losses``.
    """
    cfg = PipelineConfig(stages=workers, microbatches=microbatches, schedule="gpipe",
                         steps=steps, batch_size=batch_size, width=width, layers=layers, lr=lr,
                         optimizer=optimizer, compute_ms=0.0, seed=seed).validate()
    if workers < 2:
        raise ValueError(f"comparing parallel strategies needs at least 2 workers, got {workers}")
    from workbench.data import load_dataset

    data = load_dataset("digits")
    results = run_workers(_both, workers, (cfg, data.x, data.y, data.n_classes),
                          name="compare", runs_dir=runs_dir, timeout=timeout,
                          names=[f"worker {k}" for k in range(workers)], settings=asdict(cfg))
    n_params = sum(p.numel() for b in make_blocks(data.x.shape[1], width, layers,
                                                  data.n_classes, seed) for p in b.parameters())
    dp = [r["data"] for r in results]
    mp = [r["model"] for r in results]
    dp_times = [max(ts) for ts in zip(*(r["step_times"] for r in dp), strict=True)]
    mp_times = [max(w[1] for w in ws) - min(w[0] for w in ws)
                for ws in zip(*(r["windows"] for r in mp), strict=True)]
    busiest = max(mp, key=lambda r: r["memory"]["total_bytes"])
    return {
        "config": {"workers": workers, "width": width, "layers": layers,
                   "batch_size": batch_size, "microbatches": microbatches, "steps": steps,
                   "optimizer": optimizer, "lr": lr, "seed": seed},
        "model": {"params": n_params, "params_bytes": 4 * n_params},
        "data_parallel": {
            "memory_per_worker": max((r["memory"] for r in dp), key=lambda m: m["total_bytes"]),
            "comm_bytes_per_step": max(r["bytes_sent"] for r in dp) / steps,
            "predicted_comm_bytes_per_step": 2 * (workers - 1) / workers * 4 * n_params,
            "step_time_s": _median_after_first(dp_times), "losses": dp[0]["losses"]},
        "model_parallel": {
            "microbatches": microbatches,
            "memory_per_worker": busiest["memory"],
            "memory_per_stage": [r["memory"] for r in mp],
            "comm_bytes_per_step": max(r["bytes_sent"] for r in mp) / steps,
            "predicted_comm_bytes_per_step": pipeline_bytes(workers, batch_size, width),
            "step_time_s": _median_after_first(mp_times), "losses": mp[-1]["losses"]},
    }
