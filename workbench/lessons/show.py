"""Show lesson results: a table of rows, a chart of several curves, excerpts of the
workbench's source, and waiting for a panel.

Every chart is built with the one chart helper, :mod:`workbench.ui.charts`, so the curves of
the notebooks look like those of the panels. :func:`until_finished` waits for a panel's job
the way a student would, by letting the kernel's event loop run: the panel keeps refreshing
its live charts while the cell waits.
"""

from __future__ import annotations

import asyncio
import html
import importlib.util
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workbench.ui import charts

#: A column: the key in each row, the header shown, and how to format the value
#: (a format spec such as ".3f", or a function returning the text).
Column = tuple[str, str, str | Callable[[Any], str]]


def _cell(value: Any, fmt: str | Callable[[Any], str]) -> str:
    if value is None:
        return "–"
    if callable(fmt):
        return html.escape(fmt(value))
    try:
        return html.escape(format(value, fmt))
    except (TypeError, ValueError):
        return html.escape(str(value))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column] | None = None,
          caption: str = ""):
    """An HTML table of ``rows`` (dicts), one line per row; display it as a cell's last value.

    ``columns`` lists ``(key, header, format)``; by default every key of the first row, with
    numbers shown to 4 significant digits.
    """
    from IPython.display import HTML

    if columns is None:
        columns = [(k, k, ".4g") for k in (rows[0] if rows else {})]
    head = "".join(f"<th style='text-align:right'>{html.escape(h)}</th>" for _, h, _ in columns)
    body = "".join(
        "<tr>" + "".join(f"<td style='text-align:right'>{_cell(r.get(k), f)}</td>"
                         for k, _, f in columns) + "</tr>"
        for r in rows)
    cap = f"<caption style='caption-side:top'>{html.escape(caption)}</caption>" if caption else ""
    return HTML(f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def curves(title: str, x_label: str, y_label: str,
           series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
           log_x: bool = False, log_y: bool = False, dashed: Sequence[str] = (),
           markers: bool = False, width: int = 2 * charts.WIDTH, height: int = charts.HEIGHT,
           reference: tuple[Sequence[float], Sequence[float], str] | None = None):
    """A chart widget with one line per entry of ``series`` (``label -> (xs, ys)``).

    ``dashed`` names the series drawn dashed (useful when two curves should lie on top of
    each other); ``reference`` adds a grey dashed line ``(xs, ys, label)`` such as an ideal.
    """
    kwargs: dict[str, Any] = {}
    if log_x:
        kwargs["x_axis_type"] = "log"
    if log_y:
        kwargs["y_axis_type"] = "log"
    fig = charts.figure(title, x_label, y_label, width=width, height=height,
                        tooltips=[("", "$name"), ("x", "$x{0.[000]}"), ("y", "$y{0.[0000]}")],
                        **kwargs)
    for i, (label, (xs, ys)) in enumerate(series.items()):
        src = charts.source(["x", "y"], {"x": list(xs), "y": list(ys)})
        renderer = charts.line(fig, src, "x", "y", color=charts.rank_color(i), legend=label,
                               dash="dashed" if label in dashed else "solid", markers=markers)
        renderer.name = label
    if reference is not None:
        xs, ys, label = reference
        charts.reference_line(fig, xs, ys, legend=label)
    return charts.to_widget(fig)


def module_source(module: str, start: str = "", end: str | None = None) -> str:
    """The source text of ``module``, from the first line that starts with ``start`` on,
    up to (not including) the next line after it that starts with ``end`` (None: the end
    of the file).

    The file is read, not imported: showing ``workbench.training.horovod_rank`` must not load
    Horovod into the notebook's kernel (only the ranks need it).
    """
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module named {module!r}")
    with open(spec.origin, encoding="utf-8") as f:
        lines = f.read().splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(start)), 0)
    last = next((i for i in range(first + 1, len(lines))
                 if end is not None and lines[i].startswith(end)), len(lines))
    return "\n".join(lines[first:last]).rstrip()


def source(module: str, *spans: tuple[str, str | None]):
    """Excerpts of ``module``'s source as a highlighted code block, the cell's value: each
    span ``(start, end)`` read as :func:`module_source` reads it, two spans apart by a
    ``...`` line. Show the lines that teach, not a file: a lesson that prints a hundred lines
    of the workbench's machinery hides the ten that matter."""
    from IPython.display import Code

    gap = "\n\n    ...\n\n"
    return Code(gap.join(module_source(module, start, end) for start, end in spans),
                language="python")


def figure_widget(fig):
    """Wrap a Bokeh figure made elsewhere (a Gantt chart, a bar chart) as a widget."""
    return charts.to_widget(fig)


async def until_finished(panel: Any, timeout_s: float = 500.0, poll_s: float = 0.25) -> None:
    """Wait, without blocking the kernel, until ``panel`` (a training or scaling panel) has
    finished its job or sweep; use it as ``await until_finished(panel)`` in a cell.

    While this waits, the event loop runs: the panel's own polling task keeps its charts live.
    We also call ``panel.refresh()`` ourselves (refreshing twice is harmless), so this works
    where no polling task was started, e.g. in a script run with ``asyncio.run``.
    Raises TimeoutError after ``timeout_s`` seconds, after stopping what is still running.
    """
    deadline = time.monotonic() + timeout_s
    while panel.running():
        if time.monotonic() > deadline:
            panel.stop_button.click()
            raise TimeoutError(f"the panel's job did not finish within {timeout_s:.0f} s and "
                               "was stopped; look at the panel's logs, or raise timeout_s")
        panel.refresh()
        await asyncio.sleep(poll_s)
    panel.refresh()
