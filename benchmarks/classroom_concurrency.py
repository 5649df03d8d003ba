"""How many students running notebook 02's live job at once one machine holds.

Each "student" runs the job the panel of notebook 02 starts (Horovod, 2 ranks of 1 thread,
logistic regression on digits, one epoch, batch 16). k students start their jobs at the same
moment; a job's time is from its start to its end (launch, start-up and training, as the
student waits for it). The figure is the largest k at which the slowest job takes less than
twice as long as one job alone. Jobs run unbound (WORKBENCH_WHEN_BUSY=unbound, no per-user
limit), as on a hub where every student has their own server: with the default queue they
would instead wait for each other's cores.

The machine's load average is printed before and after each round: on a machine shared with
other programs the times move from minute to minute, so rounds are repeated and every time is
printed, not only the median.

Usage: python benchmarks/classroom_concurrency.py [--max-students 6] [--repeats 2] [--json]
About 3-10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import warnings

import workbench

NOTEBOOK_02_JOB = dict(engine="horovod", np=2, model="logreg", dataset="digits", epochs=1,
                       batch_size=16, lr=0.1, threads_per_rank=1)


def one_round(students: int, runs_dir: str) -> list[float]:
    """Start `students` jobs at once; return each job's time, start to end, in seconds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "shares cores with other jobs": that is the point
        jobs = [workbench.start(workbench.JobConfig(runs_dir=runs_dir, name=f"student{i}",
                                                    **NOTEBOOK_02_JOB))
                for i in range(students)]
    for job in jobs:
        if job.wait(900) != "succeeded":
            raise RuntimeError(f"{job.run_id} {job.status}: see {job.run_dir}")
    return [job.summary["duration_s"] for job in jobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-students", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ["WORKBENCH_WHEN_BUSY"] = "unbound"
    os.environ["WORKBENCH_JOBS_PER_USER"] = "0"
    os.environ["WORKBENCH_SHARED_DIR"] = tempfile.mkdtemp(prefix="classroom-bench-")
    runs_dir = tempfile.mkdtemp(prefix="classroom-bench-runs-")
    rows = []
    alone = None
    for k in range(1, args.max_students + 1):
        times, loads = [], []
        for _ in range(args.repeats):
            before = os.getloadavg()[0]
            times.append(max(one_round(k, runs_dir)))
            loads.append((before, os.getloadavg()[0]))
        slowest = statistics.median(times)
        alone = alone or slowest
        rows.append({"students": k, "slowest_job_s": times, "median_s": slowest,
                     "ratio": slowest / alone, "load_before_after": loads})
        print(f"{k} students: slowest job {', '.join(f'{t:.1f}' for t in times)} s "
              f"(median {slowest:.1f} s, {slowest / alone:.2f} x one alone); load average "
              + ", ".join(f"{a:.1f}->{b:.1f}" for a, b in loads), flush=True)
        if slowest / alone >= 2:
            break
    held = max((r["students"] for r in rows if r["ratio"] < 2), default=0)
    print(f"this machine ({len(os.sched_getaffinity(0))} cores) holds {held} concurrent "
          "students before a job takes twice as long as alone")
    if args.json:
        print(json.dumps({"rows": rows, "students_held": held}, indent=1))


if __name__ == "__main__":
    main()
