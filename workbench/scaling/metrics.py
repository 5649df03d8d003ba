"""Speedup, efficiency and scalability, and the two classic laws that explain them.

Definitions (as the course uses them):

* **speedup**     S(p) = sequential time ÷ parallel time for the same work;
* **efficiency**  E(p) = S(p) ÷ p, the share of the p workers' time that does useful work;
* **scalability** how E(p) behaves as p grows — a curve, not a single number.

Two laws predict S(p) from the *parallel fraction* f of the work (0 ≤ f ≤ 1):

* Amdahl (1967), fixed total work (strong scaling):   S(p) = 1 / ((1 − f) + f / p)
* Gustafson (1988), fixed work per worker (weak scaling): S(p) = (1 − f) + f · p

And one diagnostic turns a measured speedup back into a serial fraction:

* Karp & Flatt (1990): e(p) = (1/S − 1/p) / (1 − 1/p).
  If e stays flat as p grows, the job has a true serial part; if e *grows* with p the loss
  is overhead that grows with p — in data-parallel training, that is communication.

This module imports only the standard library, so exercise checkers can use it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def _positive(name: str, value: float) -> float:
    """Return ``value`` as a float, or raise ValueError naming the bad argument."""
    value = float(value)
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def speedup(sequential_time_s: float, parallel_time_s: float) -> float:
    """Speedup S = sequential time ÷ parallel time (both in seconds, for the same work).

    S = 2 means the parallel run finished the same work in half the time.
    """
    return _positive("sequential_time_s", sequential_time_s) / _positive(
        "parallel_time_s", parallel_time_s
    )


def speedup_from_throughput(samples_per_s: float, baseline_samples_per_s: float) -> float:
    """Speedup from throughputs (samples/s): parallel throughput ÷ sequential throughput.

    This is the same number as :func:`speedup` for strong scaling (same work, so the time
    ratio is the throughput ratio). For weak scaling, where p workers do p times the work,
    it is Gustafson's *scaled speedup*: the time one worker would need for the whole job
    (p × t₁) divided by the parallel time t_p.
    """
    return _positive("samples_per_s", samples_per_s) / _positive(
        "baseline_samples_per_s", baseline_samples_per_s
    )


def efficiency(speedup_value: float, workers: int) -> float:
    """Efficiency E = S ÷ p: 1.0 is perfect (linear) scaling, 0.5 means half the time is lost."""
    return float(speedup_value) / _positive("workers", workers)


def karp_flatt(speedup_value: float, workers: int) -> float | None:
    """Karp–Flatt experimentally determined serial fraction e = (1/S − 1/p) / (1 − 1/p).

    Source: A. H. Karp and H. P. Flatt, "Measuring parallel processor performance",
    Communications of the ACM 33(5), 1990. Undefined for one worker (returns None).
    """
    p = _positive("workers", workers)
    if p == 1:
        return None
    s = _positive("speedup", speedup_value)
    return (1.0 / s - 1.0 / p) / (1.0 - 1.0 / p)


def amdahl(workers: float, parallel_fraction: float) -> float:
    """Amdahl's law: S(p) = 1 / ((1 − f) + f / p), the speedup when total work is fixed.

    With f = 0.95 the speedup can never exceed 1 / (1 − f) = 20, however many workers.
    Source: G. M. Amdahl, AFIPS Spring Joint Computer Conference, 1967.
    """
    p = _positive("workers", workers)
    f = float(parallel_fraction)
    return 1.0 / ((1.0 - f) + f / p)


def gustafson(workers: float, parallel_fraction: float) -> float:
    """Gustafson's law: S(p) = (1 − f) + f · p, the scaled speedup when work grows with p.

    Source: J. L. Gustafson, "Reevaluating Amdahl's law", Communications of the ACM 31(5), 1988.
    """
    p = _positive("workers", workers)
    f = float(parallel_fraction)
    return (1.0 - f) + f * p


def fit_amdahl(workers: Sequence[float], speedups: Sequence[float]) -> float:
    """Least-squares parallel fraction f of Amdahl's law for measured (p, S) points.

    Amdahl's law is linear in f once written for 1/S:

        1 − 1/S = f · (1 − 1/p)      i.e.  y = f · x

    so the least-squares f is Σxy / Σx². Points at p = 1 carry no information (x = 0).
    The result is clipped to [0, 1]: superlinear speedups (cache effects) would otherwise
    give f > 1, which has no meaning in Amdahl's model.
    """
    xs, ys = _amdahl_xy(workers, speedups)
    sxx = sum(x * x for x in xs)
    if sxx == 0:
        raise ValueError("fit_amdahl needs at least one point with more than one worker")
    f = sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx
    return min(1.0, max(0.0, f))


def fit_gustafson(workers: Sequence[float], speedups: Sequence[float]) -> float:
    """Least-squares parallel fraction f of Gustafson's law: S − 1 = f · (p − 1)."""
    if len(workers) != len(speedups):
        raise ValueError("workers and speedups must have the same length")
    xs = [_positive("workers", p) - 1.0 for p in workers]
    ys = [_positive("speedup", s) - 1.0 for s in speedups]
    sxx = sum(x * x for x in xs)
    if sxx == 0:
        raise ValueError("fit_gustafson needs at least one point with more than one worker")
    f = sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx
    return min(1.0, max(0.0, f))


def _amdahl_xy(
    workers: Sequence[float], speedups: Sequence[float]
) -> tuple[list[float], list[float]]:
    """The linearised Amdahl coordinates x = 1 − 1/p and y = 1 − 1/S."""
    if len(workers) != len(speedups):
        raise ValueError("workers and speedups must have the same length")
    xs = [1.0 - 1.0 / _positive("workers", p) for p in workers]
    ys = [1.0 - 1.0 / _positive("speedup", s) for s in speedups]
    return xs, ys


def scaling_rows(
    workers: Sequence[int],
    times_s: Sequence[float],
    samples_per_s: Sequence[float],
    mode: str = "strong",
) -> list[dict]:
    """The table a sweep prints: one dict per run, relative to the first (baseline) run.

    ``workers[0]`` is the baseline (normally 1 worker). Speedup is computed from
    throughput, so the same code serves strong and weak scaling (see
    :func:`speedup_from_throughput`); when the baseline has p₀ > 1 workers, speedup is
    scaled by p₀ so that efficiency stays relative to one worker.

    Each row: ``np, time_s, samples_per_s, speedup, efficiency, karp_flatt``. In weak
    scaling (``mode="weak"``) ``karp_flatt`` is None: the metric inverts Amdahl's law, which
    assumes a fixed total work, so it has no meaning for a scaled speedup.
    """
    if not (len(workers) == len(times_s) == len(samples_per_s)) or not workers:
        raise ValueError("workers, times_s and samples_per_s must be non-empty and equal length")
    base_p, base_rate = workers[0], samples_per_s[0]
    rows = []
    for p, t, rate in zip(workers, times_s, samples_per_s, strict=True):
        s = speedup_from_throughput(rate, base_rate) * base_p
        rows.append(
            {
                "np": int(p),
                "time_s": float(t),
                "samples_per_s": float(rate),
                "speedup": s,
                "efficiency": efficiency(s, p),
                "karp_flatt": karp_flatt(s, p) if mode == "strong" else None,
            }
        )
    return rows


def time_to_target(epochs: Sequence[Mapping], target_loss: float | None = None,
                   target_accuracy: float | None = None) -> float | None:
    """Seconds of training until the held-out loss or accuracy first reached the target.

    Speedup as the seed documents define it is on the time to a *solution*, not on
    samples per second. The two agree only while more workers leave the algorithm
    unchanged (strong scaling: the same global batch takes the same steps); a larger global
    batch (weak scaling) may need more epochs, or fewer steps with a larger learning rate.

    ``epochs`` are one run's ``"epoch"`` metric lines (rank 0's are used); evaluated epochs
    carry ``val_loss``/``val_accuracy`` (run with ``eval_every=1``). The time is the sum of
    ``epoch_time_s`` up to and including the first epoch on target: training only, without
    start-up or evaluation, which every run pays alike. None if the target was never reached.
    """
    if (target_loss is None) == (target_accuracy is None):
        raise ValueError("give exactly one of target_loss and target_accuracy")
    elapsed = 0.0
    for e in sorted((e for e in epochs if e.get("rank", 0) == 0), key=lambda e: e["epoch"]):
        elapsed += e["epoch_time_s"]
        if target_loss is not None and e.get("val_loss", float("inf")) <= target_loss:
            return elapsed
        if target_accuracy is not None and e.get("val_accuracy", -1.0) >= target_accuracy:
            return elapsed
    return None
