"""The channel between a pool of warm ranks and its owner: `multiprocessing.connection` over
an abstract Unix socket, or TCP when Slurm places the ranks. Both ends prove they hold the
pool's key (from the job's 0600 secrets file) before anything else is read; a message is
capped and never unpickled. Why: docs/ARCHITECTURE.md, "Warm ranks".
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
from multiprocessing import connection
from multiprocessing.connection import AuthenticationError, Connection
from typing import Any

from workbench.records.liveness import this_host

ENV_KEY = "POOL_KEY"
MAX_REPLY = 1 << 16  # bytes: a rank's reply is a few dozen
HELLO_S = 5.0        # seconds a connection gets to prove it holds the key
_TCP = "tcp:"


def new_key() -> str:
    return secrets.token_hex(32)


def listen(tcp: bool = False) -> tuple[socket.socket, str]:
    """(a socket, its address): an abstract Unix socket of a random name, or with `tcp` a
    free port on this host's address; accept() waits at most 0.2 s."""
    if tcp:
        server = socket.create_server((socket.gethostbyname(this_host()), 0), backlog=16)
        address = f"{_TCP}{this_host()}:{server.getsockname()[1]}"
    else:
        address = f"workbench-pool-{os.getuid()}-{secrets.token_hex(16)}"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind("\0" + address)  # a leading NUL: the abstract namespace, no file
        server.listen(16)
    server.settimeout(0.2)
    return server, address


def accept(server: socket.socket, key: str) -> Connection | None:
    """`Listener(authkey=key).accept()` with a time limit: the next peer proving within HELLO_S
    it holds `key` (on a Unix socket: is this user), else None; TimeoutError if none in 0.2 s."""
    sock, _ = server.accept()
    sock.setblocking(True)
    try:
        if sock.family == socket.AF_UNIX:  # SO_PEERCRED: (pid, uid, gid), from the kernel
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", creds)[1] != os.getuid():
                raise AuthenticationError("another user")
        _time_limit(sock, HELLO_S)
        conn = Connection(os.dup(sock.fileno()))
        try:
            connection.deliver_challenge(conn, key.encode())
            connection.answer_challenge(conn, key.encode())
        except BaseException:
            conn.close()
            raise
        _time_limit(sock, 0)
        return conn
    except (OSError, EOFError, AuthenticationError):
        return None
    finally:
        sock.close()


def connect(address: str, key: str) -> Connection:
    """Connect to the owner at `address` (see `listen`); both ends prove they hold `key`."""
    if address.startswith(_TCP):
        host, _, port = address[len(_TCP):].rpartition(":")
        return connection.Client((host, int(port)), "AF_INET", authkey=key.encode())
    return connection.Client("\0" + address, "AF_UNIX", authkey=key.encode())


def _time_limit(sock: socket.socket, seconds: float) -> None:
    limit = struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))
    for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
        sock.setsockopt(socket.SOL_SOCKET, option, limit)


def send(conn: Connection, header: dict[str, Any], payload: bytes = b"") -> None:
    conn.send_bytes(json.dumps(header).encode() + b"\0" + payload)


def receive(conn: Connection, maxlength: int | None = None) -> tuple[dict[str, Any], bytes] | None:
    """The next message as (header, payload); None once closed, over `maxlength` or no message."""
    try:
        head, _, payload = conn.recv_bytes(maxlength).partition(b"\0")
        header = json.loads(head)
    except (OSError, EOFError, ValueError):
        return None
    return (header, payload) if isinstance(header, dict) else None
