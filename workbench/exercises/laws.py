"""Exercise: Amdahl or Gustafson? Read the serial share each law needs, then let the data choose.

The two laws use *different* serial shares, and one symbol for both hides it:

* **Amdahl** (fixed total work): s_A is the serial share of the **one-worker** time,
  S(p) = 1 / (s_A + (1 − s_A) / p).  Solved for s_A: s_A = (p/S − 1) / (p − 1), which is
  also the Karp–Flatt metric.
* **Gustafson** (work growing with p): s_G is the serial share of the **p-worker** time,
  S(p) = s_G + (1 − s_G) · p.  Solved for s_G: s_G = (p − S) / (p − 1).

Each law has one parameter, so each fits any *one* measured point exactly: from the
speedups at p = 1 and p = 2 alone nothing tells them apart. With three or more worker
counts, the law whose serial share stays the same from point to point is the one that
describes the job. (The workbench's panel fits Amdahl to strong and Gustafson to weak
scaling; here the data decide.)
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet, numbers
from workbench.exercises.own_work import refusing

#: (workers, speedup) points the serial-share checker tries.
POINTS = ((2, 1.8), (4, 3.1), (8, 4.7), (16, 12.0), (3, 2.9))


def measured(law: str, share: float, workers: Sequence[int], noise: Sequence[float],
             ) -> list[tuple[int, float]]:
    """Speedups a job obeying `law` would show, with a little measurement noise."""
    from workbench.scaling.metrics import amdahl, gustafson

    f = 1 - share  # metrics.amdahl and metrics.gustafson take the parallel share
    speedup = amdahl if law == "amdahl" else gustafson
    return [(p, speedup(p, f) * (1 + e)) for p, e in zip(workers, noise, strict=True)]


#: Data sets for the which-law checker, (name, points); the checker's reference decides.
DATASETS = (
    ("strong scaling of a fixed problem", measured("amdahl", 0.10, (1, 2, 4, 8),
                                                   (0, 0.01, -0.01, 0.005))),
    ("weak scaling, 4 to 16 workers", measured("gustafson", 0.25, (1, 4, 8, 16),
                                               (0, -0.01, 0.01, 0.0))),
    ("only 1 and 2 workers", measured("amdahl", 0.10, (1, 2), (0, 0))),
    ("weak scaling, 2 to 8 workers", measured("gustafson", 0.05, (1, 2, 4, 8),
                                              (0, 0.005, -0.005, 0.0))),
    ("strong scaling, 4 worker counts, no p = 1", measured("amdahl", 0.02, (2, 4, 8, 16),
                                                           (0.0, 0.01, 0.0, -0.01))),
    # Noisier: its last two points alone would point at Amdahl, all of them at Gustafson.
    ("weak scaling, 2 to 16 workers, noisier", measured("gustafson", 0.08, (1, 2, 4, 8, 16),
                                                        (0, -0.003, 0.013, 0.018, -0.006))),
)
#: The checker's answers, and the package's fits of each law: not to be called by the
#: student's functions.
PACKAGE_ANSWERS = ("workbench.exercises.references:serial_shares",
                   "workbench.exercises.references:relative_spread",
                   "workbench.exercises.references:which_law",
                   "workbench.scaling.metrics:karp_flatt", "workbench.scaling.metrics:fit_amdahl",
                   "workbench.scaling.metrics:fit_gustafson")


def unseen_point() -> tuple[int, float]:
    """A (p, S) point drawn anew at each check, 1 < S < p."""
    rng = random.Random()
    p = rng.randint(3, 64)
    return p, round(rng.uniform(1.2, 0.95 * p), 3)


def unseen_datasets() -> list[tuple[str, list[tuple[int, float]]]]:
    """Two data sets drawn anew at each check, one per law, each with three to five worker
    counts and noise small enough that the law is clear (its share's spread under a third
    of the other's)."""
    from workbench.exercises.references import relative_spread, serial_shares

    rng = random.Random()
    found = []
    for law in rng.sample(("amdahl", "gustafson"), 2):
        while True:
            workers = sorted(rng.sample((2, 3, 4, 6, 8, 12, 16, 24, 32), rng.randint(3, 5)))
            points = measured(law, rng.uniform(0.02, 0.3), workers,
                              [rng.uniform(-0.005, 0.005) for _ in workers])
            a, g = zip(*(serial_shares(p, s) for p, s in points), strict=True)
            spreads = {"amdahl": relative_spread(a), "gustafson": relative_spread(g)}
            if spreads[law] < spreads["gustafson" if law == "amdahl" else "amdahl"] / 3:
                found.append((f"a job measured at {len(workers)} worker counts", points))
                break
    return found


@guarded
@refusing(*PACKAGE_ANSWERS)
def check_serial_shares(fn) -> Feedback:
    """Check `fn(p, speedup) -> (s_amdahl, s_gustafson)` on several measured points, and
    on one drawn at each check."""
    from workbench.exercises.references import serial_shares

    for p, s in (*POINTS, unseen_point()):
        out, crash = call_student(fn, p, s)
        if crash:
            return crash
        pair = numbers(out, count=2)
        if pair is None:
            return not_yet(f"for p = {p}, S = {s:g} you returned {out!r}.",
                           "Return a pair (s_amdahl, s_gustafson) of numbers.")
        a, g = pair
        want_a, want_g = serial_shares(p, s)
        if not (math.isclose(a, want_a, abs_tol=1e-9) and math.isclose(g, want_g, abs_tol=1e-9)):
            return _shares_hint(p, s, a, g, want_a, want_g)
    return correct("for one run the two shares differ: 10% of the p-worker time is a much "
                   "smaller share of the one-worker time. Name which one you mean.")


def _shares_hint(p: float, s: float, a: float, g: float, want_a: float,
                 want_g: float) -> Feedback:
    message = (f"for p = {p}, S = {s:g} you give s_A = {a:.4g}, s_G = {g:.4g}; the laws need "
               f"s_A = {want_a:.4g}, s_G = {want_g:.4g}.")
    close = math.isclose
    if close(a, want_g) and close(g, want_a):
        return not_yet(message, "Swapped: Amdahl's share is of the one-worker time, "
                       "Gustafson's of the p-worker time. Solve each law for its own share.")
    if close(a, g):
        return not_yet(message, "One number for both laws: that is the symbol mix-up. They "
                       "are shares of different times, so the same run gives two values.")
    if close(a, 1 - want_a) or close(g, 1 - want_g):
        return not_yet(message, "That is the parallel share. The serial share is 1 minus it.")
    if close(a, 100 * want_a) and close(g, 100 * want_g):
        return not_yet(message, "Those are percentages. Give each share as a fraction "
                       "between 0 and 1, as the laws use it.")
    return not_yet(message, "Solve S = 1/(s + (1 − s)/p) for s (Amdahl), and "
                   "S = s + (1 − s)·p for s (Gustafson).")


@guarded
@refusing(*PACKAGE_ANSWERS)
def check_which_law(fn) -> Feedback:
    """Check `fn(points) -> 'amdahl', 'gustafson' or None` on every data set, and on one
    drawn at each check."""
    from workbench.exercises.references import which_law

    for name, points in (*DATASETS, *unseen_datasets()):
        out, crash = call_student(fn, list(points))
        if crash:
            return crash
        want = which_law(points)   # after the call: never in a frame the function sees
        got = out.strip().lower() if isinstance(out, str) else out
        if got != want:
            return _which_hint(name, points, got, want)
    return correct("the law whose serial share holds steady across worker counts is the one "
                   "that describes the job, and two points cannot tell.")


def _which_hint(name: str, points, got, want) -> Feedback:
    shown = ", ".join(f"S({p:g}) = {s:.3f}" for p, s in points)
    message = f"for '{name}' ({shown}) you answer {got!r}, not {want!r}."
    if want is None:
        return not_yet(message, "With one point beyond p = 1 each law, having one parameter, "
                       "fits it exactly. Return None: measure at least three worker counts.")
    if got is None:
        return not_yet(message, "There are enough points here: compute each law's serial "
                       "share at every p > 1 and see which one stays the same.")
    if got not in ("amdahl", "gustafson"):
        return not_yet(message, "Return 'amdahl', 'gustafson' or None.")
    from workbench.exercises.references import serial_shares

    shares = [serial_shares(p, s) for p, s in points if p > 1]
    listing = "; ".join(f"p = {p:g}: s_A = {a:.3f}, s_G = {g:.3f}"
                        for (p, _), (a, g) in zip([q for q in points if q[0] > 1], shares,
                                                  strict=True))
    return not_yet(message, f"Compare how much each share varies relative to its size, not "
                   f"how large it is (s_A is never larger than s_G): {listing}.")
