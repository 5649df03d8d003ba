"""Running a job through Slurm: write a batch script, `sbatch` it, watch the queue, `scancel`.

The ranks on the compute nodes are seen through the shared runs folder and Slurm's queue; how
and why: docs/ARCHITECTURE.md, "Supervision".
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from workbench.config import ConfigError, JobConfig
from workbench.launch.environment import ranks_environment
from workbench.launch.guard import end as end_process
from workbench.launch.launchers import GUARD, Exits, Launcher, Ranks, end_job_processes
from workbench.launch.slurm_script import write_scripts
from workbench.rank.protocol import ENV_OWNER
from workbench.records import read_json, write_json_atomic
from workbench.records.blame import Failure
from workbench.records.liveness import this_host
from workbench.records.store import open_file

#: Slurm states in which the job still holds (or waits for) resources.
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                 "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
UNKNOWN = ("UNKNOWN", "")  # `queue_state` when squeue does not answer
#: Seconds between two questions to Slurm's controller (each a process and an RPC).
QUERY_EVERY_S = 1.0
#: How long `sbatch` may take to answer, in seconds.
SBATCH_TIMEOUT_S = 60.0


def available() -> str | None:
    return None if shutil.which("sbatch") else (
        "`sbatch` is not on PATH (Slurm's client commands are missing): run on the cluster's "
        "login node or JupyterHub, or try scripts/local_slurm.sh up")


def check(cfg: JobConfig) -> None:
    """Raise ConfigError (one line) if `cfg` cannot be submitted to this cluster."""
    if problem := available():
        raise ConfigError(f"--launcher slurm cannot run here: {problem}")
    if cfg.partition is None:
        return
    try:
        out = subprocess.run(["sinfo", "-h", "-a", "-o", "%R"], capture_output=True, text=True,
                             timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"Slurm could not list the partitions: {exc}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError(f"Slurm could not list the partitions (sinfo: {last}); is SLURM_CONF "
                          "right and the controller up?")
    partitions = sorted(set(out.stdout.split()))
    if cfg.partition not in partitions:
        raise ConfigError(f"invalid --partition {cfg.partition!r}: this cluster's partitions "
                          f"are {', '.join(partitions) or '(none)'}")


def _sbatch(script: Path, run_id: str, run_dir: Path, env: dict[str, str]) -> str:
    """`sbatch --parsable script`: Slurm's job id, or ConfigError in one line (after a
    timeout, a job it may have queued all the same is cancelled by its name)."""
    cmd = ["sbatch", "--parsable", str(script)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                             timeout=SBATCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        cancel_by_name(run_id, env)
        raise ConfigError(f"sbatch did not answer within {SBATCH_TIMEOUT_S:g} s (is the "
                          f"controller busy or down?); any job it queued as {run_id} was "
                          "cancelled: try again") from None
    except OSError as exc:
        raise ConfigError(f"cannot run sbatch: {exc.strerror or exc}") from None
    with open(open_file(run_dir / "logs" / "launcher.log"), "a") as log:
        log.write(f"{shlex.join(cmd)}\n{out.stdout}{out.stderr}")
    if out.returncode != 0:  # nothing was queued, so nothing ran: leave no run behind
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError(f"sbatch refused the job: {last}")
    job_id = out.stdout.strip().split(";")[0]  # "id" or "id;cluster"
    if not job_id.isdigit():
        raise ConfigError(f"sbatch answered {out.stdout.strip()[:80]!r}, not a job id")
    return job_id


def cancel_by_name(name: str, env: dict[str, str], timeout: float = 15.0) -> None:
    """`scancel` this user's jobs named `name`, and wait until squeue lists none of them."""
    user = ["--name", name, "--user", str(os.getuid())]
    end = time.time() + timeout
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # the controller is down
        subprocess.run(["scancel", *user], capture_output=True, env=env, timeout=30)
        while time.time() < end:
            left = subprocess.run(["squeue", "-h", "-o", "%i", *user], capture_output=True,
                                  text=True, env=env, timeout=30)
            if left.returncode == 0 and not left.stdout.strip():
                return
            time.sleep(0.5)


class SlurmBatch(Launcher):
    """A batch job: `sbatch`ed, seen through Slurm's queue, ended with `scancel`."""

    def __init__(self, cfg: JobConfig, module: str, args: list[str]) -> None:
        self.cfg, self.module, self.args = cfg, module, args
        self.state, self.pending_reason = "PENDING", "waiting for the scheduler"
        self.final: dict[str, str] = {}  # `scontrol show job`'s fields, once ended
        self._asked = 0.0
        self.returncode: int | None = None

    def start(self, run_id: str, run_dir: Path, cores: list[int]) -> None:
        """Write the scripts and `sbatch` them with the ranks' environment, less the owner's
        pid (the ranks watch its heartbeat) and SLURM_* but SLURM_CONF; returns once queued."""
        self.run_id, self.run_dir, self.started = run_id, run_dir, time.time()
        script = write_scripts(self.cfg, run_id, run_dir, self.module, self.args)
        env = {k: v for k, v in ranks_environment(self.cfg, run_id, run_dir).items()
               if k != ENV_OWNER and (not k.startswith("SLURM_") or k == "SLURM_CONF")}
        # The guard scancels the job if this process dies: started first, it is never missing.
        with open(open_file(run_dir / "logs" / "launcher.log"), "ab") as log:
            self.guard = subprocess.Popen([sys.executable, str(GUARD), str(os.getpid()),
                                           "--scancel", run_id], stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env, start_new_session=True)
        try:
            self.job_id = _sbatch(script, run_id, run_dir, env)
        except BaseException:
            end_process(self.guard)
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing was queued (or it was cancelled)
            raise
        write_json_atomic(run_dir / "slurm" / "job.json", {"slurm_job_id": self.job_id})

    def exit_code(self, within_s: float = 0.0) -> int | None:
        """None while Slurm lists the job as active (asked every QUERY_EVERY_S), else its code."""
        deadline = time.monotonic() + within_s
        while (rc := self._ask(now=within_s > 0)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        return rc

    def _ask(self, now: bool) -> int | None:
        if self.returncode is not None:
            return self.returncode
        due = time.time() - self._asked >= QUERY_EVERY_S
        if not (now or due or (self.run_dir / "slurm" / "batch_exit.json").exists()):
            return None
        self._asked = time.time()
        state = queue_state(self.job_id)
        if state == UNKNOWN:
            return None  # the controller did not answer this time: ask again later
        if state is not None and state[0] in ACTIVE_STATES:
            self.state, reason = state  # Slurm's reason: "Resources", "Priority", ... or "None"
            self.pending_reason = None if self.state != "PENDING" else (
                "waiting for the scheduler" if reason == "None" else reason)
            return None
        self.pending_reason = None
        self.final = _final_state(self.job_id)
        self.state = self.final.get("JobState", "ENDED")
        batch = _batch_exit(self.run_dir)
        code = self.final.get("ExitCode", "0:0").split(":")
        self.returncode = int(batch.get("rc", code[0] if code[1] == "0" else 128 + int(code[1])))
        if self.state not in ("COMPLETED", "ENDED") and self.returncode == 0:
            self.returncode = 1  # cancelled, timed out, node failure: not a success
        return self.returncode

    def end(self, status: str, timeout: float = 10.0) -> list[int]:
        try:
            if self.exit_code(0.01) is None:
                subprocess.run(["scancel", self.job_id], capture_output=True, timeout=30)
                self.exit_code(timeout)  # (on a timeout, the sweep below still runs)
        finally:  # the job has ended, or has just been cancelled
            end_process(self.guard)
        return end_job_processes(self.run_id)

    def ending(self, rc: int) -> str:
        return (f"Slurm job {self.job_id} ended {self.state} (exit code "
                f"{self.final.get('ExitCode', self.returncode)})")

    def here(self, rank: int, ranks: Ranks) -> bool:
        return False  # on the compute nodes: their clocks are not the watcher's

    def vanished(self, exits: Exits, ranks: Ranks, ended: bool) -> list[Failure]:
        here = this_host()  # (only a pid of this host means anything here)
        pids = {rank: pid for rank, (pid, host) in ranks.items() if host == here}
        ended_tasks = sorted((rec.get("time", 0.0), int(f.stem[4:]))
                             for f in (self.run_dir / "tasks").glob("rank*.json")
                             if (rec := read_json(f)) is not None)
        return [Failure(rank, "vanished", self.started,
                        f"rank {rank} (pid {pids.get(rank)}) ended without reporting (its Slurm "
                        "task recorded its end): killed by a signal or out of memory")
                for _, rank in ended_tasks if rank not in exits]

    def undecided(self, exits: Exits, ranks: Ranks, since: float) -> bool:
        """A killed task's record may land moments after the peer error it caused."""
        return len(exits) < self.cfg.world_size

    def facts(self) -> dict[str, Any]:
        return {"slurm_job_id": self.job_id, "slurm_state": self.state}


def queue_state(job_id: str) -> tuple[str, str] | None:
    """(state, reason) of a job Slurm's queue lists, None once it says "Invalid job id",
    UNKNOWN when squeue fails (a busy controller must not make a job look finished)."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    if out.returncode != 0:
        return None if "Invalid job id" in out.stderr else UNKNOWN
    state, _, reason = out.stdout.strip().partition("|")
    return (state, reason) if state else None


def _final_state(job_id: str) -> dict[str, str]:
    """`scontrol show job`'s fields (JobState, ExitCode "exit:signal", ...), or {}."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                             text=True, timeout=30).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))
    return {}


def run_status(run_dir: Path) -> str | None:
    """"pending (<reason>)" for a run whose Slurm job is queued now, else None."""
    job = read_json(Path(run_dir) / "slurm" / "job.json")
    state = queue_state(str(job["slurm_job_id"])) if job else None
    return f"pending ({state[1]})" if state and state[0] == "PENDING" else None


def _batch_exit(run_dir: Path) -> dict[str, Any]:
    """The batch script's own record of its exit code, or {} (then Slurm's ExitCode counts)."""
    return read_json(run_dir / "slurm" / "batch_exit.json", quiet=True) or {}
