"""Checkpoints, and resuming a job from one after a rank was lost.

Rank 0 saves, every `checkpoint_every` epochs and atomically, the parameters, the
optimizer's state and the epochs done; `workbench run --resume RUN_ID` continues from the
next epoch to the same final parameters as a run never interrupted. How often to save:
synchronization/checkpoint_interval.py (Young's formula). Why: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.records.resume import CHECKPOINT
from workbench.records.store import atomic_file

if TYPE_CHECKING:  # torch is imported where it is used
    import torch
    from torch import nn

    from workbench.rank.protocol import RankContext


def save(ctx: RankContext, model: nn.Module, optimizer: torch.optim.Optimizer,
         epochs_done: int, steps_done: int) -> None:
    """Rank 0 writes checkpoint.pt atomically and records how long saving took (seconds)."""
    import torch

    if ctx.rank != 0:
        return
    start = time.perf_counter()
    state = {"epochs_done": epochs_done, "steps_done": steps_done,
             "seed": ctx.config.seed, "world_size": ctx.size,
             "batch_size": ctx.config.batch_size,
             "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             "optimizer": optimizer.state_dict()}
    with atomic_file(ctx.run_dir / CHECKPOINT) as f:
        torch.save(state, f)
    ctx.metric("event", message="checkpoint", epochs_done=epochs_done, steps_done=steps_done,
               save_s=time.perf_counter() - start)


def restore(ctx: RankContext, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the checkpoint `resume` names (if any) into `model` and `optimizer`, on every
    rank; return the first epoch still to run (0 without resume)."""
    import torch

    if not ctx.config.resume:
        return 0
    path = Path(ctx.config.resume) / CHECKPOINT
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    ctx.metric("event", message="resumed", run_dir=str(path.parent),
               epochs_done=state["epochs_done"], steps_done=state["steps_done"])
    return int(state["epochs_done"])
