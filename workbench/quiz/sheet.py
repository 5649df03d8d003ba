"""The quiz without a kernel: a question sheet for the student, an answer sheet for the teacher.

    from IPython.display import HTML
    HTML(quiz_html(topic="metrics"))      # in a notebook, or any page rendered from one

    python -m workbench.quiz.sheet --answers > answers.html     # the teacher's sheet

The student's page holds the questions and a place to answer each, and no key: anything in
the page, a reader can see with the browser's page source, so a key in it (even hidden, or
only checked by a script) is a key given away. *Show my answers* lists what the student
chose or wrote, as text to hand in; the teacher marks it with :func:`answer_sheet`, which
gives every key by its text (the letters differ per learner) with its explanation. In a
notebook with a kernel, :class:`workbench.quiz.Quiz` marks answers itself.
"""

from __future__ import annotations

import argparse
import html
import re
from collections.abc import Sequence

from workbench.quiz.bank import TOPICS, Question, load_bank
from workbench.quiz.order import in_learner_order


def inline(text: str) -> str:
    """Escape `text` for HTML, keep $...$ for MathJax, and show *words* in italics and
    `code` as code (the bank's only markup)."""
    parts = re.split(r"(\$[^$]*\$)", text)
    out = []
    for i, part in enumerate(parts):
        part = html.escape(part)
        if i % 2 == 0:   # outside mathematics
            part = re.sub(r"`([^`]+)`", r"<code>\1</code>", part)
            part = re.sub(r"(?<![\w*])\*(?!\s)([^*]+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", part)
        out.append(part)
    return "".join(out)


def paragraphs(text: str) -> str:
    """:func:`inline` text, each blank-line-separated paragraph in a <p>."""
    return "".join(f"<p style='margin:4px 0'>{inline(p).replace(chr(10), ' ')}</p>"
                   for p in text.split("\n\n"))


_COLLECT_JS = (
    "var out=[];this.closest('.wbq-quiz').querySelectorAll('.wbq').forEach(function(d){"
    "var a=Array.from(d.querySelectorAll('input:checked')).map(function(e){"
    "return e.parentNode.textContent.trim();});"
    "var t=d.querySelector('input[type=text],textarea');"
    "if(t&&t.value.trim()){a.push(t.value.trim());}"
    "out.push(d.dataset.id+': '+(a.length?a.join(' | '):'(no answer)'));});"
    "var r=this.parentNode.querySelector('.wbq-mine');r.textContent=out.join('\\n');"
    "r.style.display='block';"
)


def quiz_html(topic: str | None = None, questions: Sequence[Question] | None = None,
              seed: str | int | None = None, shuffle: bool = True) -> str:
    """The questions as a self-contained HTML sheet to answer, with no key in it.

    The choices are in the learner's order, as in :class:`workbench.quiz.Quiz` with the
    same `seed`. One button lists the student's answers as text (no script runs on load:
    inline handlers only).
    """
    pool = in_learner_order(list(questions) if questions is not None else load_bank(topic),
                            seed, shuffle)
    return ("<div class='wbq-quiz'><p><i>No answers are in this page: press <b>Show my "
            "answers</b> and hand the list to your teacher, or open the notebook with a "
            "kernel, where the quiz marks and explains each answer.</i></p>"
            + "".join(_question_html(n, q) for n, q in enumerate(pool, 1))
            + f"<button onclick=\"{_COLLECT_JS}\">Show my answers</button>"
            "<pre class='wbq-mine' style='display:none;white-space:pre-wrap'></pre></div>")


def _question_html(number: int, q: Question) -> str:
    body = f"<p><b>Question {number}.</b> {inline(q.prompt)}</p>"
    if q.kind in ("single", "multiple"):
        kind = "radio" if q.kind == "single" else "checkbox"
        body += "".join(
            f"<label style='display:block'><input type='{kind}' name='wbq-{html.escape(q.id)}'"
            f"> ({letter}) {inline(text)}</label>"
            for letter, text in zip(q.letters, q.choices, strict=True))
    elif q.kind == "numeric":
        body += "<input type='text' placeholder='a number' size='12'>"
    else:
        body += "<textarea rows='4' style='width:95%'></textarea>"
    return (f"<div class='wbq' data-id='{html.escape(q.id)}' style='border:1px solid #ddd;"
            f"padding:6px;margin:0 0 8px 0'>{body}</div>")


def answer_sheet(topic: str | None = None, questions: Sequence[Question] | None = None) -> str:
    """The teacher's sheet: every question's key, by its text, with the explanation.

    Keys are given by text, not letter, since each learner sees the choices in an order of
    their own; a written question gives its model answer and rubric.
    """
    pool = list(questions) if questions is not None else load_bank(topic)
    return "<div class='wbq-answers'>" + "".join(
        f"<div style='margin:0 0 12px 0'><p><b>{html.escape(q.id)}</b>: {inline(q.prompt)}</p>"
        f"<p>{_key(q)}</p>{paragraphs(q.explanation)}</div>" for q in pool) + "</div>"


def _key(q: Question) -> str:
    if q.kind == "numeric":
        return f"Answer: {q.answer:g} (within {q.tolerance:g})"
    if q.kind == "explain":
        points = "".join(f"<li><b>{inline(p.point)}</b>: {inline(p.earns)} (key terms: "
                         f"{html.escape(', '.join(p.keywords))})</li>" for p in q.rubric)
        return f"Model answer: {inline(q.model_answer)}<br>Rubric:<ul>{points}</ul>"
    keys = [q.answer] if q.kind == "single" else q.answer
    return "Answer: " + "; ".join(inline(q.choice(k)) for k in keys)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workbench.quiz.sheet",
                                     description="Print the quiz as HTML: the student's "
                                     "sheet, or with --answers the teacher's answer sheet.")
    parser.add_argument("--answers", action="store_true", help="the teacher's answer sheet")
    parser.add_argument("--topic", choices=list(TOPICS), help="only this topic's questions")
    args = parser.parse_args(argv)
    body = answer_sheet(args.topic) if args.answers else quiz_html(args.topic, shuffle=False)
    print(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")


if __name__ == "__main__":
    main()
