"""Calibrate the simulator on this machine (np=1 and np=2), then check it against real runs.

The model of one synchronous data-parallel step at p ranks:

    step(p) = compute(p) + Σ over the step's messages ring allreduce(nᵢ, p, α, β)
    epoch time(p) = steps(p) × step(p),   steps(p) = ⌊N / (p·b)⌋ (b = batch per rank)

Calibration takes three measurements, all from this machine:

1. β (seconds per byte) from the allreduce benchmark at np=2
   (:func:`workbench.scaling.bench.run_allreduce_bench`);
2. an np=1 run: its time per step (epoch time ÷ steps), and its compute part;
3. an np=2 run: how much slower each rank computes when two ranks share the machine (the
   *contention* factor κ: memory bandwidth, caches, and the engine's own threads, which
   share each rank's core), and how long a step waits for synchronization, from which the
   effective latency α per message is solved. α measured by a benchmark of back-to-back
   allreduces is smaller than what a training step pays: there, each gradient's allreduce
   is negotiated between the ranks first (Horovod's coordinator) and waits for the slowest
   rank.

Step times are epoch times ÷ steps, not the median step: an epoch also pays for the odd
slow step and for the work between steps, and the epoch time is what we predict.

Then compute(p) = κ × step(1) × ⌈p / cores⌉ when the ranks outnumber the cores: ranks are
bound to cores round-robin, so with 3 ranks on 2 cores one core runs two of them in turn
and every step waits for it (see :func:`workbench.scaling.simulate.oversubscription`).

The messages matter because each one pays α. Horovod's timeline of these small models shows
one ``ALLREDUCE`` per gradient tensor per step (nothing was fused), so a 3-layer MLP pays 6
latencies per step; DDP sends buckets (the first one capped at 1 MB, the rest at 25 MB,
Li et al., VLDB 2020).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from workbench.config import JobConfig
from workbench.hosts.cpu import cpu_budget
from workbench.records import events
from workbench.scaling.costmodel import ring_allreduce_time
from workbench.scaling.simulate import compute_time_per_rank

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


def median_step_time(metrics: Sequence[Mapping], skip: int = 3,
                     field: str = "step_time_s") -> float:
    """Median over steps of the slowest rank's ``field`` (a synchronous step ends with its
    slowest rank), leaving out the first ``skip`` steps (warm-up)."""
    by_step: dict[int, float] = {}
    for m in metrics:
        if m.get("kind") == "step" and m.get("step", 0) >= skip:
            by_step[m["step"]] = max(by_step.get(m["step"], 0.0), m[field])
    if not by_step:
        raise ValueError("the run has no step metrics to time (did it train at all?)")
    return statistics.median(by_step.values())


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


def steps_per_epoch(metrics: Sequence[Mapping]) -> int:
    """Steps in one epoch of the run, as its ranks reported when training started."""
    ready = events(metrics, "ready")
    if not ready:
        raise ValueError("the run has no step metrics to time (did it train at all?)")
    return ready[0]["steps_per_epoch"]


def mean_step_time(metrics: Sequence[Mapping]) -> float:
    """Seconds per step as an epoch pays them: :func:`epoch_time` ÷ steps per epoch."""
    return epoch_time(metrics) / steps_per_epoch(metrics)


def steady_epoch_time(metrics: Sequence[Mapping], skip: int = 3) -> float:
    """Steps per epoch × median step time (slowest rank per step): the epoch time without
    the occasional step that another program on a shared machine slowed down."""
    return steps_per_epoch(metrics) * median_step_time(metrics, skip)


def predict_epoch_time(p: int, samples: int, batch_size: int, step_time_1_s: float,
                       messages: Sequence[float], alpha_s: float, beta_s_per_byte: float,
                       cores: int, contention: float = 1.0) -> dict:
    """Predicted seconds per epoch at ``p`` ranks (see the module docstring for the model).

    ``messages`` are the byte sizes of the allreduces of one step; ``contention`` (κ ≥ 1)
    stretches compute when more than one rank shares the machine.
    """
    steps = samples // (p * batch_size)
    kappa = contention if p > 1 else 1.0
    compute = compute_time_per_rank(step_time_1_s * kappa, p, "weak", cores)
    comm = sum(ring_allreduce_time(n, p, alpha_s, beta_s_per_byte) for n in messages)
    return {"np": p, "steps": steps, "compute_s": compute, "comm_s": comm,
            "epoch_time_s": steps * (compute + comm)}


def fit_step_model(metrics_1: Sequence[Mapping], metrics_2: Sequence[Mapping],
                   messages: Sequence[float], beta_s_per_byte: float) -> dict:
    """Fit κ and the effective α from an np=1 and an np=2 run of the same job.

    κ = compute(np=2) / compute(np=1) (medians of the steps' compute times); the np=2 step
    time (epoch time ÷ steps) left after κ × step(1) is the synchronization the step waits
    for, = Σ over messages (2(p−1)·α + 2(p−1)/p·n·β) at p=2, which is solved for α (clipped
    at 0).
    """
    step_1, step_2 = mean_step_time(metrics_1), mean_step_time(metrics_2)
    kappa = max(1.0, median_step_time(metrics_2, field="compute_s")
                / median_step_time(metrics_1, field="compute_s"))
    sync_2 = max(0.0, step_2 - kappa * step_1)
    bandwidth = sum(ring_allreduce_time(n, 2, 0.0, beta_s_per_byte) for n in messages)
    alpha = max(0.0, (sync_2 - bandwidth) / (len(messages) * 2 * (2 - 1)))
    return {"step_time_1_s": step_1, "step_time_2_s": step_2, "contention": kappa,
            "alpha_fit_s": alpha}


def run_calibration(base: JobConfig, alpha_s: float, beta_s_per_byte: float,
                    workers: Sequence[int] = (2, 3), cores: int | None = None,
                    timeout_s: float = 300.0) -> dict:
    """Run ``base`` at np=1 and np=2 to calibrate, and at each of ``workers``; compare.

    ``alpha_s`` is the benchmark's α, reported beside the fitted one; predictions use the
    α fitted by :func:`fit_step_model` and ``beta_s_per_byte``.
    Returns ``{"step_time_1_s", "contention", "alpha_fit_s", "gradient_bytes", "messages",
    "message_sizes", "cores", "rows": [...]}``;
    each row has ``np, predicted_s, measured_s, error`` (error = predicted ÷ measured − 1)
    and the same against :func:`steady_epoch_time` (``steady_measured_s, steady_error``),
    which a busy shared machine disturbs less.
    """
    import workbench

    cores = cores or cpu_budget().usable  # what this host really gives the ranks
    base = replace(base, threads_per_rank=base.threads_per_rank or 1)
    messages = message_bytes(base.engine, tensor_bytes(base))
    measured: dict[int, list] = {}
    for p in sorted({1, 2, *workers}):
        job = workbench.start(replace(base, np=p))
        if job.wait(timeout_s) != "succeeded":
            job.stop()
            raise RuntimeError(f"calibration run at np={p} {job.status}: see {job.run_dir}")
        measured[p] = job.metrics()
    fit = fit_step_model(measured[1], measured[2], messages, beta_s_per_byte)
    rows = []
    for p in workers:
        pred = predict_epoch_time(p, base.samples, base.batch_size, fit["step_time_1_s"],
                                  messages, fit["alpha_fit_s"], beta_s_per_byte, cores,
                                  fit["contention"])
        real, steady = epoch_time(measured[p]), steady_epoch_time(measured[p])
        rows.append({**pred, "predicted_s": pred["epoch_time_s"], "measured_s": real,
                     "error": pred["epoch_time_s"] / real - 1.0,
                     "steady_measured_s": steady,
                     "steady_error": pred["epoch_time_s"] / steady - 1.0})
    return {**fit, "alpha_bench_s": alpha_s, "gradient_bytes": sum(messages),
            "messages": len(messages), "message_sizes": messages, "cores": cores, "rows": rows}
