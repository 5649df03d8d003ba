"""Ending a job: every process ended, then its record completed, whatever went wrong.

A job ends once, whoever asks first: the watcher (watch.py), `stop()`, or Python's exit.
Ending tells remote ranks to stop (the owner's heartbeat says "stop"), has the launcher end
what it runs elsewhere (a Slurm job is cancelled), ends every local process of the job
(SIGTERM, then SIGKILL: processes.py), gives the job's cores back (cores.py) and writes
`summary.json` atomically: how the job ran (ranks, cores, times), what its metrics add up
to (records/summary.py) and, if it failed, which rank, with the last lines of its log. If
any step fails (a full disk, an unreadable file), the job still ends, as "failed" with that
error in the summary: it never stays "running" for ever.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import traceback
from typing import Any

from workbench.config import ConfigError
from workbench.launch.environment import SECRETS_FILE
from workbench.launch.processes import job_processes, terminate
from workbench.launch.watch import _one_line
from workbench.records import RunRecord, write_json_atomic
from workbench.records.blame import launcher_tail
from workbench.records.liveness import known_ranks, owner_beat, this_host
from workbench.records.summary import summary_of


class Ending:
    """The part of `Job` that ends it."""

    def _finish(self, status: str, failure: dict[str, Any] | None = None) -> None:
        """End all processes, then write summary.json. Runs once, whoever calls first.

        Ctrl-C cannot cut it short: called from the main thread (where Python raises
        KeyboardInterrupt), the work runs in a thread of its own, and a Ctrl-C meanwhile is
        raised once the job has ended.
        """
        if threading.current_thread() is not threading.main_thread():
            return self._end(status, failure)
        ended, raised = threading.Event(), []

        def end() -> None:
            try:
                self._end(status, failure)
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                raised.append(exc)
            finally:
                ended.set()

        threading.Thread(target=end, name=f"finish-{self.run_id}").start()
        interrupted = False  # from here on the job ends, even if a Ctrl-C escapes the loop
        while not ended.is_set():
            try:
                ended.wait()
            except KeyboardInterrupt:
                interrupted = True  # the job ends first
        if raised:
            raise raised[0]
        if interrupted:
            raise KeyboardInterrupt

    def _end(self, status: str, failure: dict[str, Any] | None = None) -> None:
        """_finish's work. Whatever fails in here, the job ends: status and `done` are set
        in `finally`."""
        survivors: list = []
        with self._lock:
            if self._done.is_set():
                return
            summary: dict[str, Any] = {"run_id": self.run_id, "run_dir": str(self.run_dir),
                                       "status": status}
            try:
                survivors = self._end_processes()
                if failure:
                    failure.update(self._log_tail(failure.get("rank")))
                summary = self._summary(status, failure)
                if survivors:
                    summary["survivors"] = [p.pid for p in survivors]
            except Exception as exc:  # noqa: BLE001 - the job must end whatever happens
                status = "failed"
                summary.update(status=status, failure={
                    "rank": None, "error": f"ending the job failed: {_one_line(exc)}",
                    "traceback": traceback.format_exc(), "first_outcome": failure})
            try:
                write_json_atomic(self.run_dir / "summary.json", summary, self.durable)
            except Exception as exc:  # noqa: BLE001 - read-only or full disk: say so
                status = "failed"
                summary.update(status=status, failure={
                    **(summary.get("failure") or {}), "rank": None,
                    "error": f"could not write {self.run_dir / 'summary.json'}: "
                             f"{_one_line(exc)}", "first_outcome": failure})
            finally:
                self._failure = summary.get("failure")
                self._summary_data = summary
                self._status = status
                self._done.set()
        if survivors:
            raise RuntimeError(f"processes {[p.pid for p in survivors]} of {self.run_id} "
                               "survived SIGKILL")

    def _end_processes(self) -> list:
        """Tell remote ranks to stop (heartbeat), end local ones; return any survivors."""
        try:
            self._stopping = True
            owner_beat(self.run_dir, stop=True)
            if self._proc is not None:  # e.g. Slurm: scancel, and wait until it has ended
                self._proc.end()
        finally:  # a failed write must not spare the local processes
            survivors = terminate(job_processes(self.run_id, self.run_dir, self.launcher_pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                if self._proc is not None:
                    self._proc.wait(timeout=2)
            with contextlib.suppress(OSError, ConfigError):  # never lose the summary for it
                self._ticket.release()  # the processes are gone: the cores are free again
            (self.run_dir / SECRETS_FILE).unlink(missing_ok=True)  # read by every rank by now
        return survivors

    def _log_tail(self, rank: int | None) -> dict[str, str]:
        """The failed rank's last log lines; the launcher's when the rank's log is empty
        (a rank that died before it could redirect its output left its error there)."""
        record = RunRecord(self.run_dir)
        if rank is not None:
            tail = record.log(rank, last=20)
            if tail.strip():
                return {"log_tail": tail, "log": f"rank{rank}.log"}
        return {"log_tail": launcher_tail(record.log("launcher", last=200)),
                "log": "launcher.log"}

    def _summary(self, status: str, failure: dict[str, Any] | None) -> dict[str, Any]:
        """summary.json: how the job ran here (ranks, cores, times), then what its metrics
        add up to (records/summary.py, shared with runs started by plain launchers)."""
        cfg = self.config
        summary = summary_of(self.run_dir, status, cfg.engine, self.world_size, cfg.launcher,
                             known_ranks(self.run_dir, self.world_size),
                             cfg.resolved_threads(), self._started, self._reader.all(),
                             self.result(), self.warnings)
        summary.update(launcher_process={"pid": self.launcher_pid, "host": this_host()},
                       cores=self._ticket.cores,
                       queued_s=(self._started if self._proc else time.time()) - self._asked)
        if self._reader.bad_lines:
            summary["warnings"] = [*self.warnings, f"{self._reader.bad_lines} metrics line(s) "
                                   "were not valid JSON and were skipped"]
        if self._proc is not None:
            summary.update(self._proc.facts())  # e.g. Slurm's job id and state
        if failure:
            summary["failure"] = failure
        return summary
