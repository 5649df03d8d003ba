"""The training panel in a real JupyterLab, driven by a real Chromium.

What only a browser can show: BokehJS loads (inline, no CDN), the chart widget renders, a
click on Start reaches the kernel, and the kernel's asyncio task streams metrics into the
chart *in the page* while the job runs. A screenshot goes to test-artifacts/.

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

PANEL_CELL = """\
from workbench.ui import TrainingPanel
panel = TrainingPanel(engine="horovod", np=2, model="mlp", dataset="digits", epochs=2,
                      threads_per_rank=1, runs_dir="runs")
panel"""


def _rank_pids(root: Path) -> list[int]:
    """Pids of every rank any run under ``root/runs`` has started that is still alive."""
    return [pid for run_dir in root.glob("runs/*") for pid in live_rank_pids(run_dir)]


@pytest.mark.timeout(420)
def test_training_panel_charts_fill_live_in_jupyterlab(tmp_path):
    write_notebook(tmp_path / "panel.ipynb", [PANEL_CELL])
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "training_panel.png"
    try:
        with jupyter_lab(tmp_path) as (url, token), chromium_page() as page:
            try:
                open_and_run(page, url, token, "panel.ipynb")
                start = page.get_by_role("button", name="Start", exact=True)
                start.wait_for(timeout=120_000)
                page.wait_for_selector(".bk-Canvas, .bk-Figure, canvas", timeout=60_000)
                assert page.evaluate(SOURCE_LENGTH_JS, ["overall", "loss"]) == 0
                start.click()
                # the kernel's asyncio task streams points into the chart while the job runs
                page.wait_for_function(f"() => ({SOURCE_LENGTH_JS})(['overall', 'loss']) > 0",
                                       timeout=150_000, polling=250)
                page.get_by_text("running ·").first.wait_for(timeout=10_000)
                mid_run = page.evaluate(SOURCE_LENGTH_JS, ["overall", "loss"])
                page.get_by_text("succeeded").first.wait_for(timeout=180_000)
                time.sleep(1.0)  # let the last patch render
                final = page.evaluate(SOURCE_LENGTH_JS, ["overall", "loss"])
                per_rank = page.evaluate(SOURCE_LENGTH_JS, ["rank1", "loss"])
                assert 0 < mid_run <= final
                assert final == per_rank, "every step of both ranks reached the page"
                page.screenshot(path=str(shot), full_page=True)
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "training_panel_failure.png"),
                                full_page=True)
                raise
    finally:
        deadline = time.monotonic() + 10       # the kernel is gone: its ranks must be too
        while _rank_pids(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.5)
    assert not _rank_pids(tmp_path)
    assert shot.stat().st_size > 10_000
