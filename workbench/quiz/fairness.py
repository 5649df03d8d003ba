"""How far a test-wise student gets on the question bank without knowing anything.

A quiz is fair when its key cannot be read off the options' form. Each *strategy* below picks
answers from the text alone; :func:`report` scores each on the whole bank (also on items
added later), so a test can hold every strategy under a bar::

    python -m workbench.quiz.fairness        # prints each strategy's score

Single choice: the longest option, the shortest, the one with the most mathematics, the one
that shares the most words with the question, and "avoid absolute words" (always, never,
only, cannot, ...). Ties share the credit: a strategy that cannot tell 2 options apart, one
of them right, scores 1/2 on that question. Multiple choice: tick all, tick all but the
shortest, tick all but the longest; the share of each question's options that are false
varies, so no single pattern fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from workbench.quiz.bank import Question, load_bank

#: Words that make a statement absolute; test-wise students learn to avoid them.
ABSOLUTE = ("always", "never", "only", "cannot", "can't", "none", "all", "every", "must",
            "impossible", "nothing", "no")
_WORD = re.compile(r"[a-z][a-z'\-]+")
_STOP = {"the", "and", "that", "this", "with", "from", "what", "which", "does", "their",
         "each", "for", "are", "its", "than", "they", "them", "into", "when", "why", "how",
         "one", "more", "not", "has", "have", "is", "of", "to", "a", "an", "in", "on", "it",
         "by", "as", "or", "be", "at", "so", "if"}


def words(text: str) -> list[str]:
    """Lower-case words of `text`, mathematics left out."""
    return _WORD.findall(re.sub(r"\$[^$]*\$", " ", text.lower()))


def mathematics(text: str) -> int:
    """Characters of mathematics: inside $...$, plus digits and operators outside it."""
    inside = sum(len(m) for m in re.findall(r"\$([^$]*)\$", text))
    outside = re.sub(r"\$[^$]*\$", "", text)
    return inside + len(re.findall(r"[\d=+×·/^−<>≤≥%]", outside))


def absolute(text: str) -> bool:
    """True when the option uses an absolute word."""
    found = set(words(text))
    return any(w in found for w in ABSOLUTE)


def shared_words(option: str, prompt: str) -> int:
    """Distinct content words the option repeats from the question."""
    mine = {w for w in words(option) if w not in _STOP and len(w) > 3}
    return len(mine & {w for w in words(prompt) if w not in _STOP and len(w) > 3})


def _credit(scores: Sequence[float], right: int, best: Callable[[Sequence[float]], float]) -> float:
    """1/t when the right option is among the t options with the best score, else 0."""
    top = best(scores)
    tied = [i for i, s in enumerate(scores) if s == top]
    return 1 / len(tied) if right in tied else 0.0


#: Single-choice strategies: name -> (per-option score, pick max or min).
SINGLE: dict[str, tuple[Callable[[Question, str], float], Callable]] = {
    "longest option": (lambda q, c: len(c), max),
    "shortest option": (lambda q, c: len(c), min),
    "most mathematics": (lambda q, c: mathematics(c), max),
    "most words shared with the question": (lambda q, c: shared_words(c, q.prompt), max),
    "avoid absolute words": (lambda q, c: float(absolute(c)), min),
}


def single_scores(questions: Sequence[Question]) -> dict[str, float]:
    """{strategy: share of single-choice questions it answers right} (ties share credit)."""
    singles = [q for q in questions if q.kind == "single"]
    out = {}
    for name, (score, best) in SINGLE.items():
        total = sum(_credit([score(q, c) for c in q.choices], q.letters.index(q.answer), best)
                    for q in singles)
        out[name] = total / len(singles) if singles else 0.0
    return out


def _ticks(q: Question, drop: Callable | None) -> set[str]:
    if drop is None:
        return set(q.letters)
    lengths = [len(c) for c in q.choices]
    return set(q.letters) - {q.letters[lengths.index(drop(lengths))]}


def multiple_scores(questions: Sequence[Question]) -> dict[str, float]:
    """{strategy: share of multiple-choice questions it gets exactly right}."""
    multi = [q for q in questions if q.kind == "multiple"]
    strategies = {"tick all": None, "tick all but the shortest": min,
                  "tick all but the longest": max}
    return {name: (sum(_ticks(q, drop) == set(q.answer) for q in multi) / len(multi)
                   if multi else 0.0) for name, drop in strategies.items()}


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


def false_counts(questions: Sequence[Question]) -> list[int]:
    """How many false options each multiple-choice question has."""
    return [len(q.choices) - len(q.answer) for q in questions if q.kind == "multiple"]


def report(questions: Sequence[Question] | None = None) -> str:
    """Every strategy's score on the bank, as lines of text."""
    questions = load_bank() if questions is None else questions
    lines = [f"single choice ({sum(q.kind == 'single' for q in questions)} questions):"]
    lines += [f"  {name:<38}{share:6.1%}" for name, share in single_scores(questions).items()]
    lines.append(f"multiple choice ({sum(q.kind == 'multiple' for q in questions)} questions, "
                 f"false options per question {sorted(false_counts(questions))}):")
    lines += [f"  {name:<38}{share:6.1%}" for name, share in multiple_scores(questions).items()]
    right, wrong = absolute_rates(questions)
    lines.append(f"absolute words: {right:.1%} of right options, {wrong:.1%} of wrong ones")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
