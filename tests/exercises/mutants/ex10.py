"""Exercise 10, Amdahl or Gustafson: `serial_shares(p, speedup)` (task "shares") and
`which_law(points)` (task "law")."""

from fractions import Fraction
from statistics import mean, pstdev

from mutants import accepted, refused


def _a(p, s):
    return (p / s - 1) / (p - 1)


def _g(p, s):
    return (p - s) / (p - 1)


@accepted(task="shares")
def each_law_solved(p, speedup):
    return _a(p, speedup), _g(p, speedup)


@accepted(task="shares")
def rearranged(p, speedup):
    return (1 / speedup - 1 / p) / (1 - 1 / p), 1 - (speedup - 1) / (p - 1)


@accepted(task="shares")
def as_fractions_in_a_list(p, speedup):
    p, s = Fraction(p), Fraction(str(speedup))
    return [(p / s - 1) / (p - 1), (p - s) / (p - 1)]


@refused("Swapped", task="shares")
def swapped(p, speedup):
    return _g(p, speedup), _a(p, speedup)


@refused("One number for both laws", task="shares")
def one_number_for_both(p, speedup):
    return _a(p, speedup), _a(p, speedup)


@refused("parallel share", task="shares")
def the_parallel_shares(p, speedup):
    return 1 - _a(p, speedup), 1 - _g(p, speedup)


@refused("percentages", task="shares")
def in_percent(p, speedup):
    return 100 * _a(p, speedup), 100 * _g(p, speedup)


@refused("pair", task="shares")
def one_value(p, speedup):
    return (_a(p, speedup),)


@refused("pair", task="shares")
def as_text(p, speedup):
    return f"{_a(p, speedup)}, {_g(p, speedup)}"


@refused("package's own", "Write it yourself", task="shares")
def karp_flatt_for_amdahl(p, speedup):
    from workbench.scaling.metrics import karp_flatt

    return karp_flatt(speedup, p), _g(p, speedup)


@refused("package's own", task="shares")
def the_checkers_shares(p, speedup):
    from workbench.exercises.references import serial_shares

    return serial_shares(p, speedup)


_POINTS = {(2, 1.8): (_a(2, 1.8), _g(2, 1.8)), (4, 3.1): (_a(4, 3.1), _g(4, 3.1)),
           (8, 4.7): (_a(8, 4.7), _g(8, 4.7)), (16, 12.0): (_a(16, 12.0), _g(16, 12.0)),
           (3, 2.9): (_a(3, 2.9), _g(3, 2.9))}


@refused("Solve S = 1/(s + (1 − s)/p)", task="shares")
def the_points_by_heart(p, speedup):
    return _POINTS.get((p, speedup), (0.1, 0.1 + 1e-3))


def _shares(points):
    return [each_law_solved(p, s) for p, s in points if p > 1]


def _relative(values):
    return (max(values) - min(values)) / abs(mean(values))


@accepted(task="law")
def the_steadier_share(points):
    shares = _shares(points)
    if len(shares) < 2:
        return None
    a = _relative([x for x, _ in shares])
    g = _relative([y for _, y in shares])
    return "amdahl" if a < g else "gustafson"


@accepted(task="law")
def coefficient_of_variation(points):
    """Another relative measure of how much a share varies: its standard deviation over
    its mean."""
    shares = _shares(points)
    if len(shares) < 2:
        return None
    cv = [pstdev(v) / abs(mean(v)) for v in zip(*shares, strict=True)]
    return "Amdahl" if cv[0] < cv[1] else "Gustafson"


@refused("varies relative to its size", task="law")
def always_amdahl(points):
    return "amdahl"


@refused("varies", task="law")
def always_gustafson(points):
    return "gustafson"


@refused("fits it exactly", "three worker counts", task="law")
def two_points_are_enough(points):
    return the_steadier_share(points) or "amdahl"


@refused("never larger than s_G", task="law")
def absolute_spread(points):
    shares = _shares(points)
    if len(shares) < 2:
        return None
    spread = [max(v) - min(v) for v in zip(*shares, strict=True)]
    return "amdahl" if spread[0] < spread[1] else "gustafson"


@refused("weak scaling, 2 to 16 workers, noisier", task="law")
def only_the_last_two_points(points):
    shares = _shares(points)
    if len(shares) < 2:
        return None
    change = [abs(v[-1] - v[-2]) / abs(mean(v[-2:])) for v in zip(*shares, strict=True)]
    return "amdahl" if change[0] < change[1] else "gustafson"


@refused("package's own", task="law")
def the_checkers_law(points):
    from workbench.exercises.references import which_law

    return which_law(points)


@refused("you answer", task="law")
def reads_the_checkers_answer(points):
    """Looks for the expected law in the frames that called it."""
    import inspect

    frame = inspect.currentframe().f_back
    while frame is not None and "want" not in frame.f_locals:
        frame = frame.f_back
    return frame.f_locals["want"] if frame is not None else "amdahl"


_DATASETS_BY_HEART = {}


@refused("you answer", task="law")
def the_data_sets_by_heart(points):
    from workbench.exercises import laws as ex

    if not _DATASETS_BY_HEART:
        for _, known in ex.DATASETS:
            _DATASETS_BY_HEART[tuple(known)] = the_steadier_share(known)
    return _DATASETS_BY_HEART.get(tuple(points), "amdahl")
