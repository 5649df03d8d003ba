"""The engines: how each one turns "run this module on N ranks" into a command line.

All three share one interface, `Engine.command(...)`, so the job logic (records, reaping,
failure detection) is written once in `job.py`.

- `horovod`: Horovod's own launcher, `horovodrun --gloo`, which starts the ranks (locally
  or over ssh on `-H host:slots,...`) and gives them a gloo rendezvous.
- `torch`: PyTorch's launcher `torchrun` (`python -m torch.distributed.run`), for
  DistributedDataParallel. On one host, `--standalone`: torchrun opens its own rendezvous
  on a port the operating system picks, so two jobs never race for a port. On several
  hosts (`hosts="a:2,b:2"`), one torchrun per host, started over ssh by
  `workbench.jobs.torch_hosts` as horovodrun starts remote ranks, meeting in a c10d
  rendezvous on the first host.
- `naive`: torchrun too, for ranks that average each gradient with the workbench's own
  ring allreduce after the backward pass (training/naive_rank.py).
- `serial`: the module in one plain process: the sequential baseline.
- `fork`: the labs' engine. One Python process imports the code once and forks the ranks
  from itself (one host; see workers.py for why the labs do not use torchrun).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

#: The rank module each engine runs for a training job.
TRAINING_MODULES = {
    "horovod": "workbench.training.horovod_rank",
    "torch": "workbench.training.ddp_rank",
    "naive": "workbench.training.naive_rank",
    "serial": "workbench.training.serial_rank",
}


@dataclass
class Engine:
    """Base class: build the launch command for `np` ranks of `module`."""

    name: str = "serial"

    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        return [sys.executable, "-u", "-m", module, *args]

    def available(self) -> str | None:
        """None when this engine can run here, else what is missing and how to fix it."""
        return None


class HorovodEngine(Engine):
    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        # --disable-cache: horovodrun otherwise remembers for an hour which network
        # interface the hosts share, and fails with a KeyError once that interface is gone.
        return [horovodrun(), "-np", str(np), "--gloo", "-H", hosts or f"localhost:{np}",
                "--gloo-timeout-seconds", "60", "--disable-cache",
                sys.executable, "-u", "-m", module, *args]

    def available(self) -> str | None:
        try:
            import horovod.torch  # noqa: F401
        except ImportError as exc:
            return (f"Horovod is not installed ({exc}). Build it with `make horovod` (see"
                    " `workbench doctor` for what its build needs), or use --engine torch.")
        return None


class TorchEngine(Engine):
    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        if hosts is None:
            return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nnodes=1", f"--nproc-per-node={np}", "-m", module, *args]
        return [sys.executable, "-u", "-m", "workbench.jobs.torch_hosts", "--hosts", hosts,
                "--np", str(np), "--rdzv-id", run_id, "--", "-m", module, *args]


class ForkEngine(Engine):
    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        # The module is its own launcher: it forks `np` ranks (only workers.py does this).
        return [sys.executable, "-u", "-m", module, "--fork", str(np), *args]


def horovodrun() -> str:
    """The `horovodrun` next to this interpreter (the project's venv), else on PATH."""
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else (shutil.which("horovodrun") or "horovodrun")


ENGINES: dict[str, Engine] = {
    "horovod": HorovodEngine("horovod"),
    "torch": TorchEngine("torch"),
    "naive": TorchEngine("naive"),
    "serial": Engine("serial"),
    "fork": ForkEngine("fork"),
}
