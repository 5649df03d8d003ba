"""Parameter-server lab with real processes: staleness 0 in sync mode, measured > 0 in async."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _labs_helpers import assert_recorded_and_reaped

from workbench.synchronization.async_ps import PSConfig, _histogram, run_parameter_server


def test_the_staleness_histogram_has_a_bar_for_every_staleness_up_to_the_largest():
    assert _histogram([3, 0, 3, 1]) == {"0": 1, "1": 1, "2": 0, "3": 2}
    assert list(_histogram([3, 0, 3, 1])) == ["0", "1", "2", "3"]   # in order, for the bars
    assert _histogram([]) == {}


def test_sync_mode_has_no_staleness_and_learns(tmp_path):
    r = run_parameter_server("sync", workers=2, epochs=1, runs_dir=str(tmp_path), timeout=240)
    assert r["mean_staleness"] == 0 and r["max_staleness"] == 0
    assert r["staleness_histogram"] == {"0": r["gradients_used"]}
    assert r["updates"] * 2 == r["gradients_used"]          # one update per 2 gradients
    assert r["final_loss"] < 0.7 * r["loss_curve"][0]["loss"]
    assert [w["gradients"] for w in r["workers"]] == [r["updates"], r["updates"]]
    (record,) = assert_recorded_and_reaped(tmp_path)
    assert record.config["np"] == 3 and record.config["extra"]["settings"]["mode"] == "sync"


def test_async_mode_measures_staleness_above_zero(tmp_path):
    r = run_parameter_server("async", workers=2, epochs=1, runs_dir=str(tmp_path), timeout=240)
    assert r["mean_staleness"] > 0
    assert r["max_staleness"] >= 1
    assert r["updates"] == r["gradients_used"]               # every gradient is an update
    assert r["final_loss"] < 0.7 * r["loss_curve"][0]["loss"]
    assert_recorded_and_reaped(tmp_path)


def test_backup_workers_drop_the_stragglers_gradients(tmp_path):
    r = run_parameter_server("backup", workers=2, backup_workers=1, epochs=1,
                             straggler_delay=0.03, runs_dir=str(tmp_path), timeout=240)
    assert r["max_staleness"] == 0                # no stale gradient is ever applied
    assert r["gradients_dropped"] > 0             # the straggler's gradients came too late
    straggler, *others = r["workers"]
    assert straggler["gradients"] < min(w["gradients"] for w in others)


@pytest.mark.parametrize("kwargs,message", [
    ({"mode": "eventually"}, "mode must be one of"),
    ({"workers": 0}, "workers must be at least 1"),
    ({"straggler_delay": -1.0}, "straggler_delay"),
    ({"mode": "async", "backup_workers": 1}, "backup_workers only applies"),
    ({"straggler_worker": 5}, "straggler_worker must be in 0..1"),
])
def test_bad_settings_are_explained(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PSConfig(**kwargs).validate()


def test_cli_json_with_a_staleness_aware_straggler(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "async", "--mode", "async", "--workers", "2",
         "--epochs", "1", "--straggler-delay", "0.01", "--staleness-aware", "--json",
         "--runs-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {"mode", "final_loss", "time_s", "mean_staleness", "max_staleness",
            "loss_curve"} <= set(doc)
    assert doc["mode"] == "async" and doc["config"]["staleness_aware"] is True
    assert doc["mean_staleness"] > 0
    assert all({"update", "time_s", "loss"} <= set(p) for p in doc["loss_curve"])


def test_cli_bad_input_exits_2_without_traceback():
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "async", "--mode", "sync",
                          "--backup-workers", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "backup_workers only applies" in out.stderr and "Traceback" not in out.stderr
