"""ZeRO-1: each rank keeps and updates the optimizer state of its shard only.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(SC 2020, arXiv:1910.02054), stage P_os. One training step, on every rank:

    backward()                    full gradients of this rank's batch
    reduce_gradients()            all-reduce: every rank has the averaged gradients
    step():  shard                this rank's slice of the parameters and gradients
             step                 the optimizer updates that slice only: its state
                                  (momentum, Adam's two moments) exists for 1/N of the model
             all-gather           every rank sends its updated slice to every other

The arithmetic is DDP's: the same averaged gradients, the same element-wise update
(SGD, momentum, weight decay and Adam all update each parameter from its own gradient and
state), only computed once, by the rank that owns it. So N ranks with batch b still end
with the parameters of one process with batch N·b. What it saves: the optimizer's state,
K bytes per parameter, shrinks from KΨ to KΨ/N per rank. What it costs: the all-gather
moves Ψ(N−1)/N values per rank, but the all-reduce is a reduce-scatter followed by an
all-gather (Patarasuk & Yuan 2009), so ZeRO-1 could move no more than DDP: ZeRO-2 does
exactly that.

`torch.distributed.optim.ZeroRedundancyOptimizer` is PyTorch's version (it shards whole
tensors between ranks; here one flat buffer is cut in N equal slices, as DeepSpeed does).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from workbench.sharded.flat import FlatParameters
from workbench.torch_versions import all_gather_into_tensor


class Zero1Optimizer:
    """An optimizer that steps only this rank's slice of the model, then all-gathers.

    `make_optimizer(params)` builds the ordinary optimizer (SGD, Adam...) that updates the
    slice. The training loop uses it like any optimizer: `zero_grad()`, `step()`,
    `param_groups` (for the learning rate); `reduce_gradients()` runs after `backward()`.
    """

    def __init__(self, model: nn.Module,
                 make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
                 rank: int, world: int, compress: bool = False) -> None:
        self.rank, self.world = rank, world
        self.compress = compress                    # send the gradients in bf16
        self.flat = FlatParameters([p for p in model.parameters() if p.requires_grad],
                                   rank, world)
        # A parameter that *is* this rank's slice of the buffer (the same memory).
        self.shard = nn.Parameter(self.flat.mine())
        self.local = make_optimizer([self.shard])   # its state: 1/N of the model's
        self.full_grad: torch.Tensor | None = None

    @property
    def param_groups(self) -> list[dict]:
        return self.local.param_groups

    @property
    def state(self) -> dict:
        return self.local.state

    def zero_grad(self) -> None:
        for p in self.flat.params:
            p.grad = None
        self.shard.grad, self.full_grad = None, None

    def reduce_gradients(self) -> None:
        """All-reduce the gradients (as DDP does), then point the shard at its slice."""
        grad = self.wire(self.flat.take_gradients())
        dist.all_reduce(grad)
        grad = self.unwire(grad).div_(self.world)   # the sum over the ranks -> the mean
        self.full_grad = grad                       # ZeRO-1 still holds every gradient
        self.shard.grad = grad[self.flat.lo:self.flat.hi]

    def wire(self, grad: torch.Tensor) -> torch.Tensor:
        """The gradients as sent: in bf16 (half the bytes) when compressing."""
        return grad.to(torch.bfloat16) if self.compress else grad

    def unwire(self, grad: torch.Tensor) -> torch.Tensor:
        """Received gradients back in the parameters' dtype."""
        return grad.to(self.flat.data.dtype)

    def step(self) -> None:
        """Shard -> step -> all-gather."""
        self.local.step()                           # updates this rank's slice in place
        all_gather_into_tensor(self.flat.data, self.flat.mine())  # every slice, everywhere

    def state_dict(self) -> dict:
        """This rank's shard of the optimizer state (not a whole optimizer's)."""
        return self.local.state_dict()
