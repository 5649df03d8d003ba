"""The RunPanel and the ScalingPanel in a real JupyterLab, driven by a real Chromium.

What only a browser can show: a function defined in the notebook runs on real ranks with
`workbench.launch`, its `workbench.report()` points reach the RunPanel's chart *in the page*
while it runs, what the ranks print appears under the cell with their rank, and a failing
rank's own traceback is shown. For the ScalingPanel: a click on Run reaches the kernel and
each run of the sweep adds its point to the speedup chart in the page.

Needs Debian's Chromium (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _session_pools import live_rank_pids
from labdriver import (
    ARTIFACTS,
    NEEDS_BROWSER,
    SOURCE_LENGTH_JS,
    chromium_page,
    jupyter_lab,
    open_and_run,
    write_notebook,
)

pytestmark = NEEDS_BROWSER

STEPS = 30

LAUNCH_CELL = f"""\
import time, workbench
from workbench.ui import RunPanel

def train(steps):
    print("hello from rank", workbench.rank())
    for step in range(steps):
        workbench.report(step=step, loss=1.0 / (step + 1), samples=8)
        time.sleep(0.1)
    return workbench.rank()

job = workbench.launch(train, {STEPS}, np=2, engine="horovod", runs_dir="runs")
RunPanel(job)"""

FAILING_CELL = """\
def divide(x):
    return x / (workbench.rank() - 1)   # rank 1 divides by zero

failing = workbench.launch(divide, 1.0, np=2, engine="torch", runs_dir="runs")
RunPanel(failing)"""


def _rank_pids(root: Path) -> list[int]:
    return [pid for run_dir in root.glob("runs/*") for pid in live_rank_pids(run_dir)]


def _no_ranks_left(root: Path) -> bool:
    deadline = time.monotonic() + 10      # the kernel is gone: its ranks must be too
    while _rank_pids(root) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not _rank_pids(root)


@pytest.mark.timeout(420)
def test_run_panel_follows_a_launched_function_live_in_jupyterlab(tmp_path):
    write_notebook(tmp_path / "run.ipynb", [LAUNCH_CELL, FAILING_CELL])
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "run_panel.png"
    try:
        with jupyter_lab(tmp_path) as (url, token), chromium_page() as page:
            try:
                open_and_run(page, url, token, "run.ipynb")
                page.get_by_role("button", name="Stop", exact=True).first.wait_for(
                    timeout=120_000)
                page.wait_for_function(f"() => ({SOURCE_LENGTH_JS})(['rank1', 'loss']) > 0",
                                       timeout=150_000, polling=250)
                mid_run = page.evaluate(SOURCE_LENGTH_JS, ["rank1", "loss"])
                page.get_by_text("[rank 1] hello from rank 1").first.wait_for(timeout=60_000)
                page.get_by_text("succeeded").first.wait_for(timeout=180_000)
                time.sleep(1.0)  # let the last patch render
                final = page.evaluate(SOURCE_LENGTH_JS, ["rank1", "loss"])
                assert 0 < mid_run <= final == STEPS
                assert page.evaluate(SOURCE_LENGTH_JS, ["overall", "loss"]) == STEPS
                # the failing job: its rank is named, with the user's own line
                page.get_by_text("rank 1: ZeroDivisionError").first.wait_for(timeout=120_000)
                page.get_by_text("return x / (workbench.rank() - 1)").first.wait_for(
                    timeout=10_000)
                page.screenshot(path=str(shot), full_page=True)
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "run_panel_failure.png"), full_page=True)
                raise
    finally:
        assert _no_ranks_left(tmp_path)
    assert shot.stat().st_size > 10_000


SCALING_CELL = """\
from workbench.ui import ScalingPanel
panel = ScalingPanel(np_values="1,2", preset="comm-bound", mode="strong", runs_dir="runs",
                     epochs=1, max_steps=15)
panel"""


@pytest.mark.timeout(420)
def test_scaling_panel_plots_each_run_of_a_sweep_in_jupyterlab(tmp_path):
    write_notebook(tmp_path / "scaling.ipynb", [SCALING_CELL])
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "scaling_panel.png"
    try:
        with jupyter_lab(tmp_path) as (url, token), chromium_page() as page:
            try:
                open_and_run(page, url, token, "scaling.ipynb")
                run = page.get_by_role("button", name="Run", exact=True)
                run.wait_for(timeout=120_000)
                page.wait_for_selector(".bk-Canvas, .bk-Figure, canvas", timeout=60_000)
                assert page.evaluate(SOURCE_LENGTH_JS, ["scaling_points", "speedup"]) == 0
                run.click()
                # one point per finished run, drawn while the next run is still going
                page.wait_for_function(
                    f"() => ({SOURCE_LENGTH_JS})(['scaling_points', 'speedup']) >= 1",
                    timeout=200_000, polling=250)
                page.get_by_text("Sweep finished").first.wait_for(timeout=200_000)
                time.sleep(1.0)
                assert page.evaluate(SOURCE_LENGTH_JS, ["scaling_points", "speedup"]) == 2
                page.get_by_text("Karp–Flatt").first.wait_for(timeout=10_000)
                page.screenshot(path=str(shot), full_page=True)
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "scaling_panel_failure.png"),
                                full_page=True)
                raise
    finally:
        assert _no_ranks_left(tmp_path)
    assert shot.stat().st_size > 10_000
