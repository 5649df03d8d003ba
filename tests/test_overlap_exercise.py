"""Exercise 13's checker: the launch hook run on 2 real ranks; right, wrong and blank answers."""

from __future__ import annotations

import pytest
import torch.distributed as dist

import workbench
from workbench.exercises.overlap import check_launch_hook, judge


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> str:
    """A runs folder with 2 warm torch ranks, which the checker's launch() uses: each check
    starts in milliseconds, and each must find the ranks as a fresh one would (the checker
    puts dist.all_reduce back as it found it)."""
    runs = str(tmp_path_factory.mktemp("overlap") / "runs")
    with workbench.ranks(np=2, engine="torch", runs_dir=runs) as pool:
        pool.wait_ready(240)
        yield runs


def right(bucket, pending):
    """Written another way than the engine's: count first, launch on the last gradient."""
    bucket.ready = bucket.ready + 1
    if bucket.ready < len(bucket.params):
        return
    handle = dist.all_reduce(bucket.pack(), async_op=True)
    pending.append((bucket, handle))


def too_early(bucket, pending):
    bucket.ready += 1
    if bucket.ready == 1:   # the bucket's other gradients are not there yet
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))


def never_packs(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        pending.append((bucket, dist.all_reduce(bucket.buffer, async_op=True)))


def waits_at_once(bucket, pending):
    """Started in time, but waited for inside the hook: backward stands still meanwhile."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        handle = dist.all_reduce(bucket.pack(), async_op=True)
        handle.wait()
        pending.append((bucket, handle))


def blank(bucket, pending):
    """Start the bucket's all-reduce once its last gradient is ready."""
    # Your code here
    raise NotImplementedError


def test_a_right_answer_written_another_way_passes(runs):
    feedback = check_launch_hook(right, runs_dir=runs)
    assert feedback.passed, feedback
    assert "during backward()" in feedback.message


def test_launching_before_the_bucket_is_full_fails(runs):
    feedback = check_launch_hook(too_early, runs_dir=runs)
    assert not feedback.passed
    assert any("bucket.ready == len(bucket.params)" in h for h in feedback.hints), feedback


def test_all_reducing_an_unpacked_buffer_fails_on_the_parameters(runs):
    feedback = check_launch_hook(never_packs, runs_dir=runs)
    assert not feedback.passed
    assert "differ from one process" in feedback.message, feedback


def test_a_hook_that_waits_for_its_own_all_reduce_fails(runs):
    feedback = check_launch_hook(waits_at_once, runs_dir=runs)
    assert not feedback.passed
    assert "waited for" in feedback.message and "nothing overlapped" in feedback.message, \
        feedback


def test_a_blank_answer_fails_without_starting_ranks(tmp_path):
    feedback = check_launch_hook(blank, runs_dir=str(tmp_path))
    assert not feedback.passed and "not written yet" in feedback.message
    assert not (tmp_path).exists() or not any(tmp_path.iterdir())
    assert not check_launch_hook(42, runs_dir=str(tmp_path)).passed


def test_all_reduces_started_after_backward_are_refused():
    step = {"launches": [2.0, 2.1], "grads": [1.0, 1.5], "backward_end": 1.6}
    late = judge([{"gap": 0.0, "steps": [step], "buckets": 2}] * 2)
    assert not late.passed and "after backward() had returned" in late.message
    step = {"launches": [1.55, 1.56], "grads": [1.0, 1.5], "backward_end": 1.6}
    at_the_end = judge([{"gap": 0.0, "steps": [step], "buckets": 2}] * 2)
    assert not at_the_end.passed and "last gradient" in at_the_end.message
    step = {"launches": [1.2, 1.56], "grads": [1.0, 1.5], "backward_end": 1.6}
    assert judge([{"gap": 0.0, "steps": [step], "buckets": 2}] * 2).passed
    waited = {**step, "waits": [1.25, 1.6]}   # the engine's waits come after backward
    assert not judge([{"gap": 0.0, "steps": [waited], "buckets": 2}] * 2).passed
    assert judge([{"gap": 0.0, "steps": [{**step, "waits": [1.7, 1.8]}],
                   "buckets": 2}] * 2).passed
