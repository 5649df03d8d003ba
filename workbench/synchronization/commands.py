"""`workbench async`, `workbench hogwild`, `workbench stragglers`, `workbench ring`.

* ``async``      parameter server with N worker processes: sync vs async SGD, staleness;
* ``hogwild``    lock-free updates of a shared model vs locked updates, on a sparse problem;
* ``stragglers`` what one slow rank costs a synchronous Horovod job, and what dropping the
  slowest gradients (backup workers) would buy;
* ``ring``       the from-scratch ring allreduce: checked against torch.distributed (and
  Horovod with ``--horovod``), timed, and compared with the α–β model.

Bad input exits with code 2 and a one-line message; a failed worker exits with code 1 and
names the worker; ``--json`` prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import argparse

from workbench.cli import emit_json, guard, non_negative_float, positive_float, positive_int
from workbench.flags import add_output_flags


def element_counts(text: str) -> list[int]:
    """argparse type: vector lengths such as "7,1001,1M" (elements, not bytes)."""
    from workbench.scaling.units import parse_count, parse_list

    try:
        counts = parse_list(text, parse_count, "sizes")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if any(c != int(c) for c in counts):
        raise argparse.ArgumentTypeError(f"sizes must be whole element counts, got {text!r}")
    return [int(c) for c in counts]


# ---------------------------------------------------------------------- async
def cmd_async(args: argparse.Namespace) -> int:
    from workbench.synchronization.async_ps import PSConfig, run_parameter_server

    PSConfig(mode=args.mode, workers=args.workers, backup_workers=args.backup_workers,
             straggler_delay=args.straggler_delay).validate()   # complain before starting
    if not args.json:
        print(f"{args.mode} parameter server, {args.workers} worker process(es), "
              f"{args.epochs} epoch(s) of the digits ...", flush=True)
    r = run_parameter_server(args.mode, args.workers, args.epochs,
                             straggler_delay=args.straggler_delay,
                             staleness_aware=args.staleness_aware,
                             backup_workers=args.backup_workers, lr=args.lr,
                             batch_size=args.batch_size, seed=args.seed,
                             runs_dir=args.runs_dir)
    if args.json:
        emit_json(r)
        return 0
    print(f"  final loss {r['final_loss']:.4f}, accuracy {r['final_accuracy']:.3f}, "
          f"{r['updates']} updates in {r['time_s']:.2f} s")
    print(f"  staleness: mean {r['mean_staleness']:.2f}, max {r['max_staleness']} "
          f"(histogram {r['staleness_histogram']})")
    for w in r["workers"]:
        print(f"  worker {w['worker']}: {w['gradients']} gradients, computing "
              f"{w['compute_s']:.2f} s, waiting for parameters {w['wait_s']:.2f} s")
    return 0


# ---------------------------------------------------------------------- hogwild
def cmd_hogwild(args: argparse.Namespace) -> int:
    from workbench.synchronization.hogwild import VARIANTS, run_hogwild

    r = run_hogwild(args.processes, args.epochs, batch_size=args.batch_size, lr=args.lr,
                    seed=args.seed, runs_dir=args.runs_dir)
    if args.json:
        emit_json(r)
        return 0
    print(f"sparse logistic regression: Ω = {r['sparsity']['omega']} weights per sample, "
          f"Δ = {r['sparsity']['delta']:.4f}; initial loss {r['initial_loss']:.4f}")
    for v in VARIANTS:
        print(f"  {v:8s} final loss {r[v]['final_loss']:.4f}, accuracy "
              f"{r[v]['final_accuracy']:.3f}, {r[v]['updates']} updates in {r[v]['time_s']:.2f} s")
    return 0


# ---------------------------------------------------------------------- stragglers
def cmd_stragglers(args: argparse.Namespace) -> int:
    from workbench.synchronization.stragglers import run_stragglers

    if not args.json:
        print(f"two {args.engine} jobs, np={args.np}, {args.steps} steps: without and with a "
              f"{args.delay:g} s delay on rank {args.straggler_rank} ...", flush=True)
    r = run_stragglers(args.delay, args.np, straggler_rank=args.straggler_rank,
                       steps=args.steps, batch_size=args.batch_size, engine=args.engine,
                       runs_dir=args.runs_dir, backup_ps=not args.no_backup_ps)
    if args.json:
        emit_json(r)
        return 0
    for label in ("baseline", "straggler"):
        run = r[label]
        print(f"  {label}: {run['step_time_s'] * 1000:.1f} ms per step ({run['run_id']})")
        for m in run["per_rank"]:
            print(f"    rank {m['rank']}: step {m['step_time_s'] * 1000:.1f} ms = compute "
                  f"{m['compute_s'] * 1000:.1f} ms + sync {m['sync_s'] * 1000:.1f} ms")
        for d in run["if_dropped"][1:]:
            print(f"    dropping the {d['dropped']} slowest gradient(s): about "
                  f"{d['step_time_s'] * 1000:.1f} ms per step")
    if "backup_ps" in r:
        for mode, v in r["backup_ps"].items():
            print(f"  parameter server, {mode}: {v['time_per_update_s'] * 1000:.1f} ms per "
                  f"update, final loss {v['final_loss']:.4f}, {v['gradients_dropped']} dropped")
    return 0


# ---------------------------------------------------------------------- ring
def cmd_ring(args: argparse.Namespace) -> int:
    from workbench.synchronization.ring_lab import check_against_horovod, run_ring_lab

    r = run_ring_lab(args.np, args.sizes, repeats=args.repeats, seed=args.seed,
                     runs_dir=args.runs_dir)
    if args.horovod:
        r["horovod"] = check_against_horovod(args.np, args.sizes, runs_dir=args.runs_dir)
    if args.json:
        emit_json(r)
        return 0
    bandwidth = 1 / max(r["beta_s_per_byte"], 1e-30) / 1e9
    print(f"ring allreduce over {r['np']} processes; ping-pong fit: α = "
          f"{r['alpha_s'] * 1e6:.0f} µs, 1/β = {bandwidth:.2f} GB/s")
    for c in r["checks"]:
        print(f"  n={c['n']}: max |ring − all_reduce| = {c['max_abs_diff']:.1e}, "
              f"integers exact: {c['exact_integers']}")
    for h in r.get("horovod", {}).get("rows", []):
        print(f"  n={h['n']}: max |ring − hvd.allreduce| = {h['max_abs_diff_vs_horovod']:.1e}")
    print(f"  {'elements':>10} {'ring ms':>9} {'gloo ms':>9} {'model ms':>9}")
    for row in r["rows"]:
        print(f"  {row['n']:>10} {row['ring_s'] * 1e3:>9.3f} {row['library_s'] * 1e3:>9.3f} "
              f"{row['model_s'] * 1e3:>9.3f}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the synchronization labs' sub-commands."""
    p = sub.add_parser("async", help="parameter server: synchronous vs asynchronous SGD")
    p.add_argument("--mode", choices=("sync", "async", "backup"), default="sync",
                   help="sync: wait for all; async: apply each gradient as it arrives; "
                        "backup: keep the first N of N + backup-workers gradients")
    p.add_argument("--workers", type=positive_int, default=2, help="worker processes (N)")
    p.add_argument("--epochs", type=positive_int, default=2)
    p.add_argument("--straggler-delay", type=non_negative_float, default=0.0,
                   metavar="SECONDS", help="extra seconds per step on worker 0")
    p.add_argument("--staleness-aware", action="store_true",
                   help="divide the learning rate by each gradient's staleness")
    p.add_argument("--backup-workers", type=int, default=0, help="b, for --mode backup")
    p.add_argument("--lr", type=positive_float, default=0.1)
    p.add_argument("--batch-size", type=positive_int, default=32)
    add_output_flags(p, seed=True)
    p.set_defaults(func=guard(cmd_async))

    p = sub.add_parser("hogwild", help="Hogwild!: lock-free vs locked shared-memory SGD")
    p.add_argument("--processes", type=positive_int, default=2)
    p.add_argument("--epochs", type=positive_int, default=3)
    p.add_argument("--batch-size", type=positive_int, default=4)
    p.add_argument("--lr", type=positive_float, default=0.5)
    add_output_flags(p, seed=True)
    p.set_defaults(func=guard(cmd_hogwild))

    p = sub.add_parser("stragglers", help="one slow rank in synchronous training")
    p.add_argument("--delay", type=positive_float, default=0.05, metavar="SECONDS",
                   help="extra seconds per step on the straggler")
    p.add_argument("--np", type=positive_int, default=2)
    p.add_argument("--straggler-rank", type=int, default=1)
    p.add_argument("--steps", type=positive_int, default=20)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--engine", choices=("horovod", "torch"), default="horovod")
    add_output_flags(p)
    p.add_argument("--no-backup-ps", action="store_true",
                   help="skip the parameter-server backup-worker runs")
    p.set_defaults(func=guard(cmd_stragglers))

    p = sub.add_parser("ring", help="ring allreduce from scratch: check and time it")
    p.add_argument("--np", type=positive_int, default=2)
    p.add_argument("--sizes", type=element_counts, default=[7, 1001, 65536, 1 << 20],
                   help="vector lengths in float32 elements, e.g. 7,1001,1M")
    p.add_argument("--repeats", type=positive_int, default=5)
    add_output_flags(p, seed=True)
    p.add_argument("--horovod", action="store_true",
                   help="also compare with hvd.allreduce(op=hvd.Sum) in a Horovod job")
    p.set_defaults(func=guard(cmd_ring))
