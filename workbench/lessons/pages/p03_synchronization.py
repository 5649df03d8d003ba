"""Notebook 03: synchronous vs asynchronous SGD, staleness, stragglers, the ring allreduce."""

from workbench.exercises.build_notebooks import code, md
from workbench.lessons.pages import md_table

NAME = "03_synchronization.ipynb"

CELLS = [
    md(r"""
# 03 · Synchronization: synchronous and asynchronous SGD

**Goals.** After this notebook you can
- contrast synchronous and asynchronous distributed SGD: what each waits for, and what each
  gives up,
- define the *staleness* of a gradient and measure it,
- explain why one slow worker (a *straggler*) slows a whole synchronous job, and two ways
  around it,
- describe the ring allreduce step by step and say why it is bandwidth-optimal.

**Time:** about 50 minutes.
"""),
    md(r"""
## 1. Rounds, and two ways to run them

SGD is iterative: every round computes a gradient on a mini-batch and updates the model, and
the next round starts from the updated model. With several workers the rounds can run

""" + md_table(
        ("", "**synchronous**", "**asynchronous**"),
        ("a round", "every worker computes a gradient on the *same* parameters; the gradients "
         "are averaged; one update", "each worker updates the model as soon as its own "
         "gradient is ready"),
        ("waits for", "the slowest worker, at every step (a barrier)", "nobody"),
        ("consistency", "every replica holds the same parameters after every step; "
         "equivalent to large-batch SGD (notebook 02)", "workers compute on parameters that "
         "others have changed since: the model is in a state no serial run would reach"),
        ("used by", "Horovod, PyTorch DDP, most large-scale training today",
         "parameter servers (Downpour SGD, Dean et al., NIPS 2012), Hogwild!"),
    ) + r"""

The **staleness** $\tau$ of a gradient is the number of updates applied to the model between
the moment a worker read the parameters and the moment its gradient is applied. The update
is then $w_{t+1} = w_t - \eta\, g(w_{t-\tau})$: a gradient computed for a model that no
longer exists. Small staleness acts like extra noise; large staleness can stall or derail
training. Synchronous SGD has $\tau = 0$ by construction.
"""),
    code(r"""
import inspect

import torch

from workbench.lessons.show import curves, figure_widget, table, until_finished
from workbench.synchronization.async_ps import run_parameter_server
from workbench.ui import TrainingPanel, charts

charts.load_bokehjs()  # BokehJS into the page, once, for the charts below
torch.set_num_threads(1)  # this kernel only coordinates: leave the cores to the workers
"""),
    md(r"""
## 2. Lab: a parameter server, synchronous and asynchronous

One **server** process holds the model (an MLP on the digits); each **worker** process
repeatedly *pulls* the parameters, computes a gradient on a mini-batch of its own shard, and
*pushes* the gradient back. Messages are real `torch.distributed` sends between processes.

- **sync**: the server waits for one gradient from *every* worker, averages them, updates,
  and sends everyone the new parameters.
- **async**: the server applies each gradient the moment it arrives and sends that worker
  fresh parameters. It records the staleness of every gradient.

Both see the same number of samples. The synchronous server averages $N$ gradients per
update, so by the linear scaling rule (notebook 01) it gets $N$ times the learning rate.
Worker 0 is made a little slower than the others (`STRAGGLER_DELAY` seconds per gradient),
as a busier machine would be.
"""),
    code(r"""
WORKERS = 2              # worker processes (plus one server); try 4
EPOCHS = 1               # passes over the digits
LR = 0.1                 # per gradient; sync uses WORKERS × LR for its averaged gradient
STRAGGLER_DELAY = 0.01   # extra seconds worker 0 takes per gradient; try 0 or 0.05

SETUPS = {"sync": dict(mode="sync", lr=WORKERS * LR),
          "async": dict(mode="async", lr=LR)}
# more to try: "async, lr / staleness": dict(mode="async", lr=LR, staleness_aware=True)
ps = {name: run_parameter_server(workers=WORKERS, epochs=EPOCHS,
                                 straggler_delay=STRAGGLER_DELAY, **kw)
      for name, kw in SETUPS.items()}
table([{"setup": name, **r, "pushed": [w["gradients"] for w in r["workers"]]}
       for name, r in ps.items()],
      [("setup", "setup", "s"), ("updates", "updates", "d"), ("time_s", "time (s)", ".2f"),
       ("mean_staleness", "mean staleness", ".2f"), ("max_staleness", "max staleness", "d"),
       ("pushed", "gradients per worker", str), ("final_loss", "final loss", ".3f"),
       ("final_accuracy", "accuracy", ".3f")])
"""),
    code(r"""
curves("Parameter server: loss vs samples", "samples used", "loss on all digits",
       {name: ([p["samples"] for p in r["loss_curve"]], [p["loss"] for p in r["loss_curve"]])
        for name, r in ps.items()}, markers=True)
"""),
    code(r"""
hist = ps["async"]["staleness_histogram"]
fig, _ = charts.bar(list(hist), list(hist.values()), "Staleness of the async gradients",
                    y_label="gradients", color=charts.kind_color("sync"))
fig.xaxis.axis_label = "staleness τ (updates since the worker pulled)"
figure_widget(fig)
"""),
    md(r"""
**What to notice.**

- *Time*: the synchronous server waits for the slow worker at every update; the
  asynchronous one never waits, so it finishes sooner.
- *Staleness*: most async gradients are 0 to a few updates old; the slow worker's are the
  oldest. With more workers, staleness grows (about $N - 1$ on average).
- *Consistency*: in async mode the fast worker pushes more gradients than the slow one, so
  the slow worker's shard of the data counts less in the model. Synchronous SGD weighs every
  shard equally.
- *Loss*: with few workers both reach similar losses; as staleness grows, async needs
  smaller steps. Zhang et al. (IJCAI 2016, arXiv:1511.05950) divide the learning rate by each
  gradient's staleness (`staleness_aware=True`).

A parameter server has a cost model too: with one server, every worker pushes $n$ bytes and
pulls $n$ bytes per step, so the server's link carries $2pn$ bytes per step and becomes the
bottleneck as the number of workers $p$ grows. The allreduce of section 5 avoids that.

## 3. Lab: Hogwild!, lock-free updates in shared memory

Niu, Recht, Ré & Wright ("Hogwild!: A Lock-Free Approach to Parallelizing Stochastic
Gradient Descent", NIPS 2011) let several processes update **one model in shared memory
with no locks at all**. Two processes may overwrite each other's change to the same weight;
the paper shows this rarely matters when the problem is *sparse*: each sample touches only a
few of the many weights, so concurrent updates seldom collide. They report an order of
magnitude over locking schemes on many cores.

The lab trains a sparse logistic regression (each sample switches on 8 of 5,000 features)
twice with the same processes: lock-free, and with one lock around every update. $\Omega$ is
the most weights one sample touches and $\Delta$ the largest share of samples that touch any
one weight; small $\Omega$ and $\Delta$ mean few collisions.
"""),
    code(r"""
from workbench.synchronization.hogwild import run_hogwild

HOGWILD_PROCESSES = 2   # processes writing into the same model
hw = run_hogwild(HOGWILD_PROCESSES, epochs=1, samples=3000)
print(f"Ω = {hw['sparsity']['omega']}, Δ = {hw['sparsity']['delta']:.4f}; "
      f"loss before training {hw['initial_loss']:.3f}")
table([{"variant": v, **hw[v]} for v in ("hogwild", "locked")],
      [("variant", "variant", "s"), ("updates", "updates", "d"), ("time_s", "time (s)", ".2f"),
       ("final_loss", "final loss", ".3f"), ("final_accuracy", "accuracy", ".3f")])
"""),
    md(r"""
Both variants reach about the same loss: the lost updates of Hogwild! do not hurt on a sparse
problem. With two processes the lock is rarely contended, so the times are close; with many
cores, the lock serialises every update and Hogwild! pulls ahead.

## 4. Stragglers in synchronous training

In Horovod or DDP a step ends with an allreduce, and an allreduce cannot finish before the
*last* rank has contributed its gradient. If one rank is slower (a busier machine, a slower
GPU, a noisy neighbour), **every** rank's step takes as long as the slowest one: the others
wait inside the allreduce. The job below makes rank 1 sleep `DELAY_S` seconds per step.
Watch the compute-vs-sync bars in the panel.
"""),
    code(r"""
DELAY_S = 0.05   # seconds rank 1 sleeps in every step
STEPS = 20       # training steps

panel = TrainingPanel(engine="horovod", np=2, model="mlp", dataset="digits", epochs=1,
                      max_steps=STEPS, batch_size=32, straggler_delay=DELAY_S,
                      straggler_rank=1, threads_per_rank=1)
panel
"""),
    code(r"""
from workbench.records import of_kind
from workbench.synchronization.stragglers import summarize_run

panel.start_button.click()
await until_finished(panel)
stragglers = summarize_run(of_kind(panel.job.metrics(), "step"))
table(stragglers["per_rank"], [("rank", "rank", "d"), ("step_time_s", "step (s)", ".4f"),
                               ("compute_s", "computing (s)", ".4f"),
                               ("sync_s", "synchronizing (s)", ".4f")],
      caption="Mean seconds per step (first steps left out)")
"""),
    md(r"""
Rank 1 *computes* for about `DELAY_S` longer; rank 0 spends about the same time
*synchronizing*: it is waiting for rank 1. Both ranks' steps take the slow rank's time. With
$p$ workers the chance that at least one of them is slow at a given step grows with $p$, so
stragglers hurt large jobs most.

Two remedies:

- **Go asynchronous** (section 2): nobody waits, but gradients become stale.
- **Backup workers** (Chen, Pan, Monga, Bengio & Jozefowicz, "Revisiting Distributed
  Synchronous SGD", 2016, arXiv:1604.00981): run $N + b$ workers and, at each step, use the
  first $N$ gradients that arrive and drop the rest. No staleness, and no waiting for the
  slowest. From the measured times we can estimate what dropping the slowest gradients
  would have given:
"""),
    code(r"""
table(stragglers["if_dropped"], [("dropped", "slowest gradients dropped", "d"),
                                  ("gradients_used", "gradients used", "d"),
                                  ("step_time_s", "estimated step (s)", ".4f")])
"""),
    md(r"""
The parameter-server lab runs the backup-worker scheme for real:
`run_parameter_server("backup", workers=2, backup_workers=1, straggler_delay=0.05)`.

**When a worker fails.** A straggler that never arrives is a failed worker: a crashed
process, a lost machine, a broken link. In synchronous training the others would wait for it
at the next allreduce for ever. The workbench watches every rank; when one dies it ends the
job and names the rank (its log is in the panel and in `runs/<run id>/logs/`). Production
systems add *elastic* training (Horovod Elastic, `torchrun` with a range of nodes): the job
continues with the workers that are left, from the last state they agreed on, and
checkpoints saved now and then bound what a crash can lose.

## 5. The ring allreduce, from scratch

How can $p$ workers each end up with the sum of $p$ vectors of $n$ bytes without a central
server? The **ring allreduce** (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms
for clusters of workstations", J. Parallel Distrib. Comput. 69(2), 2009; used by Horovod and
NCCL) arranges the workers in a ring: worker $r$ only sends to $r+1$ and receives from
$r-1$. Each vector is cut into $p$ chunks.

1. **Reduce-scatter**, $p-1$ steps: every worker sends one chunk to its right neighbour,
   which *adds* it to its own copy. Afterwards worker $r$ holds the complete sum of chunk
   $(r+1) \bmod p$.
2. **Allgather**, $p-1$ steps: the complete chunks travel once more around the ring, each
   worker *replacing* its copy, until everyone has every summed chunk.

Each worker sends $2(p-1)$ chunks of $n/p$ bytes, $2\frac{p-1}{p}n$ in all. That alone is not
what makes the ring special (a parameter-server worker also sends about $2n$: it pushes $n$
and pulls $n$). The ring is **bandwidth-optimal** because of a lower bound: in *any*
allreduce every node must send and receive at least $2\frac{p-1}{p}n$ bytes, and the ring
meets that bound with every link equally loaded, so no link is a bottleneck (Patarasuk &
Yuan 2009). Rabenseifner's algorithm (reduce-scatter by recursive halving, then allgather
by recursive doubling) meets the same bound with $2\log_2 p$ messages instead of
$2(p-1)$. In the $\alpha$–$\beta$ model ($\alpha$ seconds per message, $\beta$ seconds per
byte):

$$T_{\text{ring}} = 2(p-1)\,\alpha + 2\,\frac{p-1}{p}\, n\, \beta .$$

Its weakness is the latency term, which grows with $p$. Here is the algorithm; `send` and
`recv` are passed in, so the same code runs between threads or between processes:
"""),
    code(r"""
from workbench.synchronization import ring_allreduce as ring

print(inspect.getsource(ring.ring_allreduce))
"""),
    code(r"""
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
        for alg in ("ring", "recursive-doubling", "ps")}, log_x=True, log_y=True, markers=True)
"""),
    md(r"""
The ring's time stays almost flat (its bandwidth term is bounded by $2n\beta$), the
parameter server's grows linearly with $p$, and recursive doubling, which sends the whole
vector $\lceil \log_2 p \rceil$ times, suits only short messages.

### The ring on real processes

The lab starts real processes (gloo over local TCP), checks the from-scratch ring against
`torch.distributed.all_reduce` for several vector lengths (odd ones too: chunks of unequal
size), times both, and predicts the ring's time from a measured ping-pong ($\alpha$ and
$\beta$ of this machine).
"""),
    code(r"""
from workbench.synchronization.ring_lab import run_ring_lab

RING_PROCESSES = 2
lab = run_ring_lab(RING_PROCESSES, sizes=(7, 1001, 65536, 1 << 18), repeats=3)
print(f"measured α = {lab['alpha_s'] * 1e6:.0f} µs per message, "
      f"1/β = {1 / lab['beta_s_per_byte'] / 1e9:.2f} GB/s")
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

- **Synchronous** SGD: every worker computes on the same parameters and waits for the
  others; replicas stay consistent, equivalent to large-batch SGD; one straggler slows
  everyone.
- **Asynchronous** SGD: no waiting, but gradients are stale by $\tau$ updates and the model
  is inconsistent across workers; fast workers weigh more. Staleness-aware learning rates
  (Zhang et al. 2016) soften this.
- **Hogwild!**: lock-free updates to shared memory work when gradients are sparse.
- **Backup workers** (Chen et al. 2016) keep synchronous SGD and drop the slowest gradients.
- The **ring allreduce** is bandwidth-optimal: it meets the lower bound of $2\frac{p-1}{p}n$
  bytes per node with every link equally loaded, $T = 2(p-1)\alpha + 2\frac{p-1}{p}
  n\beta$. A single parameter server's link carries $2pn$.

## Exercises

1. [Finish a ring allreduce](exercises/04_ring_allreduce.ipynb): write the reduce-scatter step.
   And [measure staleness](exercises/08_staleness.ipynb) in a parameter server's log.
2. Set `WORKERS = 4` in the parameter-server lab. How do the staleness histogram and the
   final loss of async change? Add the staleness-aware setup and compare.
3. Raise `DELAY_S` to 0.2 and rerun the straggler job. How much of rank 0's step is waiting?

## Check yourself

1. A worker pulled the parameters at version 40 and its gradient is applied at version 43.
   What is its staleness, and what does it mean for the update?
2. Why does one slow GPU slow down a synchronous 64-GPU job, but not an asynchronous one?
3. How many bytes does each of 8 workers send in a ring allreduce of a 100 MB gradient? And
   with 64 workers?
4. What do backup workers give up, compared with plain synchronous SGD?

<details><summary>Answers</summary>

1. $\tau = 3$: the gradient was computed for parameters three updates older than the ones it
   changes.
2. In synchronous SGD every step's allreduce needs every gradient, so all 63 others wait for
   the slow one at every step. In asynchronous SGD each worker's update is applied on its
   own; the slow worker only contributes fewer (and staler) gradients.
3. $2 \cdot \frac{p-1}{p} \cdot 100$ MB: 175 MB with 8 workers, about 197 MB with 64 —
   almost the same.
4. The work of the dropped workers: $b$ extra workers compute gradients that are thrown
   away, and each step uses $N$ of $N + b$ gradients.
</details>
"""),
]
