"""A folder shown the way NFS clients show it: stale listings and cached "no such file" on
each host, and a file server that stalls on demand. For the multi-host tests.

    python tests/_nfs_like.py STORE MOUNT [--cache-s 30] [--stall-flag FILE]

serves STORE at MOUNT (FUSE, in the foreground, until unmounted). Each PID namespace that
uses MOUNT is one NFS client, a host with caches of its own, as cluster nodes are:

- a folder's listing is read once and shown for `cache_s` seconds (NFS clients cache a
  folder's attributes and contents for acdirmin..acdirmax, 30-60 s by default, nfs(5));
- a name looked up and not found stays "not found" on that host for `cache_s` seconds,
  even after another host has made it (the negative lookup cache, `lookupcache=all`);
- what a host makes, renames or removes itself it sees at once (a client knows its own
  changes);
- file contents pass straight through: every open sees what the last writer closed (the
  close-to-open consistency that NFS promises).

While the file `--stall-flag` exists, every operation waits, on every host: a file server
that stopped answering (NFS hard mounts retry until it answers again).
"""

from __future__ import annotations

import argparse
import errno
import os
import threading
import time

import mfusepy as fuse

_STAT_KEYS = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime",
              "st_ctime", "st_ino")


class NfsLike(fuse.Operations):
    """A pass-through file system with per-host listing and lookup caches."""

    use_ns = True  # times in nanoseconds

    def __init__(self, store: str, cache_s: float, stall_flag: str | None) -> None:
        self.store, self.cache_s, self.stall_flag = os.path.realpath(store), cache_s, stall_flag
        self._mutex = threading.Lock()
        self.listings: dict[tuple[str, str], tuple[float, list[str]]] = {}
        self.missing: dict[tuple[str, str], float] = {}  # (host, path): when not found

    # ------------------------------------------------------------------ hosts and caches
    def _real(self, path: str) -> str:
        return self.store + path

    @staticmethod
    def _host() -> str:
        """The caller's PID namespace: one per simulated host."""
        pid = fuse.fuse_get_context()[2]
        try:
            return os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            return "unknown"

    def _answer(self) -> str:
        """Wait while the server stalls; the caller's host."""
        while self.stall_flag and os.path.exists(self.stall_flag):
            time.sleep(0.05)
        return self._host()

    def _changed_here(self, host: str, *paths: str) -> None:
        """`host` made, renamed or removed `paths`: it sees that at once."""
        with self._mutex:
            for path in paths:
                self.missing.pop((host, path), None)
                self.listings.pop((host, os.path.dirname(path)), None)

    # ------------------------------------------------------------------ metadata
    def getattr(self, path: str, fh: int | None = None) -> dict:
        host, now = self._answer(), time.monotonic()
        with self._mutex:
            since = self.missing.get((host, path))
            if since is not None and now - since < self.cache_s:
                raise fuse.FuseOSError(errno.ENOENT)
        try:
            st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
        except FileNotFoundError:
            with self._mutex:
                self.missing[(host, path)] = now
            raise fuse.FuseOSError(errno.ENOENT) from None
        out = {key: getattr(st, key) for key in _STAT_KEYS}
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def readdir(self, path: str, fh: int) -> list[str]:
        host, now = self._answer(), time.monotonic()
        with self._mutex:
            cached = self.listings.get((host, path))
        if cached is None or now - cached[0] >= self.cache_s:
            cached = (now, os.listdir(self._real(path)))
            with self._mutex:
                self.listings[(host, path)] = cached
        return [".", "..", *cached[1]]

    def access(self, path: str, amode: int) -> int:
        self.getattr(path)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._answer()
        os.chmod(self._real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._answer()
        os.chown(self._real(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._answer()
        os.utime(self._real(path), ns=times)
        return 0

    def readlink(self, path: str) -> str:
        self._answer()
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict:
        self._answer()
        sv = os.statvfs(self._real(path))
        return {key: getattr(sv, key) for key in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
            "f_flag", "f_frsize", "f_namemax")}

    # ------------------------------------------------------------------ changes
    def mkdir(self, path: str, mode: int) -> int:
        host = self._answer()
        os.mkdir(self._real(path), mode)
        self._changed_here(host, path)
        return 0

    def rmdir(self, path: str) -> int:
        host = self._answer()
        os.rmdir(self._real(path))
        self._changed_here(host, path)
        return 0

    def unlink(self, path: str) -> int:
        host = self._answer()
        os.unlink(self._real(path))
        self._changed_here(host, path)
        return 0

    def rename(self, old: str, new: str) -> int:
        host = self._answer()
        os.rename(self._real(old), self._real(new))
        self._changed_here(host, old, new)
        return 0

    def symlink(self, target: str, source: str) -> int:
        host = self._answer()
        os.symlink(source, self._real(target))
        self._changed_here(host, target)
        return 0

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self._answer()
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._real(path), length)
        return 0

    # ------------------------------------------------------------------ contents
    def create(self, path: str, mode: int, fi: object = None) -> int:
        host = self._answer()
        fd = os.open(self._real(path), os.O_RDWR | os.O_CREAT, mode)
        self._changed_here(host, path)
        return fd

    def open(self, path: str, flags: int) -> int:
        self._answer()
        return os.open(self._real(path), flags & ~(os.O_CREAT | os.O_EXCL))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._answer()
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._answer()
        return os.pwrite(fh, data, offset)

    def flush(self, path: str, fh: int) -> int:
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._answer()
        os.fsync(fh)
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("mount")
    parser.add_argument("--cache-s", type=float, default=30.0)
    parser.add_argument("--stall-flag")
    args = parser.parse_args()
    fuse.FUSE(NfsLike(args.store, args.cache_s, args.stall_flag), args.mount, foreground=True,
              nothreads=False, direct_io=True, entry_timeout=0, attr_timeout=0,
              negative_timeout=0, fsname="nfs-like")


if __name__ == "__main__":
    main()
