"""The labs' process supervisor: results come back, every run leaves a record, failures name
the worker, and no process survives a failure, a timeout, Ctrl-C or a killed caller."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _labs_helpers import (
    assert_recorded_and_reaped,
    sleep_forever,
    square,
    wait_for_barrier_then_fail_on_rank_one,
)
from _session_pools import rank_pids

import workbench
from workbench.cli import main as cli_main
from workbench.launch.launchers import job_processes
from workbench.launch.workers import WorkerError, run_workers
from workbench.records import list_runs

TESTS = str(Path(__file__).parents[1])  # the helpers: tests/_labs_helpers.py


def wait_for(condition, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def test_results_come_back_in_rank_order_and_the_run_is_recorded(tmp_path, capsys):
    assert run_workers(square, 3, (10,), name="squares", runs_dir=str(tmp_path),
                       distributed=False, settings={"offset": 10}) == [10, 11, 14]
    (record,) = assert_recorded_and_reaped(tmp_path)
    assert "squares" in record.run_id
    assert record.config["extra"]["function"] == "_labs_helpers.square"
    assert record.config["extra"]["settings"] == {"offset": 10}
    assert record.summary["np"] == 3
    assert cli_main(["runs", "--runs-dir", str(tmp_path), "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [record.run_id]
    assert cli_main(["show", record.run_id, "--runs-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "succeeded"


def test_a_failing_worker_is_named_and_the_others_are_stopped(tmp_path):
    start = time.monotonic()
    with pytest.raises(WorkerError) as err:
        run_workers(wait_for_barrier_then_fail_on_rank_one, 2, runs_dir=str(tmp_path),
                    names=["server", "worker 1"], timeout=120)
    message = str(err.value)
    assert message.startswith("worker 1 failed: ValueError: deliberate failure on rank 1")
    assert "Traceback" in message and str(tmp_path) in message
    # the worker's own file and line, though its module was sent by value (not installed)
    assert "_labs_helpers.py" in message and 'raise ValueError("deliberate failure' in message
    assert time.monotonic() - start < 60          # rank 0, blocked in recv, was ended
    (record,) = assert_recorded_and_reaped(tmp_path, status="failed")
    assert record.summary["failure"]["error"]


def test_a_hung_run_times_out_with_the_workers_named(tmp_path, monkeypatch):
    # A core queue of its own: this is about a lab that runs too long, not one that waits
    # behind other jobs for cores (the test after the next one).
    monkeypatch.setenv("WORKBENCH_SHARED_DIR", str(tmp_path / "shared"))
    with pytest.raises(WorkerError, match=r"did not finish within 3 s; still running: a, b"):
        run_workers(sleep_forever, 2, runs_dir=str(tmp_path), distributed=False, timeout=3,
                    names=["a", "b"])
    (record,) = list_runs(tmp_path)
    assert record.status == "stopped"
    assert job_processes(record.run_id) == []


def _caller(tmp_path: Path) -> subprocess.Popen:
    """A Python process that runs two never-ending workers; returns once both are up.
    It queues in a core queue of its own (its state is out of sight in another process):
    behind other tests' jobs, a fixed wait for its workers would fail on a busy machine."""
    env = dict(os.environ, WORKBENCH_SHARED_DIR=str(tmp_path / "shared"))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from _labs_helpers import sleep_forever
        from workbench.launch.workers import run_workers
        run_workers(sleep_forever, 2, runs_dir={str(tmp_path)!r}, distributed=False,
                    timeout=600)
    """)
    caller = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE,
                              text=True, env=env)
    wait_for(lambda: list_runs(tmp_path) and len(rank_pids(list_runs(tmp_path)[0].run_dir)) == 2,
             what="both workers to start")
    return caller


def test_ctrl_c_in_the_caller_stops_the_run_and_leaves_no_process(tmp_path):
    caller = _caller(tmp_path)
    try:
        caller.send_signal(signal.SIGINT)
        _, err = caller.communicate(timeout=30)
    finally:  # never leave the caller behind for the tests that follow
        if caller.poll() is None:
            caller.kill()
            caller.communicate()
    assert "KeyboardInterrupt" in err
    (record,) = list_runs(tmp_path)
    assert record.status == "stopped"
    assert job_processes(record.run_id) == []


def test_workers_exit_when_their_caller_is_killed(tmp_path):
    caller = _caller(tmp_path)
    caller.kill()
    caller.communicate()
    (record,) = list_runs(tmp_path)
    wait_for(lambda: job_processes(record.run_id) == [], timeout=15,
             what="the workers and their launcher to exit after their caller died")


def test_bad_world_size_is_refused_before_starting(tmp_path):
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        run_workers(square, 0, (1,), runs_dir=str(tmp_path))
    assert list_runs(tmp_path) == []


def test_the_fork_engine_is_refused_for_training(tmp_path, capsys):
    code = cli_main(["run", "--engine", "fork", "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "--engine fork runs the labs' workers, not training" in capsys.readouterr().err
    assert list_runs(tmp_path) == []


def test_a_function_from_a_notebook_cell_is_refused_before_starting(tmp_path):
    namespace: dict = {"__name__": "__main__"}
    exec("def cell_function(rank, world):\n    return rank", namespace)
    with pytest.raises(ValueError, match="cell_function is defined in __main__"):
        run_workers(namespace["cell_function"], 2, runs_dir=str(tmp_path))
    assert list_runs(tmp_path) == []


def test_a_lab_waiting_for_cores_says_for_whom_and_stops_in_one_line(tmp_path, monkeypatch,
                                                                      capfd):
    """One running job per user (a hub's default): the lab waits its turn for as long as it
    takes, saying what for and whose job holds it (its timeout counts once it runs); Ctrl-C
    (interrupting the kernel) stops it in one line, not a traceback."""
    import _thread
    import threading

    from workbench.launch.waiting import StoppedWaiting

    monkeypatch.setenv("WORKBENCH_SHARED_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("WORKBENCH_JOBS_PER_USER", "1")
    first = workbench.launch(time.sleep, 60, np=1, engine="serial", echo=False,
                             runs_dir=str(tmp_path / "first"))
    try:
        threading.Timer(2.5, _thread.interrupt_main).start()
        with pytest.raises(StoppedWaiting) as err:
            run_workers(square, 2, (1,), runs_dir=str(tmp_path / "lab"), distributed=False,
                        timeout=1)
        said = [line for line in capfd.readouterr().err.splitlines() if "has waited" in line]
        holder = f"root's run {first.run_id}"
        assert len(said) == 1 and "for one of your running jobs to end (WORKBENCH_JOBS_PER_" \
            f"USER=1): {holder}" in said[0] and "interrupt the kernel" in said[0], said
        message = str(err.value)
        assert re.match(r"run \S+ stopped after waiting [2-4] s for one of your running jobs",
                        message) and "\n" not in message, message
        assert err.value._render_traceback_() == [message]   # what IPython shows
        (record,) = list_runs(tmp_path / "lab")
        assert record.status == "stopped"
        threading.Timer(2.0, first.stop).start()            # its turn comes: it runs
        assert run_workers(square, 2, (1,), runs_dir=str(tmp_path / "lab"),
                           distributed=False, timeout=30) == [1, 2]
        assert re.search(r"started after waiting [2-4] s", capfd.readouterr().err)
    finally:
        first.stop()
