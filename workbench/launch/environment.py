"""What environment the ranks receive: an allow-list, not a copy of the launcher's; `env`
values off the list go through `secrets.json` (0600), never a command line that `ps` shows.
Why: docs/ARCHITECTURE.md, "Supervision".
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from workbench.config import JobConfig
from workbench.engines import ENGINES
from workbench.rank.protocol import ENV_FILE, ENV_OWNER, ENV_RUN_DIR, ENV_RUN_ID, ENV_T0, owner_id
from workbench.records.store import open_file

SECRETS_FILE = "secrets.json"

#: Variables forwarded by exact name: finding programs and modules, the user and locale, and
#: ssh's agent (horovodrun and torchrun -H start remote ranks over ssh).
ALLOWED_NAMES = frozenset({
    "PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "HOSTNAME", "CPU_LIMIT", "KMP_AFFINITY", "KMP_BLOCKTIME", "SSH_AUTH_SOCK",
})

#: Variables forwarded by prefix: the workbench's own, threading libraries, accelerators,
#: the collective libraries and launchers' own settings (Slurm's: `sbatch` needs SLURM_CONF).
ALLOWED_PREFIXES = ("WORKBENCH_", "LC_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_", "NCCL_",
                    "GLOO_", "HOROVOD_", "TORCH", "PYTORCH_", "NVIDIA_", "SLURM_")


def allowed(name: str) -> bool:
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def recorded(requested: Iterable[str]) -> list[str]:
    """The `env` items as config.json records them: secret values left out (names kept)."""
    return [item if allowed(item.partition("=")[0]) else item.partition("=")[0]
            for item in requested]


def ranks_environment(cfg: JobConfig, run_id: str, run_dir: Path) -> dict[str, str]:
    """The environment of a job's launcher and ranks: the allow-listed part of ours and of the
    `env` items ("KEY=VALUE" or "KEY"), the rank protocol's, the device's and the engine's
    variables; the values of the other `env` items (secret) through their 0600 file."""
    public = {k: v for k, v in os.environ.items() if allowed(k)}
    secret: dict[str, str] = {}
    for item in cfg.env:
        key, sep, value = item.partition("=")
        if not sep:  # "KEY": forward its value here, if it is set
            if key not in os.environ:
                continue
            value = os.environ[key]
        (public if allowed(key) else secret)[key] = value
    env = {
        **public, ENV_RUN_DIR: str(run_dir), ENV_RUN_ID: run_id, ENV_OWNER: owner_id(),
        ENV_T0: repr(time.time()), "OMP_NUM_THREADS": str(cfg.resolved_threads()),
        "PYTHONUNBUFFERED": "1",
        **({"CUDA_VISIBLE_DEVICES": ""} if cfg.device == "cpu" else {}),  # no GPU memory taken
        **ENGINES[cfg.engine].environment(run_dir, cfg.timeline, cfg.cycle_time_ms),
    }
    if secret:
        path = run_dir / SECRETS_FILE
        with open(open_file(path, os.O_WRONLY | os.O_EXCL, 0o600), "w") as f:
            json.dump(secret, f)
        env[ENV_FILE] = str(path)
    return env
