"""The steps of a ZeRO-1 or ZeRO-2 rank (`--engine zero1` or `zero2`), which
zero1_rank.py and zero2_rank.py run (`workbench run --engine zero1`, or by hand:
`torchrun --standalone --nproc-per-node 2 -m workbench.sharded.zero1_rank`).

The steps of the DDP rank (training/ddp_rank.py), with a sharded optimizer in place of DDP:

1. Join the process group: gloo on CPUs, NCCL on `cuda:<local rank>` on GPUs.
2. Pin this rank to its share of the CPU cores.
3. Every rank starts from rank 0's parameters (DDP's constructor does this).
4. Put the parameters in one flat buffer and give this rank an optimizer for its slice
   (zero1.py, zero2.py).
5. Train: after each backward pass the optimizer averages the gradients (all-reduce, or
   reduce-scatter for ZeRO-2); its step updates this rank's slice and all-gathers the rest.

Each step line also says how many bytes this rank holds in parameters, gradients and
optimizer state, and how many it sent (sharded/memory.py, sharded/traffic.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from workbench.models import make_optimizer
from workbench.rank.context import from_rank0, job_config, job_record
from workbench.rank.protocol import launcher_identity
from workbench.sharded.memory import Footprint
from workbench.sharded.traffic import Traffic
from workbench.sharded.zero1 import Zero1Optimizer
from workbench.sharded.zero2 import Zero2Optimizer
from workbench.training.ddp_rank import join
from workbench.training.loop import train
from workbench.training.naive_rank import broadcast_parameters
from workbench.training.results import evaluate_and_save
from workbench.training.setup import build, pin_cpu
from workbench.training.synchronizer import Synchronizer

STAGES = {"zero1": Zero1Optimizer, "zero2": Zero2Optimizer}


class ZeroSync(Synchronizer):
    """After the backward pass, the sharded optimizer averages the gradients itself."""

    def wait_for_gradients(self, optimizer: Zero1Optimizer) -> None:
        optimizer.reduce_gradients()

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(values)
        return values


def main(engine: str) -> None:
    """The rank's steps, for `engine` zero1 or zero2 (zero1_rank.py, zero2_rank.py)."""
    cfg = job_config(engine)  # the launcher's config.json, or `workbench run`'s flags
    if cfg.engine not in STAGES:
        raise SystemExit(f"a ZeRO rank runs --engine {' or '.join(STAGES)}, "
                         f"not {cfg.engine!r}")
    local_rank = launcher_identity()[2]  # this rank's number on its host (LOCAL_RANK)
    traffic = Traffic().install()                # before anything is sent

    # Step 1: join the job.
    device = join(cfg, local_rank)
    ctx = job_record(cfg, share=from_rank0)  # the run's record: the launcher's, or a new one
    ctx.metric("event", message="init")

    # Step 2: pin this rank to its share of the CPU cores.
    pin_cpu(cfg, local_rank)
    setup = build(cfg, device)

    # Step 3: every replica starts from rank 0's parameters.
    broadcast_parameters(setup.model)

    # Step 4: one flat buffer of parameters; this rank's optimizer owns one slice of it.
    optimizer = STAGES[cfg.engine](
        setup.model,
        lambda params: make_optimizer(cfg.optimizer, params, cfg.lr, cfg.momentum,
                                      cfg.weight_decay),
        ctx.rank, ctx.size, compress=cfg.grad_compression == "bf16")

    # Step 5: train; each step line also says what this rank holds and sent.
    sync = ZeroSync()
    sync.measure = Footprint(setup.model, optimizer, traffic.take)
    traffic.take()                               # the start-up broadcast is no step's
    held_out = train(ctx, setup, optimizer, sync)
    evaluate_and_save(ctx, setup, sync, held_out)
    dist.destroy_process_group()

