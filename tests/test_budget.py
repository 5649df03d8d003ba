"""The suite's time budget (tests/_budget.py): a whole-suite run over it fails and says by
how much; a subset (a single file, -k, -m, --lf, -x) is never failed for its time."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
from pathlib import Path
from _budget import register

def pytest_configure(config):
    register(config, Path(__file__).parent)
"""
#: Two tests that together take at least 0.3 s of wall time, whatever the machine's load.
TESTS = """
import time

def test_one():
    time.sleep(0.15)

def test_two():
    time.sleep(0.15)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_slow=TESTS, test_other="def test_three():\n    pass\n")
    return pytester


def run(suite: pytest.Pytester, minutes: str, *args: str, monkeypatch) -> pytest.RunResult:
    monkeypatch.setenv("WORKBENCH_SUITE_BUDGET_MIN", minutes)
    return suite.runpytest(str(suite.path), "-p", "no:cacheprovider", *args)


def test_whole_suite_over_its_budget_fails_and_states_the_threshold(suite, monkeypatch):
    result = run(suite, "0.001", monkeypatch=monkeypatch)   # 0.06 s
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*FAILED: the whole suite took * s, over its budget of "
                                 "0.06 s (0.001 min)*WORKBENCH_SUITE_BUDGET_MIN*"])


def test_whole_suite_within_its_budget_passes_and_prints_its_time(suite, monkeypatch):
    result = run(suite, "12", monkeypatch=monkeypatch)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*suite wall time * s, within its budget of 720 s (12 min*"])


@pytest.mark.parametrize("subset", [["-k", "one"], ["-m", "not slow"], ["-x"],
                                    ["--deselect", "test_other.py::test_three"]])
def test_a_filtered_run_is_never_failed_for_its_time(suite, monkeypatch, subset):
    result = run(suite, "0.001", *subset, monkeypatch=monkeypatch)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*a subset ran: the 0.001-minute budget applies to the "
                                 "whole suite*"])


def test_a_single_file_is_never_failed_for_its_time(suite, monkeypatch):
    monkeypatch.setenv("WORKBENCH_SUITE_BUDGET_MIN", "0.001")
    result = suite.runpytest(str(suite.path / "test_slow.py"), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*a subset ran*"])


def test_budget_zero_switches_the_check_off_and_a_bad_value_is_refused(suite, monkeypatch):
    assert run(suite, "0", monkeypatch=monkeypatch).ret == pytest.ExitCode.OK
    result = run(suite, "twelve", monkeypatch=monkeypatch)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*WORKBENCH_SUITE_BUDGET_MIN='twelve' is not a number of "
                                 "minutes*"])
