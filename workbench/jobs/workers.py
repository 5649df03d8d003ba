"""Run a Python function on a few worker processes: how the labs start their processes.

The labs (parameter server, Hogwild!, ring allreduce, pipelines, the data-vs-model
comparison) need what they teach, waiting, staleness, bubbles, to happen between *real*
processes. They start them exactly as training jobs start their ranks, so there is one
supervisor with one set of mechanisms (see job.py and processes.py):

- `run_workers(fn, n, args)` starts a job with `start_module` on the `torch` engine:
  `torchrun` starts `n` copies of this module, each a rank under `RankContext`. So every
  lab run leaves a run folder under the runs folder (`config.json`, `logs/rank<k>.log`,
  `pids/`, `exit/rank<k>.json`, `summary.json`), listed by `workbench runs` and
  `workbench show` like any job;
- the function and its arguments travel in the run folder (`call.pkl`, pickled); each
  rank's return value comes back the same way (`results/rank<k>.pkl`);
- the ranks join a gloo group through torchrun's rendezvous, so `fn` can use
  `dist.send`/`dist.recv` and collectives;
- failures, timeouts and Ctrl-C are handled by the `Job`: a rank that raises or dies ends
  the run at once, the other ranks are ended (they may be blocked in `recv` waiting for
  it) and `WorkerError` names the worker that failed; a dead kernel ends the ranks
  through their owner watchdog. No process is left behind.

Why no faster path of its own: starting through torchrun costs one more interpreter that
imports torch before the workers start, about a second here, on runs that take seconds to
minutes. A second launcher would be a second supervisor to keep right (orphans, ports,
reaping, records), which is what this module replaced.

Workers are fresh interpreters: `fn` must live in an importable module (not a notebook
cell), and the caller's `sys.path` is passed on so that they find it. Arguments are
pickled once into the run folder; keep them to a few MB.
"""

from __future__ import annotations

import datetime
import os
import pickle
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.records import read_json
from workbench.training.reporter import ENV_RUN_DIR, RankContext

#: The rank module: the torch engine's launcher runs `python -m workbench.jobs.workers`.
MODULE = "workbench.jobs.workers"
CALL_FILE = "call.pkl"
RESULTS_DIR = "results"


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
    from workbench.jobs.job import start_module

    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    names = list(names or [f"worker {r}" for r in range(world_size)])
    call = {"sys_path": [p or os.getcwd() for p in sys.path],
            "call": pickle.dumps((fn, tuple(args))), "distributed": distributed,
            "timeout_s": timeout}
    with warnings.catch_warnings():
        # Labs run more processes than cores on purpose (most of them wait on messages);
        # the warning stays in the run's summary but is not shown.
        warnings.simplefilter("ignore", UserWarning)
        job = start_module("torch", np=world_size, module=MODULE, runs_dir=runs_dir,
                           name=name, threads_per_rank=1,
                           stall_timeout=min(timeout + 60.0, 86_400.0),
                           extra={"function": f"{fn.__module__}.{fn.__qualname__}",
                                  "workers": names, "settings": settings or {}},
                           files={CALL_FILE: pickle.dumps(call)})
    try:
        status = job.wait(timeout)   # Ctrl-C stops the job, then re-raises
        if not job.done:
            waiting = ", ".join(names[r] for r in range(world_size)
                                if r not in _exit_records(job.run_dir))
            job.stop()
            raise WorkerError(f"the run did not finish within {timeout:g} s; still running: "
                              f"{waiting}. Pass a larger timeout, or fewer epochs/steps "
                              f"(run record: {job.run_dir})")
    finally:
        if not job.done:
            job.stop()
    if status != "succeeded":
        raise WorkerError(_failure_message(job.run_dir, job.summary or {}, names))
    return [_load(job.run_dir / RESULTS_DIR / f"rank{r}.pkl") for r in range(world_size)]


def _failure_message(run_dir: Path, summary: dict[str, Any], names: list[str]) -> str:
    """Name the worker that failed first, with its error and traceback.

    When one worker raises, torchrun ends the others at once; those were only waiting and
    did not fail, so the first error that a worker *reported* is the cause, if any.
    """
    reported = sorted((rec.get("time", 0.0), r) for r, rec in _exit_records(run_dir).items()
                      if not rec.get("ok"))
    if reported:
        rank = reported[0][1]
        failure = _exit_records(run_dir)[rank]
    else:
        failure = summary.get("failure") or {}
        rank = failure.get("rank")
    who = names[rank] if rank is not None and rank < len(names) else "the launcher"
    detail = failure.get("traceback") or failure.get("log_tail") or ""
    return (f"{who} failed: {failure.get('error') or summary.get('status', 'unknown')}\n"
            f"{detail.rstrip()}\nThe other workers were stopped; run record: {run_dir}")


def _exit_records(run_dir: Path) -> dict[int, dict[str, Any]]:
    """{rank: exit record} of the workers that have ended and said how."""
    out = {}
    for f in (run_dir / "exit").glob("rank*.json"):
        rec = read_json(f)
        if rec is not None:
            out[int(f.stem[4:])] = rec
    return out


def _load(path: Path) -> Any:
    with open(path, "rb") as f:
        return pickle.load(f)


def run_dir() -> Path:
    """Inside a worker: the run folder, for files the workers share (Hogwild!'s model)."""
    return Path(os.environ[ENV_RUN_DIR])


# ---------------------------------------------------------------------- the worker's side
def main() -> None:
    """Body of every worker: read the call, join the group, run it, write the result."""
    with RankContext.from_env() as ctx:
        with open(ctx.run_dir / CALL_FILE, "rb") as f:
            call = pickle.load(f)
        sys.path.extend(p for p in call["sys_path"] if p not in sys.path)
        fn, args = pickle.loads(call["call"])  # imports fn's module, from the caller's path
        value = _run(fn, args, ctx.rank, ctx.size, call["distributed"], call["timeout_s"])
        out = ctx.run_dir / RESULTS_DIR
        out.mkdir(exist_ok=True)
        tmp = out / f".rank{ctx.rank}.pkl.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(value, f)
        os.replace(tmp, out / f"rank{ctx.rank}.pkl")  # never a half-written result


def _run(fn: Callable[..., Any], args: tuple, rank: int, size: int, distributed: bool,
         timeout_s: float) -> Any:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # one core per process: the classroom machine has few cores
    if not distributed:
        return fn(rank, size, *args)
    # torchrun's rendezvous: MASTER_ADDR/MASTER_PORT, RANK and WORLD_SIZE in the environment
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    try:
        return fn(rank, size, *args)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
