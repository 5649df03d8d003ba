"""Notebook 05's pipeline schedules, GPipe against 1F1B, as two Gantt charts with sliders for
the stages P and the micro-batches M.

    from workbench.ui.schedule_picture import SchedulePicture
    SchedulePicture(stages=4, micro_batches=6)

What it draws is `model_parallel/schedule.py`'s `timeline`: each stage running its passes
in the order `schedule_ops` gives, the order pipeline.py runs on real processes. The
bubble in each title is measured on the drawn bars and set beside (P−1)/(M+P−1).
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
from bokeh.layouts import column
from bokeh.models import LabelSet

from workbench.model_parallel.schedule import (
    idle_share,
    most_in_flight,
    theoretical_bubble,
    timeline,
)
from workbench.ui import charts

SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B"}
MOST_STAGES = 6


def schedule_tasks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gantt tasks (`charts.gantt`) of a `timeline`: every pass, and each stage's idle gaps."""
    span = max(e["end"] for e in events)
    tasks = []
    for stage in sorted({e["stage"] for e in events}):
        mine = sorted((e for e in events if e["stage"] == stage), key=lambda e: e["start"])
        edge = 0.0
        for e in mine:
            if e["start"] > edge:
                tasks.append({"lane": f"stage {stage}", "start": edge, "end": e["start"],
                              "kind": "idle", "label": "idle (bubble)"})
            kind = "forward" if e["kind"] == "fwd" else "backward"
            tasks.append({"lane": f"stage {stage}", "start": e["start"], "end": e["end"],
                          "kind": kind, "label": f"{kind} of micro-batch {e['microbatch']}",
                          "microbatch": e["microbatch"]})
            edge = e["end"]
        if edge < span:
            tasks.append({"lane": f"stage {stage}", "start": edge, "end": span,
                          "kind": "idle", "label": "idle (bubble)"})
    return tasks


class SchedulePicture(widgets.VBox):
    """GPipe above 1F1B for the same P and M: the bubble is the same, the micro-batches each
    stage must keep (its activations) are not."""

    def __init__(self, stages: int = 4, micro_batches: int = 6) -> None:
        self.stages = widgets.IntSlider(value=stages, min=2, max=MOST_STAGES,
                                        description="stages P",
                                        style={"description_width": "initial"})
        self.micro_batches = widgets.IntSlider(value=micro_batches, min=1, max=16,
                                               description="micro-batches M",
                                               style={"description_width": "initial"})
        self.figures, self.sources, self.numbers = {}, {}, {}
        lanes = [f"stage {s}" for s in range(MOST_STAGES)]
        for name in SCHEDULES:
            fig, src = charts.gantt([], "", y_label="pipeline stage", lanes=lanes,
                                    x_label="time (forward passes)",
                                    height=60 + 28 * MOST_STAGES)
            numbers = charts.source(["x", "lane", "text"])
            fig.add_layout(LabelSet(x="x", y="lane", text="text", source=numbers,
                                    text_align="center", text_baseline="middle",
                                    text_color="white", text_font_size="8pt"))
            self.figures[name], self.sources[name], self.numbers[name] = fig, src, numbers
        for slider in (self.stages, self.micro_batches):
            slider.observe(lambda _: self.draw(), "value")
        self.draw()
        self.layout_ = column(*self.figures.values())
        super().__init__([widgets.HBox([self.stages, self.micro_batches]),
                          charts.to_widget(self.layout_)])

    def draw(self) -> None:
        """Lay both schedules out for the sliders' P and M, on one time axis."""
        p, m = self.stages.value, self.micro_batches.value
        lanes = [f"stage {s}" for s in range(p)]
        span = 0.0
        for name, title in SCHEDULES.items():
            events = timeline(p, m, name)
            tasks = schedule_tasks(events)
            self.sources[name].data = charts.gantt_data(tasks)
            passes = [t for t in tasks if "microbatch" in t]
            self.numbers[name].data = {"x": [(t["start"] + t["end"]) / 2 for t in passes],
                                       "lane": [t["lane"] for t in passes],
                                       "text": [str(t["microbatch"]) for t in passes]}
            fig = self.figures[name]
            fig.y_range.factors = list(reversed(lanes))
            held = max(most_in_flight(events, s) for s in range(p))
            fig.title.text = (f"{title}: bubble {idle_share(events):.3f} (formula "
                              f"{theoretical_bubble(p, m):.3f}), up to {held} micro-batches "
                              "kept")
            span = max(span, max(e["end"] for e in events))
        for fig in self.figures.values():
            fig.x_range.start, fig.x_range.end = 0, span
