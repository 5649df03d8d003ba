"""Run your own function or script on real ranks: `workbench.launch(fn_or_path, *args, np=2)`.

    import workbench

    def hello(greeting):
        print(greeting, "from rank", workbench.rank(), "of", workbench.size())
        return workbench.rank() * 10

    job = workbench.launch(hello, "hi", np=2)       # returns at once, like start()
    job.wait()
    job.results()                                   # [0, 10]: each rank's return value

    job = workbench.launch("train.py", "--epochs", "3", np=2, engine="torch")

It is `horovodrun -np 2 python train.py`, or Horovod's `horovod.run(fn, np=2)`, going
through the workbench's launcher: the same `Job`, records, Stop, failure reports and engines
as every other job (the ranks run `workbench.jobs.rank_wrapper`). When a pool of warm ranks of
that engine and size is idle (`workbench.ranks(np=2, engine=...)`, see pool.py), a function
runs on it instead: the same kind of job, in milliseconds instead of seconds.

A function is sent to the ranks *by value* with cloudpickle: one defined in a notebook cell
works, with the globals it uses. What cannot be pickled (an open file, a lock, a live
process group) is refused here, before any process starts, with one line naming it.
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
import sys
import sysconfig
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from workbench.config import ConfigError
from workbench.jobs.job import RANK_WRAPPER, Job
from workbench.jobs.rank_wrapper import PAYLOAD, filled, functions_used, names_used
from workbench.jobs.starting import start_module

#: Your code may compute for long without calling report(): a job is called stalled only
#: after this many seconds without a new metrics line (pass stall_timeout=... to change it).
STALL_TIMEOUT_S = 600.0


def launch(fn_or_path: Callable[..., Any] | str | os.PathLike, *args: Any, np: int = 2,
           engine: str = "horovod", echo: bool = True, max_payload_mb: float = 256.0,
           **fields: Any) -> Job:
    """Run `fn(*args)`, or the script at a path with `args` as its argv, on `np` ranks.

    Returns the running `Job` at once. `engine` is "horovod", "torch", "serial" (one
    process) or "fork" (a function's ranks forked from one process that imported torch
    once: quick to start, one host and CPU only, no launcher to init a group for you);
    `fields` are any other job settings (`runs_dir`, `threads_per_rank`, `hosts`,
    `stall_timeout`, `name`, ...). In a notebook, `echo` shows what the ranks print under
    the cell, each line prefixed with its rank (capped; the full output is in the rank's log).
    Raises ConfigError before starting anything when the settings are bad or `fn` cannot be
    pickled, or when its arguments and the variables it uses hold more than `max_payload_mb`
    MiB of arrays (every rank reads them from the run folder; see `check_payload`).
    """
    if isinstance(fn_or_path, (str, os.PathLike)):
        path = Path(fn_or_path).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"no script at {fn_or_path}: give the path of a Python file, "
                              "or a function")
        if engine == "fork":
            raise ConfigError("launch() runs a function on the fork engine, not a script: pass "
                              "a function, or use engine='torch' or 'horovod' for a script")
        rank_args, files, label = ["--script", str(path), *map(str, args)], {}, path.stem
    elif callable(fn_or_path):
        rank_args, label = [], getattr(fn_or_path, "__name__", "function")
        check_payload(fn_or_path, args, max_payload_mb)
        files = {PAYLOAD: pickle_function(fn_or_path, args)}
    else:
        raise ConfigError(f"launch() runs a function or a script path, not a "
                          f"{type(fn_or_path).__name__}")
    fields.setdefault("name", _safe_name(label))
    fields.setdefault("stall_timeout", STALL_TIMEOUT_S)
    pool = warm_pool(engine, np, files, fields)
    if pool is not None:  # a pool of warm ranks of this engine and size waits: use it
        job = pool.run_pickled(files[PAYLOAD], fields["name"])
    else:
        job = start_module(engine, np, RANK_WRAPPER, rank_args, files=files, **fields)
    if echo and in_kernel():
        from workbench.ui.rank_output import RankOutput

        RankOutput(job).show()
    return job


def warm_pool(engine: str, np: int, files: dict[str, bytes], fields: dict[str, Any]):
    """The idle pool (`workbench.ranks`) that can run this launch, or None: a function (not
    a script), no settings a pool does not share (hosts, threads, ...)."""
    if PAYLOAD not in files or set(fields) - {"name", "stall_timeout", "runs_dir"}:
        return None
    from workbench.jobs.open_pools import running_pool

    pool = running_pool(engine, np, fields.get("runs_dir", "runs"))
    return pool if pool is not None and pool.fields["threads_per_rank"] == 1 else None


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
        name = getattr(fn, "__name__", "the function")
        raise ConfigError(f"cannot send {name} to the ranks: {_culprit(fn, args)} cannot be "
                          f"pickled ({type(exc).__name__}: {exc}); create it inside the "
                          "function instead") from None
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


#: Above this many MiB of arrays sent with a function, launch() says so before pickling.
WARN_PAYLOAD_MB = 32.0


def check_payload(fn: Callable[..., Any], args: tuple[Any, ...], max_mb: float) -> float:
    """MiB of arrays (tensors, NumPy arrays, bytes) that `fn` and `args` send to the ranks.

    Measured before pickling, from the objects' own sizes: pickling and writing 400 MiB
    take seconds, so launch() warns above WARN_PAYLOAD_MB, naming the largest, and refuses
    above `max_mb` in one line at once.
    """
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
    warnings.warn(f"{what}: pickling it into the run folder takes a few seconds",
                  stacklevel=3)
    return total


def _sent(fn: Any, args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """(label, value) of what pickling `fn` with `args` sends: arguments, closure, globals."""
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
    if depth < 3 and isinstance(value, (list, tuple, set)):
        return sum(_nbytes(v, depth + 1) for v in list(value)[:10_000])
    if depth < 3 and isinstance(value, dict):
        return sum(_nbytes(v, depth + 1) for v in list(value.values())[:10_000])
    return 0


def source_of(*roots: Any) -> tuple[dict, dict]:
    """Where the functions among `roots` (a function and its arguments) and the functions
    they use were written, and those files' lines.

    cloudpickle renames the file of every function it sends to "<dynamic-code>", and a
    notebook cell exists only in this kernel; without this, a traceback on a rank could show
    neither the file nor the line. Returns ({(name, first line): file}, {file: lines}); the
    rank puts them back (rank_wrapper.restore_source).
    """
    files: dict[tuple[str, int], str] = {}
    for f in functions_used(*roots):
        files[(f.__code__.co_name, f.__code__.co_firstlineno)] = f.__code__.co_filename
    return files, {name: linecache.getlines(name) for name in set(files.values())}


def _by_value(module: Any) -> bool:
    """True for a module of your own (a notebook, a test, a script folder); False for the
    workbench and installed packages, which every rank imports by name."""
    if module.__name__ == "__main__":
        return False  # cloudpickle already sends __main__'s functions by value
    if module.__name__.split(".")[0] == "workbench":
        return False
    file = getattr(module, "__file__", None)
    if not file:
        return False
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    return not any(str(Path(file).resolve()).startswith(p) for p in installed)


def _culprit(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """Name the first argument, closure variable or global of `fn` that does not pickle."""
    candidates: list[tuple[str, Any]] = [(f"argument {i + 1}", a) for i, a in enumerate(args)]
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = getattr(fn, "__closure__", None) or ()
        candidates += [(f"the variable '{n}' it uses", c.cell_contents)
                       for n, c in zip(code.co_freevars, cells, strict=False)
                       if filled(c)]
        globs = getattr(fn, "__globals__", {})
        candidates += [(f"the global '{n}'", globs[n]) for n in names_used(code) if n in globs]
    for label, value in candidates:
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001
            return f"{label} (a {type(value).__module__}.{type(value).__qualname__})"
    return "something it refers to"


def _safe_name(label: str) -> str:
    """A run-folder-friendly name: `<lambda>` becomes `lambda`; at most 40 characters, as
    the `name` field allows (a long function name is cut)."""
    return (re.sub(r"[^A-Za-z0-9_.-]+", "", label) or "function")[:40]


def in_kernel() -> bool:
    """True inside a Jupyter kernel, where output can be shown under the cell."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None
