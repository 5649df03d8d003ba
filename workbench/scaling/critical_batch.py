"""How many steps a global batch size needs to reach a target: the critical batch size.

Weak scaling grows the global batch with the number of workers. Whether that shortens
training depends on the *steps* needed to reach a target, since each step costs about the
same time whatever the global batch (every worker does its own share):

- with the same learning rate, a larger batch averages away gradient noise but each step
  moves as far as before, so the steps needed barely change: more workers, no sooner done;
- with the **linear scaling rule** (learning rate × k for batch × k, Goyal et al. 2017) and
  a warm-up, the steps needed fall as 1/k, up to a **critical batch size**; beyond it
  larger batches stop helping and eventually diverge (McCandlish et al. 2018, "An
  Empirical Model of Large-Batch Training"; Shallue et al. 2019, "Measuring the Effects of
  Data Parallelism on Neural Network Training").

N ranks with batch b take exactly the steps of one process with batch N·b (see
`workbench.training.sharding`), so this module measures the steps in one process, with
the workbench's own model, data, held-out split and warm-up, without launching ranks.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.config import JobConfig
from workbench.models import make_optimizer
from workbench.training.lab_hooks import set_lr, warmup_lr, warmup_start
from workbench.training.setup import build
from workbench.training.sharding import epoch_order


def steps_to_target(cfg: JobConfig, target_accuracy: float,
                    max_epochs: float = 8.0) -> int | None:
    """Steps of `cfg` (batch `cfg.batch_size`, rate `cfg.lr`, `cfg.warmup_epochs`) until the
    held-out accuracy first reaches `target_accuracy`, checked after every step.

    Returns None if it is not reached within `max_epochs` epochs, or if the loss diverged
    (became infinite or NaN), which is what too large a learning rate does.
    """
    setup = build(cfg, torch.device("cpu"))
    model, data = setup.model, setup.data
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr, cfg.momentum,
                               cfg.weight_decay)
    n = len(setup.train_idx)
    per_epoch = n // cfg.batch_size
    if per_epoch == 0:
        raise ValueError(f"batch size {cfg.batch_size} exceeds the {n} training samples")
    x_val, y_val = data.x[setup.val_idx], data.y[setup.val_idx]
    limit = max(1, int(max_epochs * per_epoch))
    start = warmup_start(cfg, 1)   # one process: η is `warmup_start_lr`, else no ramp
    for step in range(limit):
        epoch, k = divmod(step, per_epoch)
        if k == 0:
            order = setup.train_idx[epoch_order(n, cfg.seed, epoch)]
        set_lr(optimizer, warmup_lr(cfg.lr, step, cfg.warmup_epochs * per_epoch, start))
        idx = order[k * cfg.batch_size:(k + 1) * cfg.batch_size]
        loss = nn.functional.cross_entropy(model(data.x[idx]), data.y[idx])
        if not math.isfinite(loss.item()):
            return None
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            accuracy = float((model(x_val).argmax(1) == y_val).float().mean())
        if accuracy >= target_accuracy:
            return step + 1
    return None


def batch_scan(base: JobConfig, batch_sizes: list[int], target_accuracy: float,
               scale_lr: bool = True, max_epochs: float = 8.0) -> list[dict]:
    """`steps_to_target` for each global batch size, the learning rate scaled linearly
    from `base` (batch `base.batch_size`, rate `base.lr`) when `scale_lr`. A warm-up
    (`base.warmup_epochs`) starts at `base.lr`, the η of Goyal et al. (2017).

    Returns rows ``{"batch_size", "lr", "steps", "samples"}`` (steps and samples None where
    the target was not reached).
    """
    rows = []
    for b in batch_sizes:
        lr = base.lr * b / base.batch_size if scale_lr else base.lr
        cfg = JobConfig(**{**base.to_dict(), "batch_size": b, "lr": lr,
                           "warmup_start_lr": base.warmup_start_lr or base.lr})
        steps = steps_to_target(cfg, target_accuracy, max_epochs)
        rows.append({"batch_size": b, "lr": lr, "steps": steps,
                     "samples": None if steps is None else steps * b})
    return rows
