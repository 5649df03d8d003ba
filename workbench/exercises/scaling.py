"""Exercise: speedup and efficiency from a table of measured times.

Definitions (the course's, from :mod:`workbench.scaling.metrics`):

* speedup    S(p) = T(1) / T(p): the one-worker time divided by the p-worker time;
* efficiency E(p) = S(p) / p: 1.0 is perfect scaling, 0.5 means half the workers' time is lost;
* scalability: how E(p) changes as p grows.

The student writes `scaling_table(times)` that turns `{p: seconds}` into
`{p: (speedup, efficiency)}`; the checker compares it with the reference computed by
:func:`workbench.scaling.metrics.speedup` and :func:`workbench.scaling.metrics.efficiency`
(references.py), on the notebook's table, a second one, and one drawn at each check (so a
table of memorised answers fails). A function that calls those metrics, the package's own
arithmetic for what the exercise asks, is refused (own_work.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet, numbers
from workbench.exercises.own_work import refusing

#: Seconds per epoch measured with 1, 2, 4 and 8 workers (the table in the notebook).
TIMES_S = {1: 96.0, 2: 52.0, 4: 30.0, 8: 21.0}
#: A second table the checker also tries, so answers cannot be copied from the first.
OTHER_TIMES_S = {1: 50.0, 2: 26.0, 3: 18.5, 6: 10.0}


def karp_flatt_table(times: Mapping[int, float]) -> dict[int, float | None]:
    """{p: Karp–Flatt serial fraction}; if it grows with p, overhead (communication) grows."""
    from workbench.scaling.metrics import karp_flatt

    t1 = times[1]
    return {p: karp_flatt(t1 / tp, p) for p, tp in times.items()}


def unseen_times() -> dict[int, float]:
    """A timing table drawn anew at each check, its rows in no order (p = 1 not first): 1 worker,
    two larger counts at an efficiency between 0.5 and 0.95, and one so slowed by its
    communication that it takes longer than one worker (a speedup below 1 happens)."""
    rng = random.Random()
    t1 = round(rng.uniform(40, 200), 1)
    fast, slow = sorted(rng.sample(range(2, 17), 2)), rng.choice((2, 3))
    rows = [(1, t1), *((p, round(t1 / (p * rng.uniform(0.5, 0.95)), 1)) for p in fast)]
    rows.append((20 + slow, round(t1 * rng.uniform(1.05, 1.3), 1)))
    rng.shuffle(rows)
    if rows[0][0] == 1:                      # not first either: T(1) is found by its p
        rows.append(rows.pop(0))
    return dict(rows)


def format_table(times: Mapping[int, float]) -> str:
    """The timing table as aligned text, to show students what they work from."""
    lines = ["workers p | time T(p) in s", "----------+---------------"]
    lines += [f"{p:>9} | {t:>8.1f}" for p, t in sorted(times.items())]
    return "\n".join(lines)


@guarded
@refusing("workbench.scaling.metrics", "workbench.exercises.references:scaling_table")
def check_scaling_table(fn) -> Feedback:
    """Check `fn(times) -> {p: (speedup, efficiency)}` on three timing tables."""
    from workbench.exercises.references import scaling_table

    for times in (TIMES_S, OTHER_TIMES_S, unseen_times()):
        out, crash = call_student(fn, dict(times))
        if crash:
            return crash
        problem = _shape_problem(out, times)
        if problem:
            return problem
        problem = _value_problem(out, times)
        if problem:
            return problem
    p_max = max(TIMES_S)
    s, e = scaling_table(TIMES_S)[p_max]
    return correct(
        f"speedup and efficiency are right for all three tables. With {p_max} workers the job ran "
        f"{s:.2f} times faster, at an efficiency of {e:.2f}: {100 * (1 - e):.0f}% of the "
        "workers' time went to something other than useful work."
    )


def _shape_problem(out: object, times: Mapping[int, float]) -> Feedback | None:
    if not isinstance(out, Mapping):
        return not_yet(
            f"expected a dict {{p: (speedup, efficiency)}}, got {type(out).__name__}.",
            "Build a dict with one entry per number of workers, e.g. "
            "{1: (1.0, 1.0), 2: (s2, e2), ...}, and return it.",
        )
    missing = sorted(set(times) - set(out))
    if missing:
        return not_yet(
            f"the result has no entry for p = {missing}.",
            "Make one entry for every row of the timing table, including p = 1.",
        )
    for p in times:
        if numbers(out[p], count=2) is None:
            return not_yet(
                f"the entry for p = {p} is {out[p]!r}, not a pair of numbers.",
                "Each entry is a tuple (speedup, efficiency) of finite numbers, for example "
                "(1.85, 0.92): divide times, never by zero.",
            )
    return None


#: Rounding to two decimals moves a value by at most 0.005, truncating (1.846 → 1.84) or
#: rounding twice (1.8449 → 1.845 → 1.85) by less than 0.01: all such answers are right.
ROUNDING = 0.01


def _close(a: float, b: float) -> bool:
    """Equal up to two decimals, rounded or truncated (or a relative 0.1% for large values)."""
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=ROUNDING + 1e-9)


def _rounded_too_much(a: float, b: float) -> bool:
    """Within 5% of the right value but beyond two-decimal rounding: one decimal, say."""
    return math.isclose(a, b, rel_tol=0.05)


def _value_problem(out: Mapping, times: Mapping[int, float]) -> Feedback | None:
    """Compare row by row and name the mistake behind the first wrong value."""
    from workbench.exercises.references import scaling_table

    ref = scaling_table(times)
    t1 = times[1]
    ps = sorted(times)
    for prev, p in zip([None, *ps], ps, strict=False):
        s, e = numbers(out[p], count=2)
        s_ref, e_ref = ref[p]
        tp = times[p]
        if not _close(s, s_ref):
            return _speedup_hint(p, s, s_ref, t1, tp, times.get(prev) if prev else None)
        if not _close(e, e_ref):
            return _efficiency_hint(p, s_ref, e, e_ref)
    return None


def _speedup_hint(p: int, s: float, s_ref: float, t1: float, tp: float,
                  t_prev: float | None) -> Feedback:
    message = f"for p = {p} your speedup is {s:.3g}, but T(1) = {t1:g} s and T({p}) = {tp:g} s."
    if p == 1:
        return not_yet(message, "One worker's speedup is T(1) / T(1) = 1: take T(1) from the "
                       "row p = 1 (times[1]), not from the slowest or the first row, which "
                       "need not be it.")
    if _close(s, tp / t1):
        return not_yet(
            message,
            "Inverted ratio: speedup is T(1) / T(p), the old time over the new one. A faster "
            "parallel run must give a speedup above 1.",
        )
    if t_prev is not None and _close(s, t_prev / tp):
        return not_yet(
            message,
            "You compared each row with the row before it. Speedup is always measured "
            "against the one-worker time T(1).",
        )
    if _close(s, s_ref / p) or _close(s, t1 / (p * tp)):
        return not_yet(
            message,
            "That is the efficiency, not the speedup. Speedup is T(1) / T(p) without dividing "
            "by p.",
        )
    if _rounded_too_much(s, s_ref):
        return not_yet(message, f"Close, but rounded too much: {t1:g} / {tp:g} = "
                       f"{s_ref:.4f}. Keep at least two decimals (or do not round at all).")
    return not_yet(message, f"Speedup is T(1) / T(p) = {t1:g} / {tp:g} for this row: the "
                   "one-worker time over this row's time, nothing else.")


def _efficiency_hint(p: int, s_ref: float, e: float, e_ref: float) -> Feedback:
    message = f"for p = {p} the speedup is right ({s_ref:.3g}) but your efficiency is {e:.3g}."
    if _close(e, s_ref):
        return not_yet(
            message,
            "Efficiency not divided by p: efficiency is speedup / p, the speedup each worker "
            "contributes. It is at most 1 (perfect scaling) and usually below.",
        )
    if _close(e, s_ref * p):
        return not_yet(message, "You multiplied by p; efficiency is speedup divided by p.")
    if _close(e, 1 / e_ref):
        return not_yet(message, "Inverted ratio: efficiency is speedup / p, not p / speedup.")
    if math.isclose(e, 100 * e_ref, rel_tol=1e-3, abs_tol=0.5 + 1e-9):
        return not_yet(message, f"That is a percentage. Give efficiency as a fraction: "
                       f"{e_ref:.2f} rather than {100 * e_ref:.0f} (%).")
    if _rounded_too_much(e, e_ref):
        return not_yet(message, f"Close, but rounded too much: the efficiency is "
                       f"{e_ref:.4f}. Keep at least two decimals (or do not round at all).")
    return not_yet(message, "Efficiency = speedup / p, using the speedup of the same row.")
