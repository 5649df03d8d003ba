"""scripts/build_horovod.sh on machines it cannot be run on here: a CUDA build of PyTorch
with or without a GPU, played by a fake `torch` package and a fake `nvcc`.

`--dry-run` prints the cache folder, the HOROVOD_* settings and the build command, so the
tests check what a real build would be given, without compiling for minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "build_horovod.sh"
PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"

FAKE_TORCH = """
__version__ = {version!r}
__file__ = __file__
class version:
    cuda = {cuda!r}
class cuda:
    @staticmethod
    def is_available():
        return False   # a login node: CUDA torch, no GPU
"""


def fake_machine(tmp_path: Path, torch_version: str, cuda: str | None,
                 nvcc_release: str | None) -> tuple[Path, dict[str, str]]:
    """An interpreter whose `import torch` is a fake (with pip's NCCL beside it, and a
    Horovod that does not import), and a PATH with a fake nvcc of `nvcc_release`."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH.format(version=torch_version,
                                                                  cuda=cuda))
    (site / "horovod").mkdir()
    (site / "horovod" / "__init__.py").write_text("raise ImportError('not built yet')\n")
    nccl = site / "nvidia" / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    (nccl / "lib").mkdir()
    (nccl / "lib" / "libnccl.so.2").write_bytes(b"")
    bin_dir = tmp_path / "cuda" / "bin"
    bin_dir.mkdir(parents=True)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    if nvcc_release:
        nvcc = bin_dir / "nvcc"
        nvcc.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                        f"echo 'Cuda compilation tools, release {nvcc_release}, "
                        f"V{nvcc_release}.105'\n")
        nvcc.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "CUDA_HOME", "WORKBENCH_"))}
    # Only the system's own folders: a real CUDA toolkit (e.g. in /usr/local) stays out.
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", CUDA_HOME=str(tmp_path / "no-cuda"),
               WORKBENCH_WHEEL_CACHE=str(tmp_path / "wheels"))
    return python, env


def build(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(python), *args], capture_output=True,
                          text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)


def dry_run(tmp_path: Path, torch_version: str, cuda: str | None,
            nvcc_release: str | None) -> dict[str, str]:
    """{setting: value} from a dry run (the HOROVOD_* variables, "cache", "command")."""
    python, env = fake_machine(tmp_path, torch_version, cuda, nvcc_release)
    result = build(python, env, "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    out: dict[str, str] = {}
    for line in result.stdout.splitlines():
        if line.startswith("horovod: dry run: "):
            body = line.removeprefix("horovod: dry run: ")
            if body.startswith("cache folder "):
                out["cache"] = body.removeprefix("cache folder ")
            elif body.startswith("command "):
                out["command"] = body.removeprefix("command ")
            else:
                name, _, value = body.partition("=")
                out[name] = value
    return out


def test_cuda_torch_without_a_gpu_builds_with_torchs_nccl(tmp_path: Path) -> None:
    if any(Path(d, "nccl.h").exists() for d in ("/usr/include", "/usr/local/include")):
        pytest.skip("this machine has a system NCCL, which the build rightly prefers")
    s = dry_run(tmp_path, "2.13.0+cu121", "12.1", "12.1")
    nccl = tmp_path / "site" / "nvidia" / "nccl"
    assert s["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert s["HOROVOD_CUDA_HOME"] == str(tmp_path / "cuda")
    assert s["HOROVOD_NCCL_HOME"] == str(nccl)
    assert s["HOROVOD_NCCL_INCLUDE"] == str(nccl / "include")
    assert s["HOROVOD_NCCL_LINK"] == "SHARED"       # torch's NCCL is a shared library
    assert s["HOROVOD_NCCL_LIB"].endswith("nccl-lib")  # holds the libnccl.so link
    assert Path(s["cache"]).name == f"torch-2.13.0+cu121-cuda-12.1-{PY_TAG}-nccl"
    assert "--no-build-isolation" in s["command"] and s["command"].endswith(s["cache"])
    assert not (tmp_path / "wheels" / "sdist").exists(), "a dry run downloads nothing"


def test_cache_key_changes_with_the_cuda_version(tmp_path: Path) -> None:
    cu121 = dry_run(tmp_path / "a", "2.13.0", "12.1", "12.1")["cache"]
    cu118 = dry_run(tmp_path / "b", "2.13.0", "11.8", "11.8")["cache"]
    cpu = dry_run(tmp_path / "c", "2.13.0", None, None)
    assert Path(cu121).name != Path(cu118).name
    assert "cuda-12.1" in cu121 and "cuda-11.8" in cu118
    assert Path(cpu["cache"]).name.endswith(f"-cuda-none-{PY_TAG}-none")
    assert "HOROVOD_GPU_OPERATIONS" not in cpu and "HOROVOD_NCCL_HOME" not in cpu


def test_the_cpp_standard_and_the_cuda_code_follow_the_torch(tmp_path: Path) -> None:
    """C++17 where torch's headers ask for it (2.1 to 2.13), C++20 where they ask for that
    (2.14); a CUDA torch built without GPU operations (WORKBENCH_HOROVOD_GPU=0, a machine
    without a GPU) compiles no CUDA code, which a partial CUDA toolkit would stop."""
    assert dry_run(tmp_path / "a", "2.13.0", None, None)["CMAKE_CXX_STANDARD"] == "17"
    python, env = fake_machine(tmp_path / "b", "2.14.1+cu130", "13.0", "13.0")
    aten = tmp_path / "b" / "site" / "torch" / "include" / "ATen"
    aten.mkdir(parents=True)
    (aten / "ATen.h").write_text("#error C++20 or later compatible compiler is required\n")
    out = build(python, {**env, "WORKBENCH_HOROVOD_GPU": "0"}, "--dry-run").stdout
    assert "horovod: dry run: CMAKE_CXX_STANDARD=20" in out, out
    assert "horovod: dry run: Pytorch_CUDA=FALSE" in out and "GPU_OPERATIONS" not in out
    nccl = dry_run(tmp_path / "c", "2.13.0+cu121", "12.1", "12.1")
    assert "Pytorch_CUDA" not in nccl and nccl["HOROVOD_GPU_OPERATIONS"] == "NCCL"


def test_cuda_torch_without_nvcc_says_what_to_install(tmp_path: Path) -> None:
    python, env = fake_machine(tmp_path, "2.13.0", "12.1", None)
    assert shutil.which("nvcc", path=env["PATH"]) is None
    result = build(python, env, "--dry-run")
    assert result.returncode == 1
    assert "no CUDA compiler (nvcc)" in result.stderr
    assert "CUDA toolkit 12.x" in result.stderr and "WORKBENCH_HOROVOD_GPU=0" in result.stderr


def test_nvcc_of_another_cuda_major_is_refused(tmp_path: Path) -> None:
    python, env = fake_machine(tmp_path, "2.13.0", "12.1", "11.8")
    result = build(python, env, "--dry-run")
    assert result.returncode == 1
    assert "nvcc is CUDA 11.8 but torch was built with CUDA 12.1" in result.stderr


@pytest.mark.skipif(not Path("/usr/bin/g++").exists(), reason="needs g++ to pass preflight")
def test_sdist_with_a_wrong_sha256_is_refused(tmp_path: Path) -> None:
    python, env = fake_machine(tmp_path, "2.13.0+cpu", None, None)
    fake = tmp_path / "horovod-0.28.1.tar.gz"
    fake.write_bytes(b"not the release")
    result = build(python, {**env, "WORKBENCH_HOROVOD_SDIST": str(fake)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "sha256" in result.stderr and "92a43f5a94c4" in result.stderr
    assert not list((tmp_path / "wheels").rglob("*.whl")), "nothing may be built"
    assert not (tmp_path / "wheels" / "sdist" / fake.name).exists(), "a bad sdist is not kept"


FAKE_PIP = """
import pathlib, sys
if {gives_cmake3} and "install" in sys.argv and any(a.startswith("cmake") for a in sys.argv):
    cmake = pathlib.Path({folder!r}) / "cmake"   # pip puts it beside the interpreter
    cmake.write_text("#!/bin/sh\\necho 'cmake version 3.31.6'\\n")
    cmake.chmod(0o755)
"""


@pytest.mark.skipif(not Path("/usr/bin/g++").exists(), reason="needs g++ to pass preflight")
@pytest.mark.parametrize("gives_cmake3", [True, False])
def test_cmake_4_is_passed_over_for_a_cmake_3_from_pypi(tmp_path: Path, gives_cmake3) -> None:
    """CMake 4 refuses the CMake 2.8 minimum of the libraries Horovod 0.28.1 bundles, so a
    CMake 4 first on PATH makes the build install a CMake 3 beside the interpreter (here a
    fake pip's), and use it; if none comes, it stops, saying so. The build then stops at
    the (bad) source, which shows that the checks before it passed."""
    python, env = fake_machine(tmp_path, "2.13.0+cpu", None, None)
    cmake4 = tmp_path / "cuda" / "bin" / "cmake"          # first on the fake PATH
    cmake4.write_text("#!/bin/sh\necho 'cmake version 4.1.2'\n")
    cmake4.chmod(0o755)
    (tmp_path / "site" / "pip").mkdir()
    (tmp_path / "site" / "pip" / "__init__.py").write_text("")
    (tmp_path / "site" / "pip" / "__main__.py").write_text(
        FAKE_PIP.format(gives_cmake3=gives_cmake3, folder=str(tmp_path)))
    fake = tmp_path / "horovod-0.28.1.tar.gz"
    fake.write_bytes(b"not the release")
    result = build(python, {**env, "WORKBENCH_HOROVOD_SDIST": str(fake)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no CMake 3 on PATH (4): installing one from PyPI" in result.stdout
    if gives_cmake3:
        assert "sha256" in result.stderr, result.stderr   # got past the CMake check
    else:
        assert "CMake 3 not found (Horovod 0.28.1 cannot be configured by CMake 4)" in (
            result.stderr)
        assert "pip install 'cmake<4'" in result.stderr
