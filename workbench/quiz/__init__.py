"""Review questions on distributed training, and a widget to answer them in a notebook.

    from workbench.quiz import Quiz, load_bank
    Quiz(lesson="collectives")            # in a notebook cell: a lesson's questions
    len(load_bank())                      # every question, validated

The widget and the sheets are imported on first use, so reading the bank needs neither.

Lessons it serves: the last cell of each lesson, notebooks/09_review.ipynb and
notebooks/exercises/07_review_questions.ipynb.
"""

from __future__ import annotations

from typing import Any

from workbench.quiz.bank import (
    TOPICS,
    BankError,
    Grade,
    Question,
    RubricPoint,
    grade,
    load_bank,
)

__all__ = ["TOPICS", "BankError", "Grade", "Question", "Quiz", "RubricPoint", "answer_sheet",
           "grade", "load_bank", "quiz_html"]


def __getattr__(name: str) -> Any:
    if name == "Quiz":
        from workbench.quiz import widget

        return widget.Quiz
    if name in ("answer_sheet", "quiz_html"):
        from workbench.quiz import sheet

        return getattr(sheet, name)
    raise AttributeError(f"module 'workbench.quiz' has no attribute {name!r}")
