"""Start a DistributedDataParallel job on several hosts: one `torchrun` per host, over ssh.

    python -m workbench.jobs.torch_hosts --hosts a:2,b:2 --np 4 --rdzv-id RUN -- -m MODULE

This is what `horovodrun -H` does for Horovod, and no more: for each host it runs

    ssh HOST 'cd CWD; exec env -i K=V ... python -m torch.distributed.run
              --nnodes=N --nproc-per-node=SLOTS --rdzv-backend=c10d
              --rdzv-endpoint=FIRST_HOST:PORT --rdzv-id=RUN -m MODULE'

and waits. The torchruns meet in a c10d rendezvous hosted by the one on the first host,
which assigns the ranks. If one host's torchrun fails, the others are ended, so the job
fails as a whole (as horovodrun does).

`env -i` starts the remote command with nothing but the variables this launcher was given,
which the job already cut down to the allow-list plus its `env` field (jobs/environment.py):
no secret of the notebook's environment reaches the remote host or its `ps`.

The rendezvous port is derived from the run id (29500-29999): the first host is remote and
cannot be asked for a free port from here.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import zlib

import psutil

from workbench.config import parse_hosts

SSH = ["ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no"]


def rendezvous_port(run_id: str) -> int:
    """A port for the c10d rendezvous, the same on every host for one run."""
    return 29500 + zlib.crc32(run_id.encode()) % 500


def allocate(hosts: str, np: int) -> list[tuple[str, int]]:
    """(host, ranks) in host order, filling each host's slots until `np` ranks are placed."""
    out, left = [], np
    for host, slots in parse_hosts(hosts).items():
        if left == 0:
            break
        out.append((host, min(slots, left)))
        left -= out[-1][1]
    return out


def is_local(host: str) -> bool:
    """True when `host` names this machine (then torchrun runs without ssh)."""
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return False
    local = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    return address in local or address.startswith("127.")


def torchrun_command(nnodes: int, nproc: int, endpoint: str, rdzv_id: str,
                     program: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
            f"--nproc-per-node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={rdzv_id}", *program]


def host_command(host: str, command: list[str]) -> list[str]:
    """The command that runs `command` on `host` with only the allow-listed environment."""
    if is_local(host):
        return command
    env = [f"{k}={v}" for k, v in sorted(os.environ.items())]  # the job's allow-listed set
    remote = (f"cd {shlex.quote(os.getcwd())} >/dev/null 2>&1; "
              f"exec env -i {shlex.join(env)} {shlex.join(command)}")
    return [*SSH, host, remote]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--np", type=int, required=True)
    parser.add_argument("--rdzv-id", required=True)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    plan = allocate(args.hosts, args.np)
    endpoint = f"{plan[0][0]}:{rendezvous_port(args.rdzv_id)}"
    procs = [subprocess.Popen(host_command(host, torchrun_command(
        len(plan), n, endpoint, args.rdzv_id, program)), stdin=subprocess.DEVNULL)
        for host, n in plan]

    def end_all(*_: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.terminate()

    signal.signal(signal.SIGTERM, lambda *_: (end_all(), sys.exit(143)))
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            print(f"torch_hosts: a host's torchrun exited with code {failed[0]}; ending the "
                  "others", file=sys.stderr, flush=True)
            end_all()
            return failed[0]
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
