"""Horovod and DDP jobs across two hosts, as on a small cluster, on one machine.

Each "host" is a Linux network namespace with its own address, hostname, process table
(a PID namespace, so a pid on one host means nothing on another, as on real nodes) and
sshd; the runs folder is bind-mounted at the same path in each, as an NFS export would be.
A bridge in the root namespace joins them like a switch:

    root namespace:  horovodrun (launcher, gloo rendezvous)  --  bridge <IF> 198.18.N.1
                                                                  |              |
    namespace A:  <IF> 198.18.N.2, hostname wbhost-a, sshd   ----+              |
    namespace B:  <IF> 198.18.N.3, hostname wbhost-b, sshd   -------------------+

What horovodrun needs, and what this test found out about it:
- It starts remote ranks over ssh and first checks each host with
  `ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no HOST true`. We put an
  `ssh` first on PATH that adds `-F <generated config>` (a generated key, no known_hosts),
  so root's own ~/.ssh is never touched.
- It finds the network interface that all hosts share by name, then uses that interface's
  address *on the launcher* for the rendezvous. So the bridge in the root namespace has
  the same name as the interface inside each namespace.
- Gloo in Horovod 0.28.1 binds each rank to the address its *hostname* resolves to
  (HOROVOD_GLOO_IFACE alone did not change that here). So each namespace gets its own
  hostname (a UTS namespace) and an /etc/hosts (bind-mounted in a private mount
  namespace) that maps both hostnames to their namespace addresses, as a cluster's DNS
  would. With Debian's usual `127.0.1.1 <hostname>` line instead, rank 1 tries to reach
  rank 0 at 127.0.1.1 and the job fails with "Connection refused".

- In its own PID namespace each host's first process is a shell that starts sshd and
  waits (so it reaps orphans, as init does); `unshare --kill-child` ends the namespace,
  and with it every process left in it, when the test ends.

198.18.0.0/15 is the range reserved for network benchmarks (RFC 2544): it never leaves
this machine. Needs root; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _netns import end_host, free_subnet, quiet, remove_stale
from _setup_helpers import run_reaped

import workbench
from workbench.records import MetricsReader, events, of_kind

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0,
                       reason="needs root: creates network namespaces and runs sshd in them"),
]

VENV_BIN = Path(sys.executable).parent
SSHD = "/usr/sbin/sshd"


@dataclass
class Host:
    name: str         # hostname inside the namespace
    address: str      # IPv4 address of its interface
    netns: str        # network namespace name
    sshd: subprocess.Popen | None = None

    def processes(self) -> list[tuple[int, str]]:
        """(pid as seen from the root namespace, command line) of each process on the host."""
        out = []
        for pid in subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True,
                                  text=True).stdout.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            out.append((int(pid), cmd.decode(errors="replace").strip()))
        return out

    def job_processes(self) -> list[tuple[int, str]]:
        """Processes on the host other than its init shell and sshd."""
        return [(pid, cmd) for pid, cmd in self.processes()
                if cmd and not cmd.startswith(("sh -c hostname", SSHD, "unshare", "sshd"))]


@dataclass
class Cluster:
    hosts: list[Host]
    bin_dir: Path     # holds the `ssh` wrapper: put it first on PATH
    interface: str
    log_dir: Path
    runs: Path        # the shared runs folder, mounted at the same path on every host
    cleanup: list = field(default_factory=list)

    def env(self) -> dict[str, str]:
        path = f"{self.bin_dir}:{VENV_BIN}:{os.environ.get('PATH', '')}"
        return {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1"}


def sh(*cmd: str) -> None:
    """Run a set-up command; raise with its message if it fails."""
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {result.stderr.strip()}")


def write_ssh_files(folder: Path, subnet: str) -> tuple[Path, Path, Path]:
    """Host and user keys, sshd_config, and the client's ssh config and `ssh` wrapper."""
    folder.mkdir()
    for key in ("host_key", "user_key"):
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key))
    authorized = folder / "authorized_keys"
    shutil.copy(folder / "user_key.pub", authorized)
    authorized.chmod(0o600)
    sshd_config = folder / "sshd_config"
    sshd_config.write_text(
        f"Port 22\nListenAddress 0.0.0.0\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {authorized}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
        "StrictModes no\nPidFile none\n")
    ssh_config = folder / "ssh_config"
    ssh_config.write_text(
        f"Host {subnet}.*\n  IdentityFile {folder / 'user_key'}\n  IdentitiesOnly yes\n"
        "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  BatchMode yes\n"
        "  ConnectTimeout 10\n  LogLevel ERROR\n")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {ssh_config} "$@"\n')
    wrapper.chmod(0o755)
    return sshd_config, ssh_config, bin_dir


def wait_for_ssh(cluster: Cluster, host: Host, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = subprocess.run(["ssh", host.address, "hostname"], capture_output=True,
                                text=True, env=cluster.env(), timeout=30)
        if result.returncode == 0 and result.stdout.strip() == host.name:
            return
        if time.monotonic() > deadline or host.sshd.poll() is not None:
            log = (cluster.log_dir / f"sshd-{host.name}.log").read_text()
            raise RuntimeError(f"sshd on {host.name} did not answer: {result.stderr}\n{log}")
        time.sleep(0.3)


def end_processes_in(netns: str) -> None:
    """Stop whatever still runs in a namespace (a rank that outlived its job)."""
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True,
                          text=True).stdout.split()
    if not pids:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(int(pid), sig)
            except ProcessLookupError:
                pass
        time.sleep(0.5)


def test_names_and_a_subnet_left_by_a_dead_test_process_are_not_taken_again() -> None:
    """A bridge on a /24, and links named as this process names its own, as a killed test
    process with the same pid would leave them: the /24 is skipped, the names removed."""
    tag = os.getpid() % 10000
    first, stale = free_subnet("198.18", tag), f"wbt{tag}v0"
    sh("ip", "link", "add", stale, "type", "bridge")
    try:
        sh("ip", "addr", "add", f"{first}.1/24", "dev", stale)
        sh("ip", "link", "set", stale, "up")
        assert free_subnet("198.18", tag) not in (first, None)
        remove_stale([stale], [])
        assert subprocess.run(["ip", "link", "show", stale], capture_output=True).returncode
        assert free_subnet("198.18", tag) == first
    finally:
        quiet("ip", "link", "del", stale)


@pytest.fixture
def two_hosts(tmp_path: Path) -> Iterator[Cluster]:
    """Two namespaces with sshd, joined by a bridge; everything removed afterwards."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with cluster_of_two(tmp_path, runs) as cluster:
        yield cluster


@contextlib.contextmanager
def cluster_of_two(tmp_path: Path, runs: Path) -> Iterator[Cluster]:
    """Two hosts (see the module docstring) that see `runs` at the same path."""
    missing = [tool for tool in ("ip", "ssh", "ssh-keygen", "unshare") if not shutil.which(tool)]
    missing += [SSHD] if not os.path.exists(SSHD) else []
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run scripts/install_system_deps.sh as root")
    tag = os.getpid() % 10000
    interface = f"wbt{tag}"
    remove_stale([interface, f"{interface}v0", f"{interface}v1"],
                 [f"{interface}-a", f"{interface}-b"])
    subnet = free_subnet("198.18", tag)
    sshd_config, _, bin_dir = write_ssh_files(tmp_path / "ssh", subnet)
    hosts_file = tmp_path / "hosts"
    cluster = Cluster(hosts=[Host("wbhost-a", f"{subnet}.2", f"wbt{tag}-a"),
                             Host("wbhost-b", f"{subnet}.3", f"wbt{tag}-b")],
                      bin_dir=bin_dir, interface=interface, log_dir=tmp_path, runs=runs)
    hosts_file.write_text("127.0.0.1 localhost\n" + "".join(
        f"{h.address} {h.name}\n" for h in cluster.hosts))
    os.makedirs("/run/sshd", exist_ok=True)     # sshd's privilege-separation folder
    try:
        sh("ip", "link", "add", interface, "type", "bridge")
        cluster.cleanup.append(("ip", "link", "del", interface))
        sh("ip", "addr", "add", f"{subnet}.1/24", "dev", interface)
        sh("ip", "link", "set", interface, "up")
        for i, host in enumerate(cluster.hosts):
            outside = f"wbt{tag}v{i}"
            sh("ip", "netns", "add", host.netns)
            cluster.cleanup.append(("ip", "netns", "del", host.netns))
            sh("ip", "link", "add", outside, "type", "veth", "peer", "name", f"wbt{tag}p{i}")
            cluster.cleanup.append(("ip", "link", "del", outside))
            sh("ip", "link", "set", outside, "master", interface)
            sh("ip", "link", "set", outside, "up")
            sh("ip", "link", "set", f"wbt{tag}p{i}", "netns", host.netns)
            sh("ip", "-n", host.netns, "link", "set", f"wbt{tag}p{i}", "name", interface)
            sh("ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", interface)
            sh("ip", "-n", host.netns, "link", "set", interface, "up")
            sh("ip", "-n", host.netns, "link", "set", "lo", "up")
            # Own hostname (UTS namespace), /etc/hosts and runs folder (private mount
            # namespace), process table (PID namespace, with its own /proc). The shell is
            # the namespace's init: it starts sshd, then waits, reaping orphans.
            start = (f"hostname {host.name} && mount --bind {hosts_file} /etc/hosts && "
                     f"mount --bind {runs} {runs} && {SSHD} -D -e -f {sshd_config} & wait")
            with open(tmp_path / f"sshd-{host.name}.log", "wb") as log:
                host.sshd = subprocess.Popen(
                    ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount",
                     "--pid", "--fork", "--kill-child", "--mount-proc",
                     "sh", "-c", start], stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)
        for host in cluster.hosts:
            wait_for_ssh(cluster, host)
        yield cluster
    finally:
        for host in cluster.hosts:
            end_host(host.sshd)
            end_processes_in(host.netns)
        for cmd in reversed(cluster.cleanup):
            quiet(*cmd)


def test_horovod_job_across_two_hosts(two_hosts: Cluster, tmp_path: Path) -> None:
    a, b = two_hosts.hosts
    runs = two_hosts.runs
    cmd = [str(VENV_BIN / "workbench"), "run", "--engine", "horovod",
           "--hosts", f"{a.address}:1,{b.address}:1", "--np", "2", "--model", "mlp",
           "--dataset", "digits", "--epochs", "4", "--lr", "0.1", "--threads-per-rank", "1",
           "--runs-dir", str(runs), "--stall-timeout", "120", "--json"]
    result = run_reaped(cmd, timeout=240, merge=False, env=two_hosts.env())
    run_dirs = list(runs.iterdir()) if runs.exists() else []
    logs = "".join(p.read_text(errors="replace")[-2000:]
                   for d in run_dirs for p in sorted((d / "logs").glob("*.log")))
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}\n{logs}"

    summary = json.loads(result.stdout)
    assert summary["status"] == "succeeded"
    assert summary["hosts"] == [a.name, b.name]      # one rank on each host
    assert json.loads((Path(summary["run_dir"]) / "summary.json").read_text()) == summary

    # Converged: rank 0's epoch loss fell, and the model classifies most digits.
    metrics = MetricsReader(Path(summary["run_dir"])).all()
    starts = {m["rank"]: m["host"] for m in events(metrics, "start")}
    assert starts == {0: a.name, 1: b.name}
    losses = [m["loss"] for m in metrics if m["kind"] == "epoch" and m["rank"] == 0]
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0], losses
    assert summary["last_epoch_accuracy"] > 0.8
    until(lambda: not a.job_processes() and not b.job_processes(), 15, "nothing left")


# ----------------------------------------------------------------- supervision by host
SECRET = "wb-two-host-secret-5e1d"

WAIT_FOR_GO = """
import os, time
from workbench.rank.context import this_rank
ctx = this_rank()
ctx.metric("event", message="env", forwarded=os.environ.get("WB_FORWARDED"),
           secret=os.environ.get("WB_TEST_SECRET"))
end = time.time() + 120
while not (ctx.run_dir / "go").exists() and time.time() < end:
    time.sleep(0.1)
"""

LONG = dict(model="mlp", width=32, dataset="digits", epochs=1000, threads_per_rank=1,
            stall_timeout=120.0)


@pytest.fixture
def on_cluster(two_hosts: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cluster:
    """Jobs started from this test process reach the hosts through the ssh wrapper."""
    monkeypatch.setenv("PATH", two_hosts.env()["PATH"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "wb_wait_for_go.py").write_text(WAIT_FOR_GO)
    monkeypatch.setenv("PYTHONPATH", f"{mods}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return two_hosts


def until(predicate, timeout: float, what: str) -> float:
    """Wait for `predicate`; return the seconds it took."""
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            left = [p for netns in ("a", "b") for p in _processes_in_netns_named(netns)]
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; "
                                 f"processes in the hosts' namespaces: {left}")
        time.sleep(0.1)
    return time.monotonic() - began


def _processes_in_netns_named(suffix: str) -> list[str]:
    """Command lines of the processes in this test's namespaces ending in -<suffix>."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    tag = f"wbt{os.getpid() % 10000}-{suffix}"
    if tag not in names:
        return []
    return [cmd for _, cmd in Host("", "", tag).job_processes()]


def ranks_on(host: Host, job: workbench.Job) -> list[int]:
    """Root-namespace pids of the job's rank processes (python with the job's run id)."""
    out = []
    for pid, cmd in host.job_processes():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"WORKBENCH_RUN_ID={job.run_id}".encode() in environ and "-m" in cmd \
                and "torch.distributed.run" not in cmd and "python" in cmd.split()[0]:
            out.append(pid)
    return out


def training_started(job: workbench.Job, ranks: int = 2) -> bool:
    return len({r["rank"] for r in of_kind(job.metrics(), "step")}) == ranks


def hosts_of(cluster: Cluster) -> str:
    a, b = cluster.hosts
    return f"{a.address}:1,{b.address}:1"


def test_torch_job_across_two_hosts(on_cluster: Cluster) -> None:
    a, b = on_cluster.hosts
    job = workbench.start(workbench.JobConfig(
        engine="torch", np=2, hosts=hosts_of(on_cluster), model="mlp", dataset="digits",
        epochs=4, lr=0.1, threads_per_rank=1, runs_dir=str(on_cluster.runs)))
    status = job.wait(240)
    logs = "".join(p.read_text(errors="replace")[-2000:]
                   for p in sorted((job.run_dir / "logs").glob("*.log")))
    assert status == "succeeded", f"{job.summary}\n{logs}"
    assert {m["host"] for m in events(job.metrics(), "start")} == {a.name, b.name}
    losses = [m["loss"] for m in of_kind(job.metrics(), "epoch") if m["rank"] == 0]
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0], losses
    until(lambda: not a.job_processes() and not b.job_processes(), 15, "nothing left")


@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_stop_ends_the_ranks_on_both_hosts(on_cluster: Cluster, engine: str) -> None:
    a, b = on_cluster.hosts
    job = workbench.start(workbench.JobConfig(engine=engine, np=2, hosts=hosts_of(on_cluster),
                                              runs_dir=str(on_cluster.runs), **LONG))
    until(lambda: training_started(job), 120, "training to start on both hosts")
    assert ranks_on(a, job) and ranks_on(b, job)
    began = time.monotonic()
    job.stop()
    assert time.monotonic() - began <= 5.0
    assert job.status == "stopped"
    took = until(lambda: not a.job_processes() and not b.job_processes(), 15,
                 "every process on both hosts to end")
    print(f"{engine}: stop returned in {time.monotonic() - began - took:.1f} s; "
          f"remote ranks gone {took:.1f} s later")


def test_kill_9_on_host_b_fails_the_job_naming_rank_1(on_cluster: Cluster) -> None:
    a, b = on_cluster.hosts
    job = workbench.start(workbench.JobConfig(engine="horovod", np=2,
                                              hosts=hosts_of(on_cluster),
                                              runs_dir=str(on_cluster.runs), **LONG))
    until(lambda: training_started(job), 120, "training to start on both hosts")
    [victim] = ranks_on(b, job)
    os.kill(victim, signal.SIGKILL)
    until(lambda: job.done, 15, "the job to fail")
    failure = job.summary["failure"]
    assert job.status == "failed" and failure["rank"] == 1, failure
    assert "ended without reporting" in failure["error"]
    until(lambda: not a.job_processes() and not b.job_processes(), 15,
          "every process on both hosts to end")


@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_no_secret_reaches_either_host_and_env_names_reach_the_ranks(
        on_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    a, b = on_cluster.hosts
    monkeypatch.setenv("WB_TEST_SECRET", SECRET)
    job = workbench.start_module(engine, 2, "wb_wait_for_go", hosts=hosts_of(on_cluster),
                                 runs_dir=str(on_cluster.runs),
                                 env=["WB_FORWARDED=forwarded-value"])
    try:
        until(lambda: ranks_on(a, job) and ranks_on(b, job), 120, "a rank on each host")
        launcher_side = [p.pid for p in job_processes_here(job)]
        on_hosts = [pid for host in (a, b) for pid, _ in host.job_processes()]
        assert launcher_side and on_hosts
        for pid in launcher_side + on_hosts:  # horovodrun/ssh here; shells and ranks there
            try:
                seen = (Path(f"/proc/{pid}/environ").read_bytes()
                        + Path(f"/proc/{pid}/cmdline").read_bytes())
            except OSError:
                continue  # ended meanwhile
            assert SECRET.encode() not in seen, Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        (job.run_dir / "go").write_text("")
    assert job.wait(60) == "succeeded", job.summary
    seen = [r for r in events(job.metrics(), "env")]
    assert [(r["forwarded"], r["secret"]) for r in seen] == [("forwarded-value", None)] * 2
    until(lambda: not a.job_processes() and not b.job_processes(), 15, "nothing left")


def job_processes_here(job: workbench.Job):
    """The job's processes on the launcher's host: the launcher, its ssh clients, ..."""
    from workbench.launch.launchers import job_processes

    return job_processes(job.run_id, job.launcher_pid)


def test_remote_ranks_leave_when_their_owner_dies(on_cluster: Cluster) -> None:
    """Kill -9 the process that started the job: nothing on either host outlives it long
    (the ranks see the owner's heartbeat go stale; no pid of the owner means anything there)."""
    a, b = on_cluster.hosts
    script = (
        "import time, workbench\n"
        f"job = workbench.start(workbench.JobConfig(engine='horovod', np=2, "
        f"hosts={hosts_of(on_cluster)!r}, runs_dir={str(on_cluster.runs)!r}, **{LONG!r}))\n"
        "print(job.run_dir, flush=True)\n"
        "time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        run_dir = Path(owner.stdout.readline().strip())
        until(lambda: len({r["rank"] for r in of_kind(MetricsReader(run_dir).all(), "step")})
              == 2, 120, "training to start on both hosts")
    finally:
        owner.kill()
        owner.wait()
    took = until(lambda: not a.job_processes() and not b.job_processes(), 15,
                 "the ranks on both hosts to leave after their owner died")
    print(f"remote ranks gone {took:.1f} s after their owner was killed")
    assert workbench.load_run(run_dir).status == "lost"
