"""Exercise: write the ZeRO-1 optimizer step (shard, step, all-gather), checked on 2 ranks.

The student writes two functions (the solution is workbench/sharded/zero1.py's method):

- `make_shard_optimizer(flat_params, rank, world, lr)` returns `(shard, optimizer)`: a
  Parameter that *is* this rank's slice of the flat parameter buffer, and SGD with momentum
  0.9 over it alone, so the rank keeps momentum for 1/world of the model;
- `zero1_step(flat_params, flat_grad, shard, optimizer, rank, world)`: average the
  gradients over the ranks, step the slice, all-gather every rank's updated slice.

`check_zero1(make, step)` runs them on 2 real ranks (torchrun, gloo) for 16 steps of batch
8 per rank and requires (Rajbhandari et al. 2020, stage P_os): the ranks end with the
parameters of one process with batch 16 (what DDP gives), and each rank's optimizer state
holds 1/2 of the model's momentum. A wrong answer is named:

| what the ranks end with | the mistake |
| --- | --- |
| other ranks' slices never changed | the all-gather is missing |
| right parameters, momentum for the whole model | every rank steps everything |
| ranks agree, steps twice too large | gradients summed, not averaged |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from workbench.exercises.data_parallel import make_data, make_model
from workbench.exercises.feedback import (
    Feedback,
    call_student,
    correct,
    guarded,
    is_blank,
    not_written,
    not_yet,
    on_real_ranks,
    refuse_before_ranks,
)

BATCH, LR, MOMENTUM, EPOCHS, SEED, NP = 8, 0.05, 0.9, 2, 0, 2
ATOL = 1e-5


def flatten(model: torch.nn.Module, world: int) -> torch.Tensor:
    """The model's parameters as views of one zero-padded flat buffer of `world` slices."""
    from workbench.sharded.flat import FlatParameters

    return FlatParameters(list(model.parameters()), 0, world).data


def batches(rank: int, world: int):
    """This rank's slice of each global batch of world × BATCH samples, EPOCHS times."""
    x, y = make_data()
    for _epoch in range(EPOCHS):
        for start in range(0, len(x) - world * BATCH + 1, world * BATCH):
            lo = start + rank * BATCH
            yield x[lo:lo + BATCH], y[lo:lo + BATCH]


def reference(world: int) -> torch.Tensor:
    """One process with batch world × BATCH, SGD with momentum: the flat parameters."""
    model = make_model(SEED)
    flat = flatten(model, world)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for xb, yb in _global_batches(world):
        optimizer.zero_grad()
        F.mse_loss(model(xb), yb).backward()
        optimizer.step()
    return flat.clone()


def _global_batches(world: int):
    x, y = make_data()
    for _epoch in range(EPOCHS):
        for start in range(0, len(x) - world * BATCH + 1, world * BATCH):
            yield x[start:start + world * BATCH], y[start:start + world * BATCH]


def run_on_rank(make: Callable[..., Any], step: Callable[..., Any]) -> dict[str, Any]:
    """What each rank runs: the student's functions in a ZeRO-1 training loop."""
    import torch.distributed as dist

    from workbench.sharded.memory import storage_bytes
    from workbench.torch_versions import give_new_names

    give_new_names()            # all_gather_single, which the task names, on torch < 2.13
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model(SEED)
    flat = flatten(model, world)
    initial = flat.clone()
    shard, optimizer = make(flat, rank, world, LR)
    for xb, yb in batches(rank, world):
        model.zero_grad()
        F.mse_loss(model(xb), yb).backward()
        grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        grad = torch.cat([grad, grad.new_zeros(flat.numel() - grad.numel())])
        step(flat, grad, shard, optimizer, rank, world)
    state = [v for s in optimizer.state.values() for v in s.values()
             if isinstance(v, torch.Tensor)]
    result = {"params": flat.clone(), "initial": initial, "state_bytes": storage_bytes(state)}
    dist.destroy_process_group()
    return result


@guarded
def check_zero1(make: Callable[..., Any], step: Callable[..., Any], *,
                runs_dir: str = "runs", timeout_s: float = 180.0) -> Feedback:
    """Run the student's `make_shard_optimizer` and `zero1_step` on 2 real ranks; judge."""
    flat = torch.zeros(4)
    refused = (refuse_before_ranks(make, "make_shard_optimizer(flat_params, rank, world, lr)",
                                   flat, 0, NP, LR)
               or refuse_before_ranks(step, "zero1_step(flat_params, flat_grad, shard, "
                                      "optimizer, rank, world)", flat, flat, flat, None, 0, NP))
    if refused:
        return refused
    results = on_real_ranks(run_on_rank, make, step, np=NP, name="check-zero1",
                            runs_dir=runs_dir, timeout_s=timeout_s, hang_hint=(
                                "Every rank must call the same collectives in the same "
                                "order: no all_reduce or all-gather inside `if rank == 0`."))
    return results if isinstance(results, Feedback) else judge(results)


@guarded
def check_shard_optimizer(make: Callable[..., Any]) -> Feedback:
    """Check `make_shard_optimizer` in this process (no ranks): for every rank of 3, its
    shard must be that rank's slice of the buffer, in the same memory, and its optimizer
    must step that shard alone, with momentum."""
    if is_blank(make):
        return not_written()
    world, numel = 3, 12
    for rank in range(world):
        flat = torch.arange(numel, dtype=torch.float32)
        out, crash = call_student(make, flat, rank, world, LR)
        if crash:
            return crash
        if not (isinstance(out, tuple) and len(out) == 2):
            return not_yet("return a pair: (shard, optimizer).",
                           "End with `return shard, torch.optim.SGD([shard], ...)`.")
        shard, optimizer = out
        lo, hi = rank * numel // world, (rank + 1) * numel // world
        if not isinstance(shard, torch.Tensor) or shard.numel() != hi - lo:
            return not_yet(f"rank {rank}'s shard should hold {hi - lo} of the {numel} "
                           "elements.", "size = numel // world; the slice is "
                           "flat_params[rank * size:(rank + 1) * size].")
        if shard.data_ptr() != flat[lo:].data_ptr():
            return not_yet(f"rank {rank}'s shard is not elements [{lo}, {hi}) of the buffer "
                           "itself (a copy, or another slice).",
                           "torch.nn.Parameter(flat_params[lo:hi]) shares the buffer's "
                           "memory; .clone() would not.")
        stepped = [p for group in optimizer.param_groups for p in group["params"]]
        if len(stepped) != 1 or stepped[0] is not shard:
            return not_yet("the optimizer must step the shard and nothing else.",
                           "torch.optim.SGD([shard], lr=lr, momentum=0.9).")
        if optimizer.param_groups[0].get("momentum") != MOMENTUM:
            return not_yet(f"use SGD with momentum {MOMENTUM}, the state ZeRO-1 shards.",
                           "torch.optim.SGD([shard], lr=lr, momentum=0.9).")
    return correct("each rank's shard is its slice of the buffer, and its optimizer steps "
                   "that slice alone.")


def judge(results: list[dict[str, Any]]) -> Feedback:
    """The verdict from each rank's final flat parameters and optimizer state bytes."""
    world = len(results)
    want = reference(world)
    got = [r["params"] for r in results]
    numel = want.numel()
    size = numel // world
    if not all(torch.allclose(got[0], g, atol=ATOL) for g in got[1:]):
        others_unchanged = all(
            torch.equal(r["params"][s * size:(s + 1) * size],
                        r["initial"][s * size:(s + 1) * size])
            for rank, r in enumerate(results) for s in range(world) if s != rank)
        if others_unchanged:
            return not_yet("each rank updated its own slice, but the other slices never "
                           "reached it: the all-gather is missing.",
                           "End the step with dist.all_gather_single(flat_params, "
                           "flat_params[lo:hi]): every rank sends its slice to all.")
        return not_yet("the ranks end with different parameters.",
                       "Average the gradients over the ranks (all_reduce, then divide by "
                       "world) and all-gather the updated slices after the step.")
    if not torch.allclose(got[0], want, atol=ATOL):
        return not_yet("the ranks agree, but not with one process with batch "
                       f"{world * BATCH} (what DDP would give).",
                       "Divide the all-reduced gradients by world (an all_reduce sums), and "
                       "give the optimizer exactly this rank's slice, "
                       "flat_params[rank * size:(rank + 1) * size], size = numel // world.")
    whole, shard = 4 * numel, 4 * numel / world            # float32 momentum, in bytes
    held = results[0]["state_bytes"]
    if held >= 0.99 * whole:
        return not_yet(f"the parameters are right, but each rank keeps momentum for the "
                       f"whole model ({held} bytes): every rank steps everything.",
                       "Give the optimizer only this rank's slice (a Parameter that is "
                       "flat_params[lo:hi]), and set its .grad to the same slice of the "
                       "gradients.")
    if abs(held - shard) > 0.05 * shard:
        return not_yet(f"each rank keeps {held} bytes of optimizer state, not the "
                       f"{shard:.0f} of its 1/{world} slice.",
                       "One slice per rank, of numel // world elements each.")
    return correct(f"{world} ranks ended with DDP's parameters, each keeping momentum for "
                   f"its slice only ({held} of {whole} bytes).")
