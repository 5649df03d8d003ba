"""The training loop every rank runs, whatever the engine.

    zero_grad -> forward -> loss -> backward -> wait for the averaged gradients -> step

The engines differ only in their `Synchronizer` (synchronizer.py). With `accumulate` k > 1
a step runs k micro-batches, each loss divided by k, and only the last backward pass
synchronizes (docs/ARCHITECTURE.md, "The engines' rank modules").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workbench.config import JobConfig
from workbench.hosts.cpu import cpu_budget
from workbench.rank.protocol import RankContext
from workbench.training.lab_hooks import LabHooks
from workbench.training.results import evaluate, save
from workbench.training.setup import Batches, ModelAndData
from workbench.training.sharding import epoch_order, shard, steps_per_epoch
from workbench.training.synchronizer import Synchronizer
from workbench.training.timing import CudaClock, StepLog, WallClock


def train(ctx: RankContext, setup: ModelAndData, optimizer: torch.optim.Optimizer,
          sync: Synchronizer) -> dict[str, float] | None:
    """Run `cfg.epochs` epochs of synchronous data-parallel SGD on this rank's shards, each
    followed by its "epoch" line, and by the held-out evaluation and the checkpoint when due;
    return the held-out metrics of the last epoch if it was evaluated, else None."""
    cfg, model = ctx.config, setup.model
    k, b = cfg.accumulate, cfg.batch_size   # k micro-batches of b samples per step
    batches, n_train = Batches(setup.data, setup.device), len(setup.train_idx)
    steps = steps_to_run(ctx, n_train)
    lab = LabHooks(cfg, ctx.rank, ctx.size, steps, optimizer)
    ctx.metric("event", message="ready", steps_per_epoch=steps, epochs=cfg.epochs,
               device=str(setup.device), timing=setup.clock.what,
               threads=torch.get_num_threads(), cores=cpu_budget().cores,
               train_samples=n_train, val_samples=len(setup.val_idx),
               cuda_initialized=torch.cuda.is_initialized(),
               cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    log, held_out = StepLog(ctx, setup.clock, sync, steps), None
    precision = autocast(cfg, setup.device)  # entered by every micro-batch
    for epoch in range(setup.first_epoch, cfg.epochs):
        # Where the samples live (on a GPU: one copy an epoch, not one that waits each step).
        order = setup.train_idx[epoch_order(n_train, cfg.seed, epoch)].to(batches.x.device)
        epoch_start = time.perf_counter()
        try:
            for step in range(steps):
                global_step = epoch * steps + step
                lab.before_step(global_step)         # a fault on purpose, a warm-up's rate
                x, y = batches(shard(order, step, ctx.rank, ctx.size, k * b))
                log.add(global_step, y, *train_step(model, optimizer, sync, x, y, k, b,
                                                    setup.clock, precision, lab.after_backward))
        finally:                                     # every step's line, even on a fault
            loss_sum, correct = log.close()
        elapsed = time.perf_counter() - epoch_start  # training only: evaluation comes after
        due = cfg.eval_every and (epoch + 1) % cfg.eval_every == 0
        held_out = evaluate(ctx, setup, sync) if due else None
        samples = steps * k * b                      # this rank's, this epoch
        ctx.metric("epoch", epoch=epoch, loss=loss_sum / steps, accuracy=correct / samples,
                   samples=samples, epoch_time_s=elapsed, samples_per_s=samples / elapsed,
                   **(held_out or {}))
        if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
            save(ctx, setup.module, optimizer, epoch + 1, (epoch + 1) * steps)
    return held_out


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, sync: Synchronizer,
               xs: torch.Tensor, ys: torch.Tensor, k: int, b: int, clock: WallClock | CudaClock,
               precision: AbstractContextManager[Any],
               after_backward: Callable[[], None]) -> tuple[list, list, list]:
    """One step of synchronous data-parallel SGD, the whole of it, on this rank's k·b
    samples `xs`, `ys` (k micro-batches of b); returns the outputs and the losses of the
    micro-batches (the step's loss is their sum) and the clock's marks: the start, the end
    of the backward passes (compute), of the wait for the averaged gradients
    (synchronization not hidden behind backward) and of the update."""
    marks = [clock.mark()]
    optimizer.zero_grad()
    outs, losses = [], []
    # k micro-batches of b, whose gradients add up (one: the batch itself, no views to make)
    micro_batches = zip(xs.split(b), ys.split(b), strict=True) if k > 1 else [(xs, ys)]
    for micro, (x, y) in enumerate(micro_batches):
        with sync.accumulating(model, last=micro == k - 1):
            with precision:              # bf16 where --precision bf16
                out = model(x)           # forward
                loss = F.cross_entropy(out, y)  # the mean over the micro-batch ...
                loss = loss / k if k > 1 else loss  # ... and over the k·b (the invariant's)
            loss.backward()              # DDP averages gradients during the last
        outs.append(out)                 # (kept as they are: backward() has freed what their
        losses.append(loss)              # graph saved, and a detach() each is an operation)
    after_backward()                     # (a straggler lab's slow rank computes longer)
    marks.append(clock.mark())
    sync.wait_for_gradients(optimizer)   # Horovod, naive: the averages arrive here
    marks.append(clock.mark())
    with sync.stepping(optimizer):
        optimizer.step()                 # the same update on every rank
    marks.append(clock.mark())
    return outs, losses, marks


def autocast(cfg: JobConfig, device: torch.device) -> AbstractContextManager[Any]:
    """bfloat16 autocast for `precision="bf16"` (matrix products in bf16, the parameters
    kept in float32), else nothing. bf16 has float32's exponent range, so unlike fp16 it
    needs no loss scaling (Micikevicius et al., "Mixed Precision Training", ICLR 2018,
    scale fp16 losses so that small gradients do not underflow)."""
    if cfg.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def steps_to_run(ctx: RankContext, n_train: int) -> int:
    """Steps per epoch: the same on every rank (sharding.py), at most `max_steps`."""
    cfg = ctx.config
    steps = steps_per_epoch(n_train, ctx.size, cfg.batch_size * cfg.accumulate)
    if steps == 0:
        raise ValueError(f"{n_train} training samples are fewer than one global batch of "
                         f"{ctx.size} ranks x {cfg.accumulate} micro-batches x "
                         f"{cfg.batch_size}: lower --batch-size, --accumulate or --np")
    return min(steps, cfg.max_steps) if cfg.max_steps else steps

