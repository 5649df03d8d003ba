"""One job's configuration (workbench/config.py): its groups of fields and their flags."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from workbench.config import (
    ENGINES,
    GRAD_COMPRESSIONS,
    GROUP_STARTS,
    ConfigError,
    JobConfig,
    field_groups,
)
from workbench.engines import ENGINES as ENGINE_TABLE
from workbench.flags import Parser, add_job_flags
from workbench.hosts.lists import HostListError, parse_hosts, sbatch_args


def test_every_field_is_in_one_group_and_its_flag_in_that_groups_section() -> None:
    groups = field_groups()
    assert list(groups) == ["launch", "training", "scheduler", "lab"]
    names = [n for members in groups.values() for n in members]
    assert names == [f.name for f in dataclasses.fields(JobConfig)]   # each once, in order
    assert all(groups[g][0] == first for first, g in GROUP_STARTS.items())
    parser = Parser(prog="workbench run")
    add_job_flags(parser)
    sections = {s.title: [a.dest for a in s._group_actions] for s in parser._action_groups}
    for group, members in groups.items():
        assert sections[f"{group} settings"] == [n for n in members if n != "extra"]
    assert "scheduler settings:\n  --partition" in parser.format_help()


@pytest.mark.parametrize("name", field_groups()["scheduler"])
def test_each_scheduler_field_needs_slurm(name: str) -> None:
    value = {"partition": "debug", "nodes": 1, "ntasks_per_node": 2, "time_limit": 5,
             "account": "physics", "sbatch_arg": "--qos=debug"}[name]
    flag = "--" + name.replace("_", "-")
    with pytest.raises(ConfigError, match=f"invalid {flag} .*only with --launcher slurm"):
        JobConfig(**{name: value}).validate()
    JobConfig(launcher="slurm", **{name: value}).validate()


def test_a_preset_fills_only_the_fields_the_caller_left_out() -> None:
    cfg = JobConfig(preset="compute-bound", batch_size=32, lr=0.1)   # both also defaults
    assert (cfg.model, cfg.batch_size, cfg.lr) == ("cnn", 32, 0.1)
    assert JobConfig(preset="compute-bound").batch_size == 128
    again = JobConfig.from_dict(cfg.to_dict())          # every field passed: nothing re-applied
    assert again == cfg and dataclasses.replace(cfg, seed=1).batch_size == 32


def test_each_engine_states_its_rules_and_the_configuration_follows_them() -> None:
    """The rules live in the engine classes (engines.py); validate() asks them."""
    training = {name: ENGINE_TABLE[name] for name in ENGINES}
    assert {n for n, e in training.items() if "bf16" in e.grad_compressions} == \
        {"torch", "zero1", "zero2", "fsdp"}
    assert {n for n, e in training.items() if "fp16" in e.grad_compressions} == {"horovod"}
    assert {n for n, e in training.items() if not e.checkpoints} == {"zero1", "zero2", "fsdp"}
    assert [n for n, e in training.items() if e.timeline] == ["horovod"]
    assert {n: e.fixed_ranks for n, e in training.items() if e.fixed_ranks} == {"serial": 1}
    for name, engine in training.items():
        for value in GRAD_COMPRESSIONS:
            cfg = JobConfig(engine=name, grad_compression=value)
            if value in engine.grad_compressions:
                assert cfg.validate().world_size == (engine.fixed_ranks or 2)
            else:
                with pytest.raises(ConfigError, match=rf"only with --engine .*\(with {name}:"):
                    cfg.validate()
    with pytest.raises(ConfigError, match=r"engine that saves checkpoints \(horovod, torch"):
        JobConfig(engine="fsdp", checkpoint_every=1).validate()
    with pytest.raises(ConfigError, match="--hosts 'a:1'.*only with --engine horovod, torch"):
        JobConfig(engine="serial", hosts="a:1").validate()


def test_host_lists_and_sbatch_options_are_read_or_refused_in_one_line() -> None:
    assert parse_hosts("a:2, b") == {"a": 2, "b": 1}
    for bad in ("a:0", "a:x", "a,,b", ""):
        with pytest.raises(ConfigError, match=r"^invalid --hosts .*e\.g\. a:1,b:1$"):
            JobConfig(hosts=bad).validate()
    assert sbatch_args("--qos=debug --mem='4 G'") == ["--qos=debug", "--mem=4 G"]
    with pytest.raises(HostListError, match="no --requeue"):
        sbatch_args("--qos=debug --requeue=1")


def test_run_help_lists_what_each_named_flag_accepts() -> None:
    """`workbench run --help` names the engines, launchers, devices and models that a run
    accepts: those JobConfig.validate() takes (the training engines only: the labs' `fork`
    runs a function), read from the same tables."""
    from workbench.config import CHOICES
    from workbench.engines import training_engines

    out = subprocess.run([sys.executable, "-m", "workbench.cli", "run", "--help"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    text = " ".join(out.split())                  # argparse wraps the help text

    def listed(flag: str) -> list[str]:
        found = re.search(rf"--{flag} \S+ one of (.*?) \(default", text)
        assert found, f"--{flag} names no values"
        return found.group(1).split(", ")

    assert listed("engine") == training_engines() and "fork" not in listed("engine")
    for flag, field in {"launcher": "launcher", "device": "device", "model": "model",
                        "dataset": "dataset", "optimizer": "optimizer"}.items():
        assert listed(flag) == list(CHOICES[field]), flag     # what validate() takes
    assert "--engine ENGINE one of horovod," in text and "(default 'horovod')" in text
