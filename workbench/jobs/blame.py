"""Which rank a failed job blames: the one that failed first, on the watcher's clock.

When one rank fails, the others follow within a fraction of a second: their collective
calls fail on a broken connection, or their launcher ends them (torchrun and horovodrun
send SIGTERM to every other rank once one has exited). The first failure is the cause,
the later ones its consequences. So each failure is placed on one clock, that of the
watcher (the thread in job.py that looks after the job; other hosts' clocks may differ):

- a rank that reported an error (its exit record): on the watcher's host, the time in its
  record; on another host, when the watcher first saw the record;
- a rank that vanished without reporting (kill -9, the out-of-memory killer): the last
  time the watcher saw it alive. It died after that, but how long after is unknown, so an
  error reported after that moment may be a consequence of its death: the vanished rank
  is blamed. An error reported before it was last seen alive came first, and wins;
- a rank that recorded being ended by a signal (its launcher's SIGTERM, see
  training/reporter.py): a consequence, blamed only when no rank failed otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: The kinds of failure, in the order a tie between them is decided.
KINDS = ("vanished", "error", "ended")


@dataclass(frozen=True)
class Failure:
    """One rank's failure as the watcher sees it."""

    rank: int
    kind: str     # one of KINDS
    at: float     # seconds since the epoch, on the watcher's clock (see the module docstring)
    error: str    # one line: what happened


def culprit(failures: Iterable[Failure]) -> Failure | None:
    """The failure to blame, or None when there is none.

    The earliest by `at`; a rank ended by a signal only if no rank failed otherwise; at
    the same instant a vanished rank before a reported error (whose cause it may be).
    """
    return min(failures, default=None,
               key=lambda f: (f.kind == "ended", f.at, KINDS.index(f.kind), f.rank))


def reported_failure(rank: int, record: dict, local: bool, first_seen: float) -> Failure | None:
    """The failure an exit record reports (None for success). `local`: the rank ran on the
    watcher's host, whose clock its record's time is on; else `first_seen` is used."""
    if record.get("ok"):
        return None
    kind = "ended" if record.get("ended_by") else "error"
    at = record.get("time")
    if not local or not isinstance(at, (int, float)) or isinstance(at, bool):
        at = first_seen
    return Failure(rank, kind, float(at), str(record.get("error")))
