"""Jobs through Slurm: submitted with sbatch, queued, trained, cancelled, failed by rank.

The real thing: a one-node Slurm cluster (slurmctld, slurmd, munged from Debian's
`slurm-wlm` and `munge`) that `scripts/local_slurm.sh up` starts for this test session and
`down` stops after it (unless it was up already: then it is left as found). The node has
every CPU of this machine, so a 2-rank job of 1 thread per rank holds a 2-core machine.

The tests that need the cluster need root (slurmd starts jobs as their user) and the
packages; without them they are skipped, saying why. The checks of the batch script, of
horovodrun's host list and of bad input need neither.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _session_pools import live_rank_pids, rank_pids

from workbench import JobConfig
from workbench.config import ConfigError
from workbench.launch import Job, slurm, slurm_script, start
from workbench.launch.launchers import job_processes
from workbench.records import MetricsReader, events
from workbench.records.liveness import process_alive as pid_alive

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "local_slurm.sh"
VENV_BIN = Path(sys.executable).parent
DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch")


def _why_no_cluster() -> str | None:
    if os.geteuid() != 0:
        return "needs root: slurmd starts each job as its user"
    missing = [d for d in DAEMONS if not shutil.which(d) and not Path(f"/usr/sbin/{d}").exists()]
    if missing:
        return (f"needs Debian's slurm-wlm and munge ({', '.join(missing)} missing): "
                "run scripts/install_system_deps.sh as root")
    return None


NO_CLUSTER = _why_no_cluster()
needs_cluster = pytest.mark.skipif(NO_CLUSTER is not None, reason=NO_CLUSTER or "")
if NO_CLUSTER:
    print(f"\ntests/launch/test_slurm.py: Slurm tests skipped: {NO_CLUSTER}", file=sys.stderr)

#: Small and quick: a 2-layer MLP on the digits, one thread per rank.
SMALL = dict(np=2, model="mlp", dataset="digits", lr=0.1, threads_per_rank=1,
             stall_timeout=120.0, launcher="slurm")


@pytest.fixture(scope="session")
def cluster() -> Iterator[str]:
    """The local Slurm, started for this session (and stopped after) unless already up."""
    was_up = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0
    if not was_up:
        up = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True)
        assert up.returncode == 0, up.stdout + up.stderr
    conf = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True,
                          text=True).stdout.split("=", 1)[1].strip()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        if not was_up:
            subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True)


@pytest.fixture()
def jobs() -> Iterator[list[Job]]:
    """Jobs a test starts; any still going at its end is cancelled."""
    started: list = []
    yield started
    for item in started:
        if hasattr(item, "close"):  # a panel
            item.close()
        elif not item.done:
            item.stop()


def in_queue(job_id: str) -> bool:
    return slurm.queue_state(job_id) is not None


def wait_for(condition, timeout: float, what: str, period: float = 0.1) -> None:
    end = time.time() + timeout
    while not condition():
        assert time.time() < end, f"timed out after {timeout} s waiting for {what}"
        time.sleep(period)


def assert_no_rank_left(job: Job) -> None:
    left = job_processes(job.run_id)
    assert not left, f"processes of {job.run_id} still running: {[p.pid for p in left]}"


# ---------------------------------------------------------------------- no cluster needed
def test_horovod_hosts_from_slurms_compressed_counts() -> None:
    assert slurm_script.horovod_hosts(["n1", "n2", "n3", "n4"], "2(x3),1") == "n1:2,n2:2,n3:2,n4:1"
    assert slurm_script.horovod_hosts(["vm"], "2") == "vm:2"
    with pytest.raises(ValueError):
        slurm_script.horovod_hosts(["a"], "two")


def test_batch_script_asks_slurm_for_one_task_per_rank(tmp_path: Path) -> None:
    cfg = JobConfig(engine="torch", np=4, nodes=2, partition="gpu", time_limit=30,
                    account="course", sbatch_arg="--qos=debug --mem=4G", threads_per_rank=2,
                    launcher="slurm").validate()
    script = slurm_script.write_scripts(cfg, "run-x", tmp_path, "workbench.training.ddp_rank", [])
    text = script.read_text()
    for option in ("--ntasks=4", "--cpus-per-task=2", "--nodes=2", "--ntasks-per-node=2",
                   "--partition=gpu", "--time=30", "--account=course", "--qos=debug",
                   "--mem=4G", f"--output={tmp_path}/logs/launcher.log"):
        assert f"#SBATCH {option}\n" in text, option
    assert "srun --kill-on-bad-exit=1 --ntasks=4 --cpus-per-task=2 bash" in text
    assert "MASTER_ADDR=$(scontrol show hostnames" in text
    task = (tmp_path / "slurm" / "task.sh").read_text()
    assert "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS" in task
    hvd = slurm_script.write_scripts(JobConfig(engine="horovod", launcher="slurm").validate(), "r",
                              tmp_path, "m", []).read_text()
    assert "--gloo -H \"$HOSTS\"" in hvd and "srun" not in hvd
    # A job whose node fails is not requeued into the same folder: it fails, and a restart
    # that happens all the same (scontrol requeue) ends at once, saying why.
    assert "#SBATCH --no-requeue\n" in text
    assert 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then' in text
    bad = tmp_path / "a\ntouch x"
    with pytest.raises(ConfigError, match="holds a line break") as err:
        slurm_script.write_scripts(cfg, "run-y", bad, "m", [])
    assert "\n" not in str(err.value)
    naive = slurm_script.write_scripts(JobConfig(engine="naive", np=2, launcher="slurm").validate(),
                                "n", tmp_path, "workbench.training.naive_rank", []).read_text()
    assert "MASTER_ADDR=$(scontrol show hostnames" in naive  # meets as the torch engine does
    assert "-m workbench.training.naive_rank" in naive


def test_the_batch_scripts_exit_record_is_renamed_into_place_and_an_empty_one_is_none(
        tmp_path: Path) -> None:
    """Under load the watcher read batch_exit.json between the shell's truncate and its
    write, and the job's watcher failed on the empty file (a node-failure test, one core
    busy): the script now renames the record into place, and an empty one, left by a script
    killed while writing, counts as no record (Slurm's own exit code is used)."""
    cfg = JobConfig(engine="torch", np=2, launcher="slurm").validate()
    text = slurm_script.write_scripts(cfg, "run-x", tmp_path, "m", []).read_text()
    assert '> "$RUN_DIR/slurm/batch_exit.json.tmp"' in text
    assert 'mv "$RUN_DIR/slurm/batch_exit.json.tmp" "$RUN_DIR/slurm/batch_exit.json"' in text
    record = tmp_path / "slurm" / "batch_exit.json"
    assert slurm._batch_exit(tmp_path) == {}
    record.write_text("")
    assert slurm._batch_exit(tmp_path) == {}
    record.write_text('{"rc": 3, "time": 1.5}')
    assert slurm._batch_exit(tmp_path) == {"rc": 3, "time": 1.5}


@pytest.mark.parametrize("fields, message", [
    ({"time_limit": -5}, "invalid --time-limit -5"),
    ({"launcher": "pbs"}, "invalid --launcher 'pbs'"),
    ({"launcher": "ssh"}, "--hosts"),
    ({"hosts": "a:1,b:1"}, "no --hosts with --launcher slurm"),
    ({"nodes": 3}, "invalid --nodes 3"),
    ({"sbatch_arg": "--qos='x"}, "invalid --sbatch-arg"),
    ({"sbatch_arg": "debug"}, "each starting with -"),
    ({"launcher": "local", "partition": "debug"}, "only with --launcher slurm"),
    ({"sbatch_arg": "--qos=debug\ntouch /tmp/owned"}, "holds a line break"),
    ({"sbatch_arg": "--requeue"}, "no --requeue"),
])
def test_bad_slurm_settings_are_refused_in_one_line(fields: dict, message: str) -> None:
    cfg = JobConfig(**{**SMALL, **fields})
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_no_sbatch_here_is_refused_in_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without Slurm's commands
    with pytest.raises(ConfigError) as err:
        start(JobConfig(**{**SMALL, "engine": "torch"}, runs_dir=str(tmp_path / "runs")))
    assert "--launcher slurm cannot run here: `sbatch` is not on PATH" in str(err.value)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists(), "a refused job must not create a run folder"
    from workbench.ui import TrainingPanel

    panel = TrainingPanel(runs_dir=str(tmp_path / "runs"))
    try:
        assert "launcher" not in panel.controls  # no Slurm here: no launcher to choose
    finally:
        panel.close()


def test_local_slurm_trusts_no_folder_or_pid_file_of_another_user(tmp_path: Path) -> None:
    """Run as root, local_slurm.sh must not use a folder someone else made (their slurm.conf,
    munge key, pid files) nor kill a process only because a file names it."""
    from _other_user import folder_for_other, open_tmp, why_not

    if why_not() is not None:
        pytest.skip(why_not())
    base = open_tmp("wb-slurm-")
    victim = subprocess.Popen(["sleep", "60"])
    try:
        theirs = folder_for_other(base / "theirs")
        (theirs / "slurmd.pid").write_text(f"{victim.pid}\n")
        for action in ("up", "down", "status"):
            out = subprocess.run(["bash", str(SCRIPT), action], capture_output=True, text=True,
                                 env={**os.environ, "WORKBENCH_SLURM_DIR": str(theirs)})
            assert out.returncode != 0, (action, out.stdout)
            assert "not using it" in out.stderr and len(out.stderr.splitlines()) == 1, out
        mine = base / "mine"
        mine.mkdir(mode=0o755)
        (mine / "slurmd.pid").write_text(f"{victim.pid}\n")  # ours, but not a slurmd
        down = subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True,
                              env={**os.environ, "WORKBENCH_SLURM_DIR": str(mine)})
        assert down.returncode == 0 and "was not running" in down.stdout, down
        assert victim.poll() is None, "a process named by a pid file was killed"
    finally:
        victim.kill()
        victim.wait()
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------- with the cluster
@needs_cluster
def test_unknown_partition_is_refused_in_one_line(cluster: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(VENV_BIN / "workbench"), "run", "--launcher", "slurm", "--partition", "nope",
         "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("workbench: error: invalid --partition 'nope': this "
                                     "cluster's partitions are debug"), result.stderr


@needs_cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["torch", "horovod"])
def test_job_through_slurm_trains(cluster: str, tmp_path: Path, engine: str) -> None:
    """`workbench run --launcher slurm --json`: trained, and Slurm has forgotten the job."""
    cmd = [str(VENV_BIN / "workbench"), "run", "--launcher", "slurm", "--engine", engine,
           "--np", "2", "--model", "mlp", "--dataset", "digits", "--epochs", "4",
           "--lr", "0.1", "--threads-per-rank", "1", "--runs-dir", str(tmp_path), "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=290)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "succeeded"
    assert summary["launcher"] == "slurm"
    # COMPLETED, or CANCELLED where the ranks, having reported success, took more than the
    # launcher's 10 s of grace to leave Python (it then cancels what is left).
    assert summary["slurm_state"] in ("COMPLETED", "CANCELLED")
    assert summary["slurm_job_id"].isdigit()
    assert not in_queue(summary["slurm_job_id"])
    run_dir = Path(summary["run_dir"])
    metrics = MetricsReader(run_dir).all()
    assert sorted(m["rank"] for m in events(metrics, "start")) == [0, 1]
    losses = [m["loss"] for m in metrics if m["kind"] == "epoch" and m["rank"] == 0]
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0], losses
    assert summary["last_epoch_accuracy"] > 0.8
    # Slurm started the ranks: both ran in job <id> (srun's or horovodrun's tasks).
    assert f"slurm job {summary['slurm_job_id']}" in (run_dir / "logs" /
                                                      "launcher.log").read_text()


@needs_cluster
@pytest.mark.timeout(400)
def test_queued_job_runs_when_the_first_fails_and_stop_cancels(cluster: str, tmp_path: Path,
                                                               jobs: list) -> None:
    """A queue's life, with two jobs of 2 ranks on the 2 CPUs (one real job start fewer
    than a test per step, on a machine where each start takes seconds):

    1. the first job holds every CPU; the second is pending with Slurm's reason, in
       `job.status`, in the panel and in `workbench runs`;
    2. `kill -9` of the first job's rank 1 fails it, naming rank 1;
    3. the second job then runs; `stop()` cancels it within 10 s, leaving no rank process.
    """
    from workbench.ui import TrainingPanel

    first = start(JobConfig(**{**SMALL, "engine": "horovod", "np": os.cpu_count(),
                               "epochs": 500, "runs_dir": str(tmp_path), "name": "first"}))
    jobs.append(first)
    wait_for(lambda: any(m["kind"] == "step" for m in first.metrics()), 150,
             "the first job's first step")
    second = start(JobConfig(**{**SMALL, "engine": "torch", "epochs": 500,
                                "runs_dir": str(tmp_path), "name": "second"}))
    jobs.append(second)
    assert second.status == "pending"
    wait_for(lambda: second.pending_reason == "Resources", 10, "Slurm's reason")
    panel = TrainingPanel(runs_dir=str(tmp_path))
    jobs.append(panel)  # closed at the end (closing a panel stops the job it follows)
    assert "launcher" in panel.controls and "slurm" in panel.controls["launcher"].options
    panel.watch(second)
    panel.refresh()
    assert f"Run {second.run_id} queued: Resources" in panel.status.value
    listed = subprocess.run([str(VENV_BIN / "workbench"), "runs", "--runs-dir", str(tmp_path),
                             "--json"], capture_output=True, text=True, timeout=120)
    statuses = {r["run_id"]: r["status"] for r in json.loads(listed.stdout)}
    assert statuses[second.run_id] == "pending (Resources)", statuses

    # 2. A rank killed by a signal cannot report: its task wrapper does, naming it.
    os.kill(rank_pids(first.run_dir)[1], signal.SIGKILL)
    assert first.wait(30) == "failed"
    failure = first.summary["failure"]
    assert failure["rank"] == 1, failure
    assert "rank 1" in failure["error"] and "without reporting" in failure["error"]
    assert not in_queue(first.summary["slurm_job_id"])
    assert_no_rank_left(first)

    # 3. The CPUs are free: Slurm starts the second job. Stopping it is scancel.
    wait_for(lambda: any(m["kind"] == "step" for m in second.metrics()), 150,
             "the second job's first step")
    assert second.status == "running"
    panel.refresh()
    assert "queued" not in panel.status.value
    pids = list(rank_pids(second.run_dir).values())
    t0 = time.time()
    second.stop()
    assert time.time() - t0 < 10, f"stop took {time.time() - t0:.1f} s"
    assert second.status == "stopped" and "survivors" not in second.summary
    assert second.summary["slurm_state"] == "CANCELLED"
    assert not in_queue(second.summary["slurm_job_id"])
    assert_no_rank_left(second)
    assert len(pids) == 2 and not any(pid_alive(p) for p in pids)


@needs_cluster
@pytest.mark.timeout(120)
def test_sbatch_that_times_out_leaves_no_job_behind(cluster: str, tmp_path: Path,
                                                    monkeypatch) -> None:
    """A `sbatch` that queued the job but whose answer never came: the job is found by its
    name and cancelled, and the user gets one line (no run folder, no traceback)."""
    wrapper = tmp_path / "bin" / "sbatch"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/bash\n{shutil.which('sbatch')} \"$@\"\nexec sleep 60\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "SBATCH_TIMEOUT_S", 3.0)
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError) as err:
        start(JobConfig(**{**SMALL, "engine": "torch", "runs_dir": str(runs), "name": "late"}))
    assert "sbatch did not answer within 3 s" in str(err.value) and "\n" not in str(err.value)
    names = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout
    assert "late-np2" not in names, names
    # No run folder. (runs/.cache-uid<N> is the host's prepared data, shared by every run: a
    # rank that Slurm started before the cancel may have made it; training/setup.py.)
    assert [p.name for p in runs.iterdir() if not p.name.startswith(".cache-uid")] == []


@needs_cluster
@pytest.mark.timeout(400)
def test_slurm_job_ends_with_its_owner_and_is_not_requeued(cluster: str,
                                                           tmp_path: Path) -> None:
    """Two faults, one job each:

    1. `kill -9` of `workbench run --launcher slurm`: its guard scancels the job within
       seconds; the metrics stop growing and no rank is left.
    2. The node fails mid-run (set DOWN): the job is not requeued into the same folder
       (`--no-requeue`): one start per rank, and the summary says failed, not succeeded.
    """
    runs = tmp_path / "runs"
    cli = subprocess.Popen([str(VENV_BIN / "workbench"), "run", "--launcher", "slurm",
                            "--engine", "torch", "--np", "2", "--epochs", "500",
                            "--threads-per-rank", "1", "--runs-dir", str(runs)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: runs.exists() and any(runs.iterdir()), 60, "the run folder")
        run_dir = next(runs.iterdir())
        wait_for(lambda: any(m["kind"] == "step" for m in MetricsReader(run_dir).all()), 150,
                 "the first step")
        job_id = json.loads((run_dir / "slurm" / "job.json").read_text())["slurm_job_id"]
    finally:
        cli.kill()
        cli.wait()
    wait_for(lambda: not in_queue(job_id), 30, "Slurm to cancel the orphaned job", 0.5)
    # Slurm ends the step with its tasks (task.sh), so a rank must end before its task does:
    # one that outlived it (orphaned, under proctrack/linuxproc) went on writing its metrics.
    assert live_rank_pids(run_dir) == [], "a rank outlived its Slurm job"
    steps = len(MetricsReader(run_dir).all())
    time.sleep(3)
    assert len(MetricsReader(run_dir).all()) == steps, "the ranks kept training"
    assert "is gone: cancelling Slurm job" in (run_dir / "logs" / "launcher.log").read_text()
    # What may be left is the guard, which ends once scancel has answered (under load, seconds).
    wait_for(lambda: not job_processes(run_dir.name), 30,
             "every process of the cancelled job to end", 0.5)

    node = subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True,
                          text=True).stdout.split()[0]
    job = start(JobConfig(**{**SMALL, "engine": "torch", "epochs": 500,
                             "runs_dir": str(runs), "name": "node-fails"}))
    try:
        wait_for(lambda: any(m["kind"] == "step" for m in job.metrics()), 150, "a step")
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN",
                        "Reason=workbench-test"], check=True)
        assert job.wait(60) == "failed", job.status
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        job.stop()
    assert job.summary["slurm_state"] in ("NODE_FAIL", "FAILED", "CANCELLED"), job.summary
    time.sleep(5)  # a requeued job would start again by now
    assert sorted(m["rank"] for m in events(job.metrics(), "start")) == [0, 1]
    assert not in_queue(job.summary["slurm_job_id"])
    wait_for(lambda: subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"],
                                    capture_output=True, text=True).stdout.strip() == "idle",
             30, "the node to come back")


def _where_am_i() -> tuple:
    """A warm call's function: this rank's place in its group, and Slurm's job around it."""
    import os

    import torch.distributed as dist

    return dist.get_rank(), dist.get_world_size(), os.environ.get("SLURM_JOB_ID")


@needs_cluster
@pytest.mark.timeout(300)
def test_a_pool_of_warm_ranks_through_slurm(cluster: str, tmp_path: Path) -> None:
    """Slurm places the pool's ranks; they reach their owner over TCP, on the address this
    host's name resolves to, and prove they hold the pool's key: a stranger who connects
    first without it, or says nothing, is shut out and holds up no rank for long. Calls run
    in the Slurm job's ranks; close() ends that job."""
    import socket

    import workbench

    pool = workbench.ranks(np=2, engine="torch", runs_dir=str(tmp_path / "runs"),
                           launcher="slurm")
    try:
        address = pool._ranks.address
        assert address.startswith("tcp:"), address
        host, port = address[len("tcp:"):].rsplit(":", 1)
        assert pool._ranks.server.getsockname()[0] == socket.gethostbyname(host)
        stranger = socket.create_connection((host, int(port)), timeout=60)
        stranger.recv(100)                                 # the challenge
        stranger.sendall(b"\x00\x00\x00\x10" + b"a guess 16 bytes")
        silent = socket.create_connection((host, int(port)), timeout=60)
        pool.wait_ready(240)
        assert stranger.recv(100)[4:] == b"#FAILURE#"      # and closed by the pool
        assert pool._ranks.key not in (pool.job.run_dir / "config.json").read_text()
        job_id = str(json.loads((pool.job.run_dir / "slurm" / "job.json").read_text())[
            "slurm_job_id"])
        assert in_queue(job_id)
        for _ in range(2):                                 # warm: the same ranks each time
            call = pool.run(_where_am_i)
            assert call.wait(60) == "succeeded", call.summary
            assert [tuple(r) for r in call.results()] == [(0, 2, job_id), (1, 2, job_id)]
        silent.close()
    finally:
        pool.close()
    wait_for(lambda: not in_queue(job_id), 60, "Slurm to forget the pool's job")
    assert_no_rank_left(pool.job)
