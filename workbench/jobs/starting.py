"""Starting a job: `start(cfg)` for training, `start_module(...)` for any rank module.

Both check what can be checked before anything is written (the configuration, the
engine's launcher, Slurm, the device) and return a `Job` (job.py) at once. A training job
runs on a pool of warm ranks (pool.py) when this process has one that can run it.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES, training_engines
from workbench.jobs import slurm
from workbench.jobs.devices import resolve_device
from workbench.jobs.job import RANK_WRAPPER, Job
from workbench.records.resume import apply_resume

if TYPE_CHECKING:
    from workbench.jobs.pool import Pool


def start(cfg: JobConfig, pool: Pool | None = None) -> Job:
    """Validate `cfg` and launch a training job; returns at once (see `Job`).

    With `cfg.resume` set, the job continues that run from its last checkpoint, taking its
    configuration for every field left at its default (see `records/resume.py`).
    While this process has a pool of warm ranks (`workbench.ranks`) that can run the job,
    it runs there, in milliseconds instead of seconds (see pool.py); `pool` insists on one.
    """
    from workbench.jobs.open_pools import pool_for

    cfg = apply_preset(apply_resume(cfg)).validate()
    _check_engine(cfg.engine)
    module = ENGINES[cfg.engine].rank_module
    if module is None:
        raise ConfigError(f"--engine {cfg.engine} runs the labs' workers, not training: use "
                          f"one of {', '.join(training_engines())}")
    if cfg.launcher == "slurm":
        slurm.check(cfg)
    cfg, note = resolve_device(cfg)     # "auto" settles here; "cuda" is checked here
    if pool is not None and (why := pool.why_not(cfg)):
        raise ConfigError(f"this job cannot run on {pool!r}: {why}; start it with "
                          "workbench.start(cfg), on ranks of its own")
    pool = pool or pool_for(cfg)
    job = pool._train(cfg, module) if pool is not None else Job(cfg, module, [])
    _note(job, note)
    return job


def start_module(engine: str, np: int, module: str, args: list[str] | None = None,
                 runs_dir: str = "runs", name: str = "", threads_per_rank: int = 1,
                 hosts: str | None = None, stall_timeout: float = 120.0,
                 files: dict[str, bytes] | None = None, **fields: Any) -> Job:
    """Launch any rank module as a job on `np` ranks: each rank runs it in the rank wrapper
    (rank_wrapper.py), which gives it its context (`training.context.this_rank()`).

    `files` ({path in the run folder: bytes}) are written into the run folder before the
    ranks start: inputs too large for command-line arguments, such as the pickled function of
    `workbench.launch` (and so of the labs' workers).
    """
    if engine == "fork" and module != RANK_WRAPPER:
        raise ConfigError(f"the fork engine runs a function, not the module {module}: use "
                          "workbench.launch(fn, engine='fork'), or engine='torch' for a module")
    fixed = ENGINES[engine].fixed_ranks if engine in ENGINES else None
    cfg = JobConfig(engine=engine, np=fixed or np, runs_dir=runs_dir,
                    name=name, threads_per_rank=threads_per_rank, hosts=hosts,
                    stall_timeout=stall_timeout, **fields).validate()
    _check_engine(engine)
    if cfg.launcher == "slurm":
        slurm.check(cfg)
    cfg, note = resolve_device(cfg)
    job = Job(cfg, module, list(args or []), files)
    _note(job, note)
    return job


def apply_preset(cfg: JobConfig) -> JobConfig:
    """Check the configuration's preset name; return `cfg`.

    Presets are applied when a `JobConfig` is built, to the fields its caller did not pass
    (see `JobConfig`), so a field set explicitly, even to its default, is never overridden.
    """
    if cfg.preset is not None:
        cfg.validate()  # raises ConfigError naming an unknown preset
    return cfg


def _check_engine(engine: str) -> None:
    problem = ENGINES[engine].available()
    if problem:
        raise ConfigError(f"--engine {engine} cannot run here: {problem}")


def _note(job: Job, note: str | None) -> None:
    """Add a warning to a job that has just started (shown by the CLI and the panel)."""
    if note:
        job.warnings.append(note)
        warnings.warn(note, stacklevel=3)
