"""The device a job computes on: refused in one line before launch when it cannot work,
and a CPU job's ranks never touch CUDA.

A machine with GPUs is played by replacing `devices.gpu_count`, the one function that asks
how many GPUs are visible; everything else (Horovod's build, the launchers) is real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import workbench
from workbench.cli import main as cli_main
from workbench.config import ConfigError, JobConfig
from workbench.launch import devices
from workbench.records import events

SMALL = dict(model="mlp", width=16, dataset="digits", epochs=1, max_steps=3,
             threads_per_rank=1, batch_size=16)


def refused(capsys, *flags: str, runs: Path) -> str:
    """Run `workbench run FLAGS`, expect exit code 2 and nothing launched; return the error."""
    try:
        code = cli_main(["run", *flags, "--runs-dir", str(runs)])
    except SystemExit as exc:      # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not runs.exists() or not any(runs.iterdir()), "nothing may launch"
    return err


def test_gpu_count_is_what_torch_sees() -> None:
    assert devices.gpu_count() == (torch.cuda.device_count() if torch.version.cuda else 0)


def test_cuda_without_cuda_is_refused_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    err = refused(capsys, "--engine", "torch", "--np", "1", "--device", "cuda",
                  runs=tmp_path / "runs")
    assert "--device 'cuda'" in err and "no CUDA GPU" in err and "--device cpu" in err


def test_unknown_device_is_refused_in_one_line(tmp_path, capsys) -> None:
    err = refused(capsys, "--device", "tpu", runs=tmp_path / "runs")
    assert "--device" in err and "cpu, cuda, auto" in err


def test_more_ranks_than_gpus_is_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    err = refused(capsys, "--engine", "torch", "--np", "2", "--device", "cuda",
                  runs=tmp_path / "runs")
    assert "2 ranks on one host but only 1 GPU(s)" in err and "--np 1" in err


def test_gpus_are_counted_per_host(monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    cfg = JobConfig(engine="horovod", np=5, hosts="a:3,b:2", device="cuda")
    assert devices.ranks_per_host(cfg) == 3
    with pytest.raises(ConfigError, match="3 ranks on one host but only 2 GPU"):
        devices.resolve_device(cfg)
    assert devices.ranks_per_host(JobConfig(engine="horovod", np=4, hosts="a:2,b:2")) == 2


def test_horovod_without_nccl_is_refused_with_the_rebuild(monkeypatch) -> None:
    """The real Horovod here is a CPU build: on a machine with GPUs it must be refused."""
    import horovod.torch as hvd

    if hvd.nccl_built():
        pytest.skip("this Horovod was built with NCCL: there is nothing to refuse here")
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    cfg = JobConfig(engine="horovod", np=2, device="cuda")
    with pytest.raises(ConfigError) as info:
        workbench.start(cfg)
    message = str(info.value)
    assert "\n" not in message
    assert "built without NCCL" in message and "make horovod" in message


def test_auto_picks_cuda_only_where_every_rank_gets_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    cfg, note = devices.resolve_device(JobConfig(engine="torch", np=2, device="auto"))
    assert cfg.device == "cuda" and note is None
    cfg, note = devices.resolve_device(JobConfig(engine="torch", np=3, device="auto"))
    assert cfg.device == "cpu" and "3 ranks on one host" in note
    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    cfg, note = devices.resolve_device(JobConfig(engine="torch", np=1, device="auto"))
    assert cfg.device == "cpu" and "no CUDA GPU" in note


@pytest.mark.parametrize("engine", ["torch", "horovod"])
def test_cpu_job_ranks_never_initialise_cuda(tmp_path, engine) -> None:
    """Every rank reports, when training starts, that CUDA is hidden from it and that no
    CUDA context exists in it; the job's record says it ran on the CPU."""
    job = workbench.start(JobConfig(engine=engine, np=2, runs_dir=str(tmp_path / "runs"),
                                    **SMALL))
    assert job.wait(120) == "succeeded", job.summary
    ready = {e["rank"]: e for e in events(job.metrics(), "ready")}
    assert sorted(ready) == [0, 1]
    for rank, event in ready.items():
        assert event["device"] == "cpu", rank
        assert event["cuda_visible_devices"] == "", rank
        assert event["cuda_initialized"] is False, rank
        assert event["timing"].startswith("wall clock"), rank
    assert job.record().config["device"] == "cpu"
    cached = list((tmp_path / "runs").glob(f".cache-uid{os.getuid()}/*/digits-float32-*.x.npy"))
    assert len(cached) == 1, "the ranks of a host share one prepared copy of the data"


def test_panel_offers_the_device_only_where_cuda_exists(tmp_path, monkeypatch) -> None:
    from workbench.ui import TrainingPanel

    fields = dict(runs_dir=str(tmp_path), engine="torch", np=2, **SMALL)
    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    panel = TrainingPanel(**fields)
    try:
        assert "device" not in panel.controls       # no CUDA: the CPU is the only choice
    finally:
        panel.close()
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    panel = TrainingPanel(**fields)
    try:
        assert list(panel.controls["device"].options) == ["cpu", "cuda", "auto"]
        assert panel.controls["device"].value == "cpu"
        panel.controls["device"].value = "cuda"
        panel.controls["np"].value = 3
        panel.start_button.click()
        assert "not valid" in panel.status.value and panel.job is None
        assert "3 ranks on one host but only 2 GPU" in panel.alert.value
    finally:
        panel.close()


def test_compute_sync_chart_names_the_clock() -> None:
    from workbench.ui.run_charts import RunCharts

    charts = RunCharts(np=1)
    assert "CUDA" not in charts.figures["share"].xaxis.axis_label
    charts.add([{"kind": "event", "rank": 0, "time": 1.0, "message": "ready",
                 "device": "cuda:0", "timing": "CUDA events (GPU timeline)"}])
    assert charts.figures["share"].xaxis.axis_label == (
        "rank; timed by CUDA events (GPU timeline) on cuda:0")


def test_allreduce_bench_on_cuda_without_cuda_is_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    code = cli_main(["bench", "allreduce", "--engine", "torch", "--np", "2", "--device", "cuda",
                     "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "no CUDA GPU" in err


class CountingClock:
    """A wall clock that counts how often the loop waits for a step to finish, and how many
    marks had been taken by then."""

    what = "counting wall clock"

    def __init__(self) -> None:
        from workbench.training.timing import WallClock

        self.inner, self.settled, self.marks, self.settled_after = WallClock(), 0, 0, []

    def mark(self):
        self.marks += 1
        return self.inner.mark()

    def settle(self, mark) -> None:
        self.settled += 1
        self.settled_after.append(self.marks)

    def seconds(self, start, end) -> float:
        return self.inner.seconds(start, end)


class FakeContext:
    """What `train` needs of a RankContext: one rank, its config, and a metrics sink."""

    def __init__(self, cfg: JobConfig) -> None:
        self.config, self.rank, self.size, self.local_rank = cfg, 0, 1, 0
        self.lines: list[dict] = []

    def metric(self, kind: str, *rows: dict, **fields) -> None:
        self.lines += [{"kind": kind, **row} for row in rows or [fields]]

    def now(self) -> float:
        return 0.0


def test_the_loop_waits_once_per_batch_of_lines_a_batch_late_never_for_the_whole_device(
        tmp_path, monkeypatch) -> None:
    """The timing contract that makes GPU timing honest and cheap, checked on the CPU: the
    clock is settled once per batch of step lines, at the copy of their losses and right
    answers to the host, only once later steps are queued (their marks taken), so the GPU
    never waits for the host; and torch.cuda.synchronize (which would also wait for NCCL's
    queued allreduces) is never called. In batches of one step (`StepLog.every_s` 0) each
    step's copy is settled once the next step has taken its four marks."""
    from workbench.models import make_optimizer
    from workbench.training import loop
    from workbench.training.setup import build
    from workbench.training.synchronizer import Synchronizer
    from workbench.training.timing import StepLog

    def no_full_sync(*_args, **_kwargs):
        raise AssertionError("torch.cuda.synchronize called in the training loop")

    monkeypatch.setattr(torch.cuda, "synchronize", no_full_sync)
    cfg = JobConfig(engine="serial", np=1, runs_dir=str(tmp_path), **SMALL).validate()
    for flush_s, settled_after in ((0.0, lambda n: [5 * s + 9 for s in range(n - 1)] + [5 * n]),
                                   (3600.0, lambda n: [4 * n + 1])):
        monkeypatch.setattr(StepLog, "every_s", flush_s)
        setup = build(cfg, torch.device("cpu"))
        setup.clock = clock = CountingClock()
        ctx = FakeContext(cfg)
        optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr, 0.0, 0.0)
        loop.train(ctx, setup, optimizer, Synchronizer())
        steps = [line for line in ctx.lines if line["kind"] == "step"]
        n = len(steps)
        assert n == cfg.max_steps and [s["step"] for s in steps] == list(range(n))
        assert clock.settled_after == settled_after(n), flush_s
        ready = next(line for line in ctx.lines if line.get("message") == "ready")
        assert ready["timing"] == "counting wall clock"


def test_a_step_that_fails_leaves_the_line_of_the_step_before(tmp_path) -> None:
    """Lines are written later than their steps; a rank that fails (here on purpose, at
    step 2) still writes the lines of its whole steps."""
    from workbench.models import make_optimizer
    from workbench.training.lab_hooks import InjectedFault
    from workbench.training.loop import train
    from workbench.training.setup import build
    from workbench.training.synchronizer import Synchronizer

    cfg = JobConfig(engine="serial", np=1, runs_dir=str(tmp_path), fail_rank=0,
                    fail_at_step=2, **SMALL).validate()
    setup = build(cfg, torch.device("cpu"))
    ctx = FakeContext(cfg)
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr, 0.0, 0.0)
    with pytest.raises(InjectedFault):
        train(ctx, setup, optimizer, Synchronizer())
    assert [line["step"] for line in ctx.lines if line["kind"] == "step"] == [0, 1]


def test_the_naive_engine_stays_on_the_cpu(monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpu_count", lambda: 8)     # GPUs enough for the others
    cfg, note = devices.resolve_device(JobConfig(engine="naive", np=2, device="auto"))
    assert cfg.device == "cpu" and "naive engine runs on CPUs" in note
    with pytest.raises(ConfigError, match="naive engine runs on CPUs"):
        devices.resolve_device(JobConfig(engine="naive", np=2, device="cuda"))
    assert devices.resolve_device(JobConfig(engine="torch", np=2, device="auto"))[0].device \
        == "cuda"


def test_cuda_through_slurm_is_refused_until_slurm_jobs_request_gpus(monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpu_count", lambda: 8)     # a login node with GPUs
    with pytest.raises(ConfigError, match="requests no GPUs"):
        devices.resolve_device(JobConfig(engine="torch", np=2, device="cuda", launcher="slurm"))
    cfg, note = devices.resolve_device(JobConfig(engine="torch", np=2, device="auto",
                                                 launcher="slurm"))
    assert cfg.device == "cpu" and "requests no GPUs" in note
