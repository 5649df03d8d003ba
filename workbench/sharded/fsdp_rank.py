"""torchrun --standalone --nproc-per-node 2 -m workbench.sharded.fsdp_rank

One rank of a fully sharded job (ZeRO-3) with PyTorch's FSDP2, started by `torchrun`: by
the workbench (`workbench run --engine fsdp`), or by hand as above, with any flag of
`workbench run`.

The steps of the DDP rank (training/ddp_rank.py), with `fully_shard` in place of DDP:

1. Join the process group: gloo on CPUs, NCCL on `cuda:<local rank>` on GPUs.
2. Pin this rank to its share of the CPU cores.
3. Every rank builds the model from the same seed, so the same parameters; `fully_shard`
   keeps this rank's slice of each and frees the rest (fsdp.py).
4. The optimizer is an ordinary one, over the sharded parameters: its state is sharded too.
5. Train: FSDP2 gathers each block's parameters in the forward and backward passes, and
   reduce-scatters the gradients during the backward pass, so nothing is left to wait
   for when `backward()` returns.
"""

from __future__ import annotations

import torch.distributed as dist

from workbench.models import make_optimizer
from workbench.rank.context import from_rank0, job_config, job_record, run_main
from workbench.rank.protocol import launcher_identity
from workbench.sharded.fsdp import shard_model
from workbench.sharded.memory import Footprint
from workbench.sharded.traffic import Traffic
from workbench.sharded.zero_rank import ZeroSync
from workbench.training.ddp_rank import join
from workbench.training.loop import train
from workbench.training.results import evaluate_and_save
from workbench.training.setup import build, pin_cpu


class FSDPSync(ZeroSync):
    """FSDP2 has averaged the gradients by the time `backward()` returns."""

    def wait_for_gradients(self, optimizer) -> None:
        """Nothing left to do."""


def main() -> None:
    cfg = job_config("fsdp")  # the launcher's config.json, or `workbench run`'s flags
    local_rank = launcher_identity()[2]  # this rank's number on its host (LOCAL_RANK)
    traffic = Traffic().install()                # FSDP2 calls the counted collectives

    # Step 1: join the job.
    device = join(cfg, local_rank)
    ctx = job_record(cfg, share=from_rank0)  # the run's record: the launcher's, or a new one
    ctx.metric("event", message="init")

    # Step 2: pin this rank to its share of the CPU cores.
    pin_cpu(cfg, local_rank)
    setup = build(cfg, device)

    # Step 3: shard every block's parameters (all ranks built the same model).
    shard_model(setup.model, device, compress=cfg.grad_compression == "bf16")

    # Step 4: an ordinary optimizer over this rank's shards.
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr,
                               cfg.momentum, cfg.weight_decay)

    # Step 5: train; each step line also says what this rank holds and sent.
    sync = FSDPSync()
    sync.measure = Footprint(setup.model, optimizer, traffic.take)
    traffic.take()
    held_out = train(ctx, setup, optimizer, sync)
    evaluate_and_save(ctx, setup, sync, held_out)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_main(main)
