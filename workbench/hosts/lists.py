"""Where a job asks to run: a list of hosts as Horovod's `-H` writes it ("a:2,b:1" is two
slots on host a and one on b), and the options passed on to Slurm's `sbatch`.
"""

from __future__ import annotations

import re


class HostListError(ValueError):
    """Hosts or sbatch options that cannot be read; one line (a ConfigError to the user)."""


def parse_hosts(hosts: str) -> dict[str, int]:
    """Parse Horovod's `-H` syntax, "a:2,b:1", into {host: slots}."""
    out: dict[str, int] = {}
    for part in hosts.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?::(\d+))?\s*", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < 1):
            raise HostListError(f"invalid --hosts {hosts!r}: expected "
                                "HOST:SLOTS[,HOST:SLOTS...], e.g. a:1,b:1")
        out[m.group(1)] = int(m.group(2) or 1)
    return out


def sbatch_args(text: str) -> list[str]:
    """Split `--sbatch-arg` ("--qos=debug --mem=4G") into sbatch options, as a shell would."""
    import shlex

    if "\n" in text or "\r" in text:  # it would end its #SBATCH line: the rest runs as shell
        raise HostListError(_bad(text.splitlines()[0] + "...", "options on one line (it holds "
                                 "a line break)"))
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise HostListError(_bad(text, f"sbatch options ({exc})")) from None
    for arg in args:
        if not arg.startswith("-"):
            raise HostListError(_bad(text, "sbatch options, each starting with -, e.g. "
                                     "'--qos=debug --mem=4G'"))
        if arg.split("=")[0] == "--requeue":
            raise HostListError(_bad(text, "no --requeue (a requeued job would run again into "
                                     "the same run folder; resume it instead)"))
    return args


def _bad(text: str, allowed: str) -> str:
    return f"invalid --sbatch-arg {text!r}: expected {allowed}"
