"""The quiz widget: answer review questions in a notebook; the first answer is the one scored.

    from workbench.quiz import Quiz
    Quiz(lesson="collectives")            # the questions a lesson teaches
    Quiz(topic="pipeline")                # or one topic of the whole bank

Each question has its own *Check* and *Try again* buttons. The first *Check* commits the
answer: it is marked, the score at the bottom counts it, and only then do the key and its
explanation appear. *Try again* clears the answer for practice; later checks are marked and
explained but change nothing, and the first grade stays on display. First answers are kept
in the learner's home (:mod:`workbench.quiz.record`): a re-run cell, a restarted kernel or
another quiz holding the same question shows the first grade and counts it. Choosing an
answer needs no Python: only *Check* runs code. Prompts and feedback are ``HTMLMath``
widgets, so $...$ mathematics is typeset by JupyterLab's MathJax.

A written answer scores the rubric points the student ticks that its own sentences make
(:func:`workbench.quiz.bank.grade`); an empty or overlong one, or a list of terms, is not
committed (:func:`workbench.quiz.bank.written_problem`).

Choices appear in each learner's own order (:mod:`workbench.quiz.order`); pass ``seed=`` to
choose the order, or ``shuffle=False`` for the bank's. Without a kernel, use
:func:`workbench.quiz.sheet.quiz_html`.

Headless use, for tests and for teachers checking a bank::

    quiz = Quiz(ids=["speedup-from-times"])
    quiz.answer("speedup-from-times", "3")
    quiz.check("speedup-from-times").correct      # True
    quiz.score, quiz.feedback("speedup-from-times")
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

import ipywidgets as widgets

from workbench.quiz import record
from workbench.quiz.bank import (
    NUMBER_EXAMPLES,
    TOPICS,
    Grade,
    Question,
    grade,
    load_bank,
    parse_number,
    written_problem,
)
from workbench.quiz.order import in_learner_order
from workbench.quiz.sheet import inline, paragraphs

_GOOD, _BAD, _NEUTRAL = "#2e7d32", "#c62828", "#1565c0"
#: The picked letter must stand out from the others at a glance.
STYLE = ("<style>.wbq-choice .widget-toggle-button.mod-active,"
         ".wbq-choice .jupyter-button.mod-active{background:" + _NEUTRAL + ";color:#fff;"
         "font-weight:bold;box-shadow:0 0 0 2px " + _NEUTRAL + "}</style>")
RULES = ("Your <b>first</b> answer to each question is the one scored: <b>Check</b> commits "
         "it and shows the answer with its explanation. <b>Try again</b> lets you practise; "
         "it does not change the score. For a written answer, tick the rubric points it "
         "makes: a ticked point counts only when your answer uses one of its key terms "
         "(words the question does not already use) in a sentence of your own.")


class _Card:
    """One question: prompt, input, Check and Try-again buttons, the first grade and feedback.

    `q` is the question in the learner's order, `bank_q` the same in the bank's, as the
    record keeps it; `on_graded(problem)` is told after each use of the record, with why it
    failed ('' when it did not)."""

    def __init__(self, number: int, q: Question, bank_q: Question, on_graded) -> None:
        self.q, self.bank_q, self._on_graded = q, bank_q, on_graded
        self.key = record.key(bank_q)
        self.first: Grade | None = None     # the committed answer's grade: the score
        self.first_response: Any = None
        self.grade: Grade | None = None     # the latest check, first or practice
        self.practice = False               # whether self.grade is a practice check
        self.shown_first = False            # the key was shown before any answer
        self._restoring = False             # ticks being set from the record
        topic = html.escape(TOPICS.get(q.topic, q.topic))
        self.prompt = widgets.HTMLMath(
            f"<b>Question {number}.</b> <span style='color:#666'>({topic})</span>"
            + paragraphs(q.prompt))
        self.input, input_row = self._make_input()
        # named only once an answer is committed (restore): a hidden widget is still
        # in the page, and its points would outline the model answer before the student's
        self.rubric = [widgets.Checkbox(value=False, description="", indent=False)
                       for _ in q.rubric]
        for box in self.rubric:
            box.observe(self._rubric_changed, names="value")
        self.rubric_box = widgets.VBox(self.rubric, layout=widgets.Layout(display="none"))
        self.check_button = widgets.Button(description="Check", button_style="primary",
                                           tooltip="Commit this answer, mark and explain it")
        self.retry_button = widgets.Button(description="Try again", disabled=True,
                                           tooltip="Practise again: the first grade stays")
        self.check_button.on_click(lambda _: self.check())
        self.retry_button.on_click(lambda _: self.retry())
        self.record = widgets.HTML("")
        self.output = widgets.HTMLMath("")
        self.box = widgets.VBox(
            [self.prompt, input_row, widgets.HBox([self.check_button, self.retry_button]),
             self.record, self.output, self.rubric_box],
            layout=widgets.Layout(border="1px solid #ddd", padding="6px", margin="0 0 8px 0"))

    def _make_input(self) -> tuple[Any, widgets.Widget]:
        q = self.q
        if q.kind == "numeric":
            field = widgets.Text(placeholder="a number, e.g. " + " or ".join(NUMBER_EXAMPLES),
                                 description="Answer:")
            return field, field
        if q.kind == "explain":
            field = widgets.Textarea(placeholder="Write a few sentences.",
                                     layout=widgets.Layout(width="95%", height="110px"))
            return field, field
        listing = widgets.HTMLMath("".join(
            f"<div style='margin:2px 0'><b>({letter})</b> {inline(text)}</div>"
            for letter, text in zip(q.letters, q.choices, strict=True)))
        if q.kind == "single":
            field = widgets.ToggleButtons(options=list(q.letters), value=None,
                                          description="Answer:", style={"button_width": "48px"})
            field.add_class("wbq-choice")
        else:
            field = widgets.HBox([widgets.Checkbox(value=False, description=f"({letter})",
                                                   indent=False,
                                                   layout=widgets.Layout(width="70px"))
                                  for letter in q.letters])
        return field, widgets.VBox([listing, field])

    # --- state ---------------------------------------------------------------------------

    def response(self) -> Any:
        if self.q.kind == "multiple":
            return [letter for letter, box in zip(self.q.letters, self.input.children,
                                                  strict=True) if box.value]
        return self.input.value

    def covered(self) -> list[int]:
        return [i for i, box in enumerate(self.rubric) if box.value]

    def set_response(self, response: Any, covered: Iterable[int] | None = None) -> None:
        """Fill the input as a student would (letters, a number or text); `covered` ticks
        rubric points (None leaves the ticks as they are)."""
        if self.q.kind == "multiple":
            picked = set(response or ())
            for letter, box in zip(self.q.letters, self.input.children, strict=True):
                box.value = letter in picked
        elif self.q.kind == "numeric":
            self.input.value = "" if response is None else str(response)
        else:
            self.input.value = response
        if covered is not None:
            for i, box in enumerate(self.rubric):
                box.value = i in set(covered)

    def _inputs(self) -> list[widgets.Widget]:
        return list(self.input.children) if self.q.kind == "multiple" else [self.input]

    def unanswered(self) -> str:
        """Why the input is no answer yet ('' when it is one): such a check commits nothing."""
        value = self.response()
        if self.q.kind == "numeric" and parse_number(value) is None:
            return grade(self.q, value).feedback          # "Enter a number, such as ..."
        if self.q.kind == "explain":
            return written_problem(str(value or ""))   # empty, too long, or no sentences
        if not value:
            return "Pick one answer first." if self.q.kind == "single" else \
                "Tick at least one answer first."
        return ""

    def restore(self, kept: dict | None) -> None:
        """Show `kept`, the record's first answer to this question (None: there is none)."""
        if kept is None:
            self.first, self.first_response, self.shown_first = None, None, False
            return self._show_record()
        found = record.first(kept, self.bank_q, self.q)
        self.first, self.first_response, self.shown_first = (found.grade, found.response,
                                                             found.revealed)
        if self.q.kind == "explain" and not found.revealed:
            self._restoring = True
            try:
                for i, (box, point) in enumerate(zip(self.rubric, self.q.rubric, strict=True)):
                    box.value, box.description = i in found.covered, point.point
            finally:
                self._restoring = False
            self.rubric_box.layout.display = "flex"
        self._show_record()

    def check(self) -> Grade:
        """The first check of an answer commits it to the record; later ones are practice,
        as is every check of a question the record already holds an answer to."""
        why = self.unanswered()
        if why:
            self.grade, self.practice = Grade(False, 0.0, why), self.first is not None
            return self._show()
        self.practice = self.first is not None
        if not self.practice:
            mine = record.entry(self.bank_q, self.q, self.response(), self.covered())
            try:
                kept = record.keep_first({self.key: mine})[self.key]
            except record.RecordError as exc:      # no answer kept, so no key shown
                self.grade = Grade(False, 0.0, f"Not marked. {exc}")
                self._on_graded(str(exc))
                return self._show()
            self.restore(kept)
            self.practice = kept != mine           # answered before, in another quiz
        self.grade = grade(self.q, self.response(), self.covered())
        for field in self._inputs():
            field.disabled = True
        self.retry_button.disabled = False
        self._show()
        self._on_graded("")
        return self.grade

    def _show(self) -> Grade:
        g = self.grade
        assert g is not None
        colour = (_GOOD if g.correct else _NEUTRAL if self.q.kind == "explain" else _BAD)
        head = "<b>Practice, not scored.</b> " if self.practice else ""
        self.output.value = (f"<div style='border-left:4px solid {colour};padding-left:8px'>"
                             f"{head}{paragraphs(g.feedback)}</div>")
        self._show_record()
        return g

    def _show_record(self) -> None:
        if self.first is None:
            self.record.value = ""
            return
        answer, kind = self.first_response, self.q.kind
        shown = ("the answer shown before yours" if self.shown_first else
                 "an answer that cannot be read" if answer is None else
                 "your first answer, your written answer" if kind == "explain" else
                 "your first answer, (" + ", ".join(answer) + ")" if kind == "multiple" else
                 f"your first answer, ({answer})" if kind == "single" else
                 f"your first answer, {answer!r}")
        self.record.value = (f"<span style='color:#333'>Scored: {html.escape(shown)}: "
                             f"<b>{self.first.score:.2g} of 1</b>.</span>")

    def retry(self) -> None:
        """Clear the answer for practice; the first grade stays recorded and shown."""
        self.set_response([] if self.q.kind == "multiple" else None if self.q.kind == "single"
                          else "")
        for field in self._inputs():
            field.disabled = False
        self.grade, self.practice = None, True
        self.output.value = ""
        self._show_record()

    def _rubric_changed(self, _change: dict) -> None:
        """Ticks re-score the committed text, kept in the record, and a practice text if
        one is checked."""
        if self.first is None or self.shown_first or self._restoring:
            return
        covered = self.covered()

        def tick(answers: dict[str, dict]) -> None:
            if self.key in answers and not answers[self.key].get("revealed"):
                answers[self.key]["covered"] = covered
        try:
            self.restore(record.change(tick).get(self.key))
        except record.RecordError as exc:
            self.output.value = f"<div style='color:{_BAD}'>{html.escape(str(exc))}</div>"
            return self._on_graded(str(exc))
        if self.grade is not None:
            self.grade = (grade(self.q, self.response(), covered) if self.practice
                          else self.first)
            self._show()
        self._on_graded("")


class Quiz(widgets.VBox):
    """Review questions with Check / Try again buttons; the score counts first answers.

    Args:
        topic: only the questions of this topic (see ``workbench.quiz.TOPICS``).
        lesson: only the questions this lesson teaches (a notebook's name without its
            number, e.g. "collectives").
        ids: only these question ids, in this order.
        exclude: leave out these question ids.
        questions: questions to use instead of the bank (for example a teacher's own).
        seed: whose order of choices to show; the learner's name when None.
        shuffle: False shows the choices in the bank's order.
    """

    def __init__(self, topic: str | None = None, ids: Sequence[str] | None = None,
                 questions: Sequence[Question] | None = None, seed: str | int | None = None,
                 shuffle: bool = True, lesson: str | None = None,
                 exclude: Sequence[str] = ()) -> None:
        pool = list(questions) if questions is not None else load_bank(topic)
        if lesson is not None:
            pool = [q for q in pool if q.lesson == lesson]
            if not pool:
                known = sorted({q.lesson for q in load_bank()} - {""})
                raise ValueError(f"no question of lesson {lesson!r}; lessons with questions: "
                                 f"{', '.join(known)}")
        bank = {q.id: q for q in pool}
        pool = [q for q in in_learner_order(pool, seed, shuffle) if q.id not in set(exclude)]
        if ids is not None:
            by_id = {q.id: q for q in pool}
            unknown = [i for i in ids if i not in by_id]
            if unknown:
                raise KeyError(f"no question with id {unknown[0]!r}; known ids include "
                               f"{', '.join(list(by_id)[:5])}, ...")
            pool = [by_id[i] for i in ids]
        if not pool:
            raise ValueError("the quiz has no questions: check the topic or ids")
        self.questions = pool
        self.cards = {q.id: _Card(n, q, bank[q.id], self._update_score)
                      for n, q in enumerate(pool, 1)}
        self.problem = ""   # why the record cannot be used ('' when it can)
        try:
            kept = record.read()
        except record.RecordError as exc:
            kept, self.problem = {}, str(exc)
        for card in self.cards.values():
            card.restore(kept.get(card.key))
        self.score_label = widgets.HTML()
        title = (TOPICS.get(topic, "Review questions") if topic else
                 "Questions on this notebook" if lesson else "Review questions")
        header = widgets.HTML(f"{STYLE}<h3 style='margin:4px 0'>{html.escape(title)}</h3>"
                              f"<div style='margin:0 0 6px 0;line-height:1.4'>{RULES}</div>")
        super().__init__([header, *(c.box for c in self.cards.values()), self.score_label])
        self._update_score(self.problem)

    # --- programmatic use (tests, teachers) ------------------------------------------------

    def answer(self, qid: str, response: Any, covered: Iterable[int] | None = None) -> None:
        """Set the answer of question `qid` as if the student had typed, clicked or ticked."""
        card = self._card(qid)
        for field in card._inputs():
            field.disabled = False
        card.set_response(response, covered)

    def check(self, qid: str) -> Grade:
        """Press the question's Check button; return the grade of that check."""
        card = self._card(qid)
        card.check_button.click()
        assert card.grade is not None
        return card.grade

    def reveal(self) -> None:
        """Show every right answer with its explanation (for teachers and answer keys).

        A question not yet answered is recorded as answered after seeing the key: 0. When
        the record cannot keep that, no key is shown (:class:`record.RecordError`).
        """
        kept = record.keep_first({c.key: record.revealed() for c in self.cards.values()
                                  if c.first is None})
        for card in self.cards.values():
            q = card.q
            if card.first is None:
                card.restore(kept.get(card.key))
            card.set_response(q.model_answer if q.kind == "explain" else q.answer)
            card.grade, card.practice = grade(q, card.response(), range(len(q.rubric))), True
            card.retry_button.disabled = False
            card._show()
        self._update_score()

    def retry(self, qid: str | None = None) -> None:
        """Clear one question (or all) to practise; first grades stay."""
        for card in [self._card(qid)] if qid else list(self.cards.values()):
            card.retry()

    def feedback(self, qid: str) -> str:
        """The plain-text feedback of the latest check of `qid` ('' before one)."""
        card = self._card(qid)
        return card.grade.feedback if card.grade else ""

    def first_grade(self, qid: str) -> Grade | None:
        """The grade of the first committed answer to `qid` (None before it)."""
        return self._card(qid).first

    @property
    def score(self) -> float:
        """Points from first answers: 1 per right one, the counted share of a rubric."""
        return sum(c.first.score for c in self.cards.values() if c.first)

    @property
    def checked(self) -> int:
        """How many questions have a committed first answer."""
        return sum(c.first is not None for c in self.cards.values())

    def summary(self) -> str:
        return (f"Score: {self.score:g} / {len(self.cards)} "
                f"({self.checked} of {len(self.cards)} questions answered; first answers count)")

    def _card(self, qid: str) -> _Card:
        try:
            return self.cards[qid]
        except KeyError:
            raise KeyError(f"this quiz has no question {qid!r}; it has: "
                           f"{', '.join(self.cards)}") from None

    def _update_score(self, problem: str | None = None) -> None:
        """Show the score, and why the record cannot be used when a use of it failed."""
        self.problem = self.problem if problem is None else problem
        self.score_label.value = f"<b>{html.escape(self.summary())}</b>" + (
            f"<div style='color:{_BAD}'>{html.escape(self.problem)}</div>" if self.problem
            else "")
