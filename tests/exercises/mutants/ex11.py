"""Exercise 11, make the loop data-parallel: `train_x(data, batch_size, lr, epochs, seed,
checkpoint)`, with Horovod (task "horovod") and with torch.distributed (task "torch"), on 2
and then 3 real ranks."""

import torch
import torch.nn.functional as F

from mutants import accepted, refused
from workbench.exercises.data_parallel import make_model


def horovod(data, batch_size, lr, epochs, seed, checkpoint, *, broadcast=True, average=True,
            shard=True, op="Average", lr_times=1.0, all_save=False, strided=False,
            average_params=False, world=None, seed_used=None):
    """The Horovod conversion of `train`, with switches that each make one mistake (or write
    a right answer another way: `strided` shards, `average_params` after plain SGD)."""
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    x, y = data
    model = make_model(seed if seed_used is None else seed_used)
    if broadcast:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * lr_times)
    if average and not average_params:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             op=getattr(hvd, op))
    rank, size = hvd.rank(), world or hvd.size()
    step = batch_size * size if shard else batch_size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            mine = slice(start + rank * batch_size, start + (rank + 1) * batch_size) if shard \
                else slice(start, start + batch_size)
            if strided:
                mine = slice(start + rank, start + step, size)
            optimizer.zero_grad()
            F.mse_loss(model(x[mine]), y[mine]).backward()
            optimizer.step()
            if average_params:
                with torch.no_grad():
                    for p in model.parameters():
                        p.copy_(hvd.allreduce(p, op=hvd.Average))
    if rank == 0 or all_save:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


def ddp(data, batch_size, lr, epochs, seed, checkpoint, *, shard=True, save=True, wrap=True,
        fixed=False):
    """The DistributedDataParallel conversion of `train`, with switches that each make one
    mistake (`fixed`: the notebook's batch size, rate and epochs written as numbers)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data
    if fixed:
        batch_size, lr, epochs = 8, 0.1, 2
    model = DistributedDataParallel(make_model(seed)) if wrap else _Plain(make_model(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * size if shard else batch_size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            lo = start + rank * batch_size if shard else start
            optimizer.zero_grad()
            F.mse_loss(model(x[lo:lo + batch_size]), y[lo:lo + batch_size]).backward()
            optimizer.step()
    if rank == 0 and save:
        torch.save(model.module.state_dict(), checkpoint)
    return model.module.state_dict()


class _Plain(torch.nn.Module):
    """The model as DDP would hold it (`.module`), with nothing crossing ranks."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def _with(fn, task, words=(), **switches):
    """`fn` with `switches`, marked as an answer of `task` (refused with `words`, if any)."""
    def answer(data, batch_size, lr, epochs, seed, checkpoint):
        return fn(data, batch_size, lr, epochs, seed, checkpoint, **switches)
    answer.__name__ = "_".join(f"{k}_{v}" for k, v in switches.items()) or fn.__name__
    answer.__module__ = __name__
    return (refused(*words, task=task) if words else accepted(task=task))(answer)


_with(horovod, "horovod")
_with(horovod, "horovod", strided=True)
_with(horovod, "horovod", average_params=True)
_with(horovod, "horovod", ("Broadcast rank 0's initial parameters",), broadcast=False)
_with(horovod, "horovod", ("Average the gradients across ranks",), average=False)
_with(horovod, "horovod", ("every rank trained on the whole data set",), shard=False)
_with(horovod, "horovod", ("summed over the ranks, not averaged",), op="Sum")
_with(horovod, "horovod", ("rank(s) [0, 1] wrote the checkpoint",), all_save=True)
_with(horovod, "horovod", ("your optimizer used lr = ", "2 x the lr"), lr_times=2.0)
_with(horovod, "horovod", ("not the lr = 0.1 it was given",), op="Sum", lr_times=0.5)
_with(horovod, "horovod", ("with batch 18", "Check the shards"), world=2)
_with(horovod, "horovod", ("not from the seed they were given",), broadcast=False, seed_used=0)
_with(ddp, "torch")
_with(ddp, "torch", ("every rank trained on the whole data set",), shard=False)
_with(ddp, "torch", ("no rank wrote the checkpoint",), save=False)
_with(ddp, "torch", ("followed its own",), wrap=False)
_with(ddp, "torch", ("did not use the arguments", "batch_size = 6", "lr = 0.05"), fixed=True)


@refused("the whole global batch by itself", "no distributed work", task="horovod")
def no_distribution(data, batch_size, lr, epochs, seed, checkpoint):
    """Every rank trains the whole global batch by itself, from rank 0's seed, with only
    a broadcast to start: it ends with exactly the right parameters."""
    import horovod.torch as hvd

    hvd.init()
    x, y = data
    model = make_model(seed)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * hvd.size()
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            optimizer.zero_grad()
            F.mse_loss(model(x[start:start + step]), y[start:start + step]).backward()
            optimizer.step()
    if hvd.rank() == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


@refused("the whole global batch by itself", task="horovod")
def a_decoy_and_the_global_batch_out_of_sight(data, batch_size, lr, epochs, seed, checkpoint):
    """Each step calls the model on its own shard (output dropped), then trains the whole
    global batch through `layer.forward`, which no module hook sees."""
    import horovod.torch as hvd

    hvd.init()
    x, y = data
    model = make_model(seed)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * hvd.size()
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            lo = start + hvd.rank() * batch_size
            model(x[lo:lo + batch_size])
            h = x[start:start + step]
            for layer in model:
                h = layer.forward(h)
            optimizer.zero_grad()
            F.mse_loss(h, y[start:start + step]).backward()
            optimizer.step()
    if hvd.rank() == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


@refused("no gradient computed from samples of the data set on some rank", task="torch")
def rank_0_does_everything_behind_a_decoy(data, batch_size, lr, epochs, seed, checkpoint):
    """Rank 0 trains the global batch, out of sight; the others step on nothing; rank 0's
    weights are broadcast at the end."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data
    model = make_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            lo = start + rank * batch_size
            model(x[lo:lo + batch_size])
            optimizer.zero_grad()
            if rank == 0:
                h = x[start:start + step]
                for layer in model:
                    h = layer.forward(h)
                F.mse_loss(h, y[start:start + step]).backward()
            optimizer.step()
    for p in model.state_dict().values():
        dist.broadcast(p, src=0)
    if rank == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


@accepted(task="torch")
def averages_the_gradients_by_hand(data, batch_size, lr, epochs, seed, checkpoint):
    """No DDP: rank 0's parameters broadcast, then each gradient all-reduced and divided."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data
    model = make_model(seed)
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            lo = start + rank * batch_size
            optimizer.zero_grad()
            F.mse_loss(model(x[lo:lo + batch_size]), y[lo:lo + batch_size]).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= size
            optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


@refused("not from the seed they were given", task="torch")
def one_start_for_all_a_dummy_collective_and_a_decoy(data, batch_size, lr, epochs, seed,
                                                     checkpoint):
    """make_model(0) on every rank (no broadcast needed), one all-reduce of a zero so that
    something crossed ranks, a decoy forward on its own shard, the global batch out of
    sight."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data
    model = make_model(0)
    dist.all_reduce(torch.zeros(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            lo = start + rank * batch_size
            model(x[lo:lo + batch_size])
            h = x[start:start + step]
            for layer in model:
                h = layer.forward(h)
            optimizer.zero_grad()
            F.mse_loss(h, y[start:start + step]).backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


@refused("the whole global batch by itself", task="torch")
def hides_the_global_batch_by_a_nudge(data, batch_size, lr, epochs, seed, checkpoint):
    """Its own shard's gradient computed for show, then replaced by the whole global batch's,
    its samples nudged by a millionth so that they no longer equal the data's rows."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data
    model = make_model(seed)
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            lo = start + rank * batch_size
            optimizer.zero_grad()
            F.mse_loss(model(x[lo:lo + batch_size]), y[lo:lo + batch_size]).backward()
            optimizer.zero_grad()
            nudged = x[start:start + step] * (1 + 1e-6)
            F.mse_loss(model(nudged), y[start:start + step]).backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()
