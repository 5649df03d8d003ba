"""One warm rank of a pool (started by `workbench.ranks`): imported, joined, waiting for work.

    torchrun --standalone --nproc-per-node 2 -m workbench.rank.wrapper \
        --module workbench.rank.pool --address ADDR

It joins the process group once, connects to its owner (channel.py) and runs calls one at
a time, each a run of its own, in a fresh namespace; what is kept is kept on purpose, in
`workbench.kept()` or the namespace that `%%ranks --keep` cells share. No environment
variable and no thread of a call leaks into the next: docs/ARCHITECTURE.md, "Warm ranks".
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import linecache
import os
import queue
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from workbench.rank import channel
from workbench.rank.by_value import unpickle_call
from workbench.rank.context import this_rank
from workbench.rank.protocol import RankContext, attach
from workbench.rank.wrapper import save_result, user_traceback

#: The file name tracebacks give to the code of a `%%ranks` cell.
CELL_FILE = "<ranks cell>"


class CallContext(RankContext):
    """A rank's context for one call, without a second watchdog; output goes to the call's
    log until `restore()`."""

    durable = False  # the exit record is renamed into place, not fsynced (write_json_atomic)
    owns_process = False  # the pool's rank goes on

    def _supervise(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2), sys.stdout, sys.stderr)
        self._redirect_output()

    def restore(self) -> None:
        log = sys.stdout
        log.flush()
        out, err, sys.stdout, sys.stderr = self._saved
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        log.close()
        os.close(self._metrics_fd)


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
            header, payload = message
            ok, left = self.run_call(header, payload)
            channel.send(self.conn, {"op": "done", "id": header["id"], "rank": self.ctx.rank,
                                     "ok": ok, "left": left})

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

    def run_call(self, header: dict[str, Any], payload: bytes) -> tuple[bool, list[str]]:
        """Run one call: (whether it returned, the threads it left); its os.environ is undone."""
        ctx = self.ctx
        self.ctx.metric("event", message="call", run_id=header["run_id"])
        call = CallContext(Path(header["dir"]), ctx.rank, ctx.size, ctx.local_rank,
                           t0=header["t0"])
        environ, threads, ok = dict(os.environ), set(threading.enumerate()), False
        try:
            with call:
                attach(call)
                self.running = header["id"]
                try:
                    value = execute(header, payload, call)
                except BaseException as exc:
                    exc.rank_traceback = user_traceback(exc, header["kind"] != "module")
                    raise
                finally:
                    self.running = None
                save_result(call.run_dir, ctx.rank, value)
            ok = True
        except BaseException:  # noqa: BLE001 - in the call's exit record and log
            pass
        finally:
            attach(ctx)
            call.restore()
            os.environ.clear()
            os.environ.update(environ)
        new = [t for t in threading.enumerate() if t not in threads]
        for thread in new:
            thread.join(0.05)  # one about to end is no leak
        return ok, [t.name for t in new if t.is_alive()]


#: The namespace that the cells run with `keep` share, for this rank process's life.
KEPT_CELLS: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}


def execute(header: dict[str, Any], payload: bytes, call: RankContext) -> Any:
    """Run the call's function (its value), rank module or cell (None; "kept code" in
    KEPT_CELLS, other code in a fresh namespace)."""
    if header["kind"] == "function":
        fn, args = unpickle_call(payload)
        return fn(*args)
    if header["kind"] == "module":   # its context is the call's, attached already
        importlib.import_module(payload.decode()).main()
        return None
    code = payload.decode()
    lines = code.splitlines(keepends=True)
    linecache.cache[CELL_FILE] = (len(code), None, lines, CELL_FILE)
    fresh = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(code, CELL_FILE, "exec"), KEPT_CELLS if header["kind"] == "kept code" else fresh)
    return None


def join_group(engine: str) -> None:
    """Join the process group once, and make your code's own join and leave do nothing."""
    if engine == "horovod":
        import horovod.torch as hvd

        hvd.init()
        hvd.init = hvd.shutdown = _nothing
        return
    import torch.distributed as dist

    dist.init_process_group("gloo")
    leave = dist.destroy_process_group
    dist.init_process_group = _nothing
    dist.destroy_process_group = lambda group=None: None if group is None else leave(group)


def _nothing(*_: Any, **__: Any) -> None:
    """What a second `hvd.init()` or `init_process_group()` does in a pool: nothing."""


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
