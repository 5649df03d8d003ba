"""The rank protocol: what every process of a job does so the launcher can look after it.

A rank module wraps its work in `with RankContext.from_env() as ctx:`. On entry the
context writes the rank's pid (so the launcher can reap it even though `horovodrun` puts
ranks in sessions of their own), sends stdout/stderr to `logs/rank<k>.log`, and starts a
watchdog that ends the rank if the Python process that started the job dies. On exit it
writes `exit/rank<k>.json`: success, or the error and its traceback.

`ctx.metric(...)` appends one JSON line to `metrics.jsonl`. Each line is written with a
single `os.write` on a file opened with O_APPEND, so lines from several ranks never
interleave and a crash never leaves a half-written line behind a complete one.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from workbench.config import JobConfig
from workbench.records.store import write_json_atomic

#: Environment variables the launcher sets for every rank.
ENV_RUN_DIR = "WORKBENCH_RUN_DIR"
ENV_RUN_ID = "WORKBENCH_RUN_ID"
ENV_OWNER = "WORKBENCH_OWNER"      # "pid:create_time" of the process that started the job
ENV_T0 = "WORKBENCH_T0"            # launch time, seconds since the epoch


def _env_int(*names: str, default: int = 0) -> int:
    """The first of `names` that is set, as an int (launchers use different names)."""
    for name in names:
        if os.environ.get(name, "") != "":
            return int(os.environ[name])
    return default


class RankContext:
    """One rank's view of its job: identity, run folder, configuration and reporting."""

    def __init__(self, run_dir: Path, rank: int, size: int, local_rank: int) -> None:
        self.run_dir = run_dir
        self.rank, self.size, self.local_rank = rank, size, local_rank
        self.t0 = float(os.environ.get(ENV_T0, time.time()))
        cfg_path = run_dir / "config.json"
        self.config = JobConfig.from_dict(json.loads(cfg_path.read_text())) \
            if cfg_path.exists() else JobConfig()
        self._metrics_fd = -1

    @classmethod
    def from_env(cls) -> RankContext:
        """Build the context from the variables set by the launcher and by horovodrun/torchrun."""
        run_dir = Path(os.environ[ENV_RUN_DIR])
        rank = _env_int("HOROVOD_RANK", "RANK", "OMPI_COMM_WORLD_RANK")
        size = _env_int("HOROVOD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", default=1)
        local = _env_int("HOROVOD_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
        return cls(run_dir, rank, size, local)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> RankContext:
        for sub in ("logs", "pids", "exit"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.run_dir / "pids" / f"rank{self.rank}.pid").write_text(str(os.getpid()))
        self._redirect_output()
        self._metrics_fd = os.open(self.run_dir / "metrics.jsonl",
                                   os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        threading.Thread(target=self._watch_owner, daemon=True).start()
        self.metric("event", message="start", host=socket.gethostname(), pid=os.getpid())
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        record: dict[str, Any] = {"rank": self.rank, "ok": exc is None, "time": time.time()}
        if exc is not None:
            record["error"] = f"{exc_type.__name__}: {exc}"
            # A rank running a user's own code (workbench.launch) sets `rank_traceback` to
            # the frames of that code only: the workbench's own frames would hide the error.
            record["traceback"] = getattr(exc, "rank_traceback", None) or "".join(
                traceback.format_exception(exc_type, exc, tb))
            sys.stderr.write(record["traceback"])
        sys.stdout.flush()
        sys.stderr.flush()
        write_json_atomic(self.run_dir / "exit" / f"rank{self.rank}.json", record)
        return False

    def _redirect_output(self) -> None:
        """Send this process's stdout and stderr (fd 1 and 2) to its log file."""
        log = open(self.run_dir / "logs" / f"rank{self.rank}.log", "a", buffering=1)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log

    @staticmethod
    def _watch_owner(period_s: float = 0.5) -> None:
        """End this rank if the process that started the job is gone (e.g. a dead kernel)."""
        owner = os.environ.get(ENV_OWNER)
        if not owner:
            return
        import psutil

        pid, created = owner.split(":")
        while True:
            try:
                alive = abs(psutil.Process(int(pid)).create_time() - float(created)) < 1.0
            except psutil.Error:
                alive = False
            if not alive:
                os._exit(3)
            time.sleep(period_s)

    # ------------------------------------------------------------------ reporting
    def now(self) -> float:
        """Seconds since the job was launched."""
        return time.time() - self.t0

    def metric(self, kind: str, **fields: Any) -> None:
        """Append one metrics line: {"kind", "rank", "time", **fields}."""
        line = json.dumps({"kind": kind, "rank": self.rank, "time": round(self.now(), 6),
                           **fields})
        os.write(self._metrics_fd, (line + "\n").encode())

    def write_result(self, result: dict[str, Any]) -> None:
        """Rank 0's result of the job (final metrics, benchmark rows...): result.json."""
        write_json_atomic(self.run_dir / "result.json", result)
