"""horovodrun -np 2 --gloo -H localhost:2 python -m workbench.training.horovod_rank

One rank of a Horovod data-parallel job: `workbench run --engine horovod` starts it with
`horovodrun`, or run it by hand as above, with any flag of `workbench run`. The five Horovod
steps of examples/pytorch/pytorch_mnist.py (Sergeev & Del Balso 2018, arXiv:1802.05799), in
order in `main()`: 1. `hvd.init()`; 2. pin the device; 3. broadcast rank 0's parameters and
optimizer state; 4. `hvd.DistributedOptimizer`, which averages each gradient with allreduce
during `backward()`; 5. shard the data. docs/ARCHITECTURE.md compares the engines.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import Any

import horovod.torch as hvd
import torch

from workbench.models import make_optimizer
from workbench.rank.context import job_config, job_record, run_main
from workbench.training.loop import train
from workbench.training.results import evaluate_and_save, restore
from workbench.training.setup import build, pick_device, pin_cpu
from workbench.training.synchronizer import Synchronizer


class HorovodSync(Synchronizer):
    """`hvd.DistributedOptimizer` starts an allreduce for each gradient as soon as
    `backward()` produces it, and `synchronize()` waits for them all. `step()` would call it
    again (Horovod warns and allreduces a second time), so it runs in `skip_synchronize()`."""

    def __init__(self, model: torch.nn.Module, fp16: bool) -> None:
        # Every gradient once per step (with `backward_passes_per_step`: after the last
        # micro-batch); Compression.fp16 casts the floating-point ones to 16 bits.
        self.bytes = sum(p.numel() * (2 if fp16 and p.is_floating_point() else p.element_size())
                         for p in model.parameters() if p.requires_grad)

    def wait_for_gradients(self, optimizer: hvd.DistributedOptimizer) -> None:
        optimizer.synchronize()  # blocks until every gradient's allreduce is done

    def stepping(self, optimizer: hvd.DistributedOptimizer) -> AbstractContextManager[Any]:
        return optimizer.skip_synchronize()

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        return hvd.allreduce(values, op=hvd.Sum, name="evaluation")


def main() -> None:
    cfg = job_config("horovod")  # the launcher's config.json, or `workbench run`'s flags

    # Step 1: initialise Horovod.
    hvd.init()
    # The run's record: the launcher's, or a new one whose name rank 0 broadcasts (named:
    # Horovod matches a collective across ranks by name, and its default is the type's).
    ctx = job_record(cfg, share=lambda run: hvd.broadcast_object(run, 0, name="run"))
    assert hvd.rank() == ctx.rank and hvd.size() == ctx.size
    # Joined: every rank can now talk. How often Horovod's thread looks for gradients, in ms.
    ctx.metric("event", message="init",
               cycle_time_ms=float(os.environ.get("HOROVOD_CYCLE_TIME", 1.0)))

    # Step 2: pin this rank to its device and its share of the CPU cores.
    device = pick_device(cfg.device, hvd.local_rank())
    pin_cpu(cfg, hvd.local_rank())

    setup = build(cfg, device)  # same seed everywhere, but rank 0's weights win below
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr,
                               cfg.momentum, cfg.weight_decay)

    # Step 3: start every replica from rank 0's parameters.
    hvd.broadcast_parameters(setup.model.state_dict(), root_rank=0)

    # Step 4: average gradients across ranks with allreduce during backward().
    fp16 = cfg.grad_compression == "fp16"  # each gradient sent in 16 bits: half the bytes
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=setup.model.named_parameters(), op=hvd.Average,
        compression=hvd.Compression.fp16 if fp16 else hvd.Compression.none,
        backward_passes_per_step=cfg.accumulate)  # k micro-batches: one allreduce

    # Resuming: load the checkpoint here, as Horovod's ImageNet example does: the wrapped
    # optimizer is a new one, with no state, so state loaded before step 4 would be lost.
    setup.first_epoch = restore(ctx, setup.model, optimizer)  # 0 unless resuming
    if optimizer.state_dict()["state"]:
        # Step 3 for the optimizer: rank 0's state wins. Only a resumed one has state: on an
        # empty one Horovod would first take a zero-gradient step to create it, which moves
        # Adam's step count and applies weight decay once, off the serial baseline's path.
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Step 5: train, each rank on its own shard of every global batch (see sharding.py).
    sync = HorovodSync(setup.model, fp16)
    held_out = train(ctx, setup, optimizer, sync)
    evaluate_and_save(ctx, setup, sync, held_out)
    hvd.shutdown()


if __name__ == "__main__":
    run_main(main)
