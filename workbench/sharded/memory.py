"""The bytes a rank holds in parameters, gradients and optimizer state, counted from its
tensors (not from the process's resident memory, which also holds PyTorch, the data and
the allocator's free blocks).

Each tensor is counted by the memory it lives in (its *storage*), once: ZeRO's parameters
are views of one flat buffer, and FSDP2's are DTensors whose local shard is what this rank
holds. DDP also keeps its own copy of the gradients in its communication buckets (unless
`gradient_as_bucket_view=True`); only the gradients the model holds are counted here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (a DTensor: its local shard)."""
    # DTensor is looked up only where FSDP2 has loaded it: importing it takes seconds.
    dtensor = sys.modules.get("torch.distributed.tensor")
    seen: dict[int, int] = {}
    for t in tensors:
        if dtensor is not None and isinstance(t, dtensor.DTensor):
            t = t.to_local()
        storage = t.untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def held_bytes(model: nn.Module, optimizer: Any) -> dict[str, int]:
    """{"param_bytes", "grad_bytes", "optimizer_bytes"} this rank holds now.

    The parameters are the model's and the optimizer's (ZeRO steps a slice of the model's
    buffer: the same memory, counted once); the gradients are theirs; the optimizer state
    is every tensor in `optimizer.state` (momentum buffers, Adam's moments and step counts).
    """
    params = list(model.parameters())
    params += [p for group in optimizer.param_groups for p in group["params"]]
    state = [v for s in optimizer.state.values() for v in s.values()
             if isinstance(v, torch.Tensor)]
    return {"param_bytes": storage_bytes(params),
            "grad_bytes": storage_bytes(p.grad for p in params if p.grad is not None),
            "optimizer_bytes": storage_bytes(state)}


class Footprint:
    """What a rank reports with each step: the bytes it holds and the bytes it sent.

    `sent` returns the bytes sent since it was last called (`traffic.Traffic.take`). The
    bytes held are counted again at most every `every_s` seconds, and the steps between
    report the last count: walking every tensor's storage costs tens of microseconds, a
    visible share of a millisecond's step, and what a rank holds changes only in its first
    step (the optimizer creates its state) in every engine here.
    """

    def __init__(self, model: nn.Module, optimizer: Any, sent: Callable[[], int],
                 every_s: float = 0.5) -> None:
        self.model, self.optimizer, self.sent, self.every_s = model, optimizer, sent, every_s
        self.held: dict[str, int] = {}
        self.counted_at = -every_s

    def __call__(self) -> dict[str, int]:
        if not self.held or time.monotonic() - self.counted_at >= self.every_s:
            self.held, self.counted_at = held_bytes(self.model, self.optimizer), time.monotonic()
        return {**self.held, "sent_bytes": self.sent()}
