"""Sharded data parallelism: the cost model and planner (pure), and the bytes one rank
holds, counted from its tensors, against the model at np=1 (in this process). The runs on
2 real ranks are checked with the engines' invariant in tests/launch/test_engine.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import workbench
from workbench.models import build_model, make_optimizer
from workbench.records import of_kind
from workbench.sharded.costmodel import (
    SHARDED_STATES,
    as_printed,
    fsdp2_shard,
    model_states,
    optimizer_bytes_per_parameter,
    plan,
    sent_per_step,
    smallest_fit,
    table_1,
    transformer_activations,
    transformer_flops,
    transformer_parameters,
)
from workbench.sharded.memory import held_bytes


def test_zero_paper_table_1_for_its_7_5b_example():
    # Rajbhandari et al. 2020, Table 1, the 7.5B column (GB of 1e9 bytes, K = 12): baseline
    # DP, P_os, P_os+g, P_os+g+p for each data-parallel degree N_d, as the paper prints them.
    assert table_1() == {
        1: ["120", "120", "120", "120"],
        4: ["120", "52.5", "41.3", "30"],
        16: ["120", "35.6", "21.6", "7.5"],
        64: ["120", "31.4", "16.6", "1.88"],
        256: ["120", "30.4", "15.4", "0.47"],
        1024: ["120", "30.1", "15.1", "0.12"],
    }
    assert optimizer_bytes_per_parameter("adam", mixed=True) == 12
    assert [as_printed(x) for x in (2.0, 0.125, 1.875, 41.25, 99.96)] == \
        ["2", "0.13", "1.88", "41.3", "100"]


def test_model_states_follow_each_strategy_formula():
    psi, n, k = 1000.0, 4, 8
    assert model_states(psi, n, "ddp", k, 4) .total == (4 + 4 + k) * psi
    assert model_states(psi, n, "zero1", k, 4).total == (4 + 4) * psi + k * psi / n
    assert model_states(psi, n, "zero2", k, 4).total == 4 * psi + (4 + k) * psi / n
    assert model_states(psi, n, "zero3", k, 4).total == (4 + 4 + k) * psi / n
    assert model_states(psi, 1, "zero3", k, 4) == model_states(psi, 1, "ddp", k, 4)
    with pytest.raises(ValueError, match="strategy"):
        model_states(psi, n, "zero4", k)


def test_fsdp2_cuts_each_parameter_on_dim_0_and_pads_the_last_shards():
    shapes = [(10, 32), (10,), (2,)]                     # Ψ = 332, no dim 0 divides by 4
    shards = [fsdp2_shard(shapes, 4, rank) for rank in range(4)]
    assert [padded for padded, _ in shards] == [3 * 32 + 3 + 1] * 4
    assert [own for _, own in shards] == [100, 100, 99, 33]  # rows 3,3,3,1; 1,1,0,0 of (2,)
    assert sum(own for _, own in shards) == 332
    assert fsdp2_shard([(32, 64), (32,)], 4, 3) == (8 * 64 + 8, 8 * 64 + 8)  # even: Ψ/N


def test_traffic_model_zero3_sends_one_and_a_half_times_ddp():
    ddp = sent_per_step(1e6, 4, "ddp")
    assert ddp == 2 * 1e6 * 4 * 3 / 4
    assert sent_per_step(1e6, 4, "zero3") == 1.5 * ddp
    assert sent_per_step(1e6, 4, "zero2") == ddp
    assert sent_per_step(1e6, 1, "ddp") == 0


def test_planner_counts_activations_and_finds_the_fewest_devices():
    psi = 7.5e9
    assert plan(psi, 64, 32, "zero2").fits and not plan(psi, 64, 32, "ddp").fits
    acts = transformer_activations(layers=32, hidden=4096, seq=2048, micro_batch=1, heads=32)
    assert acts == 32 * 2048 * 4096 * (34 + 5 * 32 * 2048 / 4096)  # 30.6 GB
    with_acts = plan(psi, 64, 32, "zero2", activations=acts)
    assert not with_acts.fits and "does not fit" in str(with_acts)
    assert smallest_fit(psi, 32, "zero3") == 4             # 120/4 = 30 GB
    assert smallest_fit(psi, 32, "ddp") is None            # 120 GB on every device
    with pytest.raises(ValueError, match="device_gb"):
        plan(psi, 64, 0, "zero2")


def test_a_transformer_layer_counted():
    # GPT-3 6.7B (Brown et al. 2020, Table 2.1): 32 layers, h = 4096, GPT-2's 50,257 tokens
    assert transformer_parameters(32, 4096, vocab=50257) == pytest.approx(6.7e9, rel=0.01)
    assert transformer_parameters(1, 64) == 4 * 64 * 64 + 2 * 64 * 4 * 64   # attention + MLP
    # forward FLOPs: 2 per parameter and token, plus attention's s/(6h) on top
    psi, s, b, h = transformer_parameters(32, 4096), 2048, 1, 4096
    assert transformer_flops(32, h, s, b) == pytest.approx(2 * psi * b * s * (1 + s / (6 * h)))


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """A process group of one rank, in this process."""
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def one_step(model, optimizer, reduce=None) -> dict[str, int]:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(torch.randn(8, 32)), torch.randint(0, 10, (8,))
                                      ).backward()
    if reduce:
        reduce()
    optimizer.step()
    return held_bytes(model, optimizer)


@pytest.mark.parametrize("engine", ["torch", "zero1", "zero2", "fsdp"])
@pytest.mark.parametrize(("opt", "momentum"), [("adam", 0.0), ("sgd", 0.9)])
def test_one_rank_holds_what_the_model_predicts(one_rank, engine, opt, momentum):
    from workbench.sharded.costmodel import STRATEGY_OF
    from workbench.sharded.zero_rank import STAGES

    torch.manual_seed(0)
    model = build_model("mlp", (32,), 10, 48)
    psi = sum(p.numel() for p in model.parameters())
    make = lambda params: make_optimizer(opt, params, 0.01, momentum)  # noqa: E731
    reduce = None
    if engine in STAGES:
        optimizer = STAGES[engine](model, make, 0, 1)
        reduce = optimizer.reduce_gradients
    else:
        if engine == "fsdp":
            from workbench.sharded.fsdp import shard_model
            shard_model(model, torch.device("cpu"))
        optimizer = make(list(model.parameters()))
    got = one_step(model, optimizer, reduce)
    want = model_states(psi, 1, STRATEGY_OF[engine], optimizer_bytes_per_parameter(
        opt, momentum), 4)
    for field, value in [("param_bytes", want.params), ("grad_bytes", want.grads),
                         ("optimizer_bytes", want.optimizer)]:
        assert abs(got[field] / value - 1) <= 0.05, (engine, field, got[field], value)


def test_run_charts_show_each_ranks_bytes_held_and_sent():
    from workbench.ui.run_charts import RunCharts

    rows = [{"kind": "step", "rank": r, "time": 1.0, "epoch": 0, "step": 0, "loss": 1.0,
             "param_bytes": 4e6, "grad_bytes": 2e6 / (r + 1), "optimizer_bytes": 1e6,
             "sent_bytes": 3e6} for r in range(2)]
    charts = RunCharts(np=2, memory=True)
    assert charts.add(rows) == 2
    held = charts.sources["memory"].data
    assert held["category"] == ["rank 0", "rank 1"]
    assert held["parameters"] == [4.0, 4.0] and held["gradients"] == [2.0, 1.0]
    assert held["optimizer state"] == [1.0, 1.0]
    assert charts.sources["sent"].data["value"] == [3.0, 3.0]
    assert "memory" not in RunCharts(np=2).figures    # engines that do not count bytes
    # A ZeRO-2 job, beside its ranks: one DDP rank of the same model holds the parameters
    # whole (rank 0's, as every rank's) and the shards of gradients and optimizer summed.
    zero2 = RunCharts(np=2, memory=True, sharded=SHARDED_STATES["zero2"])
    zero2.add(rows)
    held = zero2.sources["memory"].data
    assert held["category"] == ["rank 0", "rank 1", "DDP (same model)"]
    assert held["parameters"] == [4.0, 4.0, 4.0] and held["gradients"] == [2.0, 1.0, 3.0]
    assert held["optimizer state"] == [1.0, 1.0, 2.0]
    sent = zero2.sources["sent"].data   # the ranks' bars only, one value each
    assert sent["category"] == ["rank 0", "rank 1"] and sent["value"] == [3.0, 3.0]


def test_the_training_panel_charts_a_sharded_job_beside_ddp():
    from workbench.ui.training_panel import _charts_for

    for engine, bars in (("torch", 2), ("zero1", 3), ("fsdp", 3), ("horovod", None)):
        charts = _charts_for(workbench.JobConfig(engine=engine, np=2).validate())
        memory = charts.sources.get("memory")
        assert (len(memory.data["category"]) if memory else None) == bars, engine


def test_compressed_gradients_halve_what_ddp_sends_not_the_gathered_parameters():
    full = sent_per_step(1e6, 2, "ddp")
    assert sent_per_step(1e6, 2, "ddp", grad_bytes=2) == full / 2
    assert sent_per_step(1e6, 2, "zero2", grad_bytes=2) == 0.75 * full   # params stay fp32


def test_bf16_autocast_and_compressed_gradients_on_real_ranks(warm):
    """DDP and ZeRO-2 on 2 ranks, gradients sent in bf16 under bf16 autocast: DDP sends half
    the bytes, ZeRO-2 three quarters (its parameters are gathered in fp32), each rank holds
    what it held in fp32, and the model still learns. (On warm ranks: conftest.py.)"""
    import workbench
    from workbench.sharded.measured import comparison, predicted

    common = dict(np=2, model="mlp", width=32, dataset="digits", epochs=1, max_steps=20,
                  threads_per_rank=1, optimizer="adam", lr=0.01, precision="bf16",
                  grad_compression="bf16", runs_dir=str(warm("torch") / "runs"),
                  cpu_bind="none")
    for engine in ("torch", "zero2"):
        job = workbench.start(workbench.JobConfig(engine=engine, **common))
        assert job.wait(300) == "succeeded" and job.summary.get("pool"), job.summary
        for row in comparison(job):
            assert abs(row["ratio"] - 1) <= 0.05, (engine, row)
        psi = sum(int(v.numel()) for v in job.record().model_state().values())
        sent = predicted(job)["sent_bytes"]
        share = {"torch": 0.5, "zero2": 0.75}[engine]
        assert sent == pytest.approx(share * sent_per_step(psi, 2, "ddp"))
        losses = [r["loss"] for r in of_kind(job.metrics(), "step") if r["rank"] == 0]
        assert sum(losses[-5:]) < sum(losses[:5])          # it trains
        assert job.summary["final_loss"] < losses[0]


@pytest.mark.parametrize(("fields", "flag"), [
    (dict(engine="horovod", grad_compression="bf16"), "--grad-compression"),
    (dict(engine="torch", grad_compression="fp16"), "--grad-compression"),
    (dict(engine="torch", grad_compression="fp8"), "--grad-compression"),
    (dict(engine="torch", precision="bf16", dtype="float64"), "--precision"),
    (dict(engine="zero1", checkpoint_every=1), "--engine"),
    (dict(engine="fsdp", resume="some-run"), "--engine"),
])
def test_bad_sharded_or_precision_settings_are_one_line_errors(fields, flag):
    from workbench.config import ConfigError, JobConfig

    with pytest.raises(ConfigError, match=flag) as err:
        JobConfig(**fields).validate()
    assert "\n" not in str(err.value)


def test_sharded_engines_start_with_torchrun_and_name_their_engine():
    from workbench.engines import ENGINES

    for engine in ("zero1", "zero2", "fsdp"):
        assert ENGINES[engine].plain_command(2) == [
            "torchrun", "--standalone", "--nproc-per-node", "2",
            "-m", f"workbench.sharded.{engine}_rank"]


#: Loaded first by every process of a job (PYTHONPATH): torch.distributed as torch 2.6 to
#: 2.12 have it, without the names torch 2.13 gave two collectives.
TORCH_2_12 = """
import os, pathlib
import torch.distributed as dist
del dist.all_gather_single, dist.reduce_scatter_single
with open(pathlib.Path(__file__).with_name("loaded_by"), "a") as out:
    out.write(f"{os.getpid()}\\n")
"""


@pytest.mark.parametrize("engine", ["torch", "zero2"])
def test_engines_run_and_count_on_a_torch_before_the_renamed_collectives(tmp_path, engine):
    """DDP and ZeRO-2 (the reduce-scatter and the all-gather) on 2 fresh ranks whose
    torch.distributed lacks the 2.13 names: they train, and the bytes they send are still
    counted, as the cost model says, through the older names (workbench/torch_versions.py).
    About 10 s each."""
    from workbench.sharded.measured import comparison

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TORCH_2_12)
    job = workbench.start(workbench.JobConfig(
        engine=engine, np=2, model="mlp", width=32, dataset="digits", epochs=1, max_steps=8,
        threads_per_rank=1, optimizer="adam", lr=0.01, runs_dir=str(tmp_path / "runs"),
        env=[f"PYTHONPATH={site}"]))
    assert job.wait(300) == "succeeded", job.summary
    pids = {int(p.read_text().split()[0]) for p in  # "<pid> <host>"
            (job.record().run_dir / "pids").glob("rank*.pid")}
    assert len(pids) == 2 and pids <= set(map(int, (site / "loaded_by").read_text().split()))
    rows = comparison(job)
    assert {row["rank"] for row in rows} == {0, 1}
    for row in rows:
        assert abs(row["ratio"] - 1) <= 0.05, row


#: Loaded first by every process of a job (PYTHONPATH): a gloo whose reduce-scatter sums
#: where it is asked to average, as torch 2.7 and 2.8's did (PyTorch issue 162338); each
#: process that met it writes its pid to `summed`.
GLOO_SUMS_FOR_AVG = """
import os, pathlib
import torch.distributed as dist

def summing(original):
    def reduce_scatter(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if op == dist.ReduceOp.AVG:
            with open(pathlib.Path(__file__).with_name("summed"), "a") as out:
                out.write(f"{os.getpid()}\\n")
            op = dist.ReduceOp.SUM
        return original(output, input, op=op, group=group, async_op=async_op)
    return reduce_scatter

for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
    if hasattr(dist, name):
        setattr(dist, name, summing(getattr(dist, name)))
"""


def test_fsdp_averages_on_a_gloo_whose_reduce_scatter_sums(tmp_path):
    """FSDP2 on 2 fresh ranks whose gloo sums where FSDP2 asks it to average: the engine
    finds it out and has FSDP2 sum and divide (sharded/fsdp.py), so 8 steps of SGD with batch
    16 end with the parameters of one process taking batch 32, as on a sound gloo; a sum in
    place of the average doubles every step, 0.1 apart here. About 15 s."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(GLOO_SUMS_FOR_AVG)
    common = dict(model="mlp", width=32, dataset="digits", epochs=1, max_steps=8,
                  threads_per_rank=1, optimizer="sgd", lr=0.1, runs_dir=str(tmp_path / "runs"))
    params = {}
    for engine, np, env in (("serial", 1, []), ("fsdp", 2, [f"PYTHONPATH={site}"])):
        job = workbench.start(workbench.JobConfig(engine=engine, np=np, batch_size=32 // np,
                                                  env=env, **common))
        assert job.wait(300) == "succeeded", job.summary
        params[engine] = job.record().model_state()
    pids = {int(p.read_text().split()[0]) for p in  # "<pid> <host>"
            (job.record().run_dir / "pids").glob("rank*.pid")}
    assert len(pids) == 2 and pids <= set(map(int, (site / "summed").read_text().split()))
    worst = max(float((params["fsdp"][k] - params["serial"][k]).abs().max())
                for k in params["serial"])
    assert worst < 1e-5, f"parameters differ by {worst:g}"
