"""The process helper of the labs: results come back, failures name the worker, nothing leaks."""

from __future__ import annotations

import time

import pytest
from _labs_helpers import fail_on_rank_one, live_children, sleep_forever, square

from workbench.synchronization.processes import WorkerError, run_workers


def test_results_come_back_in_rank_order():
    assert run_workers(square, 3, (10,), distributed=False, timeout=120) == [10, 11, 14]
    assert live_children() == []


def test_a_failing_worker_is_named_and_the_others_are_stopped():
    start = time.monotonic()
    with pytest.raises(WorkerError) as err:
        run_workers(fail_on_rank_one, 2, distributed=True, timeout=120)
    assert "worker 1" in str(err.value)
    assert "deliberate failure on rank 1" in str(err.value)
    assert time.monotonic() - start < 60           # did not wait for rank 0's 30 s sleep
    assert live_children() == []


def test_a_hung_run_times_out_with_the_workers_named():
    with pytest.raises(WorkerError, match=r"did not finish within 3 s; still running: a, b"):
        run_workers(sleep_forever, 2, distributed=False, timeout=3, names=["a", "b"])
    assert live_children() == []
