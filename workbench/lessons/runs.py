"""Read finished runs back to compare them: their loss per step, their final parameters and
where their steps spent the time.

Notebook 02 uses this to check the data-parallel invariant: N ranks with batch b follow the
same trajectory as one process with batch N·b (see :mod:`workbench.training.sharding`), and
to compare the engines (naive, DDP, Horovod) on the same job.
"""

from __future__ import annotations

from typing import Any

from workbench.records import of_kind, overall_by_step
from workbench.records import record_of as record
from workbench.synchronization.stragglers import summarize_run


def step_losses(run: Any) -> tuple[list[int], list[float]]:
    """``(steps, losses)``: the loss of each global batch, the mean over the ranks.

    Each rank logs the mean loss on its own shard; shards are equal, so the mean of the
    ranks' losses is the mean loss over the whole global batch, what one process with the
    global batch would log.
    """
    rows = overall_by_step(of_kind(record(run).metrics(), "step"))
    return [r["step"] for r in rows], [r["loss"] for r in rows]


def parameter_gap(run_a: Any, run_b: Any) -> float:
    """The largest absolute difference between the final parameters of two runs.

    Both runs must train the same model (the same parameter names and shapes).
    """
    a, b = record(run_a).model_state(), record(run_b).model_state()
    if a.keys() != b.keys():
        raise ValueError("the two runs trained different models: compare runs with the same "
                         f"model (parameters {sorted(a)} vs {sorted(b)})")
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


#: The columns of `step_split`'s rows for `workbench.lessons.show.table`.
SPLIT_COLUMNS = [("engine", "engine", "s"), ("step_ms", "step (ms)", ".2f"),
                 ("compute_ms", "computing (ms)", ".2f"),
                 ("sync_ms", "blocked on gradients (ms)", ".2f"),
                 ("samples_per_s", "samples/s", ".0f")]


def step_split(run: Any) -> dict[str, Any]:
    """Where one run's steps spent their time: one row of notebook 02's engine comparison.

    Returns the run's ``engine``; ``step_ms``, the mean step time (a step lasts as long as
    its slowest rank); ``compute_ms`` and ``sync_ms``, the ranks' mean time computing and
    blocked on gradients per step (all in milliseconds); and ``samples_per_s``, the global
    batch divided by the step time. The first steps, which pay one-off set-up costs, are
    left out (``stragglers.WARMUP_STEPS``).
    """
    rec = record(run)
    summary = summarize_run(of_kind(rec.metrics(), "step"))
    ranks = summary["per_rank"]
    step_s = summary["step_time_s"]
    global_batch = rec.config["batch_size"] * len(ranks)
    return {"engine": rec.config["engine"], "step_ms": 1000 * step_s,
            "compute_ms": 1000 * sum(r["compute_s"] for r in ranks) / len(ranks),
            "sync_ms": 1000 * sum(r["sync_s"] for r in ranks) / len(ranks),
            "samples_per_s": global_batch / step_s}
