"""`workbench.launch` from a fresh Jupyter kernel (nbclient), as a student uses it.

A function defined in a notebook cell exists only in that kernel's `__main__`: these tests
prove it reaches real Horovod and DDP ranks by value, reports live while the job runs, returns
its results, and that a rank printing 10 000 lines does not flood the notebook.
"""

from __future__ import annotations

import re
import time

import nbformat
import pytest
from nbclient import NotebookClient

SETUP = """\
import time, workbench
def train(steps):
    import torch
    w = torch.zeros(3)
    for step in range(steps):
        w += 1
        workbench.report(step=step, loss=float(10 - w.sum()) / 10, samples=8)
        time.sleep(0.05)
    time.sleep(1.0)   # still running once every point is written
    return {"rank": workbench.rank(), "size": workbench.size(), "w": w.tolist()}
"""

LAUNCH = """\
job = workbench.launch(train, 5, np=2, engine={engine!r}, runs_dir={runs!r})
seen_live = False
while not job.done:
    steps = [m for m in job.metrics() if m["kind"] == "step"]
    seen_live = seen_live or (len(steps) == 10 and job.status == "running")
    time.sleep(0.05)
assert job.status == "succeeded", job.summary
assert seen_live, "every step was in metrics.jsonl while the job still ran"
assert job.results() == [{{"rank": r, "size": 2, "w": [5.0] * 3}} for r in (0, 1)]
print("ok", job.run_id)
"""


def _run(cells: list[str], tmp_path, timeout: int = 240) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.timeout(300)
def test_a_function_from_a_fresh_kernel_runs_on_horovod_and_ddp_ranks(tmp_path):
    runs = str(tmp_path / "runs")
    nb = _run([SETUP, LAUNCH.format(engine="horovod", runs=runs),
               LAUNCH.format(engine="torch", runs=runs)], tmp_path)
    assert _stdout(nb.cells[1]).startswith("ok ")
    assert _stdout(nb.cells[2]).startswith("ok ")


CHATTY = """\
import time, workbench
from workbench.ui.rank_output import FOLLOWERS, MAX_LINES
def chatty():
    for i in range(10_000):
        print("line", i)
    return workbench.rank()
started = time.monotonic()
job = workbench.launch(chatty, np=2, engine="torch", runs_dir={runs!r})
"""

AFTER = """\
echo = FOLLOWERS[job.run_id]
echo.finished.wait(120)
took = time.monotonic() - started
lines = echo.text.splitlines()
assert job.status == "succeeded" and job.results() == [0, 1]
assert len(lines) <= 2 * MAX_LINES + 3, len(lines)          # capped ...
assert lines[0] == "[rank 0] line 0" or lines[0] == "[rank 1] line 0"
assert any("9,900 more lines in" in x for x in lines)       # ... saying where the rest is
assert job.record().log(1).count("line ") == 10_000        # the log keeps everything
assert echo.updates <= took / echo.every_s + 3, (echo.updates, took)   # not one per line
print("ok", echo.updates, len(lines))
"""


@pytest.mark.timeout(300)
def test_ten_thousand_prints_do_not_flood_the_kernel(tmp_path):
    start = time.monotonic()
    nb = _run([CHATTY.format(runs=str(tmp_path / "runs")), "1 + 1", AFTER], tmp_path)
    # the next cell runs while the ranks print: the kernel is not busy copying their output
    assert nb.cells[1].outputs[0]["data"]["text/plain"] == "2"
    assert _stdout(nb.cells[2]).startswith("ok "), nb.cells[2].outputs
    assert time.monotonic() - start < 200


WAITING = """\
import json, os, signal, sys, threading, time, workbench
from workbench.hosts.cpu import affinity
os.environ.update(WORKBENCH_SHARED_DIR={shared!r}, WORKBENCH_JOBS_PER_USER="0")
sys.path.insert(0, {tests!r})
from _labs_helpers import square
from workbench.launch.workers import run_workers
first = workbench.launch(time.sleep, 120, np=len(affinity()), engine="fork", echo=False,
                         runs_dir={runs!r})   # every core of the host, held
threading.Timer(3.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # the stop button
run_workers(square, 2, (1,), runs_dir={runs!r}, distributed=False)
"""
LAUNCHED = """\
from workbench.ui.rank_output import FOLLOWERS
job, shown = workbench.launch(time.sleep, 0, np=2, engine="fork", runs_dir={runs!r}), []
def look():
    while not job.done:
        shown.extend(o["text"] for o in FOLLOWERS[job.run_id].widget.outputs)
        time.sleep(0.2)
threading.Thread(target=look, daemon=True).start()
threading.Timer(3.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # the stop button
job.wait()
"""
AFTER_WAIT = """\
waited = [t for t in shown if "has waited" in t]
print(json.dumps({{"first": first.run_id, "status": job.status, "shown": waited[-1:],
                  "seen": len(set(waited)), "tickets": sorted(os.listdir({shared!r}))}}))
first.stop()
"""


@pytest.mark.timeout(300)
def test_a_cell_waiting_for_cores_says_for_whom_updating_and_stops_in_one_line(tmp_path):
    """Two jobs, the first holding every core: a lab's cell shows one line, updated once a
    second (what it waits for, whose run holds it, for how long), and a launch()'s output
    says the same while job.wait() blocks; interrupting the kernel stops either with one
    line, no traceback, and leaves no ticket in the queue."""
    import json
    from pathlib import Path

    nb = nbformat.v4.new_notebook()
    names = {"shared": str(tmp_path / "shared"), "runs": str(tmp_path / "runs"),
             "tests": str(Path(__file__).parents[1])}
    nb.cells = [nbformat.v4.new_code_cell(c.format(**names))
                for c in (WAITING, LAUNCHED, AFTER_WAIT)]
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    after = json.loads(_stdout(nb.cells[2]))
    holder = rf"free cores; busy: core \d+: root's run {after['first']} \(\d+ s\)"
    shown = [o for o in nb.cells[0].outputs if o.output_type == "display_data"]
    [error] = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    assert len(shown) == 1, nb.cells[0].outputs          # one line, updated in place
    text = shown[0].data["text/plain"]
    assert re.search(r"has waited [2-5] s for \d+ " + holder, text), text
    assert error.ename == "StoppedWaiting" and len(error.traceback) == 1
    assert re.search(r"stopped after waiting [3-6] s for \d+ " + holder, error.traceback[0])
    [error] = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert error.ename == "StoppedWaiting" and len(error.traceback) == 1, error
    assert re.search(r"stopped after waiting [3-6] s for 2 " + holder, error.traceback[0])
    [last] = after["shown"]                              # said, and updated, while waiting
    assert re.search(r"has waited [2-5] s for 2 " + holder, last) and after["seen"] >= 3, after
    assert after["status"] == "stopped"
    tickets = [t for t in after["tickets"] if not t.startswith("core-")]
    assert len(tickets) == 1 and tickets[0].startswith("run-"), after["tickets"]
