"""Run many notebooks in one JupyterLab and one Chromium, a few at a time, and judge each.

A notebook runs in a tab of its own (a JupyterLab page with a workspace of its own): Run All,
then, once every cell has run, the buttons its cells' metadata invites the student to press
(``workbench.press``), then the checks of page_checks.py; the page is photographed whole,
its kernel shut down (which ends its jobs and warm ranks) and the tab closed.

`Runner.outcome(path)` returns one notebook's verdict: it keeps `slots` notebooks running
while it waits, so the tests of a module, which ask for their notebooks one after another,
find most of them already run. Everything happens on the caller's thread (Playwright's sync
API): a notebook's cells run in its kernel by themselves, the runner only looks in now and
then.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from labdriver import open_and_run
from page_checks import (
    AFTER_PRESS_JS,
    CONTENT_HEIGHT_JS,
    MAX_LINES,
    PRESS_JS,
    PROBLEMS_JS,
    PROGRESS_JS,
)

#: Seconds an Output widget may stay empty after its button was pressed.
FIRST_OUTPUT_S = 5.0
#: Seconds a pressed button may take to bring what the page promises (it may run jobs).
PRESS_RESULT_S = 300.0
#: The tallest screenshot taken in one piece (Chromium draws taller pages in tiles).
MAX_SHOT_PX = 16_000


@dataclass
class Outcome:
    """One notebook's verdict: what is wrong on its page, how long it took, its picture."""

    problems: list[str]
    seconds: float
    shots: list[Path] = field(default_factory=list)


@dataclass
class _Running:
    page: object
    started: float
    idle_polls: int = 0


class Runner:
    """Runs `paths` (relative to the lab's root) `slots` at a time; see the module docstring."""

    def __init__(self, browser, url: str, token: str, paths: list[str], shots: Path,
                 slots: int = 2, timeout_s: float = 600.0) -> None:
        self.browser, self.url, self.token = browser, url, token
        self.pending, self.shots = list(paths), shots
        self.slots, self.timeout_s = slots, timeout_s
        self.running: dict[str, _Running] = {}
        self.done: dict[str, Outcome] = {}
        shots.mkdir(parents=True, exist_ok=True)

    def outcome(self, path: str) -> Outcome:
        """Wait for `path`'s verdict, running the others meanwhile."""
        if path in self.pending:  # asked for first: start it before the rest
            self.pending.remove(path)
            self.pending.insert(0, path)
        while path not in self.done:
            while len(self.running) < self.slots and self.pending:
                self._start(self.pending.pop(0))
            for name in list(self.running):
                if self._finished(name):
                    self.done[name] = self._judge(name, self.running.pop(name))
            time.sleep(0.5)
        return self.done[path]

    def close(self) -> None:
        """Shut down what still runs (a test interrupted half-way)."""
        for name, run in list(self.running.items()):
            self._shut(run.page)
            self.running.pop(name)

    def _start(self, path: str) -> None:
        page = self.browser.new_page(viewport={"width": 1400, "height": 1300})
        started = time.monotonic()
        self.running[path] = _Running(page, started)
        try:
            workspace = re.sub(r"\W", "-", path)
            open_and_run(page, self.url, self.token, path, workspace=workspace)
        except Exception as exc:  # the tab never got as far as running: say so
            self.running.pop(path)
            self.done[path] = Outcome([f"JupyterLab did not run it: {exc}"],
                                      time.monotonic() - started, self._shoot(path, page))
            self._shut(page)

    def _finished(self, path: str) -> bool:
        """True once no cell is queued or running and the kernel has been idle for two looks
        in a row (or the notebook ran out of time)."""
        run = self.running[path]
        if time.monotonic() - run.started > self.timeout_s:
            return True
        progress = run.page.evaluate(PROGRESS_JS)
        quiet = progress["running"] == 0 and progress["kernel"] in ("idle", "dead", "none")
        run.idle_polls = run.idle_polls + 1 if quiet else 0
        return run.idle_polls >= 2

    def _judge(self, path: str, run: _Running) -> Outcome:
        page, problems = run.page, []
        try:
            if time.monotonic() - run.started > self.timeout_s:
                problems.append(f"still running after {self.timeout_s:.0f} s")
            problems += self._press_buttons(page)
            problems += page.evaluate(PROBLEMS_JS, MAX_LINES)
        except Exception as exc:  # noqa: BLE001  a page that breaks the checks fails too
            problems.append(f"the page could not be checked: {exc}")
        shots = self._shoot(path, page)
        self._shut(page)
        return Outcome(problems, time.monotonic() - run.started, shots)

    def _press_buttons(self, page) -> list[str]:
        """Press each button a cell's metadata lists; its panel's Output widget must show
        something within FIRST_OUTPUT_S, and what the page promises within PRESS_RESULT_S."""
        problems = []
        presses = page.evaluate(
            "() => window.jupyterapp.shell.currentWidget.content.widgets.map((c, i) =>"
            " [i, (c.model.getMetadata('workbench') || {}).press || {}])")
        for index, buttons in presses:
            for label, what in buttons.items():
                before = page.evaluate(AFTER_PRESS_JS, [index, label])
                if page.evaluate(PRESS_JS, [index, label]) is None:
                    problems.append(f"cell {index + 1}: no button labelled {label!r}")
                    continue
                problems += self._after_press(page, index, label, what, before)
        return problems

    def _after_press(self, page, index: int, label: str, what: str, before: dict) -> list[str]:
        pressed = time.monotonic()
        while True:
            now = page.evaluate(AFTER_PRESS_JS, [index, label])
            waited = time.monotonic() - pressed
            if now["outputs"] and not now["filled"] and waited > FIRST_OUTPUT_S:
                return [f"cell {index + 1}: {FIRST_OUTPUT_S:g} s after {label!r} was pressed, "
                        "its output is still empty"]
            arrived = {"table": now["tables"] > before["tables"],
                       "output": now["filled"] > 0}.get(what, False)
            idle = page.evaluate(PROGRESS_JS)["kernel"] == "idle"
            if arrived and idle:
                return []
            if waited > PRESS_RESULT_S:
                return [f"cell {index + 1}: {PRESS_RESULT_S:g} s after {label!r} was pressed, "
                        f"no {what} (its output: {now['text']!r})"]
            time.sleep(0.5)

    def _shoot(self, path: str, page) -> list[Path]:
        """The whole notebook, in pieces of at most MAX_SHOT_PX, under `shots`."""
        base = self.shots / path.replace("/", "-").removesuffix(".ipynb")
        try:
            height = int(page.evaluate(CONTENT_HEIGHT_JS))
        except Exception:  # noqa: BLE001  no notebook on the page: the viewport as it is
            page.screenshot(path=f"{base}.png")
            return [Path(f"{base}.png")]
        shots = []
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # room for the page
        page.set_viewport_size({"width": 1400, "height": min(height, MAX_SHOT_PX)})
        scroller = ".jp-NotebookPanel .jp-WindowedPanel-outer"
        for part, top in enumerate(range(0, height, MAX_SHOT_PX)):
            page.evaluate(f"() => document.querySelector('{scroller}').scrollTop = {top}")
            time.sleep(1.0)  # let the charts draw at the new size
            shot = Path(f"{base}.png" if height <= MAX_SHOT_PX else f"{base}-{part + 1}.png")
            page.screenshot(path=str(shot))
            shots.append(shot)
        return shots

    @staticmethod
    def _shut(page) -> None:
        """Shut the notebook's kernel down (its jobs and warm ranks end with it), close the
        tab."""
        try:
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext"
                          ".shutdown()")
        except Exception:  # noqa: BLE001  a page that never opened has no kernel
            pass
        page.close()
