"""The model's parameters in one flat buffer, cut into one equal slice per rank.

Sharding one flat vector is simpler than sharding each tensor: rank r owns elements
[r·S, (r+1)·S) of the buffer, S = ⌈Ψ/N⌉, whatever the layers look like. The buffer is
padded with zeros to N·S elements (at most N−1 more), so every slice has the same size, as
`all_gather` and `reduce_scatter` need. The model's parameters become views into the buffer,
so writing the buffer writes the model. DeepSpeed's ZeRO flattens the same way.
"""

from __future__ import annotations

import torch
from torch import nn


class FlatParameters:
    """`params` re-pointed into one flat, zero-padded buffer `data` of `world` slices."""

    def __init__(self, params: list[nn.Parameter], rank: int, world: int) -> None:
        self.params = params
        numel = sum(p.numel() for p in params)
        self.slice_numel = -(-numel // world)           # ⌈Ψ/N⌉ elements per rank
        self.data = torch.zeros(self.slice_numel * world, dtype=params[0].dtype,
                                device=params[0].device)
        offset = 0
        for p in params:
            view = self.data[offset:offset + p.numel()]
            view.copy_(p.detach().reshape(-1))
            p.data = view.view_as(p)                    # the parameter now lives in the buffer
            offset += p.numel()
        self.lo = rank * self.slice_numel               # this rank's slice: [lo, hi)
        self.hi = self.lo + self.slice_numel

    def mine(self) -> torch.Tensor:
        """This rank's slice of the parameters (a view: updating it updates the model)."""
        return self.data[self.lo:self.hi]

    def take_gradients(self) -> torch.Tensor:
        """Every parameter's gradient in one flat buffer laid out like `data` (padding: 0),
        and the parameters' own gradients freed, so that they are not held twice."""
        flat = torch.zeros_like(self.data)
        offset = 0
        for p in self.params:
            if p.grad is not None:
                flat[offset:offset + p.numel()] = p.grad.reshape(-1)
                p.grad = None
            offset += p.numel()
        return flat
