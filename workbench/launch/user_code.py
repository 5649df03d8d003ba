"""Run your own function or script on real ranks: `workbench.launch(fn_or_path, *args, np=2)`.

    job = workbench.launch(hello, "hi", np=2)       # returns at once, like start()
    job.wait(); job.results()                       # each rank's return value
    job = workbench.launch("train.py", "--epochs", "3", np=2, engine="torch")

The same `Job`, records, Stop and failure reports as `horovodrun -np 2 python train.py`; a
function travels by value. See docs/ARCHITECTURE.md, "Your own code on real ranks".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.config import ConfigError
from workbench.launch.by_value import check_payload, pickle_function
from workbench.launch.job import Job
from workbench.launch.launchers import RANK_WRAPPER
from workbench.launch.starting import qualified_name, safe_name, start_module
from workbench.launch.waiting import in_kernel
from workbench.rank.by_value import PAYLOAD

#: Seconds without a new metrics line before a job is stalled: your code may not report().
STALL_TIMEOUT_S = 600.0


def launch(fn_or_path: Callable[..., Any] | str | os.PathLike, *args: Any, np: int = 2,
           engine: str = "horovod", echo: bool = True, max_payload_mb: float = 256.0,
           **fields: Any) -> Job:
    """Run `fn(*args)`, or the script at a path with `args` as its argv, on `np` ranks;
    returns the running `Job` at once. `engine` is "horovod", "torch", "serial" (one
    process) or "fork" (a function's ranks forked from one process that imported torch
    once: one host, CPU only, no group joined for you); `fields` are `JobConfig`'s. In a
    notebook, `echo` shows the ranks' output under the cell, each line prefixed with its rank.
    ConfigError before anything starts: bad settings, an `fn` that cannot be pickled, or
    arguments and variables holding over `max_payload_mb` MiB of arrays (`check_payload`)."""
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
    fields.setdefault("name", safe_name(label))
    fields.setdefault("stall_timeout", STALL_TIMEOUT_S)
    fields["extra"] = {**ran, **fields.get("extra", {})}  # what ran (a lab names its own)
    warm = ("function", files[PAYLOAD]) if PAYLOAD in files else None  # a pool may run it
    job = start_module(engine, np, RANK_WRAPPER, rank_args, files=files, warm=warm, **fields)
    if echo and in_kernel():
        from workbench.ui.rank_output import RankOutput

        RankOutput(job).show()
    return job
