"""Notebook 08's picture of Megatron-LM's MLP split over n ranks (Shoeybi et al. 2019,
Figure 3a): f before the column-split A, g after the row-split B, and which of the two
all-reduces, forward or backward.

    from workbench.ui.megatron_picture import MegatronPicture
    MegatronPicture(hidden=4096, tokens=2048)

The shapes are those `tensor_parallel/megatron.py`'s `ParallelMLP` gives each rank, the
payload of each all-reduce `tensor_parallel/traffic.py`'s (tokens × h values).
"""

from __future__ import annotations

import ipywidgets as widgets
from bokeh.models import Arrow, LabelSet, VeeHead

from workbench.tensor_parallel import traffic
from workbench.ui import charts

EXPANSION = 4
DRAWN = 4                  # rank rows drawn at most; more are elided
COMPUTE = "#c6dbef"        # what each rank computes alone
#: What each operator does in each direction (Shoeybi et al. 2019, §3).
OPERATORS = {"f": {"forward": "identity", "backward": "all-reduce"},
             "g": {"forward": "all-reduce", "backward": "identity"}}


class MegatronPicture(widgets.VBox):
    """The block, rank by rank, with a toggle for the pass and a slider for the ranks."""

    def __init__(self, hidden: int = 4096, tokens: int = 2048, bytes_per_value: int = 2,
                 ranks: int = 2) -> None:
        self.hidden, self.tokens, self.bytes_per_value = hidden, tokens, bytes_per_value
        self.ranks = widgets.SelectionSlider(options=[2, 4, 8], value=ranks,
                                             description="tensor-parallel ranks n",
                                             style={"description_width": "initial"})
        self.direction = widgets.ToggleButtons(options=["forward", "backward"])
        self.fig = charts.figure("", width=820, height=330, x_range=(-0.2, 10.2),
                                 y_range=(-0.4, 4.6), tools="save")
        self.fig.axis.visible = False
        self.fig.grid.visible = False
        self.boxes = charts.source(["x", "y", "w", "h", "color", "text", "detail", "name",
                                    "ty", "dy"])
        self.links = charts.source(["x0", "y0", "x1", "y1"])
        self.fig.rect("x", "y", "w", "h", source=self.boxes, fill_color="color",
                      line_color="#444444")
        for text, y, style, size in (("text", "ty", "bold", "9pt"),
                                     ("detail", "dy", "normal", "8pt")):
            self.fig.add_layout(LabelSet(x="x", y=y, text=text, source=self.boxes,
                                         text_align="center", text_baseline="middle",
                                         text_font_size=size, text_font_style=style))
        self.fig.add_layout(Arrow(end=VeeHead(size=7), x_start="x0", y_start="y0",
                                  x_end="x1", y_end="y1", source=self.links, line_width=1.5))
        self.caption = widgets.HTML()
        for control in (self.ranks, self.direction):
            control.observe(lambda _: self.draw(), "value")
        self.draw()
        super().__init__([widgets.HBox([self.direction, self.ranks]),
                          charts.to_widget(self.fig), self.caption])

    def shapes(self) -> dict[str, tuple[int, int]]:
        """Rank i's slices: A_i, h × 4h/n (columns of A), and B_i, 4h/n × h (rows of B)."""
        part = EXPANSION * self.hidden // self.ranks.value
        return {"A_i": (self.hidden, part), "B_i": (part, self.hidden)}

    def payload(self) -> int:
        """Bytes of each all-reduce: one tokens × h activation (or its gradient)."""
        return traffic.activation_bytes(self.tokens, self.hidden, self.bytes_per_value)

    def draw(self) -> None:
        """Lay the block out for the chosen ranks and mark the pass's all-reduce."""
        n, way = self.ranks.value, self.direction.value
        shapes = self.shapes()
        rows = list(range(n)) if n <= DRAWN else [0, 1, None, n - 1]
        ys = [3.9 - 3.8 * j / (len(rows) - 1) for j in range(len(rows))]
        mid = sum(ys) / len(ys)
        cols: dict[str, list] = {k: [] for k in self.boxes.data}

        def box(x, y, w, h, color, text, detail, name):
            for key, value in zip(cols, (x, y, w, h, color, text, detail, name, y + 0.14,
                                         y - 0.16), strict=True):
                cols[key].append(value)

        size = f"{self.tokens} × {self.hidden}"
        box(0.65, mid, 1.25, 0.9, "#f2f2f2", "X", size, "X")
        box(9.45, mid, 1.25, 0.9, "#f2f2f2", "Z", size, "Z")
        for name, x in (("f", 1.9), ("g", 8.0)):
            job = OPERATORS[name][way]
            box(x, mid, 0.9, 4.2, charts.kind_color("allreduce") if job == "all-reduce"
                else "#e8e8e8", name, job, name)
        links = [(1.275, mid, 1.45, mid), (8.45, mid, 8.825, mid)]
        for rank, y in zip(rows, ys, strict=True):
            if rank is None:
                box(5.2, y, 0.4, 0.4, "white", "…", "", "more ranks")
                continue
            a, b = shapes["A_i"], shapes["B_i"]
            box(3.75, y, 2.5, 0.75, COMPUTE, f"Y{rank} = GeLU(X·A{rank})",
                f"rank {rank} holds A{rank}: {a[0]} × {a[1]}", f"rank {rank} A")
            box(6.25, y, 1.6, 0.75, COMPUTE, f"Y{rank}·B{rank}", f"B{rank}: {b[0]} × {b[1]}",
                f"rank {rank} B")
            links += [(2.35, y, 2.5, y), (5.0, y, 5.45, y), (7.05, y, 7.55, y)]
        self.boxes.data = cols
        self.links.data = {k: [link[i] for link in links]
                           for i, k in enumerate(("x0", "y0", "x1", "y1"))}
        self.fig.title.text = (f"Megatron's MLP on n = {n} ranks, {way} pass: "
                               + ("g" if way == "forward" else "f") + " all-reduces")
        self.caption.value = self.describe()

    def describe(self) -> str:
        """What the marked all-reduce sums, and its bytes."""
        n, mb = self.ranks.value, self.payload() / 1e6
        what = ("g sums the ranks' partial outputs, Z = Σ Y<sub>i</sub>B<sub>i</sub>; f "
                "passes X on unchanged" if self.direction.value == "forward" else
                "f sums the ranks' parts of the gradient of X; g passes the gradient of Z "
                "on unchanged, since every rank needs all of it")
        return (f"{what}. Payload: {self.tokens} × {self.hidden} values of "
                f"{self.bytes_per_value} bytes = {mb:.3g} MB; on a ring each rank sends "
                f"2(n−1)/n of it, {2 * (n - 1) / n * mb:.3g} MB.")
