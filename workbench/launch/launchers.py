"""How a job's ranks are started, seen and ended: `Launcher`, handed to a `Job` as torchrun's
agent is handed its worker spec; `Local`, `Ssh`, `slurm.SlurmBatch` and `pool_call.WarmRanks`;
`end_job_processes` ends a job's launcher tree and every process carrying its run id. How each
finds a rank that died without a word, and why: docs/ARCHITECTURE.md, "Supervision".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES
from workbench.launch.environment import ranks_environment
from workbench.rank.protocol import ENV_RUN_ID
from workbench.records.blame import Failure
from workbench.records.liveness import RANK_STALE_S, Staleness, heartbeat_path, this_host
from workbench.records.liveness import process_alive as pid_alive
from workbench.records.store import open_file

GUARD = Path(__file__).with_name("guard.py")  # run beside every launcher (see guard.py)
POLL_S = 0.2  # how often the watcher looks (s)
REMOTE_GONE_S = 3.0  # s: once the launcher has exited, a remote rank silent this long is gone
RANK_WRAPPER = "workbench.rank.wrapper"  # every rank runs in it: it opens the rank's context
Ranks = dict[int, tuple[int, str]]  # rank -> (pid, host), from the ranks' pid files
Exits = dict[int, dict[str, Any]]   # rank -> its exit record


class Launcher:
    """What a job asks of whatever starts its ranks (defaults: no pid, no rank gone)."""

    pid: int | None = None
    pending_reason: str | None = None  # why a scheduler still queues the job
    shares_this_host = False  # its ranks run on this host's cores: too many slow each other
    durable = True  # the job's records are fsynced (`write_json_atomic`; a pool call's are not)
    #: How long after the first failure the watcher keeps looking while `undecided()` says
    #: a rank not yet known dead may still be the culprit (s).
    decide_within_s = 2 * REMOTE_GONE_S

    def cores_bound(self) -> int:
        return 0

    def start(self, run_id: str, run_dir: Path, cores: list[int]) -> None:
        """Start the ranks of run `run_id` (its folder is ready), bound to `cores` if any."""
        raise NotImplementedError

    def exit_code(self, within_s: float = 0.0) -> int | None:
        """The launcher's exit code once it has ended (waiting up to `within_s`), else None."""
        raise NotImplementedError

    def pause(self) -> None:
        time.sleep(POLL_S)

    def vanished(self, exits: Exits, ranks: Ranks, ended: bool) -> list[Failure]:
        """Ranks that ended without an exit record (`ended`: the launcher has exited)."""
        return []

    def undecided(self, exits: Exits, ranks: Ranks, since: float) -> bool:
        """True while a rank without an exit record may yet prove to have died before
        `since` (time.monotonic()), the failure the watcher saw."""
        return False

    def here(self, rank: int, ranks: Ranks) -> bool:
        """Whether `rank` ran on the watcher's host (its records' times are on our clock)."""
        return ranks.get(rank, (0, ""))[1] == this_host()

    def ending(self, rc: int) -> str:
        return f"the launcher exited with code {rc}"

    def end(self, status: str) -> list[int]:
        """End what is left of the job's processes; the pids that survived SIGKILL."""
        raise NotImplementedError

    def facts(self) -> dict[str, Any]:
        return {}


class Local(Launcher):
    """The engine's launcher on this host, under the guard (guard.py); its ranks may run on
    other hosts too (`Ssh`)."""

    shares_this_host = True
    decide_within_s = RANK_STALE_S + REMOTE_GONE_S

    def __init__(self, cfg: JobConfig, module: str, args: list[str]) -> None:
        self.cfg, self.module, self.args = cfg, module, args
        self.proc: subprocess.Popen[bytes] | None = None
        self.alive_at: dict[int, float] = {}  # rank: when the watcher last saw it alive
        self.beats: dict[int, Staleness] = {}  # rank on another host: its heartbeat

    def cores_bound(self) -> int:
        cfg = self.cfg
        return cfg.world_size * cfg.resolved_threads() if cfg.cpu_bind == "core" else 0

    def start(self, run_id: str, run_dir: Path, cores: list[int]) -> None:
        cfg, self.run_id, self.run_dir = self.cfg, run_id, run_dir
        launcher = ENGINES[cfg.engine].command(cfg.world_size, self.module, self.args,
                                               cfg.hosts, run_id)
        if shutil.which(launcher[0]) is None:
            raise ConfigError(f"cannot start the {cfg.engine} launcher {launcher[0]!r}: it is "
                              "not an executable file; run `workbench doctor`")
        cmd = [sys.executable, str(GUARD), str(os.getpid()), "--", *launcher]
        if cores:  # the launcher and every rank it starts inherit these cores
            cmd = ["taskset", "--cpu-list", ",".join(map(str, cores)), *cmd]
        with open(open_file(run_dir / "logs" / "launcher.log"), "ab") as log:
            log.write((" ".join(cmd) + "\n").encode())
            log.flush()
            try:  # a session of its own: a terminal's Ctrl-C reaches us, who stop the ranks
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL,
                                             env=ranks_environment(cfg, run_id, run_dir),
                                             start_new_session=True)
            except OSError as exc:
                raise ConfigError(f"cannot start the {cfg.engine} launcher {cmd[0]!r}: "
                                  f"{exc.strerror or exc}") from None
        self.pid = self.proc.pid

    def exit_code(self, within_s: float = 0.0) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(within_s) if within_s else self.proc.poll()
        return None

    def pause(self) -> None:
        if self.exit_code(POLL_S) is not None:
            time.sleep(0.05)  # the launcher is gone: no busy loop while the watcher concludes

    def age(self, rank: int) -> float:
        if rank not in self.beats:
            self.beats[rank] = Staleness(heartbeat_path(self.run_dir, f"rank{rank}"))
        return self.beats[rank].age()

    def vanished(self, exits: Exits, ranks: Ranks, ended: bool) -> list[Failure]:
        """Ranks here whose pid is gone (at the last moment seen alive); ranks elsewhere whose
        heartbeat is `RANK_STALE_S` old, or `REMOTE_GONE_S` once the launcher has exited."""
        out, here = [], this_host()
        for rank, (pid, host) in sorted(ranks.items()):
            if rank in exits:
                continue
            now = time.time()
            if host != here:
                age = self.age(rank)
                if age > RANK_STALE_S or (ended and age > REMOTE_GONE_S):
                    out.append(Failure(rank, "vanished", now - age,
                                       f"rank {rank} (pid {pid} on {host}) ended without "
                                       f"reporting: no heartbeat for {age:.0f} s (killed by a "
                                       "signal, out of memory, or its host went down)"))
            elif pid_alive(pid):
                self.alive_at[rank] = now
            else:
                out.append(Failure(rank, "vanished", self.alive_at.get(rank, now),
                                   f"rank {rank} (pid {pid}) ended without reporting: killed "
                                   "by a signal (e.g. kill -9) or by the out-of-memory killer"))
        return out

    def undecided(self, exits: Exits, ranks: Ranks, since: float) -> bool:
        """A rank elsewhere whose heartbeat has not changed since `since` and is not yet
        `RANK_STALE_S` old (a live rank beats again within a second)."""
        here = this_host()
        return any(self.age(rank) <= RANK_STALE_S and self.beats[rank].changed_at <= since
                   for rank, (_, host) in ranks.items() if rank not in exits and host != here)

    def ending(self, rc: int) -> str:
        return f"the {self.cfg.engine} launcher exited with code {rc}"

    def end(self, status: str) -> list[int]:
        survivors = end_job_processes(self.run_id, self.pid)
        self.exit_code(2.0)  # reap it
        return survivors


class Ssh(Local):
    """A launcher here whose ranks run on other hosts too: it binds none of this host's cores."""

    def cores_bound(self) -> int:
        return 0


def job_processes(run_id: str, launcher_pid: int | None = None) -> list[psutil.Process]:
    """The live processes of the job here: the launcher's tree, and (horovodrun starts each rank
    in a session of its own) every process whose environment carries the job's run id."""
    found: dict[int, psutil.Process] = {}
    if launcher_pid is not None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(launcher_pid)
            found.update((p.pid, p) for p in [root, *root.children(recursive=True)])
    for proc in psutil.process_iter():
        if proc.pid in found or proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(ENV_RUN_ID) == run_id:
                found[proc.pid] = proc
    return [p for p in found.values() if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    return False


def end_job_processes(run_id: str, launcher_pid: int | None = None) -> list[int]:
    """End every process of the job on this host, with SIGTERM, then SIGKILL what is left
    2 s later; the pids of any that survived SIGKILL."""
    alive = job_processes(run_id, launcher_pid)
    for send in (psutil.Process.terminate, psutil.Process.kill):
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                send(proc)
        _, alive = psutil.wait_procs(alive, timeout=2.0)
    return [p.pid for p in alive if _alive(p)]
