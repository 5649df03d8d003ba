"""A running job: launch it, watch it, stop it, and always leave a complete record.

`start(cfg)` (starting.py) makes a `Job`, which writes `config.json`, takes its cores from
the host's allocation (cores.py: "queued", a thread waiting for its turn, while other jobs
hold them), starts the ranks (launchers.py) and returns at once. A watcher thread then looks
five times a second (watch.py) until the job has succeeded, failed, stalled or was stopped;
whatever the outcome, every process is ended and `summary.json` written (ending.py): a job
never stays "running" for ever. Under Slurm (slurm.py) it is "pending" while Slurm queues it.
"""

from __future__ import annotations

import atexit
import shutil
import threading
import time
import warnings
import weakref
from typing import Any

from workbench.caller import warn_caller
from workbench.config import JobConfig
from workbench.engines import ENGINES
from workbench.hosts.cpu import cpu_budget
from workbench.launch import cores
from workbench.launch.devices import rank_environment
from workbench.launch.ending import Ending
from workbench.launch.environment import recorded, split_environment, write_env_file
from workbench.launch.launched import Launched
from workbench.launch.launchers import launcher_for
from workbench.launch.watch import Watching, _one_line
from workbench.rank.protocol import (
    ENV_FILE,
    ENV_OWNER,
    ENV_RUN_DIR,
    ENV_RUN_ID,
    ENV_T0,
    owner_id,
)
from workbench.records import CorruptRecord, RunRecord, new_run_dir, read_json, write_json_atomic
from workbench.records.liveness import owner_beat, prepare_heartbeats
from workbench.records.private import load_own_pickle

FINAL_STATES = ("succeeded", "failed", "stopped", "stalled")
QUEUE_POLL_S = 0.5   # how often a queued job looks whether its turn has come
#: The module every rank runs: it opens the rank's context, then runs the rank's code.
RANK_WRAPPER = "workbench.rank.wrapper"
_LIVE_JOBS: weakref.WeakSet[Job] = weakref.WeakSet()


class Job(Watching, Ending):
    """One launched job. Create it with `start()` or `start_module()`."""

    #: Whether summary.json is fsynced (see `write_json_atomic`; a pool's call is not).
    durable = True

    def __init__(self, cfg: JobConfig, module: str, args: list[str],
                 files: dict[str, bytes] | None = None) -> None:
        self.config = cfg
        sharing = cores.settings()  # a bad setting fails here, before anything is written
        self.run_id, self.run_dir = new_run_dir(cfg.runs_dir, cfg.run_label)
        # Written first, so that even a run stopped while it queues is a run on record.
        # (Secret --env values are not recorded: see environment.py.)
        write_json_atomic(self.run_dir / "config.json",
                          {**cfg.to_dict(), "env": recorded(cfg.env)})
        for name, data in (files or {}).items():  # inputs the ranks read as they start
            (self.run_dir / name).parent.mkdir(parents=True, exist_ok=True)  # e.g. user/
            (self.run_dir / name).write_bytes(data)
        self.world_size = cfg.world_size
        self.warnings: list[str] = []
        self._watch_state()
        self._proc: Launched | None = None  # once started, how the ranks are seen
        self._started = self._asked = time.time()
        # ---- the gate: take this job's cores from the host's allocation, or queue for them
        try:
            self._launcher = launcher_for(cfg)  # how the ranks start: launchers.py
            self._ticket = self._launcher.ticket(self.run_id, cfg, sharing)
        except BaseException:  # the queue cannot be reached (its lock held for long, say):
            shutil.rmtree(self.run_dir, ignore_errors=True)  # no run, and no half record
            raise
        if self._launcher.shares_this_host and cfg.oversubscribed():  # said at once
            self._warn(f"{cfg.world_size} ranks x {cfg.resolved_threads()} threads exceed the "
                       f"{cpu_budget().usable} cores this host gives us: ranks will share cores "
                       "and speedups will flatten")
        if self._ticket.poll():
            try:
                self._launch(module, args)
            except BaseException:
                self._ticket.release()
                raise
        else:
            self._status = "queued"
            self._warn_of_own_pools(module)
            owner_beat(self.run_dir)  # a queued run is looked after too: not "lost"
            _LIVE_JOBS.add(self)      # and stopped when Python exits, before it launches
            threading.Thread(target=self._wait_for_cores, args=(module, args),
                             name=f"queue-{self.run_id}", daemon=True).start()

    def _warn_of_own_pools(self, module: str) -> None:
        """A job queued behind cores that this process's own warm ranks hold would wait
        until the pool is closed: say so (not to a pool's new ranks, which wait for its old
        ones to leave)."""
        from workbench.launch.open_pools import POOL_RANK_MODULE, holding_cores

        pools = holding_cores()
        if pools and module != POOL_RANK_MODULE:
            self._warn(f"this job waits for cores that your warm ranks hold "
                       f"({', '.join(map(repr, pools))}): close the pool (pool.close()) to "
                       "free them")

    def _warn(self, text: str) -> None:
        """Keep `text` among the job's warnings (the CLI and the panel show them), and warn
        from the first line outside the workbench that led here: the caller's cell or
        script, however deep the path (start, launch, a pool). From the queue's thread no
        caller's line led here, so the warning names the run instead."""
        self.warnings.append(text)
        if threading.current_thread().name == f"queue-{self.run_id}":
            warnings.warn(f"run {self.run_id}: {text}", stacklevel=1)
            return
        warn_caller(text)

    # ------------------------------------------------------------------ public API
    @property
    def status(self) -> str:
        """"queued" (waiting for this host's cores), "pending" (queued by Slurm), "running",
        "succeeded", "failed", "stopped" or "stalled"."""
        if self._status == "running" and self.pending_reason is not None:
            return "pending"
        return self._status

    @property
    def pending_reason(self) -> str | None:
        """Why Slurm still queues the job ("Resources", "Priority", ...); None otherwise."""
        return self._proc.pending_reason if self._proc is not None else None

    @property
    def queue_position(self) -> int:
        """While queued: 1 when this job starts next, 2 behind it, ...; else 0."""
        return self._ticket.position if self._status == "queued" else 0

    @property
    def cores(self) -> list[int] | None:
        """The cores allocated to this job ([]: none of its own), None while queued."""
        return self._ticket.cores

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def started_at(self) -> float:
        """When the launcher was started (while queued: when the job asked), in seconds
        since the epoch."""
        return self._started

    @property
    def launcher_pid(self) -> int | None:
        """Pid of the engine's launcher (horovodrun, torchrun, or the serial rank itself);
        None while the job is queued, and under Slurm, which starts the ranks on its nodes."""
        return self._proc.pid if self._proc is not None else None

    @property
    def summary(self) -> dict[str, Any] | None:
        """What summary.json holds once the job has ended (kept in memory too, in case it
        could not be written), else None."""
        return self._summary_data if self.done else None

    def metrics(self) -> list[dict[str, Any]]:
        """Every metrics record written so far (steps, epochs, events), all ranks merged.

        Safe to call from any thread, also while the watcher reads: each record once.
        """
        return self._reader.all()

    def result(self) -> dict[str, Any] | None:
        """What rank 0 wrote with `ctx.write_result()`, or None."""
        try:
            return read_json(self.run_dir / "result.json")
        except CorruptRecord:
            return None

    def results(self) -> list[Any]:
        """Each rank's return value, in rank order (jobs started with `workbench.launch`),
        from the pickles `results/rank<k>.pkl`.

        Raises RuntimeError naming the ranks that have not returned. Pickles are loaded only
        from a run folder of your own (records/private.py); another user's raises
        ForeignRecord.
        """
        missing, values = [], []
        for rank in range(self.world_size):
            path = self.run_dir / "results" / f"rank{rank}.pkl"
            if not path.exists():
                missing.append(rank)
                continue
            values.append(load_own_pickle(path, self.run_dir))
        if missing:
            raise RuntimeError(f"rank(s) {missing} of {self.run_id} have not returned a value"
                               f" (the job is {self.status}; job.wait() waits for the end)")
        return values

    def record(self) -> RunRecord:
        """This run's record on disk (logs, model, ...)."""
        return RunRecord(self.run_dir)

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends or `timeout` seconds pass; return the status.

        Ctrl-C (KeyboardInterrupt) while waiting stops the job before re-raising.
        """
        try:
            self._done.wait(timeout)
        except KeyboardInterrupt:
            self.stop()
            raise
        return self.status

    def stop(self) -> None:
        """End every process of the job (within about 5 s; under Slurm: `scancel`, within
        10 s) and record it as stopped."""
        self._finish("stopped")

    def __repr__(self) -> str:
        return f"<Job {self.run_id} {self._status}>"

    # ------------------------------------------------------------------ launching
    def _wait_for_cores(self, module: str, args: list[str]) -> None:
        """Wait in the host's queue for this job's turn, then launch (unless stopped)."""
        try:
            while not self._ticket.poll():  # False for ever once released by _finish
                if self._done.wait(QUEUE_POLL_S):
                    return  # stopped while queued; _finish left the queue
                owner_beat(self.run_dir)
        except Exception as err:  # noqa: BLE001 - any error fails the job: never queued for ever
            self._finish("failed", {"rank": None, "error": f"lost its place in the queue for "
                                                           f"cores: {_one_line(err)}"})
            return
        error = None
        with self._lock:
            if self._done.is_set():
                self._ticket.release()  # stopped just as the cores came
                return
            self._status = "running"
            try:
                self._launch(module, args)
            except Exception as err:  # e.g. the launcher cannot be executed
                error = f"could not launch the job after queueing: {err}"
        if error:
            self._finish("failed", {"rank": None, "error": error})

    def _launch(self, module: str, args: list[str]) -> None:
        cfg = self.config
        owner_beat(self.run_dir)  # before any rank starts: they read it from their start
        prepare_heartbeats(self.run_dir, self.world_size)  # (records/liveness.py: NFS)
        threads = cfg.resolved_threads()
        public, secret = split_environment(cfg.env)
        env = {
            **public,  # an allow-list: no secrets reach the ranks
            ENV_RUN_DIR: str(self.run_dir), ENV_RUN_ID: self.run_id,
            ENV_OWNER: owner_id(), ENV_T0: repr(time.time()),
            "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
            **rank_environment(cfg),
            **ENGINES[cfg.engine].environment(cfg, self.run_dir),  # e.g. Horovod's cycle time
        }
        if secret:  # values in a 0600 file, never on a command line (environment.py)
            env[ENV_FILE] = str(write_env_file(self.run_dir, secret))
        if self._ticket.warning:
            self._warn(self._ticket.warning)
        self._started = time.time()
        if module != RANK_WRAPPER:  # every rank runs in the wrapper, which opens its context
            module, args = RANK_WRAPPER, ["--module", module, *args]
        self._proc = self._launcher.start(cfg, self.run_id, self.run_dir, module, args, env,
                                          self._ticket.cores)
        _LIVE_JOBS.add(self)
        threading.Thread(target=self._watch, name=f"watch-{self.run_id}", daemon=True).start()


def stop_all() -> None:
    """Stop every job this process started (called when Python exits)."""
    for job in list(_LIVE_JOBS):
        if not job.done:
            job.stop()


atexit.register(stop_all)
