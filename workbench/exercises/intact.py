"""The checkers as they were imported: what code in the notebook changed in them is put
back, and the check that finds it says so instead of judging.

A checker runs in the student's kernel, beside the student's code, which can reach it:
`Feedback.__init__` patched to set `passed`, `ex.not_yet` replaced by `ex.correct`, a
checker's function given another `__code__`. So when `workbench.exercises` is first imported
(before any notebook code runs) this module records, for every checker module, each of its
names and, for each function and class defined there, its code, defaults, closure and class
attributes, and the functions the verdicts compare with (`math.isclose`, `torch.allclose`,
`torch.equal`, Python's builtins such as `len` and `abs`). `feedback.guarded` puts all of
it back before and after every check; a check that had something to put back is refused.

What it cannot see: `ex.check_x` itself replaced by another function (the notebook then
never calls the checker), or code that rewrites this module first. Code that runs in the
same process as the verdict can always change the verdict; grading that must withstand a
determined student runs the checker where the student's code does not run.
"""

from __future__ import annotations

import builtins
import math
import types
from typing import Any

import torch

#: (owner, attribute, value) as imported; an owner that is a dict is a module's namespace.
_RECORD: list[tuple[Any, str, Any]] = []
#: The classes recorded, with the attributes they had: any other is removed.
_CLASSES: dict[type, set[str]] = {}
_MISSING = object()


def record(modules: list[types.ModuleType]) -> None:
    """Remember `modules` (and the library comparisons) as they are now."""
    _RECORD.clear()
    _CLASSES.clear()
    for owner, name in ((vars(math), "isclose"), (vars(torch), "allclose"),
                        (vars(torch), "equal")):
        _RECORD.append((owner, name, owner[name]))
    for name, value in vars(builtins).items():   # len, abs, sorted ... the verdicts use
        if isinstance(value, types.BuiltinFunctionType | type) and not name.startswith("_"):
            _RECORD.append((vars(builtins), name, value))
    for module in modules:
        for name, value in vars(module).items():
            _RECORD.append((vars(module), name, value))
            if getattr(value, "__module__", None) == module.__name__:
                _record_object(value)


def _record_object(value: Any) -> None:
    if isinstance(value, types.FunctionType):
        for attribute in ("__code__", "__defaults__", "__kwdefaults__"):
            _RECORD.append((value, attribute, getattr(value, attribute)))
        for cell in value.__closure__ or ():
            contents = cell.cell_contents
            _RECORD.append((cell, "cell_contents", contents))
            if isinstance(contents, types.FunctionType):   # the checker a decorator wraps
                _record_object(contents)
    elif isinstance(value, type) and value not in _CLASSES:
        _CLASSES[value] = set(vars(value))
        for name, member in vars(value).items():
            _RECORD.append((value, name, member))


def restore() -> list[str]:
    """Put back what changed since `record`; the names of what was changed."""
    changed = []
    for owner, name, value in _RECORD:
        now = owner.get(name, _MISSING) if isinstance(owner, dict) else \
            getattr(owner, name, _MISSING) if not isinstance(owner, type) else \
            vars(owner).get(name, _MISSING)
        if now is not value:
            changed.append(_name(owner, name))
            if isinstance(owner, dict):
                owner[name] = value
            else:
                setattr(owner, name, value)
    for cls, names in _CLASSES.items():
        for name in set(vars(cls)) - names:
            changed.append(f"{cls.__qualname__}.{name}")
            delattr(cls, name)
    return changed


def _name(owner: Any, name: str) -> str:
    if isinstance(owner, dict):
        return f"{owner.get('__name__', '?')}.{name}"
    return f"{getattr(owner, '__qualname__', type(owner).__name__)}.{name}"
