"""A panel that watches a job started from code, e.g. your own function on real ranks.

    job = workbench.launch(train, np=2)
    workbench.ui.RunPanel(job)

It is the training panel without the settings: the same live charts (one line per rank and
the mean of all ranks, samples/s), the same Stop button, failure display and rank logs, fed by
the same polling loop (:mod:`workbench.ui.live`). Your code feeds the charts with
``workbench.report(step=..., loss=..., accuracy=..., samples=...)``; a chart of a value you do
not report stays empty, and says so once the run has ended.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from workbench.ui import live
from workbench.ui.training_panel import TrainingPanel

CAPTION = (
    "<div style='font-size:12px;color:#555;max-width:900px'>"
    "Thin lines: what each rank reported with <code>workbench.report()</code>; thick line: "
    "the mean over all ranks of each step that every rank has reported. Throughput counts "
    "the <code>samples</code> that all ranks reported, per second.</div>")


class RunPanel(TrainingPanel):
    """Live charts, status, Stop button, failure display and logs of one running `job`.

    Args:
        job: a running :class:`workbench.launch.Job` (from ``launch``, ``start`` or
            ``start_module``).
        refresh_s: seconds between two refreshes of the live view.
    """

    def __init__(self, job: Any, *, refresh_s: float = 0.25) -> None:
        self._title = widgets.HTML(f"<b style='font-size:15px'>Run {job.run_id}</b>")
        super().__init__(refresh_s=refresh_s, runs_dir=job.config.runs_dir)
        self.watch(job)

    def _layout(self) -> list[widgets.Widget]:
        buttons = widgets.HBox([self.stop_button, self.status],
                               layout=widgets.Layout(align_items="center"))
        logs = widgets.Accordion([self.logs], titles=("Logs of each rank (last lines)",))
        return [self._title, buttons, self.alert, self._chart_box, widgets.HTML(CAPTION), logs]

    def _why_empty(self, state: str) -> dict[str, str]:
        """An empty chart names the value the function did not report."""
        why = dict.fromkeys(self._charts.figures,  # the compute/sync split, the bytes held
                            "Only the workbench's own\ntraining loop\nmeasures this.")
        why.update({name: f"No {name} reported:\nworkbench.report({name}=...)"
                    for name in ("loss", "accuracy")})
        why["throughput"] = "No samples reported:\nworkbench.report(samples=...)"
        return why if self._charts.steps_seen else super()._why_empty(state)

    def _say_running(self) -> None:
        """Status line with what the ranks have reported (nan values are left out)."""
        last = self._charts.last
        if not last:
            self._say(f"Run {self.job.run_id}: ranks starting ...")
            return
        parts = [f"step {int(last['step'])}"]
        for name, fmt in (("loss", "loss {:.4g}"), ("accuracy", "accuracy {:.2f}"),
                          ("samples_per_s", "{:,.0f} samples/s")):
            value = last.get(name, float("nan"))
            if value == value:
                parts.append(fmt.format(value))
        self._say(f"Run {self.job.run_id} running · " + " · ".join(parts) + " · "
                  + live.fmt_seconds(last["time"]))

    def close(self) -> None:
        super().close()
        self._title.close()
