"""The launcher's guard: end the launcher, or `scancel` a Slurm job by name, when the process
that started the job dies. Standard library only; why: docs/ARCHITECTURE.md, "Supervision".

    kernel (the owner) ── guard ── horovodrun ── ranks
    guard.py OWNER_PID -- LAUNCHER [ARGS...]  |  guard.py OWNER_PID --scancel JOB_NAME
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5   # how often the guard looks at its parent, in seconds
GRACE_S = 5.0  # how long the launcher gets to end its ranks before SIGKILL, in seconds


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0].isdigit() and argv[1] == "--scancel":
        return guard_slurm(int(argv[0]), argv[2])
    if len(argv) < 3 or not argv[0].isdigit() or argv[1] != "--":
        sys.stderr.write("usage: guard.py OWNER_PID -- LAUNCHER [ARGS...]\n"
                         "       guard.py OWNER_PID --scancel JOB_NAME\n")
        return 2
    owner, cmd = int(argv[0]), argv[2:]
    try:
        launcher = subprocess.Popen(cmd)
    except OSError as err:
        sys.stderr.write(f"workbench: cannot start {cmd[0]!r}: {err.strerror or err}\n")
        return 127
    # Job.stop() signals the whole tree, the launcher too: the guard stays for its exit code.
    signal.signal(signal.SIGTERM, lambda *_: None)
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return exit_code(launcher.wait(timeout=POLL_S))
        if os.getppid() != owner:
            sys.stderr.write(f"workbench: the process that started the job (pid {owner}) "
                             "is gone: ending the launcher\n")
            return exit_code(end(launcher))


def guard_slurm(owner: int, name: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the job has ended: nothing to do
    while os.getppid() == owner:
        time.sleep(POLL_S)
    sys.stderr.write(f"workbench: the process that started the job (pid {owner}) is gone: "
                     f"cancelling Slurm job {name}\n")
    cmd = ["scancel", f"--name={name}", f"--user={os.getuid()}"]
    for _ in range(3):  # a busy controller may not answer the first time
        try:
            if subprocess.run(cmd, timeout=30).returncode == 0:
                return 0
        except (OSError, subprocess.TimeoutExpired) as err:
            sys.stderr.write(f"workbench: {cmd[0]} failed: {err}\n")
        time.sleep(2)
    return 1


def end(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM `proc`, SIGKILL it after GRACE_S; its exit code."""
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        return proc.wait(timeout=GRACE_S)
    proc.kill()
    return proc.wait()


def exit_code(returncode: int) -> int:
    """A launcher killed by signal N exits as 128 + N, as a shell reports it."""
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
