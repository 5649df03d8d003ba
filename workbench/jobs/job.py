"""A running job: launch it, watch it, stop it, and always leave a complete record.

`start(cfg)` writes `config.json`, starts the engine's launcher and returns a `Job` at once.
Before launching, the job takes its cores from the host's allocation (cores.py): while
other jobs hold them, it is "queued" and a thread waits for its turn, then launches.
A watcher thread then checks the job five times a second:

- every rank reported success and the launcher ended  -> "succeeded";
- a rank reported an exception, or its process vanished without reporting (kill -9, out
  of memory), or the launcher failed                   -> "failed", naming the rank;
- nothing new in metrics.jsonl for `stall_timeout` s  -> "stalled";
- `stop()` was called                                 -> "stopped".

With `launcher="slurm"` the job is submitted to Slurm instead (see slurm.py): it is
"pending" while Slurm queues it, ranks are watched through what they write in the runs
folder and the job's state in Slurm, and stopping it is `scancel`.

Whatever the outcome, every process of the job is ended (see processes.py) and
`summary.json` is written atomically, so a crash never leaves a half-written summary.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import platform
import subprocess
import threading
import time
import warnings
import weakref
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from workbench.config import ConfigError, JobConfig
from workbench.hosts.cpu import cpu_budget
from workbench.jobs import cores, slurm
from workbench.jobs.devices import rank_environment, resolve_device
from workbench.jobs.engines import ENGINES, TRAINING_MODULES
from workbench.jobs.processes import (
    free_port,
    job_processes,
    pid_alive,
    rank_pids,
    terminate,
)
from workbench.records import (
    MetricsReader,
    RunRecord,
    events,
    new_run_dir,
    of_kind,
    read_json,
    throughput,
    write_json_atomic,
)
from workbench.training.checkpoint import apply_resume
from workbench.training.reporter import ENV_OWNER, ENV_RUN_DIR, ENV_RUN_ID, ENV_T0

FINAL_STATES = ("succeeded", "failed", "stopped", "stalled")
POLL_S = 0.2
QUEUE_POLL_S = 0.5   # how often a queued job looks whether its turn has come
_LIVE_JOBS: weakref.WeakSet[Job] = weakref.WeakSet()


class Job:
    """One launched job. Create it with `start()` or `start_module()`."""

    def __init__(self, cfg: JobConfig, module: str, args: list[str],
                 files: dict[str, bytes] | None = None) -> None:
        self.config = cfg
        sharing = cores.settings()  # a bad setting fails here, before anything is written
        self.run_id, self.run_dir = new_run_dir(cfg.runs_dir, _label(cfg))
        for name, data in (files or {}).items():  # inputs the ranks read as they start
            (self.run_dir / name).parent.mkdir(parents=True, exist_ok=True)  # e.g. user/
            (self.run_dir / name).write_bytes(data)
        self.world_size = cfg.world_size
        self.warnings: list[str] = []
        self._status = "running"
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._reader = MetricsReader(self.run_dir / "metrics.jsonl")
        self._failure: dict[str, Any] | None = None
        self._proc: subprocess.Popen[bytes] | slurm.SlurmBatch | None = None
        self._slurm = cfg.launcher == "slurm"
        self._started = self._asked = time.time()
        # ---- the gate: take this job's cores from the host's allocation, or queue for them
        self._ticket = SlurmTicket() if self._slurm else \
            cores.Ticket(self.run_id, cores_needed(cfg), sharing)
        if self._ticket.poll():
            try:
                self._launch(module, args)
            except BaseException:
                self._ticket.release()
                raise
        else:
            self._status = "queued"
            threading.Thread(target=self._wait_for_cores, args=(module, args),
                             name=f"queue-{self.run_id}", daemon=True).start()

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
        return self._proc.pending_reason if self._slurm and self._proc is not None else None

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
        """The contents of summary.json once the job has ended, else None."""
        return read_json(self.run_dir / "summary.json") if self.done else None

    def metrics(self) -> list[dict[str, Any]]:
        """Every metrics record written so far (steps, epochs, events)."""
        return list(self._reader.all())

    def result(self) -> dict[str, Any] | None:
        """What rank 0 wrote with `ctx.write_result()`, or None."""
        return read_json(self.run_dir / "result.json")

    def results(self) -> list[Any]:
        """Each rank's return value, in rank order (jobs started with `workbench.launch`).

        Every rank of such a job pickles what its function returned into
        `results/rank<k>.pkl`. Raises RuntimeError naming the ranks that have not returned
        (the job is still running, failed or was stopped). The files are unpickled: read only
        results of your own runs.
        """
        missing, values = [], []
        for rank in range(self.world_size):
            path = self.run_dir / "results" / f"rank{rank}.pkl"
            if not path.exists():
                missing.append(rank)
                continue
            values.append(pickle.loads(path.read_bytes()))
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
            while not self._ticket.poll():
                if self._done.wait(QUEUE_POLL_S):
                    return  # stopped while queued; _finish left the queue
        except (OSError, ConfigError) as err:  # the shared folder went away, say
            self._finish("failed", {"rank": None, "error": f"lost its place in the queue for "
                                                           f"cores: {err}"})
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
        write_json_atomic(self.run_dir / "config.json", cfg.to_dict())
        me = psutil.Process()
        threads = cfg.resolved_threads()
        env = {
            **os.environ,
            ENV_RUN_DIR: str(self.run_dir), ENV_RUN_ID: self.run_id,
            ENV_OWNER: f"{me.pid}:{me.create_time()}", ENV_T0: repr(time.time()),
            "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
            **rank_environment(cfg),
        }
        if cfg.timeline:
            env["HOROVOD_TIMELINE"] = str(self.run_dir / "timeline.json")
            # Without the response cache every step is negotiated in full, so the timeline
            # shows each rank's wait for the others at every step, not only the first.
            env["HOROVOD_CACHE_CAPACITY"] = "0"
        if cfg.cycle_time_ms:
            # How often Horovod's background thread looks for gradients ready to allreduce
            # (default 1 ms). Other engines have no such thread and ignore it.
            env["HOROVOD_CYCLE_TIME"] = repr(cfg.cycle_time_ms)
        if self._slurm:  # ---- Slurm hook: Slurm starts the ranks (see slurm.py) ----
            # The ranks run on compute nodes, where our pid means nothing: no owner watchdog.
            del env[ENV_OWNER]
            self._started = time.time()
            self._proc = slurm.submit(cfg, self.run_id, self.run_dir, module, args, env)
            _LIVE_JOBS.add(self)
            threading.Thread(target=self._watch, name=f"watch-{self.run_id}",
                             daemon=True).start()
            return
        if cfg.oversubscribed():
            self.warnings.append(
                f"{cfg.world_size} ranks x {threads} threads exceed the {cpu_budget().usable}"
                " cores this host gives us: ranks will share cores and speedups will flatten")
            warnings.warn(self.warnings[-1], stacklevel=3)
        if self._ticket.warning:
            self.warnings.append(self._ticket.warning)
            warnings.warn(self.warnings[-1], stacklevel=3)
        engine = ENGINES[cfg.engine]
        cmd = engine.command(cfg.world_size, module, args, cfg.hosts, free_port())
        if self._ticket.cores:  # the launcher and every rank it starts inherit these cores
            cmd = ["taskset", "--cpu-list", ",".join(map(str, self._ticket.cores)), *cmd]
        self._started = time.time()
        with open(self.run_dir / "logs" / "launcher.log", "ab") as log:
            log.write((" ".join(cmd) + "\n").encode())
            log.flush()
            # A new session, so a Ctrl-C in a terminal reaches us, not the ranks directly:
            # we stop them ourselves, in order, and record it.
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True)
        _LIVE_JOBS.add(self)
        threading.Thread(target=self._watch, name=f"watch-{self.run_id}", daemon=True).start()

    # ------------------------------------------------------------------ watching
    def _vanished(self, exits: dict[int, dict[str, Any]]) -> list[tuple[int, int | None]]:
        """(rank, pid) of ranks whose process is gone (or a zombie) without an exit record."""
        if self._slurm:  # ---- Slurm hook: ranks on compute nodes, seen through the runs folder
            return self._proc.vanished(exits)
        return [(rank, pid) for rank, pid in sorted(rank_pids(self.run_dir).items())
                if rank not in exits and not pid_alive(pid)]

    def _watch(self) -> None:
        last_size, last_progress = -1, time.time()
        while not self._done.is_set():
            time.sleep(POLL_S)
            size = _size(self.run_dir / "metrics.jsonl")
            if size != last_size or self.status == "pending":  # queued time is no stall
                last_size, last_progress = size, time.time()
            outcome = self._check()
            if outcome is None and time.time() - last_progress > self.config.stall_timeout:
                outcome = ("stalled", {"error": f"no progress for {self.config.stall_timeout:g}"
                                                " s (a rank may be blocked waiting for another)"})
            if outcome is not None:
                self._finish(*outcome)

    def _check(self) -> tuple[str, dict[str, Any]] | None:
        """The job's outcome if it has one now, else None.

        When one rank dies, the others usually fail a moment later on a broken connection,
        so the culprit is chosen with care: first a rank that vanished without reporting
        (kill -9, out of memory), else the rank that reported an error first.
        """
        exits = _exit_records(self.run_dir)
        vanished = self._vanished(exits)
        if vanished:
            time.sleep(POLL_S)  # it may have written its exit record as it ended
            exits = _exit_records(self.run_dir)
            vanished = [(r, pid) for r, pid in vanished if r not in exits]
        if vanished:
            rank, pid = vanished[0]
            return "failed", {"rank": rank, "error": f"rank {rank} (pid {pid}) ended without "
                              "reporting: killed by a signal (e.g. kill -9) or by the "
                              "out-of-memory killer", "others": _errors(exits)}
        errors = sorted((rec.get("time", 0.0), rank) for rank, rec in exits.items()
                        if not rec.get("ok"))
        if errors:
            rank = errors[0][1]
            rec = exits[rank]
            return "failed", {"rank": rank, "error": rec.get("error"),
                              "traceback": rec.get("traceback"),
                              "others": _errors(exits, but=rank)}
        all_ok = len(exits) >= self.world_size
        rc = self._proc.poll()
        if all_ok and rc is None:
            try:  # the launcher tidies up after its ranks; give it a moment
                rc = self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                rc = 0
        if rc is None:
            return None
        if all_ok and rc == 0:
            return "succeeded", None
        missing = sorted(set(range(self.world_size)) - set(exits))
        ended = self._proc.ending() if self._slurm else \
            f"the {self.config.engine} launcher exited with code {rc}"
        return "failed", {"rank": missing[0] if missing else None,
                          "error": f"{ended} before rank(s) {missing} reported"}

    def _finish(self, status: str, failure: dict[str, Any] | None = None) -> None:
        """End all processes, then write summary.json. Runs once, whoever calls first."""
        with self._lock:
            if self._done.is_set():
                return
            if self._slurm and self._proc is not None:  # ---- Slurm hook: scancel, and wait
                self._proc.cancel()                      # until Slurm has ended the job
            survivors = terminate(job_processes(self.run_id, self.run_dir, self.launcher_pid))
            try:
                if self._proc is not None:
                    self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(OSError, ConfigError):  # never lose the summary for it
                self._ticket.release()  # the processes are gone: the cores are free again
            if failure and failure.get("rank") is not None:
                failure["log_tail"] = RunRecord(self.run_dir).log(failure["rank"], last=20)
            elif failure:
                failure["log_tail"] = RunRecord(self.run_dir).log("launcher", last=20)
            self._failure = failure
            summary = self._summary(status, failure)
            if survivors:
                summary["survivors"] = [p.pid for p in survivors]
            write_json_atomic(self.run_dir / "summary.json", summary)
            self._status = status
            self._done.set()
        if survivors:
            raise RuntimeError(f"processes {[p.pid for p in survivors]} of {self.run_id} "
                               "survived SIGKILL")

    def _summary(self, status: str, failure: dict[str, Any] | None) -> dict[str, Any]:
        cfg, records = self.config, self._reader.all()
        steps, epochs = of_kind(records, "step"), of_kind(records, "epoch")
        starts = events(records, "start")
        result = self.result() or {}
        last_epoch = [e for e in epochs if e["epoch"] == max((x["epoch"] for x in epochs),
                                                             default=-1)]
        summary: dict[str, Any] = {
            "run_id": self.run_id, "run_dir": str(self.run_dir), "status": status,
            "engine": cfg.engine, "np": self.world_size, "launcher": cfg.launcher,
            "hosts": sorted({r["host"] for r in starts}),
            "threads_per_rank": cfg.resolved_threads(),
            "cores": self._ticket.cores,
            "queued_s": (self._started if self._proc else time.time()) - self._asked,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self._started)),
            "duration_s": time.time() - self._started,
            "startup_s": min((s["time"] - s["step_time_s"] for s in steps), default=None),
            "epochs_completed": len({e["epoch"] for e in epochs if e["rank"] == 0}),
            "steps_completed": len({s["step"] for s in steps}),
            "samples_per_s": throughput(steps),
            "train_time_s": (max(s["time"] for s in steps) - min(
                s["time"] - s["step_time_s"] for s in steps)) if steps else None,
            "final_loss": result.get("final_loss"),
            "final_accuracy": result.get("final_accuracy"),
            "last_epoch_loss": _mean(e["loss"] for e in last_epoch),
            "last_epoch_accuracy": _mean(e["accuracy"] for e in last_epoch),
            "warnings": self.warnings,
            "versions": _versions(),
        }
        if self._slurm:
            summary["slurm_job_id"] = self._proc.job_id
            summary["slurm_state"] = self._proc.state
        if failure:
            summary["failure"] = failure
        return summary


class SlurmTicket:
    """The gate's answer for a Slurm job: go. It waits in Slurm's queue, for the cluster's
    cores, not in this host's queue for this host's cores."""

    cores: list[int] = []
    warning: str | None = None
    position = 0

    def poll(self) -> bool:
        return True

    def release(self) -> None:
        """Nothing to give back here: Slurm frees the job's cores."""


# ---------------------------------------------------------------------- starting jobs
def start(cfg: JobConfig) -> Job:
    """Validate `cfg` and launch a training job; returns at once (see `Job`).

    With `cfg.resume` set, the job continues that run from its last checkpoint, taking its
    configuration for every field left at its default (see `training/checkpoint.py`).
    """
    cfg = apply_preset(apply_resume(cfg)).validate()
    _check_engine(cfg.engine)
    if cfg.engine not in TRAINING_MODULES:
        raise ConfigError(f"--engine {cfg.engine} runs the labs' workers, not training: use "
                          f"one of {', '.join(TRAINING_MODULES)}")
    if cfg.launcher == "slurm":
        slurm.check(cfg)
    cfg, note = resolve_device(cfg)     # "auto" settles here; "cuda" is checked here
    job = Job(cfg, TRAINING_MODULES[cfg.engine], [])
    _note(job, note)
    return job


def start_module(engine: str, np: int, module: str, args: list[str] | None = None,
                 runs_dir: str = "runs", name: str = "", threads_per_rank: int = 1,
                 hosts: str | None = None, stall_timeout: float = 120.0,
                 files: dict[str, bytes] | None = None, **fields: Any) -> Job:
    """Launch any rank module (one that uses `RankContext`) as a job on `np` ranks.

    `files` ({path in the run folder: bytes}) are written into the run folder before the
    ranks start: inputs too large for command-line arguments (see workers.py), such as the
    pickled function of `workbench.launch`.
    """
    cfg = JobConfig(engine=engine, np=1 if engine == "serial" else np, runs_dir=runs_dir,
                    name=name, threads_per_rank=threads_per_rank, hosts=hosts,
                    stall_timeout=stall_timeout, **fields).validate()
    _check_engine(engine)
    if cfg.launcher == "slurm":
        slurm.check(cfg)
    cfg, note = resolve_device(cfg)
    job = Job(cfg, module, list(args or []), files)
    _note(job, note)
    return job


def apply_preset(cfg: JobConfig) -> JobConfig:
    """Fill the preset's values into the fields that still hold their defaults."""
    from dataclasses import fields, replace

    from workbench.config import PRESETS

    if cfg.preset is None:
        return cfg
    if cfg.preset not in PRESETS:
        cfg.validate()  # raises ConfigError naming the preset
    defaults = {f.name: f.default for f in fields(JobConfig)}
    changes = {k: v for k, v in PRESETS[cfg.preset].items() if getattr(cfg, k) == defaults[k]}
    return replace(cfg, **changes)


def stop_all() -> None:
    """Stop every job this process started (called when Python exits)."""
    for job in list(_LIVE_JOBS):
        if not job.done:
            job.stop()


atexit.register(stop_all)


# ---------------------------------------------------------------------- helpers
def _check_engine(engine: str) -> None:
    problem = ENGINES[engine].available()
    if problem:
        raise ConfigError(f"--engine {engine} cannot run here: {problem}")


def _note(job: Job, note: str | None) -> None:
    """Add a warning to a job that has just started (shown by the CLI and the panel)."""
    if note:
        job.warnings.append(note)
        warnings.warn(note, stacklevel=3)


def cores_needed(cfg: JobConfig) -> int:
    """Cores this job binds on this host: ranks × threads, or 0 when it binds none here
    (`cpu_bind="none"`, or ranks on other hosts, or Slurm's): then it only counts for its
    user's limit."""
    if cfg.cpu_bind != "core" or cfg.hosts is not None or cfg.launcher == "slurm":
        return 0
    return cfg.world_size * cfg.resolved_threads()


def _label(cfg: JobConfig) -> str:
    return f"{cfg.name or cfg.engine}-np{cfg.world_size}"


def _exit_records(run_dir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for f in (run_dir / "exit").glob("rank*.json"):
        rec = read_json(f)
        if rec is not None:
            out[int(f.stem[4:])] = rec
    return out


def _errors(exits: dict[int, dict[str, Any]], but: int | None = None) -> dict[int, str]:
    """{rank: error} of the ranks that reported one (often a consequence of the first)."""
    return {r: rec.get("error") for r, rec in exits.items() if not rec.get("ok") and r != but}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("torch", "horovod", "workbench"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out
