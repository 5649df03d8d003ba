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
as every other job (the ranks run `workbench.rank.wrapper`). When a pool of warm ranks of
that engine and size is idle (`workbench.ranks(np=2, engine=...)`, see pool.py), a function
runs on it instead: the same kind of job, in milliseconds instead of seconds.

A function is sent to the ranks *by value* with cloudpickle (by_value.py): one defined in a
notebook cell works, with the globals it uses. What cannot be pickled (an open file, a lock,
a live process group) is refused here, before any process starts, with one line naming it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.config import ConfigError
from workbench.launch.by_value import check_payload, pickle_function
from workbench.launch.job import RANK_WRAPPER, Job
from workbench.launch.starting import start_module
from workbench.rank.by_value import PAYLOAD

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
        ran = {"script": str(path)}
    elif callable(fn_or_path):
        rank_args, label = [], getattr(fn_or_path, "__name__", "function")
        ran = {"function": qualified_name(fn_or_path)}
        check_payload(fn_or_path, args, max_payload_mb)
        files = {PAYLOAD: pickle_function(fn_or_path, args)}
    else:
        raise ConfigError(f"launch() runs a function or a script path, not a "
                          f"{type(fn_or_path).__name__}")
    fields.setdefault("name", _safe_name(label))
    fields.setdefault("stall_timeout", STALL_TIMEOUT_S)
    pool = warm_pool(engine, np, files, fields)
    if pool is not None:  # a pool of warm ranks of this engine and size waits: use it
        job = pool.run_pickled(files[PAYLOAD], fields["name"], ran)
    else:  # what ran is recorded (the config's `extra`): its training fields are not it
        fields["extra"] = {**fields.get("extra", {}), **ran}
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
    from workbench.launch.open_pools import running_pool

    pool = running_pool(engine, np, fields.get("runs_dir", "runs"))
    return pool if pool is not None and pool.fields["threads_per_rank"] == 1 else None


def qualified_name(fn: Callable[..., Any]) -> str:
    """`module.qualname` of a function, as a run's record names what it ran."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', 'function')}"


def _safe_name(label: str) -> str:
    """A run-folder-friendly name: `<lambda>` becomes `lambda`; at most 40 characters, as
    the `name` field allows (a long function name is cut)."""
    return (re.sub(r"[^A-Za-z0-9_.-]+", "", label) or "function")[:40]


def in_kernel() -> bool:
    """True inside a Jupyter kernel, where output can be shown under the cell."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None
