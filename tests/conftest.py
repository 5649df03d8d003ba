"""Settings and clean-up every test shares.

Jobs share a host's cores through a folder (workbench/jobs/cores.py). Each test session gets
a folder of its own, so two sessions on one machine, or a notebook left running, do not queue
behind each other's jobs; and no per-user limit, even in a hub's terminal. Tests of the
sharing itself set their own values.

A job must not outlive the test that started it: a test that fails half-way would otherwise
leave its job training (and holding cores, so later tests queue behind it) until the session
ends. After each test, every job this process started and that still runs is stopped.

The whole suite has a time budget (tests/_budget.py): `make test` fails when it takes longer.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from _budget import register

if "WORKBENCH_SHARED_DIR" not in os.environ:  # (pytest-xdist's workers inherit the folder)
    os.environ["WORKBENCH_SHARED_DIR"] = tempfile.mkdtemp(prefix="workbench-tests-")
    atexit.register(shutil.rmtree, os.environ["WORKBENCH_SHARED_DIR"], ignore_errors=True)
os.environ.setdefault("WORKBENCH_JOBS_PER_USER", "0")


def pytest_configure(config: pytest.Config) -> None:
    register(config, Path(__file__).parent)  # a whole-suite run over budget fails


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test():
    yield
    from workbench.jobs import stop_all

    stop_all()
