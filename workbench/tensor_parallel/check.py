"""Tensor parallelism on N real ranks, checked against the unsharded layers.

    from workbench.tensor_parallel.check import compare
    compare(ranks=2)            # Megatron by hand and DTensor vs the dense MLP
    compare(ranks=4)            # ... and 2-way data × 2-way tensor parallel, vs serial

Every rank builds the same dense stack of MLP blocks (same seed), runs it whole, then runs
its own part of it (`megatron.ParallelMLP`, and DTensor's `parallelize_module`) and compares
outputs and gradients. Each returns what it measured: the largest differences, and the
bytes all-reduced by each operator, beside `traffic.py`'s model. The ranks are the labs'
workers (launch/workers.py run_workers: one process per rank, a gloo group).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from workbench.tensor_parallel import library, traffic
from workbench.tensor_parallel.megatron import MLP, Comm, ParallelMLP, dense_part


@dataclass(frozen=True)
class Sizes:
    """A tiny stack: `layers` MLP blocks of width `hidden` on `tokens` rows of input."""

    layers: int = 2
    hidden: int = 16
    tokens: int = 8
    steps: int = 3        # SGD steps of the 2-D run
    lr: float = 0.05
    seed: int = 0


class Stack(nn.Module):
    """Residual MLP blocks, x + block(x), as in a transformer's layers."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


def dense_stack(s: Sizes) -> Stack:
    torch.manual_seed(s.seed)
    return Stack([MLP(s.hidden) for _ in range(s.layers)])


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference (outputs still in the autograd graph are detached:
    a number read from them needs no gradient)."""
    return float((a.detach() - b.detach()).abs().max())


def megatron_vs_dense(rank: int, size: int, s: Sizes) -> dict[str, Any]:
    """The hand-written split: output, input gradient and every weight's gradient."""
    dense = dense_stack(s)
    x = torch.randn(s.tokens, s.hidden, generator=torch.Generator().manual_seed(1))
    x_dense, x_tp = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = dense(x_dense)
    out.square().sum().backward()
    comm = Comm(dist.group.WORLD, size)
    parts = [ParallelMLP(block, rank, comm) for block in dense.blocks]
    out_tp = Stack(parts)(x_tp)
    out_tp.square().sum().backward()
    pairs = zip(parts, dense.blocks, strict=True)
    grads = max(gap(getattr(p, name).grad, want) for p, block in pairs
                for name, want in dense_part(block, p.rows).items())
    return {"output": gap(out_tp, out), "input_grad": gap(x_tp.grad, x_dense.grad),
            "weight_grads": grads, "bytes": comm.bytes(), "log": comm.log,
            "model_bytes": traffic.step_bytes(s.layers, s.tokens, s.hidden)}


def dtensor_vs_dense(size: int, s: Sizes) -> dict[str, Any]:
    """PyTorch's split of one block, and the collectives it issued."""
    mesh = init_device_mesh("cpu", (size,))
    dense = dense_stack(s).blocks[0]
    tp = library.parallel_copy(dense, mesh)
    x = torch.randn(s.tokens, s.hidden, generator=torch.Generator().manual_seed(1))
    x_dense, x_tp = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_tp, counts = library.run_counted(tp, x_tp)
    out = dense(x_dense)
    out.sum().backward()
    want = dict(dense.named_parameters())
    got = library.full_grads(tp)
    return {"output": gap(out_tp, out), "input_grad": gap(x_tp.grad, x_dense.grad),
            "weight_grads": max(gap(got[k], want[k].grad) for k in want),
            "placements": {k: str(p.placements) for k, p in tp.named_parameters()},
            "collectives": counts}


def two_d_vs_serial(rank: int, s: Sizes) -> dict[str, Any]:
    """2-way data parallel × 2-way tensor parallel on a (dp, tp) mesh of 4 ranks.

    Ranks (dp, tp) = (i, j): j says which slices of each block it holds, i which half of
    the batch it trains on. Tensor parallelism all-reduces activations in its tp group;
    data parallelism then averages the gradients in its dp group, and every rank steps.
    """
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2 * s.tokens, s.hidden, generator=gen)
    target = torch.randn(2 * s.tokens, s.hidden, generator=gen)
    serial = dense_stack(s)
    comm = Comm(mesh["tp"].get_group(), 2)
    parts = [ParallelMLP(block, tp, comm) for block in dense_stack(s).blocks]
    model, mine = Stack(parts), slice(dp * s.tokens, (dp + 1) * s.tokens)
    for _ in range(s.steps):
        serial.zero_grad()
        (serial(x) - target).square().mean().backward()
        model.zero_grad()
        (model(x[mine]) - target[mine]).square().mean().backward()
        with torch.no_grad():
            for p in serial.parameters():
                p -= s.lr * p.grad
            for p in model.parameters():
                dist.all_reduce(p.grad, group=mesh["dp"].get_group())
                p -= s.lr * p.grad / 2
    worst = 0.0
    for part, block in zip(parts, serial.blocks, strict=True):
        want = {"w1": block.fc1.weight[part.rows], "b1": block.fc1.bias[part.rows],
                "w2": block.fc2.weight[:, part.rows], "b2": block.fc2.bias}
        worst = max(worst, *(gap(getattr(part, k).detach(), v.detach()) for k, v in want.items()))
    return {"rank": rank, "dp": dp, "tp": tp, "params": worst}


def _worker(rank: int, size: int, sizes: dict[str, Any]) -> dict[str, Any]:
    s = Sizes(**sizes)
    torch.set_num_threads(1)
    result = {"megatron": megatron_vs_dense(rank, size, s), "dtensor": dtensor_vs_dense(size, s)}
    if size == 4:
        result["2d"] = two_d_vs_serial(rank, s)
    return result


def compare(ranks: int = 2, sizes: Sizes = Sizes(), runs_dir: str = "runs",
            timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run the checks on `ranks` real processes; one result per rank."""
    from workbench.launch.workers import run_workers

    return run_workers(_worker, ranks, (asdict(sizes),), name="tensor-parallel",
                       runs_dir=runs_dir, timeout=timeout, settings=asdict(sizes))
