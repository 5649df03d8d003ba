"""The one chart helper of the workbench: every Bokeh chart is made here.

Panels, the scaling report, the labs' Gantt charts and the notebooks all build their charts
with these functions, so every chart has the same look (size, fonts, toolbar, colour of each
rank) and every live chart reaches the browser the same way.

How a live chart reaches the browser
------------------------------------
A chart is a Bokeh figure drawing from a ``ColumnDataSource``. Wrapped in
``jupyter_bokeh.widgets.BokehModel`` (see :func:`to_widget`) it becomes an ipywidget: it can sit
in any ipywidgets layout, and every change to its sources (``source.stream(...)``) is sent to
the page over the widget channel. This works in JupyterLab 4, Notebook 7 and VS Code, unlike
``push_notebook``, which needs a comms route that VS Code lacks.

Two rules keep it correct:

* BokehJS must be loaded in the page before the first chart widget renders. :func:`to_widget`
  calls :func:`load_bokehjs`, which loads it *inline* (from the installed Bokeh, not from a CDN)
  so it also works offline and behind classroom firewalls.
* Change sources only on the kernel's event loop (a button callback or an asyncio task), never
  from another thread: Bokeh documents are not thread-safe.

Example::

    from workbench.ui import charts
    fig = charts.figure("Loss", x_label="time (s)", y_label="loss")
    src = charts.source(["time", "loss"])
    charts.line(fig, src, "time", "loss", color=charts.rank_color(0), legend="rank 0")
    widget = charts.to_widget(fig)          # put it in a VBox, or display(widget)
    src.stream({"time": [0.1], "loss": [2.3]})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bokeh.models import ColumnDataSource, HoverTool, LayoutDOM, Legend
from bokeh.palettes import Category10_10
from bokeh.plotting import figure as _bokeh_figure

from workbench.launch.waiting import in_kernel

#: Default size of one chart in pixels: four fit on a laptop screen in a 2 x 2 grid.
WIDTH = 420
HEIGHT = 260

#: Colour of the "overall" (all ranks together) series and of reference lines.
OVERALL_COLOR = "#222222"
IDEAL_COLOR = "#888888"

#: Colours with a meaning that is the same in every chart of the workbench.
KIND_COLORS = {
    "compute": "#1f77b4",   # blue: forward + backward pass
    "sync": "#ff7f0e",      # orange: waiting for / exchanging gradients
    "idle": "#d9d9d9",      # grey: pipeline bubble, waiting for a straggler
    "forward": "#2ca02c",
    "backward": "#9467bd",
    "allreduce": "#ff7f0e",
    "optimizer": "#8c564b",
}

_bokehjs_loaded = False


def rank_color(rank: int) -> str:
    """Return the colour of one rank; rank k has the same colour in every chart.

    Ten colours (Bokeh's Category10) cycle, which is enough to tell the ranks of a classroom
    job apart.
    """
    return Category10_10[rank % len(Category10_10)]


def kind_color(kind: str) -> str:
    """Return the colour of an activity (``"compute"``, ``"sync"``, ``"idle"``, ...).

    Unknown kinds get a stable colour from the rank palette, so a lab can add its own kinds.
    """
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    return Category10_10[sum(map(ord, kind)) % len(Category10_10)]


def kind_colors(kinds: Sequence[str], given: Mapping[str, str] | None = None) -> list[str]:
    """A colour per kind of one chart: `given`'s, else :func:`kind_color`'s, else, where two
    kinds would share one (the hash collides: 'grads', 'activations'), the first one unused."""
    colors: list[str] = []
    for kind in kinds:
        color = (given or {}).get(kind) or kind_color(kind)
        colors.append(next(c for c in Category10_10 if c not in colors)
                      if color in colors else color)
    return colors


def load_bokehjs(force: bool = False) -> bool:
    """Load BokehJS into the notebook page, once per kernel; return True if it was sent now.

    Bokeh chart widgets need BokehJS in the page; without it they fail with "Cannot read
    properties of undefined (reading 'require')". ``output_notebook(INLINE)`` embeds the
    library from the installed Bokeh package instead of fetching it from a CDN, which fails
    offline. Outside a Jupyter kernel this does nothing, so scripts and tests can build panels.
    Pass ``force=True`` after reloading the browser page.
    """
    global _bokehjs_loaded
    if (_bokehjs_loaded and not force) or not in_kernel():
        return False
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    output_notebook(INLINE, hide_banner=True)
    _bokehjs_loaded = True
    return True


def page(layout: LayoutDOM, title: str, path: str | Path | None = None) -> str:
    """`layout` as one standalone HTML page, BokehJS inlined so that it opens offline;
    also written to `path` (its folder made) when one is given."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    html = file_html(layout, INLINE, title=title)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(html, encoding="utf-8")
    return html


def figure(
    title: str,
    x_label: str = "",
    y_label: str = "",
    *,
    width: int = WIDTH,
    height: int = HEIGHT,
    tooltips: Sequence[tuple[str, str]] | None = None,
    **kwargs: Any,
):
    """Return a Bokeh figure in the workbench style.

    Args:
        title: what the chart shows, e.g. ``"Loss per rank"``.
        x_label, y_label: axis titles; include the unit, e.g. ``"time (s)"``.
        width, height: size in pixels.
        tooltips: ``[("label", "@column"), ...]`` for a hover tool; None for no hover.
        **kwargs: passed to ``bokeh.plotting.figure`` (``x_range``, ``y_range``, ``y_axis_type``).

    The toolbar keeps only pan, box zoom, wheel zoom, reset and save: enough to inspect a run,
    few enough not to distract.
    """
    kwargs.setdefault("tools", "pan,box_zoom,wheel_zoom,reset,save")
    fig = _bokeh_figure(title=title, width=width, height=height, **kwargs)
    fig.xaxis.axis_label = x_label
    fig.yaxis.axis_label = y_label
    fig.title.text_font_size = "12pt"
    fig.toolbar.logo = None
    fig.toolbar.autohide = True
    fig.min_border_left = 50
    fig.xgrid.grid_line_alpha = 0.4
    fig.ygrid.grid_line_alpha = 0.4
    if tooltips:
        fig.add_tools(HoverTool(tooltips=list(tooltips)))
    return fig


def source(
    columns: Iterable[str],
    data: Mapping[str, Sequence] | None = None,
    *,
    name: str | None = None,
) -> ColumnDataSource:
    """Return a ColumnDataSource with the given columns, empty unless ``data`` is given.

    Live charts start empty and grow with ``source.stream(new_rows, rollover=N)``; every
    column must get the same number of new values at each stream. ``name`` lets the page find
    the source (``doc.get_model_by_name(name)`` in BokehJS), which browser tests use.
    """
    data = dict(data or {})
    return ColumnDataSource({c: list(data.get(c, [])) for c in columns}, name=name)


def _legend_outside(fig) -> None:
    """Move the legend to the right of the plot, so it never hides data; click hides a line."""
    if fig.legend and fig.legend[0] not in fig.right:
        legend: Legend = fig.legend[0]
        legend.click_policy = "hide"
        legend.label_text_font_size = "9pt"
        legend.spacing = 0
        legend.padding = 4
        fig.add_layout(legend, "right")


def line(
    fig,
    src: ColumnDataSource,
    x: str,
    y: str,
    *,
    color: str = OVERALL_COLOR,
    legend: str | None = None,
    width: float = 2,
    dash: str = "solid",
    markers: bool = False,
):
    """Draw column ``y`` against column ``x`` of ``src`` as a line; return the renderer.

    ``markers=True`` adds a dot per point, which helps when a series has few points (one per
    run of a scaling sweep).
    """
    kw: dict[str, Any] = {"legend_label": legend} if legend else {}
    renderer = fig.line(x, y, source=src, color=color, line_width=width, line_dash=dash, **kw)
    if markers:
        fig.scatter(x, y, source=src, color=color, size=7, **kw)
    if legend:
        _legend_outside(fig)
    return renderer


def reference_line(fig, xs: Sequence[float], ys: Sequence[float], *, legend: str = "ideal"):
    """Draw a dashed grey reference line (ideal speedup, ideal efficiency, a model's curve).

    Returns ``(renderer, source)``; update the line later with ``source.data = {...}``.
    """
    src = source(["x", "y"], {"x": list(xs), "y": list(ys)})
    renderer = line(fig, src, "x", "y", color=IDEAL_COLOR, legend=legend, dash="dashed")
    return renderer, src


def gantt_data(tasks: Iterable[Mapping[str, Any]]) -> dict[str, list]:
    """Turn task dicts into the columns that :func:`gantt` draws.

    Each task has ``lane`` (a row: ``"rank 0"``, ``"stage 1"``), ``start`` and ``end`` (seconds,
    or time slots), ``kind`` (picks the colour, see :data:`KIND_COLORS`) and optionally
    ``label`` (text shown on hover). Assign the result to the source's ``data`` to redraw.
    """
    cols: dict[str, list] = {k: [] for k in
                             ("lane", "start", "end", "kind", "label", "color", "duration")}
    for t in tasks:
        kind = str(t.get("kind", "compute"))
        cols["lane"].append(str(t["lane"]))
        cols["start"].append(float(t["start"]))
        cols["end"].append(float(t["end"]))
        cols["kind"].append(kind)
        cols["label"].append(str(t.get("label", kind)))
        cols["color"].append(str(t.get("color") or kind_color(kind)))
        cols["duration"].append(float(t["end"]) - float(t["start"]))
    return cols


def gantt(
    tasks: Iterable[Mapping[str, Any]],
    title: str,
    *,
    y_label: str,
    lanes: Sequence[str] | None = None,
    x_label: str = "time (s)",
    width: int = 2 * WIDTH,
    height: int | None = None,
):
    """Return ``(figure, source)`` of a Gantt chart: one row per lane, one bar per task.

    Use it for what each rank or pipeline stage does over time (compute, allreduce, idle);
    ``y_label`` says what a lane is (``"rank"``, ``"pipeline stage"``). ``lanes`` fixes the
    order of the rows from top to bottom; by default the order in which lanes first appear.
    See :func:`gantt_data` for the task format.
    """
    data = gantt_data(tasks)
    if lanes is None:
        lanes = list(dict.fromkeys(data["lane"]))
    lanes = [str(lane) for lane in lanes]
    height = height or max(140, 60 + 32 * len(lanes))
    fig = figure(title, x_label, y_label, width=width, height=height, y_range=lanes[::-1],
                 tooltips=[("", "@label"), ("start", "@start{0.000}"),
                           ("duration", "@duration{0.000}")])
    src = ColumnDataSource(data)
    fig.hbar(y="lane", left="start", right="end", height=0.7, color="color",
             line_color="white", legend_field="kind", source=src)
    fig.ygrid.grid_line_color = None
    _legend_outside(fig)
    return fig, src


def room_for(categories: Sequence[str], width: int, beside: int = 0) -> int:
    """`width`, widened until each category's label fits under its bar side by side with
    the others: about 7 px a character of the axis's 11 px font, 12 px between two labels,
    and `beside` px of legend to the right of the plot."""
    label = max((len(c) for c in categories), default=0) * 7 + 12
    return max(width, 100 + beside + len(categories) * label)


def bar(
    categories: Sequence[str],
    values: Sequence[float],
    title: str,
    *,
    x_label: str,
    y_label: str,
    color: str = OVERALL_COLOR,
    width: int = WIDTH,
    height: int = HEIGHT,
):
    """Return ``(figure, source)`` of a vertical bar chart, one bar per category, wide
    enough for the categories' labels (:func:`room_for`)."""
    cats = [str(c) for c in categories]
    fig = figure(title, x_label, y_label, width=room_for(cats, width), height=height,
                 x_range=cats, tooltips=[("", "@category"), ("value", "@value{0.000}")])
    src = source(["category", "value"], {"category": cats, "value": list(values)})
    fig.vbar(x="category", top="value", width=0.7, color=color, source=src)
    fig.xgrid.grid_line_color = None
    fig.y_range.start = 0
    return fig, src


def stacked_bar(
    categories: Sequence[str],
    stacks: Mapping[str, Sequence[float]],
    title: str,
    *,
    x_label: str,
    y_label: str,
    colors: Mapping[str, str] | None = None,
    width: int = WIDTH,
    height: int = HEIGHT,
    name: str | None = None,
):
    """Return ``(figure, source)`` of stacked bars: one bar per category, one layer per stack,
    wide enough for the categories' labels and the legend (:func:`room_for`).

    Example: the share of each rank's step spent computing vs synchronizing gradients,
    ``stacked_bar(["rank 0", "rank 1"], {"compute": [0.8, 0.7], "sync": [0.2, 0.3]}, ...)``.
    Update with ``source.data = {"category": [...], "compute": [...], "sync": [...]}``; the
    categories on the axis are ``figure.x_range.factors``.
    """
    cats = [str(c) for c in categories]
    names = list(stacks)
    legend = 40 + 7 * max(len(n) for n in names)
    fig = figure(title, x_label, y_label, width=room_for(cats, width, legend), height=height,
                 x_range=cats,
                 tooltips=[("", "@category")] + [(n, f"@{n}{{0.00}}") for n in names])
    src = source(["category", *names], {"category": cats, **{n: list(stacks[n]) for n in names}},
                 name=name)
    fig.vbar_stack(names, x="category", width=0.7, source=src, legend_label=names,
                   color=kind_colors(names, colors))
    fig.xgrid.grid_line_color = None
    fig.y_range.start = 0
    _legend_outside(fig)
    return fig, src


def _widget_class():
    """``BokehModel`` whose ``close()`` may be called twice (by a panel, then by ``__del__``);
    jupyter_bokeh's own raises KeyError the second time."""
    from ipywidgets import DOMWidget
    from jupyter_bokeh.widgets import BokehModel

    class ChartWidget(BokehModel):
        def close(self) -> None:
            doc = self._document
            DOMWidget.close(self)
            if doc is not None:
                try:
                    doc.remove_on_change(self)
                except KeyError:
                    pass  # already detached by an earlier close()

    return ChartWidget


_WIDGET_CLASS = None


def to_widget(model: LayoutDOM):
    """Wrap a Bokeh figure or layout as an ipywidget (a ``jupyter_bokeh`` ``BokehModel``).

    The widget can be put in ``VBox``/``HBox``/``Tab`` layouts; later changes to its sources are
    sent to the page over the widget channel. Loads BokehJS first (see :func:`load_bokehjs`).
    A Bokeh model belongs to one document, so wrap each figure (or one layout holding several
    figures that share a source) once.
    """
    global _WIDGET_CLASS
    if _WIDGET_CLASS is None:
        _WIDGET_CLASS = _widget_class()
    load_bokehjs()
    return _WIDGET_CLASS(model)


def grid(figures: Sequence[Any], ncols: int = 2):
    """Lay several figures out in a grid with one shared toolbar; returns a Bokeh layout."""
    from bokeh.layouts import gridplot

    return gridplot(list(figures), ncols=ncols, toolbar_location="right", merge_tools=True)
