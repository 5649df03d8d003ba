"""What going through Slurm costs: time from `start()` to the first metric, Slurm vs local.

The same job (torch engine, 2 ranks, MLP on the digits, 1 epoch, 1 thread per rank) is
started alternately with the local launcher (torchrun) and through the local one-node
Slurm cluster (sbatch, then srun starts one task per rank), and two moments are timed
from the call to `workbench.start()`:

  first metric   the first line any rank writes to metrics.jsonl (its "start" event:
                 Python is up and the rank runs): the cost of launching;
  first step     the first training step of any rank: launching plus joining the process
                 group, loading data and building the model.

Slurm adds the scheduler's turn-around (the controller starts a job on its next
scheduling pass, about a second here) and the step launch through slurmd. Runs are
interleaved and repeated (--repeats) and medians compared, because the machine is shared
and noisy. Needs root and the slurm-wlm and munge packages; starts the local cluster with
scripts/local_slurm.sh if it is not up, and stops it again after.

Usage: .venv/bin/python benchmarks/slurm_bench.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import workbench
from workbench.records import of_kind

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "local_slurm.sh"
JOB = dict(engine="torch", np=2, model="mlp", dataset="digits", epochs=1,
           threads_per_rank=1)


def latencies(launcher: str, runs: str) -> tuple[float, float]:
    """Seconds from `workbench.start()` to the first metric line and to the first step."""
    t0 = time.time()
    job = workbench.start(workbench.JobConfig(**JOB, launcher=launcher, runs_dir=runs))
    assert job.wait(600) == "succeeded", job.summary
    offset = job.started_at - t0  # metric times count from the launch
    records = job.metrics()
    first = min(r["time"] for r in records) + offset
    step = min(r["time"] - r["step_time_s"] for r in of_kind(records, "step")) + offset
    return first, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("slurm_bench: needs root to start the local Slurm cluster")
    was_up = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0
    if not was_up:
        subprocess.run(["bash", str(SCRIPT), "up"], check=True, capture_output=True)
    env = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True).stdout
    os.environ["SLURM_CONF"] = env.split("=", 1)[1].strip()
    times: dict[str, list[tuple[float, float]]] = {"local": [], "slurm": []}
    try:
        with tempfile.TemporaryDirectory() as runs:
            for i in range(args.repeats):
                for launcher in ("local", "slurm"):
                    times[launcher].append(latencies(launcher, runs))
                    first, step = times[launcher][-1]
                    print(f"  run {i + 1}/{args.repeats} {launcher:<5}  first metric "
                          f"{first:6.2f} s   first step {step:6.2f} s", flush=True)
    finally:
        if not was_up:
            subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True)
    med = {k: [statistics.median(t[i] for t in v) for i in (0, 1)] for k, v in times.items()}
    print(f"\nmedians over {args.repeats} runs each ({os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}):")
    for i, what in enumerate(("first metric", "first step")):
        print(f"  {what:<13} local {med['local'][i]:6.2f} s   slurm {med['slurm'][i]:6.2f} s"
              f"   slurm - local {med['slurm'][i] - med['local'][i]:+6.2f} s   "
              f"slurm / local {med['slurm'][i] / med['local'][i]:.2f}")


if __name__ == "__main__":
    main()
