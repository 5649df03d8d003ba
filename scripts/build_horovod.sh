#!/usr/bin/env bash
# Build Horovod 0.28.1 from its PyPI source distribution, with the C++17 fix, and install it.
#
# Why: Horovod 0.28.1 (its last release) asks CMake for C++14, but PyTorch >= 2.1
# headers need C++17; compiling them as C++14 stops at
#     #error C++17 or later compatible compiler is required to use ATen.
# The upstream fix was merged after the release and never published, so we download
# the sdist, raise CMAKE_CXX_STANDARD to 17 in the two CMake files that set it, and
# build a wheel against the torch already installed in the environment
# (--no-build-isolation: Horovod's C++ code must match that torch exactly).
#
# We build with gloo (Horovod's own controller, no MPI needed), so `horovodrun --gloo`
# works on a laptop; MPI is added when an MPI compiler is found, NCCL when CUDA is.
#
# The wheel is cached in .cache/wheels/torch-<version>/ (one folder per torch version,
# because the compiled extension only loads with the torch it was built against), so
# later set-ups install it in seconds instead of compiling for about 2 minutes.
#
# Usage: scripts/build_horovod.sh PYTHON   (the interpreter of the target environment)
# Environment: WORKBENCH_WHEEL_CACHE (cache folder, default .cache/wheels),
#              CXX (C++ compiler, default g++), MAKEFLAGS (default -j<cores>).
set -euo pipefail

PY=${1:?usage: build_horovod.sh PYTHON}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=0.28.1
LOG="$ROOT/.cache/horovod-build.log"
CXX_BIN=${CXX:-g++}

note() { echo "horovod: $*"; }
# pip, without the "Location ... is ignored" warnings that some pip configurations print.
pipq() { "$PY" -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }
fail() {
    echo "horovod: Horovod was NOT installed: $1" >&2
    echo "horovod: how to fix: $2" >&2
    echo "horovod: the rest of the workbench still works with --engine torch and --engine serial." >&2
    exit 1
}

if "$PY" -c "import horovod.torch" 2>/dev/null; then
    note "Horovod $("$PY" -c 'import horovod; print(horovod.__version__)') already installed."
    exit 0
fi

torch_version=$("$PY" -c "import torch; print(torch.__version__)" 2>/dev/null) \
    || fail "torch is not installed in $PY" "run the whole set-up first: make setup"
CACHE="${WORKBENCH_WHEEL_CACHE:-$ROOT/.cache/wheels}/torch-$torch_version"
mkdir -p "$CACHE" "$(dirname "$LOG")"

# Every check that can fail before compiling, so the message names the missing piece.
preflight() {
    command -v "$CXX_BIN" >/dev/null 2>&1 \
        || fail "no C++ compiler ($CXX_BIN)" "install one: apt-get install g++ (or set CXX)"
    local major
    major=$("$CXX_BIN" -dumpversion 2>/dev/null | cut -d. -f1)
    if [ -n "$major" ] && [ "$major" -lt 7 ] 2>/dev/null; then
        fail "$CXX_BIN $major is too old for C++17" "install g++ 7 or newer (apt-get install g++)"
    fi
    if ! command -v cmake >/dev/null 2>&1; then
        note "cmake not found: installing it from PyPI into the environment."
        pipq install -q "cmake>=3.13,<4" || true
        export PATH="$(dirname "$PY"):$PATH"
        command -v cmake >/dev/null 2>&1 \
            || fail "cmake not found" "install it: apt-get install cmake (or pip install 'cmake<4')"
    fi
    "$PY" - <<'EOF' || fail "Python headers (Python.h) missing" "install them: apt-get install python3-dev"
import os, sysconfig
raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
EOF
}

# Explain the usual causes of a failed build from its log, then fail.
explain_failure() {
    tail -n 25 "$LOG" >&2
    echo >&2
    if grep -q "C++17 or later compatible compiler is required" "$LOG"; then
        fail "the C++ code was compiled as C++14, but PyTorch's headers need C++17" \
            "this script patches CMAKE_CXX_STANDARD to 17; if you build Horovod yourself, do the same"
    elif grep -q "No CMAKE_CXX_COMPILER could be found" "$LOG"; then
        fail "CMake found no C++ compiler" "apt-get install g++"
    elif grep -q "Python.h: No such file" "$LOG"; then
        fail "Python headers (Python.h) missing" "apt-get install python3-dev"
    elif grep -qE "internal compiler error: Killed|Killed signal terminated" "$LOG"; then
        fail "the compiler ran out of memory" "build with one job: MAKEFLAGS=-j1 make horovod"
    elif grep -q "fatal error: .*: No such file or directory" "$LOG"; then
        fail "a header file is missing: $(grep -m1 'fatal error:' "$LOG")" \
            "install the package that provides it (apt-cache search for its name)"
    fi
    fail "the build stopped (full log: $LOG)" \
        "common causes: missing cmake or g++, or Python headers (apt-get install cmake g++ python3-dev)"
}

build_wheel() {
    preflight
    local work src start
    work=$(mktemp -d)
    # shellcheck disable=SC2064  # expand $work now: it is local
    trap "rm -rf '$work'" EXIT
    start=$SECONDS
    note "building Horovod $VERSION from source for torch $torch_version" \
        "(about 2 minutes on 2 cores; log: .cache/horovod-build.log) ..."
    pipq download -q --no-deps --no-binary=:all: "horovod==$VERSION" -d "$work" || true
    [ -f "$work/horovod-$VERSION.tar.gz" ] \
        || fail "could not download the horovod==$VERSION source" "check that PyPI is reachable"
    tar -xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
    src="$work/horovod-$VERSION"
    # The C++17 fix: PyTorch's headers use C++17 features.
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt" \
        || fail "the C++17 patch did not apply" "report this: the sdist layout changed"
    # Optimised without debug symbols (Horovod's default is RelWithDebInfo): compiles
    # faster on 2 cores and makes a smaller wheel. HOROVOD_DEBUG=1 still gives Debug.
    sed -i "s/else 'RelWithDebInfo'/else 'Release'/" "$src/setup.py"

    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1
    export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
    if command -v mpicxx >/dev/null || command -v mpicc >/dev/null; then
        note "MPI compiler found: building with MPI as well as gloo."
        export HOROVOD_WITH_MPI=1
    else
        export HOROVOD_WITHOUT_MPI=1
    fi
    if [ -z "${HOROVOD_GPU_OPERATIONS:-}" ] && command -v nvcc >/dev/null \
        && "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        note "CUDA found: building with NCCL GPU operations."
        export HOROVOD_GPU_OPERATIONS=NCCL
    fi
    export CXX="$CXX_BIN" MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}"
    if ! "$PY" -m pip wheel -v --no-deps --no-build-isolation "$src" -w "$CACHE" >"$LOG" 2>&1; then
        explain_failure
    fi
    note "built in $((SECONDS - start)) s; wheel cached in ${CACHE#"$ROOT"/}/"
}

wheel=$(ls "$CACHE"/horovod-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
    note "using the cached wheel ${wheel#"$ROOT"/} (no build needed)."
else
    build_wheel
    wheel=$(ls "$CACHE"/horovod-"$VERSION"-*.whl | head -n 1)
fi
pipq install -q --no-deps "$wheel" || fail "pip could not install $wheel" "delete it and run: make horovod"
# Horovod's own run-time dependencies (its wheel was installed with --no-deps).
pipq install -q cloudpickle psutil pyyaml packaging \
    || fail "pip could not install Horovod's dependencies" "check that PyPI is reachable"
"$PY" -c "import horovod.torch" \
    || fail "the installed wheel does not import" "delete $CACHE and run: make horovod"
note "Horovod $VERSION installed."
