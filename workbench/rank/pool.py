"""One warm rank of a pool (started by `workbench.ranks`): imported, joined, waiting for work.

    torchrun --standalone --nproc-per-node 2 -m workbench.rank.wrapper \
        --module workbench.rank.pool --address ADDR

It runs its owner's calls one at a time, each a run of its own; what is kept is kept on
purpose (`workbench.kept()`, `%%ranks --keep`): docs/ARCHITECTURE.md, "Warm ranks".
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import linecache
import os
import queue
import signal
import threading
from pathlib import Path
from typing import Any

from workbench.rank import channel
from workbench.rank.by_value import unpickle_call
from workbench.rank.context import this_rank
from workbench.rank.protocol import RankContext, attach
from workbench.rank.wrapper import run_attached, save_result

CELL_FILE = "<ranks cell>"


class Rank:
    """The serving loop of one warm rank."""

    def __init__(self, ctx: RankContext, address: str) -> None:
        self.ctx = ctx
        # the key, from the job's 0600 secrets file, is not for the calls' code
        self.conn = channel.connect(address, os.environ.pop(channel.ENV_KEY, ""))
        self.calls: queue.Queue[tuple[dict[str, Any], bytes] | None] = queue.Queue()
        self.running: int | None = None  # the id of the call in progress
        signal.signal(signal.SIGINT, self._on_interrupt)

    def serve(self) -> None:
        channel.send(self.conn, {"op": "hello", "rank": self.ctx.rank, "pid": os.getpid()})
        threading.Thread(target=self._read, name="pool-reader", daemon=True).start()
        while (message := self.calls.get()) is not None:
            left = self.run_call(*message)
            channel.send(self.conn, {"op": "done", "id": message[0]["id"], "left": left})

    def _read(self) -> None:
        """Messages from the owner: calls queue up; an interrupt stops the running call."""
        while (message := channel.receive(self.conn)) is not None:
            header, payload = message
            if header["op"] == "call":
                self.calls.put((header, payload))
            elif header["op"] == "interrupt" and self.running == header["id"]:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            elif header["op"] == "quit":
                break
        self.calls.put(None)  # the owner has gone or asked us to: leave

    def _on_interrupt(self, *_: Any) -> None:
        if self.running is not None:  # between calls there is nothing to interrupt
            raise KeyboardInterrupt("stopped by the pool's owner")

    def run_call(self, header: dict[str, Any], payload: bytes) -> list[str]:
        """Run one call: the threads it left running; its os.environ is undone."""
        ctx = self.ctx
        ctx.metric("event", message="call", run_id=header["run_id"])
        call = RankContext(Path(header["dir"]), ctx.rank, ctx.size, ctx.local_rank,
                           t0=header["t0"], owns_process=False)
        environ, threads = dict(os.environ), set(threading.enumerate())
        with contextlib.suppress(BaseException), call:  # in the call's exit record and log
            self.running = header["id"]
            try:
                value = run_attached(call, lambda _: execute(header, payload),
                                     own_code=header["kind"] != "module")
            finally:
                self.running = None
            save_result(call.run_dir, ctx.rank, value)
        attach(ctx)
        call.restore()
        os.environ.clear()
        os.environ.update(environ)
        new = [t for t in threading.enumerate() if t not in threads]
        for thread in new:
            thread.join(0.05)  # one about to end is no leak
        return [t.name for t in new if t.is_alive()]


#: The namespace that the cells run with `keep` share, for this rank process's life.
KEPT_CELLS: dict[str, Any] = {"__name__": "__main__"}


def execute(header: dict[str, Any], payload: bytes) -> Any:
    """The value of the call's function; a rank module or a cell (in KEPT_CELLS if kept): None."""
    if header["kind"] == "function":
        return unpickle_call(payload)()
    if header["kind"] == "module":   # its context is the call's, attached already
        importlib.import_module(payload.decode()).main()
        return None
    code = payload.decode()
    linecache.cache[CELL_FILE] = (len(code), None, code.splitlines(keepends=True), CELL_FILE)
    namespace = KEPT_CELLS if header["kind"] == "kept code" else {"__name__": "__main__"}
    exec(compile(code, CELL_FILE, "exec"), namespace)  # (exec adds __builtins__)
    return None


def join_group(engine: str) -> None:
    """Join the process group once, and make your code's own join and leave do nothing."""
    if engine == "horovod":
        import horovod.torch as hvd

        hvd.init()
        hvd.init = hvd.shutdown = lambda *_, **__: None
        return
    import torch.distributed as dist

    dist.init_process_group("gloo")
    leave = dist.destroy_process_group
    dist.init_process_group = lambda *_, **__: None
    dist.destroy_process_group = lambda group=None: None if group is None else leave(group)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True,
                        help="the owner's abstract socket name, or tcp:HOST:PORT")
    args = parser.parse_args(argv)
    ctx = this_rank()
    import torch  # noqa: F401 - the point of a warm rank: imported once

    join_group(ctx.config.engine)
    Rank(ctx, args.address).serve()


if __name__ == "__main__":
    main()
