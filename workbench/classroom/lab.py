"""A quiet JupyterLab: no "get notified about official Jupyter news?" pop-up.

JupyterLab 4 asks every new user, in a pop-up over the notebook, whether it may fetch the
Jupyter news feed; thirty students meet it thirty times, and a hub without internet access
cannot fetch anything anyway. The answer can be given once for everyone in the
environment's settings overrides, `<prefix>/share/jupyter/lab/settings/overrides.json`,
which JupyterLab reads as the default of each setting (users can still change it):

    python -m workbench.classroom.lab                # this environment (sys.prefix)
    python -m workbench.classroom.lab /opt/tljh/user # The Littlest JupyterHub's users

`scripts/setup.sh` and `binder/postBuild` run it. Other settings in the file are kept.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: The settings written: never fetch the news (so never ask), never check for updates.
QUIET = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                          "checkForUpdates": False}}


def overrides_path(prefix: str | Path = sys.prefix) -> Path:
    """Where JupyterLab looks for an environment's settings overrides."""
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def quiet_jupyterlab(prefix: str | Path = sys.prefix) -> Path:
    """Merge `QUIET` into the environment's overrides.json; return its path."""
    path = overrides_path(prefix)
    current = json.loads(path.read_text()) if path.exists() else {}
    for plugin, values in QUIET.items():
        current[plugin] = {**current.get(plugin, {}), **values}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")
    return path


if __name__ == "__main__":
    print(f"JupyterLab settings overrides: {quiet_jupyterlab(*sys.argv[1:2])}")
