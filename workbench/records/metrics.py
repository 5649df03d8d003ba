"""A run's metrics, read while they are still being written (each rank appends its own
`metrics/rank<k>.jsonl`, one writer per file: NFS), and what they add up to: the figures of
`summary.json`, one arithmetic for its two writers (launch/job.py, rank/context.py). Times in
seconds since launch. See docs/ARCHITECTURE.md, "The record of a run".
"""

from __future__ import annotations

import contextlib
import functools
import json
import platform
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

#: A run folder's single metrics file, from before each rank wrote its own.
LEGACY_METRICS = "metrics.jsonl"


def metrics_path(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / "metrics" / f"rank{rank}.jsonl"


class MetricsReader:
    """Incremental, thread-safe reader of a run folder's metrics (shared by watcher and user)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir, self._legacy = Path(run_dir), Path(run_dir) / LEGACY_METRICS
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self.bad_lines = 0  # lines that were complete but not valid JSON (skipped)

    def files(self) -> list[Path]:
        """The metrics files that exist now: the old single file, then one per rank."""
        ranks = sorted((self.run_dir / "metrics").glob("rank*.jsonl"),
                       key=lambda p: int(p.stem[4:]) if p.stem[4:].isdigit() else 0)
        return ([self._legacy] if self._legacy.exists() else []) + ranks

    def read_new(self) -> list[dict[str, Any]]:
        """Complete lines added since the last call, parsed, oldest first (by "time")."""
        with self._lock:
            new = sorted((r for path in self.files() for r in self._read_file(path)),
                         key=lambda r: r.get("time", 0.0))
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
        parsed = []
        for line in chunk[:end].splitlines():
            try:
                parsed.append(json.loads(line))
            except ValueError:  # not JSON, or not UTF-8
                parsed.append(None)
        records = [r for r in parsed if isinstance(r, dict)]
        self.bad_lines += len(parsed) - len(records)
        return records

    def all(self) -> list[dict[str, Any]]:
        """Every record read so far, after reading any new ones (a new list each call)."""
        self.read_new()
        with self._lock:
            return list(self.records)

    def size(self) -> int:
        """Total bytes of the metrics files now: grows whenever any rank reports."""
        total = 0
        for path in self.files():
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
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
    return [{"step": step, "epoch": group[0].get("epoch"), "loss": mean_of(group, "loss"),
             "accuracy": mean_of(group, "accuracy"),
             "samples": sum(g.get("samples", 0) for g in group),
             "time": max(g.get("time", 0.0) for g in group),
             "step_time_s": max(g.get("step_time_s", 0.0) for g in group)}
            for step, group in sorted(by_step.items()) if len(group) >= len(ranks)]


def mean_of(group: list[dict[str, Any]], key: str) -> float | None:
    """Mean of `key` over the records that have it (optional fields may be missing)."""
    values = [g[key] for g in group if isinstance(g.get(key), (int, float))]
    return sum(values) / len(values) if values else None


def summary_of(run_dir: Path, status: str, engine: str, np: int, launcher: str,
               ranks: dict[int, tuple[int, str]], threads_per_rank: int, started: float,
               metrics: list[dict[str, Any]], result: dict[str, Any] | None,
               warnings: list[str]) -> dict[str, Any]:
    """Every `summary.json`'s fields; `ranks`: {rank: (pid, host)}; `started`: epoch seconds;
    `startup_s`: launch to the first step, `train_time_s`: first step to last, `final_*`: held
    out (rank 0's `result`), `last_epoch_*`: the ranks' mean training figures."""
    steps = [s for s in of_kind(metrics, "step") if isinstance(s.get("time"), (int, float))]
    begin = min((s["time"] - s.get("step_time_s", 0.0) for s in steps), default=None)
    end = max((s["time"] for s in steps), default=None)
    epochs = of_kind(metrics, "epoch")
    last = max((e.get("epoch", -1) for e in epochs), default=-1)
    last_epoch = [e for e in epochs if e.get("epoch") == last]
    return {
        "run_id": Path(run_dir).name, "run_dir": str(run_dir), "status": status,
        "engine": engine, "np": np, "launcher": launcher,
        "ranks": {str(rank): {"pid": pid, "host": host}
                  for rank, (pid, host) in sorted(ranks.items())},
        "threads_per_rank": threads_per_rank,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "duration_s": time.time() - started,
        "hosts": sorted({r["host"] for r in events(metrics, "start") if r.get("host")}),
        "startup_s": begin,
        "epochs_completed": len({e.get("epoch") for e in epochs if e.get("rank") == 0}),
        "steps_completed": len({s.get("step") for s in steps}),
        "samples_per_s": (sum(s.get("samples", 0) for s in steps) / max(end - begin, 1e-9)
                          if steps else 0.0),
        "train_time_s": None if begin is None else end - begin,
        "final_loss": (result or {}).get("final_loss"),
        "final_accuracy": (result or {}).get("final_accuracy"),
        "last_epoch_loss": mean_of(last_epoch, "loss"),
        "last_epoch_accuracy": mean_of(last_epoch, "accuracy"),
        "warnings": warnings,
        "versions": dict(_versions()),  # a copy: the cached dict is shared
    }


@functools.cache
def _versions() -> dict[str, str | None]:
    """Python's, torch's, Horovod's and the workbench's versions, once per process (~20 ms)."""
    from importlib import metadata  # here, not at the top: it costs start-up time

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("torch", "horovod", "workbench"):
        out[pkg] = None
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    return out
