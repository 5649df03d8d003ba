#!/usr/bin/env bash
# Build Horovod 0.28.1 from its PyPI source distribution, with the C++17 fix, and install it.
#
# Why: Horovod 0.28.1 (its last release) asks CMake for C++14, but PyTorch >= 2.1
# headers need C++17 (and from 2.14 C++20); compiling them as C++14 stops at
#     #error C++17 or later compatible compiler is required to use ATen.
# The upstream fix was merged after the release and never published, so we download
# the sdist (checking its sha256 against the one PyPI publishes), raise
# CMAKE_CXX_STANDARD to 17 (20 where torch's ATen.h asks for it) in the two CMake files
# that set it, and build a wheel against
# the torch already installed in the environment (--no-build-isolation: Horovod's C++ code
# must match that torch exactly).
#
# We build with gloo (Horovod's own controller, no MPI needed), so `horovodrun --gloo`
# works on a laptop; MPI is added when an MPI compiler is found.
#
# GPUs: when the installed torch is a CUDA build (torch.version.cuda), Horovod is built
# with NCCL GPU operations, whether or not a GPU is visible here: a build on a cluster's
# login node must work on its GPU nodes. That needs the CUDA compiler (nvcc) of the same
# major CUDA version, and NCCL: the system's if it has one, else the NCCL that pip's torch
# ships in site-packages/nvidia/nccl (the library torch itself loads, so each process has
# one NCCL). HOROVOD_GPU_OPERATIONS set by you wins; WORKBENCH_HOROVOD_GPU=0 builds
# without GPU operations on purpose.
#
# The wheel is cached in .cache/wheels/<key>/, the key being everything the compiled
# extension depends on: torch version, CUDA version, Python tag and GPU operations, e.g.
# torch-2.13.0+cu121-cuda-12.1-cp311-nccl. So a CPU wheel is never reused on a GPU host
# that shares the home folder, and later set-ups install in seconds instead of compiling
# for about 2 minutes. The checked sdist is kept in .cache/wheels/sdist/.
#
# Usage: scripts/build_horovod.sh PYTHON [--dry-run | --wheel-only]
#   PYTHON        the interpreter of the target environment
#   --dry-run     print the cache folder, the HOROVOD_* build settings and the build command,
#                 then stop: nothing is downloaded, compiled or installed
#   --wheel-only  build the wheel into the cache (or find it there) and stop: nothing is
#                 installed, so scripts/setup.sh can compile while pip installs the rest
# Environment: WORKBENCH_WHEEL_CACHE (cache folder, default .cache/wheels),
#              WORKBENCH_HOROVOD_SDIST (a local horovod-0.28.1.tar.gz to use instead of
#              downloading it; its sha256 is checked all the same),
#              CUDA_HOME (the CUDA toolkit, when nvcc is not on PATH),
#              CXX (C++ compiler, default g++), MAKEFLAGS (default -j<cores>).
set -euo pipefail

PY=${1:?usage: build_horovod.sh PYTHON [--dry-run | --wheel-only]}
DRY_RUN=0 WHEEL_ONLY=0
case "${2:-}" in
    --dry-run) DRY_RUN=1 ;;
    --wheel-only) WHEEL_ONLY=1 ;;
    "") ;;
    *) echo "build_horovod.sh: unknown option ${2} (use --dry-run or --wheel-only)" >&2; exit 2 ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=0.28.1
# sha256 of horovod-0.28.1.tar.gz, as PyPI publishes it (https://pypi.org/simple/horovod/).
SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
WHEELS="${WORKBENCH_WHEEL_CACHE:-$ROOT/.cache/wheels}"
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

if [ "$DRY_RUN" = 0 ] && "$PY" -c "import horovod.torch" 2>/dev/null; then
    note "Horovod $("$PY" -c 'import horovod; print(horovod.__version__)') already installed."
    exit 0
fi

# What the compiled extension depends on: torch's version and CUDA version and the Python
# tag (the GPU operations come below); and where torch lives, to find the NCCL it ships.
TORCH_PROBE='import os, sys, torch
print(torch.__version__, torch.version.cuda or "none",
      f"cp{sys.version_info[0]}{sys.version_info[1]}",
      os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))))'
probe=$("$PY" -c "$TORCH_PROBE" 2>/dev/null) \
    || fail "torch is not installed in $PY" "run the whole set-up first: make setup"
read -r torch_version cuda_version py_tag torch_site <<<"$probe"

work=$(mktemp -d)
# shellcheck disable=SC2064  # expand $work now
trap "rm -rf '$work'" EXIT

# The CUDA compiler: nvcc on PATH, else $CUDA_HOME/bin/nvcc (default /usr/local/cuda).
find_nvcc() {
    if command -v nvcc >/dev/null 2>&1; then
        command -v nvcc
    elif [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
        echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
    fi
}

# NCCL for Horovod's GPU operations: yours (HOROVOD_NCCL_HOME), the system's (beside CUDA
# or in /usr), else the one pip's torch ships. That one has only libnccl.so.2, and CMake
# looks for libnccl.so, so a link to it is made in the build folder; it is linked as a
# shared library, as torch links it.
use_nccl() {
    local cuda_home=$1 include nccl
    if [ -n "${HOROVOD_NCCL_HOME:-}" ]; then
        note "NCCL: HOROVOD_NCCL_HOME=$HOROVOD_NCCL_HOME (yours)."
        return
    fi
    for include in "$cuda_home/include" /usr/include /usr/local/include; do
        if [ -f "$include/nccl.h" ]; then
            note "NCCL: the system's ($include/nccl.h)."
            return
        fi
    done
    nccl="$torch_site/nvidia/nccl"
    if [ ! -f "$nccl/include/nccl.h" ] || ! ls "$nccl"/lib/libnccl.so* >/dev/null 2>&1; then
        fail "no NCCL found (neither the system's nor the one pip's torch ships in $nccl)" \
            "install it: pip install nvidia-nccl-cu${cuda_version%%.*} (or apt-get install libnccl-dev)"
    fi
    export HOROVOD_NCCL_HOME="$nccl" HOROVOD_NCCL_INCLUDE="$nccl/include" \
        HOROVOD_NCCL_LINK=SHARED HOROVOD_NCCL_LIB="$nccl/lib"
    if [ ! -e "$nccl/lib/libnccl.so" ]; then
        mkdir -p "$work/nccl-lib"
        ln -s "$(ls "$nccl"/lib/libnccl.so.* | head -n 1)" "$work/nccl-lib/libnccl.so"
        export HOROVOD_NCCL_LIB="$work/nccl-lib"
    fi
    note "NCCL: the one PyTorch ships ($nccl)."
}

# Decide the GPU operations ($gpu_ops: none or nccl) and export what their build needs.
choose_gpu_operations() {
    local nvcc nvcc_version cuda_home
    if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then
        gpu_ops=$(echo "$HOROVOD_GPU_OPERATIONS" | tr '[:upper:]' '[:lower:]')
        note "GPU operations: HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS (yours)."
        return
    fi
    gpu_ops=none
    if [ "$cuda_version" = none ] || [ "${WORKBENCH_HOROVOD_GPU:-1}" = 0 ]; then
        return
    fi
    nvcc=$(find_nvcc)
    [ -n "$nvcc" ] || fail "torch is a CUDA $cuda_version build, but no CUDA compiler (nvcc) was found" \
        "install the CUDA toolkit ${cuda_version%%.*}.x (or load its module) and set CUDA_HOME; or build without GPU operations: WORKBENCH_HOROVOD_GPU=0 make horovod"
    nvcc_version=$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' | head -n 1)
    if [ "${nvcc_version%%.*}" != "${cuda_version%%.*}" ]; then
        fail "nvcc is CUDA ${nvcc_version:-?} but torch was built with CUDA $cuda_version" \
            "put a CUDA ${cuda_version%%.*}.x nvcc first on PATH (or set CUDA_HOME to that toolkit)"
    fi
    cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
    gpu_ops=nccl
    export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME="$cuda_home"
    note "CUDA torch ($cuda_version), nvcc $nvcc_version: building with NCCL GPU operations."
    use_nccl "$cuda_home"
}

choose_gpu_operations
# The C++ standard torch's headers ask for (ATen.h: "C++20 or later ... is required").
cxx_std=17
grep -q "C++20 or later" "$torch_site/torch/include/ATen/ATen.h" 2>/dev/null && cxx_std=20
CACHE="$WHEELS/torch-$torch_version-cuda-$cuda_version-$py_tag-$gpu_ops"
mkdir -p "$(dirname "$LOG")"
# Wheels cached before the key named CUDA and GPU operations sit in torch-<version>/;
# that of a +cpu torch can only be a CPU wheel, so it moves to its full key.
legacy="$WHEELS/torch-$torch_version"
if [ "$gpu_ops" = none ] && [[ "$torch_version" == *+cpu ]] \
    && ls "$legacy"/horovod-"$VERSION"-"$py_tag"-*.whl >/dev/null 2>&1; then
    mkdir -p "$CACHE"
    mv "$legacy"/horovod-"$VERSION"-"$py_tag"-*.whl "$CACHE"/
    rmdir "$legacy" 2>/dev/null || true
fi

# The major version of the cmake on PATH, or "none".
cmake_major() {
    local v
    v=$(cmake --version 2>/dev/null | sed -n '1s/^cmake version \([0-9]*\).*/\1/p')
    echo "${v:-none}"
}

# Every check that can fail before compiling, so the message names the missing piece.
preflight() {
    command -v "$CXX_BIN" >/dev/null 2>&1 \
        || fail "no C++ compiler ($CXX_BIN)" "install one: apt-get install g++ (or set CXX)"
    local major need
    major=$("$CXX_BIN" -dumpversion 2>/dev/null | cut -d. -f1)
    need=$([ "$cxx_std" = 20 ] && echo 10 || echo 7)     # the first g++ of that standard
    if [ -n "$major" ] && [ "$major" -lt "$need" ] 2>/dev/null; then
        fail "$CXX_BIN $major is too old for C++$cxx_std" "install g++ $need or newer (apt-get install g++)"
    fi
    # CMake 4 refuses the CMake 2.8 minimum of the gloo and flatbuffers that Horovod bundles
    # ("Compatibility with CMake < 3.5 has been removed"): a CMake 3 is needed.
    local cmake_version
    cmake_version=$(cmake_major)
    if [ "$cmake_version" = none ] || [ "$cmake_version" -ge 4 ]; then
        note "no CMake 3 on PATH ($cmake_version): installing one from PyPI into the environment."
        pipq install -q "cmake>=3.13,<4" || true
        export PATH="$(dirname "$PY"):$PATH"
        [ "$(cmake_major)" = 3 ] || fail "CMake 3 not found (Horovod $VERSION cannot be configured by CMake 4)" \
            "install a CMake 3 (apt-get install cmake on Debian 12 or Ubuntu 24.04), or pip install 'cmake<4'"
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
    if grep -qE "C\+\+(17|20) or later compatible compiler is required" "$LOG"; then
        fail "the C++ code was compiled as C++14, but PyTorch's headers need C++$cxx_std" \
            "this script patches CMAKE_CXX_STANDARD to $cxx_std; if you build Horovod yourself, do the same"
    elif grep -q "No CMAKE_CXX_COMPILER could be found" "$LOG"; then
        fail "CMake found no C++ compiler" "apt-get install g++"
    elif grep -q "Python.h: No such file" "$LOG"; then
        fail "Python headers (Python.h) missing" "apt-get install python3-dev"
    elif grep -qE "internal compiler error: Killed|Killed signal terminated" "$LOG"; then
        fail "the compiler ran out of memory" "build with one job: MAKEFLAGS=-j1 make horovod"
    elif grep -q "Compatibility with CMake < 3.5 has been removed" "$LOG"; then
        fail "CMake 4 cannot configure Horovod $VERSION's bundled gloo" "pip install 'cmake<4'"
    elif grep -q "Could NOT find NCCL" "$LOG"; then
        fail "CMake did not find NCCL" "set HOROVOD_NCCL_HOME to a folder with include/nccl.h and lib/libnccl.so"
    elif grep -q "fatal error: .*: No such file or directory" "$LOG"; then
        fail "a header file is missing: $(grep -m1 'fatal error:' "$LOG")" \
            "install the package that provides it (apt-cache search for its name)"
    fi
    fail "the build stopped (full log: $LOG)" \
        "common causes: missing cmake or g++, or Python headers (apt-get install cmake g++ python3-dev)"
}

# The sdist, checked against PyPI's sha256: a local one, the cached one, or a download.
fetch_sdist() {
    local dest=$1 cached="$WHEELS/sdist/horovod-$VERSION.tar.gz" got
    mkdir -p "$WHEELS/sdist"
    if [ -n "${WORKBENCH_HOROVOD_SDIST:-}" ]; then
        cp "$WORKBENCH_HOROVOD_SDIST" "$dest" \
            || fail "cannot read WORKBENCH_HOROVOD_SDIST=$WORKBENCH_HOROVOD_SDIST" \
                "point it at a copy of horovod-$VERSION.tar.gz"
    elif [ -f "$cached" ]; then
        cp "$cached" "$dest"
    else
        pipq download -q --no-deps --no-binary=:all: "horovod==$VERSION" -d "$(dirname "$dest")" || true
        [ -f "$dest" ] \
            || fail "could not download the horovod==$VERSION source" "check that PyPI is reachable"
    fi
    got=$(sha256sum "$dest" | cut -d' ' -f1)
    if [ "$got" != "$SDIST_SHA256" ]; then
        rm -f "$cached"
        fail "the horovod-$VERSION source has sha256 $got, not $SDIST_SHA256 as PyPI publishes" \
            "it is damaged or not the real release: delete it and run make horovod again"
    fi
    [ -f "$cached" ] || cp "$dest" "$cached"
}

export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1
export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
if command -v mpicxx >/dev/null || command -v mpicc >/dev/null; then
    note "MPI compiler found: building with MPI as well as gloo."
    export HOROVOD_WITH_MPI=1
else
    export HOROVOD_WITHOUT_MPI=1
fi
export CXX="$CXX_BIN" MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}"
BUILD_COMMAND=("$PY" -m pip wheel -v --no-deps --no-build-isolation)

build_wheel() {
    local src start
    start=$SECONDS
    preflight
    fetch_sdist "$work/horovod-$VERSION.tar.gz"
    note "building Horovod $VERSION from source for torch $torch_version" \
        "(about 2 minutes on 2 cores; log: .cache/horovod-build.log) ..."
    tar -xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
    src="$work/horovod-$VERSION"
    # The C++17 fix: PyTorch's headers use C++17 features (C++20 ones from torch 2.14).
    sed -i "s/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD $cxx_std/" \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q "CMAKE_CXX_STANDARD $cxx_std" "$src/horovod/torch/CMakeLists.txt" \
        || fail "the C++$cxx_std patch did not apply" "report this: the sdist layout changed"
    # GCC 13 no longer brings <string> and <stdexcept> in through other headers, and two
    # of Horovod's headers relied on that ("'logic_error' is not a member of 'std'").
    sed -i 's/^#include <functional>$/&\n#include <stdexcept>/' "$src/horovod/common/common.h"
    sed -i 's/^#include <mutex>$/&\n#include <string>/' "$src/horovod/common/group_table.h"
    grep -q '#include <stdexcept>' "$src/horovod/common/common.h" \
        && grep -q '#include <string>' "$src/horovod/common/group_table.h" \
        || fail "the GCC 13 include patch did not apply" "report this: the sdist layout changed"
    # Without GPU operations against a CUDA build of torch (a CPU-only machine, say), Horovod's
    # CMake would still compile its CUDA code wherever torch finds any CUDA toolkit
    # (FindPytorch.cmake), and stop on a partial one or one of another CUDA version: it
    # builds for the CPU instead, as for a CPU build of torch.
    if [ "$gpu_ops" = none ] && [ "$cuda_version" != none ]; then
        sed -i 's/^string(TOUPPER "${Pytorch_CUDA}" Pytorch_CUDA)$/set(Pytorch_CUDA FALSE)/' \
            "$src/cmake/Modules/FindPytorch.cmake"
        grep -q '^set(Pytorch_CUDA FALSE)$' "$src/cmake/Modules/FindPytorch.cmake" \
            || fail "the CPU-only patch did not apply" "report this: the sdist layout changed"
    fi
    # Optimised without debug symbols (Horovod's default is RelWithDebInfo): compiles
    # faster on 2 cores and makes a smaller wheel. HOROVOD_DEBUG=1 still gives Debug.
    sed -i "s/else 'RelWithDebInfo'/else 'Release'/" "$src/setup.py"
    mkdir -p "$CACHE"
    if ! "${BUILD_COMMAND[@]}" "$src" -w "$CACHE" >"$LOG" 2>&1; then
        explain_failure
    fi
    note "built in $((SECONDS - start)) s; wheel cached in ${CACHE#"$ROOT"/}/"
}

if [ "$DRY_RUN" = 1 ]; then
    note "dry run: cache folder $CACHE"
    env | grep '^HOROVOD_' | sort | sed 's/^/horovod: dry run: /'
    note "dry run: CMAKE_CXX_STANDARD=$cxx_std"
    if [ "$gpu_ops" = none ] && [ "$cuda_version" != none ]; then
        note "dry run: Pytorch_CUDA=FALSE"      # no CUDA code: see build_wheel
    fi
    note "dry run: command ${BUILD_COMMAND[*]} <horovod-$VERSION source> -w $CACHE"
    exit 0
fi

wheel=$(ls "$CACHE"/horovod-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
    note "using the cached wheel ${wheel#"$ROOT"/} (no build needed)."
else
    build_wheel
    wheel=$(ls "$CACHE"/horovod-"$VERSION"-*.whl | head -n 1)
fi
if [ "$WHEEL_ONLY" = 1 ]; then
    note "wheel ready: ${wheel#"$ROOT"/} (not installed: --wheel-only)."
    exit 0
fi
pipq install -q --no-deps "$wheel" || fail "pip could not install $wheel" "delete it and run: make horovod"
# Horovod's own run-time dependencies (its wheel was installed with --no-deps).
pipq install -q cloudpickle psutil pyyaml packaging \
    || fail "pip could not install Horovod's dependencies" "check that PyPI is reachable"
"$PY" -c "import horovod.torch" \
    || fail "the installed wheel does not import" "delete $CACHE and run: make horovod"
note "Horovod $VERSION installed."
