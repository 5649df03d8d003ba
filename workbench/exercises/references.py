"""The checkers' own answers to the exercises, kept out of the exercises' namespaces.

An exercise's notebook imports its checker module as `ex`, and whatever `ex` holds the
student can call: `return ex.idle_fraction(p, m)` would pass exercise 5 without a thought.
So the functions that compute an answer live here, and the checkers import them inside
their functions, never as a name of their module. This module can still be imported;
a student's function that calls one of these (or the package's own implementation,
such as workbench.model_parallel.schedule.idle_fraction) is refused by own_work.py, which
recognises the code that runs, whatever name it was reached by.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

# --- exercise 3: speedup and efficiency ------------------------------------------------------


def scaling_table(times: Mapping[int, float]) -> dict[int, tuple[float, float]]:
    """{p: (speedup, efficiency)} relative to the one-worker time, from scaling.metrics."""
    from workbench.scaling.metrics import efficiency, speedup

    t1 = times[1]
    return {p: (speedup(t1, tp), efficiency(speedup(t1, tp), p)) for p, tp in times.items()}


# --- exercise 4: the ring's steps ------------------------------------------------------------

Chunks = list[list[torch.Tensor]]


def ring_step(send_offset: int, direction: int, add: bool) -> Callable[[Chunks, int], None]:
    """A ring step where rank r sends chunk (r + send_offset − s) mod p to rank r +
    direction, which adds it to its copy or replaces its copy. (0, +1, add) is the
    reduce-scatter step, (1, +1, replace) the allgather step; other values are the
    mistakes the checker names."""
    def step_fn(chunks: Chunks, step: int) -> None:
        p = len(chunks)
        outgoing = [(r, (r + send_offset - step) % p) for r in range(p)]
        sent = [chunks[r][c].clone() for r, c in outgoing]   # every send happens at once
        for (r, c), data in zip(outgoing, sent, strict=True):
            dst = (r + direction) % p
            chunks[dst][c] = chunks[dst][c] + data if add else data
    return step_fn


reduce_scatter_step = ring_step(0, +1, add=True)


# --- exercise 5: the pipeline bubble ---------------------------------------------------------


def bubble(stages: int, micro_batches: int) -> float:
    """The idle share counted on the schedule for sizes one can draw, else its formula (the
    two agree; counting 10⁹ micro-batches would only fill the memory)."""
    from workbench.model_parallel.schedule import idle_fraction

    if micro_batches <= 4096:
        return idle_fraction(stages, micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def smallest_micro_batches(stages: int, max_bubble: float) -> int:
    """The smallest M whose bubble (P − 1)/(M + P − 1) is at most `max_bubble`."""
    m = max(1, math.ceil((stages - 1) / max_bubble - (stages - 1)) - 1)
    while bubble(stages, m) > max_bubble + 1e-12:
        m += 1
    return m


# --- exercise 6: data or model parallelism ---------------------------------------------------

GRADIENT_BYTES_PER_PARAM = 4  # fp32 gradients


def memory_needed_gb(s: Any) -> float:
    """GB one data-parallel replica needs: training state plus activations."""
    return s.params * s.state_bytes_per_param / 1e9 + s.activations_gb


def sharded_memory_gb(s: Any) -> float:
    """GB one device needs with the training state sharded over p (ZeRO-3, FSDP): 1/p of
    it plus its own activations (sharding does not split the activations)."""
    return s.params * s.state_bytes_per_param / 1e9 / s.workers + s.activations_gb


def bandwidth_bytes_per_s(s: Any) -> float:
    """The link speed in bytes per second: Gbit/s × 10⁹ ÷ 8."""
    return s.link_gbit_s * 1e9 / 8


def allreduce_s(s: Any, bytes_per_s: float | None = None) -> float:
    """Seconds for the ring allreduce of the fp32 gradients (latency ignored)."""
    from workbench.scaling.costmodel import ring_allreduce_time

    beta = 1.0 / (bytes_per_s or bandwidth_bytes_per_s(s))
    return ring_allreduce_time(s.params * GRADIENT_BYTES_PER_PARAM, s.workers, 0.0, beta)


def model_parallel_s(s: Any) -> float:
    """Seconds to send the activations across a cut and their gradients back."""
    return 2 * s.cut_activations_mb * 1e6 / bandwidth_bytes_per_s(s)


def choice(s: Any) -> str:
    """The course's rule: 'model' if a replica does not fit or if it sends less, else 'data'."""
    if memory_needed_gb(s) > s.device_memory_gb:
        return "model"
    if allreduce_s(s) <= s.compute_s:
        return "data"
    return "model" if model_parallel_s(s) < allreduce_s(s) else "data"


def choices(s: Any) -> frozenset[str]:
    """Every answer the rule accepts: 'sharded' beside 'model' where only a shard fits."""
    chosen = choice(s)
    if chosen == "model" and memory_needed_gb(s) > s.device_memory_gb >= sharded_memory_gb(s):
        return frozenset({"model", "sharded"})
    return frozenset({chosen})


# --- exercise 8: staleness -------------------------------------------------------------------


def staleness(events: Sequence[tuple[str, int]]) -> list[int]:
    """The staleness of every push, in order: updates applied since that worker's pull."""
    version, pulled, out = 0, {}, []
    for action, worker in events:
        if action == "pull":
            pulled[worker] = version
        else:
            out.append(version - pulled[worker])
            version += 1  # the gradient is applied: a new version of the parameters
    return out


def staleness_lr(tau: int, base_lr: float) -> float:
    """Zhang et al.'s staleness-aware rate: η / τ, and η itself for a fresh gradient."""
    return base_lr / max(1, tau)


# --- exercise 9: the linear scaling rule -----------------------------------------------------


def learning_rate(epoch: float, workers: int, batch_per_worker: int, base_lr: float = 0.1,
                  base_batch: int = 256, warmup_epochs: float = 5) -> float:
    """The rate at `epoch`: k·η after the warm-up, rising linearly from η before it."""
    k = workers * batch_per_worker / base_batch
    target = k * base_lr
    if epoch >= warmup_epochs:
        return target
    return base_lr + (target - base_lr) * epoch / warmup_epochs


# --- exercise 10: Amdahl or Gustafson --------------------------------------------------------


def serial_shares(p: float, s: float) -> tuple[float, float]:
    """(s_A, s_G): the serial shares that make Amdahl's and Gustafson's law give S at p."""
    return (p / s - 1) / (p - 1), (p - s) / (p - 1)


def relative_spread(values: Sequence[float]) -> float:
    """(largest − smallest) ÷ mean: how far a share wanders, whatever its size."""
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / abs(mean) if mean else math.inf


def which_law(points: Sequence[tuple[float, float]]) -> str | None:
    """'amdahl' or 'gustafson', whichever serial share varies less; None from < 2 points.

    Points at p = 1 say nothing (S = 1 there under both laws). The spread is relative
    because s_A is never larger than s_G: absolute spreads would favour Amdahl.
    """
    shares = [serial_shares(p, s) for p, s in points if p > 1]
    if len(shares) < 2:
        return None
    spread_a = relative_spread([a for a, _ in shares])
    spread_g = relative_spread([g for _, g in shares])
    return "amdahl" if spread_a < spread_g else "gustafson"
