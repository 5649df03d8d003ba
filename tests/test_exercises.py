"""The exercise checkers: every worked solution passes, the checkers' own references agree
with the course, nothing raises, no answer is reachable from an exercise's namespace, and
the notebooks are saved as the course needs. (Wrong answers, and right ones written another
way, are kept as data in tests/exercises/mutants/, run by tests/exercises/.)"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import torch

from workbench.exercises import (
    Feedback,
    allreduce,
    data_parallel,
    laws,
    lr_scaling,
    overlap,
    parallelism,
    pipeline,
    references,
    ring,
    scaling,
    sharding,
    staleness,
    zero,
)
from workbench.exercises.feedback import call_student
from workbench.notebooks import write_all

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
EXERCISES, SOLUTIONS = REPO / "notebooks" / "exercises", REPO / "notebooks" / "solutions"


def solution(notebook: str, name: str):
    """The function (or value) `name` defined by the saved worked-solution notebook."""
    nb = nbformat.read(SOLUTIONS / notebook, as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            exec(compile(cell.source, f"{notebook}:{cell.id}", "exec"), namespace)
    return namespace[name]


# --- the worked solutions pass -----------------------------------------------------------------

SOLVED = [
    (allreduce.check_average_gradients, "01_average_gradients.ipynb", "average_gradients"),
    (sharding.check_shard, "02_shard_a_dataset.ipynb", "shard"),
    (scaling.check_scaling_table, "03_speedup_and_efficiency.ipynb", "scaling_table"),
    (ring.check_reduce_scatter_step, "04_ring_allreduce.ipynb", "reduce_scatter_step"),
    (ring.check_allgather_step, "04_ring_allreduce.ipynb", "my_allgather_step"),
    (pipeline.check_bubble_fraction, "05_pipeline_bubble.ipynb", "bubble_fraction"),
    (pipeline.check_micro_batches, "05_pipeline_bubble.ipynb", "micro_batches_needed"),
    (parallelism.check_parallelism_choice, "06_data_or_model_parallelism.ipynb", "choose"),
    (staleness.check_staleness, "08_staleness.ipynb", "staleness_per_push"),
    (staleness.check_staleness_lr, "08_staleness.ipynb", "staleness_lr"),
    (lr_scaling.check_learning_rate, "09_linear_scaling_rule.ipynb", "learning_rate"),
    (laws.check_serial_shares, "10_amdahl_or_gustafson.ipynb", "serial_shares"),
    (laws.check_which_law, "10_amdahl_or_gustafson.ipynb", "which_law"),
]


@pytest.mark.parametrize("checker, notebook, name", SOLVED,
                         ids=[f"{notebook[:2]}-{name}" for _, notebook, name in SOLVED])
def test_the_worked_solution_passes(checker, notebook, name):
    fb = checker(solution(notebook, name))
    assert fb.passed and not fb.hints, str(fb)


# --- the checkers' references are the course's ----------------------------------------------------

def test_balanced_shards_still_take_unequal_numbers_of_steps():
    """n = 13, p = 4, b = 1: a right answer to the exercise, yet rank 0 takes one step more."""
    shard = solution("02_shard_a_dataset.ipynb", "shard")
    sizes = [len(shard(13, rank, 4)) for rank in range(4)]
    assert sizes == [4, 3, 3, 3]
    assert sharding.steps_per_rank(sizes, batch_size=1) == [4, 3, 3, 3]
    assert sharding.steps_per_rank([3, 3, 3, 3], batch_size=1) == [3, 3, 3, 3]  # dropped one
    assert "drop the incomplete last" in sharding.__doc__
    assert sharding.show_steps(shard, 13, 4, 1).endswith("[4, 3, 3, 3]")


def test_scaling_reference_comes_from_the_scaling_metrics():
    from workbench.scaling import metrics
    s, e = references.scaling_table(scaling.TIMES_S)[8]
    assert s == pytest.approx(96.0 / 21.0) and e == pytest.approx(metrics.efficiency(s, 8))
    unseen = scaling.unseen_times()
    assert next(iter(unseen)) != 1 and max(unseen.values()) > unseen[1]


def test_ring_solutions_sum_and_labels_decode_back_to_their_pieces():
    rs = solution("04_ring_allreduce.ipynb", "reduce_scatter_step")
    ag = solution("04_ring_allreduce.ipynb", "my_allgather_step")
    gen = torch.Generator().manual_seed(1)
    tensors = [torch.randn(10, generator=gen) for _ in range(4)]
    total = torch.stack(tensors).sum(0)
    for out in ring.simulated_ring_allreduce(tensors, rs, ag):
        assert torch.allclose(out, total, atol=1e-6)
    labels = ring.label_tensors(3)
    assert ring.name(ring.decode(float(sum(labels)[1]), 3)) == "A1 + B1 + C1"
    assert ring.decode(0.5, 3) is None


def test_pipeline_schedule_counts_match_the_formula():
    from workbench.model_parallel.schedule import idle_fraction
    for p, m in [(2, 3), (4, 8), (5, 20)]:
        assert idle_fraction(p, m) == pytest.approx((p - 1) / (m + p - 1))
    assert references.smallest_micro_batches(4, 0.10) == 27
    assert references.smallest_micro_batches(2, 0.01) == 99


def test_parallelism_scenarios_allow_sharding_where_only_a_shard_fits():
    seven_b = next(s for s in parallelism.SCENARIOS if s.name.startswith("7-billion"))
    assert references.choices(seven_b) == {"model", "sharded"}
    data, model = parallelism.unseen_scenarios()
    assert references.choices(data) == {"data"} and references.choices(model) == {"model"}
    assert "choice" not in parallelism.numbers_table()    # the numbers, not the answers


def test_staleness_reference_matches_the_parameter_server_rule():
    assert references.staleness(staleness.TRACE) == [0, 0, 0, 3, 0, 1]
    assert references.staleness(staleness.ROUND_ROBIN) == [0, 1, 2, 2, 2]
    assert "worker 0 pushes" in staleness.show_trace(staleness.TRACE)


def test_linear_scaling_reference_follows_goyal():
    assert references.learning_rate(10, 32, 32) == pytest.approx(0.4)   # 1024 = 4 × 256
    assert references.learning_rate(0, 32, 32) == pytest.approx(0.1)    # warm-up starts at η
    assert references.learning_rate(2.5, 32, 32) == pytest.approx(0.25)  # half-way
    assert references.learning_rate(10, 2, 32) == pytest.approx(0.025)  # k = 1/4


def test_laws_serial_shares_invert_the_course_formulas():
    from workbench.scaling import metrics
    for p in (2, 4, 8):
        s_a, _ = references.serial_shares(p, metrics.amdahl(p, 0.9))
        _, s_g = references.serial_shares(p, metrics.gustafson(p, 0.9))
        assert s_a == pytest.approx(0.1) and s_g == pytest.approx(0.1)
        assert s_a == pytest.approx(metrics.karp_flatt(metrics.amdahl(p, 0.9), p))
    decided = [references.which_law(points) for _, points in laws.DATASETS]
    assert decided == ["amdahl", "gustafson", None, "gustafson", "amdahl", "gustafson"]


def test_checkers_read_numbers_as_the_quiz_does():
    """One parser for every number a student gives: the quiz's `parse_number`."""
    def by_versions(events):
        version, pulled, out = 0, {}, []
        for action, worker in events:
            if action == "pull":
                pulled[worker] = version
            else:
                out.append(str(version - pulled[worker]))
                version += 1
        return out

    assert staleness.check_staleness(by_versions).passed
    assert pipeline.check_bubble_fraction(lambda p, m: f"{p - 1}/{m + p - 1}").passed
    assert pipeline.check_micro_batches("27,0").passed  # a decimal comma, as in the quiz


# --- no answer is reachable from an exercise's namespace ------------------------------------------

#: Where the package keeps an answer: the checkers' references and the package's own versions.
ANSWER_MODULES = ("workbench.exercises.references", "workbench.model_parallel.schedule",
                  "workbench.scaling.metrics", "workbench.scaling.costmodel",
                  "workbench.sharded.zero1", "workbench.sharded.zero2",
                  "workbench.data_parallel.overlapped", "workbench.data_parallel.bucketed",
                  "workbench.synchronization.ring_allreduce", "workbench.training.sharding",
                  "workbench.training.lab_hooks")
#: What a notebook prints on purpose: the schedule the student counts by hand.
SHOWN = {("pipeline", "show_schedule")}


@pytest.mark.parametrize("module", [allreduce, sharding, scaling, ring, pipeline, parallelism,
                                    staleness, lr_scaling, laws, data_parallel, zero, overlap],
                         ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_no_answer_is_a_name_of_an_exercise_module(module):
    """`ex.X` for every X in dir(ex): no function of an answer's module, nor the module."""
    import importlib
    import inspect

    files = {inspect.getfile(importlib.import_module(m)) for m in ANSWER_MODULES}
    short = module.__name__.rsplit(".", 1)[-1]
    for name, value in vars(module).items():
        if inspect.ismodule(value):
            assert value.__name__ not in ANSWER_MODULES, f"ex.{name}"
        code = getattr(inspect.unwrap(value), "__code__", None) if callable(value) else None
        if code is not None and (short, name) not in SHOWN:
            assert code.co_filename not in files, f"{short}.{name} is an answer's code"


# --- every checker: never raises, same shape ----------------------------------------------------

CHECKERS = [allreduce.check_average_gradients, sharding.check_shard,
            scaling.check_scaling_table, ring.check_reduce_scatter_step,
            ring.check_allgather_step, pipeline.check_bubble_fraction,
            parallelism.check_parallelism_choice, staleness.check_staleness,
            staleness.check_staleness_lr, lr_scaling.check_learning_rate,
            laws.check_serial_shares, laws.check_which_law]


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.__name__)
def test_checkers_never_raise_on_bad_answers(checker):
    def unfinished(*args):
        raise NotImplementedError

    for answer in (unfinished, lambda *a: 1 / 0, lambda *a: "nonsense", 42, None):
        fb = checker(answer)
        assert isinstance(fb, Feedback) and not fb.passed and fb.hints
    assert "not written yet" in checker(unfinished).message
    assert "ZeroDivisionError" in checker(lambda *a: 1 / 0).message
    assert "expected a function, got int" in checker(42).message


def test_feedback_renders_as_text_and_html():
    fb = Feedback(False, "a < b", ["use <b>bold</b>"])
    assert str(fb) == "Not yet: a < b\n  Hint: use <b>bold</b>"
    page = fb._repr_html_()
    assert "a &lt; b" in page and "&lt;b&gt;bold" in page and "Not yet" in page
    assert "Correct" in Feedback(True, "fine")._repr_html_()
    _, crash = call_student(len)  # len() without an argument: a TypeError, as feedback
    assert crash is not None and "TypeError" in crash.message and "line" in crash.hints[0]


# --- the notebooks ----------------------------------------------------------------------------

def test_notebooks_are_up_to_date_with_their_description():
    assert write_all(check=True) == []


def test_at_least_six_exercises_each_with_a_solution_of_the_same_name():
    names = sorted(p.name for p in EXERCISES.glob("*.ipynb"))
    assert len(names) >= 6
    assert names == sorted(p.name for p in SOLUTIONS.glob("*.ipynb"))


@pytest.mark.parametrize("path", sorted(EXERCISES.glob("*.ipynb")) + sorted(
    SOLUTIONS.glob("*.ipynb")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_saved_clean_with_goals_time_and_summary(path):
    raw = json.loads(path.read_text())
    assert raw["metadata"]["kernelspec"] == {"name": "python3", "display_name": "Python 3",
                                             "language": "python"}
    nb = nbformat.reads(path.read_text(), as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code_cells)
    first, last = nb.cells[0], nb.cells[-1]
    assert first.cell_type == "markdown" and "**Goals.**" in first.source
    assert "**Time:** about" in first.source
    assert last.cell_type == "markdown" and last.source.startswith("## Summary")
    assert all(len(c.source.splitlines()) <= 20 for c in code_cells), "logic lives in the package"
    unfinished = any("NotImplementedError" in c.source for c in code_cells)
    assert unfinished == (path.parent == EXERCISES and path.name != "07_review_questions.ipynb")


# --- every checker, fed odd answers: a Feedback, at once, never an exception -------------------

class _Hostile:
    """An answer whose every use raises: comparison, conversion, iteration, length."""

    def __getattr__(self, name):
        raise RuntimeError(f"hostile {name}")

    def __eq__(self, other):
        raise RuntimeError("hostile ==")

    def __float__(self):
        raise RuntimeError("hostile float")

    def __iter__(self):
        raise RuntimeError("hostile iter")

    def __len__(self):
        raise RuntimeError("hostile len")

    __hash__ = object.__hash__


def _raises(*_a, **_k):
    raise ValueError("broken")


ODD_VALUES = [None, float("nan"), float("inf"), -1, 0, 10**9, 10**400, "text", "", b"x",
              [], [1, 2], {"a": 1}, torch.zeros(3, 3), torch.tensor(float("nan")),
              range(10**12), _Hostile(), True]
def _returning(value):
    return lambda *_a, **_k: value


ODD_FUNCTIONS = [_raises, lambda: 1, lambda a, b, c, d, e, f, g: 1, print,
                 *[_returning(v) for v in ODD_VALUES]]


#: Checkers that run the answer on real ranks, by name: each is given only answers it must
#: refuse before starting any (not a function, or one it cannot call as the exercise does).
RANK_CHECKERS = {
    "check_data_parallel": lambda fn: data_parallel.check_data_parallel(fn, engine="torch"),
    "check_zero1": lambda fn: zero.check_zero1(fn, fn),
    "check_launch_hook": lambda fn: overlap.check_launch_hook(fn),
}
FUNCTION_CHECKERS = [*CHECKERS, zero.check_shard_optimizer, *RANK_CHECKERS.values()]
_NAMES = {id(c): name for name, c in RANK_CHECKERS.items()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("checker", FUNCTION_CHECKERS,
                         ids=lambda c: _NAMES.get(id(c), getattr(c, "__name__", "?")))
def test_every_checker_answers_odd_inputs_with_feedback(checker):
    on_ranks = id(checker) in _NAMES
    answers = ODD_VALUES if on_ranks else ODD_VALUES + ODD_FUNCTIONS   # no ranks started
    if on_ranks:
        answers = answers + [lambda: 1, lambda x: 1, lambda *, x: 1]  # refused by signature
    for answer in answers:
        fb = checker(answer)
        assert isinstance(fb, Feedback), (answer, fb)
        assert not fb.passed and fb.hints and fb.message, (answer, str(fb))


@pytest.mark.parametrize("answer", [*ODD_VALUES, 10**9, 10**18, 12.5, "12", " 12 ", "1e9",
                                    float("-inf"), [12], (12,)], ids=lambda a: type(a).__name__)
def test_micro_batches_answers_any_value_without_counting_a_huge_schedule(answer):
    fb = pipeline.check_micro_batches(answer)
    assert isinstance(fb, Feedback) and not fb.passed and fb.hints


# --- no answer before its exercise ---------------------------------------------------------------

def _work(code: str) -> tuple[set[str], set[str]]:
    """What a text holding the answer `code` would print: its lines that do work, and its
    calls written with two arguments or more, whitespace folded (16 characters or more:
    `optimizer.step()` alone is no answer)."""
    import ast
    import re

    def fold(text: str) -> str:
        return re.sub(r"\s+", " ", text).strip()

    skip = ("def ", '"""', "#", "import ", "from ")
    lines = {fold(line.split("  #")[0]) for line in code.splitlines()}
    calls = {fold(ast.get_source_segment(code, node) or "") for node in ast.walk(ast.parse(code))
             if isinstance(node, ast.Call) and len(node.args) + len(node.keywords) >= 2}
    return ({line for line in lines if len(line) >= 16 and not line.startswith(skip)},
            {call for call in calls if len(call) >= 16})


def test_no_lesson_or_task_text_prints_an_exercise_s_answer():
    """Lessons explain and show the library's version; the code the student is to write is
    printed by no lesson (nor the package's own ZeRO-1 step or overlapped hook, exercises
    12 and 13), and no task's text spells it out: none of an answer's calls with their
    arguments appears in its task's text, and no two of its lines or calls in one lesson,
    nor does a lesson print those modules' source. Exercise 11's Horovod conversion is the
    exception, by design: notebook 02 works through it as its lesson, and the exercise asks
    for it again before its DDP version, which no lesson prints."""
    import inspect
    import re

    import workbench.data_parallel.overlapped
    import workbench.sharded.zero1
    from workbench import notebooks
    from workbench.notebooks import Task

    def text(cells: list, solution: bool, kinds=("markdown", "code")) -> str:
        return re.sub(r"\s+", " ", "\n".join(
            (c.solution if solution else c.exercise) if isinstance(c, Task) else c[1]
            for c in cells if isinstance(c, Task) or c[0] in kinds))

    lessons = {name: text(cells, True)
               for name, cells in notebooks.pages(notebooks.LESSON_PAGES).items()}
    answers = {module.__name__: set().union(*_work(inspect.getsource(module)))
               for module in (workbench.sharded.zero1, workbench.data_parallel.overlapped)}
    given = set().union(*_work(inspect.getsource(data_parallel.train)))   # exercise 11's loop
    shown = []
    for name, cells in notebooks.pages(notebooks.EXERCISE_PAGES).items():
        prose = text(cells, False, kinds=("markdown",))
        for task in (c for c in cells if isinstance(c, Task)):
            if name.startswith("11_") and "def train_horovod" in task.solution:
                continue
            lines, calls = (part - given - set().union(*_work(task.exercise))
                            for part in _work(task.solution))
            answers[f"{name}: {task.solution.split('(')[0].split()[-1]}"] = lines | calls
            shown += [(name, "its text", call) for call in calls if call in prose]
    for answer, texts in answers.items():
        for lesson, lesson_text in lessons.items():
            found = [t for t in texts if t in lesson_text]
            found = [t for t in found if not any(t != other and t in other for other in found)]
            shown += [(answer, lesson, found)] if len(found) >= 2 else []
    printed = r"(module_source|getsource)\([^)]*(sharded.zero1|data_parallel.overlapped)"
    shown += [(lesson, "prints") for lesson, lesson_text in lessons.items()
              if re.search(printed, lesson_text)]
    assert not shown, shown
