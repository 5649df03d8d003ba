"""Two hosts whose shared runs folder behaves like NFS, not like one local disk.

The hosts of test_two_hosts.py see one local file system, so they cannot catch what a
cluster's NFS does to a job's supervision. Here the runs folder is served by
`_nfs_like.py`, a FUSE layer that gives each host (each PID namespace, the launcher's
included) its own caches, as NFS clients have: a folder's listing stays stale for 30 s,
and a file that the watcher looked for before another host made it stays "missing" for
30 s. And it can stall, as a file server that stops answering does.

- A rank on host B that fails is blamed with its own error at once, though the watcher's
  host cannot list (or even look up) B's new exit record for half a minute: each rank's
  final status goes into its heartbeat, a file the watcher's host made and reads.
- A 12 s stall of the file server ends nothing: no heartbeat could change meanwhile, on
  any host, and time in which a reader could not look does not count as silence.

Needs root, FUSE (/dev/fuse, `fusermount3` from Debian's fuse3) and mfusepy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_two_hosts import SSHD, Cluster, cluster_of_two, hosts_of, ranks_on, until

import workbench

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0,
                       reason="needs root: creates network namespaces and mounts FUSE"),
]

CACHE_S = 30.0  # NFS's acdirmin; its default acdirmax is 60 s

FAIL_ON_B = """
import os, time
from pathlib import Path
from workbench.rank.context import this_rank
ctx = this_rank()
go = Path(os.environ["WB_GO"])   # outside the runs folder: seen at once on every host
while not go.exists():
    time.sleep(0.05)
if str(ctx.rank) == os.environ.get("WB_FAIL_RANK"):
    raise RuntimeError(f"rank {ctx.rank} failed on purpose, on host b")
end = time.time() + 120
while time.time() < end and go.read_text() != "end":
    time.sleep(0.1)
"""


@pytest.fixture
def nfs_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """test_two_hosts.py's two hosts, the runs folder served by _nfs_like.py."""
    missing = [tool for tool in ("ip", "ssh", "unshare", "fusermount3") if not shutil.which(tool)]
    missing += [path for path in (SSHD, "/dev/fuse") if not os.path.exists(path)]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run scripts/install_system_deps.sh as root")
    store, runs = tmp_path / "store", tmp_path / "runs"
    store.mkdir()
    runs.mkdir()
    stall = tmp_path / "stall"
    with open(tmp_path / "nfs.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, str(Path(__file__).parents[1] / "_nfs_like.py"), str(store),
             str(runs), "--cache-s", str(CACHE_S), "--stall-flag", str(stall)],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        until(lambda: os.path.ismount(runs) or server.poll() is not None, 15, "the FUSE mount")
        assert server.poll() is None, (tmp_path / "nfs.log").read_text()
        mods = tmp_path / "mods"
        mods.mkdir()
        (mods / "wb_fail_on_b.py").write_text(FAIL_ON_B)
        with cluster_of_two(tmp_path, runs) as cluster:
            monkeypatch.setenv("PATH", cluster.env()["PATH"])
            monkeypatch.setenv("OMP_NUM_THREADS", "1")
            monkeypatch.setenv("PYTHONPATH",
                               f"{mods}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
            cluster.stall = stall
            yield cluster
    finally:
        stall.unlink(missing_ok=True)
        subprocess.run(["fusermount3", "-u", "-z", str(runs)], capture_output=True, timeout=30)
        server.terminate()
        server.wait(timeout=10)


def start(cluster: Cluster, engine: str, go: Path, *env: str) -> workbench.Job:
    """Ranks that wait for `go` to exist (outside the runs folder: seen at once everywhere),
    then fail if WB_FAIL_RANK names them, else wait for `go` to say "end"."""
    return workbench.start_module(engine, 2, "wb_fail_on_b", hosts=hosts_of(cluster),
                                  runs_dir=str(cluster.runs), env=[f"WB_GO={go}", *env])


@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_a_failed_rank_on_host_b_is_blamed_though_its_new_files_are_not_seen_yet(
        nfs_cluster: Cluster, tmp_path: Path, engine: str) -> None:
    a, b = nfs_cluster.hosts
    job = start(nfs_cluster, engine, tmp_path / "go", "WB_FAIL_RANK=1")
    until(lambda: ranks_on(a, job) and ranks_on(b, job), 120, "a rank on each host")
    time.sleep(1.0)  # the watcher has looked for the exit records by now: "missing" is cached
    began = time.monotonic()
    (tmp_path / "go").write_text("go")
    assert job.wait(60) == "failed", job.summary
    failure = job.summary["failure"]
    assert failure["rank"] == 1 and "rank 1 failed on purpose, on host b" in failure["error"], (
        failure)
    assert time.monotonic() - began < CACHE_S / 2  # not by waiting out the cache
    assert {r["host"] for r in job.summary["ranks"].values()} == {a.name, b.name}
    until(lambda: not a.job_processes() and not b.job_processes(), 15, "nothing left")


def test_a_stalled_file_server_ends_no_rank(nfs_cluster: Cluster, tmp_path: Path) -> None:
    a, b = nfs_cluster.hosts
    go = tmp_path / "go"
    go.write_text("")                   # both ranks past the gate: no one fails on purpose
    job = start(nfs_cluster, "horovod", go)
    until(lambda: ranks_on(a, job) and ranks_on(b, job), 120, "a rank on each host")
    time.sleep(2.0)                     # both watchdogs have read the owner's heartbeat
    nfs_cluster.stall.write_text("")    # the server stops answering, for every host ...
    time.sleep(12.0)                    # ... longer than OWNER_STALE_S and RANK_STALE_S
    nfs_cluster.stall.unlink()
    time.sleep(3.0)
    assert job.status == "running", job.summary
    assert ranks_on(a, job) and ranks_on(b, job)
    go.write_text("end")
    assert job.wait(60) == "succeeded", job.summary
    until(lambda: not a.job_processes() and not b.job_processes(), 15, "nothing left")
