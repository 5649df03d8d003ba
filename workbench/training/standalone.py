"""A rank started by plain `torchrun`, `horovodrun` or `python`, without the workbench.

    torchrun --standalone --nproc-per-node 2 -m workbench.training.ddp_rank --epochs 1
    horovodrun -np 2 --gloo -H localhost:2 python -m workbench.training.horovod_rank
    python -m workbench.training.serial_rank --batch-size 64

The workbench's launcher gives each rank its run folder (WORKBENCH_RUN_DIR) and looks after
it. Without it, the ranks keep the same record themselves:

- The flags are those of `workbench run` (config.py `add_job_flags`); the engine is the
  one whose rank module runs, and `np` is the number of ranks the launcher started.
- Rank 0 creates the run folder under `--runs-dir` (./runs), named as every run is
  (records/store.py `new_run_dir`), and writes `config.json`; the other ranks learn the
  folder's name and read `config.json` from it, as under the workbench's launcher.
- No owner watchdog: the process that owns the ranks is the launcher the user typed, and it
  ends them itself (Ctrl-C, or one rank failing). Their output stays on its terminal.
- Rank 0 writes `summary.json` as it ends, with the figures the workbench's launcher
  computes (records/summary.py), so `workbench show RUN` opens the run like any other.

How the ranks agree on one folder. The name is made once, by rank 0 (a time stamp and
random letters), so the others must hear it from rank 0. Not through the process group:
a rank enters its context, which needs the folder, *before* joining the group, so that a
join that fails is recorded in the folder like any other error. Nor from a name every
rank could derive: torchrun's TORCHELASTIC_RUN_ID is unique only under `--standalone`,
and horovodrun gives its ranks no such id. But each launcher already runs a key-value store
for its own rendezvous, which every rank can reach before it joins and which lives exactly
as long as this launch: rank 0 writes the folder's name there, the others wait for it.

- torchrun: its TCP store at MASTER_ADDR:MASTER_PORT (the agent's; torch.distributed
  TCPStore);
- horovodrun --gloo: its HTTP store at HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

from workbench.config import ConfigError, JobConfig
from workbench.flags import Parser, add_job_flags, config_from_args
from workbench.records import MetricsReader, new_run_dir, read_json, write_json_atomic
from workbench.records.liveness import known_ranks, owner_beat
from workbench.records.resume import apply_resume
from workbench.records.summary import summary_of
from workbench.training.rank_protocol import RankContext

#: The key under which rank 0 leaves {"run_dir", "t0"} in the launcher's store.
RUN_KEY = "workbench_run"
#: How long the other ranks wait for rank 0 to create the folder, in seconds.
WAIT_S = 120.0


class StandaloneContext(RankContext):
    """A rank's context when it was started without the workbench's launcher."""

    def _supervise(self) -> None:
        """Nothing to add: output stays with the launcher, which also ends the ranks."""

    def __exit__(self, exc_type, exc, tb) -> bool:
        super().__exit__(exc_type, exc, tb)
        if self.rank == 0:
            write_summary(self, exc)
        return False


def standalone_context(rank: int, size: int, local_rank: int) -> StandaloneContext:
    """The context of a rank of a plain launch: rank 0 makes the run folder, all share it."""
    engine, module = running_engine()
    cfg = config_from_flags(engine, module, size)  # every rank: a typo stops them all at once
    store = launcher_store(size)
    if rank == 0:
        shared = {"run_dir": str(create_run(cfg)), "t0": psutil.Process().create_time()}
        store.put(shared)
    else:
        shared = store.get()
    return StandaloneContext(Path(shared["run_dir"]), rank, size, local_rank,
                             t0=float(shared["t0"]))


def running_engine() -> tuple[str, str]:
    """(engine, module): the engine whose rank module this process runs (`-m <module>`)."""
    from workbench.engines import ENGINES  # the engines' table says which is whose

    spec = getattr(sys.modules["__main__"], "__spec__", None)
    module = spec.name if spec else None
    for name, engine in ENGINES.items():
        if module and engine.rank_module == module:
            return name, module
    raise SystemExit(f"{module or sys.argv[0]}: runs as a rank of a workbench job "
                     "(workbench.start_module sets WORKBENCH_RUN_DIR); on its own, only a "
                     "training rank module runs, e.g. python -m workbench.training.serial_rank")


def config_from_flags(engine: str, module: str, size: int,
                      argv: list[str] | None = None) -> JobConfig:
    """The job's configuration from `workbench run`'s flags (`argv`, else the command
    line); exits with code 2 and one line naming a bad flag."""
    parser = Parser(  # the `workbench` command's parser: an error is one line, exit code 2
        prog=f"python -m {module}",
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
    """Rank 0: a new run folder holding `config.json`, looked after by this process."""
    run_id, run_dir = new_run_dir(cfg.runs_dir, f"{cfg.name or cfg.engine}-np{cfg.world_size}")
    write_json_atomic(run_dir / "config.json", cfg.to_dict())
    owner_beat(run_dir)  # `workbench runs` says "running" while rank 0 lives, then "lost"
    print(f"run {run_id} -> {run_dir}", flush=True)
    return run_dir


# ---------------------------------------------------------------------- the launchers' stores
class TorchrunStore:
    """torchrun's rendezvous store (a TCP key-value store), as a client."""

    def __init__(self) -> None:
        import datetime

        import torch.distributed as dist

        self.store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                   is_master=False, timeout=datetime.timedelta(seconds=WAIT_S))

    def put(self, value: dict[str, Any]) -> None:
        self.store.set(RUN_KEY, json.dumps(value))

    def get(self) -> dict[str, Any]:
        return json.loads(self.store.get(RUN_KEY))  # waits until rank 0 has set it


class HorovodrunStore:
    """horovodrun's gloo rendezvous server (an HTTP key-value store), as a client."""

    def __init__(self) -> None:
        self.addr = os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
        self.port = os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]

    def put(self, value: dict[str, Any]) -> None:
        from horovod.runner.http.http_client import put_data_into_kvstore

        put_data_into_kvstore(self.addr, self.port, "workbench", RUN_KEY, value)

    def get(self) -> dict[str, Any]:
        from horovod.runner.http.http_client import read_data_from_kvstore

        deadline = time.monotonic() + WAIT_S
        while True:  # a key not set yet answers 404: ask again
            try:
                return read_data_from_kvstore(self.addr, self.port, "workbench", RUN_KEY)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


class NoStore:
    """One rank: nobody to tell."""

    def put(self, value: dict[str, Any]) -> None:
        """Nothing to share."""

    def get(self) -> dict[str, Any]:
        raise RuntimeError("a single rank has no peers to hear from")


def launcher_store(size: int) -> TorchrunStore | HorovodrunStore | NoStore:
    """The key-value store of the launcher that started this rank."""
    if size == 1:
        return NoStore()
    if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ:
        return HorovodrunStore()
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return TorchrunStore()
    raise SystemExit(f"{size} ranks without the workbench's launcher must be started by "
                     "torchrun or horovodrun --gloo, whose store tells every rank the run "
                     "folder")


def launcher_name() -> str:
    """Who started this rank, as the summary's `launcher` says it."""
    if "HOROVOD_RANK" in os.environ:
        return "horovodrun"
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "python"


# ---------------------------------------------------------------------- the summary
def write_summary(ctx: RankContext, exc: BaseException | None) -> None:
    """Rank 0, as it ends: summary.json, as the workbench's launcher would write it."""
    cfg, run_dir = ctx.config, ctx.run_dir
    status = ("succeeded" if exc is None else
              "stopped" if isinstance(exc, KeyboardInterrupt) else "failed")  # Ctrl-C: stopped
    summary = summary_of(run_dir, status, cfg.engine, ctx.size, launcher_name(),
                         known_ranks(run_dir, ctx.size), cfg.resolved_threads(), ctx.t0,
                         MetricsReader(run_dir).all(), read_json(run_dir / "result.json"), [])
    if exc is not None:
        summary["failure"] = {"rank": ctx.rank, "error": f"{type(exc).__name__}: {exc}",
                              "traceback": "".join(traceback.format_exception(exc))}
    write_json_atomic(run_dir / "summary.json", summary)
    print(f"{summary['status']}: {run_dir.name} (workbench show {run_dir.name} "
          f"--runs-dir {run_dir.parent})", flush=True)
