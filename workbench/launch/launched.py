"""What a job asks of whatever started its ranks: the one interface, `Launched`.

The watcher (watch.py) and the job's ending (ending.py) ask it the same questions, and each
way of starting ranks answers them in its own class (see launchers.py): `poll()` and
`wait()` as `subprocess.Popen` answers them, `pause()` between two looks, `vanished()`
(ranks gone without an exit record), `undecided()` (may a rank not yet known dead still be
the culprit?), `here()` (is the rank's clock the watcher's?), `ending(rc)` (how it ended, in
words) and `end()` (end what the launcher runs elsewhere).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.config import JobConfig
    from workbench.records.blame import Failure

GUARD = Path(__file__).with_name("guard.py")  # run beside every launcher (see guard.py)
POLL_S = 0.2  # how often the watcher looks (s)
#: After the launcher has exited, a remote rank whose heartbeat has not changed for this
#: long is judged gone (it beats every second while alive).
REMOTE_GONE_S = 3.0
Ranks = dict[int, tuple[int, str]]  # rank -> (pid, host), from the ranks' pid files
Exits = dict[int, dict[str, Any]]   # rank -> its exit record


class Launched:
    """The defaults are those of a launcher with nothing to say: no pid here, no rank found
    gone by it."""

    pid: int | None = None
    pending_reason: str | None = None  # why a scheduler still queues the job
    #: Whether the ranks run on this host's cores, so that too many of them slow each other.
    shares_this_host = False

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> int:
        raise NotImplementedError

    def pause(self) -> None:
        """Wait before the watcher's next look."""
        time.sleep(POLL_S)

    def vanished(self, exits: Exits, ranks: Ranks, ended: bool) -> list[Failure]:
        """Ranks that ended without an exit record (`ended`: the launcher has exited)."""
        return []

    #: How long after the first failure the watcher keeps looking while `undecided()` says
    #: a rank not yet known dead may still be the culprit (s).
    decide_within_s = 2 * REMOTE_GONE_S

    def undecided(self, exits: Exits, ranks: Ranks, since: float) -> bool:
        """True while a rank without an exit record may yet prove to have died at about
        `since` (time.monotonic()), before the failure the watcher has seen."""
        return False

    def here(self, rank: int, ranks: Ranks) -> bool:
        """Whether `rank` ran on the watcher's host (its records' times are on our clock)."""
        return False

    def ending(self, rc: int) -> str:
        return f"the launcher exited with code {rc}"

    def end(self) -> None:
        """End what the launcher runs beyond this host's processes (which the job ends)."""

    def facts(self) -> dict[str, Any]:
        """What the job's summary records about this launcher."""
        return {}

    @staticmethod
    def cores_bound(cfg: JobConfig) -> int:
        """Cores the job binds on this host: none unless its ranks run here."""
        return 0
