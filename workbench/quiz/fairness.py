"""How far a test-wise student gets on the question bank without knowing anything.

A quiz is fair when its key cannot be read off the options' form. Each *strategy* below picks
answers from the text alone; :func:`table` scores every one of them on the whole bank (items
added later included) beside the score of a blind guess, and a test holds each strategy at
most :data:`MARGIN` above that chance::

    python -m workbench.quiz.fairness        # every strategy's score beside chance

Single choice (chance: 1/k for k options): the option of each length rank (1st, 2nd, 3rd,
4th longest), the most and the fewest words, the one with the fewest absolute words
("always", "only", ...), the most hedged ("usually", "about", ...), the one sharing the most
words with the question, the most or the fewest with the other options (the odd one out),
the one with the most mathematics, the one repeating a number of the prompt. Ties share the
credit: a strategy that cannot tell 2 options apart, one of them right, scores 1/2 on that
question.

Multiple choice is marked all or nothing (the exact set of true options), and the widget
refuses an empty answer, so a blind guess is one of the 2**k - 1 non-empty sets: chance is
1/(2**k - 1). Strategies: tick all, all but the shortest, all but the longest, all without
an absolute word, all but the odd one out, all but the most absolute; and, for a student who
has noticed how many statements are usually true (the bank's most common number, n), n
ticked at random, the n longest, the n most hedged, the n with the fewest absolute words,
the n sharing the most words with the others (ties broken at random, as by a student).

Numeric (chance 0: the answer is a number to type): answer a number printed in the prompt;
answer a number that another question prints beside the prompt's words (the whole bank is
one quiz in the review), one of them at random when several are.

Written answers (chance 0): an empty answer with every rubric box ticked, the question copied
back, the bank's most frequent terms listed, and the explanations of its topic's other
questions pasted (as many words as an answer may hold), every box ticked (see
:func:`workbench.quiz.bank.grade`: a ticked point counts only when the answer, in sentences of
its own, uses one of its key terms that the question does not).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.quiz.bank import MAX_WORDS, Question, grade, load_bank, parse_number

#: How far above chance a knowledge-free strategy may score (a share: 0.10 = 10 points).
MARGIN = 0.10
#: Words that make a statement absolute; test-wise students learn to avoid them.
ABSOLUTE = ("always", "never", "only", "cannot", "can't", "none", "all", "every", "must",
            "impossible", "nothing", "no", "any", "entirely", "completely", "exactly")
#: Words that soften a statement; test-wise students learn that the key often has them.
HEDGES = ("usually", "often", "may", "might", "can", "could", "about", "roughly", "mostly",
          "typically", "generally", "some", "partly", "largely", "likely", "tends", "most",
          "depends", "approximately", "nearly", "almost", "around", "unless")
_WORD = re.compile(r"[a-z][a-z'\-]+")
_STOP = {"the", "and", "that", "this", "with", "from", "what", "which", "does", "their",
         "each", "for", "are", "its", "than", "they", "them", "into", "when", "why", "how",
         "one", "more", "not", "has", "have", "is", "of", "to", "a", "an", "in", "on", "it",
         "by", "as", "or", "be", "at", "so", "if"}


def words(text: str) -> list[str]:
    """Lower-case words of `text`, mathematics left out."""
    return _WORD.findall(re.sub(r"\$[^$]*\$", " ", text.lower()))


def content_words(text: str) -> set[str]:
    """The distinct words of `text` that carry meaning (no stop words, over 3 letters)."""
    return {w for w in words(text) if w not in _STOP and len(w) > 3}


def mathematics(text: str) -> int:
    """Characters of mathematics: inside $...$, plus digits and operators outside it."""
    inside = sum(len(m) for m in re.findall(r"\$([^$]*)\$", text))
    outside = re.sub(r"\$[^$]*\$", "", text)
    return inside + len(re.findall(r"[\d=+×·/^−<>≤≥%]", outside))


def count(text: str, vocabulary: Sequence[str]) -> int:
    """How many words of `text` are in `vocabulary`."""
    return sum(w in vocabulary for w in words(text))


def absolute(text: str) -> bool:
    """True when the option uses an absolute word."""
    return count(text, ABSOLUTE) > 0


def shared_words(option: str, other: str) -> int:
    """Distinct content words the option shares with another text (the question, an option)."""
    return len(content_words(option) & content_words(other))


def _credit(scores: Sequence[float], right: int, best: Callable) -> float:
    """1/t when the right option is among the t options with the best score, else 0."""
    top = best(scores)
    tied = [i for i, s in enumerate(scores) if s == top]
    return 1 / len(tied) if right in tied else 0.0


def _length_rank(rank: int) -> Callable[[Question], float]:
    """The strategy "pick the option of this length rank" (1 = longest); the shortest where
    an item has fewer options; options of equal length share the credit."""
    def credit(q: Question) -> float:
        lengths = [len(c) for c in q.choices]
        target = sorted(lengths, reverse=True)[min(rank, len(lengths)) - 1]
        return _credit([-abs(n - target) for n in lengths], _key(q), max)
    return credit


def _by(score: Callable[[Question, str], float], best: Callable) -> Callable[[Question], float]:
    return lambda q: _credit([score(q, c) for c in q.choices], _key(q), best)


def _key(q: Question) -> int:
    return q.letters.index(q.answer)


def _with_others(q: Question, option: str) -> float:
    return sum(shared_words(option, other) for other in q.choices if other != option)


#: Single-choice strategies: name -> credit on one question, in [0, 1].
SINGLE: dict[str, Callable[[Question], float]] = {
    **{f"the {n} longest option": _length_rank(i)
       for i, n in enumerate(("1st", "2nd", "3rd", "4th"), 1)},
    "the most words": _by(lambda q, c: len(words(c)), max),
    "the fewest words": _by(lambda q, c: len(words(c)), min),
    "the fewest absolute words": _by(lambda q, c: count(c, ABSOLUTE), min),
    "the most hedged": _by(lambda q, c: count(c, HEDGES), max),
    "the most words shared with the question": _by(lambda q, c: shared_words(c, q.prompt), max),
    "the most words shared with the other options": _by(_with_others, max),
    "the fewest words shared with the other options": _by(_with_others, min),
    "the most mathematics": _by(lambda q, c: mathematics(c), max),
    "a number of the prompt repeated": _by(
        lambda q, c: len(numbers(c) & numbers(q.prompt)), max),
}


def _all_but(pick: Callable) -> Callable[[Question], set[str]]:
    def ticks(q: Question) -> set[str]:
        lengths = [len(c) for c in q.choices]
        return set(q.letters) - {q.letters[lengths.index(pick(lengths))]}
    return ticks


def _without_absolute(q: Question) -> set[str]:
    plain = {x for x, c in zip(q.letters, q.choices, strict=True) if not absolute(c)}
    return plain or set(q.letters)   # nothing to tick is refused: then the student ticks all


def _all_but_top(score: Callable[[Question, str], float]) -> Callable[[Question], set[str]]:
    """Tick all but the option that scores highest (the first of equals, in the bank's
    order: these strategies are scored on sets, see :data:`SIZED` for random tie-breaks)."""
    def ticks(q: Question) -> set[str]:
        scores = [score(q, c) for c in q.choices]
        return set(q.letters) - {q.letters[scores.index(max(scores))]}
    return ticks


#: Multiple-choice strategies: name -> the letters it ticks.
MULTIPLE: dict[str, Callable[[Question], set[str]]] = {
    "tick all": lambda q: set(q.letters),
    "tick all but the shortest": _all_but(min),
    "tick all but the longest": _all_but(max),
    "tick all without an absolute word": _without_absolute,
    "tick all but the odd one out": _all_but_top(lambda q, c: -_with_others(q, c)),
    "tick all but the most absolute": _all_but_top(lambda q, c: count(c, ABSOLUTE)),
}


def _top(score: Callable[[Question, str], float]) -> Callable[[Question, int], float]:
    """The strategy "tick the n options that score highest": its chance of ticking exactly
    the true ones when options that score the same are drawn at random."""
    def credit(q: Question, n: int) -> float:
        scores = [score(q, c) for c in q.choices]
        if len(q.answer) != n or n > len(scores):
            return 0.0
        cut = sorted(scores, reverse=True)[n - 1]
        above = {x for x, s in zip(q.letters, scores, strict=True) if s > cut}
        tied = {x for x, s in zip(q.letters, scores, strict=True) if s == cut}
        rest = set(q.answer) - above
        if not above <= set(q.answer) or not rest <= tied:
            return 0.0
        return 1 / math.comb(len(tied), len(rest))
    return credit


#: Multiple-choice strategies of a student who ticks as many options as are usually true
#: (the bank's most common number of true statements, n): name -> credit given n.
SIZED: dict[str, Callable[[Question, int], float]] = {
    "tick n at random": _top(lambda q, c: 0),
    "tick the n longest": _top(lambda q, c: len(c)),
    "tick the n most hedged": _top(lambda q, c: count(c, HEDGES)),
    "tick the n with the fewest absolute words": _top(lambda q, c: -count(c, ABSOLUTE)),
    "tick the n sharing the most words with the others": _top(_with_others),
}


def usual_size(questions: Sequence[Question]) -> int:
    """How many statements of a multiple-choice question are most often true (1 if none)."""
    sizes = Counter(len(q.answer) for q in questions if q.kind == "multiple")
    return sizes.most_common(1)[0][0] if sizes else 1

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?%?|\.\d+%?")


def numbers(text: str) -> set[float]:
    """Every number printed in `text` (10^9 gives 10 and 9; 95% gives 95 and 0.95; LaTeX's
    86{,}400 is 86400)."""
    found = set()
    for written in _NUMBER.findall(text.replace("{,}", ",")):
        value = parse_number(written.rstrip(","))
        if value is not None:
            found |= {value, value * 100} if written.endswith("%") else {value}
    return found


def prompt_numbers(q: Question) -> set[float]:
    """Every number printed in the prompt."""
    return numbers(q.prompt)


def _numeric_in_prompt(q: Question) -> float:
    return float(any(abs(v - float(q.answer)) <= q.tolerance + 1e-12
                     for v in prompt_numbers(q)))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?;:])\s+|\n+", text) if s.strip()]


def _numeric_beside_its_words(q: Question, bank: Sequence[Question]) -> float:
    """Credit of "answer a number another question prints in a sentence sharing two words or
    more with the prompt", one of those numbers at random (1/how many there are)."""
    asked = content_words(q.prompt)
    found = {round(v, 9) for o in bank if o.id != q.id
             for text in (o.prompt, *o.choices, o.explanation, *o.why.values(), o.model_answer)
             for sentence in _sentences(text) if len(content_words(sentence) & asked) >= 2
             for v in numbers(sentence)}
    right = [v for v in found if abs(v - float(q.answer)) <= q.tolerance + 1e-12]
    return len(right) / len(found) if found else 0.0


NUMERIC: dict[str, Callable[[Question, Sequence[Question]], float]] = {
    "answer a number printed in the prompt": lambda q, bank: _numeric_in_prompt(q),
    "answer a number printed beside the prompt's words": _numeric_beside_its_words,
}


def _frequent_terms(q: Question, bank: Sequence[Question]) -> str:
    """The bank's most frequent terms, as a list: what the sheet shows before any answer."""
    found = Counter(w for o in bank for text in (o.prompt, *o.choices)
                    for w in words(text) if w not in _STOP and len(w) > 3)
    return " ".join(w for w, _ in found.most_common(MAX_WORDS))


def _pasted(q: Question, bank: Sequence[Question]) -> str:
    """The explanations the other questions of its topic show once answered, pasted, cut to
    the longest answer allowed."""
    text = " ".join(o.explanation for o in bank if o.topic == q.topic and o.id != q.id)
    return " ".join(text.split()[:MAX_WORDS])


def _ticked(make: Callable[[Question, Sequence[Question]], str]
            ) -> Callable[[Question, Sequence[Question]], float]:
    return lambda q, bank: grade(q, make(q, bank), range(len(q.rubric))).score


EXPLAIN: dict[str, Callable[[Question, Sequence[Question]], float]] = {
    "an empty answer, every box ticked": _ticked(lambda q, bank: ""),
    "the question copied back, every box ticked": _ticked(lambda q, bank: q.prompt),
    "the bank's most frequent terms, every box ticked": _ticked(_frequent_terms),
    "its topic's explanations pasted, every box ticked": _ticked(_pasted),
}


def chance(q: Question) -> float:
    """The expected score of a blind guess at `q`."""
    if q.kind == "single":
        return 1 / len(q.choices)
    if q.kind == "multiple":
        return 1 / (2 ** len(q.choices) - 1)
    return 0.0


@dataclass(frozen=True)
class Row:
    """One strategy's share of right answers on the items of one kind, beside chance."""

    kind: str
    strategy: str
    items: int
    score: float
    chance: float

    @property
    def fair(self) -> bool:
        return self.score <= self.chance + MARGIN + 1e-9


def _credits(questions: Sequence[Question]) -> dict[str, dict[str, Callable[[Question], float]]]:
    """Every strategy as a credit on one question, by kind; those that look at the rest of
    the bank (the usual number of true statements, the other questions' text) see it."""
    n = usual_size(questions)
    return {
        "single": SINGLE,
        "multiple": {
            **{name: (lambda q, pick=pick: float(pick(q) == set(q.answer)))
               for name, pick in MULTIPLE.items()},
            **{name.replace(" n ", f" {n} "): (lambda q, f=f: f(q, n))
               for name, f in SIZED.items()}},
        "numeric": {name: (lambda q, f=f: f(q, questions)) for name, f in NUMERIC.items()},
        "explain": {name: (lambda q, f=f: f(q, questions)) for name, f in EXPLAIN.items()},
    }


def table(questions: Sequence[Question] | None = None) -> list[Row]:
    """Every strategy's score on the bank's items of its kind, beside chance."""
    questions = load_bank() if questions is None else questions
    rows = []
    for kind, strategies in _credits(questions).items():
        items = [q for q in questions if q.kind == kind]
        if not items:
            continue
        base = sum(chance(q) for q in items) / len(items)
        rows += [Row(kind, name, len(items),
                     sum(credit(q) for q in items) / len(items), base)
                 for name, credit in strategies.items()]
    return rows


def unfair(questions: Sequence[Question] | None = None) -> list[Row]:
    """The strategies that score more than :data:`MARGIN` above chance."""
    return [row for row in table(questions) if not row.fair]


def absolute_rates(questions: Sequence[Question]) -> tuple[float, float]:
    """(share of right options, share of wrong options) that use an absolute word, over the
    single- and multiple-choice questions."""
    right = wrong = n_right = n_wrong = 0
    for q in questions:
        if q.kind not in ("single", "multiple"):
            continue
        keys = {q.answer} if q.kind == "single" else set(q.answer)
        for letter, text in zip(q.letters, q.choices, strict=True):
            if letter in keys:
                n_right, right = n_right + 1, right + absolute(text)
            else:
                n_wrong, wrong = n_wrong + 1, wrong + absolute(text)
    return right / max(1, n_right), wrong / max(1, n_wrong)


def report(questions: Sequence[Question] | None = None) -> str:
    """The table as text: each strategy's score, chance, and whether it is within the bar."""
    questions = load_bank() if questions is None else questions
    lines = [f"{'kind':<9}{'strategy':<52}{'items':>6}{'score':>8}{'chance':>8}"]
    lines += [f"{r.kind:<9}{r.strategy:<52}{r.items:>6}{r.score:>8.1%}{r.chance:>8.1%}"
              + ("" if r.fair else f"   over chance + {MARGIN:.0%}") for r in table(questions)]
    right, wrong = absolute_rates(questions)
    lines.append(f"absolute words in {right:.1%} of right options, {wrong:.1%} of wrong ones")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
