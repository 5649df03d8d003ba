"""What starting a lab costs: the labs' supervisor next to bare torch.multiprocessing.

Prints, medians of interleaved rounds (the machine is shared and noisy):
  (a) seconds for the labs' supervisor (workbench.launch.workers.run_workers) to run a trivial
      function on --np processes that join a gloo group and meet at a barrier: from the call
      to its return (processes started, results back, processes reaped, record written);
  (b) the same work with bare `torch.multiprocessing.start_processes` (spawn, no record, no
      supervision), and the ratio (a)/(b);
  (c) with --labs: the wall time of each lab call notebooks 03 and 04 make, with their
      settings (what a notebook run pays).

Usage: .venv/bin/python benchmarks/labs_startup.py [--np 3] [--repeats 3] [--labs]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).parent / "baselines"))
from lab_barrier import barrier  # noqa: E402


def _bare_entry(rank: int, world: int, store_path: str) -> None:
    """One bare process: join the group through a file store, meet at a barrier, leave."""
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    barrier(rank, world)
    dist.destroy_process_group()


def bare(np_: int) -> float:
    """Seconds for bare torch.multiprocessing (spawn) to do the trivial lab's work."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        mp.start_processes(_bare_entry, args=(np_, str(Path(tmp) / "store")), nprocs=np_,
                           start_method="spawn")
        return time.perf_counter() - start


def supervised(np_: int, runs_dir: str) -> float:
    """Seconds for the labs' supervisor to run the trivial lab."""
    from workbench.launch.workers import run_workers

    start = time.perf_counter()
    assert run_workers(barrier, np_, name="startup", runs_dir=runs_dir) == list(range(np_))
    return time.perf_counter() - start


def notebook_labs(runs_dir: str) -> dict[str, float]:
    """Wall seconds of each lab call of notebooks 03 and 04 (their settings)."""
    from workbench.model_parallel.compare import compare
    from workbench.model_parallel.pipeline import PipelineConfig, run_pipelines
    from workbench.synchronization.async_ps import run_parameter_server
    from workbench.synchronization.hogwild import run_hogwild
    from workbench.synchronization.ring_lab import run_ring_lab

    common = dict(stages=2, steps=3, compute_ms=10)
    cfgs = [PipelineConfig(microbatches=m, **common) for m in (1, 2, 4, 8)]
    cfgs.append(PipelineConfig(microbatches=8, schedule="1f1b", **common))
    calls = {
        "03 parameter server, sync": lambda: run_parameter_server(
            "sync", workers=2, epochs=1, straggler_delay=0.01, lr=0.2, runs_dir=runs_dir),
        "03 parameter server, async": lambda: run_parameter_server(
            "async", workers=2, epochs=1, straggler_delay=0.01, lr=0.1, runs_dir=runs_dir),
        "03 hogwild": lambda: run_hogwild(2, epochs=1, samples=3000, runs_dir=runs_dir),
        "03 ring lab": lambda: run_ring_lab(2, sizes=(7, 1001, 65536, 1 << 18), repeats=3,
                                            runs_dir=runs_dir),
        "04 pipelines": lambda: run_pipelines(cfgs, runs_dir=runs_dir),
        "04 compare": lambda: compare(2, width=512, batch_size=64, steps=4,
                                      runs_dir=runs_dir),
    }
    out = {}
    for label, call in calls.items():
        start = time.perf_counter()
        call()
        out[label] = time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--labs", action="store_true", help="also time the notebooks' labs")
    args = parser.parse_args()
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as runs:
        for _ in range(args.repeats):
            ours.append(supervised(args.np, runs))
            theirs.append(bare(args.np))
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"(a) labs' supervisor, np={args.np}: {a:.2f} s  (rounds: "
              + ", ".join(f"{t:.2f}" for t in ours) + ")")
        print(f"(b) bare torch.multiprocessing spawn: {b:.2f} s  (rounds: "
              + ", ".join(f"{t:.2f}" for t in theirs) + ")")
        print(f"    ratio (a)/(b): {a / b:.2f}")
        if args.labs:
            for label, seconds in notebook_labs(runs).items():
                print(f"(c) {label}: {seconds:.2f} s")


if __name__ == "__main__":
    main()
