"""Exercise 2, shard a dataset: `shard(n_samples, rank, world_size)`."""

import torch

from mutants import accepted, refused


@accepted()
def blocks_with_the_remainder_first(n_samples, rank, world_size):
    base, extra = divmod(n_samples, world_size)
    start = rank * base + min(rank, extra)
    return list(range(start, start + base + (rank < extra)))


@accepted()
def every_pth_sample(n_samples, rank, world_size):
    return range(rank, n_samples, world_size)


@accepted()
def the_remainder_to_the_last_ranks(n_samples, rank, world_size):
    """Balanced too: the last n % p ranks get one sample more."""
    base, extra = divmod(n_samples, world_size)
    first_big = world_size - extra
    start = rank * base + max(0, rank - first_big)
    return list(range(start, start + base + (rank >= first_big)))


@accepted()
def torch_tensor_split(n_samples, rank, world_size):
    return torch.arange(n_samples).tensor_split(world_size)[rank]


@accepted()
def a_generator(n_samples, rank, world_size):
    return (i for i in range(n_samples) if i % world_size == rank)


@refused("Dropped samples", "on no rank")
def blocks_that_drop_the_remainder(n_samples, rank, world_size):
    size = n_samples // world_size
    return list(range(rank * size, (rank + 1) * size))


@refused("Unbalanced shards", "its share")
def the_last_rank_takes_the_rest(n_samples, rank, world_size):
    size = n_samples // world_size
    return list(range(rank * size, n_samples if rank == world_size - 1 else (rank + 1) * size))


@refused("Overlapping shards")
def overlapping_blocks(n_samples, rank, world_size):
    size = -(-n_samples // world_size)
    return list(range(rank * size, min(n_samples, (rank + 1) * size + 1)))


@refused("same shard")
def everything_on_every_rank(n_samples, rank, world_size):
    return range(n_samples)


@refused("outside 0..")
def one_past_the_end(n_samples, rank, world_size):
    return range(rank, n_samples + 1, world_size)


@refused("on no rank", "world_size (not a fixed number)")
def four_where_the_world_size_belongs(n_samples, rank, world_size):
    return range(rank, n_samples, 4)


@refused("Unbalanced shards")
def rank_0_takes_everything(n_samples, rank, world_size):
    return range(n_samples) if rank == 0 else []


_CALLS: dict = {}


@refused("different shards from two calls", "in any order")
def counts_its_calls_and_ignores_rank(n_samples, rank, world_size):
    k = _CALLS.get((n_samples, world_size), 0)
    _CALLS[(n_samples, world_size)] = k + 1
    return range(k % world_size, n_samples, world_size)


_TABLE = {(n, p, r): list(range(r, n, p))
          for n, p in ((10, 2), (12, 4), (10, 3), (13, 4), (13, 5), (7, 1)) for r in range(p)}


@refused("Dropped samples")
def the_six_cases_by_heart(n_samples, rank, world_size):
    return _TABLE.get((n_samples, world_size, rank), [])


@refused("package's own", "Write it yourself")
def the_training_loops_shard(n_samples, rank, world_size):
    from workbench.training.sharding import eval_shard

    return eval_shard(torch.arange(n_samples), rank, world_size).tolist()


@refused("package's own")
def distributed_sampler(n_samples, rank, world_size):
    from torch.utils.data import DistributedSampler

    return list(DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank,
                                   shuffle=False, drop_last=True))


@refused("not whole numbers")
def indices_as_text(n_samples, rank, world_size):
    return [str(i) for i in range(rank, n_samples, world_size)]


@refused("returned None")
def returns_nothing(n_samples, rank, world_size):
    list(range(rank, n_samples, world_size))


@refused("changed the checker", "this check does not count")
def one_rank_takes_all_and_len_says_one(n_samples, rank, world_size):
    """Rank 0 takes every sample, and Python's len, as the checker's code calls it, says
    that each shard holds one."""
    import builtins
    import sys

    def one(x, _len=len):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        return 1 if type(x) is list and caller.startswith("workbench.exercises") else _len(x)
    builtins.len = one
    return list(range(n_samples)) if rank == 0 else []
