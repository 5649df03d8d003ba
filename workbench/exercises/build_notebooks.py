"""Write the exercise notebooks and their worked solutions from one description.

    python -m workbench.exercises.build_notebooks            # writes notebooks/exercises,
                                                             # notebooks/solutions
    python -m workbench.exercises.build_notebooks --check    # exit 1 if they are out of date

Each notebook is described once, as a list of cells; a *task* cell has an exercise version
(with ``raise NotImplementedError``) and a solution version. The notebooks are saved
without outputs and with the ``python3`` kernelspec, so JupyterLab opens them without
asking for a kernel. Keeping the code here, in the package, keeps the notebooks short.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


@dataclass(frozen=True)
class Task:
    """A code cell whose content differs between the exercise and the solution."""

    exercise: str
    solution: str


def md(text: str) -> tuple[str, str]:
    return ("markdown", text.strip())


def code(text: str) -> tuple[str, str]:
    return ("code", text.strip())


def _cell(item: tuple[str, str] | Task, solution: bool) -> nbformat.NotebookNode:
    if isinstance(item, Task):
        return nbformat.v4.new_code_cell((item.solution if solution else item.exercise).strip())
    kind, text = item
    if kind == "markdown":
        return nbformat.v4.new_markdown_cell(text)
    return nbformat.v4.new_code_cell(text)


def build(cells: list, solution: bool) -> nbformat.NotebookNode:
    """One notebook, without outputs, with the kernelspec set and stable cell ids."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC),
                   "language_info": {"name": "python"}}
    nb.cells = [_cell(item, solution) for item in cells]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # stable ids: regenerating gives identical files
    return nb


# --- the notebooks ------------------------------------------------------------------------------

AVERAGE_GRADIENTS = [
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
    Task(
        exercise=r'''
def average_gradients(rank_grads):
    """Return the averaged gradient held by each rank: a list with one tensor per rank."""
    # Your code here: combine the ranks with ex.allreduce_sum, then divide.
    raise NotImplementedError
''',
        solution=r'''
def average_gradients(rank_grads):
    """Return the averaged gradient held by each rank: a list with one tensor per rank."""
    world_size = len(rank_grads)
    summed = ex.allreduce_sum(rank_grads)  # every rank now holds g_0 + ... + g_{p-1}
    return [total / world_size for total in summed]
'''),
    code("ex.check_average_gradients(average_gradients)"),
    md(r"""
## Summary

- Every rank must apply the **same** update, or the replicas drift apart: that is why
  synchronous data parallelism ends each step with an allreduce.
- An allreduce sums; averaging needs one division by the world size. Forgetting it makes
  each step $p$ times too large, as if the learning rate had been multiplied by $p$.
- In real code: Horovod's `hvd.allreduce(g, op=hvd.Average)` (what `hvd.DistributedOptimizer`
  does for every gradient), or `torch.distributed.all_reduce(g)` followed by
  `g /= world_size` (what DDP does for you).
"""),
]

SHARD = [
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
step, and its fourth allreduce waits for ever for partners that have finished. The last
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

SPEEDUP = [
    md(r"""
# Exercise 3: speedup and efficiency from a timing table

**Goals.** After this exercise you can
- compute the speedup $S(p) = T_1 / T_p$ and the efficiency $E(p) = S(p)/p$,
- read a scaling table and say how well a job scales,
- use the Karp–Flatt metric to tell serial code from growing overhead.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

The same epoch was timed with 1, 2, 4 and 8 workers. Speed depends on the platform (the
cluster, its network, the framework), unlike accuracy, so we measure it:

- **speedup** $S(p) = T_1 / T_p$: how many times faster than one worker;
- **efficiency** $E(p) = S(p) / p$: the share of the workers' time that does useful work;
- **scalability**: how $E(p)$ changes as $p$ grows.
"""),
    code(r"""
from workbench.exercises import scaling as ex

print(ex.format_table(ex.TIMES_S))
"""),
    md(r"""
## Your task

Write `scaling_table(times)`: given `{p: seconds}`, return `{p: (speedup, efficiency)}` for
every row, including $p = 1$.
"""),
    Task(
        exercise=r'''
def scaling_table(times):
    """times: {workers: seconds}. Return {workers: (speedup, efficiency)}."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
def scaling_table(times):
    """times: {workers: seconds}. Return {workers: (speedup, efficiency)}."""
    t1 = times[1]
    table = {}
    for p, tp in times.items():
        speedup = t1 / tp  # always against one worker: old time over new time
        table[p] = (speedup, speedup / p)  # efficiency is the speedup per worker
    return table
'''),
    code("ex.check_scaling_table(scaling_table)"),
    md(r"""
## Going further: Karp–Flatt

The experimentally determined serial fraction $e = (1/S - 1/p) / (1 - 1/p)$ (Karp & Flatt
1990) stays flat when a fixed serial part limits the speedup, and grows with $p$ when an
overhead grows with $p$, such as communication. It inverts Amdahl's law, so it is meant for
strong scaling, as here: the same epoch at every $p$.
"""),
    code(r"""
for p, e in ex.karp_flatt_table(ex.TIMES_S).items():
    print(f"p = {p}: serial fraction e = {e if e is None else round(e, 3)}")
"""),
    md(r"""
## Summary

- Speedup is the one-worker time over the $p$-worker time; efficiency divides it by $p$.
  An inverted ratio gives a speedup below 1, and an efficiency not divided by $p$ can
  exceed 1: both are signs of a slip.
- Efficiency usually falls as workers are added; how fast it falls is the scalability.
- A Karp–Flatt fraction that grows with $p$ points at overhead, not at serial code.
"""),
]

RING = [
    md(r"""
# Exercise 4: finish a ring allreduce

**Goals.** After this exercise you can
- describe the two phases of a ring allreduce, reduce-scatter and allgather,
- write one reduce-scatter step on simulated ranks,
- explain why the ring is bandwidth-optimal: it meets the lower bound of
  $2\frac{p-1}{p}n$ bytes per rank, with every link equally loaded.

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
    Task(
        exercise=r'''
def reduce_scatter_step(chunks, step):
    """One reduce-scatter step: rank r sends a chunk to rank (r + 1) % p, which adds it."""
    # Your code here (p = len(chunks) is the number of ranks).
    raise NotImplementedError
''',
        solution=r'''
def reduce_scatter_step(chunks, step):
    """One reduce-scatter step: rank r sends a chunk to rank (r + 1) % p, which adds it."""
    p = len(chunks)
    sent = [chunks[rank][(rank - step) % p].clone() for rank in range(p)]  # all sends at once
    for rank, data in enumerate(sent):
        index, receiver = (rank - step) % p, (rank + 1) % p
        chunks[receiver][index] = chunks[receiver][index] + data
'''),
    code("ex.check_reduce_scatter_step(reduce_scatter_step)"),
    md("Watch every step of the whole ring with your step (three ranks):"),
    code("ex.show_ring(3, reduce_scatter_step=reduce_scatter_step)"),
    md(r"""
## Bonus: write the allgather step yourself

Without looking at `ex.allgather_step`, write your own and check it.
"""),
    Task(
        exercise=r'''
def my_allgather_step(chunks, step):
    """One allgather step: rank r passes a complete chunk to rank (r + 1) % p."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
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
- Each rank sends $2(p-1)$ chunks of $n/p$ elements, $2\frac{p-1}{p}n$ in all. No allreduce
  can send less per rank, and the ring loads every link equally: that makes it
  bandwidth-optimal, $T = 2(p-1)\alpha + 2\frac{p-1}{p} n \beta$ (about $2n$ is not the
  reason: a parameter-server worker sends that much too). Its weakness is the $2(p-1)$
  latencies; Rabenseifner's halving-doubling needs only $2\log_2 p$.
- `workbench.synchronization.ring_allreduce` runs the same steps with real messages between
  processes.
"""),
]

PIPELINE = [
    md(r"""
# Exercise 5: predict a pipeline bubble

**Goals.** After this exercise you can
- read a GPipe pipeline schedule,
- derive the idle share of the devices, the *bubble*,
- choose enough micro-batches to keep the bubble small.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

In pipeline model parallelism a model is cut into $P$ stages on $P$ devices, and each
mini-batch into $M$ micro-batches that flow through the stages one after the other
(Huang et al. 2019, GPipe). Below, each row is a stage, each column a time slot, each number
the micro-batch that stage works on; `.` is an idle slot.
"""),
    code(r"""
from workbench.exercises import pipeline as ex

print(ex.show_schedule(stages=4, micro_batches=6))
"""),
    md(r"""
## Task 1

Count the slots in the schedule and write `bubble_fraction(stages, micro_batches)`: the
share of the (stage, slot) cells that are idle.
"""),
    Task(
        exercise=r'''
def bubble_fraction(stages, micro_batches):
    """The idle share of a GPipe schedule with P stages and M micro-batches."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
def bubble_fraction(stages, micro_batches):
    """The idle share of a GPipe schedule with P stages and M micro-batches."""
    slots = micro_batches + stages - 1  # the last micro-batch leaves the last stage here
    return (stages - 1) / slots  # each stage idles P - 1 of those slots
'''),
    code("ex.check_bubble_fraction(bubble_fraction)"),
    md(r"""
## Task 2

With $P = 4$ stages, what is the smallest number of micro-batches $M$ that keeps the bubble
at or below 10%?
"""),
    Task(
        exercise=r'''
micro_batches_needed = None  # your answer: a whole number
''',
        solution=r'''
# 3 / (M + 3) <= 0.1  <=>  M + 3 >= 30  <=>  M >= 27
micro_batches_needed = 27
'''),
    code("ex.check_micro_batches(micro_batches_needed, stages=4, max_bubble=0.10)"),
    md(r"""
## Summary

- With $P$ stages and $M$ micro-batches the bubble is $(P-1)/(M+P-1)$: more micro-batches
  shrink it; more stages grow it. At $M = 4P$ it is still $(P-1)/(5P-1)$, 16–20%.
  Megatron-LM writes the same idle time over the ideal time, $(P-1)/M$: both are right;
  say which one you use.
- The 1F1B schedule with a flush (PipeDream-Flush, Narayanan et al., ICML 2021) keeps the
  same bubble but holds only $P$ micro-batches of
  activations instead of $M$; Megatron-LM's interleaved schedule divides the bubble by the
  number of model chunks per stage.
"""),
]

PARALLELISM = [
    md(r"""
# Exercise 6: data or model parallelism?

**Goals.** After this exercise you can
- work out whether a model replica fits on one device,
- estimate the time of a gradient allreduce from the link bandwidth,
- choose between data and model parallelism from those numbers.

**Time:** about 20 minutes.
"""),
    md(r"""
## The rule for this exercise

1. **Memory.** A data-parallel replica needs its training state, `params ×
   state_bytes_per_param` bytes (weights, gradients and optimizer state), plus
   `activations_gb`. If that exceeds `device_memory_gb`, choose **model** parallelism.
2. **Communication.** Otherwise a ring allreduce of the fp32 gradients ($n$ = 4 bytes per
   parameter) takes $2\frac{p-1}{p} \cdot n / B$ seconds on links of $B$ bytes/s. If that is
   at most `compute_s`, choose **data** parallelism.
3. Otherwise choose **model** parallelism only if it sends less: $2 \times$
   `cut_activations_mb` (forward and backward) over the same link.

Careful with units: links are quoted in Gbit/s, and 1 Gbit/s is $10^9 / 8$ bytes/s. Sizes are
decimal: 1 GB = $10^9$ bytes, 1 MB = $10^6$ bytes.
"""),
    code(r"""
from workbench.exercises import parallelism as ex

for scenario in ex.SCENARIOS:
    print(ex.describe(scenario), end="\n\n")
"""),
    md(r"""
## Your task

Write `choose(s)` returning `"data"` or `"model"` for a scenario `s`. Its fields are
`s.params`, `s.state_bytes_per_param`, `s.activations_gb`, `s.device_memory_gb`,
`s.workers`, `s.link_gbit_s`, `s.compute_s` and `s.cut_activations_mb`.
"""),
    Task(
        exercise=r'''
def choose(s):
    """Return "data" or "model" for scenario s, following the rule above."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
def choose(s):
    """Return "data" or "model" for scenario s, following the rule above."""
    memory_gb = s.params * s.state_bytes_per_param / 1e9 + s.activations_gb
    if memory_gb > s.device_memory_gb:
        return "model"  # a replica does not fit on one device
    bytes_per_s = s.link_gbit_s * 1e9 / 8  # bits to bytes
    gradient_bytes = 4 * s.params  # fp32 gradients
    allreduce_s = 2 * (s.workers - 1) / s.workers * gradient_bytes / bytes_per_s
    if allreduce_s <= s.compute_s:
        return "data"  # not communication-bound: the simpler choice
    model_parallel_s = 2 * s.cut_activations_mb * 1e6 / bytes_per_s
    return "model" if model_parallel_s < allreduce_s else "data"
'''),
    code("ex.check_parallelism_choice(choose)"),
    md("Once you pass, compare your reasoning with the deciding numbers:"),
    code("print(ex.numbers_table())"),
    md(r"""
## Summary

- Memory decides first: data parallelism needs a whole replica, with its gradients,
  optimizer state and activations, on every device.
- When a replica fits, data parallelism is simpler and usually wins, unless its gradient
  allreduce outlasts the compute and model parallelism would send less.
- Bits are not bytes: a 10 Gbit/s link moves 1.25 GB/s.
- Large systems combine them: tensor parallelism (each layer split) inside a server with a
  fast bus, pipeline and data parallelism across servers.
"""),
]

REVIEW = [
    md(r"""
# Review questions

**Goals.** Check your understanding of the whole course: speedup and efficiency, data and
model parallelism, synchronous and asynchronous SGD, communication costs, and the cost
models of allreduce, parameter servers and pipelines.

**Time:** about 30 minutes (you can do one topic at a time).
"""),
    md(r"""
Choose an answer and press **Check**: the question is marked and explained, right or
wrong, and **Try again** clears it. For the three written questions, compare your text with
the model answer and tick the rubric points you made. To practise one topic, use for example
`Quiz(topic="pipeline")`; the topics are listed below.
"""),
    code(r"""
from workbench.quiz import TOPICS, Quiz

print(", ".join(TOPICS))
quiz = Quiz()
"""),
    Task(exercise="quiz", solution="quiz.reveal()\nquiz"),
    md(r"""
The same questions also work without a running kernel (for example in a page rendered from
this notebook): checks run in the browser and answers hide under *Show the answer*.
"""),
    code(r"""
from IPython.display import HTML

from workbench.quiz import quiz_html

HTML(quiz_html(topic="metrics"))
"""),
    md(r"""
## Summary

- Speedup $T_1/T_p$, efficiency $S/p$, scalability $E(p)$ as $p$ grows; accuracy does not
  depend on the platform, speed does (as long as the training recipe is the same:
  asynchronous SGD and very large batches change what is learned).
- Data parallelism replicates the model and exchanges gradients; model parallelism splits
  the model and exchanges activations.
- Synchronous SGD waits for everyone; asynchronous SGD never waits but uses stale gradients.
- Cost models tell you what to expect before you measure: the ring allreduce, the parameter
  server, Amdahl, Gustafson, Karp–Flatt and the pipeline bubble.
"""),
]

STALENESS = [
    md(r"""
# Exercise 8: the staleness of asynchronous gradients

**Goals.** After this exercise you can
- read a parameter server's log and say how old each applied gradient is,
- explain why a slow worker's gradients are the stalest,
- damp stale gradients with a staleness-aware learning rate.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

In asynchronous SGD a worker *pulls* the parameters, computes a gradient and *pushes* it;
the server applies it at once, making a new version of the parameters. The **staleness**
$\tau$ of a gradient counts the updates applied between its pull and its push:

$$\tau = \text{version when applied} - \text{version pulled}.$$

Below, a server's log: the version starts at 0 and each push adds one, after its gradient
is applied.
"""),
    code(r"""
from workbench.exercises import staleness as ex

print(ex.show_trace(ex.TRACE))
"""),
    md(r"""
## Task 1

Write `staleness_per_push(events)`: `events` is a list of `("pull", worker)` and
`("push", worker)` in time order; return the staleness of every push, in order.
"""),
    Task(
        exercise=r'''
def staleness_per_push(events):
    """Return [staleness of each push], in the order of the pushes."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
def staleness_per_push(events):
    """Return [staleness of each push], in the order of the pushes."""
    version, pulled, out = 0, {}, []
    for action, worker in events:
        if action == "pull":
            pulled[worker] = version  # the parameters this worker computes on
        else:
            out.append(version - pulled[worker])  # updates applied since its pull
            version += 1  # its own update comes after
    return out
'''),
    code("ex.check_staleness(staleness_per_push)"),
    md(r"""
## Task 2

Zhang et al. (IJCAI 2016) divide the learning rate by the staleness, so an old gradient
takes a smaller step; a fresh one ($\tau = 0$) keeps the base rate. Write
`staleness_lr(staleness, base_lr)`.
"""),
    Task(
        exercise=r'''
def staleness_lr(staleness, base_lr):
    """The learning rate for a gradient of this staleness."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
def staleness_lr(staleness, base_lr):
    """The learning rate for a gradient of this staleness."""
    return base_lr / max(1, staleness)  # a fresh gradient keeps the base rate
'''),
    code("ex.check_staleness_lr(staleness_lr)"),
    md(r"""
## Summary

- Staleness counts the *updates* between a worker's pull and its push; pulls change
  nothing. Synchronous SGD has $\tau = 0$.
- A slow worker's gradients are the stalest: others update the model while it computes.
  More workers mean more staleness, about $N - 1$ on average.
- Staleness-aware SGD uses $\eta / \max(1, \tau)$. The parameter-server lab of notebook 03
  runs it with `staleness_aware=True`.
"""),
]

LINEAR_SCALING = [
    md(r"""
# Exercise 9: the linear scaling rule, with a warm-up

**Goals.** After this exercise you can
- say how the global batch grows with the number of workers,
- scale the learning rate with it (Goyal et al. 2017),
- add the gradual warm-up that makes large rates safe at the start.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

With $p$ workers of $b$ samples each, every update averages a global batch of $p b$
samples. A rate $\eta$ tuned for a batch of $B_0$ is then too small: Goyal et al. use
$k \eta$ with $k = p b / B_0$ (**linear scaling**), reached by a **gradual warm-up**: the
rate rises linearly from $\eta$ to $k \eta$ over the first 5 epochs. Here $\eta = 0.1$ was
tuned for $B_0 = 256$, as in the paper.
"""),
    code(r"""
from workbench.exercises import lr_scaling as ex

print(f"base rate {ex.BASE_LR} for a global batch of {ex.BASE_BATCH}, "
      f"warm-up over {ex.WARMUP_EPOCHS} epochs")
"""),
    md(r"""
## Your task

Write `learning_rate(epoch, workers, batch_per_worker)`; `epoch` may be fractional
(2.5 is half-way through the third epoch).
"""),
    Task(
        exercise=r'''
def learning_rate(epoch, workers, batch_per_worker):
    """The learning rate at this epoch, by the linear scaling rule with warm-up."""
    # Your code here: use ex.BASE_LR, ex.BASE_BATCH and ex.WARMUP_EPOCHS.
    raise NotImplementedError
''',
        solution=r'''
def learning_rate(epoch, workers, batch_per_worker):
    """The learning rate at this epoch, by the linear scaling rule with warm-up."""
    k = workers * batch_per_worker / ex.BASE_BATCH  # the global batch, relative to B0
    target = k * ex.BASE_LR
    if epoch >= ex.WARMUP_EPOCHS:
        return target
    return ex.BASE_LR + (target - ex.BASE_LR) * epoch / ex.WARMUP_EPOCHS
'''),
    code("ex.check_learning_rate(learning_rate)"),
    md(r"""
## Summary

- The global batch is $p \cdot b$; the rule scales the rate by $k = p b / B_0$, not by $p$
  alone and not by the batch of one worker.
- The warm-up starts at $\eta$, not at 0, and reaches $k \eta$ after 5 epochs.
- With both, Goyal et al. trained ResNet-50 with a batch of 8192 without losing accuracy;
  beyond that, large batches do change what is learned.
"""),
]

LAWS = [
    md(r"""
# Exercise 10: Amdahl or Gustafson?

**Goals.** After this exercise you can
- say of which time each law's serial share is a share,
- turn a measured speedup into each law's serial share,
- decide from three or more worker counts which law describes a job, and say when the
  data cannot tell.

**Time:** about 20 minutes.
"""),
    md(r"""
## Background

- **Amdahl**, fixed total work: $S(p) = 1 / (s_A + (1 - s_A)/p)$, with $s_A$ the serial
  share of the **one-worker** time.
- **Gustafson**, work growing with $p$: $S(p) = s_G + (1 - s_G)\,p$, with $s_G$ the serial
  share of the **$p$-worker** time.

Each law has one parameter, so each fits any one measured point exactly. With more worker
counts, the law whose share stays the same from point to point describes the job.
"""),
    code(r"""
from workbench.exercises import laws as ex

for name, points, _ in ex.DATASETS:
    print(f"{name}: " + ", ".join(f"S({p}) = {s:.3f}" for p, s in points))
"""),
    md(r"""
## Task 1

Write `serial_shares(p, speedup)`, returning `(s_amdahl, s_gustafson)`: solve each law for
its own serial share.
"""),
    Task(
        exercise=r'''
def serial_shares(p, speedup):
    """Return (s_amdahl, s_gustafson) for one measured point."""
    # Your code here.
    raise NotImplementedError
''',
        solution=r'''
def serial_shares(p, speedup):
    """Return (s_amdahl, s_gustafson) for one measured point."""
    s_amdahl = (p / speedup - 1) / (p - 1)  # of the one-worker time (= Karp-Flatt)
    s_gustafson = (p - speedup) / (p - 1)  # of the p-worker time
    return s_amdahl, s_gustafson
'''),
    code("ex.check_serial_shares(serial_shares)"),
    md(r"""
## Task 2

Write `which_law(points)` for a list of `(p, speedup)`: return `"amdahl"` or
`"gustafson"`, whichever law's share varies less (relative to its size) across the points
with $p > 1$, or `None` when there are fewer than two such points.
"""),
    Task(
        exercise=r'''
def which_law(points):
    """Return "amdahl", "gustafson", or None when the points cannot tell."""
    # Your code here: use serial_shares from Task 1.
    raise NotImplementedError
''',
        solution=r'''
def which_law(points):
    """Return "amdahl", "gustafson", or None when the points cannot tell."""
    shares = [serial_shares(p, s) for p, s in points if p > 1]
    if len(shares) < 2:
        return None  # one parameter per law: each fits one point exactly

    def spread(values):
        return (max(values) - min(values)) / (sum(values) / len(values))

    amdahl = spread([a for a, _ in shares])
    gustafson = spread([g for _, g in shares])
    return "amdahl" if amdahl < gustafson else "gustafson"
'''),
    code("ex.check_which_law(which_law)"),
    md(r"""
## Summary

- $s_A$ is a share of the one-worker time, $s_G$ of the $p$-worker time: the same run gives
  two different numbers, so name which one you mean.
- Amdahl's $s_A$ computed point by point is the Karp–Flatt metric; it is meant for strong
  scaling.
- Two worker counts cannot tell the laws apart. Measure at least three (or use the
  simulator, `workbench.scaling.simulate`), then see whose share holds steady.
"""),
]

NOTEBOOKS = {
    "01_average_gradients.ipynb": AVERAGE_GRADIENTS,
    "02_shard_a_dataset.ipynb": SHARD,
    "03_speedup_and_efficiency.ipynb": SPEEDUP,
    "04_ring_allreduce.ipynb": RING,
    "05_pipeline_bubble.ipynb": PIPELINE,
    "06_data_or_model_parallelism.ipynb": PARALLELISM,
    "07_review_questions.ipynb": REVIEW,
    "08_staleness.ipynb": STALENESS,
    "09_linear_scaling_rule.ipynb": LINEAR_SCALING,
    "10_amdahl_or_gustafson.ipynb": LAWS,
}


def render(name: str, solution: bool) -> str:
    """The text of one notebook file, exactly as it is saved."""
    return nbformat.writes(build(NOTEBOOKS[name], solution)) + "\n"


def sync_files(files: dict[Path, str], check: bool = False) -> list[Path]:
    """Write each file whose text differs (with check=True, only list them)."""
    stale = []
    for path, text in files.items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return stale


def run_builder(write_all, description: str, argv: list[str] | None = None) -> int:
    """The command line of a notebook builder: write, or `--check` (exit 1 if out of date)."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only report notebooks that differ from their description")
    args = parser.parse_args(argv)
    stale = write_all(check=args.check)
    for path in stale:
        print(("out of date: " if args.check else "wrote ") + str(path.relative_to(ROOT)))
    return 1 if args.check and stale else 0


def write_all(root: Path = ROOT, check: bool = False) -> list[Path]:
    """Write every notebook (or, with check=True, list those whose file differs)."""
    return sync_files({root / "notebooks" / folder / name: render(name, solution)
                       for folder, solution in (("exercises", False), ("solutions", True))
                       for name in NOTEBOOKS}, check)


def main(argv: list[str] | None = None) -> int:
    return run_builder(write_all, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
