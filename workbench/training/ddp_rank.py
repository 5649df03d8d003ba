"""One rank of a PyTorch DistributedDataParallel job (launched by `torchrun`).

The same steps as the Horovod rank, in PyTorch's words (Li et al., VLDB 2020,
arXiv:2006.15704):

1. `dist.init_process_group`: join the job (gloo on CPU, NCCL on GPUs).
2. Pin the device: one GPU per local rank, or this rank's share of the CPU cores.
3-4. Wrap the model in `DistributedDataParallel`: its constructor broadcasts rank 0's
   parameters, and during `backward()` it averages gradients with allreduce, bucket by
   bucket (25 MB buckets by default), overlapping communication with the backward pass.
5. Shard the data: each rank trains on its own slice of every global batch.

A communication hook times each bucket's allreduce, so a step can be split into time
computing and time blocked on synchronization.
"""

from __future__ import annotations

import datetime
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench.models import make_optimizer
from workbench.training.loop import Synchronizer, build, finish, pick_device, pin_cpu, train
from workbench.training.reporter import RankContext


class DDPSync(Synchronizer):
    """Times DDP's bucket allreduces through a communication hook."""

    def __init__(self) -> None:
        self.launched: list[float] = []
        self.completed: list[float] = []

    def begin_step(self) -> None:
        self.launched.clear()
        self.completed.clear()

    def hook(self, _state, bucket):  # no annotations: DDP checks them, and ours are strings
        """Average one bucket (a dist.GradBucket) of gradients, as DDP does, noting when."""
        self.launched.append(time.perf_counter())
        tensor = bucket.buffer().div_(dist.get_world_size())
        fut = dist.all_reduce(tensor, async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            self.completed.append(time.perf_counter())
            return f.value()[0]

        return fut.then(done)

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(values)  # in place, summing: what DDP's hook does, before dividing
        return values

    def backward_wait_s(self) -> float:
        """Time from the last bucket's launch (compute done) to the last allreduce's end."""
        if not self.launched or not self.completed:
            return 0.0
        return max(0.0, max(self.completed) - max(self.launched))


def main() -> None:
    with RankContext.from_env() as ctx:
        cfg = ctx.config

        # Step 1: join the process group.
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=cfg.stall_timeout))
        ctx.metric("event", message="init")  # joined the job: every rank can now talk

        # Step 2: pin this rank to its device and its share of the CPU cores.
        device = pick_device(ctx.local_rank)
        pin_cpu(cfg, ctx.local_rank)
        setup = build(cfg, device)

        # Steps 3-4: DDP broadcasts rank 0's parameters and averages gradients in backward().
        sync = DDPSync()
        ddp_model = DDP(setup.model, device_ids=[device.index] if device.type == "cuda" else None)
        ddp_model.register_comm_hook(None, sync.hook)
        optimizer = make_optimizer(cfg.optimizer, ddp_model.parameters(), cfg.lr,
                                   cfg.momentum, cfg.weight_decay)

        # Step 5: train on this rank's shards (the loop calls ddp_model through setup.model).
        setup.model = ddp_model
        held_out = train(ctx, setup, optimizer, sync)
        finish(ctx, setup, sync, held_out)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
