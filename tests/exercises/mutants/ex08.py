"""Exercise 8, staleness: `staleness_per_push(events)` (task "tau") and
`staleness_lr(staleness, base_lr)` (task "lr")."""

import math
from fractions import Fraction

from mutants import accepted, refused


def _versions(events, offset=0):
    version, pulled, out = 0, {}, []
    for action, worker in events:
        if action == "pull":
            pulled[worker] = version
        else:
            out.append(version - pulled[worker] + offset)
            version += 1
    return out


@accepted(task="tau")
def versions_pulled_and_pushed(events):
    return _versions(events)


@accepted(task="tau")
def counts_the_pushes_in_between(events):
    out = []
    for i, (action, worker) in enumerate(events):
        if action == "push":
            pulled = max(j for j in range(i) if events[j] == ("pull", worker))
            out.append(sum(a == "push" for a, _ in events[pulled:i]))
    return out


@accepted(task="tau")
def as_floats_in_a_tuple(events):
    return tuple(float(t) for t in _versions(events))


@refused("Off by one", "Its own update comes after", task="tau")
def counts_its_own_update(events):
    return _versions(events, offset=1)


@refused("Subtract the version the worker pulled", task="tau")
def the_version_at_the_push(events):
    version, out = 0, []
    for action, _ in events:
        if action == "push":
            out.append(version)
            version += 1
    return out


@refused("Pulls do not change the parameters", task="tau")
def counts_every_event_between(events):
    last, out = {}, []
    for i, (action, worker) in enumerate(events):
        if action == "pull":
            last[worker] = i
        else:
            out.append(i - last[worker] - 1)
    return out


@refused("one staleness for each", task="tau")
def one_per_worker(events):
    return _versions(events)[:len({w for _, w in events})]


@refused("whole numbers", task="tau")
def halves(events):
    return [t + 0.5 for t in _versions(events)]


_BY_HEART = [[0, 0, 0, 3, 0, 1], [0, 1, 2, 2, 2]]


@refused("Keep the version each worker pulled", task="tau")
def the_two_traces_by_heart(events):
    from workbench.exercises import staleness as ex

    known = dict(zip(ex.TRACES, _BY_HEART, strict=True))
    pushes = sum(a == "push" for a, _ in events)
    return known.get(tuple(map(tuple, events)), [0] * pushes)


_CALLS = [0]


@refused("for the trace", task="tau")
def ignores_the_trace(events):
    """The two traces' answers in the order the checker used to ask them."""
    _CALLS[0] += 1
    return _BY_HEART[(_CALLS[0] - 1) % 2]


@refused("package's own", "Write it yourself", task="tau")
def the_checkers_reference(events):
    from workbench.exercises.references import staleness

    return staleness(events)


@accepted(task="lr")
def divided_by_at_least_one(staleness, base_lr):
    return base_lr / max(1, staleness)


@accepted(task="lr")
def the_base_rate_when_fresh(staleness, base_lr):
    return base_lr if staleness == 0 else Fraction(str(base_lr)) / staleness


@refused("ZeroDivisionError", "max(1, staleness)", task="lr")
def divides_by_zero(staleness, base_lr):
    return base_lr / staleness


@refused("You multiplied", task="lr")
def multiplies(staleness, base_lr):
    return base_lr * max(1, staleness)


@refused("τ + 1", task="lr")
def one_more(staleness, base_lr):
    return base_lr / (staleness + 1)


@refused("does not depend", task="lr")
def the_base_rate(staleness, base_lr):
    return base_lr


@refused("The staleness-aware rate is", task="lr")
def square_root(staleness, base_lr):
    return base_lr / math.sqrt(max(1, staleness))


@refused("η / max(1, τ)", task="lr")
def a_tenth_where_base_lr_belongs(staleness, base_lr):
    return 0.1 / max(1, staleness)


_LR_BY_HEART = {(0, 0.1): 0.1, (1, 0.1): 0.1, (2, 0.1): 0.05, (3, 0.12): 0.04, (4, 0.12): 0.03,
                (10, 0.5): 0.05}


@refused("does not depend", task="lr")
def the_six_cases_by_heart(staleness, base_lr):
    return _LR_BY_HEART.get((staleness, base_lr), base_lr)


@refused("package's own", task="lr")
def the_checkers_rate(staleness, base_lr):
    from workbench.exercises.references import staleness_lr

    return staleness_lr(staleness, base_lr)


@refused("not a number", task="lr")
def in_words(staleness, base_lr):
    return "a tenth"


@refused("not a number", task="lr")
def nan(staleness, base_lr):
    return float("nan")
