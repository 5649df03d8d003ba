"""Helpers for the set-up tests: run a command and reap every process it started."""

from __future__ import annotations

import subprocess

import psutil


def end_tree(pid: int) -> None:
    """End process `pid` and all its descendants: SIGTERM, then SIGKILL after 5 s.

    horovodrun starts each rank in a session of its own, so ending the launcher's process
    group is not enough; we collect the whole tree first, then end it.
    """
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in tree:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=5)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def run_reaped(cmd: list[str], timeout: float, merge: bool = True,
               **kwargs) -> subprocess.CompletedProcess:
    """Run `cmd` to the end and return its result (with `merge`, stderr is in `.stdout`
    too); whatever happens, timeout included, nothing it started is left running."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        end_tree(proc.pid)
        proc.communicate()
