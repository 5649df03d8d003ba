"""The checker's own view of a rank's communication: what was sent, when, and who waited.

A checker that read the engine's notes, or the handles `dist.all_reduce` returns, would see
only what the student's code lets it see. This instrument sits under every call instead: for
the length of a check it replaces the collective methods of torch's `ProcessGroup` class
(`allreduce`, `broadcast`, `_allgather_base`, ...), which every `torch.distributed` function
reaches however it was imported or called. Each collective the student's code starts is

- noted in one timeline (`time.perf_counter` s) with whatever the checker notes beside it
  (a gradient ready, `backward()` begun and returned, an optimizer step): its name, the
  addresses and sizes of its tensors, whether it was asked to run asynchronously;
- handed back as a handle of the network's (`Held`): its `wait()`, `is_completed()`,
  `get_future()` ... note who asked, and when;
- delivered by a thread of the network's, in the order the rank started them, once every
  rank has started the same one (the checker's own process group compares their names and
  sizes first). A rank that starts a collective the others never start, or another size
  (threads that start them in a different order on each rank), gets an error naming both
  sides, at once rather than at gloo's 30-minute timeout or its abort on a size mismatch,
  and the process group stays clean: the unmatched call never reached it;
- with `hold_s`, held while `backward()` runs (exercise 13), as on a network slower than any
  backward pass (a tensor changed between the start and the delivery is noted: on a real
  network it would have raced with the send): a hook that waits for its all-reduce in any
  way holds `backward()` up,
  either by asking the handle (noted at once, and the network then delivers) or, by
  whatever other means (polling the buffer, a barrier, sleeping), until `hold_s` has passed
  (noted then). A hook that only starts its all-reduce never notices.

Point-to-point sends and receives are noted and passed straight through: a send and its
receive differ by design, so there is nothing to compare.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

#: The ProcessGroup methods that start a collective (each returns a Work); those missing
#: from a torch version are skipped.
COLLECTIVES = ("allreduce", "allreduce_coalesced", "allgather", "_allgather_base",
               "all_gather_single", "allgather_coalesced", "allgather_into_tensor_coalesced",
               "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_single",
               "reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base", "broadcast",
               "reduce", "gather", "scatter", "barrier")
#: Calls noted, then passed straight through: point-to-point ones, and the barrier that
#: blocks inside torch itself.
PASSED_THROUGH = ("send", "recv", "recv_anysource", "monitored_barrier")
#: Collectives whose tensors may differ between ranks (a gather's list is the root's only):
#: compared by name; every other one by name and size too.
ANY_SIZE = ("gather", "scatter", "alltoall", "alltoall_base")
#: What the delivering thread tells its peers when this rank will start nothing more.
_DONE = "nothing more (its function had returned)"


class Network:
    """One rank's instrument (see the module docstring). Use `installed(...)`."""

    def __init__(self, side: Any, hold_s: float | None) -> None:
        self.side, self.hold_s = side, hold_s   # the checker's own process group
        self.events: list[dict[str, Any]] = []   # the timeline, in order
        self.in_backward = False
        self.error: str | None = None            # set when the ranks' collectives differed
        self._open = threading.Event()
        self._open.set()
        self._queue: queue.Queue[Held | None] = queue.Queue()
        self._lock = threading.Lock()            # an error is set, or a call queued: not both
        self._thread = threading.Thread(target=self._deliver_all, name="checker-network",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the timeline
    def note(self, kind: str, **detail: Any) -> None:
        self.events.append({"t": time.perf_counter(), "kind": kind, **detail})

    def backward(self, running: bool) -> None:
        """`backward()` begins (True) or has returned (False): hold, then deliver."""
        self.note("backward" if running else "returned")
        self.in_backward = running
        if running and self.hold_s is not None and not self._gave_up():
            self._open.clear()
        else:
            self._open.set()

    def asked(self, what: str, op: str) -> None:
        """The student's code asked a handle `what` (wait(), is_completed() ...)."""
        if self.in_backward:
            self.note("asked", what=what, op=op)
            self._open.set()   # it waits in backward() already: no need to hold on

    def _gave_up(self) -> bool:
        return any(e["kind"] == "held_up" for e in self.events)

    # ------------------------------------------------------------------ starting
    def start(self, what: str, issue: Callable[[], Any], args: tuple, kwargs: dict) -> Held:
        tensors = [(t.data_ptr(), t.numel()) for t in _tensors(args)]
        self.note("start", what=what, tensors=tensors, sync=_synchronous(args, kwargs),
                  in_backward=self.in_backward)
        size = "" if what in ANY_SIZE else f" of {sum(n for _, n in tensors)} elements"
        held = Held(self, what, issue, what + size)
        if self.hold_s is not None:   # what it must carry: changed before delivery, noted
            held.inputs = [(t, t.detach().clone()) for t in _tensors(args)]
        with self._lock:
            if self.error is None:
                self._queue.put(held)
                return held
        held.fail(self.error)
        return held

    def close(self, timeout_s: float = 60.0) -> None:
        """Deliver what is left, tell the peers this rank is done, stop the thread."""
        self._open.set()
        self._queue.put(None)
        self._thread.join(timeout_s)

    # ------------------------------------------------------------------ delivering
    def _deliver_all(self) -> None:
        while True:
            held = self._queue.get()
            if held is not None and self.hold_s is not None and not self._open.wait(
                    max(0.0, held.started + self.hold_s - time.perf_counter())):
                self.note("held_up", op=held.what, since=held.started)
                self._open.set()
            mine = _DONE if held is None else held.described
            theirs = self._names(mine)
            if len(set(theirs)) > 1:
                self._mismatch(theirs, held)
                return
            if held is None:
                return
            held.deliver()

    def _names(self, mine: str) -> list[str]:
        """What every rank starts next (the checker's own group, not the student's)."""
        import torch.distributed as dist

        names: list[Any] = [None] * dist.get_world_size(self.side)
        dist.all_gather_object(names, mine, group=self.side)
        return names

    def _mismatch(self, names: list[str], held: Held | None) -> None:
        said = "; ".join(f"rank {r} {n if n == _DONE else 'started ' + n}"
                        for r, n in enumerate(names))
        self.note("mismatch", names=names)
        pending = [held] if held is not None else []
        with self._lock:
            self.error = (f"the ranks started different collectives ({said}): every rank "
                          "must start the same collectives in the same order")
            while not self._queue.empty():
                pending.append(self._queue.get())
        for item in pending:
            if item is not None:
                item.fail(self.error)


class Held:
    """The handle the student's code gets for one collective: a `Work` that notes each
    question asked of it, and answers once the network has delivered the real call."""

    def __init__(self, net: Network, what: str, issue: Callable[[], Any],
                 described: str) -> None:
        self.net, self.what, self._issue, self.described = net, what, issue, described
        self.started = time.perf_counter()
        self._delivered = threading.Event()
        self._work: Any = None
        self._error: str | None = None
        self._futures: list[_Future] = []
        self.inputs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def deliver(self) -> None:
        if any(not torch.equal(t, was) for t, was in self.inputs):
            self.net.note("changed", op=self.what, since=self.started)
        try:
            self._work = self._issue()
        except Exception as exc:  # noqa: BLE001  the student's call was wrong: say so on wait
            self._error = f"{type(exc).__name__}: {exc}"
        self._delivered.set()
        for future in self._futures:
            self._chain(future)

    def fail(self, error: str) -> None:
        self._error = error
        self._delivered.set()
        for future in self._futures:
            self._chain(future)

    def _real(self, asked: str) -> Any:
        self.net.asked(asked, self.what)
        self._delivered.wait()
        if self._error:
            raise RuntimeError(self._error)
        return self._work

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        return self._real("wait()").wait(*args, **kwargs)

    def is_completed(self) -> bool:
        self.net.asked("is_completed()", self.what)
        return self._delivered.is_set() and (self._error is not None
                                             or self._work.is_completed())

    def get_future(self) -> _Future:
        future = _Future(self)
        self._futures.append(future)
        if self._delivered.is_set():
            self._chain(future)
        return future

    def _chain(self, future: _Future) -> None:
        if self._error:
            future.set_exception(RuntimeError(self._error))
            return
        real = self._work.get_future()
        real.add_done_callback(lambda f: _settle(future, f))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._real(f"{name}()"), name)


class _Future(torch.futures.Future):
    """`Held.get_future()`: the result once delivered; waiting on it is noted."""

    def __init__(self, held: Held) -> None:
        super().__init__()
        self._held = held

    def wait(self) -> Any:
        self._held.net.asked("get_future().wait()", self._held.what)
        return super().wait()

    def value(self) -> Any:
        self._held.net.asked("get_future().value()", self._held.what)
        return super().value()

    def done(self) -> bool:
        self._held.net.asked("get_future().done()", self._held.what)
        return super().done()


def _settle(future: _Future, real: Any) -> None:
    try:
        future.set_result(real.value())
    except Exception as exc:  # noqa: BLE001  passed on to whoever waits
        future.set_exception(exc)


def _tensors(args: tuple) -> list[torch.Tensor]:
    """The tensors among a ProcessGroup call's arguments (in lists, one level deep too)."""
    found: list[torch.Tensor] = []
    for arg in args:
        items = arg if isinstance(arg, list | tuple) else [arg]
        for item in items:
            inner = item if isinstance(item, list | tuple) else [item]
            found += [t for t in inner if isinstance(t, torch.Tensor)]
    return found


def _synchronous(args: tuple, kwargs: dict) -> bool | None:
    """The options' asyncOp, negated: True for `async_op=False`; None if not said."""
    for value in (*args, *kwargs.values()):
        if hasattr(value, "asyncOp"):
            return not value.asyncOp
    return None


@contextmanager
def installed(hold_s: float | None = None) -> Iterator[Network]:
    """A `Network` on this rank for the block (every rank enters it together): the
    checker's process group is made, the ProcessGroup methods replaced; afterwards both
    undone, also after an error (a warm rank serves later calls as a fresh one would)."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroup

    side = dist.new_group(backend="gloo")
    net = Network(side, hold_s)
    # The class's own entries (pybind's instancemethod objects), put back as they were;
    # getattr gives the unbound function, which the replacements call with the group.
    originals = {name: vars(ProcessGroup)[name]
                 for name in COLLECTIVES + PASSED_THROUGH if name in vars(ProcessGroup)}
    before = set(threading.enumerate()) | {net._thread}
    for name in originals:
        setattr(ProcessGroup, name, _replacement(net, name, getattr(ProcessGroup, name)))
    try:
        yield net
    finally:
        _join(set(threading.enumerate()) - before, THREADS_S)
        net.close()
        for name, real in originals.items():
            setattr(ProcessGroup, name, real)
        dist.destroy_process_group(side)


#: How long the threads the student's code started may go on after it returned, s: their
#: collectives still go through the network (a collective started after the network is gone
#: would wait for a partner on the process group a warm rank's next call uses).
THREADS_S = 5.0


def _join(threads: set[threading.Thread], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _replacement(net: Network, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def call(pg: Any, *args: Any, **kwargs: Any) -> Any:
        if pg is net.side:
            return real(pg, *args, **kwargs)
        if name in PASSED_THROUGH:
            net.note("start", what=name, tensors=[(t.data_ptr(), t.numel())
                                                  for t in _tensors(args)],
                     sync=name == "monitored_barrier", in_backward=net.in_backward)
            return real(pg, *args, **kwargs)
        return net.start(name, lambda: real(pg, *args, **kwargs), args, kwargs)
    call.__name__ = name
    return call
