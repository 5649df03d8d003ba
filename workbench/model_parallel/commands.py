"""`workbench pipeline` and `workbench compare`.

* ``pipeline``  trains an MLP split over P processes (GPipe or 1F1B schedule), measures each
  stage's busy and idle time, and compares the bubble with (P−1)/(M+P−1); ``--html`` saves
  the Gantt chart of the schedule;
* ``compare``   trains the same MLP data-parallel and pipeline-parallel and reports memory
  per worker, bytes sent per step and seconds per step for both.

Bad input exits with code 2 and a one-line message; ``--json`` prints one JSON document.
"""

from __future__ import annotations

import argparse

from workbench.cli import (
    emit_json,
    guard,
    non_negative_float,
    positive_float,
    positive_int,
)
from workbench.flags import add_output_flags


def format_bytes(n: float) -> str:
    """Bytes with a binary prefix and three significant digits: 8.30 MiB, 392 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} GiB"


def cmd_pipeline(args: argparse.Namespace) -> int:
    from workbench.model_parallel.pipeline import run_pipeline
    from workbench.ui.parallelism_charts import pipeline_figure

    r = run_pipeline(args.stages, args.microbatches, args.schedule, steps=args.steps,
                     batch_size=args.batch_size, width=args.width, layers=args.layers,
                     lr=args.lr, compute_ms=args.compute_ms, seed=args.seed,
                     runs_dir=args.runs_dir)
    if args.html:
        from workbench.ui import charts

        charts.page(pipeline_figure(r), "pipeline schedule", args.html)
        r["html"] = args.html
    if args.json:
        emit_json(r)
        return 0
    print(f"{r['schedule']} pipeline, P={r['stages']} stages, M={r['microbatches']} "
          f"micro-batches, {len(r['losses'])} steps in {r['time_s']:.2f} s")
    print(f"  bubble: measured {r['measured_bubble']:.3f}, theory (P−1)/(M+P−1) = "
          f"{r['theoretical_bubble']:.3f}")
    for s in r["per_stage"]:
        print(f"  stage {s['stage']}: busy {s['busy_s']:.3f} s, idle {s['idle_s']:.3f} s, "
              f"at most {s['peak_in_flight']} micro-batch(es) of activations held "
              f"({format_bytes(s['memory']['activations_bytes'])})")
    print(f"  loss per step: {', '.join(f'{v:.4f}' for v in r['losses'])}")
    if args.html:
        print(f"  Gantt chart: {args.html}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from workbench.model_parallel.compare import compare

    r = compare(args.workers, width=args.width, layers=args.layers, batch_size=args.batch_size,
                microbatches=args.microbatches, steps=args.steps, optimizer=args.optimizer,
                lr=args.lr, seed=args.seed, runs_dir=args.runs_dir)
    if args.json:
        emit_json(r)
        return 0
    size = format_bytes(r["model"]["params_bytes"])
    print(f"MLP with {r['model']['params']:,} parameters ({size}), batch {args.batch_size}, "
          f"{args.workers} workers, {args.optimizer}")
    parts = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
             "total_bytes")
    print(f"  {'':16}" + "".join(f"{p.removesuffix('_bytes'):>12}" for p in parts)
          + f"{'sent/step':>12}{'s/step':>9}")
    for label in ("data_parallel", "model_parallel"):
        s = r[label]
        mem = "".join(f"{format_bytes(s['memory_per_worker'][p]):>12}" for p in parts)
        print(f"  {label.replace('_', ' '):16}{mem}{format_bytes(s['comm_bytes_per_step']):>12}"
              f"{s['step_time_s']:>9.4f}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the model-parallelism labs' sub-commands."""
    p = sub.add_parser("pipeline", help="pipeline model parallelism: schedule and bubble")
    p.add_argument("--stages", type=positive_int, default=2, help="processes P")
    p.add_argument("--microbatches", type=positive_int, default=4, help="micro-batches M")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe")
    p.add_argument("--steps", type=positive_int, default=3)
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--width", type=positive_int, default=128)
    p.add_argument("--layers", type=positive_int, default=4)
    p.add_argument("--lr", type=positive_float, default=0.1)
    p.add_argument("--compute-ms", type=non_negative_float, default=20.0,
                   help="pad each forward to this many ms (backward: twice); 0 = bare compute")
    add_output_flags(p, seed=True)
    p.add_argument("--html", metavar="FILE", help="save the Gantt chart as an HTML file")
    p.set_defaults(func=guard(cmd_pipeline))

    p = sub.add_parser("compare", help="data vs model parallelism: memory, traffic, time")
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--width", type=positive_int, default=512)
    p.add_argument("--layers", type=positive_int, default=4)
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--microbatches", type=positive_int, default=4)
    p.add_argument("--steps", type=positive_int, default=4)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="adam")
    p.add_argument("--lr", type=positive_float, default=0.01)
    add_output_flags(p, seed=True)
    p.set_defaults(func=guard(cmd_compare))
