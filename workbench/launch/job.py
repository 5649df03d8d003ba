"""A running job, handed its launcher and its ticket for cores: `Job(cfg, launcher, ticket)`
writes the run folder, waits for its cores (cores.py), has the launcher start the ranks and
returns; a thread watches them (watch.py), ends every process and writes `summary.json`.
Why so: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import threading
import time
import traceback
import warnings
import weakref
from typing import Any

from workbench.caller import warn_caller
from workbench.config import ConfigError, JobConfig
from workbench.hosts.cpu import cpu_budget
from workbench.launch.environment import SECRETS_FILE, recorded
from workbench.launch.launchers import Launcher
from workbench.launch.waiting import in_kernel, interrupt_once, stop_waiting
from workbench.launch.watch import Watcher, one_line
from workbench.records import MetricsReader, RunRecord, blame, liveness, new_run_dir, read_json
from workbench.records.metrics import summary_of
from workbench.records.private import load_own_pickle
from workbench.records.store import atomic_file, make_folder, write_json_atomic

FINAL_STATES = ("succeeded", "failed", "stopped", "stalled")
QUEUE_POLL_S = 0.5   # how often a queued job looks whether its turn has come
_LIVE_JOBS: weakref.WeakSet[Job] = weakref.WeakSet()


class Granted:
    """A ticket that never waits (the cores are held elsewhere: Slurm's). A ticket answers
    `join(run_id)`, `poll()`, `release()`, `cores`, `position` and `warning`."""

    warning: str | None = None
    position = 0
    cores: list[int] = []  # never changed: shared by every Granted

    def join(self, run_id: str) -> None:
        """Nothing to queue for."""

    def poll(self) -> bool:
        return True

    def release(self) -> None:
        """Nothing to give back."""


class Job:
    """One job: `cfg`'s ranks started by `launcher` once `ticket` grants their cores.
    `files` ({path in the run folder: bytes}) are written before the ranks start."""

    def __init__(self, cfg: JobConfig, launcher: Launcher, ticket: Any,
                 files: dict[str, bytes] | None = None) -> None:
        self.config, self.launcher, self.world_size = cfg, launcher, cfg.world_size
        self.warnings: list[str] = []
        self._status, self._done, self._lock = "running", threading.Event(), threading.Lock()
        self.summary: dict[str, Any] | None = None  # summary.json's, once the job has ended
        self._stopping = self._launched = False  # once stopping, every owner beat says "stop"
        self.started_at = self.asked_at = time.time()  # s since the epoch; queued: asked at
        self._ticket = ticket
        try:  # a job that fails to start gives its ticket up (a pool's call holds its line)
            self.run_id, self.run_dir = new_run_dir(cfg.runs_dir, cfg.run_label)
            self._reader = MetricsReader(self.run_dir)
            # First, so that a run stopped while queued is on record too (secret values are not)
            write_json_atomic(self.run_dir / "config.json",
                              {**cfg.to_dict(), "env": recorded(cfg.env)}, launcher.durable)
            for name, data in (files or {}).items():  # inputs the ranks read as they start
                make_folder((self.run_dir / name).parent)  # e.g. user/
                with atomic_file(self.run_dir / name) as f:
                    f.write(data)
            try:
                ticket.join(self.run_id)
            except BaseException:  # the queue cannot be reached (its lock held for long, say):
                shutil.rmtree(self.run_dir, ignore_errors=True)  # no run, and no half record
                raise
            if launcher.shares_this_host and cfg.oversubscribed():  # said at once
                self.warn(f"{cfg.world_size} ranks x {cfg.resolved_threads()} threads exceed "
                          f"the {cpu_budget().usable} cores this host gives us: ranks will "
                          "share cores and speedups will flatten")
            if launched := ticket.poll():
                self._launch()
        except BaseException:
            ticket.release()
            raise
        if not launched:
            self._status = "queued"
            liveness.owner_beat(self.run_dir)  # a queued run is looked after too: not "lost"
            _LIVE_JOBS.add(self)  # and stopped when Python exits, before it launches
            threading.Thread(target=self._wait_for_cores, name=f"queue-{self.run_id}",
                             daemon=True).start()

    def warn(self, text: str) -> None:
        """Keep `text` among the job's warnings and warn from the caller's line (from the
        queue's thread, naming the run)."""
        self.warnings.append(text)
        if threading.current_thread().name != f"queue-{self.run_id}":
            warn_caller(text)
        elif not in_kernel():  # in a kernel it would land under whichever cell runs now
            warnings.warn(f"run {self.run_id}: {text}", stacklevel=1)

    @property
    def status(self) -> str:
        """"queued" (waiting for this host's cores), "pending" (queued by Slurm), "running",
        "succeeded", "failed", "stopped" or "stalled"."""
        if self._status == "running" and self.pending_reason is not None:
            return "pending"
        return self._status

    @property
    def pending_reason(self) -> str | None:
        """Why Slurm still queues the job ("Resources", "Priority", ...); None otherwise."""
        return self.launcher.pending_reason if self._launched else None

    @property
    def waiting_for(self) -> str | None:
        """While queued: what the job waits for, and whose jobs hold it; else None."""
        return self._ticket.reason if self._status == "queued" else None

    @property
    def queue_position(self) -> int:
        """While queued: 1 when this job starts next, 2 behind it, ...; else 0."""
        return self._ticket.position if self._status == "queued" else 0

    @property
    def cores(self) -> list[int] | None:
        """The cores allocated to this job ([]: none of its own), None while queued."""
        return self._ticket.cores

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def launcher_pid(self) -> int | None:
        """Pid of the engine's launcher; None while queued, under Slurm and on a pool."""
        return self.launcher.pid if self._launched else None

    def metrics(self) -> list[dict[str, Any]]:
        """Every metrics record written so far, all ranks merged (thread-safe)."""
        return self._reader.all()

    def result(self) -> dict[str, Any] | None:
        """What rank 0 wrote with `ctx.write_result()`, or None."""
        return read_json(self.run_dir / "result.json", quiet=True)

    def results(self) -> list[Any]:
        """Each rank's return value, in rank order, loaded only from a run folder of your own
        (records/private.py); RuntimeError names the ranks that have not returned."""
        paths = [self.run_dir / "results" / f"rank{r}.pkl" for r in range(self.world_size)]
        if missing := [r for r, path in enumerate(paths) if not path.exists()]:
            raise RuntimeError(f"rank(s) {missing} of {self.run_id} have not returned a value"
                               f" (the job is {self.status}; job.wait() waits for the end)")
        return [load_own_pickle(path, self.run_dir) for path in paths]

    def record(self) -> RunRecord:
        return RunRecord(self.run_dir)

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends or `timeout` s pass; the status. Ctrl-C stops the job (while
        queued, in one line: StoppedWaiting), and a second one does not cut the stop short."""
        with interrupt_once():
            try:
                self._done.wait(timeout)
            except KeyboardInterrupt:
                if self._status == "queued":
                    raise stop_waiting(self, self.waiting_for) from None
                self.stop()
                raise
        return self.status

    def stop(self) -> None:
        """End every process of the job (within ~5 s; Slurm: 10 s) and record it stopped."""
        self._finish("stopped")

    def __repr__(self) -> str:
        return f"<Job {self.run_id} {self._status}>"

    def _wait_for_cores(self) -> None:
        try:
            while not self._ticket.poll():  # False for ever once released by _finish
                if self._done.wait(QUEUE_POLL_S):
                    return  # stopped while queued; _finish left the queue
                liveness.owner_beat(self.run_dir)
            with self._lock:
                if self._done.is_set():
                    self._ticket.release()  # stopped just as the cores came
                    return
                self._status = "running"
                self._launch()  # e.g. the launcher cannot be executed
        except Exception as err:  # noqa: BLE001 - any error fails the job: never queued for ever
            error = (f"could not launch the job after queueing: {err}" if self._status == "running"
                     else f"lost its place in its queue: {one_line(err)}")
            self._finish("failed", {"rank": None, "error": error})

    def _launch(self) -> None:
        liveness.owner_beat(self.run_dir)  # before any rank starts: they read it from their start
        liveness.prepare_heartbeats(self.run_dir, self.world_size)  # (records/liveness.py: NFS)
        if self._ticket.warning:
            self.warn(self._ticket.warning)
        self.started_at = time.time()
        self.launcher.start(self.run_id, self.run_dir, self._ticket.cores)
        self._launched = True
        _LIVE_JOBS.add(self)
        threading.Thread(target=self._watch, name=f"watch-{self.run_id}", daemon=True).start()

    def _watch(self) -> None:
        try:
            watcher = Watcher(self.launcher, self.run_dir, self.world_size)
            last_size, last_progress, last_beat = -1, time.time(), 0.0
            while not self._done.is_set():
                self.launcher.pause()
                if time.monotonic() - last_beat >= liveness.HEARTBEAT_PERIOD_S:
                    liveness.owner_beat(self.run_dir, stop=self._stopping)
                    last_beat = time.monotonic()  # remote ranks leave on "stop" or silence
                size = self._reader.size()
                if size != last_size or self.status == "pending":  # queued time is no stall
                    last_size, last_progress = size, time.time()
                outcome = watcher.look()
                stall = self.config.stall_timeout
                if outcome is None and time.time() - last_progress > stall:
                    outcome = ("stalled", {"error": f"no progress for {stall:g} s (a rank may "
                                                    "be blocked waiting for another)"})
                if outcome is not None:
                    self._finish(*outcome)
        except Exception as exc:  # noqa: BLE001 - any bug or I/O error must end the job
            self._finish("failed", {"rank": None,
                                    "error": f"the job's watcher failed: {one_line(exc)}",
                                    "traceback": traceback.format_exc()})

    def _finish(self, status: str, failure: dict[str, Any] | None = None) -> None:
        """End all processes, then write summary.json, once; from the main thread in a thread
        of its own, so that Ctrl-C (raised once the job ended) cannot cut it short."""
        survivors: list[int] = []
        interrupted, ended = False, threading.Event()  # not join(): a Ctrl-C breaks its state

        def end() -> None:
            try:
                survivors.extend(self._end(status, failure))
            finally:
                ended.set()

        if threading.current_thread() is not threading.main_thread():
            end()
        else:
            threading.Thread(target=end, name=f"finish-{self.run_id}").start()
            while not ended.is_set():  # the job ends, even if a Ctrl-C escapes the loop
                try:
                    ended.wait()
                except KeyboardInterrupt:
                    interrupted = True  # raised once the job has ended
        if survivors:
            raise RuntimeError(f"processes {survivors} of {self.run_id} survived SIGKILL")
        if interrupted:
            raise KeyboardInterrupt

    def _end(self, status: str, failure: dict[str, Any] | None) -> list[int]:
        survivors: list[int] = []
        with self._lock:
            if self._done.is_set():
                return []
            summary: dict[str, Any] = {"run_id": self.run_id, "run_dir": str(self.run_dir),
                                       "status": status}
            try:
                survivors = self._end_processes(status)
                if failure:
                    failure.update(blame.failure_log(self.run_dir, failure.get("rank")))
                summary = self._summary(status, failure)
                if survivors:
                    summary["survivors"] = survivors
            except Exception as exc:  # noqa: BLE001 - the job must end whatever happens
                status = "failed"
                summary.update(status=status, failure={
                    "rank": None, "error": f"ending the job failed: {one_line(exc)}",
                    "traceback": traceback.format_exc(), "first_outcome": failure})
            try:
                write_json_atomic(self.run_dir / "summary.json", summary, self.launcher.durable)
            except Exception as exc:  # noqa: BLE001 - read-only or full disk: say so
                status = "failed"
                summary.update(status=status, failure={
                    **(summary.get("failure") or {}), "rank": None,
                    "error": f"could not write {self.run_dir / 'summary.json'}: "
                             f"{one_line(exc)}", "first_outcome": failure})
            finally:
                self.summary, self._status = summary, status
                self._done.set()
        return survivors

    def _end_processes(self, status: str) -> list[int]:
        self._stopping, survivors = True, []
        try:
            liveness.owner_beat(self.run_dir, stop=True)
        finally:  # a failed write must not spare the processes
            if self._launched:
                survivors = self.launcher.end(status)
            with contextlib.suppress(OSError, ConfigError):  # never lose the summary for it
                self._ticket.release()  # the processes are gone: the cores are free again
            (self.run_dir / SECRETS_FILE).unlink(missing_ok=True)  # read by every rank by now
        return survivors

    def _summary(self, status: str, failure: dict[str, Any] | None) -> dict[str, Any]:
        """summary.json: how the job ran here, then what its metrics add up to."""
        cfg = self.config
        summary = summary_of(self.run_dir, status, cfg.engine, self.world_size, cfg.launcher,
                             liveness.known_ranks(self.run_dir, self.world_size),
                             cfg.resolved_threads(), self.started_at, self._reader.all(),
                             self.result(), self.warnings)
        summary.update(launcher_process={"pid": self.launcher_pid, "host": liveness.this_host()},
                       cores=self._ticket.cores,
                       queued_s=(self.started_at if self._launched else time.time())
                       - self.asked_at)
        summary.update(self.launcher.facts())  # e.g. Slurm's job id, a pool's run
        if self._reader.bad_lines:
            summary["warnings"] = [*self.warnings, f"{self._reader.bad_lines} metrics line(s) "
                                   "were not valid JSON and were skipped"]
        if failure:
            summary["failure"] = failure
        return summary


@atexit.register
def stop_all() -> None:
    """Stop every job this process started (called when Python exits)."""
    for job in list(_LIVE_JOBS):
        if not job.done:
            job.stop()
