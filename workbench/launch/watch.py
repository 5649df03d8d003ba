"""Watching a running job: is it over, and if it failed, whose fault is it (records/blame.py)?
The job (job.py) adds the stall check. See docs/ARCHITECTURE.md, "Supervision".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.launch.launchers import POLL_S, Exits, Launcher
from workbench.records import RunRecord, blame
from workbench.records.liveness import known_ranks

#: How long a launcher gets to tidy up after every rank has reported success (s).
TIDY_UP_S = 10.0


class Watcher:
    """What the watcher of one job remembers from look to look."""

    def __init__(self, launcher: Launcher, run_dir: Path, world_size: int) -> None:
        self.launcher, self.run_dir, self.world_size = launcher, run_dir, world_size
        self.seen_at: dict[int, float] = {}   # rank: when an exit record was first seen
        self.first_error_at: float | None = None

    def look(self) -> tuple[str, dict[str, Any] | None] | None:
        """The job's outcome if it has one now, else None (also while the launcher says a
        rank not yet known dead may have failed first: `undecided`)."""
        launcher = self.launcher
        rc = launcher.exit_code()
        exits = blame.exit_records(self.run_dir, self.world_size)
        ranks = known_ranks(self.run_dir, self.world_size)
        if vanished := launcher.vanished(exits, ranks, rc is not None):
            time.sleep(POLL_S)  # it may have written its exit record as it ended
            exits = blame.exit_records(self.run_dir, self.world_size)
            ranks = known_ranks(self.run_dir, self.world_size)
            vanished = [f for f in vanished if f.rank not in exits]
        reported = [blame.reported_failure(rank, rec, launcher.here(rank, ranks),
                                           self.seen_at.setdefault(rank, time.time()))
                    for rank, rec in sorted(exits.items())]
        failures = [*vanished, *(f for f in reported if f is not None)]
        all_ok = len(exits) >= self.world_size
        if failures:
            self.first_error_at = self.first_error_at or time.monotonic()
            if (not vanished and launcher.undecided(exits, ranks, self.first_error_at)
                    and time.monotonic() - self.first_error_at < launcher.decide_within_s):
                return None
        elif all_ok and rc is None:  # the launcher tidies up after its ranks: a moment
            rc = launcher.exit_code(TIDY_UP_S) or 0  # None, still tidying up: no failure
        launcher_failed = not failures and rc is not None and not (all_ok and rc == 0)
        log = RunRecord(self.run_dir).log("launcher", last=60) if launcher_failed else ""
        return outcome(self.world_size, exits, failures, set(ranks), rc, launcher.ending, log)


def outcome(world_size: int, exits: Exits, failures: list[blame.Failure], started: set[int],
            rc: int | None, ending: Callable[[int], str], launcher_log: str = ""
            ) -> tuple[str, dict[str, Any] | None] | None:
    """What the watcher concludes from one look (None: the job goes on), from what it saw alone,
    touching no process or file; `rc` is None while the launcher runs."""
    if failures:
        return "failed", blame.ranks_failure(failures, exits)
    if rc is None:
        return None
    if len(exits) >= world_size and rc == 0:
        return "succeeded", None
    return "failed", blame.launcher_failure(world_size, exits, started, ending(rc),
                                            blame.launcher_cause(launcher_log))


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
