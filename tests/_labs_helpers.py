"""Helpers shared by the synchronization and model-parallel lab tests.

Worker functions must live in an importable module: lab workers are fresh interpreters.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil
from _session_pools import session_pool_pids

from workbench.launch.launchers import job_processes
from workbench.records import list_runs


def fail_on_rank_one(rank: int, world: int) -> int:
    """A worker body that fails on rank 1 only."""
    if rank == 1:
        raise ValueError("deliberate failure on rank 1")
    time.sleep(30)  # the others would block; the parent must stop them
    return rank


def sleep_forever(rank: int, world: int) -> None:
    time.sleep(600)


def square(rank: int, world: int, offset: int) -> int:
    return rank * rank + offset


def wait_for_barrier_then_fail_on_rank_one(rank: int, world: int) -> int:
    """Both workers join the group; then rank 1 fails while rank 0 waits for it in recv."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == 1:
        raise ValueError("deliberate failure on rank 1")
    dist.recv(torch.zeros(1), src=1)  # would block for ever: the supervisor must end it
    return rank


def live_children() -> list[psutil.Process]:
    """Child processes of this test process that are still running.

    Zombies and multiprocessing's resource tracker (one per parent, by design, it ends with
    the parent) do not count, nor do the warm ranks that conftest.py's `warm` fixture keeps
    for the whole session (_session_pools.py).
    """
    out, pooled = [], session_pool_pids()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in pooled and p.status() != psutil.STATUS_ZOMBIE and (
                    "resource_tracker" not in " ".join(p.cmdline())):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def assert_recorded_and_reaped(runs_dir: str | Path, runs: int = 1,
                               status: str = "succeeded") -> list:
    """Every lab run under `runs_dir` left a complete run record and no live process.

    Returns the run records (oldest first).
    """
    records = list_runs(runs_dir)
    assert len(records) == runs, [r.run_id for r in records]
    for record in records:
        assert record.status == status, record.summary
        n = record.config["np"]
        assert record.config["extra"]["function"], record.config
        assert len(list((record.run_dir / "logs").glob("rank*.log"))) == n
        assert len(list((record.run_dir / "pids").glob("rank*.pid"))) == n
        if status == "succeeded":
            assert len(list((record.run_dir / "exit").glob("rank*.json"))) == n
        assert job_processes(record.run_id) == []
    assert live_children() == []
    return records
