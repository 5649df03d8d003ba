"""This process's open pools of warm ranks (pool.py), and which of them can take a job.

`start()` and `launch()` look here before starting ranks of their own, and a job queued
behind cores that one of these pools holds says so. The list is kept apart from pool.py,
which itself starts jobs, so that starting a job does not import the pool.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.config import JobConfig
    from workbench.launch.pool import Pool

#: The rank module a pool's ranks run.
POOL_RANK_MODULE = "workbench.rank.pool"
#: This process's pools, by (engine, ranks, runs folder, launcher): one of each at most.
POOLS: dict[tuple[str, int, str, str], Pool] = {}


def running_pool(engine: str, np: int, runs_dir: str = "runs") -> Pool | None:
    """The open pool for this engine, size and runs folder (for launch()), once it runs no
    call: one still starting, or still running the last call, is waited for. Fresh ranks
    instead would queue behind the cores the pool holds."""
    pool = POOLS.get((engine, np, folder(runs_dir), "local"))
    return pool._once_free() if pool is not None and pool.alive else None


def pool_for(cfg: JobConfig) -> Pool | None:
    """The open pool of this process that can run the training job `cfg` (for start()),
    once it runs no call, as for `running_pool`."""
    for pool in list(POOLS.values()):
        if pool.alive and pool.why_not(cfg) is None:
            return pool._once_free()
    return None


def holding_cores() -> list[Pool]:
    """The pools of this process that hold cores of this host (a queued job may wait for
    them)."""
    return [pool for pool in POOLS.values() if pool.alive and pool.job.cores]


def folder(runs_dir: str | Path) -> str:
    """A runs folder as one string, whichever way it was written (`runs`, `./runs`, ...)."""
    return str(Path(runs_dir).expanduser().resolve())
