"""How a rank module finds its context: the one its launcher opened, or one it makes itself.

Under the workbench's launcher the rank wrapper (rank/wrapper.py) opened the rank's
context (rank/protocol.py) before the module's first line. The same module also runs under
a plain launcher, typed by hand:

    torchrun --standalone --nproc-per-node 2 -m workbench.training.ddp_rank --epochs 1
    horovodrun -np 2 --gloo -H localhost:2 python -m workbench.training.horovod_rank
    python -m workbench.training.serial_rank --batch-size 64

Then the flags of `workbench run` configure it, and once the ranks have joined, rank 0
makes the run folder under `--runs-dir` (records/store.py `new_run_dir`) and broadcasts its
name. Every rank keeps the same record as under the workbench's launcher, less that
launcher's care: output stays on the terminal, no watchdog runs (the typed launcher ends
the ranks itself), and a failure to join is not recorded. Rank 0 writes `summary.json` as
it ends (records/summary.py), so `workbench show RUN` opens the run like any other.

A rank module's own lines for it, in order:

    cfg = job_config("torch")                  # the launcher's config.json, or the flags
    dist.init_process_group("gloo")            # join the job
    ctx = job_record(cfg, share=from_rank0)    # the launcher's run folder, or a new one
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import psutil

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES
from workbench.flags import Parser, add_job_flags, config_from_args
from workbench.rank.protocol import (
    Ended,
    RankContext,
    attach,
    current,
    launcher_identity,
)
from workbench.records import (
    CorruptRecord,
    MetricsReader,
    new_run_dir,
    read_json,
    write_json_atomic,
)
from workbench.records.blame import culprit, reported_failure
from workbench.records.liveness import known_ranks, owner_beat
from workbench.records.resume import apply_resume
from workbench.records.summary import summary_of


def job_config(engine: str) -> JobConfig:
    """The job's configuration: its launcher's `config.json`, or under a plain launcher the
    flags of `workbench run` on the command line (see `config_from_flags`)."""
    ctx = current()
    if ctx is not None:
        return ctx.config
    return config_from_flags(engine, launcher_identity()[1])


def job_record(cfg: JobConfig, share: Callable[[Any], Any] | None = None) -> RankContext:
    """This rank's context: the one its launcher opened, or under a plain launcher a new run
    folder, which rank 0 makes and `share` (a broadcast from rank 0, called on every rank
    once they have joined) tells the others."""
    ctx = current()
    if ctx is not None:
        return ctx
    rank, size, local_rank = launcher_identity()
    if share is None and size > 1:
        raise SystemExit(f"{size} ranks need a broadcast from rank 0 to share their run folder")
    mine = {"run_dir": str(create_run(cfg)), "t0": psutil.Process().create_time()} \
        if rank == 0 else None
    shared = share(mine) if share is not None else mine
    ctx = RankContext(Path(shared["run_dir"]), rank, size, local_rank, t0=float(shared["t0"]),
                      supervised=False)
    attach(ctx.__enter__())
    _close_at_exit(ctx)
    return ctx


def this_rank() -> RankContext:
    """The context the launcher opened (for rank modules that run only as a workbench job:
    the labs', the pools')."""
    ctx = current()
    if ctx is None:
        raise SystemExit(f"{sys.argv[0]}: runs as a rank of a workbench job (started by "
                         "workbench.start_module); on its own, only a training rank module "
                         "runs, e.g. python -m workbench.training.serial_rank")
    return ctx


def from_rank0(value: Any) -> Any:
    """`value` as rank 0 holds it, on every rank: one broadcast over torch.distributed's
    default group (the `share` of torchrun's ranks)."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def config_from_flags(engine: str, size: int, argv: list[str] | None = None) -> JobConfig:
    """The job's configuration from `workbench run`'s flags, for the module's engine and the
    `size` ranks the launcher started; a bad flag exits with code 2 and one line (on every
    rank at once), as the `workbench` command's parser does."""
    parser = Parser(
        prog=f"python -m {ENGINES[engine].rank_module}",
        description="One rank of a training job, started without the workbench's launcher. "
                    "It takes the flags of `workbench run`.")
    add_job_flags(parser)
    args = parser.parse_args(argv)
    if args.engine not in (None, engine):
        parser.error(f"--engine {args.engine}: this module is the {engine} engine's rank")
    if args.np not in (None, size):
        parser.error(f"--np {args.np}: the launcher started {size} rank(s)")
    try:
        return apply_resume(config_from_args(args, engine=engine, np=size)).validate()
    except ConfigError as exc:
        parser.error(str(exc))  # exits


def create_run(cfg: JobConfig) -> Path:
    """Rank 0 of a plain launch: a new run folder holding `config.json`."""
    run_id, run_dir = new_run_dir(cfg.runs_dir, cfg.run_label)
    write_json_atomic(run_dir / "config.json", cfg.to_dict())
    owner_beat(run_dir)  # `workbench runs` says "running" while rank 0 lives, then "lost"
    print(f"run {run_id} -> {run_dir}", flush=True)
    return run_dir


def _close_at_exit(ctx: RankContext) -> None:
    """Close `ctx` when the process ends, with the error that ended it: its exit record, and
    on rank 0 the summary. `atexit` cannot see that error, so `sys.excepthook` keeps it;
    the hook never sees a SystemExit, so `sys.exit` keeps a non-zero one raised on the main
    thread (0 is success, as under the rank wrapper; in another thread it ends only that
    thread). The last error kept is the one named. Limits: a `sys.exit(n)` the code catches
    and carries on from still counts as a failure, and a bare `raise SystemExit(n)` or an
    `os._exit` goes unseen. A SIGTERM the context sees itself."""
    failed: list[BaseException] = []
    shown = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        failed.append(exc)
        shown(exc_type, exc, tb)

    def leave(code: Any = None) -> NoReturn:
        exc = SystemExit(code)
        if code not in (None, 0) and threading.current_thread() is threading.main_thread():
            exc.rank_traceback = f"SystemExit: {code}\n"  # (the frames would be ours)
            failed.append(exc)
        raise exc

    def close() -> None:
        # A SIGTERM now (torchrun ends every rank once one has failed) would raise Ended
        # inside this handler and lose the record: it is over already.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        exc = failed[-1] if failed else None
        if exc is None and ctx.ended:
            exc = Ended()
        ctx.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        if ctx.rank == 0:
            write_summary(ctx, exc)

    sys.excepthook, sys.exit = hook, leave
    atexit.register(close)


def first_failure(ctx: RankContext, exc: BaseException) -> dict[str, Any]:
    """The failure a plain launch's summary names: the first rank whose exit record reports
    an error (records/blame.py), not rank 0 when its launcher only ended it with SIGTERM
    because another rank had failed; else rank 0's own `exc`."""
    records = {k: _exit_record(ctx.run_dir, k) for k in range(ctx.size)}
    first = culprit(f for k, record in records.items() if record
                    if (f := reported_failure(k, record, True, time.time())))
    if first is None or first.rank == ctx.rank:
        return {"rank": ctx.rank, "error": f"{type(exc).__name__}: {exc}",
                "traceback": "".join(traceback.format_exception(exc))}
    return {"rank": first.rank, "error": first.error,
            "traceback": records[first.rank].get("traceback")}


def _exit_record(run_dir: Path, rank: int) -> dict[str, Any] | None:
    """A rank's exit record, or None where none can be read (the summary then names rank
    0's own error)."""
    try:
        record = read_json(run_dir / "exit" / f"rank{rank}.json")
    except (CorruptRecord, OSError):
        return None
    return record if isinstance(record, dict) else None


def write_summary(ctx: RankContext, exc: BaseException | None) -> None:
    """Rank 0 of a plain launch, as it ends: summary.json, as the workbench's launcher would
    write it (Ctrl-C: "stopped")."""
    cfg, run_dir = ctx.config, ctx.run_dir
    status = ("succeeded" if exc is None else
              "stopped" if isinstance(exc, KeyboardInterrupt) else "failed")
    launcher = ("horovodrun" if "HOROVOD_RANK" in os.environ else
                "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "python")
    summary = summary_of(run_dir, status, cfg.engine, ctx.size, launcher,
                         known_ranks(run_dir, ctx.size), cfg.resolved_threads(), ctx.t0,
                         MetricsReader(run_dir).all(), read_json(run_dir / "result.json"), [])
    if exc is not None:
        summary["failure"] = first_failure(ctx, exc)
    write_json_atomic(run_dir / "summary.json", summary)
    print(f"{summary['status']}: {run_dir.name} (workbench show {run_dir.name} "
          f"--runs-dir {run_dir.parent})", flush=True)
