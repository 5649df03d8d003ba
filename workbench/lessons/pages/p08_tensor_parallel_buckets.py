"""Notebook 08: tensor parallelism; DDP's buckets and overlap by hand; gradient accumulation."""

from workbench.notebooks import code, md

NAME = "08_tensor_parallelism_buckets_accumulation.ipynb"

CELLS = [
    md(r"""
# 08 · Tensor parallelism, buckets and overlap, gradient accumulation

**Goals.** After this notebook you can
- split an MLP block over ranks as Megatron-LM does, and say where its two all-reduces go,
- estimate the bytes tensor parallelism sends per step, and why it stays on a fast bus,
- tell what buckets and what overlap each add to the naive data-parallel engine,
- accumulate gradients over $k$ micro-batches and say what it does to the traffic.

**Time:** about 40 minutes.
"""),
    md(r"""
## 1. Tensor parallelism: Megatron's MLP split

A transformer's MLP block (notebook 07), $Z = \mathrm{GeLU}(XA)\,B$, split over $n$ ranks as
Megatron-LM does (Shoeybi et al. 2019, §3): $A$ by columns, so GeLU needs no communication;
$B$ by rows, so $Z = \sum_i Y_iB_i$ is one all-reduce. Toggle the pass:
"""),
    code(r"""
from workbench.lessons.show import source, table
from workbench.ui import charts
from workbench.ui.megatron_picture import MegatronPicture

charts.load_bokehjs()
MegatronPicture(hidden=4096, tokens=2048)   # Megatron's h, 2048 tokens, fp16
"""),
    md(r"""
Four ranks run it by hand (`megatron.py`, f and g below) and with **DTensor**, PyTorch's
tensor spread over a device mesh: its `placements` say what each rank holds, `Shard(d)` (a
slice along dimension d), `Replicate()` (all of it) or `Partial()` (its part of a sum not
yet all-reduced). `ColwiseParallel` makes a linear's weight, stored out × in, `Shard(0)`;
`RowwiseParallel` `Shard(1)`, its `Partial` output summed as g sums. The 2-D run adds
data parallelism. Differences from the serial run (rounding: about $10^{-7}$):
"""),
    code(r"""
source("workbench.tensor_parallel.megatron", ("class CopyToTensorParallel", "def f("))
"""),
    code(r"""
from workbench.tensor_parallel import check, traffic

results = check.compare(ranks=4)
table([{"rank": r, "megatron output": x["megatron"]["output"],
        "megatron grads": x["megatron"]["weight_grads"], "DTensor grads":
        x["dtensor"]["weight_grads"], "2-D vs serial": x["2d"]["params"],
        "payload, measured (bytes)": x["megatron"]["bytes"],
        "payload, model (bytes)": x["megatron"]["model_bytes"]}
       for r, x in enumerate(results)])
"""),
    code(r"""
print("Megatron's log:", results[0]["megatron"]["log"])
print("DTensor's collectives:", results[0]["dtensor"]["collectives"])
print("DTensor placements:", results[0]["dtensor"]["placements"])
"""),
    md(r"""
That payload, $2 \cdot \text{tokens} \cdot h \cdot 4$ bytes a block and step, holds up the
next layer, and its time over the compute's does not depend on the batch: only the link
decides. Hence tensor parallelism within servers, data parallelism between them:
"""),
    code(r"""
table(traffic.bus_table(tokens=2048, hidden=4096, ranks=8),
      [("network", "network", "s"), ("compute_s", "compute (s)", ".3g"),
       ("comm_s", "two all-reduces (s)", ".3g"), ("comm_over_compute", "comm ÷ compute", ".2f")],
      caption="One MLP block per step: compute vs its two all-reduces")
"""),
    md(r"""
## 2. DDP's buckets and overlap, by hand

The naive engine all-reduces each gradient after `backward()`. Two engines add DDP's ideas
one at a time (`workbench/data_parallel/`): `bucketed` packs the gradients into buckets of
`bucket_mb` MiB and all-reduces each bucket after backward; `overlapped` starts each
bucket's all-reduce from a `register_post_accumulate_grad_hook` as soon as its last
gradient is ready, and waits before the step (exercise 13 has you write that hook). DDP
does both in C++; its knob is the bucket size, `DistributedDataParallel(model,
bucket_cap_mb=25)`, 25 MiB by default and 1 MiB for the first bucket.

The same small job on the four engines, one after another (2 ranks, 12 steps, 64 KiB
buckets), each on the same two warm ranks (`workbench.ranks`: started once by `torchrun`,
they run job after job without seconds of start-up). The table and the bars split each step
into computing and time blocked on gradients:
"""),
    code(r"""
import workbench
from workbench.lessons.runs import SPLIT_COLUMNS, step_split
from workbench.lessons.show import figure_widget
from workbench.ui import charts

charts.load_bokehjs()
pool = workbench.ranks(np=2, engine="torch")   # the jobs below (np=2, torchrun) run on it
SAME = dict(np=2, model="mlp", width=256, dataset="digits", epochs=1, max_steps=12,
            batch_size=32, threads_per_rank=1, bucket_mb=0.0625)
rows, job_of = [], {}
for engine in ("naive", "bucketed", "overlapped", "torch"):   # torch = DDP
    job_of[engine] = workbench.start(workbench.JobConfig(engine=engine, **SAME))
    assert job_of[engine].wait(timeout=400) == "succeeded", job_of[engine].summary
    rows.append(step_split(job_of[engine]))
table(rows, SPLIT_COLUMNS, caption="naive → bucketed → overlapped → DDP, 2 ranks")
"""),
    code(r"""
fig, _ = charts.stacked_bar([r["engine"] for r in rows], {
    "compute": [r["compute_ms"] for r in rows], "sync": [r["sync_ms"] for r in rows]},
    title="Where a step's time goes", x_label="engine", y_label="ms per step")
figure_widget(fig)
"""),
    md(r"""
Read the bars from left to right. Bucketed sends a few large messages instead of one per
tensor, and uses gloo's C++ ring instead of our Python one (run it with `bucket_mb=0` to
separate the two). Overlapped moves part of the remaining communication under the backward
pass: only what is still running when `backward()` returns is orange. DDP does the same in
C++. On a shared CPU the numbers move from run to run; `benchmarks/bucket_bench.py` measures
an 8.4M-parameter model side by side. The training panel (`TrainingPanel()`) has the bucket
size as a widget, *bucket (MiB)*, and so does the next cell: pick a size and run the bucketed
and overlapped engines again (at the smallest size nearly every tensor is a bucket of its
own, at the largest the whole model is one bucket).
"""),
    code(r"""
from workbench.lessons.bucket_picker import BucketPicker

BucketPicker(SAME)   # pick a size, press Run: both engines again, on warm ranks
""", press={"Run bucketed and overlapped": "table"}),
    md(r"""
## 3. Gradient accumulation

When the batch you want does not fit, run $k$ micro-batches of $b$, add their gradients
(each loss divided by $k$), and step once: the update of one batch of $k \cdot b$. With
data parallelism only the last micro-batch should all-reduce (which then divides the sum
by $N$): DDP's `no_sync()` context on the others, Horovod's
`DistributedOptimizer(..., backward_passes_per_step=k)`. So N ranks ×
k micro-batches × b follow one process with batch $N\cdot k\cdot b$ (the workbench's tests
check it on real ranks), and the gradients travel once per $k\cdot b$ samples per rank. The
overlapped engine again, with $k = 4$ micro-batches of the same 32 samples, against its run
of section 2. The bytes counted are the all-reduces' *payload*, what the engine hands them
(each rank then sends $2\frac{N-1}{N}$ times that on a ring, notebook 04):
"""),
    code(r"""
from workbench.records import of_kind

accumulated = workbench.start(workbench.JobConfig(engine="overlapped", accumulate=4,
                                                  **{**SAME, "max_steps": 5}))
assert accumulated.wait(timeout=400) == "succeeded", accumulated.summary
per_sample = []
for run in (job_of["overlapped"], accumulated):   # k = 1 (section 2), then k = 4
    steps = of_kind(run.metrics(), "step")
    per_sample.append(sum(s["synced_bytes"] for s in steps) / sum(s["samples"] for s in steps))
print(f"payload all-reduced per sample (bytes): k=1 {per_sample[0]:.0f}, "
      f"k=4 {per_sample[1]:.0f}, ratio {per_sample[0] / per_sample[1]:.2f}")
pool.close()   # frees its two cores for other jobs
"""),
    md(r"""
## Summary

- Tensor parallelism splits each layer: Megatron's column-then-row split needs two
  all-reduces of the activations per block and step ($g$ forward, $f$ backward). Their
  bytes grow with the batch and block the next layer, so it wants NVLink-class links.
- DTensor's `ColwiseParallel` / `RowwiseParallel` place the same shards (`Shard(0)`,
  `Shard(1)`) and the same two all-reduces; a device mesh combines it with data parallelism.
- Buckets pay the all-reduce latency once per bucket instead of once per tensor; overlap
  starts each bucket during `backward()`, hiding the communication behind the layers below.
- Gradient accumulation over $k$ micro-batches equals one batch $k$ times larger and
  all-reduces once per step: $k$ times fewer bytes per sample.

## Exercises

1. Exercise 13, [write the launch hook](exercises/13_overlap_the_all_reduce.ipynb), checked
   on 2 real ranks.
2. Rerun section 2 with `bucket_mb=0` and `bucket_mb=25`. Which engine changes, and why?
3. In `traffic.bus_table`, double `hidden`. What happens to the ratio on each link?

## Check yourself

1. Why is the first linear of Megatron's MLP split by columns and not by rows?
2. How many bytes does one MLP block with $h = 1024$, 512 tokens, fp16, all-reduce per step?
3. With gradient accumulation over 4 micro-batches, how often does DDP all-reduce?

<details><summary>Answers</summary>

1. Split by columns, each rank's $XA_i$ is a complete slice of the hidden layer and GeLU can
   be applied to it alone. Split by rows, each rank would hold a partial sum, and GeLU of a
   sum is not the sum of GeLUs: an all-reduce would be needed before the GeLU.
2. $2 \times 512 \times 1024 \times 2 = 2\,097\,152$ bytes (2 MiB): $g$ forward and $f$
   backward, each one $512 \times 1024$ activation.
3. Once per optimizer step, after the 4th backward pass; the other three run in `no_sync()`.
</details>
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="tensor_parallelism_buckets_accumulation")
"""),
]
