"""Calibrate the simulator on this machine, then check its predictions against real runs.

Three measurements are enough to predict a data-parallel job's epoch time at p workers:

1. α and β of allreduce at np=2, from the benchmark
   (:func:`workbench.scaling.bench.run_allreduce_bench`);
2. the time of one training step on one worker, from an np=1 run (median ``step_time_s``);
3. the messages each step sends: their sizes come from the model itself.

Then, with the job's usual sharding (``batch_size`` per rank, so an epoch of N samples has
⌊N / (p·b)⌋ steps):

    epoch time(p) = steps(p) × (compute(p) + Σ over messages ring allreduce(nᵢ, p, α, β))

* compute(p) is the np=1 step time; when the ranks outnumber the cores (3 ranks on 2 cores)
  they take turns, so compute *and* communication are stretched by p / cores (gloo copies and
  adds the bytes with the same cores; see :func:`workbench.scaling.simulate.oversubscription`).
* The messages matter because each one pays the latency α. Horovod's timeline of these small
  models shows one ``ALLREDUCE`` per gradient tensor per step (nothing was fused), so a
  3-layer MLP pays 6 latencies per step; DDP sends buckets (the first one capped at 1 MB, the
  rest at 25 MB, Li et al., VLDB 2020).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from workbench.config import JobConfig
from workbench.scaling.costmodel import ring_allreduce_time
from workbench.scaling.simulate import compute_time_per_rank, oversubscription

#: PyTorch DDP's bucket caps in bytes: the first bucket, then every other (Li et al. 2020).
DDP_FIRST_BUCKET = 1 << 20
DDP_BUCKET = 25 << 20


def tensor_bytes(cfg: JobConfig) -> list[int]:
    """Bytes of each trainable parameter tensor of the job's model (its gradients' sizes)."""
    import torch

    from workbench.data import load_dataset
    from workbench.models import build_model

    data = load_dataset(cfg.dataset, samples=min(cfg.samples, 64), features=cfg.features,
                        seed=cfg.seed)
    model = build_model(cfg.model, tuple(data.x.shape[1:]), data.n_classes, cfg.width)
    size = torch.finfo(getattr(torch, cfg.dtype)).bits // 8
    return [p.numel() * size for p in model.parameters() if p.requires_grad]


def message_bytes(engine: str, tensors: Sequence[int]) -> list[int]:
    """The allreduce messages of one step: one per tensor (Horovod, as its timeline shows for
    these models), or DDP's buckets (1 MB first, then 25 MB)."""
    if engine != "torch":
        return list(tensors)
    total, out = sum(tensors), []
    cap = DDP_FIRST_BUCKET
    while total > 0:
        out.append(min(total, cap))
        total -= out[-1]
        cap = DDP_BUCKET
    return out


def median_step_time(metrics: Sequence[Mapping], skip: int = 3) -> float:
    """Median ``step_time_s`` over the steps of a run, leaving out the first ``skip`` (warm-up)."""
    times = [m["step_time_s"] for m in metrics
             if m.get("kind") == "step" and m.get("step", 0) >= skip]
    if not times:
        raise ValueError("the run has no step metrics to time (did it train at all?)")
    return statistics.median(times)


def epoch_time(metrics: Sequence[Mapping]) -> float:
    """Measured seconds per epoch: the median over epochs of the slowest rank's
    ``epoch_time_s``, leaving out the first epoch (warm-up) when there are more."""
    epochs = [m for m in metrics if m.get("kind") == "epoch"]
    if not epochs:
        raise ValueError("the run has no epoch metrics (did it finish an epoch?)")
    numbers = sorted({m["epoch"] for m in epochs})
    numbers = numbers[1:] if len(numbers) > 1 else numbers
    return statistics.median(max(m["epoch_time_s"] for m in epochs if m["epoch"] == e)
                             for e in numbers)


def steady_epoch_time(metrics: Sequence[Mapping], skip: int = 3) -> float:
    """Steps per epoch × median step time (slowest rank per step): the epoch time without
    the occasional step that another program on a shared machine slowed down."""
    by_step: dict[int, float] = {}
    for m in metrics:
        if m.get("kind") == "step" and m.get("step", 0) >= skip:
            by_step[m["step"]] = max(by_step.get(m["step"], 0.0), m["step_time_s"])
    ready = [m for m in metrics if m.get("kind") == "event" and m.get("message") == "ready"]
    if not by_step or not ready:
        raise ValueError("the run has no step metrics to time (did it train at all?)")
    return ready[0]["steps_per_epoch"] * statistics.median(by_step.values())


def predict_epoch_time(p: int, samples: int, batch_size: int, step_time_1_s: float,
                       messages: Sequence[float], alpha_s: float, beta_s_per_byte: float,
                       cores: int) -> dict:
    """Predicted seconds per epoch at ``p`` ranks (see the module docstring for the model).

    ``messages`` are the byte sizes of the allreduces of one step.
    """
    steps = samples // (p * batch_size)
    compute = compute_time_per_rank(step_time_1_s, p, "weak", cores)
    comm = sum(ring_allreduce_time(n, p, alpha_s, beta_s_per_byte) for n in messages)
    comm *= oversubscription(p, cores)
    return {"np": p, "steps": steps, "compute_s": compute, "comm_s": comm,
            "epoch_time_s": steps * (compute + comm)}


def run_calibration(base: JobConfig, alpha_s: float, beta_s_per_byte: float,
                    workers: Sequence[int] = (2, 3), cores: int | None = None,
                    timeout_s: float = 300.0) -> dict:
    """Run ``base`` at np=1 (to time a step) and at each of ``workers``; compare to predictions.

    Returns ``{"step_time_1_s", "gradient_bytes", "messages", "message_sizes", "cores",
    "rows": [...]}``;
    each row has ``np, predicted_s, measured_s, error`` (error = predicted ÷ measured − 1)
    and the same against :func:`steady_epoch_time` (``steady_measured_s, steady_error``),
    which a busy shared machine disturbs less.
    """
    import workbench

    cores = cores or os.cpu_count() or 1
    base = replace(base, threads_per_rank=base.threads_per_rank or 1)
    messages = message_bytes(base.engine, tensor_bytes(base))
    measured: dict[int, list] = {}
    for p in [1, *workers]:
        job = workbench.start(replace(base, np=p))
        if job.wait(timeout_s) != "succeeded":
            job.stop()
            raise RuntimeError(f"calibration run at np={p} {job.status}: see {job.run_dir}")
        measured[p] = job.metrics()
    step_1 = median_step_time(measured[1])
    rows = []
    for p in workers:
        pred = predict_epoch_time(p, base.samples, base.batch_size, step_1, messages, alpha_s,
                                  beta_s_per_byte, cores)
        real, steady = epoch_time(measured[p]), steady_epoch_time(measured[p])
        rows.append({**pred, "predicted_s": pred["epoch_time_s"], "measured_s": real,
                     "error": pred["epoch_time_s"] / real - 1.0,
                     "steady_measured_s": steady,
                     "steady_error": pred["epoch_time_s"] / steady - 1.0})
    return {"step_time_1_s": step_1, "gradient_bytes": sum(messages),
            "messages": len(messages), "message_sizes": messages, "cores": cores, "rows": rows}
