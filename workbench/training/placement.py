"""Where a rank runs: its device, and on the CPU its threads bound to its share of the
job's cores (launch/cores.py), like `mpirun --bind-to core`. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from workbench.config import JobConfig
from workbench.hosts.cpu import cpu_budget


def pick_device(device: str, local_rank: int) -> torch.device:
    """The device of this rank: the CPU, or GPU number `local_rank` of its host.

    The launcher has checked that a host runs no more ranks than it has GPUs (NCCL needs
    one GPU per rank). For "cpu" torch.cuda is never called: a CPU rank must not create a
    CUDA context (its launcher also hid the GPUs with CUDA_VISIBLE_DEVICES="").
    """
    if device == "auto":     # a rank module started by hand, without the launcher's check
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def pin_cpu(cfg: JobConfig, local_rank: int) -> None:
    """Give this rank its intra-op threads and, with ``cpu_bind="core"``, its own cores.

    Rank r of a host takes ``threads`` cores starting at r × threads, wrapping around when
    ranks outnumber cores (like ``mpirun --bind-to core``). Why bind: every synchronous step
    waits for the slowest rank, and a rank the kernel moves between cores loses its caches,
    or, on Linux, where each process session is scheduled as one group ("autogroup") and
    `horovodrun` starts every rank in its own session, can wait tens of milliseconds for
    its group's turn on the new core. Every thread of the rank is bound, the engine's
    communication threads started by step 1 included: a group whose threads are spread
    over several cores gets only a sliver of each core's share and can starve for seconds.
    """
    threads = cfg.resolved_threads()
    if cfg.cpu_bind == "core" and cfg.world_size > 1 and hasattr(os, "sched_setaffinity"):
        cores = cpu_budget().cores  # the job's own cores, else the host's
        first = local_rank * threads
        mine = {cores[(first + i) % len(cores)] for i in range(threads)}
        for tid in _thread_ids():
            try:
                os.sched_setaffinity(tid, mine)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
    torch.set_num_threads(threads)


def _thread_ids() -> list[int]:
    """Linux ids of this process's threads (0, the calling thread, where /proc is absent)."""
    tasks = Path("/proc/self/task")
    return [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
