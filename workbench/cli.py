"""The `workbench` command.

Each concept folder contributes its own sub-commands through a `commands.py` module with a
`register(subparsers)` function, so this file only lists them. A sub-command's handler takes
the parsed arguments and returns the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

from workbench.flags import Parser

#: Modules that add sub-commands, in the order `workbench --help` lists them.
COMMAND_MODULES = [
    "workbench.doctor",                       # workbench doctor
    "workbench.launch.commands",              # workbench run / runs / show
    "workbench.scaling.commands",             # workbench scale / bench / simulate / timeline
    "workbench.synchronization.commands",     # workbench async / hogwild / stragglers / ring
    "workbench.model_parallel.commands",      # workbench pipeline / compare
    "workbench.classroom.commands",           # workbench classroom nbgrader / cores / quiet-lab
]


# ---------------------------------------------------------------- helpers for commands.py
Handler = Callable[[argparse.Namespace], int]


def guard(handler: Handler) -> Handler:
    """Wrap a sub-command: bad input -> one line and exit code 2; a failed run -> one line
    and exit code 1; Ctrl-C -> exit code 130. Never a traceback for the user's mistakes."""
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (ValueError, FileNotFoundError) as exc:  # ConfigError is a ValueError
            print(f"workbench: error: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:
            print(f"workbench: {args.command} failed: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nstopped", file=sys.stderr)
            return 130
    return run


def emit_json(doc: Any) -> None:
    """Print one JSON document on stdout (what every `--json` flag does)."""
    print(json.dumps(doc, indent=2, default=str))


def non_negative_float(text: str) -> float:
    """argparse type: a number ≥ 0 (seconds, for example)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0 (a learning rate, for example)."""
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number ≥ 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}")
    return int(text)


# ---------------------------------------------------------------- the parser
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
    with warnings.catch_warnings():
        warnings.showwarning = show_warning
        return int(args.func(args) or 0)


def show_warning(message: Warning | str, *_: object, **__: object) -> None:
    """Show a warning the way the CLI shows errors, on one line of stderr: a job's warning
    names the caller's line (launch/job.py), which in a console script means nothing."""
    print(f"warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
