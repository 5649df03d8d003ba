"""The training loop's bookkeeping against a loop written by hand, side by side in each rank.

    .venv/bin/python benchmarks/loop_overhead.py                  # torch and horovod, np 1 and 2
    .venv/bin/python benchmarks/loop_overhead.py --engines torch --np 1 --pairs 16

What a student measures should be the engine, not the workbench. One job per engine and
number of ranks, started by the engine's launcher (`workbench.launch(fn)`: torchrun or
horovodrun). Each rank joins the engine's group, builds the model twice from one seed, and
trains the two copies in turn, for `--pairs` pairs of short epochs (`--steps` steps each,
the config's `max_steps`):

- the workbench: `training.loop.train`, the loop every engine's rank module runs, with the
  engine's synchronizer set up as its rank module sets it up (DDP: `DDPSync` and its clock
  hook, DDP's reducer, `Footprint`; Horovod: `HorovodSync`, `hvd.DistributedOptimizer`)
  and all its bookkeeping: step and epoch lines written to the run's metrics, the
  compute/sync clock, bytes held and sent;
- by hand: zero_grad, forward, loss, backward, step, as a plain script writes it, with DDP
  or Horovod's DistributedOptimizer, on the same data, shards, batch and threads.

The rank's heartbeat runs beside both. Taking turns in one process, a fraction of a second
each, the two see the same machine: the shared 2-core machine's speed drifts by 10% from one
second to the next and by 10-20% between jobs (run as separate jobs one after another,
rounds of this comparison ranged from 0.80 to 1.16). Rank 0 times each short epoch with the
wall clock, the workbench's whole `train()` call included: its start (about 1 ms: the
epoch's order, the "ready" line) and the epoch's end, where it writes the step lines not yet
written (an epoch of 500 steps, 0.5 s at np=1, ends about when a long one would write). A
pair's ratio is workbench / by hand in samples/s; the first
pair (warm-up) is left out, the order within a pair alternates, and the median ratio is
printed with a 95% interval for it (a median of 23 noisy pairs is good to about two
points): 1.00 means the bookkeeping costs nothing; the target is at least 0.95. With
--control both sides run the plain loop, the workbench's side on the workbench's model and
optimizer: that median is the comparison's own bias (0.995-1.001 torch, 1.004 horovod at np=1 on
12-05).

The default step is the smallest the target names (about 1 ms by hand at np=1: an MLP
of width 384 on 32 features, batch 64, one thread per rank; 3-4 ms at np=2 on two
cores, where gloo's allreduce takes most of it); --width and --batch-size change it.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from typing import Any

import workbench

SETTINGS = dict(model="mlp", width=384, dataset="synthetic", features=32, samples=65536,
                batch_size=64, lr=0.05, optimizer="sgd", threads_per_rank=1, val_fraction=0.0,
                eval_every=0)


def workbench_side(cfg: Any, device: Any, engine: str) -> tuple[Any, Any, Any]:
    """The model, optimizer and synchronizer as the engine's rank module makes them."""
    from workbench.models import make_optimizer
    from workbench.training.setup import build

    setup = build(cfg, device)
    if engine == "horovod":
        import horovod.torch as hvd

        from workbench.training.horovod_rank import HorovodSync
        optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr)
        hvd.broadcast_parameters(setup.model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, op=hvd.Average,
                                             named_parameters=setup.model.named_parameters())
        return setup, optimizer, HorovodSync(setup.model, fp16=False)
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workbench.sharded.memory import Footprint
    from workbench.training.ddp_rank import DDPSync
    sync = DDPSync(setup.model, setup.clock, compress=False)
    setup.model = DDP(setup.model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr)
    sync.measure = Footprint(setup.module, optimizer, sync.sent_bytes)
    return setup, optimizer, sync


def hand_side(cfg: Any, device: Any, engine: str, data: Any) -> tuple[Any, Any]:
    """The model and optimizer as a plain script makes them."""
    import torch

    from workbench.models import build_model
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, tuple(data.x.shape[1:]), data.n_classes, cfg.width).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    if engine == "horovod":
        import horovod.torch as hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None), optimizer


def side_by_side(fields: dict[str, Any], pairs: int,
                 control: bool = False) -> list[tuple[float, float]]:
    """Rank 0's samples/s, (workbench, by hand), for each pair of epochs; with `control`,
    both sides run the plain loop (the comparison's own bias: 1.00 if fair)."""
    import os
    import time

    import torch
    import torch.nn.functional as F

    from workbench.config import JobConfig
    from workbench.rank.protocol import current
    from workbench.training.loop import train
    from workbench.training.setup import pick_device, pin_cpu
    from workbench.training.sharding import epoch_order, shard, steps_per_epoch

    cfg, ctx, engine = JobConfig(**fields), current(), fields["engine"]
    local = int(os.environ.get("HOROVOD_LOCAL_RANK", os.environ.get("LOCAL_RANK", 0)))
    device = pick_device(cfg.device, local)
    if engine == "horovod":
        import horovod.torch as hvd
        hvd.init()
    else:
        import torch.distributed as dist
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                **({"device_id": device} if device.type == "cuda" else {}))
    pin_cpu(cfg, local)
    setup, optimizer, sync = workbench_side(cfg, device, engine)
    model, hand_optimizer = hand_side(cfg, device, engine, setup.data)
    x, y = setup.data.x.to(device), setup.data.y.to(device)   # the same samples
    steps = min(steps_per_epoch(len(x), ctx.size, cfg.batch_size), cfg.max_steps)

    def plain(epoch: int, model: Any, optimizer: Any) -> None:
        order = epoch_order(len(x), cfg.seed, epoch).to(device)
        for step in range(steps):
            idx = shard(order, step, ctx.rank, ctx.size, cfg.batch_size)
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()

    def by_hand(epoch: int) -> None:
        plain(epoch, model, hand_optimizer)

    def workbench_loop(epoch: int) -> None:
        if control:                      # the workbench's model, trained by the plain loop
            return plain(epoch, setup.model, optimizer)
        ctx.config, setup.first_epoch = JobConfig(**{**fields, "epochs": epoch + 1}), epoch
        train(ctx, setup, optimizer, sync)

    def seconds(run: Any, epoch: int) -> float:
        start = time.perf_counter()
        run(epoch)
        if device.type == "cuda":
            torch.cuda.synchronize()                 # the epoch's work done, once an epoch
        return time.perf_counter() - start

    rates = []
    for pair in range(pairs):
        order = [workbench_loop, by_hand] if pair % 2 else [by_hand, workbench_loop]
        took = {run.__name__: seconds(run, pair) for run in order}
        rates.append((steps * cfg.batch_size / took["workbench_loop"],
                      steps * cfg.batch_size / took["by_hand"]))
    if engine == "torch":
        setup.model = model = None   # DDP before its group (pytorch/pytorch#56297)
        dist.destroy_process_group()
    return rates


def compare(fields: dict[str, Any], pairs: int, runs_dir: str,
            control: bool = False) -> tuple[float, float, list[float]]:
    """One job of `fields` (a JobConfig's, with engine, np, device and max_steps): rank 0's
    samples/s by the workbench and by hand (each its median epoch's) and each pair's ratio."""
    engine, np = fields["engine"], fields["np"]
    job = workbench.launch(side_by_side, fields, pairs, control, np=np, engine=engine,
                           echo=False, threads_per_rank=1, runs_dir=runs_dir,
                           device=fields["device"], name=f"loop-overhead-{engine}")
    if job.wait(1800) != "succeeded":
        raise SystemExit(f"the {engine} np={np} job failed: {job.summary}")
    rates = job.results()[0][1:]
    return (statistics.median(wb for wb, _ in rates),
            statistics.median(hand for _, hand in rates), [wb / hand for wb, hand in rates])


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of `values` (the order statistics whose
    ranks a Binomial(n, 1/2) puts outside the interval with at most 1 - `confidence`;
    Conover, "Practical Nonparametric Statistics", 3rd ed., sec. 3.2)."""
    ranked, n = sorted(values), len(values)
    tail = (1 - confidence) / 2
    below, j = 0.0, 0  # P(Binomial(n, 1/2) <= j - 1)
    while j < n // 2 and below + math.comb(n, j) / 2 ** n <= tail:
        below += math.comb(n, j) / 2 ** n
        j += 1
    return ranked[max(j - 1, 0)], ranked[n - max(j, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=["torch", "horovod"])
    parser.add_argument("--np", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--pairs", type=int, default=24, help="of epochs; the first is warm-up")
    parser.add_argument("--steps", type=int, default=500, help="per epoch")
    parser.add_argument("--width", type=int, default=SETTINGS["width"])
    parser.add_argument("--batch-size", type=int, default=SETTINGS["batch_size"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--control", action="store_true",
                        help="both sides run the plain loop: the comparison's own bias")
    args = parser.parse_args()
    runs = tempfile.mkdtemp(prefix="loop-overhead-")
    for engine in args.engines:
        for np in args.np:
            fields = {**SETTINGS, "width": args.width, "batch_size": args.batch_size,
                      "samples": SETTINGS["samples"] * np, "engine": engine, "np": np,
                      "device": args.device, "max_steps": args.steps}
            wb_rate, hand_rate, ratios = compare(fields, args.pairs, runs, args.control)
            low, high = median_interval(ratios)
            print(f"{engine:<8} np={np}: workbench {wb_rate:8.0f} samples/s, by hand "
                  f"{hand_rate:8.0f} samples/s (a step {1e3 * args.batch_size / hand_rate:.2f} "
                  f"ms); workbench / by hand per pair: {' '.join(f'{r:.3f}' for r in ratios)}; "
                  f"median {statistics.median(ratios):.3f} (95% interval {low:.3f}-{high:.3f}; "
                  "target >= 0.95)", flush=True)


if __name__ == "__main__":
    main()
