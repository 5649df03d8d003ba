"""Losing a rank mid-run, checkpoints, and resuming to the same final parameters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import workbench
from workbench.cli import main as cli_main
from workbench.config import ConfigError, JobConfig
from workbench.records import events, list_runs, of_kind

# digits: 1,617 training samples; 2 ranks x 32 = 25 steps per epoch, so step 60 is in epoch 3
SMALL = dict(np=2, model="mlp", width=32, dataset="digits", epochs=3, batch_size=32,
             lr=0.05, momentum=0.9, weight_decay=1e-3,  # optimizer state that must be saved
             threads_per_rank=1, checkpoint_every=1)


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    """The parameters of the run that never failed: one process with the global batch of 64,
    which takes the very steps of 2 ranks x 32 (tests/launch/test_engine.py checks that
    invariant, with momentum and weight decay too); one run serves both engines."""
    job = workbench.start(JobConfig(**{**SMALL, "engine": "serial", "np": 1, "batch_size": 64},
                                    runs_dir=str(tmp_path_factory.mktemp("whole"))))
    assert job.wait(180) == "succeeded", job.summary
    return job.record().model_state()


@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_a_lost_rank_ends_the_job_and_resuming_reaches_the_uninterrupted_parameters(
        tmp_path, engine, capsys, uninterrupted):
    runs = str(tmp_path)
    broken = workbench.start(JobConfig(engine=engine, runs_dir=runs, fail_rank=1,
                                       fail_at_step=60, **SMALL))
    assert broken.wait(180) == "failed"
    failure = broken.summary["failure"]
    assert failure["rank"] == 1 and "failed on purpose at step 60" in failure["error"]
    steps = {s["step"] for s in of_kind(broken.metrics(), "step")}
    assert max(steps) < 60 + 1  # nobody got past the lost rank's step
    saved = events(broken.metrics(), "checkpoint")
    assert [e["epochs_done"] for e in saved] == [1, 2]
    assert not list(broken.run_dir.glob(".*.tmp"))  # written atomically
    state = torch.load(broken.run_dir / "checkpoint.pt", weights_only=True)
    assert state["epochs_done"] == 2 and state["optimizer"]["state"]  # momentum buffers

    if engine == "torch":  # from the command line, with nothing but the run id
        assert cli_main(["run", "--resume", broken.run_id, "--runs-dir", runs]) == 0
        resumed = list_runs(runs)[-1]
        assert "continue from its last checkpoint" not in capsys.readouterr().out
    else:  # from Python
        job = workbench.start(JobConfig(resume=broken.run_id, runs_dir=runs))
        assert job.wait(180) == "succeeded", job.summary
        resumed = job.record()
    assert resumed.config["fail_at_step"] == 0 and resumed.config["epochs"] == 3
    metrics = resumed.metrics()
    assert events(metrics, "resumed")[0]["epochs_done"] == 2
    assert {e["epoch"] for e in of_kind(metrics, "epoch")} == {2}  # only the lost epoch
    worst = max_difference(resumed.model_state(), uninterrupted)
    assert worst < 1e-5, f"{engine}: resumed parameters differ by {worst:g}"


def test_resume_needs_a_run_with_a_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="--resume 'nope'.*no run"):
        workbench.start(JobConfig(resume="nope", runs_dir=str(tmp_path)))
    job = workbench.start(JobConfig(engine="serial", np=1, epochs=1, max_steps=2,
                                    runs_dir=str(tmp_path)))
    assert job.wait(120) == "succeeded"
    with pytest.raises(ConfigError, match="saved no checkpoint.*--checkpoint-every"):
        workbench.start(JobConfig(resume=job.run_id, runs_dir=str(tmp_path)))
    assert cli_main(["run", "--resume", "nope", "--runs-dir", str(tmp_path)]) == 2


def test_fault_fields_are_checked_before_launch():
    with pytest.raises(ConfigError, match="--fail-rank 2.*below np=2"):
        JobConfig(np=2, fail_rank=2, fail_at_step=5).validate()
    with pytest.raises(ConfigError, match="--checkpoint-every"):
        JobConfig(checkpoint_every=-1).validate()
    JobConfig(np=2, fail_rank=2).validate()  # no failure asked for: any rank is fine


def test_the_failure_report_says_how_to_resume(tmp_path, capsys):
    code = cli_main(["run", "--engine", "serial", "--np", "1", "--epochs", "2",
                     "--checkpoint-every", "1", "--fail-rank", "0", "--fail-at-step", "60",
                     "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    run_id = list_runs(tmp_path)[-1].run_id
    assert f"workbench run --resume {run_id} --runs-dir {Path(tmp_path).resolve()}" in out


def test_resume_keeps_every_field_the_caller_passed_even_at_its_default(tmp_path):
    """Inherited from the resumed run: only what the caller left out (JobConfig.given)."""
    from workbench.records.resume import CHECKPOINT, apply_resume

    run = tmp_path / "20200101-000000-old-np2-abcd"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"epochs": 5, "lr": 0.5, "fail_at_step": 3,
                                                 "engine": "torch"}))
    (run / CHECKPOINT).write_bytes(b"")
    cfg = apply_resume(JobConfig(resume=run.name, runs_dir=str(tmp_path), epochs=3))
    assert (cfg.epochs, cfg.lr, cfg.engine, cfg.fail_at_step) == (3, 0.5, "torch", 0)
    assert cfg.resume == str(run)
