"""Exercise: predict the pipeline bubble of GPipe-style model parallelism.

A model cut into P stages runs on P devices; a mini-batch is cut into M micro-batches that
flow through the stages one after the other (Huang et al. 2019, GPipe). In the forward
pass, stage s works on micro-batch m in time slot s + m, so the pass takes M + P − 1 slots
while each stage is busy for only M of them. The idle share, the *bubble*, is

    bubble = (P − 1) / (M + P − 1)

and the backward pass has the same shape. More micro-batches shrink it, but slowly: at the
rule of thumb M = 4P it is still (P − 1)/(5P − 1): 11% for P = 2, 16% for P = 4, near 20%
for many stages. Megatron-LM and the Ultra-Scale Playbook normalise the same idle time by the ideal
(busy) time instead, (P − 1)/M; both are right, as long as you say which one you use. This
exercise uses the idle share of the whole run. 1F1B with a flush (PipeDream-Flush,
Narayanan et al., ICML 2021) keeps the same bubble but holds only P micro-batches of
activations instead of M; the original PipeDream (SOSP 2019) is asynchronous.

The checker's reference counts idle slots in the simulated schedule,
:func:`workbench.model_parallel.schedule.schedule` (the notebook prints it with
``ex.show_schedule``), rather than trusting the formula: the formula is what the student
derives. A function that calls the package's counting of that schedule (``schedule``,
``idle_fraction``, ``theoretical_bubble``) is refused (own_work.py); so is a table of
answers for the cases below, since every check adds a case drawn at random.
"""

from __future__ import annotations

import math
import random

from workbench.exercises.feedback import (
    Feedback,
    call_student,
    correct,
    guarded,
    not_yet,
    whole_number,
)
from workbench.exercises.own_work import refusing
from workbench.model_parallel.schedule import show_schedule  # noqa: F401 - the notebook's
from workbench.quiz.bank import parse_number

#: (stages P, micro-batches M) pairs the checker tries, and one more drawn at each check.
CASES = ((2, 1), (2, 4), (4, 4), (4, 8), (4, 16), (8, 32), (3, 5))


def unseen_case() -> tuple[int, int]:
    """A (P, M) pair none of CASES, drawn anew at each check."""
    rng = random.Random()
    while (case := (rng.randint(2, 12), rng.randint(1, 64))) in CASES:
        pass
    return case


@guarded
@refusing("workbench.model_parallel.schedule", "workbench.exercises.references:bubble")
def check_bubble_fraction(fn) -> Feedback:
    """Check `fn(stages, micro_batches) -> idle fraction` against the counted schedule."""
    from workbench.model_parallel.schedule import idle_fraction

    for p, m in (*CASES, unseen_case()):
        out, crash = call_student(fn, p, m)
        if crash:
            return crash
        value = parse_number(out)
        if value is None:
            return not_yet(f"for P = {p}, M = {m} your function returned {out!r}, not a number.",
                           "Return the idle fraction as a float between 0 and 1.")
        want = idle_fraction(p, m)
        if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-9):
            return _bubble_hint(p, m, value, want)
    return correct(
        "your formula matches the counted schedule for every case, and for one drawn at "
        "random. With P = 4 stages, "
        f"M = 4 micro-batches leave {idle_fraction(4, 4):.0%} of the time idle and M = 16 "
        f"only {idle_fraction(4, 16):.0%}."
    )


def _bubble_hint(p: int, m: int, value: float, want: float) -> Feedback:
    message = f"for P = {p} stages and M = {m} micro-batches you predict {value:.4g}, " \
              f"the schedule is idle {want:.4g} of the time."
    if math.isclose(value, (p - 1) / m):
        return not_yet(message, "(P − 1)/M is the bubble relative to the ideal (busy) time, "
                       "as Megatron-LM writes it: a fair measure, but not the one asked for "
                       "here. This exercise asks for the idle share of the whole run, which "
                       "lasts M + P − 1 slots.")
    if math.isclose(value, (p - 1) / p):
        return not_yet(message, "Your answer does not depend on M. Count the slots in "
                       "show_schedule(P, M) for two values of M: more micro-batches shrink "
                       "the bubble.")
    if math.isclose(value, (p - 1) / (m + p)):
        return not_yet(message, "Off by one slot: the first micro-batch enters stage 0 in slot "
                       "0 and the last leaves stage P − 1 in slot M + P − 2, so the run "
                       "lasts M + P − 1 slots.")
    if math.isclose(value, 1 - want):
        return not_yet(message, "That is the busy share. The bubble is the idle share: "
                       "1 minus your value.")
    if math.isclose(value, 100 * want, rel_tol=1e-6, abs_tol=0.51):
        return not_yet(message, f"Your formula is right, but that is a percentage: return the "
                       f"fraction, {want:.6g} rather than {100 * want:.4g} (%).")
    if abs(value - want) <= 0.0051:
        return not_yet(message, f"Your formula is right, but the value is rounded: return it "
                       f"as computed, {want!r}, not rounded to a few decimals; the checker "
                       "compares it with the counted schedule to six significant digits.")
    return not_yet(message, "Each stage idles P − 1 slots out of M + P − 1. Print "
                   "show_schedule(P, M) and count.")


#: Task 2's question: the fewest micro-batches that keep 4 stages' bubble within 10%.
STAGES, MAX_BUBBLE = 4, 0.10


@guarded
def check_micro_batches(answer: object) -> Feedback:
    """Check the smallest number of micro-batches that keeps the bubble of STAGES stages
    within MAX_BUBBLE (the question is the exercise's: it takes no other)."""
    stages, max_bubble = STAGES, MAX_BUBBLE
    from workbench.exercises.references import bubble, smallest_micro_batches

    want = smallest_micro_batches(stages, max_bubble)
    if answer is None:
        return not_yet("no answer yet.",
                       f"Set the variable to the smallest whole M for which "
                       f"(P − 1) / (M + P − 1) ≤ {max_bubble:g} with P = {stages}.")
    m = whole_number(answer)
    if m is None:
        return not_yet(f"your answer {answer!r} is not a whole number of micro-batches.",
                       "Micro-batches come in whole numbers: answer with an int such as 12.")
    if m == want:
        return correct(f"M = {m} gives a bubble of {bubble(stages, m):.1%}; "
                       f"M = {m - 1} would give {bubble(stages, m - 1):.1%}.")
    if m < 1:
        return not_yet(f"M = {m} is not a number of micro-batches.", "M is at least 1.")
    idle = bubble(stages, m)
    if idle > max_bubble:
        hint = (f"With M = {m} the bubble is {idle:.1%}, above {max_bubble:.0%}. Solve "
                f"(P − 1) / (M + P − 1) ≤ {max_bubble:g} for M, then round up.")
        if m == 4 * stages:
            hint += (f" The rule of thumb M = 4P still leaves (P − 1)/(5P − 1) = {idle:.0%}"
                     " idle, not this little.")
        return not_yet(f"M = {m} micro-batches is not enough.", hint)
    return not_yet(
        f"M = {m} works (bubble {idle:.1%}) but is not the smallest.",
        f"A smaller M also keeps the bubble within {max_bubble:.0%}. Solve "
        f"(P − 1) / (M + P − 1) ≤ {max_bubble:g} for M exactly and take the first whole "
        "number that satisfies it.",
    )
