"""Exercise: average the gradients of all ranks by hand, with an allreduce.

In synchronous data parallelism every rank computes a gradient on its own mini-batch, then
all ranks replace it with the *average* over ranks before the optimizer step, so every
replica applies the same update and the replicas stay identical (Sergeev & Del Balso 2018,
arXiv:1802.05799; Li et al. 2020, arXiv:2006.15704). An allreduce gives every rank the *sum*;
dividing by the world size turns it into the average. Horovod can do both in one call
(`hvd.allreduce(t, op=hvd.Average)`); `torch.distributed.all_reduce` only sums, which is
why DDP divides by the world size itself.

Here the ranks are simulated in one process: a list of tensors whose index is the rank, and
`allreduce_sum` is the only way between them. The checker tries 2, 3 and 4 ranks and a
number drawn at each check, and watches that the student's function calls `allreduce_sum`
(own_work.py): a function that stacks the ranks' tensors itself reads what a real rank
never sees.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet
from workbench.exercises.own_work import Watch

#: World sizes the checker tries, so an answer that only works for 2 ranks is caught (and
#: one more, drawn at each check).
WORLD_SIZES = (2, 3, 4)


def allreduce_sum(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Simulated allreduce with the sum: every rank receives the element-wise sum.

    `tensors[k]` is rank k's tensor; the result has one new tensor per rank, all equal.
    """
    total = torch.stack([t.detach() for t in tensors]).sum(dim=0)
    return [total.clone() for _ in tensors]


def example_gradients(world_size: int, size: int = 5, seed: int = 0) -> list[torch.Tensor]:
    """One gradient tensor per rank, as if each had seen a different mini-batch."""
    gen = torch.Generator().manual_seed(seed + world_size)
    return [torch.randn(size, generator=gen, dtype=torch.float64) for _ in range(world_size)]


@guarded
def check_average_gradients(fn) -> Feedback:
    """Check `fn(rank_grads) -> list of tensors`, the gradient each rank holds afterwards.

    Tries world sizes 2, 3, 4 and one drawn at random; every rank must end with the
    average of all ranks' gradients, built from `allreduce_sum`. A wrong answer gets a hint
    that names the mistake (a sum instead of an average, a fixed divisor, no communication
    at all, ranks that disagree).
    """
    factors: dict[int, float] = {}
    rng = random.Random()
    for p, seed in (*((w, 0) for w in WORLD_SIZES), (rng.randint(5, 9), rng.randrange(1000))):
        grads = example_gradients(p, seed=seed)
        through = Watch(["workbench.exercises.allreduce:allreduce_sum"])
        out, crash = call_student(through.wrap(fn) if callable(fn) else fn,
                                  [g.clone() for g in grads])
        if crash:
            return crash
        problem = _shape_problem(out, grads)
        if problem:
            return problem
        out = [torch.as_tensor(t, dtype=torch.float64).detach() for t in out]
        mean = torch.stack(grads).mean(dim=0)
        if all(torch.allclose(t, mean, atol=1e-9) for t in out):
            if not through.used:
                return not_yet(f"with {p} ranks every rank holds the average, but your "
                               "function never called allreduce_sum: it read every rank's "
                               "gradient itself, which a real rank cannot do.",
                               "The other ranks' gradients reach a rank only through the "
                               "allreduce: call ex.allreduce_sum(rank_grads) and build the "
                               "average from what it returns.")
            if through.calls > 1:
                return not_yet(f"with {p} ranks your function called allreduce_sum "
                               f"{through.calls} times: each call is a whole allreduce over "
                               "the network.", "One allreduce gives every rank the sum: "
                               "call it once and divide what it returns.")
            factors[p] = 1.0
            continue
        if not all(torch.allclose(t, out[0], atol=1e-9) for t in out):
            return _ranks_disagree(out, grads, p)
        factor = _scale_of(out[0], mean)
        if factor is None:
            return not_yet(
                f"with {p} ranks the result is not the average of the gradients, nor a "
                "multiple of it.",
                "Every element must become (g_0 + g_1 + ... + g_{p-1}) / p: call "
                "allreduce_sum(rank_grads) once and divide what it returns by p.",
            )
        factors[p] = factor
    wrong = {p: f for p, f in factors.items() if abs(f - 1.0) > 1e-6}
    if not wrong:
        return correct(
            f"every rank holds the average gradient, for {', '.join(map(str, factors))} ranks. "
            "All replicas will take the same step and stay identical."
        )
    return _wrong_scale(factors)


def _shape_problem(out: object, grads: list[torch.Tensor]) -> Feedback | None:
    """Feedback when the result is not one tensor per rank of the right shape, else None."""
    p = len(grads)
    if out is None:
        return not_yet(
            "your function returned None.",
            "End the function with `return` followed by the list of averaged tensors, one per "
            "rank.",
        )
    if isinstance(out, torch.Tensor) or not isinstance(out, Sequence) or len(out) != p:
        return not_yet(
            f"with {p} ranks, expected a list of {p} tensors (one per rank), got "
            f"{_describe(out)}.",
            "Return one tensor per rank: a list as long as rank_grads. allreduce_sum already "
            "returns such a list.",
        )
    for rank, t in enumerate(out):
        try:
            shape = tuple(torch.as_tensor(t).shape)
        except (TypeError, ValueError, RuntimeError):
            shape = None
        if shape != tuple(grads[rank].shape):
            return not_yet(
                f"rank {rank}'s result has shape {shape}, but its gradient has shape "
                f"{tuple(grads[rank].shape)}.",
                "Averaging works element by element: the result keeps the gradient's shape. "
                "Did you sum over the elements of a tensor instead of over the ranks?",
            )
    return None


def _describe(out: object) -> str:
    if isinstance(out, torch.Tensor):
        return f"a single tensor of shape {tuple(out.shape)}"
    if isinstance(out, Sequence):
        return f"a {type(out).__name__} of length {len(out)}"
    return f"a {type(out).__name__}"


def _scale_of(result: torch.Tensor, mean: torch.Tensor) -> float | None:
    """The number c with result == c * mean, or None when there is no such number."""
    c = float(result @ mean / (mean @ mean))
    return c if torch.allclose(result, c * mean, atol=1e-9) else None


def _ranks_disagree(out: list[torch.Tensor], grads: list[torch.Tensor], p: int) -> Feedback:
    """The ranks hold different tensors: find out whether anything was communicated."""
    message = f"with {p} ranks, the ranks end with different tensors."
    if all(torch.allclose(t, g, atol=1e-9) for t, g in zip(out, grads, strict=True)):
        return not_yet(
            message + " Each rank still holds its own gradient.",
            "Nothing was communicated: each replica would step with its own gradient and the "
            "models would drift apart. Combine the ranks' gradients with allreduce_sum first.",
        )
    if all(torch.allclose(t, g / p, atol=1e-9) for t, g in zip(out, grads, strict=True)):
        return not_yet(
            message + " Each rank holds its own gradient divided by the world size.",
            "You divided by the world size but never combined the ranks: call "
            "allreduce_sum(rank_grads) and divide its result, not each rank's own gradient.",
        )
    return not_yet(
        message,
        "After an allreduce every rank holds the same tensor. Divide the allreduce's result "
        "the same way on every rank.",
    )


def _wrong_scale(factors: dict[int, float]) -> Feedback:
    """Every rank agrees, but on c times the average: name the divisor that went wrong.

    The pattern over all world sizes tells the slips apart: with 2 ranks a sum and a
    division by p − 1 both give twice the average, with 3 ranks they do not.
    """
    p, c = next((p, c) for p, c in factors.items() if abs(c - 1.0) > 1e-6)
    if abs(c) < 1e-12:
        return not_yet(
            f"with {p} ranks every rank holds zeros.",
            "The gradients are gone: return the averaged tensors, not new zero tensors. Did "
            "you create the result with zeros_like and never add the sum to it?",
        )
    if all(abs(f - q / (q - 1)) < 1e-6 for q, f in factors.items()) and any(
            abs(f - q) > 1e-6 for q, f in factors.items()):
        return not_yet(
            "you divide by the world size minus one.",
            "Divide the sum by p = len(rank_grads), the number of gradients added, not by "
            "p − 1: the average of p numbers is their sum over p.",
        )
    if all(abs(f - q) < 1e-6 for q, f in factors.items()):
        return not_yet(
            f"with {p} ranks every rank holds the sum of the gradients, {p} times the average.",
            "An allreduce sums; you still have to divide by the world size. Summing instead of "
            "averaging makes each gradient p times larger: with plain SGD, like a p times "
            "larger learning rate (Adam, which divides by the gradient's size, hardly notices).",
        )
    zero = next((q for q, f in factors.items() if abs(f) < 1e-12), None)
    if zero is not None:
        return not_yet(
            f"with {zero} ranks every rank holds zeros, with other numbers of ranks it does not.",
            "A division that depends on the number of ranks went to zero: integer division "
            "(//) of a small number by len(rank_grads) gives 0. Divide the sum by "
            "len(rank_grads) with /, exactly once.",
        )
    divisors = {q: q / f for q, f in factors.items()}
    if len({round(d, 6) for d in divisors.values()}) == 1:
        fixed = next(iter(divisors.values()))
        return not_yet(
            f"you always divide by {fixed:g}, whatever the number of ranks.",
            "Divide by the world size, which is len(rank_grads), instead of a fixed number: "
            f"the result is right only when there are {fixed:g} ranks.",
        )
    if abs(c - 1 / p) < 1e-6:
        return not_yet(
            f"with {p} ranks the result is the average divided by {p} once more.",
            "You divided by the world size twice. Divide the summed gradient exactly once.",
        )
    return not_yet(
        f"with {p} ranks the result is {c:.3g} times the average.",
        "Divide the sum by the world size, len(rank_grads), and by nothing else (not by the "
        "batch size, not by the number of elements).",
    )
