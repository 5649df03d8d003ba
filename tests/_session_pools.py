"""The warm ranks that conftest.py's `warm` fixture keeps for the whole session (torchrun's),
and their processes, which checks that a test left no process behind leave out; and the
ranks of a run on this host, from their pid files."""

from __future__ import annotations

from pathlib import Path

from workbench.launch.launchers import job_processes
from workbench.records.liveness import process_alive, read_pid_file, this_host

#: The session's pools (workbench.launch.pool.Pool), added by conftest.py's `warm`.
SESSION_POOLS: list = []


def session_pool_pids() -> set[int]:
    """The pids of every process of the session's pools: launcher, guard and ranks."""
    return {p.pid for pool in SESSION_POOLS if pool.alive
            for p in job_processes(pool.job.run_id, pool.job.launcher_pid)}


def rank_pids(run_dir: Path) -> dict[int, int]:
    """{rank: pid} from the pid files of the ranks on this host."""
    out = {}
    for f in (Path(run_dir) / "pids").glob("rank*.pid"):
        entry = read_pid_file(f)
        if entry is not None and f.stem[4:].isdigit() and entry[1] == this_host():
            out[int(f.stem[4:])] = entry[0]
    return out


def live_rank_pids(run_dir: Path) -> list[int]:
    """The pids of the ranks of `run_dir` on this host that still run."""
    return [pid for pid in rank_pids(run_dir).values() if process_alive(pid)]
