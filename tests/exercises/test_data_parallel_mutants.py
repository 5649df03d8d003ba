"""Exercise 11's checker fed every answer of tests/exercises/mutants/ex11.py, on real
Horovod and torch.distributed ranks: each wrong conversion refused for its reason, each
right one accepted, at 2 and at 3 ranks.

The checks run on warm ranks: conftest.py's `warm` keeps 2 of each engine, this module 3
more, so a check is a call. The Horovod answers come first, then their ranks are closed
(Horovod's ranks wake every millisecond while they wait) and the torch ones follow.
"""

from __future__ import annotations

import pytest
from mutants import assert_judged, ex11, of

import workbench
from workbench.exercises import check_data_parallel
from workbench.exercises.data_parallel import make_model
from workbench.records import list_runs


@pytest.fixture(scope="module")
def ranks(warm):
    """`ranks(engine)`: the runs folder where 2 and 3 warm ranks of `engine` wait."""
    opened: dict = {}

    def get(engine: str) -> str:
        runs = str(warm(engine) / "runs")
        if engine == "torch" and "horovod" in opened:
            opened.pop("horovod").close()
        if engine not in opened:
            opened[engine] = workbench.ranks(np=3, engine=engine, runs_dir=runs,
                                             cpu_bind="none").wait_ready(240)
        return runs

    yield get
    for pool in opened.values():
        pool.close()


ANSWERS = sorted(of(ex11), key=lambda a: a.task != "horovod")   # Horovod's first


@pytest.mark.timeout(240)
@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.id)
def test_every_conversion_is_judged_for_its_reason(ranks, answer):
    runs = ranks(answer.task)
    before = {r.run_id for r in list_runs(runs)}
    feedback = check_data_parallel(answer.value, engine=answer.task, runs_dir=runs)
    assert_judged(answer, feedback)
    checks = [r for r in list_runs(runs) if r.run_id not in before and "check" in r.run_id]
    assert checks and all(r.summary["pool"] for r in checks), "the checks ran on warm ranks"


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
    assert len(list(runs.iterdir())) == 1                      # this one ran, on 2 ranks
