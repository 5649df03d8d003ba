"""The `workbench` command.

Each concept folder contributes its own sub-commands through a `commands.py` module with a
`register(subparsers)` function, so this file only lists them. A sub-command's handler takes
the parsed arguments and returns the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: Modules that add sub-commands, in the order `workbench --help` lists them.
COMMAND_MODULES = [
    "workbench.doctor",                       # workbench doctor
    "workbench.launch.commands",              # workbench run / runs / show
    "workbench.scaling.commands",             # workbench scale / bench / simulate / timeline
    "workbench.synchronization.commands",     # workbench async / hogwild / stragglers / ring
    "workbench.model_parallel.commands",      # workbench pipeline / compare
]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit with code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every registered sub-command."""
    parser = Parser(
        prog="workbench",
        description="Run and study distributed deep-learning jobs (Horovod, PyTorch DDP).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
