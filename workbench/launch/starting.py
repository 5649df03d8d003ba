"""Starting a job, checked before anything is written: `start(cfg)` for training,
`start_module(...)` for any rank module, `launch(fn_or_path, *args, np=2)` for your own code;
`place` routes every job, to an open pool that can run it, else to ranks of its own.

    job = workbench.launch(hello, "hi", np=2)       # returns at once, like start()
    job.wait(); job.results()                       # each rank's return value
    job = workbench.launch("train.py", "--epochs", "3", np=2, engine="torch")

See docs/ARCHITECTURE.md, and for launch() "Your own code on real ranks"."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES, training_engines
from workbench.hosts.lists import parse_hosts
from workbench.launch import cores, slurm
from workbench.launch.by_value import check_payload, pickle_function
from workbench.launch.devices import resolve_device
from workbench.launch.job import Granted, Job
from workbench.launch.launchers import RANK_WRAPPER, Launcher, Local, Ssh
from workbench.launch.pool_call import POOL_RANK_MODULE, POOLS, pool_for
from workbench.launch.waiting import in_kernel
from workbench.rank.by_value import PAYLOAD
from workbench.records.resume import apply_resume

#: Seconds without a new metrics line before a launch()ed job is stalled (it may not report)
STALL_TIMEOUT_S = 600.0


def start(cfg: JobConfig, pool: Any = None) -> Job:
    """Validate `cfg` and launch a training job; returns at once (see `Job`). It runs on
    an open pool that can run it (`pool`: that one), and continues `cfg.resume`."""
    cfg = apply_resume(cfg).validate()
    module = ENGINES[cfg.engine].rank_module
    if module is None:
        raise ConfigError(f"--engine {cfg.engine} runs the labs' workers, not training: use "
                          f"one of {', '.join(training_engines())}")
    return place(cfg, module, [], warm=("module", module.encode()), pool=pool)


def start_module(engine: str, np: int, module: str, args: list[str] | None = None,
                 files: dict[str, bytes] | None = None, warm: tuple[str, bytes] | None = None,
                 threads_per_rank: int = 1, **fields: Any) -> Job:
    """Launch any rank module as a job on `np` ranks, in the rank wrapper; `fields` are
    `JobConfig`'s, `files` `Job`'s; `warm` (kind, payload) is what a pool's ranks would run."""
    if engine == "fork" and module != RANK_WRAPPER:
        raise ConfigError(f"the fork engine runs a function, not the module {module}: use "
                          "workbench.launch(fn, engine='fork'), or engine='torch' for a module")
    fixed = ENGINES[engine].fixed_ranks if engine in ENGINES else None
    cfg = JobConfig(engine=engine, np=fixed or np, threads_per_rank=threads_per_rank,
                    **fields).validate()
    return place(cfg, module, list(args or []), files, warm)


def launch(fn_or_path: Callable[..., Any] | str | os.PathLike, *args: Any, np: int = 2,
           engine: str = "horovod", echo: bool = True, max_payload_mb: float = 256.0,
           **fields: Any) -> Job:
    """Run `fn(*args)`, or the script at a path with `args` as its argv, on `np` ranks;
    returns the running `Job` at once. `engine` is "horovod", "torch", "serial" (one
    process) or "fork" (a function's ranks forked from one process that imported torch
    once: one host, CPU only, no group joined for you); `fields` are `JobConfig`'s. In a
    notebook, `echo` shows the ranks' output under the cell, each line prefixed with its rank.
    The same `Job`, records, Stop and failure reports as `horovodrun -np 2 python train.py`.
    ConfigError before anything starts: bad settings, an `fn` that cannot be pickled, or
    arguments and variables holding over `max_payload_mb` MiB of arrays (`check_payload`)."""
    if isinstance(fn_or_path, (str, os.PathLike)):
        path = Path(fn_or_path).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"no script at {fn_or_path}: give the path of a Python file, "
                              "or a function")
        if engine == "fork":
            raise ConfigError("launch() runs a function on the fork engine, not a script: pass "
                              "a function, or use engine='torch' or 'horovod' for a script")
        rank_args, files, label = ["--script", str(path), *map(str, args)], {}, path.stem
        ran = {"script": str(path)}
    elif callable(fn_or_path):
        rank_args, label = [], getattr(fn_or_path, "__name__", "function")
        ran = {"function": qualified_name(fn_or_path)}
        check_payload(fn_or_path, args, max_payload_mb)
        files = {PAYLOAD: pickle_function(fn_or_path, args)}
    else:
        raise ConfigError(f"launch() runs a function or a script path, not a "
                          f"{type(fn_or_path).__name__}")
    fields.setdefault("name", safe_name(label))
    fields.setdefault("stall_timeout", STALL_TIMEOUT_S)
    fields["extra"] = {**ran, **fields.get("extra", {})}  # what ran (a lab names its own)
    warm = ("function", files[PAYLOAD]) if PAYLOAD in files else None  # a pool may run it
    job = start_module(engine, np, RANK_WRAPPER, rank_args, files=files, warm=warm, **fields)
    if echo and in_kernel():
        from workbench.ui.rank_output import RankOutput

        RankOutput(job).show()
    return job


def place(cfg: JobConfig, module: str, args: list[str], files: dict[str, bytes] | None = None,
          warm: tuple[str, bytes] | None = None, pool: Any = None) -> Job:
    """Run the job `cfg` on `pool`, or the open pool that can (given `warm`), else on fresh
    ranks running `module` with `args`. Checks the engine, Slurm and the device first."""
    if problem := ENGINES[cfg.engine].available():
        raise ConfigError(f"--engine {cfg.engine} cannot run here: {problem}")
    if cfg.launcher == "slurm":
        slurm.check(cfg)
    cfg, note = resolve_device(cfg)
    if pool is not None and (why := pool.why_not(cfg)):
        raise ConfigError(f"this job cannot run on {pool!r}: {why}; start it with "
                          "workbench.start(cfg), on ranks of its own")
    pool = pool or (pool_for(cfg) if warm is not None else None)
    job = pool.call(cfg, *warm) if pool is not None else fresh(cfg, module, args, files)
    if note:
        job.warn(note)
    return job


def fresh(cfg: JobConfig, module: str, args: list[str], files: dict[str, bytes] | None
          ) -> Job:
    """The job `cfg` on ranks of its own, with its launcher and its ticket for cores."""
    sharing = cores.settings()  # a bad setting fails here, before anything is written
    launcher = launcher_for(cfg, module, args)
    if cfg.launcher == "slurm":
        return Job(cfg, launcher, Granted(), files)
    ticket = cores.Ticket(None, launcher.cores_bound(), sharing)
    if module != POOL_RANK_MODULE and launcher.cores_bound():
        ticket = Borrowing(ticket, cfg.engine)
    return Job(cfg, launcher, ticket, files)


class Borrowing:
    """A job's place in this host's queue, or a loan of an idle pool's cores (`pool.lend`),
    whichever comes first: a pool never keeps its user's job waiting for its cores."""

    def __init__(self, queue: cores.Ticket, engine: str) -> None:
        self.queue, self.engine, self.loan = queue, engine, None

    def poll(self) -> bool:
        if self.loan is None and not self.queue.poll():
            for pool in list(POOLS.values()):  # (a closed pool lends nothing)
                self.loan = pool.lend(self.engine, self.queue.n_cores)
                if self.loan is not None:
                    self.loan.join(self.queue.run_id)
                    self.queue.release()
                    break
        return self.queue.granted or self.loan is not None and self.loan.poll()

    def release(self) -> None:
        self.queue.release()
        if self.loan is not None:
            self.loan.release()

    def __getattr__(self, name: str) -> Any:  # join, cores, position, reason, warning
        return getattr(self.loan if self.loan is not None else self.queue, name)


def launcher_for(cfg: JobConfig, module: str = RANK_WRAPPER, args: list[str] | None = None
                 ) -> Launcher:
    """The launcher of `cfg`'s ranks, each running `module` with `args` in the rank wrapper:
    Slurm's, ssh's (`--hosts` naming another host) or this host's."""
    from workbench.launch.torch_hosts import is_local  # (not at import: it is a program too)

    args = list(args or [])
    if module != RANK_WRAPPER:  # every rank runs in the wrapper, which opens its context
        module, args = RANK_WRAPPER, ["--module", module, *args]
    if cfg.launcher == "slurm":
        return slurm.SlurmBatch(cfg, module, args)
    if cfg.hosts is not None and not all(is_local(h) for h in parse_hosts(cfg.hosts)):
        return Ssh(cfg, module, args)
    return Local(cfg, module, args)


def safe_name(label: str) -> str:
    """A run-folder-friendly name of at most 40 characters (`<lambda>`: `lambda`)."""
    return (re.sub(r"[^A-Za-z0-9_.-]+", "", label) or "function")[:40]


def qualified_name(fn: Any) -> str:
    """`module.qualname` of a function, as a run's record names what it ran."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', 'function')}"
