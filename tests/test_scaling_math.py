"""The scaling lab's arithmetic: metrics, unit parsing, α–β cost model and simulator.

These tests need no processes and run in well under a second.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from workbench.cli import main as cli_main
from workbench.scaling import costmodel, metrics, simulate, units

# --- metrics ------------------------------------------------------------------------------

def test_speedup_efficiency_karp_flatt_on_known_timings():
    # 100 s alone, 30 s on 4 workers: S = 3.333, E = 0.8333, e = (0.3 - 0.25) / 0.75 = 1/15.
    s = metrics.speedup(100.0, 30.0)
    assert s == pytest.approx(100 / 30)
    assert metrics.efficiency(s, 4) == pytest.approx(100 / 120)
    assert metrics.karp_flatt(s, 4) == pytest.approx(1 / 15)
    assert metrics.karp_flatt(1.0, 1) is None


def test_karp_flatt_of_amdahl_speedup_is_its_serial_fraction():
    # For a job that follows Amdahl exactly, Karp–Flatt returns the serial part 1 − f at every p.
    for p in (2, 4, 16, 128):
        assert metrics.karp_flatt(metrics.amdahl(p, 0.9), p) == pytest.approx(0.1)


def test_laws_at_their_limits():
    assert metrics.amdahl(1, 0.7) == pytest.approx(1.0)
    assert metrics.amdahl(1e9, 0.95) == pytest.approx(20.0, rel=1e-6)   # 1 / (1 − f)
    assert metrics.gustafson(8, 0.9) == pytest.approx(0.1 + 7.2)
    assert metrics.amdahl(64, 1.0) == pytest.approx(64)


def test_fit_amdahl_recovers_parallel_fraction():
    workers = [1, 2, 4, 8, 16]
    speedups = [metrics.amdahl(p, 0.93) for p in workers]
    assert metrics.fit_amdahl(workers, speedups) == pytest.approx(0.93)
    # noisy measurements: within a few hundredths
    rng = random.Random(0)
    noisy = [s * (1 + rng.uniform(-0.02, 0.02)) for s in speedups]
    assert metrics.fit_amdahl(workers, noisy) == pytest.approx(0.93, abs=0.03)


def test_fit_gustafson_recovers_parallel_fraction():
    workers = [1, 2, 4, 8]
    assert metrics.fit_gustafson(workers, [metrics.gustafson(p, 0.8) for p in workers]) == (
        pytest.approx(0.8))


def test_fit_needs_more_than_one_worker():
    with pytest.raises(ValueError, match="more than one worker"):
        metrics.fit_amdahl([1], [1.0])


def test_scaling_rows_strong_and_weak():
    # strong: same 1000 samples; weak: 1000 samples per worker
    strong = metrics.scaling_rows([1, 2], [10.0, 6.25], [100.0, 160.0])
    assert strong[1]["speedup"] == pytest.approx(1.6)
    assert strong[1]["efficiency"] == pytest.approx(0.8)
    assert strong[1]["karp_flatt"] == pytest.approx(0.25)
    assert strong[0]["karp_flatt"] is None and strong[0]["efficiency"] == 1.0
    weak = metrics.scaling_rows([1, 2, 4], [10.0, 12.5, 16.0], [100.0, 160.0, 250.0])
    assert [round(r["efficiency"], 4) for r in weak] == [1.0, 0.8, 0.625]
    assert all(r["karp_flatt"] is not None for r in strong[1:])
    weak = metrics.scaling_rows([1, 2, 4], [10.0, 12.5, 16.0], [100.0, 160.0, 250.0], "weak")
    assert all(r["karp_flatt"] is None for r in weak)   # it inverts Amdahl: strong only


def test_bad_timings_are_rejected():
    with pytest.raises(ValueError, match="parallel_time_s must be > 0"):
        metrics.speedup(1.0, 0.0)


# --- units --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("25Gbit/s", 25e9 / 8), ("100Gb/s", 100e9 / 8), ("10Gbps", 10e9 / 8),
    ("12GB/s", 12e9), ("900MB/s", 900e6), ("1e9", 1e9),
])
def test_parse_bandwidth(text, expected):
    assert units.parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize("text, expected", [
    ("5us", 5e-6), ("5µs", 5e-6), ("1.5ms", 1.5e-3), ("0.62s", 0.62), ("0.62", 0.62),
    ("200ns", 2e-7), ("0", 0.0),
])
def test_parse_duration(text, expected):
    assert units.parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text, expected", [
    ("4KB", 4096), ("1MB", 1 << 20), ("64MB", 64 << 20), ("16MiB", 16 << 20), ("512", 512),
    ("0.5KB", 512),
])
def test_parse_size(text, expected):
    assert units.parse_size(text) == expected


@pytest.mark.parametrize("parse, text, message", [
    (units.parse_bandwidth, "25 furlongs", "unknown unit 'furlongs'"),
    (units.parse_bandwidth, "fast", "expected a number and a unit"),
    (units.parse_bandwidth, "0Gbit/s", "greater than zero"),
    (units.parse_duration, "5 parsecs", "unknown unit"),
    (units.parse_size, "4Kb", "unknown unit"),
    (units.parse_size, "0.3B", "whole number of bytes"),
    (units.parse_workers, "1,two", "bad worker count 'two'"),
    (units.parse_workers, "1,0", "bad worker count '0'"),
])
def test_unit_errors_say_what_is_wrong(parse, text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_parse_count_and_lists():
    assert units.parse_count("44.5e6") == pytest.approx(44.5e6)
    assert units.parse_count("138M") == pytest.approx(138e6)
    assert units.parse_list("4KB, 1MB", units.parse_size, "sizes") == [4096, 1 << 20]
    assert units.parse_workers("1,2,4") == [1, 2, 4]


# --- cost model ---------------------------------------------------------------------------

def test_ring_formula_and_bandwidth_optimality():
    alpha, beta, n = 5e-6, 1 / 3.125e9, 100e6
    assert costmodel.ring_allreduce_time(n, 1, alpha, beta) == 0.0
    assert costmodel.ring_allreduce_time(n, 4, alpha, beta) == pytest.approx(
        6 * alpha + 1.5 * n * beta)
    # the bandwidth term tends to 2·n·β whatever p is
    big = costmodel.ring_allreduce_time(n, 1024, 0.0, beta)
    assert big == pytest.approx(2 * n * beta, rel=1e-3)


def test_rabenseifner_beats_ring_on_latency_and_ps_grows_linearly():
    alpha, beta = 5e-6, 1e-9
    small = 4096
    assert (costmodel.rabenseifner_allreduce_time(small, 512, alpha, beta)
            < costmodel.ring_allreduce_time(small, 512, alpha, beta))
    ps8 = costmodel.parameter_server_time(1e6, 8, alpha, beta)
    ps16 = costmodel.parameter_server_time(1e6, 16, alpha, beta)
    assert ps16 - 2 * alpha == pytest.approx(2 * (ps8 - 2 * alpha))


def test_tree_is_still_accepted_as_the_name_of_rabenseifner(capsys):
    n, p, alpha, beta = 1 << 20, 64, 5e-6, 1e-9
    rabenseifner = costmodel.allreduce_time("rabenseifner", n, p, alpha, beta)
    assert costmodel.allreduce_time("tree", n, p, alpha, beta) == rabenseifner
    assert rabenseifner != costmodel.allreduce_time("ring", n, p, alpha, beta)
    assert costmodel.coefficients("tree", p) == costmodel.coefficients("rabenseifner", p)
    with pytest.raises(ValueError, match="rabenseifner"):
        costmodel.allreduce_time("binary-tree", n, p, alpha, beta)

    def cli_rows(algorithm: str) -> dict:
        assert cli_main(["simulate", "--preset", "inception3-25gbe", "--algorithm", algorithm,
                         "--workers", "8,64", "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    old, new = cli_rows("tree"), cli_rows("rabenseifner")
    assert old["rows"] == new["rows"] and old["setup"]["algorithm"] == "rabenseifner"
    assert old["rows"] != cli_rows("ring")["rows"]


def test_busbw_follows_nccl_tests():
    # 64 MB in 10 ms over 4 ranks: algbw 6.7 GB/s, busbw × 2·3/4 = 1.5
    algbw = costmodel.algbw(64e6, 0.01)
    assert algbw == pytest.approx(6.4e9)
    assert costmodel.busbw(64e6, 0.01, 4) == pytest.approx(6.4e9 * 1.5)


@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner", "ps"])
def test_alpha_beta_fit_recovers_known_parameters(algorithm):
    alpha, beta, p = 40e-6, 1 / 2.5e9, 2
    sizes = [4096, 65536, 1 << 20, 16 << 20, 64 << 20]
    rng = random.Random(1)
    times = [costmodel.allreduce_time(algorithm, n, p, alpha, beta) * (1 + rng.gauss(0, 0.01))
             for n in sizes]
    fit = costmodel.fit_alpha_beta(sizes, times, p, algorithm)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.1)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.05)


def test_alpha_beta_fit_needs_two_sizes_and_two_workers():
    with pytest.raises(ValueError, match="two or more different sizes"):
        costmodel.fit_alpha_beta([4096, 4096], [1e-4, 1e-4], 2)
    with pytest.raises(ValueError, match="p ≥ 2"):
        costmodel.fit_alpha_beta([4096, 8192], [1e-4, 2e-4], 1)


# --- simulator ----------------------------------------------------------------------------

def _eff(workers, **kw):
    args = dict(params=44.5e6, compute_time_s=0.62, bandwidth=25e9 / 8, latency_s=5e-6)
    args.update(kw)
    return [r["efficiency"] for r in simulate.simulate(workers, **args)]


@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner", "ps"])
def test_one_worker_is_perfectly_efficient(algorithm):
    assert _eff([1], algorithm=algorithm) == [1.0]


@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner", "ps"])
def test_efficiency_falls_as_workers_grow(algorithm):
    effs = _eff([1, 2, 8, 64, 512], algorithm=algorithm)
    assert all(a > b for a, b in zip(effs, effs[1:], strict=False)), effs


def test_efficiency_falls_as_params_grow():
    effs = [_eff([64], params=n)[0] for n in (1e6, 25e6, 138e6, 340e6)]
    assert all(a > b for a, b in zip(effs, effs[1:], strict=False)), effs


def test_free_communication_scales_ideally():
    effs = _eff([1, 8, 512], bandwidth=float("inf"), latency_s=0.0)
    assert effs == [1.0, 1.0, 1.0]


def test_overlap_hides_communication_but_not_more_than_backward():
    no = simulate.predict_step(64, 44.5e6, 0.62, 25e9 / 8, 5e-6, overlap=0.0)
    half = simulate.predict_step(64, 44.5e6, 0.62, 25e9 / 8, 5e-6, overlap=0.5)
    assert half.step_time_s == pytest.approx(no.step_time_s - 0.5 * no.comm_time_s)
    # a tiny compute time caps what overlap can hide at the backward pass (2/3 of compute)
    capped = simulate.predict_step(64, 44.5e6, 0.003, 25e9 / 8, 5e-6, overlap=1.0)
    assert capped.exposed_comm_s == pytest.approx(capped.comm_time_s - 0.002)


def test_strong_scaling_and_oversubscription():
    free = dict(params=1e6, bandwidth=float("inf"), latency_s=0.0)
    strong = simulate.predict_step(4, compute_time_s=1.0, mode="strong", **free)
    assert strong.compute_time_s == pytest.approx(0.25) and strong.speedup == pytest.approx(4)
    # 3 ranks bound to 2 cores: one core runs 2 ranks in turn and every step waits for it
    over = simulate.predict_step(3, compute_time_s=1.0, cores=2, **free)
    assert over.compute_time_s == pytest.approx(2.0)
    assert over.efficiency == pytest.approx(0.5)
    assert simulate.oversubscription(4, 2) == 2 and simulate.oversubscription(5, 2) == 3
    assert simulate.oversubscription(2, 2) == 1 and simulate.oversubscription(8, None) == 1


def test_presets_reproduce_horovod_benchmark_order_and_size():
    p = simulate.PRESETS
    resnet = p["resnet101-25gbe"].predict().efficiency
    inception = p["inception3-25gbe"].predict().efficiency
    vgg = p["vgg16-25gbe"].predict().efficiency
    assert vgg < resnet and vgg < inception                  # VGG-16 is communication-bound
    assert resnet == pytest.approx(0.90, abs=0.05)
    assert inception == pytest.approx(0.90, abs=0.05)
    assert vgg == pytest.approx(0.68, abs=0.05)
    assert p["vgg16-25gbe-ps"].predict().efficiency < 0.05  # one server cannot keep up


def test_pure_math_imports_no_torch_and_no_bokeh():
    code = ("import sys; import workbench.scaling.metrics, workbench.scaling.costmodel, "
            "workbench.scaling.simulate, workbench.scaling.units; "
            "print(sorted(m for m in ('torch', 'bokeh', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- calibration arithmetic ---------------------------------------------------------------

def test_calibrated_epoch_prediction_counts_latency_per_message_and_oversubscription():
    from workbench.scaling.calibrate import predict_epoch_time

    alpha, beta = 1e-3, 1e-9
    two = predict_epoch_time(2, 4096, 32, 0.002, [1000] * 6, alpha, beta, cores=2)
    assert two["steps"] == 64
    assert two["comm_s"] == pytest.approx(6 * (2 * alpha + 1000 * beta))
    assert two["epoch_time_s"] == pytest.approx(64 * (0.002 + two["comm_s"]))
    three = predict_epoch_time(3, 4096, 32, 0.002, [1000] * 6, alpha, beta, cores=2)
    assert three["steps"] == 42
    assert three["compute_s"] == pytest.approx(0.004)     # 3 ranks on 2 cores: 2 on one core
    assert three["comm_s"] == pytest.approx(6 * (4 * alpha + 2 / 3 * 2 * 1000 * beta))


def _steps(step_s: float, compute_s: float, ranks: int, n: int = 20) -> list[dict]:
    """Metrics of a run whose every step takes step_s (two epochs of n steps)."""
    out: list[dict] = [{"kind": "event", "message": "ready", "rank": r, "steps_per_epoch": n}
                       for r in range(ranks)]
    for epoch in range(2):
        out += [{"kind": "step", "step": epoch * n + i, "rank": r, "step_time_s": step_s,
                 "compute_s": compute_s} for i in range(n) for r in range(ranks)]
        out += [{"kind": "epoch", "epoch": epoch, "rank": r, "epoch_time_s": n * step_s}
                for r in range(ranks)]
    return out


def test_fit_on_np1_and_np2_recovers_contention_and_latency_and_reproduces_np2():
    from workbench.scaling.calibrate import fit_step_model, predict_epoch_time

    beta, messages, alpha = 1e-9, [4000] * 6, 5e-4
    one = _steps(0.010, 0.008, 1)
    sync = sum(2 * alpha + 4000 * beta for _ in messages)        # ring at p=2, per message
    two = _steps(1.25 * 0.010 + sync, 1.25 * 0.008, 2)            # ranks compute 25% slower
    fit = fit_step_model(one, two, messages, beta)
    assert fit["contention"] == pytest.approx(1.25)
    assert fit["alpha_fit_s"] == pytest.approx(alpha)
    pred = predict_epoch_time(2, 4096, 32, fit["step_time_1_s"], messages, fit["alpha_fit_s"],
                              beta, cores=2, contention=fit["contention"])
    assert pred["epoch_time_s"] == pytest.approx(64 * (1.25 * 0.010 + sync))


def test_ddp_sends_buckets_and_horovod_one_message_per_tensor():
    from workbench.scaling.calibrate import message_bytes

    tensors = [4 << 20] * 10                                       # 40 MB of gradients
    assert message_bytes("torch", tensors) == [1 << 20, 25 << 20, 14 << 20]
    assert message_bytes("horovod", tensors) == tensors


# --- sweep configurations -----------------------------------------------------------------

def test_sweep_configs_fix_total_work_or_work_per_worker():
    from workbench.config import ConfigError, JobConfig
    from workbench.scaling.sweep import sweep_config

    base = JobConfig(dataset="synthetic", samples=2048, batch_size=32, epochs=2)
    strong = sweep_config(base, 4, "strong")
    assert (strong.np, strong.batch_size, strong.samples, strong.threads_per_rank) == (
        4, 8, 2048, 1)                                    # global batch 32 split 4 ways
    weak = sweep_config(base, 4, "weak")
    assert (weak.batch_size, weak.samples, weak.epochs) == (32, 8192, 2)
    digits = sweep_config(JobConfig(dataset="digits", epochs=2), 2, "weak")
    assert digits.epochs == 4                             # a fixed dataset: more epochs
    assert sweep_config(JobConfig(threads_per_rank=2), 2, "weak").threads_per_rank == 2
    with pytest.raises(ConfigError, match="multiple of 3"):
        sweep_config(base, 3, "strong")
