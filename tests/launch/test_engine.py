"""The job engine, with real horovodrun and real torchrun (no mocks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch
from _session_pools import rank_pids

import workbench
from workbench.cli import main as cli_main
from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES
from workbench.hosts.cpu import cpu_budget
from workbench.launch import cores as cores_module
from workbench.launch.launchers import job_processes
from workbench.lessons.runs import step_split
from workbench.records import MetricsReader, events, load_run, of_kind
from workbench.sharded.costmodel import STRATEGY_OF
from workbench.sharded.measured import comparison
from workbench.training.sharding import holdout_split

SMALL = dict(model="mlp", width=32, dataset="digits", epochs=1, threads_per_rank=1,
             stall_timeout=120.0)


def run_job(tmp_path: Path, **fields) -> workbench.Job:
    job = workbench.start(workbench.JobConfig(runs_dir=str(tmp_path / "runs"),
                                              **{**SMALL, **fields}))
    assert job.wait(180) == "succeeded", job.summary
    return job


def ready_cores(job: workbench.Job) -> dict[int, list[int]]:
    """The cores each rank reported it may run on when training started."""
    return {e["rank"]: e["cores"] for e in events(job.metrics(), "ready")}


def wait_for(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def no_process_left(job: workbench.Job) -> bool:
    return job_processes(job.run_id) == []


# ----------------------------------------------------------------- the central invariant
OPTIMIZERS = {
    "sgd": dict(optimizer="sgd", lr=0.1),
    "momentum+wd": dict(optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": dict(optimizer="adam", lr=0.01),
    "adam+wd": dict(optimizer="adam", lr=0.01, weight_decay=1e-3),
}
#: The (optimizer, N) cases, each run on every engine: each catches bugs the others cannot.
CASES = [
    # Plain SGD is linear in the gradient, so it catches every mistake in the average
    # itself: summed instead of averaged, divided by a fixed 2, a rank left out; and N = 3
    # (an odd world, not a power of two, 48 samples a step) catches sharding that drops or
    # repeats samples and a ring whose chunks are cut for two ranks only.
    ("sgd", 3),
    # Momentum and weight decay carry state from step to step: they catch a momentum buffer
    # fed the local gradient instead of the average, or weight decay applied twice (once
    # per rank before the average and again in the step).
    ("momentum+wd", 2),
    # Adam is not linear: averaging the *parameters* after local steps equals averaging the
    # gradients for SGD and momentum, but not for Adam, so only this case catches it. (Adam
    # is scale-invariant, so it could not catch a sum instead of an average: SGD does.)
    ("adam", 2),
]


#: (engine, optimizer, ranks) of the invariant's runs: every replicating engine on each of the
#: CASES; the sharded engines (workbench/sharded/) at 2 ranks with SGD, momentum and Adam with
#: weight decay (Adam's state is what ZeRO shards, weight decay what a shard-local step could
#: apply to the wrong slice).
INVARIANT_RUNS = [(engine, opt, world) for engine in ("horovod", "torch", "naive")
                  for opt, world in CASES] + [
    (engine, opt, 2) for engine in ("zero1", "zero2", "fsdp")
    for opt in ("sgd", "momentum+wd", "adam+wd")]


@pytest.fixture(scope="module")
def serial_params(tmp_path_factory) -> dict:
    """Serial runs with batch N*b, computed once per (optimizer, N)."""
    cache: dict = {}

    def get(opt: str, world: int):
        if (opt, world) not in cache:
            tmp = tmp_path_factory.mktemp(f"serial-{opt}-{world}")
            job = run_job(tmp, engine="serial", np=1, batch_size=16 * world, **OPTIMIZERS[opt])
            cache[opt, world] = job.record().model_state()
        return cache[opt, world]

    return get


@pytest.mark.parametrize(("engine", "opt", "world"), INVARIANT_RUNS,
                         ids=[f"{e}-{o}-np{w}" for e, o, w in INVARIANT_RUNS])
def test_n_ranks_with_batch_b_equal_serial_with_batch_nb(tmp_path, serial_params, warm,
                                                         engine, opt, world):
    if world == 2:  # on warm ranks (conftest.py's `warm`): 15 of the 18 runs
        job = run_job(warm(engine), engine=engine, np=2, batch_size=16, cpu_bind="none",
                      **OPTIMIZERS[opt])
        assert job.summary.get("pool"), "the 2-rank runs are the warm ranks' calls"
    else:
        job = run_job(tmp_path, engine=engine, np=world, batch_size=16, **OPTIMIZERS[opt])
    parallel = job.record().model_state()
    serial = serial_params(opt, world)
    assert parallel.keys() == serial.keys()
    worst = max(float((parallel[k] - serial[k]).abs().max()) for k in serial)
    assert worst < 1e-5, f"{engine} np={world} {opt}: parameters differ by {worst:g}"
    train_samples = len(holdout_split(1797, 0, JobConfig().val_fraction)[0])
    assert job.summary["steps_completed"] == train_samples // (16 * world)  # a full epoch
    if engine in STRATEGY_OF:  # DDP and the sharded engines also report their bytes
        check_footprint(job, engine, world)


def test_at_four_ranks_each_strategy_holds_sends_and_trains_as_the_model_says(
        tmp_path_factory, serial_params):
    """DDP, ZeRO-1, ZeRO-2 and FSDP at N = 4, as calls on one pool of 4 warm torch ranks: the
    cost model's bytes held and sent per rank (the 2-rank runs above check N = 2, test_sharded
    N = 1), and the invariant. The model's 3,466 parameters are not a multiple of 4, so the
    sharded engines pad their shards: a pad counted as a parameter, or a padded slice stepped
    or gathered into the wrong place, fails here and nowhere else."""
    root = tmp_path_factory.mktemp("four-ranks")
    serial = serial_params("adam+wd", 4)
    with workbench.ranks(np=4, engine="torch", runs_dir=str(root / "runs"), cpu_bind="none"):
        for engine in ("torch", "zero1", "zero2", "fsdp"):
            job = run_job(root, engine=engine, np=4, batch_size=16, cpu_bind="none",
                          **OPTIMIZERS["adam+wd"])
            assert job.summary.get("pool"), "a call on the 4 warm ranks"
            parallel = job.record().model_state()
            worst = max(float((parallel[k] - serial[k]).abs().max()) for k in serial)
            assert worst < 1e-5, f"{engine} np=4: parameters differ by {worst:g}"
            check_footprint(job, engine, 4)


def check_footprint(job: workbench.Job, engine: str, world: int) -> None:
    """Every rank's bytes held and sent per step are the cost model's, within 5%."""
    rows = comparison(job)
    assert {r["rank"] for r in rows} == set(range(world))
    for row in rows:
        assert abs(row["ratio"] - 1) <= 0.05, f"{engine} np={world}: {row}"
    steps = [line for line in of_kind(job.metrics(), "step") if line["rank"] == 0]
    assert len({line["sent_bytes"] for line in steps}) == 1  # every step sends the same


# ----------------------------------------------------------------- lifecycle
def test_stop_ends_every_process_within_5_seconds(tmp_path):
    job = workbench.start(workbench.JobConfig(
        engine="horovod", np=2, runs_dir=str(tmp_path), **{**SMALL, "epochs": 500}))
    wait_for(lambda: of_kind(job.metrics(), "step"), what="first step")
    pids = rank_pids(job.run_dir)
    assert len(pids) == 2
    t0 = time.time()
    job.stop()
    assert time.time() - t0 < 5.0
    assert job.status == "stopped"
    assert no_process_left(job)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                   for p in pids.values())
    assert json.loads((job.run_dir / "summary.json").read_text())["status"] == "stopped"


def test_kill_9_of_one_rank_fails_the_job_and_names_it(tmp_path):
    job = workbench.start(workbench.JobConfig(
        engine="horovod", np=2, runs_dir=str(tmp_path), **{**SMALL, "epochs": 500}))
    wait_for(lambda: of_kind(job.metrics(), "step") and len(rank_pids(job.run_dir)) == 2,
             what="both ranks training")
    steps_before = len(of_kind(job.metrics(), "step"))
    os.kill(rank_pids(job.run_dir)[1], signal.SIGKILL)
    t0 = time.time()
    assert job.wait(15) == "failed"
    assert time.time() - t0 < 10.0
    summary = job.summary
    assert summary["failure"]["rank"] == 1
    assert "without reporting" in summary["failure"]["error"]
    assert no_process_left(job)
    # the record written before the crash stays readable
    record = load_run(job.run_dir)
    assert record.status == "failed"
    assert len(of_kind(record.metrics(), "step")) >= steps_before


def test_exception_in_a_rank_is_reported_with_its_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "nothing-here"))
    job = workbench.start(workbench.JobConfig(engine="torch", np=2, runs_dir=str(tmp_path),
                                              **{**SMALL, "dataset": "mnist", "model": "mlp"}))
    assert job.wait(120) == "failed"
    failure = job.summary["failure"]
    assert failure["rank"] in (0, 1)
    assert "FileNotFoundError" in failure["error"] and "never downloads" in failure["error"]
    assert "Traceback" in failure["traceback"]
    assert no_process_left(job)


def test_no_progress_marks_the_job_stalled(tmp_path):
    job = workbench.start(workbench.JobConfig(
        engine="horovod", np=2, runs_dir=str(tmp_path),
        **{**SMALL, "epochs": 50, "straggler_delay": 30.0, "stall_timeout": 3.0}))
    assert job.wait(90) == "stalled"
    assert "no progress" in job.summary["failure"]["error"]
    assert no_process_left(job)


def test_ranks_exit_when_the_process_that_started_them_dies(tmp_path):
    script = textwrap.dedent(f"""
        import time, workbench
        job = workbench.start(workbench.JobConfig(engine="horovod", np=2,
              runs_dir={str(tmp_path)!r}, model="mlp", dataset="digits", epochs=500,
              threads_per_rank=1))
        print(job.run_dir, flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    run_dir = Path(owner.stdout.readline().strip())
    wait_for(lambda: len(rank_pids(run_dir)) == 2, what="ranks to start")
    owner.kill()
    owner.wait()
    wait_for(lambda: job_processes(run_dir.name) == [], timeout=15,
             what="ranks to exit after their owner died")


def test_ctrl_c_during_workbench_run_stops_the_job(tmp_path):
    err = tmp_path / "stderr.txt"
    with open(err, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "run", "--engine",
                                 "horovod", "--np", "2", "--epochs", "500",
                                 "--threads-per-rank", "1", "--runs-dir", str(tmp_path / "runs")],
                                stdout=subprocess.PIPE, stderr=err_file, text=True,
                                env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        first = proc.stdout.readline()
        assert first.startswith("run ")
        run_dir = Path(first.rsplit("-> ", 1)[1].strip())
        wait_for(lambda: of_kind(MetricsReader(run_dir).all(), "step"),
                 what="training to start")
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:  # where is it stuck? faulthandler prints it
            proc.send_signal(signal.SIGABRT)
            proc.wait(10)
            raise AssertionError("still running 30 s after Ctrl-C:\n"
                                 f"{err.read_text()[-6000:]}") from None
        assert rc == 130, err.read_text()[-3000:]
    finally:  # never leave a job behind for the tests that follow
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert load_run(run_dir).status == "stopped"
    assert job_processes(run_dir.name) == []


def test_naive_engine_is_started_by_torchrun():
    command = ENGINES["naive"].command(2, ENGINES["naive"].rank_module, [], None, "run-id")
    assert command[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert command[-2:] == ["-m", "workbench.training.naive_rank"]


def test_naive_engine_starts_with_torchrun_and_stops(tmp_path):
    job = workbench.start(workbench.JobConfig(
        engine="naive", np=2, runs_dir=str(tmp_path), **{**SMALL, "epochs": 500}))
    assert json.loads((job.run_dir / "config.json").read_text())["engine"] == "naive"
    wait_for(lambda: {s["rank"] for s in of_kind(job.metrics(), "step")} == {0, 1},
             what="both ranks training")
    assert sorted(e["rank"] for e in events(job.metrics(), "init")) == [0, 1]
    split = step_split(job)  # the row notebook 02 shows for this engine
    # Rings of messages between processes, not the microsecond of two clock reads:
    assert split["engine"] == "naive" and split["sync_ms"] > 0.05
    assert split["compute_ms"] + split["sync_ms"] <= split["step_ms"]
    pids = rank_pids(job.run_dir)
    t0 = time.time()
    job.stop()
    assert time.time() - t0 < 5.0 and job.status == "stopped"
    assert no_process_left(job)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                   for p in pids.values())


def test_naive_engine_names_the_rank_that_failed(tmp_path):
    job = workbench.start(workbench.JobConfig(engine="naive", np=2, runs_dir=str(tmp_path),
                                              fail_rank=1, fail_at_step=3, **SMALL))
    assert job.wait(180) == "failed"
    failure = job.summary["failure"]
    assert failure["rank"] == 1 and "failed on purpose at step 3" in failure["error"]
    assert no_process_left(job)


# ----------------------------------------------------------------- the record of a run
def test_four_jobs_at_once_find_free_ports_and_each_keeps_its_record_and_cores(tmp_path,
                                                                              monkeypatch):
    """Four jobs started at once, two per launcher, so that each launcher must find ports
    of its own; then each shows what its kind of run must:

    - Horovod bound to cores: the whole record (config, metrics, logs, summary, model),
      the cycle time reached Horovod in every rank, one core for each rank;
    - Horovod and DDP with `cpu_bind="none"`: every rank may run on every core;
    - DDP with one rank more than the cores: it warns, waits for the bound job's cores, then
      takes them all, records its threads, and the extra rank wraps round to core 0.

    The four share a queue of their own: behind another test's waiting job the crowded one
    would queue, and warn later from the queue rather than from the caller's line.
    """
    monkeypatch.setenv(cores_module.ENV_SHARED_DIR, str(tmp_path / "shared"))
    cores = os.cpu_count() or 1
    allowed = sorted(os.sched_getaffinity(0))

    def start(**fields) -> workbench.Job:
        return workbench.start(workbench.JobConfig(runs_dir=str(tmp_path),
                                                   **{**SMALL, **fields}))

    recorded = start(engine="horovod", np=2, epochs=2, lr=0.2, cycle_time_ms=2.5)
    unbound = [start(engine=engine, np=2, cpu_bind="none") for engine in ("horovod", "torch")]
    with pytest.warns(UserWarning) as said:
        crowded = start(engine="torch", np=cores + 1)
    ours = [w for w in said if "flatten" in str(w.message)]
    assert len(ours) == 1 and ours[0].filename == __file__  # the caller's line
    assert crowded.status == "queued" and recorded.run_id in crowded.waiting_for
    jobs = [recorded, *unbound, crowded]
    assert [j.wait(240) for j in jobs] == ["succeeded"] * 4, [j.summary for j in jobs]
    assert len({j.run_id for j in jobs}) == 4
    for job in unbound:
        assert ready_cores(job) == {r: allowed for r in (0, 1)}
    assert crowded.summary["threads_per_rank"] == 1
    assert any("it takes them all" in w for w in crowded.summary["warnings"])
    assert ready_cores(crowded)[cores] == allowed[:1]  # one rank too many: wraps to core 0

    job = recorded
    inits = events(job.metrics(), "init")
    assert sorted(e["rank"] for e in inits) == [0, 1]
    assert all(e["cycle_time_ms"] == 2.5 for e in inits)  # reached Horovod in every rank
    assert ready_cores(job) == {0: allowed[:1], 1: allowed[1:2]}  # bound: one core each
    d = job.run_dir
    assert json.loads((d / "config.json").read_text())["engine"] == "horovod"
    steps = of_kind(job.metrics(), "step")
    assert {s["rank"] for s in steps} == {0, 1}
    assert all(s["compute_s"] >= 0 and s["sync_s"] >= 0 for s in steps)
    assert {"loss", "accuracy", "samples", "time", "epoch", "step"} <= set(steps[0])
    assert (d / "logs" / "rank0.log").exists() and (d / "logs" / "rank1.log").exists()
    for r in (0, 1):  # step() ran in skip_synchronize(): Horovod did not allreduce twice
        assert "skip_synchronize" not in (d / "logs" / f"rank{r}.log").read_text()
    summary = job.summary
    assert summary["status"] == "succeeded" and summary["samples_per_s"] > 0
    assert summary["versions"]["torch"] and summary["versions"]["horovod"]
    assert summary["final_loss"] < 2.0  # started near ln(10) = 2.30: it learned
    state = job.record().model_state()
    assert all(isinstance(v, torch.Tensor) for v in state.values())


def test_metrics_reader_holds_back_a_partial_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "step", "a": 1}\n{"kind": "st')
    reader = MetricsReader(tmp_path)  # its metrics.jsonl: an older run folder's one file
    assert reader.read_new() == [{"kind": "step", "a": 1}]
    with open(path, "a") as f:
        f.write('ep", "a": 2}\n')
    assert reader.read_new() == [{"kind": "step", "a": 2}]


def test_metrics_reader_skips_and_counts_a_line_that_is_not_json_or_not_utf8(tmp_path):
    """A damaged line (a disk error, a crash mid-write on NFS) is counted and skipped; the
    lines around it, and those of the next read, still arrive."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"kind": "step", "a": 1}\n\xff\xfe not utf-8\nnot json\n'
                     b'{"kind": "step", "a": 2}\n')
    reader = MetricsReader(tmp_path)  # its metrics.jsonl: an older run folder's one file
    assert reader.read_new() == [{"kind": "step", "a": 1}, {"kind": "step", "a": 2}]
    assert reader.bad_lines == 2
    with open(path, "ab") as f:
        f.write(b'{"kind": "step", "a": 3}\n')
    assert reader.read_new() == [{"kind": "step", "a": 3}]


def test_run_json_prints_the_summary_alone_and_runs_and_show_read_it_back(tmp_path, capsys):
    """One serial run through the CLI, checked three ways (one job, not one per command).
    It asks for one thread more than the host's cores, so it also shows how the CLI warns:
    each warning once, on one line, beside the JSON rather than in it."""
    runs = str(tmp_path / "runs")
    threads = str(cpu_budget().usable + 1)
    code = cli_main(["run", "--engine", "serial", "--np", "1", "--epochs", "1", "--model",
                     "mlp", "--width", "32", "--dataset", "digits", "--runs-dir", runs, "--json",
                     "--threads-per-rank", threads])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 0 and out["status"] == "succeeded"
    shown = captured.err.splitlines()
    assert len(shown) == 2 and all(line.startswith("warning: ") for line in shown), shown
    assert "threads exceed" in shown[0] and "it takes them all" in shown[1], shown
    assert Path(out["run_dir"]).name == out["run_id"]
    assert cli_main(["runs", "--runs-dir", runs, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in listed] == [out["run_id"]]
    assert cli_main(["show", out["run_id"][-4:], "--runs-dir", runs, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run_id"] == out["run_id"] and shown["status"] == "succeeded"


# ----------------------------------------------------------------- rejected configurations
BAD_INPUTS = [
    (["--engine", "mpi"], "--engine"),
    (["--np", "0"], "--np"),
    (["--np", "two"], "--np"),
    (["--np", "1000"], "--np"),
    (["--engine", "serial", "--np", "4"], "--np"),
    (["--model", "resnet"], "--model"),
    (["--dataset", "imagenet"], "--dataset"),
    (["--epochs", "0"], "--epochs"),
    (["--batch-size", "-3"], "--batch-size"),
    (["--lr", "0"], "--lr"),
    (["--lr", "fast"], "--lr"),
    (["--optimizer", "rmsprop"], "--optimizer"),
    (["--momentum", "1.5"], "--momentum"),
    (["--weight-decay", "-1"], "--weight-decay"),
    (["--seed", "-1"], "--seed"),
    (["--threads-per-rank", "-2"], "--threads-per-rank"),
    (["--engine", "serial", "--np", "1", "--hosts", "a:1"], "--hosts"),
    (["--env", "1BAD=x"], "--env"),
    (["--hosts", "a:0"], "--hosts"),
    (["--hosts", "a:1", "--np", "2"], "--np"),
    (["--model", "cnn", "--dataset", "digits"], "--model"),
    (["--preset", "huge"], "--preset"),
    (["--stall-timeout", "0"], "--stall-timeout"),
    (["--cycle-time-ms", "-1"], "--cycle-time-ms"),
    (["--cpu-bind", "socket"], "--cpu-bind"),
    (["--engine", "torch", "--timeline"], "--timeline"),
    (["--straggler-delay", "1", "--straggler-rank", "5"], "--straggler-rank"),
]


@pytest.mark.parametrize("flags,field", BAD_INPUTS, ids=[" ".join(f) for f, _ in BAD_INPUTS])
def test_bad_input_is_rejected_in_one_line_before_launch(tmp_path, capsys, flags, field):
    runs = tmp_path / "runs"
    try:
        code = cli_main(["run", *flags, "--runs-dir", str(runs)])
    except SystemExit as exc:  # argparse's own type errors
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert field in err and "Traceback" not in err
    assert not runs.exists() or not any(runs.iterdir()), "nothing may launch"


def test_serial_takes_one_rank_unless_told_otherwise():
    """`--engine serial` alone runs its one process (np's default, 2, is not an error); an
    explicit `--np 2` with it is, saying how to fix it."""
    import argparse

    from workbench.flags import add_job_flags, config_from_args

    parser = argparse.ArgumentParser()
    add_job_flags(parser)
    assert config_from_args(parser.parse_args(["--engine", "serial"])).validate().np == 1
    with pytest.raises(ConfigError, match="leave --np out"):
        JobConfig(engine="serial", np=2).validate()


def test_a_runs_dir_that_cannot_be_created_is_one_line_and_exit_2(capsys):
    code = cli_main(["run", "--engine", "serial", "--np", "1", "--runs-dir", "/proc/forbidden"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--runs-dir" in err and "/proc/forbidden" in err


def test_a_preset_never_overrides_a_field_set_explicitly_even_to_its_default():
    default_batch = workbench.JobConfig().batch_size
    cfg = workbench.JobConfig(preset="compute-bound", batch_size=default_batch)
    assert cfg.batch_size == default_batch                  # set by the caller: kept
    assert cfg.model == "cnn" and cfg.samples == 4096       # not set: the preset's
    # Rebuilt from its record (or copied), the configuration stays the same.
    assert workbench.JobConfig.from_dict(cfg.to_dict()) == cfg
    args = ["run", "--preset", "compute-bound", "--batch-size", str(default_batch)]
    from workbench.cli import build_parser
    from workbench.launch.commands import config_from_args
    assert config_from_args(build_parser().parse_args(args)).batch_size == default_batch


def test_a_missing_horovod_is_refused_before_anything_starts(tmp_path, monkeypatch):
    """The check looks for Horovod's compiled extension without importing torch in the
    owner; without it, one line says how to build it, and no run folder is made."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "horovod" else real(name, *a))
    with pytest.raises(workbench.ConfigError, match="make horovod"):
        workbench.start(JobConfig(engine="horovod", np=2, runs_dir=str(tmp_path / "runs")))
    assert not (tmp_path / "runs").exists()
