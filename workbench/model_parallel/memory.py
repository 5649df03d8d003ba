"""Measure the memory a training process holds: parameters, gradients, optimizer state, activations.

The four parts behave differently when work is split over P workers (the accounting of
Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
SC 2020):

* parameters, gradients and optimizer state (Adam keeps two extra tensors per parameter)
  are replicated by data parallelism and divided by model parallelism;
* activations — what autograd saves in the forward pass for the backward pass — grow with
  the number of samples in flight: data parallelism divides the batch, a GPipe pipeline keeps
  the activations of all its micro-batches until their backward.

Activations are *measured*, not estimated: :class:`ActivationMeter` hooks into autograd
(``torch.autograd.graph.saved_tensors_hooks``) and adds up the bytes of every tensor it saves,
leaving out the parameters themselves (a Linear layer saves its weight, which is not extra).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Total bytes of the given tensors (None entries count 0)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's state (momentum buffers; Adam's two moment estimates)."""
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values()
                        if torch.is_tensor(v) and v.dim() > 0)


class ActivationMeter:
    """Counts the bytes autograd keeps for backward; tracks the current and the peak total."""

    def __init__(self, parameters: Iterable[torch.Tensor]):
        self._param_storages = {p.untyped_storage().data_ptr() for p in parameters}
        self.current = 0
        self.peak = 0

    @contextmanager
    def recording(self) -> Iterator[list[int]]:
        """Count what the enclosed forward pass saves; yields a one-item list of its bytes.

        Keep that number and pass it to :meth:`release` once the backward pass has used it.
        """
        saved = [0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.untyped_storage().data_ptr() not in self._param_storages:
                saved[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield saved
        self.current += saved[0]
        self.peak = max(self.peak, self.current)

    def release(self, n_bytes: int) -> None:
        """The backward pass of a micro-batch is done: its saved tensors are freed."""
        self.current -= n_bytes


def memory_breakdown(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     activation_bytes: int) -> dict[str, int]:
    """Bytes of parameters, gradients, optimizer state and activations, and their total."""
    params = list(model.parameters())
    parts = {"params_bytes": tensor_bytes(params),
             "grads_bytes": tensor_bytes(p.grad for p in params),
             "optimizer_bytes": optimizer_state_bytes(optimizer),
             "activations_bytes": activation_bytes}
    return {**parts, "total_bytes": sum(parts.values())}
