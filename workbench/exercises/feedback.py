"""The answer an exercise checker gives: passed or not, what happened, and hints.

Every `check_*` function in `workbench.exercises` returns a `Feedback` and never raises on a
wrong answer, so an exercise notebook always runs from top to bottom. A student's function
that crashes, or that is not written yet, is reported as feedback too.
"""

from __future__ import annotations

import functools
import html
import inspect
import itertools
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from workbench.quiz.bank import parse_number


@dataclass(frozen=True)
class Feedback:
    """The verdict on one answer.

    `passed` says whether the answer is right, `message` says what the checker saw, and
    `hints` say how to get closer (empty when the answer passed, never empty when it did not).
    It shows as a coloured box in Jupyter and as plain text in a terminal.
    """

    passed: bool
    message: str
    hints: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = "Correct" if self.passed else "Not yet"
        lines = [f"{head}: {self.message}"]
        lines += [f"  Hint: {hint}" for hint in self.hints]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        colour, border, head = (
            ("#e8f5e9", "#2e7d32", "&#10004; Correct")
            if self.passed
            else ("#fff3e0", "#ef6c00", "&#10008; Not yet")
        )
        items = "".join(f"<li>{html.escape(hint)}</li>" for hint in self.hints)
        hints = f"<ul style='margin:4px 0 0 0'>{items}</ul>" if items else ""
        return (
            f"<div style='background:{colour};border-left:4px solid {border};"
            f"padding:6px 10px;color:#222'><b>{head}</b>: {html.escape(self.message)}"
            f"{hints}</div>"
        )


def correct(message: str) -> Feedback:
    """A passing verdict."""
    return Feedback(True, message, [])


def not_yet(message: str, *hints: str) -> Feedback:
    """A failing verdict; it always carries at least one hint."""
    if not hints:
        hints = ("Read the exercise's description again and compare it with your code.",)
    return Feedback(False, message, list(hints))


def whole_number(answer: Any) -> int | None:
    """The answer as an int when it is a whole number: 27, 27.0 and the text " 27 " all are.

    Every number a student gives is read by the quiz's parser, `parse_number`, so an
    exercise and the review quiz accept the same answers ("0.25", "1/4", "25%").
    """
    value = parse_number(answer)
    return int(value) if value is not None and value.is_integer() else None


def numbers(answer: Any, count: int | None = None) -> list[float] | None:
    """The answer as a list of numbers (of `count` of them, if given), or None if it is not.

    A tuple, list or other collection of numbers is; a text or a lone number is not.
    """
    if isinstance(answer, str | bytes) or not isinstance(answer, Iterable):
        return None
    limit = MAX_ITEMS if count is None else count + 1   # never read an endless iterable
    values = [parse_number(item) for item in itertools.islice(answer, limit)]
    if None in values or len(values) == MAX_ITEMS or (count is not None and len(values) != count):
        return None
    return values


#: The most items a checker reads from an answer: more is never right, and reading an endless
#: iterable (range(10**12)) would never end.
MAX_ITEMS = 100_000


def guarded(checker: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """Make a checker total: an error while judging an odd answer becomes feedback; and
    refuse a check during which the checker had been changed (intact.py).

    Checkers read the student's answer carefully, but an answer can be anything (an object
    whose comparison raises, a tensor of the wrong dtype); the notebook must go on, and the
    student learns what the checker could not read.
    """
    from workbench.exercises import intact

    @functools.wraps(checker)
    def total(*args: Any, **kwargs: Any) -> Feedback:
        changed = intact.restore()
        try:
            verdict = checker(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  any answer gets an answer, never a traceback
            verdict = not_yet(f"the checker could not read your answer: "
                              f"{type(exc).__name__}: {str(exc)[:200]}",
                              "Return exactly what the exercise asks for (the type and shape "
                              "in its description), then check again.")
        changed += intact.restore()
        if changed:
            return not_yet(f"code in this notebook changed the checker ({', '.join(changed[:3])}"
                           "); it has been put back, and this check does not count.",
                           "Leave workbench's code as it is: write only the function the "
                           "exercise asks for, then check again.")
        return verdict
    return total


def call_student(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, Feedback | None]:
    """Call the student's function; turn a crash into feedback instead of an exception.

    Returns `(result, None)` when the call returned, or `(None, feedback)` when `fn` is not
    a function, is not written yet (raises NotImplementedError) or raised another error.
    """
    if not callable(fn):
        return None, not_yet(
            f"expected a function, got {type(fn).__name__}.",
            "Pass the function itself, without calling it: check_x(my_function), "
            "not check_x(my_function()).",
        )
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        return None, not_written()
    except Exception as exc:  # a student's bug is feedback, not a crash of the notebook
        return None, not_yet(
            f"your function raised {type(exc).__name__}: {exc}",
            f"The error happened at {_where(exc)}. Read the message, fix that line, and run "
            "the cell that defines the function again before checking.",
        )


def not_written() -> Feedback:
    """What a blank gets: the function still raises NotImplementedError."""
    return not_yet("your function is not written yet (it raises NotImplementedError).",
                   "Replace the line `raise NotImplementedError` with your code, then run the "
                   "check again.")


def is_blank(fn: Any) -> bool:
    """True for an exercise's blank: a function whose only global name is
    NotImplementedError (its body is `raise NotImplementedError` and comments), also
    under a checker's watch (own_work.py)."""
    code = getattr(inspect.unwrap(fn) if callable(fn) else fn, "__code__", None)
    return code is not None and set(code.co_names) == {"NotImplementedError"}


def refuse_before_ranks(fn: Any, called_as: str, *args: Any, **kwargs: Any) -> Feedback | None:
    """What to say at once, without starting ranks that would only fail the same way: `fn`
    is not a function, is still the exercise's blank, or cannot be called with `args` and
    `kwargs` as `called_as` (e.g. "launch(bucket, pending)") is. None: run it on the ranks."""
    if not callable(fn):
        return not_yet(f"expected a function, got {type(fn).__name__}.",
                       f"Pass the function itself, without calling it: {called_as}.")
    if is_blank(fn):
        return not_written()
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        return not_yet(f"your function cannot be called as {called_as} is: {err}.",
                       f"Keep the signature the exercise gives: {called_as}.")
    except ValueError:  # no signature to read (a builtin): let the run tell
        pass
    return None


def _where(exc: BaseException) -> str:
    """Name the innermost line of the traceback, e.g. "line 4 of average_gradients"."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "an unknown line"
    last = frames[-1]
    return f"line {last.lineno} of {last.name}"


#: A check judges what the ranks computed, not how fast: its ranks bind no cores, so it
#: never queues behind the learner's own jobs, and warm ranks opened the same way run it.
CHECK_CPU_BIND = "none"


def on_real_ranks(fn: Callable[..., Any], *args: Any, np: int, name: str, runs_dir: str,
                  timeout_s: float, hang_hint: str) -> list[Any] | Feedback:
    """`fn(*args)` run on `np` torch ranks by `workbench.launch` (on the warm ranks of
    `workbench.ranks(np, "torch", cpu_bind="none")` when they run: a check then starts in
    milliseconds): each rank's value, or the feedback that says why there is none."""
    import warnings

    import workbench

    with warnings.catch_warnings():
        # A check may run more ranks than the host has cores, on purpose (3 ranks on a
        # 2-core laptop): the warning stays in the run's record, not in the notebook.
        warnings.simplefilter("ignore", UserWarning)
        job = workbench.launch(fn, *args, np=np, engine="torch", runs_dir=runs_dir, name=name,
                               stall_timeout=timeout_s, cpu_bind=CHECK_CPU_BIND)
    if job.wait(timeout_s) == "running":
        job.stop()
        return not_yet(f"the ranks did not finish within {timeout_s:g} s.", hang_hint)
    if job.status != "succeeded":
        failure = (job.summary or {}).get("failure") or {}
        return not_yet(f"the job {job.status}: rank {failure.get('rank')} "
                       f"{failure.get('error')}",
                       "Read the traceback (`workbench show " + job.run_id + "`).")
    return job.results()

