"""torchrun --standalone --nproc-per-node 2 -m workbench.training.ddp_rank

One rank of a PyTorch DistributedDataParallel job: `workbench run --engine torch` starts it
with `torchrun`, or run it by hand as above, with any flag of `workbench run`. The Horovod
rank's steps in PyTorch's words (Li et al., VLDB 2020, arXiv:2006.15704): 1. `join` the
process group; 2. pin the device; 3-4. wrap the model in `DistributedDataParallel`, which
broadcasts rank 0's parameters and averages gradients bucket by bucket during `backward()`;
5. shard the data. `DDPSync` times what `backward()` waits for (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench.config import JobConfig
from workbench.models import make_optimizer
from workbench.rank.context import from_rank0, job_config, job_record, run_main
from workbench.rank.protocol import launcher_identity
from workbench.sharded.memory import Footprint
from workbench.sharded.traffic import SENDS
from workbench.training.loop import train
from workbench.training.results import evaluate_and_save, restore
from workbench.training.setup import build, pick_device, pin_cpu
from workbench.training.synchronizer import Synchronizer
from workbench.training.timing import CudaClock, WallClock


class DDPSync(Synchronizer):
    """DDP's own reducer averages the gradients (in C++, bucket by bucket, during
    `backward()`); this times the wait it leaves, from the backward pass's last gradient to
    `backward()`'s return (how: docs/ARCHITECTURE.md), and counts the bytes it all-reduces."""

    def __init__(self, model: nn.Module, clock: WallClock | CudaClock, compress: bool) -> None:
        self.clock, self.world = clock, dist.get_world_size()
        params = [p for p in model.parameters() if p.requires_grad]
        self.bytes = sum(p.numel() * (2 if compress else p.element_size()) for p in params)
        self.ready: Any = None          # a clock mark: the backward pass's last gradient
        self.returned: Any = None       # a clock mark: backward() returned
        self.left = 0                   # gradients this backward pass has still to compute
        self.hooks = {p: p.register_post_accumulate_grad_hook(self._accumulated) for p in params}

    def _accumulated(self, param: torch.Tensor) -> None:
        self.left -= 1
        if self.left == 0:
            self.ready = self.clock.mark()
            for other in [p for p in self.hooks if p is not param]:  # once: the last is known
                self.hooks.pop(other).remove()

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(values)  # in place, summing: what DDP's hook does, before dividing
        return values

    def accumulating(self, model: DDP, last: bool) -> AbstractContextManager[Any]:
        """`no_sync()` on all but the last micro-batch: DDP then only accumulates; the last
        one's backward pass is timed, by this synchronizer as its context."""
        return self if last else model.no_sync()

    def __enter__(self) -> None:
        self.left, self.ready = len(self.hooks), None

    def __exit__(self, *exc: object) -> None:
        self.returned = self.clock.mark()

    def sent_bytes(self) -> int:
        """What a ring all-reduce of the gradients sends from this rank (traffic.py)."""
        return round(SENDS["all_reduce"][3](self.world) * self.bytes)

    def backward_wait_s(self) -> Callable[[], float]:
        """The marks are taken now, read later (once settled, on a GPU)."""
        ready, returned = self.ready, self.returned
        return lambda: self.clock.seconds(ready, returned) if ready is not None else 0.0


def bf16_hook(_state, bucket):  # no annotations: DDP checks them, and ours are strings
    """What torch's `bf16_compress_hook` does, which it allows on NCCL only: each bucket of
    gradients (a dist.GradBucket) averaged in bf16, half the bytes, then cast back."""
    buffer = bucket.buffer()
    sent = buffer.to(torch.bfloat16).div_(dist.get_world_size())
    fut = dist.all_reduce(sent, async_op=True).get_future()
    return fut.then(lambda f: buffer.copy_(f.value()[0]))


def join(cfg: JobConfig, local_rank: int) -> torch.device:
    """Take this rank's device, then join the process group: gloo on CPUs, NCCL on GPUs,
    told our GPU (`device_id=`) so that an error shows here, not at the first allreduce."""
    device = pick_device(cfg.device, local_rank)
    gpu = device.type == "cuda"
    dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None,
                            timeout=datetime.timedelta(seconds=cfg.stall_timeout))
    return device


def main() -> None:
    cfg = job_config("torch")  # the launcher's config.json, or `workbench run`'s flags
    local_rank = launcher_identity()[2]  # this rank's number on its host (LOCAL_RANK)

    # Step 1: take this rank's device (a GPU, or CPU cores), then join the process group.
    device = join(cfg, local_rank)
    ctx = job_record(cfg, share=from_rank0)  # the run's record: the launcher's, or a new one
    ctx.metric("event", message="init")  # joined the job: every rank can now talk

    # Step 2: pin this rank to its share of the CPU cores.
    pin_cpu(cfg, local_rank)
    setup = build(cfg, device)

    # Steps 3-4: DDP broadcasts rank 0's parameters and averages gradients in backward().
    sync = DDPSync(setup.model, setup.clock, compress=cfg.grad_compression == "bf16")
    setup.model = DDP(setup.model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.grad_compression == "bf16":  # each bucket sent in bf16: half the bytes
        setup.model.register_comm_hook(None, bf16_hook)
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr,
                               cfg.momentum, cfg.weight_decay)
    setup.first_epoch = restore(ctx, setup.module, optimizer)  # 0 unless resuming

    # Step 5: train on this rank's shards.
    sync.measure = Footprint(setup.module, optimizer, sync.sent_bytes)
    held_out = train(ctx, setup, optimizer, sync)
    evaluate_and_save(ctx, setup, sync, held_out)
    # DDP goes before its group: freed after, its reducer would destroy the group holding the
    # GIL while gloo's thread may wait for it (pytorch/pytorch#56297), and the rank would hang.
    setup.model = None
    dist.destroy_process_group()


if __name__ == "__main__":
    run_main(main)
