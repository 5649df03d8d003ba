"""How the labs run a function on a few worker processes: `run_workers(fn, n, args)` is
`launch(lab_worker, fn, ..., np=n, engine="fork")`, each worker a rank like any other, and
`WorkerError` names the one that failed. Why: docs/ARCHITECTURE.md, "The labs' processes".
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.launch.waiting import wait_turn
from workbench.rank.workers import lab_worker
from workbench.records import RunRecord
from workbench.records.blame import exit_records
from workbench.records.liveness import known_ranks


class WorkerError(RuntimeError):
    """A worker process failed, died or did not finish in time; the message names it."""


def run_workers(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), *,
                name: str = "lab", runs_dir: str = "runs", timeout: float = 120.0,
                distributed: bool = True, names: Sequence[str] | None = None,
                settings: dict[str, Any] | None = None) -> list[Any]:
    """Run `fn(rank, world_size, *args)` (`fn` of an importable module) on `world_size`
    processes, in a gloo group if `distributed`; return their values by rank. `name`: the
    run's label; `timeout`: seconds of running, not of waiting for cores; `names`: how errors
    name each process; `settings`: the lab's, recorded in `config.json`."""
    from workbench.launch.starting import launch

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
        wait_turn(job)               # for cores, seen waiting: the timeout starts after
        status = job.wait(timeout)   # Ctrl-C stops the job, then re-raises
        if not job.done:
            ended = exit_records(job.run_dir, world_size)
            waiting = ", ".join(n for r, n in enumerate(names) if r not in ended)
            raise WorkerError(f"the run did not finish within {timeout:g} s; still running: "
                              f"{waiting}. Pass a larger timeout, or fewer epochs/steps (run "
                              f"record: {job.run_dir})")
    finally:
        if not job.done:
            job.stop()
    if status != "succeeded":
        raise WorkerError(_failure_message(job.run_dir, job.summary or {}, names))
    return job.results()


def _failure_message(run_dir: Path, summary: dict[str, Any], names: list[str]) -> str:
    """The worker that failed first, its error and traceback; or the launcher's log."""
    failure = summary.get("failure") or {}
    rank = failure.get("rank")
    if rank is None and not known_ranks(run_dir, len(names)):
        failure = {**failure, "log_tail": RunRecord(run_dir).log("launcher", last=20)}
    who = names[rank] if rank is not None and rank < len(names) else "the launcher"
    detail = failure.get("traceback") or failure.get("log_tail") or ""
    return (f"{who} failed: {failure.get('error') or summary.get('status', 'unknown')}\n"
            f"{detail.rstrip()}\nThe other workers were stopped; run record: {run_dir}")
