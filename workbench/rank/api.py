"""What your own code can ask and tell while it runs as one rank of a job.

    def train(steps):
        workbench.report(step=0, loss=0.5)    # a live point in the panel's charts
        return workbench.rank()               # collected by job.results()

See docs/ARCHITECTURE.md, "Your own code on real ranks".
"""

from __future__ import annotations

import math
from typing import Any

from workbench.rank.protocol import current, launcher_identity

_kept: dict[str, Any] = {}


def kept() -> dict[str, Any]:
    """A dict as long-lived as this rank's process: what one pool call leaves, the next finds."""
    return _kept


def _identity() -> tuple[int, int, int]:
    """(rank, size, local rank): the attached context's, else the launcher's variables."""
    ctx = current()
    return launcher_identity() if ctx is None else (ctx.rank, ctx.size, ctx.local_rank)


def rank() -> int:
    """This process's rank in the job: 0 .. size()-1 (0 outside a job)."""
    return _identity()[0]


def size() -> int:
    """How many ranks the job has (1 outside a job, and on the serial engine)."""
    return _identity()[1]


def local_rank() -> int:
    """This process's rank among the ranks on its own host: which GPU or cores are its own."""
    return _identity()[2]


def report(**metrics: Any) -> None:
    """Write one line of metrics for the live charts, e.g. `report(step=s, loss=l)`: an
    *epoch* line with `epoch` and no `step`, else a *step* line. Every value is a number
    (`float()` of it); the charts know `loss`, `accuracy` and `samples` (this rank's, this
    step). `step` counts up from 0, `epoch` stays at the last one reported, `step_time_s` is
    the seconds since this rank's previous report (0 for its first: its start is unknown).
    """
    if (ctx := current()) is None:
        return
    values: dict[str, float] = {}
    for name, value in metrics.items():
        try:
            values[name] = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"report({name}=...) takes a number, not {type(value).__name__} "
                            f"{value!r:.60}: pass one value, e.g. loss.item()") from None
    last, now = ctx.reported, ctx.now()
    if "epoch" in values and "step" not in values:
        last["epoch"] = int(values.pop("epoch"))
        kind, filled = "epoch", {"epoch": last["epoch"]}
    else:
        step = int(values.pop("step", last["step"] + 1))
        epoch = int(values.pop("epoch", last["epoch"]))
        since = 0.0 if last["time"] is None else now - last["time"]
        last.update(step=step, epoch=epoch, time=now)
        kind, filled = "step", {"epoch": epoch, "step": step, "samples": 0, "step_time_s": since}
    ctx.metric(kind, **{**filled, "loss": math.nan, "accuracy": math.nan, **values})
