"""Megatron-LM's tensor-parallel MLP, written by hand (Shoeybi et al. 2019, arXiv:1909.08053).

A transformer's MLP block is Z = GeLU(X·A)·B, A of shape h × 4h, B of 4h × h. Megatron
splits it over the n ranks of a tensor-parallel group so that one block needs only two
all-reduces of the activations (Section 3 of the paper):

- **A by columns**: A = [A_1, ..., A_n]; rank i computes Y_i = GeLU(X·A_i) on its own,
  because GeLU acts element by element (splitting A by rows would need a sum *before*
  the GeLU);
- **B by rows**: B = [B_1; ...; B_n]; rank i computes Y_i·B_i, and Z = Σ_i Y_i·B_i is one
  all-reduce.

The two conjugate operators say where the all-reduces go:

- `f` before the column-parallel linear: identity forward (every rank holds the same X),
  all-reduce backward (dL/dX is the sum of every rank's part);
- `g` after the row-parallel linear: all-reduce forward (the sum above), identity
  backward (every rank needs the same dL/dZ, and has it).

So each block all-reduces a (tokens × h) activation twice per step: g forward, f backward.
`Comm` counts those bytes, so a run can check them against `traffic.py`'s model.

In this file the linears hold their own slices as plain tensors; `library.py` lets DTensor
do the same bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class Comm:
    """The tensor-parallel group, and a log of the bytes all-reduced in it, per operator."""

    group: Any = None       # a torch.distributed group (None: the whole job)
    size: int = 1
    log: list[tuple[str, int]] = field(default_factory=list)  # ("f backward", bytes), ...

    def all_reduce(self, tensor: torch.Tensor, what: str) -> torch.Tensor:
        """Sum `tensor` over the group (in place), noting its size in bytes."""
        self.log.append((what, tensor.numel() * tensor.element_size()))
        if self.size > 1:
            dist.all_reduce(tensor, group=self.group)
        return tensor

    def bytes(self) -> int:
        return sum(n for _, n in self.log)


class CopyToTensorParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.comm.all_reduce(grad.clone(), "f backward"), None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        return comm.all_reduce(x.clone(), "g forward")

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def f(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    return CopyToTensorParallel.apply(x, comm)


def g(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    return ReduceFromTensorParallel.apply(x, comm)


class MLP(nn.Module):
    """The unsharded block: Linear(h, 4h) -> GeLU -> Linear(4h, h)."""

    def __init__(self, hidden: int, expansion: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, expansion * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(expansion * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ParallelMLP(nn.Module):
    """Rank `rank`'s part of an `MLP`: columns of fc1, rows of fc2 (`nn.Linear` stores its
    weight as out × in, so fc1's columns of A are rows of its weight).

    fc2's bias is added once, after g: every rank holds all of it, and its gradient is
    the same on every rank.
    """

    def __init__(self, dense: MLP, rank: int, comm: Comm) -> None:
        super().__init__()
        self.comm = comm
        part = dense.fc1.out_features // comm.size
        rows = slice(rank * part, (rank + 1) * part)
        self.w1 = nn.Parameter(dense.fc1.weight.detach()[rows].clone())   # part × h
        self.b1 = nn.Parameter(dense.fc1.bias.detach()[rows].clone())
        self.w2 = nn.Parameter(dense.fc2.weight.detach()[:, rows].clone())  # h × part
        self.b2 = nn.Parameter(dense.fc2.bias.detach().clone())
        self.rows = rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = f(x, self.comm)                                                  # copy in
        y = nn.functional.gelu(nn.functional.linear(x, self.w1, self.b1))    # Y_i
        z = g(nn.functional.linear(y, self.w2), self.comm)                   # Σ_i Y_i·B_i
        return z + self.b2


def dense_part(dense: MLP, rows: slice) -> dict[str, torch.Tensor]:
    """The slices of the dense block's gradients that one rank's `ParallelMLP` should hold."""
    return {"w1": dense.fc1.weight.grad[rows], "b1": dense.fc1.bias.grad[rows],
            "w2": dense.fc2.weight.grad[:, rows], "b2": dense.fc2.bias.grad}
