"""One rank of the allreduce benchmark: time allreduce over several message sizes.

Started on every rank by :func:`workbench.scaling.bench.run_allreduce_bench` through the job
launcher (``start_module``), with Horovod (``hvd.allreduce_``) or PyTorch
(``torch.distributed.all_reduce`` on gloo), so both engines are timed the same way:

1. for each size, a float32 tensor of that many bytes;
2. warm-up calls (the first call of a size sets up buffers and, for Horovod, negotiates);
3. rank 0 picks how many timed calls fit the time budget and broadcasts that number, so every
   rank makes the same calls (a rank that made one call more would wait forever);
4. a barrier, then the timed calls; each rank's *median* time per call (robust to a call
   slowed down by another program on the machine) is averaged over ranks.

Like nccl-tests, the result is the time of one allreduce of ``n`` bytes; the parent turns it
into algbw and busbw and fits the α–β model.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from workbench.training.reporter import RankContext


class Collective:
    """The three collectives the benchmark needs, for one engine."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        if engine == "horovod":
            import horovod.torch as hvd

            hvd.init()
            self.hvd = hvd
        else:
            import datetime

            import torch.distributed as dist

            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
            self.dist = dist

    def allreduce(self, tensor: torch.Tensor, name: str) -> None:
        """Sum ``tensor`` over all ranks, in place, and wait for the result."""
        if self.engine == "horovod":
            self.hvd.allreduce_(tensor, op=self.hvd.Sum, name=name)
        else:
            self.dist.all_reduce(tensor)

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


def time_allreduce(comm: Collective, n_bytes: int, budget_s: float, min_iters: int,
                   max_iters: int, warmup: int) -> tuple[float, int]:
    """Median seconds per allreduce of ``n_bytes`` (averaged over ranks), and the call count."""
    tensor = torch.ones(max(1, n_bytes // 4), dtype=torch.float32)
    name = f"bench.{n_bytes}"
    start = time.perf_counter()
    for _ in range(warmup):
        comm.allreduce(tensor, name)
    per_call = (time.perf_counter() - start) / max(warmup, 1)
    iters = torch.tensor([min(max_iters, max(min_iters, int(budget_s / max(per_call, 1e-6))))])
    comm.broadcast(iters, f"{name}.iters")           # every rank must make the same calls
    comm.barrier()
    calls = []
    for _ in range(int(iters)):
        start = time.perf_counter()
        comm.allreduce(tensor, name)
        calls.append(time.perf_counter() - start)
    median = torch.tensor([statistics.median(calls)], dtype=torch.float64)
    comm.allreduce(median, f"{name}.time")
    return float(median) / _world_size(comm), int(iters)


def _world_size(comm: Collective) -> int:
    return comm.hvd.size() if comm.engine == "horovod" else comm.dist.get_world_size()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", required=True, help="bytes, comma-separated: 4096,1048576")
    parser.add_argument("--budget-s", type=float, default=0.5,
                        help="time to spend on the timed calls of each size (seconds)")
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--max-iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=2)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with RankContext.from_env() as ctx:
        torch.set_num_threads(ctx.config.resolved_threads())
        comm = Collective(ctx.config.engine)
        rows = []
        for n in sizes:
            n = 4 * max(1, n // 4)                    # whole float32 elements
            t, iters = time_allreduce(comm, n, args.budget_s, args.min_iters, args.max_iters,
                                      args.warmup)
            ctx.metric("bench", size_bytes=n, time_s=t, iters=iters)
            rows.append({"size_bytes": n, "time_s": t, "iters": iters})
        if ctx.rank == 0:
            ctx.write_result({"engine": ctx.config.engine, "np": ctx.size, "rows": rows})
        comm.close()


if __name__ == "__main__":
    main()
