"""Sharded data parallelism benchmark: per-rank memory and step time of DDP, ZeRO-1, ZeRO-2
and FSDP (ZeRO-3), side by side, at np=2 and 4, on one model of more than 10M parameters.

For each run it prints what rank 0 holds in parameters, gradients and optimizer state
(counted from its tensors) and sends per step (counted at its collectives), in MB, with
the cost model's prediction (workbench/sharded/costmodel.py) beside each total, and the
median step time over the steps after the first two, also as a ratio to DDP's at the same
np. The runs go one after another (they would share cores), so on a shared machine read
the step times as rough ratios, and the bytes as exact.

Usage: .venv/bin/python benchmarks/sharded_bench.py [--steps 8] [--nps 2 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import workbench
from workbench.records import of_kind
from workbench.sharded.measured import comparison, parameter_count

ENGINES = ("torch", "zero1", "zero2", "fsdp")
#: An MLP on 2048 features with 2560 hidden units: 2048·2560 + 2560² + 2560·10 weights and
#: the biases, 11.8M parameters, 47 MB in float32; Adam (K = 8 bytes per parameter).
MODEL = dict(model="mlp", width=2560, dataset="synthetic", features=2048, samples=1024,
             batch_size=16, optimizer="adam", lr=1e-3, epochs=1, threads_per_rank=1)


def run(engine: str, np: int, steps: int, runs: str) -> dict:
    job = workbench.start(workbench.JobConfig(engine=engine, np=np, max_steps=steps,
                                              runs_dir=runs, **MODEL))
    if job.wait(900) != "succeeded":
        raise SystemExit(f"{engine} np={np} did not succeed: {job.summary}")
    rows = {r["field"]: r for r in comparison(job) if r["rank"] == 0}
    times = [line["step_time_s"] for line in of_kind(job.metrics(), "step")
             if line["rank"] == 0][2:]
    return {"engine": engine, "np": np, "psi": parameter_count(job), "rows": rows,
            "step_s": statistics.median(times)}


def mb(x: float) -> str:
    return f"{x / 1e6:8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--nps", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs:
        results = [run(e, np, args.steps, runs) for np in args.nps for e in ENGINES]
    print(f"model: {results[0]['psi'] / 1e6:.1f}M parameters, Adam, float32; rank 0; MB "
          "measured (predicted)")
    print(f"{'engine':>7} {'np':>3} {'params':>8} {'grads':>8} {'optim':>8} {'total':>8} "
          f"{'(model)':>9} {'sent/step':>9} {'(model)':>9} {'step ms':>8} {'vs DDP':>7}")
    ddp = {r["np"]: r["step_s"] for r in results if r["engine"] == "torch"}
    for r in results:
        f = r["rows"]
        held = sum(f[k]["measured"] for k in ("param_bytes", "grad_bytes", "optimizer_bytes"))
        model = sum(f[k]["predicted"] for k in ("param_bytes", "grad_bytes", "optimizer_bytes"))
        print(f"{r['engine']:>7} {r['np']:>3} {mb(f['param_bytes']['measured'])} "
              f"{mb(f['grad_bytes']['measured'])} {mb(f['optimizer_bytes']['measured'])} "
              f"{mb(held)} ({mb(model)}) {mb(f['sent_bytes']['measured']):>9} "
              f"({mb(f['sent_bytes']['predicted'])}) {r['step_s'] * 1e3:8.1f} "
              f"{r['step_s'] / ddp[r['np']]:7.2f}")


if __name__ == "__main__":
    main()
