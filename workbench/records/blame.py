"""Which rank a failed job blames: the one that failed first, on the watcher's clock (one
rule, `culprit`, for every watcher), and the one reader of how ranks ended (`exit_records`).
The rule, case by case: docs/ARCHITECTURE.md, "Supervision".
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.records.liveness import heartbeat_path, read_beat
from workbench.records.runs import RunRecord
from workbench.records.store import CorruptRecord, read_json

#: The kinds of failure, in the order a tie between them is decided.
KINDS = ("vanished", "error", "ended")


@dataclass(frozen=True)
class Failure:
    rank: int
    kind: str     # one of KINDS
    at: float     # seconds since the epoch, on the watcher's clock
    error: str    # one line: what happened


def culprit(failures: Iterable[Failure]) -> Failure | None:
    """The failure to blame (None: none): the earliest by `at`; a rank ended by a signal
    only if no other failed; at one instant a vanished rank before a reported error."""
    return min(failures, default=None,
               key=lambda f: (f.kind == "ended", f.at, KINDS.index(f.kind), f.rank))


def exit_records(run_dir: Path, world_size: int) -> dict[int, dict[str, Any]]:
    """{rank: exit record} of the ranks that have ended: from its heartbeat (fresh on NFS),
    else `exit/rank<k>.json`; an unreadable record is that rank's failure, `unreadable`."""
    out: dict[int, dict[str, Any]] = {}
    for rank in range(world_size):
        rec = (read_beat(heartbeat_path(run_dir, f"rank{rank}")) or {}).get("exit")
        if not isinstance(rec, dict):
            try:
                rec = read_json(Path(run_dir) / "exit" / f"rank{rank}.json")
            except CorruptRecord as exc:
                rec = {"ok": False, "error": f"unreadable exit record: {exc}",
                       "time": time.time(), "unreadable": True}
        if isinstance(rec, dict):
            out[rank] = rec
    return out


def reported_failure(rank: int, record: dict, local: bool, first_seen: float) -> Failure | None:
    """An exit record's failure (None: success), at its own time if `local`, else `first_seen`."""
    if record.get("ok"):
        return None
    kind = "ended" if record.get("ended_by") or record.get("unreadable") else "error"
    at = record.get("time")
    if not local or not isinstance(at, (int, float)) or isinstance(at, bool):
        at = first_seen
    return Failure(rank, kind, float(at), str(record.get("error")))


def ranks_failure(failures: list[Failure], exits: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The summary's `failure` when ranks failed: the culprit, its traceback, the others."""
    blamed = culprit(failures)
    record = exits.get(blamed.rank, {})
    others = {r: rec.get("error") for r, rec in exits.items()
              if not rec.get("ok") and r != blamed.rank}
    return {"rank": blamed.rank, "error": blamed.error,
            **({"traceback": record["traceback"]} if "traceback" in record else {}),
            "others": others}


def launcher_failure(world_size: int, exits: dict[int, dict[str, Any]], started: set[int],
                     ended: str, cause: str | None) -> dict[str, Any]:
    """The summary's `failure` when the launcher failed (`ended`, in words): a rank that got
    as far as starting, else none; `cause` is the launcher log's telling line."""
    missing = sorted(set(range(world_size)) - set(exits))
    before = f" before rank(s) {missing} reported" if missing else ""
    return {"rank": next((r for r in missing if r in started), None),
            "error": f"{ended}{before}" + (f": {cause}" if cause else "")}


#: Lines of a launcher log that name an error (a traceback's last line, "error: ...").
_ERROR_LINE = re.compile(r"\b[A-Za-z_.]*(Error|Exception)\b|\berror:|cannot ", re.I)
#: horovodrun's prefix of each line a rank wrote.
_RANK_PREFIX = re.compile(r"^\[\d+\]<std(err|out)>:")


def launcher_cause(log_tail: str) -> str | None:
    """The last error line of a launcher log (not horovodrun's closing one, which names none)."""
    for line in reversed(log_tail.splitlines()):
        text = _RANK_PREFIX.sub("", line).strip()
        if (text and _ERROR_LINE.search(text) and "Horovod detected" not in text
                and not text.startswith(("raise ", "File "))):
            return text[:300]
    return None


def failure_log(run_dir: Path, rank: int | None) -> dict[str, str]:
    """The failed rank's last log lines (`log_tail`, `log`); if it wrote none (it died before
    redirecting its output), the launcher's, up to the ranks' last line there."""
    record = RunRecord(run_dir)
    tail = record.log(rank, last=20) if rank is not None else ""
    if tail.strip():
        return {"log_tail": tail, "log": f"rank{rank}.log"}
    lines = record.log("launcher", last=200).splitlines()
    ranks = [i for i, line in enumerate(lines) if _RANK_PREFIX.match(line)]
    lines = lines[:ranks[-1] + 1] if ranks else lines
    return {"log_tail": "\n".join(lines[-20:]), "log": "launcher.log"}
