"""Each learner's first answers, kept in their home: the grade a person can trust.

A quiz scores the first committed answer to each question. Kept only in the widget, it
would last until the cell is run again; kept here, a re-run cell, a restarted kernel, a new
``Quiz(...)``, another lesson's quiz or the review holding the same question all show the
first grade and count it, and *Try again* stays practice.

The record is ``quiz-answers.json`` beside the learner's id, in
:func:`workbench.quiz.order.learner_dir` (``$WORKBENCH_LEARNER_DIR`` puts it elsewhere, as the
tests do), readable by its owner only. Every change is read, made and written back under an
exclusive lock (``fcntl.flock``), through a temporary file renamed over the old one
(``os.replace``): two kernels never lose each other's answers, and a crash leaves the old
record or the new one, never half of one.

It holds each response, never a score: the score is recomputed from the bank on every read,
so a key corrected in the bank regrades old answers and an edited score gains nothing. Each
answer is filed under the question's id and a digest of what was asked (:func:`key`), so a
rewritten question is a new one. A record that cannot be read or written is reported in one
line (:class:`RecordError`), and nothing is then scored nor any key shown: an answer that
cannot be kept is not a first answer.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.quiz.bank import Grade, Question, grade
from workbench.quiz.order import learner_dir, relabel

FILE = "quiz-answers.json"
#: The grade of a question whose key was shown before it was answered (Quiz.reveal).
REVEALED = Grade(False, 0.0, "The answer was shown before one was given.")


class RecordError(OSError):
    """The learner's record cannot be read or written; the message says which file and why."""


def path() -> Path:
    """The learner's record: ``quiz-answers.json`` in :func:`learner_dir`."""
    return learner_dir() / FILE


def key(q: Question) -> str:
    """Where `q`'s answer is filed: its id and a digest of its prompt, choices (in the
    bank's order) and rubric points, whose indices and letters the answer refers to."""
    asked = json.dumps([q.kind, q.prompt, list(q.choices), [p.point for p in q.rubric]])
    return f"{q.id}@{hashlib.sha256(asked.encode()).hexdigest()[:12]}"


def entry(bank_q: Question, shown: Question, response: Any, covered: Any = ()) -> dict:
    """An answer as the record keeps it: letters in the bank's order, numbers as typed."""
    if shown.kind in ("single", "multiple"):
        response = relabel(response, shown, bank_q)
    elif response is not None:
        response = str(response)
    return {"response": response, "covered": sorted(int(i) for i in covered or ())}


def revealed() -> dict:
    """The entry of a question whose key was shown before any answer: it scores 0."""
    return {"revealed": True}


@dataclass(frozen=True)
class First:
    """A kept first answer as a quiz shows it: its grade, recomputed from the bank, the
    response in the letters shown, the rubric points ticked, and whether the key came
    first (Quiz.reveal)."""

    grade: Grade
    response: Any = None
    covered: tuple[int, ...] = ()
    revealed: bool = False


def first(kept: dict, bank_q: Question, shown: Question) -> First:
    """The kept answer `kept` to `bank_q`, shown as `shown` (the same question in the
    learner's order). An entry that does not make sense scores 0: it raises no score."""
    if kept.get("revealed"):
        return First(REVEALED, revealed=True)
    try:
        response, covered = kept["response"], tuple(int(i) for i in kept.get("covered", ()))
        if shown.kind in ("single", "multiple"):
            response = relabel(response, bank_q, shown)
        return First(grade(shown, response, covered), response, covered)
    except (KeyError, TypeError, ValueError, AttributeError):
        return First(Grade(False, 0.0, "The kept answer cannot be read: it scores nothing."))


def read(where: Path | None = None) -> dict[str, dict]:
    """Every kept answer by :func:`key` ({} before the first one)."""
    where = path() if where is None else where
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(where, exc) from None
    try:
        answers = json.loads(text)["answers"]
    except (ValueError, TypeError, KeyError) as exc:
        raise _error(where, f"not a record of quiz answers ({type(exc).__name__})") from None
    if not isinstance(answers, dict) or not all(isinstance(v, dict) for v in answers.values()):
        raise _error(where, "not a record of quiz answers")
    return answers


def change(edit: Callable[[dict[str, dict]], None], where: Path | None = None
           ) -> dict[str, dict]:
    """Apply `edit` to the kept answers, under the lock, and keep the result atomically;
    return it."""
    where = path() if where is None else where
    with _locked(where):
        answers = read(where)
        before = json.dumps(answers, sort_keys=True)
        edit(answers)
        if json.dumps(answers, sort_keys=True) != before:
            _write(where, answers)
    return answers


def keep_first(new: dict[str, dict], where: Path | None = None) -> dict[str, dict]:
    """Keep each of the `new` answers whose question has none yet; return every kept one."""
    return change(lambda answers: [answers.setdefault(k, v) for k, v in new.items()], where)


@contextmanager
def _locked(where: Path) -> Iterator[None]:
    try:
        where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(where.with_name(where.name + ".lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise _error(where, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(where: Path, answers: dict[str, dict]) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=where.parent, prefix=f".{where.name}.")  # mode 0600
    except OSError as exc:
        raise _error(where, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"version": 1, "answers": answers}, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, where)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _error(where, exc) from None


def _error(where: Path, why: object) -> RecordError:
    reason = why.strerror if isinstance(why, OSError) and why.strerror else why
    return RecordError(f"Your quiz answers in {where} cannot be used ({reason}): nothing is "
                       "marked until they can; to start a new record, move that file aside.")
