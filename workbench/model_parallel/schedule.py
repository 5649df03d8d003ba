"""The pipeline's schedule on paper: which stage works on which micro-batch in each time
slot, and the share of slots left idle, the bubble (notebook 05, exercise 5).

For P stages and M micro-batches of equal cost the bubble is (P−1)/(M+P−1) of each stage's
time (GPipe: Huang et al., NeurIPS 2019; the same for 1F1B, Narayanan et al., SOSP 2019).
pipeline.py runs the schedule on real processes and measures it.
"""

from __future__ import annotations


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
