"""Speedup on the time to a target: time_to_target_s, the linear scaling rule, warm-up and
the critical batch size."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import ConfigError, JobConfig
from workbench.records import load_run, of_kind
from workbench.scaling.critical_batch import batch_scan
from workbench.scaling.metrics import time_to_target
from workbench.scaling.sweep import Target, sweep_config
from workbench.training.lab_hooks import warmup_lr, warmup_start

EPOCHS = [  # rank 1's lines must be ignored: rank 0 speaks for the run
    {"rank": 0, "epoch": 0, "epoch_time_s": 1.0, "val_loss": 0.9, "val_accuracy": 0.70},
    {"rank": 1, "epoch": 0, "epoch_time_s": 9.0, "val_loss": 0.1, "val_accuracy": 0.99},
    {"rank": 0, "epoch": 1, "epoch_time_s": 1.5, "val_loss": 0.5, "val_accuracy": 0.85},
    {"rank": 0, "epoch": 2, "epoch_time_s": 2.0, "val_loss": 0.3, "val_accuracy": 0.91},
]


def test_time_to_target_adds_training_time_up_to_the_first_epoch_on_target():
    assert time_to_target(EPOCHS, target_accuracy=0.85) == pytest.approx(2.5)
    assert time_to_target(EPOCHS, target_loss=0.3) == pytest.approx(4.5)
    assert time_to_target(EPOCHS, target_accuracy=0.95) is None
    assert time_to_target([{"epoch": 0, "epoch_time_s": 1.0}], target_loss=9.0) is None
    with pytest.raises(ValueError, match="exactly one"):
        time_to_target(EPOCHS, target_loss=0.3, target_accuracy=0.9)


def test_targets_and_lr_scaling_in_sweep_configurations():
    with pytest.raises(ConfigError, match="--target-accuracy 1.5"):
        Target(accuracy=1.5)
    with pytest.raises(ConfigError, match="one target"):
        Target()
    base = JobConfig(dataset="digits", batch_size=32, lr=0.05, epochs=2)
    assert sweep_config(base, 4, "weak", scale_lr=True).lr == pytest.approx(0.2)
    assert sweep_config(base, 4, "weak").lr == 0.05
    assert sweep_config(base, 4, "strong", scale_lr=True).lr == 0.05  # global batch fixed


def test_warmup_ramps_from_eta_to_k_eta_as_goyal_et_al():
    # η = 0.1 to kη = 0.4 over 4 steps, then kη (Goyal et al. 2017, sec. 2.2)
    assert [warmup_lr(0.4, s, 4, 0.1) for s in range(6)] == pytest.approx(
        [0.1, 0.175, 0.25, 0.325, 0.4, 0.4])
    assert warmup_lr(0.4, 0, 0, 0.1) == 0.4
    cfg = JobConfig(lr=0.4, warmup_epochs=1)
    assert warmup_start(cfg, 4) == pytest.approx(0.1)          # k = 4 ranks, each its batch
    assert warmup_start(dataclasses.replace(cfg, warmup_start_lr=0.2), 4) == 0.2
    base = JobConfig(dataset="digits", batch_size=32, lr=0.05, warmup_epochs=0.5)
    weak = sweep_config(base, 4, "weak", scale_lr=True)
    assert (weak.lr, weak.warmup_start_lr) == pytest.approx((0.2, 0.05))
    assert sweep_config(base, 4, "strong").warmup_start_lr == 0.05   # lr unchanged: no ramp
    with pytest.raises(ConfigError, match="--warmup-epochs"):
        JobConfig(warmup_epochs=-1).validate()


def test_linear_scaling_rule_cuts_the_steps_and_the_same_lr_does_not():
    base = JobConfig(model="mlp", width=64, dataset="digits", batch_size=32, lr=0.05,
                     warmup_epochs=0.5)
    scaled = [r["steps"] for r in batch_scan(base, [32, 128], 0.9)]
    same = batch_scan(base, [128], 0.9, scale_lr=False, max_epochs=16)[0]["steps"]
    assert scaled[1] < 0.5 * scaled[0]          # 4x the batch: well under half the steps
    assert same is not None and same > 0.7 * scaled[0]   # 4x the batch, about the same steps


def test_scale_reports_time_to_target_and_strong_runs_reach_it_in_the_same_epoch(
        tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "scale", "--engine", "torch", "--np", "1,2",
         "--mode", "strong", "--model", "mlp", "--width", "32", "--dataset", "digits",
         "--epochs", "3", "--batch-size", "32", "--target-accuracy", "0.8",
         "--runs-dir", str(tmp_path), "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = doc["rows"]
    assert all(r["time_to_target_s"] > 0 for r in rows)
    assert rows[0]["target_speedup"] == pytest.approx(1.0)
    assert rows[1]["target_speedup"] == pytest.approx(
        rows[0]["time_to_target_s"] / rows[1]["time_to_target_s"])
    reached = []
    for run_id, row in zip(doc["runs"], rows, strict=True):
        epochs = [e for e in of_kind(load_run(run_id, tmp_path).metrics(), "epoch")
                  if e["rank"] == 0]
        first = next(e["epoch"] for e in epochs if e["val_accuracy"] >= 0.8)
        reached.append(first)
        assert row["time_to_target_s"] == pytest.approx(
            sum(e["epoch_time_s"] for e in epochs if e["epoch"] <= first))
    assert reached[0] == reached[1]  # same global batch, same steps: same epoch on target


def test_compare_to_first_relates_every_run_to_the_first():
    from types import SimpleNamespace

    from workbench.scaling.sweep import SweepPoint, compare_to_first

    def point(np, rate, ttt):
        return SweepPoint(np=np, run_id="r", status="succeeded", time_s=1.0,
                          samples_per_s=rate, summary={}, time_to_target_s=ttt)

    sweeps = {"strong": SimpleNamespace(points=[point(1, 100.0, 4.0), point(2, 180.0, 2.2)]),
              "weak": SimpleNamespace(points=[point(2, 190.0, None)])}
    rows = compare_to_first(sweeps)
    assert [r["run"] for r in rows] == ["np=1, strong", "np=2, strong", "np=2, weak"]
    assert [r["throughput_speedup"] for r in rows] == pytest.approx([1.0, 1.8, 1.9])
    assert rows[1]["target_speedup"] == pytest.approx(4.0 / 2.2)
    assert rows[2]["target_speedup"] is None      # never reached the target
