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

Lessons it serves: notebooks/00_welcome.ipynb (is this machine ready?).
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import re
from dataclasses import asdict
from typing import Any

from workbench.doctor.probes import (
    HOROVOD_VERSION,
    cpu_info,
    finish_horovod_probe,
    gpu_info,
    jupyter_info,
    network_info,
    parse_check_build,
    parse_labextension_list,
    python_info,
    shm_info,
    start_horovod_probe,
    torch_info,
)
from workbench.doctor.verdicts import (
    Check,
    gpu_horovod_check,
    horovod_checks,
    jupyter_checks,
    machine_checks,
    network_check,
    torch_check,
)

__all__ = ["HOROVOD_VERSION", "diagnose", "doctor_widget", "parse_check_build",
           "parse_labextension_list", "register", "render_html", "render_text"]


# ---------------------------------------------------------------------------- report
def diagnose() -> dict[str, Any]:
    """Check everything; return the report as a JSON-ready dict.

    Keys: `python`, `torch`, `horovod`, `network`, `cpu` (`usable` cores and the `source` that
    decided it), `shm`, `gpus`, `jupyter`, `checks` (one
    dict per line of the report) and `ready` (True when Horovod jobs can run here).
    """
    probe = start_horovod_probe()          # runs while we look at the rest
    try:
        report: dict[str, Any] = {"python": python_info(), "torch": torch_info(),
                                  "cpu": cpu_info(),
                                  "shm": shm_info(), "network": network_info()}
        report["gpus"] = gpu_info(report["torch"])
        report["jupyter"] = jupyter_info()
        report["horovod"] = finish_horovod_probe(probe)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    checks = [Check("Python", "ok", f"{report['python']['version']} "
                                    f"({report['python']['executable']})"),
              torch_check(report["torch"]),
              *horovod_checks(report["horovod"]),
              *filter(None, [gpu_horovod_check(report["torch"], report["horovod"])]),
              network_check(report["network"]),
              *machine_checks(report["cpu"], report["gpus"], report["shm"]),
              *jupyter_checks(report["jupyter"])]
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
