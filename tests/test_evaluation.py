"""Evaluation on held-out samples: split, batched, sharded across ranks and averaged."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import workbench
from workbench.config import ConfigError, JobConfig
from workbench.records import of_kind
from workbench.training.results import evaluate
from workbench.training.setup import build
from workbench.training.sharding import eval_shard, holdout_split
from workbench.training.synchronizer import Synchronizer


def test_holdout_split_is_seeded_disjoint_and_complete():
    train, val = holdout_split(1797, seed=3, fraction=0.1)
    again_train, again_val = holdout_split(1797, seed=3, fraction=0.1)
    assert torch.equal(train, again_train) and torch.equal(val, again_val)
    assert len(val) == 180 and len(train) == 1797 - 180
    assert not set(train.tolist()) & set(val.tolist())
    assert sorted(train.tolist() + val.tolist()) == list(range(1797))
    assert not torch.equal(val, holdout_split(1797, seed=4, fraction=0.1)[1])
    every, same = holdout_split(100, seed=0, fraction=0.0)
    assert torch.equal(every, same) and len(every) == 100


def test_eval_shards_cover_every_held_out_sample_once():
    val = holdout_split(1797, 0, 0.1)[1]
    shards = [eval_shard(val, r, 7) for r in range(7)]
    assert torch.equal(torch.cat(shards), val)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


class _Recorder(Synchronizer):
    """Keeps what one rank would send to the allreduce."""

    def __init__(self) -> None:
        self.sent: torch.Tensor | None = None

    def allreduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        self.sent = values.clone()
        return values


def test_sharded_batched_evaluation_equals_one_pass_over_the_held_out_set():
    cfg = JobConfig(model="mlp", dataset="digits", batch_size=16)
    setup = build(cfg, torch.device("cpu"))
    seen: list[int] = []
    setup.model.register_forward_pre_hook(lambda _m, args: seen.append(len(args[0])))
    totals = torch.zeros(3, dtype=torch.float64)
    for rank in range(3):  # three ranks, one after the other: each sends its sums
        sync = _Recorder()
        evaluate(SimpleNamespace(rank=rank, size=3, config=cfg), setup, sync)
        totals += sync.sent
    assert max(seen) <= cfg.batch_size  # never the whole set in one forward pass
    with torch.no_grad():
        x, y = setup.data.x[setup.val_idx], setup.data.y[setup.val_idx]
        out = setup.model(x)
        loss = float(nn.functional.cross_entropy(out, y))
        acc = float((out.argmax(1) == y).double().mean())
    assert totals[2] == len(setup.val_idx) == 180
    assert abs(float(totals[0] / totals[2]) - loss) < 1e-5
    assert abs(float(totals[1] / totals[2]) - acc) < 1e-12


def test_bad_evaluation_fields_are_one_line_errors():
    with pytest.raises(ConfigError, match="--val-fraction"):
        JobConfig(val_fraction=0.9).validate()
    with pytest.raises(ConfigError, match="--eval-every"):
        JobConfig(eval_every=-1).validate()


@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_two_ranks_report_the_same_held_out_metrics_each_epoch(warm, engine):
    cfg = JobConfig(engine=engine, np=2, model="mlp", width=32, dataset="digits", epochs=2,
                    batch_size=32, eval_every=1, threads_per_rank=1, cpu_bind="none",
                    runs_dir=str(warm(engine) / "runs"))
    job = workbench.start(cfg)
    assert job.wait(180) == "succeeded", job.summary
    assert job.summary.get("pool"), "a call on the warm ranks (conftest.py)"
    epochs = of_kind(job.metrics(), "epoch")
    assert {(e["rank"], e["epoch"]) for e in epochs} == {(r, e) for r in (0, 1) for e in (0, 1)}
    for epoch in (0, 1):
        both = [e for e in epochs if e["epoch"] == epoch]
        assert both[0]["val_loss"] == pytest.approx(both[1]["val_loss"], abs=1e-9)
        assert both[0]["val_accuracy"] == both[1]["val_accuracy"]
    # the final figures are those of the last evaluation, on the held-out samples of model.pt
    summary = job.summary
    assert summary["final_loss"] == pytest.approx(epochs[-1]["val_loss"], abs=1e-9)
    setup = build(cfg, torch.device("cpu"))
    setup.model.load_state_dict(job.record().model_state())
    held_out = evaluate(SimpleNamespace(rank=0, size=1, config=cfg), setup, Synchronizer())
    assert summary["final_loss"] == pytest.approx(held_out["val_loss"], abs=1e-5)
    assert summary["final_accuracy"] == pytest.approx(held_out["val_accuracy"], abs=1e-9)
    assert job.result()["val_samples"] == 180
