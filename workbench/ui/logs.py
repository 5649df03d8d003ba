"""A log pane: the last lines of each rank's log file, one tab per rank.

Every rank writes its stdout and stderr to ``runs/<id>/logs/rank<k>.log`` (the launcher writes
``launcher.log``), so a print() in a rank, a warning or a traceback shows up here while the job
runs. Reading only the end of each file keeps a refresh cheap however long the log grows.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

#: Lines shown per log, and the most bytes read from the end of a file to find them.
TAIL_LINES = 40
TAIL_BYTES = 16_384


def tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> str:
    """Return the last ``lines`` lines of a text file ("" if it does not exist yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _pre(text: str) -> str:
    """HTML for a scrollable block of log text."""
    body = html.escape(text) if text else "<i>(empty so far)</i>"
    return ("<pre style='max-height:220px;overflow:auto;margin:0;font-size:11px;"
            f"line-height:1.25;white-space:pre-wrap'>{body}</pre>")


class LogPane(widgets.Tab):
    """One tab per log file of a run: ``rank 0``, ``rank 1``, ..., ``launcher``."""

    def __init__(self) -> None:
        super().__init__()
        self._run_dir: Path | None = None
        self._shown: dict[str, str] = {}
        self.show_run(None, 0)

    def show_run(self, run_dir: Path | None, np: int) -> None:
        """Show the logs of the run in ``run_dir`` with ``np`` ranks (None: nothing yet)."""
        self._run_dir = Path(run_dir) if run_dir else None
        names = [f"rank{k}" for k in range(np)] + (["launcher"] if run_dir else [])
        self._shown = {}
        self.children = [widgets.HTML(_pre("")) for _ in names]
        self.titles = tuple(n.replace("rank", "rank ") for n in names) or ()
        self._names = names
        self.refresh()

    def refresh(self) -> None:
        """Re-read the end of every log; only changed tabs are sent to the browser."""
        if self._run_dir is None:
            return
        for name, box in zip(self._names, self.children, strict=True):
            text = tail(self._run_dir / "logs" / f"{name}.log")
            if self._shown.get(name) != text:
                self._shown[name] = text
                box.value = _pre(text)

    def text(self, rank: int) -> str:
        """The log text shown for ``rank`` (for tests and for error messages)."""
        return self._shown.get(f"rank{rank}", "")
