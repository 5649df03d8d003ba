"""Run a Python function on a few worker processes: how the labs start their processes.

The labs (parameter server, Hogwild!, ring allreduce, pipelines, the data-vs-model
comparison) need what they teach, waiting, staleness, bubbles, to happen between *real*
processes. They start them as the workbench runs any function on N ranks,
`workbench.launch` (user_code.py): one supervisor, one rank protocol, one record.

- `run_workers(fn, n, args)` is `launch(lab_worker, fn, ..., np=n, engine="fork")`: every
  worker is a rank like any other, so every lab run leaves a run folder that `workbench
  runs` and `workbench show` list, and the function, its arguments and each worker's return
  value travel as for `launch()`;
- with `distributed=True` the workers join a gloo group through a `FileStore` in the run
  folder (no port to choose, so none to lose to another program), so `fn` can use
  `dist.send`/`dist.recv` and collectives;
- failures, timeouts and Ctrl-C are handled by the `Job`: a worker that raises or dies ends
  the run at once, the others are ended (they may be blocked in `recv` waiting for it) and
  `WorkerError` names the worker that failed; a dead kernel ends the workers through their
  owner watchdog, and processes.py reaps them. No process is left behind.

**Why the fork engine, not torchrun as training uses.** Most of a worker's start-up is
`import torch`; the `fork` engine imports it once and forks the workers
(`rank.wrapper.fork_ranks`), so notebooks 03 and 04, which start six lab runs each, mostly on
2-core machines, do not pay it per worker. Training, which needs several hosts and
Horovod, keeps horovodrun and torchrun.

`fn` must live in a module (not a notebook cell). A module of your own (not installed) is
sent by value; what it imports must be importable where the ranks start (installed, or in
the working folder). Arguments are
pickled once into the run folder; keep them to a few MB.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.launch.processes import exit_records, rank_pids
from workbench.rank.workers import lab_worker
from workbench.records import RunRecord


class WorkerError(RuntimeError):
    """A worker process failed, died or did not finish in time; the message names it."""


# ---------------------------------------------------------------------- the caller's side
def run_workers(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), *,
                name: str = "lab", runs_dir: str = "runs", timeout: float = 120.0,
                distributed: bool = True, names: Sequence[str] | None = None,
                settings: dict[str, Any] | None = None) -> list[Any]:
    """Run `fn(rank, world_size, *args)` on `world_size` processes; return their results.

    Args:
        fn: a function defined in an importable module.
        world_size: number of processes.
        args: extra arguments, pickled once for every process.
        name: the run's label in its run id (letters, digits, '.', '_', '-').
        runs_dir: where the run folder is written.
        timeout: seconds after which the run is stopped and `WorkerError` raised.
        distributed: join a `torch.distributed` gloo group first (rank = its index).
        names: how errors name each process (default "worker <rank>").
        settings: the lab's own settings, recorded in `config.json` (`extra`).

    Returns:
        The values returned by `fn`, indexed by rank.

    Raises:
        WorkerError: a worker raised (its error and traceback are in the message), died,
            or the run took longer than `timeout` seconds. The run folder is named too.
    """
    from workbench.launch.user_code import launch

    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if fn.__module__ == "__main__":
        raise ValueError(f"{fn.__qualname__} is defined in __main__ (a notebook cell or a "
                         "script), which the workers cannot import: move it to a .py module")
    names = list(names or [f"worker {r}" for r in range(world_size)])
    with warnings.catch_warnings():
        # Labs run more processes than cores on purpose (most of them wait on messages);
        # the warning stays in the run's summary but is not shown.
        warnings.simplefilter("ignore", UserWarning)
        job = launch(lab_worker, fn, distributed, timeout, *args, np=world_size,
                     engine="fork", echo=False, runs_dir=runs_dir, name=name,
                     threads_per_rank=1, stall_timeout=min(timeout + 60.0, 86_400.0),
                     extra={"function": f"{fn.__module__}.{fn.__qualname__}",
                            "workers": names, "settings": settings or {}})
    try:
        status = job.wait(timeout)   # Ctrl-C stops the job, then re-raises
        if not job.done:
            raise WorkerError(_timeout_message(job, timeout, names))
    finally:
        if not job.done:
            job.stop()
    if status != "succeeded":
        raise WorkerError(_failure_message(job.run_dir, job.summary or {}, names))
    return job.results()



def _timeout_message(job: Any, timeout: float, names: list[str]) -> str:
    """Why a run did not finish in time: it never left the queue, or which workers still run.
    Stops the job."""
    place = job.queue_position
    if job.status == "queued":
        job.stop()
        return (f"the run waited {timeout:g} s in this machine's queue for cores (number "
                f"{place}) and never started: another job, maybe one of yours, holds the "
                "cores (`workbench classroom cores` shows whose); stop it, or pass a larger "
                f"timeout (run record: {job.run_dir})")
    ended = exit_records(job.run_dir, len(names))
    waiting = ", ".join(n for r, n in enumerate(names) if r not in ended)
    job.stop()
    return (f"the run did not finish within {timeout:g} s; still running: {waiting}. Pass a "
            f"larger timeout, or fewer epochs/steps (run record: {job.run_dir})")


def _failure_message(run_dir: Path, summary: dict[str, Any], names: list[str]) -> str:
    """Name the worker that failed first, with its error and traceback.

    When one worker fails, the others often fail a moment later on a broken connection, or
    are ended while they wait; the first error that a worker *reported* is the cause. When
    no worker started, the launcher failed (for example, importing the lab's module).
    """
    records = exit_records(run_dir, len(names))
    reported = sorted((rec.get("time", 0.0), r) for r, rec in records.items() if not rec["ok"])
    failure = summary.get("failure") or {}
    if reported:
        rank = reported[0][1]
        who, failure = names[rank], records[rank]
    elif not rank_pids(run_dir):
        who = "the launcher"
        failure = {**failure, "log_tail": RunRecord(run_dir).log("launcher", last=20)}
    else:
        rank = failure.get("rank")
        who = names[rank] if rank is not None and rank < len(names) else "the launcher"
    detail = failure.get("traceback") or failure.get("log_tail") or ""
    return (f"{who} failed: {failure.get('error') or summary.get('status', 'unknown')}\n"
            f"{detail.rstrip()}\nThe other workers were stopped; run record: {run_dir}")

