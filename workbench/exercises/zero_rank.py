"""What each rank runs in exercise 12's check: the student's ZeRO-1 functions in a training
loop, watched by the checker's instruments (workbench/exercises/zero.py judges what they saw).

- the network (network.py): every collective the rank starts, in order with the optimizer's
  steps, and ranks that start different ones refused at once;
- every optimizer that steps, and what it stepped: whether each of its parameters is a
  slice of the flat buffer and has, as its gradient, that slice of the average of every
  rank's gradient, which the checker computes itself, from the global batch, on a twin of
  the model: so a rank that steps on zeros while another does its work is seen;
- the optimizer state of every optimizer that stepped, and whether the package's own ZeRO
  ran (own_work.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from workbench.exercises.data_parallel import make_data, make_model

BATCH, MOMENTUM, EPOCHS, SEED = 8, 0.9, 2, 0
#: The optimizer's settings the exercise fixes: SGD with momentum 0.9 and the lr given,
#: nothing else (no Nesterov, no dampening, no weight decay).
SETTINGS = ("lr", "momentum", "nesterov", "dampening", "weight_decay")
#: The package's ZeRO (and PyTorch's), and the checker's result: not to be called by it.
PACKAGE_ANSWERS = ("workbench.sharded.zero1", "workbench.sharded.zero2",
                   "torch.distributed.optim.zero_redundancy_optimizer",
                   "workbench.exercises.zero:reference")


def flatten(model: torch.nn.Module, world: int) -> torch.Tensor:
    """The model's parameters as views of one zero-padded flat buffer of `world` slices."""
    from workbench.sharded.flat import FlatParameters

    return FlatParameters(list(model.parameters()), 0, world).data


def global_batches(world: int):
    x, y = make_data()
    for _epoch in range(EPOCHS):
        for start in range(0, len(x) - world * BATCH + 1, world * BATCH):
            yield x[start:start + world * BATCH], y[start:start + world * BATCH]


def run_on_rank(make: Callable[..., Any], step: Callable[..., Any], lr: float,
                ) -> dict[str, Any]:
    """What each rank runs: the student's functions in a ZeRO-1 training loop, watched."""
    import torch.distributed as dist

    from workbench.exercises.network import installed
    from workbench.exercises.own_work import Watch
    from workbench.torch_versions import give_new_names

    give_new_names()            # all_gather_single, which the task names, on torch < 2.13
    dist.init_process_group("gloo")
    watch = Watch(PACKAGE_ANSWERS)
    try:
        with installed() as net:
            result = _train(dist.get_rank(), dist.get_world_size(), watch.wrap(make),
                            watch.wrap(step), lr, net)
        return {**result, "used": watch.used}
    finally:
        dist.destroy_process_group()


class _Optimizers:
    """Every optimizer that steps on this rank, and what it stepped with: for each
    parameter, whether it lies in the flat buffer and whether its gradient is the matching
    slice of `want` (the average of every rank's gradient, which the checker computes
    itself from the global batch)."""

    def __init__(self, flat: torch.Tensor, net: Any) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.flat, self.net = flat, net
        self.want: torch.Tensor | None = None
        self.seen: dict[int, torch.optim.Optimizer] = {}
        self.wrong: list[str] = []
        self._hooks = [register_optimizer_step_pre_hook(lambda opt, *_: self._before(opt)),
                       register_optimizer_step_post_hook(lambda *_: net.note("step"))]

    def _before(self, optimizer: torch.optim.Optimizer) -> None:
        self.seen[id(optimizer)] = optimizer
        size = self.flat.element_size()
        for group in optimizer.param_groups:
            for p in group["params"]:
                offset = (p.data_ptr() - self.flat.data_ptr()) // size
                if not 0 <= offset <= self.flat.numel() - p.numel():
                    self.wrong.append("a parameter outside the flat buffer (a copy)")
                elif p.grad is None or self.want is None or not torch.allclose(
                        p.grad.reshape(-1), self.want[offset:offset + p.numel()], atol=1e-6):
                    self.wrong.append(f"elements [{offset}, {offset + p.numel()}) with a "
                                      "gradient that is not their slice of the average")

    def state_bytes(self) -> int:
        from workbench.sharded.memory import storage_bytes

        return storage_bytes([v for opt in self.seen.values() for s in opt.state.values()
                              for v in s.values() if isinstance(v, torch.Tensor)])

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


def _flat_gradient(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                   numel: int) -> torch.Tensor:
    """The model's gradient of F.mse_loss on (x, y), flat and zero-padded to `numel`."""
    model.zero_grad()
    F.mse_loss(model(x), y).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    return torch.cat([grad, grad.new_zeros(numel - grad.numel())])


def _train(rank: int, world: int, make: Callable[..., Any], step: Callable[..., Any],
           lr: float, net: Any) -> dict[str, Any]:
    model, twin = make_model(SEED), make_model(SEED)   # the twin computes the average
    flat = flatten(model, world)
    initial = flat.clone()
    optimizers = _Optimizers(flat, net)
    calls: list[list[str]] = []
    try:
        shard, optimizer = make(flat, rank, world, lr)
        groups = [{k: g.get(k) for k in SETTINGS} for g in optimizer.param_groups]
        for xg, yg in global_batches(world):
            mine = slice(rank * BATCH, (rank + 1) * BATCH)
            grad = _flat_gradient(model, xg[mine], yg[mine], flat.numel())
            with torch.no_grad():
                for p, q in zip(twin.parameters(), model.parameters(), strict=True):
                    p.copy_(q)
            optimizers.want = _flat_gradient(twin, xg, yg, flat.numel())
            before = len(net.events)
            step(flat, grad, shard, optimizer, rank, world)
            calls.append([e.get("what", e["kind"]) for e in net.events[before:]])
    except Exception as exc:  # the student's mistake, reported as feedback
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        optimizers.remove()
    return {"params": flat.clone(), "initial": initial, "state_bytes": optimizers.state_bytes(),
            "optimizers": len(optimizers.seen), "groups": groups, "first_call": calls[0],
            "quiet_steps": sum(not any(c != "step" for c in call) for call in calls),
            "wrong_steps": sorted(set(optimizers.wrong))[:3]}
