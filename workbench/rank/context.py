"""How a rank module finds its context: the one its launcher opened, or, under a plain
launcher typed by hand (`torchrun ... -m workbench.training.ddp_rank`), one it makes itself
from `workbench run`'s flags. See docs/ARCHITECTURE.md, "The record of a run".
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES
from workbench.flags import Parser, add_job_flags, config_from_args
from workbench.rank.protocol import Ended, RankContext, attach, current, launcher_identity
from workbench.records import MetricsReader, new_run_dir, read_json, write_json_atomic
from workbench.records.blame import culprit, exit_records, ranks_failure, reported_failure
from workbench.records.liveness import known_ranks, owner_beat
from workbench.records.metrics import summary_of
from workbench.records.resume import apply_resume


def job_config(engine: str) -> JobConfig:
    """The job's configuration: its launcher's `config.json`, or `workbench run`'s flags."""
    ctx = current()
    return ctx.config if ctx is not None else config_from_flags(engine, launcher_identity()[1])


def job_record(cfg: JobConfig, share: Callable[[Any], Any] | None = None) -> RankContext:
    """Its launcher's context, or one in a run folder rank 0 makes and `share` tells the others."""
    ctx = current()
    if ctx is not None:
        return ctx
    rank, size, local_rank = launcher_identity()
    if share is None and size > 1:
        raise SystemExit(f"{size} ranks need a broadcast from rank 0 to share their run folder")
    mine = None
    if rank == 0:
        run_id, run_dir = new_run_dir(cfg.runs_dir, cfg.run_label)
        write_json_atomic(run_dir / "config.json", cfg.to_dict())
        owner_beat(run_dir)  # `workbench runs` says "running" while rank 0 lives, then "lost"
        print(f"run {run_id} -> {run_dir}", flush=True)
        mine = {"run_dir": str(run_dir), "t0": psutil.Process().create_time()}
    shared = share(mine) if share is not None else mine
    ctx = RankContext(Path(shared["run_dir"]), rank, size, local_rank, t0=float(shared["t0"]),
                      supervised=False)
    attach(ctx.__enter__())  # closed by run_main
    return ctx


def this_rank() -> RankContext:
    """The context the launcher opened, for rank modules that run only in a workbench job."""
    ctx = current()
    if ctx is None:
        raise SystemExit(f"{sys.argv[0]}: runs as a rank of a workbench job (started by "
                         "workbench.start_module); on its own, only a training rank module "
                         "runs, e.g. python -m workbench.training.serial_rank")
    return ctx


def from_rank0(value: Any) -> Any:
    """`value` as rank 0 holds it, on every rank: torch.distributed's broadcast (a `share`)."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def config_from_flags(engine: str, size: int, argv: list[str] | None = None) -> JobConfig:
    """`workbench run`'s flags for `engine` on `size` ranks; a bad one exits in one line."""
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


def run_main(main: Callable[[], Any]) -> None:
    """Run a rank module's `main`, then close the context `job_record` opened, if any, with
    how it ended (`sys.exit(0)` is success): the exit record, rank 0's summary."""
    try:
        main()
    except BaseException as exc:
        _close_plain(exc)
        raise
    _close_plain(None)


def _close_plain(exc: BaseException | None) -> None:
    ctx = current()
    if ctx is None or ctx.supervised:
        return  # no context, or the wrapper's: it closes its own
    attach(None)
    if isinstance(exc, SystemExit):
        if exc.code in (None, 0):
            exc = None
        else:
            exc.rank_traceback = f"SystemExit: {exc.code}\n"  # (the frames would be ours)
    # A SIGTERM now (torchrun ends every rank once one has failed) would raise Ended here
    # and lose the record: it is over already.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if exc is None and ctx.ended:
        exc = Ended()
    ctx.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
    if ctx.rank == 0:
        write_summary(ctx, exc)


def first_failure(ctx: RankContext, exc: BaseException) -> dict[str, Any]:
    """The first failure by blame.py's rule (not rank 0 ended in another's wake), else `exc`."""
    exits = exit_records(ctx.run_dir, ctx.size)
    failures = [f for k, record in exits.items()
                if (f := reported_failure(k, record, True, time.time()))]
    if failures and culprit(failures).rank != ctx.rank:
        return ranks_failure(failures, exits)
    return {"rank": ctx.rank, "error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(exc))}


def write_summary(ctx: RankContext, exc: BaseException | None) -> None:
    """Rank 0 of a plain launch, as it ends: summary.json (Ctrl-C: "stopped")."""
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
