"""Notebook 02's picture of Horovod's negotiation cycle: gradients becoming ready on each
rank, the coordinator agreeing on those ready everywhere, and their fused all-reduce.

    from workbench.ui.negotiation_picture import NegotiationPicture
    NegotiationPicture()

A Play button and a slider step through the cycles; sliders set the cycle time, the
fusion threshold and how much slower rank 1's backward pass is. Every time drawn is
`synchronization/negotiation.py`'s `negotiate`.
"""

from __future__ import annotations

import ipywidgets as widgets
from bokeh.models import BoxAnnotation, LabelSet

from workbench.synchronization.negotiation import negotiate
from workbench.ui import charts

#: The gradients of an MLP 64 → 256 → 256 → 10 in float32, in the order backward makes them.
MLP_GRADIENTS = [("out.bias", 40), ("out.weight", 10_240), ("hidden2.bias", 1_024),
                 ("hidden2.weight", 262_144), ("hidden1.bias", 1_024),
                 ("hidden1.weight", 65_536)]
LANES = ["rank 0", "rank 1", "coordinator (rank 0)", "all-reduce"]
ALPHA_S = 50e-6     # per message: 10 Gbit/s Ethernet between hosts


class NegotiationPicture(widgets.VBox):
    """Two ranks' backward passes against Horovod's cycles, one cycle at a time."""

    def __init__(self, gradients: list[tuple[str, int]] = MLP_GRADIENTS,
                 backward_ms: float = 4.0) -> None:
        self.names = [name for name, _ in gradients]
        self.sizes = [size for _, size in gradients]
        self.backward_ms = backward_ms
        style = {"description_width": "initial"}
        self.cycle_ms = widgets.FloatSlider(value=1.0, min=0.25, max=4.0, step=0.25,
                                            description="cycle time (ms)", style=style)
        self.fusion_kb = widgets.SelectionSlider(
            options=[4, 16, 64, 256, 1024, 131072], value=131072,
            description="fusion threshold (KiB)", style=style)
        self.slower = widgets.IntSlider(value=50, min=0, max=200, step=10,
                                        description="rank 1 slower by (%)", style=style)
        self.play = widgets.Play(min=0, interval=1500, description="play the cycles")
        self.cycle = widgets.IntSlider(min=0, description="cycle", style=style)
        widgets.jslink((self.play, "value"), (self.cycle, "value"))
        self.fig = charts.figure("", "time since backward() began (ms)", "who", width=820,
                                 height=280, y_range=list(reversed(LANES)), tools="save",
                                 tooltips=[("", "@what")])
        self.marks = charts.source(["x", "lane", "color", "what"])
        self.bars = charts.source(["left", "right", "lane", "color", "what", "text"])
        self.fig.hbar(y="lane", left="left", right="right", height=0.6, color="color",
                      source=self.bars, line_color="white")
        self.fig.add_layout(LabelSet(x="left", y="lane", text="text", source=self.bars,
                                     text_font_size="8pt", x_offset=3, text_baseline="middle"))
        self.fig.scatter("x", "lane", source=self.marks, color="color", size=11,
                         marker="triangle")
        self.now = BoxAnnotation(fill_color="#ffd54f", fill_alpha=0.25)
        self.fig.add_layout(self.now)
        self.caption = widgets.HTML()
        for control in (self.cycle_ms, self.fusion_kb, self.slower):
            control.observe(lambda _: self.replay(), "value")
        self.cycle.observe(lambda _: self.show(self.cycle.value), "value")
        self.replay()
        super().__init__([widgets.HBox([self.cycle_ms, self.fusion_kb, self.slower]),
                          widgets.HBox([self.play, self.cycle]),
                          charts.to_widget(self.fig), self.caption])

    def ready_ms(self) -> list[list[float]]:
        """When each gradient is ready on each rank: a layer's (the name before its dot) at
        the end of that layer's share of backward(), the layers taking equal time; rank 1's
        times stretched by the slider's share."""
        layers = list(dict.fromkeys(name.split(".")[0] for name in self.names))
        times = [self.backward_ms * (layers.index(name.split(".")[0]) + 1) / len(layers)
                 for name in self.names]
        return [times, [t * (1 + self.slower.value / 100) for t in times]]

    def replay(self) -> None:
        """Negotiate the whole backward pass again for the sliders' settings."""
        self.ready = self.ready_ms()
        self.cycles = negotiate(self.ready, self.sizes, self.cycle_ms.value,
                                self.fusion_kb.value * 1024, alpha_s=ALPHA_S)
        self.play.max = self.cycle.max = len(self.cycles) - 1
        self.fig.x_range.start = 0
        self.fig.x_range.end = self.cycles[-1]["end_ms"] * 1.05
        self.cycle.value = 0
        self.show(0)

    def show(self, k: int) -> None:
        """Draw everything up to cycle `k`, and say what cycle `k` does."""
        marks: dict[str, list] = {key: [] for key in self.marks.data}
        bars: dict[str, list] = {key: [] for key in self.bars.data}
        layers = list(dict.fromkeys(name.split(".")[0] for name in self.names))
        for rank, times in enumerate(self.ready):
            for t, when in enumerate(times):
                color = charts.rank_color(layers.index(self.names[t].split(".")[0]))
                for key, value in zip(marks, (when, f"rank {rank}", color,
                                              f"{self.names[t]} ready on rank {rank}"),
                                      strict=True):
                    marks[key].append(value)
        for j, cycle in enumerate(self.cycles[:k + 1]):
            for key, value in zip(marks, (cycle["start_ms"], LANES[2], "#444444",
                                          f"cycle {j}"), strict=True):
                marks[key].append(value)
            for buffer in cycle["buffers"]:
                names = " + ".join(self.names[t] for t in buffer["tensors"])
                for key, value in zip(bars, (buffer["start_ms"], buffer["end_ms"], LANES[3],
                                             charts.kind_color("allreduce"),
                                             f"{names}: {buffer['bytes'] / 1e3:.3g} kB",
                                             "+".join(str(t) for t in buffer["tensors"])),
                                      strict=True):
                    bars[key].append(value)
        self.marks.data, self.bars.data = marks, bars
        cycle = self.cycles[k]
        self.now.left, self.now.right = cycle["start_ms"], max(cycle["end_ms"],
                                                               cycle["start_ms"] + 0.05)
        self.fig.title.text = (f"Horovod's cycles: {len(self.cycles)} until every gradient "
                               f"is all-reduced; cycle {k} at {cycle['start_ms']:.2f} ms")
        self.caption.value = self.describe(k)

    def describe(self, k: int) -> str:
        """Cycle `k` in words: who reported what, what was agreed, fused and left waiting."""
        cycle = self.cycles[k]

        def named(ts):
            return ", ".join(f"{t} ({self.names[t]})" for t in ts) or "nothing new"

        reports = "; ".join(f"rank {r} reports {named(ts)}"
                            for r, ts in cycle["reported"].items())
        agreed = (" → ".join([named(cycle["agreed"]), f"{len(cycle['buffers'])} fused "
                              f"all-reduce(s) of " + ", ".join(
                                  f"{b['bytes'] / 1e3:.3g} kB" for b in cycle["buffers"])])
                  if cycle["agreed"] else "nothing yet")
        waiting = "; ".join(f"{t} waits for rank(s) {', '.join(map(str, rs))}"
                            for t, rs in cycle["waiting"].items())
        return (f"<b>Cycle {k}</b> at {cycle['start_ms']:.2f} ms: {reports}. Ready on every "
                f"rank: {agreed}." + (f" Still waiting: {waiting}." if waiting else ""))
