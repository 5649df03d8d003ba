"""What a run keeps: the held-out evaluation every rank joins, the checkpoints rank 0 saves
and `workbench run --resume RUN_ID` restores (to the same final parameters as a run never
interrupted; how often: Young's formula, synchronization/checkpoint_interval.py), and at
the end model.pt and result.json (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn

from workbench.rank.protocol import RankContext
from workbench.records.resume import CHECKPOINT
from workbench.records.store import atomic_file
from workbench.training.setup import ModelAndData
from workbench.training.sharding import eval_shard
from workbench.training.synchronizer import Synchronizer


def evaluate(ctx: RankContext, setup: ModelAndData, sync: Synchronizer) -> dict[str, float]:
    """{"val_loss", "val_accuracy"} on the held-out samples; every rank must call it: one
    allreduce adds the sums [loss, correct, count], in float64 (slices differ by <= 1)."""
    model, data, device = setup.module, setup.data, setup.device
    mine = eval_shard(setup.val_idx, ctx.rank, ctx.size)
    totals = torch.zeros(3, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for batch in mine.split(ctx.config.batch_size):
            x, y = data.x[batch].to(device), data.y[batch].to(device)
            out = model(x)
            totals[0] += float(nn.functional.cross_entropy(out, y, reduction="sum"))
            totals[1] += int((out.argmax(1) == y).sum())
            totals[2] += len(y)
    model.train()  # the loop trains on
    loss_sum, correct, count = sync.allreduce_sum(totals.to(device)).cpu().tolist()
    return {"val_loss": loss_sum / count, "val_accuracy": correct / count}


def save(ctx: RankContext, model: nn.Module, optimizer: torch.optim.Optimizer,
         epochs_done: int, steps_done: int) -> None:
    """Rank 0 writes checkpoint.pt atomically and records how long saving took (seconds)."""
    if ctx.rank != 0:
        return
    start = time.perf_counter()
    state = {"epochs_done": epochs_done, "steps_done": steps_done,
             "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             "optimizer": optimizer.state_dict()}
    with atomic_file(ctx.run_dir / CHECKPOINT) as f:
        torch.save(state, f)
    ctx.metric("event", message="checkpoint", epochs_done=epochs_done, steps_done=steps_done,
               save_s=time.perf_counter() - start)


def restore(ctx: RankContext, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the checkpoint `resume` names (if any) into `model` and `optimizer`, on every
    rank; return the first epoch still to run (0 without resume)."""
    if not ctx.config.resume:
        return 0
    path = Path(ctx.config.resume) / CHECKPOINT
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    ctx.metric("event", message="resumed", run_dir=str(path.parent),
               epochs_done=state["epochs_done"], steps_done=state["steps_done"])
    return int(state["epochs_done"])


def evaluate_and_save(ctx: RankContext, setup: ModelAndData, sync: Synchronizer,
                      held_out: dict[str, float] | None = None) -> None:
    """Evaluate (unless `train` just did) and gather a parameter sharded between the ranks
    (a DTensor, as FSDP2 keeps them): every rank must call it. Rank 0 then writes model.pt
    and result.json (`final_loss`, `final_accuracy`: on the held-out samples)."""
    held_out = held_out or evaluate(ctx, setup, sync)
    state = {name: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu()
             for name, t in setup.module.state_dict().items()}  # a DTensor: gathered whole
    if ctx.rank != 0:
        return
    with atomic_file(ctx.run_dir / "model.pt") as f:
        torch.save(state, f)
    ctx.write_result({"final_loss": held_out["val_loss"],
                      "final_accuracy": held_out["val_accuracy"],
                      "val_samples": len(setup.val_idx)})

