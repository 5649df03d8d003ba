"""How often to checkpoint: the time saving costs against the work a failure loses.

Notebook 03 weighs it after a job has lost a rank and resumed (training/results.py).
"""

from __future__ import annotations


def checkpoint_overhead(interval_s: float, save_s: float, mtbf_s: float) -> float:
    """Expected share of a job's time lost to checkpointing and to failures.

    Saving every ``interval_s`` seconds costs ``save_s / interval_s``. A failure, arriving
    on average every ``mtbf_s`` seconds (mean time between failures of the whole job: with p
    machines, one machine's MTBF ÷ p), loses on average half an interval of work:
    ``interval_s / 2 / mtbf_s``. Restart time is left out: it does not depend on the interval.
    """
    return save_s / interval_s + interval_s / (2 * mtbf_s)


def young_interval(save_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that minimises `checkpoint_overhead`: √(2 · save_s · mtbf_s).

    J. W. Young, "A first order approximation to the optimum checkpoint interval",
    Communications of the ACM 17(9), 1974. Saving more often wastes time saving; less often,
    time redoing lost work.
    """
    return (2 * save_s * mtbf_s) ** 0.5
