"""Notebook 06: speedup, efficiency and scalability, measured, explained and extrapolated."""

from workbench.notebooks import code, md, md_table

NAME = "06_speedup_efficiency_scalability.ipynb"

CELLS = [
    md(r"""
# 06 · Speedup, efficiency and scalability

**Goals.** After this notebook you can
- define speedup, efficiency and scalability and compute them from measured runs,
- tell strong scaling from weak scaling, and Amdahl's law from Gustafson's,
- use the Karp–Flatt metric to tell serial code from communication overhead,
- read a Horovod timeline to see where the time of a step goes,
- predict efficiency at hundreds of workers with a cost model, and check it against
  published results,
- measure speedup on the time to reach a target accuracy, and say when it differs from the
  speedup in samples per second.

**Time:** about 65 minutes.
"""),
    md(r"""
## 1. Two kinds of performance

A model is judged by its **accuracy**, which does not depend on the hardware it was trained
on: it is the number used to compare models. (With one caveat: the training recipe must
stay the same. Asynchronous SGD trains on stale gradients, and a much larger global batch
takes fewer, larger steps; both can change what is learned, which is why large-batch
training needs the linear scaling rule and a warm-up.) Distributed training is about the
other kind,
the **speed** of the computation, which depends entirely on the platform: the cluster's
configuration, the type of network, and how efficiently the framework uses them. We measure
it with three numbers:

- **Speedup**: sequential time over parallel time for the same work, $S(p) = T_1 / T_p$.
- **Efficiency**: speedup over the number of workers, $E(p) = S(p)/p$. $E = 1$ is perfect
  (linear) scaling; $E = 0.7$ means 30% of the workers' time did no useful work.
- **Scalability**: efficiency *as a function of* a growing number of workers: a curve, not
  a single number.

For example, an epoch takes 100 s on one worker and 30 s on four:
"""),
    code(r"""
from pathlib import Path

from workbench.lessons.show import curves, figure_widget, table, until_finished
from workbench.scaling import metrics, simulate
from workbench.ui import ScalingPanel, charts

charts.load_bokehjs()

s = metrics.speedup(100.0, 30.0)
print(f"speedup {s:.2f}, efficiency {metrics.efficiency(s, 4):.2f}")
"""),
    md(r"""
**Strong scaling** keeps the *total* work fixed (same data, same global batch, split over
more workers): ideally the time falls as $1/p$. **Weak scaling** keeps the work *per worker*
fixed (each worker keeps its batch, so the problem grows with $p$): ideally the time stays
flat. Published GPU benchmarks, such as Horovod's, are weak scaling. Either way the workbench
computes speedup from throughput (samples per second), and gives every rank the same number
of CPU threads whatever $p$ is, so a speedup comes from more workers, not from more threads.

## 2. Measure: the scaling panel

The panel runs the same job at each number of workers, one run after the other (never side
by side, so they do not compete for the cores), and plots each point as soon as its run
ends: speedup with the ideal line $S = p$, efficiency, and scalability extrapolated with
Amdahl's law (strong scaling) or Gustafson's (weak). Each law has one parameter, the serial
share, so with only $p = 1$ and $2$ it fits the one measured speedup exactly: the curve
beyond $p = 2$ is what the law *assumes* (a fixed serial share, no overhead growing with
$p$), not something the runs showed. More worker counts test the assumption. Two model
presets:

- **comm-bound**: a wide MLP (4.7 million parameters) on small inputs: much to send, little
  to compute per step.
- **compute-bound**: a CNN with global average pooling (85 thousand parameters) that
  computes a lot per parameter.

The runs record Horovod's timeline too (section 4).
"""),
    code(r"""
WORKERS = "1,2"   # worker counts to compare; "1,2,3" oversubscribes a 2-core machine
STEPS = 20        # training steps per run: more steps give steadier numbers

panel = ScalingPanel(engine="horovod", np_values=WORKERS, preset="comm-bound", mode="strong",
                     epochs=1, max_steps=STEPS, timeline=True)
panel
"""),
    md(r"""
Press **Run** (or run the next cell, which presses it for you) and watch the points arrive.
"""),
    code(r"""
panel.run_button.click()
await until_finished(panel, timeout_s=600)
rows = panel.sweep.rows()
table(rows, [("np", "workers", "d"), ("samples_per_s", "samples/s", ".0f"),
             ("speedup", "speedup", ".2f"), ("efficiency", "efficiency", ".2f")])
"""),
    md(r"""
The comm-bound model scales badly: every step, each rank must send its 19 MB of gradients,
and on one machine with gloo the two ranks also share the cores that do the copying and
adding. It can even be *slower* than one worker (a speedup below 1): then communication
costs more than it saves, and the panel says so instead of drawing a fit, since neither law
of section 3 can give a speedup below 1. Choose **compute-bound** in
the panel and press **Run** again: its gradients are tiny next to its computation, and its
efficiency is much higher. Then try **weak** scaling.

Two details of the set-up matter on a small machine. Each rank is bound to its own core
(`cpu_bind="core"`, like `mpirun --bind-to core`): a synchronous step waits for its slowest
rank, so one rank that the operating system moves or delays holds up all of them. And the
compute-bound preset wakes Horovod's background thread every 5 ms instead of every 1 ms
(`cycle_time_ms`), which leaves more of each core to computing. With `WORKERS = "1,2,3"`,
two ranks share a core; in a terminal, compare `workbench scale --np 1,2,3 --cpu-bind none`
with the default to see what unbound ranks cost.

## 3. The laws that explain the curves

Both laws split a run into a serial part and a parallel part, but they measure the serial
share against *different* times, so they need two symbols:

- **Amdahl** (1967), fixed total work: with $s_A$ the serial share of the **one-worker**
  time, $S(p) = \dfrac{1}{s_A + (1-s_A)/p}$. However many workers, $S < 1/s_A$: with
  $s_A = 0.05$ the speedup never reaches 20.
- **Gustafson** (1988), work growing with $p$: with $s_G$ the serial share of the
  **$p$-worker** time, $S(p) = s_G + (1-s_G)\,p$. The serial part stays the same while the
  parallel part grows, so the *scaled* speedup keeps growing.

For one and the same run the two shares differ: a serial 5% of the time on 64 workers is a
far smaller share of the time one worker would need for that work.
"""),
    code(r"""
SERIAL = [0.5, 0.1, 0.05, 0.01]    # serial shares s_A (Amdahl) and s_G (Gustafson)
ps = [2 ** k for k in range(11)]   # 1 ... 1024 workers
# metrics.amdahl and metrics.gustafson take the parallel share, 1 - s
curves("Amdahl: fixed total work", "workers p (log)", "speedup (log)",
       {f"s_A = {s}": (ps, [metrics.amdahl(p, 1 - s) for p in ps]) for s in SERIAL},
       log_x=True, log_y=True, reference=(ps, ps, "ideal S = p"))
"""),
    code(r"""
curves("Gustafson: work grows with p", "workers p (log)", "scaled speedup (log)",
       {f"s_G = {s}": (ps, [metrics.gustafson(p, 1 - s) for p in ps]) for s in SERIAL},
       log_x=True, log_y=True, reference=(ps, ps, "ideal S = p"))
"""),
    md(r"""
**Karp–Flatt** (1990) turns a measured speedup back into a serial fraction,

$$e(p) = \frac{1/S - 1/p}{1 - 1/p}.$$

It is Amdahl's $s_A$ solved from one measured point, so it is meant for **strong scaling**
(the workbench shows no $e$ for weak-scaling runs, where the work grows with $p$). If $e$
stays flat as $p$ grows, the job has a true serial part (Amdahl). If $e$ *grows* with $p$,
the loss is an overhead that grows with the number of workers: in data-parallel training,
communication and waiting. An $e$ above 1 means the parallel run was slower than one
worker. Your strong-scaling runs of section 2 (the panel's table shows $e$ too):

## 4. Where the time goes: the Horovod timeline

With `timeline=True` Horovod's coordinator writes what happened to every gradient tensor.
Horovod's background thread works in cycles (every 1 ms by default): in each cycle the
ranks *negotiate*, reporting which tensors they have ready, and only tensors ready on every
rank are fused and reduced. Painted per rank: **wait** (this rank's gradient was ready,
another rank's was not), **negotiation** (the ranks agreeing on what to reduce next),
**allreduce** (the data moving) and **compute**. Only the first three are recorded: Horovod
knows nothing of the forward and backward passes, so "compute" is *inferred*, the time of
the step in which none of the others was happening. Recording the timeline costs a little
time itself. Use the zoom tools to look at a few steps.
"""),
    code(r"""
from workbench.scaling.timeline import load_timeline, rank_activities, time_shares
from workbench.ui.timeline_charts import gantt_figure

run_dir = Path(panel.points[-1].summary["run_dir"])   # the run with the most workers
timeline = load_timeline(run_dir / "timeline.json")
figure_widget(gantt_figure(timeline))
"""),
    code(r"""
shares = time_shares(rank_activities(timeline))
kinds = ["compute", "wait", "negotiation", "allreduce"]
table([{"rank": lane, **{k: v.get(k, 0.0) / sum(v.values()) for k in kinds}}
       for lane, v in shares.items()],
      [("rank", "rank", "s")] + [(k, k, ".0%") for k in kinds],
      caption="Share of each rank's time")
"""),
    md(r"""
## 5. Out to 1,024 workers: a cost model against published results

We cannot run 512 GPUs here, but we can predict them. One synchronous step takes

$$t_p = t_{\text{compute}} + t_{\text{allreduce}}(p) - t_{\text{hidden}},$$

with the ring allreduce of notebook 04, $2(p-1)\alpha + 2\frac{p-1}{p} n \beta$, for $n$ bytes of
gradients, and $t_{\text{hidden}}$ the part of the allreduce that overlaps the backward pass
(Horovod and DDP start reducing a layer's gradient as soon as it is ready). In weak scaling
$S(p) = p \cdot t_1 / t_p$.

Horovod's benchmark (Sergeev & Del Balso 2018, arXiv:1802.05799, and the benchmarks page of
its documentation) ran 128 servers with 4 Pascal GPUs each, 512 GPUs, on 25 Gbit/s RoCE:
about **90%** efficiency for Inception V3 and ResNet-101, about **68%** for VGG-16. The
simulator's presets hold each model's parameters and measured compute time per batch; its
one free knob, the overlap, was set once so that ResNet-101 lands at 90%.
"""),
    code(r"""
PRESETS = ["resnet101-25gbe", "inception3-25gbe", "vgg16-25gbe", "vgg16-25gbe-ps"]
rows = []
for name in PRESETS:
    preset = simulate.PRESETS[name]
    rows.append({"preset": name, "params": preset.workload.params / 1e6,
                 "compute": preset.workload.compute_time_s, "algorithm": preset.algorithm,
                 "predicted": preset.predict(512).efficiency,
                 "published": preset.published_efficiency})
table(rows, [("preset", "setup", "s"), ("params", "parameters (M)", ".1f"),
             ("compute", "compute per batch (s)", ".2f"), ("algorithm", "allreduce", "s"),
             ("predicted", "predicted at 512", ".2f"), ("published", "published", ".2f")])
"""),
    code(r"""
workers = [2 ** k for k in range(11)]
curves("Predicted efficiency, 25 Gbit/s, weak scaling", "workers (log)", "efficiency",
       {name: (workers, [simulate.PRESETS[name].predict(p).efficiency for p in workers])
        for name in PRESETS}, log_x=True, markers=True)
"""),
    code(r"""
from workbench.ui.scaling_report import step_time_figure

figure_widget(step_time_figure(PRESETS[:3], 512))
"""),
    md(r"""
- **ResNet-101 and Inception V3** keep about 90%: a long computation per batch, and most of
  the allreduce hidden behind the backward pass.
- **VGG-16** falls to about two thirds (predicted 66%, published 68%): 138 million
  parameters, 124 million in its fully connected layers, three times ResNet-101's bytes for
  less compute *time* (15.5 GFLOPs per image against 7.8, but its 3×3 convolutions run near
  the GPU's peak).
- **One parameter server** collapses: its link carries $2pn$ bytes.

Calibrate the model to *this* machine with `workbench bench allreduce --np 2` and
`workbench simulate`.
"""),
    md(r"""
## 6. Speedup on the time to a solution

We want a trained model, not samples per second: the **time to a solution**, here until the
held-out accuracy first reaches a target (`workbench scale --target-accuracy 0.93`). Four
runs of one MLP, the 2-worker ones on warm ranks (notebook 02):

""" + md_table(
        ("run", "workers × batch", "learning rate"),
        ("1", "1 × 32", "0.1"),
        ("2, strong", "2 × 16", "0.1"),
        ("3, weak", "2 × 32", "0.1"),
        ("4, weak + linear scaling rule", "2 × 32", "0.2, warmed up over half an epoch"),
    ) + r"""

Run 4 changes two things at once, the rate and the warm-up.
"""),
    code(r"""
import dataclasses

import workbench
from workbench import JobConfig
from workbench.scaling.sweep import Sweep, Target, compare_to_first

TARGET = Target(accuracy=0.93)   # held-out accuracy to reach; 0.95 takes longer
base = JobConfig(engine="torch", model="mlp", width=64, dataset="digits", batch_size=32,
                 lr=0.1, epochs=3, threads_per_rank=1,  # weak runs: epochs x 2, same steps
                 cpu_bind="none")  # like the pool's ranks, which then run the 2-worker runs
pool = workbench.ranks(np=2, engine="torch", cpu_bind="none").wait_ready()
"""),
    code(r"""
sweeps = {"strong": Sweep(base, [1, 2], "strong", target=TARGET),
          "weak, same lr": Sweep(base, [2], "weak", target=TARGET),
          "weak, lr x 2 + warm-up": Sweep(dataclasses.replace(base, warmup_epochs=0.5), [2],
                                          "weak", target=TARGET, scale_lr=True)}
for sweep in sweeps.values():
    sweep.run()
pool.close()
table(compare_to_first(sweeps), [
    ("run", "run", "s"), ("throughput_speedup", "samples/s speedup", ".2f"),
    ("time_to_target_s", "time to target (s)", ".2f"),
    ("target_speedup", "time-to-target speedup", ".2f")])
"""),
    md(r"""
- **Strong scaling**: the two runs take the same steps (N ranks with batch b follow one
  process with batch N·b), so the time-to-target speedup equals the samples/s speedup, up to
  the coarseness of checking once per epoch.
- **Weak scaling, same learning rate**: twice the samples per second, but each step of the
  larger batch moves the weights about as far as a step of the small one, so the target
  needs about as many *steps*: here twice the epochs. The time-to-target speedup is far
  below the throughput speedup, often below 1.
- **Linear scaling rule + warm-up**: twice the learning rate for twice the batch halves the
  steps needed, and the speedup comes back. Run 4 changed the rate and added a warm-up at
  once, so by itself it cannot say how much of the gain is the rule's; rerunning run 4
  with `warmup_epochs=0` separates the two on this model.

How far does the rule go? One process with global batch B takes the steps that B/b workers
with batch b take, so we can count the steps to the target for many batch sizes without
launching ranks (`workbench.scaling.critical_batch`):
"""),
    code(r"""
from workbench.scaling.critical_batch import batch_scan

BATCHES = [32, 64, 128, 256, 512, 1024]   # global batch sizes to try
scan_base = dataclasses.replace(base, warmup_epochs=0.5)
scaled = batch_scan(scan_base, BATCHES, TARGET.accuracy, max_epochs=16)
same = {r["batch_size"]: r["steps"] for r in batch_scan(
    scan_base, BATCHES[:3], TARGET.accuracy, scale_lr=False, max_epochs=16)}
table([{**r, "same_lr": same.get(r["batch_size"])} for r in scaled],
      [("batch_size", "global batch", "d"), ("lr", "scaled lr", ".2f"),
       ("steps", "steps (lr scaled)", "d"), ("samples", "samples (lr scaled)", "d"),
       ("same_lr", "steps (same lr)", "d")])
"""),
    md(r"""
With the learning rate scaled, the steps needed halve each time the batch doubles, and the
*samples* needed stay about constant: every worker added is used. Past a **critical batch
size** the steps stop halving and the samples needed grow: the extra workers compute
gradients that no longer shorten training, and a still larger rate diverges (a dash means
the run never reached the target). With the same learning rate the steps hardly move.
McCandlish et al. (2018) predict the critical batch from the gradient noise scale;
Shallue et al. (2019) measured the same three regimes (perfect scaling, diminishing
returns, no benefit) on many models and data sets. Goyal et al. (2017) trained ResNet-50 on
ImageNet with batches up to 8,192 at the same accuracy this way, in one hour on 256 GPUs.
So weak scaling shortens training almost in proportion to the workers while the global
batch stays well below the critical batch size, and only if the learning rate grows with
it; around the critical batch the returns diminish, and well beyond it more workers hardly
shorten training at all.

## Summary

- Speedup $S = T_1/T_p$, efficiency $E = S/p$, scalability: $E$ as $p$ grows. Speed depends on
  the platform; accuracy does not.
- Strong scaling fixes the total work (Amdahl: $S < 1/s_A$, $s_A$ a share of the one-worker
  time); weak scaling fixes the work per worker (Gustafson: $S$ grows with $p$, $s_G$ a
  share of the $p$-worker time).
- A Karp–Flatt serial fraction (strong scaling) that grows with $p$ points at communication
  overhead; above 1, the run was slower than one worker.
- What limits data parallelism is the ratio of bytes to send to computation per step, and how
  much of the sending hides behind the backward pass: ResNet-101 keeps 90% at 512 GPUs,
  VGG-16 68%.
- Speedup on the time to a target equals the samples/s speedup only when the algorithm is
  unchanged (strong scaling). A larger global batch needs a larger learning rate (linear
  scaling rule, with warm-up), and its returns diminish around a critical batch size.

## Exercises

1. [Speedup and efficiency from a timing table](exercises/03_speedup_and_efficiency.ipynb),
   with Karp–Flatt.
2. [Amdahl or Gustafson?](exercises/10_amdahl_or_gustafson.ipynb) Each law has one
   parameter, so each fits one measured point exactly: from $p = 1, 2$ alone nothing tells
   them apart. Run the compute-bound preset with `WORKERS = "1,2,3"` or more (on a 2-core
   machine the third rank shares a core, which shows in the numbers), or use the
   simulator's presets at 1, 2, 4, 8 workers, then decide which law fits.
3. In the simulator, how many workers can VGG-16 use on 25 Gbit/s before its efficiency drops
   below 50%? Try `simulate.PRESETS["vgg16-25gbe"].predict(p)` for a few `p`.

## Check yourself

1. A job takes 120 s on one worker and 20 s on eight. What are its speedup and efficiency?
2. Amdahl with a serial share $s_A = 0.1$: what is the largest speedup any number of workers
   can give?
3. Measured speedups give Karp–Flatt $e$ = 0.02, 0.05, 0.11 at $p$ = 2, 4, 8. Serial code or
   overhead?
4. Why does VGG-16 scale worse than ResNet-101, although it has fewer layers?
5. Weak scaling doubles the samples per second, but the time to the target accuracy does
   not halve. Why, and what brings the speedup back?

<details><summary>Answers</summary>

1. $S = 120/20 = 6$, $E = 6/8 = 0.75$.
2. $1/s_A = 10$.
3. Overhead: a true serial fraction would give a constant $e$; one that grows with $p$ is
   typically communication.
4. It has about three times the parameters (mostly in its fully connected layers), so each
   step allreduces three times the bytes, with less compute *time* to hide them behind
   (though more FLOPs: its convolutions run efficiently on GPUs).
5. With the same learning rate, the doubled global batch takes about as many steps to reach
   the target, each as long as before. Scaling the learning rate with the batch (with a
   warm-up) halves the steps, up to the critical batch size.
</details>
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="speedup_efficiency_scalability")
"""),
]
