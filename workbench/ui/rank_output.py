"""What the ranks print, under the notebook cell that launched them, prefixed with the rank.

Every rank's stdout and stderr go to `runs/<id>/logs/rank<k>.log` (rank/protocol.py). A
`RankOutput` follows those files while the job runs and copies new lines into an ipywidgets
`Output` shown under the cell: `[rank 1] epoch 3 loss 0.21`.

Why it cannot freeze the notebook, however much the ranks print:

- it shows at most `MAX_LINES` lines per rank and only counts the rest; the log keeps
  everything, and the last message says where;
- it sends the browser at most one update every `every_s` seconds, whatever the rate of
  prints (a message per line is what makes chatty cells hang a notebook);
- it runs in a thread of its own, so its updates also arrive while the cell blocks in
  `job.wait()`; an Output widget may be updated from any thread.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import ipywidgets as widgets

#: Lines shown per rank; further lines are only counted (they stay in the rank's log).
MAX_LINES = 100
#: Characters shown per line.
MAX_CHARS = 400

#: The followers of the last jobs, by run id (to inspect what was shown, e.g. in tests).
FOLLOWERS: dict[str, RankOutput] = {}
KEEP_FOLLOWERS = 20


class RankOutput:
    """Follows the rank logs of `job` into an Output widget until the job has ended."""

    def __init__(self, job: Any, every_s: float = 0.3, max_lines: int = MAX_LINES) -> None:
        self.job, self.every_s, self.max_lines = job, every_s, max_lines
        self.widget = widgets.Output(layout=widgets.Layout(max_height="320px",
                                                           overflow="auto"))
        self._offsets = [0] * job.world_size
        self._partial = [b""] * job.world_size
        self.shown = [0] * job.world_size     # lines shown, per rank
        self.hidden = [0] * job.world_size    # lines only counted, per rank
        self._lines: list[str] = []
        self._tail: list[str] = []            # the closing message
        self.updates = 0                      # messages sent to the browser
        self.finished = threading.Event()
        FOLLOWERS[job.run_id] = self
        for old in list(FOLLOWERS)[:-KEEP_FOLLOWERS]:  # dicts keep insertion order
            del FOLLOWERS[old]

    @property
    def text(self) -> str:
        """Everything shown so far, as one string."""
        return "".join(self._lines + self._tail)

    def show(self) -> RankOutput:
        """Display the widget under the current cell and start following."""
        from IPython.display import display

        display(self.widget)
        threading.Thread(target=self._follow, name=f"output-{self.job.run_id}",
                         daemon=True).start()
        return self

    def _follow(self) -> None:
        while not self.job.done:
            if self.job.status == "queued":  # said, and updated, until it starts
                self._tail = [f"run {self.job.run_id} has waited "
                              f"{time.time() - self.job.asked_at:.0f} s for "
                              f"{self.job.waiting_for} (job.stop() gives up)\n"]
                self._send()
            elif self._tail:
                self._tail = []
                self._send()
            self.read()
            self.finished.wait(self.every_s)
        self.read()  # the last lines, written before the job ended
        self._tail = self._closing()
        self._send()
        self.finished.set()

    def read(self) -> None:
        """Read the new complete lines of every rank's log; send them in one update."""
        before = len(self._lines)
        for rank in range(self.job.world_size):
            for line in self._new_lines(rank):
                if self.shown[rank] < self.max_lines:
                    self.shown[rank] += 1
                    self._lines.append(f"[rank {rank}] {line[:MAX_CHARS]}\n")
                else:
                    self.hidden[rank] += 1
        if len(self._lines) != before:
            self._send()

    def _new_lines(self, rank: int) -> list[str]:
        """The new complete lines of `rank`'s log, read 1 MiB at a time; past the lines
        shown, only counted (a rank may print gigabytes)."""
        path, lines = Path(self.job.run_dir) / "logs" / f"rank{rank}.log", []
        try:
            with open(path, "rb") as f:
                f.seek(self._offsets[rank])
                while chunk := f.read(1 << 20):
                    self._offsets[rank] += len(chunk)
                    if self.shown[rank] + len(lines) >= self.max_lines:
                        self.hidden[rank] += chunk.count(b"\n")
                        continue
                    *complete, rest = (self._partial[rank] + chunk).split(b"\n")
                    self._partial[rank] = rest[:MAX_CHARS]
                    lines += [c.decode("utf-8", errors="replace") for c in complete]
        except FileNotFoundError:
            pass
        return lines

    def _closing(self) -> list[str]:
        """Lines not shown, where to find them, and how the job ended if it did not succeed.

        A success says nothing here: the cell that launched the job says what came of it
        (its results, or an exercise's verdict, which a line saying "succeeded" above it
        would contradict when the answer is wrong)."""
        out = [f"[rank {r}] ... {n:,} more lines in {self.job.run_dir}/logs/rank{r}.log\n"
               for r, n in enumerate(self.hidden) if n]
        summary = self.job.summary or {}
        status = summary.get("status", self.job.status)
        failure = summary.get("failure") or {}
        if status == "succeeded":
            return out
        if failure:
            rank = failure.get("rank")
            who = f"rank {rank}" if rank is not None else "the launcher"
            out.append(f"run {self.job.run_id} {status}: {who}: {failure.get('error')}\n")
            if rank is not None and self.hidden[rank] and failure.get("traceback"):
                out.append(failure["traceback"])  # capped away: show it here
            return out
        return [*out, f"run {self.job.run_id} {status}\n"]

    def _send(self) -> None:
        """Replace the widget's content with everything shown so far (one message)."""
        self.widget.outputs = ({"output_type": "stream", "name": "stdout",
                                "text": self.text},)
        self.updates += 1
