"""An exercise is written, not imported: the package's own version of the answer is refused.

A checker that compared values only would pass `return idle_fraction(p, m)`: the
package's own function for what exercise 5 asks the student to write. Hiding it cannot
work in Python (whatever the package holds can be imported, and a function's globals
lead to its module), so the checker watches instead. While the student's function runs, a
profile function (`sys.setprofile`, and `threading.setprofile` for the threads it starts)
sees every Python function that begins, and notes each whose *code object* is one of the
exercise's answers in the package: however it was reached (an import, an alias, a lambda
or a `functools.partial` around it, a copy of the function object, a method called on a
borrowed class), the code that runs is the package's. An answer that writes the same
arithmetic itself has code objects of its own and passes, whatever its names.

Answers are named "module:qualname" ("workbench.model_parallel.schedule:idle_fraction"), a
class (every function defined in it) or a whole module ("workbench.sharded.zero1": every
function whose code lies in its file, found without importing it, so that a module only the
student's code imports is watched too), and looked up where the watching happens: on a rank
they are that rank's own functions. Only the student's calls are watched: the checker
computes its own references outside them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any


def codes_of(answers: Iterable[str]) -> dict[types.CodeType, str]:
    """{code object: "module.qualname"} of every function the "module:qualname" names in
    `answers` denote."""
    codes: dict[types.CodeType, str] = {}
    for answer in answers:
        module_name, _, qualname = answer.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in filter(None, qualname.split(".")):
            target = getattr(target, part)
        for fn in _functions(target, module_name):
            for code in _nested(fn.__code__):   # and the functions it defines inside
                codes.setdefault(code, f"{fn.__module__}.{fn.__qualname__}")
    return codes


def _file(module_name: str) -> str:
    """The file a module's code objects name, without importing the module or its packages
    (importing torch.distributed.optim, say, would only warn of torch.jit's deprecation)."""
    spec, path = None, None
    parts = module_name.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[:i + 1])
        module = sys.modules.get(name)
        spec = module.__spec__ if module is not None else \
            importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            raise ValueError(f"no module {module_name!r} to watch")
        path = spec.submodule_search_locations
    if spec is None or spec.origin is None:
        raise ValueError(f"no module {module_name!r} to watch")
    return spec.origin


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _nested(const)


def _functions(target: Any, module_name: str) -> Iterator[types.FunctionType]:
    """The Python functions defined in `target`: a function, a class or a module."""
    target = inspect.unwrap(target) if callable(target) else target
    if isinstance(target, types.FunctionType):
        yield target
        return
    if isinstance(target, types.ModuleType):
        members = [v for v in vars(target).values()
                   if getattr(v, "__module__", None) == module_name]
    elif isinstance(target, type):
        members = [getattr(v, "__func__", v) for v in vars(target).values()]
        members += [v.fget for v in vars(target).values() if isinstance(v, property)]
    else:
        raise TypeError(f"{target!r} is not a function, class or module")
    for member in members:   # what the module itself defines, not what it borrowed
        if isinstance(member, types.FunctionType | type) and member.__module__ == module_name:
            yield from _functions(member, module_name)


class Watch:
    """Which of the package's answers the student's code called (`used`, in order)."""

    def __init__(self, answers: Iterable[str]) -> None:
        answers = list(answers)
        self.codes = codes_of(a for a in answers if ":" in a)
        self._whole = {c for c in self.codes if self.codes[c].endswith("." + c.co_qualname)}
        self.files = {_file(a): a for a in answers if ":" not in a}
        self.used: list[str] = []
        self.calls = 0           # how many times an answer began (not its comprehensions)
        self._depth = 0

    def _profile(self, frame: types.FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = self.codes.get(code)
        if name is None and code.co_filename in self.files and code.co_name != "<module>":
            name = f"{self.files[code.co_filename]}.{code.co_qualname}"
        if name is not None:
            self.calls += code in self._whole or code.co_name[0] != "<"   # not its parts
            if name not in self.used:
                self.used.append(name)

    @contextmanager
    def watching(self) -> Iterator[Watch]:
        """Note the answers that run inside the block (this thread and those it starts)."""
        if self._depth:          # a student's function calling itself, or another watched one
            yield self
            return
        previous = sys.getprofile(), threading.getprofile()
        self._depth += 1
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(previous[0])
            threading.setprofile(previous[1])
            self._depth -= 1

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, watched whenever it is called (its signature and name kept)."""
        @functools.wraps(fn)
        def watched(*args: Any, **kwargs: Any) -> Any:
            with self.watching():
                return fn(*args, **kwargs)
        return watched

    def sentence(self) -> str | None:
        """What the checker says when an answer of the package ran; None if none did."""
        if not self.used:
            return None
        names = ", ".join(self.used)
        return (f"your function calls {names}: the package's own version of what this "
                "exercise asks you to write.")


HINT = ("Write it yourself, from the description and the lesson: a checker that passes "
        "the package's own code back to it proves nothing you can do.")


def refusing(*answers: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A checker `check(fn, ...)` that also refuses an `fn` that runs one of `answers`: it
    judges `fn` watched, and whatever its verdict, names the package's function that ran."""
    from workbench.exercises.feedback import not_yet

    def decorate(checker: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(checker)
        def check(fn: Any, *args: Any, **kwargs: Any) -> Any:
            if not callable(fn):
                return checker(fn, *args, **kwargs)
            watch = Watch(answers)
            verdict = checker(watch.wrap(fn), *args, **kwargs)
            sentence = watch.sentence()
            return not_yet(sentence, HINT) if sentence else verdict
        return check
    return decorate
