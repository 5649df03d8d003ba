"""Scaling charts and the Horovod-timeline reader on known data (no processes, < 2 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.scaling import fit, metrics
from workbench.scaling import timeline as tl
from workbench.ui import scaling_report as report

# A timeline in Horovod 0.28's format (see docs/scaling.md): tensor 1 is negotiated, rank 1
# is ready at 100 µs and rank 0 at 400 µs; the allreduce runs from 500 to 900 µs.
EVENTS = [
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.fc.weight"}},
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 100, "pid": 1},
    {"ph": "X", "name": "1", "ts": 100, "pid": 1, "dur": 0},
    {"ph": "X", "name": "0", "ts": 400, "pid": 1, "dur": 0},
    {"ph": "E", "ts": 450, "pid": 1},
    {"ph": "B", "name": "ALLREDUCE", "ts": 500, "pid": 1},
    {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 510, "pid": 1},
    {"ph": "E", "ts": 890, "pid": 1},
    {"ph": "E", "ts": 900, "pid": 1, "args": {"dtype": "float32", "shape": "[10]"}},
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 2100, "pid": 1},
    {"ph": "E", "ts": 2200, "pid": 1},
    {"ph": "B", "name": "ALLREDUCE", "ts": 2300, "pid": 1},
    {"ph": "E", "ts": 2600, "pid": 1},
]


def test_timeline_pairs_negotiations_and_operations():
    t = tl.parse_events(EVENTS)
    assert t.ranks == [0, 1]
    assert [(o.name, o.start, o.end) for o in t.operations] == [
        ("ALLREDUCE", pytest.approx(400e-6), pytest.approx(800e-6)),
        ("ALLREDUCE", pytest.approx(2200e-6), pytest.approx(2500e-6))]
    assert t.negotiations[0].tensor == "allreduce.fc.weight"
    assert t.negotiations[0].ready == {1: 0.0, 0: pytest.approx(300e-6)}


def test_rank_activities_wait_negotiation_allreduce_compute():
    shares = tl.time_shares(tl.rank_activities(tl.parse_events(EVENTS)))
    us = {lane: {k: round(v * 1e6) for k, v in kinds.items()} for lane, kinds in shares.items()}
    # rank 1 waited 300 µs for rank 0; both then spent 100 µs negotiating and queueing, 700 µs
    # in the two allreduces; the rest of the 2.5 ms is compute.
    assert us["rank 1"] == {"wait": 300, "negotiation": 300, "allreduce": 700, "compute": 1200}
    assert us["rank 0"] == {"compute": 1500, "negotiation": 300, "allreduce": 700}


def test_unfinished_timeline_file_is_read(tmp_path: Path):
    text = "[\n" + ",\n".join(json.dumps(e) for e in EVENTS)
    (tmp_path / "t.json").write_text(text[: len(text) - 7])      # cut inside the last event
    events = tl.load_events(tmp_path / "t.json")
    assert events == EVENTS[:-1]
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(ValueError, match="not a Chrome-trace timeline"):
        tl.load_events(tmp_path / "bad.json")


def test_paint_gives_priority_and_fills_compute():
    strip = tl.paint([(1, 3, "wait"), (2, 4, "allreduce")], 0, 5)
    assert strip == [(0, 1, "compute"), (1, 2, "wait"), (2, 4, "allreduce"), (4, 5, "compute")]


def test_scaling_charts_fit_and_update():
    rows = metrics.scaling_rows([1, 2, 4], [10.0, 5.5, 3.25],
                                [100.0, 100 / 0.55, 100 / 0.325])
    charts = report.ScalingCharts(rows[:1])
    assert charts.fit.data["x"] == []                   # one point: nothing to fit yet
    charts.update(rows)                                 # as a panel would after each run
    assert [f.title.text for f in charts.figures] == list(report.CHART_TITLES)
    assert charts.points.data["np"] == [1, 2, 4]
    name, f, _ = fit.fitted_law(rows, "strong")
    assert name == "Amdahl" and f == pytest.approx(0.9, abs=0.01)
    labels = [item.label["value"] for item in charts.speedup.legend[0].items]
    assert f"Amdahl fit, f = {f:.3f}" in labels
    assert fit.fitted_law(rows, "weak")[0] == "Gustafson"


def test_no_fit_is_drawn_through_a_run_slower_than_one_worker():
    """The comm-bound preset measured S = 0.3 at 2 workers: a clipped Amdahl fit would draw
    a flat line at 1, far from the points. Say why instead, with Karp–Flatt."""
    rows = metrics.scaling_rows([1, 2], [10.0, 33.3], [100.0, 30.0])
    assert rows[1]["speedup"] == pytest.approx(0.3)
    assert fit.fitted_law(rows, "strong") is None
    charts = report.ScalingCharts(rows)
    assert charts.fit.data["x"] == [] and charts.fit_far.data["x"] == []
    labels = [item.label["value"] for item in charts.speedup.legend[0].items]
    assert "no fit (see the note)" in labels
    note = fit.fit_note(rows, "strong")
    kf = metrics.karp_flatt(0.3, 2)
    assert "slower than one worker: communication costs more than it saves" in note.lower()
    assert f"Karp–Flatt e = {kf:.2f}" in note and kf > 1
    assert "No Amdahl fit is drawn" in note
    assert fit.fit_note(metrics.scaling_rows([1, 2], [10.0, 6.0], [100.0, 166.0])) is None

    weak = metrics.scaling_rows([1, 2], [10.0, 33.3], [100.0, 30.0], mode="weak")
    assert weak[1]["karp_flatt"] is None                 # Karp–Flatt is for strong scaling
    assert "No Gustafson fit" in fit.fit_note(weak, "weak")
    assert "is for strong scaling" in fit.fit_note(weak, "weak")
    page = report.report_html(rows, {"engine": "horovod", "mode": "strong"})
    assert "communication costs more than it saves" in page


def test_report_is_standalone_html_with_three_charts(tmp_path: Path):
    rows = metrics.scaling_rows([1, 2], [10.0, 6.0], [100.0, 166.0])
    path = report.write_report(tmp_path / "r.html", rows,
                               {"engine": "horovod", "mode": "strong", "threads_per_rank": 1})
    html = path.read_text()
    for title in report.CHART_TITLES:
        assert f'"text":"{title}"' in html
    assert "cdn.bokeh.org" not in html and "per-worker resources constant" in html
