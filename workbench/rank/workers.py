"""What a lab's worker runs inside its rank (launch/workers.py starts the workers; see
docs/ARCHITECTURE.md)."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.rank import api
from workbench.rank.protocol import ENV_RUN_DIR


def lab_worker(fn: Callable[..., Any], distributed: bool, timeout_s: float, *args: Any) -> Any:
    """What each worker runs: `fn(rank, world_size, *args)`, in a gloo group if `distributed`."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # one core per process: the classroom machine has few cores
    rank, size = api.rank(), api.size()
    if not distributed:
        return fn(rank, size, *args)
    store = dist.FileStore(str(run_folder() / "rendezvous"), size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    value = fn(rank, size, *args)
    # Only on success: a failed worker keeps its connections open until its exit record is
    # written, so the others' "connection closed" errors come later and are not taken for
    # the cause.
    dist.destroy_process_group()
    return value


def run_folder() -> Path:
    """Inside a worker: the run folder, for files the workers share (Hogwild!'s model)."""
    return Path(os.environ[ENV_RUN_DIR])
