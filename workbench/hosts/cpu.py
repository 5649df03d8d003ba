"""How many CPU cores this process may really keep busy, and what decided it.

On a laptop the answer is every core. On a shared server the usual ways of asking lie:

- `os.cpu_count()` counts the host's cores, all 64 of them;
- `os.sched_getaffinity(0)` lists the cores this process may *run on* (taskset, a
  container's cpuset), often all 64 again;
- but a cgroup CPU **quota** limits how much *time* the process gets on them. The cgroup v2
  file `cpu.max` holds "QUOTA PERIOD" in microseconds: "200000 100000" is 2 CPUs' worth of
  time per period, however many cores it is spread over (cgroup v1 splits it into
  `cpu.cfs_quota_us` and `cpu.cfs_period_us`). The Littlest JupyterHub's `limits.cpu 2`
  and a Kubernetes pod's `resources.limits.cpu: 2` both become such a quota;
- JupyterHub also exports the limit it asked for as `CPU_LIMIT` (in CPUs, maybe fractional).

A job that starts 32 threads per rank into a 2-CPU quota runs 16 threads per CPU: each
runs a few milliseconds, is throttled until the next period, and speedup curves come out
flat. So threads per rank, the oversubscription warning, `workbench doctor`, the
simulator's core count and the calibration all ask `cpu_budget()`, the smallest of the
three limits, rounded down to whole cores (a 1.5-CPU quota keeps one thread busy, not two).

The cgroup file system is read from `/sys/fs/cgroup`, or from the folder named by
`WORKBENCH_CGROUP_ROOT` (tests point it at a folder with a hand-written `cpu.max`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

#: Environment variable naming another root for the cgroup file system.
ENV_CGROUP_ROOT = "WORKBENCH_CGROUP_ROOT"
#: What JupyterHub exports: the CPU limit it gave this server, in CPUs.
ENV_CPU_LIMIT = "CPU_LIMIT"

SOURCE_AFFINITY = "affinity"
SOURCE_V2 = "cgroup v2 cpu.max"
SOURCE_V1 = "cgroup v1 cpu.cfs_quota_us"
SOURCE_CPU_LIMIT = "CPU_LIMIT"


@dataclass(frozen=True)
class CpuBudget:
    """The cores this process may use.

    `usable` is whole cores (at least 1); `cores` the core numbers it may run on; `source`
    which limit decided `usable`; `limits` every limit found, in CPUs, by source.
    """

    usable: int
    cores: list[int]
    source: str
    limits: dict[str, float] = field(default_factory=dict)

    @property
    def quota(self) -> float | None:
        """The tightest time quota in CPUs (cgroup or CPU_LIMIT), or None when there is none."""
        quotas = [v for k, v in self.limits.items() if k != SOURCE_AFFINITY]
        return min(quotas) if quotas else None


def cpu_budget() -> CpuBudget:
    """The cores this process may really keep busy: affinity capped by every CPU quota."""
    cores = affinity()
    limits: dict[str, float] = {SOURCE_AFFINITY: float(len(cores))}
    for source, value in cgroup_quotas().items():
        limits[source] = value
    cpu_limit = _cpu_limit_env()
    if cpu_limit is not None:
        limits[SOURCE_CPU_LIMIT] = cpu_limit
    source = min(limits, key=lambda k: (limits[k], k != SOURCE_AFFINITY))
    usable = max(1, min(len(cores), math.floor(limits[source] + 1e-9)))
    return CpuBudget(usable=usable, cores=cores, source=source, limits=limits)


def affinity() -> list[int]:
    """The cores this process may run on (every core where the OS cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cgroup_root() -> Path:
    """Where the cgroup file system is mounted (`WORKBENCH_CGROUP_ROOT` moves it)."""
    return Path(os.environ.get(ENV_CGROUP_ROOT) or "/sys/fs/cgroup")


def cgroup_quotas() -> dict[str, float]:
    """{source: CPUs} for each cgroup quota that limits this process (v2 and/or v1)."""
    root, found = cgroup_root(), {}
    memberships = _memberships()
    v2 = _tightest(_ancestors(root, memberships.get("", "/")), _read_cpu_max)
    if v2 is not None:
        found[SOURCE_V2] = v2
    for controllers, path in memberships.items():
        if "cpu" in controllers.split(","):
            mount = root / controllers if (root / controllers).is_dir() else root / "cpu"
            v1 = _tightest(_ancestors(mount, path), _read_cfs_quota)
            if v1 is not None:
                found[SOURCE_V1] = v1
    return found


def _memberships() -> dict[str, str]:
    """{controllers: cgroup path} from /proc/self/cgroup ("" is the cgroup v2 hierarchy)."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def _ancestors(mount: Path, path: str) -> list[Path]:
    """The cgroup folder of `path` under `mount` and each parent up to the mount itself.

    A quota on a parent limits every child too, so the tightest of them counts. Inside a
    container the mount is often the container's own cgroup, and `path` does not exist
    under it: then only the mount itself is read.
    """
    folders = [mount]
    here = mount
    for part in [p for p in path.split("/") if p]:
        here = here / part
        folders.append(here)
    return [f for f in folders if f.is_dir()]


def _tightest(folders: list[Path], read) -> float | None:
    values = [v for v in (read(f) for f in folders) if v is not None]
    return min(values) if values else None


def _read_cpu_max(folder: Path) -> float | None:
    """CPUs allowed by cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max PERIOD": no limit)."""
    try:
        quota, *period = (folder / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period[0] if period else 100_000)


def _read_cfs_quota(folder: Path) -> float | None:
    """CPUs allowed by cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: no limit)."""
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def _cpu_limit_env() -> float | None:
    """JupyterHub's `CPU_LIMIT` in CPUs; None when unset, empty, zero or not a number."""
    try:
        value = float(os.environ.get(ENV_CPU_LIMIT, ""))
    except ValueError:
        return None
    return value if value > 0 and math.isfinite(value) else None
