"""Watching a running job: is it over, and if it failed, whose fault is it?

The watcher is a thread of the job (job.py) that looks five times a second:

- every rank reported success and the launcher ended  -> "succeeded";
- a rank reported an exception, or its process vanished without reporting (kill -9, out
  of memory), or the launcher failed                   -> "failed", naming the rank;
- no new metrics line for `stall_timeout` s           -> "stalled".

Ranks on the launcher's host are checked by pid. Ranks on other hosts are checked through
what they write into the shared run folder (their heartbeat files, read by name) and
through the launcher's own exit: their pids mean nothing here (see records/liveness.py).
Which rank is blamed when several fail is blame.py's rule.

`Watching` is the part of `Job` that does this; a pool's call (pool_call.py) is a `Job`
that overrides how a rank is found lost.
"""

from __future__ import annotations

import subprocess
import threading
import time
import traceback
from typing import Any

from workbench.jobs.blame import (
    Failure,
    launcher_cause,
    launcher_failure,
    ranks_failure,
    reported_failure,
)
from workbench.jobs.processes import exit_records, known_ranks, pid_alive
from workbench.records import MetricsReader, RunRecord
from workbench.records.liveness import (
    HEARTBEAT_PERIOD_S,
    RANK_STALE_S,
    Staleness,
    heartbeat_path,
    owner_beat,
    this_host,
)

POLL_S = 0.2
#: After the launcher has exited, a remote rank whose heartbeat has not changed for this
#: long is judged gone (it beats every second while alive).
REMOTE_GONE_S = 3.0


class Watching:
    """The watcher of a `Job` (see the module docstring); it ends the job with `_finish`."""

    def _watch(self) -> None:
        """The watcher thread. Whatever goes wrong inside it ends the job as "failed"."""
        try:
            self._watch_loop()
        except Exception as exc:  # noqa: BLE001 - any bug or I/O error must end the job
            self._finish("failed", {"rank": None,
                                    "error": f"the job's watcher failed: {_one_line(exc)}",
                                    "traceback": traceback.format_exc()})

    def _watch_loop(self) -> None:
        last_size, last_progress, last_beat = -1, time.time(), 0.0
        while not self._done.is_set():
            if self._slurm:  # asking Slurm costs a command: keep to the plain poll
                time.sleep(POLL_S)
            else:
                try:  # sleep POLL_S, but wake at once when the launcher ends
                    self._proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
                else:
                    time.sleep(0.05)  # the launcher is gone: no busy loop while we conclude
            if time.monotonic() - last_beat >= HEARTBEAT_PERIOD_S:
                owner_beat(self.run_dir, stop=self._stopping)  # remote ranks exit when this
                # says "stop", or stops changing
                last_beat = time.monotonic()
            size = self._reader.size()
            if size != last_size or self.status == "pending":  # queued time is no stall
                last_size, last_progress = size, time.time()
            outcome = self._check()
            if outcome is None and time.time() - last_progress > self.config.stall_timeout:
                outcome = ("stalled", {"error": f"no progress for {self.config.stall_timeout:g}"
                                                " s (a rank may be blocked waiting for another)"})
            if outcome is not None:
                self._finish(*outcome)

    def _vanished(self, exits: dict[int, dict[str, Any]], ranks: dict[int, tuple[int, str]],
                  launcher_ended: bool) -> list[Failure]:
        """Ranks that ended without an exit record, each at the last moment the watcher
        saw it alive (see blame.py).

        On this host: the pid is gone (or a zombie). On another host: its heartbeat has
        stopped changing, for `RANK_STALE_S`, or for `REMOTE_GONE_S` once the launcher
        (which would have noticed its ssh session end) has exited.
        """
        if self._slurm:  # ---- Slurm hook: ranks on compute nodes, seen through the runs folder
            return [Failure(rank, "vanished", self._started,
                            f"rank {rank} (pid {pid}) ended without reporting (its Slurm "
                            "task recorded its end): killed by a signal or out of memory")
                    for rank, pid in self._proc.vanished(exits)]
        here, out = this_host(), []
        for rank, (pid, host) in sorted(ranks.items()):
            if rank in exits:
                continue
            if host == here:
                now = time.time()
                if pid_alive(pid):
                    self._alive_at[rank] = now
                else:
                    out.append(Failure(rank, "vanished", self._alive_at.get(rank, now),
                                       f"rank {rank} (pid {pid}) ended without reporting: "
                                       "killed by a signal (e.g. kill -9) or by the "
                                       "out-of-memory killer"))
                continue
            age = self._remote_age(rank)
            if age > RANK_STALE_S or (launcher_ended and age > REMOTE_GONE_S):
                out.append(Failure(rank, "vanished", time.time() - age,
                                   f"rank {rank} (pid {pid} on {host}) ended without "
                                   f"reporting: no heartbeat for {age:.0f} s (killed by a "
                                   "signal, out of memory, or its host went down)"))
        return out

    def _reported(self, exits: dict[int, dict[str, Any]],
                  ranks: dict[int, tuple[int, str]]) -> list[Failure]:
        """The failures the ranks' exit records report, on the watcher's clock."""
        here, out = this_host(), []
        for rank, rec in sorted(exits.items()):
            seen = self._seen_at.setdefault(rank, time.time())
            local = not self._slurm and ranks.get(rank, (0, here))[1] == here
            failure = reported_failure(rank, rec, local, seen)
            if failure is not None:
                out.append(failure)
        return out

    def _remote_age(self, rank: int) -> float:
        if rank not in self._rank_beats:
            self._rank_beats[rank] = Staleness(heartbeat_path(self.run_dir, f"rank{rank}"))
        return self._rank_beats[rank].age()

    def _undecided_remote(self, exits: dict[int, dict[str, Any]],
                          ranks: dict[int, tuple[int, str]], since: float) -> bool:
        """True while a remote rank without an exit record might have died at about
        `since` (time.monotonic()): its heartbeat has not changed since, but not for long
        enough yet to call it gone. A live rank beats again within a second."""
        if self._slurm:  # a killed task's record (tasks/) may land moments after a peer's
            return len(exits) < self.world_size  # error, which its death caused
        here = this_host()
        for rank, (_, host) in ranks.items():
            if rank in exits or host == here:
                continue
            age = self._remote_age(rank)
            if self._rank_beats[rank].changed_at <= since and age <= REMOTE_GONE_S:
                return True
        return False

    def _watch_state(self) -> None:
        """What the watcher keeps about a running job (also a pool's call: pool_call.py)."""
        self._status = "running"
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._reader = MetricsReader(self.run_dir)
        self._failure: dict[str, Any] | None = None
        self._summary_data: dict[str, Any] | None = None
        self._rank_beats: dict[int, Staleness] = {}
        self._first_error_at: float | None = None
        self._alive_at: dict[int, float] = {}  # rank: when the watcher last saw it alive
        self._seen_at: dict[int, float] = {}   # rank: when the watcher first saw its exit
        self._stopping = False  # once set, every owner heartbeat says "stop"

    def _check(self) -> tuple[str, dict[str, Any]] | None:
        """The job's outcome if it has one now, else None.

        When one rank fails, the others usually fail a moment later, on a broken
        connection or ended by their launcher, so the culprit is the rank that failed
        first on the watcher's clock (see blame.py). Each rank's files are read once a look
        (`known_ranks`, `exit_records`), and again only after the pause for a vanished rank.
        """
        rc = self._proc.poll()
        exits = exit_records(self.run_dir, self.world_size)
        ranks = known_ranks(self.run_dir, self.world_size)
        vanished = self._vanished(exits, ranks, rc is not None)
        if vanished:
            time.sleep(POLL_S)  # it may have written its exit record as it ended
            exits = exit_records(self.run_dir, self.world_size)
            ranks = known_ranks(self.run_dir, self.world_size)
            vanished = [f for f in vanished if f.rank not in exits]
        failures = [*vanished, *self._reported(exits, ranks)]
        if failures:
            self._first_error_at = self._first_error_at or time.monotonic()
            if (not vanished and self._undecided_remote(exits, ranks, self._first_error_at)
                    and time.monotonic() - self._first_error_at < 2 * REMOTE_GONE_S):
                return None  # a remote rank may be the real culprit: look again shortly
            return "failed", ranks_failure(failures, exits)
        all_ok = len(exits) >= self.world_size
        if all_ok and rc is None:
            try:  # the launcher tidies up after its ranks; give it a moment
                rc = self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                rc = 0
        if rc is None:
            return None
        if all_ok and rc == 0:
            return "succeeded", None
        ended = self._proc.ending() if self._slurm else \
            f"the {self.config.engine} launcher exited with code {rc}"
        return "failed", launcher_failure(
            self.world_size, exits, set(ranks), ended,
            launcher_cause(RunRecord(self.run_dir).log("launcher", last=60)))


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
