"""Writing run records safely: a reader may look, and a job be killed, at any moment. Whole
files are renamed into place (`atomic_file`), appends loop until every byte is written, and
modes are set explicitly, never by the umask. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from workbench.config import ConfigError
from workbench.records.private import folder_problem, run_folder_mode

#: A run's files and folders: only their owner writes them; who may read them is the run
#: folder's mode (records/private.py).
FILE_MODE, FOLDER_MODE = 0o644, 0o755


def open_file(path: Path, flags: int = os.O_WRONLY | os.O_APPEND, mode: int = FILE_MODE) -> int:
    """A descriptor of `path` (made if missing, never through a link), with exactly `mode`."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    os.fchmod(fd, mode)
    return fd


def make_folder(path: Path, mode: int = FOLDER_MODE) -> Path:
    """Make folder `path` and its missing parents with exactly `mode`; `path`."""
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, mode)
        set_mode(folder, mode)
    return path


def set_mode(folder: Path, mode: int) -> None:
    """Give `folder` exactly `mode`, changing it only if the umask took bits away (the
    set-group-ID bit it inherited stays: docs/ARCHITECTURE.md, "The record of a run")."""
    st = os.stat(folder)
    if stat.S_IMODE(st.st_mode) & 0o777 != mode:
        os.chmod(folder, mode | (st.st_mode & stat.S_ISGID))


class CorruptRecord(ValueError):
    """A record file exists but cannot be read as JSON. The message names the file."""


@contextlib.contextmanager
def atomic_file(path: Path, durable: bool = False) -> Iterator[BinaryIO]:
    """A file to write `path` through, renamed onto it only if the block ends without an
    error; `durable`: fsynced first, to survive a power cut."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(open_file(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # only still there when something above failed


def write_json_atomic(path: Path, data: Any, durable: bool = True) -> None:
    """Write `data` as JSON to `path` through `atomic_file` (`durable` costs ~10 ms)."""
    with atomic_file(path, durable) as f:
        f.write(json.dumps(data, indent=2, default=str).encode())


def read_json(path: Path, quiet: bool = False) -> Any | None:
    """The JSON in `path`; None if missing; if unreadable, `CorruptRecord` (`quiet`: None)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # a folder, no permission, I/O error; not JSON
        if quiet:
            return None
        what = "not valid JSON" if isinstance(exc, ValueError) else "cannot be read"
        raise CorruptRecord(f"{path}: {what} ({getattr(exc, 'strerror', 0) or exc})") from None


def new_run_dir(runs_dir: str | Path, label: str) -> tuple[str, Path]:
    """(run_id, path) of a fresh run folder (mode: private.py), or a one-line ConfigError."""
    mode = run_folder_mode()
    path = parent = Path(runs_dir).expanduser().resolve()  # `path`: what an error names
    try:
        if problem := folder_problem(os.stat(make_folder(parent, mode))):
            raise ConfigError(f"invalid --runs-dir {str(runs_dir)!r}: {parent} {problem}, "
                              "who could swap your runs for others: use a folder of your own")
        for _ in range(100):  # another run of `label` may draw our 4 hex digits in our second
            path = parent / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}-{secrets.token_hex(2)}"
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, mode)
                break
        else:
            raise FileExistsError(errno.EEXIST, "every name drawn was taken")
        set_mode(path, mode)
        for sub in ("logs", "pids", "exit", "metrics", "heartbeat"):
            make_folder(path / sub)
    except OSError as exc:
        raise ConfigError(f"invalid --runs-dir {str(runs_dir)!r}: cannot create {path} "
                          f"({exc.strerror or exc}); choose a folder you can write to") from None
    return path.name, path
