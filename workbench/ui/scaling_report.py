"""Charts of a scaling sweep, and the standalone HTML report that holds them (notebook 06,
`workbench scale --report`).

Three charts, each with the fitted speedup law (workbench/scaling/fit.py) drawn through the
measured points:

1. **speedup** S(p) against workers, with the ideal line S = p;
2. **efficiency** E(p) = S / p of each run, as bars, with the ideal 1.0;
3. **scalability** how efficiency behaves as workers grow, on a log axis and extrapolated
   beyond the measured runs with the fitted law — the question "how far can this go?".

The figures are built with the shared helper :mod:`workbench.ui.charts`. :class:`ScalingCharts`
keeps their data sources so a live panel can call :meth:`ScalingCharts.update` as each run of
a sweep finishes.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from bokeh.layouts import column
from bokeh.models import Div

from workbench.scaling.fit import fit_note, fitted_law
from workbench.ui import charts

#: Titles of the three charts; the report test looks for them.
CHART_TITLES = ("Speedup", "Efficiency", "Scalability")


def _curve_points(max_workers: float, n: int = 60) -> list[float]:
    """Worker counts from 1 to ``max_workers`` spaced evenly on a log scale."""
    return [max_workers ** (i / (n - 1)) for i in range(n)]


class ScalingCharts:
    """The three sweep charts, built once and refreshed with :meth:`update` as rows arrive.

    ``rows`` are the dicts of :func:`workbench.scaling.metrics.scaling_rows`.
    """

    def __init__(self, rows: Sequence[Mapping] = (), mode: str = "strong",
                 extrapolate_to: int = 64) -> None:
        self.mode = mode
        self.extrapolate_to = extrapolate_to
        point_cols = ["np", "speedup", "efficiency", "time_s", "samples_per_s"]
        self.points = charts.source(point_cols, name="scaling_points")  # named: found in tests
        self.ideal = charts.source(["x", "speedup", "efficiency"])
        self.fit = charts.source(["x", "speedup", "efficiency"])
        self.fit_far = charts.source(["x", "efficiency"])
        self._fit_renderers: set = set()
        self.speedup = self._speedup_figure()
        self.efficiency = self._efficiency_figure()
        self.scalability = self._scalability_figure()
        self.update(rows)

    @property
    def figures(self) -> list:
        return [self.speedup, self.efficiency, self.scalability]

    def update(self, rows: Sequence[Mapping]) -> None:
        """Redraw every chart from all rows so far (call on the kernel's event loop)."""
        rows = list(rows)
        self.points.data = {c: [r[c] for r in rows] for c in self.points.data}
        top = max([r["np"] for r in rows] + [2])
        self.ideal.data = {"x": [1, top], "speedup": [1, top], "efficiency": [1.0, 1.0]}
        law = fitted_law(rows, self.mode)
        if law is None:
            empty = {"x": [], "speedup": [], "efficiency": []}
            self.fit.data, self.fit_far.data = empty, {"x": [], "efficiency": []}
            self._label_fit("no fit (see the note)" if fit_note(rows, self.mode) else "fit")
            return
        name, f, s_of_p = law
        near = _curve_points(top)
        far = _curve_points(max(self.extrapolate_to, top))
        self.fit.data = {"x": near, "speedup": [s_of_p(p) for p in near],
                         "efficiency": [s_of_p(p) / p for p in near]}
        self.fit_far.data = {"x": far, "efficiency": [s_of_p(p) / p for p in far]}
        self._label_fit(f"{name} fit, f = {f:.3f}")

    def _label_fit(self, label: str) -> None:
        """Name the fitted line in every chart's legend."""
        for fig in self.figures:
            for item in fig.legend[0].items if fig.legend else []:
                if set(item.renderers) & self._fit_renderers:
                    item.label = {"value": label}

    def _speedup_figure(self):
        fig = charts.figure("Speedup", "workers (ranks)", "speedup (× one worker)",
                            tooltips=[("workers", "@np"), ("speedup", "@speedup{0.00}")])
        charts.line(fig, self.ideal, "x", "speedup", color=charts.IDEAL_COLOR,
                    legend="ideal (S = p)", dash="dashed")
        self._fit_renderers.add(charts.line(
            fig, self.fit, "x", "speedup", color=charts.kind_color("sync"), legend="fit",
            width=1.5, dash="dotted"))
        charts.line(fig, self.points, "np", "speedup", legend="measured", markers=True)
        return fig

    def _efficiency_figure(self):
        fig = charts.figure("Efficiency", "workers (ranks)", "efficiency (speedup ÷ workers)",
                            tooltips=[("workers", "@np"), ("efficiency", "@efficiency{0.00}")])
        fig.vbar(x="np", top="efficiency", width=0.5, source=self.points,
                 color=charts.kind_color("compute"), legend_label="measured")
        charts.line(fig, self.ideal, "x", "efficiency", color=charts.IDEAL_COLOR,
                    legend="ideal (E = 1)", dash="dashed")
        self._fit_renderers.add(charts.line(
            fig, self.fit, "x", "efficiency", color=charts.kind_color("sync"), legend="fit",
            width=1.5, dash="dotted"))
        fig.y_range.start = 0
        return fig

    def _scalability_figure(self):
        fig = charts.figure(
            "Scalability", "workers (ranks, log scale)", "efficiency",
            x_axis_type="log", tooltips=[("workers", "@x{0}"), ("efficiency", "@efficiency{0.00}")],
        )
        self._fit_renderers.add(charts.line(
            fig, self.fit_far, "x", "efficiency", color=charts.kind_color("sync"),
            legend="fit", width=1.5, dash="dotted"))
        charts.line(fig, self.points, "np", "efficiency", legend="measured", markers=True)
        fig.xaxis.ticker = [2**k for k in range(11)]     # 1, 2, 4 ... 1024 workers
        fig.y_range.start = 0
        fig.y_range.end = 1.1
        return fig


def table_html(rows: Sequence[Mapping]) -> str:
    """The sweep table as HTML (the same columns as the command prints)."""
    head = "".join(f"<th>{h}</th>" for h in
                   ("np", "time (s)", "samples/s", "speedup", "efficiency", "Karp–Flatt e"))
    body = "".join(
        "<tr>" + "".join(f"<td>{c}</td>" for c in (
            r["np"], f"{r['time_s']:.2f}", f"{r['samples_per_s']:.0f}", f"{r['speedup']:.2f}",
            f"{r['efficiency']:.2f}",
            "–" if r["karp_flatt"] is None else f"{r['karp_flatt']:.3f}")) + "</tr>"
        for r in rows)
    return f"<table border='1' cellpadding='4' style='border-collapse:collapse'>" \
           f"<tr>{head}</tr>{body}</table>"


def _intro_html(rows: Sequence[Mapping], meta: Mapping) -> str:
    """Say what was measured, how, and what the words mean."""
    mode = meta.get("mode", "strong")
    law = fitted_law(rows, mode)
    work = ("the total work is fixed (same global batch and epoch, split across ranks)"
            if mode == "strong" else "the work per rank is fixed (each rank keeps its batch)")
    fit = (f"<p>{law[0]}'s law fitted to the measured speedups gives a parallel fraction of "
           f"<b>{law[1]:.3f}</b>.</p>" if law else "")
    note = fit_note(rows, mode)
    if note:
        fit += f"<p><b>{html.escape(note)}</b></p>"
    setup = ", ".join(f"{html.escape(str(k))}={html.escape(str(v))}"
                      for k, v in meta.get("config", {}).items())
    return (
        f"<h1>Scaling report: {html.escape(str(meta.get('engine', '')))}, {mode} scaling</h1>"
        f"<p>In {mode} scaling {work}. The baseline holds <b>per-worker resources constant"
        f"</b>: every rank gets {meta.get('threads_per_rank', 1)} CPU thread(s) whatever the "
        f"number of ranks, so a speedup comes from more workers, not from more threads per "
        f"worker.</p>"
        "<p><b>Speedup</b> = sequential time ÷ parallel time (measured as throughput ratio). "
        "<b>Efficiency</b> = speedup ÷ workers. <b>Scalability</b> = efficiency as the number "
        "of workers grows. <b>Karp–Flatt e</b> = (1/S − 1/p)/(1 − 1/p), for strong scaling: a "
        "serial fraction that grows with p points at overhead (communication) rather than "
        "serial code.</p>"
        f"{fit}{table_html(rows)}"
        f"<p style='color:#666'>Setup: {setup}</p>"
    )


def report_html(rows: Sequence[Mapping], meta: Mapping, path: str | Path | None = None) -> str:
    """One standalone HTML page (BokehJS inlined, so it opens offline) with the three charts,
    also written to `path` when one is given."""
    sc = ScalingCharts(rows, meta.get("mode", "strong"))
    layout = column(Div(text=_intro_html(rows, meta), width=900), charts.grid(sc.figures, 3))
    return charts.page(layout, f"Scaling report ({meta.get('mode', 'strong')})", path)


def write_report(path: str | Path, rows: Sequence[Mapping], meta: Mapping) -> Path:
    """Write :func:`report_html` to ``path`` and return the path."""
    report_html(rows, meta, path)
    return Path(path)


def step_time_figure(presets: Sequence[str], workers: int):
    """One step of each simulator preset at `workers` workers, as a Gantt chart: the
    compute, and the allreduce, which starts inside the backward pass by the part the
    preset hides behind it and ends the step (`scaling/simulate.py`'s `predict`)."""
    from workbench.scaling.simulate import PRESETS

    tasks, lanes = [], []
    for name in presets:
        s = PRESETS[name].predict(workers)
        start = s.compute_time_s - (s.comm_time_s - s.exposed_comm_s)
        lanes += [f"{name}: compute", f"{name} ({s.efficiency:.0%}): allreduce"]
        tasks += [{"lane": lanes[-2], "start": 0.0, "end": s.compute_time_s, "kind": "compute"},
                  {"lane": lanes[-1], "start": start, "end": start + s.comm_time_s,
                   "kind": "allreduce", "label": f"allreduce, {s.exposed_comm_s:.3f} s of it "
                                                 "after the compute"}]
    fig, _ = charts.gantt(tasks, f"One step at {workers} workers (efficiency)", lanes=lanes,
                          x_label="seconds", y_label="setup, and what it does")
    return fig
