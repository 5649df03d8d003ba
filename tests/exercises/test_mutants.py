"""The in-process checkers (exercises 1-6, 8-10), fed every answer of
tests/exercises/mutants/: each wrong one refused with the words that name its mistake,
each right one written another way accepted. A checker draws new cases at every check, so
each answer meets a few it could not have seen."""

from __future__ import annotations

import pytest
from mutants import (
    Answer,
    assert_judged,
    ex01,
    ex02,
    ex03,
    ex04,
    ex05,
    ex06,
    ex08,
    ex09,
    ex10,
    of,
)

from workbench.exercises import (
    allreduce,
    laws,
    lr_scaling,
    parallelism,
    pipeline,
    ring,
    scaling,
    sharding,
    staleness,
)

#: Each (answers' module, task) and the checker that judges them.
CHECKS = {
    (ex01, ""): allreduce.check_average_gradients,
    (ex02, ""): sharding.check_shard,
    (ex03, ""): scaling.check_scaling_table,
    (ex04, "rs"): ring.check_reduce_scatter_step,
    (ex04, "ag"): ring.check_allgather_step,
    (ex05, "bubble"): pipeline.check_bubble_fraction,
    (ex05, "m"): pipeline.check_micro_batches,
    (ex06, ""): parallelism.check_parallelism_choice,
    (ex08, "tau"): staleness.check_staleness,
    (ex08, "lr"): staleness.check_staleness_lr,
    (ex09, ""): lr_scaling.check_learning_rate,
    (ex10, "shares"): laws.check_serial_shares,
    (ex10, "law"): laws.check_which_law,
}
MODULES = sorted({module for module, _ in CHECKS}, key=lambda m: m.__name__)
ANSWERS = [(module, answer) for module in MODULES for answer in of(module)]


@pytest.mark.parametrize("module, answer", ANSWERS, ids=[a.id for _, a in ANSWERS])
def test_every_answer_is_judged_for_its_reason(module, answer: Answer):
    assert_judged(answer, CHECKS[module, answer.task](answer.value))


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_exercise_keeps_each_kind_of_answer(module):
    """Right answers written another way, and wrong ones of the kinds a test-wise student
    tries first: the package's own code (ex01 has none: its only tool is allreduce_sum, and
    not using it is refused instead) and answers learned by heart for the cases shown."""
    answers = of(module)
    tasks = {task for m, task in CHECKS if m is module}
    for task in tasks:
        mine = [a for a in answers if a.task == task]
        assert any(a.right for a in mine) and sum(not a.right for a in mine) >= 3, task
    refused = [a for a in answers if not a.right]
    if module is not ex01 and tasks != {"m"}:
        assert any("package's own" in a.words for a in refused), module.__name__
    assert any("by_heart" in a.name or "_by_heart" in a.name for a in refused) or \
        module is ex04, module.__name__


def test_the_watch_knows_the_packages_code_by_any_name():
    """workbench.exercises.own_work: an alias, a partial, a lambda, a copy of the function
    object or a borrowed method all run the package's code; the same arithmetic written
    again does not; the profiler that ran before is back afterwards."""
    import functools
    import sys
    import types

    from workbench.exercises.own_work import Watch
    from workbench.model_parallel.schedule import idle_fraction

    copy = types.FunctionType(idle_fraction.__code__, idle_fraction.__globals__)
    calls = [idle_fraction, functools.partial(idle_fraction, 4), lambda p, m: idle_fraction(p, m),
             copy]
    for call in calls:
        watch = Watch(["workbench.model_parallel.schedule"])
        args = (8,) if isinstance(call, functools.partial) else (4, 8)
        assert watch.wrap(call)(*args) == 3 / 11 and watch.used, call
    own = Watch(["workbench.model_parallel.schedule:idle_fraction"])
    assert own.wrap(lambda p, m: (p - 1) / (m + p - 1))(4, 8) == 3 / 11 and not own.used

    def before(*_):
        return None
    sys.setprofile(before)
    try:
        Watch(["workbench.sharded.zero1"]).wrap(lambda: None)()
        assert sys.getprofile() is before
    finally:
        sys.setprofile(None)


def test_a_checker_changed_before_its_check_is_put_back():
    """workbench.exercises.intact: a notebook cell that replaced the checker's helpers and
    the comparison it uses, before the check, gets a refusal naming them, and the next
    check judges with the checker as imported."""
    import math

    from workbench.exercises import intact

    real = math.isclose
    pipeline.not_yet = lambda *a, **k: pipeline.correct("accepted")
    math.isclose = lambda *a, **k: True
    try:
        fb = pipeline.check_bubble_fraction(lambda p, m: 0.5)
        assert not fb.passed and "not_yet" in fb.message and "isclose" in fb.message, fb
        assert math.isclose is real and intact.restore() == []
        assert not pipeline.check_bubble_fraction(lambda p, m: 0.5).passed
    finally:
        math.isclose = real
