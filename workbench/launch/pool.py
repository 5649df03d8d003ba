"""Warm ranks: start N ranks once, then run a function on all of them in milliseconds.

    pool = workbench.ranks(np=2, engine="horovod")   # horovodrun starts 2 ranks, once
    job = pool.run(fn, 3)                            # a Job, like workbench.launch(fn, 3)
    job.wait(); job.results()                        # [rank 0's value, rank 1's value]
    pool.close()                                     # or let the kernel end it

Each call is a `Job` that the ranks (rank/pool.py) launch: docs/ARCHITECTURE.md, "Warm ranks".
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES, TorchEngine
from workbench.launch.by_value import pickle_function
from workbench.launch.job import Job
from workbench.launch.pool_call import POOL_RANK_MODULE, POOLS, WarmRanks, folder, running_pool
from workbench.launch.starting import qualified_name, safe_name, start, start_module
from workbench.launch.watch import one_line
from workbench.rank import channel

#: Settings fixed when a rank's process starts: a job that changes one needs fresh ranks.
AT_PROCESS_START = ("hosts", "env", "launcher", "timeline", "cycle_time_ms", "cpu_bind",
                    "device")
#: A pool's ranks write nothing while they wait for work: never call them stalled (s).
IDLE_FOR_EVER_S = 86_400.0


class _Ranks:
    """One start of a pool's ranks: their job, their sockets, whether they are all there."""

    def __init__(self, pool: Pool) -> None:
        self.pool, self.key = pool, channel.new_key()
        self.server, self.address = channel.listen(tcp=pool.cfg.launcher == "slurm")
        self.conns: dict[int, Any] = {}
        self.lost: dict[int, int] = {}      # rank -> pid, of ranks whose channel closed
        self.pids: dict[int, int] = {}
        self.ready, self._ending, self.ended = threading.Event(), threading.Lock(), False
        self.job = start_module(pool.engine, pool.np, POOL_RANK_MODULE,
                                ["--address", self.address], name=f"pool-{pool.engine}",
                                stall_timeout=IDLE_FOR_EVER_S,
                                env=[f"{channel.ENV_KEY}={self.key}"], **pool.fields)
        threading.Thread(target=self._accept, name=f"pool-{self.job.run_id}",
                         daemon=True).start()

    def _accept(self) -> None:
        """Take connections one at a time until every rank has proved itself and named itself."""
        while len(self.conns) < self.pool.np and not self.job.done:
            try:
                conn = channel.accept(self.server, self.key)
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            hello = channel.receive(conn, channel.MAX_REPLY) if conn and conn.poll(
                channel.HELLO_S) else None
            rank = hello[0].get("rank") if hello else None
            if not isinstance(rank, int) or not 0 <= rank < self.pool.np or rank in self.conns:
                if conn:
                    conn.close()
                continue
            self.pids[rank], self.conns[rank] = hello[0].get("pid", -1), conn
            threading.Thread(target=self._follow, args=(rank, conn), daemon=True).start()
        self.server.close()
        if len(self.conns) == self.pool.np:
            self.ready.set()

    def _follow(self, rank: int, conn: Any) -> None:
        while (message := channel.receive(conn, channel.MAX_REPLY)) is not None:
            header, warm = message[0], self.pool.warm
            if header.get("op") == "done" and warm is not None and id(warm) == header.get("id"):
                if header.get("left"):  # (before its reply counts: the call may end then)
                    warm.left[rank] = list(header["left"])
                warm.replies.add(rank)
                warm.wake.set()
        self.lost[rank] = self.pids.get(rank, -1)
        if (warm := self.pool.warm) is not None:  # its call sees which rank was lost
            warm.wake.set()
        if self.pool.alive and self.ready.is_set():
            pids = ", ".join(f"rank {r} (pid {p})" for r, p in sorted(self.lost.items()))
            self.pool.restart(f"lost {pids}", self)

    def send_all(self, header: dict[str, Any], payload: bytes = b"",
                 ranks: list[int] | None = None) -> None:
        for rank in range(self.pool.np) if ranks is None else ranks:
            with contextlib.suppress(OSError, KeyError):  # a lost rank is seen by the call
                channel.send(self.conns[rank], header, payload)

    def end(self) -> None:
        """Once, whichever threads ask: a descriptor closed twice may by then be another's."""
        with self._ending:  # a second caller returns once the first has ended them
            if self.ended:
                return
            self.ended = True
            self.send_all({"op": "quit"})
            self.job.wait(3.0)
            self.job.stop()
            for conn in list(self.conns.values()):
                conn.close()
            with contextlib.suppress(OSError):
                self.server.close()


class Pool(contextlib.AbstractContextManager):
    """`np` warm ranks of `engine` with JobConfig's `fields`: see `ranks()`."""

    def __init__(self, np: int, engine: str, fields: dict[str, Any]) -> None:
        for what, value, allowed in (("engine", engine, ("horovod", "torch")),
                                     ("launcher", fields["launcher"], ("local", "slurm"))):
            if value not in allowed:
                raise ConfigError(f"a pool of warm ranks runs on {what} {' or '.join(allowed)}, "
                                  f"not {value!r}")
        self.np, self.engine, self.runs_dir, self.fields = np, engine, fields["runs_dir"], fields
        self.cfg = JobConfig(engine=engine, np=np, stall_timeout=IDLE_FOR_EVER_S,
                             **fields).validate()  # bad: one line
        self.restarts: list[str] = []   # why the ranks were restarted, oldest first
        self.failed: str | None = None  # why the pool can run nothing more, in one line
        self._lock = threading.RLock()
        self.line: list[Turn] = []      # calls and loans, the one under way first
        self.warm: WarmRanks | None = None  # the launcher of the call under way
        self.alive = True  # until closed
        self._ranks = _Ranks(self)

    @property
    def job(self) -> Job:
        return self._ranks.job

    @property
    def ready(self) -> bool:
        return self._ranks.ready.is_set() and not self._ranks.job.done

    def wait_ready(self, timeout: float | None = None) -> Pool:
        """Block until every rank waits for work; RuntimeError if they fail to start,
        TimeoutError after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready:
            if not self.alive or self.failed:
                raise RuntimeError(self.failed or "this pool is closed: start another with "
                                   "workbench.ranks()")
            ranks = self._ranks
            if ranks.job.done and not ranks.ready.is_set() and ranks is self._ranks:
                failure = (ranks.job.summary or {}).get("failure") or {}
                raise RuntimeError(f"the pool's ranks could not start ({ranks.job.status}, "
                                   f"run {ranks.job.run_id}): {failure.get('error')}")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the pool's ranks were not ready after {timeout:g} s "
                                   f"({ranks.job.status}: run {ranks.job.run_id})")
            time.sleep(0.02)  # (ranks lost and not yet replaced are not ready either)
        return self

    def run(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
            stall_timeout: float = IDLE_FOR_EVER_S) -> Job:
        """Run `fn(*args)` on every rank, as `workbench.launch(fn, *args)`; returns the call
        (a `Job`) at once, queued behind the calls before it and the ranks' start; "stalled"
        after `stall_timeout` s without a `report()`."""
        name = name or safe_name(getattr(fn, "__name__", "function"))
        cfg = dataclasses.replace(self.cfg, name=name, stall_timeout=stall_timeout).validate()
        cfg.extra = {"function": qualified_name(fn)}  # what it ran, on record
        return self.call(cfg, "function", pickle_function(fn, args))

    def start(self, cfg: JobConfig) -> Job:
        """Run the training job `cfg` here (a `Job`, at once); ConfigError if it cannot."""
        return start(cfg, pool=self)

    def run_code(self, code: str, name: str = "cell", keep: bool = False) -> Job:
        """Run Python source `code` on every rank (`%%ranks`) in a fresh namespace, or with
        `keep` in the one every such cell shares on that rank."""
        cfg = dataclasses.replace(self.cfg, name=name).validate()
        return self.call(cfg, "kept code" if keep else "code", code.encode())

    def why_not(self, cfg: JobConfig) -> str | None:
        """Why the (validated) job `cfg` cannot run on this pool; None if it can."""
        family = "torch" if isinstance(ENGINES[cfg.engine], TorchEngine) else cfg.engine
        if family != self.engine:
            return f"--engine {cfg.engine} is not launched by this {self.engine} pool's launcher"
        if cfg.world_size != self.np:
            return f"the job has {cfg.world_size} ranks and the pool {self.np}"
        if cfg.resolved_threads() != self.cfg.resolved_threads():
            return (f"the job asks {cfg.resolved_threads()} threads per rank and the pool's "
                    f"ranks have {self.cfg.resolved_threads()}")
        if folder(cfg.runs_dir) != folder(self.runs_dir):
            return f"the job's runs folder is {cfg.runs_dir}, the pool's {self.runs_dir}"
        if changed := [f for f in AT_PROCESS_START if getattr(cfg, f) != getattr(self.cfg, f)]:
            return f"the job sets {', '.join(changed)}, fixed when a rank's process starts"
        return None

    def call(self, cfg: JobConfig, kind: str, payload: bytes) -> Job:
        """Run `payload` of `kind` as the job `cfg` once the ranks are ready and it is its turn."""
        if not self.alive or self.failed:
            raise RuntimeError(self.failed or "this pool is closed: start another with "
                               "workbench.ranks()")
        warm = WarmRanks(self._ranks, kind, payload)
        turn = Turn(self, warm)
        turn.job = Job(cfg, warm, turn)
        return turn.job

    def lend(self, engine: str, n_cores: int) -> Turn | None:
        """A loan of this idle pool's cores to a job of its launcher binding `n_cores`, or None."""
        family = "torch" if isinstance(ENGINES[engine], TorchEngine) else engine
        with self._lock:
            if (family == self.engine and 0 < n_cores <= len(self.job.cores or [])
                    and not self.line and self.ready and self.alive):
                return Turn(self, None, n_cores)
        return None

    def close(self) -> None:
        self.alive = False
        with self._lock:
            calls = [turn for turn in self.line if turn.job is not None]
        for turn in reversed(calls):  # queued calls first: they must not start meanwhile
            turn.job.stop()
        with self._lock:  # a job its cores are lent to ends them, when it ends (release)
            if self.line:
                return
        self._ranks.end()
        for key, pool in list(POOLS.items()):
            if pool is self:
                del POOLS[key]

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if not self.alive else "ready" if self.ready else "starting"
        return f"<Pool {self.engine} np={self.np} {state} ({self.job.run_id})>"

    def restart(self, why: str, ranks: _Ranks) -> None:
        """Replace `ranks` (if still current); if that fails, the pool fails, in one line."""
        with self._lock:
            if not self.alive or self.failed or ranks is not self._ranks:
                return
            self.restarts.append(why)
            try:
                self._ranks = _Ranks(self)
            except Exception as err:  # noqa: BLE001 - any error: the pool can run nothing
                self.failed = (f"this pool failed: it could not restart its ranks ({why}): "
                               f"{one_line(err)}; close it and start another with "
                               "workbench.ranks()")
        threading.Thread(target=ranks.end, daemon=True).start()


class Turn:
    """A job's ticket (job.py) in its pool's line: a call, or a loan of the pool's cores."""

    warning: str | None = None

    def __init__(self, pool: Pool, warm: WarmRanks | None, n_cores: int = 0) -> None:
        self.pool, self.warm, self.n_cores = pool, warm, n_cores
        self.cores: list[int] | None = None
        self.run_id, self.reason, self.since = "?", "its turn", time.time()
        self.job: Job | None = None
        with pool._lock:
            pool.line.append(self)

    def join(self, run_id: str) -> None:
        self.run_id = run_id

    @property
    def position(self) -> int:
        line = self.pool.line
        return line.index(self) + 1 if self.cores is None and self in line else 0

    def poll(self) -> bool:
        pool = self.pool
        with pool._lock:
            if self.cores is not None or self not in pool.line:
                return self.cores is not None and self in pool.line
            if pool.failed or not pool.alive:
                raise RuntimeError(pool.failed or "the pool was closed")
            if pool.line[0] is not self:
                self.reason = f"your warm pool: {pool.line[0]}"
                return False
            if not pool.ready:
                self.reason = f"your warm pool's ranks to start (run {pool.job.run_id})"
                return False
            held = pool.job.cores or []
            self.cores = held[:self.n_cores] if self.warm is None else held
            if self.warm is not None:  # its replies come here, from the ranks of now
                self.warm.ranks, pool.warm = pool._ranks, self.warm
            self.since = time.time()
            return True

    def release(self) -> None:
        pool = self.pool
        with pool._lock:
            if self in pool.line:
                pool.line.remove(self)
            if not pool.alive and not pool.line and self.warm is None:  # the last loan ended
                threading.Thread(target=pool._ranks.end, daemon=True).start()

    def __str__(self) -> str:
        what = "a call" if self.warm is not None else "a loan of its cores to"
        state = "running" if self.cores is not None else "waiting"
        return f"{what} run {self.run_id} ({state}, {time.time() - self.since:.0f} s)"


def ranks(np: int = 2, engine: str = "horovod", runs_dir: str = "runs",
          threads_per_rank: int = 1, cpu_bind: str = "core", launcher: str = "local",
          **slurm: Any) -> Pool:
    """This process's pool of `np` warm ranks of `engine`: the running one, or a new one, at
    once. `cpu_bind="none"`: its ranks hold no cores while they wait; `launcher="slurm"`:
    Slurm places them (JobConfig's Slurm fields in `slurm`), and they connect over TCP."""
    pool = running_pool(engine, np, runs_dir, launcher)
    if pool is None:
        pool = Pool(np, engine, {"runs_dir": runs_dir, "threads_per_rank": threads_per_rank,
                                 "cpu_bind": cpu_bind, "launcher": launcher, **slurm})
        POOLS[engine, np, folder(runs_dir), launcher] = pool
    return pool


@atexit.register  # after job.py's stop_all: runs before it
def close_all() -> None:
    for pool in list(POOLS.values()):
        pool.close()
