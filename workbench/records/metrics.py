"""Reading a run's metrics.jsonl while it is still being written.

One reader serves everyone: the CLI's progress lines, the panels' live charts, the scaling
lab and `workbench show`. It remembers how far it has read, so each call returns only the
new lines, and it leaves an unfinished last line for the next call instead of failing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


class MetricsReader:
    """Incremental reader of one metrics.jsonl file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.records: list[dict[str, Any]] = []

    def read_new(self) -> list[dict[str, Any]]:
        """Complete lines added since the last call, parsed (a bad line is skipped)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1  # keep a partly written last line for next time
        self.offset += end
        new = []
        for line in chunk[:end].splitlines():
            try:
                new.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        self.records.extend(new)
        return new

    def all(self) -> list[dict[str, Any]]:
        """Every record read so far, after reading any new ones."""
        self.read_new()
        return self.records


def of_kind(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The records of one kind: "step", "epoch" or "event"."""
    return [r for r in records if r.get("kind") == kind]


def events(records: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    """The event records with one message, e.g. "start", "init" or "ready" (one per rank)."""
    return [r for r in of_kind(records, "event") if r.get("message") == message]


def overall_by_step(steps: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Average the ranks' step records into one curve: the global batch's loss and accuracy.

    Returns, per step that every reporting rank has finished so far, the mean loss, the mean
    accuracy, the total samples and the slowest rank's step time (a synchronous step ends
    when the slowest rank does).
    """
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in steps:
        by_step[r["step"]].append(r)
    ranks = {r["rank"] for r in steps}
    out = []
    for step in sorted(by_step):
        group = by_step[step]
        if len(group) < len(ranks):
            continue
        out.append({
            "step": step,
            "epoch": group[0]["epoch"],
            "loss": sum(g["loss"] for g in group) / len(group),
            "accuracy": sum(g["accuracy"] for g in group) / len(group),
            "samples": sum(g["samples"] for g in group),
            "time": max(g["time"] for g in group),
            "step_time_s": max(g["step_time_s"] for g in group),
        })
    return out


def throughput(steps: list[dict[str, Any]]) -> float:
    """Samples per second over the training part of a run (all ranks together).

    Measured from the start of the earliest step to the end of the latest one, so start-up
    (imports, process launch, data loading) is not counted.
    """
    if not steps:
        return 0.0
    begin = min(r["time"] - r["step_time_s"] for r in steps)
    end = max(r["time"] for r in steps)
    return sum(r["samples"] for r in steps) / max(end - begin, 1e-9)
