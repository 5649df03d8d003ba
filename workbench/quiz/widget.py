"""The quiz widget: answer review questions in a notebook, see the score and every explanation.

    from workbench.quiz import Quiz
    Quiz(topic="pipeline")

Each question has its own *Check* and *Try again* buttons; a check marks the answer,
explains it (right or wrong) and updates the score at the bottom. Choosing an answer needs
no Python: only *Check* runs code, so clicking around stays instant. Prompts and feedback
are ``HTMLMath`` widgets, so $...$ mathematics is typeset by JupyterLab's MathJax.

:func:`quiz_html` gives the same questions as one self-contained HTML page (a few inline
lines of JavaScript and ``<details>`` reveals): it works with no kernel at all, for example
in a notebook rendered as a static page.

Choices appear in each learner's own order (seeded by the learner's name, see
:func:`workbench.quiz.bank.shuffled`), the same in the widget and in the HTML page; pass
``seed=`` to choose the order, or ``shuffle=False`` for the bank's order.

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

from workbench.quiz.bank import (
    DECIMAL_RE,
    FRACTION_RE,
    THOUSANDS_RE,
    TOPICS,
    Grade,
    Question,
    grade,
    learner_seed,
    load_bank,
    shuffled,
)

_GOOD, _BAD, _NEUTRAL = "#2e7d32", "#c62828", "#1565c0"


def _to_html(text: str) -> str:
    """Escape text for HTML, keep $...$ for MathJax, and turn blank lines into paragraphs."""
    paragraphs = [html.escape(p).replace("\n", " ") for p in text.split("\n\n")]
    return "".join(f"<p style='margin:4px 0'>{p}</p>" for p in paragraphs)


class _Card:
    """One question: prompt, input, Check and Try-again buttons, and the feedback area."""

    def __init__(self, number: int, q: Question, on_graded) -> None:
        self.q, self._on_graded = q, on_graded
        self.grade: Grade | None = None
        topic = html.escape(TOPICS.get(q.topic, q.topic))
        self.prompt = widgets.HTMLMath(
            f"<b>Question {number}.</b> <span style='color:#666'>({topic})</span>"
            + _to_html(q.prompt))
        self.input, input_row = self._make_input()
        self.rubric = [widgets.Checkbox(value=False, description=p.point, indent=False)
                       for p in q.rubric]
        for box in self.rubric:
            box.observe(self._rubric_changed, names="value")
        self.rubric_box = widgets.VBox(self.rubric, layout=widgets.Layout(display="none"))
        self.check_button = widgets.Button(description="Check", button_style="primary",
                                           tooltip="Mark this answer and explain it")
        self.retry_button = widgets.Button(description="Try again",
                                           tooltip="Clear this answer and its feedback")
        self.check_button.on_click(lambda _: self.check())
        self.retry_button.on_click(lambda _: self.retry())
        self.output = widgets.HTMLMath("")
        self.box = widgets.VBox(
            [self.prompt, input_row, widgets.HBox([self.check_button, self.retry_button]),
             self.output, self.rubric_box],
            layout=widgets.Layout(border="1px solid #ddd", padding="6px", margin="0 0 8px 0"))

    def _make_input(self) -> tuple[Any, widgets.Widget]:
        q = self.q
        if q.kind == "numeric":
            field = widgets.Text(placeholder="a number, e.g. 0.75 or 3/4",
                                 description="Answer:")
            return field, field
        if q.kind == "explain":
            field = widgets.Textarea(placeholder="Write a few sentences.",
                                     layout=widgets.Layout(width="95%", height="110px"))
            return field, field
        listing = widgets.HTMLMath("".join(
            f"<div style='margin:2px 0'><b>({letter})</b> {html.escape(text)}</div>"
            for letter, text in zip(q.letters, q.choices, strict=True)))
        if q.kind == "single":
            field = widgets.ToggleButtons(options=list(q.letters), value=None,
                                          description="Answer:", style={"button_width": "48px"})
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

    def set_response(self, response: Any, covered: Iterable[int] = ()) -> None:
        """Fill the input as a student would (letters, a number or text)."""
        if self.q.kind == "multiple":
            picked = set(response or ())
            for letter, box in zip(self.q.letters, self.input.children, strict=True):
                box.value = letter in picked
        elif self.q.kind == "numeric":
            self.input.value = "" if response is None else str(response)
        else:
            self.input.value = response
        for i, box in enumerate(self.rubric):
            box.value = i in set(covered)

    def check(self) -> Grade:
        self.grade = grade(self.q, self.response(), self.covered())
        if self.q.kind == "explain":
            self.rubric_box.layout.display = "flex"
            colour = _GOOD if self.grade.correct else _NEUTRAL
        else:
            colour = _GOOD if self.grade.correct else _BAD
        self.output.value = (f"<div style='border-left:4px solid {colour};padding-left:8px'>"
                             f"{_to_html(self.grade.feedback)}</div>")
        self._on_graded()
        return self.grade

    def retry(self) -> None:
        self.set_response([] if self.q.kind == "multiple" else None if self.q.kind == "single"
                          else "")
        self.grade = None
        self.output.value = ""
        self.rubric_box.layout.display = "none"
        self._on_graded()

    def _rubric_changed(self, _change: dict) -> None:
        if self.grade is not None:  # re-score the explanation as the student ticks points
            self.check()


class Quiz(widgets.VBox):
    """A set of review questions with Check / Try again buttons and a running score.

    Args:
        topic: only the questions of this topic (see ``workbench.quiz.TOPICS``); all if None.
        ids: only these question ids, in this order.
        questions: questions to use instead of the bank (for example a teacher's own).
        seed: whose order of choices to show; the learner's name when None.
        shuffle: False shows the choices in the bank's order.
    """

    def __init__(self, topic: str | None = None, ids: Sequence[str] | None = None,
                 questions: Sequence[Question] | None = None, seed: str | int | None = None,
                 shuffle: bool = True) -> None:
        pool = _in_learner_order(list(questions) if questions is not None
                                 else load_bank(topic), seed, shuffle)
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
        self.cards = {q.id: _Card(n, q, self._update_score) for n, q in enumerate(pool, 1)}
        self.score_label = widgets.HTML()
        retry_all = widgets.Button(description="Start again", tooltip="Clear every answer")
        retry_all.on_click(lambda _: self.retry())
        title = TOPICS.get(topic, "Review questions") if topic else "Review questions"
        header = widgets.HTML(f"<h3 style='margin:4px 0'>{html.escape(title)}</h3>")
        footer = widgets.HBox([self.score_label, retry_all])
        super().__init__([header, *(c.box for c in self.cards.values()), footer])
        self._update_score()

    # --- programmatic use (tests, teachers) ------------------------------------------------

    def answer(self, qid: str, response: Any, covered: Iterable[int] = ()) -> None:
        """Set the answer of question `qid` as if the student had typed or clicked it."""
        self._card(qid).set_response(response, covered)

    def check(self, qid: str) -> Grade:
        """Press the question's Check button; return its grade."""
        card = self._card(qid)
        card.check_button.click()
        assert card.grade is not None
        return card.grade

    def check_all(self) -> float:
        """Check every question; return the score."""
        for card in self.cards.values():
            card.check()
        return self.score

    def reveal(self) -> float:
        """Fill in every right answer (the model answer for explanations) and check them all.

        For teachers and for answer keys: every explanation is then on display.
        """
        for q in self.questions:
            response = q.model_answer if q.kind == "explain" else q.answer
            self.answer(q.id, response, covered=range(len(q.rubric)))
        return self.check_all()

    def retry(self, qid: str | None = None) -> None:
        """Clear one question (or all) so the student can try again."""
        cards = [self._card(qid)] if qid else list(self.cards.values())
        for card in cards:
            card.retry()

    def feedback(self, qid: str) -> str:
        """The plain-text feedback shown under question `qid` ('' before it is checked)."""
        card = self._card(qid)
        return card.grade.feedback if card.grade else ""

    @property
    def score(self) -> float:
        """Points earned so far: 1 per right answer, a share of the rubric for explanations."""
        return sum(c.grade.score for c in self.cards.values() if c.grade)

    @property
    def checked(self) -> int:
        """How many questions have been checked."""
        return sum(c.grade is not None for c in self.cards.values())

    def summary(self) -> str:
        return (f"Score: {self.score:g} / {len(self.cards)} "
                f"({self.checked} of {len(self.cards)} questions checked)")

    def _card(self, qid: str) -> _Card:
        try:
            return self.cards[qid]
        except KeyError:
            raise KeyError(f"this quiz has no question {qid!r}; it has: "
                           f"{', '.join(self.cards)}") from None

    def _update_score(self) -> None:
        self.score_label.value = f"<b>{html.escape(self.summary())}</b>&nbsp;&nbsp;"


def _in_learner_order(pool: list[Question], seed: str | int | None,
                      shuffle: bool) -> list[Question]:
    """The questions with their choices in the learner's order (or as in the bank)."""
    if not shuffle:
        return pool
    seed = learner_seed() if seed is None else seed
    return [shuffled(q, seed) for q in pool]


# --- the kernel-free HTML version ---------------------------------------------------------------

#: parse_number of bank.py in JavaScript, built from the same patterns: NaN where it says None.
PARSE_NUMBER_JS = (
    "function(t){var s=String(t).replace(/\\s+/g,'');var pc=/%$/.test(s);"
    "if(pc){s=s.slice(0,-1);}"
    "if(/" + THOUSANDS_RE + "/.test(s)){s=s.replace(/,/g,'');}else{s=s.replace(',','.');}"
    "var v=NaN;if(/" + FRACTION_RE.replace("/", "\\/") + "/.test(s)){var q=s.split('/');"
    "v=parseInt(q[0],10)/parseInt(q[1],10);}else if(/" + DECIMAL_RE + "/.test(s)){"
    "v=parseFloat(s);}if(!isFinite(v)){return NaN;}return pc?v/100:v;}"
)

_CHECK_JS = (
    "var d=this.closest('.wbq');var r=d.querySelector('.wbq-result');var ok;"
    "if(d.dataset.kind==='numeric'){var v=(" + PARSE_NUMBER_JS + ")("
    "d.querySelector('input').value);"
    "ok=Math.abs(v-parseFloat(d.dataset.answer))<=parseFloat(d.dataset.tolerance)+1e-12;}"
    "else{var want=d.dataset.answer.split(',');"
    "var got=Array.from(d.querySelectorAll('input:checked')).map(function(e){return e.value;});"
    "ok=want.length==got.length&&want.every(function(x){return got.indexOf(x)>=0;});}"
    "r.textContent=ok?'Correct.':'Not quite. Read the explanation, then try again.';"
    "r.style.color=ok?'" + _GOOD + "':'" + _BAD + "';d.querySelector('details').open=true;"
)


def quiz_html(topic: str | None = None, questions: Sequence[Question] | None = None,
              seed: str | int | None = None, shuffle: bool = True) -> str:
    """The questions as self-contained HTML: instant checks in the page, no kernel needed.

    Show it with ``IPython.display.HTML(quiz_html())``. Choice and numeric answers are
    checked by a few lines of inline JavaScript (numbers are read as the widget reads them:
    75% is 0.75, 1,600 is 1600); every question has a ``<details>`` block with the answer
    and its explanation, which works even where scripts are blocked. The choices are in the
    learner's order, as in :class:`Quiz` with the same `seed`.
    """
    pool = _in_learner_order(list(questions) if questions is not None else load_bank(topic),
                             seed, shuffle)
    return "<div class='wbq-quiz'>" + "".join(
        _question_html(n, q) for n, q in enumerate(pool, 1)) + "</div>"


def _question_html(number: int, q: Question) -> str:
    e = html.escape
    body = f"<p><b>Question {number}.</b> {e(q.prompt)}</p>"
    if q.kind in ("single", "multiple"):
        kind = "radio" if q.kind == "single" else "checkbox"
        body += "".join(
            f"<label style='display:block'><input type='{kind}' name='wbq-{e(q.id)}' "
            f"value='{letter}'> ({letter}) {e(text)}</label>"
            for letter, text in zip(q.letters, q.choices, strict=True))
        answer = q.answer if q.kind == "single" else ",".join(q.answer)
        reveal = "Answer: " + ", ".join(f"({a}) {e(q.choice(a))}" for a in answer.split(","))
        reveal += "".join(f"<br>({k}) is wrong: {e(v)}" for k, v in sorted(q.why.items()))
        data = f"data-kind='{q.kind}' data-answer='{answer}'"
    elif q.kind == "numeric":
        body += "<input type='text' placeholder='a number' size='12'>"
        reveal = f"Answer: {q.answer:g}"
        data = f"data-kind='numeric' data-answer='{q.answer}' data-tolerance='{q.tolerance}'"
    else:
        body += "<textarea rows='4' style='width:95%'></textarea>"
        points = "".join(f"<li><b>{e(p.point)}</b>: {e(p.earns)}</li>" for p in q.rubric)
        reveal = f"Model answer: {e(q.model_answer)}<br>Rubric:<ul>{points}</ul>"
        data = "data-kind='explain'"
    if q.kind != "explain":
        body += (f"<button onclick=\"{_CHECK_JS}\">Check</button> "
                 "<span class='wbq-result' style='font-weight:bold'></span>")
    return (f"<div class='wbq' {data} style='border:1px solid #ddd;padding:6px;"
            f"margin:0 0 8px 0'>{body}<details><summary>Show the answer</summary>"
            f"<p>{reveal}</p><p>{e(q.explanation)}</p></details></div>")
