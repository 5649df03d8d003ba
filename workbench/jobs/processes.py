"""Finding and ending every process of a job on this host.

`horovodrun` starts each rank in a session of its own, so signalling the launcher's process
group does not reach the ranks, and a launcher killed hard leaves them running. The
workbench therefore finds a job's processes three ways and ends them all:

1. the launcher and its descendants (psutil's process tree);
2. the pid each rank wrote into `pids/rank<k>.pid`, when the rank runs on this host;
3. any process whose environment carries this job's `WORKBENCH_RUN_ID` (catches ranks
   that were starting up and had not written their pid yet).

Ranks on other hosts cannot be signalled from here (their pids belong to another process
table): they end themselves when the owner's heartbeat says "stop" (records/liveness.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil

from workbench.records.liveness import (
    heartbeat_path,
    process_alive,
    read_beat,
    read_pid_file,
    this_host,
)
from workbench.records.store import CorruptRecord, read_json
from workbench.training.rank_protocol import ENV_RUN_ID


def rank_hosts(run_dir: Path) -> dict[int, tuple[int, str]]:
    """{rank: (pid, host)} from the pid files the ranks wrote, on every host."""
    out = {}
    for f in (Path(run_dir) / "pids").glob("rank*.pid"):
        entry = read_pid_file(f)
        if entry is not None and f.stem[4:].isdigit():
            out[int(f.stem[4:])] = entry
    return out


def exit_records(run_dir: Path, world_size: int) -> dict[int, dict[str, Any]]:
    """{rank: exit record} of the ranks that have ended: from the rank's heartbeat (see
    `known_ranks`), else `exit/rank<k>.json`; a corrupt record counts as that rank's error,
    naming the file."""
    out: dict[int, dict[str, Any]] = {}
    for rank in range(world_size):
        rec = (read_beat(heartbeat_path(run_dir, f"rank{rank}")) or {}).get("exit")
        if not isinstance(rec, dict):
            try:
                rec = read_json(Path(run_dir) / "exit" / f"rank{rank}.json")
            except CorruptRecord as exc:
                rec = {"ok": False, "error": f"unreadable exit record: {exc}",
                       "time": time.time()}
        if isinstance(rec, dict):
            out[rank] = rec
    return out


def rank_pids(run_dir: Path) -> dict[int, int]:
    """{rank: pid} of the ranks that run on this host (only their pids mean anything here)."""
    here = this_host()
    return {rank: pid for rank, (pid, host) in rank_hosts(run_dir).items() if host == here}


def job_processes(run_id: str, run_dir: Path, launcher_pid: int | None) -> list[psutil.Process]:
    """Every live process that belongs to the job (see the module docstring)."""
    found: dict[int, psutil.Process] = {}
    if launcher_pid is not None:
        try:
            root = psutil.Process(launcher_pid)
            for p in [root, *root.children(recursive=True)]:
                found[p.pid] = p
        except psutil.Error:
            pass
    for pid in rank_pids(run_dir).values():
        try:
            proc = psutil.Process(pid)
            if proc.environ().get(ENV_RUN_ID) == run_id:
                found[pid] = proc
        except psutil.Error:
            pass
    for proc in psutil.process_iter():
        if proc.pid in found or proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(ENV_RUN_ID) == run_id:
                found[proc.pid] = proc
        except psutil.Error:
            continue
    return [p for p in found.values() if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_alive(pid: int) -> bool:
    """True while `pid` runs on this host; a zombie (ended, not yet reaped) counts as gone."""
    return process_alive(pid)


def live_rank_pids(run_dir: Path) -> list[int]:
    """Pids of the run's ranks on this host (from their pid files) that are still running."""
    return [pid for pid in rank_pids(run_dir).values() if pid_alive(pid)]


def terminate(procs: list[psutil.Process], grace_s: float = 2.0) -> list[psutil.Process]:
    """SIGTERM, wait up to `grace_s`, then SIGKILL what is left; return any survivors."""
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=grace_s)
    return [p for p in alive if _alive(p)]
