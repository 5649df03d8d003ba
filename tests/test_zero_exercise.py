"""Exercise 12, the ZeRO-1 optimizer step, checked on 2 real ranks: the solution passes,
each typical wrong answer is rejected for its own reason, and a blank says so at once."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workbench.exercises.zero import check_shard_optimizer, check_zero1


def make_shard_optimizer(flat_params, rank, world, lr):
    size = flat_params.numel() // world
    shard = torch.nn.Parameter(flat_params[rank * size:(rank + 1) * size])
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)


def zero1_step(flat_params, flat_grad, shard, optimizer, rank, world):
    dist.all_reduce(flat_grad)
    flat_grad /= world
    size = flat_params.numel() // world
    lo, hi = rank * size, (rank + 1) * size
    shard.grad = flat_grad[lo:hi]
    optimizer.step()
    dist.all_gather_single(flat_params, flat_params[lo:hi])


def zero1_step_without_all_gather(flat_params, flat_grad, shard, optimizer, rank, world):
    dist.all_reduce(flat_grad)
    flat_grad /= world
    size = flat_params.numel() // world
    shard.grad = flat_grad[rank * size:(rank + 1) * size]
    optimizer.step()


def optimizer_of_everything(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params)            # the whole buffer, on every rank
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)


def step_everything(flat_params, flat_grad, shard, optimizer, rank, world):
    dist.all_reduce(flat_grad)
    shard.grad = flat_grad / world
    optimizer.step()


def blank_step(flat_params, flat_grad, shard, optimizer, rank, world):
    """The exercise as handed out."""
    # Your code here.
    raise NotImplementedError


def test_the_solution_passes_with_a_shard_of_the_optimizer_state(tmp_path):
    feedback = check_zero1(make_shard_optimizer, zero1_step, runs_dir=str(tmp_path))
    assert feedback.passed, feedback
    assert "slice only" in str(feedback)


def zero1_step_with_the_2_13_names(flat_params, flat_grad, shard, optimizer, rank, world):
    size = flat_params.numel() // world
    mine = flat_grad.new_empty(size)
    dist.reduce_scatter_single(mine, flat_grad)
    shard.grad = mine / world
    optimizer.step()
    dist.all_gather_single(flat_params, shard.detach())


#: Loaded first by every process (PYTHONPATH): torch.distributed as torch 2.7 to 2.12 have
#: it; each rank (torchrun's RANK) writes its rank to `ranks`.
TORCH_2_12 = """
import os, pathlib
import torch.distributed as dist
del dist.all_gather_single, dist.reduce_scatter_single
if "RANK" in os.environ:
    with open(pathlib.Path(__file__).with_name("ranks"), "a") as out:
        out.write(os.environ["RANK"] + "\\n")
"""


def test_the_names_torch_2_13_gave_work_on_an_older_torch(tmp_path, monkeypatch):
    """A step written with all_gather_single and reduce_scatter_single passes on 2 ranks
    whose torch.distributed lacks them (workbench/torch_versions.py's give_new_names).
    About 5 s."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TORCH_2_12)
    monkeypatch.setenv("PYTHONPATH", str(site))
    feedback = check_zero1(make_shard_optimizer, zero1_step_with_the_2_13_names,
                           runs_dir=str(tmp_path / "runs"))
    assert feedback.passed, feedback
    assert sorted((site / "ranks").read_text().split()) == ["0", "1"]


def test_a_missing_all_gather_is_named(tmp_path):
    feedback = check_zero1(make_shard_optimizer, zero1_step_without_all_gather,
                           runs_dir=str(tmp_path))
    assert not feedback.passed and "all-gather is missing" in str(feedback), feedback


def test_every_rank_stepping_everything_is_named(tmp_path):
    feedback = check_zero1(optimizer_of_everything, step_everything, runs_dir=str(tmp_path))
    assert not feedback.passed and "every rank steps everything" in str(feedback), feedback


def test_a_blank_answer_is_told_without_starting_ranks(tmp_path):
    feedback = check_zero1(make_shard_optimizer, blank_step, runs_dir=str(tmp_path))
    assert not feedback.passed and "not written yet" in str(feedback), feedback
    assert not (tmp_path / "runs").exists() and not any(tmp_path.iterdir())


def copied_shard(flat_params, rank, world, lr):
    size = flat_params.numel() // world
    shard = torch.nn.Parameter(flat_params[rank * size:(rank + 1) * size].clone())
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)


def blank_make(flat_params, rank, world, lr):
    # Your code here.
    raise NotImplementedError


def test_the_shard_optimizer_check_takes_the_right_answer_and_names_wrong_ones():
    assert check_shard_optimizer(make_shard_optimizer).passed
    copy = check_shard_optimizer(copied_shard)
    assert not copy.passed and "a copy" in str(copy)
    whole = check_shard_optimizer(optimizer_of_everything)
    assert not whole.passed and "should hold 4 of the 12" in str(whole)
    assert "not written yet" in str(check_shard_optimizer(blank_make))
