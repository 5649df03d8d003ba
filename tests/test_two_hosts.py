"""A Horovod job across two hosts, as on a small cluster, on one machine.

Each "host" is a Linux network namespace with its own address, hostname and sshd; a
bridge in the root namespace joins them like a switch:

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

198.18.0.0/15 is the range reserved for network benchmarks (RFC 2544): it never leaves
this machine. Needs root; skipped otherwise.
"""

from __future__ import annotations

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
from _setup_helpers import run_reaped

from workbench.records import events

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


@dataclass
class Cluster:
    hosts: list[Host]
    bin_dir: Path     # holds the `ssh` wrapper: put it first on PATH
    interface: str
    log_dir: Path
    cleanup: list = field(default_factory=list)

    def env(self) -> dict[str, str]:
        path = f"{self.bin_dir}:{VENV_BIN}:{os.environ.get('PATH', '')}"
        return {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1"}


def sh(*cmd: str) -> None:
    """Run a set-up command; raise with its message if it fails."""
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {result.stderr.strip()}")


def quiet(*cmd: str) -> None:
    """Run a clean-up command, ignoring failures (the thing may already be gone)."""
    subprocess.run(cmd, capture_output=True, timeout=30)


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
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(int(pid), sig)
            except ProcessLookupError:
                pass
        time.sleep(0.5)


@pytest.fixture
def two_hosts(tmp_path: Path) -> Iterator[Cluster]:
    """Two namespaces with sshd, joined by a bridge; everything removed afterwards."""
    missing = [tool for tool in ("ip", "ssh", "ssh-keygen", "unshare") if not shutil.which(tool)]
    missing += [SSHD] if not os.path.exists(SSHD) else []
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run scripts/install_system_deps.sh as root")
    tag = os.getpid() % 10000
    subnet = f"198.18.{tag % 250 + 1}"
    interface = f"wbt{tag}"
    sshd_config, _, bin_dir = write_ssh_files(tmp_path / "ssh", subnet)
    hosts_file = tmp_path / "hosts"
    cluster = Cluster(hosts=[Host("wbhost-a", f"{subnet}.2", f"wbt{tag}-a"),
                             Host("wbhost-b", f"{subnet}.3", f"wbt{tag}-b")],
                      bin_dir=bin_dir, interface=interface, log_dir=tmp_path)
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
            # Own hostname (UTS namespace) and /etc/hosts (private mount namespace);
            # `exec` keeps one process, so sshd.pid is sshd's own pid.
            start = (f"hostname {host.name} && mount --bind {hosts_file} /etc/hosts && "
                     f"exec {SSHD} -D -e -f {sshd_config}")
            with open(tmp_path / f"sshd-{host.name}.log", "wb") as log:
                host.sshd = subprocess.Popen(
                    ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount",
                     "sh", "-c", start], stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)
        for host in cluster.hosts:
            wait_for_ssh(cluster, host)
        yield cluster
    finally:
        for host in cluster.hosts:
            if host.sshd is not None and host.sshd.poll() is None:
                host.sshd.terminate()
                try:
                    host.sshd.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    host.sshd.kill()
                    host.sshd.wait(timeout=5)
            end_processes_in(host.netns)
        for cmd in reversed(cluster.cleanup):
            quiet(*cmd)


def test_horovod_job_across_two_hosts(two_hosts: Cluster, tmp_path: Path) -> None:
    a, b = two_hosts.hosts
    runs = tmp_path / "runs"
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
    metrics = [json.loads(line)
               for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    starts = {m["rank"]: m["host"] for m in events(metrics, "start")}
    assert starts == {0: a.name, 1: b.name}
    losses = [m["loss"] for m in metrics if m["kind"] == "epoch" and m["rank"] == 0]
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0], losses
    assert summary["last_epoch_accuracy"] > 0.8
