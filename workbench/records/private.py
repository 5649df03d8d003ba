"""Run folders are private to their owner (`0700`; `WORKBENCH_RUN_FOLDERS=group`: `0750`,
`shared`: `0755`), and a pickle, which runs code, is loaded only when it and every folder down
to it are the user's and no one else may write them, checked on open descriptors. See
docs/ARCHITECTURE.md, "The record of a run".
"""

from __future__ import annotations

import os
import pickle
import pwd
import stat
from pathlib import Path
from typing import Any

from workbench.config import ConfigError

ENV_RUN_FOLDERS = "WORKBENCH_RUN_FOLDERS"
MODES = {"private": 0o700, "group": 0o750, "shared": 0o755}


class ForeignRecord(PermissionError):
    """A file or folder of a run belongs to another user (or others may write it)."""


def run_folder_mode() -> int:
    name = os.environ.get(ENV_RUN_FOLDERS, "").strip() or "private"
    if name not in MODES:
        raise ConfigError(f"invalid {ENV_RUN_FOLDERS}={name!r}: expected one of "
                          f"{', '.join(MODES)}")
    return MODES[name]


def user_name(uid: int) -> str:
    """The account's name, or `uid N` for a uid without an account."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def folder_problem(st: os.stat_result) -> str | None:
    """What lets another user swap a folder's content (None: ours or root's, sticky if open)."""
    if st.st_uid not in (0, os.geteuid()):
        return f"is owned by {user_name(st.st_uid)}"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(st.st_mode)
        return f"may be written by others (mode {mode:o}) without the sticky bit"
    return None


def check_own(st: os.stat_result, path: Path | str) -> None:
    """Raise ForeignRecord unless `st` (of `path`) is owned by us and not writable by others."""
    me = os.geteuid()
    if st.st_uid != me:
        raise ForeignRecord(f"{path} belongs to {user_name(st.st_uid)}, not to you "
                            f"({user_name(me)}): the workbench reads code and results only "
                            "from your own runs")
    if st.st_mode & stat.S_IWOTH:
        raise ForeignRecord(f"{path} is writable by every user (mode "
                            f"{stat.S_IMODE(st.st_mode):o}): the workbench reads code and "
                            "results only from folders no one else can change")


def read_own(path: Path, run_dir: Path, secret: bool = False, max_bytes: int = 1 << 30) -> bytes:
    """`path`'s bytes if it and its folders under `run_dir` are ours (`secret`: 0600)."""
    parts = path.relative_to(run_dir).parts
    folder = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(run_dir, folder)
    try:
        check_own(os.fstat(fd), run_dir)
        for i, part in enumerate(parts[:-1]):
            fd, parent = os.open(part, folder, dir_fd=fd), fd
            os.close(parent)
            check_own(os.fstat(fd), run_dir.joinpath(*parts[:i + 1]))
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ForeignRecord(f"{path} is not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{path} holds {st.st_size / 2**20:,.0f} MiB, more than the "
                             f"{max_bytes >> 20} MiB read from a run")
        check_own(st, path)
        if secret and st.st_mode & 0o077:
            raise ForeignRecord(f"{path} can be read by other users (mode "
                                f"{stat.S_IMODE(st.st_mode):o}, not 600)")
        return f.read()


#: The largest pickled return value of a rank: each is loaded into the owner's memory (bytes).
MAX_RETURN_BYTES = 64 << 20


def load_own_pickle(path: Path, run_dir: Path) -> Any:
    return pickle.loads(read_own(path, run_dir, max_bytes=MAX_RETURN_BYTES))


def check_own_folder(path: Path | str) -> None:
    """Raise ForeignRecord unless the folder `path` (not a symlink) is ours."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        check_own(os.fstat(fd), path)
    finally:
        os.close(fd)
