"""The scaling panel: run the same job at 1, 2, 4 ... ranks and watch speedup take shape.

    from workbench.ui import ScalingPanel
    ScalingPanel(engine="horovod", np_values="1,2", preset="comm-bound")

Choose the engine, the worker counts, a model preset and strong or weak scaling, then press
Run. The runs happen one after another (never side by side, so they do not compete for the
cores). As each run finishes, its point is added to three charts and to the table:

* **speedup** with the ideal line S = p and the fitted Amdahl (strong) or Gustafson (weak) law;
* **efficiency** S / p with the ideal 1.0;
* **scalability**: efficiency as p grows, extrapolated under the assumption that the
  fitted law holds beyond the measured p (a law fitted to few points fits them exactly);
* the **table**: np, time, samples/s, speedup, efficiency and the Karp–Flatt serial fraction.

The per-run configurations come from :mod:`workbench.scaling.sweep` (strong scaling splits the
global batch over the ranks; weak scaling gives every rank the same work), the charts from
:class:`workbench.ui.scaling_report.ScalingCharts`, and the formulas from
:mod:`workbench.scaling.metrics`; this module only schedules the runs and shows them live.
Like the training panel it never blocks the kernel: an asyncio task polls the job in progress
and starts the next one when it has finished.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ipywidgets as widgets

from workbench import engines
from workbench.config import ENGINES, PRESETS, ConfigError, JobConfig
from workbench.records.metrics import MetricsReader
from workbench.scaling.fit import fit_note
from workbench.scaling.sweep import MODES, Sweep, SweepPoint, sweep_point
from workbench.ui import charts, live
from workbench.ui.scaling_report import ScalingCharts, table_html

#: What the charts mean, under them.
CAPTION = (
    "<div style='font-size:12px;color:#555;max-width:900px'>"
    "<b>Speedup</b> = time of one worker ÷ time of p workers (from samples/s). "
    "<b>Efficiency</b> = speedup ÷ p: 1.0 means no time lost to communication. "
    "<b>Scalability</b>: how efficiency falls as p grows, extrapolated by assuming the fitted "
    "law holds beyond the measured p. "
    "Dashed grey: ideal; dotted orange: the law fitted to your points. "
    "<b>Karp–Flatt e</b> in the table (strong scaling only): if it grows with p, the loss is "
    "overhead (communication), not serial code; above 1, the run was slower than one "
    "worker.</div>")


#: What each scaling mode keeps fixed, shown in the mode picker.
MODE_MEANING = {"strong": "fixed total work", "weak": "fixed work per rank"}


def parse_np_values(text: str) -> list[int]:
    """Parse worker counts such as ``"1,2,4"``; raise ConfigError with a fix if they are bad."""
    parts = [p.strip() for p in str(text).replace(" ", ",").split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"invalid worker counts {text!r}: expected whole numbers separated "
                          "by commas, e.g. 1,2,4") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(f"invalid worker counts {text!r}: expected at least one number "
                          "of 1 or more, e.g. 1,2,4")
    if len(set(values)) != len(values):
        raise ConfigError(f"invalid worker counts {text!r}: each count may appear only once")
    return sorted(values)


class ScalingPanel(widgets.VBox):
    """Run a scaling sweep one job at a time and plot each point as soon as its run ends.

    Args:
        engine, np_values ("1,2,4"), preset, mode ("strong" or "weak"): initial choices.
        refresh_s: seconds between two polls of the run in progress.
        **fields: any other :class:`~workbench.JobConfig` field used by every run, e.g.
            ``epochs=1, max_steps=40, runs_dir="runs"``.

    Attributes:
        controls: name -> widget (``engine``, ``np_values``, ``preset``, ``mode``).
        run_button, stop_button; ``sweep`` (the :class:`~workbench.scaling.sweep.Sweep` in
        progress); ``job`` (its run in progress); ``sources`` (the charts' data sources);
        ``table`` (an HTML widget); ``status`` and ``alert``.
    """

    def __init__(self, *, engine: str = "horovod", np_values: str = "1,2",
                 preset: str = "comm-bound", mode: str = "strong", refresh_s: float = 0.5,
                 **fields: Any) -> None:
        self.refresh_s = float(refresh_s)
        self._fields = fields
        JobConfig.from_dict(fields)          # unknown field names fail here, with their name
        style, layout = {"description_width": "80px"}, widgets.Layout(width="230px")
        self.controls: dict[str, widgets.Widget] = {
            "engine": widgets.Dropdown(options=list(ENGINES), value=engine,
                                       description="engine", style=style, layout=layout),
            "np_values": widgets.Text(value=str(np_values), description="workers",
                                      placeholder="e.g. 1,2,4", style=style, layout=layout),
            "preset": widgets.Dropdown(options=list(PRESETS), value=preset,
                                       description="model", style=style, layout=layout),
            "mode": widgets.Dropdown(options=[(f"{m} ({MODE_MEANING[m]})", m) for m in MODES],
                                     value=mode, description="scaling", style=style,
                                     layout=widgets.Layout(width="320px")),
        }
        self.run_button = widgets.Button(description="Run", button_style="success",
                                         tooltip="Run the sweep, one job after another")
        self.stop_button = widgets.Button(description="Stop", button_style="danger",
                                          tooltip="Stop the run in progress and the sweep")
        self.run_button.on_click(self._on_run)
        self.stop_button.on_click(self._on_stop)
        self.status, self.alert, self.table = widgets.HTML(), widgets.HTML(), widgets.HTML()
        self.note = widgets.HTML()  # why no law is fitted, when none can hold
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="runs",
                                            layout=widgets.Layout(width="420px"))
        self.sweep: Sweep | None = None
        self.job = None
        self._queue: list[JobConfig] = []
        self._reader: MetricsReader | None = None
        self._steps = 0
        self._task: asyncio.Task | None = None
        self._closed = False
        self._charts = ScalingCharts([], mode)
        self._chart_widget = charts.to_widget(charts.grid(self._charts.figures, ncols=2))
        self._chart_box = widgets.Box([self._chart_widget])
        super().__init__(children=self._layout())
        self._say("Choose the workers and the model, then press Run.")

    def _layout(self) -> list[widgets.Widget]:
        c = self.controls
        row1 = widgets.HBox([c["engine"], c["np_values"], c["preset"]])
        row2 = widgets.HBox([c["mode"], self.run_button, self.stop_button])
        return [widgets.HTML("<b style='font-size:15px'>Scaling sweep</b>"), row1, row2,
                widgets.HBox([self.progress, self.status],
                             layout=widgets.Layout(align_items="center")),
                self.alert, self.note, self._chart_box, widgets.HTML(CAPTION), self.table]

    @property
    def sources(self) -> dict:
        """The data sources of the charts: measured ``points``, ``ideal`` and ``fit`` lines."""
        return {"points": self._charts.points, "ideal": self._charts.ideal,
                "fit": self._charts.fit, "fit_far": self._charts.fit_far}

    @property
    def points(self) -> list[SweepPoint]:
        """The runs finished so far."""
        return list(self.sweep.points) if self.sweep else []

    def running(self) -> bool:
        """True while a sweep is in progress."""
        return self.job is not None

    # ------------------------------------------------------------------ buttons
    def make_sweep(self) -> Sweep:
        """The sweep the controls describe; raises ConfigError naming what is wrong."""
        c = self.controls
        workers = parse_np_values(c["np_values"].value)
        base = JobConfig(**{**self._fields, "engine": c["engine"].value,
                            "preset": c["preset"].value})
        fixed = engines.ENGINES[base.engine].fixed_ranks    # the serial engine's 1
        if fixed and workers != [fixed]:
            raise ConfigError(f"the {base.engine} engine runs {'one' if fixed == 1 else fixed}"
                              " process: choose horovod or torch to compare worker counts")
        return Sweep(base, workers, c["mode"].value)

    def _on_run(self, _button: Any = None) -> None:
        """Run button: check the settings, start the first run, return at once."""
        if self.running():
            self._say("A sweep is already running. Press Stop first, or wait for it.", "warn")
            return
        try:
            sweep = self.make_sweep()
        except ConfigError as err:
            self._say("Not started: the settings are not valid.", "error", detail=str(err))
            return
        self.sweep, self._queue = sweep, list(sweep.configs)
        self._charts = ScalingCharts([], sweep.mode)
        old, self._chart_widget = self._chart_widget, charts.to_widget(
            charts.grid(self._charts.figures, ncols=2))
        self._chart_box.children = [self._chart_widget]
        old.close()
        self.table.value = self.note.value = ""
        self.progress.value, self.progress.max, self.progress.bar_style = 0, len(self._queue), ""
        self._say("Starting the sweep ...", detail="")
        if self._start_next():
            self._task = live.start_task(self._poll)

    def _on_stop(self, _button: Any = None) -> None:
        """Stop button: end the run in progress (in a worker thread: it can take seconds)."""
        if not self.running():
            self._say("No sweep is running.", "warn")
            return
        self._queue.clear()
        self._say(f"Stopping the run with {self.job.config.np} worker(s) ...", "warn")
        live.stop_in_background(self.job, self.refresh)

    # ------------------------------------------------------------------ the sweep
    def _start_next(self) -> bool:
        """Start the next run of the queue; False when there is none or it failed to start."""
        import workbench

        self.job = None
        if not self._queue:
            return False
        cfg = self._queue.pop(0)
        try:
            self.job = workbench.start(cfg)
        except ConfigError as err:
            self._queue.clear()
            self._say("Not started.", "error", detail=str(err))
            return False
        self._reader, self._steps = MetricsReader(self.job.run_dir), 0
        return True

    async def _poll(self) -> None:
        """Refresh every ``refresh_s`` seconds until the sweep has finished."""
        await live.poll(self.refresh, self.running, self.refresh_s, lambda err: self._say(
            "The sweep view stopped.", "error", detail=f"{type(err).__name__}: {err}"))

    def refresh(self) -> None:
        """Check the run in progress; when it has finished, plot it and start the next one.

        Call on the kernel's event loop (the polling task does): it changes Bokeh models.
        """
        job = self.job
        if job is None:
            return
        if not job.done:
            self._steps += sum(r.get("kind") == "step" for r in self._reader.read_new())
            n = len(self.sweep.points) + 1
            self._say(f"Run {n} of {len(self.sweep.configs)}: {job.config.np} worker(s), "
                      f"{self._steps // max(1, job.config.world_size)} steps done ...")
            return
        point = sweep_point(job.config.np, job)
        self.sweep.points.append(point)
        self.progress.value = len(self.sweep.points)
        rows = self.sweep.rows()
        self.show_rows(rows)
        if not point.ok:
            self._queue.clear()
            self.job = None
            self.progress.bar_style = "warning" if point.status == "stopped" else "danger"
            failure = point.summary.get("failure") or {}
            detail = "\n".join(str(x) for x in (failure.get("error"), failure.get("log_tail"))
                               if x)
            self._say(f"The run with {point.np} worker(s) {point.status}; sweep ended.",
                      "warn" if point.status == "stopped" else "error", detail=detail)
            return
        if not self._start_next():
            self.progress.bar_style = "success"
            self._say(f"Sweep finished: {len(rows)} runs.", "ok")

    def show_rows(self, rows: list[dict]) -> None:
        """Plot the sweep's rows, fill the table, and say why no fit is drawn when none can
        hold (a run slower than one worker). Call on the kernel's event loop."""
        self._charts.update(rows)
        self.table.value = table_html(rows) if rows else ""
        note = fit_note(rows, self._charts.mode)
        self.note.value = live.message_html(note, "warn") if note else ""

    # ------------------------------------------------------------------ messages, closing
    def _say(self, text: str, level: str = "info", *, detail: str | None = None) -> None:
        self.status.value = live.message_html(text, level)
        if detail is not None:
            self.alert.value = live.message_html("", level, detail=detail) if detail else ""

    def close(self) -> None:
        """Stop the run in progress and the polling task, then close every widget."""
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
        if self.job is not None and not self.job.done:
            self.job.stop()
        self.job = None
        for w in [*self.controls.values(), self.run_button, self.stop_button, self.status,
                  self.alert, self.note, self.table, self.progress, self._chart_widget,
                  self._chart_box]:
            w.close()
        super().close()

