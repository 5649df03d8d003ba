"""What a rank did while the student's function ran: the samples each step computed on, and
the collective calls that crossed ranks. Exercise 11's checker reads these to tell real
data-parallel work from a function that merely ends with the right parameters.

* **Samples.** A saved-tensors hook (`torch.autograd.graph.saved_tensors_hooks`) looks at
  every tensor autograd unpacks in a backward pass, the inputs each layer saved in its
  forward pass, and finds their rows in the data set; an optimizer step pre-hook closes each
  step. So `steps[k]` is the set of sample indices whose gradients step k's backward passes
  computed on this rank, however the student sliced, strided or cast them, and however the
  layers were called (`model(x)`, `layer.forward(x)`): a forward pass whose output never
  reaches a backward pass (a decoy on the rank's own shard) shows nothing.
* **Collectives.** Horovod's PyTorch operations all reach its C extension through the one
  module attribute `horovod.torch.mpi_ops.mpi_lib`, so a counting proxy there sees every
  allreduce, broadcast, allgather, alltoall and reduce-scatter (also those of
  `hvd.DistributedOptimizer`). `torch.distributed`'s Python collectives are wrapped the same
  way; DDP's reducer calls the process group from C++, so a `DistributedDataParallel` model
  counts as its constructor's broadcast and one gradient allreduce per backward pass.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

#: torch.distributed's collectives, wrapped to count calls (point-to-point sends count too).
DIST_CALLS = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
              "reduce_scatter", "reduce_scatter_tensor", "reduce", "all_to_all",
              "all_to_all_single", "send", "recv", "isend", "irecv", "all_reduce_coalesced")
#: Words in the names of Horovod's C functions that move tensors between ranks.
HOROVOD_WORDS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")


@dataclass
class Watch:
    """What one rank did: per-step sample sets, learning rates, collective calls and bytes."""

    data: torch.Tensor
    steps: list[set[int]] = field(default_factory=list)
    lrs: set[float] = field(default_factory=set)
    collectives: int = 0
    collective_bytes: int = 0
    _current: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._data = self.data.detach().to(torch.float32).reshape(len(self.data), -1)
        self._width = self.data.shape[1] if self.data.dim() == 2 else -1
        self._near = 1e-3 * float(self._data.abs().mean())

    def unpacked(self, t: Any) -> Any:
        """A tensor a backward pass uses: record which data rows it holds (to within a
        thousandth of the data's scale: a row nudged to hide it is still found); pass it on."""
        if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == self._width:
            rows = t.detach().reshape(-1, self._width)[:4096].to(torch.float32).cpu()
            distance, index = torch.cdist(rows, self._data,
                                          compute_mode="donot_use_mm_for_euclid_dist").min(1)
            self._current.update(index[distance <= self._near].tolist())
        return t

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer step: close this step's sample set, note the learning rates."""
        self.lrs.update(float(group["lr"]) for group in optimizer.param_groups)
        self.steps.append(self._current)
        self._current = set()

    def count(self, tensors: Any) -> None:
        """One collective call moving `tensors` (a tensor or a list of them)."""
        self.collectives += 1
        items = tensors if isinstance(tensors, list | tuple) else [tensors]
        self.collective_bytes += sum(t.numel() * t.element_size() for t in items
                                     if isinstance(t, torch.Tensor))

    def report(self) -> dict[str, Any]:
        """Plain data for the rank's result: sorted sample lists, so it pickles small."""
        return {"steps": [sorted(s) for s in self.steps], "lrs": sorted(self.lrs),
                "collectives": self.collectives, "collective_bytes": self.collective_bytes}


@contextmanager
def watching(data: torch.Tensor) -> Iterator[Watch]:
    """Watch the student's function while the `with` block runs, then undo every patch."""
    w = Watch(data)
    hooks = [register_optimizer_step_pre_hook(lambda opt, _a, _k: w.step(opt))]
    undo = _patch_horovod(w) + _patch_dist(w) + _patch_ddp(w)
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, w.unpacked):
            yield w
    finally:
        for hook in hooks:
            hook.remove()
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


class _CountingLib:
    """Horovod's C extension, with every tensor-moving call counted."""

    def __init__(self, lib: Any, w: Watch) -> None:
        self._lib, self._w = lib, w

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if not callable(real) or not any(word in name for word in HOROVOD_WORDS):
            return real

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._w.count(args[0] if args else None)
            return real(*args, **kwargs)
        return counted


def _patch_horovod(w: Watch) -> list[tuple[Any, str, Any]]:
    if "horovod" not in sys.modules and importlib.util.find_spec("horovod") is None:
        return []
    try:
        ops = importlib.import_module("horovod.torch.mpi_ops")
    except Exception:  # noqa: BLE001  Horovod without its torch extension: nothing to watch
        return []
    original = ops.mpi_lib
    ops.mpi_lib = _CountingLib(original, w)
    return [(ops, "mpi_lib", original)]


def _patch_dist(w: Watch) -> list[tuple[Any, str, Any]]:
    import torch.distributed as dist

    undo = []
    for name in DIST_CALLS:
        real = getattr(dist, name, None)
        if real is None:
            continue

        def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            w.count(args[0] if args else kwargs.get("tensor"))
            return _real(*args, **kwargs)
        setattr(dist, name, counted)
        undo.append((dist, name, real))
    return undo


def _patch_ddp(w: Watch) -> list[tuple[Any, str, Any]]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    real_init, real_forward = DDP.__init__, DDP.forward

    def init(self: Any, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        real_init(self, module, *args, **kwargs)
        w.count(list(module.state_dict().values()))      # the constructor's broadcast

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled() and getattr(self, "require_backward_grad_sync", True):
            w.count([p for p in self.module.parameters() if p.requires_grad])  # its allreduce
        return real_forward(self, *args, **kwargs)

    DDP.__init__, DDP.forward = init, forward
    return [(DDP, "__init__", real_init), (DDP, "forward", real_forward)]
