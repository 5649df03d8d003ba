"""One call on a pool of warm ranks: a `Job` whose ranks were already running (see pool.py).

It is a `Job` in everything you can ask of one (`wait()`, `results()`, `stop()`, a
`RunPanel`, ...) and a run on record like any other, written by the job's own code (job.py).
Three things differ, because the ranks belong to the pool and outlive the call:

- it starts by sending the work to the ranks, not a launcher, and learns that a rank has
  finished from its reply on the pool's channel (no polling delay); a rank that vanishes
  mid-call is found as in any job, by its pid in the call's folder, or by its socket closing;
- ending it does not kill the ranks: a rank still running is *interrupted* (SIGINT, a
  `KeyboardInterrupt` in your code), and the pool restarts its ranks afterwards, because
  a rank stopped half-way through a collective would hang the next call;
- it holds no cores of its own: the pool holds them in the host's queue (cores.py).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from workbench.config import JobConfig
from workbench.launch.job import _LIVE_JOBS, Job
from workbench.launch.launchers import ByPid
from workbench.launch.watch import POLL_S
from workbench.records import new_run_dir, write_json_atomic

if TYPE_CHECKING:
    from workbench.launch.pool import Pool, _Ranks

#: How long the ranks of a stopped or failed call get to leave it after their interrupt, s.
INTERRUPT_S = 2.0
#: When one rank fails, how long the others get to finish by themselves before they are
#: interrupted (and the pool restarted), s: often they are a few milliseconds from the end.
FINISH_S = 0.5


class PoolCall(Job):
    """A call of `fn(*args)` (or a cell's code) on every rank of `pool`: see the module doc."""

    durable = False  # its records are renamed into place, not fsynced: see write_json_atomic

    def __init__(self, pool: Pool, ranks: _Ranks, cfg: JobConfig, kind: str,
                 payload: bytes) -> None:
        self.config, self.pool, self._ranks = cfg, pool, ranks
        self.run_id, self.run_dir = new_run_dir(cfg.runs_dir, cfg.run_label)
        write_json_atomic(self.run_dir / "config.json", cfg.to_dict(), durable=False)
        self.world_size = cfg.world_size
        self.warnings: list[str] = []
        self._watch_state()
        self._wake = threading.Event()
        self._replies: dict[int, bool] = {}
        self._ticket = _PoolCores(ranks.job.cores)
        self._proc = _CallProgress(self)
        self._started = self._asked = time.time()
        self.interrupted: list[int] = []  # ranks that had to be interrupted
        self._ending = "running"
        _LIVE_JOBS.add(self)  # stopped when Python exits, like every job
        self._work = kind, payload

    def send(self) -> None:
        """Send the work to every rank (once the pool routes this call's replies here)."""
        kind, payload = self._work
        threading.Thread(target=self._watch, name=f"watch-{self.run_id}", daemon=True).start()
        header = {"op": "call", "id": id(self), "run_id": self.run_id, "kind": kind,
                  "dir": str(self.run_dir), "t0": self._started}
        self._ranks.send_all(header, payload)

    # ------------------------------------------------------------------ told by the pool
    def replied(self, rank: int, ok: bool) -> None:
        """Rank `rank` has left the call (its exit record is written)."""
        self._replies[rank] = ok
        self._wake.set()

    def lost(self) -> None:
        """A rank's channel closed: look now (its pid is gone too)."""
        self._wake.set()

    # ------------------------------------------------------------------ watching
    def _watch_loop(self) -> None:
        while not self._done.is_set():
            self._wake.wait(POLL_S)
            self._wake.clear()
            # A lost channel first: channels close in the order the ranks died, so the rank
            # killed first is named, not a peer that its launcher ended a moment later.
            outcome = self._lost_rank() or self._check()
            if outcome is not None:
                self._finish(*outcome)

    def _lost_rank(self) -> tuple[str, dict[str, Any]] | None:
        """The first rank the pool lost during this call, or the pool's end."""
        for rank, pid in list(self._ranks.lost.items()):  # in the order they were lost
            if rank not in self._replies:
                return "failed", {"rank": rank, "error": (
                    f"rank {rank} (pid {pid}) of the pool ended without reporting: killed "
                    "by a signal (e.g. kill -9) or by the out-of-memory killer")}
        if self._ranks.job.done and len(self._replies) < self.world_size:
            return "failed", {"rank": None, "error": f"the pool's ranks ended "
                              f"({self._ranks.job.status}, run {self._ranks.job.run_id})"}
        return None

    def _finish(self, status: str, failure: dict[str, Any] | None = None) -> None:
        self._ending = status
        super()._finish(status, failure)

    def _end_processes(self) -> list:
        """Interrupt the ranks still in the call; have the pool restart them if any was."""
        self._stopping = True
        if self._ending != "stopped":
            self._await_replies(FINISH_S)
        pending = [r for r in range(self.world_size) if r not in self._replies]
        if pending and not self._ranks.job.done:
            self._ranks.send_all({"op": "interrupt", "id": id(self)}, ranks=pending)
            self._await_replies(INTERRUPT_S)
        self.interrupted = pending
        if pending:
            self.pool.restart(f"run {self.run_id} left rank(s) {pending} interrupted: a "
                              "collective may have been left half done", self._ranks)
        return []

    def _await_replies(self, seconds: float) -> None:
        """Wait up to `seconds` for every rank's reply (while the pool's ranks live)."""
        deadline = time.monotonic() + seconds
        while (len(self._replies) < self.world_size and time.monotonic() < deadline
               and not self._ranks.job.done):
            time.sleep(0.005)

    def _summary(self, status: str, failure: dict[str, Any] | None) -> dict[str, Any]:
        summary = super()._summary(status, failure)
        summary.update(pool=self._ranks.job.run_id, launcher_process=None,
                       interrupted_ranks=self.interrupted)
        return summary


class _CallProgress(ByPid):
    """What a job's watcher asks of its launcher (launchers.py), answered for a call: it
    "exits" (0) once every rank has replied. A rank on another host is known lost when its
    channel closes (`PoolCall._lost_rank`), never by a silent heartbeat: a call's ranks
    write none (their pool's ranks do)."""

    def __init__(self, call: PoolCall) -> None:
        super().__init__()
        self.call = call

    def poll(self) -> int | None:
        return 0 if len(self.call._replies) >= self.call.world_size else None

    def ending(self, rc: int) -> str:
        return f"the {self.call.config.engine} launcher exited with code {rc}"

    def wait(self, timeout: float | None = None) -> int:
        """Every exit record is written: the replies follow within moments."""
        deadline = time.monotonic() + (timeout or 0.0)
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        return 0


class _PoolCores:
    """The call's share of the host's cores: the pool's; given back when the pool ends."""

    warning = None

    def __init__(self, cores: list[int] | None) -> None:
        self.cores = cores

    def release(self) -> None:
        """Nothing to give back: the pool holds the cores."""
