"""What a run's metrics add up to: the figures of its `summary.json`, one arithmetic for
its two writers (the launcher, launch/job.py; rank 0 under plain torchrun or horovodrun,
rank/context.py). Times are in seconds since launch; throughput in samples per second of
all ranks together. See docs/ARCHITECTURE.md, "The record of a run".
"""

from __future__ import annotations

import functools
import platform
import time
from pathlib import Path
from typing import Any

from workbench.records.metrics import events, mean_of, of_kind, step_start, throughput


def training_figures(records: list[dict[str, Any]],
                     result: dict[str, Any] | None) -> dict[str, Any]:
    """The summary's figures from the metrics and rank 0's `result.json`: `startup_s`
    (launch to the first step), `train_time_s` (first step to last), `samples_per_s`,
    `final_*` (held out) and `last_epoch_*` (the ranks' mean training figures)."""
    steps = [s for s in of_kind(records, "step") if isinstance(s.get("time"), (int, float))]
    epochs = of_kind(records, "epoch")
    last = max((e.get("epoch", -1) for e in epochs), default=-1)
    last_epoch = [e for e in epochs if e.get("epoch") == last]
    result = result or {}
    return {
        "hosts": sorted({r["host"] for r in events(records, "start") if r.get("host")}),
        "startup_s": min((step_start(s) for s in steps), default=None),
        "epochs_completed": len({e.get("epoch") for e in epochs if e.get("rank") == 0}),
        "steps_completed": len({s.get("step") for s in steps}),
        "samples_per_s": throughput(steps),
        "train_time_s": (max(s["time"] for s in steps) - min(
            step_start(s) for s in steps)) if steps else None,
        "final_loss": result.get("final_loss"),
        "final_accuracy": result.get("final_accuracy"),
        "last_epoch_loss": mean_of(last_epoch, "loss"),
        "last_epoch_accuracy": mean_of(last_epoch, "accuracy"),
    }


def summary_of(run_dir: Path, status: str, engine: str, np: int, launcher: str,
               ranks: dict[int, tuple[int, str]], threads_per_rank: int, started: float,
               metrics: list[dict[str, Any]], result: dict[str, Any] | None,
               warnings: list[str]) -> dict[str, Any]:
    """The fields of every `summary.json`; `ranks` is {rank: (pid, host)}, `started` in
    seconds since the epoch."""
    return {
        "run_id": Path(run_dir).name, "run_dir": str(run_dir), "status": status,
        "engine": engine, "np": np, "launcher": launcher,
        "ranks": {str(rank): {"pid": pid, "host": host}
                  for rank, (pid, host) in sorted(ranks.items())},
        "threads_per_rank": threads_per_rank,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "duration_s": time.time() - started,
        **training_figures(metrics, result),
        "warnings": warnings,
        "versions": dict(_versions()),  # a copy: the cached dict is shared
    }


@functools.cache
def _versions() -> dict[str, str | None]:
    """Python's, torch's, Horovod's and the workbench's versions, once per process (~20 ms)."""
    from importlib import metadata  # here, not at the top: it costs start-up time

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("torch", "horovod", "workbench"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out

