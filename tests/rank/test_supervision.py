"""The watcher, the records and the environment under conditions that used to break them.

Real launchers and real rank processes throughout; each rank module here is a few lines
written to the rank protocol of docs/ARCHITECTURE.md, so every test takes seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from _session_pools import rank_pids

from workbench.cli import main as cli_main
from workbench.launch import start_module
from workbench.launch.launchers import job_processes
from workbench.records import RunRecord, of_kind

SECRET = "wb-secret-7f3a9c"


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a rank module into a folder on the ranks' PYTHONPATH; return its name."""
    folder = tmp_path / "mods"
    folder.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")

    def write(name: str, source: str) -> str:
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write


def until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def until_ranks(job, n: int = 1) -> None:
    """Wait for `job`'s n ranks to start. Time queued for cores behind other tests' jobs
    (the suite's workers share one core queue) is waited out by state, not counted."""
    until(lambda: job.status != "queued", 900, "the job's turn for cores")
    until(lambda: len(rank_pids(job.run_dir)) >= n, 60, f"{n} rank(s) to start")


WAIT_FOR_GO = """
    import os, pathlib, time
    from workbench.rank.context import this_rank
    ctx = this_rank()
    ctx.metric("event", message="env", forwarded=os.environ.get("WB_FORWARDED"),
               named=os.environ.get("WB_NAMED"), secret=os.environ.get("WB_TEST_SECRET"))
    go = ctx.run_dir / "go"
    end = time.time() + 60
    while not go.exists() and time.time() < end:
        time.sleep(0.05)
"""


# ----------------------------------------------------------------- the watcher never hangs
def test_protocol_minimal_step_lines_are_enough(tmp_path, modules):
    """Fields beyond kind/rank/time are optional: the summary copes, a bad line is counted."""
    name = modules("minimal_rank", """
        from workbench.records import metrics_path
        from workbench.rank.context import this_rank
        ctx = this_rank()
        for i in range(3):
            ctx.metric("step", step=i)
        ctx.metric("epoch", epoch=0)
        with open(metrics_path(ctx.run_dir, ctx.rank), "a") as f:
            f.write("this is not json\\n")
    """)
    job = start_module("serial", 1, name, runs_dir=str(tmp_path / "runs"))
    assert job.wait(60) == "succeeded", job.summary
    assert job.summary["steps_completed"] == 3
    assert job.summary["epochs_completed"] == 1
    assert any("not valid JSON" in w for w in job.summary["warnings"])


def test_an_unwritable_summary_ends_the_job_failed_not_running(tmp_path, modules):
    name = modules("waiting_rank", WAIT_FOR_GO)
    job = start_module("serial", 1, name, runs_dir=str(tmp_path / "runs"))
    until_ranks(job)
    blocker = job.run_dir / "summary.json"     # a folder where the file must go: even root
    blocker.mkdir()                            # cannot replace it with a file
    (blocker / "keep").write_text("")
    (job.run_dir / "go").write_text("")
    assert job.wait(30) == "failed"
    failure = job.summary["failure"]
    assert "could not write" in failure["error"] and "summary.json" in failure["error"]
    assert job_processes(job.run_id) == []


def test_a_corrupt_config_fails_the_rank_at_once_naming_the_file(tmp_path, modules):
    name = modules("never_run_rank", """
        raise AssertionError("must not get here: the rank wrapper reads config.json first")
    """)
    began = time.monotonic()
    job = start_module("serial", 1, name, runs_dir=str(tmp_path / "runs"),
                       files={"config.json": b"{oops"})  # written over the job's, before launch
    assert job.wait(60) == "failed"
    assert time.monotonic() - began < 30
    failure = job.summary["failure"]
    assert failure["rank"] == 0
    assert "config.json" in failure["error"] and "not valid JSON" in failure["error"]
    lines = [ln for ln in job.record().log("launcher").splitlines() if "config.json" in ln]
    assert any(ln.startswith("workbench: rank 0 cannot read its configuration") for ln in lines)


def test_an_import_error_in_a_rank_module_is_in_the_ranks_exit_records(tmp_path, modules):
    """The rank wrapper imports the module inside the rank's context, so the error and its
    traceback are the failing rank's, not a guess from the launcher's log."""
    name = modules("broken_import_rank", "import module_that_does_not_exist_wb\n")
    job = start_module("horovod", 2, name, runs_dir=str(tmp_path / "runs"))
    assert job.wait(90) == "failed"
    failure = job.summary["failure"]
    assert failure["rank"] in (0, 1)
    assert "No module named 'module_that_does_not_exist_wb'" in failure["error"]
    assert "broken_import_rank" in failure["traceback"]
    assert "runpy" not in failure["traceback"], "the wrapper's frames hide the module's"
    record = json.loads((job.run_dir / "exit" / f"rank{failure['rank']}.json").read_text())
    assert not record["ok"] and "module_that_does_not_exist_wb" in record["error"]


# ----------------------------------------------------------------- records
def test_metrics_from_two_threads_give_each_record_exactly_once(tmp_path, modules):
    name = modules("chatty_rank", """
        import time
        from workbench.rank.context import this_rank
        ctx = this_rank()
        for i in range(3000):
            ctx.metric("step", step=i)
            if i % 100 == 0:
                time.sleep(0.01)
    """)
    job = start_module("serial", 1, name, runs_dir=str(tmp_path / "runs"))
    duplicates: list[int] = []

    def poll() -> None:
        while not job.done:
            counts = Counter(r["step"] for r in of_kind(job.metrics(), "step"))
            duplicates.extend(step for step, n in counts.items() if n > 1)

    threads = [threading.Thread(target=poll) for _ in range(2)]
    for t in threads:
        t.start()
    assert job.wait(60) == "succeeded", job.summary
    for t in threads:
        t.join(10)
    assert duplicates == []
    steps = [r["step"] for r in of_kind(job.metrics(), "step")]
    assert sorted(steps) == list(range(3000))


def test_an_old_single_file_run_folder_still_loads(tmp_path):
    run = tmp_path / "runs" / "20200101-000000-old-np1-abcd"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"engine": "serial", "np": 1}))
    (run / "metrics.jsonl").write_text('{"kind": "step", "rank": 0, "time": 1.0, "step": 0}\n')
    (run / "summary.json").write_text(json.dumps({"status": "succeeded"}))
    record = RunRecord(run)
    assert record.status == "succeeded"
    assert [r["step"] for r in of_kind(record.metrics(), "step")] == [0]


def test_a_run_whose_owner_died_is_listed_as_lost(tmp_path, modules, capsys, monkeypatch):
    # The owner is another process, whose queue state is out of sight: it gets a core
    # queue of its own, so its rank starts without waiting behind other tests' jobs.
    monkeypatch.setenv("WORKBENCH_SHARED_DIR", str(tmp_path / "shared"))
    name = modules("waiting_rank2", WAIT_FOR_GO)
    script = textwrap.dedent(f"""
        import time
        from workbench.launch import start_module
        job = start_module("serial", 1, {name!r}, runs_dir={str(tmp_path)!r})
        print(job.run_dir, flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        run_dir = Path(owner.stdout.readline().strip())
        until(lambda: rank_pids(run_dir), what="the rank to start")
        assert RunRecord(run_dir).status == "running"
    finally:
        owner.kill()
        owner.wait()
    until(lambda: job_processes(run_dir.name) == [], timeout=15,
          what="the rank to leave with its owner")
    assert RunRecord(run_dir).status == "lost"
    assert cli_main(["runs", "--runs-dir", str(tmp_path), "--json"]) == 0
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["lost"]


# ----------------------------------------------------------------- environment
def test_ranks_get_an_allow_listed_environment_and_the_env_field(tmp_path, modules,
                                                                 monkeypatch):
    monkeypatch.setenv("WB_TEST_SECRET", SECRET)
    monkeypatch.setenv("WB_NAMED", "named-value")
    name = modules("env_rank", WAIT_FOR_GO)
    job = start_module("horovod", 2, name, runs_dir=str(tmp_path / "runs"),
                       env=["WB_FORWARDED=forwarded-value", "WB_NAMED"])
    try:
        until_ranks(job, 2)
        procs = job_processes(job.run_id, job.launcher_pid)
        pids = set(rank_pids(job.run_dir).values())
        assert pids <= {p.pid for p in procs}
        for proc in procs:        # horovodrun, its shells and the ranks
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            assert SECRET.encode() not in environ + cmdline, proc.cmdline()
    finally:
        (job.run_dir / "go").write_text("")
    assert job.wait(60) == "succeeded", job.summary
    seen = [r for r in of_kind(job.metrics(), "event") if r.get("message") == "env"]
    assert len(seen) == 2
    for r in seen:
        assert (r["forwarded"], r["named"], r["secret"]) == ("forwarded-value",
                                                             "named-value", None)


def test_stop_reaches_a_rank_through_the_owners_heartbeat(tmp_path, modules):
    """A rank that ignores SIGTERM still leaves at once: the owner's heartbeat says "stop"
    (the way ranks on other hosts, out of reach of any signal from here, learn of it)."""
    name = modules("stubborn_rank", """
        import signal, time
        from workbench.rank.context import this_rank
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ctx = this_rank()
        ctx.metric("event", message="deaf to SIGTERM")
        time.sleep(120)
    """)
    job = start_module("serial", 1, name, runs_dir=str(tmp_path / "runs"))
    until_ranks(job)  # and until the rank ignores SIGTERM: a stop before would end it so
    until(lambda: any(r.get("message") == "deaf to SIGTERM"
                      for r in of_kind(job.metrics(), "event")), 60, "the rank to ignore SIGTERM")
    began = time.monotonic()
    job.stop()
    assert time.monotonic() - began <= 5.0
    assert job.status == "stopped"
    assert "rank exiting: the job was stopped" in job.record().log(0)
    assert job_processes(job.run_id) == []


# ----------------------------------------------------------------- the launcher's guard
def test_the_guard_ends_a_launcher_that_outlives_its_owner():
    """A launcher that would wait for ever (here `sleep`) ends within seconds of its owner."""
    import psutil

    from workbench.launch.launchers import GUARD

    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        guard = subprocess.Popen([sys.executable, {str(GUARD)!r}, str(os.getpid()), "--",
                                  "sleep", "600"])
        print(guard.pid, flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    guard = psutil.Process(int(owner.stdout.readline()))
    until(lambda: guard.children(), what="the guard to start its launcher")
    launcher = guard.children()[0]
    owner.kill()
    owner.wait()
    gone, alive = psutil.wait_procs([launcher, guard], timeout=10)
    assert not alive, f"still running 10 s after the owner died: {alive}"


@pytest.mark.parametrize(("shell", "code"), [("exit 3", 3), ("kill -TERM $$", 128 + 15)])
def test_the_guard_passes_on_the_launchers_exit_code(shell, code):
    from workbench.launch.launchers import GUARD

    result = subprocess.run([sys.executable, str(GUARD), str(os.getpid()), "--",
                             "sh", "-c", shell], timeout=30)
    assert result.returncode == code


def test_a_heartbeats_age_counts_only_time_in_which_its_reader_could_look(tmp_path, monkeypatch):
    """A file server that stalls blocks the reader too: that time is no one's silence. Time
    in which the reader looked and saw no change is."""
    from workbench.records import liveness

    clock = [100.0]
    monkeypatch.setattr(liveness.time, "monotonic", lambda: clock[0])
    path = tmp_path / "beat"
    path.write_text("1")
    seen = liveness.Staleness(path)
    assert seen.age() == 0.0
    for _ in range(8):               # looked every half second: silent for 4 s
        clock[0] += 0.5
        age = seen.age()
    assert age == pytest.approx(4.0)
    clock[0] += 12.0                 # one read that took 12 s (the server stalled)
    assert seen.age() == pytest.approx(4.0)
    clock[0] += 0.5
    assert seen.age() == pytest.approx(4.5)
    path.write_text("2")             # a change: silent for no time
    assert seen.age() == 0.0


def test_a_clock_set_forward_does_not_make_a_live_owner_look_gone(tmp_path, monkeypatch):
    """The wall clock jumps (NTP steps it, a virtual machine resumes): the boot time that
    psutil adds to a process's start moves with it. A process's identity must not, or every
    rank would take its live owner for dead."""
    import psutil

    from workbench.rank import protocol
    from workbench.records import liveness

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me = protocol.owner_id()
        created = liveness.started(child.pid)
        assert created != liveness.started(), "two processes, two starts"
        real, before = psutil.boot_time(), psutil.Process(child.pid).create_time()
        monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: real + 90.0)
        monkeypatch.setattr(psutil, "boot_time", lambda: real + 90.0)
        moved = psutil.Process(child.pid).create_time() - before
        assert moved == pytest.approx(90.0), "the wall clock's answer moved"
        assert liveness.process_alive(child.pid, created)
        assert protocol.owner_id() == me
    finally:
        child.kill()
        child.wait()
    assert not liveness.process_alive(child.pid, created)
