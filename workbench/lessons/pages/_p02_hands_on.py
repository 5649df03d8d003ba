"""Notebook 02's hands-on sections (its page, p02_data_parallelism.py, includes them): the same
job on the naive engine, DDP and Horovod (section 7), and the Horovod steps written by the
student and run on real ranks (section 8)."""

from workbench.notebooks import code, md

#: Section 7: the same job on the naive engine, DDP and Horovod.
ENGINES_COMPARED = [
    md(r"""
## 7. What buckets and overlap buy: naive, DDP and Horovod

All three engines compute the same average; they differ in *when* and *how* it travels.
The naive engine (`engine="naive"`) waits until `backward()` has returned, then averages
each gradient with an allreduce written in Python (notebook 04 builds it), one tensor after
another. No buckets, no overlap:
"""),
    code(r"""
source("workbench.training.naive_rank", ("class NaiveSync", "    def allreduce_sum"))
"""),
    md(r"""
DDP packs the gradients into buckets and allreduces each bucket while `backward()` is still
running; Horovod does the same with Tensor Fusion and its background thread. Here is one
small job, 2 ranks for 30 steps, on each engine in turn. The table splits each step into
computing (forward and backward) and time blocked on gradients; samples/s is the global
batch divided by the step time.

The jobs run on **warm ranks** (`workbench.ranks`): two ranks started once by `torchrun`
run the naive and the DDP job one after the other; then two started once by `horovodrun`
run the Horovod job, and section 8 uses them again. Starting ranks (a launcher,
`import torch`, joining the job) costs seconds before the first step, and no step's time
includes them. The ranks bind no cores (`cpu_bind="none"`), nor do the jobs they run.
"""),
    code(r"""
from workbench.lessons.runs import SPLIT_COLUMNS, step_split

SAME_JOB = dict(np=2, model="mlp", width=256, dataset="digits", epochs=1, max_steps=30,
                batch_size=32, lr=0.1, threads_per_rank=1, cpu_bind="none")
torch_ranks = workbench.ranks(np=2, engine="torch", cpu_bind="none")   # naive and DDP
rows = []
for engine in ("naive", "torch", "horovod"):   # one after another: they would share cores
    if engine == "horovod":   # torchrun's ranks are done; Horovod's stay for section 8
        torch_ranks.close()
        workbench.ranks(np=2, engine="horovod", cpu_bind="none")
    job = workbench.start(workbench.JobConfig(engine=engine, **SAME_JOB))
    assert job.wait(timeout=400) == "succeeded", job.summary
    rows.append(step_split(job))
table(rows, SPLIT_COLUMNS, caption="The same job on three engines, 2 ranks (torch = DDP)")
"""),
    md(r"""
Expect the naive engine's step to be the longest, most of it blocked on gradients: it
starts communicating only after the backward pass, runs one allreduce per tensor, each
paying the latency of its messages, and drives every message from Python. DDP and Horovod
hide part of their communication behind the backward pass and send fewer, larger messages
(buckets, Tensor Fusion: section 5). All
three compute the same update (the invariant of section 6 holds for each; the workbench's
tests check it), so the difference is speed alone. On a shared machine the numbers move
from run to run: rerun the cell, or try `width=1024`, to see which differences stay.
Notebook 08 builds DDP's buckets and its overlap by hand, one step at a time; notebook 07
shards what each rank holds (ZeRO, FSDP).
"""),
]

#: Section 8: the student writes the Horovod steps in a cell and runs them on real ranks.
YOUR_OWN_RANKS = [
    md(r"""
## 8. Your turn: the Horovod steps in your own code

So far the ranks ran the workbench's loop. Now write the steps yourself. Here is a plain
one-process training function (a small MLP, batch 8, two epochs):
"""),
    code(r"""
import inspect

import torch
import torch.nn.functional as F

from workbench.exercises.data_parallel import check_data_parallel, make_data, make_model, train
from workbench.ui import RunPanel

print(inspect.getsource(train))
"""),
    md(r"""
Below is its Horovod version: every changed line carries a `# Horovod:` comment. Read it,
change it if you like, and run the cell. `workbench.launch(fn, *args, np=2)` then sends your
function to 2 real Horovod ranks, like `horovod.run(fn, np=2)`: it returns at once, what the
ranks print appears under the cell with their rank, and `RunPanel(job)` charts what they
`workbench.report()`. The ranks here are the **warm** ones of section 7 (`workbench.ranks`):
`horovodrun` started them once, and every later run of your function, and the check below,
starts on them in a fraction of a second instead of seconds.
"""),
    code(r"""
def train_horovod(data, batch_size=8, lr=0.1, epochs=2, seed=0, checkpoint="runs/model.pt"):
    import horovod.torch as hvd  # imported on the ranks: the notebook's kernel needs none
    hvd.init()  # Horovod: 1. join the job (2. pinning: launch() gives each rank one core)
    x, y = data
    model = make_model(seed)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # Horovod: 5. same start
    optimizer = hvd.DistributedOptimizer(  # Horovod: 4. average the gradients
        torch.optim.SGD(model.parameters(), lr=lr), named_parameters=model.named_parameters())
    step = batch_size * hvd.size()  # one global batch: size x batch_size samples
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            mine = slice(start + hvd.rank() * batch_size, start + (hvd.rank() + 1) * batch_size)
            optimizer.zero_grad()  # (sharding is yours: `mine` is this rank's slice)
            loss = F.mse_loss(model(x[mine]), y[mine])
            loss.backward()
            optimizer.step()
            workbench.report(loss=loss.item(), samples=batch_size)
    if hvd.rank() == 0:  # Horovod: 6. one checkpoint, written by rank 0
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()
"""),
    code(r"""
pool = workbench.ranks(np=2, engine="horovod")   # section 7's; launch() and the check use it
job = workbench.launch(train_horovod, make_data(), np=2, engine="horovod")
run_panel = RunPanel(job)
run_panel
"""),
    code(r"""
await until_finished(run_panel)
first, second = job.results()  # each rank's return value, in rank order
print(job.status, "- largest difference between the ranks' parameters:",
      max((first[k] - second[k]).abs().max().item() for k in first))
"""),
    md(r"""
The two ranks end with the same parameters. Are they also the parameters of one process with
batch 16? `check_data_parallel` runs your function on 2 ranks and `train` with batch 16, and
compares; then again on 3 ranks, with other arguments, against the batch of 3. It also seeds
each rank differently (as separate machines would be), so a missing broadcast shows. Step 3
is left out on purpose: the reference uses the same `lr`, so scaling it would be a mistake
here. Delete the `broadcast_parameters` line, or write `op=hvd.Sum` in the optimizer, and
check again: the hint names the mistake.
"""),
    code(r"""
pool.close()   # ends the warm ranks: the check starts 2 ranks, then 3, of its own
check_data_parallel(train_horovod, engine="horovod")
"""),
]
