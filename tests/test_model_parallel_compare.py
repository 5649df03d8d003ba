"""Data vs model parallelism: the measured numbers are consistent with each other and the model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _labs_helpers import assert_recorded_and_reaped

from workbench.model_parallel.compare import compare
from workbench.model_parallel.pipeline import train_unsplit
from workbench.ui.parallelism_charts import memory_figure

WIDTH, STEPS = 256, 3


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("runs")
    r = compare(2, width=WIDTH, layers=4, batch_size=64, microbatches=4, steps=STEPS,
                optimizer="adam", lr=0.01, runs_dir=str(runs_dir), timeout=280)
    assert_recorded_and_reaped(runs_dir)
    return r


def test_both_strategies_train_the_same_model(result):
    reference = train_unsplit(steps=STEPS, width=WIDTH, optimizer="adam", lr=0.01)
    assert result["data_parallel"]["losses"] == pytest.approx(reference, abs=1e-5)
    assert result["model_parallel"]["losses"] == pytest.approx(reference, abs=1e-5)


def test_memory_adds_up(result):
    params = result["model"]["params_bytes"]
    dp = result["data_parallel"]["memory_per_worker"]
    stages = result["model_parallel"]["memory_per_stage"]
    assert dp["params_bytes"] == dp["grads_bytes"] == params         # a full replica
    assert dp["optimizer_bytes"] == 2 * params                          # Adam: two moments
    assert sum(s["params_bytes"] for s in stages) == params             # a split model
    for m in [dp, *stages]:
        assert m["activations_bytes"] > 0
        assert m["total_bytes"] == (m["params_bytes"] + m["grads_bytes"]
                                    + m["optimizer_bytes"] + m["activations_bytes"])
    assert result["model_parallel"]["memory_per_worker"]["params_bytes"] < params


def test_measured_traffic_matches_the_formulas(result):
    for strategy in ("data_parallel", "model_parallel"):
        s = result[strategy]
        assert s["comm_bytes_per_step"] == pytest.approx(s["predicted_comm_bytes_per_step"])
        assert s["step_time_s"] > 0
    # A 256-wide MLP's gradients (~0.6 MB) outweigh the activations at one cut (64 KB).
    assert (result["model_parallel"]["comm_bytes_per_step"]
            < result["data_parallel"]["comm_bytes_per_step"])


def test_memory_figure(result):
    fig = memory_figure(result)
    assert list(fig.x_range.factors) == ["data parallel", "model parallel"]


def test_cli_json_is_one_document(tmp_path):
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "compare", "--width", "64",
                          "--batch-size", "256", "--steps", "2", "--json",
                          "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    # A narrow model with a big batch: now the activations at the cut outweigh the gradients.
    assert (doc["model_parallel"]["comm_bytes_per_step"]
            > doc["data_parallel"]["comm_bytes_per_step"])


def test_cli_rejects_one_worker():
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "compare", "--workers", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "at least 2 workers" in out.stderr and "Traceback" not in out.stderr
