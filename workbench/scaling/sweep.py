"""A scaling sweep: the same training job at 1, 2, 4... workers, one run after another.

Strong scaling keeps the **total work** fixed: the same dataset, epochs and *global* batch,
so each of p ranks gets ``batch_size / p`` samples per step. Ideal result: time falls as 1/p.

Weak scaling keeps the **work per worker** fixed: each rank keeps ``batch_size`` and makes the
same number of steps, so the problem grows with p (p times the synthetic samples, or p times
the epochs of a fixed dataset such as digits). Ideal result: time stays flat.

The baseline holds **per-worker resources constant**: every rank gets the same number of CPU
threads (``threads_per_rank``, default 1) whatever p is. Otherwise "1 worker with 2 threads"
against "2 workers with 1 thread" would measure threading, not data parallelism.

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

    @property
    def ok(self) -> bool:
        return self.status == "succeeded" and bool(self.samples_per_s)


def sweep_config(base: JobConfig, np: int, mode: str) -> JobConfig:
    """The configuration of the run with ``np`` workers, derived from ``base``.

    ``base.batch_size`` is the global batch in strong mode and the per-rank batch in weak mode.
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
                 timeout_s: float | None = None) -> None:
        from workbench.jobs import apply_preset

        base = apply_preset(base)
        self.mode = mode
        self.workers = list(workers)
        self.configs = [sweep_config(base, p, mode).validate() for p in self.workers]
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
            point = _point(cfg.np, self.job)
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
        karp_flatt (see :func:`workbench.scaling.metrics.scaling_rows`)."""
        good = [p for p in self.points if p.ok]
        if not good:
            return []
        return metrics.scaling_rows([p.np for p in good], [p.time_s for p in good],
                                    [p.samples_per_s for p in good], self.mode)


def _point(np: int, job) -> SweepPoint:
    """Read a finished run's summary into a :class:`SweepPoint`."""
    summary = job.summary or {}
    return SweepPoint(np=np, run_id=job.run_id, status=job.status,
                      time_s=summary.get("train_time_s"),
                      samples_per_s=summary.get("samples_per_s"), summary=summary)
