"""Run a Python function on a few worker processes: how the labs start their processes.

The labs (parameter server, Hogwild!, ring allreduce, pipelines, the data-vs-model
comparison) need what they teach, waiting, staleness, bubbles, to happen between *real*
processes. They start them as jobs, through the same `Job` as training (job.py), so there
is one supervisor with one set of mechanisms:

- `run_workers(fn, n, args)` starts a job with `start_module` on the `fork` engine. Every
  worker is a rank under `RankContext`, so every lab run leaves a run folder under the runs
  folder (`config.json`, `logs/rank<k>.log`, `pids/`, `exit/rank<k>.json`, `summary.json`),
  listed by `workbench runs` and `workbench show` like any job;
- the function and its arguments travel in the run folder (`call.pkl`, pickled); each
  worker's return value comes back the same way (`results/rank<k>.pkl`);
- with `distributed=True` the workers join a gloo group through a `FileStore` in the run
  folder (no port to choose, so no port to lose to another program), so `fn` can use
  `dist.send`/`dist.recv` and collectives;
- failures, timeouts and Ctrl-C are handled by the `Job`: a worker that raises or dies ends
  the run at once, the others are ended (they may be blocked in `recv` waiting for it) and
  `WorkerError` names the worker that failed; a dead kernel ends the workers through their
  owner watchdog; processes.py reaps them. No process is left behind.

**Why a fork engine and not torchrun, as training uses.** Most of a lab worker's start-up is
`import torch` (about 2.7 s of CPU here). torchrun is one more interpreter that imports
torch before it starts the workers, which then import it again, each; notebooks 03 and 04
start six lab runs, mostly on 2-core machines. The `fork` engine's launcher is this module
(`python -m workbench.jobs.workers --fork N`): it imports torch and the lab's code once,
then `os.fork()`s the N workers, which start with everything already imported. Forking is
safe here because the launcher is a fresh interpreter that has started no thread and
touched no GPU; the workers are its only children. The limits: one host, CPU tensors only.
Training jobs, which need several hosts and Horovod, keep horovodrun and torchrun.

`fn` must live in an importable module (not a notebook cell); the caller's `sys.path` is
passed on so that the launcher finds it. Arguments are pickled once into the run folder;
keep them to a few MB.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pickle
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from workbench.jobs.processes import exit_records, rank_pids
from workbench.records import RunRecord
from workbench.records.private import load_own_pickle
from workbench.records.store import atomic_file
from workbench.training.reporter import ENV_RUN_DIR, RankContext

#: The fork engine runs `python -m workbench.jobs.workers --fork N` as the launcher.
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
    from workbench.jobs.starting import start_module

    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if fn.__module__ == "__main__":
        raise ValueError(f"{fn.__qualname__} is defined in __main__ (a notebook cell or a "
                         "script), which the workers cannot import: move it to a .py module")
    names = list(names or [f"worker {r}" for r in range(world_size)])
    call = {"sys_path": [p or os.getcwd() for p in sys.path],
            "call": pickle.dumps((fn, tuple(args))), "distributed": distributed,
            "timeout_s": timeout}
    with warnings.catch_warnings():
        # Labs run more processes than cores on purpose (most of them wait on messages);
        # the warning stays in the run's summary but is not shown.
        warnings.simplefilter("ignore", UserWarning)
        job = start_module("fork", np=world_size, module=MODULE, runs_dir=runs_dir,
                           name=name, threads_per_rank=1,
                           stall_timeout=min(timeout + 60.0, 86_400.0),
                           extra={"function": f"{fn.__module__}.{fn.__qualname__}",
                                  "workers": names, "settings": settings or {}},
                           files={CALL_FILE: pickle.dumps(call)})
    try:
        status = job.wait(timeout)   # Ctrl-C stops the job, then re-raises
        if not job.done:
            raise WorkerError(_timeout_message(job, timeout, names))
    finally:
        if not job.done:
            job.stop()
    if status != "succeeded":
        raise WorkerError(_failure_message(job.run_dir, job.summary or {}, names))
    return [load_own_pickle(job.run_dir / RESULTS_DIR / f"rank{r}.pkl", job.run_dir)
            for r in range(world_size)]


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


def run_folder() -> Path:
    """Inside a worker: the run folder, for files the workers share (Hogwild!'s model)."""
    return Path(os.environ[ENV_RUN_DIR])


# ---------------------------------------------------------------------- the launcher's side
def main(argv: list[str] | None = None) -> None:
    """The fork engine's launcher: import everything once, fork the workers, wait for them.

    Exits 0 when every worker did, else 1. It does not stop the other workers when one
    fails: the `Job` watching the run does that, for every engine alike.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--fork", type=int, required=True, metavar="N", help="workers")
    size = parser.parse_args(argv).fork
    call = load_own_pickle(run_folder() / CALL_FILE, run_folder())  # ours only: see private.py
    sys.path.extend(p for p in call["sys_path"] if p not in sys.path)
    import torch.distributed  # noqa: F401  (imported once here, not once per worker)

    fn, args = pickle.loads(call["call"])  # imports fn's module, from the caller's path
    children = {}
    for rank in range(size):
        pid = os.fork()
        if pid == 0:
            _worker(rank, size, fn, args, call)  # never returns
        children[pid] = rank
    failed = False
    while children:
        pid, status = os.wait()
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            print(f"worker rank {children[pid]} (pid {pid}) exited with code {code}",
                  flush=True)
            failed = True
        del children[pid]
    sys.exit(1 if failed else 0)


# ---------------------------------------------------------------------- the worker's side
def _worker(rank: int, size: int, fn: Callable[..., Any], args: tuple,
            call: dict[str, Any]) -> NoReturn:
    """Body of every forked worker: run `fn` as a rank, write its result, and exit.

    It ends with `os._exit`, never by returning: returning would run the launcher's loop.
    """
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank))
    code, entered = 1, False
    try:
        with RankContext.from_env() as ctx:  # pid file, log, owner watchdog, exit record
            entered = True
            value = _run(fn, args, ctx, call["distributed"], call["timeout_s"])
            _write_result(ctx.run_dir / RESULTS_DIR / f"rank{rank}.pkl", value)
        code = 0
    except BaseException:
        if not entered:  # failed before the exit record could say why: say it here
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run(fn: Callable[..., Any], args: tuple, ctx: RankContext, distributed: bool,
         timeout_s: float) -> Any:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # one core per process: the classroom machine has few cores
    if not distributed:
        return fn(ctx.rank, ctx.size, *args)
    store = dist.FileStore(str(ctx.run_dir / "rendezvous"), ctx.size)
    dist.init_process_group("gloo", store=store, rank=ctx.rank, world_size=ctx.size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    value = fn(ctx.rank, ctx.size, *args)
    # Only on success: a failed worker keeps its connections open until its exit record is
    # written, so the others' "connection closed" errors come later and are not taken for
    # the cause.
    dist.destroy_process_group()
    return value


def _write_result(path: Path, value: Any) -> None:
    """Pickle `value` to `path` through a temporary name: never a half-written result."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with atomic_file(path) as f:
        pickle.dump(value, f)


if __name__ == "__main__":
    main()
