"""`workbench run`, `workbench runs` and `workbench show`: every `JobConfig` field is a flag
of `workbench run` (flags.py). See docs/ARCHITECTURE.md, "Programming interface of the job
engine".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from workbench.cli import emit_json, guard
from workbench.flags import add_job_flags, add_output_flags, config_from_args
from workbench.launch import slurm
from workbench.launch.job import FINAL_STATES, Job
from workbench.launch.starting import start
from workbench.records import MetricsReader, list_runs, load_run, of_kind
from workbench.records.resume import CHECKPOINT


def cmd_run(args: argparse.Namespace) -> int:
    job = start(config_from_args(args))
    if not args.json:  # its warnings are already shown, once each (cli.py)
        print(f"run {job.run_id}  ({job.config.engine}, {job.world_size} rank(s))  -> "
              f"{job.run_dir}")
    try:
        follow(job, quiet=args.json)
    except KeyboardInterrupt:  # Ctrl-C: end every rank before we go
        job.stop()
        print(f"\nstopped: {job.run_id}", file=sys.stderr)
        return 130
    (emit_json if args.json else print_summary)(job.summary or {})
    return 0 if job.status == "succeeded" else 1


def follow(job: Job, quiet: bool = False, period_s: float = 0.5) -> None:
    """Wait for `job`, printing one progress line per finished epoch (rank 0's view)."""
    reader = MetricsReader(job.run_dir)
    place, reason = 0, None
    while True:
        finished = job.wait(period_s) in FINAL_STATES
        if job.queue_position != place and not quiet:  # waiting for cores (launch/cores.py)
            place = job.queue_position
            if place:
                print(f"  queued: number {place} in this machine's queue, waiting for "
                      f"{job.waiting_for}", flush=True)
        if job.pending_reason != reason and not quiet:  # Slurm queues it, or starts it
            reason = job.pending_reason
            print(f"  queued by Slurm: {reason}" if reason else "  running", flush=True)
        for e in of_kind(reader.read_new(), "epoch"):
            if e.get("rank") == 0 and not quiet:
                print(f"  {_epoch_line(e, job.config.epochs, job.world_size)}", flush=True)
        if finished:
            return


def _epoch_line(e: dict[str, Any], epochs: int, world: int) -> str:
    """One progress line from an epoch record (fields other than "epoch" are optional)."""
    fields = {"loss": "loss {:.4f}", "accuracy": "accuracy {:.3f}", "val_loss": "val loss {:.4f}",
              "val_accuracy": "val accuracy {:.3f}", "samples_per_s": "{:,.0f} samples/s"}
    parts = [f"epoch {e.get('epoch', 0) + 1}/{epochs}"]
    for key, fmt in fields.items():
        if isinstance(e.get(key), (int, float)):  # samples/s: per rank in the record
            parts.append(fmt.format(e[key] * (world if key == "samples_per_s" else 1)))
    return "  ".join(parts)


def print_summary(summary: dict[str, Any]) -> None:
    status = summary.get("status", "?")
    print(f"{status}: {summary.get('run_id')}")
    rows = [("final loss", summary.get("final_loss"), "{:.4f} (held-out samples)"),
            ("final accuracy", summary.get("final_accuracy"), "{:.3f} (held-out samples)"),
            ("samples/s", summary.get("samples_per_s"), "{:,.0f}"),
            ("training time", summary.get("train_time_s"), "{:.2f} s"),
            ("start-up time", summary.get("startup_s"), "{:.2f} s"),
            ("total time", summary.get("duration_s"), "{:.2f} s")]
    for label, value, fmt in rows:
        if value is not None:
            print(f"  {label:<15} {fmt.format(value)}")
    if failure := summary.get("failure"):
        who = f"rank {failure['rank']}" if failure.get("rank") is not None else "launcher"
        print(f"  failed in {who}: {failure.get('error')}")
        tail = "\n".join((failure.get("log_tail") or "").splitlines()[-10:])
        traceback = (failure.get("traceback") or "").rstrip()
        if traceback and traceback not in tail:  # more than the log lines below show
            print("  " + traceback.replace("\n", "\n  "))
        if tail:
            print(f"  last lines of {failure.get('log', 'the log')}:\n    "
                  + tail.replace("\n", "\n    "))
        if summary.get("run_dir") and (Path(summary["run_dir"]) / CHECKPOINT).exists():
            print(f"  continue from its last checkpoint: workbench run --resume "
                  f"{summary['run_id']} --runs-dir {Path(summary['run_dir']).parent}")


def cmd_runs(args: argparse.Namespace) -> int:
    runs = list_runs(args.runs_dir)
    if args.json:
        emit_json([{"run_id": r.run_id, **_brief(r)} for r in runs])
        return 0
    if not runs:
        print(f"no runs in {args.runs_dir}")
        return 0
    print(f"{'run id':<40} {'status':<10} {'engine':<8} {'np':>3} {'loss':>8} {'samples/s':>10}")
    for r in runs:
        b = _brief(r)
        loss = f"{b['final_loss']:.4f}" if b["final_loss"] is not None else "-"
        sps = f"{b['samples_per_s']:,.0f}" if b["samples_per_s"] else "-"
        print(f"{r.run_id:<40} {b['status']:<10} {b['engine']:<8} {b['np']:>3} {loss:>8} "
              f"{sps:>10}")
    return 0


def _brief(record) -> dict[str, Any]:
    cfg, summary = record.config, record.summary or {}
    # A run without a summary may be a job that Slurm still queues: only Slurm knows.
    status = record.status if summary else (slurm.run_status(record.run_dir) or record.status)
    return {"status": status, "engine": cfg.get("engine"),
            "np": summary.get("np", cfg.get("np")),
            "final_loss": summary.get("final_loss"), "samples_per_s": summary.get("samples_per_s")}


def cmd_show(args: argparse.Namespace) -> int:
    record = load_run(args.run_id, args.runs_dir)
    summary = record.summary or {"run_id": record.run_id, "status": record.status}
    if args.json:
        emit_json(summary)
        return 0
    print_summary(summary)
    print("  config: " + ", ".join(f"{k}={v}" for k, v in record.config.items()
                                    if v not in (None, "", {}, 0.0)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run one training job", description=__doc__)
    add_job_flags(run)
    add_output_flags(run, runs_dir=False, json_help="print only the summary, as JSON")
    run.set_defaults(func=guard(cmd_run))

    runs = sub.add_parser("runs", help="list past runs")
    add_output_flags(runs)
    runs.set_defaults(func=guard(cmd_runs))

    show = sub.add_parser("show", help="show one run")
    show.add_argument("run_id", help="run id, unique part of one, or run folder")
    add_output_flags(show)
    show.set_defaults(func=guard(cmd_show))
