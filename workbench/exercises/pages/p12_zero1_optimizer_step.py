"""Exercise 12: write the ZeRO-1 optimizer step, checked on 2 and 3 real ranks."""

from workbench.notebooks import code, function_task, md

NAME = "12_zero1_optimizer_step.ipynb"

CELLS = [
    md(r"""
# Exercise 12: write the ZeRO-1 optimizer step

**Goals.** After this exercise you can
- shard an optimizer's state between ranks, so each keeps $1/N$ of it,
- write ZeRO-1's step: average the gradients, step your slice, all-gather the slices,
- check on 2 and 3 real ranks that the result is DDP's while the memory is not.

**Time:** about 25 minutes.
"""),
    md(r"""
## Background

Notebook 07: ZeRO-1 (Rajbhandari et al. 2020) keeps the model's parameters in one flat
buffer of `numel` elements, cut into `world` equal slices; rank `r` owns elements
`[r * size, (r + 1) * size)`, `size = numel // world` (the model has 161 parameters, so the
buffer is padded until `world` divides it). Each rank keeps optimizer state for its slice
only. The checker builds the buffer (the model's parameters are views of it, so writing it
writes the model), runs your functions on 2 ranks and then on 3, each time with another
learning rate, with SGD with momentum 0.9, and compares with one process whose batch holds
every rank's.
"""),
    code(r"""
import torch  # noqa: F401 - your answers use torch and dist
import torch.distributed as dist  # noqa: F401

from workbench.exercises import zero as ex
"""),
    md(r"""
## Task 1: the optimizer of your slice

Return `(shard, optimizer)`. `shard` is a Parameter that *is* this rank's slice of
`flat_params`: the same memory, not a copy, so that stepping it steps the model. The
optimizer is SGD with momentum 0.9 and learning rate `lr`, and it updates `shard` alone, so
its momentum covers this rank's slice and nothing else.
"""),
    function_task(r'''
def make_shard_optimizer(flat_params, rank, world, lr):
    """(shard, optimizer): this rank's slice of flat_params as a Parameter, and its SGD."""
    size = flat_params.numel() // world
    shard = torch.nn.Parameter(flat_params[rank * size:(rank + 1) * size])  # same memory
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)
'''),
    code("ex.check_shard_optimizer(make_shard_optimizer)"),
    md(r"""
## Task 2: the step

`flat_grad` is this rank's gradient of its own batch, laid out like `flat_params`. The step
averages the gradients over the ranks, lets the optimizer update this rank's slice with the
matching slice of that average, and then brings every rank's updated slice to every rank,
so that all of `flat_params` is current everywhere. `torch.distributed`'s collectives do
the communication: an all-reduce sums, and `dist.all_gather_single(output, input)` fills
`output` with every rank's `input`, in rank order (its name since torch 2.13; the older
`all_gather_into_tensor` still works, with a warning).
"""),
    function_task(r'''
def zero1_step(flat_params, flat_grad, shard, optimizer, rank, world):
    """Average the gradients, step this rank's slice, all-gather every slice."""
    dist.all_reduce(flat_grad)
    flat_grad /= world
    size = flat_params.numel() // world
    lo, hi = rank * size, (rank + 1) * size
    shard.grad = flat_grad[lo:hi]
    optimizer.step()
    dist.all_gather_single(flat_params, flat_params[lo:hi])
'''),
    md(r"""
The check starts 2 ranks with `torchrun`, then 3, a few seconds each: a step that divides
by 2 where `world` belongs is right with 2 ranks only. (With warm ranks of both sizes
waiting, `workbench.ranks(np=2, engine="torch", cpu_bind="none")` and `np=3`, it takes a
fraction of a second.)
"""),
    code("ex.check_zero1(make_shard_optimizer, zero1_step)"),
    md(r"""
## Summary

- ZeRO-1's step is DDP's with the optimizer's work split: each rank steps $1/N$ of the
  parameters, with state for them only, and an all-gather puts the slices back together.
- Forgetting the all-gather leaves each rank with only its own slice trained; giving the
  optimizer the whole buffer is DDP again, with $N$ copies of the state.
- `workbench/sharded/zero1.py` is the engine's version (`--engine zero1`); ZeRO-2
  (`zero2.py`) reduce-scatters the gradients instead of all-reducing them.
"""),
]
