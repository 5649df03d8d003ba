"""A two-node Slurm cluster on one machine, for the multi-node tests of `--launcher slurm`.

Each node is a host of its own, as in tests/launch/test_two_hosts.py: a network namespace (own
address on a bridge), a UTS namespace (own hostname), a mount namespace (own /etc/hosts, the
runs folder bind-mounted at the same path) and a PID namespace (its pids mean nothing on the
other node). Each runs its own `slurmd` and `sshd` (horovodrun starts the other node's
ranks over ssh); one `slurmctld` and one `munged` run in the root namespace, on the bridge:

    root namespace:  slurmctld, munged, sbatch/squeue  --  bridge 198.18.N.1 (hostname: ctl)
    node A:  wbnode-a 198.18.N.2, slurmd, sshd
    node B:  wbnode-b 198.18.N.3, slurmd, sshd

Everything lives in one folder the fixture makes and removes; the ports (16827, 16828)
differ from scripts/local_slurm.sh's, so both clusters can run at once. Needs root,
Debian's slurm-wlm and munge, iproute2 and openssh-server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from _netns import end_host, free_subnet, remove_stale

CTLD_PORT = 16827
NODES = ("wbnode-a", "wbnode-b")
SSHD = "/usr/sbin/sshd"


@dataclass
class Node:
    name: str
    address: str
    netns: str
    init: subprocess.Popen | None = None

    def pids(self) -> list[int]:
        """Pids (as seen from the root namespace) of every process on the node."""
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True,
                             text=True).stdout.split()
        return [int(p) for p in out]


@dataclass
class SlurmNodes:
    folder: Path
    conf: Path
    nodes: list[Node]
    bin_dir: Path
    runs: Path
    cleanup: list = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The environment to submit from: this cluster's SLURM_CONF, the ssh wrapper."""
        path = f"{self.bin_dir}:{os.environ.get('PATH', '')}"
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": path}


def _sh(*cmd: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")


def _conf(folder: Path, ctl: str, subnet: str) -> str:
    nodes = "".join(f"NodeName={n} NodeAddr={subnet}.{i + 2} CPUs=1 RealMemory=2000 "
                    "State=UNKNOWN\n" for i, n in enumerate(NODES))
    return f"""ClusterName=wbnodes
SlurmctldHost={ctl}({subnet}.1)
SlurmctldPort={CTLD_PORT}
SlurmdPort={CTLD_PORT + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.socket
StateSaveLocation={folder}/state/ctld
SlurmdSpoolDir={folder}/state/slurmd-%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=100000,batch_sched_delay=0
MpiDefault=none
ReturnToService=2
KillWait=2
MinJobAge=300
{nodes}PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


def _ssh_files(folder: Path, names: list[str]) -> tuple[Path, Path]:
    """sshd_config (host key, our user key authorized) and an `ssh` wrapper using them."""
    folder.mkdir()
    for key in ("host_key", "user_key"):
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key))
    shutil.copy(folder / "user_key.pub", folder / "authorized_keys")
    (folder / "authorized_keys").chmod(0o600)
    sshd_config = folder / "sshd_config"
    sshd_config.write_text(
        f"Port 22\nListenAddress 0.0.0.0\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
        "StrictModes no\nPidFile none\nAcceptEnv *\n")
    ssh_config = folder / "ssh_config"
    ssh_config.write_text(
        f"Host {' '.join(names)} 198.19.*\n  IdentityFile {folder / 'user_key'}\n"
        "  IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n"
        "  BatchMode yes\n  ConnectTimeout 10\n  LogLevel ERROR\n")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {ssh_config} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    return sshd_config, bin_dir


@contextmanager
def slurm_nodes(folder: Path, runs: Path) -> Iterator[SlurmNodes]:
    """Start the two-node cluster (see the module docstring); stop and remove it after."""
    tag = os.getpid() % 10000
    bridge = f"wbs{tag}"
    remove_stale([bridge, f"{bridge}v0", f"{bridge}v1"], [f"{bridge}-0", f"{bridge}-1"])
    subnet = free_subnet("198.19", tag)
    ctl = socket.gethostname()
    for sub in ("munge", "state/ctld", "log", *(f"state/slurmd-{n}" for n in NODES)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    conf = folder / "slurm.conf"
    conf.write_text(_conf(folder, ctl, subnet))
    hosts = folder / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + f"{subnet}.1 {ctl}\n" + "".join(
        f"{subnet}.{i + 2} {n}\n" for i, n in enumerate(NODES)))
    sshd_config, bin_dir = _ssh_files(folder / "ssh", list(NODES))
    cluster = SlurmNodes(folder, conf, [Node(n, f"{subnet}.{i + 2}", f"{bridge}-{i}")
                                        for i, n in enumerate(NODES)], bin_dir, runs)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    os.makedirs("/run/sshd", exist_ok=True)
    try:
        _sh("mungekey", "--create", f"--keyfile={folder}/munge/munge.key")
        _sh("munged", "--force", f"--socket={folder}/munge/munge.socket",
            f"--key-file={folder}/munge/munge.key", f"--pid-file={folder}/munged.pid",
            f"--log-file={folder}/log/munged.log", f"--seed-file={folder}/munge/seed")
        cluster.cleanup.append(("pidfile", folder / "munged.pid"))
        _sh("ip", "link", "add", bridge, "type", "bridge")
        cluster.cleanup.append(("cmd", ("ip", "link", "del", bridge)))
        _sh("ip", "addr", "add", f"{subnet}.1/24", "dev", bridge)
        _sh("ip", "link", "set", bridge, "up")
        subprocess.run(["slurmctld", "-i"], env=env, check=True, capture_output=True)
        cluster.cleanup.append(("pidfile", folder / "slurmctld.pid"))
        for i, node in enumerate(cluster.nodes):
            outside, inside = f"{bridge}v{i}", f"{bridge}p{i}"
            _sh("ip", "netns", "add", node.netns)
            cluster.cleanup.append(("cmd", ("ip", "netns", "del", node.netns)))
            _sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            cluster.cleanup.append(("cmd", ("ip", "link", "del", outside)))
            _sh("ip", "link", "set", outside, "master", bridge)
            _sh("ip", "link", "set", outside, "up")
            _sh("ip", "link", "set", inside, "netns", node.netns)
            # horovodrun wants an interface of the same name on every host: the bridge's.
            _sh("ip", "-n", node.netns, "link", "set", inside, "name", bridge)
            _sh("ip", "-n", node.netns, "addr", "add", f"{node.address}/24", "dev", bridge)
            _sh("ip", "-n", node.netns, "link", "set", bridge, "up")
            _sh("ip", "-n", node.netns, "link", "set", "lo", "up")
            start = (f"hostname {node.name} && mount --bind {hosts} /etc/hosts && "
                     f"mount --bind {runs} {runs} && {SSHD} -D -e -f {sshd_config} & "
                     f"SLURM_CONF={conf} slurmd -D -N {node.name} & wait")
            with open(folder / "log" / f"init-{node.name}.log", "wb") as log:
                node.init = subprocess.Popen(
                    # nsenter, not `ip netns exec`: that mounts a sysfs of the namespace's
                    # own, without the cgroup file system slurmd reads.
                    ["nsenter", f"--net=/run/netns/{node.netns}", "unshare", "--uts", "--mount",
                     "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c", start],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_idle(cluster, env)
        yield cluster
    finally:
        _stop(cluster)


def _wait_idle(cluster: SlurmNodes, env: dict[str, str], timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True,
                             text=True, env=env).stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        if all(states.get(n) == "idle" for n in NODES):
            return
        time.sleep(0.5)
    logs = "\n".join(p.read_text()[-800:] for p in (cluster.folder / "log").glob("*.log"))
    raise RuntimeError(f"the two Slurm nodes did not come up: {states}\n{logs}")


def _stop(cluster: SlurmNodes) -> None:
    for node in cluster.nodes:
        end_host(node.init)
    for kind, what in reversed(cluster.cleanup):
        if kind == "pidfile":
            try:
                pid = int(Path(what).read_text().split()[0])
                if Path(f"/proc/{pid}/comm").read_text().strip() in ("munged", "slurmctld"):
                    os.kill(pid, 15)
                    for _ in range(50):
                        if not Path(f"/proc/{pid}").exists():
                            break
                        time.sleep(0.1)
            except (OSError, ValueError, IndexError):
                pass
        else:
            subprocess.run(what, capture_output=True, timeout=30)
