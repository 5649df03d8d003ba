"""The set-up: make targets, the idempotent install script, the cached Horovod build, and
real 2-rank jobs through `horovodrun` and through PyTorch's own launcher.

These run the real scripts and launchers. The Horovod wheel tests install into a
throw-away virtual environment that borrows the project's packages (all but Horovod)
through a .pth file, so the project's .venv is never changed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _setup_helpers import run_reaped

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
BUILD_SCRIPT = ROOT / "scripts" / "build_horovod.sh"


# ---------------------------------------------------------------------------- helpers
def run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """Run `cmd` to the end (reaping everything it started) and return its result."""
    return run_reaped(cmd, timeout, **kwargs)


def site_packages() -> Path:
    import torch
    return Path(torch.__file__).resolve().parents[1]


@pytest.fixture
def venv_without_horovod(tmp_path: Path) -> Path:
    """A new virtual environment that sees every installed package except Horovod.

    Symbolic links to the project's site-packages entries (minus horovod*) in a folder
    that a .pth file adds to the new environment's path: torch is then importable, Horovod
    is not, and installing Horovod writes only into tmp_path.
    """
    shared = tmp_path / "shared-site"
    shared.mkdir()
    for entry in site_packages().iterdir():
        if not entry.name.lower().startswith("horovod"):
            (shared / entry.name).symlink_to(entry)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    own_site = Path(subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip())
    (own_site / "shared.pth").write_text(f"{shared}\n")
    assert subprocess.run([str(py), "-c", "import horovod"], capture_output=True).returncode
    return py


def cached_wheel() -> Path | None:
    """The wheel build_horovod.sh caches for this environment (its --dry-run names the folder)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT), sys.executable, "--dry-run"],
                         capture_output=True, text=True, timeout=60).stdout
    folder = Path(re.search(r"dry run: cache folder (\S+)", out).group(1))
    wheels = sorted(folder.glob("horovod-0.28.1-*.whl"))
    return wheels[0] if wheels else None


# ---------------------------------------------------------------------------- docs and make
def test_readme_quick_start_is_exactly_make_lab_and_make_test() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh|console)?\n(.*?)```", section, re.DOTALL)
    assert block, "the Quick start section has no code block"
    commands = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["make lab", "make test"]


def test_ci_runs_the_readme_test_command() -> None:
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK), ".ci/run must be executable"
    text = ci.read_text()
    assert text.startswith("#!") and "bash" in text.splitlines()[0]
    commands = [line for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert any(re.search(r"\bmake test\b", line) for line in commands)


def test_make_test_runs_tests_and_every_notebook() -> None:
    """Every notebook runs once: in JupyterLab under Chromium (tests/browser's test of every
    notebook, which finds them as below) where Debian's Chromium is, else with nbmake."""
    out = run(["make", "-n", "test"], timeout=60, cwd=ROOT).stdout
    pytest_line = next(line for line in out.splitlines() if "-m pytest" in line)
    assert " tests " in pytest_line + " " and "$notebooks" in pytest_line
    nbmake = next(line for line in out.splitlines() if line.startswith('@notebooks="')
                  or line.startswith('notebooks="'))
    assert "--nbmake" in nbmake and 'if [ -x /usr/bin/chromium ]; then notebooks=""' in out
    notebooks = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "notebooks").rglob("*.ipynb"))
                 if ".ipynb_checkpoints" not in p.parts]
    for notebook in notebooks:
        assert notebook in nbmake.replace("\"", " ").split(), f"{notebook} is not run"
    browser = (ROOT / "tests" / "browser" / "test_every_notebook.py").read_text()
    assert '(REPO / "notebooks").rglob("*.ipynb")' in browser


def test_make_lab_listens_on_localhost_with_a_token() -> None:
    # The recipe as make would run it (its shell lines joined into one command).
    lab_line = run(["make", "-n", "lab"], timeout=60, cwd=ROOT).stdout.replace("\\\n", " ")
    assert "jupyter lab" in lab_line
    assert "--ServerApp.ip=127.0.0.1" in lab_line
    if (ROOT / "notebooks" / "00_welcome.ipynb").exists():
        assert "default_url=/lab/tree/notebooks/00_welcome.ipynb" in lab_line
    # Token authentication is JupyterLab's default: nothing may switch it off.
    assert "token=''" not in lab_line and 'token=""' not in lab_line


def test_make_test_fails_when_no_test_runs() -> None:
    """pytest's exit code 5 (no tests collected) must fail `make test`, not pass it."""
    # -n 0: one process collects, instead of every worker importing every test module.
    result = run(["make", "test",
                  "PYTEST_ARGS=-n 0 -k no_test_has_this_name -p no:cacheprovider"],
                 timeout=240, cwd=ROOT)
    assert result.returncode != 0, result.stdout[-2000:]
    assert "deselected" in result.stdout or "no tests ran" in result.stdout


# ---------------------------------------------------------------------------- setup.sh
@pytest.mark.timeout(1500)     # the first call installs again if pyproject.toml changed
def test_second_setup_run_takes_seconds() -> None:
    run(["bash", "scripts/setup.sh"], timeout=1200, cwd=ROOT)   # may install after a change
    start = time.monotonic()
    result = run(["bash", "scripts/setup.sh"], timeout=120, cwd=ROOT)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stdout
    assert "up to date" in result.stdout
    assert elapsed < 10, f"a second set-up took {elapsed:.1f} s"


def test_setup_refuses_an_unknown_option_in_one_line() -> None:
    result = run(["bash", "scripts/setup.sh", "--with-everything"], timeout=30, cwd=ROOT)
    assert result.returncode == 2
    assert result.stdout.strip() == ("setup: unknown option --with-everything (the only one "
                                     "is --with-system-deps)")


def test_make_test_installs_the_system_packages_during_the_set_up() -> None:
    """make test's set-up starts the Debian packages' install beside the Horovod build;
    make lab's does not (it installs nothing as root)."""
    assert "scripts/setup.sh --with-system-deps" in run(["make", "-n", "test"], timeout=60,
                                                         cwd=ROOT).stdout
    lab = run(["make", "-n", "lab"], timeout=60, cwd=ROOT).stdout
    assert "scripts/setup.sh" in lab and "--with-system-deps" not in lab


def test_install_system_deps_is_instant_when_present() -> None:
    script = ROOT / "scripts" / "install_system_deps.sh"
    if run(["bash", str(script), "--check"], timeout=30).returncode != 0:
        pytest.skip("system packages missing here (make test installs them as root)")
    start = time.monotonic()
    result = run(["bash", str(script)], timeout=30)
    assert result.returncode == 0 and "present" in result.stdout
    assert time.monotonic() - start < 5


# ---------------------------------------------------------------------------- build_horovod.sh
def test_cached_horovod_wheel_installs_without_building(venv_without_horovod: Path) -> None:
    wheel = cached_wheel()
    if wheel is None:
        pytest.skip("no cached Horovod wheel (the set-up's Horovod build failed or never ran)")
    log = ROOT / ".cache" / "horovod-build.log"
    log_before = log.stat().st_mtime if log.exists() else None
    start = time.monotonic()
    result = run(["bash", str(BUILD_SCRIPT), str(venv_without_horovod)], timeout=240)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stdout
    assert "using the cached wheel" in result.stdout
    assert "building Horovod" not in result.stdout
    assert (log.stat().st_mtime if log.exists() else None) == log_before, "the compiler ran"
    # A build takes about 2 minutes on 2 idle cores; installing the cached wheel takes
    # seconds (up to a minute when other jobs share the cores).
    assert elapsed < 90, f"installing the cached wheel took {elapsed:.0f} s"
    where = subprocess.check_output(
        [str(venv_without_horovod), "-c", "import horovod.torch, horovod; print(horovod.__file__)"],
        text=True)
    assert where.startswith(str(venv_without_horovod.parents[1]))


def test_wheel_only_finds_the_cached_wheel_and_installs_nothing(
        venv_without_horovod: Path) -> None:
    """What scripts/setup.sh runs in the background while pip installs the rest."""
    if cached_wheel() is None:
        pytest.skip("no cached Horovod wheel (the set-up's Horovod build failed or never ran)")
    result = run(["bash", str(BUILD_SCRIPT), str(venv_without_horovod), "--wheel-only"],
                 timeout=120)
    assert result.returncode == 0, result.stdout
    assert "using the cached wheel" in result.stdout and "wheel ready" in result.stdout
    assert subprocess.run([str(venv_without_horovod), "-c", "import horovod"],
                          capture_output=True).returncode != 0, "--wheel-only installed it"


def test_failed_horovod_build_says_why_and_how_to_fix(venv_without_horovod: Path,
                                                      tmp_path: Path) -> None:
    env = {**os.environ, "WORKBENCH_WHEEL_CACHE": str(tmp_path / "empty-cache"),
           "CXX": str(tmp_path / "no-such-compiler")}
    result = run(["bash", str(BUILD_SCRIPT), str(venv_without_horovod)], timeout=120, env=env)
    assert result.returncode == 1
    assert "no C++ compiler" in result.stdout
    assert "apt-get install g++" in result.stdout
    assert "--engine torch" in result.stdout      # and what still works


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_cxx14_error_is_the_one_the_build_script_explains(tmp_path: Path) -> None:
    """Compiling PyTorch's headers as C++14 (what unpatched Horovod 0.28.1 asks CMake for)
    fails with the message that build_horovod.sh recognises and explains."""
    script = BUILD_SCRIPT.read_text()
    explained = re.search(r'grep -qE "(C\\\+\\\+[^"]*compiler is required)"', script).group(1)
    source = tmp_path / "uses_aten.cc"
    source.write_text("#include <ATen/ATen.h>\nint main() { return 0; }\n")
    include = site_packages() / "torch" / "include"
    # -Wfatal-errors: stop at the first error instead of parsing every header as C++14.
    result = run(["g++", "-std=c++14", "-fsyntax-only", "-Wfatal-errors", f"-I{include}",
                  str(source)], timeout=120)
    assert result.returncode != 0
    assert re.search(explained, result.stdout), result.stdout[-2000:]


# ---------------------------------------------------------------------------- real jobs
ALLREDUCE_HOROVOD = """
import json, sys, torch
import horovod.torch as hvd
torch.set_num_threads(1)
hvd.init()
x = torch.arange(4, dtype=torch.float64) * (hvd.rank() + 1)
total = hvd.allreduce(x, op=hvd.Sum)
json.dump({"rank": hvd.rank(), "size": hvd.size(), "sum": total.tolist(),
           "gloo": hvd.gloo_enabled()}, open(sys.argv[1] + f"/rank{hvd.rank()}.json", "w"))
"""

ALLREDUCE_TORCH = """
import json, sys, torch
import torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
x = torch.arange(4, dtype=torch.float64) * (dist.get_rank() + 1)
dist.all_reduce(x, op=dist.ReduceOp.SUM)
json.dump({"rank": dist.get_rank(), "size": dist.get_world_size(), "sum": x.tolist(),
           "backend": dist.get_backend()}, open(sys.argv[1] + f"/rank{dist.get_rank()}.json", "w"))
dist.destroy_process_group()
"""

#: rank r contributes (r+1) * [0, 1, 2, 3]; with 2 ranks the sum is 3 * [0, 1, 2, 3].
EXPECTED_SUM = [0.0, 3.0, 6.0, 9.0]


def results(folder: Path, n: int) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(n)]


def test_horovodrun_two_ranks_allreduce_over_gloo(tmp_path: Path) -> None:
    horovodrun = VENV_BIN / "horovodrun"
    if not horovodrun.exists():
        pytest.fail("horovodrun is missing: the Horovod build failed (see `workbench doctor`)")
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE_HOROVOD)
    # horovodrun finds a free port for its rendezvous server itself.
    result = run([str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo",
                  "--gloo-timeout-seconds", "60", sys.executable, str(script), str(tmp_path)],
                 timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-3000:]
    for r, res in enumerate(results(tmp_path, 2)):
        assert res == {"rank": r, "size": 2, "sum": EXPECTED_SUM, "gloo": True}


def test_torch_gloo_two_ranks_allreduce(tmp_path: Path) -> None:
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE_TORCH)
    # --standalone: torchrun runs its own rendezvous on a free port of this machine.
    result = run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                  "--nproc-per-node=2", str(script), str(tmp_path)],
                 timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-3000:]
    for r, res in enumerate(results(tmp_path, 2)):
        assert res == {"rank": r, "size": 2, "sum": EXPECTED_SUM, "backend": "gloo"}
