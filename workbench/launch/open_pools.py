"""This process's open pools of warm ranks (pool.py), which starting.py asks before it starts
ranks of its own. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.config import JobConfig

#: The rank module a pool's ranks run.
POOL_RANK_MODULE = "workbench.rank.pool"
#: This process's pools (pool.py's `Pool`), by (engine, ranks, runs folder, launcher).
POOLS: dict[tuple[str, int, str, str], Any] = {}


def pool_for(cfg: JobConfig) -> Any | None:
    """The open pool of this process that can run the job `cfg` (`pool.why_not`)."""
    return next((pool for pool in list(POOLS.values())
                 if pool.alive and not pool.failed and pool.why_not(cfg) is None), None)


def running_pool(engine: str, np: int, runs_dir: str | Path = "runs",
                 launcher: str = "local") -> Any | None:
    """This process's open pool of `np` ranks of `engine` for `runs_dir`, if any."""
    pool = POOLS.get((engine, np, folder(runs_dir), launcher))
    return pool if pool is not None and pool.alive else None


def folder(runs_dir: str | Path) -> str:
    return str(Path(runs_dir).expanduser().resolve())
