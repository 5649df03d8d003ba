"""Hogwild!: lock-free updates of a shared model converge on a sparse problem, like locked ones."""

from __future__ import annotations

import pytest
import torch
from _labs_helpers import assert_recorded_and_reaped

from workbench.synchronization.hogwild import make_sparse_problem, run_hogwild, sparsity_stats


def test_the_problem_is_sparse():
    x, y = make_sparse_problem(samples=1000, features=2000, active=5)
    assert x.shape == (1000, 5)
    assert 0.3 < y.mean().item() < 0.7
    stats = sparsity_stats(x, 2000)
    assert stats["omega"] == 5 and stats["delta"] < 0.02


def test_hogwild_and_locked_both_converge(tmp_path):
    r = run_hogwild(2, epochs=2, samples=4000, runs_dir=str(tmp_path), timeout=240)
    assert r["initial_loss"] == pytest.approx(torch.log(torch.tensor(2.0)).item(), abs=1e-4)
    for variant in ("hogwild", "locked"):
        v = r[variant]
        assert v["final_loss"] < 0.6 * r["initial_loss"], (variant, v["final_loss"])
        assert v["final_accuracy"] > 0.85
        assert v["time_s"] > 0
        assert v["updates"] == 2 * 2 * (2000 // 4)          # processes × epochs × batches
        assert [p["epoch"] for p in v["loss_curve"]] == [1, 2]
    (record,) = assert_recorded_and_reaped(tmp_path)
    for variant in ("hogwild", "locked"):   # the shared models' final weights, bias last
        weights = torch.from_file(str(record.run_dir / f"{variant}.weights"), size=5001)
        assert weights.abs().sum() > 0


def test_cli_json(tmp_path):
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench.cli", "hogwild", "--epochs", "1",
                          "--json", "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["hogwild"]["final_loss"] < doc["initial_loss"]
    assert doc["locked"]["final_loss"] < doc["initial_loss"]
