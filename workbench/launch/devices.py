"""Which device ("cpu", "cuda" or "auto") a job's ranks compute on, checked in one line
before anything is launched. `gpu_count()` is the one place that counts GPUs (tests replace
it). What is checked, and why: docs/ARCHITECTURE.md, "Supervision" (Devices).
"""

from __future__ import annotations

from dataclasses import replace

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES


def gpu_count() -> int:
    """The NVIDIA GPUs this process may use, counted through NVML (no CUDA context)."""
    import torch

    return torch.cuda.device_count() if torch.version.cuda else 0


def ranks_per_host(cfg: JobConfig) -> int:
    """The most ranks that any one host runs (hosts filled in order, as horovodrun does)."""
    from workbench.launch.torch_hosts import allocate  # (not at import: it is a program too)

    if cfg.hosts is None:
        return cfg.world_size
    return max((n for _, n in allocate(cfg.hosts, cfg.world_size)), default=0)


def cuda_problem(cfg: JobConfig) -> tuple[str, str] | None:
    """Why `cfg` cannot run on GPUs here and how to fix it (one line each), else None."""
    engine = ENGINES[cfg.engine]
    if cfg.launcher == "slurm":  # this host's GPUs say nothing about the compute nodes'
        return ("the Slurm job requests no GPUs (and the nodes' GPUs cannot be counted from "
                "here)", "use --device cpu with --launcher slurm")
    if engine.cpu_only:
        return engine.cpu_only
    gpus = gpu_count()
    if gpus == 0:
        return ("no CUDA GPU is visible here (a CPU build of PyTorch, no NVIDIA driver, or "
                "CUDA_VISIBLE_DEVICES empty)", "use --device cpu")
    per_host = ranks_per_host(cfg)
    if per_host > gpus:
        return (f"{per_host} ranks on one host but only {gpus} GPU(s) visible, and NCCL needs"
                " a GPU of its own for every rank",
                f"use --np {gpus} or fewer per host, or --device cpu")
    return engine.gpu_problem()


def resolve_device(cfg: JobConfig) -> tuple[JobConfig, str | None]:
    """`cfg` with `device` "cpu" or "cuda", and a note when "auto" chose the CPU;
    ConfigError when "cuda" cannot work here."""
    if cfg.device == "cpu":
        return cfg, None
    problem = cuda_problem(cfg)
    if cfg.device == "cuda" and problem:
        raise ConfigError(f"invalid --device 'cuda': {problem[0]}: {problem[1]}")
    if problem is None:
        return replace(cfg, device="cuda"), None
    return replace(cfg, device="cpu"), f"--device auto runs on the CPU: {problem[0]}"
