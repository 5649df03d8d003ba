"""What an engine adds to the training loop: how the gradients are averaged over the ranks.

The loop (loop.py) is the same for every engine; each rank module hands it a `Synchronizer`,
and this base class is the serial engine's. Lesson 02 (notebooks/02) reads it; the engines
compared: docs/ARCHITECTURE.md, "The engines' rank modules".
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn


class Synchronizer:
    """No synchronization: the serial engine. Each engine overrides what it needs; it is
    given the optimizer the loop steps with, and holds none of its own."""

    def wait_for_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Return once every gradient of `optimizer`'s parameters is averaged over the ranks
        (nothing to do here: one rank's gradients are already the average)."""

    def stepping(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[Any]:
        """The context `optimizer.step()` runs in (Horovod: skip a second allreduce)."""
        return nullcontext()

    def backward_wait_s(self) -> Callable[[], float]:
        """Seconds the last backward pass itself was blocked on communication (DDP), else 0:
        a function called once the step's clock has settled: on a GPU the marks are CUDA
        events that complete only when the GPU gets there (timing.py)."""
        return lambda: 0.0

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over every rank (one rank: itself). Every rank must call it."""
        return values

    def accumulating(self, model: nn.Module, last: bool) -> AbstractContextManager[Any]:
        """The context of one micro-batch's forward and backward; `last`: the step's last
        (DDP: `no_sync()` on the others, so only the last backward all-reduces)."""
        return nullcontext()

    def synced_bytes(self) -> int | None:
        """Bytes of gradients this rank all-reduced in the last step, where the engine counts."""
        return None

    #: Measures what the rank holds and sends (workbench/sharded/memory.py's `Footprint`),
    #: where the engine sets one: its figures join every "step" line.
    measure: Callable[[], dict[str, int]] | None = None

    def footprint(self) -> dict[str, int]:
        """Bytes held in parameters, gradients, optimizer state, and sent since the last step."""
        return self.measure() if self.measure else {}
