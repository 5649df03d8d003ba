"""The suite's time budget: a whole-suite run that takes longer than its budget fails.

`make test` runs every test file and notebook; a slow test added to it should show the day it
is added, not three rounds later. The budget is the wall time of the pytest session (the
set-up before it is not counted): WORKBENCH_SUITE_BUDGET_MIN minutes, 30 unless set; 0 turns
the check off. The suite is bound by the CPU: on a quiet 2-core machine (12-05) a whole run
kept both cores busy for 96% of its time, 2,855 core-seconds, so it cannot take much under
1,400 s there; runs of the same code took 1,299-1,490 s, and 1,382 s on the CI machine.
30 minutes is a fifth above the slowest: the machine's swings do not fail a run, a test that
adds minutes does. (On 12-03 the suite took 11.7 min against 20; since then it runs every
notebook in JupyterLab under Chromium and the second-user, pool and core-queue tests.) Only
a whole-suite run is checked: one given the tests/ folder itself, with no -k, -m,
--deselect, --lf or -x, and in which nothing was deselected. A single file, a -k selection
or a re-run of the failures is never failed for its time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

ENV = "WORKBENCH_SUITE_BUDGET_MIN"
DEFAULT_MIN = 30.0


def budget_s() -> float:
    """The budget in seconds (0: no check); a value that is not a number is refused."""
    raw = os.environ.get(ENV, str(DEFAULT_MIN))
    try:
        minutes = float(raw)
    except ValueError:
        raise pytest.UsageError(f"{ENV}={raw!r} is not a number of minutes "
                                f"(e.g. {ENV}=12, or 0 to switch the check off)") from None
    return max(minutes, 0.0) * 60


def is_whole_suite(config: pytest.Config, folder: Path, deselected: int) -> bool:
    """True when this run was asked for every test: `folder` itself, nothing filtered out."""
    opt = config.option
    filtered = (getattr(opt, "keyword", "") or getattr(opt, "markexpr", "")
                or getattr(opt, "deselect", None) or getattr(opt, "lf", False)
                or getattr(opt, "maxfail", 0) or deselected)
    asked = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    return not filtered and folder.resolve() in asked


class SuiteBudget:
    """Times the session and fails a whole-suite run that took longer than budget_s()."""

    def __init__(self, config: pytest.Config, folder: Path) -> None:
        self.config, self.folder = config, folder
        self.budget = budget_s()
        self.start = time.monotonic()
        self.deselected = 0
        self.verdict = ""

    def pytest_deselected(self, items: list) -> None:
        self.deselected += len(items)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        wall = time.monotonic() - self.start
        if not self.budget:
            self.verdict = f"suite wall time {wall:.0f} s (no budget: {ENV}=0)"
        elif not is_whole_suite(self.config, self.folder, self.deselected):
            self.verdict = (f"suite wall time {wall:.0f} s (a subset ran: the "
                            f"{self.budget / 60:g}-minute budget applies to the whole suite)")
        elif wall <= self.budget:
            self.verdict = (f"suite wall time {wall:.0f} s, within its budget of "
                            f"{self.budget:g} s ({self.budget / 60:g} min, {ENV})")
        else:
            self.verdict = (f"FAILED: the whole suite took {wall:.0f} s, over its budget of "
                            f"{self.budget:g} s ({self.budget / 60:g} min); the slowest "
                            f"items are listed above. Make them faster, or raise {ENV}.")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.verdict:
            terminalreporter.write_sep("=", self.verdict,
                                       red=self.verdict.startswith("FAILED"), bold=True)


def register(config: pytest.Config, folder: Path) -> None:
    """Install the check for the suite in `folder` on the process that reports (not on
    pytest-xdist's workers, which each run only a part)."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SuiteBudget(config, folder), "workbench-suite-budget")
