"""`%%ranks` in a real JupyterLab: a cell runs on every warm rank, each rank's output under it.

What only a browser shows: the magic registered by `import workbench` in a real kernel, the
ranks' output reaching the page under the cell that ran it, labelled with each rank, for a
first cell (which starts the pool) and a second (which reuses it), a failing rank's own
traceback in the failing cell, and no rank left once the server and its kernel are gone.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _session_pools import live_rank_pids
from labdriver import (
    ARTIFACTS,
    NEEDS_BROWSER,
    chromium_page,
    jupyter_lab,
    open_and_run,
    write_notebook,
)

pytestmark = NEEDS_BROWSER

CELLS = [
    "import workbench",
    """%%ranks -n 2 --engine torch
import torch, torch.distributed as dist, workbench
t = torch.tensor([workbench.rank() + 1.0])
dist.all_reduce(t)
print("first cell: rank", workbench.rank(), "sum", t.item())""",
    """%%ranks -n 2 --engine torch
import os, workbench
print("second cell: rank", workbench.rank(), "pid", os.getpid())""",
    """%%ranks -n 2 --engine torch
import workbench
def check(x):
    if workbench.rank() == 1:
        raise ValueError(f"rank one dislikes {x}")
check(42)""",
]


def _text(page) -> str:
    return page.evaluate("() => document.querySelector('.jp-Notebook').innerText")


def _until_shown(page, needle: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in _text(page):
        assert time.monotonic() < deadline, f"never shown: {needle!r}"
        time.sleep(0.25)


def _rank_pids(root: Path) -> list[int]:
    return [pid for run_dir in root.glob("runs/*") for pid in live_rank_pids(run_dir)]


@pytest.mark.timeout(420)
def test_a_ranks_cell_shows_each_ranks_output_under_it_in_jupyterlab(tmp_path):
    write_notebook(tmp_path / "ranks.ipynb", CELLS)
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        with jupyter_lab(tmp_path) as (url, token), chromium_page() as page:
            try:
                open_and_run(page, url, token, "ranks.ipynb")
                for rank in (0, 1):
                    _until_shown(page, f"[rank {rank}] first cell: rank {rank} sum 3.0", 240)
                _until_shown(page, "[rank 1] second cell: rank 1 pid", 60)
                _until_shown(page, "failed on rank 1: ValueError: rank one dislikes 42", 60)
                cells = page.query_selector_all(".jp-Notebook .jp-Cell")
                second, third = cells[2].inner_text(), cells[3].inner_text()
                assert "[rank 0] second cell: rank 0 pid" in second
                assert "first cell" not in second   # each cell's output under that cell
                assert 'raise ValueError(f"rank one dislikes {x}")' in third  # its own line
                assert "rank/pool.py" not in third
                page.screenshot(path=str(ARTIFACTS / "ranks_magic.png"), full_page=True)
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "ranks_magic_failure.png"),
                                full_page=True)
                raise
            assert len({p for p in _rank_pids(tmp_path)}) == 2  # the pool's ranks, warm
    finally:
        deadline = time.monotonic() + 15       # the kernel is gone: its ranks must be too
        while _rank_pids(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.5)
    assert not _rank_pids(tmp_path)
