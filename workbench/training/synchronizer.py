"""What an engine adds to the training loop (loop.py): how the gradients are averaged over
the ranks. This base class is the serial engine's (docs/ARCHITECTURE.md compares them)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

#: The context of a step that needs none (reusable: nothing is made each step).
NOTHING = nullcontext()


class Synchronizer:
    """Each engine overrides what it needs; it is given the loop's optimizer and holds none."""

    bytes: int | None = None  # set by an engine that counts them: see `synced_bytes()`
    #: Bytes held and sent since the last step, where measured (sharded/memory.py's `Footprint`).
    measure: Callable[[], dict[str, int]] = dict

    def wait_for_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Return once every gradient of `optimizer`'s parameters is averaged over the ranks
        (here at once: one rank's gradients are already the average)."""

    def stepping(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[Any]:
        """The context `optimizer.step()` runs in (Horovod: skip a second allreduce)."""
        return NOTHING

    def backward_wait_s(self) -> Callable[[], float]:
        """Seconds the last backward pass itself was blocked on communication (DDP), else 0,
        as a function called once the step's clock has settled (timing.py)."""
        return lambda: 0.0

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over every rank (one rank: itself). Every rank must call it."""
        return values

    def accumulating(self, model: nn.Module, last: bool) -> AbstractContextManager[Any]:
        """The context of one micro-batch's forward and backward; `last`: the step's last
        (DDP: `no_sync()` on the others, so only the last backward all-reduces)."""
        return NOTHING

    def synced_bytes(self) -> int | None:
        """Bytes of gradients this rank all-reduced in the last step, where the engine counts."""
        return self.bytes
