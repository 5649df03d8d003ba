"""What environment the ranks receive: an allow-list, not a copy of the launcher's.

A notebook kernel's environment holds secrets: `JUPYTERHUB_API_TOKEN`, cloud credentials,
database passwords. `horovodrun` writes every variable it was given onto each remote rank's
ssh command line (`ssh host 'env A=1 B=2 ... python ...'`), and starts even local ranks under
`/bin/sh -c env K=V ... python`: every user of the host can read them with `ps`. So the
launcher starts with only what training needs, and the user adds more by name with the `env`
field (`--env KEY` or `--env KEY=VALUE`).

The values of those not on the allow-list (a token, a password) never travel on a command
line nor in the launcher's environment: they go into `secrets.json` in the run folder,
readable by its owner only (0600), named in `WORKBENCH_ENV_FILE`; each rank reads it as it
starts (`rank.protocol.load_env_file`) and the launcher deletes it when the job
ends. `config.json` records their names, not their values (a resumed run forwards them by
name from its launcher's environment).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

#: The file of the secret variables' values (see above).
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


def split_environment(requested: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the ranks' environment: the allow-listed part of os.environ and of the `env` items,
    {KEY: VALUE} of the secret `env` items, those whose KEY is not on the allow-list).

    Each `env` item is "KEY=VALUE" or "KEY", KEY a variable name (`JobConfig.validate()`
    refuses any other).
    """
    public = {k: v for k, v in os.environ.items() if allowed(k)}
    secret: dict[str, str] = {}
    for item in requested:
        key, sep, value = item.partition("=")
        if not sep:  # "KEY": forward its value here, if it is set
            if key not in os.environ:
                continue
            value = os.environ[key]
        (public if allowed(key) else secret)[key] = value
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
