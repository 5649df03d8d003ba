"""Stragglers: with one slow rank every rank's step takes as long as the slowest one."""

from __future__ import annotations

import importlib.util

import pytest

from workbench.synchronization.stragglers import (
    dropped_step_times,
    run_stragglers,
    step_table,
    summarize_run,
)

DELAY = 0.06


def _step(rank, step, compute, sync):
    return {"kind": "step", "rank": rank, "step": step, "compute_s": compute, "sync_s": sync,
            "step_time_s": compute + sync}


def test_drop_the_slowest_estimate_from_per_rank_times():
    # Three ranks; rank 2 computes 0.5 s, the others 0.1 and 0.2 s; the allreduce costs 0.01 s.
    metrics = [_step(r, s, c, 0.5 - c + 0.01) for s in range(4)
               for r, c in enumerate((0.1, 0.2, 0.5))]
    assert len(step_table(metrics)) == 4
    rows = dropped_step_times(step_table(metrics))
    assert [r["gradients_used"] for r in rows] == [3, 2, 1]
    assert [r["step_time_s"] for r in rows] == pytest.approx([0.51, 0.21, 0.11])
    summary = summarize_run(metrics)
    assert summary["step_time_s"] == pytest.approx(0.51)   # the k = 0 estimate is the truth


@pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="Horovod not built")
def test_every_rank_waits_for_the_straggler(tmp_path):
    r = run_stragglers(DELAY, 2, straggler_rank=1, steps=12, runs_dir=str(tmp_path),
                       backup_ps=False, timeout=280)
    base, slow = r["baseline"], r["straggler"]
    # Every rank's step now takes at least the straggler's delay ...
    for rank in slow["per_rank"]:
        assert rank["step_time_s"] > 0.8 * DELAY
    # ... and the fast rank spends it waiting in the allreduce, not computing. Compared with
    # the delay itself, not the baseline's wait: the allreduce's own latency (Horovod's
    # cycle, 35 ms per step seen on a loaded machine) runs while the fast rank waits, so the
    # two do not add up. Its compute is compared with its own baseline: on a loaded machine
    # the compute alone can take 0.05 s.
    fast = slow["per_rank"][0]
    assert fast["sync_s"] > 0.6 * DELAY
    assert fast["compute_s"] - base["per_rank"][0]["compute_s"] < 0.5 * DELAY
    assert slow["step_time_s"] > max(base["step_time_s"], 0.8 * DELAY)
    # The k = 0 estimate reproduces the measured step time; dropping the straggler's
    # gradient would give back most of the delay.
    assert slow["if_dropped"][0]["step_time_s"] == pytest.approx(slow["step_time_s"], rel=0.3)
    assert slow["if_dropped"][1]["step_time_s"] < slow["step_time_s"] - 0.6 * DELAY
