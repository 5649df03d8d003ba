"""The same split by PyTorch itself: DTensor's `parallelize_module`.

`megatron.py` slices the weights and places f and g by hand. PyTorch's tensor parallelism
(torch.distributed.tensor.parallel) does both from a *plan* naming each linear's style:

    parallelize_module(mlp, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})

- `ColwiseParallel` turns fc1's weight into a DTensor sharded on its output dimension
  (`Shard(0)` of the out × in weight, Megatron's columns of A); its input is declared
  `Replicate()`, so the backward pass sums the input's gradient: Megatron's f;
- `RowwiseParallel` shards fc2's weight on its input dimension (`Shard(1)`); its output
  is a partial sum on every rank (`Partial()`), redistributed to `Replicate()`: the
  all-reduce of Megatron's g.

`CommDebugMode` counts the collectives DTensor issues, so a run can set them beside
`megatron.Comm`'s log. The parameters stay DTensors; `.full_tensor()` gathers one whole.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

from workbench.tensor_parallel.megatron import MLP

PLAN = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


def parallel_copy(dense: MLP, mesh: DeviceMesh) -> nn.Module:
    """A copy of `dense` whose linears are split over the 1-D `mesh` as Megatron's are."""
    return parallelize_module(copy.deepcopy(dense), mesh, PLAN)


def run_counted(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, int]]:
    """Forward and backward of `sum(module(x))`; the collectives DTensor issued, by name."""
    with CommDebugMode() as comm:
        out = module(x)
        out.sum().backward()
    return out.detach(), {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items()}


def full_grads(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, gathered whole where it is a sharded DTensor."""
    return {name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad)
            for name, p in module.named_parameters()}
