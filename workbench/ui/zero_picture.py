"""Notebook 07's ZeRO memory bars (Rajbhandari et al. 2020, Figure 1), with sliders for the
parameters Ψ, the devices N and the stage.

    from workbench.ui.zero_picture import ZeroPicture
    ZeroPicture(psi=7.5e9, devices=64, device_gb=80)

One stacked bar per stage, what one device holds after a step: parameters, gradients,
optimizer state and activations, in GB. A black dash marks each stage's peak during the
backward pass, where DDP, ZeRO-1 and ZeRO-2 hold every gradient whole; the red line is
the device's memory. Every number is the planner's, `sharded/costmodel.py`.
"""

from __future__ import annotations

import ipywidgets as widgets
from bokeh.models import Span

from workbench.sharded import costmodel
from workbench.ui import charts

NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}
PARTS = {"parameters": "#1f77b4", "gradients": "#ff7f0e", "optimizer state": "#2ca02c",
         "activations": "#bbbbbb"}
DEVICES = [2 ** k for k in range(11)]


class ZeroPicture(widgets.VBox):
    """The bars of the four strategies for the sliders' Ψ and N; the stage picked is drawn
    solid, the others faint, and its plan written below."""

    def __init__(self, psi: float = 7.5e9, devices: int = 64, device_gb: float = 80.0,
                 k: float = 12, activations: float = 0.0, value_bytes: int = 2) -> None:
        self.k, self.activations, self.value_bytes = k, activations, value_bytes
        self.device_gb = device_gb
        self.psi = widgets.FloatLogSlider(value=psi / 1e9, base=10, min=-1, max=3, step=0.001,
                                          description="Ψ (billions)", readout_format=".3g",
                                          style={"description_width": "initial"})
        self.devices = widgets.SelectionSlider(options=DEVICES, value=devices,
                                               description="devices N",
                                               style={"description_width": "initial"})
        self.stage = widgets.IntSlider(value=1, min=0, max=3, description="ZeRO stage",
                                       style={"description_width": "initial"})
        cats = list(NAMES.values())
        self.fig = charts.figure("", "what each device keeps", "GB per device", width=660,
                                 height=320, x_range=cats,
                                 tooltips=[("", "@category"), ("after the step", "@total{0.0}"),
                                           ("peak in backward", "@peak{0.0}")])
        self.fig.xgrid.grid_line_color = None
        self.bars = charts.source(["category", *PARTS, "total", "peak", "alpha"])
        self.fig.vbar_stack(list(PARTS), x="category", width=0.7, source=self.bars,
                            color=list(PARTS.values()), fill_alpha="alpha", line_alpha="alpha",
                            legend_label=list(PARTS))
        self.fig.scatter("category", "peak", source=self.bars, marker="dash", size=40,
                         line_width=3, color="black", legend_label="peak in backward")
        self.fig.add_layout(Span(location=device_gb, dimension="width", line_color="#d62728",
                                 line_dash="dashed", line_width=2))
        charts._legend_outside(self.fig)
        self.fig.y_range.start = 0
        self.plan = widgets.HTML()
        for slider in (self.psi, self.devices, self.stage):
            slider.observe(lambda _: self.draw(), "value")
        self.draw()
        super().__init__([widgets.HBox([self.psi, self.devices, self.stage]),
                          charts.to_widget(self.fig), self.plan])

    def draw(self) -> None:
        """The four bars for the sliders' Ψ and N, and the picked stage's plan."""
        psi, n = self.psi.value * 1e9, self.devices.value
        after = [costmodel.model_states(psi, n, s, self.k, self.value_bytes) for s in NAMES]
        peaks = [costmodel.backward_peak(psi, n, s, self.k, self.value_bytes) for s in NAMES]
        self.bars.data = {
            "category": list(NAMES.values()),
            "parameters": [m.params / 1e9 for m in after],
            "gradients": [m.grads / 1e9 for m in after],
            "optimizer state": [m.optimizer / 1e9 for m in after],
            "activations": [self.activations / 1e9] * len(after),
            "total": [(m.total + self.activations) / 1e9 for m in after],
            "peak": [(m.total + self.activations) / 1e9 for m in peaks],
            "alpha": [1.0 if i == self.stage.value else 0.3 for i in range(len(after))]}
        self.fig.y_range.end = 1.1 * max(self.device_gb, *self.bars.data["peak"])
        strategy = list(NAMES)[self.stage.value]
        plan = costmodel.plan(psi, n, self.device_gb, strategy, self.k, self.activations,
                              self.value_bytes)
        peak = self.bars.data["peak"][self.stage.value]
        self.fig.title.text = f"Ψ = {psi / 1e9:.3g} billion parameters on N = {n} devices"
        self.plan.value = (f"{plan}. At the peak of the backward pass: "
                           f"{peak:.3g} GB.")
