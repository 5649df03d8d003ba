"""What the labs add to a training step, kept outside `loop.train_step`: a failure on
purpose (`fail_rank`, `fail_at_step`: notebook 03), a learning-rate warm-up (`warmup_epochs`:
the linear scaling rule, notebook 06 and exercise 9) and a slow rank (`straggler_rank`,
`straggler_delay`: notebook 03). See docs/ARCHITECTURE.md."""

from __future__ import annotations

import time

import torch

from workbench.config import JobConfig


class InjectedFault(RuntimeError):
    """The failure `fail_rank`/`fail_at_step` asked for: this rank stops, as if it crashed."""


class LabHooks:
    def __init__(self, cfg: JobConfig, rank: int, ranks: int, steps_per_epoch: int,
                 optimizer: torch.optim.Optimizer) -> None:
        self.cfg, self.rank, self.optimizer = cfg, rank, optimizer
        self.warmup_steps = cfg.warmup_epochs * steps_per_epoch
        self.start_lr = warmup_start(cfg, ranks)

    def before_step(self, step: int) -> None:
        """Fail here if the job asks to (`step` counts from the job's start, across epochs
        and resumes); set the step's learning rate during a warm-up."""
        cfg = self.cfg
        if cfg.fail_at_step and self.rank == cfg.fail_rank and step == cfg.fail_at_step:
            raise InjectedFault(f"rank {self.rank} failed on purpose at step {step} (--fail-rank "
                                f"{cfg.fail_rank} --fail-at-step {cfg.fail_at_step}); continue "
                                "from its last checkpoint with `workbench run --resume RUN_ID`")
        if cfg.warmup_epochs:
            set_lr(self.optimizer, warmup_lr(cfg.lr, step, self.warmup_steps, self.start_lr))

    def after_backward(self) -> None:
        """Before the gradients' wait: a straggler computes longer; every other rank waits."""
        if self.cfg.straggler_delay and self.rank == self.cfg.straggler_rank:
            time.sleep(self.cfg.straggler_delay)


def warmup_lr(lr: float, step: int, warmup_steps: float, start_lr: float) -> float:
    """The learning rate of `step` (counted from 0) during a gradual warm-up to `lr`.

    Goyal et al. (2017, sec. 2.2, "gradual warmup") train k workers, each with the batch
    the rate η was tuned for, at the linear scaling rule's kη. They start at η and raise
    the rate by the same amount every step until it reaches kη after 5 epochs: kη from a
    random start diverges. Here `start_lr` is η, `lr` is kη and the ramp lasts
    `warmup_steps` steps; after it the rate stays at `lr`.
    """
    if warmup_steps <= 0 or step >= warmup_steps:
        return lr
    return start_lr + (lr - start_lr) * step / warmup_steps


def warmup_start(cfg: JobConfig, ranks: int) -> float:
    """η, where the warm-up of `cfg` starts: `cfg.warmup_start_lr`, or else ``lr / ranks``
    (the linear scaling rule's η when each of the k = `ranks` workers keeps its batch)."""
    return cfg.warmup_start_lr or cfg.lr / max(1, ranks)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
