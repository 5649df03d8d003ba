"""Gradient buckets, as DDP builds them (Li et al., "PyTorch Distributed: Experiences on
Accelerating Data Parallel Training", VLDB 2020, Section 3.2.3).

One all-reduce costs a latency term, 2(p−1)·α for a ring, whatever its size, so all-reducing
each small tensor alone wastes it; one all-reduce of everything must wait for the whole
backward pass. A bucket is the middle: parameters are packed in the *reverse* of their
order in the model, which is roughly the order `backward()` produces their gradients
(last layer first), into flat buffers of at least `bucket_mb` MiB (DDP's `bucket_cap_mb`,
25 by default). `bucket_mb=0` gives every tensor its own bucket.
"""

from __future__ import annotations

import torch

MIB = 2**20


class Bucket:
    """A few parameters whose gradients travel together in one flat buffer."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params
        self.buffer = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype)
        self.ready = 0  # how many of `params` have their gradient for this step

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def pack(self) -> torch.Tensor:
        """Copy every gradient into the buffer, end to end; return the buffer."""
        offset = 0
        for p in self.params:
            n = p.numel()
            self.buffer[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n
        return self.buffer

    def unpack(self, divide_by: int) -> None:
        """Copy the summed buffer back into the gradients, divided: the mean over ranks."""
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad.copy_(self.buffer[offset:offset + n].view_as(p.grad)).div_(divide_by)
            offset += n
        self.ready = 0


def make_buckets(params: list[torch.nn.Parameter], bucket_mb: float) -> list[Bucket]:
    """Pack `params` (in model order) into buckets, last parameter first, each closed once it
    holds at least `bucket_mb` MiB."""
    cap, buckets, current, size = bucket_mb * MIB, [], [], 0
    for p in reversed([p for p in params if p.requires_grad]):
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= cap:
            buckets.append(Bucket(current))
            current, size = [], 0
    if current:
        buckets.append(Bucket(current))
    return buckets
