"""Naive → bucketed → overlapped → DDP: step time and sync time side by side, at np=2.

    .venv/bin/python benchmarks/bucket_bench.py [--steps 12] [--bucket-mb 4] [--repeats 1]

One job per engine on the same model and data, one after another (they would share cores
otherwise): an MLP of 2048 features → 2048 → 2048 → 10, 8.4M parameters (33.6 MB of
float32 gradients), batch 64 per rank. Two large layers matter here: the first layer's
weight gradient is computed *after* the second's is ready, so the overlapped engine can hide
the second layer's all-reduce behind it. `--bucket-mb` sets the bucketed and overlapped
engines' buckets (4 MiB: one bucket per large layer); DDP keeps its 25 MiB default.

Prints, per engine, the mean step time, time computing and time blocked on gradients (ms,
from the workbench's step records, the first steps left out), the MB all-reduced per step,
and the share of the bucketed engine's communication that overlap hid:
1 − sync(overlapped) / sync(bucketed). The machine is shared: compare the rows of one run
(the compute column, the same work on every engine, shows how noisy it was).

This model has only six tensors, all but two large, so buckets save few messages over the
naive engine's one ring per tensor, and their packing copies (33.6 MB in, 33.6 MB out per
step) can cost more than they save: buckets pay off with many small tensors (a ResNet has
over 300). What this model shows is overlap.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import workbench
from workbench.lessons.runs import step_split
from workbench.records import of_kind

MODEL = dict(model="mlp", width=2048, dataset="synthetic", features=2048, samples=4096,
             batch_size=64, epochs=1, threads_per_rank=1, np=2, lr=0.01)
ENGINES = ("naive", "bucketed", "overlapped", "torch")


def run_engine(engine: str, steps: int, bucket_mb: float, runs: str) -> dict:
    job = workbench.start(workbench.JobConfig(engine=engine, max_steps=steps,
                                              bucket_mb=bucket_mb, runs_dir=runs, **MODEL))
    assert job.wait(900) == "succeeded", job.summary
    row = step_split(job)
    synced = [s["synced_bytes"] for s in of_kind(job.metrics(), "step") if "synced_bytes" in s]
    row["synced_mb"] = statistics.mean(synced) / 1e6 if synced else float("nan")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--bucket-mb", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {e: [] for e in ENGINES}
    with tempfile.TemporaryDirectory(prefix="bucket-bench-") as runs:
        for _ in range(args.repeats):
            for engine in ENGINES:
                rows[engine].append(run_engine(engine, args.steps, args.bucket_mb, runs))
    med = {e: {k: statistics.median(r[k] for r in rs) for k in
               ("step_ms", "compute_ms", "sync_ms", "synced_mb")} for e, rs in rows.items()}
    params = MODEL["features"] * MODEL["width"] + MODEL["width"] ** 2 + MODEL["width"] * 10
    print(f"MLP {params / 1e6:.1f}M parameters, np=2, batch 64/rank, {args.steps} steps, "
          f"buckets {args.bucket_mb:g} MiB (DDP: 25 MiB), medians of {args.repeats} run(s)")
    print(f"{'engine':<12}{'step ms':>10}{'compute ms':>12}{'sync ms':>10}{'MB/step':>10}")
    for engine in ENGINES:
        m = med[engine]
        name = "DDP" if engine == "torch" else engine
        print(f"{name:<12}{m['step_ms']:>10.1f}{m['compute_ms']:>12.1f}{m['sync_ms']:>10.1f}"
              f"{m['synced_mb']:>10.1f}")
    hidden = 1 - med["overlapped"]["sync_ms"] / med["bucketed"]["sync_ms"]
    print(f"overlap hid {hidden:.0%} of the bucketed engine's communication "
          f"(1 - sync overlapped / sync bucketed)")
    naive = med["naive"]["step_ms"]
    print("speed-up of the step over naive: " + ", ".join(
        f"{'DDP' if e == 'torch' else e} {naive / med[e]['step_ms']:.2f}x" for e in ENGINES[1:]))


if __name__ == "__main__":
    main()
