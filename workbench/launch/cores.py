"""Sharing one host's cores between jobs: disjoint core sets, a FIFO queue, a per-user limit.

Every job on the host asks for its cores in one JSON file, `cores.json`, in a shared folder
(`WORKBENCH_SHARED_DIR`, default /tmp/workbench-shared, made `1777` by an administrator);
a `flock` makes each change atomic. First in, first out (one user's jobs held back by
their limit hold up no one else), a per-user limit (`WORKBENCH_JOBS_PER_USER`), and when
cores run short a job waits or runs unbound (`WORKBENCH_WHEN_BUSY`). An entry whose owner
died is dropped. The rules in full: docs/ARCHITECTURE.md, "Sharing the host's cores".
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from workbench.config import ConfigError
from workbench.hosts.cpu import affinity
from workbench.launch import shared_file
from workbench.launch.queue_file import MAX_STATE_BYTES, find, parse_state
from workbench.records.liveness import started

ENV_SHARED_DIR = "WORKBENCH_SHARED_DIR"
ENV_WHEN_BUSY = "WORKBENCH_WHEN_BUSY"
ENV_JOBS_PER_USER = "WORKBENCH_JOBS_PER_USER"
STATE_FILE = "cores.json"
WHEN_BUSY = ("queue", "unbound")


@dataclass(frozen=True)
class Settings:
    """How this host shares its cores (see the module docstring)."""

    folder: Path
    when_busy: str
    jobs_per_user: int  # 0: no limit


def on_a_hub() -> bool:
    """True inside a JupyterHub single-user server (it sets JUPYTERHUB_* variables)."""
    return any(name.startswith("JUPYTERHUB_") for name in os.environ)


def settings() -> Settings:
    """Read the settings from the environment; a bad value is a ConfigError saying so."""
    folder = Path(os.environ.get(ENV_SHARED_DIR) or "/tmp/workbench-shared")
    when_busy = os.environ.get(ENV_WHEN_BUSY) or "queue"
    if when_busy not in WHEN_BUSY:
        raise ConfigError(f"invalid {ENV_WHEN_BUSY}={when_busy!r}: expected queue or unbound")
    limit_text = os.environ.get(ENV_JOBS_PER_USER) or ("1" if on_a_hub() else "0")
    if not limit_text.isdigit():
        raise ConfigError(f"invalid {ENV_JOBS_PER_USER}={limit_text!r}: expected a whole "
                          "number of running jobs per user (0: no limit)")
    with _folder(folder):
        pass  # only the check (and the folder made if missing)
    return Settings(folder, when_busy, int(limit_text))


def current_user() -> str:
    """The hub's user name when there is one, else the login name."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def owner_id(pid: int | None = None) -> str:
    """"pid:start time" of a process: a pid reused by a later process does not match."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{started(pid)}"


class Ticket:
    """One job's place: first in the queue, then holding its cores until released.

    `n_cores` is 0 for a job that binds no cores here (`cpu_bind="none"`, several hosts):
    it only counts towards its user's limit. Without `run_id`, `join` enters the queue.
    """

    def __init__(self, run_id: str | None, n_cores: int, sharing: Settings) -> None:
        self.n_cores, self.sharing = n_cores, sharing
        self.user = current_user()
        self.cores: list[int] | None = None   # once granted: the cores ([] = unbound)
        self.warning: str | None = None       # once granted unbound: why
        self._position = 0
        self._released = False
        self._guard = threading.Lock()  # poll() and release() one at a time, across threads
        self._owner = owner_id()
        if run_id is not None:  # else the job joins once its run has a name
            self.join(run_id)

    def join(self, run_id: str) -> None:
        """Take the job's place at the back of the queue, under its run's name."""
        self.run_id, sharing = run_id, self.sharing
        with _folder(sharing.folder) as folder_fd:
            for name, claim in shared_file.my_proofs(folder_fd).items():
                if not _owner_alive(claim):  # left by a crashed kernel of ours
                    shared_file.drop_proof(folder_fd, name)
            self._proof = shared_file.make_proof(folder_fd, self._owner)
        with _state(sharing.folder) as state:
            state["waiting"].append(self._entry(n_cores=self.n_cores))

    def _entry(self, **place: Any) -> dict[str, Any]:
        """This job's entry: `n_cores` while it waits, `cores` once it holds them."""
        return {"run_id": self.run_id, "user": self.user, "owner": self._owner,
                "proof": self._proof, **place, "since": time.time()}

    @property
    def granted(self) -> bool:
        return self.cores is not None

    @property
    def position(self) -> int:
        """1 for the next job to start, 2 behind it, ...; 0 once granted."""
        return 0 if self.granted else self._position

    def poll(self) -> bool:
        """Take the cores if this job's turn has come; True once granted.

        After `release()` it is always False: a released ticket never asks again (else a
        poll racing a stop would put the job back in the queue, where no one would take it out).
        """
        with self._guard:
            if self.granted or self._released:
                return self.granted and not self._released
            return self._poll()

    def _poll(self) -> bool:
        with _state(self.sharing.folder) as state:
            mine = find(state["waiting"], self.run_id)
            if mine is None:  # dropped from a rebuilt file, say: ask again, at the back
                mine = self._entry(n_cores=self.n_cores)
                state["waiting"].append(mine)
            ahead = state["waiting"][:state["waiting"].index(mine)]
            self._position = 1 + len(ahead)
            # First in, first out: wait behind anyone who asked earlier, unless they wait
            # for their own user's running job (that must not hold up other users), or this
            # job takes no cores (it takes nothing another user's job waits for).
            if any(self._under_limit(e["user"], state) and not (
                    self._takes_none(mine) and e["user"] != self.user) for e in ahead):
                return False
            if not self._could_start(mine, state):
                return False
            self.cores = self._take(state)
            state["waiting"].remove(mine)
            state["held"].append(self._entry(cores=self.cores))
        return True

    def release(self) -> None:
        """Give the cores back (or leave the queue). Safe to call more than once.

        If the file cannot be reached now (its lock held too long, say), the error is
        raised and a thread keeps trying: the entry must not outlive its job.
        """
        with self._guard:  # a poll under way finishes first; none follows
            self._released = True
        try:
            self._remove()
        except (OSError, ConfigError):
            threading.Thread(target=self._remove_later, name=f"release-{self.run_id}",
                             daemon=True).start()
            raise

    def _remove_later(self, period_s: float = 2.0, give_up_s: float = 600.0) -> None:
        end = time.monotonic() + give_up_s
        while time.monotonic() < end:
            time.sleep(period_s)
            with contextlib.suppress(OSError, ConfigError):
                self._remove()
                return

    def _remove(self) -> None:
        with _state(self.sharing.folder) as state:
            for key in ("held", "waiting"):
                state[key] = [e for e in state[key] if e["run_id"] != self.run_id]
        with _folder(self.sharing.folder) as folder_fd:
            shared_file.drop_proof(folder_fd, self._proof)

    # ------------------------------------------------------------------ the rules
    def _under_limit(self, user: str, state: dict[str, Any]) -> bool:
        limit = self.sharing.jobs_per_user
        return limit == 0 or sum(e["user"] == user for e in state["held"]) < limit

    def _takes_none(self, entry: dict[str, Any]) -> bool:
        """A job that binds no cores here, or needs more than the host has (it runs unbound)."""
        return entry["n_cores"] == 0 or entry["n_cores"] > len(affinity())

    def _could_start(self, entry: dict[str, Any], state: dict[str, Any]) -> bool:
        """Whether `entry` may start now: its user is under the limit and cores suffice
        (or the job will not wait for cores: it binds none, or runs unbound)."""
        if not self._under_limit(entry["user"], state):
            return False
        return (self._takes_none(entry) or self.sharing.when_busy == "unbound"
                or len(_free(state)) >= entry["n_cores"])

    def _take(self, state: dict[str, Any]) -> list[int]:
        """The lowest free cores, or [] (unbound, with a warning saying why)."""
        free, need = _free(state), self.n_cores
        if need == 0:
            return []
        if need > len(affinity()):
            self.warning = (f"this job needs {need} cores and the host has "
                            f"{len(affinity())}: it runs without cores of its own")
            return []
        if len(free) < need:
            self.warning = (f"only {len(free)} of the {need} cores this job needs are free "
                            f"({ENV_WHEN_BUSY}=unbound): it shares cores with other jobs, so "
                            "both run slower")
            return []
        return free[:need]


def _free(state: dict[str, Any]) -> list[int]:
    taken = {c for e in state["held"] for c in e["cores"]}
    return [c for c in affinity() if c not in taken]


def _owner_alive(owner: str) -> bool:
    pid = owner.partition(":")[0]
    try:
        return owner_id(int(pid)) == owner
    except (psutil.Error, ValueError):
        return False


def _believed(folder_fd: int, entry: dict[str, Any], path: Path) -> bool:
    """True if the entry's owner lives and runs as the user who made the entry's proof.

    A dead owner's entry is dropped quietly (a kernel crashed); a live one's whose proof
    is missing or someone else's is a forgery, dropped saying so in one line."""
    owner = entry["owner"]
    try:
        if not _owner_alive(owner):
            return False
        uid = psutil.Process(int(owner.partition(":")[0])).uids().real
    except psutil.Error:
        return False
    if shared_file.proof_owner(folder_fd, entry["proof"], owner) == uid:
        return True
    shared_file.say(f"{path} has an entry for run {entry['run_id']!r} in the name of pid "
                    f"{owner.partition(':')[0]} (user {shared_file.user_name(uid)}) that "
                    "this user did not make: not trusted, dropped")
    return False


def snapshot(folder: Path | None = None) -> dict[str, Any]:
    """The host's allocation as it is now: {"held": [...], "waiting": [...]} (for display)."""
    with _state(folder or settings().folder) as state:
        return json.loads(json.dumps(state))


@contextlib.contextmanager
def _state(folder: Path) -> Iterator[dict[str, Any]]:
    """The shared state, locked (`flock`) for the duration of the block, then written back.

    The file is both the lock and the state, and is rewritten in place: in a sticky shared
    folder only its creator could rename another file over it. What it holds is never
    trusted: a file that is not the queue's (garbage, a JSON list, an entry without an
    owner, a half-written file) is reported in one line and rebuilt from its valid
    entries, and entries of dead owners are dropped (see `parse_state`).
    """
    path = folder / STATE_FILE
    with _folder(folder) as folder_fd, \
            os.fdopen(shared_file.open_file(folder_fd, STATE_FILE, folder), "r+b") as f, \
            shared_file.locked(f.fileno(), path):
        state, problems = parse_state(f.read(MAX_STATE_BYTES + 1))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            shared_file.say(f"{path} {problems[0]}{more}: not trusted, rebuilt from its "
                            "valid entries")
        state = {key: [e for e in state[key] if _believed(folder_fd, e, path)]
                 for key in ("held", "waiting")}
        yield state
        f.seek(0)
        f.truncate()
        f.write(json.dumps(state, indent=1).encode())
        f.flush()


@contextlib.contextmanager
def _folder(folder: Path) -> Iterator[int]:
    """The shared folder's descriptor for the block (created if missing). An unsafe folder,
    or an OSError opening it or inside the block, is a one-line ConfigError."""
    try:
        folder_fd = shared_file.open_folder(folder)
    except ConfigError as err:
        raise ConfigError(f"cannot share cores through {folder}: {err}: {_FIX}") from None
    except OSError as err:
        raise _cannot_share(folder, err) from None
    try:
        yield folder_fd
    except OSError as err:
        raise _cannot_share(folder, err) from None
    finally:
        os.close(folder_fd)


def _cannot_share(folder: Path, err: OSError) -> ConfigError:
    return ConfigError(f"cannot share cores through {folder} ({err.strerror or err}): {_FIX}")


_FIX = (f"set {ENV_SHARED_DIR} to a folder every user can write that is owned by root and "
        "sticky (as root: install -d -m 1777 FOLDER)")
