"""Live charts of one training run: loss, accuracy, samples/s and compute-vs-sync share.

:class:`RunCharts` turns metric lines (the dicts of ``metrics/rank<k>.jsonl``, see
docs/ARCHITECTURE.md) into Bokeh data sources. It knows nothing about widgets or jobs, so it
is easy to test: feed it rows with :meth:`RunCharts.add` and look at :attr:`RunCharts.sources`.

What the charts show, and why
-----------------------------
* **Loss and accuracy per rank** (thin coloured lines) and **overall** (thick black line). In
  synchronous data parallelism every rank trains the *same* model on a *different* shard of each
  global batch, so the per-rank losses differ a little (different samples) and the overall value
  is their mean, reported once every rank has finished that step.
* **Samples/s** of the whole job, over a sliding window of recent steps: the number that
  speedup and efficiency are computed from.
* **Compute vs sync share** per rank: of the time spent in training steps so far, the fraction
  spent computing (forward + backward) and the fraction spent synchronizing gradients
  (allreduce, and waiting for the slowest rank). A growing sync share is what limits scaling.
  The label under the chart names the clock the ranks used (the "ready" event's ``timing``): the
  wall clock on CPUs, CUDA events on GPUs, where the host's clock would mislead.
* **Bytes held per rank** (``memory=True``: DDP and the sharded engines report them):
  parameters, gradients and optimizer state, in MB, from each rank's last step (for a
  sharded engine, beside them, what one DDP rank would hold of the same model: each sharded
  state summed over the ranks, up to the shards' padding), and the
  **MB sent per step** at its collectives. DDP's bars are the same on every rank; ZeRO's
  shrink with the number of ranks, and FSDP's sent bar is 1.5× DDP's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from bokeh.models import Label

from workbench.ui import charts

#: Steps in the sliding window of the samples/s estimate.
THROUGHPUT_WINDOW = 10

#: Keep at most this many points per line in the browser (older points roll off).
ROLLOVER = 5000

STEP_COLUMNS = ["time", "epoch", "step", "loss", "accuracy"]
OVERALL_COLUMNS = ["time", "epoch", "step", "loss", "accuracy", "samples_per_s"]
EPOCH_COLUMNS = ["time", "epoch", "loss", "accuracy", "samples_per_s"]
#: The layers of the bytes-held chart, and the step line's field of each.
MEMORY_STACKS = {"parameters": "param_bytes", "gradients": "grad_bytes",
                 "optimizer state": "optimizer_bytes"}
#: The cost model's name of each layer (sharded/costmodel.py's SHARDED_STATES).
STATE_OF = {"parameters": "params", "gradients": "grads", "optimizer state": "optimizer"}
#: The bar beside a sharded job's ranks: what one DDP rank would hold of the same model.
DDP_BAR = "DDP (same model)"


class RunCharts:
    """Data sources and figures for the live view of one run with ``np`` ranks.

    Attributes:
        sources: ``"rank<k>"`` (step metrics of rank k), ``"overall"`` (mean over ranks of each
            completed step, and the job's samples/s), ``"epochs"`` (end-of-epoch means) and
            ``"share"`` (compute vs sync fraction per rank).
        figures: ``"loss"``, ``"accuracy"``, ``"throughput"``, ``"share"``.
        layout: a Bokeh grid of the four figures, ready for :func:`charts.to_widget`.
    """

    def __init__(self, np: int, title: str = "", memory: bool = False,
                 sharded: tuple[str, ...] = ()) -> None:
        self.np = max(1, int(np))
        self.title = title
        self.memory = memory
        self.sharded = sharded   # the states a sharded engine splits (costmodel.SHARDED_STATES)
        self.sources = {f"rank{r}": charts.source(STEP_COLUMNS, name=f"rank{r}")
                        for r in range(self.np)}
        self.sources["overall"] = charts.source(OVERALL_COLUMNS, name="overall")
        self.sources["epochs"] = charts.source(EPOCH_COLUMNS, name="epochs")
        self._pending: dict[tuple[int, int], dict[int, Mapping[str, Any]]] = {}
        self._recent: list[tuple[float, float]] = []        # (time, samples of the whole step)
        self._compute = [0.0] * self.np                     # seconds, per rank
        self._sync = [0.0] * self.np
        self._epoch_rows: dict[int, dict[int, Mapping[str, Any]]] = defaultdict(dict)
        self._held: dict[int, Mapping[str, Any]] = {}       # each rank's last byte counts
        self.steps_seen = 0
        self.epochs_done = 0
        self.last: dict[str, float] = {}
        self.figures = self._build_figures()
        self.layout = charts.grid(list(self.figures.values()), ncols=2)

    # -- figures -----------------------------------------------------------------------------

    def _rank_label(self, rank: int) -> str:
        return f"rank {rank}"

    def _build_figures(self) -> dict[str, Any]:
        prefix = f"{self.title}: " if self.title else ""
        loss = charts.figure(f"{prefix}training loss", "time since start (s)", "loss")
        acc = charts.figure("training accuracy", "time since start (s)", "accuracy",
                            x_range=loss.x_range)
        for r in range(self.np):
            src, color = self.sources[f"rank{r}"], charts.rank_color(r)
            charts.line(loss, src, "time", "loss", color=color, legend=self._rank_label(r),
                        width=1)
            charts.line(acc, src, "time", "accuracy", color=color, legend=self._rank_label(r),
                        width=1)
        overall = self.sources["overall"]
        charts.line(loss, overall, "time", "loss", legend="all ranks", width=3)
        charts.line(acc, overall, "time", "accuracy", legend="all ranks", width=3)
        acc.y_range.start, acc.y_range.end = 0, 1.02

        thr = charts.figure("throughput", "time since start (s)", "samples/s (whole job)",
                            x_range=loss.x_range)
        charts.line(thr, overall, "time", "samples_per_s", legend="sliding window")
        thr.scatter("time", "samples_per_s", source=self.sources["epochs"], size=9,
                    color=charts.kind_color("compute"), legend_label="epoch average")
        thr.y_range.start = 0
        for fig in (loss, acc, thr):  # a short run's times (9.46 s, 9.48 s, ...) ran together
            fig.xaxis.ticker.desired_num_ticks = 4

        cats = [self._rank_label(r) for r in range(self.np)]
        share, self.sources["share"] = charts.stacked_bar(
            cats, {"compute": [0.0] * self.np, "sync": [0.0] * self.np},
            "time per step: compute vs sync", x_label="rank", y_label="share of step time",
            name="share")
        share.y_range.end = 1.0
        figures = {"loss": loss, "accuracy": acc, "throughput": thr, "share": share}
        if self.memory:
            zeros = [0.0] * self.np
            bars = [*cats, DDP_BAR] if self.sharded else cats
            figures["memory"], self.sources["memory"] = charts.stacked_bar(
                bars, {name: [0.0] * len(bars) for name in MEMORY_STACKS},
                "bytes held per rank", x_label="rank", y_label="MB", name="memory")
            figures["sent"], self.sources["sent"] = charts.bar(
                cats, zeros, "bytes sent per step, per rank", x_label="rank", y_label="MB")
        return figures

    # -- data --------------------------------------------------------------------------------

    def add(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Add metric lines (dicts of the metrics files) to the sources; return how many were used.

        Call this only on the kernel's event loop: it changes Bokeh models.
        """
        per_rank: dict[int, dict[str, list]] = defaultdict(lambda: {c: [] for c in STEP_COLUMNS})
        overall: dict[str, list] = {c: [] for c in OVERALL_COLUMNS}
        epochs: dict[str, list] = {c: [] for c in EPOCH_COLUMNS}
        used = 0
        for row in rows:
            kind, rank = row.get("kind"), int(row.get("rank", 0))
            if not 0 <= rank < self.np:
                continue
            if kind == "step":
                self._add_step(row, rank, per_rank[rank], overall)
                if self.memory and "param_bytes" in row:
                    self._held[rank] = row
                used += 1
            elif kind == "epoch":
                self._add_epoch(row, rank, epochs)
                used += 1
            elif kind == "event" and row.get("message") == "ready" and row.get("timing"):
                self._say_timing(str(row["timing"]), str(row.get("device", "")))
        for rank, cols in per_rank.items():
            if cols["time"]:
                self.sources[f"rank{rank}"].stream(cols, rollover=ROLLOVER)
        if overall["time"]:
            self.sources["overall"].stream(overall, rollover=ROLLOVER)
        if epochs["time"]:
            self.sources["epochs"].stream(epochs)
        if used:
            self._update_share()
            self._update_memory()
        return used

    def _add_step(self, row: Mapping[str, Any], rank: int, cols: dict[str, list],
                  overall: dict[str, list]) -> None:
        for c in STEP_COLUMNS:
            cols[c].append(float(row.get(c, 0.0) or 0.0))
        self.steps_seen += 1
        self._compute[rank] += float(row.get("compute_s", 0.0) or 0.0)
        self._sync[rank] += float(row.get("sync_s", 0.0) or 0.0)
        key = (int(row.get("epoch", 0)), int(row.get("step", 0)))
        waiting = self._pending.setdefault(key, {})
        waiting[rank] = row
        if len(waiting) == self.np:          # every rank has finished this step
            del self._pending[key]
            self._add_overall(key, list(waiting.values()), overall)

    def _add_overall(self, key: tuple[int, int], rows: list[Mapping[str, Any]],
                     overall: dict[str, list]) -> None:
        t = max(float(r.get("time", 0.0)) for r in rows)
        samples = sum(float(r.get("samples", 0.0) or 0.0) for r in rows)
        self._recent = (self._recent + [(t, samples)])[-(THROUGHPUT_WINDOW + 1):]
        point = {
            "time": t, "epoch": float(key[0]), "step": float(key[1]),
            "loss": sum(float(r.get("loss", 0.0)) for r in rows) / len(rows),
            "accuracy": sum(float(r.get("accuracy", 0.0)) for r in rows) / len(rows),
            "samples_per_s": self._throughput(),
        }
        for c in OVERALL_COLUMNS:
            overall[c].append(point[c])
        self.last.update(point)

    def _throughput(self) -> float:
        """Samples/s of the whole job over the last steps (0 until two steps are known).

        The first step of the window only marks the start time: its samples were processed
        before it.
        """
        if len(self._recent) < 2:
            return float("nan")
        span = self._recent[-1][0] - self._recent[0][0]
        done = sum(s for _, s in self._recent[1:])
        return done / span if span > 0 else float("nan")

    def _add_epoch(self, row: Mapping[str, Any], rank: int, epochs: dict[str, list]) -> None:
        epoch = int(row.get("epoch", 0))
        rows = self._epoch_rows[epoch]
        rows[rank] = row
        if len(rows) < self.np:
            return
        n = len(rows)
        point = {
            "time": max(float(r.get("time", 0.0)) for r in rows.values()),
            "epoch": float(epoch),
            "loss": sum(float(r.get("loss", 0.0)) for r in rows.values()) / n,
            "accuracy": sum(float(r.get("accuracy", 0.0)) for r in rows.values()) / n,
            # each rank reports its own samples/s; the job's is their sum
            "samples_per_s": sum(float(r.get("samples_per_s", 0.0)) for r in rows.values()),
        }
        for c in EPOCH_COLUMNS:
            epochs[c].append(point[c])
        self.epochs_done = max(self.epochs_done, epoch + 1)
        self.last["epoch_samples_per_s"] = point["samples_per_s"]

    def _say_timing(self, timing: str, device: str) -> None:
        """Name the clock under the compute/sync chart: on a GPU the split comes from CUDA
        events on the GPU's timeline, on a CPU from the wall clock. (Under it, not in the
        title: the title would no longer fit the chart.)"""
        where = f" on {device}" if device else ""
        self.figures["share"].xaxis.axis_label = f"rank; timed by {timing}{where}"

    def _update_share(self) -> None:
        compute, sync = [], []
        for c, s in zip(self._compute, self._sync, strict=True):
            total = c + s
            compute.append(c / total if total > 0 else 0.0)
            sync.append(s / total if total > 0 else 0.0)
        cats = [self._rank_label(r) for r in range(self.np)]
        self.sources["share"].data = {"category": cats, "compute": compute, "sync": sync}

    def _update_memory(self) -> None:
        if not self._held:
            return
        cats = [self._rank_label(r) for r in range(self.np)]
        mb = {name: [float(self._held.get(r, {}).get(field, 0)) / 1e6 for r in range(self.np)]
              for name, field in MEMORY_STACKS.items()}
        if self.sharded:  # beside the ranks, DDP: a sharded state whole, the others rank 0's
            for name, values in mb.items():
                values.append(sum(values) if STATE_OF[name] in self.sharded else values[0])
        self.sources["memory"].data = {"category": [*cats, DDP_BAR] if self.sharded else cats,
                                       **mb}
        self.sources["sent"].data = {  # the ranks only: no DDP bar beside them here
            "category": cats,
            "value": [float(self._held.get(r, {}).get("sent_bytes", 0)) / 1e6
                      for r in range(self.np)]}

    def sync_share(self) -> float:
        """Fraction of all ranks' step time spent synchronizing gradients so far (0..1)."""
        total = sum(self._compute) + sum(self._sync)
        return sum(self._sync) / total if total > 0 else 0.0

    def empty(self) -> list[str]:
        """The figures that draw nothing: no rank reported a number for them (a loss, an
        accuracy, samples for the throughput, a compute/sync split, bytes held)."""
        def reported(sources: Iterable[Any], column: str) -> bool:
            return any(v == v for s in sources for v in s.data.get(column, []))  # not nan

        ranks = [self.sources[f"rank{r}"] for r in range(self.np)]
        drawn = {"loss": reported(ranks, "loss"), "accuracy": reported(ranks, "accuracy"),
                 "throughput": reported([self.sources["overall"], self.sources["epochs"]],
                                        "samples_per_s"),
                 "share": self.sync_share() > 0 or sum(self._compute) > 0,
                 "memory": bool(self._held), "sent": bool(self._held)}
        return [name for name in self.figures if not drawn[name]]

    def say_why_empty(self, why: Mapping[str, str]) -> None:
        """Write in each figure that draws nothing why (``why[name]``, its lines apart by
        newlines): an empty chart without a word looks broken."""
        for name in self.empty():  # grey, top left of the plot area, lines going down
            self.figures[name].add_layout(Label(
                x=8, y=self.figures[name].height - 90, x_units="screen", y_units="screen",
                text=why[name], text_baseline="top", text_font_size="10pt",
                text_color=charts.IDEAL_COLOR), "center")
