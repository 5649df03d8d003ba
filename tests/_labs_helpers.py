"""Helpers shared by the synchronization and model-parallel lab tests.

Worker functions must live in an importable module: the labs start processes with "spawn".
"""

from __future__ import annotations

import time

import psutil


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


def live_children() -> list[psutil.Process]:
    """Child processes of this test process that are still running.

    Zombies and multiprocessing's resource tracker (one per parent, by design, it ends with
    the parent) do not count.
    """
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(
                    p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out
