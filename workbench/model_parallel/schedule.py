"""The pipeline's schedule on paper: which stage works on which micro-batch in each time
slot, and the share of slots left idle, the bubble (notebook 05, exercise 5).

For P stages and M micro-batches of equal cost the bubble is (P−1)/(M+P−1) of each stage's
time (GPipe: Huang et al., NeurIPS 2019; the same for 1F1B with a flush, PipeDream-Flush:
Narayanan et al., ICML 2021). `schedule_ops` is the order in which a stage runs its passes,
here and in pipeline.py, which runs it on real processes and measures it; `timeline` plays
that order out in time, pass by pass, for the chart of notebook 05.
"""

from __future__ import annotations

from typing import Any


def theoretical_bubble(stages: int, microbatches: int) -> float:
    """Idle fraction of a pipeline: (P−1)/(M+P−1) (GPipe, Huang et al. 2019; same for 1F1B)."""
    return (stages - 1) / (microbatches + stages - 1)


# --- the GPipe forward schedule, slot by slot (notebook 05 and exercise 5 print it) ----------

def schedule(stages: int, micro_batches: int) -> list[list[int | None]]:
    """The forward schedule: rows are stages, columns are time slots, cells the micro-batch.

    Stage s handles micro-batch m in slot s + m; None marks an idle slot (the bubble).
    """
    slots = micro_batches + stages - 1
    return [[t - s if 0 <= t - s < micro_batches else None for t in range(slots)]
            for s in range(stages)]


def show_schedule(stages: int, micro_batches: int) -> str:
    """The schedule as text: one row per stage, '.' for idle slots."""
    grid = schedule(stages, micro_batches)
    width = len(str(micro_batches - 1))
    rows = [f"stage {s}: " + " ".join("." * width if m is None else f"{m:>{width}}"
                                       for m in row) for s, row in enumerate(grid)]
    return "\n".join(rows)


def idle_fraction(stages: int, micro_batches: int) -> float:
    """Share of (stage, slot) cells in the schedule that are idle: the measured bubble."""
    cells = [m for row in schedule(stages, micro_batches) for m in row]
    return sum(m is None for m in cells) / len(cells)


# --- forward and backward, in time: GPipe against 1F1B (notebook 05's chart) ---------------

def schedule_ops(schedule: str, stage: int, stages: int,
                 microbatches: int) -> list[tuple[str, int]]:
    """The order of ("fwd", m) / ("bwd", m) operations one stage performs in a step."""
    if schedule == "gpipe":
        return ([("fwd", m) for m in range(microbatches)]
                + [("bwd", m) for m in range(microbatches)])
    warmup = min(stages - stage - 1, microbatches)
    ops = [("fwd", m) for m in range(warmup)]
    for m in range(warmup, microbatches):          # steady state: one forward, one backward
        ops += [("fwd", m), ("bwd", m - warmup)]
    ops += [("bwd", m) for m in range(microbatches - warmup, microbatches)]   # cool-down
    return ops


def timeline(stages: int, micro_batches: int, schedule: str = "gpipe",
             backward: float = 2.0) -> list[dict[str, Any]]:
    """Every pass of one training step, in time: each stage runs `schedule_ops` in order,
    a forward taking 1 unit of time and a backward `backward` units (about twice a
    forward's work), each as soon as its input is there: a forward once the stage before
    has sent its activations, a backward once the stage after has sent its gradient.

    Returns ``{"stage", "kind" ("fwd"/"bwd"), "microbatch", "start", "end"}`` per pass.
    """
    cost = {"fwd": 1.0, "bwd": backward}
    done: dict[tuple[str, int, int], float] = {}
    queues = [schedule_ops(schedule, s, stages, micro_batches) for s in range(stages)]
    free, events = [0.0] * stages, []
    while any(queues):
        progressed = False
        for s in range(stages):
            while queues[s]:
                kind, m = queues[s][0]
                needs = ("fwd", s - 1, m) if kind == "fwd" else ("bwd", s + 1, m)
                if kind == "bwd" and s == stages - 1:
                    needs = ("fwd", s, m)       # the last stage turns its own output around
                if kind == "fwd" and s == 0:
                    needs = None
                if needs is not None and needs not in done:
                    break
                start = max(free[s], done.get(needs, 0.0) if needs else 0.0)
                free[s] = done[(kind, s, m)] = start + cost[kind]
                events.append({"stage": s, "kind": kind, "microbatch": m, "start": start,
                               "end": free[s]})
                queues[s].pop(0)
                progressed = True
        if not progressed:
            raise RuntimeError(f"the {schedule} schedule deadlocks at P={stages}, "
                               f"M={micro_batches}")
    return events


def idle_share(events: list[dict[str, Any]]) -> float:
    """The bubble of a `timeline`: the share of the stages' time, from the first pass to the
    last, in which they did nothing."""
    stages = {e["stage"] for e in events}
    span = max(e["end"] for e in events) - min(e["start"] for e in events)
    busy = sum(e["end"] - e["start"] for e in events)
    return 1 - busy / (span * len(stages))


def most_in_flight(events: list[dict[str, Any]], stage: int) -> int:
    """The most micro-batches whose forward pass `stage` has run and whose backward it has
    not: how many micro-batches of activations it must keep at once."""
    held = most = 0
    for e in sorted((e for e in events if e["stage"] == stage), key=lambda e: e["start"]):
        held += 1 if e["kind"] == "fwd" else -1
        most = max(most, held)
    return most
