"""The training loop every rank runs, whatever the engine.

The engines differ only in how gradients are synchronized, so that part is one small
object with two methods (`begin_step`, `finish_step`); the loop itself is plain SGD:

    for each step: take my shard -> forward -> loss -> backward -> synchronize -> update

Each step records how long it spent *computing* (forward + backward) and how long it
then waited for gradient *synchronization* that was not hidden behind the backward pass.

Evaluation uses samples training never sees (`holdout_split`). Every rank evaluates its
own slice of them, one batch at a time (a forward pass over the whole set at once would
hold every activation in memory together), and the ranks then add up their loss sums and
counts with one allreduce, so all ranks learn the same held-out loss and accuracy.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from workbench.config import JobConfig
from workbench.data import Dataset, load_dataset
from workbench.hosts.cpu import cpu_budget
from workbench.models import build_model
from workbench.training.reporter import RankContext
from workbench.training.sharding import (
    epoch_order,
    eval_shard,
    holdout_split,
    shard,
    steps_per_epoch,
)


class Synchronizer:
    """No synchronization: the serial engine. Engines override `finish_step`."""

    def begin_step(self) -> None:
        """Called before the forward pass."""

    def finish_step(self, optimizer: torch.optim.Optimizer) -> float:
        """Apply the update; return the seconds spent waiting for gradients (0 here)."""
        optimizer.step()
        return 0.0

    def backward_wait_s(self) -> float:
        """Seconds the backward pass itself was blocked on communication (DDP), else 0."""
        return 0.0

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over every rank (one rank: itself). Every rank must call it."""
        return values


@dataclass
class Setup:
    """What a rank builds before training: data, model and the device they live on.

    `data` holds every sample once; `train_idx` and `val_idx` say which samples are trained
    on and which are held out, so splitting costs no copy of the data.
    """

    data: Dataset
    model: nn.Module
    device: torch.device
    train_idx: torch.Tensor
    val_idx: torch.Tensor

    @property
    def module(self) -> nn.Module:
        """The model itself, unwrapped from DistributedDataParallel where it is wrapped."""
        return getattr(self.model, "module", self.model)


def pick_device(local_rank: int) -> torch.device:
    """One GPU per rank on the same host (ranks share GPUs round-robin), else the CPU."""
    if torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def allowed_cores() -> list[int]:
    """The CPU cores this process may run on: the job's own cores when the launcher
    allocated it some (workbench/jobs/cores.py), else every core of the host."""
    return cpu_budget().cores


def pin_cpu(cfg: JobConfig, local_rank: int) -> None:
    """Give this rank its intra-op threads and, with ``cpu_bind="core"``, its own cores.

    Rank r of a host takes ``threads`` cores starting at r × threads, wrapping around when
    ranks outnumber cores (like ``mpirun --bind-to core``). Why bind: every synchronous step
    waits for the slowest rank, and a rank the kernel moves between cores loses its caches,
    or, on Linux, where each process session is scheduled as one group ("autogroup") and
    `horovodrun` starts every rank in its own session, can wait tens of milliseconds for
    its group's turn on the new core. Every thread of the rank is bound, the engine's
    communication threads started by step 1 included: a group whose threads are spread
    over several cores gets only a sliver of each core's share and can starve for seconds.
    """
    threads = cfg.resolved_threads()
    if cfg.cpu_bind == "core" and cfg.world_size > 1 and hasattr(os, "sched_setaffinity"):
        cores = allowed_cores()
        first = local_rank * threads
        mine = {cores[(first + i) % len(cores)] for i in range(threads)}
        for tid in _thread_ids():
            try:
                os.sched_setaffinity(tid, mine)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
    torch.set_num_threads(threads)


def _thread_ids() -> list[int]:
    """Linux ids of this process's threads (0, the calling thread, where /proc is absent)."""
    tasks = Path("/proc/self/task")
    return [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]


def build(cfg: JobConfig, device: torch.device) -> Setup:
    """Load the data and build the model with the job's seed, identically on every rank."""
    dtype = getattr(torch, cfg.dtype)
    data = load_dataset(cfg.dataset, samples=cfg.samples, features=cfg.features,
                        seed=cfg.seed, dtype=dtype)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, tuple(data.x.shape[1:]), data.n_classes, cfg.width)
    train_idx, val_idx = holdout_split(len(data), cfg.seed, cfg.val_fraction)
    return Setup(data, model.to(device=device, dtype=dtype), device, train_idx, val_idx)


def _sync_clock(device: torch.device) -> float:
    """Wall time in seconds, after waiting for queued GPU work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def train(ctx: RankContext, setup: Setup, optimizer: torch.optim.Optimizer,
          sync: Synchronizer) -> dict[str, float] | None:
    """Run `cfg.epochs` epochs of synchronous data-parallel SGD on this rank's shards.

    Returns the held-out metrics of the last epoch if that epoch was evaluated, else None.
    """
    cfg, data, model, device = ctx.config, setup.data, setup.model, setup.device
    n_train = len(setup.train_idx)
    steps = steps_per_epoch(n_train, ctx.size, cfg.batch_size)
    if steps == 0:
        raise ValueError(f"{n_train} training samples are fewer than one global batch of "
                         f"{ctx.size} ranks x {cfg.batch_size}: lower --batch-size or --np")
    if cfg.max_steps:
        steps = min(steps, cfg.max_steps)
    loss_fn = nn.CrossEntropyLoss()  # mean over the batch: the invariant needs the mean
    ctx.metric("event", message="ready", steps_per_epoch=steps, epochs=cfg.epochs,
               device=str(device), threads=torch.get_num_threads(), cores=allowed_cores(),
               train_samples=n_train, val_samples=len(setup.val_idx))
    held_out = None
    for epoch in range(cfg.epochs):
        order = setup.train_idx[epoch_order(n_train, cfg.seed, epoch)]
        epoch_start, loss_sum, correct = time.perf_counter(), 0.0, 0
        for step in range(steps):
            idx = shard(order, step, ctx.rank, ctx.size, cfg.batch_size)
            x, y = data.x[idx].to(device), data.y[idx].to(device)
            t0 = _sync_clock(device)
            sync.begin_step()
            optimizer.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            if cfg.straggler_delay and ctx.rank == cfg.straggler_rank:
                time.sleep(cfg.straggler_delay)  # a slow worker: every other rank waits for it
            t1 = _sync_clock(device)
            update_wait = sync.finish_step(optimizer)
            t2 = _sync_clock(device)
            backward_wait = min(sync.backward_wait_s(), t1 - t0)
            hits = int((out.argmax(1) == y).sum())
            loss_sum, correct = loss_sum + loss.item(), correct + hits
            ctx.metric("step", epoch=epoch, step=epoch * steps + step, loss=loss.item(),
                       accuracy=hits / len(y), samples=len(y), step_time_s=t2 - t0,
                       compute_s=(t1 - t0) - backward_wait, sync_s=backward_wait + update_wait)
        elapsed = time.perf_counter() - epoch_start  # training only: evaluation comes after
        held_out = None
        if cfg.eval_every and (epoch + 1) % cfg.eval_every == 0:
            held_out = evaluate(ctx, setup, sync)
        ctx.metric("epoch", epoch=epoch, loss=loss_sum / steps,
                   accuracy=correct / (steps * cfg.batch_size), samples=steps * cfg.batch_size,
                   epoch_time_s=elapsed, samples_per_s=steps * cfg.batch_size / elapsed,
                   **(held_out or {}))
    return held_out


def evaluate(ctx: RankContext, setup: Setup, sync: Synchronizer) -> dict[str, float]:
    """Mean loss and accuracy on the held-out samples, computed together by every rank.

    Each rank takes its slice of the held-out samples and runs it through the model in
    batches of `batch_size` (no gradients are kept, so this needs less memory than a
    training step). Sums, not means, are added across ranks, because the slices may differ
    in size by one sample: [loss sum, correct, count] in float64, one allreduce.
    Returns {"val_loss", "val_accuracy"}; every rank must call it, as every rank must join
    an allreduce.
    """
    model, data, device = setup.module, setup.data, setup.device
    mine = eval_shard(setup.val_idx, ctx.rank, ctx.size)
    totals = torch.zeros(3, dtype=torch.float64)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch in mine.split(ctx.config.batch_size):
            x, y = data.x[batch].to(device), data.y[batch].to(device)
            out = model(x)
            totals[0] += float(nn.functional.cross_entropy(out, y, reduction="sum"))
            totals[1] += int((out.argmax(1) == y).sum())
            totals[2] += len(y)
    model.train(was_training)
    loss_sum, correct, count = sync.allreduce_sum(totals.to(device)).cpu().tolist()
    return {"val_loss": loss_sum / count, "val_accuracy": correct / count}


def finish(ctx: RankContext, setup: Setup, sync: Synchronizer,
           held_out: dict[str, float] | None = None) -> None:
    """Evaluate on the held-out samples (unless `train` just did); rank 0 saves the results.

    Every rank must call it: the evaluation is shared. Rank 0 writes model.pt and
    result.json with `final_loss` and `final_accuracy`, both on the held-out samples.
    """
    held_out = held_out or evaluate(ctx, setup, sync)
    if ctx.rank != 0:
        return
    tmp = ctx.run_dir / "model.pt.tmp"
    torch.save({k: v.detach().cpu() for k, v in setup.module.state_dict().items()}, tmp)
    tmp.replace(ctx.run_dir / "model.pt")
    ctx.write_result({"final_loss": held_out["val_loss"],
                      "final_accuracy": held_out["val_accuracy"],
                      "val_samples": len(setup.val_idx)})
