"""A function sent to the ranks by value, the rank's side (the owner's: launch/by_value.py):
read only from a file of our own (a pickle runs code), its source lines put back so that a
traceback shows your code. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import functools
import inspect
import linecache
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from workbench.records.private import read_own

#: Where `launch()` puts the pickled (function, args) in the run folder.
PAYLOAD = "user/function.pkl"


def load_function(run_dir: Path) -> Callable[[], Any]:
    """`fn(*args)`, to call, of what `launch()` pickled into `run_dir`."""
    return unpickle_call(read_own(run_dir / PAYLOAD, run_dir))


def unpickle_call(data: bytes) -> Callable[[], Any]:
    """`fn(*args)`, to call, of what `pickle_function` pickled, its source back for tracebacks."""
    fn, args, (files, lines) = cloudpickle.loads(data)
    for name, text in lines.items():
        if text:  # (size, mtime None: never reloaded from disk, lines, name)
            linecache.cache[name] = (sum(map(len, text)), None, text, name)
    for f in functions_used(fn, *args):
        code = f.__code__
        name = files.get((code.co_name, code.co_firstlineno))
        if name and code.co_filename != name:
            f.__code__ = _renamed(code, name)
    return functools.partial(fn, *args)


def functions_used(*roots: Any) -> list[Any]:
    """The functions `roots` are (a method's) or reach through their globals and closures."""
    found: dict[int, Any] = {}
    todo = list(roots)
    while todo:
        f = todo.pop()
        f = f.__func__ if inspect.ismethod(f) else f
        if not inspect.isfunction(f) or id(f) in found:
            continue
        found[id(f)] = f
        todo += [f.__globals__.get(n) for n in names_used(f.__code__)]
        todo += [c.cell_contents for c in f.__closure__ or () if filled(c)]
    return list(found.values())


def names_used(code: Any) -> list[str]:
    """Global names used by `code` and by the functions nested in it."""
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names += names_used(const)
    return names


def filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError for an empty cell
    except ValueError:
        return False
    return True


def _renamed(code: Any, filename: str) -> Any:
    """`code`, and the code of the functions defined inside it, with `co_filename` set."""
    consts = tuple(_renamed(c, filename) if hasattr(c, "co_filename") else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)
