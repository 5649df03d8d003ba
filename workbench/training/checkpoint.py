"""Checkpoints, and resuming a job from one after a rank was lost.

A synchronous job is only as reliable as its least reliable rank: when one process dies,
every other rank is left waiting in an allreduce that cannot complete, and the job ends
(see `workbench.jobs.job`). What it had learned is lost, unless it was saved.

So rank 0 saves, every `checkpoint_every` epochs, everything the rest of the run depends on:

- the model's parameters and the optimizer's state (momentum buffers, Adam's moments and
  step count): without the latter the resumed run would take different steps;
- the number of epochs completed: each epoch's sample order is drawn from (`seed`, epoch)
  (`sharding.epoch_order`) and the held-out samples from `seed`, so the epoch number and
  the seed are all the data order needs.

One rank saving is enough because synchronous data parallelism keeps every replica
identical. The file is written to a temporary name and renamed, so a crash while saving
leaves the previous checkpoint intact, never half of a new one.

`JobConfig(resume=RUN_ID)` (`workbench run --resume RUN_ID`) starts a new run that loads
the last checkpoint of RUN_ID and continues from the next epoch. It reaches the same final
parameters as a run that was never interrupted. The steps after the checkpoint are done
again: checkpointing more often loses less work, and costs a save each time.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.config import ConfigError, JobConfig
from workbench.records import CorruptRecord, load_run, read_json
from workbench.records.private import ForeignRecord, check_own_folder, read_own
from workbench.records.store import atomic_file

if TYPE_CHECKING:  # torch is imported where it is used: the launcher imports this module
    import torch  # for apply_resume, and `import workbench` must stay free of torch
    from torch import nn

    from workbench.training.reporter import RankContext

CHECKPOINT = "checkpoint.pt"
#: Fields a resumed run does not take from the run it continues: the fault that ended it
#: (inheriting it would end the resumed run again) and where it resumes from.
NOT_INHERITED = ("fail_rank", "fail_at_step", "resume", "runs_dir")


class InjectedFault(RuntimeError):
    """The failure `fail_rank`/`fail_at_step` asked for: this rank stops, as if it crashed."""


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
    """Load the checkpoint `resume` names (if any) into `model` and `optimizer`.

    Every rank loads the same file, so every replica starts identical (the engines then
    broadcast rank 0's copy anyway). Returns the first epoch still to run (0 without resume).
    """
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


def maybe_fail(cfg: JobConfig, rank: int, step: int) -> None:
    """Raise `InjectedFault` on rank `fail_rank` at step `fail_at_step` (counted from the
    start of the job, across epochs and resumes); do nothing otherwise."""
    if cfg.fail_at_step and rank == cfg.fail_rank and step == cfg.fail_at_step:
        raise InjectedFault(f"rank {rank} failed on purpose at step {step} (--fail-rank "
                            f"{cfg.fail_rank} --fail-at-step {cfg.fail_at_step}); continue "
                            "from its last checkpoint with `workbench run --resume RUN_ID`")


def apply_resume(cfg: JobConfig) -> JobConfig:
    """The configuration of a run that continues `cfg.resume` (a run id or run folder).

    Fields the caller did not pass (`cfg.given`) take the values of the run being resumed
    (like a preset), but for `NOT_INHERITED`: `--resume R --epochs 3` runs 3 epochs in all
    even when 3 is also the default; `resume` becomes that run's folder, so ranks can find its
    checkpoint. Raises `ConfigError` if there is no such run or it saved no checkpoint.
    """
    if not cfg.resume:
        return cfg
    try:
        record = load_run(cfg.resume, cfg.runs_dir)
    except FileNotFoundError as exc:
        raise ConfigError(f"invalid --resume {cfg.resume!r}: {exc}") from None
    try:  # its configuration (env, sbatch_arg, hosts) and checkpoint would be trusted
        check_own_folder(record.run_dir)
        read_own(record.run_dir / "config.json", record.run_dir)
    except (ForeignRecord, OSError) as exc:
        raise ConfigError(f"invalid --resume {cfg.resume!r}: {exc}; resume only your own "
                          "runs") from None
    if not (record.run_dir / CHECKPOINT).exists():
        raise ConfigError(f"invalid --resume {cfg.resume!r}: run {record.run_id} saved no "
                          "checkpoint (run it with --checkpoint-every N to save one every N "
                          "epochs)")
    try:
        old = read_json(record.run_dir / "config.json") or {}
    except CorruptRecord as exc:
        raise ConfigError(f"invalid --resume {cfg.resume!r}: {exc}") from None
    if not isinstance(old, dict):
        raise ConfigError(f"invalid --resume {cfg.resume!r}: {record.run_dir / 'config.json'}"
                          " does not hold a configuration (a JSON object)")
    fields = {f.name for f in dataclasses.fields(JobConfig)}
    inherited = {k: v for k, v in old.items()
                 if k in fields and k not in NOT_INHERITED and k not in cfg.given}
    return dataclasses.replace(cfg, **inherited, resume=str(record.run_dir))


def checkpoint_overhead(interval_s: float, save_s: float, mtbf_s: float) -> float:
    """Expected share of a job's time lost to checkpointing and to failures.

    Saving every ``interval_s`` seconds costs ``save_s / interval_s``. A failure, arriving
    on average every ``mtbf_s`` seconds (mean time between failures of the whole job: with p
    machines, one machine's MTBF ÷ p), loses on average half an interval of work:
    ``interval_s / 2 / mtbf_s``. Restart time is left out: it does not depend on the interval.
    """
    return save_s / interval_s + interval_s / (2 * mtbf_s)


def young_interval(save_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that minimises `checkpoint_overhead`: √(2 · save_s · mtbf_s).

    J. W. Young, "A first order approximation to the optimum checkpoint interval",
    Communications of the ACM 17(9), 1974. Saving more often wastes time saving; less often,
    time redoing lost work.
    """
    return (2 * save_s * mtbf_s) ** 0.5
