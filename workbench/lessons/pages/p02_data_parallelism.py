"""Notebook 02: data parallelism with Horovod: shards, averaged gradients, Horovod's steps."""

from workbench.lessons.pages._p02_hands_on import ENGINES_COMPARED, YOUR_OWN_RANKS
from workbench.notebooks import code, md

NAME = "02_data_parallelism_horovod.ipynb"

CELLS = [
    md(r"""
# 02 · Data parallelism with Horovod

**Goals.** After this notebook you can
- explain how data parallelism splits the work: one model replica per worker, one shard of
  every batch per replica,
- prove that averaging the workers' gradients gives exactly the gradient of the whole batch,
- name the steps Horovod's documentation lists, and what each one is for,
- check, on a live job, that $N$ workers with batch $b$ train exactly like one worker with
  batch $N \cdot b$.

**Time:** about 45 minutes.
"""),
    md(r"""
## 1. The idea

In **data parallelism** every worker holds a full copy (*replica*) of the same model, and
the training data is divided between the workers. At each step every worker

1. takes its own part (*shard*) of the batch,
2. computes predictions, the loss and the gradient on that shard,
3. **exchanges** its gradient with the other workers so that every worker ends up with the
   same averaged gradient,
4. applies the same update to its replica.

Step 3 is what keeps the replicas *consistent*: each worker only sees its own samples, yet
all of them apply the update that one processor would apply to the whole batch. Without it
the replicas would drift apart into different models.

Strengths: it scales with the amount of data, it is simple, and its communication per step
depends on the size of the *model*, not of the data, so it pays off when there is a lot of
computation per parameter, as in convolutional networks on large datasets. Limit: in this
plain form the whole model, with its gradients and optimizer state, must fit on every worker.
Sharded data parallelism (ZeRO-3, Rajbhandari et al. 2020; FSDP, Zhao et al. 2023) keeps
only a shard of that state on each worker; notebooks 07 and 08 deal with models that do not
fit.
"""),
    md(r"""
## 2. Why the gradients are *averaged*

Let the global batch $B$ of $N \cdot b$ samples be cut into $N$ shards $B_1, \dots, B_N$ of
$b$ samples. The loss of the batch is the mean over its samples, so

$$L_B = \frac{1}{Nb} \sum_{i \in B} \ell_i
      = \frac{1}{N} \sum_{k=1}^{N} \underbrace{\frac{1}{b} \sum_{i \in B_k} \ell_i}_{L_{B_k}}
\qquad\Longrightarrow\qquad
\nabla L_B = \frac{1}{N} \sum_{k=1}^{N} \nabla L_{B_k}.$$

The gradient of the whole batch *is* the average of the shards' gradients: data
parallelism with averaged gradients is exact, not an approximation. Summing instead of
averaging would make every gradient $N$ times too large: for plain SGD that is the same as
an $N$ times larger learning rate, while Adam, which divides by the gradient's running
size, barely notices (Kingma & Ba 2015). One caveat: the derivation needs a loss
that is a mean of per-sample terms. **Batch normalization** breaks that: each worker
normalizes with the mean and variance of its own $b$ samples, not of all $N b$, so the
forward pass itself differs. `SyncBatchNorm` (PyTorch; `hvd.SyncBatchNorm` in Horovod)
computes those statistics over the global batch and restores the equivalence. Checked
numerically for one batch of 32 digits and the softmax regression of notebook 01:
"""),
    code(r"""
import dataclasses

import workbench
from workbench.lessons import sgd
from workbench.lessons.runs import parameter_gap, step_losses
from workbench.lessons.show import curves, source, table, until_finished
from workbench.ui import TrainingPanel, charts

charts.load_bokehjs()

table([sgd.shard_gradients(batch_size=32, world_size=n) for n in (2, 4, 8)],
      [("world_size", "workers N", "d"), ("max_diff_average", "|average − whole|", ".1e"),
       ("max_diff_sum", "|sum − whole|", ".3f"), ("gradient_max", "largest gradient", ".3f")],
      caption="Gradient of a batch of 32 vs the N shard gradients combined")
"""),
    md(r"""
The average matches to about $10^{-8}$ (float32 rounding); the sum is off by as much as the
gradient itself.

## 3. Sharding: who trains on which samples

The workbench's training loop splits each epoch like this (every rank runs the same code,
knowing only its own `rank` and the `world_size`):
"""),
    code(r"""
source("workbench.training.sharding", ("def epoch_order", "def holdout_split"))
"""),
    code(r"""
from workbench.training.sharding import epoch_order, shard

order = epoch_order(12, seed=0, epoch=0)  # the same permutation on every rank
for step in range(2):
    for rank in range(2):
        print(f"step {step}, rank {rank}: samples {shard(order, step, rank, 2, 3).tolist()}")
"""),
    md(r"""
Every rank draws the *same* shuffled order (same seed), cuts it into global batches of
$N \cdot b$ samples, and takes its own slice of $b$. Every sample is used once per epoch, by
exactly one rank, and all ranks take the same number of steps, which synchronous training
requires: a rank with one extra step would wait in an allreduce that no other rank joins,
until Horovod reports that a peer has shut down or gloo and NCCL give up after their
timeout, and the job fails.

## 4. Exchanging gradients: the allreduce

The collective operation that combines one vector from every worker and gives every worker
the result is the **allreduce**. Horovod calls it with `hvd.allreduce(g, op=hvd.Average)`,
PyTorch with `torch.distributed.all_reduce(g)` (a sum, divided by the world size
afterwards). How an allreduce moves so little data per worker (the ring algorithm) is part
of notebook 04.

## 5. Horovod's documented steps

[Horovod](https://github.com/horovod/horovod) (Sergeev & Del Balso 2018, "Horovod: fast and
easy distributed deep learning in TensorFlow", arXiv:1802.05799) turns a one-worker training
script into a data-parallel one with a few added lines, for PyTorch, TensorFlow, Keras and
MXNet. This is the program each rank of a workbench job runs, top to bottom. The same file
runs by hand, `horovodrun -np 2 --gloo -H localhost:2 python -m
workbench.training.horovod_rank --epochs 1`; its first lines say where its settings and its
record come from: `job_config` reads the job's `config.json` (or, by hand, the flags of
`workbench run`), and `job_record` opens the run folder that the charts read (by hand, rank 0
makes one and broadcasts its name). Started by the workbench, the rank runs inside a small
wrapper (`workbench/rank/wrapper.py`) that keeps its pid file, log and exit record, so
that a failing or forgotten rank is always found and ended.
"""),
    code(r"""
source("workbench.training.horovod_rank", ("def main", "if __name__"))
"""),
    md(r"""
`main()` ends in `train(...)`, the loop every engine shares; each step is one call of
`train_step(...)`, the whole step, plain SGD, shown below. Only `sync`, the engine's
*synchronizer*, differs. Horovod's is shown below the step: its
`wait_for_gradients` is the wrapped optimizer's `synchronize()`, which waits for the
allreduces that `backward()` started, and `optimizer.step()` then runs inside
`skip_synchronize()`, because a plain `step()` would allreduce once more.
"""),
    code(r"""
source("workbench.training.loop", ("def train_step", "def autocast"))
"""),
    code(r"""
source("workbench.training.horovod_rank", ("class HorovodSync", "    def allreduce_sum"))
"""),
    md(r"""
Horovod's documentation (`docs/pytorch.rst` and the README) lists six steps:

1. **`hvd.init()`**: join the job; learn `rank`, `size` and `local_rank`.
2. **Pin a device**: one GPU per local rank (on CPUs, `threads_per_rank` threads).
3. **Scale the learning rate** by the number of workers, with a warm-up (notebook 01; the
   workbench leaves `lr` as given).
4. **Wrap the optimizer** in `hvd.DistributedOptimizer`: each gradient, once `backward()`
   makes it, is queued for an allreduce that a background thread *negotiates* (below).
5. **Broadcast the initial state** from rank 0.
6. **Checkpoint on rank 0 only**.

**Sharding the data is your job** (section 3). Step 4, for two ranks:
"""),
    code(r"""
from workbench.ui.negotiation_picture import NegotiationPicture

NegotiationPicture()   # play the cycles; then slow rank 1 down, or shrink the fusion buffer
"""),
    md(r"""
Every cycle (`HOROVOD_CYCLE_TIME`, 1 ms) the ranks tell rank 0 which gradients are ready;
those ready on every rank go, packed into buffers of up to `HOROVOD_FUSION_THRESHOLD` bytes
(*Tensor Fusion*: 128 MiB by default in Horovod 0.28.1).
Notebook 06 shows these negotiations on a timeline. From a terminal, each engine's ranks
also run under their own launcher, with `workbench run`'s flags:
"""),
    code(r"""
from workbench.engines import ENGINES

for engine, ranks in [("horovod", 2), ("torch", 2), ("naive", 2), ("serial", 1)]:
    print(" ".join(ENGINES[engine].plain_command(ranks)), "--epochs 1")
"""),
    md(r"""
On several machines, `horovodrun -H host1:4,host2:4` places 4 ranks on each.

**PyTorch DDP** does the same with other names (Li et al., "PyTorch Distributed: Experiences
on Accelerating Data Parallel Training", VLDB 2020, arXiv:2006.15704):
`init_process_group` (step 1), `DistributedDataParallel(model)` (steps 4 and 5: it
broadcasts the parameters and allreduces gradients in *buckets* while `backward()` runs:
the first bucket is capped at 1 MiB so that communication starts early, the others at
`bucket_cap_mb` = 25 MiB; no negotiation is needed, as every rank registers the same buckets
in the same order) and `DistributedSampler` (the sharding). TensorFlow offers `tf.distribute`
strategies. The workbench runs both Horovod and DDP (`engine="torch"`), with the same training loop.

## 6. Live: $N$ workers × batch $b$ = one worker × batch $N \cdot b$

If all of the above is exact, a Horovod job with 2 ranks and a batch of 16 per rank must
follow *the same trajectory* as one process with a batch of 32: same samples per step, same
gradients, same updates. Let us check on real jobs. The panel holds the Horovod job:
"""),
    code(r"""
EPOCHS = 1          # more epochs: longer curves (the trajectories still agree)
MODEL = "logreg"    # or "mlp": any model without randomness in its forward pass works

panel = TrainingPanel(engine="horovod", np=2, model=MODEL, dataset="digits", epochs=EPOCHS,
                      batch_size=16, lr=0.1, threads_per_rank=1)
panel
"""),
    md(r"""
Press **Start**, or run the next cell, which presses it for you. The cell also starts the
serial baseline with the panel's settings and a batch of ranks × batch per rank. Each job
gets cores of its own; where there are not enough for both (2 ranks + 1 process on a 2-core
machine), the second waits in the machine's queue, and the panel says so. Only what they
learn is compared here, not their speed.
"""),
    code(r"""
cfg = panel.config()  # the settings in the panel, checked
serial = workbench.start(dataclasses.replace(cfg, engine="serial", np=1,
                                             batch_size=cfg.np * cfg.batch_size))
panel.start_button.click()
await until_finished(panel)
serial.wait(timeout=400)
print(f"Horovod: {panel.job.status}; serial: {serial.status}")
"""),
    code(r"""
gap = parameter_gap(panel.job, serial)
print(f"largest difference between the final parameters of the two runs: {gap:.1e}")
assert gap < 1e-5, "the two runs did not follow the same trajectory"

labels = {"serial": f"1 process, batch {serial.config.batch_size}",
          "horovod": f"Horovod, {cfg.np} ranks × {cfg.batch_size}"}
curves("Loss of each global batch", "step", "loss",
       {labels["serial"]: step_losses(serial), labels["horovod"]: step_losses(panel.job)},
       dashed=[labels["horovod"]])
"""),
    md(r"""
The two loss curves lie on top of each other (the dashed one is Horovod's) and the final
parameters agree to about $10^{-7}$. They are not bit-identical because floating-point
addition is not associative: a sum over 32 samples and an average of two sums over 16 round
differently.

**Reading the panel.** The thin lines are each rank's loss on *its own shard*; they differ
because the shards hold different digits. The thick line, their mean, is the loss of the
whole global batch: the curve above. The bars show that for a model this small most of each
step is spent *synchronizing*: there is little computation to hide the communication behind.
And the status line shows that starting the processes took longer than training. Both
effects shrink as models grow (notebook 06 measures them).
"""),
    *ENGINES_COMPARED,
    *YOUR_OWN_RANKS,
    md(r"""
## Summary

- Data parallelism: the same model on every worker, a different shard of every batch on
  each, and an allreduce that averages the gradients so that every replica applies the same
  update.
- Averaging is exact: $\nabla L_B = \frac1N \sum_k \nabla L_{B_k}$. $N$ workers with batch $b$
  train like one worker with batch $N \cdot b$, which we verified on live jobs; with
  BatchNorm only if its statistics are synchronized too (SyncBatchNorm).
- Horovod's documented steps: `init`, pin a device, scale the learning rate, wrap the
  optimizer (allreduce overlapped with backward, negotiated every cycle, Tensor Fusion),
  broadcast the initial state, checkpoint on rank 0 only. Sharding the data is yours to do.
  DDP does the same with buckets.
- Averaging each gradient with a ring after `backward()` (the naive engine) gives the same
  update, later: buckets and overlap with the backward pass are what DDP and Horovod add.
- The global batch grows with the number of workers, so the learning rate must grow too
  (Goyal et al. 2017).

## Exercises

1. [Average the gradients with an allreduce](exercises/01_average_gradients.ipynb).
2. [Shard a dataset between ranks](exercises/02_shard_a_dataset.ipynb).
3. In the panel, choose 1 rank and a batch of 32, press Start, and rerun the two cells of
   section 6: the serial baseline now also has batch 32. Then try `engine = torch`.
4. Set `MODEL = "mlp"` and 3 epochs. Do the trajectories still agree? Which share of a step
   is synchronization now?
5. [Make this loop data-parallel](exercises/11_make_this_loop_data_parallel.ipynb), with
   Horovod and with DDP, checked on real ranks.

## Check yourself

1. Four workers each compute the mean loss gradient on 64 samples. What single-worker batch
   size does their averaged update correspond to?
2. A student sums the gradients with an allreduce and forgets to divide. What does the job
   do instead, in terms of the learning rate?
3. Why does Horovod broadcast the parameters from rank 0 if every rank uses the same seed?
4. What does `hvd.DistributedOptimizer` overlap, and why does that matter?

<details><summary>Answers</summary>

1. A batch of $4 \times 64 = 256$ samples.
2. Every gradient is 4 times too large. With plain SGD that is a learning rate 4 times
   too large; Adam divides by the gradient's running size, so its steps barely change.
3. The seed is not a guarantee: a different initialisation order, a library version, or a
   checkpoint loaded on one rank only would give different starting points, and the replicas
   would never agree. The broadcast makes it certain, once, at almost no cost.
4. The allreduce of each gradient with the rest of the backward pass: what is hidden behind
   computation no longer adds its whole time to the step. It is not free: gloo adds on the
   same cores and NCCL runs kernels on the same GPU, and the last gradients' allreduce still
   waits for the end of backward.
</details>
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="data_parallelism_horovod")
"""),
]
