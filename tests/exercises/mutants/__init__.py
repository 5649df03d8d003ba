"""Answers to the exercises, kept as data: wrong ones each checker must refuse for their
reason, and right ones written another way that it must accept.

Each module exNN.py holds exercise NN's answers, marked where they are defined:

    @refused("Megatron", "whole run")      # refused, with these words in the feedback
    def over_the_ideal_time(stages, micro_batches): ...

    @accepted()                            # a right answer, written another way
    def by_counting_slots(stages, micro_batches): ...

`task` names the checker when an exercise has several; `CHECKS` in the module maps each
task to a call of its checker. An answer is a function, a value (exercise 5's number) or a
class whose attributes are the functions a checker takes together (exercise 12's pair).
tests/exercises/test_mutants.py and test_rank_mutants.py run them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Every answer marked so far, in the order the modules define them.
ANSWERS: list[Answer] = []


@dataclass(frozen=True)
class Answer:
    """One answer: what it is, which checker judges it, and what the feedback must say."""

    module: str
    name: str
    value: Any
    task: str
    right: bool
    words: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.module.rsplit('.', 1)[-1]}-{self.task}-{self.name}"


def refused(*words: str, task: str = "") -> Callable[[Any], Any]:
    """Mark a wrong answer: its checker must refuse it, naming the mistake in `words`."""
    if not words:
        raise ValueError("a wrong answer names the words its feedback must contain")
    return _mark(task, right=False, words=words)


def accepted(task: str = "") -> Callable[[Any], Any]:
    """Mark a right answer written another way: its checker must accept it."""
    return _mark(task, right=True, words=())


def answer(value: Any, name: str, *words: str, task: str = "") -> None:
    """Mark a value (not a function) as an answer: refused with `words`, accepted without."""
    import inspect

    module = inspect.stack()[1].frame.f_globals["__name__"]
    ANSWERS.append(Answer(module, name, value, task, not words, words))


def _mark(task: str, right: bool, words: tuple[str, ...]) -> Callable[[Any], Any]:
    def mark(value: Any) -> Any:
        ANSWERS.append(Answer(value.__module__, value.__name__, value, task, right, words))
        return value
    return mark


def of(module: Any) -> list[Answer]:
    """The answers `module` (an exNN module, imported) marked."""
    return [a for a in ANSWERS if a.module == module.__name__]


def assert_judged(answer: Answer, feedback: Any) -> None:
    """A right answer passed; a wrong one failed, with a hint and every word it names."""
    if answer.right:
        assert feedback.passed, f"{answer.id} was refused:\n{feedback}"
        return
    assert not feedback.passed, f"{answer.id} passed:\n{feedback}"
    assert feedback.hints, f"{answer.id}: a refusal always has a hint"
    text = feedback.message + "\n" + "\n".join(feedback.hints)
    for word in answer.words:
        assert word in text, f"{answer.id}: {word!r} not in:\n{feedback}"
