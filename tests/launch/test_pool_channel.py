"""The warm pool's channel (rank/channel.py) against another user and against strangers.

Another user who reaches a starting pool's socket is shut out before a byte is read; a
stranger without the pool's key (over TCP, as Slurm's ranks connect) is read no more than the
standard library's challenge answer, a silent one is given `HELLO_S`, and one connection at
a time is taken: no memory or thread per connection. The key is on no command line and in
no record but the job's 0600 secrets file. One Horovod pool (its launcher writes the ranks'
environment on their command line), about 5 s; the rest is sockets only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import AuthenticationError, Client
from pathlib import Path

import psutil
import pytest
from _other_user import needs_other_user, other_user

import workbench
from workbench.rank import channel

FLOOD = r"""
import socket, struct, sys
address, n = sys.argv[1], int(sys.argv[2])
held = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect("\0" + address)
    held.append(s)
try:  # a length of 2 GiB, then 64 MiB of it: what a reader of whole frames would keep
    held[0].sendall(struct.pack("!iI", 0x7FFFFFFF, 0x7FFFFFFF) + b"x" * (64 << 20))
except OSError:
    pass
print(len(held), flush=True)
sys.stdin.read()
"""


def as_other_user(*argv: str, **kwargs) -> subprocess.Popen:
    uid, gid = other_user()
    return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                             "--", *argv], **kwargs)


def ranks_pids(job) -> list[int]:
    return [p.pid for p in psutil.process_iter() if _of_run(p, job.run_id)]


def _of_run(proc: psutil.Process, run_id: str) -> bool:
    try:
        return proc.environ().get("WORKBENCH_RUN_ID") == run_id
    except psutil.Error:
        return False


def two(rank_offset):
    import os

    return int(os.environ.get("HOROVOD_RANK", "0")) + rank_offset


@needs_other_user
@pytest.mark.timeout(300)
def test_another_user_flooding_a_starting_pool_costs_it_nothing_and_never_sees_its_key(
        tmp_path):
    me = psutil.Process()
    threads, rss = me.num_threads(), me.memory_info().rss
    pool = workbench.ranks(np=2, engine="horovod", runs_dir=str(tmp_path / "runs"),
                           cpu_bind="none")
    try:
        flood = as_other_user(sys.executable, "-c", FLOOD, pool._ranks.address, "300",
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert flood.stdout.readline().strip() == "300"      # 300 connections, 64 MiB sent
        pool.wait_ready(240)
        time.sleep(0.3)
        assert me.num_threads() - threads <= 4, "a thread per connection"   # 2 followers
        assert me.memory_info().rss - rss < 32 << 20, "what the stranger sent was kept"
        call = pool.run(two, 10)
        assert call.wait(60) == "succeeded" and call.results() == [10, 11]
        key = pool._ranks.key
        for pid in [p for p in psutil.pids() if p != os.getpid()]:
            for what in ("cmdline", "environ"):
                try:
                    data = Path(f"/proc/{pid}/{what}").read_bytes()
                except OSError:
                    continue
                assert key.encode() not in data, f"the key in /proc/{pid}/{what}"
        assert key not in (pool.job.run_dir / "config.json").read_text()
        secrets = pool.job.run_dir / "secrets.json"
        assert secrets.stat().st_mode & 0o777 == 0o600 and key in secrets.read_text()
    finally:
        flood.kill()
        pool.close()


def _accepting(server, key, accepted: list) -> threading.Thread:
    def loop():
        while len(accepted) < 3:
            try:
                accepted.append(channel.accept(server, key))
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(60)
def test_over_tcp_a_stranger_is_read_no_more_than_a_challenge_and_a_silent_one_briefly(
        monkeypatch):
    monkeypatch.setattr(channel, "HELLO_S", 0.3)
    server, address = channel.listen(tcp=True)
    host = server.getsockname()[0]
    assert host == socket.gethostbyname(socket.gethostname()) and host != "0.0.0.0"
    key, accepted = channel.new_key(), []
    me = psutil.Process()
    thread, rss = _accepting(server, key, accepted), me.memory_info().rss
    port = int(address.rsplit(":", 1)[1])
    with socket.create_connection((host, port)) as stranger:
        stranger.recv(100)                                  # the challenge
        with pytest.raises(OSError):                        # closed after 4 bytes of length
            for _ in range(64):
                stranger.sendall(b"\x7f\xff\xff\xff" + b"x" * (1 << 20))
    assert me.memory_info().rss - rss < 16 << 20
    silent = socket.create_connection((host, port))
    started = time.monotonic()
    rank = Client((host, port), "AF_INET", authkey=key.encode())  # queued behind the silent
    assert time.monotonic() - started < 3
    thread.join(5)
    assert accepted[:2] == [None, None] and accepted[2] is not None
    channel.send(accepted[2], {"op": "call"}, b"payload")
    assert channel.receive(rank) == ({"op": "call"}, b"payload")
    silent.close()
    server.close()


def test_a_rank_refuses_an_owner_that_cannot_prove_the_key():
    server, address = channel.listen()
    accepted: list = []
    _accepting(server, channel.new_key(), accepted)
    with pytest.raises(AuthenticationError):
        channel.connect(address, channel.new_key())
    server.close()
