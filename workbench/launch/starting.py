"""Starting a job: `start(cfg)` for training, `start_module(...)` for any rank module.

Both check what can be checked before anything is written (the configuration, the
engine's launcher, Slurm, the device) and return a `Job` (job.py) at once. A training job
runs on a pool of warm ranks (pool.py) when this process has one that can run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES, training_engines
from workbench.launch import slurm
from workbench.launch.devices import resolve_device
from workbench.launch.job import RANK_WRAPPER, Job
from workbench.records.resume import apply_resume

if TYPE_CHECKING:
    from workbench.launch.pool import Pool


def start(cfg: JobConfig, pool: Pool | None = None) -> Job:
    """Validate `cfg` and launch a training job; returns at once (see `Job`).

    With `cfg.resume` set, the job continues that run from its last checkpoint, taking its
    configuration for every field left at its default (see `records/resume.py`).
    While this process has a pool of warm ranks (`workbench.ranks`) that can run the job,
    it runs there, in milliseconds instead of seconds (see pool.py); `pool` insists on one.
    """
    from workbench.launch.open_pools import pool_for

    cfg = apply_resume(cfg).validate()
    module = ENGINES[cfg.engine].rank_module
    if module is None:
        raise ConfigError(f"--engine {cfg.engine} runs the labs' workers, not training: use "
                          f"one of {', '.join(training_engines())}")
    cfg, note = _checked(cfg)
    if pool is not None and (why := pool.why_not(cfg)):
        raise ConfigError(f"this job cannot run on {pool!r}: {why}; start it with "
                          "workbench.start(cfg), on ranks of its own")
    pool = pool or pool_for(cfg)
    job = pool._train(cfg, module) if pool is not None else Job(cfg, module, [])
    if note:
        job._warn(note)
    return job


def start_module(engine: str, np: int, module: str, args: list[str] | None = None,
                 runs_dir: str = "runs", name: str = "", threads_per_rank: int = 1,
                 hosts: str | None = None, stall_timeout: float = 120.0,
                 files: dict[str, bytes] | None = None, **fields: Any) -> Job:
    """Launch any rank module as a job on `np` ranks: each rank runs it in the rank wrapper
    (rank/wrapper.py), which gives it its context (`rank.context.this_rank()`).

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
    cfg, note = _checked(cfg)
    job = Job(cfg, module, list(args or []), files)
    if note:
        job._warn(note)
    return job


def apply_preset(cfg: JobConfig) -> JobConfig:
    """Check the configuration's preset name; return `cfg`. (Presets are applied when a
    `JobConfig` is built, to the fields its caller did not pass: see `JobConfig`.)"""
    if cfg.preset is not None:
        cfg.validate()  # raises ConfigError naming an unknown preset
    return cfg


def _checked(cfg: JobConfig) -> tuple[JobConfig, str | None]:
    """Check the engine and Slurm here; `cfg` with its device settled (devices.py), and a
    note when "auto" chose the CPU."""
    problem = ENGINES[cfg.engine].available()
    if problem:
        raise ConfigError(f"--engine {cfg.engine} cannot run here: {problem}")
    if cfg.launcher == "slurm":
        slurm.check(cfg)
    return resolve_device(cfg)
