"""Exercise 2: shard a dataset between ranks."""

from workbench.notebooks import Task, code, md

NAME = "02_shard_a_dataset.ipynb"

CELLS = [
    md(r"""
# Exercise 2: shard a dataset between ranks

**Goals.** After this exercise you can
- split a dataset so every sample is used by exactly one rank,
- handle a number of samples that does not divide evenly,
- explain why even balanced shards can make synchronous training hang, and how training
  loops avoid it.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

In data parallelism each rank trains the same model on a different part of the data, its
*shard*. A correct sharding of $n$ samples over $p$ ranks is a **partition**:

- no overlap: a sample on two ranks counts twice per epoch;
- nothing dropped: a sample on no rank is never learned from;
- balanced: shard sizes differ by at most one, so no rank does more than its share.

With $n = 13$ and $p = 4$: $13 = 4 \times 3 + 1$, so one rank gets 4 samples and three get 3.

A balanced partition is not yet enough for synchronous training, where every rank must
take the same number of steps: with a batch of 1, the rank with 4 samples takes a fourth
step, and its fourth allreduce waits for partners that have finished, until Horovod
reports that a peer has shut down or gloo gives up after its timeout. The last
cells show it, and how training loops avoid it.
"""),
    code("from workbench.exercises import sharding as ex"),
    md(r"""
## Your task

Write `shard(n_samples, rank, world_size)`, returning the list of sample indices (from 0 to
`n_samples - 1`) that `rank` trains on.
"""),
    Task(
        exercise=r'''
def shard(n_samples, rank, world_size):
    """Return the indices of the samples this rank trains on."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
def shard(n_samples, rank, world_size):
    """Return the indices of the samples this rank trains on: one contiguous block each."""
    base, extra = divmod(n_samples, world_size)
    start = rank * base + min(rank, extra)  # the first `extra` ranks get one sample more
    stop = start + base + (1 if rank < extra else 0)
    return list(range(start, stop))
'''),
    code("print(ex.show_shards(shard, n_samples=13, world_size=4))"),
    code("ex.check_shard(shard)"),
    md(r"""
## Equal shards, equal steps

Steps per rank in one epoch, with a batch of 1 sample, for your balanced shards of 13 samples:
"""),
    code("print(ex.show_steps(shard, n_samples=13, world_size=4, batch_size=1))"),
    md(r"""
One rank takes a step the others never take. Equal step counts need **equal** shards:
drop the incomplete last global batch (here 12 samples, 3 steps each), or pad it with
repeated samples (16 samples, 4 steps each).
"""),
    md(r"""
## Summary

- A sharding is right when it is a balanced partition: every sample on exactly one rank,
  sizes within one of each other.
- Two common correct answers: contiguous blocks with the remainder spread over the first
  ranks, or every $p$-th sample, `range(rank, n_samples, world_size)`.
- Balanced is not equal: with 13 samples on 4 ranks one rank takes an extra step and its
  allreduce hangs. Equal step counts need equal shards, by dropping or padding.
- PyTorch's `DistributedSampler` makes shards exactly equal by repeating a few samples
  (`drop_last=False`) or by dropping the remainder (`drop_last=True`), and reshuffles each
  epoch when you call `set_epoch`.
- The workbench's own training loop (`workbench/training/sharding.py`) shuffles every epoch
  with a seed all ranks share and drops the incomplete last global batch, so every rank
  takes exactly the same number of steps; as the order changes each epoch, no sample is
  left out for good.
"""),
]
