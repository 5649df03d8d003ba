"""ZeRO-2: the gradients are reduce-scattered, so each rank keeps only its shard's.

Rajbhandari et al. 2020 (arXiv:1910.02054), stage P_os+g. The step of ZeRO-1
(`zero1.py`), with one line changed: instead of all-reducing the gradients and then using
only its slice, a rank asks for its slice alone:

    reduce_gradients():  reduce-scatter   rank r receives the sum of slice r of every
                                          rank's gradients, and nothing else
    step():              shard -> step -> all-gather (as ZeRO-1)

An all-reduce *is* a reduce-scatter followed by an all-gather, so ZeRO-2 moves exactly as
many bytes as DDP: 2Ψ(N−1)/N values per rank per step, half of them as gradients, half as
updated parameters. Per rank it holds the parameters (Ψ), 1/N of the gradients and 1/N of
the optimizer state.

Here the whole gradient still exists for a moment, between `backward()` and the
reduce-scatter. DeepSpeed reduce-scatters each bucket of gradients as soon as the backward
pass has produced it, so no more than a bucket of whole gradients exists at once; the
bytes it holds between steps, which `memory.py` counts, are those below.
"""

from __future__ import annotations

import torch

from workbench.sharded.zero1 import Zero1Optimizer
from workbench.torch_versions import reduce_scatter_tensor


class Zero2Optimizer(Zero1Optimizer):
    """ZeRO-1 whose gradients are reduce-scattered: this rank keeps its slice of them only."""

    def reduce_gradients(self) -> None:
        grad = self.wire(self.flat.take_gradients())  # whole, for a moment
        mine = torch.empty(self.flat.slice_numel, dtype=grad.dtype, device=grad.device)
        reduce_scatter_tensor(mine, grad)           # the sum of slice `rank`, only
        del grad                                    # the whole gradient is freed
        self.shard.grad = self.unwire(mine).div_(self.world)  # the mean
