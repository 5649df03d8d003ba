"""The lessons' pictures draw the package's own models, and those models say what the
papers say: the ring's chunks and bytes, a pipeline's bubble, what each device holds, ZeRO's
Figure 1, Megatron's f and g, Horovod's cycles. No processes: each test takes well under a
second but the ring's threads and the widgets' construction.
"""

from __future__ import annotations

import pytest
import torch

from workbench.model_parallel import layouts
from workbench.model_parallel.schedule import (
    idle_share,
    most_in_flight,
    theoretical_bubble,
    timeline,
)
from workbench.sharded import costmodel
from workbench.synchronization.negotiation import fuse, negotiate
from workbench.synchronization.ring_allreduce import (
    bytes_sent_per_worker,
    chunk_lengths,
    ring_trace,
)
from workbench.tensor_parallel import megatron
from workbench.ui import charts
from workbench.ui.layout_picture import LayoutPicture
from workbench.ui.megatron_picture import MegatronPicture
from workbench.ui.negotiation_picture import NegotiationPicture
from workbench.ui.ring_picture import RingPicture
from workbench.ui.schedule_picture import SchedulePicture
from workbench.ui.zero_picture import ZeroPicture

# --- the ring all-reduce, step by step (notebook 04) -------------------------------------


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_the_ring_trace_is_reduce_scatter_then_all_gather(p):
    numel = 1001
    frames = ring_trace(p, numel)
    everyone = frozenset(range(p))
    assert len(frames) == 2 * (p - 1) + 1
    assert [f["phase"] for f in frames] == (["start"] + ["reduce-scatter"] * (p - 1)
                                            + ["all-gather"] * (p - 1))
    assert all(frames[0]["holds"][r][c] == {r} for r in range(p) for c in range(p))
    for k, frame in enumerate(frames[1:], start=1):
        before = frames[k - 1]["holds"]
        for src, dst, chunk, _ in frame["sends"]:
            assert dst == (src + 1) % p and chunk == (src - k + 1) % p   # Patarasuk & Yuan
            after = frame["holds"][dst][chunk]
            if frame["phase"] == "reduce-scatter":   # the receiver adds what it got ...
                assert after == before[dst][chunk] | before[src][chunk]
            else:                                     # ... then copies finished chunks
                assert after == before[src][chunk] == everyone
    assert all(frames[p - 1]["holds"][r][(r + 1) % p] == everyone for r in range(p))
    assert all(h == everyone for row in frames[-1]["holds"] for h in row)
    lengths = chunk_lengths(numel, p)
    assert lengths == [len(c) for c in torch.empty(numel).tensor_split(p)]
    for r in range(p):
        sent = sum(f["sends"][r][3] for f in frames[1:])
        assert sent == pytest.approx(2 * (p - 1) / p * numel * 4, abs=8)
    assert sum(f["sends"][0][3] for f in frames[1:]) == bytes_sent_per_worker(numel, p)


def test_the_ring_picture_steps_through_the_trace_and_adds_up_the_bytes():
    picture = RingPicture(workers=4, megabytes=100)
    assert picture.play.max == picture.step.max == 6
    for k in range(7):
        picture.step.value = k
        holds = picture.frames[k]["holds"]
        counts = [f"{len(holds[r][c])}/4" for r in range(4) for c in range(4)]
        assert picture.chunks.data["count"] == counts
        assert len(picture.arrows.data["label"]) == (0 if k == 0 else 4)
        assert f"so far: {25 * k:.4g} MB" in picture.caption.value
    assert "150 MB" in picture.caption.value          # 2(p−1)/p · n at p = 4, n = 100 MB
    assert "replaces its copy" in picture.caption.value
    picture.workers.value = 3
    assert picture.step.value == 0 and picture.play.max == 4
    assert len(picture.chunks.data["x"]) == 9


# --- GPipe against 1F1B (notebook 05) --------------------------------------------------------


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "micro"), [(2, 1), (2, 4), (3, 5), (4, 6), (6, 16)])
def test_the_drawn_schedule_has_the_formulas_bubble(schedule, stages, micro):
    events = timeline(stages, micro, schedule)
    assert idle_share(events) == pytest.approx(theoretical_bubble(stages, micro))
    end = {(e["kind"], e["stage"], e["microbatch"]): e for e in events}
    assert len(end) == len(events) == 2 * stages * micro       # each pass once
    for (kind, s, m), e in end.items():
        before = (("fwd", s - 1, m) if kind == "fwd" else
                  ("fwd", s, m) if s == stages - 1 else ("bwd", s + 1, m))
        if before in end:
            assert e["start"] >= end[before]["end"]
    held = [most_in_flight(events, s) for s in range(stages)]
    assert held == ([micro] * stages if schedule == "gpipe"
                    else [min(stages - s, micro) for s in range(stages)])


def test_the_schedule_picture_redraws_for_its_sliders():
    picture = SchedulePicture(stages=4, micro_batches=6)
    picture.stages.value, picture.micro_batches.value = 3, 5
    for name, src in picture.sources.items():
        data = src.data
        passes = [k for k in data["kind"] if k != "idle"]
        assert len(passes) == 2 * 3 * 5
        span = max(data["end"])
        idle = sum(d for d, k in zip(data["duration"], data["kind"], strict=True)
                   if k == "idle")
        assert idle / (3 * span) == pytest.approx(theoretical_bubble(3, 5))
        assert f"(formula {theoretical_bubble(3, 5):.3f})" in picture.figures[name].title.text
    assert "up to 5 micro-batches" in picture.figures["gpipe"].title.text
    assert "up to 3 micro-batches" in picture.figures["1f1b"].title.text


# --- what each device holds (notebook 05) ----------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4])
def test_each_strategy_keeps_and_sees_what_its_paper_says(n):
    layers, width, batch = 4, 512, 12
    for strategy in layouts.STRATEGIES:
        rows = layouts.holdings(strategy, n, layers)
        per_layer = [sum(r["share"] for r in rows if r["layer"] == k) for k in range(layers)]
        assert per_layer == pytest.approx([n if strategy == "data" else 1] * layers)
        seen = layouts.samples_seen(strategy, n, batch)
        counts = [sum(s in mine for mine in seen) for s in range(batch)]
        assert counts == [1 if strategy in ("data", "sharded") else n] * batch
    psi = layers * width * width
    ring = 2 * (n - 1) / n
    sent = {s: layouts.sent_per_step(s, n, width, layers, 64) for s in layouts.STRATEGIES}
    assert sent["data"] == pytest.approx(ring * 4 * psi)
    assert sent["sharded"] == pytest.approx(1.5 * sent["data"])
    assert sent["pipeline"] == (1 if n == 2 else 2) * 64 * width * 4
    assert sent["tensor"] == pytest.approx(ring * (layers // 2) * 2 * 64 * width * 4)
    with pytest.raises(ValueError, match="unknown strategy"):
        layouts.holdings("expert", n, layers)


def test_the_layout_picture_draws_one_column_per_device():
    picture = LayoutPicture(devices=2)
    for n in (2, 4):
        picture.devices.value = n
        for strategy, src in picture.sources.items():
            kept = [w * h for w, h, a, y in zip(src.data["w"], src.data["h"],
                                               src.data["alpha"], src.data["y"], strict=True)
                    if a > 0.5 and y > 0]
            whole = (1 - 2 * 0.08) ** 2
            assert sum(kept) / whole == pytest.approx(n * 4 if strategy == "data" else 4)
            sent = layouts.sent_per_step(strategy, n, 512, 4, 64)
            assert f"{sent / 1e6:.3g} MB" in picture.figures[strategy].title.text


# --- ZeRO's memory bars (notebook 08) --------------------------------------------------------


def test_the_zero_bars_are_the_papers_figure_1_and_show_the_backward_peak():
    picture = ZeroPicture(psi=7.5e9, devices=64, device_gb=80)
    totals = picture.bars.data["total"]
    assert [round(t, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]   # ZeRO, Figure 1
    peaks = picture.bars.data["peak"]
    assert all(p >= t for p, t in zip(peaks, totals, strict=True))
    assert peaks[2] == pytest.approx(peaks[1]) and peaks[2] > totals[2]   # every gradient
    assert peaks[3] == pytest.approx(totals[3])
    picture.stage.value = 3
    assert picture.bars.data["alpha"] == [0.3, 0.3, 0.3, 1.0]
    assert str(costmodel.plan(7.5e9, 64, 80, "zero3")) in picture.plan.value
    picture.devices.value = 1
    assert picture.bars.data["total"] == pytest.approx([120.0] * 4)
    picture.psi.value = 1.0
    assert picture.bars.data["total"][0] == pytest.approx(16.0)
    with_block = costmodel.backward_peak(1e9, 8, "zero3", 12, gathered=1e7)
    assert with_block.params - costmodel.model_states(1e9, 8, "zero3", 12).params == 2e7


# --- Megatron's f and g (notebook 09) --------------------------------------------------------


class Counted(megatron.Comm):
    """A tensor-parallel group that only counts what it would all-reduce."""

    def all_reduce(self, tensor, what):
        self.log.append((what, tensor.numel() * tensor.element_size()))
        return tensor


@pytest.mark.parametrize("n", [2, 4])
def test_the_megatron_picture_has_the_modules_shapes_and_all_reduces(n):
    hidden, tokens = 8, 6
    comm = Counted(size=n)
    part = megatron.ParallelMLP(megatron.MLP(hidden), 0, comm)
    x = torch.randn(tokens, hidden, requires_grad=True)
    part(x).sum().backward()
    assert comm.log == [("g forward", tokens * hidden * 4), ("f backward", tokens * hidden * 4)]
    picture = MegatronPicture(hidden=hidden, tokens=tokens, bytes_per_value=4, ranks=n)
    assert picture.shapes() == {"A_i": tuple(part.w1.T.shape), "B_i": tuple(part.w2.T.shape)}
    assert picture.payload() == comm.log[0][1]
    for direction, busy in (("forward", "g"), ("backward", "f")):
        picture.direction.value = direction
        colors = dict(zip(picture.boxes.data["name"], picture.boxes.data["color"], strict=True))
        idle = "f" if busy == "g" else "g"
        assert colors[busy] == charts.kind_color("allreduce") != colors[idle]
        assert f"{busy} all-reduces" in picture.fig.title.text


# --- Horovod's negotiation cycle (notebook 02) -----------------------------------------------


def test_negotiation_reduces_each_tensor_once_as_soon_as_every_rank_has_it():
    ready = [[0.5, 1.5, 2.5, 2.6], [0.7, 3.2, 3.3, 5.1]]
    sizes = [400, 4000, 40, 4000]
    cycles = negotiate(ready, sizes, cycle_ms=1.0, fusion_bytes=4100, alpha_s=1e-4)
    reduced = [t for c in cycles for b in c["buffers"] for t in b["tensors"]]
    assert sorted(reduced) == [0, 1, 2, 3]
    for prev, cycle in zip(cycles, cycles[1:], strict=False):
        assert cycle["start_ms"] >= max(prev["start_ms"] + 1.0, prev["end_ms"])
    for cycle in cycles:
        for t in cycle["agreed"]:
            assert all(times[t] <= cycle["start_ms"] for times in ready)
        for buffer in cycle["buffers"]:
            assert buffer["bytes"] <= 4100 or len(buffer["tensors"]) == 1
    when = {t: i for i, c in enumerate(cycles) for t in c["agreed"]}
    for t in range(4):   # not a cycle later than the first in which every rank has it
        first_ready = min(i for i, c in enumerate(cycles)
                          if all(times[t] <= c["start_ms"] for times in ready))
        assert when[t] == first_ready
    assert fuse([0, 1, 2, 3], sizes, 4100) == [[0], [1, 2], [3]]
    slow = negotiate([[0.5, 0.6], [0.5, 0.6]], [4_000_000, 4], cycle_ms=1.0)
    took = slow[0]["end_ms"] - slow[0]["start_ms"]        # a ring of 4 MB on 10 Gbit/s
    assert took == pytest.approx(1e3 * (2 * 5e-6 + 4e6 * 8 / 10e9), rel=1e-6)
    assert slow[0]["agreed"] == [0, 1] and len(slow) == 1
    late = negotiate([[0.5, 1.6], [0.5, 1.6]], [4_000_000, 4], cycle_ms=1.0)
    assert late[1]["start_ms"] == pytest.approx(late[0]["end_ms"])   # not 2.0: it was busy
    assert fuse([0, 1, 2], sizes, 128 * 2 ** 20) == [[0, 1, 2]]


def test_the_negotiation_picture_steps_through_the_cycles():
    picture = NegotiationPicture()
    last = len(picture.cycles) - 1
    picture.cycle.value = last
    drawn = len(picture.bars.data["left"])
    assert drawn == sum(len(c["buffers"]) for c in picture.cycles)
    picture.slower.value = 0
    together = len(picture.cycles)
    picture.slower.value = 200
    assert len(picture.cycles) > together          # a slow rank holds everyone's all-reduce
    picture.fusion_kb.value = 4
    assert any(len(c["buffers"]) > 1 for c in picture.cycles)
    picture.cycle.value = next(i for i, c in enumerate(picture.cycles) if c["agreed"])
    assert "Ready on every rank: 0 (out.bias)" in picture.caption.value
