"""Notebook 04: collectives: parameter servers (one, sharded), the ring allreduce, halving and
doubling, and where each wins."""

from workbench.notebooks import code, md, md_table

NAME = "04_collectives.ipynb"

CELLS = [
    md(r"""
# 04 · Collectives: parameter servers, the ring allreduce, halving and doubling

**Goals.** After this notebook you can
- compute what a parameter server's links carry, with one server and with the model
  sharded over many, on their own machines or beside the workers,
- describe the ring allreduce step by step and say why it is bandwidth-optimal,
- tell when halving and doubling beats the ring (short messages, many workers),
- say where each design wins, and check the cost model against the published comparison
  of parameter servers and Horovod's ring at 128 GPUs.

**Time:** about 40 minutes.
"""),
    code(r"""
import torch

from workbench.lessons.show import curves, table
from workbench.scaling import costmodel, simulate
from workbench.ui import charts

charts.load_bokehjs()  # BokehJS into the page, once, for the charts below
torch.set_num_threads(1)  # this kernel only coordinates: leave the cores to the workers
"""),
    md(r"""
## 1. Parameter servers, one and many

In notebook 03 a **parameter server** held the model: every worker pushed its gradient of
$n$ bytes and pulled $n$ bytes of new weights. With one server its single link carries
$2pn$ bytes per step for $p$ workers, a time that grows *linearly* with $p$.

Deployed systems shard the parameters rather than use one server, and even so Uber's
TensorFlow jobs with parameter servers lost about half of their GPUs' time to
communication at 128 GPUs, which is what made Horovod move to ring allreduce (Sergeev &
Del Balso 2018). TensorFlow and BytePS **shard** the parameters over $k$
servers, each holding $1/k$ of them: a server then receives $p$ shards of $n/k$ bytes and
sends $p$ back, and the step waits for the busiest link, a server's ($pn/k$) or a worker's
($n$). Two placements:

- **dedicated** servers, on machines of their own: they add links to the job;
- **co-located** servers, one beside each worker (TensorFlow's benchmarks ran one server on
  each machine): no extra machines, but a link carries its worker's traffic and its
  server's. With a server beside every worker each link carries $2\frac{p-1}{p}n$ bytes, the
  ring's traffic.

And two ways to time a step: TensorFlow *pulled* the weights at the start of a step and
*pushed* the gradients at its end, so the two phases add up; BytePS cuts tensors into small
partitions and pulls one while it pushes the next, so on full-duplex links the push (out of
a worker) and the pull (into it) overlap (`pipelined`).
"""),
    code(r"""
GRADIENT_MB = 100        # gradient size; try 1 (latency matters) or 500
n, beta, alpha = GRADIENT_MB * 1e6, 1 / (25e9 / 8), 5e-6    # 25 Gbit/s links, 5 µs
designs = {
    "ring": ("ring", None),
    "one server": ("ps", costmodel.ServerLayout(1)),
    "8 dedicated servers": ("ps", costmodel.ServerLayout(8)),
    "a server beside each worker": ("ps", costmodel.ServerLayout(1024, colocated=True)),
    "p dedicated, pipelined (BytePS)": ("ps", costmodel.ServerLayout(1024, pipelined=True)),
}
workers = [2 ** k for k in range(1, 11)]
curves(f"Time to exchange {GRADIENT_MB} MB of gradients", "workers p (log)", "seconds (log)",
       {name: (workers, [costmodel.allreduce_time(alg, n, p, alpha, beta, layout=layout)
                         for p in workers]) for name, (alg, layout) in designs.items()},
       log_x=True, log_y=True, markers=True)
"""),
    md(r"""
One server grows linearly with $p$; $k$ dedicated servers divide its load by $k$; a server
beside each worker moves the ring's bytes; dedicated, pipelined servers, at least one per
worker, send $n$ and receive $n$ per worker at once, half the ring's bytes, where spare
machines exist (BytePS: Jiang et al., OSDI 2020). Latency, $2k\alpha$ per worker, is left
out here (section 3).

## 2. The ring allreduce, step by step

How can $p$ workers each end with the sum of their $n$-byte vectors without a server? The
**ring allreduce** (Patarasuk & Yuan 2009; Horovod, NCCL) cuts each vector into $p$ chunks;
worker $r$ sends only to $r+1$. Press play:
"""),
    code(r"""
from workbench.ui.ring_picture import RingPicture

RingPicture(workers=4, megabytes=100)   # try 2 to 8 workers
"""),
    md(r"""
Each worker sends $2(p-1)$ chunks of $n/p$ bytes, $2\frac{p-1}{p}n$ in all. In any
allreduce among the $p$ workers the busiest sends at least that much (a lower bound), and
the ring loads every worker and link equally: it is **bandwidth-optimal** (Patarasuk &
Yuan 2009). Rabenseifner's
algorithm meets the bound in $2\log_2 p$ messages. With $\alpha$ seconds per message and
$\beta$ per byte,

$$T_{\text{ring}} = 2(p-1)\,\alpha + 2\,\frac{p-1}{p}\, n\, \beta .$$

So an all-reduce has a **payload**, the $n$ bytes each worker hands it (Horovod's and DDP's
counters), and **bytes sent per worker**, $2\frac{p-1}{p}n$ on a ring. Exercise 04 has you
write the reduce-scatter step (`ring_allreduce.py` holds the whole function). Between
threads:
"""),
    code(r"""
from workbench.synchronization import ring_allreduce as ring

vectors = [torch.arange(8.0) * (r + 1) for r in range(4)]   # 4 workers, 8 numbers each
summed = ring.thread_ring_allreduce(vectors)                 # 4 threads passing messages
print("expected :", sum(vectors).tolist())
print("worker 0 :", summed[0].tolist())
print("worker 3 :", summed[3].tolist())
assert all(torch.equal(s, sum(vectors)) for s in summed)
"""),
    md(r"""
The bytes each worker sends approach $2n$ as $p$ grows, while a parameter server's link
carries $2pn$. Below, a gradient of one million float32 values ($n$ = 4 MB):
"""),
    code(r"""
from workbench.scaling import costmodel

n_values = 1_000_000
rows = [{"p": p, "ring": ring.bytes_sent_per_worker(n_values, p) / (4 * n_values),
         "server": 2 * p} for p in (2, 4, 8, 16, 64)]
table(rows, [("p", "workers p", "d"), ("ring", "ring: bytes per worker ÷ n", ".3f"),
             ("server", "parameter server: bytes on its link ÷ n", "d")])
"""),
    code(r"""
MB, GBIT = 100e6, 10e9 / 8        # a 100 MB gradient on 10 Gbit/s links
ALPHA = 5e-6                      # 5 µs per message
workers = [2 ** k for k in range(1, 11)]
curves("Allreduce time of 100 MB on 10 Gbit/s links", "workers p (log)", "seconds (log)",
       {alg: (workers, [costmodel.allreduce_time(alg, MB, p, ALPHA, 1 / GBIT) for p in workers])
        for alg in ("ring", "rabenseifner", "recursive-doubling", "ps")}, log_x=True, log_y=True,
       markers=True)
"""),
    md(r"""
The ring's time stays almost flat (its bandwidth term is bounded by $2n\beta$), the
parameter server's grows linearly with $p$, and recursive doubling, which sends the whole
vector $\lceil \log_2 p \rceil$ times, suits only short messages.

## 3. Halving and doubling: fewer rounds

The ring needs $2(p-1)$ rounds of messages; at 1,024 workers and 5 µs each that is 10 ms
before a single byte moves. **Recursive halving and doubling** (Rabenseifner; `"rabenseifner"` in
the cost model) does the reduce-scatter by *halving*: in round $i$ each worker swaps half of
what it still holds with a partner $2^i$ away, and the allgather by *doubling*, in reverse.
The same $2\frac{p-1}{p}n$ bytes as the ring, in only $2\log_2 p$ rounds:

$$T_{\text{halving-doubling}} = 2\log_2 p\,\alpha + 2\,\frac{p-1}{p}\, n\, \beta .$$

So it wins when latency dominates: short messages, many workers. MPI libraries (Open MPI,
MPICH) switch between recursive halving-doubling and the ring by message size and number
of processes (Thakur et al. 2005). NCCL has no halving-doubling: it picks, by size and
topology, between a ring, a double binary tree (whose latency grows as $\log p$) and, where
the network or NVSwitch supports it, the in-network CollNet and NVLS algorithms.
"""),
    code(r"""
SMALL_BYTES = 64e3                # a 64 KB message: a small layer's gradient
curves("Allreduce time of 64 KB on 10 Gbit/s links", "workers p (log)", "seconds (log)",
       {alg: (workers, [costmodel.allreduce_time(alg, SMALL_BYTES, p, ALPHA, 1 / GBIT)
                        for p in workers])
        for alg in ("ring", "rabenseifner", "recursive-doubling")}, log_x=True, log_y=True,
       markers=True)
"""),
    md(r"""
## 4. Against published results: parameter servers vs Horovod at 128 GPUs

Sergeev & Del Balso (2018) compared standard distributed TensorFlow, with its parameter
servers, and Horovod's ring on Inception V3 and ResNet-101, up to 128 Pascal GPUs on 25
Gbit/s links: Horovod kept about 88% scaling efficiency, TensorFlow about half. The
simulator's presets model TensorFlow as its benchmarks deployed it: one server per
4-GPU machine (32 servers, co-located), variables placed whole (so the busiest server
holds at least the largest tensor: the 2-million-parameter classifier of Inception V3),
pull then push. Nothing in them is tuned to this comparison (the overlap was fitted once,
on the 512-GPU ring; notebook 06):
"""),
    code(r"""
rows = []
for name in ("inception3-25gbe-128", "inception3-25gbe-tfps", "resnet101-25gbe-128",
             "resnet101-25gbe-tfps"):
    preset = simulate.PRESETS[name]
    rows.append({"preset": name, "design": preset.layout.describe() if preset.layout
                 else "ring allreduce", "predicted": preset.predict().efficiency,
                 "published": preset.published_efficiency})
one = simulate.PRESETS["inception3-25gbe-tfps"]
alone = simulate.predict_step(128, one.workload.params, one.workload.compute_time_s,
                              one.network.bandwidth, one.network.latency_s, "ps", one.overlap)
rows.append({"preset": "inception3, one server", "design": "1 server",
             "predicted": alone.efficiency, "published": None})
table(rows, [("preset", "setup", "s"), ("design", "servers", "s"),
             ("predicted", "predicted at 128", ".0%"), ("published", "published", ".0%")])
"""),
    md(r"""
The sharded model lands within a few points of the paper on both models; one server would
predict almost nothing. What still separates the parameter servers from the ring here is
the placement: the busiest server carries the largest tensor for all 128 workers, twice (pull,
then push). BytePS removes both handicaps (partitions of a few MB, pipelined push and pull)
and reports beating the ring when bandwidth is scarce.

**Where each design wins.**

""" + md_table(
        (
            'design',
            'wins when',
            'loses when',
        ),
        (
            'one parameter server',
            'a handful of workers; simplest to build; asynchronous updates are natural',
            'more than a few workers: its link carries 2pn',
        ),
        (
            'sharded, co-located (TensorFlow)',
            "no extra machines; a server beside every worker moves the ring's bytes",
            'tensors placed whole and pull-then-push: the busiest server sets the pace',
        ),
        (
            'sharded, dedicated, pipelined (BytePS)',
            "bandwidth is scarce and spare CPU machines exist: half the ring's bytes per worker",
            'there are no spare machines; short messages (a message per server)',
        ),
        (
            'ring allreduce (Horovod, NCCL)',
            'large messages on equal links: bandwidth-optimal without extra machines',
            'latency-bound: 2(p-1) rounds',
        ),
        (
            'halving and doubling',
            'short messages, many workers: 2 log2 p rounds',
            'non-powers of two; large messages on hierarchical links',
        ),
    ) + r"""

## 5. The ring on real processes

The lab starts real processes (gloo over local TCP), checks the from-scratch ring against
`torch.distributed.all_reduce` for several vector lengths (odd ones too: chunks of unequal
size), times both, and predicts the ring's time from a measured ping-pong ($\alpha$ and
$\beta$ of this machine).
"""),
    code(r"""
from workbench.synchronization.ring_lab import run_ring_lab

RING_PROCESSES = 2
lab = run_ring_lab(RING_PROCESSES, sizes=(7, 1001, 65536, 1 << 18), repeats=3)
beta = lab["beta_s_per_byte"]   # 0 when the timings were too noisy to show a slope
print(f"measured α = {lab['alpha_s'] * 1e6:.0f} µs per message, "
      + (f"1/β = {1 / beta / 1e9:.2f} GB/s" if beta > 0 else
         "β: no slope in these timings (a busy machine): run the cell again"))
table([{**c, **r} for c, r in zip(lab["checks"], lab["rows"], strict=True)],
      [("n", "values", "d"), ("max_abs_diff", "|ring − library|", ".1e"),
       ("ring_s", "ring (s)", ".2e"), ("library_s", "torch.distributed (s)", ".2e"),
       ("model_s", "α–β model (s)", ".2e")])
"""),
    md(r"""
The sums agree exactly, and the library is faster on large vectors (it overlaps sends and
receives and avoids Python), but both grow with $n$ as the model predicts. On a busy shared
machine timings are noisy: run the cell again to see how much.

## Summary

- **One parameter server**: its link carries $2pn$ bytes per step; it cannot scale.
- **Sharded servers**: $k$ servers divide that load; a server beside every worker moves the
  ring's bytes; $k \ge p$ dedicated, pipelined servers move half of them (BytePS).
  TensorFlow's whole-tensor placement and pull-then-push explain its ~50% at 128 GPUs
  against Horovod's 88%.
- The **ring allreduce** is bandwidth-optimal: it meets the lower bound of $2\frac{p-1}{p}n$
  bytes per node with every link equally loaded, $T = 2(p-1)\alpha + 2\frac{p-1}{p}
  n\beta$; its weakness is the $2(p-1)$ rounds.
- **Halving and doubling** sends the same bytes in $2\log_2 p$ rounds: better for short
  messages and many workers.

## Exercises

1. [Finish a ring allreduce](exercises/04_ring_allreduce.ipynb): write the reduce-scatter step.
2. Set `GRADIENT_MB = 1` in section 1. Which design is fastest at 1,024 workers now, and why?
3. In the simulator, how many dedicated servers does Inception V3 need at 128 GPUs to
   match the ring? Try `workbench simulate --preset inception3-25gbe-128 --algorithm ps
   --servers K` for a few K, with and without `--pipelined`.

## Check yourself

1. How many bytes does each of 8 workers send in a ring allreduce of a 100 MB gradient? And
   with 64 workers?
2. A parameter server holds a 100 MB model for 32 workers. What does its link carry per
   step? And with the model sharded over 8 dedicated servers?
3. Why can parameter servers beat the ring, although the ring is bandwidth-optimal?
4. When does halving and doubling beat the ring?

<details><summary>Answers</summary>

1. $2 \cdot \frac{p-1}{p} \cdot 100$ MB: 175 MB with 8 workers, about 197 MB with 64 —
   almost the same.
2. $2 \cdot 32 \cdot 100$ MB = 6.4 GB (push and pull); with 8 servers each carries 800 MB.
3. The lower bound holds for allreduces among the workers alone. Dedicated servers add
   nodes and links: each worker then sends $n$ and receives $n$, at the same time, while a
   ring worker sends $2\frac{p-1}{p}n$ and receives as much.
4. When latency dominates: short messages or many workers, since it needs $2\log_2 p$
   rounds against the ring's $2(p-1)$.
</details>
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="collectives")
"""),
]
