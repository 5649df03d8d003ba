"""What environment the ranks receive: an allow-list, not a copy of the launcher's.

A notebook kernel's environment holds secrets: `JUPYTERHUB_API_TOKEN`, cloud credentials,
database passwords. `horovodrun` writes every variable it was given onto each remote rank's
ssh command line (`ssh host 'env A=1 B=2 ... python ...'`), where every user of the
launcher's host can read it with `ps`. So the launcher starts with only what training
needs, and the user adds more by name with the `env` field (`--env KEY` or
`--env KEY=VALUE`).

The values of the variables named there that are not on the allow-list (a token, a
password) never travel on a command line nor in the launcher's environment: Horovod starts
even local ranks under `/bin/sh -c env K=V ... python`, where `ps` shows them to every user,
and writes them onto each remote rank's ssh command line. They go into a file that only
their owner can read, `secrets.json` (0600) in the run folder, which the launcher names
in `WORKBENCH_ENV_FILE`; each rank reads it as it starts
(`training.rank_protocol.load_env_file`) and the launcher deletes it when the job ends.
`config.json` records their names, not their values (a resumed run forwards them by name
from its launcher's environment).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

#: Names the file of the secret variables (see above), set by the launcher for the ranks.
SECRETS_FILE = "secrets.json"

#: Variables forwarded by exact name: finding programs and modules, the user and locale.
ALLOWED_NAMES = frozenset({
    "PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "HOSTNAME", "CPU_LIMIT", "KMP_AFFINITY", "KMP_BLOCKTIME",
    # ssh needs to find its agent and config to start remote ranks (horovodrun, torchrun -H).
    "SSH_AUTH_SOCK",
})

#: Variables forwarded by prefix: the workbench's own, threading libraries, accelerators,
#: the collective libraries and launchers' own settings (Slurm's: `sbatch` needs SLURM_CONF).
ALLOWED_PREFIXES = ("WORKBENCH_", "LC_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_", "NCCL_",
                    "GLOO_", "HOROVOD_", "TORCH", "PYTORCH_", "NVIDIA_", "SLURM_")


def allowed(name: str) -> bool:
    """True for a variable that training may need (see the lists above)."""
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def allowed_environment(requested: Iterable[str] = (),
                     source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `source` (default: os.environ) plus the `env` field's items.

    Each item of `requested` is "KEY" (forward `source`'s KEY, if it is set) or "KEY=VALUE".
    """
    source = os.environ if source is None else source
    env = {k: v for k, v in source.items() if allowed(k)}
    for item in requested:
        key, sep, value = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            continue  # JobConfig.validate() already refused it
        if sep:
            env[key] = value
        elif key in source:
            env[key] = source[key]
    return env


def split_environment(requested: Iterable[str], source: Mapping[str, str] | None = None
                      ) -> tuple[list[str], dict[str, str]]:
    """(`env` items that may travel in the environment, {KEY: VALUE} of the secret ones).

    An item is secret when its variable is not on the allow-list: "KEY=VALUE", or "KEY"
    forwarded from `source` (default: os.environ) when it is set there.
    """
    source = os.environ if source is None else source
    public, secret = [], {}
    for item in requested:
        key, sep, value = item.partition("=")
        if allowed(key):
            public.append(item)
        elif sep:
            secret[key] = value
        elif key in source:
            secret[key] = source[key]
    return public, secret


def recorded(requested: Iterable[str]) -> list[str]:
    """The `env` items as config.json records them: secret values left out (names kept)."""
    return [item if allowed(item.partition("=")[0]) else item.partition("=")[0]
            for item in requested]


def write_env_file(run_dir: Path, values: dict[str, str]) -> Path:
    """Write `values` into run_dir/secrets.json, readable by its owner only; its path."""
    path = Path(run_dir) / SECRETS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return path
