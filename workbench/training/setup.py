"""What a rank builds before it trains: its device and cores, the data, the model (the same
on every rank, from the job's seed), the clock (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from workbench.config import JobConfig
from workbench.data import Dataset, load_dataset
from workbench.hosts.cpu import cpu_budget
from workbench.models import build_model
from workbench.training.sharding import holdout_split
from workbench.training.timing import CudaClock, WallClock


def pick_device(device: str, local_rank: int) -> torch.device:
    """The CPU, or GPU number `local_rank` of its host (the launcher checked there is one per
    rank). A CPU rank never calls torch.cuda: it must create no CUDA context."""
    if device == "auto":     # a rank module started by hand, without the launcher's check
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def pin_cpu(cfg: JobConfig, local_rank: int) -> None:
    """Give this rank its intra-op threads and, with ``cpu_bind="core"``, its own cores: rank
    r of a host takes ``threads`` of the job's cores from r × threads on, wrapping around,
    like ``mpirun --bind-to core``. Every thread is bound (why: docs/ARCHITECTURE.md)."""
    threads = cfg.resolved_threads()
    if cfg.cpu_bind == "core" and cfg.world_size > 1 and hasattr(os, "sched_setaffinity"):
        cores = cpu_budget().cores  # the job's own cores, else the host's
        mine = {cores[(local_rank * threads + i) % len(cores)] for i in range(threads)}
        tasks = "/proc/self/task"  # without /proc: the calling thread (0) alone
        for tid in os.listdir(tasks) if os.path.isdir(tasks) else ["0"]:
            with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
                os.sched_setaffinity(int(tid), mine)
    torch.set_num_threads(threads)


@dataclass
class ModelAndData:
    """`data` holds every sample once; `train_idx` and `val_idx` say which are trained on
    (sharding.py) and which held out, so splitting copies no data."""

    data: Dataset
    model: nn.Module
    device: torch.device
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    first_epoch: int = 0  # later than 0 when resuming from a checkpoint
    clock: WallClock | CudaClock = field(default_factory=WallClock)

    @property
    def module(self) -> nn.Module:
        """The model itself, unwrapped from DistributedDataParallel where it is wrapped."""
        return getattr(self.model, "module", self.model)


class Batches:
    """This rank's batch (sample indices -> inputs, labels) on the training device: plain
    indexing, or for a dataset too large for the GPU a page-locked buffer copied there."""

    #: A dataset under this share of the GPU's memory is copied there once: no batch crosses PCIe.
    on_gpu_max_share = 0.25

    def __init__(self, data: Dataset, device: torch.device) -> None:
        self.device, self.x, self.y = device, data.x, data.y
        if device.type == "cuda":
            size, gpu = self.x.nbytes + self.y.nbytes, torch.cuda.get_device_properties(device)
            if size <= self.on_gpu_max_share * gpu.total_memory:
                self.x, self.y = self.x.to(device), self.y.to(device)
        self.here = self.x.device == device  # (asked once: a step's device objects cost)

    def __call__(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples `idx`, which lie where the dataset does (loop.py puts them there)."""
        if self.here:                        # the CPU, or a dataset that lives on the GPU
            return self.x[idx], self.y[idx]
        x = torch.empty((len(idx), *self.x.shape[1:]), dtype=self.x.dtype, pin_memory=True)
        y = torch.empty(len(idx), dtype=self.y.dtype, pin_memory=True)
        torch.index_select(self.x, 0, idx, out=x)
        torch.index_select(self.y, 0, idx, out=y)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


def build(cfg: JobConfig, device: torch.device) -> ModelAndData:
    """Load the data and build the model with the job's seed, identically on every rank."""
    dtype = getattr(torch, cfg.dtype)
    # The ranks of a host share the prepared dataset; per user and host, as a shared runs
    # folder serves several (no one's cache is another's to write, or to fill).
    cache_dir = (Path(cfg.runs_dir).expanduser().resolve() / f".cache-uid{os.getuid()}"
                 / socket.gethostname())
    data = load_dataset(cfg.dataset, samples=cfg.samples, features=cfg.features,
                        seed=cfg.seed, dtype=dtype, cache_dir=cache_dir)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, tuple(data.x.shape[1:]), data.n_classes, cfg.width)
    train_idx, val_idx = holdout_split(len(data), cfg.seed, cfg.val_fraction)
    return ModelAndData(data, model.to(device=device, dtype=dtype), device, train_idx, val_idx,
                        clock=CudaClock() if device.type == "cuda" else WallClock())
