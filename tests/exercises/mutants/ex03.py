"""Exercise 3, speedup and efficiency: `scaling_table(times)`."""

import math
from fractions import Fraction

from mutants import accepted, refused


@accepted()
def speedup_then_efficiency(times):
    t1 = times[1]
    return {p: (t1 / tp, t1 / tp / p) for p, tp in times.items()}


@accepted()
def efficiency_from_the_times(times):
    return {p: [times[1] / tp, times[1] / (p * tp)] for p, tp in times.items()}


@accepted()
def rounded_to_two_decimals(times):
    return {p: (round(times[1] / tp, 2), round(times[1] / tp / p, 2)) for p, tp in times.items()}


@accepted()
def truncated_to_two_decimals(times):
    return {p: (math.floor(100 * times[1] / tp) / 100, math.floor(100 * times[1] / tp / p) / 100)
            for p, tp in times.items()}


@accepted()
def fractions(times):
    t1 = Fraction(str(times[1]))
    return {p: (t1 / Fraction(str(tp)), t1 / Fraction(str(tp)) / p) for p, tp in times.items()}


@refused("Inverted ratio", "T(1) / T(p)")
def inverted(times):
    return {p: (tp / times[1], tp / times[1] / p) for p, tp in times.items()}


@refused("Efficiency not divided by p")
def efficiency_not_divided(times):
    return {p: (times[1] / tp, times[1] / tp) for p, tp in times.items()}


@refused("You multiplied by p")
def efficiency_multiplied(times):
    return {p: (times[1] / tp, times[1] / tp * p) for p, tp in times.items()}


@refused("not p / speedup")
def efficiency_inverted(times):
    return {p: (times[1] / tp, p * tp / times[1]) for p, tp in times.items()}


@refused("That is the efficiency")
def efficiency_for_speedup(times):
    return {p: (times[1] / tp / p, times[1] / tp / p) for p, tp in times.items()}


@refused("row before it")
def against_the_row_before(times):
    ps = sorted(times)
    out = {1: (1.0, 1.0)}
    for a, b in zip(ps, ps[1:], strict=False):
        out[b] = (times[a] / times[b], times[a] / times[b] / b)
    return out


@refused("rounded too much", "two decimals")
def rounded_to_one_decimal(times):
    return {p: (round(times[1] / tp, 1), round(times[1] / tp / p, 1)) for p, tp in times.items()}


@refused("percentage", "as a fraction")
def efficiency_in_percent(times):
    return {p: (times[1] / tp, 100 * times[1] / tp / p) for p, tp in times.items()}


@refused("not from the slowest or the first row")
def the_slowest_row_as_baseline(times):
    t1 = max(times.values())
    return {p: (t1 / tp, t1 / tp / p) for p, tp in times.items()}


@refused("not from the slowest or the first row")
def the_first_row_as_baseline(times):
    t1 = next(iter(times.values()))
    return {p: (t1 / tp, t1 / tp / p) for p, tp in times.items()}


@refused("no entry")
def the_notebooks_table_not_the_argument(times):
    from workbench.exercises import scaling as ex

    t = ex.TIMES_S
    return {p: (t[1] / tp, t[1] / tp / p) for p, tp in t.items()}


_BY_HEART = {tuple(sorted(t.items())): {p: (t[1] / tp, t[1] / tp / p) for p, tp in t.items()}
             for t in ({1: 96.0, 2: 52.0, 4: 30.0, 8: 21.0}, {1: 50.0, 2: 26.0, 3: 18.5, 6: 10.0})}


@refused("no entry")
def the_two_tables_by_heart(times):
    return _BY_HEART.get(tuple(sorted(times.items())), {1: (1.0, 1.0)})


@refused("package's own", "Write it yourself")
def the_scaling_metrics(times):
    from workbench.scaling.metrics import efficiency, speedup

    return {p: (speedup(times[1], tp), efficiency(speedup(times[1], tp), p))
            for p, tp in times.items()}


@refused("package's own")
def the_checkers_reference(times):
    from workbench.exercises.references import scaling_table

    return scaling_table(times)


@refused("expected a dict")
def a_list(times):
    return [times[1] / tp for tp in times.values()]


@refused("not a pair of numbers")
def speedup_only(times):
    return {p: times[1] / tp for p, tp in times.items()}
