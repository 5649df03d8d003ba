"""Sharing one host's cores between jobs: a kernel lock per core, and a queue of tickets.

The settings (`settings()`), why, and what each guarantee rests on: docs/ARCHITECTURE.md,
"Sharing the host's cores".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from workbench.config import ConfigError
from workbench.hosts.cpu import affinity
from workbench.records.private import folder_problem, user_name

ENV_SHARED_DIR = "WORKBENCH_SHARED_DIR"
ENV_WHEN_BUSY = "WORKBENCH_WHEN_BUSY"
ENV_JOBS_PER_USER = "WORKBENCH_JOBS_PER_USER"
TICKET = re.compile(r"(wait|run)-[0-9a-f]{16}")
MAX_TICKET_BYTES = 4096
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_FIX = (f"set {ENV_SHARED_DIR} to a folder owned by root, that every user may write, with "
        "the sticky bit (as root: install -d -m 1777 FOLDER)")


class Settings(NamedTuple):
    folder: Path
    when_busy: str
    jobs_per_user: int  # 0: no limit


def settings() -> Settings:
    """The settings from the environment; a bad one is a one-line ConfigError."""
    folder = Path(os.environ.get(ENV_SHARED_DIR) or "/tmp/workbench-shared")
    when_busy = os.environ.get(ENV_WHEN_BUSY) or "queue"
    if when_busy not in ("queue", "unbound"):
        raise ConfigError(f"invalid {ENV_WHEN_BUSY}={when_busy!r}: expected queue or unbound")
    on_a_hub = any(name.startswith("JUPYTERHUB_") for name in os.environ)
    limit = os.environ.get(ENV_JOBS_PER_USER) or ("1" if on_a_hub else "0")
    if not limit.isdigit():
        raise ConfigError(f"invalid {ENV_JOBS_PER_USER}={limit!r}: expected a whole number "
                          "of running jobs per user (0: no limit)")
    os.close(open_folder(folder))
    return Settings(folder, when_busy, int(limit))


def open_folder(folder: Path) -> int:
    """A descriptor of `folder` (made 1777 if missing), each folder on its path opened
    without following a link, and refused in one line if another user could swap its files."""
    real, fd = Path(os.path.realpath(folder)), -1
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open("/", _DIR)
        for i, part in enumerate(real.parts[1:], start=2):
            made = False
            if i == len(real.parts):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)  # no one else's until its mode is set
                    made = True
            fd, parent = os.open(part, _DIR, dir_fd=fd), fd
            os.close(parent)
            if made:
                os.fchmod(fd, 0o1777)
            if problem := folder_problem(os.fstat(fd)):
                raise ConfigError(f"cannot share cores through {folder}: "
                                  f"{Path(*real.parts[:i])} {problem}: {_FIX}")
    except BaseException as err:
        if fd >= 0:
            os.close(fd)
        if isinstance(err, OSError):
            raise ConfigError(f"cannot share cores through {folder} ({err.strerror}; no link "
                              f"on its path is followed): {_FIX}") from None
        raise
    return fd


@dataclass
class Entry:
    """A live ticket: its user (the file's owner), its place (its ctime), what it asked."""

    name: str
    uid: int
    since_ns: int
    running: bool  # granted: named run-*, not wait-*
    run_id: str = "?"
    n_cores: int = 0
    cores: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        age = time.time() - self.since_ns / 1e9
        return f"{user_name(self.uid)}'s run {self.run_id} ({age:.0f} s)"


def tickets(folder_fd: int) -> list[Entry]:
    """The live tickets in the folder, oldest first; this user's dead ones are removed."""
    out, opener = [], lambda name, _: os.open(name, _READ, dir_fd=folder_fd)
    for name in filter(TICKET.fullmatch, os.listdir(folder_fd)):
        with contextlib.suppress(OSError), open(name, "rb", 0, opener=opener) as file:
            st = os.fstat(file.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TICKET_BYTES:
                continue
            try:
                fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # its job holds it: alive
                entry = Entry(name, st.st_uid, st.st_ctime_ns, name.startswith("run-"))
                with contextlib.suppress(ValueError, TypeError, AttributeError, LookupError):
                    asked = json.loads(file.read(MAX_TICKET_BYTES))
                    entry.run_id, entry.n_cores = str(asked["run_id"])[:80], int(asked["n_cores"])
                    entry.cores = [int(c) for c in asked.get("cores", [])][:4096]
                out.append(entry)
                continue
            if st.st_uid == os.geteuid():  # ours, left by a kernel that died
                os.unlink(name, dir_fd=folder_fd)
    return sorted(out, key=lambda e: (e.since_ns, e.name))


def lock_core(folder_fd: int, core: int) -> int | None:
    """A descriptor holding core `core`'s lock (its file made if missing), or None."""
    name, fd = f"core-{core}", -1
    with contextlib.suppress(OSError):  # held, or made by another job this instant: next time
        try:
            fd = os.open(name, _READ, dir_fd=folder_fd)
        except FileNotFoundError:
            fd = os.open(name, _READ | os.O_CREAT | os.O_EXCL, 0o444, dir_fd=folder_fd)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
    if fd >= 0:
        os.close(fd)
    return None


def core_holder(folder_fd: int, core: int) -> str:
    with contextlib.suppress(OSError):
        st = os.stat(f"core-{core}", dir_fd=folder_fd, follow_symlinks=False)
        device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == device:
                pid = fields[4]
                return f"pid {pid} ({user_name(os.stat(f'/proc/{pid}').st_uid)})"
    return "another process"


class Ticket:
    """One job's place in the queue, then its cores until released (`n_cores` 0: it only
    counts towards its user's limit); `reason` says what it waits for."""

    def __init__(self, run_id: str | None, n_cores: int, sharing: Settings) -> None:
        self.n_cores, self.sharing = n_cores, sharing
        self.cores: list[int] | None = None   # once granted: the cores ([] = unbound)
        self.warning: str | None = None       # once granted without cores of its own: why
        self.reason = "its turn"
        self.position = 0                     # in the queue, from 1; 0 once granted
        self._released, self._locks, self._fd = False, [], -1
        self._guard = threading.Lock()        # poll() and release(), one at a time
        if run_id is not None:  # else the job joins once its run has a name
            self.join(run_id)

    def join(self, run_id: str) -> None:
        """Take the back of the queue: a ticket made 0600, locked, then readable (its place)."""
        self.run_id, self._folder = run_id, open_folder(self.sharing.folder)
        new, self._name = f".new-{secrets.token_hex(8)}", f"wait-{secrets.token_hex(8)}"
        try:
            self._fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                               | os.O_CLOEXEC, 0o600, dir_fd=self._folder)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._write()
            os.rename(new, self._name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
            os.fchmod(self._fd, 0o644)
        except OSError as err:  # nothing kept, so release() closes nothing twice
            if self._fd >= 0:
                for name in (new, self._name):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=self._folder)
                os.close(self._fd)
                self._fd = -1
            os.close(self._folder)
            raise ConfigError(f"cannot queue for cores in {self.sharing.folder} "
                              f"({err.strerror}): {_FIX}") from None

    def _write(self, **more: Any) -> None:
        data = json.dumps({"run_id": self.run_id, "n_cores": self.n_cores, **more}).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    @property
    def granted(self) -> bool:
        return self.cores is not None

    def poll(self) -> bool:
        """Take the cores if this job's turn has come; True once granted, never after release()."""
        with self._guard:
            if self.granted or self._released:
                return self.granted and not self._released
            try:
                return self._poll()
            except OSError as err:
                raise ConfigError(f"cannot queue for cores in {self.sharing.folder} "
                                  f"({err.strerror}): {_FIX}") from None

    def _poll(self) -> bool:
        live = tickets(self._folder)
        waiting = [e for e in live if not e.running]
        mine = next((i for i, e in enumerate(waiting) if e.name == self._name), None)
        if mine is None:
            raise ConfigError(f"this job's ticket {self.sharing.folder / self._name} was "
                              "removed by another process")
        me, limit = os.geteuid(), self.sharing.jobs_per_user
        running = Counter(e.uid for e in live if e.running)
        held_back = lambda uid: limit and running[uid] >= limit  # noqa: E731
        ahead = [e for e in waiting[:mine] if not held_back(e.uid)
                 and not (self.n_cores == 0 and e.uid != me)]
        self.position = mine + 1
        if ahead:
            self.reason = f"its turn: {len(ahead)} job(s) asked first, {ahead[0]} the first"
            return False
        if held_back(me):
            mine_running = ", ".join(str(e) for e in live if e.running and e.uid == me)
            self.reason = (f"one of your running jobs to end ({ENV_JOBS_PER_USER}={limit}): "
                           f"{mine_running}")
            return False
        return self._take(live)

    def _take(self, live: list[Entry]) -> bool:
        host = affinity()
        need = min(self.n_cores, len(host))
        claimed = {c: e for e in live if e.running for c in e.cores}
        for core in host:
            if len(self._locks) < need and core not in claimed:
                fd = lock_core(self._folder, core)
                if fd is not None:
                    self._locks.append((core, fd))
        if len(self._locks) < need:
            busy = [f"core {c}: {claimed.get(c) or core_holder(self._folder, c)}"
                    for c in host if c not in dict(self._locks)]
            self._unlock()
            if self.sharing.when_busy == "queue":
                self.reason = f"{need} free cores; busy: " + "; ".join(busy)
                return False
            self.warning = (f"only {len(host) - len(busy)} of the {need} cores this job needs "
                            f"are free ({ENV_WHEN_BUSY}=unbound): it shares cores with other "
                            "jobs, so both run slower")
        elif self.n_cores > need:
            self.warning = (f"this job needs {self.n_cores} cores and the host has {need}: it "
                            "takes them all, and its ranks share them")
        self.cores, self.position = [c for c, _ in self._locks], 0
        self._write(cores=self.cores)
        granted = f"run-{self._name[5:]}"
        os.rename(self._name, granted, src_dir_fd=self._folder, dst_dir_fd=self._folder)
        self._name = granted
        return True

    def _unlock(self) -> None:
        for _, fd in self._locks:
            fcntl.flock(fd, fcntl.LOCK_UN)  # for every copy of it, a forked child's too
            os.close(fd)
        self._locks = []

    def release(self) -> None:
        with self._guard:
            if not self._released and self._fd >= 0:  # (it joined the queue)
                self._unlock()
                with contextlib.suppress(OSError):
                    os.unlink(self._name, dir_fd=self._folder)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                os.close(self._folder)
            self._released = True


def snapshot(folder: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Who holds which cores and who waits, for display: {"held": [...], "waiting": [...]}."""
    fd = open_folder(folder or settings().folder)
    try:
        live = tickets(fd)
        held = [{"run_id": e.run_id, "user": user_name(e.uid), "cores": e.cores,
                 "since": e.since_ns / 1e9} for e in live if e.running]
        waiting = [{"run_id": e.run_id, "user": user_name(e.uid), "n_cores": e.n_cores,
                    "since": e.since_ns / 1e9} for e in live if not e.running]
        return {"held": held, "waiting": waiting}
    finally:
        os.close(fd)
