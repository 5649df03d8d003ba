"""The places that name versions agree: pyproject.toml and constraints.txt (the local
set-up), environment.yml (conda) and binder/environment.yml (Binder); torch is a range in
pyproject.toml, and the others install the one release constraints.txt pins within it. And
Binder's postBuild installs Horovod with the same script as the local set-up, not a copy."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from workbench import doctor

try:
    import tomllib
except ModuleNotFoundError:     # Python 3.10: pip carries the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements(lines: list[str]) -> dict[str, str]:
    """{canonical name: version specifier} for requirement lines ("-e ." etc. skipped)."""
    found = {}
    for line in lines:
        if line.startswith("-"):
            continue
        req = Requirement(line)
        found[canonicalize_name(req.name)] = str(req.specifier)
    return found


def constraints() -> dict[str, str]:
    """constraints.txt's pins: the releases the set-up installs within pyproject's ranges."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return requirements([line for line in lines if line.strip() and not line.startswith("#")])


def conda_env(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(conda packages, pip packages) of a conda environment file, each {name: spec}."""
    env = yaml.safe_load(path.read_text())
    conda, pip = {}, {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip.update(requirements(dep["pip"]))
        else:
            name, _, spec = re.match(r"([\w.-]+)\s*(([=<>!]=?.*)?)", dep).groups()
            conda[canonicalize_name(name)] = spec
    return conda, pip


ENV_FILES = {"environment.yml": ROOT / "environment.yml",
             "binder/environment.yml": ROOT / "binder" / "environment.yml"}


@pytest.mark.parametrize("label", ENV_FILES)
def test_environment_names_the_same_pins_as_pyproject(label: str) -> None:
    conda, pip = conda_env(ENV_FILES[label])
    runtime = {**requirements(pyproject()["project"]["dependencies"]), **constraints()}
    dev = requirements(pyproject()["project"]["optional-dependencies"]["dev"])
    for name, spec in runtime.items():
        assert pip.get(name) == spec, f"{label}: {name} should be {spec!r}, is {pip.get(name)!r}"
    for name, spec in pip.items():
        wanted = runtime.get(name, dev.get(name))
        assert wanted is not None, f"{label}: {name} is not in pyproject.toml"
        assert spec == wanted, f"{label}: {name} is {spec!r}, pyproject.toml says {wanted!r}"
    # conda gives only the interpreter and the build tools, never a second copy of a pin.
    assert not set(conda) & (set(runtime) | set(dev)), label
    assert conda["python"].lstrip("=") == "3.11"


def test_conda_environment_has_the_test_tools() -> None:
    _, pip = conda_env(ENV_FILES["environment.yml"])
    dev = requirements(pyproject()["project"]["optional-dependencies"]["dev"])
    assert {name: pip.get(name) for name in dev} == dev


def test_the_pinned_torch_lies_in_the_supported_range() -> None:
    """constraints.txt pins torch exactly, to a release of pyproject.toml's range, whose
    lower end is the newest release that a part of the workbench needs."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from workbench.torch_versions import NEEDS

    pin = constraints()["torch"]
    assert pin.startswith("=="), pin
    supported = SpecifierSet(requirements(pyproject()["project"]["dependencies"])["torch"])
    assert pin[2:] in supported, (pin, supported)
    oldest = max(Version(v) for v, _ in NEEDS.values())
    assert f">={oldest}" in str(supported).split(","), (supported, oldest)


def test_python_pin_is_allowed_by_pyproject() -> None:
    from packaging.specifiers import SpecifierSet
    allowed = SpecifierSet(pyproject()["project"]["requires-python"])
    for label, path in ENV_FILES.items():
        conda, _ = conda_env(path)
        assert conda["python"].lstrip("=") + ".0" in allowed, label


def test_horovod_version_is_the_same_everywhere() -> None:
    script = (ROOT / "scripts" / "build_horovod.sh").read_text()
    assert re.search(r"^VERSION=(\S+)$", script, re.MULTILINE).group(1) == doctor.HOROVOD_VERSION
    readme = (ROOT / "README.md").read_text()
    assert f"Horovod {doctor.HOROVOD_VERSION}" in readme


def test_binder_postbuild_uses_the_shared_build_script() -> None:
    post = ROOT / "binder" / "postBuild"
    assert os.access(post, os.X_OK), "binder/postBuild must be executable"
    lines = [line for line in post.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("#!")
    assert lines[1] == "set -e"
    body = "\n".join(lines)
    assert "scripts/build_horovod.sh" in body
    assert "pip install" in body and "-e ." in body
    # Not a second copy of the build: the C++17 patch lives only in build_horovod.sh.
    assert "CMAKE_CXX_STANDARD" not in body
