"""The rank-side API (workbench/rank/api.py): the same function runs in a notebook cell, where
`rank()` is 0 and `report()` does nothing, and on a rank, where `report()` takes numbers only.
Real ranks report through it in tests/launch/test_launch.py and tests/launch/test_pool.py."""

from __future__ import annotations

import pytest

import workbench
from workbench.rank import protocol


def sums_and_reports(n):
    for step in range(n):
        workbench.report(step=step, loss=1.0 / (step + 1), samples=4)
    return sum(range(n))


def test_the_rank_api_outside_a_job_lets_the_same_function_run_in_a_cell(monkeypatch):
    for var in ("HOROVOD_RANK", "RANK", "HOROVOD_SIZE", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert (workbench.rank(), workbench.size(), workbench.local_rank()) == (0, 1, 0)
    assert sums_and_reports(2) == 1                  # report() does nothing outside a job
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert (workbench.rank(), workbench.size()) == (3, 4)   # torchrun's variables


def test_report_refuses_values_that_are_not_one_number(monkeypatch):
    """workbench.rank.api.report(), in a rank (a context attached), takes numbers only."""
    monkeypatch.setattr(protocol, "_current", object())
    with pytest.raises(TypeError, match=r"report\(loss=...\) takes a number.*loss.item\(\)"):
        workbench.report(loss=[1.0, 2.0])
