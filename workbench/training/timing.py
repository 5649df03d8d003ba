"""Timing a step: how long a rank computed, and how long it then waited for gradients; the
wall clock on the CPU, CUDA events on a GPU, read later with the step lines (`StepLog`).
Why: docs/ARCHITECTURE.md, "The engines' rank modules"."""

from __future__ import annotations

import time
from typing import Any

import torch

from workbench.training.synchronizer import Synchronizer


class WallClock:
    """Marks are `time.perf_counter()` readings: what the CPU did is done when it returns."""

    #: Said next to the compute/sync chart, so a reader knows what was measured.
    what = "wall clock (time.perf_counter)"

    mark = staticmethod(time.perf_counter)  # a builtin: no Python call of our own each step

    def settle(self, _mark: Any) -> None:
        pass  # what the CPU did is done

    def seconds(self, start: Any, end: Any) -> float:
        return end - start


class CudaClock:
    """Marks are CUDA events, timed by the GPU itself: host time says nothing of queued
    kernels, and `torch.cuda.synchronize()` would wait for NCCL's stream too."""

    what = "CUDA events (GPU timeline)"

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def settle(self, mark: Any) -> None:
        mark.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0   # elapsed_time is in milliseconds


def split(clock: WallClock | CudaClock, marks: list[Any], backward_wait_s: float,
          ) -> dict[str, float]:
    """A step's times from its settled marks, in seconds: `step_time_s`, `compute_s`
    (forward + backward, less the time the backward pass was blocked on communication) and
    `sync_s` (time blocked on gradients: inside the backward pass, and after it)."""
    start, computed, averaged, stepped = marks
    busy_s = clock.seconds(start, computed)
    in_backward = min(backward_wait_s, busy_s)
    return {"step_time_s": clock.seconds(start, stepped), "compute_s": busy_s - in_backward,
            "sync_s": in_backward + clock.seconds(computed, averaged)}


class StepLog:
    """A rank's step lines, every `every_s` seconds: it queues the losses and right answers
    of the steps since (one operation) and their copy to the host, and writes those queued
    the time before, whose copy and clock are done by then: no step waits for the GPU. A
    step leaves only its tensors, marks and counts; its line is made when written."""

    #: Seconds between writes: a live chart is up to twice that behind.
    every_s = 0.5

    def __init__(self, ctx: Any, clock: WallClock | CudaClock, sync: Synchronizer,
                 steps_per_epoch: int) -> None:
        self.ctx, self.clock, self.sync, self.last = ctx, clock, sync, time.monotonic()
        self.steps_per_epoch = steps_per_epoch
        # The steps not queued yet, in add()'s order: (step, end time, bytes held and sent,
        # bytes all-reduced, wait in backward, outputs, losses, labels, marks).
        self.steps: list[tuple] = []
        self.queued: tuple | None = None   # (steps, losses, right answers, copied mark)
        self.loss_sum, self.correct = 0.0, 0

    def add(self, step: int, y: torch.Tensor, outs: list[torch.Tensor],
            losses: list[torch.Tensor], marks: list[Any]) -> None:
        """A step (counted from the job's start): its labels, outputs, losses and marks, the
        time it ended, and the synchronizer's counts (bytes held, sent, all-reduced)."""
        sync = self.sync  # (counted on the host: nothing to wait for)
        self.steps.append((step, self.ctx.now(), sync.measure(), sync.synced_bytes(),
                           sync.backward_wait_s(), outs, losses, y, marks))
        if time.monotonic() - self.last >= self.every_s:
            self.write()
            self.queue()

    @torch.no_grad()  # the steps' outputs and losses are kept with their graphs
    def queue(self) -> None:
        steps, self.steps, self.last = self.steps, [], time.monotonic()
        if steps:
            outs = torch.cat([o for step in steps for o in step[5]])
            right = outs.argmax(1) == torch.cat([step[7] for step in steps])
            losses = torch.stack([v for step in steps for v in step[6]])
            self.queued = (steps, *(t.view(len(steps), -1).sum(1).to("cpu", non_blocking=True)
                                    for t in (losses, right)), self.clock.mark())

    def write(self) -> None:
        if self.queued is None:
            return
        (steps, losses, right, copied), self.queued = self.queued, None
        self.clock.settle(copied)  # on a GPU: long done (one event read)
        rows = [{"time": round(now, 6), "epoch": step // self.steps_per_epoch, "step": step,
                 "samples": len(y), **held_sent,
                 **({} if synced is None else {"synced_bytes": synced}),
                 "loss": loss, "accuracy": hits / len(y), **split(self.clock, marks, waited())}
                for (step, now, held_sent, synced, waited, _, _, y, marks), loss, hits
                in zip(steps, losses.tolist(), right.tolist(), strict=True)]
        self.ctx.metric("step", *rows)
        self.loss_sum += sum(losses.tolist())
        self.correct += sum(right.tolist())

    def close(self) -> tuple[float, int]:
        """Write every line (at an epoch's end, or a failure); return their summed losses and
        right answers since the last `close()`."""
        self.write()
        self.queue()
        self.write()
        totals, self.loss_sum, self.correct = (self.loss_sum, self.correct), 0.0, 0
        return totals
