"""Exercise: give every rank its own part (shard) of the training set.

In data parallelism each rank trains on a different subset of the samples. A correct
sharding is a *partition*: every sample is on exactly one rank (no overlap, none dropped),
and the shards have almost the same size (they differ by at most one sample), so no rank
does more than its share of the work.

A balanced partition does not give every rank the same number of *steps*, which
synchronous training needs: with n = 13 samples, p = 4 ranks and a batch of 1, rank 0 has 4
samples and takes 4 steps, the others 3, and rank 0's fourth allreduce waits for partners
that have finished, until Horovod reports a peer shut down or gloo's timeout ends it
(:func:`steps_per_rank`). Equal step counts need equal shards: drop the incomplete last
global batch (as the workbench's training loop does) or pad it with repeated samples (as
PyTorch's `DistributedSampler` does by default).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Iterable

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet
from workbench.exercises.own_work import refusing

#: (number of samples, world size) pairs the checker tries; most leave a remainder.
CASES = ((10, 2), (12, 4), (10, 3), (13, 4), (13, 5), (7, 1))


def unseen_case() -> tuple[int, int]:
    """(n, p) drawn anew at each check, with a remainder."""
    rng = random.Random()
    while (case := (rng.randint(20, 99), rng.randint(3, 9)))[0] % case[1] == 0:
        pass
    return case


@guarded
@refusing("workbench.training.sharding", "torch.utils.data.distributed")
def check_shard(fn) -> Feedback:
    """Check `fn(n_samples, rank, world_size) -> indices of rank's samples`.

    Every case of `CASES`, and one drawn at each check, must be split into non-overlapping
    shards that together hold every sample once and whose sizes differ by at most one. The
    ranks are asked in a shuffled order, each twice, as separate processes would ask in any
    order: a rank's shard depends on its rank, not on how often the function was called.
    """
    unseen = unseen_case()
    rng = random.Random()
    for n, p in (*CASES, unseen):
        shards: dict[int, list[int]] = {}
        order = list(range(p)) * 2
        rng.shuffle(order)
        for rank in order:
            out, crash = call_student(fn, n, rank, p)
            if crash:
                return crash
            indices, problem = _as_indices(out, n, rank, p)
            if problem:
                return problem
            if rank in shards and sorted(shards[rank]) != sorted(indices):
                return not_yet(f"for n_samples={n}, world_size={p}, rank {rank} got "
                               "different shards from two calls.",
                               "The shard must follow from n_samples, rank and world_size "
                               "alone: each rank is a separate process, and they call your "
                               "function in any order.")
            shards[rank] = indices
        problem = _partition_problem([shards[r] for r in range(p)], n)
        if problem:
            return problem
    return correct(
        "every sample lands on exactly one rank and the shard sizes differ by at most one, "
        f"for all {len(CASES) + 1} cases (n, p) = {', '.join(map(str, (*CASES, unseen)))}."
    )


def _as_indices(out: object, n: int, rank: int, p: int) -> tuple[list[int], Feedback | None]:
    """Read the student's result as a list of ints in range(n), or explain why it is not."""
    where = f"for n_samples={n}, rank={rank}, world_size={p}"
    if out is None:
        return [], not_yet(
            f"your function returned None {where}.",
            "Return the indices of the samples this rank trains on, e.g. a list or a range.",
        )
    if not isinstance(out, Iterable) or isinstance(out, (str, bytes)):
        return [], not_yet(
            f"expected a list of sample indices {where}, got {type(out).__name__}.",
            "Return a list (or range) of integer indices between 0 and n_samples - 1.",
        )
    try:
        items = list(itertools.islice(out, n + 1))
        if any(isinstance(i, str | bytes) for i in items):
            raise TypeError("text is not an index")
        indices = [int(i) for i in items]
    except (TypeError, ValueError, OverflowError):
        return [], not_yet(
            f"some returned items are not whole numbers {where}.",
            "Return integer indices of samples, not the samples themselves.",
        )
    if len(indices) > n:
        return [], not_yet(f"rank {rank} got more than n_samples = {n} indices {where}.",
                           "A shard is part of the data: at most n_samples indices, each once.")
    outside = sorted(i for i in indices if not 0 <= i < n)
    if outside:
        return [], not_yet(
            f"rank {rank} got indices {outside[:5]} {where}, outside 0..{n - 1}.",
            "Sample indices go from 0 to n_samples - 1. Check the end of your last shard: "
            "Python ranges stop before their end value.",
        )
    return indices, None


def _partition_problem(shards: list[list[int]], n: int) -> Feedback | None:
    """Name every way `shards` fails to be a balanced partition of range(n), or None."""
    p = len(shards)
    case = f"For n_samples={n} and world_size={p}"
    counts = Counter(i for shard in shards for i in shard)
    owners = {i: [r for r, shard in enumerate(shards) for j in shard if j == i] for i in counts}
    hints: list[str] = []
    problems: list[str] = []
    twice = sorted(i for i, c in counts.items() if c > 1)
    if p > 1 and all(sorted(s) == sorted(shards[0]) for s in shards):
        problems.append("every rank got the same shard")
        hints.append(
            "Use `rank` to pick a different part for each rank, e.g. the samples "
            "rank, rank + world_size, rank + 2 * world_size, ..."
        )
    elif twice:
        i = twice[0]
        problems.append(f"{len(twice)} sample(s) are listed more than once (sample {i} is in "
                        f"the shards of ranks {owners[i]})")
        hints.append(
            "Overlapping shards: a sample seen by two ranks counts twice per epoch. Make the "
            "end of one rank's shard the start of the next (Python slices exclude their end)."
        )
    missing = sorted(set(range(n)) - set(counts))
    if missing:
        problems.append(f"samples {missing} are on no rank")
        hints.append(
            f"Dropped samples: {n} = {p} x {n // p} + {n % p}, so cutting shards of "
            f"n_samples // world_size samples leaves the last {n % p} out. Give the leftover "
            "samples to some ranks (one extra each), or take every world_size-th sample: "
            "range(rank, n_samples, world_size)." if n % p else
            "Dropped samples: every sample must be on some rank. Check that the shards "
            "reach n_samples - 1 and that world_size (not a fixed number) sets their count."
        )
    sizes = [len(s) for s in shards]
    if max(sizes) - min(sizes) > 1:
        problems.append(f"the shard sizes are {sizes}")
        hints.append(
            "Unbalanced shards: sizes may differ by at most one sample, or one rank does more "
            "than its share of every epoch while the others wait for it. Spread the "
            "remainder: one extra sample for each of the first n_samples % world_size ranks."
        )
    if not problems:
        return None
    return not_yet(f"{case}: " + "; ".join(problems) + ".", *hints)


def steps_per_rank(shard_sizes: Iterable[int], batch_size: int) -> list[int]:
    """Steps each rank takes in an epoch when it keeps its last, incomplete batch.

    ``steps_per_rank([4, 3, 3, 3], 1) == [4, 3, 3, 3]``: a balanced partition of 13 samples
    over 4 ranks, yet rank 0 takes one step more and its last allreduce has no partner.
    """
    return [math.ceil(size / batch_size) for size in shard_sizes]


def show_steps(fn, n_samples: int, world_size: int, batch_size: int) -> str:
    """The shard sizes `fn` gives and the steps each rank would take; or why not."""
    sizes = []
    for rank in range(world_size):
        out, crash = call_student(fn, n_samples, rank, world_size)
        if crash:
            return str(crash)
        sizes.append(len(list(out or ())))
    return (f"shard sizes {sizes} -> steps per rank with a batch of {batch_size}: "
            f"{steps_per_rank(sizes, batch_size)}")


def show_shards(fn, n_samples: int, world_size: int) -> str:
    """The shards `fn` gives every rank, one line per rank; or why they cannot be shown."""
    lines = []
    for rank in range(world_size):
        out, crash = call_student(fn, n_samples, rank, world_size)
        if crash:
            return str(crash)
        lines.append(f"rank {rank}: {list(out) if out is not None else None}")
    return "\n".join(lines)
