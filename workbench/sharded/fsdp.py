"""ZeRO-3 with PyTorch's own FSDP2: the parameters are sharded too.

Rajbhandari et al. 2020 (arXiv:1910.02054), stage P_os+g+p. FSDP2 is PyTorch's second
FSDP (the first: Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data
Parallel", VLDB 2023, arXiv:2304.11277, which flattens each block's parameters into one
buffer); FSDP2 shards each parameter by itself (the documentation of
`torch.distributed.fsdp.fully_shard`; its design, pytorch/pytorch issue 114299).
`fully_shard(block)` replaces each parameter of the block by a DTensor, of which this rank
holds one slice of dimension 0; then, for every block, in each step:

    forward:   all-gather the block's parameters, compute, free the gathered copy
               (`reshard_after_forward=True`, the default for every module but the root,
               whose parameters stay gathered until its backward)
    backward:  all-gather them again, compute the gradients, reduce-scatter the gradients
               (each rank keeps the average of its slice), free the gathered copy
    step:      the optimizer updates this rank's slices, with state for them only

So a rank holds Ψ/N parameters, Ψ/N gradients and KΨ/N of optimizer state, and, for one
block at a time, that block whole. The price is a second all-gather: 3Ψ(N−1)/N values
sent per rank per step, 1.5× the all-reduce of DDP.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.torch_versions import reduce_scatter_averages


def shard_model(model: nn.Module, device: torch.device, compress: bool = False) -> nn.Module:
    """Apply FSDP2 to `model` in place: each block holding parameters, then the root.

    The blocks are the model's children (Linear and Conv2d layers of workbench.models);
    `device` is where the shards live (the CPU over gloo, or this rank's GPU over NCCL).
    `compress`: reduce-scatter the gradients in bf16 (FSDP2's `MixedPrecisionPolicy`).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    policy = MixedPrecisionPolicy(reduce_dtype=torch.bfloat16 if compress else None)
    for block in model.children():
        if any(p.requires_grad for p in block.parameters()):
            fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    # FSDP2 asks the reduce-scatter to average the gradients (ReduceOp.AVG). gloo's summed
    # instead, silently, in torch 2.7 and 2.8 (PyTorch issue 162338), so each step was N
    # times too large. There, the hook FSDP2 runs on each reduce-scatter's output (before
    # the gradients are kept) divides it by N.
    if device.type == "cpu" and not reduce_scatter_averages(device):
        world = torch.distributed.get_world_size()
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_all_reduce_hook(lambda reduced: reduced.div_(world))
    return model
