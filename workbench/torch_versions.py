"""The torch releases the workbench runs on, and the collectives they name differently.

pyproject.toml declares the supported range (`torch>=2.7,<2.15`); `constraints.txt` pins the
release the set-up installs and the tests run with. The range's lower end is the newest of
`NEEDS`, the parts of the workbench that need more than an older torch has (tests check the
two agree); `workbench doctor` names what will not work with a torch outside the range.

torch 2.13 renamed two collectives, `all_gather_into_tensor` and `reduce_scatter_tensor`
(both since torch 1.13), to `all_gather_single` and `reduce_scatter_single`, and the old names
warn (FutureWarning) from then on. The functions below call whichever this torch has, looked
up at each call, so that the traffic counter (sharded/traffic.py), which wraps them where
they live in `torch.distributed`, counts them; `give_new_names` lets code written with the new
names (exercise 12's) run on an older torch. `reduce_scatter_averages` finds out whether
a reduce-scatter asked to average does, which gloo's did not in torch 2.7 and 2.8, so that
the fsdp engine (sharded/fsdp.py) can divide where it summed.
"""

from __future__ import annotations

from typing import Any

#: The parts that need a recent torch: the oldest release that has what they use, and what.
NEEDS: dict[str, tuple[str, str]] = {
    "--engine fsdp on CPUs, and notebook 07's FSDP": (
        "2.7", "an FSDP2 that runs on CPUs (2.6's stops in its first step: 'Stream' "
               "object has no attribute 'record_event')"),
    "--engine fsdp on GPUs": (
        "2.6", "FSDP2's fully_shard, public in torch.distributed.fsdp since 2.6"),
    "notebook 08's tensor parallelism": (
        "2.5", "DTensor and CommDebugMode, public in torch.distributed.tensor since 2.5"),
    "--device cuda with the torch engines": (
        "2.3", "init_process_group(device_id=), which binds NCCL to the rank's GPU"),
}


#: The names torch 2.13 gave two collectives, and their names since 1.13 (same arguments).
RENAMED = {"all_gather_single": "all_gather_into_tensor",
           "reduce_scatter_single": "reduce_scatter_tensor"}


def _collective(new: str, old: str) -> Any:
    import torch.distributed as dist

    return getattr(dist, new, None) or getattr(dist, old)


def give_new_names() -> None:
    """Where this torch predates 2.13, name its `all_gather_into_tensor` and
    `reduce_scatter_tensor` as 2.13 does, in `torch.distributed` of this process only."""
    import torch.distributed as dist

    for new, old in RENAMED.items():
        if not hasattr(dist, new):
            setattr(dist, new, getattr(dist, old))


def all_gather_into_tensor(output: Any, input: Any, group: Any = None,
                           async_op: bool = False) -> Any:
    """`output` (N times `input`'s size) gets every rank's `input`, in rank order."""
    gather = _collective("all_gather_single", "all_gather_into_tensor")
    return gather(output, input, group=group, async_op=async_op)


def reduce_scatter_tensor(output: Any, input: Any, group: Any = None,
                          async_op: bool = False, op: Any = None) -> Any:
    """`output` (1/N of `input`) gets the sum over the ranks of this rank's slice of `input`
    (or their `op`, a `ReduceOp`)."""
    import torch.distributed as dist

    scatter = _collective("reduce_scatter_single", "reduce_scatter_tensor")
    op = dist.ReduceOp.SUM if op is None else op
    return scatter(output, input, op=op, group=group, async_op=async_op)


def reduce_scatter_averages(device: Any, group: Any = None) -> bool:
    """Whether a reduce-scatter asked to average (`ReduceOp.AVG`) averages, on this group's
    back-end: one collective of N values on `device`. gloo's summed instead, silently, in
    torch 2.7 and 2.8 (PyTorch issue 162338)."""
    import torch
    import torch.distributed as dist

    n = dist.get_world_size(group)
    mine = torch.empty(1, device=device)
    reduce_scatter_tensor(mine, torch.ones(n, device=device), group=group,
                          op=dist.ReduceOp.AVG)
    return mine.item() == 1.0          # the sum would be n
