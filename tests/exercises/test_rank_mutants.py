"""The checkers that run answers on real ranks (exercises 12 and 13), fed every answer of
tests/exercises/mutants/: each wrong one refused with the words that name its mistake,
each right one written another way accepted.

They run on warm torch ranks (conftest.py's `warm`: 2 ranks for the whole session, and 3
of this module's for exercise 12's second world size), so a check is a call of a few
hundred milliseconds, not a torchrun start.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mutants import assert_judged, ex12, ex13, of

import workbench
from workbench.exercises import overlap, zero


@pytest.fixture(scope="module")
def two_ranks(warm) -> str:
    """The runs folder where the session's 2 warm torch ranks wait."""
    return str(warm("torch") / "runs")


@pytest.fixture(scope="module")
def three_ranks(two_ranks) -> str:
    """The same runs folder with 3 warm torch ranks too (this module's): exercise 12's
    second world size."""
    with workbench.ranks(np=3, engine="torch", runs_dir=two_ranks, cpu_bind="none") as pool:
        pool.wait_ready(240)
        yield two_ranks


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", [a for a in of(ex12) if a.task == "zero1"],
                         ids=lambda a: a.id)
def test_exercise_12_judges_every_answer_on_2_and_3_ranks(three_ranks, answer):
    assert_judged(answer, zero.check_zero1(answer.value.make, answer.value.step,
                                           runs_dir=three_ranks, timeout_s=60))


@pytest.mark.parametrize("answer", [a for a in of(ex12) if a.task == "shard"],
                         ids=lambda a: a.id)
def test_exercise_12s_first_task_judges_every_answer_in_this_process(answer):
    assert_judged(answer, zero.check_shard_optimizer(answer.value))


def test_exercise_12_checks_both_world_sizes_with_their_own_learning_rates(three_ranks):
    feedback = zero.check_zero1(ex12.make, ex12.step, runs_dir=three_ranks)
    assert feedback.passed, feedback
    assert "2 ranks (lr" in feedback.message and "3 ranks (lr" in feedback.message
    assert "216 of 648 bytes" in feedback.message      # 162 padded elements, 54 per rank


def test_exercise_12_answers_a_blank_at_once(tmp_path: Path):
    def blank_step(flat_params, flat_grad, shard, optimizer, rank, world):
        """Average the gradients, step this rank's slice, all-gather every slice."""
        # Your code here.
        raise NotImplementedError

    feedback = zero.check_zero1(ex12.make, blank_step, runs_dir=str(tmp_path / "runs"))
    assert not feedback.passed and "not written yet" in str(feedback)
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", of(ex13), ids=lambda a: a.id)
def test_exercise_13_judges_every_answer_by_what_it_measured(two_ranks, answer):
    assert_judged(answer, overlap.check_launch_hook(answer.value, runs_dir=two_ranks,
                                                    timeout_s=60))


def test_a_pass_states_the_measured_times(two_ranks):
    feedback = overlap.check_launch_hook(ex13.counts_first_then_returns_early,
                                         runs_dir=two_ranks)
    assert feedback.passed, feedback
    for words in ("bucket 0 (4 tensors) was full at", "its all-reduce started at",
                  "gradient(s) still to come", "backward() returned at", "ms"):
        assert words in feedback.message, feedback


def test_a_blank_answer_is_told_without_starting_ranks(tmp_path: Path):
    def blank(bucket, pending):
        """Start the bucket's all-reduce once its last gradient is ready."""
        # Your code here
        raise NotImplementedError

    feedback = overlap.check_launch_hook(blank, runs_dir=str(tmp_path / "runs"))
    assert not feedback.passed and "not written yet" in feedback.message
    assert not (tmp_path / "runs").exists()
    assert not overlap.check_launch_hook(42, runs_dir=str(tmp_path / "runs")).passed


def _events(*items: tuple) -> list[dict]:
    """A step's timeline: ("grad", param, ms), ("start", bucket, ms), ("returned", ms) ..."""
    out = []
    for kind, *rest in items:
        if kind == "grad":
            out.append({"kind": "grad", "param": rest[0], "ms": rest[1]})
        elif kind == "start":
            out.append({"kind": "start", "what": "allreduce", "bucket": rest[0],
                        "sync": False, "ms": rest[1]})
        else:
            out.append({"kind": kind, "ms": rest[-1], "what": "wait()", "op": "allreduce"})
    return out


def test_the_timeline_rules_without_ranks():
    """Two buckets of two tensors: launched at once passes; one held until the other is
    full, started after backward() returned, waited for inside it, started twice, or
    changed after its start, does not."""
    buckets = [[0, 1], [2, 3]]
    on_time = _events(("grad", 0, 0.1), ("grad", 1, 0.2), ("start", 0, 0.25),
                      ("grad", 2, 0.3), ("grad", 3, 0.4), ("start", 1, 0.45), ("returned", 0.5))
    assert overlap.step_problem(on_time, buckets) is None
    held = _events(("grad", 0, 0.1), ("grad", 1, 0.2), ("grad", 2, 0.3), ("grad", 3, 0.4),
                   ("start", 0, 0.41), ("start", 1, 0.42), ("returned", 0.5))
    assert "2 more gradient(s)" in overlap.step_problem(held, buckets)[0]
    late = _events(("grad", 0, 0.1), ("grad", 1, 0.2), ("grad", 2, 0.3), ("grad", 3, 0.4),
                   ("returned", 0.5), ("start", 0, 0.6), ("start", 1, 0.7))
    assert "nothing overlapped" in overlap.step_problem(late, buckets)[0]
    waited = on_time[:3] + _events(("asked", 0.26)) + on_time[3:]
    assert "called wait()" in overlap.step_problem(waited, buckets)[0]
    twice = on_time[:3] + _events(("start", 0, 0.26)) + on_time[3:]
    assert "all-reduced 2 times" in overlap.step_problem(twice, buckets)[0]
    changed = on_time + _events(("changed", 0.6))
    assert "changed a tensor" in overlap.step_problem(changed, buckets)[0]


def test_the_checker_leaves_the_warm_ranks_as_it_found_them(two_ranks):
    """After checks that waited, mismatched and polled, a plain all-reduce on the same
    ranks still sums (the network undid its patches and left no unmatched call)."""
    def plain():
        import torch
        import torch.distributed as dist
        from torch._C._distributed_c10d import ProcessGroup

        dist.init_process_group("gloo")
        t = torch.ones(2)
        dist.all_reduce(t)
        return float(t[0]), type(vars(ProcessGroup)["allreduce"]).__name__

    for answer in (ex13.only_rank_0_communicates, ex13.waits_for_its_all_reduce):
        overlap.check_launch_hook(answer, runs_dir=two_ranks)
    job = workbench.launch(plain, np=2, engine="torch", runs_dir=two_ranks)
    assert job.wait(60) == "succeeded"
    assert [value for value, _ in job.results()] == [2.0, 2.0]
    assert all(kind != "function" for _, kind in job.results())   # torch's own method again


def zero1_step_with_the_2_13_names(flat_params, flat_grad, shard, optimizer, rank, world):
    import torch.distributed as dist

    mine = flat_grad.new_empty(flat_params.numel() // world)
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
    """A step written with all_gather_single and reduce_scatter_single passes on 2 and 3
    ranks whose torch.distributed lacks them (workbench/torch_versions.py's give_new_names).
    About 10 s: torchrun starts ranks of its own, which the PYTHONPATH reaches."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TORCH_2_12)
    monkeypatch.setenv("PYTHONPATH", str(site))
    feedback = zero.check_zero1(ex12.make, zero1_step_with_the_2_13_names,
                                runs_dir=str(tmp_path / "runs"))
    assert feedback.passed, feedback
    assert sorted((site / "ranks").read_text().split()) == ["0", "0", "1", "1", "2"]
