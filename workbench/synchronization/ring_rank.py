"""One rank of the Horovod check of the from-scratch ring allreduce.

Started on every rank by :func:`workbench.synchronization.ring_lab.check_against_horovod`
through the job launcher (``start_module("horovod", ...)``). Each rank joins *two* groups
over the same processes:

* Horovod (``hvd.init()``), for the reference sum ``hvd.allreduce(x, op=hvd.Sum)``;
* a ``torch.distributed`` gloo group, for the from-scratch ring's send/recv, rendezvousing at
  the store the parent hosts on ``--port`` (127.0.0.1: all ranks on this machine).

For every vector length it sums the same random float64 vector three ways — our ring,
``torch.distributed.all_reduce`` and Horovod — and rank 0 writes the largest differences seen
on any rank with ``ctx.write_result``.
"""

from __future__ import annotations

import argparse
import datetime

import torch
import torch.distributed as dist

from workbench.rank.context import this_rank
from workbench.synchronization.ring_allreduce import dist_ring_allreduce


def compare_three_ways(n: int, rank: int, hvd) -> dict[str, float]:
    """Max |difference| of our ring vs torch.distributed and vs Horovod, on this rank."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(1000 + rank),
                    dtype=torch.float64)
    ours = dist_ring_allreduce(x.clone())
    library = x.clone()
    dist.all_reduce(library)
    horovod = hvd.allreduce(x.clone(), op=hvd.Sum, name=f"ring_check.{n}")
    return {"vs_torch_distributed": float((ours - library).abs().max()),
            "vs_horovod": float((ours - horovod).abs().max())}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True,
                        help="port of the torch.distributed store the parent hosts")
    parser.add_argument("--sizes", default="7,1001", help="vector lengths, comma-separated")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ctx = this_rank()  # opened by the rank wrapper (rank/wrapper.py)
    torch.set_num_threads(1)
    import horovod.torch as hvd

    hvd.init()
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", args.port, hvd.size(), is_master=False,
                          timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=hvd.rank(), world_size=hvd.size(),
                            timeout=timeout)
    rows = []
    for n in sizes:
        diffs = compare_three_ways(n, hvd.rank(), hvd)
        worst = torch.tensor([diffs["vs_torch_distributed"], diffs["vs_horovod"]],
                             dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)      # the worst rank counts
        rows.append({"n": n, "max_abs_diff_vs_torch_distributed": float(worst[0]),
                     "max_abs_diff_vs_horovod": float(worst[1])})
    if ctx.rank == 0:
        ctx.write_result({"np": hvd.size(), "rows": rows})
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
