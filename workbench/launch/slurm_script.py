"""The batch script of a Slurm job: `slurm/job.sbatch` and `slurm/task.sh` in the run folder,
each engine's `slurm_lines` (engines.py) starting its ranks. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES
from workbench.hosts.lists import sbatch_args
from workbench.records.store import atomic_file, make_folder


def sbatch_options(cfg: JobConfig, run_id: str, run_dir: Path) -> list[str]:
    # --no-requeue: requeued (its node failed), a job would run into the same run folder again
    opts = [f"--job-name={run_id}", f"--output={run_dir}/logs/launcher.log", "--open-mode=append",
            "--no-requeue", f"--ntasks={cfg.world_size}", f"--chdir={Path.cwd()}",
            f"--cpus-per-task={cfg.resolved_threads()}"]
    # ranks per node: np spread evenly over --nodes unless given; --time: in minutes
    per_node = cfg.ntasks_per_node or (math.ceil(cfg.world_size / cfg.nodes) if cfg.nodes else 0)
    for option, value in (("nodes", cfg.nodes), ("ntasks-per-node", per_node),
                          ("partition", cfg.partition), ("time", cfg.time_limit),
                          ("account", cfg.account)):
        if value:
            opts.append(f"--{option}={value}")
    return opts + sbatch_args(cfg.sbatch_arg)


BATCH_TEMPLATE = """\
#!/bin/bash
{options}
# Run {run_id} of the workbench, submitted with `sbatch --parsable {script}`
# (submitted again by hand, it would write into the same run folder).
set -u
umask 022  # what this script and the ranks make: never another user's to change
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
# Our own record of the exit code (accounting may be off), renamed into place: never half written.
echo "{{\\"rc\\": $rc, \\"time\\": $(date +%s.%N)}}" > "$RUN_DIR/slurm/batch_exit.json.tmp" \\
    && mv "$RUN_DIR/slurm/batch_exit.json.tmp" "$RUN_DIR/slurm/batch_exit.json"
exit $rc
"""

TASK_SCRIPT = """\
#!/bin/bash
# One rank, started by srun or by horovodrun (which sets HOROVOD_RANK) inside the Slurm job.
# torch.distributed wants srun's task numbers as RANK, LOCAL_RANK and WORLD_SIZE.
if [ -z "${HOROVOD_RANK:-}" ]; then
    export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS
fi
rank=${HOROVOD_RANK:-$RANK}
trap : TERM  # wait for the rank, which Slurm signals too: orphaned, it would outlive the job
"$@"
rc=$?
# A rank killed by a signal (kill -9, out of memory) cannot say so itself: say it here.
out=$WORKBENCH_RUN_DIR/tasks/rank$rank.json
printf '{"rank": %s, "rc": %s, "host": "%s", "time": %s}\\n' \\
    "$rank" "$rc" "$(hostname)" "$(date +%s.%N)" > "$out.tmp" && mv "$out.tmp" "$out"
exit $rc
"""


def write_scripts(cfg: JobConfig, run_id: str, run_dir: Path, module: str,
                  args: list[str]) -> Path:
    """Write slurm/job.sbatch and slurm/task.sh into the run folder; return the batch script."""
    folder = make_folder(run_dir / "slurm")
    with atomic_file(folder / "task.sh") as f:
        f.write(TASK_SCRIPT.encode())
    script = folder / "job.sbatch"
    opts = sbatch_options(cfg, run_id, run_dir)
    for text in (*opts, str(script)):  # sbatch reads #SBATCH lines up to the first newline
        if "\n" in text or "\r" in text:
            raise ConfigError(f"cannot write the batch script: {text.splitlines()[0]!r}... "
                              "holds a line break (a folder name?); a line break would become"
                              " a line of shell in job.sbatch")
    options = "\n".join(f"#SBATCH {shlex.quote(o)}" for o in opts)
    python = shlex.quote(sys.executable)  # the shared .venv's: same path on every node
    task = f"bash {shlex.quote(str(folder / 'task.sh'))}"
    rank = f"{task} {python} -u -m {module} {shlex.join(args)}".rstrip()
    srun = (f"srun --kill-on-bad-exit=1 --ntasks={cfg.world_size} "
            f"--cpus-per-task={cfg.resolved_threads()}")
    command = ENGINES[cfg.engine].slurm_lines(cfg.world_size, srun, rank, python)
    with atomic_file(script) as f:
        f.write(BATCH_TEMPLATE.format(options=options, run_id=run_id, script=script,
                                      run_dir=shlex.quote(str(run_dir)), command=command).encode())
    return script


def horovod_hosts(hostnames: list[str], tasks_per_node: str) -> str:
    """horovodrun's `-H` from the allocation's hosts and SLURM_TASKS_PER_NODE's compressed
    counts: (["a", "b", "c", "d"], "2(x3),1") -> 'a:2,b:2,c:2,d:1'."""
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
