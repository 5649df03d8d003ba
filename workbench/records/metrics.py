"""Reading a run's metrics while they are still being written.

Each rank appends its own `metrics/rank<k>.jsonl` (one writer per file: NFS). The reader
merges them (and an older run's one `metrics.jsonl`), returns only new lines each call,
and leaves an unfinished last line for the next. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

#: The folder of per-rank metrics files inside a run folder, and the old single file.
METRICS_DIR = "metrics"
LEGACY_METRICS = "metrics.jsonl"


def metrics_path(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / METRICS_DIR / f"rank{rank}.jsonl"


class MetricsReader:
    """Incremental, thread-safe reader of a run's metrics (a job's watcher and the user's
    code may share one). `source`: a run folder, or its old `metrics.jsonl` file."""

    def __init__(self, source: str | Path) -> None:
        source = Path(source)
        if source.suffix == ".jsonl":
            self.run_dir, self._legacy = source.parent, source
        else:
            self.run_dir, self._legacy = source, source / LEGACY_METRICS
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self.bad_lines = 0  # lines that were complete but not valid JSON (skipped)

    def files(self) -> list[Path]:
        """The metrics files that exist now: the old single file, then one per rank."""
        ranks = sorted((self.run_dir / METRICS_DIR).glob("rank*.jsonl"),
                       key=lambda p: int(p.stem[4:]) if p.stem[4:].isdigit() else 0)
        return ([self._legacy] if self._legacy.exists() else []) + ranks

    def read_new(self) -> list[dict[str, Any]]:
        """Complete lines added since the last call, parsed, oldest first (by "time")."""
        with self._lock:
            new: list[dict[str, Any]] = []
            for path in self.files():
                new.extend(self._read_file(path))
            new.sort(key=lambda r: r.get("time", 0.0))
            self.records.extend(new)
            return new

    def _read_file(self, path: Path) -> list[dict[str, Any]]:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1  # keep a partly written last line for next time
        self._offsets[path] = offset + end
        out = []
        for line in chunk[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # not JSON, or not UTF-8
                record = None
            if isinstance(record, dict):
                out.append(record)
            else:
                self.bad_lines += 1
        return out

    def all(self) -> list[dict[str, Any]]:
        """Every record read so far, after reading any new ones (a new list each call)."""
        self.read_new()
        with self._lock:
            return list(self.records)

    def size(self) -> int:
        """Total bytes of the metrics files now: grows whenever any rank reports."""
        total = 0
        for path in self.files():
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue
        return total


def of_kind(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The records of one kind: "step", "epoch" or "event"."""
    return [r for r in records if r.get("kind") == kind]


def events(records: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    """The event records with one message, e.g. "start", "init" or "ready" (one per rank)."""
    return [r for r in of_kind(records, "event") if r.get("message") == message]


def overall_by_step(steps: list[dict[str, Any]]) -> list[dict[str, float]]:
    """The global batch's curve, per step every reporting rank has finished: mean loss and
    accuracy, total samples, the slowest rank's step time (a synchronous step's)."""
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in steps:
        if "step" in r:
            by_step[r["step"]].append(r)
    ranks = {r.get("rank") for r in steps}
    out = []
    for step in sorted(by_step):
        group = by_step[step]
        if len(group) < len(ranks):
            continue
        out.append({
            "step": step,
            "epoch": group[0].get("epoch"),
            "loss": mean_of(group, "loss"),
            "accuracy": mean_of(group, "accuracy"),
            "samples": sum(g.get("samples", 0) for g in group),
            "time": max(g.get("time", 0.0) for g in group),
            "step_time_s": max(g.get("step_time_s", 0.0) for g in group),
        })
    return out


def mean_of(group: list[dict[str, Any]], key: str) -> float | None:
    """Mean of `key` over the records that have it (optional fields may be missing)."""
    values = [g[key] for g in group if isinstance(g.get(key), (int, float))]
    return sum(values) / len(values) if values else None


def throughput(steps: list[dict[str, Any]]) -> float:
    """Samples per second of all ranks, from the earliest step's start to the latest's end
    (start-up not counted)."""
    timed = [r for r in steps if isinstance(r.get("time"), (int, float))]
    if not timed:
        return 0.0
    begin = min(step_start(r) for r in timed)
    end = max(r["time"] for r in timed)
    return sum(r.get("samples", 0) for r in timed) / max(end - begin, 1e-9)


def step_start(step: dict[str, Any]) -> float:
    """When a step began: its end `time` less its `step_time_s` (an optional field)."""
    return step["time"] - step.get("step_time_s", 0.0)
