"""Warm pools as a job sees them, without importing pool.py: this process's open pools
(`POOLS`, which starting.py asks first) and `WarmRanks`, a pool's running ranks as the launcher
of one call, so that a call is a `Job` like any other. Why: docs/ARCHITECTURE.md, "Warm ranks".
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from workbench.config import JobConfig
from workbench.launch.launchers import POLL_S, Exits, Launcher, Ranks
from workbench.records.blame import Failure

POOL_RANK_MODULE = "workbench.rank.pool"
#: This process's pools (pool.py's `Pool`), by (engine, ranks, runs folder, launcher).
POOLS: dict[tuple[str, int, str, str], Any] = {}
#: How long the ranks of a stopped or failed call get to leave it after their interrupt, s.
INTERRUPT_S = 2.0
#: When one rank fails, how long the others get to finish by themselves before they are
#: interrupted (and the pool restarted), s: often they are a few milliseconds from the end.
FINISH_S = 0.5


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


class WarmRanks(Launcher):
    """The launcher of one call of `kind` with `payload` on `ranks` (pool.py's `_Ranks`)."""

    durable = False  # the call's records are renamed into place, not fsynced

    def __init__(self, ranks: Any, kind: str, payload: bytes) -> None:
        self.ranks, self.kind, self.payload = ranks, kind, payload
        self.engine, self.world_size = ranks.pool.engine, ranks.pool.np
        self.replies: set[int] = set()         # ranks that have replied
        self.left: dict[int, list[str]] = {}   # rank: threads it left running
        self.wake = threading.Event()
        self.alive_at: dict[int, float] = {}   # rank: when its channel was last seen open
        self.interrupted: list[int] = []       # ranks that had to be interrupted

    def start(self, run_id: str, run_dir: Path, cores: list[int]) -> None:
        self.run_id, self.run_dir = run_id, run_dir
        self.ranks.send_all({"op": "call", "id": id(self), "run_id": run_id, "kind": self.kind,
                             "dir": str(run_dir), "t0": time.time()}, self.payload)

    def pause(self) -> None:
        self.wake.wait(POLL_S)
        self.wake.clear()

    def exit_code(self, within_s: float = 0.0) -> int | None:
        """0 once every rank has replied; 1 once the pool's ranks ended first; else None."""
        deadline = time.monotonic() + within_s
        while len(self.replies) < self.world_size:
            if self.ranks.job.done:
                return 1
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.001)
        return 0

    def vanished(self, exits: Exits, ranks: Ranks, ended: bool) -> list[Failure]:
        """Ranks whose channel closed without a reply, at the last moment it was seen open."""
        now, out = time.time(), []
        for rank in range(self.world_size):
            pid = self.ranks.lost.get(rank)
            if pid is None:
                self.alive_at[rank] = now
            elif rank not in self.replies and rank not in exits:
                out.append(Failure(rank, "vanished", self.alive_at.get(rank, now),
                                   f"rank {rank} (pid {pid}) of the pool ended without "
                                   "reporting: killed by a signal (e.g. kill -9) or by the "
                                   "out-of-memory killer"))
        return out

    def ending(self, rc: int) -> str:
        job = self.ranks.job
        if rc and job.done:
            return f"the pool's ranks ended ({job.status}, run {job.run_id})"
        return f"the {self.engine} launcher exited with code {rc}"

    def end(self, status: str) -> list[int]:
        """Interrupt the ranks still in the call; restart all if one was, or left a thread."""
        if status != "stopped":
            self.exit_code(FINISH_S)
        pending = [r for r in range(self.world_size) if r not in self.replies]
        if pending and not self.ranks.job.done:
            self.ranks.send_all({"op": "interrupt", "id": id(self)}, ranks=pending)
            self.exit_code(INTERRUPT_S)
        self.interrupted = pending
        if pending:
            self.ranks.pool.restart(f"run {self.run_id} left rank(s) {pending} interrupted: "
                                    "a collective may have been left half done", self.ranks)
        elif self.left:
            self.ranks.pool.restart(f"run {self.run_id} left threads running on rank(s) "
                                    f"{sorted(self.left)} ({self.left}): the next call would "
                                    "share them", self.ranks)
        return []

    def facts(self) -> dict[str, Any]:
        facts = {"pool": self.ranks.job.run_id, "launcher_process": None,
                 "interrupted_ranks": self.interrupted}
        if self.left:
            facts["threads_left"] = {str(r): names for r, names in self.left.items()}
        return facts
