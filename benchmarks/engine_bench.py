"""Job-engine benchmark: overhead of the workbench next to bare Horovod, measured side by side.

Prints four ratios (targets in brackets):
  (a) start-to-first-metric latency of a workbench Horovod job at np=2 (every rank's
      "init" metric, written once hvd.init() returns)
      over bare `horovodrun` running import torch + hvd.init()               [<= 1.3]
  (b) steady-state samples/s of the workbench rank loop
      over a minimal hand-written Horovod loop (same model, data, batch)     [>= 0.97]
  (c) parallel efficiency at np=2 of the compute-bound preset on 2 cores     [>= 0.85]
  (d) Horovod samples/s over DDP samples/s at np=2

Runs are interleaved and repeated (--repeats) and medians compared, because the machine
is shared and noisy. Usage: .venv/bin/python benchmarks/engine_bench.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import workbench
from workbench.config import PRESETS
from workbench.engines import horovodrun
from workbench.records import events, of_kind

HERE = Path(__file__).parent / "baselines"
PRESET = "compute-bound"


def bare_latency() -> float:
    """Seconds from launching horovodrun to the last rank returning from hvd.init()."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        subprocess.run([horovodrun(), "-np", "2", "--gloo", "-H", "localhost:2", sys.executable,
                        str(HERE / "bare_init.py"), tmp], check=True, capture_output=True)
        return max(float((Path(tmp) / f"ready{r}").read_text()) for r in (0, 1)) - t0


def workbench_latency(runs: str, milestone: str = "init") -> float:
    """Seconds from `workbench.start` to a start-up milestone reached by every rank: "init"
    (Horovod joined: the same work as the bare baseline) or "ready" (data loaded, model built
    and broadcast: training starts)."""
    t0 = time.time()
    job = workbench.start(workbench.JobConfig.from_preset(
        PRESET, engine="horovod", np=2, epochs=1, max_steps=1, threads_per_rank=1, runs_dir=runs))
    assert job.wait(300) == "succeeded", job.summary
    reached = events(job.metrics(), milestone)
    return max(e["time"] for e in reached) + (job.started_at - t0)


def workbench_rate(runs: str, engine: str, np: int, epochs: int) -> float:
    """Samples/s (all ranks) of the workbench loop over epochs >= 1 (epoch 0 warms up)."""
    job = workbench.start(workbench.JobConfig.from_preset(
        PRESET, engine=engine, np=np, epochs=epochs, threads_per_rank=1, runs_dir=runs))
    assert job.wait(600) == "succeeded", job.summary
    rank0 = [e for e in of_kind(job.metrics(), "epoch") if e["rank"] == 0 and e["epoch"] >= 1]
    return statistics.mean(e["samples_per_s"] for e in rank0) * job.world_size


def minimal_rate(epochs: int) -> float:
    """Samples/s of the hand-written loop, with the preset's Horovod cycle time too."""
    cycle = PRESETS[PRESET].get("cycle_time_ms") or 1.0
    out = subprocess.run([horovodrun(), "-np", "2", "--gloo", "-H", "localhost:2",
                          "--cycle-time-ms", str(cycle), sys.executable,
                          str(HERE / "minimal_horovod_loop.py"), PRESET, str(epochs)],
                         check=True, capture_output=True, text=True).stdout
    line = next(ln for ln in out.splitlines() if "samples_per_s" in ln)
    return json.loads(line[line.index("{"):])["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    m: dict[str, list[float]] = {k: [] for k in
                                 ("bare", "wb_latency", "wb_ready", "wb_rate", "min_rate", "serial",
                                  "ddp")}
    with tempfile.TemporaryDirectory() as runs:
        for i in range(args.repeats):
            m["bare"].append(bare_latency())
            m["wb_latency"].append(workbench_latency(runs))
            m["wb_ready"].append(workbench_latency(runs, "ready"))
            m["wb_rate"].append(workbench_rate(runs, "horovod", 2, args.epochs))
            m["min_rate"].append(minimal_rate(args.epochs))
            m["serial"].append(workbench_rate(runs, "serial", 1, args.epochs))
            m["ddp"].append(workbench_rate(runs, "torch", 2, args.epochs))
            print(f"round {i + 1}: " + ", ".join(f"{k}={v[-1]:.2f}" for k, v in m.items()),
                  flush=True)
    med = {k: statistics.median(v) for k, v in m.items()}
    print(f"\n(a) start-to-first-metric latency ratio  {med['wb_latency'] / med['bare']:.2f}"
          f"  ({med['wb_latency']:.2f} s vs bare {med['bare']:.2f} s)   target <= 1.3")
    print(f"    (until training starts: data, model, broadcast: {med['wb_ready']:.2f} s, ratio "
          f"{med['wb_ready'] / med['bare']:.2f})")
    print(f"(b) steady-state samples/s ratio         {med['wb_rate'] / med['min_rate']:.3f}"
          f"  ({med['wb_rate']:,.0f} vs minimal {med['min_rate']:,.0f})   target >= 0.97")
    print(f"(c) efficiency at np=2 ({PRESET})    {med['wb_rate'] / (2 * med['serial']):.3f}"
          f"  ({med['wb_rate']:,.0f} vs 2 x serial {med['serial']:,.0f})   target >= 0.85")
    print(f"(d) Horovod / DDP samples/s at np=2      {med['wb_rate'] / med['ddp']:.3f}"
          f"  ({med['wb_rate']:,.0f} vs {med['ddp']:,.0f})")


if __name__ == "__main__":
    main()
