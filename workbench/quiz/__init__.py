"""Review questions on distributed training, and a widget to answer them in a notebook.

    from workbench.quiz import Quiz, load_bank
    Quiz(topic="ring-allreduce")          # in a notebook cell
    len(load_bank())                      # every question, validated

The widget is imported on first use, so reading the bank does not need ipywidgets.

Lessons it serves: notebooks/07_review.ipynb and
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

__all__ = ["TOPICS", "BankError", "Grade", "Question", "Quiz", "RubricPoint", "grade",
           "load_bank", "quiz_html"]


def __getattr__(name: str) -> Any:
    if name in ("Quiz", "quiz_html"):
        from workbench.quiz import widget

        return getattr(widget, name)
    raise AttributeError(f"module 'workbench.quiz' has no attribute {name!r}")
