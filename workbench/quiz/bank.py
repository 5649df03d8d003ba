"""The review question bank: loading, checking and grading.

The questions live in ``bank.yaml`` next to this file, so teachers can edit them without
touching code. :func:`load_bank` reads and validates them; :func:`grade` marks one
response and explains the answer, whether the response was right or not.

Kinds of question:

* ``single``   one choice out of several (answer: a letter, ``"b"``);
* ``multiple`` several choices (answer: a list of letters, ``["a", "c"]``);
* ``numeric``  a number, right within ``tolerance`` (absolute);
* ``explain``  a short written explanation, compared with a ``model_answer`` and a
  ``rubric``: a list of points, each with what earns it. The student ticks the points their
  answer makes; words typical of each point are used to suggest points that seem missing.

Choices are shown in an order of their own for each learner (:func:`shuffled`), so a key
cannot be learned by position ("it is always (a)") or passed on as a string of letters
(neighbours can still pass on the text of an answer). The order is seeded by the learner
(:func:`learner_seed`: their user name and a random id kept in their home) and the
question's id: the same learner sees the same order every time, in the widget and in the
kernel-free HTML page alike, and two learners who share a login name, as everyone is
`jovyan` on Binder, still see different orders.
"""

from __future__ import annotations

import dataclasses
import getpass
import math
import os
import random
import re
import secrets
import time
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
    answer: Any
    explanation: str
    choices: tuple[str, ...] = ()
    why: dict[str, str] = field(default_factory=dict)
    tolerance: float = 0.0
    model_answer: str = ""
    rubric: tuple[RubricPoint, ...] = ()

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


# --- the order of the choices, per learner -------------------------------------------------------

def learner_seed() -> str:
    """Who takes the quiz: JupyterHub's user name (else the login name, else 'learner'), and
    the learner's random id from :func:`learner_id`, as ``name:id``."""
    try:
        name = os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
    except (KeyError, OSError):  # no login name, e.g. in some containers
        name = "learner"
    found = learner_id()
    return f"{name}:{found}" if found else name


def learner_id_path() -> Path:
    """Where the learner's id is kept: ``$XDG_CONFIG_HOME/workbench/learner-id`` (by
    default under ``~/.config``), in the learner's own home."""
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "workbench" / "learner-id"


def learner_id(path: Path | None = None) -> str:
    """A random id (32 hex digits) made on first use and kept in `path`, readable by its
    owner only; '' when the home cannot be written (the order then follows the name)."""
    path = learner_id_path() if path is None else path
    for attempt in range(3):
        try:
            found = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            found = ""
        if re.fullmatch(r"[0-9a-f]{32}", found):
            return found
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another kernel is writing it, or it is damaged: replace it
            if attempt:
                path.unlink(missing_ok=True)
            time.sleep(0.05)
            continue
        except OSError:          # a read-only home
            return ""
        new = secrets.token_hex(16)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(new + "\n")
        return new
    return ""


def shuffled(q: Question, seed: str | int) -> Question:
    """The question with its choices in this learner's order, letters re-assigned.

    The answer and the `why` notes follow their choices. The order depends only on `seed`
    and the question's id (``random.Random`` hashes a string seed the same way on every
    run), so the widget and the HTML page show one learner the same letters.
    """
    if q.kind not in ("single", "multiple"):
        return q
    order = list(range(len(q.choices)))
    random.Random(f"{seed}:{q.id}").shuffle(order)
    letter = {q.letters[old]: chr(97 + new) for new, old in enumerate(order)}
    answer = letter[q.answer] if q.kind == "single" else sorted(letter[a] for a in q.answer)
    return dataclasses.replace(q, choices=tuple(q.choices[old] for old in order),
                               answer=answer, why={letter[k]: v for k, v in q.why.items()})


# --- grading --------------------------------------------------------------------------------

#: What counts as a number, shared with the HTML quiz's script so both read answers alike:
#: a decimal (with an exponent if you like) or a fraction of whole numbers.
DECIMAL_RE = r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$"
FRACTION_RE = r"^[-+]?\d+/\d+$"
#: Commas that group thousands, as in 1,600 or 12,000.5; any other comma is a decimal comma.
THOUSANDS_RE = r"^[-+]?[1-9]\d{0,2}(,\d{3})+(\.\d+)?$"


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
    the score is the share of points covered.
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
        return Grade(False, 0.0, f"Enter a number, such as 0.75 or 3/4 (got {response!r}).")
    right = abs(value - float(q.answer)) <= q.tolerance + 1e-12
    answer = f"{q.answer:g}"
    head = "Correct. " if right else f"Not quite: you entered {value:g}, the answer is {answer}. "
    return Grade(right, 1.0 if right else 0.0, head + q.explanation)


def _grade_explain(q: Question, text: str, covered: Any) -> Grade:
    ticked = sorted({int(i) for i in covered or ()} & set(range(len(q.rubric))))
    score = len(ticked) / len(q.rubric)
    words = _normalise(text)
    hints = tuple(p.point for i, p in enumerate(q.rubric)
                  if i not in ticked and words and not any(mentions(words, k)
                                                           for k in p.keywords))
    lines = [f"Compare your answer with the model answer and tick each rubric point it makes "
             f"({len(ticked)} of {len(q.rubric)} ticked).", "Model answer: " + q.model_answer]
    lines += [f"{'[x]' if i in ticked else '[ ]'} {p.point}: {p.earns}"
              for i, p in enumerate(q.rubric)]
    if not words:
        lines.insert(0, "Write your answer in the box first, then compare.")
    elif hints:
        lines.append("Your text does not seem to mention: " + "; ".join(hints) + ".")
    return Grade(score == 1.0, score, "\n\n".join(lines), hints)


def mentions(text: str, keyword: str) -> bool:
    """True when a word of `text` starts with `keyword`: 'synchroni' finds 'synchronize',
    but 'fit' does not find 'benefit'."""
    return re.search(r"\b" + re.escape(keyword.lower()), text.lower()) is not None


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()
