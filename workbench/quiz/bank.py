"""The review question bank: loading, checking and grading.

The questions live in ``bank.yaml`` next to this file, so teachers can edit them without
touching code. :func:`load_bank` reads and validates them; :func:`grade` marks one
response and explains the answer, whether the response was right or not.

Kinds of question:

* ``single``   one choice out of several (answer: a letter, ``"b"``);
* ``multiple`` several choices (answer: a list of letters, ``["a", "c"]``);
* ``numeric``  a number, right within ``tolerance`` (absolute);
* ``explain``  a short written explanation, compared with a ``model_answer`` and a
  ``rubric``: a list of points, each with what earns it and its key terms. The student ticks
  the points their answer makes, and a ticked point counts only when the answer uses one of
  its key terms that the question itself does not (:func:`addresses`), in a sentence of the
  student's own: an empty answer, the question copied back, a list of terms or text pasted
  from the course earns nothing whatever is ticked (:func:`written_problem`,
  :func:`own_sentences`).

Each question names the ``lesson`` that teaches it (a notebook's file name without its
number), so that lesson's quiz holds it.

The order in which each learner sees the choices is :mod:`workbench.quiz.order`'s.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

BANK_PATH = Path(__file__).with_name("bank.yaml")
KINDS = ("single", "multiple", "numeric", "explain")

#: Topics in teaching order, with the title shown to students.
TOPICS = {
    "metrics": "Speedup, efficiency and scalability",
    "platform": "Accuracy is platform-independent, speed is not",
    "parallelism": "Data and model parallelism",
    "synchronization": "Synchronous and asynchronous SGD",
    "staleness": "Staleness",
    "communication": "Communication overhead",
    "consistency": "Keeping replicas consistent",
    "faults": "Faults, checkpoints and resuming",
    "frameworks": "Frameworks",
    "memory": "Big data and memory",
    "gradient-descent": "Gradient descent",
    "ring-allreduce": "Ring allreduce",
    "parameter-server": "Parameter servers",
    "amdahl": "Amdahl's law",
    "gustafson": "Gustafson's law",
    "karp-flatt": "The Karp–Flatt metric",
    "pipeline": "Pipeline bubbles",
}


class BankError(ValueError):
    """The question bank (or a topic asked for) is not valid; the message says where."""


@dataclass(frozen=True)
class RubricPoint:
    """One point of a model answer: its name, what earns it, and words that usually show it."""

    point: str
    earns: str
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Question:
    """One review question, as stored in ``bank.yaml``."""

    id: str
    topic: str
    kind: str
    prompt: str
    # the key and what explains it stay out of the printed form (``quiz.questions`` in a
    # cell): shown only once an answer is committed, and by the teacher's sheet
    answer: Any = field(repr=False)
    explanation: str = field(repr=False)
    choices: tuple[str, ...] = ()
    why: dict[str, str] = field(default_factory=dict, repr=False)
    tolerance: float = 0.0
    model_answer: str = field(default="", repr=False)
    rubric: tuple[RubricPoint, ...] = field(default=(), repr=False)
    lesson: str = ""

    @property
    def letters(self) -> tuple[str, ...]:
        """The letters of the choices: ('a', 'b', 'c', 'd') for four choices."""
        return tuple(chr(97 + i) for i in range(len(self.choices)))

    def choice(self, letter: str) -> str:
        """The text of the choice with this letter."""
        return self.choices[self.letters.index(letter)]


@dataclass(frozen=True)
class Grade:
    """The result of one response: right or not, a score in [0, 1], and feedback to show.

    ``feedback`` may contain $...$ mathematics; ``hints`` lists rubric points that an
    explanation seems to miss (only for ``explain`` questions).
    """

    correct: bool
    score: float
    feedback: str
    hints: tuple[str, ...] = ()


def load_bank(topic: str | None = None, path: Path | str = BANK_PATH) -> list[Question]:
    """Read, validate and return the questions, optionally only those of one topic."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BankError(f"cannot read the question bank {path}: {exc}") from exc
    if not isinstance(raw, list):
        raise BankError(f"{path}: expected a list of questions at the top level")
    questions = [_parse(item, i) for i, item in enumerate(raw)]
    seen: set[str] = set()
    for q in questions:
        if q.id in seen:
            raise BankError(f"{path}: two questions have the id {q.id!r}; ids must be unique")
        seen.add(q.id)
    if topic is None:
        return questions
    if topic not in TOPICS:
        raise BankError(f"unknown topic {topic!r}; choose one of: {', '.join(TOPICS)}")
    return [q for q in questions if q.topic == topic]


def _parse(item: Any, index: int) -> Question:
    """Turn one YAML mapping into a Question, or raise BankError naming what is wrong."""
    where = f"question #{index + 1}"
    if not isinstance(item, dict):
        raise BankError(f"{where}: expected a mapping of fields, got {type(item).__name__}")
    where = f"question {item.get('id', f'#{index + 1}')!r}"
    for key in ("id", "topic", "kind", "prompt", "answer", "explanation"):
        if key not in item:
            raise BankError(f"{where}: the field {key!r} is missing")
    kind, topic = item["kind"], item["topic"]
    if kind not in KINDS:
        raise BankError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if topic not in TOPICS:
        raise BankError(f"{where}: topic {topic!r} is not one of {', '.join(TOPICS)}")
    q = Question(
        id=str(item["id"]), topic=topic, kind=kind, prompt=str(item["prompt"]).strip(),
        answer=item["answer"], explanation=str(item["explanation"]).strip(),
        choices=tuple(str(c) for c in item.get("choices", ())),
        why={str(k): str(v) for k, v in (item.get("why") or {}).items()},
        tolerance=float(item.get("tolerance", 0.0)),
        model_answer=str(item.get("model_answer", "")).strip(),
        rubric=tuple(RubricPoint(str(r["point"]), str(r["earns"]),
                                 tuple(str(k).lower() for k in r.get("keywords", ())))
                     for r in item.get("rubric", ())),
        lesson=str(item.get("lesson", "")),
    )
    _validate(q, where)
    return q


def _validate(q: Question, where: str) -> None:
    if q.kind in ("single", "multiple"):
        if len(q.choices) < 2:
            raise BankError(f"{where}: a {q.kind}-choice question needs at least two choices")
        answers = [q.answer] if q.kind == "single" else q.answer
        if not isinstance(answers, list) or not answers or any(
                a not in q.letters for a in answers):
            raise BankError(f"{where}: answer {q.answer!r} must be "
                            f"{'a letter' if q.kind == 'single' else 'a list of letters'} "
                            f"among {', '.join(q.letters)}")
        if any(letter not in q.letters for letter in q.why):
            raise BankError(f"{where}: 'why' explains letters that are not choices")
    elif q.kind == "numeric":
        if not isinstance(q.answer, int | float) or q.tolerance < 0:
            raise BankError(f"{where}: a numeric answer must be a number and tolerance >= 0")
    elif not q.model_answer or not q.rubric:
        raise BankError(f"{where}: an explain question needs a model_answer and a rubric")
    elif any(not p.keywords for p in q.rubric):
        raise BankError(f"{where}: every rubric point needs keywords (its key terms)")


# --- grading --------------------------------------------------------------------------------

#: What counts as a number, shared with the HTML quiz's script so both read answers alike:
#: a decimal (with an exponent if you like) or a fraction of whole numbers.
DECIMAL_RE = r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$"
FRACTION_RE = r"^[-+]?\d+/\d+$"
#: Commas that group thousands, as in 1,600 or 12,000.5; any other comma is a decimal comma.
THOUSANDS_RE = r"^[-+]?[1-9]\d{0,2}(,\d{3})+(\.\d+)?$"
#: How a number may be written, as the quiz shows it: two forms of a value that is no
#: question's answer, since an example next to every answer box would give that one away.
NUMBER_EXAMPLES = ("0.6", "3/5")
#: The longest written answer marked, in words: "a few sentences"; the model answers hold
#: 120 to 190, and a longer one is mostly text pasted from elsewhere.
MAX_WORDS = 250
#: The words that hold sentences together. Prose has one in five words or more of them (the
#: model answers, one in three), a list of terms next to none.
GLUE = frozenset(
    "a an the of to in on at by for from with into as than and or but not no so if when "
    "because which that this these those it its they their them there is are was were be "
    "been has have had can will would does do each more".split())
MIN_GLUE = 0.2
#: Words in a row that a sentence shares with the text the course shows (prompts, options,
#: explanations, the other model answers) to be a copy of it rather than the student's own.
COPY_RUN = 8


def parse_number(text: Any) -> float | None:
    """Read '0.75', '0,75', '3/4', '75%' (= 0.75), '1,600' (= 1600) or a number.

    None when it is not a number. A trailing % always divides by 100, as in the HTML quiz,
    so '75%' is right wherever 0.75 is.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        try:
            value = float(text)
        except OverflowError:  # an int beyond the floats, such as 10**400
            return None
        return value if math.isfinite(value) else None
    try:
        s = re.sub(r"\s+", "", str(text)[:200])
    except Exception:  # noqa: BLE001  an object whose str() fails is not a number either
        return None
    percent = s.endswith("%")
    if percent:
        s = s[:-1]
    s = s.replace(",", "") if re.match(THOUSANDS_RE, s) else s.replace(",", ".", 1)
    if not (re.match(DECIMAL_RE, s) or re.match(FRACTION_RE, s)):
        return None
    try:
        value = float(Fraction(s))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    if not math.isfinite(value):
        return None
    return value / 100 if percent else value


def grade(q: Question, response: Any, covered: Any = ()) -> Grade:
    """Mark `response` to question `q` and explain the answer.

    `response` is a letter (single), a collection of letters (multiple), a number or text
    such as '3/4' (numeric), or the student's text (explain). For explain questions,
    `covered` lists the indices of the rubric points the student says the answer makes;
    the score is the share of those the answer :func:`addresses`.
    """
    if q.kind == "single":
        return _grade_single(q, response)
    if q.kind == "multiple":
        return _grade_multiple(q, response)
    if q.kind == "numeric":
        return _grade_numeric(q, response)
    return _grade_explain(q, str(response or ""), covered)


def _grade_single(q: Question, response: Any) -> Grade:
    if response not in q.letters:
        return Grade(False, 0.0, "Pick one answer first.")
    right = response == q.answer
    lines = [("Correct. " if right else f"Not quite: the answer is ({q.answer}) "
              f"{q.choice(q.answer)}. ") + q.explanation]
    if not right and response in q.why:
        lines.append(f"About ({response}): {q.why[response]}")
    return Grade(right, 1.0 if right else 0.0, "\n\n".join(lines))


def _grade_multiple(q: Question, response: Any) -> Grade:
    picked = set(response or ())
    if not picked:
        return Grade(False, 0.0, "Tick at least one answer first.")
    want = set(q.answer)
    right = picked == want
    lines = ["Correct. " + q.explanation] if right else [
        "Not quite: the true statements are " + ", ".join(f"({a})" for a in sorted(want))
        + ". " + q.explanation]
    for letter in sorted(picked - want):
        lines.append(f"({letter}) is false. {q.why.get(letter, '')}".strip())
    for letter in sorted(want - picked):
        lines.append(f"({letter}) is true as well: {q.choice(letter)}")
    return Grade(right, 1.0 if right else 0.0, "\n\n".join(lines))


def _grade_numeric(q: Question, response: Any) -> Grade:
    value = parse_number(response)
    if value is None:
        return Grade(False, 0.0, f"Enter a number, such as {' or '.join(NUMBER_EXAMPLES)} "
                     f"(got {response!r}).")
    right = abs(value - float(q.answer)) <= q.tolerance + 1e-12
    answer = f"{q.answer:g}"
    head = "Correct. " if right else f"Not quite: you entered {value:g}, the answer is {answer}. "
    return Grade(right, 1.0 if right else 0.0, head + q.explanation)


def written_problem(text: str) -> str:
    """Why a written answer cannot be marked ('' when it can): it is empty, longer than
    :data:`MAX_WORDS`, or a list of terms rather than sentences (fewer than one word in five
    of :data:`GLUE`). Such an answer is not committed; marked anyway, it scores nothing."""
    words = re.findall(r"[a-z']+", str(text).lower())
    if not words:
        return "Write your answer in the box first."
    if len(words) > MAX_WORDS:
        return (f"Your answer has {len(words)} words: keep it to {MAX_WORDS} at most, a few "
                "sentences of your own.")
    if sum(w in GLUE for w in words) < MIN_GLUE * len(words):
        return ("Write your answer in sentences: a list of terms does not explain how they "
                "connect.")
    return ""


def _runs(text: str) -> set[tuple[str, ...]]:
    """Every :data:`COPY_RUN` words in a row of `text`; a shorter text whole."""
    words = tuple(re.findall(r"[a-z0-9]+", text.lower()))
    if len(words) < COPY_RUN:
        return {words} if len(words) >= 5 else set()
    return {words[i:i + COPY_RUN] for i in range(len(words) - COPY_RUN + 1)}


def _copied(runs: set[tuple[str, ...]], shown: str) -> bool:
    """Whether one of `runs` appears, word for word, in `shown` (words joined by spaces)."""
    return any(f" {' '.join(run)} " in shown for run in runs)


@functools.lru_cache(maxsize=4)
def _course_text(path: Path | str) -> dict[str, str]:
    """The bank's text by question id, as words joined by spaces: prompts, options,
    explanations, notes, model answers and rubrics."""
    return {q.id: " " + " | ".join(" ".join(re.findall(r"[a-z0-9]+", text.lower())) for text in (
        q.prompt, *q.choices, q.explanation, *q.why.values(), q.model_answer,
        *(p.earns for p in q.rubric))) + " " for q in load_bank(path=path)}


def own_sentences(q: Question, text: str) -> tuple[str, list[str]]:
    """(the sentences of `text` that repeat no :data:`COPY_RUN` words in a row of the
    course's text but `q`'s model answer, shown only after an answer; those that do)."""
    course = _course_text(BANK_PATH)
    own = dict(course).pop(q.id, "")
    shown = "".join(text for qid, text in course.items() if qid != q.id) + " | ".join(
        part for part in own.split(" | ")[:1 + len(q.choices)]) + " "   # its prompt, options
    mine, copied = [], []
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        (copied if _copied(_runs(sentence), shown) else mine).append(sentence)
    return " ".join(mine), [c for c in copied if c.strip()]


def _grade_explain(q: Question, text: str, covered: Any) -> Grade:
    ticked = sorted({int(i) for i in covered or ()} & set(range(len(q.rubric))))
    problem = written_problem(text) if _normalise(text) else ""
    if problem:
        return Grade(False, 0.0, f"Not marked: {problem}", tuple(p.point for p in q.rubric))
    text, copied = own_sentences(q, text)
    made = [addresses(p, text, q.prompt) for p in q.rubric]
    counted = [i for i in ticked if made[i]]
    score = len(counted) / len(q.rubric)
    hints = tuple(p.point for p, ok in zip(q.rubric, made, strict=True) if not ok)
    lines = [f"Compare your answer with the model answer and tick each rubric point it makes: "
             f"{len(counted)} of {len(q.rubric)} count.", "Model answer: " + q.model_answer]
    for i, p in enumerate(q.rubric):
        mark = "[x]" if i in counted else "[ticked, not counted]" if i in ticked else "[ ]"
        lines.append(f"{mark} {p.point}: {p.earns} (key terms: {', '.join(p.keywords)})")
    if copied:
        lines.append(f"{len(copied)} of your sentences repeat the course's text word for "
                     "word; their key terms do not count: " + " / ".join(copied))
    if not _normalise(text) and not copied:
        lines.insert(0, "Your answer is empty: it scores nothing. Write it in the box first.")
    elif hints:
        lines.append("A ticked point counts only when your answer uses one of its key terms "
                     "(words the question does not already use). Yours does not for: "
                     + "; ".join(hints) + ".")
    return Grade(score == 1.0, score, "\n\n".join(lines), hints)


def addresses(point: RubricPoint, text: str, prompt: str = "") -> bool:
    """True when `text` uses one of the point's key terms that `prompt` does not use.

    The least evidence a machine can check that an answer makes the point: a ticked box
    whose point the answer never names scores nothing, and words copied from the question
    are no evidence. Whether the answer makes the point well is the student's judgement
    against the model answer, which the tick records.
    """
    words = _normalise(text)
    return any(mentions(words, k) and not mentions(prompt, k) for k in point.keywords)


def mentions(text: str, keyword: str) -> bool:
    """True when a word of `text` starts with `keyword`: 'synchroni' finds 'synchronize',
    but 'fit' does not find 'benefit'."""
    return re.search(r"\b" + re.escape(keyword.lower()), text.lower()) is not None


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()
