"""A second, unprivileged user for the tests of what one user may do to another's work.

The tests that need it create the account once (`useradd`, no home, no login shell) and run
commands as it with `setpriv --reuid --regid --clear-groups`: a real other user, not a
mock. Without root (or without `useradd`/`setpriv`) they are skipped, saying why.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

NAME = "wbother"
CHECKOUT = Path(__file__).resolve().parent.parent


def why_not() -> str | None:
    """None when the tests can act as a second user here, else why not."""
    if os.geteuid() != 0:
        return "needs root: creates a second user and runs commands as it"
    missing = [p for p in ("useradd", "setpriv") if shutil.which(p) is None]
    if missing:
        return f"needs {', '.join(missing)}"
    return closed_to_others(CHECKOUT / "workbench" / "__init__.py")


def closed_to_others(path: Path) -> str | None:
    """Why another user cannot read `path` (a folder above it they cannot enter, or the
    file itself), or None: the second user runs this checkout's code, so it must reach it."""
    for folder in reversed(path.parents):
        if not folder.stat().st_mode & 0o001:
            return (f"the second user cannot enter {folder} (mode "
                    f"{folder.stat().st_mode & 0o777:o}): clone the workbench where every "
                    "user can read it to run the tests of what one user may do to another")
    if not path.stat().st_mode & 0o004:
        return f"the second user cannot read {path}: make the checkout readable by others"
    return None


def other_user(name: str = NAME) -> tuple[int, int]:
    """(uid, gid) of the second user (or of another, `name`), created if it does not exist
    yet."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", name], check=True, capture_output=True)
        entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def as_other(cmd: list[str], name: str = NAME, **kwargs) -> subprocess.CompletedProcess:
    """Run `cmd` as the second user (or `name`), with its own groups only; its
    CompletedProcess."""
    uid, gid = other_user(name)
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups",
                           "--", *cmd], capture_output=True, text=True, timeout=120, **kwargs)


def folder_for_other(path: Path) -> Path:
    """`path` created and given to the second user (its parents stay as they are)."""
    uid, gid = other_user()
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)
    return path


needs_other_user = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")


def open_tmp(prefix: str) -> Path:
    """A fresh folder in /tmp that every user can enter (pytest's tmp_path is root's 0700)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path
