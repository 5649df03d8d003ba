"""Where the time goes, drawn: Horovod's timeline as a Gantt chart, and each step's compute
and synchronize seconds (notebooks 03 and 06). What they draw is computed in
workbench/scaling/timeline.py; this module only makes the Bokeh figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from bokeh.layouts import column, row

from workbench.scaling.timeline import (
    HorovodTimeline,
    rank_activities,
    rank_breakdown,
    step_breakdown,
)
from workbench.ui import charts


def gantt_figure(tl: HorovodTimeline, title: str = "Where the time goes (Horovod timeline)",
                 start: float | None = None, end: float | None = None):
    """A Bokeh Gantt chart, one lane per rank: compute, wait, negotiation, allreduce."""
    tasks = rank_activities(tl, start=start, end=end)
    fig, _ = charts.gantt(tasks, title, y_label="rank", lanes=[f"rank {r}" for r in tl.ranks])
    return fig


def breakdown_figures(metrics: Sequence[Mapping], title: str = "Compute vs synchronize"):
    """Two Bokeh figures from metric lines (Horovod or DDP runs alike):

    1. per step, seconds computing and synchronizing (mean over ranks), as lines;
    2. per rank, total seconds of each, as stacked bars — a straggler shows up as a rank with
       more compute and the *others* with more synchronize (they wait for it).
    """
    cols = step_breakdown(metrics)
    per_step = charts.figure(f"{title}, per step", "step", "seconds",
                             tooltips=[("step", "@step"), ("compute", "@compute_s{0.0000}"),
                                       ("sync", "@sync_s{0.0000}")])
    src = charts.source(list(cols), cols)
    charts.line(per_step, src, "step", "compute_s", color=charts.kind_color("compute"),
                legend="compute")
    charts.line(per_step, src, "step", "sync_s", color=charts.kind_color("sync"), legend="sync")
    ranks = rank_breakdown(metrics)
    per_rank, _ = charts.stacked_bar(
        list(ranks), {"compute": [v["compute"] for v in ranks.values()],
                      "sync": [v["sync"] for v in ranks.values()]},
        f"{title}, per rank", x_label="rank", y_label="seconds in the run")
    return per_step, per_rank


def write_timeline_page(path: Path, run_id: str, horovod: HorovodTimeline | None,
                        metrics: list[dict]) -> None:
    """One standalone HTML page (BokehJS inlined) of a run: the Gantt chart of its Horovod
    timeline, if it has one, above its compute and synchronize per step and per rank
    (`workbench timeline RUN --html PAGE`)."""
    per_step, per_rank = breakdown_figures(metrics)
    parts = [gantt_figure(horovod)] if horovod is not None else []
    parts.append(row(per_step, per_rank))
    charts.page(column(*parts), f"Where the time goes: {run_id}", path)
