"""Watching a running job: is it over, and if it failed, whose fault is it?

The watcher is a thread of the job (job.py) that looks five times a second:

- every rank reported success and the launcher ended  -> "succeeded";
- a rank reported an exception, or its process vanished without reporting (kill -9, out
  of memory), or the launcher failed                   -> "failed", naming the rank;
- no new metrics line for `stall_timeout` s           -> "stalled".

How a rank that died without a word is found is each launcher's part (launchers.py);
which rank is blamed when several fail is blame.py's rule; what one look concludes is
`outcome()`, a function of what was seen. A pool's call (pool_call.py) is a `Job` whose
"launcher" is its warm ranks' replies.
"""

from __future__ import annotations

import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from workbench.launch.launched import POLL_S, Exits, Ranks
from workbench.launch.processes import exit_records
from workbench.records import MetricsReader, RunRecord
from workbench.records.blame import (
    Failure,
    launcher_cause,
    launcher_failure,
    ranks_failure,
    reported_failure,
)
from workbench.records.liveness import HEARTBEAT_PERIOD_S, known_ranks, owner_beat


class Watching:
    """The part of `Job` that watches it; it ends the job with `_finish` (ending.py)."""

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
            self._proc.pause()
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

    def _reported(self, exits: Exits, ranks: Ranks) -> list[Failure]:
        """The failures the ranks' exit records report, on the watcher's clock."""
        out = []
        for rank, rec in sorted(exits.items()):
            seen = self._seen_at.setdefault(rank, time.time())
            failure = reported_failure(rank, rec, self._proc.here(rank, ranks), seen)
            if failure is not None:
                out.append(failure)
        return out

    def _watch_state(self) -> None:
        """What the watcher keeps about a running job (also a pool's call: pool_call.py)."""
        self._status = "running"
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._reader = MetricsReader(self.run_dir)
        self._failure: dict[str, Any] | None = None
        self._summary_data: dict[str, Any] | None = None
        self._first_error_at: float | None = None
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
        vanished = self._proc.vanished(exits, ranks, rc is not None)
        if vanished:
            time.sleep(POLL_S)  # it may have written its exit record as it ended
            exits = exit_records(self.run_dir, self.world_size)
            ranks = known_ranks(self.run_dir, self.world_size)
            vanished = [f for f in vanished if f.rank not in exits]
        failures = [*vanished, *self._reported(exits, ranks)]
        all_ok = len(exits) >= self.world_size
        if failures:
            self._first_error_at = self._first_error_at or time.monotonic()
            if (not vanished and self._proc.undecided(exits, ranks, self._first_error_at)
                    and time.monotonic() - self._first_error_at < self._proc.decide_within_s):
                return None  # a remote rank may be the real culprit: look again shortly
        elif all_ok and rc is None:
            try:  # the launcher tidies up after its ranks; give it a moment
                rc = self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                rc = 0
        launcher_failed = not failures and rc is not None and not (all_ok and rc == 0)
        log = RunRecord(self.run_dir).log("launcher", last=60) if launcher_failed else ""
        return outcome(self.world_size, exits, failures, set(ranks), rc, self._proc.ending, log)


def outcome(world_size: int, exits: Exits, failures: list[Failure], started: set[int],
            rc: int | None, ending: Callable[[int], str], launcher_log: str = ""
            ) -> tuple[str, dict[str, Any] | None] | None:
    """What the watcher concludes from one look, without touching a process or a file.

    `exits`: the ranks' exit records; `failures`: the ranks found failed (vanished or
    reported, see blame.py); `started`: the ranks that wrote a pid file; `rc`: the
    launcher's exit code, None while it runs; `ending(rc)`: how it ended, in words;
    `launcher_log`: its log's last lines. None while the job goes on.
    """
    if failures:
        return "failed", ranks_failure(failures, exits)
    if rc is None:
        return None
    if len(exits) >= world_size and rc == 0:
        return "succeeded", None
    return "failed", launcher_failure(world_size, exits, started, ending(rc),
                                      launcher_cause(launcher_log))


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
