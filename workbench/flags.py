"""The job's command-line flags: one per `JobConfig` field, and a parser whose errors are
one line.

`workbench run` and `workbench scale` take them (launch/commands.py, scaling/commands.py), and
so does every training rank module run by hand under plain torchrun, horovodrun or python
(rank/context.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from workbench.config import CHOICES, ENGINES, PRESETS, JobConfig, field_groups


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit with code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


_SKIP = {"extra"}  # not a flag: filled by code (the labs' settings)
#: The names each flag accepts, from config.py's tables: the training engines only (the
#: labs' engine runs a function: `workbench.launch`), and the presets.
_ACCEPTS = {**CHOICES, "engine": ENGINES, "preset": tuple(PRESETS)}


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """Add one flag per JobConfig field, in a section per group of fields: `workbench run`'s
    flags, also taken by `scale` and by the rank modules run under plain torchrun or
    horovodrun (rank/context.py)."""
    sections = {group: parser.add_argument_group(f"{group} settings")
                for group in field_groups()}
    group_of = {name: group for group, names in field_groups().items() for name in names}
    for f in dataclasses.fields(JobConfig):
        if f.name in _SKIP:
            continue
        section = sections[group_of[f.name]]
        flag = "--" + f.name.replace("_", "-")
        if str(f.type).startswith("list"):  # `env`: repeat the flag, one item each time
            section.add_argument(flag, dest=f.name, action="append", default=None,
                                 metavar="KEY[=VALUE]", help="(repeatable)")
            continue
        if f.type in ("bool", bool):
            section.add_argument(flag, dest=f.name, action="store_true", default=None,
                                 help=f"(default {f.default})")
            continue
        kind = {"int": int, "float": float}.get(str(f.type), str)
        accepts = f"one of {', '.join(_ACCEPTS[f.name])} " if f.name in _ACCEPTS else ""
        section.add_argument(flag, dest=f.name, type=_typed(f.name, kind), default=None,
                             metavar=f.name.upper(), help=f"{accepts}(default {f.default!r})")


def add_output_flags(parser: argparse.ArgumentParser, *, seed: bool = False,
                     runs_dir: bool = True, json_help: str = "print one JSON document") -> None:
    """The flags the subcommands share: `--runs-dir` (where run records are written and
    read), `--json` (one JSON document instead of text) and, for the labs, `--seed`."""
    if seed:
        parser.add_argument("--seed", type=int, default=0,
                            help="the random seed: the data and the initial parameters")
    if runs_dir:
        parser.add_argument("--runs-dir", default="runs",
                            help="the runs folder: where run records are written and read")
    parser.add_argument("--json", action="store_true", help=json_help)


def config_from_args(args: argparse.Namespace, **overrides: Any) -> JobConfig:
    """The JobConfig that the given flags describe (unset flags keep their defaults)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(JobConfig)
             if f.name not in _SKIP and getattr(args, f.name, None) is not None}
    given.update(overrides)
    return JobConfig(**given)


def _typed(name: str, kind: type):
    """An argparse type that names the flag and the expected kind in its one-line error."""
    def convert(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    return convert
