"""The training panel: set up a data-parallel job, press Start, watch every rank train.

    from workbench.ui import TrainingPanel
    TrainingPanel(engine="horovod", np=2, dataset="digits", model="mlp", epochs=2)

The panel is an ipywidgets ``VBox``, so it shows as a cell's last value or with ``display()``.
It holds

* the job's settings (``panel.controls``, one widget per :class:`~workbench.JobConfig` field),
* Start and Stop buttons, a status line and a progress bar,
* live charts (:class:`~workbench.ui.run_charts.RunCharts`): loss and accuracy per rank and
  overall, the job's samples/s, and how each rank's step time splits into computing and
  synchronizing gradients,
* the tail of every rank's log, and a picker that reopens any past run from ``runs/``.

How it stays live without freezing the notebook: Start launches the job (which returns at once:
the ranks are separate processes) and starts an asyncio task on the kernel's event loop. Every
``refresh_s`` seconds the task calls :meth:`TrainingPanel.refresh`, which reads the new lines of
the run's metrics files (``metrics/rank<k>.jsonl``) and streams them into the charts.
See :mod:`workbench.ui.live`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from workbench.config import (
    ConfigError,
    JobConfig,
)
from workbench.launch import FINAL_STATES
from workbench.records.metrics import MetricsReader
from workbench.sharded.costmodel import SHARDED_STATES, STRATEGY_OF
from workbench.ui import charts, live
from workbench.ui.logs import LogPane
from workbench.ui.run_charts import RunCharts
from workbench.ui.run_controls import (
    control_specs,
    failure_text,
    make_control,
    run_label,
    summary_text,
)

#: What the charts show, in one sentence each, under the charts.
CAPTION = (
    "<div style='font-size:12px;color:#555;max-width:900px'>"
    "Thin lines: each rank's loss and accuracy on <i>its own shard</i> of every batch; thick "
    "line: the mean over all ranks. Throughput counts the samples of all ranks together. "
    "The bars split each rank's step time into <b style='color:#1f77b4'>computing</b> "
    "gradients and <b style='color:#ff7f0e'>synchronizing</b> them (allreduce, waiting for "
    "the slowest rank): the bigger the orange part, the less a new rank speeds the job up."
    "</div>")

#: Refreshes between two re-reads of the log files (logs change less often than metrics).
LOG_EVERY = 4


class TrainingPanel(widgets.VBox):
    """Start, watch and stop one training job, with live per-rank charts.

    Args:
        refresh_s: seconds between two refreshes of the live view (0.25 s looks live and costs
            little: each refresh reads only the new bytes of the metrics files).
        **defaults: initial values of any :class:`~workbench.JobConfig` field, e.g.
            ``np=2, dataset="digits"``. Fields without a control (``max_steps``, ``samples``,
            ``runs_dir`` ...) are used as given for every job started from the panel.

    Attributes:
        controls: JobConfig field name -> input widget.
        start_button, stop_button: the buttons (``.click()`` works from code too).
        job: the job started last (a :class:`workbench.launch.Job`), or None.
        sources: the Bokeh ColumnDataSources behind the charts (see :class:`RunCharts`).
        status: the one-line status; ``alert``: errors and their details.
    """

    def __init__(self, *, refresh_s: float = 0.25, **defaults: Any) -> None:
        self.refresh_s = float(refresh_s)
        self._base = JobConfig.from_dict(defaults)   # unknown field names fail here
        self.job = None
        self._run_dir: Path | None = None
        self._reader: MetricsReader | None = None
        self._task: asyncio.Task | None = None
        self._finished = True
        self._ticks = 0
        self._steps_total = 0
        self._epochs = self._base.epochs
        self.controls = {name: make_control(name, label, kind, getattr(self._base, name))
                         for name, label, kind in control_specs(self._base.launcher)}
        # no icons: an icon font adds a character to the button's accessible name
        self.start_button = widgets.Button(description="Start", button_style="success",
                                           tooltip="Launch the job")
        self.stop_button = widgets.Button(description="Stop", button_style="danger",
                                          tooltip="End every rank of the job")
        self.start_button.on_click(self._on_start)
        self.stop_button.on_click(self._on_stop)
        self._show_running(False)
        self.status = widgets.HTML()
        self.alert = widgets.HTML()
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress",
                                            bar_style="info",
                                            layout=widgets.Layout(width="420px"))
        self.progress_label = widgets.Label()
        self.logs = LogPane()
        self.run_picker = widgets.Dropdown(description="past runs", options=[],
                                           layout=widgets.Layout(width="700px"),
                                           style={"description_width": "70px"})
        self.open_button = widgets.Button(description="Open", icon="folder-open",
                                          tooltip="Show the charts and logs of this run")
        self.open_button.on_click(lambda _b: self.open_run(self.run_picker.value))
        self._charts = _charts_for(self._base)
        self._chart_widget = charts.to_widget(self._charts.layout)
        self._chart_box = widgets.Box([self._chart_widget])
        super().__init__(children=self._layout())
        self._closed = False
        self._say("Ready. Choose the settings and press Start.")
        self.refresh_runs()

    # ------------------------------------------------------------------ layout
    def _layout(self) -> list[widgets.Widget]:
        ctl = list(self.controls.values())
        grid = widgets.GridBox(ctl, layout=widgets.Layout(
            grid_template_columns="repeat(auto-fill, 188px)", grid_gap="4px 6px"))
        buttons = widgets.HBox([self.start_button, self.stop_button, self.status],
                               layout=widgets.Layout(align_items="center"))
        progress = widgets.HBox([self.progress, self.progress_label])
        logs = widgets.Accordion([self.logs], titles=("Logs of each rank (last lines)",))
        picker = widgets.HBox([self.run_picker, self.open_button])
        return [widgets.HTML("<b style='font-size:15px'>Data-parallel training job</b>"),
                grid, buttons, progress, self.alert, self._chart_box, widgets.HTML(CAPTION),
                logs, picker]

    @property
    def sources(self) -> dict:
        """The ColumnDataSources of the charts now shown (``"rank0"``, ``"overall"``, ...)."""
        return self._charts.sources

    # ------------------------------------------------------------------ configuration
    def config(self) -> JobConfig:
        """The JobConfig the controls describe, validated (raises ConfigError)."""
        values = {name: w.value for name, w in self.controls.items()}
        return dataclasses.replace(self._base, **values).validate()

    def _set_controls(self, cfg: JobConfig) -> None:
        for name, w in self.controls.items():
            value = getattr(cfg, name)
            if not isinstance(w, widgets.Dropdown) or value in w.options:
                w.value = value

    # ------------------------------------------------------------------ buttons
    def running(self) -> bool:
        """True while the last job started from this panel has not finished."""
        return self.job is not None and not self._finished

    def _on_start(self, _button: Any = None) -> None:
        """Start button: launch the job and return at once; the polling task does the rest."""
        if self.running():
            self._say(f"A job is already running ({self.job.run_id}). Press Stop first, or "
                      "wait for it to finish.", "warn")
            return
        import workbench

        try:
            cfg = self.config()
            job = workbench.start(cfg)
        except ConfigError as err:
            self._say("Not started: the settings are not valid.", "error", detail=str(err))
            return
        except Exception as err:  # noqa: BLE001 - show any launch failure in the panel
            self._say("Could not start the job.", "error", detail=f"{type(err).__name__}: {err}")
            return
        self.watch(job)

    def watch(self, job: Any) -> None:
        """Show a job that is already running, e.g. one started from code with
        ``workbench.start(cfg)`` or ``start_module(...)``, and follow it live."""
        if self.running():
            raise RuntimeError(f"this panel already follows the running job {self.job.run_id}")
        self.job = job
        self._set_controls(job.config)
        self._watch(job.run_dir, job.config)
        self._finished = False
        self._show_running(True)
        self._say(f"Started run {job.run_id}: launching {job.config.world_size} rank(s) ...",
                  detail="\n".join(f"Note: {w}" for w in job.warnings))
        self._task = live.start_task(self._poll)

    def _on_stop(self, _button: Any = None) -> None:
        """Stop button: end every rank. Stopping takes up to a few seconds, so inside a kernel
        it runs in a worker thread and the polling task notices the result."""
        if not self.running():
            self._say("No job is running.", "warn")
            return
        self._say(f"Stopping run {self.job.run_id} ...", "warn")
        live.stop_in_background(self.job, self.refresh)

    def _show_running(self, running: bool) -> None:
        """Only the button that can do something is enabled: Start while no job runs, Stop
        while one does."""
        self.start_button.disabled, self.stop_button.disabled = running, not running

    # ------------------------------------------------------------------ live view
    def _watch(self, run_dir: Path, cfg: JobConfig) -> None:
        """Point the charts, the progress bar and the logs at a new run folder."""
        self._run_dir = Path(run_dir)
        self._reader = MetricsReader(self._run_dir)
        self._epochs, self._steps_total, self._ticks = cfg.epochs, 0, 0
        old = self._chart_widget
        self._charts = _charts_for(cfg)
        self._chart_widget = charts.to_widget(self._charts.layout)
        self._chart_box.children = [self._chart_widget]
        old.close()
        self.logs.show_run(self._run_dir, cfg.world_size)
        self.progress.value, self.progress.max, self.progress.bar_style = 0, 1, "info"
        self.progress_label.value = ""
        self.alert.value = ""

    async def _poll(self) -> None:
        """Refresh every ``refresh_s`` seconds until the job has finished."""
        await live.poll(self.refresh, self.running, self.refresh_s, lambda err: self._say(
            "The live view stopped.", "error", detail=f"{type(err).__name__}: {err}"))

    def refresh(self) -> int:
        """Read new metric lines into the charts, update status, progress and logs.

        Returns the number of new metric lines. Call it only on the kernel's event loop (the
        polling task does); it changes Bokeh models.
        """
        if self._reader is None:
            return 0
        self._ticks += 1
        # Ask for the state *before* reading: once it is final, every line is in the file.
        job_state = self.job.status if (self.job is not None and not self._finished) else None
        rows = self._reader.read_new()
        self._charts.add(rows)
        for row in rows:
            if row.get("kind") == "event" and row.get("steps_per_epoch"):
                self._steps_total = int(row["steps_per_epoch"]) * int(row.get("epochs", 1))
        self._update_progress()
        if job_state in FINAL_STATES:   # read after the state: no line can come later
            self._on_finished(job_state)
        elif job_state is not None:
            self._say_running()
        if self._finished or self._ticks % LOG_EVERY == 1:
            self.logs.refresh()
        return len(rows)

    def _update_progress(self) -> None:
        last = self._charts.last
        if self._steps_total:
            self.progress.max = self._steps_total
            done = int(last.get("step", -1)) + 1 if "step" in last else 0
            self.progress.value = min(done, self._steps_total)
        epoch = min(self._charts.epochs_done + (0 if self._finished else 1), self._epochs)
        self.progress_label.value = f"epoch {max(epoch, 1)} of {self._epochs}"

    def _say_running(self) -> None:
        c, last = self._charts, self._charts.last
        if self.job.pending_reason is not None:  # Slurm queues the job: say why
            self._say(f"Run {self.job.run_id} queued: {self.job.pending_reason}")
            return
        if self.job.status == "queued":
            self._say(f"Run {self.job.run_id} queued: number {self.job.queue_position} in "
                      f"this machine's queue, waiting for {self.job.waiting_for}. It starts "
                      "by itself.")
            return
        if not last:
            self._say(f"Run {self.job.run_id}: ranks starting (importing, loading data) ...")
            return
        sps = last.get("samples_per_s", float("nan"))
        sps_text = f" · {sps:,.0f} samples/s" if sps == sps else ""
        self._say(f"Run {self.job.run_id} running · step {int(last['step']) + 1} · "
                  f"loss {last['loss']:.3f} · accuracy {last['accuracy']:.2f}{sps_text} · "
                  f"syncing {100 * c.sync_share():.0f}% of step time · "
                  f"{live.fmt_seconds(last['time'])}")

    def _on_finished(self, state: str) -> None:
        """Show how the job ended; on failure, which rank failed and the end of its log."""
        self._finished = True
        self._show_running(False)
        self._show_summary(self.job.run_id, state, self.job.summary or {})
        self.refresh_runs()

    def _show_summary(self, run_id: str, state: str, summary: dict) -> None:
        self._charts.say_why_empty(self._why_empty(state))
        style = {"succeeded": "success", "stopped": "warning"}.get(state, "danger")
        self.progress.bar_style = style
        if state == "succeeded":
            self.progress.value = self.progress.max
            self._say(f"Run {run_id} succeeded. {summary_text(summary)}", "ok")
        elif state == "stopped":
            self._say(f"Run {run_id} was stopped. {summary_text(summary)}", "warn")
        else:
            self._say(f"Run {run_id} {state}.", "error", detail=failure_text(summary))

    def _why_empty(self, state: str) -> dict[str, str]:
        """What an empty chart says once the run has ended: the training loop reports every
        value at every step, so an empty chart means that too few steps finished."""
        said = (f"The run {state}\nbefore its first step." if not self._charts.steps_seen
                else "Too few steps\nto draw this.")
        return dict.fromkeys(self._charts.figures, said)

    # ------------------------------------------------------------------ past runs
    def refresh_runs(self) -> None:
        """Fill the run picker with the runs in the runs folder, newest first."""
        from workbench.records import list_runs

        try:
            runs = list_runs(self._base.runs_dir)
        except Exception:  # noqa: BLE001 - an unreadable runs folder must not break the panel
            runs = []
        options = [(run_label(r), str(r.run_dir)) for r in reversed(runs)]
        self.run_picker.options = options
        if options:
            self.run_picker.value = options[0][1]

    def open_run(self, run: str | Path | None) -> None:
        """Show a past run (its folder or its id): settings, charts, logs and outcome."""
        from workbench.records import load_run

        if run is None:
            self._say("No past run chosen.", "warn")
            return
        if self.running():
            self._say("A job is running; open past runs once it has finished.", "warn")
            return
        try:
            record = load_run(run, runs_dir=self._base.runs_dir)
            cfg = JobConfig.from_dict(record.config)
        except (OSError, ConfigError, TypeError) as err:
            self._say(f"Cannot open run {run}.", "error", detail=f"{err}")
            return
        self.job = None
        self._set_controls(cfg)
        self._watch(record.run_dir, cfg)
        self.refresh()
        self._finished = True
        self._update_progress()
        self.logs.refresh()
        summary = record.summary or {}
        if not summary and record.status == "running":  # another kernel's or a terminal's
            self._say(f"Run {record.run_id} is still running elsewhere (another notebook or a "
                      "terminal): shown as far as it has got; open it again once it has ended.",
                      "info", detail="")
            self._charts.say_why_empty(dict.fromkeys(
                self._charts.figures, "Still running elsewhere:\nopen it again\nonce it ends."))
            return
        self._show_summary(record.run_id, summary.get("status", record.status), summary)

    # ------------------------------------------------------------------ messages, closing
    def _say(self, text: str, level: str = "info", *, detail: str | None = None) -> None:
        """Show ``text`` on the status line; ``detail`` (if given) replaces the box below it."""
        self.status.value = live.message_html(text, level)
        if detail is not None:
            self.alert.value = live.message_html("", level, detail=detail) if detail else ""

    def close(self) -> None:
        """Stop the job (no rank outlives the panel), the polling task, and every widget."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        if self.running():
            self.job.stop()
            self._finished = True
        for w in [*self.controls.values(), self.start_button, self.stop_button, self.status,
                  self.alert, self.progress, self.progress_label, self._chart_widget,
                  self._chart_box, self.logs, self.run_picker, self.open_button]:
            w.close()
        super().close()


def _charts_for(cfg: JobConfig) -> RunCharts:
    """The live charts of a run of `cfg`: bytes held per rank for DDP and the sharded
    engines, the sharded ones beside DDP's."""
    strategy = STRATEGY_OF.get(cfg.engine)
    return RunCharts(cfg.world_size, memory=strategy is not None,
                     sharded=SHARDED_STATES[strategy] if strategy else ())
