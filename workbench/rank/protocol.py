"""The rank protocol: what every process of a job does so the launcher can look after it: a
`RankContext` writes the rank's pid file, log, metrics, heartbeat and exit record, and watches
the job's owner. Why: docs/ARCHITECTURE.md, "Supervision".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from workbench.config import ConfigError, JobConfig
from workbench.records import liveness, metrics_path, read_json, write_json_atomic
from workbench.records.store import CorruptRecord, open_file

#: Environment variables the launcher sets for every rank.
ENV_RUN_DIR = "WORKBENCH_RUN_DIR"
ENV_RUN_ID = "WORKBENCH_RUN_ID"
ENV_OWNER = "WORKBENCH_OWNER"      # "host:pid:start" of the process that started the job
ENV_FILE = "WORKBENCH_ENV_FILE"    # the job's secret variables: a 0600 file (environment.py)
ENV_T0 = "WORKBENCH_T0"            # launch time, seconds since the epoch


class Ended(SystemExit):
    """Raised in a rank by SIGTERM (its launcher's, or a stop's): exit code 128 + 15."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def launcher_identity() -> tuple[int, int, int]:
    """(rank, size, local rank) as horovodrun, torchrun or mpirun set them; else (0, 1, 0)."""
    def first(*names: str, default: int = 0) -> int:
        return next((int(os.environ[n]) for n in names if os.environ.get(n)), default)

    return (first("HOROVOD_RANK", "RANK", "OMPI_COMM_WORLD_RANK"),
            first("HOROVOD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", default=1),
            first("HOROVOD_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"))


#: The context of the rank this process is, once its wrapper (or a plain launch) opened it.
_current: RankContext | None = None


def attach(ctx: RankContext | None) -> None:
    global _current
    _current = ctx


def current() -> RankContext | None:
    return _current


class RankContext:
    """One rank's view of its job; `supervised`: the launcher's (a log and owner watchdog);
    `owns_process`: its end is its process's, not a pool's call's (whose output goes back at
    `restore()`): torchrun hears of it, its exit record is fsynced, a watchdog watches."""

    def __init__(self, run_dir: Path, rank: int, size: int, local_rank: int,
                 t0: float | None = None, supervised: bool = True,
                 owns_process: bool = True) -> None:
        self.run_dir, self.supervised, self.owns_process = run_dir, supervised, owns_process
        self.ended = False  # set when a SIGTERM ended the rank
        self.rank, self.size, self.local_rank = rank, size, local_rank
        self.t0 = t0 if t0 is not None else float(os.environ.get(ENV_T0, time.time()))
        self._exit: dict[str, Any] | None = None   # the exit record, once there is one
        self._beating = threading.Lock()
        self.config = self._load_config()
        self._closing_since: float | None = None  # set while __exit__ writes the exit record
        #: The last step, epoch and time `workbench.report()` wrote here (rank/api.py).
        self.reported: dict[str, float | None] = {"epoch": 0, "step": -1, "time": None}

    def _load_config(self) -> JobConfig:
        """This job's configuration, or exit at once in one line, naming the file."""
        path = self.run_dir / "config.json"
        try:
            data = read_json(path)
            if data is None:
                raise CorruptRecord(f"{path}: no such file (is the runs folder shared at the "
                                    f"same path on host {liveness.this_host()}?)")
            return JobConfig.from_dict(data)
        except (CorruptRecord, ConfigError, TypeError) as exc:
            message = f"rank {self.rank} cannot read its configuration: {exc}"
        with contextlib.suppress(OSError):  # tell the launcher, if we can write there at all
            self._record_exit({"rank": self.rank, "ok": False, "time": time.time(),
                               "host": liveness.this_host(), "error": message})
        sys.stderr.write(f"workbench: {message}\n")
        raise SystemExit(2)

    def __enter__(self) -> RankContext:
        liveness.write_pid_file(self.run_dir / "pids" / f"rank{self.rank}.pid")
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
            signal.signal(signal.SIGTERM, self._on_sigterm)  # so that __exit__ records it
        if self.supervised:
            self._redirect_output()
        if self.supervised and self.owns_process:  # (a pool's rank watches for its calls)
            threading.Thread(target=self._watchdog, name="workbench-watchdog", daemon=True).start()
        self._metrics = open(open_file(metrics_path(self.run_dir, self.rank)), "ab")
        self.metric("event", message="start", host=liveness.this_host(), pid=os.getpid())
        return self

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.ended = True
        raise Ended

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._closing_since = time.monotonic()  # the watchdog lets us finish the record
        record: dict[str, Any] = {"rank": self.rank, "ok": exc is None, "time": time.time()}
        if isinstance(exc, Ended):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends us at once
            record.update(ended_by="SIGTERM", error=(
                f"rank {self.rank} was ended by SIGTERM: its launcher ends every rank once "
                "one has failed, and a stop ends them all"))
            self._record_exit(record)  # now: a second SIGTERM may come before the end
            sys.stderr.write(f"workbench: {record['error']}\n")
        elif exc is not None:
            record["error"] = f"{exc_type.__name__}: {exc}"
            record["traceback"] = getattr(exc, "rank_traceback", None) or "".join(
                traceback.format_exception(exc_type, exc, tb))
            sys.stderr.write(record["traceback"])
            if self.owns_process and (path := os.environ.get("TORCHELASTIC_ERROR_FILE")):
                # torchrun's error file, as its `@record` would write it
                info = {"py_callstack": record["traceback"], "timestamp": str(int(record["time"]))}
                with contextlib.suppress(OSError):
                    Path(path).write_text(json.dumps({"message": {"message": record["error"],
                                                                  "extraInfo": info}}))
        if exc is not None:  # recorded and in the log: not to be printed again (rank/wrapper.py)
            exc.rank_traceback = record.get("traceback", "")
        sys.stdout.flush()
        sys.stderr.flush()
        self._record_exit(record, self.owns_process)
        return False

    def _record_exit(self, record: dict[str, Any], durable: bool = True) -> None:
        """How this rank ended: `exit/rank<k>.json`, and the same in its heartbeat."""
        self._exit = record
        write_json_atomic(self.run_dir / "exit" / f"rank{self.rank}.json", record, durable)
        self._beat()

    def _beat(self) -> None:
        with self._beating:
            liveness.beat(liveness.heartbeat_path(self.run_dir, f"rank{self.rank}"),
                          host=liveness.this_host(), pid=os.getpid(),
                          **({"exit": self._exit} if self._exit else {}))

    def _redirect_output(self) -> None:
        """Send stdout and stderr (fd 1 and 2 too) to the rank's log file."""
        log = open(open_file(self.run_dir / "logs" / f"rank{self.rank}.log"), "a", buffering=1)
        sys.stdout.flush()
        sys.stderr.flush()
        if not self.owns_process:  # a pool's call gives them back (`restore`)
            self._saved = (os.dup(1), os.dup(2), sys.stdout, sys.stderr)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log

    def restore(self) -> None:
        """A pool call's end: the rank's output as it was before, the call's files closed."""
        log = sys.stdout
        out, err, sys.stdout, sys.stderr = self._saved
        for fd, saved in ((1, out), (2, err)):
            os.dup2(saved, fd)
            os.close(saved)
        log.close()
        self._metrics.close()

    def _watchdog(self, period_s: float = 0.5) -> None:
        """Keep this rank's heartbeat fresh; exit when the owner says stop or is gone."""
        try:
            host, pid, created = os.environ.get(ENV_OWNER, "").rsplit(":", 2)
            owner = host, int(pid), float(created)
        except ValueError:
            owner = None
        owner_file = liveness.Staleness(liveness.heartbeat_path(self.run_dir, "owner"))
        last_beat = 0.0
        while True:
            if time.monotonic() - last_beat >= liveness.HEARTBEAT_PERIOD_S:
                self._beat()
                last_beat = time.monotonic()
            if (liveness.read_beat(owner_file.path) or {}).get("state") == "stop":
                self._leave("the job was stopped")
            if owner is not None and owner[0] == liveness.this_host():
                if not liveness.process_alive(*owner[1:]):
                    self._leave(f"the process that started the job (pid {owner[1]}) is gone")
            elif owner is not None and owner_file.age() > liveness.OWNER_STALE_S:
                self._leave(f"no heartbeat from the job's owner on {owner[0]} for "
                            f"{liveness.OWNER_STALE_S:g} s")
            time.sleep(period_s)

    def _leave(self, why: str, grace_s: float = 5.0) -> None:
        """Exit now, saying why in the log; unless writing the exit record (up to `grace_s`)."""
        if self._closing_since is not None and time.monotonic() - self._closing_since < grace_s:
            return
        sys.stderr.write(f"workbench: rank exiting: {why}\n")
        sys.stderr.flush()
        os._exit(3)

    def now(self) -> float:
        return time.time() - self.t0

    def metric(self, kind: str, *rows: dict[str, Any], **fields: Any) -> None:
        """Append one metrics line: {"kind", "rank", "time", **fields}; given `rows`, one
        line per row, in one write (the training loop's step lines, training/timing.py)."""
        now = round(self.now(), 6)
        lines = [json.dumps({"kind": kind, "rank": self.rank, "time": now, **row}) + "\n"
                 for row in rows or [fields]]
        self._metrics.write("".join(lines).encode())  # every byte: BufferedWriter retries
        self._metrics.flush()

    def write_result(self, result: dict[str, Any]) -> None:
        """Rank 0's result of the job (final metrics, benchmark rows...): result.json."""
        write_json_atomic(self.run_dir / "result.json", result)


def owner_id() -> str:
    """This process as a job owner (ENV_OWNER): "host:pid:start" (`liveness.started()`)."""
    return f"{liveness.this_host()}:{os.getpid()}:{liveness.started()}"
