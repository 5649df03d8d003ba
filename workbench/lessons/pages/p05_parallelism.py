"""Notebook 05: types of parallelism: model and pipeline parallelism vs data parallelism."""

from workbench.notebooks import code, md

NAME = "05_types_of_parallelism.ipynb"

CELLS = [
    md(r"""
# 05 · Types of parallelism: data, model and pipeline

**Goals.** After this notebook you can
- contrast data parallelism and model parallelism: what is split, what is exchanged, what
  must fit on one device,
- explain the *bubble* of a pipeline and compute it, $(P-1)/(M+P-1)$,
- read a pipeline schedule (GPipe, 1F1B) as a Gantt chart,
- decide from memory and communication numbers which kind of parallelism wins.

**Time:** about 45 minutes.
"""),
    md(r"""
## 1. Four ways to split the training of one model

Each panel splits an MLP of four layers over $N$ devices: a column per device, a box per
layer, filled where the device keeps that layer's weights; the bottom row is the part of
each batch it computes on.
"""),
    code(r"""
from workbench.lessons.show import curves, figure_widget, table
from workbench.ui import charts
from workbench.ui.layout_picture import LayoutPicture

charts.load_bokehjs()
LayoutPicture(devices=4)   # move the slider: 2 to 4 devices
"""),
    md(r"""
- **Data parallelism** (notebook 02): whole model, $1/N$ of the batch, gradients
  all-reduced. The model must fit on every device.
- **Sharded data parallelism** (ZeRO stage 3, Rajbhandari et al. 2020; FSDP,
  Zhao et al. 2023): $1/N$ of every layer, each gathered whole just before its pass, for
  about 1.5 times the bytes; no device holds the whole model (notebook 07).
- **Tensor parallelism** (Megatron-LM): every layer split, partial results combined inside
  every layer, so it stays on a server's fast bus (notebook 08).
- **Pipeline parallelism**: whole layers, activations sent at each cut; its bytes grow with
  the batch, not with the model.

The last two are *model* parallelism: each device holds about $1/N$ of the parameters.

## 2. From naive model parallelism to a pipeline

Cut the network in two and stage 1 waits for stage 0, and backward runs the other way: one
stage works at a time. **Pipelining** (GPipe: Huang et al., NeurIPS 2019) cuts each batch
into $M$ *micro-batches*: stage 0 computes micro-batch 1 while stage 1 works on micro-batch
0. Their gradients add up and every stage steps once: the whole batch's update. Each bar is
one pass of one micro-batch (a backward costs two forwards), grey is idle:
"""),
    code(r"""
from workbench.ui.schedule_picture import SchedulePicture

SchedulePicture(stages=4, micro_batches=6)
"""),
    md(r"""
In both schedules a stage works for $M/(M+P-1)$ of a step's time; the idle share, the
**bubble**, is

$$\text{bubble} = \frac{P-1}{M+P-1}.$$

More micro-batches shrink it; more stages grow it, and it shrinks slowly: at the usual rule
of thumb $M = 4P$ it is still $(P-1)/(5P-1)$: 11.1% for $P = 2$, 14.3% for $P = 3$, 15.8%
for $P = 4$, rising towards 20% for many stages. Megatron-LM (Narayanan et al. 2021) and
the Ultra-Scale Playbook write the bubble as $(P-1)/M$ instead: the same idle time divided
by the ideal (busy) time rather than by the whole run. Both are right; say which one you
use: at $M = 4P$ the second is $(P-1)/4P$, 12.5% for $P = 2$ and 18.75% for
$P = 4$, rising towards 25%.

What differs is memory. GPipe runs all $M$ forward passes first, so a stage keeps the
activations of all $M$ micro-batches until their backward pass. **1F1B with a flush**
(PipeDream-Flush; Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training",
ICML 2021) starts each backward pass as early as it can: at most $P$ micro-batches in
flight, the same bubble, the same synchronous update. (The original PipeDream, SOSP 2019,
is asynchronous: it keeps several versions of the weights, "weight stashing", and never
flushes the pipeline.) Megatron-LM's *interleaved* schedule divides the bubble by the
number of model chunks each stage holds.

## 3. Lab: a real pipeline, and its measured bubble

The lab splits an MLP over `STAGES` processes that pass activations and gradients with real
`torch.distributed` send/recv, and records when each stage computes what. A tiny MLP computes
in well under a millisecond, about what one message costs, so each forward pass is padded to
`COMPUTE_MS` milliseconds (and each backward to twice that), as on an accelerator with a fixed
speed per stage. Set `COMPUTE_MS = 0` to time the bare computation instead.
"""),
    code(r"""
from workbench.model_parallel.pipeline import PipelineConfig, run_pipelines
from workbench.ui.parallelism_charts import pipeline_figure

STAGES = 2                   # processes, one per stage; try 4
MICROBATCHES = [1, 2, 4, 8]  # micro-batches per batch of 64
COMPUTE_MS = 10              # milliseconds per forward pass of one micro-batch
STEPS = 3                    # training steps (the first one is left out of the bubble)

common = dict(stages=STAGES, steps=STEPS, compute_ms=COMPUTE_MS)
configs = [PipelineConfig(microbatches=m, **common) for m in MICROBATCHES]
configs.append(PipelineConfig(microbatches=max(MICROBATCHES), schedule="1f1b", **common))
results = run_pipelines(configs)   # one set of processes runs every configuration
gpipe, one_f_one_b = results[:-1], results[-1]
"""),
    code(r"""
figure_widget(pipeline_figure(gpipe[len(gpipe) // 2]))  # the middle M
"""),
    md(r"""
Green bars are forward passes, purple ones backward passes, grey ones the bubble. Each stage
waits at the start of the forward pass and at the end of the backward pass. Now the bubble
for every $M$, measured against the formula:
"""),
    code(r"""
table(gpipe, [("microbatches", "micro-batches M", "d"),
              ("theoretical_bubble", "bubble, theory", ".2f"),
              ("measured_bubble", "bubble, measured", ".2f"), ("time_s", "time (s)", ".2f")])
"""),
    code(r"""
ms = [r["microbatches"] for r in gpipe]
curves(f"Pipeline bubble, P = {STAGES} stages", "micro-batches M", "idle share of the stages",
       {"theory (P−1)/(M+P−1)": (ms, [r["theoretical_bubble"] for r in gpipe]),
        "measured": (ms, [r["measured_bubble"] for r in gpipe])}, markers=True)
"""),
    md(r"""
The measured bubble follows the formula and is a little larger: messages take time, the last
stage also computes the loss, and on a shared machine the processes are not always scheduled
at once.

The lab's last run is 1F1B: its stages hold fewer micro-batches, with the same bubble.
"""),
    code(r"""
rows = [{"schedule": r["schedule"], "stage": s["stage"], "in_flight": s["peak_in_flight"],
         "activations": s["memory"]["activations_bytes"] / 1024, "bubble": r["measured_bubble"]}
        for r in (gpipe[-1], one_f_one_b) for s in r["per_stage"]]
table(rows, [("schedule", "schedule", "s"), ("stage", "stage", "d"),
             ("in_flight", "micro-batches held at most", "d"),
             ("activations", "peak activations (KiB)", ".0f"),
             ("bubble", "measured bubble", ".2f")],
      caption=f"M = {gpipe[-1]['microbatches']} micro-batches")
"""),
    code(r"""
figure_widget(pipeline_figure(one_f_one_b))
"""),
    md(r"""
The pipeline trains exactly the model that one process would: its losses equal those of the
same MLP trained without splitting, on the same batches.
"""),
    code(r"""
from workbench.model_parallel.pipeline import train_unsplit

print("unsplit model :", [round(x, 5) for x in train_unsplit(steps=STEPS)])
print("pipeline      :", [round(x, 5) for x in gpipe[-1]["losses"]])
"""),
    md(r"""
## 4. Data and model parallelism side by side

The comparison trains the *same* MLP on the *same* batches with 2 workers, once data-parallel
(each worker the whole model and half of each batch; a ring allreduce of the gradients) and
once pipeline-parallel (each worker half of the layers; GPipe with 4 micro-batches), and
measures, per worker: memory (parameters, gradients, optimizer state, activations), bytes
sent per step, and seconds per step.
"""),
    code(r"""
from workbench.model_parallel.compare import compare
from workbench.ui.parallelism_charts import memory_figure

WIDTH = 512   # units per hidden layer: the model grows as WIDTH²
BATCH = 64    # samples per step; try WIDTH = 64, BATCH = 1024

cmp = compare(2, width=WIDTH, batch_size=BATCH, steps=4)
rows = [{"strategy": name.replace("_", " "), "memory": r["memory_per_worker"]["total_bytes"],
         "sent": r["comm_bytes_per_step"], "predicted": r["predicted_comm_bytes_per_step"],
         "step": r["step_time_s"]}
        for name, r in cmp.items() if name in ("data_parallel", "model_parallel")]
print(f"{cmp['model']['params']:,} parameters ({cmp['model']['params_bytes'] / 2**20:.1f} MiB)")
table(rows, [("strategy", "strategy", "s"), ("memory", "memory per worker (MiB)",
                                                lambda b: f"{b / 2**20:.2f}"),
             ("sent", "bytes sent per step", ",.0f"), ("predicted", "predicted", ",.0f"),
             ("step", "seconds per step", ".4f")])
"""),
    code(r"""
figure_widget(memory_figure(cmp))
"""),
    md(r"""
- **Memory**: data parallelism keeps the full parameters, gradients and optimizer state (Adam:
  two more tensors per parameter) on every worker; model parallelism splits them over the
  workers but keeps the activations of every micro-batch.
- **Communication**: data parallelism sends about $2\frac{P-1}{P}$ times the gradient's bytes
  per worker and step, *whatever the batch size*; model parallelism sends the activations at
  each cut, forward and backward, $\text{batch} \times \text{width} \times 4$ bytes each way,
  *whatever the number of parameters*.
- **Time**: data parallelism keeps every worker busy (no bubble); a pipeline idles in its
  bubble.

### When each wins

The two communication formulas cross. For this model, bytes sent per worker and step as the
batch grows:
"""),
    code(r"""
P, params = 2, cmp["model"]["params"]
batches = [2 ** k for k in range(4, 14)]
data_parallel = [2 * (P - 1) / P * 4 * params for _ in batches]  # the gradients: no batch
model_parallel = [b * WIDTH * 4 for b in batches]               # the activations at the cut
curves(f"Bytes per worker and step, width {WIDTH}, P = {P}", "batch size (log)", "bytes (log)",
       {"data parallel": (batches, data_parallel), "model parallel": (batches, model_parallel)},
       log_x=True, log_y=True)
"""),
    md(r"""
- **Model parallelism wins** when the model (with gradients and optimizer state) does not fit
  on one device (sharded data parallelism, ZeRO-3 or FSDP, is the other way out), or when its
  gradients are much larger than the activations at a cut: wide layers, small batches, and
  devices joined by a fast bus.
- **Data parallelism wins** when the model fits and the batch is large: no bubble, traffic
  independent of the batch, and much simpler code. It is the default.
- **Both**: the largest models combine them. Megatron-LM splits each layer over the GPUs of
  a server (tensor parallelism), runs a pipeline across servers, and replicates the whole
  pipeline data-parallel.

## Summary

- Data parallelism splits the data and exchanges gradients; model parallelism splits the
  model and exchanges activations. Plain data parallelism needs the whole model on every
  worker; sharded data parallelism (ZeRO-3, FSDP) keeps $1/N$ of it on each.
- A pipeline keeps several stages busy by cutting a batch into $M$ micro-batches; its bubble
  is $(P-1)/(M+P-1)$, still $(P-1)/(5P-1)$ at $M = 4P$: 11% for 2 stages, 16% for 4,
  under 20% for any number (Megatron's $(P-1)/M$ divides by the ideal
  time instead).
- GPipe keeps $M$ micro-batches of activations per stage, 1F1B at most $P$, with the same
  bubble.
- Memory decides first; then compare the gradient bytes of an allreduce with the activation
  bytes at the cuts.
- Next: sharded data parallelism, measured rank by rank, in notebook 07; tensor
  parallelism (Megatron's split of a layer, beside the pipeline's split into stages) in
  notebook 08.

## Exercises

1. [Predict a pipeline bubble](exercises/05_pipeline_bubble.ipynb).
2. [Data or model parallelism?](exercises/06_data_or_model_parallelism.ipynb)
3. Set `STAGES = 4`. How many micro-batches does the bubble need to fall below 20%? Check
   with the formula first, then with the lab.
4. Set `WIDTH = 64, BATCH = 1024` in section 4. Which strategy sends fewer bytes now?

## Check yourself

1. A model has 8 pipeline stages and 24 micro-batches per batch. What is its bubble?
2. Why does GPipe need more activation memory than 1F1B, although their bubbles are equal?
3. A 2-billion-parameter model is trained with Adam in fp32 (16 bytes per parameter for
   weights, gradients and two moments). Does its training state fit on a 40 GB GPU? On a
   24 GB one? What else needs memory?
4. Does doubling the batch size change the bytes that data parallelism sends per step? And
   those that model parallelism sends?

<details><summary>Answers</summary>

1. $7 / (24 + 7) = 7/31 \approx 0.23$.
2. GPipe runs every forward pass before any backward pass, so each stage holds the
   activations of all $M$ micro-batches; 1F1B frees a micro-batch's activations after its
   backward pass and never holds more than $P$.
3. $2 \times 10^9 \times 16$ bytes = 32 GB. On 40 GB it fits, with 8 GB left for the rest: the
   activations kept for the backward pass (they grow with the batch), communication
   buffers (Horovod's fusion buffer, DDP's buckets) and the framework's own workspace.
   Whether a replica fits then depends on the batch. On 24 GB it does not fit at all:
   model parallelism, or sharded data parallelism (ZeRO, FSDP: sharding the optimizer state,
   the gradients and, at stage 3, the weights), is needed.
4. Data parallelism: no, it sends the gradients, whose size depends on the parameters only.
   Model parallelism: yes, the activations at the cuts double.
</details>
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="types_of_parallelism")
"""),
]
