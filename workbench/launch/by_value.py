"""A function sent to the ranks by value, the launcher's side: cloudpickled with its source,
its size checked first and what cannot be pickled named; the rank's side is rank/by_value.py.
See docs/ARCHITECTURE.md, "Your own code on real ranks".
"""

from __future__ import annotations

import inspect
import linecache
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from workbench.caller import warn_caller
from workbench.config import ConfigError
from workbench.rank.by_value import filled, functions_used, names_used


def pickle_function(fn: Callable[..., Any], args: tuple[Any, ...]) -> bytes:
    """`(fn, args)` pickled by value, or a ConfigError naming what cannot be pickled."""
    # Functions of your own modules (a test file, a script folder) may not be importable on
    # the ranks: send their code along, like a notebook's (fn itself or passed as argument).
    callables = [fn, *args, *(v for a in args if isinstance(a, dict) for v in a.values())]
    names = {getattr(f, "__module__", None) for f in callables if callable(f)}
    modules = [sys.modules[n] for n in names if n in sys.modules and _by_value(sys.modules[n])]
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps((fn, args, source_of(fn, *args)))
    except Exception as exc:  # noqa: BLE001 - pickling fails with many exception types
        raise ConfigError(f"cannot send {getattr(fn, '__name__', 'the function')} to the ranks: "
                          f"{_culprit(fn, args)} cannot be pickled ({type(exc).__name__}: "
                          f"{exc}); create it inside the function instead") from None
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


WARN_PAYLOAD_MB = 32.0  # MiB of arrays sent with a function above which launch() says so


def check_payload(fn: Callable[..., Any], args: tuple[Any, ...], max_mb: float) -> float:
    """MiB of arrays that `fn` and `args` send to the ranks, measured before pickling
    (which takes seconds): a warning above WARN_PAYLOAD_MB, a ConfigError above `max_mb`."""
    sizes = [(label, _nbytes(value) / 2**20) for label, value in _sent(fn, args)]
    total = sum(mb for _, mb in sizes)
    if total <= WARN_PAYLOAD_MB:
        return total
    label, mb = max(sizes, key=lambda item: item[1])
    what = (f"{getattr(fn, '__name__', 'the function')} sends {total:,.0f} MiB to the ranks "
            f"({label}: {mb:,.0f} MiB)")
    if total > max_mb:
        raise ConfigError(f"{what}, more than max_payload_mb={max_mb:g}: load or create it "
                          "inside the function (each rank reads it itself), or pass a larger "
                          "max_payload_mb")
    warn_caller(f"{what}: pickling it into the run folder takes a few seconds")
    return total


def _sent(fn: Any, args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """(label, value) of the arguments, closure variables and globals pickling `fn` sends."""
    out: list[tuple[str, Any]] = [(f"argument {i + 1}", a) for i, a in enumerate(args)]
    for f in functions_used(fn):
        cells = f.__closure__ or ()
        out += [(f"the variable '{n}' it uses", c.cell_contents)
                for n, c in zip(f.__code__.co_freevars, cells, strict=False) if filled(c)]
        out += [(f"the global '{n}'", f.__globals__[n]) for n in names_used(f.__code__)
                if n in f.__globals__ and not inspect.ismodule(f.__globals__[n])]
    return out


def _nbytes(value: Any, depth: int = 0) -> int:
    """Bytes of the arrays in `value` (a tensor, array, bytes, or a list/dict of them)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int) and not isinstance(value, type):
        return nbytes
    if depth < 3 and isinstance(value, (list, tuple, set, dict)):
        items = value.values() if isinstance(value, dict) else value
        return sum(_nbytes(v, depth + 1) for v in list(items)[:10_000])
    return 0


def source_of(*roots: Any) -> tuple[dict, dict]:
    """({(name, first line): file}, {file: lines}) of the functions `roots` use, which the
    rank puts back: cloudpickle renames their files "<dynamic-code>", and a notebook cell
    exists only in this kernel, so a rank's traceback could show neither."""
    files: dict[tuple[str, int], str] = {(f.__code__.co_name, f.__code__.co_firstlineno):
                                         f.__code__.co_filename for f in functions_used(*roots)}
    return files, {name: linecache.getlines(name) for name in set(files.values())}


def _by_value(module: Any) -> bool:
    """True for a module of your own; False for the workbench, installed packages and
    __main__ (whose functions cloudpickle already sends by value)."""
    file = getattr(module, "__file__", None)
    if module.__name__ == "__main__" or module.__name__.split(".")[0] == "workbench" or not file:
        return False
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    return not any(str(Path(file).resolve()).startswith(p) for p in installed)


def _culprit(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """Name the first argument, closure variable or global sent with `fn` that does not pickle."""
    for label, value in _sent(fn, args):
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001
            return f"{label} (a {type(value).__module__}.{type(value).__qualname__})"
    return "something it refers to"
