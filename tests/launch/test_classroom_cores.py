"""Sharing a host's CPUs: the one CPU budget (affinity, cgroup quotas, CPU_LIMIT), and
jobs that take disjoint cores host-wide, queue in order, and respect a per-user limit.

Jobs here are real (the serial engine: one process, a few seconds). The cgroup test makes a
real CPU quota as root; the others read a fake cgroup tree through WORKBENCH_CGROUP_ROOT."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import workbench
from workbench.config import ConfigError
from workbench.hosts import cpu
from workbench.launch import cores
from workbench.records import events

SMALL = dict(engine="serial", np=1, model="logreg", dataset="digits", epochs=1, max_steps=5)
TWO_CORES = len(cpu.affinity()) >= 2
needs_two_cores = pytest.mark.skipif(not TWO_CORES, reason="needs a machine with 2 cores")


@pytest.fixture(autouse=True)
def own_settings(tmp_path, monkeypatch):
    """A shared folder of this test's own, and no hub, quota or sharing setting from outside."""
    monkeypatch.setenv(cores.ENV_SHARED_DIR, str(tmp_path / "shared"))
    for name in [n for n in os.environ if n.startswith("JUPYTERHUB_")] + [
            cpu.ENV_CPU_LIMIT, cpu.ENV_CGROUP_ROOT, cores.ENV_WHEN_BUSY, cores.ENV_JOBS_PER_USER]:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def two_cores():
    """This process (and every job it starts) sees exactly two cores, whatever the machine."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:2])
    yield sorted(before)[:2]
    os.sched_setaffinity(0, before)


def start(tmp_path: Path, **fields) -> workbench.Job:
    return workbench.start(workbench.JobConfig(runs_dir=str(tmp_path / "runs"),
                                               **{**SMALL, **fields}))


def ready_threads(job: workbench.Job) -> int:
    return events(job.metrics(), "ready")[0]["threads"]


# ----------------------------------------------------------------- the CPU budget
def fake_cgroup(root: Path, cpu_max: str | None = None, cfs: tuple[int, int] | None = None):
    """A cgroup tree with a v2 cpu.max at its top, and/or a v1 cpu controller folder."""
    root.mkdir(parents=True, exist_ok=True)
    if cpu_max is not None:
        (root / "cpu.max").write_text(cpu_max + "\n")
    if cfs is not None:
        (root / "cpu").mkdir(exist_ok=True)
        (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{cfs[0]}\n")
        (root / "cpu" / "cpu.cfs_period_us").write_text(f"{cfs[1]}\n")
    return root


@pytest.mark.parametrize(("cpu_max", "cfs", "cpu_limit", "usable", "source"), [
    ("max 100000", None, None, None, cpu.SOURCE_AFFINITY),
    ("100000 100000", None, None, 1, cpu.SOURCE_V2),
    ("150000 100000", None, None, 1, cpu.SOURCE_V2),      # 1.5 CPUs keep one thread busy
    ("50000 100000", None, None, 1, cpu.SOURCE_V2),       # never below one
    (None, (100000, 100000), None, 1, cpu.SOURCE_V1),
    (None, (-1, 100000), None, None, cpu.SOURCE_AFFINITY),
    (None, None, "1", 1, cpu.SOURCE_CPU_LIMIT),
    (None, None, "not a number", None, cpu.SOURCE_AFFINITY),
    ("200000 100000", None, "1.0", 1, cpu.SOURCE_CPU_LIMIT),  # the tightest limit decides
])
def test_cpu_budget_is_the_tightest_limit(tmp_path, monkeypatch, cpu_max, cfs, cpu_limit,
                                          usable, source):
    monkeypatch.setenv(cpu.ENV_CGROUP_ROOT, str(fake_cgroup(tmp_path / "cg", cpu_max, cfs)))
    if cpu_limit is not None:
        monkeypatch.setenv(cpu.ENV_CPU_LIMIT, cpu_limit)
    budget = cpu.cpu_budget()
    assert budget.source == source
    assert budget.usable == (usable or len(cpu.affinity()))
    assert budget.cores == cpu.affinity()


@needs_two_cores
@pytest.mark.parametrize("limit", ["cpu.max", "CPU_LIMIT"])
def test_a_job_under_a_one_cpu_limit_sizes_itself_to_one_cpu(tmp_path, monkeypatch, limit):
    if limit == "cpu.max":
        monkeypatch.setenv(cpu.ENV_CGROUP_ROOT, str(fake_cgroup(tmp_path / "cg", "100000 100000")))
    else:
        monkeypatch.setenv(cpu.ENV_CPU_LIMIT, "1")
    assert workbench.JobConfig(engine="torch", np=2).oversubscribed()  # 2 ranks, 1 CPU
    job = start(tmp_path)
    assert job.wait(120) == "succeeded", job.summary
    assert job.summary["threads_per_rank"] == 1 == ready_threads(job)  # not 2: the limit holds
    assert len(job.cores) == 1


def in_real_cgroup_with_quota() -> tuple[str, Path] | None:
    """("v2"|"v1", the folder to make a cgroup in), where this machine and user allow it."""
    if os.geteuid() != 0:
        return None
    v2 = Path("/sys/fs/cgroup")
    if "cpu" in (v2 / "cgroup.controllers").read_text().split() if (
            v2 / "cgroup.controllers").exists() else False:
        return "v2", v2
    v1 = Path("/sys/fs/cgroup/cpu")
    return ("v1", v1) if (v1 / "cpu.cfs_quota_us").exists() else None


@needs_two_cores
def test_a_job_in_a_real_one_cpu_cgroup_quota_sizes_itself_to_one_cpu(tmp_path):
    where = in_real_cgroup_with_quota()
    if where is None:
        pytest.skip("making a cgroup CPU quota needs root and a cgroup cpu controller")
    version, parent = where
    group = parent / f"workbench-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        if version == "v2":
            (group / "cpu.max").write_text("100000 100000")
        else:
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text("100000")
        script = textwrap.dedent(f"""
            import json, workbench
            from workbench.hosts import cpu_budget
            job = workbench.start(workbench.JobConfig(runs_dir={str(tmp_path)!r}, **{SMALL!r}))
            job.wait(120)
            ready = [m for m in job.metrics() if m.get("message") == "ready"]
            print(json.dumps({{"status": job.status, "source": cpu_budget().source,
                              "threads": job.summary["threads_per_rank"],
                              "rank_threads": ready[0]["threads"]}}))
        """)
        env = {**os.environ, cores.ENV_SHARED_DIR: str(tmp_path / "shared")}
        proc = subprocess.run(["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" -c "$1"',
                               sys.executable, script], capture_output=True, text=True,
                              timeout=240, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.splitlines()[-1])
    finally:
        for _ in range(50):  # the cgroup can be removed once its processes are gone
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert out == {"status": "succeeded", "source": f"cgroup {version} " + (
        "cpu.max" if version == "v2" else "cpu.cfs_quota_us"), "threads": 1, "rank_threads": 1}


# ----------------------------------------------------------------- sharing the cores
def overlapping(a: workbench.Job, b: workbench.Job) -> bool:
    a_end = a.started_at + a.summary["duration_s"]
    b_end = b.started_at + b.summary["duration_s"]
    return a.started_at < b_end and b.started_at < a_end


@needs_two_cores
@pytest.mark.parametrize("when_busy", ["queue", "unbound"])
def test_three_one_rank_jobs_on_two_cores(tmp_path, monkeypatch, two_cores, when_busy):
    monkeypatch.setenv(cores.ENV_WHEN_BUSY, when_busy)
    first, second = start(tmp_path, threads_per_rank=1), start(tmp_path, threads_per_rank=1)
    with pytest.warns(UserWarning, match="shares cores") if when_busy == "unbound" else (
            contextlib.nullcontext()) as said:
        third = start(tmp_path, threads_per_rank=1)
    if said:  # from the caller's line (here, start() above), not the workbench's
        assert {w.filename for w in said} == {__file__}
    jobs = [first, second, third]
    assert first.status == second.status == "running"
    assert sorted(first.cores + second.cores) == two_cores        # disjoint, one core each
    if when_busy == "queue":
        assert third.status == "queued" and third.queue_position == 1
        assert third.cores is None and third.launcher_pid is None
    else:
        assert third.status == "running" and third.cores == []
        assert "shares cores" in third.warnings[0]
    assert [job.wait(180) for job in jobs] == ["succeeded"] * 3
    for job in jobs:  # each rank ran on the cores its job was given (all of them if none)
        assert events(job.metrics(), "ready")[0]["cores"] == (job.cores or two_cores)
        assert job.summary["cores"] == job.cores
    bound = [job for job in jobs if job.cores]
    for i, a in enumerate(bound):  # no core held by two jobs at the same time
        for b in bound[i + 1:]:
            assert not (overlapping(a, b) and set(a.cores) & set(b.cores)), (a.cores, b.cores)
    if when_busy == "queue":  # it started once one of the others had ended
        assert third.summary["queued_s"] > 0
        assert not (overlapping(third, first) and overlapping(third, second))
    assert cores.snapshot() == {"held": [], "waiting": []}      # every core given back


@needs_two_cores
def test_a_queued_job_can_be_stopped_and_leaves_the_queue(tmp_path, two_cores):
    big = start(tmp_path, threads_per_rank=2)                     # both cores
    waiting = start(tmp_path, threads_per_rank=1)
    assert waiting.status == "queued"
    waiting.stop()
    assert waiting.status == "stopped" and waiting.summary["status"] == "stopped"
    on_record = {r.run_id: r.status for r in workbench.list_runs(str(tmp_path / "runs"))}
    assert on_record[waiting.run_id] == "stopped"                 # a run on record, too
    assert [e["run_id"] for e in cores.snapshot()["waiting"]] == []
    assert big.wait(120) == "succeeded"
    assert cores.snapshot() == {"held": [], "waiting": []}


def ticket(n_cores: int) -> cores.Ticket:
    return cores.Ticket(f"run-{uuid.uuid4().hex[:6]}", n_cores, cores.settings())


def test_a_ticket_that_cannot_join_keeps_no_descriptor_and_no_file(monkeypatch):
    """A failed join (here its rename, as on a full disk) closes what it opened, once: its
    later release() must not close a descriptor the process has opened since."""
    ticket(1).release()                                   # the folder exists
    folder = Path(cores.settings().folder)
    before = (set(os.listdir("/proc/self/fd")), sorted(os.listdir(folder)))

    def no_space(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(cores.os, "rename", no_space)
        with pytest.raises(ConfigError, match="No space left on device"):
            failed = cores.Ticket(None, 1, cores.settings())
            failed.join("run-full")
    assert (set(os.listdir("/proc/self/fd")), sorted(os.listdir(folder))) == before
    reused = os.open(os.devnull, os.O_RDONLY)             # takes a number just freed
    try:
        failed.release()
        os.fstat(reused)                                  # still open
    finally:
        os.close(reused)


def test_the_queue_is_first_in_first_out(two_cores):
    one = ticket(1)
    assert one.poll() and one.cores == [two_cores[0]]
    both = ticket(2)
    small = ticket(1)
    # A core is free, but `small` asked after `both`: it does not overtake.
    assert not both.poll() and not small.poll()
    assert (both.position, small.position) == (1, 2)
    assert f"its turn: 1 job(s) asked first, root's run {both.run_id}" in small.reason
    one.release()
    assert not small.poll() and both.poll() and both.cores == two_cores
    both.release()
    assert small.poll() and small.position == 0
    small.release()


def test_the_per_user_limit_is_one_on_a_hub(two_cores, monkeypatch):
    assert cores.settings().jobs_per_user == 0                  # not on a hub: no limit
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/hub/api")
    assert cores.settings().jobs_per_user == 1
    mine = ticket(1)
    assert mine.poll()
    again, none = ticket(1), ticket(0)
    assert not again.poll() and not none.poll()                 # a core is free, but I run
    assert "one of your running jobs to end (WORKBENCH_JOBS_PER_USER=1)" in again.reason
    mine.release()
    assert again.poll()
    again.release()
    none.release()


@needs_two_cores
def test_a_job_needing_more_cores_than_the_host_queues_then_takes_them_all(
        tmp_path, two_cores):
    """Its warning is given from the queue's thread, where no line of the caller's is: it
    names the run."""
    holder = ticket(1)
    assert holder.poll()
    with pytest.warns(UserWarning, match="speedups will flatten"):  # said at once
        job = start(tmp_path, threads_per_rank=3)       # 3 cores of 2: in its turn
    assert job.status == "queued" and len(job.warnings) == 1
    with pytest.warns(UserWarning) as said:
        holder.release()
        assert job.wait(120) == "succeeded"
    text = "this job needs 3 cores and the host has 2: it takes them all, and its ranks share them"
    [warned] = [w for w in said if text in str(w.message)]
    assert str(warned.message) == f"run {job.run_id}: {text}"
    assert Path(warned.filename).name == "job.py"       # not threading.py
    assert job.warnings[1:] == [text] and job.summary["warnings"] == job.warnings
    assert job.summary["cores"] == two_cores


@pytest.mark.parametrize(("name", "value", "message"), [
    (cores.ENV_WHEN_BUSY, "sometimes", "expected queue or unbound"),
    (cores.ENV_JOBS_PER_USER, "-1", "whole number"),
    (cores.ENV_SHARED_DIR, "/dev/null/shared", "set WORKBENCH_SHARED_DIR"),
])
def test_bad_sharing_settings_are_one_line_errors(tmp_path, monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        start(tmp_path)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_training_panel_shows_a_queued_job_and_its_place(tmp_path, two_cores, monkeypatch):
    from workbench.ui import TrainingPanel

    holder = ticket(2)                                          # another job holds both cores
    assert holder.poll()
    panel = TrainingPanel(runs_dir=str(tmp_path), engine="serial", np=1, model="logreg",
                          dataset="digits", epochs=1, threads_per_rank=1)
    try:
        panel.start_button.click()
        assert panel.job.status == "queued"
        panel.refresh()
        assert "queued: number 1 in this machine&#x27;s queue" in panel.status.value
        panel.stop_button.click()                               # leaves the queue, no process
        assert panel.job.status == "stopped" and cores.snapshot()["waiting"] == []
    finally:
        panel.close()
        holder.release()


def test_a_job_that_takes_no_cores_waits_behind_its_own_users_jobs(two_cores):
    """Behind another user's, it would not (tests/launch/test_shared_queue.py)."""
    holder = ticket(1)
    assert holder.poll()
    both, none = ticket(2), ticket(0)
    assert not both.poll() and not none.poll()
    holder.release()
    assert both.poll() and none.poll() and none.cores == []
    both.release()
    none.release()
