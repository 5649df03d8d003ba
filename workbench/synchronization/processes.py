"""Start a small group of worker processes for a lab, and always clean them up.

The labs (asynchronous parameter server, Hogwild!, pipeline parallelism, ring allreduce) run
as *real* operating-system processes, because what they teach — waiting, staleness, bubbles —
only shows up when several processes really run at the same time.

Three rules make this safe in a classroom notebook:

* **No port clashes.** The parent hosts the rendezvous store of ``torch.distributed`` on a port
  chosen by the operating system (port 0), and keeps it open while the workers run, so
  re-running a cell never fails with "Address already in use".
* **No hangs.** The parent watches every worker. If one dies or raises, the others (which may
  be blocked waiting for it in ``recv``) are terminated at once and the error names the worker
  that failed, with its traceback. A run that takes longer than ``timeout`` seconds is stopped
  with an error that names the workers still running.
* **No stray processes.** Every process is terminated and joined in ``finally``, also on
  Ctrl-C / "interrupt kernel"; each worker also exits on its own if its parent disappears.

Workers are started with the ``spawn`` method: a fresh interpreter per worker, which works
the same on Linux, macOS and in Jupyter (``fork`` after torch has started threads is unsafe).
The worker function must therefore live in an importable module, not in a notebook cell.
"""

from __future__ import annotations

import datetime
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class WorkerError(RuntimeError):
    """A worker process of a lab failed, died or did not finish in time."""


def _watch_parent(parent_pid: int, period_s: float = 1.0) -> None:
    """End this process if its parent goes away (so a killed kernel leaves no orphans)."""

    def watch() -> None:
        while True:
            time.sleep(period_s)
            if os.getppid() != parent_pid:
                os._exit(3)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _entry(
    rank: int,
    world_size: int,
    fn: Callable[..., Any],
    args: tuple,
    store_port: int | None,
    timeout_s: float,
    parent_pid: int,
    results: Any,
) -> None:
    """Body of every worker process: join the process group, run ``fn``, report back."""
    _watch_parent(parent_pid)
    torch.set_num_threads(1)  # one core per process: the classroom machine has few cores
    try:
        if store_port is not None:
            store = dist.TCPStore("127.0.0.1", store_port, world_size, is_master=False,
                                  timeout=datetime.timedelta(seconds=timeout_s))
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        value = fn(rank, world_size, *args)
        results.put(("ok", rank, value))
    except BaseException:  # report every failure, even KeyboardInterrupt
        results.put(("error", rank, traceback.format_exc()))
    finally:
        if store_port is not None and dist.is_initialized():
            dist.destroy_process_group()


def _stop(procs: Sequence[Any], grace_s: float = 5.0) -> None:
    """Terminate every process still alive, then kill those that ignore SIGTERM."""
    procs = [p for p in procs if p.pid is not None]  # skip any that never started
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


def run_workers(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    *,
    timeout: float = 120.0,
    distributed: bool = True,
    names: Sequence[str] | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes; return their results.

    Args:
        fn: a function defined in an importable module (spawned processes import it).
        world_size: number of processes.
        args: extra arguments, pickled to every process (keep them small: arrays of a few MB).
        timeout: seconds after which the run is stopped and :class:`WorkerError` raised.
        distributed: if True, every process first joins a ``torch.distributed`` gloo group
            (rank = its index), so ``fn`` can use ``dist.send``/``dist.recv``/collectives.
        names: how errors name each process (default ``"worker <rank>"``).

    Returns:
        The list of values returned by ``fn``, indexed by rank.

    Raises:
        WorkerError: a worker raised (its traceback is in the message), died, or the run took
            longer than ``timeout`` seconds.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    names = list(names or [f"worker {r}" for r in range(world_size)])
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    store = None
    port = None
    if distributed:
        # The parent hosts the rendezvous on a free port (0 = let the OS choose) and keeps it
        # bound until the end, so no other program can take it in between.
        store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=timeout))
        port = store.port
    procs = [ctx.Process(target=_entry, name=names[r], daemon=True,
                         args=(r, world_size, fn, args, port, timeout, os.getpid(), results))
             for r in range(world_size)]
    try:
        for p in procs:
            p.start()
        return _collect(procs, results, names, timeout)
    finally:
        _stop(procs)
        results.close()
        results.join_thread()
        del store


def _collect(procs: Sequence[Any], results: Any, names: Sequence[str], timeout: float) -> list:
    """Wait for one message per worker; raise as soon as one fails, dies or time runs out."""
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while len(values) < len(procs):
        try:
            kind, rank, payload = results.get(timeout=0.2)
        except queue.Empty:
            _check_alive(procs, values, results, names, deadline, timeout)
            continue
        if kind == "error":
            raise WorkerError(f"{names[rank]} (pid {procs[rank].pid}) failed:\n{payload}")
        values[rank] = payload
    return [values[r] for r in range(len(procs))]


def _check_alive(procs, values, results, names, deadline, timeout) -> None:
    """Raise if a worker died without reporting, or if the run is past its deadline."""
    for rank, p in enumerate(procs):
        if rank not in values and not p.is_alive():
            try:  # it may have reported just before exiting
                kind, r, payload = results.get(timeout=1.0)
            except queue.Empty:
                raise WorkerError(
                    f"{names[rank]} (pid {p.pid}) died with exit code {p.exitcode} "
                    "without reporting a result; the other workers were stopped."
                ) from None
            if kind == "error":
                raise WorkerError(f"{names[r]} (pid {procs[r].pid}) failed:\n{payload}")
            values[r] = payload
            return
    if time.monotonic() > deadline:
        waiting = ", ".join(names[r] for r in range(len(procs)) if r not in values)
        raise WorkerError(
            f"the run did not finish within {timeout:g} s; still running: {waiting}. "
            "Pass a larger timeout, or fewer epochs/steps."
        )
