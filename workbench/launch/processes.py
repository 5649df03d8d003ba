"""Finding and ending every process of a job on this host: the launcher's process tree and
every process whose environment carries the job's `WORKBENCH_RUN_ID` (horovodrun starts each
rank in a session of its own). Why: docs/ARCHITECTURE.md, "The machinery".
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from workbench.rank.protocol import ENV_RUN_ID


def job_processes(run_id: str, run_dir: Path, launcher_pid: int | None) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    if launcher_pid is not None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(launcher_pid)
            found.update((p.pid, p) for p in [root, *root.children(recursive=True)])
    for proc in psutil.process_iter():
        if proc.pid in found or proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(ENV_RUN_ID) == run_id:
                found[proc.pid] = proc
    return [p for p in found.values() if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_job_processes(run_id: str, run_dir: Path, launcher_pid: int | None) -> list[int]:
    """End every process of the job on this host, with SIGTERM, then SIGKILL what is left
    2 s later; the pids of any that survived SIGKILL."""
    alive = job_processes(run_id, run_dir, launcher_pid)
    for send in (psutil.Process.terminate, psutil.Process.kill):
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                send(proc)
        _, alive = psutil.wait_procs(alive, timeout=2.0)
    return [p.pid for p in alive if _alive(p)]
