"""One validated job configuration, shared by the Python API, the CLI and the widgets.

Every field of `JobConfig` is also a `workbench run` flag (underscores become dashes; the
flags are defined once, by `add_job_flags`), and every value is checked *before* anything is
launched: a job that would fail in its first second on a typo should fail here instead,
with one line that names the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.engines import ENGINES as ENGINE_TABLE
from workbench.engines import Engine, training_engines
from workbench.hosts.cpu import cpu_budget
from workbench.hosts.lists import HostListError, parse_hosts, sbatch_args

#: The training engines, from the one engine table (workbench/engines.py says what each does),
ENGINES = tuple(training_engines())
#: and those that run something else ("fork": the labs' workers), which the panels omit.
LAB_ENGINES = tuple(name for name in ENGINE_TABLE if name not in ENGINES)
MODELS = ("logreg", "mlp", "cnn")
DATASETS = ("digits", "synthetic", "synthetic-images", "mnist", "cifar10")
OPTIMIZERS = ("sgd", "adam")
DTYPES = ("float32", "float64")
CPU_BINDS = ("core", "none")
#: `precision`: "bf16" runs the forward pass and the loss under bfloat16 autocast (the
#: parameters, their gradients and the optimizer stay in `dtype`). `grad_compression`: "bf16"
#: sends the gradients in 16 bits, half the bytes (DDP's bf16 compression hook, and the
#: sharded engines), and the ranks add them in bf16, so they drift from the float32 run by
#: about bf16's precision, 2⁻⁸ of each value; "fp16" is Horovod's `Compression.fp16`, the
#: same idea in IEEE half precision (10 bits of mantissa, but a narrower range than bf16).
PRECISIONS = ("fp32", "bf16")
GRAD_COMPRESSIONS = ("none", "bf16", "fp16")
#: Who starts the ranks: this machine (`local`), horovodrun over ssh on `--hosts` (`ssh`),
#: or the cluster's scheduler (`slurm`, see workbench/launch/slurm.py).
LAUNCHERS = ("local", "ssh", "slurm")
#: Where the ranks compute: "cpu" (the lessons' default: every laptop has one), "cuda" (one
#: NVIDIA GPU per rank, checked before launch), or "auto" (cuda where every rank of a host
#: can have a GPU of its own, else cpu). See workbench/launch/devices.py.
DEVICES = ("cpu", "cuda", "auto")

#: Scaling presets. "compute-bound" does many FLOPs per parameter (a CNN with global average
#: pooling: 85 thousand parameters, about 0.2 s of work per step of 128 samples on one core),
#: so gradients are small next to the work: it scales well. With steps that long, Horovod's
#: background thread need not wake every 1 ms (its default cycle) to look for gradients to
#: send: every 5 ms costs at most 2.5% of a step and leaves more of the cores to compute.
#: "comm-bound" is a wide MLP on small inputs: millions of parameters and little work per
#: sample, so every step moves many bytes for little compute: it scales badly.
PRESETS: dict[str, dict[str, Any]] = {
    "compute-bound": {"model": "cnn", "width": 96, "dataset": "synthetic-images",
                      "samples": 4096, "batch_size": 128, "cycle_time_ms": 5.0},
    "comm-bound": {"model": "mlp", "width": 2048, "dataset": "synthetic",
                   "samples": 4096, "features": 256, "batch_size": 16},
}


#: The values each field may take: one of a few names, or a number in a range (both ends
#: included, but `lr`'s 0: a rate of 0 trains nothing). `validate()` checks them in order.
CHOICES: dict[str, tuple[str, ...]] = {
    "engine": ENGINES + LAB_ENGINES, "model": MODELS, "dataset": DATASETS,
    "optimizer": OPTIMIZERS, "dtype": DTYPES, "cpu_bind": CPU_BINDS, "precision": PRECISIONS,
    "grad_compression": GRAD_COMPRESSIONS, "device": DEVICES, "launcher": LAUNCHERS,
}
INT_RANGES: dict[str, tuple[int, int]] = {
    "np": (1, 256), "width": (1, 65536), "samples": (16, 10_000_000), "features": (1, 100_000),
    "epochs": (1, 10_000), "batch_size": (1, 1_000_000), "seed": (0, 2**31 - 1),
    "threads_per_rank": (0, 1024), "max_steps": (0, 10**9), "straggler_rank": (0, 255),
    "nodes": (0, 100_000), "ntasks_per_node": (0, 1024), "time_limit": (0, 525_600),
    "eval_every": (0, 10_000), "fail_rank": (0, 255), "fail_at_step": (0, 10**9),
    "checkpoint_every": (0, 10_000), "accumulate": (1, 10_000),
}
FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "bucket_mb": (0.0, 4096.0), "lr": (0.0, 100.0), "momentum": (0.0, 0.999999),
    "weight_decay": (0.0, 1.0), "warmup_epochs": (0.0, 1000.0), "warmup_start_lr": (0.0, 100.0),
    "straggler_delay": (0.0, 60.0), "stall_timeout": (1.0, 86_400.0),
    "cycle_time_ms": (0.0, 1000.0), "val_fraction": (0.0, 0.5),
}


class ConfigError(ValueError):
    """A configuration value is not allowed. The message is one line for the user."""


@dataclass(init=False)
class JobConfig:
    """Everything needed to launch one data-parallel training job.

    The fields come in four groups (`field_groups()`): launch, training, scheduler, lab.

    `val_fraction` of the samples (drawn with `seed`) are held out and never trained on:
    the final loss and accuracy are measured on them, and, every `eval_every` epochs
    (0 = only at the end), so are the `val_loss` and `val_accuracy` of the epoch lines.

    `warmup_epochs` > 0 is Goyal et al.'s (2017) gradual warm-up: the learning rate starts at
    η and rises linearly to `lr` = kη over that many epochs (they use 5), since the linear
    scaling rule's large rate diverges from a random start. η is `warmup_start_lr`, or, when
    that is 0, `lr` / the number of ranks: the rule's η when each rank keeps its batch.

    Faults: with `fail_at_step` > 0, rank `fail_rank` fails at that step (counted from the
    start of the job, across epochs), as a crashed machine would end it. Rank 0 saves a
    checkpoint every `checkpoint_every` epochs (0 = never), and `resume` (a run id) starts
    a new run from that run's last checkpoint (see workbench/records/resume.py).

    Sizes are in samples, times in seconds (but `cycle_time_ms`, Horovod's cycle, is in
    milliseconds like horovodrun's --cycle-time-ms; 0 keeps Horovod's default of 1 ms).
    `time_limit` is in minutes, as Slurm's `--time` (0 = the partition's default).
    `batch_size` is per rank: with `np` ranks one synchronous step consumes `np * batch_size`
    samples.

    A `preset` is applied when the configuration is built, to the fields the caller did not
    pass: `JobConfig(preset="compute-bound", batch_size=32)` keeps batch size 32 even though
    32 is also the default. (The names passed are recorded in `given`; a configuration
    rebuilt from a dict or by `dataclasses.replace` passes every field, so the preset is
    not applied twice.)

    `env` names the environment variables that ranks receive on top of the allow-list in
    launch/environment.py: "KEY" forwards the launcher's value, "KEY=VALUE" sets one.
    """

    # -- launch: how many ranks, where, started by whom, and what each process gets
    engine: str = "horovod"
    np: int = 2
    hosts: str | None = None
    launcher: str = "local"
    env: list[str] = field(default_factory=list)
    threads_per_rank: int = 0
    cpu_bind: str = "core"
    device: str = "cpu"
    runs_dir: str = "runs"
    name: str = ""
    stall_timeout: float = 120.0
    cycle_time_ms: float = 0.0
    timeline: bool = False
    # -- training: the model, the data and the optimization every rank runs
    model: str = "mlp"
    width: int = 64
    dataset: str = "digits"
    samples: int = 2048
    features: int = 32
    val_fraction: float = 0.1
    epochs: int = 3
    max_steps: int = 0
    batch_size: int = 32
    accumulate: int = 1       # micro-batches of batch_size per optimizer step
    lr: float = 0.1
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    warmup_epochs: float = 0.0
    warmup_start_lr: float = 0.0
    seed: int = 0
    dtype: str = "float32"
    precision: str = "fp32"
    grad_compression: str = "none"
    bucket_mb: float = 25.0   # bucketed/overlapped engines: MiB per bucket (DDP's default)
    eval_every: int = 0
    checkpoint_every: int = 0
    resume: str = ""
    preset: str | None = None
    # -- scheduler: what Slurm is asked for (with launcher="slurm" only)
    partition: str | None = None
    nodes: int = 0
    ntasks_per_node: int = 0
    time_limit: int = 0
    account: str | None = None
    sbatch_arg: str = ""
    # -- lab: what a lesson injects on purpose (a slow rank, a failure) and the labs' own
    straggler_delay: float = 0.0
    straggler_rank: int = 1
    fail_rank: int = 0
    fail_at_step: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ building
    def __init__(self, **given: Any) -> None:
        """Each field as `given` by name; else its preset's value (`preset`), else its
        default. `self.given` records the names given, so that a preset or a resumed run
        never overrides them (records/resume.py)."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        unknown = sorted(set(given) - set(fields))
        if unknown:
            raise TypeError(f"JobConfig has no field(s) {', '.join(unknown)}")
        preset = PRESETS.get(given.get("preset") or "", {})
        for name, f in fields.items():
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
                else f.default
            setattr(self, name, given.get(name, preset.get(name, default)))
        self.given = frozenset(given)

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> JobConfig:
        """A configuration from a scaling preset, with any field overridden."""
        if preset not in PRESETS:
            raise ConfigError(_bad("preset", preset, f"one of {', '.join(PRESETS)}"))
        return cls(**{**PRESETS[preset], "preset": preset, **overrides})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobConfig:
        """Rebuild a configuration saved with `to_dict` (unknown keys are an error)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return dataclasses.asdict(self)

    # ---------------------------------------------------------------- derived values
    @property
    def world_size(self) -> int:
        """Number of ranks that actually run (the serial engine always runs one)."""
        engine = ENGINE_TABLE.get(self.engine)
        return (engine.fixed_ranks if engine else None) or self.np

    def resolved_threads(self) -> int:
        """Intra-op threads per rank: the setting, or usable cores ÷ ranks (at least 1).

        Usable cores are this host's CPU budget (`workbench.hosts.cpu_budget`): the cores
        we may run on, capped by a cgroup quota or JupyterHub's CPU_LIMIT.
        """
        if self.threads_per_rank > 0:
            return self.threads_per_rank
        return max(1, cpu_budget().usable // self.world_size)

    @property
    def run_label(self) -> str:
        """What its run folders are called after the time stamp: `name` (else the engine)
        and the number of ranks, e.g. `horovod-np2` (records/store.py `new_run_dir`)."""
        return f"{self.name or self.engine}-np{self.world_size}"

    def oversubscribed(self) -> bool:
        """True when ranks × threads exceed this host's usable cores (speedups will flatten)."""
        return self.hosts is None and self.launcher == "local" and (
            self.world_size * self.resolved_threads() > cpu_budget().usable)

    # -------------------------------------------------------------------- checking
    def validate(self) -> JobConfig:
        """Raise `ConfigError` naming the first bad field; return self when all is well."""
        for name, allowed in CHOICES.items():
            _choice(name, getattr(self, name), allowed)
        if self.preset is not None:
            _choice("preset", self.preset, tuple(PRESETS))
        for name, (low, high) in INT_RANGES.items():
            _int_range(name, getattr(self, name), low, high)
        for name, (low, high) in FLOAT_RANGES.items():
            _float_range(name, getattr(self, name), low, high, low_open=name == "lr")
        if not isinstance(self.runs_dir, str) or not self.runs_dir.strip():
            raise ConfigError(_bad("runs_dir", self.runs_dir, "a folder path"))
        if self.name and not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", self.name):
            raise ConfigError(_bad("name", self.name, "up to 40 letters, digits, '.', '_', '-'"))
        if not isinstance(self.env, (list, tuple)):
            raise ConfigError(_bad("env", self.env, "a list of KEY or KEY=VALUE"))
        for item in self.env:
            if not isinstance(item, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(=.*)?",
                                                             item, flags=re.S):
                raise ConfigError(_bad("env", item, "KEY or KEY=VALUE, KEY a variable name"))
        self._validate_combinations()
        return self

    def _validate_combinations(self) -> None:
        """Checks that involve more than one field (the engine's rules: engines.py)."""
        engine = ENGINE_TABLE[self.engine]
        if engine.fixed_ranks and self.np != engine.fixed_ranks:
            if "np" not in self.given:  # the default np=2 was not asked for: serial is 1
                self.np = engine.fixed_ranks
            else:
                one = "one" if engine.fixed_ranks == 1 else engine.fixed_ranks
                raise ConfigError(_bad("np", self.np, f"{engine.fixed_ranks} with --engine "
                                       f"{self.engine} (it runs {one} process: "
                                       "leave --np out, or use --engine horovod or torch for "
                                       "more ranks)"))
        if self.hosts is not None:
            if not engine.multi_host:
                raise ConfigError(_bad("hosts", self.hosts, "only with --engine "
                                       f"{_engines(lambda e: e.multi_host)}"))
            try:
                slots = parse_hosts(self.hosts)
            except HostListError as exc:
                raise ConfigError(str(exc)) from None
            if sum(slots.values()) < self.np:
                raise ConfigError(_bad("np", self.np, f"at most the {sum(slots.values())} slots"
                                       f" that --hosts {self.hosts} offers"))
        self._validate_launcher()
        if self.straggler_delay > 0 and self.straggler_rank >= self.world_size:
            raise ConfigError(_bad("straggler_rank", self.straggler_rank,
                                   f"a rank below np={self.world_size}"))
        if self.fail_at_step > 0 and self.fail_rank >= self.world_size:
            raise ConfigError(_bad("fail_rank", self.fail_rank,
                                   f"a rank below np={self.world_size}"))
        if not isinstance(self.resume, str):
            raise ConfigError(_bad("resume", self.resume, "a run id (see `workbench runs`)"))
        if self.model == "cnn" and self.dataset in ("digits", "synthetic"):
            raise ConfigError(_bad("model", "cnn", f"an image dataset (synthetic-images, mnist,"
                                   f" cifar10), not {self.dataset}"))
        if self.grad_compression not in engine.grad_compressions:
            offer = _engines(lambda e: self.grad_compression in e.grad_compressions)
            raise ConfigError(_bad("grad_compression", self.grad_compression, f"only with "
                                   f"--engine {offer} (with {self.engine}: "
                                   f"{' or '.join(map(repr, engine.grad_compressions))})"))
        if self.precision == "bf16" and self.dtype != "float32":
            raise ConfigError(_bad("precision", "bf16", "--dtype float32 with it (autocast "
                                   "lowers float32 work to bfloat16)"))
        if not engine.checkpoints and (self.checkpoint_every or self.resume):
            raise ConfigError(_bad("engine", self.engine, "an engine that saves checkpoints ("
                                   f"{_engines(lambda e: e.checkpoints)}) with "
                                   "--checkpoint-every or --resume"))
        if self.timeline and not engine.timeline:
            raise ConfigError(_bad("timeline", True, "only with --engine "
                                   f"{_engines(lambda e: e.timeline)}"))

    def _validate_launcher(self) -> None:
        """`--hosts` selects ssh (alone, or with `--launcher ssh`); Slurm's fields need Slurm."""
        if self.launcher == "ssh" and self.hosts is None:
            raise ConfigError(_bad("launcher", "ssh", "--hosts HOST:SLOTS,... with it (the"
                                   " hosts horovodrun reaches over ssh)"))
        if self.launcher == "slurm":
            if self.hosts is not None:
                raise ConfigError(_bad("hosts", self.hosts, "no --hosts with --launcher slurm"
                                       " (Slurm chooses the hosts: use --nodes, --partition)"))
            if self.nodes > self.world_size:
                raise ConfigError(_bad("nodes", self.nodes, f"at most np={self.world_size}"
                                       " (each node runs at least one rank)"))
            if self.ntasks_per_node and self.ntasks_per_node * max(self.nodes, 1) < \
                    self.world_size:
                raise ConfigError(_bad("ntasks_per_node", self.ntasks_per_node,
                                       f"enough for np={self.world_size} on --nodes "
                                       f"{max(self.nodes, 1)}"))
            for name in ("partition", "account"):
                value = getattr(self, name)
                if value is not None and not re.fullmatch(r"[A-Za-z0-9_.,-]{1,64}", value):
                    raise ConfigError(_bad(name, value, "a Slurm name (letters, digits, _.,-)"))
            try:
                sbatch_args(self.sbatch_arg)  # raises on bad quoting or a non-option
            except HostListError as exc:
                raise ConfigError(str(exc)) from None
            return
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in field_groups()["scheduler"]:
            if getattr(self, name) != defaults[name]:
                raise ConfigError(_bad(name, getattr(self, name), "only with --launcher slurm"))


#: `JobConfig`'s fields come in four groups, in this order, each from its first field to
#: the next group's: how the ranks are launched, what they train, what a cluster's scheduler
#: is asked for, what a lesson's lab injects on purpose (`workbench run --help` has a
#: section for each).
GROUP_STARTS = {"engine": "launch", "model": "training", "partition": "scheduler",
                "straggler_delay": "lab"}


def field_groups() -> dict[str, list[str]]:
    """{group: its field names, in order}, read from `JobConfig`'s fields and GROUP_STARTS."""
    groups: dict[str, list[str]] = {}
    for f in dataclasses.fields(JobConfig):
        if f.name in GROUP_STARTS:
            current = groups.setdefault(GROUP_STARTS[f.name], [])
        current.append(f.name)
    return groups


def _engines(rule: Callable[[Engine], bool]) -> str:
    """The training engines that follow `rule`, in words: "torch, zero1 or fsdp"."""
    names = [name for name in ENGINES if rule(ENGINE_TABLE[name])]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def _bad(name: str, value: Any, allowed: str) -> str:
    flag = "--" + name.replace("_", "-")
    return f"invalid {flag} {value!r}: expected {allowed}"


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(_bad(name, value, "one of " + ", ".join(allowed)))


def _int_range(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(_bad(name, value, f"an integer from {low} to {high}"))


def _float_range(name: str, value: Any, low: float, high: float, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if ok:
        ok = (low < value if low_open else low <= value) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ConfigError(_bad(name, value, f"a number in {bracket}{low}, {high}]"))
