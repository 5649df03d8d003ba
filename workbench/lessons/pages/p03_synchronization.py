"""Notebook 03: synchronous vs asynchronous SGD, staleness, stragglers, faults and resuming."""

from workbench.notebooks import code, md, md_table

NAME = "03_synchronization.ipynb"

CELLS = [
    md(r"""
# 03 · Synchronization: synchronous and asynchronous SGD, stragglers, faults

**Goals.** After this notebook you can
- contrast synchronous and asynchronous distributed SGD: what each waits for, and what each
  gives up,
- define the *staleness* of a gradient and measure it,
- explain why one slow worker (a *straggler*) slows a whole synchronous job, and two ways
  around it,
- make a rank fail on purpose, resume the job from its last checkpoint, and weigh how often
  to checkpoint against the work a failure loses; explain elastic training.

The collectives that move the gradients (parameter servers, the ring allreduce) are the
subject of notebook 04.

**Time:** about 45 minutes (the Hogwild! appendix: 10 more).
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
                    x_label="staleness τ (updates since the worker pulled)",
                    y_label="gradients", color=charts.kind_color("sync"))
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
bottleneck as the number of workers $p$ grows. Notebook 04 shows how deployed systems
avoid that: many servers, or no server at all (the ring allreduce).
"""),
    md(r"""
## 3. Stragglers in synchronous training

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
process, a lost machine, a broken link. In synchronous training the others wait for it at
the next allreduce until Horovod reports that a peer has shut down, or gloo and NCCL give up
after their timeout (gloo's default is 30 minutes), and the job fails with an error that
names no culprit. The workbench watches every rank; when one dies it ends the
job and names the rank (its log is in the panel and in `runs/<run id>/logs/`). Production
systems add *elastic* training (Horovod Elastic, `torchrun` with a range of nodes): the job
continues with the workers that are left, from the last state they agreed on, and
checkpoints saved now and then bound what a crash can lose.

## 4. Lab: lose a rank, then resume

The job below trains for 3 epochs on 2 ranks (25 steps per epoch) and saves a checkpoint
every `CHECKPOINT_EVERY` epochs: rank 0 writes the model, the optimizer's state (here the
momentum buffers) and the number of epochs done to `checkpoint.pt` in the run folder,
atomically. Rank 1 is then made to fail at step `FAIL_AT_STEP`
(`JobConfig(fail_rank=1, fail_at_step=...)`, or `workbench run --fail-rank 1
--fail-at-step 60`), as a crashed machine would. At the same time, one process with the
global batch of 64 trains without any fault: by notebook 02 it takes exactly the steps of
the two ranks, so it is the run that was never interrupted. It binds no core
(`cpu_bind="none"`), so the two ranks need not wait for cores it holds (a limit of one job
at a time per user, as on a shared hub, still makes them wait for it).
"""),
    code(r"""
import workbench
from workbench import JobConfig
from workbench.records import events

FAIL_AT_STEP = 60       # the step (counted from the start) at which rank 1 fails
CHECKPOINT_EVERY = 1    # epochs between checkpoints; try 2 or 3
job = dict(engine="horovod", np=2, model="mlp", dataset="digits", epochs=3, batch_size=32,
           lr=0.05, momentum=0.9, threads_per_rank=1, checkpoint_every=CHECKPOINT_EVERY)
reference = workbench.start(JobConfig(**{**job, "engine": "serial", "np": 1, "batch_size": 64},
                                      cpu_bind="none"))
broken = workbench.start(JobConfig(**job, fail_rank=1, fail_at_step=FAIL_AT_STEP))
broken.wait(), reference.wait()
failure = broken.summary["failure"]
print(f"{broken.status}, in rank {failure['rank']}: {failure['error']}")
saved = events(broken.metrics(), "checkpoint")
table(saved, [("epochs_done", "epochs done", "d"), ("steps_done", "steps done", "d"),
              ("save_s", "seconds to save", ".4f")], caption="Checkpoints before the failure")
"""),
    md(r"""
The job ended as soon as rank 1 failed, naming it: rank 0, waiting in an allreduce for a
gradient that would never come, was stopped too. Now continue the failed run from its last
checkpoint (`workbench run --resume RUN_ID` in a terminal). The new run takes the old run's
configuration, without the fault, and starts at the epoch after the checkpoint:
"""),
    code(r"""
resumed = workbench.start(JobConfig(resume=broken.run_id))
resumed.wait()
redone = FAIL_AT_STEP - (saved[-1]["steps_done"] if saved else 0)
mine, theirs = resumed.record().model_state(), reference.record().model_state()
gap = max(float((mine[k] - theirs[k]).abs().max()) for k in mine)
print(f"resumed: {resumed.status}; {redone} steps were lost and done again")
print(f"largest difference from the uninterrupted run's parameters: {gap:.1e}")
"""),
    md(r"""
The resumed run ends with the parameters of the run that never failed (to rounding): the
checkpoint holds everything the rest of the run depends on. The model and the optimizer's
state, and the epoch, because each epoch's sample order is drawn from the seed and the epoch
number. Without the optimizer's state the momentum would restart from zero and the runs
would part.

### How often to checkpoint?

Each checkpoint costs the time to save it, $C$; each failure loses the work since the last
checkpoint, on average half an interval $T$. With a failure every $M$ seconds on average
(the job's *mean time between failures*: one machine's MTBF divided by the number of
machines, so large jobs fail often), the share of time lost is about
$C/T + T/(2M)$, smallest at Young's interval $T^* = \sqrt{2CM}$ (Young, CACM 1974).
Our checkpoints take milliseconds; a large model written to shared storage can take
minutes:
"""),
    code(r"""
from workbench.synchronization.checkpoint_interval import checkpoint_overhead, young_interval

SAVE_S = 60.0             # seconds to save one checkpoint of a large model
MTBF_HOURS = [2, 24, 240] # mean hours between failures of the whole job
minutes = [1, 2, 5, 10, 20, 40, 80, 160, 320]
curves("Share of the job lost to checkpoints and failures", "minutes between checkpoints (log)",
       "share of time lost (log)",
       {f"a failure every {h} h": (minutes, [checkpoint_overhead(60 * m, SAVE_S, 3600 * h)
                                       for m in minutes]) for h in MTBF_HOURS},
       log_x=True, log_y=True, markers=True)
"""),
    code(r"""
table([{"mtbf": h, "best": young_interval(SAVE_S, 3600 * h) / 60,
        "lost": checkpoint_overhead(young_interval(SAVE_S, 3600 * h), SAVE_S, 3600 * h)}
       for h in MTBF_HOURS],
      [("mtbf", "hours between failures", "d"), ("best", "best interval (min)", ".0f"),
       ("lost", "share of time lost", ".1%")])
"""),
    md(r"""
Checkpointing too often wastes time saving; too rarely, time redoing lost work. The more
often the job fails, the more often it should save.

### Elastic training

Resuming by hand restarts the whole job. Two tools do it for you:

- **torchrun restarts.** `torchrun --max-restarts=3 --nnodes=1:4 ...` restarts every worker
  when one fails, up to 3 times, and accepts from 1 to 4 machines. It does not save
  anything itself: the training script must load its last checkpoint when it starts, as
  `resume` does here.
- **Horovod Elastic.** `horovodrun -np 8 --min-np 4 --max-np 12
  --host-discovery-script ./hosts.sh` runs a function wrapped in `hvd.elastic.run`. The
  state to keep (model, optimizer, epoch, batch) lives in an `hvd.elastic.TorchState` that
  the script `commit()`s every few steps, in memory. When a worker fails, the survivors roll
  back to the last commit, agree on a new ring without the lost worker and go on, without
  restarting a process; workers that appear later join at the next commit.

Either way the world size may change, and with it the global batch: the learning rate
(notebook 06) and the data sharding must follow.

## Appendix (optional): Hogwild!, lock-free updates in shared memory

An optional lab: on a machine with two cores, lock-free and locked updates take about the
same time, so it shows *that* Hogwild! loses nothing on a sparse problem, not how much
faster it is on many cores.

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

## Summary

- **Synchronous** SGD: every worker computes on the same parameters and waits for the
  others; replicas stay consistent, equivalent to large-batch SGD; one straggler slows
  everyone.
- **Asynchronous** SGD: no waiting, but gradients are stale by $\tau$ updates and the model
  is inconsistent across workers; fast workers weigh more. Staleness-aware learning rates
  (Zhang et al. 2016) soften this.
- **Backup workers** (Chen et al. 2016) keep synchronous SGD and drop the slowest gradients.
- A **failed rank** ends a synchronous job. Checkpoints (model, optimizer state, epoch) let
  it resume to the same result; save about every $\sqrt{2CM}$ seconds. Elastic training
  (torchrun restarts, Horovod Elastic) automates the restart.
- **Hogwild!** (appendix): lock-free updates to shared memory work when gradients are sparse.

## Exercises

1. [Measure staleness](exercises/08_staleness.ipynb) in a parameter server's log.
2. Set `WORKERS = 4` in the parameter-server lab. How do the staleness histogram and the
   final loss of async change? Add the staleness-aware setup and compare.
3. Raise `DELAY_S` to 0.2 and rerun the straggler job. How much of rank 0's step is waiting?
4. Set `CHECKPOINT_EVERY = 2` in the faults lab. How many steps are lost now, and is the
   resumed run still equal to the uninterrupted one?

## Check yourself

1. A worker pulled the parameters at version 40 and its gradient is applied at version 43.
   What is its staleness, and what does it mean for the update?
2. Why does one slow GPU slow down a synchronous 64-GPU job, but not an asynchronous one?
3. What do backup workers give up, compared with plain synchronous SGD?
4. A job checkpoints every hour and fails, on average, once a day. On average, how much work
   does a failure lose, and what must a checkpoint hold for the resumed run to match?

<details><summary>Answers</summary>

1. $\tau = 3$: the gradient was computed for parameters three updates older than the ones it
   changes.
2. In synchronous SGD every step's allreduce needs every gradient, so all 63 others wait for
   the slow one at every step. In asynchronous SGD each worker's update is applied on its
   own; the slow worker only contributes fewer (and staler) gradients.
3. The work of the dropped workers: $b$ extra workers compute gradients that are thrown
   away, and each step uses $N$ of $N + b$ gradients.
4. Half an interval, 30 minutes, on average. The model, the optimizer's state (momentum,
   Adam's moments) and what the data order depends on (the epoch, the seed).
</details>
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="synchronization")
"""),
]
