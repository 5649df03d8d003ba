"""Overhead of `workbench.launch(fn)` over `workbench.start(cfg)` for the same training.

Both jobs train the same model on the same data with the same batch, shards and Horovod
steps at np=2, through the same launcher. The `start()` job runs the workbench's rank module;
the `launch()` job runs `horovod_training` below, a function written as a student would
write it (hvd.init, broadcast, DistributedOptimizer, shards, workbench.report), sent to the
ranks with cloudpickle. Prints two ratios, launch over start (goal <= 1.1 for each):

  time to first metric   seconds from the call to the first step line of any rank
  samples/s              steady-state throughput of the job (all ranks), inverted so that
                         a slower launch() job gives a ratio above 1

Runs alternate and repeat (--repeats) and medians are compared: the machine is shared.
Usage: .venv/bin/python benchmarks/launch_overhead.py [--repeats 3] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import workbench
from workbench.records import of_kind

PRESET = "compute-bound"


def horovod_training(steps: int) -> None:
    """The training of the workbench's Horovod rank, as a user function."""
    import horovod.torch as hvd
    import torch

    from workbench.config import JobConfig
    from workbench.models import make_optimizer
    from workbench.training.setup import build, pick_device
    from workbench.training.sharding import epoch_order, shard

    hvd.init()
    cfg = JobConfig.from_preset(PRESET)
    setup = build(cfg, pick_device(hvd.local_rank()))
    model, data = setup.model, setup.data
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr, cfg.momentum,
                               cfg.weight_decay)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    order = epoch_order(len(data), cfg.seed, 0)
    for step in range(steps):
        idx = shard(order, step, hvd.rank(), hvd.size(), cfg.batch_size)
        optimizer.zero_grad()
        out = model(data.x[idx])
        loss = torch.nn.functional.cross_entropy(out, data.y[idx])
        loss.backward()
        optimizer.step()
        workbench.report(step=step, loss=loss.item(), samples=len(idx),
                         accuracy=float((out.argmax(1) == data.y[idx]).float().mean()))


def measure(job: workbench.Job, t0: float) -> tuple[float, float]:
    """(seconds from the call to the first step line, samples/s) of a finished job.

    Samples/s is computed the same way for both jobs, from the times of the step lines: the
    samples of every step after the first, over the time from the first step line to the
    last (the first step of a rank only marks the start: its duration is not comparable).
    """
    assert job.wait(600) == "succeeded", job.summary
    steps = of_kind(job.metrics(), "step")
    first_step = min(s["step"] for s in steps)
    later = [s for s in steps if s["step"] > first_step]
    span = max(s["time"] for s in steps) - min(s["time"] for s in steps if s["step"] == first_step)
    return (min(s["time"] for s in steps) + (job.started_at - t0),
            sum(s["samples"] for s in later) / span)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    m: dict[str, list[float]] = {k: [] for k in ("start_first", "start_rate",
                                                 "launch_first", "launch_rate")}
    with tempfile.TemporaryDirectory() as runs:
        for i in range(args.repeats):
            t0 = time.time()
            job = workbench.start(workbench.JobConfig.from_preset(
                PRESET, engine="horovod", np=2, epochs=1, max_steps=args.steps,
                threads_per_rank=1, runs_dir=runs))
            first, rate = measure(job, t0)
            m["start_first"].append(first)
            m["start_rate"].append(rate)
            t0 = time.time()
            job = workbench.launch(horovod_training, args.steps, np=2, engine="horovod",
                                   threads_per_rank=1, runs_dir=runs,
                                   cycle_time_ms=workbench.config.PRESETS[PRESET][
                                       "cycle_time_ms"])
            first, rate = measure(job, t0)
            m["launch_first"].append(first)
            m["launch_rate"].append(rate)
            print(f"round {i + 1}: " + ", ".join(f"{k}={v[-1]:.2f}" for k, v in m.items()),
                  flush=True)
    med = {k: statistics.median(v) for k, v in m.items()}
    print(f"\ntime to first metric, launch/start   {med['launch_first'] / med['start_first']:.3f}"
          f"  ({med['launch_first']:.2f} s vs {med['start_first']:.2f} s)   goal <= 1.1")
    print(f"samples/s, start/launch              {med['start_rate'] / med['launch_rate']:.3f}"
          f"  ({med['launch_rate']:,.0f} vs {med['start_rate']:,.0f})   goal <= 1.1")


if __name__ == "__main__":
    main()
