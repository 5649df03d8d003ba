"""Exercise: measure the staleness of asynchronous gradients, and damp them.

In asynchronous SGD with a parameter server (Dean et al., NIPS 2012, Downpour SGD) each
worker *pulls* the parameters, computes a gradient, and *pushes* it; the server applies it
at once, and every applied gradient makes a new version of the parameters. Meanwhile other
workers have pushed theirs, so a gradient is applied to parameters newer than those it was
computed on. Its **staleness** τ counts those updates:

    τ = (server version when the gradient is applied) − (version the worker pulled)

Synchronous SGD has τ = 0 by construction. Zhang et al. (IJCAI 2016, arXiv:1511.05950)
divide the learning rate by the staleness, so old gradients take smaller steps; a fresh
gradient (τ = 0) keeps the base rate: η / max(1, τ), as
:mod:`workbench.synchronization.async_ps` does with ``staleness_aware=True``.

A trace is the server's log in time order: ``("pull", worker)`` or ``("push", worker)``.
The version starts at 0 and each push adds one, after its gradient is applied.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet, numbers
from workbench.exercises.own_work import refusing
from workbench.quiz.bank import parse_number

Event = tuple[str, int]

#: Two workers, worker 1 slower: it pulls at version 0 and pushes after three updates.
TRACE = (("pull", 0), ("pull", 1), ("push", 0), ("pull", 0), ("push", 0), ("pull", 0),
         ("push", 0), ("push", 1), ("pull", 1), ("pull", 0), ("push", 0), ("push", 1))
#: Three workers, pushing in turn: every gradient is two updates old, except the first ones.
ROUND_ROBIN = (("pull", 0), ("pull", 1), ("pull", 2), ("push", 0), ("pull", 0), ("push", 1),
               ("pull", 1), ("push", 2), ("pull", 2), ("push", 0), ("pull", 0), ("push", 1))
TRACES = (TRACE, ROUND_ROBIN)

#: (staleness, base learning rate) pairs the learning-rate checker tries.
LR_CASES = ((0, 0.1), (1, 0.1), (2, 0.1), (3, 0.12), (4, 0.12), (10, 0.5))


def unseen_trace() -> tuple[Event, ...]:
    """A trace drawn anew at each check: 3 or 4 workers, each pulling before it pushes."""
    from workbench.exercises.references import staleness

    rng = random.Random()
    while True:
        workers, holding, events = rng.randint(3, 4), set(), []
        for _ in range(16):
            w = rng.randrange(workers)
            events.append(("push", w) if w in holding else ("pull", w))
            holding ^= {w}
        trace = (*events, *(("push", w) for w in sorted(holding)))
        if len(set(staleness(trace))) > 2:    # several different stalenesses
            return trace


def show_trace(events: Sequence[Event]) -> str:
    """The trace as text, one event a line, with the server's version before each."""
    version, lines = 0, []
    for action, worker in events:
        lines.append(f"version {version}: worker {worker} {action}es"
                     if action == "push" else f"version {version}: worker {worker} pulls")
        version += action == "push"
    return "\n".join(lines)


#: The package's own parameter server and the checker's answers: not to be called.
PACKAGE_ANSWERS = ("workbench.synchronization.async_ps",
                   "workbench.exercises.references:staleness",
                   "workbench.exercises.references:staleness_lr")


@guarded
@refusing(*PACKAGE_ANSWERS)
def check_staleness(fn) -> Feedback:
    """Check `fn(events) -> [staleness of each push, in order]` on two traces, and on one
    drawn at each check."""
    from workbench.exercises.references import staleness

    traces = [*TRACES, unseen_trace()]
    random.shuffle(traces)     # in no fixed order: the answer must come from the trace
    for events in traces:
        out, crash = call_student(fn, list(events))
        if crash:
            return crash
        want = staleness(events)
        got = numbers(out)
        if got is None or not all(value.is_integer() for value in got):
            return not_yet(f"expected a list of whole numbers, got {out!r}.",
                           "Return one staleness per push, in the order of the pushes.")
        got = [int(value) for value in got]
        if got != want:
            return _staleness_hint(events, got, want)
    return correct(
        f"right for every trace. In the first, the slow worker's gradients are "
        f"{max(staleness(TRACE))} updates old: it computed them on parameters the "
        "fast worker had already moved on from."
    )


def _staleness_hint(events: Sequence[Event], got: list[int], want: list[int]) -> Feedback:
    message = f"for the trace\n{show_trace(events)}\nyou give {got}, not {want}."
    if len(got) != len(want):
        return not_yet(message, f"There are {len(want)} pushes: give one staleness for each, "
                       "and none for the pulls.")
    if got == [w + 1 for w in want]:
        return not_yet(message, "Off by one: count the updates applied *before* this gradient, "
                       "between its pull and its push. Its own update comes after.")
    if got == _absolute_versions(events):
        return not_yet(message, "That is the server's version at each push. Subtract the "
                       "version the worker pulled: staleness is a difference of versions.")
    if got == _events_between(events):
        return not_yet(message, "You counted every event between the pull and the push. Pulls "
                       "do not change the parameters; only pushes (updates) count.")
    return not_yet(message, "Keep the version each worker pulled, add one to the version at "
                   "every push, and subtract: τ = version at the push − version pulled.")


def _absolute_versions(events: Sequence[Event]) -> list[int]:
    version, out = 0, []
    for action, _ in events:
        if action == "push":
            out.append(version)
            version += 1
    return out


def _events_between(events: Sequence[Event]) -> list[int]:
    last_pull, out = {}, []
    for i, (action, worker) in enumerate(events):
        if action == "pull":
            last_pull[worker] = i
        else:
            out.append(i - last_pull[worker] - 1)
    return out


@guarded
@refusing(*PACKAGE_ANSWERS)
def check_staleness_lr(fn) -> Feedback:
    """Check `fn(staleness, base_lr) -> learning rate` against η / max(1, τ), also for a
    case drawn at each check."""
    from workbench.exercises.references import staleness_lr

    rng = random.Random()
    unseen = (rng.randint(5, 40), round(rng.uniform(0.01, 1.0), 3))
    for tau, lr in (*LR_CASES, unseen):
        out, crash = call_student(fn, tau, lr)
        if crash:
            if tau == 0 and "ZeroDivisionError" in crash.message:
                return not_yet(crash.message, "A fresh gradient has staleness 0: it keeps the "
                               "base rate. Divide by max(1, staleness).")
            return crash
        value = parse_number(out)
        if value is None:
            return not_yet(f"for staleness {tau} you returned {out!r}, not a number.",
                           "Return the learning rate as a float.")
        want = staleness_lr(tau, lr)
        if not math.isclose(value, want, rel_tol=1e-9):
            return _lr_hint(tau, lr, value, want)
    return correct("stale gradients get smaller steps: a gradient 4 updates old moves the "
                   "weights a quarter as far as a fresh one.")


def _lr_hint(tau: int, lr: float, value: float, want: float) -> Feedback:
    message = f"for staleness {tau} and base rate {lr:g} you give {value:g}, not {want:g}."
    if math.isclose(value, lr * tau) or math.isclose(value, lr * max(1, tau)):
        return not_yet(message, "You multiplied. A stale gradient points where the weights "
                       "*were*, so it should take a smaller step: divide by the staleness.")
    if math.isclose(value, lr / (tau + 1)):
        return not_yet(message, "You divided by τ + 1: a gradient one update old would get "
                       "half the rate. Zhang et al. divide by τ, and keep the base rate for "
                       "τ = 0: η / max(1, τ).")
    if math.isclose(value, lr):
        return not_yet(message, "The rate does not depend on the staleness yet: divide the "
                       "base rate by it.")
    return not_yet(message, "The staleness-aware rate is η / max(1, τ).")
