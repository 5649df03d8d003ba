"""One rank of the allreduce benchmark: time allreduce over several message sizes.

Started on every rank by :func:`workbench.scaling.bench.run_allreduce_bench` through the job
launcher (``start_module``), with Horovod (``hvd.allreduce_``) or PyTorch
(``torch.distributed.all_reduce``: gloo on CPUs, NCCL on GPUs), so both engines are timed
the same way:

1. for each size, float32 tensors of that many bytes;
2. warm-up calls (the first call of a size sets up buffers and, for Horovod, negotiates);
3. rank 0 picks how many timed rounds fit the time budget and broadcasts that number, so
   every rank makes the same calls (a rank that made one call more would wait until the
   back-end's timeout ended the job);
4. a barrier, then the timed rounds. As nccl-tests does, a round launches several
   allreduces back to back and waits for all of them, so a round's time ÷ its calls is the
   cost of one allreduce in a stream of them — what a training step's gradients pay. Each
   rank's *median* round (robust to a round slowed down by another program on the machine)
   is averaged over ranks.

Horovod would fuse the calls of a round into one message (Tensor Fusion); the benchmark turns
fusion off (``HOROVOD_FUSION_THRESHOLD=0``) so every call is one message of n bytes.
``--blocking`` instead waits for each call before the next: then the time includes the
round trip through Horovod's background thread, which a stream hides.

With the job's ``device="cuda"`` the tensors live on each rank's GPU, and a round ends with
``torch.cuda.synchronize()``: an NCCL call returns once it is queued, and the round must
time the data actually moved, as nccl-tests does.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from workbench.rank.context import this_rank
from workbench.training.setup import pick_device


class Collective:
    """The three collectives the benchmark needs, for one engine."""

    def __init__(self, engine: str, device: torch.device) -> None:
        self.engine, self.device = engine, device
        if engine == "horovod":
            import os

            import horovod.torch as hvd

            os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"   # one message per call, read by init
            hvd.init()
            self.hvd = hvd
        else:
            import datetime

            import torch.distributed as dist

            timeout = datetime.timedelta(seconds=120)
            if device.type == "cuda":
                dist.init_process_group("nccl", device_id=device, timeout=timeout)
            else:
                dist.init_process_group("gloo", timeout=timeout)
            self.dist = dist

    def allreduce(self, tensor: torch.Tensor, name: str) -> None:
        """Sum ``tensor`` over all ranks, in place, and wait for the result."""
        self.allreduce_many([tensor], name)

    def allreduce_many(self, tensors: list[torch.Tensor], name: str) -> None:
        """Start an in-place sum of every tensor, then wait for all of them."""
        if self.engine == "horovod":
            handles = [self.hvd.allreduce_async_(t, op=self.hvd.Sum, name=f"{name}.{i}")
                       for i, t in enumerate(tensors)]
            for h in handles:
                self.hvd.synchronize(h)
        else:
            for work in [self.dist.all_reduce(t, async_op=True) for t in tensors]:
                work.wait()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)   # the data has moved, not just been queued

    def broadcast(self, tensor: torch.Tensor, name: str) -> None:
        """Copy rank 0's ``tensor`` to every rank, in place."""
        if self.engine == "horovod":
            self.hvd.broadcast_(tensor, root_rank=0, name=name)
        else:
            self.dist.broadcast(tensor, src=0)

    def barrier(self) -> None:
        if self.engine == "horovod":
            self.hvd.barrier()
        else:
            self.dist.barrier()

    def close(self) -> None:
        if self.engine == "horovod":
            self.hvd.shutdown()
        else:
            self.dist.destroy_process_group()


#: Bytes of tensors one round may hold at once (a 64 MB size gets 2 calls per round).
ROUND_BYTES = 128 << 20


def time_allreduce(comm: Collective, n_bytes: int, budget_s: float, min_rounds: int,
                   max_rounds: int, warmup: int, blocking: bool = False) -> tuple[float, int]:
    """Seconds per allreduce of ``n_bytes`` (median round, averaged over ranks) and the
    number of timed rounds."""
    calls = 1 if blocking else max(1, min(8, ROUND_BYTES // max(n_bytes, 1)))
    tensors = [torch.ones(max(1, n_bytes // 4), dtype=torch.float32, device=comm.device)
               for _ in range(calls)]
    name = f"bench.{n_bytes}"

    def one_round() -> None:
        if blocking:
            comm.allreduce(tensors[0], name)
        else:
            comm.allreduce_many(tensors, name)

    start = time.perf_counter()
    for _ in range(warmup):
        one_round()
    per_round = (time.perf_counter() - start) / max(warmup, 1)
    rounds = torch.tensor([min(max_rounds, max(min_rounds, int(budget_s / max(per_round, 1e-6))))],
                          device=comm.device)
    comm.broadcast(rounds, f"{name}.rounds")           # every rank must make the same calls
    comm.barrier()
    times = []
    for _ in range(int(rounds)):
        start = time.perf_counter()
        one_round()
        times.append((time.perf_counter() - start) / calls)
    median = torch.tensor([statistics.median(times)], dtype=torch.float64, device=comm.device)
    comm.allreduce(median, f"{name}.time")
    return float(median) / _world_size(comm), int(rounds)


def _world_size(comm: Collective) -> int:
    return comm.hvd.size() if comm.engine == "horovod" else comm.dist.get_world_size()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", required=True, help="bytes, comma-separated: 4096,1048576")
    parser.add_argument("--budget-s", type=float, default=0.5,
                        help="time to spend on the timed calls of each size (seconds)")
    parser.add_argument("--min-rounds", type=int, default=3)
    parser.add_argument("--max-rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--blocking", action="store_true",
                        help="wait for each allreduce before starting the next")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ctx = this_rank()  # opened by the rank wrapper (rank/wrapper.py)
    torch.set_num_threads(ctx.config.resolved_threads())
    device = pick_device(ctx.config.device, ctx.local_rank)
    comm = Collective(ctx.config.engine, device)
    rows = []
    for n in sizes:
        n = 4 * max(1, n // 4)                    # whole float32 elements
        t, rounds = time_allreduce(comm, n, args.budget_s, args.min_rounds, args.max_rounds,
                                  args.warmup, args.blocking)
        ctx.metric("bench", size_bytes=n, time_s=t, rounds=rounds)
        rows.append({"size_bytes": n, "time_s": t, "rounds": rounds})
    if ctx.rank == 0:
        ctx.write_result({"engine": ctx.config.engine, "np": ctx.size, "rows": rows,
                          "device": str(device)})
    comm.close()


if __name__ == "__main__":
    main()
