"""The from-scratch ring allreduce equals the libraries' allreduce, for odd sizes and np=2,3."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from _labs_helpers import assert_recorded_and_reaped

from workbench.synchronization.ring_allreduce import (
    bytes_sent_per_worker,
    ring_allreduce,
    thread_ring_allreduce,
)
from workbench.synchronization.ring_lab import check_against_horovod, run_ring_lab


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("n", [1, 2, 7, 1001])
def test_thread_ring_sums_exactly(size, n):
    tensors = [torch.arange(n, dtype=torch.float64) * (r + 1) + r for r in range(size)]
    expected = sum(tensors)
    for out in thread_ring_allreduce(tensors):
        assert torch.equal(out, expected)


def test_one_worker_sends_nothing():
    def never(*_):
        raise AssertionError("a ring of one must not send or receive")

    t = torch.arange(7.0)
    assert torch.equal(ring_allreduce(t, 0, 1, send=never, recv=never), torch.arange(7.0))


def test_bytes_sent_follow_the_bandwidth_term():
    # Each worker sends 2(p−1) chunks of n/p elements: 2(p−1)/p · n · 4 bytes.
    for p in (2, 3, 4):
        n = 1200
        assert bytes_sent_per_worker(n, p) == pytest.approx(2 * (p - 1) / p * n * 4)
    assert bytes_sent_per_worker(1001, 1) == 0


@pytest.mark.parametrize("np_", [2, 3])
def test_ring_equals_torch_distributed_all_reduce(np_, tmp_path):
    r = run_ring_lab(np_, sizes=(7, 1001), repeats=2, runs_dir=str(tmp_path), timeout=240)
    assert [c["n"] for c in r["checks"]] == [7, 1001]
    for c in r["checks"]:
        assert c["exact_integers"], c
        assert c["max_abs_diff"] < 1e-12, c
    for row in r["rows"]:
        assert row["ring_s"] > 0 and row["library_s"] > 0 and row["model_s"] > 0
    assert r["alpha_s"] >= 0 and r["beta_s_per_byte"] >= 0
    assert_recorded_and_reaped(tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="Horovod not built")
def test_ring_equals_horovod_allreduce(tmp_path):
    r = check_against_horovod(2, (7, 1001), runs_dir=str(tmp_path), timeout=240)
    assert [row["n"] for row in r["rows"]] == [7, 1001]
    for row in r["rows"]:
        assert row["max_abs_diff_vs_horovod"] < 1e-12, row
        assert row["max_abs_diff_vs_torch_distributed"] < 1e-12, row


@pytest.mark.parametrize("args,message", [
    (["--np", "1"], "at least 2 processes"),
    (["--sizes", "7,abc"], "cannot read count"),
    (["--sizes", "1.5"], "whole element counts"),
])
def test_cli_rejects_bad_input(args, message):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench.cli", "ring", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
