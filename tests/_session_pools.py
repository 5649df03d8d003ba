"""The warm ranks that conftest.py's `warm` fixture keeps for the whole session (torchrun's),
and their processes, which checks that a test left no process behind leave out; and the
ranks of a run that are still alive."""

from __future__ import annotations

from pathlib import Path

from workbench.launch.processes import job_processes, rank_pids
from workbench.records.liveness import process_alive

#: The session's pools (workbench.launch.pool.Pool), added by conftest.py's `warm`.
SESSION_POOLS: list = []


def session_pool_pids() -> set[int]:
    """The pids of every process of the session's pools: launcher, guard and ranks."""
    return {p.pid for pool in SESSION_POOLS if pool.alive
            for p in job_processes(pool.job.run_id, pool.job.run_dir, pool.job.launcher_pid)}


def live_rank_pids(run_dir: Path) -> list[int]:
    """The pids of the ranks of `run_dir` on this host that still run."""
    return [pid for pid in rank_pids(run_dir).values() if process_alive(pid)]
