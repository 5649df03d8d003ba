"""The "make this loop data-parallel" exercise, checked on 2 real ranks of each engine.

Each wrong conversion below differs from the solution by one mistake, and the checker must
reject it *for that reason*: its hint names the mistake. Both solutions must pass.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from workbench.exercises import check_data_parallel
from workbench.exercises.data_parallel import make_model
from workbench.records import list_runs


def horovod_version(data, batch_size, lr, epochs, seed, checkpoint, *, broadcast=True,
                    average=True, shard=True, op="Average", scale_lr=False, all_save=False,
                    strided=False, average_params=False):
    """The Horovod conversion of `train`, with switches that each make one classic mistake,
    and two that write a right answer another way: `strided` shards (rank r takes every
    size-th sample of each global batch) and `average_params` (plain SGD on each shard, then
    the parameters averaged after every step)."""
    import horovod.torch as hvd

    import workbench

    hvd.init()
    torch.set_num_threads(1)
    x, y = data
    model = make_model(seed)
    if broadcast:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size() if scale_lr else lr)
    if average and not average_params:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             op=getattr(hvd, op))
    rank, size = hvd.rank(), hvd.size()
    step = batch_size * size if shard else batch_size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            mine = slice(start + rank * batch_size, start + (rank + 1) * batch_size) if shard \
                else slice(start, start + batch_size)
            if strided:
                mine = slice(start + rank, start + step, size)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x[mine]), y[mine])
            loss.backward()
            optimizer.step()
            if average_params:
                with torch.no_grad():
                    for p in model.parameters():
                        p.copy_(hvd.allreduce(p, op=hvd.Average))
            workbench.report(loss=loss.item(), samples=batch_size)
    if rank == 0 or all_save:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


def ddp_version(data, batch_size, lr, epochs, seed, checkpoint, *, shard=True):
    """The DistributedDataParallel conversion of `train`."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data
    model = DDP(make_model(seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * size if shard else batch_size
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            mine = slice(start + rank * batch_size, start + (rank + 1) * batch_size) if shard \
                else slice(start, start + batch_size)
            optimizer.zero_grad()
            F.mse_loss(model(x[mine]), y[mine]).backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.module.state_dict(), checkpoint)
    return model.module.state_dict()


def _with(fn, **switches):
    def variant(data, batch_size, lr, epochs, seed, checkpoint):
        return fn(data, batch_size, lr, epochs, seed, checkpoint, **switches)
    return variant


def no_distribution(data, batch_size, lr, epochs, seed, checkpoint):
    """No distributed work at all: every rank trains the whole global batch by itself, from
    a fixed seed, with no collective call. It ends with exactly the right parameters."""
    import horovod.torch as hvd

    hvd.init()
    x, y = data
    model = make_model(0)                       # rank 0's seed on every rank: no broadcast
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = batch_size * hvd.size()              # the global batch, all on this rank
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            optimizer.zero_grad()
            F.mse_loss(model(x[start:start + step]), y[start:start + step]).backward()
            optimizer.step()
    if hvd.rank() == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


def check_warm(warm, fn, engine: str):
    """check_data_parallel on warm ranks (conftest.py's `warm`), as when a student keeps a
    pool (`workbench.ranks`): `launch()` takes it, and each check is a call, not a start-up.
    The Horovod checks come first, then the DDP ones, so each launcher starts once."""
    runs = warm(engine) / "runs"
    before = {r.run_id for r in list_runs(runs)}
    feedback = check_data_parallel(fn, engine=engine, runs_dir=str(runs))
    (check,) = [r for r in list_runs(runs) if r.run_id not in before and "check" in r.run_id]
    assert check.summary["pool"], "the check ran on the warm ranks"
    return feedback


WRONG = {
    "no broadcast": (dict(broadcast=False), "Broadcast rank 0's initial parameters"),
    "no averaging": (dict(average=False), "Average the gradients across ranks"),
    "whole data": (dict(shard=False), "every rank trained on the whole data set"),
    "sum": (dict(op="Sum"), "gradients were summed over the ranks, not averaged"),
    "every rank saves": (dict(all_save=True), "rank(s) [0, 1] wrote the checkpoint"),
    "lr scaled": (dict(scale_lr=True), "your optimizer used lr = 0.2"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mistake", list(WRONG))
def test_each_wrong_horovod_conversion_is_rejected_for_its_reason(warm, mistake):
    switches, reason = WRONG[mistake]
    feedback = check_warm(warm, _with(horovod_version, **switches), "horovod")
    assert not feedback.passed
    assert reason in str(feedback), str(feedback)


@pytest.mark.timeout(120)
def test_an_answer_with_no_distributed_work_is_named(warm):
    feedback = check_warm(warm, no_distribution, "horovod")
    assert not feedback.passed
    assert "each rank trained the whole global batch by itself" in str(feedback), str(feedback)
    assert "no distributed work" in str(feedback)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("engine, fn", [
    ("horovod", horovod_version),
    ("horovod", _with(horovod_version, strided=True)),
    ("horovod", _with(horovod_version, average_params=True)), ("torch", ddp_version)],
    ids=["horovod", "horovod-strided-shards", "horovod-parameter-averaging", "ddp"])
def test_both_solutions_pass(warm, engine, fn):
    feedback = check_warm(warm, fn, engine)
    assert feedback.passed, str(feedback)


@pytest.mark.timeout(120)
def test_a_wrong_ddp_conversion_is_rejected_for_its_reason(warm):
    feedback = check_warm(warm, _with(ddp_version, shard=False), "torch")
    assert not feedback.passed
    assert "every rank trained on the whole data set" in str(feedback), str(feedback)


def test_the_blank_is_answered_at_once_and_a_raising_function_after_its_run(tmp_path):
    """The exercise's blank gets "not written yet" without ranks; a written function that
    raises NotImplementedError on the ranks gets the same answer from its run's record."""
    def blank(data, batch_size, lr, epochs, seed, checkpoint):
        # Your code here.
        raise NotImplementedError

    def half_written(data, batch_size, lr, epochs, seed, checkpoint):
        model = make_model(seed)
        if model is not None:
            raise NotImplementedError
        return model.state_dict()

    runs = tmp_path / "runs"
    feedback = check_data_parallel(blank, engine="torch", runs_dir=str(runs))
    assert not feedback.passed and "not written yet" in str(feedback)
    assert not runs.exists()                                   # nothing was launched
    feedback = check_data_parallel(half_written, engine="torch", runs_dir=str(runs))
    assert not feedback.passed and "not written yet" in str(feedback)
    assert len(list(runs.iterdir())) == 1                      # this one ran
