"""The training loop every rank runs, whatever the engine.

The engines differ only in how gradients are synchronized, so that part is one small
object with two methods (`begin_step`, `finish_step`); the loop itself is plain SGD:

    for each step: take my shard -> forward -> loss -> backward -> synchronize -> update

Each step records how long it spent *computing* (forward + backward) and how long it
then waited for gradient *synchronization* that was not hidden behind the backward pass.
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
from workbench.training.sharding import epoch_order, shard, steps_per_epoch


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


@dataclass
class Setup:
    """What a rank builds before training: data, model and the device they live on."""

    data: Dataset
    model: nn.Module
    device: torch.device


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
    return Setup(data, model.to(device=device, dtype=dtype), device)


def _sync_clock(device: torch.device) -> float:
    """Wall time in seconds, after waiting for queued GPU work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def train(ctx: RankContext, setup: Setup, optimizer: torch.optim.Optimizer,
          sync: Synchronizer) -> None:
    """Run `cfg.epochs` epochs of synchronous data-parallel SGD on this rank's shards."""
    cfg, data, model, device = ctx.config, setup.data, setup.model, setup.device
    steps = steps_per_epoch(len(data), ctx.size, cfg.batch_size)
    if steps == 0:
        raise ValueError(f"{len(data)} samples are fewer than one global batch of "
                         f"{ctx.size} ranks x {cfg.batch_size}: lower --batch-size or --np")
    if cfg.max_steps:
        steps = min(steps, cfg.max_steps)
    loss_fn = nn.CrossEntropyLoss()  # mean over the batch: the invariant needs the mean
    ctx.metric("event", message="ready", steps_per_epoch=steps, epochs=cfg.epochs,
               device=str(device), threads=torch.get_num_threads(), cores=allowed_cores())
    for epoch in range(cfg.epochs):
        order = epoch_order(len(data), cfg.seed, epoch)
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
        elapsed = time.perf_counter() - epoch_start
        ctx.metric("epoch", epoch=epoch, loss=loss_sum / steps,
                   accuracy=correct / (steps * cfg.batch_size), samples=steps * cfg.batch_size,
                   epoch_time_s=elapsed, samples_per_s=steps * cfg.batch_size / elapsed)


def finish(ctx: RankContext, setup: Setup, state_model: nn.Module) -> None:
    """Rank 0 evaluates `state_model` on the whole dataset; saves model.pt and result.json."""
    if ctx.rank != 0:
        return
    model, data = state_model, setup.data
    with torch.no_grad():
        out = model(data.x.to(setup.device))
        y = data.y.to(setup.device)
        loss = float(nn.functional.cross_entropy(out, y))
        acc = float((out.argmax(1) == y).float().mean())
    tmp = ctx.run_dir / "model.pt.tmp"
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)
    tmp.replace(ctx.run_dir / "model.pt")
    ctx.write_result({"final_loss": loss, "final_accuracy": acc})
