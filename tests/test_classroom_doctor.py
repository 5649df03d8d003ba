"""`workbench doctor` on a classroom server: the CPU quota it reports and where it comes from,
and a /dev/shm too small for multi-process PyTorch, with the fix for Kubernetes hubs."""

from __future__ import annotations

import os
import subprocess

import pytest

from workbench.doctor import probes, verdicts
from workbench.hosts import cpu


def test_doctor_reports_the_quota_and_its_source(monkeypatch):
    monkeypatch.setenv(cpu.ENV_CPU_LIMIT, "1")
    report = probes.cpu_info()
    assert (report["usable"], report["source"], report["quota"]) == (1, "CPU_LIMIT", 1.0)
    check = verdicts.quota_check(report)
    assert check.status == "ok" and "CPU_LIMIT 1" in check.detail
    monkeypatch.delenv(cpu.ENV_CPU_LIMIT)
    if cpu.cpu_budget().quota is None:
        assert probes.cpu_info()["source"] == "affinity" and probes.cpu_info()["quota"] is None


@pytest.fixture
def small_shm(tmp_path):
    """A real 64 MB tmpfs, the size Docker and Kubernetes give a container's /dev/shm."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "shm"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)], check=True)
    yield str(folder)
    subprocess.run(["umount", str(folder)], check=True)


def test_a_64_mb_dev_shm_is_reported_with_the_kubernetes_fix(small_shm):
    shm = probes.shm_info(small_shm)
    assert shm["total"] == 64 * 2**20
    check = verdicts.shm_check(shm)
    assert check.status == "warn" and "Bus error" in check.detail
    assert "emptyDir" in check.fix and "medium: Memory" in check.fix


def test_a_large_dev_shm_passes():
    check = verdicts.shm_check({"path": "/dev/shm", "total": 2 * 2**30, "free": 2**30})
    assert check.status == "ok"
