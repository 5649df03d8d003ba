"""Notebook 07: sharded data parallelism (ZeRO-1, 2, 3), its memory and traffic measured."""

from workbench.notebooks import code, md

NAME = "07_sharded_data_parallelism.ipynb"

CELLS = [
    md(r"""
# 07 · Sharded data parallelism: when the model does not fit

**Goals.** After this notebook you can
- count the bytes a data-parallel rank holds in parameters, gradients and optimizer state,
  and predict them for DDP and for ZeRO's three stages,
- say what ZeRO-1, ZeRO-2 and ZeRO-3 (FSDP) each shard, and what each costs in traffic,
- check on real ranks that sharding changes the memory and the bytes sent, not the result,
- plan whether a model fits on $N$ devices of $M$ GB with a given strategy.

**Time:** about 35 minutes.
"""),
    md(r"""
## 1. "The model has to entirely fit on each node"

That is the limit the course's source gives data parallelism: every worker holds a whole
replica. It holds more than the parameters. With $\Psi$ parameters in float32, a rank keeps
$4\Psi$ bytes of parameters, $4\Psi$ of gradients and $K\Psi$ of optimizer state: $K = 8$
for Adam (its two moments, notebook 01), 4 for SGD with momentum. In mixed precision (the
ZeRO paper's accounting, after Micikevicius et al. 2018) the parameters and gradients are
fp16, $2\Psi + 2\Psi$, and $K = 12$: an fp32 master copy of the parameters (4 bytes) plus
Adam's two moments in fp32 (4 + 4). That is 16 bytes per parameter, so a 7.5B-parameter
model needs 120 GB on every device, however many devices there are.

Each rank of DDP (`engine="torch"`), and of the sharded engines below, counts the bytes its
tensors hold after every step and the bytes its collectives send. After the step, not at
its peak: the ZeRO-2 written here holds every gradient whole from the backward pass until
its reduce-scatter (DDP and ZeRO-1 hold them whole throughout; section 6 charts the peak).
Here is DDP on 2 ranks,
with Adam, beside the cost model's prediction. Every job of this notebook runs on the same
two **warm ranks** (`workbench.ranks`), started once by `torchrun` with the process group
joined: each job then takes a fraction of a second instead of seconds of start-up, and is
the same code and the same record as on fresh ranks.
"""),
    code(r"""
import workbench
from workbench.lessons.show import figure_widget, table
from workbench.sharded import costmodel, measured
from workbench.ui import charts
from workbench.ui.parallelism_charts import held_chart

charts.load_bokehjs()
pool = workbench.ranks(np=2, engine="torch")   # the jobs below (np=2, torchrun) run on it
JOB = dict(np=2, model="mlp", width=256, dataset="digits", epochs=1, max_steps=6,  # size
           optimizer="adam", lr=0.01, threads_per_rank=1)
ddp = workbench.start(workbench.JobConfig(engine="torch", **JOB))
assert ddp.wait(timeout=400) == "succeeded", ddp.summary
table(measured.footprint_rows(ddp), measured.COLUMNS, caption="DDP, 2 ranks, Adam")
"""),
    md(r"""
Both ranks hold the same: $(4 + 4 + 8)\Psi$ bytes. Adding ranks adds speed, never memory.

## 2. ZeRO-1: shard the optimizer state

Rajbhandari et al. (SC 2020) notice that the replicas are redundant: each rank needs the
optimizer state only for the parameters it updates. So rank $r$ owns slice $r$ of one flat
buffer of parameters. After the backward pass the gradients are averaged as in DDP; then
each rank steps **its slice only** (its optimizer state is $K\Psi/N$) and the ranks
**all-gather** the updated slices. Exercise 12 has you write that step. PyTorch's own
version shards whole tensors between the ranks rather than one flat buffer:

```python
from torch.distributed.optim import ZeroRedundancyOptimizer
optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=0.01)
```

**ZeRO-2** replaces the all-reduce by a **reduce-scatter**: rank $r$ receives only the
averaged gradients of its slice, so it keeps $2\Psi/N$ (here $4\Psi/N$) of gradients.
**ZeRO-3** shards the parameters too. PyTorch's FSDP2 (`fully_shard` per layer, documented
with `torch.distributed.fsdp.fully_shard`; its design: pytorch/pytorch issue 114299)
all-gathers each layer's parameters just before its forward and frees them after. With
`reshard_after_forward=True`, the default for every module but the root, it gathers them
again before the layer's backward; the root keeps its own from forward to backward. FSDP2
cuts each parameter on its first dimension (`torch.chunk`), $\lceil d_0/N \rceil$ rows to a
rank, and pads the last shards to that size (FSDP1, Zhao et al., VLDB 2023, flattens a
layer's parameters into one buffer and cuts that instead): when
a $d_0$ does not divide by $N$ (this model's 10 output rows on 4 ranks), the last rank holds
fewer real rows, and so less optimizer state, than $\Psi/N$
(`workbench.sharded.costmodel.fsdp2_shard` predicts each rank's bytes). The same job on
each (one after another: they would share cores):
"""),
    code(r"""
runs = [ddp]
for engine in ("zero1", "zero2", "fsdp"):
    job = workbench.start(workbench.JobConfig(engine=engine, **JOB))
    assert job.wait(timeout=400) == "succeeded", job.summary
    runs.append(job)
rows = [row for run in runs for row in measured.footprint_rows(run)]
table(rows, measured.COLUMNS, caption="Bytes per rank: measured, and the cost model's")
"""),
    code(r"""
from workbench.lessons.runs import parameter_gap

for run in runs[1:]:
    print(f"{run.config.engine:6s} ends {parameter_gap(ddp, run):.1e} away from DDP")
figure_widget(held_chart(runs))
"""),
    md(r"""
The parameters end where DDP's do (to float32 rounding): sharding changes where the
numbers live, not the arithmetic. The memory falls stage by stage, as predicted.

## 3. What ZeRO trades: bytes on the wire

The last columns are the bytes each rank sent per step. An all-reduce of $\Psi$ values
(its *payload*) sends $2\Psi\frac{N-1}{N}$ values per rank on a ring (notebook 04).
ZeRO-2's reduce-scatter and all-gather are the two halves of that all-reduce: the same
bytes. ZeRO-3 gathers the parameters twice, $3\Psi \frac{N-1}{N}$: 1.5× DDP. (The ZeRO-1
written here all-reduces and then all-gathers, also 1.5×; the paper's ZeRO-1
reduce-scatters, as ZeRO-2 does.)

## 4. bf16 autocast, and bf16 on the wire

This is not the ZeRO paper's mixed precision. `precision="bf16"` runs the forward pass under
bfloat16 *autocast*: each matrix product computes in bf16 on bf16 copies of its inputs, while
the parameters, their gradients and Adam's moments stay float32, so a rank holds as many
bytes as before. `grad_compression="bf16"` casts the gradients to bf16 only to send them
(DDP's `bf16_compress_hook`; Horovod: `grad_compression="fp16"`, its `Compression.fp16`):
half the bytes on the wire. bf16 has float32's 8-bit exponent, so it needs no loss scaling;
fp16's 5-bit exponent flushes small gradients to zero on any device, so fp16 training scales
the loss (Micikevicius et al. 2018). The cost of bf16: rounding to 8 significant bits.
"""),
    code(r"""
bf16 = workbench.start(workbench.JobConfig(engine="torch", precision="bf16",
                                           grad_compression="bf16", **JOB))
assert bf16.wait(timeout=400) == "succeeded", bf16.summary
held, sent = ([sum(measured.last_footprint(run)[0][f] for f in fields) for run in (ddp, bf16)]
              for fields in (("param_bytes", "grad_bytes", "optimizer_bytes"), ("sent_bytes",)))
print(f"held: float32 {held[0]:,} bytes, bf16 autocast {held[1]:,}")
print(f"sent per step: float32 {sent[0]:,} bytes, bf16 {sent[1]:,} ({sent[1] / sent[0]:.2f}x)")
print(f"final held-out loss: float32 {ddp.summary['final_loss']:.4f}, "
      f"bf16 {bf16.summary['final_loss']:.4f}")
"""),
    md(r"""
## 5. A transformer layer, counted

The models that do not fit are transformers. A transformer layer takes $b$ sequences of $s$
tokens, each token a vector of $h$ numbers (the hidden size), through two blocks.
**Attention** projects every token to a query, a key and a value ($h \times h$ each), lets
each token's query weigh all $s$ keys, in $a$ heads of $h/a$ numbers, sums the values with
those weights, and projects the result back ($h \times h$): $4h^2$ parameters. The **MLP**,
$Z = \mathrm{GeLU}(XA)\,B$ with $A$ of $h \times 4h$ and $B$ of $4h \times h$, holds $8h^2$.
A layer thus holds about $12h^2$ parameters. A matrix product $(m \times k) \cdot (k \times
n)$ costs $2mkn$ floating-point operations (a multiply and an add each), so a layer's forward
pass costs about $24bsh^2$ in its products with weights and $4bs^2h$ in attention's two
products over the sequence; the backward pass about twice that (Narayanan et al. 2021, §3).
GPT-3's 6.7B model (Brown et al. 2020: 32 layers, $h = 4096$, $a = 32$, $s = 2048$):
"""),
    code(r"""
LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 32, 4096, 32, 2048, 50257
PSI = costmodel.transformer_parameters(LAYERS, HIDDEN, VOCAB)
flops = costmodel.transformer_flops(LAYERS, HIDDEN, SEQ, micro_batch=1)
print(f"{PSI / 1e9:.2f} billion parameters, {3 * flops / 1e12:.0f} Tflop per sequence "
      f"of {SEQ} tokens, forward and backward")
"""),
    md(r"""
## 6. Does it fit? The planner

The cost model answers for any size: that model in mixed precision with Adam ($K = 12$) on
$N$ devices of 80 GB (the red line), with the activations one sequence per device keeps for
the backward pass (Korthikanti et al. 2022: $sbh(34 + 5as/h)$ bytes a layer, without
recomputation), which no data-parallel sharding divides. The black dashes are the peaks of
the backward pass. Move the sliders:
"""),
    code(r"""
from workbench.ui.zero_picture import NAMES, ZeroPicture

acts = costmodel.transformer_activations(LAYERS, HIDDEN, SEQ, micro_batch=1, heads=HEADS)
ZeroPicture(psi=PSI, devices=8, device_gb=80, activations=acts)
"""),
    md("The same formulas give the ZeRO paper's Table 1, as it prints it:"),
    code(r"""
table([{"n": n, **dict(zip(NAMES, row, strict=True))} for n, row in costmodel.table_1().items()],
      [("n", "N devices", "d")] + [(s, name, "s") for s, name in NAMES.items()],
      caption="7.5B parameters, K = 12: GB per device")
"""),
    code(r"""
pool.close()   # frees its two cores for other jobs
"""),
    md(r"""
## Summary

- A data-parallel replica holds $(4 + 4 + K)\Psi$ bytes in float32, $(2 + 2 + 12)\Psi$ in
  mixed precision with Adam, on every rank: adding ranks adds no memory.
- ZeRO-1 shards the optimizer state ($K\Psi/N$), ZeRO-2 also the gradients, ZeRO-3 (FSDP)
  also the parameters: $(2 + 2 + K)\Psi/N$. The result is DDP's, to rounding.
- ZeRO-2 sends what DDP sends; ZeRO-3 sends 1.5× as much, gathering each layer's
  parameters twice per step. Sending gradients in bf16 halves DDP's bytes.
- Counted after the step; at the end of the backward pass DDP, ZeRO-1 and ZeRO-2 (as
  written here) all hold every gradient whole.
- A transformer layer holds about $12h^2$ parameters and costs $24bsh^2 + 4bs^2h$ flop
  forward. Activations are not sharded by any ZeRO stage; the planner adds them.

## Exercises

- [Exercise 12: write the ZeRO-1 optimizer step](exercises/12_zero1_optimizer_step.ipynb):
  shard, step, all-gather, on 2 real ranks.

## Check yourself

The questions below are this notebook's, from the course's question bank.
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="sharded_data_parallelism")
"""),
]
