"""Exercise 11: make this loop data-parallel, checked on 2 and 3 real ranks."""

from workbench.notebooks import code, function_task, md

NAME = "11_make_this_loop_data_parallel.ipynb"

CELLS = [
    md(r"""
# Exercise 11: make this loop data-parallel

**Goals.** After this exercise you can
- turn a one-process PyTorch training function into a Horovod one, and into a DDP one,
- run your own function on real ranks with `workbench.launch` and watch them,
- prove the conversion right: 2 ranks with batch $b$ end exactly where one process with
  batch $2b$ does.

**Time:** about 30 minutes.
"""),
    md(r"""
## Background

Notebook 02 showed that $N$ ranks with batch $b$ take the same SGD steps as one process with
batch $N \cdot b$, *if* every rank starts from the same weights, trains on its own shard of
each global batch, and averages its gradients with the others before every step. The checker
below holds you to that: it runs your function on 2 real ranks and then on 3, each time with
other arguments (batch size, learning rate, epochs, seed), runs `train` in one process with
batch $N b$, and compares the final parameters. To expose a missing broadcast it gives each
rank a different `seed`, as separate machines would start from different weights. The right
parameters are not enough: it also watches, on each rank, which samples every step's
gradients were computed from (they must be that rank's own, not another rank's), the
learning rate the optimizer used, and the collective calls (something must cross ranks), so
training the whole global batch on every rank is not data parallelism. Any sharding or
averaging that gives the serial result passes.

Here is the one-process function to convert. Your versions take the same arguments and
return `model.state_dict()`.
"""),
    code(r"""
import inspect

import torch  # noqa: F401 - your answers below use torch, F and make_model
import torch.nn.functional as F  # noqa: F401

import workbench
from workbench.exercises import data_parallel as ex
from workbench.exercises.data_parallel import make_data, make_model, train  # noqa: F401
from workbench.ui import RunPanel

print(inspect.getsource(train))
"""),
    md(r"""
## Task 1: Horovod

Write `train_horovod`: initialise Horovod, broadcast rank 0's initial parameters, wrap the
optimizer in `hvd.DistributedOptimizer`, step over the data in global batches of
`hvd.size() * batch_size` samples where rank $r$ takes the $r$-th slice of `batch_size`
samples, and save the checkpoint on rank 0 only. (Pinning: `launch` already gives each
rank one core.)
"""),
    function_task(r"""
def train_horovod(data, batch_size=8, lr=0.1, epochs=2, seed=0, checkpoint="runs/model.pt"):
    import horovod.torch as hvd
    hvd.init()                                                      # Horovod: join the job
    (x, y), model = data, make_model(seed)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)       # Horovod: same start
    optimizer = hvd.DistributedOptimizer(                           # Horovod: average grads
        torch.optim.SGD(model.parameters(), lr=lr), named_parameters=model.named_parameters())
    step = batch_size * hvd.size()                                  # Horovod: global batch
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            mine = slice(start + hvd.rank() * batch_size,           # Horovod: my shard
                         start + (hvd.rank() + 1) * batch_size)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x[mine]), y[mine])
            loss.backward()
            optimizer.step()
            workbench.report(loss=loss.item(), samples=batch_size)
    if hvd.rank() == 0:                                             # Horovod: one writer
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()
""", todo="""
Your code: `import horovod.torch as hvd`, then the Horovod steps around the loop of
`train`.
"""),
    md(r"""
Run it on 2 Horovod ranks and watch them: the thin lines are each rank's loss on its own
shard. The run uses two **warm ranks** (`workbench.ranks`), which `horovodrun` starts once:
every later run (after you change your function, say) starts in a fraction of a second.
"""),
    code(r"""
pool = workbench.ranks(np=2, engine="horovod")   # launch() uses it
job = workbench.launch(train_horovod, make_data(), np=2, engine="horovod")
RunPanel(job)
"""),
    md(r"""
Then check it. The check starts 2 ranks, then 3 (a few seconds each): close the pool first,
so that its cores are free for them.
"""),
    code(r"""
pool.close()   # frees its cores for the check's own ranks
"""),
    code('ex.check_data_parallel(train_horovod, engine="horovod")'),
    md(r"""
## Task 2: PyTorch DDP

Now the same with `torch.distributed`: `dist.init_process_group("gloo")`, wrap the model in
`DistributedDataParallel` (its constructor broadcasts rank 0's parameters, and `backward()`
averages the gradients), shard as before with `dist.get_rank()` and `dist.get_world_size()`,
and save `model.module.state_dict()` on rank 0 only.
"""),
    function_task(r"""
def train_ddp(data, batch_size=8, lr=0.1, epochs=2, seed=0, checkpoint="runs/model.pt"):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")                                 # DDP: join the job
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data
    model = DDP(make_model(seed))                   # DDP: broadcast, then average in backward
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            lo = start + rank * batch_size                          # DDP: my shard
            xb, yb = x[lo:lo + batch_size], y[lo:lo + batch_size]
            optimizer.zero_grad()
            F.mse_loss(model(xb), yb).backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.module.state_dict(), checkpoint)           # DDP: the inner model
    dist.destroy_process_group()
    return model.module.state_dict()
""", todo="""
Your code: `import torch.distributed as dist`, `from torch.nn.parallel import
DistributedDataParallel as DDP`, then the same steps in DDP's words.
"""),
    code('ex.check_data_parallel(train_ddp, engine="torch")'),
    md(r"""
## Summary

- Converting a loop to Horovod: `hvd.init()`, broadcast the initial parameters, wrap the
  optimizer in `hvd.DistributedOptimizer`, shard each global batch, checkpoint on rank 0.
  DDP: `init_process_group`, `DistributedDataParallel(model)` (broadcast and averaging),
  the same shards and the same single writer.
- Done right, 2 ranks with batch $b$ end with the parameters of one process with batch $2b$,
  to the last few digits: a test that needs no accuracy target and no patience.

## Going further

Make one mistake at a time in your Horovod version and read the checker's hint: remove the
broadcast; replace `hvd.DistributedOptimizer` by the plain optimizer; let every rank train on
all the data; pass `op=hvd.Sum`; multiply `lr` by `hvd.size()`; save on every rank. Why does
a learning rate scaled by the number of ranks fail this check, when Horovod's examples scale
it? (Their global batch grows with the ranks; here the reference is fixed at batch $2b$ and
the same `lr`.)
"""),
]
