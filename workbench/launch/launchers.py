"""How a job's ranks are started, seen and ended: one class for each way.

torchrun's agent keeps its workers apart from how they were started; so does the job here.
A `Job` (job.py) asks `launcher_for(cfg)` which way its ranks start, and from then on asks
the object `start()` returned the questions of `Launched` (launched.py), whatever it is:

| class | who starts the ranks | how a rank that died without a word is found |
| --- | --- | --- |
| `Local` | the engine's launcher (horovodrun, torchrun, python), here | its pid is gone |
| `Ssh` | the same launcher, with ranks on other hosts over ssh | also: its heartbeat stopped |
| `slurm.SlurmBatch` | Slurm, on its nodes, after `sbatch` | its task recorded its end |
| `pool_call._CallProgress` | nobody: a pool's warm ranks are running already | its socket closed |
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.config import ConfigError, JobConfig
from workbench.engines import ENGINES
from workbench.hosts.lists import parse_hosts
from workbench.launch import cores
from workbench.launch.launched import GUARD, POLL_S, REMOTE_GONE_S, Exits, Launched, Ranks
from workbench.launch.processes import pid_alive
from workbench.records.blame import Failure
from workbench.records.liveness import RANK_STALE_S, Staleness, heartbeat_path, this_host

if TYPE_CHECKING:
    from workbench.launch.slurm import SlurmBatch


class ByPid(Launched):
    """Ranks on this host: one whose pid is gone without an exit record has vanished."""

    def __init__(self) -> None:
        self.alive_at: dict[int, float] = {}  # rank: when the watcher last saw it alive

    def here(self, rank: int, ranks: Ranks) -> bool:
        return ranks.get(rank, (0, this_host()))[1] == this_host()

    def vanished(self, exits: Exits, ranks: Ranks, ended: bool) -> list[Failure]:
        """Ranks on this host whose pid is gone (or a zombie), each at the last moment the
        watcher saw it alive (see blame.py)."""
        out, here = [], this_host()
        for rank, (pid, host) in sorted(ranks.items()):
            if rank in exits or host != here:
                continue
            now = time.time()
            if pid_alive(pid):
                self.alive_at[rank] = now
            else:
                out.append(Failure(rank, "vanished", self.alive_at.get(rank, now),
                                   f"rank {rank} (pid {pid}) ended without reporting: killed "
                                   "by a signal (e.g. kill -9) or by the out-of-memory killer"))
        return out


class Local(ByPid):
    """The engine's launcher started on this host under the guard (guard.py), which ends it
    if the process that started it dies first (a restarted kernel)."""

    shares_this_host = True

    def __init__(self, proc: subprocess.Popen[bytes], engine: str, run_dir: Path) -> None:
        super().__init__()
        self.proc, self.pid, self.engine, self.run_dir = proc, proc.pid, engine, run_dir

    @classmethod
    def ticket(cls, run_id: str, cfg: JobConfig, sharing: cores.Settings) -> cores.Ticket:
        """This job's place in the host's queue for cores (cores.py)."""
        return cores.Ticket(run_id, cls.cores_bound(cfg), sharing)

    @staticmethod
    def cores_bound(cfg: JobConfig) -> int:
        """Ranks × threads, or 0 with `cpu_bind="none"`."""
        return cfg.world_size * cfg.resolved_threads() if cfg.cpu_bind == "core" else 0

    @classmethod
    def start(cls, cfg: JobConfig, run_id: str, run_dir: Path, module: str, args: list[str],
              env: dict[str, str], cores_held: list[int]) -> Local:
        """Start the engine's launcher (bound to `cores_held`, if any), logging to
        logs/launcher.log."""
        launcher = ENGINES[cfg.engine].command(cfg.world_size, module, args, cfg.hosts, run_id)
        if shutil.which(launcher[0]) is None:
            raise ConfigError(f"cannot start the {cfg.engine} launcher {launcher[0]!r}: it is "
                              "not an executable file; run `workbench doctor`")
        cmd = [sys.executable, str(GUARD), str(os.getpid()), "--", *launcher]
        if cores_held:  # the launcher and every rank it starts inherit these cores
            cmd = ["taskset", "--cpu-list", ",".join(map(str, cores_held)), *cmd]
        with open(run_dir / "logs" / "launcher.log", "ab") as log:
            log.write((" ".join(cmd) + "\n").encode())
            log.flush()
            try:
                # A new session, so a Ctrl-C in a terminal reaches us, not the ranks
                # directly: we stop them ourselves, in order, and record it.
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env,
                                        start_new_session=True)
            except OSError as exc:
                raise ConfigError(f"cannot start the {cfg.engine} launcher {cmd[0]!r}: "
                                  f"{exc.strerror or exc}") from None
        return cls(proc, cfg.engine, run_dir)

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def pause(self) -> None:
        """POLL_S, but wake at once when the launcher ends."""
        try:
            self.proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            return
        time.sleep(0.05)  # the launcher is gone: no busy loop while the watcher concludes

    def ending(self, rc: int) -> str:
        return f"the {self.engine} launcher exited with code {rc}"


class Ssh(Local):
    """A launcher here whose ranks run on other hosts too. Their pids mean nothing here, so
    they are seen through the heartbeat files they write into the shared runs folder
    (records/liveness.py), and through the launcher's exit, which notices their ssh session
    end."""

    #: A remote rank that stopped beating is a suspect until `vanished()` calls it gone.
    decide_within_s = RANK_STALE_S + REMOTE_GONE_S

    def __init__(self, proc: subprocess.Popen[bytes], engine: str, run_dir: Path) -> None:
        super().__init__(proc, engine, run_dir)
        self.beats: dict[int, Staleness] = {}

    @staticmethod
    def cores_bound(cfg: JobConfig) -> int:
        """0: ranks on other hosts bind no core of this one's queue."""
        return 0

    def age(self, rank: int) -> float:
        """Seconds since rank `rank`'s heartbeat last changed."""
        if rank not in self.beats:
            self.beats[rank] = Staleness(heartbeat_path(self.run_dir, f"rank{rank}"))
        return self.beats[rank].age()

    def vanished(self, exits: Exits, ranks: Ranks, ended: bool) -> list[Failure]:
        """Also: remote ranks whose heartbeat has not changed for `RANK_STALE_S`, or for
        `REMOTE_GONE_S` once the launcher has exited."""
        out, here = super().vanished(exits, ranks, ended), this_host()
        for rank, (pid, host) in sorted(ranks.items()):
            if rank in exits or host == here:
                continue
            age = self.age(rank)
            if age > RANK_STALE_S or (ended and age > REMOTE_GONE_S):
                out.append(Failure(rank, "vanished", time.time() - age,
                                   f"rank {rank} (pid {pid} on {host}) ended without "
                                   f"reporting: no heartbeat for {age:.0f} s (killed by a "
                                   "signal, out of memory, or its host went down)"))
        return sorted(out, key=lambda f: f.rank)

    def undecided(self, exits: Exits, ranks: Ranks, since: float) -> bool:
        """A remote rank whose heartbeat has not changed since `since`, and that `vanished()`
        has not yet called gone: a live rank beats again within a second, a dead one is
        called gone once its heartbeat is `RANK_STALE_S` old (sooner once the launcher has
        exited, which a loaded host may take seconds to notice)."""
        here = this_host()
        for rank, (_, host) in ranks.items():
            if rank in exits or host == here:
                continue
            age = self.age(rank)
            if self.beats[rank].changed_at <= since and age <= RANK_STALE_S:
                return True
        return False


def launcher_for(cfg: JobConfig) -> type[Local] | type[SlurmBatch]:
    """The class that starts `cfg`'s ranks: Slurm's, ssh's (`--hosts` naming another host
    than this one) or this host's (`localhost:4` is this host)."""
    from workbench.launch.torch_hosts import is_local  # (not at import: it is a launcher too)

    if cfg.launcher == "slurm":
        from workbench.launch.slurm import SlurmBatch

        return SlurmBatch
    if cfg.hosts is not None and not all(is_local(h) for h in parse_hosts(cfg.hosts)):
        return Ssh
    return Local


def cores_needed(cfg: JobConfig) -> int:
    """Cores this job binds on this host: ranks × threads, or 0 when it binds none here
    (`cpu_bind="none"`, ranks on other hosts, Slurm's): then it only counts for its user's
    limit."""
    return launcher_for(cfg).cores_bound(cfg)
