"""A scaling sweep: the same training job at 1, 2, 4... workers, one run after another.

Strong scaling keeps the **total work** fixed: the same dataset, epochs and *global* batch,
so each of p ranks gets ``batch_size / p`` samples per step. Ideal result: time falls as 1/p.

Weak scaling keeps the **work per worker** fixed: each rank keeps ``batch_size`` and makes the
same number of steps, so the problem grows with p (p times the synthetic samples, or p times
the epochs of a fixed dataset such as digits). Ideal result: time stays flat.

The baseline holds **per-worker resources constant**: every rank gets the same number of CPU
threads (``threads_per_rank``, default 1) whatever p is. Otherwise "1 worker with 2 threads"
against "2 workers with 1 thread" would measure threading, not data parallelism.

Time to a target. Samples per second are not the goal; a trained model is. Give a
``target`` (a held-out loss or accuracy) and every run evaluates each epoch and reports the
seconds it took to reach it (:func:`metrics.time_to_target`). In strong scaling the global
batch is fixed, so every run takes the same steps and the time-to-target speedup equals the
throughput speedup. In weak scaling the global batch grows with p: with the same learning
rate each step moves about as far as before, so the larger batch buys little; with
``scale_lr`` the *linear scaling rule* (Goyal et al. 2017) multiplies the learning rate by p,
which, with a warm-up (``warmup_epochs``), recovers the speedup up to a critical batch size
beyond which larger batches stop cutting the steps needed (McCandlish et al. 2018; Shallue
et al. 2019).

Runs happen one after another, never side by side, so they do not compete for the cores.
:class:`Sweep` is an iterator that yields a :class:`SweepPoint` as each run finishes, so a
live panel can add a point to its charts before the next run starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.config import ConfigError, JobConfig
from workbench.records import of_kind
from workbench.scaling import metrics

MODES = ("strong", "weak")


@dataclass
class SweepPoint:
    """The outcome of one run of a sweep (times in seconds, throughput in samples/s)."""

    np: int
    run_id: str
    status: str
    time_s: float | None
    samples_per_s: float | None
    summary: dict[str, Any]
    time_to_target_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "succeeded" and bool(self.samples_per_s)


@dataclass(frozen=True)
class Target:
    """A held-out loss to fall to, or an accuracy to rise to (give one)."""

    loss: float | None = None
    accuracy: float | None = None

    def __post_init__(self) -> None:
        if (self.loss is None) == (self.accuracy is None):
            raise ConfigError("give one target: --target-loss or --target-accuracy")
        if self.accuracy is not None and not 0.0 < self.accuracy <= 1.0:
            raise ConfigError(f"invalid --target-accuracy {self.accuracy!r}: expected a "
                              "number in (0, 1]")
        if self.loss is not None and not self.loss > 0.0:
            raise ConfigError(f"invalid --target-loss {self.loss!r}: expected a number > 0")

    def seconds(self, epochs: list[dict]) -> float | None:
        return metrics.time_to_target(epochs, self.loss, self.accuracy)


def sweep_config(base: JobConfig, np: int, mode: str, scale_lr: bool = False) -> JobConfig:
    """The configuration of the run with ``np`` workers, derived from ``base``.

    ``base.batch_size`` is the global batch in strong mode and the per-rank batch in weak mode.
    With ``scale_lr`` (weak mode), the learning rate grows with the global batch: ``lr × np``.
    A warm-up (``base.warmup_epochs``) starts at ``base.lr``, η in Goyal et al. (2017), and
    rises to the run's rate; where that is ``base.lr`` too, the rate stays constant.
    """
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r} is not allowed: use 'strong' or 'weak'")
    threads = base.threads_per_rank or 1
    changes: dict[str, Any] = {"np": np, "threads_per_rank": threads,
                               "name": f"{base.name or 'scale'}-{mode}"[:40]}
    if mode == "strong":
        if base.batch_size % np:
            raise ConfigError(
                f"--batch-size {base.batch_size} cannot be split evenly over {np} ranks in "
                f"strong scaling (it is the global batch): use a multiple of {np}")
        changes["batch_size"] = base.batch_size // np
    elif base.dataset.startswith("synthetic"):
        changes["samples"] = base.samples * np
    else:
        changes["epochs"] = base.epochs * np
    if scale_lr and mode == "weak":
        changes["lr"] = base.lr * np
    if base.warmup_epochs and not base.warmup_start_lr:
        changes["warmup_start_lr"] = base.lr
    return dataclasses.replace(base, **changes)


class Sweep:
    """Run ``base`` at each worker count in turn; iterate to get each run as it finishes.

    Example::

        sweep = Sweep(JobConfig(engine="horovod", model="mlp"), [1, 2], "strong")
        for point in sweep:
            print(point.np, point.samples_per_s)
        sweep.rows()        # speedup, efficiency, Karp–Flatt per run
    """

    def __init__(self, base: JobConfig, workers: Sequence[int], mode: str = "strong",
                 timeout_s: float | None = None, target: Target | None = None,
                 scale_lr: bool = False) -> None:
        if base.preset is not None:
            base.validate()  # an unknown preset is named before any run starts
        if target is not None and not base.eval_every:
            base = dataclasses.replace(base, eval_every=1)  # the target is checked each epoch
        self.mode = mode
        self.target = target
        self.workers = list(workers)
        self.configs = [sweep_config(base, p, mode, scale_lr).validate() for p in self.workers]
        self.timeout_s = timeout_s
        self.points: list[SweepPoint] = []
        self.job = None                 # the run in progress, so a panel can stop it
        self._stopped = False

    def __iter__(self) -> Iterator[SweepPoint]:
        import workbench

        for cfg in self.configs:
            if self._stopped:
                return
            self.job = workbench.start(cfg)
            self.job.wait(self.timeout_s)
            if not self.job.done:
                self.job.stop()
            point = sweep_point(cfg.np, self.job, self.target)
            self.points.append(point)
            yield point
            if not point.ok:
                return                  # a failed run makes the rest meaningless

    def run(self, on_point: Callable[[SweepPoint], None] | None = None) -> list[SweepPoint]:
        """Run the whole sweep, calling ``on_point`` after each run; return every point."""
        for point in self:
            if on_point:
                on_point(point)
        return self.points

    def stop(self) -> None:
        """Stop the run in progress and start no more."""
        self._stopped = True
        if self.job is not None and not self.job.done:
            self.job.stop()

    def rows(self) -> list[dict]:
        """The table of the successful runs: np, time_s, samples_per_s, speedup, efficiency,
        karp_flatt (see :func:`workbench.scaling.metrics.scaling_rows`); with a target also
        ``time_to_target_s`` and ``target_speedup`` (the first run's time to target over
        this one's, None where a run never reached it)."""
        good = [p for p in self.points if p.ok]
        if not good:
            return []
        rows = metrics.scaling_rows([p.np for p in good], [p.time_s for p in good],
                                    [p.samples_per_s for p in good], self.mode)
        if self.target is not None:
            first = good[0].time_to_target_s
            for row, p in zip(rows, good, strict=True):
                row["time_to_target_s"] = p.time_to_target_s
                row["target_speedup"] = (first / p.time_to_target_s * good[0].np
                                         if first and p.time_to_target_s else None)
        return rows


def sweep_point(np: int, job, target: Target | None = None) -> SweepPoint:
    """Read a finished run's summary (and time to target) into a :class:`SweepPoint`."""
    summary = job.summary or {}
    reached = target.seconds(of_kind(job.metrics(), "epoch")) if target else None
    return SweepPoint(np=np, run_id=job.run_id, status=job.status,
                      time_s=summary.get("train_time_s"),
                      samples_per_s=summary.get("samples_per_s"), summary=summary,
                      time_to_target_s=reached)


def compare_to_first(sweeps: dict[str, Sweep]) -> list[dict]:
    """One row per run of several sweeps, relative to the first run of the first sweep.

    Rows: ``run`` (the sweep's name and np), ``throughput_speedup`` (samples/s over the
    baseline's), ``time_to_target_s`` and ``target_speedup`` (the baseline's time to the
    target over this run's; None where a run never reached it).
    """
    points = [(name, p) for name, sweep in sweeps.items() for p in sweep.points if p.ok]
    if not points:
        return []
    first = points[0][1]
    return [{"run": f"np={p.np}, {name}", "np": p.np,
             "throughput_speedup": p.samples_per_s / first.samples_per_s,
             "time_to_target_s": p.time_to_target_s,
             "target_speedup": (first.time_to_target_s / p.time_to_target_s
                                if first.time_to_target_s and p.time_to_target_s else None)}
            for name, p in points]
