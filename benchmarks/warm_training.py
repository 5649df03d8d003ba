"""A training job on fresh ranks and on warm ones, side by side in one run.

    .venv/bin/python benchmarks/warm_training.py [--rounds 3] [--engines torch zero1 horovod]

For each engine, the same small job (2 ranks, the digits MLP, 8 steps) is started with
`workbench.start(cfg)` and waited for:

- cold: no pool, so the launcher (torchrun or horovodrun) starts two fresh interpreters,
  each importing torch and joining the process group (median of --rounds);
- warm: with `workbench.ranks(np=2, engine=...)` waiting, `start()` runs the same job as a
  call on the pool's ranks (launch/pool.py): median of --rounds, after one first job that
  imports the engine's rank module and loads the data (shown on its own).

It prints seconds from `start()` to the job's end, and the ratio cold / warm. Both columns
also check that the job trained the same parameters. The jobs queue for cores in a core
queue of their own (a private WORKBENCH_SHARED_DIR), so other jobs on this host do not add
their queueing time; on a shared machine compare the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

import workbench

JOB = dict(np=2, model="mlp", width=64, dataset="digits", epochs=1, max_steps=8,
           threads_per_rank=1)
LAUNCHER = {"horovod": "horovod"}   # every other training engine runs under torchrun


def timed(cfg: workbench.JobConfig) -> tuple[float, workbench.Job]:
    t0 = time.perf_counter()
    job = workbench.start(cfg)
    if job.wait(600) != "succeeded":
        raise RuntimeError(f"{job.run_id}: {(job.summary or {}).get('failure')}")
    return time.perf_counter() - t0, job


def same_parameters(a: workbench.Job, b: workbench.Job) -> bool:
    x, y = a.record().model_state(), b.record().model_state()
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def compare(engine: str, rounds: int, runs: str) -> dict:
    cfg = workbench.JobConfig(engine=engine, runs_dir=runs, **JOB)
    cold = [timed(cfg) for _ in range(rounds)]
    with workbench.ranks(np=2, engine=LAUNCHER.get(engine, "torch"), runs_dir=runs) as pool:
        pool.wait_ready(600)
        first, _ = timed(cfg)
        warm = [timed(cfg) for _ in range(rounds)]
    assert all(job.summary.get("pool") for _, job in warm), "the warm jobs ran on the pool"
    return {"engine": engine, "cold_s": statistics.median(t for t, _ in cold),
            "first_warm_s": first, "warm_s": statistics.median(t for t, _ in warm),
            "same": same_parameters(cold[0][1], warm[0][1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", nargs="+", default=["torch", "zero1", "horovod"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WORKBENCH_SHARED_DIR"] = os.path.join(tmp, "shared")
        rows = [compare(engine, args.rounds, os.path.join(tmp, "runs"))
                for engine in args.engines]
    print(f"{'engine':10s} {'cold (s)':>9s} {'first warm (s)':>15s} {'warm (s)':>9s} "
          f"{'cold/warm':>10s}  same parameters")
    for r in rows:
        print(f"{r['engine']:10s} {r['cold_s']:9.2f} {r['first_warm_s']:15.2f} "
              f"{r['warm_s']:9.2f} {r['cold_s'] / r['warm_s']:10.1f}  {r['same']}")


if __name__ == "__main__":
    main()
