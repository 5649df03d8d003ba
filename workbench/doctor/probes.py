"""What `workbench doctor` looks at: each probe returns what it found as a JSON-ready dict.

Horovod is probed in a child process (see the package docstring).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from workbench.hosts.cpu import cpu_budget

#: Horovod release the set-up builds (scripts/build_horovod.sh).
HOROVOD_VERSION = "0.28.1"
#: How to (re)build Horovod, for the messages below.
HOROVOD_FIX = ("build it with `make horovod` (scripts/build_horovod.sh: about 2 minutes, "
               "needs cmake, g++ and the Python headers); see README.md, Troubleshooting")
#: Seconds to wait for the Horovod probe (importing torch and Horovod takes 2-5 s).
PROBE_TIMEOUT_S = 120

#: Run in a child interpreter; prints one JSON object. Each stage records how far it got,
#: so an import failure says which import failed.
_HOROVOD_PROBE = r"""
import glob, importlib.util, json, os, sys
out = {"stage": "import horovod"}
try:
    import horovod
    out["version"] = horovod.__version__
    out["stage"] = "import horovod.torch"
    import horovod.torch as hvd
    out["controllers"] = {"gloo": bool(hvd.gloo_built()), "mpi": bool(hvd.mpi_built())}
    out["tensor_operations"] = {
        "gloo": bool(hvd.gloo_built()), "mpi": bool(hvd.mpi_built()),
        "nccl": bool(hvd.nccl_built()), "ddl": bool(hvd.ddl_built()),
        "ccl": bool(hvd.ccl_built()),
    }
    out["gpu_support"] = {"cuda": bool(hvd.cuda_built()), "rocm": bool(hvd.rocm_built())}
    root = os.path.dirname(horovod.__file__)
    def built(fw, module):
        so = glob.glob(os.path.join(root, fw, "mpi_lib*.so"))
        return bool(so) and importlib.util.find_spec(module) is not None
    out["frameworks"] = {"pytorch": True, "tensorflow": built("tensorflow", "tensorflow"),
                         "mxnet": built("mxnet", "mxnet")}
    out["stage"] = "done"
except BaseException as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def python_info() -> dict[str, Any]:
    return {"version": platform.python_version(), "executable": sys.executable,
            "implementation": platform.python_implementation()}


def torch_info() -> dict[str, Any]:
    """PyTorch's version, CUDA, and which torch.distributed back-ends it was built with."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:  # a broken install is a finding, not a crash
        return {"installed": False, "error": f"{type(exc).__name__}: {exc}"}
    cuda = torch.cuda.is_available()
    return {
        "installed": True,
        "version": torch.__version__,
        "supported": supported_torch(),
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "backends": {
            "gloo": dist.is_available() and dist.is_gloo_available(),
            "nccl": dist.is_available() and dist.is_nccl_available(),
            "mpi": dist.is_available() and dist.is_mpi_available(),
        },
    }


def supported_torch() -> str | None:
    """The torch releases the workbench supports (pyproject.toml's `torch>=...,<...`), as
    the installed package's metadata says; None when the workbench is not installed."""
    try:
        requirements = metadata.requires("workbench") or []
    except metadata.PackageNotFoundError:
        return None
    for requirement in requirements:
        found = re.fullmatch(r"torch\s*([<>=!~][^;]*)", requirement.split(";")[0].strip())
        if found:   # the lower end first, as pyproject.toml writes it (metadata sorts them)
            ends = found.group(1).replace(" ", "").split(",")
            return ",".join(sorted(ends, key=lambda end: end.startswith("<")))
    return None


def start_horovod_probe() -> subprocess.Popen[str]:
    """Start the Horovod probe in a child interpreter (see the module docstring)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-c", _HOROVOD_PROBE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)


def finish_horovod_probe(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Collect the probe's answer, and add where `horovodrun` is."""
    try:
        out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"installed": False, "error": f"importing Horovod took over {PROBE_TIMEOUT_S} s"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = (f"the interpreter crashed (exit code {proc.returncode}) while importing Horovod"
               f": {err.strip()[-500:]}")
        return {"installed": False, "error": why}
    try:
        info = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"installed": False, "error": f"unexpected output from Horovod: {lines[-1]!r}"}
    info["installed"] = info.pop("stage") == "done"
    info["horovodrun"] = horovodrun_path()
    return info


def horovodrun_path() -> str | None:
    """The `horovodrun` beside this interpreter (the project's .venv), else on PATH."""
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else shutil.which("horovodrun")


def cpu_info() -> dict[str, Any]:
    """Logical CPUs, the cores this process may really use and what decided that (its CPU
    budget: affinity capped by a cgroup quota or CPU_LIMIT), and physical cores: one rank
    per physical core is the fair way to measure speedup."""
    budget = cpu_budget()
    try:
        import psutil
        physical = psutil.cpu_count(logical=False)
    except Exception:
        physical = None
    return {"logical": os.cpu_count(), "usable": budget.usable, "source": budget.source,
            "quota": budget.quota, "limits": budget.limits, "affinity": len(budget.cores),
            "physical": physical}


#: Below this, multi-process PyTorch (DataLoader workers, gloo's shared-memory transport)
#: can die with "Bus error": Docker and Kubernetes give containers 64 MB by default.
SHM_MIN_BYTES = 512 * 2**20


def shm_info(path: str = "/dev/shm") -> dict[str, Any]:
    """Size and free space of the shared-memory folder, in bytes (None where absent)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return {"path": path, "total": None, "free": None}
    return {"path": path, "total": usage.total, "free": usage.free}


def gpu_info(torch_info: dict[str, Any]) -> dict[str, Any]:
    """GPUs seen by PyTorch, and by the NVIDIA driver (a CPU-only torch sees none)."""
    names: list[str] = []
    if torch_info.get("cuda_available"):
        import torch
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    driver: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                 timeout=20).stdout
            driver = [line for line in out.splitlines() if line.startswith("GPU ")]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {"count": len(names), "names": names, "driver_gpus": len(driver)}


def network_info() -> dict[str, Any]:
    """This machine's hostname and the addresses it resolves to.

    Gloo (in Horovod 0.28.1) binds each rank to the address its hostname resolves to,
    so a hostname that does not resolve makes every rank crash, even on one machine.
    """
    hostname = socket.gethostname()
    try:
        infos = socket.getaddrinfo(hostname, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        return {"hostname": hostname, "addresses": [], "error": str(exc)}
    return {"hostname": hostname, "addresses": sorted({info[4][0] for info in infos})}


def dist_version(dist_name: str) -> str | None:
    try:
        return metadata.version(dist_name)
    except metadata.PackageNotFoundError:
        return None


def labextension_state(name: str) -> dict[str, Any]:
    """Whether JupyterLab lab extension `name` is installed and enabled.

    Reads what `jupyter labextension list` reads, without its 2-10 s start-up: the
    prebuilt extensions in the Jupyter data folders, and `disabled_labextensions` in
    labconfig/page_config.json of the Jupyter config folders.
    """
    try:
        from jupyter_core.paths import jupyter_config_path, jupyter_path
    except ImportError:
        return {"installed": False, "enabled": False, "version": None, "path": None}
    state: dict[str, Any] = {"installed": False, "enabled": False, "version": None,
                             "path": None}
    for folder in jupyter_path("labextensions"):
        package = Path(folder) / name / "package.json"
        if package.is_file():
            state.update(installed=True, enabled=True, path=str(package.parent),
                         version=json.loads(package.read_text()).get("version"))
            break
    for folder in jupyter_config_path():
        page_config = Path(folder) / "labconfig" / "page_config.json"
        if page_config.is_file():
            disabled = json.loads(page_config.read_text()).get("disabled_labextensions", {})
            if disabled.get(name):
                state["enabled"] = False
    return state


def jupyter_info() -> dict[str, Any]:
    packages = ["jupyterlab", "notebook", "ipykernel", "ipywidgets", "bokeh", "jupyter_bokeh"]
    return {
        "versions": {name: dist_version(name) for name in packages},
        "labextensions": {
            "@bokeh/jupyter_bokeh": labextension_state("@bokeh/jupyter_bokeh"),
            "@jupyter-widgets/jupyterlab-manager":
                labextension_state("@jupyter-widgets/jupyterlab-manager"),
        },
    }


# ---------------------------------------------------------------------------- parsers
def parse_check_build(text: str) -> dict[str, dict[str, bool]]:
    """Parse `horovodrun --check-build` into {section: {item: built}}.

    >>> parse_check_build("Available Controllers:\\n    [ ] MPI\\n    [X] Gloo")
    {'controllers': {'mpi': False, 'gloo': True}}
    """
    sections: dict[str, dict[str, bool]] = {}
    current: dict[str, bool] | None = None
    for line in text.splitlines():
        heading = re.match(r"\s*Available ([\w ]+):", line)
        item = re.match(r"\s*\[([ X])\]\s+(\S+)", line)
        if heading:
            current = sections.setdefault(heading.group(1).strip().lower().replace(" ", "_"),
                                          {})
        elif item and current is not None:
            current[item.group(2).lower()] = item.group(1) == "X"
    return sections


def parse_labextension_list(text: str) -> dict[str, dict[str, Any]]:
    """Parse `jupyter labextension list` into {name: {version, enabled, ok}}."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)   # drop the colour codes
    found = {}
    for m in re.finditer(r"^\s+(\S+) v(\S+) (enabled|disabled) (OK|X)", plain, re.MULTILINE):
        found[m.group(1)] = {"version": m.group(2), "enabled": m.group(3) == "enabled",
                             "ok": m.group(4) == "OK"}
    return found
