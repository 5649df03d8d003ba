"""`workbench doctor`: what it reports on this machine agrees with Horovod's and Jupyter's
own tools, a broken Horovod is reported with its fix and a non-zero exit code, and the
notebook widget shows the same report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _setup_helpers import run_reaped

from workbench import doctor
from workbench.doctor import verdicts
from workbench.hosts import cpu_budget

VENV_BIN = Path(sys.executable).parent


def workbench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True,
                          text=True, timeout=180, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """One real diagnosis of this machine, shared by the tests below."""
    return doctor.diagnose()


@pytest.fixture(scope="module")
def broken_horovod(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which `import horovod` fails the way a Horovod built against
    another PyTorch does: a package of that name, first on the path, raising the error."""
    shadow = tmp_path_factory.mktemp("shadow") / "horovod"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(
        'raise ImportError("mpi_lib_v2.cpython-311-x86_64-linux-gnu.so: '
        'undefined symbol: _ZN3c1019UndefinedTensorImpl10_singletonE")\n')
    return {**os.environ, "PYTHONPATH": str(shadow.parent)}


def test_doctor_json_reports_horovod_with_gloo() -> None:
    result = workbench("doctor", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)          # exactly one JSON document
    assert {"python", "torch", "horovod", "cpu", "gpus", "jupyter", "checks",
            "ready"} <= set(data)
    assert data["horovod"]["version"] == doctor.HOROVOD_VERSION
    assert data["horovod"]["controllers"]["gloo"] is True
    assert data["horovod"]["tensor_operations"]["gloo"] is True
    assert data["horovod"]["frameworks"]["pytorch"] is True
    assert data["torch"]["backends"]["gloo"] is True
    assert data["ready"] is True
    budget = cpu_budget()  # the affinity, capped by a cgroup quota or CPU_LIMIT
    assert (data["cpu"]["usable"], data["cpu"]["source"]) == (budget.usable, budget.source)
    assert data["cpu"]["affinity"] == len(os.sched_getaffinity(0))


def test_doctor_agrees_with_horovodrun_check_build(report: dict[str, Any]) -> None:
    out = subprocess.run([str(VENV_BIN / "horovodrun"), "--check-build"], capture_output=True,
                         text=True, timeout=120).stdout
    built = doctor.parse_check_build(out)
    assert set(built) == {"frameworks", "controllers", "tensor_operations"}
    h = report["horovod"]
    assert built["controllers"] == h["controllers"]
    for op, on in built["tensor_operations"].items():
        assert h["tensor_operations"][op] == on, op
    assert built["frameworks"]["pytorch"] == h["frameworks"]["pytorch"]
    assert built["frameworks"]["tensorflow"] == h["frameworks"]["tensorflow"]
    assert f"Horovod v{h['version']}" in out


def test_labextension_state_agrees_with_jupyter(report: dict[str, Any]) -> None:
    proc = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                          capture_output=True, text=True, timeout=120)
    listed = doctor.parse_labextension_list(proc.stdout + proc.stderr)
    assert "@bokeh/jupyter_bokeh" in listed, proc.stderr
    for name, state in report["jupyter"]["labextensions"].items():
        assert state["installed"] == (name in listed), name
        if name in listed:
            assert state["enabled"] == listed[name]["enabled"], name
            assert state["version"] == listed[name]["version"], name


def test_text_report_marks_every_check(report: dict[str, Any]) -> None:
    text = doctor.render_text(report)
    for check in report["checks"]:
        assert f"{check['name']}: {check['detail']}" in text
    assert "Horovod jobs can run here." in text


def test_broken_horovod_fails_with_the_fix(broken_horovod: dict[str, str]) -> None:
    result = workbench("doctor", env=broken_horovod)
    assert result.returncode == 1
    assert "✘ Horovod: not usable: ImportError" in result.stdout
    assert "built against another PyTorch" in result.stdout
    assert "make horovod" in result.stdout
    assert "cannot run here" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_broken_horovod_json_is_not_ready(broken_horovod: dict[str, str]) -> None:
    result = workbench("doctor", "--json", env=broken_horovod)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["ready"] is False and data["horovod"]["installed"] is False
    assert "undefined symbol" in data["horovod"]["error"]
    failed = [c for c in data["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["Horovod"] and failed[0]["fix"]


def test_bad_option_is_a_usage_error() -> None:
    result = workbench("doctor", "--no-such-option")
    assert result.returncode == 2
    assert "unrecognized arguments" in result.stderr and "Traceback" not in result.stderr


def test_widget_shows_one_row_per_check_with_marks(report: dict[str, Any],
                                                   broken_horovod: dict[str, str]) -> None:
    import ipywidgets

    widget = doctor.DoctorWidget(report)
    assert isinstance(widget.widget, ipywidgets.VBox)
    table = widget.table.value
    assert table.count("<tr>") == len(report["checks"]) + 1     # + the header row
    green = table.count("color:#1a7f37;font-weight:bold'>✔")
    assert green == sum(c["status"] == "ok" for c in report["checks"])
    assert "Horovod jobs can run here" in table

    broken = json.loads(workbench("doctor", "--json", env=broken_horovod).stdout)
    red = doctor.DoctorWidget(broken).table.value
    assert re.search(r"#cf222e;font-weight:bold'>✘</span></td><td[^>]*><b>Horovod</b>", red)
    assert "<th style='text-align:left;padding-right:1em'>fix</th>" in red
    assert "make horovod" in red


def test_widget_check_again_refreshes(report: dict[str, Any]) -> None:
    widget = doctor.doctor_widget()
    widget.button.click()           # no event loop here: the check runs right away
    assert widget.button.disabled is False
    assert widget.table.value == doctor.render_html(widget.report)
    assert widget.report["horovod"]["version"] == report["horovod"]["version"]


UNRESOLVABLE = "wb-no-such-hostname"

ALLREDUCE = """
import torch, horovod.torch as hvd
torch.set_num_threads(1)
hvd.init()
print("SUM", hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item())
"""


def with_hostname(name: str, *cmd: str) -> list[str]:
    """`cmd` in a UTS namespace of its own whose hostname is `name` (needs root)."""
    return ["unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "sh", *cmd]


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: gives the doctor a hostname of "
                                              "its own (unshare --uts)")
def test_unresolvable_hostname_breaks_horovod_and_the_doctor_says_so(tmp_path: Path) -> None:
    result = run_reaped(with_hostname(UNRESOLVABLE, sys.executable, "-m", "workbench.cli",
                                      "doctor", "--json"), timeout=120, merge=False)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["network"] == {"hostname": UNRESOLVABLE, "addresses": [],
                               "error": data["network"]["error"]}
    check = next(c for c in data["checks"] if c["name"] == "Hostname")
    assert check["status"] == "fail" and UNRESOLVABLE in check["fix"] and not data["ready"]

    # ... and the doctor is right: a real 2-rank job fails under that hostname.
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    job = run_reaped(with_hostname(UNRESOLVABLE, str(VENV_BIN / "horovodrun"), "-np", "2",
                                   "-H", "localhost:2", "--gloo", "--gloo-timeout-seconds",
                                   "30", sys.executable, str(script)), timeout=120)
    assert job.returncode != 0 and "SUM 2.0" not in job.stdout, job.stdout[-2000:]


def test_doctor_warns_when_cuda_is_there_but_horovod_has_no_nccl(report: dict[str, Any]) -> None:
    """This machine's Horovod report, without NCCL, where torch sees CUDA."""
    ops = report["horovod"]["tensor_operations"]
    without_nccl = {**report["horovod"], "tensor_operations": {**ops, "nccl": False}}
    with_cuda = {**report["torch"], "cuda_available": True, "cuda_version": "12.1"}
    check = verdicts.gpu_horovod_check(with_cuda, without_nccl)
    assert check is not None and check.status == "warn"
    assert "without NCCL" in check.detail and "make horovod" in check.fix
    with_nccl = {**report["horovod"], "tensor_operations": {**ops, "nccl": True}}
    assert verdicts.gpu_horovod_check(with_cuda, with_nccl).status == "ok"
    if not report["torch"]["cuda_available"]:    # no GPU, no line about GPUs
        assert verdicts.gpu_horovod_check(report["torch"], report["horovod"]) is None
        assert "Horovod on GPUs" not in [c["name"] for c in report["checks"]]


def test_doctor_says_whether_torch_is_in_the_supported_range(report: dict[str, Any]) -> None:
    """This machine's torch (constraints.txt's pin) lies in pyproject.toml's range; one
    older than the range is a warning naming the parts that need a newer one, one newer a
    warning that it is untested; local builds (+cpu, +cu130) are their release."""
    supported = report["torch"]["supported"]
    assert supported and f'"torch{supported}"' in (
        Path(__file__).parents[1] / "pyproject.toml").read_text().replace(" ", "")
    check = verdicts.torch_check(report["torch"])
    assert check.status == "ok" and f"supported: torch{supported}" in check.detail
    for inside in ("2.7.0", "2.11.0+cu130", "2.14.1"):
        assert verdicts.torch_check({**report["torch"], "version": inside}).status == "ok"
    older = verdicts.torch_check({**report["torch"], "version": "2.6.0+cu124"})
    assert older.status == "warn" and f"torch{supported}" in older.detail + older.fix
    assert "--engine fsdp on CPUs" in older.detail and "on GPUs" not in older.detail
    assert "tensor parallelism" not in older.detail
    oldest = verdicts.torch_check({**report["torch"], "version": "2.2.0"})
    assert "tensor parallelism" in oldest.detail and "--device cuda" in oldest.detail
    newer = verdicts.torch_check({**report["torch"], "version": "2.15.0"})
    assert newer.status == "warn" and "tested" in newer.detail and "fsdp" not in newer.detail
