"""The step and the loop's pieces (workbench/training/loop.py), without processes: one
rank's `train_step` on a tiny model, checked against SGD written out by hand."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from workbench.config import JobConfig
from workbench.training.loop import steps_to_run, train_step
from workbench.training.synchronizer import Synchronizer
from workbench.training.timing import WallClock


def model_and_batch(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    return model, torch.randn(12, 5, dtype=torch.float64), torch.randint(0, 3, (12,))


def step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, k: int, b: int) -> tuple:
    """One `train_step` of plain SGD (lr 0.1) on k micro-batches of b; returns what it
    returned, the marks its clock took and how often it called the lab's hook."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hooked: list[int] = []
    outs, losses, marks = train_step(model, optimizer, Synchronizer(), x, y, k, b, WallClock(),
                                     contextlib.nullcontext(), lambda: hooked.append(1))
    return torch.cat(outs), sum(losses), len(marks), len(hooked)


def test_the_step_is_sgd_and_k_micro_batches_step_like_one_batch_of_k_b() -> None:
    model, x, y = model_and_batch()
    by_hand, _, _ = model_and_batch()
    loss = nn.functional.cross_entropy(by_hand(x), y)
    grads = torch.autograd.grad(loss, list(by_hand.parameters()))
    expected = [p.detach() - 0.1 * g for p, g in zip(by_hand.parameters(), grads, strict=True)]

    out, step_loss, marks, hooked = step(model, x, y, k=1, b=12)
    assert torch.allclose(step_loss, loss) and out.shape == (12, 3)
    assert (marks, hooked) == (4, 1)   # start, backward done, averaged, stepped; hook once
    for p, e in zip(model.parameters(), expected, strict=True):
        assert torch.allclose(p, e, atol=1e-12)

    accumulated, _, _ = model_and_batch()
    _, acc_loss, _, _ = step(accumulated, x, y, k=3, b=4)   # 3 micro-batches of 4
    assert torch.allclose(acc_loss, loss, atol=1e-12)        # the mean over all 12 samples
    for p, e in zip(accumulated.parameters(), expected, strict=True):
        assert torch.allclose(p, e, atol=1e-12)


def test_steps_per_epoch_are_equal_on_every_rank_capped_and_refused_when_none_fit() -> None:
    def ctx(size: int, **fields) -> SimpleNamespace:
        return SimpleNamespace(config=JobConfig(**fields), size=size)

    assert steps_to_run(ctx(2, batch_size=10), 100) == 5           # 100 // (2 x 10)
    assert steps_to_run(ctx(3, batch_size=10), 100) == 3           # the last 10 are dropped
    assert steps_to_run(ctx(2, batch_size=10, accumulate=2), 100) == 2
    assert steps_to_run(ctx(2, batch_size=10, max_steps=1), 100) == 1
    with pytest.raises(ValueError, match="fewer than one global batch of 4 ranks x 1 micro"):
        steps_to_run(ctx(4, batch_size=32), 100)


def test_the_step_log_writes_each_steps_line_from_its_own_tensors_a_batch_later() -> None:
    """Three steps of k = 2 micro-batches of 2, logged in batches of one step (every_s 0):
    each line's loss is the sum of its micro-batches', its accuracy its own right answers,
    its times from its own marks, its epoch from its step (two an epoch), its bytes the
    synchronizer's, and it is written only once the next step is added."""
    from workbench.training.timing import StepLog

    lines: list[dict] = []
    ctx = SimpleNamespace(metric=lambda kind, *rows: lines.extend(rows), now=lambda: 7.25)
    sync = Synchronizer()
    sync.bytes, sync.measure = 96, lambda: {"sent_bytes": 48}
    sync.backward_wait_s = lambda: lambda: 0.125
    log = StepLog(ctx, WallClock(), sync, steps_per_epoch=2)
    log.every_s = 0.0
    y = torch.tensor([0, 1, 1, 0])
    right = [torch.tensor([[5.0, 0.0], [0.0, 5.0]]), torch.tensor([[0.0, 5.0], [5.0, 0.0]])]
    wrong = [o.flip(1) for o in right]
    steps = [(right, [0.25, 0.5]), ([right[0], wrong[1]], [1.0, 2.0]), (wrong, [3.0, 4.0])]
    for s, (outs, losses) in enumerate(steps):
        log.add(s, y, outs, [torch.tensor(v) for v in losses],
                [10.0 * s, 10.0 * s + 0.5, 10.0 * s + 0.75, 10.0 * s + 1.0])
        assert [line["step"] for line in lines] == list(range(s))   # a step later
    assert log.close() == (10.75, 6)                                  # the epoch's sums
    assert [line["loss"] for line in lines] == [0.75, 3.0, 7.0]
    assert [line["accuracy"] for line in lines] == [1.0, 0.5, 0.0]
    assert [line["epoch"] for line in lines] == [0, 0, 1]
    assert {(line["time"], line["samples"], line["sent_bytes"], line["synced_bytes"])
            for line in lines} == {(7.25, 4, 48, 96)}
    for line in lines:
        assert (line["step_time_s"], line["compute_s"], line["sync_s"]) == pytest.approx(
            (1.0, 0.375, 0.375))
    assert log.close() == (0.0, 0)                                    # nothing left


def test_the_ddp_clock_keeps_only_the_hook_of_the_gradient_computed_last(tmp_path) -> None:
    """DDPSync's mark of the backward pass's end: after the first step only the hook of the
    parameter whose gradient autograd accumulates last stays, and every step, accumulating
    or not, still takes that mark between the step's start and backward()'s return."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workbench.training.ddp_rank import DDPSync

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        model, x, y = model_and_batch()
        sync = DDPSync(model, WallClock(), compress=False)
        ddp = DDP(model)
        order: list[torch.Tensor] = []  # every parameter's gradient, in autograd's order
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(order.append)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for k in (1, 2, 1, 3):
            order.clear()
            _, _, marks = train_step(ddp, optimizer, sync, x, y, k, len(y) // k, sync.clock,
                                     contextlib.nullcontext(), lambda: None)
            assert [p is order[-1] for p in sync.hooks] == [True], k
            assert marks[0] < sync.ready <= sync.returned <= marks[1], k
            assert sync.backward_wait_s()() == sync.returned - sync.ready
    finally:
        # The DDP goes first: were its reducer to hold the group's last reference, it would
        # destroy the group holding the GIL and wait for gloo's thread, which may wait for
        # the GIL (pytorch/pytorch#56297); this test hung there once.
        ddp = None  # noqa: F841
        dist.destroy_process_group()
