"""The channel between a pool of warm ranks and the process that owns it (pool.py).

One Unix-domain stream socket per rank, in Linux's abstract namespace: it has no file to
leave behind when a kernel is killed, and a connection costs microseconds, where a fresh
interpreter costs seconds. The owner binds the socket *before* it starts the ranks, so the
name cannot be taken by anyone else, and it accepts only connections from processes of its
own user (`SO_PEERCRED`), so no other user of the machine can send work to the ranks or
read what they return.

A message is one frame: a JSON header and an optional payload of bytes,

    | header length (4 bytes) | payload length (4 bytes) | header (JSON) | payload |

The owner sends `{"op": "call", ...}` with the pickled work as payload, `{"op": "interrupt"}`
and `{"op": "quit"}`; a rank sends `{"op": "hello", "rank", "pid"}` once it is ready and
`{"op": "done", "id", "rank", "ok"}` after each call. Replies are JSON only: the owner never
unpickles what a rank sends.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
from typing import Any

_SIZES = struct.Struct("!II")


def new_address() -> str:
    """A fresh name for a pool's socket (random: two pools never meet)."""
    return f"workbench-pool-{os.getuid()}-{secrets.token_hex(16)}"


def listen(address: str, backlog: int) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + address)  # a leading NUL byte: the abstract namespace, no file
    server.listen(backlog)
    return server


def same_user(conn: socket.socket) -> bool:
    """True when the peer of `conn` runs as this process's user."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def connect(address: str) -> socket.socket:
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
