#!/usr/bin/env bash
# Create .venv/ and install the workbench with everything it needs.
#
# Steps: 1. a virtual environment in .venv/ (Python >= 3.10),
#        2. PyTorch, then Horovod's build started in the background (scripts/build_horovod.sh:
#           built from source once and cached), and, with --with-system-deps as root, the
#           Debian packages the tests need, also in the background,
#        3. meanwhile the workbench in editable mode with its pinned dependencies,
#        4. JupyterLab's settings overrides: no "get notified about Jupyter news?" pop-up,
#        5. Horovod installed from the wheel once its build ends.
#
# Idempotent: a stamp in .venv/ records what was installed; when pyproject.toml,
# constraints.txt and these scripts have not changed, a second run returns in well under a second.
# A failed Horovod build is reported with its fix and does not stop the set-up: the
# torch and serial engines work without it. `make horovod` tries the build again.
#
# Usage: scripts/setup.sh [--with-system-deps]
#   --with-system-deps  as root, also install the Debian packages the tests need
#                       (scripts/install_system_deps.sh), while Horovod compiles
#   environment: PYTHON, the interpreter to create .venv from
set -euo pipefail
WITH_SYSTEM_DEPS=0
case "${1:-}" in
    --with-system-deps) WITH_SYSTEM_DEPS=1 ;;
    "") ;;
    *) echo "setup: unknown option $1 (the only one is --with-system-deps)" >&2; exit 2 ;;
esac
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
want=$(cat pyproject.toml constraints.txt scripts/setup.sh scripts/build_horovod.sh \
    | sha256sum | cut -d' ' -f1)
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

step "Installing PyTorch first: Horovod compiles against it (constraints.txt's pin)"
pipq install -q --upgrade pip setuptools wheel
torch_pin=$(grep -o '^torch==[^ ]*' constraints.txt)
# What Horovod's setup.py imports (packaging), and cmake when the system has none. NumPy too:
# the build imports torch, which imports NumPy when it is there, and the pip run below must
# not be unpacking NumPy into .venv/ at that moment ("Importing the numpy C-extensions
# failed", and CMake stops); installed now, that run finds it and leaves it alone.
numpy_req=$(grep -o '"numpy[^"]*"' pyproject.toml | tr -d '"')
build_needs=("packaging>=23" "$numpy_req")
# (CMake 4 cannot configure Horovod 0.28.1: see scripts/build_horovod.sh.)
cmake_major=$(cmake --version 2>/dev/null | sed -n '1s/^cmake version \([0-9]*\).*/\1/p')
[ "${cmake_major:-4}" -lt 4 ] || build_needs+=("cmake>=3.13,<4")
pipq install -q --progress-bar off -c constraints.txt "$torch_pin" "${build_needs[@]}"

# The Horovod build keeps the cores busy for minutes; pip and apt mostly wait on the network
# and the disk. So the wheel compiles in the background while they install, and is
# installed once pip is done (two pip runs at once in one environment could clash).
mkdir -p "$ROOT/.cache"
jobs_log="$ROOT/.cache/setup-background"
pids=()
# Each runs in a session of its own (setsid, where there is one), so that a failed or
# interrupted set-up ends it whole: pip, cmake and the compilers under it included.
detach=()
command -v setsid >/dev/null 2>&1 && detach=(setsid)
trap 'for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
      done' EXIT
step "Building Horovod in the background (log: .cache/horovod-build.log) while the rest installs"
PATH="$VENV/bin:$PATH" "${detach[@]}" bash scripts/build_horovod.sh "$PY" --wheel-only \
    >"$jobs_log-horovod.log" 2>&1 &
build_pid=$!
pids+=("$build_pid")
sysdeps_pid=
if [ "$WITH_SYSTEM_DEPS" = 1 ] && [ "$(id -u)" = 0 ] \
    && ! bash scripts/install_system_deps.sh --check >/dev/null 2>&1; then
    step "Installing the system packages in the background (scripts/install_system_deps.sh)"
    "${detach[@]}" bash scripts/install_system_deps.sh >"$jobs_log-sysdeps.log" 2>&1 &
    sysdeps_pid=$!
    pids+=("$sysdeps_pid")
fi

step "Installing the workbench and its pinned dependencies (pyproject.toml)"
# PYTHONWARNINGS quiets setuptools' notes about editable installs; errors still show.
PYTHONWARNINGS=ignore pipq install -q --progress-bar off -c constraints.txt -e ".[dev]"
"$PY" -c "import workbench, torch, jupyterlab" \
    || { echo "setup: the pinned dependencies did not install; see the pip messages above" >&2
         exit 1; }

step "Switching off JupyterLab's news pop-up (.venv/share/jupyter/lab/settings/overrides.json)"
"$PY" -m workbench.classroom.lab >/dev/null

# Wait for background job $1 (doing $2), saying so every 30 s, then show its output ($3).
await() {
    local pid=$1 what=$2 log=$3 since=$SECONDS rc=0 waited=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ $((waited % 30)) = 0 ]; then
            printf '    (%s: %d s so far)\n' "$what" $((SECONDS - since))
        fi
        sleep 1
        waited=$((waited + 1))
    done
    wait "$pid" || rc=$?
    cat "$log"
    return "$rc"
}

step "Installing Horovod (built once from source, then cached in .cache/wheels/)"
horovod=ok
if ! await "$build_pid" "still building Horovod" "$jobs_log-horovod.log" \
    || ! bash scripts/build_horovod.sh "$PY"; then
    horovod=failed
    echo "WARNING: continuing without Horovod (run '.venv/bin/workbench doctor' for details)." >&2
fi
if [ -n "$sysdeps_pid" ]; then
    step "Waiting for the system packages"
    await "$sysdeps_pid" "still installing system packages" "$jobs_log-sysdeps.log" \
        || echo "WARNING: the system packages did not install (see above);" \
            "tests that need them will be skipped." >&2
fi
pids=()
printf '%s\nhorovod=%s\n' "$want" "$horovod" >"$STAMP"
step "Set-up complete in $((SECONDS - start)) s. Check it with: .venv/bin/workbench doctor"
