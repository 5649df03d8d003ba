"""Reading run records back: `workbench runs`, `workbench show`, the panels' run picker
(docs/ARCHITECTURE.md, "The record of a run")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.records.liveness import owner_alive
from workbench.records.metrics import MetricsReader
from workbench.records.store import CorruptRecord, read_json

#: The most of a log that is read into memory (its end).
MAX_LOG_BYTES = 4 << 20


@dataclass
class RunRecord:
    """A run folder and what it holds. Everything is read from disk on demand."""

    run_dir: Path

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def config(self) -> dict[str, Any]:
        """config.json ({} when it is missing or corrupt)."""
        return read_json(self.run_dir / "config.json", quiet=True) or {}

    @property
    def summary(self) -> dict[str, Any] | None:
        """summary.json once the job has ended, else None (None too when it is corrupt)."""
        return read_json(self.run_dir / "summary.json", quiet=True)

    @property
    def status(self) -> str:
        """summary.json's status, "corrupt" if unreadable; without one "running" or "lost"."""
        try:
            summary = read_json(self.run_dir / "summary.json")
        except CorruptRecord:
            return "corrupt"
        if summary:
            return summary.get("status", "corrupt")
        return "running" if owner_alive(self.run_dir) else "lost"

    def metrics(self) -> list[dict[str, Any]]:
        """Every complete metrics line written so far, all ranks merged."""
        return MetricsReader(self.run_dir).all()

    def log(self, rank: int | str = 0, last: int | None = None) -> str:
        """The log of `rank` ("launcher" for the launcher's), optionally its last lines; at
        most its last MAX_LOG_BYTES, saying so (a rank may print gigabytes)."""
        path = self.run_dir / "logs" / ("launcher.log" if rank == "launcher" else f"rank{rank}.log")
        try:
            with open(path, "rb") as f:
                skipped = max(0, f.seek(0, os.SEEK_END) - MAX_LOG_BYTES)
                f.seek(skipped)
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
        if skipped:  # from the first whole line on
            text = f"[{skipped / 2**20:,.1f} MiB before these lines: see {path}]\n" + (
                text.partition("\n")[2] or text)
        return "\n".join(text.splitlines()[-last:]) if last else text

    def model_state(self) -> dict[str, Any]:
        """The final state_dict saved by rank 0 (tensors only: weights_only=True)."""
        import torch

        return torch.load(self.run_dir / "model.pt", weights_only=True)


def list_runs(runs_dir: str | Path = "runs") -> list[RunRecord]:
    """Every run under `runs_dir`, oldest first."""
    root = Path(runs_dir).expanduser()
    if not root.is_dir():
        return []
    # (not another user's: a runs folder may be shared)
    return [RunRecord(d) for d in sorted(root.iterdir()) if os.access(d / "config.json", os.R_OK)]


def load_run(run: str | Path, runs_dir: str | Path = "runs") -> RunRecord:
    """A run by folder path, full id, or unique id prefix/suffix; FileNotFoundError if none."""
    path = Path(run)
    if (path / "config.json").exists():
        return RunRecord(path.resolve())
    matches = [r for r in list_runs(runs_dir) if r.run_id == run]
    matches = matches or [r for r in list_runs(runs_dir) if str(run) in r.run_id]
    if len(matches) != 1:
        what = "no run" if not matches else f"{len(matches)} runs"
        raise FileNotFoundError(f"{what} matching {run!r} in {Path(runs_dir).resolve()};"
                                " list them with `workbench runs`")
    return matches[0]


def record_of(run: Any) -> RunRecord:
    """A :class:`RunRecord` from a job, a record, a run folder or a run id."""
    if isinstance(run, RunRecord):
        return run
    if hasattr(run, "record"):          # a workbench Job
        return run.record()
    return load_run(run)
