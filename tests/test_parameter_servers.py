"""Parameter servers as deployed: sharded over k servers, co-located or not, pipelined or not,
checked against the published parameter-server vs ring comparison at 128 GPUs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.scaling import costmodel as cm
from workbench.scaling import simulate as sim

N, BETA = 1e8, 1 / 3.125e9   # 100 MB of gradients over 25 Gbit/s


def test_one_server_is_the_old_model_and_k_servers_share_its_load():
    assert cm.parameter_server_time(N, 64, 5e-6, BETA, 1e-11) == pytest.approx(
        2 * 5e-6 + 2 * 64 * N * BETA + 63 * N * 1e-11)
    one = cm.parameter_server_time(N, 64, 0.0, BETA)
    eight = cm.parameter_server_time(N, 64, 0.0, BETA, servers=8)
    assert eight == pytest.approx(one / 8)                   # each server gets 1/8 of the load
    many = cm.parameter_server_time(N, 64, 0.0, BETA, servers=128)
    assert many == pytest.approx(2 * N * BETA)               # the workers' links now bind


def test_co_located_servers_on_every_worker_move_what_the_ring_moves():
    ring = cm.ring_allreduce_time(N, 64, 0.0, BETA)
    for pipelined in (False, True):
        ps = cm.parameter_server_time(N, 64, 0.0, BETA, servers=64, colocated=True,
                                      pipelined=pipelined)
        assert ps == pytest.approx(ring)


def test_dedicated_pipelined_servers_beat_the_ring_when_bandwidth_binds():
    """BytePS's case: spare machines host k >= p servers, push and pull overlap."""
    ring = cm.ring_allreduce_time(N, 64, 5e-6, BETA)
    byteps = cm.parameter_server_time(N, 64, 5e-6, BETA, servers=64, pipelined=True)
    assert byteps < 0.55 * ring
    # ... but not when latency binds: tiny messages, and a message per server per phase
    assert cm.parameter_server_time(1e3, 64, 5e-6, BETA, servers=64, pipelined=True) > \
        cm.rabenseifner_allreduce_time(1e3, 64, 5e-6, BETA)


def test_whole_tensors_keep_the_busiest_server_busy():
    even = cm.parameter_server_time(N, 128, 0.0, BETA, servers=32, colocated=True)
    whole = cm.parameter_server_time(N, 128, 0.0, BETA, servers=32, colocated=True,
                                     busiest_share=0.1)
    assert whole == pytest.approx(even * 0.1 * 32)
    assert cm.allreduce_time("ps", N, 128, 0.0, BETA, layout=cm.ServerLayout(32, True)) == \
        pytest.approx(even)


@pytest.mark.parametrize("model", ["inception3", "resnet101"])
def test_parameter_servers_and_ring_at_128_gpus_within_10_points_of_the_horovod_paper(model):
    """Sergeev & Del Balso 2018: at 128 GPUs Horovod (ring) kept about 88%, standard
    distributed TensorFlow (parameter servers) about half."""
    ring, tfps = sim.PRESETS[f"{model}-25gbe-128"], sim.PRESETS[f"{model}-25gbe-tfps"]
    assert ring.workers == tfps.workers == 128
    assert abs(ring.predict().efficiency - 0.88) <= 0.10
    assert abs(tfps.predict().efficiency - 0.50) <= 0.10
    assert tfps.layout.servers == 32 and tfps.layout.colocated
    one_server = sim.predict_step(128, tfps.workload.params, tfps.workload.compute_time_s,
                                  tfps.network.bandwidth, tfps.network.latency_s, "ps",
                                  tfps.overlap)
    assert one_server.efficiency < 0.10           # the unsharded model: far from anything seen


def test_simulate_cli_takes_server_layouts_and_rejects_bad_ones():
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "workbench.cli", "simulate", *args],
                              capture_output=True, text=True, timeout=60)

    out = cli("--preset", "inception3-25gbe-tfps", "--workers", "128", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["setup"]["servers"]["servers"] == 32
    assert doc["rows"][0]["efficiency"] == pytest.approx(
        sim.PRESETS["inception3-25gbe-tfps"].predict().efficiency)
    out = cli("--preset", "inception3-25gbe", "--algorithm", "ps", "--servers", "16",
              "--colocated", "--workers", "64")
    assert out.returncode == 0 and "16 server(s) co-located" in out.stdout
    bad = cli("--preset", "inception3-25gbe", "--algorithm", "ps", "--servers", "0")
    assert bad.returncode == 2 and "--servers" in bad.stderr and "Traceback" not in bad.stderr
