"""Notebook 04's ring all-reduce, step by step: a Play button and a slider move the chunks
round the ring, reduce-scatter then all-gather, with the bytes each step moves.

    from workbench.ui.ring_picture import RingPicture
    RingPicture(workers=4, megabytes=100)

What it draws is a trace of the real function, `ring_allreduce`, run on threads
(`synchronization/ring_allreduce.py`, `ring_trace`): which chunk each worker sends in each
step, and whose contributions each chunk of each worker has summed so far.
"""

from __future__ import annotations

import math

import ipywidgets as widgets
from bokeh.models import Arrow, LabelSet, NormalHead

from workbench.synchronization.ring_allreduce import ring_trace
from workbench.ui import charts

RADIUS, CHUNK = 1.7, 0.34       # the ring, and the side of one chunk's square


class RingPicture(widgets.VBox):
    """Workers on a ring, each with its p chunks; a chunk's shade is how many workers'
    contributions it has summed, outlined once it holds all of them."""

    def __init__(self, workers: int = 4, megabytes: float = 100.0) -> None:
        self.megabytes = megabytes
        self.workers = widgets.IntSlider(value=workers, min=2, max=8, description="workers p",
                                         style={"description_width": "initial"})
        self.play = widgets.Play(min=0, interval=1500, description="play the steps")
        self.step = widgets.IntSlider(min=0, description="step",
                                      style={"description_width": "initial"})
        widgets.jslink((self.play, "value"), (self.step, "value"))
        self.caption = widgets.HTML()
        self.fig = charts.figure("", width=640, height=480, x_range=(-4.6, 4.6),
                                 y_range=(-3.45, 3.45), tools="save")
        self.fig.axis.visible = False
        self.fig.grid.visible = False
        self.nodes = charts.source(["x", "y", "name", "color"])
        self.chunks = charts.source(["x", "y", "color", "alpha", "line", "count"])
        self.arrows = charts.source(["x0", "y0", "x1", "y1", "lx", "ly", "label", "color"])
        self.fig.scatter("x", "y", source=self.nodes, size=34, color="color")
        self.fig.add_layout(LabelSet(x="x", y="y", text="name", source=self.nodes,
                                     text_align="center", text_baseline="middle",
                                     text_color="white", text_font_size="10pt"))
        self.fig.rect("x", "y", CHUNK, CHUNK, source=self.chunks, fill_color="color",
                      fill_alpha="alpha", line_color="line", line_width=2)
        self.fig.add_layout(LabelSet(x="x", y="y", text="count", source=self.chunks,
                                     text_align="center", text_baseline="middle",
                                     text_font_size="8pt"))
        self.fig.add_layout(Arrow(end=NormalHead(size=9), x_start="x0", y_start="y0",
                                  x_end="x1", y_end="y1", source=self.arrows, line_width=2))
        self.fig.add_layout(LabelSet(x="lx", y="ly", text="label", source=self.arrows,
                                     text_color="color", text_align="center",
                                     text_font_size="10pt", text_font_style="bold"))
        self.workers.observe(lambda _: self.retrace(), "value")
        self.step.observe(lambda _: self.show(self.step.value), "value")
        self.retrace()
        super().__init__([widgets.HBox([self.workers, self.play, self.step]),
                          charts.to_widget(self.fig), self.caption])

    @property
    def numel(self) -> int:
        """float32 values in the vector all-reduced."""
        return int(self.megabytes * 1e6 // 4)

    def retrace(self) -> None:
        """Trace the ring for the chosen number of workers and show its start."""
        p = self.workers.value
        self.frames = ring_trace(p, self.numel)
        self.angles = [math.pi / 2 - 2 * math.pi * r / p for r in range(p)]
        self.nodes.data = {"x": [self.node_xy(r)[0] for r in range(p)],
                           "y": [self.node_xy(r)[1] for r in range(p)],
                           "name": [f"w{r}" for r in range(p)],
                           "color": [charts.OVERALL_COLOR] * p}
        self.play.max = self.step.max = len(self.frames) - 1
        self.step.value = 0
        self.show(0)

    def node_xy(self, worker: int, scale: float = 1.0) -> tuple[float, float]:
        """Where worker `worker` sits on the ring (`scale` < 1: nearer the centre)."""
        a = self.angles[worker]
        return (scale * RADIUS * math.cos(a), scale * RADIUS * math.sin(a))

    def chunk_xy(self, worker: int, chunk: int) -> tuple[float, float]:
        """Where chunk `chunk` of worker `worker` is drawn: just outside its node, in one
        row, or in two for more than four chunks."""
        p, a = len(self.angles), self.angles[worker]
        across = math.ceil(p / 2) if p > 4 else p
        row, column = divmod(chunk, across)
        rows = math.ceil(p / across)
        half_x, half_y = across * CHUNK * 0.55, rows * CHUNK * 0.55
        out = RADIUS + 0.45
        x = math.cos(a) * (out + half_x * abs(math.cos(a)))
        y = math.sin(a) * (out + half_y * abs(math.sin(a)))
        return (x + (column - (across - 1) / 2) * CHUNK * 1.1,
                y - (row - (rows - 1) / 2) * CHUNK * 1.1)

    def show(self, k: int) -> None:
        """Draw frame `k`: every worker's chunks, and the chunks on their way this step."""
        frame, p = self.frames[k], len(self.angles)
        cells = [(r, c, frame["holds"][r][c]) for r in range(p) for c in range(p)]
        xy = [self.chunk_xy(r, c) for r, c, _ in cells]
        self.chunks.data = {"x": [x for x, _ in xy], "y": [y for _, y in xy],
                            "color": [charts.rank_color(c) for _, c, _ in cells],
                            "alpha": [0.15 + 0.85 * len(h) / p for _, _, h in cells],
                            "line": ["black" if len(h) == p else "white" for _, _, h in cells],
                            "count": [f"{len(h)}/{p}" for _, _, h in cells]}
        arrows: dict[str, list] = {key: [] for key in self.arrows.data}
        for src, dst, chunk, _ in frame["sends"]:
            (x0, y0), (x1, y1) = (self.node_xy(src, 0.8), self.node_xy(dst, 0.8))
            length = math.hypot(x1 - x0, y1 - y0)
            nx, ny = (y1 - y0) / length, (x0 - x1) / length   # to the right: the ring's inside
            for key, value in zip(("x0", "y0", "x1", "y1"),
                                  (x0 + 0.1 * nx, y0 + 0.1 * ny, x1 + 0.1 * nx, y1 + 0.1 * ny),
                                  strict=True):
                arrows[key].append(value)
            away = 0.7 if p == 2 else 0.35
            arrows["lx"].append((x0 + x1) / 2 + away * nx)
            arrows["ly"].append((y0 + y1) / 2 + away * ny - 0.08)
            arrows["label"].append(f"c{chunk}")
            arrows["color"].append(charts.rank_color(chunk))
        self.arrows.data = arrows
        self.fig.title.text = (f"Ring all-reduce, p = {p}: step {k} of {len(self.frames) - 1}"
                               + (f" ({frame['phase']})" if k else ""))
        self.caption.value = self.describe(k)

    def sent_so_far(self, k: int) -> int:
        """Bytes worker 0 has sent after step `k`."""
        return sum(frame["sends"][0][3] for frame in self.frames[1:k + 1])

    def describe(self, k: int) -> str:
        """What step `k` does, and the bytes it moves, as one line of HTML."""
        p, frame = len(self.angles), self.frames[k]
        total = 2 * (p - 1) / p * self.megabytes
        if k == 0:
            what = (f"Each worker holds its own {self.megabytes:g} MB vector, cut into {p} "
                    "chunks; the numbers count the workers summed into each chunk.")
        else:
            moved = max(send[3] for send in frame["sends"]) / 1e6
            what = (f"Each worker sends one chunk of {moved:.3g} MB to its right neighbour, "
                    + ("which adds it to its own copy." if frame["phase"] == "reduce-scatter"
                       else "which replaces its copy with it."))
        return (f"{what} Sent per worker so far: {self.sent_so_far(k) / 1e6:.4g} MB of "
                f"2(p−1)/p · n = {total:.4g} MB.")
