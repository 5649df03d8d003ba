"""The review question bank and its widget: the bank is complete and right (its numbers are
recomputed with the course's own formulas), grading explains every answer, and the widget
scores, explains and resets when driven headlessly."""

from __future__ import annotations

from pathlib import Path

import ipywidgets as widgets
import pytest
import yaml

from workbench.exercises.pipeline import idle_fraction
from workbench.quiz import TOPICS, BankError, Quiz, grade, load_bank, quiz_html
from workbench.quiz.bank import BANK_PATH, parse_number
from workbench.scaling import costmodel, metrics
from workbench.training.checkpoint import young_interval

BANK = {q.id: q for q in load_bank()}
REVIEW_IDS = ("review-efficiency", "review-synchronization", "review-parallelism")


# --- the bank ---------------------------------------------------------------------------------

def test_bank_has_at_least_30_complete_questions():
    assert len(BANK) >= 30
    for q in BANK.values():
        assert q.prompt and q.explanation and q.answer is not None, q.id
        if q.kind in ("single", "multiple"):
            assert len(q.choices) >= 2, q.id
        if q.kind == "explain":
            assert q.model_answer and len(q.rubric) >= 4, q.id
            assert all(p.point and p.earns and p.keywords for p in q.rubric), q.id


def test_every_topic_is_covered_with_every_kind_used():
    topics = {q.topic for q in BANK.values()}
    assert topics == set(TOPICS)
    assert {q.kind for q in BANK.values()} == {"single", "multiple", "numeric", "explain"}


def test_the_three_review_questions_of_the_course_are_there():
    for qid, words in zip(REVIEW_IDS, (["efficiency", "single device"],
                                       ["synchronized", "challenges"],
                                       ["data parallelism", "model parallelism"]),
                          strict=True):
        q = BANK[qid]
        assert q.kind == "explain"
        assert all(w in q.prompt for w in words), q.prompt


# The bank's numeric answers, recomputed with the course's formulas.
EXPECTED = {
    "speedup-from-times": metrics.speedup(120, 40),
    "efficiency-from-times": metrics.efficiency(metrics.speedup(120, 40), 4),
    "efficiency-from-throughput": metrics.efficiency(
        metrics.speedup_from_throughput(1535, 1085), 2),
    "amdahl-value": metrics.amdahl(8, 0.9),
    "amdahl-limit": metrics.amdahl(1e12, 0.95),
    "gustafson-value": metrics.gustafson(8, 0.9),
    "karp-flatt-value": metrics.karp_flatt(3, 4),
    "ring-time": costmodel.ring_allreduce_time(400e6, 5, 0.0, 1 / 1e9),
    "ring-bytes-per-worker": costmodel.ring_allreduce_time(100, 4, 0.0, 1.0),  # MB at β = 1
    "ring-messages": costmodel.ring_allreduce_time(1, 8, 1.0, 0.0),          # count of α
    "bus-bandwidth": costmodel.busbw(1e8, 0.5, 4) / 1e9,
    "parameter-server-traffic": costmodel.parameter_server_time(100, 8, 0.0, 1.0),
    "bubble-value": idle_fraction(4, 8),
    "consistency-update": 1.0 - 0.1 * (2 + 4) / 2,
    "training-memory": 2e9 * 16 / 1e9,
    "global-batch": 8 * 32,
    "linear-scaling-rule": 0.1 * 1024 / 256,
    "staleness-value": 13 - 10,
    "staleness-learning-rate": 0.12 / 4,
    "faults-young-interval": young_interval(60, 86_400) / 60,
    "parameter-server-sharded-traffic": costmodel.parameter_server_time(100, 8, 0.0, 1.0,
                                                                        servers=4),
}


@pytest.mark.parametrize("qid", sorted(EXPECTED))
def test_numeric_answers_agree_with_the_course_formulas(qid):
    q = BANK[qid]
    assert q.kind == "numeric"
    assert abs(q.answer - EXPECTED[qid]) <= q.tolerance + 1e-9, (q.answer, EXPECTED[qid])
    assert grade(q, EXPECTED[qid]).correct


def test_every_numeric_question_is_cross_checked():
    assert {q.id for q in BANK.values() if q.kind == "numeric"} == set(EXPECTED)


def test_topic_filter_and_unknown_topic():
    ring = load_bank(topic="ring-allreduce")
    assert ring and all(q.topic == "ring-allreduce" for q in ring)
    with pytest.raises(BankError, match="unknown topic 'nope'; choose one of: metrics"):
        load_bank(topic="nope")


@pytest.mark.parametrize("change, message", [
    (lambda q: q.pop("explanation"), "the field 'explanation' is missing"),
    (lambda q: q.update(answer="z"), "answer 'z' must be a letter among a, b, c, d"),
    (lambda q: q.update(kind="essay"), "kind 'essay' is not one of"),
    (lambda q: q.update(topic="cooking"), "topic 'cooking' is not one of"),
])
def test_a_broken_bank_is_refused_with_a_clear_message(tmp_path, change, message):
    raw = yaml.safe_load(BANK_PATH.read_text())
    change(raw[0])
    path = tmp_path / "bank.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BankError, match=message.replace("(", r"\(")):
        load_bank(path=path)


def test_duplicate_ids_and_unreadable_files_are_refused(tmp_path):
    raw = yaml.safe_load(BANK_PATH.read_text())
    path = tmp_path / "bank.yaml"
    path.write_text(yaml.safe_dump([raw[0], raw[0]]))
    with pytest.raises(BankError, match="two questions have the id 'speedup-definition'"):
        load_bank(path=path)
    with pytest.raises(BankError, match="cannot read the question bank"):
        load_bank(path=Path(tmp_path / "missing.yaml"))


# --- grading ----------------------------------------------------------------------------------

def test_single_choice_right_wrong_and_blank():
    q = BANK["speedup-definition"]
    assert grade(q, "b").correct and grade(q, "b").feedback.startswith("Correct.")
    wrong = grade(q, "a")
    assert not wrong.correct and wrong.score == 0
    assert "the answer is (b) $T_1 / T_p$" in wrong.feedback
    assert "inverted ratio" in wrong.feedback            # why (a) is wrong
    assert "Pick one answer first" in grade(q, None).feedback


def test_multiple_choice_names_missing_and_false_statements():
    q = BANK["data-parallel-properties"]
    assert grade(q, ["c", "b", "a"]).correct
    g = grade(q, ["a", "d"])
    assert not g.correct
    assert "(d) is false. Each replica holds the whole model" in g.feedback
    assert "(b) is true as well" in g.feedback and "(c) is true as well" in g.feedback


def test_numeric_accepts_fractions_and_percentages_within_tolerance():
    q = BANK["efficiency-from-times"]
    assert grade(q, "3/4").correct and grade(q, "75%").correct and grade(q, "0,75").correct
    g = grade(q, "3")
    assert not g.correct and "you entered 3, the answer is 0.75" in g.feedback
    assert "Enter a number" in grade(q, "three").feedback
    assert parse_number("1/0") is None and parse_number(float("nan")) is None


def test_explain_scores_ticked_rubric_points_and_names_missing_ones():
    q = BANK["review-parallelism"]
    text = "Data parallelism keeps a replica on every device, so the model must fit in memory."
    g = grade(q, text, covered=[0, 1])
    assert g.score == pytest.approx(2 / len(q.rubric)) and not g.correct
    assert "Model answer: Data parallelism replicates" in g.feedback
    assert "Model parallelism: limits" in g.hints and "Data parallelism: limits" not in g.hints
    full = grade(q, q.model_answer, covered=range(len(q.rubric)))
    assert full.correct and full.score == 1 and not full.hints
    assert "Write your answer in the box first" in grade(q, "").feedback


def test_the_model_answers_make_their_own_rubric_points():
    for qid in REVIEW_IDS:
        q = BANK[qid]
        assert grade(q, q.model_answer).hints == (), qid


# --- the widget -------------------------------------------------------------------------------

def test_quiz_widget_scores_explains_and_lets_the_student_retry():
    ids = ["speedup-from-times", "speedup-definition", "frameworks", "review-efficiency"]
    quiz = Quiz(ids=ids)
    assert quiz.summary() == "Score: 0 / 4 (0 of 4 questions checked)"
    assert isinstance(quiz.cards["speedup-from-times"].prompt, widgets.HTMLMath)

    quiz.answer("speedup-from-times", "3")
    assert quiz.check("speedup-from-times").correct
    quiz.answer("speedup-definition", "c")
    assert not quiz.check("speedup-definition").correct
    assert "efficiency, not the speedup" in quiz.feedback("speedup-definition")
    quiz.answer("frameworks", ["a", "b", "c"])
    quiz.check("frameworks")
    quiz.answer("review-efficiency", "Devices work in parallel.", covered=[0, 3])
    quiz.check("review-efficiency")
    assert quiz.score == pytest.approx(2.4)
    assert "Score: 2.4 / 4 (4 of 4 questions checked)" in quiz.score_label.value

    # the feedback shown in the page is typeset maths inside HTML
    shown = quiz.cards["speedup-definition"].output.value
    assert "$T_1 / T_p$" in shown and "#c62828" in shown

    # ticking another rubric point re-scores the explanation at once
    quiz.cards["review-efficiency"].rubric[1].value = True
    assert quiz.score == pytest.approx(2.6)

    quiz.retry("speedup-definition")
    assert quiz.feedback("speedup-definition") == ""
    assert quiz.cards["speedup-definition"].input.value is None
    quiz.answer("speedup-definition", "b")
    assert quiz.check("speedup-definition").correct
    assert quiz.score == pytest.approx(3.6)

    quiz.retry()
    assert quiz.score == 0 and quiz.checked == 0


def test_quiz_by_topic_reveal_and_bad_ids():
    quiz = Quiz(topic="pipeline")
    assert len(quiz.cards) == len(load_bank(topic="pipeline"))
    assert quiz.reveal() == len(quiz.cards)
    assert all(quiz.feedback(q.id).startswith("Correct.") for q in quiz.questions)
    with pytest.raises(KeyError, match="no question with id 'nope'"):
        Quiz(ids=["nope"])
    with pytest.raises(KeyError, match="this quiz has no question 'x'"):
        quiz.check("x")


def test_whole_bank_revealed_scores_full_marks():
    quiz = Quiz()
    assert quiz.reveal() == len(BANK)


def test_kernel_free_html_has_a_reveal_and_an_answer_per_question():
    page = quiz_html(topic="metrics")
    questions = load_bank(topic="metrics")
    assert page.count("<details>") == len(questions)
    assert "data-kind='single' data-answer='b'" in page       # speedup-definition
    assert "data-kind='numeric' data-answer='3.0' data-tolerance='0.01'" in page
    assert "Model answer:" in page and "onclick=" in page
    assert "<script" not in page      # inline handlers only, nothing to evaluate on load
