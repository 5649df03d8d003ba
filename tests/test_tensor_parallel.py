"""Tensor parallelism on real ranks: Megatron's split by hand and DTensor's, against the
dense layers; the 2-D (data × tensor) mesh against the serial run; the bytes against the
model. One run of 2 ranks and one of 4 check everything."""

from __future__ import annotations

import pytest

from workbench.tensor_parallel import traffic
from workbench.tensor_parallel.check import Sizes, compare

TOL = 1e-5
SIZES = Sizes()


@pytest.fixture(scope="module", params=[2, 4])
def run(request, tmp_path_factory):
    ranks = request.param
    return ranks, compare(ranks, SIZES, runs_dir=str(tmp_path_factory.mktemp("tp")), timeout=240)


def test_megatron_matches_the_dense_stack_and_sends_what_the_model_says(run):
    ranks, results = run
    assert len(results) == ranks
    per_activation = traffic.activation_bytes(SIZES.tokens, SIZES.hidden)
    for result in results:
        m = result["megatron"]
        assert m["output"] < TOL and m["input_grad"] < TOL and m["weight_grads"] < TOL, m
        # Two all-reduces per block per step: g forward (one per block), f backward.
        assert [what for what, _ in m["log"]] == (["g forward"] * SIZES.layers
                                                 + ["f backward"] * SIZES.layers)
        assert all(n == per_activation for _, n in m["log"])
        assert m["bytes"] == m["model_bytes"] == 2 * SIZES.layers * per_activation


def test_dtensor_matches_the_dense_block_with_two_all_reduces(run):
    ranks, results = run
    for result in results:
        d = result["dtensor"]
        assert d["output"] < TOL and d["input_grad"] < TOL and d["weight_grads"] < TOL, d
        assert d["placements"] == {"fc1.weight": "(Shard(dim=0),)", "fc1.bias": "(Shard(dim=0),)",
                                   "fc2.weight": "(Shard(dim=1),)", "fc2.bias": "(Replicate(),)"}
        assert d["collectives"] == {"all_reduce": 2}   # Megatron's g forward and f backward


def test_two_way_data_by_two_way_tensor_parallel_follows_the_serial_run(run):
    ranks, results = run
    if ranks != 4:
        assert all("2d" not in r for r in results)
        return
    cells = sorted((r["2d"]["dp"], r["2d"]["tp"]) for r in results)
    assert cells == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert max(r["2d"]["params"] for r in results) < TOL


def test_tensor_parallelism_wants_a_fast_bus():
    nvlink, ethernet = traffic.bus_table()
    assert nvlink["compute_s"] == ethernet["compute_s"]
    assert nvlink["comm_over_compute"] < 0.5 < 5 < ethernet["comm_over_compute"]
    # Past the latency term the ratio does not depend on the batch: both grow with tokens.
    small = traffic.block_times(2048, 4096, 8, "25gbe")["comm_over_compute"]
    large = traffic.block_times(16384, 4096, 8, "25gbe")["comm_over_compute"]
    assert abs(small - large) / large < 0.01
    assert traffic.step_bytes(3, 10, 8, 2) == 3 * 2 * 10 * 8 * 2
