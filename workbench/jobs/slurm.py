"""Running a job through Slurm: write a batch script, `sbatch` it, watch the queue, `scancel`.

On a cluster nobody starts processes on the compute nodes by hand: the scheduler places the
job, queues it until the nodes are free, starts its tasks, and cancels it. So with
`launcher="slurm"` the workbench does not start ranks; it writes `slurm/job.sbatch` into
the run folder and submits it:

    sbatch --parsable runs/<run_id>/slurm/job.sbatch      -> Slurm's job id, at once

Inside the allocation the script starts the ranks the way each engine is started on a
cluster (each engine's `slurm_lines`, in engines.py; you can read, and resubmit, the script
that ran):

- `torch`: `srun` starts one task per rank. Slurm numbers them (SLURM_PROCID over the job,
  SLURM_LOCALID on each node, SLURM_NTASKS in all) and `slurm/task.sh` hands these numbers
  to torch.distributed under its own names (RANK, LOCAL_RANK, WORLD_SIZE), with MASTER_ADDR
  the allocation's first node. `--kill-on-bad-exit` ends every task when one fails.
- `horovod`: `horovodrun --gloo` on the first node, with `-H` built from the nodes Slurm
  gave (`scontrol show hostnames $SLURM_JOB_NODELIST`) and the tasks on each.
- `serial`: one task.

The ranks run on compute nodes, so the launcher does not watch them by pid. It watches
what they write into the shared runs folder (metrics, exit records, and `tasks/rank<k>.json`
that `task.sh` writes when a rank ends, which tells a rank killed by a signal from one that
reported) and the job's state in Slurm's queue: PENDING (with Slurm's reason: Resources,
Priority, ...), RUNNING, then gone. Accounting (`sacct`) is often off, so the batch script
records its own exit code in `slurm/batch_exit.json`, and Slurm's final state is read with
`scontrol show job` while Slurm still remembers the job (MinJobAge, 300 s by default).

Faults: the job is submitted with `--no-requeue` (a job requeued after a node failure would
run again from epoch 0 into the same run folder), and a guard process (guard.py), started
before `sbatch`, `scancel`s it by name if the process that submitted it dies. A `sbatch`
that times out may have queued the job: it is found by its name, the run id, and cancelled.
"""

from __future__ import annotations

import math
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from workbench.config import ConfigError, JobConfig, sbatch_args
from workbench.jobs.engines import ENGINES
from workbench.jobs.processes import rank_pids
from workbench.records import read_json, write_json_atomic

#: Slurm states in which the job still holds (or waits for) resources.
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                 "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
#: Seconds between two questions to Slurm's controller while nothing else has happened:
#: every question is a process and an RPC, and the queue changes on the scheduler's
#: time scale (seconds), not the watcher's (0.2 s).
QUERY_EVERY_S = 1.0
#: How long `sbatch` may take to answer, in seconds (a loaded controller takes seconds).
SBATCH_TIMEOUT_S = 60.0


def available() -> str | None:
    """None when Slurm's client commands are here, else what is missing."""
    if shutil.which("sbatch") is None:
        return ("`sbatch` is not on PATH (Slurm's client commands are missing): run on the "
                "cluster's login node or JupyterHub, or try scripts/local_slurm.sh up")
    return None


def check(cfg: JobConfig) -> None:
    """Raise ConfigError (one line) if `cfg` cannot be submitted to this cluster."""
    problem = available()
    if problem:
        raise ConfigError(f"--launcher slurm cannot run here: {problem}")
    if cfg.partition is None:
        return
    known = _run(["sinfo", "-h", "-a", "-o", "%R"], "list the partitions")
    partitions = sorted(set(known.split()))
    if cfg.partition not in partitions:
        raise ConfigError(f"invalid --partition {cfg.partition!r}: this cluster's partitions "
                          f"are {', '.join(partitions) or '(none)'}")


def _run(cmd: list[str], what: str, timeout: float = 15.0) -> str:
    """Run a Slurm client command; its stdout, or ConfigError naming what failed."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"Slurm could not {what}: {exc}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError(f"Slurm could not {what} ({cmd[0]}: {last}); is SLURM_CONF right and "
                          "the controller up?")
    return out.stdout


# ---------------------------------------------------------------------- the batch script
def tasks_per_node(cfg: JobConfig) -> int:
    """Ranks per node: `--ntasks-per-node`, or np spread evenly over `--nodes`."""
    if cfg.ntasks_per_node:
        return cfg.ntasks_per_node
    return math.ceil(cfg.world_size / cfg.nodes) if cfg.nodes else 0


def sbatch_options(cfg: JobConfig, run_id: str, run_dir: Path) -> list[str]:
    """The #SBATCH options: one task per rank, `threads` CPUs each, output to the run folder."""
    # --no-requeue: a job that Slurm requeued (its node failed) would run again from epoch 0
    # into the same run folder, doubling its records; it fails instead, and says so.
    opts = [f"--job-name={run_id}", f"--output={run_dir}/logs/launcher.log", "--open-mode=append",
            "--no-requeue",
            f"--ntasks={cfg.world_size}", f"--cpus-per-task={cfg.resolved_threads()}",
            f"--chdir={Path.cwd()}"]
    if cfg.nodes:
        opts.append(f"--nodes={cfg.nodes}")
    if tasks_per_node(cfg):
        opts.append(f"--ntasks-per-node={tasks_per_node(cfg)}")
    if cfg.partition:
        opts.append(f"--partition={cfg.partition}")
    if cfg.time_limit:
        opts.append(f"--time={cfg.time_limit}")  # minutes
    if cfg.account:
        opts.append(f"--account={cfg.account}")
    return opts + sbatch_args(cfg.sbatch_arg)


def rank_command(cfg: JobConfig, module: str, args: list[str], run_dir: Path) -> str:
    """The lines of the batch script that start the ranks: each engine says how."""
    python = shlex.quote(sys.executable)  # the shared .venv's: same path on every node
    task = f"bash {shlex.quote(str(run_dir / 'slurm' / 'task.sh'))}"
    rank = f"{task} {python} -u -m {module} {shlex.join(args)}".rstrip()
    srun = (f"srun --kill-on-bad-exit=1 --ntasks={cfg.world_size} "
            f"--cpus-per-task={cfg.resolved_threads()}")
    return ENGINES[cfg.engine].slurm_lines(cfg.world_size, srun, rank, python)


BATCH_TEMPLATE = """\
#!/bin/bash
{options}
#
# Run {run_id} of the workbench, submitted with `sbatch --parsable {script}`
# (submitted again by hand, it would write into the same run folder).
set -u
RUN_DIR={run_dir}
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then  # requeued all the same (by an admin, say)
    echo "slurm job $SLURM_JOB_ID was restarted (attempt $((SLURM_RESTART_COUNT + 1))): not" \
         "running again into $RUN_DIR; start a new run (workbench run --resume)" >&2
    exit 1
fi
mkdir -p "$RUN_DIR/tasks"
echo "slurm job $SLURM_JOB_ID on nodes $SLURM_JOB_NODELIST"
{command}
rc=$?
# Accounting (sacct) may be off: keep our own record of how the job ended.
echo "{{\\"rc\\": $rc, \\"time\\": $(date +%s.%N)}}" > "$RUN_DIR/slurm/batch_exit.json"
exit $rc
"""

TASK_SCRIPT = """\
#!/bin/bash
# One rank, started by srun or by horovodrun inside the Slurm job.
# srun numbers its tasks: SLURM_PROCID (0..n-1 over the job), SLURM_LOCALID (0.. on this
# node), SLURM_NTASKS (n). torch.distributed wants the same numbers as RANK, LOCAL_RANK and
# WORLD_SIZE. (horovodrun sets HOROVOD_RANK and friends itself.)
if [ -z "${HOROVOD_RANK:-}" ]; then
    export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS
fi
rank=${HOROVOD_RANK:-$RANK}
"$@"
rc=$?
# A rank killed by a signal (kill -9, out of memory) cannot say so itself: say it here,
# in the shared runs folder, where the launcher looks (it cannot see pids on other nodes).
out=$WORKBENCH_RUN_DIR/tasks/rank$rank.json
printf '{"rank": %s, "rc": %s, "host": "%s", "time": %s}\\n' \\
    "$rank" "$rc" "$(hostname)" "$(date +%s.%N)" > "$out.tmp" && mv "$out.tmp" "$out"
exit $rc
"""


def write_scripts(cfg: JobConfig, run_id: str, run_dir: Path, module: str,
                  args: list[str]) -> Path:
    """Write slurm/job.sbatch and slurm/task.sh into the run folder; return the batch script."""
    folder = run_dir / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.sh").write_text(TASK_SCRIPT)
    script = folder / "job.sbatch"
    opts = sbatch_options(cfg, run_id, run_dir)
    for text in (*opts, str(script)):  # sbatch reads #SBATCH lines up to the first newline
        if "\n" in text or "\r" in text:
            raise ConfigError(f"cannot write the batch script: {text.splitlines()[0]!r}... "
                              "holds a line break (a folder name?); a line break would become"
                              " a line of shell in job.sbatch")
    options = "\n".join(f"#SBATCH {shlex.quote(o)}" for o in opts)
    script.write_text(BATCH_TEMPLATE.format(
        options=options, run_id=run_id, script=script, run_dir=shlex.quote(str(run_dir)),
        command=rank_command(cfg, module, args, run_dir)))
    return script


def submit(cfg: JobConfig, run_id: str, run_dir: Path, module: str, args: list[str],
           env: dict[str, str]) -> SlurmBatch:
    """Write the scripts and `sbatch` them; returns as soon as Slurm has queued the job."""
    script = write_scripts(cfg, run_id, run_dir, module, args)
    # sbatch hands the job this environment (--export=ALL, its default). Variables of an
    # allocation we may be running in (a notebook started by a Slurm job) must not leak
    # into the new job; SLURM_CONF says which cluster to talk to and stays.
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    guard = start_guard(run_id, run_dir, env)  # before sbatch: never a job without a guard
    try:
        job_id = _sbatch(script, run_id, run_dir, env)
    except BaseException:
        guard.terminate()
        guard.wait()
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing was queued (or it was cancelled)
        raise
    write_json_atomic(run_dir / "slurm" / "job.json", {"slurm_job_id": job_id})
    return SlurmBatch(job_id, run_dir, guard)


def start_guard(run_id: str, run_dir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The guard that `scancel`s the job named `run_id` if this process dies (guard.py)."""
    from workbench.jobs.job import GUARD

    with open(run_dir / "logs" / "launcher.log", "ab") as log:
        return subprocess.Popen([sys.executable, str(GUARD), str(os.getpid()), "--scancel",
                                 run_id], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def _sbatch(script: Path, run_id: str, run_dir: Path, env: dict[str, str]) -> str:
    """`sbatch --parsable script`: Slurm's job id, or ConfigError in one line.

    A `sbatch` that times out may have queued the job all the same (the controller took it,
    its answer was lost): it is then found by its name, the run id, and cancelled.
    """
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
    with open(run_dir / "logs" / "launcher.log", "a") as log:
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
    user = ["--name", name, "--user", _me()]
    end = time.time() + timeout
    try:
        subprocess.run(["scancel", *user], capture_output=True, env=env, timeout=30)
        while time.time() < end:
            left = subprocess.run(["squeue", "-h", "-o", "%i", *user], capture_output=True,
                                  text=True, env=env, timeout=30)
            if left.returncode == 0 and not left.stdout.strip():
                return
            time.sleep(0.5)
    except (OSError, subprocess.TimeoutExpired):
        pass  # the controller is down: nothing more to do from here


def _me() -> str:
    """This user's name, as scancel's --user wants it."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


# ---------------------------------------------------------------------- watching
class SlurmBatch:
    """A submitted batch job, seen by the watcher in job.py as it sees a launcher process.

    Like `subprocess.Popen`, it answers `poll()` (None while the job lives, then its exit
    code) and `wait(timeout)`; it has no local `pid`. It adds Slurm's view: `state` and
    `reason` (why it is PENDING), `cancel()` and the ranks that ended without reporting.
    """

    pid = None  # the ranks run on compute nodes: no local process stands for the job

    def __init__(self, job_id: str, run_dir: Path,
                 guard: subprocess.Popen[bytes] | None = None) -> None:
        self.job_id = job_id
        self.run_dir = run_dir
        self.guard = guard  # scancels the job if its owner dies (guard.py)
        self.state, self.reason = "PENDING", "None"
        self.final: dict[str, str] = {}  # scontrol's JobState and ExitCode, once ended
        self._asked = 0.0
        self.returncode: int | None = None

    @property
    def pending_reason(self) -> str | None:
        """Why Slurm still queues the job (its reason: "Resources", "Priority", ...), or None
        once it runs. Slurm says "None" in the moment before its scheduler looks at a job."""
        if self.state != "PENDING":
            return None
        return "waiting for the scheduler" if self.reason == "None" else self.reason

    def poll(self, now: bool = False) -> int | None:
        """None while Slurm lists the job as active, else its exit code (see `ending`)."""
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
            self.state, self.reason = state
            return None
        self.final = _final_state(self.job_id)
        self.state = self.final.get("JobState", "ENDED")
        batch = read_json(self.run_dir / "slurm" / "batch_exit.json") or {}
        code = self.final.get("ExitCode", "0:0").split(":")
        self.returncode = int(batch.get("rc", code[0] if code[1] == "0" else 128 + int(code[1])))
        if self.state not in ("COMPLETED", "ENDED") and self.returncode == 0:
            self.returncode = 1  # cancelled, timed out, node failure: not a success
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until Slurm no longer lists the job; raise TimeoutExpired after `timeout` s."""
        end = None if timeout is None else time.time() + timeout
        while (rc := self.poll(now=True)) is None:
            if end is not None and time.time() > end:
                raise subprocess.TimeoutExpired(f"slurm job {self.job_id}", timeout or 0)
            time.sleep(0.2)
        return rc

    def cancel(self, timeout: float = 10.0) -> None:
        """`scancel` the job (SIGTERM to every task, SIGKILL after Slurm's KillWait) and wait
        until Slurm has ended it."""
        if self.poll(now=True) is not None:
            return
        subprocess.run(["scancel", self.job_id], capture_output=True, timeout=30)
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            pass  # the caller's sweep of local processes and summary still run

    def stop_guard(self) -> None:
        """End the guard: the job has ended, or has just been cancelled."""
        if self.guard is not None and self.guard.poll() is None:
            self.guard.terminate()
            try:
                self.guard.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.guard.kill()

    def ending(self) -> str:
        """How the job ended, in words, for a failure report."""
        return (f"Slurm job {self.job_id} ended {self.state} (exit code "
                f"{self.final.get('ExitCode', self.returncode)})")

    def vanished(self, exits: dict[int, Any]) -> list[tuple[int, int | None]]:
        """(rank, pid) of ranks that ended (tasks/rank<k>.json) without an exit record."""
        pids = rank_pids(self.run_dir)
        ended = sorted((rec.get("time", 0.0), int(f.stem[4:]))
                       for f in (self.run_dir / "tasks").glob("rank*.json")
                       if (rec := read_json(f)) is not None)
        return [(rank, pids.get(rank)) for _, rank in ended if rank not in exits]


#: What `queue_state` returns when squeue could not answer (controller busy or down).
UNKNOWN = ("UNKNOWN", "")


def queue_state(job_id: str) -> tuple[str, str] | None:
    """(state, reason) of a job that Slurm's queue lists now, None if it lists it no more.

    squeue lists a job from submission until shortly after it ends, then says "Invalid job
    id" (the job is over). Any other failure is UNKNOWN: a busy controller must not make a
    running job look finished.
    """
    if shutil.which("squeue") is None:
        return UNKNOWN
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    if out.returncode != 0:
        return None if "Invalid job id" in out.stderr else UNKNOWN
    line = out.stdout.strip()
    if not line:
        return None
    state, _, reason = line.partition("|")
    return state, reason


def _final_state(job_id: str) -> dict[str, str]:
    """JobState, Reason and ExitCode ("exit:signal") from `scontrol show job`, or {}."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    fields = dict(re.findall(r"(\w+)=(\S*)", out))
    return {k: fields[k] for k in ("JobState", "Reason", "ExitCode") if k in fields}


def run_status(run_dir: Path) -> str | None:
    """"pending (<reason>)" for a run whose Slurm job is queued now, else None.

    For `workbench runs`: the record of a queued job has no metrics yet, so only Slurm can
    tell it from a running one.
    """
    job = read_json(Path(run_dir) / "slurm" / "job.json")
    if not job:
        return None
    state = queue_state(str(job["slurm_job_id"]))
    if state is None or state[0] != "PENDING":
        return None
    return f"pending ({state[1]})"


# ---------------------------------------------------------------------- horovodrun's -H
def horovod_hosts(hostnames: list[str], tasks_per_node: str) -> str:
    """horovodrun's `-H` from the allocation: hosts, and SLURM_TASKS_PER_NODE's counts.

    Slurm writes the tasks on each node compressed: "2(x3),1" means 2, 2, 2, 1.

    >>> horovod_hosts(["a", "b", "c", "d"], "2(x3),1")
    'a:2,b:2,c:2,d:1'
    """
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(f"cannot read SLURM_TASKS_PER_NODE={tasks_per_node!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return ",".join(f"{h}:{n}" for h, n in zip(hostnames, counts, strict=True))


def print_hosts() -> None:
    """Print horovodrun's `-H` for the allocation this runs in (the batch script calls it)."""
    hostnames = subprocess.run(["scontrol", "show", "hostnames",
                                os.environ["SLURM_JOB_NODELIST"]], capture_output=True,
                               text=True, check=True).stdout.split()
    print(horovod_hosts(hostnames, os.environ["SLURM_TASKS_PER_NODE"]))
