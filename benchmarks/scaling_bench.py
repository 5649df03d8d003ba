"""Scaling lab figures, measured side by side in one run on this machine.

1. efficiency at np=2 of the compute-bound and comm-bound presets (weak scaling: each rank
   keeps the preset's batch and number of steps);
2. Horovod vs PyTorch (gloo) allreduce bus bandwidth at 16 MB, and each engine's α and β;
3. the simulator calibrated here (Horovod's α, β and the np=1 step time) against measured
   epoch times at np=2 and np=3 (3 ranks on 2 cores: oversubscribed), in several rounds
   because a machine shared with other programs changes speed from minute to minute.

Usage: python benchmarks/scaling_bench.py [--runs-dir DIR] [--repeats 3] [--json]
Takes a few minutes on 2 cores; every job it starts is reaped by the launcher.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

from workbench import JobConfig
from workbench.scaling.bench import run_allreduce_bench
from workbench.scaling.calibrate import predict_epoch_time, run_calibration
from workbench.scaling.sweep import Sweep

BENCH_SIZES = [4096, 64 << 10, 1 << 20, 4 << 20, 16 << 20]
CALIBRATION_JOB = dict(engine="horovod", model="mlp", width=512, dataset="synthetic",
                       features=256, samples=4096, batch_size=32, epochs=3)


def preset_efficiency(preset: str, runs_dir: str) -> dict:
    """np=1 and np=2 runs of a preset; efficiency of the np=2 run (weak scaling)."""
    sweep = Sweep(JobConfig(engine="horovod", preset=preset, epochs=1, runs_dir=runs_dir),
                  [1, 2], "weak")
    sweep.run()
    rows = sweep.rows()
    if len(rows) < 2:
        raise RuntimeError(f"preset {preset}: a run failed: {[p.status for p in sweep.points]}")
    return {"preset": preset, "samples_per_s": [r["samples_per_s"] for r in rows],
            "efficiency_np2": rows[1]["efficiency"], "karp_flatt_np2": rows[1]["karp_flatt"]}


def calibration_round(runs_dir: str) -> dict:
    """Measure Horovod's α, β now, then predict and measure the np=2 and np=3 epoch times."""
    hvd = run_allreduce_bench("horovod", 2, BENCH_SIZES, runs_dir=runs_dir)
    calib = run_calibration(JobConfig(runs_dir=runs_dir, **CALIBRATION_JOB),
                            hvd["alpha_s"], hvd["beta_s_per_byte"], workers=(2, 3))
    return {**calib, "alpha_s": hvd["alpha_s"], "beta_s_per_byte": hvd["beta_s_per_byte"]}


def gbps(beta_s_per_byte: float) -> str:
    """1/β in GB/s; a noisy fit can clip β to 0 (no measurable size cost)."""
    return f"{1e-9 / beta_s_per_byte:.2f}" if beta_s_per_byte > 0 else "inf"


def print_calibration(rounds: list[dict]) -> None:
    first = rounds[0]
    print(f"3. simulator vs measured epoch time ({first['gradient_bytes'] / 1e6:.2f} MB of "
          f"gradients in {first['messages']} messages, {first['cores']} cores)")
    for i, c in enumerate(rounds, start=1):
        print(f"   round {i}: α bench {1e6 * c['alpha_s']:.0f} µs, fitted on np=1,2 "
              f"{1e6 * c['alpha_fit_s']:.0f} µs, 1/β = {gbps(c['beta_s_per_byte'])} GB/s, "
              f"np=1 step {1e3 * c['step_time_1_s']:.2f} ms, contention κ "
              f"{c['contention']:.2f}")
        for r in c["rows"]:
            print(f"     np={r['np']}: predicted {r['predicted_s']:.3f} s | measured epoch "
                  f"{r['measured_s']:.3f} s, error {r['error']:+.0%} | steps x median step "
                  f"{r['steady_measured_s']:.3f} s, error {r['steady_error']:+.0%}")
    pooled = pooled_prediction(rounds)
    print("   pooled (median α, β and np=1 step over rounds, against median measurements):")
    for r in pooled:
        print(f"     np={r['np']}: predicted {r['predicted_s']:.3f} s | measured epoch "
              f"{r['measured_s']:.3f} s, error {r['error']:+.0%} | steps x median step "
              f"{r['steady_measured_s']:.3f} s, error {r['steady_error']:+.0%}")


def pooled_prediction(rounds: list[dict]) -> list[dict]:
    """Predict once from the median of each measured input over all rounds, and compare with
    the median of each measured epoch time: minute-to-minute load then cancels out instead of
    landing on one side of the comparison."""
    med = statistics.median
    first = rounds[0]
    alpha = med(c["alpha_fit_s"] for c in rounds)
    beta = med(c["beta_s_per_byte"] for c in rounds)
    step_1, kappa = med(c["step_time_1_s"] for c in rounds), med(c["contention"] for c in rounds)
    sizes = first["message_sizes"]
    out = []
    for row in first["rows"]:
        p = row["np"]
        pred = predict_epoch_time(p, CALIBRATION_JOB["samples"], CALIBRATION_JOB["batch_size"],
                                  step_1, sizes, alpha, beta, first["cores"],
                                  kappa)["epoch_time_s"]
        real = med(r["measured_s"] for c in rounds for r in c["rows"] if r["np"] == p)
        steady = med(r["steady_measured_s"] for c in rounds for r in c["rows"] if r["np"] == p)
        out.append({"np": p, "predicted_s": pred, "measured_s": real, "error": pred / real - 1,
                    "steady_measured_s": steady, "steady_error": pred / steady - 1})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--repeats", type=int, default=3,
                        help="calibrate-and-check rounds (a shared machine is noisy)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*exceed this machine")  # np=3 on 2 cores
    t0 = time.time()

    presets = [preset_efficiency(p, args.runs_dir) for p in ("compute-bound", "comm-bound")]
    bench = {e: run_allreduce_bench(e, 2, BENCH_SIZES, runs_dir=args.runs_dir)
             for e in ("horovod", "torch")}
    rounds = [calibration_round(args.runs_dir) for _ in range(args.repeats)]
    doc = {"presets": presets, "bench": bench, "calibration": rounds,
           "pooled": pooled_prediction(rounds),
           "wall_s": time.time() - t0}
    if args.json:
        print(json.dumps(doc, indent=2))
        return

    print("1. efficiency at np=2 (weak scaling, Horovod, 1 thread per rank)")
    for p in presets:
        rate1, rate2 = p["samples_per_s"]
        print(f"   {p['preset']:<14} {rate1:>8,.0f} -> {rate2:>8,.0f} samples/s   "
              f"efficiency {p['efficiency_np2']:.2f}   Karp-Flatt {p['karp_flatt_np2']:.3f}")
    print("2. allreduce, 2 ranks")
    for engine, b in bench.items():
        at16 = next(r for r in b["rows"] if r["size_bytes"] == 16 << 20)
        print(f"   {engine:<8} 16MB: {1e3 * at16['time_s']:7.2f} ms  busbw "
              f"{at16['busbw_GBps']:.3f} GB/s   α = {1e6 * b['alpha_s']:.0f} µs, "
              f"1/β = {gbps(b['beta_s_per_byte'])} GB/s")
    print_calibration(rounds)
    print(f"({doc['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
