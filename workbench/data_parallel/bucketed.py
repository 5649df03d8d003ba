"""torchrun --standalone --nproc-per-node 2 -m workbench.data_parallel.bucketed

One rank of a bucketed data-parallel job (`workbench run --engine bucketed`), or started
by hand as above with any flag of `workbench run` (`--bucket-mb 1`, `--accumulate 4`).

The naive engine's step with one change: once `backward()` has returned, the gradients
are packed into buckets of `bucket_mb` MiB (buckets.py) and each bucket is all-reduced as
one flat tensor (gloo's ring, `dist.all_reduce`), then unpacked and divided by the number
of ranks. A model of L layers costs L·2 all-reduces in the naive engine and
⌈gradient bytes / bucket_mb⌉ here, so the latency term 2(p−1)·α is paid per bucket, not per
tensor. Communication still starts only after the whole backward pass: overlapped.py
removes that. `--bucket-mb 0` all-reduces each tensor alone, with gloo: beside the naive
engine, it separates what the buckets buy from what gloo's C++ ring buys over our Python one.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

import torch
import torch.distributed as dist

from workbench.data_parallel.buckets import Bucket, make_buckets
from workbench.models import make_optimizer
from workbench.rank.context import from_rank0, job_config, job_record, run_main
from workbench.training.loop import train
from workbench.training.naive_rank import broadcast_parameters
from workbench.training.results import evaluate_and_save, restore
from workbench.training.setup import build, pin_cpu
from workbench.training.synchronizer import Synchronizer


class BucketedSync(Synchronizer):
    """All-reduce the gradients bucket by bucket, after the backward pass."""

    def __init__(self, model: torch.nn.Module, size: int, bucket_mb: float) -> None:
        self.size = size
        self.buckets: list[Bucket] = make_buckets(list(model.parameters()), bucket_mb)
        self.sent = 0  # bytes all-reduced by this rank in the last step

    def wait_for_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        self.sent = 0
        for bucket in self.buckets:
            dist.all_reduce(bucket.pack())   # the sum over the ranks, in place
            bucket.unpack(self.size)         # ... and the mean
            self.sent += bucket.nbytes

    def synced_bytes(self) -> int | None:
        return self.sent

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(values)
        return values


def run(engine: str, make_sync: Callable[[torch.nn.Module, int, float], Synchronizer]) -> None:
    """The rank's steps, those of the naive rank, with the synchronizer that
    `make_sync(model, ranks, bucket_mb)` builds."""
    cfg = job_config(engine)  # the launcher's config.json, or `workbench run`'s flags
    # Step 1: join the process group (gloo), then pin this rank to its cores.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=cfg.stall_timeout))
    ctx = job_record(cfg, share=from_rank0)  # the run's record: the launcher's, or a new one
    ctx.metric("event", message="init")
    pin_cpu(cfg, ctx.local_rank)
    setup = build(cfg, torch.device("cpu"))
    # Step 2: every replica starts from rank 0's parameters.
    broadcast_parameters(setup.model)
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr,
                               cfg.momentum, cfg.weight_decay)
    setup.first_epoch = restore(ctx, setup.model, optimizer)
    # Step 3: train; the synchronizer averages the gradients, bucket by bucket.
    sync = make_sync(setup.model, ctx.size, cfg.bucket_mb)
    held_out = train(ctx, setup, optimizer, sync)
    evaluate_and_save(ctx, setup, sync, held_out)
    dist.destroy_process_group()


def main() -> None:
    run("bucketed", BucketedSync)


if __name__ == "__main__":
    run_main(main)
