"""`workbench.launch`: a user's own function or script on real ranks (the rank-side API
alone: tests/rank/test_api.py).

Each test starts a real job (torchrun ranks start fastest; Horovod is covered in
test_launch_notebook.py and by the data-parallel exercise). The functions are defined in this
file, which the ranks cannot import: launch() must send them by value, as from a notebook.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from _session_pools import live_rank_pids

import workbench
from workbench.launch.by_value import source_of
from workbench.launch.launchers import job_processes
from workbench.ui import RunPanel
from workbench.ui.run_controls import what_ran


def count_and_return(n):
    for step in range(n):
        workbench.report(step=step, loss=1.0 / (step + 1), samples=4)
    print("rank", workbench.rank(), "of", workbench.size(), "local", workbench.local_rank())
    return {"rank": workbench.rank(), "size": workbench.size(), "sum": sum(range(n))}


def _helper_that_fails(x):
    if workbench.rank() == 1:
        raise ValueError(f"rank one dislikes {x}")


def fails_on_rank_one(x):
    _helper_that_fails(x)
    return x


def sleeps():
    workbench.report(step=0, loss=1.0)
    time.sleep(600)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine", ["torch", "fork"])   # fork: the labs' way, same protocol
def test_a_function_returns_each_ranks_value_in_rank_order(tmp_path, engine):
    job = workbench.launch(count_and_return, 3, np=2, engine=engine, runs_dir=str(tmp_path))
    assert job.wait(80) == "succeeded", job.summary
    assert job.results() == [{"rank": 0, "size": 2, "sum": 3}, {"rank": 1, "size": 2, "sum": 3}]
    steps = [m for m in job.metrics() if m["kind"] == "step"]
    assert sorted((m["rank"], m["step"]) for m in steps) == [(r, s) for r in (0, 1)
                                                             for s in range(3)]
    assert job.record().log(1, last=5).strip().endswith("rank 1 of 2 local 1")
    assert job.summary["steps_completed"] == 3
    # the record names the function, not the training fields it never used (model, batch)
    assert what_ran(job.record().config) == "count_and_return()"


@pytest.mark.timeout(90)
def test_a_script_runs_with_its_arguments_as_argv(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys, workbench\n"
                      "print('argv', sys.argv[1:])\n"
                      "workbench.report(loss=float(sys.argv[2]))\n"
                      "sys.exit(0)\n")
    job = workbench.launch(script, "--lr", 0.5, np=2, engine="torch", runs_dir=str(tmp_path))
    assert job.wait(80) == "succeeded", job.summary
    assert job.results() == [None, None]
    assert "argv ['--lr', '0.5']" in job.record().log(1)
    assert [m["loss"] for m in job.metrics() if m["kind"] == "step"] == [0.5, 0.5]
    assert what_ran(job.record().config) == "train.py"


@pytest.mark.timeout(90)
def test_a_raising_rank_is_named_with_the_users_own_traceback(tmp_path):
    job = workbench.launch(fails_on_rank_one, 7, np=2, engine="torch", runs_dir=str(tmp_path))
    assert job.wait(80) == "failed"
    failure = job.summary["failure"]
    assert failure["rank"] == 1 and failure["error"] == "ValueError: rank one dislikes 7"
    tb = failure["traceback"]
    assert "in fails_on_rank_one" in tb and "in _helper_that_fails" in tb
    assert 'raise ValueError(f"rank one dislikes {x}")' in tb   # the user's source line
    assert "workbench/rank/" not in tb and "workbench/launch/" not in tb and "runpy" not in tb
    # Rank 0 may not have returned yet when rank 1's failure ended the job (ranks are
    # stopped once one fails): its result may be missing too, rank 1's always is.
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[(0, )?1\]"):
        job.results()
    shown = subprocess.run([sys.executable, "-m", "workbench.cli", "show", job.run_id,
                            "--runs-dir", str(tmp_path)], capture_output=True, text=True)
    assert "failed in rank 1: ValueError: rank one dislikes 7" in shown.stdout
    assert "in _helper_that_fails" in shown.stdout and "rank/wrapper.py" not in shown.stdout


@pytest.mark.timeout(90)
def test_stop_leaves_no_process(tmp_path):
    job = workbench.launch(sleeps, np=2, engine="horovod", runs_dir=str(tmp_path))
    deadline = time.monotonic() + 60
    while len(live_rank_pids(job.run_dir)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(live_rank_pids(job.run_dir)) == 2
    job.stop()
    assert job.status == "stopped"
    assert not live_rank_pids(job.run_dir)
    assert not job_processes(job.run_id, job.launcher_pid)


def test_an_unpicklable_function_is_refused_before_anything_starts(tmp_path):
    lock = threading.Lock()

    def uses_a_lock():
        with lock:
            return 1

    with pytest.raises(workbench.ConfigError) as err:
        workbench.launch(uses_a_lock, np=2, runs_dir=str(tmp_path / "runs"))
    message = str(err.value)
    assert "\n" not in message
    assert "cannot send uses_a_lock to the ranks: the variable 'lock' it uses" in message
    assert "_thread.lock" in message
    assert not (tmp_path / "runs").exists()      # no run folder, so no process either

    class Counter:
        def step(self):
            with lock:
                return 1

    with pytest.raises(workbench.ConfigError, match="the variable 'lock' it uses"):
        workbench.launch(Counter().step, np=2, runs_dir=str(tmp_path / "runs"))  # a method


def test_a_bound_method_sends_the_source_of_its_function_and_of_what_it_calls():
    """So a traceback on a rank shows the method's lines, as it does a function's."""
    class Model:
        def step(self):
            return _helper_that_fails(1)

    files, lines = source_of(Model().step)
    assert {name for name, _ in files} == {"step", "_helper_that_fails"}
    assert set(files.values()) == {__file__} and lines[__file__]


def test_bad_targets_are_refused_in_one_line(tmp_path):
    with pytest.raises(workbench.ConfigError, match="no script at"):
        workbench.launch(tmp_path / "missing.py", runs_dir=str(tmp_path))
    with pytest.raises(workbench.ConfigError, match="not a int"):
        workbench.launch(42, runs_dir=str(tmp_path))
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    with pytest.raises(workbench.ConfigError, match="fork engine, not a script"):
        workbench.launch(script, engine="fork", runs_dir=str(tmp_path))
    assert not (tmp_path / "runs").exists()


def unpicklable_result():
    return threading.Lock()


@pytest.mark.timeout(90)
def test_forked_ranks_report_the_workbenchs_own_frames_and_each_failure_once(tmp_path):
    """On the fork engine (the labs'): a function of the workbench that raises keeps its own
    frames (only the launching ones are cut), and a rank whose value cannot travel back is
    named, its traceback written once."""
    from workbench.hosts.lists import parse_hosts

    job = workbench.launch(parse_hosts, "a:0", np=1, engine="fork", echo=False,
                           runs_dir=str(tmp_path))
    assert job.wait(60) == "failed"
    tb = job.summary["failure"]["traceback"]
    assert "workbench/hosts/lists.py" in tb and "raise HostListError(" in tb, tb
    assert "workbench/rank/" not in tb and "workbench/launch/" not in tb and "runpy" not in tb
    job = workbench.launch(unpicklable_result, np=1, engine="fork", echo=False,
                           runs_dir=str(tmp_path))
    assert job.wait(60) == "failed"
    assert "returned a lock that cannot be pickled" in job.summary["failure"]["error"]
    assert job.record().log(0).count("Traceback (most recent call last)") == 1


@pytest.mark.timeout(90)
def test_run_panel_charts_a_launched_function_and_shows_its_failure(tmp_path):
    job = workbench.launch(count_and_return, 4, np=2, engine="torch", runs_dir=str(tmp_path))
    panel = RunPanel(job)
    try:
        deadline = time.monotonic() + 80
        while panel.running() and time.monotonic() < deadline:
            panel.refresh()
            time.sleep(0.2)
        assert job.status == "succeeded"
        assert panel.sources["rank1"].data["loss"] == [1.0, 0.5, 1 / 3, 0.25]
        assert len(panel.sources["overall"].data["loss"]) == 4
        assert "succeeded" in panel.status.value
        # the charts of what the function did not report say so; the others say nothing
        notes = {name: [m.text for m in fig.center if type(m).__name__ == "Label"]
                 for name, fig in panel._charts.figures.items()}
        own_loop = ["Only the workbench's own\ntraining loop\nmeasures this."]
        assert notes == {"loss": [], "throughput": [],
                         "accuracy": ["No accuracy reported:\nworkbench.report(accuracy=...)"],
                         "share": own_loop, "memory": own_loop, "sent": own_loop}
        assert {m.text_baseline for fig in panel._charts.figures.values() for m in fig.center
                if type(m).__name__ == "Label"} == {"top"}  # lines go down into the plot
    finally:
        panel.close()
    job = workbench.launch(fails_on_rank_one, 1, np=2, engine="torch", runs_dir=str(tmp_path))
    panel = RunPanel(job)
    try:
        deadline = time.monotonic() + 80
        while panel.running() and time.monotonic() < deadline:
            panel.refresh()
            time.sleep(0.2)
        assert "failed" in panel.status.value
        assert "rank 1: ValueError: rank one dislikes 1" in panel.alert.value
        assert "_helper_that_fails" in panel.alert.value
    finally:
        panel.close()


def test_a_long_function_name_makes_a_valid_run_name(tmp_path):
    """The run is named after the function, cut to the 40 characters a name may have."""
    def a_function_whose_name_is_much_longer_than_forty_characters():
        return 1

    job = workbench.launch(a_function_whose_name_is_much_longer_than_forty_characters, np=1,
                           engine="serial", runs_dir=str(tmp_path / "runs"), echo=False)
    try:
        assert job.config.name == "a_function_whose_name_is_much_longer_tha"
        assert job.wait(60) == "succeeded" and job.results() == [1]
    finally:
        job.stop()


def test_a_huge_closure_is_refused_at_once_and_a_large_one_warns_with_its_size(tmp_path):
    """A closure over a 400 MiB tensor would block the kernel for seconds while it is
    pickled into the run folder: refused before pickling, naming it and its size."""
    import torch

    from workbench.launch.by_value import check_payload

    big = torch.zeros(100 * 2**20)  # 400 MiB of float32

    def uses_big():
        return big.sum()

    with pytest.raises(workbench.ConfigError) as err:
        workbench.launch(uses_big, np=2, runs_dir=str(tmp_path / "runs"))
    message = str(err.value)
    assert "\n" not in message and "400 MiB" in message and "the variable 'big'" in message
    assert "max_payload_mb=256" in message
    assert not (tmp_path / "runs").exists()
    medium = big[: 12 * 2**20]  # a view of 48 MiB: what pickling it sends

    def uses_medium():
        return medium.sum()

    sends = r"sends 48 MiB to the ranks \(the variable 'medium'"
    with pytest.warns(UserWarning, match=sends) as shown:
        assert round(check_payload(uses_medium, (), 256.0)) == 48
    assert [w.filename for w in shown] == [__file__], "the warning points at the caller's line"
    assert check_payload(lambda x: x, (b"small",), 256.0) < 1
