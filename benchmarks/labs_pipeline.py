"""Measure the pipeline lab's bubble against (P−1)/(M+P−1) for several micro-batch counts.

Run: ``python benchmarks/labs_pipeline.py [--stages 2] [--microbatches 1,2,4,8]
[--compute-ms 20] [--out FILE.json]``. Prints a Markdown table per schedule. With
``--compute-ms 0`` the stages time their bare computation instead of a fixed budget per
pass (see the docstring of :mod:`workbench.model_parallel.pipeline`).
"""

from __future__ import annotations

import argparse
import json

from workbench.model_parallel.pipeline import PipelineConfig, run_pipelines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--microbatches", default="1,2,4,8")
    parser.add_argument("--compute-ms", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--out", help="write all results (without events) to this JSON file")
    args = parser.parse_args()
    ms = [int(m) for m in args.microbatches.split(",")]
    cfgs = [PipelineConfig(stages=args.stages, microbatches=m, schedule=s, steps=args.steps,
                           layers=max(args.layers, args.stages), width=args.width,
                           compute_ms=args.compute_ms)
            for s in ("gpipe", "1f1b") for m in ms]
    results = run_pipelines(cfgs, timeout=600)
    print("| schedule | P | M | measured bubble | (P−1)/(M+P−1) | time (s) | peak in flight |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in results:
        peaks = ", ".join(str(s["peak_in_flight"]) for s in r["per_stage"])
        print(f"| {r['schedule']} | {r['stages']} | {r['microbatches']} | "
              f"{r['measured_bubble']:.3f} | {r['theoretical_bubble']:.3f} | "
              f"{r['time_s']:.2f} | {peaks} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump([{k: v for k, v in r.items() if k != "events"} for r in results], f,
                      indent=2)


if __name__ == "__main__":
    main()
