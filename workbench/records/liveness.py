"""Who is alive: pid files with their host (a pid is checked only there), and heartbeats in
the run folder, whose staleness is counted on the reader's monotonic clock, never from a
folder listing (NFS). Why: docs/ARCHITECTURE.md, "Supervision".
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import psutil

from workbench.records.store import open_file, read_json

HEARTBEAT_PERIOD_S = 1.0   # how often owner and ranks rewrite their heartbeat
OWNER_STALE_S = 7.0        # a remote rank gives its owner this long before exiting
RANK_STALE_S = 10.0        # the launcher's host gives a remote rank this long
HELD_UP_S = 2.0            # a gap this long between two looks is the reader held up, not age


def this_host() -> str:
    return socket.gethostname()


def write_pid_file(path: Path) -> None:
    """Write "<pid> <host>" (the host tells readers where the pid means something)."""
    with open(open_file(path, os.O_WRONLY | os.O_TRUNC), "w") as f:
        f.write(f"{os.getpid()} {this_host()}\n")


def read_pid_file(path: Path) -> tuple[int, str] | None:
    """(pid, host) from a pid file; an old file without a host means this host."""
    with contextlib.suppress(FileNotFoundError):
        parts = Path(path).read_text().split()
        if parts and parts[0].isdigit():  # else being written right now
            return int(parts[0]), (parts[1] if len(parts) > 1 else this_host())
    return None


def started(pid: int | None = None) -> float:
    """When `pid` (default: this process) started, in seconds since boot (`/proc/<pid>/stat`,
    field 22): with the pid it names one process, and it does not move with the wall clock."""
    stat = Path(f"/proc/{os.getpid() if pid is None else pid}/stat").read_text()
    ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # fields after "(comm)" start at 3
    return round(ticks / os.sysconf("SC_CLK_TCK"), 2)


def process_alive(pid: int, created: float | None = None) -> bool:
    """Whether `pid` runs here, not a zombie, and if given `started()` at `created` (not reused)."""
    try:
        return (psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                and (created is None or abs(started(pid) - created) < 0.05))
    except (psutil.Error, OSError):  # gone, or not ours to read
        return False


def heartbeat_path(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / "heartbeat" / name


def beat(path: Path, **state: Any) -> None:
    """Rewrite a heartbeat file in place: a changing time stamp plus `state`."""
    text = json.dumps({"time": time.time(), **state}) + "\n"
    with contextlib.suppress(FileNotFoundError):  # the run folder is being deleted
        with open(open_file(path, os.O_WRONLY | os.O_TRUNC), "w") as f:
            f.write(text)


def read_beat(path: Path) -> dict[str, Any] | None:
    """The last complete heartbeat, or None (missing, or caught mid-write)."""
    data = read_json(path, quiet=True)
    return data if isinstance(data, dict) else None


def prepare_heartbeats(run_dir: Path, world_size: int) -> None:
    """Make each rank's empty heartbeat file here before the ranks start (fresh on NFS)."""
    for rank in range(world_size):
        os.close(open_file(heartbeat_path(run_dir, f"rank{rank}")))


def owner_beat(run_dir: Path, stop: bool = False) -> None:
    """The owner's heartbeat: who it is, and whether ranks should go on."""
    beat(heartbeat_path(run_dir, "owner"), host=this_host(), pid=os.getpid(),
         created=started(), state="stop" if stop else "run")


class Staleness:
    """How long since a heartbeat file last changed (`changed_at`, time.monotonic())."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._last: str | None = None
        self.changed_at = self._looked = time.monotonic()

    def age(self) -> float:
        """Seconds since the file last changed, less gaps over `HELD_UP_S` between looks (while
        a file server stalls, no heartbeat can change)."""
        text = None
        with contextlib.suppress(OSError):
            text = self.path.read_text()
        now = time.monotonic()
        if now - self._looked > HELD_UP_S:
            self.changed_at += now - self._looked
        self._looked = now
        if text and text != self._last:
            self._last, self.changed_at = text, now
        return now - self.changed_at


def owner_alive(run_dir: Path) -> bool:
    """Whether a job's owner lives: its pid on its host, elsewhere its heartbeat's mtime."""
    path = heartbeat_path(run_dir, "owner")
    info = read_beat(path)
    if info is not None and info.get("host") == this_host():
        return process_alive(int(info["pid"]), info.get("created"))
    try:
        return info is not None and time.time() - path.stat().st_mtime < 3 * OWNER_STALE_S
    except OSError:
        return False


def known_ranks(run_dir: Path, world_size: int) -> dict[int, tuple[int, str]]:
    """{rank: (pid, host)} of started ranks: pid file, else heartbeat, by name (NFS lists lag)."""
    out = {}
    for rank in range(world_size):
        entry = read_pid_file(Path(run_dir) / "pids" / f"rank{rank}.pid")
        if entry is None:
            info = read_beat(heartbeat_path(run_dir, f"rank{rank}")) or {}
            if isinstance(info.get("pid"), int) and isinstance(info.get("host"), str):
                entry = info["pid"], info["host"]
        if entry is not None:
            out[rank] = entry
    return out
