"""`workbench scale`, `workbench bench allreduce`, `workbench simulate`, `workbench timeline`.

* ``scale``     runs the same job at several worker counts and reports speedup, efficiency
  and the Karp–Flatt serial fraction (optionally an offline HTML report with charts);
* ``bench allreduce`` times real allreduces and fits the α–β model;
* ``simulate``  predicts step time and efficiency for many workers from the α–β model;
* ``timeline``  shows where a run's time went: Horovod's timeline per rank, and the
  compute / synchronize split of every step.

Bad input exits with code 2 and a one-line message; ``--json`` prints one JSON document.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.cli import emit_json, guard, positive_int
from workbench.config import DEVICES, ConfigError
from workbench.flags import add_output_flags
from workbench.hosts.cpu import cpu_budget
from workbench.scaling import simulate as sim
from workbench.scaling import units
from workbench.scaling.costmodel import ALGORITHM_NAMES, ServerLayout, algorithm_named


# ---------------------------------------------------------------------- scale
def cmd_scale(args: argparse.Namespace) -> int:
    from workbench.launch.commands import config_from_args
    from workbench.scaling.sweep import Sweep, Target

    try:
        workers = units.parse_workers(args.np)
    except ValueError as exc:
        raise ConfigError(f"--np: {exc}") from None
    base = config_from_args(args, np=workers[0])
    target = None
    if args.target_loss is not None or args.target_accuracy is not None:
        target = Target(loss=args.target_loss, accuracy=args.target_accuracy)
    sweep = Sweep(base, workers, args.mode, timeout_s=args.run_timeout, target=target,
                  scale_lr=args.scale_lr)
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    say(f"{args.mode} scaling sweep, {base.engine}, np = {', '.join(map(str, workers))} "
        f"({sweep.configs[0].threads_per_rank} thread(s) per rank)")
    try:
        for point in sweep:
            reached = (f", target after {_fmt(point.time_to_target_s, '{:.2f} s')}"
                       if target else "")
            say(f"  np={point.np}: {point.status}, {_fmt(point.time_s, '{:.2f} s')}, "
                f"{_fmt(point.samples_per_s, '{:,.0f} samples/s')}{reached}  ({point.run_id})")
    except KeyboardInterrupt:
        sweep.stop()
        raise
    rows = sweep.rows()
    failed = [p for p in sweep.points if not p.ok]
    report = _write_scale_report(args, sweep, rows) if args.report and rows else None
    if args.json:
        emit_json({"mode": args.mode, "engine": base.engine, "rows": rows,
                    "runs": [p.run_id for p in sweep.points], "report": report,
                    "failed": [{"np": p.np, "run_id": p.run_id, "status": p.status,
                                "failure": p.summary.get("failure")} for p in failed]})
    else:
        print_scale_table(rows)
        if report:
            print(f"report: {report}")
    for p in failed:
        failure = p.summary.get("failure") or {}
        print(f"workbench: run at np={p.np} {p.status}: {failure.get('error', '')} "
              f"(see `workbench show {p.run_id}`)", file=sys.stderr)
    return 1 if failed or not rows else 0


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def print_scale_table(rows: list[dict]) -> None:
    """The sweep table: np, time, samples/s, speedup, efficiency, Karp–Flatt e, and with a
    target the time to reach it and the speedup on that time."""
    target = bool(rows) and "time_to_target_s" in rows[0]
    extra = f" {'to target (s)':>13} {'speedup':>8}" if target else ""
    print(f"{'np':>4} {'time (s)':>9} {'samples/s':>11} {'speedup':>8} {'efficiency':>10} "
          f"{'Karp-Flatt':>10}{extra}")
    for r in rows:
        kf = "-" if r["karp_flatt"] is None else f"{r['karp_flatt']:.3f}"
        extra = (f" {_fmt(r['time_to_target_s'], '{:.2f}'):>13} "
                 f"{_fmt(r['target_speedup'], '{:.2f}'):>8}") if target else ""
        print(f"{r['np']:>4} {r['time_s']:>9.2f} {r['samples_per_s']:>11,.0f} "
              f"{r['speedup']:>8.2f} {r['efficiency']:>10.2f} {kf:>10}{extra}")


def _write_scale_report(args: argparse.Namespace, sweep, rows: list[dict]) -> str:
    from workbench.ui.scaling_report import write_report

    first = sweep.configs[0]
    shown = ("model", "width", "dataset", "samples", "epochs", "batch_size", "lr", "preset")
    meta = {"engine": first.engine, "mode": args.mode, "threads_per_rank": first.threads_per_rank,
            "config": {k: getattr(first, k) for k in shown if getattr(first, k) is not None},
            "runs": [p.run_id for p in sweep.points]}
    if args.mode == "strong":
        meta["config"]["batch_size"] = f"{first.batch_size * first.np} global"
    return str(write_report(args.report, rows, meta))


# ---------------------------------------------------------------------- bench allreduce
def cmd_bench_allreduce(args: argparse.Namespace) -> int:
    from workbench.scaling.bench import BenchError, run_allreduce_bench

    try:
        sizes = units.parse_list(args.sizes, units.parse_size, "message sizes")
    except ValueError as exc:
        raise ConfigError(f"--sizes: {exc}") from None
    if args.np < 2:
        raise ConfigError(f"--np {args.np}: an allreduce needs at least 2 ranks, use --np 2")
    try:
        result = run_allreduce_bench(args.engine, args.np, sizes, runs_dir=args.runs_dir,
                                     budget_s=args.budget_s, blocking=args.blocking,
                                     device=args.device)
    except BenchError as exc:
        print(f"workbench: {exc}", file=sys.stderr)
        return 1
    if args.json:
        emit_json(result)
        return 0
    print(f"allreduce, {args.engine}, {args.np} ranks on {result['device']}  "
          f"(run {result['run_id']})")
    print(f"{'size':>8} {'time (ms)':>10} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
    for r in result["rows"]:
        print(f"{units.format_bytes(r['size_bytes']):>8} {1e3 * r['time_s']:>10.3f} "
              f"{r['algbw_GBps']:>13.3f} {r['busbw_GBps']:>13.3f}")
    if result["alpha_s"] is not None:
        bw = 1 / result["beta_s_per_byte"] / 1e9 if result["beta_s_per_byte"] else float("inf")
        print(f"ring α–β fit: α = {1e6 * result['alpha_s']:.1f} µs per message, "
              f"β = {result['beta_s_per_byte']:.3g} s/byte ({bw:.2f} GB/s per link)")
    return 0


# ---------------------------------------------------------------------- simulate
def cmd_simulate(args: argparse.Namespace) -> int:
    if args.list_presets:
        return _list_presets(args)
    preset = _preset(args.preset)
    workload, network = (preset.workload, preset.network) if preset else (None, None)
    params = _pick(args.params, units.parse_count, workload and workload.params, "--params")
    compute = _pick(args.compute_time, units.parse_duration,
                    workload and workload.compute_time_s, "--compute-time")
    bandwidth = _pick(args.bandwidth, units.parse_bandwidth,
                      network and network.bandwidth, "--bandwidth")
    latency = _pick(args.latency, units.parse_duration, network and network.latency_s,
                    "--latency")
    algorithm = algorithm_named(args.algorithm or (preset.algorithm if preset else "ring"))
    overlap = args.overlap if args.overlap is not None else (preset.overlap if preset else 0.0)
    bpp = args.bytes_per_param or (workload.bytes_per_param if workload else 4)
    workers = units.parse_workers(args.workers) if args.workers else (
        [1, 8, 64, preset.workers] if preset else [1, 8, 64, 512])
    layout = _layout(args, preset, params) if algorithm == "ps" else None
    rows = sim.simulate(workers, params, compute, bandwidth, latency, algorithm, overlap, bpp,
                        args.mode, args.cores, layout)
    setup = {"params": params, "compute_time_s": compute, "bandwidth_bytes_per_s": bandwidth,
             "latency_s": latency, "algorithm": algorithm, "overlap": overlap,
             "bytes_per_param": bpp, "mode": args.mode, "preset": args.preset,
             "servers": dataclasses.asdict(layout) if layout else None}
    if args.json:
        doc = {"setup": setup, "rows": rows}
        if preset:
            doc["published_efficiency"] = preset.published_efficiency
            doc["source"] = preset.source
        emit_json(doc)
        return 0
    print(f"{algorithm} allreduce of {params * bpp / 1e6:.1f} MB over "
          f"{bandwidth * 8 / 1e9:g} Gbit/s, α = {latency * 1e6:g} µs, compute {compute:g} s/step, "
          f"overlap {overlap:g}, {args.mode} scaling")
    if layout:
        print(f"parameter servers: {layout.describe()}")
    print(f"{'workers':>8} {'step (s)':>9} {'comm (s)':>9} {'exposed':>8} {'speedup':>9} "
          f"{'efficiency':>10}")
    for r in rows:
        print(f"{r['workers']:>8} {r['step_time_s']:>9.3f} {r['comm_time_s']:>9.3f} "
              f"{r['exposed_comm_s']:>8.3f} {r['speedup']:>9.1f} {r['efficiency']:>10.2f}")
    if preset and preset.published_efficiency is not None:
        print(f"published: {preset.published_efficiency:.0%} at {preset.workers} workers "
              f"({preset.source})")
    return 0


def _layout(args: argparse.Namespace, preset: sim.Preset | None,
            params: float) -> ServerLayout:
    """Where the parameter servers are: the flags if any is given, else the preset's."""
    given = (args.servers, args.colocated, args.pipelined, args.largest_tensor)
    if preset and preset.layout and given == (None, False, False, None):
        return preset.layout
    largest = (units.parse_count(args.largest_tensor)
               if args.largest_tensor is not None else 0.0)
    if largest > params:
        raise ConfigError(f"--largest-tensor {args.largest_tensor}: larger than --params")
    return ServerLayout(servers=args.servers or 1, colocated=args.colocated,
                        pipelined=args.pipelined, busiest_share=largest / params or None)


def _preset(name: str | None) -> sim.Preset | None:
    if name is None:
        return None
    if name not in sim.PRESETS:
        raise ConfigError(f"unknown preset {name!r}: choose one of {', '.join(sim.PRESETS)} "
                         "(see --list-presets)")
    return sim.PRESETS[name]


def _pick(text: str | None, parse: Callable, fallback: float | None, flag: str) -> float:
    """The flag's value if given, else the preset's; a flag is required without a preset."""
    if text is not None:
        try:
            return parse(text)
        except ValueError as exc:
            raise ConfigError(f"{flag}: {exc}") from None
    if fallback is None:
        raise ConfigError(f"{flag} is required (or pick a --preset; see --list-presets)")
    return fallback


def _list_presets(args: argparse.Namespace) -> int:
    presets = {name: {"workload": p.workload.name, "params": p.workload.params,
                      "compute_time_s": p.workload.compute_time_s, "network": p.network.name,
                      "workers": p.workers, "algorithm": p.algorithm, "overlap": p.overlap,
                      "published_efficiency": p.published_efficiency,
                      "predicted_efficiency": p.predict().efficiency, "source": p.source}
               for name, p in sim.PRESETS.items()}
    if args.json:
        emit_json(presets)
        return 0
    for name, p in presets.items():
        published = "-" if p["published_efficiency"] is None else f"{p['published_efficiency']:.0%}"
        print(f"{name:<22} {p['workload']:<13} {p['network']:<28} {p['workers']:>4} workers  "
              f"predicted {p['predicted_efficiency']:.0%}  published {published}")
    return 0


# ---------------------------------------------------------------------- timeline
def cmd_timeline(args: argparse.Namespace) -> int:
    from workbench.records import load_run
    from workbench.scaling import timeline as tl

    record = load_run(args.run, args.runs_dir)
    path = record.run_dir / "timeline.json"
    metrics = record.metrics()
    doc: dict[str, Any] = {"run_id": record.run_id, "timeline": None,
                           "steps": tl.step_breakdown(metrics),
                           "ranks": tl.rank_breakdown(metrics)}
    horovod = tl.load_timeline(path) if path.exists() else None
    if horovod is not None:
        doc["timeline"] = tl.time_shares(tl.rank_activities(horovod))
    if args.html:
        from workbench.ui.timeline_charts import write_timeline_page

        write_timeline_page(Path(args.html), record.run_id, horovod, metrics)
        doc["html"] = args.html
    if args.json:
        emit_json(doc)
        return 0
    print(f"run {record.run_id}")
    if doc["timeline"]:
        print("Horovod timeline, seconds per activity:")
        for lane, shares in doc["timeline"].items():
            print(f"  {lane}: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(shares.items())))
    else:
        print("no Horovod timeline in this run (start it with --timeline, engine horovod)")
    for lane, v in doc["ranks"].items():
        total = v["compute"] + v["sync"]
        share = v["sync"] / total if total else 0.0
        print(f"  {lane}: compute {v['compute']:.3f} s, synchronize {v['sync']:.3f} s "
              f"({share:.0%} of step time)")
    if args.html:
        print(f"charts: {args.html}")
    return 0


# ---------------------------------------------------------------------- registration
def register(sub: argparse._SubParsersAction) -> None:
    from workbench.launch.commands import add_job_flags

    scale = sub.add_parser(
        "scale", conflict_handler="resolve", help="scaling sweep: speedup and efficiency",
        description="Run the same job at each worker count, one run after another, and print "
                    "speedup, efficiency and the Karp–Flatt serial fraction. Every `run` flag "
                    "is accepted; in strong mode --batch-size is the global batch.")
    add_job_flags(scale)
    scale.add_argument("--np", default="1,2", help="worker counts, comma-separated (default 1,2)")
    scale.add_argument("--mode", choices=("strong", "weak"), default="strong",
                       help="strong: fixed total work; weak: fixed work per worker")
    scale.add_argument("--target-loss", type=float, default=None, metavar="LOSS",
                       help="also report each run's seconds of training until its held-out "
                            "loss fell to LOSS (time_to_target_s; evaluates every epoch)")
    scale.add_argument("--target-accuracy", type=float, default=None, metavar="ACC",
                       help="as --target-loss, for a held-out accuracy (0-1) to reach")
    scale.add_argument("--scale-lr", action="store_true",
                       help="weak mode: multiply --lr by the number of workers, as the global "
                            "batch grows (linear scaling rule; add --warmup-epochs)")
    scale.add_argument("--report", metavar="FILE.html", help="write a standalone HTML report")
    scale.add_argument("--run-timeout", type=float, default=None, metavar="SECONDS",
                       help="stop a run that takes longer than this")
    add_output_flags(scale, runs_dir=False, json_help='print {"rows": [...]} as JSON')
    scale.set_defaults(func=guard(cmd_scale))

    bench = sub.add_parser("bench", help="micro-benchmarks (allreduce)")
    actions = bench.add_subparsers(dest="action", metavar="ACTION", required=True)
    allreduce = actions.add_parser(
        "allreduce", help="time allreduce over message sizes; algbw, busbw, α–β fit",
        description="Time allreduce on real ranks and report nccl-tests' algbw and busbw "
                    "(busbw = algbw x 2(p-1)/p) and the ring model's α and β.")
    allreduce.add_argument("--engine", choices=("horovod", "torch"), default="horovod")
    allreduce.add_argument("--np", type=int, default=2)
    allreduce.add_argument("--sizes", default="4KB,64KB,1MB,16MB",
                           help="message sizes, e.g. 4KB,1MB,64MB (KB = 1024 bytes)")
    allreduce.add_argument("--budget-s", type=float, default=0.3,
                           help="seconds of timed calls per size (default 0.3)")
    allreduce.add_argument("--blocking", action="store_true",
                           help="wait for each allreduce before the next (default: a stream "
                                "of back-to-back calls, as nccl-tests times them)")
    allreduce.add_argument("--device", choices=DEVICES, default="cpu",
                           help="cpu (gloo), or cuda: one GPU per rank, NCCL (default cpu)")
    add_output_flags(allreduce)
    allreduce.set_defaults(func=guard(cmd_bench_allreduce))

    simulate = sub.add_parser(
        "simulate", help="predict scaling with the α–β cost model",
        description="Predict step time, speedup and efficiency of synchronous data-parallel "
                    "training. Units: 25Gbit/s, 100Gb/s, 12GB/s; 5us, 1ms; 44.5e6 or 44.5M.")
    simulate.add_argument("--workers", help="worker counts, e.g. 1,8,64,512")
    simulate.add_argument("--params", help="model parameters, e.g. 44.5e6")
    simulate.add_argument("--compute-time", help="compute time per step on one worker, e.g. 0.62s")
    simulate.add_argument("--bandwidth", help="per-worker link bandwidth, e.g. 25Gbit/s")
    simulate.add_argument("--latency", help="latency per message α, e.g. 5us")
    simulate.add_argument("--algorithm", choices=ALGORITHM_NAMES, default=None,
                          help="ring (Patarasuk & Yuan), rabenseifner (halving and "
                               "doubling; also accepted as tree), "
                               "recursive-doubling, ps (parameter servers; see --servers)")
    simulate.add_argument("--servers", type=positive_int, default=None, metavar="K",
                          help="--algorithm ps: parameter servers the model is sharded over "
                               "(default 1)")
    simulate.add_argument("--colocated", action="store_true",
                          help="--algorithm ps: each server shares a machine (and its link) "
                               "with a worker")
    simulate.add_argument("--pipelined", action="store_true",
                          help="--algorithm ps: push and pull overlap (BytePS) instead of "
                               "push, then pull (TensorFlow)")
    simulate.add_argument("--largest-tensor", default=None, metavar="PARAMS",
                          help="--algorithm ps: parameters of the largest tensor, placed whole "
                               "on one server (TensorFlow); default: an even split")
    simulate.add_argument("--overlap", type=_fraction, default=None,
                          help="fraction of communication hidden behind backward (0-1)")
    simulate.add_argument("--bytes-per-param", type=int, choices=(2, 4, 8), default=None)
    simulate.add_argument("--mode", choices=("weak", "strong"), default="weak",
                          help="weak: fixed batch per worker (default); strong: fixed global")
    simulate.add_argument("--cores", type=_cores, default=None,
                          help="cores shared by the workers (models oversubscription): a "
                               "number, or 'here' for this machine's usable cores (its CPU "
                               "budget: affinity, cgroup quota, CPU_LIMIT); default: a "
                               "cluster, one core per worker")
    simulate.add_argument("--preset", help="a published setup, e.g. resnet101-25gbe")
    simulate.add_argument("--list-presets", action="store_true")
    add_output_flags(simulate, runs_dir=False)
    simulate.set_defaults(func=guard(cmd_simulate))

    timeline = sub.add_parser(
        "timeline", help="where a run's time went: Horovod timeline, compute vs synchronize")
    timeline.add_argument("run", help="run id (or a unique part of it) or run folder")
    add_output_flags(timeline)
    timeline.add_argument("--html", metavar="FILE.html", help="write the charts to a file")
    timeline.set_defaults(func=guard(cmd_timeline))


def _cores(text: str) -> int:
    """--cores: a whole number of cores, or "here" for this machine's CPU budget."""
    if text == "here":
        return cpu_budget().usable
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of cores or 'here'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} cores: expected at least 1")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value
