"""The learner's first answers outlive the widget: a re-run cell (a new Quiz), a fresh Python
process and another quiz holding the same question all show the first grade and count it;
the record is the owner's alone, written whole or not at all, and one that cannot be read
raises no score and shows no key."""

from __future__ import annotations

import dataclasses
import errno
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.quiz import Quiz, load_bank, record
from workbench.quiz.order import learner_dir, shuffled

BANK = {q.id: q for q in load_bank()}
QID = "speedup-definition"


def wrong_letter(quiz: Quiz, qid: str) -> str:
    q = quiz.cards[qid].q
    return next(x for x in q.letters if x != q.answer)


def test_the_tests_keep_no_answers_in_the_runners_home():
    assert not learner_dir().resolve().is_relative_to(Path.home().resolve())
    assert os.environ["WORKBENCH_LEARNER_DIR"] == str(learner_dir())


def test_a_re_run_cell_shows_the_first_grade_and_keeps_counting_it():
    older = Quiz(ids=[QID], seed="ada")         # a widget still on display elsewhere
    quiz = Quiz(ids=[QID, "speedup-from-times"], seed="ada")
    wrong = wrong_letter(quiz, QID)
    quiz.answer(QID, wrong)
    assert not quiz.check(QID).correct and "the answer is" in quiz.feedback(QID)

    again = Quiz(ids=[QID, "speedup-from-times"], seed="ada")      # the cell run again
    card = again.cards[QID]
    assert again.score == 0 and again.checked == 1 and not again.first_grade(QID).correct
    assert f"Scored: your first answer, ({wrong}): <b>0 of 1</b>" in card.record.value
    again.answer(QID, card.q.answer)                               # the key, now known
    assert again.check(QID).correct and "Practice, not scored." in card.output.value
    assert again.score == 0 and f"({wrong}): <b>0 of 1</b>" in card.record.value
    assert Quiz(ids=[QID], seed="ada").score == 0                  # and once more
    older.answer(QID, card.q.answer)                               # the widget from before
    assert older.check(QID).correct and older.score == 0
    assert "Practice, not scored." in older.cards[QID].output.value
    # the other question is still open: its first answer counts
    again.answer("speedup-from-times", "3")
    assert again.check("speedup-from-times").correct and again.score == 1


def test_the_first_answer_is_shown_in_each_order_and_counts_in_every_quiz_holding_it():
    quiz = Quiz(ids=[QID], seed="ada")
    picked = quiz.cards[QID].q.answer
    quiz.answer(QID, picked)
    quiz.check(QID)
    text = quiz.cards[QID].q.choice(picked)
    for other in (Quiz(topic="metrics", seed="grace"), Quiz(topic="metrics", shuffle=False)):
        card = other.cards[QID]
        letter = card.q.letters[card.q.choices.index(text)]   # the same choice, its letter
        assert f"your first answer, ({letter}): <b>1 of 1</b>" in card.record.value
        assert other.score == 1 and other.checked == 1
    assert shuffled(BANK[QID], "grace").choice(
        other.cards[QID].q.answer) == BANK[QID].choice(BANK[QID].answer)


def test_the_first_grade_holds_in_a_fresh_python_process():
    quiz = Quiz(ids=[QID, "efficiency-from-times"])
    quiz.answer(QID, wrong_letter(quiz, QID))
    quiz.check(QID)
    quiz.answer("efficiency-from-times", "3/4")
    quiz.check("efficiency-from-times")
    script = """
from workbench.quiz import Quiz, load_bank
quiz = Quiz(ids=["speedup-definition", "efficiency-from-times"])
quiz.answer("speedup-definition", quiz.cards["speedup-definition"].q.answer)
print(quiz.check("speedup-definition").correct, quiz.score, quiz.checked)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=os.environ, check=True).stdout.split()
    assert out == ["True", "1.0", "2"]       # right now, but practice: the score stays


def test_reveal_records_a_zero_for_every_question_not_answered():
    quiz = Quiz(topic="pipeline")
    first = quiz.questions[0]
    quiz.answer(first.id, first.answer)
    quiz.check(first.id)
    quiz.reveal()
    again = Quiz(topic="pipeline")
    assert again.score == 1 and again.checked == len(again.cards)
    card = again.cards[quiz.questions[1].id]
    assert "Scored: the answer shown before yours: <b>0 of 1</b>" in card.record.value
    again.answer(card.q.id, card.q.answer)
    assert again.check(card.q.id).correct and again.score == 1


def test_ticks_on_a_written_answer_are_kept_and_still_need_its_key_terms():
    q = BANK["review-efficiency"]
    quiz = Quiz(ids=[q.id])
    quiz.answer(q.id, "Devices work in parallel, so it saves time.")
    quiz.check(q.id)
    for box in quiz.cards[q.id].rubric:
        box.value = True
    again = Quiz(ids=[q.id])
    assert again.score == pytest.approx(1 / len(q.rubric))
    assert all(box.value for box in again.cards[q.id].rubric)
    assert again.cards[q.id].rubric_box.layout.display == "flex"


def test_the_record_is_the_owners_alone_and_written_whole(monkeypatch):
    quiz = Quiz(ids=[QID, "speedup-from-times"])
    quiz.answer(QID, "a")
    quiz.check(QID)
    path = record.path()
    assert path.parent == learner_dir() and path.name == "quiz-answers.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "learner-id", "quiz-answers.json", "quiz-answers.json.lock"]
    kept = json.loads(path.read_text())["answers"]
    assert list(kept) == [record.key(BANK[QID])] and "score" not in kept[record.key(BANK[QID])]

    before = path.read_bytes()

    def disk_full(obj, out, **_):              # a write that stops half-way
        out.write(json.dumps(obj)[:20])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(json, "dump", disk_full)
    quiz.answer("speedup-from-times", "3")
    g = quiz.check("speedup-from-times")
    assert g.feedback.endswith("(No space left on device): nothing is marked until they "
                               "can; to start a new record, move that file aside.")
    assert quiz.first_grade("speedup-from-times") is None and "Correct" not in g.feedback
    assert path.read_bytes() == before and len(list(path.parent.iterdir())) == 3


def _commit(args: tuple[str, int]) -> None:
    os.environ["WORKBENCH_LEARNER_DIR"], start = args
    for i in range(start, start + 40):
        record.keep_first({f"q{i}@0": {"response": "a", "covered": []}})


def test_two_kernels_answering_at_once_lose_nothing():
    where = str(learner_dir())
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_commit, [(where, 0), (where, 40)])
    assert sorted(record.read()) == sorted(f"q{i}@0" for i in range(80))


def test_an_edited_score_or_a_rewritten_question_gains_nothing():
    quiz = Quiz(ids=[QID], shuffle=False)
    quiz.answer(QID, "a")                                       # wrong
    quiz.check(QID)
    path, key = record.path(), record.key(BANK[QID])
    raw = json.loads(path.read_text())
    raw["answers"][key].update(score=1.0, correct=True)         # a forged score
    raw["answers"][f"{QID}@000000000000"] = {"response": "b"}   # another version's answer
    path.write_text(json.dumps(raw))
    assert Quiz(ids=[QID]).score == 0
    raw["answers"][key]["response"] = ["not", "a", "letter"]
    path.write_text(json.dumps(raw))
    again = Quiz(ids=[QID])
    assert again.score == 0 and again.checked == 1              # unreadable: 0, not open
    assert "an answer that cannot be read" in again.cards[QID].record.value
    # a teacher's own question with the bank's id is another question: its own answer
    own = dataclasses.replace(BANK[QID], prompt="Which is the speedup?")
    mine = Quiz(questions=[own], shuffle=False)
    assert mine.checked == 0
    mine.answer(QID, "b")
    assert mine.check(QID).correct and Quiz(ids=[QID]).score == 0


@pytest.mark.parametrize("damage", ["not json", "[]", '{"answers": [1]}', "directory"])
def test_a_record_that_cannot_be_read_scores_nothing_and_shows_no_key(damage):
    path = record.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if damage == "directory":
        path.mkdir()
    else:
        path.write_text(damage)
    quiz = Quiz(ids=[QID, "speedup-from-times"])
    assert quiz.problem.startswith(f"Your quiz answers in {path} cannot be used (")
    assert "\n" not in quiz.problem and "move that file aside" in quiz.problem
    assert quiz.problem in quiz.score_label.value.replace("&#x27;", "'")
    q = quiz.cards[QID].q
    quiz.answer(QID, q.answer)
    g = quiz.check(QID)
    assert g.score == 0 and quiz.score == 0 and quiz.first_grade(QID) is None
    assert g.feedback.startswith("Not marked. Your quiz answers in")
    assert BANK[QID].explanation[:30] not in quiz.cards[QID].output.value     # no key
    with pytest.raises(record.RecordError, match="cannot be used"):
        quiz.reveal()
    assert all(c.output.value == "" or "Not marked" in c.output.value
               for c in quiz.cards.values())
    # moved aside, as the message says: a new record starts
    path.rename(path.with_name("old")) if damage != "directory" else path.rmdir()
    quiz.answer(QID, q.answer)
    assert quiz.check(QID).correct and quiz.score == 1 and quiz.problem == ""
