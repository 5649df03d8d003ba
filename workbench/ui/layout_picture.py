"""Notebook 05's picture of what each device holds under data, tensor, pipeline and sharded
data parallelism, with a slider for the number of devices.

    from workbench.ui.layout_picture import LayoutPicture
    LayoutPicture(devices=4)

Each panel is one strategy: a column per device, a box per layer (filled: the part of its
weights the device keeps; dashed: gathered whole for a pass, then freed), and under them
the samples of the batch the device computes on. What it draws, and the bytes in each
title, come from `model_parallel/layouts.py`.
"""

from __future__ import annotations

import ipywidgets as widgets
from bokeh.layouts import gridplot

from workbench.model_parallel import layouts
from workbench.ui import charts

LAYERS, WIDTH, BATCH = 4, 512, 12     # the MLP drawn, and a batch drawn (12: N = 2 to 4)
TITLES = {"data": "data", "tensor": "tensor (Megatron)", "pipeline": "pipeline",
          "sharded": "sharded (ZeRO-3)"}
GAP = 0.08                            # between boxes, in device widths


class LayoutPicture(widgets.VBox):
    """Four panels, one per strategy, redrawn when the number of devices changes."""

    def __init__(self, devices: int = 4, batch_for_bytes: int = 64) -> None:
        self.batch_for_bytes = batch_for_bytes
        self.devices = widgets.IntSlider(value=devices, min=2, max=LAYERS,
                                         description="devices N",
                                         style={"description_width": "initial"})
        self.figures, self.sources = {}, {}
        for strategy in layouts.STRATEGIES:
            fig = charts.figure("", "device", "what it holds", width=460, height=250,
                                tools="save",
                                x_range=(-0.05, LAYERS + 0.05), y_range=(-1.5, LAYERS + 0.1),
                                tooltips=[("", "@what")])
            fig.xgrid.visible = fig.ygrid.visible = False
            fig.yaxis.ticker = [-0.9] + [LAYERS - 0.5 - k for k in range(LAYERS)]
            fig.yaxis.major_label_overrides = {
                -0.9: "batch", **{LAYERS - 0.5 - k: f"layer {k + 1}" for k in range(LAYERS)}}
            src = charts.source(["x", "y", "w", "h", "color", "alpha", "line", "dash", "what"])
            fig.rect("x", "y", "w", "h", source=src, fill_color="color", fill_alpha="alpha",
                     line_color="line", line_dash="dash")
            self.figures[strategy], self.sources[strategy] = fig, src
        self.note = widgets.HTML()
        self.devices.observe(lambda _: self.draw(), "value")
        self.draw()
        self.grid = gridplot([self.figures[s] for s in layouts.STRATEGIES], ncols=2,
                             toolbar_location=None)
        super().__init__([self.devices, charts.to_widget(self.grid), self.note])

    def draw(self) -> None:
        """Redraw every panel for the slider's number of devices."""
        n = self.devices.value
        for strategy, src in self.sources.items():
            src.data = self.boxes(strategy, n)
            sent = layouts.sent_per_step(strategy, n, WIDTH, LAYERS, self.batch_for_bytes)
            self.figures[strategy].title.text = (f"{TITLES[strategy]}: {sent / 1e6:.3g} MB "
                                                 "sent a step")
            self.figures[strategy].x_range.end = n + 0.05
            self.figures[strategy].xaxis.ticker = [d + 0.5 for d in range(n)]
            self.figures[strategy].xaxis.major_label_overrides = {
                d + 0.5: str(d) for d in range(n)}
        self.note.value = (
            f"Filled: the weights a device keeps between steps (dashed: gathered whole for "
            f"one pass, then freed). Bottom row: the part of each batch it computes on (the "
            f"batch cut in N, coloured by part). Bytes sent by the busiest device per step, "
            f"float32: an MLP of {LAYERS} layers {WIDTH} wide, batch {self.batch_for_bytes}.")

    @staticmethod
    def boxes(strategy: str, n: int) -> dict[str, list]:
        """The rectangles of one panel: each layer's outline, the part kept, the samples."""
        cols: dict[str, list] = {k: [] for k in ("x", "y", "w", "h", "color", "alpha", "line",
                                                   "dash", "what")}

        def box(x, y, w, h, color, alpha, line, dash, what):
            for key, value in zip(cols, (x, y, w, h, color, alpha, line, dash, what),
                                  strict=True):
                cols[key].append(value)

        inner = 1 - 2 * GAP
        for row in layouts.holdings(strategy, n, LAYERS):
            d, k, share = row["device"], row["layer"], row["share"]
            left, bottom = d + GAP, LAYERS - 1 - k + GAP
            color = charts.rank_color(d)
            gathered = strategy == "sharded"
            box(left + inner / 2, bottom + inner / 2, inner, inner, "white", 0.0,
                "#555555" if gathered else "#cccccc", "dashed" if gathered else "solid",
                f"layer {k + 1}" + (": gathered whole for its pass" if gathered else ""))
            if share == 0:
                continue
            x, y, w, h = left + inner / 2, bottom + inner / 2, inner, inner
            if row["part"] == "columns":                  # the d-th vertical strip
                x, w = left + inner * (d + 0.5) * share, inner * share
            elif row["part"] in ("rows", "1/N slice"):    # the d-th horizontal strip
                y, h = bottom + inner * (1 - (d + 0.5) * share), inner * share
            box(x, y, w, h, color, 0.85, color, "solid",
                f"device {d} keeps {row['part']} of layer {k + 1}")
        seen = layouts.samples_seen(strategy, n, BATCH)
        shards = layouts.samples_seen("data", n, BATCH)     # the batch cut in N, for reading
        for d, samples in enumerate(seen):
            for j, shard in enumerate(shards):
                mine = set(shard) <= set(samples)
                box(d + GAP + inner * (j + 0.5) / n, -0.9, inner / n * 0.9, 0.5,
                    charts.rank_color(j), 0.85 if mine else 0.08, "white", "solid",
                    f"device {d} computes on {len(samples)} of the batch's {BATCH} samples")
        return cols
