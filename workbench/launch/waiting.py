"""A job waiting its turn says, once a second, what it waits for and whose jobs hold it; Ctrl-C
stops it in one line. See docs/ARCHITECTURE.md, "Sharing the host's cores".
"""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class StoppedWaiting(KeyboardInterrupt):
    """Ctrl-C while a job waited its turn: IPython shows this one line, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def wait_turn(job: Any, every_s: float = 1.0) -> None:
    """Block while `job` is queued, saying what for every `every_s` s; Ctrl-C stops it."""
    if job.status != "queued":
        return
    show, reason = _shower(), ""
    with interrupt_once():
        try:
            while job.status == "queued":
                reason = job.waiting_for or reason
                show(f"run {job.run_id} has waited {time.time() - job.asked_at:.0f} s for "
                     f"{reason} (interrupt the kernel to stop waiting)")
                job.wait(every_s)
        except KeyboardInterrupt:
            raise stop_waiting(job, reason) from None
    show(f"run {job.run_id} started after waiting {time.time() - job.asked_at:.0f} s")


def stop_waiting(job: Any, reason: str | None) -> StoppedWaiting:
    job.stop()
    return StoppedWaiting(f"run {job.run_id} stopped after waiting "
                          f"{time.time() - job.asked_at:.0f} s for {reason}")


@contextmanager
def interrupt_once() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt once in this block: a second one, pressed while the first
    is handled (a job being stopped), cannot cut the stop short however long it takes to begin.
    Only in the main thread with Python's own handler in place (a kernel running a cell)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return

    def once(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, lambda *_: None)  # (not SIG_IGN: a child would inherit it)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, once)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def in_kernel() -> bool:
    """Inside a Jupyter kernel, where output can be shown under the cell."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def _shower() -> Callable[[str], None]:
    """Show a line under the cell (replacing the last), else on stderr if it says anything new."""
    if in_kernel():
        from IPython.display import display

        handle = display({"text/plain": ""}, raw=True, display_id=True)
        return lambda text: handle.update({"text/plain": text}, raw=True)
    said: list[str] = []

    def say(text: str) -> None:
        gist = re.sub(r"\d+", "N", text)
        if gist not in said:
            said.append(gist)
            print(f"workbench: {text}", file=sys.stderr, flush=True)

    return say
