"""Start a DistributedDataParallel job on several hosts: one `torchrun` per host, over ssh.

    python -m workbench.launch.torch_hosts --hosts a:2,b:2 --np 4 --rdzv-id RUN -- -m MODULE

One host's failure ends the others; how they meet: docs/ARCHITECTURE.md, "Supervision".
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

import psutil

from workbench.hosts.lists import parse_hosts

SSH = ["ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no"]
FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


def free_port(host: str) -> int:
    try:
        out = subprocess.run(host_command(host, [sys.executable, "-c", FREE_PORT]),
                             capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        words = out.stdout.split() or ["none"]
        if out.returncode == 0 and words[-1].isdigit():
            return int(words[-1])
        why = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired) as err:
        why = str(err)
    raise SystemExit(f"torch_hosts: cannot ask {host} for a free port: {why}")


def allocate(hosts: str, np: int) -> list[tuple[str, int]]:
    """(host, ranks) in host order, filling each host's slots until `np` ranks are placed."""
    out, left = [], np
    for host, slots in parse_hosts(hosts).items():
        if left > 0:
            out.append((host, min(slots, left)))
            left -= out[-1][1]
    return out


def is_local(host: str) -> bool:
    try:
        address = socket.gethostbyname(host)
    except (OSError, UnicodeError):  # not resolvable, or not a valid name ("a..b")
        return False
    local = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    return address in local or address.startswith("127.")


def torchrun_command(nnodes: int, nproc: int, endpoint: str, rdzv_id: str,
                     program: list[str], is_host: bool) -> list[str]:
    """One host's torchrun; `is_host`: this one hosts the rendezvous (and must bind)."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
            f"--nproc-per-node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={rdzv_id}", f"--rdzv-conf=is_host={str(is_host).lower()}", *program]


def host_command(host: str, command: list[str]) -> list[str]:
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
    endpoint = f"{plan[0][0]}:{free_port(plan[0][0])}"
    print(f"torch_hosts: rendezvous at {endpoint}, hosted by the torchrun on {plan[0][0]} "
          "(is_host=true)", file=sys.stderr, flush=True)
    procs = [subprocess.Popen(host_command(host, torchrun_command(
        len(plan), n, endpoint, args.rdzv_id, program, is_host=i == 0)),
        stdin=subprocess.DEVNULL) for i, (host, n) in enumerate(plan)]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        while True:
            codes = [p.poll() for p in procs]
            if failed := [c for c in codes if c not in (None, 0)]:
                print(f"torch_hosts: a host's torchrun exited with code {failed[0]}; ending "
                      "the others", file=sys.stderr, flush=True)
                return failed[0]
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.2)
    finally:
        for p in procs:
            p.terminate()  # (not one already reaped)


if __name__ == "__main__":
    sys.exit(main())
