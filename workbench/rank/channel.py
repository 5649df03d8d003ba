"""The channel between a pool of warm ranks and the process that owns it (launch/pool.py).

One stream connection per rank: an abstract Unix socket on the owner's host (no file left
behind; only our own user's processes, `SO_PEERCRED`), TCP for ranks Slurm places elsewhere.
A rank proves it is one of the pool's with the pool's secret token in its first message.
A message is one frame, `| header length | payload length | header (JSON) | payload |`:
"call", "interrupt", "quit" from the owner; "hello", "done" from a rank (JSON only: the
owner never unpickles what a rank sends). See docs/ARCHITECTURE.md, "Warm ranks".
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import socket
import struct
from typing import Any

from workbench.records.liveness import this_host

_SIZES = struct.Struct("!II")
ENV_TOKEN = "WORKBENCH_POOL_TOKEN"
_TCP = "tcp:"


def new_token() -> str:
    """A pool's secret (its ranks show it in their hello)."""
    return secrets.token_hex(32)


def listen(backlog: int, tcp: bool = False) -> tuple[socket.socket, str]:
    """(a listening socket, the address its ranks connect to): an abstract Unix socket with a
    random name (two pools never meet), or with `tcp` a port on every interface, as
    "tcp:<this host's name>:<port>"."""
    if tcp:
        server = socket.create_server(("", 0), backlog=backlog)
        return server, f"{_TCP}{this_host()}:{server.getsockname()[1]}"
    address = f"workbench-pool-{os.getuid()}-{secrets.token_hex(16)}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + address)  # a leading NUL byte: the abstract namespace, no file
    server.listen(backlog)
    return server, address


def trusted(conn: socket.socket, hello: dict[str, Any], token: str) -> bool:
    """True when the peer showed the pool's token and, on a Unix socket, runs as our user."""
    if conn.family == socket.AF_UNIX:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():
            return False
    shown = hello.get("token")
    return isinstance(shown, str) and hmac.compare_digest(shown.encode(), token.encode())


def connect(address: str) -> socket.socket:
    """Connect to the owner at `address` (see `listen`)."""
    if address.startswith(_TCP):
        host, _, port = address[len(_TCP):].rpartition(":")
        conn = socket.create_connection((host, int(port)), timeout=60)
        conn.settimeout(None)
        return conn
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect("\0" + address)
    return conn


def send(conn: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    """Send one frame (the whole of it, or raise OSError)."""
    head = json.dumps(header).encode()
    conn.sendall(_SIZES.pack(len(head), len(payload)) + head + payload)


def receive(conn: socket.socket) -> tuple[dict[str, Any], bytes] | None:
    """The next frame as (header, payload); None when the other side has closed."""
    sizes = _exactly(conn, _SIZES.size)
    if sizes is None:
        return None
    head_len, payload_len = _SIZES.unpack(sizes)
    head = _exactly(conn, head_len)
    payload = _exactly(conn, payload_len) if payload_len else b""
    if head is None or payload is None:
        return None
    return json.loads(head), payload


def _exactly(conn: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        try:
            chunk = conn.recv(min(left, 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
