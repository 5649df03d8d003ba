"""The engines: how each one starts its ranks, what they run, and what they are told.

Each engine is one small class that answers the same questions, so the job logic (records,
reaping, failure detection) is written once, in job.py:

- `rank_module`: the module its ranks run for a training job;
- `command(...)`: the launcher's command line for `np` ranks of a module;
- `plain_command(np)`: the same ranks started by hand, without the workbench (each rank
  module's docstring opens with it, and the tests run it);
- `environment(run_dir, timeline, cycle_time_ms)`: the settings only this engine's ranks read;
- `slurm_lines(...)`: how the ranks start inside a Slurm allocation (slurm.py);
- `available()`: what is missing to run here, if anything.
- its rules, which `JobConfig.validate()` and the device check ask: `fixed_ranks`,
  `multi_host`, `grad_compressions`, `checkpoints`, `timeline`, `cpu_only`, `gpu_problem()`.

The engines:

- `horovod`: Horovod's own launcher, `horovodrun --gloo`, which starts the ranks (locally
  or over ssh on `-H host:slots,...`) and gives them a gloo rendezvous.
- `torch`: PyTorch's launcher `torchrun` (`python -m torch.distributed.run`), for
  DistributedDataParallel. On one host, `--standalone`: torchrun opens its own rendezvous
  on a port the operating system picks, so two jobs never race for a port. On several
  hosts (`hosts="a:2,b:2"`), one torchrun per host, started over ssh by
  `workbench.launch.torch_hosts` as horovodrun starts remote ranks, meeting in a c10d
  rendezvous on the first host.
- `naive`: torchrun too, for ranks that average each gradient with the workbench's own
  ring allreduce after the backward pass (training/naive_rank.py).
- `bucketed`, `overlapped`: torchrun too, for the naive engine made fast by hand: gradients
  packed into buckets of `bucket_mb`, then each bucket's all-reduce started during the
  backward pass (workbench/data_parallel/).
- `zero1`, `zero2`: torchrun too, for ranks that shard the optimizer's state (and, for
  zero2, the gradients) between them, ZeRO's stages 1 and 2 (workbench/sharded/).
- `fsdp`: torchrun too, for ranks that shard everything with PyTorch's FSDP2 (ZeRO-3).
- `serial`: the module in one plain process: the sequential baseline.
- `fork`: the labs' engine. One Python process imports the code once and forks the ranks
  from itself (one host; see rank.wrapper.fork_ranks for why the labs do not use torchrun).

Adding an engine is one subclass (often of `TorchEngine`, whose launcher it reuses, with its
own `name` and `rank_module`) and one entry in `ENGINES`.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import sys
from pathlib import Path


class Engine:
    """What every engine answers; subclasses set `name` and `rank_module`."""

    name: str = ""
    #: The module the ranks run for a training job; None: no training (the labs' engine).
    rank_module: str | None = None
    #: The number of ranks it always runs (the serial engine: 1); None: `np` of them.
    fixed_ranks: int | None = None
    #: Whether its ranks may run on several hosts (`--hosts`).
    multi_host = True
    #: The `grad_compression` values it offers: how its gradients may travel.
    grad_compressions: tuple[str, ...] = ("none",)
    #: Whether rank 0 can save a checkpoint and a run can `--resume` from it.
    checkpoints = True
    #: Whether it can record Horovod's timeline (`--timeline`).
    timeline = False
    #: Why it runs on CPUs only, with the fix, or None when it can use GPUs (launch/devices.py).
    cpu_only: tuple[str, str] | None = None

    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        """The launcher's command line that runs `module` on `np` ranks."""
        raise NotImplementedError

    def plain_command(self, np: int) -> list[str]:
        """The command that trains on `np` ranks without the workbench's launcher."""
        raise NotImplementedError(f"the {self.name} engine has no plain command")

    def environment(self, run_dir: Path, timeline: bool = False,
                    cycle_time_ms: float = 0.0) -> dict[str, str]:
        """Variables only this engine's ranks read, on top of the common ones (none), for a
        job with these settings (Horovod's: its timeline, its cycle time)."""
        return {}

    def slurm_lines(self, np: int, srun: str, rank: str, python: str) -> str:
        """The batch script's lines that start the ranks in a Slurm allocation: by default
        `srun`, one task per rank (`rank` is the command one rank runs)."""
        return f"{srun} {rank}"

    def available(self) -> str | None:
        """None when this engine can run here, else what is missing and how to fix it."""
        return None

    def gpu_problem(self) -> tuple[str, str] | None:
        """Why this engine cannot average GPU gradients here, with the fix; None if it can
        (asked once a GPU for every rank is known to be there: launch/devices.py)."""
        return self.cpu_only


class SerialEngine(Engine):
    """One plain process, no launcher: the sequential baseline (np is always 1)."""

    name = "serial"
    rank_module = "workbench.training.serial_rank"
    fixed_ranks = 1
    multi_host = False

    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        return [sys.executable, "-u", "-m", module, *args]

    def plain_command(self, np: int) -> list[str]:
        return ["python", "-m", str(self.rank_module)]


class HorovodEngine(Engine):
    """`horovodrun --gloo`: Horovod's launcher and its gloo rendezvous."""

    name = "horovod"
    rank_module = "workbench.training.horovod_rank"
    grad_compressions = ("none", "fp16")   # Horovod's Compression.fp16
    timeline = True

    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        return [horovodrun(), *self._launcher_flags(np, hosts or f"localhost:{np}"),
                sys.executable, "-u", "-m", module, *args]

    def plain_command(self, np: int) -> list[str]:
        return ["horovodrun", "-np", str(np), "--gloo", "-H", f"localhost:{np}",
                "python", "-m", str(self.rank_module)]

    def environment(self, run_dir: Path, timeline: bool = False,
                    cycle_time_ms: float = 0.0) -> dict[str, str]:
        env = {}
        if timeline:
            env["HOROVOD_TIMELINE"] = str(run_dir / "timeline.json")
            # Without the response cache every step is negotiated in full, so the timeline
            # shows each rank's wait for the others at every step, not only the first.
            env["HOROVOD_CACHE_CAPACITY"] = "0"
        if cycle_time_ms:
            # How often Horovod's background thread looks for gradients ready to allreduce
            # (default 1 ms).
            env["HOROVOD_CYCLE_TIME"] = repr(cycle_time_ms)
        return env

    def slurm_lines(self, np: int, srun: str, rank: str, python: str) -> str:
        # horovodrun starts the ranks over ssh on the allocation's hosts, as outside Slurm.
        hosts = (f"HOSTS=$({python} -c 'from workbench.launch.slurm_script import print_hosts; "
                 "print_hosts()')")
        flags = " ".join(self._launcher_flags(np, '"$HOSTS"'))
        return f"{hosts}\n{shlex.quote(horovodrun())} {flags} {rank}"

    @staticmethod
    def _launcher_flags(np: int, hosts: str) -> list[str]:
        # --disable-cache: horovodrun otherwise remembers for an hour which network
        # interface the hosts share, and fails with a KeyError once that interface is gone.
        return ["-np", str(np), "--gloo", "-H", hosts, "--gloo-timeout-seconds", "60",
                "--disable-cache"]

    def gpu_problem(self) -> tuple[str, str] | None:
        import horovod.torch as hvd

        if hvd.nccl_built():
            return None
        return ("this Horovod was built without NCCL, so it cannot average GPU gradients",
                "rebuild it with NCCL: `make horovod` (scripts/build_horovod.sh turns NCCL on "
                "whenever a CUDA build of PyTorch is installed), or use --engine torch")

    def available(self) -> str | None:
        # Look for Horovod's compiled PyTorch extension without importing it: importing
        # horovod.torch imports torch, seconds of start-up for a process that trains nothing.
        # A Horovod that is there but broken fails in the ranks, and the failure report
        # shows its import error (`workbench doctor` imports it for real).
        spec = importlib.util.find_spec("horovod")
        folder = Path(spec.origin).parent / "torch" if spec and spec.origin else None
        if folder is None or not any(folder.glob("mpi_lib_v2*")):
            return ("Horovod is not installed (no horovod.torch extension). Build it with "
                    "`make horovod` (see `workbench doctor` for what its build needs), or "
                    "use --engine torch.")
        return None


class TorchEngine(Engine):
    """`torchrun`: PyTorch's launcher, for DistributedDataParallel."""

    name = "torch"
    rank_module = "workbench.training.ddp_rank"
    grad_compressions = ("none", "bf16")   # DDP's bf16 compression hook

    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        if hosts is None:
            return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nnodes=1", f"--nproc-per-node={np}", "-m", module, *args]
        return [sys.executable, "-u", "-m", "workbench.launch.torch_hosts", "--hosts", hosts,
                "--np", str(np), "--rdzv-id", run_id, "--", "-m", module, *args]

    def plain_command(self, np: int) -> list[str]:
        return ["torchrun", "--standalone", "--nproc-per-node", str(np),
                "-m", str(self.rank_module)]

    def slurm_lines(self, np: int, srun: str, rank: str, python: str) -> str:
        return ("# torch.distributed meets at MASTER_ADDR:MASTER_PORT, on the first node.\n"
                "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" "
                "| head -n 1)\n"
                f"export MASTER_PORT=$({python} -c 'import socket; s = socket.socket(); "
                "s.bind((\"\", 0)); print(s.getsockname()[1])')\n"
                f"{srun} {rank}")


class NaiveEngine(TorchEngine):
    """`torchrun`, for ranks that average each gradient with our own ring allreduce."""

    name = "naive"
    rank_module = "workbench.training.naive_rank"
    grad_compressions = ("none",)
    cpu_only = ("the naive engine runs on CPUs: its ring relies on gloo's isend returning at "
                "once, and NCCL orders a pair's sends and receives on one GPU stream, where "
                "every rank sending first could deadlock", "use --device cpu, or --engine torch")


class BucketedEngine(TorchEngine):
    """`torchrun`, for ranks that all-reduce buckets of gradients after backward."""

    name = "bucketed"
    rank_module = "workbench.data_parallel.bucketed"
    grad_compressions = ("none",)
    cpu_only = ("the bucketed engine runs on CPUs: it joins a gloo group, and its buckets live "
                "in host memory", "use --device cpu, or --engine torch")


class OverlappedEngine(TorchEngine):
    """`torchrun`, for ranks that start each bucket's all-reduce during backward."""

    name = "overlapped"
    rank_module = "workbench.data_parallel.overlapped"
    grad_compressions = ("none",)
    cpu_only = ("the overlapped engine runs on CPUs: it joins a gloo group, and its buckets live "
                "in host memory", "use --device cpu, or --engine torch")


class ShardedEngine(TorchEngine):
    """`torchrun`, for ranks that shard the training state (workbench/sharded/)."""

    grad_compressions = ("none", "bf16")   # their reduce-scatters in bf16
    checkpoints = False                    # the sharded engines save no checkpoint

    def __init__(self, name: str, rank_module: str) -> None:
        self.name, self.rank_module = name, rank_module


class ForkEngine(Engine):
    """Ranks forked from one process that imported torch and the function once: the labs'
    workers, and `launch(fn, engine="fork")` (one host, CPU only)."""

    name = "fork"
    multi_host = False
    cpu_only = ("the fork engine runs on CPUs: its ranks are forked from one process, and a "
                "process that has started CUDA cannot fork", "use --device cpu, or --engine torch")

    def command(self, np: int, module: str, args: list[str], hosts: str | None,
                run_id: str) -> list[str]:
        # The rank wrapper is its own launcher: it forks `np` ranks (rank.wrapper.fork_ranks).
        return [sys.executable, "-u", "-m", module, "--fork", str(np), *args]


def horovodrun() -> str:
    """The `horovodrun` next to this interpreter (the project's venv), else on PATH."""
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else (shutil.which("horovodrun") or "horovodrun")


ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (HorovodEngine(), TorchEngine(), NaiveEngine(), BucketedEngine(),
                   OverlappedEngine(),
                   ShardedEngine("zero1", "workbench.sharded.zero1_rank"),
                   ShardedEngine("zero2", "workbench.sharded.zero2_rank"),
                   ShardedEngine("fsdp", "workbench.sharded.fsdp_rank"),
                   SerialEngine(), ForkEngine())
}


def training_engines() -> list[str]:
    """The engines that run the training loop (not the labs' workers)."""
    return [name for name, engine in ENGINES.items() if engine.rank_module]
