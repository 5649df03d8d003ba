"""torchrun --standalone --nproc-per-node 2 -m workbench.training.naive_rank

One rank of a naive data-parallel job: `workbench run --engine naive` starts it with
`torchrun`, or run it by hand as above, with any flag of `workbench run`. Notebook 04's ring
allreduce on each gradient once `backward()` has returned, and nothing else (like picotron's
`DataParallelNaive`). Exact, and slower than DDP and Horovod: no overlap, no buckets, one
Python message at a time (docs/ARCHITECTURE.md); CPUs only, over gloo.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from workbench.models import make_optimizer
from workbench.rank.context import from_rank0, job_config, job_record, run_main
from workbench.synchronization.ring_allreduce import dist_ring_allreduce
from workbench.training.loop import train
from workbench.training.results import evaluate_and_save, restore
from workbench.training.setup import build, pin_cpu
from workbench.training.synchronizer import Synchronizer


class NaiveSync(Synchronizer):
    """Average every gradient with our own ring allreduce, one tensor at a time, after the
    backward pass. Every rank walks the optimizer's parameters in the same order (its groups
    are built alike on every rank), so the k-th ring of one rank meets the k-th of the others."""

    def wait_for_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        self.bytes = 0  # all-reduced in this step
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    dist_ring_allreduce(param.grad)           # the sum over the ranks, in place
                    param.grad.div_(dist.get_world_size())    # ... and the mean
                    self.bytes += param.grad.numel() * param.grad.element_size()

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        return dist_ring_allreduce(values)


def broadcast_parameters(model: torch.nn.Module) -> None:
    """Start every replica from rank 0's parameters and buffers, as DDP's constructor does."""
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=0)


def main() -> None:
    cfg = job_config("naive")  # the launcher's config.json, or `workbench run`'s flags

    # Step 1: join the process group. gloo's isend returns at once, so every rank can
    # send before it receives, as the ring needs.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=cfg.stall_timeout))
    ctx = job_record(cfg, share=from_rank0)  # the run's record: the launcher's, or a new one
    ctx.metric("event", message="init")  # joined the job: every rank can now talk

    # Step 2: pin this rank to its share of the CPU cores.
    pin_cpu(cfg, ctx.local_rank)
    setup = build(cfg, torch.device("cpu"))

    # Step 3: every replica starts from rank 0's parameters.
    broadcast_parameters(setup.model)
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr,
                               cfg.momentum, cfg.weight_decay)
    setup.first_epoch = restore(ctx, setup.model, optimizer)  # 0 unless resuming

    # Step 4: train on this rank's shards; NaiveSync averages the gradients after backward().
    sync = NaiveSync()
    held_out = train(ctx, setup, optimizer, sync)
    evaluate_and_save(ctx, setup, sync, held_out)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_main(main)
