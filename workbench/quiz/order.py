"""The order of the choices, per learner.

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
import os
import random
import re
import secrets
import time
from pathlib import Path

from workbench.quiz.bank import Question


def learner_seed() -> str:
    """Who takes the quiz: JupyterHub's user name (else the login name, else 'learner'), and
    the learner's random id from :func:`learner_id`, as ``name:id``."""
    try:
        name = os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
    except (KeyError, OSError):  # no login name, e.g. in some containers
        name = "learner"
    found = learner_id()
    return f"{name}:{found}" if found else name


def learner_dir() -> Path:
    """The learner's own folder, holding their id and their quiz answers
    (:mod:`workbench.quiz.record`): ``$WORKBENCH_LEARNER_DIR`` if set, else
    ``$XDG_CONFIG_HOME/workbench`` (by default ``~/.config/workbench``), in their home."""
    if os.environ.get("WORKBENCH_LEARNER_DIR"):
        return Path(os.environ["WORKBENCH_LEARNER_DIR"])
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "workbench"


def learner_id_path() -> Path:
    """Where the learner's id is kept: ``learner-id`` in :func:`learner_dir`."""
    return learner_dir() / "learner-id"


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


def relabel(letters: str | list[str], source: Question, target: Question) -> str | list[str]:
    """The letters in `target` of the choices that `letters` picks in `source`: the same
    question in another learner's order (or the bank's)."""
    def one(letter: str) -> str:
        return target.letters[target.choices.index(source.choice(letter))]
    return one(letters) if isinstance(letters, str) else sorted(one(x) for x in letters)


def in_learner_order(pool: list[Question], seed: str | int | None = None,
                     shuffle: bool = True) -> list[Question]:
    """The questions with their choices in the learner's order (:func:`learner_seed` when
    `seed` is None), or as in the bank when `shuffle` is False."""
    if not shuffle:
        return pool
    seed = learner_seed() if seed is None else seed
    return [shuffled(q, seed) for q in pool]
