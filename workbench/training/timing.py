"""Timing a step: how long a rank computed, and how long it then waited for gradients.

On the CPU the clock is the wall clock. A GPU runs asynchronously (the host only queues
kernels), so there the clock is CUDA events on the GPU's own timeline, read once per step
after the step's last kernel: see `CudaClock`. A `StepTimer` marks the clock between the
lines of `loop.train_step`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


class WallClock:
    """Marks are `time.perf_counter()` readings: what the CPU did is done when it returns."""

    #: Said next to the compute/sync chart, so a reader knows what was measured.
    what = "wall clock (time.perf_counter)"

    def mark(self) -> Any:
        return time.perf_counter()

    def settle(self, _mark: Any) -> None:
        """Nothing to wait for on the CPU."""

    def seconds(self, start: Any, end: Any) -> float:
        return end - start


class CudaClock:
    """Marks are CUDA events, timed by the GPU itself.

    Why not the wall clock: `loss.backward()` returns as soon as its kernels are queued, so
    host time says nothing about GPU work, and `torch.cuda.synchronize()` waits for *every*
    stream, NCCL's included, so it would count queued allreduces as compute. An event
    records when the GPU reached that point of its stream; `settle()` waits for one event
    (not the whole device) once per step, so the GPU can otherwise run ahead of the host.
    """

    what = "CUDA events (GPU timeline)"

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def settle(self, mark: Any) -> None:
        mark.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0   # elapsed_time is in milliseconds


def clock_for(device: torch.device) -> WallClock | CudaClock:
    """The clock that measures work on `device` honestly."""
    return CudaClock() if device.type == "cuda" else WallClock()


class StepTimer:
    """Four clock marks per step: start, backward done, gradients averaged, step done.

    `split()` turns them into the step's metrics, in seconds: `step_time_s`, `compute_s`
    (forward + backward, less the time the backward pass was blocked on communication) and
    `sync_s` (time blocked on gradients: inside the backward pass, and after it).
    """

    def __init__(self, clock: WallClock | CudaClock) -> None:
        self.clock = clock
        self.marks: list[Any] = []

    def start(self) -> None:
        self.marks = [self.clock.mark()]

    def mark(self) -> None:
        self.marks.append(self.clock.mark())

    def split(self, backward_wait_s: Callable[[], float]) -> dict[str, float]:
        """The step's times; `backward_wait_s` is read only once the clock has settled."""
        start, computed, averaged, stepped = self.marks
        self.clock.settle(stepped)  # on a GPU: wait for this step's last kernel (once a step)
        busy_s = self.clock.seconds(start, computed)
        in_backward = min(backward_wait_s(), busy_s)
        return {"step_time_s": self.clock.seconds(start, stepped),
                "compute_s": busy_s - in_backward,
                "sync_s": in_backward + self.clock.seconds(computed, averaged)}
