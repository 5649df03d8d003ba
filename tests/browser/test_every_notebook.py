"""Every notebook of the course, as a student sees it: Run All in JupyterLab under Chromium.

The lessons, the exercises as handed out and their solutions each run top to bottom in one
JupyterLab, a few at a time in one Chromium (notebook_runner.py); this is the notebooks'
run in `make test` (nbmake runs them only where Chromium is missing). Then the page is
judged as a person would judge it (page_checks.py): no error or stderr output, no wall of
printed text, every table and chart a cell promises on the page, the buttons the page
invites the student to press answering within seconds, no label or chart title cut off,
every chart with axis labels and room for its category labels, no empty chart without a
word why, no two columns under one header.

Each notebook's page is photographed whole to test-artifacts/notebooks/ (not in git), so a
person can look at what the student saw.

Needs Debian's Chromium (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
from _session_pools import live_rank_pids
from labdriver import ARTIFACTS, NEEDS_BROWSER, REPO, chromium, jupyter_lab
from notebook_runner import Runner

pytestmark = NEEDS_BROWSER

#: Every notebook of the course, relative to notebooks/: the lessons, then the exercises
#: and their solutions.
NOTEBOOKS = sorted(str(p.relative_to(REPO / "notebooks"))
                   for p in (REPO / "notebooks").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts)
#: Notebooks run at once (WORKBENCH_BROWSER_SLOTS): most of a notebook's time is spent
#: waiting for its jobs' ranks, so two share two cores well.
SLOTS = int(os.environ.get("WORKBENCH_BROWSER_SLOTS", "2"))


@pytest.fixture(scope="module")
def runner(request, tmp_path_factory):
    """One JupyterLab over a copy of notebooks/ (the runs and any save stay out of the
    repository), one Chromium, and the runner that shares them, for the notebooks whose
    tests this session runs."""
    chosen = [item.callspec.params["notebook"] for item in request.session.items
              if item.module is request.module]
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(REPO / "notebooks", root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "runs"))
    with jupyter_lab(root) as (url, token), chromium() as browser:
        run = Runner(browser, url, token, chosen, ARTIFACTS / "notebooks", slots=SLOTS)
        try:
            yield run
        finally:
            run.close()
    deadline = time.monotonic() + 10          # the kernels are gone: their ranks must be too
    while _rank_pids(root) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _rank_pids(root), "ranks outlived their notebook's kernel"


def _rank_pids(root) -> list[int]:
    return [pid for run_dir in root.glob("**/runs/*") for pid in live_rank_pids(run_dir)]


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_runs_clean_in_jupyterlab(runner, notebook):
    outcome = runner.outcome(notebook)
    shots = ", ".join(str(s.relative_to(REPO)) for s in outcome.shots)
    assert not outcome.problems, (f"{notebook} ({outcome.seconds:.0f} s; look at {shots}):\n"
                                  + "\n".join(outcome.problems))
