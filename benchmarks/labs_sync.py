"""Measure the synchronization labs: sync vs async SGD with and without a straggler.

Run: ``python benchmarks/labs_sync.py [--delay 0.02] [--epochs 3] [--out FILE.json]``.
Prints a Markdown table (time, final loss, staleness per setting) and writes the full
results as JSON when ``--out`` is given. Every figure is measured on this machine with real
processes (one server, two workers, gloo over local TCP).
"""

from __future__ import annotations

import argparse
import json

from workbench.synchronization.async_ps import run_parameter_server

SETTINGS = [
    ("sync", {}),
    ("async", {}),
    ("sync + straggler", {"mode": "sync", "straggler": True}),
    ("async + straggler", {"mode": "async", "straggler": True}),
    ("async + straggler, staleness-aware", {"mode": "async", "straggler": True,
                                            "staleness_aware": True}),
    ("backup (first 2 of 3) + straggler", {"mode": "backup", "straggler": True,
                                           "backup_workers": 1}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.02, help="straggler seconds per step")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", help="write all results to this JSON file")
    args = parser.parse_args()
    rows = []
    print("| setting | time (s) | final loss | accuracy | mean staleness | max staleness |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, spec in SETTINGS:
        mode = spec.get("mode", label)
        r = run_parameter_server(mode, workers=args.workers, epochs=args.epochs,
                                 straggler_delay=args.delay if spec.get("straggler") else 0.0,
                                 staleness_aware=spec.get("staleness_aware", False),
                                 backup_workers=spec.get("backup_workers", 0))
        rows.append({"setting": label, **r})
        print(f"| {label} | {r['time_s']:.2f} | {r['final_loss']:.4f} | "
              f"{r['final_accuracy']:.3f} | {r['mean_staleness']:.2f} | {r['max_staleness']} |",
              flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
