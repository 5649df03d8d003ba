"""The training loop's bookkeeping, against a loop written by hand, side by side.

    .venv/bin/python benchmarks/loop_overhead.py                  # torch and horovod, np 1 and 2
    .venv/bin/python benchmarks/loop_overhead.py --engines torch --np 1 --rounds 5

What a student measures should be the engine, not the workbench. Each round runs, for each
engine and number of ranks, in alternating order:

- the workbench: a real job (`workbench.start`), the engine's rank module with all its
  bookkeeping: metrics lines, the compute/sync clock (DDP: a hook on each gradient), bytes
  held and sent, the heartbeat, the checks;
- by hand: the same training as a plain script would write it, started by the same launcher
  (`workbench.launch(fn)`, torchrun or horovodrun): DDP, or Horovod's DistributedOptimizer,
  with the same model, data, sharding, batch, threads and cores, and nothing else.

Both time each epoch on rank 0 with the wall clock; the first epoch (warm-up) is left out.
It prints samples/s of each, and the ratio workbench / by hand of each round and their
median: 1.00 means the bookkeeping costs nothing; the target is at least 0.95. The default
step, the smallest the target names (about 1 ms by hand at np=1: an MLP of width 384 on 32
features, batch 64, one thread per rank), took 1.2 to 1.4 ms by hand on the shared 2-core
machine (width 256: 0.5 to 0.6 ms); --width and --batch-size change it, and each round
prints it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from typing import Any

import workbench
from workbench.config import JobConfig
from workbench.records import of_kind

SETTINGS = dict(model="mlp", width=384, dataset="synthetic", features=32, samples=65536,
                batch_size=64, lr=0.05, optimizer="sgd", threads_per_rank=1, val_fraction=0.0,
                eval_every=0)


def by_hand(fields: dict[str, Any], engine: str) -> float:
    """Rank 0's samples/s after the first epoch, training as a plain script would."""
    import os
    import time

    import torch
    import torch.nn.functional as F

    from workbench.config import JobConfig
    from workbench.data import load_dataset
    from workbench.models import build_model
    from workbench.training.setup import pin_cpu
    from workbench.training.sharding import epoch_order, shard, steps_per_epoch

    cfg = JobConfig(**fields)
    local = int(os.environ.get("HOROVOD_LOCAL_RANK", os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", local) if cfg.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if engine == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank, world = hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    pin_cpu(cfg, local)
    data = load_dataset(cfg.dataset, samples=cfg.samples, features=cfg.features, seed=cfg.seed,
                        dtype=torch.float32)
    x, y = data.x.to(device), data.y.to(device)      # small: it lives on the GPU
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, tuple(x.shape[1:]), data.n_classes, cfg.width).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    if engine == "horovod":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    else:
        model = DDP(model, device_ids=[local] if device.type == "cuda" else None)
    steps, seconds = steps_per_epoch(len(data), world, cfg.batch_size), []
    for epoch in range(cfg.epochs):
        order = epoch_order(len(data), cfg.seed, epoch).to(device)
        start = time.perf_counter()
        for step in range(steps):
            idx = shard(order, step, rank, world, cfg.batch_size)
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()                 # the epoch's work done, once an epoch
        seconds.append(time.perf_counter() - start)
    return steps * cfg.batch_size * (cfg.epochs - 1) / sum(seconds[1:])


def workbench_job(cfg: JobConfig) -> float:
    """Rank 0's samples/s after the first epoch, from its epoch lines."""
    job = workbench.start(cfg)
    if job.wait(900) != "succeeded":
        raise SystemExit(f"the {cfg.engine} job failed: {job.summary}")
    epochs = [e for e in of_kind(job.metrics(), "epoch") if e["rank"] == 0 and e["epoch"] > 0]
    return sum(e["samples"] for e in epochs) / sum(e["epoch_time_s"] for e in epochs)


def hand_job(cfg: JobConfig) -> float:
    fields = {name: getattr(cfg, name) for name in [*SETTINGS, "np", "epochs", "cpu_bind",
                                                     "device"]}
    job = workbench.launch(by_hand, fields, cfg.engine, np=cfg.np, engine=cfg.engine,
                           echo=False, threads_per_rank=cfg.threads_per_rank,
                           runs_dir=cfg.runs_dir, cpu_bind=cfg.cpu_bind, device=cfg.device)
    if job.wait(900) != "succeeded":
        raise SystemExit(f"the hand-written {cfg.engine} loop failed: {job.summary}")
    return job.results()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=["torch", "horovod"])
    parser.add_argument("--np", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4, help="per job; the first is warm-up")
    parser.add_argument("--width", type=int, default=SETTINGS["width"])
    parser.add_argument("--batch-size", type=int, default=SETTINGS["batch_size"])
    args = parser.parse_args()
    runs = tempfile.mkdtemp(prefix="loop-overhead-")
    ratios: dict[tuple[str, int], list[float]] = {}
    for round_ in range(args.rounds):
        for engine in args.engines:
            for np in args.np:
                cfg = JobConfig(**{**SETTINGS, "width": args.width, "batch_size": args.batch_size,
                                   "samples": SETTINGS["samples"] * np},   # equal steps
                                engine=engine, np=np, epochs=args.epochs, runs_dir=runs
                                ).validate()
                pair = [workbench_job, hand_job]
                if round_ % 2:
                    pair.reverse()                 # alternate which runs first
                rate = {f.__name__: f(cfg) for f in pair}
                ratio = rate["workbench_job"] / rate["hand_job"]
                ratios.setdefault((engine, np), []).append(ratio)
                step_ms = 1e3 * cfg.batch_size / rate["hand_job"]
                print(f"round {round_ + 1} {engine:<8} np={np}: workbench "
                      f"{rate['workbench_job']:8.0f} samples/s, by hand "
                      f"{rate['hand_job']:8.0f} samples/s (a step {step_ms:.2f} ms): "
                      f"{ratio:.3f}x", flush=True)
    print("\nworkbench / by hand, per round, and the median (target >= 0.95):")
    for (engine, np), values in ratios.items():
        print(f"  {engine:<8} np={np}: {' '.join(f'{v:.3f}' for v in values)}  "
              f"median {statistics.median(values):.3f}")


if __name__ == "__main__":
    main()
