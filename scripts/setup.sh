#!/usr/bin/env bash
# Create .venv/ and install the workbench with everything it needs.
#
# Steps: 1. a virtual environment in .venv/ (Python >= 3.10),
#        2. the workbench in editable mode with its pinned dependencies (pyproject.toml),
#        3. JupyterLab's settings overrides: no "get notified about Jupyter news?" pop-up,
#        4. Horovod, built from source once and cached (scripts/build_horovod.sh).
#
# Idempotent: a stamp in .venv/ records what was installed; when pyproject.toml and
# these scripts have not changed, a second run returns in well under a second.
# A failed Horovod build is reported with its fix and does not stop the set-up: the
# torch and serial engines work without it. `make horovod` tries the build again.
#
# Usage: scripts/setup.sh            (environment: PYTHON, the interpreter to create .venv from)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.workbench-installed"
BASE_PYTHON=${PYTHON:-python3}

step() { printf '==> %s\n' "$*"; }
# pip, without the "Location ... is ignored" warnings that some pip configurations print.
pipq() { "$PY" -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }

# What the installed environment must match: the pins and the install scripts.
want=$(cat pyproject.toml scripts/setup.sh scripts/build_horovod.sh | sha256sum | cut -d' ' -f1)
if [ -x "$PY" ] && [ -f "$STAMP" ] && [ "$(head -n 1 "$STAMP")" = "$want" ]; then
    echo "Environment up to date (.venv/)."
    if grep -q "^horovod=failed" "$STAMP" && ! "$PY" -c "import horovod" 2>/dev/null; then
        echo "Horovod is not installed: its build failed. 'make horovod' says why and" \
            "tries again." >&2
    fi
    exit 0
fi

start=$SECONDS
if [ ! -x "$PY" ]; then
    command -v "$BASE_PYTHON" >/dev/null \
        || { echo "setup: $BASE_PYTHON not found; install Python 3.10 or newer" >&2; exit 1; }
    "$BASE_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || { echo "setup: $("$BASE_PYTHON" -V) is too old; the workbench needs Python >= 3.10" \
                "(set PYTHON=python3.11)" >&2; exit 1; }
    step "Creating the virtual environment .venv/ ($("$BASE_PYTHON" -V))"
    "$BASE_PYTHON" -m venv "$VENV" \
        || { echo "setup: could not create .venv/; on Debian: apt-get install python3-venv" >&2
             rm -rf "$VENV"; exit 1; }
fi

step "Installing the workbench and its pinned dependencies (pyproject.toml)"
pipq install -q --upgrade pip setuptools wheel
# PYTHONWARNINGS quiets setuptools' notes about editable installs; errors still show.
PYTHONWARNINGS=ignore pipq install -q --progress-bar off -e ".[dev]"
"$PY" -c "import workbench, torch, jupyterlab" \
    || { echo "setup: the pinned dependencies did not install; see the pip messages above" >&2
         exit 1; }

step "Switching off JupyterLab's news pop-up (.venv/share/jupyter/lab/settings/overrides.json)"
"$PY" -m workbench.classroom.lab >/dev/null

step "Installing Horovod (built once from source, then cached in .cache/wheels/)"
horovod=ok
if ! bash scripts/build_horovod.sh "$PY"; then
    horovod=failed
    echo "WARNING: continuing without Horovod (run '.venv/bin/workbench doctor' for details)." >&2
fi
printf '%s\nhorovod=%s\n' "$want" "$horovod" >"$STAMP"
step "Set-up complete in $((SECONDS - start)) s. Check it with: .venv/bin/workbench doctor"
