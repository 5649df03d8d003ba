"""Exercise: finish a ring allreduce on simulated ranks.

The ring allreduce (Patarasuk & Yuan 2009) cuts each rank's vector into p chunks and runs
two phases of p − 1 steps around the ring, where rank r only sends to rank (r + 1) mod p:

* **reduce-scatter**, step s: rank r sends its chunk (r − s) mod p to rank r + 1, which
  *adds* it to its own copy of that chunk. Afterwards rank r holds the complete sum of
  chunk (r + 1) mod p.
* **allgather**, step s: rank r sends its chunk (r + 1 − s) mod p to rank r + 1, which
  *replaces* its copy. Afterwards every rank holds every summed chunk.

The index arithmetic is the same as in :mod:`workbench.synchronization.ring_allreduce`,
which runs the algorithm with real messages between processes. Here the ranks are simulated
in one process, which makes every step fast and easy to inspect: the state is a list with
one entry per rank, each a list of p chunk tensors, ``chunks[rank][chunk_index]``. All the
sends of a step happen at once; a step function updates ``chunks`` in place.

To name a mistake precisely the checker fills the chunks with *labels*: chunk c of rank r
starts as the number 8 ** (r·p + c), so any sum of chunks can be decoded back into the list
of (rank, chunk) pieces it contains, written like ``A0 + B0`` (rank A's chunk 0 plus rank
B's chunk 0).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence

import torch

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet
from workbench.exercises.own_work import refusing

Chunks = list[list[torch.Tensor]]
StepFn = Callable[[Chunks, int], object]

#: Ring sizes used to diagnose single steps (labels stay exact in float64 up to p = 4).
LABEL_SIZES = (3, 4)
_BASE = 8


# --- the simulated ring ---------------------------------------------------------------------

def split_into_chunks(tensors: Sequence[torch.Tensor]) -> Chunks:
    """Cut every rank's vector into p chunks (sizes differ by at most one element)."""
    p = len(tensors)
    return [[c.clone() for c in t.detach().reshape(-1).tensor_split(p)] for t in tensors]


def join_chunks(chunks: Chunks) -> list[torch.Tensor]:
    """Glue every rank's chunks back into one vector per rank."""
    return [torch.cat(rank_chunks) for rank_chunks in chunks]


def allgather_step(chunks: Chunks, step: int) -> None:
    """One allgather step: rank r sends chunk (r + 1 − step) mod p to rank r + 1, which copies it.

    Read this one before you write the reduce-scatter step: the shape is the same.
    """
    p = len(chunks)
    outgoing = [(rank, (rank + 1 - step) % p) for rank in range(p)]
    sent = [chunks[rank][c].clone() for rank, c in outgoing]  # every send happens at once
    for (rank, c), data in zip(outgoing, sent, strict=True):
        chunks[(rank + 1) % p][c] = data


def simulated_ring_allreduce(tensors: Sequence[torch.Tensor],
                             reduce_scatter_step: StepFn | None = None,
                             allgather_step: StepFn = allgather_step,
                             trace: bool = False) -> list[torch.Tensor]:
    """Sum `tensors` (one per simulated rank) with a ring allreduce built from two step
    functions (the reduce-scatter step: the checker's own when None).

    With `trace=True` it prints which pieces every rank holds after each step (use label
    tensors from :func:`label_tensors` to get readable names).
    """
    from workbench.exercises import references

    reduce_scatter_step = reduce_scatter_step or references.reduce_scatter_step
    p = len(tensors)
    chunks = split_into_chunks(tensors)
    if trace:
        print(f"start:\n{describe(chunks)}\n")
    for phase, step_fn in (("reduce-scatter", reduce_scatter_step), ("allgather", allgather_step)):
        for step in range(p - 1):
            chunks = _run_step(step_fn, chunks, step)
            if trace:
                print(f"after {phase} step {step}:\n{describe(chunks)}\n")
    return join_chunks(chunks)


def _run_step(step_fn: StepFn, chunks: Chunks, step: int) -> Chunks:
    """Run one step on a private copy: in place, or the returned state if there is one."""
    state = copy.deepcopy(chunks)
    returned = step_fn(state, step)
    return returned if returned is not None else state


# --- labels: decode which pieces a chunk holds -------------------------------------------------

def label_tensors(p: int) -> list[torch.Tensor]:
    """One vector per rank whose chunk c on rank r holds the label 8 ** (r·p + c)."""
    return [torch.tensor([float(_BASE ** (r * p + c)) for c in range(p)], dtype=torch.float64)
            for r in range(p)]


def decode(value: float, p: int) -> dict[tuple[int, int], int] | None:
    """{(rank, chunk): count} of the pieces summed into a label value; None if not a label sum."""
    if value < 0 or value != int(value):
        return None
    number, pieces = int(value), {}
    for k in range(p * p):
        number, digit = divmod(number, _BASE)
        if digit:
            pieces[(k // p, k % p)] = digit
    return None if number else pieces


def name(pieces: dict[tuple[int, int], int] | None) -> str:
    """Readable form of decoded pieces: 'A0 + B0', '2×A1', or 'garbled'."""
    if pieces is None:
        return "garbled (not a sum of whole chunks)"
    if not pieces:
        return "0"
    parts = [f"{'' if n == 1 else f'{n}×'}{chr(65 + r)}{c}" for (r, c), n in sorted(pieces.items())]
    return " + ".join(parts)


def describe(chunks: Chunks) -> str:
    """One line per rank listing what each chunk holds, e.g. 'rank B: [A0 + B0 | B1 | B2]'."""
    p = len(chunks)
    lines = []
    for r, rank_chunks in enumerate(chunks):
        cells = [name(decode(float(c.reshape(-1)[0]), p)) for c in rank_chunks]
        lines.append(f"rank {chr(65 + r)}: [" + " | ".join(cells) + "]")
    return "\n".join(lines)


# --- checkers -----------------------------------------------------------------------------------

#: The package's own rings: the answer, not to be called by it.
PACKAGE_RINGS = ("workbench.synchronization.ring_allreduce",
                 "workbench.exercises.references:ring_step")


@guarded
@refusing(*PACKAGE_RINGS)
def check_reduce_scatter_step(fn) -> Feedback:
    """Check the student's `reduce_scatter_step(chunks, step)`, step by step, then end to end."""
    return _check_step(fn, phase="reduce-scatter")


@guarded
@refusing(*PACKAGE_RINGS, "workbench.exercises.ring:allgather_step")
def check_allgather_step(fn) -> Feedback:
    """Check the student's own `allgather_step(chunks, step)`, step by step, then end to end."""
    return _check_step(fn, phase="allgather")


def _check_step(fn, phase: str) -> Feedback:
    from workbench.exercises.references import reduce_scatter_step

    if not callable(fn):
        _, not_a_function = call_student(fn)
        return not_a_function
    reference = reduce_scatter_step if phase == "reduce-scatter" else allgather_step
    for p in LABEL_SIZES:
        chunks = split_into_chunks(label_tensors(p))
        if phase == "allgather":
            for step in range(p - 1):
                chunks = _run_step(reduce_scatter_step, chunks, step)
        for step in range(p - 1):
            got, crash = call_student(_run_step, fn, chunks, step)
            if crash:
                return crash
            expected = _run_step(reference, chunks, step)   # after: never in a frame it sees
            problem = _compare(got, expected, chunks, p, step, phase)
            if problem:
                return problem
            chunks = expected
    return _end_to_end(fn, phase)


def _compare(got: object, expected: Chunks, before: Chunks, p: int, step: int,
             phase: str) -> Feedback | None:
    """Feedback for the first chunk that differs from the reference after one step, or None."""
    where = f"with p = {p} ranks, {phase} step {step}"
    if not _same_layout(got, expected):
        return not_yet(
            f"{where}: the chunks no longer have their layout (one list of {p} chunk tensors "
            "per rank).",
            "Update chunks[rank][index] in place: assign a new tensor to that entry, and do "
            "not add or remove entries.",
        )
    got_l, want_l = _decode_all(got, p), _decode_all(expected, p)
    if got_l == want_l:
        return None
    before_l = _decode_all(before, p)
    rank, c = next((r, c) for r in range(p) for c in range(p) if got_l[r][c] != want_l[r][c])
    message = (f"{where}: rank {chr(65 + rank)}'s chunk {c} should hold {name(want_l[rank][c])} "
               f"but holds {name(got_l[rank][c])}.")
    return not_yet(message, *_step_hints(got_l, before_l, p, step, phase))


def _same_layout(got: object, expected: Chunks) -> bool:
    if not isinstance(got, list) or len(got) != len(expected):
        return False
    for mine, theirs in zip(got, expected, strict=True):
        if not isinstance(mine, list) or len(mine) != len(theirs):
            return False
        if not all(isinstance(t, torch.Tensor) and t.shape == u.shape
                   for t, u in zip(mine, theirs, strict=True)):
            return False
    return True


def _decode_all(chunks: Chunks, p: int) -> list[list[dict | None]]:
    return [[_decode_chunk(t, p) for t in rank_chunks] for rank_chunks in chunks]


def _decode_chunk(t: torch.Tensor, p: int) -> dict | None:
    values = {float(v) for v in t.reshape(-1).tolist()}
    return decode(values.pop(), p) if len(values) == 1 else None


def _step_hints(got: list, before: list, p: int, step: int, phase: str) -> list[str]:
    """Compare the student's state with the outcome of known mistakes, to name the mistake."""
    rule = ("rank r sends chunk (r − s) mod p and rank r + 1 adds it to its own copy"
            if phase == "reduce-scatter" else
            "rank r sends chunk (r + 1 − s) mod p and rank r + 1 replaces its copy with it")
    if got == before:
        return ["Nothing changed. Change the entries of `chunks` in place, e.g. "
                "chunks[dst][i] = chunks[dst][i] + incoming, or return the new state.",
                f"The rule for step s: {rule}."]
    mistakes = _mistakes(phase)
    right = mistakes.pop("right")
    for description, variant in mistakes.items():
        state = [[_encode(piece, p) for piece in rank] for rank in before]
        if _decode_all(_run_step(variant, state, step), p) == got:
            return [description, f"The rule for step s: {rule}."]
    state = [[_encode(piece, p) for piece in rank] for rank in before]
    for later in range(step, p - 1):
        state = _run_step(right, state, later)
        if later > step and _decode_all(state, p) == got:
            return ["Your function did several steps in one call: the checker calls it once "
                    "per step s, and each call makes the sends of that step only.",
                    f"The rule for step s: {rule}."]
    return [f"The rule for step s: {rule}. Print the state with "
            "describe(chunks) (from workbench.exercises.ring) before and after your step "
            "to see what moved."]


def _encode(pieces: dict | None, p: int) -> torch.Tensor:
    value = sum(n * _BASE ** (r * p + c) for (r, c), n in (pieces or {}).items())
    return torch.tensor([float(value)], dtype=torch.float64)


def _mistakes(phase: str) -> dict[str, StepFn]:
    """Typical wrong steps, each with the hint that explains it (and "right": the step)."""
    from workbench.exercises.references import ring_step as _variant

    if phase == "reduce-scatter":
        return {
            "right": _variant(0, +1, add=True),
            "The receiver replaced its chunk instead of adding to it, so its own contribution "
            "was lost. Replacing is what the allgather does; the reduce-scatter adds.":
                _variant(0, +1, add=False),
            "The right operation but the wrong chunk: at step s rank r must send the chunk it "
            "has just finished adding into, (r − s) mod p (at step 0, its own chunk r).":
                _variant(1, +1, add=True),
            "Chunks travel the wrong way round: in this ring rank r sends to rank (r + 1) mod p "
            "and receives from (r − 1) mod p.":
                _variant(0, -1, add=True),
            "One step ahead: at step s rank r sends chunk (r − s) mod p, and s starts at 0, "
            "not 1.":
                _variant(-1, +1, add=True),
        }
    return {
        "right": _variant(1, +1, add=False),
        "The receiver added the chunk instead of replacing its copy, so pieces were counted "
        "twice. After the reduce-scatter the sent chunk is already the full sum: copy it.":
            _variant(1, +1, add=True),
        "The right operation but the wrong chunk: at step s rank r passes on the complete "
        "chunk it holds, (r + 1 − s) mod p (at step 0, the chunk it completed in the "
        "reduce-scatter).":
            _variant(0, +1, add=False),
        "Chunks travel the wrong way round: in this ring rank r sends to rank (r + 1) mod p.":
            _variant(1, -1, add=False),
    }


def _end_to_end(fn, phase: str) -> Feedback:
    """Run the whole ring on random vectors of uneven length and compare with the real
    thing: for 2, 3 and 5 ranks, and for a ring size and length drawn at each check."""
    from workbench.synchronization.ring_allreduce import thread_ring_allreduce

    gen = torch.Generator().manual_seed(7)
    rng = random.Random()
    for p, n in ((2, 11), (3, 11), (5, 11), (rng.randint(6, 8), rng.randint(13, 40))):
        tensors = [torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(p)]
        steps = {"reduce_scatter_step": fn} if phase == "reduce-scatter" else {
            "allgather_step": fn}
        result, crash = call_student(simulated_ring_allreduce, tensors, **steps)
        if crash:
            return crash
        want = thread_ring_allreduce(tensors)  # the send/recv implementation, with threads
        if not all(torch.allclose(r, w) for r, w in zip(result, want, strict=True)):
            return not_yet(
                f"each step looks right on the labelled example, but the whole ring with p = {p} "
                f"and {n} elements (uneven chunks) does not give the sum.",
                "Work with whole chunk tensors, chunks[rank][index]; do not assume every chunk "
                "has the same length or a single element.",
            )
    return correct(
        f"your {phase} step is right at every step for 3 and 4 ranks, and the whole ring gives "
        "the same sums as the send/recv implementation for 2, 3, 5 and more ranks. Each rank "
        "sent 2(p − 1) chunks of n/p elements, 2(p − 1)/p · n in all: in any allreduce the "
        "busiest rank sends at least that much, and the ring meets it on every rank, every "
        "link equally busy."
    )


def show_ring(p: int, reduce_scatter_step: StepFn | None = None,
              allgather_step: StepFn = allgather_step) -> None:
    """Print the labelled state after every step of a ring over `p` simulated ranks.

    A step function that is not finished, or that crashes, is reported instead of raised.
    """
    _, crash = call_student(simulated_ring_allreduce, label_tensors(p),
                            reduce_scatter_step, allgather_step, trace=True)
    if crash:
        print(crash)
