"""What every live panel needs: polling on the kernel's event loop, and messages.

Why an asyncio task and not a thread
------------------------------------
A Jupyter kernel handles widget messages (a button click) only between other work, on its
event loop. A button callback must therefore return at once, and anything that waits (for a
job to make progress) must *yield* to the loop instead of blocking it. An asyncio task that
``await asyncio.sleep(...)`` between refreshes does exactly that: the kernel stays responsive,
and since the task runs on the loop's own thread it may change Bokeh models, which are not
thread-safe. Blocking calls (stopping a job can take seconds) go to a worker thread with
``run_in_executor`` and their result is awaited on the loop.

Outside a kernel (a test, a script) no loop is running; the panels then do nothing in the
background and the caller drives them by calling ``refresh()``.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable, Coroutine
from typing import Any

#: Colour of a message by level.
LEVEL_COLORS = {"info": "#333333", "ok": "#1a7f37", "warn": "#9a6700", "error": "#cf222e"}


def running_loop() -> asyncio.AbstractEventLoop | None:
    """Return the event loop running this code (the kernel's), or None in plain scripts."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def stop_in_background(job: Any, then: Callable[[], Any]) -> None:
    """Stop `job` without blocking the kernel: stopping takes up to a few seconds, so inside
    a running event loop it goes to a worker thread (the polling task notices the result);
    outside one it runs here and `then()` refreshes the view."""
    loop = running_loop()
    if loop is None:
        job.stop()
        then()
    else:
        loop.run_in_executor(None, job.stop)


def start_task(make: Callable[[], Coroutine[Any, Any, Any]]) -> asyncio.Task | None:
    """Start ``make()`` as a task on the running loop; return None (and start nothing) if
    no loop is running."""
    loop = running_loop()
    if loop is None:
        return None
    return loop.create_task(make())


async def poll(refresh: Callable[[], Any], running: Callable[[], bool], every_s: float,
               on_error: Callable[[Exception], Any]) -> None:
    """Call ``refresh()`` every ``every_s`` seconds while ``running()``, yielding to the loop
    in between. An error ends the polling and goes to ``on_error``: a broken live view must
    say so, not freeze silently. Cancelling the task (the panel closes) is not an error."""
    try:
        while running():
            refresh()
            if running():
                await asyncio.sleep(every_s)
    except asyncio.CancelledError:
        raise
    except Exception as err:  # noqa: BLE001 - reported, see the docstring
        on_error(err)


def message_html(text: str, level: str = "info", *, detail: str = "") -> str:
    """HTML for a one-line message, with an optional block of detail (a log, a traceback)."""
    color = LEVEL_COLORS.get(level, LEVEL_COLORS["info"])
    out = f"<span style='color:{color}'>{html.escape(text)}</span>"
    if detail:
        out += ("<pre style='max-height:200px;overflow:auto;font-size:11px;margin:4px 0;"
                f"background:#fff5f5;padding:4px'>{html.escape(detail)}</pre>")
    return out


def fmt_seconds(seconds: float) -> str:
    """Seconds as a short human string: ``4.2 s``, ``3 min 05 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s"
