"""`workbench doctor`: can this machine run distributed training jobs, and if not, why not?

It checks what a job needs, in the order a job needs it:

1. Python and PyTorch, with the `torch.distributed` back-ends (gloo for CPUs, NCCL for
   NVIDIA GPUs, MPI) that PyTorch DDP can use.
2. Horovod, and what it was built with. Horovod separates the *controller*, which agrees
   on which tensors are ready (gloo or MPI), from the *tensor operations*, which move the
   data (gloo, MPI, NCCL, ...) - see Sergeev & Del Balso 2018, "Horovod: fast and easy
   distributed deep learning in TensorFlow", arXiv:1802.05799. We ask Horovod itself
   (`horovod.torch.gloo_built()`, `mpi_built()`, `nccl_built()`, ...), which is where
   `horovodrun --check-build` gets the same answers.
3. The hostname, which gloo needs to resolve, and the CPU cores and GPUs the ranks will
   run on.
4. The notebook side: JupyterLab, ipywidgets, Bokeh and the jupyter_bokeh lab extension
   that draws the live charts.

Horovod is imported in a child process: a Horovod built against another PyTorch fails
with "undefined symbol", or can even crash the interpreter, and a child keeps that away
from the notebook kernel and lets us report it with its fix.

`diagnose()` returns everything as a dict (`workbench doctor --json` prints it);
`doctor_widget()` shows it as a table in a notebook.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
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


@dataclass
class Check:
    """One line of the report: what was checked, how it went, and how to fix it."""

    name: str
    status: str          # "ok", "warn" (works, with a limitation) or "fail"
    detail: str
    fix: str = ""
    required: bool = False   # needed for Horovod jobs: a failure makes the exit code 1


# ---------------------------------------------------------------------------- probes
def _python() -> dict[str, Any]:
    return {"version": platform.python_version(), "executable": sys.executable,
            "implementation": platform.python_implementation()}


def _torch() -> dict[str, Any]:
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
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "backends": {
            "gloo": dist.is_available() and dist.is_gloo_available(),
            "nccl": dist.is_available() and dist.is_nccl_available(),
            "mpi": dist.is_available() and dist.is_mpi_available(),
        },
    }


def _start_horovod_probe() -> subprocess.Popen[str]:
    """Start the Horovod probe in a child interpreter (see the module docstring)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-c", _HOROVOD_PROBE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)


def _finish_horovod_probe(proc: subprocess.Popen[str]) -> dict[str, Any]:
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


def _cpu() -> dict[str, Any]:
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


def _shm(path: str = "/dev/shm") -> dict[str, Any]:
    """Size and free space of the shared-memory folder, in bytes (None where absent)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return {"path": path, "total": None, "free": None}
    return {"path": path, "total": usage.total, "free": usage.free}


def _gpus(torch_info: dict[str, Any]) -> dict[str, Any]:
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


def _network() -> dict[str, Any]:
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


def _version(dist_name: str) -> str | None:
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


def _jupyter() -> dict[str, Any]:
    packages = ["jupyterlab", "notebook", "ipykernel", "ipywidgets", "bokeh", "jupyter_bokeh"]
    return {
        "versions": {name: _version(name) for name in packages},
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


# ---------------------------------------------------------------------------- verdicts
def _names(flags: dict[str, bool]) -> str:
    """{"gloo": True, "mpi": False} -> "gloo" (the ones that are built), or "none"."""
    return ", ".join(name for name, on in flags.items() if on) or "none"


def _torch_check(t: dict[str, Any]) -> Check:
    if not t.get("installed"):
        return Check("PyTorch", "fail", f"not importable ({t.get('error')})",
                     "run the set-up: make setup", required=True)
    detail = (f"{t['version']}; torch.distributed back-ends: {_names(t['backends'])}; "
              f"CUDA: {'available' if t['cuda_available'] else 'not available'}")
    if not t["backends"]["gloo"]:
        return Check("PyTorch", "warn", detail, "this PyTorch has no gloo back-end: "
                     "--engine torch cannot run on CPUs; install torch from pypi.org")
    return Check("PyTorch", "ok", detail)


def _horovod_checks(h: dict[str, Any]) -> list[Check]:
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


def _gpu_horovod_check(t: dict[str, Any], h: dict[str, Any]) -> Check | None:
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


def _network_check(net: dict[str, Any]) -> Check:
    if net["addresses"]:
        return Check("Hostname", "ok", f"{net['hostname']} resolves to "
                                       f"{', '.join(net['addresses'])}")
    return Check("Hostname", "fail",
                 f"{net['hostname']} does not resolve ({net.get('error')}): gloo binds each "
                 "rank to its hostname's address, so Horovod's ranks crash",
                 f"add the line `127.0.1.1 {net['hostname']}` to /etc/hosts", required=True)


def _machine_checks(cpu: dict[str, Any], gpus: dict[str, Any],
                    shm: dict[str, Any]) -> list[Check]:
    cores = (f"{cpu['usable']} usable ({cpu['logical']} logical, "
             f"{cpu['physical'] or '?'} physical)")
    checks = [Check("CPU cores", "ok" if (cpu["usable"] or 1) >= 2 else "warn", cores,
                    "" if (cpu["usable"] or 1) >= 2 else
                    "one core: ranks will take turns, so no speedup can be measured"),
              _quota_check(cpu), _shm_check(shm)]
    if gpus["count"]:
        checks.append(Check("GPUs", "ok", f"{gpus['count']}: {', '.join(gpus['names'])}"))
    elif gpus["driver_gpus"]:
        checks.append(Check("GPUs", "warn",
                            f"the driver sees {gpus['driver_gpus']}, but PyTorch sees none",
                            "this PyTorch is a CPU build; jobs run on the CPU"))
    else:
        checks.append(Check("GPUs", "ok", "none: jobs run on the CPU cores"))
    return checks


def _quota_check(cpu: dict[str, Any]) -> Check:
    """Say which limit sets the usable cores: threads per rank follow it."""
    if cpu["quota"] is None:
        return Check("CPU quota", "ok", f"none: all {cpu['affinity']} cores this process may "
                                        "run on are usable")
    found = ", ".join(f"{k} {v:g}" for k, v in cpu["limits"].items() if k != "affinity")
    return Check("CPU quota", "ok",
                 f"{cpu['quota']:g} CPUs ({found}) on {cpu['affinity']} cores: jobs size "
                 f"their threads to {cpu['usable']} (decided by {cpu['source']})")


def _shm_check(shm: dict[str, Any]) -> Check:
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


def _jupyter_checks(j: dict[str, Any]) -> list[Check]:
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


# ---------------------------------------------------------------------------- report
def diagnose() -> dict[str, Any]:
    """Check everything; return the report as a JSON-ready dict.

    Keys: `python`, `torch`, `horovod`, `network`, `cpu` (`usable` cores and the `source` that
    decided it), `shm`, `gpus`, `jupyter`, `checks` (one
    dict per line of the report) and `ready` (True when Horovod jobs can run here).
    """
    probe = _start_horovod_probe()          # runs while we look at the rest
    try:
        report: dict[str, Any] = {"python": _python(), "torch": _torch(), "cpu": _cpu(),
                                  "shm": _shm(), "network": _network()}
        report["gpus"] = _gpus(report["torch"])
        report["jupyter"] = _jupyter()
        report["horovod"] = _finish_horovod_probe(probe)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    checks = [Check("Python", "ok", f"{report['python']['version']} "
                                    f"({report['python']['executable']})"),
              _torch_check(report["torch"]),
              *_horovod_checks(report["horovod"]),
              *filter(None, [_gpu_horovod_check(report["torch"], report["horovod"])]),
              _network_check(report["network"]),
              *_machine_checks(report["cpu"], report["gpus"], report["shm"]),
              *_jupyter_checks(report["jupyter"])]
    report["checks"] = [asdict(c) for c in checks]
    report["ready"] = not any(c.required and c.status == "fail" for c in checks)
    return report


_SYMBOLS = {"ok": "✔", "warn": "!", "fail": "✘"}


def render_text(report: dict[str, Any]) -> str:
    """The report as the terminal shows it: one line per check, fixes indented below."""
    lines = ["workbench doctor", ""]
    for c in report["checks"]:
        lines.append(f"  {_SYMBOLS[c['status']]} {c['name']}: {c['detail']}")
        if c["fix"] and c["status"] != "ok":
            lines.append(f"      fix: {c['fix']}")
    lines.append("")
    if report["ready"]:
        lines.append("Horovod jobs can run here.")
    else:
        lines.append("Horovod jobs cannot run here yet. Fix the lines marked ✘, then run "
                     "`workbench doctor` again. (--engine torch and --engine serial need "
                     "only PyTorch.)")
    return "\n".join(lines)


def _html(text: str) -> str:
    """Escape `text` for HTML, showing `backquoted` parts as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render_html(report: dict[str, Any]) -> str:
    """The report as an HTML table with green, amber and red marks (for notebooks).
    The "fix" column appears only when something needs fixing."""
    colours = {"ok": "#1a7f37", "warn": "#b35900", "fail": "#cf222e"}
    fixes = any(c["status"] != "ok" and c["fix"] for c in report["checks"])
    left = "style='text-align:left;padding-right:1em'"
    rows = []
    for c in report["checks"]:
        mark = (f"<span style='color:{colours[c['status']]};font-weight:bold'>"
                f"{_SYMBOLS[c['status']]}</span>")
        fix = _html(c["fix"]) if c["status"] != "ok" else ""
        rows.append(f"<tr><td>{mark}</td><td {left}><b>{html.escape(c['name'])}</b></td>"
                    f"<td {left}>{_html(c['detail'])}</td>"
                    + (f"<td {left}><i>{fix}</i></td>" if fixes else "") + "</tr>")
    verdict = ("<p style='color:#1a7f37'><b>✔ Horovod jobs can run here.</b></p>"
               if report["ready"] else
               "<p style='color:#cf222e'><b>✘ Horovod jobs cannot run here yet: "
               "see the fixes in the table.</b></p>")
    header = (f"<tr><th></th><th {left}>check</th><th {left}>result</th>"
              + (f"<th {left}>fix</th>" if fixes else "") + "</tr>")
    return ("<table class='workbench-doctor'><thead>" + header + "</thead><tbody>"
            + "".join(rows) + "</tbody></table>" + verdict)


# ---------------------------------------------------------------------------- widget
def doctor_widget() -> DoctorWidget:
    """The report for notebook 00: a table with green ✔ / red ✘, and a "Check again" button."""
    return DoctorWidget()


class DoctorWidget:
    """The doctor's report in a notebook. Display it as the last line of a cell.

    ipywidgets is imported here rather than at the top of the module, so that
    `workbench doctor` in a terminal works even when the notebook packages are broken
    (which is one of the things it reports). The button's callback returns at once and
    checks again in a worker thread, because widget messages are handled only while the
    kernel is idle.
    """

    def __init__(self, report: dict[str, Any] | None = None) -> None:
        import ipywidgets

        self.report = report or diagnose()
        self.table = ipywidgets.HTML(render_html(self.report))
        self.button = ipywidgets.Button(description="Check again", icon="refresh")
        self.button.on_click(self._on_click)
        self.widget = ipywidgets.VBox([self.table, self.button])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _on_click(self, _button: Any) -> None:
        self.button.disabled = True
        self.table.value = "<p>Checking ...</p>"
        try:
            asyncio.get_running_loop().create_task(self._refresh())
        except RuntimeError:       # no event loop (outside a kernel): check right away
            self._show(diagnose())

    async def _refresh(self) -> None:
        loop = asyncio.get_running_loop()
        self._show(await loop.run_in_executor(None, diagnose))

    def _show(self, report: dict[str, Any]) -> None:
        self.report = report
        self.table.value = render_html(report)
        self.button.disabled = False


# ---------------------------------------------------------------------------- CLI
def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `workbench doctor` to the command line."""
    parser = subparsers.add_parser(
        "doctor", help="check the installation (Horovod, PyTorch, Jupyter)",
        description="Check that Horovod and PyTorch jobs can run here, and say how to fix "
                    "what is missing. Exit code 0 when Horovod jobs can run, 1 otherwise.")
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON document")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    report = diagnose()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_text(report))
    return 0 if report["ready"] else 1
