"""Exercise 1, average the gradients: `average_gradients(rank_grads)`, simulated ranks."""

import torch

from mutants import accepted, refused
from workbench.exercises import allreduce as ex


@accepted()
def divides_what_the_allreduce_returns(rank_grads):
    world_size = len(rank_grads)
    return [total / world_size for total in ex.allreduce_sum(rank_grads)]


@accepted()
def divides_before_the_allreduce(rank_grads):
    """Each rank scales its own gradient by 1/p; the allreduce then sums the means."""
    return ex.allreduce_sum([g / len(rank_grads) for g in rank_grads])


@accepted()
def in_place_with_torch_div(rank_grads):
    summed = ex.allreduce_sum(rank_grads)
    for t in summed:
        t.div_(len(summed))
    return summed


@refused("sum of the gradients", "divide by the world size")
def sums_without_dividing(rank_grads):
    return ex.allreduce_sum(rank_grads)


@refused("always divide by 2", "len(rank_grads)")
def two_where_the_world_size_belongs(rank_grads):
    return [t / 2 for t in ex.allreduce_sum(rank_grads)]


@refused("divided by the world size twice")
def divides_twice(rank_grads):
    return [t / len(rank_grads) ** 2 for t in ex.allreduce_sum(rank_grads)]


@refused("world size minus one", "not by p − 1")
def divides_by_p_minus_one(rank_grads):
    return [t / (len(rank_grads) - 1) for t in ex.allreduce_sum(rank_grads)]


@refused("holds zeros", "integer division")
def integer_division(rank_grads):
    return [t * (2 // len(rank_grads)) for t in ex.allreduce_sum(rank_grads)]


@refused("holds zeros")
def zeros(rank_grads):
    return [torch.zeros_like(g) for g in rank_grads]


@refused("Nothing was communicated")
def no_communication(rank_grads):
    return list(rank_grads)


@refused("never combined the ranks")
def divides_its_own_gradient(rank_grads):
    return [g / len(rank_grads) for g in rank_grads]


@refused("never called allreduce_sum", "only through the allreduce")
def reads_every_rank_itself(rank_grads):
    mean = torch.stack(list(rank_grads)).mean(0)
    return [mean.clone() for _ in rank_grads]


@refused("never called allreduce_sum")
def one_rank_sums_everything_in_a_loop(rank_grads):
    total = rank_grads[0].clone()
    for g in rank_grads[1:]:
        total = total + g
    return [total / len(rank_grads) for _ in rank_grads]


@refused("called allreduce_sum 2 times")
def calls_the_allreduce_twice(rank_grads):
    ex.allreduce_sum(rank_grads)
    return [t / len(rank_grads) for t in ex.allreduce_sum(rank_grads)]


@refused("ranks end with different tensors")
def only_rank_0_averages(rank_grads):
    summed = ex.allreduce_sum(rank_grads)
    return [summed[0] / len(rank_grads), *rank_grads[1:]]


_MEMO = {p: [torch.stack(ex.example_gradients(p)).mean(0)] * p for p in (2, 3, 4)}


@refused("never called allreduce_sum")
def answers_learned_by_heart(rank_grads):
    """The averages of the example gradients for 2, 3 and 4 ranks; its own gradients else."""
    return _MEMO.get(len(rank_grads), list(rank_grads))


@refused("returned None")
def returns_nothing(rank_grads):
    ex.allreduce_sum(rank_grads)


@refused("one per rank")
def one_tensor_for_all(rank_grads):
    return ex.allreduce_sum(rank_grads)[0] / len(rank_grads)


@refused("shape")
def sums_each_tensors_elements(rank_grads):
    return [t.sum() / len(rank_grads) for t in ex.allreduce_sum(rank_grads)]
