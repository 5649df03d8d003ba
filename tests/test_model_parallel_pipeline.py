"""Pipeline lab: the split model trains exactly like the unsplit one; the bubble follows theory."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _labs_helpers import assert_recorded_and_reaped

from workbench.model_parallel.pipeline import (
    PipelineConfig,
    run_pipelines,
    schedule_ops,
    train_unsplit,
)
from workbench.model_parallel.schedule import theoretical_bubble
from workbench.ui.parallelism_charts import gantt_tasks, pipeline_figure

STEPS = 3


def test_theoretical_bubble_formula():
    assert theoretical_bubble(2, 1) == pytest.approx(0.5)
    assert theoretical_bubble(2, 4) == pytest.approx(0.2)
    assert theoretical_bubble(4, 8) == pytest.approx(3 / 11)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,microbatches", [(2, 1), (2, 4), (3, 5), (4, 8)])
def test_every_schedule_runs_each_pass_once_forward_first(schedule, stages, microbatches):
    for stage in range(stages):
        ops = schedule_ops(schedule, stage, stages, microbatches)
        assert sorted(ops) == sorted([("fwd", m) for m in range(microbatches)]
                                     + [("bwd", m) for m in range(microbatches)])
        in_flight, peak = set(), 0
        for kind, m in ops:
            if kind == "fwd":
                in_flight.add(m)
            else:
                assert m in in_flight, "backward before forward"
                in_flight.remove(m)
            peak = max(peak, len(in_flight))
        # 1F1B keeps at most P − stage micro-batches in flight; GPipe keeps all M.
        expected = min(stages - stage, microbatches) if schedule == "1f1b" else microbatches
        assert peak == expected


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """GPipe with M = 1, 4, 8 and 1F1B with M = 4, 8 on 2 stages, in one set of processes."""
    cfgs = [PipelineConfig(stages=2, microbatches=m, schedule="gpipe", steps=STEPS)
            for m in (1, 4, 8)]
    cfgs += [PipelineConfig(stages=2, microbatches=m, schedule="1f1b", steps=STEPS)
             for m in (4, 8)]
    runs_dir = tmp_path_factory.mktemp("runs")
    results = run_pipelines(cfgs, runs_dir=str(runs_dir), timeout=280)
    assert_recorded_and_reaped(runs_dir)
    return results


def test_pipeline_loss_matches_the_unsplit_model(runs):
    reference = train_unsplit(steps=STEPS)
    for r in runs:
        assert len(r["losses"]) == STEPS
        assert r["losses"] == pytest.approx(reference, abs=1e-5), (r["schedule"],
                                                                    r["microbatches"])


@pytest.mark.parametrize("index", [0, 1, 2, 3, 4])
def test_measured_bubble_follows_the_formula(runs, index):
    r = runs[index]
    assert r["theoretical_bubble"] == pytest.approx(1 / (r["microbatches"] + 1))
    assert abs(r["measured_bubble"] - r["theoretical_bubble"]) < 0.1, (
        r["schedule"], r["microbatches"], r["measured_bubble"])
    for stage in r["per_stage"]:
        assert stage["busy_s"] > 0 and stage["idle_s"] >= 0


def test_bubble_shrinks_as_microbatches_grow(runs):
    gpipe = [r["measured_bubble"] for r in runs[:3]]
    assert gpipe[0] > gpipe[1] > gpipe[2]


def test_1f1b_holds_fewer_activations_than_gpipe(runs):
    gpipe8, one_f_one_b8 = runs[2], runs[4]
    assert [s["peak_in_flight"] for s in gpipe8["per_stage"]] == [8, 8]
    assert [s["peak_in_flight"] for s in one_f_one_b8["per_stage"]] == [2, 1]
    assert (one_f_one_b8["per_stage"][0]["memory"]["activations_bytes"]
            < gpipe8["per_stage"][0]["memory"]["activations_bytes"])


def test_events_and_gantt_chart(runs):
    r = runs[1]   # GPipe, M = 4
    events = r["events"]
    assert len(events) == STEPS * 2 * 4 * 2            # steps × stages × M × (fwd, bwd)
    assert {e["kind"] for e in events} == {"fwd", "bwd"}
    assert all(e["end"] > e["start"] >= 0 for e in events)
    tasks = gantt_tasks(r)
    assert any(t["kind"] == "idle" for t in tasks)
    fig = pipeline_figure(r)
    assert list(fig.y_range.factors) == ["stage 1", "stage 0"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True,
                          text=True, timeout=240)


@pytest.mark.parametrize("args,message", [
    (["--stages", "3", "--layers", "2"], "at least as many layers"),
    (["--microbatches", "100", "--batch-size", "64"], "microbatches must be between"),
    (["--microbatches", "0"], "whole number"),
    (["--schedule", "zigzag"], "invalid choice"),
])
def test_cli_rejects_bad_input_with_exit_code_2(args, message):
    out = run_cli("pipeline", *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_json_and_html(tmp_path):
    import json

    html = tmp_path / "schedule.html"
    out = run_cli("pipeline", "--stages", "2", "--microbatches", "2", "--schedule", "1f1b",
                  "--steps", "2", "--compute-ms", "5", "--html", str(html), "--json",
                  "--runs-dir", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {"measured_bubble", "theoretical_bubble", "time_s", "per_stage",
            "events"} <= set(doc)
    assert {"stage", "microbatch", "kind", "start", "end"} <= set(doc["events"][0])
    assert doc["theoretical_bubble"] == pytest.approx(1 / 3)
    assert "Bokeh" in html.read_text()
    assert_recorded_and_reaped(tmp_path / "runs")
