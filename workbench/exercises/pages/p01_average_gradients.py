"""Exercise 1: average the gradients with an allreduce."""

from workbench.notebooks import code, function_task, md

NAME = "01_average_gradients.ipynb"

CELLS = [
    md(r"""
# Exercise 1: average the gradients with an allreduce

**Goals.** After this exercise you can
- explain why data-parallel workers average their gradients before every update,
- build the average from an allreduce that *sums*,
- recognise the classic bug: summing instead of averaging.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

In synchronous data parallelism every rank $k$ computes a gradient $g_k$ on its own
mini-batch. Before the optimizer step all ranks replace it with the average

$$\bar g = \frac{1}{p} \sum_{k=0}^{p-1} g_k ,$$

so every replica takes the same step and the replicas stay identical. An **allreduce** gives
every rank the *sum* $\sum_k g_k$; dividing by the world size $p$ makes it the average.

Here the ranks are simulated in one process: `rank_grads[k]` is the gradient of rank $k$,
and `ex.allreduce_sum(rank_grads)` returns what every rank holds after an allreduce.
"""),
    code(r"""
from workbench.exercises import allreduce as ex

rank_grads = ex.example_gradients(world_size=3)
for rank, g in enumerate(rank_grads):
    print(f"rank {rank} computed {g}")
print("after allreduce_sum every rank holds", ex.allreduce_sum(rank_grads)[0])
"""),
    md(r"""
## Your task

Write `average_gradients(rank_grads)`. It returns a list with one tensor per rank: the
gradient that rank uses for its update. Call `ex.allreduce_sum` once, and do not assume a
fixed number of ranks (the checker tries 2, 3 and 4).
"""),
    function_task(r'''
def average_gradients(rank_grads):
    """Return the averaged gradient held by each rank: a list with one tensor per rank."""
    world_size = len(rank_grads)
    summed = ex.allreduce_sum(rank_grads)  # every rank now holds g_0 + ... + g_{p-1}
    return [total / world_size for total in summed]
''', todo="Your code here: combine the ranks with ex.allreduce_sum, then divide."),
    code("ex.check_average_gradients(average_gradients)"),
    md(r"""
## Summary

- Every rank must apply the **same** update, or the replicas drift apart: that is why
  synchronous data parallelism ends each step with an allreduce.
- An allreduce sums; averaging needs one division by the world size. Forgetting it makes
  each gradient $p$ times too large: with plain SGD, as if the learning rate had been
  multiplied by $p$ (Adam, which divides by the gradient's running size, barely notices).
- In real code: Horovod's `hvd.allreduce(g, op=hvd.Average)` (what `hvd.DistributedOptimizer`
  does for every gradient), or `torch.distributed.all_reduce(g)` followed by
  `g /= world_size` (what DDP does for you).
"""),
]
