"""Writing run records safely.

A reader (a widget, `workbench show`, another process) may look at a run folder at any
moment, and a job may be killed at any moment. So JSON files are written to a temporary
name and renamed into place: `os.replace` is atomic, and a reader sees the old file or the
new one, never half of one.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as JSON to `path` so that no reader ever sees a partial file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any | None:
    """The JSON in `path`, or None when the file does not exist (yet)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def new_run_dir(runs_dir: str | Path, label: str) -> tuple[str, Path]:
    """Create a fresh, uniquely named run folder; return (run_id, path)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{label}-{secrets.token_hex(2)}"
    path = Path(runs_dir).expanduser().resolve() / run_id
    path.mkdir(parents=True, exist_ok=False)
    for sub in ("logs", "pids", "exit"):
        (path / sub).mkdir()
    return run_id, path
