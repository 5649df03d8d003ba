"""The held-out evaluation every rank joins, and the results rank 0 saves at the end.

Each rank evaluates its slice of the samples training never sees, a batch at a time, and
one allreduce adds up the ranks' loss sums and counts. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from workbench.rank.protocol import RankContext
from workbench.records.store import atomic_file
from workbench.training.setup import ModelAndData
from workbench.training.sharding import eval_shard
from workbench.training.synchronizer import Synchronizer


def evaluate(ctx: RankContext, setup: ModelAndData, sync: Synchronizer) -> dict[str, float]:
    """{"val_loss", "val_accuracy"} on the held-out samples; every rank must call it.

    Sums, not means, are added across ranks, because the slices may differ in size by one
    sample: [loss sum, correct, count] in float64, one allreduce.
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


def evaluate_and_save(ctx: RankContext, setup: ModelAndData, sync: Synchronizer,
                      held_out: dict[str, float] | None = None) -> None:
    """Evaluate (unless `train` just did; every rank must call it); rank 0 then writes
    model.pt and result.json (`final_loss`, `final_accuracy`: on the held-out samples)."""
    held_out = held_out or evaluate(ctx, setup, sync)
    state = full_state(setup.module)  # every rank: gathering sharded parameters is collective
    if ctx.rank != 0:
        return
    with atomic_file(ctx.run_dir / "model.pt") as f:
        torch.save(state, f)
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
