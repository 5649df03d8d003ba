"""What environment the ranks receive: an allow-list, not a copy of the launcher's.

A notebook kernel's environment holds secrets: `JUPYTERHUB_API_TOKEN`, cloud credentials,
database passwords. `horovodrun` writes every variable it was given onto each remote rank's
ssh command line (`ssh host 'env A=1 B=2 ... python ...'`), where every user of the
launcher's host can read it with `ps`. So the launcher starts with only what training
needs, and the user adds more by name with the `env` field (`--env KEY` or
`--env KEY=VALUE`). A variable named there for a multi-host job still travels on ssh
command lines: name no secrets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

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
