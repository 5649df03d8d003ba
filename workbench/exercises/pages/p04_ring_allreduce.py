"""Exercise 4: finish a ring allreduce."""

from workbench.notebooks import code, function_task, md

NAME = "04_ring_allreduce.ipynb"

CELLS = [
    md(r"""
# Exercise 4: finish a ring allreduce

**Goals.** After this exercise you can
- describe the two phases of a ring allreduce, reduce-scatter and allgather,
- write one reduce-scatter step on simulated ranks,
- explain why the ring is bandwidth-optimal: it meets the lower bound of
  $2\frac{p-1}{p}n$ bytes on the busiest rank, with every link equally loaded.

**Time:** about 25 minutes.
"""),
    md(r"""
## Background

The ring allreduce (Patarasuk & Yuan 2009, used by Horovod and NCCL) cuts every rank's
vector into $p$ chunks. Rank $r$ only sends to rank $(r+1) \bmod p$.

1. **Reduce-scatter**, $p-1$ steps. At step $s$ rank $r$ sends its chunk $(r - s) \bmod p$;
   the receiver **adds** it to its own copy. Afterwards rank $r$ holds the full sum of chunk
   $(r+1) \bmod p$.
2. **Allgather**, $p-1$ steps. At step $s$ rank $r$ sends its chunk $(r + 1 - s) \bmod p$;
   the receiver **replaces** its copy. Afterwards every rank holds every summed chunk.

Here the ranks are simulated: `chunks[r][i]` is rank $r$'s copy of chunk $i$. The chunks
below are labelled: `A0` is chunk 0 of rank A, and `A0 + B0` is their sum.
"""),
    code(r"""
import inspect

from workbench.exercises import ring as ex

print(ex.describe(ex.split_into_chunks(ex.label_tensors(3))))
print()
print(inspect.getsource(ex.allgather_step))
"""),
    md(r"""
## Your task

The allgather step is written above. Write `reduce_scatter_step(chunks, step)`, which
changes `chunks` in place. Every send of a step happens at the same time, so read all the
outgoing chunks before you change any (`.clone()` them).
"""),
    function_task(r'''
def reduce_scatter_step(chunks, step):
    """One reduce-scatter step: rank r sends a chunk to rank (r + 1) % p, which adds it."""
    p = len(chunks)
    sent = [chunks[rank][(rank - step) % p].clone() for rank in range(p)]  # all sends at once
    for rank, data in enumerate(sent):
        index, receiver = (rank - step) % p, (rank + 1) % p
        chunks[receiver][index] = chunks[receiver][index] + data
''', todo="Your code here (p = len(chunks) is the number of ranks)."),
    code("ex.check_reduce_scatter_step(reduce_scatter_step)"),
    md("Watch every step of the whole ring with your step (three ranks):"),
    code("ex.show_ring(3, reduce_scatter_step=reduce_scatter_step)"),
    md(r"""
## Bonus: write the allgather step yourself

Without looking at `ex.allgather_step`, write your own and check it.
"""),
    function_task(r'''
def my_allgather_step(chunks, step):
    """One allgather step: rank r passes a complete chunk to rank (r + 1) % p."""
    p = len(chunks)
    sent = [chunks[rank][(rank + 1 - step) % p].clone() for rank in range(p)]
    for rank, data in enumerate(sent):
        index = (rank + 1 - step) % p
        chunks[(rank + 1) % p][index] = data  # the chunk is already the full sum: copy it
'''),
    code("ex.check_allgather_step(my_allgather_step)"),
    md(r"""
## Summary

- Reduce-scatter adds chunks as they travel around the ring; allgather copies the finished
  chunks around once more. Each phase takes $p - 1$ steps.
- Each rank sends $2(p-1)$ chunks of $n/p$ elements, $2\frac{p-1}{p}n$ in all. In any
  allreduce among the $p$ ranks the busiest rank sends at least that much (Patarasuk & Yuan
  2009); the ring meets the bound on every rank and loads every link equally: that makes it
  bandwidth-optimal, $T = 2(p-1)\alpha + 2\frac{p-1}{p} n \beta$ (about $2n$ is not the
  reason: a parameter-server worker sends that much too). Its weakness is the $2(p-1)$
  latencies; Rabenseifner's halving-doubling needs only $2\log_2 p$.
- `workbench.synchronization.ring_allreduce` runs the same steps with real messages between
  processes.
"""),
]
