"""Jobs through a real two-node Slurm cluster: one rank per node, from the CLI and a notebook.

The cluster (tests/_slurm_nodes.py) is two hosts in namespaces on this machine, each with
its own slurmd and sshd, one slurmctld, and the runs folder at the same path on both, as a
cluster's shared file system would be. The module starts it and stops it after.

- Horovod from the CLI, `--nodes 2`: horovodrun runs on the first node and starts the
  second node's rank over ssh; each node runs one rank, and the job trains.
- DDP from a notebook (a real kernel, nbclient), `nodes=2`: srun starts one task per node;
  `kill -9` of the rank on the second node fails the job, naming rank 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _slurm_nodes import slurm_nodes

from workbench.records import MetricsReader, events

VENV_BIN = Path(sys.executable).parent


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root: creates network namespaces and runs slurmd and sshd in them"
    missing = [p for p in ("slurmctld", "slurmd", "munged", "sbatch", "ip", "nsenter")
               if not shutil.which(p) and not Path(f"/usr/sbin/{p}").exists()]
    if not Path("/usr/sbin/sshd").exists():
        missing.append("sshd")
    return (f"needs {', '.join(missing)}: run scripts/install_system_deps.sh as root"
            if missing else None)


pytestmark = [pytest.mark.root,
              pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


@pytest.fixture(scope="module")
def nodes() -> Iterator:
    base = Path(tempfile.mkdtemp(prefix="wb-slurm-nodes-", dir="/tmp"))
    runs = base / "runs"
    runs.mkdir()
    try:
        with slurm_nodes(base / "slurm", runs) as cluster:
            yield cluster
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(400)
def test_horovod_through_slurm_runs_one_rank_per_node(nodes) -> None:
    result = subprocess.run(
        [str(VENV_BIN / "workbench"), "run", "--launcher", "slurm", "--engine", "horovod",
         "--np", "2", "--nodes", "2", "--model", "mlp", "--dataset", "digits", "--epochs",
         "3", "--threads-per-rank", "1", "--runs-dir", str(nodes.runs), "--json"],
        capture_output=True, text=True, timeout=380, env=nodes.env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "succeeded" and summary["slurm_state"] == "COMPLETED"
    assert summary["hosts"] == ["wbnode-a", "wbnode-b"]
    metrics = MetricsReader(Path(summary["run_dir"])).all()
    assert {m["rank"]: m["host"] for m in events(metrics, "start")} == {0: "wbnode-a",
                                                                        1: "wbnode-b"}
    log = (Path(summary["run_dir"]) / "logs" / "launcher.log").read_text()
    assert "on nodes wbnode-a,wbnode-b" in log


NOTEBOOK = [
    """import json, subprocess, time, workbench
job = workbench.start(workbench.JobConfig(engine="torch", np=2, nodes=2, launcher="slurm",
                                          epochs=500, threads_per_rank=1, runs_dir=RUNS))""",
    """def training():  # {rank: host} of the ranks that have taken a step
    metrics = job.metrics()
    hosts = {m["rank"]: m["host"] for m in metrics if m.get("message") == "start"}
    return {m["rank"]: hosts.get(m["rank"]) for m in metrics if m["kind"] == "step"}
end = time.time() + 300
while training() != {0: "wbnode-a", 1: "wbnode-b"}:
    assert time.time() < end and not job.done, job.status
    time.sleep(0.5)""",
    """# kill -9 the rank on the second node (its pid, as this namespace sees it)
pids = subprocess.run(["ip", "netns", "pids", NETNS_B], capture_output=True,
                      text=True).stdout.split()
ranks = [p for p in pids
         if open(f"/proc/{p}/cmdline", "rb").read().split(b"\\0")[1:3] == [b"-u", b"-m"]]
assert len(ranks) == 1, ranks
subprocess.run(["kill", "-9", ranks[0]], check=True)
status = job.wait(90)
json.dump({"status": status, "summary": job.summary}, open(OUT, "w"))""",
]


@pytest.mark.timeout(500)
def test_ddp_from_a_notebook_fails_naming_the_rank_killed_on_the_second_node(
        nodes, tmp_path: Path, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    out = tmp_path / "out.json"
    setup = (f"RUNS = {str(nodes.runs)!r}; NETNS_B = {nodes.nodes[1].netns!r}; "
             f"OUT = {str(out)!r}")
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup)] + [
        nbformat.v4.new_code_cell(src) for src in NOTEBOOK])
    for key, value in nodes.env().items():
        monkeypatch.setenv(key, value)
    NotebookClient(book, timeout=450, kernel_name="python3").execute()
    seen = json.loads(out.read_text())
    assert seen["status"] == "failed", seen
    failure = seen["summary"]["failure"]
    assert failure["rank"] == 1, failure
    assert "rank 1" in failure["error"] and "without reporting" in failure["error"], failure
    assert seen["summary"]["hosts"] == ["wbnode-a", "wbnode-b"]
    squeue = subprocess.run(["squeue", "-h"], capture_output=True, text=True,
                            env=nodes.env()).stdout
    assert not squeue.strip(), squeue
