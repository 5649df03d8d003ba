"""What `workbench doctor` concludes from the probes: one `Check` per line of its report."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from workbench.doctor.probes import HOROVOD_FIX, SHM_MIN_BYTES
from workbench.torch_versions import NEEDS


@dataclass
class Check:
    """One line of the report: what was checked, how it went, and how to fix it."""

    name: str
    status: str          # "ok", "warn" (works, with a limitation) or "fail"
    detail: str
    fix: str = ""
    required: bool = False   # needed for Horovod jobs: a failure makes the exit code 1


def _names(flags: dict[str, bool]) -> str:
    """{"gloo": True, "mpi": False} -> "gloo" (the ones that are built), or "none"."""
    return ", ".join(name for name, on in flags.items() if on) or "none"


def torch_check(t: dict[str, Any]) -> Check:
    if not t.get("installed"):
        return Check("PyTorch", "fail", f"not importable ({t.get('error')})",
                     "run the set-up: make setup", required=True)
    detail = (f"{t['version']}; torch.distributed back-ends: {_names(t['backends'])}; "
              f"CUDA: {'available' if t['cuda_available'] else 'not available'}")
    if not t["backends"]["gloo"]:
        return Check("PyTorch", "warn", detail, "this PyTorch has no gloo back-end: "
                     "--engine torch cannot run on CPUs; install torch from pypi.org")
    supported = t.get("supported")
    outside = outside_range(t["version"], supported)
    if outside:
        return Check("PyTorch", "warn", f"{detail}; {outside}",
                     f"install a torch in torch{supported} (on GPUs its CUDA build for your "
                     "driver), then `make horovod` to rebuild Horovod against it")
    return Check("PyTorch", "ok", detail + (f" (supported: torch{supported})" if supported
                                            else ""))


def outside_range(version: str, supported: str | None) -> str | None:
    """What a torch outside the supported range means, naming what will not work
    (workbench/torch_versions.py); None inside it, or when the range is unknown."""
    release = Version(Version(version).base_version)      # 2.11.0+cu130 -> 2.11.0
    if not supported or release in SpecifierSet(supported):
        return None
    missing = [f"{part} (needs {oldest}: {what})" for part, (oldest, what) in NEEDS.items()
               if release < Version(oldest)]
    if missing:
        return (f"older than the workbench supports (torch{supported}); will not work: "
                + "; ".join(missing))
    return f"outside the range the workbench is tested on (torch{supported}): engines may fail"


def horovod_checks(h: dict[str, Any]) -> list[Check]:
    if not h.get("installed"):
        error = h.get("error", "")
        fix = HOROVOD_FIX
        if "undefined symbol" in error:
            fix = ("Horovod was built against another PyTorch: delete .cache/wheels/ and "
                   "rebuild with `make horovod`")
        elif h.get("version") is None and "No module named 'horovod'" in error:
            fix = "Horovod is not installed: " + HOROVOD_FIX
        return [Check("Horovod", "fail", f"not usable: {error}", fix, required=True)]
    detail = (f"{h['version']}; frameworks: {_names(h['frameworks'])}; controllers: "
              f"{_names(h['controllers'])}; tensor operations: {_names(h['tensor_operations'])}")
    checks = [Check("Horovod", "ok", detail)]
    controllers = h["controllers"]
    if controllers["gloo"]:
        checks.append(Check("Horovod controller", "ok", "gloo built: `horovodrun --gloo` "
                            "runs jobs without MPI"))
    elif controllers["mpi"] and shutil.which("mpirun"):
        checks.append(Check("Horovod controller", "warn", "MPI only (no gloo): jobs need mpirun",
                            "rebuild with gloo: make horovod"))
    else:
        checks.append(Check("Horovod controller", "fail",
                            "built without gloo, and no MPI to fall back on",
                            "rebuild with gloo: " + HOROVOD_FIX, required=True))
    if h.get("horovodrun"):
        checks.append(Check("horovodrun", "ok", h["horovodrun"]))
    else:
        checks.append(Check("horovodrun", "fail", "the launcher is not on PATH",
                            "add .venv/bin to PATH, or reinstall with `make horovod`",
                            required=True))
    return checks


def gpu_horovod_check(t: dict[str, Any], h: dict[str, Any]) -> Check | None:
    """A warning when GPUs are there but Horovod cannot use them (built without NCCL).

    Such a Horovod copies GPU gradients to the host and averages them with gloo, so
    `--device cuda` refuses it; the build turns NCCL on whenever torch is a CUDA build.
    """
    if not (t.get("cuda_available") and h.get("installed")):
        return None
    if h["tensor_operations"].get("nccl"):
        return Check("Horovod on GPUs", "ok", "built with NCCL: GPU gradients are averaged "
                                              "on the GPUs")
    return Check("Horovod on GPUs", "warn",
                 f"CUDA is available (torch {t.get('cuda_version')}) but this Horovod was built"
                 " without NCCL: --engine horovod --device cuda is refused",
                 "rebuild it with NCCL: `make horovod` (needs nvcc of the same CUDA major "
                 "version); meanwhile --engine torch uses NCCL")


def network_check(net: dict[str, Any]) -> Check:
    if net["addresses"]:
        return Check("Hostname", "ok", f"{net['hostname']} resolves to "
                                       f"{', '.join(net['addresses'])}")
    return Check("Hostname", "fail",
                 f"{net['hostname']} does not resolve ({net.get('error')}): gloo binds each "
                 "rank to its hostname's address, so Horovod's ranks crash",
                 f"add the line `127.0.1.1 {net['hostname']}` to /etc/hosts", required=True)


def machine_checks(cpu: dict[str, Any], gpus: dict[str, Any],
                    shm: dict[str, Any]) -> list[Check]:
    cores = (f"{cpu['usable']} usable ({cpu['logical']} logical, "
             f"{cpu['physical'] or '?'} physical)")
    checks = [Check("CPU cores", "ok" if (cpu["usable"] or 1) >= 2 else "warn", cores,
                    "" if (cpu["usable"] or 1) >= 2 else
                    "one core: ranks will take turns, so no speedup can be measured"),
              quota_check(cpu), shm_check(shm)]
    if gpus["count"]:
        checks.append(Check("GPUs", "ok", f"{gpus['count']}: {', '.join(gpus['names'])}"))
    elif gpus["driver_gpus"]:
        checks.append(Check("GPUs", "warn",
                            f"the driver sees {gpus['driver_gpus']}, but PyTorch sees none",
                            "this PyTorch is a CPU build; jobs run on the CPU"))
    else:
        checks.append(Check("GPUs", "ok", "none: jobs run on the CPU cores"))
    return checks


def quota_check(cpu: dict[str, Any]) -> Check:
    """Say which limit sets the usable cores: threads per rank follow it."""
    if cpu["quota"] is None:
        return Check("CPU quota", "ok", f"none: all {cpu['affinity']} cores this process may "
                                        "run on are usable")
    found = ", ".join(f"{k} {v:g}" for k, v in cpu["limits"].items() if k != "affinity")
    return Check("CPU quota", "ok",
                 f"{cpu['quota']:g} CPUs ({found}) on {cpu['affinity']} cores: jobs size "
                 f"their threads to {cpu['usable']} (decided by {cpu['source']})")


def shm_check(shm: dict[str, Any]) -> Check:
    """A small /dev/shm makes multi-process PyTorch crash with "Bus error"."""
    if shm["total"] is None:
        return Check("Shared memory", "ok", f"{shm['path']} absent (not Linux)")
    size = f"{shm['path']}: {shm['total'] / 2**20:.0f} MB, {shm['free'] / 2**20:.0f} MB free"
    if shm["total"] >= SHM_MIN_BYTES:
        return Check("Shared memory", "ok", size)
    return Check("Shared memory", "warn",
                 size + f", below {SHM_MIN_BYTES // 2**20} MB: ranks may die with 'Bus error'",
                 "Docker: run with --shm-size=1g; a Kubernetes hub: mount an emptyDir with "
                 "medium: Memory at /dev/shm (docs/classroom.md)")


def jupyter_checks(j: dict[str, Any]) -> list[Check]:
    v = j["versions"]
    missing = [name for name in ("jupyterlab", "ipywidgets", "bokeh", "jupyter_bokeh")
               if not v[name]]
    listed = ", ".join(f"{name} {v[name]}" for name in
                       ("jupyterlab", "ipywidgets", "bokeh", "jupyter_bokeh") if v[name])
    checks = [Check("Notebook packages", "warn" if missing else "ok",
                    listed + (f"; missing: {', '.join(missing)}" if missing else ""),
                    "run the set-up: make setup" if missing else "")]
    ext = j["labextensions"]["@bokeh/jupyter_bokeh"]
    if ext["installed"] and ext["enabled"]:
        checks.append(Check("jupyter_bokeh lab extension", "ok", f"enabled ({ext['version']})"))
    elif ext["installed"]:
        checks.append(Check("jupyter_bokeh lab extension", "warn",
                            "installed but disabled: live charts will not show",
                            "jupyter labextension enable @bokeh/jupyter_bokeh"))
    else:
        checks.append(Check("jupyter_bokeh lab extension", "warn",
                            "not installed: live charts will not show", "make setup"))
    return checks
