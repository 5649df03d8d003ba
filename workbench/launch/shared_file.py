"""One file that every user of a host reads and writes, safe among users who distrust each other.

The folder is opened one component at a time, never following a link, each checked on its
descriptor (owned by root or us, sticky if others may write it); the file is opened
relative to it without `O_CREAT` when it exists (`fs.protected_regular`), must be a regular
file with one link, and its mode is set with `fchmod`; the lock's wait is bounded and names
its holder from /proc/locks; a writer's claim is believed only with its proof file beside
it. See docs/ARCHITECTURE.md, "Sharing the host's cores".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import re
import secrets
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from workbench.config import ConfigError

#: Longest wait for another process's lock on the shared file, in seconds (holders keep
#: it for milliseconds: a longer wait means a process is stuck, or holds it on purpose).
LOCK_TIMEOUT_S = 10.0
SAY_WAIT_S = 2.0  # a wait for the lock longer than this is said, in one line
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WHAT = {errno.ELOOP: "a symbolic link", errno.EISDIR: "a folder",
         errno.EACCES: "not writable by you"}


def user_name(uid: int) -> str:
    """The login name of `uid`, or "uid N" when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def folder_problem(st: os.stat_result, uid: int) -> str | None:
    """What makes a folder unsafe to share a file through (None: nothing), from its stat.

    Safe: a real folder, owned by root or by `uid`, and sticky if group or others may
    write it (then only a file's owner may delete or rename it).
    """
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid not in (0, uid):
        return (f"is owned by {user_name(st.st_uid)}, who could replace what is in it at "
                "will")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o}) without the "
                "sticky bit, so any of them could replace what is in it")
    return None


def open_folder(folder: Path) -> int:
    """A descriptor of `folder` (created with mode 1777 if missing), each component checked
    with `folder_problem`; ConfigError naming the unsafe component otherwise."""
    real = Path(os.path.realpath(folder))
    if not real.exists():
        real.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open("/", _DIR_FLAGS)
    for i, part in enumerate(real.parts[1:], start=2):
        here = Path(*real.parts[:i])
        fd = _open_child_folder(fd, part, here, create=here == real)
        problem = folder_problem(os.fstat(fd), os.geteuid())
        if problem:
            os.close(fd)
            raise ConfigError(f"{here} {problem}")
    return fd


def _open_child_folder(parent: int, name: str, path: Path, create: bool) -> int:
    """Open folder `name` under descriptor `parent` (closed here), making it if asked."""
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent)  # private until its mode is set
                child = os.open(name, _DIR_FLAGS, dir_fd=parent)
                os.fchmod(child, 0o1777)            # on the descriptor: no link followed
                return child
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as err:
            raise ConfigError(f"{path} cannot be opened as a folder ({err.strerror}; a link "
                              "is not followed)") from None
    finally:
        os.close(parent)


def open_file(folder_fd: int, name: str, folder: Path) -> int:
    """A read-write descriptor of the regular file `name` in the folder, made with mode 666
    if missing; anything else in its place is moved aside, or a ConfigError if it cannot be."""
    for _ in range(5):  # another process may make or move the file between two steps
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=folder_fd)  # no O_CREAT: protected_regular
        except FileNotFoundError:
            try:
                fd = os.open(name, _FILE_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=folder_fd)
            except FileExistsError:
                continue
            os.fchmod(fd, 0o666)  # the umask narrowed it
            return fd
        except OSError as err:  # a link (ELOOP), a folder (EISDIR), no permission ...
            _move_aside(folder_fd, name, folder, _WHAT.get(err.errno, err.strerror or ""))
            continue
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
        _move_aside(folder_fd, name, folder,
                    "not a regular file" if not stat.S_ISREG(st.st_mode) else
                    f"a file with {st.st_nlink} hard links")
    raise ConfigError(f"{folder / name} keeps changing under us: another process is "
                      "replacing it")


def _move_aside(folder_fd: int, name: str, folder: Path, why: str) -> None:
    """Rename what is at `name` to `name.bad-<time>`, keeping it for whoever looks."""
    path = folder / name
    try:
        st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    owner = user_name(st.st_uid)
    aside = f"{name}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    try:
        os.rename(name, aside, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except OSError as err:
        raise ConfigError(f"{path} cannot be used ({why}; owned by {owner}) nor moved aside "
                          f"({err.strerror}): ask {owner} or the administrator to remove "
                          "it") from None
    say(f"{path} was unusable ({why}; owned by {owner}): moved aside to {folder / aside}, "
         "and a new one made")


@contextlib.contextmanager
def locked(fd: int, path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `fd` for the block; ConfigError naming the holder if it
    is not ours within `LOCK_TIMEOUT_S`."""
    timeout_s, start = LOCK_TIMEOUT_S, time.monotonic()
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            waited = time.monotonic() - start
            if waited >= timeout_s:
                raise ConfigError(f"{path} has been locked for {timeout_s:g} s by "
                                  f"{lock_holder(fd)}: if that process is stuck, end it "
                                  "(or ask the administrator to)") from None
            if waited >= SAY_WAIT_S and not said:  # a wait this long is worth a line
                say(f"waiting for {path}, locked by {lock_holder(fd)} (at most "
                    f"{timeout_s:g} s)")
                said = True
            time.sleep(0.02)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


# ---------------------------------------------------------------------- proofs of who wrote
PROOF_NAME = re.compile(r"proof-[0-9a-f]{16}")
_PROOF_BYTES = 200


def make_proof(folder_fd: int, claim: str) -> str:
    """Leave a new proof file holding `claim` in the folder; its name."""
    name = f"proof-{secrets.token_hex(8)}"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644, dir_fd=folder_fd)
    try:
        os.write(fd, claim.encode())
    finally:
        os.close(fd)
    return name


def proof_owner(folder_fd: int, name: str, claim: str) -> int | None:
    """The uid that made proof `name`, if it is a regular file holding exactly `claim`;
    else None (missing, planted as a link or a pipe, or saying something else)."""
    found = _read_proof(folder_fd, name) if PROOF_NAME.fullmatch(name) else None
    return found[0] if found and found[1] == claim.encode() else None


def drop_proof(folder_fd: int, name: str) -> None:
    """Remove one of our proofs (gone already: nothing to do)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder_fd)


def my_proofs(folder_fd: int) -> dict[str, str]:
    """{name: claim} of the proofs this user left in the folder."""
    out = {}
    for name in filter(PROOF_NAME.fullmatch, os.listdir(folder_fd)):
        found = _read_proof(folder_fd, name)
        if found and found[0] == os.geteuid():
            out[name] = found[1].decode(errors="replace")
    return out


def _read_proof(folder_fd: int, name: str) -> tuple[int, bytes] | None:
    """(owner's uid, bytes) of `name` if it is a regular file of a proof's size, else None."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _PROOF_BYTES:
            return None
        return st.st_uid, os.read(fd, _PROOF_BYTES)
    finally:
        os.close(fd)


def lock_holder(fd: int) -> str:
    """The process that holds a `flock` on the file of `fd`, as the kernel lists it:
    "pid N (user, command)", or "another process" where /proc/locks does not say."""
    st = os.fstat(fd)
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return "another process"
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != device:
            continue
        pid = int(fields[4])
        return f"pid {pid} ({_describe(pid)})"
    return "another process"


def _describe(pid: int) -> str:
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
        command = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone, or in another pid namespace"
    return f"user {user_name(uid)}, {command}"


def say(message: str) -> None:
    """One line on stderr: shown by the CLI and under a notebook cell."""
    sys.stderr.write(f"workbench: {message}\n")
    sys.stderr.flush()
