"""A function sent to the ranks by value, the rank's side: unpickled with its source put back.

`launch()` and a pool's call pickle the function with cloudpickle (launch/by_value.py); a
rank reads the payload only from a run folder and a file of its own (records/private.py: a
pickle runs code), and gives the functions back their files and lines, so a traceback on a
rank shows your code. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import inspect
import linecache
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from workbench.records.private import read_own

#: Where `launch()` puts the pickled (function, args) in the run folder.
PAYLOAD = "user/function.pkl"


def run_function(payload: Path, run_dir: Path) -> Any:
    """`fn(*args)` of what `launch()` pickled into `payload`."""
    fn, args = load_function(payload, run_dir)
    return fn(*args)


def load_function(payload: Path, run_dir: Path) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Unpickle `(fn, args)` from `payload`, only from a run folder and a file of our own
    (records/private.py): a pickle runs code."""
    return unpickle_call(read_own(payload, run_dir))


def unpickle_call(data: bytes) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The `(fn, args)` of what `pickle_function` pickled, their source lines put back."""
    fn, args, source = cloudpickle.loads(data)
    restore_source((fn, *args), *source)
    return fn, args


def restore_source(roots: tuple[Any, ...], files: dict[tuple[str, int], str],
                   lines: dict[str, list[str]]) -> None:
    """Give the functions back their file names and lines, so that a traceback shows them."""
    for name, text in lines.items():
        if text:  # (size, mtime None: never reloaded from disk, lines, name)
            linecache.cache[name] = (sum(map(len, text)), None, text, name)
    for f in functions_used(*roots):
        code = f.__code__
        name = files.get((code.co_name, code.co_firstlineno))
        if name and code.co_filename != name:
            f.__code__ = _renamed(code, name)


def functions_used(*roots: Any) -> list[Any]:
    """The plain Python functions among `roots` (a bound method: its function), and those
    they reach through their globals and closures."""
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
