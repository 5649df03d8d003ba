"""The training loop every rank runs, whatever the engine.

The engines differ only in how gradients are synchronized, so that part is one small
object (a `Synchronizer`) given the optimizer; the step itself is plain SGD, the whole of
it in `train_step` (the labs' additions, a fault, a warm-up, a straggler, are lab_hooks.py):

    zero_grad -> forward -> loss -> backward -> wait for the averaged gradients -> step

With gradient accumulation (`accumulate` k > 1) forward, loss and backward run on k
micro-batches of `batch_size` in turn, each loss divided by k, so the gradients add up to
those of one batch of k·b; only the last backward pass synchronizes (DDP's `no_sync()`,
Horovod's `backward_passes_per_step`), so a step all-reduces the gradients once: k times
fewer bytes per sample.

Where the averaging happens is the engine's business: DDP averages bucket by bucket *during*
`backward()`, Horovod's wrapped optimizer starts an allreduce per gradient during
`backward()` and `synchronize()` waits for them, the naive engine averages one gradient
after another only once `backward()` has returned. A `StepTimer` marks the clock between
these lines; the metrics are written after the step.

Each step records how long it spent *computing* (forward + backward) and how long it
then waited for gradient *synchronization* that was not hidden behind the backward pass
(timing.py: the wall clock on CPUs, CUDA events on a GPU).

Evaluation uses samples training never sees (`holdout_split`). Every rank evaluates its
own slice of them, one batch at a time (a forward pass over the whole set at once would
hold every activation in memory together), and the ranks then add up their loss sums and
counts with one allreduce, so all ranks learn the same held-out loss and accuracy.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.config import JobConfig
from workbench.data import Dataset, load_dataset
from workbench.models import build_model
from workbench.training.checkpoint import save
from workbench.training.lab_hooks import LabHooks
from workbench.training.placement import allowed_cores
from workbench.training.reporter import RankContext
from workbench.training.sharding import (
    epoch_order,
    eval_shard,
    holdout_split,
    shard,
    steps_per_epoch,
)
from workbench.training.timing import CudaClock, StepTimer, WallClock, clock_for


class Synchronizer:
    """No synchronization: the serial engine. Each engine overrides what it needs.

    Every method is given the optimizer the loop steps with, so a synchronizer holds no
    optimizer of its own.
    """

    def wait_for_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Return once every gradient of `optimizer`'s parameters is averaged over the ranks
        (nothing to do here: one rank's gradients are already the average)."""

    def stepping(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[Any]:
        """The context `optimizer.step()` runs in (Horovod: skip a second allreduce)."""
        return nullcontext()

    def backward_wait_s(self) -> float:
        """Seconds the last backward pass itself was blocked on communication (DDP), else 0.

        Read after the loop has settled the step's clock, because on a GPU the marks are
        CUDA events that complete only when the GPU gets there.
        """
        return 0.0

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over every rank (one rank: itself). Every rank must call it."""
        return values

    def accumulating(self, model: nn.Module, last: bool) -> AbstractContextManager[Any]:
        """The context of one micro-batch's forward and backward; `last`: the step's last
        (DDP: `no_sync()` on the others, so only the last backward all-reduces)."""
        return nullcontext()

    def synced_bytes(self) -> int | None:
        """Bytes of gradients this rank all-reduced in the last step, where the engine counts."""
        return None
    #: Measures what the rank holds and sends (workbench/sharded/memory.py's `Footprint`),
    #: where the engine sets one: its figures join every "step" line.
    measure: Callable[[], dict[str, int]] | None = None

    def footprint(self) -> dict[str, int]:
        """Bytes held in parameters, gradients, optimizer state, and sent since the last step."""
        return self.measure() if self.measure else {}


@dataclass
class Setup:
    """What a rank builds before training: data, model, the device they live on and the
    clock that times them.

    `data` holds every sample once; `train_idx` and `val_idx` say which samples are trained
    on and which are held out, so splitting costs no copy of the data.
    """

    data: Dataset
    model: nn.Module
    device: torch.device
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    first_epoch: int = 0  # later than 0 when resuming from a checkpoint
    clock: WallClock | CudaClock = field(default_factory=WallClock)

    @property
    def module(self) -> nn.Module:
        """The model itself, unwrapped from DistributedDataParallel where it is wrapped."""
        return getattr(self.model, "module", self.model)


#: A dataset smaller than this share of the GPU's memory is copied onto the GPU once, so a
#: step gathers its batch there and nothing crosses PCIe while training.
ON_GPU_MAX_SHARE = 0.25


class Batches:
    """Gathers this rank's batch (sample indices -> inputs, labels) on the training device.

    On the CPU it is plain indexing, as before. On a GPU a small dataset lives on the GPU;
    a large one stays in host memory, and each batch is gathered into a page-locked
    ("pinned") buffer, from which the copy to the GPU runs asynchronously (`non_blocking`):
    from ordinary pageable memory CUDA would first copy it to a pinned buffer itself, and
    the host would wait. One buffer is enough: the loop waits for each step's last kernel.
    """

    def __init__(self, data: Dataset, device: torch.device) -> None:
        self.device, self.x, self.y = device, data.x, data.y
        self.pinned: tuple[torch.Tensor, torch.Tensor] | None = None
        if device.type != "cuda":
            return
        size = self.x.nbytes + self.y.nbytes
        if size <= ON_GPU_MAX_SHARE * torch.cuda.get_device_properties(device).total_memory:
            self.x, self.y = self.x.to(device), self.y.to(device)

    def __call__(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.x.device == self.device:     # the CPU, or a dataset that lives on the GPU
            idx = idx.to(self.device)
            return self.x[idx], self.y[idx]
        n = len(idx)
        if self.pinned is None or len(self.pinned[1]) != n:
            self.pinned = (torch.empty((n, *self.x.shape[1:]), dtype=self.x.dtype).pin_memory(),
                           torch.empty(n, dtype=self.y.dtype).pin_memory())
        torch.index_select(self.x, 0, idx, out=self.pinned[0])
        torch.index_select(self.y, 0, idx, out=self.pinned[1])
        return (self.pinned[0].to(self.device, non_blocking=True),
                self.pinned[1].to(self.device, non_blocking=True))


def data_cache_dir(cfg: JobConfig) -> Path:
    """Where the ranks of this host share their prepared dataset: runs/.cache/<host>/.
    Named by host, because a runs folder on a shared file system serves several hosts."""
    return Path(cfg.runs_dir).expanduser().resolve() / ".cache" / socket.gethostname()


def build(cfg: JobConfig, device: torch.device) -> Setup:
    """Load the data and build the model with the job's seed, identically on every rank."""
    dtype = getattr(torch, cfg.dtype)
    data = load_dataset(cfg.dataset, samples=cfg.samples, features=cfg.features,
                        seed=cfg.seed, dtype=dtype, cache_dir=data_cache_dir(cfg))
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, tuple(data.x.shape[1:]), data.n_classes, cfg.width)
    train_idx, val_idx = holdout_split(len(data), cfg.seed, cfg.val_fraction)
    return Setup(data, model.to(device=device, dtype=dtype), device, train_idx, val_idx,
                 clock=clock_for(device))


def train(ctx: RankContext, setup: Setup, optimizer: torch.optim.Optimizer,
          sync: Synchronizer) -> dict[str, float] | None:
    """Run `cfg.epochs` epochs of synchronous data-parallel SGD on this rank's shards.

    Returns the held-out metrics of the last epoch if that epoch was evaluated, else None.
    """
    cfg, model = ctx.config, setup.model
    k, b = cfg.accumulate, cfg.batch_size   # k micro-batches of b samples per step
    batches, n_train = Batches(setup.data, setup.device), len(setup.train_idx)
    steps = steps_to_run(ctx, n_train)
    lab = LabHooks(cfg, ctx.rank, ctx.size, steps, optimizer)
    announce_ready(ctx, setup, steps)
    timer, held_out = StepTimer(setup.clock), None
    for epoch in range(setup.first_epoch, cfg.epochs):
        order = setup.train_idx[epoch_order(n_train, cfg.seed, epoch)]
        epoch_start, loss_sum, correct = time.perf_counter(), 0.0, 0
        for step in range(steps):
            global_step = epoch * steps + step
            lab.before_step(global_step)         # a fault on purpose, a warm-up's rate
            x, y = batches(shard(order, step, ctx.rank, ctx.size, k * b))
            out, loss = train_step(model, optimizer, sync, x, y, k, b, timer,
                                   lambda: autocast(cfg, setup.device), lab.after_backward)
            hits, step_loss = int((out.argmax(1) == y).sum()), loss.item()
            loss_sum, correct = loss_sum + step_loss, correct + hits
            synced = sync.synced_bytes()
            ctx.metric("step", epoch=epoch, step=global_step, loss=step_loss,
                       accuracy=hits / len(y), samples=len(y),
                       **({} if synced is None else {"synced_bytes": synced}),
                       **timer.split(sync.backward_wait_s), **sync.footprint())
        elapsed = time.perf_counter() - epoch_start  # training only: evaluation comes after
        held_out = end_epoch(ctx, setup, sync, optimizer, epoch, steps,
                             {"loss": loss_sum / steps, "correct": correct, "seconds": elapsed})
    return held_out


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, sync: Synchronizer,
               xs: torch.Tensor, ys: torch.Tensor, k: int, b: int, timer: StepTimer,
               precision: Callable[[], AbstractContextManager[Any]],
               after_backward: Callable[[], None]) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of synchronous data-parallel SGD, the whole of it, on this rank's k·b
    samples `xs`, `ys` (k micro-batches of b); returns (the outputs, the loss).

    The timer marks the end of the backward passes (compute), of the wait for the averaged
    gradients (synchronization not hidden behind backward) and of the update.
    """
    loss_fn = nn.CrossEntropyLoss()      # mean over the batch: the invariant needs the mean
    timer.start()
    optimizer.zero_grad()
    outs, losses = [], []
    for micro in range(k):               # k micro-batches of b: gradients add up
        x, y = xs[micro * b:(micro + 1) * b], ys[micro * b:(micro + 1) * b]
        with sync.accumulating(model, last=micro == k - 1):
            with precision():            # bf16 where --precision bf16
                out = model(x)           # forward
                loss = loss_fn(out, y) / k  # the mean over the k·b samples
            loss.backward()              # DDP averages gradients during the last
        outs.append(out.detach())
        losses.append(loss.detach())
    after_backward()                     # (a straggler lab's slow rank computes longer)
    timer.mark()
    sync.wait_for_gradients(optimizer)   # Horovod, naive: the averages arrive here
    timer.mark()
    with sync.stepping(optimizer):
        optimizer.step()                 # the same update on every rank
    timer.mark()
    return torch.cat(outs), torch.stack(losses).sum()


def autocast(cfg: JobConfig, device: torch.device) -> AbstractContextManager[Any]:
    """bfloat16 autocast for `precision="bf16"` (matrix products in bf16, the parameters
    kept in float32), else nothing. bf16 has float32's exponent range, so unlike fp16 it
    needs no loss scaling (Micikevicius et al., "Mixed Precision Training", ICLR 2018,
    scale fp16 losses so that small gradients do not underflow)."""
    if cfg.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def steps_to_run(ctx: RankContext, n_train: int) -> int:
    """Steps per epoch: every rank takes the same number (see sharding.py), at most
    `max_steps`."""
    cfg = ctx.config
    steps = steps_per_epoch(n_train, ctx.size, cfg.batch_size * cfg.accumulate)
    if steps == 0:
        raise ValueError(f"{n_train} training samples are fewer than one global batch of "
                         f"{ctx.size} ranks x {cfg.accumulate} micro-batches x "
                         f"{cfg.batch_size}: lower --batch-size, --accumulate or --np")
    return min(steps, cfg.max_steps) if cfg.max_steps else steps


def announce_ready(ctx: RankContext, setup: Setup, steps: int) -> None:
    """The "ready" event: training starts, and what it runs on (see ARCHITECTURE.md)."""
    ctx.metric("event", message="ready", steps_per_epoch=steps, epochs=ctx.config.epochs,
               device=str(setup.device), timing=setup.clock.what,
               threads=torch.get_num_threads(), cores=allowed_cores(),
               train_samples=len(setup.train_idx), val_samples=len(setup.val_idx),
               cuda_initialized=torch.cuda.is_initialized(),
               cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))


def end_epoch(ctx: RankContext, setup: Setup, sync: Synchronizer,
              optimizer: torch.optim.Optimizer, epoch: int, steps: int,
              trained: dict[str, float]) -> dict[str, float] | None:
    """Evaluate when due, write the "epoch" line and checkpoint when due.

    `trained` holds the epoch's mean training `loss`, its `correct` count and its
    training time in `seconds`. Returns the held-out metrics if this epoch was evaluated.
    """
    cfg, samples = ctx.config, steps * ctx.config.batch_size * ctx.config.accumulate
    held_out = None
    if cfg.eval_every and (epoch + 1) % cfg.eval_every == 0:
        held_out = evaluate(ctx, setup, sync)
    ctx.metric("epoch", epoch=epoch, loss=trained["loss"],
               accuracy=trained["correct"] / samples, samples=samples,
               epoch_time_s=trained["seconds"], samples_per_s=samples / trained["seconds"],
               **(held_out or {}))
    if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
        save(ctx, setup.module, optimizer, epoch + 1, (epoch + 1) * steps)
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
    state = full_state(setup.module)  # every rank: gathering sharded parameters is collective
    if ctx.rank != 0:
        return
    tmp = ctx.run_dir / "model.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(ctx.run_dir / "model.pt")
    ctx.write_result({"final_loss": held_out["val_loss"],
                      "final_accuracy": held_out["val_accuracy"],
                      "val_samples": len(setup.val_idx)})


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole state_dict on the CPU. A parameter sharded between the ranks (a
    DTensor, as FSDP2 keeps them) is all-gathered first, so every rank must call this."""
    # Imported only where it is already loaded (FSDP2 loads it): its import takes seconds.
    dtensor = sys.modules.get("torch.distributed.tensor")
    state = {}
    for name, value in model.state_dict().items():
        if dtensor is not None and isinstance(value, dtensor.DTensor):
            value = value.full_tensor()
        state[name] = value.detach().cpu()
    return state
