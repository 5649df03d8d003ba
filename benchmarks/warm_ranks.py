"""Time to per-rank results: cold `launch()`, a warm pool's call, and Accelerate, in one run.

    .venv/bin/python benchmarks/warm_ranks.py [--rounds 3] [--calls 20] [--no-accelerate]

Every column runs the same work on 2 CPU ranks: build a tensor, all-reduce it (one gloo
collective), return a number, and measures the seconds from the call to every rank's
result:

- `launch()` cold: `workbench.launch(fn, np=2, engine=...)` starts fresh interpreters
  through horovodrun or torchrun, each importing torch (median of --rounds);
- the pool's first start: `workbench.ranks(np=2, engine=...)` until every rank waits;
- a warm call: `pool.run(fn)` on that pool (median of --calls; the goal is <= 0.1 s);
- Hugging Face Accelerate's `notebook_launcher(fn, num_processes=2)`, which forks the
  calling process (median of --rounds). Accelerate is not a dependency of the workbench: it
  is installed only in this benchmark's own environment, `.cache/bench-accelerate`, a venv
  that sees the project's packages (torch) through a .pth file; without PyPI the column is
  skipped, saying so.

The machine may be shared: the columns run one after the other in this one process, and the
ratios printed are what to compare across machines. The jobs share cores through a core
queue of their own (a private WORKBENCH_SHARED_DIR), so that other jobs of this host holding
cores do not add their queueing time to the cold column.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import workbench

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".cache" / "bench-accelerate"


def all_reduce_one() -> float:
    """The work of every column: one tensor, one all-reduce, one number back."""
    import torch

    t = torch.tensor([workbench.rank() + 1.0])
    if os.environ.get("HOROVOD_RANK") is not None:
        import horovod.torch as hvd

        hvd.init()   # a pool has done it already: then this does nothing
        return hvd.allreduce(t, op=hvd.Sum).item()
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.all_reduce(t)
    return t.item()


def timed(job_of) -> float:
    t0 = time.perf_counter()
    job = job_of()
    status = job.wait(600)
    if status != "succeeded":
        raise RuntimeError(f"{job.run_id} {status}: {(job.summary or {}).get('failure')}")
    job.results()
    return time.perf_counter() - t0


def cold_launches(engine: str, rounds: int, runs: str) -> list[float]:
    return [timed(lambda: workbench.launch(all_reduce_one, np=2, engine=engine, echo=False,
                                           runs_dir=runs)) for _ in range(rounds)]


def warm_pool(engine: str, calls: int, runs: str) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    with workbench.ranks(np=2, engine=engine, runs_dir=runs) as pool:
        pool.wait_ready(600)
        ready = time.perf_counter() - t0
        return ready, [timed(lambda: pool.run(all_reduce_one)) for _ in range(calls)]


ACCELERATE_RUN = """
import json, sys, time
from accelerate import notebook_launcher

def all_reduce_one():
    import torch, torch.distributed as dist
    from accelerate import PartialState
    state = PartialState()                    # joins the gloo group of the forked ranks
    t = torch.tensor([state.process_index + 1.0])
    dist.all_reduce(t)
    return t.item()

times = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    notebook_launcher(all_reduce_one, num_processes=2)
    times.append(time.perf_counter() - t0)
print("TIMES", json.dumps(times))
"""


def accelerate_env() -> Path | str:
    """The benchmark's own venv with Accelerate (made once), or why it cannot be made."""
    python = VENV / "bin" / "python"
    if python.exists() and _run([python, "-c", "import accelerate"]).returncode == 0:
        return python
    steps = [[sys.executable, "-m", "venv", str(VENV)]]
    for cmd in steps:
        if (done := _run(cmd)).returncode:
            return f"cannot create {VENV}: {done.stderr.strip()[-300:]}"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    # The project's packages (torch, numpy, ...) are seen, not copied: pip installs only
    # what Accelerate adds to them.
    Path(site.stdout.strip(), "workbench-project.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    done = _run([python, "-m", "pip", "install", "--quiet", "accelerate"], timeout=600)
    if done.returncode:
        return f"pip could not install accelerate: {done.stderr.strip()[-300:]}"
    return python


def accelerate_launches(rounds: int) -> list[float] | str:
    python = accelerate_env()
    if isinstance(python, str):
        return python
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = _run([python, "-c", ACCELERATE_RUN, str(rounds)], timeout=600, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("TIMES ")), None)
    if done.returncode or line is None:
        return f"notebook_launcher failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return json.loads(line[6:])


def _run(cmd, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="cold starts per column")
    parser.add_argument("--calls", type=int, default=20, help="warm calls per pool")
    parser.add_argument("--no-accelerate", action="store_true")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as runs:
        os.environ["WORKBENCH_SHARED_DIR"] = str(Path(runs) / "cores")  # see the docstring
        for engine in ("torch", "horovod"):  # cold first: a live pool would take launch()
            medians[f"cold {engine}"] = statistics.median(cold_launches(engine, args.rounds,
                                                                        runs))
            rows.append((f"workbench.launch(fn, np=2, engine={engine!r})",
                         f"{medians[f'cold {engine}']:.2f} s (median of {args.rounds})"))
        for engine in ("torch", "horovod"):
            ready, calls = warm_pool(engine, args.calls, runs)
            medians[f"warm {engine}"] = statistics.median(calls)
            rows.append((f"workbench.ranks(np=2, engine={engine!r}) until ready",
                         f"{ready:.2f} s (once)"))
            rows.append((f"pool.run(fn) on the warm {engine} pool",
                         f"{medians[f'warm {engine}']:.3f} s (median of {args.calls}; "
                         f"max {max(calls):.3f} s)"))
    acc = "skipped (--no-accelerate)" if args.no_accelerate else accelerate_launches(
        args.rounds)
    if isinstance(acc, list):
        medians["accelerate"] = statistics.median(acc)
        acc = f"{medians['accelerate']:.2f} s (median of {args.rounds})"
    rows.append(("accelerate notebook_launcher(fn, num_processes=2)", acc))
    print(f"2 CPU ranks, one all-reduce; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores\n")
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print()
    for engine in ("torch", "horovod"):
        warm, cold = medians[f"warm {engine}"], medians[f"cold {engine}"]
        line = f"{engine}: a warm call is {cold / warm:.0f}x faster than a cold launch()"
        if "accelerate" in medians:
            line += f", {medians['accelerate'] / warm:.1f}x faster than notebook_launcher"
        print(line + f"; goal <= 0.1 s: {'met' if warm <= 0.1 else 'NOT met'}")


if __name__ == "__main__":
    main()
