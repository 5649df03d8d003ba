"""The sequential baseline: the same loop as the distributed engines, in one process.

Run by the launcher as `python -m workbench.training.serial_rank`. With `--batch-size N·b`
it follows exactly the trajectory of N data-parallel ranks with batch b.
"""

from __future__ import annotations

import torch

from workbench.models import make_optimizer
from workbench.training.loop import Synchronizer, build, finish, pick_device, train
from workbench.training.reporter import RankContext


def main() -> None:
    with RankContext.from_env() as ctx:
        cfg = ctx.config
        torch.set_num_threads(cfg.resolved_threads())
        setup = build(cfg, pick_device(0))
        optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr,
                                   cfg.momentum, cfg.weight_decay)
        train(ctx, setup, optimizer, Synchronizer())
        finish(ctx, setup, setup.model)


if __name__ == "__main__":
    main()
