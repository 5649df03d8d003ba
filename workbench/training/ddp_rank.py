"""torchrun --standalone --nproc-per-node 2 -m workbench.training.ddp_rank

One rank of a PyTorch DistributedDataParallel job, started by `torchrun`: by the workbench
(`workbench run --engine torch`), or by hand as above, with any flag of `workbench run`
(`--epochs 1 --batch-size 16`); then the ranks keep their record in ./runs themselves
(rank/context.py), and `workbench show RUN` opens it.

The same steps as the Horovod rank, in PyTorch's words (Li et al., VLDB 2020,
arXiv:2006.15704):

1. `dist.init_process_group`: join the job (gloo on CPU; on GPUs NCCL, told the rank's
   GPU up front with `device_id=`, so the GPU is taken before joining).
2. Pin the device: one GPU per local rank, or this rank's share of the CPU cores.
3-4. Wrap the model in `DistributedDataParallel`: its constructor broadcasts rank 0's
   parameters, and during `backward()` it averages gradients with allreduce, bucket by
   bucket (the first one capped at 1 MiB, the rest at `bucket_cap_mb` = 25 MiB),
   overlapping communication with the backward pass.
5. Shard the data: each rank trains on its own slice of every global batch.

A communication hook (`DDPSync`) times each bucket's allreduce, so a step splits into
computing and time blocked on synchronization. Each step line also gives the bytes this
rank holds and sends (sharded/memory.py, traffic.py), beside the sharded engines' figures.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench.config import JobConfig
from workbench.models import make_optimizer
from workbench.rank.context import from_rank0, job_config, job_record
from workbench.rank.protocol import launcher_identity
from workbench.sharded.memory import Footprint
from workbench.sharded.traffic import Traffic
from workbench.training.checkpoint import restore
from workbench.training.evaluation import evaluate_and_save
from workbench.training.loop import train
from workbench.training.placement import pick_device, pin_cpu
from workbench.training.setup import build
from workbench.training.synchronizer import Synchronizer
from workbench.training.timing import CudaClock, WallClock


class DDPSync(Synchronizer):
    """Times DDP's bucket allreduces through a communication hook.

    Each bucket's allreduce is bracketed by two clock marks: one when DDP hands the bucket
    over (its gradients are computed), one when the averaged bucket is ready. On a GPU the
    marks are CUDA events: the NCCL future completes as soon as the allreduce is *queued*,
    but a mark taken in its `then` callback runs on a stream that waits for the allreduce,
    so it records when the GPU really had the average.
    """

    def __init__(self, clock: WallClock | CudaClock, compress: bool = False) -> None:
        self.clock = clock
        self.compress = compress  # send bf16 gradients, as DDP's bf16_compress_hook
        self.launched: list[Any] = []
        self.completed: list[Any] = []
        self.sent = 0   # bytes handed to allreduce since the last step was read

    def hook(self, _state, bucket):  # no annotations: DDP checks them, and ours are strings
        """Average one bucket (a dist.GradBucket) of gradients, as DDP does, noting when."""
        self.launched.append(self.clock.mark())
        buffer = bucket.buffer()
        sent = buffer.to(torch.bfloat16) if self.compress else buffer  # half the bytes
        self.sent += sent.numel() * sent.element_size()
        fut = dist.all_reduce(sent.div_(dist.get_world_size()), async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            self.completed.append(self.clock.mark())
            return buffer.copy_(f.value()[0]) if self.compress else f.value()[0]

        return fut.then(done)

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(values)  # in place, summing: what DDP's hook does, before dividing
        return values

    def accumulating(self, model: DDP, last: bool) -> AbstractContextManager[Any]:
        """`no_sync()` on all but the last micro-batch: DDP then only accumulates."""
        return nullcontext() if last else model.no_sync()

    def synced_bytes(self) -> int | None:
        sent, self.sent = self.sent, 0
        return sent

    def backward_wait_s(self) -> Callable[[], float]:
        """Time from the last bucket's launch (compute done) to the last allreduce's end
        (DDP launches the buckets in order); the marks are taken now, read later."""
        launched, completed = self.launched, self.completed
        self.launched, self.completed = [], []
        if not launched or not completed:
            return lambda: 0.0
        return lambda: self.clock.settle(completed[-1]) or max(
            0.0, self.clock.seconds(launched[-1], completed[-1]))


def join(cfg: JobConfig, local_rank: int) -> torch.device:
    """Take this rank's device, then join the process group: gloo on CPUs, NCCL on GPUs.
    `device_id=` tells NCCL our GPU now, so it builds its communicator at once (an error
    shows here, not at the first allreduce) and never guesses the GPU."""
    device = pick_device(cfg.device, local_rank)
    timeout = datetime.timedelta(seconds=cfg.stall_timeout)
    if device.type == "cuda":
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    return device


def main() -> None:
    cfg = job_config("torch")  # the launcher's config.json, or `workbench run`'s flags
    local_rank = launcher_identity()[2]  # this rank's number on its host (LOCAL_RANK)
    traffic = Traffic().install()  # counts the bytes the hook's allreduces send

    # Step 1: take this rank's device (a GPU, or CPU cores), then join the process group.
    device = join(cfg, local_rank)
    ctx = job_record(cfg, share=from_rank0)  # the run's record: the launcher's, or a new one
    ctx.metric("event", message="init")  # joined the job: every rank can now talk

    # Step 2: pin this rank to its share of the CPU cores.
    pin_cpu(cfg, local_rank)
    setup = build(cfg, device)

    # Steps 3-4: DDP broadcasts rank 0's parameters and averages gradients in backward().
    sync = DDPSync(setup.clock, compress=cfg.grad_compression == "bf16")
    ddp_model = DDP(setup.model, device_ids=[device.index] if device.type == "cuda" else None)
    ddp_model.register_comm_hook(None, sync.hook)
    optimizer = make_optimizer(cfg.optimizer, ddp_model.parameters(), cfg.lr,
                               cfg.momentum, cfg.weight_decay)
    setup.first_epoch = restore(ctx, setup.model, optimizer)  # 0 unless resuming

    # Step 5: train on this rank's shards (the loop calls ddp_model through setup.model).
    setup.model = ddp_model
    sync.measure = Footprint(setup.module, optimizer, traffic.take)
    traffic.take()  # DDP's start-up broadcast is no step's traffic
    held_out = train(ctx, setup, optimizer, sync)
    evaluate_and_save(ctx, setup, sync, held_out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
