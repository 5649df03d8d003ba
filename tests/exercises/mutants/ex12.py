"""Exercise 12, ZeRO-1: `make_shard_optimizer` alone (task "shard", in this process), and
with `zero1_step` (task "zero1", on 2 and then 3 real ranks): an answer of the second kind
is a class whose `make` and `step` are the two functions."""

import torch
import torch.distributed as dist

from mutants import accepted, refused


def make(flat_params, rank, world, lr):
    size = flat_params.numel() // world
    shard = torch.nn.Parameter(flat_params[rank * size:(rank + 1) * size])
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)


def step(flat_params, flat_grad, shard, optimizer, rank, world):
    dist.all_reduce(flat_grad)
    flat_grad /= world
    size = flat_params.numel() // world
    lo, hi = rank * size, (rank + 1) * size
    shard.grad = flat_grad[lo:hi]
    optimizer.step()
    dist.all_gather_into_tensor(flat_params, flat_params[lo:hi])


def _slice(flat, rank, world):
    size = flat.numel() // world
    return rank * size, (rank + 1) * size


# --- task 1, make_shard_optimizer alone ------------------------------------------------------

accepted(task="shard")(make)


@accepted(task="shard")
def with_a_ceiling_and_keywords(flat_params, rank, world, lr):
    size = -(-flat_params.numel() // world)
    mine = flat_params.narrow(0, rank * size, size)
    shard = torch.nn.Parameter(mine)
    return shard, torch.optim.SGD(params=[shard], lr=lr, momentum=0.9, dampening=0)


@refused("lr = 0.05", "Use the lr argument", task="shard")
def its_own_learning_rate(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, world))])
    return shard, torch.optim.SGD([shard], lr=0.05, momentum=0.9)


@refused("nesterov = True", "no Nesterov", task="shard")
def nesterov(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, world))])
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9, nesterov=True)


@refused("dampening = 0.5", "no Nesterov, dampening", task="shard")
def dampening(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, world))])
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9, dampening=0.5)


@refused("weight_decay = 0.1", task="shard")
def weight_decay(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, world))])
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9, weight_decay=0.1)


@refused("momentum = 0", task="shard")
def no_momentum(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, world))])
    return shard, torch.optim.SGD([shard], lr=lr)


@refused("a copy", task="shard")
def a_copy_of_the_slice(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, world))].clone())
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)


@refused("should hold 4 of the 12", task="shard")
def the_whole_buffer(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params)
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)


@refused("should hold", task="shard")
def two_where_world_belongs(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, 2))])
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)


@refused("package's own", task="shard")
def the_package_optimizer(flat_params, rank, world, lr):
    from workbench.sharded.zero1 import Zero1Optimizer

    model = torch.nn.Linear(1, flat_params.numel() - 1)     # numel parameters, then sharded
    zero = Zero1Optimizer(model, lambda p: torch.optim.SGD(p, lr=lr, momentum=0.9), rank,
                          world)
    return zero.shard, zero.local


# --- task 2, the step on real ranks -----------------------------------------------------------


@accepted(task="zero1")
class TheSolution:
    make, step = make, step


@accepted(task="zero1")
class ReduceScatterThenAllGather:
    """ZeRO-2's traffic: each rank receives only its slice of the summed gradients."""
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        mine = torch.empty_like(shard)
        dist.reduce_scatter_tensor(mine, flat_grad)
        shard.grad = mine / world
        optimizer.step()
        dist.all_gather_into_tensor(flat_params, shard.detach().clone())


@accepted(task="zero1")
class TheCollectivesNewerNames:
    """torch 2.13's names for the same two collectives."""
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        mine = torch.empty_like(shard)
        dist.reduce_scatter_single(mine, flat_grad)
        shard.grad = mine / world
        optimizer.step()
        dist.all_gather_single(flat_params, shard.detach().clone())


@accepted(task="zero1")
class BroadcastEverySlice:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        size = flat_params.numel() // world
        shard.grad = flat_grad[rank * size:(rank + 1) * size] / world
        optimizer.step()
        for r in range(world):
            dist.broadcast(flat_params[r * size:(r + 1) * size], src=r)


@accepted(task="zero1")
class SendsAndReceivesTheSlices:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        size = flat_params.numel() // world
        shard.grad = flat_grad[rank * size:(rank + 1) * size].div(world)
        optimizer.step()
        mine, requests = flat_params[rank * size:(rank + 1) * size].clone(), []
        for r in range(world):
            if r != rank:
                requests.append(dist.isend(mine, r))
                requests.append(dist.irecv(flat_params[r * size:(r + 1) * size], r))
        for request in requests:
            request.wait()


@accepted(task="zero1")
class AllReducesAMaskedCopy:
    """The gradient averaged by an all-reduce, the slices gathered by a second all-reduce
    of a zero-masked copy: twice the all-gather's traffic, the same result."""
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        flat_grad.div_(world)
        size = flat_params.numel() // world
        shard.grad = flat_grad[rank * size:(rank + 1) * size]
        optimizer.step()
        masked = torch.zeros_like(flat_params)
        masked[rank * size:(rank + 1) * size] = shard.detach()
        dist.all_reduce(masked)
        flat_params.copy_(masked)


@refused("all-gather is missing", task="zero1")
class NoAllGather:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        flat_grad /= world
        lo, hi = _slice(flat_params, rank, world)
        shard.grad = flat_grad[lo:hi]
        optimizer.step()


@refused("divided by 2, not by the world size", "with 3", task="zero1")
class TwoWhereWorldBelongs:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        flat_grad /= 2
        lo, hi = _slice(flat_params, rank, world)
        shard.grad = flat_grad[lo:hi]
        optimizer.step()
        dist.all_gather_into_tensor(flat_params, flat_params[lo:hi])


@refused("summed over the 2 ranks, not averaged", task="zero1")
class SummedNotAveraged:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        lo, hi = _slice(flat_params, rank, world)
        shard.grad = flat_grad[lo:hi]
        optimizer.step()
        dist.all_gather_into_tensor(flat_params, flat_params[lo:hi])


@refused("lr = 0.05", "Use the lr argument", task="zero1")
class ItsOwnLearningRate:
    make = its_own_learning_rate
    step = step


@refused("lr = ", "Use the lr argument", task="zero1")
class SummedWithTheLearningRateDivided:
    """Mathematically the average for SGD: but the optimizer's lr is not the one given."""

    def make(flat_params, rank, world, lr):
        shard = torch.nn.Parameter(flat_params[slice(*_slice(flat_params, rank, world))])
        return shard, torch.optim.SGD([shard], lr=lr / world, momentum=0.9)

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        lo, hi = _slice(flat_params, rank, world)
        shard.grad = flat_grad[lo:hi]
        optimizer.step()
        dist.all_gather_into_tensor(flat_params, flat_params[lo:hi])


@refused("before the optimizer's step", task="zero1")
class GathersBeforeStepping:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        flat_grad /= world
        lo, hi = _slice(flat_params, rank, world)
        dist.all_gather_into_tensor(flat_params, flat_params[lo:hi].clone())
        shard.grad = flat_grad[lo:hi]
        optimizer.step()


@refused("no all-reduce or reduce-scatter", "averaged", task="zero1")
class NoAveraging:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        lo, hi = _slice(flat_params, rank, world)
        shard.grad = flat_grad[lo:hi]
        optimizer.step()
        dist.all_gather_into_tensor(flat_params, flat_params[lo:hi])


@refused("keeps momentum for the whole model", "it steps everything", task="zero1")
class EveryRankStepsEverything:
    make = the_whole_buffer

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        shard.grad = flat_grad / world
        optimizer.step()


@refused("different collectives", "`if rank == 0`", task="zero1")
class OnlyRankZeroAverages:
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        if rank == 0:
            dist.all_reduce(flat_grad)
        flat_grad /= world
        lo, hi = _slice(flat_params, rank, world)
        shard.grad = flat_grad[lo:hi]
        optimizer.step()
        dist.all_gather_into_tensor(flat_params, flat_params[lo:hi])


@refused("package's own", task="zero1")
class ThePackageStep:
    """Borrows the engine's step, on a stand-in for its `self`."""
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        from types import SimpleNamespace

        from workbench.sharded.zero1 import Zero1Optimizer

        dist.all_reduce(flat_grad)
        flat_grad /= world
        lo, hi = _slice(flat_params, rank, world)
        shard.grad = flat_grad[lo:hi]
        me = SimpleNamespace(local=optimizer, flat=SimpleNamespace(
            data=flat_params, mine=lambda: flat_params[lo:hi]))
        Zero1Optimizer.step(me)


@refused("package's own", task="zero1")
class CopiesTheCheckersReference:
    """No gradient, no communication: the result the checker expects, read from its module."""
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        from workbench.exercises import zero

        shard.grad = torch.zeros_like(shard)
        optimizer.step()
        with torch.enable_grad():
            want = zero.reference(world, optimizer.param_groups[0]["lr"])
        with torch.no_grad():
            flat_params.copy_(want)


_MOMENTUM = {}


@refused("nothing was sent after the optimizer's step", task="zero1")
class DataParallelInDisguise:
    """Every rank keeps the whole model's momentum in a tensor of its own and updates every
    slice itself; the shard's optimizer steps too, so that its state looks right."""
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.all_reduce(flat_grad)
        flat_grad /= world
        lo, hi = _slice(flat_params, rank, world)
        lr = optimizer.param_groups[0]["lr"]
        buffer = _MOMENTUM.get("buffer")
        buffer = flat_grad.clone() if buffer is None else buffer.mul_(0.9).add_(flat_grad)
        _MOMENTUM["buffer"] = buffer
        shard.grad = flat_grad[lo:hi]
        optimizer.step()
        with torch.no_grad():
            flat_params.sub_(lr * buffer)
            flat_params[lo:hi] += lr * buffer[lo:hi]


_RANK0 = {}


@refused("with a gradient that is not their slice of the average", task="zero1")
class RankZeroDoesEverything:
    """Rank 0 updates the whole buffer with a momentum of its own and broadcasts it; every
    rank steps its shard's optimizer on zeros, so that its state exists."""
    make = make

    def step(flat_params, flat_grad, shard, optimizer, rank, world):
        dist.reduce(flat_grad, dst=0)
        lr = optimizer.param_groups[0]["lr"]
        if rank == 0:
            flat_grad /= world
            buffer = _RANK0.get("buffer")
            buffer = flat_grad.clone() if buffer is None else buffer.mul_(0.9).add_(flat_grad)
            _RANK0["buffer"] = buffer
            with torch.no_grad():
                flat_params.sub_(lr * buffer)
        shard.grad = torch.zeros_like(shard)
        saved = shard.detach().clone()
        optimizer.step()
        with torch.no_grad():
            shard.copy_(saved if rank != 0 else shard)
        dist.broadcast(flat_params, src=0)
